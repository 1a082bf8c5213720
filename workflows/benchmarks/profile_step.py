"""Where a step's time and program size go, per engine mode (issue 11, part 2).

For a model, each part of one integration step is jitted on its own and
timed at a consistent point (200 calls inside one compiled loop, so the
~10 µs dispatch of a jitted call is not counted): the Taylor series (negative stages, stage-0
Newton, stages 1..p), the projection onto the constraints, the step size,
the state advance (Horner) and the dense output at one time.  For each part
the compile time, the optimised HLO's line count and the run time (best of
many calls) are printed, for the ``looped`` engine (lax loop over stages,
dynamic order indexing) and the ``unrolled`` one (straight-line code,
:mod:`solver.taylor.tape`), plus the whole run.

Stage 0 (its residual, Jacobian, Newton and the inverse) and the p stage
solves are timed too: the solves as stage 0 plus p products with the
inverse, minus stage 0.

For mid-size models on the compact engine, XLA:CPU compiling a part's
timing loop as one function can exhaust memory (the Pleiades' state
advance took over 20 GB), although the run's own loop compiles in seconds.
Run those with ``XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=0``:
every loop then runs kernel by kernel, the whole run included, so the
figures are shares of a slower program, not the run's (the Pleiades: 355
against 112 us a step).

Usage::

    .venv/bin/python workflows/benchmarks/profile_step.py [--model pendulum|chain5|rscr|...] [--set N=10]
                                                          [--modes looped,unrolled] [--out results/profile_step.txt]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

import jax
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report  # noqa: E402
import solver  # noqa: E402
from solver.numerics import linalg
from solver.integrate import xla_setup  # noqa: E402
from solver.integrate.initialize import parse_values  # noqa: E402
from solver.integrate.integrator import Integrator, order_for_tol  # noqa: E402
from solver.taylor.program import TaylorProgram  # noqa: E402


def pendulum_problem():
    def pendulum(t, v, p):
        x, y, lam = v["x"], v["y"], v["lam"]
        return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]

    dae = solver.DAE(pendulum, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})
    values = {"x": math.sin(1.2), "y": math.cos(1.2), "x'": 0.0, "y'": 0.0}
    return dae, values, ["x", "x'"], 1e-10, (0.0, 10.0)


def andrews_problem():
    import bench_peers as bp
    dae = solver.DAE(bp.andrews_residual, bp.ANDREWS_NAMES + [f"l{k + 1}" for k in range(6)], {})
    return dae, bp.andrews_values(), bp.ANDREWS_FIXED, 1e-10, (0.0, bp.ANDREWS_T1)


def model_problem(name, overrides=None):
    path = ROOT / "configs" / "mechanisms" / f"{name}.yaml"
    if overrides:  # a structural parameter is set in a copy of the file
        doc = yaml.safe_load(path.read_text())
        doc.setdefault("PhysicalParams", {}).update({k: int(float(v)) if float(v).is_integer() else float(v) for k, v in overrides.items()})
        path = Path(tempfile.mkdtemp()) / path.name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    model = solver.load(path)
    return model.dae, model.initial_values(), model.fixed, model.tol, (model.t0, model.tend)


LOOP = 200  # calls of a part inside one compiled loop: the dispatch of a jitted call is ~10 us


def timed(fn, *args, reps=20):
    """(output, compile seconds, seconds per call): ``fn`` run LOOP times inside one jit.

    Each iteration perturbs the first argument by 0 × (a sum of the previous
    output), so XLA can neither hoist the part out of the loop nor skip it.
    """
    first_t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - first_t

    def body(_, carry):
        a0 = carry
        res = fn(a0, *args[1:])
        leaves = [jnp.sum(jnp.asarray(x, jnp.float64)) for x in jax.tree_util.tree_leaves(res)]
        eps = 0.0 * sum(leaves)
        return jax.tree_util.tree_map(lambda a: a + eps.astype(jnp.asarray(a).dtype), a0)

    looped = jax.jit(lambda a0: jax.lax.fori_loop(0, LOOP, body, a0))
    jax.block_until_ready(looped(args[0]))
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(looped(args[0]))
        best = min(best, time.perf_counter() - t)
    return out, compile_s, best / LOOP


def hlo_lines(fn, *args):
    return len(fn.lower(*args).compile().as_text().splitlines())


def as_in_run(fn):
    """``fn`` jitted and traced the way ``Integrator._run`` traces its step.

    Under ``linalg.native_loops`` wherever XLA compiles loops whole, so that
    each part holds the same linear algebra as the run's loop.
    """
    def traced(*args):
        with linalg.native_loops(xla_setup.loops_compiled_whole()):
            return fn(*args)
    return jax.jit(traced)


def profile(dae, values, fixed, tol, span, mode, rep: Report):
    s = dae.structure
    p = order_for_tol(tol)
    integ = Integrator(TaylorProgram(dae, s.c, s.d, p), mode=mode, batch=False)
    comp = solver.compiled_model(dae, p)
    spec = parse_values(integ, values, fixed)
    params = {k: jnp.asarray(v) for k, v in dae.params.items()}
    z0 = jnp.asarray(comp.consistent_point(params, span[0], spec))
    u0 = jnp.asarray(spec.u_guess)
    t0 = jnp.asarray(span[0])
    consts_of = integ.prog.constants

    series = as_in_run(lambda z, p_, u, t: integ.series(z, u, t, consts_of(p_))[:3])
    (X, u, status), c_series, r_series = timed(series, z0, params, u0, t0)

    def stage0_and_solve(z, p_, u, t):
        c = consts_of(p_)
        g0, X0, _ = integ._stage0_residual(z, t, c)
        uu, solve, _, _ = integ._stage0(g0, X0, u, t, c, 8)
        return uu, solve

    stage0 = as_in_run(lambda z, p_, u, t: stage0_and_solve(z, p_, u, t)[0])
    _, c_s0, r_s0 = timed(stage0, z0, params, u0, t0)

    def stage_solves(r, z, p_, u, t):
        # One solve per order, each on the last one's result (as the stages chain them).
        _, solve = stage0_and_solve(z, p_, u, t)
        for _ in range(p):
            r = solve(r)
        return r

    _, c_sol, r_both = timed(as_in_run(stage_solves), u0, z0, params, u0, t0)
    r_sol = max(r_both - r_s0, 0.0)
    h = integ.step_size(X, tol)
    advance = as_in_run(lambda h_, X_: integ.advance_state(X_, h_))
    (zp, _), c_adv, r_adv = timed(advance, h, X)
    project = as_in_run(lambda z, p_, t: integ.project(z, t, consts_of(p_)))
    _, c_proj, r_proj = timed(project, zp, params, t0 + h)
    stepsize = as_in_run(lambda X_: integ.step_size(X_, tol))
    _, c_h, r_h = timed(stepsize, X)
    dense = as_in_run(lambda s_, X_: integ.dense(X_, s_))
    _, c_dense, r_dense = timed(dense, 0.5 * h, X)
    t_eval = jnp.linspace(span[0], span[1], 11)
    run = lambda: integ.run(params, z0, u0, span[0], span[1], t_eval, tol)
    t = time.perf_counter()
    res = jax.block_until_ready(run())
    first = time.perf_counter() - t
    best = math.inf
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(run())
        best = min(best, time.perf_counter() - t)
    steps = int(res["steps"])
    lines = {
        "series": hlo_lines(series, z0, params, u0, t0),
        "projection": hlo_lines(project, zp, params, t0 + h),
        "advance": hlo_lines(advance, h, X),
        "dense": hlo_lines(dense, 0.5 * h, X),
        "run": len(integ._run_jit.lower(params, z0, u0, span[0], span[1], t_eval, tol, 100_000, jnp.inf,
                                        0.0).compile().as_text().splitlines()),
    }
    rep.say(f"  mode {mode}: order {p}, {steps} steps over [{span[0]}, {span[1]}] at tol {tol:g}, "
             f"status {int(res['status'])}")
    rep.say(f"    {'part':<12}{'run us':>10}{'compile s':>11}{'HLO lines':>11}")
    for part, r_, c_ in (("series", r_series, c_series), ("  stage 0", r_s0, c_s0),
                         (f"  {p} solves", r_sol, c_sol), ("projection", r_proj, c_proj),
                         ("advance", r_adv, c_adv), ("step size", r_h, c_h), ("dense", r_dense, c_dense)):
        key = None if part in ("step size", "  stage 0", f"  {p} solves") else part
        rep.say(f"    {part:<12}{r_ * 1e6:>10.1f}{c_:>11.2f}{lines.get(key, 0) if key else '':>11}")
    rep.say(f"    {'whole run':<12}{best * 1e6:>10.0f}{first - best:>11.2f}{lines['run']:>11}"
             f"   ({best / max(steps, 1) * 1e6:.1f} us per step)")
    return best, steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pendulum", help="pendulum, andrews (bench_peers), or a file stem in configs/mechanisms/")
    ap.add_argument("--modes", default="looped,unrolled")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a structural parameter of a model file (e.g. N=10 for pendulum_chain3d)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rep = Report()
    problems = {"pendulum": pendulum_problem, "andrews": andrews_problem}
    overrides = dict(kv.split("=", 1) for kv in args.set)
    dae, values, fixed, tol, span = problems.get(args.model, lambda: model_problem(args.model, overrides))()
    rep.say(f"profile of one step: {args.model} ({dae.n} unknowns), jax {jax.__version__}, "
             f"{jax.default_backend()}")
    for mode in args.modes.split(","):
        profile(dae, values, fixed, tol, span, mode, rep)
    rep.save(args.out)


if __name__ == "__main__":
    main()
