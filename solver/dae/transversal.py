"""The transversals of the Σ-method: a maximum matching, and a highest value transversal when it is perfect.

A transversal of an ``n x n`` signature matrix Σ picks one finite entry in
every row and every column; a highest value transversal (HVT) maximises the
sum of the σ it picks.  Both are linear assignment problems on the finite
entries of Σ.

- Up to :data:`DENSE_LIMIT` unknowns (every shipped model) the Hungarian
  method solves them at once in numpy (:func:`_hungarian`): costs
  ``top + 1 − σ_ij`` on the finite entries and a cost ``BIG`` on the absent
  ones that exceeds any sum of finite costs, so an optimal assignment first
  uses as few absent entries as it can (its finite entries are a maximum
  matching) and then, among those, has the highest Σσ.
- Above it, SciPy's sparse solvers (Hopcroft–Karp, then LAPJVsp), whose
  import costs a fifth of a second (``scipy.sparse`` pulls in
  ``scipy.linalg``): a price worth paying for a large model, not for every
  process that reads a small one.

The two paths are checked against each other on random signatures
(``tests/test_structure.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["DENSE_LIMIT", "transversal"]

#: Unknowns up to which the dense Hungarian method in numpy is used (O(n³)
#: at worst, n² small numpy operations); SciPy's sparse solvers above.
DENSE_LIMIT = 96


def transversal(shape: tuple[int, int], rows, cols, orders) -> tuple[np.ndarray, bool]:
    """A maximum matching of Σ's finite entries, and whether it is an HVT.

    Args:
        shape: ``(n, n)``.
        rows, cols: the finite entries' positions (int arrays).
        orders: their σ (``>= 0``).

    Returns:
        ``(match, perfect)``: ``match[i]`` is row i's column, ``-1`` where the
        matching leaves row i out. When ``perfect`` (every row matched), the
        matching is a highest value transversal.
    """
    n = shape[0]
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    orders = np.asarray(orders, dtype=np.int64)
    if n <= DENSE_LIMIT:
        return _dense(n, rows, cols, orders)
    return _sparse(shape, rows, cols, orders)


def _dense(n: int, rows, cols, orders) -> tuple[np.ndarray, bool]:
    top = int(orders.max(initial=0))
    big = float(n * (top + 1) + 1)
    cost = np.full((n, n), big)
    cost[rows, cols] = (top + 1 - orders).astype(np.float64)
    finite = np.zeros((n, n), bool)
    finite[rows, cols] = True
    match = _hungarian(cost)
    match = np.where(finite[np.arange(n), match], match, -1)
    return match, bool(np.all(match >= 0))


def _hungarian(cost: np.ndarray) -> np.ndarray:
    """A minimum-cost assignment of a square cost matrix: ``col[i]`` for every row i.

    The shortest augmenting path method with row and column potentials
    (Kuhn–Munkres in its O(n³) form), the inner scan over the columns
    vectorised.  Integer-valued costs stay exact in float64.
    """
    n = cost.shape[0]
    inf = np.inf
    u = np.zeros(n + 1)
    v = np.zeros(n + 1)
    owner = np.zeros(n + 1, np.int64)       # owner[j]: the row (1-based) assigned to column j; 0 for none
    way = np.zeros(n + 1, np.int64)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        min_v = np.full(n + 1, inf)
        used = np.zeros(n + 1, bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            free = ~used
            free[0] = False
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            better = free[1:] & (reduced < min_v[1:])
            min_v[1:][better] = reduced[better]
            way[1:][better] = j0
            candidates = np.where(free, min_v, inf)
            j1 = int(np.argmin(candidates))
            delta = candidates[j1]
            u[owner[used]] += delta
            v[used] -= delta
            min_v[free] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    col = np.empty(n, np.int64)
    col[owner[1:] - 1] = np.arange(n)
    return col


def _sparse(shape, rows, cols, orders) -> tuple[np.ndarray, bool]:
    import scipy.sparse as sp
    from scipy.sparse.csgraph import maximum_bipartite_matching, min_weight_full_bipartite_matching

    pattern = sp.csr_array((np.ones(len(rows), np.int8), (rows, cols)), shape=shape)
    match = np.asarray(maximum_bipartite_matching(pattern, perm_type="column"), np.int64)
    if np.any(match < 0):
        return match, False
    # Positive weights top + 1 − σ, minimised: Σσ maximised.
    top = int(orders.max(initial=0))
    w = sp.csr_array(((top + 1 - orders).astype(np.float64), (rows, cols)), shape=shape)
    r, c = min_weight_full_bipartite_matching(w)
    perm = np.empty(shape[0], np.int64)
    perm[r] = c
    return perm, True
