"""Finding a state at rest: the rest residual's kernels, the guess, Newton, settling and Ipopt.

Each solver takes the jitted kernels of one DAE
(:mod:`solver.analysis.equilibrium_kernels`) and returns the flat point it reached;
:func:`solver.analysis.equilibrium.equilibrium` chooses among them.
"""

from __future__ import annotations

import math
import re
from typing import Mapping

import numpy as np

from solver.analysis.equilibrium_kernels import RestKernels
from solver.analysis.equilibrium_result import EquilibriumError, MAX_NEWTON_ITERATIONS, SETTLE_PUSH
from solver.analysis.equilibrium_stability import classify, unstable_direction
from solver.dae.problem import DAE, DAEDefinitionError
from solver.errors import InputError

__all__ = ["split_model", "parameter_values", "sigma_offsets", "reported_coordinates", "starting_point",
           "newton_search", "settle_stable", "ipopt_search", "point_text"]

_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[\s*(\d+)\s*\])?\s*('*)\s*$")


# ------------------------------------------------------------------ inputs
def split_model(obj):
    """(dae, model or None) of a Model or a DAE."""
    from solver.models.model import Model

    if isinstance(obj, Model):
        return obj.dae, obj
    if isinstance(obj, DAE):
        return obj, None
    raise InputError(f"equilibrium: expected a model (solver.load(...)) or a solver.DAE, got "
                     f"{type(obj).__name__}")


def parameter_values(dae: DAE, model, params) -> dict:
    """The parameter values of the search: the model's checked ones, or the DAE's defaults with ``params``."""
    if model is not None:
        values = model.check_params(params)
        model.check_values(params)
        return {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    try:
        return dict(dae.param_values(params))
    except DAEDefinitionError as err:
        raise InputError(f"equilibrium: {err}") from None


def sigma_offsets(dae: DAE) -> np.ndarray:
    """The Σ-method offsets ``d`` of the variables, as an int array."""
    return np.asarray(dae.structure.d, dtype=int)


def reported_coordinates(dae: DAE) -> np.ndarray:
    """Flat mask of the entries reported as the configuration (the rest are multipliers).

    The solver's own split is by Σ offset (d > 0 a coordinate, d = 0 an
    algebraic variable), but a coordinate without mass, such as a massless
    point P tied to a rigid coupler, has d = 0 as the multipliers have: it
    is fixed by its constraints, not by an equation of motion.  It is still
    a coordinate, so a Lagrangian model (``Kind: Lagrangian`` or
    ``Mechanism``, whose variables are its coordinates and then the
    multiplier vector) reports every coordinate; a DAE written out equation
    by equation has no such list and keeps the split by offset.
    """
    from solver.mechanics.lagrangian import LagrangianDAE

    if isinstance(dae, LagrangianDAE):
        return np.arange(dae.n) < dae.n_q
    return sigma_offsets(dae) > 0


def _set_guess(dae: DAE, x: np.ndarray, key: str, value, where: str) -> None:
    """Write one ``NAME`` / ``NAME[i]`` guess into the flat vector."""
    m = _KEY.match(str(key))
    names = [v.name for v in dae.variables]
    if not m:
        raise EquilibriumError(f"{where}: cannot read the name {key!r}; write NAME or NAME[i] "
                               f"(the variables are {', '.join(names)})")
    name, idx, primes = m.group(1), m.group(2), m.group(3)
    if primes:
        raise EquilibriumError(f"{where}: {key!r} is a derivative; at an equilibrium every "
                               f"derivative is zero, so give values (NAME or NAME[i]) only")
    if name not in dae.var_index:
        raise EquilibriumError(f"{where}: unknown variable {name!r}; the variables are "
                               f"{', '.join(names)}")
    var = dae.var_index[name]
    if idx is not None:
        if var.shape == () or int(idx) >= var.size:
            raise EquilibriumError(f"{where}: {key!r}: {name} has {var.size} component(s); index "
                                   f"{idx} is out of range")
        elems = [var.offset + int(idx)]
    else:
        elems = list(range(var.offset, var.offset + var.size))
    try:
        arr = np.asarray(value, dtype=float).ravel()
    except (TypeError, ValueError):
        raise EquilibriumError(f"{where}: {key!r}: expected a number or a list of numbers, got "
                               f"{value!r}") from None
    if arr.size == 1:
        arr = np.full(len(elems), float(arr[0]))
    if arr.size != len(elems) or not np.all(np.isfinite(arr)):
        raise EquilibriumError(f"{where}: {key!r}: expected {len(elems)} finite number(s), got "
                               f"{arr.size} value(s) {arr.tolist()}")
    x[elems] = arr


def starting_point(dae: DAE, model, pvals: dict, guess: Mapping | None) -> np.ndarray:
    """The starting point: the model's positions, then ``guess`` on top."""
    x = np.zeros(dae.n)
    if model is not None:
        for key, value in model.initial_values(pvals).items():
            if "'" not in str(key):   # velocities: zero at rest
                _set_guess(dae, x, key, value, "the model's ProblemData")
    if guess is not None and not isinstance(guess, Mapping):
        raise EquilibriumError(f"guess must be a mapping {{variable: value}}, got "
                               f"{type(guess).__name__}")
    for key, value in (guess or {}).items():
        _set_guess(dae, x, key, value, "guess")
    return x


# ------------------------------------------------------------------ solvers
def _scale(J: np.ndarray, x: np.ndarray) -> float:
    """Size of the equations' terms at x: max_i Σ_j |J_ij x_j| (at least 1)."""
    s = np.max(np.abs(J) @ np.abs(x)) if x.size else 0.0
    return max(1.0, float(s)) if np.isfinite(s) else 1.0


def _multipliers_fitted(k: RestKernels, x0, t, p, cfg: np.ndarray) -> np.ndarray:
    """The guess with its multipliers replaced by the least-squares fit at its configuration.

    A multiplier guess of 0 leaves the stiffness without its λ·∂²g part, and
    the first Newton step, taken with that wrong Jacobian, can jump to another
    equilibrium; the multipliers enter linearly, so one least-squares solve
    in them alone gives the ones that balance the guessed configuration best.
    """
    x = np.array(x0, dtype=float)
    mu = ~cfg
    if not mu.any():
        return x
    f = np.asarray(k.F(x, t, p))
    J = np.asarray(k.J(x, t, p))
    if not (np.all(np.isfinite(f)) and np.all(np.isfinite(J))):
        return x
    x[mu] += np.linalg.lstsq(J[:, mu], -f, rcond=None)[0]
    return x


def newton_search(k: RestKernels, x0, t, p, cfg: np.ndarray, tol: float):
    """Newton with minimum-norm corrections and backtracking on |F|.

    Returns:
        (x, iterations, converged, residual, tolerance).
    """
    x = _multipliers_fitted(k, x0, t, p, cfg)
    f = np.asarray(k.F(x, t, p))
    it = 0
    polished = False
    for it in range(1, MAX_NEWTON_ITERATIONS + 1):
        if not np.all(np.isfinite(f)):
            break
        J = np.asarray(k.J(x, t, p))
        res, lim_res = float(np.max(np.abs(f))), tol * _scale(J, x)
        if res <= lim_res and polished:
            return x, it - 1, True, res, lim_res
        dx = np.linalg.lstsq(J, -f, rcond=None)[0]
        if not np.all(np.isfinite(dx)):
            break
        # Cap the configuration's move (not the multipliers', which enter
        # linearly) so that a rough guess does not jump to another branch.
        if cfg.any():
            nrm = float(np.max(np.abs(dx[cfg])))
            cap = 0.5 * (1.0 + float(np.max(np.abs(x[cfg]))))
            if nrm > cap:
                dx *= cap / nrm
        n0, a = float(np.linalg.norm(f)), 1.0
        while True:
            xn = x + a * dx
            fn = np.asarray(k.F(xn, t, p))
            nn = float(np.linalg.norm(fn))
            if np.all(np.isfinite(fn)) and (nn < (1.0 - 1e-4 * a) * n0 or nn <= lim_res):
                break
            a *= 0.5
            if a < 1.0 / 256:
                return x, it, res <= lim_res, res, lim_res     # no descent left: stalled
        # One more full step after the tolerance is met polishes to rounding.
        polished = res <= lim_res
        x, f = xn, fn
    J = np.asarray(k.J(x, t, p))
    res = float(np.max(np.abs(f))) if np.all(np.isfinite(f)) else math.inf
    lim_res = tol * _scale(J, x)
    return x, it, res <= lim_res, res, lim_res


def _settle(k: RestKernels, x0, t, p, cfg: np.ndarray, tol: float, max_steps: int = 300):
    """Let the model come to rest: pseudo-transient continuation, then Newton.

    Implicit Euler steps of the over-damped motion ``D (x − x_k)/h + F(x) = 0``
    with ``D = ∂F/∂x'' + ∂F/∂x'`` frozen at x_k (the mass matrix, plus the
    damping and the first-order terms): the coordinates move down the
    potential in the metric of the masses, the constraint rows and the
    multipliers are solved at every step.  A guess where Newton has no
    descent direction (the pendulum held horizontal: both equilibria equally
    far) then falls to a stable equilibrium, as the released model would.
    The pseudo time step grows as the residual falls (switched evolution
    relaxation), so the last steps are Newton steps; it does not shrink
    where the residual grows, as it does while the model falls away from an
    unstable equilibrium (see the step update).  The motion cannot leave an
    equilibrium it starts at exactly: :func:`settle_stable` handles that.

    Returns:
        as :func:`newton_search`.
    """
    x = np.array(x0, dtype=float)
    f = np.asarray(k.F(x, t, p))
    h = 1e-2
    steps = 0
    for steps in range(1, max_steps + 1):
        if not np.all(np.isfinite(f)):
            break
        J = np.asarray(k.J(x, t, p))
        lim_res = tol * _scale(J, x)
        if float(np.max(np.abs(f))) <= lim_res:
            break
        D = np.asarray(k.M(x, t, p)) + np.asarray(k.C(x, t, p))
        cap = 0.25 * (1.0 + float(np.max(np.abs(x[cfg])))) if cfg.any() else math.inf
        # The pseudo steps are only a path to the equilibrium (Newton
        # finishes): each is solved to a fraction of the current residual.
        inner = max(1e-3 * float(np.max(np.abs(f))), lim_res)
        while h > 1e-14:
            y, ok = x.copy(), False
            for _ in range(12):
                r = np.asarray(k.F(y, t, p)) + D @ (y - x) / h
                if not np.all(np.isfinite(r)):
                    break
                if float(np.max(np.abs(r))) <= inner:
                    ok = True
                    break
                dy = np.linalg.lstsq(np.asarray(k.J(y, t, p)) + D / h, -r, rcond=None)[0]
                y = y + dy
            if ok and (not cfg.any() or float(np.max(np.abs(y[cfg] - x[cfg]))) <= cap):
                break
            h /= 4.0      # too far or no convergence: a shorter pseudo step
        else:
            break
        fn = np.asarray(k.F(y, t, p))
        grow = float(np.linalg.norm(f)) / max(float(np.linalg.norm(fn)), 1e-300)
        # Not below 1: leaving an unstable equilibrium the residual grows, and
        # a step halved at every such step adds up to a pseudo time of 2h, too
        # short to fall away (from x = 1e-4 off the standing pendulum settling
        # went back to it); a large step instead is a Newton step, which would
        # also go back, so the step is kept.
        h *= min(max(grow, 1.0), 10.0)
        x, f = y, fn
    x, it, ok, res, lim = newton_search(k, x, t, p, cfg, tol)
    return x, steps + it, ok, res, lim


def settle_stable(k: RestKernels, x0, t, p, pvals, cfg: np.ndarray, tol: float, zero_tol: float):
    """Settle, and push off an unstable equilibrium where settling ends at one.

    Over-damped motion started exactly at an equilibrium stays there, stable
    or not (the residual is already zero), and from very near an unstable
    one its last Newton steps can return to it.  Where the point reached is
    unstable (a negative projected stiffness eigenvalue) it is pushed by
    ``SETTLE_PUSH`` x (1 + max |q|) along its most unstable mode
    (:func:`unstable_direction`), one way and then the other, and let settle
    again; the first push that comes to rest at a point not unstable wins.

    Returns:
        (x, steps, converged, residual, tolerance, note, stayed): as
        :func:`_settle` (all pseudo steps counted), a note for the report
        (None when settling never met an unstable equilibrium) and whether
        the result is still the unstable point (no push found a way down).
    """
    x, it, ok, res, lim = _settle(k, x0, t, p, cfg, tol)
    if not ok or classify(k, x, t, p, pvals, zero_tol).get("branch") != "unstable":
        return x, it, ok, res, lim, None, False
    dae = k.dae
    shown = cfg if cfg.any() else np.ones(dae.n, dtype=bool)
    size = float(np.max(np.abs(x[cfg]))) if cfg.any() else 0.0
    # Where it started decides the wording only: the push is the same.
    moved = float(np.max(np.abs(x[shown] - np.asarray(x0)[shown]))) > 1e-9 * (1.0 + size)
    where = ("settle stopped at an unstable equilibrium [" + point_text(dae, x) + "]") if moved \
        else "settle stayed at its starting point, an unstable equilibrium"
    direction = unstable_direction(k, x, t, p, pvals)
    if direction is None:
        return x, it, ok, res, lim, (f"{where} (no unstable mode to leave it along); this is not "
                                     "the stable equilibrium settle looks for"), True
    push = SETTLE_PUSH * (1.0 + size)
    tries = []
    for sign in (1.0, -1.0):
        y, it2, ok2, res2, lim2 = _settle(k, x + sign * push * direction, t, p, cfg, tol)
        it += it2
        branch = classify(k, y, t, p, pvals, zero_tol).get("branch") if ok2 else None
        if ok2 and branch != "unstable":
            return y, it, True, res2, lim2, (
                f"{where}; pushed off it by {push:.3g} along its unstable mode, the model "
                f"settled here"), False
        tries.append("returned to an unstable equilibrium" if ok2 else
                     f"did not come to rest (residual {res2:.3g})")
    outcome = f"{tries[0]} both ways" if tries[0] == tries[1] else \
        f"{tries[0]} one way and {tries[1]} the other"
    return x, it, ok, res, lim, (
        f"{where}; pushed off it by {push:.3g} along its unstable mode, settling {outcome}: "
        "this is not the stable equilibrium settle looks for (the model may have none; "
        "--method newton reports the equilibrium near a guess as it is)"), True


class _IpoptProblem:
    """The equilibrium nearest the guess: min ½ Σ w (x − x̂)² s.t. F(x) = 0 (dense)."""

    def __init__(self, k: RestKernels, t, p, x_hat, w):
        self.k, self.t, self.p, self.x_hat, self.w = k, t, p, np.asarray(x_hat), np.asarray(w)
        n = len(x_hat)
        self.jrows, self.jcols = np.divmod(np.arange(n * n), n)
        self.hrows, self.hcols = np.tril_indices(n)

    def objective(self, x):
        return float(0.5 * np.sum(self.w * (x - self.x_hat) ** 2))

    def gradient(self, x):
        return self.w * (x - self.x_hat)

    def constraints(self, x):
        return np.asarray(self.k.F(x, self.t, self.p))

    def jacobianstructure(self):
        return self.jrows, self.jcols

    def jacobian(self, x):
        return np.asarray(self.k.J(x, self.t, self.p)).ravel()

    def hessianstructure(self):
        return self.hrows, self.hcols

    def hessian(self, x, lagrange, obj_factor):
        H = np.asarray(self.k.H(x, np.asarray(lagrange), self.t, self.p)) + \
            obj_factor * np.diag(self.w)
        return H[self.hrows, self.hcols]


def ipopt_search(k: RestKernels, x0, t, p, cfg, tol, options):
    """IPOPT from the guess, then a Newton polish. Returns as :func:`newton_search` plus IPOPT's status."""
    from solver.integrate.initialize import run_ipopt

    # Distance is measured in the configuration only: the multipliers follow.
    w = np.where(cfg, 1.0, 0.0) if cfg.any() else np.ones(len(x0))
    n = len(x0)
    x, status, msg = run_ipopt(_IpoptProblem(k, t, p, x0, w), n, n, x0, options)
    if not np.all(np.isfinite(x)):
        x = np.array(x0, dtype=float)
    x, it, ok, res, lim = newton_search(k, x, t, p, cfg, tol)
    return x, it, ok, res, lim, f"IPOPT status {status}: {msg}"


def point_text(dae: DAE, x, limit_: int = 12) -> str:
    """``name = value, ...`` of the flat point ``x``, at most ``limit_`` of them, for messages."""
    labels = dae.component_names()
    parts = [f"{n} = {float(v):.6g}" for n, v in zip(labels, np.asarray(x).ravel())]
    more = len(parts) - limit_
    return ", ".join(parts[:limit_]) + (f", ... ({more} more)" if more > 0 else "")
