"""Natural-coordinate kinetic energies (the talk; METHOD.md §7).

A rigid body is tracked by the world positions of a few basic points/vectors
(BPVs) fixed on it: A (always a point), B and, in 3-D, C (each a point or a
vector).  With the talk's *frame rule* the body's canonical local frame has A
at the origin, B on the +x axis and C in the upper xy half-plane, so that

    [b, c] = [i_t, j_t] R,     R upper triangular with positive diagonal,

where b = B − A (or B for a vector) and likewise c.  Hence the first two
columns of the rotation are a *constant* linear map of the BPVs,
``[i_t, j_t] = [A_t, B_t, C_t] U`` with ``U = D R⁻¹``, and ``k_t = i_t × j_t``
(in 2-D, ``j_t`` is ``i_t`` turned by +90°).  The body's motion is
``X_t = A_t + Q_t X`` for X in canonical coordinates, and its kinetic energy

    T = ½ m |Ȧ|² + m Ȧ·(Q̇ c) + ½ tr(Q̇ Θ Q̇ᵀ),   Θ = ∫ X Xᵀ dm,

with c the centroid and Θ the second moment about A, both canonical.  Q
built with the constant U is a rotation only while the body's rigidity
constraints hold (:meth:`RigidFrame.rigidity_constraints`); the DAE keeps them.

All functions are pure ``jax.numpy`` and differentiable, for use inside
Lagrangians given to :func:`solver.lagrangian.lagrangian`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

import jax
import jax.numpy as jnp

from .errors import InputError

__all__ = [
    "assemble",
    "cross3",
    "particle_kinetic_energy",
    "rod_kinetic_energy",
    "rigid_kinetic_energy",
    "second_moment",
    "RigidFrame",
    "RigidBody",
]


def _dot(a, b):
    return jnp.sum(a * b, axis=-1)


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
        ``½ m |Ȯ|² + m Ȯ·(Q̇ c) + ½ tr(Q̇ Θ Q̇ᵀ)``.
    """
    Od, Qd = jnp.asarray(Od), jnp.asarray(Qd)
    return (0.5 * m * jnp.dot(Od, Od) + m * jnp.dot(Od, Qd @ jnp.asarray(c))
            + 0.5 * jnp.sum((Qd @ jnp.asarray(Theta)) * Qd))


def second_moment(mass, centroid, inertia, origin=None):
    """Θ = ∫ X Xᵀ dm about ``origin`` from mass, centroid and central inertia.

    Args:
        mass: total mass.
        centroid: centroid (d,), d = 2 or 3.
        inertia: moment of inertia about the centroid: in 2-D the scalar
            polar moment; in 3-D a 3×3 inertia tensor or its 3 principal
            values (axes along the local axes).
        origin: point about which Θ is taken (default the local origin).

    Returns:
        Θ as a numpy (d, d) array.  In 3-D the central second moment is
        ``½ tr(I) 1 − I``; in 2-D only tr Θ enters T, and Θ = (I/2) 1.

    Raises:
        InputError: inconsistent dimensions or a non-physical inertia.
    """
    c = np.asarray(centroid, dtype=float)
    d = c.shape[0] if c.ndim == 1 else 0
    if d not in (2, 3):
        raise InputError(f"centroid must have 2 or 3 components, got shape {c.shape}")
    I = np.asarray(inertia, dtype=float)
    if d == 2:
        if I.shape != ():
            raise InputError(f"in 2-D the inertia is the scalar polar moment, got shape {I.shape}")
        Theta_c = 0.5 * float(I) * np.eye(2)
    else:
        if I.shape == (3,):
            I = np.diag(I)
        if I.shape != (3, 3):
            raise InputError(f"in 3-D the inertia is a 3x3 tensor or 3 principal moments, "
                             f"got shape {I.shape}")
        Theta_c = 0.5 * np.trace(I) * np.eye(3) - I
    if np.any(np.linalg.eigvalsh(0.5 * (Theta_c + Theta_c.T)) < -1e-12 * max(1.0, abs(np.trace(Theta_c)))):
        raise InputError("the inertia violates the triangle inequality (no mass distribution has it)")
    r = c - (np.zeros(d) if origin is None else np.asarray(origin, dtype=float))
    return Theta_c + mass * np.outer(r, r)


class RigidFrame:
    """The frame rule: rotation of a body from its basic points/vectors.

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
        vecs = [P[i] - P[0] if kinds[i] == "point" else P[i] for i in range(1, d)]
        b = vecs[0]
        if np.linalg.norm(b) < 1e-12:
            raise InputError("B coincides with A (or is a zero vector): no frame")
        e1 = b / np.linalg.norm(b)
        if d == 2:
            e2 = np.array([-e1[1], e1[0]])
            E = np.column_stack([e1, e2])
            R = np.array([[b @ e1]])
        else:
            c = vecs[1]
            w = c - (c @ e1) * e1
            if np.linalg.norm(w) < 1e-12 * max(1.0, np.linalg.norm(c)):
                raise InputError("C is collinear with A and B: the BPVs are not in general position")
            e2 = w / np.linalg.norm(w)
            E = np.column_stack([e1, e2, np.cross(e1, e2)])
            R = np.array([[b @ e1, c @ e1], [0.0, c @ e2]])
        D = np.zeros((d, d - 1))
        for col in range(d - 1):
            D[col + 1, col] = 1.0
            if kinds[col + 1] == "point":
                D[0, col] = -1.0
        self.E, self.R, self.U = E, R, D @ np.linalg.inv(R)
        self._local_vecs = np.array(vecs)

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

    def rotation(self, bpvs):
        """Q_t from the world positions of the BPVs.

        Args:
            bpvs: sequence [A_t, B_t, (C_t)] of world arrays (d,).

        Returns:
            (d, d) jnp array, columns the canonical axes in the world.
        """
        # [i, j] = [A, B, C] U as sums of scaled BPVs (no stacking, see assemble).
        cols = [sum(float(self.U[r, k]) * jnp.asarray(bpvs[r]) for r in range(self.dim)
                    if self.U[r, k] != 0.0) for k in range(self.dim - 1)]
        i = cols[0]
        if self.dim == 2:
            return assemble([i[0], -i[1], i[1], i[0]], (2, 2))
        j = cols[1]
        k = cross3(i, j)
        return assemble([i[0], j[0], k[0], i[1], j[1], k[1], i[2], j[2], k[2]], (3, 3))

    def rotation_rate(self, bpvs, bpv_velocities):
        """Q̇_t from BPV positions and velocities (a jvp of :meth:`rotation`)."""
        prim = tuple(jnp.asarray(x, dtype=jnp.float64) for x in bpvs)
        tan = tuple(jnp.asarray(x, dtype=jnp.float64) for x in bpv_velocities)
        return jax.jvp(lambda *x: self.rotation(x), prim, tan)[1]

    def world_point(self, bpvs, X_local):
        """World position of a body point given in the local frame."""
        return jnp.asarray(bpvs[0]) + self.rotation(bpvs) @ self.canonical_point(X_local)

    def rigidity_constraints(self, bpvs) -> list:
        """Constraints (= 0) that keep the BPVs in their local geometry.

        2-D: |b|² = const (1 constraint; 4 − 1 = 3 DOF).  3-D: |b|², |c|²,
        b·c = const (3 constraints; 9 − 3 = 6 DOF).
        """
        pts = [jnp.asarray(x) for x in bpvs]
        vecs = [pts[i] - pts[0] if self.kinds[i] == "point" else pts[i] for i in range(1, self.dim)]
        lv = self._local_vecs
        out = [jnp.dot(vecs[0], vecs[0]) - lv[0] @ lv[0]]
        if self.dim == 3:
            out += [jnp.dot(vecs[1], vecs[1]) - lv[1] @ lv[1], jnp.dot(vecs[0], vecs[1]) - lv[0] @ lv[1]]
        return out


class RigidBody:
    """A rigid body in natural coordinates: frame rule plus mass properties.

    Args:
        frame: its :class:`RigidFrame`.
        mass: mass.
        centroid: centroid in the frame's *local* coordinates.
        inertia: central inertia (see :func:`second_moment`), local axes.

    Attributes:
        c: centroid in canonical coordinates. Theta: second moment about A,
            canonical axes.
    """

    def __init__(self, frame: RigidFrame, mass, centroid, inertia):
        if not float(mass) > 0:
            raise InputError(f"a rigid body's mass must be positive, got {mass!r}")
        self.frame, self.mass = frame, float(mass)
        E = frame.E
        I = np.asarray(inertia, dtype=float)
        if frame.dim == 3:
            I = np.diag(I) if I.shape == (3,) else I
            if I.shape != (3, 3):
                raise InputError(f"3-D inertia must be 3x3 or 3 principal values, got {I.shape}")
            I = E.T @ I @ E
        self.c = frame.canonical_point(centroid)
        self.Theta = second_moment(self.mass, self.c, I)

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
        return jnp.asarray(bpvs[0]) + self.frame.rotation(bpvs) @ self.c
