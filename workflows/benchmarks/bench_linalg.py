"""Small dense LU under vmap: solver.numerics.linalg (unrolled) against LAPACK.

Prints ns per batch element for a batch of 1,000 random n×n systems, for the
factorisation and for one solve, with ``solver.numerics.linalg`` and with
``jax.scipy.linalg`` (LAPACK getrf/getrs through XLA:CPU custom calls); the
thresholds ``FACTOR_UNROLL_MAX`` / ``SOLVE_UNROLL_MAX`` come from these.

Usage::

    .venv/bin/python workflows/benchmarks/bench_linalg.py [--out results/linalg.txt]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report  # noqa: E402
from solver.numerics import linalg  # noqa: E402

jax.config.update("jax_enable_x64", True)


def best(fn, n=20):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return min(times)


def unrolled_factor(A):
    return linalg.LU(*linalg._factor_unrolled(A), jnp.asarray(False))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    report = Report()
    say = report.say

    B = args.batch
    say(f"# small LU under vmap, batch {B} — {platform.processor() or platform.machine()}, jax {jax.__version__}")
    say(f"# solver.numerics.linalg: FACTOR_UNROLL_MAX = {linalg.FACTOR_UNROLL_MAX}, SOLVE_UNROLL_MAX = {linalg.SOLVE_UNROLL_MAX}")
    say("n   unrolled factor   LAPACK factor   unrolled solve   LAPACK solve   (ns per element)")
    rng = np.random.default_rng(0)
    for n in (2, 3, 4, 5, 6, 8, 10):
        A = jnp.asarray(rng.standard_normal((B, n, n)) + n * np.eye(n))
        b = jnp.asarray(rng.standard_normal((B, n)))
        uf = jax.jit(jax.vmap(unrolled_factor))
        lf = jax.jit(jax.vmap(jsl.lu_factor))
        fact = uf(A)
        lu, piv = lf(A)
        assert np.array_equal(np.asarray(fact.piv), np.asarray(piv))
        # The unrolled solve whatever n is (lu_solve itself switches at SOLVE_UNROLL_MAX).
        us = jax.jit(jax.vmap(lambda f, r: _unrolled_solve(f, r)))
        ls = jax.jit(jax.vmap(lambda l, p, r: jsl.lu_solve((l, p), r)))
        x_u, x_l = us(fact, b), ls(lu, piv, b)
        assert np.allclose(np.asarray(x_u), np.asarray(x_l), rtol=1e-10, atol=1e-12)
        t = [best(lambda: uf(A)), best(lambda: lf(A)), best(lambda: us(fact, b)), best(lambda: ls(lu, piv, b))]
        say(f"{n:<3d} " + "  ".join(f"{x / B * 1e9:14.0f}" for x in t))
    report.save(args.out)


def _unrolled_solve(fact, b):
    saved = linalg.SOLVE_UNROLL_MAX
    linalg.SOLVE_UNROLL_MAX = 10**6
    try:
        return linalg.lu_solve(fact, b)
    finally:
        linalg.SOLVE_UNROLL_MAX = saved


if __name__ == "__main__":
    main()
