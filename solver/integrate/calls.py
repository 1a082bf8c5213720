"""Integrating B consistent points through the integrator, and building that program ahead.

:func:`integrate` picks the integrator's entry point (``run`` for one point,
``run_batch`` for more, ``run_tangents`` with sensitivities), pads the
output times to the compiled program's rows and returns numpy arrays with
the batch axis first.  :func:`integrate_ahead` builds the same entry
point's program for the same arguments' shapes (:mod:`solver.ahead`), so
that a solve can compile it while it finds its consistent points.
"""

from __future__ import annotations

import numpy as np

import jax

from solver.integrate.integrator import Integrator
from solver.integrate.run_args import pad_output_times
from solver.integrate.sensitivity import parameter_directions

__all__ = ["integrate", "integrate_ahead"]


def integrate(integ: Integrator, params_b: dict, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, slots,
              names=(), dz0=None) -> dict:
    """Integrate B consistent points: ``run`` for one, the slot pool for more.

    Args:
        integ: the integrator.
        params_b: parameter name -> (B, ...) values.
        z0: (B, n_state) consistent initial states.
        u0: (B, n) guesses of the leading derivatives.
        t0, t1, tol, max_steps, h_max: as for :meth:`Integrator.run`.
        t_eval: (n_out,) output times (padded here to the program's rows).
        slots: the slot count of a batch (B > 1).
        names: sensitivity parameters (none: no tangents).
        dz0: with ``names``, the (B, k, n_state) initial tangents.

    Returns:
        The integrator's result as numpy arrays, batch axis first, the
        values cut to the n_out output times; with ``names`` also
        ``tangents``: variable -> (k, B, n_out, L, *shape).

    Raises:
        InputError: as the integrator's entry point.
    """
    # One compiled program for a range of output counts; the padding rows go.
    t_rows, n_out = pad_output_times(t_eval)
    res = _integrate_rows(integ, params_b, z0, u0, t0, t1, t_rows, tol, max_steps, h_max, slots,
                          names, dz0)
    res["values"] = {k: v[:, :n_out] for k, v in res["values"].items()}
    if "tangents" in res:
        res["tangents"] = {k: v[:, :, :n_out] for k, v in res["tangents"].items()}
    return res


def _integrate_rows(integ: Integrator, params_b, z0, u0, t0, t1, t_rows, tol, max_steps, h_max, slots, names, dz0):
    """:func:`integrate` on the padded output times ``t_rows``: every output row, as numpy arrays."""
    method, args, kwargs = _integration_call(integ, params_b, z0, u0, t0, t1, t_rows, tol, max_steps, h_max, slots,
                                             names, dz0)
    out = getattr(integ, method)(*args, **kwargs)
    single = z0.shape[0] == 1
    if not names:
        return jax.tree_util.tree_map((lambda a: np.asarray(a)[None]) if single else np.asarray, out)
    res, tan = out
    ev_tan = res.pop("event_tangents", None) if single else None
    res = jax.tree_util.tree_map((lambda a: np.asarray(a)[None]) if single else np.asarray, res)
    res["tangents"] = {k: np.asarray(v)[:, None] if single else np.asarray(v) for k, v in tan.items()}
    if ev_tan is not None:  # direction first, then the batch axis
        res["event_tangents"] = jax.tree_util.tree_map(lambda a: np.asarray(a)[:, None], ev_tan)
    return res


def integrate_ahead(integ: Integrator, params_b: dict, z_hat, u0, t0, t1, t_eval, tol, max_steps, h_max, slots,
                    names=()) -> None:
    """Build the program :func:`integrate` will run: traced now, compiled while the consistent points are found.

    Args: as :func:`integrate`, with ``z_hat`` (the guesses, (B, n_state))
        standing in for the consistent points: only its shape and type count.

    Raises:
        InputError: as the integrator's entry point (bad slots, a parameter
            without the batch axis).
    """
    t_rows, _ = pad_output_times(t_eval)
    dz0 = np.zeros((z_hat.shape[0], len(names), z_hat.shape[1])) if names else None
    method, args, kwargs = _integration_call(integ, params_b, np.asarray(z_hat, dtype=float),
                                             np.asarray(u0), t0, t1, t_rows, tol, max_steps, h_max, slots, names,
                                             dz0)
    getattr(integ, method + "_ahead")(*args, **kwargs)


def _integration_call(integ: Integrator, params_b, z0, u0, t0, t1, t_rows, tol, max_steps, h_max, slots, names,
                      dz0) -> tuple:
    """(the integrator's method, args, kwargs) that integrate B points: ``run`` for one, ``run_batch`` for more,
    ``run_tangents`` with sensitivity ``names``."""
    # numpy arguments: a jitted call takes them as they are, whereas each
    # jnp.asarray is an eager dispatch of its own (about 40 us on 2 cores).
    one = lambda tree: {k: np.asarray(v)[0] for k, v in tree.items()}
    batch = lambda tree: {k: np.asarray(v) for k, v in tree.items()}
    options = {"max_steps": max_steps, "h_max": h_max}
    if names:
        dparams = parameter_directions(params_b, names)  # name -> (k, B, ...)
        if z0.shape[0] == 1:
            return "run_tangents", (one(params_b), np.asarray(z0[0]), np.asarray(u0[0]),
                                    {k: v[:, 0] for k, v in dparams.items()}, np.asarray(dz0[0]),
                                    t0, t1, t_rows, tol), options
        return "run_tangents", (batch(params_b), np.asarray(z0), np.asarray(u0), dparams, np.moveaxis(dz0, 1, 0),
                                t0, t1, t_rows, tol), options | {"slots": slots}
    if z0.shape[0] == 1:
        return "run", (one(params_b), np.asarray(z0[0]), np.asarray(u0[0]), t0, t1, t_rows, tol), options
    return "run_batch", (batch(params_b), np.asarray(z0), np.asarray(u0), t0, t1, t_rows, tol), \
        options | {"slots": slots}
