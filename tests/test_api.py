"""solver.api: the front door, ``solve`` for one run and ``solve_batch`` for many designs.

References: scipy's DOP853 on the pendulum's angle ODE (an independent
integrator on the ODE form of the same physics), and ``solve`` itself for
``solve_batch`` (the same run, point by point).
"""

import json

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import solver
from solver import status as st

T_END = 3.0
TIMES = np.linspace(0.0, T_END, 31)


def pendulum(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


PEND = solver.DAE(pendulum, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})


def release(p):
    """Released at rest from x = 0.8 L (y found by the consistent-point solver)."""
    return {"x": 0.8 * float(p["L"]), "y": 0.5, "x'": 0.0, "y'": 0.0}


def scipy_x(L, g=9.81):
    """x(t) = L sin θ(t), θ'' = −(g/L) sin θ, from DOP853 at tight tolerances."""
    sol = solve_ivp(lambda t, s: [s[1], -(g / L) * np.sin(s[0])], (0.0, T_END), [np.arcsin(0.8), 0.0],
                    method="DOP853", rtol=1e-13, atol=1e-13, t_eval=TIMES)
    return L * np.sin(sol.y[0])


@pytest.fixture(scope="module")
def batch():
    lengths = np.array([0.5, 1.0, 2.0, 0.25])
    return lengths, solver.solve_batch(PEND, {"L": lengths}, release, ["x", "x'"], t_span=(0.0, T_END),
                                       t_eval=TIMES, tol=1e-10)


def test_solve_batch_matches_an_independent_integrator_for_every_design(batch):
    lengths, ds = batch
    assert ds.sizes["point"] == 4 and (ds["status"].values == st.SUCCESS).all()
    np.testing.assert_array_equal(ds["L"].values, lengths)
    for i, L in enumerate(lengths):
        np.testing.assert_allclose(ds["x"].values[i], scipy_x(L), rtol=0, atol=1e-8 * L)
    assert ds["constraint_residual"].max() < 1e-9
    # The pool's default slot count (Integrator.default_slots) is recorded.
    assert ds.attrs["solver_slots"] == 32


def test_solves_from_two_threads_run_one_at_a_time_with_their_own_results(batch, monkeypatch):
    """jaxlib 0.10.2's LAPACK kernels wait on XLA's thread pool for the pieces of a large batch;
    two solves executing at once from two threads took both threads of a 2-core pool and hung
    (200 RSCR designs).  So a process solves one problem at a time: each thread's integration
    starts after the other's ended, and each gets the numbers it would get alone."""
    import solver.api as api
    from overlap import OverlapCounter, in_two_threads

    lengths, alone = batch
    counter = OverlapCounter(pause=0.3)
    monkeypatch.setattr(api, "_integrate", counter.wrap(api._integrate))
    results = in_two_threads(lambda: solver.solve_batch(PEND, {"L": lengths}, release, ["x", "x'"],
                                                        t_span=(0.0, T_END), t_eval=TIMES, tol=1e-10))
    assert counter.most == 1
    for ds in results:
        np.testing.assert_array_equal(ds["x"].values, alone["x"].values)


def test_each_point_of_a_batch_is_the_run_solve_makes(batch):
    lengths, ds = batch
    for i, L in enumerate(lengths):
        one = solver.solve(PEND, (0.0, T_END), release({"L": L}), ["x", "x'"], tol=1e-10, t_eval=TIMES,
                           params={"L": L})
        # A batch also says when and why each point failed (a single run: attrs t_final, status_meaning).
        assert set(one.data_vars) == set(ds.data_vars) - {"failure_time", "failure_reason"}
        assert np.isnan(ds["failure_time"].values[i]) and ds["failure_reason"].values[i] == ""
        for name in ("x", "x_d1", "y", "y_d1", "lam"):
            np.testing.assert_allclose(ds[name].values[i], one[name].values, rtol=0, atol=1e-12)
        assert int(ds["steps"].values[i]) == int(one["steps"])


def test_a_design_that_cannot_assemble_fails_alone_with_its_reason():
    # x0 = 0.8 L with a fixed x0 of 1.6: a rod of length 1 cannot reach it.
    ds = solver.solve_batch(PEND, {"L": [1.0, 2.0]}, {"x": 1.6, "y": 0.5, "x'": 0.0, "y'": 0.0}, ["x", "x'"],
                            t_span=(0.0, 1.0), samples=5, tol=1e-8)
    assert ds["status"].values.tolist() == [st.NO_ASSEMBLY, st.SUCCESS]
    assert np.isnan(ds["x"].values[0]).all() and np.isfinite(ds["x"].values[1]).all()
    reason = json.loads(ds.attrs["failures"])
    assert list(reason) == ["0"] and reason["0"].startswith("no consistent initial point found")
    # f2 (the rod, x^2 + y^2 = L^2) and its derivative are one equation of a plain DAE: named once.
    assert ds["failure_time"].values.tolist()[0] == 0.0 and np.isnan(ds["failure_time"].values[1])
    assert ds["failure_reason"].values.tolist() == [
        "no assembly: no consistent initial point; violated at the closest point found: f2", ""]


def test_constants_apply_to_every_point_and_are_recorded():
    moon = solver.solve_batch(PEND, {"L": [1.0]}, release, ["x", "x'"], params={"g": 1.6},
                              t_span=(0.0, T_END), t_eval=TIMES, tol=1e-10)
    np.testing.assert_allclose(moon["x"].values[0], scipy_x(1.0, g=1.6), rtol=0, atol=1e-8)
    assert json.loads(moon.attrs["parameters"]) == {"g": 1.6}


def test_a_model_supplies_every_default(tmp_path):
    path = tmp_path / "pendulum.yaml"
    path.write_text("""\
Title: Pendulum
Kind: DAE
PhysicalParams: {g: 9.81, L: 1.0}
Variables: [x, y, lam]
Equations: ["x'' + lam*x", "y'' + lam*y - g", "x**2 + y**2 - L**2"]
ProblemData:
  tend: 3
  values: {x: 0.8*L, y: 0.5, x': 0, y': 0}
  fixed: [x, x']
  samples: 31
SolverParams:
  Integration: {tol: 1.0e-10}
""")
    model = solver.load(path)
    ds = solver.solve_batch(model, {"L": [0.5, 2.0]})
    assert ds.attrs["title"] == "Pendulum" and ds.attrs["model_kind"] == "DAE"
    np.testing.assert_allclose(ds["time"].values, TIMES)
    for i, L in enumerate((0.5, 2.0)):
        np.testing.assert_allclose(ds["x"].values[i], scipy_x(L), rtol=0, atol=1e-8 * L)


TIMES_SHORT = np.linspace(0.0, 1.0, 11)     # the output times of _short_pendulum


def _short_pendulum():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "pendulum.yaml"
    return solver.load(path, overrides={"ProblemData": {"tend": 1.0, "samples": 11}})


def _series_computed(monkeypatch) -> list:
    """The series ``Compiled.output_series`` computes from now on ("residual", "energy"), in a list."""
    from solver.compiled import Compiled

    calls = []
    real = Compiled.output_series

    def output_series(self, *args, residual=True, energy=True):
        out = real(self, *args, residual=residual, energy=energy)
        calls.extend(name for name, value in zip(("residual", "energy"), out) if value is not None)
        return out

    monkeypatch.setattr(Compiled, "output_series", output_series)
    return calls


def test_a_batch_builds_only_the_outputs_asked_for(monkeypatch):
    # The outputs named are the full Dataset's, bit for bit; the others are not
    # built, nor the series only they need (the residual, the energy).
    model = _short_pendulum()
    table = {"L": [0.5, 1.0, 2.0]}
    full = solver.solve_batch(model, table)
    assert {"lam", "x_d1", "energy", "energy_change", "constraint_residual"} <= set(full.data_vars)
    calls = _series_computed(monkeypatch)
    some = solver.solve_batch(model, table, outputs=["x", "y_d1", "energy_change"])
    assert set(some.data_vars) == {"x", "y_d1", "energy_change", "status", "steps",
                                     "failure_time", "failure_reason"}
    assert calls == ["energy"]                           # energy_change needs it; no residual
    for name in some.data_vars:
        np.testing.assert_array_equal(some[name].values, full[name].values)
    calls.clear()
    bare = solver.solve_batch(model, table, outputs=[])
    assert set(bare.data_vars) == {"status", "steps", "failure_time", "failure_reason"} and calls == []
    np.testing.assert_array_equal(bare["steps"].values, full["steps"].values)
    with pytest.raises(solver.InputError, match="unknown output 'z'; the outputs of this batch are x, x_d1, y, "):
        solver.solve_batch(model, table, outputs=["x", "z"])
    with pytest.raises(solver.InputError, match="outputs must be a list of output names, got the string 'x'"):
        solver.solve_batch(model, table, outputs="x")


def test_a_batch_as_arrays_holds_the_datasets_numbers_and_attributes():
    # dataset=False (what a sweep's batch reads) spares xarray, not a number: every output by
    # name as in the Dataset, the sensitivities too, and a failed point's series kept up to
    # its failure (mask_failed=False), NaN after it.
    model = _short_pendulum()
    kw = dict(sensitivities=["L"], mask_failed=False, max_steps=25)
    table = {"L": [0.2, 3.0]}
    ds = solver.solve_batch(model, table, **kw)
    arrays = solver.solve_batch(model, table, dataset=False, **kw)
    assert list(ds["status"].values) == [st.MAX_STEPS, st.SUCCESS]      # the short one runs out of steps
    assert set(arrays.data) == set(ds.data_vars) and "dx_dL" in arrays and "time" in arrays
    for name in ds.variables:
        np.testing.assert_array_equal(arrays[name], ds[name].values, err_msg=name)
    assert all(arrays.data[name][0] == ds[name].dims for name in ds.data_vars)
    x = arrays["x"][0]
    assert np.isfinite(x[TIMES_SHORT <= ds["failure_time"].values[0]]).all()
    assert np.isnan(x[TIMES_SHORT > ds["failure_time"].values[0]]).all()
    assert {k: v for k, v in arrays.attrs.items() if k != "wall_seconds"} == {
        k: v for k, v in ds.attrs.items() if k != "wall_seconds"}
    with pytest.raises(KeyError, match="no output 'nothing'; the batch has x, x_d1, "):
        arrays["nothing"]


def test_a_run_builds_only_the_outputs_asked_for(monkeypatch):
    # As a batch: the outputs named, with their sensitivities, are the full run's bit for bit, and
    # the series only the others need (residual, energy, balance) are not computed.
    model = _short_pendulum()
    full = model.solve(sensitivities=["L"])
    assert {"energy", "energy_change", "constraint_residual", "dx_dL"} <= set(full.data_vars)
    calls = _series_computed(monkeypatch)
    some = model.solve(sensitivities=["L"], outputs=["x", "dx_dL"])
    assert set(some.data_vars) == {"x", "dx_dL", "status", "steps"} and calls == []
    for name in some.data_vars:
        np.testing.assert_array_equal(some[name].values, full[name].values)
    with pytest.raises(solver.InputError, match="unknown output 'dz_dL'; the outputs of this run are x, x_d1, "):
        model.solve(sensitivities=["L"], outputs=["x", "dz_dL"])


@pytest.mark.parametrize("kwargs, message", [
    ({"params_table": {"M": [1.0]}}, "params_table: 'M' is not a parameter; the parameters are L, g"),
    ({"params_table": {"L": [1.0, 2.0], "g": [1.0]}},
     "params_table columns differ in length: 'g' has 1 points, others 2"),
    ({"params_table": {"L": [1.0]}, "params": {"L": 2.0}},
     "parameter 'L' is both in params_table (varied) and in params (constant); give it in one of them"),
    ({"params_table": {"L": [[1.0]]}},
     "params_table['L'] must have shape (points,) + () (one value per point), got (1, 1)"),
])
def test_bad_tables_are_refused_with_the_fix(kwargs, message):
    with pytest.raises(solver.InputError) as err:
        solver.solve_batch(PEND, values=release({"L": 1.0}), fixed=["x"], t_span=(0.0, 1.0), **kwargs)
    assert str(err.value) == message


def test_shared_initial_values_serve_every_point_and_bad_ones_stop_the_batch():
    # Values shared by every point (not a function of the point) are read
    # once: a bad name is bad input, raised, not a failed design.
    with pytest.raises(solver.InputError) as err:
        solver.solve_batch(PEND, {"L": [1.0, 2.0]}, values={"z": 1.0}, t_span=(0.0, 1.0))
    assert str(err.value) == "initial value for unknown variable 'z'; the variables are ['x', 'y', 'lam']"
    shared = {"x": 0.6, "y": -0.8, "x'": 0.0, "y'": 0.0}
    ds = solver.solve_batch(PEND, {"g": [9.81, 1.62]}, values=shared, fixed=["x"], t_span=(0.0, 0.5))
    assert (ds["status"].values == 0).all()
    np.testing.assert_allclose(ds["x"].values[:, 0], 0.6, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ds["y"].values[:, 0], -0.8, rtol=0, atol=1e-12)


def test_a_dae_needs_a_time_span_and_the_problem_must_be_a_model_or_dae():
    with pytest.raises(solver.InputError, match=r"t_span=\(t0, t1\) is required for a DAE"):
        solver.solve_batch(PEND, {"L": [1.0]}, release)
    with pytest.raises(solver.InputError, match="needs a model from solver.load or a solver.DAE, got dict"):
        solver.solve_batch({"L": 1.0}, {"L": [1.0]}, release)


def test_one_compiled_model_per_dae_and_order():
    comp = solver.compiled_model(PEND, 6)
    assert solver.compiled_model(PEND, 6) is comp
    assert solver.api.integrator_for(PEND, 6) is comp.integrator
    assert solver.compiled_model(PEND, 7) is not comp
    twin = solver.DAE(pendulum, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})
    assert solver.compiled_model(twin, 6) is not comp
    with pytest.raises(solver.InputError, match="order must be between 2 and 60, got 61"):
        solver.compiled_model(PEND, 61)
    with pytest.raises(solver.InputError, match="linear must be one of auto, dense, kkt; got 'lu'"):
        solver.compiled_model(PEND, 6, linear="lu")


def test_a_quick_compile_is_its_own_compiled_model_with_llvm_at_o0():
    from solver.integrate.integrator import QUICK_COMPILE

    quick = solver.compiled_model(PEND, 6, optimize=False)
    assert quick is not solver.compiled_model(PEND, 6) and solver.compiled_model(PEND, 6, optimize=False) is quick
    assert quick.integrator.compiler_options() == QUICK_COMPILE
    assert solver.compiled_model(PEND, 6).integrator.optimize and not quick.integrator.optimize
    assert solver.compiled_model(PEND, 6).integrator.compiler_options() is None
    assert quick.integrator.compiler_options({"a": 1}) == {"a": 1} | QUICK_COMPILE
    with pytest.raises(solver.InputError, match="optimize must be true or false, got 'no'"):
        solver.compiled_model(PEND, 6, optimize="no")


def test_a_quick_compile_gives_the_same_run_and_says_so(tmp_path):
    path = tmp_path / "pendulum.yaml"
    path.write_text("Kind: DAE\nPhysicalParams: {g: 9.81, L: 1.0}\nVariables: [x, y, lam]\n"
                    "Equations: [\"x'' + lam*x\", \"y'' + lam*y - g\", \"x**2 + y**2 - L**2\"]\n"
                    "ProblemData: {tend: 3, values: {x: 0.8*L, y: 0.5, x': 0, y': 0}, fixed: [x, x'], samples: 31}\n"
                    "SolverParams: {Integration: {tol: 1.0e-10, optimize: false}}\n")
    model = solver.load(path)
    assert model.optimize is False
    quick, batch = model.solve(), solver.solve_batch(model, {"L": [1.0, 2.0]})
    full = solver.solve(PEND, (0.0, T_END), release({"L": 1.0}), ["x", "x'"], tol=1e-10, t_eval=TIMES)
    assert quick.attrs["solver_optimize"] is False and batch.attrs["solver_optimize"] is False
    assert full.attrs["solver_optimize"] is True
    np.testing.assert_allclose(quick["x"].values, full["x"].values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(batch["x"].values[0], full["x"].values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(quick["x"].values, scipy_x(1.0), rtol=0, atol=1e-8)


def test_output_counts_of_one_bucket_share_one_compiled_run_and_lose_nothing():
    # 21 and 24 output times both run on 24 rows (solver.integrate.integrator.output_rows).
    dae = solver.DAE(pendulum, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})
    runs = {n: solver.solve(dae, (0.0, T_END), release({"L": 1.0}), ["x", "x'"], tol=1e-10, samples=n)
            for n in (21, 24)}
    run_jit = solver.compiled_model(dae, solver.order_for_tol(1e-10), batch=False).integrator._run_jit
    assert run_jit._cache_size() == 1
    for n, ds in runs.items():
        assert ds.sizes["time"] == n and int(ds.status) == st.SUCCESS
        t = ds["time"].values
        sol = solve_ivp(lambda _, s: [s[1], -9.81 * np.sin(s[0])], (0.0, T_END), [np.arcsin(0.8), 0.0],
                        method="DOP853", rtol=1e-13, atol=1e-13, t_eval=t)
        np.testing.assert_allclose(ds["x"].values, np.sin(sol.y[0]), rtol=0, atol=1e-8)


def test_solve_checks_its_arguments():
    with pytest.raises(solver.InputError, match=r"t_span must have t1 > t0, got \(1.0, 0.0\)"):
        solver.solve(PEND, (1.0, 0.0), release({"L": 1.0}))
    with pytest.raises(solver.InputError, match=r"tol must be a number in \(0, 1\), got 2"):
        solver.solve(PEND, (0.0, 1.0), release({"L": 1.0}), tol=2)
    with pytest.raises(solver.InputError, match="t_eval must be sorted times within t_span"):
        solver.solve(PEND, (0.0, 1.0), release({"L": 1.0}), t_eval=[0.5, 0.2])
    with pytest.raises(solver.InputError, match=r"unknown initialisation method 'lsq'; valid: \['auto', 'newton', 'ipopt'\]"):
        solver.solve(PEND, (0.0, 1.0), release({"L": 1.0}), init="lsq", order=6)
