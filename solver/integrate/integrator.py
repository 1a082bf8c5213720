"""The staged Taylor step loop (docs/method.md §3, §5): jit- and vmap-safe.

:class:`Integrator` holds a :class:`~solver.taylor.program.TaylorProgram` and turns it
into pure functions of (parameters, state, time):

* :meth:`Integrator.series` — Taylor coefficients of the solution at a
  consistent point (negative stages with the known state, Newton on stage 0,
  then one LU of the system Jacobian and a back-substitution per order;
  :mod:`solver.integrate.stages`);
* :meth:`Integrator.hidden_constraints` — all constraints on the state
  (hidden ones included), as used by projection and initialisation;
* :meth:`Integrator.project` — Gauss–Newton minimum-norm projection
  (:mod:`solver.integrate.step`);
* :meth:`Integrator.run` — the whole integration as one ``lax.while_loop``
  with dense output and a status code; safe under ``jax.vmap``
  (:mod:`solver.integrate.single_run`); :meth:`Integrator.run_batch` a
  batch on a pool of slots (:mod:`solver.integrate.pool`) and
  :meth:`Integrator.run_tangents` forward-mode tangents
  (:mod:`solver.integrate.tangents`).

The state ``z`` is the flat vector of normalised coefficients
``X[j, l] = x_j^(l) / l!`` for ``l < d_j`` (ordered by variable, then order,
then element); the leading derivatives ``u`` are ``X[j, d_j]``
(:mod:`solver.integrate.layout`).  The choices of engine, stage solver and
XLA options are in :mod:`solver.integrate.choices`.  This module also keeps
the names those modules define that were imported from here.
"""

from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp

from solver.errors import InputError
from solver.integrate.choices import (BATCH_CPU_OPTIONS, DEFAULT_SLOTS, KKT_MIN_SIZE, MODES, QUICK_COMPILE,
                                      UNROLL_MAX_OPS, UNROLL_MAX_OPS_SINGLE,
                                      WHOLE_ROUND_CPU_OPTIONS, WHOLE_ROUND_SLOTS, choose_mode, order_for_tol,
                                      tape_ops)
from solver.integrate.layout import StateLayout, take_static
from solver.integrate.pool import BatchPool, SlotPool
from solver.integrate.run_args import CACHED_TIMES_MAX, device_number, device_times, output_rows, pad_output_times
from solver.integrate.single_run import SingleRun, in_one_trip_loop
from solver.integrate.stages import SeriesStages
from solver.integrate.step import Stepper, step_loop_condition
from solver.integrate.step_events import DEFAULT_MAX_EVENTS, EventStepper
from solver.integrate.tangents import TangentRuns, tangent_seeds
from solver.numerics.kkt import KKTBlocks
from solver.program_store import dae_identity, stored_jit
from solver.taylor.compact import CompactProgram, CompactUnsupportedError
from solver.taylor.degree import stage0_is_affine
from solver.taylor.program import TaylorProgram
from solver.taylor.tape import UnrolledProgram
from solver.tiered import TieredJit

__all__ = ["Integrator", "order_for_tol", "BATCH_CPU_OPTIONS", "WHOLE_ROUND_CPU_OPTIONS", "KKT_MIN_SIZE", "MODES",
           "QUICK_COMPILE", "UNROLL_MAX_OPS", "UNROLL_MAX_OPS_SINGLE", "tape_ops", "choose_mode",
           # Defined in the modules the integrator was split into; imported from here too.
           "CACHED_TIMES_MAX", "DEFAULT_SLOTS", "WHOLE_ROUND_SLOTS", "SlotPool", "device_number", "device_times",
           "in_one_trip_loop", "output_rows", "pad_output_times", "step_loop_condition", "take_static",
           "tangent_seeds"]


class Integrator(StateLayout, SeriesStages, Stepper, SingleRun, BatchPool, TangentRuns):
    """Pure functions for one DAE at one Taylor order.

    The integrator is put together from the pieces of this package: its
    state layout (:class:`~solver.integrate.layout.StateLayout`), the series
    (:class:`~solver.integrate.stages.SeriesStages`), the step
    (:class:`~solver.integrate.step.Stepper`), the single run
    (:class:`~solver.integrate.single_run.SingleRun`), the batch's slot pool
    (:class:`~solver.integrate.pool.BatchPool`) and the forward-mode tangents
    (:class:`~solver.integrate.tangents.TangentRuns`); this class chooses the
    engine and stage solver and compiles the runs.

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
        self.optimize = bool(optimize)
        StateLayout.__init__(self, program)
        dae, d = program.dae, program.d
        # device_put of float64 numpy arrays: jnp.asarray(..., dtype=) compiles a
        # conversion program on its first call, a warm start's 5 ms.
        self.c = jax.device_put(np.asarray(program.c, dtype=np.float64))
        self.d = jax.device_put(np.asarray(d, dtype=np.float64))
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
        #: What these programs are of, for the program store (None: not stored).
        self.identity = dae_identity(dae, program.p, self.linear, self.mode, self.optimize)
        self._run_jit = self._tiered_jit(self._run_whole, "run", self.compiler_options())
        self._run_batch_jit = self._tiered_jit(self._run_batch, "run_batch", self.batch_compiler_options(),
                                               ("slots",))
        self._run_tangents_jit = self._tiered_jit(self._run_tangents, "run_tangents", self.compiler_options(),
                                                  ("slots",))

    def _tiered_jit(self, fn, name: str, options: dict | None, static_argnames=()) -> TieredJit:
        # A run's program, kept in the program store, that may start on a quick build where
        # tiering is on (solver.tiered); never tiered when it is built quickly anyway.
        jitted = stored_jit(fn, self.identity, name, static_argnames=static_argnames, compiler_options=options)
        return TieredJit(jitted, self.identity, name, QUICK_COMPILE, static_argnames=static_argnames,
                         enabled=self.optimize)

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
