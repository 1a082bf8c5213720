"""The template record: coordinates and metadata of a sweep store under checksums too.

Stores are written by the real runtime (``run_sweep`` of the toy oscillator,
``tests/toybatch.py``) and damaged on disk the way it happens: a coordinate's
chunk deleted or overwritten, an array's ``zarr.json`` deleted, the record
itself rewritten.  ``mechsweep status`` (quick and ``--verify``) must report
each, a resume must write damaged coordinates again from the sweep (they are
derived data) and refuse damaged metadata with the fix.
"""

import json
import os

import numpy as np
import pytest
import xarray as xr
import zarr

from solver.errors import InputError
from sweep import store
from sweep.template_record import TEMPLATE_ARRAY, check_template, template_files
from test_store_integrity import SPEC, overwrite_bytes, resume_toy, status_cli, toy_store


def test_a_new_store_records_its_coordinates_and_metadata(tmp_path):
    path = toy_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(path), mode="r")
    files = template_files(group)
    assert {"zarr.json", "omega/zarr.json", "omega/c/0", "zeta/c/0", "time/c/0", "x/zarr.json",
            "status/zarr.json"} <= set(files)
    assert not any(f.startswith(("x/c/", "status/c/", "batch_commit/c/", f"{TEMPLATE_ARRAY}/c")) for f in files)
    record = json.loads(str(group[TEMPLATE_ARRAY][()]))
    assert record["format"] == 1 and sorted(record["files"]) == files
    assert check_template(group) == []
    assert store.check_store(path, "decode").ok


def test_a_new_stores_empty_text_and_time_arrays_have_their_chunks_and_no_chunk_written(tmp_path):
    from toybatch import ToyContext, grid_spec

    spec = grid_spec(np.linspace(1.0, 2.0, 50), [0.1, 0.5], batch=3)             # 34 batches
    path = tmp_path / "s.zarr"
    store.create_template(path, spec.hash, spec.points, ToyContext().schema, {}, 3)
    group = zarr.open_group(str(path), mode="r")
    consolidated = zarr.open_consolidated(str(path), mode="r")
    for name, chunks, fill in [("failure_reason", (3,), ""), ("batch_message", (1,), ""),
                               ("batch_seconds", (1,), np.nan), ("batch_commit", (32,), "")]:
        for g in (group, consolidated):
            assert g[name].chunks == chunks and g[name].shape == ((100,) if name == "failure_reason" else (34,))
        assert not (path / name / "c").exists()
        np.testing.assert_array_equal(group[name][:], np.full(group[name].shape, fill, dtype=group[name].dtype))
    assert store.check_store(path, "decode").ok
    # What the driver groups a new store's tasks by before the template is written.
    assert group["batch_commit"].chunks == (store.commit_chunk_length(34),)
    assert store.commit_chunk_length(34) == 32 and store.commit_chunk_length(5) == 5


def _metadata(path):
    """Every array's and the group's zarr.json, the consolidated copy included, and every file's bytes but those."""
    meta, files = {}, {}
    for root, _, names in os.walk(path):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), path)
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            if name == "zarr.json":
                doc = json.loads(data)
                doc.get("attributes", {}).pop("created", None)
                for entry in doc.get("consolidated_metadata", {}).get("metadata", {}).values():
                    entry.get("attributes", {}).pop("created", None)
                meta[rel] = doc
            else:
                files[rel] = data
    return meta, files


def test_a_template_has_the_metadata_and_files_xarray_writes_for_the_same_dataset(tmp_path):
    # The template is written with zarr directly; xarray's to_zarr of the same Dataset (with
    # text coordinates, several dims, swept names out of alphabetical order) is the reference.
    from sweep.store.template import _template, _template_arrays, _write_template
    from toybatch import ToyContext

    schema = ToyContext().schema
    schema.coords["mode"] = np.array(["slow", "fast"])
    schema.variables["x_modes"] = ("time", "mode")
    points = {"zeta": np.linspace(0.1, 0.5, 7), "omega": np.linspace(1.0, 2.0, 7)}
    attrs = {"title": "a toy", "nested": {"a": [1, 2]}}
    arrays, root_attrs = _template_arrays("hash", points, schema, attrs, 3, store_id="one")
    _write_template(arrays, root_attrs, tmp_path / "direct.zarr")
    ds, encoding = _template("hash", points, schema, attrs, 3, store_id="one")
    ds.to_zarr(str(tmp_path / "xarray.zarr"), mode="w-", compute=False, encoding=encoding, consolidated=True,
               zarr_format=3)
    direct, reference = _metadata(tmp_path / "direct.zarr"), _metadata(tmp_path / "xarray.zarr")
    assert sorted(direct[0]) == sorted(reference[0])
    for name in reference[0]:
        assert direct[0][name] == reference[0][name], name
    assert direct[1] == reference[1]
    # Both made within the same second or not: their creation times may differ by one.
    direct_ds, reference_ds = (xr.open_zarr(tmp_path / name).load() for name in ("direct.zarr", "xarray.zarr"))
    made = [np.datetime64(ds.attrs.pop("created")[:19]) for ds in (direct_ds, reference_ds)]
    assert abs(made[0] - made[1]) <= np.timedelta64(1, "s")
    xr.testing.assert_identical(direct_ds, reference_ds)


@pytest.mark.parametrize("flag", [[], ["--verify"]])
def test_a_deleted_coordinate_chunk_is_reported_and_a_resume_writes_it_again(tmp_path, capsys, flag):
    path = toy_store(tmp_path / "s.zarr")
    reference = xr.open_zarr(path)["omega"].values.copy()
    os.remove(path / "omega" / "c" / "0")
    assert np.isnan(xr.open_zarr(path)["omega"].values).all()       # what a reader would get
    code, out, _ = status_cli(path, capsys, *flag)
    assert code == 1
    assert "store problem: omega/c/0: missing" in out
    assert "store problem: coordinates omega are derived from the sweep file: a resume writes them again" in out
    with pytest.warns(UserWarning, match="files written once are damaged"):
        store.open_store(path)
    summary = resume_toy(path, tmp_path / "log")
    assert summary.batches_run == []                                  # no batch was damaged
    np.testing.assert_array_equal(xr.open_zarr(path)["omega"].values, reference)
    assert status_cli(path, capsys, "--verify")[0] == 0


def test_a_flipped_coordinate_is_found_by_its_checksum_and_repaired(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    reference = xr.open_zarr(path)["time"].values.copy()
    overwrite_bytes(path / "time" / "c" / "0", offset=12)
    code, out, _ = status_cli(path, capsys)
    assert code == 1 and "store problem: time/c/0: changed since the template was written (checksum differs)" in out
    resume_toy(path, tmp_path / "log")
    np.testing.assert_array_equal(xr.open_zarr(path)["time"].values, reference)
    assert store.check_store(path, "decode").ok


def test_damaged_metadata_is_reported_and_a_resume_refuses_it_with_the_fix(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    os.remove(path / "steps" / "zarr.json")
    code, out, _ = status_cli(path, capsys)
    assert code == 1 and "store problem: steps/zarr.json: missing" in out
    assert ("store problem: the store's metadata is damaged and cannot be rebuilt: recompute the store with "
            "--overwrite, or into another --out path") in out
    with pytest.raises(InputError, match="the store's files written once are damaged: steps/zarr.json: missing"):
        resume_toy(path, tmp_path / "log")
    # --overwrite recomputes it.
    resume_toy(path, tmp_path / "log", mode="overwrite")
    assert store.check_store(path, "decode").ok


def test_a_record_that_names_other_files_is_damage_and_nothing_outside_is_read(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(path), mode="r+")
    record = json.loads(str(group[TEMPLATE_ARRAY][()]))
    record["files"]["../../outside"] = None
    group[TEMPLATE_ARRAY][()] = json.dumps(record)
    code, out, _ = status_cli(path, capsys)
    assert code == 1
    assert (f"store problem: {TEMPLATE_ARRAY}/c: the template record names other files than the store's "
            f"metadata lists") in out
    group[TEMPLATE_ARRAY][()] = "{not json"
    code, out, _ = status_cli(path, capsys)
    assert code == 1 and "the template record is unreadable (JSONDecodeError)" in out
