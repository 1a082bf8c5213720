"""Seed 004, the car (``configs/mechanisms/car.yaml``), against a reference nobody here wrote.

The config is the article's car in the Lagrangian kind: a rigid frame
(position X of the centre of mass, Z-Y-X Euler angles yaw, pitch, roll) on
four struts with springs and dampers, a wheel with mass sliding on each
strut, tyres that push only while they touch the ground (``max(0, ...)``, so
a wheel can leave the ground and land again), and tyre forces in the ground
plane at the wheel centres (a drive force at the rear, a linear tyre
laterally, both proportional to the load; front wheels steered by a smoothed
step).  The file builds the Euler-Lagrange equations by automatic
differentiation of its energies and the virtual work of its forces; each
tyre's ``max`` is a switch event of the integrator.

The reference derives the same car again with ``sympy.physics.mechanics``,
by Kane's method (Newton-Euler, not Lagrange): a ``RigidBody`` in a
``ReferenceFrame`` oriented ``'zyx'`` by (yaw, pitch, roll), an inertia
dyadic, four ``Particle`` wheels at points located along the struts,
``Point`` velocities from positions, and the forces as loads on points:
gravity, each strut's spring and damper force on the frame at its mount and
back on the wheel, and the ground's force on the wheel (its normal load and
the tyre's longitudinal and lateral forces).  Its M(q) u' = f(t, q, u, N) is
lambdified to numpy and integrated by scipy's DOP853 at rtol = atol = 1e-12
from one contact change to the next, found by ``solve_ivp``'s own terminal
events (a hybrid simulation: each tyre is loaded or not for a whole
segment).  Nothing of it comes from the solver or from the YAML file's
expressions; the tests only read the file's parameter values.

The sympy derivation (about 5 s) is done once per module; the config is
compiled once (the compact Taylor engine: about 85 s with an empty
compilation cache on 2 shared cores) and its other runs, and the command
line's ``simulate``, reuse that program; ``check`` compiles its own stage-0
Newton.  With a warm cache the module takes about 50 s.
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
PARAMS = "m Ixx Iyy Izz Ixz lf lr b e kf kr cf cr l0 mw kt r0 CN Cx d0 tau g".split()
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
    """The car by Kane's method: numpy callables M(t, q, u, p, N), f(t, q, u,
    p, N), the energy E(t, q, u, p, N) (N the four tyre loads) and the wheel
    centres' heights h(t, q, u, p, N)."""
    start = time.perf_counter()
    P = sp.symbols(PARAMS)
    p = dict(zip(PARAMS, P))
    q = me.dynamicsymbols("x y z yaw pitch roll s1 s2 s3 s4")
    u = me.dynamicsymbols("ux uy uz wyaw wpitch wroll v1 v2 v3 v4")
    t = me.dynamicsymbols._t
    x, y, z, yaw, pitch, roll = q[:6]
    N = me.ReferenceFrame("N")                      # the world, z up, ground z = 0
    B = me.ReferenceFrame("B")                      # the frame of the car
    B.orient_body_fixed(N, (yaw, pitch, roll), "zyx")
    O = me.Point("O")
    O.set_vel(N, 0)
    G = O.locatenew("G", x * N.x + y * N.y + z * N.z)
    G.set_vel(N, G.pos_from(O).dt(N))
    inertia = me.inertia(B, p["Ixx"], p["Iyy"], p["Izz"], izx=-p["Ixz"])
    bodies = [me.RigidBody("car", G, B, p["m"], (inertia, G))]
    loads = [(G, -p["m"] * p["g"] * N.z)]
    delta = p["d0"] * (1 - sp.exp(-t / p["tau"]))
    tyre_loads = sp.symbols("N1:5")
    potential = p["m"] * p["g"] * z
    heights = []
    for i, (sx, sy, axle) in enumerate([(p["lf"], p["b"], "f"), (p["lf"], -p["b"], "f"),
                                        (-p["lr"], p["b"], "r"), (-p["lr"], -p["b"], "r")]):
        k, c = (p["kf"], p["cf"]) if axle == "f" else (p["kr"], p["cr"])
        s = q[6 + i]
        mount = G.locatenew(f"P{i}", sx * B.x + sy * B.y - p["e"] * B.z)
        mount.v2pt_theory(G, N, B)
        wheel = mount.locatenew(f"W{i}", -s * B.z)            # slides on the strut, along -B.z
        wheel.set_vel(N, wheel.pos_from(O).dt(N))
        bodies.append(me.Particle(f"wheel{i}", wheel, p["mw"]))
        strut = k * (p["l0"] - s) - c * s.diff(t)           # spring and damper force, compressive > 0
        heading = yaw + (delta if axle == "f" else 0)
        e_long = sp.cos(heading) * N.x + sp.sin(heading) * N.y
        e_lat = -sp.sin(heading) * N.x + sp.cos(heading) * N.y
        v = wheel.vel(N)
        slip = sp.atan((v & e_lat) / (v & e_long))
        load = tyre_loads[i]
        drive = 0 if axle == "f" else p["Cx"] * load
        ground = load * N.z + drive * e_long - p["CN"] * load * slip * e_lat
        loads += [(mount, strut * B.z), (wheel, ground - strut * B.z - p["mw"] * p["g"] * N.z)]
        height = wheel.pos_from(O) & N.z
        potential += k / 2 * (s - p["l0"]) ** 2 + p["mw"] * p["g"] * height
        heights.append(height)
    kane = me.KanesMethod(N, q_ind=q, u_ind=u,
                          kd_eqs=[qi.diff(t) - ui for qi, ui in zip(q, u)])
    kane.kanes_equations(bodies, loads)
    # The tyre's energy kt/2 d^2 is added numerically (d from the heights).
    energy = sum(body.kinetic_energy(N) for body in bodies) + potential
    qs = sp.symbols("x y z yaw pitch roll s1 s2 s3 s4")
    us = sp.symbols("ux uy uz wyaw wpitch wroll v1 v2 v3 v4")
    ts = sp.Symbol("t")
    plain = dict(zip(q, qs))
    plain.update(zip(u, us))

    def numeric(expr):
        expr = me.msubs(me.msubs(expr, {qi.diff(t): ui for qi, ui in zip(q, u)}), plain).subs(t, ts)
        return sp.lambdify((ts, qs, us, P, tyre_loads), expr, "numpy", cse=True)

    return {"M": numeric(kane.mass_matrix), "f": numeric(kane.forcing),
            "E": numeric(energy), "h": numeric(sp.Matrix(heights)),
            "seconds": time.perf_counter() - start}


def _initial_state(pv):
    """The file's initial positions and velocities, from its parameters."""
    return np.r_[0.0, 0.0, pv["z0"], 0.0, pv["pitch0"], pv["roll0"], [pv["s0"]] * 4,
                 pv["u0"], 0.0, pv["vz0"], pv["yawd0"], pv["pitchd0"], pv["rolld0"], [0.0] * 4]


def _heights(kane, pvec, t, y):
    return np.ravel(kane["h"](t, y[:10], y[10:], pvec, [0.0] * 4))


def _reference(kane, pv, t=T):
    """scipy's DOP853 at rtol = atol = 1e-12 from one contact change to the
    next: each tyre is in contact (load kt (r0 - h)) or in the air (no load)
    for a whole segment, and solve_ivp's terminal events on r0 - h (down
    while in contact, up in the air) end a segment at a lift-off or a
    landing.  Returns the states at ``t`` (rows) and the contact changes
    [(time, wheel, "liftoff" | "landing")]."""
    pvec = [float(pv[n]) for n in PARAMS]
    kt, r0 = float(pv["kt"]), float(pv["r0"])

    def rhs(tt, y, contact):
        loads = np.where(contact, kt * (r0 - _heights(kane, pvec, tt, y)), 0.0)
        M = np.asarray(kane["M"](tt, y[:10], y[10:], pvec, loads), dtype=float)
        f = np.asarray(kane["f"](tt, y[:10], y[10:], pvec, loads), dtype=float).ravel()
        return np.r_[y[10:], np.linalg.solve(M, f)]

    def crossing(i, contact):
        def g(tt, y, *_):
            return r0 - _heights(kane, pvec, tt, y)[i]
        g.terminal, g.direction = True, (-1.0 if contact[i] else 1.0)
        return g

    y = _initial_state(pv)
    contact = _heights(kane, pvec, t[0], y) < r0
    states, changes, t0 = np.full((len(t), 20), np.nan), [], t[0]
    while True:
        sol = solve_ivp(rhs, (t0, t[-1]), y, method="DOP853", rtol=1e-12, atol=1e-12, dense_output=True,
                        events=[crossing(i, contact) for i in range(4)], args=(contact.copy(),))
        assert sol.success, sol.message
        inside = (t >= t0) & (t <= sol.t[-1])
        if inside.any():
            states[inside] = sol.sol(t[inside]).T
        if sol.status != 1:
            return states, changes
        t0, i = min((float(te[0]), i) for i, te in enumerate(sol.t_events) if len(te))
        y = sol.y_events[i][0]
        changes.append((t0, i, "liftoff" if contact[i] else "landing"))
        contact[i] = not contact[i]


def _state(ds):
    """(time, 20): X, yaw, pitch, roll, s and their rates, as the reference orders them."""
    pos = [ds["X"].values] + [ds[n].values[:, None] for n in ("yaw", "pitch", "roll")] + [ds["s"].values]
    vel = ([ds["X_d1"].values] + [ds[n + "_d1"].values[:, None] for n in ("yaw", "pitch", "roll")]
           + [ds["s_d1"].values])
    return np.concatenate(pos + vel, axis=1)


@pytest.fixture(scope="module")
def car_run(car, order):
    ds = car.solve(t_span=(0.0, 1.0), t_eval=T, tol=1e-12, order=order)
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    return ds


@pytest.fixture(scope="module")
def reference_run(car, kane):
    return _reference(kane, car.params)


def test_the_car_is_the_articles_model(car):
    """Ten generalised coordinates (position and Euler angles of the frame,
    four strut lengths), no constraints, damping and tyre forces switched
    on, wheels with mass, a nontrivial start; the tyres' max(0, ...) makes a
    switch event per wheel, and the front left tyre's lift-off and landing
    are recorded."""
    assert car.kind == "Lagrangian" and car.dae.n_c == 0
    assert [c.name for c in car.dae.coords] == ["X", "yaw", "pitch", "roll", "s"]
    assert car.dae.structure.dof == 20 and car.conservative is False
    pv = car.params
    assert min(pv[n] for n in ("cf", "cr", "CN", "Cx", "d0", "Ixz", "mw", "kt")) > 0
    assert min(abs(pv[n]) for n in ("pitch0", "roll0", "vz0", "pitchd0", "rolld0", "yawd0")) > 0
    assert pv["u0"] > 10
    kinds = [(e.name, e.kind, e.direction) for e in car.dae.events]
    assert kinds[:2] == [("liftoff", "event", "up"), ("landing", "event", "down")]
    assert [k for _, k, _ in kinds[2:]] == ["switch"] * 4


def test_the_car_follows_kanes_equations(car, car_run, reference_run):
    """Position, attitude, strut lengths and all velocities agree with the
    sympy/Kane reference to 1e-8 over 1 s: the car, thrown up at 1.2 m/s
    while steering into a turn at 15 m/s, leaves the ground with all four
    wheels, flies, and lands wheel by wheel (measured: positions 4e-12,
    velocities 9e-11).  The front left tyre's recorded lift-off and landing
    are the reference's to 1e-12 (measured 1e-14)."""
    ref, changes = reference_run
    got = _state(car_run)
    err = np.abs(got - ref).max(axis=0)
    assert err.max() < 1e-8, err
    # A real manoeuvre: the rear right wheel starts just above the ground, the
    # three others leave it in the first 10 ms, and all four land once.
    assert sorted(w for _, w, what in changes if what == "liftoff") == [0, 1, 2]
    assert sorted(w for _, w, what in changes if what == "landing") == [0, 1, 2, 3]
    assert max(t for t, _, what in changes if what == "liftoff") < 0.011
    yaw, roll = ref[:, 3], ref[:, 5]
    assert yaw[-1] > 0.15 and np.ptp(roll) > 0.005
    front_left = [t for t, w, _ in changes if w == 0]
    n = int(car_run.event_count)
    assert n == 2 and list(car_run.event_which.values[:n]) == [0, 1]     # liftoff, then landing
    np.testing.assert_allclose(car_run.event_time.values[:n], front_left, rtol=0, atol=1e-12)


@pytest.mark.parametrize("eps", [3e-13, 1e-12, 1e-9, 1e-7])
def test_no_switch_is_stepped_over_whatever_the_rounding(car, order, eps):
    """The undamped car with its tyre stiffness changed by far less than the
    tolerance keeps its energy to 1e-10 through its ~70 lift-offs and landings.
    A cut step that ended a hair past a switch could still be on the old
    side there (the polynomial's root against the state's own g): the next
    series then ran a whole step on the old branch, a tyre a centimetre in the
    ground, and the energy jumped by 6-39 J for these stiffnesses under the
    suite's XLA build (workflows/benchmarks/bench_switch_robustness.py)."""
    off = {"cf": 0.0, "cr": 0.0, "CN": 0.0, "Cx": 0.0, "kt": float(car.params["kt"]) * (1.0 + eps)}
    ds = car.solve(off, t_span=(0.0, 1.0), t_eval=np.linspace(0.0, 1.0, 101), tol=1e-12, order=order)
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    e = ds.energy.values
    assert np.max(np.abs(e - e[0])) < 1e-10 * abs(e[0])


def test_without_damping_and_tyre_forces_the_energy_is_conserved(car, order, kane):
    """With cf = cr = 0 and no tyre forces in the ground plane (CN = Cx = 0)
    the car hops on its springs and tyres: its energy output equals the
    reference's T + V (with the tyres' kt/2 d^2) at t0 and stays constant to
    1e-10 (relative; measured 2e-13) through every lift-off and landing (70
    in 1 s: undamped, the wheels hop); the motion still agrees with the
    reference (measured 5e-10)."""
    off = {"cf": 0.0, "cr": 0.0, "CN": 0.0, "Cx": 0.0}
    ds = car.solve(off, t_span=(0.0, 1.0), t_eval=T, tol=1e-12, order=order)
    assert int(ds.status) == 0, ds.attrs.get("status_meaning")
    pv = {**car.params, **off}
    pvec = [float(pv[n]) for n in PARAMS]
    y0 = _initial_state(pv)
    deflection = np.maximum(0.0, pv["r0"] - _heights(kane, pvec, 0.0, y0))
    E0 = float(kane["E"](0.0, y0[:10], y0[10:], pvec, [0.0] * 4)) + pv["kt"] / 2 * np.sum(deflection**2)
    e = ds.energy.values
    assert e[0] == pytest.approx(E0, rel=1e-13)
    assert np.max(np.abs(e - E0)) < 1e-10 * abs(E0)
    assert np.max(np.abs(ds.energy_change.values)) < 1e-10 * abs(E0)
    ref, changes = _reference(kane, pv)
    np.testing.assert_allclose(_state(ds), ref, rtol=0, atol=1e-8)
    assert len(changes) >= 40                                   # the wheels do hop


def test_the_animation_follows_the_car(car, car_run):
    """The camera tracks the four strut mounts; every link (the frame and the
    four struts) joins drawn points, and the view stays the car's size while
    the car drives 15 m."""
    from solver.results.plot import follow_limits

    anim = car.animation
    assert anim["follow"] == ["P1", "P2", "P3", "P4"]
    points = car.point_series(car_run)
    assert set(points) == {f"{a}{i}" for a in "PWC" for i in range(1, 5)} | {"X"}
    struts = {(f"P{i}", f"W{i}") for i in range(1, 5)} | {(f"W{i}", f"C{i}") for i in range(1, 5)}
    assert struts <= {tuple(link) for link in car.links}
    assert all(a in points and b in points for a, b in car.links)
    # The tyres' bottoms are r0 under the wheel centres: below the ground by
    # the deflection (under 3 cm) while loaded, above it in the air.
    r0 = car.params["r0"]
    for i in range(1, 5):
        bottom = points[f"C{i}"]
        np.testing.assert_allclose(bottom, points[f"W{i}"] - [0.0, 0.0, r0], atol=1e-12)
        assert -0.03 < bottom[:, 2].min() < 0.0 < bottom[:, 2].max()
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
    assert "mechanical DOF (coordinates - constraints): 10" in out
    assert main(["simulate", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status_code"] == 0 and info["t_end"] == pytest.approx(1.0)
    at = car_run.isel(time=-1)
    for k in range(3):
        assert info["final"][f"X[{k}]"] == pytest.approx(float(at["X"][k]), abs=1e-8)
    for n in ("yaw", "pitch", "roll"):
        assert info["final"][n] == pytest.approx(float(at[n]), abs=1e-8)
