"""The Siconos LagrangianDS view (seed 002) against a hand-derived double pendulum.

For two point masses on massless rods, by their angles a, b from the
downward vertical (v = (u, w), s = sin(a − b), c = cos(a − b)), the
textbook equations M q'' + F_gyr + F_int = 0 have

    M     = [[(m1 + m2) l1², m2 l1 l2 c], [m2 l1 l2 c, m2 l2²]]
    F_gyr = [m2 l1 l2 s w², −m2 l1 l2 s u²]
    F_int = [(m1 + m2) g l1 sin a, m2 g l2 sin b]

and the Jacobians below, all derived by hand; the view gets them by AD
from the model's kinetic and potential energies.
"""

import numpy as np
import pytest

import solver
from solver.errors import InputError

DOUBLE = """Title: Double pendulum by its angles
Kind: Lagrangian
PhysicalParams: {m1: 1.3, m2: 0.7, l1: 1.1, l2: 0.9, g: 9.81}
Coordinates: [a, b]
KineticEnergy: (m1 + m2)/2*l1**2*a'**2 + m2/2*l2**2*b'**2 + m2*l1*l2*a'*b'*cos(a - b)
PotentialEnergy: -(m1 + m2)*g*l1*cos(a) - m2*g*l2*cos(b)
ProblemData: {tend: 1, positions: {a: 0.3, b: -0.4}}
"""


def test_the_siconos_pieces_of_a_double_pendulum_are_the_textbook_ones():
    model = solver.load(DOUBLE)
    ds = solver.lagrangian_ds(model, {"m2": 0.8})
    p = dict(model.params, m2=0.8)
    m1, m2, l1, l2, g = (p[k] for k in ("m1", "m2", "l1", "l2", "g"))
    q, v = np.array([0.7, -1.2]), np.array([0.5, -1.5])
    a, b = q
    u, w = v
    s, c = np.sin(a - b), np.cos(a - b)
    k = m2 * l1 * l2
    assert ds.ndof == 2 and ds.coordinates == ["a", "b"]
    np.testing.assert_allclose(ds.mass(q), [[(m1 + m2) * l1**2, k * c], [k * c, m2 * l2**2]], rtol=1e-14)
    np.testing.assert_allclose(ds.fgyr(q, v), [k * s * w**2, -k * s * u**2], rtol=1e-13)
    np.testing.assert_allclose(ds.fint(0.0, q, v), [(m1 + m2) * g * l1 * np.sin(a), m2 * g * l2 * np.sin(b)],
                               rtol=1e-13)
    np.testing.assert_allclose(ds.fext(0.0), [0.0, 0.0])
    np.testing.assert_allclose(ds.jacobian_fgyr_v(q, v), [[0.0, 2 * k * s * w], [-2 * k * s * u, 0.0]],
                               rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(ds.jacobian_fgyr_q(q, v), [[k * c * w**2, -k * c * w**2],
                                                         [-k * c * u**2, k * c * u**2]], rtol=1e-13)
    np.testing.assert_allclose(ds.jacobian_fint_q(0.0, q, v),
                               [[(m1 + m2) * g * l1 * np.cos(a), 0.0], [0.0, m2 * g * l2 * np.cos(b)]],
                               rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(ds.jacobian_fint_v(0.0, q, v), np.zeros((2, 2)), atol=1e-15)


def test_dissipation_goes_to_f_int_and_constraints_give_the_reaction_jacobian():
    """A damped particle on a circle in Cartesians: R = ½ c |r'|² is linear in
    v (F_int, not F_gyr); the constraint |r|² − L² has G = 2 rᵀ."""
    model = solver.load("""Kind: Lagrangian
PhysicalParams: {m: 2.0, g: 9.81, L: 1.5, c: 0.3}
Coordinates: {r: 2}
KineticEnergy: m/2*dot(r', r')
PotentialEnergy: m*g*r[1]
Dissipation: c/2*dot(r', r')
Constraints:
  - dot(r, r) - L**2
ProblemData: {tend: 1, positions: {r: [1.5, 0]}, fixedpositions: {r}}
""")
    ds = solver.lagrangian_ds(model)
    q, v = np.array([0.9, -1.2]), np.array([0.4, 0.3])
    np.testing.assert_allclose(ds.mass(q), 2.0 * np.eye(2))
    np.testing.assert_allclose(ds.fgyr(q, v), [0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(ds.fint(0.0, q, v), [0.3 * 0.4, 2.0 * 9.81 + 0.3 * 0.3], rtol=1e-14)
    np.testing.assert_allclose(ds.jacobian_fint_v(0.0, q, v), 0.3 * np.eye(2), rtol=1e-14)
    np.testing.assert_allclose(ds.constraint_jacobian(q), [[2 * 0.9, -2 * 1.2]], rtol=1e-14)


def test_a_dae_kind_model_has_no_lagrangian_view():
    model = solver.load("configs/mechanisms/pendulum.yaml")
    with pytest.raises(InputError, match="needs a Lagrangian or Mechanism model; this one is DAE"):
        solver.lagrangian_ds(model)
