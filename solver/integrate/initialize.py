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
"""

from __future__ import annotations

import math
import re
import weakref
from typing import Mapping, Sequence

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jax
import jax.numpy as jnp
from jax import lax

from solver.numerics import linalg
from solver.errors import InputError
from solver.integrate.integrator import Integrator

__all__ = ["parse_values", "parse_values_table", "batched_newton", "InitialValueError", "StateSpec", "ipopt_point",
           "IpoptDerivatives", "hidden_jacobian_pattern", "IPOPT_DEFAULTS", "run_ipopt", "ASSEMBLY_TOL",
           "state_scale", "state_scales", "violated_rows", "residual_list"]

# A state whose hidden constraints are below this (times its scale) is consistent.
ASSEMBLY_TOL = 1e-10

_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[\s*(\d+)\s*\])?\s*('*)\s*$")


class InitialValueError(InputError):
    """No consistent initial point could be found from the given values.

    Args:
        message: as for :class:`solver.errors.InputError`.
        violated: indices of the hidden constraints (rows of
            ``Integrator.hidden_labels``) violated at the closest point found,
            worst first; empty where unknown.  A batch's failure reasons name
            them (:mod:`solver.analysis.failures`).
        **where: ``file``, ``path``, ``line`` as for ``InputError``.
    """

    def __init__(self, message: str, violated: Sequence[int] = (), **where):
        super().__init__(message, **where)
        self.violated = tuple(int(i) for i in violated)


class StateSpec:
    """Guesses and fixed entries of the state, plus leading-derivative guesses.

    Attributes:
        z_hat: flat state guess/fixed values (normalised: x^(l)/l!).
        free: bool mask, True where the entry may move.
        u_guess: flat guess of the leading derivatives X[j, d_j] (normalised).
        weights: per-entry weights of the distance to the guesses that
            :func:`ipopt_point` minimises (None = all 1).
        given: bool mask of the entries the user gave a value for (None =
            unknown); used only to word error messages.
    """

    def __init__(self, z_hat, free, u_guess, weights=None, given=None):
        self.z_hat, self.free, self.u_guess = z_hat, free, u_guess
        self.weights, self.given = weights, given


# A batch gives the same names for every point (parsing them point by point
# was most of solve_batch's time outside the run), so
# what each name means is worked out once per integrator and set of names
# (a :class:`_Plan`), and each point only fills arrays.
_PLANS: "weakref.WeakKeyDictionary[Integrator, dict]" = weakref.WeakKeyDictionary()


class _Entry:
    """What one initial-value name sets: state entries, leading-derivative guesses, or an error to raise."""

    def __init__(self, key, integ: Integrator):
        self.key, self.error, self.order_error = key, None, None
        try:
            var, elems, l = _parse_key_uncached(key, integ)
        except InputError as exc:
            self.error = exc
            return
        d, pos = integ.prog.d, integ.state_position
        self.size = len(elems)
        self.divisor = float(math.factorial(l))
        # Lists of (element, position): a few scalar stores beat numpy's fancy indexing here.
        self.z_targets, self.u_targets = [], []
        for i, e in enumerate(elems):
            dj = int(d[var.offset + e])
            if l < dj:
                self.z_targets.append((i, pos[(var.name, e, l)]))
            elif l == dj:
                self.u_targets.append((i, var.offset + e))
            else:
                self.order_error = (f"{key!r}: derivative order {l} of {var.name} is above its leading order {dj}; "
                                    f"only orders below {dj} are state (and {dj} a guess)")
                break

    def fill(self, val, z_hat, u_guess):
        """Write one point's value of this name (raises as :func:`parse_values` documents)."""
        if self.error is not None:
            raise type(self.error)(*self.error.args)
        if isinstance(val, (int, float)):  # one number for every element
            x = float(val)
            values = None
        else:
            arr = np.asarray(val, dtype=float).ravel()
            if arr.size == 1:
                x, values = float(arr[0]), None
            elif arr.size != self.size:
                raise InputError(f"{self.key!r}: expected {self.size} value(s), got {arr.size}")
            else:
                values = arr.tolist()
        if self.order_error is not None:
            raise InputError(self.order_error)
        for targets, out in ((self.z_targets, z_hat), (self.u_targets, u_guess)):
            for i, p in targets:
                out[p] = (x if values is None else values[i]) / self.divisor


    def fill_table(self, column, z_hat, u_guess):
        """Write every point's value of this name (:func:`parse_values_table`): ``column`` is ``(B,) + shape``."""
        if self.error is not None:
            raise type(self.error)(*self.error.args)
        arr = np.asarray(column, dtype=float)
        arr = arr.reshape(arr.shape[0], -1)
        if arr.shape[1] not in (1, self.size):
            raise InputError(f"{self.key!r}: expected {self.size} value(s), got {arr.shape[1]}")
        if self.order_error is not None:
            raise InputError(self.order_error)
        for targets, out in ((self.z_targets, z_hat), (self.u_targets, u_guess)):
            for i, p in targets:
                out[:, p] = arr[:, 0 if arr.shape[1] == 1 else i] / self.divisor


class _Plan:
    """The entries of a set of initial-value names and the free/given masks of a set of fixed names."""

    def __init__(self, integ: Integrator, keys: tuple, fixed: tuple):
        dae = integ.dae
        d, pos = integ.prog.d, integ.state_position
        self.entries = [_Entry(key, integ) for key in keys]
        self.given = np.zeros(integ.n_state, dtype=bool)
        for entry in self.entries:
            if entry.error is None and entry.order_error is None:
                self.given[[p for _, p in entry.z_targets]] = True
        self.free = np.ones(integ.n_state, dtype=bool)
        self.fixed_error = None
        try:
            for key in fixed:
                var, elems, l = _parse_key_uncached(key, integ)
                for e in elems:
                    dj = int(d[var.offset + e])
                    if l >= dj:
                        label = var.component_names()[e] + "'" * l
                        raise InputError(
                            f"cannot fix {label!r}: it is not part of the state (the state has derivatives of "
                            f"{var.component_names()[e]} below order {dj}); the equations determine it"
                        )
                    self.free[pos[(var.name, e, l)]] = False
        except InputError as exc:
            self.fixed_error = exc
        self.n_state, self.n = integ.n_state, dae.n


def _plan(integ: Integrator, keys: tuple, fixed: tuple) -> _Plan:
    plans = _PLANS.setdefault(integ, {})
    key = (keys, fixed)
    if key not in plans:
        plans[key] = _Plan(integ, keys, fixed)
    return plans[key]


def _parse_key_uncached(key: str, integ: Integrator):
    m = _KEY.match(str(key))
    dae = integ.dae
    if not m:
        raise InputError(
            f"cannot read the initial-value name {key!r}; write NAME, NAME' (derivative) or NAME[i] (vector component)"
        )
    name, idx, primes = m.group(1), m.group(2), m.group(3)
    if name not in dae.var_index:
        raise InputError(
            f"initial value for unknown variable {name!r}; the variables are {[v.name for v in dae.variables]}"
        )
    var = dae.var_index[name]
    if idx is not None:
        i = int(idx)
        if var.shape == () or i >= var.size:
            raise InputError(f"{key!r}: {name} has {var.size} component(s); index {i} is out of range")
        elems = [i]
    else:
        elems = list(range(var.size))
    return var, elems, len(primes)


def parse_values(integ: Integrator, values: Mapping | None, fixed: Sequence[str] | None = None) -> StateSpec:
    """Turn ``values``/``fixed`` of the user into a :class:`StateSpec`.

    Args:
        integ: the integrator (its state layout).
        values: mapping like ``{"x": 1.0, "x'": 0.0, "q": [..], "q[2]'": 0.3}``
            giving derivatives (not normalised).  Entries not given are
            guessed as 0.  A value for a leading derivative (``x''`` when
            d_x = 2, or an algebraic variable such as a multiplier) is a guess
            for the first Newton solve.
        fixed: names (same syntax) whose values must be kept exactly.

    Returns:
        StateSpec.

    Raises:
        InputError: unknown names, bad shapes, or fixed entries that are not
            part of the state.
    """
    values = values or {}
    plan = _plan(integ, tuple(values), tuple(fixed or ()))
    z_hat = np.zeros(plan.n_state)
    u_guess = np.zeros(plan.n)
    for entry, val in zip(plan.entries, values.values()):
        entry.fill(val, z_hat, u_guess)
    if plan.fixed_error is not None:
        raise type(plan.fixed_error)(*plan.fixed_error.args)
    return StateSpec(z_hat, plan.free.copy(), u_guess, given=plan.given.copy())


def parse_values_table(integ: Integrator, values: Mapping, fixed: Sequence[str] | None, size: int):
    """:func:`parse_values` of ``size`` points whose values come as columns.

    Row ``i`` of each result is what :func:`parse_values` gives point ``i``
    (the same divisions, element by element), without a Python call per
    point.

    Args:
        integ: the integrator (its state layout).
        values: name (as for :func:`parse_values`) -> ``(size,) + shape``
            array: every point's value of that name.
        fixed: names whose values are kept exactly (the same for every point).
        size: the number of points.

    Returns:
        ``(z_hat, u_guess, free)``: ``(size, n_state)``, ``(size, n)`` float
        arrays and the ``(size, n_state)`` bool mask.

    Raises:
        InputError: as :func:`parse_values` (the same for every point).
    """
    plan = _plan(integ, tuple(values), tuple(fixed or ()))
    z_hat = np.zeros((size, plan.n_state))
    u_guess = np.zeros((size, plan.n))
    for entry, column in zip(plan.entries, values.values()):
        entry.fill_table(column, z_hat, u_guess)
    if plan.fixed_error is not None:
        raise type(plan.fixed_error)(*plan.fixed_error.args)
    return z_hat, u_guess, np.broadcast_to(plan.free, (size, plan.n_state)).copy()


def batched_newton(integ: Integrator, params, t0, z_hat, free, iters: int = 40, tol: float = 1e-13):
    """Consistent point by Gauss–Newton with minimum-norm corrections.

    jit- and vmap-safe: each call handles one point; ``jax.vmap`` it over a
    batch of parameters and guesses.

    Args:
        integ: the integrator.
        params: parameter dict.
        t0: initial time.
        z_hat: flat state guess (fixed entries hold their values).
        free: bool mask of entries that may move.
        iters: iteration limit.
        tol: stop when the largest correction falls below tol * scale.

    Returns:
        (z, max |constraint|) — check the residual to decide success.
    """
    consts = integ.prog.constants(params)
    z_hat = jnp.asarray(z_hat, dtype=jnp.float64)
    if integ.n_hidden == 0:
        return z_hat, jnp.zeros(())
    mask = jnp.asarray(free, dtype=jnp.float64)
    g = lambda zz: integ._hidden(zz, t0, consts)

    def cond(c):
        z, it, step = c
        return (it < iters) & (step > tol * (1.0 + jnp.max(jnp.abs(z))))

    def body(c):
        z, it, _ = c
        r = g(z)
        G = jax.jacfwd(g)(z) * mask[None, :]
        dz = linalg.min_norm_correction(G, r)
        # Damp wild early steps from rough guesses (keeps branches apart).
        nrm = jnp.max(jnp.abs(dz))
        lim = 0.5 * (1.0 + jnp.max(jnp.abs(z)))
        dz = jnp.where(nrm > lim, dz * (lim / nrm), dz)
        dz = jnp.where(jnp.all(jnp.isfinite(dz)), dz, 0.0)
        return z + dz, it + 1, jnp.where(jnp.all(jnp.isfinite(dz)), nrm, 0.0)

    z, _, _ = lax.while_loop(cond, body, (z_hat, 0, jnp.inf))
    return z, jnp.max(jnp.abs(g(z)))


# --------------------------------------------------------------------- sparsity
def hidden_jacobian_pattern(integ: Integrator) -> sp.csr_array:
    """Structural nonzeros of ∂(hidden constraints)/∂(state), from Σ.

    Hidden constraint (i, r) is Taylor coefficient r of f_i; it depends on the
    coefficient ``X[j, l]`` only if ``σ_ij`` is finite and ``l <= σ_ij + r``
    (differentiating f_i r times raises every order in it by at most r).  No
    numeric Jacobian is sampled, so a zero that happens to hold at one point
    (a guess on an axis) cannot hide an entry.

    Args:
        integ: the integrator.

    Returns:
        boolean CSR array (n_hidden, n_state); memory proportional to the
        nonzeros.
    """
    dae = integ.dae
    sig = dae.structure.signature
    by_row = {}
    for i, j, o in zip(sig.rows.tolist(), sig.cols.tolist(), sig.orders.tolist()):
        by_row.setdefault(i, []).append((j, o))
    # (flat unknown, derivative order) -> index in the state z.
    state_pos = {(dae.var_index[name].offset + c, r): k for (name, c, r), k in integ.state_position.items()}
    rows, cols = [], []
    for h, (b, r, e) in enumerate(integ.hidden_index):
        i = dae.equation_blocks[b][0] + e
        for j, o in by_row.get(i, []):
            for l in range(o + r + 1):
                s = state_pos.get((j, l))
                if s is not None:
                    rows.append(h)
                    cols.append(s)
    pat = sp.csr_array((np.ones(len(rows), bool), (np.asarray(rows, int), np.asarray(cols, int))),
                       shape=(integ.n_hidden, integ.n_state))
    pat.sum_duplicates()
    pat.sort_indices()
    return pat


def _greedy_colouring(pattern: sp.csr_array) -> np.ndarray:
    """Colours of the columns such that no row has two nonzeros of one colour.

    Then one directional derivative per colour recovers every structural
    nonzero (Curtis–Powell–Reid compression).
    """
    P = sp.csr_array(pattern, dtype=np.int64)
    conflict = sp.csr_array(P.T @ P)
    n = P.shape[1]
    colour = np.full(n, -1, dtype=int)
    for j in range(n):
        nb = conflict.indices[conflict.indptr[j]:conflict.indptr[j + 1]]
        used = set(colour[nb].tolist())
        k = 0
        while k in used:
            k += 1
        colour[j] = k
    return colour


class IpoptDerivatives:
    """Jitted hidden constraints, sparse Jacobian and Lagrangian Hessian.

    All three act on the full state so that one compilation serves every
    choice of fixed entries; the caller keeps the free columns.  Built once
    per compiled model (:attr:`solver.compiled.Compiled.ipopt_derivatives`).

    Args:
        integ: the integrator.
    """

    def __init__(self, integ: Integrator):
        self.jac_pattern = hidden_jacobian_pattern(integ)
        coo = self.jac_pattern.tocoo()
        self.jac_rows, self.jac_cols = coo.row.astype(int), coo.col.astype(int)
        jcol = _greedy_colouring(self.jac_pattern)
        # The Hessian of constraint h lives on (its columns) x (its columns).
        P = sp.csr_array(self.jac_pattern, dtype=np.int64)
        hpat = sp.csr_array((P.T @ P) + sp.eye_array(integ.n_state, dtype=np.int64, format="csr")) > 0
        hpat = sp.csr_array(hpat)
        self.hess_pattern = hpat
        low = sp.tril(hpat).tocoo()
        self.hess_rows, self.hess_cols = low.row.astype(int), low.col.astype(int)
        hcol = _greedy_colouring(hpat)
        n = integ.n_state
        jseed = np.zeros((n, max(int(jcol.max(initial=-1)) + 1, 1)))
        jseed[np.arange(n), jcol] = 1.0
        hseed = np.zeros((n, max(int(hcol.max(initial=-1)) + 1, 1)))
        hseed[np.arange(n), hcol] = 1.0
        jr, jc, jk = self.jac_rows, self.jac_cols, jcol[self.jac_cols]
        hr, hc, hk = self.hess_rows, self.hess_cols, hcol[self.hess_cols]

        def g(params, t0, z):
            return integ._hidden(z, t0, integ.prog.constants(params))

        def jac(params, t0, z):
            f = lambda y: g(params, t0, y)
            JS = jax.vmap(lambda s: jax.jvp(f, (z,), (s,))[1], in_axes=1, out_axes=1)(jnp.asarray(jseed))
            return JS[jr, jk]

        def hess(params, t0, z, lam):
            grad = jax.grad(lambda y: jnp.dot(lam, g(params, t0, y)))
            HS = jax.vmap(lambda s: jax.jvp(grad, (z,), (s,))[1], in_axes=1, out_axes=1)(jnp.asarray(hseed))
            return HS[hr, hk]

        self.g = jax.jit(g)
        self.jac = jax.jit(jac)
        self.hess = jax.jit(hess)
        self.n_colours = (jseed.shape[1], hseed.shape[1])


def _gauss_newton(der: IpoptDerivatives, params, t0, z, free_idx, rows, iters: int, tol: float):
    """Minimum-norm (least-squares when over-determined) Gauss–Newton in the free entries.

    Runs on the host with the already-compiled residual and sparse Jacobian,
    so polishing IPOPT's answer costs no further compilation.
    """
    z = np.array(z, dtype=float)
    col_of = np.full(len(z), -1)
    col_of[free_idx] = np.arange(len(free_idx))
    row_of = np.full(der.jac_pattern.shape[0], -1)
    row_of[rows] = np.arange(len(rows))
    keep = (col_of[der.jac_cols] >= 0) & (row_of[der.jac_rows] >= 0)
    jr, jc = row_of[der.jac_rows[keep]], col_of[der.jac_cols[keep]]
    m, n = len(rows), len(free_idx)
    for _ in range(iters):
        g = np.asarray(der.g(params, t0, z))[rows]
        if not np.all(np.isfinite(g)) or np.max(np.abs(g), initial=0.0) <= 1e-3 * tol:
            break
        vals = np.asarray(der.jac(params, t0, z))[keep]
        if m * n <= 4_000_000:
            G = np.zeros((m, n))
            G[jr, jc] = vals
            dz = np.linalg.lstsq(G, -g, rcond=None)[0]
        else:  # large systems: stay sparse (minimum norm / least squares)
            G = sp.csr_array((vals, (jr, jc)), shape=(m, n))
            dz = spla.lsqr(G, -g, atol=1e-15, btol=1e-15, iter_lim=10 * n)[0]
        if not np.all(np.isfinite(dz)):
            break
        # Damp wild steps from rough starts, as batched_newton does.
        lim = 0.5 * (1.0 + np.max(np.abs(z)))
        nrm = np.max(np.abs(dz), initial=0.0)
        z[free_idx] += dz * (lim / nrm if nrm > lim else 1.0)
    return z


# ------------------------------------------------------------------------ IPOPT
IPOPT_DEFAULTS = {"print_level": 0, "sb": "yes", "tol": 1e-12, "acceptable_tol": 1e-9,
                  "constr_viol_tol": 1e-12, "max_iter": 200}
"""IPOPT options used unless overridden (quiet, tight, bounded iterations)."""

# IPOPT statuses meaning "a point was found" (the residual is then checked).
_IPOPT_OK = (0, 1)


def state_scales(z_batch) -> np.ndarray:
    """:func:`state_scale` of each row of a (batch, n) array, at once."""
    z = np.asarray(z_batch, dtype=float)
    if z.shape[1] == 0:
        return np.ones(z.shape[0])
    return np.fmax(1.0, np.max(np.abs(z), axis=1))  # fmax: a NaN entry gives 1, as Python's max did


def state_scale(z_hat) -> float:
    """The scale of a state for :data:`ASSEMBLY_TOL`: max(1, max |z|)."""
    return float(state_scales(np.reshape(np.asarray(z_hat, dtype=float), (1, -1)))[0])


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
        z = _gauss_newton(der, params, t0, z_hat, free_idx, rows, 40, tol)
    else:
        prob = _Problem(der, params, t0, z_hat, free_idx, rows, w, z_hat)
        x, status, msg = run_ipopt(prob, len(free_idx), len(rows), z_hat[free_idx], options)
        z = prob.full(x) if np.all(np.isfinite(x)) else z_hat
        if status in _IPOPT_OK:
            # IPOPT stops at its own scaled tolerance: finish to rounding.
            z = _gauss_newton(der, params, t0, z, free_idx, rows, 4, tol)
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
