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

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.taylor.clean import clean
from solver.taylor.ir import BILINEAR, LINEAR, NONLINEAR, PIECEWISE, Flattener, Lit, aux_tags, is_float
from solver.taylor.recurrences import (ConstOperand, SeriesOperand, coef_at, conv, mul_const, nonlinear_coef,
                                       order_sum, write_row)
from solver.dae.problem import DAE
from solver.dae.derivative import ddt_p
from solver.dae.primitives import UnsupportedPrimitiveError

# order_sum and write_row are imported from here too.
__all__ = ["TaylorProgram", "UnsupportedPrimitiveError", "order_sum", "write_row"]



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
        flat = Flattener()
        in_ids, self.out_ids = flat.run_closed(dae.jaxpr)
        self.eqns = flat.eqns
        self.const_values = flat.const_values
        self.in_ids = in_ids
        self.avals = flat.avals
        self.clean_stats = None
        if clean_tape:
            self.eqns, self.out_ids, self.clean_stats = clean(
                self.eqns, self.out_ids, self.const_values, self.avals, set(in_ids), flat.new, Lit)
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
            if any((not isinstance(a, Lit)) and a in series for a in e.invars):
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
                if not isinstance(a, Lit) and a in self.series:
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
            if e.prim is ddt_p or name in LINEAR or name in BILINEAR or name in PIECEWISE or name in NONLINEAR:
                continue
            raise UnsupportedPrimitiveError(
                f"the Taylor engine has no rule for the operation '{name}' "
                f"(used at {e.source}); supported: + - * / ** sqrt exp log sin cos tan asin acos "
                f"atan atan2 sinh cosh tanh abs, dot products, sums, indexing and concatenation"
            )

    def is_series(self, a) -> bool:
        """Whether an operand (node id or literal) is a series (depends on t or the unknowns)."""
        return (not isinstance(a, Lit)) and a in self.series

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
                coeffs[v] = jnp.zeros((self.K,) + tuple(a.shape), dtype=a.dtype if not is_float(a) else jnp.float64)
        aux = {}
        for idx, e in enumerate(self.live):
            if not any(o in self.series for o in e.outvars):
                continue
            shape = tuple(self.avals[e.outvars[0]].shape)
            for tag in aux_tags(e):
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
        for e in self.eqns:  # in order: a constant's operands come before it
            if any(o in self.series for o in e.outvars):
                continue
            if all(o in env for o in e.outvars):
                continue
            ins = [a.val if isinstance(a, Lit) else env[a] for a in e.invars]
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
                val = ff * coef_at(X[name], idx) * (mc + l < self.KX)
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
        if isinstance(a, Lit):
            return ConstOperand(jnp.asarray(a.val))
        if a in self.series:
            return SeriesOperand(nodes[a])
        return ConstOperand(consts[a])

    def _aval(self, a):
        return jax.typeof(a.val) if isinstance(a, Lit) else self.avals[a]

    def _apply(self, e, idx_e, m, nodes, aux, consts):
        name = e.prim.name
        ops = [self._operand(a, nodes, consts) for a in e.invars]
        K = self.K
        mc = jnp.clip(m, 0, K - 1)
        out_id = e.outvars[0]
        if e.prim is ddt_p:
            x = ops[0]
            val = (mc + 1.0) * x.coef(jnp.clip(mc + 1, 0, K - 1)) * (mc + 1 < K)
        elif name in PIECEWISE:
            args = [op.coef0() for op in ops]
            val0 = e.prim.bind(*args, **e.params)
            cur = nodes[out_id]
            val = jnp.where(mc == 0, val0, jnp.zeros_like(val0))
            if cur.dtype != jnp.float64:
                # Boolean/int results: keep the order-0 value in every slot so
                # that consumers (select_n predicates) read it at any order.
                nodes[out_id] = jnp.where(m == 0, jnp.broadcast_to(val0, cur.shape), cur)
                return
        elif name == "convert_element_type" and not is_float(self._aval(e.invars[0])):
            val = jnp.where(mc == 0, ops[0].coef0().astype(jnp.float64), 0.0)
        elif name in LINEAR:
            args = []
            for a, op in zip(e.invars, ops):
                if not is_float(self._aval(a)):
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
            if isinstance(a, ConstOperand) or isinstance(b, ConstOperand):
                val = mul_const(a, b, mc)
            else:
                val = conv(a.arr, b.arr, m, 0, 0)
        elif name == "dot_general":
            a, b = ops
            f = lambda x, y: lax.dot_general(x, y, **{k: v for k, v in e.params.items() if k in ("dimension_numbers", "precision")})
            if isinstance(a, ConstOperand):
                val = f(a.value, b.coef(mc))
            elif isinstance(b, ConstOperand):
                val = f(a.coef(mc), b.value)
            else:
                r = jnp.arange(K)
                bg = jnp.take(b.arr, jnp.clip(m - r, 0, K - 1), axis=0)
                prods = jax.vmap(f)(a.arr, bg)
                mask = (r <= m).reshape((K,) + (1,) * (prods.ndim - 1))
                val = order_sum(jnp.where(mask, prods, 0.0))
        else:
            val = nonlinear_coef(name, e, ops, m, mc, nodes, aux, idx_e, K)
        nodes[out_id] = write_row(nodes[out_id], m, val)
