"""End stops, joint limits and contacts: unilateral constraints with Newton's impact law.

A stop is a gap function ``g(t, q, p) >= 0`` of the coordinates (a joint
angle's distance to its limit, a slider's distance to the end of its
stroke, a point's height above a plane) with a coefficient of restitution
``e`` in [0, 1].  Between impacts the motion is the smooth one; the gap is
watched as an event (:class:`solver.Event`, direction ``down``) and the step
is cut where it closes (g = 0, g' < 0).  There the velocities jump by
Newton's impact law, solved together with the bilateral constraints (the
KKT system of the impulse)::

    [ M   Gᵀ  wᵀ ] [ v⁺ − v⁻ ]   [ 0              ]
    [ G   0   0  ] [ −Λ      ] = [ 0              ]
    [ w   0   0  ] [ −P      ]   [ −(1 + e) w v⁻  ]

with ``M = ∂²L/∂q'²``, ``G`` the Jacobian of the bilateral constraints (so
``G v⁺ = 0``: the mechanism stays assembled), ``w = ∂g/∂q`` (so the normal
velocity after is ``w v⁺ = −e w v⁻``) and ``P`` the contact impulse (Siconos's
reaction ``p`` integrated over the impact), recorded as ``event_impulse``.  The law reads the positions of
the Taylor polynomial at the crossing; the integrator then projects the new state onto the constraints and
restarts the Taylor series from it.

When impacts accumulate (``e < 1``: a bouncing body's flights shorten
geometrically, and infinitely many impacts happen in finite time, the Zeno
phenomenon), the run ends with status ``zeno`` at the first impact closer
than ``zeno_time`` to the previous one of the same stop, or at once after a
plastic impact (``e = 0``): the body has come to rest on the stop.  Holding
the contact as a bilateral constraint until it lifts off is not built.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from solver.dae.event import Event
from solver.errors import InputError
from solver.numerics import linalg

__all__ = ["Stop", "stop_events"]


@dataclasses.dataclass(frozen=True)
class Stop:
    """A unilateral constraint ``gap(t, q, p) >= 0`` with Newton's impact law.

    Attributes:
        name: the stop's name (its impacts are events of that name).
        gap: ``gap(t, q, p) -> scalar``; ``q`` a dict coordinate -> array.
        restitution: the coefficient of restitution in [0, 1], a number or
            a function ``restitution(p)`` of the parameters (so a sweep can
            vary it).
        zeno_time: impacts of this stop closer together than this end the
            run with status ``zeno``; None: ``1e-5 * max(1, |t1|)``.
    """

    name: str
    gap: Callable
    restitution: float | Callable = 1.0
    zeno_time: float | None = None

    def __post_init__(self):
        if not callable(self.gap):
            raise InputError(f"stop {self.name!r}: the gap must be a callable gap(t, q, p)")
        if not callable(self.restitution):
            e = float(self.restitution)
            if not 0.0 <= e <= 1.0:
                raise InputError(f"stop {self.name!r}: restitution must be in [0, 1] (0 plastic, 1 elastic); "
                                 f"got {e:g}")

    def restitution_of(self, p):
        """The coefficient of restitution for parameters ``p``."""
        return self.restitution(p) if callable(self.restitution) else jnp.asarray(float(self.restitution))


def stop_events(dae, stops) -> list:
    """The events of a Lagrangian DAE's stops: gap crossings downward, with the impact as reset.

    Args:
        dae: the :class:`~solver.mechanics.lagrangian.LagrangianDAE`.
        stops: a list of :class:`Stop`.

    Returns:
        A list of :class:`solver.Event` (kind ``stop``).

    Raises:
        InputError: an entry that is not a Stop.
    """
    out = []
    for s in stops or ():
        if not isinstance(s, Stop):
            raise InputError(f"stops must be solver.mechanics.stops.Stop objects; got {type(s).__name__}")
        out.append(Event(s.name, _gap_event(dae, s), direction="down", reset=_impact(dae, s), kind="stop",
                         restitution=s.restitution_of, zeno_time=s.zeno_time))
    dae.stops = tuple(dae.stops if hasattr(dae, "stops") else ()) + tuple(stops or ())
    return out


def _positions(dae, v):
    return {c.name: v[c.name][0] for c in dae.coords}


def _gap_event(dae, stop):
    def g(t, v, p):
        return jnp.reshape(stop.gap(t, _positions(dae, v), p), ())

    return g


def _impact(dae, stop):
    def reset(t, v, p):
        q = _positions(dae, v)
        qd = {c.name: v[c.name][1] for c in dae.coords}
        M = dae._k_mass(t, q, qd, p)
        vm = dae._flatten(qd)
        w = jax.grad(lambda x: jnp.reshape(stop.gap(t, dae._unflatten(x), p), ()))(dae._flatten(q))
        e = stop.restitution_of(p)
        rows = [w[None, :]]
        if dae.n_c:
            rows.insert(0, dae._k_cjac(t, q, p))
        A_c = jnp.concatenate(rows)  # (n_c + 1, n_q): bilateral rows, then the contact row
        k = A_c.shape[0]
        K = jnp.block([[M, A_c.T], [A_c, jnp.zeros((k, k))]])
        rhs = jnp.concatenate([jnp.zeros(dae.n_q), jnp.zeros(k - 1), -(1.0 + e) * jnp.dot(w, vm)[None]])
        sol = linalg.solve(K, rhs)
        vp = dae._unflatten(vm + sol[: dae.n_q])
        # M dv = -A_cᵀ λ: the contact's generalised impulse is wᵀ P with P = -λ of its row.
        return {c.name: [v[c.name][0], vp[c.name]] for c in dae.coords}, -sol[-1]

    return reset
