"""solver.linalg: small dense LU, unrolled for vmap, against LAPACK/numpy."""

import numpy as np
import pytest
import scipy.linalg as sl

import jax
import jax.numpy as jnp

from solver.numerics import linalg

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


# ---------------------------------------------------------------- native loops
NATIVE_SIZES = [linalg.FACTOR_UNROLL_MAX + 1, linalg.SOLVE_UNROLL_MAX + 1, 13, linalg.NATIVE_LOOP_MAX]


def native(fn, batched: bool = False):
    """fn traced under linalg.native_loops (as Integrator._run traces its step; batched: as a
    forward-mode batch traces its slots)."""
    def wrapped(*args):
        with linalg.native_loops(batched=batched):
            return fn(*args)
    return jax.jit(wrapped)


@pytest.mark.parametrize("n", NATIVE_SIZES)
def test_native_loops_give_lapacks_factors_pivots_and_solutions(n):
    for seed in range(4):
        A, b = random_system(n, seed)
        fact = native(linalg.lu_factor)(jnp.asarray(A))
        lu_ref, piv_ref = sl.lu_factor(A)
        np.testing.assert_array_equal(np.asarray(fact.piv), piv_ref)
        np.testing.assert_allclose(np.asarray(fact.lu), lu_ref, rtol=1e-11, atol=1e-11)
        x = native(linalg.lu_solve)(fact, jnp.asarray(b))
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-9, atol=1e-11)
        B = np.random.default_rng(seed).standard_normal((n, 3))
        X = native(linalg.lu_solve)(fact, jnp.asarray(B))
        np.testing.assert_allclose(np.asarray(X), np.linalg.solve(A, B), rtol=1e-9, atol=1e-11)
        assert not bool(fact.singular)


def test_native_loops_flag_singular_matrices_and_batch_under_vmap():
    n = 9
    A = np.random.default_rng(1).standard_normal((n, n))
    A[4] = 2.0 * A[2]  # rank n - 1
    assert bool(native(linalg.lu_factor)(jnp.asarray(A)).singular)
    systems = [random_system(n, seed) for seed in range(5)]
    As = jnp.asarray(np.stack([s[0] for s in systems]))
    bs = jnp.asarray(np.stack([s[1] for s in systems]))
    batched = np.asarray(native(jax.vmap(linalg.solve))(As, bs))
    for i, (Ai, bi) in enumerate(systems):
        np.testing.assert_allclose(batched[i], np.linalg.solve(Ai, bi), rtol=1e-9, atol=1e-11)


@pytest.mark.xla_internals
def test_native_loops_leave_no_custom_call_dot_or_scatter_in_a_loop():
    # What keeps XLA:CPU from compiling an enclosing loop as one function.
    n, m = 13, 6
    G = jnp.asarray(np.random.default_rng(2).standard_normal((m, n)))

    def loop(A, r):
        def body(_, x):
            x = linalg.solve(A, x)
            return x + linalg.min_norm_correction(G, x[:m])
        return jax.lax.fori_loop(0, 3, body, r)

    A, b = random_system(n, 3)
    hlo = native(loop).lower(jnp.asarray(A), jnp.asarray(b)).compile().as_text()
    for op in ("custom-call(", " dot(", " scatter("):
        assert op not in hlo
    plain = jax.jit(loop).lower(jnp.asarray(A), jnp.asarray(b)).compile().as_text()
    assert "custom-call(" in plain  # LAPACK outside native_loops
    x_native = native(loop)(jnp.asarray(A), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(x_native), np.asarray(jax.jit(loop)(jnp.asarray(A), jnp.asarray(b))),
                               rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("a_shape, b_shape, dims", [
    ((3,), (3,), (((0,), (0,)), ((), ()))),
    ((4, 3), (3,), (((1,), (0,)), ((), ()))),
    ((4, 3), (3, 5), (((1,), (0,)), ((), ()))),
    ((3, 4), (5, 3), (((0,), (1,)), ((), ()))),
    ((2, 4, 3), (2, 3, 5), (((2,), (1,)), ((0,), (0,)))),
    ((), (3, 2), (((), ()), ((), ()))),
])
def test_elementwise_dot_general_equals_lax(a_shape, b_shape, dims):
    rng = np.random.default_rng(4)
    a, b = jnp.asarray(rng.standard_normal(a_shape)), jnp.asarray(rng.standard_normal(b_shape))
    ours = native(lambda x, y: linalg.dot_general(x, y, dims, precision=None, preferred_element_type=None))(a, b)
    ref = jax.lax.dot_general(a, b, dims)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-13, atol=1e-14)


def test_native_loops_swap_rows_exactly_across_scales():
    # Rows of very different size: a swap by adding the difference would
    # round the small row away (1e20 + (1 - 1e20) == 0).
    n = 7
    rng = np.random.default_rng(5)
    A = rng.standard_normal((n, n)) * np.logspace(-10, 20, n)[:, None]
    b = rng.standard_normal(n)
    fact = native(linalg.lu_factor)(jnp.asarray(A))
    lu_ref, piv_ref = sl.lu_factor(A)
    np.testing.assert_array_equal(np.asarray(fact.piv), piv_ref)
    np.testing.assert_allclose(np.asarray(fact.lu), lu_ref, rtol=1e-12, atol=0)
    x = native(linalg.lu_solve)(fact, jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(x), sl.lu_solve((lu_ref, piv_ref), b), rtol=1e-9, atol=0)


# ---------------------------------------------------------------- the inverse
def native_batched(fn):
    """fn traced under linalg.native_loops(batched=True)."""
    return native(fn, batched=True)


@pytest.mark.parametrize("n", [1, 3, linalg.FACTOR_UNROLL_MAX] + NATIVE_SIZES)
def test_the_inverse_is_numpys_and_flags_singular_matrices_as_the_factorisation_does(n):
    for how in (jax.jit, native, native_batched):
        for seed in range(3):
            A, _ = random_system(n, seed)
            inverse, singular = how(linalg.inverse)(jnp.asarray(A))
            np.testing.assert_allclose(np.asarray(inverse), np.linalg.inv(A), rtol=1e-9, atol=1e-10)
            assert not bool(singular)
        if n > 1:
            A[n - 1] = 3.0 * A[0]  # rank n - 1
            assert bool(how(linalg.inverse)(jnp.asarray(A))[1])
            assert bool(how(linalg.lu_factor)(jnp.asarray(A)).singular)


def test_the_pivots_of_the_native_inverse_are_the_factorisations_across_scales():
    # Rows of very different size: Gauss-Jordan picks the pivots that LU picks, so the singular flag
    # compares the same numbers; the inverse stays accurate.
    n = 9
    rng = np.random.default_rng(7)
    A = rng.standard_normal((n, n)) * np.logspace(-8, 12, n)[:, None]
    for how in (native, native_batched):
        inverse, singular = how(linalg.inverse)(jnp.asarray(A))
        np.testing.assert_allclose(np.asarray(inverse) @ A, np.eye(n), atol=1e-9)
        assert bool(singular) == bool(how(linalg.lu_factor)(jnp.asarray(A)).singular)


@pytest.mark.parametrize("how", ["native", "batched", "lapack"])
def test_the_inverses_tangent_is_minus_inverse_times_the_matrix_tangent_times_inverse(how):
    n = 13
    rng = np.random.default_rng(8)
    A, dA = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    wrap = {"native": native, "batched": native_batched, "lapack": jax.jit}[how]
    (inverse, _), (d_inverse, _) = wrap(lambda a, da: jax.jvp(linalg.inverse, (a,), (da,)))(
        jnp.asarray(A), jnp.asarray(dA))
    Ai = np.linalg.inv(A)
    np.testing.assert_allclose(np.asarray(d_inverse), -Ai @ dA @ Ai, rtol=1e-8, atol=1e-10)
    # and a central difference of numpy's inverse
    eps = 1e-6
    fd = (np.linalg.inv(A + eps * dA) - np.linalg.inv(A - eps * dA)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(d_inverse), fd, rtol=1e-5, atol=1e-6)


@pytest.mark.xla_internals
def test_the_batched_native_inverse_under_vmap_equals_one_by_one_without_gather_or_scatter():
    n, batch = 13, 4
    As = jnp.asarray(np.stack([random_system(n, seed)[0] for seed in range(batch)]))
    batched = native_batched(jax.vmap(linalg.inverse))
    hlo = batched.lower(As).compile().as_text()
    for op in (" gather(", " scatter(", "custom-call("):
        assert op not in hlo
    inverses, singular = batched(As)
    for i in range(batch):
        np.testing.assert_allclose(np.asarray(inverses[i]), np.linalg.inv(np.asarray(As[i])), rtol=1e-9, atol=1e-10)
    assert not np.asarray(singular).any()
    single = native(linalg.inverse).lower(As[0]).compile().as_text()
    for op in (" gather(", " scatter(", "custom-call(", " dot("):
        assert op not in single


# ---------------------------------------------------------------- the projection's factorisation
@pytest.mark.parametrize("m, n", [(linalg.FACTOR_UNROLL_MAX + 1, 13), (12, 27), (linalg.NATIVE_LOOP_MAX, 60)])
def test_under_native_loops_the_min_norm_step_is_the_shortest_solution_by_cholesky(m, n):
    rng = np.random.default_rng(m)
    G, r = rng.standard_normal((m, n)), rng.standard_normal(m)
    for how in (native, native_batched):
        fact = how(linalg.min_norm_factor)(jnp.asarray(G))
        assert isinstance(fact, linalg.Cholesky) and not bool(fact.singular)
        np.testing.assert_allclose(np.asarray(fact.L) @ np.asarray(fact.L).T, G @ G.T, rtol=1e-10, atol=1e-10)
        step = np.asarray(how(linalg.min_norm_step)(fact, jnp.asarray(G), jnp.asarray(r)))
        np.testing.assert_allclose(step, -np.linalg.pinv(G) @ r, rtol=1e-9, atol=1e-11)
    # several right-hand sides at once, as a forward-mode batch's directions
    R = rng.standard_normal((m, 3))
    X = np.asarray(native(linalg._cholesky_solve)(native(linalg.min_norm_factor)(jnp.asarray(G)), jnp.asarray(R)))
    np.testing.assert_allclose(X, np.linalg.solve(G @ G.T, R), rtol=1e-8, atol=1e-10)


def test_the_cholesky_path_regularises_a_rank_deficient_jacobian_and_flags_it():
    # As test_min_norm_factor_regularises_a_rank_deficient_jacobian, at a size native loops factor by Cholesky.
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((5, 9))
    G = jnp.asarray(np.vstack([rows, rows[:2], np.zeros((1, 9))]))   # 8 rows, rank 5
    r = jnp.asarray(np.concatenate([np.full(5, 0.1), np.full(2, 0.1), [0.0]]))
    fact = native(linalg.min_norm_factor)(G)
    assert isinstance(fact, linalg.Cholesky) and bool(fact.singular)
    step = np.asarray(native(linalg.min_norm_step)(fact, G, r))
    assert np.all(np.isfinite(step))
    np.testing.assert_allclose(np.asarray(G) @ step, -np.asarray(r), atol=1e-10)
    np.testing.assert_allclose(step, -np.linalg.pinv(rows) @ np.full(5, 0.1), rtol=1e-8)


@pytest.mark.parametrize("how", ["native", "batched"])
def test_the_cholesky_min_norm_steps_tangent_is_the_pseudo_inverses(how):
    m, n = 9, 20
    rng = np.random.default_rng(9)
    G, r, dG, dr = (rng.standard_normal(s) for s in ((m, n), m, (m, n), m))
    wrap = native if how == "native" else native_batched
    _, tangent = wrap(lambda *a: jax.jvp(linalg.min_norm_correction, a[:2], a[2:]))(*map(jnp.asarray, (G, r, dG, dr)))
    eps = 1e-6
    fd = (-np.linalg.pinv(G + eps * dG) @ (r + eps * dr) + np.linalg.pinv(G - eps * dG) @ (r - eps * dr)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(tangent), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.xla_internals
def test_the_cholesky_min_norm_step_under_vmap_equals_one_by_one_without_scatter_or_call():
    m, n, batch = 12, 27, 4
    rng = np.random.default_rng(10)
    Gs, rs = jnp.asarray(rng.standard_normal((batch, m, n))), jnp.asarray(rng.standard_normal((batch, m)))
    batched = native_batched(jax.vmap(linalg.min_norm_correction))
    hlo = batched.lower(Gs, rs).compile().as_text()
    # (The normal matrix's diagonal, at constant indices, is a gather under vmap, as for the LU before.)
    for op in (" scatter(", "custom-call(", " dot("):
        assert op not in hlo
    got = np.asarray(batched(Gs, rs))
    for i in range(batch):
        np.testing.assert_allclose(got[i], -np.linalg.pinv(np.asarray(Gs[i])) @ np.asarray(rs[i]), rtol=1e-9,
                                   atol=1e-11)


def _primitives(jaxpr, seen=None):
    """Every primitive's name in a closed jaxpr, inner jaxprs (loops, jits) included."""
    from jax.extend.core import jaxprs_in_params

    seen = [] if seen is None else seen
    for eqn in jaxpr.eqns:
        seen.append(eqn.primitive.name)
        for inner in jaxprs_in_params(eqn.params):
            _primitives(inner, seen)
    return seen


def test_the_engines_dynamic_slices_carry_no_negative_index_wrap_around():
    # lax's default wraps a negative traced index (lt, add, select_n per access); the engine's
    # indices are clipped or loop counters, and its programs go without that arithmetic.
    from solver.taylor.compact_table import column_at, row_at
    from solver.taylor.recurrences import coef_at

    A = jnp.arange(16.0).reshape(4, 4) + 4 * jnp.eye(4)
    programs = {
        "coef_at": jax.make_jaxpr(coef_at)(A, 2),
        "row_at": jax.make_jaxpr(lambda a, m: row_at(a, m, 4))(A, 2),
        "column_at": jax.make_jaxpr(lambda a, m: column_at(a, m, 4))(A, 2),
        "Gauss-Jordan": jax.make_jaxpr(linalg._gauss_jordan)(A),   # its loop: slices at k and at the pivot's row
    }
    for name, closed in programs.items():
        names = _primitives(closed.jaxpr)
        assert "dynamic_slice" in names, (name, names)
        assert "lt" not in names, (name, names)   # the wrap-around's `index < 0`
    np.testing.assert_allclose(np.asarray(linalg._gauss_jordan(A)[0]), np.linalg.inv(np.asarray(A)), rtol=1e-12, atol=1e-14)
    assert float(coef_at(A, 2)[1]) == float(A[2, 1])
