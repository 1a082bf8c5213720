"""The DAE object: a residual function, its variables and parameters, traced once.

A residual is a Python function ``residual(t, v, p)`` returning a list of
equations (scalars or arrays, each = 0).  ``v[name][k]`` is the k-th time
derivative of variable ``name`` (an array of the declared shape) and ``p`` a
dict of parameters.  ``ddt(expr)`` is d/dt of a sub-expression (defined in
:mod:`solver.dae.derivative`, re-exported here).

This module imports :mod:`solver.dae.derivative` and :mod:`solver.dae.structure` (which
never import it back); :mod:`solver.taylor.program` and :mod:`solver.integrate.integrator` build
on it.

The residual is traced once to a jaxpr whose inputs are, in order::

    t, params (sorted by name), x_(name, l) for every variable and order l

which the structural analysis (Σ) and the Taylor engine interpret.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.dae.derivative import ddt, ddt_p
from solver.errors import InputError
from solver.dae.event import DEFAULT_MAX_EVENTS, check_events
from solver.dae.structure import analyse_dae

__all__ = ["DAE", "Variable", "ddt", "ddt_p", "DAEDefinitionError", "parse_variables"]

# Derivatives a residual may request are capped while probing which orders it
# uses; no mechanical model comes near this.
MAX_DERIVATIVE_ORDER = 12


class DAEDefinitionError(ValueError):
    """The residual, its variables or parameters are inconsistent."""


# ---------------------------------------------------------------------- layout
@dataclasses.dataclass(frozen=True)
class Variable:
    """One named unknown function of time.

    Attributes:
        name: its name.
        shape: () for a scalar, (n,) for a vector.
        offset: index of its first component in the flat unknown vector.
    """

    name: str
    shape: tuple
    offset: int

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    def component_names(self) -> list[str]:
        """Flat component labels: ``x`` for scalars, ``q[0]``… for vectors."""
        if self.shape == ():
            return [self.name]
        return [f"{self.name}[{i}]" for i in range(self.size)]


def parse_variables(variables) -> list[Variable]:
    """The :class:`Variable` layout of a ``variables=`` declaration.

    Args:
        variables: a name, a list of names (scalars), or a mapping name ->
            size (``None`` for a scalar, a positive integer for a vector).

    Returns:
        The variables in declaration order, each with its flat offset.

    Raises:
        DAEDefinitionError: a name that is not an identifier or is declared
            twice, a size that is not a positive integer, or no variable.
    """
    if isinstance(variables, str):
        variables = [variables]
    if isinstance(variables, Mapping):
        items = list(variables.items())
    else:
        items = [(v, None) for v in variables]
    out, offset, seen = [], 0, set()
    for name, size in items:
        if not isinstance(name, str) or not name.isidentifier():
            raise DAEDefinitionError(f"variable name {name!r} is not an identifier")
        if name in seen:
            raise DAEDefinitionError(f"variable {name!r} is declared twice")
        seen.add(name)
        if size is None or size == ():
            shape = ()
        elif isinstance(size, (int, np.integer)) and size >= 1:
            shape = (int(size),)
        else:
            raise DAEDefinitionError(
                f"variable {name!r}: size must be a positive integer or None, got {size!r}"
            )
        out.append(Variable(name, shape, offset))
        offset += int(np.prod(shape, dtype=int))
    if not out:
        raise DAEDefinitionError("a DAE needs at least one variable")
    return out


class _Derivatives:
    """``v[name]``: indexable by derivative order."""

    def __init__(self, name: str, get: Callable[[int], Any]):
        self._name, self._get = name, get

    def __getitem__(self, k):
        if not isinstance(k, (int, np.integer)) or k < 0:
            raise DAEDefinitionError(
                f"v[{self._name!r}][{k!r}]: the derivative order must be an integer >= 0"
            )
        if k > MAX_DERIVATIVE_ORDER:
            raise DAEDefinitionError(
                f"v[{self._name!r}][{k}]: derivative orders above {MAX_DERIVATIVE_ORDER} are not supported"
            )
        return self._get(int(k))

    # Arithmetic directly on v[name] is a common slip: say what to write.
    def _misuse(self, *_):
        raise DAEDefinitionError(
            f"use v[{self._name!r}][k] for the k-th derivative of {self._name!r} "
            f"(v[{self._name!r}][0] is its value)"
        )

    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = _misuse
    __truediv__ = __rtruediv__ = __pow__ = __neg__ = __float__ = _misuse


class _VariableView(Mapping):
    def __init__(self, variables, get):
        self._vars = {v.name: v for v in variables}
        self._get = get

    def __getitem__(self, name):
        if name not in self._vars:
            raise DAEDefinitionError(
                f"unknown variable {name!r}; the variables are {sorted(self._vars)}"
            )
        return _Derivatives(name, lambda k: self._get(name, k))

    def __iter__(self):
        return iter(self._vars)

    def __len__(self):
        return len(self._vars)


class _ParamView(Mapping):
    def __init__(self, values: Mapping[str, Any]):
        self._values = values

    def __getitem__(self, name):
        if name not in self._values:
            raise DAEDefinitionError(
                f"unknown parameter {name!r}; the parameters are {sorted(self._values)}"
            )
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)


class _HigherOrder(Exception):
    """The residual read a derivative above the orders of the first trace."""


def _flatten_residual(out) -> list:
    if isinstance(out, (list, tuple)):
        items = list(out)
    else:
        items = [out]
    if not items:
        raise DAEDefinitionError("the residual returned no equations")
    return [jnp.ravel(jnp.asarray(e, dtype=jnp.float64)) for e in items]


# ------------------------------------------------------------------------- DAE
class DAE:
    """A DAE ``f(t, x, x', …) = 0`` defined by a residual function.

    Args:
        residual: ``residual(t, v, p)`` returning a list of equations (each a
            scalar or array expression equal to zero).  ``v[name][k]`` is the
            k-th derivative of a variable, ``p[name]`` a parameter.
        variables: names of scalar variables, or a dict name -> size (None
            for a scalar, an int for a vector).
        params: dict of parameter defaults (numbers or arrays).  Parameters
            are traced values: a batch may vary them (``vmap``).
        name: a title for reports.
        units: optional dict variable or parameter name -> unit string
            (outputs carry it as ``attrs["units"]``; a derivative's is
            ``unit/time_unit^k``, a sensitivity's ``[output]/[parameter]``).
        time_units: the unit of t (default ``"s"``): the ``time``
            coordinate's ``units`` and the plots' axis.
        events: optional :class:`solver.Event` list: functions ``g(t, v, p)``
            whose zero crossings the integrator finds on every step
            (:mod:`solver.dae.event`).
        max_events: how many event occurrences a run records (default
            64); more set the status ``event_overflow``.

    Raises:
        DAEDefinitionError: bad variable declarations, a residual that does
            not return as many equation components as there are unknowns, or
            that refers to unknown names.
        InputError: bad events (a repeated name, a bad direction).
    """

    def __init__(
        self,
        residual: Callable,
        variables,
        params: Mapping[str, Any] | None = None,
        name: str | None = None,
        units: Mapping[str, str] | None = None,
        events=None,
        max_events: int | None = None,
        time_units: str = "s",
    ):
        self.residual = residual
        self.variables: list[Variable] = parse_variables(variables)
        self.var_index = {v.name: v for v in self.variables}
        self.n = sum(v.size for v in self.variables)
        params = dict(params or {})
        for k in params:
            if not isinstance(k, str):
                raise DAEDefinitionError(f"parameter name {k!r} is not a string")
            if k in self.var_index:
                raise DAEDefinitionError(f"{k!r} is both a variable and a parameter")
        self.params = {k: np.asarray(params[k], dtype=np.float64) for k in sorted(params)}
        self.param_names = list(self.params)
        self.name = name or getattr(residual, "__name__", "DAE")
        self.units = dict(units or {})
        self.time_units = str(time_units)
        self.events = check_events(events)
        self.max_events = DEFAULT_MAX_EVENTS if max_events is None else int(max_events)
        if self.max_events < 1:
            raise InputError(f"max_events must be at least 1; got {max_events}")
        self._trace()
        self._structure = None

    # ------------------------------------------------------------ tracing
    # Orders traced as inputs before the residual is known to need them: one
    # trace serves where the residual asks for no higher derivative (every
    # mechanical model); one that does is traced again with its own orders.
    _FIRST_TRACE_ORDERS = 2

    def _trace(self):
        """Trace the residual once into ``jaxpr`` over ``input_keys`` (t, the
        parameters, each variable's derivatives up to its highest order used).

        Raises:
            DAEDefinitionError: a variable that no equation uses, or a residual
                that is not square.
        """
        used: dict[str, int] = {v.name: -1 for v in self.variables}
        guess = {v.name: self._FIRST_TRACE_ORDERS for v in self.variables}
        try:
            closed, keys = self._trace_with_orders(guess, used)
        except _HigherOrder:
            closed = None  # the residual asks for a higher derivative: traced below with its orders
            used = self._probe_orders()
        missing = [n for n, k in used.items() if k < 0]
        if missing:
            raise DAEDefinitionError(
                f"variables {missing} do not appear in any equation; remove them or use them"
            )
        self.orders = used
        self.input_keys = [("t",)] + [("p", k) for k in self.param_names] + [
            ("x", v.name, l) for v in self.variables for l in range(used[v.name] + 1)
        ]
        if closed is None:
            closed, keys = self._trace_with_orders(used, None)
        else:
            # The inputs of orders above the highest used were never read:
            # dropped, the jaxpr takes exactly input_keys.
            wanted = set(self.input_keys)
            keep = [i for i, key in enumerate(keys) if key in wanted]
            jaxpr = closed.jaxpr
            debug = jaxpr.debug_info
            if debug is not None and debug.arg_names is not None:
                debug = debug._replace(arg_names=tuple(debug.arg_names[i] for i in keep))
            closed = closed.replace(jaxpr=jaxpr.replace(invars=[jaxpr.invars[i] for i in keep], debug_info=debug))
        self.jaxpr = closed
        sizes = [int(np.prod(o.aval.shape, dtype=int)) for o in self.jaxpr.jaxpr.outvars]
        if sum(sizes) != self.n:
            raise DAEDefinitionError(
                f"the residual has {sum(sizes)} equation components but there are {self.n} unknowns "
                f"({', '.join(f'{v.name}:{v.size}' for v in self.variables)}); a DAE must be square"
            )
        self.equation_blocks = []  # (first equation index, size) per returned item
        first = 0
        for s in sizes:
            self.equation_blocks.append((first, s))
            first += s

    def _trace_with_orders(self, orders: Mapping[str, int], used: dict | None):
        """The residual's ClosedJaxpr over t, the parameters and each variable's
        derivatives 0..orders[name], and those input keys.  With ``used``, the
        highest order read is recorded per variable, and a read above
        ``orders`` raises :class:`_HigherOrder`."""
        keys = [("t",)] + [("p", k) for k in self.param_names] + [
            ("x", v.name, l) for v in self.variables for l in range(orders[v.name] + 1)
        ]
        first_x = 1 + len(self.param_names)

        def flat_residual(*args):
            t = args[0]
            params = dict(zip(self.param_names, args[1:first_x]))
            xs = {(key[1], key[2]): a for key, a in zip(keys[first_x:], args[first_x:])}

            def get(name, k):
                if used is not None:
                    used[name] = max(used[name], k)
                    if k > orders[name]:
                        raise _HigherOrder
                return xs[(name, k)]

            return _flatten_residual(self.residual(t, _VariableView(self.variables, get), _ParamView(params)))

        avals = [jax.ShapeDtypeStruct((), jnp.float64)]
        avals += [jax.ShapeDtypeStruct(self.params[k].shape, jnp.float64) for k in self.param_names]
        avals += [jax.ShapeDtypeStruct(self.var_index[key[1]].shape, jnp.float64) for key in keys[first_x:]]
        return jax.make_jaxpr(flat_residual)(*avals), keys

    def _probe_orders(self) -> dict[str, int]:
        """Highest derivative order the residual asks for, per variable."""
        used: dict[str, int] = {v.name: -1 for v in self.variables}

        def get(name, k):
            used[name] = max(used[name], k)
            return jnp.zeros(self.var_index[name].shape, dtype=jnp.float64)

        def probe(t, params):
            return _flatten_residual(self.residual(t, _VariableView(self.variables, get), _ParamView(params)))

        jax.eval_shape(probe, jax.ShapeDtypeStruct((), jnp.float64),
                       {k: jax.ShapeDtypeStruct(v.shape, jnp.float64) for k, v in self.params.items()})
        return used

    # ------------------------------------------------------------ helpers
    def component_names(self) -> list[str]:
        """Labels of the flat unknowns, in order."""
        return [c for v in self.variables for c in v.component_names()]

    def equation_names(self) -> list[str]:
        """Labels of the flat equations: ``f0``… per returned item."""
        out = []
        for b, (first, size) in enumerate(self.equation_blocks):
            out += [f"f{b}"] if size == 1 else [f"f{b}[{i}]" for i in range(size)]
        return out

    def param_values(self, overrides: Mapping[str, Any] | None = None) -> dict:
        """Parameter dict with defaults, updated by ``overrides``.

        Raises:
            DAEDefinitionError: an override names no parameter or has the
                wrong shape.
        """
        out = dict(self.params)
        for k, v in (overrides or {}).items():
            if k not in self.params:
                raise DAEDefinitionError(
                    f"unknown parameter {k!r}; the parameters are {self.param_names}"
                )
            a = np.asarray(v, dtype=np.float64)
            if a.shape != self.params[k].shape:
                raise DAEDefinitionError(
                    f"parameter {k!r} has shape {self.params[k].shape}, got {a.shape}"
                )
            out[k] = a
        return out

    def with_params(self, **overrides) -> "DAE":
        """A copy of this DAE with other parameter defaults (same structure)."""
        new = object.__new__(DAE)
        new.__dict__.update(self.__dict__)
        new.params = self.param_values(overrides)
        return new

    @property
    def structure(self):
        """Σ-method structural analysis (:class:`solver.dae.structure.Structure`)."""
        if self._structure is None:
            self._structure = analyse_dae(self)
        return self._structure

    def __repr__(self):
        vs = ", ".join(v.name if v.shape == () else f"{v.name}[{v.size}]" for v in self.variables)
        return f"DAE({self.name!r}: {self.n} unknowns ({vs}), params={self.param_names})"
