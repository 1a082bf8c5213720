"""A structural sweep's store on disk: its root group, made, checked for a resume, and read back.

The root ``STORE.zarr`` of a structural sweep (:mod:`sweep.structural`) is a
Zarr group without arrays whose attributes mark it (``ROOT_MARK``, the
format :data:`STRUCTURAL_FORMAT`) and list the structure groups; each group
is an ordinary sweep store (:mod:`sweep.store`) in a child group.
"""

from __future__ import annotations

import datetime
import json
import shutil
import warnings
from pathlib import Path

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.location import StoreLocation, is_url
from sweep.store.schema import is_store, place
from sweep.store.tree import ROOT_MARK, groups_of, root_attrs

__all__ = ["STRUCTURAL_FORMAT", "create_root", "prepare_root", "status_report", "points_dataset"]

#: Layout version of the structural root (groups are ordinary stores of their own format).
STRUCTURAL_FORMAT = 1


# ------------------------------------------------------------------ the root

def _root_attrs_for(spec, names: list[str], groups: list) -> dict:
    from solver.results.solution import package_versions

    return {
        ROOT_MARK: STRUCTURAL_FORMAT,
        "title": spec.title,
        "model_path": str(spec.model_path),
        "structural_sweep_hash": spec.hash,
        "structural_parameters": list(names),
        "structural_n_points": int(spec.n_points),
        "sweep_batch": int(spec.batch),
        "sweep_groups": [g.label for g in groups],
        "sweep_group_points": [g.n_points for g in groups],
        "package_versions": json.dumps(package_versions(), sort_keys=True),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def consolidate_root(path) -> None:
    """Consolidate the root's metadata (the groups' included) for quiet xarray opens."""
    import zarr

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        zarr.consolidate_metadata(str(path))


def _template(group_path: Path, group) -> None:
    from sweep.store import create_template

    ctx = group.context
    create_template(group_path, group.spec.hash, group.spec.points, ctx.schema, ctx.attrs,
                    int(group.spec.batch))


def create_root(path, spec, names: list[str], groups: list) -> None:
    """Write an empty structural store: the root and every group's template.

    Built in a temporary sibling folder and renamed into place, so a half
    written store never exists at ``path``.  ``groups``: the
    :class:`sweep.structural.Group` list of :func:`sweep.structural.plan_groups`.

    Raises:
        FileExistsError: ``path`` exists.
    """
    import zarr

    if StoreLocation(path).exists():
        raise FileExistsError(f"{path} exists; remove it or resume it")
    if is_url(path):
        # No rename on object storage: built in a local folder and uploaded, the groups'
        # template records last (a group without one is made again by the next run).
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mechsweep-template-") as folder:
            local = Path(folder) / "store.zarr"
            zarr.open_group(str(local), mode="w-", zarr_format=3,
                            attributes=_root_attrs_for(spec, names, groups))
            for g in groups:
                _template(local / g.label, g)
            consolidate_root(local)
            StoreLocation(path).upload(local, last=tuple(f"{g.label}/template_commit/c" for g in groups))
        return
    from sweep.folders import publish, temporary_sibling

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    try:
        zarr.open_group(str(tmp), mode="w-", zarr_format=3,
                        attributes=_root_attrs_for(spec, names, groups))
        for g in groups:
            _template(tmp / g.label, g)
        consolidate_root(tmp)
        publish(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def prepare_root(path, spec, names: list[str], groups: list, mode: str) -> bool:
    """Make the structural store at ``path`` ready; whether it was created new.

    ``overwrite`` deletes a store there (a plain or structural sweep store,
    never another folder); a new (or empty) path gets :func:`create_root`;
    an existing structural store must come from the same sweep (same hash).

    Raises:
        InputError: ``path`` is no Zarr store, a store of another sweep (or a
            plain sweep store) without ``--overwrite``, or of a newer format.
    """
    from sweep.store import MODES

    where = StoreLocation(path)
    path = place(path)
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if where.exists() and mode == "overwrite":
        if not is_store(path) and (where.remote or any(path.iterdir())):
            raise InputError("exists and is not a Zarr store; refusing to delete it even with "
                             "--overwrite. Choose another --out path", file=str(path))
        where.remove()
    if not where.remote and path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
        path.rmdir()          # an empty folder given as --out
    if not where.exists():
        create_root(path, spec, names, groups)
        return True
    if not is_store(path):
        raise InputError("exists and is not a Zarr store. Choose another --out path",
                         file=str(path))
    attrs = root_attrs(path)
    if ROOT_MARK not in attrs:
        what = ("a sweep store of one structure (no groups)" if "sweep_hash" in attrs
                else "a Zarr store but not a mechsweep sweep store")
        raise InputError(f"is {what}, but this sweep varies the structural parameter"
                         f"{'s' if len(names) > 1 else ''} {', '.join(names)} and stores one "
                         f"Zarr group per structure. Pass --overwrite to replace it, or choose "
                         f"a new --out path", file=str(path))
    fmt = attrs.get(ROOT_MARK)
    if not isinstance(fmt, int) or fmt > STRUCTURAL_FORMAT:
        raise InputError(f"written by a newer mechsweep (structural store format {fmt!r}); this "
                         f"version reads formats up to {STRUCTURAL_FORMAT}. Use a newer mechsweep",
                         file=str(path))
    if attrs.get("structural_sweep_hash") != spec.hash:
        raise InputError(f"the store was written by sweep {attrs.get('structural_sweep_hash')}, "
                         f"but this sweep has hash {spec.hash} (the sweep file, its model or an "
                         f"override changed). Pass --overwrite to replace the store, or choose a "
                         f"new --out path", file=str(path))
    return False


# ------------------------------------------------------------------ reading

def status_report(path, level: str = "quick") -> tuple[str, bool]:
    """``mechsweep status`` of a structural store: a header, then each group's report.

    Args:
        path: the root.
        level: the :func:`sweep.store.check_store` level for every group.

    Returns:
        ``(text, ok)``: ``ok`` is False when a group's store is damaged or
        missing (pending batches are not damage).

    Raises:
        InputError: not a structural store; ``--verify`` on a group of
            format 1 (cannot happen for stores written by this version).
    """
    from sweep.store import check_store
    from sweep.store import status_report as group_report

    path = place(path)
    attrs, labels = groups_of(path)
    points = attrs.get("sweep_group_points") or [None] * len(labels)
    ok, totals, reports = True, {}, []
    for label, n in zip(labels, points):
        gpath = path / label
        if not is_store(gpath):
            ok = False
            reports.append(f"group {label}: MISSING ({n} points): its Zarr group is gone; "
                           f"'mechsweep sweep SWEEP.yaml --out {path} --resume' recomputes it")
            totals["missing"] = totals.get("missing", 0) + int(n or 0)
            continue
        try:
            check = check_store(gpath, level)
        except InputError as err:      # its metadata unreadable: the other groups still report
            ok = False
            reports.append(f"group {label}: UNREADABLE ({n} points): {err}; 'mechsweep sweep "
                           f"SWEEP.yaml --out {path} --overwrite' recomputes the store")
            totals["damaged"] = totals.get("damaged", 0) + int(n or 0)
            continue
        ok = ok and check.ok
        for i, sl in enumerate(check.slices):
            codes = check.codes[sl]
            if i in check.damaged:
                totals["damaged"] = totals.get("damaged", 0) + len(codes)
                continue
            for v, c in zip(*np.unique(codes, return_counts=True)):
                totals[st.meaning(v)] = totals.get(st.meaning(v), 0) + int(c)
        text = group_report(gpath, check=check)
        reports.append(f"group {label}:\n" + "\n".join("  " + line for line in text.splitlines()))
    lines = [
        f"store:      {path} (structural sweep: one Zarr group per structure)",
        f"title:      {attrs.get('title', '')}",
        f"sweep hash: {attrs.get('structural_sweep_hash', '?')}",
        f"created:    {attrs.get('created', '?')}",
        f"structural: {', '.join(attrs.get('structural_parameters') or [])}",
        f"points:     {attrs.get('structural_n_points', '?')} in {len(labels)} groups: "
        + ", ".join(f"{label} ({n})" for label, n in zip(labels, points)),
        "status:     " + (", ".join(f"{k} {v}" for k, v in sorted(
            totals.items(), key=lambda kv: (st.CODES.get(kv[0], 99), kv[0]))) or "nothing"),
        *reports,
    ]
    return "\n".join(lines), ok


def points_dataset(path):
    """The per-point values of every group of a structural store, as one Dataset.

    The coordinates on ``point`` (swept names, the structural ones among
    them), the scalar outputs (metrics) and ``status`` of the groups,
    concatenated along ``point`` in group order (for summaries and plots;
    the series stay in the groups, whose shapes differ).
    """
    import xarray as xr

    path = place(path)
    attrs, labels = groups_of(path)
    parts = []
    for label in labels:
        if not is_store(path / label):
            continue
        ds = xr.open_zarr(str(path / label))
        keep = [v for v in ds.data_vars if ds[v].dims == ("point",)]
        parts.append(ds[keep])        # keeps the coordinates on point only
    if not parts:
        return xr.Dataset(attrs=attrs)
    combined = xr.concat(parts, dim="point", join="outer", data_vars="all", coords="different",
                         compat="equals")
    combined.attrs = dict(attrs)
    return combined
