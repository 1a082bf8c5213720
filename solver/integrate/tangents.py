"""Forward-mode tangents of a run or a batch, and the seeds that let their trace take one pass.

:class:`TangentRuns` is the part of :class:`~solver.integrate.integrator.Integrator`
behind :meth:`~TangentRuns.run_tangents` (``jax.jvp`` of the whole
integration, vmapped over the directions when there are several);
:func:`tangent_seeds` is the
trace-time flag under which a run's carries start with a tangent.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from solver.dae.trace_flags import TraceFlag
from solver.errors import InputError
from solver.integrate.solve_lock import one_at_a_time
from solver.numerics import linalg
from solver.taylor.compact import batched_tangents

__all__ = ["TangentRuns", "seeded", "tangent_seed", "tangent_seeds"]


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


def tangent_seed(z0):
    """A zero carrying ``z0``'s tangent under :func:`tangent_seeds`, else None."""
    if not _seeding.on or not jnp.size(z0):
        return None
    return jnp.zeros((), jnp.result_type(z0)) * jnp.ravel(z0)[0]


def seeded(tree, seed):
    """``tree`` (floating arrays) with ``seed`` added to every leaf (unchanged when ``seed`` is None)."""
    if seed is None:
        return tree
    return jax.tree_util.tree_map(lambda a: a + seed, tree)


class TangentRuns:
    """Forward-mode runs of an :class:`~solver.integrate.integrator.Integrator` (:meth:`run_tangents`).

    A mix-in: it reads the integrator's ``_run``, ``_run_batch`` and the
    compiled ``_run_tangents_jit``.
    """

    @one_at_a_time
    def run_tangents(self, params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps=100_000, h_max=None,
                     slots: int | None = None):
        """:meth:`run` (or :meth:`run_batch`) and its derivatives along k directions, by forward mode.

        ``jax.jvp`` of the whole integration, vmapped over the k tangent
        directions: the primal is computed once and every direction rides
        along it through the Taylor stages, the stage-0 Newton and the
        projections.  One direction is the jvp itself, without the vmap:
        the same derivative (to rounding), from a program that compiles in
        about two thirds of the time and runs faster.  The step sizes are
        not differentiated (they are under ``stop_gradient``), so the result
        is the derivative of the computed solution at its own step sequence.

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
        args, kwargs = self._tangent_arguments(params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps, h_max,
                                               slots)
        return self._run_tangents_jit(*args, **kwargs)

    def run_tangents_ahead(self, params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps=100_000, h_max=None,
                           slots: int | None = None):
        """Build :meth:`run_tangents`' program for arguments like these: traced now, compiled in the background.

        As :meth:`~solver.integrate.single_run.SingleRun.run_ahead`: a later
        :meth:`run_tangents` with arguments of the same shapes and types
        waits for the build.

        Args: as :meth:`run_tangents` (``z0``, ``u0`` and ``dz0`` may be placeholders).

        Raises:
            InputError: ``slots`` < 1.
        """
        args, kwargs = self._tangent_arguments(params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps, h_max,
                                               slots)
        self._run_tangents_jit.ahead(*args, **kwargs)

    @staticmethod
    def _tangent_arguments(params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps, h_max, slots):
        if slots is not None and int(slots) < 1:
            raise InputError(f"slots must be at least 1; got {slots}")
        h_max = jnp.inf if h_max is None else h_max
        return ((params, z0, u0, dparams, dz0, t0, t1, t_eval, tol, max_steps, h_max),
                {"slots": None if slots is None else int(slots)})

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
        # more slots).  The loops cost such a batch about a fifth, the same
        # tangents (workflows/benchmarks/results/sensitivity.txt); jax 0.11
        # compiles the split out.  A single run's _run sets the flag itself.
        # The primal does not depend on the direction: vmap keeps it unbatched.
        dparams = {k: jnp.asarray(v, jnp.float64) for k, v in dparams.items()}
        dz0 = jnp.asarray(dz0, jnp.float64)
        with tangent_seeds(), linalg.native_loops(slots is not None, batched=True), \
                batched_tangents(slots is not None):
            if dz0.shape[0] == 1:
                # One direction: the jvp itself, without vmap's batching rules
                # around every operation of the loop (vmapped over one direction,
                # the same tangents compiled 1.4-1.5x as long and ran slower:
                # workflows/benchmarks/results/compiles.txt, sensitivity.txt).
                res, (tangents, events) = along({k: v[0] for k, v in dparams.items()}, dz0[0])
                tangents, events = jax.tree.map(lambda a: a[None], (tangents, events))
            else:
                res, (tangents, events) = jax.vmap(along, out_axes=(None, 0))(dparams, dz0)
        if events is not None:
            # The derivatives of the event records: times, rates and values (direction first).
            res = {**res, "event_tangents": {k: events[k] for k in ("time", "rate", "values")}}
        return res, tangents
