"""Consistent initial values (METHOD.md §6).

The user gives values of the state entries ``x_j^(l)`` (l < d_j): each is
fixed or a guess.  A consistent point satisfies every hidden constraint.  Two
paths find one:

* :func:`batched_newton` — Gauss–Newton with minimum-norm corrections in the
  free entries, jit- and vmap-safe: the fast path for a batch of designs;
* :func:`ipopt_point` — the nearest consistent point to the guesses by IPOPT
  (cyipopt), the robust path and the fallback for points where Newton fails.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from .errors import InputError
from .integrate import Integrator

__all__ = ["parse_values", "batched_newton", "InitialValueError", "StateSpec"]

_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[\s*(\d+)\s*\])?\s*('*)\s*$")


class InitialValueError(InputError):
    """No consistent initial point could be found from the given values."""


class StateSpec:
    """Guesses and fixed entries of the state, plus leading-derivative guesses.

    Attributes:
        z_hat: flat state guess/fixed values (normalised: x^(l)/l!).
        free: bool mask, True where the entry may move.
        u_guess: flat guess of the leading derivatives X[j, d_j] (normalised).
    """

    def __init__(self, z_hat, free, u_guess):
        self.z_hat, self.free, self.u_guess = z_hat, free, u_guess


def _parse_key(key: str, integ: Integrator):
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
    dae = integ.dae
    d = integ.prog.d
    z_hat = np.zeros(integ.n_state)
    free = np.ones(integ.n_state, dtype=bool)
    u_guess = np.zeros(dae.n)
    pos = {}
    for v in dae.variables:
        a, _ = integ.state_slices[v.name]
        for k, (r, c) in enumerate(zip(integ.state_rows[v.name], integ.state_cols[v.name])):
            pos[(v.name, int(c), int(r))] = a + k
    given = set()
    for key, val in (values or {}).items():
        var, elems, l = _parse_key(key, integ)
        arr = np.asarray(val, dtype=float).ravel()
        if arr.size == 1:
            arr = np.full(len(elems), float(arr[0]))
        if arr.size != len(elems):
            raise InputError(f"{key!r}: expected {len(elems)} value(s), got {arr.size}")
        for e, x in zip(elems, arr):
            dj = int(d[var.offset + e])
            if l < dj:
                z_hat[pos[(var.name, e, l)]] = x / math.factorial(l)
                given.add((var.name, e, l))
            elif l == dj:
                u_guess[var.offset + e] = x / math.factorial(l)
            else:
                raise InputError(
                    f"{key!r}: derivative order {l} of {var.name} is above its leading order {dj}; "
                    f"only orders below {dj} are state (and {dj} a guess)"
                )
    for key in fixed or []:
        var, elems, l = _parse_key(key, integ)
        for e in elems:
            dj = int(d[var.offset + e])
            if l >= dj:
                label = var.component_names()[e] + "'" * l
                raise InputError(
                    f"cannot fix {label!r}: it is not part of the state (the state has derivatives of "
                    f"{var.component_names()[e]} below order {dj}); the equations determine it"
                )
            free[pos[(var.name, e, l)]] = False
    return StateSpec(z_hat, free, u_guess)


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
        A = G @ G.T
        A = A + jnp.eye(A.shape[0]) * (1e-14 * jnp.trace(A) / A.shape[0] + 1e-300)
        dz = -G.T @ jnp.linalg.solve(A, r)
        # Damp wild early steps from rough guesses (keeps branches apart).
        nrm = jnp.max(jnp.abs(dz))
        lim = 0.5 * (1.0 + jnp.max(jnp.abs(z)))
        dz = jnp.where(nrm > lim, dz * (lim / nrm), dz)
        dz = jnp.where(jnp.all(jnp.isfinite(dz)), dz, 0.0)
        return z + dz, it + 1, jnp.where(jnp.all(jnp.isfinite(dz)), nrm, 0.0)

    z, _, _ = lax.while_loop(cond, body, (z_hat, 0, jnp.inf))
    return z, jnp.max(jnp.abs(g(z)))
