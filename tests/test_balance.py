"""Balance outputs (solver/results/balance.py) against conservation laws.

References nobody here wrote: the work-energy theorem (a damped model's
energy change plus the energy its Rayleigh forces dissipated is zero),
conservation of linear and angular momentum of a free system, and
Euler's law dL/dt = r × F for a pendulum (the rod's force passes through
the pivot, so only gravity has a torque about it); SciPy's
``cumulative_simpson`` for the dissipated energy's integral.
"""

import jax
import numpy as np
import pytest

import solver

TWO_PARTICLES = """Title: Free pair
Kind: Lagrangian
PhysicalParams: {m1: 1.0, m2: 2.0, k: 10.0, l0: 1.0}
Coordinates: {P1: 3, P2: 3}
Let:
  d: P2 - P1
KineticEnergy: m1/2*dot(P1', P1') + m2/2*dot(P2', P2')
PotentialEnergy: k/2*(norm(d) - l0)**2
ProblemData:
  tend: 3
  positions: {P1: [0.1, -0.2, 0.3], P2: [1.3, 0.4, 0]}
  fixedpositions: {P1, P2}
  velocities: {P1: [0, 0.3, -0.1], P2: [0.2, -0.05, 0.2]}
  samples: 61
SolverParams:
  Integration: {tol: 1.0e-10}
"""

DAMPED = """Title: Damped spring pendulum
Dimension: 2
PhysicalParams: {k: 40, l: 1, c: 0.8, m: 1.5}
PartData:
  Fixed: {O: [0, 0]}
  DampedSprings: {OB: [k, l, 0, c]}
  Particles: {B: m}
AppliedForces:
  Gravity:
ProblemData:
  tend: 3
  positions: {B: [1.2, 0.3]}
  fixedpositions: {B}
  velocities: {B: [0.5, 1.0]}
  samples: 1201
SolverParams:
  Integration: {tol: 1.0e-11}
"""

PENDULUM = """Title: Rod pendulum
Dimension: 2
PhysicalParams: {m: 2.0, mr: 0.6, L: 1.3}
PartData:
  Fixed: {O: [0.0, 0.0]}
  Rods: {OB: [mr, L]}
  Particles: {B: m}
AppliedForces:
  Gravity:
ProblemData:
  tend: 2
  positions: {B: [1.3, 0]}
  fixedpositions: {Bx}
  velocities: {By: 0.5}
  samples: 401
SolverParams:
  Integration: {tol: 1.0e-11}
"""


@pytest.fixture(scope="module")
def free_pair():
    return solver.load(TWO_PARTICLES).solve()


def test_a_free_pair_conserves_momentum_and_angular_momentum(free_pair):
    ds = free_pair
    assert int(ds["status"]) == 0
    P, L = ds["momentum"].values, ds["angular_momentum"].values
    assert ds["momentum"].dims == ("time", "axis") and ds["angular_momentum"].dims == ("time", "axis")
    # Σ m v at t0 by hand, from the fixed velocities.
    np.testing.assert_allclose(P[0], [0.4, 0.2, 0.3], atol=1e-12)
    np.testing.assert_allclose(P, np.broadcast_to(P[0], P.shape), atol=1e-9)
    np.testing.assert_allclose(L, np.broadcast_to(L[0], L.shape), atol=1e-9)
    # The pair really moves and turns (the test could fail).
    assert np.ptp(ds["P2"].values, axis=0).max() > 0.1
    # Conservative: no dissipated output, and the energy does not change.
    assert "dissipated" not in ds
    assert np.abs(ds["energy_change"].values).max() < 1e-9


def test_a_damped_models_energy_change_is_what_its_dampers_dissipated():
    ds = solver.load(DAMPED).solve()
    assert int(ds["status"]) == 0
    change, lost = ds["energy_change"].values, ds["dissipated"].values
    assert lost[-1] > 0.05                      # it does lose energy...
    assert np.all(np.diff(lost) >= -1e-12)      # ...never gains it from the dampers
    np.testing.assert_allclose(change + lost, 0.0, atol=1e-7 * lost[-1])


def test_a_pendulums_angular_momentum_changes_at_the_gravity_torque():
    model = solver.load(PENDULUM)
    ds = model.solve()
    assert int(ds["status"]) == 0
    t = ds["time"].values
    L = ds["angular_momentum"].values
    assert ds["angular_momentum"].dims == ("time",)
    B = ds["B"].values
    g, m, mr = 9.81, 2.0, 0.6
    # Torque about O of gravity (0, -g) on the bob at B and on the rod's centre B/2.
    torque = -g * (m * B[:, 0] + mr * B[:, 0] / 2)
    h = t[1] - t[0]
    dLdt = (-L[4:] + 8 * L[3:-1] - 8 * L[1:-3] + L[:-4]) / (12 * h)  # 4th-order central
    scale = np.abs(torque).max()
    np.testing.assert_allclose(dLdt, torque[2:-2], atol=1e-6 * scale)
    # Linear momentum is not conserved here (the pivot pushes): the check can fail.
    assert np.ptp(ds["momentum"].values[:, 1]) > 0.1


def test_a_dae_without_energy_has_no_balance_outputs():
    from solver.results.solution import output_layout

    dae = solver.DAE(lambda t, v, p: [v["x"][1] + v["x"][0]], variables=["x"])
    layout, coords = output_layout(dae)
    assert not {"energy_change", "dissipated", "momentum", "angular_momentum"} & set(layout)


def _jitted(value) -> bool:
    """Whether ``value`` is, or holds (in a dict, list or tuple), a jitted function."""
    if callable(value) and hasattr(value, "lower") and hasattr(value, "eval_shape"):
        return True
    if isinstance(value, dict):
        return any(_jitted(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_jitted(v) for v in value)
    return False


def test_with_params_copies_share_no_compiled_state():
    # A damped mechanism has both balance kernels (dissipation power, momenta).
    model = solver.load(DAMPED.replace("tend: 3", "tend: 0.1").replace("samples: 1201", "samples: 5"))
    dae = model.dae
    ds = model.solve()
    assert "dissipated" in ds and "momentum" in ds
    # The compiled model owns the balance kernels; the DAE holds none of them.
    assert "_balance_kernels" not in dae.__dict__
    copy = dae.with_params(c=0.4)
    shared = sorted(k for k, v in copy.__dict__.items() if _jitted(v) and dae.__dict__.get(k) is v)
    assert shared == [], f"with_params copies share compiled state: {shared}"
    order = int(ds.attrs["solver_order"])
    mine, theirs = solver.compiled_model(dae, order), solver.compiled_model(copy, order)
    assert mine is not theirs
    assert set(mine.balance_kernels) == {"power", "momenta"}
    assert all(mine.balance_kernels[k] is not theirs.balance_kernels[k] for k in mine.balance_kernels)


def test_a_daes_compiled_models_are_freed_with_it():
    """A compiled model lives as long as its DAE, no longer: each holds XLA
    executables (hundreds of memory maps), and a process that kept every one
    it ever built crossed the kernel's map limit and crashed."""
    import gc
    import weakref

    model = solver.load(DAMPED.replace("tend: 3", "tend: 0.1").replace("samples: 1201", "samples: 5"))
    ds = model.solve()
    comp = solver.compiled_model(model.dae, int(ds.attrs["solver_order"]), batch=False)
    assert solver.compiled.compiled_of(comp.integrator) is comp
    copy = model.dae.with_params(c=0.4)
    assert solver.compiled_model(copy, comp.order, batch=False) is not comp   # a copy gets its own
    alive = [weakref.ref(x) for x in (model.dae, comp, comp.integrator)]
    del model, ds, comp, copy
    jax.clear_caches()   # JAX's caches hold the jitted functions (the test conftest clears them per module)
    gc.collect()
    assert [r() is None for r in alive] == [True, True, True]


@pytest.mark.parametrize("t", [np.linspace(0.0, 3.0, 101), np.sort(np.random.default_rng(1).uniform(0, 2, 40)),
                               np.array([0.0, 0.3]), np.array([0.0, 0.3, 1.0]), np.linspace(0.0, 1.0, 4)],
                         ids=["uniform", "uneven", "two samples", "three", "four"])
def test_the_dissipated_energys_integral_is_scipys_cumulative_simpson_to_the_bit(t):
    from scipy.integrate import cumulative_simpson, cumulative_trapezoid

    from solver.results.balance import _cumulative_integral

    y = np.random.default_rng(2).normal(size=(3, t.size))
    y[1, t.size // 2:] = np.nan                       # a point that stopped: NaN from there on
    ref = (cumulative_simpson(y, x=t, axis=-1, initial=0.0) if t.size >= 3
           else cumulative_trapezoid(y, t, axis=-1, initial=0.0))
    np.testing.assert_array_equal(_cumulative_integral(y, t), ref)
    quadratic = 3 * t**2 - t + 1                      # the rule is exact for it (two samples: a line)
    exact = t**3 - t**2 / 2 + t - (t[0] ** 3 - t[0] ** 2 / 2 + t[0])
    if t.size >= 3:
        np.testing.assert_allclose(_cumulative_integral(quadratic, t), exact, rtol=1e-13, atol=1e-13)


def test_the_dissipated_energys_integral_does_not_import_scipy_integrate():
    # Importing scipy.integrate was ~0.2 s of every damped model's first solve.
    import subprocess
    import sys

    code = ("import sys, numpy as np; from solver.results.balance import _cumulative_integral; "
            "_cumulative_integral(np.ones((2, 5)), np.linspace(0, 1, 5)); print('scipy.integrate' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_single_runs_series_built_quickly_equal_a_batchs_to_rounding():
    # One run's residual, energy and balance series come from quick builds (no LLVM optimisation,
    # solver.compiled: compiled once a solve), a batch's from the optimised ones: the same programs'
    # numbers up to the rounding of LLVM's rewrites.
    model = solver.load(DAMPED, overrides={"ProblemData": {"tend": 1.0, "samples": 101}})
    one = model.solve()
    batch = solver.solve_batch(model, {"c": np.array([0.8, 0.9])})
    compiled = solver.compiled_model(model.dae, int(one.attrs["solver_order"]), batch=False)
    assert compiled._output_series_one is not compiled._output_series
    assert compiled._balance_kernels_one["power"] is not compiled.balance_kernels["power"]
    for name in ("constraint_residual", "energy", "energy_change", "dissipated", "momentum"):
        ours, theirs = one[name].values, batch[name].values[0]
        scale = max(1.0, float(np.max(np.abs(theirs))))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12 * scale, err_msg=name)
