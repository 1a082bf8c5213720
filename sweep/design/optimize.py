"""Kinematic design: fit design parameters so that a point's path follows a target curve.

The objective is the time-parametrised tracking error of a design file
(:mod:`sweep.design.spec`): with output times t_1..t_T over the model's
[t0, tend],

    J(p) = mean_i |P(t_i; p) - R(t_i)|²

where P is the path (a vector variable, components, or a list of them) and R
the target curve.  Its gradient comes from the design sensitivities of one
forward-mode run (:mod:`solver.integrate.sensitivity`): ∂J/∂p_j = mean_i 2 (P − R)·∂P/∂p_j,
so each optimiser step costs one solve with ``sensitivities=`` (about 1 + the
number of parameters plain runs), never finite differences.  Constraints are
sweep-style metrics (``{of, reduce}``) with bounds, differentiated by
:func:`solver.integrate.sensitivity.metric_tangent`.

Each *start* (one optimisation from one initial point) is a task: in this
process (``workers=0``) or on a Dask cluster made as for sweeps
(:func:`sweep.run.dask_client`: a LocalCluster of single-threaded worker
processes by default, or a given scheduler).  Starts may be picked from a
sweep store (:func:`rank_store`): the stored paths are compared with the
target and the best points start the optimiser.

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
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import solver
from solver import status as st
from solver.errors import InputError
from solver.models.expr import evaluate_constant, parse
from solver.integrate.sensitivity import metric_tangent, sensitivity_name
from sweep import pipeline
from sweep.design.spec import DesignSpec, load_design
from sweep.design.record import check_history_out, history_dataset, history_png_path, plot_design, write_history

__all__ = ["DesignContext", "Evaluation", "StartResult", "DesignResult", "build_problem",
           "evaluate", "run_start", "start_task", "rank_store", "run_design", "history_dataset",
           "write_history", "plot_design", "load_design_model", "MAX_CONSECUTIVE_FAILURES",
           "START_STATUSES"]

#: A start stops (status ``failed``) after this many failed evaluations in a row.
MAX_CONSECUTIVE_FAILURES = 8
#: What became of a start.
START_STATUSES = ("converged", "stopped", "failed", "error")



# ------------------------------------------------------------------ the problem
@dataclass
class DesignContext:
    """Everything a start needs, checked against the model (picklable: sent to workers).

    Attributes:
        title: the design's title.
        model_path: the model file; ``override``: merged into it.
        key: hash of model file, text and override (the worker's model cache key).
        names: the design parameters; ``start``, ``lower``, ``upper``: (n,) arrays.
        times: (T,) output times; ``target``: (T, k) the target curve there.
        columns: the path's k columns as (variable, component index or None).
        labels: the columns' names (``B[0]``, ``x``).
        constraints: (name, of, variable, component or None, reduce, min, max) each.
        method, max_iterations, tol: the optimiser's settings.
        design_path: the design file.
    """

    title: str
    model_path: str
    override: Any
    key: str
    names: list
    start: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    times: np.ndarray
    target: np.ndarray
    columns: list
    labels: list
    constraints: list
    method: str
    max_iterations: int
    tol: float
    design_path: str = ""

    @property
    def bounds(self) -> list[tuple[float, float]]:
        """``[(lo, hi), ...]`` per parameter."""
        return [(float(a), float(b)) for a, b in zip(self.lower, self.upper)]


def load_design_model(spec: DesignSpec):
    """The design's model (its file with ``Override``), from this process's cache or built.

    Returns:
        the :class:`solver.models.Model`; the same object for the same file,
        text and override, so its compiled state is reused.

    Raises:
        InputError: the model cannot be built (located in its file).
    """
    # The sweep pipeline's per-process model cache: one build (and compile) per model.
    return pipeline._model(spec.model_path, spec.override,
                           pipeline._model_key(spec.model_path, spec.model_text, spec.override))


def _model_for(context: DesignContext):
    return pipeline._model(context.model_path, context.override, context.key)


def _variables_text(dae) -> str:
    return ", ".join(v.name if v.shape == () else f"{v.name}[{v.size}]" for v in dae.variables)


def build_problem(spec: DesignSpec, model=None) -> DesignContext:
    """Check a design against its model and fix the output times and the target curve.

    Args:
        spec: from :func:`sweep.design.spec.load_design`.
        model: its model (default :func:`load_design_model`); a ``design``
            target is solved on it (the one compile the starts reuse when
            they run in this process).

    Returns:
        The :class:`DesignContext`.

    Raises:
        InputError: located in the design file: a parameter that is not a
            scalar free parameter of the model (listing them), bounds the
            model's value rules refuse, an unknown path variable or
            constraint target (listing the variables), a target with the
            wrong number of components, one that does not cover the output
            times, an expression naming an unknown or a design parameter, or
            a reference design that does not solve.
    """
    model = load_design_model(spec) if model is None else model
    dae = model.dae
    free = model.params
    scalars = [k for k, v in free.items() if np.ndim(v) == 0]
    valid = ", ".join(scalars) or "none (the model has no free PhysicalParams)"
    for name, p in spec.parameters.items():
        where = ("Parameters", name)
        if name not in free or np.ndim(free[name]) != 0:
            what = ("is a vector parameter" if name in free else
                    "is structural (it fixes the model's size)" if name in model.param_info.structural
                    else "is not a parameter")
            raise spec.error(f"'{name}' {what} of the model {spec.model_path}; design parameters "
                             f"are scalar parameters: {valid}", where)
        _check_rules(spec, model, name, p)
    columns, labels = _path_columns(spec, dae)
    times = np.linspace(model.t0, model.tend, spec.samples)
    constraints = []
    for cname, c in spec.constraints.items():
        target = pipeline._component_index(dae, c.of)
        if target is None:
            raise spec.error(f"unknown variable '{c.of}'; the model's variables are "
                             f"{_variables_text(dae)} (a whole vector means its norm)",
                             ("Constraints", cname, "of"))
        constraints.append((cname, c.of, target[0], target[1], c.reduce, c.min, c.max))
    names = spec.names
    context = DesignContext(
        title=spec.title, model_path=str(spec.model_path), override=spec.override,
        key=pipeline._model_key(spec.model_path, spec.model_text, spec.override), names=names,
        start=np.array([spec.parameters[n].start for n in names], dtype=float),
        lower=np.array([spec.parameters[n].lo for n in names], dtype=float),
        upper=np.array([spec.parameters[n].hi for n in names], dtype=float),
        times=times, target=np.zeros((len(times), len(columns))), columns=columns, labels=labels,
        constraints=constraints, method=spec.optimizer.method,
        max_iterations=spec.optimizer.max_iterations, tol=spec.optimizer.tol,
        design_path=str(Path(spec.path).resolve()))
    pipeline.remember_model(context.key, model)
    context.target = _target_curve(spec, model, context)
    return context


def _check_rules(spec: DesignSpec, model, name: str, p) -> None:
    """The model's value rules (positive lengths, masses) at the start and at both bounds."""
    from solver.models import ValueRangeError

    starts = {n: q.start for n, q in spec.parameters.items()}
    for value, key in ((p.start, ("start",)), (p.lo, ("bounds", 0)), (p.hi, ("bounds", 1))):
        try:
            model.check_values({**starts, name: value})
        except ValueRangeError as err:
            raise spec.error(f"{name} = {value:g} is out of range for the model: {err}; give "
                             f"values the model allows", ("Parameters", name) + key) from None


def _path_columns(spec: DesignSpec, dae) -> tuple[list, list]:
    """The path's columns (variable, component or None) and labels."""
    columns, labels = [], []
    for i, name in enumerate(spec.path_names):
        # a list's item has its own line; a single name is the key itself
        listed = spec.loc is not None and spec.loc.line(("Objective", "path", 0)) is not None
        where = ("Objective", "path", i) if listed else ("Objective", "path")
        found = pipeline._component_index(dae, name)
        if found is None:
            vec = next((v.name for v in dae.variables if v.shape != ()), None)
            example = f" such as {vec}[0]" if vec else ""
            raise spec.error(f"unknown variable '{name}' for the path; the model's variables are "
                             f"{_variables_text(dae)}; give a variable, a component{example}, or "
                             f"a list of them", where)
        var, idx = found
        v = dae.var_index[var]
        if idx is None and v.shape != ():
            for j in range(v.size):
                columns.append((var, j))
                labels.append(f"{var}[{j}]")
        else:
            columns.append((var, idx))
            labels.append(var if idx is None else f"{var}[{idx}]")
    dup = next((lab for j, lab in enumerate(labels) if lab in labels[:j]), None)
    if dup is not None:
        raise spec.error(f"the path names {dup} twice", ("Objective", "path"))
    return columns, labels


def _target_curve(spec: DesignSpec, model, context: DesignContext) -> np.ndarray:
    """The target curve at the output times: (T, k)."""
    tgt = spec.target
    k = len(context.columns)
    where = ("Objective", "target", tgt.kind)
    what = f"the path {', '.join(spec.path_names)} has {k} component{'' if k == 1 else 's'}"
    times = context.times
    if tgt.kind == "design":
        free = model.params
        for name in tgt.design:
            if name not in free or np.ndim(free[name]) != 0:
                raise spec.error(f"'{name}' is not a scalar parameter of the model "
                                 f"{spec.model_path}; the scalar parameters are "
                                 f"{', '.join(k for k, v in free.items() if np.ndim(v) == 0)}",
                                 where + (name,))
        ev = evaluate(context, np.array([tgt.design.get(n, spec.parameters[n].start)
                                         for n in context.names]), model,
                      extra=dict(tgt.design), curve=False)
        if ev.status != st.SUCCESS:
            raise spec.error(f"the reference design does not solve ({st.meaning(ev.status)}: "
                             f"{ev.message}); give parameter values the model can run", where)
        return ev.path
    if tgt.kind in ("samples", "csv"):
        points = tgt.points
        if points.shape[1] != k:
            raise spec.error(f"each point must have {k} value{'' if k == 1 else 's'} ({what}), "
                             f"got {points.shape[1]}", where)
        slack = 1e-9 * max(1.0, abs(times[-1]), abs(times[0]))
        if tgt.t[0] > times[0] + slack or tgt.t[-1] < times[-1] - slack:
            raise spec.error(f"the target's times cover t = {tgt.t[0]:g} .. {tgt.t[-1]:g}, but "
                             f"the output times run over t = {times[0]:g} .. {times[-1]:g} (the "
                             f"model's t0 .. tend); give samples over the whole span or set "
                             f"tend in Override", where)
        return np.stack([np.interp(times, tgt.t, points[:, j]) for j in range(k)], axis=1)
    return _expression_curve(spec, model, context, where, what)


def _expression_curve(spec, model, context, where, what) -> np.ndarray:
    """An ``expression`` target evaluated at each output time (numpy, no ``eval``)."""
    tgt = spec.target
    k = len(context.columns)
    items = tgt.expression if isinstance(tgt.expression, list) else [tgt.expression]
    known = model.all_params()
    for i, item in enumerate(items):
        sub = where + (i,) if isinstance(tgt.expression, list) else where
        names = parse(item).names() if isinstance(item, str) else set()
        for name in sorted(names):
            if name in spec.parameters:
                raise spec.error(f"the target may not depend on a design parameter ('{name}'): "
                                 f"it would move with the design; write its value instead", sub)
            if name != "t" and name not in known:
                raise spec.error(f"unknown name '{name}'; the target may use t and the model's "
                                 f"parameters: {', '.join(['t'] + list(known))}", sub)
    loc = spec.loc
    rows = []
    for ti in context.times:
        scope = {**known, "t": float(ti)}
        value = evaluate_constant(tgt.expression, scope, file=loc.file if loc else None,
                                  path=".".join(map(str, where)), line=loc.nearest(where) if loc
                                  else None)
        value = np.atleast_1d(np.asarray(value, dtype=float))
        if value.shape != (k,):
            raise spec.error(f"the expression gives {value.size} value"
                             f"{'' if value.size == 1 else 's'} ({what}); give one expression "
                             f"per component, e.g. a list of {k}", where)
        rows.append(value)
    return np.array(rows, dtype=float)


# ------------------------------------------------------------------ evaluation
@dataclass
class Evaluation:
    """Objective, gradient and constraints at one design point.

    Attributes:
        x: (n,) the design parameters.
        objective: J(x) (NaN when the point failed).
        gradient: (n,) dJ/dx.
        constraints: (m,) the constraint metrics' values.
        constraint_jacobian: (m, n) their derivatives.
        status: the solver's status code (0 success; ``no_assembly`` where
            the design cannot be assembled).
        message: why it failed ("" on success).
        path: (T, k) the path at the output times.
    """

    x: np.ndarray
    objective: float
    gradient: np.ndarray
    constraints: np.ndarray
    constraint_jacobian: np.ndarray
    status: int
    message: str
    path: np.ndarray = field(repr=False, default=None)

    @property
    def ok(self) -> bool:
        """Whether the point solved."""
        return self.status == st.SUCCESS


def _series(ds, var: str, idx, param: str | None = None, norm: bool = False) -> np.ndarray:
    """(T,) one column of a run, or its derivative by ``param``; a vector's norm when ``norm``."""
    a = np.asarray(ds[var].values, dtype=float)
    T = a.shape[0]
    d = None if param is None else np.asarray(ds[sensitivity_name(var, param)].values, dtype=float)
    if idx is not None:
        return (a if d is None else d).reshape(T, -1)[:, idx]
    if a.ndim == 1:
        return a if d is None else d
    flat = a.reshape(T, -1)
    if not norm:
        raise ValueError("a vector column needs an index")
    n = np.linalg.norm(flat, axis=1)
    if d is None:
        return n
    with np.errstate(all="ignore"):
        return np.sum(flat * d.reshape(T, -1), axis=1) / n


def evaluate(context: DesignContext, x, model=None, *, extra: Mapping | None = None,
             curve: bool = True) -> Evaluation:
    """Objective, gradient and constraints at one design point: one solve with sensitivities.

    A pure function of ``x`` (and the context): the same ``x`` gives the same
    result; the model's compiled state is reused between calls.

    Args:
        context: from :func:`build_problem`.
        x: (n,) values of ``context.names``.
        model: the model (default: this process's cached one for the context).
        extra: other parameter values (the reference design of a ``design``
            target sets parameters that are not design parameters).
        curve: compare with ``context.target`` (False: only the path).

    Returns:
        :class:`Evaluation`; a point that fails to solve has status
        ``no_assembly`` (no consistent initial point) or the integrator's
        code, a NaN objective and its reason, never an exception.
    """
    model = _model_for(context) if model is None else model
    x = np.asarray(x, dtype=float).copy()
    n, m = len(context.names), len(context.constraints)
    params = {**(extra or {}), **{name: float(v) for name, v in zip(context.names, x)}}

    def failed(code, message):
        return Evaluation(x, math.nan, np.full(n, np.nan), np.full(m, np.nan),
                          np.full((m, n), np.nan), int(code), message,
                          np.full((len(context.times), len(context.columns)), np.nan))

    try:
        ds = model.solve(params=params, sensitivities=list(context.names), t_eval=context.times)
    except InputError as err:  # no consistent initial point at this design
        return failed(st.NO_ASSEMBLY, err.message)
    code = int(ds["status"].values)
    if code != st.SUCCESS:
        return failed(code, f"{st.meaning(code)} at t = {float(ds.attrs.get('t_final', math.nan)):g}")
    path = np.stack([_series(ds, var, idx) for var, idx in context.columns], axis=1)
    dpath = np.stack([np.stack([_series(ds, var, idx, p) for var, idx in context.columns], axis=1)
                      for p in context.names])                       # (n, T, k)
    if not (np.all(np.isfinite(path)) and np.all(np.isfinite(dpath))):
        return failed(st.NONFINITE, "the path or its sensitivities are not finite")
    if curve:
        r = path - context.target
        objective = float(np.mean(np.sum(r * r, axis=1)))
        gradient = np.array([np.mean(np.sum(2.0 * r * dpath[j], axis=1)) for j in range(n)])
    else:
        objective, gradient = math.nan, np.full(n, np.nan)
    values, jac = np.full(m, np.nan), np.full((m, n), np.nan)
    for i, (_, _, var, idx, reduce, _, _) in enumerate(context.constraints):
        series = _series(ds, var, idx, norm=True)[None, :]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            values[i] = float(pipeline.REDUCERS[reduce](series)[0])
        for j, p in enumerate(context.names):
            jac[i, j] = float(metric_tangent(reduce, series, _series(ds, var, idx, p, norm=True)[None, :])[0])
    return Evaluation(x, objective, gradient, values, jac, st.SUCCESS, "", path)


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
        run).
    """
    t_start = time.perf_counter()
    model = _model_for(context) if model is None else model
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


# ------------------------------------------------------------------ starts from a store
def rank_store(context: DesignContext, store, k: int) -> tuple[list, list[str]]:
    """The ``k`` best points of a sweep store as starts.

    Each successful stored point's path (the design's path variables, as
    stored) is interpolated to the design's output times and compared with
    the target by the design's objective.  Only points inside the design's
    bounds count, and, where the store sweeps a parameter that is not a
    design parameter, only points at the design model's value of it.

    Args:
        context: from :func:`build_problem`.
        store: a sweep store path.
        k: how many starts.

    Returns:
        ``(starts, notes)``: starts as ``(x0, origin, objective)``, best first
        (parameters the store does not sweep start at the file's start
        values); notes: lines for the user (fewer points than asked, store
        constants that differ from the model's).

    Raises:
        InputError: no sweep store; a structural store; the store lacks a
            path variable or sweeps no design parameter; its times do not
            cover the output times; no stored point qualifies.
    """
    import xarray as xr
    from scipy.interpolate import interp1d

    from sweep.store import open_store

    where = f"--from {store}"
    try:
        ds = open_store(store)
    except FileNotFoundError:
        raise InputError(f"{where}: no sweep store there; give a store written by mechsweep "
                         f"sweep") from None
    if not isinstance(ds, xr.Dataset):
        raise InputError(f"{where}: a structural sweep store (one group per structure); a design "
                         f"starts from a plain sweep store")
    if "status" not in ds or "point" not in ds.dims:
        raise InputError(f"{where}: not a sweep store (no status per point)")
    model = _model_for(context)
    for var, _ in context.columns:
        if var not in ds.data_vars:
            kept = [v for v in ds.data_vars if v in model.dae.var_index]
            raise InputError(f"{where}: the store has no variable '{var}' for the path (it keeps "
                             f"{', '.join(kept) or 'none of the model variables'}); run the sweep with "
                             f"Outputs.variables including {var}")
    swept = [c for c in ds.coords if ds[c].dims == ("point",) and c != "point"]
    design_swept = [n for n in context.names if n in swept]
    if not design_swept:
        raise InputError(f"{where}: the store sweeps {', '.join(swept) or 'nothing'}, none of the "
                         f"design parameters {', '.join(context.names)}; sweep at least one of them")
    ts = np.asarray(ds["time"].values, dtype=float)
    slack = 1e-9 * max(1.0, abs(ts[-1]))
    if ts[0] > context.times[0] + slack or ts[-1] < context.times[-1] - slack:
        raise InputError(f"{where}: the store's times cover t = {ts[0]:g} .. {ts[-1]:g}, but the "
                         f"design's output times run over t = {context.times[0]:g} .. "
                         f"{context.times[-1]:g}")
    ok = np.asarray(ds["status"].values) == st.SUCCESS
    notes = []
    inside = ok.copy()
    for j, name in enumerate(context.names):
        if name in swept:
            v = np.asarray(ds[name].values, dtype=float)
            inside &= (v >= context.lower[j]) & (v <= context.upper[j])
    for name in swept:
        if name not in context.names and name in model.params:
            v = np.asarray(ds[name].values, dtype=float)
            keep = np.isclose(v, float(model.params[name]), rtol=1e-9, atol=1e-12)
            inside &= keep
            notes.append(f"the store also sweeps {name}: only its points at the model's "
                         f"{name} = {float(model.params[name]):g} count ({int(keep.sum())} points)")
    try:
        stored = json.loads(ds.attrs.get("parameters", "{}"))
    except (TypeError, ValueError):
        stored = {}
    differ = [f"{name} = {value:g} (the design's model: {float(model.params[name]):g})"
              for name, value in stored.items()
              if name in model.params and np.ndim(value) == 0 and name not in context.names
              and not np.isclose(float(value), float(model.params[name]), rtol=1e-9, atol=1e-12)]
    if differ:
        notes.append(f"the store was run with {', '.join(differ)}: its paths rank the starts "
                     f"only approximately")
    index = np.flatnonzero(inside)
    if index.size == 0:
        raise InputError(f"{where}: no successful stored point lies within the design's bounds "
                         f"({', '.join(f'{n} in [{lo:g}, {hi:g}]' for n, lo, hi in zip(context.names, context.lower, context.upper))}; "
                         f"{int(ok.sum())} of {ok.size} points succeeded)")
    err = np.zeros(index.size)
    for j, (var, idx) in enumerate(context.columns):
        a = np.asarray(ds[var].isel(point=index).values, dtype=float)
        a = a.reshape(a.shape[0], a.shape[1], -1)[:, :, 0 if idx is None else idx]
        at = interp1d(ts, a, axis=1, assume_sorted=True)(context.times)
        err += np.mean((at - context.target[None, :, j]) ** 2, axis=1)
    finite = np.isfinite(err)
    index, err = index[finite], err[finite]
    order = np.argsort(err, kind="stable")[:k]
    if order.size < k:
        notes.append(f"asked for {k} starts, but only {order.size} stored points qualify")
    starts = []
    for o in order:
        p = int(index[o])
        x0 = context.start.copy()
        for j, name in enumerate(context.names):
            if name in swept:
                x0[j] = float(ds[name].values[p])
        starts.append((x0, f"store point {p}", float(err[o])))
    return starts, notes


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
    """

    context: DesignContext
    spec: DesignSpec
    starts: list
    best: int | None
    wall_seconds: float
    notes: list = field(default_factory=list)
    out: str | None = None
    png: str | None = None

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


def _stderr(message: str) -> None:
    print(f"[mechsweep] {message}", file=sys.stderr, flush=True)


def _explicit_starts(context: DesignContext, starts) -> list:
    """Starts given as mappings name -> value (missing names: the file's start)."""
    out = []
    for i, item in enumerate(starts):
        if not isinstance(item, Mapping):
            raise InputError(f"starts[{i}]: expected a mapping parameter -> value, got "
                             f"{type(item).__name__}")
        x0 = context.start.copy()
        for name, value in item.items():
            if name not in context.names:
                raise InputError(f"starts[{i}]: '{name}' is not a design parameter; the design "
                                 f"parameters are {', '.join(context.names)}")
            j = context.names.index(name)
            v = float(value)
            if not context.lower[j] <= v <= context.upper[j]:
                raise InputError(f"starts[{i}]: {name} = {v:g} is outside the bounds "
                                 f"[{context.lower[j]:g}, {context.upper[j]:g}]")
            x0[j] = v
        out.append((x0, f"given start {i}", math.nan))
    return out


def run_design(design, out: str | None = None, starts=None, from_store: str | None = None,
               workers: int | None = None, scheduler: str | None = None,
               scheduler_file: str | None = None, cluster=None, overwrite: bool = False,
               plot: bool = True, echo: Callable[[str], None] = _stderr,
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
        echo: progress lines.
        model: the built model (default :func:`load_design_model`).

    Returns:
        :class:`DesignResult`.

    Raises:
        InputError: a bad design file, store, options or output path.
    """
    from sweep.run import check_dask_target, dask_client, default_jax_cache_dir, local_cores

    t0 = time.perf_counter()
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
    context = build_problem(spec, model)
    notes: list[str] = []
    if from_store is not None:
        chosen, notes = rank_store(context, from_store, int(starts or 1))
        for x0, origin, err in chosen:
            echo(f"start from {origin}: " + ", ".join(f"{n} = {v:.6g}" for n, v in
                                                      zip(context.names, x0))
                 + f" (stored path's objective {err:.4g})")
    elif starts is not None:
        chosen = _explicit_starts(context, starts)
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
    if out is not None:
        write_history(result, out, overwrite=overwrite)
        result.out = str(out)
        if plot:
            result.png = plot_design(result, history_png_path(out))
    return result


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
