"""The suite compiles with LLVM's optimisation off (``conftest.py``); users compile with it on.

The runs of :mod:`opt_level_runs` in a child process at XLA's default
optimisation, as ``mechsweep`` and ``solver`` compile for users, must give
this process's numbers.  LLVM at -O0 and -O2 differ in how they round
(fused multiply-adds), not in what they compute, so the runs agree to far
below their tolerance (1e-10).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import TEST_OPT_FLAG
from opt_level_runs import runs

TESTS = Path(__file__).resolve().parent


def _runs_optimised() -> dict:
    flags = os.environ.get("XLA_FLAGS", "").replace(TEST_OPT_FLAG, "").strip()
    env = dict(os.environ, XLA_FLAGS=flags, MECHSWEEP_TEST_XLA_OPT="full")  # cache and float64: inherited
    script = ("import json, os, sys; sys.path.insert(0, sys.argv[1]); from opt_level_runs import runs; "
              "print(json.dumps({'flags': os.environ['XLA_FLAGS'], 'runs': runs()}))")
    out = subprocess.run([sys.executable, "-c", script, str(TESTS)], env=env, cwd=TESTS.parent,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_suite_compiles_as_a_quick_compile_does():
    """conftest.py's flag (set before JAX starts, for every program) is the per-program option of optimize=False."""
    from solver.integrate import QUICK_COMPILE

    assert [TEST_OPT_FLAG] == [f"--{key}={value}" for key, value in QUICK_COMPILE.items()]


def test_an_optimised_build_gives_the_suites_numbers():
    child = _runs_optimised()
    # Unless the suite was asked for the optimised build (MECHSWEEP_TEST_XLA_OPT=full), this is -O0 against -O2.
    assert TEST_OPT_FLAG in os.environ["XLA_FLAGS"] or os.environ.get("MECHSWEEP_TEST_XLA_OPT") == "full"
    assert "xla_backend_optimization_level" not in child["flags"]
    here = runs()
    assert here.keys() == child["runs"].keys()
    for name, values in here.items():
        theirs = child["runs"][name]
        assert values["status"] == theirs["status"] and not np.any(values["status"]), name
        assert values.keys() == theirs.keys(), name
        for var, a in values.items():
            np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(theirs[var], dtype=float),
                                       rtol=1e-11, atol=1e-11, err_msg=f"{name}: {var}")
