"""Slot counts of the batch pool: solve_batch's wall time per model and slot count.

``Integrator.default_slots`` picks 32 slots for a round that XLA:CPU
compiles as one function and 256 otherwise; this script measures the
choice on the mechanism files (N designs varying one parameter by +-10 %),
best of 3 ``wall_seconds`` after a first (compiling) call, and prints
which slot count the rule takes.

Run: ``.venv/bin/python workflows/benchmarks/bench_slots.py [--points N] [--out FILE]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import solver  # noqa: E402

# (model file, parameter varied)
CASES = [("pendulum.yaml", "L"), ("double_pendulum.yaml", "l2"), ("slider_crank.yaml", "m2"),
         ("fourbar.yaml", "m2"), ("mechanism0_lagrangian.yaml", "k")]
SLOTS = (16, 32, 64, 128, 256)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    lines = [f"$ .venv/bin/python workflows/benchmarks/bench_slots.py --points {args.points}",
             f"# {time.strftime('%Y-%m-%d %H:%M')}; solve_batch wall_seconds (ms), best of 3 after a compiling call"]
    print(lines[-1], flush=True)
    for name, var in CASES:
        model = solver.load(os.path.join(ROOT, "configs", "mechanisms", name))
        base = float(model.dae.params[var])
        table = {var: np.linspace(0.9, 1.1, args.points) * base}
        cells = []
        for slots in SLOTS:
            ds = solver.solve_batch(model, table, slots=slots)
            best = min(float(solver.solve_batch(model, table, slots=slots).attrs["wall_seconds"]) for _ in range(3))
            cells.append(f"{slots}: {best * 1e3:7.1f}")
        chosen = int(solver.solve_batch(model, table).attrs["solver_slots"])
        line = (f"{name:<28} {var:<3} steps {int(ds.steps.sum()):>7}  " + "  ".join(cells)
                + f"  | default {chosen}")
        print(line, flush=True)
        lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
