"""The commands that run the solver on one model: ``check``, ``simulate``, ``equilibrium``, ``plot``, ``animate``."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.cli.common import (EXIT_FAILED, EXIT_OK, is_model_path, model_file_arg, note_progress, check_out,
                              split_text)
from sweep.cli.results import open_result, write_result

__all__ = ["cmd_check", "cmd_simulate", "cmd_equilibrium", "cmd_plot", "cmd_animate", "summary", "FINAL_MAX"]


def _parse_sets(items: Sequence[str], model) -> dict:
    """``--set L1=1.2 --set u=[0,0,1]`` -> parameter dict (values may be expressions)."""
    from solver.models.expr import evaluate_constant

    out = {}
    known = model.all_params()
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            raise InputError(f"--set {item!r}: expected NAME=VALUE, e.g. --set L1=1.2")
        value = evaluate_constant(text.strip(), known, path=f"--set {name}")
        out[name] = value
    model.check_params(out)
    _check_set_values(out, model)
    return out


def _check_set_values(params: dict, model) -> None:
    """``--set`` values against the model's value rules (positive masses, ...).

    The model file's quantities are checked at its defaults when it is read;
    a value given here is checked by the same rules before anything runs.

    Raises:
        InputError: located at the offending quantity in the model file,
            with its value and rule, naming the ``--set`` items involved.
    """
    from solver.models import ValueRangeError

    try:
        model.check_values(params)
    except ValueRangeError as err:
        given = " ".join(f"--set {n}={_set_text(params[n])}" for n in err.names if n in params)
        raise InputError(f"{err.message}; given by {given or '--set'}", file=err.file,
                         path=err.path, line=err.line) from None


def _set_text(value) -> str:
    return f"{float(value):g}" if np.ndim(value) == 0 else str(np.asarray(value).tolist())


def _apply_sets(items: Sequence[str], model):
    """``--set`` values: structural ones rebuild the model, the others are run parameters.

    A structural parameter (one that fixes the model's size: the number of
    particles of a repeated part, the cloth's grid) cannot vary per run of
    one compiled model; setting it builds the model again from its file with
    ``PhysicalParams`` overridden, and says so.

    Returns:
        ``(model, params)``.

    Raises:
        InputError: a malformed item, an unknown name, or a value the rebuilt
            model refuses (located in the model file).
    """
    from solver.models.expr import evaluate_constant

    structural = set(model.param_info.structural)
    rest, sizes = [], {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if name in structural and eq and text.strip():
            sizes[name] = evaluate_constant(text.strip(), model.all_params(), path=f"--set {name}")
        else:
            rest.append(item)
    if sizes:
        from sweep.pipeline import rebuild_structural, structural_sizes

        for name, value in sizes.items():   # a vector value is refused as it is written
            if np.ndim(value) != 0:
                raise InputError(f"--set {name}={value}: '{name}' fixes the model's size and must "
                                 f"be a whole number", file=model.path)
        given = dict(sizes)
        sizes = structural_sizes(given, lambda name, value: InputError(
            f"--set {name}={given[name]}: '{name}' fixes the model's size and must be a whole "
            f"number", file=model.path))
        said = ", ".join(f"{k} = {v}" for k, v in sizes.items())
        note_progress(f"{said}: structural (it fixes the model's size), so the model is built again "
                  f"and compiled for it")
        model = rebuild_structural(model, sizes)
    return model, _parse_sets(rest, model)


def _final_state(ds) -> dict:
    """Every variable and state derivative at the last output time."""
    out = {}
    for name in ds.attrs.get("variables", []):
        if isinstance(name, bytes):
            name = name.decode()
        k = 0
        while True:
            key = name if k == 0 else f"{name}_d{k}"
            if key not in ds:
                break
            arr = np.asarray(ds[key].isel(time=-1).values, dtype=float)
            primes = "'" * k
            if arr.ndim == 0:
                out[name + primes] = _num(arr)
            else:
                for i, x in enumerate(arr.ravel()):
                    out[f"{name}[{i}]{primes}"] = _num(x)
            k += 1
    return out


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def summary(ds, model=None) -> dict:
    """The ``simulate --json`` object of a result Dataset.

    Args:
        ds: the result.
        model: its model (for ``conservative``; default: the ``conservative``
            attr the result records).

    Returns:
        dict with status (meaning), status_code, steps, t_end, final,
        max_constraint_residual; where the result has an energy:
        energy_change (E(t_end) - E(t0)), dissipated (the Rayleigh forces'
        integral, where the model has one), and energy_drift (max |E(t) -
        E(t0)|) only where the model is conservative (no dissipation, applied
        forces or time dependence: else the change is physics, not drift);
        conservative (where known), wall_seconds, compile_seconds (the part
        of it spent tracing and compiling), integration_seconds (the steps
        alone), build (``quick`` or ``optimised``: the build the run went
        on); with events, ``events`` (name ->
        count and first time) and ``event_count``.
    """
    code = int(ds["status"].values)
    res = np.asarray(ds["constraint_residual"].values, dtype=float)
    out = {
        "title": ds.attrs.get("title"),
        "status": st.meaning(code),
        "status_code": code,
        "steps": int(ds["steps"].values),
        "t_end": _num(ds.attrs.get("t_final", float(ds["time"].values[-1]))),
        "final": _final_state(ds),
        "max_constraint_residual": _num(np.nanmax(res)) if np.isfinite(res).any() else None,
    }
    if "event_count" in ds:
        from solver.results.plot import event_marks

        out["events"] = {name: {"count": int(times.size), "first": _num(times[0])}
                         for name, times in event_marks(ds).items()}
        out["event_count"] = int(ds["event_count"].values)
    conservative = model.conservative if model is not None else ds.attrs.get("conservative")
    out.update(_energy_summary(ds, conservative))
    if conservative is not None:
        out["conservative"] = bool(conservative)
    out["wall_seconds"] = _num(ds.attrs.get("wall_seconds", float("nan")))
    out["compile_seconds"] = _num(ds.attrs.get("compile_seconds", float("nan")))
    out["integration_seconds"] = _num(ds.attrs.get("integration_seconds", float("nan")))
    out["build"] = str(ds.attrs.get("solver_build", "optimised"))
    return out


def _last_finite(a: np.ndarray) -> float | None:
    ok = np.isfinite(a)
    return _num(a[ok][-1]) if ok.any() else None


def _energy_summary(ds, conservative) -> dict:
    """energy_change, dissipated and (conservative models only) energy_drift."""
    if "energy" not in ds:
        return {}
    e = np.asarray(ds["energy"].values, dtype=float)
    ok = np.isfinite(e)
    out = {"energy_change": _last_finite(e - e[ok][0]) if ok.any() else None}
    if "dissipated" in ds:
        out["dissipated"] = _last_finite(np.asarray(ds["dissipated"].values, dtype=float))
    if conservative is None or conservative:
        out["energy_drift"] = _num(np.max(np.abs(e[ok] - e[ok][0]))) if ok.any() else None
    return out


# ``simulate --json`` keeps ``final`` inline up to this many values, else writes a file.
FINAL_MAX = 1000


def _final_path(args, model) -> Path:
    """Where a large ``final`` goes: next to ``--out``, else next to the model file."""
    base = Path(args.out) if args.out else Path(model.path or args.model)
    return base.with_name(base.name.rsplit(".", 1)[0] + ".final.json")


def spill_final(info: dict, args, model) -> dict:
    """Move a ``final`` of more than :data:`FINAL_MAX` values into a JSON file.

    Returns:
        ``info`` with ``final`` replaced by ``final_file`` (its path) and
        ``final_count`` in the same place, or unchanged when small.

    Raises:
        InputError: the file cannot be written.
    """
    final = info.get("final") or {}
    if len(final) <= FINAL_MAX:
        return info
    path = _final_path(args, model)
    try:
        path.write_text(json.dumps(final), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the final state file {path} ({exc.strerror or exc}); "
                         "give --out in a writable folder") from None
    note_progress(f"final state has {len(final)} values (more than {FINAL_MAX}): wrote it to {path}")
    out = {}
    for key, value in info.items():
        if key == "final":
            out["final_file"], out["final_count"] = str(path), len(final)
        else:
            out[key] = value
    return out


#: Seconds of steps on a quick build past which ``simulate`` suggests ``--optimize``.
QUICK_RUN_HINT_SECONDS = 1.0


def _build_mode(model, build: str) -> tuple[str, str]:
    """The :mod:`solver.tiered` mode of a one-off run, and what chose it.

    ``build`` is ``args.build`` (auto, quick, optimised).  The flags win over
    the model file's ``SolverParams.Integration.optimize``, which wins over
    the default: quick unless the optimised build is stored.  The mode
    ``off`` stands for a quick compiled model (``optimize=False``).
    """
    flags = {"auto": "", "quick": "--quick-compile", "optimised": "--optimize"}
    why = flags[build]
    if build == "auto" and model.optimize is not None:
        build = "optimised" if model.optimize else "quick"
        why = f"SolverParams.Integration.optimize: {'true' if model.optimize else 'false'}"
    return {"auto": "quick", "quick": "off", "optimised": "optimised"}[build], why


def _simulate(model, params=None, build: str = "auto"):
    from solver import tiered_compiles

    mode, why = _build_mode(model, build)
    how = {"off": f"; compiling quickly ({why})",
           "quick": "; compiling a quick build unless an optimised one is stored (--optimize builds it)",
           "optimised": f"; compiling the optimised build ({why}) the first time takes a while"}[mode]
    note_progress(f"solving '{model.title}' ({model.dae.n} unknowns, t = {model.t0:g} .. {model.tend:g}){how}")
    t = time.perf_counter()
    # --quick-compile is a quick compiled model of its own (optimize=False): every program quick.
    with tiered_compiles(mode):
        ds = model.solve(params, **({"optimize": False} if mode == "off" else {}))
    code = int(ds["status"].values)
    wall = time.perf_counter() - t
    compile_s = float(ds.attrs.get("compile_seconds", 0.0))
    # The steps' own time: the rest of "solving" in a first solve is setting up (the integrator's
    # tables, consistent initial values, the outputs), which a user would otherwise read as stepping.
    steps_s = ds.attrs.get("integration_seconds")
    steps_in = f" in {steps_s:.2f} s" if steps_s is not None else ""
    build = ds.attrs.get("solver_build", "optimised")
    note_progress(f"{split_text(wall, compile_s)}: {st.meaning(code)}, {int(ds['steps'].values)} steps{steps_in} "
                  f"on {'a quick' if build == 'quick' else 'the optimised'} build")
    if build == "quick" and mode == "quick" and steps_s is not None and steps_s > QUICK_RUN_HINT_SECONDS:
        note_progress(f"the steps took {steps_s:.1f} s on a quick build, which runs up to 10x slower: --optimize "
                      f"compiles the optimised build once, and later runs of this model then use it")
    return ds


def _model_for_run(ds, model_path: str | None):
    """The Model of a stored run: from --model, or the YAML text it records."""
    from solver.models import load, load_data
    from solver.models.yamlio import load_yaml

    if model_path:
        return load(model_file_arg(model_path))
    text = ds.attrs.get("model_yaml")
    if not text:
        raise InputError("this result does not record its model; pass --model MODEL.yaml")
    data, loc = load_yaml(text, file=str(ds.attrs.get("model_path") or "model"))
    over = ds.attrs.get("model_overrides")
    return load_data(data, loc, loc.file, json.loads(over) if over else None)


def _mechanical_dof(dae) -> str:
    """The talk's DOF: coordinates minus constraints (half the initial values).

    A Lagrangian DAE counts its coordinates and constraint rows; another DAE
    whose differentiated unknowns are all second order (a mechanism written
    out) has half as many as its initial values; otherwise it is undefined.
    Drivers are not counted as constraints of the mechanism: they prescribe
    some of its degrees of freedom, which are named, and those left free are
    counted (a crank driven at constant speed: 1, 1 of them driven: 0 free).
    """
    if hasattr(dae, "n_q") and hasattr(dae, "n_c"):
        drivers = tuple(getattr(dae, "drivers", ()))
        dof = int(dae.n_q) - (int(dae.n_c) - len(drivers))
        if not drivers:
            return str(dof)
        names = ", ".join(d.name for d in drivers)
        return f"{dof}, {len(drivers)} of them driven ({names}): {dof - len(drivers)} free"
    d = np.asarray(dae.structure.d, dtype=int)
    if d.size and set(d.tolist()) <= {0, 2}:
        return str(int(dae.structure.dof) // 2)
    return "not defined (not a second-order system)"


# ------------------------------------------------------------------ commands
def cmd_check(args) -> int:
    """Print variables, the structure table, index and DOF, then check the initial point.

    The structure needs no compilation; the check then computes the
    consistent initial point and the system Jacobian there
    (:func:`solver.analysis.diagnose.check_jacobian`) and prints its condition number.

    Returns:
        0 when the Jacobian is regular.

    Raises:
        InputError: bad model, no consistent initial point, or a (numerically)
            singular system Jacobian, naming the dependent equations and the
            undetermined unknowns (exit 2).
    """
    from solver.analysis.diagnose import check_jacobian
    from solver.models import load

    model = load(model_file_arg(args.model))
    dae = model.dae
    s = dae.structure
    print(f"{model.title}  (Kind: {model.kind}, {args.model})")
    print("variables: " + ", ".join(
        v.name if v.shape == () else f"{v.name}[{v.size}]" for v in dae.variables))
    if model.params:
        print("parameters: " + ", ".join(f"{k} = {np.asarray(v).tolist()}"
                                         for k, v in model.params.items()))
    derived = model.param_info.derived
    if derived:
        print("derived: " + ", ".join(f"{k} = {e.text}" for k, e in derived))
    if model.param_info.structural:
        print("structural (fixed at load): " + ", ".join(
            f"{k} = {np.asarray(v).tolist()}" for k, v in model.param_info.structural.items()))
    print(str(s))
    print(f"index: {s.index}")
    print(f"initial values (positions and velocities; the DAE's DOF): {s.dof}")
    print(f"mechanical DOF (coordinates - constraints): {_mechanical_dof(dae)}", flush=True)
    from solver import compile_clock

    with compile_clock() as clock:
        jac = check_jacobian(model)
    print(jac.summary())
    if jac.singular:   # the error alone on stderr, as for every bad input
        raise InputError(jac.problem(), file=str(args.model))
    note_progress(split_text(clock.wall_seconds, clock.seconds))
    return EXIT_OK


def _figure(value) -> str:
    """A summary figure for people: three significant digits (``--json`` keeps them all)."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def cmd_simulate(args) -> int:
    """Solve once; optional result file and JSON summary."""
    from solver.models import load

    if args.out and not args.out.endswith((".zarr", ".nc")):
        raise InputError(f"--out {args.out!r}: the result file must end in .zarr or .nc")
    if args.out:
        check_out(args.out, folder=args.out.endswith(".zarr"), what="a Zarr store")
    model, params = _apply_sets(args.set, load(model_file_arg(args.model)))
    ds = _simulate(model, params, args.build)
    if args.out:
        write_result(ds, args.out)
        note_progress(f"wrote {args.out}")
    info = summary(ds, model)
    if args.json:
        print(json.dumps(spill_final(info, args, model)))
    else:
        print(f"{model.title}: {info['status']} at t = {_figure(info['t_end'])}, {info['steps']} steps, "
              f"max constraint residual {_figure(info['max_constraint_residual'])}"
              + "".join(f", {key.replace('_', ' ')} {_figure(info[key])}"
                        for key in ("energy_drift", "energy_change", "dissipated") if key in info))
    return EXIT_FAILED if st.is_failure(int(ds["status"].values)) else EXIT_OK


def cmd_equilibrium(args) -> int:
    """Find a stationary equilibrium (:func:`solver.equilibrium`) and print it.

    Returns:
        0 when an equilibrium is found.

    Raises:
        InputError: bad model, ``--set`` or ``--guess``, or no equilibrium
            found from the guess (the message says what to change; exit 2).
    """
    from solver import equilibrium
    from solver.models.expr import evaluate_constant
    from solver.models import load

    model, params = _apply_sets(args.set, load(model_file_arg(args.model)))
    known = model.all_params(params)
    guess = {}
    for item in args.guess:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            raise InputError(f"--guess {item!r}: expected NAME=VALUE, e.g. --guess x=0.5 or "
                             f"--guess A=[0.7,0.7]")
        guess[name] = evaluate_constant(text.strip(), known, path=f"--guess {name}")
    note_progress(f"finding an equilibrium of '{model.title}' ({model.dae.n} unknowns)")
    from solver import compile_clock

    with compile_clock() as clock:
        result = equilibrium(model, guess=guess, params=params, method=args.method)
    note_progress(split_text(clock.wall_seconds, clock.seconds))
    print(json.dumps(result.to_dict()) if args.json else result.summary())
    return EXIT_OK


def cmd_plot(args) -> int:
    """Time series PNG of a stored run or of a model (solved first)."""
    from solver.results.plot import plot_timeseries

    check_out(args.out, folder=False)
    if is_model_path(args.source):
        from solver.models import load

        ds = _simulate(load(model_file_arg(args.source)), build=args.build)
    else:
        ds = open_result(args.source)
    plot_timeseries(ds, args.out, variables=args.vars)
    note_progress(f"wrote {args.out}")
    return EXIT_OK


def cmd_animate(args) -> int:
    """Animation of a model (solved first) or a stored run."""
    from solver.results.plot import animate, check_animation_output

    check_out(args.out, folder=False)
    check_animation_output(args.out)   # format and ffmpeg before a solve that may take minutes
    if is_model_path(args.source):
        from solver.models import load

        model = load(model_file_arg(args.source))
        ds = _simulate(model, build=args.build)
    else:
        ds = open_result(args.source)
        model = _model_for_run(ds, args.model)
    animate(model, ds, args.out, frames=args.frames)
    note_progress(f"wrote {args.out}")
    return EXIT_OK
