"""Tiered compiles: a program's first calls run on a quick build while the optimised one compiles.

The specification: with tiering on, a model read from a file runs its first
solve on a build compiled with QUICK_COMPILE, the optimised build of the same
lowered program compiles on a background thread, and the solves after it is
ready run on it; both give the pendulum's answer (its constraint and a solve
without tiering agree to the tolerance's rounding).  A process that finds the
optimised build's marker compiles it at once.  Tiering is off by default and
without the program store, and MECHSWEEP_TIERED_COMPILE overrides the process's
setting; anything else in it is an error that names the choices.  A command
that leaves builds compiling says so and waits for them.
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
    """The compiler options of every Lowered.compile call, in order."""
    seen = []
    original = jax.stages.Lowered.compile

    def compile(self, compiler_options=None, **kwargs):
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
    before = _counts()
    del compile_options[:]
    again = _model().solve()  # new compiled functions: the marker says the optimised build is cached
    after = _counts()
    assert after["direct"] - before["direct"] == 1 and after["quick"] == before["quick"]
    assert QUICK_COMPILE not in compile_options
    assert int(again.status) == 0


def test_a_failed_optimised_build_leaves_the_quick_one_and_says_so(store, monkeypatch, caplog):
    def fail(lowered, mark):
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
        monkeypatch.setenv(tiered.TIERED_ENV, "sometimes")
        with pytest.raises(solver.InputError,
                           match=r"^MECHSWEEP_TIERED_COMPILE='sometimes': use on or off \(or unset it\)$"):
            tiered.tiered_enabled()
    finally:
        tiered.set_tiered(False)
    with pytest.raises(solver.InputError, match=r"^set_tiered takes true or false, got 'yes'$"):
        tiered.set_tiered("yes")


def test_a_command_says_it_waits_for_the_builds_still_compiling(caplog):
    from sweep.cli.common import finish_optimised_builds

    future = tiered._executor().submit(time.sleep, 0.3)
    with tiered._lock:
        tiered._compiling["a program"] = (None, future)
    future.add_done_callback(lambda done: tiered._forget("a program"))
    assert tiered.pending() == 1
    with caplog.at_level(logging.INFO, logger="mechsweep.cli"):
        assert finish_optimised_builds(1) == 1
    assert tiered.pending() == 0
    assert "the result is complete; compiling the optimised build of its programs for later runs" in caplog.text
    assert "optimised build ready after" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mechsweep.cli"):
        assert finish_optimised_builds(0) == 0  # nothing pending: nothing said
    assert caplog.text == ""
