"""The :class:`Model`: a DAE plus the problem data of a YAML model file.

Every kind (``DAE``, ``Lagrangian``, ``Mechanism``) builds one; the CLI and
the sweep pipeline use only this class.  Shared readers for the keys every
kind has (``ProblemData`` times and samples, ``SolverParams``, ``Animation``)
live here too.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.dae.problem import DAEDefinitionError
from solver.errors import (MAX_OUTPUT_BYTES, InputError, format_bytes, how_to_raise, limit,
                           size_limit_message)
from solver.models.expr import NotElementwise, check_name, evaluate_constant, parse
from solver.dae.sparsity import UnsupportedPrimitiveError
from solver.dae.structure import StructurallySingularError
from solver.models.yamlio import (Locator, check_keys, format_path, require_bool, require_int, require_list,
                           require_mapping, require_number, require_str)

__all__ = ["Model", "deep_merge", "read_times", "read_solver_params", "read_animation",
           "relocate", "DEFAULT_SAMPLES", "DEFAULT_TOL", "TIME_KEYS", "read_title",
           "size_names", "read_sizes", "ValueKey", "parse_value_key", "analyse", "build_error",
           "check_key_order", "MAX_UNKNOWNS", "check_output_size", "values_per_time",
           "output_times", "ValueRangeError"]

DEFAULT_SAMPLES = 201
DEFAULT_TOL = 1e-10
TIME_KEYS = ("t0", "tend", "samples", "dt")
INIT_METHODS = ("auto", "newton", "ipopt")
ENGINE_MODES = ("auto", "unrolled", "compact", "looped")
# Input limit (docs/reference/input-limits.md); the output size limit is
# solver.errors.MAX_OUTPUT_BYTES.
MAX_UNKNOWNS = 100_000
"""Most scalar unknowns (the sum of the declared sizes) of a model read from
YAML; the structural analysis and the Taylor engine grow faster than linearly
with it, and a typo in a size must not allocate the machine's memory.
``MECHSWEEP_MAX_UNKNOWNS`` overrides it."""


def deep_merge(base: Any, override: Any) -> Any:
    """Merge ``override`` into ``base`` without changing either.

    The one merge rule of model overrides and of the sweep files' ``Override``.

    Args:
        base: the model's data.
        override: the data merged into it.

    Returns:
        Where both are mappings, a new mapping with ``base``'s keys in order
        (then new keys of ``override``), each merged recursively; otherwise
        ``override`` itself (lists and scalars replace whole; ``None`` sets
        null).  What comes from ``override`` is copied (mappings and lists),
        so the result shares no mutable part with it.
    """
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for key, value in override.items():
            out[key] = deep_merge(base[key], value) if key in base else _copy(value)
        return out
    return _copy(override)


def _copy(value: Any) -> Any:
    """A copy of YAML data's mappings and lists (leaves shared)."""
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def relocate(err: InputError, file: str | None) -> InputError:
    """The same error (same class) with the file filled in where missing."""
    if err.file or not file:
        return err
    new = InputError.__new__(type(err))
    new.__dict__.update(err.__dict__)
    InputError.__init__(new, err.message, file, err.path, err.line)
    return new


# ------------------------------------------------------------------ readers
def read_times(pd: Mapping, loc: Locator) -> dict:
    """``t0``, ``tend`` and ``samples`` or ``dt`` from ``ProblemData``.

    Returns:
        dict with t0, tend, samples (int or None), dt (float or None).

    Raises:
        InputError: missing ``tend``, non-numbers, ``tend <= t0``, both
            ``samples`` and ``dt``, ``samples < 2`` or ``dt <= 0``.
    """
    base = ("ProblemData",)
    t0 = require_number(pd.get("t0", 0.0), base + ("t0",), loc)
    if "tend" not in pd:
        raise loc.error("missing required key 'tend' (the end of the integration interval)",
                        base)
    tend = require_number(pd["tend"], base + ("tend",), loc)
    if not tend > t0:
        raise loc.error(f"tend must be greater than t0 = {t0:g}, got {tend:g}", base + ("tend",))
    # A null value counts as absent, so an Override can switch dt for samples.
    pd = {k: v for k, v in pd.items() if v is not None}
    if "samples" in pd and "dt" in pd:
        raise loc.error("give either 'samples' (number of output times) or 'dt' (output "
                        "spacing), not both", base + ("dt",))
    samples = dt = None
    if "dt" in pd:
        dt = require_number(pd["dt"], base + ("dt",), loc, positive=True)
    else:
        samples = require_int(pd.get("samples", DEFAULT_SAMPLES), base + ("samples",), loc,
                              minimum=2)
    return {"t0": t0, "tend": tend, "samples": samples, "dt": dt}


#: Largest SolverParams.Integration.max_steps (the steps are counted in int32).
MAX_STEPS_LIMIT = 2**31 - 1


def read_solver_params(data: Any, loc: Locator) -> dict:
    """``SolverParams: {Integration: {tol, order, max_steps, h_max, mode, optimize},
    Initialization: {method}}``.

    Returns:
        dict with tol, order (None = from tol), max_steps, h_max, mode
        (the Taylor engine: auto, unrolled, compact or looped), optimize
        (compile with LLVM's optimisation, default true), init.

    Raises:
        InputError: unknown keys, tol outside (0, 1), order outside 2..60.
    """
    sp = require_mapping(data, ("SolverParams",), loc, allow_none=True)
    check_keys(sp, ("Integration", "Initialization"), (), ("SolverParams",), loc)
    integ = require_mapping(sp.get("Integration"), ("SolverParams", "Integration"), loc,
                            allow_none=True)
    base = ("SolverParams", "Integration")
    check_keys(integ, ("tol", "order", "max_steps", "h_max", "mode", "optimize"), (), base, loc)
    tol = require_number(integ.get("tol", DEFAULT_TOL), base + ("tol",), loc, positive=True)
    if not tol < 1:
        raise loc.error(f"tol must be below 1 (e.g. 1e-10), got {tol:g}", base + ("tol",))
    order = None
    if integ.get("order") is not None:
        order = require_int(integ["order"], base + ("order",), loc, minimum=2)
        if order > 60:
            raise loc.error(f"order must be between 2 and 60, got {order}", base + ("order",))
    max_steps = require_int(integ.get("max_steps", 100_000), base + ("max_steps",), loc,
                            minimum=1)
    if max_steps > MAX_STEPS_LIMIT:  # the step counter is a 32-bit integer inside jit
        raise loc.error(f"max_steps must be at most {MAX_STEPS_LIMIT:,}, got {max_steps}; a run that "
                        f"needs more steps needs a looser tol or a shorter span", base + ("max_steps",))
    h_max = None
    if integ.get("h_max") is not None:
        h_max = require_number(integ["h_max"], base + ("h_max",), loc, positive=True)
    mode = require_str(integ.get("mode", "auto"), base + ("mode",), loc, choices=ENGINE_MODES)
    optimize = require_bool(integ.get("optimize", True), base + ("optimize",), loc)
    ini = require_mapping(sp.get("Initialization"), ("SolverParams", "Initialization"), loc,
                          allow_none=True)
    check_keys(ini, ("method",), (), ("SolverParams", "Initialization"), loc)
    init = require_str(ini.get("method", "auto"), ("SolverParams", "Initialization", "method"),
                       loc, choices=INIT_METHODS)
    return {"tol": tol, "order": order, "max_steps": max_steps, "h_max": h_max, "init": init,
            "mode": mode, "optimize": optimize}


def read_animation(data: Any, loc: Locator, known: Callable[[str], bool]) -> dict:
    """``Animation: {Scene: {view: [az, el], limits: [[x0, x1], ...]},
    Points: {name: expr} or [names], Links: [[P, Q], ...], Up: -z, follow: P,
    frames: n, fps: n}``.

    ``Points`` replaces the points a kind draws by default;
    ``Up`` is the world direction drawn upward (default +z in 3-D, +y in 2-D);
    ``follow`` (a point, or a list of points such as a body's, whose mean is
    followed) makes the camera track it, ``Scene.limits`` then being
    relative to it.

    Args:
        data: the value of ``Animation``.
        loc: the file's locator.
        known: whether a name can be a point expression's bare name.

    Returns:
        dict with ``view`` ([az, el] or None), ``limits`` (or None),
        ``points`` (name -> Expr, or None for the kind's default), ``links``
        (list of (P, Q) or None), ``up`` (``-z``... or None), ``frames``,
        ``fps``, and ``raw`` (the data).

    Raises:
        InputError: unknown keys or malformed values.
    """
    an = require_mapping(data, ("Animation",), loc, allow_none=True)
    check_keys(an, ("Scene", "Points", "Links", "Up", "follow", "frames", "fps"), (), ("Animation",), loc)
    scene = require_mapping(an.get("Scene"), ("Animation", "Scene"), loc, allow_none=True)
    check_keys(scene, ("view", "limits"), (), ("Animation", "Scene"), loc)
    view = None
    if scene.get("view") is not None:
        path = ("Animation", "Scene", "view")
        items = require_list(scene["view"], path, loc, length=2, what="[azimuth, elevation]")
        view = [require_number(v, path + (i,), loc) for i, v in enumerate(items)]
    limits = None
    if scene.get("limits") is not None:
        path = ("Animation", "Scene", "limits")
        rows = require_list(scene["limits"], path, loc, nonempty=True,
                            what="[[xmin, xmax], [ymin, ymax], ...]")
        limits = []
        for i, row in enumerate(rows):
            pair = require_list(row, path + (i,), loc, length=2, what="[min, max]")
            limits.append([require_number(v, path + (i, k), loc) for k, v in enumerate(pair)])
    points = None
    if an.get("Points") is not None:
        raw = an["Points"]
        path = ("Animation", "Points")
        if isinstance(raw, list):
            raw = {require_str(v, path + (i,), loc): v for i, v in enumerate(raw)}
        raw = require_mapping(raw, path, loc, what="a mapping {name: expression} or a list of names")
        points = {}
        for name, expr in raw.items():
            where = path + (name,)
            points[str(name)] = parse(expr, file=loc.file, path=format_path(where),
                                      line=loc.line(where))
    links = None
    if an.get("Links") is not None:
        path = ("Animation", "Links")
        links = []
        for i, pair in enumerate(require_list(an["Links"], path, loc)):
            pair = require_list(pair, path + (i,), loc, length=2, what="a pair [P, Q]")
            links.append(tuple(require_str(v, path + (i, k), loc) for k, v in enumerate(pair)))
    up = None
    if an.get("Up") is not None:
        up = require_str(an["Up"], ("Animation", "Up"), loc,
                         choices=tuple(f"{s}{a}" for a in "xyz" for s in ("", "+", "-")))
    follow = None
    if an.get("follow") is not None:
        path = ("Animation", "follow")
        raw = an["follow"]
        items = require_list(raw, path, loc, nonempty=True, what="a point or a list of points") \
            if isinstance(raw, list) else [raw]
        follow = [require_str(v, path + ((i,) if isinstance(raw, list) else ()), loc)
                  for i, v in enumerate(items)]
    frames = require_int(an.get("frames", 100), ("Animation", "frames"), loc, minimum=2)
    fps = require_int(an.get("fps", 20), ("Animation", "fps"), loc, minimum=1)
    return {"view": view, "limits": limits, "points": points, "links": links, "up": up,
            "follow": follow, "frames": frames, "fps": fps, "raw": an}


# ------------------------------------------------------------------ the model
class ValueRangeError(InputError):
    """A parameter value outside what a model's parts allow (a mass <= 0, ...).

    Raised by :meth:`Model.check_values`, located at the part's key in the
    model file.

    Attributes:
        names: the free parameters the failing quantity depends on (directly,
            or through derived parameters), in the model's order.
    """

    def __init__(self, message: str, file: str | None = None, path: str | None = None,
                 line: int | None = None, names=()):
        super().__init__(message, file, path, line)
        self.names = list(names)


class Model:
    """A model read from a YAML file: its DAE and its problem data.

    Built by the kind modules; see :func:`solver.models.load`.

    Attributes:
        dae: the :class:`solver.DAE`; its params are the file's free
            PhysicalParams (traced), derived ones being computed inside the
            residual.
        kind, title, path, text: the file's kind, Title, path and YAML text.
        data: the YAML data the model was built from (overrides merged), as
            written: repeats (``for``, ``sum``, ``{i}``) not expanded, so
            that :meth:`with_overrides` expands them again;
            ``expanded_data`` (set by :func:`solver.models.load`) is what
            the kind read.
        overrides: the overrides merged into the file's data (or None).
        t0, tend, tol, order, samples, dt, max_steps, h_max, init, mode:
            problem and solver settings (``order`` None = from tol; ``mode``
            the Taylor engine).
        fixed: names of fixed initial values in :func:`solver.solve` syntax.
        animation: dict from :func:`read_animation`.
        param_info: :class:`solver.models.scope.ParamInfo`.
        links: point-name pairs to draw (from ``Animation.Links`` or the kind).
        conservative: whether the energy should be conserved (no dissipation,
            forces or explicit time dependence), None when unknown.

    ``values_table(params, varying, size) -> {name: (size, ...) array}``
    (optional) is ``values`` at many points at once, for
    :meth:`initial_values_table`: ``params`` as
    :meth:`solver.models.scope.ParamInfo.numeric_table` gives them; it
    raises :class:`solver.models.expr.NotElementwise` (or ``InputError``)
    where it cannot, and the points are then evaluated one by one.

    ``point_arrays(ds) -> {name: (time, dim)}`` (optional) gives the drawn
    points of a generated model directly from its result, faster than one
    expression per point (a 90×90 cloth has 8,100); ``Animation.Points``
    still replaces it.
    """

    def __init__(self, *, dae, kind: str, title: str, path: str | None, text: str, data: Any,
                 locator: Locator, times: dict, solver_params: dict, param_info,
                 values: Callable[[dict], dict], fixed: list, animation: dict,
                 point_scope: Callable | None = None, default_points: list | None = None,
                 links: list | None = None, conservative: bool | None = None,
                 builder: Callable | None = None, overrides: Any = None,
                 point_arrays: Callable | None = None, values_table: Callable | None = None):
        self.dae, self.kind, self.title, self.path, self.text = dae, kind, title, path, text
        self.data, self.locator, self.overrides = data, locator, overrides
        self.t0, self.tend = times["t0"], times["tend"]
        self.samples, self.dt = times["samples"], times["dt"]
        self.tol, self.order = solver_params["tol"], solver_params["order"]
        self.max_steps, self.h_max = solver_params["max_steps"], solver_params["h_max"]
        self.init = solver_params["init"]
        self.mode = solver_params.get("mode", "auto")
        self.optimize = solver_params.get("optimize", True)
        self.param_info = param_info
        self._values = values
        self._values_table = values_table
        self.fixed = list(fixed)
        self.animation = animation
        self._point_scope = point_scope
        self.default_points = list(default_points or [])
        self.links = list(animation.get("links") or links or [])
        self.conservative = conservative
        self._builder = builder
        self._point_arrays = point_arrays
        self._check_links()
        check_output_size(self)

    def drawn_points(self) -> dict:
        """Name -> expression of every drawn point: ``Animation.Points``, else the kind's defaults."""
        return dict(self.animation.get("points") or {n: parse(n) for n in self.default_points})

    def _check_links(self) -> None:
        """Every ``Animation.Links`` end is a drawn point (a link is never dropped silently).

        Raises:
            InputError: a link end that is no point, located at the link,
                naming the drawn points and how to add one.
        """
        given = self.animation.get("links")
        if not given or self._point_scope is None or self._point_arrays is not None:
            return
        names = set(self.drawn_points())
        for i, pair in enumerate(given):
            for k, end in enumerate(pair):
                if end not in names:
                    where = ("Animation", "Links", i, k)
                    raise self.locator.error(
                        f"link end {end!r} is not a drawn point; the points are "
                        f"{', '.join(sorted(names)) or 'none'}; add it to Animation.Points "
                        f"(e.g. {end}: [0, 0] for a fixed point at the origin)", where)

    # ------------------------------------------------------------ parameters
    @property
    def params(self) -> dict:
        """Defaults of the traced parameters (name -> float or array)."""
        return {k: (float(v) if np.ndim(v) == 0 else np.asarray(v))
                for k, v in self.param_info.free.items()}

    def all_params(self, params: Mapping | None = None) -> dict:
        """Every parameter (free, derived, structural) with ``params`` applied."""
        return self.param_info.numeric(params)

    def check_params(self, params: Mapping | None = None) -> dict:
        """Free parameter values for a run, checked.

        Raises:
            InputError: unknown, derived or structural names; bad shapes.
        """
        return self.param_info.check(params)

    #: The kind's value rules (set by a kind that has them, e.g. Mechanism):
    #: ``rules(values)`` with every parameter's value (:meth:`all_params`)
    #: raises :class:`ValueRangeError`.
    value_rules: Callable | None = None

    def value_rule_params(self) -> list:
        """The free parameters the kind's value rules depend on (none without rules).

        A sweep checks only the distinct values of these (:meth:`check_values`).
        """
        return list(getattr(self.value_rules, "params", self.param_info.free)) \
            if self.value_rules is not None else []

    def check_values(self, params: Mapping | None = None) -> None:
        """Check the rules the kind's reader checks at the defaults (positive
        masses and lengths, stiffness >= 0, ...) at other parameter values.

        The reader checks each quantity of the file at the default
        parameters; a value given per run (``simulate --set``) or per sweep
        point is checked here, without building the model again.  A kind
        without such rules (DAE, Lagrangian) checks nothing.

        Args:
            params: free parameter values (defaults for missing ones).

        Raises:
            InputError: bad names or shapes (:meth:`check_params`).
            ValueRangeError: a quantity out of range at these values, located
                at its key in the model file, with its value, the rule and
                the parameter values it depends on.
        """
        values = self.all_params(params)
        if self.value_rules is not None:
            self.value_rules(values)

    # ------------------------------------------------------------ problem
    def t_eval(self) -> np.ndarray:
        """The output times: ``samples`` equally spaced, or every ``dt``."""
        if self.dt is not None:
            n = int(math.floor((self.tend - self.t0) / self.dt * (1 + 1e-12))) + 1
            return self.t0 + self.dt * np.arange(n)
        return np.linspace(self.t0, self.tend, int(self.samples))

    def initial_values(self, params: Mapping | None = None) -> dict:
        """Initial values and guesses with the given parameter values.

        Args:
            params: free parameter values (defaults for missing ones).

        Returns:
            dict in :func:`solver.solve` syntax (``x``, ``x'``, ``q[2]``,
            ``q[2]'``) -> float or array.
        """
        return self._values(self.all_params(params))

    def initial_values_table(self, params: Mapping, varying, size: int) -> dict | None:
        """:meth:`initial_values` of many points at once, where the model's kind can.

        A batch of designs (``solver.solve_batch``) needs every point's
        initial values; evaluated here in one pass over the columns of the
        parameters that vary, they are bit for bit those of
        :meth:`initial_values` at each point
        (:func:`solver.models.expr.evaluate_table`).

        Args:
            params: free parameter name -> value: a ``(size,)`` column for
                each name in ``varying``, one value for the others (defaults
                for missing ones).
            varying: the names that vary by point.
            size: the number of points.

        Returns:
            dict name -> float64 array ``(size,) + shape`` whose row ``i`` is
            the value :meth:`initial_values` gives point ``i``; or None where
            the kind has no such form, an initial value does more than
            elementwise arithmetic with a varying parameter, or some point's
            values fail (evaluate them one by one: that path words the
            errors).
        """
        if self._values_table is None:
            return None
        try:
            values, moving = self.param_info.numeric_table(params, varying, size)
            return self._values_table(values, moving, size)
        except (NotElementwise, InputError):
            return None

    def solve(self, params: Mapping | None = None, **kw):
        """Solve the model's problem.

        Args:
            params: free parameter values (defaults for missing ones).
            **kw: overrides of :func:`solver.solve` arguments (``t_span``,
                ``t_eval``, ``tol``, ``order``, ``values``, ``fixed``...).

        Returns:
            xarray.Dataset; attrs also hold ``title``, ``model_yaml``,
            ``model_kind``, ``model_path`` (and ``model_overrides``).

        Raises:
            InputError: bad parameters, initial values that do not assemble
                (:class:`solver.integrate.initialize.InitialValueError`), all located
                in the model file.
        """
        from solver.api import solve as _solve

        try:
            pvals = self.check_params(params)
            extra = {"model_yaml": self.text, "model_kind": self.kind,
                     "model_path": str(self.path or "")}
            if self.conservative is not None:
                extra["conservative"] = int(self.conservative)  # netCDF has no booleans
            if self.overrides:
                extra["model_overrides"] = json.dumps(self.overrides, sort_keys=True, default=str)
            extra.update(kw.pop("extra_attrs", None) or {})
            # values as a function of the parameters: sensitivities differentiate
            # the fixed initial values that are expressions of them.
            args = dict(t_span=(self.t0, self.tend), values=self.initial_values,
                        fixed=self.fixed, tol=self.tol, order=self.order, t_eval=self.t_eval(),
                        params=pvals, max_steps=self.max_steps, h_max=self.h_max,
                        init=self.init, title=self.title, mode=self.mode, optimize=self.optimize)
            args.update(kw)
            if "t_span" in kw and "t_eval" not in kw:
                args["t_eval"] = np.linspace(float(kw["t_span"][0]), float(kw["t_span"][1]),
                                             int(self.samples or DEFAULT_SAMPLES))
            return _solve(self.dae, extra_attrs=extra, **args)
        except InputError as err:
            raise relocate(err, self.path) from None

    def with_overrides(self, mapping: Mapping) -> "Model":
        """A new model from this one's data with ``mapping`` deep-merged in.

        Raises:
            InputError: the merged data is invalid.
        """
        if self._builder is None:
            raise InputError("this model cannot be rebuilt with overrides", file=self.path)
        merged = deep_merge(self.data, mapping)
        over = deep_merge(self.overrides, mapping) if self.overrides else mapping
        return self._builder(merged, self.locator, self.path, overrides=over)

    # ------------------------------------------------------------ pictures
    def point_names(self) -> list:
        """Names of the points drawn by ``plot``/``animate``."""
        pts = self.animation.get("points")
        return list(pts) if pts else list(self.default_points)

    def point_series(self, ds) -> dict:
        """World positions of the drawn points at every time of a result.

        Args:
            ds: a Dataset from :meth:`solve` (variables by name).

        Returns:
            dict point name -> array (n_time, 2 or 3); points whose value is
            not a 2- or 3-vector are left out.
        """
        if self._point_arrays is not None and not self.animation.get("points"):
            return self._point_arrays(ds)
        if self._point_scope is None:
            return {}
        exprs = self.drawn_points()
        if not exprs:
            return {}
        params = {k: jnp.asarray(v) for k, v in self.all_params(_ds_params(ds, self)).items()}
        names = [v.name for v in self.dae.variables]
        state = {n: jnp.asarray(np.asarray(ds[n].values, dtype=float)) for n in names if n in ds}
        times = jnp.asarray(np.asarray(ds["time"].values, dtype=float))

        def at(t, values):
            scope = self._point_scope(t, values, params)
            return {k: jnp.asarray(e.evaluate(scope), dtype=jnp.float64) for k, e in exprs.items()}

        # Eager vmap: compiling one program for many points (a cloth's thousands)
        # takes far longer than running their few operations op by op.
        out = jax.vmap(at)(times, state)
        return {k: np.asarray(v) for k, v in out.items() if v.ndim == 2 and v.shape[1] in (2, 3)}

    def __repr__(self):
        return f"Model({self.kind}: {self.title!r}, {self.dae!r})"


def _ds_params(ds, model) -> dict:
    """The free parameter values a Dataset was computed with (from attrs)."""
    raw = ds.attrs.get("parameters")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    if not isinstance(raw, Mapping):
        return {}
    return {k: v for k, v in raw.items() if k in model.param_info.free}


# ------------------------------------------------------------------ file-format helpers
# NAME, NAME[i], NAME', NAME[i]', NAME'[i] (the last is normalised to NAME[i]')
_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[\s*(\d+)\s*\])?\s*('*)\s*"
                  r"(?:\[\s*(\d+)\s*\])?\s*$")


def read_title(data: Mapping, loc: Locator, path: str | None) -> str:
    """``Title`` (a string), or the file name without extension."""
    if "Title" in data:
        return str(require_str(data["Title"], ("Title",), loc)).strip()
    return Path(path).stem if path else "model"


def size_names(raw: Mapping) -> set:
    """Parameter names used in size expressions of a ``{name: size}`` mapping."""
    names: set = set()
    for value in raw.values():
        if isinstance(value, str):
            try:
                names |= parse(value).names()
            except InputError:
                pass  # reported with its location by read_sizes
    return names


def read_sizes(raw: Any, loc: Locator, key: str, what: str, params: Mapping,
               taken: Mapping[str, str]) -> dict:
    """``[a, b]`` or ``{a: 3, b: 1, c: 3*N}`` -> name -> size (None = scalar).

    A size of 1 means a scalar; a size may be an expression of parameters
    (which are then structural: fixed at load time).

    Raises:
        InputError: not a list/mapping, empty, bad or clashing names, sizes
            that are not whole numbers >= 1, or more than :data:`MAX_UNKNOWNS`
            scalars in all.
    """
    if isinstance(raw, list):
        items = [(require_str(v, (key, i), loc), None, (key, i)) for i, v in enumerate(raw)]
    elif isinstance(raw, Mapping):
        items = [(k, v, (key, k)) for k, v in raw.items()]
    else:
        raise loc.error(f"expected a list of {what} names or a mapping {{name: size}}, got "
                        f"{_describe(raw)}", (key,))
    if not items:
        raise loc.error(f"expected at least one {what}", (key,))
    out: dict = {}
    total = 0
    for name, size, path in items:
        where = dict(file=loc.file, path=format_path(path), line=loc.nearest(path))
        check_name(name, what, **where)
        if name in taken:
            raise InputError(f"'{name}' is already {taken[name]}; use another name", **where)
        if name in out:
            raise InputError(f"{what} '{name}' is declared twice", **where)
        if size is None:
            out[name] = None
            total += 1
            continue
        value = evaluate_constant(size, params, **where)
        if np.ndim(value) != 0 or not float(value).is_integer() or value < 1:
            raise InputError(f"the size of {what} '{name}' must be a whole number >= 1 "
                             f"(1 = scalar), got {size!r}" +
                             (f" = {value}" if isinstance(size, str) else ""), **where)
        out[name] = None if int(value) == 1 else int(value)
        total += int(value)
        problem = unknowns_problem(total, what)
        if problem:
            raise InputError(problem, **where)
    return out


def unknowns_problem(total: int, what: str) -> str | None:
    """Why ``total`` declared scalars are too many, or ``None`` within :data:`MAX_UNKNOWNS`."""
    cap = limit("MAX_UNKNOWNS", MAX_UNKNOWNS)
    if total <= cap:
        return None
    return (f"the {what} sizes add up to {total} scalar unknowns; one state vector alone would "
            f"need {format_bytes(8.0 * total)} and the solver's tables grow faster than that; "
            f"the limit is {cap} (MAX_UNKNOWNS); lower the size, or "
            f"{how_to_raise('MAX_UNKNOWNS')}")


def values_per_time(dae) -> int:
    """About how many float64 numbers one output time of a run stores.

    Each variable's components and their derivatives below the leading order
    (``NAME``, ``NAME_d1``...), the constraint residual, the energy and the
    balance outputs (:mod:`solver.results.balance`).
    """
    d = np.asarray(dae.structure.d, dtype=int)
    from solver.results.balance import balance_layout

    per = sum(v.size * max(1, int(d[v.offset:v.offset + v.size].max(initial=0)))
              for v in dae.variables)
    layout, coords = balance_layout(dae)
    per += sum(len(coords.get(dims[-1], [0])) for dims, _ in layout.values())
    return per + 2


def output_times(t0: float, tend: float, samples: int | None, dt: float | None) -> int:
    """The number of output times of ``samples`` or ``dt`` (as :meth:`Model.t_eval`)."""
    if dt is not None:
        return int(math.floor((tend - t0) / dt * (1 + 1e-12))) + 1
    return int(samples if samples is not None else DEFAULT_SAMPLES)


def check_output_size(model: "Model") -> None:
    """Refuse a run whose outputs would not fit in memory (before any allocation).

    The estimate is output times x :func:`values_per_time` x 8 bytes, against
    :data:`solver.errors.MAX_OUTPUT_BYTES`.

    Raises:
        InputError: over the limit, located at ``ProblemData.samples`` (or
            ``dt``), with the estimate, the limit and how to raise it.
    """
    n = output_times(model.t0, model.tend, model.samples, model.dt)
    per = values_per_time(model.dae)
    key = "dt" if model.dt is not None else "samples"
    every = f" (every {model.dt:g} from {model.t0:g} to {model.tend:g})" if key == "dt" else ""
    message = size_limit_message(
        "MAX_OUTPUT_BYTES", MAX_OUTPUT_BYTES, 8.0 * n * per,
        f"{n} output times{every} x {per} values each (8 bytes a value)",
        "lower samples" if key == "samples" else "raise dt")
    if message:
        raise model.locator.error(message, ("ProblemData", key))


def _describe(value):
    from solver.models.yamlio import describe_value

    return describe_value(value)


class ValueKey:
    """An initial-value key: variable, component (or None), derivative order."""

    def __init__(self, name: str, index: int | None, order: int):
        self.name, self.index, self.order = name, index, order

    def text(self) -> str:
        """The key in :func:`solver.solve` syntax: ``q[2]'``."""
        return self.name + (f"[{self.index}]" if self.index is not None else "") + "'" * self.order


def parse_value_key(key: Any, sizes: Mapping[str, int | None], loc: Locator, path: tuple,
                    what: str = "variable") -> ValueKey:
    """Read a key such as ``x``, ``x'``, ``q[2]``, ``q[2]'`` or ``q'[2]``.

    Raises:
        InputError: unreadable key, unknown variable, index out of range.
    """
    m = _KEY.match(str(key))
    if not m or (m.group(2) and m.group(4)):
        raise loc.error(f"cannot read '{key}' as a {what} value name; write NAME, NAME' "
                        f"(derivative) or NAME[i] / NAME[i]' (vector component, from 0)", path)
    name, idx = m.group(1), m.group(2) or m.group(4)
    if name not in sizes:
        from solver.models.yamlio import did_you_mean

        guess = did_you_mean(name, sizes)
        raise loc.error(f"unknown {what} '{name}'; the {what}s are {', '.join(sizes)}"
                        + (f"; did you mean '{guess}'?" if guess else ""), path)
    index = None
    if idx is not None:
        size = sizes[name] or 1
        index = int(idx)
        if sizes[name] is None or index >= size:
            raise loc.error(f"'{key}': {name} has {size} component(s); valid subscripts are "
                            f"0 to {size - 1}" if sizes[name] else
                            f"'{key}': {name} is a scalar and takes no subscript", path)
    return ValueKey(name, index, len(m.group(3)))


def build_error(err: Exception, loc: Locator, path: tuple, note: str = "") -> InputError:
    """A DAE-construction or structural-analysis error as a located InputError."""
    if isinstance(err, InputError):
        return err if err.file else err.located(file=loc.file, path=format_path(path),
                                                line=loc.nearest(path))
    if isinstance(err, StructurallySingularError):
        message = f"the equations are structurally singular: {err}"
    elif isinstance(err, UnsupportedPrimitiveError):
        message = f"the equations use an operation the solver cannot differentiate: {err}"
    else:
        message = f"the equations do not define a valid DAE: {err}"
    return loc.error(message + note, path)


def analyse(dae, loc: Locator, path: tuple, note: str = ""):
    """``dae.structure``, with solver errors turned into located InputErrors.

    Args:
        dae: the DAE.
        loc: the file's locator.
        path: the key path to blame.
        note: appended to the message (e.g. how equation labels map to keys).
    """
    try:
        return dae.structure
    except (StructurallySingularError, UnsupportedPrimitiveError, DAEDefinitionError) as err:
        raise build_error(err, loc, path, note) from None


def order_limits(dae, structure) -> dict:
    """(variable, component) -> d (the state holds derivatives below d)."""
    out = {}
    for v in dae.variables:
        for e in range(v.size):
            out[(v.name, e)] = int(structure.d[v.offset + e])
    return out


def check_key_order(key: ValueKey, dae, structure, loc: Locator, path: tuple,
                    fixed: bool) -> None:
    """Refuse a value above the leading derivative, or a fixed non-state entry.

    Raises:
        InputError: the message says which orders are state.
    """
    v = dae.var_index[key.name]
    comps = [key.index] if key.index is not None else range(v.size)
    d = max(int(structure.d[v.offset + e]) for e in comps)
    label = key.text()
    if fixed and key.order >= d:
        raise loc.error(f"cannot fix '{label}': the state holds derivatives of {key.name} "
                        f"below order {d} ({_orders(key.name, d)}); the equations determine "
                        f"the rest", path)
    if key.order > d:
        raise loc.error(f"'{label}' is of derivative order {key.order}, above {key.name}'s "
                        f"leading order {d}; give {_orders(key.name, d + 1)}", path)


def _orders(name, d):
    return ", ".join(name + "'" * k for k in range(d)) if d else "none"
