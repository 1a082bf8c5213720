"""The record of a design run (:mod:`sweep.design.optimize`): its history store and its picture.

:func:`history_dataset` lays a :class:`sweep.design.optimize.DesignResult` out as an
xarray Dataset (every start's history, final path and the target),
:func:`write_history` writes it to Zarr, :func:`plot_design` draws it.  This
module reads a result; it never runs anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.store import write_dataset

__all__ = ["history_dataset", "write_history", "plot_design", "check_history_out", "history_png_path"]


def history_png_path(out: str) -> str:
    """The picture's path beside a history store: ``X.zarr`` -> ``X.png``, anything else + ``.png``."""
    p = Path(out)
    return str(p.with_suffix(".png")) if p.suffix == ".zarr" else str(p) + ".png"


def check_history_out(out: str, overwrite: bool) -> None:
    """Check ``out`` before a run writes its history there: an existing store is replaced only with ``overwrite``.

    Raises:
        InputError: not a ``.zarr`` name, a symbolic link, a missing folder,
            an existing path that is not a Zarr store, or a store without
            ``overwrite``.
    """
    p = Path(out)
    if not str(out).endswith(".zarr"):
        raise InputError(f"--out {out}: the design history is a Zarr store; give a name ending "
                         f"in .zarr")
    if p.is_symlink():
        raise InputError(f"--out {out}: is a symbolic link; give the real path instead")
    if not p.parent.is_dir():
        raise InputError(f"--out {out}: the folder {p.parent} does not exist")
    if p.exists():
        is_store = p.is_dir() and ((p / "zarr.json").is_file() or (p / ".zgroup").is_file())
        if not is_store and (not p.is_dir() or any(p.iterdir())):
            raise InputError(f"--out {out}: exists and is not a Zarr store; choose another path "
                             f"(--overwrite replaces only a store)")
        if is_store and not overwrite:
            raise InputError(f"--out {out}: the store exists; give --overwrite to replace it, or "
                             f"another path")


# ------------------------------------------------------------------ history store
def history_dataset(result):
    """The optimisation history of ``result`` (a :class:`sweep.design.optimize.DesignResult`) as an xarray Dataset.

    Dims ``start`` and ``iteration`` (NaN-padded: starts run different
    numbers of iterations), ``time`` and ``component`` for the curves.

    Returns:
        Dataset with ``objective(start, iteration)``, one variable per
        design parameter and per constraint (same dims), ``gradient_norm``,
        ``point_status`` (the solver's status of each row's design; −1
        padding), ``final_objective(start)``, ``iterations(start)``,
        ``seconds(start)``, ``start_{name}(start)`` (initial values),
        ``path(start, time, component)`` (each start's final path),
        ``initial_path`` (at its initial design) and ``target(time, component)``; attrs: the design file's text, method,
        per-start status and message, the best start, its parameters and
        objective.
    """
    import xarray as xr

    c, starts = result.context, result.starts
    K, R = len(starts), max([len(s.rows["objective"]) for s in starts] + [1])

    def pad(key, col=None, fill=np.nan, dtype=float):
        a = np.full((K, R), fill, dtype=dtype)
        for i, s in enumerate(starts):
            v = s.rows[key] if col is None else s.rows[key][:, col]
            a[i, :len(v)] = v
        return a

    dims = ("start", "iteration")
    data = {"objective": (dims, pad("objective"), {"long_name": "mean squared distance of the "
                                                   "path from the target"}),
            "gradient_norm": (dims, pad("gradient_norm"), {"long_name": "|dJ/dp|"}),
            "point_status": (dims, pad("point_status", fill=-1, dtype=np.int8),
                             {"long_name": "solver status of the row's design (-1: padding)",
                              "flag_values": list(st.MEANINGS), "flag_meanings":
                              " ".join(st.MEANINGS.values())})}
    for j, name in enumerate(c.names):
        data[name] = (dims, pad("x", j), {"long_name": f"design parameter {name}",
                                          "bounds": [float(c.lower[j]), float(c.upper[j])]})
        data[f"start_{name}"] = (("start",), np.array([s.x0[j] for s in starts]),
                                 {"long_name": f"initial {name}"})
    for i, (name, of, _, _, reduce, lo, hi) in enumerate(c.constraints):
        data[name] = (dims, pad("constraints", i), {"long_name": f"{reduce}({of})",
                                                    "min": "none" if lo is None else lo,
                                                    "max": "none" if hi is None else hi})
    data["final_objective"] = (("start",), np.array([s.objective for s in starts]), {})
    data["iterations"] = (("start",), np.array([s.iterations for s in starts], dtype=np.int64), {})
    data["seconds"] = (("start",), np.array([s.seconds for s in starts]), {"units": "s"})
    data["path"] = (("start", "time", "component"), np.stack([s.path for s in starts]),
                    {"long_name": "the path at each start's final design"})
    data["initial_path"] = (("start", "time", "component"),
                            np.stack([s.start_path for s in starts]),
                            {"long_name": "the path at each start's initial design"})
    data["target"] = (("time", "component"), c.target, {"long_name": "target curve"})
    best = result.best
    attrs = {
        "title": c.title, "design_path": c.design_path, "design_yaml": result.spec.text,
        "model_path": c.model_path, "model_yaml": result.spec.model_text,
        "method": c.method, "max_iterations": int(c.max_iterations), "tol": float(c.tol),
        "parameters": list(c.names),
        "history_rows": ("every distinct objective evaluation (cyipopt has no per-iteration "
                         "callback)" if c.method == "ipopt" else "accepted iterates; row 0 is "
                         "the start"),
        "start_status": json.dumps([s.status for s in starts]),
        "start_message": json.dumps([s.message for s in starts]),
        "start_origin": json.dumps([s.origin for s in starts]),
        "best_start": -1 if best is None else int(best),
        "best_parameters": json.dumps(result.best_parameters),
        "best_objective": float(result.best_objective),
        "wall_seconds": float(result.wall_seconds),
    }
    if c.override:
        attrs["model_overrides"] = json.dumps(c.override, sort_keys=True, default=str)
    coords = {"start": np.arange(K), "iteration": np.arange(R), "time": c.times,
              # Text labels as variable-length strings, as the sweep stores keep
              # theirs: the fixed-width numpy form has no Zarr v3 specification.
              "component": np.array(c.labels, dtype=object)}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def write_history(result, out: str, overwrite: bool = False) -> None:
    """Write :func:`history_dataset` of ``result`` to the Zarr store ``out`` (consolidated metadata).

    Raises:
        InputError: the path cannot be used or written.
    """
    check_history_out(out, overwrite)
    ds = history_dataset(result)
    try:
        write_dataset(ds, out)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write it ({exc.strerror or exc})") from None


# ------------------------------------------------------------------ picture
def plot_design(result, png: str) -> str | None:
    """A PNG of the run ``result``: objective against iterations, the best path against the target.

    Panels: the objective of every start against its history rows (log
    scale, the best start drawn thicker); the best design's path components
    and the target's against time; and, for a path of two or more
    components, both curves in the plane of the two coordinates of largest
    extent.

    Returns:
        the PNG path, or None when no start has a history.
    """
    from solver.results.plot import pyplot

    plt = pyplot()

    c = result.context
    if not any(len(s.rows["objective"]) for s in result.starts):
        return None
    k = len(c.labels)
    fig, axes = plt.subplots(1, 3 if k >= 2 else 2, figsize=(16 if k >= 2 else 11, 4.6))
    ax = axes[0]
    for s in result.starts:
        y = np.asarray(s.rows["objective"], dtype=float)
        y = np.where(y > 0, y, np.nan)   # log scale: an exact zero is not drawn
        best = s.index == result.best
        ax.semilogy(np.arange(len(y)), y, "o-" if len(y) < 40 else "-", ms=3,
                    lw=2.2 if best else 1.0,
                    label=f"start {s.index}{' (best)' if best else ''}: {s.status}")
    ax.set_xlabel("evaluation" if c.method == "ipopt" else "iteration")
    ax.set_ylabel("objective  mean |P - target|²")
    ax.set_title(f"{c.method}: objective")
    ax.grid(True, which="both", alpha=0.3)
    if len(result.starts) <= 12:
        ax.legend(fontsize=8)
    ax = axes[1]
    b = result.starts[result.best] if result.best is not None else None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, label in enumerate(c.labels):
        color = colors[j % len(colors)]
        ax.plot(c.times, c.target[:, j], "--", color=color, lw=2.5, alpha=0.5,
                label=f"target {label}")
        if b is not None:
            ax.plot(c.times, b.path[:, j], "-", color=color, lw=1.2, label=f"best {label}")
    ax.set_xlabel("t")
    ax.set_title("path components (best design) and target")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, alpha=0.3)
    if k >= 2:
        both = np.vstack([c.target] + ([b.path] if b is not None else []))
        extent = np.nanmax(both, axis=0) - np.nanmin(both, axis=0)
        i, j = sorted(np.argsort(-extent, kind="stable")[:2])
        ax = axes[2]
        ax.plot(c.target[:, i], c.target[:, j], "--", color="0.5", lw=2.5, label="target")
        if b is not None:
            ax.plot(b.start_path[:, i], b.start_path[:, j], ":", color="0.3", lw=1.0,
                    label="its start")
            ax.plot(b.path[:, i], b.path[:, j], "-", color=colors[0], lw=1.2, label="best design")
            ax.plot(b.path[0, i], b.path[0, j], "o", color=colors[0], ms=5)
        ax.set_xlabel(c.labels[i])
        ax.set_ylabel(c.labels[j])
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_title(f"projection on ({c.labels[i]}, {c.labels[j]})")
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    best_text = ", ".join(f"{n} = {v:.6g}" for n, v in result.best_parameters.items())
    fig.suptitle(f"{c.title}" + (f": best {best_text}, objective {result.best_objective:.3g}"
                                 if best_text else ": no design solved"), fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png
