"""The first result of ``mechsweep design`` from an empty cache, with tiered compiles and without.

Each design file is run by ``mechsweep design FILE --out ... --no-plot`` in a
fresh process with a new empty compilation cache (``MECHSWEEP_JAX_CACHE``),
alternately with tiered compiles (the command's default) and with
``MECHSWEEP_TIERED_COMPILE=off``.  For each run:

- **result**: seconds from the process's start to the line ``best: ...``
  (the design's answer, printed when the optimisation ends);
- **process**: seconds to the process's exit (with tiering, after the
  optimised builds it waits for);
- the command's own line, ``finished in W s (C s compiling, R s solving)``.

Usage::

    .venv/bin/python workflows/benchmarks/bench_design_first.py [DESIGN.yaml ...] [--rounds N] [--out FILE]

(default designs: configs/design/fourbar_motion.yaml and rscr_curve.yaml;
``--out`` appends the report to FILE.)  Run it on a quiet machine: it is
all compiling.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ["configs/design/fourbar_motion.yaml", "configs/design/rscr_curve.yaml"]
SPLIT = re.compile(r"finished in (\S+) s \((\S+) s compiling, (\S+) s solving\)")


def run_once(design: str, tiered: bool) -> dict:
    """One cold ``mechsweep design`` run: seconds to its result and to its exit, and its own split."""
    cache = tempfile.mkdtemp(prefix="mechsweep-design-cache-")
    out = tempfile.mkdtemp(prefix="mechsweep-design-out-")
    env = dict(os.environ, MECHSWEEP_JAX_CACHE=cache, MECHSWEEP_TIERED_COMPILE="on" if tiered else "off")
    command = [str(ROOT / ".venv" / "bin" / "mechsweep"), "design", design, "--out", out + "/d.zarr", "--no-plot"]
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        result, lines = None, []
        for line in proc.stdout:
            lines.append(line)
            if result is None and line.startswith("best:"):
                result = time.perf_counter() - start
        proc.wait()
        end = time.perf_counter() - start
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0 or result is None:
        raise SystemExit(f"{design}: mechsweep design failed (exit {proc.returncode}):\n" + "".join(lines[-20:]))
    split = SPLIT.search("".join(lines))
    return {"result": result, "process": end, "split": split.group(0) if split else "?"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("designs", nargs="*", default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    lines = [f"$ .venv/bin/python workflows/benchmarks/bench_design_first.py {' '.join(args.designs)} "
             f"--rounds {args.rounds}",
             f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.machine()} {platform.system()}, "
             f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.2f}; each run a fresh process "
             f"with a new empty MECHSWEEP_JAX_CACHE; tiered and untiered alternating",
             f"{'design':28s} {'compiles':9s} {'result':>8s} {'process':>8s}  the command's line"]
    print("\n".join(lines), flush=True)
    for _ in range(args.rounds):
        for design in args.designs:
            for tiered in (True, False):
                r = run_once(design, tiered)
                line = (f"{Path(design).name:28s} {'tiered' if tiered else 'optimised':9s} {r['result']:7.1f}s "
                        f"{r['process']:7.1f}s  {r['split']}")
                print(line, flush=True)
                lines.append(line)
    lines.append(f"# load average at the end {os.getloadavg()[0]:.2f}")
    print(lines[-1])
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
