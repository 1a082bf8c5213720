"""From a sweep spec and its model to the store schema and the batch function.

What varies (the points), what is kept (:class:`SweepContext`: model file,
override, outputs, time grid) and where it runs (:mod:`sweep.run`) stay
apart.  :func:`batch_fn` is module level so every worker compiles once per
model: the model, its integrator and the jit+vmap functions are cached in the
worker process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
import warnings
from typing import Any, Mapping

import numpy as np

from solver import status as codes
from solver.errors import InputError

__all__ = ["SweepContext", "build_context", "batch_fn", "simulate_points", "REDUCERS"]

REDUCERS = {
    "min": lambda a: np.nanmin(a, axis=1),
    "max": lambda a: np.nanmax(a, axis=1),
    "range": lambda a: np.nanmax(a, axis=1) - np.nanmin(a, axis=1),
    "mean": lambda a: np.nanmean(a, axis=1),
    "final": lambda a: a[:, -1],
    "absmax": lambda a: np.nanmax(np.abs(a), axis=1),
}

_COMPONENT = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*?)(?:\[(\d+)\]|([xyz]))?$")


@dataclasses.dataclass
class SweepContext:
    """What stays fixed across the points of a sweep (sent with every task).

    Attributes:
        model_path: the model file.
        override: nested mapping merged into the model's YAML data.
        variables: output variable names (values and state derivatives).
        metrics: metric name -> (of, reduce).
        time: output times.
        schema: :class:`sweep.store.Schema` of the per-point outputs.
        attrs: dataset attributes (model text, solver settings, structure).
        key: cache key of the model on a worker.
    """

    model_path: str
    override: Any
    variables: list
    metrics: dict
    time: np.ndarray
    schema: Any
    attrs: dict
    key: str
    batch: int = 0


# ----------------------------------------------------------------- model cache
_MODELS: dict = {}


def _model(path, override, key):
    """The model with its integrator and compiled batch functions (cached)."""
    if key not in _MODELS:
        from solver.models import load

        model = load(path, overrides=override or None)
        _MODELS[key] = {"model": model}
    return _MODELS[key]


def _integrator(entry):
    if "integ" not in entry:
        import jax

        from solver.api import integrator_for
        from solver.integrate import order_for_tol

        model = entry["model"]
        p = model.order or order_for_tol(model.tol)
        integ = integrator_for(model.dae, p)
        entry["integ"] = integ
        entry["run"] = jax.jit(jax.vmap(integ._run, in_axes=(0, 0, 0, None, None, None, None, None, None, None)))
    return entry["integ"]


# ----------------------------------------------------------------- context
def _component_index(dae, name: str):
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


def build_context(spec) -> SweepContext:
    """Check the sweep against its model and fix everything that is kept.

    Args:
        spec: :class:`sweep.spec.SweepSpec`.

    Returns:
        SweepContext.

    Raises:
        InputError: swept names that are not parameters of the model, unknown
            output variables or metric targets (with the valid choices).
    """
    from solver.solution import component_dim, package_versions
    from sweep.store import Schema

    from solver.models import load

    model = load(spec.model_path, overrides=spec.override or None)
    dae = model.dae
    valid = sorted(model.params)
    for name in list(spec.points) + list(spec.constants):
        if name not in model.params:
            raise InputError(
                f"{name!r} is not a parameter of the model {spec.model_path}; sweepable parameters: {', '.join(valid)}",
                file=str(spec.path), path="Sweep")
    structure = dae.structure
    names = [v.name for v in dae.variables]
    wanted = list(spec.outputs.variables) if spec.outputs.variables is not None else names
    for w in wanted:
        if w not in names:
            raise InputError(f"unknown output variable {w!r}; the model's variables are {', '.join(names)}",
                             file=str(spec.path), path="Outputs.variables")
    metrics = {}
    for mname, m in spec.outputs.metrics.items():
        target = _component_index(dae, m.of)
        if target is None and m.of != "constraint_residual":
            raise InputError(f"metric {mname!r}: unknown output {m.of!r}; use a variable ({', '.join(names)}), "
                             f"a component such as {names[0]}[0] or Bx, or constraint_residual",
                             file=str(spec.path), path=f"Outputs.metrics.{mname}.of")
        metrics[mname] = (m.of, m.reduce)
    if spec.outputs.samples is not None:
        t = np.linspace(model.t0, model.tend, int(spec.outputs.samples))
    elif spec.outputs.dt is not None:
        n = int(math.floor((model.tend - model.t0) / spec.outputs.dt * (1 + 1e-12))) + 1
        t = model.t0 + spec.outputs.dt * np.arange(n)
    else:
        t = model.t_eval()
    variables, coords, attrs = {}, {}, {}
    for w in wanted:
        var = dae.var_index[w]
        dims = ("time",)
        if var.shape != ():
            dim, labels = component_dim(dae, w)
            coords[dim] = np.asarray(labels)
            dims = ("time", dim)
        dmax = int(structure.d[var.offset: var.offset + var.size].max())
        variables[w] = dims
        for k in range(1, dmax):
            variables[f"{w}_d{k}"] = dims
    variables["constraint_residual"] = ("time",)
    if hasattr(dae, "energy_fn"):
        variables["energy"] = ("time",)
    for mname in metrics:
        variables[mname] = ()
    schema = Schema(time=np.asarray(t, dtype=float), variables=variables, coords=coords, attrs=attrs)
    ds_attrs = {
        "title": spec.title,
        "model_yaml": model.text,
        "model_path": str(spec.model_path),
        "model_kind": model.kind,
        "solver_tol": model.tol,
        "solver_order": model.order or 0,
        "structure_c": [int(x) for x in structure.c],
        "structure_d": [int(x) for x in structure.d],
        "structural_index": int(structure.index),
        "dof": int(structure.dof),
    }
    key = hashlib.sha256(json.dumps([str(spec.model_path), model.text, spec.override], sort_keys=True,
                                    default=str).encode()).hexdigest()
    return SweepContext(model_path=str(spec.model_path), override=spec.override, variables=wanted,
                        metrics=metrics, time=schema.time, schema=schema, attrs=ds_attrs, key=key,
                        batch=int(spec.batch))


# ----------------------------------------------------------------- the batch
def simulate_points(model, points: Mapping[str, np.ndarray], t_eval, entry=None):
    """Initialise and integrate a batch of design points with one jit+vmap call.

    Args:
        model: a :class:`solver.models.model.Model`.
        points: parameter name -> (B,) values (others at their defaults).
        t_eval: output times.
        entry: cache dict (compiled functions); a fresh one if None.

    Returns:
        (status (B,) int8, steps (B,), values dict name -> (B, T, L, *shape),
        params dict name -> (B, ...), integrator).
    """
    import jax
    import jax.numpy as jnp

    from solver.initialize import batched_consistent_points, parse_values

    entry = entry if entry is not None else {"model": model}
    integ = _integrator(entry)
    B = len(next(iter(points.values()))) if points else 1
    defaults = model.params
    params = {k: np.broadcast_to(np.asarray(v, float), (B,) + np.shape(v)).copy() for k, v in defaults.items()}
    for k, v in points.items():
        params[k] = np.asarray(v, dtype=float).reshape((B,) + np.shape(defaults[k]))
    z_hat, u_guess = [], []
    free = None
    for i in range(B):
        pi = {k: params[k][i] for k in params}
        spec = parse_values(integ, model.initial_values(pi), model.fixed)
        z_hat.append(spec.z_hat)
        u_guess.append(spec.u_guess)
        free = spec.free
    z_hat, u_guess = np.stack(z_hat), np.stack(u_guess)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    z0, ok = batched_consistent_points(integ, jparams, model.t0, z_hat, free)
    z0 = np.where(np.asarray(ok)[:, None], np.asarray(z0), z_hat)
    res = entry["run"](jparams, jnp.asarray(z0), jnp.asarray(u_guess), model.t0, model.tend,
                       jnp.asarray(t_eval), model.tol, model.max_steps or 100_000,
                       model.h_max if model.h_max else jnp.inf, 0.0)
    res = jax.tree_util.tree_map(np.asarray, res)
    status = res["status"].astype(np.int8)
    status = np.where(np.asarray(ok), status, np.int8(codes.NO_ASSEMBLY)).astype(np.int8)
    return status, res["steps"], res["values"], params, integ


def batch_fn(points: Mapping[str, np.ndarray], context: SweepContext):
    """The sweep's batch function: simulate one batch of design points.

    Args:
        points: swept parameter name -> (B,) values.
        context: :class:`SweepContext`.

    Returns:
        :class:`sweep.store.BatchResult`; failed points carry NaN and their
        status (no assembly, max steps, …), never an exception for one point.
    """
    from sweep.store import BatchResult

    from solver.solution import state_at_outputs

    entry = _model(context.model_path, context.override, context.key)
    model = entry["model"]
    B = len(next(iter(points.values()))) if points else 1
    # A short last batch is padded (repeating its last point) so that every
    # batch has the same shape and the worker compiles once.
    pad = max(context.batch - B, 0) if points else 0
    padded = {k: np.concatenate([np.asarray(v, float), np.repeat(np.asarray(v, float)[-1:], pad)])
              for k, v in points.items()}
    status, steps, all_values, all_params, integ = simulate_points(model, padded, context.time,
                                                                   entry)
    n_all = len(status)
    status, steps = status[:B], np.asarray(steps)[:B]
    values = {k: np.asarray(v)[:B] for k, v in all_values.items()}
    dae = model.dae
    failed = status != codes.SUCCESS
    data = {}
    for w in context.variables:
        arr = np.asarray(values[w], dtype=float)  # (B, T, L, *shape)
        var = dae.var_index[w]
        dmax = int(integ.prog.d[var.offset: var.offset + var.size].max())
        data[w] = arr[:, :, 0]
        for k in range(1, dmax):
            data[f"{w}_d{k}"] = arr[:, :, k]
    # Residuals and energy of the padded batch too (then cut): the same shapes
    # in every batch, so their jitted functions also compile once per worker.
    data["constraint_residual"] = _residuals(entry, integ, all_values, context.time, all_params,
                                             n_all)[:B]
    if "energy" in context.schema.variables:
        data["energy"] = _energy(entry, dae, all_values, context.time, all_params, n_all)[:B]
    for mname, (of, reduce) in context.metrics.items():
        if of == "constraint_residual":
            series = data["constraint_residual"]
        else:
            var, idx = _component_index(dae, of)
            series = np.asarray(values[var], dtype=float)[:, :, 0]
            if idx is not None:
                series = series.reshape(B, series.shape[1], -1)[:, :, idx]
            elif series.ndim > 2:
                series = np.linalg.norm(series.reshape(B, series.shape[1], -1), axis=-1)
        # A failed point's series is all NaN: numpy warns, the metric is NaN.
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            data[mname] = REDUCERS[reduce](series)
    for k, v in data.items():
        v = np.array(v, dtype=float)
        v[failed] = np.nan
        data[k] = v
    msg = ""
    if failed.any():
        counts = {codes.meaning(c): int((status == c).sum()) for c in np.unique(status[failed])}
        msg = "failed points: " + ", ".join(f"{k}: {n}" for k, n in counts.items())
    return BatchResult(status=status, steps=np.asarray(steps), data=data, message=msg)


def _residuals(entry, integ, values, t_eval, params, B):
    import jax
    import jax.numpy as jnp

    if integ.n_hidden == 0:
        return np.zeros((B, len(t_eval)))
    if "resid" not in entry:
        one = jax.vmap(lambda z, t, p: jnp.max(jnp.abs(integ.hidden_constraints(z, t, p))), in_axes=(0, 0, None))
        entry["resid"] = jax.jit(jax.vmap(one, in_axes=(0, None, 0)))
    Z = np.stack([state_z(integ, values, i) for i in range(B)])
    return np.asarray(entry["resid"](jnp.asarray(Z), jnp.asarray(t_eval), {k: jnp.asarray(v) for k, v in params.items()}))


def state_z(integ, values, i):
    """Normalised states of point i at every output time."""
    from solver.solution import state_at_outputs

    return state_at_outputs(integ, {k: np.asarray(v)[i] for k, v in values.items()})


def _energy(entry, dae, values, t_eval, params, B):
    import jax
    import jax.numpy as jnp

    if "energy" not in entry:
        one = jax.vmap(lambda t, q, qd, p: dae.energy_fn(t, q, qd, p), in_axes=(0, 0, 0, None))
        entry["energy"] = jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0)))
    q = {c.name: jnp.asarray(values[c.name])[:, :, 0] for c in dae.coords}
    qd = {c.name: jnp.asarray(values[c.name])[:, :, 1] for c in dae.coords}
    return np.asarray(entry["energy"](jnp.asarray(t_eval), q, qd, {k: jnp.asarray(v) for k, v in params.items()}))
