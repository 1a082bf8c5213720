"""``Units`` in model files and ``time_units`` in the Python API: labels carried into results and pictures.

Specification (issue 44, item 5): a model file may declare the unit of time
and of its parameters and variables; the datasets carry them (the time
coordinate, each variable and its derivatives, sensitivities, event times)
and the plots label their axes with them.  Nothing is converted: a unit is
a label.  A key that names nothing in the model is refused with the valid
keys listed; every kind accepts ``Units``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import solver  # noqa: E402
from solver.errors import InputError  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"

# The pendulum in millimetres and milliseconds: g = 9.81 m/s^2 = 9.81e-3 mm/ms^2.
PENDULUM_MS = """\
Title: pendulum in mm and ms
Kind: DAE
PhysicalParams: {g: 9.81e-3, L: 1000.0}
Variables: [x, y, lam]
Equations: [x'' + lam*x, y'' + lam*y - g, x**2 + y**2 - L**2]
ProblemData: {tend: 1000, values: {x: 800, y: 600, x': 0, y': 0}, fixed: [x, x'], samples: 11}
Units: {time: ms, L: mm, x: mm, y: mm, g: mm/ms^2}
"""


@pytest.fixture(scope="module")
def pendulum_ms(tmp_path_factory):
    path = tmp_path_factory.mktemp("units") / "pendulum_ms.yaml"
    path.write_text(PENDULUM_MS)
    return solver.load(path)


def test_a_run_carries_the_units_of_time_variables_and_their_derivatives(pendulum_ms):
    ds = pendulum_ms.solve(tol=1e-8)
    assert int(ds.status) == 0
    assert ds["time"].attrs["units"] == "ms"
    assert ds["x"].attrs["units"] == "mm" and ds["y"].attrs["units"] == "mm"
    assert ds["x_d1"].attrs["units"] == "mm/ms"
    assert "units" not in ds["lam"].attrs                 # declared for nothing else
    # Only labels: the motion is the one in SI, scaled (x = 1000 x_SI at t = 1000 t_SI).
    si = solver.load(PENDULUM_MS.replace("9.81e-3", "9.81").replace("1000.0", "1.0").replace(
        "x: 800, y: 600", "x: 0.8, y: 0.6").replace("tend: 1000", "tend: 1"))
    ref = si.solve(tol=1e-8)
    np.testing.assert_allclose(ds["x"].values, 1000 * ref["x"].values, rtol=0, atol=1e-4)


def test_sensitivities_carry_output_over_parameter_units(pendulum_ms):
    ds = solver.solve_batch(pendulum_ms, {"L": np.array([1000.0, 1100.0])}, sensitivities=["L"], tol=1e-8)
    assert ds["dx_dL"].attrs["units"] == "mm/mm"


def test_the_time_axis_of_a_plot_is_labelled_with_the_time_unit(pendulum_ms, tmp_path):
    import matplotlib.pyplot as plt

    from solver.results.plot import plot_timeseries

    ds = pendulum_ms.solve(tol=1e-8)
    seen = []
    original = plt.Figure.savefig

    def record(fig, *args, **kwargs):
        seen.extend(ax.get_xlabel() for ax in fig.axes)
        return original(fig, *args, **kwargs)

    plt.Figure.savefig = record
    try:
        plot_timeseries(ds, str(tmp_path / "x.png"), ["x"])
    finally:
        plt.Figure.savefig = original
    assert "time [ms]" in seen


def test_without_units_time_is_in_seconds_and_nothing_else_has_a_unit():
    model = solver.load(PENDULUM_MS.replace("Units: {time: ms, L: mm, x: mm, y: mm, g: mm/ms^2}\n", ""))
    assert model.dae.time_units == "s" and model.dae.units == {}


def test_the_python_api_takes_time_units():
    def pendulum(t, v, p):
        x, y, lam = v["x"], v["y"], v["lam"]
        return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]

    dae = solver.DAE(pendulum, ["x", "y", "lam"], {"g": 9.81, "L": 1.0}, units={"x": "m"}, time_units="min")
    assert dae.time_units == "min" and dae.units == {"x": "m"}


@pytest.mark.parametrize("file, units, time_unit", [
    ("pleiades.yaml", {"time": "d", "G": "AU^3/(Msun d^2)", "P1": "AU"}, "d"),        # Lagrangian
    ("pendulum_chain3d.yaml", {"time": "s", "l": "m", "P1": "m"}, "s"),                 # Mechanism
])
def test_every_kind_reads_units(file, units, time_unit):
    model = solver.load(CONFIGS / file, overrides={"Units": units})
    assert model.dae.time_units == time_unit
    assert {k: v for k, v in model.dae.units.items() if k in units} == {k: v for k, v in units.items()
                                                                          if k != "time"}


@pytest.mark.parametrize("units, message", [
    ({"Lenght": "m"}, "Units.Lenght: no time, parameter or variable named 'Lenght'; valid keys: time, L, g, lam, x, y"),
    ({"L": "m" * 41}, "Units.L: a unit is a short label on one line (1 to 40 printable characters, e.g. m, rad/s, "
                      "N m), got 'mmmm"),
    ({"L": 3}, "Units.L: expected a non-empty string, got the number 3"),
    ("ms", "Units: expected a mapping"),
])
def test_bad_units_are_refused_with_the_place_and_the_valid_keys(units, message):
    text = units if isinstance(units, str) else "{" + ", ".join(f"{k}: {v}" for k, v in units.items()) + "}"
    with pytest.raises(InputError) as err:
        solver.load(PENDULUM_MS.replace("{time: ms, L: mm, x: mm, y: mm, g: mm/ms^2}", text))
    assert message in str(err.value)


def test_a_misspelt_units_key_is_answered_with_units_among_the_valid_keys():
    with pytest.raises(InputError, match=r"Units"):
        solver.load(PENDULUM_MS.replace("Units:", "Unit:"))
