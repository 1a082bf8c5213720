"""Run a sweep on Dask: one task per batch, written by its worker, committed by the driver.

The runtime knows nothing about the solver but its status codes. It is given a
*batch function*, a picklable module-level callable ::

    batch_fn(points: dict[str, np.ndarray (B,)], context) -> BatchResult

and a *context* carrying what stays fixed across points (model, outputs, time
grid) plus, as attributes, the store :class:`~sweep.store.Schema` (``schema``)
and the dataset attributes (``attrs``) unless those are passed explicitly.

Flow: prepare the store (template, or resume / retry / overwrite), start or
connect to a Dask cluster, submit one task per batch
(:func:`run_and_write_batch`). Each task computes its batch, writes the
batch's chunks into the store itself (batches are chunk-aligned, so no two
tasks write the same file) and returns only the status codes and the chunks'
checksums. The driver, the only writer of commit records, commits each batch
as it completes: the data never pass through it, and a batch counts as done
only once its commit record is written, after its data and its ``status``
(see :mod:`sweep.store`). On an existing store every committed batch is first
checked against its commit record (checksums of all its chunks), and batches
that fail run again. The workers must therefore see the store: a file system
they share with the driver, or object storage.

Failures never end a sweep (status codes from :mod:`solver.status`): an
exception in the batch function becomes status ``error`` for its points with
the message kept in ``batch_message``; a task whose workers died too often
(``KilledWorker``) becomes ``worker_lost``; a result that does not match the
schema becomes ``error``. Tasks cancelled because the scheduler went away are
left pending for a later resume.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import re
import socket
import sys
import threading
import time
import traceback
import uuid
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import zarr

from solver import status as st
from solver.errors import InputError
from solver.models.yamlio import load_yaml
from sweep.store import (BatchCommitter, BatchResult, Schema, WrittenBatch, batch_slices, plan_store,
                         read_status, write_batch_data, writer_group)

__all__ = [
    "BatchResult", "SweepSummary", "run_sweep", "run_batch_task", "check_result",
    "configure_jax", "JaxSetup", "load_cluster_config", "make_cluster", "default_jax_cache_dir",
    "check_dask_target", "dask_client",
]

# The keys of a cluster file, declared with its schema (sweep.file_schemas); kept here for old imports.
from sweep.file_schemas import CLUSTER_KEYS  # noqa: E402,F401


# ---------------------------------------------------------------- worker side

def local_cores() -> int:
    """The cores this process may use (the LocalCluster's default worker count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def format_seconds(s: float) -> str:
    """A duration for people: seconds, minutes or hours, 3 significant digits."""
    return f"{s:.3g} s" if s < 120 else f"{s / 60:.3g} min" if s < 7200 else f"{s / 3600:.3g} h"


def default_jax_cache_dir() -> str:
    """The persistent JAX compilation cache used by workers.

    Returns:
        ``$MECHSWEEP_JAX_CACHE`` if set, else ``~/.cache/mechsweep/jax``.
    """
    return os.environ.get("MECHSWEEP_JAX_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "mechsweep", "jax"))


_configured: str | None = None


# Programs that compile faster than this (seconds) are not kept in the
# persistent cache.  JAX's default, 1 s, recompiles every small program
# (initial values, IPOPT's derivatives, the residual and energy series) in
# every process: a second `mechsweep simulate` of the double pendulum took
# 7.8-8.2 s with it and 6.5-6.8 s with every program cached, and two test
# modules on a warm cache 88 against 68 s (469 small programs; the cache
# grew from 3.9 to 5.8 MB).
CACHE_MIN_COMPILE_SECONDS = 0.0


def configure_jax(cache_dir: str) -> None:
    """Set float64 and the persistent compilation cache for this process, once.

    Every compiled program goes into the cache (:data:`CACHE_MIN_COMPILE_SECONDS`).
    Works whether or not JAX is already imported: the environment variables
    cover a later import (so a worker that never touches JAX never pays for
    importing it), ``jax.config.update`` covers an earlier one.

    Args:
        cache_dir: directory of the persistent compilation cache (created).

    Raises:
        OSError: the directory cannot be created.
    """
    global _configured
    if _configured == cache_dir:
        return
    os.makedirs(cache_dir, exist_ok=True)
    os.environ["JAX_ENABLE_X64"] = "1"
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(CACHE_MIN_COMPILE_SECONDS)
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
    _configured = cache_dir


try:
    from distributed import WorkerPlugin as _WorkerPlugin
except ImportError:  # pragma: no cover - distributed is a dependency
    _WorkerPlugin = object


def pin_to_core(index: int) -> int | None:
    """Pin this process to one of the cores it may use, chosen by ``index``.

    Two unpinned single-threaded JAX workers on a 2-core machine got about
    1.1-1.2x the throughput of one (the scheduler moves them between the
    cores); pinned, about 1.6-1.8x (measured with two batched integrations).

    Args:
        index: the worker's number; the core is ``allowed[index % len(allowed)]``.

    Returns:
        the core, or None where affinity cannot be set (then nothing changes).
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    core = allowed[index % len(allowed)]
    try:
        os.sched_setaffinity(0, {core})
    except OSError:
        return None
    return core


class JaxSetup(_WorkerPlugin):
    """Worker plugin: :func:`configure_jax` on every worker, also ones joining later.

    Args:
        cache_dir: the persistent compilation cache directory.
        pin: also pin each worker to one core by its name (for the workers of
            a LocalCluster on this machine, named 0, 1, ...; never for
            clusters that others share).
    """

    name = "mechsweep-jax-setup"

    def __init__(self, cache_dir: str, pin: bool = False):
        self.cache_dir = cache_dir
        self.pin = pin

    def setup(self, worker) -> None:
        """Called by Dask when the plugin reaches a worker."""
        configure_jax(self.cache_dir)
        if self.pin and isinstance(worker.name, int):
            pin_to_core(worker.name)


def run_batch_task(batch_fn: Callable, points: dict, context: Any, cache_dir: str) -> BatchResult:
    """The Dask task of one batch: run the batch function, never raise.

    Not to be confused with the solver's ``Integrator.run_batch`` (many
    integrations in one vmapped call): this one wraps whatever batch function
    the sweep was given, times it and turns its exceptions into data.

    Args:
        batch_fn: ``batch_fn(points, context) -> BatchResult``.
        points: parameter -> values of this batch's points.
        context: passed through.
        cache_dir: JAX compilation cache (set up here too, idempotently, in
            case the worker plugin has not run).

    Returns:
        The batch function's result with ``seconds`` set, or, if it raised,
        a result with status ``error`` for every point and the exception in
        ``message``.
    """
    configure_jax(cache_dir)
    n = len(next(iter(points.values())))
    start = time.perf_counter()
    try:
        result = batch_fn(points, context)
        if not isinstance(result, BatchResult):
            raise TypeError(f"batch function returned {type(result).__name__}, "
                            "expected sweep.store.BatchResult")
    except Exception as exc:  # noqa: BLE001 - any failure of one batch is data, not a crash
        tb = traceback.format_exception(exc)
        result = BatchResult.failed(n, st.ERROR, f"{type(exc).__name__}: {exc}\n" + "".join(tb[-3:]))
    result.seconds = time.perf_counter() - start
    return result


def check_result(result: BatchResult, schema: Schema, n: int) -> BatchResult:
    """Check a batch result against the schema before it is written.

    Args:
        result: what the batch function returned.
        schema: the store's schema.
        n: number of points in the batch.

    Returns:
        The result with arrays converted (status int8, steps int64, data and
        failure_time float64, failure_reason a list of str).

    Raises:
        ValueError: wrong shapes (of the failure columns too), missing
            outputs of a successful point, or status codes that are unknown
            or pending.
    """
    codes = np.asarray(result.status)
    if codes.shape != (n,):
        raise ValueError(f"status has shape {codes.shape}, expected ({n},)")
    known = np.isin(codes, [c for c in st.CODES.values() if c != st.PENDING])
    if not known.all():
        raise ValueError(f"status codes {sorted(set(codes[~known].tolist()))} are not valid "
                         f"results; valid: {st.MEANINGS}")
    steps = np.asarray(result.steps)
    if steps.shape != (n,):
        raise ValueError(f"steps has shape {steps.shape}, expected ({n},)")
    data = {}
    for name in schema.variables:
        expected = (n,) + schema.shape(name)
        if name not in result.data:
            if (~st.is_failure(codes)).any():
                raise ValueError(f"output {name!r} missing from the batch result")
            continue
        value = np.asarray(result.data[name], dtype=np.float64)
        if value.shape != expected:
            raise ValueError(f"output {name!r} has shape {value.shape}, expected {expected}")
        data[name] = value
    failure_time = result.failure_time
    if failure_time is not None:
        failure_time = np.asarray(failure_time, dtype=np.float64)
        if failure_time.shape != (n,):
            raise ValueError(f"failure_time has shape {failure_time.shape}, expected ({n},)")
    failure_reason = result.failure_reason
    if failure_reason is not None:
        failure_reason = [str(r) for r in failure_reason]
        if len(failure_reason) != n:
            raise ValueError(f"failure_reason has {len(failure_reason)} entries, expected {n}")
    return BatchResult(codes.astype(np.int8), steps.astype(np.int64), data, result.message,
                       result.seconds, failure_time, failure_reason)


@dataclass
class WriteFailed:
    """A batch that its worker computed but could not write: the storage error, for the driver.

    The driver raises ``error`` as its own (a full disk or a read-only store
    stops the run with the resume command, as when the driver writes).
    """

    error: BaseException
    seconds: float = math.nan


@dataclass
class Unfit:
    """A worker that failed its check before a batch (see :func:`check_worker`): nothing was computed.

    The driver stops giving it work and sends the batch to another worker.
    """

    worker: str
    reason: str


def package_version() -> str:
    """The installed mechsweep's version (``unknown`` when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mechsweep")
    except PackageNotFoundError:
        return "unknown"


_WORKER_CHECKS: dict = {}


def check_worker(expected_version: str, context: Any = None) -> str:
    """Why this process cannot run the sweep's batches; empty when it can.

    Checked once per process (and context): JAX computes in 64-bit floats,
    its platform starts, the installed mechsweep is the driver's version,
    and whatever the context checks itself (``context.check_on_worker()``:
    the sweep's model file here is the driver's).

    Args:
        expected_version: the driver's :func:`package_version`.
        context: the sweep's context.

    Returns:
        The reasons, joined by ``; ``, or ``""``.
    """
    key = (expected_version, getattr(context, "key", None))
    if key in _WORKER_CHECKS:
        return _WORKER_CHECKS[key]
    import jax

    reasons = []
    if not jax.config.jax_enable_x64:
        reasons.append("JAX computes without 64-bit floats here (jax_enable_x64 is off)")
    try:
        jax.devices()
    except Exception as exc:  # noqa: BLE001 - any failure to start the platform
        first = (str(exc).splitlines() or [""])[0][:200]
        reasons.append(f"JAX cannot start its platform here ({type(exc).__name__}"
                       + (f": {first})" if first else ")"))
    here = package_version()
    if here != expected_version:
        reasons.append(f"mechsweep {here} is installed here, {expected_version} on the driver")
    own = getattr(context, "check_on_worker", None)
    if own is not None:
        try:
            why = own()
        except Exception as exc:  # noqa: BLE001 - a check that fails is a reason too
            why = f"{type(exc).__name__}: {exc}"
        if why:
            reasons.append(why)
    _WORKER_CHECKS[key] = "; ".join(reasons)
    return _WORKER_CHECKS[key]


def _this_worker() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"this process ({socket.gethostname()}, pid {os.getpid()})"


def run_and_write_batch(batch_fn: Callable, points: dict, context: Any, cache_dir: str,
                        store: str, batch_slice: slice, schema: Schema,
                        store_token: str | None = None,
                        expected_version: str | None = None) -> WrittenBatch | WriteFailed | Unfit:
    """The Dask task of one batch: compute it, check it, write its chunks into the store.

    The batch's data never leave the worker: what comes back to the driver is
    the status codes, the message, the compute time and the table of chunk
    checksums for the batch's commit record (:func:`sweep.store.commit_batch`,
    written by the driver alone).

    Args:
        batch_fn, points, context, cache_dir: as for :func:`run_batch_task`.
        store: the store's path (or, in the driver's own process, its open group).
        batch_slice: the batch's points in the store.
        schema: the store's schema, to check the result against.
        store_token: what tells this store from another one once at the same
            path (its creation time and sweep hash): with it, a worker opens
            the store once for all the batches it writes.
        expected_version: the driver's mechsweep version: with it, the
            worker first passes :func:`check_worker` or computes nothing.

    Returns:
        A :class:`~sweep.store.WrittenBatch`; a :class:`WriteFailed` with
        the exception that the write raised; an :class:`Unfit` when this
        worker failed its check.
    """
    n = batch_slice.stop - batch_slice.start
    if isinstance(store, str) and "://" not in store and not os.path.isdir(store):
        # Checked before computing: a worker on another host without the driver's file system.
        return WriteFailed(InputError(
            f"the Dask worker on {socket.gethostname()} cannot see the store: the workers write "
            f"their batches themselves, so --out must be on a file system they share with the "
            f"driver, or an object store URL such as s3://bucket/sweep.zarr", file=store))
    if expected_version is not None:
        configure_jax(cache_dir)
        why = check_worker(expected_version, context)
        if why:
            return Unfit(_this_worker(), why)
    result = run_batch_task(batch_fn, points, context, cache_dir)
    result = checked_or_failed(result, schema, n)
    try:
        return write_batch_data(_open_store_once(store, store_token), batch_slice, result)
    except Exception as exc:  # noqa: BLE001 - the driver decides; a worker must not die of it
        return WriteFailed(_picklable(exc), result.seconds)


_OPEN_STORES: dict = {}


def _open_store_once(store: str, token: str | None):
    """The store's group, opened once per worker process for each (path, token)."""
    if token is None:
        return store
    key = (store, token)
    if key not in _OPEN_STORES:
        if len(_OPEN_STORES) >= 8:
            _OPEN_STORES.clear()
        _OPEN_STORES[key] = writer_group(store)
    return _OPEN_STORES[key]


def checked_or_failed(result: BatchResult, schema: Schema, n: int) -> BatchResult:
    """:func:`check_result`, or a result with status ``error`` for all points saying why not."""
    try:
        return check_result(result, schema, n)
    except ValueError as exc:
        failed = BatchResult.failed(n, st.ERROR, f"bad batch result: {exc}")
        failed.seconds = result.seconds
        return failed


def _picklable(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling (to reach the driver), else its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any unpicklable exception
        return RuntimeError(f"{type(exc).__name__}: {exc}")


# ----------------------------------------------------------------- clusters

def load_cluster_config(path) -> dict:
    """Read and check a cluster YAML file.

    The file names a cluster class and how to size it, e.g. ::

        module: dask_jobqueue
        class: SLURMCluster
        kwargs: {cores: 8, memory: 16GB, walltime: "01:00:00"}
        scale: {jobs: 4}

    Args:
        path: the YAML file.

    Returns:
        The checked mapping (keys of :data:`CLUSTER_KEYS`).

    Raises:
        InputError: unreadable file, unknown or missing keys, wrong types.
    """
    from solver.models.yamlio import Locator
    from sweep.file_schemas import ClusterFile
    from sweep.yamlschema import validate

    # The one YAML reader (YAML 1.2 scalars, duplicate keys refused, input limits).
    config, loc = load_yaml(Path(path))
    if not isinstance(config, dict):
        raise InputError(f"expected {ClusterFile.what}", file=loc.file)
    # Checked against the declared schema; its messages name the file and the key, not the line.
    validate(ClusterFile, config, Locator(file=loc.file))
    return config


def make_cluster(config: Mapping, path=None, workers: int | None = None):
    """Start the cluster a checked cluster config describes.

    Args:
        config: from :func:`load_cluster_config`.
        path: the file it came from (for messages).
        workers: worker count used when the config has neither ``scale`` nor
            ``adapt``.

    Returns:
        The started ``distributed`` cluster.

    Raises:
        InputError: the module cannot be imported, or the class is missing or
            not a ``distributed`` cluster class.
    """
    from distributed.deploy import Cluster

    file = None if path is None else str(path)
    try:
        module = importlib.import_module(config["module"])
    except ImportError as exc:
        hint = " (pip install 'mechsweep[cluster]')" if "jobqueue" in config["module"] else ""
        raise InputError(f"cannot import module {config['module']!r}: {exc}{hint}",
                         file=file, path="module") from exc
    cls = getattr(module, config["class"], None)
    if not (isinstance(cls, type) and issubclass(cls, Cluster)):
        raise InputError(f"{config['module']}.{config['class']} is not a Dask cluster class "
                         f"(a subclass of distributed.deploy.Cluster)", file=file, path="class")
    cluster = cls(**config.get("kwargs", {}))
    scale = config.get("scale")
    if isinstance(scale, dict):
        cluster.scale(**scale)
    elif scale is not None:
        cluster.scale(scale)
    elif "adapt" not in config and workers:
        cluster.scale(workers)
    if "adapt" in config:
        cluster.adapt(**config["adapt"])
    return cluster


# ----------------------------------------------------------------- driver

class _Interrupts:
    """Ctrl-C and SIGTERM held back while a batch is written (see :func:`interrupt`)."""

    writing = False
    pending: BaseException | None = None


def interrupt(exc: BaseException) -> None:
    """Raise ``exc`` (a signal handler's), or hold it until the batch being written is committed.

    A batch's chunks, status and commit record are written one after another;
    stopped between them, the batch reads as damaged and runs again. The
    command line's handlers of SIGINT and SIGTERM call this, so an interrupt
    lands between batches.
    """
    if _Interrupts.writing:
        _Interrupts.pending = exc
        return
    raise exc


@contextlib.contextmanager
def _writing_a_batch():
    _Interrupts.writing = True
    try:
        yield
    finally:
        _Interrupts.writing = False
        held, _Interrupts.pending = _Interrupts.pending, None
        if held is not None:
            raise held


@dataclass
class SweepSummary:
    """What a call of :func:`run_sweep` did.

    Attributes:
        store: the store path.
        n_points, n_batches: size of the whole sweep.
        batches_run: batch indices written by this run, in completion order.
        batches_left: batch indices this run meant to run but left pending
            (cancelled because the scheduler went away).
        batches_damaged: batch -> what was wrong, for the batches of an
            existing store that failed verification against their commit
            records and were therefore run again.
        points_run: points written by this run.
        by_status: status name -> points of this run.
        store_by_status: status name -> points in the whole store afterwards.
        batch_seconds: batch index -> compute time on its worker.
        wall_seconds: from the first submission to the last write.
        startup_seconds: store preparation and cluster start.
        total_seconds: the whole call, start-up included.
        stopped: why the run stopped before its batches were done (a
            cluster without workers), or empty.
        threads: worker threads seen (for the overhead).
        overhead_fraction: ``1 - sum(batch_seconds) / (wall_seconds * threads)``,
            the share of the workers' time not spent inside batch functions
            (scheduling, transfer, writing, idle workers at the end).
    """

    store: str
    n_points: int
    n_batches: int
    batches_run: list[int] = field(default_factory=list)
    batches_left: list[int] = field(default_factory=list)
    batches_damaged: dict[int, list[str]] = field(default_factory=dict)
    points_run: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    store_by_status: dict[str, int] = field(default_factory=dict)
    batch_seconds: dict[int, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    startup_seconds: float = 0.0
    threads: int = 1
    overhead_fraction: float = 0.0
    total_seconds: float = 0.0
    stopped: str = ""

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.store_by_status.items())
        per = (f"{np.mean(list(self.batch_seconds.values())):.3g} s/batch"
               if self.batch_seconds else "no batches run")
        lines = [f"{self.store}: {self.n_points} points in {self.n_batches} batches; "
                 f"this run wrote {len(self.batches_run)} batches ({self.points_run} points)",
                 f"store status: {counts}",
                 f"wall {format_seconds(max(self.total_seconds, self.wall_seconds + self.startup_seconds))} "
                 f"({self.startup_seconds:.3g} s store and cluster start-up, {self.wall_seconds:.3g} s "
                 f"running batches), {per}, {self.threads} worker threads, "
                 f"overhead {100 * self.overhead_fraction:.0f}%"]
        if self.batches_damaged:
            lines.append(f"{len(self.batches_damaged)} batches failed verification against their "
                         f"commit records and were run again:")
            lines += [f"  batch {i}: {'; '.join(why)}"
                      for i, why in sorted(self.batches_damaged.items())]
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        if self.batches_left:
            lines.append(f"{len(self.batches_left)} batches left pending; run again to resume")
        return "\n".join(lines)


def _spec_fields(spec) -> tuple[dict, int, str, str]:
    """points, batch, hash, title of a spec-like object."""
    try:
        points = {k: np.asarray(v) for k, v in dict(spec.points).items()}
        return points, int(spec.batch), str(spec.hash), str(getattr(spec, "title", "") or "")
    except AttributeError as exc:
        raise TypeError("run_sweep needs a spec with .points, .batch and .hash "
                        f"(a sweep.spec.SweepSpec): {exc}") from exc


def _counts(codes: np.ndarray) -> dict[str, int]:
    values, counts = np.unique(codes, return_counts=True)
    return {st.meaning(v): int(c) for v, c in zip(values, counts)}


def _check_target(scheduler, scheduler_file, cluster):
    """Check the scheduler options before anything is written; (cluster config, its file)."""
    chosen = [name for name, v in (("scheduler", scheduler), ("scheduler_file", scheduler_file),
                                   ("cluster", cluster)) if v]
    if len(chosen) > 1:
        raise InputError(f"give at most one of --scheduler, --scheduler-file, --cluster "
                         f"(got {', '.join(chosen)})")
    if scheduler_file and not Path(scheduler_file).is_file():
        raise InputError("scheduler file not found", file=str(scheduler_file))
    if isinstance(cluster, (str, os.PathLike)):
        return load_cluster_config(cluster), str(cluster)
    return cluster, None


def _client(workers, scheduler, scheduler_file, cluster, cluster_file):
    """(client, cluster we own or None)."""
    from distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler), None
    if scheduler_file:
        return Client(scheduler_file=str(scheduler_file)), None
    if cluster:
        own = make_cluster(cluster, cluster_file, workers)
        return Client(own), own
    # The cores this process may use (a batch-system allocation), not the whole node's.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = workers or cores or 1
    own = LocalCluster(n_workers=n, threads_per_worker=1, processes=True)
    return Client(own), own


def check_dask_target(scheduler=None, scheduler_file=None, cluster=None):
    """Check where Dask work would run, before anything is computed or written.

    Returns:
        ``(cluster config or None, its file or None)``.

    Raises:
        InputError: more than one of scheduler, scheduler file and cluster;
            a missing scheduler file; a bad cluster file.
    """
    return _check_target(scheduler, scheduler_file, cluster)


@contextlib.contextmanager
def dask_client(workers=None, scheduler=None, scheduler_file=None, cluster=None,
                jax_cache_dir: str | None = None):
    """A Dask client on the same kind of cluster as sweeps, closed on exit.

    Other task-parallel commands (``mechsweep design``'s starts) use it: a
    LocalCluster of single-threaded worker processes, each pinned to a core,
    by default; else the given scheduler, scheduler file or cluster file.
    Every worker gets :class:`JaxSetup` (float64, the persistent
    compilation cache).

    Args:
        workers: LocalCluster worker processes (default: the local cores).
        scheduler, scheduler_file, cluster: as for :func:`run_sweep`.
        jax_cache_dir: the workers' compilation cache (default
            :func:`default_jax_cache_dir`).

    Yields:
        the ``distributed.Client``.

    Raises:
        InputError: see :func:`check_dask_target`.
    """
    from distributed import LocalCluster

    cluster, cluster_file = _check_target(scheduler, scheduler_file, cluster)
    client, own = _client(workers, scheduler, scheduler_file, cluster, cluster_file)
    try:
        client.register_plugin(JaxSetup(jax_cache_dir or default_jax_cache_dir(),
                                        pin=isinstance(own, LocalCluster)))
        yield client
    finally:
        client.close()
        if own is not None:
            own.close()


def run_sweep(spec_like, batch_fn: Callable, context: Any, store_path, workers: int | None = None,
              scheduler: str | None = None, scheduler_file=None, cluster=None,
              mode: str = "resume", progress: bool = True, *, schema: Schema | None = None,
              attrs: Mapping | None = None, jax_cache_dir: str | None = None,
              verify: bool = True, client=None, progress_every: float | None = None,
              worker_timeout: float | None = None) -> SweepSummary:
    """Run (or resume) a sweep into a Zarr store.

    Args:
        spec_like: the sweep: ``.points`` (name -> ``(n_points,)`` values),
            ``.batch``, ``.hash``, optionally ``.title`` (a ``SweepSpec``).
        batch_fn: picklable module-level ``batch_fn(points, context) -> BatchResult``.
        context: what stays fixed; sent with every task.
        store_path: the Zarr store directory.
        workers: LocalCluster worker processes (default: CPU count), or the
            workers to scale a cluster file without ``scale``; ``0`` runs the
            batches serially in this process without Dask (for debugging).
        scheduler: address of a running Dask scheduler.
        scheduler_file: a scheduler's JSON file.
        cluster: a cluster YAML path (see :func:`load_cluster_config`) or a
            checked mapping.
        mode: ``resume`` (default), ``overwrite`` or ``retry-failed``
            (see :func:`sweep.store.plan_store`).
        progress: show a progress bar (only when stderr is a terminal).
        worker_timeout: seconds the run waits while its Dask cluster has no
            worker (none started, or all lost) before it stops, leaving the
            rest pending (``summary.stopped`` says why); None:
            :data:`WORKER_TIMEOUT`; 0: wait for ever.
        progress_every: when stderr is not a terminal (a batch job's log),
            print a progress line there at most every this many seconds, at
            a batch's completion; None or 0: none.
        schema: the outputs; default ``context.schema``.
        attrs: dataset attributes (model YAML text, solver settings...);
            default ``context.attrs`` or none. ``title`` defaults to the spec's.
        jax_cache_dir: persistent compilation cache for the workers; default
            :func:`default_jax_cache_dir`.
        verify: on an existing store, read every committed chunk and compare
            its checksum with the batch's commit record (default); False
            checks only that the chunk files are there as committed
            (``quick``, see :func:`sweep.store.check_store`).
        client: a running ``distributed.Client`` (:func:`dask_client`) to
            submit the batches to, kept open afterwards, or a function
            returning one, called only when there are batches to run;
            instead of ``workers``, ``scheduler``, ``scheduler_file`` and
            ``cluster`` (a structural sweep's groups share one).

    Returns:
        A :class:`SweepSummary`.

    Raises:
        InputError: hash mismatch or another unusable store (also one of
            format 1, without commit records), conflicting scheduler options,
            a bad cluster file.
        TypeError: no schema given or found on the context.
    """
    from tqdm import tqdm

    t_start = time.perf_counter()
    points, batch, spec_hash, title = _spec_fields(spec_like)
    schema = schema if schema is not None else getattr(context, "schema", None)
    if not isinstance(schema, Schema):
        raise TypeError("run_sweep needs a sweep.store.Schema (schema= or context.schema)")
    attrs = dict(attrs if attrs is not None else getattr(context, "attrs", None) or {})
    attrs.setdefault("title", title)
    cache_dir = jax_cache_dir or default_jax_cache_dir()
    store_path = str(store_path)
    cluster_file = None
    if client is not None and (workers == 0 or scheduler or scheduler_file or cluster):
        raise ValueError("run_sweep: give a client or workers/scheduler/scheduler_file/cluster, not both")
    if workers != 0 and client is None:
        cluster, cluster_file = _check_target(scheduler, scheduler_file, cluster)

    n_points = len(next(iter(points.values())))
    slices = batch_slices(n_points, batch)
    if getattr(spec_like, "n_batches", len(slices)) != len(slices):
        raise ValueError(f"the spec has {spec_like.n_batches} batches, but {n_points} points in "
                         f"batches of {batch} make {len(slices)}")
    todo, check = plan_store(store_path, spec_hash, points, schema, attrs, batch, mode, verify)
    summary = SweepSummary(store_path, n_points, len(slices))
    if check is not None:
        summary.batches_damaged = dict(check.damaged)
    run_codes: list[np.ndarray] = []
    failed_so_far = [0]

    def finish(index: int, outcome: WrittenBatch | WriteFailed | BatchResult) -> None:
        # A worker's batch arrives written (commit it here) or not writable (stop the run);
        # a batch lost with its worker (a result made here) is written here.
        sl = slices[index]
        if isinstance(outcome, WriteFailed):
            raise outcome.error
        with _writing_a_batch():
            if isinstance(outcome, BatchResult):
                outcome = write_batch_data(group, sl, checked_or_failed(outcome, schema,
                                                                        sl.stop - sl.start))
            committer.commit(outcome)
        summary.batches_run.append(index)
        summary.batch_seconds[index] = float(outcome.seconds)
        run_codes.append(outcome.status)
        bar.update(1)
        failed_so_far[0] += int(st.is_failure(outcome.status).sum())
        failed = failed_so_far[0]
        if failed:
            bar.set_postfix(failed=failed)
        if log is not None:
            log.batch_done(len(summary.batches_run), failed)

    group = zarr.open_group(store_path, mode="r+")
    committer = BatchCommitter(group) if todo else None
    store_token = f"{group.attrs.get('created')} {group.attrs.get('sweep_hash')}"
    if "://" not in store_path:
        store_path = os.path.abspath(store_path)      # workers may run in another directory
    bar = tqdm(total=len(todo), unit="batch", desc=title or "sweep",
               disable=not progress or not sys.stderr.isatty())
    log = (ProgressLog(len(todo), progress_every, title or store_path)
           if progress_every and todo and not sys.stderr.isatty() else None)
    try:
        if not todo:
            pass
        elif workers == 0:
            configure_jax(cache_dir)
            summary.startup_seconds = time.perf_counter() - t_start
            t0 = time.perf_counter()
            for index in todo:
                sl = slices[index]
                finish(index, run_and_write_batch(batch_fn, {k: v[sl] for k, v in points.items()},
                                                  context, cache_dir, group, sl, schema))
            summary.wall_seconds = time.perf_counter() - t0
        else:
            summary.startup_seconds, summary.wall_seconds, summary.threads = _run_dask(
                todo, slices, points, batch_fn, context, cache_dir, finish, summary, store_path, schema,
                store_token,
                workers, scheduler, scheduler_file, cluster, cluster_file, t_start, client,
                WORKER_TIMEOUT if worker_timeout is None else worker_timeout)
    finally:
        bar.close()

    if run_codes:
        summary.by_status = _counts(np.concatenate(run_codes))
        summary.points_run = int(sum(len(c) for c in run_codes))
    summary.store_by_status = _counts(read_status(store_path))
    busy = sum(summary.batch_seconds.values())
    if summary.wall_seconds > 0:
        summary.overhead_fraction = max(0.0, 1.0 - busy / (summary.wall_seconds * summary.threads))
    summary.total_seconds = time.perf_counter() - t_start
    return summary


class ProgressLog:
    """Progress lines on stderr for runs without a terminal (batch jobs' logs).

    A line at a batch's completion when ``every`` seconds have passed since
    the last one (and at the last batch): batches written of those planned,
    failed points so far, time taken and an estimate of the time left.
    """

    def __init__(self, total: int, every: float, label: str, stream=None, clock=time.monotonic):
        self.total, self.every, self.label = int(total), float(every), str(label)
        self.stream, self.clock = stream, clock
        self.start = self.last = clock()

    def batch_done(self, done: int, failed: int) -> None:
        """Say where the run is, if it is time to (``done`` batches of :attr:`total`)."""
        now = self.clock()
        if now - self.last < self.every and done < self.total:
            return
        self.last = now
        spent = now - self.start
        left = spent / done * (self.total - done) if done else float("nan")
        line = (f"[mechsweep] {self.label}: {done}/{self.total} batches written "
                f"({100 * done / max(self.total, 1):.0f}%), {failed} failed points, "
                f"{format_seconds(spent)} so far" + (f", about {format_seconds(left)} left"
                                                      if done < self.total else ""))
        print(line, file=self.stream or sys.stderr, flush=True)


def _run_dask(todo, slices, points, batch_fn, context, cache_dir, finish, summary, store_path, schema,
              store_token, workers, scheduler, scheduler_file, cluster, cluster_file, t_start, client=None,
              worker_timeout: float = 0.0):
    """Submit the batches and commit them as they complete; (startup, wall, threads).

    With a ``client``, the batches go to it and it stays open (its owner
    registered :class:`JaxSetup`); else a client is made here and closed.
    """
    from distributed import KilledWorker, as_completed

    shared = client is not None
    own = None
    if callable(client):
        client = client()
    if not shared:
        client, own = _client(workers, scheduler, scheduler_file, cluster, cluster_file)
    futures, watch = {}, None
    try:
        if not shared:
            _say_dashboard(client)
            from distributed import LocalCluster

            # The LocalCluster started here has one single-threaded worker per
            # core: pin each to its own core.
            client.register_plugin(JaxSetup(cache_dir, pin=isinstance(own, LocalCluster)))
        startup = time.perf_counter() - t_start
        t0 = time.perf_counter()
        run_id = uuid.uuid4().hex[:8]
        version = package_version()
        unfit: dict[str, str] = {}

        def submit(index, attempt=0, **where):
            sl = slices[index]
            fut = client.submit(run_and_write_batch, batch_fn,
                                {k: v[sl] for k, v in points.items()}, context, cache_dir,
                                store_path, sl, schema, store_token, version,
                                key=f"mechsweep-batch-{index}-{run_id}-{attempt}", pure=False, **where)
            futures[fut.key] = (index, fut)
            return fut

        for index in todo:
            submit(index)
        threads = _threads(client)
        watch = WorkerWatch(client, lambda: [f for _, f in list(futures.values())], worker_timeout,
                            after_first=cluster is not None)
        # Results are fetched by as_completed's own thread as tasks finish, not one by one here.
        done = as_completed([f for _, f in futures.values()], with_results=True, raise_errors=False)
        for fut, result in done:
            index = futures.pop(fut.key)[0]
            n = slices[index].stop - slices[index].start
            fut.release()
            if isinstance(result, tuple) and len(result) == 3 and isinstance(result[1], BaseException):
                result = result[1]                       # an erred task: (type, exception, traceback)
            if isinstance(result, CancelledError):
                summary.batches_left.append(index)
                continue
            if isinstance(result, KilledWorker):
                result = BatchResult.failed(n, st.WORKER_LOST, f"KilledWorker: {result}")
            elif isinstance(result, BaseException):  # infrastructure errors become data
                result = BatchResult.failed(n, st.ERROR, f"{type(result).__name__}: {result}")
            if isinstance(result, Unfit):
                fit = _use_fit_workers(client, unfit, result)
                if fit:
                    attempt = int(fut.key.rsplit("-", 1)[1]) + 1
                    done.add(submit(index, attempt, workers=fit, allow_other_workers=False))
                    continue
                summary.stopped = ("no worker passed its check: " + "; ".join(
                    f"{w}: {why}" for w, why in unfit.items()))
                summary.batches_left += [index] + [i for i, _ in futures.values()]
                client.cancel([f for _, f in futures.values()])
                futures.clear()
                break
            finish(index, result)
        watch.stop()
        summary.stopped = summary.stopped or watch.reason
        wall = time.perf_counter() - t0
        return startup, wall, max(threads, _threads(client))
    except BaseException:
        # Interrupted: drop the queued tasks; written batches stay, the rest stay pending.
        # Closing a cluster in the middle of its work makes its event loop log the
        # callbacks it abandons, with tracebacks: the run has said why it stopped.
        _quiet_shutdown()
        client.cancel([fut for _, fut in futures.values()])
        raise
    finally:
        if watch is not None:
            watch.stop()
        if not shared:
            client.close()
        if own is not None:
            own.close()


def _quiet_shutdown() -> None:
    """Silence the logs of Dask's event loop while an interrupted run closes its cluster."""
    import logging

    for name in ("tornado.application", "tornado.general", "asyncio", "distributed"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _use_fit_workers(client, unfit: dict, result: Unfit) -> list[str]:
    """Note a worker that failed its check (saying so once); the workers still fit."""
    if result.worker not in unfit:
        unfit[result.worker] = result.reason
        print(f"mechsweep: worker {result.worker} is not used for this sweep: {result.reason}",
              file=sys.stderr, flush=True)
    workers = list(client.scheduler_info(n_workers=-1).get("workers", {}))
    return [w for w in workers if w not in unfit]


#: Seconds a sweep waits while its cluster has no worker before it stops (``--worker-timeout``).
WORKER_TIMEOUT = 60.0


class WorkerWatch:
    """Stop a sweep whose Dask cluster has had no worker for ``timeout`` seconds.

    A thread asks the scheduler for its workers every ``poll`` seconds. With
    none, it says so on stderr at once; after ``timeout`` seconds without
    any (with ``after_first``, counted only once a first worker has come:
    a cluster file's job queue may take long to start them) it cancels the
    queued batches (they stay pending in the store) and
    sets :attr:`reason`, so that the run ends as incomplete instead of
    waiting in silence for workers that may never come.

    Attributes:
        reason: why it stopped the run, or empty.
    """

    def __init__(self, client, futures: Callable[[], list], timeout: float, poll: float = 1.0,
                 after_first: bool = False):
        self.client, self.futures, self.timeout, self.poll = client, futures, float(timeout or 0), poll
        self.after_first = after_first
        self.reason = ""
        self._stop = threading.Event()
        self._thread = None
        if self.timeout > 0:
            self._thread = threading.Thread(target=self._watch, name="mechsweep-worker-watch", daemon=True)
            self._thread.start()

    def _workers(self) -> int:
        try:
            return len(self.client.scheduler_info()["workers"])
        except Exception:  # noqa: BLE001 - a scheduler that does not answer has no workers for us
            return 0

    def _watch(self) -> None:
        since, seen = None, False
        while not self._stop.wait(self.poll):
            if self._workers():
                since, seen = None, True
                continue
            if self.after_first and not seen:
                # A cluster file's workers come from a job queue: they may
                # take a long time to start, and the wait starts with the first.
                continue
            if since is None:
                since = time.monotonic()
                print(f"[mechsweep] the Dask cluster has no workers; waiting up to {self.timeout:g} s "
                      f"for one (--worker-timeout)", file=sys.stderr, flush=True)
            elif time.monotonic() - since >= self.timeout:
                self.reason = (f"the Dask cluster had no workers for {self.timeout:g} s (none started, or "
                               f"all lost); start workers and resume")
                self.client.cancel(self.futures())
                return

    def stop(self) -> None:
        """End the watch (the run's batches are done or cancelled)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def _say_dashboard(client) -> None:
    try:
        print(f"mechsweep: Dask dashboard at {client.dashboard_link}", file=sys.stderr)
    except Exception:  # noqa: BLE001 - a missing dashboard must not stop a sweep
        pass


def _threads(client) -> int:
    try:
        return max(1, sum(w.get("nthreads", 1)
                          for w in client.scheduler_info()["workers"].values()))
    except Exception:  # noqa: BLE001 - only used for the overhead estimate
        return 1
