"""Mechanism physics: parts sharing named points, assembled into a Lagrangian DAE.

A :class:`Mechanism` holds Fixed points, Particles, Springs, damped springs,
Rods and Rigid bodies (in natural coordinates), gravity and point forces;
it gives L = T − V, the holonomic constraints C, a Rayleigh dissipation R
and the applied forces Q as pure ``jax.numpy`` callables and hands them to
:func:`solver.mechanics.lagrangian.lagrangian` (:meth:`Mechanism.to_dae`).  Rigid-body
kinematics and energies come from :mod:`solver.mechanics.natural`.  Reading and
checking the talk's YAML parts format is :mod:`solver.models.mechanism_kind`.

Every moving point is a DAE coordinate of size ``dim``.  The parts' numbers
(masses, lengths, geometry) are callables of the parameter values, evaluated
*inside* the residual from the traced parameters, so a sweep may vary any of
them.

* Particle at B, mass m: T = ½ m |Ḃ|², V = −m g·B.
* Spring AB (stiffness k, rest length l, mass mu spread along it):
  V = ½ k (|A − B| − l)², T = mu/6 (|Ȧ|² + Ȧ·Ḃ + |Ḃ|²), gravity on its midpoint.
* Damped spring: a spring plus R = ½ c (d/dt |A − B|)² (rigid rotation is
  not damped).
* Rod AB (mass m, length L): constraint |A − B|² − L² = 0, T as a massive spring.
* Driver of a component, e.g. A[0] = f(t): the constraint A[0] − f(t) = 0
  (:func:`solver.mechanics.lagrangian.lagrangian`'s ``drivers``).
* Rigid body through points P0, P1, …: the first ``dim`` are its basic
  points (frame rule, :func:`solver.mechanics.natural.frame_rule`); rigidity
  constraints on them, further points tied to the body by
  ``X − (P0 + Q Eᵀ X₀) = 0``; T from :func:`solver.mechanics.natural.rigid_kinetic_energy`,
  gravity on the centroid.

Constraints whose points are all fixed are left out of the DAE (the reader
checks that the fixed points satisfy them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import jax
import jax.numpy as jnp

from solver.mechanics import natural
from solver.mechanics.lagrangian import LagrangianDAE, lagrangian

__all__ = ["Mechanism", "Part", "PART_KINDS", "FIELDS", "AXES"]

# The kinds of parts and the named values each one needs, in order.
FIELDS = {
    "Particles": ("mass",),
    "Springs": ("stiffness", "length", "mass"),
    "DampedSprings": ("stiffness", "length", "mass", "damping"),
    "Rods": ("mass", "length"),
    "Rigids": ("Geom", "centroid", "mass", "inertia"),
}
PART_KINDS = tuple(FIELDS)
# Names of the axes of a point (the dataset labels its components so).
AXES = "xyz"


def _f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


@dataclass
class Part:
    """One part of a mechanism.

    Attributes:
        kind: one of :data:`PART_KINDS`.
        name: its name (labels of its constraints).
        points: its points, in order (a rigid body's first point is the
            origin of its local frame).
        path: where it was defined (the reader's key path, for messages).
        q: field name (:data:`FIELDS`) -> callable ``values -> array`` of the
            parameter values (every parameter, derived ones included).
            ``Geom`` holds the local coordinates of the points after the
            first, one row each; ``centroid``/``inertia`` are in the same
            local frame (inertia about the centroid: a scalar in 2-D, a 3×3
            tensor or 3 principal moments in 3-D).
    """

    kind: str
    name: str
    points: tuple
    path: tuple = ()
    q: dict = field(default_factory=dict)


class Mechanism:
    """Parts, points and forces, and the Lagrangian pieces they make.

    Filled in by a reader (:mod:`solver.models.mechanism_kind`); it provides
    L, C, R and Q as pure ``jax.numpy`` callables of traced parameters
    (``lagrangian_fn``, ``constraints_fn``, ``dissipation_fn``,
    ``forces_fn``) and :meth:`to_dae`.

    Attributes:
        dim: 2 or 3.
        title: the DAE's name.
        param_info: the parameters: an object with ``free`` (name -> default
            of the DAE's traced parameters) and ``resolve(p)`` (every
            parameter's value from the traced ones), e.g.
            :class:`solver.models.scope.ParamInfo`.
        parts: list of :class:`Part`.
        fixed_points: name -> callable ``values -> array`` (its world position).
        moving: names of the moving points (coordinates), in order of first use.
        gravity: callable ``values -> array`` (the gravity vector), or None.
        point_forces: point -> callable ``(values, rates) -> array``, the force
            applied there; ``values`` holds the parameters, ``t`` and the
            moving points' positions, ``rates`` their velocities.
        multiplier: the multiplier variable's name.
        drivers: driver name -> ``(component, value(t, p), units)``, the
            ``drivers=`` of :func:`solver.mechanics.lagrangian.lagrangian` (a component
            such as ``"A[0]"`` prescribed as a function of t and the free
            parameters).
    """

    def __init__(self, dim: int, title: str):
        self.dim, self.title = dim, title
        self.param_info = None
        self.parts: list[Part] = []
        self.fixed_points: dict[str, Callable] = {}
        self.moving: list[str] = []
        self.gravity: Callable | None = None
        self.point_forces: dict[str, Callable] = {}
        self.multiplier = "lam"
        self.drivers: dict[str, tuple] = {}

    # -------------------------------------------------------- evaluation
    def env(self, p) -> "_Env":
        """Every parameter-dependent quantity of the parts, evaluated once.

        Args:
            p: the free (traced) parameters; derived ones are computed here.

        Returns:
            :class:`_Env` holding the parameter values, the parts' values, the
            rigid bodies' frames and mass properties, the fixed points and
            gravity.
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
        if values:
            env = _Env(self, p)
        else:
            # Without free parameters the cache's key is empty and matches in
            # any trace: its values must be numbers, not one trace's tracers.
            with jax.ensure_compile_time_eval():
                env = _Env(self, p)
        self._env_cache = (values, env)
        return env

    def _points(self, q, env):
        out = dict(env.fixed)
        out.update({n: _f64(q[n]) for n in self.moving})
        return out

    def _rates(self, qd):
        zero = jnp.zeros((self.dim,), dtype=jnp.float64)
        out = {n: zero for n in self.fixed_points}
        out.update({n: _f64(qd[n]) for n in self.moving})
        return out

    def _basic_vecs(self, part, X):
        """World vectors from a rigid body's first point to its other basic points."""
        pts = part.points
        return [X[pts[k]] - X[pts[0]] for k in range(1, self.dim)]

    def kinetic_energy(self, t, q, qd, p, env=None):
        """Total kinetic energy T (q, qd: dicts point -> array; p: free params)."""
        env = env or self.env(p)
        return self._kinetic(self._points(q, env), self._rates(qd), env)

    def point_momenta_fn(self, t, q, qd, p):
        """Positions and momenta ``∂T/∂V`` of every point, fixed ones included.

        A fixed point carries momentum too (one end of a rod hinged there
        holds half the rod's), so the sums over the points are the linear
        and angular momentum of every part (see
        :meth:`solver.mechanics.lagrangian.LagrangianDAE.point_momenta_fn`).

        Returns:
            (R, P): arrays (n_points, dim), fixed points first.
        """
        env = self.env(p)
        X, V = self._points(q, env), self._rates(qd)
        mom = jax.grad(lambda V_: self._kinetic(X, V_, env))(V)
        names = list(self.fixed_points) + list(self.moving)
        return jnp.stack([_f64(X[n]) for n in names]), jnp.stack([_f64(mom[n]) for n in names])

    def _kinetic(self, X, V, env):
        """T from the world positions X and velocities V of every point."""
        T = jnp.float64(0.0)
        for part, val in zip(self.parts, env.parts):
            if part.kind == "Particles":
                T = T + natural.particle_kinetic_energy(val["mass"], V[part.points[0]])
            elif part.kind in ("Springs", "DampedSprings", "Rods"):
                a, b = part.points
                T = T + natural.rod_kinetic_energy(val["mass"], V[a], V[b])
            elif part.kind == "Rigids":
                if all(n in self.fixed_points for n in part.points[:self.dim]):
                    continue
                rates = natural.frame_axes_rate(self._basic_vecs(part, X),
                                                self._basic_vecs(part, V), val["frame"])
                T = T + natural.rigid_kinetic_energy(val["mass"], val["centroid_K"],
                                                     val["Theta_K"], V[part.points[0]],
                                                     natural.columns(rates))
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
                axes = natural.frame_axes(self._basic_vecs(part, X), val["frame"])
                centroid = natural.body_point(X[part.points[0]], axes, val["centroid_K"])
                V = V - val["mass"] * jnp.dot(g, centroid)
        return V

    def lagrangian_fn(self, t, q, qd, p):
        """L = T − V (the callable given to :func:`solver.mechanics.lagrangian.lagrangian`)."""
        env = self.env(p)
        return self.kinetic_energy(t, q, qd, p, env) - self.potential_energy(t, q, p, env)

    def constraint_list(self, X, env) -> list[tuple[str, tuple, Any]]:
        """Every holonomic constraint as (label, points involved, value).

        Args:
            X: point name -> world position (fixed points included).
            env: :meth:`env` at the parameters.
        """
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
        pts, d = part.points, self.dim
        where = f"Rigids.{part.name}"
        vecs = self._basic_vecs(part, X)
        rigid = natural.rigidity_constraints(vecs, [val["Geom"][k] for k in range(d - 1)])
        labels = [(f"{where}: |{pts[1]}-{pts[0]}|", pts[:2])]
        if d == 3:
            labels += [(f"{where}: |{pts[2]}-{pts[0]}|", (pts[0], pts[2])),
                       (f"{where}: angle at {pts[0]}", pts[:3])]
        out = [(label, involved, value) for (label, involved), value in zip(labels, rigid)]
        if len(pts) > d:
            axes = natural.frame_axes(vecs, val["frame"])
            for k in range(d, len(pts)):
                gap = X[pts[k]] - natural.body_point(X[pts[0]], axes, val["Geom_K"][k - 1])
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
        rates = {n: _f64(qd[n]) for n in self.moving}
        return {n: f(values, rates) for n, f in self.point_forces.items()}

    # -------------------------------------------------------- the DAE
    def to_dae(self) -> LagrangianDAE:
        """The Euler–Lagrange DAE (coordinates = moving points)."""
        has_c = any(any(n not in self.fixed_points for n in pts)
                    for _, pts in self._constraint_labels())
        dae = lagrangian(
            self.lagrangian_fn, {n: self.dim for n in self.moving},
            constraints=self.constraints_fn if has_c else None,
            dissipation=self.dissipation_fn if any(pt.kind == "DampedSprings" for pt in self.parts) else None,
            forces=self.forces_fn if self.point_forces else None,
            params=self.param_info.free, name=self.title, multiplier=self.multiplier,
            drivers=self.drivers or None)
        dae.component_dims = {n: ("axis", list(AXES[:self.dim])) for n in self.moving}
        # Every coordinate is a point's world position: momenta are defined.
        dae.point_momenta_fn = self.point_momenta_fn
        dae.momentum_dim = self.dim
        return dae

    def _constraint_labels(self) -> list:
        """(label, points) of every constraint, in order, from an abstract
        evaluation: nothing is computed (eagerly, each operation would
        compile a small program when the model is read)."""
        found = []

        def constraints(p):
            env = _Env(self, p)  # not self.env(p): its cache must not keep abstract values
            q = {n: jnp.zeros(self.dim) + 1.0 + i for i, n in enumerate(self.moving)}
            items = self.constraint_list(self._points(q, env), env)
            found.extend((label, pts) for label, pts, _ in items)
            return [value for _, _, value in items]

        jax.eval_shape(constraints, {k: jax.ShapeDtypeStruct(np.shape(v), jnp.float64)
                                     for k, v in self.param_info.free.items()})
        return found

    def constraint_labels(self) -> list[str]:
        """Labels of the constraints kept in the DAE, in multiplier order (drivers last)."""
        return [lab for lab, pts in self._constraint_labels()
                if any(n not in self.fixed_points for n in pts)] + [
            f"Drivers.{name}" for name in self.drivers]

    def constraint_parts(self) -> list[str]:
        """The part each kept constraint belongs to, in words, in multiplier order (drivers last).

        ``rod QB`` (a rod's length), ``rigid OA`` (a rigid body's own
        rigidity), ``joint C of OAC`` (a further point tied to rigid body
        OAC), ``driver Ay``: the names failure reasons use
        (:mod:`solver.analysis.failures`).

        Returns:
            One name per entry of :meth:`constraint_labels`.
        """
        names = []
        for label, pts in self._constraint_labels():
            if all(n in self.fixed_points for n in pts):
                continue
            where, what = label.split(": ", 1)
            kind, name = where.split(".", 1)
            if kind == "Rods":
                names.append(f"rod {name}")
            elif what.endswith(" on the body"):
                # "C1x on the body": the tied point is the body's last point in pts.
                names.append(f"joint {pts[-1]} of {name}")
            else:
                names.append(f"rigid {name}")
        return names + [f"driver {name}" for name in self.drivers]

    def point_parts(self, point: str) -> list[str]:
        """Names of the parts that use ``point`` (a joint when there are several), in the file's order.

        Args:
            point: a point's name.

        Returns:
            The part names (empty for a point no part uses).
        """
        return [part.name for part in self.parts if point in part.points]

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
        values: every parameter's value (free and derived).
        parts: per part, a dict of its values (``mass``, ``length``… and for
            rigid bodies ``Geom``, ``frame`` = the frame rule's R,
            ``centroid_K``, ``Theta_K`` = centroid and second moment about
            the origin point in canonical coordinates, ``Geom_K``).
        fixed: Fixed point name -> world position.
        gravity: the gravity vector, or None.
    """

    def __init__(self, mech: Mechanism, p):
        self.values = {k: _f64(v) for k, v in mech.param_info.resolve(p).items()}
        self.fixed = {n: q(self.values) for n, q in mech.fixed_points.items()}
        self.gravity = None if mech.gravity is None else mech.gravity(self.values)
        self.parts = []
        for part in mech.parts:
            val = {k: q(self.values) for k, q in part.q.items()}
            if part.kind == "Rigids":
                # Canonical (frame-rule) coordinates: the moving axes are then
                # the columns of Q themselves and no matrix products are traced.
                # The inertia was checked at the default parameters by the reader.
                E, val["frame"] = natural.frame_rule(val["Geom"])
                val["centroid_K"], val["Theta_K"] = natural.canonical_mass_properties(
                    E, val["mass"], val["centroid"], val["inertia"], check=False)
                val["Geom_K"] = val["Geom"] @ E
            self.parts.append(val)
