"""Initial values as a user gives them, read into a :class:`StateSpec`: which entries are fixed, which guessed.

A value's key names a state entry ``x_j^(l)`` (``x``, ``x'``, ``q[1]'``); the
meaning of a set of keys is worked out once per integrator, and each point
of a batch only fills arrays.  Also the scale of a state for
:data:`ASSEMBLY_TOL`.
"""

from __future__ import annotations

import math
import re
import weakref
from typing import Mapping, Sequence

import numpy as np

from solver.errors import InputError
from solver.integrate.integrator import Integrator

__all__ = ["ASSEMBLY_TOL", "InitialValueError", "StateSpec", "parse_values", "parse_values_table",
           "state_scale", "state_scales"]


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


def state_scales(z_batch) -> np.ndarray:
    """:func:`state_scale` of each row of a (batch, n) array, at once."""
    z = np.asarray(z_batch, dtype=float)
    if z.shape[1] == 0:
        return np.ones(z.shape[0])
    return np.fmax(1.0, np.max(np.abs(z), axis=1))  # fmax: a NaN entry gives 1, as Python's max did


def state_scale(z_hat) -> float:
    """The scale of a state for :data:`ASSEMBLY_TOL`: max(1, max |z|)."""
    return float(state_scales(np.reshape(np.asarray(z_hat, dtype=float), (1, -1)))[0])
