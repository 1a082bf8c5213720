"""Input limits and argument checks: every case exits 2 with a clear message.

End to end through ``sweep.cli.app.main`` (as ``mechsweep`` runs it): YAML alias
bombs and deep nesting, output sizes, batch and grid sizes, ``--workers``,
``--out`` targets, MODEL paths that are not model files, and initial values
that cannot be met.  Every case but the last fails before anything is
compiled.  Messages are compared exactly, with the temporary folder written
as ``TMP``; ``MECHSWEEP_*`` overrides of the limits are tested too.
"""

import os

import pytest

import solver
from solver.errors import InputError
from sweep.cli.app import main
from models_for_tests import PENDULUM_YAML

PENDULUM = PENDULUM_YAML
CLOTH = """Title: C
Kind: Lagrangian
PhysicalParams: {m: 100000, n: 100000, M: 0.1, k: 20.0, l: 0.9, kd: 0.05, g: 9.81, dx: 1.0, dy: 1.0}
Generator:
  cloth: {rows: m, cols: n}
ProblemData: {tend: 2}
"""
SWEEP = "Model: model.yaml\nSweep: {product: {L: [1, 2]}}\n"
SECRET = "root:x:0:0:secret-first-line:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/bin/sh\n"
ERR = "mechsweep: error: "


def alias_bomb(levels=9, width=10) -> str:
    """The classic 'billion laughs': each level holds ``width`` aliases of the last."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    """A folder with the pendulum model, as the working directory; limits at their defaults."""
    for key in list(os.environ):
        if key.startswith("MECHSWEEP_MAX_"):
            monkeypatch.delenv(key)
    (tmp_path / "model.yaml").write_text(PENDULUM)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(tmp, capsys, *argv):
    """(exit code, stderr message with the folder as TMP); never a traceback."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.replace(str(tmp), "TMP")


def message(tmp, capsys, *argv) -> str:
    """The one error line of a command that must exit 2."""
    code, err = run(tmp, capsys, *argv)
    assert code == 2 and err.startswith(ERR) and err.endswith("\n"), err
    return err[len(ERR):-1]


# ------------------------------------------------------------------ YAML limits
def test_alias_bomb_fails_fast_at_the_alias_that_crosses_the_limit(tmp, capsys):
    (tmp / "bomb.yaml").write_text(alias_bomb())
    # The count in the message is where reading stopped: the bomb is never expanded.
    text = message(tmp, capsys, "check", tmp / "bomb.yaml")
    assert text == (
        "TMP/bomb.yaml:6: too many values once the aliases are expanded: the alias '*a4' here "
        "brings the count to 1012351 (each '*alias' repeats the whole '&anchor' block it names); "
        "the limit is 1000000 (MAX_YAML_NODES); set the environment variable "
        "MECHSWEEP_MAX_YAML_NODES to raise it")


def test_alias_bomb_in_a_sweep_file_fails_in_dry_run(tmp, capsys):
    (tmp / "bomb.yaml").write_text(SWEEP + alias_bomb())
    text = message(tmp, capsys, "sweep", tmp / "bomb.yaml", "--dry-run")
    assert text.startswith("TMP/bomb.yaml:") and "(MAX_YAML_NODES)" in text


def test_flow_nesting_10000_deep_is_refused_without_recursion_error(tmp, capsys):
    (tmp / "deep.yaml").write_text("Title: " + "[" * 10_000 + "]" * 10_000 + "\n")
    assert message(tmp, capsys, "check", tmp / "deep.yaml") == (
        "TMP/deep.yaml:1: lists and mappings are nested more than 100 levels deep here; the "
        "limit is 100 (MAX_YAML_DEPTH) and model and sweep files need fewer than 10; set the "
        "environment variable MECHSWEEP_MAX_YAML_DEPTH to raise it")


def test_nesting_past_the_parsers_own_limit_names_that_limit(tmp, capsys, monkeypatch):
    """libyaml refuses more than 1,000 levels itself; a raised MAX_YAML_DEPTH cannot lift that."""
    monkeypatch.setenv("MECHSWEEP_MAX_YAML_DEPTH", "5000")
    (tmp / "deep.yaml").write_text("Title: " + "[" * 2_000 + "]" * 2_000 + "\n")
    assert message(tmp, capsys, "check", tmp / "deep.yaml") == (
        "TMP/deep.yaml:1: lists and mappings are nested more than 1000 levels deep here, the YAML "
        "parser's own limit; model and sweep files need fewer than 10")


def test_block_mapping_3000_deep_is_refused_at_the_line_where_it_crosses(tmp, capsys):
    text = "".join(" " * i + f"k{i}:\n" for i in range(3000)) + " " * 3000 + "v\n"
    (tmp / "deep.yaml").write_text(text)
    assert message(tmp, capsys, "check", tmp / "deep.yaml").startswith(
        "TMP/deep.yaml:101: lists and mappings are nested more than 100 levels deep here")


def test_yaml_limits_follow_their_environment_variables(tmp, capsys, monkeypatch):
    (tmp / "nest.yaml").write_text(PENDULUM + "Animation: {Scene: {view: [[[[1]]]]}}\n")
    monkeypatch.setenv("MECHSWEEP_MAX_YAML_DEPTH", "4")
    assert message(tmp, capsys, "check", tmp / "nest.yaml").startswith(
        "TMP/nest.yaml:13: lists and mappings are nested more than 4 levels deep here; the "
        "limit is 4 (MAX_YAML_DEPTH)")
    monkeypatch.setenv("MECHSWEEP_MAX_YAML_DEPTH", "lots")
    assert message(tmp, capsys, "check", tmp / "nest.yaml") == (
        "MECHSWEEP_MAX_YAML_DEPTH='lots': expected a positive whole number, optionally with a "
        "unit (e.g. 8GiB, 500MB, 2k)")
    monkeypatch.delenv("MECHSWEEP_MAX_YAML_DEPTH")
    monkeypatch.setenv("MECHSWEEP_MAX_YAML_NODES", "1e6")
    monkeypatch.setenv("MECHSWEEP_MAX_YAML_BYTES", "1k")
    (tmp / "big.yaml").write_text(PENDULUM + "#" * 2000 + "\n")
    assert message(tmp, capsys, "check", tmp / "big.yaml") == (
        "TMP/big.yaml: the file has 2.17 KiB, more than the limit of 1000 bytes for a YAML "
        "input (MAX_YAML_BYTES); set the environment variable MECHSWEEP_MAX_YAML_BYTES to "
        "raise it")


# ------------------------------------------------------------------ on/off switches
SWITCHES = ("MECHSWEEP_COMPILE_AHEAD", "MECHSWEEP_PROGRAMS_AHEAD", "MECHSWEEP_PROGRAM_STORE",
            "MECHSWEEP_TIERED_COMPILE")


@pytest.mark.parametrize("text, on", [("on", True), (" Off ", False), ("1", True), ("0", False), ("TRUE", True),
                                      ("false", False), ("Yes", True), ("no", False)])
def test_every_switch_takes_the_same_spellings(monkeypatch, text, on):
    from solver import ahead, program_store, tiered
    from solver.errors import switch

    for env in SWITCHES:
        monkeypatch.setenv(env, text)
        assert switch(env) is on
    assert ahead.enabled() is on
    assert tiered.tiered_mode() == ("tiered" if on else "off")
    if not on:
        assert program_store.store_directory() is None


def test_an_unset_or_empty_switch_keeps_its_default(monkeypatch):
    from solver.errors import switch

    monkeypatch.delenv("MECHSWEEP_PROGRAM_STORE", raising=False)
    assert switch("MECHSWEEP_PROGRAM_STORE") is True and switch("MECHSWEEP_PROGRAM_STORE", default=False) is False
    monkeypatch.setenv("MECHSWEEP_PROGRAM_STORE", "  ")
    assert switch("MECHSWEEP_PROGRAM_STORE") is True


def test_a_misspelt_switch_is_an_input_error_that_lists_the_spellings(tmp, capsys, monkeypatch):
    from solver import ahead, program_store

    monkeypatch.setenv("MECHSWEEP_COMPILE_AHEAD", "sometimes")
    with pytest.raises(InputError, match=r"^MECHSWEEP_COMPILE_AHEAD='sometimes': use on or off"):
        ahead.enabled()
    monkeypatch.setenv("MECHSWEEP_PROGRAM_STORE", "of")
    with pytest.raises(InputError, match=r"^MECHSWEEP_PROGRAM_STORE='of': use on or off"):
        program_store.store_directory()
    # At the command line: exit 2 before anything is compiled.
    monkeypatch.setenv("MECHSWEEP_PROGRAMS_AHEAD", "offf")
    assert message(tmp, capsys, "simulate", tmp / "model.yaml") == (
        "MECHSWEEP_PROGRAMS_AHEAD='offf': use on or off (on, 1, true, yes, off, 0, false, no), or unset it")


# ------------------------------------------------------------------ output sizes
def test_model_samples_beyond_memory_are_refused_by_check(tmp, capsys):
    (tmp / "m.yaml").write_text(PENDULUM + "  samples: 1000000000\n")
    assert message(tmp, capsys, "check", tmp / "m.yaml") == (
        "TMP/m.yaml:13: ProblemData.samples: 1000000000 output times x 7 values each (8 bytes a "
        "value) would need 52.2 GiB; the limit is 4 GiB (MAX_OUTPUT_BYTES); lower samples, or "
        "set the environment variable MECHSWEEP_MAX_OUTPUT_BYTES to raise it")


def test_model_dt_beyond_memory_is_refused(tmp, capsys):
    (tmp / "m.yaml").write_text(PENDULUM + "  dt: 1e-10\n")
    assert message(tmp, capsys, "simulate", tmp / "m.yaml") == (
        "TMP/m.yaml:13: ProblemData.dt: 10000000001 output times (every 1e-10 from 0 to 1) x 7 "
        "values each (8 bytes a value) would need 522 GiB; the limit is 4 GiB (MAX_OUTPUT_BYTES); "
        "raise dt, or set the environment variable MECHSWEEP_MAX_OUTPUT_BYTES to raise it")


def test_output_limit_can_be_raised(tmp, capsys, monkeypatch):
    (tmp / "m.yaml").write_text(PENDULUM + "  samples: 1000000000\n")
    monkeypatch.setenv("MECHSWEEP_MAX_OUTPUT_BYTES", "64GiB")
    assert run(tmp, capsys, "check", tmp / "m.yaml")[0] == 0


SWEEP_CASES = {
    "outputs_samples": (
        SWEEP + "Outputs: {samples: 1000000000}\n",
        "TMP/s.yaml:3: Outputs.samples: Outputs.samples = 1000000000 output times x at least 2 "
        "values (8 bytes a value) for one run would need 14.9 GiB; the limit is 4 GiB "
        "(MAX_OUTPUT_BYTES); lower samples (or raise dt), or set the environment variable "
        "MECHSWEEP_MAX_OUTPUT_BYTES to raise it"),
    "batch_1e30": (
        SWEEP + "Batch: 1e30\n",
        "TMP/s.yaml:3: Batch: Batch = 1e+30 points per batch is more than the limit of 100000 "
        "(MAX_BATCH): every batch is padded to Batch points and integrated at once in memory; "
        "lower Batch (64 to 1024 is typical), or set the environment variable MECHSWEEP_MAX_BATCH "
        "to raise it"),
    "batch_memory": (
        "Model: model.yaml\nSweep: {product: {L: {linspace: [1, 2, 100000]}}}\n"
        "Outputs: {samples: 10000, variables: [x, y]}\nBatch: 100000\n",
        "TMP/s.yaml:4: Batch: Batch = 100000: 100000 points x 10000 output times x at least 3 "
        "values (8 bytes a value) for one batch in memory would need 22.4 GiB; the limit is 4 GiB "
        "(MAX_OUTPUT_BYTES); lower Batch or the output times, or set the environment variable "
        "MECHSWEEP_MAX_OUTPUT_BYTES to raise it"),
    "store": (
        "Model: model.yaml\nSweep: {product: {L: {linspace: [1, 2, 1000000]}}}\n"
        "Outputs: {samples: 200000}\n",
        "TMP/s.yaml:2: Sweep: the store of 1000000 points x 200000 output times x at least 2 "
        "values (8 bytes a value) would need 2.91 TiB; the limit is 1 TiB (MAX_STORE_BYTES); lower "
        "the number of points or the output times, or set the environment variable "
        "MECHSWEEP_MAX_STORE_BYTES to raise it"),
    "override_samples": (
        "Model: model.yaml\nOverride: {ProblemData: {samples: 1000000000}}\n"
        "Sweep: {product: {L: [1, 2]}}\n",
        "TMP/s.yaml:2: Override.ProblemData.samples: Override ProblemData.samples = 1000000000 "
        "output times x at least 2 values (8 bytes a value) for one run would need 14.9 GiB; the "
        "limit is 4 GiB (MAX_OUTPUT_BYTES); lower samples (or raise dt), or set the environment "
        "variable MECHSWEEP_MAX_OUTPUT_BYTES to raise it"),
    "model_samples": (
        SWEEP.replace("model.yaml", "big.yaml"),
        "TMP/s.yaml:1: Model: the model's ProblemData.samples = 1000000000 output times x at "
        "least 2 values (8 bytes a value) for one run would need 14.9 GiB; the limit is 4 GiB "
        "(MAX_OUTPUT_BYTES); lower samples (or raise dt), or set the environment variable "
        "MECHSWEEP_MAX_OUTPUT_BYTES to raise it"),
    "outputs_dt": (
        SWEEP + "Outputs: {dt: 1e-9}\n",
        "TMP/s.yaml:3: Outputs.dt: Outputs.dt = 1e-09 gives 1000000001 output times x at least 2 "
        "values (8 bytes a value) for one run would need 14.9 GiB; the limit is 4 GiB "
        "(MAX_OUTPUT_BYTES); lower samples (or raise dt), or set the environment variable "
        "MECHSWEEP_MAX_OUTPUT_BYTES to raise it"),
}


@pytest.mark.parametrize("name", sorted(SWEEP_CASES))
def test_sweep_sizes_are_refused_by_dry_run_and_run(tmp, capsys, name):
    text, expected = SWEEP_CASES[name]
    (tmp / "big.yaml").write_text(PENDULUM + "  samples: 1000000000\n")
    (tmp / "s.yaml").write_text(text)
    assert message(tmp, capsys, "sweep", tmp / "s.yaml", "--dry-run") == expected
    assert message(tmp, capsys, "sweep", tmp / "s.yaml", "--out", tmp / "o.zarr") == expected
    assert not (tmp / "o.zarr").exists()


def test_huge_cloth_grid_is_refused_with_its_memory(tmp, capsys):
    (tmp / "cloth.yaml").write_text(CLOTH)
    expected = (
        "a cloth of 100000 x 100000 = 10000000000 particles has 30000000000 coordinates; one "
        "state (positions and velocities) alone would need 447 GiB, and the solver keeps it for "
        "every Taylor coefficient and output time; the limit is 10000 particles "
        "(MAX_CLOTH_PARTICLES); lower rows or cols, or set the environment variable "
        "MECHSWEEP_MAX_CLOTH_PARTICLES to raise it")
    assert message(tmp, capsys, "check", tmp / "cloth.yaml") == \
        f"TMP/cloth.yaml:5: Generator.cloth.rows: {expected}"
    with pytest.raises(InputError) as err:
        solver.mechanics.cloth.cloth(100_000, 100_000)
    assert str(err.value) == f"cloth: {expected}"


def test_huge_variable_size_is_refused(tmp, capsys):
    (tmp / "v.yaml").write_text("Kind: DAE\nVariables: {q: 1000000000}\nEquations: [q' + q]\n"
                                "ProblemData: {tend: 1}\n")
    assert message(tmp, capsys, "check", tmp / "v.yaml") == (
        "TMP/v.yaml:2: Variables.q: the variable sizes add up to 1000000000 scalar unknowns; one "
        "state vector alone would need 7.45 GiB and the solver's tables grow faster than that; "
        "the limit is 100000 (MAX_UNKNOWNS); lower the size, or set the environment variable "
        "MECHSWEEP_MAX_UNKNOWNS to raise it")


# ------------------------------------------------------------------ arguments
@pytest.mark.parametrize("value, shown", [("-2", "-2"), ("0", "0"), ("two", "'two'")])
def test_workers_must_be_at_least_one(tmp, capsys, value, shown):
    (tmp / "s.yaml").write_text(SWEEP)
    assert message(tmp, capsys, "sweep", tmp / "s.yaml", "--out", tmp / "o.zarr",
                   "--workers", value) == (
        f"argument --workers: expected a whole number >= 1, got {shown} "
        f"(see 'mechsweep sweep --help')")
    assert not (tmp / "o.zarr").exists()


def test_animate_frames_must_be_at_least_one(tmp, capsys):
    assert message(tmp, capsys, "animate", tmp / "model.yaml", "--out", tmp / "a.gif",
                   "--frames", "0") == (
        "argument --frames: expected a whole number >= 1, got 0 (see 'mechsweep animate --help')")


@pytest.mark.parametrize("budget", ["soon", "0", "-5", "nan", "inf"])
def test_animate_refuses_a_render_budget_that_is_not_a_positive_number_before_solving(tmp, capsys, monkeypatch,
                                                                                     budget):
    monkeypatch.setenv("MECHSWEEP_ANIMATION_BUDGET", budget)
    assert message(tmp, capsys, "animate", tmp / "model.yaml", "--out", tmp / "a.gif") == (
        f"MECHSWEEP_ANIMATION_BUDGET={budget!r}: expected a positive number of seconds (the default is 40)")
    assert not (tmp / "a.gif").exists()


def test_the_render_budget_follows_its_environment_variable(monkeypatch):
    from solver.results import plot

    monkeypatch.delenv(plot.ANIMATION_BUDGET_ENV, raising=False)
    assert plot._frame_budget() == plot.ANIMATION_BUDGET_S == 40.0
    monkeypatch.setenv(plot.ANIMATION_BUDGET_ENV, " 12.5 ")
    assert plot._frame_budget() == 12.5


def _out_targets(tmp):
    """name -> (path, how to check it is intact)."""
    (tmp / "file.zarr").write_text("precious\n")
    (tmp / "folder").mkdir()
    (tmp / "folder" / "keep.txt").write_text("keep\n")
    (tmp / "store").mkdir()
    os.symlink(tmp / "store", tmp / "link.zarr")
    return {
        "file": (tmp / "file.zarr", lambda: (tmp / "file.zarr").read_text() == "precious\n"),
        "symlink": (tmp / "link.zarr", lambda: os.path.islink(tmp / "link.zarr")
                    and (tmp / "store").is_dir() and not any((tmp / "store").iterdir())),
        "folder": (tmp / "folder", lambda: (tmp / "folder" / "keep.txt").read_text() == "keep\n"
                   and len(list((tmp / "folder").iterdir())) == 1),
    }


OUT_MESSAGES = {
    "file": "--out TMP/file.zarr: is an existing file, not a sweep store (a .zarr folder); "
            "choose another path",
    "symlink": "--out TMP/link.zarr: is a symbolic link; give the real path instead: mechsweep "
               "does not write or delete through links",
    "folder": "--out TMP/folder: is a folder that is not a sweep store (no Zarr metadata); "
              "choose another path",
}


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
@pytest.mark.parametrize("target", sorted(OUT_MESSAGES))
def test_sweep_out_that_is_not_a_store_is_refused_and_left_intact(tmp, capsys, target, overwrite):
    (tmp / "s.yaml").write_text(SWEEP)
    path, intact = _out_targets(tmp)[target]
    flags = ["--overwrite"] if overwrite else []
    expected = OUT_MESSAGES[target] + (
        "; --overwrite replaces only a store, never other files or folders" if overwrite else "")
    assert message(tmp, capsys, "sweep", tmp / "s.yaml", "--out", path, *flags) == expected
    assert intact()


def test_simulate_plot_and_animate_out_checks(tmp, capsys):
    targets = _out_targets(tmp)
    model = tmp / "model.yaml"
    assert message(tmp, capsys, "simulate", model, "--out", tmp / "file.zarr") == (
        "--out TMP/file.zarr: is an existing file, not a Zarr store (a .zarr folder); choose "
        "another path")
    assert message(tmp, capsys, "simulate", model, "--out", tmp / "link.zarr") == OUT_MESSAGES[
        "symlink"]
    assert message(tmp, capsys, "simulate", model, "--out", tmp / "nope" / "run.nc") == (
        "--out TMP/nope/run.nc: the folder TMP/nope does not exist")
    (tmp / "folder.nc").mkdir()
    assert message(tmp, capsys, "simulate", model, "--out", tmp / "folder.nc") == (
        "--out TMP/folder.nc: is a folder; give a file name")
    assert message(tmp, capsys, "plot", model, "--out", tmp / "folder") == (
        "--out TMP/folder: is a folder; give a file name")
    assert message(tmp, capsys, "animate", model, "--out", tmp / "file.zarr" / "a.gif") == (
        "--out TMP/file.zarr/a.gif: TMP/file.zarr is not a folder")
    assert all(intact() for _, intact in targets.values())


# ------------------------------------------------------------------ MODEL paths
@pytest.mark.parametrize("command", ["check", "simulate", "plot", "animate"])
def test_model_paths_that_are_not_files(tmp, capsys, command):
    (tmp / "adir.yaml").mkdir()
    out = {"plot": ["--out", tmp / "x.png"], "animate": ["--out", tmp / "x.gif"]}.get(command, [])
    cases = {"missing.yaml": "TMP/missing.yaml: file not found",
             "adir.yaml": "TMP/adir.yaml: expected a YAML file, found a folder"}
    if command in ("check", "simulate"):  # plot/animate read other sources as runs
        cases["missing"] = "TMP/missing: file not found"
        cases["adir"] = "TMP/adir: expected a YAML file, found a folder"
        (tmp / "adir").mkdir()
    for name, expected in cases.items():
        assert message(tmp, capsys, command, tmp / name, *out) == expected


_MISTYPED = r"""
import json, sys
from sweep.cli.app import main
code = main(sys.argv[1:])
print("LOADED " + json.dumps([code] + [m for m in ("jax", "xarray", "dask", "solver.models", "sweep.pipeline")
                                       if m in sys.modules]))
"""


@pytest.mark.parametrize("command", [["check"], ["simulate"], ["equilibrium"], ["sweep", "--out", "OUT.zarr"],
                                     ["design"]])
def test_a_mistyped_input_file_is_refused_before_the_solver_loads(tmp, command):
    # A typo in a file name is answered at once (exit 2), not after JAX, xarray and the pipeline import.
    import json
    import subprocess
    import sys

    args = [command[0], str(tmp / "mistyped.yaml")] + [str(tmp / a) if a.endswith(".zarr") else a
                                                      for a in command[1:]]
    proc = subprocess.run([sys.executable, "-c", _MISTYPED, *args], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.stderr == f"mechsweep: error: {tmp / 'mistyped.yaml'}: file not found\n"
    loaded = json.loads(proc.stdout.split("LOADED ", 1)[1])
    assert loaded == [2]
    assert not (tmp / "OUT.zarr").exists()


def test_dev_null_as_model_is_not_parsed_as_yaml_text(tmp, capsys):
    assert message(tmp, capsys, "check", "/dev/null") == (
        "/dev/null: expected a YAML file, found a character device (such as /dev/null), not a "
        "regular file")


def test_a_file_that_is_not_a_model_is_never_quoted(tmp, capsys):
    (tmp / "passwd").write_text(SECRET)
    text = message(tmp, capsys, "check", tmp / "passwd")
    assert text == ("TMP/passwd: expected a mapping of top-level keys (Title, Kind, ...), got "
                    "plain text, not 'key: value' lines; is this the right file?")
    assert "secret" not in text and "root" not in text


@pytest.mark.parametrize("model, expected", [
    ("passwd", "TMP/s.yaml:1: Model: TMP/passwd is not a model file: expected a mapping of "
               "top-level keys (Title, Kind, ...), got plain text, not 'key: value' lines; is "
               "this the right file?"),
    ("/dev/null", "TMP/s.yaml:1: Model: /dev/null cannot be a model file: expected a YAML file, "
                  "found a character device (such as /dev/null), not a regular file"),
    ("adir", "TMP/s.yaml:1: Model: TMP/adir cannot be a model file: expected a YAML file, found "
             "a folder"),
])
def test_sweep_model_that_is_not_a_model_file_fails_dry_run(tmp, capsys, model, expected):
    (tmp / "passwd").write_text(SECRET)
    (tmp / "adir").mkdir()
    (tmp / "s.yaml").write_text(SWEEP.replace("model.yaml", model))
    text = message(tmp, capsys, "sweep", tmp / "s.yaml", "--dry-run")
    assert text == expected and "secret" not in text


def test_sweep_file_that_is_not_a_sweep_is_never_quoted(tmp, capsys):
    (tmp / "passwd").write_text(SECRET)
    text = message(tmp, capsys, "sweep", tmp / "passwd", "--dry-run")
    assert text.startswith("TMP/passwd: expected a sweep file: a mapping with keys ")
    assert "secret" not in text


# ------------------------------------------------------------------ initial values
def test_impossible_initial_values_name_the_constraint_and_fixed_values(tmp, capsys):
    # x is fixed at 2 on a circle of radius 1: x**2 + y**2 - L**2 = 3 at best.
    (tmp / "imp.yaml").write_text(PENDULUM.replace("{x: L,", "{x: 2*L,"))
    code, err = run(tmp, capsys, "simulate", tmp / "imp.yaml")
    assert code == 2
    text = err.splitlines()[-1][len(ERR):]  # after the progress line
    assert text.startswith("TMP/imp.yaml: no consistent initial point found (IPOPT status 2")
    assert "violated: f2 = 3 (fixed: x = 2)." in text
