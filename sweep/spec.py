"""Sweep files: read, validate and expand into a flat, deterministic design table.

A sweep file names a model, optional overrides of the model's YAML, and how
parameters vary (docs/reference/sweep-files.md)::

    Title: RSCR link-length study
    Model: ../mechanisms/rscr.yaml        # relative to this file; must exist
    Override: {ProblemData: {tend: 5}}    # deep-merged into the model's data
    Sweep:
      product:                            # Cartesian product of axes
        L1: {linspace: [0.8, 1.2, 21]}
        gamma: [0.3, 0.6, 0.9]            # a bare list means {values: [...]}
      zip:                                # varied together (same length)
        k: {logspace: [2, 4, 5]}          # 10**2 .. 10**4, 5 values
        c: {values: [1, 2, 3, 4, 5]}
      sample: {method: lhs, n: 1000, seed: 1, bounds: {L2: [1.5, 2.5]}}
      constants: {m: 2}                   # the same for every point
    Outputs:
      variables: [B, C1]                  # default: all
      samples: 201                        # or dt: 0.01
      metrics: {maxB: {of: By, reduce: max}}
    Batch: 64                             # points per batch = Zarr chunk

Axis kinds: ``values`` (a list), ``linspace: [a, b, n]`` and ``logspace: [a, b,
n]`` as in numpy (logspace in decades: ``10**a .. 10**b``), and ``range:
[start, stop, step]``: ``start, start+step, ...`` up to ``stop``, *inclusive*
when ``stop`` is reached within a relative tolerance of 1e-9 of a step (so
``range: [0, 1, 0.1]`` has 11 values despite rounding); the step may be
negative but not zero or of the wrong sign.  Values are numbers, or constant
expression strings such as ``pi/4`` (evaluated by :mod:`solver.models.expr`).

Expansion order (fixed, so the same file always gives the same table): the
groups combine by Cartesian product, product axes first in file order, then
the zip group as one axis, then the sample as one axis, the last varying
fastest (like ``itertools.product``).  A name may appear in one place only.

The Override is kept here as given; it is merged into the model's YAML data
when the model is loaded (``solver.models.load(..., overrides=...)``), by the
one rule of :func:`solver.models.model.deep_merge`: where both the model and
the override hold a mapping, the mappings merge key by key, recursively;
anywhere else the override's value replaces the model's (lists are replaced
whole, and an empty override value sets the key to null).

Batches are :func:`sweep.store.batch_slices` of the points (``Batch`` points
each, the last one shorter; a sweep of fewer points than ``Batch`` is one
batch of them all, :attr:`SweepSpec.batch`): one task each, one Zarr chunk
each.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from solver.errors import (MAX_OUTPUT_BYTES, MAX_STORE_BYTES, InputError, how_to_raise, limit,
                           size_limit_message)
from solver.models.expr import evaluate_constant
from solver.models.yamlio import (Locator, check_regular_file, describe_value, format_path, load_yaml,
                                  require_document, require_int)
from sweep.file_schemas import (AXIS_KINDS, DEFAULT_BATCH, EVENT_REDUCTIONS, REDUCTIONS, SAMPLE_METHODS,
                                OutputsSpec, SweepFile, SweepGroups)
from sweep.store import batch_slices, effective_batch
from sweep.yamlschema import validate

__all__ = ["SweepSpec", "Axis", "Metric", "Outputs", "load_sweep", "AXIS_KINDS",
           "SAMPLE_METHODS", "REDUCTIONS", "EVENT_REDUCTIONS", "MAX_POINTS", "MAX_BATCH"]

# The shape of a sweep file is declared in sweep.file_schemas; the checks here are of values.
TOP_KEYS = SweepFile.keys()
GROUPS = SweepGroups.keys()
# A guard against a typo (an extra zero in a linspace) eating the machine's memory.
# Each limit can be changed with the environment variable MECHSWEEP_<NAME>.
MAX_POINTS = 10_000_000
"""Most points of one sweep (``MECHSWEEP_MAX_POINTS``)."""
MAX_BATCH = 100_000
"""Most points per batch (``MECHSWEEP_MAX_BATCH``): a batch is padded to this
many points and integrated in one vmapped call, so it must fit in memory."""
# Relative slack (in steps) for counting the stop of a range as reached.
RANGE_TOL = 1e-9
HASH_FORMAT = 1


@dataclass(frozen=True)
class Axis:
    """One swept name and its own values, before the groups are combined.

    Attributes:
        name: the parameter name.
        group: ``"product"``, ``"zip"`` or ``"sample"``.
        kind: ``values``/``linspace``/``logspace``/``range`` or, for samples,
            the method ``random``/``lhs``/``sobol``.
        values: float64 values of this axis (for zip and sample axes the
            column shared with the rest of the group).
        line: line of the axis in the sweep file, where known.
    """

    name: str
    group: str
    kind: str
    values: np.ndarray = field(repr=False)
    line: int | None = None

    @property
    def length(self) -> int:
        """Number of values of the axis (of its group, for zip and sample)."""
        return len(self.values)


@dataclass(frozen=True)
class Metric:
    """A scalar reduction per point, evaluated by the pipeline.

    Attributes:
        of: a variable or component name (``B``, ``By``, ``q[3]``...) or
            another time series of the run (``x_d1``, ``energy``,
            ``torque_phi``...: :func:`sweep.pipeline.scalar_series`); for an
            event metric with ``reduce: value``, what to read at the event
            (a variable or component, ``time`` or ``rate``).
        reduce: one of :data:`REDUCTIONS`, or with ``event`` one of
            :data:`EVENT_REDUCTIONS`.
        event: the name of one of the model's events or stops (an event
            metric), or None.
        n: with ``reduce: value``, which occurrence (1 = the first).
    """

    of: str | None
    reduce: str
    event: str | None = None
    n: int | None = None


@dataclass(frozen=True)
class Outputs:
    """What each point stores (structure checked here; meaning checked by the pipeline).

    Attributes:
        variables: names to keep, or ``None`` for all.
        samples: number of output times, or ``None``.
        dt: output time spacing, or ``None`` (at most one of samples/dt).
        metrics: metric name -> :class:`Metric`, in file order.
        sensitivities: parameters to differentiate the kept variables and
            the metrics with respect to (``d{var}_d{P}``, ``d{metric}_d{P}``).
    """

    variables: tuple[str, ...] | None = None
    samples: int | None = None
    dt: float | None = None
    metrics: dict[str, Metric] = field(default_factory=dict)
    sensitivities: tuple[str, ...] = ()

    def as_json(self) -> dict:
        """Plain-data form, used for hashing and dataset attrs."""
        out = {"variables": list(self.variables) if self.variables is not None else None,
               "samples": self.samples, "dt": self.dt,
               "metrics": {k: ({"of": m.of, "reduce": m.reduce} if m.event is None else
                               {"event": m.event, "reduce": m.reduce, "of": m.of, "n": m.n})
                           for k, m in self.metrics.items()}}
        if self.sensitivities:  # absent otherwise: older stores keep their hash
            out["sensitivities"] = list(self.sensitivities)
        return out


@dataclass
class SweepSpec:
    """A validated, expanded sweep file.

    Attributes:
        path: the sweep file.
        title: its Title (the file name's stem when absent).
        model_path: the model file, resolved.
        model_text: the model file's text when the sweep was read.
        override: the Override mapping (``{}`` when absent).
        axes: the swept axes in expansion order (product axes, zip axes,
            sample axes).
        constants: name -> value applied to every point.
        points: name -> float64 array of length ``n_points`` (swept names only).
        n_points: number of points.
        requested_batch: the file's ``Batch`` as given (default 64).
        batch: (property) points per batch (= Zarr chunk along ``point``):
            ``Batch``, or the number of points where that is fewer, so a
            small sweep is never padded to a large ``Batch``.
        outputs: the Outputs settings.
        sample: ``{"method", "n", "seed"}`` of the sample group, or ``None``.
        hash: sha256 hex digest identifying the sweep (see :meth:`compute_hash`).
        text: the sweep file's text as read (kept in the store's attributes).
    """

    path: Path
    title: str
    model_path: Path
    model_text: str
    override: dict
    axes: list[Axis]
    constants: dict[str, float]
    points: dict[str, np.ndarray]
    n_points: int
    requested_batch: int
    outputs: Outputs
    sample: dict | None = None
    hash: str = ""
    text: str = field(default="", repr=False)

    @property
    def batch(self) -> int:
        """Points per batch and per Zarr chunk: :func:`sweep.store.effective_batch`
        of ``Batch`` and the number of points (a structure group's own points
        for a group's spec)."""
        return effective_batch(self.requested_batch, self.n_points)

    @property
    def n_batches(self) -> int:
        """Number of batches, ``ceil(n_points / batch)``."""
        return -(-self.n_points // self.batch)

    @property
    def names(self) -> list[str]:
        """Swept names in expansion order."""
        return list(self.points)

    def batches(self) -> list[slice]:
        """Point ranges of the batches, in order; the last may be short.

        Returns:
            :func:`sweep.store.batch_slices` of this sweep: ``[slice(0, batch),
            slice(batch, 2*batch), ...]`` covering every point once.
        """
        return batch_slices(self.n_points, self.batch)

    def compute_hash(self) -> str:
        """sha256 of a canonical JSON of everything that defines the results.

        The JSON holds the model file's text, the Override, the constants, the
        number of points and, per swept name, the sha256 of its float64
        little-endian values (exact and fast for large sweeps), the Outputs
        settings and the ``Batch`` as given (it fixes the store's chunking,
        so a resume with another Batch must not match; hashed as given, not
        as :attr:`batch`, so that hashes stay what earlier versions wrote).  Keys are sorted, so the
        order of mappings in the files does not matter; the order of points
        does.

        Returns:
            64 hex digits.
        """
        payload = {
            "format": HASH_FORMAT,
            "model_text": self.model_text,
            "override": _jsonable(self.override),
            "constants": {k: float(v) for k, v in self.constants.items()},
            "n_points": self.n_points,
            "points": {name: hashlib.sha256(np.ascontiguousarray(col, dtype="<f8").tobytes())
                       .hexdigest() for name, col in self.points.items()},
            "outputs": self.outputs.as_json(),
            "batch": self.requested_batch,
        }
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def describe(self, batches: int | None = None) -> str:
        """The ``--dry-run`` report: title, model, counts, axes, constants, outputs.

        Args:
            batches: the number of batches when the points run in structure
                groups, each batched on its own (:mod:`sweep.structural`);
                default :attr:`n_batches`.

        Returns:
            Several lines of text, no trailing newline.
        """
        lines = [f"Sweep: {self.title}",
                 f"  file:      {self.path}",
                 f"  model:     {self.model_path}"]
        if self.override:
            flat = ", ".join(f"{k}={_short(v)}" for k, v in _flatten(self.override))
            lines.append(f"  override:  {flat}")
        if batches is None:
            last = self.n_points - (self.n_batches - 1) * self.batch if self.n_points else 0
            tail = f" (last has {last})" if self.n_batches and last != self.batch else ""
            if self.requested_batch > self.batch:
                tail += f" (Batch {self.requested_batch} is more than the points)"
            lines.append(f"  points:    {self.n_points} in {self.n_batches} batch"
                         f"{'es' if self.n_batches != 1 else ''} of {self.batch}{tail}")
        else:
            lines.append(f"  points:    {self.n_points} in {batches} batch"
                         f"{'es' if batches != 1 else ''} of at most {self.batch} (each structure "
                         f"group batched on its own, below)")
        if self.axes:
            lines.append("  axes (combined in this order, the last varying fastest):")
            kinds = [f"{a.kind} n={self.sample['n']} seed={self.sample['seed']}"
                     if a.group == "sample" and self.sample else a.kind for a in self.axes]
            width = max(len(a.name) for a in self.axes)
            kwidth = max(len(k) for k in kinds)
            for a, kind in zip(self.axes, kinds):
                lines.append(f"    {a.name:<{width}}  {a.group:<7}  {kind:<{kwidth}}  "
                             f"{a.length:>6} values  {_range_text(a.values)}")
            if self.sample and self.sample["method"] == "sobol" and \
                    self.sample["n"] & (self.sample["n"] - 1):
                lines.append("    note: Sobol' n is not a power of 2, so the sample loses "
                             "its balance properties")
        else:
            lines.append("  axes:      none (a single point)")
        if self.constants:
            lines.append("  constants: "
                         + ", ".join(f"{k}={v:g}" for k, v in self.constants.items()))
        o = self.outputs
        parts = [f"variables {', '.join(o.variables)}" if o.variables is not None
                 else "variables all"]
        if o.samples is not None:
            parts.append(f"samples {o.samples}")
        if o.dt is not None:
            parts.append(f"dt {o.dt:g}")
        if o.metrics:
            parts.append("metrics " + ", ".join(f"{k}={m.reduce}({m.of if m.event is None else m.event})"
                                                 for k, m in o.metrics.items()))
        if o.sensitivities:
            parts.append("sensitivities d/d" + ", d/d".join(o.sensitivities))
        lines.append("  outputs:   " + "; ".join(parts))
        lines.append(f"  hash:      {self.hash}")
        return "\n".join(lines)


# ------------------------------------------------------------------ helpers

def _jsonable(value: Any) -> Any:
    """YAML data as JSON data (keys as strings; floats kept exactly by repr)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def _flatten(data: Mapping, prefix: tuple = ()) -> list[tuple[str, Any]]:
    out = []
    for k, v in data.items():
        if isinstance(v, Mapping) and v:
            out.extend(_flatten(v, prefix + (k,)))
        else:
            out.append((format_path(prefix + (k,)), v))
    return out


def _short(value: Any) -> str:
    text = json.dumps(_jsonable(value)) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def _range_text(values: np.ndarray) -> str:
    if len(values) <= 4:
        return ", ".join(f"{v:g}" for v in values)
    return (f"{values[0]:g}, {values[1]:g}, ..., {values[-1]:g}  "
            f"(min {values.min():g}, max {values.max():g})")


class _Reader:
    """Validation of one sweep file's data against its locator."""

    def __init__(self, loc: Locator):
        self.loc = loc

    def fail(self, message: str, path: tuple) -> InputError:
        return self.loc.error(message, path)

    def constant(self, value: Any, path: tuple) -> float:
        """A number, or a constant expression string evaluated by solver.expr."""
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.fail(f"expected a number or a constant expression such as 'pi/4', "
                            f"got {describe_value(value)}", path)
        if isinstance(value, str):
            text = value
            # No names: sweep values are constants of their own, not model params.
            value = evaluate_constant(text, {}, file=self.loc.file, path=format_path(path),
                                      line=self.loc.nearest(path))
            if not isinstance(value, float):
                raise self.fail(f"expected a single number, but '{text}' is a vector", path)
        value = float(value)
        if not math.isfinite(value):
            raise self.fail(f"expected a finite number, got {value}", path)
        return value

    def axis(self, spec: Any, path: tuple) -> tuple[str, np.ndarray]:
        """One axis definition, its shape checked by the schema -> (kind, float64 values)."""
        if isinstance(spec, list):
            return "values", self.values(spec, path)
        kind, arg = next(iter(spec.items()))
        sub = path + (kind,)
        if kind == "values":
            values = self.values(arg, sub)
        elif kind in ("linspace", "logspace"):
            a, b = self.constant(arg[0], sub + (0,)), self.constant(arg[1], sub + (1,))
            n = require_int(arg[2], sub + (2,), self.loc, minimum=1)
            self.check_count(n, sub + (2,))
            with np.errstate(over="ignore"):  # reported below as not finite
                values = np.linspace(a, b, n) if kind == "linspace" else np.logspace(a, b, n)
        else:
            values = self.range(arg, sub)
        if not np.all(np.isfinite(values)):
            raise self.fail(f"the {kind} gives values too large to represent "
                            f"({_range_text(values)})", sub)
        return kind, values.astype(np.float64)

    def values(self, items: list, path: tuple) -> np.ndarray:
        if not items:
            raise self.fail("empty axis: give at least one value", path)
        return np.array([self.constant(v, path + (i,)) for i, v in enumerate(items)],
                        dtype=np.float64)

    def range(self, arg: list, path: tuple) -> np.ndarray:
        start, stop, step = (self.constant(v, path + (i,)) for i, v in enumerate(arg))
        if step == 0:
            raise self.fail("the step of a range must not be zero", path + (2,))
        steps = (stop - start) / step
        if steps < -RANGE_TOL:
            raise self.fail(f"empty axis: a range from {start:g} to {stop:g} needs a "
                            f"{'negative' if step > 0 else 'positive'} step, got {step:g}",
                            path + (2,))
        count = math.floor(steps + RANGE_TOL * max(1.0, abs(steps))) + 1
        self.check_count(count, path)
        return start + step * np.arange(count, dtype=np.float64)

    def check_count(self, count: int, path: tuple) -> None:
        cap = limit("MAX_POINTS", MAX_POINTS)
        if count > cap:
            raise self.fail(f"{count} values is more than the limit of {cap} points "
                            f"per sweep", path)


def _sample_unit(method: str, n: int, d: int, seed: int) -> np.ndarray:
    """``n x d`` points in the unit cube, reproducible from ``seed``."""
    if method == "random":
        return np.random.default_rng(seed).random((n, d))
    from scipy.stats import qmc
    cls = qmc.LatinHypercube if method == "lhs" else qmc.Sobol
    try:
        engine = cls(d, rng=np.random.default_rng(seed))
    except TypeError:  # scipy < 1.15 calls it seed
        engine = cls(d, seed=np.random.default_rng(seed))
    with warnings.catch_warnings():
        # Sobol' warns when n is not a power of 2; describe() says so instead.
        warnings.simplefilter("ignore", UserWarning)
        return engine.random(n)


# ------------------------------------------------------------------ reader

def load_sweep(path: str | Path) -> SweepSpec:
    """Read, validate and expand a sweep file.

    The file's shape is checked first against its declared schema
    (:class:`sweep.file_schemas.SweepFile`), then its values here.

    Args:
        path: the sweep YAML file.

    Returns:
        The :class:`SweepSpec`, points expanded and hash computed.

    Raises:
        InputError: for any malformed content, naming the file, the key path,
            the line, what was expected and the valid choices; also when the
            model file does not exist or the sweep exceeds :data:`MAX_POINTS`.
    """
    path = Path(path)
    data, loc = load_yaml(path)
    r = _Reader(loc)
    top = validate(SweepFile, data, loc,
                   document="a sweep file: a mapping with keys " + ", ".join(TOP_KEYS))
    title = top.Title if top.Title is not None else path.stem
    model_path = (path.parent / top.Model).resolve()
    try:
        found = model_path.exists()
    except OSError as exc:  # a name too long for the file system, a loop of links
        raise r.fail(f"cannot use the model path: {exc.strerror or exc}; give the path of a "
                     f"model file, relative to the sweep file's folder", ("Model",)) from None
    if not found:
        raise r.fail(f"model file not found: {model_path} (Model is relative to the sweep "
                     f"file's folder {path.parent.resolve()})", ("Model",))
    try:
        check_regular_file(model_path)
        model_text = model_path.read_text(encoding="utf-8")
    except InputError as err:
        raise r.fail(f"{model_path} cannot be a model file: {err.message}", ("Model",)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise r.fail(f"cannot read model file {model_path}: {exc}", ("Model",)) from None
    override = copy.deepcopy(top.Override)
    model_data = _model_data(model_path, model_text, override, r)

    sweep = top.Sweep
    seen: dict[str, str] = {}  # name -> where it was first given

    def claim(name: str, where: tuple) -> str:
        if name in seen:
            raise r.fail(f"'{name}' is already given in {seen[name]}; a name may appear in "
                         f"only one place of Sweep", where)
        seen[name] = format_path(where[:-1])
        return name

    axes: list[Axis] = []
    factors: list[int] = []  # length of each combined factor, in order
    groups: list[list[Axis]] = []

    for group in ("product", "zip"):
        if getattr(sweep, group) is None:
            continue
        gpath = ("Sweep", group)
        gaxes = [Axis(claim(key, gpath + (key,)), group, *r.axis(spec, gpath + (key,)),
                      loc.line(gpath + (key,))) for key, spec in getattr(sweep, group).items()]
        if group == "product":
            groups.extend([a] for a in gaxes)
            factors.extend(a.length for a in gaxes)
        else:
            if len({a.length for a in gaxes}) > 1:
                listing = ", ".join(f"{a.name} has {a.length}" for a in gaxes)
                raise r.fail(f"zip axes must have the same length: {listing}", gpath)
            groups.append(gaxes)
            factors.append(gaxes[0].length)
        axes.extend(gaxes)

    sample_info = None
    if sweep.sample is not None:
        smp, gpath = sweep.sample, ("Sweep", "sample")
        r.check_count(smp.n, gpath + ("n",))
        bpath = gpath + ("bounds",)
        names, lows, highs = [], [], []
        for key, pair in smp.bounds.items():
            name = claim(key, bpath + (key,))
            lo = r.constant(pair[0], bpath + (key, 0))
            hi = r.constant(pair[1], bpath + (key, 1))
            if not lo < hi:
                raise r.fail(f"bounds must have lo < hi, got [{lo:g}, {hi:g}]", bpath + (key,))
            names.append(name), lows.append(lo), highs.append(hi)
        unit = _sample_unit(smp.method, smp.n, len(names), smp.seed)
        cols = np.asarray(lows) + unit * (np.asarray(highs) - np.asarray(lows))
        saxes = [Axis(nm, "sample", smp.method, np.ascontiguousarray(cols[:, j], dtype=np.float64),
                      loc.line(bpath + (nm,))) for j, nm in enumerate(names)]
        axes.extend(saxes)
        groups.append(saxes)
        factors.append(smp.n)
        sample_info = {"method": smp.method, "n": smp.n, "seed": smp.seed}

    gpath = ("Sweep", "constants")
    constants = {claim(key, gpath + (key,)): r.constant(value, gpath + (key,))
                 for key, value in sweep.constants.items()}

    n_points = math.prod(factors)
    if n_points > limit("MAX_POINTS", MAX_POINTS):
        sizes = " x ".join(str(f) for f in factors)
        raise r.fail(f"the sweep has {sizes} = {n_points} points, more than the limit of "
                     f"{limit('MAX_POINTS', MAX_POINTS)}", ("Sweep",))
    # C order: the last factor varies fastest, as itertools.product does.
    index = np.unravel_index(np.arange(n_points), factors) if factors else ()
    points = {a.name: a.values[index[g]] for g, group in enumerate(groups) for a in group}

    outputs = _outputs(top.Outputs)
    _check_sizes(r, n_points, top.Batch, outputs, model_data, override)

    spec = SweepSpec(path=path, title=title, model_path=model_path, model_text=model_text,
                     override=override, axes=axes, constants=constants, points=points,
                     n_points=n_points, requested_batch=top.Batch, outputs=outputs,
                     sample=sample_info, text=loc.text)
    spec.hash = spec.compute_hash()
    return spec


def _outputs(out: OutputsSpec) -> Outputs:
    """The Outputs settings from their checked schema."""
    metrics = {name: Metric(of=m.of, reduce=m.reduce, event=m.event, n=m.n)
               for name, m in out.metrics.items()}
    return Outputs(variables=tuple(out.variables) if out.variables is not None else None,
                   samples=out.samples, dt=out.dt, metrics=metrics,
                   sensitivities=tuple(out.sensitivities or ()))


# ------------------------------------------------------------------ size limits

def _model_data(model_path: Path, text: str, override: Mapping, r: _Reader) -> Mapping:
    """The model file's YAML data with the Override merged, checked to be a mapping.

    Read here (without building the model) so that ``--dry-run`` refuses a
    file that is no model, and sees the output times the model asks for.

    Raises:
        InputError: YAML errors (located in the model file), or data that is
            not a mapping (located at the sweep's ``Model``, never quoting
            the file's content).
    """
    from solver.models.model import deep_merge

    # A one-line text without a newline could be taken for a path by load_yaml.
    data, mloc = load_yaml(text if "\n" in text else text + "\n", file=str(model_path))
    try:
        data = require_document(data, mloc, "a mapping of top-level keys (Title, Kind, ...)")
    except InputError as err:
        raise r.fail(f"{model_path} is not a model file: {err.message}", ("Model",)) from None
    return deep_merge(data, override) if override else data


def _plain_number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def _output_times(outputs: Outputs, model_data: Mapping,
                  override: Mapping) -> tuple[int, tuple, str]:
    """(number of output times, the setting's key path, its words) of a sweep's runs.

    ``Outputs.samples``/``dt`` when given, else the model's ``ProblemData``
    (what it holds as plain numbers; the model's own reader checks the rest).
    """
    from solver.models.model import DEFAULT_SAMPLES, output_times

    pd = model_data.get("ProblemData") if isinstance(model_data, Mapping) else None
    pd = pd if isinstance(pd, Mapping) else {}
    t0 = _plain_number(pd.get("t0", 0.0))
    tend = _plain_number(pd.get("tend"))
    span_ok = t0 is not None and tend is not None and tend > t0
    if outputs.samples is not None:
        return outputs.samples, ("Outputs", "samples"), f"Outputs.samples = {outputs.samples}"
    if outputs.dt is not None and span_ok:
        n = output_times(t0, tend, None, outputs.dt)
        return n, ("Outputs", "dt"), f"Outputs.dt = {outputs.dt:g} gives {n}"
    samples, dt = _plain_number(pd.get("samples")), _plain_number(pd.get("dt"))
    # Blame the Override where it set the value, else the model.
    over = override.get("ProblemData") if isinstance(override.get("ProblemData"), Mapping) else {}
    if dt is not None and dt > 0 and span_ok and pd.get("samples") is None:
        n = output_times(t0, tend, None, dt)
        key, words = (("Override", "ProblemData", "dt"), "Override ProblemData.dt") \
            if "dt" in over else (("Model",), "the model's ProblemData.dt")
        return n, key, f"{words} = {dt:g} gives {n}"
    if samples is not None and samples.is_integer() and samples >= 2:
        key, words = (("Override", "ProblemData", "samples"), "Override ProblemData.samples") \
            if "samples" in over else (("Model",), "the model's ProblemData.samples")
        return int(samples), key, f"{words} = {int(samples)}"
    return DEFAULT_SAMPLES, ("Outputs",), f"the default {DEFAULT_SAMPLES}"


def _check_sizes(r: _Reader, n_points: int, batch: int, outputs: Outputs,
                 model_data: Mapping, override: Mapping) -> None:
    """Refuse batches and outputs that cannot fit, before anything is allocated.

    Without building the model the number of values per output time is not
    known, so the estimates count only the lower bound: each output variable
    listed (or one) plus the constraint residual, 8 bytes each.

    Raises:
        InputError: ``Batch`` above :data:`MAX_BATCH`; one run's or one
            batch's outputs above :data:`solver.errors.MAX_OUTPUT_BYTES`; the
            store above :data:`solver.errors.MAX_STORE_BYTES`.
    """
    cap = limit("MAX_BATCH", MAX_BATCH)
    if batch > cap:
        shown = batch if batch < 10 ** 15 else f"{batch:.3g}"
        raise r.fail(f"Batch = {shown} points per batch is more than the limit of {cap} "
                     f"(MAX_BATCH): every batch is padded to Batch points and integrated at "
                     f"once in memory; lower Batch (64 to 1024 is typical), or "
                     f"{how_to_raise('MAX_BATCH')}", ("Batch",))
    n_times, key, setting = _output_times(outputs, model_data, override)
    per = (len(outputs.variables) if outputs.variables is not None else 1) + 1
    each = f"x at least {per} values (8 bytes a value)"
    checks = (
        (1, "MAX_OUTPUT_BYTES", MAX_OUTPUT_BYTES, key,
         f"{setting} output times {each} for one run", "lower samples (or raise dt)"),
        (min(batch, n_points), "MAX_OUTPUT_BYTES", MAX_OUTPUT_BYTES, ("Batch",),
         f"Batch = {batch}: {min(batch, n_points)} points x {n_times} output times {each} "
         f"for one batch in memory", "lower Batch or the output times"),
        (n_points, "MAX_STORE_BYTES", MAX_STORE_BYTES, ("Sweep",),
         f"the store of {n_points} points x {n_times} output times {each}",
         "lower the number of points or the output times"),
    )
    for points, name, default, path, what, fix in checks:
        message = size_limit_message(name, default, 8.0 * points * n_times * per, what, fix)
        if message:
            raise r.fail(message, path)
