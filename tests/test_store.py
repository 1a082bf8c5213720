"""The sweep store: template, region writes, status, resume, accessor, report.

Batches run in-process here (``workers=0``); the Dask paths are in
``test_run_dask.py``. The toy batch function is a closed-form damped
oscillator (``tests/toybatch.py``).
"""

import json
import os
import warnings

import numpy as np
import pytest
import xarray as xr

import sweep.accessor  # noqa: F401  (registers ds.sweep)
from solver import status as st
from solver.errors import InputError
from sweep import store
from sweep.run import run_sweep
from sweep.store import BatchResult
from toybatch import ToyContext, grid_spec, oscillator, read_log, serial_reference, toy_batch

OMEGAS = [1.0, 2.0, 3.0, 4.0, 5.0]
ZETAS = [0.1, 0.5, 0.9]
# 15 points, omega slowest, in batches of 4: points 0-3, 4-7, 8-11, 12-14.
# omega 5 exceeds the toy's omega_max (4.5): points 12-14 (batch 3) fail with max_steps.


def make(tmp_path, batch=4, **ctx):
    spec = grid_spec(OMEGAS, ZETAS, batch)
    context = ToyContext(**{"omega_max": 4.5, **ctx})
    path = tmp_path / "s.zarr"
    return spec, context, path


def template(spec, context, path):
    store.create_template(path, spec.hash, spec.points, context.schema,
                          {**context.attrs, "title": spec.title}, spec.batch)


def assert_store_equals(path, ref):
    ds = store.open_store(path)
    np.testing.assert_array_equal(ds.status.values, ref["status"])
    np.testing.assert_array_equal(ds.steps.values, ref["steps"])
    for name in ("x", "pos", "x_end"):
        np.testing.assert_array_equal(ds[name].values, ref[name])


def test_template_reopens_lazily_with_coords_nan_data_and_attrs(tmp_path):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)
    # The template writes no data chunks: NaN comes from the Zarr fill value;
    # nor status chunks nor commit records: every batch reads as pending.
    for name in ("x", "status", "steps", "batch_commit"):
        assert sorted(os.listdir(path / name)) == ["zarr.json"], name
    assert store.check_store(path).pending == [0, 1, 2, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a plain open is quiet: consolidated metadata
        ds = xr.open_zarr(path)
    assert dict(ds.sizes) == {"point": 15, "time": 9, "axis": 3, "batch": 4}
    np.testing.assert_array_equal(ds.omega.values, spec.points["omega"])
    np.testing.assert_array_equal(ds.zeta.values, spec.points["zeta"])
    assert ds.omega.dims == ("point",)
    np.testing.assert_array_equal(ds.time.values, ctx.time)
    assert ds.axis.values.tolist() == ["x", "y", "z"]
    assert ds.pos.dims == ("point", "time", "axis") and ds.x_end.dims == ("point",)
    assert np.isnan(ds.pos.values).all() and np.isnan(ds.x_end.values).all()
    assert ds.status.dtype == np.int8 and (ds.status.values == -1).all()
    assert ds.status.encoding["fill_value"] == st.PENDING     # a lost chunk reads as pending
    assert ds.batch_commit.dims == ("batch",) and (ds.batch_commit.values == "").all()
    assert (ds.steps.values == -1).all()
    assert ds.x.chunks[0] == (4, 4, 4, 3)
    assert ds.status.attrs["flag_meanings"] == st.cf_attrs()["flag_meanings"]
    assert list(ds.status.attrs["flag_values"]) == list(st.cf_attrs()["flag_values"])
    assert ds.x.attrs["units"] == "m" and ds.time.attrs["units"] == "s"
    assert ds.attrs["title"] == "toy sweep"
    assert ds.attrs["sweep_hash"] == "toyhash-1" and ds.attrs["sweep_batch"] == 4
    assert ds.attrs["model_yaml"] == "Title: toy oscillator\n"
    assert json.loads(ds.attrs["solver_settings"]) == {"tol": 1e-10}
    assert json.loads(ds.attrs["package_versions"])["numpy"] == np.__version__


def test_region_write_fills_one_batch_and_failed_points_stay_nan(tmp_path):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)
    for sl in (slice(4, 8), slice(12, 15)):   # omega 2 and 3 (all fine); omega 5 (max_steps)
        store.write_batch(path, sl, toy_batch({k: v[sl] for k, v in spec.points.items()}, ctx))

    ds = store.open_store(path)
    assert ds.status.values.tolist() == [-1] * 4 + [0] * 4 + [-1] * 4 + [st.MAX_STEPS] * 3
    x_ref, v_ref = oscillator(2.0, 0.5, ctx.time)       # point 4: omega 2, zeta .5
    np.testing.assert_array_equal(ds.x.values[4], x_ref)
    np.testing.assert_array_equal(ds.pos.values[4, :, 1], v_ref / 2.0)
    np.testing.assert_array_equal(ds.x_end.values[4], x_ref[-1])
    assert np.isnan(ds.x.values[12:]).all()                    # failed points: NaN
    assert ds.steps.values[12:].tolist() == [100] * 3            # ceil(5 * 2 * 10)
    assert np.isnan(ds.x.values[:4]).all() and np.isnan(ds.x.values[8:12]).all()
    assert store.pending_batches(path) == [0, 2]
    assert store.failed_points(path).tolist() == [12, 13, 14]
    assert store.failed_batches(path) == [3]


def test_data_of_a_failed_point_is_written_as_nan(tmp_path):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)
    n = 4
    result = BatchResult(np.array([0, st.MAX_STEPS, 0, st.NONFINITE], np.int8), np.arange(n),
                         {"x": np.ones((n, 9)), "pos": np.ones((n, 9, 3)), "x_end": np.ones(n)})
    store.write_batch(path, slice(0, 4), result)
    ds = store.open_store(path)
    assert np.isnan(ds.x.values[[1, 3]]).all() and np.isnan(ds.x_end.values[[1, 3]]).all()
    assert (ds.x.values[[0, 2]] == 1).all()
    assert ds.steps.values[:4].tolist() == [0, 1, 2, 3]


def test_a_batch_is_complete_only_once_its_status_is_written(tmp_path, monkeypatch):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)

    def crash(*args):
        raise KeyboardInterrupt   # the driver dies between data and status

    monkeypatch.setattr(store.write, "_write_status", crash)
    sl = slice(0, 4)
    with pytest.raises(KeyboardInterrupt):
        store.write_batch(path, sl, toy_batch({k: v[sl] for k, v in spec.points.items()}, ctx))
    assert not np.isnan(store.open_store(path).x.values[0]).any()   # data got there...
    assert store.pending_batches(path) == [0, 1, 2, 3]              # ...but batch 0 is not done


def test_write_batch_rejects_a_slice_that_is_not_a_batch(tmp_path):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)
    with pytest.raises(ValueError, match="not a batch"):
        store.write_batch(path, slice(2, 6), BatchResult.failed(4, st.ERROR, ""))


def test_hash_mismatch_is_refused_naming_both_hashes_and_the_options(tmp_path):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)
    with pytest.raises(InputError) as err:
        store.prepare_store(path, "toyhash-2", spec.points, ctx.schema, {}, spec.batch)
    assert str(err.value) == (
        f"{path}: the store was written by sweep toyhash-1, but this sweep has hash toyhash-2 "
        "(the sweep file, its model or an override changed). Pass --overwrite to replace the "
        "store, or choose a new --out path")


def test_other_batch_size_and_unknown_mode_are_refused(tmp_path):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)
    with pytest.raises(InputError, match="written with Batch 4, but this run uses Batch 5"):
        store.prepare_store(path, spec.hash, spec.points, ctx.schema, {}, 5)
    with pytest.raises(InputError, match="valid modes: resume, overwrite, retry-failed"):
        store.prepare_store(path, spec.hash, spec.points, ctx.schema, {}, 4, mode="restart")


def test_overwrite_never_deletes_a_directory_that_is_not_a_store(tmp_path):
    spec, ctx, path = make(tmp_path)
    path.mkdir()
    (path / "thesis.tex").write_text("precious")
    with pytest.raises(InputError, match="not a Zarr store; refusing to delete"):
        store.prepare_store(path, spec.hash, spec.points, ctx.schema, {}, 4, mode="overwrite")
    assert (path / "thesis.tex").read_text() == "precious"


def test_resume_runs_only_the_pending_batches(tmp_path):
    spec, ctx, path = make(tmp_path, log=str(tmp_path / "log"), tag="resume")
    template(spec, ctx, path)
    for index in (0, 2):      # an earlier run finished batches 0 and 2
        sl = store.batch_slices(spec.n_points, spec.batch)[index]
        store.write_batch(path, sl, toy_batch({k: v[sl] for k, v in spec.points.items()},
                                              ToyContext()))
    summary = run_sweep(spec, toy_batch, ctx, path, workers=0, progress=False)
    assert sorted(b for _, b, _ in read_log(ctx.log, spec)) == [1, 3]
    assert sorted(summary.batches_run) == [1, 3] and summary.points_run == 7
    assert_store_equals(path, serial_reference(spec, ctx))
    again = run_sweep(spec, toy_batch, ctx, path, workers=0, progress=False)
    assert again.batches_run == [] and len(read_log(ctx.log, spec)) == 2


def test_exception_in_a_batch_is_status_error_and_retry_failed_reruns_it(tmp_path):
    # omega 2 (points 3-5) raises: batches 0 and 1 are errors as a whole.
    spec, ctx, path = make(tmp_path, log=str(tmp_path / "log"), tag="first", raise_at=2.0)
    summary = run_sweep(spec, toy_batch, ctx, path, workers=0, progress=False)
    assert_store_equals(path, serial_reference(spec, ctx))
    ds = store.open_store(path)
    assert ds.status.values[:8].tolist() == [st.ERROR] * 8
    assert "RuntimeError: toy failure at omega=2.0" in str(ds.batch_message.values[1])
    assert str(ds.batch_message.values[2]) == ""
    assert summary.store_by_status == {"success": 4, "max_steps": 3, "error": 8}
    assert store.failed_batches(path) == [0, 1, 3]

    fixed = ToyContext(log=ctx.log, tag="retry", omega_max=4.5)
    run_sweep(spec, toy_batch, fixed, path, workers=0, progress=False, mode="retry-failed")
    assert sorted(b for tag, b, _ in read_log(ctx.log, spec) if tag == "retry") == [0, 1, 3]
    assert_store_equals(path, serial_reference(spec, fixed))


def test_overwrite_runs_everything_again(tmp_path):
    spec, ctx, path = make(tmp_path, log=str(tmp_path / "log"), tag="a")
    run_sweep(spec, toy_batch, ctx, path, workers=0, progress=False)
    unlimited = ToyContext(log=ctx.log, tag="b")     # omega 5 no longer fails
    run_sweep(spec, toy_batch, unlimited, path, workers=0, progress=False, mode="overwrite")
    assert sorted(b for tag, b, _ in read_log(ctx.log, spec) if tag == "b") == [0, 1, 2, 3]
    assert_store_equals(path, serial_reference(spec, unlimited))


def wrong_shape_batch(points, context):
    n = len(points["omega"])
    return BatchResult(np.zeros(n, np.int8), np.zeros(n), {"x": np.zeros((n, 2))})


def test_a_result_that_does_not_fit_the_schema_is_an_error_not_a_crash(tmp_path):
    spec, ctx, path = make(tmp_path)
    summary = run_sweep(spec, wrong_shape_batch, ctx, path, workers=0, progress=False)
    ds = store.open_store(path)
    assert (ds.status.values == st.ERROR).all() and np.isnan(ds.x.values).all()
    assert "bad batch result: output 'x' has shape (4, 2), expected (4, 9)" in str(
        ds.batch_message.values[0])
    assert summary.by_status == {"error": 15}


def test_accessor_grid_and_failures(tmp_path):
    spec, ctx, path = make(tmp_path)
    run_sweep(spec, toy_batch, ctx, path, workers=0, progress=False)
    ds = store.open_store(path)
    assert ds.sweep.parameters == ["omega", "zeta"]
    grid = ds.sweep.grid()
    assert grid.x.dims == ("time", "omega", "zeta")
    assert grid.pos.dims == ("time", "axis", "omega", "zeta")
    x_ref, _ = oscillator(3.0, 0.5, ctx.time)
    np.testing.assert_array_equal(grid.x.sel(omega=3.0, zeta=0.5).values, x_ref)
    assert grid.status.sel(omega=5.0).values.tolist() == [st.MAX_STEPS] * 3

    bad = ds.sweep.failures()
    assert bad.omega.values.tolist() == [5.0] * 3
    assert bad.status_meaning.values.tolist() == ["max_steps"] * 3
    assert ds.sweep.successes().sizes["point"] == 12


def test_accessor_skips_zipped_axes_and_refuses_scattered_samples():
    n = 6
    omega = np.repeat([1.0, 2.0, 3.0], 2)
    zeta = np.tile([0.1, 0.2], 3)
    zipped = xr.Dataset({"status": ("point", np.zeros(n, np.int8)), "y": ("point", omega * zeta)},
                        coords={"omega": ("point", omega), "k": ("point", 10 * omega),
                                "zeta": ("point", zeta)},
                        attrs={"sweep_parameters": ["omega", "k", "zeta"]})
    assert zipped.sweep.grid_axes() == ["omega", "zeta"]       # k moves with omega
    np.testing.assert_array_equal(zipped.sweep.grid().y.sel(omega=3.0).values, 3.0 * np.array([0.1, 0.2]))
    holes = xr.Dataset(coords={"a": ("point", [1.0, 1.0, 2.0]), "b": ("point", [1.0, 2.0, 1.0])})
    with pytest.raises(ValueError, match=r"the 3 points are not a full grid over \['a', 'b'\]"):
        holes.sweep.grid()
    samples = xr.Dataset({"y": ("point", [3.0, 1.0, 2.0])},
                         coords={"a": ("point", [0.7, 0.1, 0.4]), "b": ("point", [5.0, 9.0, 1.0])})
    line = samples.sweep.grid()        # no product: one axis, the first parameter, sorted
    assert line.y.dims == ("a",) and line.y.values.tolist() == [1.0, 2.0, 3.0]
    assert line.b.values.tolist() == [9.0, 1.0, 5.0]


def test_status_report(tmp_path):
    spec, ctx, path = make(tmp_path)
    template(spec, ctx, path)
    sl = slice(12, 15)
    store.write_batch(path, sl, BatchResult.failed(3, st.ERROR, "RuntimeError: boom\nmore"))
    report = store.status_report(path)
    assert "sweep hash: toyhash-1" in report
    assert "batches:    1 done, 3 pending, 4 in all" in report
    status = report.split("status:\n")[1].split("\nfailures by reason")[0]
    lines = {line.split()[0]: line.split()[1] for line in status.splitlines()}
    assert lines == {"pending": "12", "error": "3"}
    # A batch that failed as a whole: its points' reason is the message's first line, time unknown.
    assert "failures by reason (3 points):\n         3  RuntimeError: boom  [error]\n" in report
    assert "batch 3: RuntimeError: boom" in report
    with pytest.raises(InputError, match="no Zarr store there"):
        store.status_report(tmp_path / "nothing.zarr")


def test_whole_chunks_written_directly_are_the_bytes_zarr_writes(tmp_path, monkeypatch):
    """A batch's whole chunks are encoded by mechsweep (numbers as bytes or texts as UTF-8, optionally
    Zstandard, then CRC32C), not by Zarr's codec pipeline: every file must be the one Zarr writes, and
    read back as the values; commit records, which differ by their times, must decode."""
    from sweep.store import write as write_module

    spec, ctx, _ = make(tmp_path)
    batches = [slice(0, 4), slice(4, 8), slice(12, 15)]   # the last one is short: Zarr's path
    results = [toy_batch({k: v[sl] for k, v in spec.points.items()}, ctx) for sl in batches]
    results[0].data["x"][1, 3] = np.nan                   # a NaN inside a written value
    failed = results[1]                                    # texts beyond ASCII in the text chunks
    failed.status[2] = st.SINGULAR_JACOBIAN
    failed.failure_time = np.array([np.nan, np.nan, 0.25, np.nan])
    failed.failure_reason = ["", "", "kinematic singularity at t = 0.25: rod QB, joint A (θ = 90°)", ""]
    failed.message = "1 point failed — see failure_reason"

    direct = []
    plain_key = write_module._plain_chunk_key

    def spy(array, selection, shape, encoders):
        key = plain_key(array, selection, shape, encoders)
        direct.append(key)
        return key

    paths = {}
    for how in ("zarr", "direct"):
        monkeypatch.setattr(write_module, "_plain_chunk_key",
                            spy if how == "direct" else (lambda *a: None))
        paths[how] = tmp_path / f"{how}.zarr"
        template(spec, ctx, paths[how])
        for sl, result in zip(batches, results):
            store.write_batch(paths[how], sl, result)
    written = [k for k in direct if k is not None]
    commits = [k for k in written if k.startswith("batch_commit/")]
    assert sorted(written) == sorted(
        ["pos/c/0/0/0", "pos/c/1/0/0", "x/c/0/0", "x/c/1/0", "x_end/c/0", "x_end/c/1",   # bytes, CRC32C
         "status/c/0", "status/c/1", "steps/c/0", "steps/c/1", "failure_time/c/0", "failure_time/c/1",
         "batch_seconds/c/0", "batch_seconds/c/1", "batch_seconds/c/3",                   # bytes, Zstandard, CRC32C
         "failure_reason/c/0", "failure_reason/c/1", "batch_message/c/0", "batch_message/c/1",
         "batch_message/c/3"] + commits)                                                  # UTF-8 texts, the same
    assert commits == ["batch_commit/c/0"] * 3       # the records of the store's 4 batches share one chunk
    for key in written:
        if key in commits:   # a record names its time and its chunks' file stamps: only its decoding is compared
            continue
        assert (paths["direct"] / key).read_bytes() == (paths["zarr"] / key).read_bytes(), key
    a, b = store.open_store(paths["direct"]), store.open_store(paths["zarr"])
    for name in ("x", "pos", "x_end", "status", "steps"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
    assert np.isnan(a.x.values[1, 3]) and store.check_store(paths["direct"], "decode").damaged == {}
    assert a.failure_reason.values[6] == failed.failure_reason[2] == b.failure_reason.values[6]
    assert str(a.batch_message.values[1]) == failed.message
