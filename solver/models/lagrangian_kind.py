"""``Kind: Lagrangian``: coordinates, energies and constraints in expressions.

::

    Title: RSCR mechanism
    Kind: Lagrangian
    PhysicalParams: {L1: 1.2, ...}
    Coordinates: {C1: 3, B: 3, mu: 1}     # size 1 = scalar
    Let:                                  # ordered; vectors allowed
      i3: C1/L3
      C: C1 + mu*v
    KineticEnergy: m1/6*dot(B', B') + ...
    PotentialEnergy: g*(...)              # optional (0)
    Dissipation: ...                      # optional Rayleigh function R
    Constraints: [dot(C1, C1) - L3**2, dot(C1, w), ...]
    Forces: {mu: -c*mu', C: [0, 0, F]}    # generalised, or at a Let point
    Drivers: {mu: 0.1*sin(t)}             # prescribed motions (inverse dynamics)
    ProblemData:
      t0: 0
      tend: 10
      positions: {C1: [..], B: [..], mu: 0}   # guesses
      fixedpositions: {C1x}                    # these keep their values
      velocities: {C1y: 1}                     # velocities given are fixed
      samples: 501

``L = KineticEnergy - PotentialEnergy`` is a function of the coordinates q and
velocities q'.  A prime on a ``Let`` name (``C'``) or on ``(expr)'`` is the
total time derivative along the motion, d/dt = ∂/∂t + q'·∂/∂q, computed by
``jax.jvp``; it is allowed on expressions of positions only.  Constraints and
the points forces act on depend on positions (and ``t``) only.

``Drivers`` (inverse dynamics, :mod:`solver.models.drivers`): each key is a
scalar coordinate, a component by axis letter (``C1z``) or a scalar ``Let``
name of positions (a crank angle written with ``atan2``); its value an
expression of ``t`` and the parameters.  Each becomes the constraint
``key − value(t) = 0`` with its own multiplier, and the results hold
``torque_{key}``, the generalised force the drive applies.  A driven
coordinate may not be fixed (its initial value and velocity come from the
driver); a value in ``positions`` is a guess.

Value names in ``positions``/``fixedpositions``/``velocities``: a whole
coordinate (``B``), a component by axis letter (``Ax`` = A[0], ``By``, ``Cz``)
or by subscript (``A[0]``).  ``{Ax, B}`` (keys without values) reads as a list
of names.  Values may be expressions of parameters (``[L, 0]``).

Models whose size is a parameter (``Coordinates: {r: 3*N}``) are allowed: the
parameters used in sizes are *structural*: evaluated once at load time, not
traced, and refused as sweep axes (change them with an ``Override``).

``Generator: {cloth: {...}}`` builds the talk's particle–spring cloth
(:func:`solver.mechanics.cloth.cloth`) instead of reading energies; see :func:`_cloth`.
Its grid of m×n particles could be written with repeats (``for i in 1..m``,
``sum(...)``: :mod:`solver.models.repeat`, docs/models.md), but the
generator builds large grids much faster than thousands of expressions.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

import jax.numpy as jnp

from solver.mechanics.cloth import cloth, cloth_rest_positions, cloth_size_problem
from solver.errors import InputError
from solver.models.expr import NotElementwise, evaluate_constant, evaluate_constant_table, parse
from solver.mechanics.lagrangian import lagrangian, point_force
from solver.models.yamlio import (Locator, check_keys, format_path, require_list, require_mapping,
                           require_str)

from solver.models import drivers as driver_entries
from solver.models.model import (TIME_KEYS, Model, analyse, build_error, read_animation, read_sizes,
                    read_solver_params, read_times, read_title, size_names)
from solver.models.events import attach_events
from solver.models.scope import BaseScope, LagrangianScope, PositionScope, read_lets, read_params

__all__ = ["build", "TOP_KEYS", "GENERATORS"]

TOP_KEYS = ("Title", "Kind", "PhysicalParams", "Coordinates", "Let", "KineticEnergy",
            "PotentialEnergy", "Dissipation", "Constraints", "Forces", "Drivers", "Generator",
            "ProblemData", "SolverParams", "Animation", "Events", "Stops", "MaxEvents", "Units")
PD_KEYS = TIME_KEYS + ("positions", "fixedpositions", "velocities")
GENERATORS = ("cloth",)
_AXES = "xyz"


def build(data: Mapping, loc: Locator, path: str | None, overrides=None) -> Model:
    """Build a ``Kind: Lagrangian`` model.

    Args:
        data: the file's data (overrides already merged).
        loc: its locator.
        path: the file path.
        overrides: the overrides that were merged (recorded on the model).

    Returns:
        :class:`~solver.models.model.Model` whose ``dae`` is a
        :class:`solver.mechanics.lagrangian.LagrangianDAE` (so the result has ``energy``).

    Raises:
        InputError: anything wrong with the file, located (key path, line).
    """
    if "Generator" in data:
        return _generated(data, loc, path, overrides)
    check_keys(data, [k for k in TOP_KEYS if k != "Generator"],
               ("Coordinates", "KineticEnergy", "ProblemData"), (), loc)
    title = read_title(data, loc, path)
    raw = data["Coordinates"]
    structural = size_names(raw) if isinstance(raw, Mapping) else set()
    info = read_params(data.get("PhysicalParams"), loc, lambda values: structural & set(values))
    taken = {k: "a parameter" for k in info.values}
    sizes = read_sizes(raw, loc, "Coordinates", "coordinate", info.values, taken)
    taken.update({k: "a coordinate" for k in sizes})
    lets = read_lets(data.get("Let"), loc, taken)
    let_names = [n for n, _ in lets]

    def expr(key, item=None):
        kp = (key,) if item is None else (key, item)
        return parse(data[key] if item is None else data[key][item], file=loc.file,
                     path=format_path(kp), line=loc.line(kp))

    T = expr("KineticEnergy")
    V = expr("PotentialEnergy") if data.get("PotentialEnergy") is not None else None
    R = expr("Dissipation") if data.get("Dissipation") is not None else None
    cons_raw = require_list(data.get("Constraints") or [], ("Constraints",), loc,
                            what="a list of expressions (each = 0)")
    constraints = [expr("Constraints", i) for i in range(len(cons_raw))]
    forces_raw = require_mapping(data.get("Forces"), ("Forces",), loc, allow_none=True,
                                 what="a mapping {coordinate or Let point: force}")

    def scalar(value, e, what):
        if jnp.shape(value) != ():
            shape = jnp.shape(value)
            raise InputError(f"{what} must be a scalar, got an array of shape {shape}",
                             file=loc.file, path=e.path, line=e.line)
        return value

    def L(t, q, qd, p):
        scope = LagrangianScope(t, info.resolve(p), lets, q, qd)
        val = scalar(T.evaluate(scope), T, "the kinetic energy")
        if V is not None:
            val = val - scalar(V.evaluate(scope), V, "the potential energy")
        return val

    def C(t, q, p):
        scope = PositionScope(t, info.resolve(p), lets, q, "a constraint")
        return [jnp.ravel(c.evaluate(scope)) for c in constraints]

    def dissipation(t, q, qd, p):
        scope = LagrangianScope(t, info.resolve(p), lets, q, qd)
        return scalar(R.evaluate(scope), R, "the dissipation function")

    forces = _forces(forces_raw, sizes, let_names, lets, info, loc)
    pd = require_mapping(data["ProblemData"], ("ProblemData",), loc)
    check_keys(pd, PD_KEYS, ("tend",), ("ProblemData",), loc)
    times = read_times(pd, loc)
    drivers, driven = _drivers(data.get("Drivers"), sizes, lets, info, loc, times["t0"])
    multiplier = next(n for n in ("lam", "lambda_", "mult", "lagrange_multipliers")
                      if n not in taken and n not in let_names)
    try:
        dae = lagrangian(L, sizes, constraints=C if constraints else None,
                         dissipation=dissipation if R is not None else None,
                         forces=forces or None, params=info.free, name=title,
                         multiplier=multiplier, drivers=drivers or None)
    except InputError as err:
        raise build_error(err, loc, ("Drivers",) if drivers and "drivers" in str(err.path)
                          else ("KineticEnergy",)) from None
    # Analysed here, so that a structural error names the file's key.
    analyse(dae, loc, ("Constraints",) if constraints else ("KineticEnergy",))
    coords = list(sizes)
    stop_rules = attach_events(
        dae, data, loc, "Lagrangian",
        scope_of=lambda t, v, p: LagrangianScope(t, info.resolve(p), lets, {c: v[c][0] for c in coords},
                                                 {c: v[c][1] for c in coords}),
        position_scope=lambda t, q, p: PositionScope(t, info.resolve(p), lets, q, "a stop's gap"),
        param_scope=lambda p: BaseScope(jnp.zeros(()), info.resolve(p), []), params=info.numeric(),
        expressions=[e for e in (T, V, R, *constraints) if e is not None] + [e for _, e in lets]
        + [parse(raw, file=loc.file, path=format_path(("Forces", key)), line=loc.line(("Forces", key)))
           for key, raw in (forces_raw or {}).items()])
    point_dims = set(sizes.values())
    if point_dims in ({2}, {3}):
        # Every coordinate is read as a point's world position (as Animation
        # does), so the momentum outputs are defined; see docs/reference/outputs.md.
        dae.momentum_dim = point_dims.pop()

    values, fixed, values_table = _problem_values(pd, sizes, loc, info, driven)
    animation = read_animation(data.get("Animation"), loc, lambda n: n in sizes or n in let_names)

    def point_scope(t, state, params):
        return PositionScope(t, params, lets, {k: state[k] for k in sizes}, "a drawn point")

    uses_t = any("t" in e.names() for e in [T, V, *constraints, *(e for _, e in lets)] if e)
    # A drive does work: the energy then changes by physics, not error.
    conservative = not (R is not None or forces_raw or uses_t or drivers)
    model = Model(dae=dae, kind="Lagrangian", title=title, path=path, text=loc.text, data=data,
                 locator=loc, times=times,
                 solver_params=read_solver_params(data.get("SolverParams"), loc),
                 param_info=info, values=values, fixed=fixed, animation=animation,
                 point_scope=point_scope,
                 default_points=[n for n, s in sizes.items() if s in (2, 3)],
                 conservative=conservative, overrides=overrides, values_table=values_table)
    model.value_rules = stop_rules
    return model


# ------------------------------------------------------------------ forces
def _forces(raw: Mapping, sizes: Mapping, let_names: list, lets: list, info, loc: Locator):
    """``Forces`` -> list of force callables for :func:`solver.mechanics.lagrangian.lagrangian`."""
    generalised = {}
    out = []
    for key, value in raw.items():
        kp = ("Forces", key)
        e = parse(value, file=loc.file, path=format_path(kp), line=loc.line(kp))
        if key in sizes:
            generalised[key] = e
        elif key in let_names:
            out.append(_point_force(key, e, lets, info))
        else:
            choices = ", ".join(list(sizes) + let_names)
            raise loc.error(f"'{key}' is neither a coordinate (generalised force) nor a Let point "
                            f"(force applied there); valid names: {choices}", kp)
    if generalised:
        def total(t, q, qd, p):
            scope = LagrangianScope(t, info.resolve(p), lets, q, qd)
            return {k: e.evaluate(scope) for k, e in generalised.items()}

        out.append(total)
    return out


def _point_force(name: str, e, lets, info):
    """Q = J_pᵀ F for a force ``e`` applied at the Let point ``name``."""
    def position(t, q, p):
        return PositionScope(t, info.resolve(p), lets, q, f"the point '{name}' a force acts on") \
            .lookup(name, 0)

    def force(t, q, qd, p):
        return e.evaluate(LagrangianScope(t, info.resolve(p), lets, q, qd))

    return point_force(position, force)


# ------------------------------------------------------------------ drivers
def _drivers(raw, sizes: Mapping, lets: list, info, loc: Locator, t0: float):
    """``Drivers`` -> (``drivers=`` for :func:`solver.mechanics.lagrangian.lagrangian`, driven targets).

    A key is a scalar coordinate (``theta``), a component by axis letter
    (``C1z``) or a scalar ``Let`` name of positions (``phi: atan2(...)``).

    Returns:
        (mapping name -> (quantity, value, units), mapping (coordinate,
        component or None) -> key of every driven coordinate, for the
        initial-value checks).

    Raises:
        InputError: a key that names nothing drivable (listing the valid
            names), a malformed value (the expression module's message).
    """
    entries = driver_entries.read_entries(raw, loc, "Lagrangian", info.values, t0)
    if not entries:
        return {}, {}
    scalar_lets = _scalar_lets(sizes, lets, info)
    out, driven = {}, {}
    for e in entries:
        value = driver_entries.value_fn(e, info.resolve)
        key = e.key
        if key in sizes and sizes[key] is None:
            out[key] = (key, value, e.units)
            driven[(key, None)] = key
        elif key in scalar_lets:
            out[key] = (_let_quantity(key, lets, info), value, e.units)
        else:
            target = _component(key, sizes)
            if target is None:
                raise loc.error(_not_drivable(key, sizes, lets, scalar_lets), e.path)
            name, idx = target
            out[key] = (f"{name}[{idx}]", value, e.units)
            driven[(name, idx)] = key
    return out, driven


def _component(key: str, sizes: Mapping):
    """``Ax`` -> (A, 0) for a vector coordinate A (up to 3 components), else None."""
    if len(key) > 1 and key[-1] in _AXES and key[:-1] in sizes:
        base, i = key[:-1], _AXES.index(key[-1])
        if sizes[base] and i < sizes[base]:
            return base, i
    return None


def _scalar_lets(sizes: Mapping, lets: list, info) -> set:
    """The ``Let`` names whose value is a scalar function of the positions (and t)."""
    import jax

    q = {k: jax.ShapeDtypeStruct(() if s is None else (s,), jnp.float64) for k, s in sizes.items()}
    out = set()
    for name, _ in lets:
        def probe(q, name=name):
            scope = PositionScope(jnp.float64(0.0), info.resolve(
                {k: jnp.asarray(v) for k, v in info.free.items()}), lets, q, "a driven quantity")
            return jnp.asarray(scope.lookup(name, 0))
        try:
            shape = jax.eval_shape(probe, q).shape
        except InputError:  # uses velocities: not a function of the positions
            continue
        if int(np.prod(shape)) == 1:
            out.add(name)
    return out


def _let_quantity(name: str, lets: list, info):
    """``quantity(t, q, p)`` of a scalar Let name (driven quantity)."""
    def quantity(t, q, p):
        scope = PositionScope(t, info.resolve(p), lets, q, f"the driven quantity '{name}'")
        return jnp.reshape(scope.lookup(name, 0), ())

    return quantity


def _not_drivable(key: str, sizes: Mapping, lets: list, scalar_lets: set) -> str:
    """Why ``key`` cannot be driven, and the valid names."""
    scalars = [n for n, s in sizes.items() if s is None]
    comps = [f"{n}{a}" for n, s in sizes.items() if s and s <= 3 for a in _AXES[:s]]
    valid = scalars + comps + [n for n, _ in lets if n in scalar_lets]
    if key in sizes:
        why = f"'{key}' is a {sizes[key]}-vector coordinate; a driver prescribes one scalar"
    elif key in dict(lets):
        why = f"the Let name '{key}' is not a scalar function of the positions"
    else:
        why = f"'{key}' is not a scalar coordinate, a component or a scalar Let name"
    return (f"{why}; valid driven quantities: {', '.join(valid) or '(none)'} (define a scalar "
            f"Let, e.g. an angle with atan2, to drive anything else)")


# ------------------------------------------------------------------ values
def _value_name(key: Any, sizes: Mapping, loc: Locator, path: tuple) -> tuple[str, int | None]:
    """``B`` -> (B, None); ``Ax`` / ``A[0]`` -> (A, 0).

    Raises:
        InputError: not a coordinate or component name (lists the valid ones).
    """
    key = str(key).strip()
    if key in sizes:
        return key, None
    if key.endswith("]") and "[" in key:
        base, _, idx = key[:-1].partition("[")
        if base in sizes and idx.strip().isdigit():
            i = int(idx)
            if sizes[base] and i < sizes[base]:
                return base, i
            raise loc.error(f"'{key}': {base} has {sizes[base] or 1} component(s)", path)
    if len(key) > 1 and key[-1] in _AXES and key[:-1] in sizes:
        base, i = key[:-1], _AXES.index(key[-1])
        if sizes[base] and i < sizes[base]:
            return base, i
        raise loc.error(f"'{key}': {base} is " + (f"a {sizes[base]}-vector" if sizes[base]
                        else "a scalar") + f" and has no {key[-1]} component", path)
    comps = [n for n, s in sizes.items() if s] or ["(none)"]
    raise loc.error(f"'{key}' is not a coordinate or a component; valid names: "
                    f"{', '.join(sizes)}, or a component such as {comps[0]}x or {comps[0]}[0]",
                    path)


def _names(raw: Any, loc: Locator, path: tuple) -> list:
    """``{Ax, B}`` (null values) or ``[Ax, B]`` -> list of names."""
    if raw is None:
        return []
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            if v is not None:
                raise loc.error(f"'{k}: {v}': list names only here (write {{{k}}} or [{k}]); "
                                f"values go in ProblemData.positions", path + (k,))
        return list(raw)
    return [require_str(v, path + (i,), loc) for i, v in enumerate(
        require_list(raw, path, loc, what="a list of names such as [Ax, B] or {Ax, B}"))]


def _problem_values(pd: Mapping, sizes: Mapping, loc: Locator, info, driven: Mapping):
    """positions / fixedpositions / velocities -> (values(params), fixed, values_table).

    ``values_table(params, varying, size)`` is ``values`` at many points at
    once (:meth:`solver.models.model.Model.initial_values_table`).

    ``driven`` maps (coordinate, component or None) -> driver key: such
    coordinates may have guesses in ``positions`` but cannot be fixed.
    """
    entries = []  # (solve key, raw, path, size)
    given = set()
    for section, prime in (("positions", ""), ("velocities", "'")):
        raw = require_mapping(pd.get(section), ("ProblemData", section), loc, allow_none=True)
        for key, value in raw.items():
            kp = ("ProblemData", section, key)
            name, idx = _value_name(key, sizes, loc, kp)
            if prime:
                driver_entries.refuse_fixed(driven, (name, idx), loc, kp, section)
            if value is None:
                raise loc.error(f"'{key}' has no value; give a number or an expression", kp)
            label = name + (f"[{idx}]" if idx is not None else "")
            entries.append((label + prime, value, kp, 1 if idx is not None else sizes[name] or 1))
            given.add((name, idx, prime))
    fixed = []
    for key in _names(pd.get("fixedpositions"), loc, ("ProblemData", "fixedpositions")):
        kp = ("ProblemData", "fixedpositions", key)
        name, idx = _value_name(key, sizes, loc, kp)
        driver_entries.refuse_fixed(driven, (name, idx), loc, kp, "fixedpositions")
        if (name, idx, "") not in given and (name, None, "") not in given:
            raise loc.error(f"'{key}' is fixed but has no value in ProblemData.positions", kp)
        fixed.append(name + (f"[{idx}]" if idx is not None else ""))
    fixed += [key for key, _, kp, _ in entries if kp[1] == "velocities"]

    located = [(key, raw, kp, size, format_path(kp), loc.line(kp)) for key, raw, kp, size in entries]

    def values(params: dict) -> dict:
        out = {}
        for key, raw, kp, size, where, line in located:
            val = evaluate_constant(raw, params, file=loc.file, path=where, line=line)
            if isinstance(val, list) or int(np.size(val)) not in (1, size):
                raise loc.error(f"expected {size} value(s) (or one for all), got "
                                f"{int(np.size(val)) if not isinstance(val, list) else len(val)}",
                                kp)
            out[key] = val
        return out

    def values_table(params: dict, varying, points: int) -> dict:
        out = {}
        for key, raw, kp, size, where, line in located:
            val = evaluate_constant_table(raw, params, varying, points, file=loc.file, path=where, line=line)
            if int(np.prod(val.shape[1:])) not in (1, size):
                raise NotElementwise(key)  # values() words the error
            out[key] = val
        return out

    values(info.numeric())  # report bad values at load time
    return values, fixed, values_table


# ------------------------------------------------------------------ generators
def _generated(data: Mapping, loc: Locator, path: str | None, overrides) -> Model:
    """A model from a built-in generator (``Generator: {cloth: {...}}``)."""
    check_keys(data, ("Title", "Kind", "PhysicalParams", "Generator", "ProblemData",
                      "SolverParams", "Animation", "Units"), ("Generator", "ProblemData"), (), loc)
    gen = require_mapping(data["Generator"], ("Generator",), loc)
    if len(gen) != 1:
        raise loc.error(f"expected one generator, e.g. {{cloth: {{...}}}}; valid generators: "
                        f"{', '.join(GENERATORS)}", ("Generator",))
    (name, options), = gen.items()
    require_str(name, ("Generator", name), loc, choices=GENERATORS)
    return _cloth(data, options, loc, path, overrides)


CLOTH_PARAMS = ("M", "k", "l", "kd", "g", "dx", "dy")


def _cloth(data: Mapping, options: Any, loc: Locator, path, overrides) -> Model:
    """The talk's m×n particle–spring cloth.

    ``Generator: {cloth: {rows: m, cols: n, fixed: edges, push: v0}}``:
    ``rows``/``cols`` name structural parameters (grid size, fixed at load);
    PhysicalParams must define the traced parameters M (particle mass),
    k (stiffness), l (rest length), kd (damping), g, dx, dy (grid spacing).
    The particles start at rest on the grid ((i dx, j dy, 0)); the middle one
    is pushed upward with speed ``push``.  Coordinate ``r`` holds the 3mn
    positions; the state is fully given (an ODE for ``fixed: edges``).
    """
    base = ("Generator", "cloth")
    opts = require_mapping(options, base, loc)
    check_keys(opts, ("rows", "cols", "fixed", "push"), ("rows", "cols"), base, loc)
    structural = set()
    for key in ("rows", "cols"):
        structural |= parse(opts[key], file=loc.file, path=format_path(base + (key,))).names()
    info = read_params(data.get("PhysicalParams"), loc, lambda values: structural & set(values))
    missing = [p for p in CLOTH_PARAMS if p not in info.free]
    if missing:
        raise loc.error(f"the cloth generator needs the numeric parameters "
                        f"{', '.join(CLOTH_PARAMS)}; missing or not plain numbers: "
                        f"{', '.join(missing)}", ("PhysicalParams",))
    extra = [p for p in list(info.free) + [n for n, _ in info.derived] if p not in CLOTH_PARAMS]
    if extra:
        raise loc.error(f"the cloth generator uses only the parameters {', '.join(CLOTH_PARAMS)} "
                        f"and the grid sizes; remove {', '.join(extra)} (write the push speed "
                        f"in Generator.cloth.push)", ("PhysicalParams",))
    sizes = {}
    for key in ("rows", "cols"):
        val = evaluate_constant(opts[key], info.values, file=loc.file,
                                path=format_path(base + (key,)), line=loc.line(base + (key,)))
        if np.ndim(val) or not float(val).is_integer() or val < 2:
            raise loc.error(f"expected a whole number >= 2, got {val}", base + (key,))
        sizes[key] = int(val)
    fixed_kind = require_str(opts.get("fixed", "edges"), base + ("fixed",), loc,
                             choices=("edges", "corners"))
    m, n = sizes["rows"], sizes["cols"]
    problem = cloth_size_problem(m, n)
    if problem:
        raise loc.error(problem, base + ("rows",))
    defaults = {k: float(info.free[k]) for k in CLOTH_PARAMS}
    title = read_title(data, loc, path)
    dae = cloth(m, n, fixed=fixed_kind, **defaults)
    dae.name = title
    analyse(dae, loc, ("Generator",))
    pd = require_mapping(data["ProblemData"], ("ProblemData",), loc)
    check_keys(pd, TIME_KEYS, ("tend",), ("ProblemData",), loc)
    times = read_times(pd, loc)
    push = opts.get("push", 0.0)

    def values(params: dict) -> dict:
        rest = cloth_rest_positions(m, n, params["dx"], params["dy"])
        vel = np.zeros((m, n, 3))
        vel[(m - 1) // 2, (n - 1) // 2, 2] = evaluate_constant(
            push, params, file=loc.file, path=format_path(base + ("push",)),
            line=loc.line(base + ("push",)))
        return {"r": rest.ravel(), "r'": vel.ravel()}

    values(info.numeric())
    animation = read_animation(data.get("Animation"), loc, lambda k: k == "r")
    links = []
    for i in range(m):
        for j in range(n):
            if j + 1 < n:
                links.append((f"p{i}_{j}", f"p{i}_{j + 1}"))
            if i + 1 < m:
                links.append((f"p{i}_{j}", f"p{i + 1}_{j}"))

    def point_arrays(ds) -> dict:
        # The grid's particles straight from r (time, 3 m n): no expression per point.
        r = np.asarray(ds["r"].values, dtype=float).reshape(-1, m, n, 3)
        return {f"p{i}_{j}": r[:, i, j] for i in range(m) for j in range(n)}

    def point_scope(t, state, params):
        return PositionScope(t, params, [], {"r": state["r"]}, "a drawn point")

    return Model(dae=dae, kind="Lagrangian", title=title, path=path, text=loc.text, data=data,
                 locator=loc, times=times,
                 solver_params=read_solver_params(data.get("SolverParams"), loc),
                 param_info=info, values=values, fixed=["r", "r'"] if fixed_kind == "edges"
                 else ["r'"], animation=animation, point_scope=point_scope, links=links,
                 conservative=False, overrides=overrides, point_arrays=point_arrays)
