"""Lagrangian facility: Euler–Lagrange residuals, inspection, KKT solves.

Every expected value is written out independently of the code under test:
hand-derived equations of motion (the talk, Goldstein), loops over springs
in plain numpy, finite differences, and numpy's dense linear solver.  No time
integration here (see tests/test_lagrangian_solve.py).
"""

import time

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import solver
import models_for_tests as ex
from solver.dae.problem import DAE
from solver.errors import InputError
from solver.mechanics.lagrangian import LagrangianDAE, MassBlocks, lagrangian, point_force, solve_kkt

RNG = np.random.default_rng(20240601)


def _rand(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape)


# ----------------------------------------------------------- EL residuals
def test_cartesian_pendulum_residual_is_the_talks_hand_derived_dae():
    m, g, l = 1.7, 9.81, 0.8
    dae = ex.pendulum_cartesian(m=m, g=g, l=l)
    assert isinstance(dae, DAE) and isinstance(dae, LagrangianDAE)
    assert [v.name for v in dae.variables] == ["x", "y", "lam"]
    # EL rows and the constraint come back as separate residual items.
    assert dae.el_items == [0, 1] and dae.constraint_item == 2
    assert len(dae.equation_blocks) == 3
    for _ in range(5):
        t = RNG.uniform(0, 10)
        x, y, xd, yd, xdd, ydd, lam = _rand(7, lo=-2, hi=2)
        got = dae.residual_at(t, {"x": x, "y": y}, {"x": xd, "y": yd}, {"x": xdd, "y": ydd},
                              jnp.array([lam]))
        want = [m * xdd + 2 * x * lam, m * ydd + 2 * y * lam - m * g, x**2 + y**2 - l**2]
        np.testing.assert_allclose(np.concatenate([np.ravel(r) for r in got]), want,
                                   rtol=1e-13, atol=1e-13)
        # The DAE's own residual callable (v[name][k] convention) agrees.
        v = {"x": [x, xd, xdd], "y": [y, yd, ydd], "lam": [jnp.array([lam])]}
        direct = dae.residual(t, v, dae.params)
        np.testing.assert_allclose(np.concatenate([np.ravel(r) for r in direct]), want,
                                   rtol=1e-13, atol=1e-13)


def test_angle_pendulum_is_an_ode_without_multiplier():
    m, g, l = 2.0, 9.81, 1.3
    dae = ex.pendulum_angle(m=m, g=g, l=l)
    assert dae.n_c == 0 and dae.multiplier is None
    assert [v.name for v in dae.variables] == ["theta"]
    th, thd, thdd = _rand(3, lo=-3, hi=3)
    (r,) = dae.residual_at(0.0, [th], [thd], [thdd])
    np.testing.assert_allclose(r, m * l**2 * thdd + m * g * l * np.sin(th), rtol=1e-13)


def test_pendulum_chain_multipliers_act_along_the_rods():
    n, m, g, l = 4, 0.7, 9.81, 1.1
    dae = ex.pendulum_chain(n, m=m, g=g, l=l)
    assert dae.n_c == n and dae.var_index["lam"].shape == (n,)
    r, rd, rdd, lam = _rand(n, 3), _rand(n, 3), _rand(n, 3), _rand(n)
    got = dae.residual_at(0.0, r.ravel(), rd.ravel(), rdd.ravel(), jnp.asarray(lam))
    # Hand-derived: m r_i'' + 2λ_i (r_i − r_{i−1}) − 2λ_{i+1} (r_{i+1} − r_i) − m g e_z.
    want = np.zeros((n, 3))
    prev = np.vstack([np.zeros(3), r[:-1]])
    for i in range(n):
        want[i] = m * rdd[i] + 2 * lam[i] * (r[i] - prev[i]) - m * g * np.array([0, 0, 1.0])
        if i + 1 < n:
            want[i] -= 2 * lam[i + 1] * (r[i + 1] - r[i])
    np.testing.assert_allclose(np.ravel(got[0]), want.ravel(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], np.sum((r - prev) ** 2, axis=1) - l**2, rtol=1e-12)


def test_residual_is_mass_times_acceleration_plus_bias_plus_constraint_term():
    dae = ex.pendulum_chain(3)
    q, qd, qdd, lam = _rand(9), _rand(9), _rand(9), _rand(3)
    M = dae.mass_matrix(0.0, q, qd)
    G = dae.constraint_jacobian(0.0, q)
    el = np.ravel(dae.residual_at(0.0, q, qd, qdd, jnp.asarray(lam))[0])
    np.testing.assert_allclose(el, M @ qdd + dae.bias(0.0, q, qd) + G.T @ lam, atol=1e-12)
    # constraint_forces is −Gᵀλ
    cf = dae.constraint_forces(0.0, q, jnp.asarray(lam))["r"]
    np.testing.assert_allclose(cf, -G.T @ lam, atol=1e-13)

    body = ex.rigid_body_euler(m=2.0, I1=1.0, I2=2.5, I3=4.0)
    q, qd, qdd = _rand(6, lo=0.3, hi=1.2), _rand(6), _rand(6)
    el = np.concatenate([np.ravel(e) for e in body.residual_at(0.0, q, qd, qdd)])
    M = body.mass_matrix(0.0, q, qd)
    np.testing.assert_allclose(el, M @ qdd + body.bias(0.0, q, qd), atol=1e-12)


def test_pendulum_momenta_jacobian_and_constraint_force_signs():
    m, g, l = 1.5, 9.81, 1.0
    dae = ex.pendulum_cartesian(m=m, g=g, l=l)
    q, qd = {"x": 0.6, "y": 0.8}, {"x": -0.4, "y": 0.3}
    mom = dae.momenta(0.0, q, qd)
    np.testing.assert_allclose([mom["x"], mom["y"]], [m * -0.4, m * 0.3])
    np.testing.assert_allclose(dae.constraint_jacobian(0.0, q), [[1.2, 1.6]])
    # Hanging at rest below the pivot: λ = mg/(2ℓ) > 0 and the constraint
    # force −Gᵀλ holds the bob up (−y, as y points down).
    lam = m * g / (2 * l)
    el = dae.residual_at(0.0, {"x": 0.0, "y": l}, {"x": 0.0, "y": 0.0}, {"x": 0.0, "y": 0.0},
                         jnp.array([lam]))
    np.testing.assert_allclose(np.concatenate([np.ravel(e) for e in el]), 0.0, atol=1e-13)
    f = dae.constraint_forces(0.0, {"x": 0.0, "y": l}, jnp.array([lam]))
    np.testing.assert_allclose([f["x"], f["y"]], [0.0, -m * g], atol=1e-13)


def test_rheonomic_constraint_and_explicit_time_dependence():
    # A bead on a rod turning at rate w: C = x sin(wt) − y cos(wt) = 0,
    # L = ½ m (x'² + y'²) + t·a·x (a time-dependent potential force a·t).
    m, w, a = 1.3, 2.0, 0.5

    def L(t, q, qd, p):
        return 0.5 * m * (qd["x"] ** 2 + qd["y"] ** 2) + t * a * q["x"]

    def C(t, q, p):
        return [q["x"] * jnp.sin(w * t) - q["y"] * jnp.cos(w * t)]

    dae = lagrangian(L, ["x", "y"], constraints=C)
    t, x, y, xd, yd, xdd, ydd, lam = _rand(8)
    got = dae.residual_at(t, [x, y], [xd, yd], [xdd, ydd], jnp.array([lam]))
    want = [m * xdd - t * a + lam * np.sin(w * t), m * ydd - lam * np.cos(w * t),
            x * np.sin(w * t) - y * np.cos(w * t)]
    np.testing.assert_allclose(np.concatenate([np.ravel(e) for e in got]), want, atol=1e-13)


def test_velocity_dependent_lagrangian_gets_the_time_derivative_by_jvp():
    # Charged particle in a uniform magnetic field B e_z with A = B/2 (−y, x, 0):
    # L = ½ m|v|² + e v·A gives m x'' = e B y', m y'' = −e B x'.
    m, e, B = 1.2, 0.7, 3.0

    def L(t, q, qd, p):
        x, y = q["r"][0], q["r"][1]
        vx, vy = qd["r"][0], qd["r"][1]
        return 0.5 * m * jnp.sum(qd["r"] ** 2) + e * 0.5 * B * (-y * vx + x * vy)

    dae = lagrangian(L, {"r": 2})
    q, qd, qdd = _rand(2), _rand(2), _rand(2)
    (got,) = dae.residual_at(0.0, q, qd, qdd)
    np.testing.assert_allclose(got, [m * qdd[0] - e * B * qd[1], m * qdd[1] + e * B * qd[0]],
                               atol=1e-13)


# ----------------------------------------------------------- mass matrices
def test_euler_angle_body_mass_matrix_is_the_textbook_one():
    m, I1, I2, I3 = 2.0, 1.0, 2.5, 4.0
    body = ex.rigid_body_euler(m=m, I1=I1, I2=I2, I3=I3)
    for _ in range(4):
        phi, th, psi = _rand(3, lo=-3, hi=3)
        q = {"x": _rand(3), "phi": phi, "theta": th, "psi": psi}
        qd = {"x": _rand(3), "phi": 0.3, "theta": -0.2, "psi": 0.5}
        M = np.asarray(body.mass_matrix(0.0, q, qd))
        s, c, sp, cp = np.sin(th), np.cos(th), np.sin(psi), np.cos(psi)
        # Goldstein (ZXZ Euler angles, principal moments I1, I2, I3).
        Mrot = np.array([
            [(I1 * sp**2 + I2 * cp**2) * s**2 + I3 * c**2, (I1 - I2) * s * sp * cp, I3 * c],
            [(I1 - I2) * s * sp * cp, I1 * cp**2 + I2 * sp**2, 0.0],
            [I3 * c, 0.0, I3],
        ])
        np.testing.assert_allclose(M[3:, 3:], Mrot, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(M[:3, :3], m * np.eye(3), atol=1e-14)
        np.testing.assert_allclose(M[:3, 3:], 0.0, atol=1e-14)


def test_angular_velocity_formulas_match_the_rotation_definition():
    # ω̂ = Rᵀ Ṙ by a jvp of the rotation; the explicit formulas used inside
    # the Lagrangians must agree.  Also the written-out ZYX rotation is the
    # product of its three elementary factors.
    for _ in range(3):
        a, ad = _rand(3, lo=-2, hi=2), _rand(3)
        w = ex.body_angular_velocity(ex.euler_zxz, a, ad)
        np.testing.assert_allclose(w, ex.omega_zxz(*a, *ad), atol=1e-13)
        w = ex.body_angular_velocity(ex.rotation_zyx, a, ad)
        np.testing.assert_allclose(w, ex.omega_zyx(*a, *ad), atol=1e-13)
        Rp = ex._rz(a[2]) @ ex._ry(a[1]) @ ex._rx(a[0])
        np.testing.assert_allclose(ex.rotation_zyx(*a), Rp, atol=1e-14)


def test_mass_blocks_are_found_structurally_and_declared_blocks_are_checked():
    two = ex.two_particles_spring()
    assert two.mass_blocks.block_diagonal and two.mass_blocks.block_sizes == [1]
    body = ex.rigid_body_euler()
    mb = body.mass_blocks
    # Euler angles couple; the translation is diagonal (declared, then checked).
    assert sorted(mb.block_sizes) == [1, 3]
    big = [g for g in mb.groups if g.shape[1] == 3][0]
    assert sorted(big.ravel().tolist()) == [3, 4, 5]

    def L(t, q, qd, p):  # couples the two components of one coordinate
        return 0.5 * (qd["q"][0] + 2 * qd["q"][1]) ** 2 + 0.5 * qd["q"][1] ** 2

    assert lagrangian(L, {"q": 2}).mass_blocks.block_sizes == [2]
    wrong = lagrangian(L, {"q": 2}, mass_blocks="diagonal")
    with pytest.raises(InputError, match="mass_blocks"):
        wrong.mass_blocks


def test_mass_blocks_are_read_element_by_element_not_by_whole_coordinates():
    def point_masses(t, q, qd, p):  # four point masses in one vector coordinate: M is diagonal
        return 0.5 * jnp.sum(jnp.array([1.0, 2.0, 3.0, 4.0]) * qd["r"] ** 2)

    mb = lagrangian(point_masses, {"r": 4}).mass_blocks
    assert mb.block_sizes == [1] and mb.groups[0].shape == (4, 1) and mb.source == "structural"

    def stacked(t, q, qd, p):  # two coordinates computed as one array; only a and b[1] couple
        v = jnp.concatenate([qd["a"], qd["b"]])
        return 0.5 * jnp.sum(v ** 2) + 0.5 * v[0] * v[2]

    dae = lagrangian(stacked, {"a": 1, "b": 2})
    assert sorted(sorted(r.tolist()) for g in dae.mass_blocks.groups for r in g) == [[0, 2], [1]]
    q, qd = _rand(3), _rand(3)
    dense = np.asarray(dae.mass_matrix(0.1, q, qd))
    np.testing.assert_allclose(dense, [[1.0, 0.0, 0.5], [0.0, 1.0, 0.0], [0.5, 0.0, 1.0]], atol=1e-14)
    np.testing.assert_allclose(dae.mass_blocks.assemble(dae.mass_matrix_blocks(0.1, q, qd)), dense, atol=1e-14)


def test_without_an_element_rule_the_mass_blocks_couple_whole_coordinates(monkeypatch):
    from solver.mechanics import lagrangian_blocks

    # As for a momentum holding a primitive the structural analysis has no rule for.
    monkeypatch.setattr(lagrangian_blocks, "_element_components", lambda *args: None)

    def L(t, q, qd, p):  # a and c couple; b's two components do not couple with anything
        return 0.5 * qd["a"][0] ** 2 + 0.5 * jnp.sum(qd["b"] ** 2) + qd["c"][0] * qd["a"][0]

    groups = lagrangian(L, {"a": 1, "b": 2, "c": 1}).mass_blocks.groups
    assert sorted(sorted(r.tolist()) for g in groups for r in g) == [[0, 3], [1, 2]]


def test_mass_matrix_blocks_equal_the_dense_mass_matrix():
    for dae, n in ((ex.rigid_body_euler(I1=1.0, I2=2.0, I3=3.5), 6), (ex.pendulum_chain(3), 9)):
        q, qd = _rand(n, lo=0.2, hi=1.0), _rand(n)
        dense = np.asarray(dae.mass_matrix(0.1, q, qd))
        blocks = dae.mass_matrix_blocks(0.1, q, qd)
        np.testing.assert_allclose(dae.mass_blocks.assemble(blocks), dense, atol=1e-12)
        for (i1, b1), (i2, b2) in zip(blocks, dae.mass_blocks.extract(dense)):
            np.testing.assert_array_equal(i1, i2)
            np.testing.assert_allclose(b1, b2, atol=1e-12)


# ----------------------------------------------------------- energies
def _cloth_energy_loops(r, rd, m, n, p, fixed):
    """T + V of the cloth by explicit loops over particles and springs."""
    def pos(i, j):
        if fixed == "edges" and (i in (0, m + 1) or j in (0, n + 1)):
            return np.array([i * p["dx"], j * p["dy"], 0.0])
        return r[i - 1, j - 1]

    T = 0.5 * p["M"] * np.sum(rd**2)
    V = p["M"] * p["g"] * np.sum(r[..., 2])
    lo, hi = (0, 1) if fixed == "edges" else (1, 0)
    for i in range(1, m + 1):
        for j in range(lo, n + hi):
            V += 0.5 * p["k"] * (np.linalg.norm(pos(i, j + 1) - pos(i, j)) - p["l"]) ** 2
    for i in range(lo, m + hi):
        for j in range(1, n + 1):
            V += 0.5 * p["k"] * (np.linalg.norm(pos(i + 1, j) - pos(i, j)) - p["l"]) ** 2
    return T + V


def test_energy_is_kinetic_plus_potential_for_natural_lagrangians():
    m, g, l = 1.5, 9.81, 1.0
    pend = ex.pendulum_cartesian(m=m, g=g, l=l)
    x, y, xd, yd = _rand(4)
    np.testing.assert_allclose(pend.energy(0.0, [x, y], [xd, yd]),
                               0.5 * m * (xd**2 + yd**2) - m * g * y, rtol=1e-13)

    m1, m2, k, l0 = 1.0, 3.0, 7.0, 0.9
    two = ex.two_particles_spring(m1=m1, m2=m2, k=k, l0=l0)
    q, qd = _rand(6), _rand(6)
    T = 0.5 * m1 * np.sum(qd[:3] ** 2) + 0.5 * m2 * np.sum(qd[3:] ** 2)
    V = 0.5 * k * (np.linalg.norm(q[3:] - q[:3]) - l0) ** 2
    np.testing.assert_allclose(two.energy(0.0, q, qd), T + V, rtol=1e-13)

    for fixed in ("edges", "corners"):
        mm, nn = 3, 4
        p = {"M": 0.8, "k": 50.0, "l": 0.9, "kd": 2.0, "g": 9.81, "dx": 1.0, "dy": 1.1}
        cl = ex.cloth(mm, nn, fixed=fixed, **p)
        r = ex.cloth_rest_positions(mm, nn, p["dx"], p["dy"]) + 0.1 * _rand(mm, nn, 3)
        rd = _rand(mm, nn, 3)
        np.testing.assert_allclose(cl.energy(0.0, r.ravel(), rd.ravel()),
                                   _cloth_energy_loops(r, rd, mm, nn, p, fixed), rtol=1e-12)

    # The energy function for the dataset is the same quantity, vmappable.
    car = ex.car()
    qs, qds = _rand(5, 6), _rand(5, 6)
    E = jax.vmap(lambda a, b: car.energy_fn(0.0, car._unflatten(a), car._unflatten(b),
                                            {k_: jnp.asarray(v) for k_, v in car.params.items()}))(qs, qds)
    np.testing.assert_allclose(E, [car.energy(0.0, a, b) for a, b in zip(qs, qds)], rtol=1e-13)


def test_car_energy_is_frame_kinetic_plus_spring_and_gravity_energy():
    car = ex.car(m=250.0, Ixx=50.0, Iyy=100.0, Izz=130.0, k=2.0e4, h0=0.4, a=1.1, b=0.6)
    p = car.params
    x, ang, xd, angd = _rand(3), _rand(3, lo=-0.3, hi=0.3), _rand(3), _rand(3)
    R = np.asarray(ex.rotation_zyx(*ang))
    w = np.asarray(ex.body_angular_velocity(ex.rotation_zyx, ang, angd))
    T = 0.5 * p["m"] * xd @ xd + 0.5 * (p["Ixx"] * w[0]**2 + p["Iyy"] * w[1]**2 + p["Izz"] * w[2]**2)
    V = p["m"] * p["g"] * x[2]
    for sx in (1.1, -1.1):
        for sy in (0.6, -0.6):
            z = (x + R @ np.array([sx, sy, 0.0]))[2]
            V += 0.5 * p["k"] * (z - p["h0"]) ** 2
    np.testing.assert_allclose(car.energy(0.0, np.r_[x, ang], np.r_[xd, angd]), T + V, rtol=1e-12)


def test_energy_rate_is_minus_twice_the_rayleigh_function_along_the_motion():
    # With R quadratic in q' and no forces, dE/dt = −q'·∂R/∂q' = −2R.  The
    # acceleration comes from M q'' = −bias (diagonal M: solve_kkt, no G).
    cl = ex.cloth(3, 3, kd=1.5)
    q = ex.cloth_rest_positions(3, 3).ravel() + 0.1 * _rand(27)
    qd = _rand(27)
    blocks = cl.mass_matrix_blocks(0.0, q, qd)
    qdd = solve_kkt(blocks, None, -cl.bias(0.0, q, qd))
    _, dE = jax.jvp(lambda a, b: cl.energy(0.0, a, b), (jnp.asarray(q), jnp.asarray(qd)),
                    (jnp.asarray(qd), qdd))
    rd = qd.reshape(3, 3, 3)
    R = 0.5 * 1.5 * (np.sum((rd[:, 1:] - rd[:, :-1]) ** 2) + np.sum((rd[1:] - rd[:-1]) ** 2))
    np.testing.assert_allclose(dE, -2 * R, rtol=1e-10)


# ----------------------------------------------------------- dissipation, forces
def test_dissipation_adds_dR_dqdot():
    kd = 2.5
    mm, nn = 3, 3
    damped, undamped = ex.cloth(mm, nn, kd=kd), ex.cloth(mm, nn, kd=0.0)
    q = ex.cloth_rest_positions(mm, nn).ravel() + 0.1 * _rand(3 * mm * nn)
    qd, qdd = _rand(3 * mm * nn), _rand(3 * mm * nn)
    diff = np.ravel(damped.residual_at(0, q, qd, qdd)[0]) - np.ravel(undamped.residual_at(0, q, qd, qdd)[0])
    rd = qd.reshape(mm, nn, 3)
    want = np.zeros((mm, nn, 3))
    # Each damped spring between moving neighbours a, b pushes a by kd (a' − b').
    for i in range(mm):
        for j in range(nn):
            for di, dj in ((1, 0), (0, 1)):
                if i + di < mm and j + dj < nn:
                    rel = rd[i, j] - rd[i + di, j + dj]
                    want[i, j] += kd * rel
                    want[i + di, j + dj] -= kd * rel
    np.testing.assert_allclose(diff, want.ravel(), atol=1e-12)


def test_point_force_on_a_pendulum_is_the_virtual_work_of_the_force():
    l, Fx, Fy = 1.3, 0.7, -2.0

    def L(t, q, qd, p):
        return 0.5 * l**2 * qd["theta"] ** 2

    bob = point_force(lambda t, q, p: l * jnp.stack([jnp.sin(q["theta"]), jnp.cos(q["theta"])]),
                      jnp.array([Fx, Fy]))
    dae = lagrangian(L, ["theta"], forces=[bob])
    th = 0.4
    (r,) = dae.residual_at(0.0, [th], [0.0], [0.0])
    np.testing.assert_allclose(r, -(l * np.cos(th) * Fx - l * np.sin(th) * Fy), rtol=1e-13)


def test_car_corner_forces_equal_jacobian_transpose_times_force():
    F = _rand(4, 3) * 100
    loaded, free = ex.car(forces=F), ex.car()
    q, qd = np.r_[_rand(3), _rand(3, lo=-0.4, hi=0.4)], _rand(6)
    z = np.zeros(6)
    Q = -(np.concatenate([np.ravel(e) for e in loaded.residual_at(0, q, qd, z)])
          - np.concatenate([np.ravel(e) for e in free.residual_at(0, q, qd, z)]))

    def corners(qv):
        R = np.asarray(ex.rotation_zyx(*qv[3:]))
        s = np.array([[1.2, 0.7, 0], [1.2, -0.7, 0], [-1.2, 0.7, 0], [-1.2, -0.7, 0]])
        return qv[:3] + s @ R.T

    h, want = 1e-6, np.zeros(6)
    R = np.asarray(ex.rotation_zyx(*q[3:]))
    for j in range(6):  # central differences for J = ∂(corner positions)/∂q
        e = np.zeros(6)
        e[j] = h
        J = (corners(q + e) - corners(q - e)) / (2 * h)
        want[j] = sum(J[i] @ (R @ F[i]) for i in range(4))
    np.testing.assert_allclose(Q, want, rtol=1e-7, atol=1e-6)


# ----------------------------------------------------------- KKT solves
def _spd(nb, b):
    A = RNG.standard_normal((nb, b, b))
    return A @ np.transpose(A, (0, 2, 1)) + b * np.eye(b)


def _dense(n, groups):
    M = np.zeros((n, n))
    for idx, B in groups:
        for row, blk in zip(idx, B):
            M[np.ix_(row, row)] = blk
    return M


@pytest.mark.parametrize("b,nb,nc", [(1, 12, 0), (1, 12, 3), (3, 5, 4), (2, 6, 1)])
def test_solve_kkt_contiguous_blocks_equals_dense_solve(b, nb, nc):
    n = b * nb
    B = _spd(nb, b)
    M = _dense(n, [(np.arange(n).reshape(nb, b), B)])
    G = RNG.standard_normal((nc, n))
    K = np.block([[M, G.T], [G, np.zeros((nc, nc))]]) if nc else M
    rhs = RNG.standard_normal(n + nc)
    np.testing.assert_allclose(solve_kkt(B, G if nc else None, rhs), np.linalg.solve(K, rhs),
                               rtol=1e-10, atol=1e-10)
    R2 = RNG.standard_normal((n + nc, 3))
    np.testing.assert_allclose(solve_kkt(B, G if nc else None, R2), np.linalg.solve(K, R2),
                               rtol=1e-10, atol=1e-10)


def test_solve_kkt_scattered_mixed_blocks_under_jit_and_vmap():
    n, nc = 11, 3
    perm = RNG.permutation(n)
    idx1, idx3 = perm[:5].reshape(5, 1), perm[5:].reshape(2, 3)
    blocks = [(idx1, _spd(5, 1)), (idx3, _spd(2, 3))]
    M = _dense(n, blocks)
    G = RNG.standard_normal((nc, n))
    K = np.block([[M, G.T], [G, np.zeros((nc, nc))]])
    rhs = RNG.standard_normal((4, n + nc))
    f = jax.jit(jax.vmap(lambda r: solve_kkt(blocks, G, r)))
    np.testing.assert_allclose(f(rhs), np.linalg.solve(K, rhs.T).T, rtol=1e-10, atol=1e-10)
    # Blocks themselves batched (one mass matrix per sweep point).
    Bs = jnp.stack([jnp.asarray(_spd(4, 1)) for _ in range(3)])
    Gs = RNG.standard_normal((3, 1, 4))
    rs = RNG.standard_normal((3, 5))
    got = jax.vmap(solve_kkt)(Bs, Gs, rs)
    for i in range(3):
        Mi = np.diag(np.asarray(Bs[i]).ravel())
        Ki = np.block([[Mi, Gs[i].T], [Gs[i], np.zeros((1, 1))]])
        np.testing.assert_allclose(got[i], np.linalg.solve(Ki, rs[i]), rtol=1e-10)


def test_solve_kkt_gives_the_pendulum_acceleration_and_multiplier():
    # Index-1 form of the constrained pendulum at rest at angle θ: the
    # acceleration is tangential with magnitude g sin θ, λ = m g cos θ/(2ℓ).
    m, g, l, th = 1.0, 9.81, 1.0, 0.3
    dae = ex.pendulum_cartesian(m=m, g=g, l=l)
    q, qd = [l * np.sin(th), l * np.cos(th)], [0.0, 0.0]
    G = dae.constraint_jacobian(0.0, q)
    # d²C/dt² = G q'' + (terms in q'² = 0 here) = 0
    rhs = jnp.concatenate([-dae.bias(0.0, q, qd), jnp.zeros(1)])
    sol = solve_kkt(dae.mass_matrix_blocks(0.0, q, qd), G, rhs)
    np.testing.assert_allclose(sol[:2], g * np.sin(th) * np.array([-np.cos(th), np.sin(th)]), atol=1e-13)
    np.testing.assert_allclose(sol[2], m * g * np.cos(th) / (2 * l), rtol=1e-13)


def test_solve_kkt_rejects_inconsistent_shapes():
    with pytest.raises(InputError, match="rhs has 5 rows"):
        solve_kkt(np.ones((4, 1, 1)), np.ones((2, 4)), np.ones(5))


# ----------------------------------------------------------- cloth scale
def test_cloth_residual_is_vectorised():
    small = ex.cloth(5, 5)
    t0 = time.perf_counter()
    big = ex.cloth(30, 30)
    build = time.perf_counter() - t0
    assert build < 5.0, f"30x30 cloth took {build:.1f} s to trace"
    # The traced program does not grow with the grid.
    assert len(big.jaxpr.jaxpr.eqns) == len(small.jaxpr.jaxpr.eqns)
    assert big.n == 3 * 30 * 30 and big.n_c == 0
    mb = big.mass_blocks
    assert mb.block_sizes == [1] and mb.groups[0].shape == (2700, 1)
    corners = ex.cloth(4, 5, fixed="corners")
    assert corners.n_c == 12 and corners.multiplier == "lam"


# ----------------------------------------------------------- bad input
def test_bad_definitions_raise_input_errors_that_name_the_fix():
    def L(t, q, qd, p):
        return 0.5 * qd["x"] ** 2

    with pytest.raises(InputError, match="multiplier"):
        lagrangian(lambda t, q, qd, p: 0.5 * qd["lam"] ** 2, ["lam"],
                   constraints=lambda t, q, p: [q["lam"]])
    with pytest.raises(InputError, match="unknown coordinate 'y'"):
        lagrangian(L, ["x"], forces=lambda t, q, qd, p: {"y": 1.0})
    with pytest.raises(InputError, match="scalar"):
        lagrangian(lambda t, q, qd, p: qd["x"] * jnp.ones(2), ["x"])
    with pytest.raises(InputError, match="dividing"):
        lagrangian(lambda t, q, qd, p: jnp.sum(qd["x"] ** 2), {"x": 3},
                   mass_blocks={"x": 2}).mass_blocks
    with pytest.raises(InputError, match="coordinates"):
        lagrangian(L, ["x", "x"])
    with pytest.raises(InputError, match="forces must be"):
        lagrangian(L, ["x"], forces=3)


def test_solver_lagrangian_is_callable_from_the_package():
    dae = solver.lagrangian(lambda t, q, qd, p: 0.5 * qd["x"] ** 2 - 0.5 * q["x"] ** 2, ["x"])
    assert isinstance(dae, LagrangianDAE)
    (r,) = dae.residual_at(0.0, [0.5], [0.0], [2.0])
    np.testing.assert_allclose(r, 2.5)
    # with_params keeps the class (and its inspection methods).
    p = ex.pendulum_angle().with_params(l=2.0)
    assert isinstance(p, LagrangianDAE) and float(p.params["l"]) == 2.0


# ----------------------------------------------------------- natural coordinates
from scipy.spatial.transform import Rotation  # noqa: E402

from solver.mechanics import natural  # noqa: E402


def test_rod_kinetic_energy_is_the_integral_over_the_rod():
    m = 2.3
    Yd, Zd = _rand(3), _rand(3)
    s, w = np.polynomial.legendre.leggauss(6)
    s, w = 0.5 * (s + 1), 0.5 * w  # Gauss–Legendre on [0, 1]
    T = sum(wi * 0.5 * m * np.sum(((1 - si) * Yd + si * Zd) ** 2) for si, wi in zip(s, w))
    np.testing.assert_allclose(natural.rod_kinetic_energy(m, Yd, Zd), T, rtol=1e-13)


def _moving(Q0, omega, O, v, X, kind):
    """World position and velocity of a local point/vector under X_t = O + Q X."""
    if kind == "point":
        return O + Q0 @ X, v + np.cross(omega, Q0 @ X)
    return Q0 @ X, np.cross(omega, Q0 @ X)


@pytest.mark.parametrize("kinds", [("point", "point", "point"), ("point", "vector", "point"),
                                   ("point", "point", "vector")])
def test_rigid_body_kinetic_energy_in_3d_matches_translation_plus_rotation(kinds):
    local = _rand(3, 3, lo=-2, hi=2)
    mass, centroid = 3.1, _rand(3)
    S = RNG.standard_normal((3, 3))
    S = S @ S.T  # a central second moment; the inertia tensor follows from it
    I = np.trace(S) * np.eye(3) - S
    body = natural.RigidBody(natural.RigidFrame(local, kinds), mass, centroid, I)
    Q0 = Rotation.random(random_state=7).as_matrix()
    omega, O, v = _rand(3), _rand(3), _rand(3)
    moved = [_moving(Q0, omega, O, v, local[i], kinds[i]) for i in range(3)]
    pos, vel = [m_[0] for m_ in moved], [m_[1] for m_ in moved]
    vc = v + np.cross(omega, Q0 @ centroid)
    T = 0.5 * mass * vc @ vc + 0.5 * omega @ (Q0 @ I @ Q0.T) @ omega
    np.testing.assert_allclose(body.kinetic_energy(pos, vel), T, rtol=1e-11)
    # The frame rule recovers the motion of any body point, and the BPVs
    # satisfy their rigidity constraints.
    X = _rand(3)
    np.testing.assert_allclose(body.frame.world_point(pos, X), O + Q0 @ X, atol=1e-12)
    np.testing.assert_allclose(body.centroid_position(pos), O + Q0 @ centroid, atol=1e-12)
    np.testing.assert_allclose(body.frame.rigidity_constraints(pos), 0.0, atol=1e-12)
    Qt = np.asarray(body.frame.rotation(pos))
    np.testing.assert_allclose(Qt.T @ Qt, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(Qt), 1.0, atol=1e-12)


def test_rigid_body_kinetic_energy_in_2d_and_the_talks_mechanism0_rod():
    # Talk: rod OA, Geom [[L, 0]], Dyna [[L/2, 0], M, M L²/12], O fixed.
    L, M, th, thd = 1.4, 2.0, 0.7, -1.9
    rod = natural.RigidBody.from_dyna([[L, 0.0]], [[L / 2, 0.0], M, M * L**2 / 12])
    A, Ad = np.zeros(2), np.zeros(2)
    B = L * np.array([np.cos(th), np.sin(th)])
    Bd = L * thd * np.array([-np.sin(th), np.cos(th)])
    np.testing.assert_allclose(rod.kinetic_energy([A, B], [Ad, Bd]),
                               0.5 * (M * L**2 / 3) * thd**2, rtol=1e-13)
    # A general planar motion, B a vector: ½ m |v_c|² + ½ I_c θ'².
    local = np.array([[0.3, -0.2], [0.5, 0.9]])
    body = natural.RigidBody(natural.RigidFrame(local, ("point", "vector")), 1.7, [0.4, 0.1], 0.35)
    ang, angd, O, v = 0.9, 1.3, _rand(2), _rand(2)
    Q0 = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    pos = [O + Q0 @ local[0], Q0 @ local[1]]
    vel = [v + angd * J @ Q0 @ local[0], angd * J @ Q0 @ local[1]]
    vc = v + angd * J @ Q0 @ np.array([0.4, 0.1])
    np.testing.assert_allclose(body.kinetic_energy(pos, vel), 0.5 * 1.7 * vc @ vc + 0.5 * 0.35 * angd**2,
                               rtol=1e-12)


def test_natural_coordinate_rod_in_a_lagrangian_has_the_rod_mass_matrix():
    # Rod OA pivoted at O, tracked by A only: rigid-body and thin-rod kinetic
    # energies must give the same M = (M/3) I, whatever A is.
    L, M = 1.2, 3.0
    rod = natural.RigidBody.from_dyna([[L, 0.0]], [[L / 2, 0.0], M, M * L**2 / 12])
    zero = jnp.zeros(2)
    a = lagrangian(lambda t, q, qd, p: rod.kinetic_energy([zero, q["A"]], [zero, qd["A"]]),
                   {"A": 2}, constraints=lambda t, q, p: rod.frame.rigidity_constraints([zero, q["A"]]))
    b = lagrangian(lambda t, q, qd, p: natural.rod_kinetic_energy(M, zero, qd["A"]), {"A": 2})
    q, qd = _rand(2), _rand(2)
    np.testing.assert_allclose(a.mass_matrix(0, q, qd), M / 3 * np.eye(2), atol=1e-13)
    np.testing.assert_allclose(b.mass_matrix(0, q, qd), M / 3 * np.eye(2), atol=1e-13)
    np.testing.assert_allclose(a.constraints_at(0, q), [q @ q - L**2], atol=1e-13)


def test_natural_coordinate_input_errors():
    with pytest.raises(InputError, match="triangle"):
        natural.second_moment(1.0, np.zeros(3), [1.0, 1.0, 3.0])
    with pytest.raises(InputError, match="collinear"):
        natural.RigidFrame([[0, 0, 0], [1, 0, 0], [2, 0, 0]])
    with pytest.raises(InputError, match="must be a point"):
        natural.RigidFrame([[0, 0], [1, 0]], ("vector", "point"))


# ----------------------------------------------------------- the KKT structure as data
def test_kkt_blocks_hand_the_integrator_the_mass_blocks_and_constraints_as_data():
    m, l = 1.7, 0.8
    dae = ex.pendulum_cartesian(m=m, l=l)
    kkt = dae.kkt_blocks()
    assert (kkt.coords, kkt.n_q, kkt.n_c) == (("x", "y"), 2, 1)
    assert kkt.mass_structure is dae.mass_blocks and kkt.mass_structure.block_sizes == [1]
    q, qd = {"x": jnp.asarray(0.3), "y": jnp.asarray(0.5)}, {"x": jnp.asarray(-0.2), "y": jnp.asarray(0.4)}
    p = {k: jnp.asarray(v) for k, v in dae.params.items()}
    blocks = kkt.mass_blocks(0.0, q, qd, p)
    np.testing.assert_allclose(dae.mass_blocks.assemble(blocks), m * np.eye(2), rtol=1e-14)
    np.testing.assert_allclose(kkt.constraint_jacobian(0.0, q, p), [[0.6, 1.0]], rtol=1e-14)
    np.testing.assert_allclose(kkt.constraints(0.0, kkt.flatten(q), p), [0.3**2 + 0.5**2 - l**2], rtol=1e-14)
    np.testing.assert_array_equal(kkt.flatten(kkt.unflatten(jnp.asarray([1.0, 2.0]))), [1.0, 2.0])
    free = lagrangian(lambda t, q, qd, p: 0.5 * jnp.sum(qd["r"] ** 2), {"r": 3})
    assert free.kkt_blocks().n_c == 0 and free.kkt_blocks().constraints is None


# ----------------------------------------------------------- integrator's choice
def test_integrator_linear_choice_and_its_errors():
    from solver.integrate.integrator import Integrator
    from solver.taylor.program import TaylorProgram

    def integ(dae, linear="auto"):
        s = dae.structure
        return Integrator(TaylorProgram(dae, s.c, s.d, 8), linear=linear)

    assert integ(ex.cloth(4, 4)).linear == "kkt"            # 48 ODEs, diagonal M
    assert integ(ex.pendulum_cartesian()).linear == "dense"  # 3 unknowns
    assert integ(ex.pendulum_cartesian(), "kkt").linear == "kkt"
    plain = solver.DAE(lambda t, v, p: [v["x"][1] + v["x"][0]], ["x"])
    with pytest.raises(InputError) as err:
        integ(plain, "kkt")
    assert str(err.value) == ("linear='kkt' needs a Lagrangian DAE with the system Jacobian "
                              "[[M, Gᵀ], [G, 0]]: this DAE was not built by solver.lagrangian; "
                              "use linear='dense'")
    with pytest.raises(InputError) as err:
        integ(plain, "sparse")
    assert str(err.value) == "linear must be one of auto, dense, kkt; got 'sparse'"
