"""Models for the tests (and the initialisation benchmark), not part of the package.

Mechanical models built with the Lagrangian facility: each builder returns a
:class:`solver.mechanics.lagrangian.LagrangianDAE` whose physical constants are DAE
parameters (so sweeps can vary them).  Most come from the talk
(``shared/seeds/000_8ef9bbbd8e3e220d.txt``); the car is the "rigid frame on
four springs" of the vehicle-dynamics article.  Helpers give consistent
initial values where they are not obvious.  The cloth lives in
:mod:`solver.mechanics.cloth` (production code builds it) and is re-exported here.

Below them, a planar four-bar linkage written as a plain :class:`solver.DAE`
with its closed-form assembly, for the initialisation tests.
"""

from __future__ import annotations

import math

import numpy as np

import jax
import jax.numpy as jnp

from solver.mechanics.cloth import cloth, cloth_rest_positions
from solver.dae.problem import DAE
from solver.errors import InputError
from solver.mechanics.lagrangian import LagrangianDAE, lagrangian, point_force
from solver.mechanics.natural import assemble

__all__ = [
    "pendulum_cartesian", "pendulum_angle", "pendulum_chain", "two_particles_spring",
    "rigid_body_euler", "euler_zxz", "cloth", "cloth_rest_positions", "car",
    "rotation_zyx", "body_angular_velocity", "omega_zxz", "omega_zyx", "four_bar",
    "four_bar_assembly",
]


def _sq(v):
    return jnp.sum(v * v, axis=-1)


# ------------------------------------------------------------------ pendulum
def pendulum_cartesian(m=1.0, g=9.81, l=1.0) -> LagrangianDAE:
    """Simple pendulum in Cartesians (index 3), y downward (talk eq. 3).

    ``L = ½ m (x'² + y'²) + m g y``, ``C = x² + y² − ℓ²``; the facility
    produces ``m x'' + 2xλ = 0``, ``m y'' + 2yλ − mg = 0``, ``C = 0``.
    """
    def L(t, q, qd, p):
        return 0.5 * p["m"] * (qd["x"] ** 2 + qd["y"] ** 2) + p["m"] * p["g"] * q["y"]

    def C(t, q, p):
        return [q["x"] ** 2 + q["y"] ** 2 - p["l"] ** 2]

    return lagrangian(L, ["x", "y"], constraints=C, params={"m": m, "g": g, "l": l},
                      name="pendulum (Cartesian)", mass_blocks="diagonal")


def pendulum_angle(m=1.0, g=9.81, l=1.0) -> LagrangianDAE:
    """Simple pendulum by its angle θ from the downward vertical (an ODE).

    ``L = ½ m ℓ² θ'² + m g ℓ cos θ`` gives ``θ'' = −(g/ℓ) sin θ``.
    """
    def L(t, q, qd, p):
        return 0.5 * p["m"] * (p["l"] * qd["theta"]) ** 2 + p["m"] * p["g"] * p["l"] * jnp.cos(q["theta"])

    return lagrangian(L, ["theta"], params={"m": m, "g": g, "l": l}, name="pendulum (angle)")


def pendulum_chain(n: int, m=1.0, g=9.81, l=1.0) -> LagrangianDAE:
    """Chain of n pendula in 3-D Cartesians, z downward (talk eq. 4).

    Coordinate ``r`` (3n: bob i at r[3i:3i+3]), multipliers ``lam`` (n):
    ``L = ½ m Σ|r_i'|² + m g Σ z_i``, ``C_j = |r_j − r_{j−1}|² − ℓ²``, r_0 = 0.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"pendulum_chain: n must be a positive integer, got {n!r}")

    def L(t, q, qd, p):
        r, rd = q["r"].reshape(n, 3), qd["r"].reshape(n, 3)
        return 0.5 * p["m"] * jnp.sum(rd * rd) + p["m"] * p["g"] * jnp.sum(r[:, 2])

    def C(t, q, p):
        r = q["r"].reshape(n, 3)
        prev = jnp.pad(r[:-1], ((1, 0), (0, 0)))  # r_0 = 0 at the pivot
        return _sq(r - prev) - p["l"] ** 2

    return lagrangian(L, {"r": 3 * n}, constraints=C, params={"m": m, "g": g, "l": l},
                      name=f"chain of {n} pendula", mass_blocks="diagonal")


# ------------------------------------------------------------------ particles
def two_particles_spring(m1=1.0, m2=2.0, k=10.0, l0=1.0) -> LagrangianDAE:
    """Two particles in 3-D joined by a spring (seed 001), no gravity.

    ``V = ½ k (|x2 − x1| − l0)²``.  Along the line of centres the separation
    oscillates about l0 at ω = sqrt(k (m1 + m2) / (m1 m2)).
    """
    def L(t, q, qd, p):
        T = 0.5 * p["m1"] * _sq(qd["x1"]) + 0.5 * p["m2"] * _sq(qd["x2"])
        d = q["x2"] - q["x1"]
        return T - 0.5 * p["k"] * (jnp.sqrt(_sq(d)) - p["l0"]) ** 2

    return lagrangian(L, {"x1": 3, "x2": 3}, params={"m1": m1, "m2": m2, "k": k, "l0": l0},
                      name="two particles and a spring", mass_blocks={"x1": 1, "x2": 1})


# ------------------------------------------------------------------ rotations
def _rx(a):
    c, s = jnp.cos(a), jnp.sin(a)
    return jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _ry(a):
    c, s = jnp.cos(a), jnp.sin(a)
    return jnp.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _rz(a):
    c, s = jnp.cos(a), jnp.sin(a)
    return jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def euler_zxz(phi, theta, psi):
    """Rotation ``R = Rz(φ) Rx(θ) Rz(ψ)`` (classical Euler angles, body -> world)."""
    return _rz(phi) @ _rx(theta) @ _rz(psi)


def rotation_zyx(roll, pitch, yaw):
    """Rotation ``R = Rz(yaw) Ry(pitch) Rx(roll)`` (Tait–Bryan, body -> world).

    Entries written out (the product of the three factors) and assembled
    without stacking, which keeps the traced residual small and simple.
    """
    cf, sf = jnp.cos(roll), jnp.sin(roll)
    ct, st = jnp.cos(pitch), jnp.sin(pitch)
    cp, sp = jnp.cos(yaw), jnp.sin(yaw)
    return assemble([cp * ct, cp * st * sf - sp * cf, cp * st * cf + sp * sf,
                     sp * ct, sp * st * sf + cp * cf, sp * st * cf - cp * sf,
                     -st, ct * sf, ct * cf], (3, 3))


def body_angular_velocity(rotation, angles, rates):
    """Body-frame angular velocity ω with ω̂ = Rᵀ Ṙ, Ṙ by a jvp of ``rotation``.

    Args:
        rotation: callable (a, b, c) -> 3×3 rotation.
        angles, rates: the three angles and their time derivatives.

    Returns:
        ω (3,) in body axes.
    """
    R, Rd = jax.jvp(lambda a: rotation(a[0], a[1], a[2]), (jnp.asarray(angles),), (jnp.asarray(rates),))
    W = R.T @ Rd
    return jnp.stack([W[2, 1], W[0, 2], W[1, 0]])


def omega_zxz(phi, theta, psi, phid, thetad, psid):
    """Body angular velocity of ``euler_zxz`` (Goldstein's kinematic equations).

    Written out rather than taken from ``body_angular_velocity`` so that the
    Lagrangian's jaxpr stays small (it is differentiated twice more).
    """
    return (phid * jnp.sin(theta) * jnp.sin(psi) + thetad * jnp.cos(psi),
            phid * jnp.sin(theta) * jnp.cos(psi) - thetad * jnp.sin(psi),
            phid * jnp.cos(theta) + psid)


def omega_zyx(roll, pitch, yaw, rolld, pitchd, yawd):
    """Body angular velocity of ``rotation_zyx`` (Tait–Bryan kinematics)."""
    return (rolld - yawd * jnp.sin(pitch),
            pitchd * jnp.cos(roll) + yawd * jnp.cos(pitch) * jnp.sin(roll),
            yawd * jnp.cos(pitch) * jnp.cos(roll) - pitchd * jnp.sin(roll))


# ------------------------------------------------------------------ rigid body
def rigid_body_euler(m=1.0, I1=1.0, I2=2.0, I3=3.0) -> LagrangianDAE:
    """Free rigid body: centre of mass ``x`` (3) and Euler angles φ, θ, ψ (ZXZ).

    ``L = ½ m|x'|² + ½ Σ I_k ω_k²`` with ω the body angular velocity of
    ``R = Rz(φ)Rx(θ)Rz(ψ)`` (principal axes; singular at sin θ = 0).
    """
    def L(t, q, qd, p):
        w1, w2, w3 = omega_zxz(q["phi"], q["theta"], q["psi"], qd["phi"], qd["theta"], qd["psi"])
        rot = p["I1"] * w1 ** 2 + p["I2"] * w2 ** 2 + p["I3"] * w3 ** 2
        return 0.5 * p["m"] * _sq(qd["x"]) + 0.5 * rot

    return lagrangian(L, {"x": 3, "phi": None, "theta": None, "psi": None},
                      params={"m": m, "I1": I1, "I2": I2, "I3": I3},
                      name="free rigid body (Euler angles)", mass_blocks={"x": 1})


# ------------------------------------------------------------------ car
def car(m=300.0, Ixx=60.0, Iyy=120.0, Izz=150.0, k=3.0e4, c=0.0, h0=0.5, a=1.2, b=0.7,
        g=9.81, forces=None) -> LagrangianDAE:
    """A rigid frame on four vertical springs (simplified car, seed 004).

    Coordinates: ``x`` (3, centre of mass, z up) and ``ang`` (roll, pitch,
    yaw; ``R = Rz(yaw)Ry(pitch)Rx(roll)``).  Corner i sits at body point
    s_i = (±a, ±b, 0); its spring to the ground plane has energy
    ``½ k (z_i − h0)²`` (the contact point slides freely) and dissipation
    ``½ c z_i'²``.  External inputs: parameter ``F`` (4×3), the force on
    each corner in body axes (tyre longitudinal/lateral/vertical), applied
    through :func:`point_force`.

    Args:
        forces: initial value of the parameter F (default zeros).
    """
    s = np.array([[a, b, 0.0], [a, -b, 0.0], [-a, b, 0.0], [-a, -b, 0.0]])

    def R_of(q):
        return rotation_zyx(q["ang"][0], q["ang"][1], q["ang"][2])

    def corners(q):
        return q["x"] + s @ R_of(q).T  # (4, 3)

    def heights(q):
        # Third row of R = (−sin pitch, cos pitch sin roll, cos pitch cos roll);
        # the corners have s_z = 0.
        roll, pitch = q["ang"][0], q["ang"][1]
        return q["x"][2] - jnp.sin(pitch) * s[:, 0] + jnp.cos(pitch) * jnp.sin(roll) * s[:, 1]

    def L(t, q, qd, p):
        w1, w2, w3 = omega_zyx(q["ang"][0], q["ang"][1], q["ang"][2],
                               qd["ang"][0], qd["ang"][1], qd["ang"][2])
        T = 0.5 * p["m"] * _sq(qd["x"]) + 0.5 * (p["Ixx"] * w1 ** 2 + p["Iyy"] * w2 ** 2
                                                 + p["Izz"] * w3 ** 2)
        V = p["m"] * p["g"] * q["x"][2] + 0.5 * p["k"] * jnp.sum((heights(q) - p["h0"]) ** 2)
        return T - V

    def Rd(t, q, qd, p):
        zd = jax.jvp(heights, (q,), (qd,))[1]
        return 0.5 * p["c"] * jnp.sum(zd * zd)

    # All four corners as one (4, 3) "point": one vjp instead of four.
    corner_forces = point_force(lambda t, q, p: corners(q), lambda t, q, qd, p: p["F"] @ R_of(q).T)

    F0 = np.zeros((4, 3)) if forces is None else np.asarray(forces, dtype=float)
    if F0.shape != (4, 3):
        raise InputError(f"car: forces must have shape (4, 3) (corner, body axis), got {F0.shape}")
    return lagrangian(L, {"x": 3, "ang": 3}, dissipation=Rd,
                      forces=corner_forces,
                      params={"m": m, "Ixx": Ixx, "Iyy": Iyy, "Izz": Izz, "k": k, "c": c,
                              "h0": h0, "g": g, "F": F0},
                      name="car: rigid frame on four springs", mass_blocks={"x": 1})


# ------------------------------------------------------------------ four-bar linkage
# Planar, in natural (Cartesian) coordinates: ground pivots A = (0, 0) and
# D = (d, 0), crank A–B of length a, coupler B–C of length b, rocker C–D of
# length c.  The moving joints B and C carry point masses m under gravity g
# (−y).  Unknowns: B (2), C (2) and the three multipliers lam of the
# link-length constraints; an index-3 DAE with two degrees of freedom (one
# position, one velocity).  four_bar_assembly gives the closed-form positions
# and velocities for a crank angle and speed on either assembly branch (the
# textbook intersection of two circles), so tests compare against geometry,
# not against the solver.


def _four_bar_residual(t, v, p):
    B, C, lam = v["B"], v["C"], v["lam"][0]
    # Spread each multiplier over the two components explicitly: the Taylor
    # engine's product rule wants equal shapes for two series.
    l0, l1, l2 = (jnp.broadcast_to(lam[k], (2,)) for k in range(3))
    D = jnp.concatenate([p["d"][None], 0.0 * p["d"][None]])
    grav = jnp.concatenate([0.0 * p["g"][None], p["m"][None] * p["g"][None]])
    eq_b = p["m"] * B[2] + grav + 2.0 * l0 * B[0] + 2.0 * l1 * (B[0] - C[0])
    eq_c = p["m"] * C[2] + grav + 2.0 * l1 * (C[0] - B[0]) + 2.0 * l2 * (C[0] - D)
    # (jnp.stack has no Taylor rule; concatenation does.)
    cons = jnp.concatenate([
        (jnp.sum(B[0] ** 2) - p["a"] ** 2)[None],
        (jnp.sum((C[0] - B[0]) ** 2) - p["b"] ** 2)[None],
        (jnp.sum((C[0] - D) ** 2) - p["c"] ** 2)[None],
    ])
    return [eq_b, eq_c, cons]


def four_bar(a=1.0, b=3.0, c=2.5, d=3.0, m=1.0, g=9.81) -> DAE:
    """The four-bar linkage DAE (see the comment above).

    Args:
        a, b, c, d: crank, coupler, rocker and ground link lengths.
        m: mass of each moving joint.
        g: gravity.

    Returns:
        solver.DAE with variables ``B`` (2), ``C`` (2), ``lam`` (3) and
        parameters ``a, b, c, d, m, g``.  The hidden constraints are the
        three length constraints (``f2[i]``) and their time derivatives
        (``f2[i]'``).
    """
    return DAE(_four_bar_residual, variables={"B": 2, "C": 2, "lam": 3},
               params={"a": a, "b": b, "c": c, "d": d, "m": m, "g": g}, name="four-bar linkage")


def four_bar_assembly(theta, omega, a, b, c, d, branch=+1):
    """Closed-form assembled state for crank angle ``theta`` and speed ``omega``.

    ``C`` is the intersection of the circle of radius ``b`` about ``B`` with
    the circle of radius ``c`` about ``D``; ``branch = +1`` takes it to the
    left of the direction ``B -> D`` (elbow up for a crank near the x axis),
    ``-1`` to the right.  Velocities from the differentiated constraints.

    Args:
        theta, omega: crank angle and angular velocity.
        a, b, c, d: link lengths.
        branch: +1 or -1.

    Returns:
        dict with numpy arrays ``B, C, Bd, Cd``.

    Raises:
        ValueError: the links cannot close at this crank angle.
    """
    B = a * np.array([math.cos(theta), math.sin(theta)])
    D = np.array([d, 0.0])
    e = D - B
    r = float(np.hypot(*e))
    x = (b * b - c * c + r * r) / (2 * r)
    h2 = b * b - x * x
    if h2 < 0:
        raise ValueError(f"the four-bar ({a}, {b}, {c}, {d}) cannot close at crank angle {theta}")
    u = e / r
    C = B + x * u + branch * math.sqrt(h2) * np.array([-u[1], u[0]])
    Bd = a * omega * np.array([-math.sin(theta), math.cos(theta)])
    # (C − B)·(C' − B') = 0 and (C − D)·C' = 0.
    M = np.array([C - B, C - D])
    Cd = np.linalg.solve(M, np.array([(C - B) @ Bd, 0.0]))
    return {"B": B, "C": C, "Bd": Bd, "Cd": Cd}


# The Cartesian pendulum as a DAE-kind model file: the base of the bad-input
# tables and of the CLI tests that need a small, valid model.
PENDULUM_YAML = """Title: P
Kind: DAE
PhysicalParams: {g: 9.81, L: 1.0}
Variables: [x, y, lam]
Equations:
  - x'' + lam*x
  - y'' + lam*y - g
  - x**2 + y**2 - L**2
ProblemData:
  tend: 1
  values: {x: L, y: 0, x': 0, y': 0}
  fixed: [x, x']
"""
