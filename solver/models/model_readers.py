"""Readers of the keys every model kind shares: overrides, ProblemData times, SolverParams, Animation.

Each reader checks its key and says, with file, key path and line, what is
wrong; the kinds (:mod:`solver.models.dae_kind`, ...) call them while
building a :class:`solver.models.model.Model`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from solver.errors import InputError
from solver.models.expr import parse
from solver.models.yamlio import (Locator, check_keys, format_path, require_bool, require_int, require_list,
                                  require_mapping, require_number, require_str)

__all__ = ["DEFAULT_SAMPLES", "DEFAULT_TOL", "ENGINE_MODES", "INIT_METHODS", "MAX_STEPS_LIMIT", "TIME_KEYS",
           "deep_merge", "read_animation", "read_solver_params", "read_times", "relocate"]


DEFAULT_SAMPLES = 201
DEFAULT_TOL = 1e-10
TIME_KEYS = ("t0", "tend", "samples", "dt")
INIT_METHODS = ("auto", "newton", "ipopt")
ENGINE_MODES = ("auto", "unrolled", "compact", "looped")


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
        (compile with LLVM's optimisation: True or False where the file says,
        None where it does not, which :meth:`Model.solve` takes as True and
        ``mechsweep simulate`` as its default build), init.

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
    optimize = None if integ.get("optimize") is None else require_bool(integ["optimize"], base + ("optimize",), loc)
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
