"""What ``mechsweep equilibrium`` reports: coordinates against multipliers, and settling.

References nobody here wrote:

* Chebyshev's lambda linkage (ground 2, crank 1, coupler 2.5, rocker 2.5,
  the tracing point P on the coupler produced to 5 from the crank pin):
  hanging under gravity with the crank and the rocker vertical, A = (0, −1),
  B = (2, −2.5) and P = 2B − A = (4, −4) is an equilibrium, since there the
  coupler's first-order motion is a horizontal translation and no height
  changes; P carries no mass, so it is a coordinate fixed by its
  constraints (Σ offset d = 0, as the multipliers have);
* the pendulum's closed form: standing upright (y = −L, y downward in the
  file) is an unstable equilibrium, hanging (y = +L, λ = g/L) the stable one;
* a ball on a hilltop, V = −k x²/2: x = 0 is its one equilibrium, unstable.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import solver
from sweep.cli.app import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"

LAMBDA = """Title: Chebyshev lambda linkage
Kind: Mechanism
Dimension: 2
PhysicalParams: {a: 1.0, b: 2.5, d: 2.0, m: 1.0}
PartData:
  Fixed: {O2: [0, 0], O4: [d, 0]}
  Rods:
    O2A: [m, a]            # crank
    O4B: [m, b]            # rocker
  Rigids:
    ABP:                   # the coupler; P is a massless point of it
      Geom: [[b, 0], [2*b, 0]]
      Dyna: [[b, 0], m, m*(2*b)**2/12]
AppliedForces:
  Gravity:
ProblemData:
  tend: 1
  positions: {A: [0, -1], B: [2.5, -2.5], P: [5, -4]}
  fixedpositions: {A}
"""

HILLTOP = """Title: Ball on a hilltop
Kind: Lagrangian
PhysicalParams: {m: 1.0, k: 4.0}
Coordinates: {x: 1}
KineticEnergy: m/2*x'**2
PotentialEnergy: -k/2*x**2
ProblemData: {tend: 1, positions: {x: 0}, velocities: {x: 0}}
"""


@pytest.fixture
def lambda_linkage(tmp_path):
    path = tmp_path / "lambda.yaml"
    path.write_text(LAMBDA)
    return path


# ------------------------------------------------------------------ coordinates
def test_massless_point_is_reported_in_the_configuration_json(capsys, lambda_linkage):
    assert main(["equilibrium", str(lambda_linkage), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert list(info["configuration"]) == ["A", "B", "P"]
    assert list(info["multipliers"]) == ["lam"]
    np.testing.assert_allclose(info["configuration"]["A"], [0.0, -1.0], atol=1e-12)
    np.testing.assert_allclose(info["configuration"]["B"], [2.0, -2.5], atol=1e-12)
    np.testing.assert_allclose(info["configuration"]["P"], [4.0, -4.0], atol=1e-12)
    assert info["branch"] == "stable" and info["dof"] == 1


def test_massless_point_is_reported_in_the_configuration_text(capsys, lambda_linkage):
    assert main(["equilibrium", str(lambda_linkage)]) == 0
    out = capsys.readouterr().out
    config, _, rest = out.partition("multipliers:\n")
    assert "configuration:\n  A = [0, -1]\n  B = [2, -2.5]\n  P = [4, -4]\n" in config
    assert rest.startswith("  lam = [") and "P =" not in rest


def test_python_result_splits_as_the_report(lambda_linkage):
    res = solver.equilibrium(solver.load(lambda_linkage))
    assert set(res.configuration) == {"A", "B", "P"} and set(res.multipliers) == {"lam"}
    assert res.to_dict()["configuration"].keys() == res.configuration.keys()


# ------------------------------------------------------------------ settle
def test_settle_from_the_exact_upright_pendulum_is_pushed_off_and_hangs(capsys):
    code = main(["equilibrium", str(CONFIGS / "pendulum.yaml"), "--method", "settle",
                 "--guess", "x=0", "--guess", "y=-L", "--json"])
    assert code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["method"] == "settle" and info["settle_unstable"] is False
    assert info["configuration"]["x"] == pytest.approx(0.0, abs=1e-12)
    assert info["configuration"]["y"] == pytest.approx(1.0, rel=1e-13)
    assert info["multipliers"]["lam"] == pytest.approx(9.81, rel=1e-12)
    assert info["branch"] == "stable"
    assert info["notes"][0].startswith("settle stayed at its starting point, an unstable "
                                       "equilibrium; pushed off it by 0.002 along its unstable "
                                       "mode, the model settled here")


def test_settle_from_just_off_upright_falls_without_a_push():
    # 1e-4 off the top the over-damped motion has to fall away on its own;
    # with a step that halved whenever the residual grew it went back up.
    pendulum = solver.load(CONFIGS / "pendulum.yaml")
    res = solver.equilibrium(pendulum, guess={"x": 1e-4, "y": -np.sqrt(1 - 1e-8)},
                             method="settle")
    assert res.configuration["y"] == pytest.approx(1.0, rel=1e-13)
    assert res.branch == "stable" and res.notes == []


def test_settle_without_a_stable_equilibrium_says_it_stayed(capsys, tmp_path):
    path = tmp_path / "hilltop.yaml"
    path.write_text(HILLTOP)
    assert main(["equilibrium", str(path), "--method", "settle"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Ball on a hilltop: settle stayed at an unstable equilibrium in ")
    assert "found by settle" not in out
    assert "  x = 0\n" in out and "stability: unstable" in out
    assert ("note: settle stayed at its starting point, an unstable equilibrium; pushed off it "
            "by 0.001 along its unstable mode, settling returned to an unstable equilibrium "
            "both ways: this is not the stable equilibrium settle looks for") in out
    res = solver.equilibrium(solver.load(path), method="settle")
    assert res.settle_unstable is True and res.to_dict()["settle_unstable"] is True
