"""The Siconos ``LagrangianDS`` view of a Lagrangian model (seed 002).

Siconos (Acary, Brogliato et al.) writes a Lagrangian dynamical system as

    M(q) q'' + F_gyr(q, v) + F_int(t, q, v) = F_ext(t) + p,

with v = q' and p the reactions of the constraints, and asks for the
Jacobians of F_gyr and F_int with respect to q and v.  mechsweep builds the
same system by AD from L, R and Q (:mod:`solver.mechanics.lagrangian`): its Euler–
Lagrange rows are ``M q'' + bias(t, q, v) + Gᵀλ = 0``.  This module reads
the Siconos pieces off it, so a model written for mechsweep can be handed
to a Siconos-style (nonsmooth, event-driven or time-stepping) integrator:

* ``M(q) = ∂²L/∂v²``;
* ``F_gyr(q, v)``: the part of ``bias`` quadratic in v (the gyroscopic and
  centrifugal forces, ``½ d²/dε² bias(q, εv)`` at ε = 0);
* ``F_int(t, q, v) = bias − F_gyr``: potential, dissipative and applied
  forces (with the sign of the left-hand side);
* ``F_ext(t) = 0``: mechsweep's applied forces may depend on the state, so
  they are all in ``F_int``;
* the constraint Jacobian ``G = ∂g/∂q`` (``p = −Gᵀλ`` with mechsweep's λ);
* the non-smooth interactions, the model's stops: their gaps ``g_i(q) >= 0``,
  the contact Jacobian ``W = ∂g/∂q`` and the restitutions of Newton's impact
  law (mechsweep's impacts record the impulse ``P``, Siconos's ``p``
  integrated over the impact: ``event_impulse``).

Every function takes flat arrays (coordinates in the model's order) and is
built by forward-mode AD of the model's own residual, never by hand.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp

from solver.errors import InputError

__all__ = ["LagrangianDS", "lagrangian_ds"]


class LagrangianDS:
    """Siconos ``LagrangianDS`` functions of a :class:`~solver.mechanics.lagrangian.LagrangianDAE`.

    Args:
        dae: the Lagrangian DAE (a Lagrangian- or Mechanism-kind model's).
        params: parameter values (defaults for missing ones).

    Attributes:
        ndof: the number of coordinates (the length of q and v).
        coordinates: their labels in flat order.
    """

    def __init__(self, dae, params: Mapping | None = None):
        self.dae = dae
        self.params = dict(params or {})
        self.ndof = dae.n_q
        self.coordinates = [name for c in dae.coords for name in c.component_names()]

    def _bias(self, t, q, v):
        return self.dae.bias(t, q, v, self.params)

    def mass(self, q, t: float = 0.0):
        """``M(q)``, (ndof, ndof)."""
        return self.dae.mass_matrix(t, q, jnp.zeros(self.ndof), self.params)

    def fgyr(self, q, v, t: float = 0.0):
        """``F_gyr(q, v)``: the part of the Euler–Lagrange bias quadratic in v."""
        v = jnp.asarray(v, jnp.float64)
        along = lambda eps: self._bias(t, q, eps * v)
        return 0.5 * jax.jacfwd(jax.jacfwd(along))(jnp.float64(0.0))

    def fint(self, t, q, v):
        """``F_int(t, q, v) = bias − F_gyr``: potential, dissipative and applied forces."""
        return self._bias(t, q, v) - self.fgyr(q, v, t)

    def fext(self, t):
        """``F_ext(t)``: zero (applied forces are in :meth:`fint`)."""
        return jnp.zeros(self.ndof)

    def jacobian_fgyr_q(self, q, v, t: float = 0.0):
        """``∂F_gyr/∂q``."""
        return jax.jacfwd(lambda x: self.fgyr(x, v, t))(jnp.asarray(q, jnp.float64))

    def jacobian_fgyr_v(self, q, v, t: float = 0.0):
        """``∂F_gyr/∂v``."""
        return jax.jacfwd(lambda x: self.fgyr(q, x, t))(jnp.asarray(v, jnp.float64))

    def jacobian_fint_q(self, t, q, v):
        """``∂F_int/∂q``."""
        return jax.jacfwd(lambda x: self.fint(t, x, v))(jnp.asarray(q, jnp.float64))

    def jacobian_fint_v(self, t, q, v):
        """``∂F_int/∂v``."""
        return jax.jacfwd(lambda x: self.fint(t, q, x))(jnp.asarray(v, jnp.float64))

    def constraint_jacobian(self, q, t: float = 0.0):
        """``G = ∂g/∂q`` (n_c, ndof); the reactions are ``p = −Gᵀλ``."""
        return self.dae.constraint_jacobian(t, q, self.params)

    # The non-smooth interactions: the model's stops (unilateral contacts).
    @property
    def contacts(self) -> list:
        """The names of the unilateral contacts (the model's stops), in order."""
        return [s.name for s in getattr(self.dae, "stops", ())]

    def _p(self):
        return self.dae._params(self.params)

    def contact_gaps(self, q, t: float = 0.0):
        """The gaps ``g_i(q) >= 0`` of the contacts, (n_contacts,)."""
        qd = self.dae._as_dict(q)
        p = self._p()
        return jnp.stack([jnp.reshape(s.gap(t, qd, p), ()) for s in self.dae.stops]) if self.contacts \
            else jnp.zeros((0,))

    def contact_jacobian(self, q, t: float = 0.0):
        """``W = ∂g/∂q`` of the contacts (n_contacts, ndof): the impulse on q is ``Wᵀ P``."""
        x = jnp.asarray(self.dae._flatten(self.dae._as_dict(q)), jnp.float64)
        return jax.jacfwd(lambda y: self.contact_gaps(self.dae._unflatten(y), t))(x)

    def restitutions(self):
        """The contacts' coefficients of restitution (Newton's impact law), (n_contacts,)."""
        p = self._p()
        return jnp.stack([jnp.reshape(s.restitution_of(p), ()) for s in self.dae.stops]) if self.contacts \
            else jnp.zeros((0,))


def lagrangian_ds(model_or_dae, params: Mapping | None = None) -> LagrangianDS:
    """The Siconos ``LagrangianDS`` view of a model.

    Args:
        model_or_dae: a Lagrangian- or Mechanism-kind model (from
            :func:`solver.load`) or a :class:`~solver.mechanics.lagrangian.LagrangianDAE`.
        params: parameter values (defaults for missing ones).

    Returns:
        :class:`LagrangianDS`.

    Raises:
        InputError: the model is not Lagrangian (a ``Kind: DAE`` model has no
            mass matrix of its own).
    """
    dae = getattr(model_or_dae, "dae", model_or_dae)
    if not callable(getattr(dae, "bias", None)) or not callable(getattr(dae, "mass_matrix", None)):
        kind = getattr(model_or_dae, "kind", type(dae).__name__)
        raise InputError(f"the LagrangianDS view needs a Lagrangian or Mechanism model; this one is "
                         f"{kind}, whose equations are written out (no mass matrix of their own)")
    if params and hasattr(model_or_dae, "check_params"):
        params = model_or_dae.check_params(params)
    return LagrangianDS(dae, params)
