"""A single run's cost around its step loop: the wrapped run against the plain one.

XLA:CPU runs a program's kernels one after another only when there are at
most 8 of them or every buffer they touch is at most 512 bytes; otherwise
it runs them as a dataflow graph on its thread pool.  The set-up XLA hoists
out of a single run's step loop (scalar conversions, output buffers, copies
of the inputs) is 13 independent kernels, so from 33 output times on (two
output arrays of 33 x 2 doubles) a small model's run paid the thread pool's
hand-offs.  ``Integrator._run_whole`` wraps the unrolled engine's run in a
loop of one trip so that the set-up stays inside the compiled loop.

For the pendulum (bench_peers' problem, tol 1e-10 over [0, 10]) this prints
the run time against the number of output times, the wrapped run
(``Integrator.run``) and the plain one (``jax.jit(Integrator._run)``)
alternating; with ``--compile MODEL,...`` (files in configs/mechanisms), the
compile times of both forms of those models' single runs, alternating
(``Integrator.run`` wraps only the unrolled engine's runs; this measures
what wrapping the others would cost).

Usage:
    .venv/bin/python workflows/benchmarks/bench_entry.py [--outputs 2,32,33,101,1001]
        [--compile rscr,mechanism0] [--repeat 2000] [--out workflows/benchmarks/results/entry_kernels.txt]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import bench_peers as bp  # noqa: E402
import solver  # noqa: E402
from report import Report  # noqa: E402
from solver.integrate.integrator import _device_number, in_one_trip_loop, order_for_tol  # noqa: E402


def pendulum_runs(say, outputs: list[int], repeat: int):
    tol, t1 = 1e-10, 10.0
    dae = solver.DAE(bp.pendulum_residual, ["x", "y", "lam"], {"g": bp.G, "L": 1.0})
    params = {"g": jnp.asarray(bp.G), "L": jnp.asarray(1.0)}
    comp, z0, u0 = bp.mechsweep_state(dae, order_for_tol(tol), params, 0.0, bp.pendulum_values({"L": 1.0}),
                                      bp.PENDULUM_FIXED)
    integ = comp.integrator
    scalars = [_device_number(x) for x in (0.0, t1, tol, 100_000, jnp.inf, 0.0)]
    say(f"pendulum, order {order_for_tol(tol)}, {integ.mode}, tol {tol:g}, t in [0, {t1:g}]; "
        f"best of {repeat} alternating calls")
    say(f"{'outputs':>8} {'wrapped ms':>11} {'plain ms':>9} {'steps':>6}")
    for n in outputs:
        t_eval = jnp.asarray(np.linspace(0.0, t1, n))
        args = (params, z0, u0, *scalars[:2], t_eval, *scalars[2:])
        calls = []
        for fn in (integ._run_jit, jax.jit(integ._run)):
            compiled = fn.lower(*args).compile()
            calls.append(lambda c=compiled: bp.block(c(*args)))
        r = calls[0]()
        wrapped, plain = bp.interleaved_best(calls, repeat)
        say(f"{n:>8} {wrapped * 1e3:>11.3f} {plain * 1e3:>9.3f} {int(r['steps']):>6}")


def compile_times(say, models: list[str], rounds: int):
    from bench_compile_size import capture_call

    say(f"\ncompile seconds (process time) of a single run's program, the two forms alternating, {rounds} rounds")
    for name in models:
        fn, args, kwargs, integ = capture_call(solver.load(ROOT / "configs" / "mechanisms" / f"{name}.yaml"),
                                               "auto", 0)
        times = {"wrapped": [], "plain": []}
        for _ in range(rounds):
            for form, f in (("plain", integ._run), ("wrapped", partial(in_one_trip_loop, integ._run))):
                low = jax.jit(f).lower(*args, **kwargs)
                t = time.process_time()
                low.compile()
                times[form].append(time.process_time() - t)
        say(f"  {name} ({integ.mode}): wrapped {', '.join(f'{t:.1f}' for t in times['wrapped'])}; "
            f"plain {', '.join(f'{t:.1f}' for t in times['plain'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outputs", default="2,32,33,101,1001")
    ap.add_argument("--compile", default="", help="models of configs/mechanisms, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    bp.empty_caches()
    report = Report()
    pendulum_runs(report.say, [int(n) for n in args.outputs.split(",")], args.repeat)
    if args.compile:
        compile_times(report.say, args.compile.split(","), args.rounds)
    report.save(args.out)


if __name__ == "__main__":
    main()
