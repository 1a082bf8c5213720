"""Which Taylor engine, stage solver, slot count and XLA options an integrator takes.

The thresholds that choose between the unrolled and the compact engine
(:func:`choose_mode`, measured on :func:`tape_ops`), the structured KKT solve
(:data:`KKT_MIN_SIZE`), the Taylor order for a tolerance, a batch's slot
counts and the XLA options of the compiled runs.
"""

from __future__ import annotations

import math

from solver.errors import InputError
from solver.taylor.ir import LINEAR
from solver.taylor.program import TaylorProgram

__all__ = ["BATCH_CPU_OPTIONS", "DEFAULT_SLOTS", "KKT_MIN_SIZE", "MODES", "QUICK_COMPILE", "ROUND_FINISHED",
           "UNROLL_MAX_OPS", "UNROLL_MAX_OPS_SINGLE", "WHOLE_ROUND_CPU_OPTIONS", "WHOLE_ROUND_SLOTS",
           "choose_mode", "order_for_tol", "tape_ops"]

# Slot counts of run_batch's pool (see Integrator.default_slots).
WHOLE_ROUND_SLOTS = 32
DEFAULT_SLOTS = 128
# XLA:CPU options of a batch (run_batch), on a CPU only: without Eigen's
# threading of its many small contractions, whose hand-offs cost a batch more
# than they save; a single run is slower without it and keeps the default.
BATCH_CPU_OPTIONS = {"xla_cpu_multi_thread_eigen": False}
# And where XLA:CPU compiles a batch's round as one function (see
# Integrator.round_compiles_whole: every operation vector arithmetic over the
# slots), 512-bit vectors where the machine has them: LLVM prefers 256 bits,
# for code that is not mostly vector arithmetic on CPUs that lower their
# clock for wide vectors.  Whole rounds are faster with them; rounds run
# kernel by kernel gained nothing beyond the noise, and RSCR, the default
# sweep's model, lost: they keep the default
# (workflows/benchmarks/results/vector_width.txt).  The arithmetic is the
# same: so are the results (tests/test_integrate.py).
WHOLE_ROUND_CPU_OPTIONS = {"xla_cpu_prefer_vector_width": 512}
# A batch's slot pool runs in rounds on a CPU (Integrator._run_batch_rounds); a
# round ends when this fraction of its slots (at least one) have finished:
# fewer refills cost idle slots, more cost the refills (1/64 and 1/4 were
# both slower for 1,000 pendulums).
ROUND_FINISHED = 1 / 16

MODES = ("auto", "unrolled", "compact", "looped")

# The XLA options of a run compiled quickly (Integrator(optimize=False)): LLVM
# at -O0, and XLA:CPU's older IR emitters instead of its MLIR fusion emitters.
# XLA's HLO passes read neither, so the kernels are the same and only their
# machine code differs: about half the compile, several times the run
# (workflows/benchmarks/results/optimize.txt).  The older emitters shorten the
# compile at -O0, but not for users' optimised runs: there they made the steps
# slower (workflows/benchmarks/results/quick_compile.txt).
QUICK_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}

# Above this many elementary operations in one step's series (see
# tape_ops) the unrolled program may take too long to trace and compile,
# and auto takes the compact engine instead.
# Measured on the cleaned tapes (workflows/benchmarks/results/modes.txt):
# RSCR (26k operations) compiles unrolled in seconds, a free rigid body in
# Euler angles (40k) made XLA run for minutes.  XLA's cost grows faster than
# the program, so auto stays well below the latter; pass mode="unrolled" to
# try it on a larger model.
UNROLL_MAX_OPS = 30_000
# For one run (solve, simulate) compiling is most of the time, and the
# compact engine compiles as fast or faster from about this size on
# (workflows/benchmarks/results/modes.txt), while its slower steps cost a
# single run milliseconds.  At the pendulum's size the two compile alike and
# the unrolled steps make the fastest small runs.  Batches keep
# UNROLL_MAX_OPS: there the unrolled steps' speed dominates.
UNROLL_MAX_OPS_SINGLE = 3_000


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
    if name in LINEAR or name in ("abs", "max", "min", "clamp", "reduce_max", "reduce_min", "ddt"):
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
