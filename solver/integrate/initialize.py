"""Consistent initial values (docs/method.md §6).

The user gives values of the state entries ``x_j^(l)`` (l < d_j): each is
fixed or a guess.  A consistent point satisfies every hidden constraint.  Two
paths find one:

* :func:`batched_newton` — Gauss–Newton with minimum-norm corrections in the
  free entries, jit- and vmap-safe: the fast path for a batch of designs;
* :func:`ipopt_point` — the nearest consistent point to the guesses by IPOPT
  (cyipopt), the robust path and the fallback for points where Newton fails;
* :class:`IpoptDerivatives` — IPOPT's jitted constraints, sparse Jacobian
  and Hessian (built once per compiled model, :mod:`solver.compiled`).

The policy that combines them (Newton for a whole batch, IPOPT for the
points it misses) lives in :meth:`solver.compiled.Compiled.consistent_points`,
which also owns the compiled functions.

Errors a user sees (:class:`InitialValueError`) start with one of

* ``"the fixed initial values are inconsistent"`` — constraints that involve
  only fixed entries are violated, or an over-determined fixed set cannot be
  met; the violated constraints are listed with their residuals;
* ``"no consistent initial point found"`` — IPOPT ended away from the
  constraints (infeasible design, iteration limit); IPOPT's status, the
  closest point and the largest residuals are given, and when no values were
  given at all, how many the DAE's degrees of freedom call for.

Layout: the values a user gives are read by :mod:`solver.integrate.init_values`,
the Newton paths and IPOPT's sparse derivatives are
:mod:`solver.integrate.init_newton`, IPOPT itself and the messages naming the
violated constraints :mod:`solver.integrate.init_ipopt`; every name is
importable from here.
"""

from __future__ import annotations

from solver.integrate.init_ipopt import IPOPT_DEFAULTS, ipopt_point, residual_list, run_ipopt, violated_rows
from solver.integrate.init_newton import IpoptDerivatives, batched_newton, hidden_jacobian_pattern
from solver.integrate.init_values import (ASSEMBLY_TOL, InitialValueError, StateSpec, parse_values,
                                          parse_values_table, state_scale, state_scales)

__all__ = ["parse_values", "parse_values_table", "batched_newton", "InitialValueError", "StateSpec", "ipopt_point",
           "IpoptDerivatives", "hidden_jacobian_pattern", "IPOPT_DEFAULTS", "run_ipopt", "ASSEMBLY_TOL",
           "state_scale", "state_scales", "violated_rows", "residual_list"]


# The private name solver.compiled imports; residual_list is the public one.
_residual_list = residual_list
