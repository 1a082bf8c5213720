"""Reading a Mechanism file: its parts, forces, drivers and problem data, checked and located.

:class:`MechanismReader` turns the data of a ``Kind: Mechanism`` file
(described in :mod:`solver.models.mechanism_kind`) into a
:class:`solver.mechanics.mechanism.Mechanism` and the functions that give the
initial values from the parameters; every message names the file, key path
and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

import jax.numpy as jnp

from solver.errors import InputError
from solver.mechanics.mechanism import AXES, FIELDS, Mechanism, PART_KINDS as MECHANISM_PARTS, Part
from solver.mechanics.natural import RigidBody
from solver.models import drivers as driver_entries
from solver.models.expr import Expr, ExprError, NotElementwise, check_name, evaluate_table, parse
from solver.models.model import read_times
from solver.models.scope import read_params
from solver.models.yamlio import (Locator, check_keys, describe_value, did_you_mean, format_path,
                                  require_int, require_list, require_mapping, require_str)

__all__ = ["MechanismReader", "DEFAULT_GRAVITY", "DRIVER_UNITS", "FORCE_KEYS", "PART_KINDS", "PROBLEM_KEYS",
           "TOP_KEYS", "split_point_names"]


TOP_KEYS = ("Title", "Kind", "Dimension", "PhysicalParams", "PartData", "AppliedForces",
            "Drivers", "ProblemData", "SolverParams", "Animation", "Events", "Stops", "MaxEvents", "Units")
# Units of a drive's force along a point's axis: the kind's lengths and
# default gravity are SI.
DRIVER_UNITS = "N"
PART_KINDS = ("Fixed",) + MECHANISM_PARTS
FORCE_KEYS = ("Gravity", "PointForces")
PROBLEM_KEYS = ("t0", "tend", "positions", "fixedpositions", "velocities", "samples", "dt")
DEFAULT_GRAVITY = 9.81

# Positional fields of the list form, in order, and their mapping-form names.
_FIELDS = {kind: FIELDS[kind] for kind in ("Springs", "DampedSprings", "Rods")}
_LIST_FORM = {
    "Springs": "[stiffness, rest length, mass]",
    "DampedSprings": "[stiffness, rest length, mass, damping]",
    "Rods": "[mass, length]",
}
_POINT_TOKEN = re.compile(r"[A-Z][a-z0-9]*")
# Tolerance for "the fixed points already satisfy this constraint".
_FIXED_TOL = 1e-9


# ------------------------------------------------------------------ helpers
def split_point_names(name: str) -> list[str] | None:
    """Point names of a part name: split at capitals (``DC1`` -> D, C1).

    Args:
        name: the part's name.

    Returns:
        The list of point names, or ``None`` when the name is not a run of
        capital-led tokens (then the part must list its points).
    """
    if not isinstance(name, str) or not re.fullmatch(r"(?:[A-Z][a-z0-9]*)+", name):
        return None
    return _POINT_TOKEN.findall(name)


class _Scope:
    """Expression scope over (possibly traced) values.

    ``values``: name -> value at order 0; ``rates``: name -> first derivative
    (points' velocities for force expressions).  Derivatives of expressions
    are not available: mechanism expressions are values, not equations.
    """

    def __init__(self, values: Mapping[str, Any], rates: Mapping[str, Any] | None = None,
                 what: str = "a PhysicalParams constant"):
        self.values, self.rates, self.what = values, rates or {}, what

    def names(self):
        return list(self.values)

    def lookup(self, name, order):
        if order == 0:
            return self.values[name]
        if order == 1 and name in self.rates:
            return self.rates[name]
        if name not in self.values:
            raise KeyError(name)
        raise ExprError(f"{name}{chr(39) * order} is a derivative, but '{name}' is {self.what} "
                        "here")

    def derivative(self, thunk, order):
        raise ExprError("derivatives of expressions are not available in a mechanism file")


class _NumericScope(_Scope):
    """:class:`_Scope` over numbers, evaluated in numpy (:mod:`solver.models.expr`), as
    initial values are once per design point of a sweep (eager jax dispatch
    cost Mechanism0 1.2 ms a point)."""

    numeric = True


def f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def _shape_words(shape) -> str:
    if shape == ():
        return "a scalar"
    if len(shape) == 1:
        return f"a {shape[0]}-vector"
    return "a " + "x".join(str(n) for n in shape) + " array"


@dataclass
class _Quantity:
    """One expression from the file, with where it came from.

    Called as the physics wants its values (:class:`solver.mechanics.mechanism.Part`):
    ``q(values)`` or, for a point force, ``q(values, rates)``.
    """

    expr: Expr
    path: tuple
    default: np.ndarray = None  # value at the default parameters
    what: str = "a PhysicalParams constant"  # what a name is, for messages
    rule: str | None = None  # "positive" or "nonneg": checked at any parameter values
    desc: str = ""  # what the quantity is, for messages ("mass (a scalar)")

    def __call__(self, values, rates=None):
        return f64(self.expr.evaluate(_Scope(values, rates, what=self.what)))

    def constant(self, values) -> np.ndarray:
        """The value at numeric parameter ``values``, computed in numpy."""
        return np.asarray(self.expr.evaluate(_NumericScope(values, what=self.what)), dtype=np.float64)


# ------------------------------------------------------------------ reading
class MechanismReader:
    """Reads and validates one mechanism file into a :class:`Mechanism`."""

    def __init__(self, data, loc: Locator):
        self.data, self.loc = data, loc

    def fail(self, message, path) -> InputError:
        return self.loc.error(message, path)

    def expr(self, value, path) -> Expr:
        return parse(value, file=self.loc.file, path=format_path(path),
                     line=self.loc.nearest(path))

    def quantity(self, value, path, shapes, what, *, nonneg=False, positive=False) -> _Quantity:
        """Parse and evaluate at the defaults; check its shape and sign.

        ``shapes`` is a tuple of allowed shapes, ``what`` how to name them.
        """
        qty = _Quantity(self.expr(value, path), tuple(path))
        try:
            val = np.asarray(qty.expr.evaluate(self.defaults_scope), dtype=float)
        except ExprError as err:
            raise err.located(self.loc.file, format_path(path), self.loc.nearest(path)) from None
        if val.shape not in shapes:
            raise self.fail(f"expected {what}, got {_shape_words(val.shape)} "
                            f"({qty.expr.text})", path)
        if not np.all(np.isfinite(val)):
            raise self.fail(f"{qty.expr.text!r} is not finite at the default parameters", path)
        if positive and not np.all(val > 0):
            raise self.fail(f"expected a positive {what}, got {val.tolist()} ({qty.expr.text})", path)
        if nonneg and not np.all(val >= 0):
            raise self.fail(f"expected a {what} >= 0, got {val.tolist()} ({qty.expr.text})", path)
        qty.default = val
        qty.rule = "positive" if positive else "nonneg" if nonneg else None
        qty.desc = what
        return qty

    # -------------------------------------------------------- top level
    def read(self) -> Mechanism:
        data = require_mapping(self.data, (), self.loc, what="a mapping of top-level keys "
                               f"({', '.join(TOP_KEYS)})")
        check_keys(data, TOP_KEYS, ("Dimension", "PartData", "ProblemData"), (), self.loc)
        if "Kind" in data:
            require_str(data["Kind"], ("Kind",), self.loc, choices=["Mechanism"])
        dim = require_int(data["Dimension"], ("Dimension",), self.loc)
        if dim not in (2, 3):
            raise self.fail(f"expected 2 or 3, got {dim}; valid choices: 2, 3", ("Dimension",))
        title = data.get("Title")
        if title is not None and not isinstance(title, str):
            title = str(title)
        mech = Mechanism(dim, title or (Path(self.loc.file).stem if self.loc.file else "Mechanism"))
        self.mech = mech
        self.read_params(data.get("PhysicalParams"))
        self.read_parts(data["PartData"])
        self.read_forces(data.get("AppliedForces"))
        self.check_masses()
        names = set(mech.moving) | set(mech.fixed_points) | set(mech.param_info.values)
        k = 0
        while mech.multiplier in names:
            k += 1
            mech.multiplier = f"lam{k}"
        return mech

    def read_params(self, raw):
        mech = self.mech
        mech.param_info = read_params(raw, self.loc)
        # Evaluated in numpy: at the defaults, each jax operation on numbers was a program of its
        # own, compiled in every fresh process (about 20 ms each, 8 for the free body).
        self.defaults_scope = _NumericScope({k: np.asarray(v, dtype=np.float64)
                                             for k, v in mech.param_info.values.items()})

    # -------------------------------------------------------- parts
    def read_parts(self, raw):
        path = ("PartData",)
        raw = require_mapping(raw, path, self.loc)
        check_keys(raw, PART_KINDS, (), path, self.loc)
        mech, d = self.mech, self.mech.dim
        vec = ((d,),)
        for name, value in require_mapping(raw.get("Fixed"), path + ("Fixed",), self.loc,
                                           allow_none=True).items():
            p = path + ("Fixed", name)
            self.point_name(name, p)
            mech.fixed_points[name] = self.quantity(value, p, vec, f"a {d}-vector position")
        self.first_use: dict[str, tuple] = {}
        for kind in ("Rigids", "Rods", "Springs", "DampedSprings", "Particles"):
            entries = require_mapping(raw.get(kind), path + (kind,), self.loc, allow_none=True)
            for name, value in entries.items():
                p = path + (kind, name)
                part = getattr(self, "read_" + kind.lower())(name, value, p)
                if len(set(part.points)) != len(part.points):
                    raise self.fail(f"a point appears twice in {list(part.points)}; the points of "
                                    "a part must be different", p)
                for pt in part.points:
                    self.point_name(pt, p)
                    if pt not in mech.fixed_points and pt not in mech.moving:
                        mech.moving.append(pt)
                    self.first_use.setdefault(pt, p)
                mech.parts.append(part)
        if not mech.moving:
            raise self.fail("no moving points: every part's points are Fixed; add a part with a "
                            "point that is not under Fixed", path)
        for pt in mech.moving:
            if pt in mech.param_info.values:
                raise self.fail(f"point '{pt}' has the name of a PhysicalParams entry; rename one "
                                "of them", self.first_use[pt])
        self.check_fixed_constraints()

    def point_name(self, name, path):
        check_name(name, "point name", file=self.loc.file, path=format_path(path),
                   line=self.loc.nearest(path))

    def part_points(self, kind, name, explicit, count, path) -> tuple:
        """Points of a part: explicit list, or split from the name."""
        if explicit is not None:
            pts = require_list(explicit, path + ("points",), self.loc, what="a list of point names")
            for k, pt in enumerate(pts):
                if not isinstance(pt, str):
                    raise self.fail(f"expected a point name, got {describe_value(pt)}",
                                    path + ("points", k))
        else:
            pts = split_point_names(name)
            if pts is None:
                raise self.fail(f"cannot read point names from '{name}': name the part by its "
                                "points, each a capital letter followed by lowercase letters or "
                                "digits (OA -> O, A; P1P2 -> P1, P2), or give 'points: [...]'",
                                path)
        lo, hi = count
        if not lo <= len(pts) <= hi:
            noun = {"Springs": "a spring joins 2 points", "DampedSprings": "a damped spring "
                    "joins 2 points", "Rods": "a rod joins 2 points"}.get(
                kind, f"a rigid body in {self.mech.dim}-D has at least {lo} points")
            raise self.fail(f"{noun}, but '{name}' names {len(pts)} ({', '.join(pts)}); "
                            + ("give 'points: [...]'" if explicit is None else "fix 'points'"),
                            path)
        return tuple(pts)

    def read_listed(self, kind, name, value, path):
        """Springs, DampedSprings, Rods: list form or mapping form."""
        fields = _FIELDS[kind]
        form = _LIST_FORM[kind]
        if isinstance(value, Mapping):
            check_keys(value, ("points",) + fields, fields, path, self.loc)
            pts = self.part_points(kind, name, value.get("points"), (2, 2), path)
            items = {f: (value[f], path + (f,)) for f in fields}
        else:
            pts = self.part_points(kind, name, None, (2, 2), path)
            if not isinstance(value, list) or len(value) != len(fields):
                got = (f"{len(value)} item{'s' if len(value) != 1 else ''}"
                       if isinstance(value, list) else describe_value(value))
                raise self.fail(f"expected {form} ({len(fields)} items), got {got}", path)
            items = {f: (v, path + (k,)) for k, (f, v) in enumerate(zip(fields, value))}
        part = Part(kind, name, pts, path)
        for f, (v, p) in items.items():
            positive = f == "length"
            part.q[f] = self.quantity(v, p, ((),), f"{f} (a scalar)" if not positive else
                                      "length (a scalar)", nonneg=not positive, positive=positive)
        return part

    def read_springs(self, name, value, path):
        return self.read_listed("Springs", name, value, path)

    def read_dampedsprings(self, name, value, path):
        return self.read_listed("DampedSprings", name, value, path)

    def read_rods(self, name, value, path):
        return self.read_listed("Rods", name, value, path)

    def read_particles(self, name, value, path):
        if isinstance(value, (list, Mapping)) or value is None or isinstance(value, bool):
            raise self.fail(f"expected the particle's mass (a number or expression), got "
                            f"{describe_value(value)}", path)
        if name in self.mech.fixed_points:
            raise self.fail(f"'{name}' is a Fixed point; a particle there would never move",
                            path)
        part = Part("Particles", name, (name,), path)
        part.q["mass"] = self.quantity(value, path, ((),), "mass (a scalar)", positive=True)
        return part

    def read_rigids(self, name, value, path):
        d = self.mech.dim
        value = require_mapping(value, path, self.loc, what="a mapping with Geom and Dyna")
        check_keys(value, ("points", "Geom", "Dyna"), ("Geom", "Dyna"), path, self.loc)
        pts = self.part_points("Rigids", name, value.get("points"), (d, 64), path)
        part = Part("Rigids", name, pts, path)
        gp = path + ("Geom",)
        geom = require_list(value["Geom"], gp, self.loc,
                            what=f"a list of the local coordinates of {', '.join(pts[1:])}")
        if len(geom) != len(pts) - 1:
            raise self.fail(f"expected the local coordinates of {', '.join(pts[1:])} "
                            f"({len(pts) - 1} item{'s' if len(pts) > 2 else ''}; {pts[0]} is the "
                            f"origin), got {len(geom)} item{'s' if len(geom) != 1 else ''}", gp)
        rows = f"{len(pts) - 1} row{'s' if len(pts) > 2 else ''}"
        part.q["Geom"] = self.quantity(geom, gp, ((len(pts) - 1, d),),
                                       f"the local coordinates of {', '.join(pts[1:])} "
                                       f"({rows} of {d} numbers)")
        g = part.q["Geom"].default
        if np.linalg.norm(g[0]) < 1e-12:
            raise self.fail(f"{pts[1]} is at the origin {pts[0]} of the local frame: the first "
                            "two points of a rigid body must differ (they fix its x axis)", gp)
        if d == 3 and np.linalg.norm(np.cross(g[0], g[1])) < 1e-12 * max(1.0, np.linalg.norm(g[1])) ** 2:
            raise self.fail(f"{pts[0]}, {pts[1]} and {pts[2]} are on one line: the first three "
                            "points of a 3-D rigid body must not be collinear (they fix its "
                            "frame)", gp)
        dp = path + ("Dyna",)
        dyna = require_list(value["Dyna"], dp, self.loc, length=3,
                            what="[centroid, mass, moment of inertia]")
        part.q["centroid"] = self.quantity(dyna[0], dp + (0,), ((d,),), f"a {d}-vector centroid")
        part.q["mass"] = self.quantity(dyna[1], dp + (1,), ((),), "mass (a scalar)", positive=True)
        shapes = ((),) if d == 2 else ((3, 3), (3,))
        what = ("the scalar moment of inertia about the centroid" if d == 2 else
                "a 3x3 inertia tensor about the centroid, or its 3 principal moments")
        part.q["inertia"] = self.quantity(dyna[2], dp + (2,), shapes, what)
        local = np.vstack([np.zeros(d), part.q["Geom"].default])
        try:
            RigidBody.from_dyna(local[1:d], [part.q[k].default for k in ("centroid", "mass", "inertia")])
        except InputError as err:
            raise self.fail(f"{err.message} (at the default parameters)", path) from None
        return part

    # -------------------------------------------------------- checks
    def check_fixed_constraints(self):
        """Constraints among Fixed points only must already hold; they are dropped."""
        mech = self.mech
        if not mech.parts:
            return
        if not any(all(n in mech.fixed_points for n in pts) for _, pts in mech._constraint_labels()):
            return  # none to check: the constraints are not computed (abstract labels only)
        env = mech.env({k: f64(v) for k, v in mech.param_info.free.items()})
        X = dict(env.fixed)
        X.update({n: jnp.full((mech.dim,), np.nan) for n in mech.moving})
        for label, pts, val in mech.constraint_list(X, env):
            if all(n in mech.fixed_points for n in pts):
                v = float(val)
                if abs(v) > _FIXED_TOL:
                    part_path = next(pt.path for pt in mech.parts
                                     if label.startswith(f"{pt.kind}.{pt.name}:"))
                    raise self.fail(f"the Fixed points {', '.join(pts)} violate the constraint "
                                    f"'{label}' (residual {v:.3g}); the geometry does not fit "
                                    "their positions", part_path)

    def check_masses(self):
        """Every moving point must carry mass, or M is singular."""
        mech = self.mech
        massive = set()
        for part in mech.parts:
            if part.kind == "Rigids":
                massive.update(part.points)
            elif float(np.max(part.q["mass"].default)) > 0:
                massive.update(part.points)
        for pt in mech.moving:
            if pt not in massive:
                raise self.fail(f"moving point '{pt}' carries no mass (its parts are massless "
                                "at the default parameters), so its motion is undetermined; add "
                                f"a particle '{pt}: mass', give a spring or rod mass, or make it "
                                "Fixed", self.first_use[pt])

    # -------------------------------------------------------- forces
    def read_forces(self, raw):
        path = ("AppliedForces",)
        mech, d = self.mech, self.mech.dim
        if raw is None:
            return
        raw = require_mapping(raw, path, self.loc)
        check_keys(raw, FORCE_KEYS, (), path, self.loc)
        if "Gravity" in raw:
            gp = path + ("Gravity",)
            g = raw["Gravity"]
            if g is False:
                pass
            elif g is None or g is True:
                mech.gravity = self.quantity(self.down(DEFAULT_GRAVITY), gp, ((d,),), "gravity")
            else:
                qty = self.quantity(g, gp, ((), (d,)), f"a magnitude or a {d}-vector")
                if qty.default.shape == ():
                    qty.expr = self.expr(self.down(f"({qty.expr.text})"), gp)
                    qty.default = np.asarray(qty.expr.evaluate(self.defaults_scope), dtype=float)
                mech.gravity = qty
        forces = require_mapping(raw.get("PointForces"), path + ("PointForces",), self.loc,
                                 allow_none=True)
        # Only each force's shape is checked here: in numpy (see read_params).
        values = {k: np.asarray(v, dtype=np.float64) for k, v in mech.param_info.values.items()}
        values["t"] = np.float64(0.0)
        values.update({n: np.ones(d) for n in mech.moving})
        scope = _NumericScope(values, {n: np.ones(d) for n in mech.moving}, what="a parameter")
        for name, value in forces.items():
            p = path + ("PointForces", name)
            if name not in mech.moving:
                raise self.fail(self.unknown_point(name, "PointForces"), p)
            qty = _Quantity(self.expr(value, p), p, what="a parameter")
            try:
                shape = np.shape(qty.expr.evaluate(scope))
            except ExprError as err:
                raise err.located(self.loc.file, format_path(p), self.loc.nearest(p)) from None
            if shape != (d,):
                raise self.fail(f"expected a {d}-vector force, got {_shape_words(shape)}", p)
            mech.point_forces[name] = qty

    def down(self, magnitude) -> list:
        return [0] * (self.mech.dim - 1) + [f"-{magnitude}" if isinstance(magnitude, str)
                                            else -magnitude]

    def unknown_point(self, name, where) -> str:
        mech = self.mech
        if name in mech.fixed_points:
            return f"'{name}' is a Fixed point; {where} applies to moving points ({', '.join(mech.moving)})"
        msg = f"unknown point '{name}'; the moving points are {', '.join(mech.moving)}"
        guess = did_you_mean(name, mech.moving)
        return msg + (f"; did you mean '{guess}'?" if guess else "")

    # -------------------------------------------------------- problem data
    def target(self, name, path, section) -> tuple[str, int | None]:
        """``A`` -> (A, None), ``Ay`` -> (A, 1); refuses Fixed and unknown names."""
        mech, d = self.mech, self.mech.dim
        name = str(name)
        point, axis = name, None
        if name not in mech.moving and name not in mech.fixed_points and len(name) > 1 \
                and name[-1] in AXES[:d]:
            point, axis = name[:-1], AXES.index(name[-1])
        if point in mech.fixed_points:
            raise self.fail(f"'{point}' is a Fixed point (its position is set in PartData.Fixed); "
                            f"{section} applies to the moving points: {', '.join(mech.moving)}",
                            path)
        if point not in mech.moving:
            comps = ", ".join(f"{mech.moving[0]}{a}" for a in AXES[:d])
            msg = (f"unknown point or component '{name}'; the moving points are "
                   f"{', '.join(mech.moving)} (components as {comps})")
            guess = did_you_mean(name, mech.moving)
            raise self.fail(msg + (f"; did you mean '{guess}'?" if guess else ""), path)
        return point, axis

    def value_entries(self, raw, section, *, allow_names=False) -> dict:
        """(point, axis) -> (quantity or None, component index or None, key path)."""
        path = ("ProblemData", section)
        d = self.mech.dim
        if allow_names and isinstance(raw, list):
            raw = {require_str(v, path + (i,), self.loc): None for i, v in enumerate(raw)}
        raw = require_mapping(raw, path, self.loc, allow_none=True,
                              what="a mapping {point: value}, e.g. {A: [1, 0], By: 2}")
        out = {}
        for name, value in raw.items():
            p = path + (name,)
            point, axis = self.target(name, p, f"ProblemData.{section}")
            axes = range(d) if axis is None else [axis]
            qty = None
            if value is not None or not allow_names:
                shape, what = ((d,), f"a {d}-vector (all of {point})") if axis is None else \
                    ((), f"a number (the {AXES[axis]} component of {point})")
                if value is None:
                    raise self.fail(f"expected {what}, got nothing (null)", p)
                qty = self.quantity(value, p, (shape,), what)
            for ax in axes:
                key = (point, ax)
                if key in out:
                    raise self.fail(f"{point}{AXES[ax]} is given twice in ProblemData.{section} "
                                    f"(by '{out[key][2][-1]}' and '{name}'); give it once", p)
                out[key] = (qty, ax if axis is None else None, p)
        return out

    def read_problem(self, raw):
        path = ("ProblemData",)
        mech, d = self.mech, self.mech.dim
        pd = require_mapping(raw, path, self.loc)
        check_keys(pd, PROBLEM_KEYS, ("tend",), path, self.loc)
        self.times = read_times(pd, self.loc)
        driven = self.read_drivers(self.data.get("Drivers"), self.times["t0"])
        positions = self.value_entries(pd.get("positions"), "positions")
        fixed = self.value_entries(pd.get("fixedpositions"), "fixedpositions", allow_names=True)
        velocities = self.value_entries(pd.get("velocities"), "velocities")
        for section, entries in (("fixedpositions", fixed), ("velocities", velocities)):
            for (point, axis), (_, whole, p) in entries.items():
                # ``whole`` is set for the components of an entry naming a whole point.
                driver_entries.refuse_fixed(driven, (point, None if whole is not None else axis),
                                            self.loc, p, section)
        for key, (qty, idx, p) in fixed.items():
            if qty is None:
                if key not in positions:
                    raise self.fail(f"{key[0]}{AXES[key[1]]} is fixed but has no value: give it "
                                    f"in ProblemData.positions or here ({p[-1]}: value)", p)
            elif key in positions:
                raise self.fail(f"{key[0]}{AXES[key[1]]} has a value both here and in "
                                "ProblemData.positions; give it once", p)
            else:
                positions[key] = (qty, idx, p)
        for pt in mech.moving:
            missing = [AXES[a] for a in range(d) if (pt, a) not in positions]
            if missing:
                raise self.fail(
                    f"moving point '{pt}' (first used in {format_path(self.first_use[pt])}) has no "
                    f"initial position for {', '.join(pt + m for m in missing)}: every moving point "
                    f"needs a guess in ProblemData.positions (e.g. {pt}: "
                    f"[{', '.join(['0'] * d)}]), or make it Fixed in PartData.Fixed", path)
        self.positions, self.velocities = positions, velocities
        self.fixed_keys = (self.names_of(fixed, "") + self.names_of(velocities, "'"))

    def read_drivers(self, raw, t0: float) -> dict:
        """``Drivers: {Ax: value}`` -> ``mech.drivers``; returns (point, axis) -> key.

        Raises:
            InputError: a key that is not a component of a moving point (a
                whole point, a Fixed point, an unknown name: the valid
                components are listed), a malformed value.
        """
        mech, d = self.mech, self.mech.dim
        entries = driver_entries.read_entries(raw, self.loc, "Mechanism",
                                              mech.param_info.values, t0)
        driven = {}
        for e in entries:
            comps = ", ".join(f"{pt}{a}" for pt in mech.moving for a in AXES[:d])
            if e.key in mech.moving:
                raise self.fail(f"'{e.key}' is a whole point; a driver prescribes one scalar: name "
                                f"a component ({', '.join(e.key + a for a in AXES[:d])}); valid: "
                                f"{comps}", e.path)
            point, axis = self.target(e.key, e.path, "Drivers")
            mech.drivers[e.key] = (f"{point}[{axis}]",
                                   driver_entries.value_fn(e, mech.param_info.resolve),
                                   e.units or DRIVER_UNITS)
            driven[(point, axis)] = e.key
        return driven

    def names_of(self, entries, prime) -> list[str]:
        """Solver-syntax names covering the given (point, axis) keys."""
        out = []
        for pt in self.mech.moving:
            axes = [a for a in range(self.mech.dim) if (pt, a) in entries]
            if len(axes) == self.mech.dim:
                out.append(pt + prime)
            else:
                out += [f"{pt}[{a}]{prime}" for a in axes]
        return out

    def values_fn(self):
        """The callable ``all params -> initial values`` for :class:`Model`."""
        mech, d = self.mech, self.mech.dim
        positions, velocities = self.positions, self.velocities

        def values(params: Mapping) -> dict:
            pvalues = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
            known = {}  # a point's vector quantity, once for all its axes

            def component(entry):
                qty, idx, _ = entry
                if id(qty) not in known:
                    known[id(qty)] = qty.constant(pvalues)
                val = known[id(qty)]
                return float(val if idx is None else val[idx])

            out = {}
            for pt in mech.moving:
                out[pt] = np.array([component(positions[(pt, a)]) for a in range(d)])
                axes = [a for a in range(d) if (pt, a) in velocities]
                if len(axes) == d:
                    out[pt + "'"] = np.array([component(velocities[(pt, a)]) for a in axes])
                else:
                    for a in axes:
                        out[f"{pt}[{a}]'"] = component(velocities[(pt, a)])
            return out

        return values

    def values_table_fn(self):
        """The callable ``(params, varying, size) -> initial values of size points`` for :class:`Model`.

        :meth:`values_fn` over columns of the varying parameters
        (:meth:`solver.models.model.Model.initial_values_table`): each
        quantity once for all points, by :func:`solver.models.expr.evaluate_table`.
        """
        mech, d = self.mech, self.mech.dim
        positions, velocities = self.positions, self.velocities

        def values_table(params: Mapping, varying, size: int) -> dict:
            known = {}

            def component(entry):
                qty, idx, _ = entry
                if id(qty) not in known:
                    known[id(qty)] = evaluate_table(qty.expr, params, varying, size)
                val = known[id(qty)]
                column = val if idx is None else val[:, idx]
                if column.shape != (size,):
                    raise NotElementwise(qty.path)  # values() words the error
                return column

            out = {}
            for pt in mech.moving:
                out[pt] = np.stack([component(positions[(pt, a)]) for a in range(d)], axis=1)
                axes = [a for a in range(d) if (pt, a) in velocities]
                if len(axes) == d:
                    out[pt + "'"] = np.stack([component(velocities[(pt, a)]) for a in axes], axis=1)
                else:
                    for a in axes:
                        out[f"{pt}[{a}]'"] = component(velocities[(pt, a)])
            return out

        return values_table
