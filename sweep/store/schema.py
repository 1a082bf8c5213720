"""What a sweep store holds: its layout, format versions, result types, and each batch's chunk files.

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
- ``batch_commit(batch)`` text: the batch's *commit record*, empty until the
  batch is complete (store format 2; :mod:`sweep.store.commit`); one chunk
  holds the records of :data:`COMMIT_GROUP` consecutive batches from format 4
  on (one chunk per batch before), so that the driver commits a task's
  batches with one write.

Every chunk of a store of format 3 on also carries a CRC32C checksum (Zarr's
``crc32c`` codec) that any Zarr reader checks when it decodes the chunk.

Stores of format 1 (written before commit records existed) can still be read
and reported, but neither verified nor resumed (a clear error says so).
Stores of format 2 (before ``failure_time`` and ``failure_reason``; message
and time in chunks shared by 1,024 batches, written by the driver; no CRC32C)
are read, verified and resumed as they are.

A store is a local folder or an object-store URL (``s3://bucket/sweep.zarr``;
:mod:`sweep.location`).
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import zarr

from sweep.location import StoreLocation, is_url

__all__ = [
    "RESERVED", "STORE_FORMAT", "COMMIT_GROUP", "FAILURE_ARRAYS", "BatchResult", "Schema", "WrittenBatch",
    "effective_batch", "batch_slices", "place", "is_store", "store_attrs", "store_format", "legacy_message",
    "resume_target", "batch_index", "store_root", "batch_arrays", "chunk_layout", "batch_chunks", "digest",
    "COMMIT_FORMAT", "batch_checksum", "commit_record", "chunk_table",
]


#: Variables every sweep store has besides the schema's; schema names must differ.
RESERVED = ("status", "steps", "batch_message", "batch_seconds", "batch_commit", "template_commit",
            "failure_time", "failure_reason",
            "point", "batch",
            "time")

#: 1: no commit records (status fill value 0); 2: commit records, status fill value pending;
#: 3: ``failure_time`` and ``failure_reason`` per point, ``batch_message`` and ``batch_seconds``
#: one chunk per batch, all under the commit records; every chunk carries a CRC32C checksum
#: (Zarr's ``crc32c`` codec); 4: ``batch_commit`` in chunks of :data:`COMMIT_GROUP` batches.
STORE_FORMAT = 4

#: Commit records per chunk of ``batch_commit`` in a new store (format 4), and
#: the most batches a task runs (:data:`sweep.run.driver.TASK_MOST_BATCHES`):
#: a task's batches are committed with one write.
COMMIT_GROUP = 32


def commit_chunk_length(n_batches: int) -> int:
    """The commit records per chunk of ``batch_commit`` in a new store of ``n_batches`` batches.

    Known before the store is written: the driver groups a new store's
    batches into tasks by it while the template is still being made.
    """
    return min(COMMIT_GROUP, int(n_batches))


#: The per-point failure variables (store format 3 on), in the order a batch writes them.
FAILURE_ARRAYS = ("failure_time", "failure_reason")


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
        compile_seconds: the part of ``seconds`` that JAX spent tracing and
            compiling, filled in by the runtime (NaN: not measured).
    """

    status: np.ndarray
    steps: np.ndarray
    data: dict[str, np.ndarray]
    message: str = ""
    seconds: float = math.nan
    failure_time: np.ndarray | None = None
    failure_reason: list[str] | None = None
    compile_seconds: float = math.nan

    @classmethod
    def failed(cls, n: int, code: int, message: str) -> "BatchResult":
        """A result in which all ``n`` points failed with ``code`` and carry no data.

        Args:
            n: number of points in the batch.
            code: the status code for all of them.
            message: why.

        Returns:
            The result; missing data are written as NaN by
            :func:`sweep.store.write.write_batch_data`.
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
        compile_seconds: the part of ``seconds`` spent compiling (NaN:
            not measured); reported, not written into the store.
        record: the commit record's JSON text, built by the writer from
            ``chunks`` (:func:`commit_record`); empty: the committer builds it.
    """

    index: int
    status: np.ndarray
    message: str
    seconds: float
    chunks: dict[str, list]
    compile_seconds: float = math.nan
    record: str = ""


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


def place(path):
    """A local path as a ``Path``, an object-store URL as a :class:`StoreLocation` (both join with ``/``)."""
    return StoreLocation(path) if is_url(path) else Path(path)


def is_store(path) -> bool:
    """Whether there is a Zarr group (its ``zarr.json``) at ``path``, a local path or an object-store URL."""
    return StoreLocation(path).is_store()


def store_attrs(path) -> dict:
    """The attributes of a store's root group (no data read).

    Args:
        path: the store.

    Returns:
        The attributes as a dict.
    """
    return dict(zarr.open_group(str(path), mode="r").attrs)


def store_format(group: zarr.Group) -> int:
    """The store format of an open sweep group (1 when the attribute is missing)."""
    return int(group.attrs.get("mechsweep_store_format", 1))


def legacy_message(action: str = "") -> str:
    """Why a store of format 1 cannot be verified, followed by ``action`` (default: how to recompute it)."""
    action = action or ("Run its sweep again with --overwrite to recompute it into a verifiable "
                        "store, or into a new --out path; the old store stays readable with "
                        "xarray.open_zarr")
    return (f"was written by an older mechsweep (store format 1) without commit records, so "
            f"which of its batches are complete cannot be verified (in that format a lost status "
            f"chunk reads as success). {action}")


def resume_target(path, attrs: Mapping):
    """The ``--out`` that resumes a store: the root of a structure group's store."""
    return place(path).parent if attrs.get("sweep_group") else place(path)


# ------------------------------------------------------------ the chunks of a batch

def batch_index(group: zarr.Group, sl: slice) -> int:
    """The index of the batch whose points are ``sl``.

    Raises:
        ValueError: ``sl`` is not one of the store's batches.
    """
    batch = int(group.attrs["sweep_batch"])
    n = int(group.attrs["sweep_n_points"])
    if sl.start % batch or sl.stop != min(sl.start + batch, n):
        raise ValueError(f"slice {sl} is not a batch of this store (batch {batch}, {n} points)")
    return sl.start // batch


def store_root(group: zarr.Group) -> StoreLocation:
    """Where a group's files are (checks read chunk files)."""
    return StoreLocation.of_group(group)


def batch_arrays(group: zarr.Group) -> list[str]:
    """The arrays with one chunk per batch, under its commit record.

    Every output, ``steps``, ``status``, and from format 3 on the failure
    variables, ``batch_message`` and ``batch_seconds`` (a format-2 store has
    no failure variables, and its commit records name neither).
    """
    later = [*FAILURE_ARRAYS, "batch_message", "batch_seconds"] if store_format(group) >= 3 else []
    return [*group.attrs["sweep_outputs"], "steps", *later, "status"]


# A batch index that no store reaches, formatted into a chunk key to find where the index goes.
_INDEX_MARK = 9_876_543_210_123


def chunk_layout(group: zarr.Group, arrays: Mapping | None = None) -> list:
    """Per batch array: its name and the chunk keys of a batch around the batch's index.

    Each entry is ``(name, templates)``: for each chunk of a batch (its
    coordinates after ``point``), the text before and after the batch index
    in the chunk's key, as the array's chunk key encoding writes it.  Looked
    up once per check or write (a Zarr array lookup costs more than a
    ``stat``, an encoding of a key more than joining three strings);
    ``arrays`` are already opened batch arrays by name.
    """
    layout = []
    mark = str(_INDEX_MARK)
    for name in batch_arrays(group):
        array = arrays[name] if arrays is not None else group[name]
        templates = []
        for coords in itertools.product(*(range(n) for n in array.cdata_shape[1:])):
            before, found, after = f"{name}/{array.metadata.encode_chunk_key((_INDEX_MARK, *coords))}".partition(mark)
            if not found or mark in after:
                raise ValueError(f"{name}: its chunk key encoding does not write the batch index as a number")
            templates.append((before, after))
        layout.append((name, templates))
    return layout


def batch_chunks(group: zarr.Group, index: int, layout=None) -> list[str]:
    """Paths (relative to the store) of the chunk files of batch ``index``, sorted.

    The paths come from the store's own metadata, never from a commit record,
    so a record cannot make a check read a file outside the store.
    """
    i = str(index)
    return sorted([before + i + after for _, templates in (layout if layout is not None else chunk_layout(group))
                   for before, after in templates])


def digest(data: bytes) -> str:
    """The SHA-256 of a chunk's stored bytes, in hex (the commit record's checksum of a chunk)."""
    return hashlib.sha256(data).hexdigest()


#: Version of the commit record's JSON layout (:mod:`sweep.store.commit`).
COMMIT_FORMAT = 1


def batch_checksum(digests: Mapping[str, str]) -> str:
    """The content checksum of a batch: SHA-256 over ``"<path> <sha256>\\n"`` in path order."""
    text = "".join(f"{key} {digests[key]}\n" for key in sorted(digests))
    return "sha256:" + digest(text.encode())


def commit_record(chunks: Mapping[str, list]) -> str:
    """The commit record (JSON text, :mod:`sweep.store.commit`) of a batch whose chunk table is ``chunks``.

    Built where the batch was written, so the driver that commits it only
    checks the table's paths and places the text; ``time`` is now, when the
    batch's chunks are all written.

    Args:
        chunks: chunk path -> ``[size, stamp, sha256 hex]`` (:func:`chunk_table`).

    Returns:
        The record's JSON text, keys sorted.
    """
    return json.dumps({
        "format": COMMIT_FORMAT,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds"),
        "checksum": batch_checksum({k: v[2] for k, v in chunks.items()}),
        "chunks": chunks,
    }, sort_keys=True)


def chunk_table(root: StoreLocation, keys: list[str]) -> dict[str, list]:
    """``[size, stamp, sha256]`` of each chunk file ``keys`` as it is stored now.

    The stamp is the modification time in ns (local) or the ETag (object store).
    """
    chunks = {}
    for key, found in root.read_many(keys).items():
        if found is None:
            raise FileNotFoundError(f"{root}: chunk {key} is missing right after its write")
        data, stamp = found
        chunks[key] = [len(data), stamp, digest(data)]
    return chunks
