"""The front door: ``solve(dae, …)`` = analyse → initialise → integrate → Dataset."""

from __future__ import annotations

import time as _time
from typing import Mapping, Sequence

import numpy as np

import jax
import jax.numpy as jnp

from . import status as st
from .dae import DAE
from .errors import InputError
from .initialize import InitialValueError, StateSpec, batched_newton, parse_values
from .integrate import Integrator, order_for_tol
from .solution import build_dataset
from .taylor import TaylorProgram

__all__ = ["solve", "integrator_for", "consistent_point", "ASSEMBLY_TOL"]

# A state whose hidden constraints are below this (times its scale) is consistent.
ASSEMBLY_TOL = 1e-10


def integrator_for(dae: DAE, order: int, linear: str = "auto") -> Integrator:
    """The (cached) integrator of a DAE at a Taylor order.

    Compiled functions live on the integrator, so repeated solves of one DAE
    (other parameters, other initial values) reuse them.

    Args:
        dae: the DAE.
        order: Taylor order p.
        linear: stage solver, ``auto``/``dense``/``kkt`` (see
            :class:`solver.integrate.Integrator`).

    Raises:
        InputError: a bad ``linear`` choice.
    """
    cache = dae.__dict__.setdefault("_integrators", {})
    if (order, linear) not in cache:
        s = dae.structure
        cache[(order, linear)] = Integrator(TaylorProgram(dae, s.c, s.d, order), linear=linear)
    return cache[(order, linear)]


def _newton_jit(integ: Integrator):
    fn = getattr(integ, "_newton_jit", None)
    if fn is None:
        fn = jax.jit(lambda p, t0, z, free: batched_newton(integ, p, t0, z, free))
        integ._newton_jit = fn
    return fn


def consistent_point(integ: Integrator, params, t0: float, spec: StateSpec, method: str = "auto",
                     ipopt_options: Mapping | None = None):
    """A consistent state near the guesses, keeping fixed entries.

    Args:
        integ: the integrator.
        params: parameter dict.
        t0: initial time.
        spec: guesses and fixed entries (:func:`parse_values`).
        method: ``"newton"`` (Gauss–Newton only), ``"ipopt"`` (nearest point
            by IPOPT) or ``"auto"`` (Newton, IPOPT where Newton fails).
        ipopt_options: extra IPOPT options.

    Returns:
        flat consistent state.

    Raises:
        InitialValueError: no consistent point; the message lists the violated
            constraints and their residuals.
    """
    valid = ("auto", "newton", "ipopt")
    if method not in valid:
        raise InputError(f"unknown initialisation method {method!r}; valid: {list(valid)}")
    z_hat = np.asarray(spec.z_hat, dtype=float)
    scale = max(1.0, float(np.max(np.abs(z_hat)))) if z_hat.size else 1.0
    z = z_hat
    res = np.inf
    if method in ("auto", "newton"):
        zz, r = _newton_jit(integ)(params, t0, jnp.asarray(z_hat), jnp.asarray(spec.free))
        z, res = np.asarray(zz), float(r)
        if res <= ASSEMBLY_TOL * scale and np.all(np.isfinite(z)):
            return z
    if method in ("auto", "ipopt"):
        try:
            from .initialize import ipopt_point  # provided with cyipopt
        except ImportError:  # pragma: no cover - cyipopt is a dependency
            ipopt_point = None
        if ipopt_point is not None:
            return ipopt_point(integ, params, t0, spec, options=ipopt_options)
    g = np.asarray(integ.hidden_constraints(jnp.asarray(z), t0, params))
    worst = np.argsort(-np.abs(g))[:8]
    lines = ", ".join(f"{integ.hidden_labels[i]} = {g[i]:.3g}" for i in worst if abs(g[i]) > ASSEMBLY_TOL * scale)
    raise InitialValueError(
        f"no consistent initial point found (largest constraint residual {res:.3g}); violated: {lines}. "
        "Check the fixed values and the parameters (can the mechanism assemble?), or give better guesses"
    )


def solve(dae: DAE, t_span, values: Mapping | None = None, fixed: Sequence[str] | None = None,
          tol: float = 1e-10, t_eval=None, order: int | None = None, params: Mapping | None = None,
          samples: int | None = None, max_steps: int = 100_000, h_max: float | None = None,
          init: str = "auto", ipopt_options: Mapping | None = None, title: str | None = None,
          extra_attrs: Mapping | None = None, linear: str = "auto"):
    """Solve a DAE initial-value problem.

    Args:
        dae: the DAE.
        t_span: (t0, t1).
        values: initial values/guesses (see :func:`solver.initialize.parse_values`).
        fixed: names of values to keep exactly.
        tol: tolerance (absolute, relative above magnitude 1).
        t_eval: output times (default: ``samples`` equally spaced, 101).
        order: Taylor order (default from tol).
        params: parameter overrides.
        samples: number of output times when t_eval is not given.
        max_steps: step limit.
        h_max: largest step.
        init: initialisation method (``auto``/``newton``/``ipopt``).
        ipopt_options: options passed to IPOPT.
        linear: stage solver (``auto``/``dense``/``kkt``, see
            :class:`solver.integrate.Integrator`); ``auto`` picks the
            structured KKT solve for large block-diagonal Lagrangian models.
        title: dataset title.
        extra_attrs: more dataset attrs.

    Returns:
        xarray.Dataset (DESIGN.md schema) with ``status`` (0 = success) and
        ``attrs["wall_seconds"]``.

    Raises:
        InputError: bad arguments or initial values.
        InitialValueError: no consistent initial point.
        solver.structure.StructurallySingularError: the DAE has no finite
            transversal.
    """
    wall0 = _time.perf_counter()
    t0, t1 = (float(x) for x in t_span)
    if not t1 > t0:
        raise InputError(f"t_span must have t1 > t0, got ({t0}, {t1})")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise InputError(f"tol must be a number in (0, 1), got {tol!r}")
    p = int(order) if order else order_for_tol(tol)
    if not 2 <= p <= 60:
        raise InputError(f"order must be between 2 and 60, got {p}")
    integ = integrator_for(dae, p, linear)
    pvals = {k: jnp.asarray(v) for k, v in dae.param_values(params).items()}
    spec = parse_values(integ, values, fixed)
    z0 = consistent_point(integ, pvals, t0, spec, method=init, ipopt_options=ipopt_options)
    if t_eval is None:
        t_eval = np.linspace(t0, t1, int(samples or 101))
    t_eval = np.asarray(t_eval, dtype=float)
    if t_eval.ndim != 1 or np.any(np.diff(t_eval) < 0) or t_eval[0] < t0 or t_eval[-1] > t1 + 1e-12 * max(1, abs(t1)):
        raise InputError("t_eval must be sorted times within t_span")
    result = integ.run(pvals, jnp.asarray(z0), jnp.asarray(spec.u_guess), t0, t1, t_eval, tol,
                       max_steps=max_steps, h_max=h_max)
    result = jax.tree_util.tree_map(np.asarray, result)
    settings = {"tol": tol, "order": p, "max_steps": max_steps, "t0": t0, "t1": t1}
    ds = build_dataset(dae, integ, result, t_eval, pvals, settings, title=title, extra_attrs=dict(extra_attrs or {}))
    ds.attrs["wall_seconds"] = _time.perf_counter() - wall0
    ds.attrs["t_final"] = float(result["t_final"])
    return ds
