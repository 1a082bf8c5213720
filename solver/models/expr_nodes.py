"""The expression language's vocabulary: limits, errors, functions, the syntax tree, messages.

Everything the parser (:mod:`solver.models.expr_parse`) builds and the
evaluators (:mod:`solver.models.expr_eval`, :mod:`solver.models.expr_numeric`)
walk: the limits on an expression, :class:`ExprError`, the whitelisted
functions, the node classes and their rendering back to text, and the located
messages (a caret under the place) every error of the language carries.  The
language itself is described in :mod:`solver.models.expr`.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import jax.numpy as jnp

from solver.errors import InputError

__all__ = ["BinOp", "CONSTANTS", "Call", "Const", "Deriv", "ExprError", "FUNCTIONS", "Index", "MAX_LENGTH",
           "MAX_NESTING", "MAX_ORDER", "Name", "Neg", "Node", "Num", "RESERVED_NAMES", "SWITCHING", "Scope",
           "Vector"]


MAX_LENGTH = 10_000
MAX_NESTING = 100
# Same cap as solver.dae.problem.MAX_DERIVATIVE_ORDER: the structural analysis probes
# no higher, so a larger order could only fail later with a vaguer message.
MAX_ORDER = 12
# Long lines are shown as a window around the caret so messages stay readable.
_EXCERPT_WIDTH = 76
# Unknown-name messages list at most this many valid names.
_MAX_LISTED = 30


class ExprError(InputError):
    """An :class:`InputError` about one expression.

    Args:
        message: what is wrong (with the quoted expression and caret when
            ``expression`` is known).
        file, path, line: location, as for :class:`InputError`.
        expression: the expression text, when known.
        position: 0-based character offset of the problem in ``expression``.

    A scope raises ``ExprError(message)`` with neither ``expression`` nor
    ``position``; :meth:`Expr.evaluate` then re-raises it with both.
    """

    def __init__(self, message: str, file: str | None = None, path: str | None = None,
                 line: int | None = None, *, expression: str | None = None,
                 position: int | None = None):
        self.expression, self.position = expression, position
        super().__init__(message, file=file, path=path, line=line)


class Scope(Protocol):
    """What :meth:`Expr.evaluate` needs (see the module docstring)."""

    def lookup(self, name: str, order: int) -> Any: ...

    def derivative(self, thunk: Callable[[], Any], order: int) -> Any: ...


# ------------------------------------------------------------------ functions
def shape_words(shape: tuple) -> str:
    if shape == ():
        return "a scalar"
    if len(shape) == 1:
        return f"a {shape[0]}-vector"
    return "a " + "x".join(str(n) for n in shape) + " array"


def _elementwise(name):
    return lambda args, xp: getattr(xp, name)(args[0])


def _dot(args, xp):
    a, b = args
    sa, sb = jnp.shape(a), jnp.shape(b)
    if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2) or sa[-1] != sb[0]:
        raise ExprError(f"dot needs two vectors of equal length (or matching matrix and "
                        f"vector), got {shape_words(sa)} and {shape_words(sb)}")
    return xp.dot(a, b)


def _cross(args, xp):
    a, b = args
    sa, sb = jnp.shape(a), jnp.shape(b)
    if sa == sb == (3,):
        return xp.cross(a, b)
    if sa == sb == (2,):
        # The z-component of the 3-D cross product: what planar mechanisms use.
        return a[0] * b[1] - a[1] * b[0]
    raise ExprError(f"cross needs two 3-vectors or two 2-vectors, got "
                    f"{shape_words(sa)} and {shape_words(sb)}")


def _pairwise(name, op):
    def fn(args, xp):
        a, b = args
        sa, sb = jnp.shape(a), jnp.shape(b)
        if sa != sb and () not in (sa, sb):
            raise ExprError(f"{name} needs arguments of equal shape or a scalar, got "
                            f"{shape_words(sa)} and {shape_words(sb)}")
        return getattr(xp, op)(a, b)

    return fn


def _where(args, xp):
    c, a, b = args
    shapes = [jnp.shape(x) for x in args]
    big = [s for s in shapes if s != ()]
    if any(s != big[0] for s in big):
        raise ExprError("where needs arguments of equal shape or scalars, got "
                        + ", ".join(shape_words(s) for s in shapes))
    return xp.where(c > 0, a, b)


def _step(args, xp):
    return xp.where(args[0] >= 0, 1.0, 0.0)


def _norm(args, xp):
    (a,) = args
    if len(jnp.shape(a)) != 1:
        raise ExprError(f"norm needs a vector, got {shape_words(jnp.shape(a))}")
    return xp.sqrt(xp.sum(a * a))


# name -> (number of arguments, implementation taking the list of arguments and
# the array module: jax.numpy when traced, numpy for constants)
FUNCTIONS: dict[str, tuple[int, Callable]] = {
    "sin": (1, _elementwise("sin")), "cos": (1, _elementwise("cos")),
    "tan": (1, _elementwise("tan")), "asin": (1, _elementwise("arcsin")),
    "acos": (1, _elementwise("arccos")), "atan": (1, _elementwise("arctan")),
    "sinh": (1, _elementwise("sinh")), "cosh": (1, _elementwise("cosh")),
    "tanh": (1, _elementwise("tanh")), "exp": (1, _elementwise("exp")),
    "log": (1, _elementwise("log")), "sqrt": (1, _elementwise("sqrt")),
    "abs": (1, _elementwise("abs")), "atan2": (2, _pairwise("atan2", "arctan2")), "dot": (2, _dot),
    "cross": (2, _cross), "norm": (1, _norm),
    # Piecewise: each one's switching function (its argument, a - b, the
    # condition) is an implicit event of the integrator (Expr.switches).
    "min": (2, _pairwise("min", "minimum")), "max": (2, _pairwise("max", "maximum")),
    "where": (3, _where), "sign": (1, _elementwise("sign")), "step": (1, _step),
}
#: Functions whose value switches where an argument (or a - b) crosses zero.
SWITCHING = ("abs", "min", "max", "where", "sign", "step")
CONSTANTS = {"pi": math.pi}
# Names a model may not declare for its own variables, parameters or Let
# definitions: they would be unreachable (functions, pi) or clash with time.
RESERVED_NAMES = frozenset(FUNCTIONS) | frozenset(CONSTANTS) | {"t"}


# ---------------------------------------------------------------------- nodes
@dataclass(frozen=True)
class Node:
    """Base of the expression tree.  ``pos`` (0-based offset of the node in
    the source text, for error carets) takes no part in equality."""

    pos: int = field(default=0, compare=False, repr=False, kw_only=True)

    def children(self) -> tuple:
        return ()


@dataclass(frozen=True)
class Num(Node):
    """A number literal."""
    value: float


@dataclass(frozen=True)
class Const(Node):
    """A named constant (``pi``)."""
    name: str


@dataclass(frozen=True)
class Name(Node):
    """A name from the scope, differentiated ``order`` times (``x''``: 2)."""
    name: str
    order: int = 0


@dataclass(frozen=True)
class Neg(Node):
    """Unary minus (unary plus is dropped by the parser)."""
    operand: Node

    def children(self):
        return (self.operand,)


@dataclass(frozen=True)
class BinOp(Node):
    """``left op right`` for op in ``+ - * / **``."""
    op: str
    left: Node
    right: Node

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True)
class Call(Node):
    """A call of a function from :data:`FUNCTIONS`."""
    func: str
    args: tuple

    def children(self):
        return self.args


@dataclass(frozen=True)
class Vector(Node):
    """A vector literal ``[a, b, ...]`` (items of equal shape)."""
    items: tuple

    def children(self):
        return self.items


@dataclass(frozen=True)
class Index(Node):
    """``base[index]`` with a 0-based integer literal index."""
    base: Node
    index: int

    def children(self):
        return (self.base,)


@dataclass(frozen=True)
class Deriv(Node):
    """d^order/dt^order of an expression other than a bare name."""
    operand: Node
    order: int

    def children(self):
        return (self.operand,)


def fold_tree(root: Node, combine: Callable, lazy: tuple = ()):
    """Post-order fold without Python recursion (a 5,000-term sum is a
    5,000-deep tree).  ``combine(node, child_results)``; nodes of a ``lazy``
    type get no child results (their combine handles the children itself)."""
    out: list = []
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        kids = () if isinstance(node, lazy) else node.children()
        if kids and not expanded:
            stack.append((node, True))
            stack.extend((kid, False) for kid in reversed(kids))
            continue
        n = len(kids)
        vals = out[len(out) - n:] if n else []
        if n:
            del out[len(out) - n:]
        out.append(combine(node, vals))
    return out[0]


# ------------------------------------------------------------------ rendering
_PREC = {"+": 10, "-": 10, "*": 20, "/": 20, "**": 30}
NEG_PREC = 25
_ATOM_PREC = 100


def _prec(node: Node) -> int:
    if isinstance(node, BinOp):
        return _PREC[node.op]
    if isinstance(node, Neg):
        return NEG_PREC
    return _ATOM_PREC


def format_number(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def render(node: Node, parts: list) -> str:
    def wrap(child, text, needs):
        return f"({text})" if needs else text

    if isinstance(node, Num):
        return format_number(node.value)
    if isinstance(node, Const):
        return node.name
    if isinstance(node, Name):
        return node.name + "'" * node.order
    if isinstance(node, Neg):
        return "-" + wrap(node.operand, parts[0], _prec(node.operand) < NEG_PREC)
    if isinstance(node, BinOp):
        p = _PREC[node.op]
        if node.op == "**":
            left = wrap(node.left, parts[0], _prec(node.left) <= p)
            right = wrap(node.right, parts[1], _prec(node.right) < NEG_PREC)
            return f"{left}**{right}"
        left = wrap(node.left, parts[0], _prec(node.left) < p)
        right = wrap(node.right, parts[1], _prec(node.right) <= p)
        sep = f" {node.op} " if p == 10 else node.op
        return f"{left}{sep}{right}"
    if isinstance(node, Call):
        return f"{node.func}({', '.join(parts)})"
    if isinstance(node, Vector):
        return f"[{', '.join(parts)}]"
    if isinstance(node, Index):
        # A primed call or vector literal cannot take a subscript unparenthesised.
        plain = isinstance(node.base, (Name, Index)) or (
            isinstance(node.base, Deriv) and not isinstance(node.base.operand, (Call, Vector)))
        return wrap(node.base, parts[0], not plain) + f"[{node.index}]"
    if isinstance(node, Deriv):
        plain = isinstance(node.operand, (Call, Vector))
        return wrap(node.operand, parts[0], not plain) + "'" * node.order
    raise TypeError(f"unknown node {node!r}")


# ------------------------------------------------------------------- messages
def _pointer(text: str, pos: int) -> str:
    """Two lines: the source line holding ``pos`` and a caret under it."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:] if end < 0 else text[start:end]
    line = "".join(" " if c.isspace() else c for c in line)
    col = pos - start
    if len(line) > _EXCERPT_WIDTH:
        lo = max(0, min(col - _EXCERPT_WIDTH // 2, len(line) - _EXCERPT_WIDTH))
        hi = lo + _EXCERPT_WIDTH
        shown = ("..." if lo else "") + line[lo:hi] + ("..." if hi < len(line) else "")
        col = col - lo + (3 if lo else 0)
        line = shown
    return f"\n  {line}\n  {' ' * col}^"


def closest_first(name: str, valid: list[str]) -> list[str]:
    ranked = sorted(enumerate(valid), key=lambda iv: (
        -difflib.SequenceMatcher(None, name, iv[1]).ratio(), iv[0]))
    return [v for _, v in ranked]


def listing(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    if len(items) > _MAX_LISTED:
        shown += f", ... ({len(items) - _MAX_LISTED} more)"
    return shown


class Source:
    """The text being parsed and where it came from."""

    def __init__(self, text: str, file, path, line):
        self.text, self.file, self.path, self.line = text, file, path, line

    def error(self, message: str, pos: int | None) -> ExprError:
        if pos is not None:
            message += _pointer(self.text, pos)
        return ExprError(message, self.file, self.path, self.line,
                         expression=self.text, position=pos)
