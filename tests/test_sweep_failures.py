"""Failures that explain themselves: a four-bar sweep whose designs fail in known ways.

The model (``tests/data/sweep/fourbar_driven.yaml``) is a Chebyshev-like
four-bar, ground OQ = d = 2, crank OA = a = 1, coupler AB = b, rocker QB =
c, whose crank is turned from th0 = 2 at unit rate towards pi, so that
|QA| grows from 2.5816 to a + d = 3. The sweep
(``fourbar_lengths.yaml``) varies b and c:

* b + c = 2.4 < |QA(th0)|: the linkage cannot be assembled (no_assembly at t0);
* b + c = 2.6, 2.7 (twice), 2.9: it locks (coupler and rocker stretched in
  line, B no longer determined) when |QA| reaches b + c, at the crank angle
  th* = arccos((a^2 + d^2 - (b + c)^2) / (2 a d)), i.e. at t* = th* - th0,
  and the solver stops there with singular_jacobian;
* b + c = 3.7, 4.0: it turns to the end.

Checked against the solver and the geometry: each failure time is the time
a single ``solve`` of the design reports and lies just short of t*; the
stored samples up to it are that solve's, NaN after it; the reasons name
the model's parts; ``mechsweep status`` groups the failures by reason and
``ds.sweep.failures()`` lists them. A change point (b + c = a + d, all
four links in line at th = pi) is named from the system Jacobian there.
"""

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import solver
from solver import status as st
from sweep.cli.app import main
from sweep.cli.sweep_command import SUMMARY_PICTURE, run_sweep_file, summary_figure
from sweep.store import open_store

DATA = Path(__file__).parent / "data" / "sweep"
A, D, TH0, W = 1.0, 2.0, 2.0, 1.0

LOCKED = ("kinematic singularity (locking or change point): the constraints of rigid OA, rod AB, rod QB "
          "and driver Ay are dependent; undetermined: joint B of AB and QB")
NO_ASSEMBLY = ("no assembly: no consistent initial point; violated at the closest point found: rod AB, "
               "rod QB, rigid OA and driver Ay")


def lock_time(b: float, c: float) -> float:
    """When the driven crank brings |QA| to b + c (the locking position)."""
    return math.acos((A ** 2 + D ** 2 - (b + c) ** 2) / (2 * A * D)) - TH0


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep run in this process into a store (with its summary picture); the store's path."""
    folder = tmp_path_factory.mktemp("fourbar")
    for name in ("fourbar_driven.yaml", "fourbar_lengths.yaml"):
        shutil.copy(DATA / name, folder / name)
    out = folder / "fourbar.zarr"
    run_sweep_file(folder / "fourbar_lengths.yaml", str(out), workers=0, progress=False, echo=lambda *a: None)
    return out


@pytest.fixture(scope="module")
def model():
    return solver.load(DATA / "fourbar_driven.yaml")


def test_the_designs_fail_as_the_geometry_says(swept):
    ds = open_store(swept)
    b, c = ds["b"].values, ds["c"].values
    expected = [st.NO_ASSEMBLY if s < 2.5816 else st.SINGULAR_JACOBIAN if s < 3 else st.SUCCESS
                for s in b + c]
    assert ds["status"].values.tolist() == expected == [5, 3, 3, 3, 0, 0]


def test_failure_time_is_the_solvers_and_just_short_of_the_locking_position(swept, model):
    ds = open_store(swept)
    for i in np.flatnonzero(ds["status"].values == st.SINGULAR_JACOBIAN):
        b, c = float(ds["b"][i]), float(ds["c"][i])
        one = model.solve(params={"b": b, "c": c}, t_eval=ds["time"].values)
        assert one.attrs["status_meaning"] == "singular_jacobian"
        t_fail = float(ds["failure_time"][i])
        assert t_fail == pytest.approx(one.attrs["t_final"], abs=1e-9)
        # Nothing exists past the locking position; the solver stops as it nears it.
        assert 0.0 <= lock_time(b, c) - t_fail < 2e-3, (b, c, t_fail, lock_time(b, c))
    assert float(ds["failure_time"][0]) == 0.0                       # no assembly: at t0
    assert np.isnan(ds["failure_time"].values[4:]).all()              # no failure, no time


def test_a_failed_point_keeps_its_motion_up_to_the_failure_and_nan_after(swept, model):
    ds = open_store(swept)
    t = ds["time"].values
    for i in np.flatnonzero(ds["status"].values == st.SINGULAR_JACOBIAN):
        one = model.solve(params={"b": float(ds["b"][i]), "c": float(ds["c"][i])}, t_eval=t)
        before = t <= float(ds["failure_time"][i])
        assert before.sum() >= 1 and (~before).sum() >= 1
        for name in ("A", "B"):
            stored = ds[name].values[i]
            assert np.isfinite(stored[before]).all() and np.isnan(stored[~before]).all()
            np.testing.assert_allclose(stored[before], one[name].values[before], rtol=0, atol=1e-9)
        assert np.isnan(float(ds["By_max"][i]))                       # metrics of a failed point: NaN
    assert np.isnan(ds["B"].values[0]).all()                          # never assembled: nothing to keep
    assert np.isfinite(ds["B"].values[4:]).all() and np.isfinite(ds["By_max"].values[4:]).all()


def test_reasons_name_the_parts(swept):
    ds = open_store(swept)
    assert ds["failure_reason"].values.tolist() == [NO_ASSEMBLY, LOCKED, LOCKED, LOCKED, "", ""]


def test_a_change_point_is_named_from_the_jacobian_there(model):
    """b = c = 1.5: at th = pi the four links lie in line (b + c = a + d)."""
    from solver.analysis.failures import singularity_text

    comp = solver.compiled_model(model.dae, solver.order_for_tol(model.tol))
    state = {"A[0]": -1.0, "A[1]": 0.0, "A[0]'": 0.0, "A[1]'": -1.0,     # the crank at pi, turning
             "B[0]": 0.5, "B[1]": 0.0, "B[0]'": 0.0, "B[1]'": -0.5}      # B between A and Q
    z = np.array([state[label] for label in comp.integrator.state_labels])
    params = model.dae.param_values({"b": 1.5, "c": 1.5, "th0": math.pi})
    A_, _ = comp.system_jacobian(params, 0.0, z, np.zeros(model.dae.n))
    text, cond = singularity_text(A_, model)
    assert cond > 1e12
    assert text == ("kinematic singularity (locking or change point): the constraints of rigid OA, rod AB "
                    "and rod QB are dependent; undetermined: joint B of AB and QB")


def test_status_summarises_the_failures_by_reason(swept, capsys):
    ds = open_store(swept)
    times = ds["failure_time"].values[1:4]
    code = main(["status", str(swept)])
    out = capsys.readouterr().out
    assert code == 0
    assert ("failures by reason (4 points):\n"
            f"         3  {LOCKED}  [singular_jacobian, t = {times.min():.6g} to {times.max():.6g}]\n"
            f"         1  {NO_ASSEMBLY}  [no_assembly, t = 0]\n") in out
    assert "  singular_jacobian         3  (3: " in out and "  no_assembly               1  (5: " in out


def test_the_failures_accessor_lists_when_and_why(swept):
    ds = open_store(swept)
    failed = ds.sweep.failures()
    assert failed.sizes["point"] == 4
    assert failed["status_meaning"].values.tolist() == ["no_assembly"] + ["singular_jacobian"] * 3
    assert failed["failure_reason"].values.tolist() == [NO_ASSEMBLY, LOCKED, LOCKED, LOCKED]
    np.testing.assert_array_equal(failed["failure_time"].values, ds["failure_time"].values[:4])
    table = ds.sweep.failure_table()
    assert list(table.columns) == ["b", "c", "status", "status_meaning", "failure_time", "failure_reason"]
    assert table.index.tolist() == [0, 1, 2, 3] and table.index.name == "point"
    assert table.loc[3].tolist()[:4] == [1.4, 1.5, st.SINGULAR_JACOBIAN, "singular_jacobian"]
    assert table.loc[3, "failure_reason"] == LOCKED


def test_the_summary_picture_marks_each_failure_status_in_the_legend(swept):
    assert (swept / SUMMARY_PICTURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = summary_figure(xr.open_zarr(swept))
    panels = [ax for ax in fig.axes if ax.get_xlabel() == "b"]
    assert len(panels) == 1 and panels[0].get_ylabel() == "c"      # one metric, no third parameter
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["singular_jacobian (3)", "no_assembly (1)"]
    shapes = [h.get_paths()[0].vertices.tobytes() for h in legend.legend_handles]
    assert len(set(shapes)) == 2


BODY = """\
Title: a body with a tied point
Dimension: 2
PhysicalParams: {L: 1.0, h: 0.5, m: 1.0}
PartData:
  Fixed: {O: [0, 0]}
  Rigids:
    OAC: {Geom: [[L, 0], [L/2, h]], Dyna: [[L/2, h/3], m, m*L**2/12]}
  Rods:
    CQ: [m, 1.5]
Drivers: {Ay: 0.5*sin(t)}
ProblemData:
  tend: 1
  positions: {A: [1, 0], C: [0.5, 0.5], Q: [0.5, -1]}
"""


def test_parts_are_named_as_the_model_names_them(tmp_path):
    from solver.analysis.failures import equation_parts

    (tmp_path / "body.yaml").write_text(BODY)
    body = solver.load(tmp_path / "body.yaml")
    assert equation_parts(body) == [f"equation of motion of {p}" for p in "AACCQQ"] + [
        "rigid OAC", "joint C of OAC", "joint C of OAC", "rod CQ", "driver Ay"]
    rscr = solver.load(Path(__file__).parents[1] / "configs" / "mechanisms" / "rscr_driven.yaml")
    names = equation_parts(rscr)
    assert names[7:9] == ["constraint dot(C1, C1) - L3**2", "constraint dot(C1, w)"]
    assert names[-1] == "driver phi"
