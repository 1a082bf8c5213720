"""Fuzz model and sweep files through the command line and print a table of counts.

    .venv/bin/python workflows/fuzz_inputs.py [--cases N] [--seconds S] [--seed S]
        [--simulate-percent P] [--recycle R] [--show K] [--out results.txt]

Runs up to ``N`` cases of the generator in ``tests/input_fuzz.py`` (mutated
copies of three shipped models, one per YAML kind: the ``DAE`` pendulum, the
``Mechanism`` Mechanism0 and the ``Lagrangian`` double pendulum, and of small
sweeps of them) through ``mechsweep check``, ``mechsweep sweep --dry-run``
and, for ``P`` percent of the cases, ``mechsweep simulate`` of a short run,
each in a fresh temporary folder.  The cases run one at a time in a child
process (``input_fuzz.CaseRunner``), started afresh every ``--recycle``
cases, so that compiled models kept by the solver do not pile up in one
process and a case that kills its process is a *crash* of that case.  First
the unmutated inputs (every base with every command), which must exit 0.
``--seconds`` stops starting new cases after that much wall time (the cases
run are then the first ones of the seed's sequence).  Hypothesis generates
some cases more than once; a repeated case is not run again (it is counted
as a duplicate).

Prints: cases tried per base model and per command, exit codes per command,
tracebacks (an uncaught exception or "Traceback" printed), hangs (over
``CASE_SECONDS``), crashes, cases that wrote a file outside their folder,
and the slowest case; with ``--out``, writes the same under the command line
(``workflows/benchmarks/results/fuzz.txt``).  The folders of findings are
kept, the others removed as soon as they have run.  Exit status 1 when any
traceback, hang, crash or stray file was seen, or an unmutated input did not
exit 0.  The cases are reproducible: the same ``--seed`` (and
``--simulate-percent``) gives the same cases.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
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
        stray file (and every unmutated input in exit 0); 1 otherwise.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300, help="mutated cases (the unmutated ones come on top)")
    ap.add_argument("--seconds", type=float, default=None, help="start no case after this wall time")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--simulate-percent", type=int, default=input_fuzz.SIMULATE_PERCENT,
                    help="share of cases that run simulate (default %(default)s)")
    ap.add_argument("--recycle", type=int, default=200, help="cases per child process")
    ap.add_argument("--show", type=int, default=5, help="findings to print in full")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)

    codes: collections.Counter = collections.Counter()        # (command, code)
    per_base: collections.Counter = collections.Counter()     # (base, command)
    findings, slowest = [], (0.0, None)
    seconds = collections.defaultdict(float)                  # command -> total seconds
    base = Path(tempfile.mkdtemp(prefix="mechsweep-fuzz-"))
    t0 = time.perf_counter()
    counter = [0]
    skipped = [0]
    seen: set = set()
    duplicates = [0]

    def record(case, out):
        nonlocal slowest
        per_base[case.base, case.command] += 1
        codes[case.command, "hang" if out.hang else "crash" if out.crash else out.code] += 1
        seconds[case.command] += out.seconds
        if out.seconds > slowest[0]:
            slowest = (out.seconds, case)
        bad_base = not case.ops and out.code != 0
        if out.traceback or out.hang or out.crash or out.stray or out.code not in (0, 1, 2) \
                or bad_base:
            findings.append((case, out))
            return True
        return False

    def run(case):
        counter[0] += 1
        folder = base / f"case{counter[0]:05d}"
        out = runner.run(case, folder)
        if not record(case, out):
            # Keep the parent small: run_case lists it before and after each case.
            shutil.rmtree(folder, ignore_errors=True)

    runner = input_fuzz.CaseRunner(recycle=args.recycle)
    for case in input_fuzz.base_cases():
        run(case)

    @seed(args.seed)
    @settings(max_examples=args.cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(input_fuzz.cases(simulate_percent=args.simulate_percent))
    def one(case):
        if args.seconds is not None and time.perf_counter() - t0 > args.seconds:
            skipped[0] += 1
            return
        if case.key() in seen:
            duplicates[0] += 1
            return
        seen.add(case.key())
        run(case)

    try:
        one()
    finally:
        runner.close()
    wall = time.perf_counter() - t0
    n = counter[0]
    commands = input_fuzz.COMMANDS
    names = {"check": "check", "simulate": "simulate", "sweep": "sweep --dry-run"}
    lines = []
    say = lines.append
    say(f"# fuzz of model and sweep files: seed {args.seed}, simulate {args.simulate_percent} %, "
        f"{wall:.0f} s wall, {platform.machine()} with {os.cpu_count()} cores, "
        f"{len(input_fuzz.BASES)} base models")
    say(f"# {n} distinct cases run ({len(input_fuzz.base_cases())} unmutated first); of the "
        f"{args.cases} generated, {duplicates[0]} repeated an earlier case"
        + (f" and {skipped[0]} came after --seconds {args.seconds:g}" if skipped[0] else ""))
    say("")
    say("| base model (kind) | " + " | ".join(names[c] for c in commands) + " | all |")
    say("|---|" + "---|" * (len(commands) + 1))
    for b in input_fuzz.BASES.values():
        row = [per_base[b.name, c] for c in commands]
        say(f"| {b.name} ({b.kind}) | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    row = [sum(per_base[b, c] for b in input_fuzz.BASES) for c in commands]
    say("| all | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    say("")
    say("| exit code | " + " | ".join(names[c] for c in commands) + " | all |")
    say("|---|" + "---|" * (len(commands) + 1))
    keys = sorted({k for _, k in codes}, key=lambda k: (isinstance(k, str), k if k is not None else -9))
    for k in keys:
        row = [codes[c, k] for c in commands]
        label = {None: "none (escaped)"}.get(k, k)
        say(f"| {label} | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
    say("| seconds per case | " + " | ".join(
        f"{seconds[c] / max(sum(per_base[b, c] for b in input_fuzz.BASES), 1):.2f}" for c in commands)
        + f" | {sum(seconds.values()) / max(n, 1):.2f} |")
    say("")
    tb = sum(o.traceback for _, o in findings)
    hangs = sum(o.hang for _, o in findings)
    stray = sum(bool(o.stray) for _, o in findings)
    other = sum(o.code not in (0, 1, 2) and not o.hang and not o.crash for _, o in findings)
    crashes = sum(o.crash for _, o in findings)
    bad_base = sum(not c.ops and o.code != 0 for c, o in findings)
    say(f"| tracebacks | {tb} |")
    say(f"| hangs (> {input_fuzz.CASE_SECONDS} s) | {hangs} |")
    say(f"| crashes (the process running the case died) | {crashes} |")
    say(f"| exit codes other than 0, 1, 2 | {other} |")
    say(f"| cases that wrote outside their folder | {stray} |")
    say(f"| unmutated inputs not exiting 0 | {bad_base} |")
    if slowest[1] is not None:
        say(f"| slowest case | {slowest[0]:.1f} s ({slowest[1].describe()}) |")
    if findings:
        # One line per distinct finding: its last line of output, how often, a case.
        kinds = collections.OrderedDict()
        for case, out in findings:
            last = (out.output.strip().splitlines() or ["(no output)"])[-1][:160]
            kinds.setdefault(last, []).append(case)
        say("")
        say("findings (last line of output: cases, the first of them):")
        for last, cs in kinds.items():
            say(f"- {last}: {len(cs)} ({cs[0].describe()})")
    print("\n".join(lines))
    if args.out:
        arguments = sys.argv[1:] if argv is None else argv
        command = "$ .venv/bin/python workflows/fuzz_inputs.py " + " ".join(arguments)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(command + "\n\n" + "\n".join(lines) + "\n")
    for case, out in findings[:args.show]:
        print("----", case.describe(), "stray:", out.stray)
        print(out.output[-3000:])
    if findings:
        print(f"the cases' files are kept in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
