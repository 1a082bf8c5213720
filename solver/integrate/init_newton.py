"""Newton on the hidden constraints, and their sparse derivatives for IPOPT.

:func:`batched_newton` is the fast path (jit- and vmap-safe, a batch of
designs at once); :class:`IpoptDerivatives` holds the jitted constraints and
their sparse Jacobian and Hessian, found by colouring
:func:`hidden_jacobian_pattern`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.program_store import stored_jit
from solver.integrate.integrator import Integrator
from solver.numerics import linalg
from solver.numerics.jacobian import with_value

if TYPE_CHECKING:
    import scipy.sparse as sp

# SciPy's sparse package is imported where IPOPT's derivatives are built, not with this module: it
# costs a fifth of a second, and a warm start that never needs IPOPT should not pay it.

__all__ = ["IpoptDerivatives", "batched_newton", "gauss_newton", "hidden_jacobian_pattern"]


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
        G, r = jax.jacfwd(with_value(g), has_aux=True)(z)
        G = G * mask[None, :]
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
    import scipy.sparse as sp

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
    import scipy.sparse as sp

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
        import scipy.sparse as sp

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
        jr, jk = self.jac_rows, jcol[self.jac_cols]
        hr, hk = self.hess_rows, hcol[self.hess_cols]

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

        self.g = stored_jit(g, integ.identity, "ipopt_constraints")
        self.jac = stored_jit(jac, integ.identity, "ipopt_jacobian")
        self.hess = stored_jit(hess, integ.identity, "ipopt_hessian")
        self.n_colours = (jseed.shape[1], hseed.shape[1])


def gauss_newton(der: IpoptDerivatives, params, t0, z, free_idx, rows, iters: int, tol: float):
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
            import scipy.sparse as sp
            import scipy.sparse.linalg as spla

            G = sp.csr_array((vals, (jr, jc)), shape=(m, n))
            dz = spla.lsqr(G, -g, atol=1e-15, btol=1e-15, iter_lim=10 * n)[0]
        if not np.all(np.isfinite(dz)):
            break
        # Damp wild steps from rough starts, as batched_newton does.
        lim = 0.5 * (1.0 + np.max(np.abs(z)))
        nrm = np.max(np.abs(dz), initial=0.0)
        z[free_idx] += dz * (lim / nrm if nrm > lim else 1.0)
    return z
