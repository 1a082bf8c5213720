"""solver.linalg: small dense LU, unrolled for vmap, against LAPACK/numpy."""

import numpy as np
import pytest
import scipy.linalg as sl

import jax
import jax.numpy as jnp

from solver import linalg

SIZES = [1, 2, 3, linalg.FACTOR_UNROLL_MAX, linalg.FACTOR_UNROLL_MAX + 1, linalg.SOLVE_UNROLL_MAX,
         linalg.SOLVE_UNROLL_MAX + 1, 12]


def random_system(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n)), rng.standard_normal(n)


@pytest.mark.parametrize("n", SIZES)
def test_solution_and_pivots_match_lapack(n):
    for seed in range(5):
        A, b = random_system(n, seed)
        fact = jax.jit(linalg.lu_factor)(jnp.asarray(A))
        lu_ref, piv_ref = sl.lu_factor(A)
        np.testing.assert_array_equal(np.asarray(fact.piv), piv_ref)
        np.testing.assert_allclose(np.asarray(fact.lu), lu_ref, rtol=1e-12, atol=1e-12)
        x = jax.jit(linalg.lu_solve)(fact, jnp.asarray(b))
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-10, atol=1e-12)
        assert not bool(fact.singular)


@pytest.mark.parametrize("n", [3, linalg.SOLVE_UNROLL_MAX, 12])
def test_vmapped_solve_equals_one_by_one(n):
    systems = [random_system(n, seed) for seed in range(7)]
    A = jnp.asarray(np.stack([s[0] for s in systems]))
    b = jnp.asarray(np.stack([s[1] for s in systems]))
    batched = np.asarray(jax.jit(jax.vmap(linalg.solve))(A, b))
    for i, (Ai, bi) in enumerate(systems):
        np.testing.assert_allclose(batched[i], np.linalg.solve(Ai, bi), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", SIZES)
def test_the_inverse_from_the_factors_solves_like_lapack(n):
    # The stages of a Taylor step multiply by the inverse of the system
    # Jacobian (Integrator._stage0_dense); alone and under vmap.
    systems = [random_system(n, seed) for seed in range(5)]

    def inverse_solve(A, b):
        inverse = linalg.lu_solve(linalg.lu_factor(A), jnp.eye(A.shape[0]))
        return linalg.apply_inverse(inverse, b)

    for A, b in systems:
        x = jax.jit(inverse_solve)(jnp.asarray(A), jnp.asarray(b))
        np.testing.assert_allclose(np.asarray(x), sl.solve(A, b), rtol=1e-10, atol=1e-12)
    A = jnp.asarray(np.stack([s[0] for s in systems]))
    b = jnp.asarray(np.stack([s[1] for s in systems]))
    batched = np.asarray(jax.jit(jax.vmap(inverse_solve))(A, b))
    for i, (Ai, bi) in enumerate(systems):
        np.testing.assert_allclose(batched[i], sl.solve(Ai, bi), rtol=1e-10, atol=1e-12)


def test_ties_pick_the_first_row_like_lapack():
    A = np.array([[1.0, 2.0, 0.0], [-1.0, 0.5, 1.0], [1.0, 0.0, 3.0]])
    fact = linalg.lu_factor(jnp.asarray(A))
    np.testing.assert_array_equal(np.asarray(fact.piv), sl.lu_factor(A)[1])


@pytest.mark.parametrize("n", [3, 7])
def test_singular_matrix_is_flagged_not_raised(n):
    A, _ = random_system(n, 1)
    A[-1] = A[0] + A[1]  # rank n - 1
    assert bool(jax.jit(linalg.lu_factor)(jnp.asarray(A)).singular)
    assert bool(linalg.lu_factor(jnp.zeros((n, n))).singular)


def test_pivot_rule_scales_with_the_matrix():
    """A well-conditioned matrix scaled by 1e-200 is not singular."""
    A, _ = random_system(4, 2)
    assert not bool(linalg.lu_factor(jnp.asarray(1e-200 * A)).singular)


# ------------------------------------------------ Gauss–Newton's minimum-norm step
@pytest.mark.parametrize("m,n", [(1, 3), (2, 4), (3, 3), (linalg.FACTOR_UNROLL_MAX + 1, 9), (12, 20)])
def test_min_norm_step_is_the_shortest_solution_of_the_linearised_constraints(m, n):
    # δ = −Gᵀ(GGᵀ)⁻¹r solves G δ = −r and is what numpy's pseudo-inverse
    # (the minimum-norm least-squares solution) gives.
    rng = np.random.default_rng(10 * m + n)
    G, r = rng.standard_normal((m, n)), rng.standard_normal(m)
    fact = linalg.min_norm_factor(jnp.asarray(G))
    step = np.asarray(linalg.min_norm_step(fact, jnp.asarray(G), jnp.asarray(r)))
    np.testing.assert_allclose(G @ step, -r, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(step, -np.linalg.pinv(G) @ r, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(linalg.min_norm_correction(jnp.asarray(G), jnp.asarray(r)), step, rtol=0, atol=0)
    assert not bool(fact.singular)


def test_min_norm_factor_regularises_a_rank_deficient_jacobian():
    # A repeated constraint row (or a row with no free entry) leaves G Gᵀ
    # singular; the regularised matrix still factors, and the step still
    # solves the consistent linearised constraints.
    rng = np.random.default_rng(7)
    g = rng.standard_normal(4)
    G = jnp.asarray(np.stack([g, g, np.zeros(4)]))
    r = jnp.asarray([0.3, 0.3, 0.0])
    fact = linalg.min_norm_factor(G)
    step = np.asarray(linalg.min_norm_step(fact, G, r))
    assert np.all(np.isfinite(step))
    np.testing.assert_allclose(np.asarray(G) @ step, -np.asarray(r), atol=1e-12)
    np.testing.assert_allclose(step, -0.3 * g / (g @ g), rtol=1e-10)


def test_min_norm_step_under_vmap_equals_one_by_one():
    rng = np.random.default_rng(8)
    Gs, rs = rng.standard_normal((5, 2, 4)), rng.standard_normal((5, 2))
    f = jax.jit(jax.vmap(lambda G, r: linalg.min_norm_step(linalg.min_norm_factor(G), G, r)))
    got = np.asarray(f(Gs, rs))
    for i in range(5):
        np.testing.assert_allclose(got[i], -np.linalg.pinv(Gs[i]) @ rs[i], rtol=1e-10, atol=1e-12)
