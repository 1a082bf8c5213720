"""The design problem: a design file checked against its model, its target curve, and one design point's evaluation.

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
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from solver import status as st
from solver.errors import InputError
from solver.models.expr import evaluate_constant, parse
from solver.integrate.sensitivity import metric_tangent, sensitivity_name
from sweep import metrics, pipeline
from sweep.design.spec import DesignSpec

__all__ = ["DesignContext", "Evaluation", "build_problem", "evaluate", "load_design_model"]


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
    return pipeline.cached_model(spec.model_path, spec.override,
                           pipeline.model_key(spec.model_path, spec.model_text, spec.override))


def model_for(context: DesignContext):
    return pipeline.cached_model(context.model_path, context.override, context.key)


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
        target = metrics.component_index(dae, c.of)
        if target is None:
            raise spec.error(f"unknown variable '{c.of}'; the model's variables are "
                             f"{_variables_text(dae)} (a whole vector means its norm)",
                             ("Constraints", cname, "of"))
        constraints.append((cname, c.of, target[0], target[1], c.reduce, c.min, c.max))
    names = spec.names
    context = DesignContext(
        title=spec.title, model_path=str(spec.model_path), override=spec.override,
        key=pipeline.model_key(spec.model_path, spec.model_text, spec.override), names=names,
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
        found = metrics.component_index(dae, name)
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


def _outputs(context: DesignContext) -> list[str]:
    """What a design's solve keeps: the path's and the constraints' variables and their sensitivities."""
    variables = {var for var, _ in context.columns} | {c[2] for c in context.constraints}
    return sorted(variables | {sensitivity_name(var, p) for var in variables for p in context.names})


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
    model = model_for(context) if model is None else model
    x = np.asarray(x, dtype=float).copy()
    n, m = len(context.names), len(context.constraints)
    params = {**(extra or {}), **{name: float(v) for name, v in zip(context.names, x)}}

    def failed(code, message):
        return Evaluation(x, math.nan, np.full(n, np.nan), np.full(m, np.nan),
                          np.full((m, n), np.nan), int(code), message,
                          np.full((len(context.times), len(context.columns)), np.nan))

    try:
        ds = model.solve(params=params, sensitivities=list(context.names), t_eval=context.times,
                         outputs=_outputs(context))
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
