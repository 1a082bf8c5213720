"""A sweep through the whole pipeline against the same batches solved in one process.

The issue's target "a sweep batch costs at most 1.3x the same ``solve_batch``
call in-process": for the pendulum (20,000 lengths, Batch 1,000) and the RSCR
(100 designs, Batch 100), the sweeps of ``bench_batch_overhead.py``:

* in-process: ``solver.solve_batch`` of every batch of the sweep, one after
  the other, after a warm-up (compiling) call;
* the pipeline: ``sweep.run.run_sweep`` on a LocalCluster of one worker
  process (one thread): tasks, transport, the worker's batch function and
  its writes into a local Zarr store, the driver's commits. A first sweep
  of one batch warms the worker up (its model built and compiled once, as
  in any long sweep); the timed sweep's wall time excludes the cluster's
  start (``SweepSummary.wall_seconds``).

The ratio is pipeline wall / in-process wall, per batch. With one worker,
nothing runs in parallel: it is the pipeline's cost over the solve.  The
worker is a single-threaded process pinned to one core (as every sweep's
workers, one per core); the in-process batches are timed twice, as they run
and with every thread of the process pinned to one core, and the ratio is
given against both: a batch computes on one thread either way, but a thread
free to move between cores ran it 10-15 % slower here, and the second is the
pipeline's cost over the same call in the same conditions.  A sweep's own
workers also keep the memory a batch frees for the next one
(``sweep.run.keep_freed_memory``); the in-process batches are timed a third
time, last, with this process set so too.

Run: ``.venv/bin/python workflows/benchmarks/bench_sweep_vs_solve.py [--only pendulum,rscr]
[--out FILE]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def measure(name: str, text: str, folder: Path) -> dict:
    """One sweep: in-process seconds per batch, pipeline seconds per batch, and the parts."""
    from solver import solve_batch
    from sweep.pipeline import batch_fn, build_context
    from sweep.run import dask_client, run_sweep
    from sweep.spec import load_sweep

    path = folder / f"{name}.yaml"
    path.write_text(text.format(root=ROOT))
    spec = load_sweep(path)
    context = build_context(spec)
    model_batches = [slice(i, min(i + spec.batch, spec.n_points)) for i in range(0, spec.n_points, spec.batch)]
    from sweep.pipeline import load_model

    model = load_model(spec)
    first = {k: np.asarray(v[model_batches[0]], float) for k, v in spec.points.items()}
    solve_batch(model, first, params=context.constants, t_eval=context.time,
                batch_engine=context.engine_argument)        # compile

    def in_process_seconds() -> float:
        t0 = time.perf_counter()
        for sl in model_batches:
            solve_batch(model, {k: np.asarray(v[sl], float) for k, v in spec.points.items()},
                        params=context.constants, t_eval=context.time, batch_engine=context.engine_argument)
        return time.perf_counter() - t0

    in_process = in_process_seconds()
    with one_core():
        in_process_one_core = in_process_seconds()
    # Last: the allocator's settings cannot be taken back.
    from sweep.run import keep_freed_memory

    keep_freed_memory()
    in_process_kept = in_process_seconds()

    with dask_client(workers=1) as client:
        warm = SimpleNamespace(points={k: v[:spec.batch] for k, v in spec.points.items()},
                               batch=spec.batch, hash=f"{spec.hash}-warm-up", title="warm-up", n_batches=1)
        run_sweep(warm, batch_fn, context, str(folder / f"{name}-warm.zarr"), client=client,
                  progress=False)
        summary = run_sweep(spec, batch_fn, context, str(folder / f"{name}.zarr"), client=client,
                            progress=False)
    n = len(model_batches)
    busy = sum(summary.batch_seconds.values())
    return {"name": name, "points": spec.n_points, "batches": n,
            "in_process": in_process / n, "in_process_one_core": in_process_one_core / n,
            "in_process_kept": in_process_kept / n,
            "pipeline": summary.wall_seconds / n,
            "batch_fn": busy / n, "total": summary.total_seconds}


class one_core:
    """Every thread of this process pinned to its first allowed core while inside (Linux; elsewhere nothing)."""

    def __enter__(self):
        self.saved = {}
        if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
            return self
        core = {min(os.sched_getaffinity(0))}
        for tid in map(int, os.listdir("/proc/self/task")):
            try:
                self.saved[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, core)
            except OSError:       # a thread that ended meanwhile
                pass
        return self

    def __exit__(self, *exc):
        for tid, cores in self.saved.items():
            try:
                os.sched_setaffinity(tid, cores)
            except OSError:
                pass
        return False


def main(argv=None) -> int:
    """Measure and print (and with ``--out`` save) the table.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="pendulum,rscr", help="sweeps to run: pendulum, rscr")
    ap.add_argument("--out", default=None, help="also write the results here, under the command line")
    ap.add_argument("--row", action="store_true", help=argparse.SUPPRESS)   # one sweep, its figures as JSON
    args = ap.parse_args(argv)
    sys.path[:0] = [ROOT, HERE]
    from bench_batch_overhead import CASES

    if args.row:
        with tempfile.TemporaryDirectory(prefix="mechsweep-bench-") as tmp:
            print("ROW " + json.dumps(measure(args.only, CASES[args.only], Path(tmp))), flush=True)
        return 0

    lines = [f"$ {' '.join(shlex.quote(a) for a in ['.venv/bin/python', os.path.relpath(__file__, ROOT), *(argv if argv is not None else sys.argv[1:])])}",
             f"# {datetime.datetime.now():%Y-%m-%d %H:%M}; {os.cpu_count()} cores; one worker process "
             f"(one thread), local Zarr store; ms per batch",
             f"{'sweep':10} {'points':>7} {'batches':>7} {'solve_batch':>12} {'on 1 core':>10} {'kept':>8} "
             f"{'sweep batch':>12} {'of which worker':>16} {'ratio':>6} {'vs 1 core':>10} {'vs kept':>8}"]
    for name in args.only.split(","):
        # Each sweep in a process of its own: the last in-process timing changes the
        # process's allocator for good.
        out = subprocess.run([sys.executable, __file__, "--only", name, "--row"], capture_output=True, text=True,
                             check=True).stdout
        r = json.loads(next(line for line in out.splitlines() if line.startswith("ROW "))[4:])
        lines.append(f"{r['name']:10} {r['points']:7d} {r['batches']:7d} {1e3 * r['in_process']:12.1f} "
                     f"{1e3 * r['in_process_one_core']:10.1f} {1e3 * r['in_process_kept']:8.1f} "
                     f"{1e3 * r['pipeline']:12.1f} {1e3 * r['batch_fn']:16.1f} "
                     f"{r['pipeline'] / r['in_process']:6.2f} {r['pipeline'] / r['in_process_one_core']:10.2f} "
                     f"{r['pipeline'] / r['in_process_kept']:8.2f}")
        print(lines[-1], flush=True)
    lines.append("# solve_batch: in-process solver.solve_batch per batch; on 1 core: the same "
                 "with every thread of the process pinned to one core, as a sweep worker is; kept: the same, unpinned, "
                 "after keep_freed_memory(), as a sweep's own workers run; sweep batch: "
                 "run_sweep wall time per batch (tasks, worker's batch function and writes, driver's "
                 "commits); of which worker: the batch function's own time on the worker; ratio: sweep "
                 "batch / solve_batch; vs 1 core: sweep batch / solve_batch on 1 core; vs kept: sweep batch / kept")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
