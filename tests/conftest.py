"""Test-wide settings: float64 JAX and a persistent compilation cache (``sweep.run.configure_jax``).

The cache only saves time on repeated runs on one machine (a fresh machine
compiles everything once); results do not depend on it.
"""

import gc
import os

import jax
import pytest

from sweep.run import configure_jax

jax.config.update("jax_enable_x64", True)  # also where the cache cannot be set up
_cache = os.environ.get("MECHSWEEP_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "mechsweep", "jax-tests"))
try:
    configure_jax(_cache)  # the CLI's and the workers' settings, small programs cached too
except OSError:  # read-only home: run without the cache
    pass


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
