"""Cleaning a flattened residual before it becomes a Taylor tape.

Residuals built by AD from a Lagrangian are full of work that does not
change the value: the same product formed in the primal and in the tangent
pass, multiplications by the tangent seed 1, additions of symbolic zeros,
reshapes to the same shape, whole subgraphs of constants.  Every such
operation costs a recurrence per order per stage in the Taylor engines (and
XLA compile time), so :func:`clean` removes it once, on the flat list of
equations, before the program is analysed:

* **constant folding**: an operation whose operands are all literals or
  constants (not parameters, not the unknowns or t) is evaluated now;
* **algebraic identities**: ``x*1``, ``x+0``, ``x-0``, ``0-x → -x``,
  ``--x``, and no-op reshapes, conversions, broadcasts and copies forward
  their operand; a product, dot or linear rearrangement of a known zero is a
  zero constant;
* **common subexpressions**: the same primitive with the same parameters on
  the same operands is computed once;
* **dead code**: operations that no output depends on (often left by the
  rewrites above) are dropped.

The result has the same values at every order: each rewrite is exact in
floating point except the folding, which is the same arithmetic done early.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

import jax

from solver.dae.concrete import evaluate

__all__ = ["CleanStats", "clean"]

# Folding evaluates on the host: above this many elements a constant is left
# to the compiled program rather than copied into it.
FOLD_MAX_ELEMENTS = 65_536

_ADDS = {"add", "add_any"}
# Operations that forward their operand when the output has its operand's
# shape and dtype (a reshape to the same shape, a conversion to the same type).
_SHAPE_NOOPS = {"reshape", "squeeze", "expand_dims", "convert_element_type", "copy",
                "reduce_precision", "broadcast_in_dim", "transpose"}
# Linear in their (single float) operand: a zero in gives a zero out.
_ZERO_PRESERVING = {"neg", "reshape", "squeeze", "expand_dims", "broadcast_in_dim", "transpose",
                    "slice", "reduce_sum", "convert_element_type", "copy", "rev",
                    "cumsum", "reduce_precision", "dynamic_slice", "gather", "tile"}
# Never folded: they mean something other than their value (ddt is the time
# derivative of its operand, which is a series even where the operand is
# constant in this trace), or have effects.
_NO_FOLD = {"ddt", "random_bits", "random_seed", "random_wrap", "random_unwrap", "iota_2x32_shape"}


@dataclasses.dataclass
class CleanStats:
    """What :func:`clean` removed.

    Attributes:
        before: equations in.
        after: equations out.
        folded: operations evaluated as constants.
        forwarded: operations replaced by one of their operands (identities).
        zeroed: operations replaced by a zero constant.
        shared: operations found identical to an earlier one.
        dead: operations no output depends on.
    """

    before: int = 0
    after: int = 0
    folded: int = 0
    forwarded: int = 0
    zeroed: int = 0
    shared: int = 0
    dead: int = 0


def _lit_key(val) -> tuple:
    a = np.asarray(val)
    return ("lit", a.dtype.str, a.shape, a.tobytes())


def _params_key(params: dict):
    try:
        key = tuple(sorted((k, v) for k, v in params.items()))
        hash(key)
        return key
    except TypeError:  # an unhashable parameter: not shared (rare; always correct)
        return None


def clean(eqns: list, out_ids: list, const_values: dict, avals: dict, protected: set,
          new_node: Callable[[Any], int], lit_type) -> tuple[list, list, CleanStats]:
    """Fold, simplify and share a flat equation list.

    Args:
        eqns: equations in topological order (``invars``: node ids or
            literals of type ``lit_type``; ``outvars``: node ids).
        out_ids: the residual's output nodes.
        const_values: node id → concrete value of the constants; folded
            constants are added to it.
        avals: node id → abstract value (shape, dtype).
        protected: node ids that are not constants even if they have no
            producing equation (t, the unknowns, the parameters).
        new_node: allocates a node id for an abstract value.
        lit_type: the literal class of the equation list.

    Returns:
        ``(eqns, out_ids, stats)``: the cleaned equations (a new list), the
        outputs renamed through the rewrites, and what was removed.
    """
    stats = CleanStats(before=len(eqns))
    alias: dict[int, int] = {}
    zeros: set[int] = {i for i, v in const_values.items()
                       if i not in protected and _is_concrete_zero(v)}
    seen: dict[tuple, list] = {}
    out: list = []

    def read(a):
        if isinstance(a, lit_type):
            return a
        return alias.get(a, a)

    def is_const(a) -> bool:
        return isinstance(a, lit_type) or (a in const_values and a not in protected)

    def value(a):
        return a.val if isinstance(a, lit_type) else const_values[a]

    def is_zero(a) -> bool:
        if isinstance(a, lit_type):
            return _is_concrete_zero(a.val)
        return a in zeros

    def is_one(a) -> bool:
        if isinstance(a, lit_type):
            v = np.asarray(a.val)
        elif a in const_values and a not in protected:
            v = const_values[a]
            if not isinstance(v, (np.ndarray, np.generic, int, float)):
                return False
            v = np.asarray(v)
        else:
            return False
        return v.size <= FOLD_MAX_ELEMENTS and bool(np.all(v == 1))

    def aval_of(a):
        return jax.typeof(a.val) if isinstance(a, lit_type) else avals[a]

    def same_type(a, o) -> bool:
        x, y = aval_of(a), avals[o]
        return tuple(x.shape) == tuple(y.shape) and x.dtype == y.dtype

    def forward(o, a):
        stats.forwarded += 1
        if isinstance(a, lit_type):  # a literal result becomes a constant node
            const_values[o] = np.asarray(a.val, dtype=avals[o].dtype)
            if _is_concrete_zero(a.val):
                zeros.add(o)
        else:
            alias[o] = a

    def zero(o):
        stats.zeroed += 1
        const_values[o] = np.zeros(avals[o].shape, avals[o].dtype)
        zeros.add(o)

    for e in eqns:
        ins = [read(a) for a in e.invars]
        name = e.prim.name
        single = not e.prim.multiple_results
        o = e.outvars[0]
        float_out = single and np.issubdtype(avals[o].dtype, np.floating)

        # ---- constant folding
        if (name not in _NO_FOLD and all(is_const(a) for a in ins)
                and all(int(np.prod(avals[v].shape)) <= FOLD_MAX_ELEMENTS for v in e.outvars)):
            with jax.ensure_compile_time_eval():
                res = evaluate(e.prim, [value(a) for a in ins], e.params)
            for v, r in zip(e.outvars, res if e.prim.multiple_results else [res]):
                const_values[v] = np.asarray(r)
                if _is_concrete_zero(const_values[v]):
                    zeros.add(v)
            stats.folded += 1
            continue

        # ---- identities
        if single and float_out:
            if name == "mul" and len(ins) == 2:
                a, b = ins
                if is_zero(a) or is_zero(b):
                    zero(o)
                    continue
                if is_one(b) and same_type(a, o):
                    forward(o, a)
                    continue
                if is_one(a) and same_type(b, o):
                    forward(o, b)
                    continue
            if name == "dot_general" and any(is_zero(a) for a in ins):
                zero(o)
                continue
            if name in _ADDS | {"sub"} and len(ins) == 2:
                a, b = ins
                if is_zero(b) and same_type(a, o):
                    forward(o, a)
                    continue
                if name in _ADDS and is_zero(a) and same_type(b, o):
                    forward(o, b)
                    continue
            if name == "div" and is_zero(ins[0]):
                zero(o)
                continue
            if name in _ZERO_PRESERVING and ins and is_zero(ins[0]):
                zero(o)
                continue
            if name in _SHAPE_NOOPS and len(ins) == 1 and same_type(ins[0], o) and _is_identity_params(name, e.params):
                forward(o, ins[0])
                continue

        # ---- common subexpressions
        pkey = _params_key(e.params)
        if pkey is not None:
            key = (e.prim, tuple(_lit_key(a.val) if isinstance(a, lit_type) else a for a in ins), pkey)
            prev = seen.get(key)
            if prev is not None:
                for v, p in zip(e.outvars, prev):
                    alias[v] = p
                stats.shared += 1
                continue
            seen[key] = list(e.outvars)
        out.append(dataclasses.replace(e, invars=ins))

    new_outs = [read(o) for o in out_ids]
    kept = _live(out, new_outs)
    stats.dead, out = len(out) - len(kept), kept
    stats.after = len(out)
    return out, new_outs, stats


def _live(eqns: list, out_ids: list) -> list:
    """The equations that some output depends on, in their order."""
    needed = {o for o in out_ids if isinstance(o, int)}
    keep = []
    for e in reversed(eqns):
        if any(o in needed for o in e.outvars):
            keep.append(e)
            needed.update(a for a in e.invars if isinstance(a, int))
    return keep[::-1]


def _is_concrete_zero(v) -> bool:
    if not isinstance(v, (np.ndarray, np.generic, int, float, bool)):
        try:
            v = np.asarray(v)
        except Exception:  # a tracer: not known
            return False
    a = np.asarray(v)
    return a.size <= FOLD_MAX_ELEMENTS and np.issubdtype(a.dtype, np.number) and bool(np.all(a == 0))


def _is_identity_params(name: str, params: dict) -> bool:
    """Whether a same-shape, same-type operation leaves its operand unchanged."""
    if name == "transpose":
        perm = tuple(params.get("permutation", ()))
        return perm == tuple(range(len(perm)))
    if name == "broadcast_in_dim":
        dims = tuple(params.get("broadcast_dimensions", ()))
        return dims == tuple(range(len(dims)))
    if name == "reduce_precision":
        return False
    return True
