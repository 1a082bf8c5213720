"""The talk's damped particle–spring cloth: an m×n grid built with the Lagrangian facility.

:func:`cloth` is the model behind the ``Lagrangian`` kind's ``Generator:
{cloth: ...}`` (:mod:`solver.models.lagrangian_kind`) and the cloth
benchmark; :func:`cloth_rest_positions` gives its grid at rest.  Written
vectorised over the grid, because a grid of particles cannot be written in
the YAML expression language (it has no loops or index arithmetic).
"""

from __future__ import annotations

import numpy as np

import jax.numpy as jnp

from solver.errors import InputError, format_bytes, how_to_raise, limit
from solver.mechanics.lagrangian import LagrangianDAE, lagrangian

__all__ = ["cloth", "cloth_rest_positions", "cloth_size_problem", "MAX_CLOTH_PARTICLES"]

MAX_CLOTH_PARTICLES = 10_000
"""Most particles (m x n) of a cloth: 100 x 100, 30,000 coordinates.  The
benchmarks go to 90 x 90; much larger grids cannot be compiled in useful
time, and a typo (an extra zero) must not allocate the machine's memory.
``MECHSWEEP_MAX_CLOTH_PARTICLES`` overrides it."""

# Numbers (float64) the solver keeps per particle and Taylor coefficient:
# position and velocity, 3 components each.
_STATE_PER_PARTICLE = 6


def cloth_size_problem(m: int, n: int) -> str | None:
    """Why an m x n cloth is too large, or ``None`` when it is within the limit.

    The message states the memory of one state (positions and velocities),
    which the solver holds many times over (Taylor coefficients, outputs).
    """
    cap = limit("MAX_CLOTH_PARTICLES", MAX_CLOTH_PARTICLES)
    particles = m * n
    if particles <= cap:
        return None
    state = 8.0 * _STATE_PER_PARTICLE * particles
    return (f"a cloth of {m} x {n} = {particles} particles has {3 * particles} coordinates; one "
            f"state (positions and velocities) alone would need {format_bytes(state)}, and the "
            f"solver keeps it for every Taylor coefficient and output time; the limit is {cap} "
            f"particles (MAX_CLOTH_PARTICLES); lower rows or cols, or "
            f"{how_to_raise('MAX_CLOTH_PARTICLES')}")


def _sq(v):
    return jnp.sum(v * v, axis=-1)


def _spring_energy(a, b, p):
    """Σ ½ k (|b − a| − l)² over springs between arrays of end points (…, 3)."""
    length = jnp.sqrt(_sq(b - a))
    return 0.5 * p["k"] * jnp.sum((length - p["l"]) ** 2)


def cloth_rest_positions(m: int, n: int, dx=1.0, dy=1.0, z=0.0) -> np.ndarray:
    """Grid positions (m, n, 3) of particles (i, j), i = 1..m, j = 1..n: (i·dx, j·dy, z)."""
    i, j = np.meshgrid(np.arange(1, m + 1), np.arange(1, n + 1), indexing="ij")
    return np.stack([i * dx, j * dy, np.full(i.shape, float(z))], axis=-1)


def cloth(m: int, n: int, M=1.0, k=100.0, l=1.0, kd=1.0, g=9.81, dx=1.0, dy=1.0,
          fixed: str = "edges") -> LagrangianDAE:
    """Damped particle–spring cloth of m×n particles (talk), vectorised.

    Coordinate ``r`` of size 3mn (particle (i, j) at ``r.reshape(m, n, 3)[i-1, j-1]``),
    z upward.  Each particle has mass M and energy M g z; each spring
    ``½ k (|Δr| − l)²`` and, between two moving particles, dissipation
    ``½ kd |Δr'|²`` (the talk's table; boundary springs undamped).

    Args:
        m, n: grid size.
        fixed: ``"edges"``: as in the talk, indices 0 and m+1 (n+1) are fixed
            positions (i·dx, j·dy, 0) joined by springs to the border
            particles (an ODE of size 3mn).  ``"corners"``: no fixed ring;
            the four corner particles are held at their rest positions by 12
            constraints (an index-3 DAE).

    Raises:
        InputError: bad sizes (below 2, or more than
            :data:`MAX_CLOTH_PARTICLES` particles) or ``fixed``.
    """
    for nm, v in (("m", m), ("n", n)):
        if not isinstance(v, (int, np.integer)) or v < 2:
            raise InputError(f"cloth: {nm} must be an integer >= 2, got {v!r}")
    problem = cloth_size_problem(int(m), int(n))
    if problem:
        raise InputError(f"cloth: {problem}")
    if fixed not in ("edges", "corners"):
        raise InputError(f"cloth: fixed must be 'edges' or 'corners', got {fixed!r}")
    gi, gj = np.meshgrid(np.arange(m + 2), np.arange(n + 2), indexing="ij")
    ring = np.ones((m + 2, n + 2, 1))
    ring[1:-1, 1:-1] = 0.0
    unit_i = (gi[..., None] * np.array([1.0, 0.0, 0.0])) * ring
    unit_j = (gj[..., None] * np.array([0.0, 1.0, 0.0])) * ring

    def L(t, q, qd, p):
        r, rd = q["r"].reshape(m, n, 3), qd["r"].reshape(m, n, 3)
        T = 0.5 * p["M"] * jnp.sum(rd * rd)
        V = p["M"] * p["g"] * jnp.sum(r[..., 2])
        if fixed == "edges":
            # Padded (m+2)x(n+2) grid: the ring holds the fixed positions.
            # Horizontal springs (i, j)-(i, j+1), i = 1..m, j = 0..n; vertical
            # (i, j)-(i+1, j), i = 0..m, j = 1..n (ring corners are unused).
            P = jnp.pad(r, ((1, 1), (1, 1), (0, 0))) + p["dx"] * unit_i + p["dy"] * unit_j
            V = V + _spring_energy(P[1:-1, :-1], P[1:-1, 1:], p) \
                  + _spring_energy(P[:-1, 1:-1], P[1:, 1:-1], p)
        else:
            V = V + _spring_energy(r[:, :-1], r[:, 1:], p) + _spring_energy(r[:-1], r[1:], p)
        return T - V

    def R(t, q, qd, p):
        rd = qd["r"].reshape(m, n, 3)
        return 0.5 * p["kd"] * (jnp.sum((rd[:, 1:] - rd[:, :-1]) ** 2)
                                + jnp.sum((rd[1:] - rd[:-1]) ** 2))

    constraints = None
    if fixed == "corners":
        ci = np.array([1, 1, m, m], dtype=float)
        cj = np.array([1, n, 1, n], dtype=float)
        rest_i = np.ravel(np.stack([ci, 0 * ci, 0 * ci], axis=-1))
        rest_j = np.ravel(np.stack([0 * cj, cj, 0 * cj], axis=-1))

        def constraints(t, q, p):
            r = q["r"].reshape(m, n, 3)
            # Static slices (not a gather) keep the jaxpr simple for the Taylor engine.
            held = [r[0, 0], r[0, n - 1], r[m - 1, 0], r[m - 1, n - 1]]
            rest = (p["dx"] * rest_i + p["dy"] * rest_j).reshape(4, 3)
            return [h - rest[c] for c, h in enumerate(held)]

    return lagrangian(L, {"r": 3 * m * n}, constraints=constraints, dissipation=R,
                      params={"M": M, "k": k, "l": l, "kd": kd, "g": g, "dx": dx, "dy": dy},
                      name=f"cloth {m}x{n} ({fixed} fixed)", mass_blocks="diagonal")
