"""solver.solution: the one place that names outputs (docs/reference/outputs.md).

These tests build datasets from hand-made results (no integration): the
names, dims, units and flags that a single run and a sweep store share.
"""

import json

import numpy as np
import pytest
import xarray as xr

import solver
from solver import status as st
from solver.results.solution import build_batch_dataset, build_dataset, output_layout, package_versions


def pendulum(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


PEND = solver.DAE(pendulum, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0},
                  units={"x": "m", "y": "m", "L": "m"})


def chain(t, v, p):
    q, lam = v["q"], v["lam"]
    return [q[2] + lam[0] * q[0], jnp_sum_squares(q[0]) - p["L"] ** 2]


def jnp_sum_squares(a):
    return (a * a).sum()


VEC = solver.DAE(chain, variables={"q": 3, "lam": None}, params={"L": 1.0})


def fake_result(dae, B, T, status):
    """Dense output of B points at T times: value = point + time index / 100."""
    values = {}
    for v in dae.variables:
        L = max(1, int(max(dae.structure.d[v.offset: v.offset + v.size])))
        base = np.arange(B)[:, None] + np.arange(T)[None, :] / 100.0
        values[v.name] = np.broadcast_to(base[:, :, None, None] if v.shape else base[:, :, None],
                                         (B, T, L) + v.shape).astype(float).copy()
    return {"values": values, "status": np.asarray(status, np.int8), "steps": np.full(B, 7)}


def test_layout_names_each_variable_its_state_derivatives_and_the_residual():
    layout, coords = output_layout(PEND)
    # d = (2, 2, 0): x, y and their first derivatives are state; lam is algebraic.
    assert list(layout) == ["x", "x_d1", "y", "y_d1", "lam", "constraint_residual"]
    assert layout["x"] == (("time",), {"long_name": "x", "derivative_order": 0, "d": 2, "units": "m"})
    assert layout["x_d1"][1] == {"long_name": "x'", "derivative_order": 1, "units": "m/s"}
    assert "units" not in layout["lam"][1]
    assert coords == {}


def test_layout_of_a_vector_variable_has_a_component_dim_and_can_be_restricted():
    layout, coords = output_layout(VEC, ["q"])
    assert list(layout) == ["q", "q_d1", "constraint_residual"]
    assert layout["q"][0] == ("time", "q_index")
    assert coords == {"q_index": [0, 1, 2]}
    with pytest.raises(KeyError):
        output_layout(VEC, ["nope"])


def test_a_lagrangian_model_also_reports_its_energy():
    dae = solver.lagrangian(lambda t, q, qd, p: 0.5 * qd["th"] ** 2 + jnp_cos(q["th"]), {"th": None})
    # ...and its change since t0 (no dissipation, and th is no point: no momenta).
    assert list(output_layout(dae)[0])[-3:] == ["constraint_residual", "energy", "energy_change"]


def jnp_cos(x):
    import jax.numpy as jnp

    return jnp.cos(x)


def test_batch_dataset_masks_failed_points_and_carries_flags_coords_and_constants():
    B, T = 3, 4
    res = fake_result(PEND, B, T, [st.SUCCESS, st.NO_ASSEMBLY, st.SUCCESS])
    ds = build_batch_dataset(PEND, res, np.linspace(0, 1, T), residual=np.zeros((B, T)),
                             swept={"L": [1.0, 2.0, 3.0]}, constants={"g": 1.6},
                             settings={"tol": 1e-8}, messages=["", "cannot assemble", ""], title="t")
    assert ds.sizes == {"point": 3, "time": 4}
    np.testing.assert_array_equal(ds["L"].values, [1.0, 2.0, 3.0])
    assert ds["L"].dims == ("point",) and ds["L"].attrs["units"] == "m"
    np.testing.assert_array_equal(ds["x"].values[0], np.arange(T) / 100.0)
    np.testing.assert_array_equal(ds["x_d1"].values[2], 2 + np.arange(T) / 100.0)
    assert np.isnan(ds["x"].values[1]).all() and np.isnan(ds["constraint_residual"].values[1]).all()
    assert ds["status"].dtype == np.int8
    flags = st.cf_attrs()
    np.testing.assert_array_equal(ds["status"].attrs["flag_values"], flags["flag_values"])
    assert ds["status"].attrs["flag_meanings"] == flags["flag_meanings"]
    assert json.loads(ds.attrs["parameters"]) == {"g": 1.6}
    assert json.loads(ds.attrs["failures"]) == {"1": "cannot assemble"}
    assert ds.attrs["solver_tol"] == 1e-8 and ds.attrs["structure_d"] == [2, 2, 0]
    assert ds["time"].attrs["units"] == "s"


def test_single_run_dataset_has_no_point_dim_and_keeps_a_failed_runs_partial_series():
    T = 5
    res = fake_result(PEND, 1, T, [st.STEP_TOO_SMALL])
    one = {"values": {k: v[0] for k, v in res["values"].items()}, "status": res["status"][0],
           "steps": res["steps"][0]}
    ds = build_dataset(PEND, one, np.linspace(0, 1, T), residual=np.zeros(T), params={"g": 9.81, "L": 1.0})
    assert "point" not in ds.dims and ds.sizes == {"time": T}
    assert int(ds["status"]) == st.STEP_TOO_SMALL and ds.attrs["status_meaning"] == "step_too_small"
    np.testing.assert_array_equal(ds["y"].values, np.arange(T) / 100.0)   # not masked
    assert json.loads(ds.attrs["parameters"]) == {"g": 9.81, "L": 1.0}


@pytest.mark.parametrize("dae", [PEND, VEC], ids=["scalars", "vector"])
def test_a_single_runs_dataset_is_the_one_point_batch_without_its_point_dim(dae):
    # build_dataset builds the run's rows directly (solve()'s Python time): the
    # same Dataset as the batch of one point, selected, variables, coordinates
    # and attributes alike.
    T = 4
    res = fake_result(dae, 1, T, [st.SUCCESS])
    one = {"values": {k: v[0] for k, v in res["values"].items()}, "status": res["status"][0], "steps": res["steps"][0]}
    kw = dict(settings={"tol": 1e-10, "order": 13}, title="t", extra_attrs={"model_yaml": "a: 1"})
    params = {k: 1.5 for k in dae.param_names}
    energy = np.linspace(1.0, 2.0, T)
    ds = build_dataset(dae, one, np.linspace(0, 1, T), residual=np.full(T, 1e-15), energy=energy, params=params, **kw)
    batch = build_batch_dataset(dae, res, np.linspace(0, 1, T), residual=np.full((1, T), 1e-15),
                                energy=energy[None], constants=params, mask_failed=False, **kw)
    expected = batch.isel(point=0, drop=True)
    expected.attrs["status_meaning"] = "success"
    xr.testing.assert_identical(ds, expected)


def test_package_versions_name_python_and_the_numerical_stack():
    versions = package_versions()
    assert {"python", "jax", "numpy", "xarray"} <= set(versions)
    assert all(isinstance(v, str) and v for v in versions.values())
