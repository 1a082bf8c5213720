"""The integrator against exact solutions, convergence order and batching."""

import math
import re

import numpy as np
import pytest
import scipy.special as sps

import jax
import jax.numpy as jnp

from hypothesis import given
from hypothesis import strategies as hst

import solver
from solver import status
from solver.integrate.integrator import output_rows, pad_output_times
from solver.api import integrator_for
from solver.integrate.initialize import parse_values

from models_for_tests import four_bar


def pendulum(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


PEND = solver.DAE(pendulum, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})


def exact_pendulum(t, theta0, g, L):
    """Released from rest at angle theta0 (from the downward vertical).

    sin(θ/2) = k sn(K(k) − ω t; k), k = sin(θ0/2), ω = sqrt(g/L)
    (Jacobi elliptic functions; scipy.special.ellipj takes m = k²).
    """
    k = math.sin(theta0 / 2)
    m = k * k
    sn, cn, dn, _ = sps.ellipj(sps.ellipk(m) - math.sqrt(g / L) * np.asarray(t), m)
    theta = 2 * np.arcsin(k * sn)
    return L * np.sin(theta), L * np.cos(theta)


def test_pendulum_index3_matches_elliptic_solution_over_10s():
    theta0 = 1.2
    t = np.linspace(0, 10, 501)
    ds = solver.solve(PEND, (0.0, 10.0), values={"x": math.sin(theta0), "y": 0.5, "x'": 0.0, "y'": 0.0},
                      fixed=["x", "x'"], tol=1e-11, t_eval=t)
    assert int(ds.status) == status.SUCCESS
    xe, ye = exact_pendulum(t, theta0, 9.81, 1.0)
    assert np.max(np.abs(ds.x.values - xe)) <= 1e-10
    assert np.max(np.abs(ds.y.values - ye)) <= 1e-10
    # The fixed initial x is kept and the guessed y lands on the circle's lower branch.
    assert ds.x.values[0] == pytest.approx(math.sin(theta0), abs=0)
    assert ds.y.values[0] == pytest.approx(math.cos(theta0), abs=1e-13)
    assert np.max(ds.constraint_residual.values) <= 1e-12
    # The multiplier is the rod tension per unit mass and length: λ = (v² + g y)/L².
    v2 = ds.x_d1.values ** 2 + ds.y_d1.values ** 2
    assert np.max(np.abs(ds.lam.values - (v2 + 9.81 * ds.y.values))) <= 1e-8


def constrained_oscillators(t, v, p):
    # x1'' = -x1 + λ, x2'' = -4 x2 + λ, x1 + x2 = 0 (linear, index 3):
    # then λ = -1.5 x1 and x1'' = -2.5 x1.
    x1, x2, lam = v["x1"], v["x2"], v["lam"]
    return [x1[2] + x1[0] - lam[0], x2[2] + 4 * x2[0] - lam[0], x1[0] + x2[0]]


LIN = solver.DAE(constrained_oscillators, ["x1", "x2", "lam"])


def test_linear_constant_coefficient_dae_closed_form():
    w = math.sqrt(2.5)
    t = np.linspace(0, 8, 161)
    ds = solver.solve(LIN, (0, 8), values={"x1": 0.7, "x1'": 0.3}, fixed=["x1", "x1'"], tol=1e-12, t_eval=t)
    x1 = 0.7 * np.cos(w * t) + 0.3 / w * np.sin(w * t)
    assert np.max(np.abs(ds.x1.values - x1)) < 1e-11
    assert np.max(np.abs(ds.x2.values + x1)) < 1e-11
    assert np.max(np.abs(ds.lam.values + 1.5 * x1)) < 1e-10
    assert np.max(np.abs(ds.x1_d1.values - (-0.7 * w * np.sin(w * t) + 0.3 * np.cos(w * t)))) < 1e-10


OSC = solver.DAE(lambda t, v, p: [v["u"][2] + 2.5 * v["u"][0]], ["u"])


@pytest.mark.parametrize("mode", ["unrolled", "compact"])
@pytest.mark.parametrize("order", [3, 5])
def test_convergence_order_with_fixed_steps(order, mode):
    """With p stages the series of u (d = 2) has degree p + 2, so the global
    error with fixed steps falls like h^(p+2), in either engine."""
    integ = integrator_for(OSC, order, mode=mode)
    assert integ.mode == mode
    z0 = jnp.array([1.0, 0.0])
    T, w = 2.0, math.sqrt(2.5)
    hs = [0.2, 0.1, 0.05]
    errs = []
    for h in hs:
        r = integ.run({}, z0, jnp.zeros(1), 0.0, T, np.array([T]), 0.5, fixed_step=h)
        errs.append(abs(float(r["values"]["u"][0, 0]) - math.cos(w * T)))
    slopes = [math.log(errs[i] / errs[i + 1]) / math.log(2.0) for i in range(2)]
    assert all(order + 2 - 0.3 <= s <= order + 2 + 0.5 for s in slopes), (errs, slopes)


def test_linear_dae_with_projection_converges_at_least_at_order_p_plus_2():
    integ = integrator_for(LIN, 3)
    spec = parse_values(integ, {"x1": 1.0, "x1'": 0.0}, ["x1", "x1'"])
    z0 = jnp.asarray(solver.consistent_point(integ, {}, 0.0, spec))
    T, w = 2.0, math.sqrt(2.5)
    errs = []
    for h in [0.1, 0.05, 0.025]:
        r = integ.run({}, z0, jnp.zeros(3), 0.0, T, np.array([T]), 0.5, fixed_step=h)
        errs.append(abs(float(r["values"]["x1"][0, 0]) - math.cos(w * T)))
    slopes = [math.log(errs[i] / errs[i + 1]) / math.log(2.0) for i in range(2)]
    assert min(slopes) >= 5 - 0.3, (errs, slopes)


def index5_chain(t, v, p):
    # x1 = sin t, x_{k+1} = x_k': structural index 5, x5 = sin^(4) t = sin t.
    x = [v[f"x{i}"] for i in range(1, 6)]
    return [x[0][0] - jnp.sin(t)] + [x[i + 1][0] - x[i][1] for i in range(4)]


def test_index5_dae_follows_the_derivatives_of_its_forcing():
    dae = solver.DAE(index5_chain, [f"x{i}" for i in range(1, 6)])
    assert dae.structure.index == 5 and dae.structure.dof == 0
    t = np.linspace(0, 3, 31)
    ds = solver.solve(dae, (0, 3), tol=1e-10, t_eval=t)
    assert int(ds.status) == 0
    for i, f in enumerate([np.sin, np.cos, lambda s: -np.sin(s), lambda s: -np.cos(s), np.sin], start=1):
        assert np.max(np.abs(ds[f"x{i}"].values - f(t))) < 1e-9


def test_ddt_of_a_subexpression_talk_example():
    """((x1' sin t)')^2 / (1 + x2'^2) + t^2 cos x2 = 0 with x1 = t^2 prescribed.

    Then ((x1' sin t)')² = (2 sin t + 2 t cos t)², so x2 solves the implicit ODE
    cos x2 = -(2 sin t + 2t cos t)² / (t² (1 + x2'²)).  We check the residual
    of the computed solution with finite differences of the dense output.
    """

    def talk(t, v, p):
        x1, x2 = v["x1"], v["x2"]
        return [solver.ddt(x1[1] * jnp.sin(t)) ** 2 / (1 + x2[1] ** 2) + t**2 * jnp.cos(x2[0]),
                x1[0] - t**2]

    dae = solver.DAE(talk, ["x1", "x2"])
    s = dae.structure
    assert list(s.c) == [0, 2] and list(s.d) == [2, 1]
    t0 = 1.0
    a = (2 * math.sin(t0) + 2 * t0 * math.cos(t0)) ** 2
    # pick x2(1) = 2.0 and the x2' > 0 root of cos x2 = -a / (1 + x2'^2)
    x2p = math.sqrt(-a / math.cos(2.0) - 1)
    t = np.linspace(1.0, 1.2, 201)
    # x2' is not state (d = 1): its value is the guess that picks the root.
    ds = solver.solve(dae, (1.0, 1.2), values={"x2": 2.0, "x2'": x2p, "x1''": 2.0}, fixed=["x2"], tol=1e-12, t_eval=t)
    assert ds.x2.values[1] > 2.0
    assert int(ds.status) == 0
    x2 = ds.x2.values
    dx2 = np.gradient(x2, t, edge_order=2)
    res = (2 * np.sin(t) + 2 * t * np.cos(t)) ** 2 / (1 + dx2**2) + t**2 * np.cos(x2)
    assert np.max(np.abs(res[2:-2])) < 1e-4  # limited by the finite differences
    assert np.max(np.abs(ds.x1.values - t**2)) < 1e-12


@pytest.mark.parametrize("n_out, t_last", [(1, 3.0), (32, 3.0), (64, 3.0), (257, 3.0), (100, 1.3), (64, 1.3),
                                            (20, 1.3)])
def test_outputs_in_chunks_equal_outputs_in_one_array(monkeypatch, n_out, t_last):
    # Where XLA runs loops kernel by kernel (small-loop threshold below
    # mechsweep's), Integrator.run keeps at most 512 bytes of outputs in its
    # stepping loop (32 rows of x, x' here) and copies full chunks out;
    # several outputs per step cross chunk boundaries, and with t_last < t1
    # the integration goes on after the last output.  The same run with every
    # output in one array (the layout under mechsweep's threshold) must give
    # the same numbers, bit for bit, and the exact solution.
    from solver.integrate import xla_setup

    theta0, t1 = 1.2, 3.0
    t_eval = np.linspace(0.0, t_last, n_out) if n_out > 1 else np.array([t_last])
    z0 = jnp.asarray([math.sin(theta0), 0.0, math.cos(theta0), 0.0])
    params = {"g": jnp.asarray(9.81), "L": jnp.asarray(1.0)}
    whole_integ = integrator_for(PEND, 12)
    assert whole_integ._output_chunk(n_out) == n_out
    whole = whole_integ.run(params, z0, jnp.zeros(3), 0.0, t1, t_eval, 1e-10)
    monkeypatch.setattr(xla_setup, "loop_byte_threshold", lambda: xla_setup.XLA_DEFAULT_LOOP_BYTES)
    integ = integrator_for(PEND.with_params(), 12)
    assert integ._output_chunk(n_out) == (32 if n_out > 32 else n_out)
    chunked = integ.run(params, z0, jnp.zeros(3), 0.0, t1, t_eval, 1e-10)
    assert int(chunked["status"]) == int(whole["status"]) == status.SUCCESS
    assert float(chunked["t_final"]) == t1
    for name in ("x", "y", "lam"):
        np.testing.assert_array_equal(np.asarray(chunked["values"][name]), np.asarray(whole["values"][name]))
    xe, ye = exact_pendulum(t_eval, theta0, 9.81, 1.0)
    assert np.max(np.abs(np.asarray(chunked["values"]["x"][:, 0, ...]).ravel() - xe)) <= 1e-9
    assert np.max(np.abs(np.asarray(chunked["values"]["y"][:, 0, ...]).ravel() - ye)) <= 1e-9


# Instructions of an optimised HLO program that XLA:CPU runs no kernel for.
_NO_KERNEL = ("parameter", "constant", "tuple", "get-tuple-element", "bitcast")


def entry_kernels(compiled) -> list[str]:
    """The operations of a compiled program's entry computation that XLA:CPU runs as kernels."""
    text = compiled.as_text()
    entry = text[text.index("\nENTRY"):]
    entry = entry[entry.index("{") + 1: entry.index("\n}")]
    ops = []
    for line in entry.strip().splitlines():
        op = re.search(r"\b([a-z][a-z0-9-]*)\(", line.split(" = ", 1)[1]).group(1)
        if op not in _NO_KERNEL:
            ops.append(op)
    return ops


@pytest.mark.xla_internals
def test_a_small_models_run_keeps_its_set_up_in_its_loop_with_the_unwrapped_runs_numbers():
    # XLA:CPU hands a program's kernels to its thread pool when there are
    # more than 8 and one buffer passes 512 bytes (here from 33 outputs on),
    # and the 13 independent set-up kernels XLA hoists out of the pendulum's
    # step loop cost its run a quarter of its time.  The unrolled engine's
    # run is wrapped in a loop of one trip (Integrator._run_whole): outside
    # it, only the loop and the initial values of its results (one kernel
    # per result) and of its flag remain.  Same numbers as the unwrapped run.
    from solver.integrate import xla_setup
    from solver.integrate.run_args import device_number

    assert xla_setup.loops_compiled_whole()
    theta0, t1 = 1.2, 3.0
    t_eval = jnp.asarray(np.linspace(0.0, t1, 101))
    z0 = jnp.asarray([math.sin(theta0), 0.0, math.cos(theta0), 0.0])
    params = {"g": jnp.asarray(9.81), "L": jnp.asarray(1.0)}
    integ = integrator_for(PEND, 12)
    assert integ.mode == "unrolled"
    args = (params, z0, jnp.zeros(3), *map(device_number, (0.0, t1)), t_eval,
            *map(device_number, (1e-10, 100_000, jnp.inf, 0.0)))
    wrapped = integ._run_jit.lower(*args).compile()
    plain = jax.jit(integ._run).lower(*args).compile()
    a, b = wrapped(*args), plain(*args)
    results = len(jax.tree.leaves(a))
    kernels = entry_kernels(wrapped)
    assert kernels.count("call") + kernels.count("while") == 1 and len(kernels) <= results + 2, kernels
    assert len(entry_kernels(plain)) > results + 2  # what the wrapper is for (else it has become useless)
    assert int(a["status"]) == int(b["status"]) == status.SUCCESS and int(a["steps"]) == int(b["steps"])
    for name in ("x", "y", "lam"):
        np.testing.assert_array_equal(np.asarray(a["values"][name]), np.asarray(b["values"][name]))
    np.testing.assert_array_equal(np.asarray(a["z_final"]), np.asarray(b["z_final"]))


def test_output_times_are_copied_to_the_device_once_per_content():
    # Integrator.run keeps a numpy array of output times on the device: the
    # same content (a new array each call, as solve() pads it) is not copied
    # again, a different content is, and what is not a 1-D float64 numpy
    # array (lists, device arrays, tracers, very long arrays) passes as given.
    from solver.integrate.run_args import CACHED_TIMES_MAX, device_times

    a = device_times(np.linspace(0.0, 1.0, 11))
    assert isinstance(a, jax.Array) and device_times(np.linspace(0.0, 1.0, 11)) is a
    np.testing.assert_array_equal(np.asarray(a), np.linspace(0.0, 1.0, 11))
    other = device_times(np.linspace(0.0, 2.0, 11))
    assert other is not a and float(other[-1]) == 2.0
    for given in ([0.0, 1.0], jnp.linspace(0.0, 1.0, 3), np.arange(3), np.zeros(CACHED_TIMES_MAX + 1)):
        assert device_times(given) is given
    # The same numbers whichever way the times are given.
    theta0, t1 = 0.5, 1.0
    z0 = jnp.asarray([math.sin(theta0), 0.0, math.cos(theta0), 0.0])
    params = {"g": jnp.asarray(9.81), "L": jnp.asarray(1.0)}
    integ = integrator_for(PEND, 12)
    runs = [integ.run(params, z0, jnp.zeros(3), 0.0, t1, t, 1e-10)
            for t in (np.linspace(0.0, t1, 5), jnp.linspace(0.0, t1, 5), list(np.linspace(0.0, t1, 5)))]
    for r in runs[1:]:
        np.testing.assert_array_equal(np.asarray(r["values"]["x"]), np.asarray(runs[0]["values"]["x"]))


def _hlo_computations(text: str) -> dict:
    """HLO text -> {computation: {instruction: (text after '=', is_root)}}."""
    comps, cur = {}, None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            cur = comps[head.group(1)] = {}
        elif line.startswith("}"):
            cur = None
        elif cur is not None and (m := re.match(r"\s*(ROOT )?%?([\w.\-]+) = (.*)$", line)):
            cur[m.group(2)] = (m.group(3), bool(m.group(1)))
    return comps


def _hlo_operands(expr: str) -> list[str]:
    body = expr.split(") ", 1)[1] if expr.startswith("(") else expr  # past a tuple's shape
    m = re.search(r"[a-z\-]+\(([^()]*)\)", body)
    return [x.strip().lstrip("%") for x in m.group(1).split(",")] if m and m.group(1).strip() else []


def _carry_elements_read(comp: dict, start: str) -> set[int]:
    """Tuple indices of the computation's parameter that ``start`` depends on."""
    seen, todo, read = set(), [start], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in comp:
            continue
        seen.add(name)
        expr = comp[name][0]
        gte = re.search(r"get-tuple-element\(%?([\w.\-]+)\), index=(\d+)", expr)
        if gte and "parameter(" in comp.get(gte.group(1), ("",))[0]:
            read.add(int(gte.group(2)))
        todo.extend(_hlo_operands(expr))
    return read


def loops_xla_copies_to_find_a_counter(hlo_text: str) -> list[tuple]:
    """Loops whose condition reads one carry element that the body computes from others.

    XLA's loop passes copy the whole computation of such an element's
    update to test whether it is a counter (solver.integrate.integrator.step_loop_condition).
    Returns (condition, element, other elements its update reads) per loop.
    """
    comps = _hlo_computations(hlo_text)
    found = []
    for comp in comps.values():
        for expr, _ in comp.values():
            loop = re.search(r" while\(.*\), condition=%?([\w.\-]+), body=%?([\w.\-]+)", expr)
            if not loop:
                continue
            cond, body = comps[loop.group(1)], comps[loop.group(2)]
            read = _carry_elements_read(cond, next(n for n, (_, root) in cond.items() if root))
            if len(read) != 1:
                continue
            (i,) = read
            update = _hlo_operands(next(e for e, root in body.values() if root))[i]
            others = _carry_elements_read(body, update) - {i}
            if others:
                found.append((loop.group(1), i, sorted(others)))
    return found


@pytest.mark.xla_internals
def test_no_loop_of_a_run_makes_xla_copy_the_step_to_look_for_a_counter():
    # A step loop's condition that read only its status made XLA copy the
    # whole step, every pass, to test the status for a counter: a third of
    # the pendulum's compile.  Single runs, both slot-pool forms and the
    # forward-mode sensitivities are checked on their lowered programs.
    integ = integrator_for(PEND, 12)
    lengths = np.array([0.5, 1.0, 1.7])
    t_eval = np.linspace(0, 2, 21)
    z0 = np.stack([lengths * np.sin(0.4), 0 * lengths, lengths * np.cos(0.4), 0 * lengths], axis=1)
    params = {"g": np.full(3, 9.81), "L": lengths}
    u0 = np.zeros((3, 3))
    single = (jax.tree.map(lambda a: a[0], params), z0[0], u0[0], 0.0, 2.0, t_eval, 1e-10, 500, jnp.inf, 0.0)
    batch = (params, z0, u0, 0.0, 2.0, t_eval, 1e-10, 500, jnp.inf, 0.0)
    programs = {
        "run": jax.jit(integ._run_whole).lower(*single),
        "rounds": jax.jit(integ._run_batch_rounds, static_argnames=("slots",)).lower(*batch, slots=2),
        "scatter": jax.jit(integ._run_batch_scatter, static_argnames=("slots",)).lower(*batch, slots=2),
        "tangents": jax.jit(integ._run_tangents, static_argnames=("slots",)).lower(
            single[0], z0[0], u0[0], {"g": np.zeros(1), "L": np.ones(1)}, np.zeros((1, 4)), 0.0, 2.0, t_eval,
            1e-10, 500, jnp.inf, slots=None),
    }
    for name, lowered in programs.items():
        text = lowered.compiler_ir("hlo").as_hlo_text()
        assert " while(" in text
        assert loops_xla_copies_to_find_a_counter(text) == [], name


def test_vmapped_batch_equals_single_runs():
    integ = integrator_for(PEND, 12)
    lengths = np.array([0.5, 1.0, 1.7])
    t_eval = np.linspace(0, 2, 21)

    def one(L):
        # Consistent start: at angle 0.4 from rest on a rod of length L.
        z0 = jnp.stack([L * jnp.sin(0.4), 0.0, L * jnp.cos(0.4), 0.0])
        params = {"g": jnp.asarray(9.81), "L": L}
        return integ.run(params, z0, jnp.zeros(3), 0.0, 2.0, t_eval, 1e-10)

    batch = jax.vmap(one)(jnp.asarray(lengths))
    for i, L in enumerate(lengths):
        single = one(jnp.asarray(L))
        assert int(batch["status"][i]) == int(single["status"]) == 0
        assert int(batch["steps"][i]) == int(single["steps"])
        np.testing.assert_allclose(batch["values"]["x"][i], single["values"]["x"], rtol=0, atol=1e-13)
        np.testing.assert_allclose(batch["values"]["lam"][i], single["values"]["lam"], rtol=0, atol=1e-11)


@pytest.mark.parametrize("slots", [2, 64])  # refilled slots; more slots than problems
def test_slot_pool_batch_equals_the_vmapped_batch(slots):
    """run_batch (slots refilled as problems finish) gives the vmapped runs'
    results, failures included: L = 0 puts the bob on the pivot, where the
    system Jacobian is singular."""
    integ = integrator_for(PEND, 12)
    lengths = np.array([0.5, 1.0, 0.0, 1.7, 0.8])
    t_eval = np.linspace(0, 2, 21)
    z0 = np.stack([lengths * np.sin(0.4), 0 * lengths, lengths * np.cos(0.4), 0 * lengths], axis=1)
    params = {"g": np.full(lengths.size, 9.81), "L": lengths}
    u0 = np.zeros((lengths.size, 3))
    one = lambda p, z, u: integ.run(p, z, u, 0.0, 2.0, t_eval, 1e-10, max_steps=500)
    ref = jax.vmap(one)(params, z0, u0)
    pool = integ.run_batch(params, z0, u0, 0.0, 2.0, t_eval, 1e-10, max_steps=500, slots=slots)
    assert np.asarray(pool["status"]).tolist() == np.asarray(ref["status"]).tolist()
    assert int(pool["status"][2]) == status.SINGULAR_JACOBIAN
    assert sum(int(s) == status.SUCCESS for s in pool["status"]) == 4
    np.testing.assert_array_equal(np.asarray(pool["steps"]), np.asarray(ref["steps"]))
    # Same arithmetic, but XLA may vectorise another batch size differently.
    for key in ("t_final", "z_final", "u_final"):
        np.testing.assert_allclose(np.asarray(pool[key]), np.asarray(ref[key]), rtol=1e-12, atol=1e-13)
    for name in ref["values"]:
        np.testing.assert_allclose(np.asarray(pool["values"][name]), np.asarray(ref["values"][name]),
                                   rtol=1e-12, atol=1e-12)


def test_a_batch_compiled_whole_is_built_for_wide_vectors_and_gives_each_problem_its_single_runs_numbers():
    """On a CPU a batch whose round XLA compiles as one function asks for 512-bit
    vectors (WHOLE_ROUND_CPU_OPTIONS); a batch run kernel by kernel and a single
    run keep LLVM's default.  The option changes the machine code, not the
    arithmetic: compiled as users get it (LLVM optimising, as the suite's quick
    compiles do not), the batch gives every problem its own run's steps and
    numbers, to rounding."""
    integ = integrator_for(PEND, 12)
    assert integ.batch_compiler_options()["xla_cpu_prefer_vector_width"] == 512
    assert "xla_cpu_prefer_vector_width" not in integrator_for(four_bar(), 12).batch_compiler_options()
    assert integ.compiler_options() is None
    full = {"xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True}
    lengths = np.array([0.5, 1.0, 1.3, 1.7, 0.8, 2.0, 0.6, 1.1, 0.9])
    t_eval = np.linspace(0, 2, 21)
    z0 = np.stack([lengths * np.sin(0.4), 0 * lengths, lengths * np.cos(0.4), 0 * lengths], axis=1)
    params = {"g": np.full(lengths.size, 9.81), "L": lengths}
    u0 = np.zeros((lengths.size, 3))
    times = (0.0, 2.0, t_eval, 1e-10, 500, jnp.inf, 0.0)
    batch = jax.jit(integ._run_batch, static_argnames=("slots",),
                    compiler_options=integ.batch_compiler_options() | full)(params, z0, u0, *times, slots=8)
    one = jax.jit(integ._run_whole, compiler_options=full)
    for i in range(lengths.size):
        single = one({k: v[i] for k, v in params.items()}, z0[i], u0[i], *times)
        assert int(batch["status"][i]) == int(single["status"]) == status.SUCCESS
        assert int(batch["steps"][i]) == int(single["steps"])
        for name in single["values"]:
            np.testing.assert_allclose(np.asarray(batch["values"][name][i]), np.asarray(single["values"][name]),
                                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("slots", [2, 4])
def test_the_slot_pool_in_rounds_and_refilled_every_step_give_the_same_runs(slots):
    """On a CPU the slot pool runs in rounds (Integrator._run_batch_rounds);
    elsewhere (a GPU) it refills after every step and scatters the outputs
    (_run_batch_scatter).  Both must give every problem its own run, with a
    failure (L = 0: a singular Jacobian) among them and problems of different
    step counts finishing in different rounds."""
    integ = integrator_for(PEND, 12)
    lengths = np.array([0.5, 1.0, 0.0, 1.7, 0.8, 2.3, 0.3])
    t_eval = np.linspace(0, 2, 21)
    z0 = np.stack([lengths * np.sin(0.4), 0 * lengths, lengths * np.cos(0.4), 0 * lengths], axis=1)
    params = {"g": np.full(lengths.size, 9.81), "L": lengths}
    u0 = np.zeros((lengths.size, 3))
    args = (params, z0, u0, 0.0, 2.0, t_eval, 1e-10, 500, jnp.inf, 0.0)
    rounds = jax.jit(integ._run_batch_rounds, static_argnames=("slots",))(*args, slots=slots)
    scatter = jax.jit(integ._run_batch_scatter, static_argnames=("slots",))(*args, slots=slots)
    assert np.asarray(rounds["status"]).tolist() == np.asarray(scatter["status"]).tolist()
    assert int(rounds["status"][2]) == status.SINGULAR_JACOBIAN
    assert len(set(np.asarray(rounds["steps"]).tolist())) > 3
    for key in ("steps", "t_final", "z_final", "u_final"):
        np.testing.assert_array_equal(np.asarray(rounds[key]), np.asarray(scatter[key]))
    for name in scatter["values"]:
        np.testing.assert_array_equal(np.asarray(rounds["values"][name]), np.asarray(scatter["values"][name]))


def test_an_integrators_runs_from_two_threads_run_one_at_a_time_with_their_own_results(monkeypatch):
    """solve and solve_batch are not the only doors: integrator_for's Integrator is public, and
    jaxlib 0.10.2's LAPACK kernels can hang two of its batches executing at once (see
    solver.integrate.solve_lock).  Its run, run_batch and run_tangents hold the same process-wide lock: each
    thread's program executes after the other's ended and gives the numbers it gives alone."""
    from overlap import OverlapCounter, in_two_threads

    integ = integrator_for(PEND, 10)
    lengths = np.array([0.5, 1.0, 1.7])
    t_eval = np.linspace(0, 1, 5)
    z0 = np.stack([lengths * np.sin(0.4), 0 * lengths, lengths * np.cos(0.4), 0 * lengths], axis=1)
    params = {"g": np.full(lengths.size, 9.81), "L": lengths}
    u0 = np.zeros((lengths.size, 3))
    calls = {
        "run": lambda: integ.run({"g": 9.81, "L": 1.0}, z0[1], u0[1], 0.0, 1.0, t_eval, 1e-10),
        "run_batch": lambda: integ.run_batch(params, z0, u0, 0.0, 1.0, t_eval, 1e-10, slots=2),
        "run_tangents": lambda: integ.run_tangents(params, z0, u0, {"L": np.ones((1, 3)), "g": np.zeros((1, 3))},
                                                   np.zeros((1,) + z0.shape),
                                                   0.0, 1.0, t_eval, 1e-10, slots=2),
    }
    alone = {name: jax.tree_util.tree_map(np.asarray, call()) for name, call in calls.items()}
    counter = OverlapCounter()
    for attr in ("_run_jit", "_run_batch_jit", "_run_tangents_jit"):
        monkeypatch.setattr(integ, attr, counter.wrap(getattr(integ, attr)))
    for name, call in calls.items():
        results = in_two_threads(lambda call=call: jax.tree_util.tree_map(np.asarray, call()))
        assert counter.most == 1, name
        for got in results:
            jax.tree_util.tree_map(np.testing.assert_array_equal, got, alone[name])


def test_slot_pool_batch_rejects_bad_arguments():
    integ = integrator_for(PEND, 8)
    with pytest.raises(solver.InputError, match=r"^run_batch: no problems \(z0 has no rows\); give at least one$"):
        integ.run_batch({"g": np.zeros(0), "L": np.zeros(0)}, np.zeros((0, 4)), np.zeros((0, 3)), 0.0, 1.0,
                        np.linspace(0, 1, 3), 1e-8)
    z0, u0 = np.zeros((3, 4)), np.zeros((3, 3))
    with pytest.raises(solver.InputError, match=r"^slots must be at least 1; got 0$"):
        integ.run_batch({"g": np.full(3, 9.81), "L": np.ones(3)}, z0, u0, 0.0, 1.0, [1.0], 1e-8, slots=0)
    with pytest.raises(solver.InputError, match=r"^run_batch: parameter 'g' needs the batch axis first \(length 3\); "
                       r"got shape \(\); broadcast it, e\.g\. np\.full\(3, value\)$"):
        integ.run_batch({"g": 9.81, "L": np.ones(3)}, z0, u0, 0.0, 1.0, [1.0], 1e-8)


def _pendulum_with_dot(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    pos = jnp.stack([x[0], y[0]])
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], jnp.dot(pos, pos) - p["L"] ** 2]


@pytest.mark.xla_internals
def test_default_slots_are_small_for_a_round_compiled_whole_and_large_otherwise():
    """run_batch's default pool: 32 slots where XLA:CPU compiles the round as
    one function (no LAPACK call, no contraction), 128 where it runs kernel by
    kernel.  The prediction is checked on the compiled program: the
    pendulum's round holds no custom call and no library fusion."""
    integ = integrator_for(PEND, 12)
    assert integ.round_compiles_whole() and integ.default_slots() == 32
    lengths = np.array([0.5, 1.0, 0.0, 1.7, 0.8])
    t_eval = np.linspace(0, 2, 21)
    z0 = np.stack([lengths * np.sin(0.4), 0 * lengths, lengths * np.cos(0.4), 0 * lengths], axis=1)
    params = {"g": np.full(lengths.size, 9.81), "L": lengths}
    # The arguments of test_slot_pool_batch_equals_the_vmapped_batch[2]: its compiled program.
    hlo = integ._run_batch_jit.lower(params, z0, np.zeros((5, 3)), 0.0, 2.0, t_eval, 1e-10, 500, jnp.inf, 0.0,
                                     slots=2).compile().as_text()
    assert "custom_call_target" not in hlo and "__ynn_fusion" not in hlo
    with_dot = integrator_for(solver.DAE(_pendulum_with_dot, ["x", "y", "lam"], {"g": 9.81, "L": 1.0}), 12)
    assert not with_dot.round_compiles_whole() and with_dot.default_slots() == 128
    bigger = integrator_for(four_bar(), 12)  # 7 unknowns: a LAPACK factorisation
    assert bigger.prog.n > 5 and bigger.default_slots() == 128


def test_an_accelerator_advances_every_point_of_a_batch_at_once(monkeypatch):
    # Its width is its speed (results/solver_gpu_h100.txt); the rule, checked
    # here on the CPU by naming the backend.
    integ = integrator_for(PEND, 12)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert integ.default_slots(100_000) == 100_000 and integ.default_slots(1) == 1
    assert integ.default_slots() == 128  # the number of points unknown


def test_singular_system_jacobian_is_a_status_not_an_exception():
    # x'^2 + x^2 - 1 = 0 at x = 1 forces x' = 0 where J = 2 x' vanishes.
    dae = solver.DAE(lambda t, v, p: [v["x"][1] ** 2 + v["x"][0] ** 2 - 1.0], ["x"])
    integ = integrator_for(dae, 8)
    r = integ.run({}, jnp.array([1.0]), jnp.zeros(1), 0.0, 1.0, np.array([0.5, 1.0]), 1e-8)
    assert int(r["status"]) in (status.SINGULAR_JACOBIAN, status.NONFINITE)
    assert int(r["status"]) == status.SINGULAR_JACOBIAN


# ------------------------------------------- the structured solve, by contract
def _circle(t, v, p):
    # A unit point mass on a circle, written so that its system Jacobian is
    # [[M, Gᵀ], [G, 0]] with M = I and G = ∂C/∂q = (2x, 2y).
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + 2.0 * lam[0] * x[0], y[2] + 2.0 * lam[0] * y[0] + p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


class _CircleOfferingKKT(solver.DAE):
    """A plain DAE, not built by solver.lagrangian, that offers its KKT structure."""

    def __init__(self):
        super().__init__(_circle, ["x", "y", "lam"], {"g": 9.81, "L": 1.0})

    def kkt_blocks(self):
        from solver.numerics.kkt import KKTBlocks, MassBlocks

        index = np.array([[0], [1]])
        return KKTBlocks(coords=("x", "y"), n_q=2, n_c=1,
                         mass_blocks=lambda t, q, qd, p: [(index, jnp.ones((2, 1, 1)))],
                         constraints=lambda t, q, p: jnp.stack([q[0] ** 2 + q[1] ** 2 - p["L"] ** 2]),
                         flatten=lambda d: jnp.stack([d["x"], d["y"]]),
                         unflatten=lambda a: {"x": a[0], "y": a[1]},
                         find_mass_structure=lambda: MassBlocks(2, (index,)))


def test_any_dae_offering_kkt_blocks_gets_the_structured_solve_with_the_dense_result():
    from solver.integrate.integrator import Integrator
    from solver.taylor.program import TaylorProgram

    dae = _CircleOfferingKKT()
    s = dae.structure

    def integ(linear):
        return Integrator(TaylorProgram(dae, s.c, s.d, 10), linear=linear)

    assert integ("auto").linear == "dense"          # 3 unknowns: below KKT_MIN_SIZE
    kkt, dense = integ("kkt"), integ("dense")
    assert kkt.linear == "kkt" and dense.linear == "dense"
    t_eval = np.linspace(0.0, 1.0, 11)
    z0 = jnp.array([math.sin(0.5), 0.0, -math.cos(0.5), 0.0])  # (x, x', y, y') at rest
    params = {"g": jnp.asarray(9.81), "L": jnp.asarray(1.0)}
    runs = [i.run(params, z0, jnp.zeros(3), 0.0, 1.0, t_eval, 1e-10) for i in (kkt, dense)]
    assert [int(r["status"]) for r in runs] == [status.SUCCESS, status.SUCCESS]
    for name in ("x", "y", "lam"):
        np.testing.assert_allclose(runs[0]["values"][name], runs[1]["values"][name], rtol=0, atol=1e-10)
    # Swinging down from 0.5 rad with g pointing to −y: y stays on the circle.
    r2 = runs[0]["values"]["x"][:, 0] ** 2 + runs[0]["values"]["y"][:, 0] ** 2
    np.testing.assert_allclose(r2, 1.0, atol=1e-10)



@given(hst.integers(min_value=0, max_value=10**7))
def test_output_rows_round_up_to_a_sparse_ladder_with_less_than_a_third_padding(n):
    rows = output_rows(n)
    assert rows >= n and output_rows(rows) == rows
    assert rows == n if n <= 4 else 3 * (rows - n) < rows
    # The ladder: 2^k or 3·2^(k-1).
    power_of_two = lambda m: m & (m - 1) == 0
    assert n <= 4 or power_of_two(rows) or (rows % 3 == 0 and power_of_two(rows // 3))


@pytest.mark.parametrize("threshold", ["mechsweep", "xla_default"])
def test_padded_output_times_are_never_written_and_change_no_output(monkeypatch, threshold):
    # solve() pads the output times with +inf to output_rows() rows; those
    # rows stay NaN, in one output array or in chunks (XLA's own threshold:
    # 32 rows here, so the 65 -> 96 padding spans chunks), and the real rows
    # are the unpadded run's, bit for bit.
    from solver.integrate import xla_setup

    if threshold == "xla_default":
        monkeypatch.setattr(xla_setup, "loop_byte_threshold", lambda: xla_setup.XLA_DEFAULT_LOOP_BYTES)
    theta0, t1 = 1.2, 3.0
    t_eval = np.linspace(0.0, t1, 65)
    padded, n = pad_output_times(t_eval)
    assert n == 65 and padded.shape == (96,) and np.isposinf(padded[n:]).all()
    z0 = jnp.asarray([math.sin(theta0), 0.0, math.cos(theta0), 0.0])
    params = {"g": jnp.asarray(9.81), "L": jnp.asarray(1.0)}
    integ = integrator_for(PEND.with_params(), 12)
    plain = integ.run(params, z0, jnp.zeros(3), 0.0, t1, t_eval, 1e-10)
    pad = integ.run(params, z0, jnp.zeros(3), 0.0, t1, padded, 1e-10)
    assert int(pad["status"]) == status.SUCCESS and int(pad["steps"]) == int(plain["steps"])
    for name in ("x", "y", "lam"):
        np.testing.assert_array_equal(np.asarray(pad["values"][name])[:n], np.asarray(plain["values"][name]))
        assert np.isnan(np.asarray(pad["values"][name])[n:]).all()
