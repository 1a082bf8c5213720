"""Tape cleaning (solver/taylor/clean.py): what it removes, and that it changes no value.

The rewrites are checked on a residual written with each redundancy in it,
and on a Lagrangian mechanism whose residual is built by AD: the Taylor
coefficients of the cleaned and the raw tape agree to rounding.
"""

from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import solver
from solver.integrate.integrator import Integrator, tape_ops
from solver.taylor.program import TaylorProgram

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "mechanisms"


def redundant(t, v, p):
    y = v["y"]
    s1 = jnp.sin(y[0])
    s2 = jnp.sin(y[0])  # the same subexpression twice
    k = jnp.cos(0.3) * 2.0  # a constant subgraph
    one_times = 1.0 * (y[0] + 0.0)  # identities
    zero_times = 0.0 * jnp.exp(y[0])  # a product with a literal zero
    return [y[1] - (s1 + s2) * k - one_times - zero_times - p["a"] * t]


def test_each_redundancy_is_removed():
    dae = solver.DAE(redundant, ["y"], params={"a": 0.5})
    raw = TaylorProgram(dae, dae.structure.c, dae.structure.d, 6, clean_tape=False)
    prog = TaylorProgram(dae, dae.structure.c, dae.structure.d, 6)
    st = prog.clean_stats
    assert st.before == len(raw.eqns) and st.after == len(prog.eqns) < len(raw.eqns)
    assert st.shared >= 1  # sin(y) once
    assert st.folded >= 2  # cos(0.3) and its product with 2
    assert st.forwarded >= 2  # 1*x and x+0
    assert st.zeroed >= 1 and st.dead >= 1  # 0*exp(y), and then exp(y) itself
    names = [e.prim.name for e in prog.eqns]
    assert names.count("sin") == 1 and "cos" not in names and "exp" not in names
    assert tape_ops(prog) < tape_ops(raw)


def _series(prog, z, u_guess, t0, params):
    integ = Integrator(prog, mode="unrolled")
    consts = prog.constants(params)
    X, u, status, _ = jax.jit(lambda z: integ.series(z, u_guess, t0, consts))(z)
    assert int(status) == 0
    return X


def test_cleaning_changes_no_coefficient_of_the_redundant_residual():
    dae = solver.DAE(redundant, ["y"], params={"a": 0.5})
    params = {"a": jnp.asarray(0.5)}
    s = dae.structure
    raw = TaylorProgram(dae, s.c, s.d, 6, clean_tape=False)
    prog = TaylorProgram(dae, s.c, s.d, 6)
    z = jnp.asarray([0.7])
    u = jnp.asarray([0.0])
    X1, X0 = _series(prog, z, u, 0.2, params), _series(raw, z, u, 0.2, params)
    np.testing.assert_allclose(np.asarray(X1["y"]), np.asarray(X0["y"]), rtol=1e-14, atol=1e-15)
    # and against the ODE's own derivative: y' = 2 cos(0.3) 2 sin(y) + y + a t at t0
    y0 = 0.7
    assert float(X1["y"][1]) == pytest.approx(4 * np.cos(0.3) * np.sin(y0) + y0 + 0.5 * 0.2, rel=1e-14)


def test_a_lagrangian_mechanism_loses_a_third_of_its_tape_and_none_of_its_values():
    """Mechanism0's residual comes from AD of its Lagrangian (primal and
    tangent passes compute the same products): cleaning removes over a third
    of the equations; the stage-by-stage coefficients are unchanged."""
    m = solver.load(CONFIGS / "mechanism0.yaml")
    dae, s = m.dae, m.dae.structure
    raw = TaylorProgram(dae, s.c, s.d, 8, clean_tape=False)
    prog = TaylorProgram(dae, s.c, s.d, 8)
    assert prog.clean_stats.after <= 0.67 * prog.clean_stats.before
    assert tape_ops(prog) < tape_ops(raw)
    comp = solver.compiled_model(dae, 8, mode="unrolled")
    from solver.integrate.initialize import parse_values

    spec = parse_values(comp.integrator, m.initial_values(), m.fixed)
    params = {k: jnp.asarray(v) for k, v in dae.params.items()}
    z0 = jnp.asarray(comp.consistent_point(params, m.t0, spec))
    u = jnp.asarray(spec.u_guess)
    X1, X0 = _series(prog, z0, u, m.t0, params), _series(raw, z0, u, m.t0, params)
    for name in X0:
        np.testing.assert_allclose(np.asarray(X1[name]), np.asarray(X0[name]), rtol=1e-11, atol=1e-12)
