"""Events, stops and impacts: their cost, and a bouncing ball beside heyoka and scipy (issue 41).

Three measurements, in one process:

1. **One event function's cost per step** on the pendulum (index 3, tol
   1e-10, 10 outputs a second): the same run with and without an event
   (x crossing zero upward), best of repeated calls of the compiled run;
   a step's cost is the difference between runs over [0, 100] and [0, 10]
   over the difference of their steps (a call's own cost, the same for
   any length, drops out), and the whole run of [0, 10] over its steps is
   given beside it; and with an event that never fires (x = 2 L), the cost
   of watching alone.
2. **A bouncing ball, 100 impacts** (e = 0.9, dropped from 1 m): mechsweep's
   stop (``configs/mechanisms/bouncing_ball.yaml``) against heyoka's
   terminal events (the velocity reversed between propagations) and scipy's
   ``solve_ivp`` (DOP853, a terminal event, restarted at each impact), at
   the tolerances given; the error is the largest difference of the 100
   impact times from the closed form.
3. **The slider-crank's restitution sweep** (``slider_crank_stop.yaml``,
   1,000 designs e in [0, 1]): ``solve_batch`` points per second with the
   stop and with the same model without it.

Usage::

    .venv/bin/python workflows/benchmarks/bench_events.py [--out results/events.txt] [--designs 1000]

heyoka is a peer (``pip install -e '.[peers]'``); without it its row says so.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import solver  # noqa: E402
from report import Report  # noqa: E402
from solver.integrate.initialize import parse_values  # noqa: E402

MECH = ROOT / "configs" / "mechanisms"


def best(fn, repeats: int) -> float:
    """The best wall time of ``repeats`` calls of ``fn`` (after one warm call)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def pendulum_cost(report: Report, repeats: int, max_events: int | None = None) -> None:
    """Section 1: the pendulum with and without one event function, timed alternately.

    Each run is timed over t in [0, 10] (101 outputs) and [0, 100] (1,001
    outputs): the difference of the two, over the difference of their
    steps, is the cost of a step, free of what a call costs once (the
    dispatch, the records' unpacking); the ratio of whole runs over their
    steps is printed beside it.

    Args:
        report: where the lines go.
        repeats: the calls per run are 6 x repeats, the best kept.
        max_events: the runs' record capacity (None: the solver's default).
    """
    def residual(t, v, p):
        x, y, lam = v["x"], v["y"], v["lam"]
        return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]

    values = {"x": 0.8, "y": 0.6, "x'": 0.0}
    spans = (10.0, 100.0)
    runs, info = {}, {}
    watch = [solver.Event("up", lambda t, v, p: v["x"][0] - 2.0 * p["L"], direction="up")]
    for label, events in (("without", None),
                          ("with one event", [solver.Event("up", lambda t, v, p: v["x"][0], direction="up")]),
                          ("watching only", watch)):
        extra = {} if max_events is None or not events else {"max_events": int(max_events)}
        dae = solver.DAE(residual, ["x", "y", "lam"], params={"g": 9.81, "L": 1.0}, events=events, name=label,
                         **extra)
        t_eval = np.linspace(0.0, spans[0], 101)
        ds = solver.solve(dae, (0.0, spans[0]), values=values, fixed=["x", "x'"], tol=1e-10, t_eval=t_eval)
        order = int(ds.attrs["solver_order"])
        comp = solver.compiled_model(dae, order, batch=False)
        integ = comp.integrator
        spec = parse_values(integ, values, ["x", "x'"])
        params = dae.param_values()
        z0 = np.asarray(comp.consistent_point(params, 0.0, spec))
        u0 = np.asarray(spec.u_guess)
        for t1 in spans:
            t_eval = np.linspace(0.0, t1, int(10 * t1) + 1)
            run = (lambda integ=integ, params=params, z0=z0, u0=u0, t1=t1, t_eval=t_eval:
                   integ.run(params, z0, u0, 0.0, t1, t_eval, 1e-10))
            runs[label, t1] = lambda run=run: run()["status"].block_until_ready()
            out = run()
            info[label, t1] = (int(out["steps"]), int(out["events"]["count"]) if events else 0)
    # The runs alternate, so that the machine's drift (up to 2x within minutes on a
    # shared machine) does not enter their ratios; each keeps its best time.
    times = {key: [] for key in runs}
    for _ in range(max(1, repeats) * 6):
        for key, run in runs.items():
            t = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - t)
    best_of = {key: min(ts) for key, ts in times.items()}
    short, long = spans
    per_step, whole = {}, {}
    for label in ("without", "with one event", "watching only"):
        (steps, count), (steps_long, _) = info[label, short], info[label, long]
        seconds = best_of[label, short]
        per_step[label] = (best_of[label, long] - seconds) / (steps_long - steps)
        whole[label] = seconds / steps
        report.say(f"  pendulum {label:15s} {seconds * 1e3:8.3f} ms, {steps} steps, "
                   f"{seconds / steps * 1e6:6.2f} us a step over the run, {per_step[label] * 1e6:6.3f} us a step "
                   f"(t1 = {long:g}: {steps_long} steps)" + (f", {count} events" if label != "without" else ""))

    def percent_more(label, of):
        return (of[label] / of["without"] - 1) * 100

    report.say(f"  one event function costs {percent_more('with one event', per_step):+.1f} % per step "
               f"(target: at most +20 %; best of {len(times['without', short])} alternating calls each), "
               f"{percent_more('with one event', whole):+.1f} % over a whole run of t1 = {short:g} (its call included)")
    report.say(f"  watching an event that never fires (x = 2 L) costs {percent_more('watching only', per_step):+.1f} % "
               f"per step ({percent_more('watching only', whole):+.1f} % over the run): the rest is the steps with a crossing")


def ball_mechsweep(e, h, g, impacts, tol):
    t1 = math.sqrt(2 * h / g)
    tend = t1 + 2 * t1 * e * (1 - e ** (impacts - 1)) / (1 - e) + 0.5 * t1 * e ** impacts
    model = solver.load(MECH / "bouncing_ball.yaml", overrides={"Events": None, "MaxEvents": impacts + 20,
                                                               "Stops": {"floor": {"zeno_time": 1e-9}}})
    ds = model.solve(params={"e": e, "h": h, "g": g}, t_span=(0.0, tend), t_eval=np.array([0.0, tend]), tol=tol)
    dae = model.dae
    comp = solver.compiled_model(dae, int(ds.attrs["solver_order"]), batch=False)
    integ = comp.integrator
    spec = parse_values(integ, model.initial_values(model.check_params({"e": e})),
                                                    model.fixed)
    params = model.check_params({"e": e, "h": h, "g": g})
    z0 = np.asarray(comp.consistent_point(params, 0.0, spec))
    u0 = np.asarray(spec.u_guess)
    t_eval = np.array([0.0, tend])

    def run():
        return integ.run(params, z0, u0, 0.0, tend, t_eval, tol)

    res = run()
    n = int(res["events"]["count"])
    times = np.asarray(res["events"]["time"])[:min(n, impacts)]
    return run, times, int(res["steps"])


def ball_heyoka(e, h, g, impacts, tol):
    import heyoka as hy

    x, v = hy.make_vars("x", "v")
    ev = hy.t_event(x, direction=hy.event_direction.negative)
    ta = hy.taylor_adaptive([(x, v), (v, -g * hy.expression(1.0))], [h, 0.0], tol=tol, t_events=[ev])

    def run():
        ta.time = 0.0
        ta.state[:] = [h, 0.0]
        out = []
        while len(out) < impacts:
            oc = ta.propagate_until(1e3)[0]
            if oc == hy.taylor_outcome.time_limit:
                break
            out.append(ta.time)
            ta.state[1] = -e * ta.state[1]
        return out

    times = np.array(run())
    return run, times


def ball_scipy(e, h, g, impacts, tol):
    from scipy.integrate import solve_ivp

    def floor(t, y):
        return y[0]

    floor.terminal, floor.direction = True, -1

    def run():
        t, y, out = 0.0, [h, 0.0], []
        while len(out) < impacts:
            sol = solve_ivp(lambda t, y: [y[1], -g], (t, 1e3), y, events=floor, rtol=tol, atol=tol,
                            method="DOP853")
            if not sol.t_events[0].size:
                break
            t = float(sol.t_events[0][0])
            y = [0.0, -e * sol.y_events[0][0][1]]
            out.append(t)
        return out

    return run, np.array(run())


def bouncing_ball(report: Report, repeats: int) -> None:
    e, h, g, impacts = 0.9, 1.0, 9.81, 100
    t1 = math.sqrt(2 * h / g)
    k = np.arange(impacts)
    exact = t1 + 2 * t1 * e * (1 - e ** k) / (1 - e)
    report.say(f"  {impacts} impacts, e = {e}: last at t = {exact[-1]:.6f}")
    for name, make, tols in (("mechsweep", ball_mechsweep, (1e-10, 1e-12)), ("heyoka", ball_heyoka, (1e-10, 1e-12)),
                             ("scipy DOP853", ball_scipy, (1e-10, 1e-12))):
        for tol in tols:
            try:
                made = make(e, h, g, impacts, tol)
            except ImportError as err:
                report.say(f"  {name:13s} not installed ({err}); pip install -e '.[peers]'")
                break
            run, times = made[0], made[1]
            seconds = best(run, repeats)
            err = np.max(np.abs(times[:impacts] - exact[: len(times)])) if len(times) else float("nan")
            extra = f", {made[2]} steps" if len(made) > 2 else ""
            report.say(f"  {name:13s} tol {tol:.0e}: {seconds * 1e3:9.3f} ms, {len(times)} impacts, "
                       f"max impact-time error {err:.1e}{extra}")


def restitution_sweep(report: Report, designs: int) -> None:
    model = solver.load(MECH / "slider_crank_stop.yaml")
    text = (MECH / "slider_crank_stop.yaml").read_text()
    start = text.index("Stops:")
    end = text.index("ProblemData:")
    plain = solver.load(text[:start] + text[end:])
    es = np.linspace(0.0, 1.0, designs)
    t_eval = np.linspace(model.t0, model.tend, 151)
    for label, m, table in (("with the stop", model, {"e": es}),
                            ("without it", plain, {"w": np.full(designs, 8.0)})):
        solver.solve_batch(m, {k: v[:8] for k, v in table.items()}, t_eval=t_eval)  # compile
        t = time.perf_counter()
        ds = solver.solve_batch(m, table, t_eval=t_eval)
        wall = time.perf_counter() - t
        ok = int((~solver.status.is_failure(ds.status.values)).sum())
        events = f", {int(ds.event_count.values.sum())} impacts" if "event_count" in ds else ""
        report.say(f"  slider-crank {label:14s}: {designs} designs in {wall:6.2f} s = "
                   f"{designs / wall:8.1f} points/s ({ok} finished{events})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also save the figures to this file")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per measurement (best taken)")
    parser.add_argument("--designs", type=int, default=1000, help="designs of the restitution sweep")
    args = parser.parse_args(argv)
    report = Report()
    report.say(f"bench_events: {time.strftime('%Y-%m-%d %H:%M')}, jax {__import__('jax').__version__}")
    report.say("1. one event function's cost per step (pendulum, tol 1e-10)")
    pendulum_cost(report, args.repeats)
    report.say("2. bouncing ball against heyoka's terminal events and scipy")
    bouncing_ball(report, args.repeats)
    report.say("3. the slider-crank's restitution sweep (solve_batch, compiled)")
    restitution_sweep(report, args.designs)
    report.save(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
