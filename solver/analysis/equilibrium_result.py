"""What an equilibrium search gives: the :class:`Equilibrium` record and its report, the error, the limits."""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np

from solver.errors import InputError

__all__ = ["DEFAULT_TOL", "Equilibrium", "EquilibriumError", "MAX_EQUILIBRIUM_UNKNOWNS",
           "MAX_NEWTON_ITERATIONS", "METHODS", "SETTLE_PUSH", "ZERO_TOL"]


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
