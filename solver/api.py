"""The front door: ``solve`` (one run) and ``solve_batch`` (many designs).

Both go the same way down: check the arguments → the compiled model
(:func:`solver.compiled.compiled_model`) → consistent initial values (Newton, IPOPT
where it misses) → integration → :mod:`solver.results.solution` names the outputs.
``solve_batch`` is the one way to solve many designs: the sweep pipeline calls
it and nothing below it.
"""

from __future__ import annotations

import time as _time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import jax

from solver import status as st
from solver import program_store
from solver.ahead import enabled as ahead_enabled, running as ahead_running
from solver.analysis.failures import failure_records
from solver.compiled import Compiled, compile_clock, compiled_model, compiled_of
from solver.dae.problem import DAE
from solver.errors import InputError
from solver.integrate.initialize import ASSEMBLY_TOL, InitialValueError, StateSpec, parse_values, parse_values_table
from solver.integrate.calls import integrate as _integrate, integrate_ahead as _integrate_ahead
from solver.integrate.integrator import Integrator, order_for_tol
from solver.integrate.solve_lock import one_at_a_time
from solver.integrate.sensitivity import (check_names, fixed_value_tangents, parameter_directions, sensitivity_layout,
                          sensitivity_name, sensitivity_series)
from solver.results.balance import balance_layout
from solver.results.solution import batch_arrays, build_dataset, event_layout, import_dataset_modules, output_layout
from solver.taylor.compact import CompactUnsupportedError
from solver.tiered import last_build, tiered_mode

__all__ = ["solve", "solve_batch", "integrator_for", "consistent_point", "ASSEMBLY_TOL"]


def integrator_for(dae: DAE, order: int, linear: str = "auto", mode: str = "auto") -> Integrator:
    """The integrator of a DAE at a Taylor order (that of its compiled model).

    Repeated calls (other parameters, other initial values) return the same
    integrator, so its jitted functions are compiled once.

    Args:
        dae: the DAE.
        order: Taylor order p.
        linear: stage solver, ``auto``/``dense``/``kkt`` (see
            :class:`solver.integrate.integrator.Integrator`).
        mode: Taylor engine, ``auto``/``unrolled``/``compact``/``looped``.

    Returns:
        :class:`solver.integrate.integrator.Integrator`.

    Raises:
        InputError: a bad ``linear``, ``mode`` or order.
    """
    return compiled_model(dae, order, linear, mode).integrator


@one_at_a_time
def consistent_point(integ: Integrator | Compiled, params, t0: float, spec: StateSpec, method: str = "auto",
                     ipopt_options: Mapping | None = None):
    """A consistent state near the guesses, keeping fixed entries.

    Args:
        integ: the integrator (from :func:`integrator_for`) or compiled model.
        params: parameter dict.
        t0: initial time.
        spec: guesses and fixed entries (:func:`solver.integrate.initialize.parse_values`).
        method: ``"newton"`` (Gauss–Newton only), ``"ipopt"`` (nearest point
            by IPOPT) or ``"auto"`` (Newton, IPOPT where Newton fails).
        ipopt_options: extra IPOPT options.

    Returns:
        flat consistent state.

    Raises:
        InitialValueError: no consistent point; the message lists the violated
            constraints and their residuals.
        InputError: an unknown method.
    """
    comp = integ if isinstance(integ, Compiled) else compiled_of(integ)
    return comp.consistent_point(params, t0, spec, method=method, ipopt_options=ipopt_options)


# ----------------------------------------------------------------- arguments
def _check_settings(tol, order):
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not 0 < tol < 1:
        raise InputError(f"tol must be a number in (0, 1), got {tol!r}")
    p = int(order) if order else order_for_tol(float(tol))
    if not 2 <= p <= 60:
        raise InputError(f"order must be between 2 and 60, got {p}")
    return float(tol), p


def _output_times(t0, t1, t_eval, samples):
    if t_eval is None:
        n = int(samples or 101)
        if n < 1:
            raise InputError(f"samples must be at least 1, got {samples}")
        t_eval = np.linspace(t0, t1, n)
    t_eval = np.asarray(t_eval, dtype=float)
    if (t_eval.ndim != 1 or t_eval.size == 0 or np.any(np.diff(t_eval) < 0) or t_eval[0] < t0
            or t_eval[-1] > t1 + 1e-12 * max(1, abs(t1))):
        raise InputError("t_eval must be sorted times within t_span")
    return t_eval


def _time_span(t_span):
    try:
        t0, t1 = (float(x) for x in t_span)
    except (TypeError, ValueError):
        raise InputError(f"t_span must be a pair (t0, t1) of numbers, got {t_span!r}") from None
    if not t1 > t0:
        raise InputError(f"t_span must have t1 > t0, got ({t0}, {t1})")
    return t0, t1


def _start_tangents(comp: Compiled, full: dict, t0, z0, free, names, values, fixed):
    """(B, k, n_state) tangents of B consistent points (:mod:`solver.integrate.sensitivity`).

    ``values`` and ``fixed`` are the initial values as :func:`solve` takes
    them: where ``values`` is a function of the parameters, the fixed
    values' dependence on them is differentiated too.
    """
    B, n = z0.shape
    dz_fixed = np.zeros((B, len(names), n))
    if callable(values):
        z_of = lambda p: parse_values(comp.integrator, values(p), fixed).z_hat
        for i in range(B):
            p_i = {k: v[i] for k, v in full.items()}
            try:
                dz_fixed[i] = fixed_value_tangents(z_of, p_i, names, ~np.asarray(free[i]))
            except InputError:
                pass  # the point's initial values fail: it has failed already
    dparams = {k: np.moveaxis(v, 0, 1) for k, v in parameter_directions(full, names).items()}
    return np.asarray(comp.start_tangents_program(B)({k: np.asarray(v) for k, v in full.items()}, float(t0),
                                                     np.asarray(z0), np.asarray(free), dparams,
                                                     np.asarray(dz_fixed)))


def _with_event_sensitivities(ds, dae, event_tangents, names, status, single: bool, outputs=None):
    """``ds`` with ``devent_time_d{param}`` and ``devent_rate_d{param}``: the event records' derivatives.

    An event time moves with a parameter as dt*/dp = -(dg/dp + dg/dx dx/dp)
    / (dg/dt) (:func:`solver.integrate.roots.isolate_roots`); the rate's
    derivative includes the jump of the tangents at earlier impacts.
    """
    failed = st.is_failure(np.asarray(status))
    for what in ("time", "rate"):
        arr = np.asarray(event_tangents[what], dtype=float)  # (k, B, C)
        for i, param in enumerate(names):
            name = sensitivity_name(f"event_{what}", param)
            if outputs is not None and name not in outputs:
                continue
            vals = arr[i].copy()
            attrs = {"long_name": f"d(event {what})/d{param}", "sensitivity_of": f"event_{what}",
                     "sensitivity_wrt": param}
            if single:
                ds[name] = (("event",), vals[0], attrs)
            else:
                vals[failed] = np.nan
                ds[name] = (("point", "event"), vals, attrs)
    return ds


def _with_sensitivities(ds, dae, tangents, names, status, single: bool, mask_failed: bool = True,
                        outputs=None):
    """``ds`` with the ``d{var}_d{param}`` outputs of :func:`_integrate`'s tangents added (those in ``outputs``).

    ``mask_failed``: a batch's failed points' series all NaN (else as
    computed: :func:`solve_batch` masks them after the failure).
    """
    variables = None
    if outputs is not None:
        variables = [v.name for v in dae.variables
                     if any(sensitivity_name(v.name, param) in outputs for param in names)]
    layout = {k: v for k, v in sensitivity_layout(dae, variables, names).items() if outputs is None or k in outputs}
    series = sensitivity_series(dae, tangents, names, variables)
    failed = st.is_failure(np.asarray(status))
    for name, (dims, attrs) in layout.items():
        arr = series[name].copy()
        if single:
            ds[name] = (dims, arr[0], attrs)
        else:
            if mask_failed:
                arr[failed] = np.nan
            ds[name] = (("point",) + dims, arr, attrs)
    ds.attrs["sensitivities"] = list(names)
    return ds


# ----------------------------------------------------------------- one run
@one_at_a_time
def solve(dae: DAE, t_span, values: Mapping | None = None, fixed: Sequence[str] | None = None,
          tol: float = 1e-10, t_eval=None, order: int | None = None, params: Mapping | None = None,
          samples: int | None = None, max_steps: int = 100_000, h_max: float | None = None,
          init: str = "auto", ipopt_options: Mapping | None = None, title: str | None = None,
          extra_attrs: Mapping | None = None, linear: str = "auto", mode: str = "auto",
          sensitivities: Sequence[str] | None = None, optimize: bool = True, outputs: Sequence[str] | None = None):
    """Solve a DAE initial-value problem.

    Args:
        dae: the DAE.
        t_span: (t0, t1).
        values: initial values/guesses (see :func:`solver.integrate.initialize.parse_values`),
            or a function ``values(params) -> mapping`` of the full parameter
            dict (a model's ``initial_values``: with sensitivities, its fixed
            entries' dependence on the parameters is differentiated too).
        fixed: names of values to keep exactly.
        tol: tolerance (absolute, relative above magnitude 1).
        t_eval: output times (default: ``samples`` equally spaced, 101).
        order: Taylor order (default from tol).
        params: parameter overrides.
        samples: number of output times when t_eval is not given.
        max_steps: step limit.
        h_max: largest step.
        init: initialisation method (``auto``/``newton``/``ipopt``).
        ipopt_options: options passed to IPOPT.
        linear: stage solver (``auto``/``dense``/``kkt``, see
            :class:`solver.integrate.integrator.Integrator`); ``auto`` picks the
            structured KKT solve for large block-diagonal Lagrangian models.
        mode: Taylor engine: ``unrolled`` (straight-line code per order,
            fast steps, compile time growing with order and model size),
            ``compact`` (a scalar tape evaluated in groups, program size
            independent of the order and of the number of parts),
            ``looped`` (a loop over the orders) or ``auto`` (for one run
            unrolled up to 3,000 operations, compact above: compiling is
            most of a single run; :func:`solver.integrate.integrator.choose_mode`;
            with ``sensitivities``, compact wherever the model allows it).
        optimize: compile with LLVM's optimisation (default).  ``False``
            compiles up to 2x faster and runs several times slower (same
            results up to rounding): for a first look at a large model,
            or a run shorter than its compile
            (``workflows/benchmarks/results/optimize.txt``).  Where
            tiering is on (:mod:`solver.tiered`) a run may go on a quick
            build all the same: the Dataset's ``solver_build`` says which.
        title: dataset title.
        extra_attrs: more dataset attrs.
        sensitivities: scalar parameter names P; the dataset then also
            holds ``d{var}_d{P}(time)`` for every variable: the derivative of
            the computed solution (consistent initial point and
            integration, by forward mode at the run's step sequence;
            :mod:`solver.integrate.sensitivity`).
        outputs: the outputs to build, by their names in the Dataset, as
            for :func:`solve_batch` (None: all of them); what is not named
            is not assembled, nor its residual, energy or balance series
            computed (a design's solves keep the path and its derivatives).

    Returns:
        xarray.Dataset (docs/reference/outputs.md) with ``status`` (0 = success),
        ``attrs["wall_seconds"]``, ``attrs["compile_seconds"]`` (the part
        of it JAX spent tracing and compiling; near 0 on a second solve of
        the same DAE, or with a warm persistent compilation cache) and
        ``attrs["integration_seconds"]`` (the steps alone: the integration
        call less its compiling; the rest of a first solve is setting up,
        consistent initial values and the outputs).

    Raises:
        InputError: bad arguments or initial values, unknown ``outputs``.
        InitialValueError: no consistent initial point.
        solver.dae.structure.StructurallySingularError: the DAE has no finite
            transversal.
    """
    with compile_clock() as clock:
        return _solve(dae, t_span, values, fixed, tol, t_eval, order, params, samples, max_steps, h_max, init,
                      ipopt_options, title, extra_attrs, linear, mode, clock, sensitivities, optimize, outputs)


def _single_run_model(dae, order: int, linear: str, mode: str, optimize: bool, forward: bool) -> Compiled:
    """The compiled model of a single run; with ``forward`` (sensitivities) and ``mode="auto"``, the compact engine.

    The forward-mode program differentiates the whole run: on the compact
    engine it compiles faster than on the unrolled one even where the plain
    run's unrolled program compiles as fast (the pendulum: 7.5-7.8 s against
    10.3-10.4 s after a plain solve, its run as fast;
    ``workflows/benchmarks/results/compiles.txt``).  Where the compact
    decomposition does not apply, ``auto``'s own choice.
    """
    if forward and mode == "auto":
        try:
            return compiled_model(dae, order, linear, "compact", batch=False, optimize=optimize)
        except CompactUnsupportedError:
            pass
    return compiled_model(dae, order, linear, mode, batch=False, optimize=optimize)


def _solve(dae, t_span, values, fixed, tol, t_eval, order, params, samples, max_steps, h_max, init,
           ipopt_options, title, extra_attrs, linear, mode, clock, sensitivities, optimize, outputs=None):
    wall0 = _time.perf_counter()
    t0, t1 = _time_span(t_span)
    tol, p = _check_settings(tol, order)
    names = check_names(dae, sensitivities)
    want = _check_outputs(dae, outputs, names, "run")
    comp = _single_run_model(dae, p, linear, mode, optimize, forward=bool(names))
    integ = comp.integrator
    pvals = dae.param_values(params)
    spec = parse_values(integ, values(pvals) if callable(values) else values, fixed)
    t_eval = _output_times(t0, t1, t_eval, samples)
    params_b = {k: np.asarray(v)[None] for k, v in pvals.items()}
    ahead = _new_shape(comp, 1, t_eval, names, want, 1)
    traced_before = program_store.stats["stored"] + program_store.stats["unstored"]
    if ahead:
        _integrate_ahead(integ, params_b, np.asarray(spec.z_hat)[None], np.asarray(spec.u_guess)[None], t0, t1,
                         t_eval, tol, max_steps, h_max, 1, names)
    # Traced, not loaded from the program store: XLA compiles it from scratch, seconds.
    run_from_scratch = program_store.stats["stored"] + program_store.stats["unstored"] > traced_before
    z0 = comp.consistent_point(pvals, t0, spec, method=init, ipopt_options=ipopt_options)
    if ahead:
        _derived_series_ahead(comp, 1, t_eval, params_b, want)
        if run_from_scratch and ahead_running():
            import_dataset_modules()  # while the run's program compiles: the Dataset needs them after
    dz0 = None
    if names:
        dz0 = _start_tangents(comp, params_b, t0, np.asarray(z0)[None], np.asarray(spec.free)[None], names, values,
                              fixed)
    compiled_before, started = clock.seconds, _time.perf_counter()
    res = _integrate(integ, params_b, np.asarray(z0)[None], np.asarray(spec.u_guess)[None], t0, t1, t_eval, tol,
                     max_steps, h_max, 1, names, dz0)
    # The steps alone: the integration call less what JAX compiled inside it.
    integration = max(_time.perf_counter() - started - (clock.seconds - compiled_before), 0.0)
    residual, energy, balance = _derived_series(comp, res["values"], t_eval, params_b, want)
    # The build the run went on: a quick one where tiering (solver.tiered) chose it, whatever optimize asked.
    settings = {"tol": tol, "order": p, "max_steps": max_steps, "t0": t0, "t1": t1, "mode": integ.mode,
                "linear": integ.linear, "optimize": integ.optimize, "build": last_build() or "optimised"}
    one = {"values": {k: v[0] for k, v in res["values"].items()}, "status": res["status"][0],
           "steps": res["steps"][0]}
    if "events" in res:
        one["events"] = jax.tree_util.tree_map(lambda a: a[0], res["events"])
    ds = build_dataset(dae, one, t_eval, residual=None if residual is None else residual[0],
                       energy=None if energy is None else energy[0], balance={k: v[0] for k, v in balance.items()},
                       params=pvals, settings=settings, title=title, extra_attrs=dict(extra_attrs or {}),
                       outputs=want)
    if names:
        ds = _with_sensitivities(ds, dae, res["tangents"], names, res["status"], single=True, outputs=want)
        if "event_tangents" in res:
            ds = _with_event_sensitivities(ds, dae, res["event_tangents"], names, res["status"], single=True,
                                           outputs=want)
    ds.attrs["wall_seconds"] = _time.perf_counter() - wall0
    ds.attrs["compile_seconds"] = clock.seconds
    ds.attrs["integration_seconds"] = integration
    ds.attrs["t_final"] = float(res["t_final"][0])
    return ds


def _new_shape(comp: Compiled, points: int, t_eval, names, want, slots) -> bool:
    """Whether a solve of this shape is new to ``comp`` (then its programs are built ahead: :mod:`solver.ahead`)."""
    return comp.new_call_shape((points, len(t_eval), tuple(names), None if want is None else frozenset(want), slots,
                                tiered_mode(), ahead_enabled()))


def _series_needed(comp: Compiled, want) -> tuple[bool, bool, bool]:
    """Which derived series the outputs ``want`` need (None: all): (residual, energy, balance)."""
    needed = lambda *outs: want is None or not want.isdisjoint(outs)
    balance_names = balance_layout(comp.dae)[0]
    return needed("constraint_residual"), needed("energy", *balance_names), needed(*balance_names)


def _derived_series_ahead(comp: Compiled, points: int, t_eval, params, want) -> None:
    """Build :func:`_derived_series`' programs ahead (traced now, compiled in the background)."""
    residual, energy, balance = _series_needed(comp, want)
    comp.series_ahead(points, t_eval, params, residual=residual, energy=energy, balance=balance)


def _derived_series(comp: Compiled, values, t_eval, params, want) -> tuple:
    """(residual, energy, balance) of a run or a batch: each only where an output in ``want`` needs it (None: all).

    A series not needed is None (the balance: an empty dict).
    """
    need_residual, need_energy, need_balance = _series_needed(comp, want)
    residual, energy = comp.output_series(values, t_eval, params, residual=need_residual, energy=need_energy)
    balance = comp.balance_series(values, t_eval, params, energy) if need_balance else {}
    return residual, energy, balance


# ----------------------------------------------------------------- many designs
def _check_outputs(dae, outputs, names, what: str = "batch") -> frozenset | None:
    """The checked ``outputs`` of :func:`solve_batch` (or, ``what="run"``, :func:`solve`) as a set (None: all).

    Raises:
        InputError: a name the batch's Dataset would not have, with the valid ones.
    """
    if outputs is None:
        return None
    if isinstance(outputs, str):
        raise InputError(f"outputs must be a list of output names, got the string {outputs!r}")
    valid = list(output_layout(dae)[0]) + list(sensitivity_layout(dae, None, names))
    if getattr(dae, "events", ()):
        valid += list(event_layout(dae))
        valid += [sensitivity_name(f"event_{what}", param) for what in ("time", "rate") for param in names]
    unknown = [name for name in outputs if name not in valid]
    if unknown:
        raise InputError(f"unknown output {unknown[0]!r}; the outputs of this {what} are {', '.join(valid)}")
    return frozenset(outputs)


def _params_table(dae, params_table, constants):
    """Checked (B, swept, full per-point parameters) from the table and the constants."""
    base = dae.param_values(constants)
    table = dict(params_table.items()) if params_table is not None else {}
    swept, B = {}, None
    for name, col in table.items():
        if name not in dae.params:
            raise InputError(f"params_table: {name!r} is not a parameter; the parameters are "
                             f"{', '.join(dae.param_names)}")
        if constants and name in constants:
            raise InputError(f"parameter {name!r} is both in params_table (varied) and in params (constant); "
                             "give it in one of them")
        try:
            a = np.asarray(col, dtype=float)
        except (TypeError, ValueError):
            raise InputError(f"params_table[{name!r}] must hold numbers") from None
        shape = dae.params[name].shape
        if a.shape[1:] != shape or a.ndim != 1 + len(shape):
            raise InputError(f"params_table[{name!r}] must have shape (points,) + {shape} (one value per point), "
                             f"got {a.shape}")
        if B is None:
            B = a.shape[0]
        elif a.shape[0] != B:
            raise InputError(f"params_table columns differ in length: {name!r} has {a.shape[0]} points, "
                             f"others {B}")
        swept[name] = a
    if B is None:
        B = 1
    if B < 1:
        raise InputError("params_table has no points")
    full = {k: np.broadcast_to(np.asarray(v, dtype=float), (B,) + np.shape(v)).copy() for k, v in base.items()}
    full.update(swept)
    return B, swept, {k: v for k, v in base.items() if k not in swept}, full


@one_at_a_time
def solve_batch(problem, params_table: Mapping | None = None, values: Mapping | Callable | None = None,
                fixed: Sequence[str] | None = None, *, params: Mapping | None = None, t_span=None, t_eval=None,
                samples: int | None = None, tol: float | None = None, order: int | None = None,
                max_steps: int | None = None, h_max: float | None = None, init: str | None = None,
                ipopt_options: Mapping | None = None, linear: str = "auto", mode: str | None = None,
                optimize: bool | None = None, slots: int | None = None, sensitivities: Sequence[str] | None = None,
                title: str | None = None, extra_attrs: Mapping | None = None, mask_failed: bool = True,
                outputs: Sequence[str] | None = None, batch_engine: bool | None = None, dataset: bool = True):
    """Solve many designs of one model at once: one Dataset with a ``point`` dimension.

    The one way to solve many designs (the sweep pipeline calls it): every
    point is initialised by vmapped Gauss–Newton (IPOPT for the points it
    misses), all are integrated together by
    :meth:`solver.integrate.integrator.Integrator.run_batch` on one compiled model, and
    :mod:`solver.results.solution` names the outputs as :func:`solve` does.  A point
    that fails (no consistent initial values, step too small, …) has its
    status code, its failure time and reason, and NaN series (or, with
    ``mask_failed=False``, its series up to the failure); it never stops the
    batch.

    Args:
        problem: a model from :func:`solver.load` (its problem data are the
            defaults of every argument below) or a :class:`solver.DAE`.
        params_table: parameter name -> values, one per point (shape
            ``(points,) + parameter shape``); the varied parameters.
        values: initial values and guesses in :func:`solve` syntax, shared by
            every point, or a function ``values(params) -> mapping`` of one
            point's full parameter dict (a model's default: its ``positions``
            evaluated at the point's parameters; the model's own is
            evaluated for every point in one pass where its kind can,
            :meth:`solver.models.model.Model.initial_values_table`, with
            the same numbers as point by point).
        fixed: names of values to keep exactly (default: the model's).
        params: parameter values shared by every point (the constants).
        t_span: (t0, t1); default the model's ``t0``/``tend`` (required for a DAE).
        t_eval, samples: output times, as for :func:`solve` (default the
            model's).
        tol, order, max_steps, h_max, init, ipopt_options, linear, mode, optimize: as
            for :func:`solve` (default the model's settings).
        slots: problems advanced together by ``run_batch`` (see there);
            None: the integrator's :meth:`~solver.integrate.integrator.Integrator.default_slots`.
        sensitivities: scalar parameter names P; adds ``d{var}_d{P}(point,
            time)`` as :func:`solve` does (forward mode through every
            point's initialisation and integration).
        title, extra_attrs: dataset title and attrs.
        mask_failed: True (default): a failed point's series are all NaN.
            False: they keep the samples up to its failure time, as a
            single :func:`solve` does, and are NaN after it (all NaN for a
            point that did not assemble: it has no consistent start).
        outputs: the outputs to build, by their names in the Dataset (a
            variable, ``NAME_d{k}``, ``constraint_residual``, ``energy``, a
            balance output, ``torque_{driver}``, ``d{var}_d{P}``, an event
            record); None: all of them.  What is not named is not assembled
            (nor its residual, energy or balance series computed): a caller
            that keeps a few outputs of a large batch (a sweep's store) pays
            for those only.  The integration is the same either way.
        batch_engine: for ``mode="auto"``, take the engine for batches (True)
            or the one for a single run (False; see
            :func:`solver.compiled.compiled_model`'s ``batch``).  None
            (default): for batches, except for one point, which is one run.
            A caller that runs few points in all (a small sweep) passes
            False: the single-run engine compiles up to twice as fast, and
            its slower steps cost few points little.
        dataset: True (default): return an ``xarray.Dataset``.  False: the
            same outputs as :class:`solver.results.solution.BatchArrays`
            (numpy arrays by name, the attributes alike), for a caller that
            reads arrays only: a sweep's batch, which spares the building of
            xarray's objects.

    Returns:
        xarray.Dataset with dims ``point`` and ``time`` (and component
        dims): each variable and ``NAME_d{k}``, ``constraint_residual``,
        ``energy`` where defined, ``status(point)`` (CF flags),
        ``steps(point)``, ``failure_time(point)`` (when a failed point's run
        stopped: t0 for no assembly, else the time of its last accepted
        step; NaN where the point did not fail) and ``failure_reason(point)``
        (text naming the model's parts, empty where it did not fail;
        :mod:`solver.analysis.failures`); the varied parameters are
        coordinates on ``point``, the constants are in ``attrs["parameters"]``,
        the initialisation messages of points that did not assemble in
        ``attrs["failures"]`` (JSON), and ``wall_seconds``; with ``outputs``,
        only those of the outputs (and ``status``, ``steps``,
        ``failure_time``, ``failure_reason``).  With ``dataset=False``, the
        same as a :class:`~solver.results.solution.BatchArrays`.

    Raises:
        InputError: unknown parameter names, columns of different lengths,
            bad settings, initial-value names that the DAE does not have,
            unknown ``outputs``.
    """
    wall0 = _time.perf_counter()
    model = problem if hasattr(problem, "dae") and hasattr(problem, "initial_values") else None
    dae = model.dae if model is not None else problem
    if not isinstance(dae, DAE):
        raise InputError(f"solve_batch needs a model from solver.load or a solver.DAE, got {type(problem).__name__}")
    if model is not None:
        if params:
            checked = model.check_params(params)  # the model's messages for derived/structural names
            params = {k: checked[k] for k in params}
        t_span = t_span if t_span is not None else (model.t0, model.tend)
        if t_eval is None and samples is None:
            t_eval = model.t_eval()
        tol = model.tol if tol is None else tol
        order = model.order if order is None else order
        max_steps = model.max_steps if max_steps is None else max_steps
        h_max = model.h_max if h_max is None else h_max
        init = model.init if init is None else init
        mode = getattr(model, "mode", "auto") if mode is None else mode
        optimize = getattr(model, "optimize", None) if optimize is None else optimize
        fixed = model.fixed if fixed is None else fixed
        values = values if values is not None else model.initial_values
        title = title or model.title
        extra = {"model_yaml": model.text, "model_kind": model.kind, "model_path": str(model.path or "")}
        extra.update(extra_attrs or {})
        extra_attrs = extra
    elif t_span is None:
        raise InputError("solve_batch: t_span=(t0, t1) is required for a DAE (a model has its own)")
    t0, t1 = _time_span(t_span)
    tol, p = _check_settings(1e-10 if tol is None else tol, order)
    max_steps = int(max_steps or 100_000)
    init = init or "auto"
    t_eval = _output_times(t0, t1, t_eval, samples)
    names = check_names(dae, sensitivities)
    want = _check_outputs(dae, outputs, names)
    B, swept, constants, full = _params_table(dae, params_table, params)
    # With sensitivities, "auto" takes the single-run engine choice (compact
    # above a small tape): the jvp of an unrolled step compiles for minutes
    # on a model the size of the RSCR (348 s against 89 s compact, measured
    # for one direction; workflows/benchmarks/results/sensitivity.txt).  So
    # does a batch of one point, which is one run as solve() makes it, and
    # for which compiling is most of the time (results/sweep.txt).
    batch_engine = B > 1 if batch_engine is None else bool(batch_engine)
    comp = compiled_model(dae, p, linear, mode or "auto", batch=not names and batch_engine,
                          optimize=True if optimize is None else optimize)
    integ = comp.integrator

    # Initial values per point (values may depend on the point's parameters).
    z_hat = np.zeros((B, integ.n_state))
    u_guess = np.zeros((B, dae.n))
    free = np.ones((B, integ.n_state), dtype=bool)
    messages = [""] * B
    bad = np.zeros(B, dtype=bool)
    if not callable(values):  # the same for every point: bad input raises, not a bad design
        spec = parse_values(integ, values, fixed)
        z_hat[:], u_guess[:], free[:] = spec.z_hat, spec.u_guess, spec.free
    else:
        # The model's own initial values: every point's in one pass over the
        # varying parameters' columns where its kind can (the same numbers as
        # point by point); else, or for a point that fails, one call per point.
        table = None
        if model is not None and values == model.initial_values:
            table = model.initial_values_table({k: (v if k in swept else v[0]) for k, v in full.items()},
                                               set(swept), B)
        if table is not None:
            try:
                z_hat, u_guess, free = parse_values_table(integ, table, fixed, B)
            except InputError:
                table = None
        for i in range(B) if table is None else ():
            p_i = {k: v[i] for k, v in full.items()}
            try:
                spec = parse_values(integ, values(p_i), fixed)
            except InputError as err:
                bad[i], messages[i] = True, f"initial values: {err}"
                continue
            z_hat[i], u_guess[i], free[i] = spec.z_hat, spec.u_guess, spec.free
    violated: list = []
    slots = integ.default_slots(B) if slots is None else slots
    ahead = not bad.all() and _new_shape(comp, B, t_eval, names, want, slots)
    if ahead:
        _integrate_ahead(integ, full, z_hat, u_guess, t0, t1, t_eval, tol, max_steps, h_max, slots, names)
    z0, ok, init_msgs = comp.consistent_points(full, t0, z_hat, free, method=init, ipopt_options=ipopt_options,
                                               violated=violated)
    ok &= ~bad
    messages = [m or im for m, im in zip(messages, init_msgs)]
    z0 = np.where(ok[:, None], z0, z_hat)
    if ahead:
        _derived_series_ahead(comp, B, t_eval, full, want)
    dz0 = None
    if names:
        dz0 = _start_tangents(comp, full, t0, z0, free, names, values, fixed)
    res = _integrate(integ, full, z0, u_guess, t0, t1, t_eval, tol, max_steps, h_max, slots, names, dz0)
    res["status"] = np.where(ok, res["status"], np.int8(st.NO_ASSEMBLY)).astype(np.int8)
    residual, energy, balance = _derived_series(comp, res["values"], t_eval, full, want)
    settings = {"tol": tol, "order": p, "max_steps": max_steps, "t0": t0, "t1": t1, "mode": integ.mode,
                "linear": integ.linear, "optimize": integ.optimize, "slots": int(slots)}
    times, reasons = failure_records(comp, model if model is not None else dae, res["status"], t0,
                                     res["t_final"], res["z_final"], res["u_final"], full,
                                     violated=[v if not ok_i else () for v, ok_i in zip(violated, ok)],
                                     messages=messages)
    failures = {
        "failure_time": (times, {"long_name": "time at which the point failed (NaN: it did not)",
                                 "units": getattr(dae, "time_units", "s")}),
        "failure_reason": (np.array(reasons, dtype=object),
                           {"long_name": "why the point failed, naming the model's parts (empty: it did not)"})}
    ds = batch_arrays(dae, res, t_eval, residual=residual, energy=energy, balance=balance, swept=swept,
                      constants=constants, settings=settings, messages=messages, title=title,
                      extra_attrs=extra_attrs, mask_failed=mask_failed, outputs=want, point_data=failures)
    if names:
        ds = _with_sensitivities(ds, dae, res["tangents"], names, res["status"], single=False,
                                 mask_failed=mask_failed, outputs=want)
        if "event_tangents" in res:
            ds = _with_event_sensitivities(ds, dae, res["event_tangents"], names, res["status"], single=False,
                                           outputs=want)
    if not mask_failed:
        ds = _mask_after_failure(ds, times, res["status"])
    ds.attrs["wall_seconds"] = _time.perf_counter() - wall0
    return ds.to_dataset() if dataset else ds


def _mask_after_failure(ds, times, status):
    """A batch's :class:`~solver.results.solution.BatchArrays` with each failed point's series NaN after its failure.

    A point that never assembled has all its samples NaN. The integrator
    writes an output row only when a step reaches it, so the rows after the
    failure are NaN already; this makes the rule explicit, and covers a
    point that did not assemble (its run started from the guesses, which
    are not a solution).
    """
    status = np.asarray(status)
    if not st.is_failure(status).any():
        return ds
    after = st.samples_after_failure(ds["time"], status, times) | (status == st.NO_ASSEMBLY)[:, None]
    for name, (dims, values, *attrs) in ds.data.items():
        if dims[:2] == ("point", "time") and values.dtype.kind == "f":
            values = values.copy()
            values[after] = np.nan
            ds[name] = (dims, values, *attrs)
    return ds
