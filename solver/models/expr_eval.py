"""Evaluating a parsed expression in a scope: the :class:`Expr` class.

One point at a time, traced by ``jax.numpy`` (or computed in numpy in a
numeric scope); shapes are checked here.  The scope protocol is described in
:mod:`solver.models.expr`.
"""

from __future__ import annotations

import numpy as np

import jax.numpy as jnp

from solver.models.expr_nodes import (BinOp, CONSTANTS, Call, Const, Deriv, ExprError, FUNCTIONS, Index,
                                      Name, Neg, Node, Num, SWITCHING, Scope, Vector, Source,
                                      closest_first, fold_tree, listing, render, shape_words)

__all__ = ["Expr"]


# ----------------------------------------------------------------------- Expr
class Expr:
    """A parsed expression.

    Attributes:
        text: the source text (for a YAML list, the list written as a vector).
        root: the tree (:class:`Node` subclasses).
        file, path, line: where it came from, used in error messages.
    """

    def __init__(self, text: str, root: Node, file=None, path=None, line=None):
        self.text, self.root = text, root
        self.file, self.path, self.line = file, path, line

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"

    def __str__(self) -> str:
        """Canonical text: parses back to an equal tree."""
        return fold_tree(self.root, render)

    def __eq__(self, other) -> bool:
        return isinstance(other, Expr) and self.root == other.root

    __hash__ = None

    def free_names(self) -> set[tuple[str, int]]:
        """The (name, order) pairs looked up in the scope.

        Returns:
            e.g. ``{("x", 2), ("lam", 0)}`` for ``x'' + lam*x`` … plus
            ``("x", 0)``.  Names inside ``(expr)'`` appear with the order
            written on them; :attr:`has_expr_derivative` says whether such
            derivatives occur.  ``pi`` is not a name; ``t`` is.
        """
        out, stack = set(), [self.root]
        while stack:
            node = stack.pop()
            if isinstance(node, Name):
                out.add((node.name, node.order))
            stack.extend(node.children())
        return out

    def names(self) -> set[str]:
        """The bare names used (orders dropped)."""
        return {name for name, _ in self.free_names()}

    def switches(self) -> list["Expr"]:
        """The switching functions of the piecewise calls in the expression.

        ``abs(x)``, ``sign(x)``, ``step(x)``: x; ``min(a, b)``, ``max(a, b)``:
        a - b; ``where(c, a, b)``: c.  The Taylor series of the expression is
        not valid across a zero of one of these: the integrator cuts its
        steps there (:mod:`solver.models.events`).

        Returns:
            One :class:`Expr` each, in the order met, the same text once.
        """
        out, seen, stack = [], set(), [self.root]
        while stack:
            node = stack.pop()
            stack.extend(reversed(node.children()))
            if isinstance(node, Call) and node.func in SWITCHING:
                arg = (BinOp("-", node.args[0], node.args[1], pos=node.pos) if node.func in ("min", "max")
                       else node.args[0])
                text = fold_tree(arg, render)
                if text not in seen:
                    seen.add(text)
                    out.append(Expr(text, arg, self.file, self.path, self.line))
        return out

    @property
    def has_expr_derivative(self) -> bool:
        """Whether a derivative of an expression, ``(expr)'``, occurs."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            if isinstance(node, Deriv):
                return True
            stack.extend(node.children())
        return False

    def evaluate(self, scope: Scope):
        """The value of the expression in ``scope``.

        Args:
            scope: an object with ``lookup(name, order)``,
                ``derivative(thunk, order)`` and optionally ``names()``
                (see the module docstring).

        Returns:
            A jax array (0-d for a scalar), traceable under jit/grad/vmap;
            a float64 numpy array in a :class:`ConstantScope`.

        Raises:
            ExprError: an unknown name (listing the scope's names, closest
                first), a subscript out of range, or shapes that do not fit
                (``[1, 2] * [3, 4]``), with a caret at the place.
        """
        if getattr(scope, "numeric", False):
            with np.errstate(all="ignore"):  # a 1/0 is inf, as jax gives it, not a warning: the callers judge it
                return self._evaluate(self.root, scope)
        return self._evaluate(self.root, scope)

    def _evaluate(self, root: Node, scope):
        return fold_tree(root, lambda node, vals: self._node_value(node, vals, scope),
                     lazy=(Deriv,))

    def _error(self, message: str, pos: int) -> ExprError:
        return Source(self.text, self.file, self.path, self.line).error(message, pos)

    def _node_value(self, node: Node, vals: list, scope):
        try:
            return _value(node, vals, scope, self)
        except ExprError as err:
            if err.expression is not None:
                raise
            raise self._error(err.message, node.pos) from None

    def _lookup(self, node: Name, scope):
        try:
            return scope.lookup(node.name, node.order)
        except KeyError:
            known = list(scope.names()) if hasattr(scope, "names") else None
            if known is not None and node.name in known:
                raise  # the scope's own bug, not an unknown name
            message = f"unknown name '{node.name}'"
            if known:
                message += (f"; valid names (closest first): "
                            f"{listing(closest_first(node.name, known))}")
            raise self._error(message, node.pos) from None


def _value(node: Node, vals: list, scope, expr: Expr):
    # Constants (parameters, initial values: once per design point in a
    # sweep) are computed in numpy: eager jax dispatch made RSCR's initial
    # positions cost 2.5 ms a point.  Everything else stays jax (traced).
    xp = np if getattr(scope, "numeric", False) else jnp
    if isinstance(node, Num):
        return xp.asarray(node.value, dtype=xp.float64)
    if isinstance(node, Const):
        return xp.asarray(CONSTANTS[node.name], dtype=xp.float64)
    if isinstance(node, Name):
        return xp.asarray(expr._lookup(node, scope), dtype=xp.float64)
    if isinstance(node, Neg):
        return -vals[0]
    if isinstance(node, BinOp):
        return _binop(node, *vals)
    if isinstance(node, Call):
        if xp is jnp:
            return FUNCTIONS[node.func][1](vals, jnp)
        with np.errstate(all="ignore"):  # NaN or inf, as jax gives: the callers judge them
            return np.asarray(FUNCTIONS[node.func][1](vals, np), dtype=np.float64)
    if isinstance(node, Vector):
        shapes = [jnp.shape(v) for v in vals]
        for k, s in enumerate(shapes):
            if s != shapes[0]:
                raise ExprError(f"vector items must have equal shapes: item 0 is "
                                f"{shape_words(shapes[0])}, item {k} is {shape_words(s)}")
        return xp.stack(vals)
    if isinstance(node, Index):
        shape, base = jnp.shape(vals[0]), fold_tree(node.base, render)
        if not shape:
            raise ExprError(f"cannot take a subscript of {base}: it is a scalar")
        if node.index >= shape[0]:
            raise ExprError(f"subscript {node.index} is out of range: {base} is "
                            f"{shape_words(shape)} (valid subscripts 0 to {shape[0] - 1})")
        return vals[0][node.index]
    if isinstance(node, Deriv):
        return jnp.asarray(scope.derivative(lambda: expr._evaluate(node.operand, scope),
                                            node.order), dtype=jnp.float64)
    raise TypeError(f"unknown node {node!r}")


def integer_exponent(node: Node) -> int | None:
    sign = 1
    if isinstance(node, Neg):
        node, sign = node.operand, -1
    if isinstance(node, Num) and node.value.is_integer() and abs(node.value) <= 64:
        return sign * int(node.value)
    return None


def _binop(node: BinOp, a, b):
    sa, sb = jnp.shape(a), jnp.shape(b)
    op = node.op
    if op in "+-":
        if sa != sb and () not in (sa, sb):
            verb = "add" if op == "+" else "subtract"
            raise ExprError(f"cannot {verb} {shape_words(sa)} and {shape_words(sb)}")
        return a + b if op == "+" else a - b
    if op == "*":
        if sa and sb:
            raise ExprError(f"'*' needs a scalar on one side, got {shape_words(sa)} and "
                            f"{shape_words(sb)}; use dot(a, b) or cross(a, b)")
        return a * b
    if op == "/":
        if sb:
            raise ExprError(f"'/' needs a scalar divisor, got {shape_words(sb)}")
        return a / b
    if sa or sb:
        raise ExprError(f"'**' needs scalars, got {shape_words(sa)} and {shape_words(sb)}; "
                        f"use dot(v, v) for a squared length")
    # Integer powers become lax.integer_pow: exact for negative bases and a
    # plain product for the Taylor engine.
    n = integer_exponent(node.right)
    return a ** n if n is not None else a ** b
