"""Plain Zarr region writes with commit records against Icechunk, side by side (issue "Sweeps at
cluster scale", item 1).

The same synthetic batches, shaped like a sweep's results, go into two stores with the same arrays
and the same chunking (one chunk per batch in every per-point array, the same codecs: Zstandard
and CRC32C):

(a) mechsweep's store: :func:`sweep.store.create_template`, then per batch what a Dask worker does
    (:func:`sweep.store.write_batch_data` on :func:`sweep.store.writer_group`: write the chunks and
    SHA-256 the bytes written; the
    :class:`~sweep.store.WrittenBatch` pickled as a task result is) and what the driver does
    (:meth:`sweep.store.BatchCommitter.commit`: one commit record).
(b) an Icechunk repository (local filesystem storage) holding the same template, committed once;
    per batch the driver forks a session (``Session.fork``) and pickles the fork as a task argument
    is; the "worker" unpickles it, writes the batch's regions through Zarr on ``fork.store`` and
    pickles the fork back; the driver unpickles it and merges it (``Session.merge``), and commits
    every K batches (``--commit-every``: a commit per batch, and one per K), then opens a new
    writable session for the next forks.

Everything runs in this one process, batch after batch: "worker ms" and "driver ms" are the two
parts of one batch measured separately, and points/s is the points over the sum of both (no
overlap). In a real sweep the worker parts run in parallel on many workers, so the driver part
per batch bounds the rate one driver can feed: that bound is printed as well.

Per store it prints: worker and driver ms per batch (median, and the mean of the last 10 batches
for the driver, to show growth with the store's history), points/s, the store's size on disk and
number of files, the time to verify the whole store (mechsweep: ``check_store(path, "checksum")``
and ``"decode"``; both: reading back every array, which decodes every chunk and so checks its
CRC32C; Icechunk has no separate verification), and the number of snapshots.

Then, on small stores, what each keeps when a process dies (``os._exit`` in a child process):
in the middle of writing a batch, and between writing it and committing it; what a reader sees
afterwards and how the batch is redone. And what each notices when a committed chunk file is
later damaged (one byte changed) or deleted.

``--s3`` repeats the timing on a local S3 API server (moto's, ``tests/s3server.py``; needs the
``test`` extra) with fewer batches.

Install Icechunk first (an extra of this project; Icechunk 2.x needs Python >= 3.12, so on
Python 3.11 pip installs 1.x)::

    .venv/bin/pip install -e ".[bench-storage]"

Usage::

    .venv/bin/python workflows/benchmarks/bench_icechunk.py [--batches 50] [--batch 100]
        [--variables 10] [--commit-every 1,10] [--repeats 2] [--s3] [--s3-batches 20]
        [--dir DIR] [--quick] [--out workflows/benchmarks/results/icechunk.txt]
"""

from __future__ import annotations

import argparse
import datetime
import os
import pickle
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

try:
    import icechunk
except ImportError:
    sys.exit("bench_icechunk.py needs Icechunk, which is not installed: "
             "pip install -e \".[bench-storage]\" (or pip install icechunk)")

import zarr  # noqa: E402

from scale_batch import canned_result  # noqa: E402
from solver import status as st  # noqa: E402
from sweep import store  # noqa: E402

# Icechunk warns, once per storage, that its local-filesystem storage is not safe for concurrent
# commits (quoted in the report); only one process commits here.
icechunk.set_logs_filter("error")
warnings.filterwarnings("ignore", message="Consolidated metadata")

T = 101                      # output times
MB = 1024 ** 2


# ------------------------------------------------------------------ the batches

def make_schema(n_variables: int) -> store.Schema:
    """``n_variables`` float64 outputs, alternately ``(time,)`` and ``(time, axis)``."""
    variables = {f"v{i}": ("time",) if i % 2 == 0 else ("time", "axis") for i in range(n_variables)}
    return store.Schema(time=np.linspace(0.0, 2.0, T), variables=variables,
                        coords={"axis": np.array(["x", "y", "z"])})


def make_points(n_points: int) -> dict:
    return {"L2": np.linspace(0.98, 1.18, n_points)}


def batch_result(schema: store.Schema, n: int, index: int) -> store.BatchResult:
    """A successful batch: smooth trajectories of varied frequency and phase (ten distinct sets)."""
    result = canned_result(schema, n, seed=index % 10)
    result.seconds = 1.0
    return result


def batch_writes(schema: store.Schema, sl: slice, index: int, result: store.BatchResult):
    """The region writes of one batch, exactly those :func:`sweep.store.write_batch_data` makes."""
    n = sl.stop - sl.start
    codes = np.asarray(result.status, dtype=np.int8).reshape(n)
    bad = st.is_failure(codes)
    writes = []
    for name in schema.variables:
        value = np.array(result.data[name], dtype=np.float64).reshape((n,) + schema.shape(name))
        value[bad] = np.nan
        writes.append((name, sl, value))
    writes.append(("steps", sl, np.asarray(result.steps, dtype=np.int64).reshape(n)))
    writes += [("batch_message", slice(index, index + 1), np.array([str(result.message)], dtype=object)),
               ("batch_seconds", slice(index, index + 1), np.array([float(result.seconds)]))]
    return writes, codes


def batch_arrays(schema: store.Schema) -> list[str]:
    return [*schema.variables, "steps", "batch_message", "batch_seconds", "status"]


# ------------------------------------------------------------------ measuring

@dataclass
class Run:
    """One store written and verified."""

    name: str
    batch: int
    template_s: float = 0.0
    worker_ms: list = field(default_factory=list)
    driver_ms: list = field(default_factory=list)
    bytes: int = 0
    files: int = 0
    verify: dict = field(default_factory=dict)   # what -> seconds
    snapshots: int | None = None
    notes: list = field(default_factory=list)
    sent: list = field(default_factory=list)       # pickled bytes driver -> worker (beyond the task itself)
    returned: list = field(default_factory=list)   # pickled bytes worker -> driver

    @property
    def total_s(self) -> float:
        return (sum(self.worker_ms) + sum(self.driver_ms)) / 1e3

    @property
    def points_per_s(self) -> float:
        return len(self.worker_ms) * self.batch / self.total_s

    @property
    def driver_bound(self) -> float:
        """Points/s one driver could commit if workers were free: batch / mean driver time."""
        return self.batch / (statistics.fmean(self.driver_ms) / 1e3)


def disk_usage(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``: apparent sizes of regular files."""
    total = count = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(dirpath, f)).st_size
            count += 1
    return total, count


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def read_every_array(group: zarr.Group) -> int:
    """Read (and so decode) every array of a group; the number of elements read."""
    n = 0
    for _, array in group.arrays():
        n += np.asarray(array[...]).size
    return n


# ------------------------------------------------------------------ (a) mechsweep

def run_mechsweep(where, schema, n_batches: int, batch: int, s3=None) -> Run:
    """Template, then per batch ``write_batch_data`` (worker) and ``BatchCommitter.commit`` (driver)."""
    n_points = n_batches * batch
    run = Run("mechsweep: Zarr + commit records", batch)
    _, run.template_s = timed(store.create_template, where, "bench", make_points(n_points), schema,
                              {"title": "icechunk benchmark"}, batch)
    group = store.writer_group(str(where))               # a worker opens the store once, as sweep.run's do
    committer = store.BatchCommitter(str(where))         # the driver, once per run
    readback = []                                        # any read-back + SHA-256 of files, seconds
    original = store.write.chunk_table

    def chunk_table(*a, **kw):
        t = time.perf_counter()
        try:
            return original(*a, **kw)
        finally:
            readback.append(time.perf_counter() - t)
    store.write.chunk_table = chunk_table
    for index, sl in enumerate(store.batch_slices(n_points, batch)):
        result = batch_result(schema, batch, index)
        t0 = time.perf_counter()
        payload = pickle.dumps(store.write_batch_data(group, sl, result))    # worker: task result
        t1 = time.perf_counter()
        run.returned.append(len(payload))
        committer.commit(pickle.loads(payload))                              # driver
        t2 = time.perf_counter()
        run.worker_ms.append((t1 - t0) * 1e3)
        run.driver_ms.append((t2 - t1) * 1e3)
    store.write.chunk_table = original
    # A worker's group records the bytes it writes and checksums those: no file is read back.
    run.notes.append(f"worker ms of which reading chunks back + SHA-256: median "
                     f"{statistics.median(readback) * 1e3:.1f}" if readback else
                     "worker ms: the checksums from the bytes written, no chunk read back")
    if s3 is None:
        run.bytes, run.files = disk_usage(Path(where))
        for level in ("checksum", "decode"):
            check, seconds = timed(store.check_store, where, level)
            assert check.ok and len(check.done) == n_batches, (level, check.damaged, check.pending)
            run.verify[f"check_store {level}"] = seconds
    else:
        run.bytes, run.files = s3_usage(s3, where)
        check, seconds = timed(store.check_store, where, "checksum")
        assert check.ok and len(check.done) == n_batches
        run.verify["check_store checksum"] = seconds
    _, seconds = timed(read_every_array, zarr.open_group(str(where), mode="r"))
    run.verify["read every array"] = seconds
    return run


# ------------------------------------------------------------------ (b) icechunk

def icechunk_template(repo, schema, n_points: int, batch: int) -> None:
    """The same template as mechsweep's (same arrays, chunks, codecs, fill values), one commit."""
    ds, encoding = store.template._template("bench", make_points(n_points), schema,
                                            {"title": "icechunk benchmark"}, batch)
    session = repo.writable_session("main")
    ds.to_zarr(session.store, mode="w-", compute=False, encoding=encoding, consolidated=False,
               zarr_format=3)
    session.commit("template")


def icechunk_worker(payload: bytes, schema, sl: slice, index: int, result) -> bytes:
    """A Dask task's part: unpickle the fork, write the batch's regions in it, pickle it back."""
    fork = pickle.loads(payload)
    group = zarr.open_group(fork.store, mode="r+")
    arrays = store.write._open_arrays(group, batch_arrays(schema))
    writes, codes = batch_writes(schema, sl, index, result)
    store.write._write_chunks(arrays, writes)            # data first, then status, as mechsweep
    store.write._write_chunks(arrays, [("status", sl, codes)])
    return pickle.dumps(fork)


def run_icechunk(storage_fn, schema, n_batches: int, batch: int, commit_every: int,
                 where: Path | None = None, s3=None, prefix=None) -> Run:
    """Template commit, then per group of K batches: fork, write, merge; one commit per group."""
    n_points = n_batches * batch
    run = Run(f"icechunk: fork/merge, commit every {commit_every}", batch)
    t0 = time.perf_counter()
    repo = icechunk.Repository.create(storage_fn())
    icechunk_template(repo, schema, n_points, batch)
    run.template_s = time.perf_counter() - t0
    slices = store.batch_slices(n_points, batch)
    for first in range(0, len(slices), commit_every):
        group = range(first, min(first + commit_every, len(slices)))
        t0 = time.perf_counter()
        session = repo.writable_session("main")
        # Forks are made before any merge (a session with uncommitted changes cannot fork).
        payloads = [pickle.dumps(session.fork()) for _ in group]
        fork_ms = (time.perf_counter() - t0) * 1e3 / len(group)
        merge_ms = []
        for index, payload in zip(group, payloads):
            result = batch_result(schema, batch, index)
            t1 = time.perf_counter()
            back = icechunk_worker(payload, schema, slices[index], index, result)
            t2 = time.perf_counter()
            session.merge(pickle.loads(back))
            t3 = time.perf_counter()
            run.worker_ms.append((t2 - t1) * 1e3)
            merge_ms.append((t3 - t2) * 1e3)
            run.sent.append(len(payload))
            run.returned.append(len(back))
        t4 = time.perf_counter()
        session.commit(f"batches {group.start}-{group.stop - 1}")
        commit_ms = (time.perf_counter() - t4) * 1e3 / len(group)
        run.driver_ms += [fork_ms + m + commit_ms for m in merge_ms]
    if s3 is None:
        run.bytes, run.files = disk_usage(where)
        parts = {p.name: disk_usage(p) for p in sorted(where.iterdir()) if p.is_dir()}
        run.notes.append(", ".join(f"{name}/ {b / MB:.2f} MB in {n} files" for name, (b, n) in parts.items()))
        sizes = sorted(os.stat(p).st_size for p in (where / "manifests").iterdir())
        run.notes.append(f"manifest files from {sizes[0]} B to {sizes[-1]} B (a commit writes new manifests "
                         f"for the arrays it changed)")
    else:
        run.bytes, run.files = s3_usage(s3, prefix)
    t0 = time.perf_counter()
    reader = icechunk.Repository.open(storage_fn()).readonly_session("main")
    read_every_array(zarr.open_group(reader.store, mode="r"))
    run.verify["read every array"] = time.perf_counter() - t0
    run.snapshots = len(list(repo.ancestry(branch="main")))
    return run


# ------------------------------------------------------------------ S3

def s3_usage(server, url_or_prefix: str) -> tuple[int, int]:
    prefix = url_or_prefix.replace("s3://", "")
    if not prefix.startswith(server.bucket):
        prefix = f"{server.bucket}/{prefix}"
    found = server.fs().find(prefix, detail=True)
    return sum(v["size"] for v in found.values()), len(found)


def run_s3(schema, n_batches: int, batch: int, commit_every: list[int], log) -> list[Run]:
    from s3server import ACCESS_KEY, SECRET_KEY, S3Server

    server = S3Server()
    old = server.activate()
    runs = []
    try:
        try:
            runs.append(run_mechsweep(server.url("mech.zarr"), schema, n_batches, batch, s3=server))
        except Exception:  # noqa: BLE001 - reported, the rest still runs
            log("  mechsweep on S3 failed:\n" + traceback.format_exc())
        for k in commit_every:
            prefix = f"ice-{k}"

            def storage(prefix=prefix):
                return icechunk.s3_storage(bucket=server.bucket, prefix=prefix, endpoint_url=server.endpoint,
                                           allow_http=True, force_path_style=True, region="us-east-1",
                                           access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
            try:
                runs.append(run_icechunk(storage, schema, n_batches, batch, k, s3=server, prefix=prefix))
            except Exception:  # noqa: BLE001
                log(f"  icechunk (commit every {k}) on S3 failed:\n" + traceback.format_exc())
    finally:
        server.restore(old)
        server.stop()
    return runs


# ------------------------------------------------------------------ crashes

CRASH_BATCHES, CRASH_BATCH = 4, 100
CRASH_VARIABLES = 4
CRASHED = 2                   # the batch a child process dies on (batches 0 and 1 are committed)


def crash_child(kind: str, where: str) -> None:
    """In a child process: start writing batch CRASHED of the store at ``where`` and die."""
    schema = make_schema(CRASH_VARIABLES)
    sl = store.batch_slices(CRASH_BATCHES * CRASH_BATCH, CRASH_BATCH)[CRASHED]
    result = batch_result(schema, CRASH_BATCH, CRASHED)
    if kind.startswith("mechsweep"):
        if kind == "mechsweep-mid-write":
            original = store.write._write_chunks

            def half_then_die(arrays, writes):
                original(arrays, writes[: len(writes) // 2])
                os._exit(9)
            store.write._write_chunks = half_then_die
        store.write_batch_data(where, sl, result)
        os._exit(9)          # written, not committed: the driver never got the result
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(where))
    session = repo.writable_session("main")
    fork = session.fork()
    if kind == "icechunk-mid-write":
        group = zarr.open_group(fork.store, mode="r+")
        arrays = store.write._open_arrays(group, batch_arrays(schema))
        writes, _ = batch_writes(schema, sl, CRASHED, result)
        store.write._write_chunks(arrays, writes[: len(writes) // 2])
        os._exit(9)
    back = icechunk_worker(pickle.dumps(fork), schema, sl, CRASHED, result)
    session.merge(pickle.loads(back))
    os._exit(9)              # merged, not committed


def run_child(kind: str, where: Path) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, "--crash-child", kind, str(where)], env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 9:
        raise RuntimeError(f"crash child {kind} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.returncode


def batch_view(group: zarr.Group, schema, index: int) -> str:
    """What a plain Zarr reader sees of one batch: its status codes and whether its data are NaN."""
    sl = slice(index * CRASH_BATCH, (index + 1) * CRASH_BATCH)
    codes = np.asarray(group["status"][sl])
    values, counts = np.unique(codes, return_counts=True)
    status = ", ".join(f"{st.meaning(v)} x{c}" for v, c in zip(values, counts))
    nan = [name for name in schema.variables if np.isnan(np.asarray(group[name][sl])).all()]
    return f"status [{status}], outputs all NaN: {len(nan)}/{len(schema.variables)}"


def mechsweep_crash(tmp: Path, kind: str, log) -> None:
    schema = make_schema(CRASH_VARIABLES)
    where = tmp / f"{kind}.zarr"
    n = CRASH_BATCHES * CRASH_BATCH
    store.create_template(where, "bench", make_points(n), schema, {}, CRASH_BATCH)
    slices = store.batch_slices(n, CRASH_BATCH)
    for i in range(CRASHED):
        store.write_batch(str(where), slices[i], batch_result(schema, CRASH_BATCH, i))
    run_child(kind, where)
    check = store.check_store(where, "checksum")
    log(f"  {kind}: child killed (os._exit) {'half-way through the data chunks' if 'mid' in kind else 'after all chunks, before the commit record'} of batch {CRASHED}")
    log(f"    plain Zarr reader, batch {CRASHED}: {batch_view(zarr.open_group(str(where), mode='r'), schema, CRASHED)}")
    log(f"    check_store checksum: done {check.done}, pending {check.pending}, damaged {sorted(check.damaged)}")
    ds = store.open_store(where)
    codes = ds["status"].values[slices[CRASHED]]
    log(f"    open_store (mechsweep's reader): batch {CRASHED} status all pending: {bool((codes == st.PENDING).all())}")
    store.write_batch(str(where), slices[CRASHED], batch_result(schema, CRASH_BATCH, CRASHED))
    check = store.check_store(where, "checksum")
    log(f"    resume reruns batch {CRASHED} (write + commit): done {check.done}, pending {check.pending}")


def icechunk_crash(tmp: Path, kind: str, log) -> None:
    schema = make_schema(CRASH_VARIABLES)
    where = tmp / f"{kind}.icechunk"
    n = CRASH_BATCHES * CRASH_BATCH
    storage = lambda: icechunk.local_filesystem_storage(str(where))  # noqa: E731
    repo = icechunk.Repository.create(storage())
    icechunk_template(repo, schema, n, CRASH_BATCH)
    slices = store.batch_slices(n, CRASH_BATCH)
    session = repo.writable_session("main")
    forks = [pickle.dumps(session.fork()) for _ in range(CRASHED)]
    for i, payload in enumerate(forks):
        session.merge(pickle.loads(icechunk_worker(payload, schema, slices[i], i,
                                                   batch_result(schema, CRASH_BATCH, i))))
    session.commit(f"batches 0-{CRASHED - 1}")
    before = disk_usage(where)
    run_child(kind, where)
    after = disk_usage(where)
    repo = icechunk.Repository.open(storage())
    reader = zarr.open_group(repo.readonly_session("main").store, mode="r")
    what = "half-way through the batch's writes in its fork" if "mid" in kind else "after writing the batch in its fork and merging it, before the commit"
    log(f"  {kind}: child killed (os._exit) {what}, batch {CRASHED}")
    log(f"    reader of branch main, batch {CRASHED}: {batch_view(reader, schema, CRASHED)}; "
        f"batches 0-{CRASHED - 1}: {', '.join(batch_view(reader, schema, i).split(',')[0] for i in range(CRASHED))}")
    log(f"    snapshots {len(list(repo.ancestry(branch='main')))} (unchanged); files {before[1]} -> {after[1]}, "
        f"bytes {before[0]} -> {after[0]} (chunks written by the dead process stay as unreferenced files "
        f"until garbage collection)")
    session = repo.writable_session("main")
    fork = session.fork()
    session.merge(pickle.loads(icechunk_worker(pickle.dumps(fork), schema, slices[CRASHED], CRASHED,
                                               batch_result(schema, CRASH_BATCH, CRASHED))))
    session.commit(f"batch {CRASHED} again")
    reader = zarr.open_group(repo.readonly_session("main").store, mode="r")
    log(f"    batch {CRASHED} written again and committed: {batch_view(reader, schema, CRASHED)}")


def damage_experiment(tmp: Path, log) -> None:
    """Change one byte of a committed chunk file and delete another, in each store; what notices."""
    schema = make_schema(CRASH_VARIABLES)
    n = CRASH_BATCHES * CRASH_BATCH
    slices = store.batch_slices(n, CRASH_BATCH)
    # mechsweep
    where = tmp / "damage.zarr"
    store.create_template(where, "bench", make_points(n), schema, {}, CRASH_BATCH)
    for i, sl in enumerate(slices):
        store.write_batch(str(where), sl, batch_result(schema, CRASH_BATCH, i))
    flip(where / "v0" / "c" / "0" / "0")
    os.remove(where / "v1" / "c" / "1" / "0" / "0")
    check = store.check_store(where, "quick")
    log(f"  mechsweep: byte changed in v0 chunk of batch 0, v1 chunk of batch 1 deleted")
    log(f"    check_store quick: damaged {format_damage(check.damaged)}; pending {check.pending}")
    check = store.check_store(where, "checksum")
    log(f"    check_store checksum: damaged {format_damage(check.damaged)}; a resume reruns these batches")
    log(f"    plain Zarr reader: {read_outcome(zarr.open_group(str(where), mode='r'), schema, slices)}")
    # icechunk
    where = tmp / "damage.icechunk"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(where)))
    icechunk_template(repo, schema, n, CRASH_BATCH)
    session = repo.writable_session("main")
    forks = [pickle.dumps(session.fork()) for _ in slices]
    for i, payload in enumerate(forks):
        session.merge(pickle.loads(icechunk_worker(payload, schema, slices[i], i,
                                                   batch_result(schema, CRASH_BATCH, i))))
    session.commit("all batches")
    chunks = sorted((where / "chunks").iterdir(), key=lambda p: p.name)
    inlined = (f"{CRASH_BATCHES} batches x {CRASH_VARIABLES} outputs + 1 coordinate: the small chunks (status, "
               f"steps, batch_message, batch_seconds) are inlined in the manifests")
    flip(chunks[0])
    os.remove(chunks[1])
    log(f"  icechunk: {len(chunks)} chunk files ({inlined}); byte changed in one, another deleted "
        f"(file names are random ids: which batch each holds is known only from the manifest)")
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(where)))
    log(f"    repository opens; snapshots and manifests unchanged; no verify command in icechunk {icechunk.__version__}")
    log(f"    reader: {read_outcome(zarr.open_group(repo.readonly_session('main').store, mode='r'), schema, slices)}")


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def format_damage(damaged: dict) -> str:
    return "; ".join(f"batch {i}: {', '.join(p)}" for i, p in sorted(damaged.items())) or "none"


def read_outcome(group: zarr.Group, schema, slices) -> str:
    """Read every output of every batch; which batches fail, and with what error."""
    failed = []
    for i, sl in enumerate(slices):
        for name in schema.variables:
            try:
                value = np.asarray(group[name][sl])
            except Exception as exc:  # noqa: BLE001 - the point is what is raised
                failed.append(f"batch {i} {name}: raises {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:100]}")
                continue
            if np.isnan(value).all():
                failed.append(f"batch {i} {name}: reads as all NaN (the fill value), no error")
    return "; ".join(failed) if failed else "every read succeeds"


# ------------------------------------------------------------------ report

def table(runs: list[Run], log) -> None:
    log(f"  {'store':40s} {'worker ms':>9s} {'driver ms':>9s} {'driver ms':>9s} {'points/s':>9s} "
        f"{'driver-bound':>12s} {'size MB':>8s} {'files':>6s} {'snapshots':>9s}  verify s")
    log(f"  {'':40s} {'median':>9s} {'median':>9s} {'last 10':>9s} {'serial':>9s} {'points/s':>12s}")
    for r in runs:
        verify = ", ".join(f"{k} {v:.2f}" for k, v in r.verify.items())
        log(f"  {r.name:40s} {statistics.median(r.worker_ms):9.1f} {statistics.median(r.driver_ms):9.1f} "
            f"{statistics.fmean(r.driver_ms[-10:]):9.1f} {r.points_per_s:9.0f} {r.driver_bound:12.0f} "
            f"{r.bytes / MB:8.1f} {r.files:6d} {r.snapshots if r.snapshots else '-':>9}  {verify}")
    for r in runs:
        for note in r.notes:
            log(f"  {r.name}: {note}")
        sent = f"{statistics.fmean(r.sent):.0f} B to the worker (the fork), " if r.sent else ""
        log(f"  {r.name}: pickled per batch: {sent}{statistics.fmean(r.returned):.0f} B back to the driver")
    log(f"  template (create + first commit) s: " + ", ".join(f"{r.name.split(':')[0]}"
                                                              f"{'' if 'mech' in r.name else ' K=' + r.name.split()[-1]} "
                                                              f"{r.template_s:.2f}" for r in runs))


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.total_s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--batch", type=int, default=100, help="points per batch (= chunk length)")
    ap.add_argument("--variables", type=int, default=10, help="float64 outputs per point")
    ap.add_argument("--commit-every", default="1,10", help="icechunk: batches per commit, comma-separated")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each store; the fastest is reported")
    ap.add_argument("--s3", action="store_true", help="also on moto's S3 server on 127.0.0.1")
    ap.add_argument("--s3-batches", type=int, default=20)
    ap.add_argument("--dir", help="where the stores go (default: a temporary folder)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 6 batches, 1 repeat")
    ap.add_argument("--no-crash", action="store_true", help="skip the crash and damage experiments")
    ap.add_argument("--out", help="also write the report here")
    ap.add_argument("--crash-child", nargs=2, metavar=("KIND", "STORE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.crash_child:
        crash_child(*args.crash_child)
        return 1                                            # not reached
    if args.quick:
        args.batches, args.repeats, args.s3_batches = 6, 1, 4
    ks = [int(k) for k in args.commit_every.split(",")]
    lines = []

    def log(text=""):
        print(text, flush=True)
        lines.append(text)

    import dask
    import xarray

    env = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""
    log(f"$ {env}{shlex.join([sys.executable, *sys.argv])}")
    log()
    log(f"date {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}; "
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, python {platform.python_version()}; "
        f"zarr {zarr.__version__}, icechunk {icechunk.__version__}, xarray {xarray.__version__}, "
        f"dask {dask.__version__}, numpy {np.__version__}")
    log(f"load average at start {os.getloadavg()[0]:.2f}: the machine is shared (others compiling and testing "
        f"at the same time), so the timings are indicative, not exact")
    schema = make_schema(args.variables)
    log(f"{args.batches} batches of {args.batch} points; {args.variables} float64 outputs "
        f"({sum(1 for d in schema.variables.values() if len(d) == 1)} x ({args.batch}, {T}), "
        f"{sum(1 for d in schema.variables.values() if len(d) == 2)} x ({args.batch}, {T}, 3) per batch) + status int8 "
        f"+ steps int64 + batch_message + batch_seconds; one chunk per batch in each; codecs Zstandard(level 0) + "
        f"CRC32C in both stores; best of {args.repeats} run(s) of each store")
    log("worker ms: write the batch's chunks (mechsweep: and SHA-256 the bytes written; icechunk: unpickle the "
        "fork, open the group, write, pickle the fork); driver ms: commit record (mechsweep) / fork + merge + "
        "commit/K (icechunk); points/s serial = points / (worker + driver time); driver-bound = batch / mean driver "
        "ms, what one driver could commit with free workers")
    log()
    tmp_ctx = tempfile.TemporaryDirectory(prefix="bench-icechunk-", dir=args.dir)
    tmp = Path(tmp_ctx.name)
    with tmp_ctx:
        log("local filesystem:")
        runs = {}
        for rep in range(args.repeats):
            runs.setdefault("m", []).append(
                run_mechsweep(tmp / f"mech-{rep}.zarr", schema, args.batches, args.batch))
            for k in ks:
                where = tmp / f"ice-{k}-{rep}"
                runs.setdefault(k, []).append(run_icechunk(
                    lambda w=where: icechunk.local_filesystem_storage(str(w)), schema, args.batches,
                    args.batch, k, where=where))
        table([best(r) for r in runs.values()], log)
        log("  icechunk logs, when a repository on the local filesystem is opened: \"The LocalFileSystem "
            "storage is not safe for concurrent commits. If more than one thread/process will attempt to "
            "commit at the same time, prefer using object stores.\" (here only the driver commits)")
        if args.s3:
            log()
            log(f"S3 API (moto server on 127.0.0.1, in memory), {args.s3_batches} batches, one run each:")
            s3_runs = run_s3(schema, args.s3_batches, args.batch, ks, log)
            if s3_runs:
                table(s3_runs, log)
        if not args.no_crash:
            log()
            log(f"crashes ({CRASH_BATCHES} batches of {CRASH_BATCH} points, {CRASH_VARIABLES} outputs; "
                f"batches 0-{CRASHED - 1} committed, then a child process starts batch {CRASHED} and dies):")
            for kind in ("mechsweep-mid-write", "mechsweep-before-commit"):
                mechsweep_crash(tmp, kind, log)
            for kind in ("icechunk-mid-write", "icechunk-before-commit"):
                icechunk_crash(tmp, kind, log)
            log()
            log(f"later damage to committed chunk files ({CRASH_BATCHES} committed batches):")
            damage_experiment(tmp, log)
    log()
    log(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
