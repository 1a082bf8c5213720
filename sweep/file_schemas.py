"""The declared shape of the sweep, design and cluster files (one schema per file kind).

Each file kind is a tree of :class:`sweep.yamlschema.Section` models: what
keys a mapping takes, which are required, and what each value must be.  The
readers (:func:`sweep.spec.load_sweep`, :func:`sweep.design.spec.load_design`,
:func:`sweep.run.load_cluster_config`) run their schema through
:func:`sweep.yamlschema.validate` first, then check what is more than shape:
values and constant expressions (``pi/4``), bounds around starts, names given
twice across groups, the model file, limits on sizes.
"""

# No "from __future__ import annotations": pydantic reads the field types below as written.
import re
from typing import Annotated, Any, ClassVar, Mapping

from pydantic import BeforeValidator, Field

from solver.errors import InputError
from solver.models.yamlio import describe_value, require_list, require_str
from sweep.yamlschema import (Int, Key, List, Mapping_, Number, Optional_, Section, Str, Table, known_keys,
                              problem, worded)

__all__ = ["SweepFile", "DesignFile", "ClusterFile", "AXIS_KINDS", "SAMPLE_METHODS", "REDUCTIONS",
           "EVENT_REDUCTIONS", "DEFAULT_BATCH", "METHODS", "TARGET_KINDS", "RESERVED_NAMES",
           "DEFAULT_SAMPLES", "DEFAULT_MAX_ITERATIONS", "DEFAULT_TOL", "CLUSTER_KEYS"]

AXIS_KINDS = ("values", "linspace", "logspace", "range")
SAMPLE_METHODS = ("random", "lhs", "sobol")
REDUCTIONS = ("min", "max", "range", "mean", "final", "absmax")
#: Reductions of an event's occurrences: the time of the first, how many,
#: the mean spacing of like-direction crossings (the period) and its
#: standard deviation, and a value at the n-th occurrence.
EVENT_REDUCTIONS = ("first", "count", "period", "period_spread", "value")
DEFAULT_BATCH = 64

# ================================================================== sweep files


def _parameter_name(key: Any) -> str:
    if not isinstance(key, str) or not key.strip():
        raise InputError(f"a parameter name must be a non-empty string, got {describe_value(key)}")
    return key


def _axis(spec: Any) -> Any:
    """An axis's shape: a list of values, or one of AXIS_KINDS with its list (values checked by the reader)."""
    if isinstance(spec, list):
        return spec
    if not isinstance(spec, Mapping):
        raise InputError(f"expected an axis: a list of values or a mapping with one of "
                         f"{', '.join(AXIS_KINDS)}; got {describe_value(spec)} (for a fixed "
                         f"value use Sweep.constants)")
    _AxisKeys.check_keys(spec)
    if len(spec) != 1:
        raise InputError(f"an axis needs exactly one of {', '.join(AXIS_KINDS)}, got "
                         f"{len(spec)}" + (f" ({', '.join(spec)})" if spec else ""))
    kind, arg = next(iter(spec.items()))
    what = {"values": "a list of values", "range": "[start, stop, step]"}.get(kind, "[start, stop, n]")
    try:
        require_list(arg, what=what, length=None if kind == "values" else 3)
    except InputError as err:
        raise problem(err.message, (kind,)) from None
    return spec


class _AxisKeys(Section):
    """The keys of an axis mapping (exactly one of them: :func:`_axis`)."""

    values: Any = None
    linspace: Any = None
    logspace: Any = None
    range: Any = None


ParameterName = Key(_parameter_name)
AxisSpec = Annotated[Any, BeforeValidator(worded(_axis))]
Pair = List(what="[lo, hi]", length=2)


class Sample(Section):
    """``Sweep.sample``: a random, Latin hypercube or Sobol' sample within bounds."""

    what: ClassVar[str] = "a mapping with method, n, seed, bounds"
    method: Str(SAMPLE_METHODS)
    n: Int(1)
    seed: Int(0) = 0
    bounds: Table(ParameterName, Pair, what="a mapping name: [lo, hi]",
                  empty="empty bounds: give at least one name: [lo, hi]")


_AXES = dict(what="a mapping of axes", empty="empty group: give at least one axis or remove the group")


class SweepGroups(Section):
    """``Sweep``: the groups of swept names."""

    what: ClassVar[str] = "a mapping with groups product, zip, sample, constants"
    nullable: ClassVar[bool] = True
    product: Optional_(Table(ParameterName, AxisSpec, **_AXES)) = None
    zip: Optional_(Table(ParameterName, AxisSpec, **_AXES)) = None
    sample: Optional_(Sample) = None
    constants: Table(ParameterName, Any, what="a mapping name: value", nullable=True) = {}


_METRIC = ("a mapping {of: VARIABLE, reduce: " + "|".join(REDUCTIONS) + "} or {event: NAME, reduce: "
           + "|".join(EVENT_REDUCTIONS) + "}")


class MetricSpec(Section):
    """One of ``Outputs.metrics``: ``{of, reduce}``, or an event's ``{event, reduce, of, n}``."""

    what: ClassVar[str] = _METRIC
    event: Optional_(Str()) = None
    reduce: str
    of: Optional_(Str()) = None
    n: Optional_(Int(1)) = None

    @classmethod
    def check_keys(cls, data: Mapping) -> None:
        valid, required = (("event", "reduce", "of", "n"), ("event", "reduce")) if "event" in data \
            else (("of", "reduce"), ("of", "reduce"))
        known_keys(data, valid, required)

    @classmethod
    def check_presence(cls, data: Mapping) -> None:
        choices = EVENT_REDUCTIONS if "event" in data else REDUCTIONS
        try:
            reduce = require_str(data["reduce"], choices=choices)
        except InputError as err:
            raise problem(err.message, ("reduce",)) from None
        if "event" not in data:
            try:   # a plain metric reads a variable: 'of' may not be null
                require_str(data["of"])
            except InputError as err:
                raise problem(err.message, ("of",)) from None
            return
        if reduce == "value":
            for key in ("of", "n"):
                if key not in data:
                    raise problem(f"reduce: value reads a value at the n-th occurrence: give '{key}' "
                                  f"(e.g. of: time, n: 1)")
        elif "of" in data or "n" in data:
            raise problem(f"'of' and 'n' belong to reduce: value; reduce: {reduce} takes neither",
                          ("of" if "of" in data else "n",))


class OutputsSpec(Section):
    """``Outputs``: what each point stores."""

    what: ClassVar[str] = "a mapping with variables, samples or dt, metrics, sensitivities"
    nullable: ClassVar[bool] = True
    variables: Optional_(List(Str(), what="a list of variable names", nonempty=True,
                              unique="variable '{}' is listed twice")) = None
    samples: Int(2) = None
    dt: Number(positive=True) = None
    metrics: Table(Key(require_str), MetricSpec, what="a mapping name: {of, reduce}", nullable=True) = {}
    sensitivities: Optional_(List(Str(), what="a list of parameter names", nonempty=True,
                                  unique="parameter '{}' is listed twice")) = None

    @classmethod
    def check_presence(cls, data: Mapping) -> None:
        if "samples" in data and "dt" in data:
            raise problem("give either samples or dt, not both", ("dt",))


class SweepFile(Section):
    """A sweep file (docs/reference/sweep-files.md)."""

    Title: Str() = None
    Model: Str()
    Override: Mapping_(nullable=True) = {}
    Sweep: SweepGroups
    Outputs: OutputsSpec = Field(default_factory=OutputsSpec)
    Batch: Int(1) = DEFAULT_BATCH


# ================================================================== design files

METHODS = ("L-BFGS-B", "SLSQP", "ipopt")
TARGET_KINDS = ("design", "samples", "csv", "expression")
#: Names of the history store's own variables: a parameter or constraint may not take them.
RESERVED_NAMES = ("objective", "gradient_norm", "point_status", "path", "initial_path", "target",
                  "iterations", "seconds", "final_objective", "start", "iteration", "time",
                  "component")
DEFAULT_SAMPLES = 51
DEFAULT_MAX_ITERATIONS = 100
DEFAULT_TOL = 1e-10


def _any_name(key: Any) -> str:
    if not isinstance(key, str) or not key.strip():
        raise InputError(f"a name must be a non-empty string, got {describe_value(key)}")
    return key


def _stored_name(key: Any) -> str:
    """A parameter or constraint name: it becomes a variable of the history store."""
    if _any_name(key) in RESERVED_NAMES:
        raise InputError(f"'{key}' is the name of one of the history store's own variables "
                         f"({', '.join(RESERVED_NAMES)}); choose another name")
    return key


class ParameterSpec(Section):
    """One of ``Parameters``: a start value within bounds (values checked by the reader)."""

    what: ClassVar[str] = "a mapping {start: VALUE, bounds: [LO, HI]}"
    start: Any
    bounds: Pair


def _path_names(raw: Any) -> tuple:
    if isinstance(raw, list):
        items = require_list(raw, nonempty=True, what="a variable name or a list of them")
        names = []
        for i, v in enumerate(items):
            try:
                names.append(require_str(v))
            except InputError as err:
                raise problem(err.message, (i,)) from None
        names = tuple(names)
    else:
        names = (require_str(raw),)
    dup = next((v for i, v in enumerate(names) if v in names[:i]), None)
    if dup is not None:
        raise InputError(f"'{dup}' is listed twice")
    return names


def _expression(arg: Any) -> Any:
    if isinstance(arg, list):
        return require_list(arg, nonempty=True, what="a list of expressions, one per component")
    if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
        raise InputError(f"expected an expression of t (a string, or a list with one per "
                         f"component), got {describe_value(arg)}")
    return arg


class SampledTarget(Section):
    """``Objective.target.samples``: times and a point per time (values checked by the reader)."""

    what: ClassVar[str] = "a mapping {t: [...], points: [...]}"
    t: List(what="a list of times")
    points: List(what="a list of points")


class TargetSpec(Section):
    """``Objective.target``: exactly one of :data:`TARGET_KINDS`."""

    what: ClassVar[str] = "a mapping with one of " + ", ".join(TARGET_KINDS)
    design: Table(Key(_any_name), Any, what="a mapping PARAMETER: VALUE of the reference design",
                  empty="give at least one parameter value of the reference design") = None
    samples: SampledTarget = None
    csv: Str() = None
    expression: Annotated[Any, BeforeValidator(worded(_expression))] = None

    @classmethod
    def check_presence(cls, data: Mapping) -> None:
        if len(data) != 1:
            raise problem(f"give exactly one of {', '.join(TARGET_KINDS)}, got {len(data)}"
                          + (f" ({', '.join(data)})" if data else ""))

    @property
    def kind(self) -> str:
        """The kind of target given."""
        return next(iter(self.model_fields_set))


class ObjectiveSpec(Section):
    """``Objective``: the path followed and the target curve."""

    what: ClassVar[str] = "a mapping with path, target, samples"
    path: Annotated[tuple, BeforeValidator(worded(_path_names))]
    target: TargetSpec
    samples: Int(2) = DEFAULT_SAMPLES


class ConstraintSpec(Section):
    """One of ``Constraints``: a metric with a min, a max or both."""

    what: ClassVar[str] = ("a mapping {of: VARIABLE, reduce: " + "|".join(REDUCTIONS)
                           + ", min/max: VALUE}")
    of: Str()
    reduce: Str(REDUCTIONS)
    min: Number() = None
    max: Number() = None

    @classmethod
    def check_presence(cls, data: Mapping) -> None:
        if "min" not in data and "max" not in data:
            raise problem("give min, max or both")


class OptimizerSpec(Section):
    """``Optimizer``: the method and when it stops."""

    what: ClassVar[str] = "a mapping with method, max_iterations, tol"
    nullable: ClassVar[bool] = True
    method: Str(METHODS) = "L-BFGS-B"
    max_iterations: Int(1) = DEFAULT_MAX_ITERATIONS
    tol: Number(positive=True) = DEFAULT_TOL


class DesignFile(Section):
    """A design file (``mechsweep design``)."""

    Title: Str() = None
    Model: Str()
    Override: Mapping_(nullable=True) = {}
    Parameters: Table(Key(_stored_name), ParameterSpec,
                      what="a mapping NAME: {start: VALUE, bounds: [LO, HI]}",
                      empty="give at least one design parameter, e.g. L2: {start: 1.0, bounds: "
                            "[0.9, 1.2]}")
    Objective: ObjectiveSpec
    Constraints: Table(Key(_stored_name), ConstraintSpec,
                       what="a mapping NAME: {of: VARIABLE, reduce: ..., min/max: VALUE}",
                       nullable=True) = {}
    Optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)


# ================================================================== cluster files

CLUSTER_KEYS = {
    "module": "Python module that defines the cluster class, e.g. dask_jobqueue",
    "class": "the cluster class, e.g. SLURMCluster",
    "kwargs": "mapping of keyword arguments for the class (optional)",
    "scale": "number of workers, or a mapping for cluster.scale(), e.g. {jobs: 4} (optional)",
    "adapt": "mapping for cluster.adapt(), e.g. {minimum: 1, maximum: 20} (optional)",
}
_CLUSTER_VALID = "; ".join(f"{k}: {v}" for k, v in CLUSTER_KEYS.items())


def _dotted(key: str):
    def check(value: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][\w.]*", value):
            raise InputError(f"expected {CLUSTER_KEYS[key]} (a dotted Python name), "
                             f"got {value!r}; valid keys: {_CLUSTER_VALID}")
        return value
    return Annotated[str, BeforeValidator(worded(check))]


def _plain_mapping(value: Any) -> dict:
    if not isinstance(value, dict):
        raise InputError(f"expected a mapping, got {value!r}")
    return value


def _scale(value: Any) -> Any:
    if value is not None and not (isinstance(value, dict) or (
            isinstance(value, int) and not isinstance(value, bool) and value >= 0)):
        raise InputError(f"expected a number of workers or a mapping like {{jobs: 4}}, got {value!r}")
    return value


class ClusterFile(Section):
    """A cluster file: the Dask cluster class to start and how to size it."""

    what: ClassVar[str] = "a mapping with keys " + _CLUSTER_VALID
    # module and class are checked when absent too ("got None"), as they always were.
    module: _dotted("module") = Field(default=None, validate_default=True)
    class_: _dotted("class") = Field(default=None, alias="class", validate_default=True)
    kwargs: Annotated[dict, BeforeValidator(worded(_plain_mapping))] = None
    adapt: Annotated[dict, BeforeValidator(worded(_plain_mapping))] = None
    scale: Annotated[Any, BeforeValidator(worded(_scale))] = None

    @classmethod
    def check_keys(cls, data: Mapping) -> None:
        unknown = sorted((k for k in data if k not in CLUSTER_KEYS), key=str)
        if unknown:
            raise problem(f"unknown key(s) {', '.join(map(str, unknown))}; valid keys: {_CLUSTER_VALID}",
                          (str(unknown[0]),))
