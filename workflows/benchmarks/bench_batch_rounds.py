"""A batch's slot pool in rounds (CPU) against the pool refilled after every step (GPU form).

``Integrator.run_batch`` on a CPU runs its slots in rounds
(``_run_batch_rounds``): steps until a sixteenth of the slots have finished,
each slot writing its outputs into a buffer of its own, then the finished
slots go to their rows and take the next problems.  A round holds no
scatter, so XLA:CPU compiles it as one function where the step holds no
LAPACK call or library fusion either (small models).  The form it replaced
(``_run_batch_scatter``, kept for GPUs) refilled after every step and
scattered each output to its row, and its step loop ran kernel by kernel on
XLA's thread pool.

For each case this prints both forms' compile time, their best run time
(the forms alternating) and the LAPACK calls and library (YNNPACK) fusions
in the rounds' program: with none, the round is compiled whole.

Usage:
    .venv/bin/python workflows/benchmarks/bench_batch_rounds.py [--cases pendulum:1000,double_pendulum:256,...]
        [--repeat 10] [--out workflows/benchmarks/results/batch_rounds.txt]

A case is ``pendulum:N`` (bench_peers' pendulum, N lengths in [0.5, 2],
256 slots) or ``MODEL:N`` for a file of configs/mechanisms (N copies of its
own parameters, the batch ``solve_batch`` would run).
"""

from __future__ import annotations

import argparse
import sys
import time
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
from solver.integrate.integrator import order_for_tol  # noqa: E402

DEFAULT_CASES = "pendulum:1000,double_pendulum:256,mechanism0:64,rscr:64"


def pendulum_case(n: int):
    """(integrator, args, slots) of n pendulum lengths as bench_peers' batch."""
    tol, t1 = 1e-10, 10.0
    Ls = np.linspace(0.5, 2.0, n)
    params = {"g": np.full(n, bp.G), "L": Ls}
    dae = solver.DAE(bp.pendulum_residual, ["x", "y", "lam"], {"g": bp.G, "L": 1.0})
    comp = solver.compiled_model(dae, order_for_tol(tol), batch=True)
    z0, u0 = bp.mechsweep_states(comp, [bp.pendulum_values({"L": L}) for L in Ls], bp.PENDULUM_FIXED, params, 0.0)
    pb = {k: jnp.asarray(v) for k, v in params.items()}
    args = (pb, z0, u0, 0.0, t1, jnp.asarray(np.linspace(0.0, t1, 101)), tol, 100_000, jnp.inf, 0.0)
    return comp.integrator, args, min(256, n)


def model_case(name: str, n: int):
    """(integrator, args, slots) of the batch solve_batch runs for n copies of a shipped model."""
    from bench_compile_size import capture_call

    model = solver.load(ROOT / "configs" / "mechanisms" / f"{name}.yaml")
    _, args, kwargs, integ = capture_call(model, "auto", n)
    return integ, args, kwargs["slots"]


def measure(say, case: str, repeat: int):
    name, n = case.split(":")
    integ, args, slots = pendulum_case(int(n)) if name == "pendulum" else model_case(name, int(n))
    options = integ.batch_compiler_options()  # as Integrator's run_batch
    calls, compiles, whole = [], [], None
    for form in (integ._run_batch_rounds, integ._run_batch_scatter):
        lowered = jax.jit(form, static_argnames=("slots",), compiler_options=options).lower(*args, slots=slots)
        t = time.perf_counter()
        compiled = lowered.compile()
        compiles.append(time.perf_counter() - t)
        if whole is None:
            text = compiled.as_text()
            whole = (text.count("custom-call("), text.count("kind=kCustom"))
        calls.append(lambda c=compiled: bp.block(c(*args)))
        calls[-1]()
    rounds, scatter = bp.interleaved_best(calls, repeat)
    say(f"{case:<22} {integ.mode:<9} {slots:>5} {compiles[0]:>8.1f} {compiles[1]:>8.1f} "
        f"{rounds * 1e3:>10.1f} {scatter * 1e3:>10.1f} {scatter / rounds:>6.2f}x  "
        f"{whole[0]} LAPACK calls, {whole[1]} library fusions")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    bp.empty_caches()
    report = Report()
    report.say(f"batch slot pool, rounds (CPU form) against refilled every step (GPU form); jax {jax.__version__}, "
               f"{jax.default_backend()}; run = best of {args.repeat} alternating calls")
    report.say(f"{'case':<22} {'mode':<9} {'slots':>5} {'compile':>8} {'compile':>8} {'rounds ms':>10} "
               f"{'every ms':>10} {'ratio':>7}")
    report.say(f"{'':<22} {'':<9} {'':>5} {'rounds':>8} {'every':>8}")
    for case in args.cases.split(","):
        measure(report.say, case, args.repeat)
    report.save(args.out)


if __name__ == "__main__":
    main()
