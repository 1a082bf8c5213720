"""The sweep's batch function on a real model (the pendulum of pendulum_sweep.py).

The pipeline is a thin layer over ``solver.solve_batch``: a sweep point is
the same run as ``solver.solve`` of that design, constants of the sweep file
reach the simulation, and a batch shorter than the sweep's ``Batch`` (the last
one, or a retried one) is padded to the full size, so every jitted function
of a worker compiles once and the padding changes no result.
"""

import json
import pickle

import numpy as np
import pytest

import solver
from pendulum_sweep import SWEEP, write_pendulum_sweep
from solver import status as st
from solver import order_for_tol
from sweep import pipeline
from sweep.spec import load_sweep


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return load_sweep(write_pendulum_sweep(tmp_path_factory.mktemp("pendulum")))


def test_short_batches_are_padded_so_each_function_compiles_once(spec):
    context = pipeline.build_context(spec)
    assert context.batch == 3
    points = spec.points                    # L = 1.0: x0 = 0.5, 0.8, 1.5; then L = 1.2
    full = pipeline.batch_fn({k: v[0:3] for k, v in points.items()}, context)
    short = pipeline.batch_fn({k: v[1:2] for k, v in points.items()}, context)
    model = pipeline.cached_model(context.model_path, context.override, context.key)
    comp = solver.compiled_model(model.dae, order_for_tol(model.tol))
    assert comp.integrator._run_batch_jit._cache_size() == 1
    assert comp._output_series._cache_size() == 1       # residuals and energy of the padded batch, then cut

    assert full.status.tolist() == [st.SUCCESS, st.SUCCESS, st.NO_ASSEMBLY]
    assert "no consistent initial point" in full.message
    assert short.status.tolist() == [st.SUCCESS] and short.steps[0] == full.steps[1]
    assert set(short.data) == set(full.data) == {"x", "x_d1", "y", "y_d1", "lam", "constraint_residual",
                                                 "y_max", "x_range"}
    for name, value in short.data.items():
        assert value.shape[0] == 1 and full.data[name].shape[0] == 3
        np.testing.assert_allclose(value[0], full.data[name][1], rtol=0, atol=1e-12)
        assert np.isnan(full.data[name][2]).all()            # the design that cannot assemble
    # released from x0 = 0.8 on a rod of length 1: y(0) = 0.6, the bob swings through y = L
    np.testing.assert_allclose(short.data["y"][0, 0], 0.6, atol=1e-10)
    assert short.data["constraint_residual"].max() < 1e-7
    assert abs(short.data["y_max"][0] - 1.0) < 5e-3


def test_a_sweep_point_is_the_same_run_as_solve(spec):
    context = pipeline.build_context(spec)
    points = spec.points
    batch = pipeline.batch_fn({k: v[0:3] for k, v in points.items()}, context)
    model = solver.load(spec.model_path)
    for i in (0, 1):                          # the two designs that assemble
        design = {k: float(v[i]) for k, v in points.items()}
        ds = model.solve(params=design, t_eval=context.time)
        assert int(ds.status) == st.SUCCESS
        for name in ("x", "x_d1", "y", "y_d1", "lam"):
            np.testing.assert_allclose(batch.data[name][i], ds[name].values, rtol=0, atol=1e-12)
        # The store records the Taylor order the run used (not 0 = "from tol").
        assert context.attrs["solver_order"] == ds.attrs["solver_order"] == order_for_tol(model.tol)


def test_a_batch_builds_and_sends_back_only_what_the_store_keeps(tmp_path, monkeypatch):
    # The sweep stores x and y of (x, y, lam): solve_batch is asked for those,
    # their derivatives and the residual, not lam; batch_fn returns the
    # store's arrays (series and metrics) and nothing more, in compact types,
    # with the numbers of the full Dataset.
    sweep_file = write_pendulum_sweep(tmp_path)
    sweep_file.write_text(SWEEP.replace("  samples: 21\n", "  variables: [x, y]\n  samples: 21\n"))
    spec = load_sweep(sweep_file)
    context = pipeline.build_context(spec)
    built = []
    real = solver.solve_batch

    def recording(*args, **kw):
        out = real(*args, **kw)
        built.append((kw.get("outputs"), kw.get("dataset"), set(out.data)))   # arrays: no Dataset built
        return out

    monkeypatch.setattr(solver, "solve_batch", recording)
    points = {k: v[0:3] for k, v in spec.points.items()}
    result = pipeline.batch_fn(points, context)
    asked, dataset, data_vars = built[0]
    assert asked == ["constraint_residual", "x", "x_d1", "y", "y_d1"] and dataset is False
    assert data_vars == set(asked) | {"status", "steps", "failure_time", "failure_reason"}

    assert set(result.data) == set(context.schema.variables) == set(asked) | {"y_max", "x_range"}
    assert result.status.dtype == np.int8 and result.steps.dtype == np.int32
    for name, value in result.data.items():
        assert value.dtype == np.float64 and value.flags.c_contiguous
        assert value.shape == (3,) + context.schema.shape(name)
    payload = sum(a.nbytes for a in (result.status, result.steps, *result.data.values()))
    assert len(pickle.dumps(result, protocol=5)) < payload + len(result.message) + 2048

    model = pipeline.cached_model(context.model_path, context.override, context.key)
    full = real(model, points, t_eval=context.time)
    for name in asked:
        np.testing.assert_array_equal(result.data[name], full[name].values)
    np.testing.assert_array_equal(result.data["y_max"][:2], full["y"].values[:2].max(axis=1))
    np.testing.assert_array_equal(result.steps, full["steps"].values)


def test_a_small_sweep_runs_its_batches_on_the_single_run_engine(tmp_path, monkeypatch):
    # Up to FEW_POINTS points the compile outweighs the runs: the batches ask
    # solve_batch for the single-run engine choice; a longer sweep keeps the
    # batches' engine (solve_batch's default).
    sweep_file = write_pendulum_sweep(tmp_path)
    spec = load_sweep(sweep_file)
    context = pipeline.build_context(spec)
    assert spec.n_points == 6 <= pipeline.FEW_POINTS and context.batch_engine is False
    asked = []
    real = solver.solve_batch

    def recording(*args, **kw):
        asked.append(kw.get("batch_engine"))
        return real(*args, **kw)

    monkeypatch.setattr(solver, "solve_batch", recording)
    pipeline.batch_fn({k: v[0:3] for k, v in spec.points.items()}, context)
    assert asked == [False]

    many = pipeline.FEW_POINTS + 1
    sweep_file.write_text(SWEEP.replace("L: {values: [1.0, 1.2]}", f"L: {{linspace: [1.0, 1.2, {many}]}}"))
    long = load_sweep(sweep_file)
    long_context = pipeline.build_context(long)
    assert long.n_points == 3 * many and long_context.batch_engine is True
    pipeline.batch_fn({k: v[0:3] for k, v in long.points.items()}, long_context)
    assert asked == [False, None]


def test_sweep_constants_reach_the_simulation(tmp_path):
    # g = 1.6 (the Moon): the bob falls slower than with the model's g = 9.81.
    sweep_file = write_pendulum_sweep(tmp_path)
    text = SWEEP.replace("    x0: {values: [0.5, 0.8, 1.5]}\n",
                         "    x0: {values: [0.5, 0.8, 1.5]}\n  constants: {g: 1.6}\n")
    assert "constants" in text
    sweep_file.write_text(text)
    moon = load_sweep(sweep_file)
    context = pipeline.build_context(moon)
    assert context.constants == {"g": 1.6}
    batch = pipeline.batch_fn({k: v[1:2] for k, v in moon.points.items()}, context)
    design = {k: float(v[1]) for k, v in moon.points.items()}
    model = solver.load(moon.model_path)
    on_moon = model.solve(params={**design, "g": 1.6}, t_eval=context.time)
    on_earth = model.solve(params=design, t_eval=context.time)
    np.testing.assert_allclose(batch.data["y"][0], on_moon["y"].values, rtol=0, atol=1e-12)
    assert abs(batch.data["y"][0, -1] - on_earth["y"].values[-1]) > 1e-2


# ------------------------------------------------ a small sweep with a large Batch, on the Moon
@pytest.fixture(scope="module")
def moon_store(tmp_path_factory):
    """The pendulum sweep (6 points) with ``Batch: 5000``, ``constants: {g: 1.6}`` and an
    Override, run in this process into a store; every ``solve_batch`` call's size recorded."""
    from sweep.cli.sweep_command import run_sweep_file

    folder = tmp_path_factory.mktemp("moon")
    sweep_file = write_pendulum_sweep(folder)
    text = (SWEEP.replace("    x0: {values: [0.5, 0.8, 1.5]}\n",
                          "    x0: {values: [0.5, 0.8, 1.5]}\n  constants: {g: 1.6}\n")
            .replace("Batch: 3\n", "Batch: 5000\nOverride: {ProblemData: {tend: 0.5}}\n"))
    assert "g: 1.6" in text and "Batch: 5000" in text
    sweep_file.write_text(text)
    sizes = []
    real = solver.solve_batch

    def recording(model, table, *args, **kw):
        sizes.append({k: len(v) for k, v in table.items()})
        return real(model, table, *args, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solver, "solve_batch", recording)
        out = folder / "moon.zarr"
        run_sweep_file(sweep_file, str(out), workers=0, progress=False, plot=False,
                       echo=lambda *a: None)
    return load_sweep(sweep_file), out, sizes, text


def test_a_sweep_smaller_than_its_batch_runs_only_its_points(moon_store):
    from sweep.store import batch_slices, open_store, store_attrs

    spec, out, sizes, _ = moon_store
    assert spec.requested_batch == 5000 and spec.batch == 6 and spec.n_batches == 1
    assert spec.batches() == batch_slices(spec.n_points, spec.batch) == [slice(0, 6)]
    assert pipeline.build_context(spec).batch == 6
    # solve_batch ran the 6 points, not 6 padded to 5000
    assert sizes == [{"L": 6, "x0": 6}]
    attrs = store_attrs(out)
    assert attrs["sweep_batch"] == 6 and attrs["sweep_n_points"] == 6
    ds = open_store(out)
    assert ds.sizes["point"] == 6 and ds["x"].encoding["chunks"][0] == 6
    assert ds["status"].values.tolist() == [st.SUCCESS, st.SUCCESS, st.NO_ASSEMBLY] * 2


def test_a_store_records_the_constants_override_and_sweep_file(moon_store):
    from sweep.store import store_attrs

    spec, out, _, text = moon_store
    attrs = store_attrs(out)
    assert json.loads(attrs["parameters"]) == {"g": 1.6}       # L and x0 are swept (coordinates)
    assert json.loads(attrs["sweep_constants"]) == {"g": 1.6}
    assert json.loads(attrs["sweep_override"]) == {"ProblemData": {"tend": 0.5}}
    assert json.loads(attrs["model_overrides"]) == {"ProblemData": {"tend": 0.5}}
    assert attrs["sweep_yaml"] == text and attrs["sweep_path"] == str(spec.path)
    assert "g: 9.81" in attrs["model_yaml"]          # the model file as written, unchanged
    # the same JSON text solve_batch writes for the same points (the worker's model: no compile)
    context = pipeline.build_context(spec)
    model = pipeline.cached_model(context.model_path, context.override, context.key)
    same = solver.solve_batch(model, spec.points, params={"g": 1.6})
    assert same.attrs["parameters"] == attrs["parameters"]
    # the stored model is rebuilt with its Override (as `animate STORE` does)
    from solver.models import load_data
    from solver.models.yamlio import load_yaml

    data, loc = load_yaml(attrs["model_yaml"], file=attrs["model_path"])
    assert load_data(data, loc, loc.file, json.loads(attrs["model_overrides"])).tend == 0.5
