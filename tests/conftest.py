"""Test-wide settings: float64 JAX, a persistent compilation cache (``sweep.run.configure_jax``),
XLA's machine-code optimisation off and Python's full garbage collections once per module.

The cache only saves time on repeated runs on one machine (a fresh machine
compiles everything once); results do not depend on it.

**A quick compile: LLVM at -O0, XLA's older emitters.**  The suite compiles
hundreds of programs and runs each for moments, so it compiles every program
as ``solve(optimize=False)`` does (:data:`TEST_XLA_FLAGS` =
:data:`solver.integrate.integrator.QUICK_COMPILE`, for every program, through
``XLA_FLAGS``).  LLVM's optimisation of the machine code was most of what
the suite waited for: from an empty compile cache it took 19:38 with it and
14:24 without (XLA's compile 1,231 -> 631 CPU-seconds), while a run of RSCR's
compiled step is 6x slower; XLA:CPU's older IR emitters, instead of its MLIR
fusion emitters, took a further fifth off XLA's compile
(``workflows/benchmarks/results/suite_compile.txt``).  XLA's HLO passes
(fusion, simplification, the loops compiled whole) run as for users, so the
kernels are the same and only their machine code differs, which can change
results by rounding (e.g. fused multiply-adds), not what is computed.
``tests/test_optimisation_level.py`` checks that the optimised build gives
the same numbers, in a child process that compiles as users do.  Set
``MECHSWEEP_TEST_XLA_OPT=full`` to run the suite as users compile; a flag
named in ``XLA_FLAGS`` keeps its value.

**Full garbage collections once per test module.**  A pytest worker's heap
grows to about a gigabyte (pytest, hypothesis, JAX's jaxprs); at Python's
default thresholds the cyclic collector went through all of it about every
2.5 s of tracing, a tenth of the worker's time (a first solve in a small
process spends 3 % in it).  The suite sets the thresholds so that only young
objects are collected in a module, and :func:`_release_compiled_programs`
collects fully at its end; what collection made is frozen out of every
collection (:func:`pytest_collection_finish`).  From an empty cache the suite
went from 6:26 to 5:47 (``workflows/benchmarks/results/suite_compile.txt``).

**Longest files first.**  ``make test`` hands whole files to two workers
(``--dist loadfile``) in collection order (``--no-loadscope-reorder``;
pytest-xdist would otherwise order them by their number of tests, which put
the few-but-slow files last and left one worker idle for the last 94 s).
:func:`pytest_collection_modifyitems` orders the files by the seconds they
took in a recorded run from an empty compile cache (``file_seconds.json``,
written by ``workflows/benchmarks/suite_compile_profile.py
--write-file-seconds``); a file not in it counts as :data:`UNKNOWN_FILE_SECONDS`.
"""

import gc
import json
import os
from pathlib import Path

TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
if os.environ.get("MECHSWEEP_TEST_XLA_OPT", "") != "full":
    # Before the backend starts (XLA reads XLA_FLAGS once); child processes inherit them.
    # A flag the caller names in XLA_FLAGS keeps the caller's value.
    _named = os.environ.get("XLA_FLAGS", "")
    _added = [flag for flag in TEST_XLA_FLAGS if flag[2:].split("=")[0] not in _named]
    os.environ["XLA_FLAGS"] = " ".join(_added + [_named]).strip()

# Every build of the suite is a quick one already (the flags above): a tiered compile
# (solver.tiered) would compile each program twice.  tests/test_tiered_compile.py turns it on.
os.environ.setdefault("MECHSWEEP_TIERED_COMPILE", "off")

import jax  # noqa: E402
import pytest  # noqa: E402

from sweep.run import configure_jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # also where the cache cannot be set up
_cache = os.environ.get("MECHSWEEP_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "mechsweep", "jax-tests"))
try:
    configure_jax(_cache)  # the CLI's and the workers' settings, small programs cached too
except OSError:  # read-only home: run without the cache
    pass


# Full collections at default thresholds: 40 in two test files, 0.25 s each (see above).
# Young objects every 100,000 allocations; the oldest generation only when a module ends.
gc.set_threshold(100_000, 50, 1_000_000)


def pytest_collection_finish(session):
    """Freeze what collection made (modules, fixtures' definitions, hypothesis): collections skip it."""
    gc.collect()
    gc.freeze()


FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
UNKNOWN_FILE_SECONDS = 30.0


TIERS = ("spec", "integration", "xla_internals")


def _assign_tiers(items):
    """Give every test without a tier the ``spec`` tier; a test in two tiers is an error.

    ``make test`` runs every tier; ``pytest -m spec`` runs the specification
    alone (``make test-spec``), ``-m integration`` the tests that start real
    services and kill them, ``-m xla_internals`` those that read what XLA
    compiled (run them when JAX or XLA changes).
    """
    for item in items:
        tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if len(tiers) > 1:
            raise pytest.UsageError(f"{item.nodeid} is marked with the tiers {sorted(tiers)}: give it one")
        if not tiers:
            item.add_marker(pytest.mark.spec)


def pytest_collection_modifyitems(session, config, items):
    """Give every test its tier; order the test files longest first (tests keep their order within a file)."""
    _assign_tiers(items)
    try:
        seconds = json.loads(FILE_SECONDS.read_text())
    except (OSError, ValueError):  # no timings: pytest's order
        return
    root = Path(str(config.rootpath))

    def cost(item):
        try:
            rel = Path(str(item.path)).relative_to(root).as_posix()
        except ValueError:
            return UNKNOWN_FILE_SECONDS
        return seconds.get(rel, UNKNOWN_FILE_SECONDS)

    items.sort(key=lambda item: -cost(item))  # stable: a file's tests stay together and in order


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Free a test module's XLA executables when it ends.

    A pytest worker runs half the suite in one process; every compiled
    program it keeps holds hundreds of memory maps, and past the kernel's
    65,530 a deserialisation from the compile cache segfaulted (twice, late
    in CI runs).  A module's models go with its fixtures; JAX's own caches
    are cleared here so their executables go too (the next module reloads
    what it needs from the persistent cache).
    """
    yield
    gc.collect()
    jax.clear_caches()


@pytest.fixture
def program_store_dir(tmp_path, monkeypatch):
    """A program store of its own (JAX's cache directory points at tmp_path while the test runs)."""
    from solver import program_store

    old = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    monkeypatch.delenv(program_store.STORE_ENV, raising=False)
    yield tmp_path / program_store.SUBDIRECTORY
    jax.config.update("jax_compilation_cache_dir", old)


@pytest.fixture(scope="session")
def s3():
    """A real S3 API server (moto's server mode) on 127.0.0.1, this process pointed at it.

    Processes started while it runs (Dask workers, CLI drivers) inherit its
    endpoint and test credentials through the environment.
    """
    from s3server import S3Server

    server = S3Server()
    old = server.activate()
    try:
        yield server
    finally:
        S3Server.restore(old)
        server.stop()
