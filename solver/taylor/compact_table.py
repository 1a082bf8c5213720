"""The compact engine's coefficient table as its groups read it: operands, a pass's view, groups.

The table holds every scalar node's Taylor coefficients, shape
``(n_nodes, K)`` or a batch of them ``(n_nodes, K, B)``; a group's members
read their operands (:class:`Operand`) through the pass's :class:`View`
and write a contiguous block of it (:class:`Group`).
"""

from __future__ import annotations

import numpy as np

import jax.numpy as jnp
from jax import lax

__all__ = ["Group", "Operand", "View", "column_at", "input_factor", "row_at"]

class Operand:
    """One operand of a group's members: a linear combination per member.

    ``src[g, t]``: the table rows of member g's terms; ``w`` their float
    weights and ``fac`` the rows of their constant factors (coefficient 0),
    both None where every term is a plain node.  Linear combinations have
    no rows of their own: they are formed where an operation reads them.

    The methods read a :class:`View` of a table of shape ``(n_nodes, K)``,
    or of a batch of them ``(n_nodes, K, B)`` (batch last: every gathered row
    is a contiguous K × B block, and every operation a vector operation over
    the batch).
    """

    def __init__(self, src, w=None, fac=None, own: bool = False):
        self.src = np.asarray(src, dtype=np.int32)
        self.w = None if w is None else np.asarray(w, dtype=np.float64)
        self.fac = None if fac is None else np.asarray(fac, dtype=np.int32)
        # A group's own members: their coefficient of this pass's order is the one being
        # computed, which no Cauchy sum of theirs reads (see fresh).
        self.own = own

    def combine(self, V, vals, with_k: bool):
        # vals: (G, T, *B) or (G, T, K, *B) coefficients of the terms.
        extra = (None,) * (vals.ndim - 2)
        if self.w is not None:
            vals = vals * self.w[(Ellipsis,) + extra]
        if self.fac is not None:
            f = V.C[:, 0][self.fac]  # (G, T, *B): constants, which no pass writes
            vals = vals * (f[:, :, None] if with_k else f)
        return jnp.sum(vals, axis=1) if vals.shape[1] > 1 else vals[:, 0]

    def cols(self, V):
        """(G, K, B): every coefficient as the table held it before this pass.

        Only the recurrences' Cauchy sums read whole columns.  The orders a
        pass computes are still zeros there (:meth:`fresh`); the sums
        add the few terms that reach them (:meth:`CompactProgram.cauchy`).
        """
        return self.combine(V, V.C[self.src], True)

    def first(self, V):
        """(G, B): coefficient 0 as the table held it before this pass."""
        return self.combine(V, V.C[:, 0][self.src], False)

    def fresh(self, V, off: int):
        """(G, B): the operand's part computed in this pass at order k + off; None where it has none.

        The terms whose own offset is ``off``: this pass writes their
        coefficient of that order, which the table still holds as zero.  A
        group's own members are left out: no sum of theirs reads the order
        it computes.
        """
        if V.R is None or self.own:
            return None
        same = V.new_off[self.src] == off  # (G, T): static, as every offset is
        if not same.any():
            return None
        vals = V.R[self.src]
        return self.combine(V, vals * same.reshape(same.shape + (1,) * (vals.ndim - 2)), False)

    def at(self, V, m, K):
        """(G, B): coefficient m (clipped to [0, K))."""
        return self.combine(V, V.at(self.src, m, K), False)

    def row0(self, V):
        """(G, B): the value (coefficient 0)."""
        return self.combine(V, V.at(self.src, 0, V.C.shape[1]), False)

    def shifted(self, V, m, K, skip: int = 0):
        """(G, K, B): entry r holds coefficient m − r (0 where r > m, and where m − r < ``skip``)."""
        B = self.cols(V)
        if skip:
            B = jnp.concatenate([jnp.zeros_like(B[:, :skip]), B[:, skip:]], axis=1)
        Bv = B[:, ::-1]
        P = jnp.concatenate([Bv, jnp.zeros_like(Bv)], axis=1)
        return lax.dynamic_slice_in_dim(P, K - 1 - m, K, 1)


class View:
    """The coefficient table as a stage pass reads it.

    ``C`` is the table as the pass found it, which the pass never writes.
    Written in place group by group, the table was copied whole before most
    writes: XLA:CPU fuses the cheap update into each gather that reads its
    result, so the old table stays live beside the new one (42 copies of the
    table in the RSCR batch's program, 27% of its kernel time; one RSCR run
    9.0 -> 6.4 ms without them).
    ``R`` holds, for every node, its coefficient of order ``k + off`` (the
    one the pass computes), written group by group; a read of coefficient j
    of node i takes ``R[i]`` where ``j == k + off_i`` and ``C[i, j]``
    elsewhere.  :meth:`CompactProgram._merge` writes ``R`` into the table
    once, at the end of the pass, so ``C`` holds zeros (the table's
    initial values) at every order a pass computes; whole-column reads use
    that (:meth:`Operand.cols`).  ``R`` None: a table no pass is writing.
    """

    __slots__ = ("C", "R", "k", "new_off")

    def __init__(self, C, R=None, k=None, new_off=None):
        self.C, self.R, self.k, self.new_off = C, R, k, new_off

    def at(self, src, m, K):
        """(G, T, *B): coefficient m of the nodes ``src`` (m clipped to [0, K))."""
        old = column_at(self.C, m, K)[src]
        if self.R is None:
            return old
        fresh = (m == self.k + self.new_off[src]).reshape(src.shape + (1,) * (old.ndim - 2))
        return jnp.where(fresh, self.R[src], old)

    def write(self, start, val):
        """The view with ``R[start:start + len(val)] = val`` (this pass's coefficients of those nodes)."""
        return View(self.C, self.R.at[start: start + val.shape[0]].set(val.astype(self.R.dtype)),
                     self.k, self.new_off)


class Group:
    """Members of one (level, kind, offset): a block of columns, written together.

    ``start``: first column of the members in the coefficient table (they
    are contiguous); ``off``: their common order offset; ``ops``: their
    operands (:class:`Operand`); ``own``: the members themselves as an
    operand (recurrences read their own lower orders).
    """

    def __init__(self, kind, param, start, size, off, ops):
        self.kind, self.param = kind, param
        self.start, self.size, self.off = int(start), int(size), int(off)
        self.ops = ops
        self.own = Operand(np.arange(self.start, self.start + self.size)[:, None], own=True)
        # Table columns from start: a sin-cos group keeps its cosines after its sines.
        self.width = self.size * (2 if kind == "sincos" else 1)


def row_at(A, m, n_rows):
    """``A[clip(m)]`` along the first axis (a dynamic index that stays one under vmap)."""
    return lax.dynamic_index_in_dim(A, jnp.clip(m, 0, n_rows - 1), 0, keepdims=False, allow_negative_indices=False)


def input_factor(m, l: int):
    """(m+1)(m+2)...(m+l): coefficient m of x^(l) is this times x's coefficient m + l (m traced)."""
    fac = 1.0
    for s in range(1, l + 1):
        fac = fac * (m + s)
    return fac


def column_at(C, m, K):
    """``C[:, clip(m)]``: coefficient m of every node (n_nodes, *B)."""
    return lax.dynamic_index_in_dim(C, jnp.clip(m, 0, K - 1), 1, keepdims=False, allow_negative_indices=False)
