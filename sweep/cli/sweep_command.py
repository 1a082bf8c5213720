"""``mechsweep sweep`` and ``make run``: a sweep file to a Zarr store and a picture."""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.cli.common import check_out, split_text
from sweep.location import StoreLocation, is_url
from sweep.log import PLAIN, get_logger

__all__ = ["main_sweep", "run_sweep_file", "summary_plot", "resume_command", "DEFAULT_SWEEP", "EXIT_INCOMPLETE",
           "SUMMARY_PICTURE", "FAILURE_MARKERS", "summary_figure"]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SWEEP = ROOT / "configs" / "sweeps" / "rscr_lengths_angles.yaml"

#: Exit code of a sweep that left batches pending (interrupted, scheduler or
#: workers lost, a storage fault): its store is safe and a resume finishes it.
EXIT_INCOMPLETE = 3

#: The summary picture's file name, inside the store's folder.
SUMMARY_PICTURE = "summary.png"

#: Seconds between progress lines when stderr is not a terminal (batch jobs).
PROGRESS_EVERY = 30.0

log = get_logger("sweep")


def _mode(args) -> str:
    chosen = [m for m, flag in (("resume", "resume"), ("overwrite", "overwrite"), ("retry-failed", "retry_failed"))
              if getattr(args, flag, False)]
    if len(chosen) > 1:
        raise InputError(f"choose at most one of --resume, --overwrite, --retry-failed (got {', '.join(chosen)})")
    return chosen[0] if chosen else "resume"


def run_sweep_file(sweep_path, out, workers=None, scheduler=None, scheduler_file=None, cluster=None,
                   mode="resume", dry_run=False, progress=False, plot=True, echo=None,
                   estimate=False, progress_every=None, worker_timeout=None):
    """Expand a sweep file and run it into a Zarr store.

    Args:
        sweep_path: the sweep YAML.
        out: store path (``.zarr``).
        workers, scheduler, scheduler_file, cluster: where it runs
            (:func:`sweep.run.run_sweep`).
        mode: ``resume`` (default), ``overwrite`` or ``retry-failed``.
        dry_run: only check the sweep against its model (parameter and
            output names) and explain the points, batches and store size.
        estimate: with ``dry_run``, also compile and run the first batch
            and print the estimated run time (:func:`dry_run_estimate`).
        progress: show a progress bar (on a terminal; off by default).
        plot: write the summary picture (``<out>/summary.png``) afterwards.
        echo: where the dry run's report and the run's summary go (the
            command line passes ``print``; default: ``INFO`` records of the
            ``mechsweep.sweep`` logger, :mod:`sweep.log`).
        progress_every: seconds between progress lines on stderr when it
            is not a terminal (None: none).
        worker_timeout: seconds to wait while the cluster has no worker
            (:func:`sweep.run.run_sweep`).

    A sweep that varies (or sets) a structural parameter runs one structure
    group after another into one store (:mod:`sweep.structural`).

    Returns:
        the run summary (None for a dry run): a :class:`sweep.run.SweepSummary`,
        or a :class:`sweep.structural.StructuralSummary`.

    Raises:
        InputError: bad sweep file, model or options.
    """
    from sweep.pipeline import (batch_fn, build_context, check_batch_memory, check_free_space,
                                check_store_size, load_model, structural_names)
    from sweep.run import run_sweep
    from sweep.spec import load_sweep

    echo = log.info if echo is None else echo
    spec = load_sweep(sweep_path)
    if not dry_run and out is None:
        raise InputError("--out STORE.zarr is required (or use --dry-run)")
    # Builds the model: unknown parameter or output names fail here, before
    # a dry run says anything or a run writes anything.
    model = load_model(spec)
    names = structural_names(spec, model)
    if names:   # one model, compile and store group per structure (sweep/structural.py)
        from sweep.structural import run_structural_file

        if dry_run:
            return run_structural_file(spec, model, names, out, workers=workers, scheduler=scheduler,
                                       scheduler_file=scheduler_file, cluster=cluster, mode=mode,
                                       dry_run=True, progress=progress, echo=echo, estimate=estimate)
        from sweep.folders import StoreLease

        with StoreLease(out):
            return run_structural_file(spec, model, names, out, workers=workers, scheduler=scheduler,
                                       scheduler_file=scheduler_file, cluster=cluster, mode=mode,
                                       progress=progress, plot=summary_plot if plot else None, echo=echo,
                                       progress_every=progress_every, worker_timeout=worker_timeout)
    context = build_context(spec, model)
    store_line = check_store_size(spec, context)
    batch_line = check_batch_memory(spec, context, model)
    if not dry_run:
        check_free_space(out, spec, context)
    if dry_run:
        echo(spec.describe())
        echo(store_line)
        echo(batch_line)
        echo(f"  checked:   the model loads; parameter and output names match; "
             f"{context.value_check}")
        if estimate:
            echo(dry_run_estimate(spec, context, workers, scheduler or scheduler_file or cluster))
        return None
    from sweep.folders import StoreLease

    with StoreLease(out):
        summary = run_sweep(spec, batch_fn, context, out, workers=workers, scheduler=scheduler,
                            scheduler_file=scheduler_file, cluster=cluster, mode=mode, progress=progress,
                            schema=context.schema, attrs=context.attrs, progress_every=progress_every,
                            worker_timeout=worker_timeout)
    echo(str(summary))
    if plot:
        png = summary_plot(out)
        if png:
            echo(f"summary picture: {png}")
    return summary


def dry_run_estimate(spec, context, workers=None, remote=None) -> str:
    """``sweep --dry-run --estimate``: time one compiled batch and extrapolate.

    Args:
        spec, context: the sweep and its context (:func:`sweep.pipeline.build_context`).
        workers: ``--workers`` (default: the local cores, as the LocalCluster).
        remote: the scheduler or cluster given, if any (then the estimate
            assumes ``workers`` of them, or the local core count, and says so).

    Returns:
        Lines of text: compile seconds, seconds per point, the total.
    """
    from sweep.pipeline import estimate_run
    from sweep.run import format_seconds, local_cores

    n_workers = workers or local_cores()
    log.info(f"  estimate:  compiling and running batch 0 ({context.batch} points) ...", extra=PLAIN)
    e = estimate_run(spec, context, n_workers)
    log.info(f"batch 0 {split_text(e['wall_seconds'], e['compile_seconds'])}")
    basis = (f"{n_workers} workers" + ("" if workers else " (the local cores; set --workers)")
             + (" (assumed for the given scheduler or cluster)" if remote else ""))
    lines = [f"  compile:   {e['compile_seconds']:.3g} s (once per worker; the persistent "
             f"cache makes later compiles fast)",
             f"  per point: {e['seconds_per_point']:.3g} s (batch 0, padded to "
             f"{e['batch_points']} points; {e['failed']} failed)",
             f"  total:     about {format_seconds(e['total_seconds'])} for {spec.n_points} points in "
             f"{spec.n_batches} batches on {basis}"]
    return "\n".join(lines)


#: Per-point variables of a store that are not metrics (bookkeeping, text).
_NOT_METRICS = ("status", "steps", "failure_time", "failure_reason")

#: Most metric rows and parameter panels a summary picture draws.
MAX_METRIC_ROWS = 8
MAX_PANELS = 6

#: Marker and colour of each failure status in the summary picture.
FAILURE_MARKERS = {
    st.NO_ASSEMBLY: ("X", "tab:red"),
    st.SINGULAR_JACOBIAN: ("^", "tab:orange"),
    st.STEP_TOO_SMALL: ("v", "tab:purple"),
    st.MAX_STEPS: ("s", "tab:brown"),
    st.NONFINITE: ("D", "tab:pink"),
    st.WORKER_LOST: ("P", "tab:gray"),
    st.ERROR: ("*", "black"),
    st.EVENT_OVERFLOW: ("h", "tab:olive"),
}


def _panels(values: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Small-multiple panels over a parameter: (label, mask) per value, or per quantile range.

    A parameter with at most :data:`MAX_PANELS` values gets one panel per
    value; a sampled one (many values) is cut into 4 ranges of equal counts.
    """
    unique = np.unique(values)
    if len(unique) <= MAX_PANELS:
        return [(f"{v:.4g}", values == v) for v in unique]
    edges = np.quantile(values, np.linspace(0.0, 1.0, 5))
    out = []
    for k in range(4):
        lo, hi = edges[k], edges[k + 1]
        mask = (values >= lo) & ((values <= hi) if k == 3 else (values < hi))
        out.append((f"{lo:.4g} to {hi:.4g}", mask))
    return out


def summary_plot(store, out_png=None):
    """A picture of a sweep store: every metric over the design, failures marked by status.

    It is written inside the store's folder (:data:`SUMMARY_PICTURE`), so it
    never replaces a file the store does not own. What it shows is
    :func:`summary_figure`'s; a structural store shows the points of all its
    groups (its metrics; the series differ in shape from group to group).

    Args:
        store: the store's path.
        out_png: where to write the picture (default inside the store).

    Returns:
        the PNG path, or None when the store has nothing to draw.
    """
    from solver.results.plot import pyplot

    import xarray as xr

    from sweep.store import is_structural_store
    from sweep.structural import points_dataset

    ds = points_dataset(store) if is_structural_store(store) else xr.open_zarr(store)
    fig = summary_figure(ds)
    if fig is None:
        return None
    out_png = out_png or f"{str(store).rstrip('/')}/{SUMMARY_PICTURE}"
    if is_url(out_png):
        import io

        import fsspec

        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        with fsspec.open(out_png, "wb") as f:
            f.write(buffer.getvalue())
    else:
        fig.savefig(out_png, dpi=110)
    pyplot().close(fig)
    return out_png


def summary_figure(ds):
    """The summary picture of a sweep's points as a matplotlib figure.

    One row of panels per metric (per-point output; without any, the range
    of the first output series), at most :data:`MAX_METRIC_ROWS`. Within a
    row, the metric is the colour over the first two swept parameters (or
    the curve over the only one), and a third swept parameter splits the
    row into small multiples, one panel per value of it (or per quarter of
    its values when it has many, as a sampled design does). Failed points
    are drawn with a marker per failure status (:data:`FAILURE_MARKERS`),
    named with its count in the figure's legend.

    Args:
        ds: a sweep store's Dataset (or the per-point Dataset of a
            structural store).

    Returns:
        The figure (close it after use), or None when there is nothing to
        draw (no status, no swept parameter, no metric or series).
    """
    from solver.results.plot import pyplot

    plt = pyplot()
    if "status" not in ds:
        return None
    on_point = [c for c in ds.coords if ds[c].dims == ("point",) and c != "point"
                and np.issubdtype(ds[c].dtype, np.number)]
    # The sweep file's order (the store keeps it; a Dataset's coordinates may be sorted).
    named = ds.attrs.get("sweep_parameters") or []
    if isinstance(named, str):
        named = json.loads(named)
    params = [c for c in named if c in on_point] + [c for c in on_point if c not in named]
    metrics = [v for v in ds.data_vars if ds[v].dims == ("point",) and v not in _NOT_METRICS
               and np.issubdtype(ds[v].dtype, np.number)]
    values = {name: np.asarray(ds[name].values, dtype=float) for name in metrics[:MAX_METRIC_ROWS]}
    if not values:
        series = [v for v in ds.data_vars if ds[v].dims[:2] == ("point", "time")]
        if not series:
            return None
        a = np.asarray(ds[series[0]].values, dtype=float).reshape(ds.sizes["point"], ds.sizes["time"], -1)
        with np.errstate(all="ignore"):
            values = {f"range of {series[0]}": np.nanmax(a[..., 0], axis=1) - np.nanmin(a[..., 0], axis=1)}
    if not params:
        return None
    status = np.asarray(ds["status"].values)
    failed = st.is_failure(status)
    done = ~failed & (status >= st.SUCCESS)
    panels = _panels(np.asarray(ds[params[2]].values, dtype=float)) if len(params) >= 3 else [("", None)]
    rows, cols = len(values), len(panels)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + 1.4, 3.0 * rows + 1.0), squeeze=False,
                             layout="constrained")
    handles = {}
    for r, (label, value) in enumerate(values.items()):
        finite = value[done & np.isfinite(value)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        for c, (title, mask) in enumerate(panels):
            ax = axes[r][c]
            inside = np.ones(len(status), dtype=bool) if mask is None else mask
            ok, bad = done & inside, failed & inside
            x = np.asarray(ds[params[0]].values, dtype=float)
            if len(params) >= 2:
                y = np.asarray(ds[params[1]].values, dtype=float)
                sc = ax.scatter(x[ok], y[ok], c=value[ok], cmap="viridis", vmin=lo, vmax=hi, s=36)
                ax.set_ylabel(params[1])
            else:
                order = np.argsort(x[ok])
                ax.plot(x[ok][order], value[ok][order], "o-", color="tab:blue")
                # Failures have no value: drawn on the axis' floor.
                y = np.full(len(x), lo)
                ax.set_ylabel(label)
            for code in np.unique(status[bad]):
                marker, colour = FAILURE_MARKERS.get(int(code), ("o", "tab:cyan"))
                pick = bad & (status == code)
                h = ax.scatter(x[pick], y[pick], marker=marker, color=colour, s=60, linewidths=0.8,
                               edgecolors="black" if marker not in ("X", "*", "P") else None)
                handles.setdefault(int(code), h)
            ax.set_xlabel(params[0])
            if title:
                ax.set_title(f"{params[2]} = {title}" if " to " not in title else f"{params[2]}: {title}",
                             fontsize=9)
        if len(params) >= 2:
            fig.colorbar(sc, ax=list(axes[r]), label=label)
    counts = {code: int((status == code).sum()) for code in handles}
    if handles:
        fig.legend([handles[c] for c in sorted(handles)],
                   [f"{st.meaning(c)} ({counts[c]})" for c in sorted(handles)],
                   loc="outside lower center", ncol=min(4, len(handles)), title="failed points, by status",
                   fontsize=8, title_fontsize=8, frameon=False)
    shown = f" (first {len(values)} of {len(metrics)} metrics)" if len(metrics) > len(values) else ""
    fig.suptitle(f"{ds.attrs.get('title', 'sweep')}: {int(done.sum())} ok, {int(failed.sum())} failed{shown}")
    return fig


def resume_command(args) -> str:
    """The command line that resumes the sweep of ``args`` (quoted for a POSIX shell).

    Args:
        args: the parsed ``mechsweep sweep`` arguments.

    Returns:
        ``mechsweep sweep SWEEP --out OUT --resume`` with the run's
        ``--workers``, ``--scheduler``, ``--scheduler-file`` or ``--cluster``.
    """
    words = ["mechsweep", "sweep", str(args.sweep), "--out", str(args.out), "--resume"]
    for flag, attr in (("--workers", "workers"), ("--scheduler", "scheduler"),
                       ("--scheduler-file", "scheduler_file"), ("--cluster", "cluster")):
        value = getattr(args, attr, None)
        if value:
            words += [flag, str(value)]
    return " ".join(shlex.quote(w) for w in words)


def _fault_line(err: OSError, store) -> str:
    """One line for an operating-system fault during a sweep: what happened and what to do."""
    if isinstance(err, TimeoutError) or "Timed out" in str(err) or isinstance(err, ConnectionError):
        return (f"could not reach the Dask scheduler or its workers ({err}); check that the scheduler "
                f"runs and its address, or run without --scheduler/--cluster on local workers")
    code = getattr(err, "errno", None)
    what = os.strerror(code) if code else str(err)
    where = f" ({err.filename})" if getattr(err, "filename", None) else ""
    if code == errno.ENOSPC:
        fix = "free space on its file system (or choose another --out) and resume"
    elif code in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "make it writable again (or copy it somewhere writable) and resume"
    else:
        fix = "fix the cause and resume"
    return f"storage fault writing {store}: {what}{where}; {fix}"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the written batches stay, the queued ones are cancelled."""


def _on_signal(signum, frame):
    from sweep.run import interrupt

    interrupt(_Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())


def _remove_unstarted_store(out, existed: bool) -> None:
    """Remove a store this run created if no batch of it was written (nothing to resume)."""
    if existed or out is None or not StoreLocation(out).exists():
        return
    try:
        from sweep import store, structural

        if structural.is_structural_store(out):
            return
        if not store.check_store(out, "quick").done:
            StoreLocation(out).remove()
    except Exception:  # noqa: BLE001 - a store we cannot read is kept, never deleted
        pass


def main_sweep(args) -> int:
    """``mechsweep sweep`` with parsed arguments (see :mod:`sweep.cli.app`).

    Interrupts (Ctrl-C, SIGTERM), a lost scheduler and storage faults end
    the run with one line that says what happened and the command that
    resumes it; ``--verbose`` adds the traceback.

    Returns:
        exit code: 0 when every point is done and succeeded, 1 when every
        point is done and some failed, :data:`EXIT_INCOMPLETE` (3) when
        batches are left pending (interrupted, scheduler lost, storage fault).
    """
    out = getattr(args, "out", None)
    existed = out is not None and StoreLocation(out).exists()
    in_main = threading.current_thread() is threading.main_thread()
    # Both signals wait for the batch being written (sweep.run.interrupt).
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)} if in_main else {}
    t0 = time.perf_counter()
    quiet = getattr(args, "quiet", False) and not getattr(args, "verbose", False)
    try:
        summary = run_sweep_file(
            args.sweep, out, workers=getattr(args, "workers", None),
            scheduler=getattr(args, "scheduler", None), scheduler_file=getattr(args, "scheduler_file", None),
            cluster=getattr(args, "cluster", None), mode=_mode(args),
            dry_run=getattr(args, "dry_run", False) or getattr(args, "estimate", False),
            progress=sys.stderr.isatty() and not quiet, echo=print, estimate=getattr(args, "estimate", False),
            progress_every=None if quiet else getattr(args, "progress_every", PROGRESS_EVERY),
            worker_timeout=getattr(args, "worker_timeout", None))
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, _Terminated) else "interrupted"
        _remove_unstarted_store(out, existed)
        print(f"mechsweep: {how}; the batches written so far are kept in {out}; resume with:\n"
              f"  {resume_command(args)}", file=sys.stderr)
        return EXIT_INCOMPLETE
    except OSError as err:
        if getattr(args, "verbose", False):
            traceback.print_exc()
        _remove_unstarted_store(out, existed)
        print(f"mechsweep: {_fault_line(err, out)}:\n  {resume_command(args)}", file=sys.stderr)
        return EXIT_INCOMPLETE
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if summary is None:
        return 0
    log.info(f"the command took {time.perf_counter() - t0:.3g} s in all", extra=PLAIN)
    note_batch_split(summary)
    pending = summary.store_by_status.get("pending", 0)
    if pending or summary.batches_left:
        stopped = getattr(summary, "stopped", "")
        why = f"{stopped}; " if stopped else ""
        print(f"mechsweep: incomplete: {pending} points in {out} are not done yet ({why}"
              f"{len(summary.batches_left)} batches of this run were left pending); resume with:\n"
              f"  {resume_command(args)}", file=sys.stderr)
        return EXIT_INCOMPLETE
    # Failed points anywhere in the store (also those of earlier, resumed runs).
    failed = sum(n for name, n in summary.store_by_status.items()
                 if st.is_failure(st.CODES.get(name, st.ERROR)))
    return 1 if failed else 0


def note_batch_split(summary) -> None:
    """Log the workers' compile and solve seconds, summed over the batches this run computed.

    Args:
        summary: a :class:`sweep.run.SweepSummary` or
            :class:`sweep.structural.StructuralSummary`.
    """
    n = len(summary.batches_run)
    if n:
        log.info(f"the workers' batches: {summary.compile_seconds:.1f} s compiling, "
                 f"{summary.solve_seconds:.2f} s solving (summed over {n} batch{'es' if n > 1 else ''})",
                 extra=PLAIN)


def main_default() -> int:
    """``make run``: the embedded default RSCR sweep into ``out/rscr.zarr``."""
    out = ROOT / "out" / "rscr.zarr"
    out.parent.mkdir(exist_ok=True)
    try:
        summary = run_sweep_file(DEFAULT_SWEEP, str(out), workers=os.cpu_count() or 1, mode="resume",
                                 progress=sys.stderr.isatty(), echo=print)
    except InputError as err:
        print(f"mechsweep: {err}", file=sys.stderr)
        return 2
    note_batch_split(summary)
    return 0


def cmd_sweep(args) -> int:
    """``mechsweep sweep``: check ``--out``, then :func:`main_sweep` (the sweep pipeline)."""
    if args.out:
        check_out(args.out, folder=True, overwrite=args.overwrite, what="a sweep store")
    return int(main_sweep(args) or 0)


def cmd_run_default(args) -> int:
    """``mechsweep run-default`` (``make run``): :func:`main_default`."""
    return int(main_default() or 0)


if __name__ == "__main__":
    from sweep.log import cli_logging

    with cli_logging():
        raise SystemExit(main_default())
