"""YAML model kinds DAE and Lagrangian: the configs load, move and obey physics.

References nobody here wrote: scipy's ``solve_ivp`` on the textbook angle
equations of the pendulum and the double pendulum and on Newton's equations of
two particles joined by a spring; mechanics' DOF count 2(n_q − n_c); Pryce's
index of the index-2 pendulum; conservation of energy (and the dissipation
balance dE/dt = F·v for the damped slider).
"""

from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp, trapezoid

import jax.numpy as jnp

import solver
from solver.errors import InputError
from solver.models import load

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"
SHORT = {"ProblemData": {"tend": 1.0, "samples": 41}}

# DAE degrees of freedom Σd − Σc = 2 (n_q − n_c) for the mechanical models:
# one position and one velocity per positional degree of freedom.
EXPECTED_DOF = {
    "pendulum": 2,              # 2 coordinates, 1 constraint
    "double_pendulum": 4,       # 4 coordinates, 2 constraints
    "chain5": 20,               # 15 coordinates, 5 constraints
    "two_particle_spring": 12,  # 6 free coordinates
    "cloth": 150,               # 5 x 5 particles, 75 free coordinates
    "fourbar": 2,               # 4 coordinates, 3 constraints
    "fourbar_spring": 2,        # the same with a spring
    "slider_crank": 2,          # 3 coordinates, 2 constraints
    "rscr": 2,                  # 7 coordinates, 6 constraints (the talk's table)
    "rscr_driven": 0,           # the same and its crank driven: 7 constraints
    "mechanism0": 6,            # 4 coordinates (A, B), 1 constraint (rod OA)
    "mechanism0_lagrangian": 6,  # the same by hand
    "spring_chain": 20,         # 5 particles in 2-D, no constraints
    "pendulum_chain3d": 12,     # 3 points in 3-D (9 coordinates), 3 rods
    "free_body": 12,            # 3 points in 3-D (9 coordinates), 3 rigidity constraints
    "free_body_lagrangian": 12,  # centroid and 3 Euler angles
    "car": 20,                  # centre of mass, 3 Euler angles of the frame, 4 struts; no constraints
    "bouncing_ball": 2,         # 1 coordinate (a stop is no constraint)
    "pendulum_wall": 2,         # 2 coordinates, 1 constraint, a stop
    "slider_crank_stop": 2,     # 3 coordinates, 2 constraints, a stop
    "soft_floor": 2,            # 1 coordinate, a piecewise force
    "pleiades": 28,             # 7 bodies in the plane (14 coordinates), no constraints
}
# Every shipped config is listed above; its Kind is Lagrangian unless given here.
KIND = {"pendulum": "DAE", "mechanism0": "Mechanism", "spring_chain": "Mechanism",
        "pendulum_chain3d": "Mechanism", "free_body": "Mechanism"}


def _solve(name, over=SHORT):
    model = load(CONFIGS / f"{name}.yaml", overrides=over)
    ds = model.solve()
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    return model, ds


@pytest.fixture(scope="module")
def runs():
    """Each model solved once (compilation dominates), shared by the tests."""
    cache = {}

    def get(name, over=SHORT):
        key = (name, repr(over))
        if key not in cache:
            cache[key] = _solve(name, over)
        return cache[key]

    return get


# ------------------------------------------------------------------ loading
@pytest.mark.parametrize("name", sorted(EXPECTED_DOF))
def test_every_config_loads_with_the_mechanical_dof(name):
    model = load(CONFIGS / f"{name}.yaml")
    assert model.dae.structure.dof == EXPECTED_DOF[name]
    assert model.kind == KIND.get(name, "Lagrangian")
    assert model.text == (CONFIGS / f"{name}.yaml").read_text()
    assert model.tend > model.t0 and len(model.t_eval()) >= 2
    # The initial values name only unknowns of the DAE, in solve() syntax.
    names = {v.name for v in model.dae.variables}
    for key in model.initial_values():
        assert key.split("[")[0].rstrip("'") in names


def test_config_set_matches_the_folder_listing():
    # Exactly: a config added to the folder (or removed from it) must be listed.
    assert {p.stem for p in CONFIGS.glob("*.yaml")} == set(EXPECTED_DOF)


def test_rscr_follows_the_talks_table():
    model = load(CONFIGS / "rscr.yaml")
    dae = model.dae
    assert [(c.name, c.size) for c in dae.coords] == [("C1", 3), ("B", 3), ("mu", 1)]
    assert dae.n_c == 6 and dae.structure.index == 3
    assert set(model.params) >= {"L1", "L2", "L3", "alpha", "beta", "gamma", "delta", "a"}


# ------------------------------------------------------------------ kinds
PENDULUM_INDEX2 = """
Kind: DAE
PhysicalParams: {g: 9.81, L: 1.0}
Variables: [x, y, lam]
Let: {r2: x**2 + y**2}
Equations:
  - x'' + lam*x
  - y'' + lam*y - g
  - r2'          # d/dt of the Let definition: 2(x x' + y y')
ProblemData: {tend: 1, values: {x: L, y: 0}, fixed: [x]}
"""


def test_dae_kind_let_prime_is_the_time_derivative_of_the_definition():
    # Differentiating the position constraint once gives the index-2 pendulum:
    # offsets c = (0, 0, 1), d = (2, 2, 0), structural index 2 (Pryce 2001).
    s = solver.load(PENDULUM_INDEX2).dae.structure
    assert list(s.c) == [0, 0, 1] and list(s.d) == [2, 2, 0]
    assert s.index == 2 and s.dof == 3


DERIVED = """
Kind: Lagrangian
PhysicalParams: {L: 1.0, R: 2*L, m: 1.0}
Coordinates: {P: 2}
KineticEnergy: m/2*dot(P', P')
Constraints:
  - dot(P, P) - R**2
ProblemData: {tend: 1, positions: {P: [R, 0]}, fixedpositions: {P}, velocities: {Py: 1}}
"""


def test_derived_parameters_follow_the_traced_ones():
    model = solver.load(DERIVED)
    assert model.params == {"L": 1.0, "m": 1.0}            # R is derived, not traced
    assert model.all_params({"L": 0.75})["R"] == pytest.approx(1.5)
    assert model.initial_values({"L": 0.75})["P"].tolist() == [1.5, 0.0]
    # Inside the DAE, R is computed from the traced L: the constraint of a
    # point at distance 1.5 vanishes when L = 0.75.
    c = model.dae.constraints_at(0.0, {"P": jnp.array([1.5, 0.0])}, params={"L": 0.75})
    assert abs(float(c[0])) < 1e-14
    with pytest.raises(InputError, match="'R' is derived"):
        model.check_params({"R": 3.0})
    with pytest.raises(InputError, match="unknown parameter 'Lx'; the parameters are L, m"):
        model.check_params({"Lx": 3.0})


def test_derived_parameters_and_initial_values_of_a_design_point_are_computed_without_jax(monkeypatch):
    # solve_batch evaluates them once per design point: in numpy (the car's
    # derived parameters cost 0.9 ms a point in eager jax; results/model_read.txt).
    for name in ("car.yaml", "mechanism0.yaml", "free_body.yaml"):
        model = load(CONFIGS / name)
        free = {k: v for k, v in model.params.items() if np.ndim(v) == 0 and v != 0}
        point = {k: 1.1 * v for k, v in free.items()}
        expected = model.initial_values(point)
        monkeypatch.setattr(jnp, "asarray", _no_jax)
        monkeypatch.setattr(jnp, "array", _no_jax)
        got = model.initial_values(point)
        monkeypatch.undo()
        assert got.keys() == expected.keys()
        for key in got:
            np.testing.assert_array_equal(got[key], expected[key], err_msg=f"{name}: {key}")


def _no_jax(*args, **kwargs):
    raise AssertionError("jax.numpy was called for a constant")


def test_let_prime_in_a_lagrangian_is_the_total_derivative_along_q_dot():
    # RSCR: T uses C' where C = C1 + mu v(C1).  Compare the model's energy at a
    # random state with T + V computed here, C' by central differences in time.
    model = load(CONFIGS / "rscr.yaml")
    p = model.all_params()
    rng = np.random.default_rng(3)
    q = {"C1": rng.normal(size=3), "B": rng.normal(size=3), "mu": rng.normal()}
    qd = {"C1": rng.normal(size=3), "B": rng.normal(size=3), "mu": rng.normal()}
    w = np.array([np.cos(p["delta"]), np.sin(p["delta"]), 0.0])

    def C(s):
        c1, mu = q["C1"] + s * qd["C1"], q["mu"] + s * qd["mu"]
        k3 = np.cross(c1 / p["L3"], w)
        return c1 + mu * (np.cos(p["gamma"]) * w + np.sin(p["gamma"]) * k3)

    h = 1e-5
    Cd = (C(h) - C(-h)) / (2 * h)
    Bd, C1d = qd["B"], qd["C1"]
    T = (p["m1"] / 6 * Bd @ Bd + p["m2"] / 6 * (Bd @ Bd + Bd @ Cd + Cd @ Cd)
         + p["m3"] / 6 * C1d @ C1d)
    V = p["g"] * (p["m1"] * (0 + q["B"][2]) / 2 + p["m2"] * (q["B"][2] + C(0)[2]) / 2
                  + p["m3"] * q["C1"][2] / 2)
    E = float(model.dae.energy(0.0, q, qd))
    assert E == pytest.approx(T + V, rel=1e-9)


def test_overrides_deep_merge_and_with_overrides():
    model = load(CONFIGS / "pendulum.yaml", overrides={"ProblemData": {"tend": 3, "dt": 0.5,
                                                                       "samples": None}})
    assert model.tend == 3 and model.t_eval().tolist() == [0, 0.5, 1, 1.5, 2, 2.5, 3]
    assert model.fixed == ["x", "x'"]                       # untouched keys kept
    again = model.with_overrides({"PhysicalParams": {"L": 2.0}})
    assert again.params == {"g": 9.81, "L": 2.0} and again.tend == 3
    assert again.initial_values()["x"] == 2.0


def test_cloth_sizes_are_structural():
    model = load(CONFIGS / "cloth.yaml", overrides={"PhysicalParams": {"m": 3, "n": 4}})
    assert model.dae.n == 3 * 3 * 4
    assert "m" not in model.params and model.params["k"] == 20.0
    with pytest.raises(InputError, match="'m' is structural"):
        model.check_params({"m": 6})


# ------------------------------------------------------------------ motion
def test_pendulum_matches_the_angle_equation(runs):
    model, ds = runs("pendulum")
    g, L = model.params["g"], model.params["L"]
    # From x = L, y = 0 at rest: θ from the downward vertical starts at π/2.
    ref = solve_ivp(lambda t, s: [s[1], -g / L * np.sin(s[0])], (0, 1), [np.pi / 2, 0.0],
                    t_eval=ds.time.values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.x.values, L * np.sin(ref.y[0]), atol=1e-8)
    np.testing.assert_allclose(ds.y.values, L * np.cos(ref.y[0]), atol=1e-8)
    E = (ds.x_d1**2 + ds.y_d1**2) / 2 - g * ds.y
    assert float(abs(E - E[0]).max()) < 1e-8
    assert ds.attrs["model_yaml"] == model.text and ds.attrs["title"] == model.title
    bob = model.point_series(ds)["bob"]
    np.testing.assert_allclose(bob[:, 1], -ds.y.values)


def test_a_dae_model_with_an_energy_reports_it_conserved(runs):
    """The shipped pendulum declares E = (x'² + y'²)/2 − g y: from rest at
    y = 0 it is 0, and the run conserves it."""
    model, ds = runs("pendulum")
    assert float(ds.energy[0]) == pytest.approx(0.0, abs=1e-12)
    assert float(np.max(np.abs(ds.energy_change.values))) < 1e-9
    g = model.params["g"]
    np.testing.assert_allclose(ds.energy.values, 0.5 * (ds.x_d1.values ** 2 + ds.y_d1.values ** 2)
                               - g * ds.y.values, atol=1e-13)


ENERGY_ERRORS = [
    ("lam'**2", "lam': the Energy may use a variable's value and, for a variable whose second "
                "derivative the equations use, its first derivative"),
    ("x'**2 + z", "unknown name 'z'"),
    ("[x, y]", "the Energy must be a scalar, got shape (2,)"),
]


@pytest.mark.parametrize("energy, message", ENERGY_ERRORS)
def test_a_bad_energy_is_refused_at_load_with_its_place(tmp_path, energy, message):
    text = (CONFIGS / "pendulum.yaml").read_text()
    old = "Energy: (x'**2 + y'**2)/2 - g*y"
    assert old in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace(old, f"Energy: \"{energy}\""))
    with pytest.raises(InputError) as err:
        load(path)
    assert message in str(err.value) and "p.yaml:14: Energy: " in str(err.value)


def test_double_pendulum_matches_the_angle_equations(runs):
    model, ds = runs("double_pendulum")
    p = model.all_params()
    m1, m2, l1, l2, g = p["m1"], p["m2"], p["l1"], p["l2"], p["g"]

    def rhs(t, s):  # the textbook equations for point masses on massless rods
        a1, a2, w1, w2 = s
        den = 2 * m1 + m2 - m2 * np.cos(2 * a1 - 2 * a2)
        d1 = (-g * (2 * m1 + m2) * np.sin(a1) - m2 * g * np.sin(a1 - 2 * a2)
              - 2 * np.sin(a1 - a2) * m2 * (w2**2 * l2 + w1**2 * l1 * np.cos(a1 - a2))) / (l1 * den)
        d2 = (2 * np.sin(a1 - a2) * (w1**2 * l1 * (m1 + m2) + g * (m1 + m2) * np.cos(a1)
                                     + w2**2 * l2 * m2 * np.cos(a1 - a2))) / (l2 * den)
        return [w1, w2, d1, d2]

    ref = solve_ivp(rhs, (0, 1), [p["th1"], p["th2"], 0, 0], t_eval=ds.time.values,
                    rtol=1e-12, atol=1e-12)
    P2 = np.stack([l1 * np.sin(ref.y[0]) + l2 * np.sin(ref.y[1]),
                   -l1 * np.cos(ref.y[0]) - l2 * np.cos(ref.y[1])], axis=1)
    np.testing.assert_allclose(ds.P2.values, P2, atol=1e-7)
    assert float(ds.constraint_residual.max()) < 1e-9
    assert float(abs(ds.energy - ds.energy[0]).max()) < 1e-8


def test_two_particles_match_newtons_equations(runs):
    model, ds = runs("two_particle_spring")
    p = model.params
    x0 = model.initial_values()

    def rhs(t, s):
        a, b, va, vb = s[:3], s[3:6], s[6:9], s[9:]
        d = b - a
        f = p["k"] * (np.linalg.norm(d) - p["l0"]) * d / np.linalg.norm(d)
        return np.concatenate([va, vb, f / p["m1"], -f / p["m2"]])

    s0 = np.concatenate([x0["P1"], x0["P2"], x0["P1'"], x0["P2'"]])
    ref = solve_ivp(rhs, (0, 1), s0, t_eval=ds.time.values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.P2.values, ref.y[3:6].T, atol=1e-8)
    assert float(abs(ds.energy - ds.energy[0]).max()) < 1e-9


@pytest.mark.parametrize("name", ["fourbar", "chain5"])
def test_constrained_conservative_models_hold_constraints_and_energy(runs, name):
    model, ds = runs(name)
    assert model.conservative
    assert float(ds.constraint_residual.max()) < 1e-8
    assert float(abs(ds.energy - ds.energy[0]).max()) < 1e-7 * max(1.0, abs(float(ds.energy[0])))
    # It moves: the first coordinate's path is not constant.
    first = model.dae.coords[0].name
    assert float(np.ptp(ds[first].values, axis=0).max()) > 1e-2


def test_slider_crank_loses_exactly_the_damper_work(runs):
    model, ds = runs("slider_crank", {"ProblemData": {"tend": 1.0, "samples": 401}})
    assert model.conservative is False
    assert float(ds.constraint_residual.max()) < 1e-8
    # Power of the force -c s' applied at B = [s, 0]: dE/dt = -c s'^2.
    c = model.params["c"]
    work = trapezoid(-c * ds.s_d1.values**2, ds.time.values)
    assert float(ds.energy[-1] - ds.energy[0]) == pytest.approx(work, rel=1e-4)


def test_cloth_moves_and_its_energy_decays(runs):
    over = {"PhysicalParams": {"m": 3, "n": 3}, "ProblemData": {"tend": 0.5, "samples": 26}}
    model, ds = runs("cloth", over)
    z = ds.r.values.reshape(len(ds.time), 3, 3, 3)[..., 2]
    assert z[:, 1, 1].max() > 0.05                # the pushed middle particle rose
    dE = np.diff(ds.energy.values)
    assert np.all(dE <= 1e-9)                      # damping only removes energy
    assert dE.sum() < 0


@pytest.mark.slow
def test_rscr_moves_for_ten_seconds_conserving_energy():
    model = load(CONFIGS / "rscr.yaml", overrides={"ProblemData": {"samples": 201}})
    assert model.dae.structure.dof == 2 and model.tend == 10
    ds = model.solve()
    assert int(ds.status) == 0
    assert float(ds.constraint_residual.max()) < 1e-8
    assert float(abs(ds.energy - ds.energy[0]).max()) < 1e-7
    # The crank stays on its circle of radius L3 and swings through a wide arc
    # (under gravity the initial speed makes it rock back and forth).
    L3 = model.params["L3"]
    np.testing.assert_allclose(np.linalg.norm(ds.C1.values, axis=1), L3, atol=1e-9)
    assert float(np.ptp(ds.C1.values[:, 2])) > 0.5 * L3
    assert np.sum(np.diff(np.sign(np.diff(ds.C1.values[:, 2]))) != 0) >= 2  # turns back
