"""Expression scopes and parameter handling shared by the YAML model kinds.

A model file's expressions are evaluated by :meth:`solver.models.expr.Expr.evaluate`
in a *scope* that answers ``lookup(name, order)``.  The scopes here give:

* parameters: the traced DAE parameters, constants fixed at load time
  (structural parameters such as grid sizes) and derived parameters, which
  are expressions of other parameters evaluated *inside* the residual from
  the traced values, so that varying a base parameter in a sweep moves every
  quantity derived from it;
* the time ``t`` (``t'`` is 1);
* ``Let`` names: ordered definitions evaluated once per scope (cached);
* the unknowns, whose meaning depends on the kind (:class:`DAEScope`,
  :class:`LagrangianScope`).

Parameters are read by :func:`read_params`; the split into traced, derived
and structural parameters is a :class:`ParamInfo`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.dae.problem import ddt
from solver.errors import InputError
from solver.models.expr import Expr, ExprError, NotElementwise, all_finite, check_name, evaluate_constant, evaluate_table, parse
from solver.models.yamlio import Locator, format_path, require_mapping

__all__ = ["ParamInfo", "read_params", "read_lets", "BaseScope", "DAEScope",
           "LagrangianScope", "PositionScope"]


# ------------------------------------------------------------------ parameters
@dataclasses.dataclass
class ParamInfo:
    """The PhysicalParams of a model file, split by how they enter the DAE.

    Attributes:
        free: traced DAE parameters: name -> default (float64 array).  A
            sweep may vary these.
        derived: ordered ``(name, Expr)`` of parameters defined by
            expressions of earlier parameters; computed inside the residual.
        structural: name -> value of parameters that fix the shape of the
            model (sizes); baked in at load time, never traced.
        values: every parameter's numeric default (free, derived, structural).
        file: the model file (for messages).
    """

    free: dict
    derived: list
    structural: dict
    values: dict
    file: str | None = None

    def resolve(self, p: Mapping[str, Any]) -> dict:
        """Every parameter's value from the traced ones.

        Args:
            p: free parameter values (jax tracers or arrays).

        Returns:
            dict name -> value for free, structural and derived parameters;
            derived ones are computed from ``p`` (traceable).
        """
        out = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in self.structural.items()}
        out.update({k: p[k] for k in self.free})
        scope = _ValueScope(out)
        for name, expr in self.derived:
            out[name] = expr.evaluate(scope)
        return out

    def numeric(self, overrides: Mapping[str, Any] | None = None) -> dict:
        """Numeric values of every parameter with free ones overridden.

        Args:
            overrides: values of free parameters (name -> number/array).

        Returns:
            dict name -> float or numpy array, derived ones recomputed.

        Raises:
            InputError: an override names no parameter, a derived or a
                structural one, or has the wrong shape.
        """
        free = self.check(overrides)
        out = {k: np.asarray(v, dtype=np.float64) for k, v in self.structural.items()}
        out.update(free)
        for name, expr in self.derived:
            out[name] = np.asarray(expr.evaluate(_NumericScope(out)), dtype=np.float64)
        return {k: (float(v) if np.ndim(v) == 0 else v) for k, v in out.items()}

    def numeric_table(self, values: Mapping[str, Any], varying, size: int) -> tuple[dict, frozenset]:
        """:meth:`numeric` at ``size`` points at once.

        Args:
            values: free parameter name -> value; a name in ``varying``
                holds a ``(size,)`` column (one value per point), any other
                one value for every point.
            varying: the names whose values vary by point.
            size: the number of points.

        Returns:
            ``(params, varying)``: every parameter's value as :meth:`numeric`
            gives it, the varying ones and the derived parameters computed
            from them as ``(size,)`` columns (row ``i`` is :meth:`numeric`
            of point ``i``, bit for bit: :func:`solver.models.expr.evaluate_table`);
            and the names that vary.

        Raises:
            InputError: as :meth:`numeric`, for a value common to every point.
            NotElementwise: a varying name that is not a scalar free
                parameter, a column of another length or with a value that
                is not finite, or a derived parameter that does more than
                elementwise arithmetic with a varying one.
        """
        varying = set(varying)
        columns = {}
        for name in varying:
            column = np.asarray(values[name], dtype=np.float64)
            if name not in self.free or np.shape(self.free[name]) != () or column.shape != (size,) \
                    or not all_finite(column):
                raise NotElementwise(name)
            columns[name] = column
        out = {k: np.asarray(v, dtype=np.float64) for k, v in self.structural.items()}
        out.update(self.check({k: v for k, v in values.items() if k not in varying}))
        out.update(columns)
        for name, expr in self.derived:
            if expr.names() & varying:
                out[name] = evaluate_table(expr, out, varying, size)
                varying.add(name)
            else:
                out[name] = np.asarray(expr.evaluate(_NumericScope(out)), dtype=np.float64)
        return ({k: (float(v) if np.ndim(v) == 0 else v) for k, v in out.items()}, frozenset(varying))

    def check(self, overrides: Mapping[str, Any] | None) -> dict:
        """Free parameter values (defaults updated by ``overrides``), checked.

        Args:
            overrides: name -> value.

        Returns:
            dict of every free parameter -> float64 array.

        Raises:
            InputError: unknown name (with the valid ones), a derived or a
                structural parameter, a value of the wrong shape.
        """
        out = {k: np.asarray(v, dtype=np.float64) for k, v in self.free.items()}
        derived = dict(self.derived)
        for name, value in (overrides or {}).items():
            if name in derived:
                raise InputError(
                    f"parameter '{name}' is derived ({name}: {derived[name].text}) and cannot be "
                    f"set on its own; set the parameters it is computed from "
                    f"({', '.join(sorted(derived[name].names())) or 'none'}), or override "
                    f"PhysicalParams.{name} with a number", file=self.file, path="PhysicalParams")
            if name in self.structural:
                raise InputError(
                    f"parameter '{name}' is structural (it fixes the size of the model) and "
                    f"cannot be varied per run or per sweep point; change it in the model file "
                    f"or with the sweep's Override: {{PhysicalParams: {{{name}: ...}}}}",
                    file=self.file, path="PhysicalParams")
            if name not in out:
                valid = ", ".join(self.free) or "(none)"
                raise InputError(f"unknown parameter '{name}'; the parameters are {valid}",
                                 file=self.file, path="PhysicalParams")
            try:
                arr = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(f"parameter '{name}': expected a number, got {value!r}",
                                 file=self.file, path="PhysicalParams") from None
            if arr.shape != out[name].shape:
                raise InputError(f"parameter '{name}' has shape {out[name].shape}, got a value of "
                                 f"shape {arr.shape}", file=self.file, path="PhysicalParams")
            if not all_finite(arr):
                raise InputError(f"parameter '{name}' must be finite, got {value!r}",
                                 file=self.file, path="PhysicalParams")
            out[name] = arr
        return out


class _ValueScope:
    """Plain name -> value lookups (parameters), no derivatives."""

    def __init__(self, values: Mapping[str, Any]):
        self.values = values

    def names(self):
        return list(self.values)

    def lookup(self, name, order):
        value = self.values[name]
        if order:
            raise ExprError(f"{name}{chr(39) * order} is a derivative, but '{name}' is a "
                            f"parameter (a constant)")
        return value

    def derivative(self, thunk, order):
        raise ExprError("derivatives of parameter expressions are zero; remove the prime")


class _NumericScope(_ValueScope):
    """:class:`_ValueScope` over numbers, evaluated in numpy (:mod:`solver.models.expr`):
    derived parameters are computed once per design point of a sweep."""

    numeric = True


def read_params(data: Any, loc: Locator,
                structural: Callable[[dict], set] | None = None) -> ParamInfo:
    """Read ``PhysicalParams`` and split it (see :class:`ParamInfo`).

    An entry is *free* (a traced parameter) when its expression names no
    other parameter (``2.5``, ``pi/4``, ``[0, 0, 1]``) and *derived* when it
    does (``I: M*L**2/12``).

    Args:
        data: the value of ``PhysicalParams`` (a mapping or null).
        loc: the file's locator.
        structural: given the numeric values, the names that fix sizes.
            The parameters the file's repeats used (``loc.repeat_names``,
            set by :func:`solver.models.repeat.expand`) are structural too.

    Returns:
        :class:`ParamInfo`.

    Raises:
        InputError: not a mapping, a bad name, an unknown name in an
            expression, a ragged list, a value that is not finite.
    """
    params = require_mapping(data, ("PhysicalParams",), loc, allow_none=True)
    values: dict = {}
    exprs: dict = {}
    for name, raw in params.items():
        path = ("PhysicalParams", name)
        where = dict(file=loc.file, path=format_path(path), line=loc.line(path))
        check_name(name, "parameter", **where)
        value = evaluate_constant(raw, values, **where)
        if isinstance(value, list):
            raise InputError("expected a number or a regular list of numbers (a vector or "
                             "matrix); the items of this list have different shapes", **where)
        values[name] = value
        exprs[name] = parse(raw, **where)
    structural_names = structural(values) if structural else set()
    # Parameters that bound a repeat or fill a placeholder fix the model's size too.
    structural_names |= set(getattr(loc, "repeat_names", ())) & set(values)
    free, derived, fixed = {}, [], {}
    for name, expr in exprs.items():
        if name in structural_names:
            fixed[name] = np.asarray(values[name], dtype=np.float64)
        elif expr.names():
            derived.append((name, expr))
        else:
            free[name] = np.asarray(values[name], dtype=np.float64)
    return ParamInfo(free, derived, fixed, values, loc.file)


def read_lets(data: Any, loc: Locator, taken: Mapping[str, str]) -> list:
    """Read ``Let``: ordered ``name: expression`` assignments.

    Args:
        data: the value of ``Let`` (mapping or null).
        loc: the file's locator.
        taken: names already declared -> what they are (for clash messages).

    Returns:
        list of ``(name, Expr)`` in file order.

    Raises:
        InputError: not a mapping, a bad or clashing name, a malformed
            expression, or a name used before its definition.
    """
    lets = require_mapping(data, ("Let",), loc, allow_none=True)
    out = []
    names = [k for k in lets]
    for k, (name, raw) in enumerate(lets.items()):
        path = ("Let", name)
        where = dict(file=loc.file, path=format_path(path), line=loc.line(path))
        check_name(name, "Let name", **where)
        if name in taken:
            raise InputError(f"'{name}' is already {taken[name]}; a Let name must be new",
                             **where)
        expr = parse(raw, **where)
        later = sorted(n for n in expr.names() if n in names[k:])
        if later:
            which = ", ".join(f"'{n}'" for n in later)
            raise InputError(f"uses {which} before its definition; Let entries are evaluated in "
                             f"file order and may only use earlier ones", **where)
        out.append((name, expr))
    return out


# ---------------------------------------------------------------------- scopes
class BaseScope:
    """Time, parameters and ``Let`` names; subclasses add the unknowns.

    Args:
        t: time (traced).
        params: every parameter's value (:meth:`ParamInfo.resolve`).
        lets: ordered ``(name, Expr)``.
    """

    kind_words = "model"

    def __init__(self, t, params: Mapping[str, Any], lets: list):
        self.t = t
        self.params = params
        self.lets = dict(lets)
        self._cache: dict = {}

    # unknowns: overridden
    def _unknown_names(self) -> list:
        return []

    def _unknown(self, name: str, order: int):
        raise KeyError(name)

    def names(self):
        """Names an expression may use here (for unknown-name messages)."""
        return self._unknown_names() + list(self.lets) + list(self.params) + ["t"]

    def lookup(self, name: str, order: int):
        """Value of ``name`` differentiated ``order`` times (expr scope protocol)."""
        if name == "t":
            return self.t if order == 0 else jnp.asarray(1.0 if order == 1 else 0.0)
        if name in self.lets:
            if order == 0:
                return self._let(name)
            key = (name, order)
            if key not in self._cache:  # C' used twice in T is differentiated once
                self._cache[key] = self.derivative(lambda: self._let(name), order)
            return self._cache[key]
        if name in self.params:
            if order:
                raise ExprError(f"{name}{chr(39) * order} is a derivative, but '{name}' is a "
                                f"parameter (a constant)")
            return self.params[name]
        return self._unknown(name, order)

    def _let(self, name: str):
        if name not in self._cache:
            self._cache[name] = self.lets[name].evaluate(self)
        return self._cache[name]


class DAEScope(BaseScope):
    """Scope of a ``Kind: DAE`` residual: variables of any derivative order.

    ``(expr)'`` and a Let name's ``A'`` become :func:`solver.dae.problem.ddt` of the
    expression, which the structural analysis and Taylor engine understand.

    Args:
        t, params, lets: as :class:`BaseScope`.
        v: the residual's variable view (``v[name][k]``).
        variables: the variable names.
    """

    def __init__(self, t, params, lets, v, variables):
        super().__init__(t, params, lets)
        self.v, self.variables = v, list(variables)

    def _unknown_names(self):
        return self.variables

    def _unknown(self, name, order):
        if name not in self.variables:
            raise KeyError(name)
        return self.v[name][order]

    def derivative(self, thunk, order):
        """d^order/dt^order of an expression via ``ddt`` (no numeric value of its own)."""
        x = thunk()
        for _ in range(order):
            x = ddt(x)
        return x


class PositionScope(BaseScope):
    """Coordinates only (no velocities): constraints, points, animation.

    Args:
        t, params, lets: as :class:`BaseScope`.
        q: coordinate name -> value.
        what: what is being evaluated, for the message when a velocity or a
            derivative is asked for (``"a constraint"``).
    """

    def __init__(self, t, params, lets, q, what="this expression"):
        super().__init__(t, params, lets)
        self.q, self.what = q, what

    def _unknown_names(self):
        return list(self.q)

    def _unknown(self, name, order):
        if name not in self.q:
            raise KeyError(name)
        if order:
            raise ExprError(f"{name}{chr(39) * order}: {self.what} may depend on positions "
                            f"only, not on velocities or accelerations")
        return self.q[name]

    def derivative(self, thunk, order):
        """Refused: see the class docstring."""
        raise ExprError(f"{self.what} may depend on positions only; a time derivative "
                        f"(a prime) is not allowed here")


class LagrangianScope(BaseScope):
    """Scope of L, R and Q: coordinates ``q`` and velocities ``q'``.

    A prime on a ``Let`` name or on ``(expr)'`` is the total time derivative
    along the motion, computed by ``jax.jvp`` of the expression as a function
    of ``(t, q)`` with tangent ``(1, q')`` — never ``ddt`` — because the
    Lagrangian must be an ordinary function of ``q`` and ``q'``.  The
    differentiated expression must therefore depend on positions only
    (its derivative would need accelerations otherwise).

    Args:
        t, params, lets: as :class:`BaseScope`.
        q, qd: coordinate name -> position / velocity.
    """

    def __init__(self, t, params, lets, q, qd):
        super().__init__(t, params, lets)
        self.q, self.qd = q, qd
        self._frozen = 0  # > 0 while evaluating inside a jvp: velocities are refused

    def _unknown_names(self):
        return list(self.q)

    def _unknown(self, name, order):
        if name not in self.q:
            raise KeyError(name)
        if order == 0:
            return self.q[name]
        if order == 1 and not self._frozen:
            return self.qd[name]
        if order == 1:
            raise ExprError(f"{name}': the derivative of an expression that contains velocities "
                            f"would need accelerations, which a Lagrangian cannot contain; "
                            f"differentiate expressions of positions only")
        raise ExprError(f"{name}{chr(39) * order}: a Lagrangian model may use positions and "
                        f"velocities ({name}, {name}') only, not accelerations")

    def derivative(self, thunk, order):
        """Total d/dt along ``(1, q')`` by ``jax.jvp`` (order 1 only)."""
        if order != 1 or self._frozen:
            raise ExprError("only first time derivatives of position expressions are available "
                            "in a Lagrangian model (a second derivative needs accelerations)")

        def f(t, q):
            saved = (self.t, self.q, self._cache)
            self.t, self.q, self._cache = t, q, {}
            self._frozen += 1
            try:
                return jnp.asarray(thunk(), dtype=jnp.float64)
            finally:
                self._frozen -= 1
                self.t, self.q, self._cache = saved

        t = jnp.asarray(self.t, dtype=jnp.float64)
        _, dot = jax.jvp(f, (t, self.q), (jnp.ones_like(t), self.qd))
        return dot
