"""This process's JAX set-up: float64 and the persistent compilation cache (with the program store beside it).

A leaf module, so that a command that only solves (``mechsweep simulate``)
sets JAX up without importing the sweep pipeline (Dask, Zarr); the sweep's
workers use the same functions (:mod:`sweep.run.worker` re-exports them).
"""

from __future__ import annotations

import os
import sys

__all__ = ["default_jax_cache_dir", "CACHE_MIN_COMPILE_SECONDS", "configure_jax"]


def default_jax_cache_dir() -> str:
    """The persistent JAX compilation cache used by workers.

    Returns:
        ``$MECHSWEEP_JAX_CACHE`` if set and not empty, else ``~/.cache/mechsweep/jax``.
    """
    # An empty value (``MECHSWEEP_JAX_CACHE= mechsweep …``) means "not set", as for most tools' variables.
    return (os.environ.get("MECHSWEEP_JAX_CACHE")
            or os.path.join(os.path.expanduser("~"), ".cache", "mechsweep", "jax"))


_configured: str | None = None


# Programs that compile faster than this (seconds) are not kept in the
# persistent cache.  JAX's default, 1 s, would compile every small program
# (initial values, IPOPT's derivatives, the residual and energy series) again
# in every process, which costs more than reading it from the cache.
CACHE_MIN_COMPILE_SECONDS = 0.0


def configure_jax(cache_dir: str) -> None:
    """Set float64 and the persistent compilation cache for this process, once.

    Every compiled program goes into the cache (:data:`CACHE_MIN_COMPILE_SECONDS`).
    Works whether or not JAX is already imported: the environment variables
    cover a later import (so a worker that never touches JAX never pays for
    importing it), ``jax.config.update`` covers an earlier one.

    Args:
        cache_dir: directory of the persistent compilation cache (created).

    Raises:
        OSError: the directory cannot be created.
    """
    global _configured
    if _configured == cache_dir:
        return
    os.makedirs(cache_dir, exist_ok=True)
    os.environ["JAX_ENABLE_X64"] = "1"
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(CACHE_MIN_COMPILE_SECONDS)
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
    _configured = cache_dir
