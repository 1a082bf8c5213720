"""``mechsweep sweep`` as a batch job sees it: exit codes, interrupts, faults, a lease, logs, the picture.

* Exit codes mean one thing each: 0 every point done and successful, 1 done
  with failed designs, 2 bad input, 3 incomplete (batches left pending);
  every incomplete exit prints the command that resumes, and that command
  finishes the store.
* SIGTERM (a batch system's cancel) is handled like Ctrl-C: the written
  batches stay, the run exits 3 with the resume command.  Tested on a real
  ``mechsweep sweep`` process.
* A scheduler that cannot be reached ends the run with one line and exit 3,
  no traceback, and leaves no empty store behind.
* A second writer of a store is refused, naming the holder of its lease; a
  lease whose process is dead is taken over.  Temporaries of runs killed
  while building a store are removed by the next run.
* Progress lines reach a log when stderr is not a terminal.
* The summary picture goes inside the store and never replaces another file.
"""

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dask
import numpy as np
import pytest

from pendulum_sweep import PENDULUM, write_pendulum_sweep
from sweep import store
from sweep.cli.app import main
from sweep.cli.sweep_command import EXIT_INCOMPLETE, SUMMARY_PICTURE, _fault_line
from sweep.folders import StoreLease, remove_stale_temporaries
from sweep.run import ProgressLog

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]

# Sixty designs of one point each: long enough to be interrupted in the middle.
MANY = """\
Title: Many small batches
Model: pendulum_x0.yaml
Sweep:
  product:
    L: {linspace: [1.0, 1.5, 60]}
    x0: {values: [0.5]}
Outputs:
  samples: 21
  metrics:
    y_max: {of: y, reduce: max}
Batch: 1
"""


def dead_pid() -> int:
    """The id of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _many(tmp_path) -> Path:
    (tmp_path / "pendulum_x0.yaml").write_text(PENDULUM)
    (tmp_path / "many.yaml").write_text(MANY)
    return tmp_path / "many.yaml"


def test_sigterm_exits_incomplete_with_the_resume_command_which_finishes_the_store(tmp_path, capsys):
    sweep, out = _many(tmp_path), tmp_path / "many.zarr"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "sweep.cli.app", "sweep", str(sweep), "--out", str(out),
                             "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no batch was written in time"
        try:
            if store.check_store(out, "quick").done:
                break
        except Exception:  # noqa: BLE001 - the store is not there yet
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INCOMPLETE, stderr
    assert "Traceback" not in stderr
    assert "mechsweep: terminated (SIGTERM); the batches written so far are kept in" in stderr
    resume = f"mechsweep sweep {sweep} --out {out} --resume --workers 1"
    assert resume in stderr
    check = store.check_store(out, "quick")
    assert 0 < len(check.done) < 60 and not check.damaged
    assert not (tmp_path / ".many.zarr.lease").exists()          # the lease was given back
    # The printed command finishes the store.
    assert main(resume.split()[1:]) == 0
    assert store.check_store(out, "quick").todo == []
    assert "store status: success 60" in capsys.readouterr().out


def test_an_unreachable_scheduler_is_one_line_exit_3_and_no_store(tmp_path, capsys):
    sweep = write_pendulum_sweep(tmp_path)
    out = tmp_path / "s.zarr"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]            # nothing listens there once closed
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        code = main(["sweep", str(sweep), "--out", str(out), "--scheduler", f"tcp://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == EXIT_INCOMPLETE
    assert "Traceback" not in err
    assert "mechsweep: could not reach the Dask scheduler or its workers" in err
    assert f"mechsweep sweep {sweep} --out {out} --resume --scheduler tcp://127.0.0.1:{port}" in err
    assert not out.exists()


def test_fault_lines_say_what_happened_and_what_to_do():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/s.zarr/x/c/0/0")
    assert _fault_line(full, "/data/s.zarr") == (
        "storage fault writing /data/s.zarr: No space left on device (/data/s.zarr/x/c/0/0); free space on its "
        "file system (or choose another --out) and resume")
    read_only = OSError(errno.EROFS, os.strerror(errno.EROFS), "/data/s.zarr/status/c/0")
    assert _fault_line(read_only, "/data/s.zarr").endswith(
        "Read-only file system (/data/s.zarr/status/c/0); make it writable again (or copy it somewhere "
        "writable) and resume")
    assert _fault_line(OSError("Timed out trying to connect to tcp://10.0.0.1:8786 after 30 s"), "s").startswith(
        "could not reach the Dask scheduler or its workers (Timed out trying to connect")


def test_a_second_writer_is_refused_naming_the_holder(tmp_path, capsys):
    sweep = write_pendulum_sweep(tmp_path)
    out = tmp_path / "s.zarr"
    with StoreLease(out) as lease:
        code = main(["sweep", str(sweep), "--out", str(out), "--workers", "1"])
        err = capsys.readouterr().err
        holder = lease.holder()
    assert code == 2
    assert (f"mechsweep: error: {out}: another mechsweep run is writing this store (pid {os.getpid()} on "
            f"{holder['host']}, since {holder['since']}); wait for it to finish. If that run is gone (another "
            f"host, or a lost machine), remove {tmp_path / '.s.zarr.lease'} and resume") in err
    assert not out.exists()                                   # refused before anything was written
    assert not (tmp_path / ".s.zarr.lease").exists()          # released by its holder


def test_a_dead_holders_lease_and_temporaries_are_taken_over(tmp_path, capsys):
    sweep = write_pendulum_sweep(tmp_path)
    out = tmp_path / "s.zarr"
    gone = dead_pid()
    (tmp_path / ".s.zarr.lease").write_text(
        f'{{"pid": {gone}, "host": "{socket.gethostname()}", "since": "2026-01-01T00:00:00+00:00"}}')
    stale = tmp_path / f".s.zarr.tmp-{gone}"
    (stale / "x").mkdir(parents=True)
    live = tmp_path / f".s.zarr.tmp-{os.getppid()}"            # a running process's: kept
    live.mkdir()
    other = tmp_path / ".other.zarr.tmp-1"                      # another store's: not ours to judge
    other.mkdir()
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 1   # two designs cannot assemble
    assert not stale.exists() and live.is_dir() and other.is_dir()
    assert not (tmp_path / ".s.zarr.lease").exists()
    assert store.check_store(out, "quick").todo == []
    assert remove_stale_temporaries(out) == []


def test_a_lease_held_on_another_host_is_respected(tmp_path):
    out = tmp_path / "s.zarr"
    (tmp_path / ".s.zarr.lease").write_text('{"pid": 1, "host": "node-17", "since": "2026-11-28T08:00:00+00:00"}')
    with pytest.raises(Exception, match="pid 1 on node-17, since 2026-11-28T08:00:00"):
        StoreLease(out).acquire()


def test_progress_lines_for_logs(tmp_path, capsys):
    """Without a terminal: a line per batch at --progress-every 0.001, the last one complete."""
    sweep = write_pendulum_sweep(tmp_path)
    out = tmp_path / "s.zarr"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--progress-every", "0.001"]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "batches written" in ln]
    assert lines[0].startswith("[mechsweep] Pendulum release study: 1/2 batches written (50%), ")
    assert lines[-1].startswith("[mechsweep] Pendulum release study: 2/2 batches written (100%), 2 failed points, ")
    assert "left" not in lines[-1]
    assert "the command took" in err


def test_progress_log_keeps_its_interval():
    clock = iter([0.0, 10.0, 31.0, 45.0, 70.0]).__next__
    lines = []

    class Stream:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    log = ProgressLog(4, 30.0, "study", stream=Stream(), clock=clock)
    log.batch_done(1, 0)      # t = 10: too soon
    log.batch_done(2, 1)      # t = 31: a line
    log.batch_done(3, 1)      # t = 45: too soon
    log.batch_done(4, 1)      # t = 70: the last batch always says so
    text = "".join(lines).splitlines()
    assert text == ["[mechsweep] study: 2/4 batches written (50%), 1 failed points, 31 s so far, about 31 s left",
                    "[mechsweep] study: 4/4 batches written (100%), 1 failed points, 70 s so far"]


def test_the_summary_picture_is_inside_the_store_and_replaces_nothing(tmp_path, capsys):
    sweep = write_pendulum_sweep(tmp_path)
    beside = tmp_path / "s.png"
    beside.write_bytes(b"not ours")
    out = tmp_path / "s.zarr"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 1
    assert f"summary picture: {out / SUMMARY_PICTURE}" in capsys.readouterr().out
    assert (out / SUMMARY_PICTURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert beside.read_bytes() == b"not ours"
    assert main(["status", str(out), "--verify"]) == 0         # the picture is no damage
    # A store named like a picture is a folder like any other.
    odd = tmp_path / "result.png"
    assert main(["sweep", str(sweep), "--out", str(odd), "--workers", "1"]) == 1
    assert (odd / SUMMARY_PICTURE).is_file()


def _points(p, q, r, statuses, title="three parameters"):
    """A sweep's per-point Dataset as a store holds it: product of p, q, r; two metrics."""
    import xarray as xr

    grid = np.array(np.meshgrid(p, q, r, indexing="ij")).reshape(3, -1)
    n = grid.shape[1]
    status = np.asarray(statuses, dtype=np.int8)
    first = grid[0] + grid[1]
    ds = xr.Dataset({"first": ("point", np.where(status == 0, first, np.nan)),
                     "second": ("point", np.where(status == 0, grid[0] * grid[2], np.nan)),
                     "status": ("point", status), "steps": ("point", np.full(n, 10)),
                     "failure_time": ("point", np.where(status > 0, 0.5, np.nan)),
                     "failure_reason": ("point", np.array(["" if s == 0 else "why" for s in status], dtype=object))},
                    coords={"p": ("point", grid[0]), "q": ("point", grid[1]), "r": ("point", grid[2])},
                    attrs={"title": title, "sweep_parameters": ["p", "q", "r"]})
    return ds


def test_the_summary_picture_has_a_row_per_metric_and_a_panel_per_value_of_a_third_parameter():
    from solver import status as st
    from sweep.cli.sweep_command import FAILURE_MARKERS, summary_figure

    statuses = [0] * 12
    statuses[1], statuses[5], statuses[7], statuses[10] = (st.NO_ASSEMBLY, st.SINGULAR_JACOBIAN,
                                                            st.SINGULAR_JACOBIAN, st.STEP_TOO_SMALL)
    fig = summary_figure(_points([1.0, 2.0], [3.0, 4.0], [0.1, 0.2, 0.3], statuses))
    panels = [ax for ax in fig.axes if ax.get_xlabel() == "p"]
    assert len(panels) == 2 * 3 and all(ax.get_ylabel() == "q" for ax in panels)
    assert [ax.get_title() for ax in panels] == ["r = 0.1", "r = 0.2", "r = 0.3"] * 2
    colorbars = [ax.get_ylabel() for ax in fig.axes if ax.get_xlabel() != "p"]
    assert colorbars == ["first", "second"]
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["step_too_small (1)", "singular_jacobian (2)",
                                                          "no_assembly (1)"]
    markers = {FAILURE_MARKERS[c][0] for c in (st.NO_ASSEMBLY, st.SINGULAR_JACOBIAN, st.STEP_TOO_SMALL)}
    assert len(markers) == 3
    assert fig._suptitle.get_text() == "three parameters: 8 ok, 4 failed"


def test_a_sampled_third_parameter_is_cut_into_quarters():
    from sweep.cli.sweep_command import summary_figure

    ds = _points([1.0, 2.0], [3.0], np.linspace(0.0, 1.0, 8), [0] * 16)
    fig = summary_figure(ds)
    titles = [ax.get_title() for ax in fig.axes if ax.get_xlabel() == "p"]
    assert titles == ["r: 0 to 0.25", "r: 0.25 to 0.5", "r: 0.5 to 0.75", "r: 0.75 to 1"] * 2
    assert not fig.legends                                  # nothing failed: no failure legend


def test_a_store_that_does_not_fit_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    import shutil

    from sweep import pipeline

    sweep = write_pendulum_sweep(tmp_path)
    out = tmp_path / "s.zarr"
    real = shutil.disk_usage(tmp_path)
    # The file system as a full one would report itself: 10 MiB free (under the margin).
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real._replace(free=10 * 2**20))
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert f"mechsweep: error: {out}: the store needs about " in err
    assert ("and 64 MiB to spare, but its file system has 10 MiB free: free space there, choose another --out, "
            "or lower the number of points, output times or variables") in err
    assert not out.exists()
    assert pipeline.FREE_SPACE_MARGIN == 64 * 2**20


def test_a_cluster_without_workers_stops_in_bounded_time_with_the_resume_command(tmp_path, capsys):
    """A real scheduler whose only worker was killed: the run says so at once, stops after
    --worker-timeout, exits 3 with the reason and the resume command; nothing is lost."""
    from test_run_dask import DaskProcesses

    sweep = write_pendulum_sweep(tmp_path)
    out = tmp_path / "s.zarr"
    procs = DaskProcesses(tmp_path, n_workers=1)
    try:
        procs.workers[0].kill()
        procs.workers[0].wait()
        from distributed import Client

        from sweep.run.cluster import cluster_workers

        with Client(procs.address) as client:       # until the scheduler has seen it go
            deadline = time.monotonic() + 30
            while cluster_workers(client) and time.monotonic() < deadline:
                time.sleep(0.1)
        start = time.monotonic()
        code = main(["sweep", str(sweep), "--out", str(out), "--scheduler", procs.address,
                     "--worker-timeout", "3"])
        elapsed = time.monotonic() - start
    finally:
        procs.stop()
    err = capsys.readouterr().err
    assert code == EXIT_INCOMPLETE
    assert "[mechsweep] the Dask cluster has no workers; waiting up to 3 s for one (--worker-timeout)" in err
    assert ("mechsweep: incomplete: 6 points in " + str(out) + " are not done yet (the Dask cluster had no "
            "workers for 3 s (none started, or all lost); start workers and resume; 2 batches of this run "
            "were left pending); resume with:") in err
    assert f"mechsweep sweep {sweep} --out {out} --resume --scheduler {procs.address}" in err
    assert elapsed < 60
    assert store.check_store(out, "quick").pending == [0, 1]
