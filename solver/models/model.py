"""The :class:`Model`: a DAE plus the problem data of a YAML model file.

Every kind (``DAE``, ``Lagrangian``, ``Mechanism``) builds one; the CLI and
the sweep pipeline use only this class.  The readers of the keys every kind
has (``ProblemData`` times and samples, ``SolverParams``, ``Animation``) live
in :mod:`solver.models.model_readers`, the file-format helpers (sizes, value
keys, located analysis errors) in :mod:`solver.models.model_checks`; their
names are importable from here too.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.errors import InputError
from solver.models.expr import NotElementwise, parse
from solver.models.model_checks import (MAX_UNKNOWNS, ValueKey, analyse, build_error, check_key_order,
                                        check_output_size, output_times, parse_value_key, read_sizes,
                                        read_title, size_names, values_per_time)
from solver.models.model_readers import (DEFAULT_SAMPLES, DEFAULT_TOL, TIME_KEYS, deep_merge, read_animation,
                                         read_solver_params, read_times, relocate)
from solver.models.yamlio import Locator

__all__ = ["Model", "deep_merge", "read_times", "read_solver_params", "read_animation",
           "relocate", "DEFAULT_SAMPLES", "DEFAULT_TOL", "TIME_KEYS", "read_title",
           "size_names", "read_sizes", "ValueKey", "parse_value_key", "analyse", "build_error",
           "check_key_order", "MAX_UNKNOWNS", "check_output_size", "values_per_time",
           "output_times", "ValueRangeError"]


# Kept importable from this module, their old home.
from solver.models.model_checks import order_limits, unknowns_problem  # noqa: F401
from solver.models.model_readers import ENGINE_MODES, INIT_METHODS, MAX_STEPS_LIMIT  # noqa: F401


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
        #: SolverParams.Integration.optimize: True or False as the file says, None where it does not (optimised).
        self.optimize = solver_params.get("optimize")
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
                        init=self.init, title=self.title, mode=self.mode,
                        optimize=True if self.optimize is None else self.optimize)
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
