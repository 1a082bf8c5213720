"""YAML model files: ``solver.load(path)`` for every kind.

A model file's ``Kind`` picks the builder (docs/models.md):

* ``DAE`` — equations written out (:mod:`solver.models.dae_kind`);
* ``Lagrangian`` — coordinates, energies, constraints
  (:mod:`solver.models.lagrangian_kind`);
* ``Mechanism`` — the talk's parts format (:mod:`solver.models.mechanism_kind`,
  the physics in :mod:`solver.mechanics.mechanism`); the default when ``PartData`` is
  present.

Each kind module provides ``build(data, locator, path, overrides=None) ->
Model``.  :data:`KINDS` maps a kind name to its module; :func:`register_kind`
adds one.  Modules are imported when first needed, so a kind that is not
installed only fails for files that ask for it.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any, Callable, Mapping

from solver.errors import InputError
from solver.program_store import mark_dae
from solver.models.yamlio import Locator, load_yaml, require_document, require_mapping, require_str

from solver.models.model import Model, ValueRangeError, deep_merge
from solver.models.repeat import expand as expand_repeats
from solver.models.units import apply_units

__all__ = ["load", "load_data", "Model", "ValueRangeError", "KINDS", "register_kind",
           "deep_merge"]

# kind name -> module path (imported lazily) or a build callable
KINDS: dict[str, Any] = {
    "Mechanism": "solver.models.mechanism_kind",
    "Lagrangian": "solver.models.lagrangian_kind",
    "DAE": "solver.models.dae_kind",
}


def register_kind(name: str, builder: str | Callable) -> None:
    """Add or replace a kind.

    Args:
        name: the ``Kind`` value.
        builder: a module path whose ``build`` is used, or the callable
            ``build(data, locator, path, overrides=None) -> Model``.
    """
    KINDS[name] = builder


def _builder(kind: str, loc: Locator) -> Callable:
    target = KINDS[kind]
    if callable(target):
        return target
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name != target:
            raise
        raise loc.error(f"models of Kind '{kind}' are not available in this installation "
                        f"(module {target} is missing)", ("Kind",)) from None
    build = getattr(module, "build", None)
    if build is None:
        raise loc.error(f"models of Kind '{kind}' are not available: {target} has no build()",
                        ("Kind",))
    return build


def _kind_of(data: Mapping, loc: Locator) -> str:
    if "Kind" in data:
        return require_str(data["Kind"], ("Kind",), loc, choices=list(KINDS))
    if "PartData" in data:
        return "Mechanism"
    raise loc.error(f"missing required key 'Kind'; valid kinds: {', '.join(KINDS)} "
                    f"(Mechanism is assumed when PartData is present)", ())


def load_data(data: Any, locator: Locator, path: str | None = None,
              overrides: Mapping | None = None) -> Model:
    """Build a model from YAML data already read.

    Args:
        data: the file's data (a mapping).
        locator: its :class:`~solver.models.yamlio.Locator` (lines for messages).
        path: the file path (for messages and the Model).
        overrides: a nested mapping deep-merged into ``data`` first.

    Returns:
        :class:`Model`.

    Raises:
        InputError: anything wrong with the file, located.
    """
    # Never quotes the content: the file may be something else given by mistake.
    data = require_document(data, locator, "a mapping of top-level keys (Title, Kind, ...)")
    if overrides:
        overrides = require_mapping(overrides, (), None, what="a mapping of overrides")
        data = deep_merge(data, overrides)
    return _build(data, locator, path, overrides=overrides or None)


def _build(data: Any, locator: Locator, path: str | None, overrides=None) -> Model:
    """Build from merged data; the model keeps this function for with_overrides."""
    data = require_mapping(data, (), locator, what="a mapping of top-level keys (Title, Kind, ...)")
    raw = data
    # Repeats (``KEY for i in 1..N``, ``sum(...)``, ``{i+1}``) are expanded
    # before any kind reads the file; the model keeps the data as written, so
    # that overrides (a new N) are expanded again (solver/models/repeat.py).
    data = expand_repeats(data, locator)
    kind = _kind_of(data, locator)
    build = _builder(kind, locator)
    try:
        accepts = "overrides" in inspect.signature(build).parameters
    except (TypeError, ValueError):
        accepts = False
    model = build(data, locator, path, overrides=overrides) if accepts else \
        build(data, locator, path)
    if isinstance(KINDS[kind], str) and KINDS[kind].startswith("solver."):
        # The data names the compiled programs of mechsweep's own kinds in the
        # program store; a registered builder is code no key can see through.
        mark_dae(model.dae, kind, {"data": data, "overrides": overrides})
    model.data = raw
    model.expanded_data = data
    model.overrides = overrides
    model._builder = _build
    apply_units(model, locator)
    return model


def load(path: str | os.PathLike, overrides: Mapping | None = None) -> Model:
    """Read a YAML model file of any kind.

    Args:
        path: the file (or YAML text; see :func:`solver.models.yamlio.load_yaml`).
        overrides: a nested mapping deep-merged into the file's data before
            building (a sweep's ``Override``), e.g. ``{"ProblemData":
            {"tend": 5}}``.

    Returns:
        :class:`Model`.

    Raises:
        InputError: unreadable file, YAML errors, or an invalid model; the
            message names the file, key path, line, what was expected and
            the valid choices.
    """
    data, loc = load_yaml(path)
    if data is None:
        raise loc.error("the file is empty; a model needs at least Kind, ProblemData and "
                        "its equations")
    return load_data(data, loc, loc.file, overrides)
