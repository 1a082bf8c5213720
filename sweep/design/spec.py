"""Design files (``mechsweep design``): read and check their structure.

A design file names a model, the design parameters with their start values
and bounds, an objective (the distance of a point's path from a target
curve), optional constraints on sweep-style metrics and the optimiser::

    Title: RSCR coupler curve
    Model: ../mechanisms/rscr.yaml        # relative to this file
    Override: {ProblemData: {tend: 1.0}}  # optional, merged into the model as in sweep files
    Parameters:
      L2: {start: 1.02, bounds: [0.95, 1.20]}
      gamma: {start: 1.30, bounds: [1.20, 1.50]}
    Objective:
      path: B                 # a variable, a component (B[2], Bx) or a list of them
      target:                 # exactly one of
        design: {L2: 1.08, gamma: 1.35}         # the path of a known design
        # samples: {t: [...], points: [[x, y, z], ...]}
        # csv: curve.csv                        # columns t, x, y, z (a header row optional)
        # expression: ["0.3*cos(t)", "0.3*sin(t)", "-0.1"]
      samples: 51             # output times over [t0, tend]
    Constraints:              # optional: metrics with bounds
      max_multiplier: {of: lam, reduce: absmax, max: 200}
    Optimizer: {method: L-BFGS-B, max_iterations: 200, tol: 1.0e-14}

This module checks what can be checked without the model (keys, types,
numbers, bounds around starts, the target's own shape, CSV contents and
expression syntax); :func:`sweep.design.optimize.build_problem` checks the rest
against the built model (parameter and variable names, the target's number
of components, its time span).  Every message names the file, the key path
and the line.  Nothing read here is executed: values are numbers or
:mod:`solver.models.expr` expressions.
"""

from __future__ import annotations

import copy
import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from solver.errors import InputError
from solver.models.expr import evaluate_constant, parse
from solver.models.yamlio import Locator, check_regular_file, describe_value, format_path, load_yaml
from sweep.file_schemas import (DEFAULT_MAX_ITERATIONS, DEFAULT_SAMPLES, DEFAULT_TOL, METHODS, REDUCTIONS,
                                RESERVED_NAMES, TARGET_KINDS, ConstraintSpec, DesignFile, ObjectiveSpec,
                                OptimizerSpec, ParameterSpec, TargetSpec)
from sweep.yamlschema import validate

__all__ = ["DesignSpec", "DesignParameter", "Target", "Constraint", "OptimizerSettings",
           "load_design", "TOP_KEYS", "METHODS", "TARGET_KINDS", "REDUCTIONS", "RESERVED_NAMES",
           "DEFAULT_SAMPLES", "MAX_TARGET_ROWS"]

# The shape of a design file is declared in sweep.file_schemas; the checks here are of values.
TOP_KEYS = DesignFile.keys()
#: Most rows of a samples/CSV target (a guard against a wrong file eating memory).
MAX_TARGET_ROWS = 1_000_000


@dataclass(frozen=True)
class DesignParameter:
    """One design parameter.

    Attributes:
        name: a scalar parameter of the model.
        start: the start value (``lo <= start <= hi``).
        lo, hi: the bounds (``lo < hi``).
    """

    name: str
    start: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Target:
    """The target curve, as given (resolved against the model by :mod:`sweep.design.optimize`).

    Attributes:
        kind: one of :data:`TARGET_KINDS`.
        design: for ``design``: parameter name -> value of the reference design.
        t: for ``samples``/``csv``: (n,) increasing times.
        points: for ``samples``/``csv``: (n, k) points (k components each).
        expression: for ``expression``: a string (a scalar or vector
            expression) or a list of items (one per component), as written.
        source: for ``csv``: the CSV file.
    """

    kind: str
    design: dict | None = None
    t: np.ndarray | None = field(default=None, repr=False)
    points: np.ndarray | None = field(default=None, repr=False)
    expression: Any = None
    source: Path | None = None


@dataclass(frozen=True)
class Constraint:
    """A metric with bounds: ``min <= reduce(of) <= max`` (at least one given).

    Attributes:
        name: the constraint's name (a key of ``Constraints``).
        of: a variable, a component (``B[2]``, ``Bx``); a whole vector
            means its norm, as for sweep metrics.
        reduce: one of :data:`REDUCTIONS`.
        min, max: bounds, or None.
    """

    name: str
    of: str
    reduce: str
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class OptimizerSettings:
    """The optimiser: ``method`` (:data:`METHODS`), ``max_iterations`` and ``tol``."""

    method: str = "L-BFGS-B"
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    tol: float = DEFAULT_TOL


@dataclass
class DesignSpec:
    """A checked design file.

    Attributes:
        path: the design file.
        title: its Title (the file name's stem when absent).
        model_path: the model file, resolved.
        model_text: the model file's text when the design was read.
        override: the Override mapping (``{}`` when absent).
        parameters: name -> :class:`DesignParameter`, in file order.
        path_names: the ``Objective.path`` entries, as written.
        target: the :class:`Target`.
        samples: number of output times over the model's [t0, tend].
        constraints: name -> :class:`Constraint`, in file order.
        optimizer: :class:`OptimizerSettings`.
        text: the design file's text.
        loc: its :class:`~solver.models.yamlio.Locator` (lines for later messages).
    """

    path: Path
    title: str
    model_path: Path
    model_text: str
    override: dict
    parameters: dict
    path_names: tuple
    target: Target
    samples: int
    constraints: dict
    optimizer: OptimizerSettings
    text: str = field(default="", repr=False)
    loc: Locator | None = field(default=None, repr=False)

    @property
    def names(self) -> list[str]:
        """The design parameters' names in file order."""
        return list(self.parameters)

    def error(self, message: str, path: tuple) -> InputError:
        """An :class:`InputError` located at ``path`` of the design file."""
        return self.loc.error(message, path) if self.loc is not None else InputError(
            message, file=str(self.path), path=format_path(path) or None)


# ------------------------------------------------------------------ values
def _constant(value: Any, path: tuple, loc: Locator) -> float:
    """A number, or a constant expression such as ``'pi/4'`` (no names), as a finite float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise loc.error(f"expected a number or a constant expression such as 'pi/4', got "
                        f"{describe_value(value)}", path)
    if isinstance(value, str):
        text = value
        value = evaluate_constant(text, {}, file=loc.file, path=format_path(path),
                                  line=loc.nearest(path))
        if not isinstance(value, float):
            raise loc.error(f"expected a single number, but '{text}' is a vector", path)
    value = float(value)
    if not math.isfinite(value):
        raise loc.error(f"expected a finite number, got {value}", path)
    return value


# ------------------------------------------------------------------ reader
def load_design(path: str | Path) -> DesignSpec:
    """Read and check a design file (everything that needs no model).

    The file's shape is checked first against its declared schema
    (:class:`sweep.file_schemas.DesignFile`), then its values here.

    Args:
        path: the design YAML file.

    Returns:
        The :class:`DesignSpec`.

    Raises:
        InputError: malformed content, naming the file, key path and line,
            what was expected and the valid choices; a missing model or CSV
            file; a start outside its bounds; constraints with L-BFGS-B.
    """
    path = Path(path)
    check_regular_file(path, str(path))
    data, loc = load_yaml(path)
    top = validate(DesignFile, data, loc,
                   document="a design file: a mapping with keys " + ", ".join(TOP_KEYS))
    title = top.Title if top.Title is not None else path.stem
    model_path, model_text = _model_file(path, top.Model, loc)
    override = copy.deepcopy(top.Override)
    parameters = _parameters(top.Parameters, loc)
    path_names, target, samples = _objective(top.Objective, path, loc)
    constraints = _constraints(top.Constraints, loc, parameters)
    optimizer = _optimizer(top.Optimizer)
    if constraints and optimizer.method == "L-BFGS-B":
        key = ("Optimizer", "method") if top.Optimizer.given("method") else ("Constraints",)
        raise loc.error("L-BFGS-B takes bounds only, not Constraints; use method SLSQP or ipopt "
                        "(Optimizer: {method: SLSQP}), or remove Constraints", key)
    return DesignSpec(path=path, title=title, model_path=model_path, model_text=model_text,
                      override=override, parameters=parameters, path_names=path_names,
                      target=target, samples=samples, constraints=constraints,
                      optimizer=optimizer, text=loc.text, loc=loc)


def _model_file(path: Path, rel: str, loc: Locator) -> tuple[Path, str]:
    """The Model path (relative to the design file), checked to be a readable file."""
    model_path = (path.parent / rel).resolve()
    try:
        found = model_path.exists()
    except OSError as exc:
        raise loc.error(f"cannot use the model path: {exc.strerror or exc}; give the path of a "
                        f"model file, relative to the design file's folder", ("Model",)) from None
    if not found:
        raise loc.error(f"model file not found: {model_path} (Model is relative to the design "
                        f"file's folder {path.parent.resolve()})", ("Model",))
    try:
        check_regular_file(model_path)
        return model_path, model_path.read_text(encoding="utf-8")
    except InputError as err:
        raise loc.error(f"{model_path} cannot be a model file: {err.message}", ("Model",)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise loc.error(f"cannot read model file {model_path}: {exc}", ("Model",)) from None


def _parameters(params: Mapping[str, ParameterSpec], loc: Locator) -> dict:
    """``Parameters``: name -> :class:`DesignParameter` (values and bounds checked)."""
    out = {}
    for name, item in params.items():
        sub = ("Parameters", name)
        start = _constant(item.start, sub + ("start",), loc)
        lo = _constant(item.bounds[0], sub + ("bounds", 0), loc)
        hi = _constant(item.bounds[1], sub + ("bounds", 1), loc)
        if not lo < hi:
            raise loc.error(f"bounds must have lo < hi, got [{lo:g}, {hi:g}]", sub + ("bounds",))
        if not lo <= start <= hi:
            raise loc.error(f"start {start:g} is outside the bounds [{lo:g}, {hi:g}]; give a start "
                            f"within them (lo <= start <= hi)", sub + ("start",))
        out[name] = DesignParameter(name, start, lo, hi)
    return out


def _objective(obj: ObjectiveSpec, path: Path, loc: Locator) -> tuple[tuple, Target, int]:
    """``Objective``: (path entries, target, samples)."""
    return obj.path, _target(obj.target, path, loc), obj.samples


def _target(tgt: TargetSpec, path: Path, loc: Locator) -> Target:
    """``Objective.target``: its values (the shape is the schema's)."""
    kind = tgt.kind
    sub = ("Objective", "target", kind)
    if kind == "design":
        return Target("design", design={k: _constant(v, sub + (k,), loc) for k, v in tgt.design.items()})
    if kind == "samples":
        t = np.array([_constant(v, sub + ("t", i), loc) for i, v in enumerate(tgt.samples.t)],
                     dtype=float)
        pts = tgt.samples.points
        if len(pts) != len(t):
            raise loc.error(f"points has {len(pts)} rows but t has {len(t)} times; give one "
                            f"point per time", sub + ("points",))
        rows = []
        for i, row in enumerate(pts):
            if isinstance(row, list):
                rows.append([_constant(v, sub + ("points", i, j), loc) for j, v in enumerate(row)])
            else:
                rows.append([_constant(row, sub + ("points", i), loc)])
            if len(rows[-1]) != len(rows[0]):
                raise loc.error(f"each point must have the same number of components: point 0 "
                                f"has {len(rows[0])}, point {i} has {len(rows[-1])}",
                                sub + ("points", i))
        _check_times(t, lambda m: loc.error(m, sub + ("t",)))
        return Target("samples", t=t, points=np.array(rows, dtype=float))
    if kind == "csv":
        source = (path.parent / tgt.csv).resolve()
        t, points = _read_csv(source, lambda m: loc.error(m, sub))
        return Target("csv", t=t, points=points, source=source)
    # expression: a string, or a list of items (one per component)
    arg = tgt.expression
    if isinstance(arg, list):
        for i, item in enumerate(arg):
            parse(item, file=loc.file, path=format_path(sub + (i,)), line=loc.nearest(sub + (i,)))
    else:
        parse(arg, file=loc.file, path=format_path(sub), line=loc.nearest(sub))
    return Target("expression", expression=arg)


def _check_times(t: np.ndarray, fail) -> None:
    if len(t) < 2:
        raise fail(f"give at least 2 sample times, got {len(t)}")
    if not np.all(np.diff(t) > 0):
        i = int(np.flatnonzero(~(np.diff(t) > 0))[0])
        raise fail(f"the times must increase: t[{i}] = {t[i]:g}, t[{i + 1}] = {t[i + 1]:g}")


def _read_csv(source: Path, fail) -> tuple[np.ndarray, np.ndarray]:
    """A target curve from a CSV file: columns t, then one per component; a header row optional.

    Raises:
        InputError: (from ``fail``) a missing or unreadable file, rows of
            different lengths, a value that is not a finite number (naming
            the CSV file's line), fewer than 2 rows, times that do not increase.
    """
    try:
        check_regular_file(source)
        if source.stat().st_size > 64 * 2**20:
            raise fail(f"{source}: the CSV file is larger than 64 MiB; give fewer samples")
        text = source.read_text(encoding="utf-8")
    except InputError as err:
        raise fail(f"{source}: {err.message} (csv is relative to the design file's folder)") \
            from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read the CSV file {source}: {exc}") from None
    rows = [(n, r) for n, r in enumerate(csv.reader(io.StringIO(text)), start=1)
            if r and any(c.strip() for c in r) and not r[0].lstrip().startswith("#")]
    if rows and not _numeric(rows[0][1][0]):
        header = [c.strip() for c in rows[0][1]]
        if header[0].lower() != "t":
            raise fail(f"{source}:{rows[0][0]}: the first column must be the time t; the header "
                       f"is {', '.join(header)}")
        rows = rows[1:]
    if len(rows) > MAX_TARGET_ROWS:
        raise fail(f"{source}: {len(rows)} rows, more than the limit of {MAX_TARGET_ROWS}")
    if len(rows) < 2:
        raise fail(f"{source}: give at least 2 rows of t and the components, got {len(rows)}")
    width = len(rows[0][1])
    if width < 2:
        raise fail(f"{source}:{rows[0][0]}: expected columns t, then one per component (e.g. t, "
                   f"x, y, z), got {width} column")
    table = np.empty((len(rows), width))
    for k, (n, row) in enumerate(rows):
        if len(row) != width:
            raise fail(f"{source}:{n}: expected {width} columns as in the first row, got {len(row)}")
        for j, cell in enumerate(row):
            if not _numeric(cell) or not math.isfinite(float(cell)):
                raise fail(f"{source}:{n}: column {j + 1}: expected a finite number, got "
                           f"{cell.strip()[:40]!r}")
            table[k, j] = float(cell)
    _check_times(table[:, 0], lambda m: fail(f"{source}: {m}"))
    return table[:, 0].copy(), table[:, 1:].copy()


def _numeric(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def _constraints(cons: Mapping[str, ConstraintSpec], loc: Locator, parameters: Mapping) -> dict:
    """``Constraints``: name -> :class:`Constraint` (names and bounds checked)."""
    out = {}
    for name, item in cons.items():
        sub = ("Constraints", name)
        if name in parameters or (name.startswith("start_") and name[6:] in parameters):
            what = "a design parameter" if name in parameters else \
                f"the history's variable of {name[6:]}'s start values"
            raise loc.error(f"'{name}' is also {what}; give the constraint another name", sub)
        if item.min is not None and item.max is not None and not item.min < item.max:
            raise loc.error(f"min must be below max, got min {item.min:g}, max {item.max:g}", sub)
        out[name] = Constraint(name, item.of, item.reduce, item.min, item.max)
    return out


def _optimizer(opt: OptimizerSpec) -> OptimizerSettings:
    """``Optimizer``: method, max_iterations, tol (all optional)."""
    return OptimizerSettings(opt.method, opt.max_iterations, opt.tol)
