"""The worker side of a sweep: JAX set-up, the Dask task of one batch, and the worker's own checks.

A task (:func:`run_and_write_batches`: one or several consecutive batches,
each by :func:`run_and_write_batch`) computes a batch, checks the result
against the store's schema, writes the batch's chunks into the store itself
and returns only the status codes and the chunks' checksums
(:class:`~sweep.store.WrittenBatch`); the driver commits it
(:mod:`sweep.run.driver`). Failures of the batch function become data
(status ``error``), never a dead worker.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
import traceback
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.jax_cache import CACHE_MIN_COMPILE_SECONDS, configure_jax, default_jax_cache_dir
from sweep.store import BatchResult, Schema, WrittenBatch, template_ready, write_batch_data, writer_group

__all__ = [
    "default_jax_cache_dir", "CACHE_MIN_COMPILE_SECONDS", "configure_jax", "pin_to_core", "keep_freed_memory",
    "JaxSetup", "tiered_report",
    "run_batch_task", "check_result", "checked_or_failed", "WriteFailed", "Unfit", "package_version",
    "check_worker", "run_and_write_batch", "run_and_write_batches", "STORE_WAIT_SECONDS",
]


try:
    from distributed import WorkerPlugin as _WorkerPlugin
except ImportError:  # pragma: no cover - distributed is a dependency
    _WorkerPlugin = object


def pin_to_core(index: int) -> int | None:
    """Pin this process to one of the cores it may use, chosen by ``index``.

    Unpinned, the operating system moves single-threaded JAX workers between
    the cores, and two of them on two cores get little more than the
    throughput of one; pinned, each keeps its core.

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


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Blocks up to this size come from the heap, not from a mapping of their own (see keep_freed_memory).
HEAP_BLOCK_MAX = 64 << 20
# Free memory at the heap's top kept for the next batch rather than returned to the system.
HEAP_TOP_KEPT = 128 << 20


def keep_freed_memory() -> bool:
    """Let this process reuse the memory a batch frees for the next one (glibc; elsewhere nothing).

    Dask's nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so
    that they hand freed memory back to the system at once.  A sweep's batches
    allocate and free the same large arrays batch after batch (the solution,
    its dataset, the encoded chunks): each block over glibc's mapping
    threshold was a fresh mapping of its own, its pages faulted in on first
    touch and unmapped again on free.  That cost a worker about a fifth of
    its time on a pendulum batch of 1,000 points (117-135 against 93-100 ms
    a batch; ``workflows/benchmarks/results/sweep_vs_solve.txt``).  Here blocks up to
    :data:`HEAP_BLOCK_MAX` come from the heap and up to :data:`HEAP_TOP_KEPT`
    of free memory at its top is kept: a worker's resident memory stays near
    its largest batch's, which it needs again for the next batch anyway.

    Returns:
        Whether the allocator took the settings (False off glibc).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, HEAP_TOP_KEPT))


class JaxSetup(_WorkerPlugin):
    """Worker plugin: :func:`configure_jax` on every worker, also ones joining later.

    Args:
        cache_dir: the persistent compilation cache directory.
        pin: also pin each worker to one core by its name (for the workers of
            a LocalCluster on this machine, named 0, 1, ...; never for
            clusters that others share).
        own_workers: the workers were started for this run (a LocalCluster or
            a cluster file's): they also keep the memory a batch frees for
            the next one (:func:`keep_freed_memory`); never for a scheduler
            that others share, nor for workers that are threads of the
            process that made the plugin (its allocator is its own: it
            changes even the last bits of numpy's results, whose vector
            loops depend on the arrays' alignment).
        tiered: start each program's batches on a quick build while its
            optimised build compiles, once per host (:mod:`solver.tiered`;
            ``MECHSWEEP_TIERED_COMPILE`` still wins); never for workers that
            are threads of the process that made the plugin, whose own
            setting stays as it is.
    """

    name = "mechsweep-jax-setup"

    def __init__(self, cache_dir: str, pin: bool = False, own_workers: bool = False, tiered: bool = False):
        self.cache_dir = cache_dir
        self.pin = pin
        self.own_workers = own_workers
        self.tiered = tiered
        self.maker_pid = os.getpid()

    def setup(self, worker) -> None:
        """Called by Dask when the plugin reaches a worker."""
        configure_jax(self.cache_dir)
        another_process = os.getpid() != self.maker_pid
        if self.own_workers and another_process:
            keep_freed_memory()
        if self.pin and isinstance(worker.name, int):
            pin_to_core(worker.name)
        if self.tiered and another_process:
            from solver import set_tiered

            set_tiered(True)


def tiered_report() -> dict[str, int]:
    """This worker's tiered compiles: :data:`solver.tiered.stats` and ``pending`` (builds still compiling).

    Returns:
        The counts; only ``pending: 0`` where this process never imported
        :mod:`solver.tiered` (it compiled nothing).
    """
    tiered = sys.modules.get("solver.tiered")
    if tiered is None:
        return {"pending": 0}
    return {"pending": tiered.pending(), **tiered.stats}


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
        The batch function's result with ``seconds`` and ``compile_seconds``
        (the part of it JAX spent tracing and compiling) set, or, if it
        raised, a result with status ``error`` for every point and the
        exception in ``message``.
    """
    from solver import compile_clock

    configure_jax(cache_dir)
    n = len(next(iter(points.values())))
    with compile_clock() as clock:
        try:
            result = batch_fn(points, context)
            if not isinstance(result, BatchResult):
                raise TypeError(f"batch function returned {type(result).__name__}, "
                                "expected sweep.store.BatchResult")
        except Exception as exc:  # noqa: BLE001 - any failure of one batch is data, not a crash
            tb = traceback.format_exception(exc)
            result = BatchResult.failed(n, st.ERROR, f"{type(exc).__name__}: {exc}\n" + "".join(tb[-3:]))
    result.seconds = clock.wall_seconds
    result.compile_seconds = min(clock.seconds, result.seconds)
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
                       result.seconds, failure_time, failure_reason, result.compile_seconds)


def checked_or_failed(result: BatchResult, schema: Schema, n: int) -> BatchResult:
    """:func:`check_result`, or a result with status ``error`` for all points saying why not."""
    try:
        return check_result(result, schema, n)
    except ValueError as exc:
        failed = BatchResult.failed(n, st.ERROR, f"bad batch result: {exc}")
        failed.seconds, failed.compile_seconds = result.seconds, result.compile_seconds
        return failed


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
                        expected_version: str | None = None) -> WrittenBatch | WriteFailed | Unfit | CancelledError:
    """The Dask task of one batch: compute it, check it, write its chunks into the store.

    The batch's data never leave the worker: what comes back to the driver is
    the status codes, the message, the compute time and the table of chunk
    checksums for the batch's commit record (:func:`sweep.store.commit_batch`,
    written by the driver alone). A new store's template may still be in the
    making when the batch is computed: the write waits for it (see
    :data:`STORE_WAIT_SECONDS`).

    Args:
        batch_fn, points, context, cache_dir: as for :func:`run_batch_task`.
        store: the store's path (or, in the driver's own process, its open group).
        batch_slice: the batch's points in the store.
        schema: the store's schema, to check the result against.
        store_token: what tells this store from another one once at the same
            path (:func:`sweep.store.store_token`): with it, a worker waits
            for that store to be whole and opens it once for all the batches
            it writes.
        expected_version: the driver's mechsweep version: with it, the
            worker first passes :func:`check_worker` or computes nothing.

    Returns:
        A :class:`~sweep.store.WrittenBatch`; a :class:`WriteFailed` with
        the exception that the write raised (or the error saying that the
        store never came); an :class:`Unfit` when this worker failed its
        check; a ``CancelledError`` (returned, not raised) when the task was
        cancelled before it computed or wrote.
    """
    n = batch_slice.stop - batch_slice.start
    if isinstance(store, str) and "://" not in store and not os.path.isdir(os.path.dirname(store) or "."):
        # Checked before computing: a worker on another host without the driver's file system
        # (the driver makes the store's folder before it submits; the store itself may still
        # be in the making).
        return WriteFailed(_unseen_store(store, "cannot see the store's folder"))
    if expected_version is not None:
        configure_jax(cache_dir)
        why = check_worker(expected_version, context)
        if why:
            return Unfit(_this_worker(), why)
    # A task cancelled while it runs (its driver interrupted or gone) cannot be
    # stopped by Dask; it stops itself at the next step instead: no compute, no
    # write. Should its value reach a driver after all, the batch stays pending.
    if _cancelled():
        return CancelledError("cancelled before it computed")
    result = run_batch_task(batch_fn, points, context, cache_dir)
    result = checked_or_failed(result, schema, n)
    if _cancelled():
        return CancelledError("cancelled before it wrote its batch")
    try:
        group = _open_store_once(store, store_token)
        if group is None:
            return WriteFailed(_unseen_store(store, f"did not find the store after waiting "
                                                    f"{STORE_WAIT_SECONDS:g} s for it"), result.seconds)
        return write_batch_data(group, batch_slice, result)
    except CancelledError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - the driver decides; a worker must not die of it
        return WriteFailed(_picklable(exc), result.seconds)


def run_and_write_batches(batch_fn: Callable, points: dict, context: Any, cache_dir: str,
                          store: str, batch_slices: list[slice], schema: Schema,
                          store_token: str | None = None,
                          expected_version: str | None = None) -> list | Unfit:
    """The Dask task of a run of consecutive batches: :func:`run_and_write_batch` for each, in order.

    One task for several batches spares the driver and the scheduler their
    cost per task (see :func:`sweep.run.driver.task_runs`); each batch is
    still computed, checked and written on its own, so a task holds one
    batch's results at a time.

    Args:
        batch_fn, context, cache_dir, store, schema, store_token,
            expected_version: as for :func:`run_and_write_batch`.
        points: parameter -> values of the task's points, from the first
            batch's first point to the last batch's last.
        batch_slices: the batches' points in the store, consecutive.

    Returns:
        One outcome per batch, as :func:`run_and_write_batch` returns them
        (a batch cancelled while the task ran is a ``CancelledError`` and so
        is every later one); the list stops after a :class:`WriteFailed`.
        An :class:`Unfit` alone when this worker failed its check (nothing
        was computed).
    """
    outcomes: list = []
    start = batch_slices[0].start
    for i, sl in enumerate(batch_slices):
        part = {k: v[sl.start - start:sl.stop - start] for k, v in points.items()}
        outcome = run_and_write_batch(batch_fn, part, context, cache_dir, store, sl, schema, store_token,
                                      expected_version if i == 0 else None)
        if isinstance(outcome, Unfit):
            return outcome
        outcomes.append(outcome)
        if isinstance(outcome, WriteFailed):
            break
    return outcomes


def _cancelled() -> bool:
    """Whether the Dask task running in this thread has been cancelled (False outside a Dask worker)."""
    try:
        from distributed import get_worker

        worker = get_worker()
        task = worker.state.tasks.get(worker.get_current_task())
    except Exception:  # noqa: BLE001 - not in a worker's task: the driver's own process
        return False
    return task is not None and task.state == "cancelled"


_OPEN_STORES: dict = {}

#: How long a worker waits, its batch computed, for the store it writes to be there: a new
#: store's template is written by the driver while the first batches compute.
STORE_WAIT_SECONDS = 600.0


def _open_store_once(store: str, token: str | None):
    """The store's group, opened once per worker process for each (path, token); None if it never came.

    With a token, the store at the path must be that store, its template
    whole (:func:`sweep.store.template_ready`): the worker waits for it up to
    :data:`STORE_WAIT_SECONDS`, and stops waiting if its task is cancelled.

    Raises:
        CancelledError: the task was cancelled while it waited.
    """
    if token is None:
        return store
    key = (store, token)
    if key not in _OPEN_STORES:
        deadline, pause = time.monotonic() + STORE_WAIT_SECONDS, 0.002
        while not template_ready(store, token):
            if _cancelled():
                raise CancelledError("cancelled while it waited for the store")
            if time.monotonic() > deadline:
                return None
            time.sleep(pause)
            pause = min(2 * pause, 0.25)
        if len(_OPEN_STORES) >= 8:
            _OPEN_STORES.clear()
        _OPEN_STORES[key] = writer_group(store)
    return _OPEN_STORES[key]


def _unseen_store(store: str, what: str) -> InputError:
    """The error of a worker that cannot reach the store (``what`` says how it found out)."""
    return InputError(
        f"the Dask worker on {socket.gethostname()} {what}: the workers write their batches "
        f"themselves, so --out must be on a file system they share with the driver, or an object "
        f"store URL such as s3://bucket/sweep.zarr", file=store)


def _picklable(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling (to reach the driver), else its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any unpicklable exception
        return RuntimeError(f"{type(exc).__name__}: {exc}")
