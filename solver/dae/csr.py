"""A compressed sparse row pattern in numpy alone, and the connected components of one.

Reading a model needs sparse patterns (which unknowns every equation
depends on, at which order) but none of SciPy's sparse arithmetic: the
structural analysis only builds, stacks and walks them.  SciPy's sparse
package costs a fifth of a second to import (it pulls in ``scipy.linalg``),
in every process that reads a model, warm cache or not; :class:`CSR` holds
the same three arrays and does what reading a model does with them.
:meth:`CSR.to_scipy` hands one to SciPy where its arithmetic is wanted
(IPOPT's derivative patterns).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["CSR", "connected_components"]


class CSR:
    """A sparse ``(n_rows, n_cols)`` array in compressed sparse row form (SciPy's layout and attribute names).

    Row ``r``'s entries are ``data[indptr[r]:indptr[r + 1]]`` in the columns
    ``indices[indptr[r]:indptr[r + 1]]``.

    Args:
        data: the stored values.
        indices: their columns (int32).
        indptr: ``(n_rows + 1,)`` row starts (int64).
        shape: ``(n_rows, n_cols)``.

    Raises:
        ValueError: the arrays do not describe a ``shape`` array.
    """

    __slots__ = ("data", "indices", "indptr", "shape")

    def __init__(self, data, indices, indptr, shape: tuple[int, int]):
        self.data = np.asarray(data)
        self.indices = np.asarray(indices, dtype=np.int32)
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.shape = (int(shape[0]), int(shape[1]))
        if self.indptr.shape != (self.shape[0] + 1,) or len(self.indices) != len(self.data) \
                or self.indptr[-1] != len(self.data):
            raise ValueError(f"CSR arrays do not fit shape {self.shape}: indptr {self.indptr.shape}, "
                             f"{len(self.indices)} indices, {len(self.data)} values")

    @classmethod
    def empty(cls, n_rows: int, n_cols: int, dtype=np.int32) -> "CSR":
        """An ``(n_rows, n_cols)`` array with no entries."""
        return cls(np.zeros(0, dtype), np.zeros(0, np.int32), np.zeros(n_rows + 1, np.int64), (n_rows, n_cols))

    @classmethod
    def from_coo(cls, rows, cols, data, shape: tuple[int, int]) -> "CSR":
        """The array with ``data[k]`` at ``(rows[k], cols[k])``, sorted by row and column; duplicates are summed.

        Args:
            rows, cols: entry positions.
            data: entry values.
            shape: ``(n_rows, n_cols)``.

        Returns:
            A :class:`CSR` with sorted column indices and no duplicates.
        """
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        data = np.asarray(data)
        key = rows * shape[1] + cols
        order = np.argsort(key, kind="stable")
        key, data = key[order], data[order]
        first = np.ones(len(key), bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        summed = np.add.reduceat(data, starts) if len(starts) else data[:0]
        key = key[starts]
        indptr = np.zeros(shape[0] + 1, np.int64)
        np.cumsum(np.bincount(key // max(shape[1], 1), minlength=shape[0]), out=indptr[1:])
        return cls(summed.astype(data.dtype, copy=False), key % max(shape[1], 1), indptr, shape)

    @classmethod
    def vstack(cls, blocks: Sequence["CSR"]) -> "CSR":
        """The blocks one above the other (all of one width).

        Raises:
            ValueError: no blocks, or blocks of different widths.
        """
        if not blocks:
            raise ValueError("vstack needs at least one block")
        width = blocks[0].shape[1]
        if any(b.shape[1] != width for b in blocks):
            raise ValueError(f"vstack needs blocks of one width, got {[b.shape[1] for b in blocks]}")
        starts = np.cumsum([0] + [b.nnz for b in blocks[:-1]])
        indptr = np.concatenate([np.zeros(1, np.int64)] + [b.indptr[1:] + s for b, s in zip(blocks, starts)])
        return cls(np.concatenate([b.data for b in blocks]), np.concatenate([b.indices for b in blocks]),
                   indptr, (sum(b.shape[0] for b in blocks), width))

    @property
    def nnz(self) -> int:
        """The number of stored entries."""
        return len(self.data)

    def rows(self) -> np.ndarray:
        """The row of every stored entry (``(nnz,)``, in storage order)."""
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))

    def with_data(self, data) -> "CSR":
        """The same pattern holding ``data`` (one value per stored entry)."""
        return CSR(data, self.indices, self.indptr, self.shape)

    def transpose(self) -> "CSR":
        """The ``(n_cols, n_rows)`` transpose, its columns sorted within each row."""
        return CSR.from_coo(self.indices, self.rows(), self.data, (self.shape[1], self.shape[0]))

    T = property(transpose)

    def toarray(self) -> np.ndarray:
        """The dense array (absent entries zero; duplicates, if any, summed)."""
        out = np.zeros(self.shape, dtype=self.data.dtype)
        np.add.at(out, (self.rows(), self.indices), self.data)
        return out

    def to_scipy(self):
        """The same array as a ``scipy.sparse.csr_array`` (imports SciPy)."""
        import scipy.sparse as sp

        return sp.csr_array((self.data, self.indices, self.indptr), shape=self.shape)

    def __repr__(self) -> str:
        return f"CSR(shape={self.shape}, nnz={self.nnz}, dtype={self.data.dtype})"


def connected_components(pattern: CSR) -> tuple[int, np.ndarray]:
    """The connected components of the undirected graph of a square pattern (an entry ``(i, j)`` joins i and j).

    Args:
        pattern: a square :class:`CSR`.

    Returns:
        ``(count, labels)``: ``labels[i]`` is the component of node i, numbered
        0, 1, … in the order of each component's smallest node.
    """
    n = pattern.shape[0]
    parent = np.arange(n)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(pattern.rows().tolist(), pattern.indices.tolist()):
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = np.array([root(i) for i in range(n)], dtype=np.int64)
    _, labels = np.unique(roots, return_inverse=True)
    return int(labels.max(initial=-1)) + 1, labels.reshape(n)
