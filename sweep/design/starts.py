"""Where a design's starts come from: the best points of a sweep store, or values given by name."""

from __future__ import annotations

import json
import math
from typing import Mapping

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.design.problem import DesignContext, model_for

__all__ = ["rank_store"]


# ------------------------------------------------------------------ starts from a store
def rank_store(context: DesignContext, store, k: int) -> tuple[list, list[str]]:
    """The ``k`` best points of a sweep store as starts.

    Each successful stored point's path (the design's path variables, as
    stored) is interpolated to the design's output times and compared with
    the target by the design's objective.  Only points inside the design's
    bounds count, and, where the store sweeps a parameter that is not a
    design parameter, only points at the design model's value of it.

    Args:
        context: from :func:`build_problem`.
        store: a sweep store path.
        k: how many starts.

    Returns:
        ``(starts, notes)``: starts as ``(x0, origin, objective)``, best first
        (parameters the store does not sweep start at the file's start
        values); notes: lines for the user (fewer points than asked, store
        constants that differ from the model's).

    Raises:
        InputError: no sweep store; a structural store; the store lacks a
            path variable or sweeps no design parameter; its times do not
            cover the output times; no stored point qualifies.
    """
    import xarray as xr
    from scipy.interpolate import interp1d

    from sweep.store import open_store

    where = f"--from {store}"
    try:
        ds = open_store(store)
    except FileNotFoundError:
        raise InputError(f"{where}: no sweep store there; give a store written by mechsweep "
                         f"sweep") from None
    if not isinstance(ds, xr.Dataset):
        raise InputError(f"{where}: a structural sweep store (one group per structure); a design "
                         f"starts from a plain sweep store")
    if "status" not in ds or "point" not in ds.dims:
        raise InputError(f"{where}: not a sweep store (no status per point)")
    model = model_for(context)
    for var, _ in context.columns:
        if var not in ds.data_vars:
            kept = [v for v in ds.data_vars if v in model.dae.var_index]
            raise InputError(f"{where}: the store has no variable '{var}' for the path (it keeps "
                             f"{', '.join(kept) or 'none of the model variables'}); run the sweep with "
                             f"Outputs.variables including {var}")
    swept = [c for c in ds.coords if ds[c].dims == ("point",) and c != "point"]
    design_swept = [n for n in context.names if n in swept]
    if not design_swept:
        raise InputError(f"{where}: the store sweeps {', '.join(swept) or 'nothing'}, none of the "
                         f"design parameters {', '.join(context.names)}; sweep at least one of them")
    ts = np.asarray(ds["time"].values, dtype=float)
    slack = 1e-9 * max(1.0, abs(ts[-1]))
    if ts[0] > context.times[0] + slack or ts[-1] < context.times[-1] - slack:
        raise InputError(f"{where}: the store's times cover t = {ts[0]:g} .. {ts[-1]:g}, but the "
                         f"design's output times run over t = {context.times[0]:g} .. "
                         f"{context.times[-1]:g}")
    ok = np.asarray(ds["status"].values) == st.SUCCESS
    notes = []
    inside = ok.copy()
    for j, name in enumerate(context.names):
        if name in swept:
            v = np.asarray(ds[name].values, dtype=float)
            inside &= (v >= context.lower[j]) & (v <= context.upper[j])
    for name in swept:
        if name not in context.names and name in model.params:
            v = np.asarray(ds[name].values, dtype=float)
            keep = np.isclose(v, float(model.params[name]), rtol=1e-9, atol=1e-12)
            inside &= keep
            notes.append(f"the store also sweeps {name}: only its points at the model's "
                         f"{name} = {float(model.params[name]):g} count ({int(keep.sum())} points)")
    try:
        stored = json.loads(ds.attrs.get("parameters", "{}"))
    except (TypeError, ValueError):
        stored = {}
    differ = [f"{name} = {value:g} (the design's model: {float(model.params[name]):g})"
              for name, value in stored.items()
              if name in model.params and np.ndim(value) == 0 and name not in context.names
              and not np.isclose(float(value), float(model.params[name]), rtol=1e-9, atol=1e-12)]
    if differ:
        notes.append(f"the store was run with {', '.join(differ)}: its paths rank the starts "
                     f"only approximately")
    index = np.flatnonzero(inside)
    if index.size == 0:
        raise InputError(f"{where}: no successful stored point lies within the design's bounds "
                         f"({', '.join(f'{n} in [{lo:g}, {hi:g}]' for n, lo, hi in zip(context.names, context.lower, context.upper))}; "
                         f"{int(ok.sum())} of {ok.size} points succeeded)")
    err = np.zeros(index.size)
    for j, (var, idx) in enumerate(context.columns):
        a = np.asarray(ds[var].isel(point=index).values, dtype=float)
        a = a.reshape(a.shape[0], a.shape[1], -1)[:, :, 0 if idx is None else idx]
        at = interp1d(ts, a, axis=1, assume_sorted=True)(context.times)
        err += np.mean((at - context.target[None, :, j]) ** 2, axis=1)
    finite = np.isfinite(err)
    index, err = index[finite], err[finite]
    order = np.argsort(err, kind="stable")[:k]
    if order.size < k:
        notes.append(f"asked for {k} starts, but only {order.size} stored points qualify")
    starts = []
    for o in order:
        p = int(index[o])
        x0 = context.start.copy()
        for j, name in enumerate(context.names):
            if name in swept:
                x0[j] = float(ds[name].values[p])
        starts.append((x0, f"store point {p}", float(err[o])))
    return starts, notes


def explicit_starts(context: DesignContext, starts) -> list:
    """Starts given as mappings name -> value (missing names: the file's start)."""
    out = []
    for i, item in enumerate(starts):
        if not isinstance(item, Mapping):
            raise InputError(f"starts[{i}]: expected a mapping parameter -> value, got "
                             f"{type(item).__name__}")
        x0 = context.start.copy()
        for name, value in item.items():
            if name not in context.names:
                raise InputError(f"starts[{i}]: '{name}' is not a design parameter; the design "
                                 f"parameters are {', '.join(context.names)}")
            j = context.names.index(name)
            v = float(value)
            if not context.lower[j] <= v <= context.upper[j]:
                raise InputError(f"starts[{i}]: {name} = {v:g} is outside the bounds "
                                 f"[{context.lower[j]:g}, {context.upper[j]:g}]")
            x0[j] = v
        out.append((x0, f"given start {i}", math.nan))
    return out
