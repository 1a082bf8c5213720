"""One integration at a time per process: the lock every solving entry point holds.

jaxlib 0.10.2's LAPACK kernels split a large batch over XLA's intra-op
thread pool and block the pool thread that called them until the pieces are
done.  Two programs executing at once from two threads (a Dask worker
started with ``--nthreads 2``, a user's thread pool) can take every thread
of a 2-core machine's pool that way, and each waits for pieces no thread is
left to run: 200 RSCR designs solved from two threads hung for ever, using
no CPU (gdb: both pool threads in ``lapack_dgetrf_ffi`` ->
``ParallelBatchMap`` -> ``BlockingCounter::Wait``).  So the entry points
that execute a compiled integration (:func:`solver.solve`,
:func:`solver.solve_batch`, :func:`solver.consistent_point` and an
:class:`~solver.integrate.integrator.Integrator`'s ``run``, ``run_batch`` and
``run_tangents``) run one at a time; XLA's pool spreads each of them over
the cores anyway.  (JAX's CPU dispatch is synchronous here,
:mod:`solver.integrate.xla_setup`, so a call returns after its program ran.)
"""

from __future__ import annotations

import functools
import threading

__all__ = ["SOLVING", "one_at_a_time"]

# Re-entrant: solve_batch holds it while it calls run_batch.
SOLVING = threading.RLock()


def one_at_a_time(fn):
    """``fn`` holding :data:`SOLVING`: a thread waits until another's integration has ended.

    Args:
        fn: a function or method that executes compiled integrations.

    Returns:
        The wrapped function (same signature and docstring).
    """

    @functools.wraps(fn)
    def holding_the_lock(*args, **kwargs):
        with SOLVING:
            return fn(*args, **kwargs)

    return holding_the_lock
