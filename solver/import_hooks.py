"""Run code the moment a module is first imported, without importing it now.

Importing JAX takes about half a second and xarray (with pandas) about a
third of one.  Commands that never compute, and a run until its result is
built, should not wait for them; yet some settings must be in place before
the module's first use (JAX's configuration, xarray's dask check).
:func:`after_import` calls a function on the module right after its own
code has run, before the importer gets it back, or at once if it is
imported already.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable

__all__ = ["after_import"]


def after_import(name: str, callback: Callable) -> None:
    """Call ``callback(module)`` once the top-level module ``name`` is imported (now, if it is already).

    Callbacks given for one module before its import run in the order
    given.

    Args:
        name: a top-level module name (``"jax"``, ``"xarray"``).
        callback: called with the module object.

    Raises:
        ValueError: ``name`` is a submodule's name.
    """
    if "." in name:
        raise ValueError(f"after_import takes a top-level module name, got {name!r}")
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _AfterImport) and finder.name == name:
            finder.callbacks.append(callback)
            return
    sys.meta_path.insert(0, _AfterImport(name, [callback]))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``name`` is first looked up, it wraps the real loader's ``exec_module``."""

    def __init__(self, name: str, callbacks: list):
        self.name = name
        self.callbacks = callbacks

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one shot; the real finders answer below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, callbacks = spec.loader, self.callbacks
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            del loader.exec_module  # the loader's own method again
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_module
        return spec
