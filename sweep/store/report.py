"""The text of ``mechsweep status``: counts by status, failures by reason, batch messages, integrity."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import zarr

from solver import status as st
from sweep.store.check import StoreCheck, check_store
from sweep.store.schema import legacy_message, place, resume_target

__all__ = [
    "status_report", "failure_groups",
]


def status_report(path, check: StoreCheck | None = None) -> str:
    """The text of ``mechsweep status STORE``: title, hash, batches, counts, integrity.

    Points are counted by status only in batches that are done (their
    commit record matches their chunks); points of pending batches count as
    pending and points of damaged batches as damaged, whatever status they
    may still hold.

    Args:
        path: the store.
        check: a :class:`StoreCheck` of it; default a ``quick`` one.

    Returns:
        A multi-line report; failed points are grouped by reason (count,
        reason, status and range of failure times; at most ten groups, store
        format 3 on), failed batches' messages are listed (first line of
        each, at most ten), and every damaged batch with what is wrong.

    Raises:
        InputError: no sweep store at ``path`` (or one of a newer format).
    """
    path = place(path)
    check = check if check is not None else check_store(path, "quick")
    group = zarr.open_group(str(path), mode="r")
    attrs = dict(group.attrs)
    damaged_points = sum(check.slices[i].stop - check.slices[i].start for i in check.damaged)
    counted = check.codes.copy()
    for i in check.damaged:
        counted[check.slices[i]] = np.iinfo(np.int8).min     # not counted by status
    values, counts = np.unique(counted[counted != np.iinfo(np.int8).min], return_counts=True)
    lines = [
        f"store:      {path}",
        f"title:      {attrs.get('title', '')}",
        f"sweep hash: {attrs['sweep_hash']}",
        f"created:    {attrs.get('created', '?')}",
        f"points:     {check.n_points} ({check.batch} per batch)",
        f"batches:    {len(check.done)} done, {len(check.pending)} pending, "
        + (f"{len(check.damaged)} damaged, " if check.damaged else "")
        + f"{len(check.slices)} in all",
        "status:",
    ]
    names = [st.meaning(v) for v in values] + (["damaged"] if damaged_points else [])
    width = max(len(name) for name in names)
    for v, c in zip(values, counts):
        lines.append(f"  {st.meaning(v):<{width}}  {int(c):>8}  ({int(v)}: "
                     f"{st.DESCRIPTIONS.get(int(v), 'unknown code')})")
    if damaged_points:
        lines.append(f"  {'damaged':<{width}}  {damaged_points:>8}  (points of damaged batches, "
                     f"listed below)")
    lines += _failure_lines(group, check)
    lines += _message_lines(group, check)
    resume = resume_target(path, attrs)
    lines += _integrity_lines(check, path, resume)
    if check.todo and not check.legacy:
        lines.append(f"resume with: mechsweep sweep SWEEP.yaml --out {resume} --resume")
    return "\n".join(lines)


def failure_groups(codes: np.ndarray, times: np.ndarray, reasons: np.ndarray) -> list[dict]:
    """The failed points grouped by status and reason, the largest group first.

    Args:
        codes: ``(n,)`` status codes (points not done already set to pending).
        times: ``(n,)`` failure times.
        reasons: ``(n,)`` failure reasons.

    Returns:
        One dict per group: ``status`` (meaning), ``reason``, ``count``,
        ``first``/``last`` (the smallest and largest failure time, NaN if
        none is known) and ``points`` (their indices, ascending); ties in
        size keep the order of their first point.
    """
    groups: dict[tuple, dict] = {}
    for i in np.flatnonzero(st.is_failure(codes)):
        key = (st.meaning(codes[i]), str(reasons[i]))
        g = groups.setdefault(key, {"status": key[0], "reason": key[1], "points": []})
        g["points"].append(int(i))
    out = []
    for g in groups.values():
        t = np.asarray(times, dtype=float)[g["points"]]
        known = t[np.isfinite(t)]
        g.update(count=len(g["points"]), first=float(known.min()) if known.size else math.nan,
                 last=float(known.max()) if known.size else math.nan)
        out.append(g)
    return sorted(out, key=lambda g: (-g["count"], g["points"][0]))


_LEVEL_TEXT = {
    "quick": "quick (commit records; chunk files present with their committed sizes; "
             "chunks changed since their commit checksummed). "
             "'mechsweep status --verify' reads every chunk",
    "checksum": "checksum of every committed chunk",
    "decode": "every chunk read, checksummed and decoded (--verify)",
}


def _integrity_lines(check: StoreCheck, path: Path, resume: Path | None = None) -> list[str]:
    """The integrity part of the status report."""
    if check.legacy:
        return ["integrity:  NOT VERIFIABLE: this store " + legacy_message(
            "Its batches are counted by status alone. Re-run the sweep with --overwrite for a "
            "verifiable store")]
    lines = [f"integrity:  {_LEVEL_TEXT[check.level]}"]
    if check.damaged:
        lines.append(f"damaged batches ({len(check.damaged)}; their points count as damaged, "
                     f"not by status; 'mechsweep sweep SWEEP.yaml --out {resume or path} --resume' "
                     f"recomputes them):")
        for i, problems in sorted(check.damaged.items()):
            sl = check.slices[i]
            for p in problems:
                lines.append(f"  batch {i} (points {sl.start}-{sl.stop - 1}): {p}")
    for p in check.store_problems:
        lines.append(f"store problem: {p}")
    return lines


def _failure_lines(group: zarr.Group, check: StoreCheck, limit: int = 10) -> list[str]:
    """Failed points (of done batches) by reason: count, status, reason, time range."""
    codes = check.codes
    if codes is None or not st.is_failure(codes).any() or "failure_reason" not in group:
        return []      # a store of format 2 keeps no reasons: the status counts say it all
    try:
        reasons = group["failure_reason"][:]
        times = group["failure_time"][:]
    except Exception as exc:  # noqa: BLE001 - a damaged chunk must not hide the report
        return [f"failures by reason: unreadable ({type(exc).__name__}); "
                f"'mechsweep status --verify' names the damaged batches"]
    groups = failure_groups(codes, times, reasons)
    lines = [f"failures by reason ({sum(g['count'] for g in groups)} points):"]
    for g in groups[:limit]:
        when = ""
        if math.isfinite(g["first"]):
            first, last = f"{g['first']:.6g}", f"{g['last']:.6g}"
            span = first if first == last else f"{first} to {last}"
            when = f", t = {span}"
        lines.append(f"  {g['count']:>8}  {g['reason'] or '(no reason recorded)'}  "
                     f"[{g['status']}{when}]")
    if len(groups) > limit:
        lines.append(f"  ... and {len(groups) - limit} more reasons "
                     f"(ds.sweep.failures() lists every failed point)")
    return lines


def _message_lines(group: zarr.Group, check: StoreCheck) -> list[str]:
    """The first line of each non-empty batch message (at most ten)."""
    try:
        messages = group["batch_message"][:]
    except Exception as exc:  # noqa: BLE001 - a damaged shared array must not hide the report
        return [f"batch messages: unreadable ({type(exc).__name__})"]
    noted = [(i, str(m)) for i, m in enumerate(messages) if str(m).strip()]
    if not noted:
        return []
    lines = ["batch messages:"]
    for i, m in noted[:10]:
        lines.append(f"  batch {i}: {m.strip().splitlines()[0]}")
    if len(noted) > 10:
        lines.append(f"  ... and {len(noted) - 10} more (variable batch_message)")
    return lines
