"""Structure-aware solves with the system Jacobian of a Lagrangian DAE.

The Euler–Lagrange DAE (METHOD.md §7) has the system Jacobian
``[[M, Gᵀ], [G, 0]]`` with M = ∂²L/∂q'² and G = ∂C/∂q.  When M is block
diagonal (particles, rods, bodies) a factorisation of the diagonal blocks and
a dense Schur complement ``S = G M⁻¹ Gᵀ`` on the n_c constraints cost
O(n b²) + O(n n_c²) + O(n_c³) instead of O((n + n_c)³) for a dense LU, and a
solve costs O(n b + n n_c): a particle system with no or few constraints
costs O(n) per Taylor coefficient.

Everything here is pure ``jax.numpy`` (safe under ``jit`` and ``vmap``);
block indices are static numpy arrays, kept outside the traced values.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import jax.numpy as jnp
from jax import lax

from .linalg import lu_factor, lu_solve, pivots_singular

__all__ = ["KKTFactor", "kkt_factor", "kkt_solve"]

@dataclasses.dataclass
class KKTFactor:
    """A factorised ``[[M, Gᵀ], [G, 0]]`` (see :func:`kkt_factor`).

    Attributes:
        n: size of M.
        groups: list of ``(index, inverse blocks)``; ``index`` (nb, b) static
            int array or None for contiguous blocks in flat order.
        MinvGt: M⁻¹Gᵀ (n, n_c) or None without constraints.
        G: the constraint Jacobian (n_c, n) or None.
        schur: :class:`solver.linalg.LU` of S = G M⁻¹ Gᵀ, or None.
        singular: traced bool, True when a block of M or S is (numerically)
            singular.
    """

    n: int
    groups: list
    MinvGt: object
    G: object
    schur: object
    singular: object


def _block_apply(groups, n, rhs):
    """blockdiag(M)⁻¹ rhs for rhs of shape (n, k), from the inverse blocks."""
    if len(groups) == 1 and groups[0][0] is None:
        inv = groups[0][1]
        nb, b, _ = inv.shape
        sub = rhs.reshape(nb, b, rhs.shape[1])
        out = sub * inv if b == 1 else jnp.einsum("nij,njk->nik", inv, sub)
        return out.reshape(rhs.shape)
    out = jnp.zeros_like(rhs)
    for idx, inv in groups:
        sub = rhs[idx]  # (nb, b, k)
        sol = sub * inv if inv.shape[1] == 1 else jnp.einsum("nij,njk->nik", inv, sub)
        out = out.at[idx].set(sol)
    return out


def kkt_factor(blocks, G=None) -> KKTFactor:
    """Factorise ``[[M, Gᵀ], [G, 0]]`` with M given by its diagonal blocks.

    Args:
        blocks: list of ``(index, B)`` pairs: ``index`` an int array (nb, b)
            of flat coordinate indices (or None for contiguous blocks in flat
            order) and ``B`` the (nb, b, b) blocks ``M[index[i][:, None],
            index[i][None, :]]``; all indices together partition 0..n−1.
        G: constraint Jacobian (n_c, n), or None / shape (0, n) for none.

    Returns:
        :class:`KKTFactor`; its ``singular`` flag is set, never raised.
    """
    n = sum(int(np.prod(B.shape[:2])) for _, B in blocks)
    groups, ok = [], jnp.asarray(True)
    for idx, B in blocks:
        B = jnp.asarray(B, dtype=jnp.float64)
        if B.shape[1] == 1:
            ok = ok & ~pivots_singular(B.reshape(-1))
            inv = 1.0 / jnp.where(B == 0.0, 1.0, B)
        else:
            lu, _, _ = lax.linalg.lu(B)
            ok = ok & ~pivots_singular(jnp.diagonal(lu, axis1=1, axis2=2).reshape(-1))
            inv = jnp.linalg.inv(B)
        groups.append((idx, inv))
    if G is None or G.shape[0] == 0:
        return KKTFactor(n, groups, None, None, None, ~ok)
    G = jnp.asarray(G, dtype=jnp.float64)
    MinvGt = _block_apply(groups, n, G.T)
    schur = lu_factor(G @ MinvGt)
    return KKTFactor(n, groups, MinvGt, G, schur, ~ok | schur.singular)


def kkt_solve(factor: KKTFactor, rhs):
    """Solve ``[[M, Gᵀ], [G, 0]] [x; y] = rhs`` with a :class:`KKTFactor`.

    Args:
        factor: from :func:`kkt_factor`.
        rhs: (n + n_c,) or (n + n_c, k): the first n rows pair with M.

    Returns:
        The solution, same shape as ``rhs`` (x first, then the multipliers y).
    """
    vector = rhs.ndim == 1
    R = rhs[:, None] if vector else rhs
    n = factor.n
    x = _block_apply(factor.groups, n, R[:n])
    if factor.G is not None:
        # x = M⁻¹(f − Gᵀy) with S y = G M⁻¹ f − g.
        y = lu_solve(factor.schur, factor.G @ x - R[n:])
        x = jnp.concatenate([x - factor.MinvGt @ y, y], axis=0)
    return x[:, 0] if vector else x
