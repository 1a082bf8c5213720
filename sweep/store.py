"""Zarr store of a sweep: template, per-batch region writes, commit records, checks.

Layout (one Zarr v3 group, written through xarray, chunked along ``point`` by
the sweep's batch size so that one batch is one chunk of every per-point
variable):

- coordinates: one per swept parameter on ``point``; ``time``; one per
  component dimension of the outputs (e.g. ``axis``);
- data variables from the :class:`Schema`, ``(point, *dims)`` float64, NaN
  until written (the template never writes their chunks, and NaN is the Zarr
  fill value);
- ``status(point)`` int8, codes in :mod:`solver.status`, whose Zarr fill value
  is ``pending`` (-1): a status chunk that is missing reads as *not run*, never
  as success; ``steps(point)`` int64 (fill value -1: not run);
- ``failure_time(point)`` float64 (the model's time unit; NaN where the point
  did not fail, or failed with its whole batch) and ``failure_reason(point)``
  text (empty where the point did not fail): when and why a failed point
  stopped, naming the model's parts (:mod:`solver.analysis.failures`), e.g.
  ``kinematic singularity (locking or change point): the constraints of rod AB
  and rod QB are dependent``. A failed point's series keep their samples up
  to ``failure_time`` and are NaN after it; its metrics are NaN (store
  format 3; stores of format 2 have neither variable and stay readable and
  resumable);
- ``batch_message(batch)`` text (why a batch failed, empty otherwise) and
  ``batch_seconds(batch)`` (compute time of the batch on its worker), one chunk
  per batch from format 3 on (format 2 shared a chunk among 1,024 batches);
- ``batch_commit(batch)`` text, one chunk per batch: the batch's *commit
  record*, empty until the batch is complete (store format 2).

Writing a batch happens in two places. The worker that computed it writes its
chunks (:func:`write_batch_data`): data (the outputs, ``failure_time``,
``failure_reason``), ``steps``, ``batch_message`` and ``batch_seconds``, then
``status``; it reads each chunk file back for its size, modification time and
SHA-256, and sends only that table (and the status codes) to the driver. The
driver alone writes the batch's commit record (:func:`commit_batch`). Every
chunk of a batch is written, even an all-NaN one
(Zarr would otherwise skip chunks equal to the fill value), and a local Zarr
store writes each chunk atomically (temporary file + rename). So a driver or
worker killed at any moment leaves a store in which every batch is either
committed with all its chunks, or not committed and run again by a resume.
Batches are chunk-aligned, so workers never write the same file.

Every chunk of a format-3 store also carries a CRC32C checksum (Zarr's
``crc32c`` codec) that any Zarr reader checks when it decodes the chunk.

A commit record is JSON text (read with ``json.loads``, never executed)::

    {"format": 1, "time": "2026-05-01T12:00:00.123456+00:00",
     "checksum": "sha256:<hex>",
     "chunks": {"x/c/3/0": [size, mtime_ns, "<sha256 hex>"], "status/c/3": [...], ...}}

``chunks`` lists every chunk of the batch (each output, ``steps``,
``failure_time``, ``failure_reason``, ``batch_message``, ``batch_seconds``,
``status``: paths relative to the store) with its size in bytes, its stamp
(modification time in ns; on an object store the ETag, a string) and the
SHA-256 of its stored (encoded) bytes;
``checksum`` is the SHA-256 of the lines ``"<path> <sha256>\n"`` in path
order, the batch's content checksum. ``time`` is when the batch completed.

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

Stores of format 1 (written before commit records existed) can still be read
and reported, but neither verified nor resumed (a clear error says so).
Stores of format 2 (before ``failure_time`` and ``failure_reason``; message
and time in chunks shared by 1,024 batches, written by the driver; no CRC32C)
are read, verified and resumed as they are.

A sweep over structural parameters writes one such store per structure
group, as child groups (``STORE.zarr/N=3``) of one Zarr root
(:mod:`sweep.structural`); :func:`open_store` opens that root as an
``xarray.DataTree``.

A store is a local folder or an object-store URL (``s3://bucket/sweep.zarr``;
:mod:`sweep.location`). A local template is built in a temporary folder and
renamed into place; on an object store, where there is no rename, it is built
in a local temporary folder and uploaded, its template record last (a store
without one is made again by the next run). Commit records stamp chunks with
their modification time locally, with their ETag on an object store.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import itertools
import json
import math
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import dask.array as da
import numpy as np
import xarray as xr
import zarr

from solver import status as st
from solver.errors import InputError
from sweep.folders import publish, temporary_sibling
from sweep.location import StoreLocation, is_url
from sweep.template_record import TEMPLATE_ARRAY, check_template, repair_coordinates, write_template_record
from solver.results.solution import package_versions

__all__ = [
    "BatchResult", "Schema", "MODES", "create_template", "prepare_store", "plan_store",
    "write_batch", "write_batch_data", "commit_batch", "BatchCommitter", "WrittenBatch",
    "read_status", "pending_batches", "failed_points", "failed_batches", "open_store",
    "store_attrs", "batch_slices", "effective_batch", "status_report", "check_store", "StoreCheck",
    "CHECK_LEVELS", "FAILURE_ARRAYS", "failure_columns", "failure_groups",
]

#: How an existing store is treated (see :func:`prepare_store`).
MODES = ("resume", "overwrite", "retry-failed")

#: Variables every sweep store has besides the schema's; schema names must differ.
RESERVED = ("status", "steps", "batch_message", "batch_seconds", "batch_commit", "template_commit",
            "failure_time", "failure_reason",
            "point", "batch",
            "time")

#: 1: no commit records (status fill value 0); 2: commit records, status fill value pending;
#: 3: ``failure_time`` and ``failure_reason`` per point, ``batch_message`` and ``batch_seconds``
#: one chunk per batch, all under the commit records; every chunk carries a CRC32C checksum
#: (Zarr's ``crc32c`` codec).
STORE_FORMAT = 3

#: The per-point failure variables (store format 3 on), in the order a batch writes them.
FAILURE_ARRAYS = ("failure_time", "failure_reason")

#: How thoroughly :func:`check_store` looks (see the module docstring).
CHECK_LEVELS = ("quick", "checksum", "decode")

#: Version of the commit record's JSON layout.
COMMIT_FORMAT = 1

#: Every chunk of a format-3 store: Zstandard, then a CRC32C of the compressed bytes, so that a
#: damaged chunk fails to decode with a checksum error wherever it is read, by any Zarr reader.
_COMPRESSORS = (zarr.codecs.ZstdCodec(level=0), zarr.codecs.Crc32cCodec())

#: The float outputs (the bulk of a store): a CRC32C only. Trajectories in float64 compress
#: by a few per cent, and compressing them was most of what a worker's write of a batch cost.
_CHECKSUM_ONLY = (zarr.codecs.Crc32cCodec(),)


@dataclass
class BatchResult:
    """What a batch function returns for ``B`` points.

    Attributes:
        status: ``(B,)`` int8 status codes (:mod:`solver.status`), none pending.
        steps: ``(B,)`` integer step counts.
        data: output name -> array with leading dimension ``B`` and the rest as
            in the :class:`Schema` (e.g. ``(B, T)`` or ``(B, T, 3)``).
        message: why the batch (or some of its points) failed; empty when fine.
        seconds: compute time of the batch, filled in by the runtime.
        failure_time: ``(B,)`` when each failed point stopped (NaN for the
            others), or None: unknown (a batch that failed as a whole).
        failure_reason: ``B`` texts, why each failed point stopped (empty
            for the others), or None: the first line of ``message`` (or
            the status's description) for every failed point.
    """

    status: np.ndarray
    steps: np.ndarray
    data: dict[str, np.ndarray]
    message: str = ""
    seconds: float = math.nan
    failure_time: np.ndarray | None = None
    failure_reason: list[str] | None = None

    @classmethod
    def failed(cls, n: int, code: int, message: str) -> "BatchResult":
        """A result in which all ``n`` points failed with ``code`` and carry no data.

        Args:
            n: number of points in the batch.
            code: the status code for all of them.
            message: why.

        Returns:
            The result; missing data are written as NaN by :func:`write_batch`.
        """
        return cls(np.full(n, code, np.int8), np.zeros(n, np.int64), {}, message)


@dataclass(frozen=True)
class Schema:
    """Shapes of the per-point outputs, without the ``point`` dimension.

    Attributes:
        time: the output times ``(T,)``.
        variables: output name -> its dimensions after ``point``, each either
            ``"time"`` or a key of ``coords``; ``()`` for a scalar per point
            (a metric).
        coords: component dimension -> its coordinate values, e.g.
            ``{"axis": ["x", "y", "z"]}``.
        attrs: variable or coordinate name -> attributes (e.g. ``units``).
    """

    time: np.ndarray
    variables: Mapping[str, tuple[str, ...]]
    coords: Mapping[str, np.ndarray] = field(default_factory=dict)
    attrs: Mapping[str, Mapping] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        """Length of every dimension other than ``point``."""
        out = {"time": len(self.time)}
        out.update({name: len(values) for name, values in self.coords.items()})
        return out

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of one point's value of output ``name`` (without ``point``)."""
        sizes = self.sizes()
        return tuple(sizes[d] for d in self.variables[name])

    def validate(self, parameters=()) -> None:
        """Check names and dimensions.

        Args:
            parameters: the swept parameter names (they become coordinates, so
                outputs must not reuse them).

        Raises:
            ValueError: an unknown dimension or a clashing name.
        """
        sizes = self.sizes()
        for name, dims in self.variables.items():
            if name in RESERVED or name in parameters or name in self.coords:
                raise ValueError(f"output name {name!r} clashes with a coordinate or a "
                                 f"reserved variable ({', '.join(RESERVED)})")
            for d in dims:
                if d not in sizes:
                    raise ValueError(f"output {name!r} has dimension {d!r}, which is neither "
                                     f"'time' nor one of the schema coords {sorted(self.coords)}")


def effective_batch(batch: int, n_points: int) -> int:
    """Points per task and per chunk: ``batch``, or ``n_points`` where that is fewer (at least 1).

    A batch is padded to this size (so that a worker compiles once), so a
    sweep of 4 points with ``Batch: 5000`` runs 4 points, not 5000.
    """
    return max(1, min(int(batch), int(n_points)))


def batch_slices(n_points: int, batch: int) -> list[slice]:
    """The point ranges of the batches: ``batch`` points each, the last one shorter.

    Args:
        n_points: number of points of the sweep.
        batch: points per batch (positive).

    Returns:
        One slice per batch, in order.
    """
    return [slice(start, min(start + batch, n_points)) for start in range(0, n_points, batch)]


def _attr_value(value):
    """A JSON-safe attribute value: scalars and flat lists kept, the rest as JSON text."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, bool, int, float)) for v in value):
        return list(value)
    return json.dumps(value, default=str, sort_keys=True)


def _place(path):
    """A local path as a ``Path``, an object-store URL as a :class:`StoreLocation` (both join with ``/``)."""
    return StoreLocation(path) if is_url(path) else Path(path)


def _is_store(path) -> bool:
    return StoreLocation(path).is_store()


def variable_length_text(values: np.ndarray) -> np.ndarray:
    """Fixed-width numpy text (``<U``) as variable-length strings; other arrays unchanged.

    The fixed-width form has no Zarr v3 specification yet: zarr warns that
    such arrays may become unreadable, by other libraries or its own later
    versions.  Variable-length strings have one.
    """
    return values.astype(object) if values.dtype.kind == "U" else values


def zarr_ready(ds):
    """``ds`` (an xarray Dataset) with every text coordinate and variable as :func:`variable_length_text`.

    Args:
        ds: the Dataset to be written to Zarr.

    Returns:
        A shallow copy; numeric arrays are shared, not copied.
    """
    text = {name: v.copy(data=variable_length_text(v.values)) for name, v in ds.variables.items()
            if v.dtype.kind == "U"}
    if not text:
        return ds
    return (ds.assign_coords({n: v for n, v in text.items() if n in ds.coords})
            .assign({n: v for n, v in text.items() if n not in ds.coords}))


def write_dataset(ds, path) -> None:
    """Write a whole Dataset as a new Zarr store (``simulate --out``, design histories).

    Text goes in as :func:`variable_length_text` and the metadata is
    consolidated, as the sweep stores have it, so that a plain
    ``xarray.open_zarr`` reads it without a warning; zarr's warning that
    consolidated metadata is an extension of format 3 concerns the writer
    only and is silenced.

    Args:
        ds: the Dataset.
        path: the store's path (replaced if it exists).

    Raises:
        OSError: the path cannot be written.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        zarr_ready(ds).to_zarr(path, mode="w", consolidated=True)


def _template(spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
              attrs: Mapping, batch: int) -> tuple[xr.Dataset, dict]:
    """The template dataset and its encoding (chunking: one batch per chunk)."""
    names = list(points)
    n = len(next(iter(points.values()))) if points else 0
    if n == 0:
        raise ValueError("a sweep needs at least one point")
    for name, values in points.items():
        if np.shape(values) != (n,):
            raise ValueError(f"swept parameter {name!r} has shape {np.shape(values)}, "
                             f"expected ({n},) like the others")
    schema.validate(names)
    sizes = schema.sizes()
    n_batches = -(-n // batch)

    coords = {name: ("point", np.asarray(values)) for name, values in points.items()}
    coords["time"] = ("time", np.asarray(schema.time, dtype=np.float64))
    for dim, values in schema.coords.items():
        values = np.asarray(values)
        coords[dim] = (dim, variable_length_text(values))

    data_vars, encoding = {}, {}
    for name, dims in schema.variables.items():
        shape = (n,) + tuple(sizes[d] for d in dims)
        chunks = (batch,) + shape[1:]
        data_vars[name] = (("point",) + tuple(dims),
                           da.full(shape, np.nan, dtype=np.float64, chunks=chunks),
                           dict(schema.attrs.get(name, {})))
        encoding[name] = {"chunks": chunks, "fill_value": np.nan}
    data_vars["status"] = ("point", np.full(n, st.PENDING, np.int8), st.cf_attrs())
    data_vars["steps"] = ("point", np.full(n, -1, np.int64),
                          {"long_name": "accepted integration steps (-1: not run)"})
    # Filled with their fill values, so the template writes no chunk of theirs:
    # each batch writes its own (text is numpy: dask would load it to find its type).
    data_vars["failure_time"] = ("point", np.full(n, np.nan),
                                 {"long_name": "time at which the point failed (NaN: it did not fail, "
                                               "or failed with its whole batch)",
                                  "units": str(schema.attrs.get("time", {}).get("units", "s"))})
    data_vars["failure_reason"] = ("point", np.full(n, "", dtype=object),
                                   {"long_name": "why the point failed, naming the model's parts "
                                                 "(empty: it did not fail)"})
    data_vars["batch_message"] = ("batch", np.full(n_batches, "", dtype=object),
                                  {"long_name": "why the batch failed (empty: no message)"})
    data_vars["batch_seconds"] = ("batch", np.full(n_batches, np.nan),
                                  {"long_name": "compute time of the batch on its worker",
                                   "units": "s"})
    data_vars["batch_commit"] = ("batch", np.full(n_batches, "", dtype=object),
                                 {"long_name": "commit record of the batch: JSON with the "
                                               "checksums of its chunks and its completion time "
                                               "(empty: not committed)"})
    # Fill value = pending / not run: a status or steps chunk that is missing
    # must never read as a finished point (format 1 filled status with 0 = success).
    encoding["status"] = {"chunks": (batch,), "fill_value": st.PENDING}
    encoding["steps"] = {"chunks": (batch,), "fill_value": -1}
    encoding["failure_time"] = {"chunks": (batch,), "fill_value": np.nan}
    encoding["failure_reason"] = {"chunks": (batch,)}
    # One chunk (file) per batch, so that a worker writes its batch's message and time
    # without touching another batch's, and committing a batch rewrites no other record.
    for name in ("batch_message", "batch_seconds", "batch_commit"):
        encoding[name] = {"chunks": (1,)}
    for name in [*encoding, *coords]:
        encoding.setdefault(name, {})["compressors"] = (
            _CHECKSUM_ONLY if name in schema.variables else _COMPRESSORS)
    data_vars[TEMPLATE_ARRAY] = ((), np.array("", dtype=object),
                                 {"long_name": "template record: JSON with the checksums of the files "
                                               "written once (coordinates, metadata)"})
    encoding[TEMPLATE_ARRAY] = {"compressors": _COMPRESSORS}

    all_attrs = {str(k): _attr_value(v) for k, v in attrs.items()}
    all_attrs.update({
        "sweep_hash": str(spec_hash),
        "sweep_batch": int(batch),
        "sweep_n_points": int(n),
        "sweep_parameters": names,
        "sweep_outputs": list(schema.variables),
        "package_versions": json.dumps(package_versions(), sort_keys=True),
        "mechsweep_store_format": STORE_FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })
    ds = xr.Dataset(data_vars, coords=coords, attrs=all_attrs)
    for name, a in schema.attrs.items():
        if name in ds.coords:
            ds[name].attrs.update(a)
    return ds, encoding


def create_template(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
                    attrs: Mapping, batch: int) -> None:
    """Write an empty sweep store: coordinates, attributes, pending status.

    The data variables are dask-backed and written with ``compute=False``, so
    only their metadata reach the disk and every chunk reads as NaN until its
    batch is written. The store is built in a temporary sibling directory and
    renamed into place, so a half-written template never exists at ``path``.

    Args:
        path: the store directory (must not exist).
        spec_hash: the sweep's hash, checked on resume.
        points: swept parameter -> values ``(n_points,)``, in point order.
        schema: the outputs per point.
        attrs: dataset attributes (title, model YAML text, solver settings...);
            values that are not JSON scalars or flat lists are stored as JSON text.
        batch: points per batch (= chunk length along ``point``).

    Raises:
        FileExistsError: ``path`` exists.
        ValueError: inconsistent points or schema.
    """
    if StoreLocation(path).exists():
        raise FileExistsError(f"{path} exists; remove it or resume it")
    if batch < 1:
        raise ValueError(f"batch must be a positive number of points, got {batch}")
    ds, encoding = _template(spec_hash, points, schema, attrs, int(batch))
    if is_url(path):
        # No rename on object storage: built in a local folder and uploaded, its template
        # record last, so that a creation cut short leaves a store without one (made again).
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mechsweep-template-") as folder:
            local = Path(folder) / "store.zarr"
            _write_template(ds, encoding, local)
            write_template_record(local)
            StoreLocation(path).upload(local, last=(f"{TEMPLATE_ARRAY}/c",))
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    try:
        _write_template(ds, encoding, tmp)
        write_template_record(tmp)
        publish(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _write_template(ds: xr.Dataset, encoding: dict, where) -> None:
    with warnings.catch_warnings():
        # Consolidated metadata (so that a plain xr.open_zarr is quick and quiet) is
        # a zarr-python extension of format 3; it never changes after the template.
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        ds.to_zarr(str(where), mode="w-", compute=False, encoding=encoding, consolidated=True,
                   zarr_format=3)


def store_attrs(path) -> dict:
    """The attributes of a store's root group (no data read).

    Args:
        path: the store.

    Returns:
        The attributes as a dict.
    """
    return dict(zarr.open_group(str(path), mode="r").attrs)


def _legacy_message(action: str = "") -> str:
    action = action or ("Run its sweep again with --overwrite to recompute it into a verifiable "
                        "store, or into a new --out path; the old store stays readable with "
                        "xarray.open_zarr")
    return (f"was written by an older mechsweep (store format 1) without commit records, so "
            f"which of its batches are complete cannot be verified (in that format a lost status "
            f"chunk reads as success). {action}")


def prepare_store(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
                  attrs: Mapping, batch: int, mode: str = "resume",
                  verify: bool = True) -> list[int]:
    """Make the store ready for a run and say which batches must run.

    The same as :func:`plan_store`, returning only the batches.

    Returns:
        The indices of the batches to run, ascending.
    """
    return plan_store(path, spec_hash, points, schema, attrs, batch, mode, verify)[0]


def plan_store(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
               attrs: Mapping, batch: int, mode: str = "resume",
               verify: bool = True) -> tuple[list[int], "StoreCheck | None"]:
    """Make the store ready for a run; the batches to run and the check behind them.

    - no store at ``path``: write the template; all batches run;
    - ``resume`` (default): the store must come from the same sweep (same
      hash); every batch that is not done runs: pending ones, and damaged ones
      whose commit record does not match their chunks (:func:`check_store`);
    - ``retry-failed``: as resume, plus done batches that contain failed points;
    - ``overwrite``: delete the store and start over.

    Args:
        path: the store directory.
        spec_hash, points, schema, attrs, batch: as for :func:`create_template`.
        mode: one of :data:`MODES`.
        verify: check an existing store at level ``checksum`` (read every
            committed chunk; default) rather than ``quick``.

    Returns:
        ``(batches, check)``: the indices of the batches to run, ascending, and
        the :class:`StoreCheck` of the existing store (None for a new one).

    Raises:
        InputError: unknown mode; the store belongs to another sweep (hash
            mismatch), has another batch size or was written without commit
            records (format 1); ``path`` is something other than a sweep store.
    """
    where = StoreLocation(path)
    path = _place(path)
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    n_batches = len(batch_slices(len(next(iter(points.values()))), batch))
    if where.exists() and mode == "overwrite":
        if not where.is_store() and (where.remote or any(path.iterdir())):
            raise InputError("exists and is not a Zarr store; refusing to delete it even with "
                             "--overwrite. Choose another --out path", file=str(path))
        where.remove()
    if where.remote and where.is_store() and _unfinished_template(path):
        # A run stopped while it wrote the template in place (object stores have no rename):
        # no batch can have been written yet, so it is made again.
        where.remove()
    if not where.exists():
        create_template(path, spec_hash, points, schema, attrs, batch)
        return list(range(n_batches)), None

    if not where.is_store():
        raise InputError("exists and is not a Zarr store. Choose another --out path",
                         file=str(path))
    old = store_attrs(path)
    if "mechsweep_structural_sweep" in old:
        raise InputError(f"holds a sweep over structural parameters (one Zarr group per "
                         f"structure: {', '.join(map(str, old.get('sweep_groups') or []))}), not "
                         f"this sweep. Pass --overwrite to replace it, or choose a new --out path",
                         file=str(path))
    if "sweep_hash" not in old:
        raise InputError("is a Zarr store but not a mechsweep sweep store (no sweep_hash "
                         "attribute). Pass --overwrite to replace it, or choose a new --out path",
                         file=str(path))
    if old["sweep_hash"] != spec_hash:
        raise InputError(f"the store was written by sweep {old['sweep_hash']}, but this sweep "
                         f"has hash {spec_hash} (the sweep file, its model or an override "
                         f"changed). Pass --overwrite to replace the store, or choose a new "
                         f"--out path", file=str(path))
    stored = old.get("sweep_batch")
    n_points = len(next(iter(points.values())))
    # A store of fewer points than its Batch (written before the batch was cut to
    # the points) has one chunk of all its points: the same layout.
    if not isinstance(stored, int) or effective_batch(stored, n_points) != batch:
        raise InputError(f"the store was written with Batch {old.get('sweep_batch')}, but this "
                         f"run uses Batch {batch}. Use the store's batch size, pass --overwrite "
                         f"to replace the store, or choose a new --out path", file=str(path))
    check = check_store(path, "checksum" if verify else "quick")
    if check.legacy:
        raise InputError(_legacy_message(), file=str(path))
    if check.template_damage:
        _repair_template(path, check, points, schema)
    todo = set(check.todo)
    if mode == "retry-failed":
        todo |= {i for i in check.done if st.is_failure(check.codes[check.slices[i]]).any()}
    return sorted(todo), check


def _unfinished_template(path) -> bool:
    """Whether the store's template was never finished: its template record is not written."""
    try:
        group = zarr.open_group(str(path), mode="r")
        return TEMPLATE_ARRAY not in group or not str(group[TEMPLATE_ARRAY][()])
    except Exception:  # noqa: BLE001 - metadata cut short reads as unfinished too
        return True


def _repair_template(path: Path, check: "StoreCheck", points: Mapping[str, np.ndarray], schema: Schema) -> None:
    """Write damaged coordinates again from the sweep (they are derived data); refuse damaged metadata.

    Raises:
        InputError: the store's metadata or its template record is damaged
            (the message lists the files and says to use ``--overwrite``).
    """
    damage = check.template_damage
    if damage.metadata:
        raise InputError("the store's files written once are damaged: " + "; ".join(damage.lines()),
                         file=str(path))
    values = {name: np.asarray(v) for name, v in points.items()}
    values["time"] = np.asarray(schema.time, dtype=np.float64)
    values.update({dim: variable_length_text(np.asarray(v)) for dim, v in schema.coords.items()})
    repair_coordinates(path, damage, values)
    check.repaired = damage.coordinates
    check.template_damage = type(damage)()
    check.store_problems = [p for p in check.store_problems if p not in damage.lines()]


def _batch_index(group: zarr.Group, sl: slice) -> int:
    batch = int(group.attrs["sweep_batch"])
    n = int(group.attrs["sweep_n_points"])
    if sl.start % batch or sl.stop != min(sl.start + batch, n):
        raise ValueError(f"slice {sl} is not a batch of this store (batch {batch}, {n} points)")
    return sl.start // batch


def _full_chunks(array):
    """The array with Zarr's skipping of chunks equal to the fill value turned off.

    An all-NaN batch (every point failed) must still leave its chunk files, so
    that a missing file always means a lost chunk.
    """
    return array.with_config({"write_empty_chunks": True})


@dataclass
class WrittenBatch:
    """A batch whose chunks are written but not yet committed: what a worker sends back.

    Attributes:
        index: the batch.
        status: ``(B,)`` int8 status codes as written.
        message: the batch's message as written.
        seconds: its compute time as written.
        chunks: chunk path (relative to the store) -> ``[size, stamp, sha256 hex]`` of
            every chunk of the batch as written (stamp: modification time in ns, or
            the ETag on an object store): the commit record's table.
    """

    index: int
    status: np.ndarray
    message: str
    seconds: float
    chunks: dict[str, list]


def store_format(group: zarr.Group) -> int:
    """The store format of an open sweep group (1 when the attribute is missing)."""
    return int(group.attrs.get("mechsweep_store_format", 1))


def _writable_group(path) -> zarr.Group:
    return path if isinstance(path, zarr.Group) else writer_group(path)


class _RecordingStore(zarr.storage.WrapperStore):
    """A Zarr store that keeps the bytes of every value written through it, until taken.

    A batch's writer takes its chunks' bytes from here for their checksums
    instead of reading the files back (on an object store, one request per
    chunk saved).
    """

    def __init__(self, store):
        super().__init__(store)
        self.written: dict[str, bytes] = {}

    async def set(self, key, value) -> None:
        await self._store.set(key, value)
        self.written[key] = value.to_bytes()

    def _with_store(self, store):
        return type(self)(store)


def writer_group(path) -> zarr.Group:
    """The store at ``path`` opened for writing batches (see :func:`write_batch_data`).

    Args:
        path: a local path or an object-store URL.

    Returns:
        The root group, over a store that records what is written through it.
    """
    group = zarr.open_group(str(path), mode="r+")
    return zarr.open_group(store=_RecordingStore(group.store), path=group.path, mode="r+")


def _written_table(group: zarr.Group, keys: list[str]) -> dict[str, list] | None:
    """The chunk table of ``keys`` from the bytes just written through ``group``; None if not all were.

    The stamp is the file's modification time (one ``stat``), or on S3 the
    object's ETag, which for an object written in one request is the MD5 of
    its bytes: no request at all. (Were an ETag ever not that, the quick
    check would read the chunk and compare its SHA-256: slower, as sure.)
    """
    written = getattr(group.store, "written", None)
    if written is None:
        return None
    prefix = f"{group.path}/" if group.path else ""
    if not all(prefix + key in written for key in keys):
        return None
    root = _store_root(group)
    s3 = root.remote and str(root).startswith("s3://")
    stats = {} if s3 else root.stats(keys)
    table = {}
    for key in keys:
        data = written.pop(prefix + key)
        stamp = f'"{hashlib.md5(data).hexdigest()}"' if s3 else (stats[key] or (None, None))[1]
        if stamp is None:
            return None
        table[key] = [len(data), stamp, _digest(data)]
    return table


def write_batch_data(path, batch_slice: slice, result: BatchResult) -> WrittenBatch:
    """Write one batch's chunks (all but its commit record); what :func:`commit_batch` needs.

    Run where the batch was computed (a Dask worker): the data never travel
    to the driver, only the returned table of chunk checksums does. The
    order of the writes (data, ``steps``, message and time, then ``status``)
    means that a status that is not pending always has its data beside it;
    the batch counts as done only once :func:`commit_batch` has run.

    A failed point's series are written up to its failure time and NaN
    after it (all NaN where the time is unknown), its metrics NaN, whatever
    data the result holds for them; outputs missing from ``result.data``
    are NaN. A store of format 3 also gets ``failure_time`` and
    ``failure_reason`` (:func:`failure_columns`).

    Args:
        path: the store (or an open ``zarr.Group`` of it, to save re-opening).
        batch_slice: the points of the batch, ``slice(start, stop)`` aligned
            with the store's batches.
        result: the batch's result, already checked against the schema (see
            :func:`sweep.run.check_result`).

    Returns:
        A :class:`WrittenBatch`.

    Raises:
        ValueError: the slice is not a batch of the store, or the store has
            no commit records (format 1: resume refuses such stores earlier).
        OSError: the store cannot be written (disk full, read-only).
    """
    group = _writable_group(path)
    if "batch_commit" not in group:
        raise ValueError(f"{_store_root(group)}: store format 1 has no commit records; "
                         "batches can only be written into a store of format 2 or later")
    index = _batch_index(group, batch_slice)
    n = batch_slice.stop - batch_slice.start
    codes = np.asarray(result.status, dtype=np.int8).reshape(n)
    bad = st.is_failure(codes)
    arrays = _open_arrays(group, _batch_arrays(group))
    times, reasons = failure_columns(result, codes)
    after = _after_failure(group, bad, times)
    writes = []
    for name in group.attrs["sweep_outputs"]:
        value = result.data.get(name)
        shape = (n,) + arrays[name].shape[1:]
        if value is None:
            value = np.full(shape, np.nan)
        else:
            value = np.array(value, dtype=np.float64).reshape(shape)
            series = arrays[name].metadata.dimension_names[1:2] == ("time",) and after.size
            value[after if series else bad] = np.nan
        writes.append((name, batch_slice, value))
    for name, column in zip(FAILURE_ARRAYS, (times, reasons)):
        if name in arrays:
            writes.append((name, batch_slice, column))
    writes.append(("steps", batch_slice, np.asarray(result.steps, dtype=np.int64).reshape(n)))
    message, seconds = str(result.message or ""), float(result.seconds)
    if "batch_message" in arrays:
        writes += [("batch_message", slice(index, index + 1), np.array([message], dtype=object)),
                   ("batch_seconds", slice(index, index + 1), np.array([seconds]))]
    # All data chunks at once (their writes overlap), then status: a status that is not
    # pending always has its data beside it.
    _write_chunks(arrays, writes)
    _write_status(arrays, batch_slice, codes)
    keys = _batch_chunks(group, index, _chunk_layout(group, arrays))
    table = _written_table(group, keys) or _chunk_table(_store_root(group), keys)
    return WrittenBatch(index, codes, message, seconds, table)


class BatchCommitter:
    """The writer of one store's commit records (the driver's part of writing a batch).

    The store's chunk layout and its ``batch_commit`` array are looked up
    once, so that committing a batch costs one small write.

    Args:
        path: the store (or an open ``zarr.Group`` of it).
    """

    def __init__(self, path):
        self.group = _writable_group(path)
        self.layout = _chunk_layout(self.group)
        self.records = self.group["batch_commit"]
        self.shared_message = store_format(self.group) < 3

    def commit(self, written: WrittenBatch) -> None:
        """Commit a batch written by :func:`write_batch_data`: write its commit record.

        The record's chunk table comes from the writer; its chunk paths must
        be exactly those the store's metadata give the batch. In a store of
        format 2 the batch's message and time are written here first (they
        share chunks with other batches there, so only one process may write
        them).

        Raises:
            ValueError: the table names other chunks than the batch has.
            OSError: the store cannot be written.
        """
        keys = _batch_chunks(self.group, written.index, self.layout)
        if sorted(written.chunks) != keys:
            raise ValueError(f"{_store_root(self.group)}: batch {written.index} was written with "
                             f"other chunks ({sorted(written.chunks)[:3]}...) than the store has "
                             f"({keys[:3]}...)")
        if self.shared_message:
            self.group["batch_message"][written.index] = written.message
            self.group["batch_seconds"][written.index] = written.seconds
        _write_commit(self.group, written.index, written.chunks, self.records)


def commit_batch(path, written: WrittenBatch) -> None:
    """Commit one batch written by :func:`write_batch_data` (see :class:`BatchCommitter`).

    Args:
        path: the store (or an open ``zarr.Group`` of it).
        written: what the writer returned.

    Raises:
        ValueError: the table names other chunks than the batch has.
        OSError: the store cannot be written.
    """
    BatchCommitter(path).commit(written)


def write_batch(path, batch_slice: slice, result: BatchResult) -> None:
    """Write one finished batch into the store and commit it, in this process.

    :func:`write_batch_data` then :func:`commit_batch`; see those.

    Args:
        path: the store (or an open ``zarr.Group`` of it, to save re-opening).
        batch_slice: the points of the batch, aligned with the store's batches.
        result: the batch's result, already checked against the schema.

    Raises:
        ValueError: the slice is not a batch of the store, or the store is of format 1.
        OSError: the store cannot be written.
    """
    group = _writable_group(path)
    commit_batch(group, write_batch_data(group, batch_slice, result))


def _open_arrays(group: zarr.Group, names: list[str]) -> dict[str, zarr.Array]:
    """The group's arrays ``names``, looked up together (each lookup alone waits on Zarr's loop)."""
    from zarr.core.sync import sync

    async def lookup():
        return await asyncio.gather(*(group._async_group.getitem(name) for name in names))

    return {name: zarr.Array(found) for name, found in zip(names, sync(lookup()))}


def _write_chunks(arrays: Mapping[str, zarr.Array], writes: list) -> None:
    """``arrays[name][selection] = value`` for each ``(name, selection, value)``, concurrently.

    Every chunk is written, even one equal to the fill value (see :func:`_full_chunks`).
    """
    from zarr.core.sync import sync

    async def write_all():
        await asyncio.gather(*(_full_chunks(arrays[name]).async_array.setitem(selection, value)
                               for name, selection, value in writes))

    sync(write_all())


def failure_columns(result: BatchResult, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A batch's ``failure_time`` and ``failure_reason`` columns, as the store keeps them.

    Args:
        result: the batch's result.
        codes: its ``(B,)`` status codes.

    Returns:
        ``(times, reasons)``: float64 ``(B,)``, NaN where a point did not
        fail (or its time is unknown: a batch that failed as a whole), and
        object ``(B,)`` texts, empty where a point did not fail; a failed
        point without a reason of its own gets the first line of the
        batch's message, or without one its status's description.
    """
    n = codes.shape[0]
    bad = st.is_failure(codes)
    times = np.full(n, np.nan)
    if result.failure_time is not None:
        times = np.array(result.failure_time, dtype=np.float64).reshape(n)
        times[~bad] = np.nan
    given = result.failure_reason if result.failure_reason is not None else [""] * n
    lines = str(result.message or "").strip().splitlines()
    reasons = np.array([(str(r) or (lines[0] if lines else st.DESCRIPTIONS.get(int(c), st.meaning(c))))
                        if b else "" for r, b, c in zip(given, bad, codes)], dtype=object)
    return times, reasons


def _after_failure(group: zarr.Group, bad: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``(B, T)`` mask of the samples a batch writes as NaN: those of failed points after their failure time.

    A failed point with no known failure time is NaN throughout.
    """
    if not bad.any():
        return np.zeros((bad.shape[0], 0), dtype=bool)
    t = group["time"][:]
    with np.errstate(invalid="ignore"):
        kept = t[None, :] <= times[:, None]
    return bad[:, None] & ~kept


def _write_status(arrays: Mapping[str, zarr.Array], batch_slice: slice, codes: np.ndarray) -> None:
    # Written after the data: status alone never says done (the commit record
    # does), but a status that is not pending always has its data beside it.
    _write_chunks(arrays, [("status", batch_slice, codes)])


def _write_commit(group: zarr.Group, index: int, chunks: Mapping[str, list] | None = None,
                  records: zarr.Array | None = None) -> None:
    """The commit point of a batch: one chunk of ``batch_commit``, written atomically.

    ``chunks``: the batch's chunk table from its writer; None reads the chunks as they are now.
    ``records``: the ``batch_commit`` array, if already looked up.
    """
    if chunks is None:
        chunks = _chunk_table(_store_root(group), _batch_chunks(group, index))
    records = records if records is not None else group["batch_commit"]
    records[index] = json.dumps(_commit_record(chunks), sort_keys=True)


# ------------------------------------------------------------ commit records

def _store_root(group: zarr.Group) -> StoreLocation:
    """Where a group's files are (checks read chunk files)."""
    return StoreLocation.of_group(group)


def _batch_arrays(group: zarr.Group) -> list[str]:
    """The arrays with one chunk per batch, under its commit record.

    Every output, ``steps``, ``status``, and from format 3 on the failure
    variables, ``batch_message`` and ``batch_seconds`` (a format-2 store has
    no failure variables, and its commit records name neither).
    """
    later = [*FAILURE_ARRAYS, "batch_message", "batch_seconds"] if store_format(group) >= 3 else []
    return [*group.attrs["sweep_outputs"], "steps", *later, "status"]


def _chunk_layout(group: zarr.Group, arrays: Mapping | None = None) -> list:
    """Per batch array: its name, its metadata and the chunk coordinates after ``point``.

    Looked up once per check or write (a Zarr array lookup costs more than a
    ``stat``); ``arrays`` are already opened batch arrays by name.
    """
    layout = []
    for name in _batch_arrays(group):
        array = arrays[name] if arrays is not None else group[name]
        rest = list(itertools.product(*(range(n) for n in array.cdata_shape[1:])))
        layout.append((name, array.metadata, rest))
    return layout


def _batch_chunks(group: zarr.Group, index: int, layout=None) -> list[str]:
    """Paths (relative to the store) of the chunk files of batch ``index``, sorted.

    The paths come from the store's own metadata, never from a commit record,
    so a record cannot make a check read a file outside the store.
    """
    keys = []
    for name, meta, rest in layout if layout is not None else _chunk_layout(group):
        keys += [f"{name}/{meta.encode_chunk_key((index, *coords))}" for coords in rest]
    return sorted(keys)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _batch_checksum(digests: Mapping[str, str]) -> str:
    """The content checksum of a batch: SHA-256 over ``"<path> <sha256>\\n"`` in path order."""
    text = "".join(f"{key} {digests[key]}\n" for key in sorted(digests))
    return "sha256:" + _digest(text.encode())


def _chunk_table(root: StoreLocation, keys: list[str]) -> dict[str, list]:
    """``[size, stamp, sha256]`` of each chunk file ``keys`` as it is stored now.

    The stamp is the modification time in ns (local) or the ETag (object store).
    """
    chunks = {}
    for key, found in root.read_many(keys).items():
        if found is None:
            raise FileNotFoundError(f"{root}: chunk {key} is missing right after its write")
        data, stamp = found
        chunks[key] = [len(data), stamp, _digest(data)]
    return chunks


def _commit_record(chunks: Mapping[str, list]) -> dict:
    """The commit record of a batch whose chunk table (:func:`_chunk_table`) is ``chunks``."""
    return {
        "format": COMMIT_FORMAT,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds"),
        "checksum": _batch_checksum({k: v[2] for k, v in chunks.items()}),
        "chunks": chunks,
    }


def _parse_record(text: str, keys: list[str]) -> tuple[dict | None, str]:
    """A commit record's chunk table, or None and why it is unusable.

    Args:
        text: the stored JSON text.
        keys: the chunk paths the batch must have (from the store's metadata).
    """
    try:
        record = json.loads(text)
    except ValueError as exc:
        return None, f"commit record is not valid JSON ({exc})"
    chunks = record.get("chunks") if isinstance(record, dict) else None
    if not isinstance(chunks, dict) or record.get("format") != COMMIT_FORMAT:
        return None, f"commit record is not a format-{COMMIT_FORMAT} record"
    if sorted(chunks) != keys:
        return None, "commit record lists other chunks than the batch has"
    for entry in chunks.values():
        if not (isinstance(entry, list) and len(entry) == 3
                and isinstance(entry[0], int) and not isinstance(entry[0], bool)
                and (isinstance(entry[1], str) or isinstance(entry[1], int)
                     and not isinstance(entry[1], bool))
                and isinstance(entry[2], str) and len(entry[2]) == 64):
            return None, "commit record has a malformed chunk entry"
    if record.get("checksum") != _batch_checksum({k: v[2] for k, v in chunks.items()}):
        return None, "commit record's batch checksum does not match its chunk checksums"
    return chunks, ""


def _check_chunks(root: StoreLocation, chunks: Mapping[str, list], keys: list[str], level: str,
                  stats: Mapping) -> list[str]:
    """Why the committed chunk files ``keys`` are not as committed; empty when they are.

    ``stats``: key -> (size, stamp) or None, as :meth:`StoreLocation.stats` gives.
    """
    problems, to_read = {}, []
    for key in keys:
        size, stamp, _ = chunks[key]
        found = stats.get(key)
        if found is None:
            problems[key] = f"chunk {key} missing"
        elif found[0] != size:
            problems[key] = f"chunk {key} corrupt: {found[0]} bytes, committed {size}"
        elif level != "quick" or found[1] != stamp:
            to_read.append(key)   # an untouched chunk needs no reading at the quick level
    for key, got in root.read_many(to_read).items():
        problems[key] = _chunk_problem(key, chunks[key], got)
    return [problems[k] for k in keys if problems.get(k)]


def _chunk_problem(key: str, entry: list, got) -> str:
    """Why one chunk read back is not as committed; empty when it is."""
    if got is None:
        return f"chunk {key} missing"
    data, digest = got[0], entry[2]
    if _digest(data) != digest:
        return f"chunk {key} corrupt: checksum differs from the commit record"
    return ""


def _decode_batch(group: zarr.Group, sl: slice) -> list[str]:
    """Decode every chunk of a batch; why each undecodable one fails."""
    problems = []
    for name in _batch_arrays(group):
        try:
            group[name][sl]
        except Exception as exc:  # noqa: BLE001 - codecs raise many types for bad bytes
            problems.append(f"array {name}: a chunk of the batch is undecodable "
                            f"({type(exc).__name__}: {exc})")
    return problems


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
        repaired: coordinates a resume wrote again (see :func:`plan_store`).
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


def _open_sweep_group(path: Path) -> zarr.Group:
    if not _is_store(path):
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


def _check_batch(group: zarr.Group, root: StoreLocation, index: int, sl: slice, record,
                 codes: np.ndarray, level: str, layout, stats: Mapping) -> list[str] | None:
    """Problems of one batch; ``None`` when it is pending (no record, no status)."""
    keys = _batch_chunks(group, index, layout)
    if isinstance(record, Exception):
        return [f"commit record undecodable ({type(record).__name__}: {record})"]
    if not record:
        # Chunks without a commit record are a batch its worker wrote and the driver never
        # committed (the run stopped in between): not done, run again, but not damage.
        return None
    chunks, why = _parse_record(record, keys)
    if chunks is None:
        return [why]
    problems = _check_chunks(root, chunks, keys, level, stats)
    if not problems and level == "decode":
        problems = _decode_batch(group, sl)
    if not problems and (codes[sl] == st.PENDING).any():
        problems = ["status holds pending points although the batch is committed"]
    return problems


def _check_other_arrays(group: zarr.Group, reported=()) -> list[str]:
    """Decode every array that is not per batch (coordinates, shared batch arrays).

    ``reported``: arrays whose damage the template record already reported.
    """
    problems = []
    skip = set(_batch_arrays(group)) | set(reported)
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
        raise InputError(_legacy_message(), file=check.path)
    for i, sl in enumerate(check.slices):
        (check.pending if (codes[sl] == st.PENDING).any() else check.done).append(i)
    check.codes = codes
    return check


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
    path = _place(path)
    group = _open_sweep_group(path)
    batch = int(group.attrs["sweep_batch"])
    n = int(group.attrs["sweep_n_points"])
    slices = batch_slices(n, batch)
    codes, bad_status = _read_codes(group, slices)
    check = StoreCheck(str(path), level, n, batch, slices, legacy="batch_commit" not in group)
    if check.legacy:
        return _legacy_check(check, codes)
    root = _store_root(group)
    records = _read_records(group, len(slices))
    layout = _chunk_layout(group)
    stats = root.stats([k for i in range(len(slices)) if records[i] for k in _batch_chunks(group, i, layout)])
    for i, sl in enumerate(slices):
        problems = _check_batch(group, root, i, sl, records[i], codes, level, layout, stats)
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



# ------------------------------------------------------------ structural roots
# A sweep over structural parameters (sweep/structural.py) writes one plain
# store per structure group under a root group marked ROOT_MARK; reading
# such a root is the store's job.
ROOT_MARK = "mechsweep_structural_sweep"


def root_attrs(path) -> dict:
    """The attributes of a store's root group (no data read)."""
    import zarr

    return dict(zarr.open_group(str(path), mode="r").attrs)


def is_structural_store(path) -> bool:
    """Whether ``path`` is the root of a structural sweep store."""
    path = _place(path)
    if not _is_store(path):
        return False
    try:
        return ROOT_MARK in root_attrs(path)
    except Exception:  # noqa: BLE001 - unreadable metadata: not one (the plain checks say why)
        return False


def _groups_of(path: Path) -> tuple[dict, list[str]]:
    attrs = root_attrs(path)
    labels = attrs.get("sweep_groups")
    if isinstance(labels, str):
        labels = json.loads(labels)
    return attrs, [str(x) for x in labels or []]


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
    import xarray as xr


    path = _place(path)
    attrs, labels = _groups_of(path)
    if group is not None:
        if group not in labels:
            raise KeyError(f"{path}: no structure group {group!r}; its groups: {', '.join(labels)}")
        return open_store(path / group, verify)
    children = {}
    for label in labels:
        if not _is_store(path / label):
            warnings.warn(f"{path}: structure group {label} is missing; 'mechsweep sweep "
                          f"SWEEP.yaml --out {path} --resume' recomputes it", stacklevel=3)
            continue
        children[label] = open_store(path / label, verify)
    return xr.DataTree.from_dict({"/": xr.Dataset(attrs=attrs), **children})


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

    if not _is_store(path):
        raise FileNotFoundError(f"{path}: no Zarr store there")
    if is_structural_store(path):
        return open_tree(path, verify, group)
    if group is not None:
        raise ValueError(f"{path}: a plain sweep store has no structure groups (group={group!r}); "
                         f"open it without group")
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
            f"'mechsweep sweep SWEEP.yaml --out {_resume_target(path, ds.attrs)} --resume' "
            f"recomputes them", stacklevel=2)
    if check.store_problems:
        warnings.warn(f"{path}: files written once are damaged, so coordinates or metadata may read "
                      f"wrong: {'; '.join(check.store_problems)}", stacklevel=2)
    stored = ds["status"]
    return ds.assign(status=(stored.dims, np.asarray(check.codes, dtype=stored.dtype), stored.attrs))


def _resume_target(path, attrs: Mapping):
    """The ``--out`` that resumes a store: the root of a structure group's store."""
    return _place(path).parent if attrs.get("sweep_group") else _place(path)


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
        return ["integrity:  NOT VERIFIABLE: this store " + _legacy_message(
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
    path = _place(path)
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
    resume = _resume_target(path, attrs)
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
