"""Stability of an equilibrium: the equations of motion linearised on the constraints, classified."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from solver.analysis.equilibrium_kernels import RestKernels
from solver.dae.problem import DAE

__all__ = ["unstable_direction", "classify"]


# ------------------------------------------------------------------ stability
def _layout(dae: DAE):
    """(q, mu, dyn, con) flat index arrays of a second-order model, or a reason string."""
    from solver.mechanics.lagrangian import LagrangianDAE

    n = dae.n
    if isinstance(dae, LagrangianDAE):
        # Coordinates first, then the multiplier vector; Euler–Lagrange rows
        # (one per coordinate component) first, then the constraints.
        q, mu = np.arange(dae.n_q), np.arange(dae.n_q, n)
        return q, mu, q.copy(), mu.copy()
    s = dae.structure
    c, d = np.asarray(s.c, dtype=int), np.asarray(s.d, dtype=int)
    if not set(d.tolist()) <= {0, 2}:
        bad = sorted({dae.structure.variable_names[j] for j in np.nonzero((d != 0) & (d != 2))[0]})
        return (f"not a second-order mechanical system: {', '.join(bad)} have Σ offset d not in "
                f"(0, 2)")
    if not set(c.tolist()) <= {0, 2}:
        return ("not a second-order mechanical system: some equations have Σ offset c = 1 "
                "(velocity-level constraints)")
    q, mu = np.nonzero(d == 2)[0], np.nonzero(d == 0)[0]
    dyn, con = np.nonzero(c == 0)[0], np.nonzero(c == 2)[0]
    if len(dyn) != len(q):
        return (f"not a second-order mechanical system: {len(dyn)} equations of motion for "
                f"{len(q)} coordinates")
    return q, mu, dyn, con


def _linearised(k: RestKernels, x, t, p, pvals):
    """The model linearised at rest at ``x``, or the reason it is not classified.

    Returns:
        a dict with the flat index arrays ``q, mu, dyn`` (:func:`_layout`),
        the Jacobian ``J``, ``M``, ``K``, ``W`` and ``Z`` (an orthonormal
        basis of null(G)), as in the module docstring; or a reason string.
    """
    from solver.mechanics.lagrangian import LagrangianDAE

    dae = k.dae
    lay = _layout(dae)
    if isinstance(lay, str):
        return lay
    q, mu, dyn, con = lay
    J = np.asarray(k.J(x, t, p))
    if isinstance(dae, LagrangianDAE):
        qd = np.zeros(dae.n_q)
        M = np.asarray(dae.mass_matrix(t, x[q], qd, params=pvals))
        G = np.asarray(dae.constraint_jacobian(t, x[q], params=pvals)) if dae.n_c else \
            np.zeros((0, dae.n_q))
    else:
        M = np.asarray(k.M(x, t, p))[np.ix_(dyn, q)]
        G = J[np.ix_(con, q)]
    Z = sla.null_space(G) if G.shape[0] else np.eye(len(q))
    return {"q": q, "mu": mu, "dyn": dyn, "J": J, "M": M, "K": J[np.ix_(dyn, q)],
            "W": J[np.ix_(dyn, mu)], "Z": Z}


def unstable_direction(k: RestKernels, x, t, p, pvals) -> np.ndarray | None:
    """The most unstable mode at the equilibrium ``x`` as a flat move, or None.

    The eigenvector of the most negative eigenvalue of ``Zᵀ K Z`` (real
    parts where K is not symmetric), mapped back to the coordinates by Z:
    a move along the constraints on which the stiffness pushes the model
    further away.  The multipliers' entries are zero (settling solves them).

    Returns:
        a unit-max-norm vector of length ``dae.n``, or None where the model
        is not classified or has no mode with a negative eigenvalue.
    """
    lin = _linearised(k, x, t, p, pvals)
    if isinstance(lin, str) or lin["Z"].shape[1] == 0:
        return None
    Z = lin["Z"]
    Kt = Z.T @ lin["K"] @ Z
    if np.allclose(Kt, Kt.T, rtol=0, atol=1e-8 * max(1.0, float(np.max(np.abs(Kt))))):
        ev, vecs = np.linalg.eigh(0.5 * (Kt + Kt.T))
    else:
        ev, vecs = np.linalg.eig(Kt)
    i = int(np.argmin(np.real(ev)))
    if np.real(ev[i]) >= 0:
        return None
    move = np.zeros(k.dae.n)
    move[lin["q"]] = Z @ np.real(vecs[:, i])
    size = float(np.max(np.abs(move)))
    return move / size if size > 0 else None


def classify(k: RestKernels, x, t, p, pvals, zero_tol) -> dict:
    """The stability fields of :class:`Equilibrium` at an equilibrium ``x``."""
    lin = _linearised(k, x, t, p, pvals)
    if isinstance(lin, str):
        return {"notes": [lin]}
    mu, dyn, J, M, K, W, Z = (lin[n] for n in ("mu", "dyn", "J", "M", "K", "W", "Z"))
    notes = []
    dof = Z.shape[1]
    if dof == 0:
        return {"dof": 0, "notes": ["no degrees of freedom: the constraints fix the configuration"]}
    if len(mu) and np.max(np.abs(Z.T @ W)) > 1e-8 * max(1.0, np.max(np.abs(W))):
        return {"dof": dof, "notes": ["the multipliers do not enter the equations of motion as "
                                      "Gᵀλ (the constraint gradients): the stiffness cannot be "
                                      "projected"]}
    Kt, Mt = Z.T @ K @ Z, Z.T @ M @ Z
    Mt = 0.5 * (Mt + Mt.T)
    m_ev = np.linalg.eigvalsh(Mt)
    if m_ev.size and np.all(m_ev < 0):
        # Equations of motion written as −(M q'' + …) = 0: same physics.
        Kt, Mt, m_ev = -Kt, -Mt, -m_ev[::-1]
    scale = max(float(np.max(np.abs(J[dyn]))) if len(dyn) else 0.0, np.finfo(float).tiny)
    symmetric = np.max(np.abs(Kt - Kt.T)) <= 1e-8 * max(scale, np.max(np.abs(Kt)))
    if symmetric:
        ev = np.linalg.eigvalsh(0.5 * (Kt + Kt.T))
    else:
        ev = np.linalg.eigvals(Kt)
        ev = ev[np.argsort(ev.real)]
        notes.append("the stiffness is not symmetric (non-conservative forces): classified by "
                     "the real parts of its eigenvalues, which need not decide stability")
    zero = np.abs(ev) <= zero_tol * scale
    neg = (np.real(ev) < 0) & ~zero
    if neg.any():
        branch, stable = "unstable", False
    elif zero.any():
        branch, stable = "marginal", None
    else:
        branch, stable = "stable", True
    w2 = freqs = None
    if m_ev.size and np.all(m_ev > 1e-12 * np.max(np.abs(m_ev))):
        if symmetric:
            w2 = sla.eigh(0.5 * (Kt + Kt.T), Mt, eigvals_only=True)
        else:
            w2 = np.sort_complex(sla.eigvals(Kt, Mt))
        # Same inertia as the stiffness (Sylvester): negatives first, then zeros.
        n_neg, n_zero = int(neg.sum()), int(zero.sum())
        freqs = np.sqrt(np.abs(np.real(w2)))
        freqs[:n_neg] = np.nan
        freqs[n_neg:n_neg + n_zero] = 0.0
    else:
        notes.append("the projected mass matrix is not positive definite: no frequencies")
    return {"stiffness_eigenvalues": ev, "omega_squared": w2, "frequencies": freqs,
            "branch": branch, "stable": stable, "dof": dof, "n_negative": int(neg.sum()),
            "n_zero": int(zero.sum()), "notes": notes}
