"""The structured KKT solve (solver/numerics/kkt.py), against numpy's dense solver.

Specification: for M block diagonal (given by its diagonal blocks, contiguous
or scattered over the coordinates) and a constraint Jacobian G,
``kkt_solve(kkt_factor(blocks, G), rhs)`` is the solution of

    [[M, Gᵀ],
     [G,  0 ]] [x; y] = rhs

that ``numpy.linalg.solve`` gives for the assembled matrix, for one or
several right-hand sides, under ``jax.jit`` and ``jax.vmap``; a singular mass
block or Schur complement G M⁻¹ Gᵀ is flagged in ``KKTFactor.singular``,
never raised.  Every expected value is built here in plain numpy.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jax
import jax.numpy as jnp

from solver.numerics.kkt import KKTBlocks, MassBlocks, kkt_factor, kkt_solve


def spd_blocks(rng, nb, b):
    """nb random symmetric positive definite b×b blocks."""
    A = rng.standard_normal((nb, b, b))
    return A @ np.transpose(A, (0, 2, 1)) + b * np.eye(b)


def assemble(n, blocks):
    """Dense M from [(index (nb, b), blocks (nb, b, b)), ...], in plain numpy."""
    M = np.zeros((n, n))
    for idx, B in blocks:
        for rows, blk in zip(idx, np.asarray(B)):
            M[np.ix_(rows, rows)] = blk
    return M


def kkt_matrix(M, G):
    nc = G.shape[0]
    return np.block([[M, G.T], [G, np.zeros((nc, nc))]])


def random_problem(rng, sizes, nc, scattered):
    """Blocks of the given sizes over n = Σ sizes coordinates, and a full-rank G."""
    n = int(sum(sizes))
    order = rng.permutation(n) if scattered else np.arange(n)
    blocks, start = [], 0
    for b in sorted(set(sizes)):
        nb = sizes.count(b)
        idx = order[start:start + nb * b].reshape(nb, b)
        blocks.append((idx, spd_blocks(rng, nb, b)))
        start += nb * b
    G = rng.standard_normal((nc, n))
    return n, blocks, G


# ------------------------------------------------------ solve = dense solve
@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=7),
       nc=st.integers(0, 4), scattered=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_structured_solve_equals_the_dense_solve_of_the_assembled_matrix(sizes, nc, scattered, seed):
    rng = np.random.default_rng(seed)
    n, blocks, G = random_problem(rng, sizes, min(nc, sum(sizes) - 1), scattered)
    K = kkt_matrix(assemble(n, blocks), G)
    rhs1, rhs3 = rng.standard_normal(K.shape[0]), rng.standard_normal((K.shape[0], 3))
    idx = [i for i, _ in blocks]

    # Factor and solve in one jitted call, as the integrator uses them (op by
    # op, the unrolled small LUs dispatch thousands of tiny operations: ~4x slower).
    @jax.jit
    def factor_and_solve(Bs, G, r1, r3):
        fact = kkt_factor(list(zip(idx, Bs)), G)
        return fact.singular, kkt_solve(fact, r1), kkt_solve(fact, r3)

    singular, *gots = factor_and_solve([B for _, B in blocks], G if G.shape[0] else None,
                                       jnp.asarray(rhs1), jnp.asarray(rhs3))
    assert not bool(singular)
    for rhs, got in zip((rhs1, rhs3), gots):
        want = np.linalg.solve(K, rhs)
        got = np.asarray(got)
        assert got.shape == rhs.shape
        scale = np.linalg.cond(K) * np.max(np.abs(want))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * scale)


@pytest.mark.parametrize("b,nb,nc", [(1, 12, 0), (1, 12, 3), (3, 5, 4), (2, 6, 1), (4, 1, 2)])
def test_contiguous_blocks_in_flat_order_need_no_index(b, nb, nc):
    # index None: the blocks tile the coordinates in flat order.
    rng = np.random.default_rng(100 * b + nb + nc)
    n = b * nb
    B = spd_blocks(rng, nb, b)
    G = rng.standard_normal((nc, n))
    K = kkt_matrix(assemble(n, [(np.arange(n).reshape(nb, b), B)]), G)
    rhs = rng.standard_normal(n + nc)
    got = kkt_solve(kkt_factor([(None, B)], G if nc else None), rhs)
    np.testing.assert_allclose(got, np.linalg.solve(K, rhs), rtol=1e-10, atol=1e-10)


def test_without_constraints_the_solve_is_the_block_inverse():
    rng = np.random.default_rng(1)
    n, blocks, _ = random_problem(rng, [1, 1, 2, 3, 2], 0, scattered=True)
    rhs = rng.standard_normal(n)
    for G in (None, np.zeros((0, n))):
        fact = kkt_factor(blocks, G)
        assert fact.G is None and fact.schur is None
        np.testing.assert_allclose(kkt_solve(fact, rhs), np.linalg.solve(assemble(n, blocks), rhs),
                                   rtol=1e-12)


def test_solves_under_jit_and_vmap_with_a_batch_of_right_hand_sides():
    rng = np.random.default_rng(2)
    n, blocks, G = random_problem(rng, [1] * 5 + [3] * 2, 3, scattered=True)
    K = kkt_matrix(assemble(n, blocks), G)
    rhs = rng.standard_normal((6, n + 3))
    f = jax.jit(jax.vmap(lambda r: kkt_solve(kkt_factor(blocks, G), r)))
    np.testing.assert_allclose(f(rhs), np.linalg.solve(K, rhs.T).T, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("b,nb,nc", [(1, 4, 1), (2, 3, 2), (3, 2, 0)])
def test_vmap_over_matrices_one_system_per_batch_element(b, nb, nc):
    # One mass matrix and one G per sweep point: blocks, G and rhs all batched.
    rng = np.random.default_rng(b + 10 * nc)
    n, batch = b * nb, 5
    Bs = np.stack([spd_blocks(rng, nb, b) for _ in range(batch)])
    Gs = rng.standard_normal((batch, nc, n))
    rs = rng.standard_normal((batch, n + nc))

    def one(B, G, r):
        return kkt_solve(kkt_factor([(None, B)], G if nc else None), r)

    got = jax.jit(jax.vmap(one))(Bs, Gs, rs)
    for i in range(batch):
        K = kkt_matrix(assemble(n, [(np.arange(n).reshape(nb, b), Bs[i])]), Gs[i])
        np.testing.assert_allclose(got[i], np.linalg.solve(K, rs[i]), rtol=1e-10, atol=1e-10)
    singular = jax.vmap(lambda B, G: kkt_factor([(None, B)], G if nc else None).singular)(Bs, Gs)
    assert not np.any(np.asarray(singular))


# ----------------------------------------------------------- singular flags
def test_a_singular_mass_block_or_schur_complement_is_flagged_not_raised():
    rng = np.random.default_rng(3)
    B = spd_blocks(rng, 4, 1)
    assert not bool(kkt_factor([(None, B)], rng.standard_normal((2, 4))).singular)
    B0 = B.copy()
    B0[2] = 0.0                                    # a coordinate without inertia
    assert bool(kkt_factor([(None, B0)]).singular)
    assert bool(kkt_factor([(None, B)], np.ones((2, 4))).singular)  # two equal constraint rows
    assert bool(kkt_factor([(None, B)], rng.standard_normal((5, 4))).singular)  # more constraints than q
    B3 = spd_blocks(rng, 2, 3)
    B3[1] = np.outer([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])  # a rank-1 3×3 block
    assert bool(kkt_factor([(None, B3)]).singular)
    # Scattered blocks: a singular block in the second group is found too.
    idx1, idx2 = np.array([[0], [3]]), np.array([[1, 2]])
    bad = np.array([[[1.0, 2.0], [2.0, 4.0]]])
    assert bool(kkt_factor([(idx1, spd_blocks(rng, 2, 1)), (idx2, bad)]).singular)


def test_the_singular_flag_is_per_batch_element_under_vmap():
    rng = np.random.default_rng(4)
    Bs = np.stack([spd_blocks(rng, 3, 1) for _ in range(3)])
    Bs[1, 0] = 0.0
    Gs = rng.standard_normal((3, 1, 3))
    Gs[2] = 0.0                                    # S = 0
    flags = jax.vmap(lambda B, G: kkt_factor([(None, B)], G).singular)(Bs, Gs)
    assert np.asarray(flags).tolist() == [False, True, True]


# ---------------------------------------------------------------- MassBlocks
def test_mass_blocks_extract_and_assemble_are_inverse():
    rng = np.random.default_rng(5)
    n, blocks, _ = random_problem(rng, [1, 1, 2, 2, 3], 0, scattered=True)
    mb = MassBlocks(n, tuple(idx for idx, _ in blocks))
    M = assemble(n, blocks)
    np.testing.assert_array_equal(mb.assemble(mb.extract(M)), M)
    for (i1, b1), (i2, b2) in zip(mb.extract(M), blocks):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(b1, b2)
    assert mb.block_diagonal and mb.block_sizes == [1, 2, 3]
    dense = MassBlocks(4, (np.arange(4).reshape(1, 4),))
    assert not dense.block_diagonal and dense.block_sizes == [4]
    assert str(dense) == "MassBlocks(n=4: 1×(4×4); structural)"


# ---------------------------------------------------------------- KKTBlocks
def test_kkt_blocks_constraint_jacobian_is_dC_dq_in_either_ad_mode():
    # C(q) = (|q|² − 1, q0 q1 q2, ...): G by hand; n_c < n_q uses reverse
    # mode, n_c >= n_q forward mode, with the same result.
    def make(nc):
        def constraints(t, q, p):
            c = [jnp.sum(q ** 2) - p["l"] ** 2, q[0] * q[1] * q[2] + t, q[1] - q[2], 2.0 * q[0]]
            return jnp.stack(c[:nc])

        return KKTBlocks(coords=("q",), n_q=3, n_c=nc, mass_blocks=None, constraints=constraints,
                         flatten=lambda d: d["q"], unflatten=lambda x: {"q": x},
                         find_mass_structure=lambda: MassBlocks(3, (np.arange(3).reshape(3, 1),)))

    q = np.array([0.3, -0.7, 1.1])
    G_all = np.array([2 * q, [q[1] * q[2], q[0] * q[2], q[0] * q[1]], [0.0, 1.0, -1.0], [2.0, 0.0, 0.0]])
    for nc in (1, 2, 3, 4):
        G = make(nc).constraint_jacobian(0.5, {"q": jnp.asarray(q)}, {"l": 1.0})
        np.testing.assert_allclose(G, G_all[:nc], rtol=1e-14)
    none = KKTBlocks(("q",), 3, 0, None, None, lambda d: d["q"], lambda x: {"q": x},
                     lambda: MassBlocks(3, (np.arange(3).reshape(3, 1),)))
    assert none.constraint_jacobian(0.0, {"q": jnp.asarray(q)}, {}) is None
    assert none.mass_structure.block_sizes == [1]
