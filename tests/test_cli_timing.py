"""Every command that compiles and runs JAX programs reports its time, compiling apart from solving.

``check``, ``simulate`` (and ``plot`` or ``animate`` of a model file),
``equilibrium``, ``sweep`` (its ``--estimate`` too) and ``design`` each write ``... (C s compiling, R s solving)`` on stderr
through the ``mechsweep`` logger, and the two parts add up to no more than
the time the command reports; ``-q`` hides the line.  The compile clock
under them counts only its own thread's compiles (a Dask worker runs batches
in several threads).  Tiny pendulum models: seconds after their compile.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from pendulum_sweep import PENDULUM_DESIGN, write_pendulum_sweep
from solver import compile_clock
from sweep.cli.app import main

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = ROOT / "configs" / "mechanisms" / "pendulum.yaml"

#: The figures are printed rounded (wall and compiling to 0.1 s, solving to 0.01 s): their sum may pass the wall by this.
ROUNDING = 0.11

SPLIT = re.compile(r"finished in (\d+\.\d) s \((\d+\.\d) s compiling, (\d+\.\d\d) s solving\)")



@pytest.fixture(autouse=True)
def _same_compile_cache(monkeypatch):
    """The CLI and Dask workers use the tests' persistent compilation cache."""
    cache = jax.config.jax_compilation_cache_dir
    if cache:
        monkeypatch.setenv("MECHSWEEP_JAX_CACHE", cache)


def _split(err: str) -> tuple[float, float, float]:
    """(wall, compiling, solving) of the one split line on stderr."""
    found = SPLIT.findall(err)
    assert len(found) == 1, err
    wall, compile_s, solve_s = map(float, found[0])
    assert compile_s >= 0 and solve_s >= 0
    assert compile_s + solve_s <= wall + ROUNDING, err
    return wall, compile_s, solve_s


def test_check_reports_compiling_and_solving(capsys):
    assert main(["check", str(PENDULUM)]) == 0
    _split(capsys.readouterr().err)


def test_simulate_reports_compiling_and_solving_and_quiet_hides_it(capsys):
    assert main(["simulate", str(PENDULUM)]) == 0
    err = capsys.readouterr().err
    _, _, solve_s = _split(err)
    # The steps' own time, a part of the solving (the rest is setting up and the outputs).
    found = re.search(r"\): success, \d+ steps in (\d+\.\d\d) s on (a quick|the optimised) build\n", err)
    steps_s = float(found.group(1))
    assert steps_s <= solve_s + ROUNDING
    assert main(["simulate", str(PENDULUM), "-q"]) == 0
    assert "compiling" not in capsys.readouterr().err


def test_plot_and_animate_of_a_model_file_report_compiling_and_solving(tmp_path, capsys):
    assert main(["plot", str(PENDULUM), "--out", str(tmp_path / "p.png")]) == 0
    _split(capsys.readouterr().err)
    assert main(["animate", str(PENDULUM), "--out", str(tmp_path / "a.html")]) == 0
    _split(capsys.readouterr().err)


def test_equilibrium_reports_compiling_and_solving(capsys):
    assert main(["equilibrium", str(PENDULUM)]) == 0
    _split(capsys.readouterr().err)
    assert main(["-q", "equilibrium", str(PENDULUM)]) == 0
    assert "compiling" not in capsys.readouterr().err


@pytest.mark.integration
def test_sweep_reports_the_workers_compiling_and_solving(tmp_path, capsys):
    sweep = write_pendulum_sweep(tmp_path)
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "s.zarr"), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    took = float(re.search(r"the command took (\S+) s in all", err).group(1))
    found = re.search(r"the workers' batches: (\d+\.\d) s compiling, (\d+\.\d\d) s solving "
                      r"\(summed over 2 batches\)", err)
    assert found, err
    compile_s, solve_s = map(float, found.groups())
    assert compile_s >= 0 and solve_s > 0
    # One worker: its batches ran one after the other inside the command.
    assert compile_s + solve_s <= took + ROUNDING


def test_sweep_estimate_reports_compiling_and_solving(tmp_path, capsys):
    sweep = write_pendulum_sweep(tmp_path)
    code = main(["sweep", str(sweep), "--estimate", "--workers", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured
    assert "[mechsweep] batch 0 finished in" in captured.err, captured
    _, compile_s, _ = _split(captured.err)
    shown = float(re.search(r"^  compile:   (\S+) s", captured.out, re.M).group(1))
    assert compile_s == pytest.approx(shown, abs=0.1), captured   # 0.1 s and 3 digits


def test_design_reports_compiling_and_solving(tmp_path, capsys):
    design = tmp_path / "design.yaml"
    design.write_text(PENDULUM_DESIGN.format(model=PENDULUM))
    assert main(["design", str(design)]) == 0
    err = capsys.readouterr().err
    _split(err)
    assert "summed over the workers" not in err   # one start runs in this process


def test_the_compile_clock_counts_only_its_own_thread():
    @jax.jit
    def elsewhere(x):
        return jnp.sin(x) * 3.0 + 1.0

    with compile_clock() as clock:
        thread = threading.Thread(target=lambda: elsewhere(jnp.arange(7.0)).block_until_ready())
        thread.start()
        thread.join()
        assert clock.seconds == 0.0
        jax.jit(lambda x: jnp.cos(x) - 2.0)(jnp.arange(5.0)).block_until_ready()
    assert clock.seconds > 0.0


def test_the_compile_clock_counts_a_trace_inside_a_trace_once():
    """A jit traced while another traces (as the program store exports inside its caller's trace)
    emits its own trace and lowering events inside the outer trace's; the clock counts the time once."""
    @jax.jit
    def inner(x):
        return jnp.tanh(x) + 0.5

    def outer(x):
        for n in range(1, 6):  # nested work, more of it than the outer program's own
            jax.jit(inner).lower(jax.ShapeDtypeStruct((n,), x.dtype)).compile()
        return jnp.exp(x) * 2.0

    with compile_clock() as clock:
        jax.jit(outer)(jnp.arange(6.0)).block_until_ready()
    assert 0.0 < clock.seconds <= clock.wall_seconds


def test_a_compile_clock_inside_another_leaves_the_outer_one_counting():
    # Nested clocks (a command's around solve's own) start equal; the inner one's end must not
    # take the outer one's place: the outer one counts a compile after it and ends cleanly.
    from solver.compiled import _clocks

    before = len(_clocks)
    with compile_clock() as outer:
        with compile_clock() as inner:
            pass
        assert inner.seconds == 0.0 and outer.seconds == 0.0 and len(_clocks) == before + 1
        jax.jit(lambda x: jnp.sinh(x) + 4.0)(jnp.arange(3.0)).block_until_ready()
    assert outer.seconds > 0.0 and inner.seconds == 0.0 and len(_clocks) == before


def test_the_compile_clock_measures_the_union_of_intervals():
    from solver.compiled import _covered

    assert _covered([]) == 0.0
    assert _covered([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)
    assert _covered([(0.0, 10.0), (2.0, 3.0), (4.0, 9.0)]) == pytest.approx(10.0)  # nested inside one
    assert _covered([(3.0, 4.0), (0.0, 1.0)]) == pytest.approx(2.0)  # in any order
