"""A batch of problems on a pool of vmapped slots: a finished slot takes the next problem.

:class:`BatchPool` is the part of :class:`~solver.integrate.integrator.Integrator`
behind :meth:`~BatchPool.run_batch`: on a CPU the pool runs in rounds
(:meth:`~BatchPool._run_batch_rounds`), on an accelerator with a refill
after every step (:meth:`~BatchPool._run_batch_scatter`); both share a
:class:`SlotPool`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.errors import InputError
from solver.integrate import xla_setup
from solver.integrate.choices import DEFAULT_SLOTS, ROUND_FINISHED, WHOLE_ROUND_SLOTS
from solver.integrate.solve_lock import one_at_a_time
from solver.integrate.step import step_loop_condition
from solver.integrate.step_events import SLOT_AXIS
from solver.integrate.tangents import seeded, tangent_seed
from solver.numerics import linalg

__all__ = ["BatchPool", "SlotPool"]


class SlotPool(NamedTuple):
    """What both forms of a batch's slot pool share (:meth:`Integrator._pool`).

    Attributes:
        t0, t1, t_eval: the times, as float arrays.
        z0, u0: the problems' initial states and leading-derivative guesses
            (``u0`` seeded, :func:`tangent_seeds`).
        seed: :func:`tangent_seed` of z0, for the output buffers.
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


class BatchPool:
    """The batch runs of an :class:`~solver.integrate.integrator.Integrator` (:meth:`run_batch`).

    A mix-in: it reads the integrator's layout, step
    (:class:`~solver.integrate.step.Stepper`), output buffers
    (:class:`~solver.integrate.single_run.SingleRun`), ``events``, ``mode``,
    ``linear`` and the compiled ``_run_batch_jit``.
    """

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
        args, kwargs = self._batch_arguments(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots)
        return self._run_batch_jit(*args, **kwargs)

    def run_batch_ahead(self, params, z0, u0, t0, t1, t_eval, tol, max_steps=100_000, h_max=None, fixed_step=None,
                        slots: int | None = None):
        """Build :meth:`run_batch`'s program for arguments like these: traced now, compiled in the background.

        As :meth:`~solver.integrate.single_run.SingleRun.run_ahead`: a later
        :meth:`run_batch` with arguments of the same shapes and types waits
        for the build, so a batch's program compiles while its consistent
        points are found.

        Args: as :meth:`run_batch` (``z0`` and ``u0`` may be placeholders).

        Raises:
            InputError: as :meth:`run_batch`.
        """
        args, kwargs = self._batch_arguments(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots)
        self._run_batch_jit.ahead(*args, **kwargs)

    def _batch_arguments(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots):
        """:meth:`run_batch`'s checked arguments for its compiled program: (args, kwargs)."""
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
        return (params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step), {"slots": int(slots)}

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

        seed = tangent_seed(z0)
        return SlotPool(t0=t0, t1=t1, t_eval=jnp.asarray(t_eval, dt), z0=z0, u0=seeded(u0, seed), seed=seed,
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
        ends when :data:`ROUND_FINISHED` of the slots (at least one) have
        finished or none is running.
        """
        pool = self._pool(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, slots)
        t0, z0, u0, N, n_out, S, pick, step = pool.t0, pool.z0, pool.u0, pool.N, pool.n_out, pool.S, pool.pick, pool.step
        enough = max(1, int(S * ROUND_FINISHED))
        empty = self._empty_outputs((S,), n_out, pool.seed)

        def write_slots(go, ic, vals, buf):
            # One slot at a time: a dynamic update of one row is a few
            # stores, where a batched index would make a scatter.
            def one(s, b):
                out = {}
                for k, B in b.items():
                    at = (s.astype(jnp.int32), ic[s].astype(jnp.int32)) + (jnp.int32(0),) * (B.ndim - 2)
                    old = lax.dynamic_slice(B, at, (1, 1) + B.shape[2:], allow_negative_indices=False)
                    new = jnp.where(go[s], vals[k][s][None, None], old)
                    out[k] = lax.dynamic_update_slice(B, new, at, allow_negative_indices=False)
                return out

            return lax.fori_loop(0, S, one, buf)

        def round_cond(r):
            running = r["active"] & (r["status"] < 0)
            finished = r["active"] & (r["status"] >= 0)
            return jnp.any(running) & (jnp.sum(finished) < enough)

        def round_body(r):
            t = r["t"]
            live = r["active"] & (r["status"] < 0)
            X, h, good, t_new, z, u, status, ev = jax.vmap(step, axis_name=SLOT_AXIS)(
                r["p"], t, r["z"], r["u"], r["steps"], live, r["ev"])
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
            X, h, good, t_new, z, u, status, ev = jax.vmap(step, axis_name=SLOT_AXIS)(
                pick(ec), t, c["z"], c["u"], c["steps"], active, c["ev"])
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
