"""Lagrangian facility: L, C, R, Q -> an Euler–Lagrange DAE, built by JAX AD.

From a Lagrangian ``L(t, q, q', p)``, holonomic (possibly rheonomic)
constraints ``C(t, q, p) = 0``, a Rayleigh dissipation ``R(t, q, q', p)`` and
generalised forces ``Q(t, q, q', p)`` this module builds the DAE (docs/method.md §7)

    d/dt ∂L/∂q' − ∂L/∂q + ∂R/∂q' + Gᵀλ − Q = 0      (one item per coordinate)
    C(t, q) = 0                                     (one item, all constraints)

with ``G = ∂C/∂q``.  Nothing is differentiated by hand or symbolically: the
residual is a composition of ``jax.grad`` / ``jax.jvp`` / ``jax.vjp`` calls that
is traced (once, by :class:`solver.dae.problem.DAE`) to a jaxpr of ordinary primitives.
``d/dt ∂L/∂q'`` is the ``jvp`` of ``∂L/∂q'(t, q, q')`` along ``(1, q', q'')``.

Sign conventions (used by every inspection method below):

* ``M = ∂²L/∂q'²`` (positive definite for a physical kinetic energy).
* ``bias`` is the Euler–Lagrange expression with ``q'' = 0`` and ``λ = 0``::

      bias = ∂²L/∂q'∂q · q' + ∂²L/∂q'∂t − ∂L/∂q + ∂R/∂q' − Q

  so the equations of motion read ``M q'' + bias + Gᵀλ = 0``.
* The multipliers enter with a plus sign, so the generalised force the
  constraints exert on the system is ``−Gᵀλ`` (:meth:`constraint_forces`).
  For the pendulum ``C = x² + y² − ℓ²`` at rest below the pivot, ``λ > 0``.
* ``energy = q'·∂L/∂q' − L`` (the Jacobi integral; equals T + V for a natural
  Lagrangian ``L = T − V`` with T quadratic in q').  It is conserved when L
  and C do not depend on t and R = Q = 0.
* Drivers (inverse dynamics): each driver ``k`` prescribes a scalar
  ``φ_k(q) = f_k(t)`` and becomes one more constraint row
  ``φ_k(q) − f_k(t) = 0``, after the model's own constraints, with its own
  multiplier λ_k.  Its generalised force along φ_k (the torque or force the
  drive must apply) is ``−λ_k``: the constraint force is ``−λ_k ∇φ_k``,
  whose virtual work is ``−λ_k δφ_k`` (:attr:`LagrangianDAE.drivers`).  The
  energy does not include the drive, so ``dE/dt = −λ_k f_k'(t)`` (the
  drive's power) when nothing else acts.

Point forces and drivers are read by :mod:`solver.mechanics.lagrangian_inputs`;
the block structure of M and the KKT solve live in
:mod:`solver.mechanics.lagrangian_blocks`.  Their public names are importable
from here too.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.dae.problem import DAE, DAEDefinitionError, parse_variables
from solver.errors import InputError
from solver.mechanics.lagrangian_blocks import LagrangianBlocks, solve_kkt
from solver.mechanics.lagrangian_inputs import (Driver, combine_forces, f64, flatten_items, read_drivers,
                                                point_force)
from solver.mechanics.stops import stop_events
from solver.numerics.kkt import MassBlocks

__all__ = ["lagrangian", "LagrangianDAE", "Driver", "MassBlocks", "point_force", "solve_kkt"]


# ---------------------------------------------------------------- the DAE
class LagrangianDAE(LagrangianBlocks, DAE):
    """A :class:`solver.dae.problem.DAE` built from a Lagrangian; see :func:`lagrangian`.

    Variables: the coordinates (in declaration order), then the multiplier
    vector (size n_c) when there are constraints.  Residual items: one
    Euler–Lagrange item per coordinate (same shape as the coordinate), then
    one item holding all constraints.

    Attributes:
        coords: list of coordinate :class:`solver.dae.problem.Variable` (flat layout
            of q, q', q'' used by all inspection methods).
        n_q: number of flat coordinates.
        n_c: number of constraints, drivers included (0: an ODE, no
            multiplier variable).
        drivers: tuple of :class:`Driver`, in the order given; driver k's
            row is ``drivers[k].index`` (after the model's own constraints)
            and its generalised force is ``−λ[drivers[k].index]``.
        multiplier: name of the multiplier variable (None if n_c = 0).
        el_items: indices of the residual items holding Euler–Lagrange rows.
        constraint_item: index of the constraint item (None if n_c = 0).

    Inspection methods take ``q``, ``qd`` (and ``qdd``) as dicts name ->
    array or as flat arrays of length n_q, and ``params`` as overrides of the
    defaults; they are pure ``jax.numpy`` (jit/vmap-safe when given arrays).
    """

    def __init__(self, L, coords, constraints=None, dissipation=None, forces=None,
                 params=None, name=None, multiplier="lam", mass_blocks=None, units=None,
                 drivers=None, events=None, stops=None, max_events=None):
        if not callable(L):
            raise InputError("L must be a callable L(t, q, qd, p) returning a scalar", path="L")
        for arg, f in (("constraints", constraints), ("dissipation", dissipation)):
            if f is not None and not callable(f):
                raise InputError(f"{arg} must be a callable or None", path=arg)
        try:
            self.coords = parse_variables(coords)
        except DAEDefinitionError as e:
            raise InputError(f"coordinates: {e}", path="coords") from None
        self.n_q = sum(c.size for c in self.coords)
        self._L = L
        self._C = constraints
        self._R = dissipation
        self._Q = combine_forces(forces)
        self._declared_blocks = mass_blocks
        self._mass_blocks = None
        names = [c.name for c in self.coords]
        if not isinstance(multiplier, str) or not multiplier.isidentifier():
            raise InputError(f"multiplier name must be an identifier, got {multiplier!r}",
                             path="multiplier")
        param_defaults = {k: np.asarray(v, dtype=np.float64) for k, v in dict(params or {}).items()}
        self.drivers = ()
        n_own = self._count_constraints(param_defaults)
        # Driver rows follow the model's own constraints in the one
        # constraint vector, so the KKT structure stays [[M, Gᵀ], [G, 0]].
        self.drivers = read_drivers(drivers, self.coords, n_own, dict(units or {}))
        self._check_drivers(param_defaults, names)
        self.n_c = n_own + len(self.drivers)
        if self.n_c and multiplier in names:
            raise InputError(
                f"the multiplier name {multiplier!r} is also a coordinate; pass "
                f"multiplier='...' with a name not in {names}", path="multiplier")
        self.multiplier = multiplier if self.n_c else None
        self.el_items = list(range(len(self.coords)))
        self.constraint_item = len(self.coords) if self.n_c else None

        variables = {c.name: (None if c.shape == () else c.size) for c in self.coords}
        if self.n_c:
            variables[multiplier] = self.n_c
        try:
            super().__init__(self._residual, variables, params=param_defaults,
                             name=name or getattr(L, "__name__", "Lagrangian"), units=units,
                             events=list(events or ()) + stop_events(self, stops), max_events=max_events)
        except DAEDefinitionError as e:
            raise InputError(str(e)) from None

    def equation_names(self) -> list[str]:
        """Labels of the flat equations: ``f0``… and ``drive_{name}`` for a driver's row.

        A driver's row is named after it so that messages about initial
        values (the hidden constraints ``drive_theta``, ``drive_theta'``)
        and ``mechsweep check`` say which drive is at fault.
        """
        names = super().equation_names()
        if self.drivers:
            first = self.equation_blocks[self.constraint_item][0]
            for d in self.drivers:
                names[first + d.index] = f"drive_{d.name}"
        return names

    # ----------------------------------------------------------- layout helpers
    def _zeros_q(self):
        return {c.name: jnp.zeros(c.shape, dtype=jnp.float64) for c in self.coords}

    def _as_dict(self, x, what="q") -> dict:
        """Coordinate dict from a dict or a flat array of length n_q."""
        if isinstance(x, Mapping):
            missing = [c.name for c in self.coords if c.name not in x]
            if missing:
                raise InputError(f"{what}: missing coordinates {missing}; the coordinates are "
                                 f"{[c.name for c in self.coords]}")
            return {c.name: jnp.reshape(f64(x[c.name]), c.shape) for c in self.coords}
        flat = f64(x)
        if flat.shape != (self.n_q,):
            raise InputError(f"{what}: expected a dict of coordinates or a flat array of "
                             f"length {self.n_q}, got shape {flat.shape}")
        return self._unflatten(flat)

    def _unflatten(self, flat) -> dict:
        return {c.name: jnp.reshape(flat[c.offset:c.offset + c.size], c.shape) for c in self.coords}

    def _flatten(self, d) -> jnp.ndarray:
        return jnp.concatenate([jnp.ravel(f64(d[c.name])) for c in self.coords])

    def _params(self, params) -> dict:
        out = {k: f64(v) for k, v in self.params.items()}
        for k, v in (params or {}).items():
            if k not in out:
                raise InputError(f"unknown parameter {k!r}; the parameters are {sorted(out)}")
            out[k] = f64(v)
        return out

    def _check_drivers(self, param_defaults, names) -> None:
        """Each driver's quantity and value are scalars; its outputs' names are free."""
        shapes = {c.name: jax.ShapeDtypeStruct(c.shape, jnp.float64) for c in self.coords}
        pshapes = {k: jax.ShapeDtypeStruct(v.shape, jnp.float64) for k, v in param_defaults.items()}
        t = jax.ShapeDtypeStruct((), jnp.float64)
        for d in self.drivers:
            where = f"drivers[{d.name!r}]"
            if f"torque_{d.name}" in names:  # solver.results.solution's name for its force
                raise InputError(f"{where}: its output torque_{d.name} would hide the coordinate of "
                                 "that name; rename the driver", path="drivers")
            for what, fn, args in (("quantity", d.quantity_fn, (t, shapes, pshapes)),
                                   ("value", d.value_fn, (t, pshapes))):
                out = jax.eval_shape(lambda *a: f64(fn(*a)), *args)
                if int(np.prod(out.shape)) != 1:
                    raise InputError(f"{where}: the {what} must be a scalar, got shape {out.shape}",
                                     path="drivers")

    def _count_constraints(self, param_defaults) -> int:
        if self._C is None:
            return 0
        shapes = {c.name: jax.ShapeDtypeStruct(c.shape, jnp.float64) for c in self.coords}
        pshapes = {k: jax.ShapeDtypeStruct(v.shape, jnp.float64) for k, v in param_defaults.items()}
        out = jax.eval_shape(lambda t, q, p: flatten_items(self._C(t, q, p)),
                             jax.ShapeDtypeStruct((), jnp.float64), shapes, pshapes)
        return int(out.shape[0])

    # ----------------------------------------------------------- pieces (pure)
    def lagrangian_value(self, t, q, qd, p):
        """L(t, q, q', p) as a float64 scalar (q, qd dicts; p full param dict).

        Raises:
            InputError: L does not return a scalar.
        """
        val = f64(self._L(t, q, qd, p))
        if val.shape != ():
            raise InputError(f"L must return a scalar, got an array of shape {val.shape}", path="L")
        return val

    def _momenta(self, t, q, qd, p) -> dict:
        return jax.grad(lambda qd_: self.lagrangian_value(t, q, qd_, p))(qd)

    def _constraints_flat(self, t, q, p):
        if not self.drivers:
            return flatten_items(self._C(t, q, p)) if self._C is not None else jnp.zeros((0,))
        own = self._C(t, q, p) if self._C is not None else []
        items = list(own) if isinstance(own, (list, tuple)) else [own]
        return flatten_items(items + [d.residual(t, q, p) for d in self.drivers])

    def _forces(self, t, q, qd, p) -> dict:
        out = {c.name: jnp.zeros(c.shape, dtype=jnp.float64) for c in self.coords}
        if self._Q is None:
            return out
        given = self._Q(t, q, qd, p) or {}
        if not isinstance(given, Mapping):
            raise InputError("forces must return a dict {coordinate name: generalised force}",
                             path="forces")
        for k, val in given.items():
            if k not in out:
                raise InputError(f"forces: unknown coordinate {k!r}; the coordinates are "
                                 f"{list(out)}", path="forces")
            val = f64(val)
            try:
                out[k] = out[k] + jnp.broadcast_to(val, out[k].shape)
            except ValueError:
                raise InputError(f"forces[{k!r}] has shape {val.shape}, the coordinate has "
                                 f"shape {out[k].shape}", path="forces") from None
        return out

    def _dissipation_grad(self, t, q, qd, p) -> dict:
        if self._R is None:
            return {c.name: jnp.zeros(c.shape, dtype=jnp.float64) for c in self.coords}

        def R(qd_):
            r = f64(self._R(t, q, qd_, p))
            if r.shape != ():
                raise InputError(f"dissipation must return a scalar, got shape {r.shape}",
                                 path="dissipation")
            return r

        return jax.grad(R)(qd)

    def _gt_lambda(self, t, q, lam, p) -> dict:
        _, pullback = jax.vjp(lambda q_: self._constraints_flat(t, q_, p), q)
        return pullback(f64(lam))[0]

    def _euler_lagrange(self, t, q, qd, qdd, lam, p) -> dict:
        """EL rows per coordinate: d/dt ∂L/∂q' − ∂L/∂q + ∂R/∂q' + Gᵀλ − Q."""
        t = f64(t)
        _, dpdt = jax.jvp(lambda t_, q_, qd_: self._momenta(t_, q_, qd_, p),
                          (t, q, qd), (jnp.ones_like(t), qd, qdd))
        dLdq = jax.grad(lambda q_: self.lagrangian_value(t, q_, qd, p))(q)
        # Absent terms are left out rather than added as zeros, which keeps
        # the traced jaxpr (read by the structural analysis) lean.
        dRdqd = self._dissipation_grad(t, q, qd, p) if self._R is not None else None
        Q = self._forces(t, q, qd, p) if self._Q is not None else None
        gtl = self._gt_lambda(t, q, lam, p) if (self.n_c and lam is not None) else None
        out = {}
        for c in self.coords:
            e = dpdt[c.name] - dLdq[c.name]
            if dRdqd is not None:
                e = e + dRdqd[c.name]
            if Q is not None:
                e = e - Q[c.name]
            if gtl is not None:
                e = e + gtl[c.name]
            out[c.name] = e
        return out

    def _residual(self, t, v, p):
        q = {c.name: v[c.name][0] for c in self.coords}
        qd = {c.name: v[c.name][1] for c in self.coords}
        qdd = {c.name: v[c.name][2] for c in self.coords}
        lam = v[self.multiplier][0] if self.n_c else None
        el = self._euler_lagrange(t, q, qd, qdd, lam, p)
        items = [el[c.name] for c in self.coords]
        if self.n_c:
            items.append(self._constraints_flat(t, q, p))
        return items

    # ----------------------------------------------------------- inspection
    # Public methods convert their inputs, then call a kernel jitted once per
    # instance: op-by-op evaluation of these AD compositions is slow.  The
    # kernels are pure and may also be called inside a caller's jit/vmap.
    def _jit(self, key, fn):
        cache = self.__dict__.setdefault("_kernels", {})
        if key not in cache:
            cache[key] = jax.jit(fn)
        return cache[key]

    def _k_residual(self, t, q, qd, qdd, lam, p):
        el = self._euler_lagrange(t, q, qd, qdd, lam, p)
        items = [el[c.name] for c in self.coords]
        if self.n_c:
            items.append(self._constraints_flat(t, q, p))
        return items

    def _k_mass(self, t, q, qd, p):
        mom = lambda x: self._flatten(self._momenta(t, q, self._unflatten(x), p))
        return jax.jacfwd(mom)(self._flatten(qd))

    def _k_bias(self, t, q, qd, p):
        return self._flatten(self._euler_lagrange(t, q, qd, self._zeros_q(), None, p))

    def _k_cjac(self, t, q, p):
        f = lambda x: self._constraints_flat(t, self._unflatten(x), p)
        return jax.jacfwd(f)(self._flatten(q))

    def _k_cforces(self, t, q, lam, p):
        return {k: -val for k, val in self._gt_lambda(t, q, lam, p).items()}

    def residual_at(self, t, q, qd, qdd, lam=None, params=None) -> list:
        """The residual items at a point, as the DAE sees them.

        Args:
            t: time. q, qd, qdd: coordinates and their first two derivatives
                (dicts or flat arrays). lam: multipliers (n_c,) or None
                (zeros). params: parameter overrides.

        Returns:
            List of arrays: one EL item per coordinate, then the constraints.
        """
        lam = f64(jnp.zeros((self.n_c,)) if lam is None else lam) if self.n_c else None
        return self._jit("residual", self._k_residual)(
            f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._as_dict(qdd, "qdd"),
            lam, self._params(params))

    def mass_matrix(self, t, q, qd, params=None) -> jnp.ndarray:
        """Dense ``M = ∂²L/∂q'²`` (n_q × n_q, flat coordinate order).

        For large models use :meth:`mass_matrix_blocks` (O(n)).
        """
        return self._jit("mass", self._k_mass)(
            f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def momenta(self, t, q, qd, params=None) -> dict:
        """Generalised momenta ``∂L/∂q'`` per coordinate."""
        return self._jit("momenta", self._momenta)(
            f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def bias(self, t, q, qd, params=None) -> jnp.ndarray:
        """Flat EL expression with q'' = 0 and λ = 0: ``M q'' + bias + Gᵀλ = 0``."""
        return self._jit("bias", self._k_bias)(
            f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def energy_fn(self, t, q, qd, p):
        """``E = q'·∂L/∂q' − L`` for the solution builder (``energy(time)``).

        Args:
            t: time. q, qd: dicts name -> array. p: the full parameter dict
                (every parameter, e.g. ``dae.params`` or a batch's values).

        Returns:
            Scalar energy; pure jnp, vmap it over time.
        """
        t = f64(t)
        mom = self._momenta(t, q, qd, p)
        pq = sum(jnp.vdot(f64(qd[c.name]), mom[c.name]) for c in self.coords)
        return pq - self.lagrangian_value(t, q, qd, p)

    @property
    def has_dissipation(self) -> bool:
        """Whether the DAE has a Rayleigh dissipation function R."""
        return self._R is not None

    def dissipation_power_fn(self, t, q, qd, p):
        """Power dissipated by the Rayleigh forces, ``q'·∂R/∂q'`` (≥ 0 for a convex R).

        The work-energy theorem: with no applied forces and constraints that
        do not depend on t, ``dE/dt = −q'·∂R/∂q'``, so the integral of this
        power (the ``dissipated`` output) balances the energy change.

        Args:
            t: time. q, qd: dicts name -> array. p: the full parameter dict.

        Returns:
            Scalar power (0 without a dissipation function); pure jnp.
        """
        if self._R is None:
            return jnp.float64(0.0)
        grad = self._dissipation_grad(f64(t), q, qd, p)
        return sum(jnp.vdot(f64(qd[c.name]), grad[c.name]) for c in self.coords)

    def point_momenta_fn(self, t, q, qd, p):
        """World positions and momenta of the points that carry mass.

        A DAE whose coordinates are world positions of points sets
        ``point_momenta_fn`` (the Mechanism kind overrides it to add its fixed
        points); by default every coordinate is taken as a point, with its
        conjugate momentum ``∂L/∂r'``.  Then ``Σ p`` is the linear momentum and
        ``Σ r × p`` the angular momentum about the origin: the Noether charges
        of translations and rotations of every point.

        Args:
            t: time. q, qd: dicts name -> array. p: the full parameter dict.

        Returns:
            (R, P): arrays (n_points, dim) of positions and momenta.
        """
        mom = self._momenta(f64(t), q, qd, p)
        R = jnp.stack([f64(q[c.name]) for c in self.coords])
        P = jnp.stack([f64(mom[c.name]) for c in self.coords])
        return R, P

    @property
    def momentum_dim(self) -> int | None:
        """Dimension (2 or 3) of the points whose momenta are outputs, or None.

        Set ``dae.momentum_dim`` (the model kinds do, where every coordinate is
        a point's world position) to have ``momentum`` and
        ``angular_momentum`` in the results; None (default) leaves them out.
        """
        return self.__dict__.get("_momentum_dim")

    @momentum_dim.setter
    def momentum_dim(self, value: int | None) -> None:
        if value is not None and value not in (2, 3):
            raise InputError(f"momentum_dim must be 2, 3 or None, got {value!r}")
        self.__dict__["_momentum_dim"] = value

    def energy(self, t, q, qd, params=None):
        """Energy ``q'·∂L/∂q' − L`` at a point (T + V for L = T − V natural)."""
        return self._jit("energy", self.energy_fn)(
            f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))

    def constraints_at(self, t, q, params=None) -> jnp.ndarray:
        """Flat constraint values C(t, q) (length n_c)."""
        return self._jit("constraints", self._constraints_flat)(
            f64(t), self._as_dict(q), self._params(params))

    def constraint_jacobian(self, t, q, params=None) -> jnp.ndarray:
        """``G = ∂C/∂q`` of shape (n_c, n_q)."""
        return self._jit("cjac", self._k_cjac)(f64(t), self._as_dict(q), self._params(params))

    def constraint_forces(self, t, q, lam, params=None) -> dict:
        """Generalised constraint forces ``−Gᵀλ`` per coordinate (see module doc)."""
        if not self.n_c:
            return self._zeros_q()
        return self._jit("cforces", self._k_cforces)(
            f64(t), self._as_dict(q), f64(lam), self._params(params))

    # ----------------------------------------------------------- misc
    def with_params(self, **overrides) -> "LagrangianDAE":
        """A copy with other parameter defaults (same structure, same class).

        The copy shares the structural analysis but none of the jitted
        kernels: those belong to the object that built them.
        """
        new = object.__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_kernels"})
        new.params = self.param_values(overrides)
        return new

    def __repr__(self):
        cs = ", ".join(c.name if c.shape == () else f"{c.name}[{c.size}]" for c in self.coords)
        drive = f" ({len(self.drivers)} of them drivers: {', '.join(d.name for d in self.drivers)})" \
            if self.drivers else ""
        return (f"LagrangianDAE({self.name!r}: coordinates {cs}; {self.n_c} constraints{drive}; "
                f"params={self.param_names})")


def lagrangian(L: Callable, coords, constraints: Callable | None = None,
               dissipation: Callable | None = None, forces=None,
               params: Mapping[str, Any] | None = None, name: str | None = None,
               multiplier: str = "lam", mass_blocks=None,
               units: Mapping[str, str] | None = None,
               drivers: Mapping[str, tuple] | None = None, events=None, stops=None,
               max_events: int | None = None) -> LagrangianDAE:
    """Build the Euler–Lagrange DAE of a mechanical model (docs/method.md §7).

    Args:
        L: ``L(t, q, qd, p)`` -> scalar Lagrangian; ``q``, ``qd`` are dicts
            coordinate name -> array, ``p`` the parameters.
        coords: dict name -> size (None for a scalar) or a list of scalar
            names, as DAE variables.
        constraints: ``constraints(t, q, p)`` -> list/array of holonomic
            constraints C_i (= 0); may depend on t (drivers, rheonomic).
        dissipation: ``dissipation(t, q, qd, p)`` -> scalar Rayleigh R.
        forces: ``forces(t, q, qd, p)`` -> dict coordinate -> generalised
            force Q (missing coordinates get 0), or a list of such callables
            (summed), e.g. from :func:`point_force`.
        params: parameter defaults (numbers or arrays).
        name: title.
        multiplier: name of the multiplier variable (vector of size n_c).
        mass_blocks: optional declaration of block-diagonal M inside
            coordinates: ``"diagonal"`` or dict name -> block size (e.g.
            ``{"r": 3}`` for particles); checked numerically on first use.
        units: optional dict variable -> unit string.
        drivers: inverse dynamics: mapping name -> ``(quantity, value)`` or
            ``(quantity, value, units)``.  ``quantity`` is a coordinate name
            (a scalar coordinate ``"theta"`` or a component ``"A[0]"``) or a
            callable ``quantity(t, q, p)`` -> scalar (as ``constraints``
            takes its arguments), e.g. a crank angle by ``jnp.arctan2``;
            ``value`` is a callable ``value(t, p)`` -> scalar (or a number,
            held constant); ``units`` those of the drive's generalised force
            (default: from the driven coordinate's unit in ``units``:
            ``rad`` -> ``N m``, ``m`` -> ``N``).  Each driver adds the
            constraint ``quantity − value = 0`` (after ``constraints``, with
            its own multiplier); the results then hold ``torque_{name}``,
            the generalised force the drive applies along the quantity
            (``−λ`` of its row: for a pendulum driven at θ(t),
            m L² θ'' + m g L sin θ).  The driven quantity's initial value and
            velocity come from the driver: do not fix them.
        events: optional :class:`solver.Event` list (functions of the
            coordinates ``v[name][0]``, velocities ``v[name][1]``, t and p).
        stops: optional :class:`solver.mechanics.stops.Stop` list: unilateral
            constraints (gap >= 0) with Newton's impact law.
        max_events: event records a run keeps (default 64).

    Returns:
        A :class:`LagrangianDAE` (a :class:`solver.dae.problem.DAE`).

    Raises:
        InputError: malformed arguments (the message says which and why).
    """
    return LagrangianDAE(L, coords, constraints=constraints, dissipation=dissipation,
                         forces=forces, params=params, name=name, multiplier=multiplier,
                         mass_blocks=mass_blocks, units=units, drivers=drivers, events=events, stops=stops,
                         max_events=max_events)
