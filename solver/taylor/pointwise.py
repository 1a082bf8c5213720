"""A residual's value at a point, with every ``ddt`` expanded by forward mode.

The system Jacobian ``J_ij = ∂f_i/∂x_j^(d_j - c_i)`` (Pryce) is a
derivative of the residual at one point.  A residual written with
:func:`solver.ddt` (a Lagrangian's ``d/dt ∂L/∂q'``) has no pointwise value
as traced, but it has one along a trajectory: ``d/dt g(t, x, x', …)`` is the
directional derivative of ``g`` with tangent 1 for t and ``x^(l+1)`` for each
``x^(l)`` — one ``jax.jvp``.  :func:`residual_at` evaluates the cleaned tape
of a :class:`~solver.taylor.program.TaylorProgram` that way, so that the Jacobian is
``jax.jacfwd`` of a small straight-line function instead of derivatives
through the Taylor stages (docs/method.md §4: J comes from the plain
residual, never from the Taylor interpreter).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from solver.numerics import linalg
from solver.dae.derivative import ddt_p
from solver.taylor.ir import Lit
from solver.taylor.program import TaylorProgram

__all__ = ["residual_at", "levels_from_coefficients"]


def levels_from_coefficients(prog: TaylorProgram, X) -> dict:
    """Each variable's derivatives ``x^(l)``, l = 0 … max d_j, from normalised coefficients.

    Args:
        prog: the Taylor program.
        X: variable name → coefficient array ``(KX, *shape)``,
            ``X[r] = x^(r)/r!``.

    Returns:
        name → list of arrays, entry l the l-th derivative.
    """
    out = {}
    for v in prog.dae.variables:
        top = int(prog.var_d(v.name).max())
        out[v.name] = [math.factorial(l) * X[v.name][l] for l in range(top + 1)]
    return out


def residual_at(prog: TaylorProgram, t, consts: dict, levels: dict):
    """The residual's value at time t and the derivatives ``levels``, ``ddt`` expanded.

    Args:
        prog: the Taylor program (its cleaned tape is evaluated).
        t: time.
        consts: from ``prog.constants(params)`` (the nodes that depend on
            parameters only).
        levels: variable name → list of derivatives ``x^(0) … x^(L)``; a
            ``ddt`` needs ``x^(l+1)`` for every ``x^(l)`` its operand reads
            (a missing level counts as zero: by the structural analysis no
            residual depends on a derivative above d_j).

    Returns:
        flat residual (length n), equation blocks in order.
    """
    outs = _evaluate(prog, prog.out_ids, t, consts, levels)
    return jnp.concatenate([jnp.ravel(jnp.asarray(o, jnp.float64)) for o in outs])


def _evaluate(prog: TaylorProgram, targets, t, consts, levels):
    env = {prog.t_id: jnp.asarray(t, jnp.float64)}
    for i, (name, l) in prog.input_x.items():
        lv = levels[name]
        env[i] = lv[l] if l < len(lv) else jnp.zeros_like(lv[0])

    def read(a):
        if isinstance(a, Lit):
            return a.val
        if a in env:
            return env[a]
        return consts[a]

    wanted = set(targets)
    for e in _needed(prog, wanted):
        if e.prim is ddt_p:
            env[e.outvars[0]] = _time_derivative(prog, e.invars[0], t, consts, levels)
            continue
        if e.prim is lax.dot_general_p:  # see linalg.dot_general
            res = linalg.dot_general(*[read(a) for a in e.invars], **e.params)
        else:
            res = e.prim.bind(*[read(a) for a in e.invars], **e.params)
        for o, r in zip(e.outvars, res if e.prim.multiple_results else [res]):
            env[o] = r
    return [read(o) for o in targets]


def _needed(prog: TaylorProgram, targets: set) -> list:
    """The series equations that the targets depend on, in tape order."""
    need = {a for a in targets if prog.is_series(a)}
    keep = []
    for e in reversed(prog.eqns):
        if any(o in need for o in e.outvars) and any(o in prog.series for o in e.outvars):
            keep.append(e)
            need.update(a for a in e.invars if prog.is_series(a))
    return keep[::-1]


def _time_derivative(prog: TaylorProgram, node, t, consts, levels):
    """d/dt of a tape node along the trajectory: jvp with tangents 1 and x^(l+1)."""
    if not prog.is_series(node):
        return jnp.zeros_like(jnp.asarray(consts[node] if not isinstance(node, Lit) else node.val))
    up = {name: lv[1:] + [jnp.zeros_like(lv[0])] for name, lv in levels.items()}

    def value(tt, lv):
        return _evaluate(prog, [node], tt, consts, lv)[0]

    t = jnp.asarray(t, jnp.float64)
    _, dv = jax.jvp(value, (t, levels), (jnp.ones_like(t), up))
    return dv
