"""Where a sweep's Dask work runs: cluster files, clusters, clients, a watch for a cluster without workers, and why a worker was lost."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from solver.errors import InputError, format_bytes
from solver.models.yamlio import load_yaml
from sweep.file_schemas import CLUSTER_KEYS, ClusterFile
from sweep.run.worker import JaxSetup, default_jax_cache_dir, tiered_report
from sweep.log import get_logger
from sweep.yamlschema import validate

__all__ = [
    "CLUSTER_KEYS", "local_cores", "load_cluster_config", "make_cluster", "check_dask_target", "start_client",
    "BackgroundCall", "ClientStart",
    "dask_client", "finish_worker_builds", "WORKER_TIMEOUT", "WorkerWatch", "say_dashboard", "cluster_workers",
    "worker_threads",
    "MEMORY_RESTART_EVENT", "memory_kills", "worker_lost_message",
]

log = get_logger("sweep")



def local_cores() -> int:
    """The cores this process may use (the LocalCluster's default worker count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


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
    # The one YAML reader (YAML 1.2 scalars, duplicate keys refused, input limits).
    config, loc = load_yaml(Path(path))
    if not isinstance(config, dict):
        raise InputError(f"expected {ClusterFile.what}", file=loc.file)
    # Checked against the declared schema; its messages name the file, the key and its line.
    validate(ClusterFile, config, loc)
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


def check_dask_target(scheduler=None, scheduler_file=None, cluster=None):
    """Check where Dask work would run, before anything is computed or written.

    Returns:
        ``(cluster config or None, its file or None)``.

    Raises:
        InputError: more than one of scheduler, scheduler file and cluster;
            a missing scheduler file; a bad cluster file.
    """
    return _check_target(scheduler, scheduler_file, cluster)


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


def start_client(workers, scheduler, scheduler_file, cluster, cluster_file):
    """A Dask client on the given scheduler, scheduler file or cluster, else on a new LocalCluster.

    Args:
        workers: LocalCluster worker processes (default: the cores this
            process may use), or the workers to scale a cluster config
            without ``scale``.
        scheduler, scheduler_file: as for :func:`sweep.run.driver.run_sweep`.
        cluster, cluster_file: a checked cluster config and its file
            (:func:`check_dask_target`), or None.

    Returns:
        ``(client, cluster)``: the cluster is the one started here (the
        caller closes it), None for a scheduler it only connects to.
    """
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


class BackgroundCall:
    """``fn(*args, **kwargs)`` begun in a thread; :meth:`result` waits for it and returns or raises what it did.

    A sweep's start-up overlaps its slow parts with this: the cluster's
    start (:class:`ClientStart`) and a new store's template, which workers
    need only when they write their first batch.

    Args:
        fn: the function.
        *args, **kwargs: its arguments.
        name: the thread's name.
    """

    def __init__(self, fn: Callable, *args, name: str = "mechsweep-background", **kwargs):
        self._result = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._call, args=(fn, args, kwargs), name=name, daemon=True)
        self._thread.start()

    def _call(self, fn, args, kwargs) -> None:
        try:
            self._result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread by result()
            self._error = exc

    def result(self):
        """What the call returned, once it has.

        Raises:
            Whatever the call raised.
        """
        self.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self) -> None:
        """Wait for the call to end, whatever it does (a caller that stops early lets it finish, not die)."""
        self._thread.join()


class ClientStart(BackgroundCall):
    """:func:`start_client` begun in a thread, so that the caller can prepare a store meanwhile.

    A ``LocalCluster`` takes seconds to start its worker processes, and a
    new sweep store's template takes from a tenth of a second (a local
    folder) to seconds (an object store, request by request): the sweep
    prepares its store while its cluster starts.

    Args:
        *args: as for :func:`start_client`.
    """

    def __init__(self, *args):
        super().__init__(start_client, *args, name="mechsweep-client-start")

    def close(self) -> None:
        """Wait for the start, then close the client and the cluster it started (for a run with nothing to do)."""
        self.wait()
        if self._result is not None:
            client, own = self._result
            client.close()
            if own is not None:
                own.close()


@contextlib.contextmanager
def dask_client(workers=None, scheduler=None, scheduler_file=None, cluster=None,
                jax_cache_dir: str | None = None, tiered: bool = False):
    """A Dask client on the same kind of cluster as sweeps, closed on exit.

    Other task-parallel commands (``mechsweep design``'s starts) use it: a
    LocalCluster of single-threaded worker processes, each pinned to a core,
    by default; else the given scheduler, scheduler file or cluster file.
    Every worker gets :class:`JaxSetup` (float64, the persistent
    compilation cache).

    Args:
        workers: LocalCluster worker processes (default: the local cores).
        scheduler, scheduler_file, cluster: as for :func:`sweep.run.driver.run_sweep`.
        jax_cache_dir: the workers' compilation cache (default
            :func:`default_jax_cache_dir`).
        tiered: the workers start their programs on quick builds
            (:class:`JaxSetup`), and on leaving the block the client waits
            for the optimised builds still compiling
            (:func:`finish_worker_builds`): for a sweep's groups, not for a
            design's starts, whose result would wait for those builds.

    Yields:
        the ``distributed.Client``.

    Raises:
        InputError: see :func:`check_dask_target`.
    """
    from distributed import LocalCluster

    cluster, cluster_file = _check_target(scheduler, scheduler_file, cluster)
    client, own = start_client(workers, scheduler, scheduler_file, cluster, cluster_file)
    try:
        client.register_plugin(JaxSetup(jax_cache_dir or default_jax_cache_dir(),
                                        pin=isinstance(own, LocalCluster), own_workers=own is not None,
                                        tiered=tiered))
        yield client
        if tiered:
            finish_worker_builds(client)
    finally:
        client.close()
        if own is not None:
            own.close()


def finish_worker_builds(client, poll: float = 0.5) -> tuple[dict[str, int], float]:
    """Wait, saying so, for the optimised builds the workers are still compiling (:mod:`solver.tiered`).

    A sweep's workers start each program on a quick build and compile its
    optimised build once per host (:class:`~sweep.run.worker.JaxSetup`).  A
    short sweep can be done before that build is: the wait puts it in the
    compilation cache, so that later sweeps start on it.  Its results are
    complete and committed by then.

    Args:
        client: the sweep's ``distributed.Client``, before its cluster closes.
        poll: seconds between two looks at the workers.

    Returns:
        ``(counts, seconds)``: the workers' counts of :data:`solver.tiered.stats`,
        summed, with ``pending`` (builds left compiling: non-zero only after
        Ctrl-C or SIGTERM skipped the wait, or a worker could not be asked),
        empty where no worker answered; and the seconds waited.
    """
    def counts() -> dict[str, int]:
        total: dict[str, int] = {}
        for report in client.run(tiered_report).values():
            for key, n in report.items():
                total[key] = total.get(key, 0) + n
        return total

    try:
        total = counts()
    except Exception:  # noqa: BLE001 - a worker gone or a scheduler away: nothing to wait for
        return {}, 0.0
    if not total.get("pending"):
        return total, 0.0
    log.info("the results are complete; the workers are compiling the optimised build of their programs for "
             "later runs (Ctrl-C skips this)")
    start = time.perf_counter()
    try:
        while total.get("pending"):
            time.sleep(poll)
            total = counts()
    except KeyboardInterrupt:
        log.info("skipped: a later run compiles the optimised build again")
        # The compiling worker ends only when its nanny kills it, a few seconds
        # later, with a warning that would only repeat this.
        logging.getLogger("distributed.nanny").setLevel(logging.ERROR)
        return total, time.perf_counter() - start
    except Exception:  # noqa: BLE001 - as above
        return total, time.perf_counter() - start
    seconds = time.perf_counter() - start
    log.info(f"optimised build ready after {seconds:.1f} s more")
    return total, seconds


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
            return len(cluster_workers(self.client))
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
                log.warning(f"the Dask cluster has no workers; waiting up to {self.timeout:g} s "
                            f"for one (--worker-timeout)")
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


def say_dashboard(client) -> None:
    """Note where the client's Dask dashboard is (an ``INFO`` record; nothing when it has none)."""
    try:
        log.info(f"Dask dashboard at {client.dashboard_link}")
    except Exception:  # noqa: BLE001 - a missing dashboard must not stop a sweep
        pass


def cluster_workers(client) -> dict:
    """The cluster's workers now (address -> the scheduler's information on each), asked of the scheduler.

    Not ``client.scheduler_info()``: that fetches the scheduler's identity
    into an attribute of the client and returns the attribute, which the
    client's own refresh (every ``distributed.client.scheduler-info-interval``,
    on its event loop) replaces with an identity that lists no workers.  A
    call that returned just after such a refresh saw an empty cluster, and a
    sweep with one unfit worker stopped ("no worker passed its check")
    beside a fit one.

    Args:
        client: a synchronous ``distributed.Client``.

    Returns:
        dict of the workers' information by address (empty when there is none).

    Raises:
        OSError: the scheduler cannot be reached.
    """
    return dict(client.sync(client.scheduler.identity, n_workers=-1).get("workers") or {})


def worker_threads(client, least: int = 1) -> int:
    """The worker threads the client's cluster has now, at least ``least`` (also when the scheduler does not say).

    The overhead estimate divides by it (``least=1``); the tasks' sizes take
    0 for a cluster whose workers are not there yet (one batch a task).
    """
    try:
        return max(least, sum(int(w.get("nthreads", 1))
                              for w in cluster_workers(client).values()))
    except Exception:  # noqa: BLE001 - an estimate: the overhead's, the tasks' sizes
        return least


#: The topic of the event a Dask nanny logs on the scheduler when it restarts its worker
#: for passing the terminate fraction of its memory limit (distributed.worker_memory:
#: ``{"worker": address, "pid": ..., "rss": bytes}``); the ``KilledWorker`` that follows
#: does not say why its workers died.
MEMORY_RESTART_EVENT = "worker-restart-memory"


def memory_kills(client, since: float, wait: float = 0.0, worker: str | None = None) -> dict[str, float]:
    """The workers that nannies restarted for memory since ``since``: address -> resident bytes then.

    Args:
        client: the sweep's Dask client.
        since: a ``time.time()``; older events (an earlier sweep's) are left out.
        wait: seconds to keep asking until ``worker`` is among them: a nanny
            sends its event and stops its worker at once, so the event can
            reach the scheduler after the worker's loss.
        worker: the worker to wait for.

    Returns:
        Address -> resident memory when it was stopped; empty where the
        scheduler has no such event (or cannot be asked).
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            events = client.get_events(MEMORY_RESTART_EVENT)
        except Exception:  # noqa: BLE001 - only used to explain a lost worker
            return {}
        kills = {e["worker"]: float(e.get("rss", 0) or 0) for t, e in events
                 if t >= since and isinstance(e, dict) and "worker" in e}
        if worker is None or worker in kills or time.monotonic() >= deadline:
            return kills
        time.sleep(0.1)


def worker_lost_message(exc: BaseException, kills: Mapping[str, float], batch: int) -> str:
    """The message of a batch lost with its workers (a ``KilledWorker``), naming memory when that killed them.

    Args:
        exc: the ``KilledWorker`` (its ``last_worker`` is the last worker
            that died running the task).
        kills: :func:`memory_kills`.
        batch: the sweep's points per batch (``Batch``).

    Returns:
        ``"KilledWorker: killed for memory: ..."`` with the worker, its
        memory and limit and the smaller ``Batch`` to try, when a nanny
        stopped the last worker for memory; else ``"KilledWorker: <Dask's
        text>"`` and what to do if memory was the cause after all (a
        process killed by the operating system, signal 9, leaves no reason).
    """
    last = getattr(exc, "last_worker", None)
    address = getattr(last, "address", None)
    half = f"; try Batch: {max(1, batch // 2)}" if batch > 1 else ""
    lower = f"lower Batch (now {batch}{half})"
    if address in kills:
        limit = getattr(last, "memory_limit", 0) or 0
        of_limit = f" of its {format_bytes(limit)} memory limit" if limit else ""
        return (f"KilledWorker: killed for memory: worker {address} held {format_bytes(kills[address])}"
                f"{of_limit} running this batch and was restarted by its nanny; {lower}, or give the "
                f"workers more memory; then run again with --retry-failed")
    return (f"KilledWorker: {exc} If the worker ran out of memory (the operating system kills such a "
            f"process with signal 9), {lower}, or give the workers more memory; then run again with "
            f"--retry-failed")
