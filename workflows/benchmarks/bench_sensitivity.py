"""The cost of design sensitivities relative to a plain run (issue 15: "goal:
≤ (1 + number of parameters) × the plain run's time").

For each case, in one process: a plain ``solve`` and a ``solve`` with k
sensitivities, each run twice (the first compiles; the second is the run
time reported), and the ratio of the two run times against the goal 1 + k.
The batch rows do the same through ``solve_batch`` over 200 designs.
Compile times (the first call's ``compile_seconds``) are printed too:
forward mode compiles a second program, the jvp of the whole integration.

Usage::

    .venv/bin/python workflows/benchmarks/bench_sensitivity.py [--out results/sensitivity.txt]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

import solver  # first: its XLA settings precede JAX's start

import jax  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "mechanisms"

# (label, config, sensitivity parameters, t_span, batch parameter or None)
CASES = [
    ("pendulum, k=1", "pendulum", ["L"], (0, 10), None),
    ("pendulum, k=2", "pendulum", ["L", "g"], (0, 10), None),
    ("four-bar, k=2", "fourbar", ["b", "th"], (0, 5), None),
    ("RSCR, k=1", "rscr", ["L2"], (0, 10), None),
    ("RSCR, k=4", "rscr", ["L1", "L2", "L3", "gamma"], (0, 10), None),
    ("pendulum x200, k=1", "pendulum", ["L"], (0, 10), ("L", np.linspace(0.8, 1.2, 200))),
    ("RSCR x200, k=2", "rscr", ["L2", "gamma"], (0, 2), ("L2", np.linspace(1.0, 1.16, 200))),
]


def _timed(call):
    t = time.perf_counter()
    ds = call()
    first = time.perf_counter() - t
    t = time.perf_counter()
    ds = call()
    return ds, first, time.perf_counter() - t


def measure(config, names, t_span, batch):
    """(plain first, plain run, sens first, sens run, compile plain, compile sens, steps, status ok)."""
    model = solver.load(CONFIGS / f"{config}.yaml")
    kw = dict(t_span=t_span, t_eval=np.linspace(*t_span, 101))
    if batch is None:
        run = lambda sens: model.solve(sensitivities=sens, **kw)
    else:
        name, values = batch
        run = lambda sens: solver.solve_batch(model, {name: values}, sensitivities=sens, **kw)
    plain, p_first, p_run = _timed(lambda: run(None))
    sens, s_first, s_run = _timed(lambda: run(names))
    ok = bool(np.all(np.asarray(sens["status"]) == 0)) and bool(np.all(np.asarray(plain["status"]) == 0))
    steps = int(np.sum(np.asarray(plain["steps"])))
    return p_first, p_run, s_first, s_run, steps, ok


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    lines = ["$ .venv/bin/python workflows/benchmarks/bench_sensitivity.py"
             + (f" --out {args.out}" if args.out else ""),
             f"# {platform.node()}, {platform.processor() or platform.machine()}, jax {jax.__version__}",
             "# run = the second call (compiled); first = trace + compile + run",
             "",
             f"{'case':<22}{'steps':>7}{'plain s':>9}{'sens s':>9}{'ratio':>7}{'goal':>6}{'met':>5}"
             f"{'plain first':>13}{'sens first':>12}"]
    print("\n".join(lines), flush=True)
    for label, config, names, t_span, batch in CASES:
        p_first, p_run, s_first, s_run, steps, ok = measure(config, names, t_span, batch)
        ratio = s_run / p_run
        goal = 1 + len(names)
        line = (f"{label:<22}{steps:>7}{p_run:>9.4f}{s_run:>9.4f}{ratio:>7.2f}{goal:>6}"
                f"{'yes' if ratio <= goal else 'NO':>5}{p_first:>13.1f}{s_first:>12.1f}"
                + ("" if ok else "  (a run failed)"))
        print(line, flush=True)
        lines.append(line)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
