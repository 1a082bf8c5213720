"""Events inside the step loop: detection on each accepted step, the step cut at a terminal event or impact, records.

:class:`EventStepper` is the integrator's collaborator for a DAE with
events (:class:`solver.dae.event.Event`).  After each accepted step
of size h from t it

1. forms every event's Taylor polynomial on the step from the solution's
   coefficients (:class:`solver.taylor.function_series.FunctionSeries`: the
   event functions' operations on the coefficient arrays, every order at
   once where an operation is linear or a product, by the Taylor
   recurrences where it is a nonlinear function);
2. skips the rest when a bound on the coefficients excludes a root, or no
   polynomial's Bernstein coefficients on the whole step change sign (no
   root: the common case), or the one crossing there is against the
   event's direction;
3. polishes the root directly where each changes sign at most once there
   (exactly one root: most steps with a crossing); otherwise isolates and
   polishes every crossing in the step
   (:func:`solver.integrate.roots.isolate_roots`), keeps those of the
   asked direction outside each event's cooldown, and finds the first
   crossing of a *terminal* event or of an impact (an event with a
   ``reset``);
4. cuts the step there: the state at the crossing from the Taylor
   polynomial, for an impact with the event's ``reset`` (the post-impact
   velocities) applied, projected onto the constraints, so the series
   restarts from a consistent state;
5. records every kept crossing up to the cut in time order: the event's
   index, its time, the values and derivatives of every variable there
   (before an impact's reset), the event function's rate dg/dt (for a
   stop, the normal velocity of approach) and an impact's impulse.

Records go into a fixed capacity (``max_events``); more occurrences are
counted, and the run's status becomes ``event_overflow`` at its end, never a
silent truncation.  Impacts of one stop closer together than its
``zeno_time`` mean impacts accumulate (a bouncing body coming to rest, Zeno
behaviour): the run ends there with status ``zeno``.
"""

from __future__ import annotations

import math

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver import status as st
from solver.errors import InputError
from solver.dae.event import DEFAULT_MAX_EVENTS, check_events
from solver.taylor.function_series import FunctionSeries, unsupported_operations
from solver.integrate.roots import (bernstein_pieces, clear_of_roots, earliest, fine_pieces, polished_roots,
                                   polynomial_value, root_brackets, single_root, whole_step)

__all__ = ["EventStepper", "DEFAULT_MAX_EVENTS", "SLOT_AXIS", "RECORDS_PER_STEP", "DEFAULT_COOLDOWN",
           "DEFAULT_ZENO_TIME", "check_taylor_arithmetic"]

#: The name of the slot axis of a batch's vmapped step (``jax.vmap(..., axis_name=SLOT_AXIS)``):
#: a batched step asks whether any slot has a crossing before it looks for them.
SLOT_AXIS = "slots"

#: Crossings recorded from one step; more in one step count as an overflow.
RECORDS_PER_STEP = 8

#: Default cooldown, relative to max(1, |t1|).
DEFAULT_COOLDOWN = 1e-9

#: Default Zeno interval of a stop, relative to max(1, |t1|).
DEFAULT_ZENO_TIME = 1e-5

#: How far past a switching surface (relative to the step) a cut step ends,
#: so that the next Taylor series is built on the new branch.
SWITCH_STEP = 1e-10

#: How many times a cut step may move on (ten times further each) to end on a switch's new side.
SWITCH_TRIES = 6


def check_taylor_arithmetic(fn, what: str):
    """Raise if ``fn(t)`` uses an operation without a Taylor rule (an event function's series).

    Args:
        fn: a function of time alone (the unknowns and parameters closed over).
        what: the function's name, for the message.

    Returns:
        ``fn``'s result's shape and dtype (``jax.ShapeDtypeStruct``), from the same trace.

    Raises:
        InputError: naming the operations that have no rule.
    """
    closed, out = jax.make_jaxpr(fn, return_shape=True)(np.zeros(()))
    missing = unsupported_operations(closed)
    if missing:
        raise InputError(f"{what} uses {', '.join(sorted(missing))}, which an event's Taylor series cannot go "
                         f"through; write it with + - * / **, sin, cos, tan, exp, log, sqrt, atan2, asin, acos, "
                         f"atan, tanh or abs")
    return out


class EventStepper:
    """Event detection and impacts for one integrator (see the module docstring).

    Args:
        integ: the :class:`~solver.integrate.integrator.Integrator`.
        events: the DAE's events.
        max_events: the record capacity.

    Raises:
        InputError: an event function that cannot be evaluated on the
            model's variables (its message names the event).
    """

    def __init__(self, integ, events, max_events: int = DEFAULT_MAX_EVENTS):
        self.integ = integ
        self.events = check_events(events)
        if int(max_events) < 1:
            raise InputError(f"max_events must be at least 1; got {max_events}")
        self.capacity = int(max_events)
        self.degree = integ.p
        self.keys = [(v.name, k) for v in integ.dae.variables for k in range(integ.out_orders[v.name])]
        # device_put, not jnp.asarray: the same arrays without a conversion
        # program compiled for each on a warm start's path (about 6 ms apiece).
        self.pieces = jax.device_put(bernstein_pieces(self.degree))
        self.fine = jax.device_put(fine_pieces(self.degree))
        self.whole = jax.device_put(bernstein_pieces(self.degree, 1)[0])
        self.signs = np.array([e.sign for e in self.events])
        self.cuts = np.array([e.terminal or e.reset is not None or e.kind == "switch" for e in self.events])
        self.switches = np.array([e.kind == "switch" for e in self.events])
        self.recorded = np.array([e.record for e in self.events])
        self.terminal = np.array([e.terminal for e in self.events])
        self.resets = [i for i, e in enumerate(self.events) if e.reset is not None]
        columns, _ = self._value_columns()
        self._columns = [(v.name, *columns[v.name], (self.capacity, integ.out_orders[v.name]) + v.shape)
                         for v in integ.dae.variables]
        #: Every event function's Taylor coefficients (see :meth:`coefficients`).
        self._series = self._function_series()

    # ------------------------------------------------------------- tracing
    def _function_series(self) -> FunctionSeries:
        """Every event function of (t, the state's values, the parameters), traced once together.

        The one trace also checks every function (:meth:`_event_values`).

        Raises:
            InputError: an event that reads what the state does not hold,
                returns a non-scalar, or uses an operation without a Taylor
                rule; the message names it.
        """
        dae = self.integ.dae
        self._param_names = list(dae.params)
        n = len(self.keys)
        zeros = lambda shape: jax.device_put(np.zeros(shape))  # no fill program compiled, as jnp.zeros would
        args = ([zeros(())] + [zeros(dae.var_index[name].shape) for name, _ in self.keys]
                + [jax.device_put(np.asarray(dae.params[k], np.float64)) for k in self._param_names])

        def every_event(t, *rest):
            return self._event_values(t, rest[:n], dict(zip(self._param_names, rest[n:])))

        closed = jax.make_jaxpr(every_event)(*args)
        try:
            return FunctionSeries(closed, [True] * (1 + n) + [False] * len(self._param_names), self.degree)
        except ValueError:
            params = dict(zip(self._param_names, args[1 + n:]))
            for e in self.events:  # which one: a trace of each
                check_taylor_arithmetic(lambda t, e=e: e.fn(t, self._values(args[1:1 + n]), params),
                                        f"event {e.name!r}")
            raise

    def _values(self, xs):
        v = {}
        for (name, _), x in zip(self.keys, xs):
            v.setdefault(name, []).append(x)
        return v

    def _event_values(self, t, xs, params):
        """Every event function's value at t, from the values ``xs`` of :attr:`keys` (one scope serves them all).

        Raises:
            InputError: (when traced) an event that reads what the state does
                not hold or returns a non-scalar; the message names it.
        """
        v = self._values(xs)
        dt = jnp.result_type(float)
        values = []
        for e in self.events:
            try:
                value = e.fn(t, v, params)
            except (IndexError, KeyError) as exc:
                orders = ", ".join(f"{n} up to derivative {self.integ.out_orders[n] - 1}"
                                   for n in self.integ.out_orders)
                raise InputError(f"event {e.name!r} reads a value the state does not hold ({exc}); "
                                 f"an event may read {orders}") from None
            if jnp.shape(value) != ():
                raise InputError(f"event {e.name!r} must return a scalar; it returns shape {jnp.shape(value)}")
            values.append(jnp.asarray(value, dt))
        return jnp.stack(values)

    # ------------------------------------------------------------- the state
    # The records are one array of rows (which, time, rate, impulse, then every
    # variable's values and derivatives, flat): a step loop whose carry holds
    # many arrays is not compiled whole by XLA:CPU, and ran slower.
    _WHICH, _TIME, _RATE, _IMPULSE, _VALUES = 0, 1, 2, 3, 4

    def _value_columns(self):
        out, at = {}, self._VALUES
        for v in self.integ.dae.variables:
            size = self.integ.out_orders[v.name] * v.size
            out[v.name] = (at, at + size)
            at += size
        return out, at

    def _empty_rows(self, shape: tuple):
        _, width = self._value_columns()
        rows = jnp.full(shape + (width,), jnp.nan)
        return rows.at[..., self._WHICH].set(-1.0)

    def empty(self, lead: tuple = ()) -> dict:
        """The records of runs that have seen no event (``lead``: batch axes).

        The rows are the capacity and :data:`RECORDS_PER_STEP` more: a step
        writes its block of rows where the records end, unconditionally, and
        what falls past the capacity lands there (dropped by :meth:`unpack`).
        """
        rows = self._empty_rows(lead + (self.capacity + RECORDS_PER_STEP,))
        return {"count": jnp.zeros(lead, jnp.int32), "rows": rows,
                "last": jnp.full(lead + (len(self.events),), -jnp.inf)}

    def unpack(self, ev) -> dict:
        """The records as named arrays: ``count``, ``which``, ``time``, ``rate``, ``impulse``, ``values``.

        Args:
            ev: the records (any leading axes): traced arrays inside a
                transformation, else concrete ones (unpacked with NumPy, no
                program of its own).

        Returns:
            dict; ``values`` maps each variable to (..., capacity, L, *shape).
        """
        rows = ev["rows"]
        if not isinstance(rows, jax.core.Tracer):
            rows = np.asarray(rows)
        rows = rows[..., :self.capacity, :]
        lead = rows.shape[:-2]
        # Empty rows hold which = -1 (see empty()).
        out = {"which": rows[..., self._WHICH].astype(np.int32), "time": rows[..., self._TIME],
               "rate": rows[..., self._RATE], "impulse": rows[..., self._IMPULSE],
               "values": {name: rows[..., a:b].reshape(lead + shape) for name, a, b, shape in self._columns}}
        if "count" in ev:
            out["count"] = ev["count"]
        return out

    def final_status(self, status, ev):
        """``status`` with ``event_overflow`` where a finished run saw more events than it could keep."""
        over = ev["count"] > self.capacity
        return jnp.where((status == st.SUCCESS) & over, jnp.int8(st.EVENT_OVERFLOW), status).astype(jnp.int8)

    # ------------------------------------------------------------- series
    def coefficients(self, X, t, params):
        """(events, P + 1) normalised Taylor coefficients of every g(t + s) in s.

        From the solution's coefficients by the events' :class:`~solver.taylor.function_series.FunctionSeries`:
        the coefficient of s^j in x^(k)(t + s) is X[k + j] (k + j)! / j!.
        """
        P = self.degree
        dt = jnp.result_type(float)
        fact = np.array([float(math.factorial(m)) for m in range(self.integ.KX)])
        inputs = [jnp.zeros((P + 1,), dt).at[0].set(t).at[1].set(1.0)]
        for name, k in self.keys:
            A = X[name][k:k + P + 1]
            if k:
                ratio = fact[k:k + P + 1] / fact[:P + 1]
                A = A * jnp.asarray(ratio, dt).reshape((-1,) + (1,) * (A.ndim - 1))
            inputs.append(A)
        inputs += [jnp.asarray(params[k], dt) for k in self._param_names]
        series, = self._series(inputs)
        return series.T

    # ------------------------------------------------------------- the step
    def on_step(self, X, t, h, zq, uq, good, params, consts, ev, t1, batched=False):
        """Events of the step of h from t (see the module docstring).

        ``batched``: the step is vmapped over a batch's slots (axis
        :data:`SLOT_AXIS`), where a ``lax.cond`` on a slot's value computes
        both branches; its conds then ask whether any slot needs a branch.
        A step whose events cross at most once each takes the quick way
        (:func:`~solver.integrate.roots.single_root`), in a batch as in a
        single run, so that a point's records do not depend on its batch.

        Returns:
            (h, z, u, ev, status): the step (cut at a terminal event or an
            impact), the state after it, the records, and ``stopped_by_event``
            / ``zeno`` where the run ends at the event (else -1).
        """
        integ = self.integ
        dt = jnp.result_type(float)
        n_ev = len(self.events)
        scale = jnp.maximum(1.0, jnp.abs(t1))
        C = self.coefficients(X, t, params)
        cooldown = jnp.asarray([DEFAULT_COOLDOWN if e.cooldown is None else e.cooldown for e in self.events],
                               dt) * jnp.where(jnp.asarray([e.cooldown is None for e in self.events]), scale, 1.0)
        last = ev["last"]
        # An event that fired where this step starts (the step before was cut
        # there) has g ~ 0 at u = 0: its other roots are those of g / u, whose
        # sign is g's on (0, 1].  Without this deflation a short excursion
        # (a low bounce: up at 0, down soon after) would put two roots in one
        # piece.
        at_start = (t - last) <= cooldown

        def deflated(c):
            return jnp.where(at_start[:, None], jnp.concatenate([c[:, 1:], jnp.zeros_like(c[:, :1])], axis=1), c)

        def scaled():
            # g's coefficients in u = s / h on [0, 1], deflated; built only
            # where a root is possible (XLA:CPU makes each product of the
            # powers' chain a kernel of its own).
            powers = [jnp.ones_like(h)]
            for _ in range(self.degree):  # products: XLA:CPU calls libm's pow one element at a time
                powers.append(powers[-1] * h)
            return deflated(C * jnp.stack(powers))

        # Most steps: no root possible by a bound on g's coefficients
        # (clear_of_roots; a deflated polynomial's test is that of its
        # coefficients divided by h, the same inequality).
        possible = good & ~jnp.all(clear_of_roots(deflated(C), h))

        M = RECORDS_PER_STEP

        def detect(last, found, u, sign):
            # found, u, sign: (events, L) crossings, the earliest first.
            L = found.shape[1]
            s = u * h
            signs = jnp.asarray(self.signs)[:, None]
            keep = found & ((signs == 0) | (sign == signs)) & ((t + s) - last[:, None] >= cooldown[:, None])
            s_cut_all = jnp.where(keep & jnp.asarray(self.cuts)[:, None], s, jnp.inf).reshape(-1)
            first = jnp.argmin(s_cut_all)
            s_cut, which = s_cut_all[first], (first // L).astype(jnp.int32)
            seen = keep & (s <= s_cut)
            rec = seen & jnp.asarray(self.recorded)[:, None]
            flat = jnp.where(rec, s, jnp.inf).reshape(-1)
            pick = earliest(flat, rec.reshape(-1), M)   # (M, events * L) one-hots
            ok = pick.sum(axis=1) > 0
            s_at = jnp.where(ok, pick @ jnp.where(rec.reshape(-1), flat, 0.0), 0.0)
            e_m = (pick @ (jnp.arange(flat.shape[0]) // L).astype(dt)).astype(jnp.int32)
            vals = jax.vmap(integ.dense, in_axes=(None, 0))(X, s_at)
            _, rate = polynomial_value(jnp.einsum("me,ek->mk", jax.nn.one_hot(e_m, n_ev, dtype=dt), C), s_at)
            row = [e_m.astype(dt)[:, None], (t + s_at)[:, None], rate[:, None], jnp.full((M, 1), jnp.nan, dt)]
            row += [vals[v.name].reshape(M, -1) for v in integ.dae.variables]
            block = jnp.where(ok[:, None], jnp.concatenate(row, axis=1), self._empty_rows((M,)))
            t_seen = jnp.max(jnp.where(seen, t + s, -jnp.inf), axis=1)
            if self.switches.any():
                # Past a switch: the next series takes the new branch
                # (piecewise functions branch on their arguments' values there).
                s_cut = jnp.where(jnp.asarray(self.switches)[which],
                                  self._past_switch(X, t, h, C, params, s_cut, which), s_cut)
            return s_cut, which, block, jnp.sum(rec).astype(jnp.int32), jnp.maximum(last, t_seen)

        def do_cut(s_cut, which):
            # An impact's reset applies to the polynomial's state at the
            # crossing, and one projection serves both: the reset's law reads
            # the positions there (within the step's tolerance of the
            # constraints), the projection then moves positions and
            # velocities onto them together.  Projecting before and after a
            # reset was a fifth of the event step's compile.
            zc, uc = integ.advance_state(X, s_cut)
            impulse = jnp.asarray(jnp.nan, dt)
            if self.resets:
                branches = [lambda z: (z, jnp.asarray(jnp.nan, dt))] + [
                    self._reset_branch(i, t + s_cut, params) for i in self.resets]
                index = jnp.zeros((), jnp.int32)
                for b, i in enumerate(self.resets):
                    index = jnp.where(which == i, b + 1, index)
                zc, impulse = lax.switch(index, branches, zc)
            zc, _ = integ.project(zc, t + s_cut, consts)
            return zc, uc, impulse

        def nothing(last):
            return jnp.asarray(jnp.inf, dt), jnp.int32(0), self._empty_rows((M,)), jnp.int32(0), last

        def where_tree(flag, a, b):
            return jax.tree_util.tree_map(lambda x, y: jnp.where(flag, x, y), a, b)

        if batched:
            # A cond on a slot's own flag would be a select under vmap: every
            # slot would compute every branch on every step.  These conds ask
            # whether any slot needs their branch; each slot keeps its own.
            def needed(flag):
                return lax.pmax(flag.astype(jnp.int32), SLOT_AXIS) > 0
        else:
            def needed(flag):
                return flag

        # Where a root is possible: the whole step's Bernstein test, and the
        # pieces where an event may cross more than once (rare); then the
        # quick way where each crosses at most once (a slot's records then
        # do not depend on its batch), with the records; then the cut.
        # The records' and the cut's conds come one after the other: with the
        # records' cond inside another, XLA:CPU's quick build (LLVM at -O0)
        # lost a step's record in tests/test_events.py (cause not found).
        # The pieces' cond sits inside the test's, the refinement's
        # (root_brackets, lazy) inside the pieces'.
        L = RECORDS_PER_STEP + 1

        def no_crossings():
            return (jnp.zeros((n_ev, L), bool), jnp.zeros((n_ev, L), dt), jnp.ones((n_ev, L), jnp.int32))

        def single_crossings():
            found, u, sign = single_root(Cu, Bw)
            pad = [(0, 0), (0, L - 1)]
            return jnp.pad(found, pad), jnp.pad(u, pad), jnp.pad(sign.astype(jnp.int32), pad, constant_values=1)

        def all_crossings(Cu):
            found, sign, brackets = root_brackets(Cu, self.pieces, self.fine, L, lazy=not batched)
            return found, polished_roots(Cu, *brackets), sign.astype(jnp.int32)

        def examine(_):
            # No sign change of the Bernstein coefficients on the whole step:
            # no root there; only the others go on to the pieces.
            Cu = scaled()
            Bw, simple = whole_step(Cu, self.whole)
            # One crossing (simple) against the event's direction is no record
            # and no cut: such steps (half of a periodic motion's) stop here.
            signs = jnp.asarray(self.signs)
            wanted = ~simple | (signs == 0) | (jnp.sign(Bw[:, -1]) == signs)
            maybe = possible & jnp.any((jnp.min(Bw, axis=1) < 0) & (jnp.max(Bw, axis=1) >= 0) & wanted)
            pieces = maybe & ~jnp.all(simple)
            hard = lax.cond(needed(pieces), lambda _: where_tree(pieces, all_crossings(Cu), no_crossings()),
                            lambda _: no_crossings(), None)
            return Cu, Bw, maybe, maybe & jnp.all(simple), hard

        def clear(_):
            return jnp.zeros_like(C), jnp.zeros_like(C), jnp.asarray(False), jnp.asarray(False), no_crossings()

        Cu, Bw, maybe, single, hard = lax.cond(needed(possible), examine, clear, None)

        def records(last):
            crossings = where_tree(single, single_crossings(), hard)
            return where_tree(maybe, detect(last, *crossings), nothing(last))

        # The step's records are a block of M rows, built in the branch; the
        # record buffer stays out of every branch and takes the block in one
        # update (selections over the whole buffer cost a step with a
        # crossing more the larger the capacity).  One branch serves steps
        # whose events cross once (the quick way) and those with more
        # crossings: a second copy of the records for the first kind, with
        # fewer rows, was a tenth of the run program's compile.
        s_cut, which, block, n_new, last_new = lax.cond(needed(maybe), records, nothing, last)
        cut = jnp.isfinite(s_cut)
        z, u = zq, uq
        if self.cuts.any():
            kept = (zq, uq, jnp.asarray(jnp.nan, dt))
            z, u, impulse = lax.cond(needed(cut), lambda _: where_tree(cut, do_cut(s_cut, which), kept),
                                     lambda _: kept, None)
            if self.resets:
                # The cut event is the last record of the step.
                at = (jnp.arange(M) == n_new - 1)[:, None] & \
                    (jnp.arange(block.shape[1]) == self._IMPULSE)[None, :]
                block = jnp.where(cut & at, impulse, block)
        # The block goes where the records end (past the capacity: into the
        # spare rows, see empty()); its unused rows are empty rows, as are
        # those it covers.  More than M in one step count as an overflow.
        start = jnp.minimum(ev["count"], self.capacity)
        if batched:
            # Under vmap a slot's own position makes the update a scatter,
            # which keeps XLA:CPU from compiling the step loop whole: a
            # selection of the block's rows instead.
            r = jnp.arange(ev["rows"].shape[0]) - start
            rows = jnp.where(((r >= 0) & (r < M))[:, None], block[jnp.clip(r, 0, M - 1)], ev["rows"])
        else:
            rows = lax.dynamic_update_slice(ev["rows"], block, (start, jnp.zeros_like(start)),
                                            allow_negative_indices=False)
        ev = {"rows": rows,
              "count": ev["count"] + jnp.where(n_new > M, n_new + self.capacity, n_new), "last": last_new}
        h = jnp.where(cut, s_cut, h)
        status = jnp.where(cut & jnp.asarray(self.terminal)[which], jnp.int8(st.STOPPED_BY_EVENT), jnp.int8(-1))
        if self.resets:
            zeno_time = jnp.asarray([(DEFAULT_ZENO_TIME if getattr(e, "zeno_time", None) is None else e.zeno_time)
                                     for e in self.events], dt)
            relative = jnp.asarray([getattr(e, "zeno_time", None) is None for e in self.events])
            zeno_time = zeno_time * jnp.where(relative, scale, 1.0)
            is_reset = jnp.asarray([e.reset is not None for e in self.events])[which]
            plastic = jnp.stack([jnp.reshape(e.restitution(params), ()) <= 0 if e.restitution is not None
                                 else jnp.asarray(False) for e in self.events])[which]
            zeno = cut & is_reset & (((t + s_cut) - last[which] < zeno_time[which]) | plastic)
            status = jnp.where(zeno, jnp.int8(st.ZENO), status)
        return h, z, u, ev, status

    def _past_switch(self, X, t, h, C, params, s_root, which):
        """Where a step cut at switch ``which`` (crossing at ``s_root``) ends: past it, on the new side.

        A hair past the root (:data:`SWITCH_STEP` of the step) is enough
        where the state there is as accurate as the root.  It is not always:
        the root is that of g's Taylor polynomial, the next step's branch is
        chosen by g of the state (the solution's polynomial there), and the
        two differ by about the series' truncation error.  A state still on
        the old side would start the next series on the old branch, with the
        crossing at its start taken as the one already found: a whole step
        on the wrong branch (the undamped car's tyre found a centimetre in
        the ground; workflows/benchmarks/bench_switch_robustness.py).  So g is
        evaluated at the state, and the cut moves on, ten times further each
        time, until g has the sign of its rate at the root (at most
        :data:`SWITCH_TRIES` times, and never past the step).
        """
        dt = jnp.result_type(float)
        hair = SWITCH_STEP * jnp.maximum(h, 1e-300)
        _, rate = polynomial_value(C[which], s_root)
        side = jnp.sign(rate)

        def g_at(s):
            values = self.integ.dense(X, s)
            return self._event_values(t + s, [values[name][k] for name, k in self.keys], params)[which]

        def on_old_side(s):
            return jnp.sign(g_at(s)) != side

        def cond(c):
            s, tries, old_side = c
            return old_side & (tries < SWITCH_TRIES)

        def body(c):
            s, tries, _ = c
            s = jnp.minimum(s_root + hair * 10.0 ** (tries + 1).astype(dt), h)
            return s, tries + 1, on_old_side(s) & (s < h)

        s0 = s_root + hair
        start = jnp.isfinite(s_root) & (side != 0) & on_old_side(jnp.where(jnp.isfinite(s0), s0, 0.0))
        s, _, _ = lax.while_loop(cond, body, (s0, jnp.int32(0), start))
        return s

    def _reset_branch(self, i, t_star, params):
        integ = self.integ
        e = self.events[i]

        def branch(z):
            X = integ.X_from_state(z)
            v = {name: [X[name][k] * math.factorial(k) for k in range(integ.out_orders[name])]
                 for name in integ.out_orders}
            new = e.reset(t_star, v, params)
            new, impulse = new if isinstance(new, tuple) else (new, jnp.nan)
            Xn = dict(X)
            for name, derivs in new.items():
                A = X[name]
                for k, val in enumerate(derivs):
                    A = A.at[k].set(jnp.reshape(val, A.shape[1:]) / math.factorial(k))
                Xn[name] = A
            zr = integ.state_from_X(Xn)
            return zr, jnp.reshape(jnp.asarray(impulse, zr.dtype), ())

        return branch
