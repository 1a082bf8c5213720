"""Fuzzed model and sweep files always get an answer: exit 0, 1 or 2, never a traceback.

Mutated copies of three shipped models, one per YAML kind (the ``DAE``
pendulum, the ``Mechanism`` Mechanism0, the ``Lagrangian`` double pendulum)
and of small sweeps of them (:mod:`input_fuzz`: keys, types, numbers,
expressions and the YAML text) run through ``mechsweep check``, ``mechsweep
sweep --dry-run`` and, for a small share, ``mechsweep simulate`` of a short
run (:func:`sweep.cli.app.main`), in a child process
(:class:`input_fuzz.CaseRunner`: what the cases compile stays out of this
process, and a case that kills its process is a crash, not the end of the
test run).  Every case must end in exit 0, 1 or 2 with no traceback printed
and no exception escaping, within :data:`input_fuzz.CASE_SECONDS`, writing
nothing outside its folder (a dry run not even ``--out``).  The unmutated
inputs, every base with every command, run first and must exit 0; then the
inputs the fuzz once found mishandled (:func:`input_fuzz.regression_cases`).
The cases are fixed (hypothesis with a fixed seed, no database; a repeated
case runs once) and the mutated cases are bounded to about a minute: :data:`MAX_CASES`
cases, fewer if :data:`BUDGET_SECONDS` runs out, so a slower machine runs
fewer of them.  ``workflows/fuzz_inputs.py`` runs the same generator for
more cases (``workflows/benchmarks/results/fuzz.txt``).
"""

import collections
import time

import pytest
from hypothesis import HealthCheck, Phase, example, given, seed, settings

import input_fuzz

pytestmark = pytest.mark.integration

MAX_CASES = 400
BUDGET_SECONDS = 50.0  # and about 10 s more: the child's start, the last case, pytest
SEED = 13


def _with_base_cases(test):
    """``test`` with every unmutated base and command, and the regressions, as explicit
    examples (run first)."""
    for case in reversed(input_fuzz.base_cases() + input_fuzz.regression_cases()):
        test = example(case)(test)
    return test


def test_fuzzed_model_and_sweep_files_end_in_a_clear_exit(tmp_path):
    with input_fuzz.CaseRunner() as runner:
        _fuzz(tmp_path, runner)


def _fuzz(tmp_path, runner):
    codes = collections.Counter()
    runs = collections.Counter()  # (base, command) -> cases run
    seen = set()  # hypothesis generates some cases twice: each runs once
    # The budget is for the mutated cases: the unmutated ones run first and
    # compile every model (a minute or more from an empty compile cache).
    start = None

    @seed(SEED)
    @settings(max_examples=MAX_CASES, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @_with_base_cases
    @given(input_fuzz.cases())
    def one(case):
        nonlocal start
        if case.ops:
            start = start or time.perf_counter()
            if time.perf_counter() - start > BUDGET_SECONDS:
                return  # the budget is spent: the remaining cases are not run
        if case.key() in seen:
            return
        seen.add(case.key())
        n = sum(runs.values())
        out = runner.run(case, tmp_path / f"case{n:04d}")
        runs[case.base, case.command] += 1
        codes[out.code] += 1
        where = f"{case.describe()}:\n{out.output[-2000:]}"
        assert not out.traceback, f"traceback in {where}"
        assert not out.crash, f"crash in {where}"
        assert not out.hang, f"hang ({out.seconds:.0f} s) in {where}"
        assert out.code in (0, 1, 2), f"exit {out.code} in {where}"
        assert not out.stray, f"files written outside the case folder {out.stray} in {where}"
        if not case.ops:
            assert out.code == 0, f"an unmutated input fails: {where}"

    one()
    # Every base with every command ran (the unmutated ones at least), and the
    # generator reaches valid inputs and refused ones.
    for base in input_fuzz.BASES:
        for command in input_fuzz.COMMANDS:
            assert runs[base, command] >= 1, (base, command, runs)
    assert sum(runs.values()) >= 50, (runs, codes)
    assert codes[0] >= 9 and codes[2] >= 20, codes


def test_the_shipped_fuzzer_script_runs(tmp_path):
    # The script itself, as a user runs it (it once crashed on every run: a local
    # name shadowed hypothesis's ``given``), with --out so that path runs too.
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "fuzz.txt"
    proc = subprocess.run([sys.executable, str(root / "workflows" / "fuzz_inputs.py"), "--cases", "3",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    text = out.read_text()
    assert text.startswith("$ .venv/bin/python workflows/fuzz_inputs.py --cases 3 --out ")
    assert "| crashes (the process running the case died) | 0 |" in text
