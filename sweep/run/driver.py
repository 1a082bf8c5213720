"""The driver of a sweep: plan the store, submit tasks of consecutive batches, commit them as tasks complete.

The driver is the only writer of commit records; a batch's data never pass
through it (its worker wrote them, :mod:`sweep.run.worker`), except for a
batch lost with its worker, whose failure the driver writes itself.

A Dask task costs the driver and the scheduler a few milliseconds of CPU
whatever it does, as much as committing several batches: a task therefore
runs several consecutive batches while many are left per worker thread, and
one batch each towards the end, so that the last tasks still spread over
the workers (:func:`task_runs`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import time
import uuid
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import zarr

from solver import status as st
from sweep.log import get_logger
from sweep.location import StoreLocation
from sweep.run.cluster import (WORKER_TIMEOUT, BackgroundCall, ClientStart, WorkerWatch, check_dask_target,
                               cluster_workers, finish_worker_builds, memory_kills, say_dashboard, start_client,
                               worker_lost_message, worker_threads)
from sweep.run.worker import (JaxSetup, Unfit, WriteFailed, checked_or_failed, configure_jax, default_jax_cache_dir,
                              package_version, run_and_write_batch, run_and_write_batches)
from sweep.store import (COMMIT_GROUP, BatchCommitter, BatchResult, Schema, batch_slices, commit_chunk_length,
                         plan_store, store_token, write_batch_data, writer_group)

__all__ = ["format_seconds", "interrupt", "SweepSummary", "run_sweep", "ProgressLog", "task_runs",
           "TASK_MOST_BATCHES", "TASK_SHARE"]

log = get_logger("sweep")

#: The most batches one task runs: a chunk of commit records, so that a
#: task's batches are committed with one write.
TASK_MOST_BATCHES = COMMIT_GROUP
#: A task takes at most this fraction of the batches left per worker thread
#: (guided self-scheduling): the tasks shrink as the sweep ends, down to one
#: batch, so that no worker is left with a long task while the others idle.
TASK_SHARE = 1 / 8


def task_runs(batches: list[int], threads: int, most: int = TASK_MOST_BATCHES,
              share: float = TASK_SHARE, boundary: int = 1, size: int | None = None) -> list[list[int]]:
    """The batches of a sweep grouped into tasks: runs of consecutive batch indices, in order.

    Each run holds ``floor(share * left / threads)`` batches, ``left`` being
    the batches not yet grouped, at least one and at most ``most``; a run
    never spans a gap in ``batches`` (a resumed sweep's pending batches), nor
    a multiple of ``boundary`` (the chunks of commit records: a run's batches
    are then committed with one write).

    Args:
        batches: the batch indices to run, ascending.
        threads: the worker threads known (0 or less: unknown, one batch a task).
        most: the most batches a run holds.
        share: see :data:`TASK_SHARE`.
        boundary: batches per chunk of commit records (1: no boundary).
        size: runs of this many batches (gaps and boundaries still cut
            them) instead of the guided sizes.

    Returns:
        The runs, which together are ``batches``.
    """
    runs: list[list[int]] = []
    i, n = 0, len(batches)
    while i < n:
        want = size or (max(1, min(most, int(share * (n - i) / threads))) if threads > 0 else 1)
        run = [batches[i]]
        while (len(run) < want and i + len(run) < n and batches[i + len(run)] == run[-1] + 1
               and (boundary <= 1 or batches[i + len(run)] % boundary)):
            run.append(batches[i + len(run)])
        runs.append(run)
        i += len(run)
    return runs


def format_seconds(s: float) -> str:
    """A duration for people: seconds, minutes or hours, 3 significant digits."""
    return f"{s:.3g} s" if s < 120 else f"{s / 60:.3g} min" if s < 7200 else f"{s / 3600:.3g} h"


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
        store_by_status: status name -> points in the whole store afterwards
            (the points of batches not done count as pending).
        batch_seconds: batch index -> compute time on its worker.
        batch_compile_seconds: batch index -> the part of it spent tracing
            and compiling (NaN where not measured: a batch lost with its
            worker).
        wall_seconds: from the first submission to the last write.
        startup_seconds: store preparation and cluster start.
        total_seconds: the whole call, start-up included.
        stopped: why the run stopped before its batches were done (a
            cluster without workers), or empty.
        threads: worker threads seen (for the overhead).
        tasks: Dask tasks submitted (each runs one or several consecutive
            batches, :func:`task_runs`; a task sent again counts again).
        overhead_fraction: ``1 - sum(batch_seconds) / (wall_seconds * threads)``,
            the share of the workers' time not spent inside batch functions
            (scheduling, transfer, writing, idle workers at the end).
        builds: the workers' tiered compiles (:func:`sweep.run.cluster.finish_worker_builds`),
            counted after the run waited for their optimised builds; empty
            where this run shared its client or ran in this process.
        build_wait_seconds: how long it waited for them, after its last batch.
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
    batch_compile_seconds: dict[int, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    startup_seconds: float = 0.0
    threads: int = 1
    tasks: int = 0
    overhead_fraction: float = 0.0
    total_seconds: float = 0.0
    stopped: str = ""
    builds: dict[str, int] = field(default_factory=dict)
    build_wait_seconds: float = 0.0

    @property
    def compile_seconds(self) -> float:
        """The workers' seconds spent tracing and compiling, summed over this run's batches."""
        return float(sum(s for s in self.batch_compile_seconds.values() if math.isfinite(s)))

    @property
    def solve_seconds(self) -> float:
        """The rest of the workers' batch time, summed over this run's batches."""
        busy = sum(s for s in self.batch_seconds.values() if math.isfinite(s))
        return max(0.0, float(busy) - self.compile_seconds)

    def _build_wait(self) -> str:
        if not self.build_wait_seconds:
            return ""
        return f", {self.build_wait_seconds:.3g} s more for the optimised build of its programs"

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.store_by_status.items())
        per = (f"{np.mean(list(self.batch_seconds.values())):.3g} s/batch"
               if self.batch_seconds else "no batches run")
        lines = [f"{self.store}: {self.n_points} points in {self.n_batches} batches; "
                 f"this run wrote {len(self.batches_run)} batches ({self.points_run} points)"
                 + (f" in {self.tasks} Dask tasks" if self.tasks else ""),
                 f"store status: {counts}",
                 f"wall {format_seconds(max(self.total_seconds, self.wall_seconds + self.startup_seconds))} "
                 f"({self.startup_seconds:.3g} s store and cluster start-up, {self.wall_seconds:.3g} s "
                 f"running batches{self._build_wait()}), {per}, {self.threads} worker threads, "
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


def run_sweep(spec_like, batch_fn: Callable, context: Any, store_path, workers: int | None = None,
              scheduler: str | None = None, scheduler_file=None, cluster=None,
              mode: str = "resume", progress: bool = True, *, schema: Schema | None = None,
              attrs: Mapping | None = None, jax_cache_dir: str | None = None,
              verify: bool = True, client=None, progress_every: float | None = None,
              worker_timeout: float | None = None, task_batches: int | None = None) -> SweepSummary:
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
        cluster: a cluster YAML path (see :func:`sweep.run.cluster.load_cluster_config`) or a
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
        client: a running ``distributed.Client`` (:func:`sweep.run.cluster.dask_client`) to
            submit the batches to, kept open afterwards, or a function
            returning one, called only when there are batches to run;
            instead of ``workers``, ``scheduler``, ``scheduler_file`` and
            ``cluster`` (a structural sweep's groups share one).
        task_batches: batches per Dask task, fixed (at most one chunk of
            commit records); None (default): the guided sizes of
            :func:`task_runs`.

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
    if task_batches is not None and (not isinstance(task_batches, int) or task_batches < 1):
        raise ValueError(f"run_sweep: task_batches must be a whole number >= 1 or None, got {task_batches!r}")
    if client is not None and (workers == 0 or scheduler or scheduler_file or cluster):
        raise ValueError("run_sweep: give a client or workers/scheduler/scheduler_file/cluster, not both")
    if workers != 0 and client is None:
        cluster, cluster_file = check_dask_target(scheduler, scheduler_file, cluster)

    n_points = len(next(iter(points.values())))
    slices = batch_slices(n_points, batch)
    if getattr(spec_like, "n_batches", len(slices)) != len(slices):
        raise ValueError(f"the spec has {spec_like.n_batches} batches, but {n_points} points in "
                         f"batches of {batch} make {len(slices)}")
    # A new store (or one overwritten) has every batch to run: its cluster starts, and its
    # first batches compute, while its template is written (the workers wait for it, by
    # its token, only to write).  An existing store may have nothing left to run.
    fresh = workers != 0 and (mode == "overwrite" or not StoreLocation(store_path).exists())
    starting = template = committer = None
    if fresh and client is None:
        starting = ClientStart(workers, scheduler, scheduler_file, cluster, cluster_file)
    try:
        if fresh:
            if "://" not in store_path:
                # Workers look for the store's folder before they compute (see run_and_write_batch).
                os.makedirs(os.path.dirname(os.path.abspath(store_path)), exist_ok=True)
            store_id = uuid.uuid4().hex
            template = BackgroundCall(plan_store, store_path, spec_hash, points, schema, attrs, batch, mode,
                                      verify, store_id=store_id, name="mechsweep-template")
            todo, check = list(range(len(slices))), None
            token = store_token({"store_id": store_id, "sweep_hash": spec_hash})
            commit_chunk = commit_chunk_length(len(slices))
        else:
            todo, check = plan_store(store_path, spec_hash, points, schema, attrs, batch, mode, verify)
            group = zarr.open_group(store_path, mode="r+")
            token = store_token(group.attrs)
            committer = BatchCommitter(group) if todo else None
            commit_chunk = committer.records.chunks[0] if todo else 1
        # The batches this process writes go through a group that records the bytes it
        # writes: their chunk table is computed from them, not read back (on an object
        # store two requests a chunk).  Opened once, when first needed.
        writer = functools.cache(lambda: writer_group(store_path))
    except BaseException:
        if starting is not None:
            starting.close()
        raise
    if starting is not None and not todo:
        starting.close()
        starting = None

    def store_ready() -> None:
        # The template written (or its error raised here) before the first commit.
        nonlocal committer
        if template is not None:
            template.result()
            committer = BatchCommitter(zarr.open_group(store_path, mode="r+"))

    summary = SweepSummary(store_path, n_points, len(slices))
    if check is not None:
        summary.batches_damaged = dict(check.damaged)
    run_codes: list[np.ndarray] = []
    failed_so_far = [0]
    # The store's status as the check read it (batches not done: pending), kept up to date
    # here: reading every status chunk back at the end cost the driver ~1 ms a batch.
    store_codes = (check.codes.copy() if check is not None and check.codes is not None
                   else np.full(n_points, st.PENDING, dtype=np.int8))

    def finish(run: list[int], outcomes: list) -> None:
        # A task's batches arrive written (committed here, with one write where they share a
        # chunk of commit records), not writable (stop the run, once those before are
        # committed), cancelled (left pending), or lost with their worker (written here).
        written, failed_write = [], None
        with _writing_a_batch():
            for index, outcome in zip(run, outcomes):
                if isinstance(outcome, CancelledError):
                    summary.batches_left.append(index)
                    continue
                if isinstance(outcome, WriteFailed):
                    failed_write = outcome.error
                    break
                if isinstance(outcome, BatchResult):
                    sl = slices[index]
                    outcome = write_batch_data(writer(), sl, checked_or_failed(outcome, schema, sl.stop - sl.start))
                written.append(outcome)
            if written:
                committer.commit_all(written)
        for outcome in written:
            summary.batches_run.append(outcome.index)
            summary.batch_seconds[outcome.index] = float(outcome.seconds)
            summary.batch_compile_seconds[outcome.index] = float(getattr(outcome, "compile_seconds", math.nan))
            run_codes.append(outcome.status)
            store_codes[slices[outcome.index]] = outcome.status
        if written:
            failed_so_far[0] += int(st.is_failure(np.concatenate([w.status for w in written])).sum())
        bar.update(len(written))
        failed = failed_so_far[0]
        if failed:
            bar.set_postfix(failed=failed)
        if log is not None and written:
            log.batch_done(len(summary.batches_run), failed)
        if failed_write is not None:
            raise failed_write

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
                finish([index], [run_and_write_batch(batch_fn, {k: v[sl] for k, v in points.items()},
                                                     context, cache_dir, writer(), sl, schema)])
            summary.wall_seconds = time.perf_counter() - t0
        else:
            summary.startup_seconds, summary.wall_seconds, summary.threads = _run_dask(
                todo, slices, points, batch_fn, context, cache_dir, finish, summary, store_path, schema,
                token, commit_chunk, task_batches,
                workers, scheduler, scheduler_file, cluster, cluster_file, t_start, client,
                WORKER_TIMEOUT if worker_timeout is None else worker_timeout, starting, store_ready)
    finally:
        bar.close()
        if template is not None:
            # A run stopped early (interrupted) lets its template finish: a daemon thread cut off at
            # the interpreter's exit would leave its temporary folder behind.
            template.wait()

    if run_codes:
        summary.by_status = _counts(np.concatenate(run_codes))
        summary.points_run = int(sum(len(c) for c in run_codes))
    summary.store_by_status = _counts(store_codes)
    busy = sum(summary.batch_seconds.values())
    if summary.wall_seconds > 0:
        summary.overhead_fraction = max(0.0, 1.0 - busy / (summary.wall_seconds * summary.threads))
    summary.total_seconds = time.perf_counter() - t_start
    return summary


class ProgressLog:
    """Progress lines for runs without a terminal (batch jobs' logs).

    A line at a batch's completion when ``every`` seconds have passed since
    the last one (and at the last batch): batches written of those planned,
    failed points so far, time taken and an estimate of the time left.  The
    lines are ``INFO`` records of the ``mechsweep.sweep`` logger (the command
    line shows them on stderr), or ``[mechsweep] ...`` lines written to
    ``stream`` when one is given.
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
        line = (f"{self.label}: {done}/{self.total} batches written "
                f"({100 * done / max(self.total, 1):.0f}%), {failed} failed points, "
                f"{format_seconds(spent)} so far" + (f", about {format_seconds(left)} left"
                                                      if done < self.total else ""))
        if self.stream is not None:
            print(f"[mechsweep] {line}", file=self.stream, flush=True)
        else:
            log.info(line)


def _run_dask(todo, slices, points, batch_fn, context, cache_dir, finish, summary, store_path, schema,
              store_token, commit_chunk, task_batches, workers, scheduler, scheduler_file, cluster, cluster_file,
              t_start, client=None, worker_timeout: float = 0.0, starting: ClientStart | None = None,
              store_ready: Callable[[], None] = lambda: None):
    """Submit the batches (in tasks of :func:`task_runs`) and commit them as they complete; (startup, wall, threads).

    With a ``client``, the batches go to it and it stays open (its owner
    registered :class:`JaxSetup`); else a client is made here (or taken
    from ``starting``, begun while the store was prepared) and closed.
    ``store_ready`` is called once the tasks are submitted, before the
    first commit: it waits for a new store's template.
    """
    from distributed import KilledWorker, as_completed

    shared = client is not None
    own = None
    if callable(client):
        client = client()
    if not shared:
        client, own = (starting.result() if starting is not None
                       else start_client(workers, scheduler, scheduler_file, cluster, cluster_file))
    futures, watch = {}, None
    try:
        if not shared:
            say_dashboard(client)
            from distributed import LocalCluster

            # The LocalCluster started here has one single-threaded worker per
            # core: pin each to its own core.  Workers started here are this
            # run's own: they keep the memory a batch frees for the next one.
            client.register_plugin(JaxSetup(cache_dir, pin=isinstance(own, LocalCluster),
                                            own_workers=own is not None, tiered=True))
        startup = time.perf_counter() - t_start
        t0, since = time.perf_counter(), time.time()
        batch_size = max(sl.stop - sl.start for sl in slices) if len(slices) else 1
        waited: set = set()     # lost workers whose nanny's memory event was waited for
        run_id = uuid.uuid4().hex[:8]
        version = package_version()
        unfit: dict[str, str] = {}

        def submit(run, attempt=0, **where):
            sls = [slices[i] for i in run]
            span = slice(sls[0].start, sls[-1].stop)
            fut = client.submit(run_and_write_batches, batch_fn,
                                {k: v[span] for k, v in points.items()}, context, cache_dir,
                                store_path, sls, schema, store_token, version,
                                key=f"mechsweep-batch-{run[0]}-{run_id}-{attempt}", pure=False, **where)
            futures[fut.key] = (run, fut)
            summary.tasks += 1
            return fut

        known = worker_threads(client, least=0)
        for run in task_runs(todo, known, boundary=commit_chunk, size=task_batches):
            submit(run)
        store_ready()
        threads = max(known, 1)
        watch = WorkerWatch(client, lambda: [f for _, f in list(futures.values())], worker_timeout,
                            after_first=cluster is not None)
        # Results are fetched by as_completed's own thread as tasks finish, not one by one here.
        done = as_completed([f for _, f in futures.values()], with_results=True, raise_errors=False)
        for fut, result in done:
            run = futures.pop(fut.key)[0]
            fut.release()
            if isinstance(result, tuple) and len(result) == 3 and isinstance(result[1], BaseException):
                result = result[1]                       # an erred task: (type, exception, traceback)
            if isinstance(result, CancelledError):
                summary.batches_left += run
                continue
            if isinstance(result, Unfit):
                fit = _use_fit_workers(client, unfit, result)
                if fit:
                    attempt = int(fut.key.rsplit("-", 1)[1]) + 1
                    done.add(submit(run, attempt, workers=fit, allow_other_workers=False))
                    continue
                summary.stopped = ("no worker passed its check: " + "; ".join(
                    f"{w}: {why}" for w, why in unfit.items()))
                summary.batches_left += run + [i for r, _ in futures.values() for i in r]
                client.cancel([f for _, f in futures.values()])
                futures.clear()
                break
            if isinstance(result, KilledWorker):
                result = _lost_batches(client, result, [slices[i].stop - slices[i].start for i in run],
                                       batch_size, since, run, waited)
            elif isinstance(result, BaseException):  # infrastructure errors become data
                result = [BatchResult.failed(slices[i].stop - slices[i].start, st.ERROR,
                                             f"{type(result).__name__}: {result}") for i in run]
            finish(run, result)
        watch.stop()
        summary.stopped = summary.stopped or watch.reason
        wall = time.perf_counter() - t0
        threads = max(threads, worker_threads(client))
        if not shared:  # a shared client's owner waits for its workers' builds when it is done with them
            summary.builds, summary.build_wait_seconds = finish_worker_builds(client)
        return startup, wall, threads
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


def _lost_batches(client, exc, sizes: list[int], batch: int, since: float, run: list[int],
                  waited: set) -> list[BatchResult]:
    """The failed results of a task's batches whose workers died (``KilledWorker``), saying whether memory killed them.

    The nanny's event may come a moment after the loss: it is waited for
    (2 s at most) once per lost worker, not once per task it held.
    """
    worker = getattr(getattr(exc, "last_worker", None), "address", None)
    wait = 0.0 if worker in waited else 2.0
    waited.add(worker)
    # ``since`` less a minute: the scheduler's clock may be another host's.
    message = worker_lost_message(exc, memory_kills(client, since - 60.0, wait=wait, worker=worker), batch)
    if "killed for memory" in message:
        which = f"batch {run[0]}" if len(run) == 1 else f"batches {run[0]}-{run[-1]}"
        log.warning(f"{which}: {message}")
    return [BatchResult.failed(n, st.WORKER_LOST, message) for n in sizes]


def _quiet_shutdown() -> None:
    """Silence the logs of Dask's event loop while an interrupted run closes its cluster."""
    import logging

    for name in ("tornado.application", "tornado.general", "asyncio", "distributed"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _use_fit_workers(client, unfit: dict, result: Unfit) -> list[str]:
    """Note a worker that failed its check (saying so once); the workers still fit."""
    if result.worker not in unfit:
        unfit[result.worker] = result.reason
        log.warning(f"worker {result.worker} is not used for this sweep: {result.reason}")
    workers = list(cluster_workers(client))
    return [w for w in workers if w not in unfit]
