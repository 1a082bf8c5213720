"""The compiled model: every jitted function of one DAE at one Taylor order.

A :class:`Compiled` is built once per (DAE, order, stage solver) by
:func:`compiled_model` and kept in this module's one registry, weakly keyed by the
DAE, so it lives exactly as long as its DAE.  It owns

* the :class:`~solver.integrate.integrator.Integrator` (whose ``run``/``run_batch`` are
  jitted on it),
* the vmapped Gauss–Newton of the consistent initialisation,
* IPOPT's jitted constraint, sparse Jacobian and Hessian functions,
* the per-output-time constraint-residual, energy and balance series
  (dissipated energy, momenta: :mod:`solver.results.balance`),

and the one initialisation policy: Gauss–Newton for every point at once,
IPOPT for the points Newton misses (:meth:`Compiled.consistent_points`).
Nothing else hangs compiled functions on other objects.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import weakref
from typing import Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.ahead import WAIT_EVENT, AheadTable
from solver.errors import InputError
from solver.integrate.initialize import (ASSEMBLY_TOL, InitialValueError, IpoptDerivatives, StateSpec, batched_newton,
                         ipopt_point, state_scales, violated_rows)
from solver.integrate.initialize import residual_list  # the one wording of violated constraints
from solver.results.balance import balance_arguments, balance_kernels, balance_series
from solver.integrate.choices import QUICK_COMPILE, choose_mode
from solver.integrate.integrator import MODES, Integrator
from solver.integrate.run_args import device_number
from solver.program_store import stored_jit
from solver.taylor.program import TaylorProgram
from solver.integrate.sensitivity import consistent_tangents

__all__ = ["Compiled", "compiled_model", "compile_clock", "INIT_METHODS", "LINEAR_CHOICES"]

INIT_METHODS = ("auto", "newton", "ipopt")
LINEAR_CHOICES = ("auto", "dense", "kkt")



def _per_dae(dae) -> dict:
    """The DAE's own {(order, linear, mode[, batch]): Compiled}, kept on the DAE.

    On the DAE, not in a module-level table keyed by it: a Compiled holds its
    DAE, so a table entry kept its key alive and no compiled model (nor its
    XLA executables, ~500-2000 memory maps each) was ever freed; a test
    worker crossed the kernel's 65,530 maps and crashed.  The weak reference
    tells a ``with_params`` copy (which copies the DAE's attributes) that the
    table is its original's: the copy gets its own.
    """
    holder = dae.__dict__.get("_compiled_models")
    if holder is None or holder[0]() is not dae:
        holder = (weakref.ref(dae), {})
        dae.__dict__["_compiled_models"] = holder
    return holder[1]


# JAX's own duration events for tracing, lowering and XLA compilation.
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration",
                   WAIT_EVENT)
_clocks: list = []


def _on_duration(event: str, seconds: float, **_):
    # JAX reports these in the thread that traces and compiles: a clock
    # counts its own thread's compiles, not those of a Dask worker's other
    # threads running other batches at the same time.  Each is kept as an
    # interval (it ends now): a trace can hold other traces and lowerings
    # (the program store exports a program while JAX traces its caller),
    # which must not count twice.
    if event in _COMPILE_EVENTS:
        me = threading.get_ident()
        end = time.perf_counter()
        for clock in _clocks:
            if clock[1] == me:
                clock[0].append((end - seconds, end))


def _covered(intervals) -> float:
    """The length of the union of (start, end) intervals."""
    total, reach = 0.0, -np.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


_listening = False


class compile_clock:
    """Context manager: seconds JAX spent tracing and compiling inside it.

    ``with compile_clock() as c: ...`` then ``c.seconds`` (a persistent
    cache hit counts only its lookup) and ``c.wall_seconds`` (the block's
    whole time).  Only the compiles of the thread that entered it count.
    Used by ``solve``, the commands, the sweep's batches and the design's
    starts to report compile time apart from run time.
    """

    def __enter__(self):
        global _listening
        if not _listening:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _listening = True
        self._acc = [[], threading.get_ident()]
        _clocks.append(self._acc)
        self._start, self._end = time.perf_counter(), None
        return self

    def __exit__(self, *exc):
        # By identity: a clock nested in another holds equal intervals when nothing compiled
        # before it, and list.remove would take the outer's (which then lost the compiles after).
        for i, acc in enumerate(_clocks):
            if acc is self._acc:
                del _clocks[i]
                break
        self._end = time.perf_counter()
        return False

    @property
    def wall_seconds(self) -> float:
        """Seconds since the block was entered, up to its end once it has ended."""
        return (time.perf_counter() if self._end is None else self._end) - self._start

    @property
    def seconds(self) -> float:
        """Compile seconds so far (time inside any of JAX's traces, lowerings and compiles)."""
        return _covered(self._acc[0])


def compiled_model(dae, order: int, linear: str = "auto", mode: str = "auto", batch: bool = True,
                   optimize: bool = True) -> "Compiled":
    """The compiled model of a DAE at a Taylor order (built once, then reused).

    Args:
        dae: the DAE (:class:`solver.DAE` or a Lagrangian one).
        order: Taylor order p (2 to 60).
        linear: stage solver, one of ``auto``/``dense``/``kkt`` (see
            :class:`solver.integrate.integrator.Integrator`).
        mode: Taylor engine, ``auto``/``unrolled``/``compact``/``looped`` (see
            :func:`solver.integrate.integrator.choose_mode`).
        batch: for ``mode="auto"``: an engine for batches (default) or for
            single runs (``solve``), which may differ.
        optimize: compile the runs with LLVM's optimisation (default), or
            quickly (see :class:`solver.integrate.integrator.Integrator`).

    Returns:
        The :class:`Compiled` of ``(dae, order, linear, mode[, batch], optimize)``;
        the same object on every call while the DAE lives, and for ``auto``
        the same as for the engine it takes (the pendulum's for batches and
        for one run, ``unrolled`` both, are one).

    Raises:
        InputError: an order outside 2..60, an unknown ``linear`` or ``mode``.
    """
    if not 2 <= int(order) <= 60:
        raise InputError(f"order must be between 2 and 60, got {order}")
    if linear not in LINEAR_CHOICES:
        raise InputError(f"linear must be one of {', '.join(LINEAR_CHOICES)}; got {linear!r}")
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    per_dae = _per_dae(dae)
    if not isinstance(optimize, (bool, np.bool_)):
        raise InputError(f"optimize must be true or false, got {optimize!r}")
    quick = (False,) if not optimize else ()
    key = (int(order), linear, mode) + ((bool(batch),) if mode == "auto" else ()) + quick
    if key not in per_dae:
        s = dae.structure
        program = TaylorProgram(dae, s.c, s.d, int(order))
        # "auto" for batches and for one run often resolve to the same engine
        # (every model below the single-run limit): one Compiled then serves
        # both, so a process that solves and sweeps a model compiles it once.
        # Kept under the engine the integrator took (an automatic compact
        # that does not apply falls back to looped), so that an explicit mode
        # finds only its own engine.
        comp = per_dae.get((int(order), linear, choose_mode(program, mode, batch)) + quick)
        if comp is None:
            integ = Integrator(program, linear=linear, mode=mode, batch=batch, optimize=bool(optimize))
            comp = Compiled(dae=dae, order=int(order), linear=linear, integrator=integ)
            per_dae.setdefault((int(order), linear, integ.mode) + quick, comp)
        per_dae[key] = comp
    return per_dae[key]


def compiled_of(integ: Integrator) -> "Compiled":
    """The :class:`Compiled` that owns an integrator (one made by :func:`compiled_model`).

    Raises:
        InputError: the integrator was built by hand, not by :func:`compiled_model`.
    """
    for c in _per_dae(integ.dae).values():
        if c.integrator is integ:
            return c
    raise InputError("this Integrator was not made by solver.compiled_model() "
                     "(or solver.api.integrator_for); build it through them to reuse its compiled functions")


@dataclasses.dataclass(frozen=True, eq=False)
class Compiled:
    """Every jitted function of one DAE at one order (see the module docstring).

    Attributes:
        dae: the DAE.
        order: Taylor order p.
        linear: the stage solver asked for (``integrator.linear`` is the one
            chosen).
        integrator: the :class:`~solver.integrate.integrator.Integrator`.

    The jitted functions are built on first use (``functools.cached_property``)
    and compiled by JAX on first call for each shape.
    """

    dae: object
    order: int
    linear: str
    integrator: Integrator

    # ------------------------------------------------------------ functions
    @functools.cached_property
    def _initial_programs(self) -> dict:
        return {}

    @functools.cached_property
    def _call_shapes(self) -> set:
        return set()

    def new_call_shape(self, key) -> bool:
        """Whether this compiled model meets a solve of this shape for the first time (and remember it).

        A solve builds its programs ahead only then (:mod:`solver.ahead`):
        later ones find them built, and the key, plain Python values, costs
        less to look up than the programs' argument signatures.

        Args:
            key: hashable values that fix the solve's programs (points, output
                rows, sensitivities, outputs, slots, the build mode).

        Returns:
            True the first time.
        """
        if key in self._call_shapes:
            return False
        self._call_shapes.add(key)
        return True

    @functools.cached_property
    def _series_ahead(self) -> AheadTable:
        # The series' builds started ahead (series_ahead).
        return AheadTable()

    @staticmethod
    def _built_quickly(points: int) -> bool:
        """Whether the programs a solve runs once for ``points`` points are built without LLVM's optimisation.

        A single run (``points == 1``) runs its consistent point's programs
        and its output series once a solve, where optimising them cost
        compile time for nothing measurable
        (:data:`~solver.integrate.choices.QUICK_COMPILE`: a four-bar's Newton
        and start tangents 1.0-1.2 s -> 0.3-0.4 s each, its design's 9 solves
        +0.05 s in all; its series and balance kernels 0.24 -> 0.10 s).  A
        batch runs them over all its points and takes the optimised builds.
        Measured on a CPU only, so only there.
        """
        return points == 1 and jax.default_backend() == "cpu"

    def _initial_program(self, fn, in_axes, name, points: int):
        """jit(vmap(fn)) of a consistent point's program (made once per name and kind; see :meth:`_built_quickly`)."""
        one = self._built_quickly(points)
        key = name + ("_one" if one else "")
        if key not in self._initial_programs:
            self._initial_programs[key] = stored_jit(jax.vmap(fn, in_axes=in_axes), self.integrator.identity, key,
                                                     compiler_options=QUICK_COMPILE if one else None)
        return self._initial_programs[key]

    def newton_program(self, points: int):
        """jit(vmap(Gauss–Newton)) for a batch of ``points``: (params (B,…), t0, z_hat (B,n), free (B,n), iters)
        -> (z, residual); quickly compiled for one point (:meth:`_initial_program`)."""
        integ = self.integrator
        return self._initial_program(lambda p, t0, z, free, iters: batched_newton(integ, p, t0, z, free, iters=iters),
                                     (0, None, 0, 0, None), "newton_batch", points)

    def start_tangents_program(self, points: int):
        """jit(vmap(:func:`solver.integrate.sensitivity.consistent_tangents`)) for a batch of ``points``:
        (params (B,…), t0, z0 (B,n), free (B,n), dparams (B,k,…), dz_fixed (B,k,n)) -> (B,k,n); quickly
        compiled for one point (:meth:`_initial_program`)."""
        integ = self.integrator
        return self._initial_program(lambda p, t0, z, free, dp, dz: consistent_tangents(integ, p, t0, z, free, dp, dz),
                                     (0, None, 0, 0, 0, 0), "start_tangents", points)

    @functools.cached_property
    def ipopt_derivatives(self) -> IpoptDerivatives:
        """IPOPT's jitted constraints, sparse Jacobian and Lagrangian Hessian."""
        return IpoptDerivatives(self.integrator)

    @functools.cached_property
    def _output_series(self):
        """:meth:`_output_series_program`, optimised (a batch)."""
        return self._output_series_program(quick=False)

    @functools.cached_property
    def _output_series_one(self):
        """:meth:`_output_series_program`, built quickly: one run's series (:meth:`_built_quickly`)."""
        return self._output_series_program(quick=True)

    def _output_series_program(self, quick: bool):
        """jit of (values, t_eval, params; residual, energy) -> (residual (B, T) or None, energy (B, T) or None).

        One program reads the dense outputs and computes both series: the
        states at the output times are gathered inside it, not by numpy
        before it, and a batch costs one call.  ``quick``: without LLVM's
        optimisation (:data:`~solver.integrate.choices.QUICK_COMPILE`).
        """
        integ, dae = self.integrator, self.dae
        picks = [(v.name, v.size, int(r), int(c)) for v in dae.variables
                 for r, c in zip(integ.state_rows[v.name], integ.state_cols[v.name])]

        def one(values, t_eval, p, residual, energy):
            out_r = out_e = None
            if residual:
                T = t_eval.shape[0]
                z = jnp.stack([values[name].reshape(T, -1, size)[:, r, c] / float(np.prod(np.arange(1, r + 1)))
                               for name, size, r, c in picks], axis=-1)
                out_r = jax.vmap(lambda zt, t: jnp.max(jnp.abs(integ.hidden_constraints(zt, t, p))))(z, t_eval)
            if energy:
                q = {c.name: values[c.name][:, 0] for c in dae.coords}
                qd = {c.name: values[c.name][:, 1] if values[c.name].shape[1] > 1
                      else jnp.zeros_like(values[c.name][:, 0]) for c in dae.coords}
                out_e = jax.vmap(lambda t, qt, qdt: dae.energy_fn(t, qt, qdt, p))(t_eval, q, qd)
            return out_r, out_e

        batch = jax.vmap(one, in_axes=(0, None, 0, None, None))

        def series(values, t_eval, params, residual, energy):
            return batch(values, t_eval, params, residual, energy)

        return stored_jit(series, integ.identity, "output_series_one" if quick else "output_series",
                          static_argnames=("residual", "energy"), compiler_options=QUICK_COMPILE if quick else None)

    @functools.cached_property
    def balance_kernels(self) -> dict:
        """The jitted kernels of the balance outputs (:func:`solver.results.balance.balance_kernels`)."""
        return balance_kernels(self.dae, self.integrator.identity)

    @functools.cached_property
    def _balance_kernels_one(self) -> dict:
        """:attr:`balance_kernels` built quickly, for a single run (:meth:`_built_quickly`)."""
        return balance_kernels(self.dae, self.integrator.identity, compiler_options=QUICK_COMPILE, suffix="_one")

    @property
    def has_energy(self) -> bool:
        """Whether the DAE defines an energy (Lagrangian and mechanism models)."""
        return callable(getattr(self.dae, "energy_fn", None))

    # ------------------------------------------------------------ series
    def output_series(self, values, t_eval, params, residual: bool = True,
                      energy: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The constraint residual and the energy at every output time of every point, in one call.

        The residual is max |hidden constraint| of the state at each output
        time (zeros for a DAE without hidden constraints); the energy is
        ``q'·∂L/∂q' − L`` (None for a DAE without one).

        Args:
            values: dict name -> (B, n_out, L, *shape) derivatives (dense output).
            t_eval: (n_out,) output times.
            params: dict name -> (B, …) parameter values.
            residual, energy: which of the two series to compute.

        Returns:
            ``(residual, energy)``: (B, n_out) arrays, NaN where the output
            was not reached; None for a series not asked for (or, for the
            energy, not defined).
        """
        first = np.asarray(next(iter(values.values())))
        shape = first.shape[:2]
        hidden = residual and self.integrator.n_hidden > 0
        res = np.zeros(shape) if residual and not hidden else None
        call = self._series_call(values, t_eval, params, residual, energy)
        if call is None:
            return res, None
        program, args, kwargs = call
        self._series_ahead.before_call(program, args, kwargs, static=tuple(kwargs))
        r, e = program(*args, **kwargs)
        return (np.asarray(r) if hidden else res), (np.asarray(e) if kwargs["energy"] else None)

    def _series_call(self, values, t_eval, params, residual: bool, energy: bool):
        """(program, args, kwargs) of :meth:`output_series`' one call; None where it computes nothing."""
        first = np.asarray(next(iter(values.values())))
        hidden = residual and self.integrator.n_hidden > 0
        energy = energy and self.has_energy
        if not hidden and not energy:
            return None
        names = ({v.name for v in self.dae.variables} if hidden else set()) | (
            {c.name for c in self.dae.coords} if energy else set())
        program = self._output_series_one if self._built_quickly(first.shape[0]) else self._output_series
        return program, ({k: np.asarray(values[k]) for k in sorted(names)}, np.asarray(t_eval, dtype=float),
                         {k: np.asarray(v) for k, v in params.items()}), {"residual": hidden, "energy": energy}

    def balance_series(self, values, t_eval, params, energy) -> dict:
        """The balance outputs (energy change, dissipated energy, momenta) of a batch of runs.

        :func:`solver.results.balance.balance_series` with this compiled model's
        kernels (:attr:`balance_kernels`, compiled once).

        Args: as :meth:`output_series`, and ``energy``: its energy series
            (None: nothing is computed).

        Returns:
            dict name -> array with leading (B, n_out).
        """
        points = np.shape(next(iter(values.values())))[0] if values else 0
        kernels = self._balance_kernels_one if self._built_quickly(points) else self.balance_kernels
        return balance_series(self.dae, values, t_eval, params, energy, kernels=kernels,
                              before=lambda kernel, args: self._series_ahead.before_call(kernel, args))

    def series_ahead(self, points: int, t_eval, params, residual: bool = True, energy: bool = True,
                     balance: bool = True) -> None:
        """Build the programs of :meth:`output_series` and :meth:`balance_series` ahead (:mod:`solver.ahead`).

        Each is traced and lowered now and compiled in the background; the
        calls with outputs of these shapes wait for their builds.

        Args:
            points: the batch's points B (the outputs' leading axis).
            t_eval: (n_out,) output times.
            params: dict name -> (B, …) parameter values (only shapes and types are used).
            residual, energy: as for :meth:`output_series`.
            balance: also the balance kernels (where the DAE has an energy).
        """
        integ = self.integrator
        values = {v.name: np.zeros((points, len(t_eval), integ.out_orders[v.name]) + v.shape)
                  for v in self.dae.variables}
        call = self._series_call(values, t_eval, params, residual, energy)
        if call is not None:
            program, args, kwargs = call
            self._series_ahead.jit_ahead(program, args, kwargs, static=tuple(kwargs))
        if balance and self.has_energy:
            kernels = self._balance_kernels_one if self._built_quickly(points) else self.balance_kernels
            args = balance_arguments(self.dae, values, t_eval, params)
            for kernel in kernels.values():
                self._series_ahead.jit_ahead(kernel, args)

    # ------------------------------------------------------------ initial values
    def consistent_points(self, params_batch: Mapping, t0: float, z_hat, free, method: str = "auto",
                          ipopt_options: Mapping | None = None, newton_iters: int = 40, *,
                          specs=None, violated: list | None = None):
        """Consistent states for a batch of points: Newton for all, IPOPT where it misses.

        The one initialisation policy of the package: every point is solved
        by vmapped Gauss–Newton (one compiled call for the batch, unless
        ``method="ipopt"``); a point whose residual stays above
        :data:`~solver.integrate.initialize.ASSEMBLY_TOL` times its scale is retried by
        :func:`~solver.integrate.initialize.ipopt_point` (unless ``method="newton"``).
        A point that neither assembles gets ``ok = False`` and a message; no
        exception, so one bad design never stops a batch.

        Args:
            params_batch: dict name -> array with a leading batch axis (every
                parameter of the DAE).
            t0: initial time.
            z_hat: (B, n_state) guesses and fixed values (normalised).
            free: (n_state,) or (B, n_state) bool mask of entries that may move.
            method: ``auto``, ``newton`` or ``ipopt``.
            ipopt_options: options for IPOPT.
            newton_iters: Gauss–Newton iteration limit.
            specs: optional per-point :class:`~solver.integrate.initialize.StateSpec`
                handed to IPOPT (its weights and the entries the user gave,
                for the messages); default built from ``z_hat`` and ``free``.
            violated: a list to fill in, one entry per point: the indices of
                the hidden constraints (``integrator.hidden_labels``) violated
                at the closest point found, worst first (empty where the point
                assembled); a batch names them in its failure reasons.

        Returns:
            (z (B, n_state), ok (B,) bool, messages: list of str, '' where ok);
            rows with ok False hold the closest point found.

        Raises:
            InputError: an unknown method, or shapes that do not match.
        """
        if method not in INIT_METHODS:
            raise InputError(f"unknown initialisation method {method!r}; valid: {list(INIT_METHODS)}")
        integ = self.integrator
        n = integ.n_state
        z_hat = np.asarray(z_hat, dtype=float)
        if z_hat.ndim != 2 or z_hat.shape[1] != n:
            raise InputError(f"z_hat must have shape (batch, {n}); got {z_hat.shape}")
        nb = z_hat.shape[0]
        free_b = np.asarray(free, dtype=bool)
        if free_b.shape not in ((n,), (nb, n)):
            raise InputError(f"free must have shape ({n},) or ({nb}, {n}); got {free_b.shape}")
        free_b = np.broadcast_to(free_b, (nb, n))
        params = {}
        for k, v in params_batch.items():
            a = np.asarray(v, dtype=float)
            if a.ndim == 0 or a.shape[0] != nb:
                raise InputError(f"parameter {k!r}: expected a leading batch axis of length {nb}, got shape {a.shape}")
            params[k] = a
        scale = state_scales(z_hat)
        z = z_hat.copy()
        ok = np.zeros(nb, dtype=bool)
        if method in ("auto", "newton"):
            z, ok = self._newton(params, t0, z_hat, free_b, scale, newton_iters)
        messages = [""] * nb
        rows: list = [()] * nb
        for i in np.nonzero(~ok)[0]:
            p_i = {k: v[i] for k, v in params.items()}
            if method == "newton":
                messages[i], rows[i] = self._newton_failure(z[i], p_i, t0, scale[i], free_b[i])
                continue
            spec = specs[i] if specs is not None else StateSpec(z_hat[i], free_b[i], np.zeros(self.dae.n))
            try:
                z[i] = ipopt_point(self.integrator, p_i, t0, spec, options=ipopt_options,
                                   derivatives=self.ipopt_derivatives)
                ok[i] = True
            except InitialValueError as err:
                messages[i], rows[i] = str(err), err.violated
        if violated is not None:
            violated[:] = rows
        return z, ok, messages

    def _newton(self, params, t0, z_hat, free, scale, iters):
        zz, rr = self.newton_program(len(z_hat))(params, float(t0), np.asarray(z_hat), np.asarray(free),
                                                 device_number(int(iters)))
        z, res = np.array(zz), np.asarray(rr)
        return z, (res <= ASSEMBLY_TOL * scale) & np.all(np.isfinite(z), axis=1)

    def _newton_failure(self, z, params, t0, scale, free=None) -> tuple[str, list[int]]:
        """The message of a point Gauss-Newton could not make consistent, and its violated rows.

        Names the worst violated constraints with their residuals and, given
        the ``free`` mask, the fixed values each involves; the rows are
        :func:`~solver.integrate.initialize.violated_rows` of the residuals.
        """
        if self.integrator.n_hidden == 0:
            return "no consistent initial point found: the state is not finite", []
        der = self.ipopt_derivatives
        g = np.asarray(der.g({k: jnp.asarray(v) for k, v in params.items()}, float(t0), jnp.asarray(z)))
        res = float(np.max(np.abs(g))) if np.all(np.isfinite(g)) else np.inf
        lines = residual_list(self.integrator, g, ASSEMBLY_TOL * scale, der=der, z=np.asarray(z),
                               free=None if free is None else np.asarray(free, dtype=bool))
        return (f"no consistent initial point found by Gauss-Newton (largest constraint residual {res:.3g}); "
                f"violated: {lines}. Check the fixed values and the parameters (can the mechanism assemble?), "
                "give better guesses, or use init='auto' to let IPOPT try",
                violated_rows(g, ASSEMBLY_TOL * scale))

    def consistent_point(self, params: Mapping, t0: float, spec: StateSpec, method: str = "auto",
                         ipopt_options: Mapping | None = None) -> np.ndarray:
        """A consistent state near the guesses, keeping fixed entries (one point).

        :meth:`consistent_points` of a batch of one (the one policy), with
        its message (violated constraints, closest point) raised when it
        fails.

        Args:
            params: parameter dict (no batch axis).
            t0: initial time.
            spec: guesses and fixed entries (:func:`solver.integrate.initialize.parse_values`).
            method: ``auto``, ``newton`` or ``ipopt``.
            ipopt_options: extra IPOPT options.

        Returns:
            flat consistent state (numpy).

        Raises:
            InitialValueError: no consistent point; the message lists the
                violated constraints and their residuals.
            InputError: an unknown method.
        """
        one = {k: np.asarray(v, dtype=float)[None] for k, v in params.items()}
        z, ok, messages = self.consistent_points(
            one, t0, np.asarray(spec.z_hat, dtype=float)[None],
            np.asarray(spec.free, dtype=bool)[None], method=method, ipopt_options=ipopt_options,
            specs=[spec])
        if not ok[0]:
            raise InitialValueError(messages[0])
        return z[0]

    # ------------------------------------------------------------ diagnosis
    @functools.cached_property
    def _stage0_system(self):
        integ = self.integrator

        def one(params, t0, z, u_guess):
            # Stage 0's Newton alone, with the (scaled) system Jacobian of its
            # last iteration: at the converged leading derivatives, or at the
            # last finite iterate when J is singular.
            return integ.stage0_system(z, u_guess, t0, integ.prog.constants(params))

        return stored_jit(one, integ.identity, "stage0_system")

    def system_jacobian(self, params: Mapping, t0: float, z, u_guess) -> tuple[np.ndarray, np.ndarray]:
        """The system Jacobian of stage 0 at a consistent point (one compiled call).

        A diagnosis for ``mechsweep check``, separate from the integration
        code: the stage-0 Newton of this compiled model
        (:meth:`~solver.integrate.integrator.Integrator.stage0_system`), without the
        later stages, so its order does not matter.

        Args:
            params: parameter dict (no batch axis).
            t0: time of the point.
            z: flat consistent state.
            u_guess: guess of the leading derivatives (flat, n).

        Returns:
            (A, u): ``A[i, j] = J_ij d_j!/c_i!`` with ``J_ij = ∂f_i/∂x_j^(d_j-c_i)``
            the system Jacobian (numpy, n x n), and the leading derivatives
            it was evaluated at.

        Raises:
            InputError: a compiled model on the structured KKT path (it never
                forms the Jacobian): build it with ``linear="dense"``.
        """
        if self.integrator.linear != "dense":
            raise InputError("system_jacobian needs a compiled model with linear='dense' "
                             f"(this one uses {self.integrator.linear!r})")
        p = {k: jnp.asarray(np.asarray(v, dtype=float)) for k, v in params.items()}
        A, u, _ = self._stage0_system(p, float(t0), jnp.asarray(np.asarray(z, dtype=float)),
                                      jnp.asarray(np.asarray(u_guess, dtype=float)))
        return np.asarray(A), np.asarray(u)
