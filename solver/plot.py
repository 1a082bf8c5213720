"""Pictures of results: time-series plots and mechanism animations.

:func:`animate` is this project's version of the talk's ``animatemech``: it
draws a model's points (vector coordinates of size 2 or 3, or the
``Animation.Points`` expressions of the model file) and the links between
them (``Animation.Links``, or the pairs a kind provides as ``model.links``),
in 2-D or in a matplotlib 3-D view whose camera is the file's
``Animation: {Scene: {view: [azimuth, elevation]}}``.

Matplotlib runs with the non-interactive Agg backend; GIFs are written with
Pillow, MP4 with ffmpeg (when installed) and HTML with matplotlib's JS player.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from solver.errors import InputError

__all__ = ["plot_timeseries", "animate", "ANIMATION_FORMATS"]

ANIMATION_FORMATS = (".gif", ".mp4", ".html")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(ds, name: str):
    """(labels, 2-D array time x components) of a Dataset variable."""
    da = ds[name]
    arr = np.asarray(da.values, dtype=float)
    if arr.ndim == 1:
        return [name], arr[:, None]
    arr = arr.reshape(arr.shape[0], -1)
    return [f"{name}[{i}]" for i in range(arr.shape[1])], arr


def plot_timeseries(ds, out: str, variables: Sequence[str] | None = None) -> str:
    """Plot variables of a result against time and save a PNG.

    Args:
        ds: a result Dataset (``time`` dimension).
        out: the PNG path.
        variables: names to plot (data variables of ``ds``, e.g. ``x``,
            ``x_d1``, ``energy``); default: the model's unknowns.

    Returns:
        ``out``.

    Raises:
        InputError: an unknown variable (lists the valid ones) or an output
            name that is not ``.png``.
    """
    if not str(out).lower().endswith(".png"):
        raise InputError(f"--out {out!r}: plots are written as PNG; use a name ending in .png")
    valid = sorted(str(k) for k, v in ds.data_vars.items() if "time" in v.dims)
    names = list(variables) if variables else [
        str(v) for v in ds.attrs.get("variables", []) if str(v) in ds] or valid
    for n in names:
        if n not in valid:
            raise InputError(f"--vars: no time series named {n!r}; valid names: "
                             f"{', '.join(valid)}")
    plt = _pyplot()
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.2 * len(names) + 0.6), sharex=True,
                             squeeze=False)
    t = np.asarray(ds["time"].values, dtype=float)
    for ax, name in zip(axes[:, 0], names):
        labels, arr = _series(ds, name)
        for k, lab in enumerate(labels[:12]):  # a 75-vector would be unreadable
            ax.plot(t, arr[:, k], label=lab, lw=1.2)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        if 1 < len(labels) <= 12:
            ax.legend(fontsize=7, ncol=min(len(labels), 6), loc="upper right")
    axes[-1, 0].set_xlabel("time")
    fig.suptitle(str(ds.attrs.get("title", "")))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _limits(points: dict, given):
    """Axis limits: the file's ``Scene.limits`` or the points' range, padded."""
    dim = next(iter(points.values())).shape[1]
    if given:
        lims = [tuple(v) for v in given[:dim]]
        while len(lims) < dim:
            lims.append((-1.0, 1.0))
        return lims
    allp = np.concatenate([p for p in points.values()], axis=0)
    allp = allp[np.all(np.isfinite(allp), axis=1)]
    if not allp.size:
        return [(-1.0, 1.0)] * dim
    lo, hi = allp.min(axis=0), allp.max(axis=0)
    span = float(max(hi - lo)) or 1.0
    mid = (lo + hi) / 2
    return [(m - 0.6 * span, m + 0.6 * span) for m in mid]


def animate(model, ds, out: str, frames: int | None = None) -> str:
    """Animate a model's motion from a result and save it.

    Args:
        model: the :class:`solver.models.Model` (points, links, view).
        ds: its result Dataset.
        out: ``.gif`` (Pillow), ``.mp4`` (ffmpeg) or ``.html`` (JS player).
        frames: number of frames (default ``Animation.frames``, at most the
            number of output times).

    Returns:
        ``out``.

    Raises:
        InputError: an unknown format, a model with nothing to draw, or no
            ffmpeg for MP4.
    """
    suffix = Path(out).suffix.lower()
    if suffix not in ANIMATION_FORMATS:
        raise InputError(f"--out {out!r}: animations are written as "
                         f"{', '.join(ANIMATION_FORMATS)}")
    points = model.point_series(ds)
    if not points:
        raise InputError("nothing to draw: the model has no vector coordinates of size 2 or 3; "
                         "list points in Animation.Points, e.g. {bob: [x, y]}", file=model.path,
                         path="Animation")
    dims = {p.shape[1] for p in points.values()}
    dim = max(dims)
    if len(dims) > 1:  # mixed 2-D and 3-D points: lift the 2-D ones to z = 0
        points = {k: (np.pad(v, ((0, 0), (0, 1))) if v.shape[1] == 2 else v)
                  for k, v in points.items()}
    anim_cfg = model.animation or {}
    n_time = next(iter(points.values())).shape[0]
    n_frames = int(min(frames or anim_cfg.get("frames", 100), n_time))
    idx = np.unique(np.linspace(0, n_time - 1, max(n_frames, 2)).round().astype(int))
    times = np.asarray(ds["time"].values, dtype=float)
    links = [(a, b) for a, b in model.links if a in points and b in points]
    lims = _limits(points, anim_cfg.get("limits"))

    plt = _pyplot()
    from matplotlib import animation as mpl_animation

    fig = plt.figure(figsize=(5, 5), dpi=80)
    if dim == 3:
        ax = fig.add_subplot(projection="3d")
        az, el = anim_cfg.get("view") or (-60.0, 30.0)
        ax.view_init(elev=el, azim=az)
        ax.set_xlim(*lims[0]), ax.set_ylim(*lims[1]), ax.set_zlim(*lims[2])
        ax.set_xlabel("x"), ax.set_ylabel("y"), ax.set_zlabel("z")
    else:
        ax = fig.add_subplot()
        ax.set_xlim(*lims[0]), ax.set_ylim(*lims[1])
        ax.set_aspect("equal")
        ax.set_xlabel("x"), ax.set_ylabel("y")
        ax.grid(alpha=0.3)
    names = list(points)
    link_lines = [ax.plot(*([[0, 0]] * dim), "-", color="tab:blue", lw=2)[0] for _ in links]
    dots = ax.plot(*([[]] * dim), "o", color="tab:red", ms=5)[0]
    labels = [ax.text(*([0.0] * dim), n, fontsize=7) for n in names] if len(names) <= 12 else []
    title = ax.set_title("")

    def draw(k):
        i = idx[k]
        for line, (a, b) in zip(link_lines, links):
            seg = np.stack([points[a][i], points[b][i]])
            line.set_data(seg[:, 0], seg[:, 1])
            if dim == 3:
                line.set_3d_properties(seg[:, 2])
        P = np.stack([points[n][i] for n in names])
        dots.set_data(P[:, 0], P[:, 1])
        if dim == 3:
            dots.set_3d_properties(P[:, 2])
        for lab, p in zip(labels, P):
            if dim == 3:
                lab.set_position((p[0], p[1]))
                lab.set_3d_properties(p[2], None)
            else:
                lab.set_position((p[0], p[1]))
        title.set_text(f"{model.title}   t = {times[i]:.2f}")
        return link_lines + [dots, title] + labels

    fps = int(anim_cfg.get("fps", 20))
    anim = mpl_animation.FuncAnimation(fig, draw, frames=len(idx), blit=False)
    try:
        if suffix == ".gif":
            anim.save(out, writer=mpl_animation.PillowWriter(fps=fps))
        elif suffix == ".mp4":
            if not mpl_animation.writers.is_available("ffmpeg"):
                raise InputError(f"--out {out!r}: MP4 needs ffmpeg, which is not installed; "
                                 f"write a .gif or .html instead")
            anim.save(out, writer=mpl_animation.FFMpegWriter(fps=fps))
        else:
            Path(out).write_text(anim.to_jshtml(fps=fps), encoding="utf-8")
    finally:
        plt.close(fig)
    return out
