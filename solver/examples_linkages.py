"""Planar linkages in natural (Cartesian) coordinates, for initialisation tests.

A four-bar linkage: ground pivots ``A = (0, 0)`` and ``D = (d, 0)``, crank
``A–B`` of length ``a``, coupler ``B–C`` of length ``b``, rocker ``C–D`` of
length ``c``.  The moving joints ``B`` and ``C`` carry point masses ``m``
under gravity ``g`` (−y).  Unknowns: ``B`` (2), ``C`` (2) and the three
multipliers ``lam`` of the link-length constraints; an index-3 DAE with two
degrees of freedom (one position, one velocity).

:func:`four_bar_assembly` gives the closed-form positions and velocities for
a crank angle and speed on either assembly branch (the textbook intersection
of two circles), so tests compare against geometry, not against the solver.
"""

from __future__ import annotations

import math

import numpy as np

import jax.numpy as jnp

from .dae import DAE

__all__ = ["four_bar", "four_bar_assembly"]


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
    """The four-bar linkage DAE (see the module docstring).

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
