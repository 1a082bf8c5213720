"""The first result of ``mechsweep design`` and ``mechsweep sweep`` from an empty cache, tiered and untiered.

Each file is run in a fresh process with a new empty compilation cache
(``MECHSWEEP_JAX_CACHE``), alternately with tiered compiles (the commands'
default) and with ``MECHSWEEP_TIERED_COMPILE=off``: a design file by
``mechsweep design FILE --out ... --no-plot``, a sweep file (one with a
``Sweep:`` section) by ``mechsweep sweep FILE --out ...`` on a LocalCluster of
one worker per core.  For each run:

- **result**: seconds from the process's start to the design's answer (the
  line ``best: ...``, printed when the optimisation ends) or to the sweep's
  last batch written (its progress line ``N/N batches written``);
- **process**: seconds to the process's exit (with tiering, after the
  optimised builds it waits for);
- the command's own line: a design's ``finished in W s (C s compiling,
  R s solving)``, a sweep's workers' ``C s compiling, R s solving``.

Usage::

    .venv/bin/python workflows/benchmarks/bench_design_first.py [FILE.yaml ...] [--rounds N] [--out FILE]

(default files: configs/design/fourbar_motion.yaml and rscr_curve.yaml;
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
SPLIT = re.compile(r"finished in (\S+) s \((\S+) s compiling, (\S+) s solving\)"
                   r"|(\S+) s compiling, (\S+) s solving \(summed over \d+ batch(?:es)?\)")
SWEEP_DONE = re.compile(r"(\d+)/\1 batches written")


def is_sweep(path: str) -> bool:
    """Whether the file is a sweep file (a ``Sweep:`` section at the top level) rather than a design file."""
    return re.search(r"^Sweep:", Path(path).read_text(), re.M) is not None


def run_once(path: str, tiered: bool) -> dict:
    """One cold ``mechsweep design`` or ``sweep`` run: seconds to its result and to its exit, and its own split."""
    cache = tempfile.mkdtemp(prefix="mechsweep-first-cache-")
    out = tempfile.mkdtemp(prefix="mechsweep-first-out-")
    env = dict(os.environ, MECHSWEEP_JAX_CACHE=cache, MECHSWEEP_TIERED_COMPILE="on" if tiered else "off")
    mechsweep = str(ROOT / ".venv" / "bin" / "mechsweep")
    sweep = is_sweep(path)
    command = ([mechsweep, "sweep", path, "--out", out + "/s.zarr"] if sweep
               else [mechsweep, "design", path, "--out", out + "/d.zarr", "--no-plot"])
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        result, lines = None, []
        for line in proc.stdout:
            lines.append(line)
            done = SWEEP_DONE.search(line) if sweep else line.startswith("best:")
            if result is None and done:
                result = time.perf_counter() - start
        proc.wait()
        end = time.perf_counter() - start
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0 or result is None:
        raise SystemExit(f"{path}: {command[1]} failed (exit {proc.returncode}):\n" + "".join(lines[-20:]))
    split = SPLIT.search("".join(lines))
    return {"result": result, "process": end, "split": split.group(0) if split else "?"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    lines = [f"$ .venv/bin/python workflows/benchmarks/bench_design_first.py {' '.join(args.files)} "
             f"--rounds {args.rounds}",
             f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.machine()} {platform.system()}, "
             f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.2f}; each run a fresh process "
             f"with a new empty MECHSWEEP_JAX_CACHE; tiered and untiered alternating",
             f"{'file':28s} {'compiles':9s} {'result':>8s} {'process':>8s}  the command's line"]
    print("\n".join(lines), flush=True)
    for _ in range(args.rounds):
        for path in args.files:
            for tiered in (True, False):
                r = run_once(path, tiered)
                line = (f"{Path(path).name:28s} {'tiered' if tiered else 'optimised':9s} {r['result']:7.1f}s "
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
