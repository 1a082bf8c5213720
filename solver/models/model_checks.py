"""File-format helpers every model kind shares: titles, sizes and limits, value keys, located analysis errors.

Sizes of declared variables and the unknowns limit, the keys of initial
values (``NAME``, ``NAME[i]``, ``NAME'``), the output size check, and the
wording of a structural analysis that fails on a model file.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from solver.dae.problem import DAEDefinitionError
from solver.dae.sparsity import UnsupportedPrimitiveError
from solver.dae.structure import StructurallySingularError
from solver.errors import InputError, MAX_OUTPUT_BYTES, format_bytes, how_to_raise, limit, size_limit_message
from solver.models.expr import check_name, evaluate_constant, parse
from solver.models.model_readers import DEFAULT_SAMPLES
from solver.models.yamlio import Locator, format_path, require_str

__all__ = ["MAX_UNKNOWNS", "ValueKey", "analyse", "build_error", "check_key_order", "check_output_size",
           "order_limits", "output_times", "parse_value_key", "read_sizes", "read_title", "size_names",
           "unknowns_problem", "values_per_time"]


# Input limit (docs/reference/input-limits.md); the output size limit is
# solver.errors.MAX_OUTPUT_BYTES.
MAX_UNKNOWNS = 100_000
"""Most scalar unknowns (the sum of the declared sizes) of a model read from
YAML; the structural analysis and the Taylor engine grow faster than linearly
with it, and a typo in a size must not allocate the machine's memory.
``MECHSWEEP_MAX_UNKNOWNS`` overrides it."""


# ------------------------------------------------------------------ file-format helpers
# NAME, NAME[i], NAME', NAME[i]', NAME'[i] (the last is normalised to NAME[i]')
_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[\s*(\d+)\s*\])?\s*('*)\s*"
                  r"(?:\[\s*(\d+)\s*\])?\s*$")


def read_title(data: Mapping, loc: Locator, path: str | None) -> str:
    """``Title`` (a string), or the file name without extension."""
    if "Title" in data:
        return str(require_str(data["Title"], ("Title",), loc)).strip()
    return Path(path).stem if path else "model"


def size_names(raw: Mapping) -> set:
    """Parameter names used in size expressions of a ``{name: size}`` mapping."""
    names: set = set()
    for value in raw.values():
        if isinstance(value, str):
            try:
                names |= parse(value).names()
            except InputError:
                pass  # reported with its location by read_sizes
    return names


def read_sizes(raw: Any, loc: Locator, key: str, what: str, params: Mapping,
               taken: Mapping[str, str]) -> dict:
    """``[a, b]`` or ``{a: 3, b: 1, c: 3*N}`` -> name -> size (None = scalar).

    A size of 1 means a scalar; a size may be an expression of parameters
    (which are then structural: fixed at load time).

    Raises:
        InputError: not a list/mapping, empty, bad or clashing names, sizes
            that are not whole numbers >= 1, or more than :data:`MAX_UNKNOWNS`
            scalars in all.
    """
    if isinstance(raw, list):
        items = [(require_str(v, (key, i), loc), None, (key, i)) for i, v in enumerate(raw)]
    elif isinstance(raw, Mapping):
        items = [(k, v, (key, k)) for k, v in raw.items()]
    else:
        raise loc.error(f"expected a list of {what} names or a mapping {{name: size}}, got "
                        f"{_describe(raw)}", (key,))
    if not items:
        raise loc.error(f"expected at least one {what}", (key,))
    out: dict = {}
    total = 0
    for name, size, path in items:
        where = dict(file=loc.file, path=format_path(path), line=loc.nearest(path))
        check_name(name, what, **where)
        if name in taken:
            raise InputError(f"'{name}' is already {taken[name]}; use another name", **where)
        if name in out:
            raise InputError(f"{what} '{name}' is declared twice", **where)
        if size is None:
            out[name] = None
            total += 1
            continue
        value = evaluate_constant(size, params, **where)
        if np.ndim(value) != 0 or not float(value).is_integer() or value < 1:
            raise InputError(f"the size of {what} '{name}' must be a whole number >= 1 "
                             f"(1 = scalar), got {size!r}" +
                             (f" = {value}" if isinstance(size, str) else ""), **where)
        out[name] = None if int(value) == 1 else int(value)
        total += int(value)
        problem = unknowns_problem(total, what)
        if problem:
            raise InputError(problem, **where)
    return out


def unknowns_problem(total: int, what: str) -> str | None:
    """Why ``total`` declared scalars are too many, or ``None`` within :data:`MAX_UNKNOWNS`."""
    cap = limit("MAX_UNKNOWNS", MAX_UNKNOWNS)
    if total <= cap:
        return None
    return (f"the {what} sizes add up to {total} scalar unknowns; one state vector alone would "
            f"need {format_bytes(8.0 * total)} and the solver's tables grow faster than that; "
            f"the limit is {cap} (MAX_UNKNOWNS); lower the size, or "
            f"{how_to_raise('MAX_UNKNOWNS')}")


def values_per_time(dae) -> int:
    """About how many float64 numbers one output time of a run stores.

    Each variable's components and their derivatives below the leading order
    (``NAME``, ``NAME_d1``...), the constraint residual, the energy and the
    balance outputs (:mod:`solver.results.balance`).
    """
    d = np.asarray(dae.structure.d, dtype=int)
    from solver.results.balance import balance_layout

    per = sum(v.size * max(1, int(d[v.offset:v.offset + v.size].max(initial=0)))
              for v in dae.variables)
    layout, coords = balance_layout(dae)
    per += sum(len(coords.get(dims[-1], [0])) for dims, _ in layout.values())
    return per + 2


def output_times(t0: float, tend: float, samples: int | None, dt: float | None) -> int:
    """The number of output times of ``samples`` or ``dt`` (as :meth:`Model.t_eval`)."""
    if dt is not None:
        return int(math.floor((tend - t0) / dt * (1 + 1e-12))) + 1
    return int(samples if samples is not None else DEFAULT_SAMPLES)


def check_output_size(model) -> None:
    """Refuse a run whose outputs would not fit in memory (before any allocation).

    The estimate is output times x :func:`values_per_time` x 8 bytes, against
    :data:`solver.errors.MAX_OUTPUT_BYTES`.

    Args:
        model: the :class:`solver.models.model.Model`.

    Raises:
        InputError: over the limit, located at ``ProblemData.samples`` (or
            ``dt``), with the estimate, the limit and how to raise it.
    """
    n = output_times(model.t0, model.tend, model.samples, model.dt)
    per = values_per_time(model.dae)
    key = "dt" if model.dt is not None else "samples"
    every = f" (every {model.dt:g} from {model.t0:g} to {model.tend:g})" if key == "dt" else ""
    message = size_limit_message(
        "MAX_OUTPUT_BYTES", MAX_OUTPUT_BYTES, 8.0 * n * per,
        f"{n} output times{every} x {per} values each (8 bytes a value)",
        "lower samples" if key == "samples" else "raise dt")
    if message:
        raise model.locator.error(message, ("ProblemData", key))


def _describe(value):
    from solver.models.yamlio import describe_value

    return describe_value(value)


class ValueKey:
    """An initial-value key: variable, component (or None), derivative order."""

    def __init__(self, name: str, index: int | None, order: int):
        self.name, self.index, self.order = name, index, order

    def text(self) -> str:
        """The key in :func:`solver.solve` syntax: ``q[2]'``."""
        return self.name + (f"[{self.index}]" if self.index is not None else "") + "'" * self.order


def parse_value_key(key: Any, sizes: Mapping[str, int | None], loc: Locator, path: tuple,
                    what: str = "variable") -> ValueKey:
    """Read a key such as ``x``, ``x'``, ``q[2]``, ``q[2]'`` or ``q'[2]``.

    Raises:
        InputError: unreadable key, unknown variable, index out of range.
    """
    m = _KEY.match(str(key))
    if not m or (m.group(2) and m.group(4)):
        raise loc.error(f"cannot read '{key}' as a {what} value name; write NAME, NAME' "
                        f"(derivative) or NAME[i] / NAME[i]' (vector component, from 0)", path)
    name, idx = m.group(1), m.group(2) or m.group(4)
    if name not in sizes:
        from solver.models.yamlio import did_you_mean

        guess = did_you_mean(name, sizes)
        raise loc.error(f"unknown {what} '{name}'; the {what}s are {', '.join(sizes)}"
                        + (f"; did you mean '{guess}'?" if guess else ""), path)
    index = None
    if idx is not None:
        size = sizes[name] or 1
        index = int(idx)
        if sizes[name] is None or index >= size:
            raise loc.error(f"'{key}': {name} has {size} component(s); valid subscripts are "
                            f"0 to {size - 1}" if sizes[name] else
                            f"'{key}': {name} is a scalar and takes no subscript", path)
    return ValueKey(name, index, len(m.group(3)))


def build_error(err: Exception, loc: Locator, path: tuple, note: str = "") -> InputError:
    """A DAE-construction or structural-analysis error as a located InputError."""
    if isinstance(err, InputError):
        return err if err.file else err.located(file=loc.file, path=format_path(path),
                                                line=loc.nearest(path))
    if isinstance(err, StructurallySingularError):
        message = f"the equations are structurally singular: {err}"
    elif isinstance(err, UnsupportedPrimitiveError):
        message = f"the equations use an operation the solver cannot differentiate: {err}"
    else:
        message = f"the equations do not define a valid DAE: {err}"
    return loc.error(message + note, path)


def analyse(dae, loc: Locator, path: tuple, note: str = ""):
    """``dae.structure``, with solver errors turned into located InputErrors.

    Args:
        dae: the DAE.
        loc: the file's locator.
        path: the key path to blame.
        note: appended to the message (e.g. how equation labels map to keys).
    """
    try:
        return dae.structure
    except (StructurallySingularError, UnsupportedPrimitiveError, DAEDefinitionError) as err:
        raise build_error(err, loc, path, note) from None


def order_limits(dae, structure) -> dict:
    """(variable, component) -> d (the state holds derivatives below d)."""
    out = {}
    for v in dae.variables:
        for e in range(v.size):
            out[(v.name, e)] = int(structure.d[v.offset + e])
    return out


def check_key_order(key: ValueKey, dae, structure, loc: Locator, path: tuple,
                    fixed: bool) -> None:
    """Refuse a value above the leading derivative, or a fixed non-state entry.

    Raises:
        InputError: the message says which orders are state.
    """
    v = dae.var_index[key.name]
    comps = [key.index] if key.index is not None else range(v.size)
    d = max(int(structure.d[v.offset + e]) for e in comps)
    label = key.text()
    if fixed and key.order >= d:
        raise loc.error(f"cannot fix '{label}': the state holds derivatives of {key.name} "
                        f"below order {d} ({_orders(key.name, d)}); the equations determine "
                        f"the rest", path)
    if key.order > d:
        raise loc.error(f"'{label}' is of derivative order {key.order}, above {key.name}'s "
                        f"leading order {d}; give {_orders(key.name, d + 1)}", path)


def _orders(name, d):
    return ", ".join(name + "'" * k for k in range(d)) if d else "none"
