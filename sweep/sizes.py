"""Sizes checked before a sweep runs: its store, the free disk space and a worker's memory for one batch.

Each check gives the dry run's line or raises an :class:`InputError` with the
figures and what to change; none builds or runs anything beyond what the
sweep's context already holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from solver.errors import InputError, format_bytes

__all__ = ["store_bytes", "check_store_size", "check_free_space", "check_batch_memory", "FREE_SPACE_MARGIN",
           "MemoryEstimate", "batch_memory_estimate", "MAX_WORKER_BYTES", "WORKER_START_BYTES"]


def store_bytes(spec, context) -> tuple[float, int]:
    """Uncompressed size of a sweep's store, from its schema (the model built).

    Every output series and metric as float64 per point, plus ``status``
    (1 byte), ``steps`` (8) and one float64 coordinate per swept name; the
    per-batch records are left out (a few hundred bytes a batch).

    Returns:
        (bytes, float64 values per point).
    """
    schema = context.schema
    per = sum(int(np.prod(schema.shape(name))) for name in schema.variables)
    return float(spec.n_points) * (8.0 * (per + len(spec.points)) + 9.0), per


def check_store_size(spec, context) -> str:
    """The dry run's store line, after checking it against ``MAX_STORE_BYTES``.

    The sweep reader's estimate (:func:`sweep.spec.load_sweep`) is a lower
    bound made before the model is built; this one counts every stored value.

    Returns:
        ``"store:     about 1.2 MiB uncompressed (...)"``.

    Raises:
        InputError: over :data:`solver.errors.MAX_STORE_BYTES`, with the
            limit and how to raise it.
    """
    from solver.errors import MAX_STORE_BYTES, size_limit_message

    need, per = store_bytes(spec, context)
    what = (f"the store of {spec.n_points} points x {per} values a point "
            f"({len(context.time)} output times; 8 bytes a value)")
    message = size_limit_message("MAX_STORE_BYTES", MAX_STORE_BYTES, need, what,
                                 "lower the number of points, the output times or the variables")
    if message:
        raise InputError(message, file=str(spec.path), path="Sweep")
    nv, nm = len(context.variables), len(context.metrics)
    return (f"  store:     about {format_bytes(need)} uncompressed ({spec.n_points} points x "
            f"{per} values: {len(context.time)} output times of {nv} variable"
            f"{'' if nv == 1 else 's'}, {nm} metric{'' if nm == 1 else 's'})")


#: Space kept free on a store's file system beyond what the store needs.
FREE_SPACE_MARGIN = 64 * 2**20


def _folder_bytes(path) -> int:
    """Bytes of the files under ``path`` (an existing store's size on disk)."""
    import os

    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def check_free_space(out, spec, context) -> str:
    """Refuse a sweep whose store would not fit on its file system, before anything is written.

    The store's size is the uncompressed estimate of :func:`store_bytes`
    (compression can only make it smaller); a store that exists already
    (a resume) needs only what it does not hold yet. The file system must
    have that plus :data:`FREE_SPACE_MARGIN` free.

    Args:
        out: the store's path (it may not exist yet).
        spec, context: the sweep and its context.

    Returns:
        A line for the dry run: the space needed and free.

    Raises:
        InputError: too little free space, with both figures and what to do.
    """
    import shutil
    from pathlib import Path

    need, _ = store_bytes(spec, context)
    if "://" in str(out):
        return (f"  storage:   {format_bytes(need)} at most (uncompressed), on an object store "
                f"(no free-space check)")
    path = Path(out)
    if path.exists():
        need = max(0.0, need - _folder_bytes(path))
    anchor = path
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    free = shutil.disk_usage(anchor).free
    if free < need + FREE_SPACE_MARGIN:
        raise InputError(f"the store needs about {format_bytes(need)} more (uncompressed, "
                         f"{spec.n_points} points) and {format_bytes(FREE_SPACE_MARGIN)} to spare, "
                         f"but its file system has {format_bytes(free)} free: free space there, choose "
                         f"another --out, or lower the number of points, output times or variables",
                         file=str(out))
    return f"  disk:      {format_bytes(need)} needed, {format_bytes(free)} free where the store goes"


#: The estimate of a sweep worker's peak resident memory (:func:`batch_memory_estimate`):
#: start + compile + working set. The coefficients are fitted to the peaks measured by
#: workflows/benchmarks/bench_batch_memory.py, recorded in
#: workflows/benchmarks/results/batch_memory.txt (one-worker LocalCluster, ru_maxrss,
#: a new compilation cache per case so that the worker compiles: the peak it can reach).
#: A worker process with distributed, JAX and the solver imported (measured 250-320 MiB).
WORKER_START_BYTES = 300 * 2**20
#: Compiling grows with the program: about 22 MiB x sqrt(equations of the residual's
#: jaxpr x (1 + the DAE's index)), 160 MiB for the pendulum to 1 GiB for RSCR; an
#: index-0 model (an ODE) compiles no differentiated constraints.
COMPILE_BYTES_PER_SQRT_SIZE = 22 * 2**20
#: The batch's working set: about 5 (pendulum) to 6 (RSCR) live copies of the engine's
#: whole output (8 bytes x batch x output times x values per time) ...
WORKING_COPIES = 6
#: ... plus the Taylor arrays of each point, about 13 KiB a point for the pendulum
#: (3 unknowns), counted here as proportional to the unknowns.
TAYLOR_BYTES_PER_UNKNOWN = 4.5 * 2**10
#: Most estimated peak memory of a sweep worker running one batch.
MAX_WORKER_BYTES = 4 * 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    """A sweep worker's estimated peak resident memory while it runs one batch, in bytes.

    Attributes:
        start: the worker process before any work (:data:`WORKER_START_BYTES`).
        compile: compiling the model's programs.
        working: the batch's arrays while it runs.
    """

    start: float
    compile: float
    working: float

    @property
    def total(self) -> float:
        """The estimated peak: start + compile + working set."""
        return self.start + self.compile + self.working

    def parts(self) -> str:
        """``"300 MiB at start, 170 MiB compiling, 4.5 MiB working set"``."""
        return (f"{format_bytes(self.start)} at start, {format_bytes(self.compile)} compiling, "
                f"{format_bytes(self.working)} working set")


def batch_memory_estimate(model, batch: int, n_times: int, n_sensitivities: int = 0) -> MemoryEstimate:
    """Estimate a sweep worker's peak resident memory for one batch of ``model``.

    Start + compile + working set, with the coefficients above (fitted to
    measured peaks, see workflows/benchmarks/results/batch_memory.txt).
    Monotone in ``batch`` and ``n_times``. A worker that loads its programs
    from a warm compilation cache peaks lower.

    Args:
        model: the built :class:`solver.models.model.Model`.
        batch: points per batch (the padded size every batch runs at).
        n_times: output times of each point.
        n_sensitivities: parameters the outputs are differentiated by; each
            is counted as one more copy of the working set (not measured).

    Returns:
        A :class:`MemoryEstimate`.
    """
    from solver.models.model import values_per_time

    dae = model.dae
    try:
        equations = len(dae.jaxpr.jaxpr.eqns)
    except AttributeError:      # a DAE without a traced residual: count its unknowns
        equations = int(dae.n)
    index = int(getattr(dae.structure, "index", 0) or 0)
    compile_bytes = COMPILE_BYTES_PER_SQRT_SIZE * math.sqrt(max(1, equations) * (1 + index))
    per_point = (WORKING_COPIES * 8.0 * n_times * values_per_time(dae)
                 + TAYLOR_BYTES_PER_UNKNOWN * int(dae.n))
    working = float(batch) * per_point * (1 + int(n_sensitivities))
    return MemoryEstimate(float(WORKER_START_BYTES), float(compile_bytes), working)


def check_batch_memory(spec, context, model=None) -> str:
    """The dry run's batch line, after checking a worker's estimated peak memory against ``MAX_WORKER_BYTES``.

    A batch runs :attr:`SweepContext.batch` points (the sweep's ``Batch``, or
    its number of points where that is fewer), padded to that size. The line
    gives the outputs the store keeps of one batch and the estimate of the
    peak resident memory of the worker that runs it
    (:func:`batch_memory_estimate`), which is what must fit in a worker.

    Args:
        spec, context: the sweep and its context.
        model: the sweep's built model (default: built again from the context).

    Returns:
        ``"  batch:     4 points per batch: about 1.1 KiB of outputs per batch; ..."``.

    Raises:
        InputError: the estimate over :data:`MAX_WORKER_BYTES` (environment
            variable ``MECHSWEEP_MAX_WORKER_BYTES``), located at ``Batch``,
            with the estimate, the limit and how to lower it.
    """
    import solver
    from solver.errors import size_limit_message

    if model is None:
        model = solver.load(context.model_path, overrides=context.override or None)
    _, per = store_bytes(spec, context)
    size = int(context.batch)
    n_times = len(context.time)
    estimate = batch_memory_estimate(model, size, n_times, len(getattr(context, "sensitivities", ()) or ()))
    smaller = f"; try Batch: {max(1, size // 2)}" if size > 1 else ""
    message = size_limit_message(
        "MAX_WORKER_BYTES", MAX_WORKER_BYTES, estimate.total,
        f"a worker running one batch of {size} point{'' if size == 1 else 's'} x {n_times} output "
        f"times (estimated peak memory: {estimate.parts()})",
        f"lower Batch (now {size}{smaller}) or the output times")
    if message:
        raise InputError(message, file=str(spec.path), path="Batch")
    requested = int(getattr(spec, "requested_batch", size))
    note = (f" (Batch {requested} is more than the {spec.n_points} points, so one batch of "
            f"{size})" if requested > size else "")
    return (f"  batch:     {size} point{'' if size == 1 else 's'} per batch{note}: about "
            f"{format_bytes(8.0 * size * per)} of outputs per batch; estimated peak memory of a "
            f"worker: about {format_bytes(estimate.total)} ({estimate.parts()})")
