"""The XLA:CPU settings mechsweep makes: whole small loops, bounded full unrolling, the caller's thread.

**Whole small loops.**

XLA:CPU runs a program as a sequence of kernels ("thunks"), one per fusion,
copy or loop, and pays about 35 ns of runtime per kernel on this machine,
more when a loop body's buffers pass 512 bytes and the kernels are handed
between threads.  A Taylor step of a small model is a few hundred kernels
around a few thousand flops, so the runtime, not the arithmetic, set the
speed (``workflows/benchmarks/results/kernels.txt``).  XLA has a pass that
compiles a whole while loop into one function ("small call") when the bytes
its body touches are below ``xla_cpu_small_while_loop_byte_threshold``; the
default (1,024 bytes) leaves every step loop of ours out.  At
:data:`SMALL_LOOP_BYTES` the step loops of the pendulum, Andrews' squeezer,
RSCR and Mechanism0 are compiled whole (runs 1.75-5x faster; RSCR needs the
10 MB: at 1 MB only its inner loops were hoisted and its run got slower),
while the 90x90 cloth, whose loop touches more and gains from XLA's
threads, keeps the kernel-by-kernel runtime (hoisted, at a 1 GB threshold,
its step was 1.7x slower) (``workflows/benchmarks/results/small_loops.txt``).
XLA hoists no loop that holds a custom call (LAPACK), a scatter, a sort
or a library fusion (XLA:CPU makes YNNPACK fusions of some dots and, under
``vmap``, of some multiply-and-reduce patterns; a small plain dot is
hoisted); where the option is in effect (:func:`loops_compiled_whole`) a
single run's loop is written without them (``solver.numerics.linalg.native_loops``;
up to 20 unknowns in its dense stage system, ``SingleRun.loop_compiled_whole``),
and a batch's slots step in rounds without scatters
(``Integrator._run_batch_rounds``).  A loop compiled
whole takes longer to compile (Andrews 9.8 -> 14.3 s, RSCR 8.3 -> 13.9 s).

**Bounded full unrolling.**  A loop compiled whole is one large function,
and LLVM fully unrolls the small constant-trip loops XLA emits inside it,
then recomputes its loop analyses after each (perf of RSCR's compile: LLVM
51% of the samples, its loop passes 14%, full unrolling and
ScalarEvolution's invalidation the largest part).  LLVM's ``-unroll-full-max-count``
(:data:`UNROLL_OPTION`) at :data:`UNROLL_MAX_TRIPS` keeps loops of more trips
rolled: XLA's compile of Andrews' squeezer went from 11.3-15.8 to 8.4-8.7 s,
RSCR's from 11.4-13.0 to 8.7-9.8 s, and their runs were as fast or faster;
small unrolled programs and batches are about even
(``workflows/benchmarks/results/unroll.txt``).  Partial unrolling and
vectorisation are untouched.

XLA reads ``XLA_FLAGS`` once, when JAX starts its backend (the first
computation or ``jax.devices()``), so :func:`apply` runs when ``solver`` is
imported, before any of its modules computes.  A value the user set in
``XLA_FLAGS`` is kept, option by option (``...threshold=0`` turns the
hoisting off, ``-unroll-full-max-count=4294967295`` gives LLVM's own
unrolling back).  When the backend was started before ``solver`` was
imported, the options cannot take effect any more: :func:`apply` warns once,
naming the fix.

**Synchronous dispatch.** JAX hands every CPU computation of more than
1,000 flops to a worker thread and the Python thread waits for it
(``jax_cpu_enable_async_dispatch``); XLA runs cheaper ones inline.  Each of
our runs is above that line and takes a fraction of a millisecond, so the
hand-over and the waking of the waiting thread cost every call tens of
microseconds: the pendulum's run went from 0.216 to 0.184 ms back to back
and from 0.247 to 0.183 ms with Python work between calls, while diffrax
(whose step loop XLA counts under the line), batches and long runs are
unchanged (``workflows/benchmarks/results/dispatch.txt``).  The computation still
releases the GIL and still uses XLA's thread pool inside, so Dask's worker
threads and progress reporting keep running.  JAX reads the setting when
it starts its CPU backend, like ``XLA_FLAGS``: :func:`apply` sets it then.
To get asynchronous dispatch back, set
``jax.config.update("jax_cpu_enable_async_dispatch", True)`` after importing
``solver`` and before the first computation.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import sys
import warnings

from solver.import_hooks import after_import, around_import

OPTION = "xla_cpu_small_while_loop_byte_threshold"
UNROLL_OPTION = "-unroll-full-max-count"
DISPATCH_OPTION = "jax_cpu_enable_async_dispatch"
SMALL_LOOP_BYTES = 10_000_000
XLA_DEFAULT_LOOP_BYTES = 1024
UNROLL_MAX_TRIPS = 8

_EXTRA = "--xla_backend_extra_options"


class PerformanceWarning(UserWarning):
    """A setting that leaves results unchanged but makes them slower to get."""


def with_extra_options(flags: str, entries: dict) -> str:
    """``XLA_FLAGS`` text with ``entries`` added to XLA's extra options, except those it names already.

    Args:
        flags: the current ``XLA_FLAGS`` value ('' when unset).
        entries: option name -> value, in the order to add them.

    Returns:
        The new value.  The entries go into an existing
        ``--xla_backend_extra_options=k=v,...`` list (XLA keeps only the last
        such flag) or into a new one; an option whose name appears anywhere
        in ``flags`` is the user's and is left as it is.
    """
    added = ",".join(f"{k}={v}" for k, v in entries.items() if k not in flags)
    if not added:
        return flags
    lists = list(re.finditer(rf"{_EXTRA}=(\S*)", flags))
    if not lists:
        return f"{flags} {_EXTRA}={added}".strip()
    last = lists[-1]
    merged = f"{last.group(1)},{added}" if last.group(1) else added
    return flags[:last.start(1)] + merged + flags[last.end(1):]


def with_small_loop_option(flags: str, nbytes: int = SMALL_LOOP_BYTES) -> str:
    """``XLA_FLAGS`` text with the small-loop threshold added, unless it names one already.

    Args:
        flags: the current ``XLA_FLAGS`` value ('' when unset).
        nbytes: the threshold to add.

    Returns:
        The new value (see :func:`with_extra_options`).
    """
    return with_extra_options(flags, {OPTION: nbytes})


def with_mechsweep_options(flags: str) -> str:
    """``XLA_FLAGS`` text with both of mechsweep's XLA:CPU options, each unless the user named it.

    Args:
        flags: the current ``XLA_FLAGS`` value ('' when unset).

    Returns:
        The new value: the small-loop threshold (:data:`SMALL_LOOP_BYTES`)
        and LLVM's full-unroll bound (:data:`UNROLL_MAX_TRIPS`).
    """
    return with_extra_options(flags, {OPTION: SMALL_LOOP_BYTES, UNROLL_OPTION: UNROLL_MAX_TRIPS})


def loop_byte_threshold() -> int:
    """The small-loop threshold in effect for this process's compilations, in bytes.

    XLA's default (1,024) when the option came too late (``STATE == "late"``)
    or a user's ``XLA_FLAGS`` value cannot be read as a number.
    """
    if STATE == "set":
        return SMALL_LOOP_BYTES
    found = re.findall(rf"{OPTION}=(\d+)", os.environ.get("XLA_FLAGS", "")) if STATE == "user" else []
    return int(found[-1]) if found else XLA_DEFAULT_LOOP_BYTES


def loops_compiled_whole() -> bool:
    """Whether this process compiles small loops whole at mechsweep's threshold (or a larger one).

    The engine then shapes a single run's loop for it (no LAPACK calls,
    dots or scatters in the loop, one output chunk); below it, it keeps the
    shapes that suit XLA's kernel-by-kernel runtime.
    """
    return loop_byte_threshold() >= SMALL_LOOP_BYTES


def backend_started() -> bool:
    """True when JAX has started its backend (XLA_FLAGS already read)."""
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a JAX without this private helper: assume not yet
        return False


def configure_jax(settings: dict) -> None:
    """Update JAX's configuration now if JAX is imported, else as soon as it is.

    Importing JAX takes half a second; a command that computes nothing
    (``mechsweep --help``, ``status``) should not wait for it, yet settings
    read when JAX starts its backend must be in place before the first
    computation.  Until JAX is imported, a one-shot import hook
    (:func:`solver.import_hooks.after_import`) holds the settings and applies
    them the moment ``import jax`` has run, before the importer gets the
    module back.

    Args:
        settings: option name -> value, as for ``jax.config.update``.
    """
    settings = dict(settings)

    def update(jax):
        for name, value in settings.items():
            jax.config.update(name, value)

    after_import("jax", update)


def scan_only_jax_packages() -> None:
    """Let JAX's import look for its ROCm plugin among the installed packages named ``jax*`` only.

    Importing ``jax.numpy`` walks ``importlib.metadata.distributions()`` and
    parses every installed package's metadata to find one named
    ``jax-rocm*-plugin``: one file per package, 35 ms of every process's
    start in an environment of 155 packages, more in bigger ones.  While
    JAX imports, the walk is shown the packages whose folder names say
    ``jax*`` (read from the folder's name, no file opened; a distribution
    without such a name is shown as before), so the plugin is still found.
    The walk is restored as JAX's import ends.  Nothing changes where JAX
    is imported already.
    """
    around_import("jax", _jax_distributions_only)


@contextlib.contextmanager
def _jax_distributions_only():
    """``importlib.metadata.distributions`` limited to packages named ``jax*`` (see :func:`scan_only_jax_packages`)."""
    every = importlib.metadata.distributions

    def jax_distributions(**kwargs):
        for dist in every(**kwargs):
            # PathDistribution's name from its folder name, normalised (jax_rocm7_plugin); None: unknown.
            name = getattr(dist, "_normalized_name", None)
            if not isinstance(name, str) or name.startswith("jax"):
                yield dist

    importlib.metadata.distributions = jax_distributions
    try:
        yield
    finally:
        if importlib.metadata.distributions is jax_distributions:
            importlib.metadata.distributions = every


def apply() -> str:
    """Set mechsweep's XLA options in ``XLA_FLAGS`` (for this process and its children) and synchronous dispatch.

    Synchronous dispatch (``jax_cpu_enable_async_dispatch`` off) is set
    whenever JAX's backend has not started yet; like the loop option it
    cannot reach a backend already running.

    Returns:
        The small-loop threshold's state: ``"set"`` (added now), ``"user"``
        (``XLA_FLAGS`` names it already: kept), or ``"late"`` (JAX's backend
        had started without it: the options are added for child processes
        only, and a :class:`PerformanceWarning` says how to get them in this
        one).  The unroll bound is added alongside unless ``XLA_FLAGS`` names
        it.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    started = "jax" in sys.modules and backend_started()
    if not started:
        configure_jax({DISPATCH_OPTION: False})
    os.environ["XLA_FLAGS"] = with_mechsweep_options(flags)
    if OPTION in flags:
        return "user"
    if started:
        warnings.warn(
            "JAX started its backend before mechsweep was imported, so XLA compiles small models' step "
            "loops kernel by kernel and hands each run to another thread (up to 5x slower runs, same "
            "results). Import solver (or sweep) before "
            f"the first JAX computation, or start Python with XLA_FLAGS='{with_mechsweep_options('')}'.",
            PerformanceWarning, stacklevel=3)
        return "late"
    return "set"


STATE = apply()
