"""Taylor engines, primitive by primitive, against independent Taylor coefficients.

Each case is a scalar DAE ``y = F(t)`` (or ``y = F(a(t), b(t))``) whose
solution's Taylor coefficients at t0 are F^(k)(t0)/k!; the engine computes
them through the whole staged machinery, and the references below give
them independently.  All three engines are checked: ``unrolled`` (straight-line code
per order, solver/taylor/tape.py), ``compact`` (a scalar tape evaluated in groups,
solver/taylor/compact.py) and ``looped`` (a lax loop over the orders,
solver/taylor/program.py).

References: JAX's own Taylor mode (``jax.experimental.jet``, written and
tested by the JAX authors, independent of ours) where it has a rule for every
operation of a case; mpmath's ``taylor`` (differences at 40 digits) of the
same function written with mpmath for the cases jet lacks a rule for
(:data:`NO_JET_RULE`); nested ``jax.jacfwd``, at a low order, as a check of
both.  Nested jacfwd as the reference itself made this file the suite's
slowest: its cost doubles per order (b(t)**a(t) to order 7 took a minute to
compile, the five cases jet cannot do 30 s).
"""

import functools
import math

import mpmath
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import solver
from solver.api import integrator_for
from solver.taylor.program import UnsupportedPrimitiveError

ORDER = 7
T0 = 0.3


def a(t):
    return 0.4 + 0.7 * t - 0.5 * t**2 + 0.2 * jnp.sin(2 * t)


def b(t):
    return 1.3 + 0.3 * jnp.cos(t) + 0.25 * t**3


CASES = {
    "add_sub_neg": lambda t: -(a(t) + b(t)) - 2.0 * a(t),
    "mul": lambda t: a(t) * b(t),
    "div": lambda t: a(t) / b(t),
    "div_const_num": lambda t: 2.0 / b(t),
    "integer_pow3": lambda t: a(t) ** 3,
    "integer_pow_neg2": lambda t: b(t) ** -2,
    "square": lambda t: jnp.square(a(t)),
    "real_pow": lambda t: b(t) ** 1.7,
    "pow_series_exponent": lambda t: b(t) ** a(t),
    "sqrt": lambda t: jnp.sqrt(b(t)),
    "rsqrt": lambda t: jax.lax.rsqrt(b(t)),
    "cbrt": lambda t: jnp.cbrt(b(t)),
    "exp": lambda t: jnp.exp(a(t)),
    "expm1": lambda t: jnp.expm1(a(t)),
    "log": lambda t: jnp.log(b(t)),
    "log1p": lambda t: jnp.log1p(a(t)),
    "sin": lambda t: jnp.sin(a(t)),
    "cos": lambda t: jnp.cos(a(t)),
    "tan": lambda t: jnp.tan(a(t)),
    "asin": lambda t: jnp.arcsin(0.5 * a(t)),
    "acos": lambda t: jnp.arccos(0.5 * a(t)),
    "atan": lambda t: jnp.arctan(a(t)),
    "atan2": lambda t: jnp.arctan2(a(t), b(t)),
    "sinh": lambda t: jnp.sinh(a(t)),
    "cosh": lambda t: jnp.cosh(a(t)),
    "tanh": lambda t: jnp.tanh(a(t)),
    "abs": lambda t: jnp.abs(a(t) - 2.0),
    "logistic": lambda t: jax.nn.sigmoid(a(t)),
    "dot_reduce_index_concat": lambda t: jnp.dot(jnp.stack([a(t), b(t), a(t) * b(t)]),
                                                  jnp.concatenate([jnp.stack([b(t)]), jnp.stack([a(t), 1.0])]))
    + jnp.sum(jnp.stack([a(t), b(t)]) ** 2) + jnp.stack([a(t), b(t)])[1],
    "norm_cross": lambda t: jnp.linalg.norm(jnp.cross(jnp.stack([a(t), b(t), 1.0]), jnp.stack([1.0, a(t), b(t)]))),
    "where_select": lambda t: jnp.where(a(t) > 0, a(t) * b(t), -b(t)),
    "max": lambda t: jnp.maximum(a(t), b(t)),
}


# Cases with an operation jax.experimental.jet has no rule for (KeyError in jet): the same
# functions in mpmath (a and b with the float64 constants the cases use).
def _a_mp(t):
    return mpmath.mpf(0.4) + mpmath.mpf(0.7) * t - mpmath.mpf(0.5) * t**2 + mpmath.mpf(0.2) * mpmath.sin(2 * t)


def _b_mp(t):
    return mpmath.mpf(1.3) + mpmath.mpf(0.3) * mpmath.cos(t) + mpmath.mpf(0.25) * t**3


NO_JET_RULE = {
    "cbrt": lambda t: mpmath.cbrt(_b_mp(t)),
    "tan": lambda t: mpmath.tan(_a_mp(t)),
    "asin": lambda t: mpmath.asin(_a_mp(t) / 2),
    "acos": lambda t: mpmath.acos(_a_mp(t) / 2),
    "atan": lambda t: mpmath.atan(_a_mp(t)),
}


def jet_coefficients(F, t0, K):
    """F's Taylor coefficients F^(k)(t0)/k!, k = 0..K, by jax.experimental.jet."""
    from jax.experimental import jet

    # t = t0 + s: the input's series is s (jet takes derivatives, not normalised coefficients).
    primal, series = jet.jet(F, (t0,), ([1.0] + [0.0] * (K - 1),))
    return np.array([float(primal)] + [float(series[k]) / math.factorial(k + 1) for k in range(K)])


def mpmath_coefficients(F, t0, K):
    """F's Taylor coefficients F^(k)(t0)/k!, k = 0..K, by mpmath.taylor at 40 digits (F in mpmath)."""
    with mpmath.workdps(40):
        return np.array([float(c) for c in mpmath.taylor(F, mpmath.mpf(t0), K)])


def reference_coefficients(F, t0, K):
    """F's Taylor coefficients F^(k)(t0)/k!, k = 0..K, by nested jax.jacfwd."""
    # Each derivative is evaluated under jit: op-by-op dispatch of a nested
    # jacfwd is several times slower than compiling it.
    out, f = [], F
    for k in range(K + 1):
        out.append(float(jax.jit(f)(t0)) / math.factorial(k))
        f = jax.jacfwd(f)
    return np.array(out)


MODES = ["unrolled", "compact", "looped"]


@pytest.fixture(scope="module", params=MODES)
def engine_series(request):
    """All cases in one DAE (y_i = F_i(t)), so each engine compiles once."""
    names = sorted(CASES)
    dae = solver.DAE(lambda t, v, p: [v[f"y_{n}"][0] - CASES[n](t) for n in names], [f"y_{n}" for n in names])
    integ = integrator_for(dae, ORDER, mode=request.param)
    assert integ.mode == request.param
    consts = integ.prog.constants({})
    X, u, status, _ = jax.jit(lambda: integ.series(jnp.zeros(0), jnp.zeros(len(names)), T0, consts))()
    assert int(status) == 0
    return {n: np.asarray(X[f"y_{n}"][: ORDER + 1]) for n in names}


@functools.lru_cache(maxsize=None)
def case_reference(name):
    """A case's coefficients, computed once for the three engines: by jet, or by
    mpmath where jet has no rule."""
    if name in NO_JET_RULE:
        return mpmath_coefficients(NO_JET_RULE[name], T0, ORDER)
    return jet_coefficients(CASES[name], T0, ORDER)


@pytest.mark.parametrize("name", ["mul", "div", "sin", "pow_series_exponent", "atan2", "norm_cross"])
def test_jet_reference_agrees_with_nested_jacfwd(name):
    """The jet reference is itself checked against nested jacfwd (to order 4: its cost doubles per order)."""
    np.testing.assert_allclose(jet_coefficients(CASES[name], T0, 4), reference_coefficients(CASES[name], T0, 4),
                               rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", sorted(NO_JET_RULE))
def test_mpmath_reference_is_the_case_and_agrees_with_nested_jacfwd(name):
    """The mpmath form of a case is the same function (its value at three points), and its
    coefficients agree with nested jacfwd to order 3."""
    for t in (T0, -0.4, 0.9):
        assert float(NO_JET_RULE[name](mpmath.mpf(t))) == pytest.approx(float(CASES[name](t)), rel=1e-14, abs=1e-15)
    np.testing.assert_allclose(mpmath_coefficients(NO_JET_RULE[name], T0, 3),
                               reference_coefficients(CASES[name], T0, 3), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", sorted(CASES))
def test_primitive_series_matches_the_reference(name, engine_series):
    ref = case_reference(name)
    np.testing.assert_allclose(engine_series[name], ref, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_ddt_shifts_the_series(mode):
    """y = d/dt (a(t) b(t)) through solver.ddt equals the derivative."""
    F = lambda t: a(t) * b(t)
    dae = solver.DAE(lambda t, v, p: [v["y"][0] - solver.ddt(F(t))], ["y"])
    integ = integrator_for(dae, ORDER, mode=mode)
    X, *_ = jax.jit(lambda: integ.series(jnp.zeros(0), jnp.zeros(1), T0, integ.prog.constants({})))()
    ref = jet_coefficients(jax.jacfwd(F), T0, ORDER)
    np.testing.assert_allclose(np.asarray(X["y"][: ORDER + 1]), ref, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_series_of_a_state_dependent_ode_matches_exact_expansion(mode):
    """y' = y² with y(0) = 1 has y = 1/(1 - t): every coefficient is 1."""
    dae = solver.DAE(lambda t, v, p: [v["y"][1] - v["y"][0] ** 2], ["y"])
    integ = integrator_for(dae, 12, mode=mode)
    X, *_ = jax.jit(lambda: integ.series(jnp.array([1.0]), jnp.zeros(1), 0.0, integ.prog.constants({})))()
    np.testing.assert_allclose(np.asarray(X["y"][:13]), np.ones(13), rtol=1e-13)


def _curve(x, y, exp2=jnp.exp2):
    """A curve G(x, y) = const built from every primitive with a rule of its own in the unrolled
    engine's commit pass (solver.taylor.tape.UnrolledProgram._delta_rule) applied to the unknowns
    (``exp2``: jet, the reference, has no rule for it, and is given exp(x log 2))."""
    return (jnp.sin(x) * y + jnp.cos(y) + jnp.exp(0.3 * y) + exp2(0.2 * x) + jnp.expm1(0.1 * y)
            - jnp.log(1.5 + x ** 2) + jnp.log1p(0.1 * jnp.square(y)) + jnp.sqrt(2.0 + y * y)
            + x / (2.0 + jnp.cosh(y)) + jnp.sinh(0.1 * x) + jnp.dot(jnp.stack([x, y]), jnp.stack([y, x])))


def _bead_on_curve(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    gx, gy = jax.grad(_curve, argnums=(0, 1))(x[0], y[0])
    return [x[2] + lam[0] * gx, y[2] + lam[0] * gy + p["g"], _curve(x[0], y[0]) - p["c"]]


def _jet_series(f, coeffs, K):
    """Normalised Taylor coefficients 0..K of f(*series) from the operands' normalised coefficients (jet)."""
    from jax.experimental import jet

    primals = tuple(jnp.asarray(c[0]) for c in coeffs)
    terms = tuple([jnp.asarray(c[j] * math.factorial(j)) for j in range(1, K + 1)] for c in coeffs)
    p0, out = jet.jet(f, primals, terms)
    return np.array([float(p0)] + [float(out[j - 1]) / math.factorial(j) for j in range(1, K + 1)])


@pytest.mark.parametrize("mode", ["unrolled", "compact"])
def test_series_of_a_bead_on_a_transcendental_curve_satisfies_its_equations_to_every_order(mode):
    """Index 3, the constraint through sin, cos, exp, exp2, expm1, log, log1p, squares, sqrt, a
    quotient, cosh, sinh and a dot product of the unknowns: every stage's unknowns enter each of
    them.  The engine's coefficients, pushed through the equations by ``jax.experimental.jet``
    (JAX's own Taylor mode), make every equation vanish at every order the series determines.
    (The looped engine, which has no commit pass of its own, took 12 s here; its rules are
    checked primitive by primitive above.)"""
    from solver.integrate.initialize import parse_values

    x0, y0, p = 0.4, -0.3, 6
    gx, gy = (float(g) for g in jax.grad(_curve, argnums=(0, 1))(x0, y0))
    params = {"g": 9.81, "c": float(_curve(x0, y0))}
    dae = solver.DAE(_bead_on_curve, ["x", "y", "lam"], params)
    comp = solver.compiled_model(dae, p, mode=mode)
    integ = comp.integrator
    assert integ.mode == mode
    spec = parse_values(integ, {"x": x0, "y": y0, "x'": -0.7 * gy, "y'": 0.7 * gx}, ["x", "y", "x'", "y'"])
    pj = {k: jnp.asarray(v) for k, v in params.items()}
    z0 = comp.consistent_point(pj, 0.0, spec)
    X, u, status, _ = jax.jit(lambda z: integ.series(z, jnp.asarray(spec.u_guess), 0.0,
                                                    integ.prog.constants(pj)))(jnp.asarray(z0))
    assert int(status) == 0
    xs, ys, ls = (np.asarray(X[n]) for n in ("x", "y", "lam"))
    np.testing.assert_allclose([xs[0], ys[0]], [x0, y0], atol=1e-12)
    assert abs(xs[1]) > 0.1  # the bead moves: the commit pass has non-zero changes to carry
    K = p  # x, y to order p + 2, lam to order p
    curve = lambda x, y: _curve(x, y, lambda s: jnp.exp(math.log(2.0) * s))
    # Coefficients grow (to 2e4 by order 11: the series converges in a small
    # disc), so each order is held to rounding at the scale of its terms.
    scale = lambda terms: 1e-13 * np.maximum.accumulate(1.0 + np.abs(terms))
    for name, force, sign in (("x", lambda x, y, l: l * jax.grad(curve, 0)(x, y), 0.0),
                              ("y", lambda x, y, l: l * jax.grad(curve, 1)(x, y), params["g"])):
        acc = np.array([(k + 1) * (k + 2) * np.asarray(X[name])[k + 2] for k in range(K + 1)])
        res = acc + _jet_series(force, (xs, ys, ls), K) + np.r_[sign, np.zeros(K)]
        assert np.all(np.abs(res) <= scale(acc)), (name, res, scale(acc))
    g = _jet_series(curve, (xs, ys), K + 2) - np.r_[params["c"], np.zeros(K + 2)]
    assert np.all(np.abs(g) <= scale(np.abs(xs[: K + 3]) + np.abs(ys[: K + 3]))), g


def test_unsupported_primitive_is_named():
    dae = solver.DAE(lambda t, v, p: [v["y"][0] - jax.scipy.special.erf(t)], ["y"])
    with pytest.raises(UnsupportedPrimitiveError, match="no rule for the operation 'erf'"):
        integrator_for(dae, 5)


@pytest.mark.parametrize("mode", MODES)
def test_batched_series_and_its_forward_derivatives_match_the_exact_expansion(mode):
    """y' = y² from y0: X[k] = y0^(k+1), so dX[k]/dy0 = (k+1) y0^k.

    The coefficient arrays are updated row by row with a batching rule of
    their own (taylor.write_row); this checks it under vmap and under
    forward mode inside vmap.
    """
    dae = solver.DAE(lambda t, v, p: [v["y"][1] - v["y"][0] ** 2], ["y"])
    integ = integrator_for(dae, 8, mode=mode)
    consts = integ.prog.constants({})
    k = np.arange(9)

    def coeffs(y0):
        X, *_ = integ.series(jnp.stack([y0]), jnp.zeros(1), 0.0, consts)
        return X["y"][:9]

    y0s = jnp.array([0.3, 0.7, 1.1])
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(coeffs))(y0s)),
                               np.asarray(y0s)[:, None] ** (k + 1), rtol=1e-13)
    d_fwd = np.asarray(jax.jit(jax.vmap(jax.jacfwd(coeffs)))(y0s))
    np.testing.assert_allclose(d_fwd, (k + 1) * np.asarray(y0s)[:, None] ** k, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_hidden_constraint_gradients_in_reverse_mode_under_vmap(mode):
    """Pendulum: the hidden constraint 2(x x' + y y') (coefficient 1 of
    x² + y² − 1) has the gradient 2(x', x, y', y) in z = (x, x', y, y')."""
    dae = solver.DAE(lambda t, v, p: [v["x"][2] + v["lam"][0] * v["x"][0],
                                      v["y"][2] + v["lam"][0] * v["y"][0] - 9.81,
                                      v["x"][0] ** 2 + v["y"][0] ** 2 - 1.0], ["x", "y", "lam"])
    integ = integrator_for(dae, 6, mode=mode)
    zs = jnp.array([[0.6, 0.3, 0.8, -0.2], [0.0, 1.0, 1.0, 0.5]])
    velocity_constraint = lambda z: integ.hidden_constraints(z, 0.0, {})[1]
    grads = np.asarray(jax.jit(jax.vmap(jax.grad(velocity_constraint)))(zs))
    x, xd, y, yd = np.asarray(zs).T
    np.testing.assert_allclose(grads, 2 * np.stack([xd, x, yd, y], axis=1), rtol=1e-13)


def test_modes_are_chosen_by_size_and_checked():
    from solver.integrate.integrator import UNROLL_MAX_OPS, choose_mode, tape_ops
    from solver.taylor.program import TaylorProgram

    dae = solver.DAE(lambda t, v, p: [v["y"][1] - v["y"][0] ** 2], ["y"])
    prog = TaylorProgram(dae, dae.structure.c, dae.structure.d, 10)
    assert 0 < tape_ops(prog) <= UNROLL_MAX_OPS and choose_mode(prog) == "unrolled"
    assert choose_mode(prog, "looped") == "looped"
    with pytest.raises(solver.InputError, match="mode must be one of auto, unrolled, compact, looped; got 'fast'"):
        choose_mode(prog, "fast")


@pytest.mark.parametrize("model", ["mechanism0", "double_pendulum"])
def test_both_engines_give_the_same_series_on_shipped_models(model):
    """Lagrangian residuals built by AD (dot products, pads, reshapes …): the
    coefficients of the three engines agree to rounding."""
    from pathlib import Path

    m = solver.load(Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / f"{model}.yaml")
    p = 9
    from solver.integrate.initialize import parse_values

    out, z0 = {}, None
    params = {k: jnp.asarray(v) for k, v in m.dae.params.items()}
    for mode in MODES:
        comp = solver.compiled_model(m.dae, p, mode=mode)
        integ = comp.integrator
        spec = parse_values(integ, m.initial_values(), m.fixed)
        if z0 is None:  # one consistent point (the engines share the state layout)
            z0 = jnp.asarray(comp.consistent_point(params, m.t0, spec))
        X, u, status, _ = jax.jit(lambda z: integ.series(z, jnp.asarray(spec.u_guess), m.t0,
                                                        integ.prog.constants(params)))(z0)
        assert int(status) == 0
        out[mode] = {k: np.asarray(v) for k, v in X.items()}
    for name in out["looped"]:
        b = out["looped"][name]
        for other in ("unrolled", "compact"):
            a = out[other][name]
            np.testing.assert_allclose(a[: p + 1], b[: p + 1], rtol=1e-10, atol=1e-10 * (1 + np.abs(b[: p + 1]).max()))


@pytest.mark.parametrize("mode", MODES)
def test_stage0_alone_is_the_series_stage0(mode):
    """``stage0_system`` (what ``mechsweep check`` compiles) is the Newton of
    :meth:`series` without the later stages: the same leading derivatives and
    system Jacobian, bit for bit, in every engine; a singular Jacobian is a
    status."""
    from pathlib import Path

    from solver.integrate.initialize import parse_values

    m = solver.load(Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "double_pendulum.yaml")
    params = {k: jnp.asarray(v) for k, v in m.dae.params.items()}
    comp = solver.compiled_model(m.dae, 2, "dense", mode=mode)
    integ = comp.integrator
    spec = parse_values(integ, m.initial_values(), m.fixed)
    z0 = jnp.asarray(comp.consistent_point(params, m.t0, spec))
    u_guess = jnp.asarray(spec.u_guess)

    def both(z):
        consts = integ.prog.constants(params)
        return integ.series(z, u_guess, m.t0, consts), integ.stage0_system(z, u_guess, m.t0, consts)

    (X, u, status, J), (J0, u0, status0) = jax.jit(both)(z0)
    assert int(status) == int(status0) == 0
    np.testing.assert_array_equal(np.asarray(u0), np.asarray(u))
    np.testing.assert_array_equal(np.asarray(J0), np.asarray(J))
    assert np.linalg.cond(np.asarray(J0)) < 1e6

    # x'^2 + x^2 - 1 = 0 at x = 1 forces x' = 0, where J = 2 x' vanishes.
    dae = solver.DAE(lambda t, v, p: [v["x"][1] ** 2 + v["x"][0] ** 2 - 1.0], ["x"])
    integ = solver.compiled_model(dae, 2, "dense", mode=mode).integrator
    _, _, status = integ.stage0_system(jnp.array([1.0]), jnp.zeros(1), 0.0, integ.prog.constants({}))
    assert int(status) == solver.status.SINGULAR_JACOBIAN
