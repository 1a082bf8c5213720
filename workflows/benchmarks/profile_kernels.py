"""Where a compiled solve's time goes, kernel by kernel, from JAX's profiler (issue 11, part 2).

Runs ``solve_batch`` (or one ``solve``) of a shipped model once to compile,
then once under :func:`jax.profiler.trace`, and adds up the XLA:CPU kernel
events of the traced run by kind (the kernel's name without its number:
``copy``, ``ynn_fusion``, ``dynamic-update-slice_gather_fusion``, ...).
A program whose step loop is compiled whole shows up as a few ``while``
events; one run kernel by kernel (a batch round with library calls, a
compact batch) shows every kernel, which is what this script is for: it
found the whole-table copies of the compact engine's in-place writes
(workflows/benchmarks/results/profile_kernels.txt).

The tracer adds about 1 us per kernel event, so the traced run is slower
than an untraced one: read the shares, not the sum.

Usage::

    .venv/bin/python workflows/benchmarks/profile_kernels.py [--model rscr] [--param L2]
        [--points 64] [--mode compact] [--sensitivities L2,gamma] [--top 12] [--out FILE]

``--points 0`` profiles one ``solve``.  The ``solver`` package imported is
the installed one (``PYTHONPATH=<another checkout>`` profiles that one).
"""

from __future__ import annotations

import argparse
import collections
import glob
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import jax
from jax._src.profiler import ProfileData

import solver

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "mechanisms"
# XLA:CPU marks the end of each kernel with an event of this prefix and the kernel's name.
_END = "end: "


def kernel_times(trace_dir: str) -> tuple[collections.Counter, collections.Counter]:
    """Kernel time (ns) and event count by kind, on every thread, from a profiler trace.

    A kernel is an event that XLA:CPU closes with an ``end: NAME`` marker;
    it runs on the calling thread or on XLA's pool.

    Args:
        trace_dir: the directory given to :func:`jax.profiler.trace`.

    Returns:
        (time by kind, events by kind).

    Raises:
        FileNotFoundError: no trace file under ``trace_dir``.
    """
    files = sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))
    if not files:
        raise FileNotFoundError(f"no profiler trace (*.xplane.pb) under {trace_dir}")
    events = [ev for plane in ProfileData.from_file(files[-1]).planes
              for line in plane.lines for ev in line.events]
    kernels = {ev.name[len(_END):] for ev in events if ev.name.startswith(_END)}
    spent, count = collections.Counter(), collections.Counter()
    for ev in events:
        if ev.name in kernels:
            kind = re.sub(r"\.\d+$", "", ev.name)
            spent[kind] += ev.duration_ns
            count[kind] += 1
    return spent, count


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="rscr", help="a model of configs/mechanisms (default rscr)")
    ap.add_argument("--param", default="L2", help="the parameter varied over the batch (default L2)")
    ap.add_argument("--points", type=int, default=64, help="designs in the batch; 0: one solve (default 64)")
    ap.add_argument("--mode", default="compact", help="engine mode (default compact)")
    ap.add_argument("--sensitivities", default="", help="comma-separated parameters to differentiate by")
    ap.add_argument("--t1", type=float, default=1.0, help="end time (default 1)")
    ap.add_argument("--top", type=int, default=12, help="kinds listed (default 12)")
    ap.add_argument("--out", default=None, help="also append the report to this file")
    args = ap.parse_args(argv)

    model = solver.load(CONFIGS / f"{args.model}.yaml")
    sens = [s for s in args.sensitivities.split(",") if s] or None
    kw = dict(t_span=(0.0, args.t1), t_eval=np.linspace(0.0, args.t1, 21), mode=args.mode, sensitivities=sens)
    if args.points:
        base = float(np.ravel(model.params[args.param])[0])
        values = base * np.linspace(1.0, 1.16, args.points)
        run = lambda: solver.solve_batch(model, {args.param: values}, **kw)
    else:
        run = lambda: model.solve(**kw)
    run()
    untraced = min(_timed(run) for _ in range(3))
    trace_dir = tempfile.mkdtemp(prefix="mechsweep-profile-")
    try:
        with jax.profiler.trace(trace_dir):
            traced = _timed(run)
        spent, count = kernel_times(trace_dir)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    total = sum(spent.values())
    what = f"{args.points} points" if args.points else "one solve"
    lines = [f"$ profile_kernels.py --model {args.model} --param {args.param} --points {args.points} "
             f"--mode {args.mode}" + (f" --sensitivities {args.sensitivities}" if sens else ""),
             f"# {args.model}, {what} over [0, {args.t1:g}], mode {args.mode}"
             + (f", sensitivities {', '.join(sens)}" if sens else "") + f"; jax {jax.__version__}",
             f"run {untraced * 1e3:.0f} ms (best of 3, untraced); traced {traced * 1e3:.0f} ms; "
             f"kernels {total / 1e6:.0f} ms in {sum(count.values())} events, {len(spent)} kinds",
             f"{'kind':<44}{'ms':>9}{'share':>8}{'events':>9}"]
    for kind, ns in spent.most_common(args.top):
        lines.append(f"{kind[:43]:<44}{ns / 1e6:9.1f}{ns / total:8.0%}{count[kind]:9d}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text + "\n\n")


def _timed(run) -> float:
    t = time.perf_counter()
    run()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
