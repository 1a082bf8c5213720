"""Cloth benchmark (issue 4): cost per step against the number of particles.

The talk's damped particle–spring cloth (m×n particles, each joined to its
four neighbours by damped springs, the outer ring fixed), an ODE of 3mn
second-order equations built by the Lagrangian facility. The stage systems
are solved through the mass-matrix blocks (``linear="kkt"``, here a diagonal
M and no constraints), so every Taylor coefficient should cost O(mn).

In one process:

1. for m = n = 10, 30, 60, 90: compile time, then the wall time of a fixed
   number of fixed-size steps (the same work per step at every size), per
   step and per particle-step, and the log-log slope of time against the
   number of particles (target: 1, linear);
2. the dense path (LU of the full system Jacobian) at the two smallest sizes,
   for comparison;
3. a 90×90 run (24,300 second-order ODEs) over 0.5 s of simulated time with
   error control, as in the talk: the middle particle pushed upwards.

Usage::

    .venv/bin/python workflows/benchmarks/bench_cloth.py [--out results/cloth.txt]
        [--sizes 10 30 60 90] [--tol 1e-8] [--tend 0.5]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report  # noqa: E402
import solver.mechanics.cloth as ex  # noqa: E402
from solver.api import integrator_for  # noqa: E402
from solver.integrate.integrator import order_for_tol  # noqa: E402

# The talk's setting: unit spacing and rest length, the middle particle
# pushed upwards; springs stiff enough that a 0.5 s run is many periods of
# the fastest mode's Taylor radius.
PARAMS = dict(M=1.0, k=100.0, l=1.0, kd=1.0)
PUSH = 5.0


def initial_state(m: int, n: int):
    """Flat consistent state (r, r') of the cloth at rest with the middle pushed up."""
    r0 = ex.cloth_rest_positions(m, n)
    v0 = np.zeros((m, n, 3))
    v0[m // 2, n // 2, 2] = PUSH
    return jnp.concatenate([jnp.asarray(r0.ravel()), jnp.asarray(v0.ravel())])


def setup(m: int, order: int, linear: str):
    """(integrator, run arguments builder) for an m×m cloth."""
    dae = ex.cloth(m, m, **PARAMS)
    integ = integrator_for(dae, order, linear)
    params = {k: jnp.asarray(v) for k, v in dae.param_values(None).items()}
    z0 = initial_state(m, m)
    u0 = jnp.zeros(dae.n)

    def args(t1, t_eval, tol, fixed_step):
        return (params, z0, u0, 0.0, t1, np.asarray(t_eval, float), tol, 1_000_000, jnp.inf, fixed_step)

    return dae, integ, args


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="also write the figures to this file")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 60, 90])
    ap.add_argument("--dense-sizes", type=int, nargs="*", default=[10, 20])
    ap.add_argument("--tol", type=float, default=1e-8)
    ap.add_argument("--steps", type=int, default=5, help="fixed steps timed per size")
    ap.add_argument("--h", type=float, default=0.01, help="the fixed step")
    ap.add_argument("--tend", type=float, default=0.5, help="simulated time of the largest run")
    args = ap.parse_args()
    report = Report()
    say = report.say

    order = order_for_tol(args.tol)
    say(f"# mechsweep cloth benchmark: {platform.machine()} {platform.system()}, python "
        f"{platform.python_version()}, jax {jax.__version__}, {jax.default_backend()}, order {order}")
    say(f"cloth parameters {PARAMS}, middle particle pushed up at {PUSH}; outer ring fixed (an ODE)")

    say(f"\n## 1. Cost per step, {args.steps} fixed steps of h = {args.h} (linear='kkt')")
    say(f"{'m x n':>8} {'particles':>10} {'ODEs':>8} {'compile s':>10} {'ms/step':>10} {'us/particle-step':>17}")
    per_step = {}
    t_eval = np.linspace(0.0, args.steps * args.h, 3)
    for m in args.sizes:
        dae, integ, mk = setup(m, order, "kkt")
        a = mk(args.steps * args.h, t_eval, args.tol, args.h)
        t = time.perf_counter()
        compiled = integ._run_jit.lower(*a).compile()
        tc = time.perf_counter() - t
        jax.block_until_ready(compiled(*a))  # warm
        best = np.inf
        for _ in range(2 if m >= 60 else 3):
            t = time.perf_counter()
            r = jax.block_until_ready(compiled(*a))
            best = min(best, time.perf_counter() - t)
        steps = int(r["steps"])
        assert int(r["status"]) == 0, f"cloth {m}x{m}: status {int(r['status'])}"
        per_step[m * m] = best / steps
        say(f"{m:>4}x{m:<3} {m * m:>10} {3 * m * m:>8} {tc:>10.1f} {1e3 * best / steps:>10.2f} "
            f"{1e6 * best / steps / (m * m):>17.2f}")
    if len(per_step) >= 2:
        P = np.array(sorted(per_step))
        T = np.array([per_step[k] for k in P])
        slope = np.polyfit(np.log(P), np.log(T), 1)[0]
        say(f"log-log slope of time per step against particles: {slope:.2f}  (target: 1, linear)")
        say(f"largest / smallest: {P[-1] / P[0]:.0f}x the particles, {T[-1] / T[0]:.0f}x the time per step")

    if args.dense_sizes:
        say("\n## 2. The dense path (LU of the full system Jacobian), same steps")
        for m in args.dense_sizes:
            dae, integ, mk = setup(m, order, "dense")
            a = mk(args.steps * args.h, t_eval, args.tol, args.h)
            compiled = integ._run_jit.lower(*a).compile()
            jax.block_until_ready(compiled(*a))
            t = time.perf_counter()
            r = jax.block_until_ready(compiled(*a))
            dt = (time.perf_counter() - t) / int(r["steps"])
            _, ki, kmk = setup(m, order, "kkt")
            kc = ki._run_jit.lower(*kmk(args.steps * args.h, t_eval, args.tol, args.h)).compile()
            ka = kmk(args.steps * args.h, t_eval, args.tol, args.h)
            jax.block_until_ready(kc(*ka))
            t = time.perf_counter()
            jax.block_until_ready(kc(*ka))
            dk = (time.perf_counter() - t) / args.steps
            say(f"{m}x{m} ({3 * m * m} ODEs): dense {1e3 * dt:.2f} ms/step, kkt {1e3 * dk:.2f} ms/step, "
                f"ratio {dt / dk:.1f}x")

    m = max(args.sizes)
    say(f"\n## 3. {m}x{m} cloth ({3 * m * m} second-order ODEs) over [0, {args.tend}] s, tol {args.tol}")
    dae, integ, mk = setup(m, order, "kkt")
    a = mk(args.tend, np.linspace(0.0, args.tend, 11), args.tol, 0.0)
    t = time.perf_counter()
    compiled = integ._run_jit.lower(*a).compile()
    tc = time.perf_counter() - t
    t = time.perf_counter()
    r = jax.block_until_ready(compiled(*a))
    tr = time.perf_counter() - t
    status = int(r["status"])
    z = np.asarray(r["values"]["r"])[:, 0].reshape(-1, m, m, 3)
    say(f"status {status} ({'success' if status == 0 else 'FAILED'}), {int(r['steps'])} steps, "
        f"t_final {float(r['t_final']):.3f}; compile {tc:.1f} s, run {tr:.1f} s "
        f"({1e3 * tr / max(int(r['steps']), 1):.0f} ms/step)")
    say(f"middle particle height at t = 0, {args.tend / 2:g}, {args.tend:g}: "
        f"{z[0, m // 2, m // 2, 2]:.4f}, {z[5, m // 2, m // 2, 2]:.4f}, {z[-1, m // 2, m // 2, 2]:.4f}")
    # Accuracy: the same run at a 100x tighter tolerance (and its own order).
    tight = args.tol / 100
    _, integ2, mk2 = setup(m, order_for_tol(tight), "kkt")
    r2 = jax.block_until_ready(integ2.run(*mk2(args.tend, np.linspace(0.0, args.tend, 11), tight, 0.0)[:7]))
    z2 = np.asarray(r2["values"]["r"])[:, 0].reshape(-1, m, m, 3)
    say(f"against the same run at tol {tight:g} ({int(r2['steps'])} steps, status {int(r2['status'])}): "
        f"max |r difference| over the 11 output times = {np.max(np.abs(z - z2)):.1e}")

    report.save(args.out)


if __name__ == "__main__":
    main()
