"""The staged Taylor step loop (docs/method.md §3, §5): jit- and vmap-safe.

:class:`Integrator` holds a :class:`~solver.taylor.program.TaylorProgram` and turns it
into pure functions of (parameters, state, time):

* :meth:`Integrator.series` — Taylor coefficients of the solution at a
  consistent point (negative stages with the known state, Newton on stage 0,
  then one LU of the system Jacobian and a back-substitution per order);
* :meth:`Integrator.hidden_constraints` — all constraints on the state
  (hidden ones included), as used by projection and initialisation;
* :meth:`Integrator.project` — Gauss–Newton minimum-norm projection;
* :meth:`Integrator.run` — the whole integration as one ``lax.while_loop``
  with dense output and a status code; safe under ``jax.vmap``.

The state ``z`` is the flat vector of normalised coefficients
``X[j, l] = x_j^(l) / l!`` for ``l < d_j`` (ordered by variable, then order,
then element); the leading derivatives ``u`` are ``X[j, d_j]``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple
from functools import lru_cache, partial

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import jaxpr_as_fun

from solver.numerics import linalg
from solver.integrate import xla_setup
from solver.numerics.jacobian import jacfwd
from solver import status as st
from solver.errors import InputError
from solver.integrate.solve_lock import one_at_a_time
from solver.integrate.step_events import DEFAULT_MAX_EVENTS, EventStepper
from solver.numerics.kkt import KKTBlocks, kkt_factor, kkt_solve
from solver.taylor.pointwise import levels_from_coefficients, residual_at
from solver.taylor.degree import stage0_is_affine
from solver.taylor.compact import CompactProgram, CompactUnsupportedError, batched_tangents
from solver.taylor.tape import UnrolledProgram, _plus, _times
from solver.dae.trace_flags import TraceFlag
from solver.taylor.program import _LINEAR as _LINEAR_NAMES
from solver.taylor.program import TaylorProgram, order_sum, write_row

# Slot counts of run_batch's pool (see Integrator.default_slots).
WHOLE_ROUND_SLOTS = 32
DEFAULT_SLOTS = 128
# XLA:CPU options of a batch (run_batch), on a CPU only: without Eigen's
# threading of its many small contractions (0.74 -> 0.54 ms per pendulum run
# on 2 cores; a single run is slower without it and keeps the default).
BATCH_CPU_OPTIONS = {"xla_cpu_multi_thread_eigen": False}
# And where XLA:CPU compiles a batch's round as one function (see
# Integrator.round_compiles_whole: every operation vector arithmetic over the
# slots), 512-bit vectors where the machine has them: LLVM prefers 256 bits,
# for code that is not mostly vector arithmetic on CPUs that lower their
# clock for wide vectors.  1,000 pendulums 7-12 % faster at the default 32
# slots in six pairs of alternating processes (25.0 -> 23.5 ms, 26.6 -> 23.8
# ms; AMD EPYC Zen 5).  Rounds run kernel by kernel moved by -6 to +5 %, within
# what identical programs vary between processes here (up to 7 %), and RSCR,
# the default sweep's model, was slower in most pairs (up to 8 %): they keep
# the default (workflows/benchmarks/results/vector_width.txt).  The arithmetic is
# the same: so are the results (tests/test_integrate.py).
WHOLE_ROUND_CPU_OPTIONS = {"xla_cpu_prefer_vector_width": 512}
# A batch's slot pool runs in rounds on a CPU (Integrator._run_batch_rounds); a
# round ends when this fraction of its slots (at least one) have finished
# (1,000 pendulums: 67 ms, against 72 ms at 1/64 and 76 ms at 1/4).
_ROUND_FINISHED = 1 / 16

__all__ = ["Integrator", "order_for_tol", "BATCH_CPU_OPTIONS", "WHOLE_ROUND_CPU_OPTIONS", "KKT_MIN_SIZE", "MODES",
           "QUICK_COMPILE", "UNROLL_MAX_OPS", "UNROLL_MAX_OPS_SINGLE", "tape_ops", "choose_mode"]

MODES = ("auto", "unrolled", "compact", "looped")

# The XLA options of a run compiled quickly (Integrator(optimize=False)): LLVM
# at -O0, and XLA:CPU's older IR emitters instead of its MLIR fusion emitters.
# XLA's HLO passes read neither, so the kernels are the same and only their
# machine code differs (RSCR's first solve 21.1 -> 10.5 s at -O0, a second one
# 0.12 -> 0.87 s; workflows/benchmarks/results/optimize.txt).  The older
# emitters take a fifth off the compile at -O0 (four small models: 15.4 ->
# 12.7 CPU-s), but not for users' optimised runs: there they made the 90x90
# cloth's step 2.6x and 1,000 pendulums 14% slower (results/quick_compile.txt).
QUICK_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}

# Above this many elementary operations in one step's series (see
# tape_ops) the unrolled program may take too long to trace and compile,
# and auto takes the compact engine instead.
# Measured on the cleaned tapes (workflows/benchmarks/results/modes.txt):
# RSCR (26k; 16.6k lines of StableHLO) compiles its series in 21 s unrolled,
# against minutes looped; a free rigid body in Euler angles (40k, 54
# products of two series; 38k lines) made XLA run for minutes at 12 GB.
# XLA's cost grows faster than the program, so auto stays well below the
# latter; pass mode="unrolled" to try it on a larger model.
UNROLL_MAX_OPS = 30_000
# For one run (solve, simulate) compiling is most of the time, and the
# compact engine compiles 1.5-2x faster from about this size on (RSCR 28 ->
# 14 s, Mechanism0 18 -> 11 s, the small cloth 7.8 -> 4.8 s, whole first
# solve; workflows/benchmarks/results/modes.txt), while its slower steps
# cost a single run little.  Batches keep UNROLL_MAX_OPS: there the unrolled
# steps' speed dominates (RSCR, 200 points: 4.8 s unrolled, 30 s compact).
UNROLL_MAX_OPS_SINGLE = 5_000


@lru_cache(maxsize=512)
def _cached_number(kind: type, value, sign: float):
    return jnp.asarray(value)


def _device_number(x):
    """A Python int or float as a (cached) device array; anything else unchanged.

    A jitted call converts each Python number argument anew, about 3 µs
    apiece: a tenth of a small model's run (pendulum: 0.20 -> 0.19 ms with
    the six scalars of :meth:`Integrator.run` cached).  The array is the one
    ``jnp.asarray`` makes of the number, so the compiled signature is the same.
    """
    if type(x) in (int, float):
        return _cached_number(type(x), x, math.copysign(1.0, x))
    return x


# Output-time arrays up to this length are kept on the device (8 bytes each).
CACHED_TIMES_MAX = 4096


@lru_cache(maxsize=64)
def _cached_times(data: bytes):
    return jnp.asarray(np.frombuffer(data, dtype=np.float64))


def _device_times(t_eval):
    """Output times given as a 1-D float64 numpy array (up to :data:`CACHED_TIMES_MAX`) as a cached device array.

    A jitted call copies a numpy argument to the device anew, about 9 µs for
    101 times against 1 µs to look its bytes up here: a twentieth of the
    pendulum's run, whose callers (``solve``, sweeps, benchmarks) pass the
    same times call after call.  Anything else (lists, device arrays,
    tracers, longer arrays) is returned unchanged.
    """
    if (isinstance(t_eval, np.ndarray) and t_eval.dtype == np.float64 and t_eval.ndim == 1
            and t_eval.size <= CACHED_TIMES_MAX):
        return _cached_times(t_eval.tobytes())
    return t_eval


def output_rows(n: int) -> int:
    """Rows of output a compiled run holds for ``n`` output times: n rounded up to 2^k or 3·2^(k-1).

    The number of output times is a shape of the compiled program, so every
    new count would compile the whole integration again (seconds to
    minutes).  :func:`solver.solve` and :func:`solver.solve_batch` pad the
    output times to this sparse ladder (:func:`pad_output_times`), so that
    counts from 65 to 96, say, share one program; at most a third of the
    rows are padding.

    Args:
        n: the number of output times (≥ 0).

    Returns:
        The rows: n itself up to 4, else the smallest 2^k or 3·2^(k-1) ≥ n.
    """
    if n <= 4:
        return n
    k = 1 << (n - 1).bit_length()  # the power of two ≥ n
    return 3 * k // 4 if 3 * k // 4 >= n else k


def pad_output_times(t_eval) -> tuple[np.ndarray, int]:
    """Output times padded with +inf to :func:`output_rows` rows.

    A time of +inf is never reached, so :meth:`Integrator.run` (and
    ``run_batch``, ``run_tangents``) leave its rows unwritten (NaN): the
    caller keeps the first ``n`` rows of every output.

    Args:
        t_eval: sorted output times (1-D).

    Returns:
        (padded times, n): n the number of times given.
    """
    t = np.asarray(t_eval, dtype=np.float64)
    n = int(t.shape[0])
    return np.concatenate([t, np.full(output_rows(n) - n, np.inf)]), n


def take_static(A, rows, cols):
    """``A[rows, cols]`` for static (numpy) index vectors, as slices of contiguous runs.

    A gather with constant indices leaves index arithmetic that XLA does
    not fold; inside the step loop it is hoisted into kernels of the
    program's entry, which cost a small model's run more than the gather.
    """
    rows, cols = np.asarray(rows, dtype=int), np.asarray(cols, dtype=int)
    if rows.size == 0:
        return jnp.zeros((0,), A.dtype)
    parts, start = [], 0
    for i in range(1, rows.size + 1):
        if i == rows.size or rows[i] != rows[start] or cols[i] != cols[i - 1] + 1:
            parts.append(A[int(rows[start]), int(cols[start]):int(cols[i - 1]) + 1])
            start = i
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)


def tape_ops(program: TaylorProgram) -> int:
    """Elementary operations of one step's series when unrolled (an estimate).

    A linear operation (or a product with a constant) costs one per order; a
    product of two series or a nonlinear recurrence one or two Cauchy sums
    over the orders below (about K² operations over a step, a product and an
    addition per term); the residual and commit passes of every stage and
    the window recompute multiply both.  It tracked the lowered program's
    size within a factor 1.6 (RSCR: 26k against 16.6k lines of StableHLO;
    a free body in Euler angles: 40k against 38k) when the commit pass
    formed every sum again; it now takes one term per operand
    (:meth:`solver.taylor.tape.UnrolledProgram.commit`), so the count is about
    twice what is traced.  :data:`UNROLL_MAX_OPS` and
    :data:`UNROLL_MAX_OPS_SINGLE` were measured on this count, which is
    kept, and with it every model's choice of engine.
    """
    K = program.K
    n = 0
    for e in program.live:
        if not any(o in program.series for o in e.outvars):
            continue
        # A Cauchy sum's term is a product and an addition.
        n += _cauchy_sums(program, e) * K * (K + 1) or K
    return 2 * program.window * n


# Cauchy sums per order of the nonlinear recurrences (solver/taylor/tape.py): a sine
# carries its cosine, a tangent its 1 ± tan², a power its logarithm.
_TWO_SUMS = {"sin", "cos", "sinh", "cosh", "tan", "tanh", "logistic", "pow", "atan2",
             "asin", "acos", "asinh", "acosh"}


def _cauchy_sums(program: TaylorProgram, e) -> int:
    """How many order-m Cauchy sums an operation's recurrence takes (0: linear)."""
    name = e.prim.name
    if name in ("mul", "dot_general"):
        # A product with a constant is one operation per order.
        return int(sum(program.is_series(a) for a in e.invars) == 2)
    if name in _LINEAR_NAMES or name in ("abs", "max", "min", "clamp", "reduce_max", "reduce_min", "ddt"):
        return 0
    if name == "integer_pow":
        return max(abs(int(e.params["y"])) - 1, 1)
    return 2 if name in _TWO_SUMS else 1


def choose_mode(program: TaylorProgram, mode: str = "auto", batch: bool = True) -> str:
    """The engine for a program: ``unrolled`` (:mod:`solver.taylor.tape`), ``compact`` (:mod:`solver.taylor.compact`) or ``looped``.

    Args:
        program: the Taylor program.
        mode: ``auto``, ``unrolled``, ``compact`` or ``looped``.  ``auto``
            takes unrolled up to :data:`UNROLL_MAX_OPS` operations for
            batches and up to :data:`UNROLL_MAX_OPS_SINGLE` for single runs,
            compact above.  The integrator falls back from an automatic
            ``compact`` to ``looped`` when the compact decomposition does not
            apply.
        batch: whether the integrator is for batches (``solve_batch``,
            sweeps) or single runs (``solve``): only ``auto`` reads it.

    Raises:
        InputError: an unknown mode.
    """
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode != "auto":
        return mode
    limit = UNROLL_MAX_OPS if batch else UNROLL_MAX_OPS_SINGLE
    return "unrolled" if tape_ops(program) <= limit else "compact"

# Below this many unknowns a dense LU of the system Jacobian is as cheap as
# the structured solve, and it also copes with a singular mass matrix.
KKT_MIN_SIZE = 40


def order_for_tol(tol: float) -> int:
    """Taylor order from the tolerance (Jorba–Zou): ⌈−ln(tol)/2⌉ + 1."""
    return int(math.ceil(-math.log(tol) / 2.0)) + 1


def in_one_trip_loop(fn, *args):
    """``fn(*args)`` computed in the body of a loop of one trip that XLA keeps.

    XLA:CPU's runtime runs a program's kernels one after another only when
    there are at most 8 of them or every buffer they touch is at most 512
    bytes; otherwise it runs them as a dataflow graph on its thread pool.
    A single run's step loop is one kernel (:mod:`solver.integrate.xla_setup`), but
    XLA hoists the set-up out of it (scalar conversions, output buffers,
    copies of the inputs: 13 independent kernels for the pendulum), and from
    33 output times on (a 528-byte buffer) the pendulum's run paid the
    hand-offs: 0.19 -> 0.25 ms.  Inside this loop the set-up stays in the
    one compiled function; outside it remain the loop and the initial
    values of its results, and the run costs what it did with 32 outputs
    (workflows/benchmarks/results/entry_kernels.txt).

    Args:
        fn: a traceable function of ``args`` returning a pytree of arrays.
        *args: its arguments (pytrees of arrays).

    Returns:
        ``fn(*args)``, the same numbers.
    """
    # Traced once (a large model's trace is most of a second); the loop's
    # body evaluates the traced program.
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
    leaves, tree = jax.tree.flatten(shapes)
    # Always true, but not a constant XLA folds: the loop is neither removed
    # nor inlined (were it ever folded, the program would only be slower).
    floats = [a for a in jax.tree.leaves(args) if jnp.issubdtype(jnp.result_type(a), jnp.floating) and jnp.size(a)]
    x = jnp.ravel(floats[0])[0] if floats else jnp.zeros(())
    go = jnp.isnan(x) | ~jnp.isnan(x)

    def body(carry):
        _, inputs, _ = carry
        return jnp.zeros((), bool), inputs, list(jaxpr_as_fun(closed)(*jax.tree.leaves(inputs)))

    init = (go, args, [jnp.zeros(s.shape, s.dtype) for s in leaves])
    return jax.tree.unflatten(tree, lax.while_loop(lambda c: c[0], body, init)[2])


_seeding = TraceFlag()


def tangent_seeds():
    """Within the block, a traced run gives a tangent to every carry that starts without one.

    ``jax.jvp`` of a ``while_loop`` finds which carries have tangents by a
    fixed point, tracing the loop's body again each time a carry gains
    one, and ``vmap`` over the tangent directions does the same for which
    carries are batched; a loop nested in the body is traced again with
    every pass of the loop around it.  A run's ``u`` and output buffers
    start as constants and gain tangents in the first step, so the
    sensitivities' trace took two or three passes at every level.  Under
    this block they start as ``constant + 0 * z0[0]``: the same values, but
    a tangent (batched, under the ``vmap``) from the start, so each fixed
    point holds at its first pass (the pendulum's sensitivities: tracing
    3.1 -> 2.3 s, results unchanged; workflows/benchmarks/results/sensitivity.txt).
    Set by :meth:`Integrator._run_tangents` while it traces.

    Returns:
        A context manager.
    """
    return _seeding.set(True)


def _tangent_seed(z0):
    """A zero carrying ``z0``'s tangent under :func:`tangent_seeds`, else None."""
    if not _seeding.on or not jnp.size(z0):
        return None
    return jnp.zeros((), jnp.result_type(z0)) * jnp.ravel(z0)[0]


def _seeded(tree, seed):
    """``tree`` (floating arrays) with ``seed`` added to every leaf (unchanged when ``seed`` is None)."""
    if seed is None:
        return tree
    return jax.tree_util.tree_map(lambda a: a + seed, tree)


def step_loop_condition(going, counter):
    """``going`` as a step loop's condition that also reads ``counter``, a carry element never negative.

    XLA's loop passes (invariant code motion and the loop simplifier, both
    run to a fixed point) look for an induction variable in every while
    loop.  When the condition reads one element of the carry, they copy the
    whole computation of that element's update in the body, every call and
    fusion inlined, to test whether it is a scalar counter
    (``GetUniqueGTEDependenceIndex`` in XLA's while_loop_analysis.cc).  A
    step loop's status depends on the whole step, so that copy, repeated per
    pass and loop, was a third of the pendulum's compile.  A condition that
    reads two elements is rejected before anything is copied.  XLA's
    compile: pendulum 3.6-4.6 -> 2.2-2.5 s, Mechanism0 6.3-7.3 -> 4.5-4.7 s,
    Andrews 15-16 -> 11-13.5 s, the car 21-22 -> 14-16 s, RSCR (whose
    compile is LLVM's) 18-19 -> 17.5 s; runs unchanged
    (workflows/benchmarks/results/loop_condition.txt).

    Args:
        going: the loop's boolean condition (scalar).
        counter: an integer element of the carry that is never negative
            (a step count, the next problem's index).

    Returns:
        ``going`` (``counter >= 0`` always holds).
    """
    return going & (counter >= 0)


class SlotPool(NamedTuple):
    """What both forms of a batch's slot pool share (:meth:`Integrator._pool`).

    Attributes:
        t0, t1, t_eval: the times, as float arrays.
        z0, u0: the problems' initial states and leading-derivative guesses
            (``u0`` seeded, :func:`tangent_seeds`).
        seed: :func:`_tangent_seed` of z0, for the output buffers.
        N: the number of problems; n_out: output rows; S: slots used.
        pick: problem rows -> their parameters.
        step: one problem's step, to vmap.
        pending: vmapped :meth:`Integrator._outputs_pending`.
    """

    t0: Any
    t1: Any
    t_eval: Any
    z0: Any
    u0: Any
    seed: Any
    N: int
    n_out: int
    S: int
    pick: Callable
    step: Callable
    pending: Callable


class Integrator:
    """Pure functions for one DAE at one Taylor order.

    Args:
        program: the prepared Taylor program (holds the DAE, c, d and p).
        linear: how stage systems are solved: ``"dense"`` (LU of the n×n
            system Jacobian), ``"kkt"`` (a Lagrangian DAE's
            ``[[M, Gᵀ], [G, 0]]`` by mass blocks and a Schur complement,
            :mod:`solver.numerics.kkt`), or ``"auto"`` (default): ``"kkt"`` for a
            Lagrangian DAE of at least :data:`KKT_MIN_SIZE` unknowns whose
            mass matrix is block diagonal, else ``"dense"``.  A DAE has the
            Lagrangian structure when it offers ``kkt_blocks()`` returning
            a :class:`solver.numerics.kkt.KKTBlocks` (as
            :class:`solver.mechanics.lagrangian.LagrangianDAE` does) and its offsets
            fit that system Jacobian.
        mode: the Taylor engine (:func:`choose_mode`): ``"unrolled"``
            (:mod:`solver.taylor.tape`: every stage and order as straight-line
            code), ``"looped"`` (:class:`~solver.taylor.program.TaylorProgram`
            interpreted in a ``lax`` loop over the stages, a program whose
            size does not depend on the order) or ``"auto"``.
        batch: what ``"auto"`` chooses for: batches (default) or single
            runs (:func:`choose_mode`).
        optimize: compile the runs with LLVM's optimisation (default).
            ``False`` compiles them quickly (:data:`QUICK_COMPILE`: LLVM at
            -O0, XLA:CPU's older IR emitters): same kernels and results up
            to rounding, compiles up to 2x faster, runs several times
            slower; for a first look at a large model or a run shorter
            than its compile
            (``workflows/benchmarks/results/optimize.txt``).

    Raises:
        InputError: an unknown ``linear`` or ``mode``, or ``"kkt"`` for a DAE without the
            Lagrangian structure.
    """

    def __init__(self, program: TaylorProgram, linear: str = "auto", mode: str = "auto", batch: bool = True,
                 optimize: bool = True):
        self.prog = program
        self.optimize = bool(optimize)
        dae = program.dae
        self.dae = dae
        self.p = program.p
        d = program.d
        self.KX = program.KX
        # Flat state layout: (variable, order l < d_j, element).
        rows, cols, owners = [], [], []
        self.state_slices = {}
        pos = 0
        for v in dae.variables:
            dv = d[v.offset : v.offset + v.size]
            start = pos
            for l in range(int(dv.max()) if v.size else 0):
                for e in range(v.size):
                    if l < dv[e]:
                        rows.append(l)
                        cols.append(e)
                        owners.append(v.name)
                        pos += 1
            self.state_slices[v.name] = (start, pos)
        self.n_state = pos
        self.state_rows = {v.name: np.array([r for r, o in zip(rows, owners) if o == v.name], dtype=int) for v in dae.variables}
        self.state_cols = {v.name: np.array([c for c, o in zip(cols, owners) if o == v.name], dtype=int) for v in dae.variables}
        # (variable, element, derivative order) -> index in the state z.
        self.state_position = {}
        for v in dae.variables:
            a, _ = self.state_slices[v.name]
            for k, (r, c) in enumerate(zip(self.state_rows[v.name], self.state_cols[v.name])):
                self.state_position[(v.name, int(c), int(r))] = a + k
        self.state_labels = []
        for v in dae.variables:
            names = v.component_names()
            for r, c in zip(self.state_rows[v.name], self.state_cols[v.name]):
                self.state_labels.append(names[c] + "'" * int(r))
        # Hidden constraints: coefficient r < c_i of equation i.
        self.hidden_index = []  # (block, order r, element in block)
        for b, ((first, size), o) in enumerate(zip(dae.equation_blocks, program.out_ids)):
            for e in range(size):
                for r in range(int(program.c[first + e])):
                    self.hidden_index.append((b, r, e))
        self.n_hidden = len(self.hidden_index)
        eq_names = dae.equation_names()
        self.hidden_labels = []
        for b, r, e in self.hidden_index:
            first = dae.equation_blocks[b][0]
            self.hidden_labels.append(eq_names[first + e] + "'" * r)
        self.c = jnp.asarray(program.c, dtype=jnp.float64)
        self.d = jnp.asarray(d, dtype=jnp.float64)
        self.max_c = int(program.c.max())
        self.max_d = int(d.max())
        self.out_orders = {v.name: max(1, int(d[v.offset : v.offset + v.size].max())) for v in dae.variables}
        self._kkt: KKTBlocks | None = None  # the DAE's KKTBlocks on the "kkt" path
        self.linear = self._choose_linear(linear)
        # Both stage solvers use the exact system Jacobian, so an affine
        # stage 0 takes one Newton step (see _newton).
        self.stage0_affine = stage0_is_affine(program)
        self.mode = choose_mode(program, mode, batch)
        self._unrolled = UnrolledProgram(program) if self.mode == "unrolled" else None
        self._compact = None
        if self.mode == "compact":
            try:
                self._compact = CompactProgram(program)
            except CompactUnsupportedError:
                if mode == "compact":
                    raise
                self.mode = "looped"
            else:
                # The hidden constraints (and the projection's Jacobian, by
                # forward mode through them) from the straight-line program:
                # they need only the orders below the offsets, a small
                # program, and forward mode through the compact table's
                # in-place updates would batch them as scatters.
                self._unrolled_hidden = UnrolledProgram(program)
        if self.linear == "kkt":
            # Found (and checked) eagerly: it cannot be computed inside a trace.
            self._mass_structure = self._kkt.mass_structure
        else:
            self._kkt = self._mass_structure = None
        events = getattr(dae, "events", ())
        self.events = EventStepper(self, events, getattr(dae, "max_events", DEFAULT_MAX_EVENTS)) if events else None
        self._run_jit = jax.jit(self._run_whole, compiler_options=self.compiler_options())
        self._run_batch_jit = jax.jit(self._run_batch, static_argnames=("slots",),
                                      compiler_options=self.batch_compiler_options())
        self._run_tangents_jit = jax.jit(self._run_tangents, static_argnames=("slots",),
                                         compiler_options=self.compiler_options())

    def compiler_options(self, options: dict | None = None) -> dict | None:
        """XLA options for this integrator's runs: ``options`` plus :data:`QUICK_COMPILE` unless it optimises.

        Returns:
            The dict for ``jax.jit(..., compiler_options=...)``, or None when empty.
        """
        merged = dict(options or {}) | ({} if self.optimize else QUICK_COMPILE)
        return merged or None

    def batch_compiler_options(self) -> dict | None:
        """XLA options of :meth:`run_batch`'s program.

        Returns:
            :meth:`compiler_options` of :data:`BATCH_CPU_OPTIONS` on a CPU,
            with :data:`WHOLE_ROUND_CPU_OPTIONS` where the round is compiled
            as one function (:meth:`round_compiles_whole`); on an
            accelerator, :meth:`compiler_options` alone (None when empty).
        """
        if jax.default_backend() != "cpu":
            return self.compiler_options()
        whole = WHOLE_ROUND_CPU_OPTIONS if self.round_compiles_whole() else {}
        return self.compiler_options(BATCH_CPU_OPTIONS | whole)

    def _choose_linear(self, linear: str) -> str:
        choices = ("auto", "dense", "kkt")
        if linear not in choices:
            raise InputError(f"linear must be one of {', '.join(choices)}; got {linear!r}")
        if linear == "dense":
            return "dense"
        why = self._kkt_mismatch()
        if linear == "kkt":
            if why:
                raise InputError(f"linear='kkt' needs a Lagrangian DAE with the system Jacobian "
                                 f"[[M, Gᵀ], [G, 0]]: {why}; use linear='dense'")
            return "kkt"
        if why or self.dae.n < KKT_MIN_SIZE or not self._kkt.mass_structure.block_diagonal:
            return "dense"
        return "kkt"

    def _kkt_mismatch(self) -> str:
        """Why the structured KKT solve does not apply ('' when it does).

        Sets ``self._kkt`` to the DAE's :class:`~solver.numerics.kkt.KKTBlocks` when
        it offers them.
        """
        offer = getattr(self.dae, "kkt_blocks", None)
        kkt = offer() if callable(offer) else None
        if not isinstance(kkt, KKTBlocks):
            return "this DAE was not built by solver.lagrangian"
        self._kkt = kkt
        c, d, nq = self.prog.c, self.prog.d, kkt.n_q
        # The EL rows (c = 0) pair with q'' (d = 2), the constraints (c = 2)
        # with λ (d = 0); anything else (e.g. a coordinate without inertia)
        # has another system Jacobian.
        if not (np.all(c[:nq] == 0) and np.all(d[:nq] == 2) and np.all(c[nq:] == 2) and np.all(d[nq:] == 0)):
            return "its offsets are not c = 0, d = 2 on the coordinates and c = 2, d = 0 on the multipliers"
        return ""

    # ------------------------------------------------------------- layout
    def X_from_state(self, z):
        """Variable coefficient arrays with the state filled in, the rest zero."""
        X = {}
        for v in self.dae.variables:
            a, _ = self.state_slices[v.name]
            rows, cols = self.state_rows[v.name], self.state_cols[v.name]
            # Row by row from static pieces, not a scatter (see take_static):
            # runs of consecutive columns are slices of z.
            Xrows = []
            for l in range(self.KX):
                pick = np.flatnonzero(rows == l)  # in column order: the layout's (l, element) loop
                if pick.size == 0 and l > rows.max(initial=-1):
                    Xrows.append(jnp.zeros((self.KX - l, v.size), z.dtype))
                    break
                pieces, at, start = [], 0, 0
                for j in range(1, pick.size + 1):
                    if j < pick.size and cols[pick[j]] == cols[pick[j - 1]] + 1 and pick[j] == pick[j - 1] + 1:
                        continue
                    c0, c1 = int(cols[pick[start]]), int(cols[pick[j - 1]]) + 1
                    if c0 > at:
                        pieces.append(jnp.zeros(c0 - at, z.dtype))
                    pieces.append(z[a + int(pick[start]):a + int(pick[j - 1]) + 1])
                    at, start = c1, j
                if at < v.size:
                    pieces.append(jnp.zeros(v.size - at, z.dtype))
                Xrows.append(jnp.concatenate(pieces)[None])
            X[v.name] = jnp.concatenate(Xrows).reshape((self.KX,) + v.shape)
        return X

    def state_from_X(self, X):
        """The flat state from coefficient arrays."""
        parts = []
        for v in self.dae.variables:
            Xf = X[v.name].reshape(self.KX, v.size)
            parts.append(take_static(Xf, self.state_rows[v.name], self.state_cols[v.name]))
        return jnp.concatenate(parts) if parts else jnp.zeros(0)

    def _d_of(self, v):
        return jnp.asarray(self.prog.d[v.offset : v.offset + v.size])

    def set_stage(self, X, k, u):
        """Write stage k's unknowns ``X[j, k + d_j]`` (k ≥ 0) from flat ``u``.

        One row update per distinct offset of a variable (a scatter would
        make XLA copy the array under vmap; see ``taylor.write_row``).
        """
        out = {}
        for v in self.dae.variables:
            Xf = X[v.name].reshape(self.KX, v.size)
            dv = self.prog.d[v.offset : v.offset + v.size]
            uv = u[v.offset : v.offset + v.size]
            for dd in np.unique(dv):
                if np.all(dv == dd):
                    row = uv
                else:
                    row = jnp.where(jnp.asarray(dv == dd), uv, Xf[jnp.clip(k + int(dd), 0, self.KX - 1)])
                Xf = write_row(Xf, k + int(dd), row)
            out[v.name] = Xf.reshape((self.KX,) + v.shape)
        return out

    def get_stage(self, X, k):
        """Stage k's unknowns as a flat vector (0 where k + d_j < 0)."""
        parts = []
        for v in self.dae.variables:
            Xf = X[v.name].reshape(self.KX, v.size)
            rows = k + self._d_of(v)
            parts.append(jnp.where(rows >= 0, Xf[jnp.clip(rows, 0, self.KX - 1), np.arange(v.size)], 0.0))
        return jnp.concatenate(parts)

    # ------------------------------------------------------------- stages
    def _negative_stages(self, X, t0, consts):
        prog = self.prog
        state = prog.init_coeffs()
        if prog.k_start < 0:
            state = lax.fori_loop(prog.k_start, 0, lambda k, s: prog.stage(s, X, k, t0, consts), state)
        return state

    def hidden_constraints(self, z, t0, params):
        """All constraints on the state: coefficients r < c_i of every f_i.

        Args:
            z: flat state.
            t0: time.
            params: parameter dict.

        Returns:
            flat array (length ``n_hidden``), zero at a consistent point.
        """
        consts = self.prog.constants(params)
        return self._hidden(z, t0, consts)

    def _hidden(self, z, t0, consts):
        if self.n_hidden == 0:
            return jnp.zeros(0, dtype=z.dtype)
        if self._unrolled is not None:
            return self._unrolled.hidden(self, z, t0, consts)
        if self._compact is not None:
            return self._unrolled_hidden.hidden(self, z, t0, consts)
        X = self.X_from_state(z)
        state = self._negative_stages(X, t0, consts)
        vals = []
        for b, r, e in self.hidden_index:
            o = self.prog.out_ids[b]
            if o in self.prog.series:
                vals.append(state["nodes"][o].reshape(self.prog.K, -1)[r, e])
            else:
                vals.append(jnp.ravel(jnp.asarray(consts[o]))[e] if r == 0 else jnp.zeros(()))
        return jnp.stack(vals)

    def series(self, z, u_guess, t0, consts, newton_iters: int = 8, fence_anchor=None):
        """Taylor coefficients of the solution through the consistent state z.

        Args:
            z: flat state (consistent).
            u_guess: guess of the leading derivatives ``X[j, d_j]`` (flat, n).
            t0: expansion time.
            consts: from ``program.constants(params)``.
            newton_iters: most Newton iterations on stage 0.
            fence_anchor: the run-time scalar of the unrolled engine's
                fences (:func:`solver.taylor.tape.fence`); None: ``t0``.  Under
                ``vmap`` it should be a value shared by the whole batch: a
                per-element anchor makes every fence a loop with a batched
                condition, which JAX writes as a select of every value.

        Returns:
            (X, u, status, J): coefficient arrays up to order ``p + d_j``, the
            leading derivatives, SUCCESS / SINGULAR_JACOBIAN / NONFINITE, and
            the scaled system Jacobian of stage 0 (dense path; None on the
            structured KKT path, which never forms it).
        """
        g0, X, start = self._stage0_residual(z, t0, consts)
        u, solve, singular, J = self._stage0(g0, X, u_guess, t0, consts, newton_iters)
        if self._unrolled is not None:
            X = self._stages_unrolled(start, u, solve, t0, consts, t0 if fence_anchor is None else fence_anchor)
        elif self._compact is not None:
            X = self._stages_compact(start, u, solve)
        else:
            X = self._stages_looped(start, u, solve, t0, consts)
        return X, u, self._series_status(X, u, singular), J

    def stage0_system(self, z, u_guess, t0, consts, newton_iters: int = 8):
        """Stage 0 alone: the leading derivatives at z and the system Jacobian there.

        The Newton iteration of :meth:`series` without the later stages: a
        diagnosis (``mechsweep check``) needs only this, and the stages of a
        large model cost most of the compile (the car at order 2: 30 s for
        the series, 9 s for stage 0).

        Args:
            z: flat consistent state.
            u_guess: guess of the leading derivatives (flat, n).
            t0: time of the point.
            consts: from ``program.constants(params)``.
            newton_iters: most Newton iterations.

        Returns:
            (J, u, status): the scaled system Jacobian of the last Newton
            iteration (``A[i, j] = J_ij d_j!/c_i!``; None on the structured
            KKT path, which never forms it), the leading derivatives, and
            SUCCESS / SINGULAR_JACOBIAN / NONFINITE for them.
        """
        g0, X, _ = self._stage0_residual(z, t0, consts)
        u, _, singular, J = self._stage0(g0, X, u_guess, t0, consts, newton_iters)
        return J, u, self._series_status({}, u, singular)

    def _stage0_residual(self, z, t0, consts):
        """(g0, X, start): stage 0's residual as a function of the leading derivatives u,
        the coefficient arrays at z (stage 0 unset), and what the engine's
        later stages (``_stages_*``) go on from."""
        prog = self.prog
        if self._unrolled is not None:
            up = self._unrolled
            XL = up.lists_from_state(self, z)
            nodes, aux = up.empty()
            for k in range(prog.k_start, 0):
                up.stage(nodes, aux, XL, k, t0, consts)
            const_res = prog.constant_residual(consts)

            def g0(u):
                XL0 = up.set_stage(XL, 0, u)
                n0, a0 = up.copy(nodes, aux)
                up.stage(n0, a0, XL0, 0, t0, consts)
                return up.residual(n0, 0) + const_res

            return g0, up.arrays(XL), (XL, nodes, aux)
        if self._compact is not None:
            cp = self._compact
            Xf = cp.xf_from_state(self, z)
            C = cp.negative_stages(cp.init(t0, consts), Xf)
            const_res = prog.constant_residual(consts)

            def g0(u):
                return cp.stage0_residual(C, Xf, u) + const_res

            return g0, cp.arrays(Xf), (Xf, C)
        X = self.X_from_state(z)
        state = self._negative_stages(X, t0, consts)
        const_res = prog.constant_residual(consts)

        def g0(u):
            X0 = self.set_stage(X, 0, u)
            s0 = prog.stage(state, X0, 0, t0, consts)
            return prog.residual(s0, 0) + const_res

        return g0, X, (X, state)

    def _stages_looped(self, start, u, solve, t0, consts):
        """Stages 1..p of the looped engine (a ``fori_loop`` over the order)."""
        prog = self.prog
        X, state = start
        X = self.set_stage(X, 0, u)
        state = prog.stage(state, X, 0, t0, consts)
        c = prog.c
        d = prog.d

        def ratio(k, offs):
            # Π_{s=1}^{off} (k+s)/s = (k+off)! / (k! off!)
            out = jnp.ones(offs.shape)
            for s in range(1, int(offs.max()) + 1 if offs.size else 1):
                out = out * jnp.where(s <= offs, (k + s) / s, 1.0)
            return out

        def stage_k(k, carry):
            X, state = carry
            s1 = prog.stage(state, X, k, t0, consts)
            r = prog.residual(s1, k)
            y = solve(ratio(k, c) * r)
            xk = -y / ratio(k, d)
            X = self.set_stage(X, k, xk)
            return X, prog.stage(s1, X, k, t0, consts)

        X, state = lax.fori_loop(1, self.p + 1, stage_k, (X, state))
        return X

    def _stages_unrolled(self, start, u, solve, t0, consts, anchor):
        """Stages 1..p as straight-line code (:mod:`solver.taylor.tape`), fenced on the run-time scalar ``anchor``."""
        up, prog = self._unrolled, self.prog
        XL, nodes, aux = start
        XL = up.set_stage(XL, 0, u)
        up.stage(nodes, aux, XL, 0, t0, consts)
        fenced = {}
        up.fence_new(nodes, aux, XL, fenced, anchor)
        c, d = prog.c, prog.d
        for k in range(1, self.p + 1):
            # Residual pass (stage k's unknowns at zero), solve, commit pass.
            n1, a1 = up.copy(nodes, aux)
            up.stage(n1, a1, XL, k, t0, consts)
            r = up.residual(n1, k)
            rc = np.array([math.comb(k + int(o), int(o)) for o in c], dtype=float)
            rd = np.array([math.comb(k + int(o), int(o)) for o in d], dtype=float)
            y = solve(jnp.asarray(rc) * r)
            XL_new = up.set_stage(XL, k, -y / jnp.asarray(rd))
            nodes, aux = up.commit(n1, a1, XL, XL_new, k, consts)
            XL = XL_new
            up.fence_new(nodes, aux, XL, fenced, anchor)
        return up.arrays(XL)

    def _stages_compact(self, start, u, solve):
        """Stages 1..p on the grouped scalar tape (:mod:`solver.taylor.compact`)."""
        cp = self._compact
        Xf, C = start
        Xf = cp.positive_stages(C, cp.set_stage(Xf, 0, u), solve.args[0], solve.func)
        return cp.arrays(Xf)

    def _stage0(self, g0, X, u_guess, t0, consts, newton_iters):
        """Newton on stage 0 by the chosen stage solver: (u, solve, singular, J or None)."""
        if self.linear == "kkt":
            u, solve, singular = self._stage0_kkt(g0, X, u_guess, t0, consts, newton_iters)
            return u, solve, singular, None
        return self._stage0_dense(g0, X, u_guess, t0, consts, newton_iters)

    @staticmethod
    def _series_status(X, u, singular):
        """SUCCESS, SINGULAR_JACOBIAN or NONFINITE for a computed series (X may be empty: stage 0 alone)."""
        # u is checked after X, as before stage 0 had a caller of its own:
        # the step programs (and their compile-cache keys) stay as they were.
        finite_u = lambda: jnp.all(jnp.isfinite(u))
        if X:
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in X.values()])) & finite_u()
        else:
            finite = finite_u()
        status = jnp.where(singular, st.SINGULAR_JACOBIAN, jnp.where(finite, st.SUCCESS, st.NONFINITE))
        return status.astype(jnp.int8)

    def _newton(self, step, u_guess, aux0, newton_iters):
        """Newton on stage 0 from ``u_guess``.

        ``step(u) -> (du, aux)`` evaluates the stage-0 residual at u and
        solves with the iteration matrix; the aux of the last iteration is
        returned with u (the dense path keeps its Jacobian there: the last
        correction was negligible, so it is the system Jacobian at the
        converged point).  When stage 0 is affine in u
        (:func:`solver.taylor.degree.stage0_is_affine`) and the matrix is its exact
        Jacobian, one step is the solution: no loop, no confirming pass
        (1,000 pendulums at 32 slots: 39.5 -> 34 ms).
        """
        if self.stage0_affine:
            du, aux = step(u_guess)
            return jnp.where(jnp.all(jnp.isfinite(du)), u_guess - du, u_guess), aux

        def cond(c):
            u, _, it, done = c
            return (~done) & (it < newton_iters)

        def body(c):
            u, _, it, _ = c
            du, aux = step(u)
            ok = jnp.all(jnp.isfinite(du))
            u = jnp.where(ok, u - du, u)
            small = jnp.max(jnp.abs(du)) <= 1e-13 * (1.0 + jnp.max(jnp.abs(u)))
            return u, aux, it + 1, small | ~ok

        u, aux, _, _ = lax.while_loop(cond, body, (u_guess, aux0, 0, False))
        return u, aux

    def _stage0_dense(self, g0, X, u_guess, t0, consts, newton_iters):
        """Stage 0 with the dense system Jacobian: (u, solve, singular, J)."""
        # The system Jacobian from the residual at the point (a small
        # program), never by differentiating the Taylor stages.
        def residual_and_jacobian(u):
            return g0(u), self.stage0_jacobian(X, u, t0, consts)

        def step(u):
            r, J = residual_and_jacobian(u)
            fact = linalg.lu_factor(J)
            return linalg.lu_solve(fact, r), (J, fact)

        n = u_guess.shape[0]
        zeros = jnp.zeros((n, n), u_guess.dtype)
        no_fact = linalg.LU(zeros, jnp.zeros(n, jnp.int32), jnp.asarray(True))
        # The last iteration's factors serve the stages: the same matrix as
        # factoring its J again after the loop, one factorisation less a step.
        u, (J, fact) = self._newton(step, u_guess, (zeros, no_fact), newton_iters)
        # Every stage solves with this one matrix, so it is inverted once and
        # each stage is a product with the inverse: one fused kernel, where a
        # triangular solve was a kernel per unknown (row swaps, substitutions)
        # or a LAPACK call.  The pendulum's run went from 1.26 to 0.92 ms.
        # A partial (not a lambda): the compact engine's batched stage loop
        # takes the matrix and the product apart (solve.func, solve.args).
        inverse = linalg.lu_solve(fact, linalg.identity(n))
        return u, partial(linalg.apply_inverse, inverse), fact.singular, J

    def _stage0_kkt(self, g0, X, u_guess, t0, consts, newton_iters):
        """Stage 0 of a Lagrangian DAE with ``[[2M, Gᵀ], [G, 0]]``: (u, solve, singular).

        The unknowns of stage 0 are q'' (scaled by 2!, as X[q, 2] = q''/2)
        and λ; M and G depend on the state only, so one factorisation serves
        Newton and every later stage.
        """
        kkt = self._kkt
        p = {name: consts[self.prog.param_ids[name]] for name in self.dae.param_names}
        q = {name: X[name][0] for name in kkt.coords}
        qd = {name: X[name][1] for name in kkt.coords}
        blocks = [(idx, 2.0 * B) for idx, B in kkt.mass_blocks(t0, q, qd, p)]
        fact = kkt_factor(blocks, kkt.constraint_jacobian(t0, q, p))
        solve = partial(kkt_solve, fact)
        u, _ = self._newton(lambda uu: (solve(g0(uu)), ()), u_guess, (), newton_iters)
        return u, solve, fact.singular

    def stage0_jacobian(self, X, u, t0, consts):
        """A_0 = ∂F_i[c_i]/∂X[j, d_j] = J_ij d_j!/c_i!, J the system Jacobian.

        J_ij = ∂f_i/∂x_j^(d_j - c_i) (Pryce) is ``jacfwd`` of the residual at
        the point, with every ``ddt`` expanded by forward mode along the
        state (:func:`solver.taylor.pointwise.residual_at`).
        """
        dae, prog = self.dae, self.prog
        levels = levels_from_coefficients(prog, self.set_stage(X, 0, u))
        jac = jacfwd(lambda lv: residual_at(prog, t0, consts, lv))(levels)
        n = dae.n
        # Column blocks joined, not scattered into zeros: XLA expands a
        # scatter into a loop whose index arithmetic it hoists out of ours.
        blocks = []
        for var in sorted(dae.variables, key=lambda v: v.offset):
            cols = np.arange(var.offset, var.offset + var.size)
            block = jnp.zeros((n, var.size))
            for l, Jl in enumerate(jac[var.name]):
                mask = (prog.d[None, cols] - prog.c[:, None]) == l
                if mask.any():
                    block = block + jnp.where(mask, Jl.reshape(n, var.size), 0.0)
            blocks.append(block)
        A = jnp.concatenate(blocks, axis=1) if blocks else jnp.zeros((n, n))
        cf = np.array([math.factorial(int(c)) for c in prog.c], dtype=float)
        df = np.array([math.factorial(int(d)) for d in prog.d], dtype=float)
        return A * (df[None, :] / cf[:, None])

    # ------------------------------------------------------------- polynomials
    # Coefficients per order (all variables) up to which _shift uses Horner's rule.
    HORNER_MAX_SIZE = 10_000

    def _shift(self, X, h, orders):
        """Normalised derivatives at t+h: out[l] = Σ_r C(r,l) X[r] h^(r-l), l < orders.

        Two forms, measured against each other (interleaved in one process):

        * Horner's rule over every variable at once, for models up to
          :attr:`HORNER_MAX_SIZE` coefficients per order: a batch of 1,000
          pendulums took 169 ms against 205 ms (powers as products) and
          285 ms (a power per entry); a single pendulum run, compiled as one
          function, 0.21 against 0.26 ms.
        * Powers ``h**r`` and a weighted sum per derivative and variable
          for larger models, whose run is memory traffic: the 90x90 cloth's
          step took 26 ms against 33 ms by Horner's rule, which first
          copies every variable's coefficients into one array.
        """
        K = self.KX
        names = list(orders)
        if sum(int(np.prod(X[n].shape[1:], dtype=int)) for n in names) > self.HORNER_MAX_SIZE:
            hp = h ** jnp.arange(K, dtype=jnp.result_type(float))
            out = {}
            for name, L in orders.items():
                A = X[name]
                rows = []
                for l in range(L):
                    binom = np.array([math.comb(l + j, l) for j in range(K - l)], dtype=float)
                    w = (jnp.asarray(binom) * hp[: K - l]).reshape((K - l,) + (1,) * (A.ndim - 1))
                    rows.append(order_sum(w * A[l:]))
                out[name] = jnp.stack(rows)
            return out
        A = jnp.concatenate([X[n].reshape(K, -1) for n in names], axis=1)
        # lax's primitives trace in half the time of jnp's operators and
        # indexing (the pendulum's shift: 30-40 -> 14-17 ms a call), same numbers.
        a_rows = [lax.index_in_dim(A, r, keepdims=False) for r in range(K)]
        rows = []
        for l in range(max(orders.values())):
            y = _times(float(math.comb(K - 1, l)), a_rows[K - 1])
            for r in range(K - 2, l - 1, -1):
                y = _plus(_times(y, h), _times(float(math.comb(r, l)), a_rows[r]))
            rows.append(y)
        Y = jnp.stack(rows)
        out, a = {}, 0
        for n in names:
            size = int(np.prod(X[n].shape[1:], dtype=int))
            out[n] = Y[: orders[n], a:a + size].reshape((orders[n],) + X[n].shape[1:])
            a += size
        return out

    def advance_state(self, X, h):
        """State and leading-derivative guess at t + h from the Taylor polynomial."""
        orders = {v.name: int(self.prog.var_d(v.name).max()) + 1 for v in self.dae.variables}
        Y = self._shift(X, h, orders)
        z_parts, u_parts = [], []
        for v in self.dae.variables:
            Yf = Y[v.name].reshape(Y[v.name].shape[0], v.size)
            z_parts.append(take_static(Yf, self.state_rows[v.name], self.state_cols[v.name]))
            u_parts.append(take_static(Yf, self.prog.d[v.offset : v.offset + v.size], np.arange(v.size)))
        return jnp.concatenate(z_parts), jnp.concatenate(u_parts)

    def dense(self, X, s):
        """Values and derivatives ``x^(l)(t_n + s)`` for l < max(d, 1), per variable."""
        Y = self._shift(X, s, self.out_orders)
        out = {}
        for name, L in self.out_orders.items():
            fact = jnp.asarray([math.factorial(l) for l in range(L)], dtype=jnp.float64)
            out[name] = Y[name] * fact.reshape((L,) + (1,) * (Y[name].ndim - 1))
        return out

    def step_size(self, X, tol):
        """Jorba–Zou step from the last two coefficients (mixed abs/rel tol)."""
        p = self.p

        def norm_at(k):
            return jnp.max(jnp.stack([jnp.max(jnp.abs(a[k])) for a in X.values()]))

        scale = jnp.maximum(1.0, norm_at(0))
        tk = tol * scale
        hs = []
        for k in (p - 1, p):
            nk = norm_at(k)
            # exp(log(x) / k), not x ** (1 / k): XLA:CPU calls libm's pow one
            # element at a time (1,000 pendulums at 32 slots: 40.1-42.8 -> 39.1-39.8 ms).
            hs.append(jnp.where(nk > 0, jnp.exp(jnp.log(tk / jnp.where(nk > 0, nk, 1.0)) / k), jnp.inf))
        rho = math.exp(-0.7 / (p - 1))
        return rho * jnp.minimum(hs[0], hs[1])

    # ------------------------------------------------------------- projection
    def project(self, z, t, consts, free=None, iters: int = 2):
        """Gauss–Newton minimum-norm projection onto the hidden constraints.

        The constraint Jacobian G is formed and the normal matrix G Gᵀ
        factored once, at z; later iterations reuse them (a chord
        iteration).  After a step z is within about the tolerance of the
        manifold, so the frozen G costs nothing in accuracy, while forming
        G by forward mode through the Taylor stages was a third of a step.

        Args:
            z: flat state.
            t: time.
            consts: program constants.
            free: optional bool mask of entries allowed to move (others fixed).
            iters: iterations (corrections); at least 1.

        Returns:
            (z_projected, max |constraint| before the last correction) — an
            upper bound of the final residual.
        """
        if self.n_hidden == 0:
            return z, jnp.zeros((), dtype=z.dtype)
        g = lambda zz: self._hidden(zz, t, consts)
        mask = jnp.ones(z.shape) if free is None else jnp.asarray(free, dtype=z.dtype)
        G, r = jacfwd(lambda y: (g(y), g(y)), has_aux=True)(z)
        G = G * mask[None, :]
        fact = linalg.min_norm_factor(G)
        z = z + linalg.min_norm_step(fact, G, r)
        res = jnp.max(jnp.abs(r))
        for _ in range(iters - 1):
            r = g(z)
            z = z + linalg.min_norm_step(fact, G, r)
            res = jnp.max(jnp.abs(r))
        return z, res

    # ------------------------------------------------------------- the loop
    @one_at_a_time
    def run(self, params, z0, u0, t0, t1, t_eval, tol, max_steps=100_000, h_max=None, fixed_step=None):
        """Integrate from a consistent point (jit-compiled; vmap-safe).

        Args:
            params: parameter dict (arrays; may be batched under vmap).
            z0: consistent initial state (flat).
            u0: guess of the leading derivatives (flat, n).
            t0, t1: time span (t1 > t0).
            t_eval: sorted output times within [t0, t1].
            tol: tolerance.
            max_steps: step limit.
            h_max: optional largest step.
            fixed_step: optional constant step (no error control; for
                convergence studies).

        Returns:
            dict with ``values`` (name -> (n_out, L, *shape)), ``status``
            (int8), ``steps`` (steps taken, a failed last one included),
            ``t_final``, ``z_final``, ``u_final``.
        """
        h_max = jnp.inf if h_max is None else h_max
        fixed_step = 0.0 if fixed_step is None else fixed_step
        scalars = [_device_number(x) for x in (t0, t1, tol, max_steps, h_max, fixed_step)]
        t0, t1, tol, max_steps, h_max, fixed_step = scalars
        return self._run_jit(params, z0, u0, t0, t1, _device_times(t_eval), tol, max_steps, h_max, fixed_step)

    def default_slots(self, points: int | None = None) -> int:
        """The slot count :meth:`run_batch` takes when none is given.

        On an accelerator, every point at once: its width is what makes it
        fast (workflows/benchmarks/results/solver_gpu_h100.txt: 1,000
        pendulums on an H100 in 0.21 s with 1,000 slots, as ``jax.vmap``;
        0.54 s with 250).

        On a CPU, a round whose step holds no LAPACK call and no contraction
        (every factorisation unrolled, straight-line series: see
        :meth:`_run_batch_rounds`) is compiled as one function; its cost is
        then arithmetic and cache traffic, and a small pool keeps each
        operation's values in cache.  Any other round runs kernel by kernel,
        and a larger pool spreads each kernel's overhead over more problems.
        Measured with ``solve_batch`` (workflows/benchmarks/results/slots.txt,
        three runs of 500 points): pendulum.yaml 90-140 ms at 256 slots,
        65-68 ms at 32; with 128 slots against 256, the slider-crank
        0.68-0.80x and Mechanism0 0.72-0.95x, the double pendulum 0.97-1.10x
        and the four-bar 1.04-1.11x: 128 loses at most a tenth where 256
        loses up to a half.  A sweep's tasks hold 64 points (``Batch``),
        which caps the pool anyway.

        Args:
            points: the number of problems of the batch, where known.

        Returns:
            ``points`` on an accelerator (:data:`DEFAULT_SLOTS` when not
            given); on a CPU :data:`WHOLE_ROUND_SLOTS` or :data:`DEFAULT_SLOTS`.
        """
        if jax.default_backend() != "cpu":
            return max(int(points), 1) if points else DEFAULT_SLOTS
        return WHOLE_ROUND_SLOTS if self.round_compiles_whole() else DEFAULT_SLOTS

    def round_compiles_whole(self) -> bool:
        """Whether XLA:CPU is expected to compile a batch round as one function (see :meth:`default_slots`)."""
        if jax.default_backend() != "cpu" or not xla_setup.loops_compiled_whole():
            return False  # a GPU's pool, or XLA:CPU's hoisting turned off (solver.integrate.xla_setup)
        if self.mode != "unrolled" or self.linear != "dense":
            return False
        if max(self.prog.n, self.n_hidden) > linalg.FACTOR_UNROLL_MAX:
            return False  # a LAPACK factorisation
        # XLA:CPU hands a batched contraction to a library (YNNPACK) kernel.
        return not any(e.prim is lax.dot_general_p for e in self.prog.live)

    @one_at_a_time
    def run_batch(self, params, z0, u0, t0, t1, t_eval, tol, max_steps=100_000, h_max=None, fixed_step=None,
                  slots: int | None = None):
        """Integrate a batch of problems on a pool of vmapped slots (jit-compiled).

        The same results as ``jax.vmap`` of :meth:`run`, faster when the
        problems need different numbers of steps: a vmapped ``while_loop``
        runs every element as long as the slowest one and selects its whole
        carry (outputs included) on every step, whereas here ``slots``
        problems advance together, a slot whose problem finished takes the
        next one, and outputs go straight to their place in the result.

        Args:
            params: parameter dict; every value has the batch axis first.
            z0: (N, n_state) consistent initial states.
            u0: (N, n) guesses of the leading derivatives.
            t0, t1, t_eval, tol, max_steps, h_max, fixed_step: as for
                :meth:`run`, shared by the batch.
            slots: problems advanced together (static); at most N are used.
                None: :meth:`default_slots` (32 or 128 on a CPU, N on an
                accelerator).

        Returns:
            dict as :meth:`run` returns, every entry with the batch axis
            first.

        Raises:
            InputError: ``slots`` < 1, no problems, or a parameter without
                the batch axis.
        """
        n = int(np.shape(z0)[0])
        if n == 0:
            raise InputError("run_batch: no problems (z0 has no rows); give at least one")
        slots = self.default_slots(n) if slots is None else slots
        if int(slots) < 1:
            raise InputError(f"slots must be at least 1; got {slots}")
        for name, value in params.items():
            if np.ndim(value) == 0 or np.shape(value)[0] != n:
                raise InputError(f"run_batch: parameter {name!r} needs the batch axis first (length {n}); "
                                 f"got shape {np.shape(value)}; broadcast it, e.g. np.full({n}, value)")
        h_max = jnp.inf if h_max is None else h_max
        fixed_step = 0.0 if fixed_step is None else fixed_step
        return self._run_batch_jit(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step,
                                   slots=int(slots))

    @one_at_a_time
    def run_tangents(self, params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps=100_000, h_max=None,
                     slots: int | None = None):
        """:meth:`run` (or :meth:`run_batch`) and its derivatives along k directions, by forward mode.

        ``jax.jvp`` of the whole integration, vmapped over the k tangent
        directions: the primal is computed once and every direction rides
        along it through the Taylor stages, the stage-0 Newton and the
        projections.  The step sizes are not differentiated (they are under
        ``stop_gradient``), so the result is the derivative of the computed
        solution at its own step sequence.

        Args:
            params: parameter dict (with the batch axis first when ``slots``
                is given).
            z0, u0: as for :meth:`run` (or :meth:`run_batch`).
            dparams: parameter name -> tangents, shape ``(k,) + params[name].shape``.
            dz0: (k,) + z0.shape tangents of the consistent initial state.
            t0, t1, t_eval, tol, max_steps, h_max: as for :meth:`run`.
            slots: None for one problem (:meth:`run`); else the batch's slot
                count (:meth:`run_batch`).

        Returns:
            (result, tangents): ``result`` as :meth:`run`/:meth:`run_batch`
            return it (with events, also ``event_tangents``: the derivatives
            of the records' ``time``, ``rate`` and ``values``, direction
            first); ``tangents`` the derivatives of its ``values`` (name ->
            (k,) + value shape).

        Raises:
            InputError: ``slots`` < 1.
        """
        if slots is not None and int(slots) < 1:
            raise InputError(f"slots must be at least 1; got {slots}")
        h_max = jnp.inf if h_max is None else h_max
        return self._run_tangents_jit(params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps, h_max,
                                      slots=None if slots is None else int(slots))

    def _run_tangents(self, params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps, h_max, slots):
        if slots is None:
            run = lambda p, z: self._run(p, z, u0, t0, t1, t_eval, tol, max_steps, h_max, 0.0)
        else:
            run = lambda p, z: self._run_batch(p, z, u0, t0, t1, t_eval, tol, max_steps, h_max, 0.0, slots)
        params = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}
        z0 = jnp.asarray(z0, jnp.float64)

        def along(dp, dz):
            res, tan = jax.jvp(run, (params, z0), (dp, dz))
            return res, (tan["values"], tan.get("events"))

        # A batch's mid-size linear algebra as XLA loops, not LAPACK calls. jaxlib
        # 0.10.2's LAPACK kernels split a batch of more than ~200,000 flops over
        # XLA's intra-op pool and block that thread until the pieces are done.
        # Forward mode puts a tangent's solves beside the primal's, independent,
        # and XLA runs them at once on the pool: with as many calls as threads
        # (2 on a 2-core machine) every thread waits for pieces no thread is
        # left to run, and the run hangs for ever (RSCR, 2 directions, 96 or
        # more slots).  The loops cost such a batch about a fifth (RSCR, 64
        # slots: 1.47 -> 1.78 s, the same tangents to 7e-15); jax 0.11 compiles
        # the split out.  A single run's _run sets the flag itself.
        # The primal does not depend on the direction: vmap keeps it unbatched.
        with tangent_seeds(), linalg.native_loops(slots is not None), batched_tangents(slots is not None):
            res, (tangents, events) = jax.vmap(along, out_axes=(None, 0))(
                {k: jnp.asarray(v, jnp.float64) for k, v in dparams.items()}, jnp.asarray(dz0, jnp.float64))
        if events is not None:
            # The derivatives of the event records: times, rates and values (direction first).
            res = {**res, "event_tangents": {k: events[k] for k in ("time", "rate", "values")}}
        return res, tangents

    def _run_batch(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots):
        run = self._run_batch_rounds if jax.default_backend() == "cpu" else self._run_batch_scatter
        return run(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots)

    def _pool(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots) -> "SlotPool":
        """What both slot-pool forms share: the inputs as float arrays, sizes, and the vmappable pieces.

        Returns:
            :class:`SlotPool`.
        """
        dt = jnp.result_type(float)
        t0, t1, tol = (jnp.asarray(a, dt) for a in (t0, t1, tol))
        z0, u0 = jnp.asarray(z0, dt), jnp.asarray(u0, dt)

        def step(p, t, z, u, steps, live, ev):
            return self._step(self.prog.constants(p), t, z, u, steps, t1, tol, max_steps, h_max, fixed_step, live,
                              batched=True, params=p, ev=ev)

        seed = _tangent_seed(z0)
        return SlotPool(t0=t0, t1=t1, t_eval=jnp.asarray(t_eval, dt), z0=z0, u0=_seeded(u0, seed), seed=seed,
                        N=z0.shape[0], n_out=jnp.shape(t_eval)[0], S=min(slots, z0.shape[0]),
                        pick=lambda idx: jax.tree_util.tree_map(lambda a: jnp.asarray(a)[idx], params),
                        step=step, pending=jax.vmap(self._outputs_pending, in_axes=(0, 0, 0, 0, None, None)))

    def _pool_outputs(self, pool, X, good, t, h, i_out, buf, write):
        """Dense output of every slot's due output times after its step of h from t (a loop).

        Args:
            pool: :meth:`_pool`'s :class:`SlotPool`.
            X, good, t, h: the slots' series, step flags, times and steps.
            i_out: each slot's next output row; buf: where outputs go.
            write: ``write(go, rows, values, buf) -> buf`` stores the slots'
                values (``go``: which are due) at their output rows.

        Returns:
            (i_out, buf) after every due output is written.
        """
        pending, t_eval, t1, n_out = pool.pending, pool.t_eval, pool.t1, pool.n_out

        def out_cond(oc):
            return jnp.any(pending(oc[0], good, t, h, t_eval, t1))

        def out_body(oc):
            i, b = oc
            go = pending(i, good, t, h, t_eval, t1)
            ic = jnp.minimum(i, n_out - 1)
            vals = jax.vmap(self.dense)(X, t_eval[ic] - t)
            return i + go.astype(i.dtype), write(go, ic, vals, b)

        return lax.while_loop(out_cond, out_body, (i_out, buf))

    def _pool_results(self, N, t0, z0, u0) -> dict:
        """The per-problem results before any problem has finished."""
        res = {"status": jnp.full(N, -1, jnp.int8), "steps": jnp.zeros(N, jnp.int32),
               "t_final": jnp.full(N, t0), "z_final": z0, "u_final": u0}
        if self.events is not None:
            res["events"] = self.events.empty((N,))
        return res

    def _pool_record(self, res, rows, status, steps, t, z, u, ev) -> dict:
        """``res`` with the slots' results written to their problems' ``rows`` (row N: dropped)."""
        new = {"status": status, "steps": steps, "t_final": t, "z_final": z, "u_final": u}
        if self.events is not None:
            new["status"] = self.events.final_status(status, ev)
            new["events"] = ev
        return jax.tree_util.tree_map(lambda r, n: r.at[rows].set(n, mode="drop"), res, new)

    def _pool_output(self, carry) -> dict:
        """The result dict of a finished pool (as :meth:`run` returns it, batch axis first)."""
        res = dict(carry["res"])
        if "events" in res:
            res["events"] = self.events.unpack(res["events"])
        return {"values": carry["outs"], **res}

    def _empty_events(self, lead):
        return {} if self.events is None else self.events.empty(lead)

    @staticmethod
    def _pool_refill(e, done, next_problem, N):
        """(each slot's problem, its row clipped to the last, the next unassigned problem).

        The k-th finished slot (in slot order) takes problem next + k; a
        slot left idle (problem N) computes on the last problem's row,
        unrecorded.
        """
        new_e = jnp.where(done, next_problem + jnp.cumsum(done) - 1, e)
        new_e = jnp.minimum(new_e, N).astype(e.dtype)
        return new_e, jnp.minimum(new_e, N - 1), next_problem + jnp.sum(done).astype(jnp.int32)

    def _run_batch_rounds(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots):
        """The slot pool in rounds (on a CPU): steps until some slots finish, then those are refilled.

        A round's loop holds no scatter: each slot writes its outputs into a
        buffer of its own, one slot at a time (a dynamic update of one row,
        where a batched index would make a scatter).  XLA:CPU then compiles
        the round as one function (:mod:`solver.integrate.xla_setup`) when the step
        holds no LAPACK call or library (YNNPACK) fusion either, as for
        small models (whose factorisations are unrolled), instead of running
        its kernels on its thread pool: 1,000 pendulums 90 -> 68 ms
        (workflows/benchmarks/results/batch_rounds.txt).  Between rounds
        (kernel by kernel) the finished slots' buffers and results go to
        their problems' rows and the slots take the next problems.  A round
        ends when :data:`_ROUND_FINISHED` of the slots (at least one) have
        finished or none is running.
        """
        pool = self._pool(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots)
        t0, z0, u0, N, n_out, S, pick, step = pool.t0, pool.z0, pool.u0, pool.N, pool.n_out, pool.S, pool.pick, pool.step
        enough = max(1, int(S * _ROUND_FINISHED))
        empty = self._empty_outputs((S,), n_out, pool.seed)

        def write_slots(go, ic, vals, buf):
            # One slot at a time: a dynamic update of one row is a few
            # stores, where a batched index would make a scatter.
            def one(s, b):
                out = {}
                for k, B in b.items():
                    at = (s.astype(jnp.int32), ic[s].astype(jnp.int32)) + (jnp.int32(0),) * (B.ndim - 2)
                    old = lax.dynamic_slice(B, at, (1, 1) + B.shape[2:])
                    new = jnp.where(go[s], vals[k][s][None, None], old)
                    out[k] = lax.dynamic_update_slice(B, new, at)
                return out

            return lax.fori_loop(0, S, one, buf)

        def round_cond(r):
            running = r["active"] & (r["status"] < 0)
            finished = r["active"] & (r["status"] >= 0)
            return jnp.any(running) & (jnp.sum(finished) < enough)

        def round_body(r):
            t = r["t"]
            live = r["active"] & (r["status"] < 0)
            X, h, good, t_new, z, u, status, ev = jax.vmap(step)(r["p"], t, r["z"], r["u"], r["steps"], live,
                                                                 r["ev"])
            good = good & live

            i_out, buf = self._pool_outputs(pool, X, good, t, h, r["i_out"], r["buf"], write_slots)
            keep = lambda new, old: jnp.where(live.reshape(live.shape + (1,) * (new.ndim - 1)), new, old)
            return {**r, "t": keep(t_new, t), "z": keep(z, r["z"]), "u": keep(u, r["u"]),
                    "steps": keep(r["steps"] + 1, r["steps"]), "status": keep(status, r["status"]),
                    "i_out": i_out, "buf": buf, "ev": jax.tree_util.tree_map(keep, ev, r["ev"])}

        def cond(c):
            return step_loop_condition(jnp.any(c["e"] < N), c["next"])

        def body(c):
            e = c["e"]
            active = e < N
            r = lax.while_loop(round_cond, round_body, {
                "p": pick(jnp.minimum(e, N - 1)), "active": active, "t": c["t"], "z": c["z"], "u": c["u"],
                "steps": c["steps"], "status": c["status"], "i_out": c["i_out"], "buf": c["buf"], "ev": c["ev"]})
            done = active & (r["status"] >= 0)
            rows = jnp.where(done, e, N)  # out of range: dropped
            outs = {k: c["outs"][k].at[rows].set(r["buf"][k], mode="drop") for k in c["outs"]}
            res = self._pool_record(c["res"], rows, r["status"], r["steps"], r["t"], r["z"], r["u"], r["ev"])
            new_e, nc, next_problem = self._pool_refill(e, done, c["next"], N)
            fresh = lambda new, old: jnp.where(done.reshape(done.shape + (1,) * (old.ndim - 1)), new, old)
            return {"e": new_e, "t": fresh(t0, r["t"]), "z": fresh(z0[nc], r["z"]), "u": fresh(u0[nc], r["u"]),
                    "steps": fresh(0, r["steps"]), "status": fresh(jnp.int8(-1), r["status"]),
                    "i_out": fresh(0, r["i_out"]), "buf": {k: fresh(empty[k], r["buf"][k]) for k in empty},
                    "ev": jax.tree_util.tree_map(fresh, empty_ev, r["ev"]),
                    "next": next_problem, "outs": outs, "res": res}

        empty_ev = self._empty_events((S,))
        carry = {"e": jnp.arange(S, dtype=jnp.int32), "t": jnp.full(S, t0), "z": z0[:S], "u": u0[:S],
                 "steps": jnp.zeros(S, jnp.int32), "status": jnp.full(S, -1, jnp.int8),
                 "i_out": jnp.zeros(S, jnp.int32), "buf": empty, "ev": empty_ev, "next": jnp.int32(S),
                 "outs": self._empty_outputs((N,), n_out, pool.seed),
                 "res": self._pool_results(N, t0, z0, u0)}
        carry = lax.while_loop(cond, body, carry)
        return self._pool_output(carry)

    def _run_batch_scatter(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots):
        """The slot pool with a refill after every step, outputs scattered to their rows (GPU)."""
        pool = self._pool(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots)
        t0, z0, u0, N, n_out, S, pick, step = pool.t0, pool.z0, pool.u0, pool.N, pool.n_out, pool.S, pool.pick, pool.step

        def cond(c):
            return step_loop_condition(jnp.any(c["e"] < N), c["next"])

        def body(c):
            e, t = c["e"], c["t"]
            active = e < N  # an idle slot (e == N) computes on its stale state, unused
            ec = jnp.minimum(e, N - 1)
            X, h, good, t_new, z, u, status, ev = jax.vmap(step)(pick(ec), t, c["z"], c["u"], c["steps"], active,
                                                                 c["ev"])
            good = good & active

            def scatter(go, ic, vals, outs):
                rows = jnp.where(go, e, N)  # out of range: dropped
                return {k: outs[k].at[rows, ic].set(vals[k], mode="drop") for k in outs}

            i_out, outs = self._pool_outputs(pool, X, good, t, h, c["i_out"], c["outs"], scatter)
            steps = c["steps"] + 1
            done = active & (status >= 0)
            rows = jnp.where(done, e, N)
            res = self._pool_record(c["res"], rows, status, steps, t_new, z, u, ev)
            # A slot left idle restarts the last problem too (unrecorded):
            # its stale state may be a failed one.
            new_e, nc, next_problem = self._pool_refill(e, done, c["next"], N)
            fresh = lambda new, old: jnp.where(done.reshape(done.shape + (1,) * (old.ndim - 1)), new, old)
            return {"e": new_e, "t": jnp.where(done, t0, t_new),
                    "z": jnp.where(done[:, None], z0[nc], z), "u": jnp.where(done[:, None], u0[nc], u),
                    "steps": jnp.where(done, 0, steps), "i_out": jnp.where(done, 0, i_out),
                    "ev": jax.tree_util.tree_map(fresh, empty_ev, ev),
                    "next": next_problem, "outs": outs, "res": res}

        empty_ev = self._empty_events((S,))
        carry = {"e": jnp.arange(S, dtype=jnp.int32), "t": jnp.full(S, t0), "z": z0[:S], "u": u0[:S],
                 "steps": jnp.zeros(S, jnp.int32), "i_out": jnp.zeros(S, jnp.int32), "ev": empty_ev,
                 "next": jnp.int32(S), "outs": self._empty_outputs((N,), n_out, pool.seed),
                 "res": self._pool_results(N, t0, z0, u0)}
        carry = lax.while_loop(cond, body, carry)
        return self._pool_output(carry)

    def _step(self, consts, t, z, u, steps, t1, tol, max_steps, h_max, fixed_step, live=True, batched=False,
              params=None, ev=None):
        """One accepted (or failed) step from a consistent state at t.

        ``live`` is False for a batch element that has already finished: a
        vmapped loop still runs its body, and without the flag a failed
        element (non-finite state) would make every step of the whole batch
        try all twelve step halvings.  The series is fenced on ``t1``, which
        a batch's elements share (see :meth:`series`).  ``batched``: the
        step is vmapped over a batch's slots.

        With events (:attr:`events`), ``params`` are the run's parameters
        and ``ev`` its event records; the step is cut at a terminal event or
        an impact (:class:`~solver.integrate.step_events.EventStepper`).

        Returns:
            (X, h, good, t_new, z_new, u_new, status, ev): the Taylor
            coefficients at t and the step h taken (for dense output on
            (t, t + h] when ``good``), the new state, the status after the
            step (-1 while running), and the event records (``{}`` without
            events).
        """
        X, u_new, sstat, _ = self.series(z, u, t, consts, fence_anchor=t1)
        fixed = fixed_step > 0
        # The step sequence is not differentiated: forward-mode sensitivities
        # (solver.integrate.sensitivity) are those of the computed solution at its steps.
        h0 = lax.stop_gradient(jnp.where(fixed, fixed_step, jnp.minimum(self.step_size(X, tol), h_max)))
        h0 = jnp.minimum(h0, t1 - t)
        zscale = jnp.maximum(1.0, jnp.max(jnp.abs(z))) if z.size else 1.0
        t_eps = 1e-13 * jnp.maximum(jnp.abs(t1), 1.0)

        def try_cond(tc):
            h, zn, un, ok, tries = tc
            return live & (~ok) & (tries < 12)

        def try_body(tc):
            h, _, _, _, tries = tc
            h = jnp.where(tries > 0, 0.5 * h, h)
            zp, up = self.advance_state(X, h)
            zq, res = self.project(zp, t + h, consts)
            corr = jnp.max(jnp.abs(zq - zp)) if zq.size else 0.0
            ok = jnp.all(jnp.isfinite(zq)) & (fixed | ((corr <= 100.0 * tol * zscale)
                                                 & (res <= jnp.maximum(1e3 * tol, 1e-10) * zscale)))
            return h, zq, up, ok, tries + 1

        first = (h0, z, u_new, False, 0)
        if batched:
            # Under vmap a loop's every pass selects its whole carry, and
            # rejections are rare: the first try is straight-line code and
            # the loop only halves (1,000 pendulums at 32 slots 34.5-35.0 ->
            # 33.5-34.0 ms; a single run is 5 % slower that way).
            first = try_body(first)
        h, zq, uq, ok, _ = lax.while_loop(try_cond, try_body, first)
        good = (sstat == st.SUCCESS) & ok
        ev_status = jnp.int8(-1)
        if self.events is not None:
            h, zq, uq, ev, ev_status = self.events.on_step(X, t, h, zq, uq, good, params, consts, ev, t1)
        else:
            ev = {}
        t_new = jnp.where(good, t + h, t)
        steps = steps + 1
        status = jnp.where(sstat != st.SUCCESS, sstat,
                 jnp.where(~ok, jnp.int8(st.STEP_TOO_SMALL),
                 jnp.where(ev_status >= 0, ev_status,
                 jnp.where(t_new >= t1 - t_eps, jnp.int8(st.SUCCESS),
                 jnp.where(steps >= max_steps, jnp.int8(st.MAX_STEPS),
                 jnp.where(h < 1e-14 * jnp.maximum(jnp.abs(t), 1.0), jnp.int8(st.STEP_TOO_SMALL), jnp.int8(-1)))))))
        return (X, h, good, t_new, jnp.where(good, zq, z), jnp.where(good, uq, u), status.astype(jnp.int8), ev)

    def _outputs_pending(self, i, good, t, h, t_eval, t1, base=0, n_out=None):
        """Whether output i is due after a step of h from t.

        ``t_eval`` holds the output times from row ``base`` on (a chunk of
        them in :meth:`_run`); ``n_out`` is the number of outputs in all
        (default: every one is in ``t_eval``).
        """
        rows = t_eval.shape[0]
        n_out = rows if n_out is None else n_out
        j = i - base
        t_eps = 1e-13 * jnp.maximum(jnp.abs(t1), 1.0)
        return good & (i < n_out) & (j < rows) & (t_eval[jnp.clip(j, 0, rows - 1)] <= t + h + t_eps)

    def _empty_outputs(self, lead, n_out, seed=None):
        """NaN-filled output buffers, each plus ``seed`` (see :func:`tangent_seeds`) when given."""
        return _seeded({v.name: jnp.full(lead + (n_out, self.out_orders[v.name]) + v.shape, jnp.nan)
                        for v in self.dae.variables}, seed)

    # XLA:CPU's limit on a loop body's buffers for sequential execution (see _run).
    _SMALL_BUFFER_BYTES = 512

    def _output_chunk(self, n_out: int) -> int:
        """Output rows per chunk of :meth:`_run`: the most whose buffers stay small, or all of them.

        All of them when XLA compiles small loops whole (:mod:`solver.integrate.xla_setup`):
        the loop is then one function with no per-kernel runtime to spare,
        and chunks only add kernels around it (pendulum run: 0.26 against
        0.21 ms).
        """
        if xla_setup.loops_compiled_whole():
            return max(n_out, 1)
        row_bytes = max(8 * self.out_orders[v.name] * v.size for v in self.dae.variables)
        rows = self._SMALL_BUFFER_BYTES // row_bytes
        return rows if 2 <= rows < n_out else max(n_out, 1)

    def _run(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step):
        # Mid-size linear algebra as XLA loops, not LAPACK calls, so that
        # XLA:CPU can compile the step loop as one function (linalg.native_loops).
        with linalg.native_loops(xla_setup.loops_compiled_whole()):
            return self._run_traced(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step)

    def _run_whole(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step):
        """:meth:`_run`, for the unrolled engine inside a loop of one trip (:func:`in_one_trip_loop`).

        Only the unrolled engine's (small) models take it: a compact
        model's run is milliseconds, which the thread pool's hand-offs do
        not change, and its wrapped loop compiled about 1.5 s longer
        (Andrews, RSCR; workflows/benchmarks/results/entry_kernels.txt).
        """
        args = (params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step)
        if not xla_setup.loops_compiled_whole() or self.mode != "unrolled":
            return self._run(*args)
        return in_one_trip_loop(self._run, *args)

    def _run_traced(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step):
        consts = self.prog.constants(params)
        dt = jnp.result_type(float)
        t0 = jnp.asarray(t0, dt)
        t1 = jnp.asarray(t1, dt)
        tol = jnp.asarray(tol, dt)
        t_eval = jnp.asarray(t_eval, dt)
        n_out = t_eval.shape[0]
        # XLA:CPU runs a loop body's kernels one after another only when
        # every buffer the body touches is at most 512 bytes; otherwise it
        # spreads them over its thread pool, and for a small model's tiny
        # kernels the hand-offs cost more than the kernels (pendulum: 1.1 ms
        # a run with 32 outputs, 1.9 ms with 33).  So the stepping loop
        # writes its outputs into a chunk of M rows that stays under the
        # limit, and an outer loop moves each full chunk into the result.
        M = self._output_chunk(n_out)
        n_pad = max(-(-n_out // M), 1) * M

        # Padded to whole chunks; a padding time is never pending (i < n_out).
        t_pad = jnp.concatenate([t_eval, jnp.full(n_pad - n_out, jnp.inf, dt)])

        def write_pending(i, buf, times, base, X, t, h, good):
            # Dense output for every requested time in (t, t + h] of this
            # chunk (`times`, rows base..base + M), written only on a good
            # step (the loop does not run otherwise): selecting between old
            # and new buffers afterwards would keep both alive.
            def out_cond(oc):
                return self._outputs_pending(oc[0], good, t, h, times, t1, base, n_out)

            def out_body(oc):
                i, b = oc
                vals = self.dense(X, times[i - base] - t)
                # A dynamic update, not .at[].set: that is a scatter, which
                # keeps XLA:CPU from compiling the loop whole.
                return i + 1, {k: lax.dynamic_update_index_in_dim(b[k], vals[k], i - base, 0) for k in b}

            return lax.while_loop(out_cond, out_body, (i, buf))

        def run_steps(s, times, base, limit, keep_last):
            # Steps until the integration ends or, with a `limit`, rows
            # base..limit of the outputs (s["buf"]) are written; with
            # keep_last the last step's series stays in the carry, for the
            # outputs past `limit`.
            def step_cond(s):
                going = step_loop_condition(s["status"] < 0, s["steps"])
                return going if limit is None else going & (s["i_out"] < limit)

            def step_body(s):
                t = s["t"]
                X, h, good, t_new, z, u, status, ev = self._step(consts, t, s["z"], s["u"], s["steps"], t1, tol,
                                                                 max_steps, h_max, fixed_step, s["status"] < 0,
                                                                 params=params, ev=s["ev"])
                i_out, buf = write_pending(s["i_out"], s["buf"], times, base, X, t, h, good)
                new = {"t": t_new, "z": z, "u": u, "steps": s["steps"] + 1, "status": status,
                       "i_out": i_out, "buf": buf, "ev": ev}
                if keep_last:
                    new["last"] = {"X": X, "t": t, "h": h, "good": good}
                return new

            return lax.while_loop(step_cond, step_body, s)

        seed = _tangent_seed(z0)
        start = {"t": t0, "z": z0, "u": _seeded(u0, seed), "steps": jnp.int32(0), "status": jnp.int8(-1),
                 "i_out": jnp.int32(0), "ev": {} if self.events is None else self.events.empty()}
        outs = self._empty_outputs((), n_pad, seed)
        if n_pad == M:
            # One chunk: every output is written before the loop ends, and
            # a large model's series is not carried from step to step.
            s = run_steps({**start, "buf": outs}, t_pad, 0, None, keep_last=False)
            outs = s["buf"]
        else:
            def chunk_body(c):
                base = (c["i_out"] // M) * M
                buf = {k: lax.dynamic_slice_in_dim(o, base, M) for k, o in c["outs"].items()}
                times = lax.dynamic_slice_in_dim(t_pad, base, M)
                # First the outputs of the last step that did not fit the last chunk.
                last = c["last"]
                i_out, buf = write_pending(c["i_out"], buf, times, base, last["X"], last["t"], last["h"],
                                           last["good"])
                s = {k: c[k] for k in start if k != "i_out"}
                s = run_steps({**s, "i_out": i_out, "buf": buf, "last": last}, times, base, base + M, keep_last=True)
                outs = {k: lax.dynamic_update_slice_in_dim(c["outs"][k], s["buf"][k], base, 0) for k in c["outs"]}
                return {**{k: s[k] for k in start}, "last": s["last"], "outs": outs}

            def chunk_cond(c):
                last = c["last"]
                return (c["status"] < 0) | self._outputs_pending(c["i_out"], last["good"], last["t"], last["h"],
                                                                 t_eval, t1)

            X0 = _seeded({v.name: jnp.zeros((self.KX,) + v.shape, dt) for v in self.dae.variables}, seed)
            s = lax.while_loop(chunk_cond, chunk_body, {**start, "outs": outs, "last": {
                "X": X0, "t": t0, "h": jnp.zeros((), dt), "good": jnp.asarray(False)}})
            outs = s["outs"]
        out = {"values": {k: o[:n_out] for k, o in outs.items()}, "status": s["status"],
               "steps": s["steps"], "t_final": s["t"], "z_final": s["z"], "u_final": s["u"]}
        if self.events is not None:
            out["status"] = self.events.final_status(s["status"], s["ev"])
            out["events"] = self.events.unpack(s["ev"])
        return out
