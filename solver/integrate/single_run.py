"""One run's step loop: dense output in chunks, the program compiled as one function where it can be.

:class:`SingleRun` is the part of :class:`~solver.integrate.integrator.Integrator`
behind :meth:`~SingleRun.run`: the whole integration as one
``lax.while_loop`` with dense output and a status code, safe under
``jax.vmap``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from solver.dae.jaxpr_core import jaxpr_as_fun
from solver.integrate import xla_setup
from solver.integrate.run_args import device_number, device_times
from solver.integrate.solve_lock import one_at_a_time
from solver.integrate.step import step_loop_condition
from solver.integrate.tangents import seeded, tangent_seed
from solver.numerics import linalg

__all__ = ["SingleRun", "in_one_trip_loop", "WHOLE_LOOP_MAX_UNKNOWNS"]

#: The most unknowns of a stage system for which a single run's step loop is
#: written to be compiled as one function (:meth:`SingleRun.loop_compiled_whole`).
WHOLE_LOOP_MAX_UNKNOWNS = 20


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



class SingleRun:
    """The single run of an :class:`~solver.integrate.integrator.Integrator` (:meth:`run`).

    A mix-in: it reads the integrator's layout, step
    (:class:`~solver.integrate.step.Stepper`), ``events``, ``mode`` and the
    compiled ``_run_jit``.
    """

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
        out = self._run_jit(*self._run_arguments(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step))
        if self.events is not None:
            # Unpacked here, not in the compiled program: there its slices and
            # reshapes were kernels of their own after the loop, and a run of
            # 114 pendulum steps paid 0.06 ms for them.
            out["events"] = self.events.unpack(out["events"])
        return out

    def run_ahead(self, params, z0, u0, t0, t1, t_eval, tol, max_steps=100_000, h_max=None, fixed_step=None):
        """Build :meth:`run`'s program for arguments like these: traced now, compiled on a background thread.

        A later :meth:`run` with arguments of the same shapes and types waits
        for that build instead of starting its own (:mod:`solver.ahead`): the
        program compiles while the caller computes its consistent point.

        Args: as :meth:`run`; ``z0`` and ``u0`` may be placeholders of the
            right shape and type (only shapes and types are used).
        """
        self._run_jit.ahead(*self._run_arguments(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step))

    @staticmethod
    def _run_arguments(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step) -> tuple:
        """The compiled run's arguments: defaults filled in, scalars and output times as cached device arrays."""
        h_max = jnp.inf if h_max is None else h_max
        fixed_step = 0.0 if fixed_step is None else fixed_step
        t0, t1, tol, max_steps, h_max, fixed_step = [device_number(x) for x in (t0, t1, tol, max_steps, h_max,
                                                                                  fixed_step)]
        return params, z0, u0, t0, t1, device_times(t_eval), tol, max_steps, h_max, fixed_step

    def _empty_outputs(self, lead, n_out, seed=None):
        """NaN-filled output buffers, each plus ``seed`` (see :func:`tangent_seeds`) when given."""
        return seeded({v.name: jnp.full(lead + (n_out, self.out_orders[v.name]) + v.shape, jnp.nan)
                        for v in self.dae.variables}, seed)

    # XLA:CPU's limit on a loop body's buffers for sequential execution (see _run).
    _SMALL_BUFFER_BYTES = 512

    def loop_compiled_whole(self) -> bool:
        """Whether this run's step loop is written for XLA:CPU to compile it as one function.

        Where the option is in effect (:func:`solver.integrate.xla_setup.loops_compiled_whole`),
        unless its stage system has more than :data:`WHOLE_LOOP_MAX_UNKNOWNS`
        unknowns (on the dense path or the structured one): written without LAPACK,
        its elimination is O(n³) masked updates for each factor and inverse,
        which past that size cost more than a loop of kernels with LAPACK
        calls (3-D chains of pendula, a run's milliseconds compiled whole
        against kernel by kernel: 16 unknowns 2.5 against 3.7, 20 unknowns
        4.8 against 5.5, 24 unknowns 10-13 against 7.6, 28 unknowns 18
        against 9.5-10; ``workflows/benchmarks/results/whole_loop_size.txt``).
        On the structured path too (mass blocks and a Schur complement, models
        of 40 unknowns or more) kernel by kernel was as fast or faster: the
        chain of 10 pendula 20.3 against 21.8 ms, the cloth 6.6 either way.
        Such a run's loop runs kernel by kernel and its outputs are written in
        chunks as for a loop of kernels; its factorisations and inverses up to
        :data:`~solver.numerics.linalg.NATIVE_LOOP_MAX` unknowns are still XLA
        loops (:meth:`_run`), each compiled as one kernel, which cost less than
        LAPACK's calls (with stage 0's inverse by Gauss-Jordan and the
        projection by Cholesky: the chain of 10 pendula, 40 unknowns on the
        dense path, 25.0-25.6 -> 16.0-16.1 ms; compiled whole instead, 6.3 and
        12.2 ms for 24 and 28 unknowns against 5.7 and 7.5, so the limit stays;
        ``workflows/benchmarks/bench_whole_loop_size.py``).

        Returns:
            True where the loop is written without scatters and chunked
            outputs, to be compiled as one function.
        """
        return xla_setup.loops_compiled_whole() and int(self.c.shape[0]) <= WHOLE_LOOP_MAX_UNKNOWNS

    def _output_chunk(self, n_out: int) -> int:
        """Output rows per chunk of :meth:`_run`: the most whose buffers stay small, or all of them.

        All of them when XLA compiles small loops whole (:mod:`solver.integrate.xla_setup`):
        the loop is then one function with no per-kernel runtime to spare,
        and chunks only add kernels around it (pendulum run: 0.26 against
        0.21 ms).
        """
        if self.loop_compiled_whole():
            return max(n_out, 1)
        row_bytes = max(8 * self.out_orders[v.name] * v.size for v in self.dae.variables)
        rows = self._SMALL_BUFFER_BYTES // row_bytes
        return rows if 2 <= rows < n_out else max(n_out, 1)

    def _run(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step, packed=False):
        # Mid-size linear algebra as XLA loops, not LAPACK calls (linalg.native_loops), so that
        # XLA:CPU can compile the step loop as one function; in a loop run kernel by kernel
        # each such small loop is compiled as one kernel, which costs less than LAPACK's calls.
        with linalg.native_loops(xla_setup.loops_compiled_whole()):
            out = self._run_traced(params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step)
        if self.events is not None and not packed:
            out["events"] = self.events.unpack(out["events"])
        return out

    def _run_whole(self, params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step):
        """:meth:`_run`, for the unrolled engine inside a loop of one trip (:func:`in_one_trip_loop`).

        Only the unrolled engine's (small) models take it: a compact
        model's run is milliseconds, which the thread pool's hand-offs do
        not change, and its wrapped loop compiled about 1.5 s longer
        (Andrews, RSCR; workflows/benchmarks/results/entry_kernels.txt).
        """
        args = (params, z0, u0, t0, t1, t_eval, tol, max_steps, h_max, fixed_step)
        # The event records come back packed; run() unpacks them.
        run = functools.partial(self._run, packed=True)
        if not self.loop_compiled_whole() or self.mode != "unrolled":
            return run(*args)
        return in_one_trip_loop(run, *args)

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
        # kernels the hand-offs cost more than the kernels
        # (workflows/benchmarks/results/entry_kernels.txt).  So the stepping loop
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
                return i + 1, {k: lax.dynamic_update_index_in_dim(b[k], vals[k], i - base, 0,
                                                                  allow_negative_indices=False) for k in b}

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

        seed = tangent_seed(z0)
        start = {"t": t0, "z": z0, "u": seeded(u0, seed), "steps": jnp.int32(0), "status": jnp.int8(-1),
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

            X0 = seeded({v.name: jnp.zeros((self.KX,) + v.shape, dt) for v in self.dae.variables}, seed)
            s = lax.while_loop(chunk_cond, chunk_body, {**start, "outs": outs, "last": {
                "X": X0, "t": t0, "h": jnp.zeros((), dt), "good": jnp.asarray(False)}})
            outs = s["outs"]
        out = {"values": {k: o[:n_out] for k, o in outs.items()}, "status": s["status"],
               "steps": s["steps"], "t_final": s["t"], "z_final": s["z"], "u_final": s["u"]}
        if self.events is not None:
            out["status"] = self.events.final_status(s["status"], s["ev"])
            out["events"] = s["ev"]
        return out
