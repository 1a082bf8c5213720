"""Compile and run time of every shipped config (issue 14: "report the compile
and run times of every shipped config").

Each config runs in a process of its own with an empty compilation cache:
``model.solve()`` twice (the first traces, compiles and runs; the second
only runs), with the engine ``mode="auto"`` picks for one run.  Printed per
config: the engine, the tape size it was chosen by, the first and second
solve, the compile seconds JAX reports for the first, steps and status.

Usage::

    .venv/bin/python workflows/benchmarks/bench_configs.py [--out results/configs.txt] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "mechanisms"

ONE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import solver
from solver.integrate.integrator import tape_ops
model = solver.load({path!r})
t = time.perf_counter(); ds = model.solve(); first = time.perf_counter() - t
t = time.perf_counter(); model.solve(); second = time.perf_counter() - t
comp = solver.compiled_model(model.dae, int(ds.attrs["solver_order"]), batch=False)
print(json.dumps({{"first": first, "second": second, "compile": float(ds.attrs.get("compile_seconds", float("nan"))),
                  "steps": int(ds.steps), "status": int(ds.status), "mode": comp.integrator.mode,
                  "tape_ops": tape_ops(comp.integrator.prog), "n": model.dae.n,
                  "order": int(ds.attrs["solver_order"])}}))
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("names", nargs="*", help="config stems to run (default: every shipped config)")
    args = ap.parse_args(argv)
    paths = sorted(CONFIGS.glob("*.yaml"))
    if args.names:
        known = {p.stem: p for p in paths}
        unknown = [n for n in args.names if n not in known]
        if unknown:
            ap.error(f"no config {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
        paths = [known[n] for n in args.names]
    lines = [f"$ .venv/bin/python workflows/benchmarks/bench_configs.py"
             + (f" --out {args.out}" if args.out else "") + "".join(f" {n}" for n in args.names), "",
             f"{'config':<26}{'unknowns':>9}{'order':>6}{'engine':>10}{'tape_ops':>10}"
             f"{'first s':>9}{'compile s':>10}{'run s':>8}{'steps':>7}{'status':>7}"]
    print("\n".join(lines), flush=True)
    for path in paths:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, MECHSWEEP_JAX_CACHE=cache)
            proc = subprocess.run([sys.executable, "-c", ONE.format(root=str(ROOT), path=str(path))],
                                  capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            line = f"{path.stem:<26} failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else proc.returncode}"
        else:
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            line = (f"{path.stem:<26}{r['n']:>9}{r['order']:>6}{r['mode']:>10}{r['tape_ops']:>10}"
                    f"{r['first']:>9.1f}{r['compile']:>10.1f}{r['second']:>8.3f}{r['steps']:>7}{r['status']:>7}")
        print(line, flush=True)
        lines.append(line)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
