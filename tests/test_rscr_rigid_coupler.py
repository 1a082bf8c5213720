"""The RSCR with its coupler as a 3-D rigid body moves as the shipped rod form.

Issue 14, item 1: "The RSCR written with its coupler as a 3-D rigid body,
against today's rod form, to 1e-9."

The reference is ``configs/mechanisms/rscr.yaml`` as shipped (loaded and
solved through the public model API): natural coordinates q = (C1, B, mu),
7 scalars and 6 constraints, every part a thin uniform rod with
T = m/6 (|Y'|² + Y'·Z' + |Z'|²), the cylindrical joint written as
C = C1 + mu v(C1) with v = cos(gamma) w + sin(gamma) C1/L3 × w the axis fixed
in the crank (part 3).

The rigid form is built here in Python with :func:`solver.lagrangian` and
:mod:`solver.mechanics.natural`.  Part 2 (the coupler B–C, which slides and turns on
the crank's axis v) is a 3-D rigid body whose basic points/vectors are
[C (point), B (point), V2 (vector)], V2 a body-fixed unit vector
perpendicular to BC along the cylinder axis: a ``RigidFrame`` of kinds
("point", "point", "vector") with local C = 0, B = (L2, 0, 0), V2 = (0, 1, 0),
and a ``RigidBody`` of mass m2, centroid (L2/2, 0, 0) and the central
inertia of a thin uniform rod, (0, m2 L2²/12, m2 L2²/12): no moment about its
own axis.  The coordinates are C1 (3), B (3), mu (1) and V2 (3); the coupler's
point C = C1 + mu V2 is on its own axis line (on the constraint manifold this
is the rod form's C1 + mu v, since V2 = v there; written with V2 the body is
self-contained and the joint ties only its axis to the crank).  Constraints:
the crank's |C1|² − L3² and C1·w, part 1's |B − A|² − L1² and (B − A)·u, the
coupler's rigidity |B − C|² − L2² and (B − C)·V2 (the frame's rigidity
constraints without |V2|² − 1, which V2 = v already implies: kept, it would
make the constraint Jacobian singular), and the cylindrical joint
V2 − v(C1) = 0 (3 equations).  That is 10 coordinates and 9 constraints: one
mechanical DOF, as the rod form.  The potential is rscr.yaml's, gravity on
the three parts' centroids (the coupler's by ``RigidBody.centroid_position``).

The coupler's kinetic energy does not depend on its spin about BC (zero axial
moment), so the rigid form's mass matrix is singular in the V2 directions;
the KKT matrix [[M, Gᵀ], [G, 0]] is not, because V2 = v(C1) leaves V2 no
motion of its own.  What is checked:

* the rigid body's T equals the rod's m2/6 (|B'|² + B'·C' + |C'|²) at random
  states to 1e-13, and (a control that the check can fail) a body with an
  axial moment J adds exactly ½ J ω_axial² at rigid states;
* started at the rod form's consistent initial point (V2 = v(C1),
  V2' = dv/dt, the same fixed DOF C1z and C1z'), the rigid form's C1, B, mu
  and their velocities agree with the rod form's over t in [0, 1] (tol 1e-12)
  to 1e-9 (measured ~1e-15: the two are the same ODE on the same manifold);
* the rigid form's constraints hold to 1e-10 and its energy is conserved to
  1e-10 and equals the rod form's.

Both models compile once in a module fixture (about 20 s each, cold).
"""

from pathlib import Path

import numpy as np
import pytest

import jax.numpy as jnp

import solver
from solver.mechanics import natural
from solver.mechanics.lagrangian import lagrangian

RSCR = Path(__file__).resolve().parents[1] / "configs" / "mechanisms" / "rscr.yaml"
T_END, TOL = 1.0, 1e-12
T_EVAL = np.linspace(0.0, T_END, 21)


# ------------------------------------------------------------------ the rigid form
def _geometry(p):
    """A, w, u of rscr.yaml's Let block, and v(C1) (jnp, works on traced C1)."""
    A = np.array([-p["a"], 0.0, 0.0])
    w = np.array([np.cos(p["delta"]), np.sin(p["delta"]), 0.0])
    u = np.array([np.sin(p["alpha"]) * np.cos(p["beta"]),
                  np.sin(p["alpha"]) * np.sin(p["beta"]), np.cos(p["alpha"])])

    def v_of(C1):
        return np.cos(p["gamma"]) * w + np.sin(p["gamma"]) * natural.cross3(C1 / p["L3"], w)

    return A, w, u, v_of


def _coupler(p):
    """Part 2 as a rigid body with BPVs [C, B, V2] and a thin rod's inertia."""
    L2, m2 = p["L2"], p["m2"]
    frame = natural.RigidFrame([[0.0, 0.0, 0.0], [L2, 0.0, 0.0], [0.0, 1.0, 0.0]],
                               kinds=("point", "point", "vector"))
    return natural.RigidBody(frame, m2, [L2 / 2, 0.0, 0.0], [0.0, m2 * L2**2 / 12, m2 * L2**2 / 12])


def rigid_coupler_rscr(p):
    """The RSCR DAE with the coupler a 3-D rigid body (10 coordinates, 9 constraints)."""
    A, w, u, v_of = _geometry(p)
    body = _coupler(p)
    frame = body.frame
    L1, L3, m1, m3, g = p["L1"], p["L3"], p["m1"], p["m3"], p["g"]

    def L(t, q, qd, _):
        C1, B, mu, V2 = q["C1"], q["B"], q["mu"], q["V2"]
        C = C1 + mu * V2
        Cd = qd["C1"] + qd["mu"] * V2 + mu * qd["V2"]
        T = (m1 / 6 * jnp.dot(qd["B"], qd["B"])                   # part 1, rod A-B (A fixed)
             + body.kinetic_energy([C, B, V2], [Cd, qd["B"], qd["V2"]])
             + m3 / 6 * jnp.dot(qd["C1"], qd["C1"]))               # part 3, rod D-C1 (D fixed)
        V = g * (m1 * (A[2] + B[2]) / 2 + body.mass * body.centroid_position([C, B, V2])[2]
                 + m3 * C1[2] / 2)
        return T - V

    def constraints(t, q, _):
        C1, B, mu, V2 = q["C1"], q["B"], q["mu"], q["V2"]
        C = C1 + mu * V2
        BC, _unit, BC_V2 = frame.rigidity_constraints([C, B, V2])   # |b|², |c|², b·c
        return [jnp.dot(C1, C1) - L3**2, jnp.dot(C1, w),
                jnp.dot(B - A, B - A) - L1**2, jnp.dot(B - A, u),
                BC, BC_V2,
                V2 - v_of(C1)]

    return lagrangian(L, {"C1": 3, "B": 3, "mu": 1, "V2": 3}, constraints=constraints,
                      name="rscr_rigid_coupler")


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def rod():
    model = solver.load(RSCR)
    ds = model.solve(t_span=(0.0, T_END), t_eval=T_EVAL, tol=TOL)
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    return model, ds


@pytest.fixture(scope="module")
def rigid(rod):
    model, ds_rod = rod
    p = model.all_params()
    _, w, _, _ = _geometry(p)
    C1, C1d = ds_rod.C1.values[0], ds_rod.C1_d1.values[0]
    V2 = np.cos(p["gamma"]) * w + np.sin(p["gamma"]) * np.cross(C1 / p["L3"], w)
    V2d = np.sin(p["gamma"]) * np.cross(C1d / p["L3"], w)
    values = {"C1": C1, "C1'": C1d, "B": ds_rod.B.values[0], "B'": ds_rod.B_d1.values[0],
              "mu": float(np.ravel(ds_rod.mu.values[0])[0]),
              "mu'": float(np.ravel(ds_rod.mu_d1.values[0])[0]), "V2": V2, "V2'": V2d}
    assert model.fixed == ["C1[2]", "C1[2]'"]          # rscr.yaml's fixed DOF: C1z, C1z'
    dae = rigid_coupler_rscr(p)
    ds = solver.solve(dae, t_span=(0.0, T_END), values=values, fixed=model.fixed, tol=TOL,
                      t_eval=T_EVAL)
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    return dae, ds, values


def _series(ds, name):
    return ds[name].values.reshape(ds.sizes["time"], -1)


# ------------------------------------------------------------------ tests
def test_the_rigid_coupler_has_the_kinetic_energy_of_the_rod():
    """T of the RigidBody [C, B, V2] with a thin rod's inertia is
    m2/6 (|B'|² + B'·C' + |C'|²) at any state (it reads only (B' − C')/L2 and
    C'); a body with an axial moment J instead adds ½ J (ω·e_BC)² at rigid
    states, so the equality is not automatic."""
    p = solver.load(RSCR).all_params()
    body = _coupler(p)
    m2, L2 = p["m2"], p["L2"]
    np.testing.assert_allclose(body.c, [L2 / 2, 0, 0], rtol=0, atol=1e-15)
    # The rod's second moment about its end C: m L²/3 along BC, nothing across.
    np.testing.assert_allclose(body.Theta, np.diag([m2 * L2**2 / 3, 0, 0]), rtol=0, atol=1e-15)
    rng = np.random.default_rng(14)
    for _ in range(5):
        C, B, V2, Cd, Bd, V2d = rng.normal(size=(6, 3))
        T = float(body.kinetic_energy([C, B, V2], [Cd, Bd, V2d]))
        T_rod = m2 / 6 * (Bd @ Bd + Bd @ Cd + Cd @ Cd)
        assert abs(T - T_rod) <= 1e-13 * max(1.0, T_rod)
        assert abs(T - float(natural.rod_kinetic_energy(m2, Bd, Cd))) <= 1e-13 * max(1.0, T_rod)
    # Control: the same body with an axial moment J, at rigid states.
    J = 0.07
    spun = natural.RigidBody(body.frame, m2, [L2 / 2, 0, 0], [J, m2 * L2**2 / 12, m2 * L2**2 / 12])
    for _ in range(5):
        Q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        C, Cd, omega = rng.normal(size=(3, 3))
        B, V2 = C + L2 * Q[:, 0], Q[:, 1]
        Bd, V2d = Cd + np.cross(omega, B - C), np.cross(omega, V2)
        T_rod = m2 / 6 * (Bd @ Bd + Bd @ Cd + Cd @ Cd)
        assert abs(float(body.kinetic_energy([C, B, V2], [Cd, Bd, V2d])) - T_rod) <= 1e-13 * max(1.0, T_rod)
        T_spun = float(spun.kinetic_energy([C, B, V2], [Cd, Bd, V2d]))
        np.testing.assert_allclose(T_spun - T_rod, 0.5 * J * (omega @ Q[:, 0]) ** 2, rtol=1e-12, atol=1e-14)


def test_the_rigid_form_is_one_dof_like_the_rod_form(rod, rigid):
    model, _ = rod
    dae, _, _ = rigid
    assert [(c.name, c.size) for c in dae.coords] == [("C1", 3), ("B", 3), ("mu", 1), ("V2", 3)]
    assert dae.n_q == 10 and dae.n_c == 9
    assert model.dae.n_q == 7 and model.dae.n_c == 6
    assert dae.structure.dof == model.dae.structure.dof == 2        # 1 mechanical DOF
    assert dae.structure.index == model.dae.structure.index == 3


def test_the_rigid_form_starts_where_the_rod_form_starts(rigid):
    """The rod form's initial point, extended by V2 = v(C1), V2' = dv/dt, is
    already consistent for the rigid form: the initialisation keeps it."""
    _, ds, values = rigid
    for name in ("C1", "B", "mu", "V2"):
        np.testing.assert_allclose(_series(ds, name)[0], np.ravel(values[name]), rtol=0, atol=1e-13)
        np.testing.assert_allclose(_series(ds, name + "_d1")[0], np.ravel(values[name + "'"]),
                                   rtol=0, atol=1e-12)


def test_the_rigid_coupler_rscr_moves_as_the_rod_form(rod, rigid):
    """C1, B, mu and their velocities agree to 1e-9 over the horizon (issue 14);
    the coupler's axis stays on the crank's cylinder axis; the motion is a
    real swing (the crank tip moves by a good part of L3)."""
    model, ds_rod = rod
    _, ds, _ = rigid
    np.testing.assert_array_equal(ds.time.values, ds_rod.time.values)
    for name in ("C1", "B", "mu", "C1_d1", "B_d1", "mu_d1"):
        err = np.max(np.abs(_series(ds, name) - _series(ds_rod, name)))
        assert err <= 1e-9, f"{name}: rigid and rod forms differ by {err:.3e}"
    p = model.all_params()
    _, w, _, _ = _geometry(p)
    C1 = ds.C1.values
    v = np.cos(p["gamma"]) * w + np.sin(p["gamma"]) * np.cross(C1 / p["L3"], w)
    np.testing.assert_allclose(ds.V2.values, v, rtol=0, atol=1e-10)
    assert float(np.ptp(ds_rod.C1.values[:, 2])) > 0.5 * p["L3"]


def test_the_rigid_form_keeps_its_constraints_and_its_energy(rod, rigid):
    _, ds_rod = rod
    _, ds, _ = rigid
    assert float(np.max(np.abs(ds.constraint_residual.values))) < 1e-10
    E = ds.energy.values
    assert float(np.max(np.abs(E - E[0]))) < 1e-10
    np.testing.assert_allclose(E, ds_rod.energy.values, rtol=0, atol=1e-10)
