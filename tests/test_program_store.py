"""The program store: a model read from a file finds its compiled programs on disk, without tracing.

The specification: a process that reads a model file again loads every program
the first one stored and computes the same bits; anything that changes a
program (the model's data, the arguments' shapes, mechsweep's source) is a new
key; a damaged file is traced and written again; a DAE built in Python and a
store turned off store nothing.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import jax

import solver
from solver import program_store

ROOT = pathlib.Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "configs" / "mechanisms" / "pendulum.yaml")
SHORT = {"ProblemData": {"tend": 1.0, "samples": 11}}


@pytest.fixture
def store(program_store_dir):
    """A program store of its own (tests/conftest.py)."""
    return program_store_dir


def _files(directory):
    return sorted(p.name for p in directory.glob("*.exported.zst")) if directory.exists() else []


def _counts():
    return dict(program_store.stats)


def _solve(overrides=None, **kwargs):
    model = solver.load(PENDULUM, overrides={**SHORT, **(overrides or {})})
    return model.solve(**kwargs)


def test_a_model_read_again_loads_its_programs_and_computes_the_same_bits(store):
    before = _counts()
    first = _solve()
    stored = _counts()["stored"] - before["stored"]
    assert stored >= 3  # the run, the consistent point's Newton, the constraint residual series
    assert len(_files(store)) == stored
    assert any(name.startswith("run-") for name in _files(store))

    again = _solve()  # a new model object: new compiled functions, nothing traced in memory
    after = _counts()
    assert after["stored"] - before["stored"] == stored
    assert after["loaded"] - before["loaded"] == stored
    for name in ("x", "y", "lam"):
        np.testing.assert_array_equal(again[name].values, first[name].values)
    # and the stored pendulum is the pendulum: x^2 + y^2 = L^2 along the run
    np.testing.assert_allclose(first["x"].values ** 2 + first["y"].values ** 2, 1.0, atol=1e-9)


def test_other_data_is_another_program_with_its_own_answer(store):
    moon = {"PhysicalParams": {"g": 1.62}}
    earth = _solve()
    before = _counts()
    lunar = _solve(moon)
    after = _counts()
    assert after["loaded"] == before["loaded"]  # nothing of the first model is reused
    assert after["stored"] > before["stored"]
    # the small-angle period scales as 1/sqrt(g): the moon's pendulum is still near x = L at t = 0.5
    assert not np.allclose(lunar["x"].values, earth["x"].values)
    assert lunar["x"].values[5] > earth["x"].values[5]


def test_new_argument_shapes_are_a_new_program(store):
    _solve()
    before = _counts()
    _solve({"ProblemData": {"samples": 21}})  # the data differs too: every program is new
    assert _counts()["stored"] > before["stored"]
    model = solver.load(PENDULUM, overrides=SHORT)
    model.solve()
    before = _counts()
    model.solve(t_eval=np.linspace(0.0, 1.0, 5))  # same model, 5 output times instead of 11
    assert _counts()["stored"] - before["stored"] >= 1


def test_a_changed_solver_source_is_a_new_key(store, monkeypatch):
    _solve()
    before = _counts()
    monkeypatch.setattr(program_store, "_source_digest", lambda: "another version of mechsweep")
    _solve()
    after = _counts()
    assert after["loaded"] == before["loaded"]
    assert after["stored"] > before["stored"]


def test_a_damaged_program_is_traced_again_and_rewritten(store, caplog):
    first = _solve()
    for path in store.glob("*.exported.zst"):
        path.write_bytes(b"not a program")
    before = _counts()
    with caplog.at_level("WARNING", logger="solver.program_store"):
        again = _solve()
    after = _counts()
    assert after["loaded"] == before["loaded"]
    assert after["stored"] - before["stored"] == len(_files(store))
    assert "could not be read" in caplog.text and "tracing it again" in caplog.text
    np.testing.assert_array_equal(again["x"].values, first["x"].values)
    for path in store.glob("*.exported.zst"):
        jax.export.deserialize(bytearray(program_store._decompress(path.read_bytes())))  # whole again


def test_an_equilibrium_loads_its_kernels_too(store):
    first = solver.equilibrium(solver.load(PENDULUM))
    before = _counts()
    again = solver.equilibrium(solver.load(PENDULUM))
    after = _counts()
    assert after["loaded"] - before["loaded"] >= 2 and after["stored"] == before["stored"]
    assert again.stable == first.stable is True
    np.testing.assert_array_equal(again.configuration["y"], first.configuration["y"])
    assert first.configuration["y"] == pytest.approx(1.0)  # the bob hangs below the pivot (y downward)


def test_a_dae_built_in_python_is_never_stored(store):
    def residual(t, v, p):
        return [v["x"][1] + p["k"] * v["x"][0]]

    dae = solver.DAE(residual, ["x"], params={"k": 2.0})
    before = _counts()
    result = solver.solve(dae, (0.0, 1.0), values={"x": 1.0}, t_eval=np.linspace(0.0, 1.0, 5))
    np.testing.assert_allclose(result["x"].values[-1], np.exp(-2.0), rtol=1e-8)
    assert _counts() == before
    assert _files(store) == []
    assert solver.compiled_model(dae, 20).integrator.identity is None


def test_the_store_can_be_turned_off(store, monkeypatch):
    monkeypatch.setenv(program_store.STORE_ENV, "off")
    assert program_store.store_directory() is None
    _solve()
    assert _files(store) == []


def test_a_store_turned_off_mid_run_traces_plainly(store, monkeypatch):
    model = solver.load(PENDULUM, overrides=SHORT)
    model.solve()
    files = _files(store)
    monkeypatch.setenv(program_store.STORE_ENV, "off")
    result = model.solve(t_eval=np.linspace(0.0, 1.0, 7))  # a new shape of the same compiled model
    assert result["x"].shape == (7,) and _files(store) == files


def test_the_store_deletes_the_programs_used_longest_ago(tmp_path):
    now = 1_000_000.0
    for i, size in enumerate([40, 30, 20, 10]):  # p0 used longest ago, p3 last
        path = tmp_path / f"p{i}.exported.zst"
        path.write_bytes(b"x" * size)
        os.utime(path, (now + i, now + i))
    program_store._prune(tmp_path, 100, keep=tmp_path / "p0.exported.zst")
    assert _files_named(tmp_path) == ["p0", "p1", "p2", "p3"]  # 100 bytes: within the size
    program_store._prune(tmp_path, 90, keep=tmp_path / "p3.exported.zst")
    assert _files_named(tmp_path) == ["p1", "p2", "p3"]  # the oldest goes: 60 bytes, under 80 % of 90
    program_store._prune(tmp_path, 50, keep=tmp_path / "p3.exported.zst")
    assert _files_named(tmp_path) == ["p2", "p3"]
    program_store._prune(tmp_path, 5, keep=tmp_path / "p2.exported.zst")
    assert _files_named(tmp_path) == ["p2"]  # the program just written stays, whatever its size


def _files_named(directory):
    return sorted(p.name.split(".")[0] for p in directory.glob("*.exported.zst"))


def test_the_store_size_is_set_from_the_environment(store, monkeypatch):
    monkeypatch.setenv("MECHSWEEP_PROGRAM_STORE_BYTES", "1")
    first = _solve()
    assert len(_files(store)) == 1  # each program written pushed out the one before
    np.testing.assert_allclose(first["x"].values ** 2 + first["y"].values ** 2, 1.0, atol=1e-9)
    monkeypatch.setenv("MECHSWEEP_PROGRAM_STORE_BYTES", "a lot")
    with pytest.raises(solver.InputError, match="MECHSWEEP_PROGRAM_STORE_BYTES='a lot'"):
        _solve({"ProblemData": {"samples": 3}})


_CHILD = """
import json, sys
import numpy as np
from sweep.run import configure_jax
configure_jax(sys.argv[1])
import solver
from solver import program_store
from solver.compiled import compile_clock
model = solver.load(sys.argv[2], overrides={"ProblemData": {"tend": 1.0, "samples": 11}})
with compile_clock() as clock:
    result = model.solve()
print(json.dumps({"stats": program_store.stats, "x": result["x"].values.tolist()}))
"""


@pytest.mark.integration
def test_a_new_process_loads_what_the_first_stored(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != program_store.STORE_ENV}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "cache"), PENDULUM], env=env,
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["stats"]["loaded"] == 0 and first["stats"]["stored"] >= 3
    assert second["stats"] == {"loaded": first["stats"]["stored"], "stored": 0, "unstored": 0}
    assert second["x"] == first["x"]
