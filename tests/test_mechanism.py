"""Kind: Mechanism (the talk's parts format): assembly, physics and messages.

References nobody here wrote: the talk's own Mechanism0 file (loaded
verbatim) and its energy, the same system written by hand as a Lagrangian
model, the closed-form rigid-body kinetic energy ½ m|v_c|² + ½ ωᵀIω, the
physical pendulum θ'' = −(M g d / I_O) sin θ integrated by scipy, and free
fall.  Each integrated model compiles once (tens of seconds); the spans are
short.  3-D rigid bodies are checked through their energies and constraints
at exact rigid motions, without integrating (their residual is the largest
and its integrator compiles for minutes).
"""

from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.spatial.transform import Rotation

import jax.numpy as jnp

import solver
from solver.errors import InputError

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"
MECHANISM0 = CONFIGS / "mechanism0.yaml"
G = 9.81

PENDULUM3D = """\
Title: Rod pendulum on a spherical joint, with a spring and a particle hanging from it
Dimension: 3
PhysicalParams: {L: 1.0, m1: 2.0, k: 40, l: 0.5, mu: 0.1, m: 0.3, th0: 0.8, w0: 0.5}
PartData:
  Fixed: {O: [0, 0, 0]}
  Rods:
    OP: [m1, L]
  Springs:
    PR: [k, l, mu]
  Particles:
    R: m
AppliedForces:
  Gravity:
ProblemData:
  tend: 1
  positions: {P: [L*sin(th0), 0, -L*cos(th0)], R: [0.5, 1.0, -1.5]}
  fixedpositions: {P, R}
  velocities: {P: [L*w0*cos(th0), 0, L*w0*sin(th0)], R: [0.2, 0, 0.1]}
  samples: 51
SolverParams:
  Integration: {tol: 1e-11}
"""


@pytest.fixture(scope="module")
def mech0():
    return solver.load(MECHANISM0)


@pytest.fixture(scope="module")
def mech0_run(mech0):
    return mech0.solve(t_span=(0.0, 1.0), t_eval=np.linspace(0.0, 1.0, 51))


@pytest.fixture(scope="module")
def pendulum3d(tmp_path_factory):
    path = tmp_path_factory.mktemp("pendulum3d") / "pendulum3d.yaml"
    path.write_text(PENDULUM3D)
    return solver.load(path)


# ------------------------------------------------------------------ Mechanism0
def test_mechanism0_loads_verbatim_with_the_talks_meaning(mech0):
    assert mech0.kind == "Mechanism" and mech0.title == "Mechanism0"
    assert mech0.params == {"L": 1.0, "M": 1.0, "k": 500.0, "l": 1.0, "mu": 0.5, "m": 2.0}
    # O is fixed (not a coordinate); A and B move in the plane; OA is the rod.
    assert mech0.points == ["A", "B"] and mech0.fixed_points == ["O"]
    assert [v.name for v in mech0.dae.variables] == ["A", "B", "lam"]
    assert mech0.links == [("O", "A"), ("A", "B")]
    # fixedpositions {Ax, B}; velocities {Ay: 10, B: [0, 0]} are fixed DOF values.
    assert mech0.fixed == ["A[0]", "B", "A[1]'", "B'"]
    iv = mech0.initial_values()
    np.testing.assert_array_equal(iv["A"], [1.0, 0.0])
    np.testing.assert_array_equal(iv["B"], [2.0, 0.0])
    np.testing.assert_array_equal(iv["B'"], [0.0, 0.0])
    assert iv["A[1]'"] == 10.0 and "A'" not in iv and "A[0]'" not in iv
    # Guesses follow the parameters: B = [(L+1), 0].
    np.testing.assert_array_equal(mech0.initial_values({"L": 1.5})["B"], [2.5, 0.0])
    assert (mech0.t0, mech0.tend, mech0.tol, mech0.order) == (0.0, 20.0, 1e-12, 20)
    assert mech0.animation["view"] == [0.0, 90.0]


def test_mechanism0_structure_is_an_index_3_dae_with_3_positional_dof(mech0):
    s = mech0.dae.structure
    # 4 coordinates (A, B), one rigidity constraint |A - O|² = L²: the state
    # holds 3 positions and 3 velocities.
    assert s.index == 3 and s.dof == 6
    assert list(s.c) == [0, 0, 0, 0, 2] and list(s.d) == [2, 2, 2, 2, 0]


def test_mechanism0_conserves_its_energy_and_stays_on_the_constraint(mech0_run):
    ds = mech0_run
    assert int(ds.status) == 0
    np.testing.assert_allclose(ds.A.values[0], [1.0, 0.0], atol=1e-14)
    np.testing.assert_allclose(ds.A_d1.values[0], [0.0, 10.0], atol=1e-12)
    # Released with the spring at rest length along y = 0, the energy is all
    # kinetic: the rod about O, ½(M L²/3)(|A'|/L)², plus the spring, whose
    # mass mu moves with A at one end and B at rest: mu/6 |A'|².
    e0 = 0.5 * (1.0 / 3.0) * 100.0 + 0.5 / 6.0 * 100.0
    assert abs(ds.energy.values[0] - e0) < 1e-12
    assert np.max(np.abs(ds.energy.values - e0)) < 1e-9
    assert np.max(np.abs(ds.constraint_residual.values)) < 1e-10
    np.testing.assert_allclose(np.hypot(*ds.A.values.T), 1.0, atol=1e-12)
    assert np.ptp(ds.B.values[:, 1]) > 0.5  # it really moved


def test_mechanism0_equals_the_hand_written_lagrangian_model(mech0, mech0_run):
    hand = solver.load(CONFIGS / "mechanism0_lagrangian.yaml")
    assert hand.kind == "Lagrangian" and hand.fixed == mech0.fixed
    ds = hand.solve(t_span=(0.0, 1.0), t_eval=mech0_run.time.values)
    assert int(ds.status) == 0
    for name in ("A", "B", "A_d1", "B_d1"):
        np.testing.assert_allclose(mech0_run[name].values, ds[name].values, rtol=0, atol=1e-10)
    np.testing.assert_allclose(mech0_run.lam.values, ds.lam.values, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(mech0_run.energy.values, ds.energy.values, rtol=0, atol=1e-9)


# ------------------------------------------------------------------ rigid bodies
def _rigid_energy_model(tmp_path, dim):
    if dim == 2:
        body = """
Dimension: 2
PhysicalParams: {M: 1.7, I: 0.31}
PartData:
  Rigids:
    ABC:
      Geom: [[0.8, 0.3], [0.2, 0.9]]
      Dyna: [[0.4, 0.5], M, I]
ProblemData: {tend: 1, positions: {A: [0, 0], B: [0.8, 0.3], C: [0.2, 0.9]}}
"""
    else:
        body = """
Dimension: 3
PhysicalParams: {M: 1.7}
PartData:
  Rigids:
    ABCD:
      Geom: [[0.8, 0.3, 0.1], [0.2, 0.9, -0.3], [0.1, 0.2, 0.7]]
      Dyna: [[0.3, 0.4, 0.1], M, [[0.5, 0.04, -0.03], [0.04, 0.4, 0.02], [-0.03, 0.02, 0.6]]]
ProblemData:
  tend: 1
  positions: {A: [0, 0, 0], B: [0.8, 0.3, 0.1], C: [0.2, 0.9, -0.3], D: [0.1, 0.2, 0.7]}
"""
    path = tmp_path / f"body{dim}.yaml"
    path.write_text("AppliedForces: {Gravity: }\n" + body)
    return solver.load(path)


@pytest.mark.parametrize("dim", [2, 3])
def test_rigid_body_energies_match_the_closed_forms(tmp_path, dim):
    model = _rigid_energy_model(tmp_path, dim)
    mech = model.mechanism
    part = mech.parts[0]
    local = np.vstack([np.zeros(dim), np.asarray(part.q["Geom"].default)])
    c_local = np.asarray(part.q["centroid"].default)
    I_c = np.asarray(part.q["inertia"].default)
    M = 1.7
    p = {k: jnp.asarray(v) for k, v in model.params.items()}
    rng = np.random.default_rng(3)
    for _ in range(3):
        origin, v0 = rng.normal(size=dim), rng.normal(size=dim)
        if dim == 2:
            ang, w = rng.normal(), rng.normal()
            Rot = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
            vel_of = lambda r: v0 + w * np.array([-r[1], r[0]])
        else:
            Rot = Rotation.random(random_state=rng).as_matrix()
            w = rng.normal(size=3)
            vel_of = lambda r: v0 + np.cross(w, r)
        X = origin + local @ Rot.T
        q = {n: jnp.asarray(X[i]) for i, n in enumerate(part.points)}
        qd = {n: jnp.asarray(vel_of(X[i] - origin)) for i, n in enumerate(part.points)}
        c = Rot @ c_local
        v_c = vel_of(c)
        rot_energy = 0.5 * I_c * w**2 if dim == 2 else 0.5 * w @ (Rot @ I_c @ Rot.T) @ w
        T_exact = 0.5 * M * v_c @ v_c + rot_energy
        assert abs(float(mech.kinetic_energy(0.0, q, qd, p)) - T_exact) < 1e-12 * max(1, T_exact)
        V_exact = M * G * (origin + c)[dim - 1]  # gravity along -y (2-D) or -z (3-D)
        assert abs(float(mech.potential_energy(0.0, q, p)) - V_exact) < 1e-12 * max(1, abs(V_exact))
        # The extra point (C in 2-D, D in 3-D) sits on the body: its constraints vanish.
        assert np.max(np.abs(np.asarray(mech.constraints_fn(0.0, q, p)))) < 1e-12


def test_3d_rod_and_spring_conserve_energy_and_without_spring_make_a_physical_pendulum(pendulum3d):
    model = pendulum3d
    assert model.points == ["P", "R"] and model.links == [("O", "P"), ("P", "R")]
    assert model.dae.n_c == 1 and model.dae.structure.dof == 2 * (6 - 1)
    t = np.linspace(0.0, 1.0, 51)
    ds = model.solve(t_eval=t)
    assert int(ds.status) == 0
    e = ds.energy.values
    assert np.max(np.abs(e - e[0])) < 1e-9 * max(1.0, abs(e[0]))
    assert np.max(np.abs(ds.constraint_residual.values)) < 1e-10
    assert np.max(np.abs(ds.P.values[:, 1])) > 1e-3  # the spring pulls P out of its plane

    # Same compiled model, other parameters: no spring, massless.  The rod
    # swings in the xz plane as a physical pendulum, I_O = m1 L²/3 about O
    # with its centre at L/2, and R falls freely.
    free = model.solve(params={"k": 0.0, "mu": 0.0}, t_eval=t)
    assert int(free.status) == 0
    L, th0, w0 = 1.0, 0.8, 0.5
    ref = solve_ivp(lambda _, y: [y[1], -1.5 * G / L * np.sin(y[0])], (0.0, 1.0), [th0, w0],
                    t_eval=t, method="DOP853", rtol=1e-13, atol=1e-13)
    th = ref.y[0]
    np.testing.assert_allclose(free.P.values, np.stack([L * np.sin(th), 0 * th, -L * np.cos(th)], 1),
                               atol=1e-9)
    R_exact = np.stack([0.5 + 0.2 * t, 1.0 + 0 * t, -1.5 + 0.1 * t - G * t**2 / 2], 1)
    np.testing.assert_allclose(free.R.values, R_exact, atol=1e-10)


# ------------------------------------------------------------------ messages
BASE = MECHANISM0.read_text()

ERRORS = [
    # (replace, with, line, key path, message)
    ("  Springs:\n", "  Sprigs:\n", 12, "PartData.Sprigs",
     "unknown key 'Sprigs'; valid keys: Fixed, Particles, Springs, DampedSprings, Rods, Rigids; "
     "did you mean 'Springs'?"),
    ("AB: [k, l, mu]", "AB: [k, l]", 13, "PartData.Springs.AB",
     "expected [stiffness, rest length, mass] (3 items), got 2 items"),
    ("B: [(L+1), 0] }", "B: [(L+1), 0], C: [0, 0] }", 22, "ProblemData.positions.C",
     "unknown point or component 'C'; the moving points are A, B (components as Ax, Ay)"),
    ("positions: { A: [L, 0], B: [(L+1), 0] } # guesses for A, B\n  fixedpositions: { Ax, B }",
     "positions: { A: [L, 0], By: 0 }\n  fixedpositions: { Ax }", 19,
     "ProblemData",
     "moving point 'B' (first used in PartData.Springs.AB) has no initial position for Bx: "
     "every moving point needs a guess in ProblemData.positions (e.g. B: [0, 0]), or make it "
     "Fixed in PartData.Fixed"),
    ("velocities: { Ay: 10, B: [0, 0] }", "velocities: { Ay: 10, B: [0, 0], Ox: 1 }", 24,
     "ProblemData.velocities.Ox",
     "'O' is a Fixed point (its position is set in PartData.Fixed); ProblemData.velocities "
     "applies to the moving points: A, B"),
    ("Dimension: 2", "Dimension: 4", 2, "Dimension", "expected 2 or 3, got 4; valid choices: 2, 3"),
    ("Geom: [[L, 0]]", "Geom: [[L, 0, 0]]", 9, "PartData.Rigids.OA.Geom",
     "expected the local coordinates of A (1 row of 2 numbers), got a 1x3 array ([[L, 0, 0]])"),
    ("Geom: [[L, 0]]", "Geom: [[0, 0]]", 9, "PartData.Rigids.OA.Geom",
     "A is at the origin O of the local frame: the first two points of a rigid body must "
     "differ (they fix its x axis)"),
    ("Dyna: [[L/2, 0], M, M*L**2/12]", "Dyna: [[L/2, 0], M]", 11, "PartData.Rigids.OA.Dyna",
     "expected [centroid, mass, moment of inertia] (3 items), got 2 items"),
    ("M*L**2/12]", "-1]", 8, "PartData.Rigids.OA",
     "the inertia violates the triangle inequality (no mass distribution has it) (at the "
     "default parameters)"),
    ("AB: [k, l, mu]", "ab: [k, l, mu]", 13, "PartData.Springs.ab",
     "cannot read point names from 'ab': name the part by its points, each a capital letter "
     "followed by lowercase letters or digits (OA -> O, A; P1P2 -> P1, P2), or give "
     "'points: [...]'"),
    ("    OA:\n", "    O:\n", 8, "PartData.Rigids.O",
     "a rigid body in 2-D has at least 2 points, but 'O' names 1 (O); give 'points: [...]'"),
    ("Gravity: #turns it on with default value", "Gravity: [0, 0, -9.81]", 17,
     "AppliedForces.Gravity", "expected a magnitude or a 2-vector, got a 3-vector ([0, 0, -9.81])"),
    ("B: m # mass", "B: -m # mass", 15, "PartData.Particles.B",
     "expected a positive mass (a scalar), got -2.0 (-m)"),
    ("Fixed: { O: [0, 0] }", "Fixed: { O: [0, 0], A: [2, 0] }", 8, "PartData.Rigids.OA",
     "the Fixed points O, A violate the constraint 'Rigids.OA: |A-O|' (residual 3); the "
     "geometry does not fit their positions"),
    ("    B: m # mass\n", "    A: m # mass\n", None, None, None),  # see the massless test
]


@pytest.mark.parametrize("old,new,line,where,message", [e for e in ERRORS if e[2]],
                         ids=[e[3] + ":" + e[4][:20] for e in ERRORS if e[2]])
def test_malformed_mechanism_files_get_located_messages(tmp_path, old, new, line, where, message):
    assert old in BASE
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        solver.load(path)
    assert str(err.value) == f"{path}:{line}: {where}: {message}"
    assert (err.value.file, err.value.line, err.value.path) == (str(path), line, where)


def test_a_point_without_mass_is_refused(tmp_path):
    path = tmp_path / "massless.yaml"
    path.write_text(BASE.replace("    B: m # mass", "    A: m # mass").replace("mu: .5", "mu: 0"))
    with pytest.raises(InputError) as err:
        solver.load(path)
    assert str(err.value) == (
        f"{path}:13: PartData.Springs.AB: moving point 'B' carries no mass (its parts are "
        "massless at the default parameters), so its motion is undetermined; add a particle "
        "'B: mass', give a spring or rod mass, or make it Fixed")


def test_unknown_names_in_expressions_point_at_the_character(tmp_path):
    path = tmp_path / "name.yaml"
    path.write_text(BASE.replace("Geom: [[L, 0]]", "Geom: [[Lx, 0]]"))
    with pytest.raises(InputError) as err:
        solver.load(path)
    assert str(err.value) == (f"{path}:9: PartData.Rigids.OA.Geom: unknown name 'Lx'; valid names "
                              "(closest first): L, M, k, l, mu, m\n  [[Lx, 0]]\n    ^")


def test_explicit_points_and_split_names(tmp_path):
    from solver.models.mechanism_kind import split_point_names

    assert split_point_names("OA") == ["O", "A"]
    assert split_point_names("DC1") == ["D", "C1"]
    assert split_point_names("P1P2") == ["P1", "P2"]
    assert split_point_names("ab") is None
    # The mapping form names long points; the model is the same as Mechanism0.
    text = BASE.replace("AB: [k, l, mu] # stiffness, length, mass",
                        "spring: {points: [A, Bob], stiffness: k, length: l, mass: mu}")
    text = text.replace("    B: m # mass", "    Bob: m").replace("B: [(L+1), 0] }", "Bob: [(L+1), 0] }")
    text = text.replace("{ Ax, B }", "{ Ax, Bob }").replace("B: [0, 0] }", "Bob: [0, 0] }")
    path = tmp_path / "long.yaml"
    path.write_text(text)
    model = solver.load(path)
    assert model.points == ["A", "Bob"] and model.fixed == ["A[0]", "Bob", "A[1]'", "Bob'"]
    assert model.links == [("O", "A"), ("A", "Bob")]
