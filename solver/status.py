"""The one table of status codes: single runs, batches, sweep stores and the CLI.

Every simulation (one run, or each point of a batch or sweep) ends with one
``int8`` code. The codes are fixed here once, because they are written into
result files and sweep stores that outlive any one version of the program:
new codes may be appended, never renumbered. A status variable carries the CF
``flag_values``/``flag_meanings`` attributes (:func:`cf_attrs`) so that
generic tools (ncdump, xarray's CF decoders, Panoply) can name them.

``PENDING`` (-1) is bookkeeping of a sweep store: a point whose batch has not
been written yet. ``SUCCESS`` (0) means integrated to the end;
``STOPPED_BY_EVENT`` and ``ZENO`` mean the run ended early as asked (a
terminal event, an accumulation of impacts), with its data up to then.  Any
other code above 0 is a failure (:func:`is_failure`), and a failed point's
data are NaN.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "PENDING", "SUCCESS", "MAX_STEPS", "STEP_TOO_SMALL", "SINGULAR_JACOBIAN",
    "NONFINITE", "NO_ASSEMBLY", "WORKER_LOST", "ERROR", "STOPPED_BY_EVENT", "ZENO", "EVENT_OVERFLOW",
    "FINISHED", "CODES", "MEANINGS", "DESCRIPTIONS", "meaning", "is_failure", "cf_attrs", "samples_after_failure",
]

PENDING = -1
SUCCESS = 0
MAX_STEPS = 1
STEP_TOO_SMALL = 2
SINGULAR_JACOBIAN = 3
NONFINITE = 4
NO_ASSEMBLY = 5
WORKER_LOST = 6
ERROR = 7
STOPPED_BY_EVENT = 8
ZENO = 9
EVENT_OVERFLOW = 10

#: The codes of a run that ended as asked: at the end time, at a terminal
#: event, or at an accumulation of impacts (Zeno) that it stopped at.
FINISHED = (SUCCESS, STOPPED_BY_EVENT, ZENO)

#: name -> code, in code order (the order of ``flag_values``).
CODES: dict[str, int] = {
    "pending": PENDING,
    "success": SUCCESS,
    "max_steps": MAX_STEPS,
    "step_too_small": STEP_TOO_SMALL,
    "singular_jacobian": SINGULAR_JACOBIAN,
    "nonfinite": NONFINITE,
    "no_assembly": NO_ASSEMBLY,
    "worker_lost": WORKER_LOST,
    "error": ERROR,
    "stopped_by_event": STOPPED_BY_EVENT,
    "zeno": ZENO,
    "event_overflow": EVENT_OVERFLOW,
}

#: code -> name (a CF flag meaning: one word, no spaces).
MEANINGS: dict[int, str] = {code: name for name, code in CODES.items()}

#: code -> one sentence for reports.
DESCRIPTIONS: dict[int, str] = {
    PENDING: "not run yet",
    SUCCESS: "integrated to the end time",
    MAX_STEPS: "stopped at the maximum number of steps",
    STEP_TOO_SMALL: "step size fell below its minimum",
    SINGULAR_JACOBIAN: "system Jacobian singular (structural analysis or projection failed)",
    NONFINITE: "a non-finite value appeared",
    NO_ASSEMBLY: "no consistent initial point (initialisation failed)",
    WORKER_LOST: "the Dask worker running the batch died repeatedly",
    ERROR: "unexpected exception in the batch (see batch_message)",
    STOPPED_BY_EVENT: "stopped at a terminal event (see the events)",
    ZENO: "stopped where impacts accumulate (Zeno): the body comes to rest on its stop",
    EVENT_OVERFLOW: "more events than max_events: the later ones were not recorded (raise max_events)",
}


def meaning(code: int) -> str:
    """The flag name of a status code.

    Args:
        code: a status code.

    Returns:
        Its name, e.g. ``"max_steps"``; ``"unknown(12)"`` for a code this
        version does not know (e.g. a store written by a newer version).
    """
    return MEANINGS.get(int(code), f"unknown({int(code)})")


def is_failure(code) -> np.ndarray | bool:
    """Whether status code(s) mark a failure (neither success nor pending).

    Args:
        code: a code or an array of codes.

    Returns:
        A bool, or a bool array of the same shape.
    """
    if np.ndim(code):
        c = np.asarray(code)
        return (c > SUCCESS) & ~np.isin(c, FINISHED)
    return int(code) > SUCCESS and int(code) not in FINISHED


def cf_attrs() -> dict:
    """CF attributes of a ``status`` variable (a single run's or a store's).

    Returns:
        ``long_name``, ``flag_values`` (int8 array, the variable's own type)
        and ``flag_meanings`` (space-separated names in the same order).
    """
    return {
        "long_name": "simulation status",
        "flag_values": np.array(list(CODES.values()), dtype=np.int8),
        "flag_meanings": " ".join(CODES),
    }


def samples_after_failure(time, status, failure_time) -> np.ndarray:
    """Which samples of a batch's series come after their point's failure (a solve and a sweep store NaN them).

    Args:
        time: ``(T,)`` the output times.
        status: ``(B,)`` status codes (:mod:`solver.status`).
        failure_time: ``(B,)`` when each point failed; NaN where unknown.

    Returns:
        ``(B, T)`` bool: True for the samples of failed points after their
        failure time, and for every sample of a failed point whose failure
        time is unknown; False for the points that did not fail.
    """
    failed = is_failure(np.asarray(status))
    with np.errstate(invalid="ignore"):
        kept = np.asarray(time)[None, :] <= np.asarray(failure_time, dtype=np.float64)[:, None]
    return failed[:, None] & ~kept
