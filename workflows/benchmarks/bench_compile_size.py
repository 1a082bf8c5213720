"""Where a model's compile time goes: the step program's size before and after XLA's fusion.

For one model and engine, the single run's program (``Integrator._run``, what
``solve`` compiles) or the batch's (``_run_batch``, what ``solve_batch`` and
sweeps compile) is traced and lowered, then compiled by XLA, each timed, and
the arithmetic instructions (multiply, add, negate) are counted in the
lowered program and in XLA's optimised one.  Their ratio is how many times
XLA's fusion copied each cheap instruction into the kernels that use it: a
fused kernel recomputes its inputs' cones rather than reading them back, and
the unrolled Taylor recurrences are long cones of cheap scalar operations
(``workflows/benchmarks/results/compile_size.txt``).

Usage:
    .venv/bin/python workflows/benchmarks/bench_compile_size.py MODEL.yaml [--mode unrolled]
        [--batch 64]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import jax  # noqa: E402

import solver  # noqa: E402
from solver.compiled import compiled_model  # noqa: E402
from solver.integrate.integrator import order_for_tol, tape_ops  # noqa: E402

OPS = ("multiply", "add", "negate")


class _Captured(Exception):
    """Raised by the stand-in for a jitted run once it holds the call's arguments."""


def capture_call(model, mode: str, batch: int):
    """(jitted function, args, kwargs) of the run ``solve`` (batch 0) or ``solve_batch`` would compile."""
    order = model.order or order_for_tol(model.tol)
    comp = compiled_model(model.dae, order, mode=mode, batch=batch > 0)
    integ = comp.integrator
    name = "_run_batch_jit" if batch else "_run_jit"
    real = getattr(integ, name)
    seen = {}

    def stand_in(*args, **kwargs):
        seen["call"] = (args, kwargs)
        raise _Captured

    stand_in.ahead = lambda *args, **kwargs: None  # the solve builds nothing ahead: the call is caught
    setattr(integ, name, stand_in)
    try:
        if batch:
            pv = model.check_params(None)
            scalar = [k for k, v in pv.items() if np.ndim(v) == 0][0]
            solver.solve_batch(model, {scalar: np.full(batch, float(pv[scalar]))}, mode=mode)
        else:
            model.solve(mode=mode)
    except _Captured:
        pass
    finally:
        setattr(integ, name, real)
    if "call" not in seen:
        raise SystemExit(f"{model.title}: the run was not reached (initial values failed?)")
    args, kwargs = seen["call"]
    return real, args, kwargs, integ


def count(text: str) -> dict:
    """Instructions per opcode of ``OPS`` in HLO text."""
    return {op: len(re.findall(rf" {op}\(", text)) for op in OPS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="model YAML")
    ap.add_argument("--mode", default="auto", help="auto, unrolled, compact or looped")
    ap.add_argument("--batch", type=int, default=0, help="points of a solve_batch (0: one solve)")
    args = ap.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    model = solver.load(args.model)
    fn, fargs, fkwargs, integ = capture_call(model, args.mode, args.batch)
    t = time.perf_counter()
    lowered = fn.lower(*fargs, **fkwargs)
    t_lower = time.perf_counter() - t
    t = time.perf_counter()
    compiled = lowered.compile()
    t_compile = time.perf_counter() - t
    # The HLO XLA starts from (StableHLO text repeats the bodies of inlined calls).
    before, after = count(lowered.compiler_ir("hlo").as_hlo_text()), count(compiled.as_text())
    what = f"batch of {args.batch}" if args.batch else "one run"
    print(f"{Path(args.model).name} ({what}), mode {integ.mode}, order {integ.p}, "
          f"tape_ops {tape_ops(integ.prog)}: trace+lower {t_lower:.1f} s, XLA compile {t_compile:.1f} s")
    for op in OPS:
        ratio = after[op] / before[op] if before[op] else float("nan")
        print(f"  {op:9s} lowered {before[op]:7d}  optimised {after[op]:7d}  x{ratio:.1f}")


if __name__ == "__main__":
    main()
