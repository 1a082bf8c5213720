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

Layout
------
This module is the language's front door; its names live in
:mod:`solver.models.expr_nodes` (limits, errors, functions, the tree),
:mod:`solver.models.expr_parse` (tokenizer, parser, :func:`parse`,
:func:`check_name`), :mod:`solver.models.expr_eval` (:class:`Expr`,
evaluation in a scope) and :mod:`solver.models.expr_numeric` (constants,
many design points at once).
"""

from __future__ import annotations

from solver.models.expr_eval import Expr
from solver.models.expr_nodes import (BinOp, Call, Const, Deriv, ExprError, FUNCTIONS, Index, MAX_LENGTH,
                                      MAX_NESTING, MAX_ORDER, Name, Neg, Node, Num, RESERVED_NAMES,
                                      SWITCHING, Scope, Vector)
from solver.models.expr_numeric import (ConstantScope, NotElementwise, all_finite, evaluate_constant,
                                        evaluate_constant_table, evaluate_table)
from solver.models.expr_parse import check_name, parse

__all__ = [
    "parse", "Expr", "ExprError", "Scope", "ConstantScope", "evaluate_constant", "all_finite",
    "NotElementwise", "evaluate_table", "evaluate_constant_table",
    "check_name", "FUNCTIONS", "SWITCHING", "RESERVED_NAMES", "MAX_LENGTH", "MAX_NESTING",
    "MAX_ORDER", "Node", "Num", "Const", "Name", "Neg", "BinOp", "Call",
    "Vector", "Index", "Deriv",
]


# Kept importable from this module, their old home.
from solver.models.expr_nodes import CONSTANTS  # noqa: F401
