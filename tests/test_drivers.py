"""Inverse dynamics: driving constraints (issue 15, part 3).

A model prescribes a coordinate, a component or a scalar ``Let`` quantity as
a function of time (``Drivers`` in the Lagrangian and Mechanism kinds,
``drivers=`` in :func:`solver.lagrangian`), and every result reports
``torque_{driver}``, the generalised force the drive applies.

References nobody here wrote:

* the pendulum driven at θ(t) = A sin(ωt): the motor's torque
  m L² θ'' + m g L sin θ with θ'' = −A ω² sin(ωt) written out by hand (and the
  tangential force m L θ'' + m g sin θ when the arc length L θ is driven);
* a particle on a rod whose x is driven: Newton's equations with the rod's
  tension eliminated, F = m x'' − x (m y'' + m g)/y on y = −√(L² − x²);
* the driven RSCR (``configs/mechanisms/rscr_driven.yaml``): the power
  balance torque·ω = dE/dt, dE/dt by an 8th-order central finite difference
  of the dataset's ``energy`` on the 301-sample output grid (h = 0.005 s;
  truncation error ~h⁸ E⁽⁹⁾, far below the tolerance), and the crank angle
  recomputed from C1 with numpy.
"""

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import jax.numpy as jnp

import solver
from solver.errors import InputError
from solver.results.solution import output_layout
from sweep.cli.app import main
from sweep.pipeline import batch_fn, build_context, remember_model
from sweep.run import run_sweep
from sweep.spec import load_sweep
from sweep.store import open_store

ROOT = Path(__file__).resolve().parents[1]
RSCR_DRIVEN = ROOT / "configs" / "mechanisms" / "rscr_driven.yaml"

M, G, L, A, W = 1.3, 9.81, 0.7, 0.5, 2.0

PENDULUM = """\
Title: Pendulum driven at a prescribed angle
Kind: Lagrangian
PhysicalParams: {m: 1.3, g: 9.81, L: 0.7, A: 0.5, w: 2.0}
Coordinates: [theta]
KineticEnergy: m*L**2/2*theta'**2
PotentialEnergy: -m*g*L*cos(theta)
Drivers:
  theta: A*sin(w*t)
ProblemData:
  tend: 2
  positions: {theta: 0.3}   # a guess: the driver sets theta(0) = 0, theta'(0) = A w
  samples: 41
SolverParams:
  Integration: {tol: 1.0e-10}
"""


def hand_torque(t, m=M, g=G, length=L):
    """m L² θ'' + m g L sin θ for θ = A sin(ωt), written out by hand."""
    theta = A * np.sin(W * t)
    theta_dd = -A * W ** 2 * np.sin(W * t)
    return m * length ** 2 * theta_dd + m * g * length * np.sin(theta)


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    """The driven pendulum model (from its file, for the sweep) and one solve."""
    path = tmp_path_factory.mktemp("pendulum") / "driven.yaml"
    path.write_text(PENDULUM)
    model = solver.load(path)
    return model, model.solve()


# ------------------------------------------------------------------ the pendulum
def test_driven_pendulum_torque_is_the_hand_computed_motor_torque(pendulum):
    model, ds = pendulum
    assert int(ds.status) == 0
    t = ds.time.values
    np.testing.assert_allclose(ds.theta.values, A * np.sin(W * t), rtol=0, atol=1e-10)
    np.testing.assert_allclose(ds.theta_d1.values, A * W * np.cos(W * t), rtol=0, atol=1e-9)
    tau = ds.torque_theta
    assert tau.dims == ("time",)
    np.testing.assert_allclose(tau.values, hand_torque(t), rtol=0, atol=1e-8)
    assert "drive theta" in tau.attrs["long_name"] and tau.attrs["driver"] == "theta"
    # One constraint, the driver's, with the opposite sign of the torque.
    np.testing.assert_array_equal(ds.lam.values[:, 0], -tau.values)
    assert model.conservative is False and ds.attrs["conservative"] == 0


def test_solve_batch_gives_each_point_its_torque(pendulum):
    model, _ = pendulum
    lengths = np.array([0.5, 0.7, 1.1])
    ds = solver.solve_batch(model, {"L": lengths})
    assert ds.torque_theta.dims == ("point", "time")
    assert ds.status.values.tolist() == [0, 0, 0]
    t = ds.time.values
    for i, length in enumerate(lengths):
        np.testing.assert_allclose(ds.torque_theta.values[i], hand_torque(t, length=length),
                                   rtol=0, atol=1e-8)


def test_a_sweep_store_holds_the_torque_of_every_point(pendulum, tmp_path):
    model, _ = pendulum
    sweep_file = Path(model.path).parent / "sweep.yaml"
    sweep_file.write_text("""\
Title: Driven pendulum, mass and length
Model: driven.yaml
Sweep:
  zip:
    m: {values: [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]}
    L: {values: [0.4, 0.6, 0.8, 1.0, 1.2, 1.4]}
Outputs:
  metrics:
    peak_torque: {of: torque_theta, reduce: absmax}
    top_speed: {of: theta_d1, reduce: max}
Batch: 3
""")
    spec = load_sweep(sweep_file)
    context = build_context(spec, model)
    # The sweep's batches run in this process on the fixture's model: the
    # compiled functions of solve_batch's 3-point batches are reused.
    remember_model(context.key, model)
    out = tmp_path / "store.zarr"
    run_sweep(spec, batch_fn, context, str(out), workers=0, progress=False)
    ds = open_store(str(out))
    assert ds.status.values.tolist() == [0] * 6
    tau = ds.torque_theta.values
    assert tau.shape == (6, ds.sizes["time"])
    assert ds.torque_theta.attrs["driver"] == "theta"
    t = ds.time.values
    for i in range(6):
        m, length = float(ds.m.values[i]), float(ds.L.values[i])
        np.testing.assert_allclose(tau[i], hand_torque(t, m=m, length=length), rtol=0, atol=1e-8)
        # Metrics reduce any time series of the run, the drive's torque and a
        # derivative included: the peak motor torque per design, and θ' = A ω cos ωt
        # at its largest, A ω, at t = 0.
        peak = np.max(np.abs(hand_torque(t, m=m, length=length)))
        assert float(ds.peak_torque.values[i]) == pytest.approx(peak, abs=1e-8)
        assert float(ds.top_speed.values[i]) == pytest.approx(A * W, abs=1e-10)


def test_a_metric_of_a_series_without_sensitivities_is_refused_with_sensitivities(pendulum, capsys):
    model, _ = pendulum
    sweep_file = Path(model.path).parent / "sweep_sens.yaml"
    sweep_file.write_text("Model: driven.yaml\nSweep: {product: {L: [0.5, 1.0]}}\n"
                          "Outputs: {metrics: {peak: {of: torque_theta, reduce: absmax}}, sensitivities: [L]}\n")
    assert main(["sweep", str(sweep_file), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"{sweep_file}: Outputs.sensitivities: metric 'peak' reduces torque_theta, which has "
                        "no sensitivity (only variables and their components have); remove "
                        "Outputs.sensitivities or that metric\n")
    sweep_file.write_text("Model: driven.yaml\nSweep: {product: {L: [0.5, 1.0]}}\n"
                          "Outputs: {metrics: {peak: {of: torque, reduce: absmax}}}\n")
    assert main(["sweep", str(sweep_file), "--dry-run"]) == 2
    assert capsys.readouterr().err.endswith(
        f"{sweep_file}: Outputs.metrics.peak.of: metric 'peak': unknown output 'torque'; use a variable "
        "(theta, lam), a component such as lam[0] or Bx, or another time series of the run (theta_d1, "
        "constraint_residual, energy, energy_change, torque_theta)\n")


# ------------------------------------------------------------------ Python API
def _pendulum_lagrangian(t, q, qd, p):
    return 0.5 * p["m"] * p["L"] ** 2 * qd["theta"] ** 2 + p["m"] * p["g"] * p["L"] * jnp.cos(q["theta"])


def test_python_drivers_of_a_function_of_q_give_its_conjugate_force():
    # Driving the arc length s = L θ: the drive's force along s is the
    # tangential force m L θ'' + m g sin θ (the torque divided by L).
    dae = solver.lagrangian(
        _pendulum_lagrangian, ["theta"], params={"m": M, "g": G, "L": L},
        drivers={"s": (lambda t, q, p: p["L"] * q["theta"],
                       lambda t, p: p["L"] * A * jnp.sin(W * t), "N")})
    assert dae.n_c == 1 and [d.name for d in dae.drivers] == ["s"]
    t = np.linspace(0.0, 1.5, 31)
    ds = solver.solve(dae, (0.0, 1.5), values={"theta": 0.0}, tol=1e-10, t_eval=t)
    assert int(ds.status) == 0
    np.testing.assert_allclose(ds.torque_s.values, hand_torque(t) / L, rtol=0, atol=1e-8)
    assert ds.torque_s.attrs["units"] == "N"


def test_python_driver_of_a_coordinate_takes_its_force_units_from_the_coordinate():
    dae = solver.lagrangian(_pendulum_lagrangian, ["theta"], params={"m": M, "g": G, "L": L},
                            units={"theta": "rad"},
                            drivers={"theta": ("theta", lambda t, p: A * jnp.sin(W * t))})
    layout, _ = output_layout(dae)
    dims, attrs = layout["torque_theta"]
    assert dims == ("time",) and attrs["units"] == "N m"
    assert dae.equation_names() == ["f0", "drive_theta"]


@pytest.mark.parametrize("drivers, message", [
    ({"P": ("P", lambda t, p: t)}, "'P' is a 2-vector coordinate; a driver prescribes one scalar"),
    ({"x": ("nope", lambda t, p: t)}, "'nope' is not a coordinate"),
    ({"x": ("P[2]", lambda t, p: t)}, "P has 2 component(s)"),
    ({"x": ("P[0]",)}, "expected (quantity, value) or (quantity, value, units)"),
    ({"x": (lambda t, q, p: q["P"], lambda t, p: t)}, "the quantity must be a scalar"),
    ({"x": ("P[0]", "sin(t)")}, "the value must be a callable value(t, p) or a number"),
    ({"a b": ("P[0]", 1.0)}, "must be an identifier"),
])
def test_python_driver_mistakes_are_input_errors(drivers, message):
    with pytest.raises(InputError) as err:
        solver.lagrangian(lambda t, q, qd, p: jnp.dot(qd["P"], qd["P"]) / 2, {"P": 2},
                          drivers=drivers)
    assert message in str(err.value)


# ------------------------------------------------------------------ Mechanism kind
MECHANISM = """\
Title: Particle on a rod, x driven
Kind: Mechanism
Dimension: 2
PhysicalParams: {m: 1.5, len: 1.0, A: 0.3, w: 2.0}
PartData:
  Fixed: {O: [0, 0]}
  Particles: {B: m}
  Rods: {OB: [0, len]}
AppliedForces:
  Gravity:
Drivers:
  Bx: A*sin(w*t)
ProblemData:
  tend: 1.5
  positions: {B: [0, -1]}
  samples: 31
"""


def test_mechanism_driver_force_is_newtons_with_the_rod_tension_eliminated():
    model = solver.load(MECHANISM)
    ds = model.solve()
    assert int(ds.status) == 0
    m, g, length, amp, w = 1.5, 9.81, 1.0, 0.3, 2.0
    t = ds.time.values
    x, xd, xdd = amp * np.sin(w * t), amp * w * np.cos(w * t), -amp * w ** 2 * np.sin(w * t)
    s = np.sqrt(length ** 2 - x ** 2)
    y = -s
    ydd = (xd ** 2 + x * xdd) / s + x ** 2 * xd ** 2 / s ** 3
    force = m * xdd - x * (m * ydd + m * g) / y
    np.testing.assert_allclose(ds.B.sel(axis="x").values, x, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ds.torque_Bx.values, force, rtol=0, atol=1e-8)
    assert ds.torque_Bx.attrs["units"] == "N"


def test_check_counts_a_driven_degree_of_freedom_as_driven_not_as_a_constraint(tmp_path, capsys):
    # The driven pendulum: one coordinate, no constraint of its own, its angle
    # prescribed: a 1-DOF mechanism with that DOF driven, none left free.
    path = tmp_path / "driven.yaml"
    path.write_text(PENDULUM)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mechanical DOF (coordinates - constraints): 1, 1 of them driven (theta): 0 free\n" in out


# ------------------------------------------------------------------ RSCR at constant crank speed
@pytest.fixture(scope="module")
def rscr_run(tmp_path_factory):
    """``mechsweep simulate rscr_driven.yaml --json --out run.nc`` once."""
    out = tmp_path_factory.mktemp("rscr") / "run.nc"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["simulate", str(RSCR_DRIVEN), "--json", "--out", str(out)])
    return code, stdout.getvalue(), out


def test_cli_simulates_the_driven_rscr(rscr_run):
    code, stdout, out = rscr_run
    assert code == 0
    info = json.loads(stdout)
    assert info["status"] == "success" and info["conservative"] is False
    assert "energy_drift" not in info and "energy_change" in info
    assert info["max_constraint_residual"] < 1e-8


def test_rscr_crank_follows_the_drive_and_the_power_balance_holds(rscr_run):
    _, _, out = rscr_run
    with xr.open_dataset(out) as ds:
        ds = ds.load()
    params = json.loads(ds.attrs["parameters"])
    omega, phi0, delta = params["omega"], params["phi0"], params["delta"]
    t = ds.time.values
    # Crank angle about w = (cos δ, sin δ, 0), 0 pointing down: recomputed from C1.
    c1 = ds.C1.values
    w = np.array([np.cos(delta), np.sin(delta), 0.0])
    down = np.array([0.0, 0.0, -1.0])
    phi = np.arctan2(c1 @ np.cross(w, down), c1 @ down)
    np.testing.assert_allclose(phi, phi0 + omega * t, rtol=0, atol=1e-9)
    assert ds.torque_phi.attrs["units"] == "N m"

    power = ds.torque_phi.values * omega
    energy = ds.energy.values
    h = t[1] - t[0]
    np.testing.assert_allclose(np.diff(t), h, rtol=1e-9)
    c = np.array([1 / 280, -4 / 105, 1 / 5, -4 / 5, 0.0, 4 / 5, -1 / 5, 4 / 105, -1 / 280])
    dEdt = np.array([c @ energy[i - 4:i + 5] for i in range(4, len(t) - 4)]) / h
    scale = np.max(np.abs(power))
    assert scale > 1.0                                   # the motor does real work
    assert np.max(np.abs(dEdt - power[4:-4])) <= 1e-6 * scale


# ------------------------------------------------------------------ YAML messages
def _load_error(text: str) -> str:
    with pytest.raises(InputError) as err:
        solver.load(text)
    return str(err.value)


def test_a_driver_key_that_is_not_drivable_is_named_with_the_valid_ones():
    text = PENDULUM.replace("  theta: A*sin(w*t)", "  psi: A*sin(w*t)")
    assert _load_error(text) == (
        "line 8: Drivers.psi: 'psi' is not a scalar coordinate, a component or a scalar Let "
        "name; valid driven quantities: theta (define a scalar Let, e.g. an angle with atan2, "
        "to drive anything else)")


def test_drivers_in_kind_dae_say_to_write_an_equation():
    text = """\
Kind: DAE
Variables: [theta]
Equations: [theta'' + sin(theta)]
Drivers: {theta: 0.5*sin(2*t)}
ProblemData: {tend: 1, values: {theta: 0}}
"""
    assert _load_error(text) == (
        "line 4: Drivers: Kind: DAE has no Drivers (they are for Kind: Lagrangian and Mechanism, "
        "where the equations of motion are built for you); write the driving equation as an "
        "ordinary equation: add a multiplier variable (e.g. tau) to Variables, add it to the "
        "equation of motion of the driven variable (theta'' + ... - tau), and add the equation "
        "theta - (0.5*sin(2*t)) to Equations; tau is then the generalised force of the drive")


def test_a_bad_driver_expression_gets_the_expression_languages_message():
    text = PENDULUM.replace("theta: A*sin(w*t)", "theta: A*sin(w*t")
    assert _load_error(text) == ("line 8: Drivers.theta: '(' at column 6 is never closed\n"
                                 "  A*sin(w*t\n       ^")
    text = PENDULUM.replace("theta: A*sin(w*t)", "theta: theta + t")
    assert "Drivers.theta: unknown name 'theta'; valid names (closest first): t" in _load_error(text)


def test_a_driven_coordinate_cannot_be_fixed():
    text = PENDULUM.replace("  samples: 41", "  samples: 41\n  fixedpositions: [theta]")
    assert "ProblemData.fixedpositions.theta: 'theta' is driven (Drivers.theta): its initial " \
           "value and velocity come from the driver" in _load_error(text)
    whole = MECHANISM.replace("positions: {B: [0, -1]}", "positions: {B: [0, -1]}\n  "
                                                          "fixedpositions: {B}")
    assert "'B' includes Bx, which is driven (Drivers.Bx)" in _load_error(whole)
    point = MECHANISM.replace("  Bx: A*sin(w*t)", "  B: A*sin(w*t)")
    assert "'B' is a whole point; a driver prescribes one scalar: name a component (Bx, By)" \
        in _load_error(point)


def test_over_fixing_a_let_driven_model_names_the_fixed_values():
    # s = P[0]/L is driven, so the pendulum has no degree of freedom left:
    # fixing Py too over-determines the initial point.
    text = """\
Kind: Lagrangian
PhysicalParams: {m: 1.0, g: 9.81, L: 0.7}
Coordinates: {P: 2}
Let:
  s: P[0]/L
KineticEnergy: m/2*dot(P', P')
PotentialEnergy: m*g*P[1]
Constraints:
  - dot(P, P) - L**2
Drivers: {s: 0.5*sin(2*t)}
ProblemData: {tend: 1, positions: {P: [0.1, -0.6]}, fixedpositions: {Py}, samples: 11}
"""
    model = solver.load(text)
    assert model.dae.structure.dof == 0
    with pytest.raises(InputError) as err:
        model.solve()
    assert "the fixed initial values are inconsistent" in str(err.value)
    assert "Free (unfix) some of ['P[1]']" in str(err.value)
