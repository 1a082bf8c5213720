"""A first ``mechsweep simulate`` with its run's program built ahead (the default) against built at its call.

Each model is simulated from a new empty cache and then again warm, each
time in a fresh process, as ``bench_warm_start.py`` runs it (its
:func:`~bench_warm_start.run_once`), with ``MECHSWEEP_COMPILE_AHEAD`` unset
(``on``: the run's program traced first and compiled on a background
thread while the consistent point is found, ``solver.ahead``) and ``off``
(each program compiled by its first call).  The two alternate, in the
other order each round, so that a drift of the machine's speed falls on
both.  Printed per model and setting, one figure per round: the cold
run's compiling (the command's ``C s compiling``) and its whole process,
and the warm run's time from the process's start to its integration.

Usage::

    .venv/bin/python workflows/benchmarks/bench_compile_ahead.py [--models rscr,fourbar] [--rounds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

from bench_warm_start import run_once
from report import Report

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "mechanisms"
MODELS = ["pendulum", "fourbar", "fourbar_spring", "free_body", "rscr", "rscr_driven", "slider_crank_stop"]
AHEAD_ENV = "MECHSWEEP_COMPILE_AHEAD"  # solver.ahead.AHEAD_ENV, without importing JAX here


def measure(model: str, setting: str) -> tuple[float, float, float]:
    """(cold compiling, cold process, warm to integration) of one model from a new empty cache."""
    os.environ[AHEAD_ENV] = setting
    with tempfile.TemporaryDirectory(prefix="mechsweep-ahead-") as cache:
        cold = run_once(CONFIGS / f"{model}.yaml", cache, True)
        warm = run_once(CONFIGS / f"{model}.yaml", cache, True)
    return cold["compiling"], cold["process"], warm["to_integration"] or float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", help="also append the report to this file")
    args = p.parse_args(argv)
    models = args.models.split(",")
    seen: dict = {}
    for r in range(args.rounds):
        for model in models:
            for setting in (("on", "off") if r % 2 == 0 else ("off", "on")):
                seen.setdefault((model, setting), []).append(measure(model, setting))
                print(".", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    report = Report()
    report.say(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} "
               f"at the end; each: mechsweep simulate MODEL from a new empty cache (cold) then warm, fresh "
               f"processes; {AHEAD_ENV} on (built ahead) and off, alternating")
    report.say(f"{'model':<18} {'ahead':<5} {'cold compiling s':<22} {'cold process s':<22} warm to integration s")
    for model in models:
        for setting in ("on", "off"):
            runs = seen[(model, setting)]
            cell = lambda i: " ".join(f"{x[i]:.2f}" for x in runs)
            report.say(f"{model:<18} {setting:<5} {cell(0):<22} {cell(1):<22} {cell(2)}")
    report.save(args.out, append=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
