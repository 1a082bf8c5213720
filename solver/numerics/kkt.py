"""Structure-aware solves with the system Jacobian of a Lagrangian DAE.

The Euler–Lagrange DAE (docs/method.md §7) has the system Jacobian
``[[M, Gᵀ], [G, 0]]`` with M = ∂²L/∂q'² and G = ∂C/∂q.  When M is block
diagonal (particles, rods, bodies) a factorisation of the diagonal blocks and
a dense Schur complement ``S = G M⁻¹ Gᵀ`` on the n_c constraints cost
O(n b²) + O(n n_c²) + O(n_c³) instead of O((n + n_c)³) for a dense LU, and a
solve costs O(n b + n n_c): a particle system with no or few constraints
costs O(n) per Taylor coefficient.

Everything here is pure ``jax.numpy`` (safe under ``jit`` and ``vmap``);
block indices are static numpy arrays, kept outside the traced values.

The integrator learns a DAE's structure from data, not from its class: a DAE
that offers ``kkt_blocks()`` returning :class:`KKTBlocks` (the block structure
of M as :class:`MassBlocks`, functions for the blocks and the constraints, and
the coordinate layout) can be solved this way.  :class:`solver.mechanics.lagrangian.LagrangianDAE`
is one; this module imports no facility.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.numerics.linalg import lu_factor, lu_solve, pivots_singular

__all__ = ["MassBlocks", "KKTBlocks", "KKTFactor", "kkt_factor", "kkt_solve"]


# ------------------------------------------------------------- the structure
@dataclasses.dataclass(frozen=True)
class MassBlocks:
    """Block-diagonal structure of the mass matrix ``M = ∂²L/∂q'²``.

    Attributes:
        n: number of flat coordinates.
        groups: tuple of int arrays of shape (nb, b): each row lists the flat
            coordinate indices of one diagonal block; groups with equal block
            size b are kept together so blocks can be solved batched.  All
            indices together partition 0..n−1.  M has no entries outside
            these blocks.
        source: how it was found: ``"structural"`` (coupling between named
            coordinates from the jaxpr of ∂L/∂q'), plus ``"+declared"`` when
            the model builder declared finer blocks inside coordinates.
    """

    n: int
    groups: tuple
    source: str = "structural"

    @property
    def block_diagonal(self) -> bool:
        """True unless M is one dense n×n block."""
        return not (len(self.groups) == 1 and self.groups[0].shape[0] == 1)

    @property
    def block_sizes(self) -> list[int]:
        """Block size b of every group."""
        return [int(g.shape[1]) for g in self.groups]

    def extract(self, M) -> list:
        """The blocks of a dense M as ``[(index, blocks), ...]`` (for :func:`kkt_factor`)."""
        M = jnp.asarray(M, dtype=jnp.float64)
        return [(idx, M[idx[:, :, None], idx[:, None, :]]) for idx in self.groups]

    def assemble(self, blocks) -> jnp.ndarray:
        """Dense M from ``[(index, blocks), ...]`` (for checks and small models)."""
        M = jnp.zeros((self.n, self.n), dtype=jnp.float64)
        for idx, B in blocks:
            M = M.at[idx[:, :, None], idx[:, None, :]].set(B)
        return M

    def __str__(self):
        parts = ", ".join(f"{g.shape[0]}×({g.shape[1]}×{g.shape[1]})" for g in self.groups)
        return f"MassBlocks(n={self.n}: {parts}; {self.source})"


@dataclasses.dataclass(frozen=True, eq=False)
class KKTBlocks:
    """A DAE's system Jacobian ``[[M, Gᵀ], [G, 0]]``, described as data.

    What a DAE hands the integrator (through a method ``kkt_blocks()``) so
    that its stage systems are solved by mass blocks and a Schur complement.
    The DAE's unknowns are the coordinates q first (``n_q`` flat entries, in
    the order of ``coords``), then the ``n_c`` multipliers; the equations are
    the n_q equations of motion, then the n_c constraints C(t, q) = 0.

    Attributes:
        coords: names of the coordinate variables, in flat order.
        n_q: number of flat coordinates.
        n_c: number of constraints (0: an ODE).
        mass_blocks: ``mass_blocks(t, q, qd, p) -> [(index, B), ...]``, the
            diagonal blocks of M at a point in the layout of
            :attr:`mass_structure` (ready for :func:`kkt_factor`); ``q``,
            ``qd`` are dicts coordinate name -> array, ``p`` the parameter
            dict.  Pure ``jax.numpy``.
        constraints: ``constraints(t, q_flat, p) -> (n_c,)`` the flat
            constraints, or None when n_c = 0.
        flatten: coordinate dict -> flat (n_q,) array.
        unflatten: flat (n_q,) array -> coordinate dict.
        find_mass_structure: ``() -> MassBlocks``; host-side, may be costly
            the first time (the DAE caches it) and may raise the DAE's own
            errors (e.g. a declared block size that M contradicts).
    """

    coords: tuple
    n_q: int
    n_c: int
    mass_blocks: Callable
    constraints: Callable | None
    flatten: Callable
    unflatten: Callable
    find_mass_structure: Callable

    @property
    def mass_structure(self) -> MassBlocks:
        """The block structure of M (found on first use; never inside a trace)."""
        return self.find_mass_structure()

    def constraint_jacobian(self, t, q, p):
        """G = ∂C/∂q (n_c, n_q) at a point; None when there are no constraints.

        Args:
            t: time.
            q: coordinate dict.
            p: parameter dict.
        """
        if not self.n_c:
            return None
        cflat = lambda x: self.constraints(t, x, p)
        # Reverse mode costs n_c passes, forward mode n_q: take the fewer.
        return (jax.jacrev if self.n_c < self.n_q else jax.jacfwd)(cflat)(self.flatten(q))


@dataclasses.dataclass
class KKTFactor:
    """A factorised ``[[M, Gᵀ], [G, 0]]`` (see :func:`kkt_factor`).

    Attributes:
        n: size of M.
        groups: list of ``(index, inverse blocks)``; ``index`` (nb, b) static
            int array or None for contiguous blocks in flat order.
        MinvGt: M⁻¹Gᵀ (n, n_c) or None without constraints.
        G: the constraint Jacobian (n_c, n) or None.
        schur: :class:`solver.numerics.linalg.LU` of S = G M⁻¹ Gᵀ, or None.
        singular: traced bool, True when a block of M or S is (numerically)
            singular.
    """

    n: int
    groups: list
    MinvGt: object
    G: object
    schur: object
    singular: object


def _kkt_flatten(f: KKTFactor):
    # The block index arrays are static (they fix the program): aux data,
    # as hashable tuples; the factors are the leaves.
    index = tuple(None if idx is None else (tuple(np.asarray(idx).shape), tuple(np.asarray(idx).ravel().tolist()))
                  for idx, _ in f.groups)
    return (f.MinvGt, f.G, f.schur, f.singular, tuple(inv for _, inv in f.groups)), (f.n, index)


def _kkt_unflatten(aux, children):
    n, index = aux
    MinvGt, G, schur, singular, invs = children
    groups = [(None if ix is None else np.asarray(ix[1], dtype=int).reshape(ix[0]), inv)
              for ix, inv in zip(index, invs)]
    return KKTFactor(n, groups, MinvGt, G, schur, singular)


# A pytree, so that a factorisation can cross jit, vmap and custom batching
# rules as an argument (the compact engine's stage loop takes it so).
jax.tree_util.register_pytree_node(KKTFactor, _kkt_flatten, _kkt_unflatten)


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
