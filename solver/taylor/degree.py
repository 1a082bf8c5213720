"""Whether stage 0 is affine in the leading derivatives (then one Newton step solves it).

Stage 0 of the Σ-method solves ``F_i^(c_i) = 0`` for the leading derivatives
``u_j = x_j^(d_j)``.  For an equation with ``c_i ≥ 1`` this is always affine
in u: differentiating ``f_i`` c_i times brings in its highest derivatives
``x_j^(σ_ij + c_i)`` only through the term ``∂f_i/∂x_j^(σ_ij) · x_j^(σ_ij+c_i)``,
whose factor holds lower derivatives only.  An equation with ``c_i = 0`` is
``f_i`` itself, and may hold its leading derivatives in any way.  So the
stage-0 system is affine in u exactly when every ``c_i = 0`` equation is
affine in the inputs at leading level, which a degree count over the
program's tape decides: 0 (free of u), 1 (affine), 2 (anything else).

Mechanical models are the common case: Euler–Lagrange equations are
``M(q) q'' + Gᵀλ - f(q, q') = 0``.  Newton from any guess then lands on the
solution in one step (with the exact Jacobian, as both stage solvers have),
and a second iteration only confirms it; under ``vmap`` that second pass
is a batched while loop over every element.
"""

from __future__ import annotations

import numpy as np

from solver.dae.derivative import ddt_p
from solver.taylor.ir import LINEAR, Lit
from solver.taylor.program import TaylorProgram

__all__ = ["stage0_is_affine", "residual_degrees"]

# Degrees saturate at 2: "not affine".
_FREE, _AFFINE, _OTHER = 0, 1, 2

# The operands of a linear primitive that select positions (indices, a
# condition): it is linear in the others only while these are free.
_INDEX_OPERANDS = {"select_n": slice(0, 1), "dynamic_slice": slice(1, None), "gather": slice(1, 2),
                   "dynamic_update_slice": slice(2, None), "scatter-add": slice(1, 2), "scatter_add": slice(1, 2)}


def _leading_inputs(prog: TaylorProgram) -> set:
    """Tape inputs that hold a leading derivative of some element (conservative for mixed d)."""
    out = set()
    for i, (name, level) in prog.input_x.items():
        if level in {int(x) for x in np.ravel(prog.var_d(name))}:
            out.add(i)
    return out


def _degree(e, deg) -> int:
    """Degree of equation e's outputs in u from its operands' degrees ``deg``."""
    name = e.prim.name
    ins = [deg(a) for a in e.invars]
    top = max(ins, default=_FREE)
    if top == _FREE:
        return _FREE
    if e.prim is ddt_p:
        # d/dt of a u-free node brings in the next level linearly (it may be
        # leading); of a node holding u it would exceed d_j.
        return _AFFINE if ins[0] == _FREE else _OTHER
    if name in LINEAR:
        index = _INDEX_OPERANDS.get(name)
        if index is not None and max(ins[index], default=_FREE) != _FREE:
            return _OTHER  # a position that moves with u: not a linear map
        return top
    if name in ("mul", "dot_general"):
        return min(ins[0] + ins[1], _OTHER)
    if name == "div":
        return ins[0] if ins[1] == _FREE else _OTHER
    if name == "integer_pow" and e.params.get("y") == 1:
        return ins[0]
    return _OTHER  # a nonlinear function of u, or a piecewise one (a step in u)


def residual_degrees(prog: TaylorProgram) -> list[int]:
    """Each residual output's degree in the leading derivatives: 0, 1 or 2 (anything else).

    Args:
        prog: the Taylor program (its cleaned tape).

    Returns:
        one degree per equation block (``prog.out_ids``), as traced: a
        derivative of a block with ``c_i ≥ 1`` is affine whatever this says.
    """
    degrees = {i: _AFFINE for i in _leading_inputs(prog)}

    def deg(a):
        return _FREE if isinstance(a, Lit) else degrees.get(a, _FREE)

    for e in prog.eqns:
        d = _degree(e, deg)
        if d:
            for o in e.outvars:
                degrees[o] = d
    return [deg(o) for o in prog.out_ids]


def stage0_is_affine(prog: TaylorProgram) -> bool:
    """Whether the stage-0 residual is affine in the leading derivatives u.

    Args:
        prog: the Taylor program.

    Returns:
        True when every equation block with an element at ``c_i = 0`` has
        degree at most 1 in the inputs at leading level (see the module
        docstring); False when one may be more than affine.
    """
    blocks = prog.dae.equation_blocks
    for (first, size), degree in zip(blocks, residual_degrees(prog)):
        if degree > _AFFINE and int(np.min(prog.c[first:first + size])) == 0:
            return False
    return True
