"""The sweep's batch function on a real model (the pendulum of pendulum_sweep.py).

The pipeline is a thin layer over ``solver.solve_batch``: a sweep point is
the same run as ``solver.solve`` of that design, constants of the sweep file
reach the simulation, and a batch shorter than the sweep's ``Batch`` (the last
one, or a retried one) is padded to the full size, so every jitted function
of a worker compiles once and the padding changes no result.
"""

import numpy as np
import pytest

import solver
from pendulum_sweep import SWEEP, write_pendulum_sweep
from solver import status as st
from solver.integrate import order_for_tol
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
    model = pipeline._model(context.model_path, context.override, context.key)
    comp = solver.compiled_model(model.dae, order_for_tol(model.tol))
    assert comp.integrator._run_batch_jit._cache_size() == 1
    assert comp._residual_series._cache_size() == 1     # residuals of the padded batch, then cut

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
