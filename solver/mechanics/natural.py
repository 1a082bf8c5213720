"""Rigid-body kinematics and kinetic energies in natural coordinates (the talk; docs/method.md §7).

This module is the one place that defines them: the frame rule, the
rotation and its rate from basic points, the rigidity constraints, the
second moment Θ from mass, centroid and inertia, and the kinetic energies
of particles, thin rods and rigid bodies.  :mod:`solver.mechanics.mechanism` builds
the Mechanism kind from these functions; :class:`RigidFrame` and
:class:`RigidBody` wrap them for bodies of constant (numeric) geometry.

A rigid body is tracked by the world positions of a few basic points/vectors
(BPVs) fixed on it: A (always a point), B and, in 3-D, C (each a point or a
vector).  With the talk's *frame rule* the body's canonical local frame has A
at the origin, B on the +x axis and C in the upper xy half-plane, so that

    [b, c] = [i_t, j_t] R,     R upper triangular with positive diagonal,

where b = B − A (or B for a vector) and likewise c.  Hence the first two
columns of the rotation are a *constant* linear map of the BPVs,
``i_t = b / r11``, ``j_t = (c − r12 i_t) / r22``, and ``k_t = i_t × j_t``
(in 2-D, ``j_t`` is ``i_t`` turned by +90°).  The body's motion is
``X_t = A_t + Q_t X`` for X in canonical coordinates, and its kinetic energy

    T = ½ m |Ȧ|² + m Ȧ·(Q̇ c) + ½ tr(Q̇ Θ Q̇ᵀ),   Θ = ∫ X Xᵀ dm,

with c the centroid and Θ the second moment about A, both canonical.  Q
built with the constant R is a rotation only while the body's rigidity
constraints hold (:func:`rigidity_constraints`); the DAE keeps them.

The functions are pure ``jax.numpy`` and differentiable, for use inside
Lagrangians given to :func:`solver.mechanics.lagrangian.lagrangian`; the frame and mass
functions also accept traced geometry (a sweep may vary a body's lengths).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

import jax
import jax.numpy as jnp

from solver.errors import InputError

__all__ = [
    "assemble",
    "cross3",
    "particle_kinetic_energy",
    "rod_kinetic_energy",
    "rigid_kinetic_energy",
    "second_moment",
    "canonical_mass_properties",
    "frame_rule",
    "frame_axes",
    "frame_axes_rate",
    "columns",
    "body_point",
    "rigidity_constraints",
    "RigidFrame",
    "RigidBody",
]


def _dot(a, b):
    return jnp.sum(a * b, axis=-1)


def _stack(items, axis=0, xp=jnp):
    """``jnp.stack`` written as concatenate (arrays that depend on the state
    stay in operations every interpreter of the residual has a rule for)."""
    return xp.concatenate([xp.expand_dims(x, axis) for x in items], axis=axis)


def _xp(*values):
    """numpy for numbers, jax.numpy where any value is traced.

    A model's bodies are measured once when it is read, from numbers: in
    numpy that costs microseconds, where eager jax compiled a small program
    per operation (a second of Mechanism0's load)."""
    return jnp if any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(values)) else np


def assemble(entries, shape):
    """An array from scalar expressions, as Σ entry·(unit array).

    ``jnp.stack``/``concatenate`` would do, but their derivatives bring
    ``stack``/``split`` operations into the residual; scalar × constant
    and + are what every consumer of the traced residual understands.

    Args:
        entries: flat sequence of scalar expressions (row-major order).
        shape: shape of the result (its size equals ``len(entries)``).

    Returns:
        jnp array of ``shape``.
    """
    size = int(np.prod(shape))
    if len(entries) != size:
        raise ValueError(f"assemble: {len(entries)} entries for shape {shape}")
    eye = np.eye(size)
    return sum(e * eye[k].reshape(shape) for k, e in enumerate(entries))


def cross3(a, b):
    """a × b for 3-vectors, assembled from scalar components (see :func:`assemble`)."""
    return assemble([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                     a[0] * b[1] - a[1] * b[0]], (3,))


# ------------------------------------------------------------------ energies
def particle_kinetic_energy(m, velocity):
    """½ m |v|² of a point mass.

    Args:
        m: mass. velocity: array (..., d).

    Returns:
        Kinetic energy (scalar, or batched over leading axes).
    """
    v = jnp.asarray(velocity)
    return 0.5 * m * _dot(v, v)


def rod_kinetic_energy(m, Yd, Zd):
    """Kinetic energy of a thin uniform rod (or massive spring) with ends Y, Z.

    ``T = m/6 (|Ẏ|² + Ẏ·Ż + |Ż|²)``: the velocity is linear along the rod,
    and this is ½ ∫₀¹ m |(1−s)Ẏ + sŻ|² ds (exact also for a stretching spring).

    Args:
        m: mass. Yd, Zd: end velocities, arrays (..., d).

    Returns:
        Kinetic energy (batched over leading axes).
    """
    Yd, Zd = jnp.asarray(Yd), jnp.asarray(Zd)
    return m / 6.0 * (_dot(Yd, Yd) + _dot(Yd, Zd) + _dot(Zd, Zd))


def rigid_kinetic_energy(m, c, Theta, Od, Qd):
    """Kinetic energy of a rigid body moving as ``X_t = O_t + Q_t X``.

    Args:
        m: mass. c: centroid (d,) in local coordinates. Theta: second moment
            ``∫ X Xᵀ dm`` (d, d) about the local origin. Od: velocity of the
            local origin (d,). Qd: time derivative of the rotation (d, d).

    Returns:
        ``½ m |Ȯ|² + m Ȯ·(Q̇ c) + ½ tr(Q̇ Θ Q̇ᵀ)`` (one (d, d) matrix, so that
        the AD passes of the Lagrangian facility stay small).
    """
    Od, Qd = jnp.asarray(Od), jnp.asarray(Qd)
    return (0.5 * m * jnp.dot(Od, Od) + m * jnp.dot(Od, Qd @ jnp.asarray(c))
            + 0.5 * jnp.sum((Qd @ jnp.asarray(Theta)) * Qd))


# ------------------------------------------------------------------ mass properties
def _check_inertia(Theta_c) -> None:
    """Refuse a central second moment that no mass distribution has."""
    T = np.asarray(Theta_c, dtype=float)
    if np.any(np.linalg.eigvalsh(0.5 * (T + T.T)) < -1e-12 * max(1.0, abs(np.trace(T)))):
        raise InputError("the inertia violates the triangle inequality (no mass distribution has it)")


def second_moment(mass, centroid, inertia, origin=None, *, check=True):
    """Θ = ∫ X Xᵀ dm about ``origin`` from mass, centroid and central inertia.

    Args:
        mass: total mass.
        centroid: centroid (d,), d = 2 or 3.
        inertia: moment of inertia about the centroid: in 2-D the scalar
            polar moment; in 3-D a 3×3 inertia tensor or its 3 principal
            values (axes along the local axes).
        origin: point about which Θ is taken (default the local origin).
        check: refuse a non-physical inertia (needs numeric values; pass
            ``False`` for traced ones, checked elsewhere at their defaults).

    Returns:
        Θ as a (d, d) array.  In 3-D the central second moment is
        ``½ tr(I) 1 − I``; in 2-D only tr Θ enters T, and Θ = (I/2) 1.

    Raises:
        InputError: inconsistent dimensions or (``check``) a non-physical
            inertia.
    """
    xp = _xp(mass, centroid, inertia, origin)
    c = xp.asarray(centroid, dtype=xp.float64)
    d = c.shape[0] if c.ndim == 1 else 0
    if d not in (2, 3):
        raise InputError(f"centroid must have 2 or 3 components, got shape {c.shape}")
    I = xp.asarray(inertia, dtype=xp.float64)
    if d == 2:
        if I.shape != ():
            raise InputError(f"in 2-D the inertia is the scalar polar moment, got shape {I.shape}")
        Theta_c = 0.5 * I * xp.eye(2)
    else:
        if I.shape == (3,):
            I = xp.diag(I)
        if I.shape != (3, 3):
            raise InputError(f"in 3-D the inertia is a 3x3 tensor or 3 principal moments, "
                             f"got shape {I.shape}")
        Theta_c = 0.5 * xp.trace(I) * xp.eye(3) - I
    if check:
        _check_inertia(Theta_c)
    r = c if origin is None else c - xp.asarray(origin, dtype=xp.float64)
    return Theta_c + mass * xp.outer(r, r)


def canonical_mass_properties(E, mass, centroid, inertia, origin=None, *, check=True):
    """A body's centroid and second moment in canonical coordinates.

    Args:
        E: (d, d) canonical axes in the local frame (:func:`frame_rule`).
        mass, centroid, inertia: in the local frame (see :func:`second_moment`).
        origin: the local position of A (default the local origin).
        check: as :func:`second_moment`.

    Returns:
        ``(c, Θ)``: ``c = Eᵀ (centroid − origin)`` and ``Θ = Eᵀ Θ_local E``,
        the second moment about A in canonical axes.
    """
    xp = _xp(E, mass, centroid, inertia, origin)
    c = xp.asarray(centroid, dtype=xp.float64)
    if origin is not None:
        c = c - xp.asarray(origin, dtype=xp.float64)
    E = xp.asarray(E, dtype=xp.float64)
    return E.T @ c, E.T @ second_moment(mass, c, inertia, check=check) @ E


# ------------------------------------------------------------------ the frame rule
def frame_rule(vecs):
    """The canonical frame of a body from its local geometry.

    Args:
        vecs: the local vectors b (and c in 3-D) from A to the other basic
            items (or the basic vectors themselves): rows of an array with at
            least d − 1 rows of d numbers (rows after the first d − 1 are
            ignored).  Numeric or traced; not checked (see :class:`RigidFrame`).

    Returns:
        ``(E, R)``: E (d, d), columns the canonical axes in the local frame
        (orthonormal, right-handed); R the upper-triangular factor of
        ``[b, c] = [e1, e2] R`` as a tuple ``(r11,)`` in 2-D or
        ``(r11, r12, r22)`` in 3-D.  In canonical coordinates the columns
        of Q are the moving axes (:func:`frame_axes`) and ``W = Q Eᵀ`` maps
        local to world coordinates.
    """
    xp = _xp(vecs)
    b = vecs[0]
    r11 = xp.sqrt(xp.dot(b, b))
    e1 = b / r11
    if b.shape[0] == 2:
        return _stack([e1, _stack([-e1[1], e1[0]], xp=xp)], axis=1, xp=xp), (r11,)
    c = vecs[1]
    r12 = xp.dot(c, e1)
    w = c - r12 * e1
    r22 = xp.sqrt(xp.dot(w, w))
    e2 = w / r22
    return _stack([e1, e2, xp.cross(e1, e2)], axis=1, xp=xp), (r11, r12, r22)


def frame_axes(vecs, R) -> list:
    """The body's moving orthonormal axes [i, j, (k)]: the world columns of Q.

    Args:
        vecs: world vectors b (and c): B − A (or B for a vector), likewise C.
        R: the frame rule's factor (:func:`frame_rule`).

    Returns:
        List of d world vectors.
    """
    i = vecs[0] / R[0]
    if len(R) == 1:
        return [i, _stack([-i[1], i[0]])]
    j = (vecs[1] - R[1] * i) / R[2]
    return [i, j, jnp.cross(i, j)]


def frame_axes_rate(vecs, rates, R) -> list:
    """Rates [i̇, j̇, (k̇)] of :func:`frame_axes`; k = i × j gives k̇ = i̇ × j + i × j̇.

    Args:
        vecs, R: as :func:`frame_axes`. rates: the time derivatives of ``vecs``.
    """
    i = vecs[0] / R[0]
    di = rates[0] / R[0]
    if len(R) == 1:
        return [di, _stack([-di[1], di[0]])]
    j = (vecs[1] - R[1] * i) / R[2]
    dj = (rates[1] - R[1] * di) / R[2]
    return [di, dj, jnp.cross(di, j) + jnp.cross(i, dj)]


def columns(axes):
    """The (d, d) matrix whose columns are ``axes`` (Q from :func:`frame_axes`)."""
    return _stack(axes, axis=1)


def body_point(origin, axes, x):
    """World position ``A + Q x`` of the body point with canonical coordinates x.

    Written as ``A + Σ_k x_k axes_k``, so that no matrix product is traced.
    """
    out = x[0] * axes[0]
    for k in range(1, len(axes)):
        out = out + x[k] * axes[k]
    return origin + out


def rigidity_constraints(vecs, local_vecs) -> list:
    """Constraints (= 0) that keep the basic items in their local geometry.

    2-D: |b|² = |b₀|² (1 constraint; 4 − 1 = 3 DOF).  3-D: |b|², |c|², b·c
    equal to their local values (3 constraints; 9 − 3 = 6 DOF).

    Args:
        vecs: world vectors b (and c), as :func:`frame_axes`.
        local_vecs: their local values b₀ (and c₀).
    """
    b, b0 = vecs[0], local_vecs[0]
    out = [jnp.dot(b, b) - jnp.dot(b0, b0)]
    if b.shape[0] == 3:
        c, c0 = vecs[1], local_vecs[1]
        out += [jnp.dot(c, c) - jnp.dot(c0, c0), jnp.dot(b, c) - jnp.dot(b0, c0)]
    return out


# ------------------------------------------------------------------ constant bodies
class RigidFrame:
    """The frame rule for a body of constant geometry: rotation from its BPVs.

    Args:
        local: local coordinates of the BPVs [A, B] (2-D) or [A, B, C]
            (3-D), in any right-handed local frame of the body (e.g. the
            Mechanism YAML ``Geom`` with A at the origin).
        kinds: "point" or "vector" for each BPV; A must be a point.
            Default: all points.

    Attributes:
        dim: 2 or 3.
        E: (d, d) orthonormal; columns are the canonical axes in the given
            local frame (canonical X_K = Eᵀ (X_local − A_local)).
        R: upper-triangular (d−1)×(d−1) with positive diagonal (frame rule).
        U: (d, d−1) constant with ``[i_t, (j_t)] = [A_t, B_t, (C_t)] U``.

    Raises:
        InputError: wrong counts or kinds, or BPVs not in general position.
    """

    def __init__(self, local: Sequence, kinds: Sequence[str] | None = None):
        P = np.asarray(local, dtype=float)
        if P.ndim != 2 or P.shape[1] not in (2, 3) or P.shape[0] != P.shape[1]:
            raise InputError(
                f"a rigid frame needs d basic points/vectors of d coordinates (d = 2: A, B; "
                f"d = 3: A, B, C), got an array of shape {P.shape}")
        d = P.shape[1]
        kinds = tuple(kinds or ("point",) * d)
        if len(kinds) != d or any(k not in ("point", "vector") for k in kinds):
            raise InputError(f"kinds must be {d} entries, each 'point' or 'vector', got {kinds!r}")
        if kinds[0] != "point":
            raise InputError("the first basic item A must be a point (it is the frame origin)")
        self.dim, self.kinds, self.origin_local = d, kinds, P[0].copy()
        vecs = np.array([P[i] - P[0] if kinds[i] == "point" else P[i] for i in range(1, d)])
        if np.linalg.norm(vecs[0]) < 1e-12:
            raise InputError("B coincides with A (or is a zero vector): no frame")
        if d == 3:
            e1 = vecs[0] / np.linalg.norm(vecs[0])
            w = vecs[1] - (vecs[1] @ e1) * e1
            if np.linalg.norm(w) < 1e-12 * max(1.0, np.linalg.norm(vecs[1])):
                raise InputError("C is collinear with A and B: the BPVs are not in general position")
        E, r = frame_rule(vecs)
        self.E, self._r = np.asarray(E), tuple(float(x) for x in r)
        self.R = (np.array([[self._r[0]]]) if d == 2 else
                  np.array([[self._r[0], self._r[1]], [0.0, self._r[2]]]))
        D = np.zeros((d, d - 1))
        for col in range(d - 1):
            D[col + 1, col] = 1.0
            if kinds[col + 1] == "point":
                D[0, col] = -1.0
        self.U = D @ np.linalg.inv(self.R)
        self._local_vecs = vecs

    @classmethod
    def from_geom(cls, geom: Sequence, kinds: Sequence[str] | None = None) -> "RigidFrame":
        """Frame from the talk's ``Geom``: the BPVs after A, with A at the origin."""
        g = np.atleast_2d(np.asarray(geom, dtype=float))
        return cls(np.vstack([np.zeros(g.shape[1]), g]), kinds)

    def canonical_point(self, X_local):
        """Canonical coordinates of a point given in the local frame."""
        return self.E.T @ (np.asarray(X_local, dtype=float) - self.origin_local)

    def canonical_vector(self, u_local):
        """Canonical components of a vector given in the local frame."""
        return self.E.T @ np.asarray(u_local, dtype=float)

    def _vecs(self, items):
        """World b (and c) from the BPVs' positions (or their velocities)."""
        A = jnp.asarray(items[0])
        return [jnp.asarray(items[i]) - A if self.kinds[i] == "point" else jnp.asarray(items[i])
                for i in range(1, self.dim)]

    def axes(self, bpvs) -> list:
        """The moving axes (world columns of Q) from the BPVs (:func:`frame_axes`)."""
        return frame_axes(self._vecs(bpvs), self._r)

    def rotation(self, bpvs):
        """Q_t from the world positions of the BPVs.

        Args:
            bpvs: sequence [A_t, B_t, (C_t)] of world arrays (d,).

        Returns:
            (d, d) jnp array, columns the canonical axes in the world.
        """
        return columns(self.axes(bpvs))

    def rotation_rate(self, bpvs, bpv_velocities):
        """Q̇_t from BPV positions and velocities (:func:`frame_axes_rate`)."""
        return columns(frame_axes_rate(self._vecs(bpvs), self._vecs(bpv_velocities), self._r))

    def world_point(self, bpvs, X_local):
        """World position of a body point given in the local frame."""
        return body_point(jnp.asarray(bpvs[0]), self.axes(bpvs), self.canonical_point(X_local))

    def rigidity_constraints(self, bpvs) -> list:
        """Constraints (= 0) that keep the BPVs in their local geometry
        (:func:`rigidity_constraints`)."""
        return rigidity_constraints(self._vecs(bpvs), self._local_vecs)


class RigidBody:
    """A rigid body of constant geometry and mass: frame rule plus mass properties.

    Args:
        frame: its :class:`RigidFrame`.
        mass: mass.
        centroid: centroid in the frame's *local* coordinates.
        inertia: central inertia (see :func:`second_moment`), local axes.

    Attributes:
        c: centroid in canonical coordinates. Theta: second moment about A,
            canonical axes (:func:`canonical_mass_properties`).

    Raises:
        InputError: a mass that is not positive, a non-physical inertia.
    """

    def __init__(self, frame: RigidFrame, mass, centroid, inertia):
        if not float(mass) > 0:
            raise InputError(f"a rigid body's mass must be positive, got {mass!r}")
        self.frame, self.mass = frame, float(mass)
        I = np.asarray(inertia, dtype=float)
        if frame.dim == 3 and I.shape not in ((3,), (3, 3)):
            raise InputError(f"3-D inertia must be 3x3 or 3 principal values, got {I.shape}")
        c, Theta = canonical_mass_properties(frame.E, self.mass, centroid, I, frame.origin_local)
        self.c, self.Theta = np.asarray(c), np.asarray(Theta)

    @classmethod
    def from_dyna(cls, geom, dyna, kinds=None) -> "RigidBody":
        """From the talk's YAML: ``Geom`` (BPVs after A) and ``Dyna: [centroid, mass, inertia]``."""
        if len(dyna) != 3:
            raise InputError(f"Dyna must be [centroid, mass, inertia], got {len(dyna)} entries")
        return cls(RigidFrame.from_geom(geom, kinds), dyna[1], dyna[0], dyna[2])

    def kinetic_energy(self, bpvs, bpv_velocities):
        """T from the BPVs' world positions and velocities (jnp scalar)."""
        Qd = self.frame.rotation_rate(bpvs, bpv_velocities)
        return rigid_kinetic_energy(self.mass, self.c, self.Theta, jnp.asarray(bpv_velocities[0]), Qd)

    def centroid_position(self, bpvs):
        """World position of the centroid (e.g. for gravity m g·x_c)."""
        return body_point(jnp.asarray(bpvs[0]), self.frame.axes(bpvs), self.c)
