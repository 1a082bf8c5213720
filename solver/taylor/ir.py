"""The engines' shared intermediate representation: flattened equations, primitive classes, coefficient arithmetic.

The residual's jaxpr is flattened (:class:`Flattener`) into one list of
:class:`Eqn` over integer node ids, literals kept as :class:`Lit`; every
Taylor engine (:mod:`solver.taylor.program`, :mod:`solver.taylor.tape`,
:mod:`solver.taylor.compact`) and the analyses on the program
(:mod:`solver.taylor.degree`, :mod:`solver.taylor.pointwise`) read that list.
The primitive classes (:data:`LINEAR`, :data:`BILINEAR`, :data:`PIECEWISE`,
:data:`NONLINEAR`) say which coefficient rule an operation takes, and
:func:`aux_tags` which companion series its recurrence carries.  The
coefficient arithmetic (:func:`times`, :func:`plus`, :func:`add_coefs`,
:func:`mul_coefs`) is that of the unrolled engine, where ``None`` stands for a
coefficient known to be zero.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.dae import jaxpr_core
from solver.dae.primitives import CALL_JAXPR_PARAM, call_body

__all__ = ["BILINEAR", "LINEAR", "NONLINEAR", "PIECEWISE", "Eqn", "Flattener", "Lit", "add_coefs", "aux_tags",
           "equation_source", "is_float", "mul_coefs", "plus", "times"]


# ---------------------------------------------------------------- jaxpr flattening
@dataclasses.dataclass
class Eqn:
    """One equation of the flattened residual.

    Attributes:
        prim: the JAX primitive.
        invars: its operands: node ids (int) or :class:`Lit`.
        outvars: the node ids of its results.
        params: the primitive's parameters.
        source: where the operation came from in the user's code (for messages).
    """

    prim: Any
    invars: list  # int ids or Lit
    outvars: list  # int ids
    params: dict
    source: str


@dataclasses.dataclass
class Lit:
    """A literal operand of an :class:`Eqn` (``val``: its value)."""

    val: Any


def equation_source(eqn) -> str:
    """Where a jaxpr equation came from, as JAX summarises it ("?" when unknown)."""
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(eqn.source_info)
    except Exception:  # pragma: no cover - best effort only
        return "?"


class Flattener:
    """Inline nested calls into one flat list of equations with integer ids.

    Attributes:
        eqns: the :class:`Eqn` list, in evaluation order.
        n: the number of node ids given out.
        const_values: node id -> value of the jaxpr's constants (and of
            literals that became nodes).
        avals: node id -> abstract value.
    """

    def __init__(self):
        self.eqns: list[Eqn] = []
        self.n = 0
        self.const_values: dict[int, Any] = {}
        self.avals: dict[int, Any] = {}

    def new(self, aval=None):
        """A new node id, with its abstract value ``aval`` when given."""
        self.n += 1
        if aval is not None:
            self.avals[self.n - 1] = aval
        return self.n - 1

    def run_closed(self, closed) -> tuple[list, list]:
        """Flatten a whole ``ClosedJaxpr``: a node for each input, and every output a node.

        A literal output (a constant equation) becomes a constant node.

        Returns:
            ``(in_ids, out_ids)``: the node ids of its inputs and of its outputs.
        """
        in_ids = [self.new(v.aval) for v in closed.jaxpr.invars]
        out_ids = []
        for o in self.run(closed.jaxpr, list(closed.consts), in_ids):
            if isinstance(o, Lit):
                i = self.new(jax.typeof(o.val))
                self.const_values[i] = o.val
                o = i
            out_ids.append(o)
        return in_ids, out_ids

    def run(self, jaxpr, consts, invar_ids):
        """Append ``jaxpr``'s equations, its inputs bound to the node ids ``invar_ids``.

        Args:
            jaxpr: a (open) jaxpr.
            consts: the values of its constvars.
            invar_ids: node ids of its inputs.

        Returns:
            Its outputs: node ids, or :class:`Lit` for literal outputs.
        """
        env = {}
        for v, c in zip(jaxpr.constvars, consts):
            i = self.new(v.aval)
            self.const_values[i] = c
            env[v] = i
        for v, i in zip(jaxpr.invars, invar_ids):
            env[v] = i

        def read(a):
            if isinstance(a, jaxpr_core.Literal):
                return Lit(a.val)
            return env[a]

        for eqn in jaxpr.eqns:
            ins = [read(a) for a in eqn.invars]
            if eqn.primitive.name in CALL_JAXPR_PARAM:
                sub, subconsts = call_body(eqn)
                # custom_vjp_call carries extra (fwd/bwd) params only; its
                # first len(sub.invars) inputs are the primal inputs.
                ins_ids = []
                for a in ins[: len(sub.invars)]:
                    if isinstance(a, Lit):
                        i = self.new(jax.typeof(a.val))
                        self.const_values[i] = a.val
                        ins_ids.append(i)
                    else:
                        ins_ids.append(a)
                outs = self.run(sub, subconsts, ins_ids)
                for v, o in zip(eqn.outvars, outs):
                    if isinstance(o, Lit):
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
            self.eqns.append(Eqn(eqn.primitive, ins, outs, dict(eqn.params), equation_source(eqn)))
        return [read(a) for a in jaxpr.outvars]

# ------------------------------------------------------------- primitive classes
# Linear in their float operands jointly: coefficient m of the output is the
# primitive applied to coefficient m of each operand (integer operands such as
# indices are passed unchanged).
LINEAR = {
    "add", "sub", "neg", "add_any", "concatenate", "pad", "reduce_sum", "broadcast_in_dim",
    "reshape", "squeeze", "expand_dims", "transpose", "slice", "dynamic_slice", "gather",
    "rev", "convert_element_type", "copy", "reduce_precision", "cumsum",
    "dynamic_update_slice", "scatter-add", "scatter_add", "select_n", "real", "split",
    "stack", "unstack", "tile",
}
BILINEAR = {"mul", "dot_general"}
# Piecewise constant: only the order-0 coefficient is non-zero.
PIECEWISE = {"sign", "floor", "ceil", "round", "lt", "le", "gt", "ge", "eq", "ne",
              "is_finite", "and", "or", "not", "stop_gradient", "argmax", "argmin"}
NONLINEAR = {"div", "integer_pow", "square", "pow", "sqrt", "rsqrt", "cbrt", "exp", "exp2",
              "log", "log1p", "expm1", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin",
              "acos", "atan", "atan2", "abs", "max", "min", "logistic", "ddt", "clamp",
              "reduce_max", "reduce_min", "asinh", "acosh", "atanh"}


def is_float(aval) -> bool:
    """Whether an abstract value (``aval``) has a floating dtype: only those carry Taylor coefficients."""
    return jnp.issubdtype(aval.dtype, jnp.floating)


def aux_tags(e) -> tuple:
    """The auxiliary (companion) series an equation's nonlinear recurrence carries, by tag.

    A sine or cosine carries its companion (``"comp"``), as do the hyperbolic
    functions, the tangents and the logistic; the inverse trigonometric
    functions their ``"q"`` series; an integer power ``x**n`` its powers
    ``"p2"`` … ``"pn"``; a power of two series its logarithm and the
    product (``"log"``, ``"prod"``).

    Args:
        e: an :class:`Eqn`.

    Returns:
        The tags (empty for a rule without auxiliaries).
    """
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

# ------------------------------------------------------------- coefficient arithmetic
def _exact_f64(x) -> bool:
    return isinstance(x, float) or getattr(x, "dtype", None) == np.float64


# The unrolled program is thousands of additions and multiplications of
# float64 coefficients; lax's primitives trace several times faster than the
# operators, which go through jnp's type promotion (same program: the
# operators bind the same primitives).  Other operands keep the operators.
def times(a, b):
    """``a * b``, by ``lax.mul`` when both are float64 (faster to trace; the same primitive)."""
    return lax.mul(a, b) if _exact_f64(a) and _exact_f64(b) else a * b


def plus(a, b):
    """``a + b``, by ``lax.add`` when both are float64 (faster to trace; the same primitive)."""
    return lax.add(a, b) if _exact_f64(a) and _exact_f64(b) else a + b


def add_coefs(*xs):
    """The sum of the coefficients given, ``None`` (known zero) terms skipped; ``None`` when all are."""
    out = None
    for x in xs:
        if x is not None:
            out = x if out is None else plus(out, x)
    return out


def mul_coefs(a, b):
    """``a * b`` of two coefficients; ``None`` (known zero) when either is."""
    return None if a is None or b is None else times(a, b)
