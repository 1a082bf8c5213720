"""Incremental Taylor arithmetic over a residual's jaxpr (docs/method.md §3-4).

The residual is traced once to a jaxpr; :class:`TaylorProgram` interprets it
with arrays of normalised Taylor coefficients, one coefficient per node per
stage, so that the loop over the order can be a ``lax`` loop and the compiled
program does not grow with the order.

Vocabulary:

* ``X[name]``: normalised coefficients of a variable, shape ``(KX, *shape)``;
  ``X[name][r] = x^(r)(t_n) / r!``.
* node ``v`` of the jaxpr: a *series* (depends on t or the unknowns; kept as a
  coefficient array ``(K, *shape)``) or a *constant* (evaluated once).
* ``off(v)``: the node's order offset.  At stage k the node is computed at
  order ``k + off(v)``; outputs of equation i need order ``k + c_i``; a ``ddt``
  needs one order more of its operand.  When a vector node mixes elements of
  different offsets, a window of the last ``W`` orders is recomputed each
  stage (see ``_window``), which keeps every coefficient exact.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core

from solver.taylor.clean import clean
from solver.dae.problem import DAE
from solver.dae.derivative import ddt_p
from solver.dae.primitives import CALL_JAXPR_PARAM, UnsupportedPrimitiveError, call_body

__all__ = ["TaylorProgram", "UnsupportedPrimitiveError"]


# ---------------------------------------------------------------- jaxpr flattening
@dataclasses.dataclass
class _Eqn:
    prim: Any
    invars: list  # int ids or _Lit
    outvars: list  # int ids
    params: dict
    source: str


@dataclasses.dataclass
class _Lit:
    val: Any


def _source(eqn) -> str:
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(eqn.source_info)
    except Exception:  # pragma: no cover - best effort only
        return "?"


class _Flattener:
    """Inline nested calls into one flat list of equations with integer ids."""

    def __init__(self):
        self.eqns: list[_Eqn] = []
        self.n = 0
        self.const_values: dict[int, Any] = {}
        self.avals: dict[int, Any] = {}

    def new(self, aval=None):
        self.n += 1
        if aval is not None:
            self.avals[self.n - 1] = aval
        return self.n - 1

    def run(self, jaxpr, consts, invar_ids):
        env = {}
        for v, c in zip(jaxpr.constvars, consts):
            i = self.new(v.aval)
            self.const_values[i] = c
            env[v] = i
        for v, i in zip(jaxpr.invars, invar_ids):
            env[v] = i

        def read(a):
            if isinstance(a, jex_core.Literal):
                return _Lit(a.val)
            return env[a]

        for eqn in jaxpr.eqns:
            ins = [read(a) for a in eqn.invars]
            if eqn.primitive.name in CALL_JAXPR_PARAM:
                sub, subconsts = call_body(eqn)
                # custom_vjp_call carries extra (fwd/bwd) params only; its
                # first len(sub.invars) inputs are the primal inputs.
                ins_ids = []
                for a in ins[: len(sub.invars)]:
                    if isinstance(a, _Lit):
                        i = self.new(jax.typeof(a.val))
                        self.const_values[i] = a.val
                        ins_ids.append(i)
                    else:
                        ins_ids.append(a)
                outs = self.run(sub, subconsts, ins_ids)
                for v, o in zip(eqn.outvars, outs):
                    if isinstance(o, _Lit):
                        i = self.new(v.aval)
                        self.const_values[i] = o.val
                        o = i
                    env[v] = o
                continue
            outs = []
            for v in eqn.outvars:
                i = self.new(v.aval)
                env[v] = i
                outs.append(i)
            self.eqns.append(_Eqn(eqn.primitive, ins, outs, dict(eqn.params), _source(eqn)))
        return [read(a) for a in jaxpr.outvars]


# ------------------------------------------------------------- primitive classes
# Linear in their float operands jointly: coefficient m of the output is the
# primitive applied to coefficient m of each operand (integer operands such as
# indices are passed unchanged).
_LINEAR = {
    "add", "sub", "neg", "add_any", "concatenate", "pad", "reduce_sum", "broadcast_in_dim",
    "reshape", "squeeze", "expand_dims", "transpose", "slice", "dynamic_slice", "gather",
    "rev", "convert_element_type", "copy", "reduce_precision", "cumsum",
    "dynamic_update_slice", "scatter-add", "scatter_add", "select_n", "real", "split",
    "stack", "unstack", "tile",
}
_BILINEAR = {"mul", "dot_general"}
# Piecewise constant: only the order-0 coefficient is non-zero.
_PIECEWISE = {"sign", "floor", "ceil", "round", "lt", "le", "gt", "ge", "eq", "ne",
              "is_finite", "and", "or", "not", "stop_gradient", "argmax", "argmin"}
_NONLINEAR = {"div", "integer_pow", "square", "pow", "sqrt", "rsqrt", "cbrt", "exp", "exp2",
              "log", "log1p", "expm1", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin",
              "acos", "atan", "atan2", "abs", "max", "min", "logistic", "ddt", "clamp",
              "reduce_max", "reduce_min", "asinh", "acosh", "atanh"}


def _is_float(aval) -> bool:
    return jnp.issubdtype(aval.dtype, jnp.floating)


# ----------------------------------------------------------------- the program
class TaylorProgram:
    """A residual's jaxpr prepared for staged Taylor evaluation.

    Args:
        dae: the traced DAE.
        c: equation offsets (flat, length n).
        d: variable offsets (flat, length n).
        order: the Taylor order p (static).
        clean_tape: fold constants, apply identities and share common
            subexpressions first (:func:`solver.taylor.clean.clean`); off only to
            compare with the raw trace.

    Raises:
        UnsupportedPrimitiveError: the residual uses an operation with no
            Taylor rule; the message names it and where it came from.
    """

    def __init__(self, dae: DAE, c, d, order: int, clean_tape: bool = True):
        self.dae = dae
        self.c = np.asarray(c, dtype=int)
        self.d = np.asarray(d, dtype=int)
        self.p = int(order)
        self.n = dae.n
        flat = _Flattener()
        closed = dae.jaxpr
        in_ids = [flat.new(v.aval) for v in closed.jaxpr.invars]
        outs = flat.run(closed.jaxpr, list(closed.consts), in_ids)
        self.eqns = flat.eqns
        self.const_values = flat.const_values
        self.in_ids = in_ids
        self.out_ids = []
        for o in outs:  # a literal output (constant equation) becomes a constant node
            if isinstance(o, _Lit):
                i = flat.new(jax.typeof(o.val))
                self.const_values[i] = o.val
                o = i
            self.out_ids.append(o)
        self.avals = flat.avals
        self.clean_stats = None
        if clean_tape:
            self.eqns, self.out_ids, self.clean_stats = clean(
                self.eqns, self.out_ids, self.const_values, self.avals, set(in_ids), flat.new, _Lit)
        self._classify()
        self._offsets()
        self._check_rules()

    # -------------------------------------------------------------- analysis
    def _classify(self):
        keys = self.dae.input_keys
        self.t_id = self.in_ids[0]
        self.param_ids = {k[1]: i for k, i in zip(keys, self.in_ids) if k[0] == "p"}
        self.input_x = {i: (k[1], k[2]) for k, i in zip(keys, self.in_ids) if k[0] == "x"}
        series = {self.t_id} | set(self.input_x)
        for e in self.eqns:
            if any((not isinstance(a, _Lit)) and a in series for a in e.invars):
                series.update(e.outvars)
        self.series = series

    def _offsets(self):
        off: dict[int, int] = {}
        lo_c: dict[int, int] = {}
        for (first, size), o in zip(self.dae.equation_blocks, self.out_ids):
            ci = self.c[first : first + size]
            off[o] = max(off.get(o, -10**9), int(ci.max()))
            lo_c[o] = min(lo_c.get(o, 10**9), int(ci.min()))
        for e in reversed(self.eqns):
            outs = [off[o] for o in e.outvars if o in off]
            if not outs:
                continue
            need = max(outs) + (1 if e.prim is ddt_p else 0)
            for a in e.invars:
                if not isinstance(a, _Lit) and a in self.series:
                    off[a] = max(off.get(a, -10**9), need)
        self.off = off
        # Window: how many trailing orders each stage recomputes so that an
        # element computed "ahead" with a not-yet-known input is redone once
        # that input is known (see module docstring).
        viol = 0
        for i, (name, l) in self.input_x.items():
            if i in off:
                var = self.dae.var_index[name]
                dmin = int(self.d[var.offset : var.offset + var.size].min())
                viol = max(viol, off[i] + l - dmin)
        for o in self.out_ids:
            if o in self.series:
                viol = max(viol, off[o] - lo_c[o])
        self.window = 1 + max(viol, 0)
        series_offs = [off[v] for v in self.series if v in off]
        self.max_off = max(series_offs) if series_offs else 0
        self.k_start = -self.max_off - (self.window - 1)
        self.max_d = int(self.d.max())
        self.max_c = int(self.c.max())
        # Coefficient storage: orders up to p + max_off (+1 for ddt lookahead).
        self.K = self.p + self.max_off + 2
        self.KX = self.p + self.max_d + self.max_off + 2
        self.live = [e for e in self.eqns if any(o in off for o in e.outvars)]

    def _check_rules(self):
        for e in self.live:
            name = e.prim.name
            if not any(o in self.series for o in e.outvars):
                continue
            if e.prim is ddt_p or name in _LINEAR or name in _BILINEAR or name in _PIECEWISE or name in _NONLINEAR:
                continue
            raise UnsupportedPrimitiveError(
                f"the Taylor engine has no rule for the operation '{name}' "
                f"(used at {e.source}); supported: + - * / ** sqrt exp log sin cos tan asin acos "
                f"atan atan2 sinh cosh tanh abs, dot products, sums, indexing and concatenation"
            )

    def is_series(self, a) -> bool:
        """Whether an operand (node id or literal) is a series (depends on t or the unknowns)."""
        return (not isinstance(a, _Lit)) and a in self.series

    def eqn_off(self, e) -> int:
        """The order offset an equation is computed at: the largest of its live outputs'.

        An operation with several results (``split``) may have outputs that
        nothing uses; those have no offset and no storage.
        """
        return max(self.off[o] for o in e.outvars if o in self.off)

    # -------------------------------------------------------------- layout helpers
    def var_d(self, name) -> np.ndarray:
        """Offsets d of a variable's elements, shaped like the variable."""
        v = self.dae.var_index[name]
        return self.d[v.offset : v.offset + v.size].reshape(v.shape)

    def zeros_X(self, batch_shape=()):
        """Zero coefficient arrays for every variable."""
        return {v.name: jnp.zeros((self.KX,) + v.shape) for v in self.dae.variables}

    def init_coeffs(self):
        """Zero coefficient arrays for every series node (and auxiliaries)."""
        coeffs = {}
        for v in self.series:
            if v in self.off:
                a = self.avals[v]
                coeffs[v] = jnp.zeros((self.K,) + tuple(a.shape), dtype=a.dtype if not _is_float(a) else jnp.float64)
        aux = {}
        for idx, e in enumerate(self.live):
            if not any(o in self.series for o in e.outvars):
                continue
            shape = tuple(self.avals[e.outvars[0]].shape)
            for tag in _aux_tags(e):
                aux[(idx, tag)] = jnp.zeros((self.K,) + shape)
        return {"nodes": coeffs, "aux": aux}

    def constants(self, params: dict):
        """Evaluate every constant node for the given parameter values.

        Args:
            params: dict parameter name -> array (may be traced).

        Returns:
            dict node id -> value.
        """
        env = dict(self.const_values)
        for name, i in self.param_ids.items():
            env[i] = jnp.asarray(params[name], dtype=jnp.float64)
        for e in self.live + [e for e in self.eqns if e not in self.live]:
            if any(o in self.series for o in e.outvars):
                continue
            if all(o in env for o in e.outvars):
                continue
            ins = [a.val if isinstance(a, _Lit) else env[a] for a in e.invars]
            out = e.prim.bind(*ins, **e.params)
            outs = out if e.prim.multiple_results else [out]
            for o, val in zip(e.outvars, outs):
                env[o] = val
        return env

    # -------------------------------------------------------------- one stage
    def stage(self, state, X, k, t0, consts):
        """Compute every node's coefficients for stage k (all window orders).

        Args:
            state: coefficient arrays from :meth:`init_coeffs` / earlier stages.
            X: variable coefficients; those of stage k's unknowns hold their
                current values (zero on the residual pass).
            k: the stage (traced int).
            t0: expansion time.
            consts: from :meth:`constants`.

        Returns:
            The updated state.
        """
        nodes = dict(state["nodes"])
        aux = dict(state["aux"])
        for w in reversed(range(self.window)):
            # Inputs first: they depend on X only.
            for i, (name, l) in self.input_x.items():
                if i not in self.off:
                    continue
                m = k + self.off[i] - w
                mc = jnp.clip(m, 0, self.K - 1)
                idx = jnp.clip(mc + l, 0, self.KX - 1)
                ff = 1.0
                for s in range(1, l + 1):
                    ff = ff * (mc + s)
                val = ff * _at(X[name], idx) * (mc + l < self.KX)
                nodes[i] = write_row(nodes[i], m, val)
            if self.t_id in self.off:
                m = k + self.off[self.t_id] - w
                val = jnp.where(m == 0, t0, jnp.where(m == 1, 1.0, 0.0))
                nodes[self.t_id] = write_row(nodes[self.t_id], m, val)
            for idx_e, e in enumerate(self.live):
                if not any(o in self.series for o in e.outvars):
                    continue
                m = k + self.eqn_off(e) - w
                self._apply(e, idx_e, m, nodes, aux, consts)
        return {"nodes": nodes, "aux": aux}

    def residual(self, state, k):
        """Coefficient ``k + c_i`` of every equation (0 where negative).

        Returns:
            flat array of length n.
        """
        parts = []
        for (first, size), o in zip(self.dae.equation_blocks, self.out_ids):
            ci = jnp.asarray(self.c[first : first + size])
            if o in self.series:
                arr = state["nodes"][o].reshape(self.K, -1)
                m = k + ci
                val = arr[jnp.clip(m, 0, self.K - 1), jnp.arange(size)]
                parts.append(jnp.where(m >= 0, val, 0.0))
            else:
                # A constant equation: only its order-0 coefficient is non-zero.
                parts.append(jnp.zeros(size))
        return jnp.concatenate(parts)

    def constant_residual(self, consts):
        """Order-0 value of constant equations (they are then inconsistent)."""
        parts = []
        for (first, size), o in zip(self.dae.equation_blocks, self.out_ids):
            if o in self.series:
                parts.append(jnp.zeros(size))
            else:
                parts.append(jnp.ravel(jnp.asarray(consts[o], dtype=jnp.float64)))
        return jnp.concatenate(parts)

    # -------------------------------------------------------------- rules
    def _operand(self, a, nodes, consts):
        if isinstance(a, _Lit):
            return _Const(jnp.asarray(a.val))
        if a in self.series:
            return _Series(nodes[a])
        return _Const(consts[a])

    def _aval(self, a):
        return jax.typeof(a.val) if isinstance(a, _Lit) else self.avals[a]

    def _apply(self, e, idx_e, m, nodes, aux, consts):
        name = e.prim.name
        ops = [self._operand(a, nodes, consts) for a in e.invars]
        K = self.K
        mc = jnp.clip(m, 0, K - 1)
        out_id = e.outvars[0]
        if e.prim is ddt_p:
            x = ops[0]
            val = (mc + 1.0) * x.coef(jnp.clip(mc + 1, 0, K - 1)) * (mc + 1 < K)
        elif name in _PIECEWISE:
            args = [op.coef0() for op in ops]
            val0 = e.prim.bind(*args, **e.params)
            cur = nodes[out_id]
            val = jnp.where(mc == 0, val0, jnp.zeros_like(val0))
            if cur.dtype != jnp.float64:
                # Boolean/int results: keep the order-0 value in every slot so
                # that consumers (select_n predicates) read it at any order.
                nodes[out_id] = jnp.where(m == 0, jnp.broadcast_to(val0, cur.shape), cur)
                return
        elif name == "convert_element_type" and not _is_float(self._aval(e.invars[0])):
            val = jnp.where(mc == 0, ops[0].coef0().astype(jnp.float64), 0.0)
        elif name in _LINEAR:
            args = []
            for a, op in zip(e.invars, ops):
                if not _is_float(self._aval(a)):
                    args.append(op.coef0())
                else:
                    args.append(op.coef(mc))
            out = e.prim.bind(*args, **e.params)
            if e.prim.multiple_results:
                for o, v in zip(e.outvars, out):
                    if o in nodes:  # unused outputs (a split's other parts) have no storage
                        nodes[o] = write_row(nodes[o], m, v)
                return
            val = out
        elif name == "mul":
            a, b = ops
            if isinstance(a, _Const) or isinstance(b, _Const):
                val = _mul_const(a, b, mc)
            else:
                val = _conv(a.arr, b.arr, m, 0, 0)
        elif name == "dot_general":
            a, b = ops
            f = lambda x, y: lax.dot_general(x, y, **{k: v for k, v in e.params.items() if k in ("dimension_numbers", "precision")})
            if isinstance(a, _Const):
                val = f(a.value, b.coef(mc))
            elif isinstance(b, _Const):
                val = f(a.coef(mc), b.value)
            else:
                r = jnp.arange(K)
                bg = jnp.take(b.arr, jnp.clip(m - r, 0, K - 1), axis=0)
                prods = jax.vmap(f)(a.arr, bg)
                mask = (r <= m).reshape((K,) + (1,) * (prods.ndim - 1))
                val = order_sum(jnp.where(mask, prods, 0.0))
        else:
            val = _nonlinear(name, e, ops, m, mc, nodes, aux, idx_e, K)
        nodes[out_id] = write_row(nodes[out_id], m, val)


# ----------------------------------------------------------------- operands
class _Const:
    def __init__(self, value):
        self.value = value

    def coef(self, m):
        v = jnp.asarray(self.value)
        return jnp.where(m == 0, v, jnp.zeros_like(v))

    def coef0(self):
        return self.value

    def series(self, K):
        v = jnp.asarray(self.value, dtype=jnp.float64)
        return jnp.zeros((K,) + v.shape).at[0].set(v)


class _Series:
    def __init__(self, arr):
        self.arr = arr

    def coef(self, m):
        return _at(self.arr, m)

    def coef0(self):
        return self.arr[0]

    def series(self, K):
        return self.arr


def _at(arr, i):
    """``arr[i]`` along the order axis for an in-range traced i.

    ``lax.dynamic_index_in_dim`` skips the negative-index wrap-around that
    ``arr[i]`` emits (compare, add, select per access): the interpreted
    program has thousands of these reads, and they dominate compile time.
    """
    return lax.dynamic_index_in_dim(arr, i, 0, keepdims=False)


def order_sum(terms):
    """Σ over the leading (order) axis, as a contraction with ones.

    XLA:CPU lowers a reduce over the leading axis of a (K, n) array to a
    strided loop that falls out of cache for large n (measured: 190–340 ns
    per element at n = 24,300 against 14 ns for the contraction), which made
    a step of a large particle system super-linear in n.
    """
    return jnp.tensordot(jnp.ones(terms.shape[0], terms.dtype), terms, axes=1)


def write_row(arr, m, val):
    """``arr`` with ``arr[clip(m)] = val`` along the order axis.

    For m < 0 this overwrites row 0 with a value computed from inputs that
    are not yet known either.  That is harmless: a node's order m only grows
    from stage to stage, row 0 is computed properly when m reaches 0 (from
    operands that reached it earlier, their offsets being at least the
    node's), and every reader masks rows it has not reached.  Keeping the
    old row instead (a read of ``arr`` before the update) made XLA copy
    every coefficient array on every stage.
    """
    mc = jnp.clip(m, 0, arr.shape[0] - 1)
    val = jnp.broadcast_to(jnp.asarray(val, dtype=arr.dtype), arr.shape[1:])
    return _update_row(arr, val, mc)



def _update_row_plain(arr, val, i):
    return lax.dynamic_update_index_in_dim(arr, val, i, 0)


@jax.custom_batching.custom_vmap
def _update_row_batched(arr, val, i):
    return _update_row_plain(arr, val, i)


@_update_row_batched.def_vmap
def _update_row_rule(axis_size, in_batched, arr, val, i):
    arr_b, val_b, i_b = in_batched
    if i_b:
        # A per-element row (not used by the engine): the general scatter.
        out = jax.vmap(_update_row_plain, in_axes=(0 if arr_b else None, 0 if val_b else None, 0))(arr, val, i)
        return out, True
    if not arr_b:
        arr = jnp.broadcast_to(arr, (axis_size,) + arr.shape)
    if not val_b:
        val = jnp.broadcast_to(val, (axis_size,) + val.shape)
    # The batch axis leads; the row index is shared, so this stays one
    # in-place dynamic_update_slice.
    zero = jnp.zeros((), dtype=jnp.asarray(i).dtype)
    return lax.dynamic_update_slice(arr, val[:, None], (zero, i) + (zero,) * (arr.ndim - 2)), True


@jax.custom_jvp
def _update_row(arr, val, i):
    """``arr[i] = val`` (order axis 0) that stays a dynamic_update_slice under vmap.

    JAX batches ``dynamic_update_slice`` as a scatter, which XLA:CPU emits
    as a loop over the whole array after copying it: for a batch of
    pendulums most of a step went into these copies.  With the row index
    shared by the batch (it is the stage's order) the update is one
    in-place ``dynamic_update_slice`` on the batched array instead.  Under
    differentiation the update is the plain one (primal and tangent), so
    forward and reverse mode work as for ``dynamic_update_index_in_dim``.
    """
    return _update_row_batched(arr, val, i)


@_update_row.defjvp
def _update_row_jvp(primals, tangents):
    arr, val, i = primals
    darr, dval, _ = tangents
    # The plain update for the primal as well: JAX's rule for
    # differentiating a custom_vmap function under vmap (vmap of jvp of
    # grad, as in the Hessians of the initialiser) mis-batches.
    out = _update_row_plain(arr, val, i)
    darr = jnp.zeros_like(arr) if type(darr) is jax.custom_derivatives.SymbolicZero else darr
    return out, _update_row_plain(darr, dval, i)




def _mul_const(a, b, mc):
    if isinstance(a, _Const) and isinstance(b, _Const):
        return jnp.where(mc == 0, a.value * b.value, 0.0 * a.value * b.value)
    if isinstance(a, _Const):
        return a.value * b.coef(mc)
    return a.coef(mc) * b.value


def _align(A, ndim):
    """Insert axes after the order axis so element shapes broadcast like numpy."""
    return A.reshape(A.shape[:1] + (1,) * (ndim - A.ndim) + A.shape[1:]) if A.ndim < ndim else A


def _conv(A, B, m, lo, top, weight_a=None):
    """Σ_{r=lo}^{m-top} wa(r) A[r] B[m-r] over the leading (order) axis."""
    nd = max(A.ndim, B.ndim)
    A, B = _align(A, nd), _align(B, nd)
    K = A.shape[0]
    r = jnp.arange(K)
    Bg = jnp.take(B, jnp.clip(m - r, 0, B.shape[0] - 1), axis=0)
    Aw = A if weight_a is None else A * weight_a(r).reshape((K,) + (1,) * (A.ndim - 1))
    A_, B_ = jnp.broadcast_arrays(Aw, Bg)
    mask = ((r >= lo) & (r <= m - top)).reshape((K,) + (1,) * (A_.ndim - 1))
    return order_sum(jnp.where(mask, A_ * B_, 0.0))


def _aux_tags(e):
    name = e.prim.name
    if name in ("sin", "cos"):
        return ("comp",)
    if name in ("sinh", "cosh", "tan", "tanh", "logistic"):
        return ("comp",)
    if name in ("asin", "acos", "atan", "atan2", "asinh", "acosh", "atanh"):
        return ("q",)
    if name == "integer_pow":
        n = abs(int(e.params["y"]))
        return tuple(f"p{i}" for i in range(2, n + 1))
    if name == "pow":
        return ("log", "prod")
    return ()


def _nonlinear(name, e, ops, m, mc, nodes, aux, idx_e, K):
    """Order-m coefficient of a nonlinear elementwise primitive.

    The recurrences come from the ODE each function satisfies (z' = f'(x) x')
    written for normalised coefficients; auxiliaries hold companion series.
    """
    out = e.outvars[0]
    Z = nodes[out]
    mf = mc.astype(jnp.float64)
    safe_m = jnp.maximum(mf, 1.0)
    wr = lambda r: r.astype(jnp.float64)

    def S(op):
        arr = op.series(K)
        return jnp.broadcast_to(_align(arr, Z.ndim), Z.shape)

    def getaux(tag):
        return aux[(idx_e, tag)]

    def setaux(tag, val):
        aux[(idx_e, tag)] = write_row(aux[(idx_e, tag)], m, val)

    if name == "div":
        a, b = ops
        if isinstance(b, _Const):
            return a.coef(mc) / b.value
        A, B = S(a), S(b)
        return (_at(A, mc) - _conv(B, Z, m, 1, 0)) / B[0]
    if name in ("integer_pow", "square"):
        n = 2 if name == "square" else int(e.params["y"])
        x = ops[0]
        X = S(x)
        if n == 0:
            return jnp.where(mc == 0, 1.0, 0.0) * jnp.ones(Z.shape[1:])
        if n == 1:
            return _at(X, mc)
        if n < 0:
            # z = 1 / x^|n|: powers kept as auxiliaries, then a division.
            P = X
            for i in range(2, -n + 1):
                val = _conv(P, X, m, 0, 0)
                setaux(f"p{i}", val)
                P = getaux(f"p{i}")
            return (jnp.where(mc == 0, 1.0, 0.0) - _conv(P, Z, m, 1, 0)) / P[0]
        if n == 2 and name == "square":
            return _conv(X, X, m, 0, 0)
        P = X
        for i in range(2, n):
            setaux(f"p{i}", _conv(P, X, m, 0, 0))
            P = getaux(f"p{i}")
        return _conv(P, X, m, 0, 0)
    if name in ("sqrt", "rsqrt", "cbrt") or (name == "pow" and isinstance(ops[1], _Const)):
        x = ops[0]
        X = S(x)
        if name == "sqrt":
            z0 = jnp.sqrt(X[0])
            rest = (_at(X, mc) - _conv(Z, Z, m, 1, 1)) / (2.0 * Z[0])
            return jnp.where(mc == 0, z0, rest)
        a = {"rsqrt": -0.5, "cbrt": 1.0 / 3.0}.get(name)
        if a is None:
            a = ops[1].value
        z0 = X[0] ** a if name != "cbrt" else jnp.cbrt(X[0])
        # z_m = 1/(m x0) Σ_{j=0}^{m-1} (a (m-j) - j) x_{m-j} z_j
        r = jnp.arange(K)
        Xg = jnp.take(X, jnp.clip(mc - r, 0, K - 1), axis=0)
        coef = (a * (mf - wr(r)) - wr(r)).reshape((K,) + (1,) * (Z.ndim - 1))
        mask = (r <= mc - 1).reshape((K,) + (1,) * (Z.ndim - 1))
        s = order_sum(jnp.where(mask, coef * Xg * Z, 0.0))
        return jnp.where(mc == 0, z0, s / (safe_m * X[0]))
    if name == "pow":
        # x ** y with both series: exp(y log x) through auxiliaries.
        x, y = ops
        X, Y = S(x), S(y)
        Lg = getaux("log")
        l0 = jnp.log(X[0])
        lm = (_at(X, mc) - _conv(Lg, X, m, 1, 1, weight_a=wr) / safe_m) / X[0]
        setaux("log", jnp.where(mc == 0, l0, lm))
        Lg = getaux("log")
        setaux("prod", _conv(Y, Lg, m, 0, 0))
        W = getaux("prod")
        return jnp.where(mc == 0, jnp.exp(W[0]), _conv(W, Z, m, 1, 0, weight_a=wr) / safe_m)
    if name in ("exp", "exp2", "expm1"):
        X = S(ops[0])
        if name == "exp2":
            X = X * jnp.log(2.0)
        z0 = {"exp": jnp.exp, "exp2": lambda v: jnp.exp(v), "expm1": jnp.expm1}[name](X[0])
        Zp = Z if name != "expm1" else Z.at[0].add(1.0)
        return jnp.where(mc == 0, z0, _conv(X, Zp, m, 1, 0, weight_a=wr) / safe_m)
    if name in ("log", "log1p"):
        X = S(ops[0])
        x0 = X[0] + (1.0 if name == "log1p" else 0.0)
        Xp = X.at[0].set(x0)
        z0 = jnp.log(x0)
        rest = (_at(X, mc) - _conv(Z, Xp, m, 1, 1, weight_a=wr) / safe_m) / x0
        return jnp.where(mc == 0, z0, rest)
    if name in ("sin", "cos", "sinh", "cosh"):
        X = S(ops[0])
        comp = getaux("comp")
        hyper = name in ("sinh", "cosh")
        f0, g0 = {"sin": (jnp.sin, jnp.cos), "cos": (jnp.cos, jnp.sin),
                  "sinh": (jnp.sinh, jnp.cosh), "cosh": (jnp.cosh, jnp.sinh)}[name]
        # d/dt sin = cos x', d/dt cos = -sin x'; hyperbolic: both +.
        sz = 1.0 if (hyper or name == "sin") else -1.0
        sc = 1.0 if (hyper or name == "cos") else -1.0
        zm = jnp.where(mc == 0, f0(X[0]), sz * _conv(X, comp, m, 1, 0, weight_a=wr) / safe_m)
        cm = jnp.where(mc == 0, g0(X[0]), sc * _conv(X, Z, m, 1, 0, weight_a=wr) / safe_m)
        setaux("comp", cm)
        return zm
    if name in ("tan", "tanh", "logistic"):
        X = S(ops[0])
        U = getaux("comp")  # 1 + z^2, 1 - z^2 or z (1 - z)
        z0 = {"tan": jnp.tan, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid}[name](X[0])
        zm = jnp.where(mc == 0, z0, _conv(X, U, m, 1, 0, weight_a=wr) / safe_m)
        Znew = write_row(Z, m, zm)
        zz = _conv(Znew, Znew, m, 0, 0)
        if name == "tan":
            um = jnp.where(mc == 0, 1.0, 0.0) + zz
        elif name == "tanh":
            um = jnp.where(mc == 0, 1.0, 0.0) - zz
        else:
            um = _at(Znew, mc) - zz
        setaux("comp", um)
        return zm
    if name in ("asin", "acos", "atan", "asinh", "acosh", "atanh", "atan2"):
        # Q z' = sign * (numerator)' with Q = sqrt(1 - x^2) (asin/acos),
        # 1 + x^2 (atan), x^2 + y^2 (atan2) ...: z_m from coefficient m-1.
        if name == "atan2":
            Y, X = S(ops[0]), S(ops[1])
            Qn = _conv(X, X, m, 0, 0) + _conv(Y, Y, m, 0, 0)
            setaux("q", Qn)
            Q = getaux("q")
            # (x y' - y x')_{m-1} = Σ_{r=0}^{m-1} (m-r) (x_r y_{m-r} - y_r x_{m-r})
            w = lambda r: (mf - wr(r))
            rhs = _conv(X, Y, m, 0, 1, weight_a=w) - _conv(Y, X, m, 0, 1, weight_a=w)
            z0 = jnp.arctan2(Y[0], X[0])
        else:
            X = S(ops[0])
            xx = _conv(X, X, m, 0, 0)
            one = jnp.where(mc == 0, 1.0, 0.0)
            Qold = getaux("q")
            if name in ("asin", "acos", "asinh", "acosh", "atanh"):
                if name == "atanh":
                    qn = one - xx
                else:
                    sgn = {"asin": -1.0, "acos": -1.0, "asinh": 1.0, "acosh": 1.0}[name]
                    base0 = {"asin": 1.0 - X[0] ** 2, "acos": 1.0 - X[0] ** 2,
                             "asinh": 1.0 + X[0] ** 2, "acosh": X[0] ** 2 - 1.0}[name]
                    # Q^2 = 1 -+ x^2 (or x^2 - 1): Q_m from the square root recurrence.
                    target = sgn * xx if name != "acosh" else xx
                    qn = jnp.where(mc == 0, jnp.sqrt(base0),
                                   (target - _conv(Qold, Qold, m, 1, 1)) / (2.0 * jnp.where(mc == 0, 1.0, Qold[0])))
            else:  # atan
                qn = one + xx
            setaux("q", qn)
            Q = getaux("q")
            sign = -1.0 if name == "acos" else 1.0
            rhs = sign * mf * _at(X, mc)
            z0 = {"asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan, "asinh": jnp.arcsinh,
                  "acosh": jnp.arccosh, "atanh": jnp.arctanh}[name](X[0])
        # Σ_{r=1}^{m-1} Q_r (m - r) z_{m-r}
        corr = _conv(Q, Z, m, 1, 1, weight_a=lambda r: (mf - wr(r)))
        return jnp.where(mc == 0, z0, (rhs - corr) / (safe_m * Q[0]))
    if name == "abs":
        X = S(ops[0])
        return jnp.sign(X[0]) * _at(X, mc)
    if name in ("max", "min"):
        A, B = S(ops[0]), S(ops[1])
        pick_a = (A[0] >= B[0]) if name == "max" else (A[0] <= B[0])
        return jnp.where(pick_a, _at(A, mc), _at(B, mc))
    if name == "clamp":
        lo, X, hi = (S(o) for o in ops)
        inside = (X[0] >= lo[0]) & (X[0] <= hi[0])
        return jnp.where(inside, _at(X, mc), jnp.where(X[0] < lo[0], _at(lo, mc), _at(hi, mc)))
    if name in ("reduce_max", "reduce_min"):
        X = S(ops[0])
        axes = tuple(e.params["axes"])
        arg = (jnp.argmax if name == "reduce_max" else jnp.argmin)
        # The extreme element at order 0 carries the series.
        moved = jnp.moveaxis(X, [a + 1 for a in axes], list(range(X.ndim - len(axes), X.ndim)))
        flat = moved.reshape(moved.shape[: X.ndim - len(axes)] + (-1,))
        i0 = arg(flat[0], axis=-1)
        return jnp.take_along_axis(_at(flat, mc), i0[..., None], axis=-1)[..., 0]
    raise UnsupportedPrimitiveError(f"the Taylor engine has no rule for the operation '{name}' (used at {e.source})")
