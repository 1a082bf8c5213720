"""The Taylor series at a consistent point: stage 0 by Newton, stages 1..p by the chosen engine.

:class:`SeriesStages` is the part of :class:`~solver.integrate.integrator.Integrator`
that computes a point's coefficients: the negative stages from the known
state, Newton on stage 0 with the dense system Jacobian or the structured
KKT solve, then one solve per order on the unrolled, compact or looped
engine; and the hidden constraints at a state.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import jax.numpy as jnp
from jax import lax

from solver import status as st
from solver.numerics import linalg
from solver.numerics.jacobian import jacfwd
from solver.numerics.kkt import kkt_factor, kkt_solve
from solver.taylor.pointwise import levels_from_coefficients, residual_at

__all__ = ["SeriesStages"]


class SeriesStages:
    """Series and stage 0 of an :class:`~solver.integrate.integrator.Integrator`.

    A mix-in: it reads the integrator's program and layout
    (:class:`~solver.integrate.layout.StateLayout`), its engine
    (``_unrolled``, ``_compact``, ``_unrolled_hidden``), its stage solver
    (``linear``, ``_kkt``) and ``stage0_affine``.
    """

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

        # The factors are those of J without its tangent: a forward-mode run
        # differentiates the solves (linalg.solve_factored), not the elimination.
        def step(u):
            r, J = residual_and_jacobian(u)
            fact = linalg.lu_factor(lax.stop_gradient(J))
            return linalg.solve_factored(J, fact, r), (J, fact)

        n = u_guess.shape[0]
        # Every stage solves with this one matrix, so it is inverted once and
        # each stage is a product with the inverse: one fused kernel, where a
        # triangular solve was a kernel per unknown (row swaps, substitutions)
        # or a LAPACK call.
        if self.stage0_affine:
            # One step solves stage 0 (see _newton), and it is a product with
            # the inverse too, not a solve of its own (a solve of a small system
            # is unrolled into hundreds of instructions, and forward mode
            # differentiates it once more).
            r, J = residual_and_jacobian(u_guess)
            inverse, singular = linalg.inverse(J)
            du = linalg.apply_inverse(inverse, r)
            u = jnp.where(jnp.all(jnp.isfinite(du)), u_guess - du, u_guess)
        else:
            zeros = jnp.zeros((n, n), u_guess.dtype)
            no_fact = linalg.LU(zeros, jnp.zeros(n, jnp.int32), jnp.asarray(True))
            # The last iteration's factors serve the stages: the same matrix as
            # factoring its J again after the loop, one factorisation less a step.
            u, (J, fact) = self._newton(step, u_guess, (zeros, no_fact), newton_iters)
            inverse = linalg.solve_factored(J, fact, linalg.identity(n))
            singular = fact.singular
        # A partial (not a lambda): the compact engine's batched stage loop
        # takes the matrix and the product apart (solve.func, solve.args).
        return u, partial(linalg.apply_inverse, inverse), singular, J

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

    def _jacobian_levels(self) -> dict:
        """Variable name → (its columns' offsets ``d_j - c_i``, (n, size); the levels ≥ 0 among them)."""
        prog = self.prog
        out = {}
        for var in self.dae.variables:
            cols = np.arange(var.offset, var.offset + var.size)
            offs = prog.d[None, cols] - prog.c[:, None]
            out[var.name] = (offs, [int(o) for o in np.unique(offs) if o >= 0])
        return out

    def stage0_jacobian(self, X, u, t0, consts):
        """A_0 = ∂F_i[c_i]/∂X[j, d_j] = J_ij d_j!/c_i!, J the system Jacobian.

        J_ij = ∂f_i/∂x_j^(d_j - c_i) (Pryce) is ``jacfwd`` of the residual at
        the point, with every ``ddt`` expanded by forward mode along the
        state (:func:`solver.taylor.pointwise.residual_at`).
        """
        dae, prog = self.dae, self.prog
        levels = levels_from_coefficients(prog, self.set_stage(X, 0, u))
        # Only the levels d_j - c_i enter J: differentiating by the others
        # (for a second-order model, by q and q' besides q'') would push
        # three times the tangents through the residual, Hessians included.
        wanted = self._jacobian_levels()
        free = {name: [lv[l] for l in wanted[name][1]] for name, lv in levels.items()}

        def residual_of(sub):
            full = {name: list(lv) for name, lv in levels.items()}
            for name, (_, ls) in wanted.items():
                for l, val in zip(ls, sub[name]):
                    full[name][l] = val
            return residual_at(prog, t0, consts, full)

        jac = jacfwd(residual_of)(free)
        n = dae.n
        # Column blocks joined, not scattered into zeros: XLA expands a
        # scatter into a loop whose index arithmetic it hoists out of ours.
        blocks = []
        for var in sorted(dae.variables, key=lambda v: v.offset):
            offs, ls = wanted[var.name]
            block = jnp.zeros((n, var.size))
            for l, Jl in zip(ls, jac[var.name]):
                block = block + jnp.where(offs == l, Jl.reshape(n, var.size), 0.0)
            blocks.append(block)
        A = jnp.concatenate(blocks, axis=1) if blocks else jnp.zeros((n, n))
        cf = np.array([math.factorial(int(c)) for c in prog.c], dtype=float)
        df = np.array([math.factorial(int(d)) for d in prog.d], dtype=float)
        return A * (df[None, :] / cf[:, None])
