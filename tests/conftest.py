"""Test-wide settings: float64 JAX, a persistent compilation cache (``sweep.run.configure_jax``)
and XLA's machine-code optimisation off.

The cache only saves time on repeated runs on one machine (a fresh machine
compiles everything once); results do not depend on it.

**LLVM at -O0.**  The suite compiles hundreds of programs and runs each for
moments, so LLVM's optimisation of the machine code is most of what it
waits for: from an empty compile cache the suite took 19:38 with it and
14:24 without (XLA's compile 1,231 -> 631 CPU-seconds; warm, 8:54 against
8:05-8:32), while a run of RSCR's compiled step is 6x slower
(``workflows/benchmarks/results/suite_compile.txt``).  The level is LLVM's (XLA:CPU
hands it to LLVM's pass pipeline and code generator); XLA's HLO passes
(fusion, simplification, the loops compiled whole) run as for users, so the
kernels are the same and only their machine code is less optimised, which
can change results by rounding (e.g. fused multiply-adds), not what is
computed.
``tests/test_optimisation_level.py`` checks that the optimised build gives
the same numbers, in a child process that compiles as users do.  Set
``MECHSWEEP_TEST_XLA_OPT=full`` (or name ``--xla_backend_optimization_level``
in ``XLA_FLAGS``) to run the suite at XLA's default optimisation.

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

TEST_OPT_FLAG = "--xla_backend_optimization_level=0"
if ("xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")
        and os.environ.get("MECHSWEEP_TEST_XLA_OPT", "") != "full"):
    # Before the backend starts (XLA reads XLA_FLAGS once); child processes inherit it.
    os.environ["XLA_FLAGS"] = f"{TEST_OPT_FLAG} {os.environ.get('XLA_FLAGS', '')}".strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from sweep.run import configure_jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # also where the cache cannot be set up
_cache = os.environ.get("MECHSWEEP_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "mechsweep", "jax-tests"))
try:
    configure_jax(_cache)  # the CLI's and the workers' settings, small programs cached too
except OSError:  # read-only home: run without the cache
    pass


FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
UNKNOWN_FILE_SECONDS = 30.0


def pytest_collection_modifyitems(session, config, items):
    """Order the test files longest first (tests keep their order within a file)."""
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
