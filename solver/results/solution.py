"""Integration results as an ``xarray.Dataset`` (docs/reference/outputs.md).

The only place that names outputs: a variable by its name, its k-th
derivative (k < d_j) as ``NAME_d{k}``, ``constraint_residual``, ``energy``
and the balance outputs of :mod:`solver.results.balance` (``energy_change``,
``dissipated``, ``momentum``, ``angular_momentum``), ``torque_{driver}``
for each driver of a Lagrangian DAE (:class:`solver.mechanics.lagrangian.Driver`),
``status`` and ``steps``, with units and CF flags.  One run
(:func:`build_dataset`) and a batch of designs (:func:`build_batch_dataset`,
with a ``point`` dimension; :func:`batch_arrays` the same before xarray, as
a sweep's batch reads it) come from the same code, so a sweep store and a
single run hold the same variables and attributes.  :func:`output_layout`
gives the names and dims before any run (the sweep store's template).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import sys
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from solver import status as st
from solver.import_hooks import after_import
from solver.results.xarray_setup import defer_dask_check
from solver.results.balance import balance_layout

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["component_dim", "driver_outputs", "output_layout", "event_layout", "build_dataset", "build_batch_dataset",
           "batch_arrays", "BatchArrays", "package_versions", "import_dataset_modules"]


# xarray (with pandas, 0.3 s) is imported where a Dataset is built, so a run's
# integration does not wait for it and a sweep's batches (BatchArrays) never
# import it; whoever imports it first gets the dask check deferred.
after_import("xarray", lambda _module: defer_dask_check())

# Packages whose versions a result (one run or a sweep store) records.
_VERSIONED = ("mechsweep", "jax", "jaxlib", "numpy", "scipy", "xarray", "zarr", "dask", "distributed",
              "cyipopt-wheels")


def package_versions() -> dict:
    """Versions of the packages a result depends on (for dataset attrs).

    Read once per process: each lookup parses a package's metadata file,
    and ten of them were two thirds of a pendulum ``solve()`` (8 of 13 ms).

    Returns:
        dict package name -> version string, for the installed ones (a
        fresh copy; the caller may change it).
    """
    return dict(_package_versions())


@functools.lru_cache(maxsize=1)
def _package_versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for pkg in _VERSIONED:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def component_dim(dae, name: str):
    """Dimension name and labels for the components of a vector variable.

    A DAE may declare ``dae.component_dims = {name: (dim, labels)}`` (the
    mechanism kind uses ``axis`` with x/y/z); otherwise ``{name}_index``.

    Args:
        dae: the DAE.
        name: a vector variable's name.

    Returns:
        (dimension name, list of labels).
    """
    dims = getattr(dae, "component_dims", {}) or {}
    if name in dims:
        return dims[name]
    v = dae.var_index[name]
    return f"{name}_index", list(range(v.size))


def _variable_orders(dae) -> dict:
    """Variable name -> max d_j over its components (0 for algebraic ones)."""
    d = dae.structure.d
    return {v.name: int(d[v.offset: v.offset + v.size].max()) for v in dae.variables}


def _variable_series(dae, variables=None):
    """(output name, variable, derivative k, dims, attrs) of every variable series."""
    orders = _variable_orders(dae)
    names = [v.name for v in dae.variables] if variables is None else list(variables)
    for name in names:
        v = dae.var_index[name]
        dims = ("time",) if v.shape == () else ("time", component_dim(dae, name)[0])
        unit = dae.units.get(name)
        attrs = {"long_name": name, "derivative_order": 0, "d": orders[name]}
        if unit:
            attrs["units"] = unit
        yield name, name, 0, dims, attrs
        for k in range(1, orders[name]):
            a = {"long_name": name + "'" * k, "derivative_order": k}
            if unit:
                per = getattr(dae, "time_units", "s")
                a["units"] = f"{unit}/{per}^{k}" if k > 1 else f"{unit}/{per}"
            yield f"{name}_d{k}", name, k, dims, a


def driver_outputs(dae) -> list:
    """The ``torque_{driver}`` outputs of a DAE with drivers (inverse dynamics).

    A driver's output is the generalised force its drive applies along the
    driven quantity, ``−λ_k`` of its multiplier row (the sign that makes a
    pendulum driven at θ(t) need m L² θ'' + m g L sin θ; see
    :mod:`solver.mechanics.lagrangian`).

    Args:
        dae: the DAE (none but a :class:`~solver.mechanics.lagrangian.LagrangianDAE`
            with ``drivers`` has any).

    Returns:
        list of ``(output name, driver, attrs)`` in the drivers' order.
    """
    out = []
    for d in getattr(dae, "drivers", ()) or ():
        attrs = {"long_name": f"generalised force of the drive {d.name} along {d.quantity} "
                              f"(torque or force the drive applies; -{dae.multiplier}[{d.index}])",
                 "driver": d.name}
        if d.units:
            attrs["units"] = d.units
        out.append((f"torque_{d.name}", d, attrs))
    return out


def output_layout(dae, variables: Sequence[str] | None = None):
    """Names, dims and attributes of the per-time outputs, before any run.

    Args:
        dae: the DAE.
        variables: variable names to include (default: all).

    Returns:
        (layout, coords): ``layout`` maps output name -> (dims after the
        ``point`` dim, attrs), in dataset order: each variable, its
        derivatives ``NAME_d{k}`` (k < d_j), ``constraint_residual`` and, for
        a DAE with an energy, ``energy`` and the balance outputs of
        :func:`solver.results.balance.balance_layout` (``energy_change``,
        ``dissipated``, ``momentum``, ``angular_momentum`` where defined),
        then ``torque_{driver}`` per driver (:func:`driver_outputs`);
        ``coords`` maps the component dims of the included variables (and
        ``axis`` of the momenta) to their labels.

    Raises:
        KeyError: an unknown variable name.
    """
    layout, coords = {}, {}
    for name, var, _, dims, attrs in _variable_series(dae, variables):
        layout[name] = (dims, attrs)
        if len(dims) > 1:
            coords[dims[1]] = list(component_dim(dae, var)[1])
    layout["constraint_residual"] = (("time",), {"long_name": "max |hidden constraint| of the state"})
    if callable(getattr(dae, "energy_fn", None)):
        layout["energy"] = (("time",), {"long_name": "energy"})
    more, more_coords = balance_layout(dae)
    layout.update(more)
    coords.update(more_coords)
    for name, _, attrs in driver_outputs(dae):
        layout[name] = (("time",), attrs)
    return layout, coords


def _structure_attrs(dae) -> dict:
    s = dae.structure
    return {"structure_c": [int(x) for x in s.c], "structure_d": [int(x) for x in s.d],
            "structural_index": int(s.index), "dof": int(s.dof)}


@dataclasses.dataclass
class BatchArrays:
    """A batch's outputs as numpy arrays by name: the Dataset of :func:`build_batch_dataset` before xarray.

    What a caller that only reads arrays (a sweep's batch, which stores
    them) takes instead of the Dataset: building xarray's variables, indexes
    and data arrays cost more than the rest of a batch outside its
    integration.  ``arrays[name]`` is the array of a variable or a
    coordinate; ``arrays[name] = (dims, values, attrs)`` adds or replaces a
    variable, as on a Dataset.

    Attributes:
        data: variable name -> ``(dims, values, attrs)``.
        coords: coordinate name -> ``(dims, values[, attrs])``.
        attrs: the Dataset's attributes.
    """

    data: dict
    coords: dict
    attrs: dict

    def __getitem__(self, name: str) -> np.ndarray:
        entry = self.data.get(name) or self.coords.get(name)
        if entry is None:
            raise KeyError(f"no output {name!r}; the batch has {', '.join(self.data)}")
        return entry[1]

    def __setitem__(self, name: str, entry: tuple) -> None:
        self.data[name] = entry

    def __contains__(self, name: str) -> bool:
        return name in self.data or name in self.coords

    def to_dataset(self) -> xr.Dataset:
        """The same outputs as an ``xarray.Dataset`` (what :func:`build_batch_dataset` returns)."""
        import xarray as xr

        return xr.Dataset({k: xr.Variable(*v) for k, v in self.data.items()},
                          coords={k: xr.Variable(*v) for k, v in self.coords.items()}, attrs=self.attrs)


def batch_arrays(dae, result: Mapping, t_eval, *, residual, energy=None, balance: Mapping | None = None,
                 swept: Mapping | None = None, constants: Mapping | None = None, settings: Mapping | None = None,
                 messages: Sequence[str] | None = None, title: str | None = None, extra_attrs: Mapping | None = None,
                 mask_failed: bool = True, outputs=None, point_data: Mapping | None = None) -> BatchArrays:
    """The outputs of a batch of runs as :class:`BatchArrays`: :func:`build_batch_dataset` without xarray.

    Args and the outputs: as for :func:`build_batch_dataset`.

    Returns:
        :class:`BatchArrays`; its :meth:`~BatchArrays.to_dataset` is
        :func:`build_batch_dataset`'s Dataset.
    """
    data, coords, attrs = _dataset_parts(dae, result, t_eval, residual=residual, energy=energy, balance=balance,
                                         swept=swept, constants=constants, settings=settings, messages=messages,
                                         title=title, extra_attrs=extra_attrs, mask_failed=mask_failed,
                                         outputs=outputs)
    data.update({name: (("point",), values, attrs) for name, (values, attrs) in (point_data or {}).items()})
    return BatchArrays(data, coords, attrs)


def build_batch_dataset(dae, result: Mapping, t_eval, *, residual, energy=None,
                        balance: Mapping | None = None, swept: Mapping | None = None, constants: Mapping | None = None,
                        settings: Mapping | None = None, messages: Sequence[str] | None = None,
                        title: str | None = None, extra_attrs: Mapping | None = None,
                        mask_failed: bool = True, outputs=None, point_data: Mapping | None = None) -> xr.Dataset:
    """Assemble the Dataset of a batch of runs (dims ``point``, ``time``, components).

    Args:
        dae: the DAE.
        result: ``values`` (name -> (B, n_out, L, *shape) derivatives),
            ``status`` (B,) and ``steps`` (B,), as from
            :meth:`solver.integrate.integrator.Integrator.run_batch`.
        t_eval: (n_out,) output times.
        residual: (B, n_out) constraint residual series.
        energy: (B, n_out) energy series, or None.
        balance: name -> (B, n_out, …) balance series
            (:func:`solver.results.balance.balance_series`), or None.
        swept: parameter name -> (B, …) values that vary by point (become
            coordinates on ``point``).
        constants: parameter name -> value shared by every point (attrs).
        settings: solver settings (tol, order, …) stored as ``solver_*`` attrs.
        messages: per-point failure messages ('' for none); kept in the
            ``failures`` attr as JSON point -> message.
        title: dataset title (default: the DAE's name).
        extra_attrs: more attrs (model YAML text, …).
        mask_failed: set the series of failed points to NaN (a sweep's rule);
            False keeps what was computed before the failure.
        outputs: the names of :func:`output_layout` and :func:`event_layout`
            to hold (a set); None: all.  ``status`` and ``steps`` are always
            there; a series left out is neither copied nor masked (its
            ``residual``, ``energy`` or ``balance`` may then be None).
        point_data: more variables of dim ``point``, name -> ``(values,
            attrs)`` (the failure time and reason): part of the Dataset as
            built (each added afterwards cost an xarray merge, milliseconds).

    Returns:
        xarray.Dataset: variables as :func:`output_layout` names them with a
        leading ``point`` dim, ``status(point)`` int8 with CF flags,
        ``steps(point)``; failed points' series are NaN.
    """
    return batch_arrays(dae, result, t_eval, residual=residual, energy=energy, balance=balance, swept=swept,
                        constants=constants, settings=settings, messages=messages, title=title,
                        extra_attrs=extra_attrs, mask_failed=mask_failed, outputs=outputs,
                        point_data=point_data).to_dataset()


def import_dataset_modules() -> None:
    """Import xarray (with pandas: 0.3 s, once a process) ahead of :func:`build_dataset`.

    For a caller with time to spare before its Dataset: a solve whose run's
    program is compiling from scratch on a background thread
    (:mod:`solver.ahead`) waits for it anyway.
    """
    import xarray  # noqa: F401


def build_dataset(dae, result: Mapping, t_eval, *, residual, energy=None, balance=None, params: Mapping | None = None,
                  settings: Mapping | None = None, title: str | None = None,
                  extra_attrs: Mapping | None = None, outputs=None) -> xr.Dataset:
    """Assemble a single run's Dataset: :func:`build_batch_dataset` of one point, without ``point``.

    Args:
        dae: the DAE.
        result: ``values`` (name -> (n_out, L, *shape)), ``status``, ``steps``
            as from :meth:`solver.integrate.integrator.Integrator.run`.
        t_eval: output times.
        residual: (n_out,) constraint residual series, or None (not an output).
        energy: (n_out,) energy series or None.
        balance: name -> (n_out, …) balance series, or None.
        params: the parameter values used (``parameters`` attr).
        settings, title, extra_attrs, outputs: as for :func:`build_batch_dataset`.

    Returns:
        xarray.Dataset with dims ``time`` and component dims; ``status`` is a
        scalar with CF flags, ``attrs["status_meaning"]`` its name.  A failed
        run keeps the series computed before the failure (NaN after it).
    """
    one = {"values": {k: np.asarray(v)[None] for k, v in result["values"].items()},
           "status": np.asarray(result["status"]).reshape(1), "steps": np.asarray(result["steps"]).reshape(1)}
    if "events" in result:
        ev = result["events"]
        one["events"] = {k: ({n: np.asarray(a)[None] for n, a in v.items()} if isinstance(v, Mapping)
                             else np.asarray(v)[None]) for k, v in ev.items()}
    data, coords, attrs = _dataset_parts(
        dae, one, t_eval, residual=None if residual is None else np.asarray(residual)[None],
        energy=None if energy is None else np.asarray(energy)[None],
        balance={k: np.asarray(v)[None] for k, v in (balance or {}).items()}, swept=None, constants=params,
        settings=settings, messages=None, title=title, extra_attrs=extra_attrs, mask_failed=False, outputs=outputs)
    # The one point's rows, built without the point dim (no Dataset.isel: a third of solve()'s Python time).
    del coords["point"]
    data = {k: (dims[1:], arr[0]) + tuple(rest) for k, (dims, arr, *rest) in data.items()}
    attrs["status_meaning"] = st.meaning(int(data["status"][1]))
    import xarray as xr

    return xr.Dataset({k: xr.Variable(*v) for k, v in data.items()},
                      coords={k: xr.Variable(*v) for k, v in coords.items()}, attrs=attrs)


def _dataset_parts(dae, result: Mapping, t_eval, *, residual, energy, balance, swept, constants, settings, messages,
                   title, extra_attrs, mask_failed, outputs=None) -> tuple[dict, dict, dict]:
    """(data, coords, attrs) of :func:`build_batch_dataset`, each entry ``(dims, array[, attrs])``."""
    values = {k: np.asarray(v, dtype=float) for k, v in result["values"].items()}
    status = np.asarray(result["status"]).astype(np.int8)
    B = status.shape[0]
    layout, comp_coords = output_layout(dae)
    t_eval = np.asarray(t_eval, dtype=float)
    coords = {"time": ("time", t_eval, {"units": getattr(dae, "time_units", "s")})}
    for dim, labels in comp_coords.items():
        coords[dim] = (dim, labels)
    series = {name: values[var][:, :, k] for name, var, k, _, _ in _variable_series(dae)}
    if residual is not None:
        series["constraint_residual"] = np.asarray(residual, dtype=float)
    if energy is not None:
        series["energy"] = np.asarray(energy, dtype=float)
    series.update({k: np.asarray(v, dtype=float) for k, v in (balance or {}).items()})
    for name, d, _ in driver_outputs(dae):
        # values[multiplier] is (B, n_out, L, n_c): the multipliers at every output time.
        series[name] = -values[dae.multiplier][:, :, 0, d.index]
    failed = st.is_failure(status)
    data = {}
    for name, (dims, attrs) in layout.items():
        if name not in series or outputs is not None and name not in outputs:
            continue
        arr = series[name].reshape((B, len(t_eval)) + series[name].shape[2:]).copy()
        if mask_failed:
            arr[failed] = np.nan
        data[name] = (("point",) + dims, arr, attrs)
    if "events" in result and getattr(dae, "events", ()):
        data.update({k: v for k, v in _event_data(dae, result["events"]).items()
                     if outputs is None or k in outputs})
        coords["event"] = ("event", np.arange(dae.max_events))
    data["status"] = (("point",), status, st.cf_attrs())
    data["steps"] = (("point",), np.asarray(result["steps"]).astype(np.int64),
                     {"long_name": "accepted and rejected steps"})
    coords["point"] = ("point", np.arange(B))
    for name, vals in (swept or {}).items():
        a = np.asarray(vals, dtype=float)
        unit = dae.units.get(name)
        cattrs = {"long_name": f"parameter {name}"}
        if unit:
            cattrs["units"] = unit
        if a.ndim == 1:
            coords[name] = ("point", a, cattrs)
        else:
            extra = tuple(f"{name}_index{i}" if i else f"{name}_index" for i in range(a.ndim - 1))
            coords[name] = (("point",) + extra, a, cattrs)
    attrs = {
        "title": title or dae.name,
        "solver": "mechsweep Taylor-series DAE solver (DAETS method)",
        **_structure_attrs(dae),
        "variables": [v.name for v in dae.variables],
        "parameters": {k: np.asarray(v).tolist() for k, v in (constants or {}).items()},
        "versions": package_versions(),
    }
    if messages is not None and any(messages):
        attrs["failures"] = {str(i): m for i, m in enumerate(messages) if m}
    attrs.update({f"solver_{k}": v for k, v in (settings or {}).items()})
    attrs.update(extra_attrs or {})
    return data, coords, _json_safe(attrs)


def event_layout(dae) -> dict:
    """name -> (dims without ``point``, attrs) of the event outputs of a DAE with events.

    ``event_which`` (the event's index, -1 for an unused record; CF flags
    name them), ``event_time``, ``event_rate`` (dg/dt there: for a stop the
    normal velocity of approach), ``event_impulse`` (a stop's contact
    impulse), ``event_count`` (every occurrence, also
    those past the capacity) and ``{series}_at_event`` for every variable
    series (values and derivatives at the event, before an impact's reset).
    """
    names = [e.name for e in dae.events]
    unit = getattr(dae, "time_units", "s")
    layout = {
        "event_which": (("event",), {"long_name": "which event", "missing_value": -1,
                                     "flag_values": np.arange(len(names), dtype=np.int16),
                                     "flag_meanings": " ".join(names)}),
        "event_time": (("event",), {"long_name": "event time", "units": unit}),
        "event_rate": (("event",), {"long_name": "rate of the event function at the event (dg/dt)"}),
        "event_impulse": (("event",), {"long_name": "contact impulse of a stop's impact (NaN for other events)"}),
        "event_count": ((), {"long_name": "event occurrences (also those past max_events)"}),
    }
    for name, _, _, dims, attrs in _variable_series(dae):
        layout[f"{name}_at_event"] = (("event",) + dims[1:], {**attrs, "long_name": f"{attrs['long_name']} at the event"})
    return layout


def _event_data(dae, events: Mapping) -> dict:
    """Dataset entries (dims with ``point``) of the event records of a batch."""
    layout = event_layout(dae)
    which = np.asarray(events["which"]).astype(np.int16)
    values = {k: np.asarray(v, dtype=float) for k, v in events["values"].items()}
    arrays = {"event_which": which, "event_time": np.asarray(events["time"], dtype=float),
              "event_rate": np.asarray(events["rate"], dtype=float),
              "event_impulse": np.asarray(events["impulse"], dtype=float),
              "event_count": np.asarray(events["count"]).astype(np.int64)}
    for name, var, k, _, _ in _variable_series(dae):
        arrays[f"{name}_at_event"] = values[var][:, :, k]
    return {name: (("point",) + dims, arrays[name], dict(attrs)) for name, (dims, attrs) in layout.items()}


def _json_safe(attrs: dict) -> dict:
    """Attrs that netCDF/Zarr can store: nested dicts become JSON strings."""
    out = {}
    for k, v in attrs.items():
        out[k] = json.dumps(v, sort_keys=True) if isinstance(v, dict) else v
    return out
