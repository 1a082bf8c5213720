"""``Kind: DAE``: equations written out in the expression language.

::

    Title: Simple pendulum, index 3
    Kind: DAE
    PhysicalParams: {g: 9.81, L: 1.0}
    Variables: [x, y, lam]            # or {q: 7, lam: 6}; size 1 = scalar
    Let:                              # optional, ordered
      r2: x**2 + y**2
    Equations:                        # each expression = 0
      - x'' + lam*x
      - y'' + lam*y - g
      - r2 - L**2
    ProblemData:
      t0: 0
      tend: 10
      values: {x: 1.0, y: 0.0, x': 0.0, y': 0.0}   # guesses unless fixed
      fixed: [x, x']
      samples: 1001                   # or dt: 0.01
    Energy: (x'**2 + y'**2)/2 - g*y   # optional: the energy outputs
    SolverParams:
      Integration: {tol: 1.0e-10, order: 20}

Variables may be differentiated to any order (``x''``); ``(expr)'`` and the
prime of a ``Let`` name (``r2'``) are d/dt of the expression through
:func:`solver.ddt`.  Value keys use :func:`solver.solve` syntax (``q[2]'``;
``q'[2]`` is accepted too) and may be expressions of parameters.

``Energy`` (optional) is an expression of t, the parameters, ``Let`` names
and the variables and their first derivatives (``x'`` for a variable whose
second derivative the equations use, so that the solution carries it); with
it a run reports ``energy`` and ``energy_change`` (and ``energy_drift`` where
nothing dissipates), as the Lagrangian and Mechanism kinds do.

``Drivers`` (prescribed motions) are refused here, with a message saying how
to write the driving equation and its multiplier as ordinary equations.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.dae.problem import DAE, DAEDefinitionError
from solver.errors import InputError
from solver.models.expr import ExprError, NotElementwise, evaluate_constant, evaluate_constant_table, parse
from solver.models.yamlio import Locator, check_keys, format_path, require_list, require_mapping

from solver.models.events import attach_events
from solver.models.model import (TIME_KEYS, Model, analyse, build_error, check_key_order, parse_value_key,
                    read_animation, read_sizes, read_solver_params, read_times, read_title,
                    size_names)
from solver.models.scope import DAEScope, PositionScope, read_lets, read_params

__all__ = ["build", "TOP_KEYS"]

TOP_KEYS = ("Title", "Kind", "PhysicalParams", "Variables", "Let", "Equations", "Energy",
            "ProblemData", "SolverParams", "Animation", "Events", "Stops", "MaxEvents", "Units")


def build(data: Mapping, loc: Locator, path: str | None, overrides=None) -> Model:
    """Build a ``Kind: DAE`` model.

    Args:
        data: the file's data (overrides already merged).
        loc: its locator.
        path: the file path.
        overrides: the overrides that were merged (recorded on the model).

    Returns:
        :class:`~solver.models.model.Model`.

    Raises:
        InputError: anything wrong with the file, located (key path, line).
    """
    if "Drivers" in data:
        raise loc.error(
            "Kind: DAE has no Drivers (they are for Kind: Lagrangian and Mechanism, where the "
            "equations of motion are built for you); write the driving equation as an ordinary "
            "equation: add a multiplier variable (e.g. tau) to Variables, add it to the equation "
            "of motion of the driven variable (theta'' + ... - tau), and add the equation "
            "theta - (0.5*sin(2*t)) to Equations; tau is then the generalised force of the drive",
            ("Drivers",))
    check_keys(data, TOP_KEYS, ("Variables", "Equations", "ProblemData"), (), loc)
    title = read_title(data, loc, path)
    raw_vars = data["Variables"]
    structural = size_names(raw_vars) if isinstance(raw_vars, Mapping) else set()
    info = read_params(data.get("PhysicalParams"), loc, lambda values: structural & set(values))
    taken = {k: "a parameter" for k in info.values}
    sizes = read_sizes(raw_vars, loc, "Variables", "variable", info.values, taken)
    taken.update({k: "a variable" for k in sizes})
    lets = read_lets(data.get("Let"), loc, taken)
    eq_raw = require_list(data["Equations"], ("Equations",), loc, nonempty=True,
                          what="a list of expressions (each = 0)")
    equations = [parse(e, file=loc.file, path=format_path(("Equations", i)),
                       line=loc.line(("Equations", i))) for i, e in enumerate(eq_raw)]
    names = list(sizes)

    def residual(t, v, p):
        scope = DAEScope(t, info.resolve(p), lets, v, names)
        return [eq.evaluate(scope) for eq in equations]

    try:
        dae = DAE(residual, variables=sizes, params=info.free, name=title)
    except DAEDefinitionError as err:
        raise build_error(err, loc, ("Equations",)) from None
    structure = analyse(dae, loc, ("Equations",),
                        " (equation fK is Equations[K], counted from 0)")
    if data.get("Energy") is not None:
        _attach_energy(dae, data["Energy"], info, lets, sizes, structure, loc)
    attach_events(dae, data, loc, "DAE", scope_of=lambda t, v, p: DAEScope(t, info.resolve(p), lets, v, names),
                  params=info.numeric(), expressions=equations + [e for _, e in lets])

    pd = require_mapping(data["ProblemData"], ("ProblemData",), loc)
    check_keys(pd, TIME_KEYS + ("values", "fixed"), ("tend",), ("ProblemData",), loc)
    times = read_times(pd, loc)
    values_raw = require_mapping(pd.get("values"), ("ProblemData", "values"), loc,
                                 allow_none=True)
    entries = []  # (solve key, raw expression, key path)
    for key, raw in values_raw.items():
        kpath = ("ProblemData", "values", key)
        vk = parse_value_key(key, sizes, loc, kpath)
        check_key_order(vk, dae, structure, loc, kpath, fixed=False)
        entries.append((vk.text(), raw, kpath, vk))
    fixed = []
    fixed_raw = require_list(pd.get("fixed") or [], ("ProblemData", "fixed"), loc)
    given = {(e[3].name, e[3].index, e[3].order) for e in entries}
    for i, key in enumerate(fixed_raw):
        fpath = ("ProblemData", "fixed", i)
        vk = parse_value_key(key, sizes, loc, fpath)
        check_key_order(vk, dae, structure, loc, fpath, fixed=True)
        if (vk.name, vk.index, vk.order) not in given and (vk.name, None, vk.order) not in given:
            raise loc.error(f"'{vk.text()}' is fixed but has no value in ProblemData.values; "
                            f"give its value there", fpath)
        fixed.append(vk.text())

    located = [(key, raw, kpath, vk, format_path(kpath), loc.line(kpath)) for key, raw, kpath, vk in entries]

    def values(params: dict) -> dict:
        out = {}
        for key, raw, kpath, vk, where, line in located:
            val = evaluate_constant(raw, params, file=loc.file, path=where, line=line)
            _check_value_shape(val, vk, sizes, loc, kpath)
            out[key] = val
        return out

    def values_table(params: dict, varying, size: int) -> dict:
        # values() at many points: the same expressions over columns (Model.initial_values_table).
        out = {}
        for key, raw, kpath, vk, where, line in located:
            val = evaluate_constant_table(raw, params, varying, size, file=loc.file, path=where, line=line)
            if int(np.prod(val.shape[1:])) not in (1, 1 if vk.index is not None else sizes[vk.name] or 1):
                raise NotElementwise(key)  # values() words the error
            out[key] = val
        return out

    values(info.numeric())  # report bad values at load time, not at the first solve
    animation = read_animation(data.get("Animation"), loc, lambda n: n in sizes)
    default_points = [n for n, s in sizes.items() if s in (2, 3)]

    def point_scope(t, state, params):
        return PositionScope(t, params, lets, state, "a drawn point")

    solver_params = read_solver_params(data.get("SolverParams"), loc)
    return Model(dae=dae, kind="DAE", title=title, path=path, text=loc.text, data=data,
                 locator=loc, times=times, solver_params=solver_params, param_info=info,
                 values=values, fixed=fixed, animation=animation, point_scope=point_scope,
                 default_points=default_points, overrides=overrides, values_table=values_table)


class _Coordinate:
    """A variable the energy reads (``.name``, as a Lagrangian coordinate)."""

    def __init__(self, name):
        self.name = name


class _Levels:
    """``v[name][order]`` for the energy: the value and, where it is carried, the first derivative."""

    def __init__(self, name, q, qd):
        self.name, self.q, self.qd = name, q, qd

    def __getitem__(self, order):
        if order == 0:
            return self.q
        if order == 1 and self.qd is not None:
            return self.qd
        raise ExprError(f"{self.name}{chr(39) * order}: the Energy may use a variable's value and, "
                        f"for a variable whose second derivative the equations use, its first "
                        f"derivative")


def _attach_energy(dae, raw, info, lets, sizes, structure, loc) -> None:
    """Give the DAE an ``energy_fn(t, q, qd, p)`` from the ``Energy`` expression.

    Raises:
        InputError: the expression does not parse, names something unknown,
            or uses a derivative the solution does not carry (located).
    """
    import numpy as np

    expr = parse(raw, file=loc.file, path="Energy", line=loc.line(("Energy",)))
    names = list(sizes)
    d = structure.d
    # The dense output carries x' for a variable with d >= 2 (solution.py).
    carried = {v.name: int(d[v.offset: v.offset + v.size].max()) >= 2 for v in dae.variables}

    def energy_fn(t, q, qd, p):
        v = {n: _Levels(n, q[n], qd.get(n) if carried[n] else None) for n in names}
        scope = DAEScope(t, info.resolve(p), lets, v, names)
        return jnp.asarray(expr.evaluate(scope), dtype=jnp.float64)

    # numpy zeros: eval_shape needs only their shapes, and jnp.zeros would
    # compile a fill program on a warm start's path (30 ms).
    probe_q = {v.name: np.zeros(v.shape) for v in dae.variables}
    try:
        val = jax.eval_shape(lambda: energy_fn(0.0, probe_q, dict(probe_q), info.numeric()))
    except (ExprError, InputError) as err:
        raise loc.error(str(getattr(err, "message", err)), ("Energy",)) from None
    except Exception as err:  # a time derivative of an expression: ddt has no value here
        raise loc.error(f"the Energy must be a function of the variables and first derivatives "
                        f"({type(err).__name__}: {err})", ("Energy",)) from None
    if np.prod(val.shape) != 1:
        raise loc.error(f"the Energy must be a scalar, got shape {tuple(val.shape)}", ("Energy",))
    dae.energy_fn = lambda t, q, qd, p: jnp.reshape(energy_fn(t, q, qd, p), ())
    dae.coords = [_Coordinate(n) for n in names]


def _check_value_shape(val, vk, sizes, loc, kpath) -> None:
    import numpy as np

    want = 1 if vk.index is not None else (sizes[vk.name] or 1)
    got = int(np.size(val))
    if got not in (1, want):
        raise loc.error(f"'{vk.text()}' needs {want} value(s) (or one for all), got {got}", kpath)
