"""Reading a model file and its initial values per design point, for every shipped model.

Two costs that come before any integration and that a sweep pays again and
again:

- **read**: ``solver.load`` of the file in a fresh process (the first load of
  the process; JAX's persistent cache off), which a CLI call or a sweep
  worker pays once;
- **values per point**: ``Model.initial_values`` at a varied parameter, which
  ``solve_batch`` evaluates once per design point (best of 3 rounds of
  ``--points`` points).

Usage::

    .venv/bin/python workflows/benchmarks/bench_model_read.py [--points 200] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "mechanisms"

_CHILD = """
import json, sys, time
import numpy as np
t = time.perf_counter()
import solver
imported = time.perf_counter() - t
t = time.perf_counter()
model = solver.load(sys.argv[1])
read = time.perf_counter() - t
scalars = [k for k, v in model.params.items() if np.ndim(v) == 0 and v != 0]
name = scalars[0] if scalars else None
best = None
if name is not None:
    base = model.params[name]
    for _ in range(3):
        t = time.perf_counter()
        for i in range(int(sys.argv[2])):
            model.initial_values({name: base * (1 + 1e-3 * i)})
        spent = (time.perf_counter() - t) / int(sys.argv[2])
        best = spent if best is None else min(best, spent)
print(json.dumps({"kind": model.kind, "import": imported, "read": read, "param": name, "per_point": best}))
"""


def measure(path: Path, points: int) -> dict:
    """One model file's figures, from a fresh process."""
    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false")  # solver.load alone sets no cache
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(points)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')}; read: solver.load in a fresh process (s); "
             f"values: Model.initial_values per design point (us, best of 3 x {args.points})"]
    for path in sorted(CONFIGS.glob("*.yaml")):
        r = measure(path, args.points)
        if "error" in r:
            lines.append(f"{path.name:32s} error: {r['error'][:100]}")
        else:
            per = "n/a" if r["per_point"] is None else f"{r['per_point'] * 1e6:8.0f}"
            lines.append(f"{path.name:32s} {r['kind']:10s} read {r['read']:6.2f} s   values {per} us "
                         f"(varying {r['param']})")
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
