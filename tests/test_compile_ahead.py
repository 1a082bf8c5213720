"""Programs built ahead: a solve traces its run's program first and compiles it while the consistent point is found.

The specification: a solve (one run, a batch, a forward-mode run) compiles
its run's program once, on a background thread, not in the caller's; its
output series' and balance kernels' programs too; a later solve of the same
shape starts no build; the motion is the one a solve without building ahead
gives, to the bit (the same program).  The caller's wait for a build
counts as compiling.  A program that cannot be traced ahead raises at its
call, as it would have without building ahead.  MECHSWEEP_COMPILE_AHEAD=off
builds nothing ahead.  A command that fails while a build is still compiling
for it ends with its error and exit code without waiting for the build.  A
solve whose run compiles from scratch imports its Dataset's modules while it
waits; a warm one after its integration, as before.
"""

import json
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import jax
from jax._src.dispatch import BACKEND_COMPILE_EVENT

import solver
from solver import ahead
from solver.compiled import compile_clock
from solver.tiered import TieredJit

from models_for_tests import pendulum_cartesian

ROOT = pathlib.Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "configs" / "mechanisms" / "pendulum.yaml")
PENDULUM_VALUES = {"x": 0.8, "y": -0.6, "x'": 0.0}


@pytest.fixture
def compiles():
    """(program name, thread id) of every XLA compile while the test runs."""
    seen = []

    def listen(event, seconds, fun_name="", **_):
        if event == BACKEND_COMPILE_EVENT:
            seen.append((fun_name, threading.get_ident()))

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield seen
    jax.monitoring.unregister_event_duration_listener(listen)


def _named(compiles, part):
    return [thread for name, thread in compiles if part in name]


@pytest.fixture
def ahead_off(monkeypatch):
    monkeypatch.setenv(ahead.AHEAD_ENV, "off")


@pytest.fixture
def ahead_on(monkeypatch):
    monkeypatch.delenv(ahead.AHEAD_ENV, raising=False)


def test_a_run_compiles_once_on_another_thread_and_gives_the_same_motion(compiles, ahead_on, monkeypatch):
    me = threading.get_ident()
    built_ahead = solver.solve(pendulum_cartesian(), (0.0, 2.0), values=PENDULUM_VALUES, samples=21)
    runs, series = _named(compiles, "_run"), _named(compiles, "series")
    assert len(runs) == 1 and runs[0] != me  # compiled once, by the background thread
    assert len(series) == 1 and series[0] != me
    del compiles[:]
    monkeypatch.setenv(ahead.AHEAD_ENV, "off")
    at_call = solver.solve(pendulum_cartesian(), (0.0, 2.0), values=PENDULUM_VALUES, samples=21)
    assert _named(compiles, "_run") == [me]  # off: compiled by its first call, in the caller's thread
    assert ahead.running() == 0
    for name in ("x", "y", "lam", "energy", "constraint_residual"):
        np.testing.assert_array_equal(built_ahead[name].values, at_call[name].values)
    assert int(built_ahead.status) == 0


def test_a_batch_and_a_forward_mode_run_compile_their_programs_once(compiles, ahead_on):
    me = threading.get_ident()
    batch = solver.solve_batch(pendulum_cartesian(), {"l": [0.9, 1.0, 1.1]}, values=PENDULUM_VALUES,
                               t_span=(0.0, 1.0), samples=11)
    runs = _named(compiles, "_run")
    assert len(runs) == 1 and runs[0] != me and list(batch.status.values) == [0, 0, 0]
    del compiles[:]
    forward = solver.solve(pendulum_cartesian(), (0.0, 1.0), values=PENDULUM_VALUES, samples=11,
                           sensitivities=["l"])
    runs = _named(compiles, "_run")
    assert len(runs) == 1 and runs[0] != me and int(forward.status) == 0
    assert np.isfinite(forward["dx_dl"].values).all()


def test_a_model_files_run_on_a_quick_build_is_built_ahead(compiles, ahead_on, program_store_dir, monkeypatch):
    monkeypatch.delenv(solver.tiered.TIERED_ENV, raising=False)  # tests/conftest.py turns tiering off
    me = threading.get_ident()
    with solver.tiered_compiles("quick"):
        ds = solver.load(PENDULUM, overrides={"ProblemData": {"tend": 1.0, "samples": 11}}).solve()
    runs = _named(compiles, "_run")
    assert len(runs) == 1 and runs[0] != me
    assert ds.attrs["solver_build"] == "quick" and int(ds.status) == 0


def test_a_models_balance_kernels_are_built_ahead_too(compiles, ahead_on):
    me = threading.get_ident()
    ds = solver.load(str(ROOT / "configs" / "mechanisms" / "two_particle_spring.yaml"),
                     overrides={"ProblemData": {"tend": 0.5, "samples": 11}}).solve()
    momenta = _named(compiles, "momenta")
    assert len(momenta) == 1 and momenta[0] != me
    assert abs(float(ds["momentum"].values[-1, 0] - ds["momentum"].values[0, 0])) < 1e-9  # conserved


def test_a_solve_of_a_shape_already_met_starts_no_build(ahead_on, monkeypatch):
    dae = pendulum_cartesian()
    solver.solve(dae, (0.0, 1.0), values=PENDULUM_VALUES, samples=11)
    started = []
    monkeypatch.setattr(ahead, "start", lambda build: started.append(build) or ahead.Ahead(None))
    solver.solve(dae, (0.0, 1.0), values={**PENDULUM_VALUES, "x": 0.7, "y": -0.71414284285}, samples=11)
    assert started == []  # other values, the same programs
    solver.solve(dae, (0.0, 1.0), values=PENDULUM_VALUES, samples=200)  # more output rows: a new run program
    assert len(started) == 2  # the run's and the output series'


def test_the_callers_wait_for_a_build_counts_as_compiling():
    with compile_clock() as clock:
        ahead.start(lambda: time.sleep(0.3)).wait()
    assert clock.seconds >= 0.29


def test_a_program_that_fails_to_trace_ahead_raises_at_its_call(ahead_on):
    def broken(x):
        raise ValueError("this program cannot be traced")

    program = TieredJit(jax.jit(broken), None, "broken", {})
    program.ahead(np.zeros(3))  # nothing raised here: the call tells
    with pytest.raises(ValueError, match="cannot be traced"):
        program(np.zeros(3))


def test_a_key_is_built_ahead_once_and_not_at_all_when_off(monkeypatch):
    table = ahead.AheadTable()
    monkeypatch.delenv(ahead.AHEAD_ENV, raising=False)
    built = []
    assert table.wants("k")
    table.start("k", lambda: (lambda: built.append(1)))
    assert not table.wants("k") and table.pending()
    table.wait("k")
    assert built == [1] and not table.pending() and not table.wants("k")
    monkeypatch.setenv(ahead.AHEAD_ENV, "off")
    assert not ahead.enabled() and not table.wants("other")


_SOLVE_NOTING_XARRAY = """
import json, sys, time
from sweep.jax_cache import configure_jax
configure_jax(sys.argv[1])
import solver, solver.api as api
from solver import ahead
start = ahead.start
ahead.start = lambda build: start(lambda: (time.sleep(2), build()))  # every build takes 2 s longer
integrate, seen = api._integrate, []
def noting(*args, **kwargs):
    seen.append("xarray" in sys.modules)
    return integrate(*args, **kwargs)
api._integrate = noting
solver.load(sys.argv[2], overrides={"ProblemData": {"tend": 0.5, "samples": 11}}).solve()
print(json.dumps(seen))
"""


def test_a_cold_solve_imports_its_datasets_modules_while_its_run_compiles_and_a_warm_one_after(tmp_path):
    def xarray_at_integration():
        proc = subprocess.run([sys.executable, "-c", _SOLVE_NOTING_XARRAY, str(tmp_path / "cache"), PENDULUM],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert xarray_at_integration() == [True]  # its run was traced: imported while XLA compiled it
    assert xarray_at_integration() == [False]  # loaded from the program store: imported after, as before


_FAILING_COMMAND_WITH_A_BUILD_LEFT = """
import sys, time
from solver import ahead
ahead.start(lambda: time.sleep(60))  # a build still compiling when the command fails
sys.argv = ["mechsweep", "simulate", sys.argv[1]]
from sweep.cli.app import run
run()
"""


def test_a_command_that_fails_ends_with_its_error_not_waiting_for_a_build_ahead(tmp_path):
    missing = tmp_path / "no_such_model.yaml"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _FAILING_COMMAND_WITH_A_BUILD_LEFT, str(missing)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no_such_model.yaml" in proc.stderr, proc.stderr
    assert time.perf_counter() - started < 30  # the build would have taken 60 s
