"""Stage 0 affine in the leading derivatives: the tape's degree count and its use.

Specification:

* The count calls stage 0 affine exactly for the systems whose ``c_i = 0``
  equations are affine in their leading derivatives (mechanics: always),
  whatever the ``c_i ≥ 1`` equations hold (Pryce: their c_i-th derivative
  is affine in the leading derivatives).
* A verdict "affine" is checked on the numbers: the engine's own stage-0
  residual satisfies g(a u1 + (1 - a) u2) = a g(u1) + (1 - a) g(u2); a
  verdict "not affine" on these cases is seen to fail that identity.
* One Newton step then gives the leading derivatives of the full Newton
  loop, to rounding.
* A traced function (an event function) is called affine in its inputs
  exactly when it is: combinations with constant weights, through calls;
  not products, quotients by an unknown, nonlinear or piecewise functions,
  or positions that move with the unknowns.
"""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import solver
from solver.api import integrator_for
from solver.taylor.degree import residual_degrees, stage0_is_affine

from models_for_tests import car, four_bar, pendulum_cartesian, pendulum_chain


def _pendulum(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


def _pendulum_cubed_multiplier(t, v, p):
    # λ³ where λ (d = 0) is a leading derivative of a c = 0 equation.
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] ** 3 * x[0], y[2] + lam[0] ** 3 * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


def _pendulum_divided_by_position(t, v, p):
    # λ / (1 + x²): affine in λ, nonlinear in the known x.
    x, y, lam = v["x"], v["y"], v["lam"]
    w = lam[0] / (1.0 + x[0] ** 2)
    return [x[2] + w * x[0], y[2] + w * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


def _implicit_ode(t, v, p):
    # y'³ + y' = -y: c = 0, d = 1, the leading derivative inside a cubic.
    y = v["y"]
    return [y[1] ** 3 + y[1] + p["k"] * y[0]]


def _sine_of_acceleration(t, v, p):
    x = v["x"]
    return [jnp.sin(x[2]) + p["k"] * x[0]]


def _switch_on_acceleration(t, v, p):
    # A piecewise law in the leading derivative: not affine.
    x = v["x"]
    return [jnp.where(x[2] > 0, 2.0 * x[2], x[2]) + p["k"] * x[0]]


def _switch_on_position(t, v, p):
    # The switch reads the known position only: affine in x''.
    x = v["x"]
    return [jnp.where(x[0] > 0, 2.0 * x[2], x[2]) + p["k"] * x[0]]


def _ddt_of_momentum(t, v, p):
    # d/dt (m(x) x') + k x: the ddt brings in x'' linearly.
    x = v["x"]
    return [solver.ddt((1.0 + x[0] ** 2) * x[1]) + p["k"] * x[0]]


PEND = {"g": 9.81, "L": 1.0}
CASES = {
    "pendulum": (lambda: solver.DAE(_pendulum, ["x", "y", "lam"], PEND), True),
    "lambda cubed": (lambda: solver.DAE(_pendulum_cubed_multiplier, ["x", "y", "lam"], PEND), False),
    "lambda over 1 + x^2": (lambda: solver.DAE(_pendulum_divided_by_position, ["x", "y", "lam"], PEND), True),
    "implicit cubic ODE": (lambda: solver.DAE(_implicit_ode, ["y"], {"k": 2.0}), False),
    "sin(x'')": (lambda: solver.DAE(_sine_of_acceleration, ["x"], {"k": 2.0}), False),
    "switch on x''": (lambda: solver.DAE(_switch_on_acceleration, ["x"], {"k": 2.0}), False),
    "switch on x": (lambda: solver.DAE(_switch_on_position, ["x"], {"k": 2.0}), True),
    "ddt of momentum": (lambda: solver.DAE(_ddt_of_momentum, ["x"], {"k": 2.0}), True),
    "Lagrangian pendulum": (lambda: pendulum_cartesian(), True),
    "Lagrangian chain of 3": (lambda: pendulum_chain(3), True),
    "four-bar": (lambda: four_bar(), True),
    "car": (lambda: car(), True),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    build, expected = CASES[request.param]
    return request.param, integrator_for(build(), 4), expected


def _stage0(integ, seed):
    """The engine's stage-0 residual at a random state, and two random points u."""
    rng = np.random.default_rng(seed)
    dae = integ.dae
    consts = integ.prog.constants(dae.param_values())
    z = jnp.asarray(rng.uniform(0.2, 0.9, integ.n_state))
    g0, _, _ = integ._stage0_residual(z, 0.3, consts)
    n = integ.prog.n
    # Of opposite signs, so that a switch on u lies between them.
    return g0, jnp.asarray(rng.uniform(0.5, 1, n)), jnp.asarray(rng.uniform(-1, -0.5, n))


def test_verdict_matches_the_system(case):
    name, integ, expected = case
    assert stage0_is_affine(integ.prog) is expected, (name, residual_degrees(integ.prog))
    assert integ.stage0_affine is expected


def test_verdict_holds_on_the_engine_residual(case):
    name, integ, expected = case
    g0, u1, u2 = _stage0(integ, 0)
    a = 0.3
    mixed = g0(a * u1 + (1 - a) * u2)
    combined = a * g0(u1) + (1 - a) * g0(u2)
    gap = float(jnp.max(jnp.abs(mixed - combined)))
    scale = 1.0 + float(jnp.max(jnp.abs(combined)))
    if expected:
        assert gap <= 1e-12 * scale, (name, gap)
    else:
        assert gap > 1e-6 * scale, (name, gap)


def test_constraints_of_any_degree_leave_stage0_affine():
    # x² + y² = L² (c = 2) is quadratic as written; only its second
    # derivative enters stage 0, affine in x'' and y''.
    integ = integrator_for(solver.DAE(_pendulum, ["x", "y", "lam"], PEND), 4)
    assert residual_degrees(integ.prog) == [1, 1, 0]
    assert list(integ.prog.c) == [0, 0, 2]
    assert integ.stage0_affine


def test_one_newton_step_gives_the_newton_loop_leading_derivatives():
    integ = integrator_for(pendulum_chain(3), 6)
    assert integ.stage0_affine
    dae = integ.dae
    consts = integ.prog.constants(dae.param_values())
    rng = np.random.default_rng(1)
    z = jnp.asarray(rng.uniform(0.2, 0.9, integ.n_state))
    guess = jnp.zeros(integ.prog.n)
    _, one_step, status_one = integ.stage0_system(z, guess, 0.0, consts)
    integ.stage0_affine = False
    try:
        _, looped, status_loop = integ.stage0_system(z, guess, 0.0, consts)
    finally:
        integ.stage0_affine = True
    assert int(status_one) == int(status_loop) == solver.status.SUCCESS
    np.testing.assert_allclose(one_step, looped, rtol=1e-12, atol=1e-12)
    g0, _, _ = integ._stage0_residual(z, 0.0, consts)
    assert float(jnp.max(jnp.abs(g0(one_step)))) <= 1e-11 * (1 + float(jnp.max(jnp.abs(one_step))))


def test_a_run_with_one_step_stage0_is_the_run_with_the_newton_loop():
    """The whole integration changes by rounding only: same steps, same outputs."""
    from solver.integrate.integrator import Integrator

    integ = integrator_for(solver.DAE(_pendulum, ["x", "y", "lam"], PEND), 10)
    looped = Integrator(integ.prog, mode=integ.mode)
    looped.stage0_affine = False
    assert integ.stage0_affine
    z0 = np.array([np.sin(0.4), 0.0, -np.cos(0.4), 0.0])  # (x, x', y, y') on the circle, at rest
    args = ({"g": 9.81, "L": 1.0}, z0, np.zeros(3), 0.0, 2.0, np.linspace(0.0, 2.0, 11), 1e-9)
    one, loop = integ.run(*args), looped.run(*args)
    assert int(one["status"]) == int(loop["status"]) == solver.status.SUCCESS
    assert int(one["steps"]) == int(loop["steps"])
    for name in ("x", "y", "lam"):
        np.testing.assert_allclose(np.asarray(one["values"][name]), np.asarray(loop["values"][name]),
                                   rtol=1e-12, atol=1e-12)
