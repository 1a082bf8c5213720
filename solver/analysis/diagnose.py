"""The system Jacobian at a model's consistent initial point, and what makes it singular.

``mechsweep check`` uses :func:`check_jacobian`: one consistent initial point
(Gauss-Newton, IPOPT where it misses: the same policy as ``simulate``) and one
system Jacobian there, on a compiled model of order 2 (the Jacobian does not
depend on the Taylor order, and a low order keeps the compile cheap).

The structural analysis (Σ-method) only proves that a transversal exists; the
system Jacobian ``J_ij = ∂f_i/∂x_j^(d_j - c_i)`` must also be nonsingular at
the point, or the integrator stops at once with ``singular_jacobian``.  Two
identical equations or a duplicated constraint pass the structural analysis
and fail here.  As DAESA does, the dependent rows are named from the null
spaces of the scaled Jacobian (by SVD): the left null vectors' largest entries
name the equations that are dependent, the right null vectors' largest entries
name the variables (at their highest derivative ``x_j^(d_j)``) that are not
determined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from solver.analysis.nullspace import (CHECK_ORDER, COND_MAX, NULL_SHARE, equation_labels,  # noqa: F401
                                      named as _named, scaled as _scaled, unknown_labels)
from solver.errors import InputError

__all__ = ["JacobianCheck", "check_jacobian", "analyse_jacobian", "COND_MAX", "NULL_SHARE",
           "CHECK_ORDER"]


@dataclass
class JacobianCheck:
    """The system Jacobian at the consistent initial point and its diagnosis.

    Attributes:
        n: number of equations (= unknowns).
        cond: 2-norm condition number of the scaled Jacobian (``inf`` when
            exactly singular or not finite).
        singular: ``cond > COND_MAX`` or a non-finite entry.
        rank_deficiency: number of singular values below ``s_max / COND_MAX``.
        equations: labels of the dependent equations (empty when regular).
        variables: labels of the undetermined unknowns (empty when regular).
        nonfinite: labels of equations with a NaN or infinite entry.
        t0: time of the point.
    """

    n: int
    cond: float
    singular: bool
    rank_deficiency: int = 0
    equations: list = field(default_factory=list)
    variables: list = field(default_factory=list)
    nonfinite: list = field(default_factory=list)
    t0: float = 0.0

    def summary(self) -> str:
        """One line for ``check``: size and condition number."""
        cond = "inf" if not math.isfinite(self.cond) else f"{self.cond:.3g}"
        return (f"system Jacobian at t0 = {self.t0:g}: {self.n} x {self.n}, condition number "
                f"{cond} (rows and columns scaled; singular above {COND_MAX:g})")

    def problem(self) -> str:
        """What is wrong and how to fix it ('' when the Jacobian is regular)."""
        if not self.singular:
            return ""
        if self.nonfinite:
            return (f"the system Jacobian at the initial point (t0 = {self.t0:g}) is not finite "
                    f"in the equations {', '.join(self.nonfinite)} (a division by zero, sqrt or "
                    f"log at 0?); change the initial values or the equations")
        cond = "inf (exactly singular)" if not math.isfinite(self.cond) else f"{self.cond:.3g}"
        k = self.rank_deficiency
        return (f"the system Jacobian at the consistent initial point (t0 = {self.t0:g}) is "
                f"singular: condition number {cond} > {COND_MAX:g}, rank {self.n - k} of "
                f"{self.n}. Dependent equations: {', '.join(self.equations)}; undetermined "
                f"unknowns (at their highest derivative): {', '.join(self.variables)}. "
                f"The structural analysis passes, but simulate would stop with "
                f"singular_jacobian. Remove a duplicated equation or constraint, or make the "
                f"listed equations independent (or start from another initial point)")


def analyse_jacobian(A: np.ndarray, equations: list, unknowns: list, t0: float = 0.0) -> JacobianCheck:
    """Condition and null spaces of a system Jacobian (pure numpy).

    Args:
        A: the n x n system Jacobian (any row and column scaling).
        equations: n equation labels (rows).
        unknowns: n unknown labels (columns).
        t0: time of the point (for the messages).

    Returns:
        :class:`JacobianCheck`.
    """
    A = np.asarray(A, dtype=float)
    n = A.shape[0]
    if n == 0:
        return JacobianCheck(n=0, cond=1.0, singular=False, t0=t0)
    bad_rows = ~np.all(np.isfinite(A), axis=1)
    if bad_rows.any():
        return JacobianCheck(n=n, cond=math.inf, singular=True, t0=t0,
                             nonfinite=[equations[i] for i in np.nonzero(bad_rows)[0]])
    U, s, Vt = np.linalg.svd(_scaled(A))
    cond = float(s[0] / s[-1]) if s[-1] > 0 else math.inf
    if cond <= COND_MAX:
        return JacobianCheck(n=n, cond=cond, singular=False, t0=t0)
    k = max(1, int(np.sum(s <= s[0] / COND_MAX))) if s[0] > 0 else n
    return JacobianCheck(n=n, cond=cond, singular=True, rank_deficiency=k, t0=t0,
                         equations=_named(U[:, n - k:], equations),
                         variables=_named(Vt[n - k:, :].T, unknowns))


def check_jacobian(model) -> JacobianCheck:
    """The consistent initial point of a model and its system Jacobian's condition.

    Args:
        model: a model from :func:`solver.load`.

    Returns:
        :class:`JacobianCheck` (``singular`` tells whether it failed).

    Raises:
        InputError: bad initial values, or no consistent initial point
            (:class:`solver.integrate.initialize.InitialValueError`, listing the
            violated constraints), located in the model file.
    """
    from solver.compiled import compiled_model
    from solver.integrate.initialize import parse_values
    from solver.models.model import relocate

    dae = model.dae
    try:
        comp = compiled_model(dae, CHECK_ORDER, "dense", model.mode)
        pvals = dae.param_values(model.check_params(None))
        spec = parse_values(comp.integrator, model.initial_values(pvals), model.fixed)
        z0 = comp.consistent_point(pvals, model.t0, spec, method=model.init)
        A, _ = comp.system_jacobian(pvals, model.t0, z0, spec.u_guess)
    except InputError as err:
        raise relocate(err, model.path) from None
    return analyse_jacobian(A, equation_labels(model), unknown_labels(dae), t0=model.t0)
