"""The nearest consistent point by IPOPT, and the messages that name violated constraints.

:func:`ipopt_point` is the robust path and the fallback for points Newton
misses; :func:`run_ipopt` runs cyipopt on a problem object;
:func:`residual_list` and :func:`violated_rows` word what is violated.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

import jax.numpy as jnp

from solver.errors import InputError
from solver.integrate.init_newton import IpoptDerivatives, gauss_newton
from solver.integrate.init_values import ASSEMBLY_TOL, InitialValueError, StateSpec, state_scale
from solver.integrate.integrator import Integrator

__all__ = ["IPOPT_DEFAULTS", "ipopt_point", "residual_list", "run_ipopt", "violated_rows"]


# ------------------------------------------------------------------------ IPOPT
IPOPT_DEFAULTS = {"print_level": 0, "sb": "yes", "tol": 1e-12, "acceptable_tol": 1e-9,
                  "constr_viol_tol": 1e-12, "max_iter": 200}
"""IPOPT options used unless overridden (quiet, tight, bounded iterations)."""

# IPOPT statuses meaning "a point was found" (the residual is then checked).
_IPOPT_OK = (0, 1)

# Violated constraints named in a message (the worst first), and fixed values per constraint.
_MAX_LISTED = 5
_MAX_FIXED_LISTED = 4


def violated_rows(g: np.ndarray, tol: float) -> list[int]:
    """Indices of the hidden constraints above ``tol`` (or not finite), worst first.

    Args:
        g: hidden-constraint residuals (one per row of ``Integrator.hidden_labels``).
        tol: the assembly tolerance of the point.

    Returns:
        The row indices, the largest residual first (non-finite ones first of all).
    """
    g = np.asarray(g, dtype=float)
    size = np.where(np.isfinite(g), np.abs(g), np.inf)
    return [int(i) for i in np.argsort(-size, kind="stable") if not size[i] <= tol]


def residual_list(integ: Integrator, g: np.ndarray, tol: float, limit: int = _MAX_LISTED,
                  der: "IpoptDerivatives | None" = None, z: np.ndarray | None = None,
                  free: np.ndarray | None = None) -> str:
    """``label = value`` for the largest residuals above tol (worst first): the one wording of violated constraints.

    With the derivatives' sparsity ``der``, the state ``z`` and the ``free``
    mask, each constraint also names the fixed values it involves, as typed
    (``f2 = 3 (fixed: x = 2)``): those are what the user can change.

    Args:
        integ: the integrator (its ``hidden_labels`` name the constraints).
        g: the hidden constraints' values.
        tol: the largest value not listed.
        limit: the most constraints listed; the rest are counted.
        der, z, free: optional sparsity, state and free mask, to name the
            fixed values each constraint involves.

    Returns:
        The comma-separated list (with "(and N more)" past ``limit``).
    """
    order = np.argsort(-np.abs(g))
    items = []
    for i in order[:limit]:
        if not abs(g[i]) > tol:
            continue
        text = f"{integ.hidden_labels[i]} = {g[i]:.3g}"
        if der is not None and z is not None and free is not None:
            cols = [int(j) for j in der.jac_cols[der.jac_rows == i] if not free[j]]
            if cols:
                text += f" (fixed: {_values_text(integ, z, cols, _MAX_FIXED_LISTED)})"
        items.append(text)
    more = int(np.sum(np.abs(g) > tol)) - len(items)
    return ", ".join(items) + (f" (and {more} more)" if more > 0 else "")


def _values_text(integ: Integrator, z: np.ndarray, cols, limit: int) -> str:
    """``x = 2, x' = 0`` for state entries ``cols`` (at most ``limit``)."""
    # Show derivatives, not normalised coefficients: what the user typed.
    parts = []
    for j in list(cols)[:limit]:
        label = integ.state_labels[j]
        l = len(label) - len(label.rstrip("'"))
        parts.append(f"{label} = {z[j] * math.factorial(l):.6g}")
    return ", ".join(parts) + (", ..." if len(cols) > limit else "")


def _point_text(integ: Integrator, z: np.ndarray, limit: int = 12) -> str:
    return _values_text(integ, z, range(len(z)), limit)


def _dof_hint(integ: Integrator, spec: StateSpec) -> str:
    given = spec.given
    if given is None or given.any() or not np.all(spec.free):
        return ""
    dof = integ.dae.structure.dof
    if dof <= 0:
        return ""
    return (f" No initial values were given: this DAE has {dof} degree(s) of freedom, so give values "
            f"(fixed or guesses) for {dof} independent state entries among {integ.state_labels}.")


def _params_np(params) -> dict:
    return {k: jnp.asarray(v, dtype=jnp.float64) for k, v in params.items()}


class _Problem:
    """cyipopt problem object: free entries, distance objective, active constraints."""

    def __init__(self, der, params, t0, z_full, free_idx, rows, w, z_hat):
        self.der, self.params, self.t0 = der, params, t0
        self.z_full = np.array(z_full, dtype=float)
        self.free_idx, self.rows = free_idx, rows
        self.w, self.target = w, z_hat[free_idx]
        col_of = np.full(len(z_full), -1)
        col_of[free_idx] = np.arange(len(free_idx))
        row_of = np.full(der.jac_pattern.shape[0], -1)
        row_of[rows] = np.arange(len(rows))
        keep = (col_of[der.jac_cols] >= 0) & (row_of[der.jac_rows] >= 0)
        self.jkeep = np.nonzero(keep)[0]
        self.jstruct = (row_of[der.jac_rows[keep]], col_of[der.jac_cols[keep]])
        hkeep = (col_of[der.hess_rows] >= 0) & (col_of[der.hess_cols] >= 0)
        self.hkeep = np.nonzero(hkeep)[0]
        hr, hc = col_of[der.hess_rows[hkeep]], col_of[der.hess_cols[hkeep]]
        self.hstruct = (hr, hc)
        self.hdiag = np.nonzero(hr == hc)[0]
        self.hdiag_col = hr[self.hdiag]
        self.n_lam = der.jac_pattern.shape[0]

    def full(self, x):
        z = self.z_full.copy()
        z[self.free_idx] = x
        return z

    def objective(self, x):
        return float(np.sum(self.w * (x - self.target) ** 2))

    def gradient(self, x):
        return 2.0 * self.w * (x - self.target)

    def constraints(self, x):
        return np.asarray(self.der.g(self.params, self.t0, self.full(x)))[self.rows]

    def jacobianstructure(self):
        return self.jstruct

    def jacobian(self, x):
        return np.asarray(self.der.jac(self.params, self.t0, self.full(x)))[self.jkeep]

    def hessianstructure(self):
        return self.hstruct

    def hessian(self, x, lagrange, obj_factor):
        lam = np.zeros(self.n_lam)
        lam[self.rows] = lagrange
        vals = np.asarray(self.der.hess(self.params, self.t0, self.full(x), lam))[self.hkeep].copy()
        vals[self.hdiag] += 2.0 * obj_factor * self.w[self.hdiag_col]
        return vals


def run_ipopt(problem, n: int, m: int, x0, options: Mapping | None = None):
    """IPOPT on ``n`` unknowns with ``m`` equality constraints ``g(x) = 0``, silenced.

    The one place that starts IPOPT: consistent initial values
    (:func:`ipopt_point`) and equilibria (:mod:`solver.analysis.equilibrium`) both
    call it.

    Args:
        problem: a cyipopt problem object (``objective``, ``gradient``,
            ``constraints``, ``jacobian``, their structures, ``hessian``).
        n, m: unknowns and constraints.
        x0: the starting point (n,).
        options: IPOPT options over :data:`IPOPT_DEFAULTS` (which silence
            IPOPT's output and banner).

    Returns:
        (x, status, message): IPOPT's last iterate, its status code and its
        status message.

    Raises:
        InputError: IPOPT refused an option (name or value).
    """
    import cyipopt

    options = {**IPOPT_DEFAULTS, **dict(options or {})}
    nlp = cyipopt.Problem(n=n, m=m, problem_obj=problem, lb=np.full(n, -1e20), ub=np.full(n, 1e20),
                          cl=np.zeros(m), cu=np.zeros(m))
    for key, val in options.items():
        try:
            nlp.add_option(str(key), val)
        except (TypeError, ValueError) as exc:
            raise InputError(f"IPOPT option {key!r} = {val!r} was refused ({exc}); see the IPOPT "
                             "options reference (https://coin-or.github.io/Ipopt/OPTIONS.html)") from None
    x, info = nlp.solve(np.asarray(x0, dtype=float))
    msg = info.get("status_msg", b"")
    msg = msg.decode(errors="replace") if isinstance(msg, bytes) else str(msg)
    return np.asarray(x, dtype=float), int(info["status"]), msg.strip()


def ipopt_point(integ: Integrator, params, t0, spec: StateSpec, options: Mapping | None = None,
                derivatives: IpoptDerivatives | None = None) -> np.ndarray:
    """The consistent state nearest to the guesses, keeping fixed entries (IPOPT).

    Solves ``min Σ_free w (z − ẑ)²`` subject to every hidden constraint = 0,
    with the fixed entries substituted, exact first and second derivatives
    from JAX (jitted once per integrator) and the Jacobian/Hessian sparsity
    taken from Σ (:func:`hidden_jacobian_pattern`).  The IPOPT result is
    polished by a few minimum-norm Gauss–Newton steps (on the host, with the
    same compiled functions) so that it is consistent to rounding.

    Special cases, decided before IPOPT runs:

    * constraints that involve only fixed entries are checked, not solved:
      a complete consistent state given as fixed is returned as it is;
    * more remaining constraints than free entries (over-determined) are
      solved by Gauss–Newton alone (IPOPT refuses such problems) and
      accepted when consistent.

    Args:
        integ: the integrator.
        params: parameter dict (arrays).
        t0: initial time.
        spec: guesses, fixed mask and optional weights (:func:`parse_values`).
        options: IPOPT options overriding :data:`IPOPT_DEFAULTS` (for
            example ``{"print_level": 5}`` to see IPOPT's log).
        derivatives: the compiled :class:`IpoptDerivatives` of ``integ``
            (pass the compiled model's to reuse them; built here if None).

    Returns:
        flat consistent state (numpy), fixed entries exactly as given.

    Raises:
        InitialValueError: the message starts with
            ``"the fixed initial values are inconsistent"`` when constraints
            on fixed entries alone are violated, or an over-determined set
            cannot be met (it lists the violated constraints), and with
            ``"no consistent initial point found"`` when IPOPT (or
            Gauss–Newton) ends away from the constraint manifold (it gives
            IPOPT's status, the closest point and the largest residuals).
        InputError: an IPOPT option is refused.
    """
    params = _params_np(params)
    t0 = float(t0)
    z_hat = np.asarray(spec.z_hat, dtype=float)
    free = np.asarray(spec.free, dtype=bool)
    tol = ASSEMBLY_TOL * state_scale(z_hat)
    if integ.n_hidden == 0:
        return z_hat.copy()
    der = derivatives if derivatives is not None else IpoptDerivatives(integ)
    free_idx = np.nonzero(free)[0]
    depends = np.zeros(integ.n_hidden, dtype=bool)
    depends[der.jac_rows[free[der.jac_cols]]] = True
    g0 = np.asarray(der.g(params, t0, z_hat))
    bad_fixed = (~depends) & ~(np.abs(g0) <= tol)
    if bad_fixed.any():
        gf = np.where(bad_fixed, g0, 0.0)
        raise InitialValueError(
            "the fixed initial values are inconsistent: these constraints involve only fixed entries and "
            f"are violated: {residual_list(integ, gf, tol, der=der, z=z_hat, free=free)}. Free (unfix) some of "
            f"{[integ.state_labels[j] for j in np.nonzero(~free)[0]]} or correct their values",
            violated=violated_rows(gf, tol))
    rows = np.nonzero(depends)[0]
    if len(rows) == 0:
        return z_hat.copy()
    w = np.ones(len(free_idx)) if spec.weights is None else np.asarray(spec.weights, dtype=float)[free_idx]
    over = len(rows) > len(free_idx)
    if over:
        # IPOPT refuses more equalities than unknowns; a consistent
        # over-specified set is still a Gauss-Newton (least-squares) fixed point.
        status, msg = None, ""
        z = gauss_newton(der, params, t0, z_hat, free_idx, rows, 40, tol)
    else:
        prob = _Problem(der, params, t0, z_hat, free_idx, rows, w, z_hat)
        x, status, msg = run_ipopt(prob, len(free_idx), len(rows), z_hat[free_idx], options)
        z = prob.full(x) if np.all(np.isfinite(x)) else z_hat
        if status in _IPOPT_OK:
            # IPOPT stops at its own scaled tolerance: finish to rounding.
            z = gauss_newton(der, params, t0, z, free_idx, rows, 4, tol)
    g = np.asarray(der.g(params, t0, z))
    res = float(np.max(np.abs(g))) if np.all(np.isfinite(g)) else np.inf
    if (status is None or status in _IPOPT_OK) and res <= tol:
        z = np.where(free, z, z_hat)  # fixed entries bit-for-bit as given
        return z
    if over:
        raise InitialValueError(
            f"the fixed initial values are inconsistent: they leave {len(free_idx)} free entr"
            f"{'y' if len(free_idx) == 1 else 'ies'} for {len(rows)} constraints (over-determined) and "
            f"no point satisfies them all; closest point found [{_point_text(integ, z)}]; violated: "
            f"{residual_list(integ, g, tol, der=der, z=z, free=free)}. Free (unfix) some of "
            f"{[integ.state_labels[j] for j in np.nonzero(~free)[0]]} or correct their values",
            violated=violated_rows(g, tol))
    raise InitialValueError(
        f"no consistent initial point found (IPOPT status {status}: {msg}); largest constraint residual {res:.3g} "
        f"(tolerance {tol:.3g}) at the closest point found [{_point_text(integ, z)}]; violated: "
        f"{residual_list(integ, g, tol, der=der, z=z, free=free)}. Check the fixed values and the parameters (can the mechanism "
        "assemble?), or give better guesses." + _dof_hint(integ, spec), violated=violated_rows(g, tol))
