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
tiering costs a warm process nothing.

Processes that share a program store (a sweep's worker processes on one host)
compile each optimised build once: the first to need it takes a lock file
beside the marker (``flock``, which the system releases if the process dies)
and compiles it; the others stay on their quick builds, look for the marker
about once a second (:data:`LOOK_SECONDS`) and then load the build from the
cache.  Where the holder's build fails, or its process ends first, the next
one to look takes the lock over.

Both builds are the same StableHLO, so they differ only by the rounding of
LLVM's rewrites (up to 2e-10 over five shipped models in ``optimize.txt``,
where Mechanism0's chaotic motion is left out; ``tests/test_tiered_compile.py``
compares them on the pendulum).  A sweep from an empty cache therefore has
its first batches from the quick build and the rest from the optimised one;
a sweep that must match another bit for bit runs with tiering off.

Tiering is off unless asked for: ``mechsweep design`` turns it on for its own
process (many short solves, where the switch pays), a sweep for its workers'
batches (:class:`sweep.run.worker.JaxSetup`), :func:`set_tiered` for a library
session, and :data:`TIERED_ENV` overrides all of them.  It needs the program
store (a model read from a file and a compilation cache directory); anything
else compiles as before.  A process with a build still compiling waits for it
before it exits (:func:`wait_pending` lets a command say so;
:func:`sweep.run.cluster.finish_worker_builds` does for a sweep's workers).

Two more modes serve a one-off run, which cannot switch builds and whose
process should not outlive its result (``mechsweep simulate``, ``plot`` and
``animate``):

- ``"quick"``: a program whose optimised build the store has (its marker)
  loads that build; any other runs on a quick build alone, and no optimised
  build is compiled.  Without the program store every program is a quick
  build.
- ``"optimised"``: the optimised build, compiled (or loaded) at once and
  marked in the store, so that later ``"quick"`` runs of the program load it.

:func:`last_build` says which build the calling thread's last tiered call ran on.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import logging
import os
import threading
import time

from solver.ahead import AheadTable, signature as calls_signature
from solver.errors import SWITCH_OFF, SWITCH_ON, InputError
from solver.program_store import program_stem, store_directory

__all__ = ["TieredJit", "set_tiered", "tiered_compiles", "tiered_enabled", "tiered_mode", "last_build", "pending",
           "wait_pending", "stats", "MODES", "TIERED_ENV", "LOOK_SECONDS"]

#: The environment variable that sets a process's mode (over :func:`set_tiered`): ``on`` (tiered),
#: ``off``, ``quick`` or ``optimised``.
TIERED_ENV = "MECHSWEEP_TIERED_COMPILE"

#: How a run's program is built on its first call with new argument shapes (see the module's text):
#: off (the optimised build, as ``jax.jit`` builds it), tiered, quick (unless the optimised build is
#: stored), optimised (and marked in the store).
MODES = ("off", "tiered", "quick", "optimised")

#: The ending of the marker that says a program's optimised build is in the compilation cache.
_MARK = ".optimised"
#: The ending of the lock file held by the process compiling a program's optimised build.
_LOCK = ".optimising"
#: Seconds between two looks, by a process on a quick build, for another's optimised build.
LOOK_SECONDS = 1.0

_process_default = "off"
#: The build the calling thread's last tiered call ran on (:func:`last_build`).
_last = threading.local()
_lock = threading.RLock()  # reentrant: a build's look starts the executor
_pool: concurrent.futures.ThreadPoolExecutor | None = None
#: The programs on a quick build, by program stem: their :class:`_Builds`, until they switch.
_compiling: dict = {}
_log = logging.getLogger(__name__)

#: Counts of this process: programs started on a quick build, builds shared with another
#: compiled model of the same program, optimised builds that replaced a quick one, optimised
#: builds compiled at once (marker present), optimised builds compiled in the background
#: here, optimised builds another process compiled and this one loaded, background failures,
#: programs built quickly alone (mode quick), optimised builds compiled and marked (mode optimised).
stats = {"quick": 0, "shared": 0, "switched": 0, "direct": 0, "optimised": 0, "loaded": 0, "failed": 0,
         "quick_alone": 0, "marked": 0}


def _mode_of(on) -> str:
    if isinstance(on, bool):
        return "tiered" if on else "off"
    if isinstance(on, str) and on in MODES:
        return on
    raise InputError(f"set_tiered takes true, false or one of {', '.join(repr(m) for m in MODES)}, got {on!r}")


def set_tiered(on: bool | str) -> None:
    """Set how this process builds run programs (:data:`TIERED_ENV` still wins).

    Args:
        on: True (tiered: quick builds first, optimised ones in the background),
            False (off: optimised builds), or a mode of :data:`MODES` by name
            (``"quick"``, ``"optimised"``: see the module's text).

    Raises:
        InputError: ``on`` is neither a bool nor a mode's name.
    """
    global _process_default
    _process_default = _mode_of(on)


@contextlib.contextmanager
def tiered_compiles(on: bool | str = True):
    """Context manager: :func:`set_tiered` inside the block, the previous setting after it.

    Args:
        on: the setting inside the block (as for :func:`set_tiered`).

    Raises:
        InputError: ``on`` is neither a bool nor a mode's name.
    """
    previous = _process_default
    set_tiered(on)
    try:
        yield
    finally:
        set_tiered(previous)


def tiered_mode() -> str:
    """How this process builds run programs: one of :data:`MODES`.

    Returns:
        :data:`TIERED_ENV`'s mode where it is set (``on`` is tiered), else :func:`set_tiered`'s (off by default).

    Raises:
        InputError: :data:`TIERED_ENV` holds something else, with the valid values.
    """
    value = os.environ.get(TIERED_ENV, "").strip().lower()
    if not value:
        return _process_default
    if value in SWITCH_ON:
        return "tiered"
    if value in SWITCH_OFF:
        return "off"
    if value in MODES:
        return value
    raise InputError(f"{TIERED_ENV}={os.environ[TIERED_ENV]!r}: use on, off, quick or optimised (or unset it)")


def tiered_enabled() -> bool:
    """Whether new programs start on the quick build and switch to the optimised one (the tiered mode).

    Raises:
        InputError: as :func:`tiered_mode`.
    """
    return tiered_mode() == "tiered"


def last_build() -> str | None:
    """Which build the calling thread's last call of a tiered program ran on.

    Returns:
        ``"quick"`` or ``"optimised"``; None before any call in this thread.
    """
    return getattr(_last, "build", None)


def pending() -> int:
    """How many optimised builds are still compiling (or loading) in the background."""
    with _lock:
        return sum(builds.coming is not None and not builds.coming.done() for builds in _compiling.values())


def wait_pending(timeout: float | None = None) -> bool:
    """Wait for the optimised builds still compiling.

    Args:
        timeout: the most seconds to wait (None: until they are done).

    Returns:
        True when none is left compiling.
    """
    with _lock:
        futures = [builds.coming for builds in _compiling.values() if builds.coming is not None]
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


def _beside(stem, ending):
    """The file ``<stem><ending>`` beside a program in the store (its marker or its lock)."""
    return stem.with_name(stem.name + ending)


class _Claim:
    """The lock file of one program's optimised build, held while this process compiles it."""

    def __init__(self, path):
        self.path = path
        self._handle = None

    def take(self) -> bool:
        """Take the lock unless another process holds it.

        Returns:
            False when another process holds it; True when this one does now,
            or where files cannot be locked here (then every process compiles).
        """
        try:
            import fcntl
        except ImportError:  # no flock (Windows): each process compiles its own
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "ab")
        except OSError:
            return True
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            return exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
        self._handle = handle
        return True

    def release(self) -> None:
        """Let the lock go (closing the file releases it)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()


def _mark_built(mark) -> None:
    # Where the store cannot be written, later processes compile the build again: no harm.
    with contextlib.suppress(OSError):
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()


def _optimise(lowered, mark, claim: _Claim):
    try:
        executable = lowered.compile()
        _mark_built(mark)
    finally:
        claim.release()
    with _lock:
        stats["optimised"] += 1
    return executable


def _load(lowered):
    executable = lowered.compile()  # another process's build: a hit in the compilation cache
    with _lock:
        stats["loaded"] += 1
    return executable


class _Builds:
    """The builds of one program and argument signature: the one in use and the optimised one to come.

    Shared by the compiled models of the same program in one process.  Until
    the optimised build is under way (here, or in another process that holds
    its lock), it keeps the lowered program to compile it from.
    """

    __slots__ = ("current", "quick", "coming", "name", "_stem", "_lowered", "_mark", "_claim", "_next_look")

    def __init__(self, current, name, stem=None, lowered=None, quick=False):
        self.current, self.coming, self.name, self._stem = current, None, name, stem
        #: Whether ``current`` is a quick build.
        self.quick = quick
        self._lowered = lowered
        self._mark = _beside(stem, _MARK) if stem is not None else None
        self._claim = _Claim(_beside(stem, _LOCK)) if stem is not None else None
        self._next_look = 0.0

    def look(self) -> None:
        """Start the optimised build: load another process's, or compile it here if no one else is."""
        if self._lowered is None or time.monotonic() < self._next_look:
            return
        with _lock:
            if self._lowered is None or self.coming is not None:
                return
            self._next_look = time.monotonic() + LOOK_SECONDS
            if self._mark.exists():
                self.coming = _executor().submit(_load, self._lowered)
            elif self._claim.take():
                if self._mark.exists():  # finished by its last holder between the two looks
                    self._claim.release()
                    self.coming = _executor().submit(_load, self._lowered)
                else:
                    self.coming = _executor().submit(_optimise, self._lowered, self._mark, self._claim)
            else:
                return  # another process is compiling it: stay on the quick build
            self._lowered = None

    def best(self):
        """The build to run now: the optimised one once it is ready."""
        coming = self.coming
        if coming is None:
            self.look()
            return self.current
        if coming.done():
            with _lock:
                if self.coming is not coming:
                    return self.current
                self.coming = None
                _compiling.pop(self._stem, None)  # a model compiled from now on finds the marker
                try:
                    self.current, self.quick = coming.result(), False
                except Exception as exc:  # the quick build stays; the next process tries again
                    _log.warning("the optimised build of %s failed (%s); staying on the quick build",
                                 self.name, exc)
                    stats["failed"] += 1
                else:
                    stats["switched"] += 1
        return self.current


class TieredJit:
    """A jitted program built as the process's mode says (:func:`tiered_mode`; see the module's text).

    Off, it is the jit itself; tiered, its first calls run on a quick build;
    quick, it runs on a quick build unless the store has the optimised one;
    optimised, it compiles the optimised build and marks it.

    Args:
        jitted: the program, a ``jax.jit`` (or :func:`~solver.program_store.stored_jit`)
            with the optimised build's compiler options.
        identity: the compiled model's :func:`~solver.program_store.dae_identity`
            (None: never tiered).
        name: the program's name within it (as given to ``stored_jit``).
        quick_options: the XLA options of the quick build
            (:data:`~solver.integrate.choices.QUICK_COMPILE`), merged over the jit's own.
        static_argnames: ``jitted``'s static keyword arguments.
        enabled: False for a program that is built quickly anyway (``optimize=False``).
    """

    def __init__(self, jitted, identity: str | None, name: str, quick_options: dict, static_argnames=(),
                 enabled: bool = True):
        self._jit = jitted
        self._quick_options = dict(quick_options)
        self._identity = identity
        self._name = name
        self._static = tuple(static_argnames)
        #: Whether the program has an optimised build to tier (False: built quickly anyway).
        self._enabled_at_all = bool(enabled)
        #: ... and a key in the program store.
        self._enabled = bool(enabled) and identity is not None
        self._builds: dict = {}
        #: Builds started ahead of their first call (:meth:`ahead`).
        self._ahead = AheadTable()

    def __call__(self, *args, **kwargs):
        mode, directory, signature = self._signature(args, kwargs)
        if self._ahead.pending():
            self._ahead.wait(self._ahead_key(signature, args, kwargs))
        if signature is None:
            _last.build = "optimised" if self._enabled_at_all else "quick"
            return self._jit(*args, **kwargs)
        builds = self._builds.get(signature)
        if builds is None:
            builds = self._builds[signature] = self._lower(mode, directory, args, kwargs, signature)()
        executable = builds.best()
        _last.build = "quick" if builds.quick else "optimised"
        return executable(*args, **{k: v for k, v in kwargs.items() if k not in self._static})

    def ahead(self, *args, **kwargs) -> None:
        """Build the program that a call with arguments like these runs: traced now, compiled in the background.

        The trace and the lowering are done in this thread; XLA's compile goes
        to a background thread (:mod:`solver.ahead`) while the caller goes on.
        A later call whose arguments have the same shapes, types and static
        values waits for that build instead of starting its own.  Only shapes
        and types matter: the arguments may be placeholders (zeros).  Where
        building ahead is off (:func:`solver.ahead.enabled`) nothing is done.

        Args:
            *args, **kwargs: arguments as for a call.
        """
        mode, directory, signature = self._signature(args, kwargs)
        key = self._ahead_key(signature, args, kwargs)
        if not self._ahead.wants(key) or signature in self._builds:
            return
        if signature is None:
            self._ahead.jit_ahead(self._jit, args, kwargs, self._static)
            return

        def lower():
            compile_builds = self._lower(mode, directory, args, kwargs, signature)

            def build():
                self._builds[signature] = compile_builds()
            return build
        self._ahead.start(key, lower)

    def _ahead_key(self, signature, args, kwargs):
        # Where the jit itself runs (signature None), the key AheadTable.jit_ahead gives it.
        if signature is not None:
            return signature
        return (id(self._jit),) + calls_signature(args, kwargs, self._static)

    def _signature(self, args, kwargs):
        """(mode, store directory, signature of the builds); the signature is None where the jit itself runs."""
        mode = tiered_mode() if self._enabled_at_all else "off"
        directory = store_directory() if self._enabled and mode != "off" else None
        if directory is None and mode != "quick":
            return mode, None, None
        return mode, directory, (mode,) + calls_signature(args, kwargs, self._static)

    def __getattr__(self, attribute):
        # The rest of the jit's surface (lower, _cache_size, ...): the optimised build's.
        if attribute == "_jit":
            raise AttributeError(attribute)
        return getattr(self._jit, attribute)

    def _lower(self, mode, directory, args, kwargs, signature):
        """Trace and lower the program (Python's work); returns the function that compiles it into its builds.

        Split so that :meth:`ahead` traces in the caller's thread and leaves
        only XLA's compile, which releases Python's lock, to a background
        thread: two threads tracing at once contend for the lock and took
        longer than one after the other.
        """
        if directory is None:  # mode quick without the program store: nothing to look up or mark
            lowered = self._jit.lower(*args, **kwargs)

            def quick_alone():
                with _lock:
                    stats["quick_alone"] += 1
                return _Builds(lowered.compile(self._quick_options), self._name, quick=True)
            return quick_alone
        _, tree, avals, statics = signature
        stem = program_stem(directory, self._identity, self._name, dict(statics), tree, avals)
        if mode == "tiered":
            with _lock:
                # Another compiled model of the same file and settings (a design's
                # copies of one model) still on its quick build: the same program,
                # so its builds serve this one too.
                started = _compiling.get(stem)
                if started is not None:
                    stats["shared"] += 1
                    return lambda: started
        lowered = self._jit.lower(*args, **kwargs)
        mark = _beside(stem, _MARK)

        def compiled():
            if mark.exists():
                with _lock:
                    stats["direct"] += 1
                return _Builds(lowered.compile(), self._name)
            if mode == "optimised":
                executable = lowered.compile()
                _mark_built(mark)
                with _lock:
                    stats["marked"] += 1
                return _Builds(executable, self._name)
            if mode == "quick":
                with _lock:
                    stats["quick_alone"] += 1
                return _Builds(lowered.compile(self._quick_options), self._name, quick=True)
            # The optimised build starts once the quick one is done: started beside it, it
            # slows down the quick build, which the first result waits for
            # (workflows/benchmarks/results/design_first_result.txt).
            builds = _Builds(lowered.compile(self._quick_options), self._name, stem, lowered, quick=True)
            with _lock:
                _compiling[stem] = builds
                stats["quick"] += 1
            builds.look()
            return builds
        return compiled
