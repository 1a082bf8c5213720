"""Value rules of a model's parts at any parameter values, not only the defaults.

The Mechanism reader refuses a mass <= 0, a length <= 0, a negative stiffness,
spring mass or damping, and a moving point without mass, at the model's
default parameters.  ``Model.check_values`` runs the same rules at other
values without building the model again; ``simulate --set`` and every sweep
(``--dry-run`` included) use it, so ``--set m=-1`` or a sweep over
``m: [-1, 0, 1]`` exits 2 naming the file, the key, the value and the rule
before anything is compiled.
"""

import numpy as np
import pytest

import solver
from solver.models import ValueRangeError
from sweep import pipeline
from sweep.cli.app import main
from models_for_tests import PENDULUM_YAML

ERR = "mechsweep: error: "

# B hangs from O on a rod (mass rho*Lr, derived) and a spring; a particle m at B.
MECH = """Title: Rod and spring
Dimension: 2
PhysicalParams: {m: 2.0, k: 40, l: 1.0, mu: 0.5, rho: 0.3, Lr: 1.3, mr: rho*Lr}
PartData:
  Fixed: {O: [0.0, 0.0]}
  Rods: {OB: [mr, Lr]}
  Springs:
    S: {points: [O, B], stiffness: k, length: l, mass: mu}
  Particles: {B: m}
AppliedForces:
  Gravity:
ProblemData:
  tend: 1
  positions: {B: [1.3, 0]}
  fixedpositions: {Bx}
  samples: 11
"""
# B carries mass only through its spring.
SPRING_ONLY = """Title: Massive spring
Dimension: 2
PhysicalParams: {k: 40, l: 1.0, mu: 0.5}
PartData:
  Fixed: {O: [0.0, 0.0]}
  Springs: {OB: [k, l, mu]}
ProblemData:
  tend: 1
  positions: {B: [1.2, 0]}
  samples: 11
"""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "mech.yaml").write_text(MECH)
    (tmp_path / "spring.yaml").write_text(SPRING_ONLY)
    (tmp_path / "pendulum.yaml").write_text(PENDULUM_YAML)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# ------------------------------------------------------------------ the model's rules
@pytest.mark.parametrize("params, key, rule, names", [
    ({"m": -1.0}, "PartData.Particles.B", "expected a positive mass (a scalar), got -1.0 (m)",
     ["m"]),
    ({"m": 0.0}, "PartData.Particles.B", "expected a positive mass (a scalar), got 0.0 (m)",
     ["m"]),
    ({"Lr": 0.0}, "PartData.Rods.OB[1]", "expected a positive length (a scalar), got 0.0 (Lr)",
     ["Lr"]),
    ({"rho": -1.0}, "PartData.Rods.OB[0]",
     "expected a mass (a scalar) >= 0, got -1.3 (mr, with rho = -1, Lr = 1.3)", ["rho", "Lr"]),
    ({"k": -5.0}, "PartData.Springs.S.stiffness",
     "expected a stiffness (a scalar) >= 0, got -5.0 (k)", ["k"]),
    ({"mu": -0.1}, "PartData.Springs.S.mass", "expected a mass (a scalar) >= 0, got -0.1 (mu)",
     ["mu"]),
])
def test_a_mechanism_checks_its_parts_at_given_values(folder, params, key, rule, names):
    model = solver.load(folder / "mech.yaml")
    model.check_values({})                       # the defaults pass
    model.check_values({"m": 5.0, "rho": 0.0})   # a massless rod on a massive point is fine
    with pytest.raises(ValueRangeError) as info:
        model.check_values(params)
    err = info.value
    assert (err.file, err.path, err.message) == (str(folder / "mech.yaml"), key, rule)
    assert err.line is not None and err.names == names
    assert set(model.value_rule_params()) == {"m", "k", "l", "mu", "rho", "Lr"}


def test_a_point_whose_only_mass_becomes_zero_is_refused(folder):
    model = solver.load(folder / "spring.yaml")
    with pytest.raises(ValueRangeError) as info:
        model.check_values({"mu": 0.0})
    assert info.value.message == ("moving point 'B' carries no mass at mu = 0 (the masses of its "
                                  "parts are all 0), so its motion is undetermined")
    assert info.value.names == ["mu"]


def test_kinds_without_rules_check_names_only(folder):
    model = solver.load(folder / "pendulum.yaml")
    assert model.value_rule_params() == []
    model.check_values({"L": -1.0})              # a DAE's parameters have no declared range
    with pytest.raises(solver.InputError):
        model.check_values({"nope": 1.0})


# ------------------------------------------------------------------ simulate --set
def test_simulate_set_out_of_range_exits_2_before_compiling(folder, capsys):
    code, out, err = run(capsys, "simulate", "mech.yaml", "--set", "m=-1")
    assert code == 2 and out == ""
    assert err == (f"{ERR}mech.yaml:9: PartData.Particles.B: expected a positive mass (a scalar), "
                   f"got -1.0 (m); given by --set m=-1\n")
    code, _, err = run(capsys, "simulate", "spring.yaml", "--set", "mu=0", "--set", "k=3")
    assert code == 2 and err.endswith("moving point 'B' carries no mass at mu = 0 (the masses "
                                      "of its parts are all 0), so its motion is undetermined; "
                                      "given by --set mu=0\n")


# ------------------------------------------------------------------ sweeps
def test_a_sweep_over_an_impossible_mass_fails_its_dry_run(folder, capsys):
    (folder / "s.yaml").write_text("Model: mech.yaml\nSweep:\n  product:\n    k: [1, 2]\n"
                                   "    m: [1, 0, -1]\n")
    code, out, err = run(capsys, "sweep", "s.yaml", "--dry-run")
    assert code == 2 and out == ""
    assert err == (f"{ERR}s.yaml:5: Sweep.product.m: m = 0 (point 1 of the sweep) is out of range "
                   f"for the model: {folder / 'mech.yaml'}:9: PartData.Particles.B: expected a "
                   f"positive mass (a scalar), got 0.0 (m); give values the model allows\n")


def test_a_constant_out_of_range_is_located_at_the_constant(folder, capsys):
    (folder / "s.yaml").write_text("Model: mech.yaml\nSweep:\n  product: {m: [1, 2]}\n"
                                   "  constants: {rho: -2}\n")
    code, _, err = run(capsys, "sweep", "s.yaml", "--dry-run")
    assert code == 2
    assert err.startswith(f"{ERR}s.yaml: Sweep.constants.rho: rho = -2 is out of range for the "
                          f"model: {folder / 'mech.yaml'}:6: PartData.Rods.OB[0]: expected a mass (a scalar) "
                          f">= 0, got -2.6 (mr, with rho = -2, Lr = 1.3)")


def test_a_valid_sweep_says_what_was_checked(folder, capsys):
    (folder / "s.yaml").write_text("Model: mech.yaml\nSweep:\n  product:\n    k: [1, 2, 3]\n"
                                   "    m: [1, 2]\n")
    code, out, _ = run(capsys, "sweep", "s.yaml", "--dry-run")
    assert code == 0
    assert ("  checked:   the model loads; parameter and output names match; the values against "
            "the model's rules (positive masses, ...): every point's values (k, m; 6 distinct)"
            ) in out


def test_a_large_sweep_is_checked_at_each_axis_extremes(folder, capsys, monkeypatch):
    monkeypatch.setattr(pipeline, "RANGE_CHECK_POINTS", 5)
    (folder / "s.yaml").write_text("Model: mech.yaml\nSweep:\n  product:\n"
                                   "    k: {linspace: [1, 10, 4]}\n    m: {linspace: [2, 1, 5]}\n")
    code, out, _ = run(capsys, "sweep", "s.yaml", "--dry-run")
    assert code == 0
    assert ("3 points where k, m take their smallest or largest values (of 20 points; above 5 "
            "distinct ones only these are checked)") in out
    (folder / "s.yaml").write_text("Model: mech.yaml\nSweep:\n  product:\n"
                                   "    k: {linspace: [1, 10, 4]}\n    m: {linspace: [2, -1, 5]}\n")
    code, _, err = run(capsys, "sweep", "s.yaml", "--dry-run")
    assert code == 2 and "Sweep.product.m: m = -1 (point 4 of the sweep) is out of range" in err


def test_the_rules_cost_microseconds_a_point(folder):
    model = solver.load(folder / "mech.yaml")
    import time

    ms = np.linspace(0.5, 2.0, 200)
    start = time.perf_counter()
    for m in ms:
        model.check_values({"m": float(m)})
    assert (time.perf_counter() - start) / len(ms) < 0.01
