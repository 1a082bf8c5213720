"""What a user waits for before solving starts: every shipped model's compile from an empty cache and from a warm one,
and the forward-mode (sensitivity) program's compile against the plain program's.

Each measurement is a fresh process (the command a user types), with
``MECHSWEEP_JAX_CACHE`` pointing at a new, empty folder for the cold run and
at the same folder for the warm run that follows it:

- ``mechsweep simulate MODEL``, run as ``bench_warm_start.py`` runs it (its
  :func:`~bench_warm_start.run_once`, the program store on): the command's own
  ``finished in W s (C s compiling, R s solving)`` line, C split into JAX's
  tracing, lowering and XLA compile (or, warm, loading).  Its run goes on a
  quick build, as a first simulate of a model does; ``simulate --optimize``
  from another empty cache gives the optimised build's compile beside it;
- forward mode: in one process, ``model.solve()`` and then
  ``model.solve(sensitivities=P)``; each call's ``compile_seconds``: the
  second is the forward-mode program (and whatever else it alone needs).

The targets (issue "the engine on mid-size models"): at most 3 s for any
shipped model up to 20 unknowns, 10 s for the car, a warm ``simulate`` at
most 1 s before solving starts, and the forward-mode program at most 2x the
plain one.  Run it on a quiet machine: nothing else compiling.

Usage::

    .venv/bin/python workflows/benchmarks/bench_compiles.py [--models rscr,car] [--out results/compiles.txt]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_warm_start import run_once

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "mechanisms"

# Forward mode: (model, sensitivity parameters).
FORWARD = [("pendulum", ["L"]), ("fourbar", ["b", "th"]), ("rscr", ["L2", "gamma"]), ("mechanism0", ["k"])]

SMALL_MODEL_TARGET = 3.0      # s, any shipped model up to SMALL_MODEL_UNKNOWNS unknowns
SMALL_MODEL_UNKNOWNS = 20
CAR_TARGET = 10.0             # s
WARM_TARGET = 1.0             # s before solving starts
FORWARD_TARGET = 2.0          # x the plain program's compile

_FORWARD_SCRIPT = """
import json, sys
import solver
from sweep.jax_cache import configure_jax, default_jax_cache_dir
configure_jax(default_jax_cache_dir())
model = solver.load(sys.argv[1])
plain = model.solve()
sens = model.solve(sensitivities=sys.argv[2].split(","))
print(json.dumps({"plain": float(plain.attrs["compile_seconds"]), "forward": float(sens.attrs["compile_seconds"]),
                  "unknowns": int(model.dae.n)}))
"""


def _env(cache: Path) -> dict:
    env = dict(os.environ, MECHSWEEP_JAX_CACHE=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def unknowns(model: Path) -> int:
    """The model's number of unknowns (from ``mechsweep check --json``-free loading, in this process)."""
    import solver

    return int(solver.load(model).dae.n)


def forward(model: Path, names: list[str], cache: Path) -> dict:
    """The plain and forward-mode compile seconds of ``model`` from an empty cache, in a new process."""
    proc = subprocess.run([sys.executable, "-c", _FORWARD_SCRIPT, str(model), ",".join(names)], env=_env(cache),
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"forward mode of {model.name} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    """Run the benchmark; print (and optionally write) its tables.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated model names (default: every configs/mechanisms "
                                                   "model, then the forward-mode cases)")
    ap.add_argument("--no-forward", action="store_true", help="skip the forward-mode cases")
    ap.add_argument("--out", default=None, help="also write the output to this file")
    args = ap.parse_args(argv)
    names = [m.strip() for m in args.models.split(",")] if args.models else sorted(
        p.stem for p in CONFIGS.glob("*.yaml"))
    missing = [n for n in names if not (CONFIGS / f"{n}.yaml").exists()]
    if missing:
        ap.error(f"--models: no configs/mechanisms/{missing[0]}.yaml; choose from "
                 f"{', '.join(sorted(p.stem for p in CONFIGS.glob('*.yaml')))}")
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"$ .venv/bin/python workflows/benchmarks/bench_compiles.py {' '.join(argv or sys.argv[1:])}".rstrip())
    say(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}; {platform.machine()} "
        f"{platform.system()}, {os.cpu_count()} cores, python {platform.python_version()}; "
        f"load average at start {os.getloadavg()[0]:.2f}")
    say("each row: `mechsweep simulate MODEL` in a new process (as bench_warm_start.py runs it, the program "
        "store on), first with an empty cache (cold), then again with the cache it left (warm); compiling = the "
        "command's own 'C s compiling', of which JAX's tracing, lowering and XLA compile (or, warm, loading); "
        "wall = the whole process, Python's start and imports included; to integration = from the warm process's "
        "start to its integration's own work (the warm target's measure).  A first simulate runs on a quick "
        "build (and the warm one loads it); optimised = `simulate --optimize` from another empty cache: its "
        "compiling, and its steps beside the quick build's")
    say()
    say(f"{'model':<22}{'unknowns':>9}{'cold compiling':>16}{'trace':>8}{'lower':>8}{'XLA':>8}{'solving':>9}"
        f"{'cold wall':>11}{'warm compiling':>16}{'to integration':>16}{'warm wall':>11}{'optimised':>11}"
        f"{'steps quick/optimised':>24}  target")
    misses = []
    with tempfile.TemporaryDirectory(prefix="bench_compiles_") as tmp:
        for i, name in enumerate(names):
            path = CONFIGS / f"{name}.yaml"
            cache = str(Path(tmp) / f"cache_{i}")
            n = unknowns(path)
            cold = run_once(path, cache, store=True)
            warm = run_once(path, cache, store=True)
            optimised = run_once(path, cache + "_optimised", store=True, flags=("--optimize",))
            target = CAR_TARGET if name == "car" else SMALL_MODEL_TARGET if n <= SMALL_MODEL_UNKNOWNS else None
            verdict = "n/a (over 20 unknowns)" if target is None else (
                f"{target:g} s {'met' if cold['compiling'] <= target else 'MISSED'}; "
                f"warm {'met' if (warm['to_integration'] or float('inf')) <= WARM_TARGET else 'MISSED'}")
            if target is not None and cold["compiling"] > target:
                misses.append(name)
            say(f"{name:<22}{n:>9}{cold['compiling']:>14.1f} s{cold['trace']:>6.1f} s{cold['lower']:>6.1f} s"
                f"{cold['compile_or_load']:>6.1f} s{cold['solving']:>7.2f} s{cold['process']:>9.1f} s"
                f"{warm['compiling']:>14.2f} s{warm['to_integration'] or float('nan'):>14.2f} s"
                f"{warm['process']:>9.1f} s{optimised['compiling']:>9.1f} s"
                f"{cold['steps']:>15.2f} / {optimised['steps']:.2f} s"
                f"  {verdict}")
        if not args.no_forward:
            say()
            say("forward mode, one process from an empty cache: model.solve(), then model.solve(sensitivities=P); "
                "each call's compile_seconds")
            say(f"{'model':<14}{'P':<16}{'plain':>9}{'forward':>10}{'ratio':>8}  target {FORWARD_TARGET:g}x")
            for j, (name, params) in enumerate(FORWARD):
                if args.models and name not in names:
                    continue
                got = forward(CONFIGS / f"{name}.yaml", params, Path(tmp) / f"forward_{j}")
                ratio = got["forward"] / got["plain"]
                say(f"{name:<14}{','.join(params):<16}{got['plain']:>7.1f} s{got['forward']:>8.1f} s{ratio:>7.1f}x"
                    f"  {'met' if ratio <= FORWARD_TARGET else 'MISSED'}")
    say()
    say(f"load average at the end {os.getloadavg()[0]:.2f}; cold compiles over their target: "
        f"{', '.join(misses) if misses else 'none'}")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
