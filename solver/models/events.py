"""The ``Events``, ``Stops`` and ``MaxEvents`` keys of model files.

::

    Events:                       # every kind
      upward: {when: x, direction: up}          # g = x; up, down or both (default)
      top: {when: y + 0.5, direction: up, terminal: true}
    Stops:                        # Lagrangian and Mechanism kinds
      floor: {gap: y, restitution: e}           # g(q) >= 0; e in [0, 1]
    MaxEvents: 200                # event records a run keeps (default 64)

An event's ``when`` is an expression of the model's unknowns (a DAE's
variables and the derivatives its state holds; a Lagrangian's coordinates
and velocities), ``t`` and the parameters; the integrator finds where it
crosses zero on every step.  A stop's ``gap`` is an expression of the
positions (and ``t``) that must stay >= 0; where it closes, the velocities
jump by Newton's impact law with the stop's ``restitution`` (an expression
of the parameters, so a sweep may vary it).  Optional keys: ``cooldown``
(events) and ``zeno_time`` (stops), in the model's time unit.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.dae.event import DEFAULT_MAX_EVENTS, DIRECTIONS, Event
from solver.integrate.step_events import check_taylor_arithmetic
from solver.errors import InputError
from solver.mechanics.stops import Stop
from solver.models.expr import ConstantScope, ExprError, parse
from solver.models.yamlio import Locator, check_keys, format_path, require_bool, require_int, require_mapping, \
    require_number, require_str

__all__ = ["EVENT_KEYS", "STOP_KEYS", "read_events", "read_stops", "read_max_events", "shared_scope", "StopRules"]

EVENT_KEYS = ("when", "direction", "terminal", "cooldown")
STOP_KEYS = ("gap", "restitution", "zeno_time")


def _expr(raw, loc: Locator, path: tuple):
    return parse(raw, file=loc.file, path=format_path(path), line=loc.line(path))


def _entries(data: Any, key: str, loc: Locator, what: str):
    raw = require_mapping(data.get(key), (key,), loc, allow_none=True, what=what)
    for name, spec in raw.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise loc.error(f"{key} names must be identifiers (letters, digits, _); got {name!r}", (key, name))
        yield name, require_mapping(spec, (key, name), loc, what=f"a mapping with keys {what}")


def read_events(data: Mapping, loc: Locator, scope_of: Callable, probe: Callable) -> list:
    """``Events`` -> a list of :class:`solver.Event`.

    Args:
        data: the model file's data.
        loc: its locator.
        scope_of: ``scope_of(t, v, p)`` -> the expression scope of an event
            (``v[name][k]``: the unknowns and their derivatives).
        probe: ``probe(fn)`` evaluates ``fn(t, v, p)`` on placeholder values
            (abstractly) and raises what it raises.

    Returns:
        The events, in the file's order.

    Raises:
        InputError: a bad entry, located (``Events.NAME.KEY``).
    """
    out = []
    for name, spec in _entries(data, "Events", loc, ", ".join(EVENT_KEYS)):
        base = ("Events", name)
        check_keys(spec, EVENT_KEYS, ("when",), base, loc)
        when = _expr(spec["when"], loc, base + ("when",))
        direction = require_str(spec.get("direction", "both"), base + ("direction",), loc,
                                choices=tuple(DIRECTIONS))
        terminal = require_bool(spec.get("terminal", False), base + ("terminal",), loc)
        cooldown = None
        if spec.get("cooldown") is not None:
            cooldown = require_number(spec["cooldown"], base + ("cooldown",), loc, positive=True)

        def g(t, v, p, when=when):
            return jnp.reshape(jnp.asarray(when.evaluate(scope_of(t, v, p)), jnp.float64), ())

        _check(probe, g, loc, base + ("when",), "an event function")
        out.append(Event(name, g, direction=direction, terminal=terminal, cooldown=cooldown))
    return out


def read_stops(data: Mapping, loc: Locator, kind: str, position_scope: Callable, param_scope: Callable,
               probe_q: Callable, params: Mapping, taken: set) -> tuple[list, "StopRules | None"]:
    """``Stops`` -> (a list of :class:`~solver.mechanics.stops.Stop`, their value rules).

    Args:
        data: the model file's data.
        loc: its locator.
        kind: the model's kind (a ``DAE`` kind has no stops).
        position_scope: ``position_scope(t, q, p)`` -> the scope of a gap
            (positions and t only).
        param_scope: ``param_scope(p)`` -> a scope of the parameters (for
            the restitution, traced inside the integrator).
        probe_q: ``probe_q(fn)`` evaluates ``fn(t, q, p)`` on placeholder
            positions and raises what it raises.
        params: every parameter's default value (the restitution is checked
            at them).
        taken: names already used by events (a stop may not reuse one).

    Returns:
        (stops, rules): ``rules(values)`` checks every restitution at other
        parameter values (``Model.check_values``); None without stops.

    Raises:
        InputError: a bad entry, located (``Stops.NAME.KEY``).
    """
    if data.get("Stops") and kind == "DAE":
        raise loc.error("Kind: DAE has no Stops: an impact needs the mass matrix, which the Lagrangian and "
                        "Mechanism kinds build; write the model as Kind: Lagrangian, or use Events for "
                        "crossings without impacts", ("Stops",))
    stops, checks = [], []
    for name, spec in _entries(data, "Stops", loc, ", ".join(STOP_KEYS)):
        base = ("Stops", name)
        if name in taken:
            raise loc.error(f"{name!r} names an event and a stop; give the stop a name of its own", base)
        check_keys(spec, STOP_KEYS, ("gap", "restitution"), base, loc)
        gap = _expr(spec["gap"], loc, base + ("gap",))
        restitution = _expr(spec["restitution"], loc, base + ("restitution",))
        zeno_time = None
        if spec.get("zeno_time") is not None:
            zeno_time = require_number(spec["zeno_time"], base + ("zeno_time",), loc, positive=True)

        def gap_fn(t, q, p, gap=gap):
            return jnp.reshape(jnp.asarray(gap.evaluate(position_scope(t, q, p)), jnp.float64), ())

        def e_fn(p, restitution=restitution):
            return jnp.reshape(jnp.asarray(restitution.evaluate(param_scope(p)), jnp.float64), ())

        _check(probe_q, gap_fn, loc, base + ("gap",), "a gap")
        checks.append((restitution, base + ("restitution",)))
        stops.append(Stop(name, gap_fn, restitution=e_fn, zeno_time=zeno_time))
    rules = StopRules(checks, loc) if checks else None
    if rules is not None:
        rules(params)
    return stops, rules


def switch_events(expressions, loc: Locator, scope_of: Callable, probe: Callable) -> list:
    """The implicit events of the piecewise functions in a model's expressions.

    ``abs``, ``sign``, ``step``, ``min``, ``max`` and ``where`` switch where
    an argument (or a - b) crosses zero; a Taylor series is not valid across
    that, so each switching function becomes an event (kind ``switch``, not
    recorded) at which the integrator cuts the step and restarts the series
    on the new branch.  A switching function of the parameters alone never
    crosses and is left out; a vector one gives an event per component.

    Args:
        expressions: the parsed expressions the residual evaluates.
        loc: the model file's locator.
        scope_of: ``scope_of(t, v, p)`` -> the scope they are evaluated in.
        probe: as for :func:`read_events`.

    Returns:
        A list of :class:`solver.Event`.

    Raises:
        InputError: a switching function that reads what the state does not
            hold (a DAE's highest derivative), located at its expression.
    """
    from solver.models.expr import Expr, Index

    out, seen = [], set()
    for expr in expressions:
        for sw in expr.switches():
            if sw.text in seen:
                continue
            seen.add(sw.text)

            def g(t, v, p, sw=sw):
                return jnp.asarray(sw.evaluate(scope_of(t, v, p)), jnp.float64)

            try:
                shape = tuple(probe(g).shape)
            except ExprError as err:
                raise loc.error(str(getattr(err, "message", err)), _path_tuple(sw.path)) from None
            except (IndexError, KeyError) as err:
                raise loc.error(f"the piecewise function's switch {sw.text} = 0 reads a value the solution "
                                f"does not carry ({err}); a switch may use the unknowns and the derivatives the "
                                f"state holds, not the highest derivative", _path_tuple(sw.path)) from None
            parts = [sw] if shape == () else [
                Expr(f"({sw.text})[{i}]", Index(sw.root, i), sw.file, sw.path, sw.line) for i in range(int(np.prod(shape)))]
            for part in parts:
                names = part.names()
                if "t" not in names and not (names - set(_params_of(probe))):
                    continue  # parameters only: constant
                out.append(Event(f"switch{len(out)}", lambda t, v, p, part=part: jnp.reshape(
                    jnp.asarray(part.evaluate(scope_of(t, v, p)), jnp.float64), ()), direction="both",
                    kind="switch", record=False))
    return out


def _path_tuple(path):
    return tuple(str(path).split(".")) if path else ()


def _params_of(probe) -> tuple:
    return tuple(getattr(probe, "params", ()))


def read_max_events(data: Mapping, loc: Locator) -> int:
    """``MaxEvents`` (default :data:`solver.dae.event.DEFAULT_MAX_EVENTS`)."""
    if data.get("MaxEvents") is None:
        return DEFAULT_MAX_EVENTS
    return require_int(data["MaxEvents"], ("MaxEvents",), loc, minimum=1)


def _check(probe, fn, loc: Locator, path: tuple, what: str) -> None:
    try:
        shape = probe(fn).shape
    except ExprError as err:
        raise loc.error(str(getattr(err, "message", err)), path) from None
    except InputError as err:
        raise loc.error(err.message, path) from None
    except (IndexError, KeyError) as err:
        raise loc.error(f"{what} reads a value the solution does not carry ({err}): an event may use the "
                        f"unknowns and the derivatives the state holds (velocities of a mechanism)",
                        path) from None
    if tuple(shape) != ():
        raise loc.error(f"{what} must be a scalar; this one has shape {tuple(shape)}", path)


class StopRules:
    """Every stop's restitution in [0, 1], at any parameter values (``Model.check_values``).

    Attributes:
        params: the parameters the restitutions depend on.
    """

    def __init__(self, checks, loc: Locator):
        self.checks, self.loc = list(checks), loc
        self.params = sorted(set().union(*(e.names() for e, _ in self.checks)))

    def __call__(self, values: Mapping) -> None:
        from solver.models.model import ValueRangeError

        scope = ConstantScope(values)
        for expr, path in self.checks:
            try:
                with np.errstate(all="ignore"):
                    e = np.asarray(expr.evaluate(scope), dtype=float)
            except ExprError as err:
                raise self.loc.error(f"the restitution may use parameters only: "
                                     f"{getattr(err, 'message', err)}", path) from None
            if e.shape != () or not 0.0 <= float(e) <= 1.0:
                names = [n for n in self.params if n in expr.names() and n in values]
                at = ", ".join(f"{n} = {float(np.asarray(values[n])):g}" for n in names)
                err = self.loc.error(f"restitution must be a number in [0, 1] (0 plastic, 1 elastic); "
                                     f"got {e if e.shape else float(e):g}" + (f" at {at}" if at else ""), path)
                raise ValueRangeError(err.message, err.file, err.path, err.line, names)


def probe_events(dae_variables, orders: Mapping[str, int], params: Mapping) -> Callable:
    """A ``probe(fn)`` for :func:`read_events`: ``fn`` on zeros, abstractly.

    Args:
        dae_variables: name -> shape of the unknowns.
        orders: name -> how many derivatives (value included) the state holds.
        params: parameter values.
    """
    def probe(fn):
        # device_put of numpy arrays: jnp.zeros would compile a fill program on a warm start's path.
        v = {n: [jax.device_put(np.zeros(shape)) for _ in range(max(1, orders[n]))]
             for n, shape in dae_variables.items()}
        p = {k: jax.device_put(np.asarray(val, np.float64)) for k, val in params.items()}
        return check_taylor_arithmetic(lambda t: fn(t, v, p), str(getattr(fn, "__name__", "the function")))

    probe.params = tuple(params)
    return probe


def shared_scope(scope_of: Callable) -> Callable:
    """``scope_of`` that gives every event evaluated on the same values one scope.

    The integrator evaluates all events of a step on the same ``(t, v, p)``
    objects (their values, and their Taylor series traced once together).  A
    scope computes each ``Let`` definition once and keeps it, so in a shared
    scope the definitions the events have in common (the car's rotation matrix
    and wheel centres, read by four tyre switches and two events) are
    evaluated once instead of once per event: the step program's size, and
    its compile and tracing time, shrink with them.

    Args:
        scope_of: ``scope_of(t, v, p)`` -> an expression scope.

    Returns:
        The same function, returning the last scope again while it is called
        with the very same three objects.
    """
    last = [None]  # (t, v, p, scope) of the last call, replaced whole (threads may trace at once)

    def shared(t, v, p):
        seen = last[0]
        if seen is not None and seen[0] is t and seen[1] is v and seen[2] is p:
            return seen[3]
        scope = scope_of(t, v, p)
        # The arguments are kept with the scope: identity is only meaningful while they live.
        last[0] = (t, v, p, scope)
        return scope

    return shared


def attach_events(dae, data: Mapping, loc: Locator, kind: str, *, scope_of: Callable,
                  position_scope: Callable | None = None, param_scope: Callable | None = None,
                  params: Mapping, expressions=()) -> "StopRules | None":
    """Read ``Events``, ``Stops`` and ``MaxEvents`` and give them to a built DAE.

    Args:
        dae: the model's DAE (its structure analysed: the derivative orders
            its state holds decide what an event may read).
        data, loc: the model file's data and locator.
        kind: ``DAE``, ``Lagrangian`` or ``Mechanism``.
        scope_of: ``scope_of(t, v, p)`` -> an event's expression scope.
        position_scope: ``position_scope(t, q, p)`` -> a gap's scope (the
            mechanical kinds).
        param_scope: ``param_scope(p)`` -> a scope of the parameters.
        params: every parameter's default value (free and derived: the
            restitutions are checked at them).
        expressions: the expressions the residual evaluates, whose
            piecewise functions become switch events (:func:`switch_events`).

    Returns:
        The stops' value rules, or None.

    Raises:
        InputError: a bad entry, located.
    """
    from solver.mechanics.stops import stop_events

    scope_of = shared_scope(scope_of)
    d = dae.structure.d
    orders = {v.name: max(1, int(np.max(d[v.offset: v.offset + v.size], initial=0))) for v in dae.variables}
    shapes = {v.name: v.shape for v in dae.variables}
    probe = probe_events(shapes, orders, dae.params)
    events = read_events(data, loc, scope_of, probe)
    stops, rules = [], None
    if data.get("Stops") is not None:
        def probe_q(fn):
            coords = {c.name: c.shape for c in dae.coords}
            p = {k: jnp.asarray(val, jnp.float64) for k, val in dae.params.items()}
            return jax.eval_shape(lambda: fn(jnp.zeros(()), {n: jnp.zeros(s) for n, s in coords.items()}, p))

        stops, rules = read_stops(data, loc, kind, position_scope, param_scope, probe_q, params,
                                  {e.name for e in events})
    switches = switch_events(expressions, loc, scope_of, probe)
    dae.events = tuple(events) + tuple(stop_events(dae, stops)) + tuple(switches)
    dae.max_events = read_max_events(data, loc)
    return rules
