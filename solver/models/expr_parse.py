"""Reading expression text: the tokenizer, the Pratt parser, ``parse`` and ``check_name``.

The grammar is given in :mod:`solver.models.expr`; the tree it builds is made
of the node classes of :mod:`solver.models.expr_nodes`.
"""

from __future__ import annotations

import keyword
import math
import re
from typing import NamedTuple

import numpy as np

from solver.errors import InputError, did_you_mean
from solver.models.expr_eval import Expr
from solver.models.expr_nodes import (BinOp, CONSTANTS, Call, Const, Deriv, ExprError, FUNCTIONS, Index,
                                      MAX_LENGTH, MAX_NESTING, MAX_ORDER, Name, Neg, Node, Num,
                                      RESERVED_NAMES, Vector, NEG_PREC, Source,
                                      format_number)

__all__ = ["check_name", "parse"]


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


def _tokenize(src: Source) -> list[_Token]:
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
    def __init__(self, src: Source, tokens: list[_Token]):
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
            operand = self.expr(NEG_PREC)
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
                guess = did_you_mean(name, valid)
                raise self.src.error(f"unknown function '{name}'{f' (did you mean {guess!r}?)' if guess else ''}; "
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


def _check_total_orders(src: Source, root: Node) -> None:
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


# ---------------------------------------------------------------------- parse
def error_location(where, file, path, line):
    """``(file, path, line)`` of an error: ``path`` if given, else the label ``where``."""
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
    file, path, line = error_location(where, file, path, line)
    text = _as_text(source, file, path, line)
    src = Source(text, file, path, line)
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
        return format_number(number)
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
