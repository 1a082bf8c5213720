"""A sweep batch's cost against the solve it wraps: ``sweep.pipeline.batch_fn`` vs ``solver.solve_batch``.

The issue's item "a pipeline that costs less than the solve": in one
process, after a warm-up (compiling) call, the median wall time of

* ``run_batch``: the vmapped integration alone (``Integrator.run_batch`` on
  the batch's consistent initial points: what no pipeline can avoid);
* ``solve_batch``: ``solver.solve_batch`` of the batch (initial values,
  consistent points, integration, the whole Dataset);
* ``batch_fn``: the sweep's batch function on the same batch (its context
  from ``sweep.pipeline.build_context``);
* ``init values``: the model's initial values of every point of the batch,
  as ``solve_batch`` evaluates them (one call per point before; one call
  over the batch's columns where ``Model.initial_values_table`` exists).

Two sweeps: 20,000 pendulum lengths (``x`` and ``y`` stored at 101 times,
one metric, Batch 1,000) and the RSCR over its coupler length and joint
angle (``B``, ``C1``, ``lam`` at 101 times, two metrics, Batch 100).  The
three timings are interleaved (one of each per repetition) so that a
machine shared with other work slows them alike.

Run: ``.venv/bin/python workflows/benchmarks/bench_batch_overhead.py [--reps N] [--only pendulum,rscr]
[--code DIR] [--out FILE]``; ``--code DIR`` imports ``solver`` and ``sweep``
from another checkout (the figures before a change).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PENDULUM = """\
Title: Pendulum lengths
Model: {root}/configs/mechanisms/pendulum.yaml
Sweep:
  product:
    L: {{linspace: [0.5, 2.0, 20000]}}
Outputs:
  variables: [x, y]
  samples: 101
  metrics:
    y_max: {{of: y, reduce: max}}
Batch: 1000
"""

RSCR = """\
Title: RSCR coupler length and joint angle
Model: {root}/configs/mechanisms/rscr.yaml
Override:
  ProblemData: {{tend: 2}}
Sweep:
  product:
    L2: {{linspace: [0.98, 1.18, 10]}}
    gamma: {{linspace: [1.25, 1.45, 10]}}
Outputs:
  variables: [B, C1, lam]
  samples: 101
  metrics:
    Bz_range: {{of: "B[2]", reduce: range}}
    max_multiplier: {{of: lam, reduce: absmax}}
Batch: 100
"""

CASES = {"pendulum": PENDULUM, "rscr": RSCR}


def _clocks(spec, model, context, solver, pipeline):
    """The timed functions of one sweep's first batch: name -> zero-argument callable."""
    from solver.integrate.integrator import pad_output_times

    points = {k: np.asarray(v[:context.batch], dtype=float) for k, v in spec.points.items()}
    B = len(next(iter(points.values())))
    dae = model.dae
    comp = solver.compiled_model(dae, int(model.order or solver.order_for_tol(model.tol)),
                                 batch=context.batch_engine)
    integ = comp.integrator
    full = {k: np.broadcast_to(np.asarray(v, dtype=float), (B,) + np.shape(v)).copy()
            for k, v in dae.param_values(context.constants).items()}
    full.update(points)
    specs = [solver.integrate.initialize.parse_values(integ, model.initial_values({k: v[i] for k, v in full.items()}),
                                                      model.fixed) for i in range(B)]
    z_hat = np.stack([s.z_hat for s in specs])
    free = np.stack([s.free for s in specs])
    u0 = np.stack([s.u_guess for s in specs])
    z0, ok, _ = comp.consistent_points(full, model.t0, z_hat, free, method=model.init)
    z0 = np.where(ok[:, None], z0, z_hat)
    t_rows, _ = pad_output_times(np.asarray(context.time, dtype=float))
    slots = integ.default_slots(B)

    def run_batch():
        res = integ.run_batch(full, z0, u0, model.t0, model.tend, t_rows, model.tol,
                              max_steps=model.max_steps, h_max=model.h_max, slots=slots)
        np.asarray(res["status"])

    def solve_batch():
        solver.solve_batch(model, points, params=context.constants, t_eval=context.time,
                           batch_engine=context.engine_argument)

    def batch_fn():
        pipeline.batch_fn(points, context)

    def init_values():
        table = getattr(model, "initial_values_table", None)
        varying = set(points)
        if table is not None and table({k: (v if k in varying else v[0]) for k, v in full.items()},
                                       varying, B) is not None:
            return
        for i in range(B):
            model.initial_values({k: v[i] for k, v in full.items()})

    failed = int((~ok).sum())
    return {"run_batch": run_batch, "solve_batch": solve_batch, "batch_fn": batch_fn,
            "init values": init_values}, failed


def main(argv=None):
    """Time each sweep's first batch and print (and with ``--out`` save) the table.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="timed repetitions of each (default 15)")
    ap.add_argument("--only", default=",".join(CASES), help="sweeps to run: " + ", ".join(CASES))
    ap.add_argument("--code", default=ROOT, help="checkout to import solver and sweep from (default: this one)")
    ap.add_argument("--out", default=None, help="also write the results here, under the command line")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.code))
    sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))
    from report import Report

    import solver
    import solver.integrate.initialize  # noqa: F401  (parse_values, for the run_batch row's points)
    from sweep import pipeline
    from sweep.spec import load_sweep

    rep = Report()
    rep.say(f"# {time.strftime('%Y-%m-%d %H:%M')}; code from {Path(solver.__file__).resolve().parents[1]}; "
            f"{os.cpu_count()} cores; median (min) of {args.reps} interleaved repetitions after a warm-up, ms: "
            f"wall time, and this process's CPU time (less moved by other work on a shared machine)")
    rep.say(f"{'sweep':<10} {'clock':<5} {'points':>6} {'run_batch':>16} {'solve_batch':>16} {'batch_fn':>16} "
            f"{'init values':>14}  {'batch_fn/solve_batch':>17}  {'batch_fn/run_batch':>17}")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.only.split(","):
            path = Path(folder) / f"{name}.yaml"
            path.write_text(CASES[name].format(root=ROOT))
            spec = load_sweep(path)
            model = pipeline.load_model(spec)
            context = pipeline.build_context(spec, model)
            pipeline.remember_model(context.key, model)     # batch_fn's model is this one: compiled once
            clocks, failed = _clocks(spec, model, context, solver, pipeline)
            for fn in clocks.values():      # warm-up: compile every program once
                fn()
            wall = {k: [] for k in clocks}
            cpu = {k: [] for k in clocks}
            for _ in range(args.reps):
                for key, fn in clocks.items():
                    t, c = time.perf_counter(), time.process_time()
                    fn()
                    wall[key].append(time.perf_counter() - t)
                    cpu[key].append(time.process_time() - c)
            for label, times in (("wall", wall), ("cpu", cpu)):
                med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
                low = {k: min(v) * 1e3 for k, v in times.items()}
                cell = lambda k: f"{med[k]:8.1f} ({low[k]:6.1f})"
                rep.say(f"{name:<10} {label:<5} {context.batch:>6} {cell('run_batch'):>16} {cell('solve_batch'):>16} "
                        f"{cell('batch_fn'):>16} {med['init values']:8.2f} ({low['init values']:5.2f})"
                        f"  {med['batch_fn'] / med['solve_batch']:8.2f} ({low['batch_fn'] / low['solve_batch']:4.2f})"
                        f"  {med['batch_fn'] / med['run_batch']:8.2f} ({low['batch_fn'] / low['run_batch']:4.2f})")
            if failed:
                rep.say(f"{'':<10} ({failed} of the batch's points do not assemble: IPOPT tries them in "
                        f"solve_batch and batch_fn)")
    rep.save(args.out)


if __name__ == "__main__":
    main()
