"""What a small model's run costs on XLA:CPU: kernels, not arithmetic.

Two measurements, each interleaved in one process so that the machine's
drift hits both sides alike (best and median of ``--repeat`` calls):

1. Output chunks.  XLA:CPU's thunk executor runs a loop body's kernels
   sequentially only when every buffer the body touches is at most 512
   bytes; otherwise it spreads them over its thread pool.  The pendulum's
   ``Integrator.run`` is timed with its outputs in chunks that stay under
   the limit (what ``run`` does) and in one chunk (the whole output array
   inside the stepping loop, as before), for several numbers of outputs:
   the one-chunk run jumps once the array passes 512 bytes (33 outputs of
   x, x' as 8-byte floats).
2. Kernels per loop body of the pendulum's compiled run, from XLA's
   optimised HLO (fusions, copies, concatenations and calls, by the source
   line that made them), with ``--kernels``.

Usage:
    .venv/bin/python workflows/benchmarks/bench_kernels.py [--repeat 300] [--kernels]
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import bench_peers as bp  # noqa: E402  (the pendulum problem and helpers)
import solver  # noqa: E402
from solver.integrate.integrator import Integrator, order_for_tol  # noqa: E402

TOL, T1 = 1e-10, 10.0


def pendulum_integrator():
    dae = solver.DAE(bp.pendulum_residual, ["x", "y", "lam"], {"g": bp.G, "L": 1.0})
    params = {"g": jnp.asarray(bp.G), "L": jnp.asarray(1.0)}
    comp, z0, u0 = bp.mechsweep_state(dae, order_for_tol(TOL), params, 0.0, bp.pendulum_values({"L": 1.0}),
                                      bp.PENDULUM_FIXED)
    return comp.integrator, params, z0, u0


def one_chunk(n_out: int) -> int:
    """The whole output array in the stepping loop (the layout before chunks)."""
    return max(n_out, 1)


def bench_chunks(repeat: int):
    print("## 1. Pendulum run (order 13, tol 1e-10, t in [0, 10]): outputs in small chunks or in one")
    print(f"{'outputs':>8} {'bytes of x':>10} {'chunks: best':>13} {'median':>8} {'one chunk: best':>16} {'median':>8}"
          f" {'ratio':>6}")
    chunked_rule = Integrator._output_chunk
    for n_out in (2, 16, 32, 33, 64, 101, 1001):
        t_eval = np.linspace(0.0, T1, n_out)
        runs = {}
        for name, rule in (("chunks", chunked_rule), ("one", lambda self, n: one_chunk(n))):
            Integrator._output_chunk = rule
            try:
                integ, params, z0, u0 = pendulum_integrator()
                # Each DAE has its own compiled model; tracing happens at the first call.
                fn = (lambda integ=integ, params=params, z0=z0, u0=u0, t_eval=t_eval:
                      bp.block(integ.run(params, z0, u0, 0.0, T1, t_eval, TOL)))
                res = fn()
            finally:
                Integrator._output_chunk = chunked_rule
            assert int(res["status"]) == 0
            runs[name] = (fn, res)
        np.testing.assert_array_equal(np.asarray(runs["chunks"][1]["values"]["x"]),
                                      np.asarray(runs["one"][1]["values"]["x"]))
        times = {k: [] for k in runs}
        for _ in range(repeat):
            for k, (fn, _) in runs.items():
                t = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t)
        c, o = times["chunks"], times["one"]
        print(f"{n_out:8d} {16 * n_out:10d} {min(c) * 1e3:10.3f} ms {statistics.median(c) * 1e3:8.3f}"
              f" {min(o) * 1e3:13.3f} ms {statistics.median(o) * 1e3:8.3f} {min(o) / min(c):6.2f}")


def bench_kernels():
    print("\n## 2. Kernels per loop body of the pendulum's run (101 outputs), from the optimised HLO")
    integ, params, z0, u0 = pendulum_integrator()
    t_eval = jnp.asarray(np.linspace(0.0, T1, 101))
    args = (params, z0, u0, 0.0, T1, t_eval, TOL, 100_000, jnp.inf, 0.0)
    text = jax.jit(integ._run).lower(*args).compile().as_text()
    bodies = {}
    for m in re.finditer(r"condition=%?([\w.\-]+), body=%?([\w.\-]+)", text):
        bodies[m.group(2)] = "while body"
    comps, cur = {}, None
    for line in text.splitlines():
        head = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head and not line.startswith(" "):
            cur = head.group(2)
            comps[cur] = collections.Counter()
            if head.group(1):
                bodies[cur] = "entry"
            continue
        kind = re.search(r"= [^ ]+ (fusion|copy|concatenate|custom-call|dot|while|dynamic-update-slice|call)\(", line)
        if cur and kind:
            comps[cur][kind.group(1)] += 1
    for name, what in bodies.items():
        counts = comps.get(name, {})
        total = sum(counts.values())
        if total:
            print(f"  {what:10s} {total:4d} kernels  {dict(counts)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--kernels", action="store_true", help="also count the kernels per loop body")
    args = ap.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    print(f"# bench_kernels: jax {jax.__version__}, {jax.default_backend()}, best and median of {args.repeat}"
          f" interleaved calls")
    bench_chunks(args.repeat)
    if args.kernels:
        bench_kernels()


if __name__ == "__main__":
    main()
