"""Rigid bodies in 3-D, integrated, against references nobody here wrote.

Seed 003 (``configs/mechanisms/free_body.yaml``): a free rigid body in
natural coordinates (three points fix its frame), distinct principal moments,
no forces.  Its motion is the textbook torque-free motion (Goldstein,
*Classical Mechanics*, §5.5–5.6; Landau & Lifshitz, *Mechanics*, §36–37):

* the centroid moves uniformly, x_c(t) = x_c(0) + v_c t;
* the angular velocity ω in body axes obeys Euler's equations
  I ω' = (I ω) × ω, i.e. I1 ω1' = (I2 − I3) ω2 ω3 and cyclically;
* the attitude R (body to world) obeys R' = R [ω]×, R(0) = 1 here;
* energy ½ M |v_c|² + ½ ω·I ω and the angular momentum about the world
  origin, M x_c × v_c + R I ω, are constant.

The reference integrates these twelve ODEs with scipy's DOP853 at
rtol = atol = 1e-13; nothing of it comes from the solver or the model
file's equations.  ``configs/mechanisms/free_body_lagrangian.yaml`` is the
same body written by hand in Z-X-Y Euler angles (the seed's sympy example);
its angles are turned into a rotation matrix here by scipy's ``Rotation``.

The heavy symmetric top (a body with a fixed point at the origin under
gravity, I1 = I2 ≠ I3) is checked against the closed-form steady precession
and against scipy's integration of the Lagrange top's Euler-angle equations
(Goldstein §5.7).

Each integrated model compiles once (the compact Taylor engine: 10–25 s);
the other runs of a model reuse it with other parameters.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy.integrate import solve_ivp
from scipy.spatial.transform import Rotation

import solver

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"
FREE_BODY = CONFIGS / "free_body.yaml"
FREE_BODY_LAGRANGIAN = CONFIGS / "free_body_lagrangian.yaml"


def _hat(w):
    """[w]×, the matrix of w × ·."""
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def _frame_and_rate(P0, P1, P2, V0, V1, V2, a, b):
    """Body axes (columns of R) and the world angular velocity from the three points.

    e1 = (P1 − P0)/a, e2 = (P2 − P0)/b, e3 = e1 × e2; for an orthonormal
    frame turning with ė_k = ω × e_k, Σ_k e_k × ė_k = 3ω − ω = 2ω.
    """
    e1, e2 = (P1 - P0) / a, (P2 - P0) / b
    e3 = np.cross(e1, e2)
    d1, d2 = (V1 - V0) / a, (V2 - V0) / b
    d3 = np.cross(d1, e2) + np.cross(e1, d2)
    R = np.stack([e1, e2, e3], axis=-1)
    w_world = 0.5 * (np.cross(e1, d1) + np.cross(e2, d2) + np.cross(e3, d3))
    return R, w_world


# ------------------------------------------------------------------ seed 003: the free body
@pytest.fixture(scope="module")
def free_body():
    return solver.load(FREE_BODY)


@pytest.fixture(scope="module")
def free_run(free_body):
    ds = free_body.solve()
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    return ds


@pytest.fixture(scope="module")
def euler_reference(free_body, free_run):
    """Euler's equations and R' = R [ω]× by scipy, at the model's output times."""
    p = free_body.params
    I = np.asarray(p["I"], dtype=float)
    w0 = np.array([p["w1"], p["w2"], p["w3"]], dtype=float)

    def rhs(_, y):
        w, R = y[:3], y[3:].reshape(3, 3)
        return np.r_[np.cross(I * w, w) / I, (R @ _hat(w)).ravel()]

    t = free_run.time.values
    sol = solve_ivp(rhs, (t[0], t[-1]), np.r_[w0, np.eye(3).ravel()], t_eval=t,
                    method="DOP853", rtol=1e-13, atol=1e-13)
    assert sol.success
    return {"t": t, "w": sol.y[:3].T, "R": sol.y[3:].T.reshape(-1, 3, 3)}


def test_free_body_is_the_seed_system_started_in_a_rigid_motion(free_body, free_run):
    """Three moving points, no fixed point, 9 − 3 = 6 mechanical DOF, no forces;
    distinct principal moments; the initial point velocities are a rigid
    motion v_P = v_c + ω × (P − x_c) with the file's ω and v_c."""
    m = free_body
    assert m.kind == "Mechanism" and m.points == ["P0", "P1", "P2"] and m.fixed_points == []
    assert m.dae.n_c == 3 and m.dae.structure.dof == 2 * (9 - 3) and m.conservative
    p = m.params
    I = np.asarray(p["I"])
    assert len(set(I)) == 3 and I.max() < I.min() + np.sort(I)[1]   # distinct, physical
    w0 = np.array([p["w1"], p["w2"], p["w3"]])
    c, vc, a, b = np.asarray(p["c"]), np.asarray(p["vc"]), p["a"], p["b"]
    local = {"P0": np.zeros(3), "P1": np.array([a, 0.0, 0.0]), "P2": np.array([0.0, b, 0.0])}
    for name, X in local.items():
        np.testing.assert_allclose(free_run[name].values[0], X, rtol=0, atol=1e-14)
        np.testing.assert_allclose(free_run[name + "_d1"].values[0], vc + np.cross(w0, X - c),
                                   rtol=0, atol=1e-14)
    # Spun about all three axes (test_free_body_follows_eulers_equations
    # checks that ω1 and ω2 then swing through zero: a genuine tumble).
    assert np.all(np.abs(w0) >= 0.5)


def test_free_body_follows_eulers_equations(free_body, free_run, euler_reference):
    """ω(t) in body axes, the body axes in the world and every point's position
    agree with Euler's equations integrated by scipy to 1e-9 (measured ~1e-13)."""
    p = free_body.params
    a, b, c, vc = p["a"], p["b"], np.asarray(p["c"]), np.asarray(p["vc"])
    ds = free_run
    R, w_world = _frame_and_rate(*(ds[n].values for n in ("P0", "P1", "P2", "P0_d1", "P1_d1", "P2_d1")),
                                 a, b)
    w_body = np.einsum("tji,tj->ti", R, w_world)
    w_ref, R_ref = euler_reference["w"], euler_reference["R"]
    # The reference really tumbles: ω1 and ω2 swing through zero, ω3 nods.
    assert w_ref[:, 0].min() < -0.9 and w_ref[:, 0].max() > 0.9
    assert w_ref[:, 1].min() < -1.0 and w_ref[:, 1].max() > 1.0
    assert np.ptp(w_ref[:, 2]) > 0.1
    np.testing.assert_allclose(w_body, w_ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(R, R_ref, rtol=0, atol=1e-9)
    # Positions: x_c(t) + R(t) (X − c), the centroid moving uniformly.
    x_c = c + np.outer(euler_reference["t"], vc)
    local = {"P0": np.zeros(3), "P1": np.array([a, 0.0, 0.0]), "P2": np.array([0.0, b, 0.0])}
    for name, X in local.items():
        np.testing.assert_allclose(ds[name].values, x_c + R_ref @ (X - c), rtol=0, atol=1e-9)
    assert float(np.max(np.abs(ds.constraint_residual.values))) < 1e-12


def test_free_body_conserves_energy_and_angular_momentum(free_body, free_run, euler_reference):
    """Energy ½ M|v_c|² + ½ ω·Iω and the world angular momentum about the origin,
    M x_c × v_c + R I ω (here with the reference's R, ω at every output time),
    to 1e-10; the model's ``angular_momentum`` output is that vector."""
    p = free_body.params
    M, I, c, vc = p["M"], np.asarray(p["I"]), np.asarray(p["c"]), np.asarray(p["vc"])
    w0 = np.array([p["w1"], p["w2"], p["w3"]])
    ds = free_run
    E = 0.5 * M * vc @ vc + 0.5 * w0 @ (I * w0)
    np.testing.assert_allclose(ds.energy.values, E, rtol=0, atol=1e-10)
    t = euler_reference["t"]
    x_c = c + np.outer(t, vc)
    L_ref = M * np.cross(x_c, vc) + np.einsum("tij,tj->ti", euler_reference["R"], I * euler_reference["w"])
    np.testing.assert_allclose(L_ref - L_ref[0], 0.0, rtol=0, atol=1e-11)   # the reference conserves it
    L = ds.angular_momentum.values
    assert L.shape == (len(t), 3)
    np.testing.assert_allclose(L[0], M * np.cross(c, vc) + I * w0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(L, L_ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ds.momentum.values, np.broadcast_to(M * vc, (len(t), 3)), rtol=0, atol=1e-10)


def _euler_angle_points(ds, p):
    """The body points P0, P1, P2 of the Lagrangian file's solution: X + R (X_local − c),
    R = Rz(psi) Rx(theta) Ry(phi) (scipy's intrinsic 'ZXY')."""
    R = Rotation.from_euler("ZXY", np.stack([ds.psi.values, ds.theta.values, ds.phi.values], 1)).as_matrix()
    c = np.asarray(p["c"])
    local = {"P0": np.zeros(3), "P1": np.array([p["a"], 0.0, 0.0]), "P2": np.array([0.0, p["b"], 0.0])}
    return {name: ds.X.values + R @ (X - c) for name, X in local.items()}


def test_the_free_body_in_euler_angles_moves_as_in_natural_coordinates(free_body, free_run):
    """free_body_lagrangian.yaml (Z-X-Y Euler angles, T = ½M|X'|² + ½ Σ I_k ω_k²)
    and free_body.yaml (natural coordinates) describe the same body with the
    same initial motion: the three body points and the energy agree to 1e-9
    (measured ~1e-13) over the 5 s of tumbling."""
    lag = solver.load(FREE_BODY_LAGRANGIAN)
    assert lag.kind == "Lagrangian" and lag.conservative
    for name in ("M", "I", "c", "vc", "w1", "w2", "w3", "a", "b"):
        np.testing.assert_array_equal(lag.params[name], free_body.params[name])
    ds = lag.solve()
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    np.testing.assert_array_equal(ds.time.values, free_run.time.values)
    # The Euler-angle chart stays far from its singularity theta = ±pi/2.
    assert float(np.max(np.abs(ds.theta.values))) < 0.8
    points = _euler_angle_points(ds, lag.params)
    for name in ("P0", "P1", "P2"):
        np.testing.assert_allclose(points[name], free_run[name].values, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ds.energy.values, free_run.energy.values, rtol=0, atol=1e-10)


# ------------------------------------------------------------------ the heavy symmetric top
TOP = """\
Title: Heavy symmetric top
Kind: Mechanism
Dimension: 3
PhysicalParams:
  m: 1.0          # mass
  l: 0.25         # fixed point O to the centroid, along the symmetry axis
  h: 0.5          # O to A, on the axis
  r: 0.3          # O to B, across the axis
  I1c: 0.05       # transverse moment about the centroid
  I3: 0.09        # axial moment
  g: 9.81
  th0: 0.6        # initial tilt of the axis from +z, toward +x
  w3: 20.0        # spin: the angular velocity's component along the axis
  Om: 1.5         # initial precession rate about +z
PartData:
  Fixed: {O: [0, 0, 0]}
  Rigids:
    top:
      points: [O, A, B]
      Geom: [[0, 0, h], [r, 0, 0]]             # the axis is the body z axis
      Dyna: [[0, 0, l], m, [I1c, I1c, I3]]
AppliedForces:
  Gravity: g
ProblemData:
  tend: 2
  # R0 = Ry(th0); w = Om ez + (w3 - Om cos(th0)) e3 gives v_A = w x A = Om h sin(th0) ey
  # and v_B = w x B = r w3 ey.
  positions: {A: [h*sin(th0), 0, h*cos(th0)], B: [r*cos(th0), 0, -r*sin(th0)]}
  fixedpositions: {Ax, Ay, By}
  velocities: {Ax: 0, Ay: Om*h*sin(th0), By: r*w3}
  samples: 41
SolverParams:
  Integration: {tol: 1.0e-12}
"""


@pytest.fixture(scope="module")
def top(tmp_path_factory):
    path = tmp_path_factory.mktemp("top") / "top.yaml"
    path.write_text(TOP)
    return solver.load(path)


def _top_moments(p):
    """I1 about the fixed point (parallel axes), I3, and m g l."""
    return p["I1c"] + p["m"] * p["l"] ** 2, p["I3"], p["m"] * p["g"] * p["l"]


def _steady_precession_rates(p, th0, w3):
    """Roots of I1 cos(th0) Om² − I3 w3 Om + m g l = 0 (slow, fast).

    From L = ½ I1 (θ'² + φ'² sin²θ) + ½ I3 (ψ' + φ' cos θ)² − m g l cos θ
    (θ from the upward vertical, ω3 = ψ' + φ' cos θ), the θ equation is
    I1 θ'' = I1 φ'² sin θ cos θ − I3 ω3 φ' sin θ + m g l sin θ, and θ'' = 0
    at θ' = 0 with φ' = Om constant needs the quadratic (sin θ ≠ 0).
    """
    I1, I3, mgl = _top_moments(p)
    A, B, C = I1 * np.cos(th0), -I3 * w3, mgl
    disc = B * B - 4 * A * C
    assert disc > 0
    return (-B - np.sqrt(disc)) / (2 * A), (-B + np.sqrt(disc)) / (2 * A)


@pytest.mark.parametrize("root", [0, 1], ids=["slow", "fast"])
def test_heavy_top_in_steady_precession_keeps_its_tilt(top, root):
    """Started at the steady-precession rate Om for tilt th0 and spin w3, the
    top's motion is R(t) = Rz(Om t) Ry(th0) Rz(s t), s = w3 − Om cos th0:
    its axis keeps the tilt and turns uniformly about z.  Points A (on the
    axis) and B (across it) agree with it to 1e-8 (measured 3e-15 slow,
    4e-11 fast); the vertical angular momentum about O,
    p_φ = I1 Om sin² th0 + I3 w3 cos th0, and the energy are conserved."""
    p = top.params
    th0, w3 = 0.6, 20.0
    Om = _steady_precession_rates(p, th0, w3)[root]
    ds = top.solve({"th0": th0, "w3": w3, "Om": Om})
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    t = ds.time.values
    s = w3 - Om * np.cos(th0)
    R = Rotation.from_euler("ZYZ", np.stack([Om * t, np.full_like(t, th0), s * t], 1)).as_matrix()
    assert Om * t[-1] > 2.5   # it precesses through a good part of a turn
    np.testing.assert_allclose(ds.A.values, p["h"] * R[:, :, 2], rtol=0, atol=1e-8)
    np.testing.assert_allclose(ds.B.values, p["r"] * R[:, :, 0], rtol=0, atol=1e-8)
    tilt = np.arccos(ds.A.values[:, 2] / p["h"])
    np.testing.assert_allclose(tilt, th0, rtol=0, atol=1e-9)
    I1, I3, _ = _top_moments(p)
    p_phi = I1 * Om * np.sin(th0) ** 2 + I3 * w3 * np.cos(th0)
    np.testing.assert_allclose(ds.angular_momentum.values[:, 2], p_phi, rtol=0, atol=1e-9)
    e = ds.energy.values
    assert np.max(np.abs(e - e[0])) < 1e-9 * max(1.0, abs(e[0]))


def test_heavy_top_nutates_as_the_euler_angle_equations_say(top):
    """Released tilted, spinning and not precessing (Om = 0), the top falls and
    nutates between th0 and a lower turning point.  Reference: the Lagrange
    top in z-x-z Euler angles (φ, θ, ψ), with the conserved momenta
    p_ψ = I3 w3 and p_φ = I1 φ' sin²θ + p_ψ cos θ,

        φ' = (p_φ − p_ψ cos θ)/(I1 sin²θ),  ψ' = w3 − φ' cos θ,
        I1 θ'' = I1 φ'² sin θ cos θ − p_ψ φ' sin θ + m g l sin θ,

    by scipy (DOP853, 1e-13); R = Rz(φ) Rx(θ) Rz(ψ), starting at φ = π/2,
    θ = th0, ψ = −π/2 (which is Ry(th0)).  A and B agree to 1e-8 (measured ~1e-13)."""
    p = top.params
    th0, w3 = 0.6, 12.0
    ds = top.solve({"th0": th0, "w3": w3, "Om": 0.0})
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    t = ds.time.values
    I1, I3, mgl = _top_moments(p)
    p_psi = I3 * w3
    p_phi = p_psi * np.cos(th0)

    def rhs(_, y):
        th, thd, _phi, _psi = y
        phd = (p_phi - p_psi * np.cos(th)) / (I1 * np.sin(th) ** 2)
        thdd = (I1 * phd**2 * np.sin(th) * np.cos(th) - p_psi * phd * np.sin(th) + mgl * np.sin(th)) / I1
        return [thd, thdd, phd, w3 - phd * np.cos(th)]

    ref = solve_ivp(rhs, (t[0], t[-1]), [th0, 0.0, np.pi / 2, -np.pi / 2], t_eval=t,
                    method="DOP853", rtol=1e-13, atol=1e-13)
    assert ref.success
    th, _, phi, psi = ref.y
    assert th.max() > th0 + 0.3   # a real nutation, not a steady precession
    R = Rotation.from_euler("ZXZ", np.stack([phi, th, psi], 1)).as_matrix()
    np.testing.assert_allclose(ds.A.values, p["h"] * R[:, :, 2], rtol=0, atol=1e-8)
    np.testing.assert_allclose(ds.B.values, p["r"] * R[:, :, 0], rtol=0, atol=1e-8)
    np.testing.assert_allclose(ds.angular_momentum.values[:, 2], p_phi, rtol=0, atol=1e-10)
    e = ds.energy.values
    E0 = 0.5 * I3 * w3**2 + mgl * np.cos(th0)   # spin only, at rest otherwise
    np.testing.assert_allclose(e, E0, rtol=0, atol=1e-10)


# ------------------------------------------------------------------ the command line
@pytest.mark.parametrize("name", ["free_body", "free_body_lagrangian"])
def test_free_body_files_through_the_command_line(name, tmp_path, capsys, monkeypatch, free_body, free_run):
    """``check`` and a short ``simulate --json --out run.zarr`` of each shipped
    file, as a user runs them: exit 0, 6 mechanical DOF, and the stored run
    ends where the module's run of free_body.yaml is at t = 1 (1e-9)."""
    import jax

    from sweep.cli.app import main

    # The command line's persistent compilation cache is this session's
    # (tests/conftest.py), so simulate loads the program the module's solves
    # compiled (16 s -> 4 s for the 3-D body); results do not depend on it.
    if jax.config.jax_compilation_cache_dir:
        monkeypatch.setenv("MECHSWEEP_JAX_CACHE", jax.config.jax_compilation_cache_dir)

    path = tmp_path / f"{name}.yaml"
    text = (CONFIGS / f"{name}.yaml").read_text()
    assert "  tend: 5\n" in text
    path.write_text(text.replace("  tend: 5\n", "  tend: 1\n"))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mechanical DOF (coordinates - constraints): 6" in out
    store = tmp_path / "run.zarr"
    assert main(["simulate", str(path), "--json", "--out", str(store)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status_code"] == 0 and info["t_end"] == pytest.approx(1.0)
    assert abs(info["energy_drift"]) < 1e-10
    assert store.is_dir()
    ds = xr.open_zarr(store)
    assert int(ds.status) == 0 and float(ds.time[-1]) == pytest.approx(1.0)
    at_1 = free_run.sel(time=1.0, method="nearest")
    assert float(at_1.time) == pytest.approx(1.0, abs=1e-12)
    if name == "free_body":
        points = {n: ds[n].values[-1] for n in ("P0", "P1", "P2")}
    else:
        points = {n: v[-1] for n, v in _euler_angle_points(ds.load(), free_body.params).items()}
    for n, value in points.items():
        np.testing.assert_allclose(value, at_1[n].values, rtol=0, atol=1e-9)
