"""Unrolled against looped Taylor engine on the shipped models (issue 11).

One model and one mode per process (so neither engine profits from the
other's compiled functions): the first ``model.solve()`` (tracing, compiling
and running) and a second one (running only), the step count, the constraint
residual and the energy range, and the tape size that ``mode="auto"`` looks
at (:func:`solver.integrate.integrator.tape_ops`).

Usage::

    .venv/bin/python workflows/benchmarks/bench_modes.py MODEL MODE     # one row
    for m in pendulum cloth chain5 mechanism0 rscr; do for mode in unrolled looped; do
        .venv/bin/python workflows/benchmarks/bench_modes.py $m $mode; done; done
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import solver  # noqa: E402
from solver.integrate.integrator import tape_ops  # noqa: E402


def main(name: str, mode: str) -> None:
    model = solver.load(ROOT / "configs" / "mechanisms" / f"{name}.yaml")
    t = time.perf_counter()
    ds = model.solve(mode=mode)
    first = time.perf_counter() - t
    t = time.perf_counter()
    model.solve(mode=mode)
    second = time.perf_counter() - t
    comp = solver.compiled_model(model.dae, ds.attrs["solver_order"], "auto", mode)
    energy = float(ds.energy.max() - ds.energy.min()) if "energy" in ds else float("nan")
    ran = mode if mode != "auto" else f"auto:{ds.attrs['solver_mode']}"
    print(f"{name:<12} {ran:<13} tape_ops {tape_ops(comp.integrator.prog):>7}  first {first:7.1f} s  "
          f"second {second:7.3f} s  steps {int(ds.steps):>5}  status {int(ds.status)}  "
          f"max|C| {float(ds.constraint_residual.max()):.1e}  energy range {energy:.1e}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
