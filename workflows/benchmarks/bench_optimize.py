"""Quick compiles against optimised ones: ``solve(optimize=False)`` and the default, per shipped model.

A quick compile leaves LLVM's optimisation out of the run's programs
(``solver.integrate.integrator.QUICK_COMPILE``): the same kernels, less optimised
machine code.  For each model this times, in a child process of its own
with the persistent compile cache off, the model's first ``solve()`` (its
``compile_seconds`` and its wall time: tracing, compiling, the consistent
initial point and the run) and a second, identical one (the run alone, with
the initial point), over the model's own time span.  Children alternate
between the two settings round after round (the shared machine's speed
drifts); each figure is the best over rounds.  The last column is the
largest difference between the two settings' final states.

Usage:
    .venv/bin/python workflows/benchmarks/bench_optimize.py [--rounds 2]
        [--models pendulum double_pendulum mechanism0 rscr chain5]
        [--out workflows/benchmarks/results/optimize.txt]
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
MODELS = ("pendulum", "double_pendulum", "mechanism0", "rscr", "chain5")


def child(model_name: str, optimize: bool) -> dict:
    """{first, compile, second: seconds; final: {variable: last values}} of one model and setting."""
    sys.path.insert(0, str(ROOT))
    import jax
    import numpy as np

    import solver

    jax.config.update("jax_enable_compilation_cache", False)
    model = solver.load(ROOT / "configs" / "mechanisms" / f"{model_name}.yaml")
    start = time.perf_counter()
    ds = model.solve(optimize=optimize)
    first = time.perf_counter() - start
    start = time.perf_counter()
    ds2 = model.solve(optimize=optimize)
    second = time.perf_counter() - start
    assert int(ds.status) == 0 and int(ds2.status) == 0, (model_name, int(ds.status))
    final = {v: np.asarray(ds[v].isel(time=-1).values).ravel().tolist() for v in ds.attrs["variables"]}
    return {"first": first, "compile": float(ds.attrs["compile_seconds"]), "second": second,
            "steps": int(ds.steps), "mode": ds.attrs["solver_mode"], "final": final}


def run_child(model_name: str, optimize: bool) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", model_name, str(int(optimize))],
                         capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--out")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], bool(int(args.child[1])))))
        return 0
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say(f"# solve(optimize=True) (default) against solve(optimize=False), {time.strftime('%Y-%m-%d %H:%M')}")
    say(f"# {platform.machine()} {platform.system()}, {os.cpu_count()} cores, python {platform.python_version()}; "
        f"compile cache off; best of {args.rounds} rounds, settings alternating")
    say(f"# command: .venv/bin/python workflows/benchmarks/bench_optimize.py --rounds {args.rounds} "
        f"--models {' '.join(args.models)}")
    say("# first = first solve() (compile + initial point + run), compile = its compile_seconds, "
        "second = the same solve() again")
    say(f"{'model':16} {'mode':9} {'steps':>6} | {'optimised: first':>16} {'compile':>8} {'second':>8} | "
        f"{'quick: first':>12} {'compile':>8} {'second':>8} | {'first':>6} {'second':>7} | max |diff|")
    for name in args.models:
        best = {True: None, False: None}
        for _ in range(args.rounds):
            for optimize in (True, False):
                r = run_child(name, optimize)
                b = best[optimize]
                best[optimize] = r if b is None else {**r, **{k: min(b[k], r[k]) for k in ("first", "compile",
                                                                                        "second")}}
        o, q = best[True], best[False]
        diff = max(abs(a - b) for v in o["final"] for a, b in zip(o["final"][v], q["final"][v]))
        say(f"{name:16} {o['mode']:9} {o['steps']:>6} | {o['first']:15.2f}s {o['compile']:7.2f}s "
            f"{o['second']:7.3f}s | {q['first']:11.2f}s {q['compile']:7.2f}s {q['second']:7.3f}s | "
            f"{q['first'] / o['first']:5.2f}x {q['second'] / o['second']:6.1f}x | {diff:.1e}")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
