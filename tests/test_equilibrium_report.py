"""What ``mechsweep equilibrium`` reports: coordinates against multipliers.

References nobody here wrote:

* Chebyshev's lambda linkage (ground 2, crank 1, coupler 2.5, rocker 2.5,
  the tracing point P on the coupler produced to 5 from the crank pin):
  hanging under gravity with the crank and the rocker vertical, A = (0, −1),
  B = (2, −2.5) and P = 2B − A = (4, −4) is an equilibrium, since there the
  coupler's first-order motion is a horizontal translation and no height
  changes; P carries no mass, so it is a coordinate fixed by its
  constraints (Σ offset d = 0, as the multipliers have).
"""

import json

import numpy as np
import pytest

import solver
from sweep.cli.app import main

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
