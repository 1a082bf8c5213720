"""The runs ``test_optimisation_level.py`` compares between the suite's build and an optimised one.

Imported by the test and by its child process (``python -c``), so both run the
same calls.
"""

from pathlib import Path

import numpy as np

import solver

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"


def runs() -> dict:
    """{run name: {float variable: nested list, "status": list}} of four short runs.

    The DAE pendulum in the unrolled and the compact engine, a batch of three
    pendulum lengths, and Mechanism0 (a ``Mechanism`` file with 3-D bodies,
    a spring and the structured KKT path).
    """
    pend = solver.load(CONFIGS / "pendulum.yaml")
    mech = solver.load(CONFIGS / "mechanism0.yaml")
    t = np.linspace(0.0, 2.0, 21)
    out = {
        "pendulum unrolled": pend.solve(t_span=(0.0, 2.0), t_eval=t, mode="unrolled"),
        "pendulum compact": pend.solve(t_span=(0.0, 2.0), t_eval=t, mode="compact"),
        "pendulum batch": solver.solve_batch(pend, {"L": [0.5, 1.0, 2.0]}, t_span=(0.0, 2.0), t_eval=t),
        "mechanism0": mech.solve(t_span=(0.0, 0.5), t_eval=np.linspace(0.0, 0.5, 11)),
    }
    return {name: {v: np.asarray(ds[v].values).tolist() for v in ds.data_vars if ds[v].dtype.kind == "f"}
            | {"status": np.asarray(ds["status"].values).tolist()} for name, ds in out.items()}
