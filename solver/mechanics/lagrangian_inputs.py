"""What a Lagrangian DAE takes besides L: generalised forces (point forces) and drivers.

:func:`point_force` turns a force at a point into generalised forces;
:class:`Driver` is one prescribed quantity ``φ_k(q) = f_k(t)``, read from the
``drivers=`` of :func:`solver.mechanics.lagrangian.lagrangian` into one more
constraint row.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.errors import InputError

__all__ = ["Driver", "point_force"]


# ---------------------------------------------------------------- small utils
def f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def flatten_items(out) -> jnp.ndarray:
    """List/tuple/array of constraint expressions -> one flat float vector."""
    if out is None:
        return jnp.zeros((0,), dtype=jnp.float64)
    items = list(out) if isinstance(out, (list, tuple)) else [out]
    if not items:
        return jnp.zeros((0,), dtype=jnp.float64)
    flat = [jnp.ravel(f64(c)) for c in items]
    if len(flat) == 1:
        return flat[0]
    # Sum of zero-padded pieces rather than concatenate: the derivative of
    # concatenate is a multi-output split, pad's is a plain slice.
    n = sum(f.shape[0] for f in flat)
    out, at = 0.0, 0
    for f in flat:
        out = out + jnp.pad(f, (at, n - at - f.shape[0]))
        at += f.shape[0]
    return out


def combine_forces(forces) -> Callable | None:
    """One callable summing the dicts of a callable or a list of callables."""
    if forces is None:
        return None
    if callable(forces):
        return forces
    if isinstance(forces, (list, tuple)) and all(callable(f) for f in forces):
        fs = list(forces)

        def total(t, q, qd, p):
            out: dict = {}
            for f in fs:
                for k, val in (f(t, q, qd, p) or {}).items():
                    out[k] = out[k] + f64(val) if k in out else f64(val)
            return out

        return total
    raise InputError(
        "forces must be a callable forces(t, q, qd, p) -> {coordinate: Q} or a list of "
        f"such callables (point_force(...) returns one), got {type(forces).__name__}",
        path="forces",
    )


# ---------------------------------------------------------------- point forces
def point_force(position: Callable, force) -> Callable:
    """Generalised force of a force applied at a point: ``Q = J_pᵀ F``.

    Args:
        position: ``position(t, q, p)`` -> world position of the point of
            application (an array of shape (d,)), a function of the
            coordinate dict ``q``; or several points at once, shape (k, d)
            (one vjp for all, so a smaller traced residual).
        force: the applied force(s), of the same shape as the position:
            a constant array or a callable ``force(t, q, qd, p)`` (e.g. a body-fixed
            direction rotated to the world, times a magnitude parameter).

    Returns:
        A callable ``(t, q, qd, p) -> {coordinate name: Q array}`` usable as
        (an element of) the ``forces`` argument of :func:`lagrangian`.
        ``J_p = ∂position/∂q`` is applied by a ``jax.vjp``, never formed.
    """
    if not callable(position):
        raise InputError("point_force: position must be a callable position(t, q, p)")

    def generalised(t, q, qd, p):
        F = f64(force(t, q, qd, p)) if callable(force) else f64(force)
        pos, pullback = jax.vjp(lambda q_: f64(position(t, q_, p)), q)
        if F.shape != pos.shape:
            raise InputError(
                f"point_force: the force has shape {F.shape} but the point's position has "
                f"shape {pos.shape}; they must match"
            )
        return pullback(F)[0]

    return generalised


# ---------------------------------------------------------------- drivers
@dataclasses.dataclass(frozen=True)
class Driver:
    """One driving constraint of a :class:`LagrangianDAE` (inverse dynamics).

    The driver prescribes ``quantity(t, q, p) = value(t, p)``; the DAE holds
    the row ``quantity − value`` in its constraint vector, at :attr:`index`
    of the multiplier, and the generalised force the drive applies along
    the quantity is ``−λ[index]`` (see the module docstring for the sign).

    Attributes:
        name: the driver's name (an identifier; outputs are named after it).
        index: its row in the multiplier vector (after the model's own
            constraints).
        quantity: the driven quantity's label: the coordinate (``theta``,
            ``A[0]``) or, for a callable, the driver's name.
        units: units of its generalised force, or None where unknown.
        quantity_fn: ``quantity_fn(t, q, p)`` -> scalar.
        value_fn: ``value_fn(t, p)`` -> scalar, the prescribed value.
    """

    name: str
    index: int
    quantity: str
    units: str | None
    quantity_fn: Callable
    value_fn: Callable

    def residual(self, t, q, p):
        """``quantity(t, q, p) − value(t, p)``: zero when the drive holds."""
        return jnp.reshape(f64(self.quantity_fn(t, q, p)), ()) - jnp.reshape(f64(self.value_fn(t, p)), ())


# A generalised force along a coordinate of these units has these units.
_FORCE_UNITS = {"rad": "N m", "m": "N"}


def _coordinate_quantity(spec: str, coords, where: str):
    """``theta`` or ``A[0]`` -> (label, quantity_fn, base coordinate).

    Raises:
        InputError: not a scalar coordinate or a component of one.
    """
    by_name = {c.name: c for c in coords}
    text = spec.strip()
    base, index = text, None
    if text.endswith("]") and "[" in text:
        base, _, idx = text[:-1].partition("[")
        base = base.strip()
        if not idx.strip().isdigit():
            base = text
        else:
            index = int(idx)
    scalars = [c.name for c in coords if c.size == 1]
    vectors = [c for c in coords if c.size > 1]
    valid = ", ".join(scalars + [f"{vectors[0].name}[0]"] if vectors else scalars) or "(none)"
    if base not in by_name:
        raise InputError(f"{where}: {spec!r} is not a coordinate; give a scalar coordinate or a "
                         f"component (valid: {valid}), or a callable quantity(t, q, p)",
                         path="drivers")
    c = by_name[base]
    if index is None and c.size > 1:
        raise InputError(f"{where}: {spec!r} is a {c.size}-vector coordinate; a driver prescribes one "
                         f"scalar: name a component such as {base}[0]", path="drivers")
    if index is not None and index >= c.size:
        raise InputError(f"{where}: {spec!r}: {base} has {c.size} component(s); valid subscripts "
                         f"are 0 to {c.size - 1}", path="drivers")
    if index is None:
        return base, (lambda t, q, p: q[base]), base
    return f"{base}[{index}]", (lambda t, q, p: jnp.ravel(q[base])[index]), base


def read_drivers(drivers, coords, first: int, units: Mapping) -> tuple:
    """The ``drivers=`` argument of :func:`lagrangian` -> tuple of :class:`Driver`.

    Args:
        drivers: mapping name -> ``(quantity, value)`` or ``(quantity, value, units)``.
        coords: the coordinates (:class:`solver.dae.problem.Variable`).
        first: the multiplier row of the first driver (the number of the
            model's own constraints).
        units: the DAE's units (a driven coordinate's unit gives the force's).

    Raises:
        InputError: a malformed entry (the message names the driver).
    """
    if drivers is None:
        return ()
    if not isinstance(drivers, Mapping):
        raise InputError("drivers must be a mapping {name: (quantity, value)}, e.g. "
                         "{'theta': ('theta', lambda t, p: 0.5 * jnp.sin(2 * t))}", path="drivers")
    out = []
    for k, (name, spec) in enumerate(drivers.items()):
        where = f"drivers[{name!r}]"
        if not isinstance(name, str) or not name.isidentifier():
            raise InputError(f"{where}: a driver's name must be an identifier (its outputs are named "
                             f"after it)", path="drivers")
        if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
            raise InputError(f"{where}: expected (quantity, value) or (quantity, value, units): "
                             "quantity a coordinate name or a callable quantity(t, q, p), value a "
                             f"callable value(t, p) or a number; got {spec!r}", path="drivers")
        quantity, value = spec[0], spec[1]
        unit = spec[2] if len(spec) == 3 else None
        if isinstance(quantity, str):
            label, qfn, base = _coordinate_quantity(quantity, coords, where)
            if unit is None and units.get(base):
                unit = _FORCE_UNITS.get(units[base], f"J/{units[base]}")
        elif callable(quantity):
            label, qfn = name, quantity
        else:
            raise InputError(f"{where}: the quantity must be a coordinate name or a callable "
                             f"quantity(t, q, p), got {type(quantity).__name__}", path="drivers")
        if callable(value):
            vfn = value
        elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            held = float(value)
            vfn = lambda t, p, held=held: jnp.float64(held)
        else:
            raise InputError(f"{where}: the value must be a callable value(t, p) or a number, got "
                             f"{type(value).__name__}", path="drivers")
        if unit is not None and not isinstance(unit, str):
            raise InputError(f"{where}: units must be a string such as 'N m', got {unit!r}",
                             path="drivers")
        out.append(Driver(name, first + k, label, unit, qfn, vfn))
    return tuple(out)
