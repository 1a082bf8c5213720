"""Are a piecewise model's switches found whatever the rounding?  The undamped car, its stiffness nudged.

The car (configs/mechanisms/car.yaml) without dampers and tyre forces (cf = cr = CN = Cx = 0)
hops on its springs: about 70 tyre lift-offs and landings in 1 s, each a switch of
``max(0, r0 - W_i,z)`` at which the integrator must cut its step and restart the
series on the other branch.  Its energy is then conserved (tests/test_car.py); a
switch the integrator steps over shows as a jump of the energy (a tyre found inside
the ground by a centimetre at the next step).

This runs that case with the tyre stiffness kt multiplied by 1 + eps for a row of
tiny eps (changes far below the tolerance, so every run should conserve the energy
to the same 1e-8), in the XLA build this process has: the users' (default) or the
test suite's (``--suite-flags``: LLVM at -O0 and XLA's older emitters, as
tests/conftest.py sets them), which round differently.

Usage::

    .venv/bin/python workflows/benchmarks/bench_switch_robustness.py [--suite-flags] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUITE_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
EPS = (0.0, 1e-13, 3e-13, 1e-12, 3e-12, 1e-11, 1e-10, 1e-9, 1e-8, 1e-7)
JUMP = 1e-6  # J: the runs that find every switch stay within 1e-8 of E(0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite-flags", action="store_true", help="compile as the test suite does (XLA_FLAGS)")
    ap.add_argument("--out", default=None, help="also append the output to this file")
    args = ap.parse_args()
    if args.suite_flags:
        # Before solver starts JAX's backend: XLA reads XLA_FLAGS once.
        os.environ["XLA_FLAGS"] = (SUITE_FLAGS + " " + os.environ.get("XLA_FLAGS", "")).strip()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "workflows" / "benchmarks"))
    import numpy as np

    import solver

    from report import Report

    report = Report()
    report.say(f"date: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}; XLA_FLAGS: {os.environ.get('XLA_FLAGS', '(unset)')}")
    report.say("undamped car (cf = cr = CN = Cx = 0), tol 1e-12, order 13, t in [0, 1], 101 outputs; kt x (1 + eps)")
    report.say(f"{'eps':>8}  status  max |E - E(0)| (J)  first output past {JUMP:g} J")
    model = solver.load(ROOT / "configs" / "mechanisms" / "car.yaml")
    times = np.linspace(0.0, 1.0, 101)
    jumps = 0
    for eps in EPS:
        off = {"cf": 0.0, "cr": 0.0, "CN": 0.0, "Cx": 0.0, "kt": float(model.params["kt"]) * (1.0 + eps)}
        ds = model.solve(off, t_span=(0.0, 1.0), t_eval=times, tol=1e-12, order=13)
        dev = np.abs(ds.energy.values - ds.energy.values[0])
        bad = np.nonzero(dev > JUMP)[0]
        jumps += bool(bad.size)
        where = f"t = {times[bad[0]]:.2f}" if bad.size else "none"
        report.say(f"{eps:8.1e}  {int(ds.status):6d}  {dev.max():18.3e}  {where}")
    report.say(f"runs with an energy jump (a switch stepped over): {jumps} of {len(EPS)}")
    report.save(args.out, append=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
