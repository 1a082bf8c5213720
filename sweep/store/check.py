"""Checking a store's batches against their commit records: done, pending or damaged.

Checks (:func:`check_store`), per batch, at three levels:

- ``quick`` (``mechsweep status``): the commit record is present and well
  formed and names exactly the batch's chunks; every chunk file exists with
  its committed size; a chunk whose modification time differs from the record
  is read and its checksum compared. One ``stat`` per chunk otherwise.
- ``checksum`` (every ``mechsweep sweep`` on an existing store: resume and
  retry-failed): additionally reads every committed chunk and compares its
  checksum. This reads the stored (compressed) bytes once and decodes
  nothing, which is small next to computing the sweep.
- ``decode`` (``mechsweep status --verify``): additionally decodes every
  chunk of every array, so undecodable chunks and damaged coordinates are
  reported too.

The files the template writes once, the coordinates' chunks and every
``zarr.json``, are covered by the *template record*
(:mod:`sweep.template_record`), checked at every level: a damaged coordinate
is a store problem that a resume repairs from the sweep file (it is derived
data), damaged metadata one it refuses, naming ``--overwrite``.

A batch with no commit record is *pending*: not run, or written by its worker
and not yet committed by the driver (the run stopped in between, or is still
running); a batch whose commit record does not match its chunks (missing,
resized, changed, undecodable) is *damaged*. Neither counts as done: a resume
runs both again, and ``mechsweep status`` counts their points as pending or
damaged, never by the status codes they may still hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import zarr

from solver import status as st
from solver.errors import InputError
from sweep.location import StoreLocation
from sweep.store.commit import parse_record
from sweep.store.schema import (STORE_FORMAT, batch_arrays, batch_chunks, batch_slices, chunk_layout, digest,
                                is_store, legacy_message, place, store_attrs, store_root)
from sweep.template_record import check_template

__all__ = [
    "CHECK_LEVELS", "StoreCheck", "check_store", "read_status", "pending_batches", "failed_batches",
    "failed_points",
]


#: How thoroughly :func:`check_store` looks (see the module docstring).
CHECK_LEVELS = ("quick", "checksum", "decode")


@dataclass
class StoreCheck:
    """What :func:`check_store` found.

    Attributes:
        path: the store.
        level: one of :data:`CHECK_LEVELS`.
        n_points, batch: size of the sweep and points per batch.
        slices: the point range of each batch.
        legacy: the store has no commit records (format 1): ``done`` and
            ``pending`` then come from ``status`` alone and nothing is verified.
        done: batches committed whose chunks match their commit records.
        pending: batches without a commit record (never run, or written
            and not committed).
        damaged: batch -> what is wrong: a chunk missing, resized, changed or
            undecodable, or a malformed commit record.
        store_problems: damage outside the batches: the files written once
            (coordinates, metadata: their template record, at every level)
            and, at level ``decode``, undecodable shared arrays.
        template_damage: the template record's findings
            (:class:`sweep.template_record.TemplateDamage`); a resume
            writes damaged coordinates again from the sweep file.
        repaired: coordinates a resume wrote again (see :func:`sweep.store.template.plan_store`).
        codes: ``status(point)`` as stored, with the points of batches that
            are not done set to pending.
    """

    path: str
    level: str
    n_points: int
    batch: int
    slices: list[slice]
    legacy: bool = False
    done: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    damaged: dict[int, list[str]] = field(default_factory=dict)
    store_problems: list[str] = field(default_factory=list)
    template_damage: list = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    codes: np.ndarray | None = None

    @property
    def todo(self) -> list[int]:
        """Batches a resume runs: pending and damaged ones, ascending."""
        return sorted([*self.pending, *self.damaged])

    @property
    def ok(self) -> bool:
        """No damage found (pending batches are not damage)."""
        return not self.damaged and not self.store_problems


def check_store(path, level: str = "quick") -> StoreCheck:
    """Check every batch of a sweep store against its commit record.

    Args:
        path: the store.
        level: ``quick`` (commit records, chunk files present with their
            committed sizes, checksums of chunks modified since their commit),
            ``checksum`` (checksums of every committed chunk) or ``decode``
            (also decode every chunk of every array); see the module docstring.

    Returns:
        A :class:`StoreCheck`. For a format-1 store (no commit records) a
        ``quick`` check is marked ``legacy`` and built from ``status`` alone.

    Raises:
        InputError: no sweep store at ``path``, one of a newer format, or a
            format-1 store at level ``checksum`` or ``decode`` (it cannot be
            verified).
        ValueError: unknown level.
    """
    if level not in CHECK_LEVELS:
        raise ValueError(f"unknown check level {level!r}; valid: {', '.join(CHECK_LEVELS)}")
    path = place(path)
    group = _open_sweep_group(path)
    batch = int(group.attrs["sweep_batch"])
    n = int(group.attrs["sweep_n_points"])
    slices = batch_slices(n, batch)
    codes, bad_status = _read_codes(group, slices)
    check = StoreCheck(str(path), level, n, batch, slices, legacy="batch_commit" not in group)
    if check.legacy:
        return _legacy_check(check, codes)
    root = store_root(group)
    records = _read_records(group, len(slices))
    layout = chunk_layout(group)
    found = [_committed_chunks(group, i, records[i], layout) for i in range(len(slices))]
    committed = [entry for entry in found if isinstance(entry, tuple)]
    stats = root.stats([key for _, keys in committed for key in keys])
    # Every chunk to read, of all batches together: on an object store the requests of many
    # batches overlap instead of one batch's waiting for the last (see _digests).
    digests = _digests(root, [key for entry in committed for key in _chunks_to_read(*entry, level, stats)])
    arrays: dict = {}
    for i, sl in enumerate(slices):
        problems = _check_batch(group, i, sl, found[i], codes, level, stats, digests, arrays)
        if problems is None:
            check.pending.append(i)
        elif problems:
            check.damaged[i] = problems
        elif i in bad_status:     # only reached if the chunk changed under a matching checksum
            check.damaged[i] = ["status chunk undecodable"]
        else:
            check.done.append(i)
    check.template_damage = check_template(group)
    check.store_problems = check.template_damage.lines()
    if level == "decode":
        check.store_problems += _check_other_arrays(group, check.template_damage.coordinates)
    check.codes = codes.copy()
    for i in check.todo:
        check.codes[slices[i]] = st.PENDING
    return check


def _open_sweep_group(path: Path) -> zarr.Group:
    if not is_store(path):
        raise InputError("no Zarr store there", file=str(path))
    try:
        group = zarr.open_group(str(path), mode="r")
    except Exception as exc:  # noqa: BLE001 - zarr raises many types for bad metadata
        raise InputError(f"cannot open the store: its metadata (zarr.json) is unreadable "
                         f"({type(exc).__name__}: {exc}). Recompute it with --overwrite or into "
                         f"a new --out path", file=str(path)) from None
    attrs = group.attrs
    if "mechsweep_structural_sweep" in attrs:
        groups = [str(g) for g in attrs.get("sweep_groups") or []]
        raise InputError(f"a sweep store over structural parameters: one store per structure "
                         f"group ({', '.join(groups)}); give a group's path, e.g. "
                         f"{path / (groups[0] if groups else 'N=1')}, or use "
                         f"'mechsweep status {path}' and sweep.store.open_store", file=str(path))
    if "sweep_hash" not in attrs:
        raise InputError("a Zarr store, but not a mechsweep sweep store (no sweep_hash attribute)",
                         file=str(path))
    fmt = attrs.get("mechsweep_store_format", 1)
    if not isinstance(fmt, int) or fmt > STORE_FORMAT:
        raise InputError(f"written by a newer mechsweep (store format {fmt!r}); this version "
                         f"reads formats up to {STORE_FORMAT}. Use a newer mechsweep",
                         file=str(path))
    return group


def _read_codes(group: zarr.Group, slices: list[slice]) -> tuple[np.ndarray, set[int]]:
    """``status`` as stored; batches whose status chunk cannot be decoded read as pending."""
    array = group["status"]
    try:
        return array[:], set()
    except Exception:  # noqa: BLE001 - one bad chunk: read batch by batch to find it
        codes = np.full(array.shape, st.PENDING, np.int8)
        bad = set()
        for i, sl in enumerate(slices):
            try:
                codes[sl] = array[sl]
            except Exception:  # noqa: BLE001 - codecs raise many types for bad bytes
                bad.add(i)
        return codes, bad


def _read_records(group: zarr.Group, n_batches: int) -> list[str | Exception]:
    """The commit record texts ("" = none); an undecodable one as its exception."""
    array = group["batch_commit"]
    try:
        return [str(t) for t in array[:]]
    except Exception:  # noqa: BLE001 - one bad chunk: read record by record
        out = []
        for i in range(n_batches):
            try:
                out.append(str(array[i]))
            except Exception as exc:  # noqa: BLE001 - codecs raise many types for bad bytes
                out.append(exc)
        return out


def _committed_chunks(group: zarr.Group, index: int, record, layout) -> tuple | list[str] | None:
    """``(chunks, keys)`` of a committed batch: its record's chunk table and the chunk paths it must have.

    ``None`` when the batch is pending (no record); a list of problems when
    its record is unusable.
    """
    if isinstance(record, Exception):
        return [f"commit record undecodable ({type(record).__name__}: {record})"]
    if not record:
        # Chunks without a commit record are a batch its worker wrote and the driver never
        # committed (the run stopped in between): not done, run again, but not damage.
        return None
    keys = batch_chunks(group, index, layout)
    chunks, why = parse_record(record, keys)
    return [why] if chunks is None else (chunks, keys)


def _check_batch(group: zarr.Group, index: int, sl: slice, found, codes: np.ndarray, level: str,
                 stats: Mapping, digests: Mapping, arrays: dict) -> list[str] | None:
    """Problems of one batch (``found``: :func:`_committed_chunks`); ``None`` when it is pending.

    ``arrays``: as for :func:`_decode_batch`.
    """
    if not isinstance(found, tuple):
        return found
    chunks, keys = found
    problems = _check_chunks(chunks, keys, stats, digests)
    if not problems and level == "decode":
        problems = _decode_batch(group, sl, arrays)
    if not problems and (codes[sl] == st.PENDING).any():
        problems = ["status holds pending points although the batch is committed"]
    return problems


def _chunks_to_read(chunks: Mapping[str, list], keys: list[str], level: str, stats: Mapping) -> list[str]:
    """The chunks of a committed batch whose checksum must be read: those present with their committed
    size; at the quick level only those of them whose stamp changed (an untouched chunk needs no reading).

    ``stats``: key -> (size, stamp) or None, as :meth:`StoreLocation.stats` gives.
    """
    out = []
    for key in keys:
        found = stats.get(key)
        if found is not None and found[0] == chunks[key][0] and (level != "quick" or found[1] != chunks[key][1]):
            out.append(key)
    return out


# Chunks read at once by _digests: the requests of an object store overlap, up to
# StoreLocation.read_many's own limit, and no more than this many chunks are held in memory.
_READ_WINDOW = 256


def _digests(root: StoreLocation, keys: list[str]) -> dict[str, str | None]:
    """The SHA-256 of each chunk file ``keys`` as stored now (None for a missing one)."""
    out = {}
    for start in range(0, len(keys), _READ_WINDOW):
        for key, data in root.read_bytes_many(keys[start:start + _READ_WINDOW]).items():
            out[key] = None if data is None else digest(data)
    return out


def _check_chunks(chunks: Mapping[str, list], keys: list[str], stats: Mapping, digests: Mapping) -> list[str]:
    """Why the committed chunk files ``keys`` are not as committed; empty when they are.

    ``stats``: key -> (size, stamp) or None, as :meth:`StoreLocation.stats` gives;
    ``digests``: key -> the SHA-256 of the chunks read (:func:`_chunks_to_read`), None if
    missing by the time they were read.
    """
    problems = []
    for key in keys:
        size, _, committed = chunks[key]
        found = stats.get(key)
        if found is None:
            problems.append(f"chunk {key} missing")
        elif found[0] != size:
            problems.append(f"chunk {key} corrupt: {found[0]} bytes, committed {size}")
        elif key in digests:
            if digests[key] is None:
                problems.append(f"chunk {key} missing")
            elif digests[key] != committed:
                problems.append(f"chunk {key} corrupt: checksum differs from the commit record")
    return problems


def _decode_batch(group: zarr.Group, sl: slice, arrays: dict) -> list[str]:
    """Decode every chunk of a batch; why each undecodable one fails.

    ``arrays``: the batch arrays looked up so far, by name (filled here): each
    lookup reads the array's metadata, a request on an object store.
    """
    problems = []
    for name in batch_arrays(group):
        try:
            if name not in arrays:
                arrays[name] = group[name]
            arrays[name][sl]
        except Exception as exc:  # noqa: BLE001 - codecs raise many types for bad bytes
            problems.append(f"array {name}: a chunk of the batch is undecodable "
                            f"({type(exc).__name__}: {exc})")
    return problems


def _check_other_arrays(group: zarr.Group, reported=()) -> list[str]:
    """Decode every array that is not per batch (coordinates, shared batch arrays).

    ``reported``: arrays whose damage the template record already reported.
    """
    problems = []
    skip = set(batch_arrays(group)) | set(reported)
    for name, array in group.arrays():
        if name in skip:
            continue
        try:
            array[...]
        except Exception as exc:  # noqa: BLE001 - codecs raise many types for bad bytes
            problems.append(f"array {name} undecodable ({type(exc).__name__}: {exc}); "
                            f"a resume cannot repair it: pass --overwrite to recompute the store")
    return problems


def _legacy_check(check: StoreCheck, codes: np.ndarray) -> StoreCheck:
    """A format-1 store: batches done by status alone, as that format had it."""
    if check.level != "quick":
        raise InputError(legacy_message(), file=check.path)
    for i, sl in enumerate(check.slices):
        (check.pending if (codes[sl] == st.PENDING).any() else check.done).append(i)
    check.codes = codes
    return check


def read_status(path) -> np.ndarray:
    """The ``status(point)`` codes of a store, as stored (no check).

    Args:
        path: the store.

    Returns:
        ``(n_points,)`` int8 array.
    """
    return zarr.open_group(str(path), mode="r")["status"][:]


def pending_batches(path, batch: int | None = None) -> list[int]:
    """Batches that are not done: pending ones and damaged ones (a ``quick`` check).

    Args:
        path: the store.
        batch: points per batch; must be the store's own (kept for callers
            that pass it).

    Returns:
        Batch indices, ascending.

    Raises:
        ValueError: ``batch`` differs from the store's.
    """
    check = check_store(path, "quick")
    if batch is not None and batch != check.batch:
        raise ValueError(f"{path}: the store has {check.batch} points per batch, not {batch}")
    return check.todo


def failed_batches(path, batch: int | None = None) -> list[int]:
    """Batches that contain failed points (status above success).

    Args:
        path: the store.
        batch: points per batch; default the store's own.

    Returns:
        Batch indices, ascending.
    """
    codes = read_status(path)
    if batch is None:
        batch = int(store_attrs(path)["sweep_batch"])
    return [i for i, sl in enumerate(batch_slices(len(codes), batch))
            if st.is_failure(codes[sl]).any()]


def failed_points(path) -> np.ndarray:
    """Indices of the points that failed (status above success).

    Args:
        path: the store.

    Returns:
        Point indices, ascending (int64 array).
    """
    return np.flatnonzero(st.is_failure(read_status(path)))
