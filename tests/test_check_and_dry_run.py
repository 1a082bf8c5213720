"""``check`` computes the system Jacobian; ``sweep --dry-run`` checks the sweep against its model.

* ``check``: two identical equations and a duplicated constraint pass the
  structural analysis but make the system Jacobian singular at the initial
  point (``simulate`` would stop with ``singular_jacobian``): exit 2, naming
  the dependent equations and the undetermined unknowns.  A regular model
  prints its condition number.  :func:`solver.analysis.diagnose.analyse_jacobian` is
  tested on matrices whose null spaces are known.
* ``sweep --dry-run``: unknown parameter and output names exit 2 listing the
  valid choices; the store size is printed; ``--estimate`` compiles and runs
  one batch of the tiny pendulum sweep and prints positive numbers.
"""

import math
import re

import numpy as np
import pytest

from pendulum_sweep import write_pendulum_sweep
from solver.analysis.diagnose import COND_MAX, analyse_jacobian
from sweep.cli.app import main
from models_for_tests import PENDULUM_YAML

ERR = "mechsweep: error: "

PENDULUM = PENDULUM_YAML + "  samples: 11\n"
# f0 and f1 are the same equation; y'' + lam*y - g keeps a transversal.
IDENTICAL = """Title: Two identical equations
Kind: DAE
PhysicalParams: {g: 9.81}
Variables: [x, y, lam]
Equations:
  - x'' + lam*x
  - x'' + lam*x
  - y'' + lam*y - g
ProblemData:
  tend: 1
  values: {x: 1.0, y: 0.0, x': 0.0, y': 0.0}
  samples: 11
"""
# The pendulum's constraint twice, with a second multiplier.
DUPLICATED = """Title: Constraint given twice
Kind: DAE
PhysicalParams: {g: 9.81, L: 1.0}
Variables: [x, y, lam, mu]
Equations:
  - x'' + lam*x + mu*x
  - y'' + lam*y + mu*y - g
  - x**2 + y**2 - L**2
  - x**2 + y**2 - L**2
ProblemData:
  tend: 1
  values: {x: L, y: 0.0, x': 0.0, y': 0.0}
  fixed: [x, x']
  samples: 11
"""


def run(capsys, *argv):
    """(exit code, stdout, stderr); never a traceback."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# ------------------------------------------------------------------ check
def test_check_reports_the_condition_number_of_a_regular_model(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text(PENDULUM)
    code, out, _ = run(capsys, "check", tmp_path / "p.yaml")
    assert code == 0
    m = re.search(r"^system Jacobian at t0 = 0: 3 x 3, condition number (\S+) \(rows and "
                  r"columns scaled; singular above 1e\+12\)$", out, re.M)
    assert m, out
    assert 1.0 <= float(m.group(1)) < 100.0


@pytest.mark.parametrize("text, equations, unknowns, rank", [
    (IDENTICAL, "f0 (Equations[0]: x'' + lam*x), f1 (Equations[1]: x'' + lam*x)",
     {"lam", "x''"}, "rank 2 of 3"),
    (DUPLICATED, "f2 (Equations[2]: x**2 + y**2 - L**2), f3 (Equations[3]: x**2 + y**2 - L**2)",
     {"lam", "mu"}, "rank 3 of 4"),
])
def test_check_names_the_dependent_equations_of_a_singular_jacobian(tmp_path, capsys, text,
                                                                    equations, unknowns, rank):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "check", path)
    assert code == 2
    assert "index:" in out  # the structure is still printed first
    assert err.startswith(f"{ERR}{path}: the system Jacobian at the consistent initial point "
                          f"(t0 = 0) is singular: condition number ")
    assert rank in err
    assert f"Dependent equations: {equations};" in err
    named = re.search(r"undetermined unknowns \(at their highest derivative\): ([^.]+)\.", err)
    assert named and set(named.group(1).split(", ")) == unknowns
    assert "singular_jacobian" in err and "Remove a duplicated equation or constraint" in err


def test_analyse_jacobian_finds_known_null_spaces():
    eqs, unk = ["e0", "e1", "e2"], ["a", "b", "c"]
    regular = analyse_jacobian(np.diag([1.0, 2.0, 3.0]), eqs, unk)
    assert not regular.singular and regular.cond == pytest.approx(1.0)
    # e2 = e0 + e1; columns a and c enter only through a + c.
    A = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    res = analyse_jacobian(A, eqs, unk)
    assert res.singular and res.rank_deficiency == 1
    assert res.equations == ["e0", "e1", "e2"] and res.variables == ["a", "c"]  # the model's order
    # Numerically singular: a row a relative 1e-14 away from its neighbour.
    near = np.array([[1.0, 1.0], [1.0, 1.0 + 1e-14]])
    res = analyse_jacobian(near, eqs[:2], unk[:2])
    assert res.singular and res.cond > COND_MAX and set(res.equations) == {"e0", "e1"}
    # Not finite: named by equation.
    bad = analyse_jacobian(np.array([[1.0, np.nan], [0.0, 1.0]]), eqs[:2], unk[:2])
    assert bad.singular and bad.nonfinite == ["e0"] and "not finite" in bad.problem()


# ------------------------------------------------------------------ sweep --dry-run
def _sweep(tmp_path, body: str):
    (tmp_path / "model.yaml").write_text(PENDULUM)
    (tmp_path / "s.yaml").write_text("Model: model.yaml\n" + body)
    return tmp_path / "s.yaml"


def test_dry_run_refuses_an_unknown_parameter_listing_the_parameters(tmp_path, capsys):
    path = _sweep(tmp_path, "Sweep:\n  product:\n    Lx: [1, 2]\n")
    code, out, err = run(capsys, "sweep", path, "--dry-run")
    assert code == 2 and out == ""
    assert err == (f"{ERR}{path}:4: Sweep.product.Lx: 'Lx' is not a parameter of the model "
                   f"{tmp_path / 'model.yaml'}; sweepable parameters: L, g\n")


def test_dry_run_refuses_an_unknown_output_listing_the_variables(tmp_path, capsys):
    path = _sweep(tmp_path, "Sweep: {product: {L: [1, 2]}}\nOutputs: {variables: [x, z]}\n")
    code, out, err = run(capsys, "sweep", path, "--dry-run")
    assert code == 2 and out == ""
    assert err == (f"{ERR}{path}: Outputs.variables: unknown output variable 'z'; the model's "
                   f"variables are x, y, lam\n")


def test_dry_run_refuses_an_unknown_metric_target(tmp_path, capsys):
    path = _sweep(tmp_path, "Sweep: {product: {L: [1, 2]}}\n"
                            "Outputs: {metrics: {m: {of: q, reduce: max}}}\n")
    code, _, err = run(capsys, "sweep", path, "--dry-run")
    assert code == 2 and "unknown output 'q'; use a variable (x, y, lam)" in err


def test_dry_run_prints_the_store_size(tmp_path, capsys):
    path = _sweep(tmp_path, "Sweep: {product: {L: {linspace: [1, 2, 10]}}}\n"
                            "Outputs: {variables: [x], samples: 11}\n")
    code, out, _ = run(capsys, "sweep", path, "--dry-run")
    assert code == 0
    # x and x' (d_x = 2) at 11 times, the residual (11): 33 values; + L; + status, steps.
    # 10 x (8 x (33 + 1) + 9) bytes = 2810 bytes.
    assert "  store:     about 2.74 KiB uncompressed (10 points x 33 values: 11 output times of " \
           "1 variable, 0 metrics)" in out
    assert "parameter and output names match" in out


def test_estimate_compiles_one_batch_and_extrapolates(tmp_path, capsys):
    path = write_pendulum_sweep(tmp_path)
    code, out, _ = run(capsys, "sweep", path, "--estimate", "--workers", "2")
    assert code == 0
    compile_s = re.search(r"^  compile:   (\S+) s \(once per worker", out, re.M)
    per_point = re.search(r"^  per point: (\S+) s \(batch 0, padded to 3 points; 1 failed\)$",
                          out, re.M)
    total = re.search(r"^  total:     about (\S+) (s|min|h) for 6 points in 2 batches on "
                      r"2 workers$", out, re.M)
    assert compile_s and per_point and total, out
    assert float(compile_s.group(1)) >= 0 and float(per_point.group(1)) > 0
    assert float(total.group(1)) > 0
    assert not (tmp_path / "out.zarr").exists() and sorted(p.name for p in tmp_path.iterdir()) == \
        ["pendulum_x0.yaml", "sweep.yaml"]


# ------------------------------------------------------------------ found by the fuzz
def test_a_model_path_too_long_for_the_file_system_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("Model: " + "(" * 1000 + "model.yaml" + ")" * 1000
                                     + "\nSweep: {product: {L: [1, 2]}}\n")
    code, _, err = run(capsys, "sweep", tmp_path / "s.yaml", "--dry-run")
    assert code == 2
    assert err == (f"{ERR}{tmp_path / 's.yaml'}:1: Model: cannot use the model path: File name "
                   f"too long; give the path of a model file, relative to the sweep file's "
                   f"folder\n")


def test_an_out_path_too_long_for_the_file_system_is_a_clear_error(tmp_path, capsys):
    path = write_pendulum_sweep(tmp_path)
    out = str(tmp_path / ("x" * 3000 + ".zarr"))
    code, _, err = run(capsys, "sweep", path, "--dry-run", "--out", out)
    assert code == 2
    assert err.startswith(f"{ERR}--out {out[:100]}...") and err.endswith(
        ".zarr: cannot use this path (File name too long); choose another\n")


def test_dry_run_counts_a_batch_of_the_sweeps_points_not_of_a_larger_batch(tmp_path, capsys):
    # 10 points with Batch: 5000: one batch of 10 (its outputs ~92 MiB), never 5000 points
    # padded (~45 GiB, over every limit).
    path = _sweep(tmp_path, "Sweep: {product: {L: {linspace: [1, 2, 10]}}}\n"
                            "Outputs: {samples: 200000}\nBatch: 5000\n")
    code, out, err = run(capsys, "sweep", path, "--dry-run")
    assert code == 0, err
    assert "  points:    10 in 1 batch of 10 (Batch 5000 is more than the points)" in out
    line = next(x for x in out.splitlines() if x.startswith("  batch:"))
    assert line.startswith("  batch:     10 points per batch (Batch 5000 is more than the 10 "
                           "points, so one batch of 10): about ")
    assert re.search(r" MiB of outputs per batch; estimated peak memory of a worker: about [0-9.]+ GiB "
                     r"\(300 MiB at start, [0-9.]+ MiB compiling, [0-9.]+ MiB working set\)$", line), line


def test_dry_run_refuses_a_batch_whose_worker_would_not_fit(tmp_path, capsys, monkeypatch):
    # The stored outputs of a batch (4.6 MiB) are far below the limit; the worker's estimated
    # peak (start, compiling, 6 copies of the engine's output) is not.
    monkeypatch.setenv("MECHSWEEP_MAX_WORKER_BYTES", "400MiB")
    path = _sweep(tmp_path, "Sweep: {product: {L: {linspace: [1, 2, 100]}}}\n"
                            "Outputs: {samples: 2001}\nBatch: 50\n")
    code, out, err = run(capsys, "sweep", path, "--dry-run")
    assert code == 2 and out == ""
    assert re.fullmatch(
        re.escape(f"{ERR}{path}: Batch: a worker running one batch of 50 points x 2001 output times "
                  f"(estimated peak memory: 300 MiB at start, ") + r"[0-9.]+ MiB compiling, [0-9.]+ MiB "
        + re.escape("working set) would need ") + r"[0-9.]+ MiB" + re.escape(
            "; the limit is 400 MiB (MAX_WORKER_BYTES); lower Batch (now 50; try Batch: 25) or the "
            "output times, or set the environment variable MECHSWEEP_MAX_WORKER_BYTES to raise it\n"),
        err), err


# ------------------------------------------------------------------ the memory estimate
@pytest.fixture(scope="module")
def pendulum_model(tmp_path_factory):
    import solver

    path = tmp_path_factory.mktemp("model") / "model.yaml"
    path.write_text(PENDULUM)
    return solver.load(str(path))


def test_the_memory_estimate_includes_the_worker_start_and_grows_with_batch_and_times(pendulum_model):
    from sweep.sizes import WORKER_START_BYTES, batch_memory_estimate

    one = batch_memory_estimate(pendulum_model, 1, 11)
    assert one.start == WORKER_START_BYTES and one.compile > 0 and one.working > 0
    assert one.total == one.start + one.compile + one.working > WORKER_START_BYTES
    totals = [batch_memory_estimate(pendulum_model, b, t).total
              for b in (1, 10, 1000) for t in (11, 101, 1001)]
    by_batch = [totals[i::3] for i in range(3)]          # fixed times, growing batch
    by_times = [totals[3 * i:3 * i + 3] for i in range(3)]   # fixed batch, growing times
    for row in by_batch + by_times:
        assert row == sorted(row) and len(set(row)) == 3
    # The compile share and the start do not depend on the batch.
    big = batch_memory_estimate(pendulum_model, 1000, 1001)
    assert (big.start, big.compile) == (one.start, one.compile)
    assert batch_memory_estimate(pendulum_model, 10, 101, n_sensitivities=2).working == \
        3 * batch_memory_estimate(pendulum_model, 10, 101).working


def test_the_memory_check_refuses_a_batch_whose_estimate_is_over_the_limit(tmp_path, monkeypatch,
                                                                            pendulum_model):
    from solver.errors import InputError
    from sweep.pipeline import build_context
    from sweep.sizes import batch_memory_estimate, check_batch_memory
    from sweep.spec import load_sweep

    path = _sweep(tmp_path, "Sweep: {product: {L: {linspace: [1, 2, 8]}}}\n"
                            "Outputs: {samples: 101}\nBatch: 4\n")
    spec = load_sweep(path)
    context = build_context(spec)
    need = math.ceil(batch_memory_estimate(pendulum_model, 4, 101).total)
    monkeypatch.setenv("MECHSWEEP_MAX_WORKER_BYTES", str(need))
    assert "estimated peak memory of a worker" in check_batch_memory(spec, context)
    monkeypatch.setenv("MECHSWEEP_MAX_WORKER_BYTES", str(need - 1))
    with pytest.raises(InputError, match=r"lower Batch \(now 4; try Batch: 2\)") as caught:
        check_batch_memory(spec, context, pendulum_model)
    assert caught.value.path == "Batch"
