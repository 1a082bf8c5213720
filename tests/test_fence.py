"""``solver.taylor.tape.fence``: values computed once for all the kernels that read them.

XLA:CPU's fusion recomputes a cheap shared operation inside every fused
kernel that reads it; the unrolled Taylor engine passes each stage's new
coefficients through a fence so that later orders read them instead of
recomputing their cones (``workflows/benchmarks/results/compile_size.txt``).
The fence must change no value, under ``jit`` and ``vmap``, and it must
still stop the copying after XLA's own simplifications.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import solver
from solver.taylor.tape import UnrolledProgram, fence

ROOT = Path(__file__).resolve().parents[1]

# The literal-zero bead of test_multi_result_ops: a one-degree-of-freedom Lagrangian whose
# unrolled step XLA copied 8.6x (multiplies after fusion / before) without fences.
BEAD = ROOT / "tests" / "data" / "literal_zero_bead.yaml"


def _bench_compile_size():
    spec = importlib.util.spec_from_file_location(
        "bench_compile_size", ROOT / "workflows" / "benchmarks" / "bench_compile_size.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fence_returns_its_values_bit_for_bit():
    rng = np.random.default_rng(0)
    values = [jnp.asarray(rng.normal(size=s)) for s in [(), (3,), (2, 3)]]
    values.append(jnp.asarray([np.inf, -0.0, -1e300, np.nan]))
    for anchor in (0.25, np.nan, -3.0):
        out = jax.jit(lambda vs, a: fence(vs, a))(values, anchor)
        assert len(out) == len(values)
        for v, w in zip(values, out):
            assert w.shape == v.shape and w.dtype == v.dtype
            np.testing.assert_array_equal(np.asarray(w), np.asarray(v))
    assert fence([], 0.0) == []


def test_fence_under_vmap_with_a_batched_anchor():
    x = jnp.linspace(-1.0, 1.0, 7)
    anchors = jnp.asarray([0.0, 1.0, np.nan, 2.0, -1.0, 5.0, np.nan])
    out = jax.jit(jax.vmap(lambda v, a: fence([jnp.sin(v), v * v], a)))(x, anchors)
    np.testing.assert_array_equal(np.asarray(out[0]), np.sin(np.asarray(x)))
    np.testing.assert_array_equal(np.asarray(out[1]), np.asarray(x) ** 2)


@pytest.mark.xla_internals
def test_a_fenced_unrolled_step_copies_each_multiply_less_than_twice():
    """XLA's optimised program against the one it started from (8.6x without fences)."""
    bench = _bench_compile_size()
    model = solver.load(BEAD)
    fn, args, kwargs, integ = bench.capture_call(model, "unrolled", 0)
    assert integ.mode == "unrolled"
    lowered = fn.lower(*args, **kwargs)
    before = bench.count(lowered.compiler_ir("hlo").as_hlo_text())
    after = bench.count(lowered.compile().as_text())
    assert after["multiply"] < 2 * before["multiply"], (before, after)


def test_fence_new_fences_each_coefficient_once():
    nodes = {"a": [jnp.ones(()), None, jnp.full((2,), 2.0)]}
    aux = {("k", "cos"): [jnp.zeros(())]}
    XL = {"x": [jnp.arange(3.0), None]}
    fenced = {}
    UnrolledProgram.fence_new(nodes, aux, XL, fenced, jnp.zeros(()))
    first = [nodes["a"][0], nodes["a"][2], aux[("k", "cos")][0], XL["x"][0]]
    assert len(fenced) == 4 and all(id(v) in fenced for v in first)
    nodes["a"][1] = jnp.full((), 3.0)
    UnrolledProgram.fence_new(nodes, aux, XL, fenced, jnp.zeros(()))
    assert len(fenced) == 5 and nodes["a"][0] is first[0] and float(nodes["a"][1]) == 3.0


def _batched_conditions(jaxpr) -> int:
    """While loops, in a jaxpr and every jaxpr nested in it, whose condition is an array (one per batch element)."""
    n = 0
    for e in jaxpr.eqns:
        if e.primitive.name == "while":
            n += e.params["cond_jaxpr"].out_avals[0].shape != ()
        for p in e.params.values():
            for sub in (p if isinstance(p, (list, tuple)) else [p]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += _batched_conditions(inner)
    return n


def test_a_batch_fences_on_a_value_the_whole_batch_shares():
    # Fenced on each element's own time, every fence is a loop with a batched
    # condition, which XLA runs with a select of every fenced value per trip;
    # a batch's step is fenced on its end time t1, which all elements share.
    from solver.integrate.integrator import order_for_tol

    def residual(t, v, p):
        x, y, lam = v["x"], v["y"], v["lam"]
        return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]

    dae = solver.DAE(residual, ["x", "y", "lam"], {"g": 9.81, "L": 1.0})
    integ = solver.compiled_model(dae, order_for_tol(1e-10), mode="unrolled").integrator
    consts = integ.prog.constants({"g": jnp.asarray(9.81), "L": jnp.asarray(1.0)})
    z = jnp.asarray(np.random.default_rng(1).uniform(0.1, 0.9, (3, integ.n_state)))
    t = jnp.asarray([0.0, 0.1, 0.2])

    def batch(shared: bool):
        def one(zi, ti, t1):
            return integ.series(zi, jnp.zeros(dae.n), ti, consts, fence_anchor=t1 if shared else ti)[0]
        return jax.vmap(one, in_axes=(0, 0, None))

    batched = {flag: _batched_conditions(jax.make_jaxpr(batch(flag))(z, t, 10.0).jaxpr) for flag in (True, False)}
    assert batched[False] - batched[True] >= 14, batched  # one per fence (stages 0..13)
    a, b = jax.jit(batch(True))(z, t, 10.0), jax.jit(batch(False))(z, t, 10.0)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))

