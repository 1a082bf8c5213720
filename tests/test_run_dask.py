"""The sweep runtime on real Dask processes.

A real ``dask scheduler`` and ``dask worker`` processes (``--nthreads 1``,
no nanny, so that killing one kills the worker itself) are started on
127.0.0.1 with free ports. The toy batch function (``tests/toybatch.py``)
appends ``tag omega zeta pid`` to a log file each time a batch starts, which
tells the tests which batches ran, in which run, and in which worker.
"""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client

from solver import status as st
from solver.errors import InputError
import sweep.run
from sweep import store
from sweep.log import cli_logging
from sweep.run import load_cluster_config, make_cluster, run_sweep
from toybatch import ToyContext, grid_spec, read_log, serial_reference, toy_batch

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
DASK = str(Path(sys.executable).parent / "dask")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(extra)
    return env


class DaskProcesses:
    """A scheduler and workers as subprocesses; ``stop()`` ends them all."""

    def __init__(self, tmp: Path, n_workers: int = 2, **env):
        self.tmp, self.procs, self.workers = tmp, [], []
        self.env = child_env(**env)
        port = free_port()
        self.address = f"tcp://127.0.0.1:{port}"
        self.scheduler_file = str(tmp / "scheduler.json")
        self._start("scheduler", [DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard", "--scheduler-file", self.scheduler_file])
        deadline = time.monotonic() + 60
        while not os.path.exists(self.scheduler_file):
            assert time.monotonic() < deadline, "scheduler did not start"
            assert self.procs[0].poll() is None, (tmp / "scheduler.log").read_text()
            time.sleep(0.1)
        for i in range(n_workers):
            self.workers.append(self._start(
                f"worker{i}", [DASK, "worker", self.address, "--nthreads", "1", "--no-nanny",
                               "--no-dashboard", "--host", "127.0.0.1", "--death-timeout", "60",
                               "--name", f"w{i}"]))
        if n_workers:
            with Client(self.address) as client:
                client.wait_for_workers(n_workers, timeout=60)

    def _start(self, name, cmd):
        log = open(self.tmp / f"{name}.log", "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self):
        # Workers first, and the scheduler once they are gone: a worker told to stop while
        # its scheduler stops too waits for it until the 10 s below run out.
        workers, scheduler = self.procs[1:], self.procs[:1]
        for group in (workers, scheduler):
            for proc in group:
                if proc.poll() is None:
                    proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory, s3):
    """Scheduler + two workers shared by the tests that kill no worker (they see the S3 server)."""
    procs = None
    try:
        procs = DaskProcesses(tmp_path_factory.mktemp("healthy"))
        yield procs
    finally:
        if procs is not None:
            procs.stop()


@pytest.fixture
def fresh(tmp_path, s3):
    """A factory of scheduler + workers for tests that kill a worker (they see the S3 server)."""
    started = []

    def start(**env):
        started.append(DaskProcesses(tmp_path, **env))
        return started[-1]

    try:
        yield start
    finally:
        for procs in started:
            procs.stop()


def assert_store_equals(path, ref):
    ds = store.open_store(path)
    np.testing.assert_array_equal(ds.status.values, ref["status"])
    np.testing.assert_array_equal(ds.steps.values, ref["steps"])
    for name in ("x", "pos", "x_end"):
        np.testing.assert_array_equal(ds[name].values, ref[name])


def kill_when(log, spec, condition, timeout=60.0):
    """Start a thread that SIGKILLs the pid ``condition(log lines)`` returns (once)."""
    killed = []

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = condition(read_log(log, spec))
            if pid:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, killed


def test_sweep_on_scheduler_and_two_workers_equals_a_serial_loop(healthy, tmp_path, monkeypatch):
    # 6 x 3 = 18 points in 5 batches (the last one of 2); every failure kind the toy has:
    # zeta 1.2 -> no_assembly, omega 6 -> max_steps, omega 3 raises -> error.
    def driver_writes(*args):
        raise AssertionError("the driver wrote a batch's data; its worker should have")

    monkeypatch.setattr(sweep.run.driver, "write_batch_data", driver_writes)   # in this process only
    spec = grid_spec([1, 2, 3, 4, 5, 6], [0.1, 0.5, 1.2], batch=4)
    ctx = ToyContext(sleep=0.1, omega_max=5.5, raise_at=3.0, log=str(tmp_path / "log"))
    path = tmp_path / "s.zarr"
    cache = str(tmp_path / "jax-cache")
    summary = run_sweep(spec, toy_batch, ctx, path, scheduler_file=healthy.scheduler_file,
                        progress=False, jax_cache_dir=cache)
    ref = serial_reference(spec, ctx)
    assert_store_equals(path, ref)
    assert sorted(summary.batches_run) == [0, 1, 2, 3, 4]
    assert summary.points_run == 18 and summary.threads == 2
    assert summary.store_by_status == {
        st.meaning(c): int((ref["status"] == c).sum()) for c in np.unique(ref["status"])}
    assert all(s >= 0.1 for s in summary.batch_seconds.values())
    assert 0.0 <= summary.overhead_fraction < 1.0
    assert store.pending_batches(path) == []
    # The worker plugin set JAX up on every worker before first use.
    with Client(healthy.address) as client:
        env = client.run(lambda: (os.environ.get("JAX_ENABLE_X64"),
                                  os.environ.get("JAX_COMPILATION_CACHE_DIR")))
    assert len(env) == 2
    assert list(env.values()) == [("1", cache)] * 2
    assert os.path.isdir(cache)


def test_tasks_of_several_batches_shrink_to_one_and_equal_a_serial_loop(healthy, tmp_path):
    # 64 batches of one point on 2 workers: tasks of 4, 3, ... batches, then one each (task_runs).
    spec = grid_spec(np.linspace(1.0, 5.0, 32), [0.1, 1.2], batch=1)
    ctx = ToyContext(omega_max=4.5, raise_at=float(np.linspace(1.0, 5.0, 32)[7]), log=str(tmp_path / "log"))
    runs = sweep.run.task_runs(list(range(64)), 2)
    assert max(len(r) for r in runs) == 4 and len(runs[-1]) == 1
    path = tmp_path / "s.zarr"
    with Client(healthy.address) as client:
        submitted, submit = [], client.submit
        client.submit = lambda *args, **kw: (submitted.append(kw["key"]), submit(*args, **kw))[1]
        summary = run_sweep(spec, toy_batch, ctx, path, client=client, progress=False)
    assert len(submitted) == len(runs) == summary.tasks < 64
    assert f"this run wrote 64 batches (64 points) in {len(runs)} Dask tasks" in str(summary)
    assert_store_equals(path, serial_reference(spec, ctx))
    assert sorted(summary.batches_run) == list(range(64)) and summary.points_run == 64
    assert sorted(b for _, b, _ in read_log(ctx.log, spec)) == list(range(64))   # each batch ran once
    assert store.check_store(path, "decode").ok


def test_a_worker_that_cannot_see_the_store_says_so_before_computing(tmp_path):
    # The driver makes the store's folder before it submits: a worker that does not see it is on
    # another file system.
    spec = grid_spec([1, 2], [0.1], batch=2)
    ctx = ToyContext(log=str(tmp_path / "log"))
    gone = str(tmp_path / "elsewhere" / "sweep.zarr")
    out = sweep.run.run_and_write_batch(toy_batch, dict(spec.points), ctx, str(tmp_path / "cache"),
                                        gone, slice(0, 2), ctx.schema)
    assert isinstance(out, sweep.run.WriteFailed) and isinstance(out.error, InputError)
    assert str(out.error).startswith(f"{gone}: the Dask worker on {socket.gethostname()} cannot "
                                     "see the store's folder: the workers write their batches themselves, "
                                     "so --out must be on a file system they share with the "
                                     "driver, or an object store URL such as s3://")
    assert not os.path.exists(ctx.log)                  # nothing was computed


def new_template(path, spec, ctx, store_id):
    """A sweep store's template at ``path``, with the given id; its token."""
    store.create_template(path, spec.hash, spec.points, ctx.schema, {}, spec.batch, store_id=store_id)
    return store.store_token(store.store_attrs(path))


def test_a_worker_writes_its_batch_once_the_template_it_waits_for_is_whole(tmp_path):
    # The driver writes a new store's template while the first batches compute: a worker that
    # finishes first waits for the store of its token, then writes.
    spec = grid_spec([1, 2], [0.1], batch=2)
    ctx = ToyContext()
    path = str(tmp_path / "sweep.zarr")
    token = store.store_token({"store_id": "abc", "sweep_hash": spec.hash})
    late = threading.Timer(0.3, new_template, (path, spec, ctx, "abc"))
    late.start()
    out = sweep.run.run_and_write_batch(toy_batch, dict(spec.points), ctx, str(tmp_path / "cache"),
                                        path, slice(0, 2), ctx.schema, store_token=token)
    late.join()
    assert isinstance(out, store.WrittenBatch), out
    store.BatchCommitter(path).commit(out)
    assert store.check_store(path, "decode").done == [0]


def test_a_store_written_before_template_records_is_ready_for_its_workers(tmp_path):
    # Such a store (resumed by a newer mechsweep) has no template record to wait for: its workers
    # write at once, not after STORE_WAIT_SECONDS.
    import shutil

    import zarr

    spec = grid_spec([1, 2], [0.1], batch=2)
    path = str(tmp_path / "sweep.zarr")
    token = new_template(path, spec, ToyContext(), "old")
    shutil.rmtree(os.path.join(path, "template_commit"))
    with pytest.warns(UserWarning, match="Consolidated metadata"):
        zarr.consolidate_metadata(path)
    assert "template_commit" not in zarr.open_group(path, mode="r")
    assert store.template_ready(path, token)
    assert not store.template_ready(path, store.store_token({"store_id": "new", "sweep_hash": spec.hash}))


def test_a_worker_never_writes_into_another_store_at_the_path(tmp_path, monkeypatch):
    # An older store at the path (one being overwritten) has another token: the worker waits for
    # its own, and says so when it never comes; the older store is left as it was.
    monkeypatch.setattr(sweep.run.worker, "STORE_WAIT_SECONDS", 0.5)
    spec = grid_spec([1, 2], [0.1], batch=2)
    ctx = ToyContext()
    path = str(tmp_path / "sweep.zarr")
    old = new_template(path, spec, ctx, "older")
    token = store.store_token({"store_id": "newer", "sweep_hash": spec.hash})
    assert token != old and not store.template_ready(path, token) and store.template_ready(path, old)
    out = sweep.run.run_and_write_batch(toy_batch, dict(spec.points), ctx, str(tmp_path / "cache"),
                                        path, slice(0, 2), ctx.schema, store_token=token)
    assert isinstance(out, sweep.run.WriteFailed) and isinstance(out.error, InputError)
    assert str(out.error).startswith(f"{path}: the Dask worker on {socket.gethostname()} did not find the "
                                     "store after waiting 0.5 s for it: the workers write their batches")
    assert store.check_store(path, "decode").todo == [0]
    assert not os.path.exists(os.path.join(path, "x", "c"))          # no chunk of x was written


DRIVER = textwrap.dedent("""
    import sys
    from sweep.run import run_sweep
    from toybatch import ToyContext, grid_spec, toy_batch
    store, address, log = sys.argv[1:]
    spec = grid_spec([1, 2, 3, 4, 5, 6], [0.1, 0.5], batch=1)
    run_sweep(spec, toy_batch, ToyContext(sleep=0.3, log=log, tag="first"), store,
              scheduler=address, progress=False)
""")


# A driver that handles SIGTERM as the command line does (sweep.run.interrupt).
INTERRUPTED_DRIVER = textwrap.dedent("""
    import signal, sys
    from sweep.run import interrupt, run_sweep
    from toybatch import ToyContext, grid_spec, toy_batch
    # As the command line does (sweep/cli/sweep_command.py): both signals through interrupt().
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: interrupt(KeyboardInterrupt()))
    store, address, log = sys.argv[1:]
    spec = grid_spec([1, 2, 3, 4, 5, 6], [0.1, 0.5], batch=1)
    try:
        run_sweep(spec, toy_batch, ToyContext(sleep=3.0, log=log), store, scheduler=address, progress=False)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
""")


def sweep_tasks(address) -> list:
    """The keys of the sweep's tasks the scheduler holds, and those its workers hold."""
    def on_scheduler(dask_scheduler):
        return [str(k) for k in dask_scheduler.tasks if str(k).startswith("mechsweep-batch-")]

    def on_worker(dask_worker):
        return [str(k) for k, ts in dask_worker.state.tasks.items()
                if str(k).startswith("mechsweep-batch-") and ts.state not in ("cancelled", "released")]

    with Client(address) as client:
        return client.run_on_scheduler(on_scheduler) + sum(client.run(on_worker).values(), [])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_driver_leaves_no_task_of_its_sweep_on_the_cluster(fresh, tmp_path, sig):
    procs = fresh()
    path, log = tmp_path / "s.zarr", str(tmp_path / "log")
    spec = grid_spec([1, 2, 3, 4, 5, 6], [0.1, 0.5], batch=1)       # 12 batches of 3 s, 2 workers
    driver = subprocess.Popen([sys.executable, "-c", INTERRUPTED_DRIVER, str(path), procs.address, log],
                              env=child_env(), stdout=subprocess.PIPE, text=True,
                              stderr=open(tmp_path / "driver.log", "w"))
    try:
        deadline = time.monotonic() + 60
        while len(read_log(log, spec)) < 2:                 # both workers are running a batch
            assert time.monotonic() < deadline and driver.poll() is None, (tmp_path / "driver.log").read_text()
            time.sleep(0.02)
        assert len(sweep_tasks(procs.address)) >= 10        # queued and running
        driver.send_signal(sig)
        assert driver.wait(timeout=30) == 3 and driver.stdout.read() == "interrupted\n"
        t = time.monotonic()
        while sweep_tasks(procs.address):
            assert time.monotonic() - t < 3.0, sweep_tasks(procs.address)
            time.sleep(0.05)
    finally:
        driver.kill()
        driver.wait()
    # No batch started after the interrupt, and the two running then stopped before writing
    # (their 3 s are over): every batch is pending.
    time.sleep(3.5)
    assert len(read_log(log, spec)) == 2
    assert (store.read_status(path) < 0).all()


def store_in(kind, tmp_path, s3, name="s.zarr"):
    """Where a test's store goes: a local folder, or a prefix on the test S3 server."""
    return tmp_path / name if kind == "local" else s3.url(f"{tmp_path.name}/{name}")


def read_status_when_there(path):
    """``status`` of a store whose template may still be being written (None until it is)."""
    try:
        return store.read_status(path)
    except (FileNotFoundError, KeyError):
        return None


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_driver_killed_mid_sweep_resumes_only_unfinished_batches(healthy, tmp_path, s3, kind):
    spec = grid_spec([1, 2, 3, 4, 5, 6], [0.1, 0.5], batch=1)      # 12 batches of 1 point
    path, log = store_in(kind, tmp_path, s3), str(tmp_path / "log")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(path), healthy.address, log],
                              env=child_env(), stdout=subprocess.DEVNULL,
                              stderr=open(tmp_path / "driver.log", "w"))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline and driver.poll() is None, \
                (tmp_path / "driver.log").read_text()
            codes = read_status_when_there(path)
            if codes is not None and (codes >= 0).sum() >= 3:
                break
            time.sleep(0.02)
        driver.send_signal(signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()

    pending = store.pending_batches(path)
    assert 0 < len(pending) < 12
    ctx = ToyContext(log=log, tag="second")
    summary = run_sweep(spec, toy_batch, ctx, path, scheduler=healthy.address, progress=False)
    assert sorted(b for tag, b, _ in read_log(log, spec) if tag == "second") == pending
    assert sorted(summary.batches_run) == pending
    assert_store_equals(path, serial_reference(spec, ctx))
    assert store.check_store(path, "decode").ok


def sweep_killing_one_worker(procs, spec, ctx, path, condition) -> list[int]:
    """Run the toy sweep on ``procs`` while a watcher SIGKILLs the worker ``condition`` names.

    Checks that one worker was killed, that every batch was committed once and the store equals the
    serial loop and decodes; returns the batches in the order their runs started (the log).
    """
    watcher, killed = kill_when(ctx.log, spec, condition)
    summary = run_sweep(spec, toy_batch, ctx, path, scheduler=procs.address, progress=False)
    watcher.join()
    assert len(killed) == 1
    assert sorted(summary.batches_run) == list(range(spec.n_batches))       # each batch committed once
    assert_store_equals(path, serial_reference(spec, ctx))
    assert store.check_store(path, "decode").ok
    return [b for _, b, _ in read_log(ctx.log, spec)]


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_worker_killed_mid_sweep_loses_and_duplicates_no_point(fresh, tmp_path, s3, kind):
    procs = fresh()
    spec = grid_spec([1, 2, 3, 4, 5, 6], [0.1, 0.5], batch=1)      # 12 batches
    ctx = ToyContext(sleep=0.25, log=str(tmp_path / "log"))
    worker_pids = {p.pid for p in procs.workers}

    def third_start(lines):   # kill the worker that just started the third batch, mid-task
        return lines[2][2] if len(lines) >= 3 and lines[2][2] in worker_pids else None

    runs = sweep_killing_one_worker(procs, spec, ctx, store_in(kind, tmp_path, s3), third_start)
    assert len(runs) > 12 and set(runs) == set(range(12))       # the killed task ran again


def test_a_worker_killed_in_a_task_of_several_batches_loses_and_duplicates_no_point(fresh, tmp_path):
    procs = fresh()
    spec = grid_spec(np.linspace(1.0, 5.0, 24), [0.1, 0.5], batch=1)      # 48 batches: tasks of 3, 2, 1
    assert len(sweep.run.task_runs(list(range(48)), 2)[0]) == 3
    ctx = ToyContext(sleep=0.1, log=str(tmp_path / "log"))
    worker_pids = {p.pid for p in procs.workers}
    # The worker that starts batch 1 is in the middle of its first task (batches 0-2): kill it then.
    runs = sweep_killing_one_worker(procs, spec, ctx, tmp_path / "s.zarr", lambda lines: next(
        (pid for _, b, pid in lines if b == 1 and pid in worker_pids), None))
    assert runs.count(0) == 2 and runs.count(1) == 2               # the killed task ran again, whole


def test_a_task_whose_worker_dies_is_worker_lost_then_retried(fresh, tmp_path):
    # With no allowed failures the scheduler gives up on a task at its first dead worker.
    procs = fresh(DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0")
    spec = grid_spec([1, 2, 3, 4, 5, 6], [0.1, 0.5], batch=2)      # 6 batches
    ctx = ToyContext(sleep=0.25, log=str(tmp_path / "log"))
    watcher, killed = kill_when(ctx.log, spec, lambda lines: lines[1][2] if len(lines) >= 2
                                else None)
    path = tmp_path / "s.zarr"
    summary = run_sweep(spec, toy_batch, ctx, path, scheduler=procs.address, progress=False)
    watcher.join()
    assert len(killed) == 1
    ds = store.open_store(path)
    codes = ds.status.values
    lost = store.failed_batches(path)
    assert lost and set(codes[codes != st.SUCCESS]) == {st.WORKER_LOST}
    assert all("KilledWorker" in str(ds.batch_message.values[i]) for i in lost)
    assert np.isnan(ds.x.values[codes == st.WORKER_LOST]).all()
    assert summary.by_status["worker_lost"] == 2 * len(lost)

    retry = ToyContext(log=ctx.log, tag="retry")
    run_sweep(spec, toy_batch, retry, path, scheduler=procs.address, progress=False,
              mode="retry-failed")
    assert sorted(b for tag, b, _ in read_log(ctx.log, spec) if tag == "retry") == lost
    assert_store_equals(path, serial_reference(spec, ctx))


def test_a_worker_killed_for_memory_is_reported_with_the_batch_to_try(tmp_path):
    # A worker of a 700 MiB limit given a batch that holds 1.5 GiB: its nanny stops it (at
    # 95% of the limit) and says so in a scheduler event; with no allowed failures the
    # task is KilledWorker at once, and its message names memory and Batch.
    import dask
    from distributed import LocalCluster

    spec = grid_spec([1, 2], [0.1, 0.5], batch=4)                   # one batch of 4 points
    ctx = ToyContext(sleep=5.0, hog_bytes=1536 * 2**20)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit="700MiB",
                         dashboard_address=":0") as cluster:
        summary = run_sweep(spec, toy_batch, ctx, tmp_path / "s.zarr", scheduler=cluster.scheduler_address,
                            progress=False)
    assert summary.by_status == {"worker_lost": 4}
    ds = store.open_store(tmp_path / "s.zarr")
    assert (ds.status.values == st.WORKER_LOST).all()
    message = str(ds.batch_message.values[0])
    assert message.startswith("KilledWorker: killed for memory: worker tcp://127.0.0.1:"), message
    assert "of its 700 MiB memory limit running this batch" in message
    assert "lower Batch (now 4; try Batch: 2)" in message and message.endswith("--retry-failed")


def test_a_lost_worker_without_a_memory_event_keeps_dasks_text_and_names_batch():
    from distributed import KilledWorker
    from distributed.core import Status
    from distributed.scheduler import WorkerState

    from sweep.run import worker_lost_message

    last = WorkerState(address="tcp://10.0.0.5:4000", memory_limit=2**30, status=Status.running, pid=1, name="w0",
                       local_directory="/tmp", nanny="tcp://10.0.0.5:4001", server_id="w0")
    exc = KilledWorker("mechsweep-batch-3-ab-0", last, 3)   # as the scheduler makes it (with a copy of ``last``)
    plain = worker_lost_message(exc, {}, 64)
    assert plain.startswith("KilledWorker: Attempted to run task 'mechsweep-batch-3-ab-0' on 4 different workers")
    assert "(the operating system kills such a process with signal 9), lower Batch (now 64; try Batch: 32)" in plain
    memory = worker_lost_message(exc, {"tcp://10.0.0.5:4000": 1.5 * 2**30}, 64)
    assert memory.startswith("KilledWorker: killed for memory: worker tcp://10.0.0.5:4000 held 1.5 GiB of its "
                             "1 GiB memory limit running this batch and was restarted by its nanny; lower "
                             "Batch (now 64; try Batch: 32)")
    assert "lower Batch (now 1)," in worker_lost_message(exc, {"tcp://10.0.0.6:4000": 1.0}, 1)


@pytest.mark.filterwarnings("ignore:Port 8787 is already in use")   # another cluster has it
def test_default_local_cluster(tmp_path):
    spec = grid_spec([1, 2, 3], [0.1, 0.5], batch=2)
    ctx = ToyContext()
    summary = run_sweep(spec, toy_batch, ctx, tmp_path / "s.zarr", workers=1, progress=False)
    assert summary.threads == 1 and sorted(summary.batches_run) == [0, 1, 2]
    assert_store_equals(tmp_path / "s.zarr", serial_reference(spec, ctx))


@pytest.mark.filterwarnings("ignore:Port 8787 is already in use")
def test_a_new_stores_template_is_written_while_its_local_cluster_starts(tmp_path, monkeypatch):
    import sweep.run.driver as driver

    starting = []

    def plan_store(*args, **kwargs):
        starting.append(any(t.name == "mechsweep-client-start" for t in threading.enumerate()))
        return store.plan_store(*args, **kwargs)

    monkeypatch.setattr(driver, "plan_store", plan_store)
    spec = grid_spec([1, 2, 3], [0.1, 0.5], batch=2)
    ctx = ToyContext()
    summary = run_sweep(spec, toy_batch, ctx, tmp_path / "s.zarr", workers=1, progress=False)
    assert starting == [True] and sorted(summary.batches_run) == [0, 1, 2]
    # A finished store has nothing left to run: no cluster is started for it.
    starting.clear()
    summary = run_sweep(spec, toy_batch, ctx, tmp_path / "s.zarr", workers=1, progress=False)
    assert starting == [False] and summary.batches_run == []


@pytest.mark.filterwarnings("ignore:Port 8787 is already in use")
def test_a_store_that_cannot_be_prepared_closes_the_cluster_started_meanwhile(tmp_path):
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    not_a_store = tmp_path / "results"
    not_a_store.mkdir()
    (not_a_store / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="refusing to delete it even with --overwrite"):
        run_sweep(grid_spec([1, 2], [0.1], batch=1), toy_batch, ToyContext(), not_a_store, workers=1,
                  mode="overwrite", progress=False)
    assert (not_a_store / "notes.txt").read_text() == "keep me"
    # The cluster's start was waited for, then the cluster closed: no thread or process of it is left.
    assert not any(t.name == "mechsweep-client-start" for t in threading.enumerate())
    # (multiprocessing's resource tracker, started with the first spawned process, stays for this one's life)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline())]
    assert left == []


def test_cluster_file_starts_the_named_cluster(tmp_path):
    config = tmp_path / "cluster.yaml"
    config.write_text("module: distributed\nclass: LocalCluster\n"
                      "kwargs: {n_workers: 0, processes: false, threads_per_worker: 1,"
                      " dashboard_address: ':0'}\nscale: 2\n")
    spec = grid_spec([1, 2, 3], [0.1, 0.5], batch=2)
    ctx = ToyContext(sleep=0.05)
    summary = run_sweep(spec, toy_batch, ctx, tmp_path / "s.zarr", cluster=str(config),
                        progress=False)
    assert summary.threads == 2
    assert_store_equals(tmp_path / "s.zarr", serial_reference(spec, ctx))


@pytest.mark.parametrize("text, message", [
    ("module: dask_jobqueue\nclass: SLURMCluster\nworkers: 4\n",
     "cluster.yaml:3: workers: unknown key(s) workers; valid keys: module: "),
    ("class: SLURMCluster\n", "cluster.yaml:1: module: expected Python module that defines"),
    ("module: distributed\nclass: LocalCluster\nscale: many\n",
     "cluster.yaml:3: scale: expected a number of workers or a mapping like {jobs: 4}"),
    ("- module\n", "cluster.yaml: expected a mapping with keys module: "),
    # The one YAML reader: a repeated key is refused, not silently the last one.
    ("module: distributed\nmodule: dask\nclass: LocalCluster\n",
     "cluster.yaml:2: duplicate key 'module' (first given at line 1)"),
])
def test_bad_cluster_files_name_the_line_the_key_and_the_valid_keys(tmp_path, text, message):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_cluster_config(path)
    assert str(err.value).startswith(str(tmp_path) + "/" + message)
    if "unknown" in message:
        for key in ("module", "class", "kwargs", "scale", "adapt"):
            assert f"{key}: " in str(err.value)


def test_cluster_class_must_be_importable_and_a_dask_cluster(tmp_path):
    with pytest.raises(InputError, match=r"cannot import module 'dask_jobqueue_missing'"):
        make_cluster({"module": "dask_jobqueue_missing", "class": "SLURMCluster"})
    with pytest.raises(InputError, match=r"os.path is not a Dask cluster class"):
        make_cluster({"module": "os", "class": "path"})


def test_only_one_way_to_reach_a_scheduler(tmp_path):
    spec = grid_spec([1, 2], [0.1], batch=1)
    with pytest.raises(InputError, match="give at most one of --scheduler, --scheduler-file, "
                                         r"--cluster \(got scheduler, cluster\)"):
        run_sweep(spec, toy_batch, ToyContext(), tmp_path / "s.zarr", scheduler="tcp://x:1",
                  cluster="c.yaml", progress=False)


@pytest.mark.parametrize("jax_first", [False, True])
def test_configure_jax_sets_x64_and_a_cache_of_every_program(tmp_path, jax_first):
    # Before JAX is imported (the environment) or after (jax.config); every
    # program is cached, however fast it compiled: a small one lands in the cache.
    code = ("import sys; jax_first = sys.argv[2] == 'True'\n"
            "if jax_first: import jax\n"
            "from sweep.run import configure_jax; configure_jax(sys.argv[1])\n"
            "import jax, jax.numpy as jnp\n"
            "jax.jit(lambda x: x * 2.0)(jnp.ones(3)).block_until_ready()\n"
            "print(jax.config.jax_enable_x64, jax.config.jax_compilation_cache_dir,"
            " jax.config.jax_persistent_cache_min_compile_time_secs, jnp.ones(1).dtype)")
    env = child_env()
    for name in ("JAX_ENABLE_X64", "JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        env.pop(name, None)
    cache = tmp_path / "cache"
    out = subprocess.run([sys.executable, "-c", code, str(cache), str(jax_first)], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split() == ["True", str(cache), "0.0", "float64"]
    entries = [p for p in cache.iterdir() if p.name.startswith("jit__lambda")]
    assert entries
    # Compressed with zstd (zstandard is a dependency: 10x faster than zlib for a large program).
    # JAX's cache key names the compression, so a cache written with zlib is not read, not misread.
    assert entries[0].read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame


def test_pin_to_core_keeps_a_process_on_one_allowed_core():
    code = ("import os; from sweep.run import pin_to_core; allowed = sorted(os.sched_getaffinity(0));"
            "core = pin_to_core(len(allowed) + 1);"
            "print(core == allowed[1 % len(allowed)], os.sched_getaffinity(0) == {core})")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.split() == ["True", "True"]


def page_faults_per_reused_array() -> float:
    """Minor page faults while allocating, filling and freeing the same 8 MB array ten times over.

    The fewest of five rounds: the count is the process's, and a worker's other threads
    (its event loop, heartbeats) fault pages in too, more on a loaded machine.
    """
    import resource

    np.ones(1 << 20)
    rounds = []
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(10):
            np.ones(1 << 20)
        rounds.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
    return min(rounds)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator and page-fault counts")
def test_keep_freed_memory_lets_a_process_reuse_a_freed_array_without_faulting_its_pages_in_again():
    # Dask's nanny starts workers so that every freed block goes back to the system at once.
    code = ("import sys; sys.path[:0] = [%r]; from test_run_dask import page_faults_per_reused_array as f;"
            "from sweep.run import keep_freed_memory; before = f(); kept = keep_freed_memory();"
            "print(before, kept, f())" % os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", code], env=child_env(MALLOC_TRIM_THRESHOLD_="65536"),
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert float(out[0]) > 100, "an 8 MB array freed and allocated again faults its pages in (64 KiB trim)"
    assert out[1] == "True"
    assert float(out[2]) < 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator and page-fault counts")
def test_the_workers_of_a_local_cluster_keep_the_memory_their_batches_free(tmp_path):
    with sweep.run.dask_client(workers=1, jax_cache_dir=str(tmp_path / "jax")) as client:
        faults = client.submit(page_faults_per_reused_array, pure=False).result(timeout=60)
    assert faults < 10


def test_the_cluster_s_workers_are_all_seen_while_the_client_refreshes_its_identity():
    """cluster_workers asks the scheduler itself: the client's cached identity, which
    ``Client.scheduler_info()`` returns, is replaced by the client's own refresh with one that lists
    no workers, and a sweep that read it at that moment took a cluster of two workers for none."""
    import dask
    from distributed import LocalCluster

    from sweep.run.cluster import cluster_workers, worker_threads

    with dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        deadline, seen = time.monotonic() + 3.0, []
        while time.monotonic() < deadline:
            seen.append(len(cluster_workers(client)))
        assert len(seen) > 100 and set(seen) == {2}
        assert worker_threads(client) == 2


def test_a_worker_that_fails_its_check_gets_no_work_and_its_batches_go_elsewhere(tmp_path, capfd):
    # Two workers, one of which cannot start JAX (a platform that is not there): the sweep
    # completes on the other, names the unfit worker once, and turns nothing into a failure.
    procs = DaskProcesses(tmp_path, n_workers=1)
    try:
        procs.env = child_env(JAX_PLATFORMS="cuda")
        bad = procs._start("bad-worker", [DASK, "worker", procs.address, "--nthreads", "1",
                                          "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                                          "--name", "bad"])
        procs.env = child_env()
        with Client(procs.address) as client:
            client.wait_for_workers(2, timeout=60)
        spec = grid_spec([1, 2, 3, 4], [0.1, 0.5], batch=1)               # 8 batches
        ctx = ToyContext(log=str(tmp_path / "log"))
        with cli_logging():   # the worker is named in a warning of the mechsweep logger, as the CLI shows it
            summary = run_sweep(spec, toy_batch, ctx, tmp_path / "s.zarr", scheduler=procs.address,
                                progress=False)
        assert sorted(summary.batches_run) == list(range(8)) and not summary.stopped
        assert_store_equals(tmp_path / "s.zarr", serial_reference(spec, ctx))
        assert {pid for _, _, pid in read_log(ctx.log, spec)} == {procs.workers[0].pid}
        err = capfd.readouterr().err
        named = [line for line in err.splitlines() if "is not used for this sweep" in line]
        assert len(named) == 1 and "JAX cannot start its platform here" in named[0]
        assert bad.poll() is None                                           # left running, unused
    finally:
        procs.stop()


def test_a_sweep_whose_only_worker_fails_its_check_stops_incomplete_saying_why(tmp_path):
    procs = DaskProcesses(tmp_path, n_workers=0)
    try:
        procs.env = child_env(JAX_PLATFORMS="cuda")
        procs._start("bad-worker", [DASK, "worker", procs.address, "--nthreads", "1", "--no-nanny",
                                    "--no-dashboard", "--host", "127.0.0.1", "--name", "bad"])
        with Client(procs.address) as client:
            client.wait_for_workers(1, timeout=60)
        spec = grid_spec([1, 2, 3], [0.1], batch=1)
        ctx = ToyContext(log=str(tmp_path / "log"))
        summary = run_sweep(spec, toy_batch, ctx, tmp_path / "s.zarr", scheduler=procs.address,
                            progress=False)
        assert summary.batches_run == [] and sorted(summary.batches_left) == [0, 1, 2]
        assert summary.stopped.startswith("no worker passed its check: tcp://127.0.0.1:")
        assert "JAX cannot start its platform here" in summary.stopped
        assert store.pending_batches(tmp_path / "s.zarr") == [0, 1, 2]
        assert not os.path.exists(ctx.log)                                 # nothing computed
    finally:
        procs.stop()


def test_a_worker_whose_model_file_differs_from_the_drivers_is_unfit(tmp_path):
    from pendulum_sweep import write_pendulum_sweep
    from sweep import pipeline
    from sweep.spec import load_sweep

    context = pipeline.build_context(load_sweep(write_pendulum_sweep(tmp_path)))
    pipeline._WORKER_MODELS.pop(context.key, None)
    assert context.check_on_worker() == ""
    pipeline._WORKER_MODELS.pop(context.key, None)
    model = tmp_path / "pendulum_x0.yaml"
    model.write_text(model.read_text().replace("g: 9.81", "g: 9.80"))   # edited after the start
    assert context.check_on_worker() == (
        f"the model file {context.model_path} here differs from the one the sweep was started "
        f"with (its hash differs): make the workers see the same file")
