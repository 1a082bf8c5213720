"""Design sensitivities (issue 15, part 1): d{var}_d{param} by forward mode through
the consistent initialisation and the integration.

References nobody here wrote: central finite differences of the same runs,
the pendulum's exact dθ/dL from its elliptic-function solution, and a
sweep's own neighbouring grid points.
"""

import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ellipj, ellipk

import solver
from solver.errors import InputError
from solver.integrate.sensitivity import check_names, metric_tangent
from sweep.cli.sweep_command import run_sweep_file
from sweep.spec import load_sweep

PENDULUM = "configs/mechanisms/pendulum.yaml"
FOURBAR = "configs/mechanisms/fourbar.yaml"
TOL = 1e-12
T_EVAL = np.linspace(0.0, 2.0, 9)


@pytest.fixture(scope="module")
def pendulum():
    return solver.load(PENDULUM)


@pytest.fixture(scope="module")
def pendulum_run(pendulum):
    return pendulum.solve(sensitivities=["L", "g"], t_span=(0, 2), t_eval=T_EVAL, tol=TOL)


def _central(run, name, value, var, rel=1e-5):
    """Central difference of ``var`` over ``name`` from two runs."""
    h = rel * max(1.0, abs(value))
    return (run({name: value + h})[var].values - run({name: value - h})[var].values) / (2 * h)


def _close(derivative, reference, rtol):
    scale = max(1.0, float(np.max(np.abs(reference))))
    err = float(np.max(np.abs(derivative - reference))) / scale
    assert err <= rtol, err
    return err


# ------------------------------------------------------------ one run
def test_pendulum_sensitivities_match_central_differences_of_the_same_runs(pendulum, pendulum_run):
    ds = pendulum_run
    assert ds.attrs["sensitivities"] == ["L", "g"]
    run = lambda p: pendulum.solve(params=p, t_span=(0, 2), t_eval=T_EVAL, tol=TOL)
    for param, value in (("L", 1.0), ("g", 9.81)):
        for var in ("x", "y", "lam"):
            _close(ds[f"d{var}_d{param}"].values, _central(run, param, value, var), 1e-6)
    # x is fixed at L: its derivative starts at exactly 1 (the initial-value expression's)
    assert ds["dx_dL"].values[0] == pytest.approx(1.0, abs=1e-9)
    assert ds["dx_dg"].values[0] == 0.0


def test_sensitivity_outputs_carry_names_and_units(pendulum_run):
    attrs = pendulum_run["dlam_dg"].attrs
    assert attrs["sensitivity_of"] == "lam" and attrs["sensitivity_wrt"] == "g"
    assert attrs["long_name"] == "dlam/dg"
    assert pendulum_run["dx_dL"].dims == ("time",)


def test_pendulum_dtheta_dL_matches_the_exact_elliptic_solution(pendulum):
    """θ(t) = 2 asin(k sn(K − ωt, k²)) from rest at θ0, ω = √(g/L), k = sin(θ0/2), so
    ∂θ/∂L = k t ω cn(K − ωt)/L with θ0 held (x0 = L sin θ0 fixed, y0 found).  (The run has
    pendulum_run's shapes, directions and output rows, so it reuses its compiled integration.)"""
    th0, g, L = 0.9, 9.81, 1.0
    values = lambda p: {"x": p["L"] * np.sin(th0), "y": p["L"] * np.cos(th0), "x'": 0.0, "y'": 0.0}
    t = np.linspace(0.0, 3.0, 12)
    ds = solver.solve(pendulum.dae, (0, 3), values=values, fixed=["x", "x'"], t_eval=t, tol=TOL,
                      sensitivities=["L", "g"])
    x, y = ds["x"].values, ds["y"].values
    dtheta = (y * ds["dx_dL"].values - x * ds["dy_dL"].values) / (x**2 + y**2)
    k = np.sin(th0 / 2)
    w = np.sqrt(g / L)
    sn, cn, _, _ = ellipj(ellipk(k**2) - w * t, k**2)
    np.testing.assert_allclose(2 * np.arcsin(k * sn), np.arctan2(x, y), atol=1e-10)
    exact = k * t * w * cn / L
    assert np.max(np.abs(dtheta - exact)) < 1e-9


def test_a_lagrangian_model_with_parameter_dependent_initial_values(tmp_path):
    """The four-bar's fixed crank position and velocity are expressions of th:
    their derivatives enter the initial tangent."""
    model = solver.load(FOURBAR)
    t_eval = np.linspace(0, 0.5, 6)
    kw = dict(t_span=(0, 0.5), t_eval=t_eval, tol=TOL)
    ds = model.solve(sensitivities=["th", "b"], **kw)
    run = lambda p: model.solve(params=p, **kw)
    for param, value in (("th", 1.0), ("b", 3.0)):
        for var in ("A", "B"):
            _close(ds[f"d{var}_d{param}"].values, _central(run, param, value, var), 1e-6)
    # A = (a cos th, a sin th) at t0 exactly
    np.testing.assert_allclose(ds["dA_dth"].values[0], [-np.sin(1.0), np.cos(1.0)], atol=1e-9)


# ------------------------------------------------------------ many designs
def test_solve_batch_sensitivities_are_each_points_single_run_sensitivities(pendulum, pendulum_run):
    lengths = np.array([0.9, 1.0, 1.1])
    ds = solver.solve_batch(pendulum, {"L": lengths}, t_eval=T_EVAL, t_span=(0, 2), tol=TOL,
                            sensitivities=["L", "g"])
    assert ds["dx_dL"].dims == ("point", "time")
    for name in ("dx_dL", "dy_dL", "dlam_dg"):
        _close(ds[name].values[1], pendulum_run[name].values, 1e-9)
    run = lambda p: solver.solve_batch(pendulum, {"L": lengths + (p["L"] - 1.0)}, t_eval=T_EVAL,
                                       t_span=(0, 2), tol=TOL)
    for var in ("x", "y"):
        _close(ds[f"d{var}_dL"].values, _central(run, "L", 1.0, var), 1e-6)


def test_a_compact_batchs_sensitivities_are_each_points_single_run_sensitivities():
    """Forward mode through a batch on the compact engine runs batch-last (the slots' vmap applies
    the engine's own batching to the stage passes' jvp: solver.taylor.compact.batched_tangents); one run's
    runs the plain passes.  Two different computations of the same derivatives: they must agree."""
    model = solver.load(FOURBAR)
    lengths = np.array([2.9, 3.1])
    kw = dict(t_span=(0, 0.5), t_eval=np.linspace(0, 0.5, 6), tol=1e-10, mode="compact")
    ds = solver.solve_batch(model, {"b": lengths}, sensitivities=["th", "b"], **kw)
    assert ds.attrs["solver_mode"] == "compact" and (ds["status"].values == solver.status.SUCCESS).all()
    for i, b in enumerate(lengths):
        one = model.solve(params={"b": b}, sensitivities=["th", "b"], **kw)
        for name in ("dA_dth", "dB_dth", "dB_db"):
            _close(ds[name].values[i], one[name].values, 1e-9)


def test_one_direction_taken_without_vmap_is_the_same_derivative_as_among_two(pendulum, pendulum_run):
    """One sensitivity is the jvp itself; two are the jvp vmapped over the directions: two programs of
    the same derivatives, for a single run (the unrolled engine) and for a batch, and on the compact
    engine (a mid-size model)."""
    one = pendulum.solve(sensitivities=["L"], t_span=(0, 2), t_eval=T_EVAL, tol=TOL)
    for var in ("x", "y", "lam"):
        _close(one[f"d{var}_dL"].values, pendulum_run[f"d{var}_dL"].values, 1e-12)
    lengths = np.array([0.9, 1.0])
    batch = lambda names: solver.solve_batch(pendulum, {"L": lengths}, t_eval=T_EVAL, t_span=(0, 2), tol=TOL,
                                             sensitivities=names)
    single, double = batch(["L"]), batch(["L", "g"])
    for var in ("x", "y", "lam"):
        _close(single[f"d{var}_dL"].values, double[f"d{var}_dL"].values, 1e-12)
    model = solver.load(FOURBAR)
    kw = dict(t_span=(0, 0.5), t_eval=np.linspace(0, 0.5, 6), tol=1e-10, mode="compact")
    single, double = model.solve(sensitivities=["b"], **kw), model.solve(sensitivities=["th", "b"], **kw)
    assert single.attrs["solver_mode"] == "compact"
    for name in ("dA_db", "dB_db"):
        _close(single[name].values, double[name].values, 1e-12)


def test_a_failed_point_has_nan_sensitivities(pendulum):
    # x = 0.8 is fixed: with L = 0.5 the bob cannot reach it
    dae = pendulum.dae
    ds = solver.solve_batch(dae, {"L": np.array([1.0, 0.5])}, values={"x": 0.8, "y": 0.6, "x'": 0.0, "y'": 0.0},
                            fixed=["x", "x'"], t_span=(0, 0.5), samples=3, tol=1e-10, sensitivities=["L"])
    assert ds["status"].values.tolist() == [solver.status.SUCCESS, solver.status.NO_ASSEMBLY]
    assert np.all(np.isfinite(ds["dy_dL"].values[0])) and np.all(np.isnan(ds["dy_dL"].values[1]))


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize("names, message", [
    (["Q"], "sensitivities: 'Q' is not a parameter of the model; the scalar parameters are L, g"),
    (["L", "L"], "sensitivities: 'L' is given twice"),
    ("L", "sensitivities must be a list of parameter names, got 'L'"),
])
def test_bad_sensitivity_names_are_refused_with_the_valid_ones(pendulum, names, message):
    with pytest.raises(InputError) as err:
        check_names(pendulum.dae, names)
    assert str(err.value) == message


def test_metric_tangent_is_the_derivative_of_the_sampled_reduction():
    rng = np.random.default_rng(3)
    series = rng.normal(size=(4, 50))
    tangent = rng.normal(size=(4, 50))
    series[3] = np.nan
    from sweep.pipeline import REDUCERS

    h = 1e-7
    for reduce in ("max", "min", "range", "absmax", "mean", "final"):
        exact = metric_tangent(reduce, series, tangent)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the all-NaN row
            fd = (REDUCERS[reduce](series + h * tangent) - REDUCERS[reduce](series - h * tangent)) / (2 * h)
        np.testing.assert_allclose(exact[:3], fd[:3], rtol=1e-6, err_msg=reduce)
        assert np.isnan(exact[3])


# ------------------------------------------------------------ sweeps
SWEEP = """\
Title: Pendulum length sensitivity
Model: {model}
Override:
  ProblemData: {{tend: 1.5}}
  SolverParams: {{Integration: {{tol: 1.0e-12}}}}
Sweep:
  product:
    L: {{linspace: [0.9998, 1.0002, 3]}}
    g: {{values: [9.81, 3.7]}}
Outputs:
  variables: [x, y]
  samples: 16
  metrics:
    y_max: {{of: y, reduce: max}}
    x_final: {{of: x, reduce: final}}
  sensitivities: [L]
Batch: 6
"""


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory):
    from sweep.store import open_store

    folder = tmp_path_factory.mktemp("sens")
    path = folder / "sweep.yaml"
    path.write_text(SWEEP.format(model=str(Path(PENDULUM).resolve())))
    out = folder / "sens.zarr"
    run_sweep_file(path, str(out), workers=0, progress=False, plot=False, echo=lambda *a: None)
    return load_sweep(path), open_store(out)


def test_a_sweeps_sensitivities_match_its_own_neighbouring_grid_points(sweep_store):
    spec, ds = sweep_store
    assert spec.outputs.sensitivities == ("L",)
    assert {"dx_dL", "dy_dL", "dy_max_dL", "dx_final_dL"} <= set(ds.data_vars)
    assert ds["dx_dL"].dims == ("point", "time")
    L = ds["L"].values
    h = 0.0002
    for g in (9.81, 3.7):
        lo, mid, hi = (int(np.flatnonzero(np.isclose(L, v) & np.isclose(ds["g"].values, g))[0])
                       for v in (1.0 - h, 1.0, 1.0 + h))
        for var in ("x", "y", "y_max", "x_final"):
            fd = (ds[var].values[hi] - ds[var].values[lo]) / (2 * h)
            _close(ds[f"d{var}_dL"].values[mid], fd, 1e-6)


def test_a_sweep_naming_an_unknown_parameter_stops_at_the_key(tmp_path):
    from sweep.pipeline import build_context

    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(model=str(Path(PENDULUM).resolve()))
                    .replace("sensitivities: [L]", "sensitivities: [L, mass]"))
    with pytest.raises(InputError) as err:
        build_context(load_sweep(path))
    assert "Outputs.sensitivities" in str(err.value)
    assert "'mass' is not a parameter of the model; the scalar parameters are L, g" in str(err.value)


def test_seeded_carries_make_the_sensitivities_trace_each_loop_once_with_the_same_numbers(pendulum, monkeypatch):
    """A run's ``u`` and output buffers start with a tangent under ``tangent_seeds`` (what
    ``run_tangents`` traces under), so JAX's fixed points over the loops' carries (which have a
    tangent, which are batched over the directions) hold at their first pass: fewer loop bodies
    differentiated and batched, and not one number changed."""
    import contextlib

    import jax
    from jax._src.interpreters import ad, batching
    from jax.extend.core import jaxpr_as_fun

    import solver.integrate.tangents as si

    passes = {"n": 0}

    def counting(real):
        def wrapped(*args, **kwargs):
            passes["n"] += 1
            return real(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(batching, "batch_jaxpr", counting(batching.batch_jaxpr))
    monkeypatch.setattr(ad, "jvp_jaxpr", counting(ad.jvp_jaxpr))
    integ = solver.compiled_model(pendulum.dae, 8, batch=False).integrator
    L = 1.0
    params = {"g": np.asarray(9.81), "L": np.asarray(L)}
    z0 = np.array([L * np.sin(0.4), 0.0, L * np.cos(0.4), 0.0])
    args = (params, z0, np.zeros(3), {"g": np.zeros(1), "L": np.ones(1)}, np.zeros((1, 4)), 0.0, 1.0,
            np.linspace(0.0, 1.0, 5), 1e-8, 1000, np.inf)

    def traced():
        passes["n"] = 0
        closed = jax.make_jaxpr(lambda *a: integ._run_tangents(*a, slots=None))(*args)
        return passes["n"], jax.jit(jaxpr_as_fun(closed))(*jax.tree.leaves(args))

    seeded, seeded_out = traced()
    monkeypatch.setattr(si, "tangent_seeds", contextlib.nullcontext)
    plain, plain_out = traced()
    assert seeded < plain, (seeded, plain)
    for a, b in zip(seeded_out, plain_out):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.xla_internals
def test_a_batchs_sensitivities_make_no_lapack_call_that_could_wait_on_another():
    """jaxlib 0.10.2's LAPACK kernels split a large batch over XLA's thread pool and block
    until the pieces are done; forward mode puts a tangent's solves beside the primal's, and
    with as many such calls at once as the pool has threads the run hung for ever (RSCR, 2
    directions, 96 slots, on 2 cores).  A batch's sensitivities therefore factor and solve by
    XLA loops: the double pendulum (6 unknowns, past the unrolled factorisation) makes LAPACK
    calls in its plain batch and none in its batch with sensitivities."""
    import jax
    import jax.numpy as jnp

    model = solver.load("configs/mechanisms/double_pendulum.yaml")
    integ = solver.compiled_model(model.dae, 6, mode="unrolled").integrator
    B, k = 3, 2
    params = {name: np.ones(B) for name in model.params}
    z0, u0 = np.zeros((B, integ.n_state)), np.zeros((B, model.dae.n))
    times = (0.0, 1.0, np.linspace(0.0, 1.0, 5), 1e-8, 1000, jnp.inf)

    def calls(fn, *args):
        text = jax.jit(fn, static_argnames=("slots",)).lower(*args, slots=2).as_text()
        return text.count("lapack_")

    assert calls(integ._run_batch, params, z0, u0, *times, 0.0) > 0
    dparams = {name: np.zeros((k, B)) for name in model.params}
    assert calls(integ._run_tangents, params, z0, u0, dparams, np.zeros((k, B, integ.n_state)), *times) == 0
