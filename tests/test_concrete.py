"""solver.concrete: build-time evaluation in numpy gives what JAX's own primitives give, bit for bit.

Each case is a small ``lax`` function; every equation of its jaxpr is
evaluated by :func:`solver.dae.concrete.evaluate` and by binding the primitive
(XLA), on values drawn by hypothesis (NaN, infinities, signed zeros and
subnormal numbers, which XLA:CPU flushes to zero in arithmetic, included),
and the two must be equal in value, sign and dtype.  The shapes and
parameters of a case are fixed, so XLA compiles each case once.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import jax
import jax.numpy as jnp
from jax import lax

from solver.dae.concrete import NUMPY_RULES, evaluate

jax.config.update("jax_enable_x64", True)

FLOATS = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True, width=64)
INTS = st.integers(-2**62, 2**62)

# name: (function, operand shapes, operand kind: "f" float64, "i" int64, "b" bool, "f32" float32)
CASES = {
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (0, 2)), [(2, 4)], "f"),
    "broadcast_scalar": (lambda x: lax.broadcast_in_dim(x, (3, 2), ()), [()], "f"),
    "reshape": (lambda x: lax.reshape(x, (3, 2, 2)), [(4, 3)], "f"),
    "squeeze": (lambda x: lax.squeeze(x, (0, 2)), [(1, 3, 1)], "f"),
    "transpose": (lambda x: lax.transpose(x, (2, 0, 1)), [(2, 3, 4)], "f"),
    "slice_strided": (lambda x: lax.slice(x, (1, 0), (5, 3), (2, 2)), [(6, 4)], "f"),
    "concatenate": (lambda x, y: lax.concatenate([x, y, x], 1), [(2, 3), (2, 1)], "f"),
    "pad_interior": (lambda x, v: lax.pad(x, v, ((1, 2, 1), (0, 0, 2))), [(3, 2), ()], "f"),
    "pad_negative": (lambda x, v: lax.pad(x, v, ((-1, 2, 0), (1, -2, 1))), [(4, 3), ()], "f"),
    "rev": (lambda x: lax.rev(x, (0, 1)), [(3, 2)], "f"),
    "dynamic_slice_clamped": (lambda x: lax.dynamic_slice(x, (5, -1), (2, 2)), [(4, 3)], "f"),
    "dynamic_update_slice_clamped": (lambda x, u: lax.dynamic_update_slice(x, u, (3, 1)), [(4, 3), (2, 2)], "f"),
    "select_n_bool": (lambda x, y: lax.select_n(x > y, x, y), [(3, 2), (3, 2)], "f"),
    "split": (lambda x: lax.split(x, (1, 3), axis=1), [(2, 4)], "f"),
    "add": (lax.add, [(5,), (5,)], "f"),
    "sub": (lax.sub, [(5,), (5,)], "f"),
    "mul": (lax.mul, [(5,), (5,)], "f"),
    "neg": (lax.neg, [(5,)], "f"),
    "div": (lax.div, [(5,), (5,)], "f"),
    "min_is_bound": (lax.min, [(5,), (5,)], "f"),  # numpy's min(-0, 0) is 0, XLA's -0
    "int_add_mul_wrap": (lambda x, y: lax.mul(lax.add(x, y), y), [(4,), (4,)], "i"),
    "int_div_is_bound": (lambda x, y: lax.div(x, y), [(4,), (4,)], "i"),
    "int_to_float": (lambda x: lax.convert_element_type(x, np.float64), [(4,)], "i"),
    "float32_to_float64": (lambda x: lax.convert_element_type(x, np.float64), [(4,)], "f32"),
    "float_to_int_is_bound": (lambda x: lax.convert_element_type(x, np.int32), [(4,)], "f"),
    "bool_to_float": (lambda x: lax.convert_element_type(x, np.float64), [(3,)], "b"),
    "compare_float": (lambda x, y: (lax.eq(x, y), lax.ne(x, y), lax.lt(x, y), lax.le(x, y), lax.gt(x, y),
                                    lax.ge(x, y)), [(5,), (5,)], "f"),
    "compare_int": (lambda x, y: (lax.eq(x, y), lax.lt(x, y), lax.ge(x, y)), [(4,), (4,)], "i"),
    "compare_equal_operands": (lambda x: (lax.eq(x, x), lax.le(x, x), lax.ne(x, x)), [(5,)], "f"),
    "iota": (lambda x: x + lax.broadcasted_iota(np.int64, (3, 4), 1) * lax.broadcasted_iota(np.int64, (3, 4), 0),
             [(3, 4)], "i"),
    "stack": (lambda x, y: jnp.stack([x, y, x], axis=1), [(2,), (2,)], "f"),
    # A rank-0 operand against an array: the jaxpr broadcasts it.
    "scalar_and_array": (lambda x, y: (lax.add(x, y), lax.mul(y, x), lax.sub(x, y)), [(3, 3), ()], "f"),
    "scalar_and_array_int": (lambda x, y: (lax.add(y, x), lax.mul(x, y), lax.sub(y, x)), [(2, 3), ()], "i"),
    "unstack": (lambda x: jnp.unstack(x, axis=1), [(2, 3, 2)], "f"),
}


def _operand(kind, shape):
    if kind == "i":
        return arrays(np.int64, shape, elements=INTS)
    if kind == "b":
        return arrays(np.bool_, shape)
    if kind == "f32":
        return arrays(np.float32, shape, elements=st.floats(width=32, allow_nan=True))
    return arrays(np.float64, shape, elements=FLOATS)


def _check(fn, args):
    closed = jax.make_jaxpr(fn)(*args)
    env = dict(zip(closed.jaxpr.invars, args))
    for eqn in closed.jaxpr.eqns:
        ins = [env[v] if not hasattr(v, "val") else v.val for v in eqn.invars]
        ours = evaluate(eqn.primitive, ins, eqn.params)
        xla = eqn.primitive.bind(*ins, **eqn.params)
        ours_l = ours if eqn.primitive.multiple_results else [ours]
        xla_l = xla if eqn.primitive.multiple_results else [xla]
        for a, b in zip(ours_l, xla_l):
            b = np.asarray(b)
            assert np.asarray(a).dtype == b.dtype, (eqn.primitive.name, np.asarray(a).dtype, b.dtype)
            np.testing.assert_array_equal(np.asarray(a), b, err_msg=str(eqn))
            # Signed zeros too (-0.0 == 0.0 for assert_array_equal); a NaN's sign is no number's.
            if b.dtype.kind == "f":
                real = ~np.isnan(b)
                assert np.array_equal(np.signbit(a)[real], np.signbit(b)[real]), str(eqn)
        for v, val in zip(eqn.outvars, ours_l):
            env[v] = val


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_evaluation_equals_the_bound_primitive(name):
    fn, shapes, kind = CASES[name]

    @settings(max_examples=20, deadline=None, database=None, derandomize=True)
    @given(st.tuples(*[_operand(kind, s) for s in shapes]))
    def run(args):
        if kind == "i" and "div" in name:
            args = (args[0], np.where(args[1] == 0, 1, args[1]))  # XLA's integer division by zero is its own
        _check(fn, list(args))

    run()


def test_every_rule_is_exercised():
    """Each primitive numpy evaluates appears in some case above."""
    seen = set()
    for fn, shapes, kind in CASES.values():
        args = [np.zeros(s, {"i": np.int64, "b": np.bool_, "f32": np.float32}.get(kind, np.float64)) for s in shapes]
        seen |= {e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns}
    assert set(NUMPY_RULES) - seen <= {"copy"}, set(NUMPY_RULES) - seen
