"""Fuzz model and sweep files through the command line and print a table of counts.

    .venv/bin/python workflows/fuzz_inputs.py [--cases N] [--seed S] [--show K]

Runs ``N`` cases of the generator in ``tests/input_fuzz.py`` (mutated copies
of ``configs/mechanisms/pendulum.yaml`` and of a small sweep of it) through
``mechsweep check`` and ``mechsweep sweep --dry-run`` in this process, each in
a fresh temporary folder, and prints: cases tried, exit codes, tracebacks
(an uncaught exception or "Traceback" printed), hangs (over
``CASE_SECONDS``), cases that wrote a file outside their folder, and the
slowest case.  Exit status 1 when any traceback, hang or stray file was seen.
The cases are reproducible: the same ``--seed`` gives the same cases.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import input_fuzz  # noqa: E402


def main(argv=None) -> int:
    """Run the fuzz cases; print the counts table.

    Returns:
        0 when every case ended in exit 0, 1 or 2 with no traceback, hang or
        stray file; 1 otherwise.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--show", type=int, default=5, help="findings to print in full")
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    codes: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    findings, slowest = [], (0.0, None)
    base = Path(tempfile.mkdtemp(prefix="mechsweep-fuzz-"))
    t0 = time.perf_counter()
    counter = [0]

    @seed(args.seed)
    @settings(max_examples=args.cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(input_fuzz.cases())
    def one(case):
        nonlocal slowest
        counter[0] += 1
        out = input_fuzz.run_case(case, base / f"case{counter[0]:05d}")
        kinds[case.kind] += 1
        codes["hang" if out.hang else out.code] += 1
        if out.seconds > slowest[0]:
            slowest = (out.seconds, case.ops)
        if out.traceback or out.hang or out.stray or out.code not in (0, 1, 2):
            findings.append((case, out))

    one()
    n = counter[0]
    tb = sum(o.traceback for _, o in findings)
    hangs = sum(o.hang for _, o in findings)
    stray = sum(bool(o.stray) for _, o in findings)
    print(f"fuzz of model and sweep files (seed {args.seed}), {time.perf_counter() - t0:.0f} s")
    print(f"| cases tried | {n} ({kinds['model']} check, {kinds['sweep']} sweep --dry-run) |")
    for code in (0, 1, 2):
        print(f"| exit {code} | {codes.get(code, 0)} |")
    other = {k: v for k, v in codes.items() if k not in (0, 1, 2, 'hang')}
    print(f"| other exit codes | {sum(other.values())} {other if other else ''}|")
    print(f"| tracebacks | {tb} |")
    print(f"| hangs (> {input_fuzz.CASE_SECONDS} s) | {hangs} |")
    print(f"| cases that wrote outside their folder | {stray} |")
    print(f"| slowest case | {slowest[0]:.1f} s ({'; '.join(slowest[1] or [])}) |")
    for case, out in findings[:args.show]:
        print("----", case.kind, case.ops, "stray:", out.stray)
        print(out.output[-3000:])
    if findings:
        print(f"the cases' files are kept in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
