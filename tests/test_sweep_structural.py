"""Sweeps over structural parameters (issue 14, item 4): one model, compile and store group per structure.

The shipped ``configs/sweeps/pendulum_chain_n.yaml`` (chains of N = 1, 2, 3
pendula in 3-D over the tilt ``th``; 3 points per N in batches of 2) is run
once in this process (``workers=0``) and then:

* one model build and one compile per group: three integrators in all, and
  no tracing or compiling in a group's second batch;
* the store is a Zarr root with the groups N=1, N=2, N=3, each an ordinary
  sweep store: ``open_store`` gives a ``DataTree`` (or with ``group=`` the
  Dataset), xarray opens it without warnings;
* each group's results equal a separate plain sweep of that structure (the
  sweep file with ``Override: {PhysicalParams: {N: k}}``) to 1e-12;
* ``status`` and ``--verify`` report each group, find a lost chunk of one
  group and a missing group, and a resume recomputes exactly those.

A structure that cannot be built (N = 0: no moving points) fails its points
alone, with the reason; a non-integer structural value is input error (exit
2) naming the file, key and fix; the CLI runs a structural sweep end to end
on a Dask worker.
"""

import json
import shutil
import time
import warnings
from pathlib import Path

import re

import numpy as np
import pytest
import xarray as xr

import jax
import solver.compiled
from solver import status as st
from sweep import pipeline
from sweep.cli.app import main
from sweep.cli.sweep_command import run_sweep_file
from sweep.store import open_store

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "configs" / "sweeps" / "pendulum_chain_n.yaml"
CHAIN = ROOT / "configs" / "mechanisms" / "pendulum_chain3d.yaml"
ERR = "mechsweep: error: "

# The shipped sweep's Override and outputs, for sweeps written by the tests
# (the same tolerance and batch, so N = 1 is the same compiled program).
BODY = """Model: {model}
Override:
  ProblemData: {{tend: 1}}
  SolverParams: {{Integration: {{tol: 1.0e-9}}}}
{override}Sweep:
{sweep}
Outputs:
  samples: 51
  metrics:
    P1z_min: {{of: "P1[2]", reduce: min}}
    residual_max: {{of: constraint_residual, reduce: max}}
Batch: 2
"""


def _sweep_file(folder: Path, sweep: str, override: str = "", name: str = "s.yaml") -> Path:
    path = Path(folder) / name
    path.write_text(BODY.format(model=CHAIN, override=override, sweep=sweep))
    return path


def _line(path: Path, text: str) -> int:
    """The line of the sweep file that holds ``text``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _fresh_worker_models(monkeypatch=None):
    """Forget the models this process has built (so a run builds and compiles its own)."""
    from collections import OrderedDict

    if monkeypatch is not None:
        monkeypatch.setattr(pipeline, "_WORKER_MODELS", OrderedDict())
    else:
        pipeline._WORKER_MODELS.clear()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The shipped sweep run in this process, counting integrators, model builds and compiles."""
    out = tmp_path_factory.mktemp("chain") / "chain.zarr"
    integrators, batches, events = [], [], []

    class Counting(solver.compiled.Integrator):
        def __init__(self, *args, **kw):
            integrators.append(args[0].dae if args else None)
            super().__init__(*args, **kw)

    def on_event(event, seconds, **_):
        if event.startswith("/jax/core/compile/"):
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(on_event)
    plain_batch_fn = pipeline.batch_fn

    def logged_batch_fn(points, context):
        before = len(events)
        result = plain_batch_fn(points, context)
        batches.append((dict(context.structural), len(events) - before))
        return result

    _fresh_worker_models()
    pipeline.MODEL_BUILDS.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solver.compiled, "Integrator", Counting)
        mp.setattr(pipeline, "batch_fn", logged_batch_fn)
        t = time.perf_counter()
        summary = run_sweep_file(SHIPPED, str(out), workers=0, plot=False, progress=False,
                                 echo=lambda *_: None)
        seconds = time.perf_counter() - t
    builds = dict(pipeline.MODEL_BUILDS)
    return {"out": out, "summary": summary, "integrators": integrators, "batches": batches,
            "builds": builds, "seconds": seconds}


# ------------------------------------------------------------------ one compile per group

def test_each_group_builds_its_model_once_and_compiles_once(chain):
    summary = chain["summary"]
    assert list(summary.groups) == ["N=1", "N=2", "N=3"]
    assert summary.store_by_status == {"success": 9}
    # One Integrator (one compiled model) per structure.
    assert len(chain["integrators"]) == 3
    # The base model (the file as given, for the checks) and one build per group, none twice.
    assert sorted(chain["builds"].values()) == [1, 1, 1, 1]
    # Two batches per group (3 points, Batch 2; the short one padded): only the
    # first traces and compiles.
    seen = [(s["N"], n) for s, n in chain["batches"]]
    assert [n for n, _ in seen] == [1, 1, 2, 2, 3, 3]
    assert all(compiles > 0 for n, compiles in seen[0::2])
    assert all(compiles == 0 for n, compiles in seen[1::2])


# ------------------------------------------------------------------ the store

def test_the_store_reopens_as_a_datatree_and_by_group_without_warnings(chain):
    out = chain["out"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = open_store(out)
        assert isinstance(tree, xr.DataTree)
        assert list(tree.children) == ["N=1", "N=2", "N=3"]
        assert tree.attrs["mechsweep_structural_sweep"] == 1
        assert tree.attrs["structural_parameters"] == ["N"]
        assert tree.attrs["sweep_groups"] == ["N=1", "N=2", "N=3"]
        assert tree.attrs["sweep_group_points"] == [3, 3, 3]
        for n in (1, 2, 3):
            ds = tree[f"N={n}"].to_dataset()
            assert ds.sizes["point"] == 3
            assert ds["N"].values.tolist() == [n] * 3
            assert ds["th"].values.tolist() == [0.3, 0.6, 0.9]
            assert ds["status"].values.tolist() == [st.SUCCESS] * 3
            assert f"P{n}" in ds and f"P{n + 1}" not in ds
            assert ds["lam"].shape == (3, 51, n)
            assert ds.attrs["sweep_group"] == f"N={n}"
            assert json.loads(ds.attrs["structural_values"]) == {"N": n}
            assert ds.sweep.parameters == ["N", "th"]
        one = open_store(out, group="N=2")
        xr.testing.assert_identical(one, tree["N=2"].to_dataset())
        # Plain xarray: a group by name, and the whole tree.
        direct = xr.open_zarr(out, group="N=3")
        np.testing.assert_array_equal(direct["P3"].values, tree["N=3"]["P3"].values)
        assert list(xr.open_datatree(out, engine="zarr").children) == ["N=1", "N=2", "N=3"]
    with pytest.raises(KeyError, match=r"no structure group 'N=7'; its groups: N=1, N=2, N=3"):
        open_store(out, group="N=7")


def test_each_group_equals_a_plain_sweep_of_its_structure(chain, tmp_path, monkeypatch):
    tree = open_store(chain["out"])
    for n in (1, 2, 3):
        _fresh_worker_models(monkeypatch)      # its own model, built and compiled again
        path = _sweep_file(tmp_path, "  product:\n    th: [0.3, 0.6, 0.9]",
                           override=f"  PhysicalParams: {{N: {n}}}\n", name=f"plain{n}.yaml")
        out = tmp_path / f"plain{n}.zarr"
        summary = run_sweep_file(path, str(out), workers=0, plot=False, progress=False,
                                 echo=lambda *_: None)
        assert summary.store_by_status == {"success": 3}
        plain = open_store(out)
        group = tree[f"N={n}"].to_dataset()
        assert "N" not in plain.coords                  # a plain sweep: N fixed by its Override
        np.testing.assert_array_equal(plain["th"].values, group["th"].values)
        outputs = plain.attrs["sweep_outputs"]
        assert outputs == group.attrs["sweep_outputs"]
        for name in outputs + ["steps", "status"]:
            np.testing.assert_allclose(group[name].values, plain[name].values, rtol=0, atol=1e-12,
                                       err_msg=f"N={n}: {name}")


# ------------------------------------------------------------------ status, verify, resume

def _status(capsys, store, *extra):
    code = main(["status", str(store), *extra])
    return code, capsys.readouterr().out


def test_status_verify_and_resume_work_per_group(chain, tmp_path, capsys):
    store = tmp_path / "copy.zarr"
    shutil.copytree(chain["out"], store)
    code, out = _status(capsys, store)
    assert code == 0
    assert "(structural sweep: one Zarr group per structure)" in out
    assert "points:     9 in 3 groups: N=1 (3), N=2 (3), N=3 (3)" in out
    assert "status:     success 9" in out
    assert out.count("batches:    2 done, 0 pending, 2 in all") == 3
    code, out = _status(capsys, store, "--verify")
    assert code == 0 and out.count("every chunk read, checksummed and decoded") == 3

    (store / "N=2" / "P2" / "c" / "1" / "0" / "0").unlink()    # a lost chunk of group N=2
    shutil.rmtree(store / "N=1")                               # a lost group
    for extra in ((), ("--verify",)):
        code, out = _status(capsys, store, *extra)
        assert code == 1
        assert "group N=1: MISSING (3 points): its Zarr group is gone" in out
        assert "group N=2:" in out
        assert "  batch 1 (points 2-2): chunk P2/c/1/0/0 missing" in out
        assert f"resume with: mechsweep sweep SWEEP.yaml --out {store} --resume" in out
        assert "status:     success 5, damaged 1, missing 3" in out
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tree = open_store(store)
    assert list(tree.children) == ["N=2", "N=3"]
    assert tree["N=2"]["status"].values.tolist() == [st.SUCCESS, st.SUCCESS, st.PENDING]
    said = [str(w.message) for w in caught]
    assert any("structure group N=1 is missing" in m for m in said)
    assert any(f"N=2: batches 1 no longer match their commit records" in m
               and f"--out {store} --resume" in m for m in said)

    summary = run_sweep_file(SHIPPED, str(store), workers=0, plot=False, progress=False,
                             echo=lambda *_: None)
    runs = {label: s.batches_run for label, s in summary.groups.items()}
    assert runs == {"N=1": [0, 1], "N=2": [1], "N=3": []}
    assert list(summary.groups["N=2"].batches_damaged) == [1]
    assert summary.store_by_status == {"success": 9}
    code, out = _status(capsys, store, "--verify")
    assert code == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again, first = open_store(store), open_store(chain["out"])
        assert list(xr.open_datatree(store, engine="zarr").children) == ["N=1", "N=2", "N=3"]
    for label in ("N=1", "N=2", "N=3"):
        for name in first[label].to_dataset().attrs["sweep_outputs"]:
            np.testing.assert_allclose(again[label][name].values, first[label][name].values,
                                       rtol=0, atol=1e-12)


def test_a_structure_that_cannot_be_built_fails_its_points_alone(tmp_path, capsys):
    path = _sweep_file(tmp_path, "  product:\n    N: [0, 1]\n    th: [0.3, 0.6]")
    out = tmp_path / "s.zarr"
    summary = run_sweep_file(path, str(out), workers=0, plot=False, progress=False,
                             echo=lambda *_: None)
    assert list(summary.groups) == ["N=0", "N=1"]
    assert summary.store_by_status == {"success": 2, "error": 2}
    assert summary.errors["N=0"].startswith(
        f"structure N=0 cannot be built: {CHAIN}:21: PartData: no moving points")
    failed = open_store(out, group="N=0")
    assert failed["status"].values.tolist() == [st.ERROR] * 2
    assert np.isnan(failed["P1z_min"].values).all()
    assert failed.attrs["group_error"] == summary.errors["N=0"]
    assert str(failed["batch_message"].values[0]).startswith("structure N=0 cannot be built")
    assert open_store(out, group="N=1")["status"].values.tolist() == [st.SUCCESS] * 2
    code, report = _status(capsys, out)
    assert code == 0                                   # failed points are no damage
    assert "status:     success 2, error 2" in report
    assert "    batch 0: structure N=0 cannot be built:" in report

    again = run_sweep_file(path, str(out), workers=0, mode="retry-failed", plot=False,
                           progress=False, echo=lambda *_: None)
    assert {k: s.batches_run for k, s in again.groups.items()} == {"N=0": [0], "N=1": []}
    fresh = run_sweep_file(path, str(out), workers=0, mode="overwrite", plot=False,
                           progress=False, echo=lambda *_: None)
    assert {k: s.batches_run for k, s in fresh.groups.items()} == {"N=0": [0], "N=1": [0]}
    assert fresh.store_by_status == {"success": 2, "error": 2}


def test_a_sweep_over_the_structure_alone_solves_each_structure(tmp_path):
    """No run parameter varies: each group's points are one solve, repeated."""
    path = _sweep_file(tmp_path, "  zip:\n    N: [1, 1]\n  constants: {th: 0.5}")
    out = tmp_path / "s.zarr"
    summary = run_sweep_file(path, str(out), workers=0, plot=False, progress=False,
                             echo=lambda *_: None)
    assert summary.store_by_status == {"success": 2}
    ds = open_store(out, group="N=1")
    assert ds["N"].values.tolist() == [1, 1] and "th" not in ds.coords
    np.testing.assert_array_equal(ds["P1"].values[0], ds["P1"].values[1])
    assert abs(float(ds["P1"].values[0, 0, 0]) - 0.5 * np.sin(0.5)) < 1e-12


# ------------------------------------------------------------------ input and dry run

def test_dry_run_prints_the_groups_and_their_points(tmp_path, capsys):
    code = main(["sweep", str(SHIPPED), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "  points:    9 in 6 batches of at most 2 (each structure group batched on its own, " \
           "below)" in out
    assert ("  structure: N fixes the model's size: 3 groups, each built and compiled once and "
            "stored as its own Zarr group (STORE.zarr/N=1, ...)") in out
    lines = [line for line in out.splitlines() if line.startswith("    N=")]
    assert lines == ["    N=1       3 points in 2 batches  4 unknowns, about 19.2 KiB",
                     "    N=2       3 points in 2 batches  8 unknowns, about 27.6 KiB",
                     "    N=3       3 points in 2 batches  12 unknowns, about 36 KiB"]
    assert "  store:     about 82.8 KiB uncompressed in all (9 points in 3 groups)" in out
    # Each group's batch and its worker's estimated peak memory (its own model's size).
    batch = [line for line in out.splitlines() if line.startswith("      batch:")]
    assert len(batch) == 3 and all("estimated peak memory of a worker: about " in b for b in batch)
    compiling = [float(re.search(r"([0-9.]+) MiB compiling", b).group(1)) for b in batch]
    assert compiling[0] < compiling[1] < compiling[2]

    # A structural constant is one group; an impossible structure is marked.
    path = _sweep_file(tmp_path, "  product:\n    th: [0.3, 0.6]\n  constants: {N: 0}")
    code = main(["sweep", str(path), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("    N=")]
    assert line.startswith("    N=0       2 points in 1 batch  CANNOT BE BUILT (its points will be "
                           "recorded as failed, status error): structure N=0 cannot be built: ")
    assert not (tmp_path / "s.zarr").exists()


def test_a_structure_whose_batch_would_not_fit_a_worker_is_refused_before_anything_runs(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.setenv("MECHSWEEP_MAX_WORKER_BYTES", "100MiB")
    out = tmp_path / "s.zarr"
    for argv in (["--dry-run"], ["--out", str(out)]):
        code = main(["sweep", str(SHIPPED), *argv])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        assert f"{SHIPPED}: Batch: structure N=1: a worker running one batch of 2 points x " in captured.err
        assert "lower Batch (now 2; try Batch: 1)" in captured.err
    assert not out.exists()


@pytest.mark.parametrize("sweep, key, located, value, fix", [
    ("  product:\n    N: [1, 2.5]\n    th: [0.3]", "Sweep.product.N", "N: [1, 2.5]", "2.5",
     "give whole numbers, e.g. N: [1, 2, 3]"),
    ("  product:\n    th: [0.3]\n  constants: {N: 2.5}", "Sweep.constants.N", None, "2.5",
     "give whole numbers, e.g. N: [1, 2, 3]"),
    ("  sample: {method: random, n: 3, seed: 1, bounds: {N: [1, 3]}}", "Sweep.sample.bounds.N",
     "sample:", None,
     "give 'N' whole values under Sweep.product or Sweep.zip (a sample draws real numbers), "
     "e.g. N: [1, 2, 3]"),
])
def test_a_structural_value_that_is_not_whole_is_input_error(tmp_path, capsys, sweep, key, located,
                                                             value, fix):
    path = _sweep_file(tmp_path, sweep)
    where = f"{path}:{_line(path, located)}: {key}" if located else f"{path}: {key}"
    for argv in (["--dry-run"], ["--out", str(tmp_path / "s.zarr")]):
        code = main(["sweep", str(path), *argv])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        got = captured.err.strip()
        shown = value or got.split(", got ")[1].split(";")[0]     # the first random draw
        assert got == (f"{ERR}{where}: 'N' is structural (it fixes the model's size: the sweep "
                       f"builds and compiles the model once per value), so its values must be "
                       f"whole numbers, got {shown}; {fix}")
        assert not (tmp_path / "s.zarr").exists()


def test_the_exact_message_for_n_2_5(tmp_path, capsys):
    path = _sweep_file(tmp_path, "  product:\n    N: [1, 2.5]\n    th: [0.3]")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        f"{ERR}{path}:7: Sweep.product.N: 'N' is structural (it fixes the model's size: the "
        f"sweep builds and compiles the model once per value), so its values must be whole "
        f"numbers, got 2.5; give whole numbers, e.g. N: [1, 2, 3]\n")


def test_plain_and_structural_stores_are_not_mixed_up(chain, tmp_path, capsys):
    """A plain sweep refuses a structural store and the other way round (exit 2, --overwrite)."""
    plain = _sweep_file(tmp_path, "  product:\n    th: [0.3]", name="plain.yaml")
    assert main(["sweep", str(plain), "--out", str(chain["out"]), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "holds a sweep over structural parameters (one Zarr group per structure: N=1, N=2, " \
           "N=3), not this sweep. Pass --overwrite" in err
    assert main(["status", str(chain["out"] / "N=1")]) == 0
    assert "resume with" not in capsys.readouterr().out
    # A structural sweep into a plain store (a group's store is one).
    group_store = tmp_path / "group.zarr"
    shutil.copytree(chain["out"] / "N=1", group_store)
    assert main(["sweep", str(SHIPPED), "--out", str(group_store), "--workers", "1"]) == 2
    assert ("is a sweep store of one structure (no groups), but this sweep varies the structural "
            "parameter N and stores one Zarr group per structure. Pass --overwrite"
            in capsys.readouterr().err)
    with pytest.raises(ValueError, match="a plain sweep store has no structure groups"):
        open_store(group_store, group="N=1")


# ------------------------------------------------------------------ the command line

def test_cli_runs_a_structural_sweep_end_to_end(tmp_path, capsys):
    path = _sweep_file(tmp_path, "  product:\n    N: [0, 1]\n    th: [0.3, 0.6]")
    out = tmp_path / "s.zarr"
    code = main(["sweep", str(path), "--out", str(out), "--workers", "1"])
    captured = capsys.readouterr()
    assert code == 1                                        # the points of N=0 failed
    assert ("[mechsweep] group 1/2, N=0: 2 points in 1 batch: cannot be built, its points are "
            "recorded as failed (error): structure N=0 cannot be built: ") in captured.err
    assert ("[mechsweep] group 2/2, N=1: 2 points in 1 batch: its model (4 unknowns) is built for "
            "N=1 and compiled once (per worker) for all its points") in captured.err
    assert f"{out}: 4 points in 2 structure groups (N), one Zarr group each" in captured.out
    assert "  N=1: 2 points in 1 batch; this run wrote 1 batch (2 points); status: success 2" \
        in captured.out
    assert "store status: success 2, error 2" in captured.out
    assert (out / "summary.png").is_file()
    assert main(["status", str(out), "--verify"]) == 0
    capsys.readouterr()
    assert main(["sweep", str(path), "--out", str(out), "--resume", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "  N=0: 2 points in 1 batch; this run wrote 0 batches (0 points); status: error 2" in out


def test_the_groups_of_a_structural_sweep_share_one_cluster_started_only_for_work(tmp_path, monkeypatch):
    # Two buildable structures on real Dask worker processes: one
    # LocalCluster serves both groups (its workers started once), and a
    # resume with nothing left to run starts none.
    import distributed

    started = []
    real = distributed.LocalCluster

    class CountingCluster(real):
        def __init__(self, *args, **kwargs):
            started.append(kwargs.get("n_workers"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(distributed, "LocalCluster", CountingCluster)
    path = _sweep_file(tmp_path, "  product:\n    N: [1, 2]\n    th: [0.3]")
    out = tmp_path / "s.zarr"
    summary = run_sweep_file(path, str(out), workers=1, plot=False, progress=False)
    assert started == [1]
    assert {label: s.store_by_status for label, s in summary.groups.items()} == {
        "N=1": {"success": 1}, "N=2": {"success": 1}}
    again = run_sweep_file(path, str(out), workers=1, plot=False, progress=False)
    assert started == [1] and all(not s.batches_run for s in again.groups.values())
