"""Every point's initial values in one pass over a batch (``Model.initial_values_table``).

Specification:

* ``solver.solve_batch`` evaluates a model's own initial values over the
  columns of the parameters that vary, in one call, not once per point;
* each point's values are bit for bit those of ``Model.initial_values`` at
  that point, for every kind of model file (DAE, Lagrangian, Mechanism) and
  through derived parameters, so a batch's results are exactly those of the
  per-point path (the reference: ``values=`` a function of the point, which
  ``solve_batch`` calls once per point);
* where an initial value does more with a varying parameter than
  elementwise arithmetic (``norm``, ``dot``), or some point's values fail,
  the batch is evaluated point by point as before, and a failing point gets
  the per-point path's message.
"""

from pathlib import Path

import numpy as np
import pytest

import solver
from solver import status as st
from solver.integrate.initialize import parse_values, parse_values_table
from solver.models.expr import NotElementwise, evaluate_constant, evaluate_constant_table

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"
RNG = np.random.default_rng(7)


def bits(a) -> np.ndarray:
    """The float64 values' bit patterns (equal bits: identical numbers, NaN included)."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


# ------------------------------------------------------------------ expressions
EXPRESSIONS = [
    "L", "2.5", "L*cos(th) + g/L - 1/(L*L)", "-L**2/3 + exp(-L)*log(L)", "sqrt(L)*sin(th)",
    "L**2", "L**3", "L**-1", "L**0.5", "L**2.5", "L**th", "2**L", "(L + th)**2", "(L*th)**3", "(-L)**2",
    "cos(L)**2", "L**(th*0 + 2)", "atan2(L, th)", "tanh(L) + asin(th/4) + acos(th/4) + atan(L) + tan(th)",
    "max(L, 1) + min(th, 0) + abs(th) + sign(th) + step(th)", "where(th, L, -L)",
    "[L*cos(th), L*sin(th), 0]", "([L, th])[1]*2", "v[0]*L + norm(v)", "pi*L",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_an_expression_over_columns_is_each_point_alone_bit_for_bit(text):
    n = 400
    L, th = RNG.uniform(0.2, 3.0, n), RNG.uniform(-3.0, 3.0, n)
    constants = {"g": 9.81, "v": np.array([0.3, 0.4])}
    table = evaluate_constant_table(text, {"L": L, "th": th, **constants}, {"L", "th"}, n)
    alone = np.array([np.asarray(evaluate_constant(text, {"L": L[i], "th": th[i], **constants}))
                      for i in range(n)])
    assert table.shape == alone.shape
    np.testing.assert_array_equal(bits(table), bits(alone))


@pytest.mark.parametrize("text", ["norm([L, 1])", "dot([L, 1], [1, 2])", "(cross([L, 0, 0], [0, 1, 0]))[2]",
                                  "[[L, 0], [0, 1]]", "1/(L - 1)", "log(L - 2)"])
def test_more_than_elementwise_work_or_a_value_that_is_not_finite_is_refused(text):
    L = np.array([0.5, 1.0, 1.5])
    with pytest.raises(NotElementwise):
        evaluate_constant_table(text, {"L": L}, {"L"}, 3)


# ------------------------------------------------------------------ models
DERIVED = """\
Title: Pendulum of derived length
Kind: DAE
PhysicalParams: {g: 9.81, a: 0.5, th0: 0.4, L: 2*a, w0: sqrt(g/L)}
Variables: [x, y, lam]
Equations:
  - x'' + lam*x
  - y'' + lam*y - g
  - x**2 + y**2 - L**2
ProblemData:
  t0: 0
  tend: 0.5
  values: {x: L*sin(th0), y: L*cos(th0), x': w0*L*cos(th0)/10, y': 0}
  fixed: [x, x']
  samples: 11
"""

# model, swept parameters and their ranges (initial values that depend on them, or not: RSCR)
MODELS = {
    "pendulum (DAE)": (CONFIGS / "pendulum.yaml", {"L": (0.5, 2.0)}),
    "derived (DAE)": (DERIVED, {"a": (0.3, 1.5), "th0": (-1.0, 1.0)}),
    "fourbar (Lagrangian)": (CONFIGS / "fourbar.yaml", {"a": (0.8, 1.2), "th": (0.0, 6.0), "w": (1.0, 8.0)}),
    "rscr (Lagrangian)": (CONFIGS / "rscr.yaml", {"L2": (0.98, 1.18), "gamma": (1.25, 1.45)}),
    "mechanism0 (Mechanism)": (CONFIGS / "mechanism0.yaml", {"L": (0.5, 2.0), "m": (1.0, 4.0)}),
    "free_body (Mechanism)": (CONFIGS / "free_body.yaml", {"a": (0.5, 2.0), "b": (0.5, 2.0)}),
}


def _batch(model, ranges, n):
    """(full parameter columns, swept names): every free parameter per point, as solve_batch holds them."""
    full = {k: np.full(n, v) if np.ndim(v) == 0 else np.broadcast_to(v, (n,) + np.shape(v)).copy()
            for k, v in model.params.items()}
    for name, (lo, hi) in ranges.items():
        full[name] = RNG.uniform(lo, hi, n)
    return full, set(ranges)


@pytest.mark.parametrize("case", list(MODELS))
def test_each_kind_gives_every_point_its_own_initial_values(case):
    source, ranges = MODELS[case]
    model = solver.load(source)
    n = 64
    full, swept = _batch(model, ranges, n)
    table = model.initial_values_table({k: (v if k in swept else v[0]) for k, v in full.items()}, swept, n)
    assert table is not None
    points = [model.initial_values({k: v[i] for k, v in full.items()}) for i in range(n)]
    assert list(table) == list(points[0])
    for key, column in table.items():
        alone = np.array([np.broadcast_to(np.asarray(p[key], dtype=float), column.shape[1:]) for p in points])
        np.testing.assert_array_equal(bits(column), bits(alone), err_msg=key)
    # ... and the state guesses they make, as parse_values makes them point by point.
    integ = solver.compiled_model(model.dae, solver.order_for_tol(model.tol)).integrator
    z_hat, u_guess, free = parse_values_table(integ, table, model.fixed, n)
    specs = [parse_values(integ, p, model.fixed) for p in points]
    np.testing.assert_array_equal(bits(z_hat), bits(np.stack([s.z_hat for s in specs])))
    np.testing.assert_array_equal(bits(u_guess), bits(np.stack([s.u_guess for s in specs])))
    np.testing.assert_array_equal(free, np.stack([s.free for s in specs]))


def test_a_value_that_needs_more_than_elementwise_work_is_left_to_the_per_point_path():
    model = solver.load(CONFIGS / "pendulum.yaml",
                        overrides={"ProblemData": {"values": {"x": "norm([L, 0])"}}})
    full, swept = _batch(model, {"L": (0.5, 2.0)}, 5)
    assert model.initial_values_table({"L": full["L"], "g": 9.81}, swept, 5) is None


# ------------------------------------------------------------------ solve_batch
def _solve_both(model, table, monkeypatch):
    """solve_batch's result and that of the per-point path; how often each called the model's values."""
    calls = []
    real = model._values
    monkeypatch.setattr(model, "_values", lambda params: calls.append(1) or real(params))
    fast = solver.solve_batch(model, table)
    fast_calls = len(calls)
    ref = solver.solve_batch(model, table, values=lambda p: model.initial_values(p))
    return fast, ref, fast_calls, len(calls) - fast_calls


def _assert_identical(ds, ref):
    assert set(ds.data_vars) == set(ref.data_vars)
    for name in ref.data_vars:
        a, b = ds[name].values, ref[name].values
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
    assert ds.attrs.get("failures") == ref.attrs.get("failures")


@pytest.mark.parametrize("case", ["pendulum (DAE)", "rscr (Lagrangian)"])
def test_solve_batch_is_the_per_point_path_bit_for_bit(case, monkeypatch):
    source, ranges = MODELS[case]
    model = solver.load(source, overrides={"ProblemData": {"tend": 0.5, "samples": 11}})
    n = 6
    full, swept = _batch(model, ranges, n)
    fast, ref, fast_calls, ref_calls = _solve_both(model, {k: full[k] for k in swept}, monkeypatch)
    assert fast_calls == 0 and ref_calls == n      # one pass for the batch against one call per point
    assert (fast.status.values == st.SUCCESS).all()
    _assert_identical(fast, ref)


def test_a_point_whose_values_fail_gets_the_per_point_message(monkeypatch):
    # x = L, written so that it is not finite at L = 0.9: that point alone fails; the others run.
    model = solver.load(CONFIGS / "pendulum.yaml", overrides={
        "ProblemData": {"tend": 0.5, "samples": 11, "values": {"x": "L/(L - 0.9) - L/(L - 0.9) + L"}}})
    fast, ref, _, ref_calls = _solve_both(model, {"L": np.array([0.8, 0.9, 1.2])}, monkeypatch)
    assert ref_calls == 3
    assert fast.status.values.tolist() == [st.SUCCESS, st.NO_ASSEMBLY, st.SUCCESS]
    assert "initial values" in fast.attrs["failures"] and "not finite" in fast.attrs["failures"]
    _assert_identical(fast, ref)


@pytest.mark.parametrize("case", ["fourbar (Lagrangian)", "mechanism0 (Mechanism)"])
def test_a_column_that_is_not_finite_is_left_to_the_per_point_path(case):
    # The scope's table refuses it (NotElementwise) and the model answers None: no exception
    # escapes, and the per-point path words the error for that point.
    source, ranges = MODELS[case]
    model = solver.load(source)
    full, swept = _batch(model, ranges, 4)
    name = sorted(swept)[0]
    full[name][2] = np.nan
    assert model.initial_values_table({k: (v if k in swept else v[0]) for k, v in full.items()}, swept, 4) is None
