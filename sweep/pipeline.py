"""A sweep's task function: a batch of the design table → ``solver.solve_batch`` → outputs and metrics.

What varies (the points), what is kept (:class:`SweepContext`: model file,
override, constants, outputs, time grid) and where it runs (:mod:`sweep.run`)
stay apart.  The pipeline uses the solver's public API only: it turns a batch
into :func:`solver.solve_batch` arguments and reduces the resulting Dataset to
the store's outputs, so one run and a sweep share every name and unit.
:func:`batch_fn` is module level, and a worker keeps one loaded model per
model hash, whose compiled model (``solver.compiled_model``) is therefore
built once per worker.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
import warnings
from collections import OrderedDict
from typing import Any, Mapping

import numpy as np

import solver
from solver import status as codes
from solver.errors import InputError

__all__ = ["SweepContext", "build_context", "batch_fn", "REDUCERS", "store_bytes", "check_store_size",
           "estimate_run"]

REDUCERS = {
    "min": lambda a: np.nanmin(a, axis=1),
    "max": lambda a: np.nanmax(a, axis=1),
    "range": lambda a: np.nanmax(a, axis=1) - np.nanmin(a, axis=1),
    "mean": lambda a: np.nanmean(a, axis=1),
    "final": lambda a: a[:, -1],
    "absmax": lambda a: np.nanmax(np.abs(a), axis=1),
}

_COMPONENT = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*?)(?:\[(\d+)\]|([xyz]))?$")


@dataclasses.dataclass
class SweepContext:
    """What stays fixed across the points of a sweep (sent with every task).

    Attributes:
        model_path: the model file.
        override: nested mapping merged into the model's YAML data.
        constants: parameter name -> value applied to every point.
        variables: output variable names (values and state derivatives).
        metrics: metric name -> (of, reduce).
        time: output times.
        schema: :class:`sweep.store.Schema` of the per-point outputs.
        attrs: dataset attributes (model text, solver settings, structure).
        key: the model's hash (the worker's cache key).
        batch: points per task; shorter batches are padded to it.
    """

    model_path: str
    override: Any
    constants: dict
    variables: list
    metrics: dict
    time: np.ndarray
    schema: Any
    attrs: dict
    key: str
    batch: int = 0


# A worker keeps the models it has loaded, by model hash; each model's DAE
# keeps its compiled model alive (solver.compiled), so a worker compiles once
# per model.  Bounded: a long-lived worker serving many sweeps.
_WORKER_MODELS: "OrderedDict[str, Any]" = OrderedDict()
_WORKER_MODELS_MAX = 4


def _model(path, override, key):
    """The loaded model of a sweep on this worker (cached by model hash)."""
    if key in _WORKER_MODELS:
        _WORKER_MODELS.move_to_end(key)
        return _WORKER_MODELS[key]
    model = solver.load(path, overrides=override or None)
    _WORKER_MODELS[key] = model
    while len(_WORKER_MODELS) > _WORKER_MODELS_MAX:
        _WORKER_MODELS.popitem(last=False)
    return model


# ----------------------------------------------------------------- context
def _component_index(dae, name: str):
    """``B``, ``By``, ``q[3]`` -> (variable, component index or None)."""
    if name in dae.var_index:
        return name, None
    m = _COMPONENT.match(name)
    if m and m.group(1) in dae.var_index:
        var = dae.var_index[m.group(1)]
        if m.group(2) is not None:
            i = int(m.group(2))
        else:
            i = "xyz".index(m.group(3))
        if var.shape != () and i < var.size:
            return var.name, i
    return None


def build_context(spec) -> SweepContext:
    """Check the sweep against its model and fix everything that is kept.

    Args:
        spec: :class:`sweep.spec.SweepSpec`.

    Returns:
        SweepContext.

    Raises:
        InputError: swept names that are not parameters of the model, unknown
            output variables or metric targets (with the valid choices).
    """
    from solver.integrate import order_for_tol
    from solver.solution import output_layout
    from sweep.store import Schema

    model = solver.load(spec.model_path, overrides=spec.override or None)
    dae = model.dae
    _check_swept_names(spec, model)
    structure = dae.structure
    names = [v.name for v in dae.variables]
    wanted = list(spec.outputs.variables) if spec.outputs.variables is not None else names
    for w in wanted:
        if w not in names:
            raise InputError(f"unknown output variable {w!r}; the model's variables are {', '.join(names)}",
                             file=str(spec.path), path="Outputs.variables")
    metrics = {}
    for mname, m in spec.outputs.metrics.items():
        target = _component_index(dae, m.of)
        if target is None and m.of != "constraint_residual":
            raise InputError(f"metric {mname!r}: unknown output {m.of!r}; use a variable ({', '.join(names)}), "
                             f"a component such as {names[0]}[0] or Bx, or constraint_residual",
                             file=str(spec.path), path=f"Outputs.metrics.{mname}.of")
        metrics[mname] = (m.of, m.reduce)
    if spec.outputs.samples is not None:
        t = np.linspace(model.t0, model.tend, int(spec.outputs.samples))
    elif spec.outputs.dt is not None:
        n = int(math.floor((model.tend - model.t0) / spec.outputs.dt * (1 + 1e-12))) + 1
        t = model.t0 + spec.outputs.dt * np.arange(n)
    else:
        t = model.t_eval()
    layout, coords = output_layout(dae, wanted)
    variables = {name: dims for name, (dims, _) in layout.items()}
    var_attrs = {name: attrs for name, (_, attrs) in layout.items()}
    for mname in metrics:
        variables[mname] = ()
    schema = Schema(time=np.asarray(t, dtype=float), variables=variables,
                    coords={k: np.asarray(v) for k, v in coords.items()}, attrs=var_attrs)
    ds_attrs = {
        "title": spec.title,
        "model_yaml": model.text,
        "model_path": str(spec.model_path),
        "model_kind": model.kind,
        "solver_tol": model.tol,
        "solver_order": int(model.order or order_for_tol(model.tol)),
        "structure_c": [int(x) for x in structure.c],
        "structure_d": [int(x) for x in structure.d],
        "structural_index": int(structure.index),
        "dof": int(structure.dof),
    }
    key = hashlib.sha256(json.dumps([str(spec.model_path), model.text, spec.override], sort_keys=True,
                                    default=str).encode()).hexdigest()
    return SweepContext(model_path=str(spec.model_path), override=spec.override,
                        constants={k: float(v) for k, v in spec.constants.items()}, variables=wanted,
                        metrics=metrics, time=schema.time, schema=schema, attrs=ds_attrs, key=key,
                        batch=int(spec.batch))


def _where(spec, name: str) -> tuple[str, int | None]:
    """Key path and line of a swept or constant name in the sweep file."""
    for axis in spec.axes:
        if axis.name == name:
            group = "sample.bounds" if axis.group == "sample" else axis.group
            return f"Sweep.{group}.{name}", axis.line
    return f"Sweep.constants.{name}", None


def _check_swept_names(spec, model) -> None:
    """Every swept or constant name is a scalar free parameter of the model.

    Raises:
        InputError: an unknown, derived or structural name, or a vector
            parameter, listing the sweepable parameters.
    """
    params = model.params
    valid = ", ".join(sorted(params)) or "none (the model has no free PhysicalParams)"
    for name in list(spec.points) + list(spec.constants):
        path, line = _where(spec, name)
        if name not in params:
            raise InputError(f"{name!r} is not a parameter of the model {spec.model_path}; "
                             f"sweepable parameters: {valid}", file=str(spec.path), path=path,
                             line=line)
        shape = np.shape(params[name])
        if shape != ():
            scalars = ", ".join(sorted(k for k, v in params.items() if np.ndim(v) == 0)) or "none"
            raise InputError(f"{name!r} is a vector parameter of shape {shape} in the model "
                             f"{spec.model_path}; a sweep varies scalar parameters only: "
                             f"{scalars}", file=str(spec.path), path=path, line=line)


# ----------------------------------------------------------------- estimates
def store_bytes(spec, context: SweepContext) -> tuple[float, int]:
    """Uncompressed size of a sweep's store, from its schema (the model built).

    Every output series and metric as float64 per point, plus ``status``
    (1 byte), ``steps`` (8) and one float64 coordinate per swept name; the
    per-batch records are left out (a few hundred bytes a batch).

    Returns:
        (bytes, float64 values per point).
    """
    schema = context.schema
    per = sum(int(np.prod(schema.shape(name))) for name in schema.variables)
    return float(spec.n_points) * (8.0 * (per + len(spec.points)) + 9.0), per


def check_store_size(spec, context: SweepContext) -> str:
    """The dry run's store line, after checking it against ``MAX_STORE_BYTES``.

    The sweep reader's estimate (:func:`sweep.spec.load_sweep`) is a lower
    bound made before the model is built; this one counts every stored value.

    Returns:
        ``"store:     about 1.2 MiB uncompressed (...)"``.

    Raises:
        InputError: over :data:`solver.errors.MAX_STORE_BYTES`, with the
            limit and how to raise it.
    """
    from solver.errors import MAX_STORE_BYTES, format_bytes, size_limit_message

    need, per = store_bytes(spec, context)
    what = (f"the store of {spec.n_points} points x {per} values a point "
            f"({len(context.time)} output times; 8 bytes a value)")
    message = size_limit_message("MAX_STORE_BYTES", MAX_STORE_BYTES, need, what,
                                 "lower the number of points, the output times or the variables")
    if message:
        raise InputError(message, file=str(spec.path), path="Sweep")
    nv, nm = len(context.variables), len(context.metrics)
    return (f"  store:     about {format_bytes(need)} uncompressed ({spec.n_points} points x "
            f"{per} values: {len(context.time)} output times of {nv} variable"
            f"{'' if nv == 1 else 's'}, {nm} metric{'' if nm == 1 else 's'})")


def estimate_run(spec, context: SweepContext, workers: int) -> dict:
    """Compile and run the sweep's first batch once; extrapolate the sweep's time.

    Args:
        spec: :class:`sweep.spec.SweepSpec`.
        context: its :class:`SweepContext`.
        workers: worker processes the sweep would use.

    Returns:
        dict with ``compile_seconds`` (JAX tracing and compiling, once per
        worker, near 0 with a warm persistent cache), ``seconds_per_point``
        (the rest of the batch's time over its padded size),
        ``batch_points``, ``failed`` (points of the batch that failed) and
        ``total_seconds``: compile + batches x batch seconds / workers
        (batches are spread evenly; a worker runs one at a time).
    """
    from solver.compiled import compile_clock

    first = spec.batches()[0] if spec.n_points else slice(0, 0)
    points = {k: v[first] for k, v in spec.points.items()}
    t = time.perf_counter()
    with compile_clock() as clock:
        result = batch_fn(points, context)
    wall = time.perf_counter() - t
    compile_s = min(clock.seconds, wall)
    size = max(int(context.batch), 1)
    per_point = max(wall - compile_s, 1e-9) / size
    rounds = math.ceil(spec.n_batches / max(int(workers), 1))
    return {"compile_seconds": compile_s, "seconds_per_point": per_point, "batch_points": size,
            "failed": int(np.sum(np.asarray(result.status) != codes.SUCCESS)),
            "total_seconds": compile_s + rounds * size * per_point}


# ----------------------------------------------------------------- the batch
def batch_fn(points: Mapping[str, np.ndarray], context: SweepContext):
    """The sweep's batch function: simulate one batch of design points.

    Args:
        points: swept parameter name -> (B,) values.
        context: :class:`SweepContext`.

    Returns:
        :class:`sweep.store.BatchResult`; failed points carry NaN and their
        status (no assembly, max steps, …), never an exception for one point.
    """
    from sweep.store import BatchResult

    model = _model(context.model_path, context.override, context.key)
    B = len(next(iter(points.values()))) if points else 1
    # A short last batch is padded (repeating its last point) so that every
    # batch has the same shape and the worker compiles once.
    pad = max(context.batch - B, 0) if points else 0
    padded = {k: np.concatenate([np.asarray(v, float), np.repeat(np.asarray(v, float)[-1:], pad)])
              for k, v in points.items()}
    ds = solver.solve_batch(model, padded, params=context.constants, t_eval=context.time)
    ds = ds.isel(point=slice(0, B))
    status = ds["status"].values.astype(np.int8)
    failed = status != codes.SUCCESS
    data = {name: np.asarray(ds[name].values, dtype=float)
            for name, dims in context.schema.variables.items() if dims and name in ds}
    for mname, (of, reduce) in context.metrics.items():
        series = _metric_series(model.dae, ds, of)
        # A failed point's series is all NaN: numpy warns, the metric is NaN.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            value = np.array(REDUCERS[reduce](series), dtype=float)
        value[failed] = np.nan
        data[mname] = value
    msg = ""
    if failed.any():
        counts = {codes.meaning(c): int((status == c).sum()) for c in np.unique(status[failed])}
        msg = "failed points: " + ", ".join(f"{k}: {n}" for k, n in counts.items())
        reasons = json.loads(ds.attrs.get("failures", "{}"))
        first = next((reasons[str(i)] for i in range(B) if str(i) in reasons), "")
        if first:
            msg += f"; first reason: {first}"
    return BatchResult(status=status, steps=ds["steps"].values, data=data, message=msg)


def _metric_series(dae, ds, of: str) -> np.ndarray:
    """(B, T) series a metric reduces: a variable (norm of a vector), a component, or the residual."""
    if of == "constraint_residual":
        return np.asarray(ds["constraint_residual"].values, dtype=float)
    var, idx = _component_index(dae, of)
    series = np.asarray(ds[var].values, dtype=float)
    B, T = series.shape[:2]
    if idx is not None:
        return series.reshape(B, T, -1)[:, :, idx]
    if series.ndim > 2:
        return np.linalg.norm(series.reshape(B, T, -1), axis=-1)
    return series
