"""Kind: Mechanism — reading the talk's parts format into a model.

A mechanism file (``configs/mechanisms/mechanism0.yaml`` is the talk's
Mechanism0, verbatim) lists parts that share named points.  This module
reads and checks it (every message names the file, key path and line) into
a :class:`solver.mechanics.mechanism.Mechanism`, the physics that assembles L = T − V,
the constraints C, a Rayleigh dissipation R and applied forces Q in natural
coordinates into a Lagrangian DAE, and wraps that DAE with the file's
problem data in a :class:`MechanismModel` (:func:`build`).

Top-level keys::

    Title, Kind (Mechanism), Dimension (2 or 3, required), PhysicalParams,
    PartData (required), AppliedForces, ProblemData (required), SolverParams,
    Animation (passed through untouched)

Coordinates
-----------
Every point named by a part and not listed under ``Fixed`` is a *moving
point*: a DAE coordinate vector of size ``Dimension`` named after the point
(``A`` with components ``A[0]``, ``A[1]``; the dataset labels the axis
x/y/z).  Points shared by parts are joints.  The multiplier vector is
``lam`` (``lam1``, … if that name is taken).

Point names come from the part name split at capital letters, each capital
taking the lowercase letters and digits after it: ``OA`` → O, A; ``DC1`` →
D, C1; ``P1P2`` → P1, P2.  Where that does not work (or to use other
names), give the points explicitly (see each part below).  Particles are
named by their single point.

Parts (``PartData``)
--------------------
All numbers are expressions of PhysicalParams (safe language of
:mod:`solver.models.expr`); they are evaluated *inside* the residual from the traced
parameters, so a sweep may vary any parameter (lengths, masses, geometry).

``Fixed: {O: [0, 0]}``
    Points fixed in the world (not coordinates).
``Particles: {B: m}``
    Point mass m at B: T = ½ m |Ḃ|².
``Springs: {AB: [k, l, mu]}``  (or ``{S: {points: [A, B], stiffness: k, length: l, mass: mu}}``)
    Stiffness k, rest length l, mass mu spread uniformly along it:
    V = ½ k (|A − B| − l)², T = mu/6 (|Ȧ|² + Ȧ·Ḃ + |Ḃ|²) (exact for a
    uniformly stretching thin spring), gravity on its midpoint.
``DampedSprings: {AB: [k, l, mu, c]}``  (mapping form adds ``damping: c``)
    A spring plus a dashpot on its stretch rate:
    R = ½ c (d/dt |A − B|)², so rigid rotation is not damped.
``Rods: {AB: [m, L]}``  (mapping form: ``points, mass, length``)
    Thin uniform rigid rod of mass m and length L: constraint
    |A − B|² − L² = 0, T as for a massive spring, gravity on its midpoint.
    The length is given, not taken from the initial guesses, so it is a
    parameter a sweep can vary and a guess cannot change it by accident.
``Rigids: {OA: {Geom: [[L, 0]], Dyna: [[L/2, 0], M, M*L**2/12]}}``
    A rigid body through the points of its name (or ``points: [...]``).
    The first point is the origin of the body's local frame; ``Geom`` gives
    the local coordinates of the other points, in order.  ``Dyna`` is
    ``[centroid, mass, inertia]`` in the same frame: in 2-D the inertia is
    the scalar polar moment about the centroid, in 3-D a 3×3 tensor about
    the centroid or its 3 principal moments (axes along the local axes).
    The first ``Dimension`` points are the body's basic points (the talk's
    frame rule: first point = origin, second on the +x axis, third in the
    upper xy half-plane); the rotation is ``Q = [i, j, (i × j)]`` with
    ``[i, j] = [b, c] R⁻¹`` (b, c the world vectors from the origin point,
    R the constant upper-triangular factor of their local values; in 2-D
    j is i turned by +90°).  Rigidity constraints: 2-D ``|b|² = |b₀|²``;
    3-D ``|b|², |c|², b·c`` equal to their local values.  Further points
    are tied to the body by ``X − (A + Q Eᵀ X₀) = 0`` (d constraints each).
    T = ½ m|Ȧ|² + m Ȧ·(Ẇ c) + ½ tr(Ẇ Θ Ẇᵀ) with W = Q Eᵀ the local-to-world
    rotation and Θ the second moment about the origin point (docs/method.md §7).
    A 2-D body needs at least 2 points, a 3-D body 3 (use ``Rods`` for a
    thin rod in 3-D).  Basic *vectors* (the talk's RSCR) are not supported.

Constraints whose points are all fixed are dropped from the DAE, after
checking at load time that the fixed points satisfy them.

Forces (``AppliedForces``)
--------------------------
``Gravity:`` with no value turns on g = 9.81 along −y (2-D) or −z (3-D); a
number or expression is the magnitude in that direction; a vector is the
acceleration of gravity itself.  Every mass (particles, rods, massive
springs, rigid bodies at their centroid) feels it through V = −m g·x.
``PointForces: {B: [0, -F*sin(t)]}`` applies a force at a moving point;
its expression may use the parameters, the time ``t`` and the points'
positions and velocities (``A``, ``A'``).

Drivers (inverse dynamics)
--------------------------
``Drivers: {Ax: 0.5*sin(2*t)}`` prescribes one component of a moving point
(named as in ``ProblemData``: ``Ax``, ``By``, ``Cz``) as an expression of
``t`` and the parameters, or ``{Ax: {value: ..., units: ...}}``.  Each
becomes the constraint ``A[0] − value(t) = 0`` with its own multiplier
(:mod:`solver.models.drivers`), and the results hold ``torque_Ax``, the
force the drive applies along that axis (units ``N`` unless declared: the
kind's default gravity is SI).  A driven component may not be fixed in
``fixedpositions`` or ``velocities``: its initial value and velocity come
from the driver (its ``positions`` entry is a guess).

Initial values (``ProblemData``)
--------------------------------
``t0`` (default 0), ``tend`` (required), ``samples`` or ``dt`` (output
times; default 201 samples).  ``positions`` gives guesses for the moving
points (``A: [L, 0]`` whole point, ``Ax: 1`` one component; x, y, z name
components); every moving point needs a guess for every component.
``fixedpositions: {Ax, B}`` keeps those values exactly (a value may be given
there instead of in ``positions``).  ``velocities: {Ay: 10, B: [0, 0]}`` are
*fixed* velocity values, as in the talk, where they are the DOF velocity
values; velocities not given are free, with guess 0, and are found from the
velocity-level constraints.  A name that is both a point and a component
name (a point called ``Bx`` next to ``B``) means the point.

Parameters
----------
PhysicalParams are read as in every kind (:func:`solver.models.scope.read_params`):
an entry that is a number (or an expression of no other entry) is a traced
DAE parameter; an entry written in terms of earlier ones (``I: M*L**2/12``)
is *derived* and computed inside the residual from the traced ones, so a
sweep over ``M`` moves ``I`` too (and a derived entry cannot be swept itself).

``SolverParams`` (``Integration: {tol, order, max_steps, h_max}``,
``Initialization: {method}``) and ``Animation`` are read by the shared
readers of :mod:`solver.models.model`; the tolerance defaults to 1e-10 and the
order follows from it.

The file is read by :mod:`solver.models.mechanism_read`; this module checks
the initial values against the mechanism and builds the model.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

import jax.numpy as jnp

from solver.errors import InputError
from solver.mechanics.mechanism import Mechanism
from solver.models.events import attach_events
from solver.models.expr import ConstantScope
from solver.models.mechanism_read import (DEFAULT_GRAVITY, PART_KINDS, MechanismReader, f64,
                                          split_point_names)
from solver.models.model import (Model, ValueRangeError, analyse, read_animation, read_solver_params,
                                 read_title, relocate)
from solver.models.scope import BaseScope, LagrangianScope, PositionScope
from solver.models.yamlio import Locator

__all__ = ["build", "Mechanism", "MechanismModel", "split_point_names", "PART_KINDS",
           "DEFAULT_GRAVITY"]


# Kept importable from this module, their old home.
from solver.models.mechanism_read import DRIVER_UNITS, FORCE_KEYS, PROBLEM_KEYS, TOP_KEYS  # noqa: F401


# ------------------------------------------------------------------ entry point
class _ValueRules:
    """The reader's value rules, at any parameter values (``Model.check_values``).

    The rules checked on each quantity at the defaults by
    :meth:`~solver.models.mechanism_read.MechanismReader.quantity` (``positive``:
    masses, lengths; ``nonneg``: stiffness, spring masses, damping) and
    :meth:`~solver.models.mechanism_read.MechanismReader.check_masses`
    (every moving point carries mass), evaluated in numpy
    (:class:`solver.models.expr.ConstantScope`): no model is built and nothing is
    compiled, so a sweep checks its points in microseconds each.
    """

    def __init__(self, mech: Mechanism, first_use: Mapping, loc: Locator, derived, stops=None):
        self.mech, self.first_use, self.loc = mech, dict(first_use), loc
        self.stops = stops  # the Stops' restitution rules (solver.models.events.StopRules), or None
        self.derived = {name: expr.names() for name, expr in derived}
        self.checked = [q for part in mech.parts for q in part.q.values() if q.rule]
        used = set().union(*(q.expr.names() for q in self.checked)) if self.checked else set()
        if stops is not None:
            used |= set(stops.params)
        #: the free parameters the rules depend on
        self.params = self.free_names(used)

    def free_names(self, names) -> list:
        """The free parameters ``names`` depend on (through derived ones too)."""
        out, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name in self.derived:
                todo.extend(n for n in self.derived[name] if n not in out)
            out.add(name)
        return [n for n in self.mech.param_info.free if n in out]

    def fail(self, message, path, names) -> ValueRangeError:
        err = self.loc.error(message, path)
        return ValueRangeError(err.message, err.file, err.path, err.line, names)

    def __call__(self, values: Mapping) -> None:
        if self.stops is not None:
            self.stops(values)
        scope = ConstantScope(values)
        masses = {}
        for q in self.checked:
            with np.errstate(all="ignore"):
                val = np.asarray(q.expr.evaluate(scope), dtype=float)
            names = q.expr.names() & set(values)
            free = self.free_names(names)
            at = ", ".join(f"{n} = {float(values[n]):g}" for n in free
                           if np.ndim(values[n]) == 0 and n != q.expr.text.strip())
            at = f", with {at}" if at else ""
            if not np.all(np.isfinite(val)):
                raise self.fail(f"{q.expr.text!r} is not finite{at}", q.path, free)
            if q.rule == "positive" and not np.all(val > 0):
                raise self.fail(f"expected a positive {q.desc}, got {val.tolist()} "
                                f"({q.expr.text}{at})", q.path, free)
            if q.rule == "nonneg" and not np.all(val >= 0):
                raise self.fail(f"expected a {q.desc} >= 0, got {val.tolist()} "
                                f"({q.expr.text}{at})", q.path, free)
        for part in self.mech.parts:
            if part.kind != "Rigids" and "mass" in part.q:
                masses[id(part)] = float(np.max(np.asarray(
                    part.q["mass"].expr.evaluate(scope), dtype=float)))
        massive = set()
        for part in self.mech.parts:
            if part.kind == "Rigids" or masses.get(id(part), 0.0) > 0:
                massive.update(part.points)
        for pt in self.mech.moving:
            if pt not in massive:
                parts = [p for p in self.mech.parts if pt in p.points and "mass" in p.q]
                names = set().union(*(p.q["mass"].expr.names() for p in parts)) & set(values)
                free = self.free_names(names)
                at = ", ".join(f"{n} = {float(values[n]):g}" for n in free
                               if np.ndim(values[n]) == 0)
                raise self.fail(f"moving point '{pt}' carries no mass{' at ' + at if at else ''} "
                                "(the masses of its parts are all 0), so its motion is "
                                "undetermined", self.first_use[pt], free)


class MechanismModel(Model):
    """A :class:`solver.models.model.Model` of Kind Mechanism.

    Extra attributes:
        mechanism: the :class:`Mechanism` (parts, points, energy pieces).
        points: names of the point variables (moving points), in order.
        fixed_points: names of the Fixed points.
    """

    def fixed_positions(self, params: Mapping | None = None) -> dict:
        """World positions of the Fixed points at the given parameters.

        Args:
            params: free parameter values (defaults for missing ones).

        Returns:
            dict name -> numpy array (d,).
        """
        values = {k: f64(v) for k, v in self.all_params(params).items()}
        return {n: np.asarray(q(values)) for n, q in self.mechanism.fixed_points.items()}


def build(data: Any, locator: Locator, path: str | None = None,
          overrides: Any = None) -> MechanismModel:
    """Build the model of a ``Kind: Mechanism`` file (see the module docstring).

    Args:
        data: the file's YAML data (a mapping; overrides already merged).
        locator: its :class:`~solver.models.yamlio.Locator` (lines, text).
        path: the file path, for messages and the model.
        overrides: the overrides merged into ``data`` (kept on the model).

    Returns:
        :class:`MechanismModel` whose ``dae`` is a
        :class:`~solver.mechanics.lagrangian.LagrangianDAE` with one coordinate per
        moving point.

    Raises:
        InputError: anything wrong with the file, with file, key path, line,
            what was expected and the valid choices.
    """
    reader = MechanismReader(data, locator)
    try:
        mech = reader.read()
        reader.read_problem(data["ProblemData"])
        solver_params = read_solver_params(data.get("SolverParams"), locator)
        names = set(mech.moving) | set(mech.fixed_points) | set(mech.param_info.values)
        animation = read_animation(data.get("Animation"), locator, lambda n: n in names)
        title = read_title(data, locator, path) if "Title" in data else mech.title
    except InputError as err:
        raise relocate(err, locator.file) from None
    dae = mech.to_dae()
    analyse(dae, locator, ("PartData",))

    def positions(p, q):
        values = {k: f64(v) for k, v in p.items()}
        out = {n: q_(values) for n, q_ in mech.fixed_points.items()}
        out.update(q)
        return out

    def event_scope(t, v, p):
        p = mech.param_info.resolve(p)
        q = positions(p, {n: v[n][0] for n in mech.moving})
        qd = {n: jnp.zeros_like(x) for n, x in q.items()}
        qd.update({n: v[n][1] for n in mech.moving})
        return LagrangianScope(t, p, [], q, qd)

    try:
        stop_rules = attach_events(
            dae, data, locator, "Mechanism", scope_of=event_scope,
            position_scope=lambda t, q, p: PositionScope(t, mech.param_info.resolve(p), [],
                                                         positions(mech.param_info.resolve(p), q), "a stop's gap"),
            param_scope=lambda p: BaseScope(jnp.zeros(()), mech.param_info.resolve(p), []),
            params=mech.param_info.numeric())
    except InputError as err:
        raise relocate(err, locator.file) from None

    def point_scope(t, values, params):
        pvalues = {k: f64(v) for k, v in params.items()}
        q = {n: q_(pvalues) for n, q_ in mech.fixed_points.items()}
        q.update({n: values[n] for n in mech.moving})
        return PositionScope(t, params, [], q, what="an animation point")

    # Point forces, dampers and drives change the energy by physics, not error.
    conservative = not mech.point_forces and not mech.drivers and not any(
        part.kind == "DampedSprings" for part in mech.parts)
    model = MechanismModel(
        dae=dae, kind="Mechanism", title=title, path=path, text=locator.text, data=data,
        locator=locator, times=reader.times, solver_params=solver_params,
        param_info=mech.param_info, values=reader.values_fn(), values_table=reader.values_table_fn(),
        fixed=reader.fixed_keys,
        animation=animation, point_scope=point_scope,
        default_points=list(mech.fixed_points) + list(mech.moving), links=mech.links(),
        conservative=conservative, overrides=overrides)
    model.mechanism = mech
    model.value_rules = _ValueRules(mech, reader.first_use, locator, mech.param_info.derived, stop_rules)
    model.points = list(mech.moving)
    model.fixed_points = list(mech.fixed_points)
    return model
