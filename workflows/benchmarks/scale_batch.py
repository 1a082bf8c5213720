"""The batch function of the scale benchmark (``bench_scale.py``): pre-computed results, at once.

It must be importable by the Dask workers (they unpickle it by module name),
so it lives in its own small module; ``bench_scale.py`` starts the workers
with this folder and the repository on their ``PYTHONPATH``.

:func:`canned_batch` returns results of exactly the shapes the real RSCR sweep
stores (the :class:`~sweep.store.Schema` of its real context), made once per
worker and batch size, so that a task costs the pipeline alone: transport,
the worker's checks and writes, the driver's commits.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweep.store import BatchResult

__all__ = ["CannedContext", "canned_batch", "canned_result", "peak_rss", "warm"]


@dataclass
class CannedContext:
    """The context sent with every task: the real sweep's context, carried whole.

    The real ``SweepContext`` travels (pickled with each task, as in a real
    sweep) though :func:`canned_batch` uses only its schema.

    Attributes:
        sweep: the real sweep's ``sweep.pipeline.SweepContext``.
        seed: seeds the synthetic values.
    """

    sweep: Any
    seed: int = 0

    @property
    def schema(self):
        """The real sweep's store schema (what ``run_sweep`` lays the store out by)."""
        return self.sweep.schema

    @property
    def attrs(self) -> dict:
        """The real sweep's dataset attributes."""
        return self.sweep.attrs


# (seed, batch size) -> the result; kept for the worker's lifetime.
_CACHE: dict[tuple[int, int], BatchResult] = {}


def canned_result(schema, n: int, seed: int = 0) -> BatchResult:
    """A successful result for ``n`` points with the schema's shapes (made once, then reused).

    The values are smooth trajectories of varied frequency and phase, not
    constants: Zarr's compressor then sees data about as incompressible as
    real float64 results, rather than long runs of equal bytes.

    Args:
        schema: the store's :class:`~sweep.store.Schema`.
        n: points in the batch.
        seed: seeds the values.

    Returns:
        A :class:`~sweep.store.BatchResult` with every point successful.
    """
    key = (seed, n)
    if key not in _CACHE:
        rng = np.random.default_rng(seed)
        t = np.asarray(schema.time, dtype=float)
        data = {}
        for name in schema.variables:
            shape = schema.shape(name)
            if not shape:
                data[name] = rng.uniform(0.1, 2.0, n)
                continue
            # Each point and component its own frequency and phase, along time when there is one.
            components = int(np.prod(shape[1:]))
            freq = rng.uniform(0.5, 5.0, (n, 1, components))
            phase = rng.uniform(0.0, 2 * np.pi, (n, 1, components))
            along = t.reshape(1, -1, 1) if shape[0] == len(t) else np.arange(shape[0]).reshape(1, -1, 1)
            value = np.sin(freq * along + phase)
            data[name] = value.reshape((n,) + shape)
        steps = rng.integers(150, 250, n).astype(np.int64)
        _CACHE[key] = BatchResult(np.zeros(n, np.int8), steps, data)
    cached = _CACHE[key]
    # A fresh result each call; the arrays are shared, and the runtime only reads them.
    return BatchResult(cached.status.copy(), cached.steps.copy(), dict(cached.data))


def canned_batch(points: dict, context: CannedContext) -> BatchResult:
    """The benchmark's batch function: the pre-computed result of the batch's size."""
    n = len(next(iter(points.values())))
    return canned_result(context.schema, n, context.seed)


def warm(context: CannedContext, n: int) -> int:
    """Prepare this worker before timing: imports done, the result of ``n`` points made.

    Returns:
        the process id.
    """
    import os

    import sweep.pipeline  # noqa: F401 - the context's class; unpickling a task needs it
    import sweep.run  # noqa: F401 - the task function's module

    canned_result(context.schema, n, context.seed)
    return os.getpid()


def peak_rss() -> int:
    """This process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
