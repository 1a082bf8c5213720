"""Stationary equilibria of a model: configuration, multipliers and stability.

An equilibrium is a state at rest: every time derivative of order >= 1 is
zero and the residual vanishes.  For a mechanical model (``Kind: Lagrangian``
or ``Mechanism``, or equations written out in the same form) that is

    ∂V/∂q + Gᵀλ = Q,    g(q) = 0,    q' = q'' = 0.

The route is the same for every DAE: the residual with ``x^(l) = 0`` for
``l >= 1`` is n equations in the n values ``x^(0)`` (coordinates and the
algebraic variables, the multipliers).  It is evaluated by
:func:`solver.taylor.pointwise.residual_at`, so a ``ddt(...)`` in a residual means
its explicit time derivative at rest, and its Jacobian is ``jax.jacfwd`` of
that: nothing is differentiated by hand.  The system is solved by Newton with
minimum-norm corrections from the guess (so a family of equilibria, e.g. a
pendulum without gravity, still converges to the member nearest the guess).
Where Newton fails (no descent from the guess: a pendulum held level with
its pivot is as far from hanging as from standing) the model is let settle
(pseudo-transient continuation of the over-damped motion, which finds a
stable equilibrium; motion started exactly at an unstable equilibrium stays
there, so such a point is pushed off along its unstable mode and let settle
again); IPOPT (cyipopt, as :mod:`solver.integrate.initialize` uses it),
the equilibrium nearest the guess, is the last resort.

Stability, for a second-order model (every variable of Σ offset d = 2, a
coordinate, or d = 0, a multiplier; equations of offset c = 0 are the
equations of motion, c = 2 the position constraints): linearised at rest the
model reads ``M δq'' + K δq + W δλ = 0, G δq = 0`` with

    K = ∂F/∂q = ∂²V/∂q² + λ·∂²g − ∂Q/∂q     (the stiffness),
    M = ∂F/∂q'' (the mass matrix),  G = ∂g/∂q,  W = ∂F/∂λ (= Gᵀ up to scale).

With Z an orthonormal basis of null(G) (the tangent space of the
constraints), the constrained stiffness is ``Zᵀ K Z``: all its eigenvalues
> 0 is a stable equilibrium (a strict minimum of V on the constraints for a
conservative model), one < 0 an unstable one, a zero (within tolerance) a
marginal or degenerate one.  The small-oscillation frequencies solve
``Zᵀ K Z v = ω² Zᵀ M Z v``.  A :class:`solver.mechanics.lagrangian.LagrangianDAE`
supplies M and G from its own helpers (``mass_matrix``,
``constraint_jacobian``).

A model whose forces depend on time is examined at its initial time ``t0``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import types
import weakref
from typing import Mapping

import numpy as np
import scipy.linalg as sla

import jax
import jax.numpy as jnp

from solver.dae.problem import DAE, DAEDefinitionError
from solver.errors import InputError, how_to_raise, limit
from solver.taylor.pointwise import residual_at
from solver.taylor.program import TaylorProgram

__all__ = ["equilibrium", "Equilibrium", "EquilibriumError", "METHODS",
           "MAX_EQUILIBRIUM_UNKNOWNS", "DEFAULT_TOL", "ZERO_TOL", "SETTLE_PUSH"]

METHODS = ("auto", "newton", "settle", "ipopt")
DEFAULT_TOL = 1e-10
"""Largest residual accepted, relative to the size of the equations' terms."""
ZERO_TOL = 1e-8
"""A projected stiffness eigenvalue counts as zero below this times the
largest entry of the linearised equations of motion."""
MAX_EQUILIBRIUM_UNKNOWNS = 2000
"""Most unknowns the equilibrium solver takes (its Jacobian is dense: n² numbers);
``MECHSWEEP_MAX_EQUILIBRIUM_UNKNOWNS`` overrides it."""
MAX_NEWTON_ITERATIONS = 60
SETTLE_PUSH = 1e-3
"""Size of the push off an unstable equilibrium that settling reached, relative
to 1 + the largest |coordinate|: far above rounding and the Newton tolerance, so
that the motion and not noise decides the way down, and small enough to stay
in the equilibrium's neighbourhood."""

_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[\s*(\d+)\s*\])?\s*('*)\s*$")


class EquilibriumError(InputError):
    """No equilibrium was found from the guess (or the input to the search is bad)."""


# ------------------------------------------------------------------ result
@dataclasses.dataclass
class Equilibrium:
    """An equilibrium configuration and its stability.

    Attributes:
        title: the model's title.
        configuration: variable name -> value at rest (float for a scalar,
            array for a vector) of every coordinate: for a Lagrangian model
            (``Kind: Lagrangian`` or ``Mechanism``) all its coordinates,
            massless points included; for a DAE written out, every
            differentiated variable.
        multipliers: name -> value of the Lagrange multipliers of a
            Lagrangian model; for a DAE written out, of the algebraic
            variables (Σ offset d = 0).
        residual: largest |residual| at the point.
        tolerance: the residual accepted (``tol`` times the equations' scale).
        method: ``"newton"``, ``"settle"`` or ``"ipopt"`` (the one that
            found the point).
        settle_unstable: True when ``method`` is ``"settle"`` and the point
            is an unstable equilibrium that settling reached (at its start,
            or where it stopped) and could not leave even when pushed along
            its unstable mode: not the stable equilibrium settle looks for
            (``notes`` says more).
        iterations: Newton iterations and pseudo-time steps (IPOPT's
            iterations are not counted).
        stiffness_eigenvalues: eigenvalues of the constrained stiffness
            matrix ``Zᵀ K Z``, ascending (None when not classified).
        omega_squared: generalised eigenvalues ω² of ``(Zᵀ K Z, Zᵀ M Z)``,
            ascending (None without a positive definite projected mass).
        frequencies: small-oscillation angular frequencies ω = sqrt(ω²) in
            rad/s, NaN for an unstable mode, 0 for a zero mode (None as
            ``omega_squared``).
        branch: ``"stable"``, ``"unstable"``, ``"marginal"`` (a zero
            eigenvalue: degenerate, stability not decided at linear order)
            or ``"not classified"`` (see ``notes``).
        stable: True (stable), False (unstable) or None (marginal, not
            classified).
        dof: dimension of the tangent space (coordinates minus independent
            constraints), None when not classified.
        n_negative, n_zero: how many stiffness eigenvalues are negative and
            zero (None when not classified).
        status: ``"converged"``.
        notes: remarks (why a point was not classified, a family of
            equilibria, non-symmetric stiffness...).
        t: the time the model was examined at.
        params: the parameter values used.
    """

    title: str
    configuration: dict
    multipliers: dict
    residual: float
    tolerance: float
    method: str
    iterations: int
    stiffness_eigenvalues: np.ndarray | None
    omega_squared: np.ndarray | None
    frequencies: np.ndarray | None
    branch: str
    stable: bool | None
    dof: int | None
    n_negative: int | None = None
    n_zero: int | None = None
    settle_unstable: bool = False
    status: str = "converged"
    notes: list = dataclasses.field(default_factory=list)
    t: float = 0.0
    params: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-ready dict (arrays as lists, NaN as None).

        Returns:
            dict with every attribute; vectors as lists.
        """
        def plain(v):
            if v is None:
                return None
            if isinstance(v, Mapping):
                return {k: plain(x) for k, x in v.items()}
            a = np.asarray(v)
            if a.dtype.kind == "c":
                a = a.real
            if a.ndim == 0:
                x = float(a)
                return x if math.isfinite(x) else None
            return [plain(x) for x in a]

        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            # strings, counts, flags and notes as they are; numbers and arrays plain
            out[f.name] = v if v is None or isinstance(v, (str, bool, int, list)) else plain(v)
        return out

    def summary(self) -> str:
        """Readable report: configuration, multipliers, eigenvalues, classification."""
        # Settling promises a stable equilibrium: say so where it did not keep it.
        found = "settle stayed at an unstable equilibrium" if self.settle_unstable else \
            f"equilibrium found by {self.method}"
        lines = [f"{self.title}: {found}"
                 f"{f' in {self.iterations} iterations' if self.iterations else ''} "
                 f"(residual {self.residual:.2e}, tolerance {self.tolerance:.1e}, t = {self.t:g})",
                 "configuration:"]
        scale = _magnitude(self.configuration)
        lines += [f"  {k} = {_fmt(v, scale)}" for k, v in self.configuration.items()]
        if self.multipliers:
            lines.append("multipliers:")
            scale = _magnitude(self.multipliers)
            lines += [f"  {k} = {_fmt(v, scale)}" for k, v in self.multipliers.items()]
        if self.branch == "not classified":
            lines.append("stability: not classified")
        else:
            what = {"stable": "all projected stiffness eigenvalues > 0",
                    "unstable": f"{self.n_negative} negative projected stiffness "
                                f"eigenvalue{'' if self.n_negative == 1 else 's'}",
                    "marginal": "a zero projected stiffness eigenvalue (degenerate; not decided "
                                "at linear order)"}[self.branch]
            lines.append(f"stability: {self.branch} ({what}; {self.dof} degree"
                         f"{'' if self.dof == 1 else 's'} of freedom)")
            lines.append(f"  stiffness eigenvalues: {_fmt(self.stiffness_eigenvalues)}")
            if self.frequencies is not None:
                lines.append(f"  frequencies (rad/s): {_fmt(self.frequencies)}"
                             + ("  (nan: an unstable mode)" if np.isnan(self.frequencies).any()
                                else ""))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    __str__ = summary


def _fmt(v, scale: float = 0.0) -> str:
    """Numbers to 10 digits; entries below 1e-14 x ``scale`` (rounding) shown as 0."""
    a = np.real(np.asarray(v, dtype=complex if np.iscomplexobj(v) else float))
    a = np.where(np.abs(a) < 1e-14 * scale, 0.0, a)
    if a.ndim == 0:
        return f"{float(a):.10g}"
    return "[" + ", ".join(f"{float(x):.10g}" for x in a.ravel()) + "]"


def _magnitude(values: Mapping) -> float:
    """Largest |entry| of a dict of numbers and arrays (the scale of rounding)."""
    return max([float(np.max(np.abs(v))) for v in values.values() if np.size(v)] or [0.0])


# ------------------------------------------------------------------ kernels
class _Kernels:
    """Jitted residual at rest and its derivatives, built once per DAE.

    ``x`` is the flat vector of every variable's value (DAE layout); ``v``
    and ``a`` the first and second derivatives, zero except to differentiate
    (``C = ∂F/∂x'``, ``M = ∂F/∂x''``).
    """

    def __init__(self, dae: DAE):
        s = dae.structure
        # The Taylor order plays no part in a pointwise evaluation: the lowest.
        self.prog = TaylorProgram(dae, s.c, s.d, 2)
        self.dae = dae
        prog = self.prog

        def levels(x, v, a):
            out = {}
            for var in dae.variables:
                sl = slice(var.offset, var.offset + var.size)
                out[var.name] = [jnp.reshape(y[sl], var.shape) for y in (x, v, a)]
            return out

        def F(x, t, params, v=None, a=None):
            v = jnp.zeros_like(x) if v is None else v
            a = jnp.zeros_like(x) if a is None else a
            return residual_at(prog, t, prog.constants(params), levels(x, v, a))

        zero = jnp.zeros_like
        self.F = jax.jit(F)
        self.J = jax.jit(jax.jacfwd(F))
        self.M = jax.jit(lambda x, t, p: jax.jacfwd(lambda a: F(x, t, p, None, a))(zero(x)))
        self.C = jax.jit(lambda x, t, p: jax.jacfwd(lambda v: F(x, t, p, v))(zero(x)))
        self.H = jax.jit(lambda x, y, t, p: jax.hessian(lambda z: jnp.dot(y, F(z, t, p)))(x))


_KERNELS: "weakref.WeakKeyDictionary[DAE, _Kernels]" = weakref.WeakKeyDictionary()


def _kernels(dae: DAE) -> _Kernels:
    if dae not in _KERNELS:
        _KERNELS[dae] = _Kernels(dae)
    return _KERNELS[dae]


# ------------------------------------------------------------------ inputs
def _split(obj):
    """(dae, model or None) of a Model or a DAE."""
    from solver.models.model import Model

    if isinstance(obj, Model):
        return obj.dae, obj
    if isinstance(obj, DAE):
        return obj, None
    raise InputError(f"equilibrium: expected a model (solver.load(...)) or a solver.DAE, got "
                     f"{type(obj).__name__}")


def _params(dae: DAE, model, params) -> dict:
    if model is not None:
        values = model.check_params(params)
        model.check_values(params)
        return {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    try:
        return dict(dae.param_values(params))
    except DAEDefinitionError as err:
        raise InputError(f"equilibrium: {err}") from None


def _offsets_d(dae: DAE) -> np.ndarray:
    return np.asarray(dae.structure.d, dtype=int)


def _reported_coordinates(dae: DAE) -> np.ndarray:
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
    return _offsets_d(dae) > 0


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


def _guess(dae: DAE, model, pvals: dict, guess: Mapping | None) -> np.ndarray:
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


def _multipliers_fitted(k: _Kernels, x0, t, p, cfg: np.ndarray) -> np.ndarray:
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


def _newton(k: _Kernels, x0, t, p, cfg: np.ndarray, tol: float):
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


def _settle(k: _Kernels, x0, t, p, cfg: np.ndarray, tol: float, max_steps: int = 300):
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
    equilibrium it starts at exactly: :func:`_settle_stable` handles that.

    Returns:
        as :func:`_newton`.
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
    x, it, ok, res, lim = _newton(k, x, t, p, cfg, tol)
    return x, steps + it, ok, res, lim


def _settle_stable(k: _Kernels, x0, t, p, pvals, cfg: np.ndarray, tol: float, zero_tol: float):
    """Settle, and push off an unstable equilibrium where settling ends at one.

    Over-damped motion started exactly at an equilibrium stays there, stable
    or not (the residual is already zero), and from very near an unstable
    one its last Newton steps can return to it.  Where the point reached is
    unstable (a negative projected stiffness eigenvalue) it is pushed by
    ``SETTLE_PUSH`` x (1 + max |q|) along its most unstable mode
    (:func:`_unstable_direction`), one way and then the other, and let settle
    again; the first push that comes to rest at a point not unstable wins.

    Returns:
        (x, steps, converged, residual, tolerance, note, stayed): as
        :func:`_settle` (all pseudo steps counted), a note for the report
        (None when settling never met an unstable equilibrium) and whether
        the result is still the unstable point (no push found a way down).
    """
    x, it, ok, res, lim = _settle(k, x0, t, p, cfg, tol)
    if not ok or _classify(k, x, t, p, pvals, zero_tol).get("branch") != "unstable":
        return x, it, ok, res, lim, None, False
    dae = k.dae
    shown = cfg if cfg.any() else np.ones(dae.n, dtype=bool)
    size = float(np.max(np.abs(x[cfg]))) if cfg.any() else 0.0
    # Where it started decides the wording only: the push is the same.
    moved = float(np.max(np.abs(x[shown] - np.asarray(x0)[shown]))) > 1e-9 * (1.0 + size)
    where = ("settle stopped at an unstable equilibrium [" + _point_text(dae, x) + "]") if moved \
        else "settle stayed at its starting point, an unstable equilibrium"
    direction = _unstable_direction(k, x, t, p, pvals)
    if direction is None:
        return x, it, ok, res, lim, (f"{where} (no unstable mode to leave it along); this is not "
                                     "the stable equilibrium settle looks for"), True
    push = SETTLE_PUSH * (1.0 + size)
    tries = []
    for sign in (1.0, -1.0):
        y, it2, ok2, res2, lim2 = _settle(k, x + sign * push * direction, t, p, cfg, tol)
        it += it2
        branch = _classify(k, y, t, p, pvals, zero_tol).get("branch") if ok2 else None
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

    def __init__(self, k: _Kernels, t, p, x_hat, w):
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


def _ipopt(k: _Kernels, x0, t, p, cfg, tol, options):
    """IPOPT from the guess, then a Newton polish. Returns as :func:`_newton` plus IPOPT's status."""
    from solver.integrate.initialize import run_ipopt

    # Distance is measured in the configuration only: the multipliers follow.
    w = np.where(cfg, 1.0, 0.0) if cfg.any() else np.ones(len(x0))
    n = len(x0)
    x, status, msg = run_ipopt(_IpoptProblem(k, t, p, x0, w), n, n, x0, options)
    if not np.all(np.isfinite(x)):
        x = np.array(x0, dtype=float)
    x, it, ok, res, lim = _newton(k, x, t, p, cfg, tol)
    return x, it, ok, res, lim, f"IPOPT status {status}: {msg}"


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


def _linearised(k: _Kernels, x, t, p, pvals):
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


def _unstable_direction(k: _Kernels, x, t, p, pvals) -> np.ndarray | None:
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


def _classify(k: _Kernels, x, t, p, pvals, zero_tol) -> dict:
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


# ------------------------------------------------------------------ front door
def equilibrium(model_or_dae, guess: Mapping | None = None, params: Mapping | None = None,
                method: str = "auto", tol: float = DEFAULT_TOL, zero_tol: float = ZERO_TOL,
                t: float | None = None, ipopt_options: Mapping | None = None) -> Equilibrium:
    """Find a stationary equilibrium of a model and classify its stability.

    Args:
        model_or_dae: a model (:func:`solver.load`) or a :class:`solver.DAE`
            (Lagrangian or not).
        guess: ``{name: value}`` starting values, in :func:`solver.solve`
            syntax without primes (``"x"``, ``"A"``, ``"A[1]"``, ``"lam"``);
            they replace the model's ``ProblemData`` positions (its
            velocities are ignored: zero at rest).  Values not given start
            at the model's, else at 0.
        params: parameter overrides (free parameters of the model).
        method: ``"newton"`` (the equilibrium the guess is near, of any
            stability), ``"settle"`` (where the model comes to rest when
            released at the guess with heavy damping: a stable equilibrium,
            by pseudo-transient continuation; where it comes to an unstable
            one, or starts exactly at one, it is pushed off along the
            unstable mode by ``SETTLE_PUSH`` x (1 + max |q|), both ways, and
            let settle again; where neither push comes to rest elsewhere the
            result is that unstable point, with ``settle_unstable`` set and a
            note), ``"ipopt"`` (the
            equilibrium nearest the guess, polished by Newton) or
            ``"auto"`` (Newton, then settle, then IPOPT, each where the
            previous one fails).
        tol: residual accepted, relative to the size of the equations' terms.
        zero_tol: relative size below which a stiffness eigenvalue is zero.
        t: time to examine a time-dependent model at (default: the model's
            ``t0``, 0 for a bare DAE).
        ipopt_options: IPOPT options (e.g. ``{"print_level": 5}``).

    Returns:
        :class:`Equilibrium` (configuration, multipliers, residual, stiffness
        eigenvalues, frequencies, branch).

    Raises:
        EquilibriumError: no equilibrium found from the guess (the message
            gives the closest point and what to change), a bad guess or
            method.
        InputError: bad parameters (located in the model file), too many
            unknowns, a refused IPOPT option.
    """
    from solver.models.model import relocate

    dae, model = _split(model_or_dae)
    try:
        return _equilibrium(dae, model, guess, params, method, tol, zero_tol, t, ipopt_options)
    except InputError as err:
        # Name the model file in every message, as Model.solve does.
        path = getattr(model, "path", None)
        raise relocate(err, str(path) if path else None) from None


def _equilibrium(dae, model, guess, params, method, tol, zero_tol, t, ipopt_options):
    if method not in METHODS:
        raise EquilibriumError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise EquilibriumError(f"tol must be a number in (0, 1), e.g. 1e-10; got {tol!r}")
    cap = limit("MAX_EQUILIBRIUM_UNKNOWNS", MAX_EQUILIBRIUM_UNKNOWNS)
    if dae.n > cap:
        raise InputError(f"the model has {dae.n} unknowns; the equilibrium solver takes at most "
                         f"{cap} (its Jacobian is dense); {how_to_raise('MAX_EQUILIBRIUM_UNKNOWNS')}")
    pvals = _params(dae, model, params)
    t = float(t if t is not None else (model.t0 if model is not None else 0.0))
    x0 = _guess(dae, model, pvals, guess)
    k = _kernels(dae)
    p = {name: jnp.asarray(v) for name, v in pvals.items()}
    cfg = _offsets_d(dae) > 0       # the configuration; d = 0 are the multipliers
    f0 = np.asarray(k.F(x0, t, p))
    if not np.all(np.isfinite(f0)):
        names = dae.equation_names()
        bad = [names[i] for i in np.nonzero(~np.isfinite(f0))[0]]
        raise EquilibriumError(
            f"the equations are not finite at rest at the guess [{_point_text(dae, x0)}] (NaN or "
            f"infinite: {', '.join(bad[:8])}{' ...' if len(bad) > 8 else ''}): the model's forces "
            "may be undefined at zero velocity (a slip ratio v/|v|, the sign of a friction "
            "force) or at this configuration; give another guess (guess={...} in Python, "
            "--guess NAME=VALUE on the command line), or the model has no equilibrium at rest")
    tried = []
    found = None
    if method in ("auto", "newton"):
        x, it, ok, res, lim = _newton(k, x0, t, p, cfg, tol)
        tried.append(f"Newton stopped after {it} iterations with residual {res:.3g} "
                     f"(tolerance {lim:.3g}) at [{_point_text(dae, x)}]")
        if ok:
            found = (x, it, res, lim, "newton")
    settle_note, stayed = None, False
    if found is None and method in ("auto", "settle"):
        x, it, ok, res, lim, settle_note, stayed = _settle_stable(k, x0, t, p, pvals, cfg, tol,
                                                                 zero_tol)
        tried.append(f"settling (over-damped motion from the guess) stopped after {it} steps "
                     f"with residual {res:.3g} at [{_point_text(dae, x)}]")
        if ok:
            found = (x, it, res, lim, "settle")
    if found is None and method in ("auto", "ipopt"):
        x, it, ok, res, lim, msg = _ipopt(k, x0, t, p, cfg, tol, ipopt_options)
        tried.append(f"IPOPT ({msg}) ended with residual {res:.3g} (tolerance {lim:.3g}) at "
                     f"[{_point_text(dae, x)}]")
        if ok:
            found = (x, it, res, lim, "ipopt")
    if found is None:
        raise EquilibriumError(
            "no equilibrium found from the guess [" + _point_text(dae, x0) + "]: "
            + "; ".join(tried) + ". Give another guess near the configuration you expect "
            "(guess={...} in Python, --guess NAME=VALUE on the command line)"
            + (", or another method (auto, settle, ipopt)" if method != "auto" else "")
            + "; a model with forces that never balance (a driven or free-falling body) has "
            "no equilibrium")
    x, it, res, lim, how = found
    stability = {"stiffness_eigenvalues": None, "omega_squared": None, "frequencies": None,
                 "branch": "not classified", "stable": None, "dof": None}
    stability.update(_classify(k, x, t, p, pvals, zero_tol))
    if np.linalg.matrix_rank(np.asarray(k.J(x, t, p))) < dae.n:
        stability["notes"] = list(stability.get("notes", [])) + [
            "the equilibrium is not isolated (the Jacobian of the equilibrium equations is "
            "singular): one of a family of equilibria, the one Newton reached from the guess"]
    if how == "settle" and settle_note:
        stability["notes"] = [settle_note] + list(stability.get("notes", []))
    config, mult = {}, {}
    coordinate = _reported_coordinates(dae)
    for v in dae.variables:
        val = x[v.offset:v.offset + v.size]
        val = float(val[0]) if v.shape == () else val.reshape(v.shape).copy()
        (config if coordinate[v.offset] else mult)[v.name] = val
    title = getattr(model, "title", None) or dae.name
    return Equilibrium(title=title, configuration=config, multipliers=mult, residual=res,
                       tolerance=lim, method=how, iterations=it, t=t,
                       settle_unstable=how == "settle" and stayed, **stability,
                       params={k_: (float(v) if np.ndim(v) == 0 else np.asarray(v).tolist())
                               for k_, v in pvals.items()})


def _point_text(dae: DAE, x, limit_: int = 12) -> str:
    labels = dae.component_names()
    parts = [f"{n} = {float(v):.6g}" for n, v in zip(labels, np.asarray(x).ravel())]
    more = len(parts) - limit_
    return ", ".join(parts[:limit_]) + (f", ... ({more} more)" if more > 0 else "")


class _CallableModule(types.ModuleType):
    """Lets ``solver.equilibrium(...)`` call :func:`equilibrium` even when
    ``solver.equilibrium`` is this module (importing the submodule sets the
    package attribute to the module, shadowing the lazily exported function)."""

    def __call__(self, *args, **kwargs):
        return equilibrium(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
