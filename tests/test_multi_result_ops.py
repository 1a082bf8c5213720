"""Lagrangians that crashed the Taylor engine with a KeyError in ``stage``: an
operation with several results (a split of a vector) whose first result
nothing used had no offset.  Both engines now give such an operation the
offset of its used results.

Reference: scipy's DOP853 on the pendulum ODE (both models are pendulums).
"""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import solver

# The two models also serve tests/test_fence.py and workflows/benchmarks/results/compile_size.txt.
BEAD = (Path(__file__).parent / "data" / "literal_zero_bead.yaml").read_text()

ROTATIONS = (Path(__file__).parent / "data" / "rotation_product_pendulum.yaml").read_text()


def load(tmp_path, name, text):
    path = Path(tmp_path) / f"{name}.yaml"
    path.write_text(text)
    return solver.load(path)


def pendulum_reference(t, theta0=0.5, g=9.81, L=1.0):
    sol = solve_ivp(lambda _, s: [s[1], -(g / L) * math.sin(s[0])], (0.0, t[-1]), [theta0, 0.0],
                    method="DOP853", rtol=1e-13, atol=1e-13, t_eval=t)
    return sol.y[0]


@pytest.mark.parametrize("mode", ["unrolled", "compact", "looped"])
@pytest.mark.parametrize("name, text", [("bead", BEAD), ("rotations", ROTATIONS)])
def test_lagrangians_with_literal_zeros_and_rotation_products_are_pendulums(tmp_path, name, text, mode):
    model = load(tmp_path, name, text)
    ds = model.solve(mode=mode)
    assert int(ds.status) == 0 and ds.attrs["solver_mode"] == mode
    np.testing.assert_allclose(ds["th"].values, pendulum_reference(ds["time"].values), rtol=0, atol=1e-8)
