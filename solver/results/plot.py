"""Pictures of results: time-series plots and mechanism animations.

:func:`animate` is this project's version of the talk's ``animatemech``: it
draws a model's points (vector coordinates of size 2 or 3, or the
``Animation.Points`` expressions of the model file) and the links between
them (``Animation.Links``, or the pairs a kind provides as ``model.links``),
in 2-D or in a matplotlib 3-D view whose camera is the file's
``Animation: {Scene: {view: [azimuth, elevation]}}``.

The model's ``Animation.Up`` (``-z`` for a chain whose z points down) is
drawn upward; 3-D views have equal aspect; links are one line collection, so
large models (a 90×90 cloth) draw quickly, and frames are subsampled to a
time budget.  Matplotlib runs with the non-interactive Agg backend; GIFs are
written with Pillow, MP4 with ffmpeg (on PATH, or the one of the
``imageio-ffmpeg`` package: ``pip install 'mechsweep[video]'``; checked by
:func:`check_animation_output` before a solve) and HTML with matplotlib's JS
player.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from solver.errors import InputError

__all__ = ["plot_timeseries", "animate", "pyplot", "check_animation_output", "up_transform", "ANIMATION_FORMATS",
           "ANIMATION_BUDGET_S", "ANIMATION_BUDGET_ENV", "event_marks", "impact_points"]

ANIMATION_FORMATS = (".gif", ".mp4", ".html")


def pyplot():
    """matplotlib's pyplot on the Agg backend: files only, never a window.

    Every figure of the project (plots, animations, sweep and design
    pictures, benchmark summaries) is written to a file, also where a
    display exists; Agg needs none.

    Returns:
        the ``matplotlib.pyplot`` module.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# A figure of more panels than this would be unreadable: larger vectors share
# one panel (their first components) instead of one panel per component.
MAX_PANELS = 24
MAX_LINES = 12


def _component_labels(da) -> list[str]:
    """``B[x]``, ``q[3]``: a vector's component names from its component coordinate."""
    name = str(da.name)
    if da.ndim == 1:
        return [name]
    dim = da.dims[1]
    labels = da[dim].values if dim in da.coords else range(da.shape[1])
    return [f"{name}[{str(v)}]" for v in labels]


def _ylabel(text: str, da) -> str:
    unit = da.attrs.get("units")
    return f"{text} [{unit}]" if unit else text


def _panels(ds, names: Sequence[str]) -> list[tuple[str, list[tuple[str, np.ndarray]]]]:
    """(y label, [(legend label, series)]) per panel: one per scalar or component.

    A vector variable gets one panel per component while the figure stays
    within :data:`MAX_PANELS`; a larger one (a cloth's 24,300 coordinates)
    gets one panel with its first :data:`MAX_LINES` components.
    """
    sizes = {n: int(np.prod(ds[n].shape[1:], dtype=int)) for n in names}
    budget = MAX_PANELS - sum(1 for n in names if sizes[n] == 1)
    panels = []
    for n in names:
        da = ds[n]
        arr = np.asarray(da.values, dtype=float).reshape(da.shape[0], -1)
        labels = _component_labels(da) if da.ndim == 2 else [f"{n}[{i}]" for i in range(arr.shape[1])]
        if arr.shape[1] == 1:
            panels.append((_ylabel(n, da), [(n, arr[:, 0])]))
        elif arr.shape[1] <= budget:
            budget -= arr.shape[1]
            panels += [(_ylabel(lab, da), [(lab, arr[:, k])]) for k, lab in enumerate(labels)]
        else:
            budget -= 1
            shown = min(arr.shape[1], MAX_LINES)
            text = f"{n} ({shown} of {arr.shape[1]})" if shown < arr.shape[1] else n
            panels.append((_ylabel(text, da), [(labels[k], arr[:, k]) for k in range(shown)]))
    return panels


def plot_timeseries(ds, out: str, variables: Sequence[str] | None = None) -> str:
    """Plot variables of a result against time and save a PNG.

    One panel per scalar and per component of a vector variable (``B[x]``,
    ``B[y]``), its y label the name and the ``units`` attribute; a vector
    too large for one panel per component shares one panel (its first 12
    components).  A run with events has a dotted line at each event's
    times, one colour per event, named in the first panel's legend.

    Args:
        ds: a result Dataset (``time`` dimension).
        out: the PNG path.
        variables: names to plot (data variables of ``ds``, e.g. ``x``,
            ``x_d1``, ``energy``, ``momentum``); default: the model's unknowns.

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
    panels = _panels(ds, names)
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.8 * len(panels) + 0.8), sharex=True,
                             squeeze=False)
    t = np.asarray(ds["time"].values, dtype=float)
    for ax, (ylabel, lines) in zip(axes[:, 0], panels):
        for lab, y in lines:
            ax.plot(t, y, label=lab, lw=1.2)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize=7, ncol=min(len(lines), 6), loc="upper right")
    marks = event_marks(ds)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, times) in enumerate(marks.items()):
        for j, te in enumerate(times):
            for ax in axes[:, 0]:
                ax.axvline(te, color=colors[(k + 3) % len(colors)], lw=0.7, ls=":",
                           label=f"event {name}" if (j == 0 and ax is axes[0, 0]) else None)
    if marks:
        axes[0, 0].legend(fontsize=7, loc="lower right")
    unit = ds["time"].attrs.get("units")
    axes[-1, 0].set_xlabel(f"time [{unit}]" if unit else "time")
    fig.suptitle(str(ds.attrs.get("title", "")))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def event_marks(ds) -> dict:
    """Event name -> its occurrence times in a single run's Dataset (empty without events).

    Args:
        ds: a single run's result (``event_which``, ``event_time``).

    Returns:
        dict name -> sorted times, in the events' order.
    """
    if "event_time" not in ds or "point" in ds["event_time"].dims:
        return {}
    names = str(ds["event_which"].attrs.get("flag_meanings", "")).split()
    which = np.asarray(ds["event_which"].values)
    times = np.asarray(ds["event_time"].values, dtype=float)
    out = {}
    for k, name in enumerate(names):
        sel = times[(which == k) & np.isfinite(times)]
        if sel.size:
            out[name] = np.sort(sel)
    return out


def impact_points(model, ds) -> tuple[np.ndarray, dict]:
    """The drawn points at a run's impacts (what :func:`animate` crosses).

    Args:
        model: the model (its stops and drawn points).
        ds: a single run's result.

    Returns:
        (times, points): the stops' impact times and point name -> (impacts,
        2 or 3) positions there; empty without stops.
    """
    stops = [s.name for s in getattr(model.dae, "stops", ())]
    if not stops or "event_time" not in ds:
        return np.zeros(0), {}
    names = str(ds["event_which"].attrs.get("flag_meanings", "")).split()
    which = np.asarray(ds["event_which"].values)
    keep = np.isin(which, [names.index(s) for s in stops if s in names])
    times = np.asarray(ds["event_time"].values, dtype=float)[keep]
    import xarray as xr

    at = {}
    for v in model.dae.variables:
        for name in (v.name, *[f"{v.name}_d{k}" for k in range(1, 4)]):
            if f"{name}_at_event" in ds:
                da = ds[f"{name}_at_event"]
                at[name] = (("time",) + da.dims[1:], np.asarray(da.values)[keep])
    events = xr.Dataset({k: xr.Variable(*val) for k, val in at.items()}, coords={"time": times},
                        attrs=ds.attrs)
    return times, model.point_series(events)


# --------------------------------------------------------------- animation
# Seconds the frames of one animation may take to render and encode; the
# frames are subsampled (evenly in time) to fit.  MECHSWEEP_ANIMATION_BUDGET
# changes it.
ANIMATION_BUDGET_S = 40.0
ANIMATION_BUDGET_ENV = "MECHSWEEP_ANIMATION_BUDGET"
# Above this many links or points, labels are left out and markers shrink.
LARGE_MODEL = 200

_VIDEO_HINT = ("install an ffmpeg: pip install imageio-ffmpeg (or pip install 'mechsweep[video]'), "
               "or your system's ffmpeg package; or write a .gif or .html instead")


def _ffmpeg_available() -> bool:
    """Whether matplotlib can write MP4: ffmpeg on PATH, or the one imageio-ffmpeg ships."""
    import matplotlib
    from matplotlib import animation as mpl_animation

    if mpl_animation.writers.is_available("ffmpeg"):
        return True
    try:
        import imageio_ffmpeg
        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except Exception:  # noqa: BLE001 - not installed, or its binary is missing
        return False
    matplotlib.rcParams["animation.ffmpeg_path"] = exe
    return mpl_animation.writers.is_available("ffmpeg")


def check_animation_output(out: str) -> str:
    """Check an animation's ``--out`` before any work (the solve) is done.

    Args:
        out: the output path.

    Returns:
        its suffix (``.gif``, ``.mp4`` or ``.html``).

    Raises:
        InputError: an unknown format, MP4 without an ffmpeg (says how to
            install one), or a render budget (``MECHSWEEP_ANIMATION_BUDGET``)
            that is not a positive number of seconds.
    """
    suffix = Path(out).suffix.lower()
    if suffix not in ANIMATION_FORMATS:
        raise InputError(f"--out {out!r}: animations are written as "
                         f"{', '.join(ANIMATION_FORMATS)}")
    if suffix == ".mp4" and not _ffmpeg_available():
        raise InputError(f"--out {out!r}: MP4 needs ffmpeg, which was not found; {_VIDEO_HINT}")
    _frame_budget()
    return suffix


def up_transform(up: str | None, dim: int) -> tuple[np.ndarray, list[str]]:
    """The rotation that draws a model's up direction upward, and the axis labels.

    Args:
        up: ``Animation.Up`` (``z``, ``-z``, ``+y``...; None: +z in 3-D, +y
            in 2-D).
        dim: 2 or 3.

    Returns:
        (M, labels): display = M @ world (a proper rotation: signed axis
        permutation), and the world axis each display axis shows (``-y``).

    Raises:
        InputError: a malformed direction, or z in 2-D.
    """
    axes = "xyz"[:dim]
    text = (up or "+" + axes[-1]).strip()
    sign = -1.0 if text.startswith("-") else 1.0
    name = text.lstrip("+-")
    if len(name) != 1 or name not in axes or len(text) - len(name) > 1:
        raise InputError(f"Animation.Up: expected one of {', '.join(f'{s}{a}' for a in axes for s in '+-')} "
                         f"for a {dim}-D model, got {up!r}")
    a = axes.index(name)
    M = np.zeros((dim, dim))
    if dim == 3:
        # x' = world[a+1], y' = s world[a+2], z' = s world[a]: a rotation.
        rows = [((a + 1) % 3, 1.0), ((a + 2) % 3, sign), (a, sign)]
    else:
        # y' = s world[a]; x' the other axis, signed to keep the orientation.
        rows = [(1 - a, sign * (1.0 if a == 1 else -1.0)), (a, sign)]
    labels = []
    for i, (j, sg) in enumerate(rows):
        M[i, j] = sg
        labels.append(("-" if sg < 0 else "") + axes[j])
    return M, labels


def _limits(points: dict, given, M: np.ndarray | None = None):
    """Display axis limits: the file's ``Scene.limits`` (world axes) or the points' cube, padded.

    The points' limits are a cube (the same span on every axis) around their
    range, so that a 3-D view with a cubic box has equal aspect.
    """
    dim = next(iter(points.values())).shape[1]
    if given:
        lims = [tuple(v) for v in given[:dim]]
        while len(lims) < dim:
            lims.append((-1.0, 1.0))
        if M is None:
            return lims
        corners = np.array(lims, dtype=float).T               # (2, dim) world
        shown = corners @ M.T
        return [(float(min(shown[:, i])), float(max(shown[:, i]))) for i in range(dim)]
    allp = np.concatenate([p for p in points.values()], axis=0)
    allp = allp[np.all(np.isfinite(allp), axis=1)]
    if not allp.size:
        return [(-1.0, 1.0)] * dim
    lo, hi = allp.min(axis=0), allp.max(axis=0)
    span = float(max(hi - lo)) or 1.0
    mid = (lo + hi) / 2
    return [(m - 0.6 * span, m + 0.6 * span) for m in mid]


def follow_limits(points: dict, follow: list, given=None, M: np.ndarray | None = None) -> np.ndarray:
    """Per-frame axis limits of a camera that tracks the mean of the ``follow`` points.

    Args:
        points: name -> (n_time, dim) display coordinates.
        follow: names of the followed points (one point, or a body's).
        given: ``Scene.limits`` relative to the followed centre (world
            axes), or None: a cube just holding every drawn point around the
            centre at every time.
        M: the display transform (``Animation.Up``), for ``given``.

    Returns:
        (n_time, dim, 2) limits.

    Raises:
        InputError: a followed name that is not a drawn point.
    """
    missing = [n for n in follow if n not in points]
    if missing:
        raise InputError(f"Animation.follow: unknown point {missing[0]!r}; the drawn points are "
                         f"{', '.join(points)}")
    centre = np.mean(np.stack([points[n] for n in follow]), axis=0)      # (n_time, dim)
    dim = centre.shape[1]
    if given:
        rel = np.array(_limits({"c": np.zeros((1, dim))}, given, M), dtype=float)   # (dim, 2)
    else:
        allp = np.stack(list(points.values()), axis=1) - centre[:, None, :]     # (time, point, dim)
        reach = np.nanmax(np.abs(allp)) if np.isfinite(allp).any() else 1.0
        half = 1.2 * (float(reach) or 1.0)
        rel = np.array([[-half, half]] * dim)
    return centre[:, :, None] + rel[None, :, :]


def _frame_budget() -> float:
    """The render budget in seconds: :data:`ANIMATION_BUDGET_S`, or ``MECHSWEEP_ANIMATION_BUDGET`` where set.

    Raises:
        InputError: the variable holds anything but a positive number of seconds.
    """
    import math
    import os

    text = os.environ.get(ANIMATION_BUDGET_ENV, "").strip()
    if not text:
        return ANIMATION_BUDGET_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise InputError(f"{ANIMATION_BUDGET_ENV}={text!r}: expected a positive number of seconds "
                         f"(the default is {ANIMATION_BUDGET_S:g})")
    return seconds


class _Scene:
    """The artists of one animation: links as one collection, points as one marker line."""

    def __init__(self, fig, points: dict, links: list, lims, dim: int, labels3, view, title: str,
                 times, frame_lims=None):
        from matplotlib.collections import LineCollection

        self.points, self.names, self.dim, self.times, self.title_text = points, list(points), dim, times, title
        self.frame_lims = frame_lims  # (n_time, dim, 2) for a following camera
        index = {n: i for i, n in enumerate(self.names)}
        self.link_idx = np.array([(index[a], index[b]) for a, b in links], dtype=int).reshape(-1, 2)
        self.P = np.stack([points[n] for n in self.names], axis=1)      # (time, point, dim)
        large = len(self.names) > LARGE_MODEL or len(links) > LARGE_MODEL
        if dim == 3:
            from mpl_toolkits.mplot3d.art3d import Line3DCollection

            ax = fig.add_subplot(projection="3d")
            az, el = view or (-60.0, 30.0)
            ax.view_init(elev=el, azim=az)
            ax.set_xlim(*lims[0]), ax.set_ylim(*lims[1]), ax.set_zlim(*lims[2])
            # Equal aspect: the box's sides in proportion to the axis ranges.
            ax.set_box_aspect([hi - lo for lo, hi in lims])
            ax.set_xlabel(labels3[0]), ax.set_ylabel(labels3[1]), ax.set_zlabel(labels3[2])
            self.lines = Line3DCollection([], colors="tab:blue", linewidths=0.4 if large else 2)
            ax.add_collection3d(self.lines, autolim=False)
        else:
            ax = fig.add_subplot()
            ax.set_xlim(*lims[0]), ax.set_ylim(*lims[1])
            ax.set_aspect("equal")
            ax.set_xlabel(labels3[0]), ax.set_ylabel(labels3[1])
            ax.grid(alpha=0.3)
            self.lines = LineCollection([], colors="tab:blue", linewidths=0.4 if large else 2)
            ax.add_collection(self.lines, autolim=False)
        self.dots = ax.plot(*([[]] * dim), "o", color="tab:red", ms=1.5 if large else 5)[0]
        self.labels = ([ax.text(*([0.0] * dim), n, fontsize=7) for n in self.names]
                       if len(self.names) <= 12 else [])
        self.title = ax.set_title("")
        self.ax = ax
        self.impact_times = np.zeros(0)
        self.impact_marks = None

    def mark_impacts(self, times, points: dict):
        """Cross the moving points' positions at every impact, each from its time on."""
        moving = [n for n in self.names if n in points and np.ptp(self.points[n], axis=0).max() > 0]
        if not len(times) or not moving:
            return
        self.impact_times = np.asarray(times)
        self.impact_P = np.stack([points[n] for n in moving], axis=1)   # (impact, point, dim)
        self.impact_marks = self.ax.plot(*([[]] * self.dim), "x", color="tab:orange", ms=7, mew=2)[0]

    def draw(self, i: int):
        P = self.P[i]
        if self.frame_lims is not None:
            lims = self.frame_lims[i]
            self.ax.set_xlim(*lims[0]), self.ax.set_ylim(*lims[1])
            if self.dim == 3:
                self.ax.set_zlim(*lims[2])
        self.lines.set_segments(P[self.link_idx] if len(self.link_idx) else [])
        self.dots.set_data(P[:, 0], P[:, 1])
        if self.dim == 3:
            self.dots.set_3d_properties(P[:, 2])
        for lab, p in zip(self.labels, P):
            lab.set_position((p[0], p[1]))
            if self.dim == 3:
                lab.set_3d_properties(p[2], None)
        title = f"{self.title_text}   t = {self.times[i]:.2f}"
        extra = []
        if self.impact_marks is not None:
            seen = self.impact_times <= self.times[i]
            Q = self.impact_P[seen].reshape(-1, self.dim)
            self.impact_marks.set_data(Q[:, 0], Q[:, 1])
            if self.dim == 3:
                self.impact_marks.set_3d_properties(Q[:, 2])
            title += f"   impacts: {int(seen.sum())}"
            extra = [self.impact_marks]
        self.title.set_text(title)
        return [self.lines, self.dots, self.title] + self.labels + extra


def _frame_indices(scene: _Scene, fig, n_time: int, wanted: int, budget: float) -> np.ndarray:
    """Output-time indices of the frames: ``wanted`` evenly spaced, fewer if over ``budget``.

    The cost of a frame is measured by drawing two; encoding is allowed about
    as much again.
    """
    import time

    idx = np.unique(np.linspace(0, n_time - 1, max(min(wanted, n_time), 2)).round().astype(int))
    t0 = time.perf_counter()
    for i in idx[:2]:
        scene.draw(i)
        fig.canvas.draw()
    per_frame = 2.0 * (time.perf_counter() - t0) / min(2, len(idx))
    fit = int(budget / max(per_frame, 1e-6))
    if fit < len(idx):
        idx = np.unique(np.linspace(0, n_time - 1, max(fit, 2)).round().astype(int))
    return idx


def animate(model, ds, out: str, frames: int | None = None, budget_s: float | None = None) -> str:
    """Animate a model's motion from a result and save it.

    The links are drawn as one ``LineCollection`` (``Line3DCollection`` in
    3-D) and the points as one marker line, so a 90×90 cloth costs a few
    artists a frame; frames are subsampled evenly in time so that rendering
    stays within ``budget_s``.  A 3-D view has equal aspect; the model's
    ``Animation.Up`` (e.g. ``-z``) is drawn upward; with ``Animation.follow``
    the camera tracks a point or a body (:func:`follow_limits`).  A model
    with stops gets a cross at the moving points' positions at each impact
    (from its time on) and the count of impacts in the title; the stops
    themselves are drawn as the model's ``Animation`` points and links
    draw them (a wall as a link between two fixed points).

    Args:
        model: the :class:`solver.models.Model` (points, links, view, up).
        ds: its result Dataset.
        out: ``.gif`` (Pillow), ``.mp4`` (ffmpeg) or ``.html`` (JS player).
        frames: number of frames (default ``Animation.frames``, at most the
            number of output times).
        budget_s: seconds the frames may take to render (default
            :data:`ANIMATION_BUDGET_S`, or ``MECHSWEEP_ANIMATION_BUDGET``).

    Returns:
        ``out``.

    Raises:
        InputError: an unknown format, a model with nothing to draw, a bad
            ``Animation.Up``, or no ffmpeg for MP4.
    """
    suffix = check_animation_output(out)
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
    try:
        M, axis_labels = up_transform(anim_cfg.get("up"), dim)
    except InputError as err:
        raise InputError(str(err), file=model.path, path="Animation.Up") from None
    points = {k: v @ M.T for k, v in points.items()}
    n_time = next(iter(points.values())).shape[0]
    times = np.asarray(ds["time"].values, dtype=float)
    links = [(a, b) for a, b in model.links if a in points and b in points]
    follow = anim_cfg.get("follow")
    frame_lims = None
    if follow:
        try:
            frame_lims = follow_limits(points, follow, anim_cfg.get("limits"), M)
        except InputError as err:
            raise InputError(str(err), file=model.path, path="Animation.follow") from None
        lims = [tuple(r) for r in frame_lims[0]]
    else:
        lims = _limits(points, anim_cfg.get("limits"), M)

    plt = pyplot()
    from matplotlib import animation as mpl_animation

    fig = plt.figure(figsize=(5, 5), dpi=80)
    try:
        scene = _Scene(fig, points, links, lims, dim, axis_labels, anim_cfg.get("view"), model.title,
                       times, frame_lims)
        hit_times, hit_points = impact_points(model, ds)
        scene.mark_impacts(hit_times, {k: (v if v.shape[1] == dim else np.pad(v, ((0, 0), (0, 1)))) @ M.T
                                       for k, v in hit_points.items()})
        wanted = int(frames or anim_cfg.get("frames", 100))
        idx = _frame_indices(scene, fig, n_time, wanted, _frame_budget() if budget_s is None else budget_s)
        fps = int(anim_cfg.get("fps", 20))
        anim = mpl_animation.FuncAnimation(fig, lambda k: scene.draw(idx[k]), frames=len(idx),
                                           blit=False)
        if suffix == ".gif":
            anim.save(out, writer=mpl_animation.PillowWriter(fps=fps))
        elif suffix == ".mp4":
            anim.save(out, writer=mpl_animation.FFMpegWriter(fps=fps))
        else:
            Path(out).write_text(anim.to_jshtml(fps=fps), encoding="utf-8")
    finally:
        plt.close(fig)
    return out
