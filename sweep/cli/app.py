"""The ``mechsweep`` command line (docs/reference/cli.md).

::

    mechsweep check MODEL.yaml
    mechsweep simulate MODEL.yaml [--set NAME=VALUE ...] [--out run.zarr|run.nc] [--json]
    mechsweep equilibrium MODEL.yaml [--set NAME=VALUE ...] [--guess NAME=VALUE ...] [--json]
    mechsweep plot RUN.zarr|RUN.nc|MODEL.yaml [--vars x y ...] --out fig.png
    mechsweep animate MODEL.yaml|RUN --out anim.gif|anim.mp4|anim.html
    mechsweep sweep SWEEP.yaml --out STORE.zarr [...]
    mechsweep status STORE.zarr [--verify]   (exit 1: a damaged batch)
    mechsweep design DESIGN.yaml [--out OUT.zarr] [--from STORE.zarr --starts K] [--workers N]
    mechsweep run-default          (make run: the default sweep)

Exit codes: 0 success, 1 failed simulation (or failed sweep points), 2 bad
input (every :class:`solver.errors.InputError` is printed on stderr without a
traceback), 3 an incomplete sweep (batches left pending: interrupted,
scheduler lost, storage fault; the message gives the command that resumes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.cli.sweep_command import main_default, main_sweep
from sweep.store import write_dataset

__all__ = ["main", "build_parser", "summary"]

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as InputError (exit 2, one message)."""

    def error(self, message):
        raise InputError(f"{message} (see 'mechsweep {self.prog.split()[-1]} --help')"
                         if " " in self.prog else f"{message} (see 'mechsweep --help')")


def _at_least(minimum: int):
    """An argparse type: a whole number >= ``minimum`` (counts such as ``--workers``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
        return value

    return parse


_positive_int = _at_least(1)


def _seconds(text: str) -> float:
    """An argparse type: a number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}") from None
    if not value >= 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    """An argparse type: a number > 0 (seconds such as ``--progress-every``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value

#: ``design --workers``: 0 runs the starts in this process.
_whole_number = _at_least(0)


def _add_quick_compile(parser: argparse.ArgumentParser) -> None:
    """The ``--quick-compile`` flag of the commands that solve a model once."""
    parser.add_argument("--quick-compile", action="store_true",
                        help="when solving a model file: compile without LLVM's optimisation, up to 2x faster "
                             "to compile and several times slower to run (as SolverParams.Integration.optimize: "
                             "false)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    p = _Parser(prog="mechsweep", description="Mechanism simulation and design sweeps "
                "(Taylor-series DAE solver).")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.required = True
    c = sub.add_parser("check", help="structure of a model (variables, Σ offsets, index, DOF) and "
                       "the condition of its system Jacobian at the consistent initial point "
                       "(exit 2 when singular)")
    c.add_argument("model")
    s = sub.add_parser("simulate", help="solve a model once")
    s.add_argument("model")
    s.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a parameter (repeatable); a structural one (a size, such as "
                        "the number of repeated parts) builds the model again")
    s.add_argument("--out", help="write the result (.zarr or .nc)")
    s.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    _add_quick_compile(s)
    eq = sub.add_parser("equilibrium", help="a stationary equilibrium of a model: configuration, "
                        "multipliers, stiffness eigenvalues, frequencies and stability (exit 2 "
                        "when none is found)")
    eq.add_argument("model")
    eq.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a parameter (repeatable)")
    eq.add_argument("--guess", action="append", default=[], metavar="NAME=VALUE",
                    help="starting value of a variable instead of the model's positions "
                         "(repeatable): x=0.5, A=[0.7,0.7], A[1]=-L; values may use the parameters")
    eq.add_argument("--method", default="auto", choices=("auto", "newton", "settle", "ipopt"),
                    help="auto (default): Newton from the guess, where it fails let the model "
                         "settle (over-damped motion: a stable equilibrium; pushed off an "
                         "unstable one it reaches or starts at), then IPOPT")
    eq.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    pl = sub.add_parser("plot", help="time series of a run or model as a PNG")
    pl.add_argument("source", help="RUN.zarr, RUN.nc or MODEL.yaml (simulated first)")
    pl.add_argument("--vars", nargs="+", help="variables to plot (default: all unknowns)")
    pl.add_argument("--out", required=True)
    _add_quick_compile(pl)
    an = sub.add_parser("animate", help="animation of a run or model (GIF, MP4 or HTML)")
    an.add_argument("source", help="MODEL.yaml, or a run written by simulate --out")
    an.add_argument("--model", help="model file for a run (default: the one the run records)")
    an.add_argument("--out", required=True)
    an.add_argument("--frames", type=_positive_int,
                    help="number of frames (default: Animation.frames)")
    _add_quick_compile(an)
    sw = sub.add_parser("sweep", help="run a design sweep into a Zarr store")
    sw.add_argument("sweep", metavar="SWEEP.yaml")
    sw.add_argument("--out")
    sw.add_argument("--workers", type=_positive_int, help="local worker processes (>= 1)")
    group = sw.add_mutually_exclusive_group()
    group.add_argument("--scheduler")
    group.add_argument("--scheduler-file")
    group.add_argument("--cluster")
    mode = sw.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true")
    mode.add_argument("--overwrite", action="store_true")
    mode.add_argument("--retry-failed", action="store_true")
    sw.add_argument("--dry-run", action="store_true",
                    help="check the sweep against its model (parameter and output names, store "
                         "size) and print points, batches and axes; runs nothing")
    sw.add_argument("--estimate", action="store_true",
                    help="with --dry-run (implied): compile and run the first batch and print "
                         "compile seconds, seconds per point and the estimated total")
    sw.add_argument("--progress-every", type=_positive_float, default=30.0, metavar="SECONDS",
                    help="when stderr is not a terminal (a batch job's log): a progress line at "
                         "most every SECONDS (default 30)")
    sw.add_argument("--worker-timeout", type=_seconds, default=None, metavar="SECONDS",
                    help="stop (exit 3, batches left pending) when the Dask cluster has had no worker "
                         "for SECONDS (default 60; 0 waits for ever)")
    sw.add_argument("-v", "--verbose", action="store_true",
                    help="show the traceback of a storage or cluster fault")
    stat = sub.add_parser("status", help="progress, status counts and integrity of a sweep store "
                          "(exit 1 when a batch is damaged)")
    stat.add_argument("store")
    stat.add_argument("--verify", action="store_true",
                      help="read, checksum and decode every chunk (default: a quick check of "
                           "commit records and chunk files)")
    de = sub.add_parser("design", help="kinematic design: fit design parameters so that a "
                        "point's path follows a target curve (gradients from sensitivities)")
    de.add_argument("design", metavar="DESIGN.yaml")
    de.add_argument("--out", help="write the optimisation history (a .zarr store) and its "
                    "picture (OUT.png)")
    de.add_argument("--from", dest="from_store", metavar="STORE.zarr",
                    help="start from the best points of this sweep store")
    de.add_argument("--starts", type=_positive_int, metavar="K",
                    help="with --from: how many of its best points to start from (default 1)")
    de.add_argument("--workers", type=_whole_number,
                    help="LocalCluster worker processes (default: one per core, at most one per "
                         "start; a single start runs in this process); 0 runs the starts one "
                         "after another in this process")
    target = de.add_mutually_exclusive_group()
    target.add_argument("--scheduler")
    target.add_argument("--scheduler-file")
    target.add_argument("--cluster")
    de.add_argument("--overwrite", action="store_true", help="replace an existing history store")
    de.add_argument("--no-plot", action="store_true", help="do not write OUT.png")
    sub.add_parser("run-default", help="the default RSCR sweep into out/rscr.zarr (make run)")
    return p


# ------------------------------------------------------------------ helpers
def _progress(message: str) -> None:
    print(f"[mechsweep] {message}", file=sys.stderr, flush=True)


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
        _progress(f"{said}: structural (it fixes the model's size), so the model is built again "
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
        of it spent tracing and compiling); with events, ``events`` (name ->
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


def _spill_final(info: dict, args, model) -> dict:
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
    _progress(f"final state has {len(final)} values (more than {FINAL_MAX}): wrote it to {path}")
    out = {}
    for key, value in info.items():
        if key == "final":
            out["final_file"], out["final_count"] = str(path), len(final)
        else:
            out[key] = value
    return out


# Inside a netCDF result file: the attributes stored as JSON text, listed
# under this attribute (see _netcdf_safe).
NC_JSON_ATTRS = "mechsweep_json_attrs"


def _netcdf_safe(ds):
    """The Dataset with attributes that netCDF-3 (scipy's writer) can store.

    That writer keeps its own ``variables`` attribute (the Dataset's would
    overwrite it) and stores neither booleans, lists of strings nor
    mappings: such attributes go in as JSON text, listed in
    :data:`NC_JSON_ATTRS`, and :func:`_from_netcdf` restores them.
    """
    plain, encoded = {}, []
    for key, value in ds.attrs.items():
        simple = isinstance(value, (int, float, str)) and not isinstance(value, bool)
        numeric_list = (isinstance(value, (list, tuple, np.ndarray))
                        and np.asarray(value).dtype.kind in "if" and np.asarray(value).ndim == 1)
        if key != "variables" and (simple or numeric_list):
            plain[key] = value
        else:
            plain[key if key != "variables" else "mechsweep_variables"] = json.dumps(
                value.tolist() if isinstance(value, np.ndarray) else value, default=str)
            encoded.append(key)
    plain[NC_JSON_ATTRS] = json.dumps(encoded)
    ds.attrs = plain
    return ds


def _from_netcdf(ds):
    """Undo :func:`_netcdf_safe` on a Dataset read from a result file."""
    encoded = json.loads(ds.attrs.pop(NC_JSON_ATTRS, "[]"))
    for key in encoded:
        stored = "mechsweep_variables" if key == "variables" else key
        if stored in ds.attrs:
            ds.attrs[key] = json.loads(ds.attrs.pop(stored))
    return ds


def write_result(ds, path: str) -> None:
    """Write a Dataset as Zarr (``.zarr``) or netCDF (``.nc``).

    Raises:
        InputError: another extension, or the file cannot be written
            (permissions, a full disk).
    """
    if not path.endswith((".zarr", ".nc")):
        raise InputError(f"--out {path!r}: the result file must end in .zarr or .nc")
    try:
        if path.endswith(".zarr"):
            write_dataset(ds, path)
        else:
            ds.copy(deep=False).assign_attrs().pipe(_netcdf_safe).to_netcdf(path)
    except OSError as exc:
        raise InputError(f"--out {path}: cannot write it ({exc.strerror or exc})") from None


def open_result(path: str):
    """Open a result written by ``simulate --out`` (.zarr folder or .nc file).

    Raises:
        InputError: missing or unreadable.
    """
    import xarray as xr

    p = Path(path)
    if not p.exists():
        raise InputError("file not found", file=path)
    try:
        if path.endswith(".nc"):
            return _from_netcdf(xr.open_dataset(path).load())
        return xr.open_zarr(path, consolidated=False).load()
    except Exception as exc:  # xarray/zarr raise many types for a bad store
        raise InputError(f"cannot read a result from it: {exc}", file=path) from None


def _is_model(path: str) -> bool:
    return path.endswith((".yaml", ".yml"))


def _model_file(path: str) -> Path:
    """The MODEL argument as a path, checked to be a readable regular file.

    Always a :class:`~pathlib.Path`, so that a name that is not a file is
    never read as YAML text (``solver.load`` also accepts text).

    Raises:
        InputError: missing, a folder, or not a regular file (``/dev/null``).
    """
    from solver.models.yamlio import check_regular_file

    check_regular_file(Path(path), path)
    return Path(path)


def _is_zarr_store(path: Path) -> bool:
    """A Zarr v3 (``zarr.json``) or v2 (``.zgroup``) store's folder."""
    return (path / "zarr.json").is_file() or (path / ".zgroup").is_file()


def check_out(out: str, *, folder: bool, overwrite: bool = False, what: str = "the output") -> None:
    """Refuse an ``--out`` target that would be misused, before any work is done.

    :func:`_check_out` with the file system's own refusals (a name too long,
    a loop of links, no permission to look) as messages instead of tracebacks.

    Raises:
        InputError: see :func:`_check_out`; also a path the system cannot
            look at.
    """
    try:
        if "://" in out:
            _check_object_store_out(out, folder=folder, what=what)
        else:
            _check_out(out, folder=folder, overwrite=overwrite, what=what)
    except OSError as exc:
        shown = out if len(out) <= 200 else out[:100] + "..." + out[-50:]
        raise InputError(f"--out {shown}: cannot use this path ({exc.strerror or exc}); choose "
                         f"another") from None


def _check_object_store_out(out: str, *, folder: bool, what: str) -> None:
    """An object-store ``--out`` (``s3://bucket/prefix``): only stores go there, into an existing bucket."""
    from sweep.location import StoreLocation

    if not folder:
        raise InputError(f"--out {out}: only Zarr stores can be written to an object store; give "
                         f"a local file name")
    try:
        where = StoreLocation(out)
    except (ImportError, ValueError) as exc:
        scheme = out.split("://", 1)[0]
        hint = " (pip install 'mechsweep[s3]')" if scheme == "s3" else ""
        raise InputError(f"--out {out}: cannot open {scheme}:// URLs here ({exc}); install the "
                         f"package for them{hint} or give a local path") from None
    bucket = where.root.split("/", 1)[0]
    if "/" not in where.root.strip("/"):
        raise InputError(f"--out {out}: give a store inside the bucket, e.g. "
                         f"{where.url.split('://')[0]}://{bucket}/sweep.zarr")
    if not where.fs.exists(bucket):
        raise InputError(f"--out {out}: the bucket {bucket!r} does not exist or cannot be seen with "
                         f"these credentials; create it first, or check the environment's credentials "
                         f"and endpoint")
    if where.exists() and not where.is_store():
        raise InputError(f"--out {out}: holds objects that are not {what} (no Zarr metadata); "
                         f"choose another prefix")


def _check_out(out: str, *, folder: bool, overwrite: bool = False, what: str = "the output") -> None:
    """Refuse an ``--out`` target that would be misused (see :func:`check_out`).

    Args:
        out: the ``--out`` value.
        folder: the output is a folder (a Zarr store) rather than a file.
        overwrite: ``--overwrite`` was given (mentioned in the messages: it
            replaces stores only, never other files or folders).
        what: the output's name in messages (``"a sweep store"``).

    Raises:
        InputError: ``out`` is a symbolic link; its folder does not exist; for
            a folder output, an existing non-folder or a non-empty folder that
            is no Zarr store; for a file output, an existing folder or special
            file.  The target is never touched.
    """
    p = Path(out)
    note = "; --overwrite replaces only a store, never other files or folders" if overwrite else ""
    if p.is_symlink():
        raise InputError(f"--out {out}: is a symbolic link; give the real path instead: mechsweep "
                         f"does not write or delete through links{note}")
    parent = p.parent
    if not parent.is_dir():
        raise InputError(f"--out {out}: the folder {parent} does not exist" if not parent.exists()
                         else f"--out {out}: {parent} is not a folder")
    if not p.exists():
        return
    if folder and not p.is_dir():
        raise InputError(f"--out {out}: is an existing file, not {what} (a .zarr folder); choose "
                         f"another path{note}")
    if folder and not _is_zarr_store(p) and any(p.iterdir()):
        raise InputError(f"--out {out}: is a folder that is not {what} (no Zarr metadata); choose "
                         f"another path{note}")
    if not folder and p.is_dir():
        raise InputError(f"--out {out}: is a folder; give a file name")
    if not folder and not p.is_file():
        raise InputError(f"--out {out}: is not a regular file; give a file name")


def _simulate(model, params=None, quick_compile: bool = False):
    how = "; compiling quickly (--quick-compile)" if quick_compile else "; compiling the first time takes a while"
    _progress(f"solving '{model.title}' ({model.dae.n} unknowns, t = {model.t0:g} .. {model.tend:g}){how}")
    t = time.perf_counter()
    ds = model.solve(params, **({"optimize": False} if quick_compile else {}))
    code = int(ds["status"].values)
    wall = time.perf_counter() - t
    compile_s = float(ds.attrs.get("compile_seconds", 0.0))
    _progress(f"finished in {wall:.1f} s ({compile_s:.1f} s compiling, {wall - compile_s:.2f} s solving): "
              f"{st.meaning(code)}, {int(ds['steps'].values)} steps")
    return ds


def _model_for_run(ds, model_path: str | None):
    """The Model of a stored run: from --model, or the YAML text it records."""
    from solver.models import load, load_data
    from solver.models.yamlio import load_yaml

    if model_path:
        return load(_model_file(model_path))
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

    model = load(_model_file(args.model))
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
    jac = check_jacobian(model)
    print(jac.summary())
    if jac.singular:
        raise InputError(jac.problem(), file=str(args.model))
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
    model, params = _apply_sets(args.set, load(_model_file(args.model)))
    ds = _simulate(model, params, args.quick_compile)
    if args.out:
        write_result(ds, args.out)
        _progress(f"wrote {args.out}")
    info = summary(ds, model)
    if args.json:
        print(json.dumps(_spill_final(info, args, model)))
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

    model, params = _apply_sets(args.set, load(_model_file(args.model)))
    known = model.all_params(params)
    guess = {}
    for item in args.guess:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            raise InputError(f"--guess {item!r}: expected NAME=VALUE, e.g. --guess x=0.5 or "
                             f"--guess A=[0.7,0.7]")
        guess[name] = evaluate_constant(text.strip(), known, path=f"--guess {name}")
    _progress(f"finding an equilibrium of '{model.title}' ({model.dae.n} unknowns)")
    result = equilibrium(model, guess=guess, params=params, method=args.method)
    print(json.dumps(result.to_dict()) if args.json else result.summary())
    return EXIT_OK


def cmd_plot(args) -> int:
    """Time series PNG of a stored run or of a model (solved first)."""
    from solver.results.plot import plot_timeseries

    check_out(args.out, folder=False)
    if _is_model(args.source):
        from solver.models import load

        ds = _simulate(load(_model_file(args.source)), quick_compile=args.quick_compile)
    else:
        ds = open_result(args.source)
    plot_timeseries(ds, args.out, variables=args.vars)
    _progress(f"wrote {args.out}")
    return EXIT_OK


def cmd_animate(args) -> int:
    """Animation of a model (solved first) or a stored run."""
    from solver.results.plot import animate, check_animation_output

    check_out(args.out, folder=False)
    check_animation_output(args.out)   # format and ffmpeg before a solve that may take minutes
    if _is_model(args.source):
        from solver.models import load

        model = load(_model_file(args.source))
        ds = _simulate(model, quick_compile=args.quick_compile)
    else:
        ds = open_result(args.source)
        model = _model_for_run(ds, args.model)
    animate(model, ds, args.out, frames=args.frames)
    _progress(f"wrote {args.out}")
    return EXIT_OK


def cmd_sweep(args) -> int:
    """Delegate to ``sweep.cli.sweep_command.main_sweep`` (the sweep pipeline)."""
    if args.out:
        check_out(args.out, folder=True, overwrite=args.overwrite, what="a sweep store")
    return int(main_sweep(args) or 0)


def cmd_status(args) -> int:
    """Print ``sweep.store.status_report`` after checking the store's batches.

    A structural store (:mod:`sweep.structural`) is reported group by group.

    Returns:
        0 when no batch is damaged (pending batches are not damage), 1 when a
        batch's chunks are missing or corrupt, or a shared array is undecodable
        (for a structural store: in any group, or a group is missing).

    Raises:
        InputError: no sweep store; ``--verify`` on a store without commit
            records (format 1).
    """
    from sweep import store  # dask and zarr: loaded for sweep commands only
    from sweep import structural

    level = "decode" if args.verify else "quick"
    if structural.is_structural_store(args.store):   # one report per structure group
        text, ok = structural.status_report(args.store, level)
        print(text)
        return EXIT_OK if ok else EXIT_FAILED
    check = store.check_store(args.store, level)
    print(store.status_report(args.store, check=check))
    return EXIT_OK if check.ok else EXIT_FAILED


def cmd_design(args) -> int:
    """Run a design file (:func:`sweep.design.optimize.run_design`) and print its summary.

    Returns:
        0 when some start ended on a design that solves, 1 when none did.

    Raises:
        InputError: a bad design file, store or options (exit 2).
    """
    from sweep.run import configure_jax, default_jax_cache_dir

    # Float64 and the persistent compilation cache before the solver compiles.
    configure_jax(default_jax_cache_dir())
    from sweep.design.optimize import run_design

    if args.out:
        if not args.out.endswith(".zarr"):
            raise InputError(f"--out {args.out!r}: the design history is a Zarr store; give a "
                             f"name ending in .zarr")
        check_out(args.out, folder=True, overwrite=args.overwrite, what="a design history store")
    else:
        _progress("no --out: the history and its picture are not written")
    result = run_design(_model_file(args.design), out=args.out, starts=args.starts,
                        from_store=args.from_store, workers=args.workers,
                        scheduler=args.scheduler, scheduler_file=args.scheduler_file,
                        cluster=args.cluster, overwrite=args.overwrite, plot=not args.no_plot,
                        echo=_progress)
    print(result)
    return EXIT_OK if result.best is not None else EXIT_FAILED


def cmd_run_default(args) -> int:
    """``make run``: delegate to ``sweep.cli.sweep_command.main_default``."""
    return int(main_default() or 0)


COMMANDS = {"run-default": cmd_run_default, "check": cmd_check, "simulate": cmd_simulate,
            "equilibrium": cmd_equilibrium, "plot": cmd_plot,
            "animate": cmd_animate, "sweep": cmd_sweep, "status": cmd_status, "design": cmd_design}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mechsweep`` command line.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0 success, 1 failed simulation (or failed sweep
        points), 2 bad input, 3 an incomplete sweep (see the module
        docstring).
    """
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.command in ("check", "simulate", "equilibrium", "plot", "animate") or \
                getattr(args, "estimate", False):
            # The sweep workers' persistent compilation cache: a second
            # simulate of the same model loads its compiled program.
            from sweep.run import configure_jax, default_jax_cache_dir

            configure_jax(default_jax_cache_dir())
        return COMMANDS[args.command](args)
    except InputError as err:
        print(f"mechsweep: error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except KeyboardInterrupt:
        print("mechsweep: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
