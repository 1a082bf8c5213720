"""Run times of the models the compact engine runs one at a time: for comparing two commits side by side.

Andrews' squeezer (tol 1e-10 and 1e-12, set up as in ``bench_peers.py``) and
the shipped Pleiades, RSCR, Mechanism0 and 3-D chain model files at their
own settings: the best of repeated ``Integrator.run`` calls, with the steps
and the error (Andrews) or the first entries of the final state, so that two
trees can be checked to give the same results.  Run it in each tree,
alternating (a worktree of the other commit at /tmp/base)::

    .venv/bin/python workflows/benchmarks/bench_compact_runs.py
    PYTHONPATH=/tmp/base .venv/bin/python /tmp/base/workflows/benchmarks/bench_compact_runs.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import bench_peers as bp  # noqa: E402
import solver  # noqa: E402

# (model file, end time, output times)
MODELS = [("pleiades", 3.0, 2), ("rscr", 10.0, 101), ("mechanism0", 5.0, 101), ("pendulum_chain3d", 3.0, 101)]


def best_of(fn, repeat: int) -> float:
    """The shortest of ``repeat`` timed calls of ``fn`` (seconds), after an untimed one."""
    return bp.timed(fn, repeat)[1]


def andrews_lines(repeat: int) -> list[str]:
    """One line per tolerance: Andrews' squeezer to t = 0.03, error against the published values."""
    dae = solver.DAE(bp.andrews_residual, bp.ANDREWS_NAMES + [f"l{k + 1}" for k in range(6)], {})
    comp, z0, u0 = bp.mechsweep_state(dae, bp.order_for_tol(1e-10), {}, 0.0, bp.andrews_values(),
                                      bp.ANDREWS_FIXED)
    t_eval = np.array([0.0, bp.ANDREWS_T1])
    lines = []
    for tol in (1e-10, 1e-12):
        def fn():
            return bp.block(comp.integrator.run({}, z0, u0, 0.0, bp.ANDREWS_T1, t_eval, tol))
        r = fn()
        q = np.array([float(np.asarray(r["values"][n])[-1, 0]) for n in bp.ANDREWS_NAMES])
        lines.append(f"andrews tol {tol:g}: {best_of(fn, repeat) * 1e3:.2f} ms, {int(r['steps'])} steps, "
                     f"error {bp.andrews_err(q):.2e} ({comp.integrator.mode})")
    return lines


def model_line(name: str, t1: float, n_out: int, repeat: int) -> str:
    """One line: a shipped model file run from its own initial values to ``t1``."""
    model = solver.load(str(ROOT / "configs" / "mechanisms" / f"{name}.yaml"))
    params, comp, z0, u0 = bp.shipped_model_state(model, model.order or bp.order_for_tol(model.tol))
    t_eval = np.linspace(0.0, t1, n_out)

    def fn():
        return bp.block(comp.integrator.run(params, z0, u0, 0.0, t1, t_eval, model.tol))
    r = fn()
    head = " ".join(f"{v:.10f}" for v in np.asarray(r["z_final"])[:3])
    return (f"{name}: {best_of(fn, repeat) * 1e3:.2f} ms, {int(r['steps'])} steps, final state [{head} ...] "
            f"({comp.integrator.mode})")


def main(argv=None) -> None:
    """Print one line per run.

    Args:
        argv: command-line arguments (``--repeat N``: timed calls per run, default 25).
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=25)
    args = ap.parse_args(argv)
    for line in andrews_lines(args.repeat):
        print(line, flush=True)
    for name, t1, n_out in MODELS:
        print(model_line(name, t1, n_out, args.repeat), flush=True)


if __name__ == "__main__":
    main()
