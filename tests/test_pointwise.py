"""The residual at a point with ``ddt`` expanded (solver/taylor/pointwise.py), and the
system Jacobian built from it.

References: derivatives written out by hand (product and chain rules), and
the Jacobian obtained the other way, by differentiating the Taylor stage-0
residual with respect to the stage's unknowns.
"""

import math

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import solver
from solver.integrate.integrator import Integrator
from solver.taylor.pointwise import residual_at
from solver.taylor.program import TaylorProgram


def _program(fn, names, params=None, order=4):
    dae = solver.DAE(fn, names, params or {})
    s = dae.structure
    return TaylorProgram(dae, s.c, s.d, order)


def test_a_ddt_is_the_derivative_along_the_state():
    # d/dt (x * x') = x'^2 + x x''; and a nested one: d²/dt² (x y) = x''y + 2x'y' + xy''
    prog = _program(lambda t, v, p: [solver.ddt(v["x"][0] * v["x"][1]) - v["y"][0],
                                     solver.ddt(solver.ddt(v["x"][0] * v["y"][0])) - jnp.sin(t)],
                    ["x", "y"])
    x, xd, xdd, y, yd, ydd, t = 0.7, -0.4, 1.3, 2.1, 0.5, -0.8, 0.3
    lv = {"x": [jnp.asarray(x), jnp.asarray(xd), jnp.asarray(xdd)],
          "y": [jnp.asarray(y), jnp.asarray(yd), jnp.asarray(ydd)]}
    r = np.asarray(residual_at(prog, t, prog.constants({}), lv))
    assert r[0] == approx(xd**2 + x * xdd - y)
    assert r[1] == approx(xdd * y + 2 * xd * yd + x * ydd - math.sin(t))


def approx(v):
    return pytest.approx(v, rel=1e-14, abs=1e-14)


def test_time_enters_the_expansion():
    # d/dt (t² x) = 2 t x + t² x'
    prog = _program(lambda t, v, p: [solver.ddt(t**2 * v["x"][0]) - p["a"]], ["x"], {"a": 0.25})
    lv = {"x": [jnp.asarray(1.5), jnp.asarray(-2.0)]}
    r = float(residual_at(prog, 0.6, prog.constants({"a": jnp.asarray(0.25)}), lv)[0])
    assert r == approx(2 * 0.6 * 1.5 + 0.36 * (-2.0) - 0.25)


def _talk(t, v, p):
    x1, x2 = v["x1"], v["x2"]
    return [solver.ddt(x1[1] * jnp.sin(t)) ** 2 / (1 + x2[1] ** 2) + t**2 * jnp.cos(x2[0]),
            x1[0] - t**2]


def _pendulum_ddt(t, v, p):
    # A Lagrangian pendulum in Cartesian form with d/dt(∂L/∂q') written as ddt.
    x, y, lam = v["x"], v["y"], v["lam"]
    return [solver.ddt(p["m"] * x[1]) + 2 * lam[0] * x[0],
            solver.ddt(p["m"] * y[1]) + 2 * lam[0] * y[0] - p["m"] * p["g"],
            x[0] ** 2 + y[0] ** 2 - 1.0]


def _jacobian_pair(fn, names, params, z, u, t0):
    dae = solver.DAE(fn, names, params)
    s = dae.structure
    prog = TaylorProgram(dae, s.c, s.d, 5)
    integ = Integrator(prog, linear="dense", mode="looped")
    consts = prog.constants({k: jnp.asarray(v) for k, v in params.items()})
    X = integ.X_from_state(jnp.asarray(z))
    state = integ._negative_stages(X, t0, consts)

    def g0(uu):  # the stage-0 Taylor residual as a function of the stage's unknowns
        s0 = prog.stage(state, integ.set_stage(X, 0, uu), 0, t0, consts)
        return prog.residual(s0, 0) + prog.constant_residual(consts)

    reference = jax.jacfwd(g0)(jnp.asarray(u))
    return np.asarray(integ.stage0_jacobian(X, jnp.asarray(u), t0, consts)), np.asarray(reference)


def test_system_jacobian_of_ddt_residuals_equals_the_derivative_of_the_taylor_stage():
    """Pryce: ∂F_i[c_i]/∂X[j, d_j] = J_ij d_j!/c_i! at any point, consistent or not."""
    for fn, names, params in ((_talk, ["x1", "x2"], {}),
                              (_pendulum_ddt, ["x", "y", "lam"], {"m": 1.3, "g": 9.81})):
        dae = solver.DAE(fn, names, params)
        integ = Integrator(TaylorProgram(dae, dae.structure.c, dae.structure.d, 5), linear="dense", mode="looped")
        rng = np.random.default_rng(7)
        z = rng.uniform(0.3, 0.9, integ.n_state)
        u = rng.uniform(-0.5, 0.5, dae.n)
        J, ref = _jacobian_pair(fn, names, params, z, u, 1.1)
        assert np.abs(ref).max() > 0.1
        np.testing.assert_allclose(J, ref, rtol=1e-12, atol=1e-12)


def test_the_ddt_pendulum_solves_like_the_plain_one():
    """The ddt form of the pendulum (now on the pointwise Jacobian) keeps |r| = 1 and its energy."""
    dae = solver.DAE(_pendulum_ddt, ["x", "y", "lam"], {"m": 1.3, "g": 9.81})
    ds = solver.solve(dae, (0.0, 2.0), values={"x": 0.6, "y": 0.8, "x'": 0.0, "y'": 0.0},
                      fixed=["x", "x'"], tol=1e-11)
    assert int(ds.status) == 0
    x, y, xd, yd = (ds[k].values for k in ("x", "y", "x_d1", "y_d1"))
    assert np.max(np.abs(x**2 + y**2 - 1)) < 1e-10
    energy = 0.5 * 1.3 * (xd**2 + yd**2) - 1.3 * 9.81 * y
    assert np.ptp(energy) < 1e-8
