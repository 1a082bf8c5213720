"""What ``tol`` buys: global error against tol for mechsweep and heyoka, and why they differ (issue 43, item 3).

Both integrators take the Taylor order p = ⌈−ln(tol)/2⌉ + 1 and a step from
the last two Taylor coefficients (Jorba & Zou 2005), with the same safety
factor ρ = exp(−0.7/(p−1)); they differ in where the tolerance enters the
step:

* mechsweep: h = ρ · min_k (tol·s/‖x_k‖)^(1/k), k = p−1, p (s = max(1, ‖x_0‖),
  the mixed absolute/relative scale): the last terms of the series are
  about tol·s;
* heyoka: h = ρ/e² · min_k (s/‖x_k‖)^(1/k): the tolerance enters only
  through the order, and the last terms are about e^(−2p)·s.

With the order rounded up, e^(−2p) ≤ tol·e^(−2), so heyoka's steps are
shorter by the factor F = tol^(1/p)·e² (1.0 to 1.4) and its error per step,
about (h/ρ_k)^(p+1), smaller by F^(p+1).

The script measures, for the pendulum (exact solution) and the Pleiades
(the IVP test set's reference), at tol 1e-8 … 1e-14: mechsweep's global
error and steps, mechsweep with heyoka's step rule (the same integrator,
only ``step_size`` replaced), and heyoka at the same tol.  If the rule is
the whole difference, the second and third columns agree.

Usage::

    .venv/bin/python workflows/benchmarks/bench_tol_mapping.py [--out workflows/benchmarks/results/tol_mapping.txt]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

import jax
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_peers as bp  # noqa: E402
from report import Report  # noqa: E402
import solver  # noqa: E402
from solver.integrate.initialize import parse_values  # noqa: E402
from solver.integrate.integrator import Integrator, order_for_tol  # noqa: E402
from solver.taylor.program import TaylorProgram  # noqa: E402

try:
    import heyoka as hy
except ImportError:  # the peers extra is not installed
    hy = None

TOLS = (1e-8, 1e-10, 1e-12, 1e-14)


class VariantStepIntegrator(Integrator):
    """The same integrator with another step rule (class attributes ``heyoka_rule``, ``velocity_norm``).

    ``heyoka_rule``: ρ/e² · min_k (s/‖x_k‖)^(1/k) instead of ρ · min_k (tol·s/‖x_k‖)^(1/k).
    ``velocity_norm``: ‖x_k‖ counts, for a variable with second derivatives,
    its velocity's coefficient k, (k+1)·x_(k+1), as heyoka's norm over a
    first-order state does.
    """

    heyoka_rule = False
    velocity_norm = False

    def step_size(self, X, tol):
        p = self.p

        def norm_at(k):
            parts = []
            for name, a in X.items():
                parts.append(jnp.max(jnp.abs(a[k])))
                if self.velocity_norm and self.out_orders[name] >= 2 and a.shape[0] > k + 1:
                    parts.append((k + 1) * jnp.max(jnp.abs(a[k + 1])))
            return jnp.max(jnp.stack(parts))

        scale = jnp.maximum(1.0, norm_at(0))
        top = scale if self.heyoka_rule else tol * scale
        hs = [jnp.where(norm_at(k) > 0, jnp.exp(jnp.log(top / jnp.where(norm_at(k) > 0, norm_at(k), 1.0)) / k),
                        jnp.inf) for k in (p - 1, p)]
        rho = math.exp(-0.7 / (p - 1)) / (math.e ** 2 if self.heyoka_rule else 1.0)
        return rho * jnp.minimum(hs[0], hs[1])


class VelocityNorm(VariantStepIntegrator):
    velocity_norm = True


class HeyokaRule(VariantStepIntegrator):
    heyoka_rule = True


class HeyokaRuleVelocityNorm(VariantStepIntegrator):
    heyoka_rule = velocity_norm = True


VARIANTS = (Integrator, VelocityNorm, HeyokaRule, HeyokaRuleVelocityNorm)
HEADER = (f"{'tol':>8} {'p':>3} {'F^(p+1)':>8} | {'mechsweep':>9} {'steps':>6} | {'+v norm':>9} {'steps':>6} | "
          f"{'h. rule':>9} {'steps':>6} | {'+v norm':>9} {'steps':>6} | {'heyoka':>9} {'steps':>6} | {'err/tol':>8}")


def run_mechsweep(cls, dae, tol, values, fixed, params, t0, t1, t_eval):
    """(coefficient arrays at t_eval as name -> array, steps) of one run at tol with the integrator class ``cls``."""
    s = dae.structure
    integ = cls(TaylorProgram(dae, s.c, s.d, order_for_tol(tol)), batch=False)
    comp = solver.compiled_model(dae, order_for_tol(tol), batch=False)
    spec = parse_values(integ, values, fixed)
    pj = {k: jnp.asarray(v) for k, v in params.items()}
    z0 = jnp.asarray(comp.consistent_point(pj, t0, spec))
    r = jax.block_until_ready(integ.run(pj, z0, jnp.asarray(spec.u_guess), t0, t1, t_eval, tol))
    assert int(r["status"]) == 0, f"status {int(r['status'])}"
    return {k: np.asarray(v) for k, v in r["values"].items()}, int(r["steps"])


def pendulum_rows(rep: Report):
    dae = solver.DAE(bp.pendulum_residual, variables=["x", "y", "lam"], params={"g": bp.G, "L": 1.0})
    t_eval = np.linspace(0.0, 10.0, 101)
    values = bp.pendulum_values({"L": 1.0})
    rep.say("\n## Cartesian pendulum (index 3), x0 = 0.8 L at rest, t in [0, 10], 101 outputs; "
            "error = max |(x, y) - exact|")
    rep.say(HEADER)
    for tol in TOLS:
        p = order_for_tol(tol)
        out = []
        for cls in VARIANTS:
            v, steps = run_mechsweep(cls, dae, tol, values, ["x", "x'"], dae.params, 0.0, 10.0, t_eval)
            out.append((bp.xy_error(v["x"][None, :, 0], v["y"][None, :, 0], t_eval, [1.0]), steps))
        if hy is not None:
            ta = hy.taylor_adaptive(bp.heyoka_pendulum_sys(), [bp.THETA0, 0.0], tol=tol, pars=[bp.G, 1.0])
            res = ta.propagate_grid(t_eval)
            out.append((bp.angle_error(res[-1][None, :, 0], t_eval, [1.0]), int(res[3])))
        else:
            out.append((math.nan, 0))
        rep.say(_row(tol, p, out))


def pleiades_rows(rep: Report):
    model = solver.load(str(ROOT / "configs" / "mechanisms" / "pleiades.yaml"))
    pv = model.check_params(None)
    params = model.dae.param_values(pv)
    t_eval = np.array([0.0, bp.PLEIADES_T1])
    rep.say(f"\n## The Pleiades (pleiades.yaml), t in [0, {bp.PLEIADES_T1:g}]; error = max |position(3) - published| "
            "(IVP test set)")
    rep.say(HEADER)
    state0 = []
    for i in range(7):
        state0 += [bp.PLEIADES_X0[i, 0], bp.PLEIADES_X0[i, 1], 0.0, bp.PLEIADES_V0[i, 0], bp.PLEIADES_V0[i, 1], 0.0]
    for tol in TOLS:
        p = order_for_tol(tol)
        out = []
        for cls in VARIANTS:
            v, steps = run_mechsweep(cls, model.dae, tol, model.initial_values(pv), model.fixed, params, 0.0,
                                     bp.PLEIADES_T1, t_eval)
            xy = np.array([v[f"P{i}"][-1, 0] for i in range(1, 8)])
            out.append((bp.pleiades_err(xy), steps))
        if hy is not None:
            ta = hy.taylor_adaptive(hy.model.nbody(7, masses=list(bp.PLEIADES_MASSES), Gconst=1.0), state0, tol=tol,
                                    compact_mode=True)
            res = ta.propagate_until(bp.PLEIADES_T1)
            out.append((bp.pleiades_err(np.asarray(ta.state).reshape(7, 6)[:, :2]), int(res[3])))
        else:
            out.append((math.nan, 0))
        rep.say(_row(tol, p, out))


def _row(tol, p, out):
    factor = (tol ** (1.0 / p) * math.e ** 2) ** (p + 1)
    cells = " | ".join(f"{e:9.1e} {s:6d}" for e, s in out)
    return f"{tol:8.0e} {p:3d} {factor:8.1f} | {cells} | {out[0][0] / tol:8.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rep = Report()
    rep.say(f"# tol mapping: mechsweep's step rule against heyoka's (jax {jax.__version__}"
            f"{', heyoka ' + hy.__version__ if hy is not None else ', heyoka not installed'})")
    rep.say("F^(p+1) = (tol^(1/p) e^2)^(p+1): the predicted ratio of the two rules' errors per step; "
            "'+v norm': the velocities' coefficients counted in the norm; 'h. rule': mechsweep's integrator with "
            "heyoka's step rule (rho/e^2, tol only through the order)")
    pendulum_rows(rep)
    pleiades_rows(rep)
    rep.save(args.out)


if __name__ == "__main__":
    main()
