"""Store integrity: pending fill value, per-batch commit records, ``status --verify``, repair.

Every store here is written by the real runtime (``run_sweep`` and
``write_batch`` into Zarr on disk): the toy oscillator (``tests/toybatch.py``,
milliseconds per store) for the damage cases, and the pendulum sweep
(``tests/pendulum_sweep.py``, through ``run_sweep_file`` and the ``mechsweep``
command line) end to end. Damage is done the way it happens: chunk files
deleted, truncated or overwritten on disk. After a resume, a store must equal
one written by an uninterrupted run.
"""

import hashlib
import json
import os
import shutil
import time
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

from pendulum_sweep import write_pendulum_sweep
from solver import status as st
from solver.errors import InputError
from sweep import store
from sweep.cli.app import main
from sweep.run import run_sweep
from sweep.cli.sweep_command import run_sweep_file
from toybatch import ToyContext, grid_spec, read_log, toy_batch

# 15 points in batches of 4: points 0-3, 4-7, 8-11, 12-14. Batch 3 (omega 5 >
# omega_max) fails with max_steps: its data chunks are all NaN.
OMEGAS = [1.0, 2.0, 3.0, 4.0, 5.0]
ZETAS = [0.1, 0.5, 0.9]
SPEC = grid_spec(OMEGAS, ZETAS, 4)
# Results that do not depend on when or how fast a store was written (the
# template record checksums the root metadata, which holds the creation time).
TIMELESS = ("batch_seconds", "batch_commit", "template_commit")


def toy_store(path, log=None, tag="first"):
    """A complete toy store written by the runtime; its path."""
    ctx = ToyContext(omega_max=4.5, log=log, tag=tag)
    run_sweep(SPEC, toy_batch, ctx, path, workers=0, progress=False)
    return path


def resume_toy(path, log, tag="resume", **kw):
    return run_sweep(SPEC, toy_batch, ToyContext(omega_max=4.5, log=log, tag=tag), path,
                     workers=0, progress=False, **kw)


def assert_same_store(path, ref):
    """Every result variable and attribute equal (NaN equal to NaN)."""
    a, b = xr.open_zarr(path), xr.open_zarr(ref)
    assert set(a.variables) == set(b.variables)
    for name in a.variables:
        if name not in TIMELESS:
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
    keep = lambda attrs: {k: v for k, v in attrs.items() if k not in ("created", "store_id")}  # noqa: E731
    assert keep(a.attrs) == keep(b.attrs)


def status_cli(path, capsys, *flags):
    """``mechsweep status [flags] PATH``: (exit code, stdout, stderr)."""
    code = main(["status", *flags, str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def counts(report: str) -> dict[str, int]:
    """The status table of a report: name -> points."""
    table = report.split("\nstatus:\n", 1)[1]
    out = {}
    for line in table.splitlines():
        if not line.startswith("  ") or line.startswith("  batch"):
            break
        name, n = line.split()[:2]
        out[name] = int(n)
    return out


def overwrite_bytes(file, offset=8, data=b"\xde\xad\xbe\xef"):
    """Corrupt a chunk in place, keeping its size (as a bad disk or a stray write would)."""
    before = os.stat(file).st_mtime_ns
    with open(file, "r+b") as f:
        f.seek(offset)
        f.write(data)
    # File times come from a coarse clock (a few ms): a write within it keeps the
    # commit's modification time, which no real later write would.
    if os.stat(file).st_mtime_ns == before:
        os.utime(file, ns=(before + 1_000_000, before + 1_000_000))


# --------------------------------------------------------------- the format

def test_status_fill_value_is_pending_and_every_chunk_of_a_batch_is_written(tmp_path):
    path = toy_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(path), mode="r")
    assert group["status"].fill_value == st.PENDING == -1
    assert group["steps"].fill_value == -1
    flags = dict(zip(group["status"].attrs["flag_meanings"].split(),
                     group["status"].attrs["flag_values"]))
    assert flags["pending"] == st.PENDING and flags["success"] == st.SUCCESS
    assert group.attrs["mechsweep_store_format"] == 4
    assert group["batch_commit"].chunks == (4,)        # the records of min(COMMIT_GROUP, 4 batches) share a chunk
    # Batch 3 failed as a whole: its all-NaN chunks are still files, so that a
    # missing file always means a lost chunk.
    assert (path / "x" / "c" / "3" / "0").is_file() and (path / "x_end" / "c" / "3").is_file()
    assert (path / "failure_time" / "c" / "3").is_file() and (path / "failure_reason" / "c" / "3").is_file()
    # A status chunk that is lost reads as pending, not as success (format 1 read 0).
    os.remove(path / "status" / "c" / "1")
    assert store.read_status(path)[4:8].tolist() == [st.PENDING] * 4


def test_commit_record_holds_the_checksums_of_the_chunks_on_disk_and_the_time(tmp_path):
    before = time.time()
    path = toy_store(tmp_path / "s.zarr")
    record = json.loads(str(zarr.open_group(str(path), mode="r")["batch_commit"][1]))
    keys = ["batch_message/c/1", "batch_seconds/c/1", "failure_reason/c/1", "failure_time/c/1",
            "pos/c/1/0/0", "status/c/1", "steps/c/1", "x/c/1/0", "x_end/c/1"]
    assert sorted(record["chunks"]) == keys
    lines = ""
    for key in keys:
        data = (path / key).read_bytes()
        size, mtime, digest = record["chunks"][key]
        assert (size, digest) == (len(data), hashlib.sha256(data).hexdigest())
        assert mtime == (path / key).stat().st_mtime_ns
        lines += f"{key} {digest}\n"
    assert record["checksum"] == "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
    done = np.datetime64(record["time"].replace("+00:00", ""), "us").astype(float) / 1e6
    assert before <= done <= time.time()


def test_a_batch_is_not_done_until_its_commit_record_is_written(tmp_path, monkeypatch, capsys):
    path = tmp_path / "s.zarr"
    log = str(tmp_path / "log")

    def crash(*args):
        raise KeyboardInterrupt       # the driver dies between status and commit record

    monkeypatch.setattr(store.commit, "write_commits", crash)
    with pytest.raises(KeyboardInterrupt):
        resume_toy(path, log, tag="first")
    monkeypatch.undo()
    assert store.read_status(path)[:4].tolist() == [st.SUCCESS] * 4   # status got there...
    check = store.check_store(path)
    # ...but batch 0 is not done: written, never committed, it is pending (not damage).
    assert check.done == [] and check.pending == [0, 1, 2, 3] and check.damaged == {}
    code, out, _ = status_cli(path, capsys)
    assert code == 0 and counts(out) == {"pending": 15}

    summary = resume_toy(path, log)
    assert sorted(summary.batches_run) == [0, 1, 2, 3]
    assert status_cli(path, capsys, "--verify")[0] == 0


# ------------------------------------------------------------ the damage cases

# name -> (the batch it damages, how, the chunk the check names, what it says)
DAMAGE = {
    "status chunk deleted": (1, lambda p: os.remove(p / "status/c/1"), "status/c/1", "missing"),
    "data chunk deleted": (1, lambda p: os.remove(p / "x/c/1/0"), "x/c/1/0", "missing"),
    "data chunk corrupted": (2, lambda p: overwrite_bytes(p / "pos/c/2/0/0"), "pos/c/2/0/0",
                             "corrupt: checksum differs from the commit record"),
    "data chunk truncated": (0, lambda p: (p / "x_end/c/0").write_bytes(b"\x28\xb5"), "x_end/c/0",
                             "corrupt: 2 bytes, committed"),
    "failed batch's NaN chunk deleted": (3, lambda p: os.remove(p / "pos/c/3/0/0"), "pos/c/3/0/0",
                                         "missing"),
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run."""
    return toy_store(tmp_path_factory.mktemp("ref") / "ref.zarr")


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_batch_is_reported_by_status_and_verify_and_resume_repairs_exactly_it(
        case, reference, tmp_path, capsys):
    batch, damage, key, what = DAMAGE[case]
    log = str(tmp_path / "log")
    path = toy_store(tmp_path / "s.zarr", log=log)
    healthy = counts(status_cli(path, capsys)[1])
    damage(path)
    sl = store.batch_slices(15, 4)[batch]
    where = f"batch {batch} (points {sl.start}-{sl.stop - 1}): chunk {key} {what}"

    # status: the batch's points are damaged, not counted by the status they may still hold.
    code, out, err = status_cli(path, capsys)
    assert code == 1 and err == ""
    assert where in out
    lost = sl.stop - sl.start
    expect = dict(healthy)
    ran = "max_steps" if batch == 3 else "success"
    expect[ran] -= lost
    expect = {k: v for k, v in expect.items() if v} | {"damaged": lost}
    assert counts(out) == expect
    assert f"batches:    3 done, 0 pending, 1 damaged, 4 in all" in out
    assert f"mechsweep sweep SWEEP.yaml --out {path} --resume" in out

    # status --verify: reads every chunk, names the batch and the chunk.
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 1 and where in out
    assert "every chunk read, checksummed and decoded" in out

    # resume: exactly that batch runs again, and the store equals an uninterrupted run.
    summary = resume_toy(path, log)
    assert summary.batches_run == [batch]
    assert [b for tag, b, _ in read_log(log, SPEC) if tag == "resume"] == [batch]
    assert list(summary.batches_damaged) == [batch]
    assert "1 batches failed verification against their commit records" in str(summary)
    assert_same_store(path, reference)
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 0 and counts(out) == healthy


def test_corruption_that_keeps_size_and_time_is_found_by_verify_and_resume(reference, tmp_path,
                                                                            capsys):
    # Bit rot: same size, modification time as committed. The quick check of
    # plain `status` trusts an untouched file (one stat per chunk); reading
    # the chunks finds it.
    log = str(tmp_path / "log")
    path = toy_store(tmp_path / "s.zarr", log=log)
    chunk = path / "x" / "c" / "2" / "0"
    stat = chunk.stat()
    overwrite_bytes(chunk)
    os.utime(chunk, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert status_cli(path, capsys)[0] == 0
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 1
    assert "batch 2 (points 8-11): chunk x/c/2/0 corrupt: checksum differs" in out
    summary = resume_toy(path, log)
    assert summary.batches_run == [2]
    assert_same_store(path, reference)


def test_a_chunk_undecodable_under_a_matching_checksum_is_found_by_verify(tmp_path, capsys):
    # A writer that committed garbage: the checksum matches, decoding fails.
    path = toy_store(tmp_path / "s.zarr")
    (path / "x" / "c" / "1" / "0").write_bytes(b"not zstd at all")
    store.commit.write_commit(zarr.open_group(str(path), mode="r+"), 1)
    assert status_cli(path, capsys)[0] == 0
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 1
    assert "batch 1 (points 4-7): array x: a chunk of the batch is undecodable" in out


def test_several_damaged_batches_and_a_lost_commit_record(reference, tmp_path, capsys):
    log = str(tmp_path / "log")
    path = toy_store(tmp_path / "s.zarr", log=log)
    zarr.open_group(str(path), mode="r+")["batch_commit"][0] = ""
    os.remove(path / "steps" / "c" / "3")
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 1
    assert "batch 3 (points 12-14): chunk steps/c/3 missing" in out
    damaged = out.split("damaged batches")[1]
    assert "batch 0" not in damaged and "batch 1" not in damaged   # a lost record: pending
    assert counts(out)["pending"] == 4
    summary = resume_toy(path, log)
    assert sorted(summary.batches_run) == [0, 3]
    assert_same_store(path, reference)


def test_a_lost_chunk_of_commit_records_leaves_its_batches_pending_and_a_resume_runs_them(reference, tmp_path,
                                                                                         capsys):
    log = str(tmp_path / "log")
    path = toy_store(tmp_path / "s.zarr", log=log)
    os.remove(path / "batch_commit" / "c" / "0")            # the records of batches 0-3
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 0 and "damaged" not in out and counts(out)["pending"] == 15
    summary = resume_toy(path, log)
    assert sorted(summary.batches_run) == [0, 1, 2, 3]
    assert_same_store(path, reference)


def test_an_undecodable_chunk_of_commit_records_is_damage_to_each_of_its_batches_and_is_rewritten(
        reference, tmp_path, capsys):
    log = str(tmp_path / "log")
    path = toy_store(tmp_path / "s.zarr", log=log)
    (path / "batch_commit" / "c" / "0").write_bytes(b"not zstd at all")
    code, out, _ = status_cli(path, capsys)
    assert code == 1
    assert all(f"batch {i} (points" in out.split("damaged batches (4;")[1] for i in range(4))
    summary = resume_toy(path, log)
    assert sorted(summary.batches_run) == [0, 1, 2, 3]
    assert_same_store(path, reference)
    assert status_cli(path, capsys, "--verify")[0] == 0


def test_retry_failed_also_repairs_damaged_batches(tmp_path, capsys):
    log = str(tmp_path / "log")
    path = toy_store(tmp_path / "s.zarr", log=log)
    os.remove(path / "x" / "c" / "0" / "0")
    summary = resume_toy(path, log, mode="retry-failed")
    assert sorted(summary.batches_run) == [0, 3]       # damaged 0, failed points in 3
    assert status_cli(path, capsys, "--verify")[0] == 0


@pytest.mark.parametrize("text, why", [
    ("{not json", "commit record is not valid JSON"),
    ('{"format": 1}', "commit record is not a format-1 record"),
    ('{"format": 1, "checksum": "", "chunks": {"../../outside": [1, 1, "' + "0" * 64 + '"]}}',
     "commit record lists other chunks than the batch has"),
])
def test_a_malformed_commit_record_is_damage_and_names_no_file_outside(text, why, tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    zarr.open_group(str(path), mode="r+")["batch_commit"][2] = text
    code, out, _ = status_cli(path, capsys)
    assert code == 1 and f"batch 2 (points 8-11): {why}" in out


def test_a_tampered_chunk_table_fails_its_own_batch_checksum(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(path), mode="r+")
    record = json.loads(str(group["batch_commit"][1]))
    record["chunks"]["x/c/1/0"][2] = "f" * 64
    group["batch_commit"][1] = json.dumps(record)
    code, out, _ = status_cli(path, capsys)
    assert code == 1
    assert "batch 1 (points 4-7): commit record's batch checksum does not match" in out


def test_a_partly_run_store_verifies_clean_and_names_no_damage(tmp_path, capsys):
    path = tmp_path / "s.zarr"
    store.create_template(path, SPEC.hash, SPEC.points, ToyContext().schema, {}, SPEC.batch)
    sl = slice(4, 8)
    store.write_batch(path, sl, toy_batch({k: v[sl] for k, v in SPEC.points.items()}, ToyContext()))
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 0
    assert counts(out) == {"pending": 11, "success": 4}
    assert "batches:    1 done, 3 pending, 4 in all" in out and "damaged" not in out


def test_every_chunk_carries_a_crc32c_that_any_zarr_reader_checks(tmp_path):
    path = toy_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(path), mode="r")
    for name in ("x", "status", "batch_commit", "omega"):
        assert [c.to_dict()["name"] for c in group[name].metadata.codecs][-1] == "crc32c"
    chunk = path / "x" / "c" / "1" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01                 # one flipped bit, no commit record involved
    chunk.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="[Cc]hecksum"):
        xr.open_zarr(path)["x"].values


# ----------------------------------------------------- stores before this change

FORMAT_2 = os.path.join(os.path.dirname(__file__), "data", "store_format_2.zarr")


def test_a_store_of_format_2_is_read_checked_and_resumed(reference, tmp_path, capsys):
    # Written by the previous release (batch_message and batch_seconds shared one chunk,
    # no CRC32C), its last batch left pending as by an interrupted run.
    path = tmp_path / "old.zarr"
    shutil.copytree(FORMAT_2, path)
    check = store.check_store(path, "decode")
    assert check.done == [0, 1, 2] and check.pending == [3] and check.ok
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 0 and counts(out) == {"success": 12, "pending": 3}
    summary = resume_toy(path, str(tmp_path / "log"))
    assert summary.batches_run == [3]
    group = zarr.open_group(str(path), mode="r")
    assert group.attrs["mechsweep_store_format"] == 2 and group["batch_message"].chunks == (4,)
    assert sorted(json.loads(str(group["batch_commit"][3]))["chunks"]) == [
        "pos/c/3/0/0", "status/c/3", "steps/c/3", "x/c/3/0", "x_end/c/3"]
    assert status_cli(path, capsys, "--verify")[0] == 0
    new, old = xr.open_zarr(reference), xr.open_zarr(path)
    for name in ("status", "steps", "batch_message"):
        np.testing.assert_array_equal(old[name].values, new[name].values)
    # The first three batches' series were computed by the numpy of the release that wrote the
    # store: numpy's vectorised cos and exp may differ from today's in the last bit.
    for name in ("x", "pos", "x_end"):
        a, b = old[name].values, new[name].values
        assert np.array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_max_ulp(np.nan_to_num(a), np.nan_to_num(b), maxulp=2)
    np.testing.assert_array_equal(old["x"].values[12:], new["x"].values[12:])   # the batch resumed here



def set_format(path, fmt):
    """Rewrite the store's format attribute (and the consolidated metadata that repeats it)."""
    zarr.open_group(str(path), mode="r+").attrs["mechsweep_store_format"] = fmt
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        zarr.consolidate_metadata(str(path))


def make_format_1(path):
    """Turn a store into one as written before commit records (format 1)."""
    shutil.rmtree(path / "batch_commit")
    set_format(path, 1)


def test_store_without_commit_records_gets_a_clear_message_not_a_traceback(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    make_format_1(path)
    code, out, err = status_cli(path, capsys)
    assert code == 0 and err == ""
    assert counts(out) == {"success": 12, "max_steps": 3}
    assert "integrity:  NOT VERIFIABLE" in out and "store format 1" in out

    code, out, err = status_cli(path, capsys, "--verify")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"mechsweep: error: {path}: was written by an older mechsweep "
                          f"(store format 1) without commit records")
    assert "--overwrite" in err

    with pytest.raises(InputError, match="store format 1.*Run its sweep again with --overwrite"):
        resume_toy(path, str(tmp_path / "log"))
    summary = resume_toy(path, str(tmp_path / "log"), mode="overwrite")
    assert sorted(summary.batches_run) == [0, 1, 2, 3]
    assert status_cli(path, capsys, "--verify")[0] == 0


def make_format_2(path):
    """Turn a store into one as written before failure_time and failure_reason (format 2).

    The arrays go, and every commit record and the template record are
    written again as format 2 wrote them: without those arrays' files.
    """
    from sweep.template_record import write_template_record

    for name in store.FAILURE_ARRAYS:
        shutil.rmtree(path / name)
    set_format(path, 2)
    group = zarr.open_group(str(path), mode="r+")
    for index in range(len(store.batch_slices(SPEC.n_points, SPEC.batch))):
        if str(group["batch_commit"][index]):
            store.commit.write_commit(group, index)
    write_template_record(path)


def test_a_store_of_format_2_is_read_verified_reported_and_resumed_without_failure_variables(tmp_path,
                                                                                             capsys):
    path = toy_store(tmp_path / "s.zarr")
    make_format_2(path)
    record = json.loads(str(zarr.open_group(str(path), mode="r")["batch_commit"][3]))
    assert not [key for key in record["chunks"] if key.startswith("failure_")]
    code, out, err = status_cli(path, capsys, "--verify")
    assert code == 0 and err == "" and "damaged" not in out
    assert counts(out) == {"success": 12, "max_steps": 3}
    assert "failures by reason" not in out                   # format 2 kept no reasons
    ds = store.open_store(path)
    assert "failure_time" not in ds and "failure_reason" not in ds
    failed = ds.sweep.failures()                               # the accessor fills them in
    assert failed.sizes["point"] == 3 and np.isnan(failed["failure_time"].values).all()
    assert failed["failure_reason"].values.tolist() == ["", "", ""]
    # A retry rewrites its batch as format 2 has it: no failure arrays, commit records still valid.
    summary = resume_toy(path, str(tmp_path / "log"), mode="retry-failed")
    assert summary.batches_run == [3]
    assert not (path / "failure_time").exists()
    assert status_cli(path, capsys, "--verify")[0] == 0


def make_format_3(path):
    """Turn a store into one as format 3 wrote it: one chunk of ``batch_commit`` per batch."""
    from sweep.template_record import write_template_record

    group = zarr.open_group(str(path), mode="r+")
    old = group["batch_commit"]
    texts, attrs, compressors = [str(t) for t in old[:]], dict(old.attrs), old.compressors
    del group["batch_commit"]
    records = group.create_array("batch_commit", shape=(len(texts),), chunks=(1,), dtype=str, fill_value="",
                                 compressors=compressors, dimension_names=["batch"], attributes=attrs)
    records[:] = np.array(texts, dtype=object)
    set_format(path, 3)
    write_template_record(path)


def test_a_store_of_format_3_keeps_one_commit_record_a_chunk_when_resumed(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    make_format_3(path)
    assert sorted(os.listdir(path / "batch_commit" / "c")) == ["0", "1", "2", "3"]
    assert status_cli(path, capsys, "--verify")[0] == 0
    zarr.open_group(str(path), mode="r+")["batch_commit"][2] = ""          # batch 2 never committed
    summary = resume_toy(path, str(tmp_path / "log"))
    assert summary.batches_run == [2]
    group = zarr.open_group(str(path), mode="r")
    assert group.attrs["mechsweep_store_format"] == 3 and group["batch_commit"].chunks == (1,)
    assert status_cli(path, capsys, "--verify")[0] == 0


def test_the_failure_variables_are_committed_with_their_batch(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    ds = store.open_store(path)
    # Batch 3 (omega 5 > omega_max): max_steps points whose batch function gave no time, reason
    # or message: the status's description stands in.
    assert ds["failure_reason"].values.tolist() == [""] * 12 + ["stopped at the maximum number of steps"] * 3
    assert np.isnan(ds["failure_time"].values).all()
    overwrite_bytes(path / "failure_reason" / "c" / "3", offset=0, data=b"\xff\xff")
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 1
    assert "batch 3 (points 12-14): chunk failure_reason/c/3 corrupt: checksum differs from the commit record" in out


def test_a_store_of_a_newer_format_is_refused_by_name(tmp_path, capsys):
    path = toy_store(tmp_path / "s.zarr")
    set_format(path, 9)
    code, _, err = status_cli(path, capsys)
    assert code == 2 and "store format 9" in err and "Use a newer mechsweep" in err


# ------------------------------------------------ the real pipeline, end to end

@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    """The pendulum sweep file and a store of an uninterrupted run."""
    folder = tmp_path_factory.mktemp("pendulum")
    sweep_file = write_pendulum_sweep(folder)
    ref = folder / "ref.zarr"
    run_sweep_file(sweep_file, str(ref), workers=0, progress=False, plot=False, echo=lambda s: None)
    return sweep_file, ref


def test_pendulum_store_damaged_then_resumed_equals_an_uninterrupted_run(pendulum, tmp_path,
                                                                         capsys):
    sweep_file, ref = pendulum
    path = tmp_path / "p.zarr"
    shutil.copytree(ref, path)          # copies get new modification times: still verified
    assert status_cli(path, capsys, "--verify")[0] == 0
    os.remove(path / "status" / "c" / "0")                 # batch 0: L = 1.0
    overwrite_bytes(path / "y" / "c" / "1" / "0", offset=12)   # batch 1: L = 1.2
    code, out, _ = status_cli(path, capsys)
    assert code == 1 and "success" not in counts(out) and counts(out)["damaged"] == 6
    code, out, _ = status_cli(path, capsys, "--verify")
    assert code == 1
    assert "batch 0 (points 0-2): chunk status/c/0 missing" in out
    assert "batch 1 (points 3-5): chunk y/c/1/0 corrupt" in out

    lines = []
    summary = run_sweep_file(sweep_file, str(path), workers=0, mode="resume", progress=False,
                             plot=False, echo=lines.append)
    assert sorted(summary.batches_run) == [0, 1]
    assert "2 batches failed verification" in lines[0]
    assert_same_store(path, ref)
    assert status_cli(path, capsys, "--verify")[0] == 0


def test_pendulum_store_of_format_1_resumed_from_the_command_line(pendulum, tmp_path, capsys):
    sweep_file, ref = pendulum
    path = tmp_path / "old.zarr"
    shutil.copytree(ref, path)
    make_format_1(path)
    code = main(["sweep", str(sweep_file), "--out", str(path), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"{path}: was written by an older mechsweep (store format 1)" in err


def test_open_store_shows_a_damaged_batch_as_pending_and_warns(tmp_path):
    """Post-analysis reads the verified status: a deleted data chunk's NaNs never pass for success."""
    path = toy_store(tmp_path / "s.zarr")
    batch, damage, _, _ = DAMAGE["data chunk deleted"]
    sl = store.batch_slices(15, 4)[batch]
    assert (store.open_store(path).status.values[sl] == st.SUCCESS).all()
    damage(path)
    with pytest.warns(UserWarning, match=rf"batches {batch} no longer match their commit records"):
        codes = store.open_store(path).status.values
    assert (codes[sl] == st.PENDING).all()
    others = np.ones(15, bool)
    others[sl] = False
    assert (codes[others] != st.PENDING).all()
    # The stored array is untouched (a resume reads and repairs it); only the view is verified.
    assert (store.open_store(path, verify=None).status.values[sl] == st.SUCCESS).all()
