"""Programs traced in the caller's thread and compiled on a background thread while the caller goes on.

A first solve waits for its programs one after another: the consistent
initial point's (traced, compiled, run), then the run's (traced, compiled,
run), then the output series'.  The run's program depends only on the
shapes of the consistent point, not on its values, and XLA releases
Python's lock while it compiles.  So a solve traces and lowers the run's
program first, hands XLA's compile to a background thread, and finds the
consistent point meanwhile on the other core; the output series' program
is lowered next and compiled beside the run's.  The tracing stays in the
caller's thread: two threads tracing at once contend for Python's lock, and
took longer than one after the other.

:class:`AheadTable` keeps the builds started for a program by the signature
of their arguments; the program's call with that signature waits for its
build (:meth:`AheadTable.wait`) instead of compiling again.  A failure in
the background is not reported there: the call then builds the program in
its own thread and raises what it raises, with the traceback a user
expects.  The time a caller waits for a build is reported to JAX's
monitoring as :data:`WAIT_EVENT`, which :class:`solver.compiled.compile_clock`
counts as compiling (it counts only its own thread's compiles).

The background threads are joined when Python exits, so that no compile is
cut off inside XLA: a script whose solve failed after its run's build was
started waits for that build before it ends.  The ``mechsweep`` command
does not (:func:`sweep.cli.app.run`: a command that failed skips the
threads' shutdown while :func:`running` says a build is still compiling).

``MECHSWEEP_COMPILE_AHEAD=off`` (:data:`AHEAD_ENV`) turns it off: nothing is
built ahead, and each program is built by its first call, as before.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time

import jax

from solver.errors import switch

__all__ = ["Ahead", "AheadTable", "start", "enabled", "running", "signature", "AHEAD_ENV", "WAIT_EVENT"]

#: The environment variable that turns building ahead off (``off``, ``0``, ``false``, ``no``).
AHEAD_ENV = "MECHSWEEP_COMPILE_AHEAD"

#: The monitoring event of a caller's wait for a build started ahead (seconds).
WAIT_EVENT = "/mechsweep/compile_ahead_wait"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
#: The builds submitted and not yet ended.
_running: set = set()


def signature(args, kwargs, static=()) -> tuple:
    """What picks a jitted call's compiled program: its arguments' tree and abstract values, its static values.

    Args:
        args, kwargs: the call's arguments.
        static: the names of its static keyword arguments.

    Returns:
        ``(tree, avals, statics)``, hashable.
    """
    leaves, tree = jax.tree.flatten((args, {k: v for k, v in kwargs.items() if k not in static}))
    return tree, tuple(jax.typeof(x) for x in leaves), tuple(sorted((k, kwargs[k]) for k in static if k in kwargs))


def enabled() -> bool:
    """Whether builds go to a background thread (:data:`AHEAD_ENV` is not ``off``).

    Raises:
        InputError: :data:`AHEAD_ENV` is neither on nor off.
    """
    return switch(AHEAD_ENV)


def running() -> int:
    """How many builds are compiling in the background now (submitted and not ended)."""
    with _lock:
        return len(_running)


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    # Two threads: the run's build and the output series' build started while
    # the run's compiles, each taking a core while XLA holds no Python lock.
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="mechsweep-ahead")
        return _pool


class Ahead:
    """A build started ahead of its program's first call (:func:`start`)."""

    __slots__ = ("_future",)

    def __init__(self, future: concurrent.futures.Future | None):
        self._future = future

    def wait(self) -> None:
        """Wait for the build to end; its time counts as compiling in this thread (:data:`WAIT_EVENT`).

        A failed build is only logged: the program's own call builds it again and raises there.
        """
        future, self._future = self._future, None
        if future is None:
            return
        started = time.perf_counter()
        try:
            future.result()
        except Exception as exc:  # the caller's own call repeats the build and raises in its thread
            _log.debug("a build started ahead failed (%s); the first call builds it again", exc)
        finally:
            jax.monitoring.record_event_duration_secs(WAIT_EVENT, time.perf_counter() - started)


def start(build) -> Ahead:
    """Start ``build()`` on a background thread (where :func:`enabled`; else nothing is built).

    Args:
        build: a function of no arguments that builds a program into its
            jit's cache (e.g. ``lambda: jitted.lower(*args).compile()``); its
            result is dropped.

    Returns:
        An :class:`Ahead` to :meth:`~Ahead.wait` for before the program's first call.
    """
    if not enabled():
        return Ahead(None)
    future = _executor().submit(build)
    with _lock:
        _running.add(future)
    future.add_done_callback(_ended)
    return Ahead(future)


def _ended(future) -> None:
    with _lock:
        _running.discard(future)


class AheadTable:
    """The builds started ahead for one program (or a few), by the key of their arguments' signature.

    A key is built ahead at most once: after the first call with it
    (:meth:`wait`), :meth:`wants` says no, so a caller that starts builds
    ahead before every batch pays for the lowering once.
    """

    def __init__(self):
        self._started: dict = {}
        self._done: set = set()

    def wants(self, key) -> bool:
        """Whether to build ``key`` ahead: building ahead is on, and ``key`` is neither started nor called."""
        return enabled() and key not in self._started and key not in self._done

    def start(self, key, lower) -> None:
        """Run ``lower()`` here and :func:`start` the build it returns, kept until the first call with ``key``.

        Args:
            key: the arguments' signature.
            lower: traces and lowers the program (Python's work, done in
                this thread) and returns the function that compiles it.  An
                exception it raises is only logged: the first call traces
                again and raises it there.
        """
        try:
            build = lower()
        except Exception as exc:
            self._done.add(key)
            _log.debug("a program could not be traced ahead (%s); its first call traces it", exc)
            return
        self._started[key] = start(build)

    def pending(self) -> bool:
        """Whether a build started ahead has not been waited for (a call must look its key up)."""
        return bool(self._started)

    def wait(self, key) -> None:
        """Before the first call with ``key``: wait for its build, if one was started."""
        ahead = self._started.pop(key, None)
        if ahead is not None:
            self._done.add(key)
            ahead.wait()

    def jit_ahead(self, jitted, args: tuple, kwargs: dict | None = None, static=()) -> None:
        """:meth:`start` the build of a ``jax.jit`` for arguments like these (lowered here), once.

        The compiled program lands in the jit's own cache; its call must
        :meth:`before_call` first, or it may compile the program again.

        Args:
            jitted: the ``jax.jit`` function.
            args, kwargs: arguments as for its call (placeholders of the right shapes and types will do).
            static: the names of its static keyword arguments.
        """
        kwargs = kwargs or {}
        key = (id(jitted),) + signature(args, kwargs, static)
        if self.wants(key):
            self.start(key, lambda: jitted.lower(*args, **kwargs).compile)

    def before_call(self, jitted, args: tuple, kwargs: dict | None = None, static=()) -> None:
        """Before calling a ``jax.jit`` built by :meth:`jit_ahead`: wait for the build (nothing if none is pending).

        Args: as :meth:`jit_ahead`.
        """
        if self._started:
            self.wait((id(jitted),) + signature(args, kwargs or {}, static))
