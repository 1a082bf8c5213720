"""xarray without importing ``dask.array`` for numpy data: 0.3 s off every process's first Dataset.

xarray asks, for every array it wraps, whether it is a dask array:
``isinstance(data, array_type("dask"))``.  The first time it asks it
imports ``dask.array`` to learn the class (xarray's
``namedarray.pycompat.DuckArrayModule``), 0.3 s on the 2-core machine
(``workflows/benchmarks/results/startup.txt``), although a process that
never imported ``dask.array`` cannot hold a dask array.

:func:`defer_dask_check` puts into xarray's cache of these modules an entry
whose answer is exact at every moment: no class (so ``isinstance`` is
False) while ``dask.array`` is not imported, and xarray's own entry, made
then, as soon as it is.  Processes that use dask (a sweep's driver and
workers) are unchanged: they import ``dask.array`` before, or while, they
make their first dask-backed array, and from then on xarray sees the real
class.  Where xarray's internals are not what this module expects (another
version), nothing is changed.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

__all__ = ["defer_dask_check"]


def defer_dask_check() -> bool:
    """Let xarray learn the dask array class only once ``dask.array`` is imported (see the module docstring).

    Returns:
        True if xarray's cache now holds the deferred entry (or already
        held it), False if xarray had asked already or its internals differ.
    """
    try:
        from xarray.namedarray import pycompat
    except ImportError:
        return False
    cache = getattr(pycompat, "_cached_duck_array_modules", None)
    base = getattr(pycompat, "DuckArrayModule", None)
    if not isinstance(cache, dict) or not isinstance(base, type):
        return False
    if isinstance(cache.get("dask"), _deferred_class(base)):
        return True
    if "dask" in cache:
        return False
    cache["dask"] = _deferred_class(base)(cache)
    return True


@functools.cache
def _deferred_class(base: type) -> type:
    """The deferred entry's class, a subclass of xarray's ``DuckArrayModule`` (one per base)."""
    class DaskWhenImported(base):
        """xarray's entry for dask, made from ``dask.array`` once that is imported; no class before."""

        def __init__(self, cache: dict) -> None:  # noqa: D107 - imports nothing, unlike the base
            self._cache = cache

        def _real(self):
            real = base("dask")
            self._cache["dask"] = real      # from now on xarray asks its own entry
            return real

        @property
        def type(self):
            return self._real().type if "dask.array" in sys.modules else ()

        @property
        def module(self):
            return self._real().module

        @property
        def version(self):
            return self._real().version

        @property
        def available(self):
            return "dask" in sys.modules or importlib.util.find_spec("dask") is not None

    return DaskWhenImported
