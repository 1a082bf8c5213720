"""Commit records: the driver's part of writing a batch, and the record's JSON layout.

A batch counts as done only once its commit record is written, after its
chunks (:mod:`sweep.store.write`). A commit record is JSON text (read with
``json.loads``, never executed)::

    {"format": 1, "time": "2026-05-01T12:00:00.123456+00:00",
     "checksum": "sha256:<hex>",
     "chunks": {"x/c/3/0": [size, mtime_ns, "<sha256 hex>"], "status/c/3": [...], ...}}

``chunks`` lists every chunk of the batch (each output, ``steps``,
``failure_time``, ``failure_reason``, ``batch_message``, ``batch_seconds``,
``status``: paths relative to the store) with its size in bytes, its stamp
(modification time in ns; on an object store the ETag, a string) and the
SHA-256 of its stored (encoded) bytes;
``checksum`` is the SHA-256 of the lines ``"<path> <sha256>\\n"`` in path
order, the batch's content checksum. ``time`` is when the batch completed.
"""

from __future__ import annotations

import datetime
import json
from typing import Mapping

import numpy as np
import zarr

from sweep.store.schema import (BatchResult, WrittenBatch, batch_chunks, chunk_layout, chunk_table, digest,
                                store_format, store_root)
from sweep.store.write import put_whole_chunk, writable_group, write_batch_data

__all__ = [
    "COMMIT_FORMAT", "parse_record", "write_commit", "BatchCommitter", "commit_batch", "write_batch",
]


#: Version of the commit record's JSON layout.
COMMIT_FORMAT = 1


def _batch_checksum(digests: Mapping[str, str]) -> str:
    """The content checksum of a batch: SHA-256 over ``"<path> <sha256>\\n"`` in path order."""
    text = "".join(f"{key} {digests[key]}\n" for key in sorted(digests))
    return "sha256:" + digest(text.encode())


def _commit_record(chunks: Mapping[str, list]) -> dict:
    """The commit record of a batch whose chunk table (:func:`sweep.store.schema.chunk_table`) is ``chunks``."""
    return {
        "format": COMMIT_FORMAT,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds"),
        "checksum": _batch_checksum({k: v[2] for k, v in chunks.items()}),
        "chunks": chunks,
    }


def parse_record(text: str, keys: list[str]) -> tuple[dict | None, str]:
    """A commit record's chunk table, or None and why it is unusable.

    Args:
        text: the stored JSON text.
        keys: the chunk paths the batch must have (from the store's metadata).

    Returns:
        ``(chunks, "")`` for a well-formed record naming exactly ``keys``
        whose batch checksum matches its chunks' checksums; ``(None, why)``
        otherwise.
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


def write_commit(group: zarr.Group, index: int, chunks: Mapping[str, list] | None = None,
                 records: zarr.Array | None = None) -> None:
    """The commit point of a batch: one chunk of ``batch_commit``, written atomically.

    Args:
        group: the store, open for writing.
        index: the batch.
        chunks: the batch's chunk table from its writer; None reads the
            chunks as they are now (:func:`sweep.store.schema.chunk_table`).
        records: the ``batch_commit`` array, if already looked up.

    Raises:
        FileNotFoundError: ``chunks`` is None and a chunk of the batch is missing.
        OSError: the store cannot be written.
    """
    if chunks is None:
        chunks = chunk_table(store_root(group), batch_chunks(group, index))
    records = records if records is not None else group["batch_commit"]
    text = json.dumps(_commit_record(chunks), sort_keys=True)
    put_whole_chunk(records, slice(index, index + 1), np.array([text], dtype=object))


class BatchCommitter:
    """The writer of one store's commit records (the driver's part of writing a batch).

    The store's chunk layout and its ``batch_commit`` array are looked up
    once, so that committing a batch costs one small write.

    Args:
        path: the store (or an open ``zarr.Group`` of it).
    """

    def __init__(self, path):
        self.group = writable_group(path)
        self.layout = chunk_layout(self.group)
        self.records = self.group["batch_commit"]
        self.shared_message = store_format(self.group) < 3

    def commit(self, written: WrittenBatch) -> None:
        """Commit a batch written by :func:`sweep.store.write.write_batch_data`: write its commit record.

        The record's chunk table comes from the writer; its chunk paths must
        be exactly those the store's metadata give the batch. In a store of
        format 2 the batch's message and time are written here first (they
        share chunks with other batches there, so only one process may write
        them).

        Raises:
            ValueError: the table names other chunks than the batch has.
            OSError: the store cannot be written.
        """
        keys = batch_chunks(self.group, written.index, self.layout)
        if sorted(written.chunks) != keys:
            raise ValueError(f"{store_root(self.group)}: batch {written.index} was written with "
                             f"other chunks ({sorted(written.chunks)[:3]}...) than the store has "
                             f"({keys[:3]}...)")
        if self.shared_message:
            self.group["batch_message"][written.index] = written.message
            self.group["batch_seconds"][written.index] = written.seconds
        write_commit(self.group, written.index, written.chunks, self.records)


def commit_batch(path, written: WrittenBatch) -> None:
    """Commit one batch written by :func:`sweep.store.write.write_batch_data` (see :class:`BatchCommitter`).

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
    group = writable_group(path)
    commit_batch(group, write_batch_data(group, batch_slice, result))
