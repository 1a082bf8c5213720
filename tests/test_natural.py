"""Natural-coordinate kinematics and energies (solver/mechanics/natural.py) against references.

The references are computed here with numpy, independently of the module:
a rigid body is a cloud of point masses moved by a known rotation and
angular velocity, so its kinetic energy is Σ ½ mₖ |vₖ|² and also
½ m |v_c|² + ½ ωᵀ I ω with I from the cloud; a thin rod's energy is the
integral along it (scipy's quad).
"""

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.spatial.transform import Rotation

import jax
import jax.numpy as jnp

from solver.mechanics import natural
from solver.errors import InputError

RNG = np.random.default_rng(20240611)


def _cloud(d, k=7):
    """Point masses (k, d) and masses (k,): mass, centroid, central inertia, Θ about 0."""
    r = RNG.uniform(-1.5, 1.5, (k, d))
    m = RNG.uniform(0.2, 2.0, k)
    M = m.sum()
    c = (m[:, None] * r).sum(0) / M
    s = r - c
    if d == 2:
        I = float(np.sum(m * np.sum(s * s, axis=1)))           # polar moment about c
    else:
        I = sum(mk * (sk @ sk * np.eye(3) - np.outer(sk, sk)) for mk, sk in zip(m, s))
    Theta = sum(mk * np.outer(rk, rk) for mk, rk in zip(m, r))  # ∫ X Xᵀ dm about 0
    return r, m, M, c, I, Theta


def _rot2(a):
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


J2 = np.array([[0.0, -1.0], [1.0, 0.0]])  # ω × in the plane


# ------------------------------------------------------------------ kinetic energies
@pytest.mark.parametrize("kinds", [("point", "point", "point"), ("point", "vector", "point"),
                                   ("point", "point", "vector")])
def test_3d_rigid_body_energy_equals_the_sum_over_its_particles(kinds):
    r, m, M, c, I, _ = _cloud(3)
    local = RNG.uniform(-2, 2, (3, 3))                # basic points/vectors, local frame
    body = natural.RigidBody(natural.RigidFrame(local, kinds), M, c, I)
    for seed in range(3):
        Rot = Rotation.random(random_state=seed).as_matrix()
        p, vp, w = RNG.normal(size=3), RNG.normal(size=3), RNG.normal(size=3)
        # Body point X (local) is at p + Rot X with velocity vp + ω × (Rot X);
        # a body vector u is Rot u with rate ω × (Rot u).
        pos = [p + Rot @ local[i] if kinds[i] == "point" else Rot @ local[i] for i in range(3)]
        vel = [(vp if kinds[i] == "point" else 0.0) + np.cross(w, Rot @ local[i])
               for i in range(3)]
        v = vp + np.cross(w, r @ Rot.T)                  # particle velocities (k, 3)
        T_particles = 0.5 * np.sum(m * np.sum(v * v, axis=1))
        v_c = vp + np.cross(w, Rot @ c)
        T_koenig = 0.5 * M * v_c @ v_c + 0.5 * w @ (Rot @ I @ Rot.T) @ w
        assert T_koenig == pytest.approx(T_particles, rel=1e-12)  # the reference is consistent
        T = float(body.kinetic_energy(pos, vel))
        assert T == pytest.approx(T_particles, rel=1e-11)
        np.testing.assert_allclose(body.centroid_position(pos), p + Rot @ c, atol=1e-12)


def test_2d_rigid_body_energy_equals_the_sum_over_its_particles():
    r, m, M, c, I, _ = _cloud(2)
    local = np.array([[0.3, -0.4], [1.1, 0.5]])
    body = natural.RigidBody(natural.RigidFrame(local), M, c, I)
    for _ in range(3):
        ang, w = RNG.uniform(-np.pi, np.pi), RNG.normal()
        p, vp = RNG.normal(size=2), RNG.normal(size=2)
        Rot = _rot2(ang)
        pos = [p + Rot @ X for X in local]
        vel = [vp + w * J2 @ Rot @ X for X in local]
        v = vp + w * (r @ Rot.T) @ J2.T
        T_particles = 0.5 * np.sum(m * np.sum(v * v, axis=1))
        v_c = vp + w * J2 @ Rot @ c
        assert 0.5 * M * v_c @ v_c + 0.5 * I * w**2 == pytest.approx(T_particles, rel=1e-12)
        assert float(body.kinetic_energy(pos, vel)) == pytest.approx(T_particles, rel=1e-11)


def test_thin_rod_energy_is_the_integral_along_the_rod():
    for d in (2, 3):
        m, Yd, Zd = RNG.uniform(0.5, 3.0), RNG.normal(size=d), RNG.normal(size=d)
        # ½ ∫₀¹ m |(1 − s) Ẏ + s Ż|² ds: uniform mass, velocity linear along the rod.
        # (Gauss–Kronrod is exact for this quadratic: the first estimate is final.)
        T_ref, _ = quad(lambda s: 0.5 * m * np.sum(((1 - s) * Yd + s * Zd) ** 2), 0.0, 1.0)
        T = float(natural.rod_kinetic_energy(m, Yd, Zd))
        assert T == pytest.approx(T_ref, rel=1e-13)
        assert T == pytest.approx(m / 6 * (Yd @ Yd + Yd @ Zd + Zd @ Zd), rel=1e-14)
    # Batched over leading axes, like the particle energy.
    Yd, Zd = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))
    np.testing.assert_allclose(natural.rod_kinetic_energy(2.0, Yd, Zd),
                               [float(natural.rod_kinetic_energy(2.0, a, b)) for a, b in zip(Yd, Zd)],
                               rtol=1e-14)
    np.testing.assert_allclose(natural.particle_kinetic_energy(2.0, Yd), np.sum(Yd * Yd, 1),
                               rtol=1e-14)


def test_a_rod_pivoted_at_one_end_as_a_rigid_body_is_a_compound_pendulum():
    # Talk's Mechanism0 rod: Geom [[L, 0]], Dyna [[L/2, 0], M, M L²/12], O fixed.
    L, M, th, thd = 1.3, 2.2, 0.4, 1.7
    rod = natural.RigidBody.from_dyna([[L, 0.0]], [[L / 2, 0.0], M, M * L**2 / 12])
    A = L * np.array([np.cos(th), np.sin(th)])
    Ad = L * thd * np.array([-np.sin(th), np.cos(th)])
    T = float(rod.kinetic_energy([np.zeros(2), A], [np.zeros(2), Ad]))
    assert T == pytest.approx(0.5 * (M * L**2 / 3) * thd**2, rel=1e-13)
    # … and equals the thin-rod energy with one end at rest.
    assert T == pytest.approx(float(natural.rod_kinetic_energy(M, np.zeros(2), Ad)), rel=1e-13)


# ------------------------------------------------------------------ mass properties
@pytest.mark.parametrize("d", [2, 3])
def test_second_moment_is_the_sum_over_the_particles(d):
    r, m, M, c, I, Theta = _cloud(d)
    got = np.asarray(natural.second_moment(M, c, I))
    if d == 3:
        np.testing.assert_allclose(got, Theta, rtol=1e-12, atol=1e-12)
        # Principal moments: the same body in its principal axes.
        lam, P = np.linalg.eigh(I)
        np.testing.assert_allclose(np.asarray(natural.second_moment(M, P.T @ c, lam)),
                                   P.T @ Theta @ P, rtol=1e-12, atol=1e-12)
    else:
        # In 2-D only the trace enters T (tr(Q̇ Θ Q̇ᵀ) = ω² tr Θ).
        assert np.trace(got) == pytest.approx(np.trace(Theta), rel=1e-12)
    # About another point o: Σ m (r − o)(r − o)ᵀ.
    o = RNG.normal(size=d)
    ref = sum(mk * np.outer(rk - o, rk - o) for mk, rk in zip(m, r))
    got_o = np.asarray(natural.second_moment(M, c, I, origin=o))
    if d == 3:
        np.testing.assert_allclose(got_o, ref, rtol=1e-12, atol=1e-12)
    else:
        assert np.trace(got_o) == pytest.approx(np.trace(ref), rel=1e-12)


def test_canonical_mass_properties_follow_the_frame_rule():
    r, m, M, c, I, _ = _cloud(3)
    local = RNG.uniform(-2, 2, (3, 3))
    frame = natural.RigidFrame(local)
    E = frame.E
    np.testing.assert_allclose(E.T @ E, np.eye(3), atol=1e-14)
    assert np.linalg.det(E) == pytest.approx(1.0)
    # Frame rule: A at the origin, B on +x, C in the upper xy half-plane.
    B_K, C_K = frame.canonical_point(local[1]), frame.canonical_point(local[2])
    np.testing.assert_allclose(B_K[1:], 0.0, atol=1e-13)
    assert B_K[0] > 0 and abs(C_K[2]) < 1e-13 and C_K[1] > 0
    # Canonical Θ about A = Σ m X_K X_Kᵀ of the particles in canonical coordinates.
    X_K = (r - local[0]) @ E
    c_K, Theta_K = natural.canonical_mass_properties(E, M, c, I, origin=local[0])
    np.testing.assert_allclose(c_K, (m[:, None] * X_K).sum(0) / M, atol=1e-13)
    np.testing.assert_allclose(Theta_K, sum(mk * np.outer(x, x) for mk, x in zip(m, X_K)),
                               rtol=1e-12, atol=1e-12)


def test_the_functions_accept_traced_geometry():
    # As solver.mechanics.mechanism uses them: geometry and mass are traced parameters.
    r, m, M, c, I, _ = _cloud(3)
    local = RNG.uniform(-2, 2, (3, 3))
    local -= local[0]                                  # A at the local origin
    body = natural.RigidBody(natural.RigidFrame(local), M, c, I)
    Rot = Rotation.random(random_state=11).as_matrix()
    p, vp, w = RNG.normal(size=3), RNG.normal(size=3), RNG.normal(size=3)
    pos = [p + Rot @ X for X in local]
    vel = [vp + np.cross(w, Rot @ X) for X in local]

    @jax.jit
    def energy(geom, mass, centroid, inertia):
        E, R = natural.frame_rule(geom)
        c_K, Theta_K = natural.canonical_mass_properties(E, mass, centroid, inertia, check=False)
        vecs = [jnp.asarray(pos[k] - pos[0]) for k in (1, 2)]
        rates = [jnp.asarray(vel[k] - vel[0]) for k in (1, 2)]
        Qd = natural.columns(natural.frame_axes_rate(vecs, rates, R))
        return natural.rigid_kinetic_energy(mass, c_K, Theta_K, jnp.asarray(vel[0]), Qd)

    T = float(energy(jnp.asarray(local[1:]), M, jnp.asarray(c), jnp.asarray(I)))
    assert T == pytest.approx(float(body.kinetic_energy(pos, vel)), rel=1e-12)
    # Differentiable in the geometry (a sweep over a length).
    g = jax.grad(energy)(jnp.asarray(local[1:]), M, jnp.asarray(c), jnp.asarray(I))
    assert np.all(np.isfinite(np.asarray(g)))


@pytest.mark.parametrize("dim", [2, 3])
def test_numeric_geometry_is_measured_in_numpy_as_traced_geometry_is_in_jax(dim):
    # A model's bodies are measured when it is read: numbers in, numpy out
    # (no jax dispatch), equal to the traced computation the residual makes.
    local = RNG.uniform(-2, 2, (dim - 1, dim))
    mass, centroid = 2.5, RNG.uniform(-1, 1, dim)
    inertia = 0.7 if dim == 2 else np.array([1.0, 2.0, 2.5])
    E, R = natural.frame_rule(local)
    c_K, Theta_K = natural.canonical_mass_properties(E, mass, centroid, inertia, origin=np.zeros(dim))
    assert not any(isinstance(a, jax.Array) for a in (E, *R, c_K, Theta_K))

    @jax.jit
    def traced(geom, m, c, i):
        E, R = natural.frame_rule(geom)
        return (E, *R, *natural.canonical_mass_properties(E, m, c, i, origin=jnp.zeros(dim), check=False))

    for ours, theirs in zip((E, *R, c_K, Theta_K), traced(local, mass, centroid, inertia)):
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-13, atol=1e-14)


# ------------------------------------------------------------------ kinematics
def test_rotation_rate_is_the_time_derivative_of_the_rotation():
    local = RNG.uniform(-2, 2, (3, 3))
    frame = natural.RigidFrame(local, ("point", "point", "vector"))
    w, vp = RNG.normal(size=3), RNG.normal(size=3)
    Rot0 = Rotation.random(random_state=3).as_matrix()

    def bpvs(t):
        Rot = Rotation.from_rotvec(t * w).as_matrix() @ Rot0
        p = t * vp
        return [p + Rot @ local[0], p + Rot @ local[1], Rot @ local[2]], Rot

    (pos, Rot), h = bpvs(0.0), 1e-5
    vel = [vp + np.cross(w, Rot @ local[0]), vp + np.cross(w, Rot @ local[1]),
           np.cross(w, Rot @ local[2])]
    Q = np.asarray(frame.rotation(pos))
    np.testing.assert_allclose(Q.T @ Q, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(Q, Rot @ frame.E, atol=1e-12)   # W = Q Eᵀ is the body rotation
    fd = (np.asarray(frame.rotation(bpvs(h)[0])) - np.asarray(frame.rotation(bpvs(-h)[0]))) / (2 * h)
    np.testing.assert_allclose(frame.rotation_rate(pos, vel), fd, atol=1e-8)
    # A body point given in the local frame, and the rigidity constraints.
    X = RNG.normal(size=3)
    np.testing.assert_allclose(frame.world_point(pos, X), Rot @ X, atol=1e-12)  # A at p = 0
    np.testing.assert_allclose(frame.rigidity_constraints(pos), 0.0, atol=1e-12)
    bent = [pos[0], pos[1] + 0.1, pos[2]]
    assert np.max(np.abs(np.asarray(frame.rigidity_constraints(bent)))) > 1e-3


def test_rigidity_constraints_count_and_body_points():
    # 2-D: 1 constraint (4 − 1 = 3 DOF); 3-D: 3 (9 − 3 = 6 DOF).
    assert len(natural.rigidity_constraints([jnp.ones(2)], [np.ones(2)])) == 1
    assert len(natural.rigidity_constraints([jnp.ones(3), jnp.arange(3.0)],
                                            [np.ones(3), np.arange(3.0)])) == 3
    # body_point is A + Q x with Q's columns the axes.
    axes = [jnp.asarray(v) for v in Rotation.random(random_state=5).as_matrix().T]
    A, x = RNG.normal(size=3), RNG.normal(size=3)
    np.testing.assert_allclose(natural.body_point(A, axes, x),
                               A + np.asarray(natural.columns(axes)) @ x, atol=1e-14)


# ------------------------------------------------------------------ input errors
@pytest.mark.parametrize("centroid,inertia", [
    (np.zeros(3), [1.0, 1.0, 3.0]),                    # I3 > I1 + I2
    (np.zeros(3), np.diag([1.0, 5.0, 1.0])),
    (np.zeros(2), -1.0),                               # negative polar moment
])
def test_bad_inertia_is_rejected_with_its_message(centroid, inertia):
    with pytest.raises(InputError) as err:
        natural.second_moment(1.0, centroid, inertia)
    assert str(err.value) == "the inertia violates the triangle inequality (no mass distribution has it)"
    with pytest.raises(InputError) as err:
        natural.RigidBody.from_dyna(np.eye(len(centroid))[:len(centroid) - 1] + 0.5,
                                    [centroid, 1.0, inertia])
    assert "triangle inequality" in str(err.value)


def test_a_realisable_inertia_on_the_boundary_is_accepted():
    # A flat plate: I3 = I1 + I2 exactly (the triangle inequality's boundary).
    Theta = np.asarray(natural.second_moment(2.0, np.zeros(3), [1.0, 2.0, 3.0]))
    np.testing.assert_allclose(Theta, np.diag([2.0, 1.0, 0.0]))


def test_shape_mass_and_frame_errors():
    cases = [
        (lambda: natural.second_moment(1.0, np.zeros(2), [1.0, 2.0]),
         "in 2-D the inertia is the scalar polar moment, got shape (2,)"),
        (lambda: natural.second_moment(1.0, np.zeros(3), np.eye(2)),
         "in 3-D the inertia is a 3x3 tensor or 3 principal moments, got shape (2, 2)"),
        (lambda: natural.second_moment(1.0, np.zeros(4), 1.0),
         "centroid must have 2 or 3 components, got shape (4,)"),
        (lambda: natural.RigidBody.from_dyna([[1.0, 0.0]], [[0.5, 0.0], 0.0, 0.1]),
         "a rigid body's mass must be positive, got 0.0"),
        (lambda: natural.RigidBody.from_dyna([[1.0, 0.0]], [[0.5, 0.0], 1.0]),
         "Dyna must be [centroid, mass, inertia], got 2 entries"),
        (lambda: natural.RigidFrame([[0, 0, 0], [1, 0, 0], [2, 0, 0]]),
         "C is collinear with A and B: the BPVs are not in general position"),
        (lambda: natural.RigidFrame([[1, 1], [1, 1]]),
         "B coincides with A (or is a zero vector): no frame"),
        (lambda: natural.RigidFrame([[0, 0], [1, 0]], ("vector", "point")),
         "the first basic item A must be a point (it is the frame origin)"),
        (lambda: natural.RigidFrame([[0, 0], [1, 0], [0, 1]]),
         "a rigid frame needs d basic points/vectors of d coordinates (d = 2: A, B; "
         "d = 3: A, B, C), got an array of shape (3, 2)"),
    ]
    for call, message in cases:
        with pytest.raises(InputError) as err:
            call()
        assert str(err.value) == message
