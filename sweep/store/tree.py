"""Opening a store for analysis: a plain store as a verified Dataset, a structural root as a DataTree.

A sweep over structural parameters (:mod:`sweep.structural`) writes one plain
store per structure group, as child groups (``STORE.zarr/N=3``) of one Zarr
root marked :data:`ROOT_MARK`; :func:`open_store` opens that root as an
``xarray.DataTree``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import zarr

from sweep.store.check import check_store
from sweep.store.schema import is_store, place, resume_target

__all__ = [
    "ROOT_MARK", "root_attrs", "is_structural_store", "groups_of", "open_store", "open_tree",
]


#: The root attribute that marks a structural sweep's store: one plain store per structure group.
ROOT_MARK = "mechsweep_structural_sweep"


def root_attrs(path) -> dict:
    """The attributes of a store's root group (no data read)."""
    return dict(zarr.open_group(str(path), mode="r").attrs)


def is_structural_store(path) -> bool:
    """Whether ``path`` is the root of a structural sweep store."""
    path = place(path)
    if not is_store(path):
        return False
    try:
        return ROOT_MARK in root_attrs(path)
    except Exception:  # noqa: BLE001 - unreadable metadata: not one (the plain checks say why)
        return False


def groups_of(path: Path) -> tuple[dict, list[str]]:
    """A structural root's attributes and its structure groups' names (``"N=3"``), in order."""
    attrs = root_attrs(path)
    labels = attrs.get("sweep_groups")
    if isinstance(labels, str):
        labels = json.loads(labels)
    return attrs, [str(x) for x in labels or []]


def open_store(path, verify: str | None = "quick", group: str | None = None):
    """Open a sweep store lazily as an xarray Dataset with the ``.sweep`` accessor.

    A *structural* store (a sweep over structural parameters, one Zarr
    group per structure: :mod:`sweep.structural`) opens as an
    ``xarray.DataTree`` with one child per group, named like ``N=3``, each
    the Dataset this function gives for a plain store (``tree["N=3"].ds``);
    with ``group="N=3"``, that one Dataset.

    The ``status`` it shows is the verified one: the points of batches that
    are not committed, or whose chunks no longer match their commit record
    (:func:`check_store`), read as pending, so that post-analysis never
    takes a lost chunk's NaNs for a successful result.  Damage also gives a
    warning naming the batches and the command that repairs them; a store
    that cannot be checked (a partial copy) opens as stored, with a warning.

    Args:
        path: the store.
        verify: the :func:`check_store` level (``quick`` reads only the
            commit records and the chunk files' sizes), or None for the
            stored ``status`` as it is.
        group: for a structural store, the structure group to open.

    Returns:
        The dataset (dask-backed; nothing else is read until used), or for
        a structural store without ``group`` the ``xarray.DataTree``.

    Raises:
        FileNotFoundError: no store at ``path``.
        KeyError: ``group`` is not a group of the structural store.
        ValueError: ``group`` given for a plain store (it has no groups).
    """
    import sweep.accessor  # noqa: F401  (registers ds.sweep)

    if not is_store(path):
        raise FileNotFoundError(f"{path}: no Zarr store there")
    if is_structural_store(path):
        return open_tree(path, verify, group)
    if group is not None:
        raise ValueError(f"{path}: a plain sweep store has no structure groups (group={group!r}); "
                         f"open it without group")
    import xarray as xr  # not at the top: `mechsweep status` reads no dataset

    ds = xr.open_zarr(str(path))
    if verify is None or "status" not in ds:
        return ds
    try:
        check = check_store(path, verify)
    except Exception as err:  # noqa: BLE001 - a store that cannot be checked still opens
        # (e.g. a copy written by xarray that kept the sweep's attributes but
        # not all of its arrays): the data are the user's; say what is missing.
        warnings.warn(f"{path}: status not verified against the commit records ({err!r}); "
                      f"it is shown as stored", stacklevel=2)
        return ds
    if check.legacy:
        return ds
    if check.damaged:
        warnings.warn(
            f"{path}: batches {_ranges(sorted(check.damaged))} no longer match their commit records "
            f"(mechsweep status {path} names the chunks); their points read as pending until "
            f"'mechsweep sweep SWEEP.yaml --out {resume_target(path, ds.attrs)} --resume' "
            f"recomputes them", stacklevel=2)
    if check.store_problems:
        warnings.warn(f"{path}: files written once are damaged, so coordinates or metadata may read "
                      f"wrong: {'; '.join(check.store_problems)}", stacklevel=2)
    stored = ds["status"]
    return ds.assign(status=(stored.dims, np.asarray(check.codes, dtype=stored.dtype), stored.attrs))


def open_tree(path, verify: str | None = "quick", group: str | None = None):
    """Open a structural store: an ``xarray.DataTree`` of its groups, or one group's Dataset.

    Args:
        path: the root.
        verify: as for :func:`sweep.store.open_store`, for every group.
        group: a group's name (``"N=3"``): return its Dataset only.

    Returns:
        ``xarray.DataTree`` whose root holds the root's attributes and whose
        children, named by group, are what :func:`sweep.store.open_store`
        gives for each group's store; a group whose store is missing is left
        out with a warning. With ``group``, that Dataset.

    Raises:
        KeyError: ``group`` is not one of the store's groups.
    """
    path = place(path)
    attrs, labels = groups_of(path)
    if group is not None:
        if group not in labels:
            raise KeyError(f"{path}: no structure group {group!r}; its groups: {', '.join(labels)}")
        return open_store(path / group, verify)
    children = {}
    for label in labels:
        if not is_store(path / label):
            warnings.warn(f"{path}: structure group {label} is missing; 'mechsweep sweep "
                          f"SWEEP.yaml --out {path} --resume' recomputes it", stacklevel=3)
            continue
        children[label] = open_store(path / label, verify)
    import xarray as xr

    return xr.DataTree.from_dict({"/": xr.Dataset(attrs=attrs), **children})


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    parts, start = [], None
    for k, i in enumerate(indices):
        if start is None:
            start = i
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            parts.append(str(start) if start == i else f"{start}-{i}")
            start = None
    return ", ".join(parts)
