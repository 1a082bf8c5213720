"""The XLA:CPU settings mechsweep makes, each on and off: run and compile times per problem.

``--setting loops`` (default): mechsweep sets
``xla_cpu_small_while_loop_byte_threshold`` (``solver/integrate/xla_setup.py``) so that
XLA:CPU compiles a small model's whole step loop as one kernel; XLA's default
threshold is 1024 bytes.  ``--setting dispatch``: mechsweep turns JAX's
asynchronous CPU dispatch off (``jax_cpu_enable_async_dispatch``), so a run
executes on the calling thread instead of being handed to another.
``--setting unroll``: mechsweep bounds LLVM's full unrolling
(``-unroll-full-max-count``) to loops of at most 8 trips; LLVM's own default
has no bound (4294967295).  ``--setting vectors``: mechsweep compiles a
batch (``run_batch``, ``solve_batch``) whose round XLA:CPU compiles as one
function for 512-bit vectors (``xla_cpu_prefer_vector_width``,
``solver.integrate.integrator.WHOLE_ROUND_CPU_OPTIONS``); LLVM prefers 256 bits by
default.  Single runs and the other batches keep the default: their rows
compile the same program under both settings.

Both are read once per process, when JAX starts its backend, so each setting
runs in child processes of its own, the settings alternating round after
round (the shared machine's speed drifts by up to 2x within minutes); each
figure is the best over rounds of the best of ``--repeat`` calls.  The
"between other work" row times each call after half a millisecond of Python
work, as a call inside ``solve`` or a sweep meets it; back-to-back calls find
the dispatch thread still awake.  The same child also times diffrax on the
pendulum and Andrews' squeezer: both settings are process-wide, and they
apply to diffrax as well, which ``bench_peers`` (one process, one setting)
therefore includes on both sides.

Usage:
    .venv/bin/python workflows/benchmarks/bench_small_loops.py [--setting loops|dispatch] [--rounds 2]
        [--repeat 20] [--out workflows/benchmarks/results/small_loops.txt]
    .venv/bin/python workflows/benchmarks/bench_small_loops.py --setting unroll --rounds 2 --repeat 20 \
        --out workflows/benchmarks/results/unroll.txt
    .venv/bin/python workflows/benchmarks/bench_small_loops.py --setting vectors --rounds 2 --repeat 20 \
        --out workflows/benchmarks/results/vector_width.txt
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
XLA_DEFAULT = 1024
SETTINGS = ("loops", "dispatch", "unroll", "vectors")
LLVM_UNROLL_DEFAULT = 4294967295  # LLVM's FullUnrollMaxCount when the option is not given
# The child turns JAX's asynchronous dispatch back on when this is set.
ASYNC_ENV = "BENCH_ASYNC_DISPATCH"
# The child compiles its batches for vectors of this many bits when this is set.
WIDTH_ENV = "BENCH_BATCH_VECTOR_WIDTH"
LLVM_VECTOR_WIDTH = 256  # LLVM's preferred width on x86 when XLA names none
# Batches of shipped models as a sweep runs them (solve_batch): (file, parameter varied by +-5 %, points).
MODEL_BATCHES = (("double_pendulum.yaml", "l2", 200), ("slider_crank.yaml", "m2", 200), ("rscr.yaml", "L1", 64),
                 ("mechanism0_lagrangian.yaml", "k", 100))


def _python_work():
    """About half a millisecond of interpreter work between two timed calls."""
    return sum(range(20_000))


def child(repeat: int) -> dict:
    """Figures of this process's setting: {row: [compile s or None, best run s]}."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import jax
    import jax.numpy as jnp
    import bench_peers as bp
    import solver
    from solver.integrate.integrator import order_for_tol

    if os.environ.get(ASYNC_ENV):
        # Before the first computation: JAX reads it when it starts the CPU backend.
        jax.config.update("jax_cpu_enable_async_dispatch", True)
    if os.environ.get(WIDTH_ENV):
        # Read by every Integrator built after this (none is built yet).
        from solver.integrate.integrator import WHOLE_ROUND_CPU_OPTIONS
        WHOLE_ROUND_CPU_OPTIONS["xla_cpu_prefer_vector_width"] = int(os.environ[WIDTH_ENV])
    bp.empty_caches()
    out = {}

    def measure(name, fn, n=repeat):
        tc, best, r = bp.compile_and_run(fn, n)
        out[name] = [tc, best]
        return r

    def measure_between_work(name, fn, n=repeat):
        fn()
        times = []
        for _ in range(n):
            _python_work()
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        out[name] = [None, min(times)]

    # Pendulum, one run and 1,000 lengths (as bench_peers' section 1).
    tol, t1 = 1e-10, 10.0
    t_eval = np.linspace(0.0, t1, 101)
    order = order_for_tol(tol)
    dae = solver.DAE(bp.pendulum_residual, ["x", "y", "lam"], {"g": bp.G, "L": 1.0})
    params = {"g": jnp.asarray(bp.G), "L": jnp.asarray(1.0)}
    comp, z0, u0 = bp.mechsweep_state(dae, order, params, 0.0, bp.pendulum_values({"L": 1.0}), bp.PENDULUM_FIXED)
    integ = comp.integrator
    run_one = lambda: bp.block(integ.run(params, z0, u0, 0.0, t1, t_eval, tol))
    measure("pendulum, one run: mechsweep", run_one)
    measure_between_work("pendulum, one run between other work: mechsweep", run_one)
    measure_between_work("pendulum, solve() between other work: mechsweep",
                         lambda: solver.solve(dae, (0.0, t1), bp.pendulum_values({"L": 1.0}), bp.PENDULUM_FIXED,
                                              tol=tol, t_eval=t_eval), max(3, repeat // 2))
    if bp.diffrax is not None:
        one, _ = bp.diffrax_pendulum(t1, t_eval)
        measure("pendulum, one run: diffrax (rtol 1e-10)", lambda: bp.block(one(1.0, 1e-10)))
        measure_between_work("pendulum, one run between other work: diffrax", lambda: bp.block(one(1.0, 1e-10)))
    B = 1000
    Ls = np.linspace(0.5, 2.0, B)
    params_b = {"g": np.full(B, bp.G), "L": Ls}
    compb = solver.compiled_model(dae, order, batch=True)
    z0s, u0s = bp.mechsweep_states(compb, [bp.pendulum_values({"L": L}) for L in Ls], bp.PENDULUM_FIXED,
                                   params_b, 0.0)
    pb = {k: jnp.asarray(v) for k, v in params_b.items()}
    measure("pendulum, 1000 lengths: mechsweep",
            lambda: bp.block(compb.integrator.run_batch(pb, z0s, u0s, 0.0, t1, t_eval, tol, slots=256)),
            max(3, repeat // 4))
    measure("pendulum, 1000 lengths, default slots: mechsweep",
            lambda: bp.block(compb.integrator.run_batch(pb, z0s, u0s, 0.0, t1, t_eval, tol)), max(3, repeat // 4))
    for file, var, n in MODEL_BATCHES:
        model = solver.load(str(ROOT / "configs" / "mechanisms" / file))
        table = {var: np.linspace(0.95, 1.05, n) * float(model.dae.params[var])}
        measure(f"{file} x{n}, solve_batch: mechsweep",
                lambda model=model, table=table: solver.solve_batch(model, table), max(3, repeat // 4))

    # Andrews' squeezer at tol 1e-10.
    adae = solver.DAE(bp.andrews_residual, bp.ANDREWS_NAMES + [f"l{k + 1}" for k in range(6)], {})
    acomp, az0, au0 = bp.mechsweep_state(adae, order, {}, 0.0, bp.andrews_values(), bp.ANDREWS_FIXED)
    at = np.array([0.0, bp.ANDREWS_T1])
    measure("Andrews, tol 1e-10: mechsweep",
            lambda: bp.block(acomp.integrator.run({}, az0, au0, 0.0, bp.ANDREWS_T1, at, 1e-10)))
    if bp.diffrax is not None:
        run_d = bp.diffrax_andrews()
        measure("Andrews, tol 1e-10: diffrax (rtol 1e-10)", lambda: bp.block(run_d(1e-10)))

    # RSCR and Mechanism0 (as bench_peers' section 3, mechsweep only).
    for title, file, tend in (("RSCR", "rscr.yaml", None), ("Mechanism0", "mechanism0.yaml", 5.0)):
        model = solver.load(str(ROOT / "configs" / "mechanisms" / file))
        mtol = model.tol
        mparams, mcomp, mz0, mu0 = bp.shipped_model_state(model, model.order or order_for_tol(mtol))
        te = tend or model.tend
        mt = np.linspace(model.t0, te, 101)
        kw = dict(max_steps=model.max_steps or 100_000, h_max=model.h_max)
        measure(f"{title}: mechsweep",
                lambda mcomp=mcomp, mparams=mparams, mz0=mz0, mu0=mu0, mt=mt, te=te, mtol=mtol, kw=kw, model=model:
                bp.block(mcomp.integrator.run(mparams, mz0, mu0, model.t0, te, mt, mtol, **kw)),
                max(3, repeat // 4))

    # The 90x90 cloth, 5 fixed steps (as bench_peers' section 4).
    m, h, steps = 90, 0.01, 5
    _, cparams, ccomp, cz0, cu0 = bp.cloth_state(m, order_for_tol(1e-8))
    ct = np.linspace(0.0, steps * h, 11)
    measure("cloth 90x90, 5 steps: mechsweep",
            lambda: bp.block(ccomp.integrator.run(cparams, cz0, cu0, 0.0, steps * h, ct, 1e-8, fixed_step=h)), 2)
    return out


def _least(a, b):
    """The smaller of two compile times, either of which may be None (not measured)."""
    return b if a is None else a if b is None else min(a, b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", choices=SETTINGS, default="loops",
                    help="loops: XLA's small-loop threshold, default against mechsweep's; "
                         "dispatch: JAX's asynchronous CPU dispatch against mechsweep's synchronous one; "
                         "unroll: LLVM's unbounded full unrolling against mechsweep's bound; "
                         "vectors: a whole-compiled batch's code for 256-bit vectors against mechsweep's 512")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of child processes per setting")
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per measurement in a child")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.repeat)), flush=True)
        return
    sys.path.insert(0, str(ROOT))
    from solver.integrate.xla_setup import (SMALL_LOOP_BYTES, UNROLL_MAX_TRIPS, UNROLL_OPTION, with_extra_options,
                                  with_small_loop_option)

    if args.setting == "loops":
        settings = (XLA_DEFAULT, SMALL_LOOP_BYTES)
        envs = {s: dict(os.environ, XLA_FLAGS=with_small_loop_option("", s)) for s in settings}
        names = ("default", "hoisted")
        title = (f"# XLA small-loop hoisting: threshold {XLA_DEFAULT} bytes (XLA's default) vs {SMALL_LOOP_BYTES} "
                 f"(mechsweep's, solver/integrate/xla_setup.py)")
    elif args.setting == "unroll":
        settings = (LLVM_UNROLL_DEFAULT, UNROLL_MAX_TRIPS)
        # solver.integrate.xla_setup adds its own bound only where XLA_FLAGS names none.
        envs = {s: dict(os.environ, XLA_FLAGS=with_extra_options("", {UNROLL_OPTION: s})) for s in settings}
        names = ("LLVM", "bounded")
        title = (f"# LLVM's full unrolling: {UNROLL_OPTION}={LLVM_UNROLL_DEFAULT} (LLVM's default, no bound) vs "
                 f"{UNROLL_MAX_TRIPS} (mechsweep's, solver/integrate/xla_setup.py); both with mechsweep's small-loop threshold")
    elif args.setting == "vectors":
        settings = (LLVM_VECTOR_WIDTH, 512)
        base = {k: v for k, v in os.environ.items() if k != WIDTH_ENV}
        envs = {w: dict(base, **{WIDTH_ENV: str(w)}) for w in settings}
        names = ("256 bit", "512 bit")
        title = ("# Vector width of the machine code of a batch whose round is compiled whole: 256 bits (LLVM's "
                 "preference) vs 512 (mechsweep's, solver.integrate.integrator.WHOLE_ROUND_CPU_OPTIONS); single runs and the "
                 "other batches keep LLVM's default under both")
    else:
        settings = ("async", "sync")
        base = {k: v for k, v in os.environ.items() if k != ASYNC_ENV}
        envs = {"async": dict(base, **{ASYNC_ENV: "1"}), "sync": base}
        names = ("async", "sync")
        title = ("# JAX's CPU dispatch: asynchronous (JAX's default) vs synchronous (mechsweep's, "
                 "solver/integrate/xla_setup.py); both with mechsweep's small-loop threshold")
    best: dict = {s: {} for s in settings}
    for rnd in range(args.rounds):
        for s in settings:
            env = envs[s]
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--child", "--repeat", str(args.repeat)], env=env,
                                  capture_output=True, text=True)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not line:
                sys.exit(f"child with setting {s} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            print(f"round {rnd + 1}, setting {s}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
            for row, (tc, run) in json.loads(line[0][7:]).items():
                old = best[s].get(row)
                best[s][row] = [tc if old is None else _least(old[0], tc), min(old[1], run) if old else run]
    lines = [title,
             f"# {platform.machine()} {platform.system()}, python {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d %H:%M')}; {args.rounds} alternating rounds of one child process per "
             f"setting, best of {args.repeat} calls (fewer for the long runs) per round; compile = first call - second",
             f"# command: .venv/bin/python workflows/benchmarks/bench_small_loops.py --setting {args.setting} "
             f"--rounds {args.rounds} --repeat {args.repeat}",
             f"{'work':<50} {'run, ' + names[0]:>13} {'run, ' + names[1]:>13} {'speed-up':>9} "
             f"{'compile, ' + names[0]:>17} {'compile, ' + names[1]:>17}"]
    seconds = lambda c: f"{c:>15.2f} s" if c is not None else f"{'-':>17}"
    for row in best[settings[0]]:
        (c0, r0), (c1, r1) = best[settings[0]][row], best[settings[1]][row]
        lines.append(f"{row:<50} {r0 * 1e3:>10.3f} ms {r1 * 1e3:>10.3f} ms {r0 / r1:>8.2f}x {seconds(c0)} "
                     f"{seconds(c1)}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
