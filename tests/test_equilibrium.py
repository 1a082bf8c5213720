"""Stationary equilibria (``solver.equilibrium``, ``mechsweep equilibrium``).

References nobody here wrote:

* the pendulum's closed form: hanging y = +L (y is downward in the file),
  λ = g/L, small-oscillation frequency sqrt(g/L); standing y = −L, λ = −g/L,
  unstable; without gravity every point of the circle is an equilibrium;
* the spring-loaded four-bar reduced by hand to its crank angle θ (loop
  closed by intersecting two circles): the roots of dV/dθ (complex-step
  derivative, ``scipy.optimize.brentq``), the multipliers from the
  hand-written gradient ∇V + Gᵀλ = 0, the constrained stiffness
  V''(θ)/|dq/dθ|² and ω² = V''(θ)/(2 T(θ, θ' = 1));
* Mechanism0 (rod + spring + particle): ``scipy.optimize.minimize`` of the
  hand-written potential energy over (φ, B), polished by ``scipy.optimize.root``
  on its gradient, and the hanging closed form; the reduced Hessian and mass
  matrix for the stiffness eigenvalues and frequencies;
* an oscillator under gravity (x = −mg/k, ω = sqrt(k/m)) and the logistic
  equation (x = K), built in Python without a YAML file.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import brentq, minimize, root

import solver
from solver.analysis.equilibrium import Equilibrium, EquilibriumError
from solver.errors import InputError
from sweep.cli.app import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"


@pytest.fixture(scope="module")
def pendulum():
    return solver.load(CONFIGS / "pendulum.yaml")


# ------------------------------------------------------------------ pendulum
@pytest.mark.parametrize("g, L", [(9.81, 1.0), (3.7, 2.5)])
def test_pendulum_hanging_equilibrium_is_stable_with_frequency_sqrt_g_over_l(pendulum, g, L):
    res = solver.equilibrium(pendulum, guess={"x": 0.2 * L, "y": 0.7 * L}, params={"g": g, "L": L})
    assert isinstance(res, Equilibrium) and res.status == "converged"
    assert res.configuration["x"] == pytest.approx(0.0, abs=1e-12)
    assert res.configuration["y"] == pytest.approx(L, rel=1e-13)
    assert res.multipliers["lam"] == pytest.approx(g / L, rel=1e-12)
    assert res.branch == "stable" and res.stable is True and res.dof == 1
    assert res.n_negative == 0 and res.n_zero == 0
    # Stiffness on the circle's tangent: λ (the equations are per unit mass).
    np.testing.assert_allclose(res.stiffness_eigenvalues, [g / L], rtol=1e-12)
    np.testing.assert_allclose(res.frequencies, [np.sqrt(g / L)], rtol=1e-12)
    assert res.residual <= res.tolerance


def test_pendulum_standing_equilibrium_is_unstable(pendulum):
    res = solver.equilibrium(pendulum, guess={"x": -0.1, "y": -0.8})
    assert res.configuration["x"] == pytest.approx(0.0, abs=1e-12)
    assert res.configuration["y"] == pytest.approx(-1.0, rel=1e-13)
    assert res.multipliers["lam"] == pytest.approx(-9.81, rel=1e-12)
    assert res.branch == "unstable" and res.stable is False and res.n_negative == 1
    np.testing.assert_allclose(res.stiffness_eigenvalues, [-9.81], rtol=1e-12)
    np.testing.assert_allclose(res.omega_squared, [-9.81], rtol=1e-12)
    assert np.isnan(res.frequencies).all()          # no oscillation: it falls
    assert "unstable" in res.summary() and "1 negative" in str(res)


def test_pendulum_released_horizontal_settles_hanging(pendulum):
    # The file's guess holds the bob level with the pivot: as far from one
    # equilibrium as from the other, and Newton has no descent direction.
    with pytest.raises(EquilibriumError, match="no equilibrium found.*another guess"):
        solver.equilibrium(pendulum, method="newton")
    res = solver.equilibrium(pendulum)                 # auto: Newton, then settle
    assert res.method == "settle"
    assert res.configuration["y"] == pytest.approx(1.0, rel=1e-13)
    assert res.multipliers["lam"] == pytest.approx(9.81, rel=1e-12)
    assert res.branch == "stable"


def test_pendulum_without_gravity_is_marginal(pendulum):
    # g = 0: every point of the circle is at rest with λ = 0; the one found
    # is the nearest to the guess (radial projection) and nothing restores.
    res = solver.equilibrium(pendulum, guess={"x": 0.3, "y": 0.9}, params={"g": 0.0})
    r = np.hypot(0.3, 0.9)
    assert res.configuration["x"] == pytest.approx(0.3 / r, rel=1e-12)
    assert res.configuration["y"] == pytest.approx(0.9 / r, rel=1e-12)
    assert res.multipliers["lam"] == pytest.approx(0.0, abs=1e-12)
    assert res.branch == "marginal" and res.stable is None and res.n_zero == 1
    assert any("not isolated" in n for n in res.notes)


def test_ipopt_method_finds_the_equilibrium_nearest_the_guess(pendulum):
    res = solver.equilibrium(pendulum, guess={"x": 0.3, "y": -0.6}, method="ipopt")
    assert res.method == "ipopt"
    assert res.configuration["y"] == pytest.approx(-1.0, rel=1e-13)
    assert res.branch == "unstable"


def test_bad_guess_and_method_are_input_errors(pendulum):
    with pytest.raises(EquilibriumError, match="unknown variable 'z'; the variables are x, y, lam"):
        solver.equilibrium(pendulum, guess={"z": 1.0})
    with pytest.raises(EquilibriumError, match="derivative"):
        solver.equilibrium(pendulum, guess={"x'": 1.0})
    with pytest.raises(InputError, match="method must be one of auto, newton, settle, ipopt"):
        solver.equilibrium(pendulum, method="bisection")
    with pytest.raises(InputError, match="unknown parameter 'G'"):
        solver.equilibrium(pendulum, params={"G": 1.0})


# ------------------------------------------------------------------ four-bar with a spring
P4 = dict(a=1.0, b=3.0, c=2.5, d=3.0, m1=1.0, m2=2.0, m3=1.5, g=9.81, k=50.0, l0=1.0,
          px=1.5, py=4.0)


def _fourbar_points(th, p=P4):
    """Crank pin A and coupler joint B at crank angle θ, B above the ground line
    (circle |B − A| = b meets circle |B − O4| = c).  Complex-safe."""
    A = np.array([p["a"] * np.cos(th), p["a"] * np.sin(th)])
    D = np.array([p["d"], 0.0]) - A
    dist = np.sqrt(D @ D)
    s = (p["b"] ** 2 - p["c"] ** 2 + dist ** 2) / (2 * dist)
    h = np.sqrt(p["b"] ** 2 - s ** 2)
    B = A + s * D / dist + h * np.array([-D[1], D[0]]) / dist
    return A, B


def _fourbar_V(th, p=P4):
    A, B = _fourbar_points(th, p)
    r = B - np.array([p["px"], p["py"]])
    return (p["g"] * (p["m1"] * A[1] / 2 + p["m2"] * (A[1] + B[1]) / 2 + p["m3"] * B[1] / 2)
            + p["k"] / 2 * (np.sqrt(r @ r) - p["l0"]) ** 2)


def _cs(f, th, h=1e-30):
    """Complex-step derivative: exact to rounding."""
    return np.imag(f(th + 1j * h)) / h


def _fourbar_reference():
    """Every equilibrium θ on (−π, π): roots of dV/dθ, with V''(θ)."""
    dV = lambda th: _cs(_fourbar_V, th)
    grid = np.linspace(-np.pi + 1e-3, np.pi - 1e-3, 721)
    vals = np.array([dV(t) for t in grid])
    out = []
    for i in np.nonzero(np.sign(vals[1:]) != np.sign(vals[:-1]))[0]:
        th = brentq(dV, grid[i], grid[i + 1], xtol=1e-15, rtol=1e-15)
        h = 1e-4
        out.append((th, (dV(th + h) - dV(th - h)) / (2 * h)))
    return out


def _fourbar_hand_equations(A, B, p=P4):
    """∇V and G written out by hand (V and the three loop constraints)."""
    r = B - np.array([p["px"], p["py"]])
    n = np.linalg.norm(r)
    spring = p["k"] * (n - p["l0"]) * r / n
    gradV = np.array([0.0, p["g"] * (p["m1"] / 2 + p["m2"] / 2),
                      *(spring + [0.0, p["g"] * (p["m2"] / 2 + p["m3"] / 2)])])
    O4 = np.array([p["d"], 0.0])
    G = np.array([[*(2 * A), 0.0, 0.0],
                  [*(-2 * (B - A)), *(2 * (B - A))],
                  [0.0, 0.0, *(2 * (B - O4))]])
    return gradV, G


def test_fourbar_spring_equilibria_match_the_hand_reduced_crank_angle():
    model = solver.load(CONFIGS / "fourbar_spring.yaml")
    ref = _fourbar_reference()
    assert len(ref) == 4                       # two stable, two unstable (see the file)
    p = P4
    for th, d2V in ref:
        A, B = _fourbar_points(th)
        # Start off the answer: the crank 0.05 rad away, B roughly there.
        A0, B0 = _fourbar_points(th + 0.05)
        res = solver.equilibrium(model, guess={"A": A0, "B": B0 + [0.03, -0.02]})
        np.testing.assert_allclose(res.configuration["A"], A, rtol=0, atol=1e-9)
        np.testing.assert_allclose(res.configuration["B"], B, rtol=0, atol=1e-9)
        # Multipliers: the hand-written ∇V + Gᵀλ = 0, solved by least squares.
        gradV, G = _fourbar_hand_equations(A, B)
        lam = np.linalg.lstsq(G.T, -gradV, rcond=None)[0]
        np.testing.assert_allclose(res.multipliers["lam"], lam, rtol=1e-8, atol=1e-8)
        # Stiffness along the unit tangent, and ω² with the mass along the path.
        qdot = np.concatenate([_cs(lambda t: _fourbar_points(t)[0], th),
                               _cs(lambda t: _fourbar_points(t)[1], th)])
        Ad, Bd = qdot[:2], qdot[2:]
        two_T = (p["m1"] / 3 * Ad @ Ad + p["m2"] / 3 * (Ad @ Ad + Ad @ Bd + Bd @ Bd)
                 + p["m3"] / 3 * Bd @ Bd)
        np.testing.assert_allclose(res.stiffness_eigenvalues, [d2V / (qdot @ qdot)], rtol=1e-6)
        np.testing.assert_allclose(res.omega_squared, [d2V / two_T], rtol=1e-6)
        assert res.branch == ("stable" if d2V > 0 else "unstable")
        assert res.dof == 1


def test_fourbar_spring_default_guess_finds_the_stable_equilibrium_near_th():
    model = solver.load(CONFIGS / "fourbar_spring.yaml")
    res = solver.equilibrium(model)           # th = -0.5 in the file
    th = min((t for t, _ in _fourbar_reference()), key=lambda t: abs(t + 0.5))
    A, B = _fourbar_points(th)
    np.testing.assert_allclose(res.configuration["A"], A, atol=1e-9)
    np.testing.assert_allclose(res.configuration["B"], B, atol=1e-9)
    assert res.stable is True


# ------------------------------------------------------------------ Mechanism0
M0 = dict(L=1.0, M=1.0, k=500.0, l=1.0, mu=0.5, m=2.0, g=9.81)


def _m0_V(z, p=M0):
    """Potential energy of Mechanism0 in (φ, Bx, By): rod angle and particle."""
    phi, Bx, By = z
    Ax, Ay = p["L"] * np.cos(phi), p["L"] * np.sin(phi)
    n = np.hypot(Bx - Ax, By - Ay)
    return (p["k"] / 2 * (n - p["l"]) ** 2
            + p["g"] * (p["M"] * Ay / 2 + p["mu"] * (Ay + By) / 2 + p["m"] * By))


def _m0_grad(z, p=M0):
    phi, Bx, By = z
    Ax, Ay = p["L"] * np.cos(phi), p["L"] * np.sin(phi)
    dx, dy = Bx - Ax, By - Ay
    n = np.hypot(dx, dy)
    f = p["k"] * (n - p["l"]) / n                 # spring tension / length
    dAdphi = np.array([-Ay, Ax])
    gA = -f * np.array([dx, dy]) + [0.0, p["g"] * (p["M"] / 2 + p["mu"] / 2)]
    gB = f * np.array([dx, dy]) + [0.0, p["g"] * (p["mu"] / 2 + p["m"])]
    return np.array([gA @ dAdphi, gB[0], gB[1]])


def test_mechanism0_equilibrium_matches_a_scipy_minimisation_of_the_potential():
    model = solver.load(CONFIGS / "mechanism0.yaml")
    res = solver.equilibrium(model)
    # Independent: minimise V from a rough start, then solve ∇V = 0 to rounding.
    start = np.array([-1.2, 0.3, -1.8])
    z = minimize(_m0_V, start, jac=_m0_grad, method="BFGS", options={"gtol": 1e-10}).x
    sol = root(_m0_grad, z, tol=1e-14)
    assert np.max(np.abs(_m0_grad(sol.x))) < 1e-11
    phi, Bx, By = sol.x
    A = M0["L"] * np.array([np.cos(phi), np.sin(phi)])
    np.testing.assert_allclose(res.configuration["A"], A, atol=1e-9)
    np.testing.assert_allclose(res.configuration["B"], [Bx, By], atol=1e-9)
    # Closed form: everything hangs straight down, the spring stretched by
    # the weight below its middle, g (m + mu/2) / k.
    stretch = M0["g"] * (M0["m"] + M0["mu"] / 2) / M0["k"]
    np.testing.assert_allclose(res.configuration["B"], [0, -M0["L"] - M0["l"] - stretch],
                               atol=1e-9)
    # Stability: with L = 1, (φ, Bx, By) -> (A, B) has orthonormal columns at
    # the minimum, so the projected stiffness is the reduced Hessian of V.
    h = 1e-5
    H = np.array([(_m0_grad(sol.x + h * e) - _m0_grad(sol.x - h * e)) / (2 * h)
                  for e in np.eye(3)])
    H = (H + H.T) / 2
    np.testing.assert_allclose(res.stiffness_eigenvalues, np.linalg.eigvalsh(H), rtol=1e-6)
    # Frequencies: T = M/6|A'|² + mu/6(|A'|² + A'·B' + |B'|²) + m/2|B'|².
    p = M0
    I2 = np.eye(2)
    Mq = np.block([[(p["M"] / 3 + p["mu"] / 3) * I2, p["mu"] / 6 * I2],
                   [p["mu"] / 6 * I2, (p["mu"] / 3 + p["m"]) * I2]])
    Jq = np.zeros((4, 3))
    Jq[:2, 0] = [-A[1], A[0]]
    Jq[2:, 1:] = I2
    from scipy.linalg import eigh

    w2 = eigh(H, Jq.T @ Mq @ Jq, eigvals_only=True)
    np.testing.assert_allclose(res.frequencies, np.sqrt(w2), rtol=1e-6)
    assert res.branch == "stable" and res.dof == 3


# ------------------------------------------------------------------ Python-built DAEs
def test_oscillator_under_gravity_built_in_python():
    dae = solver.lagrangian(
        lambda t, q, qd, p: p["m"] / 2 * qd["x"] ** 2 - p["k"] / 2 * q["x"] ** 2 - p["m"] * p["g"] * q["x"],
        {"x": None}, params={"m": 2.0, "k": 8.0, "g": 9.81})
    res = solver.equilibrium(dae, guess={"x": 0.5})
    assert res.configuration["x"] == pytest.approx(-2.0 * 9.81 / 8.0, rel=1e-13)
    assert res.multipliers == {}
    np.testing.assert_allclose(res.stiffness_eigenvalues, [8.0], rtol=1e-12)
    np.testing.assert_allclose(res.frequencies, [2.0], rtol=1e-12)


def test_a_time_derivative_of_an_expression_is_zero_at_rest():
    # (x')' is ddt(x'): at rest it vanishes and its ∂/∂x'' is the mass.
    model = solver.load("""Kind: DAE
PhysicalParams: {g: 9.81, L: 1.0}
Variables: [x, y, lam]
Equations:
  - (x')' + lam*x
  - y'' + lam*y - g
  - x**2 + y**2 - L**2
ProblemData: {tend: 1, values: {x: 0.1, y: 0.9}, fixed: [x]}
""")
    res = solver.equilibrium(model)
    assert res.configuration["y"] == pytest.approx(1.0, rel=1e-13)
    np.testing.assert_allclose(res.frequencies, [np.sqrt(9.81)], rtol=1e-12)


def test_first_order_dae_is_solved_but_not_classified():
    dae = solver.DAE(lambda t, v, p: [v["x"][1] - p["r"] * v["x"][0] * (1 - v["x"][0] / p["K"])],
                     variables=["x"], params={"r": 0.7, "K": 3.0})
    res = solver.equilibrium(dae, guess={"x": 2.0})
    assert res.configuration["x"] == pytest.approx(3.0, rel=1e-13)
    assert res.branch == "not classified" and res.stable is None
    assert "not a second-order" in res.notes[0]


def test_no_equilibrium_is_a_clear_error(tmp_path):
    falling = tmp_path / "falling.yaml"
    falling.write_text("""Title: Falling particle
Kind: Lagrangian
PhysicalParams: {m: 1.0, g: 9.81}
Coordinates: {y: 1}
KineticEnergy: m/2*y'**2
PotentialEnergy: m*g*y
ProblemData: {tend: 1, positions: {y: 0}, velocities: {y: 0}}
""")
    with pytest.raises(EquilibriumError, match=r"falling.yaml: no equilibrium found .*"
                                               r"Newton.*settling.*IPOPT.*another guess"):
        solver.equilibrium(solver.load(falling))


# ------------------------------------------------------------------ CLI
def test_cli_prints_the_pendulum_equilibrium(capsys):
    assert main(["equilibrium", str(CONFIGS / "pendulum.yaml")]) == 0
    out = capsys.readouterr().out
    assert "Simple pendulum, index 3: equilibrium found by settle" in out
    assert "  y = 1\n" in out and "  x = 0\n" in out
    assert "  lam = 9.81\n" in out
    assert "stability: stable" in out
    assert f"frequencies (rad/s): [{np.sqrt(9.81):.10g}]" in out


def test_cli_json_with_set_and_guess(capsys):
    code = main(["equilibrium", str(CONFIGS / "pendulum.yaml"), "--set", "L=2", "--set", "g=4",
                 "--guess", "y=-L", "--guess", "x=0.1", "--json"])
    assert code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["configuration"]["y"] == pytest.approx(-2.0, rel=1e-13)
    assert info["multipliers"]["lam"] == pytest.approx(-2.0, rel=1e-12)
    assert info["branch"] == "unstable" and info["stable"] is False
    assert info["frequencies"] == [None]
    assert info["params"] == {"g": 4.0, "L": 2.0}


@pytest.mark.parametrize("args, message", [
    (["--set", "Lx=2"], "unknown parameter 'Lx'; the parameters are g, L"),
    (["--set", "L"], "expected NAME=VALUE"),
    (["--guess", "q=1"], "unknown variable 'q'; the variables are x, y, lam"),
    (["--guess", "y=(1"], "--guess y"),
])
def test_cli_bad_input_exits_2(capsys, args, message):
    assert main(["equilibrium", str(CONFIGS / "pendulum.yaml"), *args]) == 2
    err = capsys.readouterr().err
    assert "mechsweep: error: " in err and message in err.split("mechsweep: error: ", 1)[1]
    assert "Traceback" not in err


def test_cli_no_equilibrium_exits_2(capsys):
    code = main(["equilibrium", str(CONFIGS / "pendulum.yaml"), "--method", "newton"])
    assert code == 2
    err = capsys.readouterr().err
    assert "no equilibrium found from the guess" in err and "--guess NAME=VALUE" in err
