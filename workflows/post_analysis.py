"""Post-analysis of a sweep store: a short table and heat maps of a metric.

Opens the store with xarray (``import sweep.accessor`` adds ``ds.sweep``),
prints the status counts, per-metric statistics over the successful designs,
the failed designs, and the best and worst design of each metric, then writes
one PNG per metric:

* designs on a grid of two or more parameters: heat maps of the metric over
  the first two grid parameters, one panel per value (or combination of
  values) of the others, one shared colour scale; failed designs are marked
  in red (one marker per status, named in the legend), pending ones grey;
* a grid of one parameter: the metric against it, failures marked on the axis;
* scattered designs (random, Latin hypercube, Sobol samples): the metric as
  colour over the first two parameters, failures marked.

It works on any store written by ``mechsweep sweep``: the metrics are the
per-point scalars found in it (for the RSCR study ``Bz_range``, the output
link's swing, and ``max_multiplier``); a store without any gets the range of
its first output's first component.

Usage::

    .venv/bin/python workflows/post_analysis.py STORE.zarr [--out-dir DIR]
        [--metric NAME ...] [--axes X Y [PANEL ...]]

Exit codes: 0 done, 2 bad input (no store, unknown metric or parameter).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import xarray as xr  # noqa: E402

import sweep.accessor  # noqa: E402,F401  (registers ds.sweep)
from solver.errors import InputError  # noqa: E402
from solver import status as st  # noqa: E402

__all__ = ["open_sweep", "metric_names", "derived_metric", "summary_table", "plot_metric",
           "analyse", "main", "MAX_PANELS"]

#: More panels than this and a grid is drawn as a scatter of its first two parameters.
MAX_PANELS = 24

#: Marker of each failure status (all drawn in red).
_MARKERS = {st.MAX_STEPS: "s", st.STEP_TOO_SMALL: "v", st.SINGULAR_JACOBIAN: "D",
            st.NONFINITE: "P", st.NO_ASSEMBLY: "X", st.WORKER_LOST: "o", st.ERROR: "*"}


def open_sweep(path) -> xr.Dataset:
    """Open a sweep store written by ``mechsweep sweep``.

    Args:
        path: the Zarr store directory.

    Returns:
        The lazily opened dataset (with the ``ds.sweep`` accessor).

    Raises:
        InputError: no store there, or not a sweep store (no ``status(point)``).
    """
    from sweep.store import open_store

    try:
        ds = open_store(path)
    except FileNotFoundError as exc:
        raise InputError("no sweep store there (expected a Zarr directory written by "
                         "'mechsweep sweep')", file=str(path)) from exc
    if "status" not in ds or ds["status"].dims != ("point",):
        raise InputError("not a sweep store: it has no status(point) variable", file=str(path))
    return ds


def metric_names(ds: xr.Dataset) -> list[str]:
    """The per-point scalar outputs of a store (its metrics), in store order.

    Args:
        ds: the sweep dataset.

    Returns:
        Names of the variables with dims ``("point",)`` other than ``status``,
        ``steps``, ``failure_time`` and ``failure_reason`` (bookkeeping of
        every store, not results).
    """
    return [str(v) for v in ds.data_vars
            if ds[v].dims == ("point",) and v not in ("status", "steps", "failure_time", "failure_reason")]


def derived_metric(ds: xr.Dataset) -> xr.DataArray | None:
    """The range over time of the first output's first component.

    Used for stores without metrics.

    Args:
        ds: the sweep dataset.

    Returns:
        A ``(point,)`` DataArray named like ``range(B[0])``, or None when the
        store has no time series.
    """
    series = [str(v) for v in ds.data_vars if ds[v].dims[:2] == ("point", "time")]
    if not series:
        return None
    name = series[0]
    da = ds[name]
    label = name
    for dim in da.dims[2:]:
        da = da.isel({dim: 0})
        label = f"{name}[0]"
    with np.errstate(all="ignore"):
        values = np.asarray(da.max("time", skipna=True) - da.min("time", skipna=True))
    return xr.DataArray(values, dims=("point",), name=f"range({label})")


def _params(ds: xr.Dataset) -> list[str]:
    return [p for p in ds.sweep.parameters if p in ds.coords]


def _fmt(x) -> str:
    x = float(x)
    return "nan" if not np.isfinite(x) else f"{x:.4g}"


def _design(ds: xr.Dataset, params: Sequence[str], i: int) -> str:
    return ", ".join(f"{p}={_fmt(ds[p].values[i])}" for p in params)


def summary_table(ds: xr.Dataset, metrics: dict[str, np.ndarray], max_failures: int = 10) -> str:
    """The text table of a store: status counts, metric statistics, failures.

    Args:
        ds: the sweep dataset.
        metrics: metric name -> ``(point,)`` values.
        max_failures: failed designs listed at most (the rest are counted).

    Returns:
        The table, several lines; each failed design listed with its status,
        failure time and reason where the store has them (format 3).
    """
    codes = np.asarray(ds["status"].values)
    params = _params(ds)
    ok = codes == st.SUCCESS
    counts = ", ".join(f"{st.meaning(c)} {int((codes == c).sum())}" for c in np.unique(codes))
    lines = [f"{ds.attrs.get('title') or 'sweep'}: {codes.size} points ({counts})"]
    for p in params:
        u = np.unique(ds[p].values)
        lines.append(f"  {p:<14} {u.size:5d} values in [{_fmt(u.min())}, {_fmt(u.max())}]")
    if metrics:
        width = max(14, *(len(m) for m in metrics))
        lines.append(f"  {'metric':<{width}} {'ok':>5} {'min':>11} {'median':>11} {'max':>11}")
        for name, v in metrics.items():
            good = v[ok & np.isfinite(v)]
            if good.size:
                lines.append(f"  {name:<{width}} {good.size:5d} {_fmt(good.min()):>11} "
                             f"{_fmt(np.median(good)):>11} {_fmt(good.max()):>11}")
            else:
                lines.append(f"  {name:<{width}} {0:5d} {'-':>11} {'-':>11} {'-':>11}")
        for name, v in metrics.items():
            good = np.flatnonzero(ok & np.isfinite(v))
            if good.size:
                lo, hi = good[np.argmin(v[good])], good[np.argmax(v[good])]
                lines.append(f"  {name}: smallest {_fmt(v[lo])} at {_design(ds, params, lo)}; "
                             f"largest {_fmt(v[hi])} at {_design(ds, params, hi)}")
    failed = np.flatnonzero(codes > st.SUCCESS)
    if failed.size:
        lines.append(f"  failed designs ({failed.size}):")
        reasons = ds["failure_reason"].values if "failure_reason" in ds else None
        times = ds["failure_time"].values if "failure_time" in ds else None
        for i in failed[:max_failures]:
            line = f"    {_design(ds, params, i)}: {st.meaning(codes[i])}"
            if times is not None and np.isfinite(times[i]):
                line += f" at t = {_fmt(times[i])}"
            if reasons is not None and str(reasons[i]):
                line += f" ({reasons[i]})"
            lines.append(line)
        if failed.size > max_failures:
            lines.append(f"    ... and {failed.size - max_failures} more")
    else:
        lines.append("  failed designs: none")
    pending = int((codes == st.PENDING).sum())
    if pending:
        lines.append(f"  {pending} points still pending (resume the sweep to run them)")
    return "\n".join(lines)


def _edges(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """Cell edges around sorted axis values; (edges, log scale)."""
    v = np.asarray(values, dtype=float)
    if v.size == 1:
        half = 0.05 * (abs(v[0]) or 1.0)
        return np.array([v[0] - half, v[0] + half]), False
    log = bool(v.size >= 3 and (v > 0).all()
               and np.allclose(np.diff(np.log(v)), np.log(v[1] / v[0]), rtol=1e-6)
               and not np.allclose(np.diff(v), v[1] - v[0], rtol=1e-6))
    w = np.log(v) if log else v
    mid = (w[1:] + w[:-1]) / 2
    e = np.concatenate([[w[0] - (mid[0] - w[0])], mid, [w[-1] + (w[-1] - mid[-1])]])
    if not log and v[0] > 0 >= e[0]:
        e[0] = v[0] / 2          # a positive parameter's axis stays positive
    return (np.exp(e) if log else e), log


def _mark_failures(ax, x, y, codes, seen: dict) -> None:
    """Red markers at failed designs (one marker per status), grey dots at pending ones."""
    for c in np.unique(codes[codes > st.SUCCESS]):
        sel = codes == c
        label = f"failed: {st.meaning(c)}"
        ax.scatter(x[sel], y[sel], marker=_MARKERS.get(int(c), "X"), s=90, facecolor="red",
                   edgecolor="white", linewidths=0.8, zorder=5,
                   label=None if label in seen else label)
        seen[label] = True
    sel = codes == st.PENDING
    if sel.any():
        ax.scatter(x[sel], y[sel], marker=".", s=40, color="0.4", zorder=5,
                   label=None if "pending" in seen else "pending")
        seen["pending"] = True


def _is_full_grid(ds: xr.Dataset, axes: Sequence[str]) -> bool:
    """Whether every combination of the axes' values is exactly one point."""
    keys = set(zip(*(ds[a].values.tolist() for a in axes)))
    sizes = [len(np.unique(ds[a].values)) for a in axes]
    return len(keys) == ds.sizes["point"] == int(np.prod(sizes))


def _monotone(values: np.ndarray) -> bool:
    d = np.diff(np.asarray(values, dtype=float))
    return bool((d >= 0).all() or (d <= 0).all())


def _choose_axes(ds: xr.Dataset, axes: Sequence[str] | None) -> tuple[list[str], bool]:
    """(axes, is a grid): the given axes, else the store's grid axes or its parameters.

    A design with one grid axis is a line (zipped axes: the other parameters
    move monotonically with it) unless another parameter jumps about along it,
    as in random or Latin-hypercube samples: then it is scattered.
    """
    params = _params(ds)
    if axes:
        unknown = [a for a in axes if a not in params]
        if unknown:
            raise InputError(f"--axes: {', '.join(unknown)} not swept in this store; "
                             f"swept parameters: {', '.join(params) or 'none'}")
        return list(axes), _is_full_grid(ds, axes)
    try:
        grid = ds.sweep.grid_axes()
    except ValueError:
        return params, False
    if len(grid) == 1 and len(params) > 1:
        order = np.argsort(ds[grid[0]].values, kind="stable")
        if not all(_monotone(ds[p].values[order]) for p in params if p != grid[0]):
            return [grid[0]] + [p for p in params if p != grid[0]], False
    return grid, True


def plot_metric(ds: xr.Dataset, name: str, values: np.ndarray, out_png,
                axes: Sequence[str] | None = None) -> Path:
    """Write the picture of one metric over the design.

    Args:
        ds: the sweep dataset.
        name: the metric's name (title and colour bar).
        values: its ``(point,)`` values (NaN where a design failed).
        out_png: the PNG to write.
        axes: parameters to draw over (x, y, then panel parameters); default:
            the store's grid axes, or its first two parameters for samples.

    Returns:
        The PNG path.

    Raises:
        InputError: unknown axes, or a store without swept parameters.
    """
    from solver.results.plot import pyplot

    plt = pyplot()

    axes, is_grid = _choose_axes(ds, axes)
    if not axes:
        raise InputError("the store has no swept parameters to plot against")
    codes = np.asarray(ds["status"].values)
    values = np.where(codes == st.SUCCESS, np.asarray(values, dtype=float), np.nan)
    finite = values[np.isfinite(values)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if vmin == vmax:
        vmin, vmax = vmin - 0.5 * (abs(vmin) or 1.0), vmax + 0.5 * (abs(vmax) or 1.0)
    title = ds.attrs.get("title") or "sweep"
    n_ok, n_bad = int((codes == st.SUCCESS).sum()), int((codes > st.SUCCESS).sum())
    seen: dict = {}
    cmap = plt.get_cmap("viridis").with_extremes(bad="0.85")

    panel_axes = axes[2:] if is_grid else []
    panel_values = [np.unique(ds[a].values) for a in panel_axes]
    n_panels = int(np.prod([len(v) for v in panel_values])) if panel_axes else 1
    if is_grid and len(axes) >= 2 and n_panels <= MAX_PANELS:
        grid = xr.Dataset({"value": ("point", values), "status": ("point", codes)},
                          coords={a: ("point", np.asarray(ds[a].values)) for a in axes},
                          attrs={"sweep_parameters": list(axes)}).sweep.grid(list(axes))
        xv, yv = grid[axes[0]].values, grid[axes[1]].values
        xe, xlog = _edges(xv)
        ye, ylog = _edges(yv)
        ncols = min(n_panels, 3)
        nrows = -(-n_panels // ncols)
        fig, axs = plt.subplots(nrows, ncols, figsize=(4.2 * ncols + 1.2, 3.6 * nrows + 0.6),
                                squeeze=False, sharex=True, sharey=True,
                                layout="constrained")
        mesh = None
        combos = list(itertools.product(*panel_values)) if panel_axes else [()]
        for k, combo in enumerate(combos):
            ax = axs.flat[k]
            sel = grid.sel(dict(zip(panel_axes, combo))) if combo else grid
            z = sel["value"].transpose(axes[1], axes[0]).values
            c = sel["status"].transpose(axes[1], axes[0]).values
            c = np.where(np.isnan(c), st.PENDING, c).astype(int)
            mesh = ax.pcolormesh(xe, ye, np.ma.masked_invalid(z), cmap=cmap, vmin=vmin, vmax=vmax,
                                 shading="flat")
            X, Y = np.meshgrid(xv, yv)
            _mark_failures(ax, X.ravel(), Y.ravel(), c.ravel(), seen)
            if xlog:
                ax.set_xscale("log")
            if ylog:
                ax.set_yscale("log")
            ax.set_title(", ".join(f"{a} = {_fmt(v)}" for a, v in zip(panel_axes, combo)) or name,
                         fontsize=10)
            if k // ncols == nrows - 1 or k + ncols >= n_panels:
                ax.set_xlabel(axes[0])
            if k % ncols == 0:
                ax.set_ylabel(axes[1])
        for ax in axs.flat[n_panels:]:
            ax.set_visible(False)
        fig.colorbar(mesh, ax=axs.ravel().tolist(), label=name, shrink=0.9)
    else:
        fig, ax = plt.subplots(figsize=(7, 5), layout="constrained")
        x = np.asarray(ds[axes[0]].values, dtype=float)
        if len(axes) == 1:
            order = np.argsort(x, kind="stable")
            good = order[np.isfinite(values[order])]
            ax.plot(x[good], values[good], "o-", color="C0", label=name)
            base = np.full(x.shape, vmin)
            _mark_failures(ax, x, base, codes, seen)
            ax.set_ylabel(name)
        else:
            y = np.asarray(ds[axes[1]].values, dtype=float)
            ok = np.isfinite(values)
            sc = ax.scatter(x[ok], y[ok], c=values[ok], cmap=cmap, vmin=vmin, vmax=vmax, s=45)
            fig.colorbar(sc, ax=ax, label=name)
            _mark_failures(ax, x, y, codes, seen)
            ax.set_ylabel(axes[1])
            if len(axes) > 2:
                ax.text(0.01, 0.01, f"not shown: {', '.join(axes[2:])}", transform=ax.transAxes,
                        fontsize=8, color="0.3")
        ax.set_xlabel(axes[0])
    if seen:
        fig.legend(loc="outside lower center", ncols=min(len(seen), 4), fontsize=9)
    fig.suptitle(f"{title}: {name}  ({n_ok} ok, {n_bad} failed)", fontsize=11)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def analyse(store, out_dir=None, metrics: Sequence[str] | None = None,
            axes: Sequence[str] | None = None, echo=print) -> list[Path]:
    """Print the table of a store and write one picture per metric.

    Args:
        store: the sweep store.
        out_dir: where the PNGs go; default ``<store without .zarr>_analysis``.
        metrics: metric names to draw; default every metric in the store (or
            the range of the first output when it has none).
        axes: parameters to draw over (see :func:`plot_metric`).
        echo: where the table and messages go.

    Returns:
        The PNG paths written.

    Raises:
        InputError: no store, unknown metric or parameter.
    """
    ds = open_sweep(store)
    available = metric_names(ds)
    if metrics:
        unknown = [m for m in metrics if m not in available]
        if unknown:
            raise InputError(f"--metric: {', '.join(unknown)} not in the store; its metrics: "
                             f"{', '.join(available) or 'none (see the Outputs.metrics of the sweep file)'}",
                             file=str(store))
        chosen = {m: np.asarray(ds[m].values, dtype=float) for m in metrics}
    elif available:
        chosen = {m: np.asarray(ds[m].values, dtype=float) for m in available}
    else:
        derived = derived_metric(ds)
        chosen = {} if derived is None else {derived.name: derived.values}
    echo(summary_table(ds, chosen))
    out_dir = Path(out_dir) if out_dir else Path(str(Path(store)).removesuffix(".zarr") + "_analysis")
    written = []
    for name, values in chosen.items():
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
        png = plot_metric(ds, name, values, out_dir / f"{safe}.png", axes=axes)
        echo(f"wrote {png}")
        written.append(png)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``post_analysis.py STORE [--out-dir DIR] [--metric M ...] [--axes ...]``.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        0 on success, 2 on bad input.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", help="a sweep store (mechsweep sweep ... --out STORE.zarr)")
    ap.add_argument("--out-dir", help="folder for the PNGs (default: STORE_analysis next to the store)")
    ap.add_argument("--metric", nargs="+", help="metrics to draw (default: all in the store)")
    ap.add_argument("--axes", nargs="+", metavar="PARAM",
                    help="parameters for the x axis, y axis and panels (default: the grid axes)")
    args = ap.parse_args(argv)
    try:
        analyse(args.store, args.out_dir, args.metric, args.axes)
    except InputError as err:
        print(f"post_analysis: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
