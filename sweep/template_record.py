"""The template record of a sweep store: checksums of everything written once.

A store's batches are covered by their commit records (:mod:`sweep.store`).
What the template writes once and nothing rewrites afterwards is covered by
one more record, the *template record*, written when the template is made:
the coordinates' chunks (the swept parameters on ``point``, ``time``, the
component dimensions) and the metadata of the root and of every array
(``zarr.json``). It is JSON text in the scalar array ``template_commit`` (read with ``json.loads``, never executed)::

    {"format": 1, "files": {"zarr.json": "<sha256 hex>", "L2/c/0": "<sha256 hex>",
                            "L2/zarr.json": "<sha256 hex>", ...}}

A file the template did not write (Zarr skips chunks equal to the fill
value) is recorded as ``null``. The files checked are listed from the
store's own metadata, never from the record, so a record cannot make a check
read a file outside the store; a record that names other files is damage.

A damaged coordinate is derived data: a resume writes it again from the
sweep file (:func:`repair_coordinates`). Damaged metadata cannot be repaired
that way; the message says to recompute the store with ``--overwrite``.
Stores written before template records existed have no ``template_commit``
and are not checked this way.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Mapping

import numpy as np
import zarr

from sweep.location import StoreLocation

__all__ = ["TEMPLATE_ARRAY", "template_files", "write_template_record", "check_template",
           "repair_coordinates", "TemplateDamage"]

#: The array whose one chunk holds the record.
TEMPLATE_ARRAY = "template_commit"

#: Arrays whose chunks change after the template (per batch, or shared by batches).
_REWRITTEN = ("status", "steps", "failure_time", "failure_reason", "batch_message", "batch_seconds",
              "batch_commit", TEMPLATE_ARRAY)


def _rewritten(group: zarr.Group) -> set[str]:
    # The outputs, status, steps and the failure variables are sweep.store.schema.batch_arrays
    # (not imported: no cycle).
    return set(_REWRITTEN) | set(group.attrs.get("sweep_outputs") or [])


def template_files(group: zarr.Group) -> list[str]:
    """Paths (relative to the group's folder) of the files the template record covers, sorted.

    Args:
        group: an open sweep store (or a structure group of one).

    Returns:
        ``zarr.json`` of the group and of every array, and every chunk of
        the arrays that are written once (coordinates).
    """
    rewritten = _rewritten(group)
    keys = ["zarr.json"]
    for name, array in group.arrays():
        keys.append(f"{name}/zarr.json")
        if name in rewritten:
            continue
        for coords in itertools.product(*(range(n) for n in array.cdata_shape)):
            keys.append(f"{name}/{array.metadata.encode_chunk_key(coords)}")
    return sorted(keys)


def _digests(root: StoreLocation, keys: list[str]) -> dict[str, str | None]:
    """SHA-256 of each file (None when it is missing), read together."""
    return {key: None if got is None else hashlib.sha256(got[0]).hexdigest()
            for key, got in root.read_many(keys).items()}


def write_template_record(path) -> None:
    """Checksum the template's files and write the record (right after the template is made).

    Args:
        path: the store (or structure group) folder, its template written.
    """
    group = zarr.open_group(str(path), mode="r+")
    root = StoreLocation.of_group(group)
    files = _digests(root, template_files(group))
    group[TEMPLATE_ARRAY][()] = json.dumps({"format": 1, "files": files}, sort_keys=True)


class TemplateDamage(list):
    """Damage found by :func:`check_template`: ``(file, what)`` pairs.

    Attributes:
        coordinates: the arrays written once whose chunks are damaged.
        metadata: whether a ``zarr.json`` (or the record itself) is damaged.
    """

    @staticmethod
    def _is_metadata(key: str) -> bool:
        return key.endswith("zarr.json") or "/" not in key or key.split("/")[0] == TEMPLATE_ARRAY

    @property
    def coordinates(self) -> list[str]:
        return sorted({key.split("/")[0] for key, _ in self if not self._is_metadata(key)})

    @property
    def metadata(self) -> bool:
        return any(self._is_metadata(key) for key, _ in self)

    def lines(self, resume_hint: str = "") -> list[str]:
        """Readable lines, with what to do."""
        out = []
        for key, what in self:
            out.append(f"{key}: {what}")
        if self.metadata:
            out.append("the store's metadata is damaged and cannot be rebuilt: recompute the store "
                       "with --overwrite, or into another --out path")
        elif self.coordinates:
            out.append(f"coordinates {', '.join(self.coordinates)} are derived from the sweep file: "
                       f"a resume writes them again" + (f" ({resume_hint})" if resume_hint else ""))
        return out


def check_template(group: zarr.Group) -> TemplateDamage:
    """Compare the files written once with the store's template record.

    Args:
        group: an open sweep store (or structure group).

    Returns:
        The damage (empty when all is as recorded, or the store has no
        template record).
    """
    damage = TemplateDamage()
    if TEMPLATE_ARRAY not in group:
        return damage
    try:
        record = json.loads(str(group[TEMPLATE_ARRAY][()]))
        files = record["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not a mapping")
    except Exception as exc:  # noqa: BLE001 - a damaged record is damage, whatever the parser says
        damage.append((f"{TEMPLATE_ARRAY}/c", f"the template record is unreadable ({type(exc).__name__})"))
        return damage
    root = StoreLocation.of_group(group)
    keys = template_files(group)
    if set(files) != set(keys):
        damage.append((f"{TEMPLATE_ARRAY}/c", "the template record names other files than the store's "
                                                "metadata lists"))
        return damage
    found = _digests(root, keys)
    for key in keys:
        got, want = found[key], files[key]
        if got == want:
            continue
        if got is None:
            damage.append((key, "missing"))
        elif want is None:
            damage.append((key, "present, but the template wrote no such file"))
        else:
            damage.append((key, "changed since the template was written (checksum differs)"))
    return damage


def repair_coordinates(path, damage: TemplateDamage, values: Mapping[str, np.ndarray]) -> list[str]:
    """Write damaged coordinates again from their values, and the record after them.

    Args:
        path: the store (or structure group) folder.
        damage: what :func:`check_template` found (no metadata damage).
        values: coordinate name -> its values (the sweep's points, ``time``,
            the component labels).

    Returns:
        The coordinates written.

    Raises:
        KeyError: a damaged coordinate has no values given.
        ValueError: the damage includes metadata.
    """
    if damage.metadata:
        raise ValueError("metadata damage cannot be repaired from the sweep file")
    group = zarr.open_group(str(path), mode="r+")
    names = damage.coordinates
    for name in names:
        array = group[name]
        data = np.asarray(values[name])
        if array.dtype.kind in "OTU" or data.dtype.kind in "OU":
            data = np.asarray(data, dtype=object)
        array[...] = data.reshape(array.shape)
    write_template_record(path)
    return names
