"""Writing a batch's chunks where it was computed, and the table of what was written.

Writing a batch happens in two places. The worker that computed it writes its
chunks (:func:`write_batch_data`): data (the outputs, ``failure_time``,
``failure_reason``), ``steps``, ``batch_message`` and ``batch_seconds``, then
``status``; it takes each chunk's bytes as written (or reads the file back)
for its size, stamp and SHA-256, and sends only that table (and the status
codes) to the driver. The driver alone writes the batch's commit record
(:mod:`sweep.store.commit`). Every chunk of a batch is written, even an
all-NaN one (Zarr would otherwise skip chunks equal to the fill value), and a
local Zarr store writes each chunk atomically (temporary file + rename). So a
driver or worker killed at any moment leaves a store in which every batch is
either committed with all its chunks, or not committed and run again by a
resume. Batches are chunk-aligned, so workers never write the same file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from typing import Mapping

import numpy as np
import zarr

from solver import status as st
from solver.status import samples_after_failure
from sweep.store.schema import (FAILURE_ARRAYS, BatchResult, WrittenBatch, batch_arrays, batch_chunks, batch_index,
                                chunk_layout, chunk_table, commit_record, digest, store_root)

__all__ = [
    "writer_group", "writable_group", "write_batch_data", "failure_columns", "put_whole_chunk",
]


def _full_chunks(array):
    """The array with Zarr's skipping of chunks equal to the fill value turned off.

    An all-NaN batch (every point failed) must still leave its chunk files, so
    that a missing file always means a lost chunk.
    """
    return array.with_config({"write_empty_chunks": True})


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


def writable_group(path) -> zarr.Group:
    """``path`` itself if it is an open ``zarr.Group``, else :func:`writer_group` of it."""
    return path if isinstance(path, zarr.Group) else writer_group(path)


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
    root = store_root(group)
    s3 = root.remote and str(root).startswith("s3://")
    stats = {} if s3 else root.stats(keys)
    table = {}
    for key in keys:
        data = written.pop(prefix + key)
        stamp = f'"{hashlib.md5(data).hexdigest()}"' if s3 else (stats[key] or (None, None))[1]
        if stamp is None:
            return None
        table[key] = [len(data), stamp, digest(data)]
    return table


def write_batch_data(path, batch_slice: slice, result: BatchResult) -> WrittenBatch:
    """Write one batch's chunks (all but its commit record); what :func:`sweep.store.commit.commit_batch` needs.

    Run where the batch was computed (a Dask worker): the data never travel
    to the driver, only the returned table of chunk checksums does. The
    order of the writes (data, ``steps``, message and time, then ``status``)
    means that a status that is not pending always has its data beside it;
    the batch counts as done only once :func:`sweep.store.commit.commit_batch` has run.

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
    group = writable_group(path)
    if "batch_commit" not in group:
        raise ValueError(f"{store_root(group)}: store format 1 has no commit records; "
                         "batches can only be written into a store of format 2 or later")
    index = batch_index(group, batch_slice)
    n = batch_slice.stop - batch_slice.start
    codes = np.asarray(result.status, dtype=np.int8).reshape(n)
    bad = st.is_failure(codes)
    arrays = _open_arrays(group, batch_arrays(group))
    times, reasons = failure_columns(result, codes)
    after = _after_failure(group, codes, times)
    writes = []
    for name in group.attrs["sweep_outputs"]:
        value = result.data.get(name)
        shape = (n,) + arrays[name].shape[1:]
        if value is None:
            value = np.full(shape, np.nan)
        else:
            value = np.asarray(value, dtype=np.float64).reshape(shape)
            series = arrays[name].metadata.dimension_names[1:2] == ("time",) and after.size
            mask = after if series else bad
            if mask.any():          # copied only to be masked: the result's arrays stay as they are
                value = value.copy()
                value[mask] = np.nan
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
    keys = batch_chunks(group, index, chunk_layout(group, arrays))
    table = _written_table(group, keys) or chunk_table(store_root(group), keys)
    return WrittenBatch(index, codes, message, seconds, table, float(result.compile_seconds), commit_record(table))


def _open_arrays(group: zarr.Group, names: list[str]) -> dict[str, zarr.Array]:
    """The group's arrays ``names``, looked up together (each lookup alone waits on Zarr's loop)."""
    from zarr.core.sync import sync

    async def lookup():
        return await asyncio.gather(*(group._async_group.getitem(name) for name in names))

    return {name: zarr.Array(found) for name, found in zip(names, sync(lookup()))}


def _write_chunks(arrays: Mapping[str, zarr.Array], writes: list) -> None:
    """``arrays[name][selection] = value`` for each ``(name, selection, value)``.

    Every chunk is written, even one equal to the fill value (see :func:`_full_chunks`).
    A write that is one whole chunk of an array whose codecs mechsweep
    knows (:func:`_plain_chunk_key`) is encoded here and handed to the store
    directly: the same bytes as Zarr's codec pipeline makes, without its
    per-chunk machinery, which cost a batch's worker as much as the file
    writes themselves.  On a local store those files are written here, in
    this thread, as Zarr's local store writes them (:func:`_put_local`); the
    rest go through Zarr's event loop, concurrently.
    """
    from zarr.core.sync import sync

    later = []
    for name, selection, value in writes:
        array = arrays[name]
        encoders = _chunk_encoders(array)
        key = _plain_chunk_key(array, selection, np.shape(value), encoders)
        if key is None:
            later.append((array, selection, value, None))
            continue
        data = _plain_chunk_bytes(array, value, encoders)
        if not _put_local(array.store_path.store, key, data):
            later.append((array, selection, _zarr_buffer(data), key))
    if not later:
        return

    async def write_one(array, selection, value, key):
        if key is None:
            await _full_chunks(array).async_array.setitem(selection, value)
        else:
            await array.store_path.store.set(key, value)

    async def write_all():
        await asyncio.gather(*(write_one(*write) for write in later))

    sync(write_all())


def _put_local(store, key: str, data: bytes | bytearray) -> bool:
    """Write one encoded chunk (:func:`_plain_chunk_bytes`) into a local store in this thread; False for another store.

    As Zarr's ``LocalStore`` writes it: a temporary file beside the
    destination, then a rename over it (atomic); the rename is what a
    reader can see.  A store that records what is written through it
    (:class:`_RecordingStore`) records it.  Zarr's own path hands each write
    to its event loop and a thread: a commit record's one small file cost
    the driver over a millisecond of CPU that way.
    """
    inner = store._store if isinstance(store, _RecordingStore) else store
    if not isinstance(inner, zarr.storage.LocalStore) or inner.read_only:
        return False
    path = inner.root / key
    tmp = path.with_suffix(f".{uuid.uuid4().hex}.partial")
    try:
        try:
            f = open(tmp, "wb")
        except FileNotFoundError:   # the chunk's folder is made by its first write (a mkdir costs as much as the write)
            path.parent.mkdir(parents=True, exist_ok=True)
            f = open(tmp, "wb")
        with f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if isinstance(store, _RecordingStore):
        store.written[key] = data
    return True


def put_whole_chunk(array: zarr.Array, selection, value) -> None:
    """``array[selection] = value``, written directly where that is one whole chunk (see :func:`_write_chunks`).

    The driver's commit records go through here too: one small text chunk,
    which Zarr's codec pipeline took milliseconds of CPU to write.

    Args:
        array: an array of the store, open for writing.
        selection: a slice of the first axis (the batch's rows).
        value: the rows' values.

    Raises:
        OSError: the store cannot be written.
    """
    _write_chunks({array.path: array}, [(array.path, selection, value)])


# The codec chains mechsweep encodes itself: the values' bytes (numbers, little-endian) or their
# variable-length UTF-8 (texts), optionally Zstandard, then the CRC32C of the whole.  Any other
# chain (another compressor, format 2) takes Zarr's path.
_ARRAY_TO_BYTES = ("bytes", "vlen-utf8")
_LITTLE_ENDIAN = {"endian": "little"}


def _chunk_encoders(array: zarr.Array) -> tuple | None:
    """The steps that encode a whole chunk of ``array`` as Zarr would, or None where mechsweep does not."""
    meta = array.metadata
    if getattr(meta, "zarr_format", None) != 3:
        return None
    codecs = [c.to_dict() for c in meta.codecs]
    if len(codecs) not in (2, 3) or codecs[-1] != {"name": "crc32c"} or codecs[0]["name"] not in _ARRAY_TO_BYTES:
        return None
    first = codecs[0]
    text = first["name"] == "vlen-utf8"
    if text != (array.dtype.kind in "OTU") or (not text and array.dtype.kind not in "fiub"):
        return None
    # One-byte values have no byte order: Zarr then writes no configuration.
    if not text and first.get("configuration") != _LITTLE_ENDIAN and \
            not (array.dtype.itemsize == 1 and not first.get("configuration")):
        return None
    zstd = None
    if len(codecs) == 3:
        middle = codecs[1]
        config = middle.get("configuration") or {}
        if middle["name"] != "zstd" or set(config) != {"level", "checksum"}:
            return None
        zstd = (int(config["level"]), bool(config["checksum"]))
    return text, zstd


def _plain_chunk_key(array: zarr.Array, selection, shape, encoders: tuple | None) -> str | None:
    """The store key of the one whole chunk that ``array[selection] = value`` writes, or None.

    None unless mechsweep encodes the array's chunks (``encoders``, :func:`_chunk_encoders`'s answer:
    numbers as bytes or texts as variable-length UTF-8, optionally
    Zstandard, then CRC32C), its chunk grid is regular with chunks spanning
    every axis but the first, and the selection is a slice of the first axis
    covering exactly one chunk, inside the array, with a value of the chunk's
    shape.
    """
    if not isinstance(selection, slice) or selection.step not in (None, 1) or encoders is None:
        return None
    chunks, shape_all = array.chunks, array.shape
    if not chunks or tuple(chunks[1:]) != tuple(shape_all[1:]) or tuple(shape) != tuple(chunks):
        return None
    start, stop = selection.start or 0, selection.stop
    if start % chunks[0] or stop is None or stop - start != chunks[0] or stop > shape_all[0]:
        return None
    key = array.metadata.encode_chunk_key((start // chunks[0],) + (0,) * (len(chunks) - 1))
    return f"{array.path}/{key}" if array.path else key


def _plain_chunk_bytes(array: zarr.Array, value, encoders: tuple) -> bytes | bytearray:
    """A whole chunk encoded as the array's codecs say: the bytes Zarr writes.

    ``encoders`` is :func:`_chunk_encoders`'s answer for the array, computed
    once per write by the caller.

    Numbers are copied once, into the chunk's bytes with room for the CRC32C
    after them (a chunk of a pendulum batch's series is 0.8 MB, and every
    further copy was a pass over it).
    """
    import google_crc32c

    text, zstd = encoders
    if text:
        from numcodecs import VLenUTF8

        data = bytes(VLenUTF8().encode(np.asarray(value, dtype=object).reshape(-1)))
    else:
        values = np.ascontiguousarray(value, dtype=array.dtype.newbyteorder("<"))
        if zstd is None:
            chunk = bytearray(values.nbytes + 4)
            memoryview(chunk)[:-4] = memoryview(values).cast("B")
            chunk[-4:] = int(google_crc32c.value(values)).to_bytes(4, "little")
            return chunk
        data = values.tobytes()
    if zstd is not None:
        from numcodecs import Zstd

        data = bytes(Zstd(level=zstd[0], checksum=zstd[1]).encode(data))
    return data + int(google_crc32c.value(data)).to_bytes(4, "little")


def _zarr_buffer(data):
    """Encoded chunk bytes as the Zarr buffer a store's ``set`` takes."""
    from zarr.core.buffer import default_buffer_prototype

    return default_buffer_prototype().buffer.from_bytes(bytes(data))


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


def _after_failure(group: zarr.Group, codes: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``(B, T)`` mask of the samples a batch writes as NaN: those of failed points after their failure time.

    A failed point with no known failure time is NaN throughout
    (:func:`solver.status.samples_after_failure`). Without a
    failed point the mask is empty and the time coordinate is not read.
    """
    if not st.is_failure(codes).any():
        return np.zeros((codes.shape[0], 0), dtype=bool)
    return samples_after_failure(group["time"][:], codes, times)


def _write_status(arrays: Mapping[str, zarr.Array], batch_slice: slice, codes: np.ndarray) -> None:
    # Written after the data: status alone never says done (the commit record
    # does), but a status that is not pending always has its data beside it.
    _write_chunks(arrays, [("status", batch_slice, codes)])
