"""The ``mechsweep`` command line end to end: check, simulate, plot, animate.

References: the harmonic oscillator's exact solution x0 cos(ωt) for the
``simulate --json`` final state; the PNG and GIF formats as decoded by Pillow.
"""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
from PIL import Image

from sweep.cli.app import main

PENDULUM = """Title: Short pendulum
Kind: DAE
PhysicalParams: {g: 9.81, L: 1.0}
Variables: [x, y, lam]
Equations:
  - x'' + lam*x
  - y'' + lam*y - g
  - x**2 + y**2 - L**2
ProblemData:
  tend: 0.5
  values: {x: L, y: 0, x': 0, y': 0}
  fixed: [x, x']
  samples: 21
Animation:
  Scene: {view: [0, 90]}
  Points: {O: [0, 0], bob: [x, -y]}
  Links: [[O, bob]]
  frames: 10
"""

OSCILLATOR = """Title: Harmonic oscillator
Kind: Lagrangian
PhysicalParams: {m: 2.0, k: 8.0, x0: 0.3}
Coordinates: {x: 1}
KineticEnergy: m/2*x'**2
PotentialEnergy: k/2*x**2
ProblemData:
  tend: 1.0
  positions: {x: x0}
  fixedpositions: {x}
  velocities: {x: 0}
  samples: 11
SolverParams:
  Integration: {tol: 1.0e-12, max_steps: MAXSTEPS}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    (root / "pendulum.yaml").write_text(PENDULUM)
    (root / "osc.yaml").write_text(OSCILLATOR.replace("MAXSTEPS", "100000"))
    (root / "osc_short.yaml").write_text(OSCILLATOR.replace("MAXSTEPS", "2"))
    return root


@pytest.fixture(scope="module")
def pendulum_run(files):
    """``simulate --json --out run.zarr`` once; (exit code, stdout, stderr, zarr path)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    run = files / "run.zarr"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["simulate", str(files / "pendulum.yaml"), "--json", "--out", str(run)])
    return code, out.getvalue(), err.getvalue(), run


def test_check_prints_variables_structure_index_and_dof(files, capsys):
    assert main(["check", str(files / "pendulum.yaml")]) == 0
    out = capsys.readouterr().out
    assert "variables: x, y, lam" in out
    assert "parameters: g = 9.81, L = 1.0" in out
    assert "Σ-method structural analysis: 3 equations, 3 unknowns" in out
    assert "index: 3" in out
    # Both counts, named: x, y, x', y' less the constraint at two levels; the
    # talk's DOF (coordinates x, y less one constraint) is half of it.
    assert "initial values (positions and velocities; the DAE's DOF): 2" in out
    assert "mechanical DOF (coordinates - constraints): 1" in out


def test_simulate_json_summary(pendulum_run):
    code, out, err, _ = pendulum_run
    assert code == 0
    info = json.loads(out)
    assert info["status"] == "success" and info["status_code"] == 0
    assert info["steps"] > 0 and info["t_end"] == pytest.approx(0.5)
    # Every variable and every state derivative: x, x', y, y' and lam (d = 0).
    assert set(info["final"]) == {"x", "x'", "y", "y'", "lam"}
    r = math.hypot(info["final"]["x"], info["final"]["y"])
    assert r == pytest.approx(1.0, abs=1e-10)
    assert info["max_constraint_residual"] < 1e-9
    assert "energy_drift" not in info          # a DAE-kind model has no energy
    assert info["wall_seconds"] > 0 and 0 <= info["compile_seconds"] <= info["wall_seconds"]
    assert 0 <= info["integration_seconds"] <= info["wall_seconds"] - info["compile_seconds"]
    # Progress on stderr: a start and a finish line with the time taken,
    # compiling apart from solving.
    assert "solving 'Short pendulum'" in err and "finished in" in err
    assert re.search(r"\(\d+\.\d s compiling, \d+\.\d\d s solving\)", err)


def test_simulate_quick_compile_gives_the_same_run_and_records_it(files, pendulum_run, tmp_path, capsys):
    run = tmp_path / "quick.zarr"
    assert main(["simulate", str(files / "pendulum.yaml"), "--json", "--quick-compile", "--out", str(run)]) == 0
    captured = capsys.readouterr()
    assert "compiling quickly (--quick-compile)" in captured.err
    quick, full = json.loads(captured.out)["final"], json.loads(pendulum_run[1])["final"]
    assert quick.keys() == full.keys()
    for name, value in quick.items():
        assert value == pytest.approx(full[name], abs=1e-12)
    assert xr.open_zarr(run, consolidated=False).attrs["solver_optimize"] is False
    assert xr.open_zarr(pendulum_run[3], consolidated=False).attrs["solver_optimize"] is True


def test_simulate_builds_quickly_until_optimize_stores_the_optimised_build(files, tmp_path):
    """In fresh processes, as a user runs them: a first simulate goes on a quick build; --optimize compiles
    the optimised build and marks it in the program store; a plain simulate then loads that build, and
    --quick-compile still compiles quickly.  All four give the same final state to rounding."""
    env = {k: v for k, v in os.environ.items() if k not in ("MECHSWEEP_TIERED_COMPILE", "XLA_FLAGS")}
    env["MECHSWEEP_JAX_CACHE"] = str(tmp_path / "cache")

    def simulate(*flags):
        proc = subprocess.run([sys.executable, "-m", "sweep.cli.app", "simulate", str(files / "pendulum.yaml"),
                               "--json", *flags], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout), proc.stderr

    runs = [simulate(), simulate("--optimize"), simulate(), simulate("--quick-compile")]
    assert [info["build"] for info, _ in runs] == ["quick", "optimised", "optimised", "quick"]
    assert "compiling a quick build unless an optimised one is stored (--optimize builds it)" in runs[0][1]
    assert re.search(r"steps in \d+\.\d\d s on a quick build\n", runs[0][1])
    assert "compiling the optimised build (--optimize) the first time takes a while" in runs[1][1]
    assert "on the optimised build" in runs[2][1] and "compiling quickly (--quick-compile)" in runs[3][1]
    assert list((tmp_path / "cache" / "programs").glob("run-*.optimised"))
    # The executables loaded ahead are recorded per build choice: auto, --optimize, --quick-compile.
    assert len(list((tmp_path / "cache" / "prefetch").glob("*.json"))) == 3
    first = runs[0][0]["final"]
    for info, _ in runs[1:]:
        assert info["final"] == pytest.approx(first, abs=1e-12)


def test_a_long_run_on_a_quick_build_suggests_optimize(files, program_store_dir, monkeypatch, capsys):
    from solver import tiered
    from sweep.cli import solver_commands

    monkeypatch.delenv(tiered.TIERED_ENV, raising=False)
    monkeypatch.setattr(solver_commands, "QUICK_RUN_HINT_SECONDS", 0.0)
    assert main(["simulate", str(files / "osc.yaml"), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["build"] == "quick"
    assert re.search(r"the steps took \d+\.\d s on a quick build, which runs up to 10x slower: --optimize "
                     r"compiles the optimised build once, and later runs of this model then use it", captured.err)


def test_a_model_files_optimize_setting_chooses_the_build_unless_a_flag_does(files, tmp_path, monkeypatch, capsys):
    from sweep.cli import solver_commands
    from solver.models import load

    model = load(str(files / "osc.yaml"))
    assert model.optimize is None and solver_commands._build_mode(model, "auto") == ("quick", "")
    for said in (False, True):
        path = tmp_path / f"osc_{said}.yaml"
        path.write_text(OSCILLATOR.replace("MAXSTEPS", f"100, optimize: {str(said).lower()}"))
        assert load(str(path)).optimize is said
    model.optimize = False
    assert solver_commands._build_mode(model, "auto") == ("off", "SolverParams.Integration.optimize: false")
    assert solver_commands._build_mode(model, "optimised") == ("optimised", "--optimize")
    model.optimize = True
    assert solver_commands._build_mode(model, "auto") == ("optimised", "SolverParams.Integration.optimize: true")
    assert solver_commands._build_mode(model, "quick") == ("off", "--quick-compile")
    assert main(["simulate", str(files / "osc.yaml"), "--optimize", "--quick-compile"]) == 2
    assert "argument --quick-compile: not allowed with argument --optimize" in capsys.readouterr().err


def test_simulate_out_zarr_reopens_with_the_same_final_state(pendulum_run):
    _, out, _, run = pendulum_run
    ds = xr.open_zarr(run, consolidated=False).load()
    final = json.loads(out)["final"]
    assert float(ds.x[-1]) == final["x"] and float(ds.y_d1[-1]) == final["y'"]
    assert ds.attrs["model_yaml"] == PENDULUM and ds.attrs["title"] == "Short pendulum"
    assert ds.sizes["time"] == 21


def test_simulate_out_netcdf_round_trips_and_plots(files, tmp_path, capsys):
    """netCDF-3 (scipy's writer) stores neither lists of strings nor a
    ``variables`` attribute of its own: the result still writes, reopens
    with the same attributes and values, and plots."""
    from sweep.cli.app import open_result

    nc = tmp_path / "run.nc"
    assert main(["simulate", str(files / "pendulum.yaml"), "--json", "--out", str(nc)]) == 0
    final = json.loads(capsys.readouterr().out)["final"]
    ds = open_result(str(nc))
    assert ds.attrs["variables"] == ["x", "y", "lam"] and ds.attrs["title"] == "Short pendulum"
    assert float(ds.x[-1]) == final["x"]
    assert main(["plot", str(nc), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 0


def test_simulate_store_opens_quietly_and_records_the_order_used(pendulum_run):
    import warnings

    from solver.integrate.integrator import order_for_tol

    _, _, _, run = pendulum_run
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # e.g. xarray's consolidated-metadata warning
        ds = xr.open_zarr(run).load()
    assert ds.attrs["solver_order"] == order_for_tol(1e-10) > 0


def test_text_coordinates_are_stored_as_variable_length_strings_without_a_zarr_warning(tmp_path):
    """A rigid body's ``axis`` coordinate ('x', 'y', 'z') was written in numpy's
    fixed-width text form, which has no Zarr v3 specification: zarr warned that
    the store might become unreadable.  Results, design histories and sweep
    stores write text as variable-length strings, which read back equal."""
    import warnings

    from sweep.cli.app import open_result, write_result

    ds = xr.Dataset({"w": (("time", "axis"), np.arange(6.0).reshape(2, 3)), "note": ("time", np.array(["a", "bc"]))},
                    coords={"time": [0.0, 1.0], "axis": np.array(["x", "y", "z"])})
    path = str(tmp_path / "run.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_result(ds, path)
    back = open_result(path)
    assert [str(a) for a in back.axis.values] == ["x", "y", "z"]
    assert [str(a) for a in back.note.values] == ["a", "bc"]
    np.testing.assert_array_equal(back.w.sel(axis="y").values, [1.0, 4.0])


def test_json_final_over_1000_values_goes_to_a_file(tmp_path, capsys):
    import argparse

    from sweep.cli.solver_commands import FINAL_MAX, spill_final
    from sweep.log import cli_logging

    small = {"status": "success", "final": {"x": 1.0}, "steps": 3}
    args = argparse.Namespace(out=str(tmp_path / "run.zarr"), model="m.yaml")
    assert spill_final(dict(small), args, None) == small
    big = {f"r[{i}]": float(i) for i in range(FINAL_MAX + 1)}
    with cli_logging():       # the note is a log record: shown as main() shows it
        info = spill_final({"status": "success", "final": big, "steps": 3}, args, None)
    assert list(info) == ["status", "final_file", "final_count", "steps"]
    assert info["final_file"] == str(tmp_path / "run.final.json") and info["final_count"] == 1001
    assert json.loads((tmp_path / "run.final.json").read_text()) == big
    assert "wrote it to" in capsys.readouterr().err


def test_simulate_lagrangian_json_matches_the_exact_oscillation(files, capsys):
    assert main(["simulate", str(files / "osc.yaml"), "--json", "--set", "x0=0.5"]) == 0
    info = json.loads(capsys.readouterr().out)
    w = math.sqrt(8.0 / 2.0)
    assert info["final"]["x"] == pytest.approx(0.5 * math.cos(w), abs=1e-10)
    assert info["final"]["x'"] == pytest.approx(-0.5 * w * math.sin(w), abs=1e-10)
    assert info["energy_drift"] < 1e-10 and info["conservative"] is True


def test_simulate_without_json_prints_one_line_in_three_digits(files, capsys):
    assert main(["simulate", str(files / "osc.yaml"), "--set", "x0=0.5"]) == 0
    line = capsys.readouterr().out.strip()
    # The figures a person reads, rounded; --json (above) keeps every digit.
    assert re.fullmatch(r"[^:\n]+: success at t = 1, \d+ steps, max constraint residual 0, "
                        r"energy drift \d(\.\d{1,2})?e-\d\d, energy change -?\d(\.\d{1,2})?e-\d\d", line), line


def test_failed_simulation_exits_1(files, capsys):
    assert main(["simulate", str(files / "osc_short.yaml"), "--json"]) == 1
    info = json.loads(capsys.readouterr().out)
    assert info["status"] != "success" and info["t_end"] < 1.0


def test_plot_from_a_stored_run_writes_a_png(pendulum_run, files, capsys):
    _, _, _, run = pendulum_run
    png = files / "fig.png"
    assert main(["plot", str(run), "--vars", "x", "y", "lam", "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as im:
        im.verify()
    assert main(["plot", str(run), "--vars", "z", "--out", str(png)]) == 2
    assert "no time series named 'z'; valid names: constraint_residual, lam, x, x_d1" in capsys.readouterr().err


def test_animate_from_a_stored_run_writes_a_gif_and_html(pendulum_run, files):
    _, _, _, run = pendulum_run
    gif = files / "anim.gif"
    assert main(["animate", str(run), "--out", str(gif)]) == 0
    with Image.open(gif) as im:
        assert im.format == "GIF" and im.size == (400, 400)   # 5 in x 80 dpi
        assert im.n_frames == 10                              # Animation.frames
        frames = []
        for k in range(im.n_frames):
            im.seek(k)
            frames.append(np.asarray(im.convert("L"), dtype=float))
    assert np.abs(frames[-1] - frames[0]).sum() > 0           # the bob moved
    html = files / "anim.html"
    assert main(["animate", str(run), "--out", str(html), "--frames", "3"]) == 0
    assert "<script" in html.read_text()


def test_animate_refuses_unknown_formats(pendulum_run, files, capsys):
    _, _, _, run = pendulum_run
    assert main(["animate", str(run), "--out", str(files / "anim.avi")]) == 2
    assert "animations are written as .gif, .mp4, .html" in capsys.readouterr().err


def test_status_of_something_that_is_not_a_store(files, capsys):
    assert main(["status", str(files / "pendulum.yaml")]) == 2
    assert "no Zarr store there" in capsys.readouterr().err
