"""Specification of the safe expression language (solver/models/expr.py).

References are Python's own arithmetic and precedence, the ``math`` and
``numpy`` functions, and closed-form time derivatives.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jax
import jax.numpy as jnp

from solver.dae import problem as dae
from solver.errors import InputError
from solver.models.expr import (
    FUNCTIONS, MAX_LENGTH, MAX_NESTING, MAX_ORDER, RESERVED_NAMES, BinOp, Call,
    ConstantScope, Const, Deriv, Expr, ExprError, Index, Name, Neg, Num, Vector,
    check_name, evaluate_constant, parse,
)


def value(text, **names):
    """Evaluate ``text`` with constant names, as a numpy value."""
    return np.asarray(parse(text).evaluate(ConstantScope(names)))


# ------------------------------------------------------------------ numbers
@pytest.mark.parametrize("text, expected", [
    ("1", 1.0), (".5", 0.5), ("2.", 2.0), ("1e-12", 1e-12), ("2.5E3", 2500.0),
    ("1.5e+2", 150.0), ("007", 7.0),
])
def test_number_literals_are_float64(text, expected):
    got = parse(text).evaluate(ConstantScope({}))
    assert got.dtype == jnp.float64
    assert float(got) == expected


# ------------------------------------------------- precedence and associativity
# Expected values are Python's evaluation of the same arithmetic: the language
# follows Python's precedence (unary minus looser than **, ** right-assoc).
@pytest.mark.parametrize("text, expected", [
    ("-2**2", -2**2),
    ("2**3**2", 2**3**2),
    ("2**-1", 2**-1),
    ("-2**-2", -2**-2),
    ("(-2)**2", (-2)**2),
    ("10-4-3", 10 - 4 - 3),
    ("64/4/2", 64 / 4 / 2),
    ("2*3**2", 2 * 3**2),
    ("1+2*3", 1 + 2 * 3),
    ("(1+2)*3", (1 + 2) * 3),
    ("-3*-2", -3 * -2),
    ("2**-1*3", 2**-1 * 3),
    ("--2", -(-2)),
    ("+-+2", +-+2),
    ("8/2*4", 8 / 2 * 4),
    ("2 - -3 + 4", 2 - -3 + 4),
    ("1 - 2**2**-1", 1 - 2**2**-1),
])
def test_precedence_follows_python(text, expected):
    assert value(text) == pytest.approx(expected, rel=1e-15)


def test_minus_is_left_associative_in_the_tree():
    a, b, c = Name("a"), Name("b"), Name("c")
    assert parse("a-b-c").root == BinOp("-", BinOp("-", a, b), c)
    assert value("a-b-c", a=5.0, b=3.0, c=1.0) == 1.0


def test_power_is_right_associative_and_binds_tighter_than_unary_minus():
    assert parse("a**b**c").root == BinOp("**", Name("a"), BinOp("**", Name("b"), Name("c")))
    assert parse("-a**b").root == Neg(BinOp("**", Name("a"), Name("b")))


def test_negative_base_integer_power_is_exact():
    # Integer exponents go through integer_pow, defined for negative bases.
    assert value("x**3", x=-2.0) == -8.0
    assert value("x**-2", x=-2.0) == 0.25


def test_pi_is_the_constant_and_t_is_a_name():
    assert value("pi") == math.pi
    assert parse("pi").free_names() == set()
    assert parse("t").free_names() == {("t", 0)}


# ---------------------------------------------------------------- functions
UNARY = {
    "sin": (math.sin, [-2.0, 0.3, 4.0]), "cos": (math.cos, [-2.0, 0.3, 4.0]),
    "tan": (math.tan, [-1.2, 0.3, 1.0]), "asin": (math.asin, [-0.9, 0.0, 0.7]),
    "acos": (math.acos, [-0.9, 0.0, 0.7]), "atan": (math.atan, [-5.0, 0.3, 20.0]),
    "sinh": (math.sinh, [-2.0, 0.3, 3.0]), "cosh": (math.cosh, [-2.0, 0.3, 3.0]),
    "tanh": (math.tanh, [-2.0, 0.3, 3.0]), "exp": (math.exp, [-2.0, 0.0, 3.5]),
    "log": (math.log, [1e-3, 1.0, 50.0]), "sqrt": (math.sqrt, [0.0, 0.25, 7.0]),
    "abs": (abs, [-3.5, 0.0, 2.0]),
}


def test_every_function_is_tested():
    assert set(FUNCTIONS) == set(UNARY) | {"atan2", "dot", "cross", "norm", "min", "max", "where", "sign", "step"}


@pytest.mark.parametrize("func", sorted(UNARY))
def test_unary_function_matches_math(func):
    reference, points = UNARY[func]
    for x in points:
        assert value(f"{func}(x)", x=x) == pytest.approx(reference(x), rel=1e-14, abs=1e-300)


@pytest.mark.parametrize("y, x", [(1.0, 2.0), (1.0, -2.0), (-1.0, -2.0), (-1.0, 2.0), (0.0, -1.0)])
def test_atan2_takes_y_then_x_in_every_quadrant(y, x):
    assert value("atan2(y, x)", y=y, x=x) == pytest.approx(math.atan2(y, x), rel=1e-15)


def test_functions_act_elementwise_on_vectors():
    np.testing.assert_allclose(value("sin([a, b])", a=0.1, b=0.2), np.sin([0.1, 0.2]), rtol=1e-15)


class _TracedScope:
    """A scope that is not a ConstantScope: expressions evaluate in jax, as in a residual."""

    def __init__(self, values):
        self.values = values

    def lookup(self, name, order):
        return jnp.asarray(self.values[name])

    def derivative(self, thunk, order):
        raise AssertionError("no derivatives here")


@pytest.mark.parametrize("text", [
    "sin(a)*cos(b) + atan2(a, b) - tan(b)", "asin(a/4) + acos(b/4) + atan(a) + sinh(b) + cosh(a)",
    "exp(-a)*log(b) + abs(a - b) + tanh(a) + sqrt(b)", "dot(u, v) + norm(cross(u, v))", "cross(u, v)",
])
def test_constants_are_computed_in_numpy_and_equal_the_traced_values(text, monkeypatch):
    # Initial values are computed once per design point of a sweep: in numpy,
    # not by a jax dispatch per operation, with the residual's values.
    names = dict(a=0.7, b=1.3, u=np.array([1.0, -2.0, 0.5]), v=np.array([0.3, 4.0, -1.0]))
    traced = np.asarray(parse(text).evaluate(_TracedScope(names)))

    def no_jax(*args, **kwargs):
        raise AssertionError("a constant was computed by jax")

    for name in ("sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh",
                 "exp", "log", "sqrt", "abs", "dot", "cross", "sum"):
        monkeypatch.setattr(jnp, name, no_jax)
    constant = parse(text).evaluate(ConstantScope(names))
    assert not isinstance(constant, jax.Array)
    np.testing.assert_allclose(constant, traced, rtol=1e-14)


def test_a_constant_outside_a_functions_domain_is_nan_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(value("sqrt(a)", a=-1.0)) and np.isnan(value("log(a) + asin(a*2)", a=-1.0))


# ------------------------------------------------------------------ vectors
def test_vector_literal_and_arithmetic_match_numpy():
    u, v = np.array([1.0, -2.0, 0.5]), np.array([0.3, 4.0, -1.0])
    np.testing.assert_allclose(value("2*u - v/4 + 1", u=u, v=v), 2 * u - v / 4 + 1)
    np.testing.assert_allclose(value("[a, 2*a, a**2]", a=3.0), [3.0, 6.0, 9.0])


def test_dot_cross_norm_match_numpy():
    u, v = np.array([1.0, -2.0, 0.5]), np.array([0.3, 4.0, -1.0])
    assert value("dot(u, v)", u=u, v=v) == pytest.approx(np.dot(u, v), rel=1e-15)
    np.testing.assert_allclose(value("cross(u, v)", u=u, v=v), np.cross(u, v), rtol=1e-15)
    assert value("norm(u)", u=u) == pytest.approx(np.linalg.norm(u), rel=1e-15)


def test_cross_of_plane_vectors_is_the_z_component():
    u, v = np.array([1.0, -2.0]), np.array([0.3, 4.0])
    expected = np.cross(np.append(u, 0.0), np.append(v, 0.0))[2]
    assert value("cross(u, v)", u=u, v=v) == pytest.approx(expected, rel=1e-15)


def test_nested_literals_are_matrices_and_dot_multiplies_them():
    m, v = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([0.5, -1.0])
    np.testing.assert_array_equal(value("[[1, 2], [3, 4]]"), m)
    np.testing.assert_allclose(value("dot([[1, 2], [3, 4]], v)", v=v), m @ v)
    np.testing.assert_allclose(value("dot(v, [[1, 2], [3, 4]])", v=v), v @ m)


# --------------------------------------------------------------- subscripts
def test_subscripts_are_zero_based():
    q = np.array([10.0, 11.0, 12.0])
    assert value("q[0] + q[2]", q=q) == 22.0
    assert value("A[1][0]", A=np.array([[1.0, 2.0], [3.0, 4.0]])) == 3.0
    assert value("(q*2)[1]", q=q) == 22.0
    assert value("([q[2], q[1]])[0]", q=q) == 12.0


def test_subscript_then_prime_is_the_derivative_of_the_component():
    assert parse("q[2]'").root == Index(Name("q", 1), 2)
    assert parse("q'[2]").root == parse("q[2]'").root
    assert parse("A[0][1]''").free_names() == {("A", 2)}


# ------------------------------------------------------------------- primes
@pytest.mark.parametrize("text, names, expr_derivative", [
    ("x", {("x", 0)}, False),
    ("x'", {("x", 1)}, False),
    ("x''", {("x", 2)}, False),
    ("x'' + lam*x", {("x", 2), ("lam", 0), ("x", 0)}, False),
    ("(x)'", {("x", 1)}, False),
    ("(x')'", {("x", 2)}, False),
    ("q[1]' * t", {("q", 1), ("t", 0)}, False),
    ("(x*y)'", {("x", 0), ("y", 0)}, True),
    ("((x'*sin(t))')**2", {("x", 1), ("t", 0)}, True),
    ("sin(x)'", {("x", 0)}, True),
    ("[x, y']'", {("x", 0), ("y", 1)}, True),
    ("pi*r**2", {("r", 0)}, False),
])
def test_free_names_report_orders_as_written(text, names, expr_derivative):
    e = parse(text)
    assert e.free_names() == names
    assert e.has_expr_derivative is expr_derivative


def test_primes_on_a_derivative_add_up():
    assert parse("((x*y)')''").root == Deriv(BinOp("*", Name("x"), Name("y")), 3)
    assert parse("(a+b)'[0]").root == Index(Deriv(BinOp("+", Name("a"), Name("b")), 1), 0)


class TimeScope:
    """x = sin(t), y = exp(t/2), as functions of a time that ``derivative``
    differentiates with nested jvps."""

    def __init__(self, t):
        self.t = t

    def names(self):
        return ["x", "y", "t"]

    def lookup(self, name, order):
        t = self.t
        if name == "x":
            return jnp.sin(t + order * jnp.pi / 2)
        if name == "y":
            return 0.5 ** order * jnp.exp(t / 2)
        if name == "t":
            return [t, 1.0][order] if order < 2 else 0.0
        raise KeyError(name)

    def derivative(self, thunk, order):
        def at(time):
            saved, self.t = self.t, time
            try:
                return thunk()
            finally:
                self.t = saved

        f = at
        for _ in range(order):
            f = (lambda g: lambda time: jax.jvp(g, (time,), (jnp.ones_like(time),))[1])(f)
        return f(self.t)


@pytest.mark.parametrize("text, exact", [
    ("(x*t)'", lambda t: math.cos(t) * t + math.sin(t)),
    ("(x**2)''", lambda t: 2 * math.cos(2 * t)),
    ("((x*y)')'", lambda t: math.exp(t / 2) * (math.cos(t) - 0.75 * math.sin(t))),
    ("sin(x)'", lambda t: math.cos(math.sin(t)) * math.cos(t)),
    ("(x' - y)'", lambda t: -math.sin(t) - 0.5 * math.exp(t / 2)),
    ("(t**3)'''", lambda t: 6.0),
    ("((x'*sin(t))')**2/(1 + y'**2) + t**2*cos(y)",  # the talk's example DAE
     lambda t: math.cos(2 * t)**2 / (1 + 0.25 * math.exp(t))
     + t**2 * math.cos(math.exp(t / 2))),
])
def test_expression_derivatives_are_delegated_to_the_scope(text, exact):
    for t in (0.0, 0.7, 2.3):
        got = parse(text).evaluate(TimeScope(jnp.float64(t)))
        assert float(got) == pytest.approx(exact(t), rel=1e-12, abs=1e-13)


def test_vector_derivative_and_its_component():
    got = parse("([x, t**2]')[1]").evaluate(TimeScope(jnp.float64(1.5)))
    assert float(got) == pytest.approx(3.0, rel=1e-15)


def test_derivatives_become_ddt_for_the_taylor_engine():
    class DdtScope:
        def lookup(self, name, order):
            return {"x": [1.0, 2.0], "y": [3.0]}[name][order]

        def derivative(self, thunk, order):
            r = thunk()
            for _ in range(order):
                r = dae.ddt(r)
            return r

    jaxpr = jax.make_jaxpr(lambda: parse("(x*y)'' + x'").evaluate(DdtScope()))()
    assert [e.primitive.name for e in jaxpr.eqns].count("ddt") == 2


# ---------------------------------------------------------------- tracing
class ParamScope:
    def __init__(self, **values):
        self.values = values

    def lookup(self, name, order):
        return self.values[name]

    def derivative(self, thunk, order):
        raise AssertionError("not used")


def test_evaluation_traces_under_jit_grad_and_vmap():
    e = parse("L**2*sin(th) + norm([L, th])")

    def f(L, th):
        return e.evaluate(ParamScope(L=L, th=th))

    L, th = 1.3, 0.4
    expected = L**2 * math.sin(th) + math.hypot(L, th)
    assert float(jax.jit(f)(L, th)) == pytest.approx(expected, rel=1e-14)
    dth = jax.grad(f, argnums=1)(L, th)
    assert float(dth) == pytest.approx(L**2 * math.cos(th) + th / math.hypot(L, th), rel=1e-14)
    ths = jnp.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(jax.vmap(lambda a: f(L, a))(ths),
                               L**2 * np.sin(ths) + np.hypot(L, ths), rtol=1e-14)


def test_a_long_sum_evaluates_without_recursion():
    n = (MAX_LENGTH + 1) // 2
    assert value("+".join(["1"] * n)) == n


# ---------------------------------------------------------------- printing
def test_canonical_text_parses_back_to_the_same_tree():
    for text in ["-2**2", "(-2)**2", "a - (b - c)", "a*-b", "2**-x**y", "(a**b)**c",
                 "q[2]'", "(a + b)[0]", "([x, y]')[0]", "sin(x)'", "(x*y)''", "-(a*b)",
                 "1e-12*x", "(dot([[1, 2], [3, 4]], v))[1]", "(2)[0]"]:
        e = parse(text)
        assert parse(str(e)) == e, text


_leaf = st.one_of(
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False).map(Num),
    st.sampled_from(["a", "b", "q"]).map(Name),
    st.tuples(st.sampled_from(["x", "y"]), st.integers(1, 3)).map(lambda p: Name(*p)),
    st.just(Const("pi")),
)


def _grow(children):
    return st.one_of(
        children.map(Neg),
        st.tuples(st.sampled_from(["+", "-", "*", "/", "**"]), children, children)
          .map(lambda p: BinOp(*p)),
        children.map(lambda c: Call("sin", (c,))),
        st.tuples(children, children).map(lambda p: Call("atan2", p)),
        st.lists(children, min_size=1, max_size=3).map(lambda xs: Vector(tuple(xs))),
        st.tuples(children, st.integers(0, 5)).map(lambda p: Index(*p)),
        st.tuples(children.filter(lambda c: isinstance(c, (Neg, BinOp, Call, Vector))),
                  st.integers(1, 3)).map(lambda p: Deriv(*p)),
    )


@settings(max_examples=200, deadline=None)
@given(st.recursive(_leaf, _grow, max_leaves=12))
def test_printing_round_trips_random_trees(tree):
    # Index pushes primes inward when parsed; build trees in that normal form.
    text = str(Expr("", tree))
    assert parse(text).root == _normal(tree), text


def _normal(node):
    """The tree the parser builds: derivatives of subscripts and names folded."""
    if isinstance(node, Neg):
        return Neg(_normal(node.operand))
    if isinstance(node, BinOp):
        return BinOp(node.op, _normal(node.left), _normal(node.right))
    if isinstance(node, Call):
        return Call(node.func, tuple(map(_normal, node.args)))
    if isinstance(node, Vector):
        return Vector(tuple(map(_normal, node.items)))
    if isinstance(node, Index):
        return Index(_normal(node.base), node.index)
    if isinstance(node, Deriv):
        inner = _normal(node.operand)
        return Deriv(inner.operand, inner.order + node.order) if isinstance(inner, Deriv) \
            else Deriv(inner, node.order)
    return node


# -------------------------------------------------------------------- errors
def message(text, **kw):
    with pytest.raises(ExprError) as info:
        parse(text, **kw)
    return str(info.value)


VALID = "numbers, names, + - * / ** ( ) [ ] , and primes '"
FUNCS = ("abs, acos, asin, atan, atan2, cos, cosh, cross, dot, exp, log, max, min, norm, sign, sin, sinh, "
         "sqrt, step, tan, tanh, where")

MALFORMED = [
    ("__import__('os')",
     "name '__import__' is not allowed: names containing '__' are reserved\n"
     "  __import__('os')\n  ^"),
    ("().__class__",
     "'.' is not allowed here: there is no attribute access (numbers are written like 0.5)\n"
     "  ().__class__\n    ^"),
    ("x.y",
     "'.' is not allowed here: there is no attribute access (numbers are written like 0.5)\n"
     "  x.y\n   ^"),
    ("lambda: 1",
     "'lambda' is a Python keyword and cannot appear in an expression\n  lambda: 1\n  ^"),
    ('"abc"', "unexpected '\"': strings are not allowed in expressions\n  \"abc\"\n  ^"),
    ("'abc'",
     "unexpected prime ': a prime follows a name or a closing bracket (strings are not "
     "allowed in expressions)\n  'abc'\n  ^"),
    ("open('f')", f"unknown function 'open'; valid functions: {FUNCS}\n  open('f')\n  ^"),
    ("foo(1)", f"unknown function 'foo'; valid functions: {FUNCS}\n  foo(1)\n  ^"),
    ("sine(x)",
     f"unknown function 'sine' (did you mean 'sin'?); valid functions: {FUNCS}\n"
     "  sine(x)\n  ^"),
    ("1 +",
     "expected a number, name, '(' or '[' after '+', found the end of the expression\n"
     "  1 +\n     ^"),
    ("(1", "'(' at column 1 is never closed\n  (1\n  ^"),
    ("1)", "unmatched ')'\n  1)\n   ^"),
    ("[1, 2)", "expected an operator, ',' or ']' to close '[' at column 1, found ')'\n"
               "  [1, 2)\n       ^"),
    ("sin(1, 2)", "sin takes 1 argument, got 2\n  sin(1, 2)\n  ^"),
    ("atan2(y)", "atan2 takes 2 arguments, got 1\n  atan2(y)\n  ^"),
    ("q[1.5]", "a subscript must be a non-negative integer literal, e.g. q[0]\n"
               "  q[1.5]\n    ^"),
    ("q[-1]", "a subscript must be a non-negative integer literal, e.g. q[0]\n"
              "  q[-1]\n    ^"),
    ("q[i]", "a subscript must be a non-negative integer literal, e.g. q[0]\n"
             "  q[i]\n    ^"),
    ("sin(x)[0]", "a subscript [i] must follow a name or a parenthesised expression, e.g. "
                  "q[0] or (a + b)[0]\n  sin(x)[0]\n        ^"),
    ("a;b", f"unexpected character ';': expressions contain {VALID}\n  a;b\n   ^"),
    ("x^2", "unexpected character '^': powers are written with **\n  x^2\n   ^"),
    ("x = 1", "unexpected character '=': an equation is written as one expression that "
              "equals zero\n  x = 1\n    ^"),
    ("x \u2212 1", f"unexpected character '\u2212' (U+2212): expressions are ASCII; they "
                   f"contain {VALID}\n  x \u2212 1\n    ^"),
    ("x" + "'" * (MAX_ORDER + 1),
     f"derivative order {MAX_ORDER + 1} is above the limit of {MAX_ORDER}\n"
     f"  x{chr(39) * (MAX_ORDER + 1)}\n   ^"),
    ("(x''''''')''''''",
     "derivative order 13 is above the limit of 12\n  (x''''''')''''''\n            ^"),
    ("(x''''''' + y)''''''",
     "derivative order 13 of 'x' is above the limit of 12\n  (x''''''' + y)''''''\n   ^"),
    ("x" * 20000, "expression is too long: 20000 characters (the limit is 10000)"),
    ("(" * 200 + "1" + ")" * 200,
     f"expression nests deeper than {MAX_NESTING} levels (brackets, signs and ** chains)\n"
     "  ..." + "(" * 76 + "...\n" + " " * 43 + "^"),
    ("", "empty expression: expected a number, a name or a formula"),
    ("   ", "empty expression: expected a number, a name or a formula"),
    ("()", "empty brackets '()'\n  ()\n  ^"),
    ("[]", "empty brackets '[]'\n  []\n  ^"),
    ("1 2", "expected an operator or the end of the expression, found number '2'\n"
            "  1 2\n    ^"),
    ("(a, b)", "a comma separates items of a vector [a, b] or arguments of a function; it "
               "cannot appear in parentheses\n  (a, b)\n    ^"),
    ("sin + 1", "function 'sin' needs its arguments in parentheses: sin(...)\n"
                "  sin + 1\n  ^"),
    ("2x", "malformed number '2x'\n  2x\n  ^"),
    ("1.2.3", "malformed number '1.2.3'\n  1.2.3\n  ^"),
    ("1e999", "number '1e999' is too large for a float\n  1e999\n  ^"),
    ("pi'", "a prime cannot follow a constant (its derivative is 0)\n  pi'\n    ^"),
    ("3'", "a prime cannot follow a constant (its derivative is 0)\n  3'\n   ^"),
    ("*2", "expected a number, name, '(' or '[', found '*'\n  *2\n  ^"),
    ("a ** * b", "expected a number, name, '(' or '[' after '**', found '*'\n"
                 "  a ** * b\n       ^"),
    ("import os", "'import' is a Python keyword and cannot appear in an expression\n"
                  "  import os\n  ^"),
    ("x if y else z", "'if' is a Python keyword and cannot appear in an expression\n"
                      "  x if y else z\n    ^"),
]


@pytest.mark.parametrize("text, expected", MALFORMED, ids=[t[:20] for t, _ in MALFORMED])
def test_malformed_or_malicious_input_is_refused_with_a_caret(text, expected):
    assert message(text) == expected


def test_error_carries_its_location():
    with pytest.raises(InputError) as info:
        parse("x +* y", "Equations[2]", file="pendulum.yaml", line=14)
    err = info.value
    assert (err.file, err.path, err.line) == ("pendulum.yaml", "Equations[2]", 14)
    assert (err.expression, err.position) == ("x +* y", 3)
    assert str(err) == ("pendulum.yaml:14: Equations[2]: expected a number, name, '(' or '[' "
                        "after '+', found '*'\n  x +* y\n     ^")


def test_caret_points_into_the_right_line_of_a_multiline_expression():
    assert message("x +\n  y)") == "unmatched ')'\n    y)\n     ^"


def test_deep_unary_chain_is_refused_not_a_recursion_error():
    assert message("-" * 5000 + "1").startswith(
        f"expression nests deeper than {MAX_NESTING} levels")


def test_nesting_up_to_the_limit_is_accepted():
    assert value("(" * (MAX_NESTING - 1) + "2" + ")" * (MAX_NESTING - 1)) == 2.0


def test_derivative_limit_agrees_with_the_structural_analysis():
    assert MAX_ORDER == dae.MAX_DERIVATIVE_ORDER
    assert parse("x" + "'" * MAX_ORDER).free_names() == {("x", MAX_ORDER)}


# ----------------------------------------------------------- evaluation errors
def eval_message(text, names):
    with pytest.raises(ExprError) as info:
        parse(text, "Equations[0]").evaluate(ConstantScope(names))
    return str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("x + lamda", "Equations[0]: unknown name 'lamda'; valid names (closest first): lam, x, "
                  "y, L, g\n  x + lamda\n      ^"),
    ("q[3]", "Equations[0]: subscript 3 is out of range: q is a 3-vector (valid subscripts 0 "
             "to 2)\n  q[3]\n   ^"),
    ("x[0]", "Equations[0]: cannot take a subscript of x: it is a scalar\n  x[0]\n   ^"),
    ("q * q", "Equations[0]: '*' needs a scalar on one side, got a 3-vector and a 3-vector; "
              "use dot(a, b) or cross(a, b)\n  q * q\n    ^"),
    ("q + [1, 2]", "Equations[0]: cannot add a 3-vector and a 2-vector\n  q + [1, 2]\n    ^"),
    ("x / q", "Equations[0]: '/' needs a scalar divisor, got a 3-vector\n  x / q\n    ^"),
    ("q**2", "Equations[0]: '**' needs scalars, got a 3-vector and a scalar; use dot(v, v) "
             "for a squared length\n  q**2\n   ^"),
    ("[q, x]", "Equations[0]: vector items must have equal shapes: item 0 is a 3-vector, "
               "item 1 is a scalar\n  [q, x]\n  ^"),
    ("cross(q, [1, 2])", "Equations[0]: cross needs two 3-vectors or two 2-vectors, got a "
                         "3-vector and a 2-vector\n  cross(q, [1, 2])\n  ^"),
    ("dot(q, x)", "Equations[0]: dot needs two vectors of equal length (or matching matrix "
                  "and vector), got a 3-vector and a scalar\n  dot(q, x)\n  ^"),
    ("norm(x)", "Equations[0]: norm needs a vector, got a scalar\n  norm(x)\n  ^"),
    ("x' + 1", "Equations[0]: x' is a derivative, but 'x' is a constant here\n"
               "  x' + 1\n  ^"),
    ("(x + y)'", "Equations[0]: derivatives are not available here: the values are "
                 "constants\n  (x + y)'\n         ^"),
])
def test_evaluation_errors_point_at_the_node(text, expected):
    names = {"x": 1.0, "y": 2.0, "lam": 3.0, "L": 1.0, "g": 9.81, "q": [1.0, 2.0, 3.0]}
    names = {k: names[k] for k in (["x", "y", "lam", "L", "g"] + (["q"] if "q" in text else []))}
    assert eval_message(text, names) == expected


def test_unknown_name_lists_many_names_briefly():
    names = {f"p{k}": 1.0 for k in range(40)}
    msg = eval_message("p4_", names)
    listed = msg.split("closest first): ")[1].split("\n")[0]
    assert listed.endswith(", ... (10 more)") and len(listed.split(", ")) == 31
    assert listed.startswith("p4, ")


def test_a_scope_bug_is_not_reported_as_an_unknown_name():
    class Buggy(ConstantScope):
        def lookup(self, name, order):
            raise KeyError("internal")

    with pytest.raises(KeyError):
        parse("a").evaluate(Buggy({"a": 1.0}))


# ------------------------------------------------------- evaluate_constant
def test_physical_params_chain_like_the_talk():
    params = {}
    for key, raw in {"L": 1, "M": 1, "k": 500, "mu": ".5", "I": "M*L**2/12"}.items():
        params[key] = evaluate_constant(raw, params, f"PhysicalParams.{key}")
    assert params == {"L": 1.0, "M": 1.0, "k": 500.0, "mu": 0.5, "I": 1 / 12}
    dyna = evaluate_constant([["L/2", 0], "M", "M*L**2/12"], {"L": 2.0, "M": 3.0})
    assert isinstance(dyna, list) and len(dyna) == 3
    np.testing.assert_array_equal(dyna[0], [1.0, 0.0])
    assert dyna[1:] == [3.0, 1.0]


def test_equal_shaped_lists_become_arrays():
    got = evaluate_constant([[1, "a"], ["2*a", "sqrt(4)"]], {"a": 3})
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_array_equal(got, [[1.0, 3.0], [6.0, 2.0]])
    np.testing.assert_array_equal(evaluate_constant("[a, -a]", {"a": 3}), [3.0, -3.0])
    assert isinstance(evaluate_constant(7, {}), float)


def test_an_array_parameter_can_be_used_by_later_ones():
    geom = evaluate_constant([["L", 0], [0, "L"]], {"L": 2.0})
    assert evaluate_constant("G[1][1] + norm(G[0])", {"G": geom}) == 4.0


@pytest.mark.parametrize("raw, expected", [
    (True, "PhysicalParams.k: expected an expression, a number or a list, got True"),
    (None, "PhysicalParams.k: expected an expression, a number or a list, got nothing"),
    ([], "PhysicalParams.k: empty list: expected numbers or expressions"),
    ({"a": 1}, "PhysicalParams.k: expected an expression, a number or a list, got dict"),
    ("log(0)", "PhysicalParams.k: 'log(0)' evaluates to a value that is not finite: -inf"),
    ([1, "L'"], "PhysicalParams.k[1]: L' is a derivative, but 'L' is a constant here\n"
                "  L'\n  ^"),
    ([1, "1, 2"], "PhysicalParams.k[1]: expected an operator or the end of the expression, "
                  "found ','\n  1, 2\n   ^"),
    ("Dyna + 1", "PhysicalParams.k: 'Dyna' is not a number or a regular array of numbers\n"
                 "  Dyna + 1\n  ^"),
    ("2*t", "PhysicalParams.k: unknown name 't'; valid names (closest first): L, Dyna\n"
            "  2*t\n    ^"),
])
def test_bad_constants_are_refused(raw, expected):
    names = {"L": 1.0, "Dyna": [[0.5, 0.0], 1.0]}
    with pytest.raises(InputError) as info:
        evaluate_constant(raw, names, "PhysicalParams.k")
    assert str(info.value) == expected


def test_yaml_lists_parse_as_vector_expressions():
    e = parse(["x", 0, "-y'"], path="Let.v")
    assert e.root == Vector((Name("x"), Num(0.0), Neg(Name("y", 1))))
    with pytest.raises(ExprError) as info:
        parse(["x", "a.b"], path="Let.v")
    assert str(info.value).startswith("Let.v[1]: '.' is not allowed here")


# ------------------------------------------------------------------- names
@pytest.mark.parametrize("name, problem", [
    ("sin", "is reserved (reserved names: " + ", ".join(sorted(RESERVED_NAMES)) + ")"),
    ("t", "is reserved (reserved names: " + ", ".join(sorted(RESERVED_NAMES)) + ")"),
    ("__x", "contains '__', which is reserved"),
    ("lambda", "is a Python keyword"),
    ("2a", "is not a name (letters, digits and _, not starting with a digit)"),
    ("a-b", "is not a name (letters, digits and _, not starting with a digit)"),
])
def test_check_name_refuses_unusable_declarations(name, problem):
    with pytest.raises(InputError) as info:
        check_name(name, "variable", path="Variables")
    assert str(info.value) == f"Variables: variable {name!r} {problem}"


def test_check_name_accepts_ordinary_names():
    assert [check_name(n) for n in ["x", "lam", "C1", "theta_2", "L"]] == \
        ["x", "lam", "C1", "theta_2", "L"]
