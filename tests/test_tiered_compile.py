"""Tiered compiles: a program's first calls run on a quick build while the optimised one compiles.

The specification: with tiering on, a model read from a file runs its first
solve on a build compiled with QUICK_COMPILE, the optimised build of the same
lowered program compiles on a background thread, and the solves after it is
ready run on it; both give the pendulum's answer (its constraint and a solve
without tiering agree to the tolerance's rounding).  A process that finds the
optimised build's marker compiles it at once.  Processes sharing a program
store compile each optimised build once: while another holds its lock file, a
process stays on its quick build, loads the build when the marker appears, and
takes the lock over when its holder lets it go without one.  Tiering is off by default and
without the program store, and MECHSWEEP_TIERED_COMPILE overrides the process's
setting; anything else in it is an error that names the choices.  A command
that leaves builds compiling says so and waits for them.

A one-off run's modes: "quick" runs on a quick build alone (nothing compiles
in the background, nothing is marked) unless the optimised build is marked in
the store, which it then loads; "optimised" compiles the optimised build at
once and marks it.  Without the store, "quick" still builds quickly.  The
Dataset's solver_build says which build the run went on.
"""

import logging
import pathlib
import re
import time

import numpy as np
import pytest

import jax

import solver
from solver import tiered
from solver.integrate.choices import QUICK_COMPILE

from pendulum_sweep import PENDULUM_DESIGN

ROOT = pathlib.Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "configs" / "mechanisms" / "pendulum.yaml")
SHORT = {"ProblemData": {"tend": 1.0, "samples": 11}}


@pytest.fixture
def store(program_store_dir, monkeypatch):
    """A program store of its own (tests/conftest.py), tiering on for the test (off again after)."""
    monkeypatch.delenv(tiered.TIERED_ENV, raising=False)
    tiered.set_tiered(True)
    yield program_store_dir
    assert tiered.wait_pending(timeout=300)
    tiered.set_tiered(False)


@pytest.fixture
def compile_options(monkeypatch):
    """The compiler options of every Lowered.compile call of a run's program, in order.

    (A single run's output series is always a quick build, compiled ahead through Lowered.compile too.)
    """
    seen = []
    original = jax.stages.Lowered.compile

    def compile(self, compiler_options=None, **kwargs):
        if "_run" in getattr(self._lowering, "_name", "_run"):
            seen.append(dict(compiler_options or {}))
        return original(self, compiler_options, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile)
    return seen


def _model(overrides=None):
    return solver.load(PENDULUM, overrides={**SHORT, **(overrides or {})})


def _counts():
    return dict(tiered.stats)


def test_first_solve_runs_on_the_quick_build_and_later_ones_on_the_optimised(store, compile_options):
    model = _model()
    before = _counts()
    first = model.solve()
    assert _counts()["quick"] - before["quick"] == 1  # the run program
    assert tiered.wait_pending(timeout=300)
    assert QUICK_COMPILE in compile_options and {} in compile_options  # both builds of the run
    second = model.solve()
    assert _counts()["switched"] - before["switched"] == 1
    assert sorted(p.name.split("-")[0] for p in store.glob("*.optimised")) == ["run"]
    # Both builds integrate the pendulum: on its circle, and the same motion to the tolerance's rounding.
    for ds in (first, second):
        assert int(ds.status) == 0
        np.testing.assert_allclose(ds["x"].values ** 2 + ds["y"].values ** 2, 1.0, atol=1e-9)
    np.testing.assert_allclose(second["x"].values, first["x"].values, rtol=0, atol=1e-11)


def test_a_model_read_again_compiles_the_optimised_build_at_once(store, compile_options):
    _model().solve()
    assert tiered.wait_pending(timeout=300)
    with tiered._lock:
        tiered._compiling.clear()  # as in a later process: only the marker on disk is left
    before = _counts()
    del compile_options[:]
    again = _model().solve()  # new compiled functions: the marker says the optimised build is cached
    after = _counts()
    assert after["direct"] - before["direct"] == 1 and after["quick"] == before["quick"]
    assert QUICK_COMPILE not in compile_options
    assert int(again.status) == 0


def test_a_failed_optimised_build_leaves_the_quick_one_and_says_so(store, monkeypatch, caplog):
    def fail(lowered, mark, claim):
        claim.release()
        raise RuntimeError("out of memory in LLVM")

    monkeypatch.setattr(tiered, "_optimise", fail)
    model = _model({"ProblemData": {"tend": 0.6}})
    before = _counts()
    first = model.solve()
    assert tiered.wait_pending(timeout=60)
    with caplog.at_level(logging.WARNING, logger="solver.tiered"):
        again = model.solve()
    after = _counts()
    assert after["failed"] - before["failed"] == 1 and after["switched"] == before["switched"]
    assert "the optimised build of run failed (out of memory in LLVM); staying on the quick build" in caplog.text
    assert not list(store.glob("*.optimised"))  # the next process tries again
    np.testing.assert_array_equal(again["x"].values, first["x"].values)  # the same (quick) build


def test_mechsweep_design_starts_its_solves_on_quick_builds_and_waits_for_the_optimised(store, tmp_path,
                                                                                       monkeypatch, capsys):
    from sweep.cli.app import main
    from sweep.jax_cache import configure_jax

    old_cache = jax.config.jax_compilation_cache_dir
    monkeypatch.setenv("MECHSWEEP_JAX_CACHE", str(store.parent))
    design = tmp_path / "design.yaml"
    design.write_text(PENDULUM_DESIGN.format(model=PENDULUM))
    tiered.set_tiered(False)  # the command turns it on for itself
    before = _counts()
    try:
        assert main(["design", str(design)]) == 0
    finally:
        configure_jax(old_cache)
        jax.config.update("jax_compilation_cache_dir", str(store.parent))  # the fixture restores it
    after = _counts()
    # One forward-mode program (the reference design's solve and the start's are the same
    # program, which the second compiled model shares while it compiles).
    assert after["quick"] - before["quick"] == 1
    assert tiered.pending() == 0 and tiered.tiered_enabled() is False
    assert sorted(p.name.split("-")[0] for p in store.glob("*.optimised")) == ["run_tangents"]
    captured = capsys.readouterr()
    assert "compiling the optimised build of its programs for later runs (Ctrl-C skips this)" in captured.err
    assert re.search(r"optimised build ready after \d+\.\d s more", captured.err), captured.err
    found = re.search(r"^  L = (\S+)", captured.out, re.M)
    assert found and abs(float(found.group(1)) - 1.1) < 1e-8, captured.out  # the target's length, found


def test_a_one_off_run_goes_on_a_quick_build_alone_until_an_optimised_one_is_marked(program_store_dir, monkeypatch,
                                                                                   compile_options):
    monkeypatch.delenv(tiered.TIERED_ENV, raising=False)
    before = _counts()
    with tiered.tiered_compiles("quick"):
        first = _model().solve()
    assert tiered.pending() == 0 and not list(program_store_dir.glob("*.optimised"))
    assert QUICK_COMPILE in compile_options and {} not in compile_options  # no optimised build at all
    assert first.attrs["solver_build"] == "quick" and first.attrs["solver_optimize"]
    with tiered.tiered_compiles("optimised"):
        second = _model().solve()
    assert second.attrs["solver_build"] == "optimised"
    assert sorted(p.name.split("-")[0] for p in program_store_dir.glob("*.optimised")) == ["run"]
    del compile_options[:]
    with tiered.tiered_compiles("quick"):
        third = _model().solve()  # marked: loaded, not built quickly again
    assert third.attrs["solver_build"] == "optimised" and QUICK_COMPILE not in compile_options
    after = _counts()
    assert (after["quick_alone"] - before["quick_alone"], after["marked"] - before["marked"],
            after["direct"] - before["direct"], after["quick"] - before["quick"]) == (1, 1, 1, 0)
    for ds in (first, second, third):
        np.testing.assert_allclose(ds["x"].values ** 2 + ds["y"].values ** 2, 1.0, atol=1e-9)
    np.testing.assert_allclose(first["x"].values, third["x"].values, rtol=0, atol=1e-11)
    np.testing.assert_array_equal(second["x"].values, third["x"].values)  # the same optimised build


def test_a_one_off_run_without_the_program_store_is_still_quick(monkeypatch, compile_options):
    monkeypatch.delenv(tiered.TIERED_ENV, raising=False)
    old = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        with tiered.tiered_compiles("quick"):
            ds = _model({"ProblemData": {"tend": 0.7}}).solve()
    finally:
        jax.config.update("jax_compilation_cache_dir", old)
    assert ds.attrs["solver_build"] == "quick" and compile_options == [QUICK_COMPILE]


def test_off_by_default_and_without_the_program_store(tmp_path, monkeypatch):
    monkeypatch.delenv(tiered.TIERED_ENV, raising=False)
    assert tiered.tiered_enabled() is False
    before = _counts()
    _model({"ProblemData": {"tend": 0.75}}).solve()
    assert _counts() == before
    # on, but no compilation cache directory (so no store): compiled as before
    tiered.set_tiered(True)
    try:
        old = jax.config.jax_compilation_cache_dir
        jax.config.update("jax_compilation_cache_dir", None)
        _model({"ProblemData": {"tend": 0.8}}).solve()
        jax.config.update("jax_compilation_cache_dir", old)
    finally:
        tiered.set_tiered(False)
    assert _counts() == before


def test_the_environment_overrides_the_process_setting(monkeypatch):
    monkeypatch.setenv(tiered.TIERED_ENV, "off")
    tiered.set_tiered(True)
    try:
        assert tiered.tiered_enabled() is False
        monkeypatch.setenv(tiered.TIERED_ENV, " On ")
        tiered.set_tiered(False)
        assert tiered.tiered_enabled() is True
        monkeypatch.setenv(tiered.TIERED_ENV, "Quick")
        assert tiered.tiered_mode() == "quick" and tiered.tiered_enabled() is False
        monkeypatch.setenv(tiered.TIERED_ENV, "sometimes")
        with pytest.raises(solver.InputError, match=r"^MECHSWEEP_TIERED_COMPILE='sometimes': use on, off, quick or "
                                                    r"optimised \(or unset it\)$"):
            tiered.tiered_enabled()
    finally:
        tiered.set_tiered(False)
    with pytest.raises(solver.InputError, match=r"^set_tiered takes true, false or one of 'off', 'tiered', 'quick', "
                                                r"'optimised', got 'yes'$"):
        tiered.set_tiered("yes")


def test_a_command_says_it_waits_for_the_builds_still_compiling(caplog):
    from sweep.cli.common import finish_optimised_builds

    builds = tiered._Builds(None, "a program")
    builds.coming = tiered._executor().submit(time.sleep, 0.3)
    with tiered._lock:
        tiered._compiling["a program"] = builds
    try:
        assert tiered.pending() == 1
        with caplog.at_level(logging.INFO, logger="mechsweep.cli"):
            assert finish_optimised_builds(1) == 1
        assert tiered.pending() == 0
    finally:
        tiered._compiling.pop("a program")
    assert "the result is complete; compiling the optimised build of its programs for later runs" in caplog.text
    assert "optimised build ready after" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mechsweep.cli"):
        assert finish_optimised_builds(0) == 0  # nothing pending: nothing said
    assert caplog.text == ""


def _held_elsewhere(path: pathlib.Path):
    """An open file holding ``path``'s flock, as another process would (a lock of its own file description)."""
    import fcntl

    handle = open(path, "ab")
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return handle


@pytest.fixture
def another_process_compiling(store, monkeypatch):
    """Every optimised build's lock is held elsewhere when this process first looks for it; the held locks."""
    held = {}
    take = tiered._Claim.take

    def take_after_another(claim):
        if claim.path not in held:
            held[claim.path] = _held_elsewhere(claim.path)
        return take(claim)

    monkeypatch.setattr(tiered._Claim, "take", take_after_another)
    monkeypatch.setattr(tiered, "LOOK_SECONDS", 0.0)
    yield held
    for handle in held.values():
        handle.close()


def test_while_another_process_compiles_the_optimised_build_a_process_stays_quick_then_loads_it(
        store, another_process_compiling):
    model = _model({"ProblemData": {"tend": 0.7}})
    before = _counts()
    first = model.solve()
    assert tiered.pending() == 0  # nothing compiling here: the other process has the lock
    assert model.solve()["x"].values.tolist() == first["x"].values.tolist()  # still the quick build
    (lock,) = another_process_compiling
    assert lock.name.startswith("run-") and lock.name.endswith(".optimising")
    lock.with_name(lock.name.replace(".optimising", ".optimised")).touch()  # the other process is done
    model.solve()  # sees the marker: loads the build in the background
    assert tiered.wait_pending(timeout=300)
    last = model.solve()
    after = _counts()
    assert after["loaded"] - before["loaded"] == 1 and after["switched"] - before["switched"] == 1
    assert after["optimised"] == before["optimised"] and after["quick"] - before["quick"] == 1
    np.testing.assert_allclose(last["x"].values, first["x"].values, rtol=0, atol=1e-11)


def test_a_lock_let_go_without_a_build_is_taken_over(store, another_process_compiling):
    model = _model({"ProblemData": {"tend": 0.65}})
    before = _counts()
    model.solve()
    assert tiered.pending() == 0
    (handle,) = another_process_compiling.values()
    handle.close()  # the other process ended (or its build failed) before its marker
    model.solve()   # takes the lock and compiles the build itself
    assert tiered.wait_pending(timeout=300)
    model.solve()
    after = _counts()
    assert after["optimised"] - before["optimised"] == 1 and after["switched"] - before["switched"] == 1
    assert sorted(p.name.split("-")[0] for p in store.glob("*.optimised")) == ["run"]
    # Let go once the marker is written: another process would take the lock and find it.
    (path,) = another_process_compiling
    _held_elsewhere(path).close()


@pytest.mark.integration
def test_a_sweeps_workers_start_on_quick_builds_and_one_compiles_the_optimised(tmp_path, monkeypatch):
    import xarray as xr

    from pendulum_sweep import write_pendulum_sweep
    from sweep.cli.sweep_command import run_sweep_file

    sweep_file = write_pendulum_sweep(tmp_path)
    quiet = {"progress": False, "plot": False, "echo": lambda *a: None}
    reference = run_sweep_file(sweep_file, str(tmp_path / "reference.zarr"), workers=0, **quiet)  # untiered
    monkeypatch.delenv(tiered.TIERED_ENV, raising=False)  # the suite turns it off; the sweep turns it on
    cache = tmp_path / "cache"
    monkeypatch.setenv("MECHSWEEP_JAX_CACHE", str(cache))
    summary = run_sweep_file(sweep_file, str(tmp_path / "s.zarr"), workers=2, **quiet)
    builds = summary.builds
    # Each worker with a batch started it on a quick build; one of them compiled the
    # optimised build (the other, if it looked after that, loaded it), and the run waited
    # for it (here, where every build is quick, it may have been done before the last batch).
    assert builds["optimised"] == 1 and builds["pending"] == 0 and builds["failed"] == 0, builds
    assert 1 <= builds["quick"] <= 2 and builds["loaded"] <= 1, builds
    assert [p.name.split("-")[0] for p in (cache / "programs").glob("*.optimised")] == ["run_batch"]
    assert summary.store_by_status == reference.store_by_status == {"success": 4, "no_assembly": 2}
    ours, theirs = xr.open_zarr(tmp_path / "s.zarr"), xr.open_zarr(tmp_path / "reference.zarr")
    for name in ("x", "y", "y_max", "x_range"):
        np.testing.assert_allclose(ours[name].values, theirs[name].values, rtol=0, atol=1e-9)


def _a_build_compiling_for(seconds: float) -> None:
    """On a worker: an optimised build that takes ``seconds`` more (as one of a sweep's would)."""
    builds = tiered._Builds(None, "a program")
    builds.coming = tiered._executor().submit(time.sleep, seconds)
    with tiered._lock:
        tiered._compiling["a program"] = builds


@pytest.mark.integration
def test_a_sweep_waits_for_its_workers_builds_saying_so(caplog):
    from distributed import Client, LocalCluster

    from sweep.run.cluster import finish_worker_builds

    # A worker in this process (a thread): the same questions by client.run, no process to start.
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        assert finish_worker_builds(client)[0]["pending"] == 0  # nothing compiling: nothing to wait for
        client.run(_a_build_compiling_for, 1.5)
        with caplog.at_level(logging.INFO, logger="mechsweep"):
            counts, seconds = finish_worker_builds(client, poll=0.1)
    tiered._compiling.pop("a program")
    assert counts["pending"] == 0 and 1.0 < seconds < 30, (counts, seconds)
    assert ("the results are complete; the workers are compiling the optimised build of their programs for "
            "later runs (Ctrl-C skips this)") in caplog.text
    assert re.search(r"optimised build ready after \d+\.\d s more", caplog.text), caplog.text


def test_a_sweeps_summary_gives_the_wait_for_the_optimised_build_apart():
    from sweep.run import SweepSummary

    summary = SweepSummary("s.zarr", 6, 2, wall_seconds=4.0, startup_seconds=2.5, total_seconds=9.7,
                           build_wait_seconds=3.2)
    assert "(2.5 s store and cluster start-up, 4 s running batches, 3.2 s more for the optimised build of " \
           "its programs)" in str(summary)
    assert "optimised" not in str(SweepSummary("s.zarr", 6, 2, wall_seconds=4.0))
