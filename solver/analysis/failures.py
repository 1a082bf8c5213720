"""Why and when the points of a batch failed, in the model's own words.

:func:`solver.solve_batch` records for every failed point its *failure
time* (when the run stopped: ``t0`` for a point that did not assemble, else
the time of the last accepted step) and its *failure reason*, a short
sentence without numbers (so that equal reasons group in a sweep's status
report) that names the parts involved where the model names them:

- ``Kind: Mechanism``: ``rod QB``, ``rigid OA``, ``joint C of OAC`` (a point
  tied to rigid body OAC), ``driver Ay`` for constraint rows, and
  ``joint B of AB and QB`` (a point shared by parts) for points
  (:meth:`solver.mechanics.mechanism.Mechanism.constraint_parts`);
- ``Kind: Lagrangian``: ``constraint dot(B - A, B - A) - b**2`` (its text
  in the file) and ``driver phi``;
- ``Kind: DAE``: ``f2 (Equations[2]: x**2 + y**2 - L**2)``;
- any other DAE: its equation names (``f2``).

A singular system Jacobian met during the integration of a Lagrangian DAE
(a mechanism) is a *kinematic singularity*: a locking (toggle) position or
a change point, where the constraints stop being independent.  Its reason
names the dependent constraints (the left null space of the scaled system
Jacobian at the failure state, as :mod:`solver.analysis.diagnose` does at
t0) and, for a mechanism with no degree of freedom left (every motion
driven), the points whose acceleration the constraints no longer fix (the
null space of the constraint Jacobian).  A step size that fell below its
minimum at such a state (cond > :data:`~solver.analysis.nullspace.COND_MAX`)
is reported as met at a kinematic singularity too.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from solver import status as st
from solver.analysis.nullspace import CHECK_ORDER, COND_MAX, NULL_SHARE, scaled, unknown_labels

__all__ = ["equation_parts", "failure_records", "singularity_text", "KINEMATIC"]

#: How a kinematic singularity is named in reasons.
KINEMATIC = "kinematic singularity (locking or change point)"


def _words(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _unique(names) -> list[str]:
    out = []
    for n in names:
        if n not in out:
            out.append(n)
    return out


def _dae_of(problem):
    return problem.dae if hasattr(problem, "dae") and not hasattr(problem, "equation_names") else problem


def _is_lagrangian(dae) -> bool:
    return getattr(dae, "constraint_item", None) is not None and hasattr(dae, "coords")


def _own_constraint_names(problem, dae, n_own: int) -> list[str] | None:
    """The names of a Lagrangian DAE's own constraints (drivers excluded), or None."""
    mech = getattr(problem, "mechanism", None)
    if mech is not None:
        names = mech.constraint_parts()[:n_own]
        return names if len(names) == n_own else None
    data = getattr(problem, "expanded_data", None) or getattr(problem, "data", None)
    texts = data.get("Constraints") if isinstance(data, Mapping) else None
    # One name per constraint row only when every entry is one scalar row.
    if isinstance(texts, list) and len(texts) == n_own:
        return [f"constraint {' '.join(str(t).split())}" for t in texts]
    return None


def equation_parts(problem) -> list[str]:
    """One name per flat equation of a model's DAE: the part or equation it belongs to.

    Args:
        problem: a model from :func:`solver.load` (its file names the parts)
            or a DAE (then its equation names, and a Lagrangian DAE's
            drivers and coordinates).

    Returns:
        Names in the order of ``dae.equation_names()``; rows of one part
        (the two components of a point's equation of motion) share a name.
    """
    dae = _dae_of(problem)
    names = list(dae.equation_names())
    if _is_lagrangian(dae):
        for k, coord in enumerate(dae.coords):
            first, size = dae.equation_blocks[dae.el_items[k]]
            names[first:first + size] = [f"equation of motion of {coord.name}"] * size
        first, size = dae.equation_blocks[dae.constraint_item]
        drivers = list(getattr(dae, "drivers", ()) or ())
        n_own = size - len(drivers)
        own = _own_constraint_names(problem, dae, n_own) if problem is not dae else None
        names[first:first + n_own] = own or [f"constraint {k}" for k in range(n_own)]
        for d in drivers:
            names[first + d.index] = f"driver {d.name}"
        return names
    if problem is not dae and getattr(problem, "kind", None) == "DAE":
        from solver.analysis.nullspace import equation_labels

        labels = equation_labels(problem)
        if len(labels) == len(names):
            return labels
    return names


def _point_name(problem, dae, coord: str) -> str:
    """``joint B of AB and QB``, ``point C of QC`` or ``coordinate q``."""
    mech = getattr(problem, "mechanism", None)
    if mech is None:
        return f"coordinate {coord}"
    parts = mech.point_parts(coord)
    if len(parts) > 1:
        return f"joint {coord} of {_words(parts)}"
    return f"point {coord} of {parts[0]}" if parts else f"point {coord}"


def _null_weights(M: np.ndarray, k: int, side: str) -> np.ndarray:
    """Row norms of the last ``k`` left (``side="left"``) or right singular vectors of ``M``."""
    U, _, Vt = np.linalg.svd(M)
    basis = U[:, M.shape[0] - k:] if side == "left" else Vt[M.shape[1] - k:, :].T
    return np.linalg.norm(basis, axis=1)


def _large(weights: np.ndarray) -> np.ndarray:
    if not weights.size or not weights.max() > 0:
        return np.zeros(weights.shape, dtype=bool)
    return weights >= NULL_SHARE * weights.max()


def singularity_text(A: np.ndarray, problem, parts: Sequence[str] | None = None) -> tuple[str, float]:
    """What makes a system Jacobian (nearly) singular, in the model's words.

    The weakest direction is named even when the matrix is not singular by
    the check's criterion (the integrator's own test may have found it
    singular one step further).

    Args:
        A: the n x n system Jacobian at the failure state
            (:meth:`solver.compiled.Compiled.system_jacobian`).
        problem: the model (or DAE) it belongs to.
        parts: :func:`equation_parts` of ``problem`` (computed if None).

    Returns:
        ``(text, cond)``: e.g. ``"kinematic singularity (locking or change
        point): the constraints of rod AB and rod QB are dependent;
        undetermined: joint B of AB and QB"``, and the condition number of
        the row- and column-scaled matrix (``inf`` when exactly singular).
    """
    dae = _dae_of(problem)
    parts = list(parts) if parts is not None else equation_parts(problem)
    A = np.asarray(A, dtype=float)
    n = A.shape[0]
    if n == 0 or not np.all(np.isfinite(A)):
        bad = [parts[i] for i in range(n) if not np.all(np.isfinite(A[i]))]
        return f"system Jacobian not finite in {_words(_unique(bad))}", math.inf
    S = scaled(A)
    s = np.linalg.svd(S, compute_uv=False)
    cond = float(s[0] / s[-1]) if s[-1] > 0 else math.inf
    k = max(1, int(np.sum(s <= s[0] / COND_MAX))) if s[0] > 0 else n
    rows = np.flatnonzero(_large(_null_weights(S, k, "left")))
    named = _unique(parts[i] for i in rows)
    if _is_lagrangian(dae):
        first, size = dae.equation_blocks[dae.constraint_item]
        if all(first <= i < first + size for i in rows):
            text = f"{KINEMATIC}: the constraints of {_words(named)} are dependent"
            points = _undetermined_points(A, problem, dae, first, size, k)
            if points:
                text += f"; undetermined: {_words(points)}"
            return text, cond
    cols = np.flatnonzero(_large(_null_weights(S, k, "right")))
    unknowns = unknown_labels(dae)
    return (f"singular system Jacobian: dependent equations {_words(named)}; undetermined unknowns "
            f"{_words(_unique(unknowns[j] for j in cols))}"), cond


def _undetermined_points(A, problem, dae, first: int, size: int, k: int) -> list[str]:
    """Points a fully driven mechanism's constraints stop fixing (null space of G).

    Only where the mechanism has no degree of freedom: there every null
    direction of the constraint Jacobian G is one the singularity opened;
    with free coordinates the regular motions share that null space.
    """
    if int(getattr(dae.structure, "dof", -1)) != 0:
        return []
    cols, coords = [], []
    for coord in dae.coords:
        v = dae.var_index[coord.name]
        cols += range(v.offset, v.offset + v.size)
        coords += [coord.name] * v.size
    G = A[first:first + size][:, cols]
    if G.shape[1] == 0:
        return []
    # Rows and columns scaled, so that units do not pick the names.
    weights = _null_weights(scaled(G), min(k, G.shape[1]), "right")
    big = _large(weights)
    return [_point_name(problem, dae, c) for c in _unique(coords[j] for j in np.flatnonzero(big))]


def _hidden_parts(integ, parts: Sequence[str], rows: Sequence[int]) -> list[str]:
    """Part names of hidden-constraint rows (a constraint and its derivatives count once)."""
    dae = integ.dae
    out = []
    for i in rows:
        b, _, e = integ.hidden_index[i]
        out.append(parts[dae.equation_blocks[b][0] + e])
    return _unique(out)


def failure_records(comp, problem, status, t0: float, t_final, z_final, u_final, params: Mapping,
                    violated: Sequence[Sequence[int]] | None = None,
                    messages: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Failure time and reason of every point of a batch.

    Args:
        comp: the batch's :class:`solver.compiled.Compiled` model.
        problem: its model (names the parts) or DAE.
        status: ``(B,)`` status codes.
        t0: the initial time.
        t_final, z_final, u_final: per point, the time, state and leading
            derivatives where its run stopped (the integrator's result).
        params: parameter name -> ``(B, ...)`` values of every point.
        violated: per point, the hidden constraints violated where it failed
            to assemble (``Compiled.consistent_points(violated=...)``).
        messages: per point, the initialisation message ('' if none): the
            reason of a point that failed before its constraints were tried
            (bad initial values).

    Returns:
        ``(times, reasons)``: ``(B,)`` float, NaN where the point did not
        fail; ``B`` strings, empty where it did not.
    """
    status = np.asarray(status)
    B = status.shape[0]
    times = np.full(B, np.nan)
    reasons = [""] * B
    failed = np.flatnonzero(st.is_failure(status))
    if not failed.size:
        return times, reasons
    parts = equation_parts(problem)
    jacobian = None
    for i in failed:
        code = int(status[i])
        if code == st.NO_ASSEMBLY:
            times[i] = float(t0)
            rows = list(violated[i]) if violated is not None else []
            if rows:
                reasons[i] = ("no assembly: no consistent initial point; violated at the closest point "
                              f"found: {_words(_hidden_parts(comp.integrator, parts, rows))}")
            else:
                why = (messages[i] if messages is not None else "").strip().splitlines()
                reasons[i] = "no assembly: " + (why[0] if why else "no consistent initial point")
            continue
        times[i] = float(t_final[i])
        description = st.DESCRIPTIONS.get(code, st.meaning(code))
        if code not in (st.SINGULAR_JACOBIAN, st.STEP_TOO_SMALL):
            reasons[i] = description
            continue
        if jacobian is None:
            jacobian = _jacobian_at(comp)
        try:
            A = jacobian({k: np.asarray(v)[i] for k, v in params.items()}, float(t_final[i]),
                         np.asarray(z_final[i]), np.asarray(u_final[i]))
            text, cond = singularity_text(A, problem, parts)
        except Exception as exc:  # noqa: BLE001 - a diagnosis must never lose the batch
            reasons[i] = f"{description} (not analysed: {type(exc).__name__})"
            continue
        if code == st.SINGULAR_JACOBIAN:
            reasons[i] = text
        else:
            reasons[i] = (f"step size fell below its minimum at a {text}" if cond > COND_MAX
                          else "step size fell below its minimum")
    return times, reasons


def _jacobian_at(comp):
    """``(params, t, z, u) -> system Jacobian`` of a compiled model (a dense one where it has none)."""
    if comp.integrator.linear != "dense":
        # The structured KKT path never forms the Jacobian: one dense model
        # of the lowest order, compiled once (as mechsweep check does).
        from solver.compiled import compiled_model

        comp = compiled_model(comp.dae, CHECK_ORDER, "dense", comp.integrator.mode, batch=False)
    return lambda p, t, z, u: comp.system_jacobian(p, t, z, u)[0]
