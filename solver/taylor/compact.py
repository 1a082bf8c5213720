"""Compact Taylor engine: a scalar tape evaluated in groups (heyoka's compact mode, in JAX).

The unrolled engine (:mod:`solver.taylor.tape`) writes every order of every
operation as straight-line code, so its program grows with the model and
the order; the looped one (:mod:`solver.taylor.program`) interprets the array-level
jaxpr with dynamic slices of the order axis, about 150 lines of StableHLO
per operation.  Here the residual is decomposed once, at build time, into
*scalar* elementary operations (a tape), and the tape's operations are
grouped by (topological level, kind).  A stage evaluates each group for all
its members at once: gather the operands' coefficients, compute the
recurrence, scatter the results.  The program's size is the number of
groups, independent of the order and of how many elements a level holds.

Decomposition (:class:`~solver.taylor.compact_build.ScalarBuilder`):

* A scalar is a linear combination ``Σ w · c · atom`` of *atoms* (inputs
  ``x_j^(l)``, t, constants, results of nonlinear operations) with float
  weights ``w`` and optional constant factors ``c`` (a parameter, say).
  Data movement (reshape, slices, gathers, concatenation, broadcasting) and
  sums are resolved at build time and cost nothing at run time; literal
  zeros and ones fold away; identical operations are shared.
* Nonlinear operations become atoms of a few kinds (product, quotient,
  square root, power, exp, log, sin/cos pairs, inverse trigonometric
  functions, atan2, abs, selections, piecewise-constant functions); tan,
  tanh, the logistic function, integer powers, max and min are written
  with those.
* Products and quotients of powers of one base become one power
  (``x^p · x^q = x^(p+q)``: a gravitational pair's ``s^(-3/2)`` is one
  operation, not five).

Because every scalar has its own order offset, no window of orders is
recomputed (the array engines need one when a vector mixes elements of
different offsets, as the natural coordinates of a 3-D rigid body do):
each stage computes every live scalar at order ``k + off`` exactly once
per pass.

The pieces: the decomposition (:mod:`solver.taylor.compact_build`, which
folds products of powers of one base into one power:
:mod:`solver.taylor.compact_powers`), the
coefficient table's operands and groups (:mod:`solver.taylor.compact_table`),
each kind's recurrence and commit delta (:mod:`solver.taylor.compact_kinds`)
and batch-last evaluation under ``vmap`` (:mod:`solver.taylor.compact_batch`).
"""

from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.taylor.compact_batch import batch_last, batched_tangents
from solver.taylor.compact_build import ROW_TERMS, WHOLE_READERS, CompactUnsupportedError, ScalarBuilder
from solver.taylor.compact_kinds import DELTA, EVAL
from solver.taylor.compact_table import Group, Operand, View, input_factor, row_at
from solver.taylor.program import TaylorProgram
from solver.taylor.recurrences import write_row

__all__ = ["CompactProgram", "CompactUnsupportedError", "batched_tangents"]


class CompactProgram:
    """A :class:`TaylorProgram`'s residual as a grouped scalar tape.

    The coefficient table ``C`` has shape ``(n_nodes, K)``: a node's
    coefficients are contiguous.  Members of a group share an order offset,
    so a stage computes one order per group (``k + off``): operand rows are
    static gathers, the order a dynamic index, and the members' results go
    into a contiguous block of the table in place.  Linear combinations (sums, differences,
    scalings, data movement) have no columns: they are formed from their
    terms where they are read.

    Args:
        prog: the analysed Taylor program (cleaned jaxpr, series nodes, c, d).

    Raises:
        CompactUnsupportedError: an operation the decomposition does not
            handle, or offsets that would need a window (``mode="auto"``
            then uses the looped engine).

    Attributes:
        n_nodes: scalar nodes with a column (constants, t, inputs, results
            of nonlinear operations).
        n_groups: (level, kind, offset) groups, the program's size per stage.
        levels: topological levels.
    """

    def __init__(self, prog: TaylorProgram):
        self.prog = prog
        dae = prog.dae
        self.dae = dae
        b = ScalarBuilder(prog)
        n_all = len(b.kind)
        c = prog.c
        d = prog.d
        # Offsets, backwards (creation order is topological).
        off = np.full(n_all, -10**9, dtype=np.int64)
        for i, o in enumerate(b.out_nodes):
            if o >= 0:
                off[o] = max(off[o], int(c[i]))
        for i in range(n_all - 1, -1, -1):
            kind = b.kind[i]
            if kind == "cos":
                continue
            if kind == "sincos":
                partner = b.param[i][1]
                off[i] = off[partner] = max(off[i], off[partner])
            if off[i] < -10**8:
                continue
            need = off[i] + (1 if kind == "ddt" else 0)
            for a in self._operands(b, i):
                off[a] = max(off[a], need)
        live = off > -10**8
        live[b.ONE] = live[b.ZERO] = True
        # The window condition: an input x_j^(l) read at order k + off must
        # not be a later stage's unknown (off + l <= d_j).
        for i in range(n_all):
            if live[i] and b.kind[i] == "input":
                j, l = b.param[i]
                if off[i] + l > int(d[j]):
                    raise CompactUnsupportedError(
                        "the compact Taylor engine needs scalar offsets off + l <= d_j; "
                        f"input {j} (derivative {l}) has offset {off[i]} > d_j - l = {int(d[j]) - l}")
        off = np.where(live, np.maximum(off, 0), 0)
        # Levels, forwards; a linear combination is at its highest term's level.
        level = np.zeros(n_all, dtype=np.int64)
        for i in range(n_all):
            kind = b.kind[i]
            if kind in ("const", "time", "input"):
                continue
            if kind == "cos":
                level[i] = level[b.args[i][0]]
            elif kind == "lin":
                level[i] = max(level[a] for a in self._operands(b, i))
            else:
                level[i] = 1 + max((level[a] for a in self._operands(b, i)), default=0)
        # Columns: constants, t, inputs by (offset, l), then the groups in
        # evaluation order, each a contiguous block.
        live_ids = [i for i in range(n_all) if live[i]]
        consts = [i for i in live_ids if b.kind[i] == "const"]
        inputs: dict = {}
        for i in live_ids:
            if b.kind[i] == "input":
                inputs.setdefault((int(off[i]), b.param[i][1]), []).append(i)
        # A combination of many terms read whole (every order) by a
        # recurrence gets a row of its own, computed once per order; elsewhere
        # it is formed where it is read (see ROW_TERMS).
        self._rows_of = set()
        for i in live_ids:
            if b.kind[i] in WHOLE_READERS:
                for a in b.args[i]:
                    if b.kind[a] == "lin" and len(b.param[a]) > ROW_TERMS:
                        self._rows_of.add(a)
        buckets: dict = {}
        for i in live_ids:
            kind = b.kind[i]
            if kind in ("const", "time", "input", "cos") or (kind == "lin" and i not in self._rows_of):
                continue
            # Combinations after the operations of their level, before the next.
            step = 2 * int(level[i]) + (1 if kind == "lin" else 0)
            key = (step, kind, repr(self._group_param(b, i)), int(off[i]))
            buckets.setdefault(key, []).append(i)
        col = -np.ones(n_all, dtype=np.int64)
        pos = 0

        def place(ids):
            nonlocal pos
            col[ids] = np.arange(pos, pos + len(ids))
            pos += len(ids)

        place(consts)
        if live[b.TIME]:
            place([b.TIME])
        input_blocks = []
        for (o, l), ids in sorted(inputs.items()):
            input_blocks.append((pos, o, l, ids))
            place(ids)
        group_blocks = []
        for key in sorted(buckets):
            ids = buckets[key]
            group_blocks.append((key, pos, ids))
            place(ids)
            if key[1] == "sincos":
                place([b.param[i][1] for i in ids])  # the cosines, right after their sines
        self._b, self.col = b, col
        self.n_nodes = pos
        self.max_off = int(off[live_ids].max()) if live_ids else 0
        self.K = prog.p + self.max_off + 2
        self.KX = prog.KX
        self.k_start = -self.max_off
        self.time_col = int(col[b.TIME]) if live[b.TIME] else -1
        self.const_sources = [b.param[i] for i in consts]
        self._const_index = {i: k for k, i in enumerate(consts)}
        self.inputs = [Group("input", l, start, len(ids), o, [np.array([b.param[i][0] for i in ids])])
                       for start, o, l, ids in input_blocks]
        self.groups = [self._make_group(key, start, ids) for key, start, ids in group_blocks]
        # Each column's order offset (-1: constants and t, which no stage changes).
        self.col_off = np.full(self.n_nodes, -1, dtype=np.int64)
        for g in self.inputs:
            self.col_off[g.start: g.start + g.size] = g.off
        for g in self.groups:
            self.col_off[g.start: g.start + g.width] = g.off
        # A column's order in a stage k pass is k + new_off (constants and t: never).
        self.new_off = np.where(self.col_off >= 0, self.col_off, -(1 << 30)).astype(np.int64)
        # (first row, end, offset) of each run of rows with one offset: the blocks _merge writes.
        rows = np.nonzero(self.col_off >= 0)[0]
        breaks = np.nonzero((np.diff(rows) != 1) | (np.diff(self.col_off[rows]) != 0))[0] + 1
        self.offset_runs = [(int(r[0]), int(r[-1]) + 1, int(self.col_off[r[0]]))
                            for r in np.split(rows, breaks) if r.size]
        # Which columns a stage's unknowns reach at the order the stage computes them: the
        # inputs x_j^(l) with off + l = d_j, then every node with such an operand term at its
        # own offset (one more for ddt).  Groups with none are left out of the commit.
        self.col_moves = np.zeros(self.n_nodes, dtype=bool)
        for g in self.inputs:
            self.col_moves[g.start: g.start + g.size] = g.off + g.param == prog.d[np.asarray(g.ops[0])]
        for g in self.groups:
            off = g.off + (1 if g.kind == "ddt" else 0)
            moves = np.zeros(g.size, dtype=bool)
            for op in g.ops:
                moves |= np.any(self.col_moves[op.src] & (self.col_off[op.src] == off), axis=1)
            self.col_moves[g.start: g.start + g.width] = np.tile(moves, g.width // g.size)
        # Equation outputs, by offset c (one row read per distinct c).
        self.out_series = np.asarray(b.out_nodes >= 0)
        self.outputs = {}
        for cc in np.unique(c):
            sel = np.nonzero((c == cc) & self.out_series)[0]
            if sel.size:
                self.outputs[int(cc)] = (sel, self._operand([int(b.out_nodes[i]) for i in sel]))
        self.levels = int(level[live_ids].max()) if live_ids else 0
        self.n_groups = len(self.groups)
        self._negative = batch_last(self._negative_native, (True, True), (True,))
        self._stage0_residual = batch_last(self._stage0_residual_native, (True, True, True), (True,))
        self._positive: dict = {}
        # Every stage of a step calls the same pass (the negative stages, stage 0 in its Newton
        # iteration and Jacobian, the positive ones): an inner jit traces it once per shape, and
        # JAX's rules transform that one jaxpr.  The pass reads no trace flag, so one trace serves
        # every context it is called in; XLA inlines it, so the compiled step is the same.
        self._pass_values = jax.jit(self._stage_pass_values)
        self._b = None  # the builder's tables are not needed once the groups are built

    # ------------------------------------------------------------ build helpers
    @staticmethod
    def _operands(b, i):
        kind = b.kind[i]
        if kind == "lin":
            return [a for a, _, _ in b.param[i]] + [cc for _, cc, _ in b.param[i] if cc >= 0]
        if kind == "const":
            src = b.param[i]
            return list(src[1:]) if src[0] in ("recip", "prod") else []
        if kind == "cos":
            return []
        return list(b.args[i])

    @staticmethod
    def _group_param(b, i):
        kind = b.kind[i]
        if kind in ("inv", "piece", "powc"):
            return b.param[i]
        if kind == "sincos":
            return b.param[i][0]
        if kind == "select":
            return len(b.args[i])
        if kind == "lin":
            return 1 << (len(b.param[i]) - 1).bit_length()  # members padded to this many terms
        return None

    def _terms(self, node, expand=False):
        b, col = self._b, self.col
        if b.kind[node] == "lin" and (expand or node not in self._rows_of):
            return [(int(col[a]), int(col[cc]) if cc >= 0 else -1, w) for a, cc, w in b.param[node]]
        return [(int(col[node]), -1, 1.0)]

    def _operand(self, nodes, expand=False) -> Operand:
        """The operand reading ``nodes`` (one per member), linear combinations without a row expanded."""
        terms = [self._terms(n, expand) for n in nodes]
        width = max(len(t) for t in terms)
        zero = int(self.col[self._b.ZERO])
        one = int(self.col[self._b.ONE])
        src = np.full((len(nodes), width), zero)
        fac = np.full((len(nodes), width), one)
        w = np.zeros((len(nodes), width))
        for g, ts in enumerate(terms):
            for t, (a, cc, wt) in enumerate(ts):
                src[g, t], w[g, t] = a, wt
                if cc >= 0:
                    fac[g, t] = cc
        plain_w = width == 1 and np.all(w == 1.0)
        return Operand(src, None if plain_w else w, None if np.all(fac == one) else fac)

    def _make_group(self, key, start, members):
        level, kind, _, off = key
        b = self._b
        param = None
        if kind in ("inv", "piece", "powc"):
            param = b.param[members[0]]
        elif kind == "sincos":
            param = b.param[members[0]][0]
        elif kind == "lin":
            return Group(kind, None, start, len(members), off, [self._operand(members, expand=True)])
        nargs = len(b.args[members[0]])
        ops = [self._operand([b.args[i][k] for i in members]) for k in range(nargs)]
        return Group(kind, param, start, len(members), off, ops)

    # ------------------------------------------------------------ state
    def constant_values(self, consts):
        """Order-0 values of the constant columns, from ``TaylorProgram.constants``."""
        vals = []
        flat_cache = {}
        for src in self.const_sources:
            if src[0] == "lit":
                vals.append(jnp.asarray(src[1], jnp.float64))
            elif src[0] == "arr":
                node, i = src[1], src[2]
                if node not in flat_cache:
                    flat_cache[node] = jnp.ravel(jnp.asarray(consts[node])).astype(jnp.float64)
                vals.append(flat_cache[node][i])
            else:  # ("recip", c) or ("prod", c1, c2) of constant nodes: after the base constants
                vals.append(None)
        for k, src in enumerate(self.const_sources):  # in creation order: a factor before its product
            if src[0] == "recip":
                vals[k] = 1.0 / vals[self._const_index[src[1]]]
            elif src[0] == "prod":
                vals[k] = vals[self._const_index[src[1]]] * vals[self._const_index[src[2]]]
        return jnp.stack(vals)

    def init(self, t0, consts):
        """The coefficient table (n_nodes, K): zeros, with the constants and t filled in."""
        n_c = len(self.const_sources)
        col0 = jnp.concatenate([self.constant_values(consts),
                                jnp.zeros(self.n_nodes - n_c, jnp.float64)])
        # Joined and masked, not scattered: XLA:CPU compiles a step loop
        # with a scatter kernel by kernel (see solver.integrate.xla_setup).
        cols = [col0]
        if self.time_col >= 0:
            at_t = np.arange(self.n_nodes) == self.time_col
            cols = [jnp.where(at_t, t0, col0), jnp.where(at_t, 1.0, 0.0)]
        cols += [jnp.zeros(self.n_nodes, jnp.float64)] * (self.K - len(cols))
        return jnp.stack(cols[:self.K], axis=1)

    def xf_from_state(self, integ, z):
        """Variable coefficients ``(KX, n)`` with the state's rows filled in."""
        X = integ.X_from_state(z)  # without a scatter
        by_offset = sorted(self.dae.variables, key=lambda v: v.offset)
        return jnp.concatenate([X[v.name].reshape(self.KX, v.size) for v in by_offset], axis=1)

    def set_stage(self, Xf, k, u):
        """Stage k's unknowns ``X[k + d_j, j] = u_j`` (one row update per distinct d)."""
        d = self.prog.d
        for dd in np.unique(d):
            sel = d == dd
            row = u if sel.all() else jnp.where(jnp.asarray(sel), u, row_at(Xf, k + int(dd), self.KX))
            Xf = write_row(Xf, k + int(dd), row)
        return Xf

    def arrays(self, Xf):
        """Coefficient arrays ``(KX, *shape)`` per variable."""
        return {v.name: Xf[:, v.offset: v.offset + v.size].reshape((self.KX,) + v.shape)
                for v in self.dae.variables}

    # ------------------------------------------------------------ evaluation
    def _stage_native(self, C, Xf, k):
        """One stage: the table with every node's coefficient of order ``k + off``.

        C (n_nodes, K, *B), Xf (KX, n, *B): one table or a batch (last axis).
        """
        return self._merge(C, self._stage_pass(C, Xf, k).R, k)

    def _stage_pass(self, C, Xf, k) -> View:
        """One pass over the groups at stage k: the table as it was and every node's coefficient k + off.

        Traced once per shape (an inner jit), however many stages call it.

        A node whose order k + off is below zero (a stage k < -off) gets a
        value that is never stored (:meth:`_merge`) and that only nodes
        below zero themselves read.
        """
        return View(C, self._pass_values(C, Xf, jnp.asarray(k, jnp.int64)), k, self.new_off)

    def _stage_pass_values(self, C, Xf, k):
        V = View(C, jnp.zeros((self.n_nodes,) + C.shape[2:], C.dtype), k, self.new_off)
        for g in self.inputs:
            m = k + g.off
            row = row_at(Xf, m + g.param, self.KX)
            V = V.write(g.start, input_factor(m, g.param) * row[g.ops[0]])
        for g in self.groups:
            V = EVAL[g.kind](self, V, g, k + g.off)
        return V.R

    def _merge(self, C, R, k):
        """``C`` with ``R[i]`` as node i's coefficient k + off_i (nodes of no order, constants and t, kept).

        One column block written in place per run of rows with one offset
        (:attr:`offset_runs`: a few), not a select over the whole table.  A
        stage below a run's offset (k + off < 0) stores nothing.
        """
        zero = jnp.zeros((), jnp.asarray(k).dtype)
        for a, b, off in self.offset_runs:
            m = k + off
            col = jnp.clip(m, 0, self.K - 1) + zero
            start = (a + zero, col) + (zero,) * (C.ndim - 2)
            new = R[a:b, None]
            if self.k_start + off < 0:  # a negative stage reaches this run's order 0 from below
                old = lax.dynamic_slice(C, start, new.shape, allow_negative_indices=False)
                new = jnp.where(m >= 0, new, old)
            C = lax.dynamic_update_slice(C, new.astype(C.dtype), start, allow_negative_indices=False)
        return C

    def residual(self, C, k):
        """Coefficient ``k + c_i`` of every series equation (0 for constant equations), k >= 0.

        ``C`` (a table, or a pass's :class:`View` of one) may carry a batch
        on its last axis; so does the result.
        """
        parts, order = [], []
        V = C if isinstance(C, View) else View(C)
        for cc, (sel, op) in self.outputs.items():
            parts.append(op.at(V, k + cc, self.K))
            order.append(sel)
        if not parts:
            return jnp.zeros(self.dae.n, jnp.float64)
        idx = np.concatenate(order)
        vals = jnp.concatenate(parts)
        if idx.size == self.dae.n:
            return vals[np.argsort(idx)]
        return jnp.zeros((self.dae.n,) + vals.shape[1:], jnp.float64).at[idx].set(vals)

    def negative_stages(self, C, Xf):
        """Stages k_start .. -1: the coefficients below every node's offset."""
        if self.k_start >= 0:
            return C
        return self._negative(C, Xf)

    def stage0_residual(self, C, Xf, u):
        """The residual of stage 0 (coefficients c_i) with its unknowns ``X[d_j, j] = u_j``.

        Args:
            C: the table after :meth:`negative_stages`.
            Xf: the variables' coefficients (the state's rows).
            u: the leading derivatives.
        """
        return self._stage0_residual(C, Xf, u)

    def positive_stages(self, C, Xf, fact, solve_fn):
        """Stages 1..p: commit stage k − 1, residual pass of stage k, solve, set its unknowns.

        Args:
            C: the table after :meth:`negative_stages`.
            Xf: the variables' coefficients with stage 0's unknowns set.
            fact: the stage solver's factorisation (a pytree of arrays).
            solve_fn: ``solve_fn(fact, r)``, the stage solve.

        Returns:
            ``Xf`` with every stage's unknowns (orders up to p + d_j).
        """
        if solve_fn not in self._positive:
            self._positive[solve_fn] = batch_last(
                lambda C_, X_, f_, batched: self._positive_native(C_, X_, f_, solve_fn, batched),
                (True, True, False), (True,))
        return self._positive[solve_fn](C, Xf, fact)

    # ------------------------------------------------------------ native passes (batch last)
    def _negative_native(self, C, Xf, batched):
        return lax.fori_loop(self.k_start, 0, lambda k, CC: self._stage_native(CC, Xf, k), C)

    def _set_stage_native(self, Xf, k, u):
        d = self.prog.d
        trail = (1,) * (Xf.ndim - 2)
        zero = jnp.zeros((), jnp.asarray(k).dtype)
        for dd in np.unique(d):
            sel = d == dd
            row = k + int(dd)
            if sel.all():
                val = u
            else:
                old = row_at(Xf, row, self.KX)
                val = jnp.where(jnp.asarray(sel).reshape((-1,) + trail), u, old)
            Xf = lax.dynamic_update_slice(Xf, val[None].astype(Xf.dtype),
                                          (jnp.clip(row, 0, self.KX - 1) + zero,) + (zero,) * (Xf.ndim - 1),
                                          allow_negative_indices=False)
        return Xf

    def _stage0_residual_native(self, C, Xf, u, batched):
        return self.residual(self._stage_native(C, self._set_stage_native(Xf, 0, u), 0), 0)

    def _positive_native(self, C, Xf, fact, solve_fn, batched):
        c, d = self.prog.c, self.prog.d
        trail = (1,) * (Xf.ndim - 2)
        if batched:
            solve = lambda r: jax.vmap(solve_fn, in_axes=(0, 1), out_axes=1)(fact, r)
        else:
            solve = lambda r: solve_fn(fact, r)

        def ratio(k, offs):
            # Π_{s=1}^{off} (k+s)/s = C(k + off, off)
            out = jnp.ones(offs.shape)
            for s in range(1, int(offs.max()) + 1 if offs.size else 1):
                out = out * jnp.where(s <= offs, (k + s) / s, 1.0)
            return out.reshape((-1,) + trail)

        def stage_k(k, carry):
            # The residual pass of stage k (its unknowns still zero), the
            # solve, then the pass committed: slope x change (_commit).
            Xf, C = carry
            V = self._stage_pass(C, Xf, k)  # merged with its change, once (_commit)
            y = solve(ratio(k, c) * self.residual(V, k))
            du = -y / ratio(k, d)
            return self._set_stage_native(Xf, k, du), self._commit(V, k, du)

        C = self._stage_native(C, Xf, 0)  # stage 0, its unknowns set by the Newton iteration
        Xf, _ = lax.fori_loop(1, self.prog.p + 1, stage_k, (Xf, C))
        return Xf

    def _commit(self, V, k, du):
        """The table after stage k's residual pass, corrected for its unknowns ``du``.

        At stage k >= 1 each node's coefficient of order m = k + off is
        affine in the coefficients of order m of its operands (Faa di Bruno:
        z_m = f'(x_0) x_m + terms of lower orders), and only those of the
        operands at the node's own offset change between the passes (an
        operand at a larger offset changes at an order above m).  So the
        change D of every node follows from the unknowns' change by one
        linear pass over the groups, the slope taken at order 0; a
        recomputation would form every Cauchy sum again.

        Args:
            V: the residual pass of stage k (:meth:`_stage_pass`): the table
                (n_nodes, K, *B) and the pass's coefficients.
            k: the stage (>= 1).
            du: the stage's unknowns (n, *B); zero in the residual pass.

        Returns:
            The table with every node's order k + off coefficient, the pass's plus its change.
        """
        trail = V.C.shape[2:]
        D = jnp.zeros((self.n_nodes,) + trail, V.C.dtype)
        # The deltas read D and coefficient 0, which a stage k >= 1 does not compute.
        for g in self.inputs:
            # x_j^(l) at order m reads X[m + l]: the stage's unknown where off + l = d_j.
            hit = self.col_moves[g.start: g.start + g.size]
            if not hit.any():
                continue
            hit = hit.astype(np.float64).reshape((-1,) + (1,) * len(trail))
            m = k + g.off
            D = D.at[g.start: g.start + g.size].set(input_factor(m, g.param) * hit * du[np.asarray(g.ops[0])])
        for g in self.groups:
            delta = DELTA[g.kind](self, V, D, g, k + g.off)
            if delta is not None:
                D = D.at[g.start: g.start + delta.shape[0]].set(delta)
        return self._merge(V.C, V.R + D, k)

    def change(self, V, D, op: "Operand", off: int):
        """(G, *B): the change of an operand's coefficient of the order its group computes (None: none)."""
        same = (self.col_off[op.src] == off) & self.col_moves[op.src]
        if not same.any():
            return None
        vals = D[op.src] * same.reshape(same.shape + (1,) * (D.ndim - 1))
        return op.combine(V, vals, False)

    def cauchy(self, V, a: Operand, b: Operand, m, off: int, lo=0, top=0, weight=None):
        """Σ_{r=lo}^{m−top} w(r) a_r b_{m−r} for each member (w a function of r and m).

        Args:
            V: the pass's view of the table.
            a, b: the operands.
            m: the order computed, ``k + off``.
            off: the group's order offset.
            lo, top: the terms r < lo and r > m − top are left out.
            weight: ``w(r, m)``, or None for 1.

        The sum is formed on the table as the pass found it.  An operand's
        coefficients of order above m meet zeros, and this pass computes
        its coefficient k + off' (off' >= off, still zero in the table) for
        each term, so only a_m (term r = m, with b_0) and b_m (term r = 0,
        with a_0) of the terms at the group's offset are missing: added
        here, instead of merging the pass's column into every gathered row.
        """
        # The terms r > m meet the zeros b.shifted puts there, the terms r > m - top the
        # b_0 ... b_(top-1) it leaves out, and r < lo are cut off: a plain sum, no mask.
        tail = (1,) * (V.C.ndim - 2)
        mf = jnp.asarray(m, jnp.float64)
        A = a.cols(V)[:, lo:]
        if weight is not None:
            r = jnp.arange(lo, self.K).reshape((1, self.K - lo) + tail)
            A = A * weight(r.astype(jnp.float64), mf)
        s = jnp.sum(A * b.shifted(V, m, self.K, skip=top)[:, lo:], axis=1)

        def w(r):
            return 1.0 if weight is None else weight(jnp.full((1, 1) + tail, r, jnp.float64), mf)[:, 0]

        da = a.fresh(V, off) if top == 0 else None  # a_m, term r = m
        db = b.fresh(V, off) if lo == 0 else None  # b_m, term r = 0
        if da is not None:
            s = s + jnp.where(m >= lo, w(mf) * da * b.first(V), 0.0)
        if db is not None:
            s = s + jnp.where(m >= top, w(0.0) * a.first(V) * db, 0.0)
            if da is not None:  # m = 0: one term, a_0 b_0, both of this pass
                s = s + jnp.where(m == 0, w(0.0) * da * db, 0.0)
        return s
