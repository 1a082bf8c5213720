"""Expressions of numbers in numpy: constants, and many design points at once.

:func:`evaluate_constant` computes a parameter or an initial value from
numbers; :func:`evaluate_table` and :func:`evaluate_constant_table` compute it
for every point of a sweep in one pass, bit for bit as point by point.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import numpy as np

from solver.models.expr_eval import Expr, integer_exponent
from solver.models.expr_nodes import (BinOp, Call, Deriv, ExprError, FUNCTIONS, Index, Name, Neg, Node,
                                      Vector, fold_tree)
from solver.models.expr_parse import error_location, parse

__all__ = ["ConstantScope", "NotElementwise", "all_finite", "evaluate_constant", "evaluate_constant_table",
           "evaluate_table"]


# ------------------------------------------------------------------ constants
class ConstantScope:
    """A scope of constant values (numbers or arrays), as for PhysicalParams.

    Args:
        values: name -> number, array, or nested list of numbers.

    Derivatives (``L'``, ``(L*2)'``) are refused: these are constants.
    """

    numeric = True  # computed in numpy (see the module docstring)

    def __init__(self, values: Mapping[str, Any]):
        self.values = values

    def names(self) -> list[str]:
        """The names available, in the mapping's order."""
        return list(self.values)

    def lookup(self, name: str, order: int):
        """The value of ``name``; ``KeyError`` if absent, ``ExprError`` for
        a derivative or a value that is not a number or regular array."""
        value = self.values[name]
        if value is None or isinstance(value, (bool, np.bool_)):
            raise ExprError(f"'{name}' has no numeric value ({value!r})")
        if order:
            raise ExprError(f"{name}{chr(39) * order} is a derivative, but '{name}' is a "
                            f"constant here")
        try:
            return np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ExprError(f"'{name}' is not a number or a regular array of numbers") from None

    def derivative(self, thunk, order: int):
        """Refused: only constants are available."""
        raise ExprError("derivatives are not available here: the values are constants")


def all_finite(value: np.ndarray) -> bool:
    """Whether every entry of a float array is finite (a scalar without numpy's reduction)."""
    return math.isfinite(value) if value.ndim == 0 else bool(np.isfinite(value).all())


@functools.lru_cache(maxsize=4096)
def _parse_constant(value, file, path, line) -> Expr:
    # Initial values are evaluated once per design point of a sweep; their
    # text does not change, so neither does the parse (Expr is immutable).
    return parse(value, file=file, path=path, line=line)


def evaluate_constant(value, names: Mapping[str, Any], where: str | None = None, *,
                      file: str | None = None, path: str | None = None,
                      line: int | None = None):
    """Evaluate a constant (e.g. a PhysicalParams entry) from earlier values.

    Args:
        value: a YAML number, an expression string, or a (nested) list of
            those, e.g. ``[["L/2", 0], "M", "M*L**2/12"]``.
        names: the values it may refer to (name -> number/array/list).
        where, file, path, line: location, as for :func:`parse`; list items
            get ``[k]`` appended to the path.

    Returns:
        A float for a scalar, a float64 ``np.ndarray`` for a vector or
        matrix; a list whose items have different shapes stays a list of
        evaluated items (``Dyna: [[L/2, 0], M, M*L**2/12]`` gives
        ``[array([0.5, 0.]), 1.0, 0.0833...]``).

    Raises:
        InputError: malformed expression, unknown name (listing ``names``),
            a derivative, an empty list, a boolean or missing value, or a
            result that is not finite.
    """
    file, path, line = error_location(where, file, path, line)
    if isinstance(value, (list, tuple)):
        if not value:
            raise ExprError("empty list: expected numbers or expressions", file, path, line)
        items = [evaluate_constant(v, names, file=file, line=line,
                                   path=f"{path}[{k}]" if path else f"[{k}]")
                 for k, v in enumerate(value)]
        shapes = {np.shape(v) for v in items if not isinstance(v, list)}
        if len(shapes) == 1 and not any(isinstance(v, list) for v in items):
            return np.stack([np.asarray(v, dtype=np.float64) for v in items])
        return items
    try:
        expr = _parse_constant(value, file, path, line)
    except TypeError:  # unhashable (a mapping): parse reports it
        expr = parse(value, file=file, path=path, line=line)
    with np.errstate(all="ignore"):  # a 1/0 is reported below as not finite, not warned about
        result = np.asarray(expr.evaluate(ConstantScope(names)), dtype=np.float64)
    if not all_finite(result):
        raise ExprError(f"{expr.text!r} evaluates to a value that is not finite: "
                        f"{result.tolist()}", file, path, line)
    return float(result) if result.ndim == 0 else result


# ------------------------------------------------------------ many points at once
class NotElementwise(Exception):
    """What :func:`evaluate_table` refuses: the caller evaluates point by point instead.

    Not an :class:`InputError`: nothing is wrong with the input, the
    expression only does more with a varying value than an elementwise
    operation (a vector of it reduced by ``dot``, a derivative, ...), or a
    value came out not finite (the per-point path words that error).
    """


# Functions of scalars that numpy applies element by element: on a column of
# points each element is computed by the same ufunc as the point alone.
_ELEMENTWISE_FUNCTIONS = frozenset(("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
                                    "exp", "log", "sqrt", "abs", "sign", "step", "atan2", "min", "max",
                                    "where"))


class _Column:
    """A value that varies by point: ``array`` is ``(size,) + shape`` for a per-point ``shape``.

    ``scalar`` says what one point's value would be: a numpy scalar (the
    result of arithmetic or a subscript) or a 0-d array (a name, a
    function's value): ``**`` takes different numpy paths for the two.
    """

    __slots__ = ("array", "shape", "scalar")

    def __init__(self, array: np.ndarray, shape: tuple, scalar: bool):
        self.array, self.shape, self.scalar = array, shape, scalar

    def point(self, i: int):
        """The value one point alone would have, of the same numpy type."""
        return self.array[i] if self.scalar else np.asarray(self.array[i])


def evaluate_table(expr: Expr, values: Mapping[str, Any], varying, size: int) -> np.ndarray:
    """An expression of constants at ``size`` points at once, as :meth:`Expr.evaluate` at each.

    The names in ``varying`` hold one value per point (a ``(size,)``
    column); the others are the same at every point.  A part of the
    expression that reads no varying name is evaluated exactly as for one
    point (:class:`ConstantScope`); a part that does is computed on columns
    by the same numpy operations, element by element, so that each point's
    value is bit for bit the one :meth:`Expr.evaluate` gives it alone.

    Args:
        expr: the parsed expression.
        values: name -> value (a number or array for a constant name, a
            ``(size,)`` array for a varying one).
        varying: the names that vary by point (scalars per point).
        size: the number of points.

    Returns:
        float64 array of shape ``(size,) + shape`` (``shape`` the value's
        shape at one point).

    Raises:
        NotElementwise: a varying value enters something other than an
            elementwise operation of scalars (``+ - * / **``, the
            elementwise functions, a vector literal of scalars and a
            subscript of it), a varying name is not a column of ``size``
            scalars, or the value is not finite at some point.
        ExprError: as :meth:`Expr.evaluate`, from a part that reads no
            varying name.
    """
    varying = frozenset(varying)
    scope = ConstantScope(values)

    def combine(node, vals):
        if isinstance(node, Name) and node.name in varying:
            column = np.asarray(values[node.name], dtype=np.float64)
            if node.order or column.shape != (size,):
                raise NotElementwise(node.name)
            return _Column(column, (), scalar=False)
        if not any(isinstance(v, _Column) for v in vals):
            if isinstance(node, Deriv):
                raise NotElementwise("a derivative")
            return expr._node_value(node, vals, scope)
        return _column_value(node, vals, size)

    result = fold_tree(expr.root, combine, lazy=(Deriv,))
    if isinstance(result, _Column):
        array = result.array
    else:
        array = np.broadcast_to(result, (size,) + np.shape(result))
    array = np.asarray(array, dtype=np.float64)
    if not all_finite(array):
        raise NotElementwise("not finite")
    return array


def _column_value(node: Node, vals: list, size: int) -> _Column:
    """A node whose children include varying values, computed on columns (:func:`evaluate_table`)."""
    if isinstance(node, Vector):
        if any(v.shape if isinstance(v, _Column) else np.shape(v) for v in vals):
            raise NotElementwise("a vector of vectors")
        items = [v.array if isinstance(v, _Column) else np.broadcast_to(v, (size,)) for v in vals]
        return _Column(np.stack(items, axis=-1), (len(items),), scalar=False)
    if isinstance(node, Index):
        (base,) = vals
        if len(base.shape) != 1 or node.index >= base.shape[0]:
            raise NotElementwise("a subscript")
        return _Column(base.array[:, node.index], (), scalar=True)
    if any(v.shape if isinstance(v, _Column) else np.ndim(v) for v in vals):
        raise NotElementwise("a vector operand")
    args = [v.array if isinstance(v, _Column) else v for v in vals]
    if isinstance(node, Neg):
        return _Column(-args[0], (), scalar=True)
    if isinstance(node, BinOp):
        a, b = args
        if node.op == "+":
            out = a + b
        elif node.op == "-":
            out = a - b
        elif node.op == "*":
            out = a * b
        elif node.op == "/":
            out = a / b
        else:
            out = _column_power(node, vals, size)
        return _Column(np.broadcast_to(np.asarray(out, dtype=np.float64), (size,)), (), scalar=True)
    if isinstance(node, Call) and node.func in _ELEMENTWISE_FUNCTIONS:
        with np.errstate(all="ignore"):
            out = np.asarray(FUNCTIONS[node.func][1](args, np), dtype=np.float64)
        return _Column(np.broadcast_to(out, (size,)), (), scalar=False)
    raise NotElementwise(type(node).__name__)


def _column_power(node: BinOp, vals: list, size: int) -> np.ndarray:
    """``a ** b`` of :func:`_column_value`, each point's value as :func:`_binop` computes it alone.

    numpy raises an array to a power by a fast path for some exponents
    (``x**2`` is ``x*x``) and by ``pow`` otherwise, and a numpy scalar by
    ``pow`` always, which may differ in the last bit: an array base with
    the same exponent at every point is raised as a column (the same path
    per element), any other case point by point with the point's types.
    """
    base, exponent = vals
    n = integer_exponent(node.right)
    if n is not None:
        exponent = n
    if isinstance(base, _Column) and not base.scalar and not isinstance(exponent, _Column):
        return base.array ** exponent
    at = lambda v, i: v.point(i) if isinstance(v, _Column) else v
    with np.errstate(all="ignore"):
        return np.array([at(base, i) ** at(exponent, i) for i in range(size)], dtype=np.float64)


def evaluate_constant_table(value, values: Mapping[str, Any], varying, size: int, *,
                            file: str | None = None, path: str | None = None,
                            line: int | None = None) -> np.ndarray:
    """:func:`evaluate_constant` at ``size`` points at once (:func:`evaluate_table`).

    Args:
        value: a YAML number, an expression string, or a (nested) list of
            those, as for :func:`evaluate_constant`.
        values, varying, size: as for :func:`evaluate_table`.
        file, path, line: location of ``value`` (for a parse error).

    Returns:
        float64 array ``(size,) + shape``: row ``i`` is
        :func:`evaluate_constant` of the point's values.

    Raises:
        NotElementwise: as :func:`evaluate_table`, and for a list whose items
            differ in shape (:func:`evaluate_constant` keeps such a list).
        ExprError: malformed expression, an empty list.
    """
    if isinstance(value, (list, tuple)):
        if not value:
            raise ExprError("empty list: expected numbers or expressions", file, path, line)
        items = [evaluate_constant_table(v, values, varying, size, file=file, line=line,
                                         path=f"{path}[{k}]" if path else f"[{k}]")
                 for k, v in enumerate(value)]
        if len({item.shape for item in items}) != 1:
            raise NotElementwise("a list of items of different shapes")
        return np.stack(items, axis=1)
    try:
        expr = _parse_constant(value, file, path, line)
    except TypeError:
        expr = parse(value, file=file, path=path, line=line)
    with np.errstate(all="ignore"):
        return evaluate_table(expr, values, varying, size)
