"""Kinematic design (issue 15, part 4): ``mechsweep design DESIGN.yaml``.

The objective's gradient comes from the design sensitivities; the references
here are things the design code does not compute itself: the known
parameters whose path is the target, central differences of the objective,
and the objective of each stored point recomputed from the store's series.

Compiles are the cost (the RSCR's sensitivity run takes tens of seconds):
every RSCR test uses the shipped config's model (one cache key, so one model
object and one compile in this process), every pendulum test one pendulum
model, with the same output times.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import numpy as np
import pytest
import xarray as xr

from solver import status as st
from solver.errors import InputError
from sweep.design import optimize as design_mod
from sweep.cli.app import main
from sweep.design.optimize import build_problem, evaluate, rank_store, run_design
from sweep.design.spec import OptimizerSettings, load_design
from sweep.cli.sweep_command import run_sweep_file

ROOT = Path(__file__).resolve().parents[1]
RSCR_DESIGN = ROOT / "configs" / "design" / "rscr_curve.yaml"
PENDULUM = ROOT / "configs" / "mechanisms" / "pendulum.yaml"
KNOWN = np.array([1.08, 1.35])          # the prototype whose path is the target


@pytest.fixture(autouse=True)
def _same_compile_cache(monkeypatch):
    """The CLI and Dask workers use the tests' persistent compilation cache."""
    cache = jax.config.jax_compilation_cache_dir
    if cache:
        monkeypatch.setenv("MECHSWEEP_JAX_CACHE", cache)


PENDULUM_DESIGN = """\
Title: Pendulum length
Model: {model}
Override: {{ProblemData: {{tend: 1.0}}, SolverParams: {{Integration: {{tol: 1.0e-12}}}}}}
Parameters:
  L: {{start: {start}, bounds: [0.8, 1.3]}}
Objective:
  path: [x, y]
  target: {target}
  samples: 21
Optimizer: {{method: {method}, max_iterations: 60, tol: 1.0e-14}}
"""


def _pendulum_file(folder: Path, name="pend.yaml", start=0.9, method="L-BFGS-B",
                   target="{design: {L: 1.1}}", **replace) -> Path:
    text = PENDULUM_DESIGN.format(model=PENDULUM, start=start, method=method, target=target)
    for old, new in replace.items():
        text = text.replace(old, new)
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def rscr_spec():
    return load_design(RSCR_DESIGN)


@pytest.fixture(scope="module")
def rscr(rscr_spec):
    """The shipped config's context; its model (compiled once) stays in sweep.design.optimize's cache."""
    return build_problem(rscr_spec)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("design")


@pytest.fixture(scope="module")
def pendulum(folder):
    spec = load_design(_pendulum_file(folder))
    return spec, build_problem(spec)


# ------------------------------------------------------------ the RSCR (the test)
def test_rscr_recovers_the_known_design_from_a_perturbed_start(rscr_spec, rscr):
    """Target = the path of L2 = 1.08, gamma = 1.35; start 1.02, 1.30: L-BFGS-B recovers them."""
    spec = dataclasses.replace(rscr_spec, constraints={},
                               optimizer=OptimizerSettings("L-BFGS-B", 200, 1e-14))
    result = run_design(spec, workers=0, echo=lambda line: None)
    best = result.starts[result.best]
    assert best.status == "converged", best.message
    np.testing.assert_allclose(best.x, KNOWN, rtol=0, atol=1e-6)
    np.testing.assert_allclose(best.x0, [1.02, 1.30])
    assert best.objective < 1e-14
    rows = best.rows["objective"]
    assert rows[0] == pytest.approx(evaluate(rscr, [1.02, 1.30]).objective)
    assert rows[-1] < 1e-12 * rows[0]


def test_the_shipped_four_bar_design_recovers_its_prototype_with_ipopt():
    """A planar three-link design: b, c fitted to the rocker tip's motion of b = 3, c = 2.5 from 2.9, 2.6."""
    spec = load_design(ROOT / "configs" / "design" / "fourbar_motion.yaml")
    assert spec.optimizer.method == "ipopt"
    result = run_design(spec, workers=0, echo=lambda line: None)
    best = result.starts[result.best]
    assert best.status == "converged", best.message
    np.testing.assert_allclose(best.x, [3.0, 2.5], rtol=0, atol=1e-6)
    assert best.objective < 1e-14 and 5 <= len(best.rows["objective"]) <= 30


def test_the_gradient_is_the_central_difference_of_the_objective(rscr):
    x = np.array([1.02, 1.30])
    ev = evaluate(rscr, x)
    assert ev.ok and ev.objective > 1e-3
    h = 1e-6
    for j in range(2):
        e = np.zeros(2)
        e[j] = h
        up, down = evaluate(rscr, x + e), evaluate(rscr, x - e)
        fd = (up.objective - down.objective) / (2 * h)
        assert ev.gradient[j] == pytest.approx(fd, rel=1e-6, abs=1e-9)
        # the constraint absmax(|lam|) by metric_tangent, against its own differences
        fd_c = (up.constraints - down.constraints) / (2 * h)
        np.testing.assert_allclose(ev.constraint_jacobian[:, j], fd_c, rtol=1e-5, atol=1e-6)
    # the objective is what it says: the mean squared distance from the target
    r = ev.path - rscr.target
    assert ev.objective == pytest.approx(np.mean(np.sum(r * r, axis=1)), rel=1e-14)


def test_a_design_that_cannot_assemble_is_a_failed_evaluation_not_an_exception(rscr):
    # the ground distance a = 5 cannot be bridged by the links
    ev = evaluate(rscr, KNOWN, extra={"a": 5.0})
    assert ev.status == st.NO_ASSEMBLY and not ev.ok
    assert math.isnan(ev.objective) and np.all(np.isnan(ev.gradient))
    assert "no consistent initial point" in ev.message


def test_the_shipped_config_runs_from_the_command_line_and_writes_its_history(folder, rscr, capsys):
    out = folder / "rscr_curve.zarr"
    code = main(["design", str(RSCR_DESIGN), "--workers", "0", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "best: start 0 (file)" in captured.out
    ds = xr.open_zarr(out)
    assert ds.attrs["method"] == "ipopt"
    assert ds.attrs["design_yaml"] == RSCR_DESIGN.read_text()
    assert {"objective", "L2", "gamma", "max_multiplier", "gradient_norm", "point_status",
            "start_L2", "start_gamma", "final_objective", "iterations", "path", "initial_path",
            "target"} <= set(ds.data_vars)
    assert ds["objective"].dims == ("start", "iteration")
    assert ds["path"].dims == ("start", "time", "component")
    assert list(ds["component"].values) == ["B[0]", "B[1]", "B[2]"]
    assert ds.attrs["best_start"] == 0
    params = json.loads(ds.attrs["best_parameters"])
    np.testing.assert_allclose([params["L2"], params["gamma"]], KNOWN, atol=1e-6)
    assert json.loads(ds.attrs["start_status"]) == ["converged"]
    assert int(ds["iterations"].values[0]) >= 1
    # the constraint (max 200) holds all along; the start's row is the file's start
    assert np.nanmax(ds["max_multiplier"].values) <= 200
    np.testing.assert_allclose([ds["L2"].values[0, 0], ds["gamma"].values[0, 0]], [1.02, 1.30])
    assert (folder / "rscr_curve.png").stat().st_size > 10_000
    # a second run refuses to replace the store without --overwrite: exit 2, before any solve
    code = main(["design", str(RSCR_DESIGN), "--workers", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--out {out}: the store exists; give --overwrite to replace it, or another path" in err


# ------------------------------------------------------------ a sweep store's best points
SWEEP = """\
Title: Pendulum lengths
Model: {model}
Override: {{ProblemData: {{tend: 1.0}}, SolverParams: {{Integration: {{tol: 1.0e-12}}}}}}
Sweep:
  product:
    L: {{values: [0.85, 0.95, 1.0, 1.07, 1.16, 1.25, 1.4]}}
Outputs:
  variables: [{variables}]
  samples: 41
Batch: 7
"""


@pytest.fixture(scope="module")
def store(folder):
    path = folder / "lengths.yaml"
    path.write_text(SWEEP.format(model=PENDULUM, variables="x, y"))
    out = folder / "lengths.zarr"
    run_sweep_file(path, str(out), workers=0, progress=False, plot=False, echo=lambda *a: None)
    return out


def test_starts_from_a_store_are_its_best_stored_points(folder, pendulum, store, capsys):
    spec, context = pendulum
    ds = xr.open_zarr(store)
    # each in-bounds point's objective, from the stored series alone
    t = np.asarray(ds["time"].values)
    expected = {}
    for p, L in enumerate(ds["L"].values):
        if not 0.8 <= L <= 1.3:
            continue
        path = np.stack([np.interp(context.times, t, ds[v].values[p]) for v in ("x", "y")], axis=1)
        expected[float(L)] = float(np.mean(np.sum((path - context.target) ** 2, axis=1)))
    best_two = sorted(expected, key=expected.get)[:2]
    assert best_two == [1.07, 1.16]       # the lengths nearest the target's 1.1
    starts, notes = rank_store(context, str(store), 2)
    assert [float(x0[0]) for x0, _, _ in starts] == best_two
    assert [err for _, _, err in starts] == pytest.approx([expected[L] for L in best_two], rel=1e-9)

    out = folder / "from_store.zarr"
    code = main(["design", str(spec.path), "--from", str(store), "--starts", "2", "--workers", "0",
                 "--out", str(out), "--no-plot"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "start from store point 3: L = 1.07" in captured.err
    h = xr.open_zarr(out)
    assert h["start_L"].values.tolist() == best_two
    np.testing.assert_allclose(h["L"].values[:, 0], best_two)
    final = [h["L"].values[i, int(np.flatnonzero(np.isfinite(h["L"].values[i]))[-1])]
             for i in range(2)]
    np.testing.assert_allclose(final, [1.1, 1.1], atol=1e-6)
    assert not (folder / "from_store.png").exists()


def test_starts_from_a_store_on_s3_are_those_of_the_same_store_on_disk(s3, pendulum, store):
    from sweep.location import StoreLocation

    spec, context = pendulum
    url = s3.url("design/lengths.zarr")
    StoreLocation(url).upload(store)
    assert rank_store(context, url, 2) == rank_store(context, str(store), 2)


def test_a_store_without_the_path_variable_is_refused(folder, pendulum):
    spec, context = pendulum
    path = folder / "only_x.yaml"
    path.write_text(SWEEP.format(model=PENDULUM, variables="x")
                    .replace("[0.85, 0.95, 1.0, 1.07, 1.16, 1.25, 1.4]", "[1.0, 1.2]"))
    out = folder / "only_x.zarr"
    run_sweep_file(path, str(out), workers=0, progress=False, plot=False, echo=lambda *a: None)
    with pytest.raises(InputError) as err:
        rank_store(context, str(out), 2)
    assert str(err.value) == (f"--from {out}: the store has no variable 'y' for the path (it keeps "
                              f"x); run the sweep with Outputs.variables including y")


# ------------------------------------------------------------ starts on Dask
def test_starts_run_in_parallel_on_a_local_cluster(pendulum):
    spec, _ = pendulum
    lines = []
    result = run_design(spec, starts=[{"L": 0.9}, {"L": 1.25}], workers=2, echo=lines.append)
    assert [s.status for s in result.starts] == ["converged", "converged"]
    for s in result.starts:
        assert s.x[0] == pytest.approx(1.1, abs=1e-6)
    assert result.starts[1].x0[0] == 1.25
    finished = [line for line in lines if line.startswith("[")]
    assert len(finished) == 2 and {line[:5] for line in finished} == {"[1/2]", "[2/2]"}


# ------------------------------------------------------------ failed design points
def _failing(monkeypatch, fails):
    """sweep.design.optimize.evaluate with a region of designs that 'cannot assemble'."""
    real = design_mod.evaluate
    calls = {"failed": 0}

    def fake(context, x, model=None, **kw):
        # the reference design of the target (curve=False) always solves
        if kw.get("curve", True) and fails(float(x[0])):
            calls["failed"] += 1
            ev = real(context, x, model, **kw)
            return dataclasses.replace(ev, objective=math.nan, status=st.NO_ASSEMBLY,
                                       message="no consistent initial point (test)")
        return real(context, x, model, **kw)

    monkeypatch.setattr(design_mod, "evaluate", fake)
    return calls


def test_failed_points_on_the_way_do_not_stop_the_optimiser(pendulum, monkeypatch):
    spec, context = pendulum
    calls = _failing(monkeypatch, lambda L: L < 1.0)
    result = run_design(spec, starts=[{"L": 1.25}], workers=0, echo=lambda line: None)
    s = result.starts[0]
    assert calls["failed"] >= 1          # the first step lands on the lower bound 0.8
    assert s.status == "converged", s.message
    assert s.x[0] == pytest.approx(1.1, abs=1e-6)


def test_a_start_that_meets_only_failures_stops_with_a_clear_status(pendulum, monkeypatch):
    spec, context = pendulum
    _failing(monkeypatch, lambda L: L != 1.25)
    result = run_design(spec, starts=[{"L": 1.25}], workers=0, echo=lambda line: None)
    s = result.starts[0]
    assert s.status == "failed"
    assert s.message.startswith(f"{design_mod.MAX_CONSECUTIVE_FAILURES} design points in a row "
                                "failed to solve, the last at L = ")
    assert s.x[0] == 1.25                # the best design that solved
    # every start failing: no best design; the CLI then exits 1
    _failing(monkeypatch, lambda L: True)
    result = run_design(spec, workers=0, echo=lambda line: None)
    assert result.best is None and result.starts[0].status == "failed"
    assert result.starts[0].message.startswith("the initial point does not solve (no_assembly")
    assert "no start ended on a design that solves" in str(result)


# ------------------------------------------------------------ bad input
def _error(path: Path, model=True) -> str:
    with pytest.raises(InputError) as err:
        spec = load_design(path)
        if model:
            build_problem(spec)
    return str(err.value)


def test_bad_design_files_are_refused_with_located_messages(folder, pendulum):
    f = _pendulum_file(folder, "q.yaml")
    f.write_text(f.read_text().replace("  L: {start", "  Q: {start"))
    assert _error(f) == (f"{f}:5: Parameters.Q: 'Q' is not a parameter of the model {PENDULUM}; "
                         f"design parameters are scalar parameters: g, L")
    f = _pendulum_file(folder, "start.yaml", start=1.5)
    assert _error(f, model=False) == (f"{f}:5: Parameters.L.start: start 1.5 is outside the bounds "
                                      f"[0.8, 1.3]; give a start within them (lo <= start <= hi)")
    f = _pendulum_file(folder, "path.yaml", **{"path: [x, y]": "path: [x, z]"})
    assert _error(f) == (f"{f}:7: Objective.path[1]: unknown variable 'z' for the path; the "
                         f"model's variables are x, y, lam; give a variable, a component, or a "
                         f"list of them")
    f = _pendulum_file(folder, "samples.yaml",
                       target="{samples: {t: [0, 1], points: [[1, 0, 0], [0, 1, 0]]}}")
    assert _error(f) == (f"{f}:8: Objective.target.samples: each point must have 2 values (the "
                         f"path x, y has 2 components), got 3")
    f = _pendulum_file(folder, "span.yaml", target="{samples: {t: [0, 0.5], points: [[1, 0], [0, 1]]}}")
    assert "the target's times cover t = 0 .. 0.5, but the output times run over t = 0 .. 1" \
        in _error(f)
    f = _pendulum_file(folder, "method.yaml", method="BFGS")
    assert _error(f, model=False) == (f"{f}:10: Optimizer.method: unknown value 'BFGS'; valid "
                                      f"choices: L-BFGS-B, SLSQP, ipopt; did you mean 'L-BFGS-B'?")
    f = _pendulum_file(folder, "cons.yaml")
    f.write_text(f.read_text() + "Constraints:\n  swing: {of: x, reduce: min, min: -1}\n")
    assert _error(f, model=False) == (f"{f}:10: Optimizer.method: L-BFGS-B takes bounds only, not "
                                      f"Constraints; use method SLSQP or ipopt (Optimizer: "
                                      f"{{method: SLSQP}}), or remove Constraints")
    f = _pendulum_file(folder, "expr.yaml", target="{expression: ['L*cos(t)', 'sin(t)']}")
    assert "Objective.target.expression[0]: the target may not depend on a design parameter " \
           "('L')" in _error(f)
    f = _pendulum_file(folder, "two.yaml", target="{design: {L: 1.1}, csv: c.csv}")
    assert _error(f, model=False) == (f"{f}:8: Objective.target: give exactly one of design, "
                                      f"samples, csv, expression, got 2 (design, csv)")


def test_targets_from_samples_csv_and_expressions_are_the_same_curve(folder, pendulum):
    """One circle-free curve given three ways: interpolated samples, a CSV file, expressions."""
    _, context = pendulum
    t = np.linspace(0, 1, 11)
    rows = np.stack([1.1 * np.cos(t), 0.3 * t], axis=1)
    samples = "{samples: {t: %s, points: %s}}" % (t.tolist(), rows.tolist())
    (folder / "curve.csv").write_text("t,x,y\n" + "".join(f"{float(a)!r},{float(b)!r},{float(c)!r}\n"
                                                          for a, b, c in zip(t, *rows.T)))
    curves = []
    for name, target in (("s.yaml", samples), ("c.yaml", "{csv: curve.csv}"),
                         ("e.yaml", "{expression: ['1.1*cos(t)', '0.3*t']}")):
        curves.append(build_problem(load_design(_pendulum_file(folder, name, target=target))).target)
    at = context.times
    np.testing.assert_allclose(curves[2], np.stack([1.1 * np.cos(at), 0.3 * at], axis=1), rtol=1e-15)
    np.testing.assert_allclose(curves[0], curves[1], rtol=0, atol=1e-15)
    # linear interpolation of samples 0.1 apart: within h²/8 max|x''| of the curve
    np.testing.assert_allclose(curves[0], curves[2], atol=1.1 * 0.1**2 / 8 + 1e-12)
    (folder / "bad.csv").write_text("t,x,y\n0,1,0\n0.5,one,0\n1,0,1\n")
    f = _pendulum_file(folder, "badcsv.yaml", target="{csv: bad.csv}")
    assert _error(f, model=False) == (f"{f}:8: Objective.target.csv: {folder / 'bad.csv'}:3: "
                                      f"column 2: expected a finite number, got 'one'")


def test_cli_bad_input_exits_2_with_the_message(folder, capsys):
    f = _pendulum_file(folder, "method2.yaml", method="newton")
    assert main(["design", str(f), "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "Optimizer.method: unknown value 'newton'; valid choices: L-BFGS-B, SLSQP, ipopt" in err
    assert "Traceback" not in err
    assert main(["design", str(_pendulum_file(folder)), "--starts", "2"]) == 2
    assert "--starts K picks the K best points of a sweep store: give --from STORE.zarr too" \
        in capsys.readouterr().err
    assert main(["design", str(folder / "missing.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["SLSQP", "ipopt"])
def test_an_active_constraint_holds_at_the_optimum(folder, pendulum, method):
    """The target (L = 1.1) swings lower than max(y) <= 1.05 allows: the optimum sits on the constraint."""
    f = _pendulum_file(folder, f"active_{method}.yaml", method=method)
    f.write_text(f.read_text() + "Constraints:\n  ymax: {of: y, reduce: max, max: 1.05}\n")
    result = run_design(f, workers=0, echo=lambda line: None)
    s = result.starts[0]
    assert s.status == "converged", s.message
    assert s.constraints[0] == pytest.approx(1.05, abs=1e-7)      # active
    context = result.context
    feasible = evaluate(context, s.x - 1e-4)
    assert feasible.constraints[0] < 1.05 and feasible.objective > s.objective
    assert evaluate(context, s.x + 1e-4).constraints[0] > 1.05   # further is infeasible
