"""Kind: Mechanism — the talk's parts format, assembled into a Lagrangian DAE.

A mechanism file (``configs/mechanisms/mechanism0.yaml`` is the talk's
Mechanism0, verbatim) lists parts that share named points; this module turns
it into L = T − V, holonomic constraints C, a Rayleigh dissipation R and
applied forces Q in natural coordinates, and hands them to
:func:`solver.lagrangian.lagrangian`.

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
:mod:`solver.expr`); they are evaluated *inside* the residual from the traced
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
    rotation and Θ the second moment about the origin point (METHOD.md §7).
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.errors import InputError
from solver.expr import ExprError, Expr, check_name, parse
from solver.lagrangian import LagrangianDAE, lagrangian
from solver.natural import RigidBody, rod_kinetic_energy
from solver.models.model import (Model, analyse, read_animation, read_solver_params, read_times,
                               read_title, relocate)
from solver.models.scope import ParamInfo, PositionScope, read_params
from solver.yamlio import (Locator, check_keys, describe_value, did_you_mean, format_path,
                           require_int, require_list, require_mapping, require_str)

__all__ = ["build", "Mechanism", "MechanismModel", "split_point_names", "PART_KINDS",
           "DEFAULT_GRAVITY"]

TOP_KEYS = ("Title", "Kind", "Dimension", "PhysicalParams", "PartData", "AppliedForces",
            "ProblemData", "SolverParams", "Animation")
PART_KINDS = ("Fixed", "Particles", "Springs", "DampedSprings", "Rods", "Rigids")
FORCE_KEYS = ("Gravity", "PointForces")
PROBLEM_KEYS = ("t0", "tend", "positions", "fixedpositions", "velocities", "samples", "dt")
DEFAULT_GRAVITY = 9.81
AXES = "xyz"

# Positional fields of the list form, in order, and their mapping-form names.
_FIELDS = {
    "Springs": ("stiffness", "length", "mass"),
    "DampedSprings": ("stiffness", "length", "mass", "damping"),
    "Rods": ("mass", "length"),
}
_LIST_FORM = {
    "Springs": "[stiffness, rest length, mass]",
    "DampedSprings": "[stiffness, rest length, mass, damping]",
    "Rods": "[mass, length]",
}
_POINT_TOKEN = re.compile(r"[A-Z][a-z0-9]*")
# Tolerance for "the fixed points already satisfy this constraint".
_FIXED_TOL = 1e-9


# ------------------------------------------------------------------ helpers
def split_point_names(name: str) -> list[str] | None:
    """Point names of a part name: split at capitals (``DC1`` -> D, C1).

    Args:
        name: the part's name.

    Returns:
        The list of point names, or ``None`` when the name is not a run of
        capital-led tokens (then the part must list its points).
    """
    if not isinstance(name, str) or not re.fullmatch(r"(?:[A-Z][a-z0-9]*)+", name):
        return None
    return _POINT_TOKEN.findall(name)


class _Scope:
    """Expression scope over (possibly traced) values.

    ``values``: name -> value at order 0; ``rates``: name -> first derivative
    (points' velocities for force expressions).  Derivatives of expressions
    are not available: mechanism expressions are values, not equations.
    """

    def __init__(self, values: Mapping[str, Any], rates: Mapping[str, Any] | None = None,
                 what: str = "a PhysicalParams constant"):
        self.values, self.rates, self.what = values, rates or {}, what

    def names(self):
        return list(self.values)

    def lookup(self, name, order):
        if order == 0:
            return self.values[name]
        if order == 1 and name in self.rates:
            return self.rates[name]
        if name not in self.values:
            raise KeyError(name)
        raise ExprError(f"{name}{chr(39) * order} is a derivative, but '{name}' is {self.what} "
                        "here")

    def derivative(self, thunk, order):
        raise ExprError("derivatives of expressions are not available in a mechanism file")


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def _stack(items, axis=0):
    """``jnp.stack`` written as concatenate: the Taylor engine has no rule for
    jax's ``stack`` primitive, and these arrays depend on the state."""
    return jnp.concatenate([jnp.expand_dims(x, axis) for x in items], axis=axis)


def _shape_words(shape) -> str:
    if shape == ():
        return "a scalar"
    if len(shape) == 1:
        return f"a {shape[0]}-vector"
    return "a " + "x".join(str(n) for n in shape) + " array"


@dataclass
class _Quantity:
    """One expression from the file, with where it came from."""

    expr: Expr
    path: tuple
    default: np.ndarray = None  # value at the default parameters

    def __call__(self, scope):
        return _f64(self.expr.evaluate(scope))


@dataclass
class _Part:
    kind: str
    name: str
    points: tuple
    path: tuple
    q: dict = field(default_factory=dict)  # field name -> _Quantity


# ------------------------------------------------------------------ the model
class Mechanism:
    """A mechanism read from a file: parts, points, forces, initial data.

    Built by :func:`build`; it provides the Lagrangian pieces as pure
    ``jax.numpy`` callables of traced parameters (``lagrangian_fn``,
    ``constraints_fn``, ``dissipation_fn``, ``forces_fn``) and
    :meth:`to_dae`.

    Attributes:
        dim: 2 or 3.
        title: the Title.
        param_info: the PhysicalParams (:class:`solver.models.scope.ParamInfo`):
            free ones are the DAE's traced parameters, derived ones are
            computed from them inside the residual.
        parts: list of parts (kind, name, points, quantities).
        fixed_points: name -> :class:`_Quantity` of its world position.
        moving: names of the moving points (coordinates), in order of first use.
        gravity: :class:`_Quantity` of the gravity vector, or None.
        point_forces: point -> :class:`_Quantity` of the applied force.
        multiplier: the multiplier variable's name.
    """

    def __init__(self, dim: int, title: str):
        self.dim, self.title = dim, title
        self.param_info: ParamInfo | None = None
        self.parts: list[_Part] = []
        self.fixed_points: dict[str, _Quantity] = {}
        self.moving: list[str] = []
        self.gravity: _Quantity | None = None
        self.point_forces: dict[str, _Quantity] = {}
        self.multiplier = "lam"

    # -------------------------------------------------------- evaluation
    def env(self, p) -> "_Env":
        """Every parameter-dependent quantity of the parts, evaluated once.

        Args:
            p: the free (traced) parameters; derived ones are computed here.

        Returns:
            :class:`_Env` holding the scope, the parts' values, the rigid
            bodies' frames and mass properties, the fixed points and gravity.
        """
        # The Lagrangian facility calls L, C, R and Q several times per
        # residual (inside grad/jvp) with the same parameter values; building
        # the environment once keeps the traced residual small.  The cache
        # holds the values themselves, so identity means the same trace.
        values = tuple(p[k] for k in self.param_info.free)
        cached = getattr(self, "_env_cache", None)
        if cached is not None and len(cached[0]) == len(values) and all(
                a is b for a, b in zip(cached[0], values)):
            return cached[1]
        env = _Env(self, p)
        self._env_cache = (values, env)
        return env

    def _axes(self, X, frame):
        """The body's moving orthonormal axes [i, j, (k)] (world columns of Q)
        from the world positions X of its basic points (the frame rule)."""
        R = frame
        i = (X[1] - X[0]) / R[0]
        if self.dim == 2:
            return [i, _stack([-i[1], i[0]])]
        j = (X[2] - X[0] - R[1] * i) / R[2]
        return [i, j, jnp.cross(i, j)]

    def _axes_rate(self, X, V, frame):
        """Rates [i̇, j̇, (k̇)] of the axes; k = i × j gives k̇ = i̇ × j + i × j̇."""
        R = frame
        i = (X[1] - X[0]) / R[0]
        di = (V[1] - V[0]) / R[0]
        if self.dim == 2:
            return [di, _stack([-di[1], di[0]])]
        j = (X[2] - X[0] - R[1] * i) / R[2]
        dj = (V[2] - V[0] - R[1] * di) / R[2]
        return [di, dj, jnp.cross(di, j) + jnp.cross(i, dj)]

    @staticmethod
    def _combine(axes, coeffs):
        """Σ_k coeffs[k] axes[k]: a canonical vector taken to the world."""
        out = coeffs[0] * axes[0]
        for k in range(1, len(axes)):
            out = out + coeffs[k] * axes[k]
        return out

    def _points(self, q, env):
        out = dict(env.fixed)
        out.update({n: _f64(q[n]) for n in self.moving})
        return out

    def _rates(self, qd):
        zero = jnp.zeros((self.dim,), dtype=jnp.float64)
        out = {n: zero for n in self.fixed_points}
        out.update({n: _f64(qd[n]) for n in self.moving})
        return out

    def kinetic_energy(self, t, q, qd, p, env=None):
        """Total kinetic energy T (q, qd: dicts point -> array; p: free params)."""
        env = env or self.env(p)
        X, V = self._points(q, env), self._rates(qd)
        T = jnp.float64(0.0)
        for part, val in zip(self.parts, env.parts):
            if part.kind == "Particles":
                v = V[part.points[0]]
                T = T + 0.5 * val["mass"] * jnp.dot(v, v)
            elif part.kind in ("Springs", "DampedSprings", "Rods"):
                a, b = part.points
                T = T + rod_kinetic_energy(val["mass"], V[a], V[b])
            elif part.kind == "Rigids":
                basic = part.points[:self.dim]
                if all(n in self.fixed_points for n in basic):
                    continue
                pos, vel = [X[n] for n in basic], [V[n] for n in basic]
                rates = self._axes_rate(pos, vel, val["frame"])
                T = T + _rigid_kinetic(val["mass"], val["centroid_K"], val["Theta_K"], vel[0],
                                       rates)
        return T

    def potential_energy(self, t, q, p, env=None):
        """Total potential energy V: springs and gravity."""
        env = env or self.env(p)
        X, g = self._points(q, env), env.gravity
        V = jnp.float64(0.0)
        for part, val in zip(self.parts, env.parts):
            if part.kind in ("Springs", "DampedSprings"):
                a, b = part.points
                dx = X[a] - X[b]
                V = V + 0.5 * val["stiffness"] * (jnp.sqrt(jnp.dot(dx, dx)) - val["length"]) ** 2
            if g is None:
                continue
            if part.kind == "Particles":
                V = V - val["mass"] * jnp.dot(g, X[part.points[0]])
            elif part.kind in ("Springs", "DampedSprings", "Rods"):
                a, b = part.points
                V = V - val["mass"] * jnp.dot(g, 0.5 * (X[a] + X[b]))
            elif part.kind == "Rigids":
                basic = [X[n] for n in part.points[:self.dim]]
                axes = self._axes(basic, val["frame"])
                V = V - val["mass"] * jnp.dot(g, basic[0] + self._combine(axes, val["centroid_K"]))
        return V

    def lagrangian_fn(self, t, q, qd, p):
        """L = T − V (the callable given to :func:`solver.lagrangian.lagrangian`)."""
        env = self.env(p)
        return self.kinetic_energy(t, q, qd, p, env) - self.potential_energy(t, q, p, env)

    def constraint_list(self, X, env) -> list[tuple[str, tuple, Any]]:
        """Every holonomic constraint as (label, points involved, value)."""
        out = []
        for part, val in zip(self.parts, env.parts):
            if part.kind == "Rods":
                a, b = part.points
                dx = X[a] - X[b]
                out.append((f"Rods.{part.name}: length", (a, b),
                            jnp.dot(dx, dx) - val["length"] ** 2))
            elif part.kind == "Rigids":
                out += self._rigid_constraints(part, val, X)
        return out

    def _rigid_constraints(self, part, val, X):
        geom = val["Geom"]
        pts, d = part.points, self.dim
        o = X[pts[0]]
        b, b0 = X[pts[1]] - o, geom[0]
        where = f"Rigids.{part.name}"
        out = [(f"{where}: |{pts[1]}-{pts[0]}|", pts[:2], jnp.dot(b, b) - jnp.dot(b0, b0))]
        if d == 3:
            c, c0 = X[pts[2]] - o, geom[1]
            out += [(f"{where}: |{pts[2]}-{pts[0]}|", (pts[0], pts[2]),
                     jnp.dot(c, c) - jnp.dot(c0, c0)),
                    (f"{where}: angle at {pts[0]}", pts[:3], jnp.dot(b, c) - jnp.dot(b0, c0))]
        if len(pts) > d:
            axes = self._axes([X[n] for n in pts[:d]], val["frame"])
            for k in range(d, len(pts)):
                gap = X[pts[k]] - (o + self._combine(axes, val["Geom_K"][k - 1]))
                for ax in range(d):
                    out.append((f"{where}: {pts[k]}{AXES[ax]} on the body",
                                tuple(pts[:d]) + (pts[k],), gap[ax]))
        return out

    def constraints_fn(self, t, q, p):
        """Constraints (= 0) that involve at least one moving point."""
        env = self.env(p)
        return [val for _, pts, val in self.constraint_list(self._points(q, env), env)
                if any(n not in self.fixed_points for n in pts)]

    def dissipation_fn(self, t, q, qd, p):
        """Rayleigh R = ½ c (d/dt|A − B|)² summed over damped springs."""
        env = self.env(p)
        X, V = self._points(q, env), self._rates(qd)
        R = jnp.float64(0.0)
        for part, val in zip(self.parts, env.parts):
            if part.kind == "DampedSprings":
                a, b = part.points
                dx, dv = X[a] - X[b], V[a] - V[b]
                rate = jnp.dot(dx, dv) / jnp.sqrt(jnp.dot(dx, dx))
                R = R + 0.5 * val["damping"] * rate ** 2
        return R

    def forces_fn(self, t, q, qd, p):
        """Applied point forces as generalised forces {point: F}."""
        values = {k: _f64(v) for k, v in self.param_info.resolve(p).items()}
        values["t"] = _f64(t)
        values.update({n: _f64(q[n]) for n in self.moving})
        scope = _Scope(values, {n: _f64(qd[n]) for n in self.moving}, what="a parameter")
        return {n: f(scope) for n, f in self.point_forces.items()}

    # -------------------------------------------------------- the DAE
    def to_dae(self) -> LagrangianDAE:
        """The Euler–Lagrange DAE (coordinates = moving points)."""
        has_c = any(any(n not in self.fixed_points for n in pts)
                    for _, pts, _ in self._constraint_labels())
        dae = lagrangian(
            self.lagrangian_fn, {n: self.dim for n in self.moving},
            constraints=self.constraints_fn if has_c else None,
            dissipation=self.dissipation_fn if any(pt.kind == "DampedSprings" for pt in self.parts) else None,
            forces=self.forces_fn if self.point_forces else None,
            params=self.param_info.free, name=self.title, multiplier=self.multiplier)
        dae.component_dims = {n: ("axis", list(AXES[:self.dim])) for n in self.moving}
        return dae

    def _constraint_labels(self):
        env = self.env({k: _f64(v) for k, v in self.param_info.free.items()})
        q = {n: jnp.zeros(self.dim) + 1.0 + i for i, n in enumerate(self.moving)}
        return self.constraint_list(self._points(q, env), env)

    def constraint_labels(self) -> list[str]:
        """Labels of the constraints kept in the DAE, in multiplier order."""
        return [lab for lab, pts, _ in self._constraint_labels()
                if any(n not in self.fixed_points for n in pts)]

    def links(self) -> list[tuple[str, str]]:
        """Point pairs to draw: rods, springs, rigid-body outlines."""
        out = []
        for part in self.parts:
            if part.kind in ("Springs", "DampedSprings", "Rods"):
                out.append(tuple(part.points))
            elif part.kind == "Rigids":
                pts = part.points
                out += [(pts[i], pts[i + 1]) for i in range(len(pts) - 1)]
                if len(pts) > 2:
                    out.append((pts[-1], pts[0]))
        return out


class _Env:
    """Parameter-dependent values of a mechanism, evaluated once per call.

    Attributes:
        scope: expression scope of every parameter (free and derived).
        parts: per part, a dict of its values (``mass``, ``length``… and for
            rigid bodies ``Geom``, ``frame`` = (E, R), ``centroid``,
            ``Theta`` = second moment about the origin point).
        fixed: Fixed point name -> world position.
        gravity: the gravity vector, or None.
    """

    def __init__(self, mech: "Mechanism", p):
        self.scope = _Scope({k: _f64(v) for k, v in mech.param_info.resolve(p).items()})
        self.fixed = {n: q(self.scope) for n, q in mech.fixed_points.items()}
        self.gravity = None if mech.gravity is None else mech.gravity(self.scope)
        self.parts = []
        for part in mech.parts:
            val = {k: q(self.scope) for k, q in part.q.items()}
            if part.kind == "Rigids":
                # Canonical (frame-rule) coordinates: the moving axes are then
                # the columns of Q themselves and no matrix products are traced.
                E, val["frame"] = _frame(val["Geom"], mech.dim)
                val["centroid_K"] = E.T @ val["centroid"]
                val["Geom_K"] = val["Geom"] @ E
                Theta = _second_moment(val["mass"], val["centroid"], val["inertia"], mech.dim)
                val["Theta_K"] = E.T @ Theta @ E
            self.parts.append(val)


def _frame(geom, d):
    """(E, R) of the frame rule from the local rows of the points after the
    origin: E's columns are the canonical axes in the local frame, R the
    upper-triangular factor (as a tuple r11[, r12, r22]).  In these canonical
    coordinates Q's columns are the moving axes, and W = Q Eᵀ maps local to
    world coordinates."""
    b = geom[0]
    r11 = jnp.sqrt(jnp.dot(b, b))
    e1 = b / r11
    if d == 2:
        return _stack([e1, _stack([-e1[1], e1[0]])], axis=1), (r11,)
    c = geom[1]
    r12 = jnp.dot(c, e1)
    w = c - r12 * e1
    r22 = jnp.sqrt(jnp.dot(w, w))
    e2 = w / r22
    return _stack([e1, e2, jnp.cross(e1, e2)], axis=1), (r11, r12, r22)


def _rigid_kinetic(m, c, Theta, Od, rates):
    """T = ½ m|Ȯ|² + m Ȯ·(Q̇ c) + ½ tr(Q̇ Θ Q̇ᵀ), canonical c and Θ, Q̇ given by
    its columns.  Written with one (d, d) matrix so that the AD passes of
    the Lagrangian facility stay small."""
    Qd = _stack(rates, axis=1)
    return (0.5 * m * jnp.dot(Od, Od) + m * jnp.dot(Od, Qd @ c)
            + 0.5 * jnp.sum((Qd @ Theta) * Qd))


def _second_moment(m, c, inertia, d):
    """Θ = ∫ X Xᵀ dm about the local origin from the central inertia."""
    if d == 2:
        theta_c = 0.5 * inertia * jnp.eye(2)
    else:
        I = jnp.diag(inertia) if inertia.shape == (3,) else inertia
        theta_c = 0.5 * jnp.trace(I) * jnp.eye(3) - I
    return theta_c + m * jnp.outer(c, c)


# ------------------------------------------------------------------ reading
class _Reader:
    """Reads and validates one mechanism file into a :class:`Mechanism`."""

    def __init__(self, data, loc: Locator):
        self.data, self.loc = data, loc

    def fail(self, message, path) -> InputError:
        return self.loc.error(message, path)

    def expr(self, value, path) -> Expr:
        return parse(value, file=self.loc.file, path=format_path(path),
                     line=self.loc.nearest(path))

    def quantity(self, value, path, shapes, what, *, nonneg=False, positive=False) -> _Quantity:
        """Parse and evaluate at the defaults; check its shape and sign.

        ``shapes`` is a tuple of allowed shapes, ``what`` how to name them.
        """
        qty = _Quantity(self.expr(value, path), tuple(path))
        try:
            val = np.asarray(qty.expr.evaluate(self.defaults_scope), dtype=float)
        except ExprError as err:
            raise err.located(self.loc.file, format_path(path), self.loc.nearest(path)) from None
        if val.shape not in shapes:
            raise self.fail(f"expected {what}, got {_shape_words(val.shape)} "
                            f"({qty.expr.text})", path)
        if not np.all(np.isfinite(val)):
            raise self.fail(f"{qty.expr.text!r} is not finite at the default parameters", path)
        if positive and not np.all(val > 0):
            raise self.fail(f"expected a positive {what}, got {val.tolist()} ({qty.expr.text})", path)
        if nonneg and not np.all(val >= 0):
            raise self.fail(f"expected a {what} >= 0, got {val.tolist()} ({qty.expr.text})", path)
        qty.default = val
        return qty

    # -------------------------------------------------------- top level
    def read(self) -> Mechanism:
        data = require_mapping(self.data, (), self.loc, what="a mapping of top-level keys "
                               f"({', '.join(TOP_KEYS)})")
        check_keys(data, TOP_KEYS, ("Dimension", "PartData", "ProblemData"), (), self.loc)
        if "Kind" in data:
            require_str(data["Kind"], ("Kind",), self.loc, choices=["Mechanism"])
        dim = require_int(data["Dimension"], ("Dimension",), self.loc)
        if dim not in (2, 3):
            raise self.fail(f"expected 2 or 3, got {dim}; valid choices: 2, 3", ("Dimension",))
        title = data.get("Title")
        if title is not None and not isinstance(title, str):
            title = str(title)
        mech = Mechanism(dim, title or (Path(self.loc.file).stem if self.loc.file else "Mechanism"))
        self.mech = mech
        self.read_params(data.get("PhysicalParams"))
        self.read_parts(data["PartData"])
        self.read_forces(data.get("AppliedForces"))
        self.check_masses()
        names = set(mech.moving) | set(mech.fixed_points) | set(mech.param_info.values)
        k = 0
        while mech.multiplier in names:
            k += 1
            mech.multiplier = f"lam{k}"
        return mech

    def read_params(self, raw):
        mech = self.mech
        mech.param_info = read_params(raw, self.loc)
        self.defaults_scope = _Scope({k: _f64(v) for k, v in mech.param_info.values.items()})

    # -------------------------------------------------------- parts
    def read_parts(self, raw):
        path = ("PartData",)
        raw = require_mapping(raw, path, self.loc)
        check_keys(raw, PART_KINDS, (), path, self.loc)
        mech, d = self.mech, self.mech.dim
        vec = ((d,),)
        for name, value in require_mapping(raw.get("Fixed"), path + ("Fixed",), self.loc,
                                           allow_none=True).items():
            p = path + ("Fixed", name)
            self.point_name(name, p)
            mech.fixed_points[name] = self.quantity(value, p, vec, f"a {d}-vector position")
        self.first_use: dict[str, tuple] = {}
        for kind in ("Rigids", "Rods", "Springs", "DampedSprings", "Particles"):
            entries = require_mapping(raw.get(kind), path + (kind,), self.loc, allow_none=True)
            for name, value in entries.items():
                p = path + (kind, name)
                part = getattr(self, "read_" + kind.lower())(name, value, p)
                if len(set(part.points)) != len(part.points):
                    raise self.fail(f"a point appears twice in {list(part.points)}; the points of "
                                    "a part must be different", p)
                for pt in part.points:
                    self.point_name(pt, p)
                    if pt not in mech.fixed_points and pt not in mech.moving:
                        mech.moving.append(pt)
                    self.first_use.setdefault(pt, p)
                mech.parts.append(part)
        if not mech.moving:
            raise self.fail("no moving points: every part's points are Fixed; add a part with a "
                            "point that is not under Fixed", path)
        for pt in mech.moving:
            if pt in mech.param_info.values:
                raise self.fail(f"point '{pt}' has the name of a PhysicalParams entry; rename one "
                                "of them", self.first_use[pt])
        self.check_fixed_constraints()

    def point_name(self, name, path):
        check_name(name, "point name", file=self.loc.file, path=format_path(path),
                   line=self.loc.nearest(path))

    def part_points(self, kind, name, explicit, count, path) -> tuple:
        """Points of a part: explicit list, or split from the name."""
        if explicit is not None:
            pts = require_list(explicit, path + ("points",), self.loc, what="a list of point names")
            for k, pt in enumerate(pts):
                if not isinstance(pt, str):
                    raise self.fail(f"expected a point name, got {describe_value(pt)}",
                                    path + ("points", k))
        else:
            pts = split_point_names(name)
            if pts is None:
                raise self.fail(f"cannot read point names from '{name}': name the part by its "
                                "points, each a capital letter followed by lowercase letters or "
                                "digits (OA -> O, A; P1P2 -> P1, P2), or give 'points: [...]'",
                                path)
        lo, hi = count
        if not lo <= len(pts) <= hi:
            noun = {"Springs": "a spring joins 2 points", "DampedSprings": "a damped spring "
                    "joins 2 points", "Rods": "a rod joins 2 points"}.get(
                kind, f"a rigid body in {self.mech.dim}-D has at least {lo} points")
            raise self.fail(f"{noun}, but '{name}' names {len(pts)} ({', '.join(pts)}); "
                            + ("give 'points: [...]'" if explicit is None else "fix 'points'"),
                            path)
        return tuple(pts)

    def read_listed(self, kind, name, value, path):
        """Springs, DampedSprings, Rods: list form or mapping form."""
        fields = _FIELDS[kind]
        form = _LIST_FORM[kind]
        if isinstance(value, Mapping):
            check_keys(value, ("points",) + fields, fields, path, self.loc)
            pts = self.part_points(kind, name, value.get("points"), (2, 2), path)
            items = {f: (value[f], path + (f,)) for f in fields}
        else:
            pts = self.part_points(kind, name, None, (2, 2), path)
            if not isinstance(value, list) or len(value) != len(fields):
                got = (f"{len(value)} item{'s' if len(value) != 1 else ''}"
                       if isinstance(value, list) else describe_value(value))
                raise self.fail(f"expected {form} ({len(fields)} items), got {got}", path)
            items = {f: (v, path + (k,)) for k, (f, v) in enumerate(zip(fields, value))}
        part = _Part(kind, name, pts, path)
        for f, (v, p) in items.items():
            positive = f == "length"
            part.q[f] = self.quantity(v, p, ((),), f"{f} (a scalar)" if not positive else
                                      "length (a scalar)", nonneg=not positive, positive=positive)
        return part

    def read_springs(self, name, value, path):
        return self.read_listed("Springs", name, value, path)

    def read_dampedsprings(self, name, value, path):
        return self.read_listed("DampedSprings", name, value, path)

    def read_rods(self, name, value, path):
        return self.read_listed("Rods", name, value, path)

    def read_particles(self, name, value, path):
        if isinstance(value, (list, Mapping)) or value is None or isinstance(value, bool):
            raise self.fail(f"expected the particle's mass (a number or expression), got "
                            f"{describe_value(value)}", path)
        if name in self.mech.fixed_points:
            raise self.fail(f"'{name}' is a Fixed point; a particle there would never move",
                            path)
        part = _Part("Particles", name, (name,), path)
        part.q["mass"] = self.quantity(value, path, ((),), "mass (a scalar)", positive=True)
        return part

    def read_rigids(self, name, value, path):
        d = self.mech.dim
        value = require_mapping(value, path, self.loc, what="a mapping with Geom and Dyna")
        check_keys(value, ("points", "Geom", "Dyna"), ("Geom", "Dyna"), path, self.loc)
        pts = self.part_points("Rigids", name, value.get("points"), (d, 64), path)
        part = _Part("Rigids", name, pts, path)
        gp = path + ("Geom",)
        geom = require_list(value["Geom"], gp, self.loc,
                            what=f"a list of the local coordinates of {', '.join(pts[1:])}")
        if len(geom) != len(pts) - 1:
            raise self.fail(f"expected the local coordinates of {', '.join(pts[1:])} "
                            f"({len(pts) - 1} item{'s' if len(pts) > 2 else ''}; {pts[0]} is the "
                            f"origin), got {len(geom)} item{'s' if len(geom) != 1 else ''}", gp)
        rows = f"{len(pts) - 1} row{'s' if len(pts) > 2 else ''}"
        part.q["Geom"] = self.quantity(geom, gp, ((len(pts) - 1, d),),
                                       f"the local coordinates of {', '.join(pts[1:])} "
                                       f"({rows} of {d} numbers)")
        g = part.q["Geom"].default
        if np.linalg.norm(g[0]) < 1e-12:
            raise self.fail(f"{pts[1]} is at the origin {pts[0]} of the local frame: the first "
                            "two points of a rigid body must differ (they fix its x axis)", gp)
        if d == 3 and np.linalg.norm(np.cross(g[0], g[1])) < 1e-12 * max(1.0, np.linalg.norm(g[1])) ** 2:
            raise self.fail(f"{pts[0]}, {pts[1]} and {pts[2]} are on one line: the first three "
                            "points of a 3-D rigid body must not be collinear (they fix its "
                            "frame)", gp)
        dp = path + ("Dyna",)
        dyna = require_list(value["Dyna"], dp, self.loc, length=3,
                            what="[centroid, mass, moment of inertia]")
        part.q["centroid"] = self.quantity(dyna[0], dp + (0,), ((d,),), f"a {d}-vector centroid")
        part.q["mass"] = self.quantity(dyna[1], dp + (1,), ((),), "mass (a scalar)", positive=True)
        shapes = ((),) if d == 2 else ((3, 3), (3,))
        what = ("the scalar moment of inertia about the centroid" if d == 2 else
                "a 3x3 inertia tensor about the centroid, or its 3 principal moments")
        part.q["inertia"] = self.quantity(dyna[2], dp + (2,), shapes, what)
        local = np.vstack([np.zeros(d), part.q["Geom"].default])
        try:
            RigidBody.from_dyna(local[1:d], [part.q[k].default for k in ("centroid", "mass", "inertia")])
        except InputError as err:
            raise self.fail(f"{err.message} (at the default parameters)", path) from None
        return part

    # -------------------------------------------------------- checks
    def check_fixed_constraints(self):
        """Constraints among Fixed points only must already hold; they are dropped."""
        mech = self.mech
        if not mech.parts:
            return
        env = mech.env({k: _f64(v) for k, v in mech.param_info.free.items()})
        X = dict(env.fixed)
        X.update({n: jnp.full((mech.dim,), np.nan) for n in mech.moving})
        for label, pts, val in mech.constraint_list(X, env):
            if all(n in mech.fixed_points for n in pts):
                v = float(val)
                if abs(v) > _FIXED_TOL:
                    part_path = next(pt.path for pt in mech.parts
                                     if label.startswith(f"{pt.kind}.{pt.name}:"))
                    raise self.fail(f"the Fixed points {', '.join(pts)} violate the constraint "
                                    f"'{label}' (residual {v:.3g}); the geometry does not fit "
                                    "their positions", part_path)

    def check_masses(self):
        """Every moving point must carry mass, or M is singular."""
        mech = self.mech
        massive = set()
        for part in mech.parts:
            if part.kind == "Rigids":
                massive.update(part.points)
            elif float(np.max(part.q["mass"].default)) > 0:
                massive.update(part.points)
        for pt in mech.moving:
            if pt not in massive:
                raise self.fail(f"moving point '{pt}' carries no mass (its parts are massless "
                                "at the default parameters), so its motion is undetermined; add "
                                f"a particle '{pt}: mass', give a spring or rod mass, or make it "
                                "Fixed", self.first_use[pt])

    # -------------------------------------------------------- forces
    def read_forces(self, raw):
        path = ("AppliedForces",)
        mech, d = self.mech, self.mech.dim
        if raw is None:
            return
        raw = require_mapping(raw, path, self.loc)
        check_keys(raw, FORCE_KEYS, (), path, self.loc)
        if "Gravity" in raw:
            gp = path + ("Gravity",)
            g = raw["Gravity"]
            if g is False:
                pass
            elif g is None or g is True:
                mech.gravity = self.quantity(self.down(DEFAULT_GRAVITY), gp, ((d,),), "gravity")
            else:
                qty = self.quantity(g, gp, ((), (d,)), f"a magnitude or a {d}-vector")
                if qty.default.shape == ():
                    qty.expr = self.expr(self.down(f"({qty.expr.text})"), gp)
                    qty.default = np.asarray(qty.expr.evaluate(self.defaults_scope), dtype=float)
                mech.gravity = qty
        forces = require_mapping(raw.get("PointForces"), path + ("PointForces",), self.loc,
                                 allow_none=True)
        values = {k: _f64(v) for k, v in mech.param_info.values.items()}
        values["t"] = _f64(0.0)
        values.update({n: jnp.ones(d) for n in mech.moving})
        scope = _Scope(values, {n: jnp.ones(d) for n in mech.moving}, what="a parameter")
        for name, value in forces.items():
            p = path + ("PointForces", name)
            if name not in mech.moving:
                raise self.fail(self.unknown_point(name, "PointForces"), p)
            qty = _Quantity(self.expr(value, p), p)
            try:
                shape = np.shape(qty.expr.evaluate(scope))
            except ExprError as err:
                raise err.located(self.loc.file, format_path(p), self.loc.nearest(p)) from None
            if shape != (d,):
                raise self.fail(f"expected a {d}-vector force, got {_shape_words(shape)}", p)
            mech.point_forces[name] = qty

    def down(self, magnitude) -> list:
        return [0] * (self.mech.dim - 1) + [f"-{magnitude}" if isinstance(magnitude, str)
                                            else -magnitude]

    def unknown_point(self, name, where) -> str:
        mech = self.mech
        if name in mech.fixed_points:
            return f"'{name}' is a Fixed point; {where} applies to moving points ({', '.join(mech.moving)})"
        msg = f"unknown point '{name}'; the moving points are {', '.join(mech.moving)}"
        guess = did_you_mean(name, mech.moving)
        return msg + (f"; did you mean '{guess}'?" if guess else "")

    # -------------------------------------------------------- problem data
    def target(self, name, path, section) -> tuple[str, int | None]:
        """``A`` -> (A, None), ``Ay`` -> (A, 1); refuses Fixed and unknown names."""
        mech, d = self.mech, self.mech.dim
        name = str(name)
        point, axis = name, None
        if name not in mech.moving and name not in mech.fixed_points and len(name) > 1 \
                and name[-1] in AXES[:d]:
            point, axis = name[:-1], AXES.index(name[-1])
        if point in mech.fixed_points:
            raise self.fail(f"'{point}' is a Fixed point (its position is set in PartData.Fixed); "
                            f"{section} applies to the moving points: {', '.join(mech.moving)}",
                            path)
        if point not in mech.moving:
            comps = ", ".join(f"{mech.moving[0]}{a}" for a in AXES[:d])
            msg = (f"unknown point or component '{name}'; the moving points are "
                   f"{', '.join(mech.moving)} (components as {comps})")
            guess = did_you_mean(name, mech.moving)
            raise self.fail(msg + (f"; did you mean '{guess}'?" if guess else ""), path)
        return point, axis

    def value_entries(self, raw, section, *, allow_names=False) -> dict:
        """(point, axis) -> (quantity or None, component index or None, key path)."""
        path = ("ProblemData", section)
        d = self.mech.dim
        if allow_names and isinstance(raw, list):
            raw = {require_str(v, path + (i,), self.loc): None for i, v in enumerate(raw)}
        raw = require_mapping(raw, path, self.loc, allow_none=True,
                              what="a mapping {point: value}, e.g. {A: [1, 0], By: 2}")
        out = {}
        for name, value in raw.items():
            p = path + (name,)
            point, axis = self.target(name, p, f"ProblemData.{section}")
            axes = range(d) if axis is None else [axis]
            qty = None
            if value is not None or not allow_names:
                shape, what = ((d,), f"a {d}-vector (all of {point})") if axis is None else \
                    ((), f"a number (the {AXES[axis]} component of {point})")
                if value is None:
                    raise self.fail(f"expected {what}, got nothing (null)", p)
                qty = self.quantity(value, p, (shape,), what)
            for ax in axes:
                key = (point, ax)
                if key in out:
                    raise self.fail(f"{point}{AXES[ax]} is given twice in ProblemData.{section} "
                                    f"(by '{out[key][2][-1]}' and '{name}'); give it once", p)
                out[key] = (qty, ax if axis is None else None, p)
        return out

    def read_problem(self, raw):
        path = ("ProblemData",)
        mech, d = self.mech, self.mech.dim
        pd = require_mapping(raw, path, self.loc)
        check_keys(pd, PROBLEM_KEYS, ("tend",), path, self.loc)
        self.times = read_times(pd, self.loc)
        positions = self.value_entries(pd.get("positions"), "positions")
        fixed = self.value_entries(pd.get("fixedpositions"), "fixedpositions", allow_names=True)
        for key, (qty, idx, p) in fixed.items():
            if qty is None:
                if key not in positions:
                    raise self.fail(f"{key[0]}{AXES[key[1]]} is fixed but has no value: give it "
                                    f"in ProblemData.positions or here ({p[-1]}: value)", p)
            elif key in positions:
                raise self.fail(f"{key[0]}{AXES[key[1]]} has a value both here and in "
                                "ProblemData.positions; give it once", p)
            else:
                positions[key] = (qty, idx, p)
        for pt in mech.moving:
            missing = [AXES[a] for a in range(d) if (pt, a) not in positions]
            if missing:
                raise self.fail(
                    f"moving point '{pt}' (first used in {format_path(self.first_use[pt])}) has no "
                    f"initial position for {', '.join(pt + m for m in missing)}: every moving point "
                    f"needs a guess in ProblemData.positions (e.g. {pt}: "
                    f"[{', '.join(['0'] * d)}]), or make it Fixed in PartData.Fixed", path)
        velocities = self.value_entries(pd.get("velocities"), "velocities")
        self.positions, self.velocities = positions, velocities
        self.fixed_keys = (self.names_of(fixed, "") + self.names_of(velocities, "'"))

    def names_of(self, entries, prime) -> list[str]:
        """Solver-syntax names covering the given (point, axis) keys."""
        out = []
        for pt in self.mech.moving:
            axes = [a for a in range(self.mech.dim) if (pt, a) in entries]
            if len(axes) == self.mech.dim:
                out.append(pt + prime)
            else:
                out += [f"{pt}[{a}]{prime}" for a in axes]
        return out

    def values_fn(self):
        """The callable ``all params -> initial values`` for :class:`Model`."""
        mech, d = self.mech, self.mech.dim
        positions, velocities = self.positions, self.velocities

        def component(entry, scope):
            qty, idx, _ = entry
            val = np.asarray(qty(scope), dtype=float)
            return float(val if idx is None else val[idx])

        def values(params: Mapping) -> dict:
            scope = _Scope({k: _f64(v) for k, v in params.items()})
            out = {}
            for pt in mech.moving:
                out[pt] = np.array([component(positions[(pt, a)], scope) for a in range(d)])
                axes = [a for a in range(d) if (pt, a) in velocities]
                if len(axes) == d:
                    out[pt + "'"] = np.array([component(velocities[(pt, a)], scope) for a in axes])
                else:
                    for a in axes:
                        out[f"{pt}[{a}]'"] = component(velocities[(pt, a)], scope)
            return out

        return values


# ------------------------------------------------------------------ entry point
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
        scope = _Scope({k: _f64(v) for k, v in self.all_params(params).items()})
        return {n: np.asarray(q(scope)) for n, q in self.mechanism.fixed_points.items()}


def build(data: Any, locator: Locator, path: str | None = None,
          overrides: Any = None) -> MechanismModel:
    """Build the model of a ``Kind: Mechanism`` file (see the module docstring).

    Args:
        data: the file's YAML data (a mapping; overrides already merged).
        locator: its :class:`~solver.yamlio.Locator` (lines, text).
        path: the file path, for messages and the model.
        overrides: the overrides merged into ``data`` (kept on the model).

    Returns:
        :class:`MechanismModel` whose ``dae`` is a
        :class:`~solver.lagrangian.LagrangianDAE` with one coordinate per
        moving point.

    Raises:
        InputError: anything wrong with the file, with file, key path, line,
            what was expected and the valid choices.
    """
    reader = _Reader(data, locator)
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

    def point_scope(t, values, params):
        pscope = _Scope({k: _f64(v) for k, v in params.items()})
        q = {n: q_(pscope) for n, q_ in mech.fixed_points.items()}
        q.update({n: values[n] for n in mech.moving})
        return PositionScope(t, params, [], q, what="an animation point")

    conservative = not mech.point_forces and not any(
        part.kind == "DampedSprings" for part in mech.parts)
    model = MechanismModel(
        dae=dae, kind="Mechanism", title=title, path=path, text=locator.text, data=data,
        locator=locator, times=reader.times, solver_params=solver_params,
        param_info=mech.param_info, values=reader.values_fn(), fixed=reader.fixed_keys,
        animation=animation, point_scope=point_scope,
        default_points=list(mech.fixed_points) + list(mech.moving), links=mech.links(),
        conservative=conservative, overrides=overrides)
    model.mechanism = mech
    model.points = list(mech.moving)
    model.fixed_points = list(mech.fixed_points)
    return model
