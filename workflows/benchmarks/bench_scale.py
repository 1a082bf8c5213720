"""Scale benchmark of the sweep pipeline: one driver feeding N worker processes.

The real pipeline (:func:`sweep.run.run_sweep` with a ``distributed.Client``: a
``dask scheduler`` process, N ``dask worker`` processes of one thread each,
tasks of :func:`sweep.run.run_and_write_batches` sized by
:func:`sweep.run.task_runs`, the workers writing their batches into a local
Zarr store, the driver committing each task's batches) runs a
sweep whose batch function returns pre-computed results at once
(:mod:`scale_batch`), so nothing but the pipeline is measured. The results have
exactly the shapes of the real RSCR sweep (``configs/sweeps/rscr_lengths_angles.yaml``:
its real context is built, nothing compiled, and sent with every task), the
points are drawn in that sweep's box.

For each N (``--workers``, default 1,2,4,8,16,32,64), on a fresh cluster
(its start and the workers' imports are not timed), it prints:

- points/s: points / wall time of the ``run_sweep`` call (store
  preparation, tasks, commits);
- the Dask tasks the batches went in;
- the driver's CPU share (its process's CPU seconds / wall seconds, all its
  threads) and CPU per batch; the scheduler's CPU per task, and the workers'
  CPU per batch (their checks, writes, read-back and checksums);
- peak resident memory of the driver during the sweep (sampled) and of the
  largest worker (its peak over its life).

Then, for comparison, the old path's rate: the driver writing everything
itself (:func:`sweep.store.write_batch` of the same results, one process, no
Dask), and an extrapolation: the driver's CPU split into a cost per task and
a cost per batch (measured on one worker with tasks of 1 and of 32 batches,
``run_sweep(task_batches=k)``, and a sweep 4x as long in tasks of 32: see
:func:`task_split`), the ceiling for long sweeps (tasks of 32
batches, measured) and for a sweep of 100 batches per worker on 1,000 workers (the tasks
:func:`sweep.run.task_runs` would make), how many workers one driver could
feed at ``--point-ms`` per point and worker, and what the scheduler and the
storage would then have to sustain.

The scheduler runs in its own process (a LocalCluster's would share the
driver's, and its CPU time would count as the driver's). The workers run
without nannies (a nanny only supervises; it would double the processes).

Usage::

    .venv/bin/python workflows/benchmarks/bench_scale.py [--workers 1,2,4,8,16,32,64]
        [--batch 100] [--min-points 20000] [--points-per-worker 2000] [--point-ms 4.3]
        [--store-dir DIR] [--quick] [--out workflows/benchmarks/results/scale.txt]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from scale_batch import CannedContext, canned_batch, canned_result, peak_rss, warm  # noqa: E402

SWEEP_FILE = ROOT / "configs" / "sweeps" / "rscr_lengths_angles.yaml"
DEFAULT_WORKERS = (1, 2, 4, 8, 16, 32, 64)
QUICK_WORKERS = (1, 2)
MB = 1024 ** 2


# ------------------------------------------------------------------ cluster

class Cluster:
    """A ``dask scheduler`` and N ``dask worker`` processes on this machine, with a client.

    The processes are started with :data:`ROOT` and this folder on their
    ``PYTHONPATH`` (the tasks' functions are pickled by module name) and
    logged to ``log``. :meth:`close` ends them.
    """

    def __init__(self, n: int, folder: Path, timeout: float):
        from distributed import Client

        self.folder, self.procs = folder, []
        self.log = open(folder / f"cluster_{n}.log", "w")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT)] + ([env["PYTHONPATH"]]
                                                                      if env.get("PYTHONPATH") else []))
        scheduler_file = folder / f"scheduler_{n}.json"
        scheduler_file.unlink(missing_ok=True)
        self.scheduler = self._start([sys.executable, "-m", "distributed.cli.dask_scheduler",
                                      "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                      "--scheduler-file", str(scheduler_file)], env)
        deadline = time.monotonic() + timeout
        while not scheduler_file.exists():
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the scheduler did not start; see {self.log.name}")
            time.sleep(0.1)
        self.workers = [self._start([sys.executable, "-m", "distributed.cli.dask_worker",
                                     "--scheduler-file", str(scheduler_file), "--nthreads", "1",
                                     "--no-nanny", "--memory-limit", "0", "--no-dashboard",
                                     "--name", str(i), "--death-timeout", "120"], env)
                        for i in range(n)]
        try:
            self.client = Client(scheduler_file=str(scheduler_file), timeout=timeout)
            self.client.wait_for_workers(n, timeout=max(0.0, deadline - time.monotonic()) + 30 * n)
        except Exception:
            self.close()
            raise

    def _start(self, argv: list[str], env: dict) -> subprocess.Popen:
        proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def cpu_seconds(self) -> tuple[float, float]:
        """(scheduler, all workers) CPU seconds so far, user + system."""
        import psutil

        def cpu(proc) -> float:
            try:
                t = psutil.Process(proc.pid).cpu_times()
                return t.user + t.system
            except psutil.Error:
                return 0.0

        return cpu(self.scheduler), sum(cpu(p) for p in self.workers)

    def close(self) -> None:
        """Close the client, end the processes started here (terminate, then kill)."""
        client = getattr(self, "client", None)
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - the processes are ended below anyway
                pass
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


class RssPeak:
    """The peak resident memory of this process while in use, sampled by a thread."""

    def __init__(self, every: float = 0.05):
        import psutil

        self.proc, self.every, self.peak = psutil.Process(), every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> "RssPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


class SubmitClock:
    """A client that notes the wall and CPU clocks at its first ``submit``, passing all else through.

    ``run_sweep`` prepares the store (the template) before it submits the
    first task; that one-time cost is timed apart from the per-batch work.
    """

    def __init__(self, client):
        self._client = client
        self.at: tuple[float, float] | None = None

    def submit(self, *args, **kwargs):
        """``Client.submit``; the first call notes (perf_counter, process CPU seconds)."""
        if self.at is None:
            self.at = (time.perf_counter(), cpu_seconds())
        return self._client.submit(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def cpu_seconds() -> float:
    """This process's CPU seconds so far, all threads, user + system."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ------------------------------------------------------------------ measuring

@dataclass
class Run:
    """The figures of one sweep on N workers.

    The *task phase* runs from the first task's submission to the end of the
    ``run_sweep`` call; before it, the store's preparation (``prepare``).
    """

    workers: int
    points: int
    batches: int
    tasks: int
    wall: float              # the whole run_sweep call
    prepare: float           # of which before the first task
    prepare_cpu: float       # the driver's CPU then
    driver_cpu: float        # the driver's CPU in the task phase
    scheduler_cpu: float     # the whole call
    worker_cpu: float        # the whole call, all workers
    driver_rss: int          # peak during the call
    worker_rss: int          # the largest worker's peak over its life
    failed: int

    @property
    def tasks_wall(self) -> float:
        """Seconds of the task phase."""
        return self.wall - self.prepare

    @property
    def rate(self) -> float:
        """Points per second of the whole call."""
        return self.points / self.wall

    @property
    def tasks_rate(self) -> float:
        """Points per second of the task phase."""
        return self.points / self.tasks_wall

    @property
    def driver_ms_per_batch(self) -> float:
        """The driver's CPU per batch in the task phase, ms."""
        return 1e3 * self.driver_cpu / self.batches


def rscr_context():
    """The real RSCR sweep's spec and context (the model is loaded, nothing compiled)."""
    from sweep.pipeline import build_context
    from sweep.spec import load_sweep

    spec = load_sweep(SWEEP_FILE)
    return spec, build_context(spec)


def sweep_like(spec, n_points: int, batch: int, tag: str, seed: int = 0) -> SimpleNamespace:
    """A sweep of ``n_points`` points drawn uniformly in the box of ``spec``'s points."""
    from sweep.store import batch_slices

    rng = np.random.default_rng(seed)
    points = {name: rng.uniform(float(np.min(v)), float(np.max(v)), n_points)
              for name, v in spec.points.items()}
    return SimpleNamespace(points=points, batch=batch, hash=f"{spec.hash}-scale-{tag}",
                           title=f"scale benchmark ({tag})", n_points=n_points,
                           n_batches=len(batch_slices(n_points, batch)))


def points_for(n: int, args) -> int:
    """The sweep's size on ``n`` workers: ``max(--min-points, --points-per-worker x n)``."""
    return max(args.min_points, args.points_per_worker * n)


def measure(n: int, spec, context: CannedContext, args, work: Path, store: Path) -> Run:
    """Start a cluster of ``n`` workers, warm it, run one sweep through it, end it."""
    from sweep.run import run_sweep

    cluster = Cluster(n, work, timeout=args.start_timeout)
    try:
        client = cluster.client
        # Imports and the canned arrays before the clock starts (a real
        # sweep's workers are warm after their first batch too).
        client.run(warm, context, args.batch)
        # The first sweep on a fresh cluster pays one-time costs (the scheduler's and the
        # workers' first tasks, the Zarr codecs' first use): a small untimed one first.
        warm_store = work / f"warm_N{n}.zarr"
        run_sweep(sweep_like(spec, 2 * n * args.batch, args.batch, f"N={n} warm-up"), canned_batch,
                  context, warm_store, mode="overwrite", progress=False, client=client)
        shutil.rmtree(warm_store)
        like = sweep_like(spec, points_for(n, args), args.batch, f"N={n}")
        sched0, workers0 = cluster.cpu_seconds()
        clocked = SubmitClock(client)
        cpu0 = cpu_seconds()
        with RssPeak() as rss:
            t0 = time.perf_counter()
            summary = run_sweep(like, canned_batch, context, store, mode="overwrite", progress=False,
                                client=clocked)
            t1 = time.perf_counter()
        cpu1 = cpu_seconds()
        sched1, workers1 = cluster.cpu_seconds()
        worker_rss = max(client.run(peak_rss).values())
    finally:
        cluster.close()
    t_submit, cpu_submit = clocked.at or (t0, cpu0)
    failed = sum(k for name, k in summary.store_by_status.items() if name != "success")
    return Run(n, like.n_points, like.n_batches, summary.tasks, t1 - t0, t_submit - t0, cpu_submit - cpu0,
               cpu1 - cpu_submit, sched1 - sched0, workers1 - workers0, rss.peak, worker_rss,
               failed + like.n_points - summary.points_run)


@dataclass
class TaskSplit:
    """The driver's task-phase CPU on one worker: ms per task, per batch and per sweep, and a long sweep's per batch."""

    per_task: float
    per_batch: float
    per_sweep: float
    long_per_batch: float
    rows: list[str]


def task_split(spec, context: CannedContext, args, work: Path, repeats: int = 2, longer: int = 4) -> TaskSplit:
    """Measure the driver's task-phase CPU on 1 worker in three sweeps, alternately, and split it.

    ``run_sweep(task_batches=k)`` fixes the tasks' size.  The driver's CPU
    is modelled as ``F + T a + B b`` for T tasks of B batches in all (F: what
    a sweep's task phase costs whatever its size: starting the watch and the
    result threads, the last commit's wait).  Three sweeps give the three:
    B batches in tasks of ``TASK_MOST_BATCHES`` and in tasks of one (the same
    B, so F and ``B b`` cancel: ``a``), and ``longer`` x B batches in tasks of
    ``TASK_MOST_BATCHES``.  The first and the last give a long sweep's cost
    per batch directly: the difference of their CPU over the difference of
    their batches, F cancelled (it is not a cost of each batch).  Medians
    over ``repeats`` runs each.
    """
    from sweep.run import TASK_MOST_BATCHES, run_sweep

    short = sweep_like(spec, args.min_points, args.batch, "split")
    long = sweep_like(spec, longer * args.min_points, args.batch, "split, long")
    cases = [("big", short, TASK_MOST_BATCHES), ("one", short, 1), ("long", long, TASK_MOST_BATCHES)]
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    tasks: dict[str, int] = {}
    cluster = Cluster(1, work, timeout=args.start_timeout)
    try:
        client = cluster.client
        client.run(warm, context, args.batch)
        warm_store = work / "split_warm.zarr"
        run_sweep(sweep_like(spec, 2 * args.batch, args.batch, "split warm-up"), canned_batch, context,
                  warm_store, mode="overwrite", progress=False, client=client)
        shutil.rmtree(warm_store)
        for rep in range(repeats):
            for name, like, k in cases:
                store = work / f"split_{name}_{rep}.zarr"
                clocked = SubmitClock(client)
                summary = run_sweep(like, canned_batch, context, store, mode="overwrite", progress=False,
                                    client=clocked, task_batches=k)
                cpu[name].append(1e3 * (cpu_seconds() - clocked.at[1]))
                tasks[name] = summary.tasks
                shutil.rmtree(store)
    finally:
        cluster.close()
    big, one, longest = (statistics.median(cpu[name]) for name, _, _ in cases)
    b_short, b_long = short.n_batches, long.n_batches
    per_task = (one - big) / (tasks["one"] - tasks["big"])
    per_batch = (longest - big - per_task * (tasks["long"] - tasks["big"])) / (b_long - b_short)
    per_sweep = big - per_task * tasks["big"] - per_batch * b_short
    long_per_batch = (longest - big) / (b_long - b_short)
    rows = [f"  tasks of {k:2d} batches: {tasks[name]:3d} tasks for {like.n_batches} batches, driver CPU in the "
            f"task phase {', '.join(f'{c:.0f}' for c in cpu[name])} ms "
            f"({statistics.median(cpu[name]) / like.n_batches:.2f} ms a batch)" for name, like, k in cases]
    return TaskSplit(per_task, per_batch, per_sweep, long_per_batch, rows)


def old_path(spec, context: CannedContext, n_points: int, batch: int, store: Path) -> tuple[float, int]:
    """Points/s of the driver writing everything (:func:`sweep.store.write_batch`), one process.

    The store's preparation is not timed; the results are made before the clock starts.

    Returns:
        (points per second, points).
    """
    import zarr

    from sweep.store import batch_slices, plan_store, write_batch

    like = sweep_like(spec, n_points, batch, "old path")
    plan_store(str(store), like.hash, like.points, context.schema, dict(context.attrs), batch,
               "overwrite", False)
    group = zarr.open_group(str(store), mode="r+")
    slices = batch_slices(n_points, batch)
    results = {sl.stop - sl.start: canned_result(context.schema, sl.stop - sl.start, context.seed)
               for sl in slices}
    t0 = time.perf_counter()
    for sl in slices:
        write_batch(group, sl, results[sl.stop - sl.start])
    return n_points / (time.perf_counter() - t0), n_points


def store_files(path: Path) -> tuple[float, float]:
    """(chunk files, bytes on disk) of a store's first batch, from its commit record."""
    import zarr

    record = json.loads(str(zarr.open_group(str(path), mode="r")["batch_commit"][0]))
    return float(len(record["chunks"])), float(sum(entry[0] for entry in record["chunks"].values()))


# ------------------------------------------------------------------ report

def machine_lines(cores_used: int) -> list[str]:
    """The header's machine description: CPU, cores, memory, load, versions."""
    import dask
    import distributed
    import psutil
    import zarr

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    mem = psutil.virtual_memory()
    load = os.getloadavg()
    return [f"machine: {platform.node()}, {platform.machine()} {platform.system()}, {model or 'cpu ?'}; "
            f"{os.cpu_count()} cores ({cores_used} usable by this process), "
            f"{mem.total / 1024 ** 3:.1f} GiB memory ({mem.available / 1024 ** 3:.1f} GiB available); "
            f"load average at start {load[0]:.2f}",
            f"python {platform.python_version()}, dask {dask.__version__}, distributed "
            f"{distributed.__version__}, zarr {zarr.__version__}"]


def table(runs: list[Run]) -> list[str]:
    """The per-N table."""
    cols = [("N", 3, lambda r: f"{r.workers}"),
            ("points", 7, lambda r: f"{r.points}"),
            ("batches", 7, lambda r: f"{r.batches}"),
            ("tasks", 5, lambda r: f"{r.tasks}"),
            ("prep s", 6, lambda r: f"{r.prepare:.2f}"),
            ("prep CPU s", 10, lambda r: f"{r.prepare_cpu:.2f}"),
            ("tasks s", 7, lambda r: f"{r.tasks_wall:.2f}"),
            ("points/s", 8, lambda r: f"{r.rate:.0f}"),
            ("tasks points/s", 14, lambda r: f"{r.tasks_rate:.0f}"),
            ("driver CPU", 10, lambda r: f"{100 * r.driver_cpu / r.tasks_wall:.0f}%"),
            ("driver ms/batch", 15, lambda r: f"{r.driver_ms_per_batch:.2f}"),
            ("sched CPU", 9, lambda r: f"{100 * r.scheduler_cpu / r.wall:.0f}%"),
            ("sched ms/task", 13, lambda r: f"{1e3 * r.scheduler_cpu / r.tasks:.2f}"),
            ("worker ms/batch", 15, lambda r: f"{1e3 * r.worker_cpu / r.batches:.1f}"),
            ("driver RSS MB", 13, lambda r: f"{r.driver_rss / MB:.0f}"),
            ("worker RSS MB", 13, lambda r: f"{r.worker_rss / MB:.0f}"),
            ("failed", 6, lambda r: f"{r.failed}")]
    head = " ".join(f"{name:>{width}}" for name, width, _ in cols)
    rows = [head, "-" * len(head)]
    for r in runs:
        rows.append(" ".join(f"{cell(r):>{width}}" for _, width, cell in cols))
    return rows


def extrapolation(runs: list[Run], old_rate: float, batch: int, point_ms: float,
                  files: float, batch_bytes: float, split: TaskSplit | None = None) -> list[str]:
    """What the measured per-batch costs imply for one driver and many workers.

    Args:
        runs: the measured runs.
        old_rate: the old path's points/s (driver writes everything).
        batch: points per batch.
        point_ms: compute time per point and worker, ms (``--point-ms``).
        files: chunk files per batch.
        batch_bytes: bytes on disk per batch.
        split: the driver's CPU per task and per batch (:func:`task_split`).
    """
    from sweep.run import TASK_MOST_BATCHES, task_runs

    driver = [r.driver_ms_per_batch for r in runs]
    sched = [1e3 * r.scheduler_cpu / r.tasks for r in runs]
    worker = [1e3 * r.worker_cpu / r.batches for r in runs]
    d, s, w = statistics.median(driver), statistics.median(sched), statistics.median(worker)
    batches_per_s = 1e3 / d
    ceiling = batches_per_s * batch
    per_worker = 1e3 / point_ms
    fed = ceiling / per_worker
    ns = ", ".join(str(r.workers) for r in runs)
    lines = [
        f"Extrapolation (medians over N = {ns}; CPU times, so they hold while the process has a core):",
        f"  driver CPU per batch: {d:.2f} ms (range {min(driver):.2f}-{max(driver):.2f} over N)",
        f"  driver-limited ceiling at these sweeps' task sizes: {batches_per_s:.0f} batches/s x {batch} points "
        f"= {ceiling:,.0f} points/s",
    ]
    which = "these sweeps"
    if split is not None:
        which = "long sweeps"
        per_task, per_batch, long = split.per_task, split.per_batch, split.long_per_batch
        big_b, big_n = 100 * 1000, 1000
        big_tasks = len(task_runs(list(range(big_b)), big_n))
        big = (per_task * big_tasks + per_batch * big_b) / big_b
        lines += [
            "  the driver's CPU split, on 1 worker with tasks of a fixed size (run_sweep(task_batches=k)):",
            *split.rows,
            f"  -> driver CPU = {split.per_sweep:.0f} ms a sweep + {per_task:.2f} ms a task + {per_batch:.2f} ms "
            f"a batch",
            f"  long sweeps (tasks of {TASK_MOST_BATCHES} batches): the longer sweep's CPU less the shorter's, "
            f"over the batches between: {long:.2f} ms a batch -> ceiling {1e3 / long * batch:,.0f} points/s",
            f"  1,000 workers, 100 batches each ({big_b:,} batches in {big_tasks:,} tasks by task_runs): "
            f"{big:.2f} ms a batch -> ceiling {1e3 / big * batch:,.0f} points/s; the scheduler would then run "
            f"{1e3 / big * big_tasks / big_b:,.0f} tasks/s",
        ]
        ceiling = 1e3 / long * batch
        fed = ceiling / per_worker
    lines += [
        f"  at {point_ms:g} ms per point and worker (--point-ms) a worker computes {per_worker:.0f} points/s:"
        f" one driver could feed about {fed:,.0f} workers ({which})",
        f"  old path (the driver writing every batch itself): {old_rate:,.0f} points/s -> about "
        f"{old_rate / per_worker:,.0f} workers; the driver-limited ceiling ({which}) is "
        f"{ceiling / old_rate:.1f}x that",
        f"  next limits at that ceiling ({ceiling / batch:,.0f} batches/s, "
        f"{ceiling / batch / TASK_MOST_BATCHES:,.0f} tasks/s):",
        f"    scheduler: {s:.2f} ms of its CPU per task measured here -> about "
        f"{(f'{1e3 / s:,.0f}' if s > 0 else 'n/a (too little CPU to measure)')} tasks/s on one core; "
        f"Dask's scheduler is usually quoted at a few thousand tasks/s",
        f"    storage: a batch is {files:.0f} chunk files ({batch_bytes / MB:.2f} MB) written, renamed and "
        f"checksummed by its worker from the bytes it wrote, and a task's commit records one file written by "
        f"the driver: {ceiling / batch * files:,.0f} file writes/s and {ceiling / batch * batch_bytes / MB:,.0f} MB/s",
        f"    workers: writing a batch costs its worker {w:.1f} ms of CPU, "
        f"{100 * w / (batch * point_ms):.1f}% of the batch's {batch * point_ms / 1e3:.2f} s of compute at "
        f"{point_ms:g} ms per point",
    ]
    return lines


def command_line(argv: list[str] | None) -> str:
    """The command as run: interpreter, script and arguments."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join([sys.executable, sys.argv[0]] + list(args))


def main(argv=None) -> int:
    """Run the benchmark; print (and optionally write) the table and the extrapolation.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0, or 1 when a point failed or a store check found a batch not done.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default=None,
                    help="worker counts, comma-separated (default 1,2,4,8,16,32,64; --quick: 1,2)")
    ap.add_argument("--batch", type=int, default=100, help="points per batch (default 100)")
    ap.add_argument("--min-points", type=int, default=None,
                    help="points per sweep at least (default 20000; --quick: 1000)")
    ap.add_argument("--points-per-worker", type=int, default=None,
                    help="points per sweep per worker, if more (default 2000; --quick: 200)")
    ap.add_argument("--old-points", type=int, default=None,
                    help="points written by the old path (default 20000; --quick: 1000)")
    ap.add_argument("--point-ms", type=float, default=4.3,
                    help="compute time per point and worker for the extrapolation, ms "
                         "(default 4.3: the RSCR sweep of bench_sweep.py, results/sweep.txt)")
    ap.add_argument("--store-dir", default=None,
                    help="keep the stores here (scale_N<N>.zarr, old_path.zarr); default: a "
                         "temporary folder, each store deleted once measured")
    ap.add_argument("--start-timeout", type=float, default=120.0,
                    help="seconds for the scheduler to start, plus 30 per worker (default 120)")
    ap.add_argument("--memory-margin", type=float, default=1.3,
                    help="an N runs only if N x (the last worker's peak memory, 400 MB before the first) x this "
                         "is available (default 1.3)")
    ap.add_argument("--quick", action="store_true", help="smoke test: N = 1, 2 and few points")
    ap.add_argument("--out", default=None, help="also write the output to this file")
    args = ap.parse_args(argv)
    quick = args.quick
    if args.min_points is None:
        args.min_points = 1000 if quick else 20000
    if args.points_per_worker is None:
        args.points_per_worker = 200 if quick else 2000
    if args.old_points is None:
        args.old_points = 1000 if quick else 20000
    try:
        ns = ([int(x) for x in args.workers.split(",") if x.strip()] if args.workers
              else list(QUICK_WORKERS if quick else DEFAULT_WORKERS))
    except ValueError:
        ap.error(f"--workers: comma-separated whole numbers, not {args.workers!r}")
    if not ns or min(ns) < 1 or args.batch < 1 or args.min_points < 1 or args.old_points < 1 \
            or args.points_per_worker < 0 or not args.point_ms > 0 or not args.memory_margin > 0:
        ap.error("--workers, --batch, --min-points, --old-points must be >= 1, --points-per-worker "
                 ">= 0, --point-ms and --memory-margin > 0")

    import psutil

    from sweep.store import check_store

    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    say(f"$ {command_line(argv)}")
    say(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    for line in machine_lines(cores):
        say(line)
    say(f"note: this machine has {cores} cores, so N > {cores} measures oversubscription (N workers, "
        f"the driver and the scheduler share {cores} cores); the CPU times per batch are the figures "
        f"that carry over to a bigger machine, the points/s are not")
    spec, real = rscr_context()
    context = CannedContext(real)
    schema = context.schema
    per_point = sum(int(np.prod(schema.shape(v))) for v in schema.variables)
    say(f"sweep: {SWEEP_FILE.relative_to(ROOT)}'s real context and store layout "
        f"({len(schema.variables)} outputs: {', '.join(schema.variables)}; {len(schema.time)} times; "
        f"{per_point} float64 per point), points drawn in its box ({', '.join(spec.points)}), "
        f"Batch {args.batch}; points per run max({args.min_points}, {args.points_per_worker} x N)")
    say(f"pipeline: dask scheduler process + N dask worker processes (1 thread each, no nanny), "
        f"sweep.run.run_sweep(client=...); the batch function returns pre-computed results at once; "
        f"the workers write the batches, the driver commits them")
    say()

    keep = Path(args.store_dir) if args.store_dir else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    ok = True
    files = batch_bytes = float("nan")
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        work = Path(tmp)
        folder = keep or work
        worker_mb = None
        for n in ns:
            need = n * (worker_mb or 400) * MB * args.memory_margin
            avail = psutil.virtual_memory().available
            disk = shutil.disk_usage(folder).free
            need_disk = points_for(n, args) * (per_point * 8 + 64) * 1.2
            if need > avail or need_disk > disk:
                say(f"N = {n}: skipped, it needs about {need / 1024 ** 3:.1f} GiB of memory and "
                    f"{need_disk / 1024 ** 3:.1f} GiB of disk; {avail / 1024 ** 3:.1f} and "
                    f"{disk / 1024 ** 3:.1f} GiB available")
                continue
            store = folder / f"scale_N{n}.zarr"
            run = measure(n, spec, context, args, work, store)
            runs.append(run)
            worker_mb = run.worker_rss / MB
            check = check_store(store, "quick")
            if run.failed or check.todo:
                ok = False
                say(f"N = {n}: {run.failed} points not successful, {len(check.todo)} batches not done")
            if np.isnan(files):
                files, batch_bytes = store_files(store)
            print(f"  N = {n}: {run.rate:,.0f} points/s", file=sys.stderr, flush=True)
            if keep is None:
                shutil.rmtree(store)
        split = task_split(spec, context, args, work) if not quick else None
        old_store = folder / "old_path.zarr"
        old_rate, old_n = old_path(spec, context, args.old_points, args.batch, old_store)
        if keep is None:
            shutil.rmtree(old_store)

    say("Workers write, the driver commits. prep: run_sweep's store preparation (the template), before "
        "the first task; tasks: the Dask tasks the batches went in (sweep.run.task_runs); tasks s: from the "
        "first task's submission to the call's end; points/s: points / "
        "wall of the whole call, tasks points/s: of the task phase; driver CPU: its CPU seconds / wall "
        "seconds in the task phase, ms/batch its CPU per batch there; sched and worker: CPU over the "
        "whole call (sched ms/task: per Dask task; worker ms/batch: per batch, all workers together); RSS: "
        "peak resident memory, the driver's during the call, the largest worker's over its life:")
    for line in table(runs):
        say(line)
    say()
    say(f"Old path, for comparison: the driver writing every batch itself (sweep.store.write_batch of "
        f"the same results in one process, no Dask), {old_n} points: {old_rate:,.0f} points/s")
    say()
    if runs:
        for line in extrapolation(runs, old_rate, args.batch, args.point_ms, files, batch_bytes, split):
            say(line)
    load = os.getloadavg()
    say(f"load average at the end {load[0]:.2f} (1 min), {load[1]:.2f} (5 min)")

    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n")
        print(f"wrote {out}")
    return 0 if ok else 1


def _interrupt_on_sigterm() -> None:
    """SIGTERM (``kill``, ``timeout``) raises KeyboardInterrupt, so the clusters' ``finally`` end their processes.

    Killed by the default action instead, the benchmark left its scheduler
    and workers running (a worker whose scheduler is gone keeps retrying).
    """
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


if __name__ == "__main__":
    _interrupt_on_sigterm()
    sys.exit(main())
