"""The suite compiles quickly (``conftest.py``: LLVM at -O0, XLA's older emitters); users compile optimised.

The runs of :mod:`opt_level_runs` in a child process at XLA's default
settings, as ``mechsweep`` and ``solver`` compile for users, must give
this process's numbers.  The two builds differ in how they round (fused
multiply-adds), not in what they compute, so the runs agree to far below
their tolerance (1e-10).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import TEST_XLA_FLAGS
from opt_level_runs import runs

TESTS = Path(__file__).resolve().parent


def _runs_optimised() -> dict:
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if f not in TEST_XLA_FLAGS)
    env = dict(os.environ, XLA_FLAGS=flags, MECHSWEEP_TEST_XLA_OPT="full")  # cache and float64: inherited
    script = ("import json, os, sys; sys.path.insert(0, sys.argv[1]); from opt_level_runs import runs; "
              "print(json.dumps({'flags': os.environ['XLA_FLAGS'], 'runs': runs()}))")
    out = subprocess.run([sys.executable, "-c", script, str(TESTS)], env=env, cwd=TESTS.parent,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_suite_compiles_as_a_quick_compile_does():
    """conftest.py's flags (set before JAX starts, for every program) are the per-program options of optimize=False."""
    from solver.integrate.integrator import QUICK_COMPILE

    def flag(value):
        return str(value).lower() if isinstance(value, bool) else str(value)

    assert list(TEST_XLA_FLAGS) == [f"--{key}={flag(value)}" for key, value in QUICK_COMPILE.items()]


def test_an_optimised_build_gives_the_suites_numbers():
    child = _runs_optimised()
    # Unless the suite was asked for the optimised build (MECHSWEEP_TEST_XLA_OPT=full), this is quick against optimised.
    assert (set(TEST_XLA_FLAGS) <= set(os.environ["XLA_FLAGS"].split())
            or os.environ.get("MECHSWEEP_TEST_XLA_OPT") == "full")
    assert "xla_backend_optimization_level" not in child["flags"]
    assert "xla_cpu_use_fusion_emitters" not in child["flags"]
    here = runs()
    assert here.keys() == child["runs"].keys()
    for name, values in here.items():
        theirs = child["runs"][name]
        assert values["status"] == theirs["status"] and not np.any(values["status"]), name
        assert values.keys() == theirs.keys(), name
        for var, a in values.items():
            np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(theirs[var], dtype=float),
                                       rtol=1e-11, atol=1e-11, err_msg=f"{name}: {var}")
