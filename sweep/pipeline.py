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
from collections import Counter, OrderedDict
from typing import Any, Callable, Mapping

import numpy as np

import solver
from solver import status as codes
from solver.integrate.sensitivity import metric_tangent, sensitivity_name
from solver.errors import InputError

__all__ = ["SweepContext", "build_context", "batch_fn", "REDUCERS", "event_metric", "scalar_series", "store_bytes",
           "check_store_size", "check_batch_memory", "estimate_run", "load_model", "structural_names",
           "structural_sizes", "rebuild_structural", "group_context", "remember_model", "MODEL_BUILDS",
           "check_point_values", "RANGE_CHECK_POINTS", "solver_outputs"]

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
        batch: points per task: the sweep's ``Batch``, or its number of
            points where that is fewer (:func:`sweep.store.effective_batch`);
            shorter batches are padded to it.
        structural: structural parameter -> whole value of a structure
            group (:mod:`sweep.structural`); these names are in the points as
            constant coordinates and fixed in ``override``, never passed to
            the solver as run parameters. Empty for a plain sweep.
        value_check: what :func:`check_point_values` checked, in words.
        sensitivities: parameters the outputs are differentiated with
            respect to (``Outputs.sensitivities``).
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
    structural: dict = dataclasses.field(default_factory=dict)
    value_check: str = ""
    sensitivities: list = dataclasses.field(default_factory=list)

    def check_on_worker(self) -> str:
        """Why this process's copy of the model is not the driver's; empty when it is.

        A worker builds the model from :attr:`model_path` itself: on a file
        system that holds another version of the file (a stale copy, an edit
        since the sweep started) it would compute another model.
        """
        if self.key in _WORKER_MODELS:
            return ""
        model = solver.load(self.model_path, overrides=self.override or None)
        if _model_key(self.model_path, model.text, self.override) != self.key:
            return (f"the model file {self.model_path} here differs from the one the sweep was "
                    f"started with (its hash differs): make the workers see the same file")
        MODEL_BUILDS[self.key] += 1
        remember_model(self.key, model)
        return ""


# A worker keeps the models it has loaded, by model hash; each model's DAE
# keeps its compiled model alive (solver.compiled), so a worker compiles once
# per model.  Bounded: a long-lived worker serving many sweeps.
_WORKER_MODELS: "OrderedDict[str, Any]" = OrderedDict()
_WORKER_MODELS_MAX = 4

#: Sweep models built in this process, by model key (:attr:`SweepContext.key`):
#: the driver's builds (:func:`load_model`, :func:`group_context`) and the
#: worker's (:func:`batch_fn`, once per model while cached). Each build of a
#: model is one compile of it when it runs (its compiled state lives on its
#: DAE), so a structural sweep run in this process (``workers=0``) counts 1
#: per structure group.
MODEL_BUILDS: Counter = Counter()


def _model_key(path, text: str, override) -> str:
    """The model's hash: the worker's cache key (file, text and override)."""
    return hashlib.sha256(json.dumps([str(path), text, override], sort_keys=True,
                                     default=str).encode()).hexdigest()


def remember_model(key: str, model) -> None:
    """Put a model the driver built into this process's worker cache.

    A sweep run in this process (``workers=0``, ``--estimate``) then uses it
    instead of building it again: one build and one compile per model.
    """
    _WORKER_MODELS[key] = model
    _WORKER_MODELS.move_to_end(key)
    while len(_WORKER_MODELS) > _WORKER_MODELS_MAX:
        _WORKER_MODELS.popitem(last=False)


def _model(path, override, key):
    """The loaded model of a sweep on this worker (cached by model hash)."""
    if key in _WORKER_MODELS:
        _WORKER_MODELS.move_to_end(key)
        return _WORKER_MODELS[key]
    model = solver.load(path, overrides=override or None)
    MODEL_BUILDS[key] += 1
    remember_model(key, model)
    return model


def load_model(spec):
    """The sweep's model as its file and ``Override`` give it (built in the driver).

    Raises:
        InputError: the model cannot be built (located in its file).
    """
    model = solver.load(spec.model_path, overrides=spec.override or None)
    MODEL_BUILDS[_model_key(spec.model_path, model.text, spec.override)] += 1
    return model


# ----------------------------------------------------------------- structure
def structural_sizes(values: Mapping[str, Any],
                     fail: Callable[[str, Any], Exception]) -> dict[str, int]:
    """Values of structural parameters as whole numbers.

    Args:
        values: name -> value (a number, or an array of the values a sweep
            gives it).
        fail: ``fail(name, bad_value)`` -> the exception to raise for a value
            that is not a whole number (each caller names its own input:
            ``--set`` or the sweep file's key).

    Returns:
        name -> int (for arrays: the first value; all are checked).

    Raises:
        whatever ``fail`` returns, for a value that is not a finite whole
        number (or not a scalar).
    """
    out = {}
    for name, value in values.items():
        arr = np.asarray(value, dtype=float) if np.ndim(value) else None
        items = arr.ravel() if arr is not None else [value]
        for v in items:
            try:
                whole = np.ndim(v) == 0 and math.isfinite(float(v)) and float(v) == int(float(v))
            except (TypeError, ValueError):
                whole = False
            if not whole:
                raise fail(name, v)
        out[name] = int(float(items[0]))
    return out


def rebuild_structural(model, sizes: Mapping[str, int]):
    """The model built again from its file with structural parameters set.

    The one way a structural value changes (``simulate --set N=5`` and the
    structure groups of a sweep): ``PhysicalParams`` overridden, the whole
    model (repeats expanded again, structure analysed) rebuilt by
    :meth:`solver.models.model.Model.with_overrides`; its ``overrides`` then
    hold the sizes, so ``solver.load(path, overrides=model.overrides)``
    builds the same model (as the sweep workers do).

    Raises:
        InputError: the rebuilt model is invalid (an impossible structure),
            located in the model file.
    """
    return model.with_overrides({"PhysicalParams": {k: int(v) for k, v in sizes.items()}})


def structural_names(spec, model) -> list[str]:
    """The swept or constant names of a sweep that are structural parameters of its model.

    Returns:
        Names in the model's order of structural parameters (empty for a
        plain sweep).
    """
    given = set(spec.points) | set(spec.constants)
    return [name for name in model.param_info.structural if name in given]


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


def build_context(spec, model=None) -> SweepContext:
    """Check the sweep against its model and fix everything that is kept.

    Args:
        spec: :class:`sweep.spec.SweepSpec`.
        model: its model, already built by :func:`load_model` (default:
            built here).

    Returns:
        SweepContext.

    Raises:
        InputError: swept names that are not parameters of the model, unknown
            output variables or metric targets (with the valid choices).
        ValueError: the sweep varies a structural parameter: such a sweep
            runs one context per structure group (:func:`group_context`,
            :mod:`sweep.structural`).
    """
    model = load_model(spec) if model is None else model
    _check_swept_names(spec, model)
    names = structural_names(spec, model)
    if names:
        raise ValueError(f"the sweep varies structural parameters ({', '.join(names)}): build one "
                         f"context per structure group with sweep.pipeline.group_context")
    checked = check_point_values(spec, model)
    context = _context(spec, model, spec.override, spec.constants)
    context.value_check = checked
    return context


def group_context(spec, base, sizes: Mapping[str, int]):
    """The model and context of one structure group of a sweep.

    The model is :func:`rebuild_structural` of the base model (the file with
    the sweep's ``Override``) with ``sizes``; the context's override holds
    the sizes, so a worker builds the same model, and its constants leave
    the structural names out (they are not run parameters).

    Args:
        spec: the sweep (all of its points; the points are not used here).
        base: its model from :func:`load_model`.
        sizes: structural parameter -> whole value of this group.

    Returns:
        ``(model, context)``.

    Raises:
        InputError: the structure cannot be built, or the sweep's outputs or
            metrics do not exist in it.
    """
    model = rebuild_structural(base, sizes)
    override = model.overrides
    constants = {k: v for k, v in spec.constants.items() if k not in sizes}
    context = _context(spec, model, override, constants, structural=dict(sizes))
    MODEL_BUILDS[context.key] += 1
    return model, context


def _times(spec, model) -> np.ndarray:
    """The sweep's output times: ``Outputs.samples``/``dt``, else the model's."""
    if spec.outputs.samples is not None:
        return np.linspace(model.t0, model.tend, int(spec.outputs.samples))
    if spec.outputs.dt is not None:
        n = int(math.floor((model.tend - model.t0) / spec.outputs.dt * (1 + 1e-12))) + 1
        return model.t0 + spec.outputs.dt * np.arange(n)
    return model.t_eval()


def _context(spec, model, override, constants, structural=None) -> SweepContext:
    """The context of a sweep (or of one structure group) on a built model."""
    from solver.integrate.sensitivity import check_names, sensitivity_layout, sensitivity_name
    from solver.results.solution import output_layout
    from sweep.store import Schema, effective_batch

    dae = model.dae
    structure = dae.structure
    names = [v.name for v in dae.variables]
    wanted = list(spec.outputs.variables) if spec.outputs.variables is not None else names
    for w in wanted:
        if w not in names:
            raise InputError(f"unknown output variable {w!r}; the model's variables are {', '.join(names)}",
                             file=str(spec.path), path="Outputs.variables")
    metrics = {}
    series = scalar_series(dae)
    event_names = [e.name for e in getattr(dae, "events", ())]
    for mname, m in spec.outputs.metrics.items():
        if m.event is not None:
            _check_event_metric(spec, dae, mname, m, event_names)
            metrics[mname] = (m.of, m.reduce, m.event, m.n)
            continue
        target = _component_index(dae, m.of)
        if target is None and m.of not in series:
            vector = next((v.name for v in dae.variables if v.shape != ()), None)
            component = f"a component such as {vector}[0] or Bx, " if vector else ""
            raise InputError(f"metric {mname!r}: unknown output {m.of!r}; use a variable ({', '.join(names)}), "
                             f"{component}or another time series of the run ({', '.join(series)})",
                             file=str(spec.path), path=f"Outputs.metrics.{mname}.of")
        metrics[mname] = (m.of, m.reduce)
    try:
        sens = check_names(dae, list(spec.outputs.sensitivities))
    except InputError as err:
        raise InputError(err.message, file=str(spec.path), path="Outputs.sensitivities") from None
    bad = [(m, of) for m, (of, *_) in metrics.items() if of in series] if sens else []
    bad_event = [m for m, spec_m in metrics.items()
                 if len(spec_m) > 2 and spec_m[1] == "value" and spec_m[0] not in ("time", "rate")] if sens else []
    if bad_event:
        raise InputError(f"metric {bad_event[0]!r} reads a variable at an event, which has no sensitivity (an "
                         "event's time and rate have: of: time or of: rate); remove Outputs.sensitivities or "
                         "that metric", file=str(spec.path), path="Outputs.sensitivities")
    if bad:
        raise InputError(f"metric {bad[0][0]!r} reduces {bad[0][1]}, which has no sensitivity (only variables "
                         "and their components have); remove Outputs.sensitivities or that metric",
                         file=str(spec.path), path="Outputs.sensitivities")
    t = _times(spec, model)
    layout, coords = output_layout(dae, wanted)
    layout.update(sensitivity_layout(dae, wanted, sens))
    if event_names:
        # The event records of every point (solver.results.solution.event_layout), the
        # wanted variables' values at the events among them.
        from solver.results.solution import event_layout

        series_names = set(layout)
        for name, (dims, attrs) in event_layout(dae).items():
            base = name[:-len("_at_event")] if name.endswith("_at_event") else None
            if base is None or base in series_names:
                # Stored as floats: no missing_value, which would decode -1 to NaN on reading.
                layout[name] = (dims, {k: v for k, v in attrs.items() if k != "missing_value"})
        coords["event"] = np.arange(dae.max_events)
    variables = {name: dims for name, (dims, _) in layout.items()}
    var_attrs = {name: attrs for name, (_, attrs) in layout.items()}
    for mname in metrics:
        variables[mname] = ()
        for param in sens:
            variables[sensitivity_name(mname, param)] = ()
            var_attrs[sensitivity_name(mname, param)] = {"long_name": f"d{mname}/d{param}",
                                                         "sensitivity_of": mname, "sensitivity_wrt": param}
    schema = Schema(time=np.asarray(t, dtype=float), variables=variables,
                    coords={k: np.asarray(v) for k, v in coords.items()}, attrs=var_attrs)
    ds_attrs = {
        "title": spec.title,
        "model_yaml": model.text,
        "model_path": str(spec.model_path),
        "model_kind": model.kind,
        "solver_tol": model.tol,
        "solver_order": int(model.order or solver.order_for_tol(model.tol)),
        "structure_c": [int(x) for x in structure.c],
        "structure_d": [int(x) for x in structure.d],
        "structural_index": int(structure.index),
        "dof": int(structure.dof),
        **_sweep_attrs(spec, dae, override, constants),
    }
    key = _model_key(spec.model_path, model.text, override)
    return SweepContext(model_path=str(spec.model_path), override=override,
                        constants={k: float(v) for k, v in constants.items()}, variables=wanted,
                        metrics=metrics, time=schema.time, schema=schema, attrs=ds_attrs, key=key,
                        batch=effective_batch(spec.batch, spec.n_points),
                        structural=dict(structural or {}), sensitivities=sens)


def _sweep_attrs(spec, dae, override, constants) -> dict:
    """What the sweep changed of its model, for the store's attributes.

    ``model_yaml`` is the model file as written; these say what the sweep
    ran instead: ``parameters`` (every parameter that is not swept, with the
    sweep's constants applied: the JSON text ``solver.solve_batch`` writes in
    its own ``attrs["parameters"]`` for the same point), ``sweep_constants``,
    the ``Override`` (``sweep_override``; ``model_overrides`` as ``solve``
    writes it, so the stored model can be rebuilt), and the sweep file
    (``sweep_path``, ``sweep_yaml``).
    """
    swept = set(spec.points)
    values = dae.param_values({k: float(v) for k, v in constants.items()})
    attrs = {
        "parameters": json.dumps({k: np.asarray(v).tolist() for k, v in values.items()
                                  if k not in swept}, sort_keys=True),
        "sweep_constants": json.dumps({k: float(v) for k, v in spec.constants.items()},
                                      sort_keys=True),
        "sweep_override": json.dumps(spec.override or {}, sort_keys=True, default=str),
        "sweep_path": str(getattr(spec, "path", "")),
        "sweep_yaml": str(getattr(spec, "text", "") or ""),
    }
    if override:
        attrs["model_overrides"] = json.dumps(override, sort_keys=True, default=str)
    return attrs


def _where(spec, name: str) -> tuple[str, int | None]:
    """Key path and line of a swept or constant name in the sweep file."""
    for axis in spec.axes:
        if axis.name == name:
            group = "sample.bounds" if axis.group == "sample" else axis.group
            return f"Sweep.{group}.{name}", axis.line
    return f"Sweep.constants.{name}", None


def _check_swept_names(spec, model) -> None:
    """Every swept or constant name is a scalar free or structural parameter of the model.

    A structural parameter (one that fixes the model's size, see
    :mod:`sweep.structural`) must take whole values.

    Raises:
        InputError: an unknown or derived name, a vector parameter, or a
            structural one given a value that is not a whole number; listing
            the sweepable parameters or saying how to fix it.
    """
    params = model.params
    structural = model.param_info.structural
    valid = ", ".join(sorted(params)) or "none (the model has no free PhysicalParams)"
    if structural:
        valid += f"; structural (one model per value): {', '.join(structural)}"
    for name in list(spec.points) + list(spec.constants):
        path, line = _where(spec, name)
        if name in structural and np.ndim(structural[name]) == 0:
            values = spec.points[name] if name in spec.points else spec.constants[name]
            structural_sizes({name: values}, lambda n, v: InputError(
                _not_whole(spec, n, v), file=str(spec.path), path=path, line=line))
            continue
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


#: Most distinct points :func:`check_point_values` checks one by one (about
#: 0.2 ms each for a small mechanism); a sweep with more distinct values of
#: the checked parameters is checked at the points where each of them takes
#: its smallest or its largest value.
RANGE_CHECK_POINTS = 2000


def check_point_values(spec, model) -> str:
    """The sweep's values against the model's value rules (positive masses, ...).

    The model's reader checks each part's quantities at the model's default
    parameters; this runs the same rules (:meth:`solver.models.Model.check_values`,
    no build, no compile) at the sweep's points: the constants with every
    distinct combination of the swept values that the rules depend on, or,
    above :data:`RANGE_CHECK_POINTS` of them, the points where each such
    axis takes its smallest or largest value.  Structural names are left
    out (a structure group's model checks its own, :mod:`sweep.structural`).

    Returns:
        What was checked, in words for the dry run.

    Raises:
        InputError: a point out of range, located at the sweep file's axis (or
            constant) that moves the offending quantity, with its value, the
            point, and the model's key, value and rule.
    """
    from solver.models import ValueRangeError

    relevant = set(model.value_rule_params())
    if not relevant:
        return "the model's kind declares no value rules, so values are not range-checked"
    names = [n for n in spec.points if n in relevant and n in model.params]
    constants = {k: float(v) for k, v in spec.constants.items() if k in model.params}
    if names:
        table = np.stack([np.asarray(spec.points[n], dtype=float) for n in names], axis=1)
        _, first = np.unique(table, axis=0, return_index=True)
        index = np.sort(first)
    else:
        table, index = np.zeros((max(spec.n_points, 1), 0)), np.zeros(1, dtype=int)
    if len(index) > RANGE_CHECK_POINTS:
        index = np.array(sorted({int(f(table[:, j])) for j in range(len(names))
                                 for f in (np.argmin, np.argmax)}))
        words = (f"{len(index)} points where {', '.join(names)} take their smallest or largest "
                 f"values (of {spec.n_points} points; above {RANGE_CHECK_POINTS} distinct ones "
                 f"only these are checked)")
    elif names:
        words = f"every point's values ({', '.join(names)}; {len(index)} distinct)"
    else:
        words = "no swept name enters them, and the constants pass"
    for i in index:
        params = {**constants, **{n: float(table[i, j]) for j, n in enumerate(names)}}
        try:
            model.check_values(params)
        except ValueRangeError as err:
            blamed = [n for n in err.names if n in params] or names or list(constants)
            name = next((n for n in blamed if n in spec.points), blamed[0])
            path, line = _where(spec, name)
            given = ", ".join(f"{n} = {params[n]:g}" for n in blamed)
            point = f" (point {int(i)} of the sweep)" if name in spec.points else ""
            raise InputError(f"{given}{point} is out of range for the model: {err}; give values "
                             f"the model allows", file=str(spec.path), path=path,
                             line=line) from None
    return f"the values against the model's rules (positive masses, ...): {words}"


def _not_whole(spec, name: str, value) -> str:
    """The message for a structural sweep value that is not a whole number."""
    sampled = any(a.name == name and a.group == "sample" for a in spec.axes)
    fix = (f"give '{name}' whole values under Sweep.product or Sweep.zip (a sample draws real "
           f"numbers), e.g. {name}: [1, 2, 3]" if sampled
           else f"give whole numbers, e.g. {name}: [1, 2, 3]")
    return (f"'{name}' is structural (it fixes the model's size: the sweep builds and compiles "
            f"the model once per value), so its values must be whole numbers, got {float(value):g}; "
            f"{fix}")


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


#: Space kept free on a store's file system beyond what the store needs.
FREE_SPACE_MARGIN = 64 * 2**20


def _folder_bytes(path) -> int:
    """Bytes of the files under ``path`` (an existing store's size on disk)."""
    import os

    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def check_free_space(out, spec, context: SweepContext) -> str:
    """Refuse a sweep whose store would not fit on its file system, before anything is written.

    The store's size is the uncompressed estimate of :func:`store_bytes`
    (compression can only make it smaller); a store that exists already
    (a resume) needs only what it does not hold yet. The file system must
    have that plus :data:`FREE_SPACE_MARGIN` free.

    Args:
        out: the store's path (it may not exist yet).
        spec, context: the sweep and its context.

    Returns:
        A line for the dry run: the space needed and free.

    Raises:
        InputError: too little free space, with both figures and what to do.
    """
    import shutil
    from pathlib import Path

    from solver.errors import format_bytes

    need, _ = store_bytes(spec, context)
    if "://" in str(out):
        return (f"  storage:   {format_bytes(need)} at most (uncompressed), on an object store "
                f"(no free-space check)")
    path = Path(out)
    if path.exists():
        need = max(0.0, need - _folder_bytes(path))
    anchor = path
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    free = shutil.disk_usage(anchor).free
    if free < need + FREE_SPACE_MARGIN:
        raise InputError(f"the store needs about {format_bytes(need)} more (uncompressed, "
                         f"{spec.n_points} points) and {format_bytes(FREE_SPACE_MARGIN)} to spare, "
                         f"but its file system has {format_bytes(free)} free: free space there, choose "
                         f"another --out, or lower the number of points, output times or variables",
                         file=str(out))
    return f"  disk:      {format_bytes(need)} needed, {format_bytes(free)} free where the store goes"


def check_batch_memory(spec, context: SweepContext) -> str:
    """The dry run's batch line, after checking one batch's outputs against ``MAX_OUTPUT_BYTES``.

    A batch runs :attr:`SweepContext.batch` points (the sweep's ``Batch``, or
    its number of points where that is fewer), padded to that size; this
    counts the values the store keeps of them (the solver holds a few more
    while it runs: every variable, not only the chosen outputs).

    Returns:
        ``"  batch:     4 points per task (...): about 1.1 KiB of outputs ..."``.

    Raises:
        InputError: over :data:`solver.errors.MAX_OUTPUT_BYTES`, located at
            ``Batch``, with the limit and how to raise it.
    """
    from solver.errors import MAX_OUTPUT_BYTES, format_bytes, size_limit_message

    _, per = store_bytes(spec, context)
    size = int(context.batch)
    need = 8.0 * size * per
    message = size_limit_message("MAX_OUTPUT_BYTES", MAX_OUTPUT_BYTES, need,
                                 f"one batch of {size} points x {per} values a point in memory",
                                 "lower Batch or the output times")
    if message:
        raise InputError(message, file=str(spec.path), path="Batch")
    requested = int(getattr(spec, "requested_batch", size))
    note = (f" (Batch {requested} is more than the {spec.n_points} points, so one batch of "
            f"{size})" if requested > size else "")
    return (f"  batch:     {size} point{'' if size == 1 else 's'} per task{note}: about "
            f"{format_bytes(need)} of outputs in memory per batch")


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
    first = spec.batches()[0] if spec.n_points else slice(0, 0)
    points = {k: v[first] for k, v in spec.points.items()}
    t = time.perf_counter()
    with solver.compile_clock() as clock:
        result = batch_fn(points, context)
    wall = time.perf_counter() - t
    compile_s = min(clock.seconds, wall)
    size = max(int(context.batch), 1)
    per_point = max(wall - compile_s, 1e-9) / size
    rounds = math.ceil(spec.n_batches / max(int(workers), 1))
    return {"compile_seconds": compile_s, "seconds_per_point": per_point, "batch_points": size,
            "failed": int(np.sum(codes.is_failure(np.asarray(result.status)))),
            "total_seconds": compile_s + rounds * size * per_point}


# ----------------------------------------------------------------- the batch
def batch_fn(points: Mapping[str, np.ndarray], context: SweepContext):
    """The sweep's batch function: simulate one batch of design points.

    Args:
        points: swept parameter name -> (B,) values.
        context: :class:`SweepContext`.

    Returns:
        :class:`sweep.store.BatchResult`; a failed point carries its status
        (no assembly, max steps, …), its failure time and reason, its series
        up to the failure time (NaN after it) and NaN metrics; never an
        exception for one point.
    """
    from sweep.store import BatchResult

    model = _model(context.model_path, context.override, context.key)
    B = len(next(iter(points.values()))) if points else 1
    # A structure group's structural names are constant coordinates of its
    # points, fixed in its model: not run parameters.
    structural = getattr(context, "structural", None) or {}
    points = {k: v for k, v in points.items() if k not in structural}
    # A short last batch is padded (repeating its last point) so that every
    # batch has the same shape and the worker compiles once.
    pad = max(context.batch - B, 0) if points else 0
    padded = {k: np.concatenate([np.asarray(v, float), np.repeat(np.asarray(v, float)[-1:], pad)])
              for k, v in points.items()}
    sens = list(getattr(context, "sensitivities", None) or [])
    # A failed point keeps its motion up to the failure, as simulate shows it.
    ds = solver.solve_batch(model, padded, params=context.constants, t_eval=context.time,
                            sensitivities=sens or None, mask_failed=False,
                            outputs=solver_outputs(model.dae, context))
    # No run parameter varies (a group over structural values only): one
    # solve serves its B identical points.
    ds = ds.isel(point=slice(0, B) if padded else np.zeros(B, dtype=int))
    status = ds["status"].values.astype(np.int8)
    failed = codes.is_failure(status)
    data = {name: np.ascontiguousarray(ds[name].values, dtype=float)
            for name, dims in context.schema.variables.items() if (dims or name == "event_count") and name in ds}
    for mname, (of, reduce, *event) in context.metrics.items():
        if event:
            value = event_metric(model.dae, ds, of, reduce, *event)
            value[failed] = np.nan
            data[mname] = value
            for param in sens:
                dvalue = event_metric(model.dae, ds, of, reduce, *event, param=param)
                dvalue[failed] = np.nan
                data[sensitivity_name(mname, param)] = dvalue
            continue
        series = _metric_series(model.dae, ds, of)
        # A failed point's series is all NaN: numpy warns, the metric is NaN.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            value = np.array(REDUCERS[reduce](series), dtype=float)
        value[failed] = np.nan
        data[mname] = value
        for param in sens:
            tangent = _metric_series(model.dae, ds, of, param)
            dvalue = np.array(metric_tangent(reduce, series, tangent), dtype=float)
            dvalue[failed] = np.nan
            data[sensitivity_name(mname, param)] = dvalue
    reasons = np.asarray(ds["failure_reason"].values, dtype=object)
    msg = ""
    if failed.any():
        counts = {codes.meaning(c): int((status == c).sum()) for c in np.unique(status[failed])}
        msg = "failed points: " + ", ".join(f"{k}: {n}" for k, n in counts.items())
        first = next((i for i, r in enumerate(reasons) if r), None)
        if first is not None:
            msg += f"; first reason: {reasons[first]}"
            # The solver's own words, with the residuals and the closest point found.
            detail = json.loads(ds.attrs.get("failures", "{}")).get(str(first), "")
            if detail:
                msg += f" ({detail})"
    # Steps are counted in int32 by the integrator (max_steps is bounded to fit).
    return BatchResult(status=status, steps=ds["steps"].values.astype(np.int32), data=data, message=msg,
                       failure_time=np.asarray(ds["failure_time"].values, dtype=float),
                       failure_reason=[str(r) for r in reasons])


def solver_outputs(dae, context: SweepContext) -> list[str]:
    """The outputs a batch asks ``solver.solve_batch`` for: what the store keeps and the metrics read.

    The schema's series and event records (not its metrics, which
    :func:`batch_fn` computes), and each metric's source: a variable (or
    the variable of a component), another series, or the event records,
    with their derivatives for the sweep's sensitivities.  Nothing else is
    assembled: a sweep storing ``x`` and ``y`` of a model with more
    variables pays for ``x`` and ``y``.

    Args:
        dae: the sweep model's DAE.
        context: the sweep's :class:`SweepContext`.

    Returns:
        Output names (sorted), for ``solve_batch(outputs=...)``.
    """
    sens = list(getattr(context, "sensitivities", None) or [])
    metric_names = set(context.metrics) | {sensitivity_name(m, p) for m in context.metrics for p in sens}
    names = {name for name, dims in context.schema.variables.items()
             if (dims or name == "event_count") and name not in metric_names}
    for of, reduce, *event in context.metrics.values():
        if event:
            names |= {"event_which", "event_time", "event_rate"}
            names |= {sensitivity_name(f"event_{what}", p) for what in ("time", "rate") for p in sens}
            if reduce == "value" and of not in ("time", "rate"):
                names.add(f"{_component_index(dae, of)[0]}_at_event")
            continue
        target = _component_index(dae, of)
        var = of if target is None else target[0]
        names.add(var)
        if target is not None:
            names |= {sensitivity_name(var, p) for p in sens}
    return sorted(names)


def _check_event_metric(spec, dae, mname, m, event_names) -> None:
    """An event metric names one of the model's events, and a value it can read."""
    where = f"Outputs.metrics.{mname}"
    if not event_names:
        raise InputError(f"metric {mname!r} reduces event {m.event!r}, but the model has no Events or Stops; "
                         "add them to the model (or its Override)", file=str(spec.path), path=where + ".event")
    if m.event not in event_names:
        raise InputError(f"metric {mname!r}: unknown event {m.event!r}; the model's events and stops are "
                         f"{', '.join(event_names)}", file=str(spec.path), path=where + ".event")
    if m.reduce == "value" and m.of not in ("time", "rate"):
        names = [v.name for v in dae.variables]
        if _component_index(dae, m.of) is None:
            raise InputError(f"metric {mname!r}: unknown value {m.of!r} at the event; use time, rate (dg/dt) "
                             f"or a variable ({', '.join(names)}) or one of its components",
                             file=str(spec.path), path=where + ".of")


def event_metric(dae, ds, of, reduce: str, event: str, n, param: str | None = None) -> np.ndarray:
    """(B,) values of an event metric of a batch's Dataset, or their derivatives.

    Args:
        dae: the model's DAE (its events name the records).
        ds: the batch's Dataset (``event_which``, ``event_time``, ...).
        of: with ``value``: ``time``, ``rate``, a variable or a component.
        reduce: ``first`` (the time of the first occurrence), ``count``,
            ``period`` (the mean spacing of like-direction crossings: for an
            event of direction ``both``, up-crossings are spaced from
            up-crossings and down from down), ``period_spread`` (their
            standard deviation) or ``value`` (``of`` at the ``n``-th
            occurrence).
        event: the event's name.
        n: the occurrence of ``value`` (1 = the first).
        param: a parameter: the metric's derivative with respect to it,
            from the records' ``devent_time_d{param}`` and
            ``devent_rate_d{param}`` (a count's is 0: it is piecewise
            constant).

    Returns:
        NaN where a point has too few occurrences.
    """
    k = [e.name for e in dae.events].index(event)
    which = np.asarray(ds["event_which"].values)
    times = np.asarray(ds["event_time"].values, dtype=float)
    rates = np.asarray(ds["event_rate"].values, dtype=float)
    if param is not None:
        dtimes = np.asarray(ds[sensitivity_name("event_time", param)].values, dtype=float)
        drates = np.asarray(ds[sensitivity_name("event_rate", param)].values, dtype=float)
    mine = which == k
    B = which.shape[0]
    out = np.full(B, np.nan)
    for i in range(B):
        t, r = times[i][mine[i]], rates[i][mine[i]]
        dt_ = None if param is None else dtimes[i][mine[i]]
        if reduce == "count":
            out[i] = t.size if param is None else 0.0
        elif reduce == "first":
            out[i] = (t[0] if param is None else dt_[0]) if t.size else np.nan
        elif reduce in ("period", "period_spread"):
            groups = [np.sign(r) == s for s in (-1, 1)]
            gaps = np.concatenate([np.diff(t[g]) for g in groups])
            if gaps.size and param is None:
                out[i] = gaps.mean() if reduce == "period" else gaps.std()
            elif gaps.size:
                dgaps = np.concatenate([np.diff(dt_[g]) for g in groups])
                if reduce == "period":
                    out[i] = dgaps.mean()
                else:
                    dev = gaps - gaps.mean()
                    spread = gaps.std()
                    out[i] = np.mean(dev * (dgaps - dgaps.mean())) / spread if spread > 0 else 0.0
        elif reduce == "value" and t.size >= n:
            j = np.flatnonzero(mine[i])[n - 1]
            if of == "time":
                out[i] = times[i, j] if param is None else dtimes[i, j]
            elif of == "rate":
                out[i] = rates[i, j] if param is None else drates[i, j]
            else:
                var, idx = _component_index(dae, of)
                vals = np.asarray(ds[f"{var}_at_event"].values[i, j], dtype=float)
                out[i] = vals.reshape(-1)[idx] if idx is not None else (
                    float(vals) if vals.ndim == 0 else float(np.linalg.norm(vals)))
    return out


def scalar_series(dae) -> list[str]:
    """The run's scalar time series a metric may reduce besides a variable or its components.

    The derivatives of scalar variables (``x_d1``), ``constraint_residual``,
    the energy and its balance (``energy``, ``energy_change``,
    ``dissipated``, where the model has them) and each driver's
    ``torque_{driver}``: every output of :func:`solver.results.solution.output_layout`
    over time alone that is not a variable itself.

    Args:
        dae: the model's DAE.

    Returns:
        their names, in the dataset's order.
    """
    from solver.results.solution import output_layout

    layout, _ = output_layout(dae)
    return [name for name, (dims, _) in layout.items() if dims == ("time",) and name not in dae.var_index]


def _metric_series(dae, ds, of: str, param: str | None = None) -> np.ndarray:
    """(B, T) series a metric reduces: a variable (norm of a vector), a component, or another series.

    With ``param``, the series' derivative with respect to that parameter
    (from ``d{var}_d{param}``; a norm's derivative is ``v·dv/|v|``); only
    variables and their components have one.
    """
    target = _component_index(dae, of)
    if target is None:
        return np.asarray(ds[of].values, dtype=float)
    var, idx = target
    series = np.asarray(ds[var].values, dtype=float)
    B, T = series.shape[:2]
    tangent = None if param is None else np.asarray(ds[sensitivity_name(var, param)].values, dtype=float)
    if idx is not None:
        pick = lambda a: a.reshape(B, T, -1)[:, :, idx]
        return pick(series) if tangent is None else pick(tangent)
    if series.ndim > 2:
        flat = series.reshape(B, T, -1)
        norm = np.linalg.norm(flat, axis=-1)
        if tangent is None:
            return norm
        with np.errstate(all="ignore"):
            return np.sum(flat * tangent.reshape(B, T, -1), axis=-1) / norm
    return series if tangent is None else tangent
