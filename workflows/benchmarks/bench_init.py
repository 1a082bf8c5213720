"""Initialise 1,000 four-bar design points: batched Newton against a loop of IPOPT calls.

Each design varies the coupler and rocker lengths and the crank angle and
speed; the crank (B, B') is fixed and the guesses for C, C' are rough (C off
by 0.1, C' zero), so both methods have real work to do.  Compilation is done
once before timing (a sweep compiles once and then runs many batches).

The batched path is :meth:`solver.Compiled.consistent_points` on all
N points (one jit+vmap Gauss–Newton call, IPOPT only where Newton fails).  The
reference is :func:`solver.integrate.initialize.ipopt_point` (``method='ipopt'``) called point by point on
the first M points, scaled to N (said so in the output).  Every result is
checked against the closed-form assembly.

Run: ``.venv/bin/python workflows/benchmarks/bench_init.py [N] [M]``
"""

from __future__ import annotations

import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

import jax
import jax.numpy as jnp

import solver
from solver.integrate.initialize import StateSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from models_for_tests import four_bar, four_bar_assembly  # noqa: E402  (the tests' four-bar)


def designs(integ, dae, n, seed=0):
    """n designs: parameters (batched), guesses, free mask and exact states."""
    rng = np.random.default_rng(seed)
    b, c = rng.uniform(2.6, 3.4, n), rng.uniform(2.2, 2.8, n)
    theta, omega = rng.uniform(0, 2 * math.pi, n), rng.uniform(-2, 2, n)
    params = {k: np.full(n, float(v)) for k, v in dae.params.items()}
    params.update(b=b, c=c)
    pos = {lab: i for i, lab in enumerate(integ.state_labels)}

    def flat(s):
        z = np.zeros(integ.n_state)
        for name, key, primes in (("B", "B", ""), ("C", "C", ""), ("B", "Bd", "'"), ("C", "Cd", "'")):
            for i in range(2):
                z[pos[f"{name}[{i}]{primes}"]] = s[key][i]
        return z

    exact, guess = [], []
    for i in range(n):
        s = four_bar_assembly(theta[i], omega[i], 1.0, b[i], c[i], float(dae.params["d"]), branch=+1)
        exact.append(flat(s))
        guess.append(flat(dict(s, C=s["C"] + 0.1, Cd=np.zeros(2))))
    free = np.array([lab.startswith("C") for lab in integ.state_labels])
    return params, np.array(guess), free, np.array(exact)


def main(n: int = 1000, m: int = 100):
    dae = four_bar()
    comp = solver.compiled_model(dae, 4)
    integ = comp.integrator
    params, guess, free, exact = designs(integ, dae, n)

    def batched_consistent_points(fallback=True):
        z, ok, _ = comp.consistent_points(params, 0.0, guess, free, method="auto" if fallback else "newton")
        return z, ok

    def ipopt_point(p_i, spec):
        return comp.consistent_point(p_i, 0.0, spec, method="ipopt")

    # Warm up (compile) both paths on a batch of the timed size.
    batched_consistent_points()
    p0 = {k: jnp.asarray(v[0]) for k, v in params.items()}
    ipopt_point(p0, StateSpec(guess[0], free, np.zeros(dae.n)))

    reps = 5
    t = time.perf_counter()
    for _ in range(reps):
        zb, ok = batched_consistent_points()
    t_batch = (time.perf_counter() - t) / reps
    err_b = float(np.max(np.abs(zb - exact)))
    _, ok_newton = batched_consistent_points(fallback=False)

    t = time.perf_counter()
    zi = []
    for i in range(m):
        p_i = {k: jnp.asarray(v[i]) for k, v in params.items()}
        zi.append(ipopt_point(p_i, StateSpec(guess[i], free, np.zeros(dae.n))))
    t_loop_m = time.perf_counter() - t
    t_loop = t_loop_m * n / m
    err_i = float(np.max(np.abs(np.array(zi) - exact[:m])))
    agree = float(np.max(np.abs(np.array(zi) - zb[:m])))

    print(f"four-bar consistent initial points: N = {n} designs (coupler, rocker, crank angle/speed varied)")
    print(f"machine: {platform.machine()} {platform.system()}, jax {jax.__version__}, "
          f"{jax.devices()[0].platform}, python {platform.python_version()}")
    print(f"batched (jit+vmap Gauss-Newton, IPOPT fallback): {t_batch * 1e3:9.2f} ms for {n} points "
          f"(mean of {reps}); assembled {int(ok.sum())}/{n} ({int(ok_newton.sum())} by Newton alone); "
          f"max |z - exact| = {err_b:.2e}")
    print(f"IPOPT loop: {t_loop_m * 1e3:9.2f} ms for {m} points, scaled x{n / m:g} -> {t_loop * 1e3:9.2f} ms "
          f"for {n}; max |z - exact| = {err_i:.2e}")
    print(f"batched vs IPOPT on the first {m} points: max difference {agree:.2e}")
    print(f"speed-up (IPOPT loop / batched): {t_loop / t_batch:.1f}x (target >= 10x)")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    main(*args)
