"""Stationary equilibria of a model: configuration, multipliers and stability.

An equilibrium is a state at rest: every time derivative of order >= 1 is
zero and the residual vanishes.  For a mechanical model (``Kind: Lagrangian``
or ``Mechanism``, or equations written out in the same form) that is

    ∂V/∂q + Gᵀλ = Q,    g(q) = 0,    q' = q'' = 0.

The route is the same for every DAE: the residual with ``x^(l) = 0`` for
``l >= 1`` is n equations in the n values ``x^(0)`` (coordinates and the
algebraic variables, the multipliers).  It is evaluated by
:func:`solver.taylor.pointwise.residual_at`, so a ``ddt(...)`` in a residual means
its explicit time derivative at rest, and its Jacobian is ``jax.jacfwd`` of
that: nothing is differentiated by hand.  The system is solved by Newton with
minimum-norm corrections from the guess (so a family of equilibria, e.g. a
pendulum without gravity, still converges to the member nearest the guess).
Where Newton fails (no descent from the guess: a pendulum held level with
its pivot is as far from hanging as from standing) the model is let settle
(pseudo-transient continuation of the over-damped motion, which finds a
stable equilibrium; motion started exactly at an unstable equilibrium stays
there, so such a point is pushed off along its unstable mode and let settle
again); IPOPT (cyipopt, as :mod:`solver.integrate.initialize` uses it),
the equilibrium nearest the guess, is the last resort.

Stability, for a second-order model (every variable of Σ offset d = 2, a
coordinate, or d = 0, a multiplier; equations of offset c = 0 are the
equations of motion, c = 2 the position constraints): linearised at rest the
model reads ``M δq'' + K δq + W δλ = 0, G δq = 0`` with

    K = ∂F/∂q = ∂²V/∂q² + λ·∂²g − ∂Q/∂q     (the stiffness),
    M = ∂F/∂q'' (the mass matrix),  G = ∂g/∂q,  W = ∂F/∂λ (= Gᵀ up to scale).

With Z an orthonormal basis of null(G) (the tangent space of the
constraints), the constrained stiffness is ``Zᵀ K Z``: all its eigenvalues
> 0 is a stable equilibrium (a strict minimum of V on the constraints for a
conservative model), one < 0 an unstable one, a zero (within tolerance) a
marginal or degenerate one.  The small-oscillation frequencies solve
``Zᵀ K Z v = ω² Zᵀ M Z v``.  A :class:`solver.mechanics.lagrangian.LagrangianDAE`
supplies M and G from its own helpers (``mass_matrix``,
``constraint_jacobian``).

A model whose forces depend on time is examined at its initial time ``t0``.

Layout: the result and the limits are :mod:`solver.analysis.equilibrium_result`,
the kernels :mod:`solver.analysis.equilibrium_kernels`, the search (guess,
Newton, settling, Ipopt) :mod:`solver.analysis.equilibrium_solve`, the stability classification
:mod:`solver.analysis.equilibrium_stability`; this module is the front door
(:func:`equilibrium`) and re-exports their public names.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

import jax.numpy as jnp

from solver.analysis.equilibrium_kernels import rest_kernels
from solver.analysis.equilibrium_result import (DEFAULT_TOL, Equilibrium, EquilibriumError,
                                                MAX_EQUILIBRIUM_UNKNOWNS, METHODS, SETTLE_PUSH, ZERO_TOL)
from solver.analysis.equilibrium_solve import (ipopt_search, newton_search, parameter_values, point_text,
                                               reported_coordinates, settle_stable, sigma_offsets, split_model,
                                               starting_point)
from solver.analysis.equilibrium_stability import classify
from solver.errors import InputError, how_to_raise, limit

__all__ = ["equilibrium", "Equilibrium", "EquilibriumError", "METHODS",
           "MAX_EQUILIBRIUM_UNKNOWNS", "DEFAULT_TOL", "ZERO_TOL", "SETTLE_PUSH"]


# Kept importable from this module, their old home.
from solver.analysis.equilibrium_result import MAX_NEWTON_ITERATIONS  # noqa: F401


# ------------------------------------------------------------------ front door
def equilibrium(model_or_dae, guess: Mapping | None = None, params: Mapping | None = None,
                method: str = "auto", tol: float = DEFAULT_TOL, zero_tol: float = ZERO_TOL,
                t: float | None = None, ipopt_options: Mapping | None = None) -> Equilibrium:
    """Find a stationary equilibrium of a model and classify its stability.

    Args:
        model_or_dae: a model (:func:`solver.load`) or a :class:`solver.DAE`
            (Lagrangian or not).
        guess: ``{name: value}`` starting values, in :func:`solver.solve`
            syntax without primes (``"x"``, ``"A"``, ``"A[1]"``, ``"lam"``);
            they replace the model's ``ProblemData`` positions (its
            velocities are ignored: zero at rest).  Values not given start
            at the model's, else at 0.
        params: parameter overrides (free parameters of the model).
        method: ``"newton"`` (the equilibrium the guess is near, of any
            stability), ``"settle"`` (where the model comes to rest when
            released at the guess with heavy damping: a stable equilibrium,
            by pseudo-transient continuation; where it comes to an unstable
            one, or starts exactly at one, it is pushed off along the
            unstable mode by ``SETTLE_PUSH`` x (1 + max |q|), both ways, and
            let settle again; where neither push comes to rest elsewhere the
            result is that unstable point, with ``settle_unstable`` set and a
            note), ``"ipopt"`` (the
            equilibrium nearest the guess, polished by Newton) or
            ``"auto"`` (Newton, then settle, then IPOPT, each where the
            previous one fails).
        tol: residual accepted, relative to the size of the equations' terms.
        zero_tol: relative size below which a stiffness eigenvalue is zero.
        t: time to examine a time-dependent model at (default: the model's
            ``t0``, 0 for a bare DAE).
        ipopt_options: IPOPT options (e.g. ``{"print_level": 5}``).

    Returns:
        :class:`Equilibrium` (configuration, multipliers, residual, stiffness
        eigenvalues, frequencies, branch).

    Raises:
        EquilibriumError: no equilibrium found from the guess (the message
            gives the closest point and what to change), a bad guess or
            method.
        InputError: bad parameters (located in the model file), too many
            unknowns, a refused IPOPT option.
    """
    from solver.models.model import relocate

    dae, model = split_model(model_or_dae)
    try:
        return _equilibrium(dae, model, guess, params, method, tol, zero_tol, t, ipopt_options)
    except InputError as err:
        # Name the model file in every message, as Model.solve does.
        path = getattr(model, "path", None)
        raise relocate(err, str(path) if path else None) from None


def _equilibrium(dae, model, guess, params, method, tol, zero_tol, t, ipopt_options):
    if method not in METHODS:
        raise EquilibriumError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise EquilibriumError(f"tol must be a number in (0, 1), e.g. 1e-10; got {tol!r}")
    cap = limit("MAX_EQUILIBRIUM_UNKNOWNS", MAX_EQUILIBRIUM_UNKNOWNS)
    if dae.n > cap:
        raise InputError(f"the model has {dae.n} unknowns; the equilibrium solver takes at most "
                         f"{cap} (its Jacobian is dense); {how_to_raise('MAX_EQUILIBRIUM_UNKNOWNS')}")
    pvals = parameter_values(dae, model, params)
    t = float(t if t is not None else (model.t0 if model is not None else 0.0))
    x0 = starting_point(dae, model, pvals, guess)
    k = rest_kernels(dae)
    p = {name: jnp.asarray(v) for name, v in pvals.items()}
    cfg = sigma_offsets(dae) > 0       # the configuration; d = 0 are the multipliers
    f0 = np.asarray(k.F(x0, t, p))
    if not np.all(np.isfinite(f0)):
        names = dae.equation_names()
        bad = [names[i] for i in np.nonzero(~np.isfinite(f0))[0]]
        raise EquilibriumError(
            f"the equations are not finite at rest at the guess [{point_text(dae, x0)}] (NaN or "
            f"infinite: {', '.join(bad[:8])}{' ...' if len(bad) > 8 else ''}): the model's forces "
            "may be undefined at zero velocity (a slip ratio v/|v|, the sign of a friction "
            "force) or at this configuration; give another guess (guess={...} in Python, "
            "--guess NAME=VALUE on the command line), or the model has no equilibrium at rest")
    tried = []
    found = None
    if method in ("auto", "newton"):
        x, it, ok, res, lim = newton_search(k, x0, t, p, cfg, tol)
        tried.append(f"Newton stopped after {it} iterations with residual {res:.3g} "
                     f"(tolerance {lim:.3g}) at [{point_text(dae, x)}]")
        if ok:
            found = (x, it, res, lim, "newton")
    settle_note, stayed = None, False
    if found is None and method in ("auto", "settle"):
        x, it, ok, res, lim, settle_note, stayed = settle_stable(k, x0, t, p, pvals, cfg, tol,
                                                                 zero_tol)
        tried.append(f"settling (over-damped motion from the guess) stopped after {it} steps "
                     f"with residual {res:.3g} at [{point_text(dae, x)}]")
        if ok:
            found = (x, it, res, lim, "settle")
    if found is None and method in ("auto", "ipopt"):
        x, it, ok, res, lim, msg = ipopt_search(k, x0, t, p, cfg, tol, ipopt_options)
        tried.append(f"IPOPT ({msg}) ended with residual {res:.3g} (tolerance {lim:.3g}) at "
                     f"[{point_text(dae, x)}]")
        if ok:
            found = (x, it, res, lim, "ipopt")
    if found is None:
        raise EquilibriumError(
            "no equilibrium found from the guess [" + point_text(dae, x0) + "]: "
            + "; ".join(tried) + ". Give another guess near the configuration you expect "
            "(guess={...} in Python, --guess NAME=VALUE on the command line)"
            + (", or another method (auto, settle, ipopt)" if method != "auto" else "")
            + "; a model with forces that never balance (a driven or free-falling body) has "
            "no equilibrium")
    x, it, res, lim, how = found
    stability = {"stiffness_eigenvalues": None, "omega_squared": None, "frequencies": None,
                 "branch": "not classified", "stable": None, "dof": None}
    stability.update(classify(k, x, t, p, pvals, zero_tol))
    if np.linalg.matrix_rank(np.asarray(k.J(x, t, p))) < dae.n:
        stability["notes"] = list(stability.get("notes", [])) + [
            "the equilibrium is not isolated (the Jacobian of the equilibrium equations is "
            "singular): one of a family of equilibria, the one Newton reached from the guess"]
    if how == "settle" and settle_note:
        stability["notes"] = [settle_note] + list(stability.get("notes", []))
    config, mult = {}, {}
    coordinate = reported_coordinates(dae)
    for v in dae.variables:
        val = x[v.offset:v.offset + v.size]
        val = float(val[0]) if v.shape == () else val.reshape(v.shape).copy()
        (config if coordinate[v.offset] else mult)[v.name] = val
    title = getattr(model, "title", None) or dae.name
    return Equilibrium(title=title, configuration=config, multipliers=mult, residual=res,
                       tolerance=lim, method=how, iterations=it, t=t,
                       settle_unstable=how == "settle" and stayed, **stability,
                       params={k_: (float(v) if np.ndim(v) == 0 else np.asarray(v).tolist())
                               for k_, v in pvals.items()})
