"""The safe expression language of the YAML model files.

Expressions are parsed by a small tokenizer and a Pratt parser into a tree of
whitelisted node classes, and evaluated by walking that tree with
``jax.numpy``.  Nothing is ever handed to ``eval``/``exec``/``compile``, so a
model file can name numbers and functions from the list below and nothing else.

Grammar (lowest to highest precedence; ``**`` is right-associative, the rest
left-associative; unary minus binds looser than ``**`` as in Python, so
``-2**2 == -4`` and ``2**-1 == 0.5``)::

    expr     := expr ('+'|'-') expr | expr ('*'|'/') expr
              | ('-'|'+') expr | expr '**' expr | postfix
    postfix  := primary ( '[' DIGITS ']' | "'" )*
    primary  := NUMBER | NAME | 'pi' | FUNC '(' expr (',' expr)* ')'
              | '(' expr ')' | '[' expr (',' expr)* ']'

* Numbers: ``1``, ``.5``, ``2.``, ``1e-12``, ``2.5E3`` (all float64).
* Names: ASCII identifiers; names containing ``__`` and Python keywords are
  refused.  ``pi`` is the constant; every other name, the time ``t``
  included, is looked up in the scope.
* Functions (arity): sin cos tan asin acos atan sinh cosh tanh exp log sqrt
  abs (1, elementwise), atan2(y, x) (2), dot(a, b) (2: vector·vector,
  matrix·vector, vector·matrix or matrix·matrix), cross(a, b) (2: two
  3-vectors give a 3-vector, two 2-vectors the scalar z-component), norm(v)
  (1, Euclidean length of a vector).  ``min``/``max`` are deliberately absent:
  they are not smooth, and the Taylor-series integrator needs smooth
  residuals (``abs`` is kept because the design lists it).
* Vectors ``[a, b, c]``; nesting gives matrices ``[[1, 0], [0, 1]]``.
* Subscripts ``q[2]`` are 0-based integer literals (component ``q[0]`` is the
  first, as in ``solver.dae.problem.Variable.component_names``), allowed after a name,
  a parenthesised expression, a subscript or a prime: ``q[2]``, ``A[0][1]``,
  ``(a + b)[0]``, ``q'[1]``.
* Primes are time derivatives: ``x'`` and ``x''`` are derivatives of a name
  (the scope says what that means for a variable, a ``Let`` name or ``t``),
  ``(expr)'``, ``sin(x)'`` and ``[x, y]'`` of an expression.  d/dt commutes
  with subscripts, so ``q[2]'`` is stored as ``q'[2]``, and ``(x)'`` as ``x'``.
* Arithmetic on vectors: ``+``/``-`` need equal shapes or a scalar side;
  ``*`` needs a scalar on one side, ``/`` a scalar divisor, ``**`` scalars.

Limits: at most :data:`MAX_LENGTH` characters, nesting (brackets, signs and
``**`` chains) at most :data:`MAX_NESTING` deep, at most :data:`MAX_ORDER`
primes on one thing.

Every error is an :class:`ExprError` (an :class:`~solver.errors.InputError`)
whose message says what is wrong and quotes the expression with a caret under
the place, e.g.::

    Equations[2]: unknown function 'foo'; valid functions: abs, acos, ...
      foo(1)
      ^

Evaluation
----------
:meth:`Expr.evaluate` takes a *scope*: any object with

``scope.lookup(name: str, order: int) -> array``
    The value of ``name`` differentiated ``order`` times (``order`` is the
    number of primes written on the bare name, or pushed onto it through a
    subscript).  Raise ``KeyError(name)`` when the scope has no such name;
    raise :class:`ExprError` with a plain message (no location) for a name it
    knows but cannot provide at that order — the expression adds the caret.
``scope.derivative(thunk, order: int) -> array``
    d^order/dt^order of an expression; ``thunk()`` evaluates the expression in
    this same scope (the solver may wrap it in ``solver.dae.problem.ddt`` or a jvp).
``scope.names() -> Iterable[str]`` (optional)
    The names it knows, listed (closest match first) when a name is unknown.
``scope.numeric: bool`` (optional, default False)
    True for a scope of numbers (:class:`ConstantScope`): the expression is
    then computed in numpy, as constants are, once per design point of a sweep.

Otherwise evaluation uses only ``jax.numpy``, so it traces under ``jit``,
``grad`` and ``vmap``; shapes are checked at trace time.
"""

from __future__ import annotations

import difflib
import functools
import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Protocol

import numpy as np

import jax
import jax.numpy as jnp

from solver.errors import InputError

__all__ = [
    "parse", "Expr", "ExprError", "Scope", "ConstantScope", "evaluate_constant", "all_finite",
    "NotElementwise", "evaluate_table", "evaluate_constant_table",
    "check_name", "FUNCTIONS", "SWITCHING", "RESERVED_NAMES", "MAX_LENGTH", "MAX_NESTING",
    "MAX_ORDER", "Node", "Num", "Const", "Name", "Neg", "BinOp", "Call",
    "Vector", "Index", "Deriv",
]

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
def _shape_words(shape: tuple) -> str:
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
                        f"vector), got {_shape_words(sa)} and {_shape_words(sb)}")
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
                    f"{_shape_words(sa)} and {_shape_words(sb)}")


def _pairwise(name, op):
    def fn(args, xp):
        a, b = args
        sa, sb = jnp.shape(a), jnp.shape(b)
        if sa != sb and () not in (sa, sb):
            raise ExprError(f"{name} needs arguments of equal shape or a scalar, got "
                            f"{_shape_words(sa)} and {_shape_words(sb)}")
        return getattr(xp, op)(a, b)

    return fn


def _where(args, xp):
    c, a, b = args
    shapes = [jnp.shape(x) for x in args]
    big = [s for s in shapes if s != ()]
    if any(s != big[0] for s in big):
        raise ExprError("where needs arguments of equal shape or scalars, got "
                        + ", ".join(_shape_words(s) for s in shapes))
    return xp.where(c > 0, a, b)


def _step(args, xp):
    return xp.where(args[0] >= 0, 1.0, 0.0)


def _norm(args, xp):
    (a,) = args
    if len(jnp.shape(a)) != 1:
        raise ExprError(f"norm needs a vector, got {_shape_words(jnp.shape(a))}")
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


def _fold(root: Node, combine: Callable, lazy: tuple = ()):
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
_NEG_PREC = 25
_ATOM_PREC = 100


def _prec(node: Node) -> int:
    if isinstance(node, BinOp):
        return _PREC[node.op]
    if isinstance(node, Neg):
        return _NEG_PREC
    return _ATOM_PREC


def _format_number(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _render(node: Node, parts: list) -> str:
    def wrap(child, text, needs):
        return f"({text})" if needs else text

    if isinstance(node, Num):
        return _format_number(node.value)
    if isinstance(node, Const):
        return node.name
    if isinstance(node, Name):
        return node.name + "'" * node.order
    if isinstance(node, Neg):
        return "-" + wrap(node.operand, parts[0], _prec(node.operand) < _NEG_PREC)
    if isinstance(node, BinOp):
        p = _PREC[node.op]
        if node.op == "**":
            left = wrap(node.left, parts[0], _prec(node.left) <= p)
            right = wrap(node.right, parts[1], _prec(node.right) < _NEG_PREC)
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


def _did_you_mean(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _closest_first(name: str, valid: list[str]) -> list[str]:
    ranked = sorted(enumerate(valid), key=lambda iv: (
        -difflib.SequenceMatcher(None, name, iv[1]).ratio(), iv[0]))
    return [v for _, v in ranked]


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    if len(items) > _MAX_LISTED:
        shown += f", ... ({len(items) - _MAX_LISTED} more)"
    return shown


class _Source:
    """The text being parsed and where it came from."""

    def __init__(self, text: str, file, path, line):
        self.text, self.file, self.path, self.line = text, file, path, line

    def error(self, message: str, pos: int | None) -> ExprError:
        if pos is not None:
            message += _pointer(self.text, pos)
        return ExprError(message, self.file, self.path, self.line,
                         expression=self.text, position=pos)


# ------------------------------------------------------------------ tokenizer
class _Token(NamedTuple):
    kind: str   # "num", "name", "op", "prime"
    text: str
    pos: int


_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|[-+*/()\[\],])
  | (?P<prime>')
""", re.VERBOSE)
_VALID_CHARS = "numbers, names, + - * / ** ( ) [ ] , and primes '"
_CHAR_HINTS = {
    ".": "'.' is not allowed here: there is no attribute access (numbers are written like 0.5)",
    '"': "unexpected '\"': strings are not allowed in expressions",
    "^": "unexpected character '^': powers are written with **",
    "=": "unexpected character '=': an equation is written as one expression that equals zero",
}


def _describe(tok: _Token | None) -> str:
    if tok is None:
        return "the end of the expression"
    if tok.kind == "num":
        return f"number '{tok.text}'"
    if tok.kind == "name":
        return f"name '{tok.text}'"
    if tok.kind == "prime":
        return "a prime '"
    return f"'{tok.text}'"


def _tokenize(src: _Source) -> list[_Token]:
    text, pos, tokens = src.text, 0, []
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            c = text[pos]
            if c in _CHAR_HINTS:
                msg = _CHAR_HINTS[c]
            elif not c.isascii():
                msg = (f"unexpected character '{c}' (U+{ord(c):04X}): expressions are ASCII; "
                       f"they contain {_VALID_CHARS}")
            else:
                msg = f"unexpected character '{c}': expressions contain {_VALID_CHARS}"
            raise src.error(msg, pos)
        kind, tok = m.lastgroup, m.group()
        if kind == "num":
            after = text[m.end():m.end() + 1]
            if after and (after.isalnum() or after in "._"):
                bad = re.match(r"[\w.]*", text[pos:]).group()
                raise src.error(f"malformed number '{bad}'", pos)
            if not math.isfinite(float(tok)):
                raise src.error(f"number '{tok}' is too large for a float", pos)
        elif kind == "name":
            if "__" in tok:
                raise src.error(f"name '{tok}' is not allowed: names containing '__' are "
                                f"reserved", pos)
            if keyword.iskeyword(tok):
                raise src.error(f"'{tok}' is a Python keyword and cannot appear in an "
                                f"expression", pos)
        if kind != "ws":
            tokens.append(_Token(kind, tok, pos))
        pos = m.end()
    return tokens


# --------------------------------------------------------------------- parser
_BINARY = {"+": (10, 11), "-": (10, 11), "*": (20, 21), "/": (20, 21), "**": (30, 29)}
_CLOSERS = {"(": ")", "[": "]"}


def _add_primes(node: Node, n: int, pos: int) -> Node:
    """d^n/dt^n of ``node``, pushed through subscripts onto names; a new
    derivative node is located at its first prime (``pos``)."""
    if isinstance(node, Name):
        return Name(node.name, node.order + n, pos=node.pos)
    if isinstance(node, Deriv):
        return Deriv(node.operand, node.order + n, pos=node.pos)
    if isinstance(node, Index):
        return Index(_add_primes(node.base, n, pos), node.index, pos=node.pos)
    return Deriv(node, n, pos=pos)


def _derivative_order(node: Node) -> int:
    while isinstance(node, Index):
        node = node.base
    return node.order if isinstance(node, (Name, Deriv)) else 0


class _Parser:
    def __init__(self, src: _Source, tokens: list[_Token]):
        self.src, self.tokens, self.i, self.depth = src, tokens, 0, 0

    # -- token helpers
    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "op" and tok.text == text

    def end_pos(self) -> int:
        return len(self.src.text.rstrip())

    def column(self, pos: int) -> int:
        return pos - (self.src.text.rfind("\n", 0, pos) + 1) + 1

    def error_here(self, message: str):
        tok = self.peek()
        raise self.src.error(message, tok.pos if tok else self.end_pos())

    # -- grammar
    def parse(self) -> Node:
        node = self.expr(0)
        if self.peek() is not None:
            tok = self.peek()
            if tok.kind == "op" and tok.text in ")]":
                raise self.src.error(f"unmatched '{tok.text}'", tok.pos)
            self.error_here(f"expected an operator or the end of the expression, found "
                            f"{_describe(tok)}")
        return node

    def expr(self, min_bp: int) -> Node:
        self.depth += 1
        if self.depth > MAX_NESTING:
            self.error_here(f"expression nests deeper than {MAX_NESTING} levels "
                            f"(brackets, signs and ** chains)")
        left = self.prefix()
        while True:
            tok = self.peek()
            if tok is None or tok.kind != "op" or tok.text not in _BINARY:
                break
            lbp, rbp = _BINARY[tok.text]
            if lbp < min_bp:
                break
            self.next()
            left = BinOp(tok.text, left, self.expr(rbp), pos=tok.pos)
        self.depth -= 1
        return left

    def prefix(self) -> Node:
        tok = self.peek()
        if tok is not None and tok.kind == "op" and tok.text in "+-":
            self.next()
            operand = self.expr(_NEG_PREC)
            return Neg(operand, pos=tok.pos) if tok.text == "-" else operand
        node, subscriptable = self.primary()
        return self.postfix(node, subscriptable)

    def operand_missing(self):
        tok, prev = self.peek(), self.tokens[self.i - 1] if self.i else None
        after = f" after {_describe(prev)}" if prev else ""
        if tok is None:
            self.error_here(f"expected a number, name, '(' or '['{after}, found the end of "
                            f"the expression")
        if tok.kind == "prime":
            self.error_here("unexpected prime ': a prime follows a name or a closing "
                            "bracket (strings are not allowed in expressions)")
        self.error_here(f"expected a number, name, '(' or '['{after}, found {_describe(tok)}")

    def primary(self) -> tuple[Node, bool]:
        tok = self.peek()
        if tok is None or tok.kind == "prime" or (tok.kind == "op" and tok.text not in "(["):
            self.operand_missing()
        self.next()
        if tok.kind == "num":
            return Num(float(tok.text), pos=tok.pos), False
        if tok.kind == "name":
            return self.name(tok)
        items, commas = self.sequence(tok)
        if tok.text == "[":
            return Vector(tuple(items), pos=tok.pos), False
        if commas:
            raise self.src.error("a comma separates items of a vector [a, b] or arguments "
                                 "of a function; it cannot appear in parentheses", commas[0])
        return items[0], True

    def name(self, tok: _Token) -> tuple[Node, bool]:
        name = tok.text
        if self.at("("):
            if name not in FUNCTIONS:
                valid = sorted(FUNCTIONS)
                raise self.src.error(f"unknown function '{name}'{_did_you_mean(name, valid)}; "
                                     f"valid functions: {', '.join(valid)}", tok.pos)
            args, _ = self.sequence(self.next())
            arity = FUNCTIONS[name][0]
            if len(args) != arity:
                plural = "s" if arity != 1 else ""
                raise self.src.error(f"{name} takes {arity} argument{plural}, got "
                                     f"{len(args)}", tok.pos)
            return Call(name, tuple(args), pos=tok.pos), False
        if name in FUNCTIONS:
            raise self.src.error(f"function '{name}' needs its arguments in parentheses: "
                                 f"{name}(...)", tok.pos)
        if name in CONSTANTS:
            return Const(name, pos=tok.pos), False
        return Name(name, pos=tok.pos), True

    def sequence(self, opener: _Token) -> tuple[list[Node], list[int]]:
        """Comma-separated expressions after ``opener`` up to its closer, and
        the positions of the commas."""
        closer = _CLOSERS[opener.text]
        if self.at(closer):
            raise self.src.error(f"empty brackets '{opener.text}{closer}'", opener.pos)
        items, commas = [], []
        while True:
            items.append(self.expr(0))
            if self.at(closer):
                self.next()
                return items, commas
            if self.at(","):
                commas.append(self.peek().pos)
                self.next()
                continue
            tok = self.peek()
            if tok is None:
                raise self.src.error(f"'{opener.text}' at column {self.column(opener.pos)} "
                                     f"is never closed", opener.pos)
            self.error_here(f"expected an operator, ',' or '{closer}' to close "
                            f"'{opener.text}' at column {self.column(opener.pos)}, found "
                            f"{_describe(tok)}")

    def postfix(self, node: Node, subscriptable: bool) -> Node:
        while True:
            tok = self.peek()
            if tok is not None and tok.kind == "prime":
                n = 0
                while self.peek() is not None and self.peek().kind == "prime":
                    self.next()
                    n += 1
                if isinstance(node, (Num, Const)):
                    raise self.src.error("a prime cannot follow a constant (its derivative "
                                         "is 0)", tok.pos)
                node = _add_primes(node, n, tok.pos)
                order = _derivative_order(node)
                if order > MAX_ORDER:
                    raise self.src.error(f"derivative order {order} is above the limit of "
                                         f"{MAX_ORDER}", tok.pos)
            elif self.at("["):
                if not subscriptable:
                    raise self.src.error("a subscript [i] must follow a name or a "
                                         "parenthesised expression, e.g. q[0] or (a + b)[0]",
                                         tok.pos)
                self.next()
                idx = self.peek()
                if idx is None or idx.kind != "num" or not idx.text.isdigit():
                    self.error_here("a subscript must be a non-negative integer literal, "
                                    "e.g. q[0]")
                self.next()
                if not self.at("]"):
                    if self.peek() is None:
                        raise self.src.error(f"'[' at column {self.column(tok.pos)} is never "
                                             f"closed", tok.pos)
                    self.error_here(f"expected ']' to close the subscript, found "
                                    f"{_describe(self.peek())}")
                self.next()
                node = Index(node, int(idx.text), pos=tok.pos)
            else:
                return node


# ----------------------------------------------------------------------- Expr
def _check_total_orders(src: _Source, root: Node) -> None:
    """Orders add up through nested derivatives: ``(x'')''`` is of order 4."""
    stack = [(root, 0)]
    while stack:
        node, outer = stack.pop()
        if isinstance(node, Deriv):
            outer += node.order
        if isinstance(node, Name) and node.order + outer > MAX_ORDER:
            raise src.error(f"derivative order {node.order + outer} of '{node.name}' is above "
                            f"the limit of {MAX_ORDER}", node.pos)
        stack.extend((kid, outer) for kid in node.children())


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
        return _fold(self.root, _render)

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
                text = _fold(arg, _render)
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
        return self._evaluate(self.root, scope)

    def _evaluate(self, root: Node, scope):
        return _fold(root, lambda node, vals: self._node_value(node, vals, scope),
                     lazy=(Deriv,))

    def _error(self, message: str, pos: int) -> ExprError:
        return _Source(self.text, self.file, self.path, self.line).error(message, pos)

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
                            f"{_listing(_closest_first(node.name, known))}")
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
                                f"{_shape_words(shapes[0])}, item {k} is {_shape_words(s)}")
        return xp.stack(vals)
    if isinstance(node, Index):
        shape, base = jnp.shape(vals[0]), _fold(node.base, _render)
        if not shape:
            raise ExprError(f"cannot take a subscript of {base}: it is a scalar")
        if node.index >= shape[0]:
            raise ExprError(f"subscript {node.index} is out of range: {base} is "
                            f"{_shape_words(shape)} (valid subscripts 0 to {shape[0] - 1})")
        return vals[0][node.index]
    if isinstance(node, Deriv):
        return jnp.asarray(scope.derivative(lambda: expr._evaluate(node.operand, scope),
                                            node.order), dtype=jnp.float64)
    raise TypeError(f"unknown node {node!r}")


def _integer_exponent(node: Node) -> int | None:
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
            raise ExprError(f"cannot {verb} {_shape_words(sa)} and {_shape_words(sb)}")
        return a + b if op == "+" else a - b
    if op == "*":
        if sa and sb:
            raise ExprError(f"'*' needs a scalar on one side, got {_shape_words(sa)} and "
                            f"{_shape_words(sb)}; use dot(a, b) or cross(a, b)")
        return a * b
    if op == "/":
        if sb:
            raise ExprError(f"'/' needs a scalar divisor, got {_shape_words(sb)}")
        return a / b
    if sa or sb:
        raise ExprError(f"'**' needs scalars, got {_shape_words(sa)} and {_shape_words(sb)}; "
                        f"use dot(v, v) for a squared length")
    # Integer powers become lax.integer_pow: exact for negative bases and a
    # plain product for the Taylor engine.
    n = _integer_exponent(node.right)
    return a ** n if n is not None else a ** b


# ---------------------------------------------------------------------- parse
def _location(where, file, path, line):
    return file, (path if path is not None else where), line


def parse(source, where: str | None = None, *, file: str | None = None,
          path: str | None = None, line: int | None = None) -> Expr:
    """Parse an expression.

    Args:
        source: the expression: a string, a YAML number (int/float, not
            bool), or a (nested) list of those, read as a vector literal.
        where: a location label such as ``"Equations[2]"``; used as the
            error's ``path`` when ``path`` is not given.
        file, path, line: location for :class:`InputError` messages.

    Returns:
        An :class:`Expr`.

    Raises:
        ExprError: malformed or disallowed input (see the module docstring),
            with the expression quoted and a caret at the problem.
    """
    file, path, line = _location(where, file, path, line)
    text = _as_text(source, file, path, line)
    src = _Source(text, file, path, line)
    if len(text) > MAX_LENGTH:
        raise src.error(f"expression is too long: {len(text)} characters (the limit is "
                        f"{MAX_LENGTH})", None)
    tokens = _tokenize(src)
    if not tokens:
        raise src.error("empty expression: expected a number, a name or a formula", None)
    root = _Parser(src, tokens).parse()
    _check_total_orders(src, root)
    return Expr(text, root, file, path, line)


def _as_text(source, file, path, line) -> str:
    """The text of ``source``; lists become vector literals.  Each list item
    is parsed on its own first, so an item like ``"1, 2"`` cannot change how
    the joined text reads, and its errors name the item's own path."""
    if isinstance(source, str):
        return source
    if isinstance(source, (bool, np.bool_)) or source is None:
        raise ExprError(f"expected an expression, a number or a list, got "
                        f"{'nothing' if source is None else repr(source)}", file, path, line)
    if isinstance(source, (int, float, np.integer, np.floating)):
        try:
            number = float(source)
        except OverflowError:  # an int beyond float range
            number = math.inf
        if not math.isfinite(number):
            raise ExprError(f"expected a finite number, got {source!r}", file, path, line)
        return _format_number(number)
    if isinstance(source, (list, tuple)):
        if not source:
            raise ExprError("empty list: expected numbers or expressions", file, path, line)
        parts = []
        for k, item in enumerate(source):
            sub = f"{path}[{k}]" if path else f"[{k}]"
            parts.append(str(parse(item, file=file, path=sub, line=line).text))
        return "[" + ", ".join(parts) + "]"
    raise ExprError(f"expected an expression, a number or a list, got "
                    f"{type(source).__name__}", file, path, line)


def check_name(name, what: str = "name", *, file: str | None = None,
               path: str | None = None, line: int | None = None) -> str:
    """Check a name a model declares (variable, parameter, Let name).

    Args:
        name: the declared name.
        what: what it names, for the message (``"variable"``...).
        file, path, line: location for the error.

    Returns:
        ``name``, when expressions can refer to it.

    Raises:
        InputError: not an ASCII identifier, contains ``__``, is a Python
            keyword, or is reserved (:data:`RESERVED_NAMES`).
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        problem = "is not a name (letters, digits and _, not starting with a digit)"
    elif "__" in name:
        problem = "contains '__', which is reserved"
    elif keyword.iskeyword(name):
        problem = "is a Python keyword"
    elif name in RESERVED_NAMES:
        problem = ("is reserved (reserved names: "
                   f"{', '.join(sorted(RESERVED_NAMES))})")
    else:
        return name
    raise InputError(f"{what} {name!r} {problem}", file=file, path=path, line=line)


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
    file, path, line = _location(where, file, path, line)
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

    result = _fold(expr.root, combine, lazy=(Deriv,))
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
    n = _integer_exponent(node.right)
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
