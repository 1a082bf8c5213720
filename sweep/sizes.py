"""Sizes checked before a sweep runs: its store, the free disk space and one batch's memory.

Each check gives the dry run's line or raises an :class:`InputError` with the
figures and what to change; none builds or runs anything beyond what the
sweep's context already holds.
"""

from __future__ import annotations

import numpy as np

from solver.errors import InputError

__all__ = ["store_bytes", "check_store_size", "check_free_space", "check_batch_memory", "FREE_SPACE_MARGIN"]


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
    from solver.errors import MAX_STORE_BYTES, format_bytes, size_limit_message

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

    from solver.errors import format_bytes

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


def check_batch_memory(spec, context) -> str:
    """The dry run's batch line, after checking one batch's outputs against ``MAX_OUTPUT_BYTES``.

    A batch runs :attr:`SweepContext.batch` points (the sweep's ``Batch``, or
    its number of points where that is fewer), padded to that size; this
    counts the values the store keeps of them (the solver holds a few more
    while it runs: every variable, not only the chosen outputs).

    Returns:
        ``"  batch:     4 points per task (...): about 1.1 KiB of outputs ..."``.

    Raises:
        InputError: over :data:`solver.errors.MAX_OUTPUT_BYTES`, located at
            ``Batch``, with the limit and how to raise it.
    """
    from solver.errors import MAX_OUTPUT_BYTES, format_bytes, size_limit_message

    _, per = store_bytes(spec, context)
    size = int(context.batch)
    need = 8.0 * size * per
    message = size_limit_message("MAX_OUTPUT_BYTES", MAX_OUTPUT_BYTES, need,
                                 f"one batch of {size} points x {per} values a point in memory",
                                 "lower Batch or the output times")
    if message:
        raise InputError(message, file=str(spec.path), path="Batch")
    requested = int(getattr(spec, "requested_batch", size))
    note = (f" (Batch {requested} is more than the {spec.n_points} points, so one batch of "
            f"{size})" if requested > size else "")
    return (f"  batch:     {size} point{'' if size == 1 else 's'} per task{note}: about "
            f"{format_bytes(need)} of outputs in memory per batch")
