"""Lagrangian facility: L, C, R, Q -> an Euler–Lagrange DAE, built by JAX AD.

From a Lagrangian ``L(t, q, q', p)``, holonomic (possibly rheonomic)
constraints ``C(t, q, p) = 0``, a Rayleigh dissipation ``R(t, q, q', p)`` and
generalised forces ``Q(t, q, q', p)`` this module builds the DAE (docs/method.md §7)

    d/dt ∂L/∂q' − ∂L/∂q + ∂R/∂q' + Gᵀλ − Q = 0      (one item per coordinate)
    C(t, q) = 0                                     (one item, all constraints)

with ``G = ∂C/∂q``.  Nothing is differentiated by hand or symbolically: the
residual is a composition of ``jax.grad`` / ``jax.jvp`` / ``jax.vjp`` calls that
is traced (once, by :class:`solver.dae.problem.DAE`) to a jaxpr of ordinary primitives.
``d/dt ∂L/∂q'`` is the ``jvp`` of ``∂L/∂q'(t, q, q')`` along ``(1, q', q'')``.

Sign conventions (used by every inspection method below):

* ``M = ∂²L/∂q'²`` (positive definite for a physical kinetic energy).
* ``bias`` is the Euler–Lagrange expression with ``q'' = 0`` and ``λ = 0``::

      bias = ∂²L/∂q'∂q · q' + ∂²L/∂q'∂t − ∂L/∂q + ∂R/∂q' − Q

  so the equations of motion read ``M q'' + bias + Gᵀλ = 0``.
* The multipliers enter with a plus sign, so the generalised force the
  constraints exert on the system is ``−Gᵀλ`` (:meth:`constraint_forces`).
  For the pendulum ``C = x² + y² − ℓ²`` at rest below the pivot, ``λ > 0``.
* ``energy = q'·∂L/∂q' − L`` (the Jacobi integral; equals T + V for a natural
  Lagrangian ``L = T − V`` with T quadratic in q').  It is conserved when L
  and C do not depend on t and R = Q = 0.
* Drivers (inverse dynamics): each driver ``k`` prescribes a scalar
  ``φ_k(q) = f_k(t)`` and becomes one more constraint row
  ``φ_k(q) − f_k(t) = 0``, after the model's own constraints, with its own
  multiplier λ_k.  Its generalised force along φ_k (the torque or force the
  drive must apply) is ``−λ_k``: the constraint force is ``−λ_k ∇φ_k``,
  whose virtual work is ``−λ_k δφ_k`` (:attr:`LagrangianDAE.drivers`).  The
  energy does not include the drive, so ``dE/dt = −λ_k f_k'(t)`` (the
  drive's power) when nothing else acts.

The module object is itself callable, so ``solver.lagrangian(...)`` works
whether ``solver`` exposes the module or the function.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core

from solver.dae.problem import DAE, DAEDefinitionError, _parse_variables
from solver.errors import InputError
from solver.mechanics.stops import stop_events
from solver.numerics.kkt import KKTBlocks, MassBlocks, kkt_factor, kkt_solve

__all__ = ["lagrangian", "LagrangianDAE", "Driver", "MassBlocks", "point_force", "solve_kkt"]


# ---------------------------------------------------------------- small utils
def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def _flatten_items(out) -> jnp.ndarray:
    """List/tuple/array of constraint expressions -> one flat float vector."""
    if out is None:
        return jnp.zeros((0,), dtype=jnp.float64)
    items = list(out) if isinstance(out, (list, tuple)) else [out]
    if not items:
        return jnp.zeros((0,), dtype=jnp.float64)
    flat = [jnp.ravel(_f64(c)) for c in items]
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


def _combine_forces(forces) -> Callable | None:
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
                    out[k] = out[k] + _f64(val) if k in out else _f64(val)
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
        F = _f64(force(t, q, qd, p)) if callable(force) else _f64(force)
        pos, pullback = jax.vjp(lambda q_: _f64(position(t, q_, p)), q)
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
        return jnp.reshape(_f64(self.quantity_fn(t, q, p)), ()) - jnp.reshape(_f64(self.value_fn(t, p)), ())


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


def _read_drivers(drivers, coords, first: int, units: Mapping) -> tuple:
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


# ---------------------------------------------------------------- KKT solves
def _normalise_blocks(M_blocks, n_hint: int | None = None):
    """-> list of (index (nb, b) int array or None for contiguous, blocks)."""
    if isinstance(M_blocks, (list, tuple)) and M_blocks and isinstance(M_blocks[0], (list, tuple)):
        groups = [(np.asarray(idx, dtype=np.int64), _f64(B)) for idx, B in M_blocks]
    else:
        B = _f64(M_blocks)
        if B.ndim == 2:  # a single dense block
            B = B[None]
        groups = [(None, B)]
    for idx, B in groups:
        if B.ndim != 3 or B.shape[1] != B.shape[2]:
            raise InputError(f"solve_kkt: mass blocks must have shape (nb, b, b), got {B.shape}")
        if idx is not None and idx.shape != B.shape[:2]:
            raise InputError(
                f"solve_kkt: block index has shape {idx.shape} but the blocks have shape {B.shape}"
            )
    return groups


def solve_kkt(M_blocks, G, rhs):
    """Solve ``[[M, Gᵀ], [G, 0]] [x; y] = rhs`` with a block-diagonal M.

    Block solves with M and a dense Schur complement ``S = G M⁻¹ Gᵀ`` on the
    n_c constraints: cost O(n b²) + O(n n_c²) + O(n_c³) instead of
    O((n + n_c)³).  Pure ``jax.numpy``: safe under ``jit`` and ``vmap`` (keep
    block indices as static numpy arrays, outside the mapped arguments).

    Args:
        M_blocks: the diagonal blocks of M, either an array (nb, b, b) of
            contiguous blocks (M = blockdiag in flat coordinate order, n =
            nb·b; a single (n, n) matrix is one dense block), or a sequence
            of ``(index, blocks)`` pairs, ``index`` an int array (nb, b) of
            flat coordinate indices and ``blocks`` the (nb, b, b) matrices
            ``M[index[i][:, None], index[i][None, :]]``; the indices of all
            pairs together must partition 0..n−1 (as returned by
            :meth:`LagrangianDAE.mass_matrix_blocks`).
        G: constraint Jacobian (n_c, n), or None / shape (0, n) for none.
        rhs: right-hand side of shape (n + n_c,) or (n + n_c, k): the first n
            rows pair with M, the last n_c with the constraints.

    Returns:
        The solution, same shape as ``rhs`` (x first, then y).

    Raises:
        InputError: inconsistent shapes.
    """
    groups = _normalise_blocks(M_blocks)
    n = sum(int(np.prod(B.shape[:2])) for _, B in groups)
    rhs = _f64(rhs)
    nc = 0 if G is None else int(G.shape[0])
    if rhs.shape[0] != n + nc:
        raise InputError(
            f"solve_kkt: rhs has {rhs.shape[0]} rows but M is {n}x{n} with {nc} constraints "
            f"(expected {n + nc})"
        )
    if nc and tuple(G.shape) != (nc, n):
        raise InputError(f"solve_kkt: G has shape {tuple(G.shape)}, expected ({nc}, {n})")
    return kkt_solve(kkt_factor(groups, _f64(G) if nc else None), rhs)


def _input_dependence(closed) -> list[set]:
    """For each output of a closed jaxpr, the set of input positions it reads.

    Array-level and conservative: an equation's outputs depend on all of its
    inputs (nested jaxprs included), which can only over-estimate coupling.
    """
    jaxpr = closed.jaxpr
    deps: dict = {}
    for i, v in enumerate(jaxpr.invars):
        deps[v] = {i}
    for v in jaxpr.constvars:
        deps[v] = set()
    for eqn in jaxpr.eqns:
        s: set = set()
        for v in eqn.invars:
            if not isinstance(v, jex_core.Literal):
                s |= deps.get(v, set())
        for o in eqn.outvars:
            deps[o] = s
    return [set() if isinstance(o, jex_core.Literal) else deps.get(o, set()) for o in jaxpr.outvars]


# ---------------------------------------------------------------- the DAE
class LagrangianDAE(DAE):
    """A :class:`solver.dae.problem.DAE` built from a Lagrangian; see :func:`lagrangian`.

    Variables: the coordinates (in declaration order), then the multiplier
    vector (size n_c) when there are constraints.  Residual items: one
    Euler–Lagrange item per coordinate (same shape as the coordinate), then
    one item holding all constraints.

    Attributes:
        coords: list of coordinate :class:`solver.dae.problem.Variable` (flat layout
            of q, q', q'' used by all inspection methods).
        n_q: number of flat coordinates.
        n_c: number of constraints, drivers included (0: an ODE, no
            multiplier variable).
        drivers: tuple of :class:`Driver`, in the order given; driver k's
            row is ``drivers[k].index`` (after the model's own constraints)
            and its generalised force is ``−λ[drivers[k].index]``.
        multiplier: name of the multiplier variable (None if n_c = 0).
        el_items: indices of the residual items holding Euler–Lagrange rows.
        constraint_item: index of the constraint item (None if n_c = 0).

    Inspection methods take ``q``, ``qd`` (and ``qdd``) as dicts name ->
    array or as flat arrays of length n_q, and ``params`` as overrides of the
    defaults; they are pure ``jax.numpy`` (jit/vmap-safe when given arrays).
    """

    def __init__(self, L, coords, constraints=None, dissipation=None, forces=None,
                 params=None, name=None, multiplier="lam", mass_blocks=None, units=None,
                 drivers=None, events=None, stops=None, max_events=None):
        if not callable(L):
            raise InputError("L must be a callable L(t, q, qd, p) returning a scalar", path="L")
        for arg, f in (("constraints", constraints), ("dissipation", dissipation)):
            if f is not None and not callable(f):
                raise InputError(f"{arg} must be a callable or None", path=arg)
        try:
            self.coords = _parse_variables(coords)
        except DAEDefinitionError as e:
            raise InputError(f"coordinates: {e}", path="coords") from None
        self.n_q = sum(c.size for c in self.coords)
        self._L = L
        self._C = constraints
        self._R = dissipation
        self._Q = _combine_forces(forces)
        self._declared_blocks = mass_blocks
        self._mass_blocks = None
        names = [c.name for c in self.coords]
        if not isinstance(multiplier, str) or not multiplier.isidentifier():
            raise InputError(f"multiplier name must be an identifier, got {multiplier!r}",
                             path="multiplier")
        param_defaults = {k: np.asarray(v, dtype=np.float64) for k, v in dict(params or {}).items()}
        self.drivers = ()
        n_own = self._count_constraints(param_defaults)
        # Driver rows follow the model's own constraints in the one
        # constraint vector, so the KKT structure stays [[M, Gᵀ], [G, 0]].
        self.drivers = _read_drivers(drivers, self.coords, n_own, dict(units or {}))
        self._check_drivers(param_defaults, names)
        self.n_c = n_own + len(self.drivers)
        if self.n_c and multiplier in names:
            raise InputError(
                f"the multiplier name {multiplier!r} is also a coordinate; pass "
                f"multiplier='...' with a name not in {names}", path="multiplier")
        self.multiplier = multiplier if self.n_c else None
        self.el_items = list(range(len(self.coords)))
        self.constraint_item = len(self.coords) if self.n_c else None

        variables = {c.name: (None if c.shape == () else c.size) for c in self.coords}
        if self.n_c:
            variables[multiplier] = self.n_c
        try:
            super().__init__(self._residual, variables, params=param_defaults,
                             name=name or getattr(L, "__name__", "Lagrangian"), units=units,
                             events=list(events or ()) + stop_events(self, stops), max_events=max_events)
        except DAEDefinitionError as e:
            raise InputError(str(e)) from None

    def equation_names(self) -> list[str]:
        """Labels of the flat equations: ``f0``… and ``drive_{name}`` for a driver's row.

        A driver's row is named after it so that messages about initial
        values (the hidden constraints ``drive_theta``, ``drive_theta'``)
        and ``mechsweep check`` say which drive is at fault.
        """
        names = super().equation_names()
        if self.drivers:
            first = self.equation_blocks[self.constraint_item][0]
            for d in self.drivers:
                names[first + d.index] = f"drive_{d.name}"
        return names

    # ----------------------------------------------------------- layout helpers
    def _zeros_q(self):
        return {c.name: jnp.zeros(c.shape, dtype=jnp.float64) for c in self.coords}

    def _as_dict(self, x, what="q") -> dict:
        """Coordinate dict from a dict or a flat array of length n_q."""
        if isinstance(x, Mapping):
            missing = [c.name for c in self.coords if c.name not in x]
            if missing:
                raise InputError(f"{what}: missing coordinates {missing}; the coordinates are "
                                 f"{[c.name for c in self.coords]}")
            return {c.name: jnp.reshape(_f64(x[c.name]), c.shape) for c in self.coords}
        flat = _f64(x)
        if flat.shape != (self.n_q,):
            raise InputError(f"{what}: expected a dict of coordinates or a flat array of "
                             f"length {self.n_q}, got shape {flat.shape}")
        return self._unflatten(flat)

    def _unflatten(self, flat) -> dict:
        return {c.name: jnp.reshape(flat[c.offset:c.offset + c.size], c.shape) for c in self.coords}

    def _flatten(self, d) -> jnp.ndarray:
        return jnp.concatenate([jnp.ravel(_f64(d[c.name])) for c in self.coords])

    def _params(self, params) -> dict:
        out = {k: _f64(v) for k, v in self.params.items()}
        for k, v in (params or {}).items():
            if k not in out:
                raise InputError(f"unknown parameter {k!r}; the parameters are {sorted(out)}")
            out[k] = _f64(v)
        return out

    def _check_drivers(self, param_defaults, names) -> None:
        """Each driver's quantity and value are scalars; its outputs' names are free."""
        shapes = {c.name: jax.ShapeDtypeStruct(c.shape, jnp.float64) for c in self.coords}
        pshapes = {k: jax.ShapeDtypeStruct(v.shape, jnp.float64) for k, v in param_defaults.items()}
        t = jax.ShapeDtypeStruct((), jnp.float64)
        for d in self.drivers:
            where = f"drivers[{d.name!r}]"
            if f"torque_{d.name}" in names:  # solver.results.solution's name for its force
                raise InputError(f"{where}: its output torque_{d.name} would hide the coordinate of "
                                 "that name; rename the driver", path="drivers")
            for what, fn, args in (("quantity", d.quantity_fn, (t, shapes, pshapes)),
                                   ("value", d.value_fn, (t, pshapes))):
                out = jax.eval_shape(lambda *a: _f64(fn(*a)), *args)
                if int(np.prod(out.shape)) != 1:
                    raise InputError(f"{where}: the {what} must be a scalar, got shape {out.shape}",
                                     path="drivers")

    def _count_constraints(self, param_defaults) -> int:
        if self._C is None:
            return 0
        shapes = {c.name: jax.ShapeDtypeStruct(c.shape, jnp.float64) for c in self.coords}
        pshapes = {k: jax.ShapeDtypeStruct(v.shape, jnp.float64) for k, v in param_defaults.items()}
        out = jax.eval_shape(lambda t, q, p: _flatten_items(self._C(t, q, p)),
                             jax.ShapeDtypeStruct((), jnp.float64), shapes, pshapes)
        return int(out.shape[0])

    # ----------------------------------------------------------- pieces (pure)
    def lagrangian_value(self, t, q, qd, p):
        """L(t, q, q', p) as a float64 scalar (q, qd dicts; p full param dict).

        Raises:
            InputError: L does not return a scalar.
        """
        val = _f64(self._L(t, q, qd, p))
        if val.shape != ():
            raise InputError(f"L must return a scalar, got an array of shape {val.shape}", path="L")
        return val

    def _momenta(self, t, q, qd, p) -> dict:
        return jax.grad(lambda qd_: self.lagrangian_value(t, q, qd_, p))(qd)

    def _constraints_flat(self, t, q, p):
        if not self.drivers:
            return _flatten_items(self._C(t, q, p)) if self._C is not None else jnp.zeros((0,))
        own = self._C(t, q, p) if self._C is not None else []
        items = list(own) if isinstance(own, (list, tuple)) else [own]
        return _flatten_items(items + [d.residual(t, q, p) for d in self.drivers])

    def _forces(self, t, q, qd, p) -> dict:
        out = {c.name: jnp.zeros(c.shape, dtype=jnp.float64) for c in self.coords}
        if self._Q is None:
            return out
        given = self._Q(t, q, qd, p) or {}
        if not isinstance(given, Mapping):
            raise InputError("forces must return a dict {coordinate name: generalised force}",
                             path="forces")
        for k, val in given.items():
            if k not in out:
                raise InputError(f"forces: unknown coordinate {k!r}; the coordinates are "
                                 f"{list(out)}", path="forces")
            val = _f64(val)
            try:
                out[k] = out[k] + jnp.broadcast_to(val, out[k].shape)
            except ValueError:
                raise InputError(f"forces[{k!r}] has shape {val.shape}, the coordinate has "
                                 f"shape {out[k].shape}", path="forces") from None
        return out

    def _dissipation_grad(self, t, q, qd, p) -> dict:
        if self._R is None:
            return {c.name: jnp.zeros(c.shape, dtype=jnp.float64) for c in self.coords}

        def R(qd_):
            r = _f64(self._R(t, q, qd_, p))
            if r.shape != ():
                raise InputError(f"dissipation must return a scalar, got shape {r.shape}",
                                 path="dissipation")
            return r

        return jax.grad(R)(qd)

    def _gt_lambda(self, t, q, lam, p) -> dict:
        _, pullback = jax.vjp(lambda q_: self._constraints_flat(t, q_, p), q)
        return pullback(_f64(lam))[0]

    def _euler_lagrange(self, t, q, qd, qdd, lam, p) -> dict:
        """EL rows per coordinate: d/dt ∂L/∂q' − ∂L/∂q + ∂R/∂q' + Gᵀλ − Q."""
        t = _f64(t)
        _, dpdt = jax.jvp(lambda t_, q_, qd_: self._momenta(t_, q_, qd_, p),
                          (t, q, qd), (jnp.ones_like(t), qd, qdd))
        dLdq = jax.grad(lambda q_: self.lagrangian_value(t, q_, qd, p))(q)
        # Absent terms are left out rather than added as zeros, which keeps
        # the traced jaxpr (read by the structural analysis) lean.
        dRdqd = self._dissipation_grad(t, q, qd, p) if self._R is not None else None
        Q = self._forces(t, q, qd, p) if self._Q is not None else None
        gtl = self._gt_lambda(t, q, lam, p) if (self.n_c and lam is not None) else None
        out = {}
        for c in self.coords:
            e = dpdt[c.name] - dLdq[c.name]
            if dRdqd is not None:
                e = e + dRdqd[c.name]
            if Q is not None:
                e = e - Q[c.name]
            if gtl is not None:
                e = e + gtl[c.name]
            out[c.name] = e
        return out

    def _residual(self, t, v, p):
        q = {c.name: v[c.name][0] for c in self.coords}
        qd = {c.name: v[c.name][1] for c in self.coords}
        qdd = {c.name: v[c.name][2] for c in self.coords}
        lam = v[self.multiplier][0] if self.n_c else None
        el = self._euler_lagrange(t, q, qd, qdd, lam, p)
        items = [el[c.name] for c in self.coords]
        if self.n_c:
            items.append(self._constraints_flat(t, q, p))
        return items

    # ----------------------------------------------------------- inspection
    # Public methods convert their inputs, then call a kernel jitted once per
    # instance: op-by-op evaluation of these AD compositions is slow.  The
    # kernels are pure and may also be called inside a caller's jit/vmap.
    def _jit(self, key, fn):
        cache = self.__dict__.setdefault("_kernels", {})
        if key not in cache:
            cache[key] = jax.jit(fn)
        return cache[key]

    def _k_residual(self, t, q, qd, qdd, lam, p):
        el = self._euler_lagrange(t, q, qd, qdd, lam, p)
        items = [el[c.name] for c in self.coords]
        if self.n_c:
            items.append(self._constraints_flat(t, q, p))
        return items

    def _k_mass(self, t, q, qd, p):
        mom = lambda x: self._flatten(self._momenta(t, q, self._unflatten(x), p))
        return jax.jacfwd(mom)(self._flatten(qd))

    def _k_bias(self, t, q, qd, p):
        return self._flatten(self._euler_lagrange(t, q, qd, self._zeros_q(), None, p))

    def _k_cjac(self, t, q, p):
        f = lambda x: self._constraints_flat(t, self._unflatten(x), p)
        return jax.jacfwd(f)(self._flatten(q))

    def _k_cforces(self, t, q, lam, p):
        return {k: -val for k, val in self._gt_lambda(t, q, lam, p).items()}

    def residual_at(self, t, q, qd, qdd, lam=None, params=None) -> list:
        """The residual items at a point, as the DAE sees them.

        Args:
            t: time. q, qd, qdd: coordinates and their first two derivatives
                (dicts or flat arrays). lam: multipliers (n_c,) or None
                (zeros). params: parameter overrides.

        Returns:
            List of arrays: one EL item per coordinate, then the constraints.
        """
        lam = _f64(jnp.zeros((self.n_c,)) if lam is None else lam) if self.n_c else None
        return self._jit("residual", self._k_residual)(
            _f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._as_dict(qdd, "qdd"),
            lam, self._params(params))

    def mass_matrix(self, t, q, qd, params=None) -> jnp.ndarray:
        """Dense ``M = ∂²L/∂q'²`` (n_q × n_q, flat coordinate order).

        For large models use :meth:`mass_matrix_blocks` (O(n)).
        """
        return self._jit("mass", self._k_mass)(
            _f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def momenta(self, t, q, qd, params=None) -> dict:
        """Generalised momenta ``∂L/∂q'`` per coordinate."""
        return self._jit("momenta", self._momenta)(
            _f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def bias(self, t, q, qd, params=None) -> jnp.ndarray:
        """Flat EL expression with q'' = 0 and λ = 0: ``M q'' + bias + Gᵀλ = 0``."""
        return self._jit("bias", self._k_bias)(
            _f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def energy_fn(self, t, q, qd, p):
        """``E = q'·∂L/∂q' − L`` for the solution builder (``energy(time)``).

        Args:
            t: time. q, qd: dicts name -> array. p: the full parameter dict
                (every parameter, e.g. ``dae.params`` or a batch's values).

        Returns:
            Scalar energy; pure jnp, vmap it over time.
        """
        t = _f64(t)
        mom = self._momenta(t, q, qd, p)
        pq = sum(jnp.vdot(_f64(qd[c.name]), mom[c.name]) for c in self.coords)
        return pq - self.lagrangian_value(t, q, qd, p)

    @property
    def has_dissipation(self) -> bool:
        """Whether the DAE has a Rayleigh dissipation function R."""
        return self._R is not None

    def dissipation_power_fn(self, t, q, qd, p):
        """Power dissipated by the Rayleigh forces, ``q'·∂R/∂q'`` (≥ 0 for a convex R).

        The work-energy theorem: with no applied forces and constraints that
        do not depend on t, ``dE/dt = −q'·∂R/∂q'``, so the integral of this
        power (the ``dissipated`` output) balances the energy change.

        Args:
            t: time. q, qd: dicts name -> array. p: the full parameter dict.

        Returns:
            Scalar power (0 without a dissipation function); pure jnp.
        """
        if self._R is None:
            return jnp.float64(0.0)
        grad = self._dissipation_grad(_f64(t), q, qd, p)
        return sum(jnp.vdot(_f64(qd[c.name]), grad[c.name]) for c in self.coords)

    def point_momenta_fn(self, t, q, qd, p):
        """World positions and momenta of the points that carry mass.

        A DAE whose coordinates are world positions of points sets
        ``point_momenta_fn`` (the Mechanism kind overrides it to add its fixed
        points); by default every coordinate is taken as a point, with its
        conjugate momentum ``∂L/∂r'``.  Then ``Σ p`` is the linear momentum and
        ``Σ r × p`` the angular momentum about the origin: the Noether charges
        of translations and rotations of every point.

        Args:
            t: time. q, qd: dicts name -> array. p: the full parameter dict.

        Returns:
            (R, P): arrays (n_points, dim) of positions and momenta.
        """
        mom = self._momenta(_f64(t), q, qd, p)
        R = jnp.stack([_f64(q[c.name]) for c in self.coords])
        P = jnp.stack([_f64(mom[c.name]) for c in self.coords])
        return R, P

    @property
    def momentum_dim(self) -> int | None:
        """Dimension (2 or 3) of the points whose momenta are outputs, or None.

        Set ``dae.momentum_dim`` (the model kinds do, where every coordinate is
        a point's world position) to have ``momentum`` and
        ``angular_momentum`` in the results; None (default) leaves them out.
        """
        return self.__dict__.get("_momentum_dim")

    @momentum_dim.setter
    def momentum_dim(self, value: int | None) -> None:
        if value is not None and value not in (2, 3):
            raise InputError(f"momentum_dim must be 2, 3 or None, got {value!r}")
        self.__dict__["_momentum_dim"] = value

    def energy(self, t, q, qd, params=None):
        """Energy ``q'·∂L/∂q' − L`` at a point (T + V for L = T − V natural)."""
        return self._jit("energy", self.energy_fn)(
            _f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def constraints_at(self, t, q, params=None) -> jnp.ndarray:
        """Flat constraint values C(t, q) (length n_c)."""
        return self._jit("constraints", self._constraints_flat)(
            _f64(t), self._as_dict(q), self._params(params))

    def constraint_jacobian(self, t, q, params=None) -> jnp.ndarray:
        """``G = ∂C/∂q`` of shape (n_c, n_q)."""
        return self._jit("cjac", self._k_cjac)(_f64(t), self._as_dict(q), self._params(params))

    def constraint_forces(self, t, q, lam, params=None) -> dict:
        """Generalised constraint forces ``−Gᵀλ`` per coordinate (see module doc)."""
        if not self.n_c:
            return self._zeros_q()
        return self._jit("cforces", self._k_cforces)(
            _f64(t), self._as_dict(q), _f64(lam), self._params(params))

    # ----------------------------------------------------------- mass blocks
    @property
    def mass_blocks(self) -> MassBlocks:
        """Block-diagonal structure of M (:class:`MassBlocks`), found once.

        Coupling between named coordinates is read structurally from the
        jaxpr of ∂L/∂q' (conservative); inside a coordinate the blocks are
        dense unless the builder declared ``mass_blocks={name: b}``.  A
        declaration is checked numerically at a random point (M v against the
        block product for a random v).

        Raises:
            InputError: a declaration contradicts the model's M.
        """
        if self._mass_blocks is None:
            self._mass_blocks = self._find_mass_blocks()
            if self._declared_blocks:
                err = self._check_blocks_random()
                if not err <= 1e-10:
                    decl, self._mass_blocks = self._declared_blocks, None
                    raise InputError(
                        f"mass_blocks={decl!r} does not match the mass matrix ∂²L/∂q'² "
                        f"(relative mismatch {err:.2e} at a random point): M couples "
                        "coordinates across the declared blocks", path="mass_blocks")
        return self._mass_blocks

    def _declared(self) -> dict:
        decl = self._declared_blocks
        if decl is None:
            return {}
        if decl == "diagonal":
            return {c.name: 1 for c in self.coords}
        if not isinstance(decl, Mapping):
            raise InputError("mass_blocks must be None, 'diagonal' or a dict "
                             "{coordinate: block size}", path="mass_blocks")
        out = {}
        for k, b in decl.items():
            if k not in self.var_index or k == self.multiplier:
                raise InputError(f"mass_blocks: unknown coordinate {k!r}; the coordinates are "
                                 f"{[c.name for c in self.coords]}", path="mass_blocks")
            size = self.var_index[k].size
            if not isinstance(b, (int, np.integer)) or b < 1 or size % b:
                raise InputError(f"mass_blocks[{k!r}] = {b!r}: the block size must be a "
                                 f"positive integer dividing the coordinate size {size}",
                                 path="mass_blocks")
            out[k] = int(b)
        return out

    def _find_mass_blocks(self) -> MassBlocks:
        names = [c.name for c in self.coords]
        shapes = [jax.ShapeDtypeStruct(c.shape, jnp.float64) for c in self.coords]
        params = {k: _f64(v) for k, v in self.params.items()}

        def mom(*qd_list):
            qd = dict(zip(names, qd_list))
            q = self._zeros_q()
            m = self._momenta(jnp.float64(0.0), q, qd, params)
            return [m[n] for n in names]

        deps = _input_dependence(jax.make_jaxpr(mom)(*shapes))
        # Connected components of the name-coupling graph (union-find).
        parent = list(range(len(names)))

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, d in enumerate(deps):
            for j in d:
                parent[find(i)] = find(j)
        comps: dict = {}
        for i in range(len(names)):
            comps.setdefault(find(i), []).append(i)
        declared = self._declared()
        by_size: dict = {}
        used_decl = False
        for members in comps.values():
            if len(members) == 1 and names[members[0]] in declared:
                c = self.coords[members[0]]
                b = declared[c.name]
                rows = np.arange(c.offset, c.offset + c.size).reshape(-1, b)
                used_decl = True
            else:
                rows = np.concatenate([np.arange(self.coords[m].offset,
                                                 self.coords[m].offset + self.coords[m].size)
                                       for m in members])[None, :]
            for r in rows:
                by_size.setdefault(len(r), []).append(r)
        groups = tuple(np.asarray(by_size[b], dtype=np.int64) for b in sorted(by_size))
        return MassBlocks(self.n_q, groups, "structural+declared" if used_decl else "structural")

    def mass_matrix_blocks(self, t, q, qd, params=None, structure: MassBlocks | None = None):
        """The diagonal blocks of M without forming M: O(n) for block-diagonal M.

        Each group of block size b costs b Hessian-vector products (column k
        of every block at once, since blocks do not couple).

        Args:
            t, q, qd, params: the point (see class doc).
            structure: block structure; default :attr:`mass_blocks`.

        Returns:
            ``[(index, blocks), ...]`` ready for :func:`solve_kkt`.
        """
        args = (_f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))
        if structure is not None and structure is not self._mass_blocks:
            return self._k_blocks(*args, structure)
        structure = self.mass_blocks
        return self._jit("blocks", lambda *a: self._k_blocks(*a, structure))(*args)

    def kkt_blocks(self) -> KKTBlocks:
        """The system Jacobian ``[[M, Gᵀ], [G, 0]]`` as data, for the structured solve.

        What :class:`solver.integrate.integrator.Integrator` needs for ``linear="kkt"``
        (see :class:`solver.numerics.kkt.KKTBlocks`): the mass-block structure (found
        on first use, :attr:`mass_blocks`), the blocks of M at a point, the
        flat constraints and the coordinate layout.  Cheap: nothing is
        traced until the structure is asked for.
        """
        return KKTBlocks(
            coords=tuple(c.name for c in self.coords), n_q=self.n_q, n_c=self.n_c,
            mass_blocks=lambda t, q, qd, p: self._k_blocks(t, q, qd, p, self.mass_blocks),
            constraints=(lambda t, q, p: self._constraints_flat(t, self._unflatten(q), p)) if self.n_c else None,
            flatten=self._flatten, unflatten=self._unflatten,
            find_mass_structure=lambda: self.mass_blocks)

    def _k_blocks(self, t, q, qd, p, structure):
        qd_flat = self._flatten(qd)

        def Mv(s):
            f = lambda x: self._flatten(self._momenta(t, q, self._unflatten(x), p))
            return jax.jvp(f, (qd_flat,), (s,))[1]

        out = []
        for idx in structure.groups:
            nb, b = idx.shape
            # Seed k has ones at the k-th index of every block: M·seed_k holds
            # column k of all blocks at once (blocks do not couple).
            seeds = np.zeros((b, self.n_q))
            seeds[np.arange(b)[:, None], idx.T] = 1.0
            cols = jax.vmap(Mv)(jnp.asarray(seeds))  # (b, n)
            out.append((idx, jnp.transpose(cols[:, idx], (1, 2, 0))))
        return out

    def _check_blocks_random(self) -> float:
        rng = np.random.default_rng(12345)
        q = rng.uniform(0.2, 1.0, self.n_q)
        qd = rng.uniform(-1.0, 1.0, self.n_q)
        v = rng.standard_normal(self.n_q)
        structure = self._mass_blocks

        @jax.jit  # one compile instead of hundreds of eager dispatches
        def mismatch(q, qd, v, p):
            qd_d, q_d = self._unflatten(qd), self._unflatten(q)
            f = lambda x: self._flatten(self._momenta(jnp.float64(0.3), q_d, self._unflatten(x), p))
            Mv = jax.jvp(f, (qd,), (v,))[1]
            blocks = self._k_blocks(jnp.float64(0.3), q_d, qd_d, p, structure)
            Bv = jnp.zeros(self.n_q)
            for idx, B in blocks:
                Bv = Bv.at[idx].set(jnp.einsum("nij,nj->ni", B, v[idx]))
            return jnp.max(jnp.abs(Mv - Bv)), jnp.max(jnp.abs(Mv))

        err, scale = (float(x) for x in mismatch(_f64(q), _f64(qd), _f64(v), self._params(None)))
        err = err / (scale or 1.0)
        return err if np.isfinite(err) else 0.0  # outside L's domain: no evidence

    # ----------------------------------------------------------- misc
    def with_params(self, **overrides) -> "LagrangianDAE":
        """A copy with other parameter defaults (same structure, same class).

        The copy shares the structural analysis but none of the jitted
        kernels: those belong to the object that built them.
        """
        new = object.__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_kernels"})
        new.params = self.param_values(overrides)
        return new

    def __repr__(self):
        cs = ", ".join(c.name if c.shape == () else f"{c.name}[{c.size}]" for c in self.coords)
        drive = f" ({len(self.drivers)} of them drivers: {', '.join(d.name for d in self.drivers)})" \
            if self.drivers else ""
        return (f"LagrangianDAE({self.name!r}: coordinates {cs}; {self.n_c} constraints{drive}; "
                f"params={self.param_names})")


def lagrangian(L: Callable, coords, constraints: Callable | None = None,
               dissipation: Callable | None = None, forces=None,
               params: Mapping[str, Any] | None = None, name: str | None = None,
               multiplier: str = "lam", mass_blocks=None,
               units: Mapping[str, str] | None = None,
               drivers: Mapping[str, tuple] | None = None, events=None, stops=None,
               max_events: int | None = None) -> LagrangianDAE:
    """Build the Euler–Lagrange DAE of a mechanical model (docs/method.md §7).

    Args:
        L: ``L(t, q, qd, p)`` -> scalar Lagrangian; ``q``, ``qd`` are dicts
            coordinate name -> array, ``p`` the parameters.
        coords: dict name -> size (None for a scalar) or a list of scalar
            names, as DAE variables.
        constraints: ``constraints(t, q, p)`` -> list/array of holonomic
            constraints C_i (= 0); may depend on t (drivers, rheonomic).
        dissipation: ``dissipation(t, q, qd, p)`` -> scalar Rayleigh R.
        forces: ``forces(t, q, qd, p)`` -> dict coordinate -> generalised
            force Q (missing coordinates get 0), or a list of such callables
            (summed), e.g. from :func:`point_force`.
        params: parameter defaults (numbers or arrays).
        name: title.
        multiplier: name of the multiplier variable (vector of size n_c).
        mass_blocks: optional declaration of block-diagonal M inside
            coordinates: ``"diagonal"`` or dict name -> block size (e.g.
            ``{"r": 3}`` for particles); checked numerically on first use.
        units: optional dict variable -> unit string.
        drivers: inverse dynamics: mapping name -> ``(quantity, value)`` or
            ``(quantity, value, units)``.  ``quantity`` is a coordinate name
            (a scalar coordinate ``"theta"`` or a component ``"A[0]"``) or a
            callable ``quantity(t, q, p)`` -> scalar (as ``constraints``
            takes its arguments), e.g. a crank angle by ``jnp.arctan2``;
            ``value`` is a callable ``value(t, p)`` -> scalar (or a number,
            held constant); ``units`` those of the drive's generalised force
            (default: from the driven coordinate's unit in ``units``:
            ``rad`` -> ``N m``, ``m`` -> ``N``).  Each driver adds the
            constraint ``quantity − value = 0`` (after ``constraints``, with
            its own multiplier); the results then hold ``torque_{name}``,
            the generalised force the drive applies along the quantity
            (``−λ`` of its row: for a pendulum driven at θ(t),
            m L² θ'' + m g L sin θ).  The driven quantity's initial value and
            velocity come from the driver: do not fix them.
        events: optional :class:`solver.Event` list (functions of the
            coordinates ``v[name][0]``, velocities ``v[name][1]``, t and p).
        stops: optional :class:`solver.mechanics.stops.Stop` list: unilateral
            constraints (gap >= 0) with Newton's impact law.
        max_events: event records a run keeps (default 64).

    Returns:
        A :class:`LagrangianDAE` (a :class:`solver.dae.problem.DAE`).

    Raises:
        InputError: malformed arguments (the message says which and why).
    """
    return LagrangianDAE(L, coords, constraints=constraints, dissipation=dissipation,
                         forces=forces, params=params, name=name, multiplier=multiplier,
                         mass_blocks=mass_blocks, units=units, drivers=drivers, events=events, stops=stops,
                         max_events=max_events)

