"""Seed 004, the car (``configs/mechanisms/car.yaml``), against a reference nobody here wrote.

The config is the article's car in the Lagrangian kind: a rigid frame
(position X of the centre of mass, Z-Y-X Euler angles yaw, pitch, roll) on
four struts with springs and dampers, and tyre forces in the ground plane at
the contact points (a drive force at the rear, a linear tyre laterally whose
cornering stiffness grows with the normal load, front wheels steered by a
smoothed step).  The file builds the Euler-Lagrange equations by automatic
differentiation of its energies and the virtual work of its forces.

The reference derives the same car again with ``sympy.physics.mechanics``,
by Kane's method (Newton-Euler, not Lagrange): a ``RigidBody`` in a
``ReferenceFrame`` oriented ``'zyx'`` by (yaw, pitch, roll), an inertia
dyadic, ``Point`` velocities from positions, and the forces as loads on
points: gravity at the centre of mass, each strut's spring and damper force
on the frame at its mount and back on the massless wheel, and the ground's
force on the wheel at the contact point (normal load from the wheel's
balance along the strut, solved here from the force vector itself, plus the
tyre's longitudinal and lateral forces).  Its M(q) u' = f(t, q, u) is
lambdified to numpy and integrated by scipy's DOP853 at rtol = atol = 1e-12.
Nothing of it comes from the solver or from the YAML file's expressions; the
tests only read the file's parameter values.

The sympy derivation (5-9 s) is done once per module; the config is
compiled once (the compact Taylor engine: about 45 s with an empty
compilation cache on 2 shared cores) and its other runs, and the command
line's ``simulate``, reuse that program; ``check`` compiles its own stage-0
Newton (about 8 s with an empty cache; 31 s while it compiled the whole
order-2 series).  With a warm cache the module
takes about 50 s.
"""

import json
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import solver
from solver.integrate.integrator import order_for_tol

sp = pytest.importorskip("sympy")
me = pytest.importorskip("sympy.physics.mechanics")

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"
CAR = CONFIGS / "car.yaml"
PARAMS = "m Ixx Iyy Izz Ixz lf lr b e kf kr cf cr l0 CN Fd d0 tau g".split()
T = np.linspace(0.0, 1.0, 41)          # the compared horizon, every 25 ms


@pytest.fixture(scope="module")
def car():
    return solver.load(CAR)


@pytest.fixture(scope="module")
def order(car):
    """The Taylor order of the file's own settings, so that every run here and
    the command line's ``simulate`` use one compiled program."""
    return car.order or order_for_tol(car.tol)


@pytest.fixture(scope="module")
def kane():
    """The car by Kane's method: numpy callables M(t, q, u, p), f(t, q, u, p),
    the energy E(q, u, p) and the four normal loads N(t, q, u, p)."""
    start = time.perf_counter()
    P = sp.symbols(PARAMS)
    p = dict(zip(PARAMS, P))
    q = me.dynamicsymbols("x y z yaw pitch roll")
    u = me.dynamicsymbols("ux uy uz wyaw wpitch wroll")
    t = me.dynamicsymbols._t
    x, y, z, yaw, pitch, roll = q
    N = me.ReferenceFrame("N")                      # the world, z up, ground z = 0
    B = me.ReferenceFrame("B")                      # the frame of the car
    B.orient_body_fixed(N, (yaw, pitch, roll), "zyx")
    O = me.Point("O")
    O.set_vel(N, 0)
    G = O.locatenew("G", x * N.x + y * N.y + z * N.z)
    G.set_vel(N, G.pos_from(O).dt(N))
    inertia = me.inertia(B, p["Ixx"], p["Iyy"], p["Izz"], izx=-p["Ixz"])
    body = me.RigidBody("car", G, B, p["m"], (inertia, G))
    loads = [(G, -p["m"] * p["g"] * N.z)]
    delta = p["d0"] * (1 - sp.exp(-t / p["tau"]))
    Nn = sp.Symbol("Nn")
    potential = p["m"] * p["g"] * z
    normal = []
    for i, (sx, sy, axle) in enumerate([(p["lf"], p["b"], "f"), (p["lf"], -p["b"], "f"),
                                        (-p["lr"], p["b"], "r"), (-p["lr"], -p["b"], "r")]):
        k, c = (p["kf"], p["cf"]) if axle == "f" else (p["kr"], p["cr"])
        mount = G.locatenew(f"P{i}", sx * B.x + sy * B.y - p["e"] * B.z)
        mount.v2pt_theory(G, N, B)
        s = (mount.pos_from(O) & N.z) / (B.z & N.z)        # strut length along -B.z to the ground
        contact = mount.locatenew(f"C{i}", -s * B.z)
        contact.set_vel(N, contact.pos_from(O).dt(N))
        strut = k * (p["l0"] - s) - c * s.diff(t)          # spring and damper force, compressive > 0
        heading = yaw + (delta if axle == "f" else 0)
        e_long = sp.cos(heading) * N.x + sp.sin(heading) * N.y
        e_lat = -sp.sin(heading) * N.x + sp.cos(heading) * N.y
        v = contact.vel(N)
        slip = sp.atan((v & e_lat) / (v & e_long))
        drive = 0 if axle == "f" else p["Fd"]
        ground = Nn * N.z + drive * e_long - p["CN"] * Nn * slip * e_lat
        # The massless wheel slides on the strut: along B.z the ground's force
        # balances the strut's (ground . B.z = strut, linear in the load Nn).
        along = ground & B.z
        load = (strut - along.subs(Nn, 0)) / along.diff(Nn)
        loads += [(mount, strut * B.z), (contact, ground.subs(Nn, load) - strut * B.z)]
        potential += k / 2 * (s - p["l0"]) ** 2
        normal.append(load)
    kane = me.KanesMethod(N, q_ind=q, u_ind=u,
                          kd_eqs=[qi.diff(t) - ui for qi, ui in zip(q, u)])
    kane.kanes_equations([body], loads)
    energy = body.kinetic_energy(N) + potential
    qs = sp.symbols("x y z yaw pitch roll")
    us = sp.symbols("ux uy uz wyaw wpitch wroll")
    ts = sp.Symbol("t")
    plain = dict(zip(q, qs))
    plain.update(zip(u, us))

    def numeric(expr):
        expr = me.msubs(me.msubs(expr, {qi.diff(t): ui for qi, ui in zip(q, u)}), plain).subs(t, ts)
        return sp.lambdify((ts, qs, us, P), expr, "numpy", cse=True)

    out = {"M": numeric(kane.mass_matrix), "f": numeric(kane.forcing),
           "E": numeric(energy), "N": numeric(sp.Matrix(normal)),
           "seconds": time.perf_counter() - start}
    return out


def _initial_state(pv):
    """The file's initial positions and velocities, from its parameters."""
    return np.r_[0.0, 0.0, pv["z0"], 0.0, pv["pitch0"], pv["roll0"],
                 pv["u0"], 0.0, pv["vz0"], pv["yawd0"], pv["pitchd0"], pv["rolld0"]]


def _reference(kane, pv, t=T):
    pvec = [float(pv[n]) for n in PARAMS]

    def rhs(tt, y):
        qq, uu = y[:6], y[6:]
        M = np.asarray(kane["M"](tt, qq, uu, pvec), dtype=float)
        f = np.asarray(kane["f"](tt, qq, uu, pvec), dtype=float).ravel()
        return np.r_[uu, np.linalg.solve(M, f)]

    sol = solve_ivp(rhs, (t[0], t[-1]), _initial_state(pv), t_eval=t, method="DOP853",
                    rtol=1e-12, atol=1e-12)
    assert sol.success, sol.message
    return sol.y.T


def _state(ds):
    """(time, 12): X, yaw, pitch, roll and their rates, as the reference orders them."""
    pos = [ds["X"].values] + [ds[n].values[:, None] for n in ("yaw", "pitch", "roll")]
    vel = [ds["X_d1"].values] + [ds[n + "_d1"].values[:, None] for n in ("yaw", "pitch", "roll")]
    return np.concatenate(pos + vel, axis=1)


@pytest.fixture(scope="module")
def car_run(car, order):
    ds = car.solve(t_span=(0.0, 1.0), t_eval=T, tol=1e-12, order=order)
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    return ds


def test_the_car_is_the_articles_model(car):
    """Six generalised coordinates (position and Euler angles of the frame), no
    constraints, damping and tyre forces switched on, a nontrivial start."""
    assert car.kind == "Lagrangian" and car.dae.n_c == 0
    assert [c.name for c in car.dae.coords] == ["X", "yaw", "pitch", "roll"]
    assert car.dae.structure.dof == 12 and car.conservative is False
    pv = car.params
    assert min(pv[n] for n in ("cf", "cr", "CN", "Fd", "d0", "Ixz")) > 0
    assert min(abs(pv[n]) for n in ("pitch0", "roll0", "vz0", "pitchd0", "rolld0", "yawd0")) > 0
    assert pv["u0"] > 10


def test_the_car_follows_kanes_equations(car, car_run, kane):
    """Position, attitude and all velocities agree with the sympy/Kane
    reference to 1e-8 over 1 s of a step-steer turn entry at 15 m/s, damped,
    with heave, pitch and roll set going (measured: positions 1.4e-13,
    velocities 6e-12)."""
    ref = _reference(kane, car.params)
    got = _state(car_run)
    err = np.abs(got - ref).max(axis=0)
    assert err.max() < 1e-8, err
    # It is a real manoeuvre: the car turns, rolls out of the turn, bounces,
    # and every tyre stays loaded (the model has no lift-off).
    yaw, roll, heave = ref[:, 3], ref[:, 5], ref[:, 2]
    assert yaw[-1] > 0.15 and roll[-1] > 0.005 and np.ptp(heave) > 0.005
    pvec = [float(car.params[n]) for n in PARAMS]
    loads = np.array([np.ravel(kane["N"](t, y[:6], y[6:], pvec)) for t, y in zip(T, ref)])
    assert loads.min() > 300.0
    # The outer (right) tyres carry more than the inner ones once turning.
    assert np.all(loads[-1, [1, 3]] > loads[-1, [0, 2]] + 50.0)


def test_without_damping_and_tyres_the_energy_is_conserved(car, order, kane):
    """With cf = cr = 0 and no tyre forces (CN = Fd = 0) the car bounces,
    pitches and rolls on its springs: its energy output equals the
    reference's T + V at t0 and stays constant to 1e-10 (relative; measured
    8e-15); the motion still agrees with the reference (measured 2e-11)."""
    off = {"cf": 0.0, "cr": 0.0, "CN": 0.0, "Fd": 0.0}
    ds = car.solve(off, t_span=(0.0, 1.0), t_eval=T, tol=1e-12, order=order)
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    pv = {**car.params, **off}
    y0 = _initial_state(pv)
    E0 = float(kane["E"](0.0, y0[:6], y0[6:], [float(pv[n]) for n in PARAMS]))
    e = ds.energy.values
    assert e[0] == pytest.approx(E0, rel=1e-13)
    assert np.max(np.abs(e - E0)) < 1e-10 * abs(E0)
    assert np.max(np.abs(ds.energy_change.values)) < 1e-10 * abs(E0)
    ref = _reference(kane, pv)
    np.testing.assert_allclose(_state(ds), ref, rtol=0, atol=1e-8)
    assert np.ptp(ref[:, 2]) > 0.005 and np.ptp(ref[:, 5]) > 0.02   # it does bounce and roll


def test_the_animation_follows_the_car(car, car_run):
    """The camera tracks the four strut mounts; every link (the frame and the
    four struts) joins drawn points, and the view stays the car's size while
    the car drives 15 m."""
    from solver.results.plot import follow_limits

    anim = car.animation
    assert anim["follow"] == ["P1", "P2", "P3", "P4"]
    points = car.point_series(car_run)
    assert set(points) == {"P1", "P2", "P3", "P4", "C1", "C2", "C3", "C4", "X"}
    struts = {("P1", "C1"), ("P2", "C2"), ("P3", "C3"), ("P4", "C4")}
    assert struts <= {tuple(link) for link in car.links}
    assert all(a in points and b in points for a, b in car.links)
    # The contact points are on the ground, under the car.
    for n in ("C1", "C2", "C3", "C4"):
        np.testing.assert_allclose(points[n][:, 2], 0.0, atol=1e-12)
    lims = follow_limits(points, anim["follow"])
    centre = lims.mean(axis=2)
    np.testing.assert_allclose(centre, np.mean([points[n] for n in anim["follow"]], axis=0),
                               atol=1e-12)
    assert np.ptp(centre[:, 0]) > 10.0                          # it drove away...
    assert np.all(lims[:, :, 1] - lims[:, :, 0] < 5.0)          # ...and stayed in view


def test_the_car_through_the_command_line(tmp_path, capsys, monkeypatch, car_run):
    """``mechsweep check`` and a short ``simulate --json`` of the shipped file
    (1 s) exit 0; the run (at the file's tol 1e-10) ends where the module's
    run (1e-12) does, to 1e-8."""
    import jax

    from sweep.cli.app import main

    # The command line's persistent compilation cache is this session's
    # (tests/conftest.py), so simulate loads the program the module compiled.
    if jax.config.jax_compilation_cache_dir:
        monkeypatch.setenv("MECHSWEEP_JAX_CACHE", jax.config.jax_compilation_cache_dir)
    # The module's horizon and output times, so that simulate's program is
    # the one the module compiled (the output times' count is in its shape).
    path = tmp_path / "car.yaml"
    text = CAR.read_text()
    assert "  tend: 3\n" in text and "  samples: 151\n" in text
    path.write_text(text.replace("  tend: 3\n", f"  tend: {T[-1]:g}\n")
                    .replace("  samples: 151\n", f"  samples: {len(T)}\n"))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mechanical DOF (coordinates - constraints): 6" in out
    assert main(["simulate", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status_code"] == 0 and info["t_end"] == pytest.approx(1.0)
    at = car_run.isel(time=-1)
    for k in range(3):
        assert info["final"][f"X[{k}]"] == pytest.approx(float(at["X"][k]), abs=1e-8)
    for n in ("yaw", "pitch", "roll"):
        assert info["final"][n] == pytest.approx(float(at[n]), abs=1e-8)
