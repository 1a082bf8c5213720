"""Build-time evaluation of one jaxpr equation on concrete values, in numpy where that is exact.

Cleaning a residual (constant folding, :mod:`solver.taylor.clean`), the structural
analysis (:mod:`solver.dae.sparsity`) and the compact decomposition
(:mod:`solver.taylor.compact`) apply primitives to concrete arrays: constants, and
element ids whose movement tells where each output element comes from.
Bound eagerly, every primitive with new shapes or parameters is a small XLA
program of its own, traced, lowered and compiled once per process: about
10-20 ms each, dozens per model, and about 3,000 programs (roughly a tenth
of its compile time) in the test suite.  Data movement and IEEE-exact
arithmetic give the same numbers in numpy, bit for bit, so they are done
there; every other primitive (transcendental functions, integer division,
gathers) is bound as before.
"""

from __future__ import annotations

import numpy as np

__all__ = ["evaluate", "NUMPY_RULES"]


def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
    expanded = [1] * len(shape)
    for axis, dim in enumerate(broadcast_dimensions):
        expanded[dim] = x.shape[axis]
    return np.broadcast_to(x.reshape(expanded), tuple(shape)).copy()


def _reshape(x, *, new_sizes, dimensions=None, **_):
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return x.reshape(tuple(new_sizes))


def _slice(x, *, start_indices, limit_indices, strides=None, **_):
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))]


def _pad(x, value, *, padding_config, **_):
    out = x
    for axis, (lo, hi, interior) in enumerate(padding_config):
        n = out.shape[axis]
        if interior and n > 1:
            size = n + (n - 1) * interior
            spread = np.full(out.shape[:axis] + (size,) + out.shape[axis + 1:], value, out.dtype)
            idx = [slice(None)] * out.ndim
            idx[axis] = slice(0, size, interior + 1)
            spread[tuple(idx)] = out
            out = spread
        # Negative padding trims.
        if lo < 0 or hi < 0:
            idx = [slice(None)] * out.ndim
            idx[axis] = slice(max(-lo, 0), out.shape[axis] - max(-hi, 0))
            out = out[tuple(idx)]
        width = [(0, 0)] * out.ndim
        width[axis] = (max(lo, 0), max(hi, 0))
        out = np.pad(out, width, constant_values=value)
    return out


def _clamped_starts(shape, starts, sizes):
    return tuple(int(min(max(int(s), 0), n - k)) for s, n, k in zip(starts, shape, sizes))


def _dynamic_slice(x, *starts, slice_sizes, **_):
    first = _clamped_starts(x.shape, starts, slice_sizes)
    return x[tuple(slice(a, a + k) for a, k in zip(first, slice_sizes))]


def _dynamic_update_slice(x, update, *starts, **_):
    first = _clamped_starts(x.shape, starts, update.shape)
    out = np.array(x, copy=True)
    out[tuple(slice(a, a + k) for a, k in zip(first, update.shape))] = update
    return out


def _select_n(which, *cases):
    which = np.asarray(which)
    return np.choose(which.astype(np.int64), cases) if which.ndim else cases[int(which)]


def _split(x, *, sizes, axis, **_):
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _flush(x):
    """Subnormal floats to zero of the same sign: XLA:CPU computes with them flushed."""
    if not np.issubdtype(x.dtype, np.floating):
        return x
    return np.where(np.abs(x) < np.finfo(x.dtype).tiny, np.copysign(np.zeros((), x.dtype), x), x)


def _convert(x, *, new_dtype, **_):
    new_dtype = np.dtype(new_dtype)
    # Float to integer conversions saturate and treat NaN in XLA's own way: bound instead.
    if np.issubdtype(x.dtype, np.floating) and not np.issubdtype(new_dtype, np.floating):
        raise _NotHere
    return _flush(_flush(x).astype(new_dtype))


def _same_float_or_int(f):
    def rule(*xs, **_):
        # Equal shapes, or a scalar against an array (a jaxpr's rank-0 operand broadcasts).
        if len({x.dtype for x in xs}) != 1 or len({x.shape for x in xs if x.shape != ()}) > 1:
            raise _NotHere
        return _flush(np.asarray(f(*[_flush(x) for x in xs])))
    return rule


def _float_only(f):
    def rule(*xs, **_):
        if not all(np.issubdtype(x.dtype, np.floating) for x in xs):
            raise _NotHere
        return _same_float_or_int(f)(*xs)
    return rule


def _compare(f):
    def rule(x, y, **_):
        if x.dtype != y.dtype or x.shape != y.shape:
            raise _NotHere
        return f(_flush(x), _flush(y))
    return rule


def _iota(*, dtype, shape, dimension, **_):
    line = np.arange(shape[dimension], dtype=dtype).reshape(
        [n if k == dimension else 1 for k, n in enumerate(shape)])
    return np.broadcast_to(line, shape).copy()


class _NotHere(Exception):
    """A case numpy's rule does not cover exactly: the primitive is bound."""


# Each rule takes the operands as numpy arrays and the equation's parameters.
NUMPY_RULES = {
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": lambda x, *, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)),
    "transpose": lambda x, *, permutation, **_: np.transpose(x, permutation),
    "slice": _slice,
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
    "pad": _pad,
    "rev": lambda x, *, dimensions, **_: np.flip(x, axis=tuple(dimensions)),
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "select_n": _select_n,
    "split": _split,
    "copy": lambda x, **_: np.array(x, copy=True),
    "convert_element_type": _convert,
    "add": _same_float_or_int(np.add),
    "sub": _same_float_or_int(np.subtract),
    "mul": _same_float_or_int(np.multiply),
    "neg": lambda x, **_: np.negative(x),  # a sign flip: XLA keeps subnormal numbers here
    "div": _float_only(np.divide),
    "eq": _compare(np.equal), "ne": _compare(np.not_equal), "lt": _compare(np.less),
    "le": _compare(np.less_equal), "gt": _compare(np.greater), "ge": _compare(np.greater_equal),
    "iota": _iota,
    "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis),
    "unstack": lambda x, *, axis, **_: [np.take(x, i, axis=axis) for i in range(x.shape[axis])],
}


def evaluate(prim, args, params: dict):
    """``prim.bind(*args, **params)`` on concrete values, in numpy where that is exact.

    Args:
        prim: a JAX primitive.
        args: its operands (numpy or JAX arrays, Python numbers).
        params: the equation's parameters.

    Returns:
        The result as ``prim.bind`` returns it (a list for a primitive with
        several results), numpy arrays where numpy computed it.

    Raises:
        Whatever ``prim.bind`` raises, for a primitive numpy does not do.
    """
    rule = NUMPY_RULES.get(prim.name)
    if rule is not None:
        try:
            with np.errstate(all="ignore"):  # IEEE results, as XLA gives them
                out = rule(*[np.asarray(a) for a in args], **params)
        except _NotHere:
            pass
        else:
            if prim.multiple_results:
                return [np.asarray(o) for o in out]
            return np.asarray(out)
    return prim.bind(*args, **params)
