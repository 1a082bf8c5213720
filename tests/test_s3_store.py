"""Sweep stores on object storage: a real S3 API server (moto's server mode) on 127.0.0.1.

The same runs, checks, damage and resumes as on a local directory, with
``s3://`` URLs: the store written into S3 must equal the local one value for
value, ``status`` must find damage there, a resume must repair exactly the
damaged batches, and no credential may reach a store object or a message.
"""

import json

import numpy as np
import pytest
import zarr

from s3server import ACCESS_KEY, SECRET_KEY
from solver import status as st
from sweep import store
from sweep.location import StoreLocation
from test_store_integrity import SPEC, assert_same_store, counts, resume_toy, status_cli, toy_store
from toybatch import read_log

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return toy_store(tmp_path_factory.mktemp("ref") / "ref.zarr")


def every_object(server, url):
    """Key -> bytes of every object under ``url``."""
    fs = server.fs()
    root = url.removeprefix("s3://")
    return {key: fs.cat_file(key) for key in fs.find(root)}


def test_a_sweep_into_s3_equals_the_local_one_and_checks_clean(s3, reference, capsys):
    url = s3.url("toy.zarr")
    resume_toy(url, None, tag="first")
    assert_same_store(url, reference)
    for flags in ((), ("--verify",)):
        code, out, err = status_cli(url, capsys, *flags)
        assert code == 0 and err == ""
        assert counts(out) == {"success": 12, "max_steps": 3}
    ds = store.open_store(url)
    assert ds.sizes["point"] == 15 and (ds.status.values != st.PENDING).all()
    # Commit records carry the objects' ETags as their stamps.
    record = json.loads(str(zarr.open_group(url, mode="r")["batch_commit"][1]))
    size, stamp, digest = record["chunks"]["x/c/1/0"]
    assert isinstance(stamp, str) and stamp == s3.fs().info(f"{s3.bucket}/toy.zarr/x/c/1/0")["ETag"]


def test_commit_records_of_a_partial_last_chunk_in_s3_are_kept_across_runs(s3, tmp_path):
    # 40 one-point batches: records in chunks of 32 and 8 (the last chunk partial); the second chunk's
    # records are written by two runs, the second keeping the first's.
    from sweep.run import run_sweep
    from toybatch import ToyContext, grid_spec, serial_reference, toy_batch

    spec = grid_spec(np.linspace(1.0, 4.0, 20), [0.1, 0.5], batch=1)
    url = s3.url(f"{tmp_path.name}/partial.zarr")
    ctx = ToyContext(omega_max=3.5)
    first = run_sweep(spec, toy_batch, ctx, url, workers=0, progress=False)
    assert zarr.open_group(url, mode="r")["batch_commit"].chunks == (store.COMMIT_GROUP,) == (32,)
    group = zarr.open_group(url, mode="r+")
    group["batch_commit"][36] = ""                               # batch 36 never committed
    again = run_sweep(spec, toy_batch, ctx, url, workers=0, progress=False)
    assert sorted(first.batches_run) == list(range(40)) and again.batches_run == [36]
    check = store.check_store(url, "decode")
    assert check.ok and check.done == list(range(40))
    np.testing.assert_array_equal(store.open_store(url).status.values, serial_reference(spec, ctx)["status"])


def test_no_credential_is_written_into_the_store(s3):
    url = s3.url("secret.zarr")
    resume_toy(url, None)
    objects = every_object(s3, url)
    assert len(objects) > 40
    for key, data in objects.items():
        assert ACCESS_KEY.encode() not in data and SECRET_KEY.encode() not in data, key


@pytest.mark.parametrize("damage, report", [
    ("delete", "batch 1 (points 4-7): chunk x/c/1/0 missing"),
    ("rewrite", "batch 1 (points 4-7): chunk x/c/1/0 corrupt: checksum differs from the commit record"),
])
def test_damage_in_s3_is_found_and_a_resume_repairs_exactly_it(s3, reference, tmp_path, capsys,
                                                                damage, report):
    url = s3.url(f"damage-{damage}.zarr")
    log = str(tmp_path / "log")
    resume_toy(url, log, tag="first")
    fs, key = s3.fs(), f"{s3.bucket}/damage-{damage}.zarr/x/c/1/0"
    if damage == "delete":
        fs.rm_file(key)
    else:
        data = bytearray(fs.cat_file(key))
        data[8:12] = b"\xde\xad\xbe\xef"          # same size: only the ETag and checksum tell
        fs.pipe_file(key, bytes(data))
    code, out, _ = status_cli(url, capsys)           # the quick check: sizes and ETags
    assert code == 1 and report in out
    summary = resume_toy(url, log)
    assert summary.batches_run == [1]
    assert [b for tag, b, _ in read_log(log, SPEC) if tag == "resume"] == [1]
    assert status_cli(url, capsys, "--verify")[0] == 0
    assert_same_store(url, reference)


def test_retry_failed_on_s3_reruns_only_the_batch_with_failed_points(s3, reference, tmp_path):
    url, log = s3.url("retry.zarr"), str(tmp_path / "log")
    resume_toy(url, log, tag="first")
    summary = resume_toy(url, log, mode="retry-failed")
    assert summary.batches_run == [3]                       # omega 5 > omega_max fails there
    assert [b for tag, b, _ in read_log(log, SPEC) if tag == "resume"] == [3]
    assert_same_store(url, reference)


def test_overwrite_replaces_an_s3_store_and_a_location_joins_like_a_path(s3, reference):
    url = s3.url("again.zarr")
    resume_toy(url, None)
    summary = resume_toy(url, None, mode="overwrite")
    assert sorted(summary.batches_run) == [0, 1, 2, 3]
    assert_same_store(url, reference)
    where = StoreLocation(url)
    assert str(where / "N=3") == url + "/N=3" and str((where / "N=3").parent) == url
    assert where.name == "again.zarr" and where.is_store() and (where / "x").exists("zarr.json")


# Kills of the driver and of a worker during a sweep into S3 are tests/test_run_dask.py's,
# parametrized over local and S3 stores.


# ------------------------------------------------------------ the command line

def test_the_cli_sweeps_into_s3_checks_it_and_reads_it_back(s3, tmp_path, capsys):
    from pendulum_sweep import write_pendulum_sweep
    from sweep.cli.app import main

    sweep_file = write_pendulum_sweep(tmp_path)
    url = s3.url("cli/pendulum.zarr")
    code = main(["sweep", str(sweep_file), "--out", url, "--workers", "1"])
    out, err = capsys.readouterr()
    assert code == 1, err                          # the two designs with x0 > L cannot assemble
    assert ACCESS_KEY not in out + err and SECRET_KEY not in out + err
    fs = s3.fs()
    assert fs.exists(f"{s3.bucket}/cli/pendulum.zarr/summary.png")
    assert not fs.exists(f"{s3.bucket}/cli/.pendulum.zarr.lease")       # given back
    assert main(["status", "--verify", url]) == 0
    report = capsys.readouterr().out
    assert counts(report) == {"success": 4, "no_assembly": 2}
    ds = store.open_store(url)
    assert ds.sizes["point"] == 6 and ds.sizes["time"] == 21
    ok = ds.status.values == st.SUCCESS
    assert np.isfinite(ds["y_max"].values[ok]).all() and np.isnan(ds["y_max"].values[~ok]).all()
    # Run again: everything is done, nothing runs; a missing bucket is refused by name.
    assert main(["sweep", str(sweep_file), "--out", url, "--workers", "1"]) == 1
    code = main(["sweep", str(sweep_file), "--out", "s3://no-such-bucket/p.zarr"])
    err = capsys.readouterr().err
    assert code == 2 and "the bucket 'no-such-bucket' does not exist" in err
