"""Events of a DAE: a function of the solution whose zero crossings matter, and what to do at them.

An event is a scalar function ``g(t, v, p)`` of time, the variables and their
derivatives (``v[name][k]``, as in a residual) and the parameters, that
changes sign when something happens: a pendulum passing the vertical, a
slider reaching a position, a gap closing.  A DAE carries its events
(``DAE(..., events=[...])``); the integrator finds their crossings on every
step (:mod:`solver.integrate.roots`, :mod:`solver.integrate.step_events`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from solver.errors import InputError

__all__ = ["Event", "DIRECTIONS", "DEFAULT_MAX_EVENTS", "check_events"]

#: direction name -> the sign of g's change it keeps (0: both).
DIRECTIONS = {"up": 1, "down": -1, "both": 0}

#: Event records kept per run when the model does not say.
DEFAULT_MAX_EVENTS = 64


@dataclasses.dataclass(frozen=True)
class Event:
    """An event function and what to do when it crosses zero.

    Attributes:
        name: the event's name (outputs are labelled with it).
        fn: ``g(t, v, p) -> scalar``; ``v[name][k]`` is the k-th derivative
            of a variable (k below its differential order, or 0), ``p`` the
            parameters.
        direction: ``"up"`` (g goes from negative to non-negative),
            ``"down"`` (the reverse) or ``"both"``.
        terminal: whether the run ends at the event (status
            ``stopped_by_event``).
        cooldown: after an occurrence, crossings of this event closer than
            this (in time) are ignored, so that it does not fire again at
            the point it just left; None: ``1e-9 * max(1, |t1 - t0|)``.
        reset: for an impact, ``reset(t, v, p) -> {name: [x, x', ...]}``
            (or that and the impulse, a scalar, as a pair): the values (and
            derivatives) that replace the state at the event; the run then
            goes on from them.  None for a plain event.
        kind: ``"event"``; ``"stop"`` for a unilateral constraint's impact;
            ``"switch"`` for a piecewise function's switching surface (the
            step is cut there and the series restarts past it).
        restitution: for a stop, ``restitution(p)``: its coefficient of
            restitution; an impact with none (0, plastic) ends the run with
            status ``zeno`` (the body rests on the stop).
        zeno_time: for an impact: two impacts of it closer than this (in
            time) end the run with status ``zeno``; None:
            ``1e-5 * max(1, |t1|)``.
        record: whether its occurrences are recorded (a switch's are not).
    """

    name: str
    fn: Callable
    direction: str = "both"
    terminal: bool = False
    cooldown: float | None = None
    reset: Callable | None = None
    kind: str = "event"
    restitution: Callable | None = None
    zeno_time: float | None = None
    record: bool = True

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise InputError(f"event {self.name!r}: direction must be one of {', '.join(DIRECTIONS)}; "
                             f"got {self.direction!r}")
        if not callable(self.fn):
            raise InputError(f"event {self.name!r}: the event function must be callable g(t, v, p)")
        if self.cooldown is not None and not (float(self.cooldown) >= 0.0):
            raise InputError(f"event {self.name!r}: cooldown must be a time >= 0; got {self.cooldown!r}")

    @property
    def sign(self) -> int:
        """The direction as a sign (+1 up, -1 down, 0 both)."""
        return DIRECTIONS[self.direction]


def check_events(events) -> tuple:
    """The events as a tuple, checked: Event objects with distinct names.

    Args:
        events: an iterable of :class:`Event` (or None).

    Returns:
        A tuple of :class:`Event`.

    Raises:
        InputError: an entry that is not an Event, or a repeated name.
    """
    out = tuple(events or ())
    seen = set()
    for e in out:
        if not isinstance(e, Event):
            raise InputError(f"events must be solver.Event objects; got {type(e).__name__}")
        if e.name in seen:
            raise InputError(f"two events are named {e.name!r}; give each a name of its own")
        seen.add(e.name)
    return out
