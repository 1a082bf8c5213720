"""Run code the moment a module is first imported, without importing it now.

Importing JAX takes about half a second and xarray (with pandas) about a
third of one.  Commands that never compute, and a run until its result is
built, should not wait for them; yet some settings must be in place before
the module's first use (JAX's configuration, xarray's dask check).
:func:`after_import` calls a function on the module right after its own
code has run, before the importer gets it back, or at once if it is
imported already; :func:`around_import` runs the module's own code (and
every import it makes) inside a context manager.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
from typing import Callable, ContextManager

__all__ = ["after_import", "around_import"]


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
    _hook(name).callbacks.append(callback)


def around_import(name: str, context: Callable[[], ContextManager]) -> None:
    """Run the first import of the top-level module ``name`` inside ``context()``.

    The context is entered just before the module's own code runs and left
    just after (before any :func:`after_import` callback), so it covers
    every submodule that the import brings in.  Nothing happens if the
    module is imported already.

    Args:
        name: a top-level module name.
        context: makes the context manager (called once, at the import).

    Raises:
        ValueError: ``name`` is a submodule's name.
    """
    if "." in name:
        raise ValueError(f"around_import takes a top-level module name, got {name!r}")
    if name not in sys.modules:
        _hook(name).contexts.append(context)


def _hook(name: str) -> "_ImportHook":
    """The import hook of ``name``, installed first on ``sys.meta_path`` if it is not there yet."""
    for finder in sys.meta_path:
        if isinstance(finder, _ImportHook) and finder.name == name:
            return finder
    finder = _ImportHook(name)
    sys.meta_path.insert(0, finder)
    return finder


class _ImportHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``name`` is first looked up, it wraps the real loader's ``exec_module``."""

    def __init__(self, name: str):
        self.name = name
        self.callbacks: list[Callable] = []
        self.contexts: list[Callable[[], ContextManager]] = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one shot; the real finders answer below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, callbacks, contexts = spec.loader, self.callbacks, self.contexts
        run_module = loader.exec_module

        def exec_module(module):
            with contextlib.ExitStack() as stack:
                for context in contexts:
                    stack.enter_context(context())
                run_module(module)
            del loader.exec_module  # the loader's own method again
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_module
        return spec
