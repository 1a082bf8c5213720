"""Lagrangian models integrated by ``solver.solve``: physics the answers must obey.

References: the exact pendulum solution (Jacobi elliptic functions, scipy),
the two-body oscillation frequency, conservation of energy and angular
momentum, and the Rayleigh dissipation inequality dE/dt = −2R ≤ 0.
"""

import numpy as np
import pytest
from scipy.special import ellipj, ellipk

import jax.numpy as jnp

import solver
import models_for_tests as ex
from solver.mechanics import natural
from solver.mechanics.lagrangian import lagrangian


def _energy(dae, ds):
    """Energy recomputed from the dataset's variables (independent of ds.energy)."""
    p = {k: jnp.asarray(v) for k, v in dae.params.items()}
    out = []
    for i in range(ds.sizes["time"]):
        q = {c.name: ds[c.name].values[i] for c in dae.coords}
        qd = {c.name: ds[f"{c.name}_d1"].values[i] for c in dae.coords}
        out.append(float(dae.energy_fn(ds.time.values[i], q, qd, p)))
    return np.array(out)


def test_cartesian_and_angle_pendulum_agree_with_the_elliptic_solution():
    g, l, th0 = 9.81, 1.0, 0.5
    t = np.linspace(0.0, 5.0, 51)
    ang = solver.solve(ex.pendulum_angle(g=g, l=l), t_span=(0.0, 5.0),
                       values={"theta": th0, "theta'": 0.0}, fixed=["theta", "theta'"],
                       tol=1e-12, t_eval=t)
    cart = solver.solve(ex.pendulum_cartesian(g=g, l=l), t_span=(0.0, 5.0),
                        values={"x": l * np.sin(th0), "y": l * np.cos(th0), "x'": 0.0, "y'": 0.0},
                        fixed=["x", "x'"], tol=1e-12, t_eval=t)
    assert int(ang.status) == 0 and int(cart.status) == 0
    # Released at rest from θ0: θ(t) = 2 asin(k sn(K − ω t | k²)), k = sin(θ0/2).
    k, w = np.sin(th0 / 2), np.sqrt(g / l)
    sn = ellipj(ellipk(k**2) - w * t, k**2)[0]
    exact = 2 * np.arcsin(k * sn)
    np.testing.assert_allclose(ang.theta.values, exact, atol=1e-10)
    np.testing.assert_allclose(cart.x.values, l * np.sin(ang.theta.values), atol=1e-10)
    np.testing.assert_allclose(cart.y.values, l * np.cos(ang.theta.values), atol=1e-10)
    # The multiplier is the rod tension over 2ℓ: m(g cos θ + ℓ θ'²)/(2ℓ).
    lam = (g * np.cos(ang.theta.values) + l * ang.theta_d1.values**2) / (2 * l)
    np.testing.assert_allclose(cart.lam.values.ravel(), lam, atol=1e-8)


@pytest.mark.slow
def _rigid_chain_state(n, l):
    """A straight chain at 40° from the vertical, turning rigidly about the
    pivot: every position and velocity is consistent, so all can be fixed."""
    u = np.array([np.sin(0.7), 0.0, np.cos(0.7)])
    r = np.concatenate([(i + 1) * l * u for i in range(n)])
    omega = np.array([0.3, 1.1, -0.2])
    rd = np.concatenate([np.cross(omega, r[3 * i:3 * i + 3]) for i in range(n)])
    return r, rd


def test_five_pendulum_chain_conserves_energy():
    n, l = 5, 1.0
    dae = ex.pendulum_chain(n, l=l)
    r, rd = _rigid_chain_state(n, l)
    ds = solver.solve(dae, t_span=(0.0, 10.0), values={"r": r, "r'": rd}, fixed=["r", "r'"],
                      tol=1e-12, samples=101)
    assert int(ds.status) == 0
    E = _energy(dae, ds)
    assert np.max(np.abs(E - E[0])) <= 1e-9 * np.max(np.abs(E))
    np.testing.assert_allclose(ds.energy.values, E, rtol=1e-12, atol=1e-12)
    assert float(ds.constraint_residual.max()) < 1e-9


def test_two_particle_spring_oscillates_at_the_reduced_mass_frequency():
    m1, m2, k, l0, a = 1.0, 3.0, 12.0, 1.0, 0.2
    dae = ex.two_particles_spring(m1=m1, m2=m2, k=k, l0=l0)
    w = np.sqrt(k * (m1 + m2) / (m1 * m2))
    t = np.linspace(0.0, 4.0, 81)
    ds = solver.solve(dae, t_span=(0.0, 4.0),
                      values={"x1": [0.0, 0.0, 0.0], "x2": [l0 + a, 0.0, 0.0], "x1'": 0.0, "x2'": 0.0},
                      fixed=["x1", "x2", "x1'", "x2'"], tol=1e-12, t_eval=t)
    assert int(ds.status) == 0
    sep = np.linalg.norm(ds.x2.values - ds.x1.values, axis=1)
    np.testing.assert_allclose(sep, l0 + a * np.cos(w * t), atol=1e-9)
    # The centre of mass stays put.
    com = (m1 * ds.x1.values + m2 * ds.x2.values) / (m1 + m2)
    np.testing.assert_allclose(com, np.tile(com[0], (len(t), 1)), atol=1e-10)


@pytest.mark.slow
def test_free_rigid_body_conserves_world_angular_momentum():
    I = np.array([1.0, 2.0, 3.5])
    dae = ex.rigid_body_euler(m=1.0, I1=I[0], I2=I[1], I3=I[2])
    ang0, rate0 = np.array([0.3, 1.1, -0.4]), np.array([0.5, -0.7, 1.2])
    ds = solver.solve(dae, t_span=(0.0, 3.0),
                      values={"x": 0.0, "x'": [0.1, 0.0, -0.2], "phi": ang0[0], "theta": ang0[1],
                              "psi": ang0[2], "phi'": rate0[0], "theta'": rate0[1], "psi'": rate0[2]},
                      fixed=["x", "x'", "phi", "theta", "psi", "phi'", "theta'", "psi'"],
                      tol=1e-12, samples=61)
    assert int(ds.status) == 0
    Lw = []
    for i in range(ds.sizes["time"]):
        a = np.array([ds.phi.values[i], ds.theta.values[i], ds.psi.values[i]])
        ad = np.array([ds.phi_d1.values[i], ds.theta_d1.values[i], ds.psi_d1.values[i]])
        R = np.asarray(ex.euler_zxz(*a))
        w = np.asarray(ex.body_angular_velocity(ex.euler_zxz, a, ad))
        Lw.append(R @ (I * w))
    Lw = np.array(Lw)
    np.testing.assert_allclose(Lw, np.tile(Lw[0], (len(Lw), 1)), atol=1e-9 * np.linalg.norm(Lw[0]))
    E = ds.energy.values
    assert np.max(np.abs(E - E[0])) <= 1e-9 * abs(E[0])


@pytest.mark.slow
def test_damped_cloth_energy_decreases_monotonically():
    m = n = 10
    dae = ex.cloth(m, n, M=0.1, k=50.0, l=1.0, kd=0.5)
    r0 = ex.cloth_rest_positions(m, n)
    v0 = np.zeros((m, n, 3))
    v0[m // 2, n // 2, 2] = 5.0  # push the middle particle upwards (the talk)
    ds = solver.solve(dae, t_span=(0.0, 2.0), values={"r": r0.ravel(), "r'": v0.ravel()},
                      fixed=["r", "r'"], tol=1e-9, samples=41)
    assert int(ds.status) == 0
    E = ds.energy.values
    assert np.all(np.diff(E) <= 1e-9 * np.max(np.abs(E)))
    assert E[-1] < E[0] - 1e-3 * abs(E[0])  # and it really dissipates


@pytest.fixture(scope="module")
def car():
    # One model for both car tests: the forces are a parameter, so the
    # compiled integrator is shared (its compile dominates these tests).
    return ex.car(m=300.0, c=0.0)


@pytest.mark.slow
def test_car_without_forces_or_damping_conserves_energy(car):
    ds = solver.solve(car, t_span=(0.0, 2.0),
                      values={"x": [0.0, 0.0, 0.45], "ang": [0.05, -0.03, 0.2],
                              "x'": [3.0, 0.0, 0.1], "ang'": [0.2, 0.1, 0.3]},
                      fixed=["x", "ang", "x'", "ang'"], tol=1e-11, samples=41)
    assert int(ds.status) == 0
    E = ds.energy.values
    assert np.max(np.abs(E - E[0])) <= 1e-9 * np.max(np.abs(E))
    # It bounces: the height changes while the energy does not.
    assert np.ptp(ds.x.values[:, 2]) > 1e-3


@pytest.mark.slow
def test_car_corner_forces_accelerate_it(car):
    # Equal forward forces F on the four corners (body x axis) on flat ground:
    # the centre of mass accelerates forward at 4F/m while the frame stays level.
    F, m = 150.0, float(car.params["m"])
    forces = np.zeros((4, 3))
    forces[:, 0] = F
    z_eq = car.params["h0"] - m * car.params["g"] / (4 * car.params["k"])  # static sag
    t = np.linspace(0.0, 1.0, 11)
    ds = solver.solve(car, t_span=(0.0, 1.0), values={"x": [0.0, 0.0, z_eq], "ang": 0.0,
                                                      "x'": 0.0, "ang'": 0.0},
                      fixed=["x", "ang", "x'", "ang'"], tol=1e-11, t_eval=t,
                      params={"F": forces})
    assert int(ds.status) == 0
    np.testing.assert_allclose(ds.x.values[:, 0], 0.5 * 4 * F / m * t**2, atol=1e-9)
    np.testing.assert_allclose(ds.x.values[:, 2], z_eq, atol=1e-9)


def test_natural_coordinate_rod_is_a_compound_pendulum():
    # Rod OA (talk's Mechanism0 part, y up) pivoted at O, tracked by A alone:
    # θ'' = −(3g / 2L) sin θ, released at rest from θ0 (elliptic solution).
    Lr, M, g, th0 = 1.0, 2.0, 9.81, 0.6
    rod = natural.RigidBody.from_dyna([[Lr, 0.0]], [[Lr / 2, 0.0], M, M * Lr**2 / 12])
    O = jnp.zeros(2)

    def L(t, q, qd, p):
        return rod.kinetic_energy([O, q["A"]], [O, qd["A"]]) - M * g * rod.centroid_position([O, q["A"]])[1]

    dae = lagrangian(L, {"A": 2}, constraints=lambda t, q, p: rod.frame.rigidity_constraints([O, q["A"]]))
    t = np.linspace(0.0, 3.0, 31)
    ds = solver.solve(dae, t_span=(0.0, 3.0),
                      values={"A": [Lr * np.sin(th0), -Lr * np.cos(th0)], "A'": [0.0, 0.0]},
                      fixed=["A[0]", "A'"], tol=1e-12, t_eval=t)
    assert int(ds.status) == 0
    A = ds.A.values
    k, w = np.sin(th0 / 2), np.sqrt(3 * g / (2 * Lr))
    exact = 2 * np.arcsin(k * ellipj(ellipk(k**2) - w * t, k**2)[0])
    np.testing.assert_allclose(np.arctan2(A[:, 0], -A[:, 1]), exact, atol=1e-9)


@pytest.mark.slow
def test_structured_kkt_solve_equals_the_dense_lu_on_a_pendulum_chain():
    # Three pendula in 3-D (index 3, nonlinear constraints): the stage
    # systems solved by mass blocks and a Schur complement on the
    # constraints give the trajectory and multipliers of the dense LU.
    n, l = 3, 1.0
    dae = ex.pendulum_chain(n, l=l)
    r, rd = _rigid_chain_state(n, l)
    runs = {lin: solver.solve(dae, t_span=(0.0, 2.0), values={"r": r, "r'": rd}, fixed=["r", "r'"],
                              tol=1e-11, samples=21, linear=lin)
            for lin in ("dense", "kkt")}
    assert [int(ds.status) for ds in runs.values()] == [0, 0]
    np.testing.assert_allclose(runs["kkt"].r, runs["dense"].r, atol=1e-11)
    np.testing.assert_allclose(runs["kkt"].lam, runs["dense"].lam,
                               atol=1e-10 * float(np.abs(runs["dense"].lam).max()))
    assert float(runs["kkt"].constraint_residual.max()) < 1e-10


@pytest.mark.slow
def test_cloth_on_the_structured_path_matches_scipy_dop853():
    # A 4×4 damped cloth (48 ODEs: solved by its diagonal mass blocks) against
    # scipy's DOP853 on the explicit form r'' = −M⁻¹ bias(r, r').
    from scipy.integrate import solve_ivp

    m = n = 4
    dae = ex.cloth(m, n, M=0.1, k=50.0, kd=0.5)
    assert solver.api.integrator_for(dae, 13).linear == "kkt"
    r0 = ex.cloth_rest_positions(m, n).ravel()
    v0 = np.zeros((m, n, 3))
    v0[1, 2, 2] = 3.0
    t = np.linspace(0.0, 1.0, 11)
    ds = solver.solve(dae, t_span=(0.0, 1.0), values={"r": r0, "r'": v0.ravel()}, fixed=["r", "r'"],
                      tol=1e-11, order=13, t_eval=t)
    assert int(ds.status) == 0
    M = np.asarray(dae.mass_matrix(0.0, r0, v0.ravel()))
    N = 3 * m * n

    def rhs(_, y):
        return np.concatenate([y[N:], np.linalg.solve(M, -np.asarray(dae.bias(0.0, y[:N], y[N:])))])

    ref = solve_ivp(rhs, (0.0, 1.0), np.concatenate([r0, v0.ravel()]), method="DOP853",
                    rtol=1e-12, atol=1e-12, t_eval=t)
    np.testing.assert_allclose(ds.r.values, ref.y[:N].T, atol=1e-8)
    np.testing.assert_allclose(ds.r_d1.values, ref.y[N:].T, atol=1e-7)
