"""Seed systems shipped as configs, against references nobody here wrote.

Seed 001 (``configs/mechanisms/spring_chain.yaml``): N particles of mass m
joined by N + 1 linear springs of stiffness k between two fixed walls.  The
longitudinal motion obeys m u_i'' = k (u_(i+1) - 2 u_i + u_(i-1)) exactly,
whose normal modes are the textbook ones (e.g. Goldstein, *Classical
Mechanics*, §6.4; French, *Vibrations and Waves*, ch. 5):

    u_i = sin(i j pi / (N + 1)),   omega_j = 2 sqrt(k/m) sin(j pi / (2 (N + 1))).

Started at rest in mode j, the chain moves as amp · shape_j · cos(omega_j t);
no step of that formula comes from the solver or from the model file's
equations.

The chain of N pendula in 3-D (``configs/mechanisms/pendulum_chain3d.yaml``,
the talk's eq. 4): point masses on massless rods from a fixed pivot.  Its
energy and its angular momentum about the vertical through the pivot are
conserved (gravity and the pivot exert no torque about that axis); started
in a vertical plane at rest, it stays planar and its angles obey the
textbook equations of an N-pendulum (e.g. Lagrangian in angles,
M_ij = m l² (N − max(i, j) + 1) cos(θ_i − θ_j), …), integrated by scipy.

The Pleiades (``configs/mechanisms/pleiades.yaml``): seven stars in the
plane with masses i and G = 1, problem "plei" of the IVP test set (F. Mazzia
and C. Magherini, *Test Set for Initial Value Problem Solvers*, release 2.4,
University of Bari, 2008; after Hairer, Nørsett & Wanner, *Solving ODEs I*,
§II.10).  Its positions at t = 3 are the test set's published reference
solution; energy, momentum and angular momentum are conserved.
"""

from pathlib import Path

import numpy as np
import pytest

import solver

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"
SPAN = {"ProblemData": {"tend": 3.0, "samples": 61}}


@pytest.fixture(scope="module")
def chain():
    return solver.load(CONFIGS / "spring_chain.yaml", overrides=SPAN)


def _mode(N, j, k, m):
    i = np.arange(1, N + 1)
    shape = np.sin(i * j * np.pi / (N + 1))
    omega = 2.0 * np.sqrt(k / m) * np.sin(j * np.pi / (2 * (N + 1)))
    return shape, omega


def test_spring_chain_is_the_seed_system(chain):
    # N = 5 moving particles, 2 walls, 6 springs, no constraints, no gravity.
    assert chain.points == ["P1", "P2", "P3", "P4", "P5"]
    assert chain.fixed_points == ["P0", "P6"]
    assert chain.dae.n_c == 0 and chain.conservative
    walls = chain.fixed_positions()
    p = chain.params
    assert walls["P6"][0] - walls["P0"][0] == pytest.approx(6 * p["l"])


@pytest.mark.parametrize("j", [1, 2, 5])
def test_spring_chain_moves_in_its_normal_mode(chain, j):
    p = chain.params
    N = len(chain.points)
    shape, omega = _mode(N, j, p["k"], p["m"])
    ds = chain.solve({"mode": j})
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    t = np.asarray(ds.time.values)
    x = np.stack([np.asarray(ds[n].values)[:, 0] for n in chain.points], axis=1)
    y = np.stack([np.asarray(ds[n].values)[:, 1] for n in chain.points], axis=1)
    rest = p["l"] * np.arange(1, N + 1)
    expected = p["amp"] * shape[None, :] * np.cos(omega * t)[:, None]
    # The motion covers at least one full period of the mode.
    assert omega * t[-1] > 2 * np.pi
    np.testing.assert_allclose(x - rest, expected, rtol=0, atol=1e-9)
    # Velocities too: u' = -amp shape omega sin(omega t).
    xd = np.stack([np.asarray(ds[n + "_d1"].values)[:, 0] for n in chain.points], axis=1)
    np.testing.assert_allclose(xd, -p["amp"] * omega * shape[None, :] *
                               np.sin(omega * t)[:, None], rtol=0, atol=1e-8)
    assert np.max(np.abs(y)) < 1e-12   # longitudinal: nothing moves across the chain
    # Energy of the linear chain, conserved.
    e = np.asarray(ds.energy.values)
    assert np.max(np.abs(e - e[0])) < 1e-10
    assert e[0] == pytest.approx(0.5 * p["k"] * p["amp"] ** 2 *
                                 np.sum(np.diff(np.r_[0, shape, 0]) ** 2), rel=1e-12)


def test_spring_chain_through_the_command_line(tmp_path, capsys):
    """``check`` and a short ``simulate --json`` of the shipped file, as a user runs them."""
    import json

    from sweep.cli.app import main

    path = tmp_path / "spring_chain.yaml"
    text = (CONFIGS / "spring_chain.yaml").read_text()
    assert "  tend: 5\n" in text
    path.write_text(text.replace("  tend: 5\n", "  tend: 1\n"))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mechanical DOF (coordinates - constraints): 10" in out
    assert main(["simulate", str(path), "--json", "--set", "mode=3"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status_code"] == 0 and info["t_end"] == pytest.approx(1.0)
    model = solver.load(path)
    p = model.params
    shape, omega = _mode(5, 3, p["k"], p["m"])
    for i, name in enumerate(model.points):
        u = info["final"][f"{name}[0]"] - (i + 1) * p["l"]
        assert u == pytest.approx(p["amp"] * shape[i] * np.cos(omega * 1.0), abs=1e-9)
        assert info["final"][f"{name}[1]"] == pytest.approx(0.0, abs=1e-12)


def test_a_structural_set_rebuilds_the_model_and_says_so(tmp_path, capsys):
    """``--set N=3`` on the spring chain (N sizes the repeated parts) builds a
    3-particle chain: its check counts 6 mechanical DOF and its motion is the
    3-particle normal mode."""
    import json

    from sweep.cli.app import main

    path = tmp_path / "spring_chain.yaml"
    path.write_text((CONFIGS / "spring_chain.yaml").read_text().replace("  tend: 5\n", "  tend: 1\n"))
    assert main(["simulate", str(path), "--json", "--set", "N=3", "--set", "mode=2"]) == 0
    captured = capsys.readouterr()
    assert "N = 3: structural (it fixes the model's size), so the model is built again" in captured.err
    info = json.loads(captured.out)
    model = solver.load(path, overrides={"PhysicalParams": {"N": 3}})
    assert len(model.points) == 3
    p = model.params
    shape, omega = _mode(3, 2, p["k"], p["m"])
    for i, name in enumerate(model.points):
        u = info["final"][f"{name}[0]"] - (i + 1) * p["l"]
        assert u == pytest.approx(p["amp"] * shape[i] * np.cos(omega * 1.0), abs=1e-9)
    assert main(["simulate", str(path), "--set", "N=2.5"]) == 2
    assert "'N' fixes the model's size and must be a whole number" in capsys.readouterr().err


# ------------------------------------------------------------------ chain of pendula in 3-D
@pytest.fixture(scope="module")
def pendula():
    return solver.load(CONFIGS / "pendulum_chain3d.yaml", overrides={"ProblemData": {"tend": 2.0, "samples": 41}})


def test_the_3d_chain_of_pendula_conserves_energy_and_vertical_angular_momentum(pendula):
    assert pendula.points == ["P1", "P2", "P3"] and pendula.dae.n_c == 3
    ds = pendula.solve()
    assert int(ds.status) == 0
    e, L = ds.energy.values, ds.angular_momentum.values
    assert np.max(np.abs(e - e[0])) < 1e-9
    assert abs(L[0, 2]) > 0.5                         # the push along y sets it turning
    assert np.max(np.abs(L[:, 2] - L[0, 2])) < 1e-10
    assert np.max(np.abs(ds.constraint_residual.values)) < 1e-10
    assert np.max(np.abs(ds.P3.values[:, 1])) > 0.1   # it leaves the xz plane


def _planar_chain_rhs(N, m, l, g):
    i = np.arange(N)
    mu = N - np.maximum(i[:, None], i[None, :])          # masses at or below the lower joint
    below = N - i

    def rhs(t, y):
        th, w = y[:N], y[N:]
        d = th[:, None] - th[None, :]
        M = m * l * l * mu * np.cos(d)
        f = -m * l * l * (mu * np.sin(d)) @ (w ** 2) - m * g * l * below * np.sin(th)
        return np.concatenate([w, np.linalg.solve(M, f)])

    return rhs


def test_the_chain_started_in_a_plane_follows_the_textbook_angle_equations(pendula):
    from scipy.integrate import solve_ivp

    p = pendula.all_params()
    ds = pendula.solve(params={"v0": 0.0})
    assert int(ds.status) == 0
    N, t = 3, ds.time.values
    ref = solve_ivp(_planar_chain_rhs(N, p["m"], p["l"], 9.81), (t[0], t[-1]),
                    np.r_[np.full(N, p["th"]), np.zeros(N)], t_eval=t, method="DOP853", rtol=1e-13, atol=1e-13)
    prev = np.zeros((len(t), 3))
    for k, name in enumerate(pendula.points):
        r = ds[name].values
        link = r - prev
        theta = np.arctan2(link[:, 0], -link[:, 2])
        np.testing.assert_allclose(theta, ref.y[k], atol=1e-9)
        np.testing.assert_allclose(r[:, 1], 0.0, atol=1e-12)
        prev = r


def test_the_chain_of_pendula_through_the_command_line(tmp_path, capsys):
    import json

    from sweep.cli.app import main

    path = tmp_path / "chain.yaml"
    path.write_text((CONFIGS / "pendulum_chain3d.yaml").read_text().replace("  tend: 3\n", "  tend: 0.5\n"))
    assert main(["check", str(path)]) == 0
    assert "mechanical DOF (coordinates - constraints): 6" in capsys.readouterr().out
    assert main(["simulate", str(path), "--json", "--set", "N=2"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status_code"] == 0 and "P3[0]" not in info["final"] and "P2[2]" in info["final"]


# The IVP test set's reference positions of the Pleiades at t = 3 (x1..x7, then y1..y7).
PLEIADES_AT_3 = np.array([
    0.3706139143970502, 3.237284092057233, -3.222559032418324, 0.6597091455775310, 0.3425581707156584,
    1.562172101400631, -0.7003092922212495,
    -3.943437585517392, -3.271380973972550, 5.225081843456543, -2.590612434977470, 1.198213693392275,
    -0.2429682344935824, 1.091449240428980])


def test_the_pleiades_reach_the_test_sets_reference_positions_and_conserve_energy_and_momenta():
    model = solver.load(CONFIGS / "pleiades.yaml", overrides={"ProblemData": {"samples": 31},
                                                              "SolverParams": {"Integration": {"tol": 1e-10}}})
    ds = model.solve()
    assert int(ds.status) == 0
    end = np.array([ds[f"P{i}"].values[-1] for i in range(1, 8)])  # (7, 2)
    np.testing.assert_allclose(np.r_[end[:, 0], end[:, 1]], PLEIADES_AT_3, rtol=0, atol=1e-7)
    assert np.abs(ds["energy"].values - ds["energy"].values[0]).max() < 1e-8
    assert np.abs(ds["momentum"].values - ds["momentum"].values[0]).max() < 1e-9
    assert np.abs(ds["angular_momentum"].values - ds["angular_momentum"].values[0]).max() < 1e-8
