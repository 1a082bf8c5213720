"""A single run's time against its size, with its step loop compiled whole or run kernel by kernel.

Each row is a 3-D chain of N pendula (``configs/mechanisms/pendulum_chain3d.yaml``,
4 N unknowns) solved in a child process with ``SingleRun.WHOLE_LOOP_MAX_UNKNOWNS``
set to each ``--limit``: a limit at or above the model's unknowns compiles the
loop whole, one below runs it kernel by kernel.  The figure is the best
``integration_seconds`` of 7 solves after a first one (which compiles).

Run it at two commits to compare their engines::

    .venv/bin/python workflows/benchmarks/bench_whole_loop_size.py --sizes 4,5,6,7,10 --linear dense,kkt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r"""
import json, sys
import solver
from solver.integrate import single_run
n, linear, limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
single_run.WHOLE_LOOP_MAX_UNKNOWNS = limit
model = solver.load("configs/mechanisms/pendulum_chain3d.yaml", overrides={"PhysicalParams": {"N": n}})
ds = model.solve(linear=linear)
best = min(float(model.solve(linear=linear).attrs["integration_seconds"]) for _ in range(7))
print(json.dumps({"unknowns": int(model.dae.n), "steps": int(ds["steps"].values), "ms": 1e3 * best,
                  "status": int(ds["status"].values)}))
"""


def main(argv=None) -> int:
    """Print one row per chain size and linear solver: ms a run at each limit.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4,5,6,7,10", help="pendula in the chain (default 4,5,6,7,10)")
    ap.add_argument("--linear", default="dense,kkt", help="stage solvers (default dense,kkt)")
    ap.add_argument("--limits", default="20,48", help="WHOLE_LOOP_MAX_UNKNOWNS values (default 20,48)")
    args = ap.parse_args(argv)
    limits = [int(x) for x in args.limits.split(",")]
    print(f"$ .venv/bin/python workflows/benchmarks/bench_whole_loop_size.py {' '.join(argv or sys.argv[1:])}".rstrip())
    print(f"{'N':>3} {'unknowns':>9} {'linear':>7} {'steps':>6} "
          + " ".join(f"{'limit ' + str(lim) + ' (ms)':>16}" for lim in limits))
    for n in (int(x) for x in args.sizes.split(",")):
        for linear in args.linear.split(","):
            row = []
            for limit in limits:
                proc = subprocess.run([sys.executable, "-c", _CHILD, str(n), linear, str(limit)], cwd=ROOT,
                                      capture_output=True, text=True, timeout=1200)
                if proc.returncode != 0:
                    raise RuntimeError(f"N={n} {linear} limit {limit}:\n{proc.stderr[-2000:]}")
                row.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            whole = ["whole" if r["unknowns"] <= lim else "kernels" for r, lim in zip(row, limits)]
            print(f"{n:>3} {row[0]['unknowns']:>9} {linear:>7} {row[0]['steps']:>6} "
                  + " ".join(f"{r['ms']:>8.2f} {w:>7}" for r, w in zip(row, whole)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
