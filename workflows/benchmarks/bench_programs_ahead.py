"""A warm ``mechsweep simulate`` with its executables loaded ahead (``solver.program_prefetch``) and without.

For each model, one new empty cache: a first ``simulate`` compiles and fills
it (and writes the record of the executables it used), a second one runs
warm.  Then ``--rounds`` rounds of two warm processes on that cache,
alternating which goes first: one with ``MECHSWEEP_PROGRAMS_AHEAD=off``
(every executable read when JAX asks for it, as before the module existed)
and one with loading ahead on (the default).  Each process is
``bench_warm_start.run_once``'s ``mechsweep simulate MODEL``; the figures are
its "to integration" (from the process's start to the integration's own
work: the warm target of the issue "the engine on mid-size models" is 1 s)
and the whole process's wall time.

Usage::

    .venv/bin/python workflows/benchmarks/bench_programs_ahead.py [--models rscr,car] [--rounds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from bench_warm_start import run_once

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "mechanisms"
AHEAD_ENV = "MECHSWEEP_PROGRAMS_AHEAD"  # solver.program_prefetch.AHEAD_ENV, without importing JAX here
MODELS = ["pendulum", "fourbar", "mechanism0", "free_body", "rscr", "rscr_driven", "slider_crank_stop", "car"]
WARM_TARGET = 1.0  # s from the process's start to the integration


def compare(model: str, rounds: int) -> dict:
    """Warm runs of one model with loading ahead off and on, alternating.

    Returns:
        ``{"off": [(to integration, process), ...], "on": [...]}``.
    """
    path = CONFIGS / f"{model}.yaml"
    runs: dict = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="mechsweep-ahead-") as cache:
        run_once(path, cache, True)   # cold: compiles, stores, records
        run_once(path, cache, True)   # warm: the bytecode of every module written, the record rewritten
        for i in range(rounds):
            for label in (("off", "on") if i % 2 == 0 else ("on", "off")):
                r = run_once(path, cache, True, env_extra={AHEAD_ENV: label})
                runs[label].append((r["to_integration"], r["process"]))
    return runs


def main(argv=None) -> int:
    """Run the comparison; print (and optionally write) its table.

    Returns:
        0.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated configs/mechanisms names")
    ap.add_argument("--rounds", type=int, default=5, help="warm processes per setting (default 5)")
    ap.add_argument("--out", default=None, help="also write the report to this file")
    args = ap.parse_args(argv)
    lines = [f"$ .venv/bin/python workflows/benchmarks/bench_programs_ahead.py --models {args.models} "
             f"--rounds {args.rounds}",
             f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}; "
             f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, python {platform.python_version()}; "
             f"load average at start {os.getloadavg()[0]:.2f}",
             f"each cell: median over {args.rounds} warm processes (min-max); off = {AHEAD_ENV}=off, on = the "
             f"default; to integration = process start to the integration's own work (target "
             f"{WARM_TARGET:g} s)",
             "",
             f"{'model':<20}{'to integration off':>24}{'on':>22}{'gain':>8}{'process off':>20}{'on':>20}"]
    print("\n".join(lines), flush=True)

    def cell(values):
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) s"

    for model in args.models.split(","):
        runs = compare(model.strip(), args.rounds)
        off_ti, off_p = zip(*runs["off"])
        on_ti, on_p = zip(*runs["on"])
        line = (f"{model:<20}{cell(off_ti):>24}{cell(on_ti):>22}"
                f"{statistics.median(off_ti) - statistics.median(on_ti):>6.2f} s"
                f"{cell(off_p):>20}{cell(on_p):>20}")
        print(line, flush=True)
        lines.append(line)
    lines.append(f"load average at the end {os.getloadavg()[0]:.2f}")
    print(lines[-1])
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
