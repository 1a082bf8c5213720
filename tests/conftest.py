"""Test-wide settings: float64 JAX and a persistent compilation cache.

The cache only saves time on repeated runs on one machine (a fresh machine
compiles everything once); results do not depend on it.
"""

import os

import jax

jax.config.update("jax_enable_x64", True)
_cache = os.environ.get("MECHSWEEP_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "mechsweep", "jax-tests"))
try:
    os.makedirs(_cache, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", _cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
except OSError:  # read-only home: run without the cache
    pass
