"""Taylor coefficients of a function of known series, every order at once.

The step's Taylor polynomial of the solution is known to order P once the
step's series is built; a function of it, ``g(t + s, x(t + s), p)`` (an
event's or a switch's), then has Taylor coefficients that need no unknown
solved order by order.  :class:`FunctionSeries` computes them over the
function's flattened jaxpr (:mod:`solver.taylor.ir`, cleaned as a residual
is), an operation at a time, each node holding its coefficients as one
array whose leading axis is the order:

* an operation linear in its floating operands (sums, slices, stacks,
  broadcasts...) is the operation itself, batched over the order axis: one
  operation for every order;
* a product or dot product of two series is their Cauchy product: every
  order's sum of products at once, a few batched operations;
* a product with a constant, the operation batched with the constant held;
* a piecewise-constant operation (a comparison, ``sign``) keeps its value at
  order 0;
* a nonlinear function (``sin``, ``exp``, ``sqrt``, ``div``...) takes the
  looped engine's recurrences (:func:`solver.taylor.recurrences.nonlinear_coef`),
  one order after the other.

The numbers are those of Taylor-mode automatic differentiation
(``jax.experimental.jet``) to rounding, in far fewer operations: ``jet``
writes each order of each operation, and each product's every term, as an
operation of its own (a car's six tyre and body events at order 13: about
15,000 operations of its compiled step against about 600).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from solver.taylor.clean import clean
from solver.taylor.ir import BILINEAR, LINEAR, NONLINEAR, PIECEWISE, Flattener, Lit, aux_tags, is_float
from solver.taylor.recurrences import (ConstOperand, SeriesOperand, nonlinear_coef, order_sum,
                                       write_row)

__all__ = ["FunctionSeries", "unsupported_operations"]


def unsupported_operations(closed) -> set[str]:
    """The operations of a jaxpr that no Taylor rule covers (empty when all are covered).

    Args:
        closed: a ``ClosedJaxpr``; calls (``jit``, custom derivatives) are
            looked through.

    Returns:
        The names of the operations without a rule.
    """
    flat = Flattener()
    flat.run_closed(closed)
    return {e.prim.name for e in flat.eqns if _rule(e.prim.name) is None}


def _rule(name: str) -> str | None:
    for kind, names in (("linear", LINEAR), ("bilinear", BILINEAR), ("piecewise", PIECEWISE),
                        ("nonlinear", NONLINEAR)):
        if name in names:
            return kind
    return None


class FunctionSeries:
    """A function's Taylor coefficients from its inputs' (see the module docstring).

    Args:
        closed: the function's ``ClosedJaxpr``.
        series: for each input of the jaxpr, whether it is a series (t, the
            unknowns) or a constant (a parameter).
        order: the Taylor order P: coefficients 0..P.

    Raises:
        ValueError: the function uses an operation without a Taylor rule
            (check with :func:`unsupported_operations` first for a message
            of your own).
    """

    def __init__(self, closed, series: Sequence[bool], order: int):
        self.K = int(order) + 1
        flat = Flattener()
        in_ids, out_ids = flat.run_closed(closed)
        self.const_values = flat.const_values
        self.avals = flat.avals
        self.eqns, self.out_ids, _ = clean(flat.eqns, out_ids, self.const_values, self.avals, set(in_ids),
                                           flat.new, Lit)
        self.in_ids = in_ids
        self.series = {i for i, s in zip(in_ids, series) if s}
        for e in self.eqns:
            if any(not isinstance(a, Lit) and a in self.series for a in e.invars):
                self.series.update(e.outvars)
        missing = sorted({e.prim.name for e in self.eqns
                          if any(o in self.series for o in e.outvars) and _rule(e.prim.name) is None})
        if missing:
            raise ValueError(f"no Taylor rule for {', '.join(missing)}")

    def __call__(self, inputs: Sequence) -> list:
        """The outputs' coefficients.

        Args:
            inputs: one per input of the jaxpr: a series as its (P + 1, *shape)
                normalised coefficients (order axis first), a constant as its
                value.

        Returns:
            One (P + 1, *shape) array of normalised coefficients per output.
        """
        env = dict(self.const_values)
        env.update(zip(self.in_ids, inputs))
        for idx, e in enumerate(self.eqns):
            if any(o in self.series for o in e.outvars):
                self._apply(idx, e, env)
            else:
                out = e.prim.bind(*(a.val if isinstance(a, Lit) else env[a] for a in e.invars), **e.params)
                env.update(zip(e.outvars, out if e.prim.multiple_results else [out]))
        return [self._as_series(o, env) for o in self.out_ids]

    # ------------------------------------------------------------------ rules
    def _holds_series(self, a) -> bool:
        # Non-float series nodes (a comparison's result) hold their order-0 value only.
        return not isinstance(a, Lit) and a in self.series and is_float(self.avals[a])

    def _operand(self, a, env):
        if isinstance(a, Lit):
            return ConstOperand(jnp.asarray(a.val))
        return SeriesOperand(env[a]) if self._holds_series(a) else ConstOperand(env[a])

    def _as_series(self, o, env):
        if self._holds_series(o):
            return env[o]
        return ConstOperand(env[o]).series(self.K)

    def _apply(self, idx, e, env):
        name, K = e.prim.name, self.K
        ops = [self._operand(a, env) for a in e.invars]
        out = e.outvars[0]
        kind = _rule(name)
        if kind == "piecewise" or (name == "convert_element_type" and not is_float(self._aval(e.invars[0]))):
            value = e.prim.bind(*(op.coef0() for op in ops), **e.params)
            env[out] = ConstOperand(value).series(K) if is_float(self.avals[out]) else value
            return
        if kind == "linear" or (kind == "bilinear" and any(isinstance(op, ConstOperand) for op in ops)):
            results = self._batched(e, ops)
            env.update(zip(e.outvars, results if e.prim.multiple_results else [results]))
            return
        if kind == "bilinear":
            env[out] = self._cauchy(e, *ops)
            return
        Z = jnp.zeros((K,) + tuple(self.avals[out].shape))
        aux = {(idx, tag): jnp.zeros_like(Z) for tag in aux_tags(e)}

        def order(m, carry):
            Z, aux = carry
            aux = dict(aux)
            value = nonlinear_coef(name, e, ops, m, m, {out: Z}, aux, idx, K)
            return write_row(Z, m, value), aux

        env[out], _ = lax.fori_loop(0, K, order, (Z, aux))

    def _aval(self, a):
        return jax.typeof(a.val) if isinstance(a, Lit) else self.avals[a]

    def _batched(self, e, ops):
        """The operation on every order at once: series batched, integer operands and bilinear constants held."""
        args, axes = [], []
        held = e.prim.name in BILINEAR
        for a, op in zip(e.invars, ops):
            if not is_float(self._aval(a)) or (held and isinstance(op, ConstOperand)):
                args.append(op.coef0())
                axes.append(None)
            else:
                args.append(op.series(self.K))
                axes.append(0)
        return jax.vmap(lambda *xs: e.prim.bind(*xs, **e.params), in_axes=tuple(axes))(*args)

    def _cauchy(self, e, a, b):
        """Coefficient m of a product of two series: Σ_{r<=m} f(a_r, b_{m-r}), every m at once."""
        K = self.K
        r = jnp.arange(K)
        back = jnp.clip(r[:, None] - r[None, :], 0, K - 1)           # (m, r) -> m - r
        A, B = a.arr, b.arr
        Bg = jnp.take(B, back, axis=0)                                  # (K, K, ...)
        f = lambda x, y: e.prim.bind(x, y, **e.params)
        prods = jax.vmap(jax.vmap(f, in_axes=(0, 0)), in_axes=(None, 0))(A, Bg)   # (m, r, ...)
        mask = (r[None, :] <= r[:, None]).reshape((K, K) + (1,) * (prods.ndim - 2))
        return jax.vmap(order_sum)(jnp.where(mask, prods, 0.0))
