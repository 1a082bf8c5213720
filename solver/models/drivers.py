"""``Drivers``: prescribed motions (inverse dynamics) of the Lagrangian and Mechanism kinds.

::

    Drivers:
      theta: 0.5*sin(2*t)                  # driven quantity: its value f(t)
      phi: {value: phi0 + w*t, units: N m} # mapping form: the drive force's units

The key names what is driven; each kind says what a key may be (a scalar
coordinate, a component such as ``Ax``, a scalar ``Let`` name) and resolves
it.  The value is an expression of ``t`` and the parameters only.  Each
driver becomes the constraint ``key(q) − value(t) = 0`` with its own
multiplier (:func:`solver.mechanics.lagrangian.lagrangian`, ``drivers=``), and the
results hold ``torque_{key}``, the generalised force the drive applies.

This module reads what the kinds share: the entries, their value
expressions (checked at load time: a scalar at t0 and the default
parameters), the traced value functions, and the refusal of a driven
quantity's fixed initial values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

import jax.numpy as jnp

from solver.errors import InputError
from solver.models.expr import Expr, ExprError, parse
from solver.models.yamlio import Locator, check_keys, format_path, require_mapping, require_str

from solver.models.scope import BaseScope

__all__ = ["DriverEntry", "ENTRY_KEYS", "read_entries", "value_fn", "refuse_fixed"]

#: Keys of the mapping form of an entry.
ENTRY_KEYS = ("value", "units")


@dataclasses.dataclass
class DriverEntry:
    """One entry of ``Drivers``.

    Attributes:
        key: the driven quantity's name as written (also the driver's name).
        value: the prescribed value, an expression of t and the parameters.
        units: the units of the drive's generalised force, if declared.
        path: the entry's key path (``("Drivers", key)``).
    """

    key: str
    value: Expr
    units: str | None
    path: tuple


class _TimeScope(BaseScope):
    """t and the parameters: what a driver's value may use."""

    def derivative(self, thunk, order):
        """Refused: a value is written as a function of t (no primes needed)."""
        raise ExprError("a driver's value is a function of t and the parameters; write it without "
                        "primes")


class _NumericTimeScope(_TimeScope):
    """:class:`_TimeScope` over numbers, evaluated in numpy: a check at the start time, not a
    jax program of its own for each operation."""

    numeric = True


def read_entries(raw: Any, loc: Locator, kind: str, params: Mapping, t0: float) -> list:
    """Read ``Drivers``: ``{key: expression}`` or ``{key: {value: ..., units: ...}}``.

    Args:
        raw: the value of ``Drivers`` (a mapping or null).
        loc: the file's locator.
        kind: the model kind, for messages (``Lagrangian``, ``Mechanism``).
        params: every parameter's numeric default (the value is checked there).
        t0: the start time (the value is checked there).

    Returns:
        list of :class:`DriverEntry` in file order.

    Raises:
        InputError: not a mapping, a key that is not a name, a malformed or
            non-scalar value (the expression module's message, located).
    """
    drivers = require_mapping(raw, ("Drivers",), loc, allow_none=True,
                              what="a mapping {driven quantity: value}, e.g. "
                                   "{theta: 0.5*sin(2*t)}")
    out = []
    for key, entry in drivers.items():
        kp = ("Drivers", key)
        if not isinstance(key, str) or not key.isidentifier():
            raise loc.error(f"'{key}' is not a name; a driver's key names the driven quantity (in "
                            f"Kind: {kind}: " + ("a scalar coordinate, a component such as Ax, or a "
                                                 "scalar Let name" if kind == "Lagrangian" else
                                                 "a component of a moving point such as Ax")
                            + ") and its output torque_KEY", kp)
        units = None
        vp = kp
        if isinstance(entry, Mapping):
            check_keys(entry, ENTRY_KEYS, ("value",), kp, loc)
            if entry.get("units") is not None:
                units = require_str(entry["units"], kp + ("units",), loc).strip()
            entry, vp = entry["value"], kp + ("value",)
        expr = parse(entry, file=loc.file, path=format_path(vp), line=loc.nearest(vp))
        scope = _NumericTimeScope(np.float64(t0), {k: np.asarray(v, dtype=np.float64) for k, v in params.items()},
                                  [])
        value = np.asarray(expr.evaluate(scope), dtype=float)
        if value.size != 1:
            raise loc.error(f"expected a scalar expression of t and the parameters, got an array "
                            f"of shape {value.shape} ({expr.text})", vp)
        if not np.isfinite(value).all():
            raise loc.error(f"{expr.text!r} is not finite at t = {t0:g} and the default "
                            "parameters", vp)
        out.append(DriverEntry(key, expr, units, kp))
    return out


def value_fn(entry: DriverEntry, resolve: Callable[[Mapping], Mapping]) -> Callable:
    """The traced ``value(t, p)`` of an entry.

    Args:
        entry: the entry.
        resolve: free (traced) parameters -> every parameter's value
            (:meth:`solver.models.scope.ParamInfo.resolve`).

    Returns:
        callable ``(t, p) -> scalar`` for :func:`solver.mechanics.lagrangian.lagrangian`'s
        ``drivers``.
    """
    def value(t, p):
        return jnp.reshape(entry.value.evaluate(_TimeScope(t, resolve(p), [])), ())

    return value


def refuse_fixed(driven: Mapping, target, loc: Locator, path: tuple, section: str) -> None:
    """Refuse a fixed initial value of a driven quantity.

    The driver sets the quantity and its velocity at t0, so fixing them too
    over-determines the initial point.

    Args:
        driven: target -> driver key, for every driven coordinate component.
        target: the fixed entry's (coordinate, component) pair; a component
            of None means the whole coordinate.
        loc: the file's locator.
        path: the fixed entry's key path.
        section: ``fixedpositions`` or ``velocities``.

    Raises:
        InputError: the entry covers a driven quantity.
    """
    name, idx = target
    hit = [(k, i) for (n, i), k in driven.items()
           if n == name and (idx is None or i is None or i == idx)]
    if not hit:
        return
    key, i = hit[0]
    given = "values given there are fixed" if section == "velocities" else \
        "a value in ProblemData.positions is only a guess"
    if idx is None and i is not None:
        # A whole point fixed, one of its components driven.
        raise loc.error(f"'{path[-1]}' includes {key}, which is driven (Drivers.{key}): its initial "
                        f"value and velocity come from the driver, so it cannot be fixed; in "
                        f"ProblemData.{section} give the other components one by one instead",
                        path)
    raise loc.error(f"'{path[-1]}' is driven (Drivers.{key}): its initial value and velocity come "
                    f"from the driver, so it cannot be fixed; remove it from ProblemData.{section} "
                    f"({given})", path)
