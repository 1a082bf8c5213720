"""One step of the integration: the Taylor polynomial's shift, the step size, the projection, acceptance.

:class:`Stepper` is the part of :class:`~solver.integrate.integrator.Integrator`
that takes a step from a consistent state: the series
(:class:`~solver.integrate.stages.SeriesStages`), the Jorba–Zou step size,
the polynomial evaluated at the new time, the Gauss–Newton projection onto
the hidden constraints, the halvings of a rejected step and the status
after it.  Both run forms (:mod:`solver.integrate.single_run`,
:mod:`solver.integrate.pool`) loop over this step.
"""

from __future__ import annotations

import math

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver import status as st
from solver.integrate.layout import take_static
from solver.numerics import linalg
from solver.numerics.jacobian import jacfwd, with_value
from solver.taylor.ir import plus, times
from solver.taylor.recurrences import order_sum

__all__ = ["Stepper", "step_loop_condition"]


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


class Stepper:
    """The step of an :class:`~solver.integrate.integrator.Integrator`: polynomials, step size, projection.

    A mix-in: it reads the integrator's layout, its series
    (:meth:`~solver.integrate.stages.SeriesStages.series`) and ``events``.
    """

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
        # indexing; the numbers are the same.
        a_rows = [lax.index_in_dim(A, r, keepdims=False) for r in range(K)]
        rows = []
        for l in range(max(orders.values())):
            y = times(float(math.comb(K - 1, l)), a_rows[K - 1])
            for r in range(K - 2, l - 1, -1):
                y = plus(times(y, h), times(float(math.comb(r, l)), a_rows[r]))
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
            # element at a time.
            hs.append(jnp.where(nk > 0, jnp.exp(jnp.log(tk / jnp.where(nk > 0, nk, 1.0)) / k), jnp.inf))
        rho = math.exp(-0.7 / (p - 1))
        return rho * jnp.minimum(hs[0], hs[1])

    def _projection_jacobian(self, f, has_aux: bool = False):
        """The Jacobian transform of the projection's G: reverse mode where it is the cheaper one.

        Reverse mode pulls back one row per hidden constraint, forward mode
        pushes one column per state entry.  Where the hidden constraints are
        at most a third of the state and the step loop runs kernel by kernel
        (:meth:`~solver.integrate.single_run.SingleRun.loop_compiled_whole`
        False), reverse mode made the run faster: 3-D chains of 6, 7 and 10
        pendula (12, 14 and 20 hidden constraints against 36, 42 and 60 state
        entries) 7.7 -> 6.3, 9.5-9.9 -> 8.2-8.5 and 19.8-20.5 -> 15.8-16.2 ms.
        In a loop compiled as one function it made the same kind of model
        slower (a chain of 5 in the plane 5.0 -> 5.7-5.9 ms, of 3 in 3-D
        1.4 -> 1.5-2.5 ms), and forward mode stays there
        (``workflows/benchmarks/results/whole_loop_size.txt``).

        Args:
            f: the function of the state (``(G's rows, aux)`` with ``has_aux``).
            has_aux: as for ``jax.jacfwd``.

        Returns:
            ``jax.jacrev(f)`` or :func:`solver.numerics.jacobian.jacfwd` of ``f``.
        """
        if 3 * self.n_hidden <= self.n_state and not self.loop_compiled_whole():
            return jax.jacrev(f, has_aux=has_aux)
        return jacfwd(f, has_aux=has_aux)

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
        G, r = self._projection_jacobian(with_value(g), has_aux=True)(z)
        G = G * mask[None, :]
        fact = linalg.min_norm_factor(G)
        z = z + linalg.min_norm_step(fact, G, r)
        res = jnp.max(jnp.abs(r))
        for _ in range(iters - 1):
            r = g(z)
            z = z + linalg.min_norm_step(fact, G, r)
            res = jnp.max(jnp.abs(r))
        return z, res


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
            # the loop only halves (a single run is slower that way).
            first = try_body(first)
        h, zq, uq, ok, _ = lax.while_loop(try_cond, try_body, first)
        good = (sstat == st.SUCCESS) & ok
        ev_status = jnp.int8(-1)
        if self.events is not None:
            h, zq, uq, ev, ev_status = self.events.on_step(X, t, h, zq, uq, good, params, consts, ev, t1,
                                                           batched=batched)
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
