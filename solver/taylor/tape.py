"""Unrolled Taylor engine: each stage's recurrences as straight-line code.

:class:`~solver.taylor.program.TaylorProgram` interprets the residual's jaxpr with a
``lax`` loop over the stages and dynamic indexing of the order axis, so the
program does not grow with the order — but XLA cannot fuse across the loop,
and every coefficient read and write is a dynamic slice: a pendulum step then
costs many times its arithmetic (docs/explanation/engines.md).

Here the same analysis (flattened equations, series nodes, offsets, windows)
is emitted with the stage k and every order m as Python integers: a node's
coefficients are a Python list indexed by the static order, a coefficient
known to be zero is ``None`` (no code at all: the time series t0, 1, 0, …
and constants' higher coefficients cost nothing), Cauchy products are sums
of static terms, and the whole series of a step is one straight-line
program that XLA fuses into a few kernels and ``vmap`` turns into vector
operations over a batch.  The recurrences are those of ``taylor.py`` (same
rules, same window logic), written for static orders.  Each stage's new
coefficients pass a :func:`fence`, so that XLA's fusion does not recompute
them, with all the orders below, inside every kernel that reads them.

Its program grows with the order and the model (heyoka's default mode); the
integrator chooses it for small and medium models (``mode="auto"``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.dae.derivative import ddt_p
from solver.dae.primitives import UnsupportedPrimitiveError
from solver.taylor.ir import BILINEAR, LINEAR, NONLINEAR, PIECEWISE, Lit, add_coefs, is_float, plus, times
from solver.taylor.program import TaylorProgram

__all__ = ["UnrolledProgram", "fence"]

Coef = Any  # a jnp array, or None for a coefficient known to be zero


def fence(values: list, anchor) -> list:
    """``values`` unchanged, computed once however many kernels read them.

    XLA:CPU's fusion copies a cheap elementwise operation into every fused
    kernel that reads it, so a coefficient read by all later orders is
    recomputed with its whole cone of earlier operations in each: the
    rotation-product pendulum's step copied every operation 22-33 times and
    compiled for 139 s (``workflows/benchmarks/results/compile_size.txt``).
    Optimization barriers are expanded before fusion on this backend, and
    dots or custom calls would keep the step loop from being compiled whole
    (``solver.integrate.xla_setup``), so the values pass through a while loop of one
    trip that XLA cannot see through: it runs while a flag known only at run
    time (``not isnan(anchor)``) is set, and its body clears the flag and
    multiplies the values by it (exactly 1.0), so the loop is neither
    removed nor forwarded around.

    Args:
        values: floating arrays (tracers) of any shapes.
        anchor: a floating scalar known only at run time (the step's time);
            a NaN anchor skips the loop, which returns ``values`` as they are.

    Returns:
        A list of arrays equal to ``values`` (subnormal numbers flushed to
        zero, as by every arithmetic operation of XLA:CPU).
    """
    if not values:
        return []
    go = ~jnp.isnan(anchor)

    def body(carry):
        again, vs = carry
        ones = {}

        def one(dtype):
            if dtype not in ones:
                ones[dtype] = again.astype(dtype)
            return ones[dtype]

        return jnp.zeros_like(again), [times(v, one(v.dtype)) for v in vs]

    return lax.while_loop(lambda c: c[0], body, (go, list(values)))[1]


def _input_coef(x, m: int, l: int):
    """Coefficient m of the input x^(l) from the variable's row m + l: (m+1)...(m+l) x[m+l]."""
    return None if x is None else times(float(math.prod(range(m + 1, m + l + 1))), x)


def _bilinear(e):
    """The product of a ``mul`` or ``dot_general`` equation as a function of its two operands."""
    if e.prim.name == "mul":
        return times
    dims = {k: v for k, v in e.params.items() if k in ("dimension_numbers", "precision")}
    return lambda x, y: jax.lax.dot_general(x, y, **dims)


def _cauchy(P: list, Q: list, m: int, f=times, square: bool = False):
    """Σ_{j=0}^{m} f(P[j], Q[m-j]), None terms skipped; ``square``: P is Q and f commutes.

    A square's terms pair up (x_j x_{m-j} = x_{m-j} x_j), so it takes half the
    products: 2 Σ_{j<m-j} x_j x_{m-j} (+ x_{m/2}^2).  XLA does not find the pairs
    itself (the pendulum's series: 545 multiplies in the optimised program
    either way).
    """
    if not square:
        return add_coefs(*[f(P[j], Q[m - j]) for j in range(m + 1) if P[j] is not None and Q[m - j] is not None])
    pairs = add_coefs(*[f(P[j], P[m - j]) for j in range((m + 1) // 2) if P[j] is not None and P[m - j] is not None])
    mid = P[m // 2] if m % 2 == 0 else None
    return add_coefs(None if pairs is None else times(2.0, pairs), None if mid is None else f(mid, mid))


def _scale(s, a):
    return None if a is None else times(s, a)


class UnrolledProgram:
    """A :class:`TaylorProgram`'s stages as straight-line code over static orders.

    Args:
        prog: the analysed Taylor program (equations, series nodes, offsets).

    State: ``nodes`` maps a series node to a list of K coefficients
    (``None`` = zero or not yet computed; the staging never reads a
    coefficient before computing it), ``aux`` the auxiliary series of the
    nonlinear rules, ``XL`` a variable to a list of KX coefficient rows.
    """

    def __init__(self, prog: TaylorProgram):
        self.prog = prog
        self.dae = prog.dae
        self.K, self.KX = prog.K, prog.KX
        self.live = [(i, e) for i, e in enumerate(prog.live) if any(o in prog.series for o in e.outvars)]
        self.shapes = {v: tuple(prog.avals[v].shape) for v in prog.series if v in prog.off}

    # ------------------------------------------------------------ state
    def empty(self):
        """Fresh (nodes, aux): every coefficient unknown."""
        return {v: [None] * self.K for v in self.shapes}, {}

    @staticmethod
    def copy(nodes, aux):
        """A shallow copy (the lists; coefficients are immutable arrays)."""
        return {k: list(v) for k, v in nodes.items()}, {k: list(v) for k, v in aux.items()}

    @staticmethod
    def fence_new(nodes, aux, XL, fenced: dict, anchor):
        """Pass every floating coefficient not fenced yet through :func:`fence`, in place.

        Called after each stage's commit pass, it bounds what XLA's fusion
        recomputes to one stage's operations.  ``fenced`` maps ``id`` to the
        fenced arrays (kept alive so that their ids stay theirs).
        """
        slots, vals = [], []
        for table in (nodes, aux, XL):
            for L in table.values():
                for m, v in enumerate(L):
                    if (v is not None and id(v) not in fenced and isinstance(v, jax.Array)
                            and jnp.issubdtype(v.dtype, jnp.floating)):
                        slots.append((L, m))
                        vals.append(v)
        for (L, m), v in zip(slots, fence(vals, anchor)):
            L[m] = v
            fenced[id(v)] = v

    def lists_from_state(self, integ, z):
        """Variable coefficient rows with the state ``z`` filled in (rows ≥ d_j unknown)."""
        XL = {}
        for v in self.dae.variables:
            a, _ = integ.state_slices[v.name]
            rows, cols = integ.state_rows[v.name], integ.state_cols[v.name]
            L = [None] * self.KX
            for r in sorted(set(int(x) for x in rows)):
                sel = np.nonzero(rows == r)[0]
                if len(sel) == v.size and np.array_equal(cols[sel], np.arange(v.size)):
                    row = z[a + sel[0]: a + sel[-1] + 1]
                else:
                    row = jnp.zeros(v.size, z.dtype).at[cols[sel]].set(z[a + sel])
                L[r] = row.reshape(v.shape)
            XL[v.name] = L
        return XL

    def set_stage(self, XL, k: int, u):
        """``XL`` with stage k's unknowns ``X[j, k + d_j]`` set from flat ``u``."""
        out = dict(XL)
        for v in self.dae.variables:
            dv = self.prog.d[v.offset: v.offset + v.size]
            uv = u[v.offset: v.offset + v.size]
            L = list(XL[v.name])
            for dd in np.unique(dv):
                row = k + int(dd)
                if not 0 <= row < self.KX:
                    continue
                mask = dv == dd
                if mask.all():
                    val = uv
                else:
                    old = L[row] if L[row] is not None else jnp.zeros(v.shape, u.dtype)
                    val = jnp.where(jnp.asarray(mask), uv, jnp.ravel(old))
                L[row] = val.reshape(v.shape)
            out[v.name] = L
        return out

    def arrays(self, XL):
        """Coefficient arrays ``(KX, *shape)`` per variable from the rows."""
        out = {}
        for v in self.dae.variables:
            rows = [r if r is not None else jnp.zeros(v.shape) for r in XL[v.name]]
            out[v.name] = jnp.stack([jnp.asarray(r, jnp.float64) for r in rows])
        return out

    # ------------------------------------------------------------ reading operands
    def _coef(self, a, j: int, nodes, consts) -> Coef:
        if j < 0:
            return None
        if isinstance(a, Lit):
            return jnp.asarray(a.val) if j == 0 else None
        if a in self.prog.series:
            return nodes[a][j] if j < self.K else None
        return consts[a] if j == 0 else None

    def _coef0(self, a, nodes, consts):
        if isinstance(a, Lit):
            return a.val
        if a in self.prog.series:
            c = nodes[a][0]
            if c is None:  # a series whose value is zero at the expansion point
                aval = self.prog.avals[a]
                c = jnp.zeros(aval.shape, aval.dtype)
            return c
        return consts[a]

    def _series(self, a, nodes, consts) -> list:
        # Order 0 is never None: the rules evaluate functions there.
        return [self._coef0(a, nodes, consts) if j == 0 else self._coef(a, j, nodes, consts)
                for j in range(self.K)]

    def _aval(self, a):
        return jax.typeof(a.val) if isinstance(a, Lit) else self.prog.avals[a]

    # ------------------------------------------------------------ stages
    def stage(self, nodes, aux, XL, k: int, t0, consts):
        """Compute every node's coefficient(s) of stage k in place (all window orders)."""
        prog = self.prog
        for w in reversed(range(prog.window)):
            for i, (name, l) in prog.input_x.items():
                if i not in prog.off:
                    continue
                m = k + prog.off[i] - w
                if not 0 <= m < self.K:
                    continue
                row = m + l
                x = XL[name][row] if row < self.KX else None
                nodes[i][m] = _input_coef(x, m, l)
            if prog.t_id in prog.off:
                m = k + prog.off[prog.t_id] - w
                if m == 0:
                    nodes[prog.t_id][0] = jnp.asarray(t0, jnp.float64)
                elif m == 1:
                    nodes[prog.t_id][1] = jnp.ones((), jnp.float64)
            for idx, e in self.live:
                m = k + prog.eqn_off(e) - w
                if 0 <= m < self.K:
                    self._apply(idx, e, m, nodes, aux, consts)

    def commit(self, nodes, aux, XL_before, XL, k: int, consts):
        """Stage k's coefficients once its unknowns are set, updated in place from the residual pass's.

        ``nodes``/``aux`` hold the residual pass of stage k (:meth:`stage`
        with the stage's unknowns unset, ``XL_before``); ``XL`` has them set.
        Only what reads a changed coefficient is computed again, and where
        the only change is in its inputs' order-m coefficients (m >= 1) a
        node's order-m coefficient is affine in them with the slope of its
        operation at order 0, so it takes the change times that slope
        (:meth:`_delta_rule`): a product's two terms instead of its whole
        Cauchy sum.  Elsewhere the node is computed again by its rule.
        """
        prog = self.prog
        before: dict = {}  # (node id, order) -> the residual pass's coefficient, kept when replaced
        changed: dict = {}  # node id, or ("aux", eqn index) -> orders replaced by this pass

        def mark(key, m):
            if key in nodes:  # a node (not an equation's aux series, not an unused result)
                before.setdefault((key, m), nodes[key][m])
            changed.setdefault(key, set()).add(m)

        for w in reversed(range(prog.window)):
            for i, (name, l) in prog.input_x.items():
                if i not in prog.off:
                    continue
                m = k + prog.off[i] - w
                row = m + l
                if not 0 <= m < self.K or row >= self.KX or XL[name][row] is XL_before[name][row]:
                    continue
                mark(i, m)
                nodes[i][m] = _input_coef(XL[name][row], m, l)
            for idx, e in self.live:
                m = k + prog.eqn_off(e) - w
                if not 0 <= m < self.K:
                    continue
                reads = set()
                for a in e.invars:
                    if not isinstance(a, Lit) and a in changed:
                        reads |= {j for j in changed[a] if j <= m + 1}
                if e.prim.name in NONLINEAR:
                    for key in list(e.outvars) + [("aux", idx)]:
                        reads |= {j for j in changed.get(key, ()) if j < m}
                if not reads:
                    continue
                for o in e.outvars:
                    mark(o, m)
                mark(("aux", idx), m)
                val = self._delta_rule(idx, e, m, nodes, aux, before, changed, consts) \
                    if m >= 1 and reads == {m} else None
                if val is None:
                    self._apply(idx, e, m, nodes, aux, consts)
                else:
                    nodes[e.outvars[0]][m] = self._as_node(val, e.outvars[0])
        return nodes, aux

    def _as_node(self, val, out):
        """``val`` as node ``out``'s coefficient: float64 where the node is floating, its shape."""
        val = jnp.asarray(val)
        if is_float(self._aval(out)) and val.dtype != jnp.float64:
            val = val.astype(jnp.float64)
        shape = self.shapes.get(out, ())
        return val if val.shape == shape else jnp.broadcast_to(val, shape)

    def _delta_rule(self, idx, e, m: int, nodes, aux, before, changed, consts):
        """Order-m coefficient of e's output from its residual-pass value plus slope x change.

        Called when the only coefficients e reads that changed are its
        inputs' order-m ones (m >= 1).  Returns None where no rule is
        written here (the caller computes the node again); sets the
        auxiliary series' order-m coefficient of the rules that keep one.
        """
        name = e.prim.name
        out = e.outvars[0]
        old = nodes[out][m]

        def delta(a):
            if isinstance(a, Lit) or m not in changed.get(a, ()):
                return None
            new, was = nodes[a][m], before[(a, m)]
            if was is None:
                return new
            return _scale(-1.0, was) if new is None else plus(new, _scale(-1.0, was))

        def c0(a):
            return self._coef0(a, nodes, consts)

        def plus_old(*terms):
            return add_coefs(old, *terms)

        series = [not isinstance(a, Lit) and a in self.prog.series for a in e.invars]
        if name in BILINEAR and all(series):
            a, b = e.invars
            f = _bilinear(e)
            da, db = delta(a), delta(b)
            if a == b and name == "mul":
                return plus_old(times(times(2.0, c0(a)), da))
            return plus_old(None if db is None else f(c0(a), db), None if da is None else f(da, c0(b)))
        if name in ("square", "integer_pow") and (name == "square" or int(e.params["y"]) == 2):
            dx = delta(e.invars[0])
            return plus_old(times(times(2.0, c0(e.invars[0])), dx))
        if name in ("sin", "cos", "sinh", "cosh"):
            dx = delta(e.invars[0])
            C = aux[(idx, "comp")]
            hyper = name in ("sinh", "cosh")
            sz = 1.0 if (hyper or name == "sin") else -1.0
            sc = 1.0 if (hyper or name == "cos") else -1.0
            C[m] = add_coefs(C[m], times(times(sc, nodes[out][0]), dx))
            return plus_old(times(times(sz, C[0]), dx))
        if name in ("exp", "exp2", "expm1"):
            dx = delta(e.invars[0])
            slope = {"exp": nodes[out][0], "exp2": times(math.log(2.0), nodes[out][0]),
                     "expm1": plus(nodes[out][0], 1.0)}[name]
            return plus_old(times(slope, dx))
        if name in ("log", "log1p"):
            x0 = c0(e.invars[0])
            return plus_old(delta(e.invars[0]) / (x0 if name == "log" else plus(x0, 1.0)))
        if name == "sqrt":
            return plus_old(delta(e.invars[0]) / times(2.0, nodes[out][0]))
        if name == "div" and series[1]:
            a, b = e.invars
            da, db = delta(a), delta(b)
            num = add_coefs(da, None if db is None else _scale(-1.0, times(nodes[out][0], db)))
            return plus_old(num / c0(b))
        return None

    def residual(self, nodes, k: int, consts=None):
        """Coefficient ``k + c_i`` of every equation (0 where negative or constant)."""
        parts = []
        for (first, size), o in zip(self.dae.equation_blocks, self.prog.out_ids):
            ci = self.prog.c[first: first + size]
            if o not in self.prog.series:
                parts.append(jnp.zeros(size))
                continue
            if np.all(ci == ci[0]):
                m = k + int(ci[0])
                val = nodes[o][m] if 0 <= m < self.K else None
                parts.append(jnp.zeros(size) if val is None else jnp.ravel(val).astype(jnp.float64))
                continue
            elems = []
            for e in range(size):
                m = k + int(ci[e])
                val = nodes[o][m] if 0 <= m < self.K else None
                elems.append(jnp.zeros(()) if val is None else jnp.ravel(val)[e])
            parts.append(jnp.stack(elems))
        return jnp.concatenate(parts)

    def hidden(self, integ, z, t0, consts):
        """Every constraint on the state (coefficients r < c_i of f_i), flat."""
        XL = self.lists_from_state(integ, z)
        nodes, aux = self.empty()
        for k in range(self.prog.k_start, 0):
            self.stage(nodes, aux, XL, k, t0, consts)
        vals = []
        for b, r, e in integ.hidden_index:
            o = self.prog.out_ids[b]
            if o in self.prog.series:
                c = nodes[o][r]
                vals.append(jnp.zeros(()) if c is None else jnp.ravel(c)[e])
            else:
                vals.append(jnp.ravel(jnp.asarray(consts[o], jnp.float64))[e] if r == 0 else jnp.zeros(()))
        return jnp.stack(vals)

    # ------------------------------------------------------------ rules
    def _apply(self, idx, e, m: int, nodes, aux, consts):
        prog = self.prog
        name = e.prim.name
        out = e.outvars[0]
        shape = self.shapes.get(out, ())
        if e.prim is ddt_p:
            val = _scale(float(m + 1), self._coef(e.invars[0], m + 1, nodes, consts))
        elif name in PIECEWISE:
            if m != 0:
                val = None
            else:
                val = e.prim.bind(*[self._coef0(a, nodes, consts) for a in e.invars], **e.params)
        elif name == "convert_element_type" and not is_float(self._aval(e.invars[0])):
            val = jnp.asarray(self._coef0(e.invars[0], nodes, consts), jnp.float64) if m == 0 else None
        elif name in LINEAR:
            args, any_series = [], False
            for a in e.invars:
                aval = self._aval(a)
                if not is_float(aval):
                    args.append(self._coef0(a, nodes, consts))
                    continue
                c = self._coef(a, m, nodes, consts)
                if c is None:
                    c = jnp.zeros(aval.shape, aval.dtype)
                else:
                    any_series = True
                args.append(c)
            if not any_series:
                val = None
                if e.prim.multiple_results:
                    for o in e.outvars:
                        if o in nodes:  # unused outputs (a split's other parts) have no storage
                            nodes[o][m] = None
                    return
            else:
                res = e.prim.bind(*args, **e.params)
                if e.prim.multiple_results:
                    for o, v in zip(e.outvars, res):
                        if o in nodes:
                            nodes[o][m] = v
                    return
                val = res
        elif name in BILINEAR:
            a, b = e.invars
            f = _bilinear(e)
            a_series = (not isinstance(a, Lit)) and a in prog.series
            b_series = (not isinstance(b, Lit)) and b in prog.series
            if not b_series:
                x = self._coef(a, m, nodes, consts)
                val = None if x is None else f(x, self._coef0(b, nodes, consts))
            elif not a_series:
                y = self._coef(b, m, nodes, consts)
                val = None if y is None else f(self._coef0(a, nodes, consts), y)
            else:
                val = _cauchy(nodes[a], nodes[b], m, f, square=(a == b and name == "mul"))
        elif name in NONLINEAR:
            val = self._nonlinear(idx, e, m, nodes, aux, consts, shape)
        else:
            raise UnsupportedPrimitiveError(
                f"the Taylor engine has no rule for the operation '{name}' (used at {e.source})")
        nodes[out][m] = None if val is None else self._as_node(val, out)

    def _nonlinear(self, idx, e, m: int, nodes, aux, consts, shape):
        """Order-m coefficient of a nonlinear elementwise primitive (rules of taylor._nonlinear)."""
        name = e.prim.name
        Z = nodes[e.outvars[0]]
        ops = [self._series(a, nodes, consts) for a in e.invars]

        def A(tag):
            return aux.setdefault((idx, tag), [None] * self.K)

        def conv(P, Q, lo, top, w=None):
            # Σ_{r=lo}^{m-top} w(r) P[r] Q[m-r]
            terms = []
            for r in range(lo, m - top + 1):
                if P[r] is not None and Q[m - r] is not None:
                    t = times(P[r], Q[m - r])
                    terms.append(t if w is None else times(float(w(r)), t))
            return add_coefs(*terms)

        def one(v):
            return jnp.ones(shape) * v

        if name == "div":
            a, b = ops
            b_series = (not isinstance(e.invars[1], Lit)) and e.invars[1] in self.prog.series
            if not b_series:
                return None if a[m] is None else a[m] / b[0]
            num = add_coefs(a[m], _scale(-1.0, conv(b, Z, 1, 0)))
            return None if num is None else num / b[0]
        if name in ("integer_pow", "square"):
            n = 2 if name == "square" else int(e.params["y"])
            X = ops[0]
            if n == 0:
                return one(1.0) if m == 0 else None
            if n == 1:
                return X[m]
            if n < 0:
                P = X
                for i in range(2, -n + 1):
                    Pi = A(f"p{i}")
                    Pi[m] = conv(P, X, 0, 0)
                    P = Pi
                num = add_coefs(one(1.0) if m == 0 else None, _scale(-1.0, conv(P, Z, 1, 0)))
                return None if num is None else num / P[0]
            P = X
            for i in range(2, n):
                Pi = A(f"p{i}")
                Pi[m] = _cauchy(P, X, m, square=(i == 2))
                P = Pi
            return _cauchy(P, X, m, square=(n == 2))
        if name in ("sqrt", "rsqrt", "cbrt") or (name == "pow" and not (
                (not isinstance(e.invars[1], Lit)) and e.invars[1] in self.prog.series)):
            X = ops[0]
            if name == "sqrt":
                if m == 0:
                    return jnp.sqrt(X[0])
                num = add_coefs(X[m], _scale(-1.0, conv(Z, Z, 1, 1)))
                return None if num is None else num / (2.0 * Z[0])
            if name == "pow":
                a = ops[1][0]
                if m == 0:
                    return X[0] ** a
            else:
                a = {"rsqrt": -0.5, "cbrt": 1.0 / 3.0}[name]
                if m == 0:
                    return jnp.cbrt(X[0]) if name == "cbrt" else X[0] ** a
            terms = []
            for j in range(m):
                if X[m - j] is not None and Z[j] is not None:
                    terms.append((a * (m - j) - j) * (X[m - j] * Z[j]))
            s = add_coefs(*terms)
            return None if s is None else s / (m * X[0])
        if name == "pow":
            X, Y = ops
            Lg = A("log")
            if m == 0:
                Lg[0] = jnp.log(X[0])
            else:
                num = add_coefs(X[m], _scale(-1.0 / m, conv(Lg, X, 1, 1, w=lambda r: r)))
                Lg[m] = None if num is None else num / X[0]
            W = A("prod")
            W[m] = conv(Y, Lg, 0, 0)
            if m == 0:
                return jnp.exp(W[0])
            return _scale(1.0 / m, conv(W, Z, 1, 0, w=lambda r: r))
        if name in ("exp", "exp2", "expm1"):
            X = ops[0]
            if name == "exp2":
                X = [_scale(math.log(2.0), x) for x in X]
            if m == 0:
                return jnp.expm1(X[0]) if name == "expm1" else jnp.exp(X[0])
            Zp = Z if name != "expm1" else [Z[0] + 1.0] + Z[1:]
            return _scale(1.0 / m, conv(X, Zp, 1, 0, w=lambda r: r))
        if name in ("log", "log1p"):
            X = ops[0]
            x0 = X[0] + 1.0 if name == "log1p" else X[0]
            if m == 0:
                return jnp.log(x0)
            num = add_coefs(X[m], _scale(-1.0 / m, conv(Z, X, 1, 1, w=lambda r: r)))
            return None if num is None else num / x0
        if name in ("sin", "cos", "sinh", "cosh"):
            X = ops[0]
            C = A("comp")
            hyper = name in ("sinh", "cosh")
            f0, g0 = {"sin": (jnp.sin, jnp.cos), "cos": (jnp.cos, jnp.sin),
                      "sinh": (jnp.sinh, jnp.cosh), "cosh": (jnp.cosh, jnp.sinh)}[name]
            sz = 1.0 if (hyper or name == "sin") else -1.0
            sc = 1.0 if (hyper or name == "cos") else -1.0
            if m == 0:
                C[0] = g0(X[0])
                return f0(X[0])
            zm = _scale(sz / m, conv(X, C, 1, 0, w=lambda r: r))
            C[m] = _scale(sc / m, conv(X, Z, 1, 0, w=lambda r: r))
            return zm
        if name in ("tan", "tanh", "logistic"):
            X = ops[0]
            U = A("comp")
            if m == 0:
                zm = {"tan": jnp.tan, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid}[name](X[0])
            else:
                zm = _scale(1.0 / m, conv(X, U, 1, 0, w=lambda r: r))
            Z[m] = zm
            zz = conv(Z, Z, 0, 0)
            if name == "tan":
                U[m] = add_coefs(one(1.0) if m == 0 else None, zz)
            elif name == "tanh":
                U[m] = add_coefs(one(1.0) if m == 0 else None, _scale(-1.0, zz))
            else:
                U[m] = add_coefs(zm, _scale(-1.0, zz))
            return zm
        if name in ("asin", "acos", "atan", "asinh", "acosh", "atanh", "atan2"):
            Q = A("q")
            if name == "atan2":
                Y, X = ops
                Q[m] = add_coefs(conv(X, X, 0, 0), conv(Y, Y, 0, 0))
                if m == 0:
                    return jnp.arctan2(Y[0], X[0])
                rhs = add_coefs(conv(X, Y, 0, 1, w=lambda r: m - r), _scale(-1.0, conv(Y, X, 0, 1, w=lambda r: m - r)))
            else:
                X = ops[0]
                xx = conv(X, X, 0, 0)
                delta = one(1.0) if m == 0 else None
                if name in ("asin", "acos", "asinh", "acosh"):
                    if m == 0:
                        base0 = {"asin": 1.0 - X[0] ** 2, "acos": 1.0 - X[0] ** 2,
                                 "asinh": 1.0 + X[0] ** 2, "acosh": X[0] ** 2 - 1.0}[name]
                        Q[0] = jnp.sqrt(base0)
                    else:
                        target = _scale(-1.0, xx) if name in ("asin", "acos") else xx
                        num = add_coefs(target, _scale(-1.0, conv(Q, Q, 1, 1)))
                        Q[m] = None if num is None else num / (2.0 * Q[0])
                elif name == "atanh":
                    Q[m] = add_coefs(delta, _scale(-1.0, xx))
                else:  # atan
                    Q[m] = add_coefs(delta, xx)
                if m == 0:
                    return {"asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan, "asinh": jnp.arcsinh,
                            "acosh": jnp.arccosh, "atanh": jnp.arctanh}[name](X[0])
                rhs = _scale((-1.0 if name == "acos" else 1.0) * m, X[m])
            corr = conv(Q, Z, 1, 1, w=lambda r: m - r)
            num = add_coefs(rhs, _scale(-1.0, corr))
            return None if num is None else num / (m * Q[0])
        if name == "abs":
            X = ops[0]
            return None if X[m] is None else jnp.sign(X[0]) * X[m]
        if name in ("max", "min"):
            Aa, Bb = ops
            pick_a = (Aa[0] >= Bb[0]) if name == "max" else (Aa[0] <= Bb[0])
            if Aa[m] is None and Bb[m] is None:
                return None
            za = Aa[m] if Aa[m] is not None else jnp.zeros(shape)
            zb = Bb[m] if Bb[m] is not None else jnp.zeros(shape)
            return jnp.where(pick_a, za, zb)
        if name == "clamp":
            lo, X, hi = ops
            z = lambda v: v if v is not None else jnp.zeros(shape)
            if lo[m] is None and X[m] is None and hi[m] is None:
                return None
            inside = (X[0] >= lo[0]) & (X[0] <= hi[0])
            return jnp.where(inside, z(X[m]), jnp.where(X[0] < lo[0], z(lo[m]), z(hi[m])))
        if name in ("reduce_max", "reduce_min"):
            X = ops[0]
            if X[m] is None:
                return None
            axes = tuple(e.params["axes"])
            arg = jnp.argmax if name == "reduce_max" else jnp.argmin
            nd = jnp.ndim(X[0])
            keep = [i for i in range(nd) if i not in axes]
            moved0 = jnp.transpose(X[0], keep + list(axes)).reshape(tuple(X[0].shape[i] for i in keep) + (-1,))
            movedm = jnp.transpose(X[m], keep + list(axes)).reshape(moved0.shape)
            i0 = arg(moved0, axis=-1)
            return jnp.take_along_axis(movedm, i0[..., None], axis=-1)[..., 0]
        raise UnsupportedPrimitiveError(
            f"the Taylor engine has no rule for the operation '{name}' (used at {e.source})")
