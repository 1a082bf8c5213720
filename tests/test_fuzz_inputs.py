"""Fuzzed model and sweep files always get an answer: exit 0, 1 or 2, never a traceback.

Mutated copies of ``configs/mechanisms/pendulum.yaml`` and of a small sweep
(:mod:`input_fuzz`: keys, types, numbers, expressions and the YAML text) run
in-process through ``mechsweep check`` and ``mechsweep sweep --dry-run``.
Every case must end in exit 0, 1 or 2 with no traceback printed and no
exception escaping, within :data:`input_fuzz.CASE_SECONDS`, writing nothing
outside its folder (a dry run not even ``--out``).  The cases are fixed
(hypothesis with a fixed seed, no database) and the run is bounded to about
a minute: :data:`MAX_CASES` cases, fewer if :data:`BUDGET_SECONDS` runs out.
``workflows/fuzz_inputs.py`` runs the same generator for more cases.
"""

import collections
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

import input_fuzz

MAX_CASES = 400
BUDGET_SECONDS = 60.0
SEED = 13


def test_fuzzed_model_and_sweep_files_end_in_a_clear_exit(tmp_path):
    codes = collections.Counter()
    kinds = collections.Counter()
    start = time.perf_counter()

    @seed(SEED)
    @settings(max_examples=MAX_CASES, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(input_fuzz.cases())
    def one(case):
        if time.perf_counter() - start > BUDGET_SECONDS:
            return  # the budget is spent: the remaining cases are not run
        n = sum(kinds.values())
        out = input_fuzz.run_case(case, tmp_path / f"case{n:04d}")
        kinds[case.kind] += 1
        codes[out.code] += 1
        where = f"{case.kind} case {case.ops}:\n{out.output[-2000:]}"
        assert not out.traceback, f"traceback in {where}"
        assert not out.hang, f"hang ({out.seconds:.0f} s) in {where}"
        assert out.code in (0, 1, 2), f"exit {out.code} in {where}"
        assert not out.stray, f"files written outside the case folder {out.stray} in {where}"

    one()
    # The generator reaches both commands, valid inputs and refused ones.
    assert sum(kinds.values()) >= 50, (kinds, codes)
    assert kinds["model"] and kinds["sweep"], kinds
    assert codes[0] >= 3 and codes[2] >= 20, codes
