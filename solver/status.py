"""Status codes of a simulation (per point in a batch), shared by solver and sweep.

Codes are int8 so a sweep store can keep them as CF flags.  Negative codes are
bookkeeping of the sweep store (not run yet); positive ones are failures.
"""

from __future__ import annotations

__all__ = ["PENDING", "SUCCESS", "MAX_STEPS", "STEP_TOO_SMALL", "SINGULAR_JACOBIAN",
           "NONFINITE", "NO_ASSEMBLY", "WORKER_LOST", "ERROR", "MEANINGS", "meaning",
           "cf_attrs"]

PENDING = -1
SUCCESS = 0
MAX_STEPS = 1
STEP_TOO_SMALL = 2
SINGULAR_JACOBIAN = 3
NONFINITE = 4
NO_ASSEMBLY = 5
WORKER_LOST = 6
ERROR = 7

MEANINGS = {
    PENDING: "pending",
    SUCCESS: "success",
    MAX_STEPS: "max_steps",
    STEP_TOO_SMALL: "step_too_small",
    SINGULAR_JACOBIAN: "singular_jacobian",
    NONFINITE: "nonfinite",
    NO_ASSEMBLY: "no_assembly",
    WORKER_LOST: "worker_lost",
    ERROR: "error",
}


def meaning(code: int) -> str:
    """The name of a status code (``"unknown(N)"`` for codes not listed)."""
    return MEANINGS.get(int(code), f"unknown({int(code)})")


def cf_attrs() -> dict:
    """CF ``flag_values``/``flag_meanings`` attributes for a status variable."""
    codes = sorted(MEANINGS)
    return {
        "flag_values": [int(c) for c in codes],
        "flag_meanings": " ".join(MEANINGS[c] for c in codes),
        "long_name": "simulation status",
    }
