"""The flat state layout: where each Taylor coefficient of the state lives, and moving between layouts.

The state ``z`` is the flat vector of normalised coefficients
``X[j, l] = x_j^(l) / l!`` for ``l < d_j`` (ordered by variable, then order,
then element); the leading derivatives ``u`` are ``X[j, d_j]``.  The hidden
constraints are the coefficients ``r < c_i`` of every equation ``f_i``.
"""

from __future__ import annotations

import numpy as np

import jax.numpy as jnp

from solver.taylor.program import TaylorProgram
from solver.taylor.recurrences import write_row

__all__ = ["StateLayout", "take_static"]


def take_static(A, rows, cols):
    """``A[rows, cols]`` for static (numpy) index vectors, as slices of contiguous runs.

    A gather with constant indices leaves index arithmetic that XLA does
    not fold; inside the step loop it is hoisted into kernels of the
    program's entry, which cost a small model's run more than the gather.
    """
    rows, cols = np.asarray(rows, dtype=int), np.asarray(cols, dtype=int)
    if rows.size == 0:
        return jnp.zeros((0,), A.dtype)
    parts, start = [], 0
    for i in range(1, rows.size + 1):
        if i == rows.size or rows[i] != rows[start] or cols[i] != cols[i - 1] + 1:
            parts.append(A[int(rows[start]), int(cols[start]):int(cols[i - 1]) + 1])
            start = i
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)


class StateLayout:
    """A Taylor program's state layout, and the maps between the flat state and coefficient arrays.

    Args:
        program: the prepared Taylor program (holds the DAE, c, d and p).

    Attributes:
        prog, dae, p, KX: the program, its DAE, its order and coefficient rows.
        n_state: the state's length; ``state_slices`` (variable -> its
            range in z), ``state_rows``/``state_cols`` (variable -> the
            order and element of each of its entries), ``state_position``
            ((variable, element, order) -> index in z), ``state_labels``.
        hidden_index: (block, order r, element) of each hidden constraint;
            ``n_hidden``, ``hidden_labels``.
    """

    def __init__(self, program: TaylorProgram):
        self.prog = program
        dae = program.dae
        self.dae = dae
        self.p = program.p
        d = program.d
        self.KX = program.KX
        # Flat state layout: (variable, order l < d_j, element).
        rows, cols, owners = [], [], []
        self.state_slices = {}
        pos = 0
        for v in dae.variables:
            dv = d[v.offset : v.offset + v.size]
            start = pos
            for l in range(int(dv.max()) if v.size else 0):
                for e in range(v.size):
                    if l < dv[e]:
                        rows.append(l)
                        cols.append(e)
                        owners.append(v.name)
                        pos += 1
            self.state_slices[v.name] = (start, pos)
        self.n_state = pos
        self.state_rows = {v.name: np.array([r for r, o in zip(rows, owners) if o == v.name], dtype=int) for v in dae.variables}
        self.state_cols = {v.name: np.array([c for c, o in zip(cols, owners) if o == v.name], dtype=int) for v in dae.variables}
        # (variable, element, derivative order) -> index in the state z.
        self.state_position = {}
        for v in dae.variables:
            a, _ = self.state_slices[v.name]
            for k, (r, c) in enumerate(zip(self.state_rows[v.name], self.state_cols[v.name])):
                self.state_position[(v.name, int(c), int(r))] = a + k
        self.state_labels = []
        for v in dae.variables:
            names = v.component_names()
            for r, c in zip(self.state_rows[v.name], self.state_cols[v.name]):
                self.state_labels.append(names[c] + "'" * int(r))
        # Hidden constraints: coefficient r < c_i of equation i.
        self.hidden_index = []  # (block, order r, element in block)
        for b, ((first, size), o) in enumerate(zip(dae.equation_blocks, program.out_ids)):
            for e in range(size):
                for r in range(int(program.c[first + e])):
                    self.hidden_index.append((b, r, e))
        self.n_hidden = len(self.hidden_index)
        eq_names = dae.equation_names()
        self.hidden_labels = []
        for b, r, e in self.hidden_index:
            first = dae.equation_blocks[b][0]
            self.hidden_labels.append(eq_names[first + e] + "'" * r)

    def X_from_state(self, z):
        """Variable coefficient arrays with the state filled in, the rest zero."""
        X = {}
        for v in self.dae.variables:
            a, _ = self.state_slices[v.name]
            rows, cols = self.state_rows[v.name], self.state_cols[v.name]
            # Row by row from static pieces, not a scatter (see take_static):
            # runs of consecutive columns are slices of z.
            Xrows = []
            for l in range(self.KX):
                pick = np.flatnonzero(rows == l)  # in column order: the layout's (l, element) loop
                if pick.size == 0 and l > rows.max(initial=-1):
                    Xrows.append(jnp.zeros((self.KX - l, v.size), z.dtype))
                    break
                pieces, at, start = [], 0, 0
                for j in range(1, pick.size + 1):
                    if j < pick.size and cols[pick[j]] == cols[pick[j - 1]] + 1 and pick[j] == pick[j - 1] + 1:
                        continue
                    c0, c1 = int(cols[pick[start]]), int(cols[pick[j - 1]]) + 1
                    if c0 > at:
                        pieces.append(jnp.zeros(c0 - at, z.dtype))
                    pieces.append(z[a + int(pick[start]):a + int(pick[j - 1]) + 1])
                    at, start = c1, j
                if at < v.size:
                    pieces.append(jnp.zeros(v.size - at, z.dtype))
                Xrows.append(jnp.concatenate(pieces)[None])
            X[v.name] = jnp.concatenate(Xrows).reshape((self.KX,) + v.shape)
        return X

    def state_from_X(self, X):
        """The flat state from coefficient arrays."""
        parts = []
        for v in self.dae.variables:
            Xf = X[v.name].reshape(self.KX, v.size)
            parts.append(take_static(Xf, self.state_rows[v.name], self.state_cols[v.name]))
        return jnp.concatenate(parts) if parts else jnp.zeros(0)

    def _d_of(self, v):
        return jnp.asarray(self.prog.d[v.offset : v.offset + v.size])

    def set_stage(self, X, k, u):
        """Write stage k's unknowns ``X[j, k + d_j]`` (k ≥ 0) from flat ``u``.

        One row update per distinct offset of a variable (a scatter would
        make XLA copy the array under vmap; see ``taylor.write_row``).
        """
        out = {}
        for v in self.dae.variables:
            Xf = X[v.name].reshape(self.KX, v.size)
            dv = self.prog.d[v.offset : v.offset + v.size]
            uv = u[v.offset : v.offset + v.size]
            for dd in np.unique(dv):
                if np.all(dv == dd):
                    row = uv
                else:
                    row = jnp.where(jnp.asarray(dv == dd), uv, Xf[jnp.clip(k + int(dd), 0, self.KX - 1)])
                Xf = write_row(Xf, k + int(dd), row)
            out[v.name] = Xf.reshape((self.KX,) + v.shape)
        return out

    def get_stage(self, X, k):
        """Stage k's unknowns as a flat vector (0 where k + d_j < 0)."""
        parts = []
        for v in self.dae.variables:
            Xf = X[v.name].reshape(self.KX, v.size)
            rows = k + self._d_of(v)
            parts.append(jnp.where(rows >= 0, Xf[jnp.clip(rows, 0, self.KX - 1), np.arange(v.size)], 0.0))
        return jnp.concatenate(parts)
