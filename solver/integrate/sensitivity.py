"""Design sensitivities: derivatives of a solution with respect to parameters, by forward mode.

A run's outputs depend on a parameter P in two ways: through the consistent
initial point and through the integration.  Both are differentiated by
forward mode, never by finite differences of runs:

* the initial point z0 satisfies the hidden constraints h(z0, p) = 0 with
  its fixed entries given; its tangent keeps the fixed entries' tangents
  (those of the model's initial-value expressions) and moves the free ones
  by the minimum-norm solution of ``H_free dz = −(H_p dp + H_fixed dz_fixed)``
  (the implicit function theorem; unique when the fixed entries fix the
  degrees of freedom);
* the integration is :meth:`solver.integrate.integrator.Integrator.run_tangents`:
  ``jax.jvp`` through the Taylor stages, the stage-0 Newton and the
  projections, at the computed step sequence.

So ``dx_dP`` is the derivative of the computed solution, to the accuracy of
the run itself.  Outputs are named ``d{var}_d{param}`` (and, in sweeps,
``d{metric}_d{param}``) with units ``[var]/[param]``.
"""

from __future__ import annotations

import warnings

from typing import Callable, Mapping, Sequence

import numpy as np

import jax
import jax.numpy as jnp

from solver.numerics import linalg
from solver.errors import InputError

__all__ = ["check_names", "sensitivity_name", "sensitivity_layout", "parameter_directions",
           "fixed_value_tangents", "consistent_tangents", "sensitivity_series", "metric_tangent"]


def check_names(dae, names) -> list[str]:
    """The parameters to differentiate with respect to, checked.

    Args:
        dae: the DAE.
        names: a sequence of scalar parameter names (or None/empty).

    Returns:
        list of names in the given order (empty for none).

    Raises:
        InputError: not a list of strings, an unknown or non-scalar
            parameter, or a name given twice; the message lists the valid
            names.
    """
    if names is None:
        return []
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise InputError(f"sensitivities must be a list of parameter names, got {names!r}")
    scalars = [k for k in dae.param_names if dae.params[k].shape == ()]
    out = []
    for name in names:
        if not isinstance(name, str) or name not in dae.params:
            raise InputError(f"sensitivities: {name!r} is not a parameter of the model; "
                             f"the scalar parameters are {', '.join(scalars) or '(none)'}")
        if dae.params[name].shape != ():
            raise InputError(f"sensitivities: parameter {name!r} has shape {dae.params[name].shape}; only scalar "
                             f"parameters can be differentiated: {', '.join(scalars) or '(none)'}")
        if name in out:
            raise InputError(f"sensitivities: {name!r} is given twice")
        out.append(name)
    return out


def sensitivity_name(of: str, param: str) -> str:
    """Output name of the derivative of ``of`` with respect to ``param``: ``d{of}_d{param}``."""
    return f"d{of}_d{param}"


def _units(dae, of_unit: str | None, param: str) -> str | None:
    p_unit = dae.units.get(param)
    if of_unit and p_unit:
        return f"{of_unit}/({p_unit})" if " " in p_unit or "/" in p_unit else f"{of_unit}/{p_unit}"
    if of_unit and not p_unit:
        return None
    if p_unit:
        return f"1/{p_unit}"
    return None


def sensitivity_layout(dae, variables: Sequence[str] | None, names: Sequence[str]) -> dict:
    """Dims and attrs of the sensitivity outputs, before any run (a store's template).

    Args:
        dae: the DAE.
        variables: variable names to differentiate (default: all).
        names: parameter names (:func:`check_names`).

    Returns:
        dict output name -> (dims without ``point``, attrs), variable by
        variable and parameter by parameter.
    """
    from solver.results.solution import component_dim

    out = {}
    for var in ([v.name for v in dae.variables] if variables is None else variables):
        v = dae.var_index[var]
        dims = ("time",) if v.shape == () else ("time", component_dim(dae, var)[0])
        for param in names:
            attrs = {"long_name": f"d{var}/d{param}", "sensitivity_of": var, "sensitivity_wrt": param}
            unit = _units(dae, dae.units.get(var), param)
            if unit:
                attrs["units"] = unit
            out[sensitivity_name(var, param)] = (dims, attrs)
    return out


def parameter_directions(params: Mapping, names: Sequence[str]) -> dict:
    """Unit tangent directions of the named parameters: name -> (k,) + value shape.

    Args:
        params: parameter dict (any leading batch axis is kept).
        names: the k parameters.

    Returns:
        dict of float64 arrays; direction i is 1 in ``names[i]`` and 0 elsewhere.
    """
    out = {}
    for key, value in params.items():
        a = np.zeros((len(names),) + np.shape(value))
        for i, name in enumerate(names):
            if name == key:
                a[i] = 1.0
        out[key] = a
    return out


def fixed_value_tangents(z_of: Callable[[dict], np.ndarray], params: Mapping, names: Sequence[str],
                         fixed_mask) -> np.ndarray:
    """Tangents of the fixed initial-value entries that depend on parameters.

    A model's initial values are expressions of its parameters (``A:
    [a*cos(th), a*sin(th)]``), evaluated by the expression module in numpy.
    Their derivatives are taken by central differences with one Richardson
    extrapolation (error O(h⁴), about 1e-12 relative for smooth
    expressions); only the fixed entries are used: the free ones are
    guesses and do not move the consistent point.

    Args:
        z_of: parameter dict -> normalised state (the guesses and fixed values).
        params: one point's parameter dict.
        names: the k parameters.
        fixed_mask: (n_state,) bool, the fixed entries.

    Returns:
        (k, n_state) tangents, zero on the free entries.
    """
    fixed_mask = np.asarray(fixed_mask, dtype=bool)
    out = np.zeros((len(names), fixed_mask.size))
    if not fixed_mask.any():
        return out
    for i, name in enumerate(names):
        p0 = float(np.asarray(params[name]))
        h = 1e-3 * max(1.0, abs(p0))

        def diff(step):
            up = np.asarray(z_of({**params, name: p0 + step}), dtype=float)
            down = np.asarray(z_of({**params, name: p0 - step}), dtype=float)
            return (up - down) / (2 * step)

        d = (4.0 * diff(h / 2) - diff(h)) / 3.0
        out[i] = np.where(fixed_mask, d, 0.0)
    return out


def consistent_tangents(integ, params, t0, z0, free, dparams, dz_fixed):
    """Tangents of a consistent initial point along k parameter directions (jit/vmap-safe).

    Args:
        integ: the :class:`~solver.integrate.integrator.Integrator`.
        params: one point's parameter dict.
        t0: initial time.
        z0: (n_state,) the consistent point.
        free: (n_state,) bool, entries the initialisation may move.
        dparams: name -> (k,) + shape parameter tangents.
        dz_fixed: (k, n_state) tangents of the fixed entries.

    Returns:
        (k, n_state) tangents dz0 with ``H dz0 + H_p dp = 0``.
    """
    free = jnp.asarray(free, dtype=bool)
    dz_fixed = jnp.where(free[None, :], 0.0, dz_fixed)
    if integ.n_hidden == 0:
        return dz_fixed
    h = lambda z, p: integ.hidden_constraints(z, t0, p)
    G = jax.jacfwd(h)(z0, params) * free[None, :]
    fact = linalg.min_norm_factor(G)

    def one(dp, dz):
        _, r = jax.jvp(h, (z0, params), (dz, dp))
        return dz + linalg.min_norm_step(fact, G, r)

    return jax.vmap(one)(dparams, dz_fixed)


def sensitivity_series(dae, tangents: Mapping, names: Sequence[str], variables: Sequence[str] | None = None) -> dict:
    """Sensitivity outputs from the integrator's value tangents.

    Args:
        dae: the DAE.
        tangents: variable name -> (k, B, n_out, L, *shape) derivatives of
            the dense output (:meth:`Integrator.run_tangents`, batch axis B).
        names: the k parameters.
        variables: variables to keep (default: all).

    Returns:
        dict ``d{var}_d{param}`` -> (B, n_out, *shape) arrays (the value, order 0).
    """
    out = {}
    for var in ([v.name for v in dae.variables] if variables is None else variables):
        tan = np.asarray(tangents[var], dtype=float)
        for i, param in enumerate(names):
            out[sensitivity_name(var, param)] = tan[i, :, :, 0]
    return out


def metric_tangent(reduce: str, series: np.ndarray, tangent: np.ndarray) -> np.ndarray:
    """The derivative of a metric (a reduction over output times) along one direction.

    The metric is that of the sampled series, so its derivative is the
    derivative of the same reduction: the tangent at the sample where
    ``max``/``min``/``absmax`` is attained, their difference for
    ``range``, the mean or the last sample.

    Args:
        reduce: the reduction (``max``, ``min``, ``range``, ``mean``,
            ``final``, ``absmax``).
        series: (B, T) the reduced series.
        tangent: (B, T) its derivative.

    Returns:
        (B,) derivatives; NaN where the series is all NaN.

    Raises:
        InputError: an unknown reduction.
    """
    series = np.asarray(series, dtype=float)
    tangent = np.asarray(tangent, dtype=float)
    rows = np.arange(series.shape[0])
    dead = np.all(np.isnan(series), axis=1)
    highest = lambda a: np.argmax(np.where(np.isnan(a), -np.inf, a), axis=1)
    lowest = lambda a: np.argmin(np.where(np.isnan(a), np.inf, a), axis=1)
    if reduce == "max":
        out = tangent[rows, highest(series)]
    elif reduce == "min":
        out = tangent[rows, lowest(series)]
    elif reduce == "range":
        out = tangent[rows, highest(series)] - tangent[rows, lowest(series)]
    elif reduce == "absmax":
        idx = highest(np.abs(series))
        out = np.sign(series[rows, idx]) * tangent[rows, idx]
    elif reduce == "mean":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN (failed) point
            out = np.nanmean(np.where(np.isnan(series), np.nan, tangent), axis=1)
    elif reduce == "final":
        out = tangent[:, -1]
    else:
        raise InputError(f"unknown reduction {reduce!r}; valid: max, min, range, mean, final, absmax")
    return np.where(dead, np.nan, out)
