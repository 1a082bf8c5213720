"""Integration results as an ``xarray.Dataset`` (DESIGN.md "Dataset schema")."""

from __future__ import annotations

import importlib.metadata
import math

import numpy as np
import xarray as xr

import jax
import jax.numpy as jnp

from . import status as st

__all__ = ["component_dim", "build_dataset", "package_versions", "state_at_outputs"]


def package_versions() -> dict:
    """Versions of the packages a result depends on (for dataset attrs)."""
    out = {}
    for pkg in ("mechsweep", "jax", "jaxlib", "numpy", "scipy", "xarray", "zarr", "dask", "cyipopt-wheels"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def component_dim(dae, name: str):
    """Dimension name and labels for the components of a vector variable.

    A DAE may declare ``dae.component_dims = {name: (dim, labels)}`` (the
    mechanism kind uses ``axis`` with x/y/z); otherwise ``{name}_index``.
    """
    dims = getattr(dae, "component_dims", {}) or {}
    if name in dims:
        return dims[name]
    v = dae.var_index[name]
    return f"{name}_index", list(range(v.size))


def state_at_outputs(integ, values) -> np.ndarray:
    """Flat normalised states at every output time, from dense output.

    Args:
        integ: the integrator.
        values: dict name -> (n_out, L, *shape) derivatives.

    Returns:
        array (n_out, n_state).
    """
    cols = []
    for v in integ.dae.variables:
        arr = np.asarray(values[v.name]).reshape(values[v.name].shape[0], values[v.name].shape[1], v.size)
        for r, c in zip(integ.state_rows[v.name], integ.state_cols[v.name]):
            cols.append(arr[:, r, c] / math.factorial(int(r)))
    if not cols:
        return np.zeros((next(iter(values.values())).shape[0], 0))
    return np.stack(cols, axis=1)


def constraint_residual_series(integ, values, t_eval, params) -> np.ndarray:
    """max |hidden constraint| at each output time (NaN where not reached)."""
    if integ.n_hidden == 0:
        return np.zeros(len(t_eval))
    Z = state_at_outputs(integ, values)
    fn = getattr(integ, "_residual_series_jit", None)
    if fn is None:
        fn = jax.jit(jax.vmap(lambda z, t, p: jnp.max(jnp.abs(integ.hidden_constraints(z, t, p))), in_axes=(0, 0, None)))
        integ._residual_series_jit = fn
    return np.asarray(fn(jnp.asarray(Z), jnp.asarray(t_eval), params))


def build_dataset(dae, integ, result, t_eval, params, settings: dict, title: str | None = None,
                  extra_attrs: dict | None = None) -> xr.Dataset:
    """Assemble a single run's Dataset.

    Args:
        dae: the DAE.
        integ: its integrator.
        result: the dict returned by ``Integrator.run`` (numpy or jax arrays).
        t_eval: output times.
        params: parameter dict used.
        settings: solver settings (tol, order, …) for the attrs.
        title: dataset title (default: the DAE's name).
        extra_attrs: more attrs (e.g. the model YAML text).

    Returns:
        xarray.Dataset with dims ``time`` and component dims; variables by
        name, derivatives ``NAME_d{k}`` (k < d_j), ``constraint_residual``,
        ``energy`` where the DAE defines one, ``status``, ``steps``.
    """
    structure = dae.structure
    values = {k: np.asarray(v) for k, v in result["values"].items()}
    data = {}
    coords = {"time": ("time", np.asarray(t_eval, dtype=float), {"units": getattr(dae, "time_units", "s")})}
    for v in dae.variables:
        arr = values[v.name]
        dmax = int(structure.d[v.offset : v.offset + v.size].max())
        dims = ("time",)
        if v.shape != ():
            dim, labels = component_dim(dae, v.name)
            dims = ("time", dim)
            coords.setdefault(dim, (dim, labels))
        unit = dae.units.get(v.name)
        attrs = {"long_name": v.name, "derivative_order": 0, "d": dmax}
        if unit:
            attrs["units"] = unit
        data[v.name] = (dims, arr[:, 0], attrs)
        for k in range(1, dmax):
            a = {"long_name": f"{v.name}" + "'" * k, "derivative_order": k}
            if unit:
                a["units"] = f"{unit}/s^{k}" if k > 1 else f"{unit}/s"
            data[f"{v.name}_d{k}"] = (dims, arr[:, k], a)
    data["constraint_residual"] = (("time",), constraint_residual_series(integ, values, t_eval, params),
                                   {"long_name": "max |hidden constraint| of the state"})
    energy = getattr(dae, "energy_series", None)
    if energy is not None:
        data["energy"] = (("time",), np.asarray(energy(values, np.asarray(t_eval), params)), {"long_name": "energy"})
    code = int(np.asarray(result["status"]))
    data["status"] = ((), np.int8(code), st.cf_attrs())
    data["steps"] = ((), int(np.asarray(result["steps"])), {"long_name": "accepted and rejected steps"})
    attrs = {
        "title": title or dae.name,
        "solver": "mechsweep Taylor-series DAE solver (DAETS method)",
        "status_meaning": st.meaning(code),
        "structure_c": [int(x) for x in structure.c],
        "structure_d": [int(x) for x in structure.d],
        "structural_index": int(structure.index),
        "dof": int(structure.dof),
        "variables": [v.name for v in dae.variables],
        "parameters": {k: np.asarray(vv).tolist() for k, vv in params.items()},
        "versions": package_versions(),
    }
    attrs.update({f"solver_{k}": v for k, v in settings.items()})
    attrs.update(extra_attrs or {})
    ds = xr.Dataset({k: xr.Variable(*v) for k, v in data.items()}, coords={k: xr.Variable(*v) for k, v in coords.items()}, attrs=_json_safe(attrs))
    return ds


def _json_safe(attrs: dict) -> dict:
    """Attrs that netCDF/Zarr can store: nested dicts become JSON strings."""
    import json

    out = {}
    for k, v in attrs.items():
        if isinstance(v, dict):
            out[k] = json.dumps(v, sort_keys=True)
        else:
            out[k] = v
    return out
