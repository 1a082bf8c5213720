"""Reading YAML input files with line numbers, and validating what was read.

Every YAML reader of the project (models of all kinds, sweep files, cluster
files) goes through :func:`load_yaml`, so that they all agree on what a value
means and can all point at the line of a bad key.

The scalar rules are those of the YAML 1.2 core schema rather than PyYAML's
YAML 1.1 defaults, because the 1.1 rules surprise people writing numbers:

* ``1e-12``, ``1E5`` and ``2.5e3`` are floats (1.1 reads the first two as
  strings, since it wants a dot and a signed exponent);
* only ``true``/``false`` (any case style) are booleans; ``on``, ``off``,
  ``yes``, ``no``, ``y``, ``n`` stay strings, so a point named ``ON`` is a name;
* ``010`` is ten (not octal eight), ``0o10`` is octal and ``0x1F`` hex;
  ``1:20`` is a string, not the sexagesimal number 80;
* dates stay strings; ``~``, ``null`` and an empty value are ``None``.

Flow mappings with keys only, as in the talk's ``fixedpositions: { Ax, B }``,
read as ``{"Ax": None, "B": None}``.  Duplicate keys are an error (PyYAML keeps
the last one silently), and tags other than the core ones are refused, so
nothing in a file can ask for a Python object to be built.

Input limits (docs/reference/input-limits.md), checked before anything is built, so
that a hostile or mistaken file fails in milliseconds with a clear message
instead of eating the machine's memory or Python's stack:

* :data:`MAX_YAML_BYTES` — the size of a file;
* :data:`MAX_YAML_DEPTH` — how deeply lists and mappings nest;
* :data:`MAX_YAML_NODES` — the number of values and collections once every
  alias is expanded (an "alias bomb" of 9 levels of 10 aliases is 10**9).

The last two are counted on the parser's event stream, where an alias is a
single event whatever it stands for.  Each can be changed with the
environment variable ``MECHSWEEP_<NAME>`` (:func:`solver.errors.limit`).

Layout: the reading (the loader, :class:`Locator`, :func:`load_yaml` and the
limits) is :mod:`solver.models.yaml_load`, the validation of what was read
(``require_*``, :func:`check_keys`, :func:`did_you_mean`) is
:mod:`solver.models.yaml_checks`; every name is importable from here.
"""

from __future__ import annotations

from solver.models.yaml_checks import (check_keys, describe_value, did_you_mean, require_document,
                                       require_int, require_list, require_mapping, require_number,
                                       require_str)
from solver.models.yaml_load import (Locator, MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, format_path,
                                     load_yaml)

__all__ = [
    "Locator", "load_yaml", "format_path", "did_you_mean", "describe_value",
    "require_mapping", "check_keys", "require_number", "require_int",
    "require_list", "require_str", "require_document", "MAX_YAML_BYTES", "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
]


# Kept importable from this module, their old home.
from solver.models.yaml_checks import require_bool  # noqa: F401
from solver.models.yaml_load import LIBYAML_MAX_DEPTH, Path_, check_regular_file  # noqa: F401
