"""Consistent initial values (docs/method.md §6): IPOPT nearest point, diagnostics, batches.

References are closed forms worked out by hand: the nearest point of a circle
and the tangent projection for the pendulum, the intersection of two circles
for the four-bar linkage (:func:`models_for_tests.four_bar_assembly`).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax
import jax.numpy as jnp

import solver
from solver.api import integrator_for
from models_for_tests import four_bar, four_bar_assembly
from solver.integrate.initialize import InitialValueError, StateSpec, hidden_jacobian_pattern, parse_values

ORDER = 4  # the hidden constraints do not depend on the Taylor order: keep compiles small


def pendulum(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


PEND = solver.DAE(pendulum, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})
PEND_P = {k: jnp.asarray(v) for k, v in PEND.params.items()}
LINK = four_bar(a=1.0, b=3.0, c=2.5, d=3.0)
LINK_P = {k: jnp.asarray(v) for k, v in LINK.params.items()}


@pytest.fixture(scope="module")
def pend():
    return integrator_for(PEND, ORDER)


@pytest.fixture(scope="module")
def link():
    return integrator_for(LINK, ORDER)


def ipopt_point(integ, params, t0, spec, options=None):
    """The nearest consistent point by IPOPT, with the compiled model's derivatives."""
    comp = solver.compiled_model(integ.dae, integ.p)
    return comp.consistent_point(params, t0, spec, method="ipopt", ipopt_options=options)


def batched_consistent_points(integ, params, t0, guess, free, fallback=True, newton_iters=40):
    """(z, ok) of the compiled model's batch policy: Newton, then IPOPT if ``fallback``."""
    comp = solver.compiled_model(integ.dae, integ.p)
    z, ok, _ = comp.consistent_points(params, t0, guess, free, method="auto" if fallback else "newton",
                                      newton_iters=newton_iters)
    return z, ok


def state(integ, values):
    """Flat state from derivative values keyed by state label (x, x', ...)."""
    return np.array([values[label] for label in integ.state_labels], dtype=float)


def link_state(integ, s):
    vals = {}
    for name, key in (("B", "B"), ("C", "C"), ("B", "Bd"), ("C", "Cd")):
        primes = "'" if key.endswith("d") else ""
        for i in range(2):
            vals[f"{name}[{i}]{primes}"] = s[key][i]
    return state(integ, vals)


def max_residual(integ, z, params):
    return float(np.max(np.abs(np.asarray(integ.hidden_constraints(jnp.asarray(z), 0.0, params)))))


# ------------------------------------------------------------------ pendulum
def test_pendulum_guess_off_circle_lands_on_nearest_consistent_point(pend):
    # x fixed at 0.6: the circle x² + y² = 1 leaves y = ±0.8, the guess 0.9
    # picks +0.8; the velocity (1, 1) is then projected onto the tangent
    # (−0.8, 0.6)... i.e. v − (v·n) n with n = (0.6, 0.8): (0.16, −0.12).
    spec = parse_values(pend, {"x": 0.6, "y": 0.9, "x'": 1.0, "y'": 1.0}, fixed=["x"])
    z = ipopt_point(pend, PEND_P, 0.0, spec)
    expect = state(pend, {"x": 0.6, "y": 0.8, "x'": 0.16, "y'": -0.12})
    assert z[pend.state_labels.index("x")] == 0.6  # the fixed entry, bit for bit
    np.testing.assert_allclose(z, expect, rtol=0, atol=1e-12)
    assert max_residual(pend, z, PEND_P) <= 1e-13


def test_pendulum_nearest_point_with_nothing_fixed_is_radial_projection(pend):
    # Nearest point of the circle to (1.2, 1.6) is (0.6, 0.8); a zero velocity
    # guess is already tangent.
    spec = parse_values(pend, {"x": 1.2, "y": 1.6})
    z = ipopt_point(pend, PEND_P, 0.0, spec)
    np.testing.assert_allclose(z, state(pend, {"x": 0.6, "y": 0.8, "x'": 0.0, "y'": 0.0}), atol=1e-12)


def test_jacobian_pattern_is_structural_and_covers_the_numeric_jacobian(pend, link):
    # C = x² + y² − L² involves positions only; C' = 2(x x' + y y') everything.
    pat = hidden_jacobian_pattern(pend).toarray()
    expect = np.zeros((2, 4), bool)
    for label in ("x", "y"):
        expect[pend.hidden_labels.index("f2"), pend.state_labels.index(label)] = True
    expect[pend.hidden_labels.index("f2'"), :] = True
    np.testing.assert_array_equal(pat, expect)
    # At random states every numerically nonzero derivative (central
    # differences) lies inside the pattern.
    g = jax.jit(lambda y: link.hidden_constraints(y, 0.0, LINK_P))
    rng = np.random.default_rng(0)
    pat = hidden_jacobian_pattern(link).toarray()
    for _ in range(3):
        z = rng.normal(size=link.n_state)
        eye = 1e-6 * np.eye(link.n_state)
        J = np.stack([np.asarray(g(z + e)) - np.asarray(g(z - e)) for e in eye], axis=1) / 2e-6
        assert not np.any((np.abs(J) > 1e-8) & ~pat)
    # |B|² − a² cannot depend on C: the pattern is not dense.
    assert not pat[link.hidden_labels.index("f2[0]"), link.state_labels.index("C[0]")]


# ------------------------------------------------------------------ four-bar
def crank_values(theta, omega, guess_c, guess_cd=(0.0, 0.0), a=1.0):
    return {"B": [a * math.cos(theta), a * math.sin(theta)],
            "B'": [-a * omega * math.sin(theta), a * omega * math.cos(theta)],
            "C": list(guess_c), "C'": list(guess_cd)}


@pytest.mark.parametrize("branch", [+1, -1])
def test_four_bar_branch_is_selected_by_the_guess(link, branch):
    theta, omega = 0.7, 2.0
    exact = four_bar_assembly(theta, omega, 1.0, 3.0, 2.5, 3.0, branch=branch)
    other = four_bar_assembly(theta, omega, 1.0, 3.0, 2.5, 3.0, branch=-branch)
    # A rough guess on the wanted side of the line B–D.
    guess = exact["C"] + np.array([0.3, -0.2 * branch])
    spec = parse_values(link, crank_values(theta, omega, guess), fixed=["B", "B'"])
    z = ipopt_point(link, LINK_P, 0.0, spec)
    assert max_residual(link, z, LINK_P) <= 1e-12
    np.testing.assert_allclose(z, link_state(link, exact), atol=1e-12)
    assert np.max(np.abs(z - link_state(link, other))) > 0.5  # distinct branches


def test_impossible_linkage_raises_documented_error_via_solve():
    # Ground 5 > crank + coupler + rocker: the loop cannot close anywhere.
    # (init="ipopt" goes straight to the nearest-point solve; "auto" tries
    # Newton first and then raises the same error.)
    with pytest.raises(InitialValueError) as err:
        solver.solve(LINK, (0.0, 0.1), values=crank_values(0.0, 1.0, (3.0, 0.5)), fixed=["B", "B'"],
                     order=ORDER, init="ipopt", params={"b": 1.0, "c": 1.0, "d": 5.0})
    msg = str(err.value)
    assert msg.startswith("no consistent initial point found (IPOPT status")
    assert "f2[1]" in msg or "f2[2]" in msg  # the coupler/rocker lengths are named


# ------------------------------------------------------------ over/under-specified
def test_full_consistent_fixed_set_is_accepted_as_is(link):
    exact = four_bar_assembly(1.1, -0.5, 1.0, 3.0, 2.5, 3.0, branch=+1)
    vals = crank_values(1.1, -0.5, exact["C"], exact["Cd"])
    spec = parse_values(link, vals, fixed=["B", "B'", "C", "C'"])
    z = ipopt_point(link, LINK_P, 0.0, spec)
    np.testing.assert_array_equal(z, spec.z_hat)


def test_inconsistent_fixed_set_lists_violated_constraints(pend):
    spec = parse_values(pend, {"x": 0.6, "y": 0.9, "x'": 0.8, "y'": -0.6}, fixed=["x", "y", "x'", "y'"])
    with pytest.raises(InitialValueError) as err:
        ipopt_point(pend, PEND_P, 0.0, spec)
    msg = str(err.value)
    assert msg.startswith("the fixed initial values are inconsistent")
    # C = 0.36 + 0.81 − 1 = 0.17 and C'/1! = 2(0.48 − 0.54) = −0.12
    assert "f2 = 0.17" in msg and "f2' = -0.12" in msg


def test_overdetermined_consistent_and_inconsistent_sets(pend):
    # x, x', y' fixed leaves y alone for two constraints.
    good = parse_values(pend, {"x": 0.6, "y": 0.7, "x'": 0.8, "y'": -0.6}, fixed=["x", "x'", "y'"])
    np.testing.assert_allclose(ipopt_point(pend, PEND_P, 0.0, good),
                               state(pend, {"x": 0.6, "y": 0.8, "x'": 0.8, "y'": -0.6}), atol=1e-13)
    bad = parse_values(pend, {"x": 0.6, "y": 0.7, "x'": 0.8, "y'": -0.7}, fixed=["x", "x'", "y'"])
    with pytest.raises(InitialValueError, match=r"^the fixed initial values are inconsistent.*over-determined"):
        ipopt_point(pend, PEND_P, 0.0, bad)


def test_underspecified_set_works_and_no_values_at_all_explains_dof(pend):
    z = ipopt_point(pend, PEND_P, 0.0, parse_values(pend, {"x": -0.3, "y": 0.4}))
    np.testing.assert_allclose(z, state(pend, {"x": -0.6, "y": 0.8, "x'": 0.0, "y'": 0.0}), atol=1e-12)
    # Nothing given: the origin is equidistant from the whole circle.
    with pytest.raises(InitialValueError, match="No initial values were given: this DAE has 2 degree"):
        ipopt_point(pend, PEND_P, 0.0, parse_values(pend, {}))


# ------------------------------------------------------------------ batches
BATCH = 6  # one batch size throughout: one compilation of the vmapped Newton


def design_batch(link, rng, n=BATCH, d=3.0, branch=+1):
    """n four-bar designs (random coupler/rocker) at random crank states."""
    b = rng.uniform(2.6, 3.4, n)
    c = rng.uniform(2.2, 2.8, n)
    theta = rng.uniform(0.0, 2 * math.pi, n)
    omega = rng.uniform(-2.0, 2.0, n)
    params = {k: np.full(n, float(v)) for k, v in LINK.params.items()}
    params.update(b=b, c=c)
    exact, guess = [], []
    for i in range(n):
        s = four_bar_assembly(theta[i], omega[i], 1.0, b[i], c[i], d, branch=branch)
        exact.append(link_state(link, s))
        g = dict(s, C=s["C"] + 0.1, Cd=np.zeros(2))
        guess.append(link_state(link, g))
    free = np.array([lab.startswith("C") for lab in link.state_labels])
    return params, np.array(guess), free, np.array(exact)


def test_batched_newton_and_ipopt_agree(link):
    params, guess, free, exact = design_batch(link, np.random.default_rng(1))
    zb, ok = batched_consistent_points(link, params, 0.0, guess, free, fallback=False)
    assert ok.all()
    np.testing.assert_allclose(zb, exact, atol=1e-11)
    for i in range(len(guess)):
        p_i = {k: jnp.asarray(v[i]) for k, v in params.items()}
        zi = ipopt_point(link, p_i, 0.0, StateSpec(guess[i], free, np.zeros(LINK.n)))
        np.testing.assert_allclose(zi, zb[i], rtol=0, atol=1e-10)


def test_batch_marks_impossible_designs_and_keeps_the_rest(link):
    params, guess, free, exact = design_batch(link, np.random.default_rng(2))
    params["d"] = params["d"].copy()
    params["d"][2] = 9.0  # cannot close: the ground link is longer than the other three together
    zb, ok = batched_consistent_points(link, params, 0.0, guess, free)
    np.testing.assert_array_equal(ok, np.arange(BATCH) != 2)
    np.testing.assert_allclose(zb[ok], exact[ok], atol=1e-11)


def test_batch_failure_messages_say_why_and_leave_the_others_empty(link):
    params, guess, free, _ = design_batch(link, np.random.default_rng(2))
    params["d"] = params["d"].copy()
    params["d"][2] = 9.0
    comp = solver.compiled_model(LINK, ORDER)
    _, ok, messages = comp.consistent_points(params, 0.0, guess, free)
    assert [bool(m) for m in messages] == list(~ok) == [i == 2 for i in range(BATCH)]
    assert messages[2].startswith("no consistent initial point found (IPOPT status")
    _, _, newton_only = comp.consistent_points(params, 0.0, guess, free, method="newton")
    assert newton_only[2].startswith("no consistent initial point found by Gauss-Newton")
    with pytest.raises(solver.InputError, match=r"unknown initialisation method 'lsq'; valid: \['auto', 'newton', 'ipopt'\]"):
        comp.consistent_points(params, 0.0, guess, free, method="lsq")


def test_batch_falls_back_to_ipopt_where_newton_stops_short(link):
    # Two Newton iterations cannot converge from these rough guesses; IPOPT
    # completes every point.
    params, guess, free, exact = design_batch(link, np.random.default_rng(3))
    _, ok_newton = batched_consistent_points(link, params, 0.0, guess, free, fallback=False, newton_iters=2)
    assert not ok_newton.any()
    zb, ok = batched_consistent_points(link, params, 0.0, guess, free, newton_iters=2)
    assert ok.all()
    np.testing.assert_allclose(zb, exact, atol=1e-11)


# ------------------------------------------------------------ derivatives, options
def test_compressed_jacobian_and_hessian_match_central_differences(link):
    der = solver.compiled_model(LINK, ORDER).ipopt_derivatives
    rng = np.random.default_rng(4)
    z, lam = rng.normal(size=link.n_state), rng.normal(size=link.n_hidden)
    n, h = link.n_state, 1e-6
    J = np.zeros((link.n_hidden, n))
    J[der.jac_rows, der.jac_cols] = np.asarray(der.jac(LINK_P, 0.0, z))
    H = np.zeros((n, n))
    H[der.hess_rows, der.hess_cols] = np.asarray(der.hess(LINK_P, 0.0, z, lam))
    H = H + np.tril(H, -1).T
    g = lambda y: np.asarray(der.g(LINK_P, 0.0, y))
    grad = lambda y: J_at(y).T @ lam

    def J_at(y):
        out = np.zeros((link.n_hidden, n))
        out[der.jac_rows, der.jac_cols] = np.asarray(der.jac(LINK_P, 0.0, y))
        return out

    fd_J = np.stack([(g(z + e) - g(z - e)) / (2 * h) for e in h * np.eye(n)], axis=1)
    fd_H = np.stack([(grad(z + e) - grad(z - e)) / (2 * h) for e in h * np.eye(n)], axis=1)
    np.testing.assert_allclose(J, fd_J, atol=1e-7)
    np.testing.assert_allclose(H, fd_H, atol=1e-7)


def test_ipopt_failure_reports_status_and_closest_point(pend):
    spec = parse_values(pend, {"x": 0.6, "y": 0.9, "x'": 1.0, "y'": 1.0}, fixed=["x"])
    with pytest.raises(InitialValueError, match=r"^no consistent initial point found \(IPOPT status -1: Maximum"
                                                r".*closest point found \[x = 0\.6, .*violated: f2"):
        ipopt_point(pend, PEND_P, 0.0, spec, options={"max_iter": 1})
    with pytest.raises(solver.InputError, match="IPOPT option 'no_such_option' = 1 was refused"):
        ipopt_point(pend, PEND_P, 0.0, spec, options={"no_such_option": 1})


def test_one_point_takes_the_quick_build_and_a_batch_the_optimised_one_with_the_same_point(pend):
    # A single run's Newton runs once a solve: it is compiled quickly (on a CPU); a batch's
    # runs over all its points and keeps LLVM's optimisation. Both find the same point.
    comp = solver.compiled_model(PEND, ORDER)
    spec = parse_values(pend, {"x": 0.6, "y": 0.9, "x'": 1.0, "y'": 1.0}, ["x"])
    one = comp.consistent_point(PEND_P, 0.0, spec)
    many, ok, _ = comp.consistent_points({k: np.repeat(np.asarray(v)[None], 3, axis=0) for k, v in PEND_P.items()},
                                         0.0, np.repeat(np.asarray(spec.z_hat)[None], 3, axis=0), spec.free)
    assert ok.all()
    np.testing.assert_allclose(many, np.repeat(np.asarray(one)[None], 3, axis=0), rtol=0, atol=1e-13)
    programs = comp._initial_programs
    assert {"newton_batch_one", "newton_batch"} <= set(programs)
    assert programs["newton_batch"] is comp.newton_program(3)
    assert programs["newton_batch_one"] is comp.newton_program(1)
    assert comp.newton_program(1) is not comp.newton_program(3)


def test_one_point_is_the_batch_policy_with_a_batch_of_one(pend, monkeypatch):
    # The Newton-then-IPOPT policy is written once: consistent_point runs
    # consistent_points on a batch of one (with its StateSpec, for IPOPT's
    # weights and messages) and raises the batch's message when it fails.
    comp = solver.compiled_model(PEND, ORDER)
    calls = []
    real = type(comp).consistent_points

    def spy(self, params_batch, t0, z_hat, free, *args, **kw):
        calls.append((np.shape(z_hat), kw.get("specs")))
        return real(self, params_batch, t0, z_hat, free, *args, **kw)

    monkeypatch.setattr(type(comp), "consistent_points", spy)
    spec = parse_values(pend, {"x": 0.6, "y": 0.9, "x'": 1.0, "y'": 1.0}, ["x"])
    z = comp.consistent_point(PEND_P, 0.0, spec)
    assert calls == [((1, pend.n_state), [spec])]
    assert max_residual(pend, z, PEND_P) < 1e-10
    bad = parse_values(pend, {"x": 2.0, "y": 0.0, "x'": 0.0, "y'": 0.0}, ["x", "y"])
    with pytest.raises(InitialValueError) as info:
        comp.consistent_point(PEND_P, 0.0, bad)
    _, ok, messages = real(comp, {k: np.asarray(v)[None] for k, v in PEND_P.items()}, 0.0,
                           np.asarray(bad.z_hat)[None], np.asarray(bad.free)[None], specs=[bad])
    assert not ok[0] and str(info.value) == messages[0]
    assert messages[0].startswith("the fixed initial values are inconsistent")


def _vector_pendulum(t, v, p):
    q, lam = v["q"], v["lam"]
    return [q[2][0] + lam[0] * q[0][0], q[2][1] + lam[0] * q[0][1] - 9.81, q[1][2] + q[0][2],
            q[0][0] ** 2 + q[0][1] ** 2 - 1.0]


VEC = solver.DAE(_vector_pendulum, variables={"q": 3, "lam": None}, params={})


@given(st.lists(st.tuples(st.sampled_from(["q", "q'", "q[0]", "q[1]'", "q[2]", "q[2]'", "q[1]''", "lam"]),
                          st.floats(-3, 3, allow_nan=False)), max_size=5, unique_by=lambda kv: kv[0]),
       st.lists(st.sampled_from(["q[0]", "q[1]", "q[0]'", "q[2]"]), max_size=2, unique=True))
@settings(max_examples=60, deadline=None)
def test_each_initial_value_lands_at_its_state_entry_or_leading_derivative_guess(items, fixed):
    # Element by element: x^(l) below the leading order d goes to the state
    # entry (x, e, l) divided by l!, at the leading order to the guess of
    # x^(d) (over d!), later names overwrite earlier ones; a fixed name
    # clears its entries' free flags.  The parsing is cached per name and
    # per list of fixed names (solver/integrate/initialize.py), so the same names
    # parsed twice in a row must give the same spec.
    integ = integrator_for(VEC, ORDER)
    d = integ.prog.d
    values = dict(items)
    z = np.zeros(integ.n_state)
    u = np.zeros(VEC.n)
    given_mask = np.zeros(integ.n_state, dtype=bool)
    for key, x in values.items():
        name, index, primes = key.rstrip("'"), None, len(key) - len(key.rstrip("'"))
        if "[" in name:
            name, index = name[:-3], int(name[-2])
        var = VEC.var_index[name]
        for e in ([index] if index is not None else range(var.size)):
            if primes < d[var.offset + e]:
                z[integ.state_position[(name, e, primes)]] = x / math.factorial(primes)
                given_mask[integ.state_position[(name, e, primes)]] = True
            else:
                u[var.offset + e] = x / math.factorial(primes)
    free = np.ones(integ.n_state, dtype=bool)
    for key in fixed:
        name, primes = key.rstrip("'")[:-3], len(key) - len(key.rstrip("'"))
        free[integ.state_position[(name, int(key.rstrip("'")[-2]), primes)]] = False
    for _ in range(2):
        spec = parse_values(integ, values, fixed)
        np.testing.assert_array_equal(spec.z_hat, z)
        np.testing.assert_array_equal(spec.u_guess, u)
        np.testing.assert_array_equal(spec.free, free)
        np.testing.assert_array_equal(spec.given, given_mask)


def test_vector_values_fill_each_element_where_its_own_order_puts_it():
    # q[2] has d = 1 (q[2]' is its leading derivative), q[0] and q[1] d = 2.
    integ = integrator_for(VEC, ORDER)
    pos = integ.state_position
    spec = parse_values(integ, {"q": [0.5, -0.25, 2.0], "q'": np.array([[1.0, 3.0, 4.0]]), "q[0]''": 6.0,
                                "q[1]''": (8.0,)}, ["q[0]"])
    assert [spec.z_hat[pos[("q", e, 0)]] for e in range(3)] == [0.5, -0.25, 2.0]
    assert [spec.z_hat[pos[("q", e, 1)]] for e in range(2)] == [1.0, 3.0]
    # q[2]' is q[2]'s leading derivative (a guess); q'' over 2! for q[0], q[1].
    assert list(spec.u_guess[:3]) == [3.0, 4.0, 4.0] and spec.u_guess[3] == 0.0
    assert spec.given.sum() == 5 and not spec.free[pos[("q", 0, 0)]] and spec.free.sum() == integ.n_state - 1


@pytest.mark.parametrize("values, fixed, message", [
    ({"q": [1.0, 2.0]}, [], "'q': expected 3 value(s), got 2"),
    ({"q": [1.0, 2.0], "w": 1.0}, [], "'q': expected 3 value(s), got 2"),            # in the order given
    ({"w": 1.0, "q": [1.0, 2.0]}, [], "initial value for unknown variable 'w'; the variables are ['q', 'lam']"),
    ({"q[3]": 1.0}, [], "'q[3]': q has 3 component(s); index 3 is out of range"),
    ({"q[2]''": 1.0}, [], "\"q[2]''\": derivative order 2 of q is above its leading order 1; "
                          "only orders below 1 are state (and 1 a guess)"),
    ({"q": 1.0}, ["lam"], "cannot fix 'lam': it is not part of the state (the state has derivatives of lam below "
                          "order 0); the equations determine it"),
])
def test_bad_initial_values_are_refused_every_time_with_the_same_message(values, fixed, message):
    # What each name means is worked out once per set of names: a refused
    # name must be refused again, with the same words, on every later point.
    integ = integrator_for(VEC, ORDER)
    for _ in range(2):
        with pytest.raises(solver.InputError) as info:
            parse_values(integ, values, fixed)
        assert str(info.value) == message


def test_a_batchs_state_scales_are_each_rows_scale():
    from solver.integrate.initialize import state_scale, state_scales

    Z = np.array([[0.5, -0.2], [3.0, -7.5], [np.nan, 0.1], [np.inf, 2.0]])
    assert list(state_scales(Z)) == [1.0, 7.5, 1.0, np.inf]
    assert [state_scale(z) for z in Z] == [1.0, 7.5, 1.0, np.inf]
    assert list(state_scales(np.zeros((3, 0)))) == [1.0, 1.0, 1.0] and state_scale(np.zeros(0)) == 1.0
