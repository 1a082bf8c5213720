"""Tiered compiles: a program's first calls run on a quick build while its optimised build compiles.

XLA's compile of a mid-size model's run is mostly LLVM optimising machine code,
and a design study or an interactive session waits for it before its first
result.  Built without that optimisation (:data:`~solver.integrate.choices.QUICK_COMPILE`)
the same program compiles in about half the time and runs 1.3-10x slower
(``workflows/benchmarks/results/optimize.txt``).  A tiered program takes both:

1. on a call with new argument shapes it traces and lowers the program once,
   compiles the quick build and runs on it;
2. the optimised build of the same lowered program compiles meanwhile on one
   background thread (XLA releases Python's lock while it compiles, so it
   takes the other core, not the caller's);
3. every call after the optimised build is ready runs on it.  A call is
   never interrupted: a single long run stays on the build it started on.

When the optimised build is done, a marker beside the program in the program
store (:mod:`solver.program_store`) records it, and later processes compile the
optimised build straight away (a hit in JAX's persistent compilation cache):
tiering costs a warm process nothing.  Both builds are the same StableHLO, so
they differ only by the rounding of LLVM's rewrites (up to 2e-10 over five
shipped models in ``optimize.txt``, where Mechanism0's chaotic motion is left
out; ``tests/test_tiered_compile.py`` compares them on the pendulum).

Tiering is off unless asked for: ``mechsweep design`` turns it on for its own
process (many short solves, where the switch pays), as does
:func:`set_tiered` for a library session, and :data:`TIERED_ENV` (``on`` or
``off``) overrides both.  It needs the program store (a model read from a file
and a compilation cache directory); anything else compiles as before.  A
process with a build still compiling waits for it before it exits
(:func:`wait_pending` lets a command say so).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading

import jax

from solver.errors import InputError
from solver.program_store import program_stem, store_directory

__all__ = ["TieredJit", "set_tiered", "tiered_compiles", "tiered_enabled", "pending", "wait_pending",
           "stats", "TIERED_ENV"]

#: The environment variable that turns tiering on or off for a process (over :func:`set_tiered`).
TIERED_ENV = "MECHSWEEP_TIERED_COMPILE"

#: The ending of the marker that says a program's optimised build is in the compilation cache.
_MARK = ".optimised"

_ON, _OFF = ("on", "1", "true", "yes"), ("off", "0", "false", "no")
_process_default = False
_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
#: The programs whose optimised build is compiling: {program stem: (quick build, future)}.
_compiling: dict = {}
_log = logging.getLogger(__name__)

#: Counts of this process: programs started on a quick build, builds shared with another
#: compiled model of the same program, optimised builds that replaced a quick one, optimised
#: builds compiled at once (marker present), background failures.
stats = {"quick": 0, "shared": 0, "switched": 0, "direct": 0, "failed": 0}


def set_tiered(on: bool) -> None:
    """Turn tiered compiles on or off for this process (:data:`TIERED_ENV` still wins).

    Args:
        on: True to start new programs on the quick build.

    Raises:
        InputError: ``on`` is not a bool.
    """
    global _process_default
    if not isinstance(on, bool):
        raise InputError(f"set_tiered takes true or false, got {on!r}")
    _process_default = on


@contextlib.contextmanager
def tiered_compiles(on: bool = True):
    """Context manager: :func:`set_tiered` inside the block, the previous setting after it.

    Args:
        on: the setting inside the block.

    Raises:
        InputError: ``on`` is not a bool.
    """
    previous = _process_default
    set_tiered(on)
    try:
        yield
    finally:
        set_tiered(previous)


def tiered_enabled() -> bool:
    """Whether new programs start on the quick build in this process.

    Returns:
        :data:`TIERED_ENV`'s value where it is set, else :func:`set_tiered`'s (off by default).

    Raises:
        InputError: :data:`TIERED_ENV` holds something other than on or off.
    """
    value = os.environ.get(TIERED_ENV, "").strip().lower()
    if not value:
        return _process_default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise InputError(f"{TIERED_ENV}={os.environ[TIERED_ENV]!r}: use on or off (or unset it)")


def pending() -> int:
    """How many optimised builds are still compiling in the background."""
    with _lock:
        return sum(not future.done() for _, future in _compiling.values())


def wait_pending(timeout: float | None = None) -> bool:
    """Wait for the optimised builds still compiling.

    Args:
        timeout: the most seconds to wait (None: until they are done).

    Returns:
        True when none is left compiling.
    """
    with _lock:
        futures = [future for _, future in _compiling.values()]
    concurrent.futures.wait(futures, timeout=timeout)
    return pending() == 0


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    # One thread: the optimised builds queue behind each other on one core and
    # leave the other to the caller.  Its thread is joined when Python exits,
    # so no compile is cut off inside XLA.
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mechsweep-optimise",
                                                          initializer=_lower_priority)
        return _pool


def _lower_priority() -> None:
    # The pool's thread gives way to the caller's where both want a core (a
    # one-core container, a design's own work): on Linux a thread has its own
    # niceness, and the threads XLA starts from it inherit it.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


def _optimise(lowered, mark):
    executable = lowered.compile()
    with contextlib.suppress(OSError):
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
    return executable


class _Builds:
    """The builds of one argument signature: the one in use and the optimised one to come."""

    __slots__ = ("current", "coming", "name")

    def __init__(self, current, coming, name):
        self.current, self.coming, self.name = current, coming, name

    def best(self):
        coming = self.coming
        if coming is not None and coming.done():
            self.coming = None
            try:
                self.current = coming.result()
            except Exception as exc:  # the quick build stays; the next process tries again
                _log.warning("the optimised build of %s failed (%s); staying on the quick build", self.name, exc)
                with _lock:
                    stats["failed"] += 1
            else:
                with _lock:
                    stats["switched"] += 1
        return self.current


class TieredJit:
    """A jitted program whose first calls run on a quick build (see the module's text).

    Args:
        jitted: the program, a ``jax.jit`` (or :func:`~solver.program_store.stored_jit`)
            with the optimised build's compiler options.
        identity: the compiled model's :func:`~solver.program_store.dae_identity`
            (None: never tiered).
        name: the program's name within it (as given to ``stored_jit``).
        static_argnames: ``jitted``'s static keyword arguments.
        quick_options: the XLA options of the quick build
            (:data:`~solver.integrate.choices.QUICK_COMPILE`), merged over the jit's own.
        enabled: False for a program that is built quickly anyway (``optimize=False``).
    """

    def __init__(self, jitted, identity: str | None, name: str, quick_options: dict, static_argnames=(),
                 enabled: bool = True):
        self._jit = jitted
        self._quick_options = dict(quick_options)
        self._identity = identity
        self._name = name
        self._static = tuple(static_argnames)
        self._enabled = bool(enabled) and identity is not None
        self._builds: dict = {}

    def __call__(self, *args, **kwargs):
        directory = store_directory() if self._enabled and tiered_enabled() else None
        if directory is None:
            return self._jit(*args, **kwargs)
        dynamic = dict(kwargs)
        statics = {k: dynamic.pop(k) for k in self._static if k in dynamic}
        leaves, tree = jax.tree.flatten((args, dynamic))
        avals = tuple(jax.typeof(x) for x in leaves)
        signature = (tree, avals, tuple(sorted(statics.items())))
        builds = self._builds.get(signature)
        if builds is None:
            builds = self._builds[signature] = self._start(directory, args, kwargs, statics, tree, avals)
        return builds.best()(*args, **dynamic)

    def __getattr__(self, attribute):
        # The rest of the jit's surface (lower, _cache_size, ...): the optimised build's.
        if attribute == "_jit":
            raise AttributeError(attribute)
        return getattr(self._jit, attribute)

    def _start(self, directory, args, kwargs, statics, tree, avals) -> _Builds:
        stem = program_stem(directory, self._identity, self._name, statics, tree, avals)
        with _lock:
            # Another compiled model of the same file and settings (a design's
            # copies of one model) whose optimised build is still compiling:
            # the same program, so its builds serve this one too.
            started = _compiling.get(stem)
            if started is not None:
                stats["shared"] += 1
                return _Builds(started[0], started[1], self._name)
        mark = stem.with_name(stem.name + _MARK)
        lowered = self._jit.lower(*args, **kwargs)
        if mark.exists():
            with _lock:
                stats["direct"] += 1
            return _Builds(lowered.compile(), None, self._name)
        # The optimised build starts once the quick one is done: started beside it, it
        # slows down the quick build, which the first result waits for
        # (workflows/benchmarks/results/design_first_result.txt).
        quick = lowered.compile(self._quick_options)
        future = _executor().submit(_optimise, lowered, mark)
        with _lock:
            _compiling[stem] = (quick, future)
            stats["quick"] += 1
        future.add_done_callback(lambda done: _forget(stem))  # at once if it is done already
        return _Builds(quick, future, self._name)


def _forget(stem) -> None:
    with _lock:
        _compiling.pop(stem, None)
