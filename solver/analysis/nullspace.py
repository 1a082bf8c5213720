"""The null spaces of a (nearly) singular system Jacobian, named: pure numpy, no model code.

Shared by the check at the initial point (:mod:`solver.analysis.diagnose`)
and the failure reasons of a batch (:mod:`solver.analysis.failures`); a
module of its own so that neither imports the other's dependencies (the
check builds models, the reasons are written while a batch is solved).
"""

from __future__ import annotations

import numpy as np

__all__ = ["COND_MAX", "NULL_SHARE", "CHECK_ORDER", "scaled", "named", "equation_labels", "unknown_labels"]

COND_MAX = 1e12
"""Condition number (2-norm, of the row- and column-scaled Jacobian) above
which the system Jacobian counts as numerically singular: the integrator's
linear solves would lose all but about 4 of float64's 16 digits."""
NULL_SHARE = 0.1
"""An equation (variable) is named as dependent when its weight in the null
space is at least this share of the largest weight; smaller weights are
rounding, or incidental involvement."""
CHECK_ORDER = 2
"""Taylor order of the compiled model used by the check (the lowest allowed)."""


def scaled(A: np.ndarray) -> np.ndarray:
    """Rows, then columns, divided by their largest magnitude (zero ones kept).

    Args:
        A: a matrix.

    Returns:
        The scaled copy: units and the size of a row's terms no longer
        decide which rows a null space names.
    """
    def by_max(M, axis):
        m = np.max(np.abs(M), axis=axis, keepdims=True)
        return M / np.where(m > 0, m, 1.0)
    return by_max(by_max(A, 1), 0)


def named(basis: np.ndarray, labels: list) -> list:
    """Labels of the large rows of a null-space basis, in the model's order.

    The weight of index i is the norm of row i of the orthonormal basis
    (independent of which basis the SVD chose).  The model's order, not the
    weights', because dependent rows often weigh the same (two identical
    equations: 1/sqrt(2) each), and rounding would then pick their order.

    Args:
        basis: an orthonormal basis of a null space, one row per label.
        labels: the labels of the rows.

    Returns:
        The labels whose weight is at least :data:`NULL_SHARE` of the largest.
    """
    w = np.linalg.norm(basis, axis=1)
    if not w.size or w.max() <= 0:
        return []
    return [labels[i] for i in range(len(w)) if w[i] >= NULL_SHARE * w.max()]


def equation_labels(model) -> list:
    """Row labels: ``fK``, with the file's text for ``Kind: DAE`` (``fK`` is ``Equations[K]``).

    Args:
        model: a model from :func:`solver.load`.

    Returns:
        One label per flat equation of its DAE.
    """
    dae = model.dae
    names = dae.equation_names()
    data = getattr(model, "expanded_data", None) or model.data   # repeats written out
    texts = data.get("Equations") if model.kind == "DAE" and isinstance(data, dict) else None
    if not isinstance(texts, list) or len(texts) != len(dae.equation_blocks):
        return names
    out = []
    for b, (first, size) in enumerate(dae.equation_blocks):
        for e in range(size):
            out.append(f"{names[first + e]} (Equations[{b}]: {str(texts[b]).strip()})")
    return out


def unknown_labels(dae) -> list:
    """Column labels: each unknown at its highest derivative ``x_j^(d_j)`` (``x''``, ``lam``).

    Args:
        dae: the DAE (its structure gives ``d_j``).

    Returns:
        One label per flat unknown.
    """
    d = dae.structure.d
    return [name + "'" * int(d[j]) for j, name in enumerate(dae.component_names())]
