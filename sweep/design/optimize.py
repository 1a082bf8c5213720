"""Kinematic design: fit design parameters so that a point's path follows a target curve.

The problem (objective, gradient, constraints at one design point) is
:mod:`sweep.design.problem`; this module optimises it from one or more
starts and gathers their results.

Each *start* (one optimisation from one initial point) is a task: in this
process (``workers=0``) or on a Dask cluster made as for sweeps
(:func:`sweep.run.dask_client`: a LocalCluster of single-threaded worker
processes by default, or a given scheduler).  Starts may be picked from a
sweep store (:func:`sweep.design.starts.rank_store`): the stored paths are
compared with the target and the best points start the optimiser.

A design point that fails to solve (no assembly, step too small) does not
stop the optimiser: the objective there is a large penalty with a zero
gradient, so a line search steps back; after
:data:`MAX_CONSECUTIVE_FAILURES` failed evaluations in a row the start stops
with status ``failed`` and the best design it had found.

History rows: for L-BFGS-B and SLSQP one row per accepted iterate (the
optimiser's callback), row 0 being the start; ``cyipopt.minimize_ipopt``
has no callback, so for ipopt one row per distinct objective evaluation
(IPOPT evaluates the objective about once per iteration, plus line-search
trials).

Progress lines (the starts chosen, each start's end) are ``INFO`` records of
the ``mechsweep.design`` logger (:mod:`sweep.log`).
"""

from __future__ import annotations

import math
import time
import traceback
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from solver import compile_clock, status as st
from solver.errors import InputError
from sweep.design.spec import DesignSpec, load_design
from sweep.design.record import check_history_out, history_dataset, history_png_path, plot_design, write_history
# Re-exported: the problem and the starts from a store were defined here
# before sweep.design.problem and sweep.design.starts.
from sweep.design.problem import (DesignContext, Evaluation, model_for, build_problem, evaluate,
                                  load_design_model)
from sweep.design.starts import explicit_starts, rank_store
from sweep.log import get_logger

__all__ = ["DesignContext", "Evaluation", "StartResult", "DesignResult", "build_problem",
           "evaluate", "run_start", "start_task", "rank_store", "run_design", "history_dataset",
           "write_history", "plot_design", "load_design_model", "MAX_CONSECUTIVE_FAILURES",
           "START_STATUSES"]

#: A start stops (status ``failed``) after this many failed evaluations in a row.
MAX_CONSECUTIVE_FAILURES = 8
#: What became of a start.
START_STATUSES = ("converged", "stopped", "failed", "error")

log = get_logger("design")


# ------------------------------------------------------------------ one start
@dataclass
class StartResult:
    """One optimisation from one initial point.

    Attributes:
        index: the start's number.
        x0: (n,) initial values; ``origin``: where they came from.
        x: (n,) the final design (the best successful one if the optimiser
            ended on a failed point); NaN when none solved.
        objective: J at ``x``.
        status: one of :data:`START_STATUSES`; ``message``: the optimiser's
            message or the reason of a failure.
        iterations: the optimiser's iterations; ``evaluations``: solves.
        seconds: wall time of the start.
        rows: history arrays: ``objective`` (R,), ``x`` (R, n),
            ``constraints`` (R, m), ``gradient_norm`` (R,), ``point_status``
            (R,) (solver status of each row's point).
        path: (T, k) the path at ``x``; ``constraints``: (m,) there.
        start_path: (T, k) the path at ``x0``.
        compile_seconds: the part of ``seconds`` JAX spent tracing and
            compiling (NaN: not measured, a start that raised).
    """

    index: int
    x0: np.ndarray
    x: np.ndarray
    objective: float
    status: str
    message: str
    iterations: int
    evaluations: int
    seconds: float
    rows: dict
    path: np.ndarray = field(repr=False, default=None)
    constraints: np.ndarray = field(repr=False, default=None)
    origin: str = "file"
    start_path: np.ndarray = field(repr=False, default=None)
    compile_seconds: float = math.nan

    def line(self, names: Sequence[str]) -> str:
        """One line for progress output."""
        values = ", ".join(f"{n} = {v:.10g}" for n, v in zip(names, self.x))
        return (f"start {self.index}: {self.status} after {self.iterations} iterations "
                f"({self.evaluations} solves, {self.seconds:.3g} s), objective {self.objective:.4g}"
                + (f", {values}" if np.all(np.isfinite(self.x)) else "")
                + (f" ({self.message})" if self.message and self.status != "converged" else ""))


class _StopStart(Exception):
    """Too many failed evaluations in a row: the start ends."""


class _Recorder:
    """Evaluations of one start, cached by x, as the optimisers' callables."""

    def __init__(self, context: DesignContext, model):
        self.context, self.model = context, model
        self.cache: "OrderedDict[bytes, Evaluation]" = OrderedDict()
        self.order: list[Evaluation] = []     # distinct evaluations in order
        self.rows: list[Evaluation] = []      # accepted iterates (scipy) or evaluations (ipopt)
        self.in_a_row = 0
        self.penalty = 1.0

    def get(self, x) -> Evaluation:
        x = np.asarray(x, dtype=float)
        key = x.tobytes()
        if key in self.cache:
            return self.cache[key]
        ev = evaluate(self.context, x, self.model)
        self.cache[key] = ev
        if len(self.cache) > 64:
            self.cache.popitem(last=False)
        self.order.append(ev)
        if ev.ok:
            self.in_a_row = 0
        else:
            self.in_a_row += 1
        return ev

    def fun(self, x):
        """(J, dJ/dx); a failed point gives the penalty with a zero gradient."""
        ev = self.get(x)
        if not ev.ok:
            if self.in_a_row >= MAX_CONSECUTIVE_FAILURES:
                raise _StopStart(f"{self.in_a_row} design points in a row failed to solve, the "
                                 f"last at {self._point(ev.x)}: {st.meaning(ev.status)}: "
                                 f"{ev.message}")
            return self.penalty, np.zeros(len(ev.x))
        return ev.objective, ev.gradient

    def con(self, x):
        """Inequality constraints as ``g(x) >= 0``: max − value and value − min."""
        ev = self.get(x)
        out = []
        for i, (*_, lo, hi) in enumerate(self.context.constraints):
            v = ev.constraints[i] if ev.ok else math.nan
            if hi is not None:
                out.append(hi - v if ev.ok else -1.0)
            if lo is not None:
                out.append(v - lo if ev.ok else -1.0)
        return np.array(out, dtype=float)

    def con_jac(self, x):
        """Derivatives of :meth:`con`."""
        ev = self.get(x)
        out = []
        for i, (*_, lo, hi) in enumerate(self.context.constraints):
            d = ev.constraint_jacobian[i] if ev.ok else np.zeros(len(ev.x))
            if hi is not None:
                out.append(-d)
            if lo is not None:
                out.append(d)
        return np.array(out, dtype=float).reshape(len(out), len(self.context.names))

    def callback(self, xk, *args):
        """scipy's per-iteration callback: an accepted iterate is a history row."""
        self.rows.append(self.get(xk))

    def _point(self, x) -> str:
        return ", ".join(f"{n} = {v:.6g}" for n, v in zip(self.context.names, x))


def run_start(context: DesignContext, x0, index: int = 0, model=None,
              origin: str = "file") -> StartResult:
    """Optimise from one initial point with the design's method.

    Args:
        context: from :func:`build_problem`.
        x0: (n,) initial values (inside the bounds).
        index: the start's number (for messages and the history).
        model: the model (default: this process's cached one).
        origin: where ``x0`` came from (for the report).

    Returns:
        :class:`StartResult`. A start whose initial point fails to solve, or
        that meets :data:`MAX_CONSECUTIVE_FAILURES` failed points in a row,
        has status ``failed`` (never an exception for a design that cannot
        run); its ``compile_seconds`` is measured here.
    """
    with compile_clock() as clock:
        result = _run_start(context, x0, index, model, origin)
    result.compile_seconds = min(clock.seconds, result.seconds)
    return result


def _run_start(context: DesignContext, x0, index: int, model, origin: str) -> StartResult:
    """:func:`run_start` without its compile clock."""
    t_start = time.perf_counter()
    model = model_for(context) if model is None else model
    rec = _Recorder(context, model)
    x0 = np.clip(np.asarray(x0, dtype=float), context.lower, context.upper)
    first = rec.get(x0)
    rec.rows.append(first)
    if not first.ok:
        return _finish(context, rec, index, x0, None, "failed",
                       f"the initial point does not solve ({st.meaning(first.status)}: "
                       f"{first.message})", 0, t_start, origin)
    # The penalty of a failed point: well above anything the start has seen,
    # so a line search steps back from it.
    rec.penalty = 10.0 * max(1.0, abs(first.objective))
    method = context.method
    result, status, message, iterations = None, "stopped", "", 0
    try:
        if method == "ipopt":
            from cyipopt import minimize_ipopt

            cons = ({"type": "ineq", "fun": rec.con, "jac": rec.con_jac},) \
                if context.constraints else ()
            # print_level 0 and sb (suppress banner) keep IPOPT silent, as in
            # solver/integrate/initialize.py.
            result = minimize_ipopt(rec.fun, x0, jac=True, bounds=context.bounds,
                                    constraints=cons, tol=context.tol,
                                    options={"max_iter": int(context.max_iterations),
                                             "print_level": 0, "sb": "yes"})
            code = int(result.status)
            status = "converged" if code in (0, 1) else "stopped"
            message = str(result.message.decode() if isinstance(result.message, bytes)
                          else result.message)
            iterations = int(getattr(result, "nit", 0) or 0)
            rec.rows = list(rec.order)   # no callback: every distinct evaluation is a row
        else:
            from scipy.optimize import minimize

            kw = {}
            if context.constraints:
                kw["constraints"] = [{"type": "ineq", "fun": rec.con, "jac": rec.con_jac}]
            with warnings.catch_warnings():
                # SLSQP warns when a bound is reached exactly: not a problem here.
                warnings.simplefilter("ignore", RuntimeWarning)
                result = minimize(rec.fun, x0, jac=True, method=method, bounds=context.bounds,
                                  tol=context.tol, callback=rec.callback,
                                  options={"maxiter": int(context.max_iterations)}, **kw)
            status = "converged" if result.success else "stopped"
            message = str(result.message)
            iterations = int(getattr(result, "nit", len(rec.rows) - 1))
    except _StopStart as stop:
        return _finish(context, rec, index, x0, None, "failed", str(stop),
                       len(rec.rows) - 1, t_start, origin)
    x = np.asarray(result.x, dtype=float)
    return _finish(context, rec, index, x0, x, status, message, iterations, t_start, origin)


def _finish(context, rec: _Recorder, index, x0, x, status, message, iterations, t_start,
            origin) -> StartResult:
    """The start's result: its final point (or best successful one) and history rows."""
    final = rec.get(x) if x is not None else None
    if final is None or not final.ok:
        good = [ev for ev in rec.order if ev.ok]
        final = min(good, key=lambda ev: ev.objective) if good else None
        if x is not None and status != "failed":
            status, message = "failed", (f"the optimiser ended on a design that does not solve; "
                                         f"kept the best one that does. {message}")
    if final is not None and rec.rows and not np.array_equal(rec.rows[-1].x, final.x):
        rec.rows.append(final)
    n, m = len(context.names), len(context.constraints)
    rows = {
        "objective": np.array([ev.objective for ev in rec.rows], dtype=float),
        "x": np.array([ev.x for ev in rec.rows], dtype=float).reshape(len(rec.rows), n),
        "constraints": np.array([ev.constraints for ev in rec.rows],
                                dtype=float).reshape(len(rec.rows), m),
        "gradient_norm": np.array([np.linalg.norm(ev.gradient) for ev in rec.rows], dtype=float),
        "point_status": np.array([ev.status for ev in rec.rows], dtype=np.int8),
    }
    nan_path = np.full((len(context.times), len(context.columns)), np.nan)
    return StartResult(
        index=index, x0=np.asarray(x0, dtype=float),
        x=final.x if final is not None else np.full(n, np.nan),
        objective=final.objective if final is not None else math.nan,
        status=status, message=message, iterations=int(iterations),
        evaluations=len(rec.order), seconds=time.perf_counter() - t_start, rows=rows,
        path=final.path if final is not None else nan_path,
        constraints=final.constraints if final is not None else np.full(m, np.nan), origin=origin,
        start_path=rec.order[0].path if rec.order else nan_path)


def start_task(context: DesignContext, index: int, x0, cache_dir: str | None = None,
               origin: str = "file") -> StartResult:
    """The Dask task of one start: :func:`run_start`, never raising.

    Args:
        context: from :func:`build_problem`.
        index: the start's number.
        x0: (n,) initial values.
        cache_dir: the persistent JAX compilation cache (set up here too, as
            for sweep batches).
        origin: where ``x0`` came from.

    Returns:
        :class:`StartResult`; an exception becomes status ``error`` with its
        message.
    """
    from sweep.run import configure_jax, default_jax_cache_dir

    configure_jax(cache_dir or default_jax_cache_dir())
    t = time.perf_counter()
    try:
        return run_start(context, x0, index, origin=origin)
    except Exception as exc:  # noqa: BLE001 - one start's failure is data, not a crash
        tb = traceback.format_exception(exc)
        return _error_result(context, index, x0, f"{type(exc).__name__}: {exc}; "
                             + "".join(tb[-2:]).strip(), time.perf_counter() - t, origin)


def _error_result(context, index, x0, message, seconds=0.0, origin="file") -> StartResult:
    n, m = len(context.names), len(context.constraints)
    empty = {"objective": np.zeros(0), "x": np.zeros((0, n)), "constraints": np.zeros((0, m)),
             "gradient_norm": np.zeros(0), "point_status": np.zeros(0, dtype=np.int8)}
    return StartResult(index, np.asarray(x0, dtype=float), np.full(n, np.nan), math.nan, "error",
                       message, 0, 0, seconds, empty,
                       np.full((len(context.times), len(context.columns)), np.nan),
                       np.full(m, np.nan), origin,
                       np.full((len(context.times), len(context.columns)), np.nan))


# ------------------------------------------------------------------ the driver
@dataclass
class DesignResult:
    """What :func:`run_design` did.

    Attributes:
        context: the :class:`DesignContext`; ``spec``: the design file.
        starts: one :class:`StartResult` per start, in start order.
        best: index of the best start (lowest objective among those that
            ended on a design that solves, feasible ones first), or None.
        wall_seconds: the whole run; ``notes``: remarks (store ranking).
        out: the history store written, or None; ``png``: its picture.
        compile_seconds, solve_seconds: the seconds JAX spent tracing and
            compiling, and the rest of the time spent on the reference
            design and the starts, this process's and the workers' summed
            (with starts in parallel they may add up to more than
            ``wall_seconds``).
    """

    context: DesignContext
    spec: DesignSpec
    starts: list
    best: int | None
    wall_seconds: float
    notes: list = field(default_factory=list)
    out: str | None = None
    png: str | None = None
    compile_seconds: float = 0.0
    solve_seconds: float = 0.0

    @property
    def best_parameters(self) -> dict:
        """name -> value of the best design ({} when no start succeeded)."""
        if self.best is None:
            return {}
        return {n: float(v) for n, v in zip(self.context.names, self.starts[self.best].x)}

    @property
    def best_objective(self) -> float:
        """The objective of the best design (NaN when none)."""
        return math.nan if self.best is None else float(self.starts[self.best].objective)

    def __str__(self) -> str:
        c = self.context
        lines = [f"{c.title}: {len(self.starts)} start{'' if len(self.starts) == 1 else 's'}, "
                 f"{c.method}, {self.wall_seconds:.3g} s"]
        counts = {s: sum(r.status == s for r in self.starts) for s in START_STATUSES}
        lines.append("starts: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v))
        if self.best is None:
            lines.append("no start ended on a design that solves")
        else:
            b = self.starts[self.best]
            lines.append(f"best: start {b.index} ({b.origin}), objective {b.objective:.6g} after "
                         f"{b.iterations} iterations ({b.evaluations} solves, {b.seconds:.3g} s), "
                         f"{b.status}")
            for n, v, x0 in zip(c.names, b.x, b.x0):
                lines.append(f"  {n} = {v:.12g}   (start {x0:.6g})")
            for (name, of, _, _, reduce, lo, hi), v in zip(c.constraints, b.constraints):
                bounds = " and ".join(s for s in ((f">= {lo:g}" if lo is not None else ""),
                                                  (f"<= {hi:g}" if hi is not None else "")) if s)
                lines.append(f"  constraint {name}: {reduce}({of}) = {v:.6g} (must be {bounds})")
        if self.out:
            lines.append(f"history: {self.out}")
        if self.png:
            lines.append(f"picture: {self.png}")
        return "\n".join(lines)


def run_design(design, out: str | None = None, starts=None, from_store: str | None = None,
               workers: int | None = None, scheduler: str | None = None,
               scheduler_file: str | None = None, cluster=None, overwrite: bool = False,
               plot: bool = True, echo: Callable[[str], None] | None = None,
               model=None) -> DesignResult:
    """Run a design file: one or more starts, optimised in parallel; history and picture.

    Args:
        design: a design file path or a :class:`~sweep.design.spec.DesignSpec`.
        out: the history store (``.zarr``) to write, or None.
        starts: with ``from_store``, how many of its best points to start
            from (default 1); without, None (one start at the file's start
            values) or a list of mappings parameter -> value (one start each).
        from_store: a sweep store whose best points start the optimiser.
        workers: Dask worker processes of a LocalCluster (default: one per
            core, at most one per start; a single start runs in this
            process); 0 runs the starts one after another in this process.
        scheduler, scheduler_file, cluster: run on that Dask cluster instead
            (as for sweeps).
        overwrite: replace an existing history store.
        plot: write ``OUT.png`` (needs ``out``).
        echo: where progress lines go (default: ``INFO`` records of the
            ``mechsweep.design`` logger, :mod:`sweep.log`).
        model: the built model (default :func:`load_design_model`).

    Returns:
        :class:`DesignResult`.

    Raises:
        InputError: a bad design file, store, options or output path.
    """
    from sweep.run import check_dask_target, dask_client, default_jax_cache_dir, local_cores

    t0 = time.perf_counter()
    echo = log.info if echo is None else echo
    spec = design if isinstance(design, DesignSpec) else load_design(design)
    if out is not None:
        check_history_out(out, overwrite)
    if workers not in (None, 0) and (not isinstance(workers, int) or workers < 0):
        raise InputError(f"workers must be a whole number >= 0, got {workers!r}")
    if workers != 0:
        check_dask_target(scheduler, scheduler_file, cluster)
    if from_store is None and starts is not None and not isinstance(starts, (list, tuple)):
        raise InputError("--starts K picks the K best points of a sweep store: give --from "
                         "STORE.zarr too (without it the design starts from its file's start values)")
    if from_store is not None and starts is not None and (
            isinstance(starts, bool) or not isinstance(starts, int) or starts < 1):
        raise InputError(f"--starts must be a whole number >= 1, got {starts!r}")
    model = load_design_model(spec) if model is None else model
    if spec.target.kind == "design":
        echo(f"solving the reference design for the target curve (the first solve compiles the "
             f"model with sensitivities: {model.dae.n} unknowns)")
    with compile_clock() as clock:
        context = build_problem(spec, model)
    notes: list[str] = []
    if from_store is not None:
        chosen, notes = rank_store(context, from_store, int(starts or 1))
        for x0, origin, err in chosen:
            echo(f"start from {origin}: " + ", ".join(f"{n} = {v:.6g}" for n, v in
                                                      zip(context.names, x0))
                 + f" (stored path's objective {err:.4g})")
    elif starts is not None:
        chosen = explicit_starts(context, starts)
    else:
        chosen = [(context.start.copy(), "file", math.nan)]
    for note in notes:
        echo(f"note: {note}")
    results: list[StartResult | None] = [None] * len(chosen)

    def done(res: StartResult) -> None:
        results[res.index] = res
        echo(f"[{sum(r is not None for r in results)}/{len(chosen)}] " + res.line(context.names))

    remote = bool(scheduler or scheduler_file or cluster)
    if workers is None and len(chosen) == 1 and not remote:
        # One start gains nothing from a cluster, and this process has the
        # model compiled already (the target's solve).
        workers = 0
    if workers == 0:
        for i, (x0, origin, _) in enumerate(chosen):
            try:
                res = run_start(context, x0, i, model, origin=origin)
            except Exception as exc:  # noqa: BLE001 - a start's failure never stops the others
                res = _error_result(context, i, x0, f"{type(exc).__name__}: {exc}", origin=origin)
            done(res)
    else:
        n = workers if workers else min(local_cores(), len(chosen))
        with dask_client(n, scheduler, scheduler_file, cluster) as client:
            from distributed import as_completed

            cache = default_jax_cache_dir()
            futures = {client.submit(start_task, context, i, x0, cache, origin, pure=False,
                                     key=f"mechsweep-design-start-{i}-{time.time_ns()}"): (i, x0, origin)
                       for i, (x0, origin, _) in enumerate(chosen)}
            for fut in as_completed(list(futures)):
                i, x0, origin = futures[fut]
                try:
                    res = fut.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker ends one start only
                    res = _error_result(context, i, x0, f"{type(exc).__name__}: {exc}",
                                        origin=origin)
                fut.release()
                done(res)
    result = DesignResult(context, spec, list(results), _best(context, results),
                          time.perf_counter() - t0, notes)
    result.compile_seconds, result.solve_seconds = _split(clock.wall_seconds, clock.seconds, results)
    if out is not None:
        write_history(result, out, overwrite=overwrite)
        result.out = str(out)
        if plot:
            result.png = plot_design(result, history_png_path(out))
    return result


def _split(problem_seconds: float, problem_compile: float, results) -> tuple[float, float]:
    """(compile, solve) seconds of the reference design's problem and of every start, summed."""
    compile_s = min(problem_compile, problem_seconds)
    solve_s = problem_seconds - compile_s
    for r in results:
        if r is None or not math.isfinite(r.seconds):
            continue
        c = r.compile_seconds if math.isfinite(r.compile_seconds) else 0.0
        compile_s += c
        solve_s += max(0.0, r.seconds - c)
    return compile_s, solve_s


def _best(context: DesignContext, results) -> int | None:
    """Lowest objective among starts that ended on a design that solves; feasible first."""
    def feasible(r):
        for (*_, lo, hi), v in zip(context.constraints, r.constraints):
            scale = 1e-6 * max(1.0, abs(v))
            if (lo is not None and v < lo - scale) or (hi is not None and v > hi + scale):
                return False
        return True

    good = [r for r in results if r is not None and r.status in ("converged", "stopped")
            and math.isfinite(r.objective)]
    if not good:
        good = [r for r in results if r is not None and math.isfinite(r.objective)]
    if not good:
        return None
    return min(good, key=lambda r: (not feasible(r), r.objective)).index
