"""The compact engine's kinds: each group's coefficient at an order, and its change when the stage's unknowns change.

:data:`EVAL` maps a kind (``lin``, ``mul``, ``exp``, ``sincos``, …) to the
recurrence that writes its members' coefficient of order m into a pass's
:class:`~solver.taylor.compact_table.View`; :data:`DELTA` maps it to the
linear change of that coefficient (the slope at order 0 times the change of
its operands; :meth:`~solver.taylor.compact.CompactProgram._commit`).  Each
takes the program ``P`` (:class:`~solver.taylor.compact.CompactProgram`),
the view, the group and the order.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from solver.taylor.compact_build import INVERSE_F0
from solver.taylor.compact_table import Operand
from solver.taylor.ir import add_coefs, mul_coefs

__all__ = ["DELTA", "EVAL"]


def _mf(m):
    return jnp.asarray(m, jnp.float64)


def _safe(m):
    return jnp.maximum(_mf(m), 1.0)


def _term_index(r, m):
    """The weight r of term r of a Cauchy sum (``Σ r a_r b_{m-r}``, the recurrences of exp, log, sin)."""
    return r


def _ev_lin(P, C, g, m):
    (a,) = g.ops
    return C.write(g.start, a.at(C, m, P.K))


def _ev_ddt(P, C, g, m):
    (x,) = g.ops
    return C.write(g.start, (_mf(m) + 1.0) * x.at(C, m + 1, P.K))


def _ev_mul(P, C, g, m):
    a, b = g.ops
    return C.write(g.start, P.cauchy(C, a, b, m, g.off))


def _ev_div(P, C, g, m):
    a, b = g.ops
    val = (a.at(C, m, P.K) - P.cauchy(C, b, g.own, m, g.off, lo=1)) / b.row0(C)
    return C.write(g.start, val)


def _ev_sqrt(P, C, g, m):
    (a,) = g.ops
    z = g.own
    rest = (a.at(C, m, P.K) - P.cauchy(C, z, z, m, g.off, lo=1, top=1)) / (2.0 * z.row0(C))
    return C.write(g.start, jnp.where(m == 0, jnp.sqrt(a.row0(C)), rest))


def _ev_powc(P, C, g, m):
    a, e = g.ops
    alpha = e.row0(C)
    x0 = a.row0(C)
    z0 = jnp.cbrt(x0) if g.param == "cbrt" else x0 ** alpha
    # z_m = 1/(m x0) Σ_{j=0}^{m-1} (α (m−j) − j) x_{m−j} z_j
    s = P.cauchy(C, g.own, a, m, g.off, lo=0, top=1, weight=lambda r, mm: alpha[:, None] * (mm - r) - r)
    return C.write(g.start, jnp.where(m == 0, z0, s / (_safe(m) * x0)))


def _ev_exp(P, C, g, m):
    (a,) = g.ops
    s = P.cauchy(C, a, g.own, m, g.off, lo=1, weight=_term_index)
    return C.write(g.start, jnp.where(m == 0, jnp.exp(a.row0(C)), s / _safe(m)))


def _ev_log(P, C, g, m):
    (a,) = g.ops
    x0 = a.row0(C)
    s = P.cauchy(C, g.own, a, m, g.off, lo=1, top=1, weight=_term_index)
    rest = (a.at(C, m, P.K) - s / _safe(m)) / x0
    return C.write(g.start, jnp.where(m == 0, jnp.log(x0), rest))


def _ev_sincos(P, C, g, m):
    (x,) = g.ops
    s = g.own
    c = Operand(s.src + g.size, own=True)
    x0 = x.row0(C)
    sm = P.cauchy(C, x, c, m, g.off, lo=1, weight=_term_index) / _safe(m)
    cm = P.cauchy(C, x, s, m, g.off, lo=1, weight=_term_index) / _safe(m)
    if g.param:  # sinh, cosh
        s0, c0 = jnp.sinh(x0), jnp.cosh(x0)
    else:
        s0, c0, cm = jnp.sin(x0), jnp.cos(x0), -cm
    val = jnp.concatenate([jnp.where(m == 0, s0, sm), jnp.where(m == 0, c0, cm)], axis=0)
    return C.write(g.start, val)


def _ev_inv(P, C, g, m):
    x, q = g.ops
    sign = -1.0 if g.param == "acos" else 1.0
    corr = P.cauchy(C, q, g.own, m, g.off, lo=1, top=1, weight=lambda r, mm: mm - r)
    rest = (sign * _mf(m) * x.at(C, m, P.K) - corr) / (_safe(m) * q.row0(C))
    return C.write(g.start, jnp.where(m == 0, INVERSE_F0[g.param](x.row0(C)), rest))


def _ev_atan2(P, C, g, m):
    y, x, q = g.ops
    w = lambda r, mm: mm - r
    rhs = P.cauchy(C, x, y, m, g.off, lo=0, top=1, weight=w) - P.cauchy(C, y, x, m, g.off, lo=0, top=1, weight=w)
    corr = P.cauchy(C, q, g.own, m, g.off, lo=1, top=1, weight=w)
    rest = (rhs - corr) / (_safe(m) * q.row0(C))
    return C.write(g.start, jnp.where(m == 0, jnp.arctan2(y.row0(C), x.row0(C)), rest))


def _ev_abs(P, C, g, m):
    (x,) = g.ops
    return C.write(g.start, jnp.sign(x.row0(C)) * x.at(C, m, P.K))


def _ev_select(P, C, g, m):
    pred, *cases = g.ops
    which = jnp.clip(pred.row0(C).astype(jnp.int32), 0, len(cases) - 1)
    vals = jnp.stack([c.at(C, m, P.K) for c in cases])
    return C.write(g.start, jnp.take_along_axis(vals, which[None], 0)[0])


def _ev_piece(P, C, g, m):
    name, (params, dtypes) = g.param
    prim = _PIECE_PRIMS[name]
    ins = [op.row0(C).astype(dt) for op, dt in zip(g.ops, dtypes)]
    val = jnp.asarray(prim.bind(*ins, **dict(params))).astype(jnp.float64)
    return C.write(g.start, jnp.where(m == 0, val, 0.0))


class _StopGradient:
    @staticmethod
    def bind(x, **_):
        return x


_PIECE_PRIMS = {"lt": lax.lt_p, "le": lax.le_p, "gt": lax.gt_p, "ge": lax.ge_p, "eq": lax.eq_p,
                "ne": lax.ne_p, "sign": lax.sign_p, "floor": lax.floor_p, "ceil": lax.ceil_p,
                "round": lax.round_p, "is_finite": lax.is_finite_p, "and": lax.and_p, "or": lax.or_p,
                "not": lax.not_p, "stop_gradient": _StopGradient,
                "convert_element_type": lax.convert_element_type_p}


# ---------------------------------------------------------------- commit deltas (CompactProgram._commit)
def _dl_lin(P, C, D, g, m):
    return P.change(C, D, g.ops[0], g.off)


def _dl_ddt(P, C, D, g, m):
    dx = P.change(C, D, g.ops[0], g.off + 1)  # z_m = (m + 1) x_{m+1}: x's offset is one more
    return None if dx is None else (_mf(m) + 1.0) * dx


def _dl_mul(P, C, D, g, m):
    a, b = g.ops
    return add_coefs(mul_coefs(a.row0(C), P.change(C, D, b, g.off)), mul_coefs(P.change(C, D, a, g.off), b.row0(C)))


def _dl_div(P, C, D, g, m):
    a, b = g.ops
    db = P.change(C, D, b, g.off)
    num = add_coefs(P.change(C, D, a, g.off), None if db is None else -(g.own.row0(C) * db))
    return None if num is None else num / b.row0(C)


def _dl_sqrt(P, C, D, g, m):
    dx = P.change(C, D, g.ops[0], g.off)
    return None if dx is None else dx / (2.0 * g.own.row0(C))


def _dl_powc(P, C, D, g, m):
    a, e = g.ops
    dx = P.change(C, D, a, g.off)
    return None if dx is None else e.row0(C) * g.own.row0(C) * dx / a.row0(C)


def _dl_exp(P, C, D, g, m):
    dx = P.change(C, D, g.ops[0], g.off)
    return None if dx is None else g.own.row0(C) * dx


def _dl_log(P, C, D, g, m):
    (a,) = g.ops
    dx = P.change(C, D, a, g.off)
    return None if dx is None else dx / a.row0(C)


def _dl_sincos(P, C, D, g, m):
    dx = P.change(C, D, g.ops[0], g.off)
    if dx is None:
        return None
    s0, c0 = g.own.row0(C), Operand(g.own.src + g.size).row0(C)
    return jnp.concatenate([c0 * dx, (s0 if g.param else -s0) * dx], axis=0)


def _dl_inv(P, C, D, g, m):
    x, q = g.ops
    dx = P.change(C, D, x, g.off)
    return None if dx is None else (-dx if g.param == "acos" else dx) / q.row0(C)


def _dl_atan2(P, C, D, g, m):
    y, x, q = g.ops
    dy, dx = P.change(C, D, y, g.off), P.change(C, D, x, g.off)
    num = add_coefs(mul_coefs(x.row0(C), dy), None if dx is None else -(y.row0(C) * dx))
    return None if num is None else num / q.row0(C)


def _dl_abs(P, C, D, g, m):
    (x,) = g.ops
    dx = P.change(C, D, x, g.off)
    return None if dx is None else jnp.sign(x.row0(C)) * dx


def _dl_select(P, C, D, g, m):
    pred, *cases = g.ops
    changes = [P.change(C, D, c, g.off) for c in cases]
    if all(ch is None for ch in changes):
        return None
    which = jnp.clip(pred.row0(C).astype(jnp.int32), 0, len(cases) - 1)
    vals = jnp.stack([jnp.zeros_like(pred.row0(C)) if ch is None else ch for ch in changes])
    return jnp.take_along_axis(vals, which[None], 0)[0]


def _dl_piece(P, C, D, g, m):
    return None  # constant beyond order 0, and m >= 1


EVAL = {"lin": _ev_lin, "ddt": _ev_ddt, "mul": _ev_mul, "div": _ev_div, "sqrt": _ev_sqrt,
         "powc": _ev_powc, "exp": _ev_exp, "log": _ev_log, "sincos": _ev_sincos, "inv": _ev_inv,
         "atan2": _ev_atan2, "abs": _ev_abs, "select": _ev_select, "piece": _ev_piece}

DELTA = {"lin": _dl_lin, "ddt": _dl_ddt, "mul": _dl_mul, "div": _dl_div, "sqrt": _dl_sqrt,
          "powc": _dl_powc, "exp": _dl_exp, "log": _dl_log, "sincos": _dl_sincos, "inv": _dl_inv,
          "atan2": _dl_atan2, "abs": _dl_abs, "select": _dl_select, "piece": _dl_piece}
