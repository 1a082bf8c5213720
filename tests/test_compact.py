"""The compact Taylor engine (solver/taylor/compact.py): a scalar tape evaluated in groups.

What it promises beyond the coefficient checks in test_taylor.py (every
primitive against nested jacfwd, all engines):

* the program's size (its groups) depends on neither the order nor how many
  elements the model has, only on the depth of its expression graph;
* data movement and sums cost nothing: they are resolved when the tape is
  built;
* every scalar has its own order offset, so models whose vectors mix offsets
  (the array engines recompute a window of orders for them) need no window;
* batched runs (``jax.vmap``, the slot pool) equal single runs;
* an operation it cannot decompose makes ``mode="auto"`` fall back to the
  looped engine, and ``mode="compact"`` say which operation and where.

Its convergence order is checked with the other engines' in
test_integrate.py.
"""

import math

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import solver
from models_for_tests import pendulum_chain
from solver.api import integrator_for
from solver.taylor.compact import CompactProgram, CompactUnsupportedError
from solver.taylor.program import TaylorProgram


def compact_of(dae, order):
    s = dae.structure
    return CompactProgram(TaylorProgram(dae, s.c, s.d, order))


def test_program_size_depends_neither_on_the_order_nor_on_the_number_of_bodies():
    sizes = {(n, p): compact_of(pendulum_chain(n), p) for n in (2, 6) for p in (8, 20)}
    groups = {key: cp.n_groups for key, cp in sizes.items()}
    assert len(set(groups.values())) == 1, groups
    # ... while the table grows with the model (one row per scalar node).
    assert sizes[(6, 8)].n_nodes > 2 * sizes[(2, 8)].n_nodes


def test_data_movement_and_sums_have_no_operations_of_their_own():
    """y = sum of a reshaped, transposed, concatenated, reversed copy of x: linear, so no groups."""
    def residual(t, v, p):
        x = v["x"][0]
        moved = jnp.concatenate([x.reshape(2, 2).T.ravel(), x[::-1]])
        return [v["x"][1] - jnp.sin(t) * jnp.ones(4), v["y"][0] - jnp.sum(moved) - 2.0 * moved[1]]

    dae = solver.DAE(residual, {"x": 4, "y": 1})
    cp = compact_of(dae, 6)
    assert [g.kind for g in cp.groups] == ["sincos"]  # sin t is the only nonlinear operation
    integ = integrator_for(dae, 6, mode="compact")
    X, _, status, _ = jax.jit(lambda: integ.series(jnp.zeros(4), jnp.zeros(5), 0.4, integ.prog.constants({})))()
    assert int(status) == 0
    # From x = 0 every element follows x' = sin t alike, and
    # y = sum(moved) + 2 moved[1] = 2 sum(x) + 2 x[2] = 10 x[0].
    # (y has d = 0: its series ends at order p = 6, x's at p + 1.)
    np.testing.assert_allclose(np.asarray(X["y"][:7]), 10.0 * np.asarray(X["x"][:7, :1]), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(np.asarray(X["x"][2, 0]), math.cos(0.4) / 2, rtol=1e-13)  # x''/2!


def test_a_3d_rigid_body_needs_no_window_in_the_compact_engine(tmp_path):
    """A 3-D body hinged at O with a marker point D tied to it: D's
    coordinates (d = 0) and the frame points' (d = 2) meet in the body's
    vectors, so the array engines recompute a window of 3 orders per stage.
    The scalar tape gives each element its own offset: no window, and the
    body swings conserving its energy."""
    path = tmp_path / "hinged.yaml"
    path.write_text(HINGED_BODY)
    model = solver.load(path)
    s = model.dae.structure
    prog = TaylorProgram(model.dae, s.c, s.d, 10)
    assert prog.window == 3
    cp = CompactProgram(prog)
    assert cp.k_start == -cp.max_off  # no extra stages for a window
    ds = model.solve(mode="compact", t_eval=np.linspace(0.0, 1.0, 11))
    assert int(ds.status) == 0
    e = ds.energy.values
    assert np.max(np.abs(e - e[0])) < 1e-9
    assert float(np.max(np.abs(ds.constraint_residual.values))) < 1e-10


HINGED_BODY = """\
Title: Hinged body with a marker point
Kind: Mechanism
Dimension: 3
PhysicalParams: {a: 1.0, b: 0.5, M: 1.0}
PartData:
  Fixed: {O: [0, 0, 0]}
  Rigids:
    P: {points: [O, P1, P2, D], Geom: [[a, 0, 0], [0, b, 0], [a, b, 0.2]],
        Dyna: [[0.3, 0.2, 0], M, [0.2, 0.3, 0.4]]}
AppliedForces:
  Gravity: true
ProblemData:
  tend: 1
  positions: {P1: [a, 0, 0], P2: [0, b, 0], D: [a, b, 0.2]}
  fixedpositions: {P1y, P1z, P2z}     # the free components are simple roots
  velocities: {P1y: 0.1, P1z: 0.2, P2z: 0.3}
"""


def pendulum(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - 9.81, x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


PEND = solver.DAE(pendulum, ["x", "y", "lam"], {"L": 1.0})


def test_a_batch_of_lengths_equals_single_runs_and_the_exact_period():
    """run_batch (vmap through the engine's own batching rule) against one
    run per length, and each against the elliptic-integral period."""
    from scipy.special import ellipk

    Ls = np.array([0.5, 1.0, 2.0])
    th0 = 0.9
    t1 = 3.0
    batch = solver.solve_batch(PEND, {"L": Ls}, values=lambda p: {"x": float(p["L"]) * math.sin(th0),
                                                                  "y": float(p["L"]) * math.cos(th0),
                                                                  "x'": 0.0},
                               fixed=["x", "x'"], t_span=(0.0, t1), t_eval=np.linspace(0, t1, 31), tol=1e-11,
                               mode="compact")
    assert np.all(batch.status.values == 0)
    for i, L in enumerate(Ls):
        one = solver.solve(PEND, (0.0, t1), params={"L": L}, values={"x": L * math.sin(th0), "y": L * math.cos(th0),
                                                                      "x'": 0.0},
                           fixed=["x", "x'"], t_eval=np.linspace(0, t1, 31), tol=1e-11, mode="compact")
        np.testing.assert_allclose(batch.x.values[i], one.x.values, atol=1e-12)
        # Period 4 sqrt(L/g) K(sin²(θ0/2)): after half a period x = -x0.
        half = 2.0 * math.sqrt(L / 9.81) * ellipk(math.sin(th0 / 2) ** 2)
        r = solver.solve(PEND, (0.0, half), params={"L": L}, values={"x": L * math.sin(th0), "y": L * math.cos(th0),
                                                                     "x'": 0.0},
                         fixed=["x", "x'"], t_eval=np.array([0.0, half]), tol=1e-12, mode="compact")
        assert abs(float(r.x.values[-1]) + L * math.sin(th0)) < 1e-9 * max(1.0, L)


def indexed_by_parameter(t, v, p):
    # A dynamic index that depends on a parameter: the compact tape resolves
    # indices when it is built, so it cannot decompose this.
    i = p["which"].astype(jnp.int32)
    vec = jnp.stack([v["y"][0], 2.0 * v["y"][0]])
    return [v["y"][1] - jax.lax.dynamic_index_in_dim(vec, i, 0, keepdims=False) * jnp.cos(v["y"][0])]


def test_an_operation_it_cannot_decompose_is_named_and_auto_falls_back(monkeypatch):
    dae = solver.DAE(indexed_by_parameter, ["y"], {"which": 1.0})
    with pytest.raises(CompactUnsupportedError, match="cannot decompose the operation 'dynamic_slice'.*"
                                                      "its indices depend on the parameters"):
        integrator_for(dae, 6, mode="compact")
    import solver.integrate.choices as choices
    from solver.integrate.integrator import Integrator

    monkeypatch.setattr(choices, "UNROLL_MAX_OPS", 0)  # auto would choose compact
    s = dae.structure
    integ = Integrator(TaylorProgram(dae, s.c, s.d, 6), mode="auto")
    assert integ.mode == "looped"
    ds = solver.solve(dae, (0.0, 1.0), values={"y": 0.3}, tol=1e-10, params={"which": 1.0})
    assert int(ds.status) == 0


def test_auto_takes_compact_for_one_run_of_a_medium_model_and_unrolled_for_its_batches():
    """Mechanism0's tape (about 13,600 operations) is above the single-run
    limit and below the batch one: solve() compiles the compact engine (half
    the compile time), solve_batch() the unrolled one (the fastest steps)."""
    from pathlib import Path

    from solver.integrate.integrator import UNROLL_MAX_OPS, UNROLL_MAX_OPS_SINGLE, choose_mode, tape_ops

    model = solver.load(Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "mechanism0.yaml")
    s = model.dae.structure
    prog = TaylorProgram(model.dae, s.c, s.d, 12)
    assert UNROLL_MAX_OPS_SINGLE < tape_ops(prog) <= UNROLL_MAX_OPS
    assert choose_mode(prog, "auto", batch=False) == "compact"
    assert choose_mode(prog, "auto", batch=True) == "unrolled"
    single = solver.compiled_model(model.dae, 12, batch=False)
    batch = solver.compiled_model(model.dae, 12, batch=True)
    assert single.integrator.mode == "compact" and batch.integrator.mode == "unrolled"
    assert solver.compiled_model(model.dae, 12, batch=False) is single   # built once each
    assert solver.compiled_model(model.dae, 12, mode="unrolled", batch=False) is \
        solver.compiled_model(model.dae, 12, mode="unrolled")             # batch only matters for auto
    assert solver.compiled_model(model.dae, 12, mode="compact") is single  # one per engine taken
    assert solver.compiled_model(model.dae, 12, mode="unrolled") is batch
    pendulum = solver.load(Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "pendulum.yaml")
    assert solver.compiled_model(pendulum.dae, 12, batch=False) is solver.compiled_model(pendulum.dae, 12)


def test_a_batch_of_one_point_is_one_run_on_the_single_run_engine():
    """solve_batch() of one point makes the engine choice solve() makes (one
    run: Mechanism0's compact engine, not the batches' unrolled one), with the
    same solution; two points take the batch engine, unless batch_engine=False
    asks for the single-run one."""
    from pathlib import Path

    model = solver.load(Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "mechanism0.yaml")
    span = (model.t0, model.t0 + 0.2)
    times = np.linspace(*span, 11)
    k = model.dae.param_values({})["k"]
    one = solver.solve_batch(model, {"k": [k]}, t_span=span, t_eval=times, order=12)
    two = solver.solve_batch(model, {"k": [k, k]}, t_span=span, t_eval=times, order=12)
    asked = solver.solve_batch(model, {"k": [k, k]}, t_span=span, t_eval=times, order=12, batch_engine=False)
    run = model.solve(t_span=span, t_eval=times, order=12)
    assert one.attrs["solver_mode"] == run.attrs["solver_mode"] == asked.attrs["solver_mode"] == "compact"
    assert two.attrs["solver_mode"] == "unrolled"
    for name in ("A", "B", "lam"):
        np.testing.assert_allclose(one[name].values[0], run[name].values, rtol=0, atol=1e-12)
        np.testing.assert_allclose(two[name].values[1], run[name].values, rtol=0, atol=1e-9)
        np.testing.assert_allclose(asked[name].values[1], run[name].values, rtol=0, atol=1e-9)


# Each operation applied to an *unknown*: G(y, t) = G(a(t), t) has the
# solution y = a(t), so y's series is a's, and at every stage k >= 1 the
# unknown y_k reaches the residual through G at the same stage (test_taylor's
# cases reach it only through t, whose coefficients are all known).
def _a(t):
    return 0.4 + 0.7 * t - 0.5 * t**2 + 0.2 * jnp.sin(2 * t)


def _b(t):
    return 1.3 + 0.3 * jnp.cos(t) + 0.25 * t**3


ON_THE_UNKNOWN = {
    "mul": lambda y, t: y * _b(t) + y * y,
    "div": lambda y, t: _b(t) / (y + 2.0),
    "sqrt": lambda y, t: jnp.sqrt(y + 2.0),
    "real_pow": lambda y, t: (y + 2.0) ** 1.7,
    "series_pow": lambda y, t: (y + 2.0) ** _b(t),
    "exp": lambda y, t: jnp.exp(y),
    "log": lambda y, t: jnp.log(y + 2.0),
    "sin": lambda y, t: jnp.sin(y),
    "cos": lambda y, t: jnp.cos(y + 0.5),
    "sinh_cosh": lambda y, t: jnp.sinh(y) + jnp.cosh(y),
    "asin": lambda y, t: jnp.arcsin(0.5 * y),
    "acos": lambda y, t: jnp.arccos(0.5 * y),
    "atan": lambda y, t: jnp.arctan(y),
    "atan2": lambda y, t: jnp.arctan2(y, _b(t)),
    "atan2_denominator": lambda y, t: jnp.arctan2(_b(t), y),
    "abs": lambda y, t: jnp.abs(y - 2.0),
    "where": lambda y, t: jnp.where(y > 0, y * _b(t), -y),
    "chain": lambda y, t: jnp.exp(jnp.sin(y) * _b(t)) / (1.0 + y * y),
    # Powers of one base folded into one (ScalarBuilder._fold_powers).
    "powers_of_a_norm": lambda y, t: 0.5 / jnp.sqrt(y * y + _b(t)) / (jnp.sqrt(y * y + _b(t)) * jnp.sqrt(y * y + _b(t))),
    "quotient_of_powers": lambda y, t: jnp.sqrt(y * y + _b(t)) / (y * y + _b(t)),
    "reciprocal_roots": lambda y, t: (2.0 / jnp.sqrt(y + 2.0)) * (3.0 / jnp.sqrt(y + 2.0)),
}
# The same with parameters as the constant factors (a ScalarBuilder product of constants).
WITH_PARAMETERS = {
    "powers_of_a_norm": lambda y, p: p["a"] / jnp.sqrt(y * y + 1.5) / (p["b"] * jnp.sqrt(y * y + 1.5) ** 2),
    "quotient_of_powers": lambda y, p: p["a"] * jnp.sqrt(y * y + 1.5) / (p["b"] * (y * y + 1.5)),
}
# What each folds into: no square root is left, and at most one quotient.
FOLDED = {"powers_of_a_norm": ("powc", 0), "quotient_of_powers": ("powc", 0), "reciprocal_roots": ("div", 1)}


def test_every_operation_on_an_unknown_gives_the_exact_series():
    order, t0 = 9, 0.3
    names = sorted(ON_THE_UNKNOWN)
    dae = solver.DAE(lambda t, v, p: [ON_THE_UNKNOWN[n](v[n][0], t) - ON_THE_UNKNOWN[n](_a(t), t)
                                      for n in names], names)
    integ = integrator_for(dae, order, mode="compact")
    consts = integ.prog.constants({})
    guess = jnp.full(len(names), float(_a(t0)))
    X, u, status, _ = jax.jit(lambda: integ.series(jnp.zeros(0), guess, t0, consts))()
    assert int(status) == 0
    ref, f = [], _a
    for k in range(order + 1):
        ref.append(float(jax.jit(f)(t0)) / math.factorial(k))
        f = jax.jacfwd(f)
    for n in names:
        np.testing.assert_allclose(np.asarray(X[n][: order + 1]), ref, rtol=1e-11, atol=1e-12, err_msg=n)


def test_powers_of_one_base_become_one_power():
    """x^p · x^q = x^(p+q): a gravitational pair's Lagrangian, differentiated,
    reads (1/2)/sqrt(s) · 1/(sqrt(s)·sqrt(s)) for s^(-3/2) (s the squared
    distance).  The tape keeps one power per pair, no square root and no
    quotient; the series are exact (the operations above, against nested
    jacfwd) and the Pleiades reach their published positions
    (test_seed_models.py)."""
    from pathlib import Path

    model = solver.load(Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "pleiades.yaml")
    cp = compact_of(model.dae, 12)
    kinds = {}
    for g in cp.groups:
        kinds[g.kind] = kinds.get(g.kind, 0) + g.size
    assert kinds == {"lin": 63, "mul": 84, "powc": 21}, kinds  # 21 pairs: dx², dy², s^(-3/2), two forces
    (powers,) = [g for g in cp.groups if g.kind == "powc"]
    consts = np.asarray(cp.constant_values(cp.prog.constants(model.params)))
    exponents = {float(consts[int(src)]) for src in np.ravel(powers.ops[1].src)}
    assert exponents == {-1.5}


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_the_folded_operations_keep_no_root(name):
    f = ON_THE_UNKNOWN[name]
    dae = solver.DAE(lambda t, v, p: [v["y"][1] - f(v["y"][0], 0.3)], ["y"])
    kinds = [g.kind for g in compact_of(dae, 6).groups]
    kind, n_div = FOLDED[name]
    assert kind in kinds and "sqrt" not in kinds and kinds.count("div") == n_div, kinds


@pytest.mark.parametrize("name", sorted(WITH_PARAMETERS))
def test_powers_with_parameter_factors_fold_and_keep_their_values(name):
    """y' = f(y; a, b) with parameter factors: one power in the tape, and the
    first stage's coefficients (y' and y''/2 at the initial point) equal f and
    f' f computed by JAX at the same point."""
    f = WITH_PARAMETERS[name]
    dae = solver.DAE(lambda t, v, p: [v["y"][1] - f(v["y"][0], p)], ["y"], {"a": 1.3, "b": 0.7})
    kinds = [g.kind for g in compact_of(dae, 6).groups]
    assert "powc" in kinds and "sqrt" not in kinds and "div" not in kinds, kinds
    integ = integrator_for(dae, 6, mode="compact")
    params = {"a": jnp.asarray(1.3), "b": jnp.asarray(0.7)}
    consts = integ.prog.constants(params)
    y0 = 0.4
    X, _, status, _ = jax.jit(lambda: integ.series(jnp.array([y0]), jnp.zeros(1), 0.0, consts))()
    assert int(status) == 0
    g = lambda y: f(y, params)
    np.testing.assert_allclose(float(np.ravel(X["y"])[1]), float(g(y0)), rtol=1e-13)
    np.testing.assert_allclose(float(np.ravel(X["y"])[2]), float(jax.grad(g)(y0) * g(y0)) / 2, rtol=1e-12)


def test_a_plain_square_stays_a_product():
    """x · x is left a product (its recurrence never divides by x, a power's does)."""
    dae = solver.DAE(lambda t, v, p: [v["y"][1] - v["y"][0] * v["y"][0]], ["y"])
    assert [g.kind for g in compact_of(dae, 6).groups] == ["mul"]


def scaled_twice(t, v, p):
    y = v["y"]
    return [y[1] - p["a"] * (p["b"] * y[0]) - y[0] / (p["a"] * p["b"])]


def test_a_parameter_times_a_parameter_times_a_series_stays_linear():
    """a · (b · y) and y / (a · b) with parameters a, b are linear in y: the
    tape keeps them as terms whose constant factor is the product a · b (or
    its reciprocal), with no product or quotient to evaluate at every order.
    y' = (ab + 1/(ab)) y, so y(t) = exp((ab + 1/(ab)) t) for each (a, b) of a batch."""
    dae = solver.DAE(scaled_twice, ["y"], {"a": 1.0, "b": 1.0})
    assert compact_of(dae, 8).groups == []
    a, b = np.array([0.5, 1.0, 2.0]), np.array([0.8, 1.5, 0.25])
    t1 = 0.7
    batch = solver.solve_batch(dae, {"a": a, "b": b}, values={"y": 1.0}, fixed=["y"], t_span=(0.0, t1),
                               t_eval=np.array([0.0, t1]), tol=1e-12, mode="compact")
    assert np.all(batch.status.values == 0)
    rate = a * b + 1.0 / (a * b)
    np.testing.assert_allclose(batch.y.values[:, -1], np.exp(rate * t1), rtol=1e-10)


def test_the_end_of_a_pass_writes_each_node_at_its_own_order_and_nowhere_else():
    """_merge writes R[i] at column k + off_i of row i (in blocks of rows with one offset), leaves every
    other entry, and stores nothing for a node whose order is below zero (the stages k < 0), for one
    table and for a batch of them; Mechanism0 has offsets 0 and 2 in five blocks."""
    from pathlib import Path

    model = solver.load(Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "mechanism0.yaml")
    cp = compact_of(model.dae, 12)
    assert {off for _, _, off in cp.offset_runs} == {0, 2} and len(cp.offset_runs) > 2
    rng = np.random.default_rng(3)
    for batch in ((), (3,)):
        C = rng.normal(size=(cp.n_nodes, cp.K) + batch)
        R = rng.normal(size=(cp.n_nodes,) + batch)
        for k in range(cp.k_start, 4):
            want = C.copy()
            for i, off in enumerate(cp.new_off):
                if 0 <= k + off < cp.K:
                    want[i, k + off] = R[i]
            got = jax.jit(cp._merge)(jnp.asarray(C), jnp.asarray(R), jnp.asarray(k))
            np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"stage {k}, batch {batch}")


def test_a_step_traces_its_stage_pass_once_for_every_stage_that_calls_it(monkeypatch):
    """The negative stages, stage 0 (inside its Newton iteration and its Jacobian) and the positive
    stages all evaluate the same pass over the groups; it is traced once per shape (an inner jit), and
    the series it gives are those of the looped engine."""
    traced = []
    pass_values = CompactProgram._stage_pass_values

    def counted(self, C, Xf, k):
        traced.append(C.shape)
        return pass_values(self, C, Xf, k)

    monkeypatch.setattr(CompactProgram, "_stage_pass_values", counted)
    from solver.integrate.initialize import parse_values

    dae = pendulum_chain(2)
    integ = integrator_for(dae, 8, mode="compact")
    assert integ.prog.k_start < 0          # negative stages too
    values = {"r": [0.6, 0.0, 0.8, 1.4, 0.0, 1.4], "r'": [0.0, 0.5, 0.0, 0.0, 0.5, 0.0]}
    spec = parse_values(integ, values, ["r", "r'"])
    z0 = jnp.asarray(solver.consistent_point(integ, dae.params, 0.0, spec))
    series = jax.jit(lambda z: integ.series(z, jnp.asarray(spec.u_guess), 0.0, integ.prog.constants(dae.params)))
    X, _, status, _ = series(z0)
    assert traced == [traced[0]] and int(status) == 0
    looped = integrator_for(dae, 8, mode="looped")
    Y, _, status, _ = jax.jit(lambda z: looped.series(z, jnp.asarray(spec.u_guess), 0.0,
                                                      looped.prog.constants(dae.params)))(z0)
    assert int(status) == 0 and set(X) == set(Y)
    for name in X:
        np.testing.assert_allclose(np.asarray(X[name]), np.asarray(Y[name]), rtol=1e-12, atol=1e-12, err_msg=name)
