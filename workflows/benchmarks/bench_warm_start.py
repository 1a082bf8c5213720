"""The start of a ``mechsweep simulate`` from an empty and from a warm persistent compilation cache.

Each model is simulated twice, each time by ``mechsweep simulate MODEL`` in a
fresh process, with a new empty cache directory (``MECHSWEEP_JAX_CACHE``)
for the pair: the first run compiles and fills the cache (cold), the second
loads its programs from it (warm).  For each run:

- **process**: the whole process, start to exit;
- **import**: importing the command line (JAX, xarray, the solver);
- **wall / compiling / solving**: the command's own line, ``finished in W s
  (C s compiling, R s solving)``;
- **before solving**: the process's start-up to the end of compiling
  (process minus the command's "solving", which holds the set-up after
  compiling and the Dataset's build too);
- **to integration**: from the process's start to the moment the
  integration's own work starts: the first integration call's end (after
  it loads or compiles its program) less the integration time the command
  reports (``N steps in S s``);
- where the compiling goes, from JAX's monitoring events: tracing to a
  jaxpr, lowering to StableHLO, XLA compiling or loading from the cache
  (of which the cache's read and deserialisation), and the cache's hits and
  misses;
- the program store's counts (``solver.program_store``): programs loaded
  from it and programs traced and stored.

Each pair runs with the program store off (``MECHSWEEP_PROGRAM_STORE=off``:
the persistent compilation cache alone) and on (the default).  The children
write and read Python's bytecode cache as a user's Python does, whatever
``PYTHONDONTWRITEBYTECODE`` says here.

Usage::

    .venv/bin/python workflows/benchmarks/bench_warm_start.py [MODEL.yaml ...] [--out FILE]

(``--out`` appends the report to FILE.)

(default models: configs/mechanisms/rscr.yaml and pendulum.yaml).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STORE_ENV = "MECHSWEEP_PROGRAM_STORE"  # solver.program_store.STORE_ENV, without importing JAX here

ROOT = Path(__file__).resolve().parents[2]
MODELS = [ROOT / "configs" / "mechanisms" / "rscr.yaml", ROOT / "configs" / "mechanisms" / "pendulum.yaml"]

# The command line with JAX's monitoring listeners around it; what they saw goes to argv[1].  The command line
# is imported first, as the console script does: its package sets up what JAX's import does (the search for a
# ROCm plugin limited to the jax* packages, solver.integrate.xla_setup), which JAX imported first would miss.
_CHILD = """
import collections, json, sys, time
t = time.perf_counter()
from sweep.cli.app import main
import jax
from jax import monitoring
from solver import program_store
from solver.integrate import single_run
imported = time.perf_counter() - t
ended = []
run = single_run.SingleRun.run
def timed_run(self, *args, **kwargs):
    out = jax.block_until_ready(run(self, *args, **kwargs))
    ended.append(time.time())
    return out
single_run.SingleRun.run = timed_run
seconds, counts = collections.defaultdict(float), collections.Counter()
def on_duration(event, secs, **_):
    seconds[event] += secs
    counts[event] += 1
monitoring.register_event_duration_secs_listener(on_duration)
monitoring.register_event_listener(lambda event, **_: counts.update([event]))
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "import": imported, "seconds": seconds, "counts": counts,
               "programs": program_store.stats, "integration_ended": ended[0] if ended else None}, f)
"""

_EVENTS = {"trace": "/jax/core/compile/jaxpr_trace_duration",
           "lower": "/jax/core/compile/jaxpr_to_mlir_module_duration",
           "compile_or_load": "/jax/core/compile/backend_compile_duration",
           "cache_read": "/jax/compilation_cache/cache_retrieval_time_sec"}

_SPLIT = re.compile(r"finished in (\S+) s \((\S+) s compiling, (\S+) s solving\)")
_STEPS = re.compile(r"\d+ steps in (\S+) s")


def run_once(model: Path, cache: str, store: bool, flags: tuple = (), env_extra: dict | None = None) -> dict:
    """One ``mechsweep simulate MODEL [flags]`` in a fresh process with the cache at ``cache``, the program store
    on or off (and ``env_extra`` in its environment)."""
    env = dict(os.environ, MECHSWEEP_JAX_CACHE=cache)
    env.pop(STORE_ENV, None)
    env.update(env_extra or {})
    # As a user's Python runs: it writes the modules' bytecode once and reads it after.  Without it (an
    # environment with PYTHONDONTWRITEBYTECODE set, as some sandboxes have) every process compiles
    # mechsweep's 95 modules from source, 0.15-0.2 s that no user's warm start pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not store:
        env[STORE_ENV] = "off"
    with tempfile.NamedTemporaryFile(suffix=".json") as events:
        t, launched = time.perf_counter(), time.time()
        proc = subprocess.run([sys.executable, "-c", _CHILD, events.name, "simulate", str(model), *flags],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=1200)
        process = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"{model.name}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
        seen = json.loads(Path(events.name).read_text())
    found = _SPLIT.search(proc.stderr)
    if not found:
        raise RuntimeError(f"{model.name}: no 'finished in' line on stderr:\n{proc.stderr[-2000:]}")
    wall, compiling, solving = map(float, found.groups())
    steps = _STEPS.search(proc.stderr)
    ended = seen["integration_ended"]
    to_integration = None if ended is None or not steps else ended - launched - float(steps.group(1))
    out = {"process": process, "import": seen["import"], "wall": wall, "compiling": compiling,
           "solving": solving, "steps": float(steps.group(1)) if steps else float("nan"), "before_solving": process - solving, "to_integration": to_integration,
           "hits": seen["counts"].get("/jax/compilation_cache/cache_hits", 0),
           "misses": seen["counts"].get("/jax/compilation_cache/cache_misses", 0),
           "loaded": seen["programs"]["loaded"], "stored": seen["programs"]["stored"]}
    out.update({k: seen["seconds"].get(event, 0.0) for k, event in _EVENTS.items()})
    return out


def line(name: str, label: str, r: dict) -> str:
    """One run's figures."""
    return (f"{name:<14} {label:<11} process {r['process']:6.2f} s  import {r['import']:5.2f} s  "
            f"simulate {r['wall']:6.1f} s = {r['compiling']:6.1f} s compiling + {r['solving']:5.2f} s solving  "
            f"before solving {r['before_solving']:6.2f} s  to integration "
            f"{'?' if r['to_integration'] is None else format(r['to_integration'], '.2f')} s\n"
            f"{'':<26} compiling: trace {r['trace']:5.2f} s, lower {r['lower']:5.2f} s, "
            f"XLA compile or load {r['compile_or_load']:6.2f} s (cache read {r['cache_read']:4.2f} s); "
            f"cache hits {r['hits']}, misses {r['misses']}; programs loaded {r['loaded']}, stored {r['stored']}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", type=Path, default=MODELS)
    p.add_argument("--out", type=Path, help="also append the report to this file")
    args = p.parse_args(argv)
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    lines = ["$ .venv/bin/python workflows/benchmarks/bench_warm_start.py "
             + " ".join(os.path.relpath(m, ROOT) for m in args.models),
             f"# {when}, {os.cpu_count()} cores; each model: mechsweep simulate MODEL twice, each in a fresh "
             f"process, with a new empty MECHSWEEP_JAX_CACHE for the pair (cold: empty, warm: filled by "
             f"the cold run); the program store off, then on"]
    print("\n".join(lines), flush=True)
    for model in args.models:
        for store in (False, True):
            with tempfile.TemporaryDirectory(prefix="mechsweep-warm-") as cache:
                for label in ("cold", "warm"):
                    text = line(model.name, label + ("+store" if store else ""), run_once(model, cache, store))
                    print(text, flush=True)
                    lines.append(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
