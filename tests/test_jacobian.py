"""solver.numerics.jacobian.jacfwd equals jax.jacfwd, and its basis is literal data in the compiled program;
with_value gives a Jacobian transform the value too, from one evaluation of the function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import solver  # noqa: F401  (x64)
from solver.integrate.integrator import take_static
from solver.numerics.jacobian import jacfwd, with_value


def f_tree(x):
    a, b = x["a"], x["b"]
    return {"u": jnp.sin(a) * b[0, 1], "v": jnp.stack([a[0] * a[1], jnp.sum(b ** 2), jnp.exp(b[1, 0])])}


X = {"a": jnp.asarray([0.3, -1.2]), "b": jnp.asarray([[1.0, 2.0], [0.5, -0.7]])}


def test_pytree_jacobian_equals_jax_jacfwd():
    ours, theirs = jacfwd(f_tree)(X), jax.jacfwd(f_tree)(X)
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs)
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)


def test_has_aux_returns_the_aux_unbatched():
    g = lambda z: (jnp.stack([z[0] * z[1], jnp.cos(z[2])]), z[0] + 1.0)
    z = jnp.asarray([2.0, 3.0, 0.5])
    (J, aux), (J_ref, aux_ref) = jacfwd(g, has_aux=True)(z), jax.jacfwd(g, has_aux=True)(z)
    np.testing.assert_allclose(J, J_ref, rtol=0, atol=1e-15)
    assert J.shape == (2, 3) and float(aux) == float(aux_ref) == 3.0


@pytest.mark.xla_internals
@pytest.mark.parametrize("transform", [jacfwd, jax.jacfwd, jax.jacrev], ids=["ours", "jacfwd", "jacrev"])
def test_with_value_gives_the_value_from_one_trace(transform):
    calls = []

    def g(z):
        calls.append(1)
        return jnp.stack([z[0] * z[1], jnp.cos(z[2])])

    z = jnp.asarray([0.4, -2.0, 1.1])
    J, value = transform(with_value(g), has_aux=True)(z)
    assert len(calls) == 1
    np.testing.assert_array_equal(value, g(z))
    np.testing.assert_allclose(J, jax.jacfwd(g)(z), rtol=0, atol=1e-15)


def test_no_iota_left_in_the_compiled_jacobian():
    g = lambda z: jnp.stack([z[0] * z[1], z[1] * z[2], z[2] * z[0]])
    ours = jax.jit(jacfwd(g)).lower(jnp.ones(3)).compile().as_text()
    theirs = jax.jit(jax.jacfwd(g)).lower(jnp.ones(3)).compile().as_text()
    assert " iota(" in theirs  # what jacfwd's jnp.eye basis leaves behind
    assert " iota(" not in ours


@pytest.mark.parametrize("rows, cols", [([0, 0, 1, 1, 2], [0, 1, 0, 1, 3]), ([1, 1, 1], [2, 3, 4]), ([], []),
                                        ([2, 0, 1], [0, 0, 0])])
def test_take_static_equals_fancy_indexing(rows, cols):
    A = jnp.arange(20.0).reshape(4, 5)
    np.testing.assert_array_equal(take_static(A, np.array(rows, int), np.array(cols, int)),
                                  np.asarray(A)[np.array(rows, int), np.array(cols, int)])


def test_a_large_input_keeps_an_iota_basis_and_the_same_jacobian():
    # Past CONSTANT_IDENTITY_MAX inputs the basis is jnp.eye: as a constant it
    # would put n² numbers into the executable.
    from solver.numerics.linalg import CONSTANT_IDENTITY_MAX, identity

    n = CONSTANT_IDENTITY_MAX + 1
    assert isinstance(identity(CONSTANT_IDENTITY_MAX), np.ndarray)
    assert not isinstance(identity(n), np.ndarray)
    g = lambda z: jnp.cumsum(z ** 2)[::50]
    z = jnp.linspace(0.0, 1.0, n)
    np.testing.assert_allclose(jacfwd(g)(z), jax.jacfwd(g)(z), rtol=0, atol=1e-15)
