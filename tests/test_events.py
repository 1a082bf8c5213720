"""Events, end stops and impacts: crossings found on the Taylor polynomial, Newton's impact law, Zeno.

Specification (issue 41), against references no one here wrote:

* every real root of a polynomial in a step, with its direction, polished to
  machine precision, also two roots in one piece of the step;
* the pendulum's period from its upward crossings of x = 0 equals 4 K(k)/ω
  (the complete elliptic integral) to 1e-10;
* a bouncing ball's impact times and apex heights in closed form, and the
  Zeno accumulation time t1 (1 + e)/(1 - e) reached without a hang;
* a pendulum (index 3) against a wall: after each impact the normal velocity
  is -e times the one before, the energy above the wall drops by e²;
* a terminal event ends the run there (status ``stopped_by_event``);
* more occurrences than ``max_events`` set ``event_overflow``;
* a batch keeps each point's events as its single run does;
* bad input is refused with the key and the fix.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings, strategies as hs

import jax
import jax.numpy as jnp
from jax.experimental import jet
from jax.extend.core import jaxprs_in_params

import solver
from solver import status as st
from solver.errors import InputError
from solver.integrate.roots import (SUBINTERVALS, bernstein_pieces, clear_of_roots, fine_pieces, isolate_roots,
                                   polished_roots, root_brackets, single_root, whole_step)
from solver.mechanics.stops import Stop

ROOT = Path(__file__).resolve().parents[1]
MECH = ROOT / "configs" / "mechanisms"
P = 17
PIECES = jnp.asarray(bernstein_pieces(P))
FINE = jnp.asarray(fine_pieces(P))


def _roots(coeffs):
    c = np.zeros(P + 1)
    c[: len(coeffs)] = coeffs
    found, u, sign = isolate_roots(jnp.asarray(c), PIECES, FINE)
    found = np.asarray(found)
    u, sign = np.asarray(u)[found], np.asarray(sign)[found]
    order = np.argsort(u)
    return u[order], sign[order]


def _poly(roots, lead=1.0):
    c = np.array([lead])
    for r in roots:
        c = np.convolve(c, [-r, 1.0])
    return c  # ascending powers


# ------------------------------------------------------------------ root isolation
def test_every_root_in_the_step_is_found_with_its_direction():
    u, sign = _roots(_poly([0.1, 0.45, 0.8]))
    np.testing.assert_allclose(u, [0.1, 0.45, 0.8], atol=1e-15)
    assert sign.tolist() == [1, -1, 1]  # (u - .1)(u - .45)(u - .8): negative at 0


def test_two_roots_in_one_piece_are_both_found():
    # 0.3 and 0.31 share the piece [0.25, 0.3125] of the 16.
    assert math.floor(0.3 * SUBINTERVALS) == math.floor(0.31 * SUBINTERVALS)
    u, sign = _roots(_poly([0.3, 0.31]))
    np.testing.assert_allclose(u, [0.3, 0.31], atol=1e-15)
    assert sign.tolist() == [-1, 1]


def test_a_root_near_the_start_of_the_step_is_polished_exactly():
    # A bounce: up at 1e-9, down at 0.06; false position lands on the first at once.
    u, sign = _roots(_poly([1e-9, 0.06], lead=-1 / 0.06))
    np.testing.assert_allclose(u, [1e-9, 0.06], rtol=1e-12, atol=0)
    assert sign.tolist() == [1, -1]


def test_a_value_within_rounding_of_zero_is_zero_and_counts_as_positive():
    # g(0) = -1e-17 on a polynomial of size 1: zero, so no upward crossing at the start.
    u, sign = _roots([-1e-17, 1.0, -1 / 0.06])
    np.testing.assert_allclose(u, [0.06], rtol=1e-12)
    assert sign.tolist() == [-1]


def test_roots_on_the_ends_of_pieces_are_found_once():
    roots = [0.25, 0.3125, 0.5, 0.75]  # every one on an end of a piece
    u, sign = _roots(_poly(roots))
    np.testing.assert_allclose(u, roots, atol=1e-14)
    assert sign.tolist() == [-1, 1, -1, 1]  # positive at 0: four factors


def test_a_polynomial_without_roots_in_the_step_has_none():
    assert _roots(_poly([1.2, -0.5]))[0].size == 0
    assert _roots([1.0, 0.0, 1.0])[0].size == 0  # 1 + u²


def test_several_events_roots_found_together_are_each_events_own():
    # A model's events go through root_brackets as one array: each event's roots, directions and the
    # earliest-first selection must be those of that event alone (one with two roots in a piece, one with
    # a double root that polishes slowly, one simple root, one without roots).
    polys = [_poly([0.3, 0.31]), _poly([0.5, 0.5], lead=-1.0) + np.r_[1e-6, np.zeros(2)], _poly([0.7]),
             _poly([1.2, -0.5])]
    C = jnp.asarray(np.stack([np.pad(c, (0, P + 1 - len(c))) for c in polys]))
    for first in (None, 2):
        found, sign, brackets = root_brackets(C, PIECES, FINE, first, lazy=True)
        u = polished_roots(C, *brackets)
        for e in range(len(polys)):
            own_found, own_u, own_sign = (np.asarray(x) for x in isolate_roots(C[e], PIECES, FINE, first, lazy=True))
            np.testing.assert_array_equal(np.asarray(found[e]), own_found)
            # Slots without a crossing hold placeholders (the refinement's run for another event or not).
            np.testing.assert_array_equal(np.asarray(u[e])[own_found], own_u[own_found])
            np.testing.assert_array_equal(np.asarray(sign[e])[own_found], own_sign[own_found])
    got = np.asarray(u)[np.asarray(found)]
    np.testing.assert_allclose(np.sort(got[:2]), [0.3, 0.31], atol=1e-15)  # first = 2: the earliest two
    np.testing.assert_allclose(got[-1], 0.7, atol=1e-15)
    assert not np.asarray(found)[3].any()


WHOLE = jnp.asarray(bernstein_pieces(P, 1)[0])


def _padded(coeffs):
    c = np.zeros(P + 1)
    c[: len(coeffs)] = coeffs
    return jnp.asarray(c)


@settings(max_examples=40, deadline=None)
@given(hs.floats(0.001, 0.999), hs.floats(-3.0, 3.0))
def test_a_single_crossing_of_the_step_is_polished_without_pieces(root, curvature):
    # (u - root)(1 + curvature u² / 4): one real root in [0, 1], at any place in it.
    c = _padded(np.convolve([-root, 1.0], [1.0, 0.0, curvature / 4]))
    B, simple = whole_step(c, WHOLE)
    if not bool(simple):  # Bernstein coefficients that change sign more than once: the pieces' case
        return
    found, u, sign = single_root(c, B)
    assert bool(found[0]) and int(sign[0]) == 1
    np.testing.assert_allclose(float(u[0]), root, atol=1e-15, rtol=1e-14)


def test_the_whole_step_test_sends_two_crossings_to_the_pieces():
    assert bool(whole_step(_padded(_poly([0.4])), WHOLE)[1])
    assert not bool(whole_step(_padded(_poly([0.3, 0.31])), WHOLE)[1])
    assert not bool(whole_step(_padded([0.0, 1.0]), WHOLE)[1])  # a zero at the start: not simple


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.floats(-1.0, 1.0), min_size=2, max_size=P + 1), hs.floats(0.01, 3.0))
def test_a_step_the_coefficient_bound_clears_has_no_bernstein_sign_change(coeffs, h):
    # The cheap test of every step (clear_of_roots, on coefficients in s over [0, h]) may only
    # clear a step whose Bernstein coefficients in u = s / h all have one sign, none zero.
    c = _padded(coeffs)
    cu = c * h ** jnp.arange(P + 1)
    B, _ = whole_step(cu, WHOLE)
    if bool(clear_of_roots(c, h)):
        assert bool(jnp.all(B > 0)) or bool(jnp.all(B < 0)), (coeffs, h, B)
    a = np.abs(np.asarray(cu))
    if abs(a[0] - a[1:].sum()) > 1e-9 * a.sum():  # away from the bound's edge, where rounding decides
        assert bool(clear_of_roots(c, h)) == bool(clear_of_roots(cu, 1.0))  # the same test in s or in u


def test_the_coefficient_bound_clears_a_far_surface_and_not_a_crossing():
    assert bool(clear_of_roots(_padded([1.0, 0.3, -0.2]), 1.0))      # >= 0.5 on [0, 1]
    assert not bool(clear_of_roots(_padded(_poly([0.5])), 1.0))      # a root at 0.5
    assert not bool(clear_of_roots(_padded([1.0, -0.6, -0.4]), 1.0))  # a root at u = 1 exactly
    assert bool(clear_of_roots(_padded([1.0, -2.0]), 0.4))           # 1 - 2 s on [0, 0.4]
    assert not bool(clear_of_roots(_padded([1.0, -2.0]), -0.6))      # no root on [-0.6, 0], but bound 1.2 > 1
    assert clear_of_roots(jnp.stack([_padded([1.0, 0.1]), _padded([0.0, 1.0])]), 1.0).tolist() == [True, False]


@settings(max_examples=40, deadline=None)
@given(hs.lists(hs.floats(0.001, 0.999), min_size=1, max_size=5, unique=True))
def test_separated_roots_are_all_found_to_machine_precision(roots):
    roots = sorted(roots)
    if len(roots) > 1 and np.min(np.diff(roots)) < 2.0 / SUBINTERVALS**2:
        roots = roots[:1]  # closer than the finest pieces: not promised
    if sum(np.diff(np.floor(np.array(roots) * SUBINTERVALS)) == 0) > 2:
        roots = roots[:1]  # more ambiguous pieces than are refined
    u, _ = _roots(_poly(roots))
    np.testing.assert_allclose(u, roots, atol=1e-13)


# ------------------------------------------------------------------ plain events
def _pendulum(events, max_events=None):
    def residual(t, v, p):
        x, y, lam = v["x"], v["y"], v["lam"]
        return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]

    return solver.DAE(residual, ["x", "y", "lam"], params={"g": 9.81, "L": 1.0}, events=events,
                      max_events=max_events, name="pendulum with events")


THETA0 = 1.2
START = {"x": math.sin(THETA0), "y": math.cos(THETA0), "x'": 0.0}


def test_the_pendulum_period_from_its_crossings_is_the_elliptic_integral():
    dae = _pendulum([solver.Event("up", lambda t, v, p: v["x"][0], direction="up")])
    ds = solver.solve(dae, (0, 10), values=START, fixed=["x", "x'"], tol=1e-12)
    n = int(ds.event_count)
    times = ds.event_time.values[:n]
    period = 4 * sp.ellipk(math.sin(THETA0 / 2) ** 2) / math.sqrt(9.81)
    assert n == 4 and int(ds.status) == st.SUCCESS
    np.testing.assert_allclose(np.diff(times), period, rtol=0, atol=1e-10)
    np.testing.assert_allclose(times[0], 0.75 * period, atol=1e-10)  # released at rest at x > 0
    np.testing.assert_allclose(ds.x_at_event.values[:n], 0.0, atol=1e-12)
    assert (ds.event_rate.values[:n] > 0).all()  # upward: x' > 0 at each
    assert np.isnan(ds.event_time.values[n:]).all() and (ds.event_which.values[n:] == -1).all()


def _series_by_jet(stepper, X, t, params):
    """Every event's normalised Taylor coefficients by Taylor-mode AD (jet), the reference."""
    P = stepper.degree
    fact = np.array([float(math.factorial(k)) for k in range(stepper.integ.KX)])
    primals, series = [jnp.asarray(t)], [[jnp.ones(())] + [jnp.zeros(())] * (P - 1)]
    for name, k in stepper.keys:
        D = X[name][k:k + P + 1] * fact[k:k + P + 1].reshape((-1,) + (1,) * (X[name].ndim - 1))
        primals.append(D[0])
        series.append([D[j] for j in range(1, P + 1)])
    g0, gs = jet.jet(lambda t_, *xs: stepper._event_values(t_, xs, params), tuple(primals), tuple(series))
    return np.asarray(jnp.stack([g0] + list(gs), axis=1)) / fact[:P + 1]


@pytest.mark.parametrize("functions", [
    {"affine": lambda t, v, p: 2.0 * v["x"][1] - 3.0 * v["y"][0] + 0.5 * t - p["L"]},
    {"product": lambda t, v, p: v["x"][0] * v["y"][1] - 0.1,
     "curved": lambda t, v, p: jnp.sin(v["x"][0]) * jnp.cos(t) + jnp.exp(0.3 * v["y"][0]) / (2.0 + v["x"][1] ** 2),
     "roots": lambda t, v, p: jnp.sqrt(1.5 + v["y"][0]) - jnp.arctan2(v["x"][0], p["L"] + v["y"][0] ** 2),
     "vector": lambda t, v, p: jnp.dot(jnp.stack([v["x"][0], v["y"][0]]), jnp.stack([jnp.tanh(v["x"][1]), t])),
     "piecewise": lambda t, v, p: jnp.where(v["x"][0] > 0.0, v["y"][0] ** 3, jnp.abs(v["x"][1]) * t)},
    {"logs": lambda t, v, p: jnp.log(2.0 + v["x"][0]) + jnp.log1p(0.5 * v["y"][0] ** 2) - jnp.expm1(v["x"][1]),
     "powers": lambda t, v, p: (1.5 + v["y"][0] ** 2) ** v["x"][0] + 1.0 / (1.2 + v["x"][0]) ** 2
     + jax.lax.rsqrt(2.0 + v["y"][1] ** 2),
     "hyperbolic": lambda t, v, p: jnp.sinh(v["x"][0]) * jnp.cosh(v["y"][0]) + jax.nn.sigmoid(v["x"][1] - t),
     "extremes": lambda t, v, p: jnp.maximum(v["x"][0], 0.3 * t) - jnp.minimum(v["y"][0], -2.0)},
])
def test_an_events_coefficients_are_those_of_taylor_mode_differentiation(functions):
    # Each operation's coefficients come every order at once (linear ones, products) or by the
    # engine's recurrences (nonlinear ones); jax's own Taylor-mode AD (jet) is the reference.
    events = [solver.Event(name, fn) for name, fn in functions.items()]
    integ = solver.compiled_model(_pendulum(events), 12, batch=False).integrator
    stepper = integ.events
    rng = np.random.default_rng(4)
    X = {v.name: jnp.asarray(0.4 * rng.normal(size=(integ.KX,) + v.shape)) for v in integ.dae.variables}
    params = {k: jnp.asarray(v) for k, v in integ.dae.params.items()}
    ours = np.asarray(stepper.coefficients(X, 0.7, params))
    by_jet = _series_by_jet(stepper, X, 0.7, params)
    assert ours.shape == by_jet.shape == (len(events), stepper.degree + 1)
    np.testing.assert_allclose(ours, by_jet, rtol=1e-13, atol=1e-14 * np.abs(by_jet).max())


@pytest.mark.parametrize("ours, written_for_jet", [
    (lambda x: jnp.tan(x), lambda x: jnp.sin(x) / jnp.cos(x)),
    (lambda x: jnp.arcsin(x), lambda x: jnp.arctan2(x, jnp.sqrt(1.0 - x * x))),
    (lambda x: jnp.arccos(x), lambda x: jnp.arctan2(jnp.sqrt(1.0 - x * x), x)),
    (lambda x: jnp.arctan(x), lambda x: jnp.arctan2(x, 1.0)),
])
def test_the_functions_jet_has_no_rule_for_match_their_equivalents(ours, written_for_jet):
    # tan, asin, acos and atan have no Taylor rule in jet: the reference is the same function
    # written with operations it has.
    def stepper(f):
        event = solver.Event("g", lambda t, v, p: f(0.4 * v["x"][0] + 0.1 * t))
        return solver.compiled_model(_pendulum([event]), 12, batch=False).integrator.events

    a, b = stepper(ours), stepper(written_for_jet)
    rng = np.random.default_rng(7)
    X = {v.name: jnp.asarray(0.4 * rng.normal(size=(a.integ.KX,) + v.shape)) for v in a.integ.dae.variables}
    params = {k: jnp.asarray(v) for k, v in a.integ.dae.params.items()}
    reference = _series_by_jet(b, X, 0.7, params)
    np.testing.assert_allclose(np.asarray(a.coefficients(X, 0.7, params)), reference,
                               rtol=1e-12, atol=1e-12 * np.abs(reference).max())


@pytest.mark.parametrize("fn, message", [
    (lambda t, v, p: v["x"][2], "event 'bad' reads a value the state does not hold"),
    (lambda t, v, p: jnp.stack([v["x"][0], v["y"][0]]), "event 'bad' must return a scalar; it returns shape (2,)"),
    (lambda t, v, p: jax.scipy.special.erf(v["x"][0]), "event 'bad' uses erf, which an event's Taylor series"),
])
def test_an_event_the_integrator_cannot_follow_is_named_with_the_reason(fn, message):
    dae = _pendulum([solver.Event("fine", lambda t, v, p: v["x"][0]), solver.Event("bad", fn)])
    with pytest.raises(InputError, match=re.escape(message)):
        solver.compiled_model(dae, 12, batch=False)


def test_each_direction_of_one_function_keeps_its_own_crossings():
    # A step's one crossing against an event's direction ends that event's search at the
    # whole-step test; the event of the other direction on the same function records it.
    up = solver.Event("up", lambda t, v, p: v["x"][0], direction="up")
    down = solver.Event("down", lambda t, v, p: v["x"][0], direction="down")
    both = solver.solve(_pendulum([up, down]), (0, 10), values=START, fixed=["x", "x'"], tol=1e-12)
    alone = solver.solve(_pendulum([up]), (0, 10), values=START, fixed=["x", "x'"], tol=1e-12)
    n, m = int(both.event_count), int(alone.event_count)
    names = np.array(str(both["event_which"].attrs["flag_meanings"]).split())[both.event_which.values[:n]]
    assert list(names) == (["down", "up"] * n)[:n] and (names == "up").sum() == m   # released at rest at x > 0
    np.testing.assert_allclose(both.event_time.values[:n][names == "up"], alone.event_time.values[:m], atol=1e-13)
    assert (both.event_rate.values[:n][names == "down"] < 0).all()


def test_a_terminal_event_ends_the_run_there():
    dae = _pendulum([solver.Event("bottom", lambda t, v, p: v["x"][0], direction="down", terminal=True)])
    ds = solver.solve(dae, (0, 10), values=START, fixed=["x", "x'"], tol=1e-12)
    quarter = sp.ellipk(math.sin(THETA0 / 2) ** 2) / math.sqrt(9.81)
    assert ds.attrs["status_meaning"] == "stopped_by_event"
    np.testing.assert_allclose(ds.attrs["t_final"], quarter, atol=1e-10)
    assert int(ds.event_count) == 1
    later = ds.time.values > quarter + 1e-9
    assert np.isnan(ds.x.values[later]).all() and np.isfinite(ds.x.values[~later]).all()


def test_two_crossings_in_one_long_step_are_both_found():
    # x' = 1: the Taylor series is exact and one step spans [0, 1], while the
    # event's two roots are 0.02 apart, inside one sixteenth of the step.
    def residual(t, v, p):
        return [v["x"][1] - 1.0]

    dae = solver.DAE(residual, ["x"], events=[solver.Event("band", lambda t, v, p: (v["x"][0] - 0.3) *
                                                           (v["x"][0] - 0.32))])
    ds = solver.solve(dae, (0, 1), values={"x": 0.0}, fixed=["x"], tol=1e-12)
    assert int(ds.steps) <= 2
    n = int(ds.event_count)
    np.testing.assert_allclose(ds.event_time.values[:n], [0.3, 0.32], atol=1e-14)
    np.testing.assert_allclose(ds.event_rate.values[:n], [-0.02, 0.02], atol=1e-12)


def test_more_events_than_the_capacity_are_flagged_not_dropped_silently():
    dae = _pendulum([solver.Event("both", lambda t, v, p: v["x"][0])], max_events=3)
    ds = solver.solve(dae, (0, 10), values=START, fixed=["x", "x'"], tol=1e-10)
    assert ds.attrs["status_meaning"] == "event_overflow"
    assert int(ds.event_count) == 9 and ds.sizes["event"] == 3
    assert np.isfinite(ds.event_time.values).all()


def test_event_definitions_are_checked():
    with pytest.raises(InputError, match="direction must be one of up, down, both; got 'upward'"):
        solver.Event("e", lambda t, v, p: v["x"][0], direction="upward")
    with pytest.raises(InputError, match="two events are named 'e'"):
        _pendulum([solver.Event("e", lambda t, v, p: v["x"][0])] * 2)
    with pytest.raises(InputError, match="restitution must be in \\[0, 1\\].*got 1.5"):
        Stop("floor", lambda t, q, p: q["y"], restitution=1.5)


# ------------------------------------------------------------------ impacts
def _ball(e=0.8, tend=5.0, tol=1e-12):
    model = solver.load(MECH / "bouncing_ball.yaml")
    return model.solve(params={"e": e}, t_span=(0.0, tend), t_eval=np.linspace(0.0, tend, 101), tol=tol)


def test_a_bouncing_ball_hits_the_floor_at_the_closed_form_times():
    e, g, h = 0.8, 9.81, 1.0
    ds = _ball(e)
    n = int(ds.event_count)
    which = ds.event_which.values[:n]
    names = ds.event_which.attrs["flag_meanings"].split()
    floor = which == names.index("floor")
    t = ds.event_time.values[:n]
    t1 = math.sqrt(2 * h / g)
    k = np.arange(floor.sum())
    np.testing.assert_allclose(t[floor], t1 + 2 * t1 * e * (1 - e ** k) / (1 - e), atol=1e-12)
    # the normal velocity of approach, and the apex heights between impacts
    np.testing.assert_allclose(ds.event_rate.values[:n][floor][:20], -math.sqrt(2 * g * h) * e ** k[:20], rtol=1e-12)
    apex = which == names.index("apex")
    heights = ds.y_at_event.values[:n][apex]
    np.testing.assert_allclose(heights[:15], h * e ** (2 * np.arange(15)), rtol=1e-10, atol=1e-14)


def test_impact_times_stay_at_rounding_over_long_steps():
    # Few outputs: every step runs from one impact to the next, and each
    # crossing is polished from the whole step's bracket (the quick way).
    e, g, h, impacts = 0.9, 9.81, 1.0, 40
    t1 = math.sqrt(2 * h / g)
    k = np.arange(impacts)
    exact = t1 + 2 * t1 * e * (1 - e ** k) / (1 - e)
    model = solver.load(MECH / "bouncing_ball.yaml", overrides={"Events": None, "MaxEvents": impacts + 5})
    ds = model.solve(params={"e": e, "h": h, "g": g}, t_span=(0.0, exact[-1] + t1 * e ** impacts),
                     t_eval=np.array([0.0, exact[-1] + t1 * e ** impacts]), tol=1e-10)
    n = int(ds.event_count)
    np.testing.assert_allclose(ds.event_time.values[:n][:impacts], exact, rtol=0, atol=1e-13)


def test_impacts_that_accumulate_end_the_run_at_the_zeno_time():
    e, g, h = 0.8, 9.81, 1.0
    ds = _ball(e)
    t_inf = math.sqrt(2 * h / g) * (1 + e) / (1 - e)
    assert ds.attrs["status_meaning"] == "zeno"
    # The last impact: the first one closer than zeno_time (1e-5 * tend) to the one before.
    zeno_time = 1e-5 * 5.0
    assert t_inf - zeno_time / (1 - e) < ds.attrs["t_final"] < t_inf
    assert not st.is_failure(int(ds.status))


def test_a_plastic_impact_leaves_the_ball_resting():
    ds = _ball(0.0)
    assert ds.attrs["status_meaning"] == "zeno"
    np.testing.assert_allclose(ds.attrs["t_final"], math.sqrt(2 / 9.81), atol=1e-12)


def test_a_pendulum_against_a_wall_loses_e_squared_of_its_energy_at_each_impact():
    model = solver.load(MECH / "pendulum_wall.yaml")
    ds = model.solve()
    m, g, L, d, e = 1.0, 9.81, 1.0, 0.5, 0.7
    names = ds.event_which.attrs["flag_meanings"].split()
    n = int(ds.event_count)
    wall = ds.event_which.values[:n] == names.index("wall")
    assert wall.sum() >= 4
    np.testing.assert_allclose(ds.x_at_event.values[:n][wall], -d, atol=1e-12)
    # Energy between impacts is conserved; above the wall's height it drops by e² per impact.
    y_w = -math.sqrt(L**2 - d**2)
    rates = ds.event_rate.values[:n][wall]  # x' just before each impact
    v_n = -rates  # approach speed along the wall normal
    # Between impacts the speed at the wall comes back unchanged: |x'| at the next impact = e |x'| before.
    np.testing.assert_allclose(v_n[1:] / v_n[:-1], e, rtol=1e-9)
    E0 = m * g * (-L * math.cos(1.2))
    t_imp = ds.event_time.values[:n][wall]
    for k in range(3):
        between = (ds.time.values > t_imp[k] + 1e-6) & (ds.time.values < t_imp[k + 1] - 1e-6)
        expected = m * g * y_w + e ** (2 * (k + 1)) * (E0 - m * g * y_w)
        np.testing.assert_allclose(ds.energy.values[between], expected, rtol=1e-9)


def test_a_batch_keeps_each_points_events_as_its_single_run():
    model = solver.load(MECH / "bouncing_ball.yaml")
    es = np.array([0.5, 0.8, 0.9])
    batch = solver.solve_batch(model, {"e": es}, t_span=(0.0, 2.0), t_eval=np.linspace(0.0, 2.0, 101), tol=1e-12)
    for i, e in enumerate(es):
        one = _ball(e, tend=2.0)
        n = int(one.event_count)
        assert int(batch.event_count[i]) == n
        np.testing.assert_allclose(batch.event_time.values[i, :n], one.event_time.values[:n], atol=1e-13)
        assert int(batch.status[i]) == int(one.status)


# ------------------------------------------------------------------ model files
def _load_text(tmp_path, text):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    return solver.load(f)


BALL = (MECH / "bouncing_ball.yaml").read_text()


ANGLE_PENDULUM = """\
Title: Pendulum in its angle, its height read by events
Kind: Lagrangian
PhysicalParams: {m: 1.0, g: 9.81, L: 1.0}
Coordinates: [th]
Let:
  h: -L*cos(th)
KineticEnergy: m/2*L**2*th'**2
PotentialEnergy: m*g*h
Events:
EVENTS
ProblemData:
  tend: 2
  positions: {th: 1.0}
  velocities: {th: 0}
"""


def _cosines(jaxpr) -> int:
    """The cosines in a jaxpr, those of the loops and calls inside it counted too."""
    count = 0
    for e in jaxpr.eqns:
        count += e.primitive.name == "cos"
        for sub in jaxprs_in_params(e.params):
            count += _cosines(sub)
    return count


def _cosines_in_events(model):
    """The cosines in the events' values at a point, and in their Taylor series."""
    integ = solver.compiled_model(model.dae, 10, batch=False).integrator
    X = {v.name: jnp.ones((integ.KX,) + v.shape) for v in integ.dae.variables}
    params = {k: jnp.asarray(v) for k, v in integ.dae.params.items()}
    values = jax.make_jaxpr(lambda X: integ.events._event_values(0.0, [X[n][k] for n, k in integ.events.keys],
                                                                 params))(X)
    series = jax.make_jaxpr(lambda X: integ.events.coefficients(X, 0.0, params))(X)
    return _cosines(values.jaxpr), _cosines(series.jaxpr)


def test_events_reading_one_let_definition_expand_it_once(tmp_path):
    # The events of a step share one expression scope, so a Let definition they all read
    # (the car's wheel centres, read by its tyre switches and its events) is evaluated once,
    # and its Taylor series computed once: the step's program does not grow with the events.
    one = _load_text(tmp_path, ANGLE_PENDULUM.replace("EVENTS", '  low: {when: "h + 0.9"}'))
    three = _load_text(tmp_path, ANGLE_PENDULUM.replace("EVENTS", '  low: {when: "h + 0.9"}\n'
                                                        '  mid: {when: "h + 0.7", direction: up}\n'
                                                        '  high: {when: "2*h + 1.6", direction: down}'))
    assert [e.name for e in three.dae.events] == ["low", "mid", "high"]
    assert _cosines_in_events(one) == (1, 1)
    assert _cosines_in_events(three) == (1, 1)
    # Sharing the scope keeps each event's own function: every crossing is at its own height.
    ds = three.solve(t_span=(0.0, 2.0))
    n = int(ds.event_count)
    levels = np.array([-0.9, -0.7, -0.8])[ds.event_which.values[:n].astype(int)]
    assert n >= 3 and set(ds.event_which.values[:n].astype(int)) == {0, 1, 2}
    np.testing.assert_allclose(-np.cos(ds.th_at_event.values[:n]), levels, atol=1e-10)


def test_an_event_on_an_unknown_name_names_the_key(tmp_path):
    with pytest.raises(InputError) as err:
        _load_text(tmp_path, BALL.replace("when: \"y'\"", "when: \"z'\""))
    assert err.value.path == "Events.apex.when" and "z" in err.value.message


def test_a_restitution_outside_0_1_names_the_key(tmp_path):
    with pytest.raises(InputError) as err:
        _load_text(tmp_path, BALL.replace("e: 0.8}", "e: 1.5}"))
    assert err.value.path == "Stops.floor.restitution"
    assert "restitution must be a number in [0, 1]" in err.value.message and "1.5" in err.value.message


def test_a_restitution_outside_0_1_at_a_sweep_point_is_refused():
    model = solver.load(MECH / "bouncing_ball.yaml")
    model.check_values({"e": 0.3})
    with pytest.raises(InputError, match="restitution must be a number in \\[0, 1\\].*got -0.2 at e = -0.2"):
        model.check_values({"e": -0.2})


def test_a_stop_in_a_dae_kind_model_is_refused(tmp_path):
    text = (MECH / "pendulum.yaml").read_text().replace("ProblemData:", "Stops:\n  wall: {gap: x, restitution: 0.5}\n"
                                                           "ProblemData:", 1)
    with pytest.raises(InputError) as err:
        _load_text(tmp_path, text)
    assert err.value.path == "Stops" and "Kind: DAE has no Stops" in err.value.message


def test_a_bad_direction_lists_the_choices(tmp_path):
    with pytest.raises(InputError) as err:
        _load_text(tmp_path, BALL.replace("direction: down}", "direction: sideways}"))
    assert err.value.path == "Events.apex.direction" and "up, down, both" in err.value.message


def test_an_event_in_a_dae_kind_model_reads_its_variables(tmp_path):
    text = (MECH / "pendulum.yaml").read_text().replace(
        "ProblemData:", "Events:\n  up: {when: x, direction: up}\nProblemData:", 1)
    ds = _load_text(tmp_path, text).solve()
    n = int(ds.event_count)
    # From x = L at rest the first upward crossing is three quarters of a period in.
    period = 4 * sp.ellipk(math.sin(math.pi / 4) ** 2) / math.sqrt(9.81)
    np.testing.assert_allclose(np.diff(ds.event_time.values[:n]), period, atol=1e-8)


def _slider_crank_reference(e, tend, p):
    """Impact times and slider velocities of the slider-crank on its crank angle's ODE (scipy, sympy)."""
    import sympy
    from scipy.integrate import solve_ivp

    phi, dphi = sympy.symbols("phi dphi")
    r, l, m1, m2, m3, g = (p[k] for k in ("r", "l", "m1", "m2", "m3", "g"))
    s = r * sympy.cos(phi) + sympy.sqrt(l**2 - r**2 * sympy.sin(phi) ** 2)
    A = sympy.Matrix([r * sympy.cos(phi), r * sympy.sin(phi)])
    Ad, Bd = A.diff(phi) * dphi, sympy.Matrix([s.diff(phi), 0]) * dphi
    T = (m1 / 6 * Ad.dot(Ad) + m2 / 6 * (Ad.dot(Ad) + Ad.dot(Bd) + Bd.dot(Bd)) + m3 / 2 * (s.diff(phi) * dphi) ** 2)
    V = g * (m1 + m2) / 2 * A[1]
    M = sympy.simplify(T.diff(dphi, 2))
    acc = -(M.diff(phi) * dphi**2 / 2 + V.diff(phi)) / M
    f_acc = sympy.lambdify((phi, dphi), acc)
    f_gap = sympy.lambdify(phi, s - p["smin"])
    f_rate = sympy.lambdify((phi, dphi), s.diff(phi) * dphi)

    def gap(t, y):
        return f_gap(y[0])

    gap.terminal, gap.direction = True, -1
    t, y = 0.0, [p["th"], p["w"]]
    times, rates = [], []
    while t < tend:
        sol = solve_ivp(lambda t, y: [y[1], f_acc(y[0], y[1])], (t, tend), y, events=gap, rtol=1e-12, atol=1e-12,
                        method="DOP853")
        if not sol.t_events[0].size:
            break
        t, y = float(sol.t_events[0][0]), sol.y_events[0][0].copy()
        times.append(t)
        rates.append(f_rate(y[0], y[1]))
        y[1] = -e * y[1]  # one DOF: the gap's rate reverses with it
    return np.array(times), np.array(rates)


def test_a_slider_crank_against_its_end_stop_matches_the_crank_angle_ode():
    model = solver.load(MECH / "slider_crank_stop.yaml")
    ds = model.solve()
    n = int(ds.event_count)
    p = {k: float(v) for k, v in model.all_params().items()}
    times, rates = _slider_crank_reference(p["e"], model.tend, p)
    assert n == len(times) >= 3
    np.testing.assert_allclose(ds.event_time.values[:n], times, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ds.event_rate.values[:n], rates, rtol=1e-8)
    np.testing.assert_allclose(ds.s_at_event.values[:n], p["smin"], atol=1e-12)


def test_a_sweep_store_keeps_event_metrics_and_records_as_single_runs(tmp_path):
    from sweep.cli.sweep_command import run_sweep_file
    from sweep.store import open_store

    text = (ROOT / "configs/sweeps/slider_crank_restitution.yaml").read_text()
    text = text.replace("Model: ../mechanisms/slider_crank_stop.yaml",
                        f"Model: {MECH / 'slider_crank_stop.yaml'}\nOverride: {{ProblemData: {{tend: 2}}}}")
    text = text.replace("e: {linspace: [0.0, 1.0, 21]}", "e: {values: [0.3, 0.9]}").replace("Batch: 21", "Batch: 2")
    sweep_file = tmp_path / "restitution.yaml"
    sweep_file.write_text(text)
    out = tmp_path / "restitution.zarr"
    run_sweep_file(sweep_file, str(out), workers=0, progress=False, plot=False, echo=lambda *a: None)
    ds = open_store(str(out))
    model = solver.load(MECH / "slider_crank_stop.yaml", overrides={"ProblemData": {"tend": 2}})
    for i, e in enumerate(ds["e"].values):
        one = model.solve(params={"e": float(e)}, t_eval=ds.time.values)
        n = int(one.event_count)
        assert int(ds.impacts.values[i]) == n == int(ds.event_count.values[i])
        np.testing.assert_allclose(ds.first_impact.values[i], one.event_time.values[0], atol=1e-12)
        np.testing.assert_allclose(ds.second_speed.values[i], one.event_rate.values[1], rtol=1e-10)
        np.testing.assert_allclose(ds.event_time.values[i, :n], one.event_time.values[:n], atol=1e-12)
        np.testing.assert_allclose(ds.s_at_event.values[i, :n], one.s_at_event.values[:n], atol=1e-12)
    # The first impact comes before any restitution acts: alike for every design.
    np.testing.assert_allclose(ds.first_speed.values, ds.first_speed.values[0], rtol=1e-12)


def test_an_event_metric_on_an_unknown_event_lists_the_events(tmp_path):
    from sweep.pipeline import build_context
    from sweep.spec import load_sweep

    text = (ROOT / "configs/sweeps/slider_crank_restitution.yaml").read_text().replace(
        "Model: ../mechanisms/", f"Model: {MECH}/").replace("{event: end, reduce: count}", "{event: stop, reduce: count}")
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as err:
        build_context(load_sweep(f))
    assert err.value.path == "Outputs.metrics.impacts.event"
    assert "unknown event 'stop'; the model's events and stops are end" in err.value.message


# ------------------------------------------------------------------ sensitivities
def test_event_times_move_with_the_parameters_as_the_closed_form_says():
    # Impact k of a ball dropped from h: t_k = t1 (1 + 2e (1 - e^(k-1)) / (1 - e)), t1 = sqrt(2h/g),
    # so dt_k/dh = t_k/(2h), dt_k/dg = -t_k/(2g), and through each earlier impact dt_k/de as below.
    model = solver.load(MECH / "bouncing_ball.yaml")
    ds = model.solve(params={"e": 0.8}, t_span=(0.0, 2.0), t_eval=np.linspace(0.0, 2.0, 21),
                     sensitivities=["h", "e", "g"])
    e, g, h = 0.8, 9.81, 1.0
    t1 = math.sqrt(2 * h / g)
    names = ds.event_which.attrs["flag_meanings"].split()
    n = int(ds.event_count)
    floor = ds.event_which.values[:n] == names.index("floor")
    t = ds.event_time.values[:n][floor]
    k = np.arange(t.size)
    np.testing.assert_allclose(ds.devent_time_dh.values[:n][floor], t / (2 * h), rtol=1e-9)
    np.testing.assert_allclose(ds.devent_time_dg.values[:n][floor], -t / (2 * g), rtol=1e-9)
    dt_de = 2 * t1 * np.array([sum(j * e ** (j - 1) for j in range(1, m + 1)) for m in k])
    np.testing.assert_allclose(ds.devent_time_de.values[:n][floor], dt_de, rtol=1e-9, atol=1e-12)
    # The velocity of approach -sqrt(2 g h) e^k: its derivative carries the jumps of the tangents at impacts.
    np.testing.assert_allclose(ds.devent_rate_de.values[:n][floor], -math.sqrt(2 * g * h) * k * e ** (k - 1.0),
                               rtol=1e-9, atol=1e-12)


def test_one_parameters_event_tangents_are_those_it_has_among_several():
    # One direction is the jvp itself, several a vmap of it (Integrator._run_tangents): the event
    # records' derivatives (times, rates) and the states' must agree between the two programs.
    model = solver.load(MECH / "bouncing_ball.yaml")
    kw = dict(params={"e": 0.8}, t_span=(0.0, 2.0), t_eval=np.linspace(0.0, 2.0, 21))
    one, three = model.solve(sensitivities=["e"], **kw), model.solve(sensitivities=["h", "e", "g"], **kw)
    n = int(one.event_count)
    assert n == int(three.event_count) >= 3
    for name in ("devent_time_de", "devent_rate_de"):
        np.testing.assert_allclose(one[name].values[:n], three[name].values[:n], rtol=1e-12, atol=1e-14)
    sens = [v for v in one.data_vars if v.endswith("_de") and not v.startswith("devent")]
    assert sens
    for name in sens:
        np.testing.assert_allclose(one[name].values, three[name].values, rtol=1e-12, atol=1e-14)


def test_state_sensitivities_after_impacts_match_central_differences():
    # The pendulum against its wall (index 3): the impulse is solved with the rod's constraint,
    # so the tangents' jump at each impact goes through the KKT system of the impact law.
    model = solver.load(MECH / "pendulum_wall.yaml", overrides={"ProblemData": {"tend": 3.0}})
    t_eval = np.linspace(0.0, 3.0, 31)
    ds = model.solve(params={"e": 0.7}, t_eval=t_eval, sensitivities=["e", "d"])
    names = ds.event_which.attrs["flag_meanings"].split()
    wall = ds.event_which.values == names.index("wall")
    assert wall.sum() >= 2
    for name, base, step in (("e", 0.7, 1e-6), ("d", 0.5, 1e-6)):
        plus = model.solve(params={name: base + step}, t_eval=t_eval)
        minus = model.solve(params={name: base - step}, t_eval=t_eval)
        for var in ("x", "y"):
            central = (plus[var].values - minus[var].values) / (2 * step)
            np.testing.assert_allclose(ds[f"d{var}_d{name}"].values, central, rtol=1e-5, atol=1e-6)
        dt_central = (plus.event_time.values[wall] - minus.event_time.values[wall]) / (2 * step)
        np.testing.assert_allclose(ds[f"devent_time_d{name}"].values[wall], dt_central, rtol=1e-6, atol=1e-9)


def test_the_events_page_python_example_runs_and_gives_the_period():
    import re

    text = (ROOT / "docs" / "events.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert blocks
    scope: dict = {}
    exec(blocks[0], scope)  # noqa: S102 (the project's own documentation)
    period = 4 * sp.ellipk(math.sin(1.2 / 2) ** 2) / math.sqrt(9.81)
    np.testing.assert_allclose(scope["period"], period, atol=1e-10)


def test_an_impacts_impulse_is_the_momentum_it_reverses():
    ds = _ball(0.8, tend=2.0)
    names = ds.event_which.attrs["flag_meanings"].split()
    n = int(ds.event_count)
    floor = ds.event_which.values[:n] == names.index("floor")
    rates = ds.event_rate.values[:n][floor]
    # m (v+ - v-) = P with v+ = -e v-: P = -(1 + e) m v- (m = 1), pushing the ball up.
    np.testing.assert_allclose(ds.event_impulse.values[:n][floor], -(1 + 0.8) * rates, rtol=1e-12)
    assert np.isnan(ds.event_impulse.values[:n][~floor]).all()  # apexes are no impacts


def test_the_siconos_view_reports_the_contacts_and_their_jacobian():
    model = solver.load(MECH / "pendulum_wall.yaml")
    view = solver.lagrangian_ds(model)
    q = np.array([-0.3, -0.9])
    assert view.contacts == ["wall"]
    np.testing.assert_allclose(view.contact_gaps(q), [-0.3 + 0.5])
    np.testing.assert_allclose(view.contact_jacobian(q), [[1.0, 0.0]])
    np.testing.assert_allclose(view.restitutions(), [0.7])
    assert solver.lagrangian_ds(solver.load(MECH / "slider_crank.yaml")).contacts == []


def test_plots_mark_event_times_and_animations_mark_impacts(tmp_path):
    from solver.results.plot import animate, event_marks, impact_points, plot_timeseries

    model = solver.load(MECH / "pendulum_wall.yaml")
    ds = model.solve()
    marks = event_marks(ds)
    n = int(ds.event_count)
    assert set(marks) == {"wall", "bottom"} and sum(len(v) for v in marks.values()) == n
    np.testing.assert_allclose(np.sort(np.concatenate(list(marks.values()))), np.sort(ds.event_time.values[:n]))
    assert plot_timeseries(ds, str(tmp_path / "p.png"), ["x"]) and (tmp_path / "p.png").stat().st_size > 0
    times, points = impact_points(model, ds)
    np.testing.assert_allclose(times, marks["wall"])
    np.testing.assert_allclose(points["bob"][:, 0], -0.5, atol=1e-12)   # the bob on the wall x = -d
    np.testing.assert_allclose(points["O"], 0.0)
    assert Path(animate(model, ds, str(tmp_path / "a.gif"), frames=4)).stat().st_size > 0


# ------------------------------------------------------------------ the command line
def test_simulate_reports_the_events_and_bad_event_input_exits_2(tmp_path, capsys):
    import json as _json

    from sweep.cli.app import main

    ball = tmp_path / "ball.yaml"
    ball.write_text(BALL.replace("tend: 5", "tend: 1.5"))  # impacts at 0.45 and 1.17
    assert main(["simulate", str(ball), "--json", "--out", str(tmp_path / "run.zarr")]) == 0
    info = _json.loads(capsys.readouterr().out)
    t1 = math.sqrt(2 / 9.81)
    assert info["events"]["floor"]["count"] == 2 and info["events"]["floor"]["first"] == pytest.approx(t1, abs=1e-12)
    assert info["event_count"] == sum(e["count"] for e in info["events"].values())
    bad = tmp_path / "bad.yaml"
    bad.write_text(BALL.replace("restitution: e}", "restitution: 2}"))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "Stops.floor.restitution" in err and "restitution must be a number in [0, 1]" in err


# ------------------------------------------------------------------ piecewise functions
def test_piecewise_functions_and_their_switches():
    from solver.models.expr import ConstantScope, parse

    e = parse("k*max(0, d - x) + where(x - 1, 2, abs(y)) + min(x, 2) + sign(y) + step(x - 0.5)")
    assert [str(s) for s in e.switches()] == ["0 - (d - x)", "x - 1", "y", "x - 2", "x - 0.5"]
    value = float(e.evaluate(ConstantScope({"k": 2.0, "d": 1.0, "x": 0.5, "y": -3.0})))
    assert value == 2 * 0.5 + 3.0 + 0.5 - 1.0 + 1.0  # max, where (x - 1 < 0: abs(y)), min, sign, step(0) = 1


def _soft_floor_reference(t_end):
    """scipy's DOP853, restarted at every switch of max(0, -y) so that no step spans one."""
    from scipy.integrate import solve_ivp

    k, g = 1000.0, 9.81

    def rhs(t, s):
        return [s[1], -g + k * max(0.0, -s[0])]

    def contact(t, s):
        return s[0]

    contact.terminal = True
    t, s = 0.0, [1.0, 0.0]
    while t < t_end:
        sol = solve_ivp(rhs, (t, t_end), s, events=contact, rtol=1e-13, atol=1e-13, method="DOP853")
        if sol.status != 1:
            return sol.y[:, -1]
        t, s = float(sol.t_events[0][0]), [0.0, sol.y_events[0][0][1]]
        # Just past the switch, on the new branch, before the next segment's event search.
        past = solve_ivp(rhs, (t, t + 1e-12), s, rtol=1e-13, atol=1e-13, method="DOP853")
        t, s = float(past.t[-1]), past.y[:, -1]
    return np.asarray(s)


def test_a_piecewise_force_switches_exactly_where_its_argument_crosses_zero():
    model = solver.load(MECH / "soft_floor.yaml")
    assert [e.kind for e in model.dae.events] == ["switch"]
    ds = model.solve()
    assert ds.attrs["status_meaning"] == "success" and "event_count" not in ds or int(ds.event_count) == 0
    reference = _soft_floor_reference(3.0)
    np.testing.assert_allclose([ds.y.values[-1], ds.y_d1.values[-1]], reference, rtol=0, atol=1e-8)
    # Through the landings the energy of the spring and gravity is conserved.
    E = 0.5 * ds.y_d1.values**2 + 9.81 * ds.y.values + 500.0 * np.maximum(0.0, -ds.y.values) ** 2
    np.testing.assert_allclose(E, E[0], atol=1e-9)


def test_a_switch_on_a_highest_derivative_is_refused_with_its_key(tmp_path):
    text = (MECH / "pendulum.yaml").read_text().replace("  - x'' + lam*x", "  - x'' + lam*x + max(0, y'')")
    with pytest.raises(InputError) as err:
        _load_text(tmp_path, text)
    assert err.value.path == "Equations[0]" and "highest derivative" in err.value.message
