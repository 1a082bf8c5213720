"""Mechanical balance outputs: energy change, dissipated energy and momenta.

For a Lagrangian DAE (the Lagrangian and Mechanism kinds) the results hold,
besides ``energy(time)`` (the Jacobi integral ``q'·∂L/∂q' − L``):

* ``energy_change(time)``: ``E(t) − E(t0)``.
* ``dissipated(time)``: the energy the Rayleigh forces took out since t0,
  ``∫ q'·∂R/∂q' dt`` (only with a dissipation function).  By the
  work-energy theorem ``energy_change + dissipated = 0`` when there are no
  applied forces and no explicit time dependence; the integral is a
  cumulative Simpson rule over the output times, so its accuracy follows the
  number of samples (O(h⁴)).
* ``momentum(time, axis)``: linear momentum ``Σ m v`` in the world frame.
* ``angular_momentum(time[, axis])``: ``Σ m r × v`` about the origin (a
  scalar, the z component, in 2-D).

Momenta are the Noether charges of translating and rotating every point:
``Σ p_i`` and ``Σ r_i × p_i`` with ``p_i = ∂T/∂r_i'``, which for particles,
rods and rigid bodies in natural coordinates equal ``Σ m v`` and
``∫ r × v dm``.  They exist where the DAE says its coordinates are world
positions of points (``dae.momentum_dim``): every Mechanism model, and a
Lagrangian model whose coordinates are all 2-vectors or all 3-vectors.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.program_store import stored_jit

__all__ = ["AXIS_DIM", "has_dissipation", "momentum_dim", "balance_layout", "balance_kernels", "balance_arguments",
           "balance_series"]

# The dimension of momentum components (the Mechanism kind's point axes).
AXIS_DIM = "axis"
_AXES = ("x", "y", "z")


def coordinate_levels(dae, values) -> tuple[dict, dict]:
    """Values and first derivatives of the DAE's coordinates from dense outputs.

    Args:
        dae: a DAE with ``coords`` (Lagrangian, Mechanism, or a DAE-kind
            model with an ``Energy``).
        values: name -> (B, n_out, L, *shape) derivatives.

    Returns:
        ``(q, qd)``: name -> (B, n_out, *shape); a coordinate whose first
        derivative is not carried (L = 1) gets zeros there.
    """
    q, qd = {}, {}
    for c in dae.coords:
        # numpy: the values are a finished run's, and JAX's indexing would
        # compile a small program per shape before the kernels that take them.
        arr = np.asarray(values[c.name])
        q[c.name] = arr[:, :, 0]
        qd[c.name] = arr[:, :, 1] if arr.shape[2] > 1 else np.zeros_like(arr[:, :, 0])
    return q, qd


def has_dissipation(dae) -> bool:
    """Whether the DAE has a Rayleigh dissipation function (``dissipated`` output)."""
    return bool(getattr(dae, "has_dissipation", False)) and callable(
        getattr(dae, "dissipation_power_fn", None))


def momentum_dim(dae) -> int | None:
    """2 or 3 where the DAE's coordinates are point positions (momentum outputs), else None."""
    dim = getattr(dae, "momentum_dim", None)
    return dim if dim in (2, 3) and callable(getattr(dae, "point_momenta_fn", None)) else None


def balance_layout(dae) -> tuple[dict, dict]:
    """Names, dims and attrs of the balance outputs of a DAE (before any run).

    Args:
        dae: the DAE.

    Returns:
        (layout, coords): name -> (dims, attrs) in dataset order, and the
        component coordinate (``axis`` -> labels) the momenta need; both
        empty for a DAE without an energy.
    """
    layout, coords = {}, {}
    if not callable(getattr(dae, "energy_fn", None)):
        return layout, coords
    layout["energy_change"] = (("time",), {"long_name": "energy change since t0, E(t) - E(t0)"})
    if has_dissipation(dae):
        layout["dissipated"] = (("time",), {
            "long_name": "energy dissipated since t0 by the Rayleigh forces, "
                         "integral of q'.dR/dq' dt (cumulative Simpson over the output times)"})
    dim = momentum_dim(dae)
    if dim:
        coords[AXIS_DIM] = list(_AXES[:dim])
        layout["momentum"] = (("time", AXIS_DIM), {
            "long_name": "linear momentum, sum of m v (world frame)"})
        layout["angular_momentum"] = (("time",) if dim == 2 else ("time", AXIS_DIM), {
            "long_name": "angular momentum about the origin, sum of m r x v (world frame)"
                         + (", z component" if dim == 2 else "")})
    return layout, coords


def balance_kernels(dae, identity: str | None = None, compiler_options: dict | None = None, suffix: str = "") -> dict:
    """Jitted (point, time)-vmapped kernels of a DAE's balance outputs, built anew.

    Nothing is cached here (and nothing is written on the DAE): the one
    owner of a DAE's compiled kernels is its compiled model,
    :attr:`solver.compiled.Compiled.balance_kernels`, which builds them once.

    Args:
        dae: the DAE.
        identity: its compiled model's identity in the program store
            (:func:`solver.program_store.dae_identity`); None: not stored.
        compiler_options: XLA options of the kernels (a single run's are
            built quickly; see :attr:`solver.compiled.Compiled.balance_kernels`).
        suffix: added to the kernels' names in the program store (another
            build of the same kernels is another program).

    Returns:
        dict with ``power`` (dissipation power, where the DAE has a
        dissipation function) and ``momenta`` (linear and angular momentum,
        where its coordinates are point positions); empty otherwise.
    """
    cache = {}

    def over_points_and_times(fn, name):
        one = jax.vmap(fn, in_axes=(0, 0, 0, None))
        return stored_jit(jax.vmap(one, in_axes=(None, 0, 0, 0)), identity, name + suffix,
                          compiler_options=compiler_options)

    if has_dissipation(dae):
        cache["power"] = over_points_and_times(dae.dissipation_power_fn, "power_series")
    dim = momentum_dim(dae)
    if dim:
        def momenta(t, q, qd, p):
            R, P = dae.point_momenta_fn(t, q, qd, p)
            if dim == 2:
                L = jnp.sum(R[:, 0] * P[:, 1] - R[:, 1] * P[:, 0])
            else:
                L = jnp.sum(jnp.cross(R, P), axis=0)
            return jnp.sum(P, axis=0), L

        cache["momenta"] = over_points_and_times(momenta, "momenta_series")
    return cache


def _cumulative_integral(y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """∫_{t0}^{t_k} y dt at every output time (last axis), 0 at t0: SciPy's ``cumulative_simpson`` rule.

    Each interval's integral is that of the parabola through three samples:
    an even-numbered interval's from its two ends and the next sample, an
    odd-numbered one's (and the last) from its two ends and the previous one
    (Cartwright's formula for any spacing, exact for quadratics; the same
    arithmetic as ``scipy.integrate.cumulative_simpson(y, x=t,
    initial=0)``, compared in tests/test_balance.py), without importing
    ``scipy.integrate`` (~0.2 s of a damped model's first solve).  The
    trapezoid rule below three samples.
    """
    y = np.asarray(y, dtype=float)
    h = np.diff(np.asarray(t, dtype=float))
    if y.shape[-1] < 3:
        pieces = 0.5 * h * (y[..., 1:] + y[..., :-1])
    else:
        ahead = _parabola_first_interval(y[..., :-2], y[..., 1:-1], y[..., 2:], h[:-1], h[1:])
        behind = _parabola_first_interval(y[..., 2:], y[..., 1:-1], y[..., :-2], h[1:], h[:-1])
        pieces = np.empty(y.shape[:-1] + h.shape)
        pieces[..., :-1:2] = ahead[..., ::2]
        pieces[..., 1::2] = behind[..., ::2]
        pieces[..., -1] = behind[..., -1]
    out = np.zeros(y.shape)
    np.cumsum(pieces, axis=-1, out=out[..., 1:])
    return out


def _parabola_first_interval(f1, f2, f3, x21, x32):
    """∫ over the first interval (width x21) of the parabola through f1, f2, f3 at spacings x21, x32."""
    x21_x31 = x21 / (x21 + x32)
    x21x21_x31x32 = x21_x31 * (x21 / x32)
    return x21 / 6 * ((3 - x21_x31) * f1 + (3 + x21x21_x31x32 + x21_x31) * f2 + (-x21x21_x31x32) * f3)


def balance_arguments(dae, values: Mapping, t_eval, params: Mapping) -> tuple:
    """The arguments ``(t, q, qd, p)`` of every :func:`balance_kernels` kernel, as numpy arrays.

    numpy in: the kernels are jitted, and an eager conversion compiles a
    program of its own.

    Args: as :func:`balance_series`.

    Returns:
        ``(t, q, qd, p)``: the output times, the coordinates and their first
        derivatives (:func:`coordinate_levels`), the parameters.
    """
    q, qd = coordinate_levels(dae, values)
    return np.asarray(t_eval, dtype=float), q, qd, {k: np.asarray(v) for k, v in params.items()}


def balance_series(dae, values: Mapping, t_eval, params: Mapping, energy, kernels=None, before=None) -> dict:
    """The balance outputs of a batch of runs.

    Args:
        dae: the DAE.
        values: name -> (B, n_out, L, *shape) dense output (value, derivative…).
        t_eval: (n_out,) output times.
        params: name -> (B, …) full parameter values.
        energy: (B, n_out) energy series, or None (then nothing is computed).
        kernels: the DAE's :func:`balance_kernels` (pass the compiled model's,
            :meth:`solver.compiled.Compiled.balance_series`, to compile them
            once); built anew when None.
        before: called as ``before(kernel, args)`` before each kernel's call
            (the compiled model waits there for a build started ahead).

    Returns:
        dict name -> array with leading (B, n_out), the names of
        :func:`balance_layout`; NaN where the output time was not reached.
    """
    if energy is None or not callable(getattr(dae, "energy_fn", None)):
        return {}
    energy = np.asarray(energy, dtype=float)
    out = {"energy_change": energy - energy[:, :1]}
    kernels = balance_kernels(dae) if kernels is None else kernels
    if not kernels:
        return out
    args = balance_arguments(dae, values, t_eval, params)

    def call(name):
        if before is not None:
            before(kernels[name], args)
        return kernels[name](*args)

    if "power" in kernels:
        power = np.asarray(call("power"), dtype=float)
        out["dissipated"] = _cumulative_integral(power, np.asarray(t_eval, dtype=float))
    if "momenta" in kernels:
        P, L = call("momenta")
        out["momentum"], out["angular_momentum"] = np.asarray(P), np.asarray(L)
    return out
