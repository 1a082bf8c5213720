"""What a sweep's metrics read and how they reduce: reducers, metric series, event metrics, solver outputs.

A metric reduces one time series per point (a variable, the norm of a
vector, a component, or another scalar series of the run) or the event
records of one event; with ``Outputs.sensitivities`` each metric also has
its derivatives.  :mod:`sweep.pipeline` checks the metrics against the model
and calls these on each batch's Dataset.
"""

from __future__ import annotations

import re

import numpy as np

from solver.errors import InputError
from solver.integrate.sensitivity import sensitivity_name

__all__ = ["REDUCERS", "event_metric", "scalar_series", "solver_outputs"]

REDUCERS = {
    "min": lambda a: np.nanmin(a, axis=1),
    "max": lambda a: np.nanmax(a, axis=1),
    "range": lambda a: np.nanmax(a, axis=1) - np.nanmin(a, axis=1),
    "mean": lambda a: np.nanmean(a, axis=1),
    "final": lambda a: a[:, -1],
    "absmax": lambda a: np.nanmax(np.abs(a), axis=1),
}

_COMPONENT = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*?)(?:\[(\d+)\]|([xyz]))?$")


def component_index(dae, name: str):
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


def solver_outputs(dae, context) -> list[str]:
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
                names.add(f"{component_index(dae, of)[0]}_at_event")
            continue
        target = component_index(dae, of)
        var = of if target is None else target[0]
        names.add(var)
        if target is not None:
            names |= {sensitivity_name(var, p) for p in sens}
    return sorted(names)


def check_event_metric(spec, dae, mname, m, event_names) -> None:
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
        if component_index(dae, m.of) is None:
            raise InputError(f"metric {mname!r}: unknown value {m.of!r} at the event; use time, rate (dg/dt) "
                             f"or a variable ({', '.join(names)}) or one of its components",
                             file=str(spec.path), path=where + ".of")


def event_metric(dae, ds, of, reduce: str, event: str, n, param: str | None = None) -> np.ndarray:
    """(B,) values of an event metric of a batch's outputs, or their derivatives.

    Args:
        dae: the model's DAE (its events name the records).
        ds: the batch's outputs by name (``event_which``, ``event_time``,
            ...): its Dataset or its :class:`~solver.results.solution.BatchArrays`.
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
    which = np.asarray(ds["event_which"])
    times = np.asarray(ds["event_time"], dtype=float)
    rates = np.asarray(ds["event_rate"], dtype=float)
    if param is not None:
        dtimes = np.asarray(ds[sensitivity_name("event_time", param)], dtype=float)
        drates = np.asarray(ds[sensitivity_name("event_rate", param)], dtype=float)
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
                var, idx = component_index(dae, of)
                vals = np.asarray(ds[f"{var}_at_event"][i, j], dtype=float)
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


def metric_series(dae, ds, of: str, param: str | None = None) -> np.ndarray:
    """(B, T) series a metric reduces: a variable (norm of a vector), a component, or another series.

    With ``param``, the series' derivative with respect to that parameter
    (from ``d{var}_d{param}``; a norm's derivative is ``v·dv/|v|``); only
    variables and their components have one.  ``ds``: the batch's outputs by
    name, its Dataset or its :class:`~solver.results.solution.BatchArrays`.
    """
    target = component_index(dae, of)
    if target is None:
        return np.asarray(ds[of], dtype=float)
    var, idx = target
    series = np.asarray(ds[var], dtype=float)
    B, T = series.shape[:2]
    tangent = None if param is None else np.asarray(ds[sensitivity_name(var, param)], dtype=float)
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
