"""A sweep's task function: a batch of the design table → ``solver.solve_batch`` → outputs and metrics.

What varies (the points), what is kept (:class:`SweepContext`: model file,
override, constants, outputs, time grid) and where it runs (:mod:`sweep.run`)
stay apart.  The pipeline uses the solver's public API only: it turns a batch
into :func:`solver.solve_batch` arguments and reduces the resulting Dataset to
the store's outputs, so one run and a sweep share every name and unit.
:func:`batch_fn` is module level, and a worker keeps one loaded model per
model hash, whose compiled model (``solver.compiled_model``) is therefore
built once per worker.  The metrics a batch computes are in
:mod:`sweep.metrics`, the dry run's size checks in :mod:`sweep.sizes`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import warnings
from collections import Counter, OrderedDict
from typing import Any, Callable, Mapping

import numpy as np

import solver
from solver import status as codes
from solver.integrate.sensitivity import metric_tangent, sensitivity_name
from solver.errors import InputError
# Re-exported: these were defined here before the metrics and the size
# checks got their own modules.
from sweep.metrics import (REDUCERS, check_event_metric, component_index, metric_series, event_metric,
                           scalar_series, solver_outputs)
from sweep.sizes import (FREE_SPACE_MARGIN, check_batch_memory, check_free_space,
                         check_store_size, store_bytes)

__all__ = ["SweepContext", "build_context", "batch_fn", "REDUCERS", "event_metric", "scalar_series", "store_bytes",
           "check_store_size", "check_batch_memory", "estimate_run", "load_model", "structural_names",
           "structural_sizes", "rebuild_structural", "group_context", "remember_model", "MODEL_BUILDS",
           "check_point_values", "RANGE_CHECK_POINTS", "solver_outputs", "check_free_space",
           "FREE_SPACE_MARGIN", "FEW_POINTS"]


# A sweep of at most this many points takes the solver's single-run engine
# choice for its batches (compact above the pendulum's size) instead of the
# batches' (unrolled up to RSCR's size): each worker compiles it up to twice
# as fast, and its slower steps cost so few points little.  The unrolled
# engine's faster steps repay its longer compile only from about 2,000-3,000
# points a worker on the shipped mid-size models (workflows/benchmarks/results/sweep.txt).
FEW_POINTS = 500


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
        batch: points per batch: the sweep's ``Batch``, or its number of
            points where that is fewer (:func:`sweep.store.effective_batch`);
            shorter batches are padded to it.
        structural: structural parameter -> whole value of a structure
            group (:mod:`sweep.structural`); these names are in the points as
            constant coordinates and fixed in ``override``, never passed to
            the solver as run parameters. Empty for a plain sweep.
        value_check: what :func:`check_point_values` checked, in words.
        sensitivities: parameters the outputs are differentiated with
            respect to (``Outputs.sensitivities``).
        batch_engine: whether the batches take the solver's engine for
            batches (``solve_batch(batch_engine=...)``): False for a sweep of
            at most :data:`FEW_POINTS` points, whose compile would outweigh
            its runs.
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
    batch_engine: bool = True

    @property
    def engine_argument(self) -> bool | None:
        """``solve_batch``'s ``batch_engine`` for this sweep's batches (None: its default)."""
        return None if self.batch_engine else False

    def check_on_worker(self) -> str:
        """Why this process's copy of the model is not the driver's; empty when it is.

        A worker builds the model from :attr:`model_path` itself: on a file
        system that holds another version of the file (a stale copy, an edit
        since the sweep started) it would compute another model.
        """
        if self.key in _WORKER_MODELS:
            return ""
        model = solver.load(self.model_path, overrides=self.override or None)
        if model_key(self.model_path, model.text, self.override) != self.key:
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


def model_key(path, text: str, override) -> str:
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


def cached_model(path, override, key):
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
    MODEL_BUILDS[model_key(spec.model_path, model.text, spec.override)] += 1
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
    check_swept_names(spec, model)
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


def sweep_times(spec, model) -> np.ndarray:
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
            check_event_metric(spec, dae, mname, m, event_names)
            metrics[mname] = (m.of, m.reduce, m.event, m.n)
            continue
        target = component_index(dae, m.of)
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
    t = sweep_times(spec, model)
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
    key = model_key(spec.model_path, model.text, override)
    return SweepContext(model_path=str(spec.model_path), override=override,
                        constants={k: float(v) for k, v in constants.items()}, variables=wanted,
                        metrics=metrics, time=schema.time, schema=schema, attrs=ds_attrs, key=key,
                        batch=effective_batch(spec.batch, spec.n_points),
                        structural=dict(structural or {}), sensitivities=sens,
                        batch_engine=spec.n_points > FEW_POINTS)


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


def check_swept_names(spec, model) -> None:
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
        ``batch_points``, ``failed`` (points of the batch that failed),
        ``wall_seconds`` (the batch's whole time) and
        ``total_seconds``: compile + batches x batch seconds / workers
        (batches are spread evenly; a worker runs one at a time).
    """
    first = spec.batches()[0] if spec.n_points else slice(0, 0)
    points = {k: v[first] for k, v in spec.points.items()}
    with solver.compile_clock() as clock:
        result = batch_fn(points, context)
    wall = clock.wall_seconds
    compile_s = min(clock.seconds, wall)
    size = max(int(context.batch), 1)
    per_point = max(wall - compile_s, 1e-9) / size
    rounds = math.ceil(spec.n_batches / max(int(workers), 1))
    return {"compile_seconds": compile_s, "seconds_per_point": per_point, "batch_points": size,
            "failed": int(np.sum(codes.is_failure(np.asarray(result.status)))),
            "wall_seconds": wall, "total_seconds": compile_s + rounds * size * per_point}


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

    model = cached_model(context.model_path, context.override, context.key)
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
    # A failed point keeps its motion up to the failure, as simulate shows it.  The outputs
    # come as arrays: a Dataset would be built only to be read back.
    out = solver.solve_batch(model, padded, params=context.constants, t_eval=context.time,
                             sensitivities=sens or None, mask_failed=False,
                             outputs=solver_outputs(model.dae, context),
                             batch_engine=context.engine_argument, dataset=False)
    # No run parameter varies (a group over structural values only): one
    # solve serves its B identical points.  Else only a short batch's padding
    # is dropped (a view: a whole batch is not copied for nothing).
    rows = slice(0, B) if padded else np.zeros(B, dtype=int)
    status = out["status"][rows].astype(np.int8)
    failed = codes.is_failure(status)
    data = {name: np.ascontiguousarray(out[name][rows], dtype=float)
            for name, dims in context.schema.variables.items() if (dims or name == "event_count") and name in out}
    for mname, (of, reduce, *event) in context.metrics.items():
        if event:
            value = event_metric(model.dae, out, of, reduce, *event)[rows]
            value[failed] = np.nan
            data[mname] = value
            for param in sens:
                dvalue = event_metric(model.dae, out, of, reduce, *event, param=param)[rows]
                dvalue[failed] = np.nan
                data[sensitivity_name(mname, param)] = dvalue
            continue
        series = metric_series(model.dae, out, of)[rows]
        # A failed point's series is all NaN: numpy warns, the metric is NaN.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            value = np.array(REDUCERS[reduce](series), dtype=float)
        value[failed] = np.nan
        data[mname] = value
        for param in sens:
            tangent = metric_series(model.dae, out, of, param)[rows]
            dvalue = np.array(metric_tangent(reduce, series, tangent), dtype=float)
            dvalue[failed] = np.nan
            data[sensitivity_name(mname, param)] = dvalue
    reasons = np.asarray(out["failure_reason"][rows], dtype=object)
    msg = ""
    if failed.any():
        counts = {codes.meaning(c): int((status == c).sum()) for c in np.unique(status[failed])}
        msg = "failed points: " + ", ".join(f"{k}: {n}" for k, n in counts.items())
        first = next((i for i, r in enumerate(reasons) if r), None)
        if first is not None:
            msg += f"; first reason: {reasons[first]}"
            # The solver's own words, with the residuals and the closest point found.
            detail = json.loads(out.attrs.get("failures", "{}")).get(str(first), "")
            if detail:
                msg += f" ({detail})"
    # Steps are counted in int32 by the integrator (max_steps is bounded to fit).
    return BatchResult(status=status, steps=out["steps"][rows].astype(np.int32), data=data, message=msg,
                       failure_time=np.asarray(out["failure_time"][rows], dtype=float),
                       failure_reason=[str(r) for r in reasons])
