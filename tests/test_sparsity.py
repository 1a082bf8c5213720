"""Dependency patterns (solver/dae/sparsity.py): which unknown, at which order, every equation reads.

Specification: for a residual traced to a jaxpr, the structural pattern has
an entry (i, j) exactly where equation i depends on unknown j, and its value
is 1 + the highest derivative order of x_j that equation i reads.  It is
found without evaluating anything numerically, and it agrees with the
nonzeros of the numeric Jacobian (``jax.jacfwd``, computed here as the
reference) at a random point; where a dependency cannot be known from the
structure alone (an index computed from the unknowns) the pattern is a
superset.  ``ddt(e)`` raises every order below it by one, as the total time
derivative of e does.  A primitive with no rule is named in an
:class:`UnsupportedPrimitiveError`, the one error class the Taylor engine
raises too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core

import solver
from solver.dae.csr import CSR
from solver.dae import primitives
from solver.dae import sparsity
from solver.taylor import program as taylor
from solver.dae.problem import DAE, ddt
from solver.dae.derivative import ddt_p
from solver.dae.sparsity import UnsupportedPrimitiveError, dependency_pattern, jaxpr_dependencies
from solver.dae.structure import NEG_INF, signature, signature_matrix

N = NEG_INF


# ------------------------------------------------------------- references
def numeric_sigma(f, n_in=6, levels=3, seed=0):
    """σ from the nonzeros of jacfwd at a random point (reference only)."""
    rng = np.random.default_rng(seed)
    args = [jnp.asarray(rng.uniform(0.3, 1.7, n_in)) for _ in range(levels)]
    out = f(*args)
    sig = np.full((out.size, n_in), N, dtype=np.int64)
    for lvl in range(levels):
        jac = np.asarray(jax.jacfwd(f, argnums=lvl)(*args)).reshape(out.size, n_in)
        sig[jac != 0] = lvl
    return sig


def structural_sigma(f, n_in=6, levels=3):
    args = [jnp.zeros(n_in) for _ in range(levels)]
    closed = jax.make_jaxpr(f)(*args)
    deps = [CSR(np.full(n_in, lvl + 1), np.arange(n_in), np.arange(n_in + 1), (n_in, n_in))
            for lvl in range(levels)]
    (out,) = jaxpr_dependencies(closed, deps, n_in, ddt_p)
    sig = np.full((closed.out_avals[0].size, n_in), N, dtype=np.int64)
    if out is not None:
        sig[out.toarray() > 0] = out.toarray()[out.toarray() > 0] - 1
    return sig


# --------------------------------------- vectorised operations, one by one
@jax.jit
def _pick(x):
    """A jitted helper that also returns the (constant) index array it used."""
    idx = jnp.array([2, 0])
    return x[idx], idx


_A = np.array([[1.0, 0, 0, 2, 0, 0], [0, 0, 0, 0, 0, 3], [0, 4, 5, 0, 0, 0]])
VECTORISED = {
    "cross": lambda x, v, a: jnp.cross(x[:3], a[3:]),
    "constant sparse matvec": lambda x, v, a: jnp.asarray(_A) @ v + x[:3],
    "cumsum and reverse": lambda x, v, a: jnp.cumsum(v) * x[::-1],
    "roll": lambda x, v, a: jnp.roll(x, 2) + a,
    "gather with index array": lambda x, v, a: x[jnp.array([5, 0, 0, -3])] * v[jnp.array([1, 2, 3, 4])],
    "scatter-add with duplicates": lambda x, v, a: jnp.zeros(6).at[jnp.array([0, 3, 3])].add(v[:3]) + x,
    "scatter set overwrites": lambda x, v, a: (x * 2.0).at[2].set(a[0]),
    "norm with keepdims": lambda x, v, a: (x.reshape(2, 3) / jnp.linalg.norm(x.reshape(2, 3), axis=1,
                                                                                 keepdims=True)).ravel(),
    "batched einsum": lambda x, v, a: jnp.einsum("bi,bi->b", x.reshape(2, 3), a.reshape(2, 3)),
    "outer": lambda x, v, a: jnp.outer(x[:2], v[4:]).ravel(),
    "transpose and flip": lambda x, v, a: jnp.flip(x.reshape(2, 3).T, axis=0).ravel() * v[0],
    "concatenate and stack": lambda x, v, a: jnp.concatenate([x[:2], jnp.stack([v[3], a[5]])]),
    "tile and diff": lambda x, v, a: jnp.diff(jnp.tile(x[:2], 3)),
    "dynamic slices": lambda x, v, a: lax.dynamic_slice(x, (2,), (3,))
    + lax.dynamic_update_slice(v, a[:2], (1,))[:3],
    "custom_jvp softplus": lambda x, v, a: jax.nn.softplus(x) * v,
    "pow atan2 exp": lambda x, v, a: jnp.sin(x) ** v + jnp.arctan2(x, a) + jnp.exp(-x ** 2),
    "interior padding": lambda x, v, a: lax.pad(x[:3], 0.0, [(1, 1, 1)]) + v[0],
    "sum and prod": lambda x, v, a: jnp.sum(x[:4]) * jnp.prod(v[:2]) + a[1:4],
    "dense linear solve": lambda x, v, a: jnp.linalg.solve(jnp.outer(x[:3], x[3:]) + jnp.eye(3), v[:3]),
    "matrix product": lambda x, v, a: (x.reshape(2, 3) @ v.reshape(3, 2)).ravel(),
    "split": lambda x, v, a: jnp.split(x, 3)[1] * v[:2],
    "unstack": lambda x, v, a: jnp.unstack(x.reshape(2, 3))[1] + a[:3],
    "gather filling out of bounds": lambda x, v, a: x.at[jnp.array([1, 9])].get(mode="fill", fill_value=0.0)
    + v[:2],
    "where with a constant mask": lambda x, v, a: jnp.where(jnp.arange(6) > 2, x, a) * jnp.linalg.norm(v[:2]),
    "fractional power": lambda x, v, a: x ** 1.5 + jnp.abs(v - 3.0),
    "index array returned by a jitted helper": lambda x, v, a: _pick(x)[0] + a[_pick(x)[1]],
    "checkpoint": lambda x, v, a: jax.checkpoint(lambda y: jnp.sin(y) * v)(x),
}


@pytest.mark.parametrize("name", sorted(VECTORISED))
def test_vectorised_ops_match_jacobian_sparsity(name):
    f = VECTORISED[name]
    np.testing.assert_array_equal(structural_sigma(f), numeric_sigma(f))


def test_select_and_clamp_keep_every_branch_and_sign_drops_out():
    """where/clip depend on all branches; sign(x) is piecewise constant."""
    sig = structural_sigma(lambda x, v, a: jnp.concatenate([
        jnp.where(x[:2] > 0, v[:2], a[:2]),
        jnp.clip(x[2:4], v[0], 1.0),
        jnp.sign(v[4:6]) + x[4:6]]))
    expect = np.full((6, 6), N)
    expect[0, 0], expect[1, 1] = 2, 2          # a_i (x only in the predicate)
    expect[2, 2], expect[3, 3] = 0, 0
    expect[2, 0] = expect[3, 0] = 1            # the clip bound v_0
    expect[4, 4], expect[5, 5] = 0, 0          # x, not sign(v)
    np.testing.assert_array_equal(sig, expect)


@jax.custom_vjp
def _square(x):
    return x ** 2


_square.defvjp(lambda x: (x ** 2, x), lambda x, g: (2 * x * g,))


def test_cond_custom_vjp_and_parameter_indices():
    """cond joins its branches; custom_vjp is read through; an index that
    depends on a parameter may pick any element (conservative)."""
    def residual(t, v, p):
        x, y, q = v["x"], v["y"], v["q"]
        branch = lax.cond(t > 1.0, lambda a, b: a, lambda a, b: 2.0 * b, y[0], x[0])
        pick = q[0][p["k"].astype(int)]
        return [x[1] - branch, _square(y[0]) * q[2][0] - t, q[1] - pick]

    sig = signature_matrix(DAE(residual, {"x": None, "y": None, "q": 2}, {"k": 1.0}))
    np.testing.assert_array_equal(sig, [[1, 0, N, N], [N, 0, 2, N], [N, N, 1, 0], [N, N, 0, 1]])


# ------------------------------------------------ random residuals, two references
FUNCS = {"sin": jnp.sin, "exp": jnp.exp, "tanh": jnp.tanh, "cube": lambda u: u ** 3,
         "softplus": jax.nn.softplus, "square plus": lambda u: u * u + u, "sqrt": jnp.sqrt}


def random_residual(seed, n_out, density, funcs, combine, levels, n_in=5):
    """f(x_0, …, x_{levels-1}) and its σ written out from how it is built.

    Term l is ``C_l @ φ_l(x_l[perm_l])`` with a random constant sparse C_l
    (coefficients of magnitude 0.5-1.5, so nothing cancels), and the terms
    are combined elementwise, no factor of a product being identically
    zero.  Output i then reads x_l[j] exactly where C_l[i, k] ≠ 0 for the k
    with perm_l[k] = j.
    """
    rng = np.random.default_rng(seed)
    masks = rng.random((levels, n_out, n_in)) < density
    coef = np.where(masks, rng.uniform(0.5, 1.5, masks.shape) * rng.choice([-1.0, 1.0], masks.shape), 0.0)
    perms = [rng.permutation(n_in) for _ in range(levels)]

    def f(*xs):
        t = [jnp.asarray(coef[l]) @ FUNCS[funcs[l % len(funcs)]](xs[l][perms[l]]) for l in range(levels)]
        if combine == "sum":
            return sum(t)
        if combine == "product":
            return (0.5 + t[0]) * (1.5 + t[1]) + sum(t[2:])
        return jnp.exp(t[0]) * (1.5 + t[-1]) - sum(t[1:-1])

    sigma = np.full((n_out, n_in), N, dtype=np.int64)
    for l in range(levels):
        sigma[masks[l][:, np.argsort(perms[l])]] = l
    return f, sigma


residuals = dict(seed=st.integers(0, 2**32 - 1), n_out=st.integers(1, 5), density=st.floats(0.1, 0.9),
                 funcs=st.lists(st.sampled_from(sorted(FUNCS)), min_size=3, max_size=3),
                 combine=st.sampled_from(["sum", "product", "exp"]))


@settings(max_examples=30, deadline=None)
@given(**residuals)
def test_pattern_of_a_random_residual_is_the_jacobians_nonzeros(seed, n_out, density, funcs, combine):
    f, sigma = random_residual(seed, n_out, density, funcs, combine, levels=3)
    np.testing.assert_array_equal(structural_sigma(f, n_in=5), sigma)
    np.testing.assert_array_equal(numeric_sigma(f, n_in=5, seed=seed % 1000), sigma)


@settings(max_examples=20, deadline=None)
@given(times=st.integers(1, 2), **residuals)
def test_ddt_raises_every_order_below_it_like_the_total_time_derivative(times, seed, n_out, density, funcs,
                                                                        combine):
    # g reads x_0, x_1; ddt^times(g) is compared with the total derivative
    # d/dt g = Σ_l ∂g/∂x_l · x_{l+1}, written with jax.jvp.
    g, sigma_g = random_residual(seed, n_out, density, funcs, combine, levels=2)
    levels = 2 + times

    def with_ddt(*xs):
        out = g(*xs[:2])
        for _ in range(times):
            out = ddt(out)
        return out

    def total(*xs):
        h = g
        for k in range(times):
            h = (lambda h, k: lambda *ys: jax.jvp(h, ys[:2 + k], ys[1:3 + k])[1])(h, k)
        return h(*xs)

    expect = np.where(sigma_g == N, N, sigma_g + times)
    np.testing.assert_array_equal(structural_sigma(with_ddt, n_in=5, levels=levels), expect)
    np.testing.assert_array_equal(numeric_sigma(total, n_in=5, levels=levels, seed=seed % 1000), expect)


# ------------------------------------------------------------ the DAE pattern
def test_dae_pattern_has_one_plus_sigma_per_equation_and_unknown():
    # q'' + λ q − g t = 0 (three rows), d/dt(q·q') − sin t = 0 (one row):
    # time and parameters are no unknowns; ddt(q·q') reads q'' (order 2).
    def residual(t, v, p):
        q, lam = v["q"], v["lam"]
        return [q[2] + lam[0] * q[0] - p["g"] * t, ddt(jnp.sum(q[0] * q[1])) - jnp.sin(t)]

    dae = DAE(residual, {"q": 3, "lam": None}, {"g": 9.81})
    pattern = dependency_pattern(dae)
    assert isinstance(pattern, CSR) and pattern.shape == (4, 4)
    for r in range(4):   # sorted columns within each row, none twice
        assert np.all(np.diff(pattern.indices[pattern.indptr[r]:pattern.indptr[r + 1]]) > 0)
    np.testing.assert_array_equal(pattern.toarray(), [[3, 0, 0, 1],
                                                      [0, 3, 0, 1],
                                                      [0, 0, 3, 1],
                                                      [3, 3, 3, 0]])
    P = pattern.toarray()
    np.testing.assert_array_equal(signature(dae).todense(), np.where(P > 0, P - 1, N))


def test_an_index_computed_from_the_unknowns_may_pick_any_element():
    # Structure cannot tell which element argmax(v) picks: every x_j is kept
    # (a superset of the Jacobian's nonzeros at any one point), and v itself,
    # read only through an integer, is not a dependency.
    f = lambda x, v, a: x[jnp.argmax(v)] * jnp.ones(2) + a[:2]
    expect = np.zeros((2, 6), np.int64)
    expect[[0, 1], [0, 1]] = 2
    np.testing.assert_array_equal(structural_sigma(f), expect)
    num = numeric_sigma(f)
    assert np.all((num == N) | (num == expect)) and np.sum(num == 0) == 2


def test_integer_boolean_and_piecewise_constant_values_carry_no_dependency():
    f = lambda x, v, a: (x > 1.0).astype(jnp.float64) * 3.0 + jnp.floor(v) + a.astype(jnp.int32) + a
    np.testing.assert_array_equal(structural_sigma(f), np.where(np.eye(6, dtype=bool), 2, N))


# ---------------------------------------------------------- calls, errors
def _inline(x, v, a):
    return jnp.sin(x[:3]) * v[3:] + a[1]


@jax.custom_jvp
def _inline_custom_jvp(x, v, a):
    return _inline(x, v, a)


_inline_custom_jvp.defjvp(lambda primals, tangents: (_inline(*primals), jax.jvp(_inline, primals, tangents)[1]))


@jax.custom_vjp
def _inline_custom_vjp(x, v, a):
    return _inline(x, v, a)


_inline_custom_vjp.defvjp(lambda x, v, a: (_inline(x, v, a), (x, v, a)),
                          lambda res, g: jax.vjp(_inline, *res)[1](g))


@pytest.mark.parametrize("wrapped", [jax.jit(_inline), jax.checkpoint(_inline), _inline_custom_jvp,
                                     _inline_custom_vjp, jax.jit(jax.jit(_inline))],
                         ids=["jit", "checkpoint", "custom_jvp", "custom_vjp", "nested jit"])
def test_call_primitives_are_looked_through(wrapped):
    closed = jax.make_jaxpr(wrapped)(*[jnp.zeros(6)] * 3)
    assert any(e.primitive.name in primitives.CALL_JAXPR_PARAM for e in closed.jaxpr.eqns)
    expect = np.full((3, 6), N)
    expect[[0, 1, 2], [0, 1, 2]] = 0                 # sin(x_i)
    expect[[0, 1, 2], [3, 4, 5]] = 1                 # v_{i+3}
    expect[:, 1] = np.maximum(expect[:, 1], 2)       # a_1
    np.testing.assert_array_equal(numeric_sigma(_inline), expect)  # (custom_vjp has no jacfwd)
    np.testing.assert_array_equal(structural_sigma(wrapped), expect)


def test_unsupported_primitive_is_named():
    def residual(t, v, p):
        x = v["x"]
        y = lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 2.0, c[1] + 1), (x[0], 0))[0]
        return [x[1] - y]

    with pytest.raises(UnsupportedPrimitiveError, match=r"^structural analysis: loops \('while', from "
                                                        r"lax\.scan/fori_loop/while_loop"):
        signature(DAE(residual, ["x"]))


_mystery_p = jex_core.Primitive("mystery_op")
_mystery_p.def_abstract_eval(lambda x: x)
_mystery_p.def_impl(lambda x: x)


def test_a_primitive_without_a_rule_is_named_by_both_interpreters_with_one_error_class():
    dae = DAE(lambda t, v, p: [v["x"][1] - _mystery_p.bind(v["x"][0])], ["x"])
    with pytest.raises(UnsupportedPrimitiveError,
                       match=r"^structural analysis: no rule for the JAX primitive 'mystery_op' \(in `"):
        signature_matrix(dae)
    with pytest.raises(UnsupportedPrimitiveError,
                       match=r"^the Taylor engine has no rule for the operation 'mystery_op' \(used at "):
        taylor.TaylorProgram(dae, [0], [1], 4)
    assert sparsity.UnsupportedPrimitiveError is taylor.UnsupportedPrimitiveError \
        is primitives.UnsupportedPrimitiveError
    # Callers may catch it as a bad input or as a missing feature.
    assert issubclass(UnsupportedPrimitiveError, ValueError)
    assert issubclass(UnsupportedPrimitiveError, NotImplementedError)


def test_ddt_is_one_primitive_reachable_by_every_name():
    assert solver.ddt is ddt and solver.dae.problem.ddt_p is ddt_p
    closed = jax.make_jaxpr(lambda x: solver.ddt(x) + ddt(x))(jnp.float64(1.0))
    assert [e.primitive for e in closed.jaxpr.eqns if e.primitive.name == "ddt"] == [ddt_p, ddt_p]
    with pytest.raises(RuntimeError, match="has no pointwise value"):
        ddt(jnp.ones(2))
