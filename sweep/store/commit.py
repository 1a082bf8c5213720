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
order, the batch's content checksum. ``time`` is when the batch's chunks were
all written. The worker that wrote the batch builds the record
(:func:`~sweep.store.schema.commit_record`); the driver checks its paths and
writes it.

The records of :data:`~sweep.store.schema.COMMIT_GROUP` consecutive batches
share a chunk of ``batch_commit`` (store format 4; one chunk per batch
before): the driver commits the batches of a task with one write of that
chunk (:func:`write_commits`), atomic as every chunk write is.
"""

from __future__ import annotations

import json
from typing import Mapping

import numpy as np
import zarr

from sweep.store.schema import (COMMIT_FORMAT, BatchResult, WrittenBatch, batch_checksum, batch_chunks, chunk_layout,
                                chunk_table, commit_record, store_format, store_root)
from sweep.store.write import put_whole_chunk, writable_group, write_batch_data

__all__ = [
    "COMMIT_FORMAT", "parse_record", "write_commit", "write_commits", "BatchCommitter", "commit_batch", "write_batch",
]


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
    if record.get("checksum") != batch_checksum({k: v[2] for k, v in chunks.items()}):
        return None, "commit record's batch checksum does not match its chunk checksums"
    return chunks, ""


def write_commit(group: zarr.Group, index: int, chunks: Mapping[str, list] | None = None,
                 records: zarr.Array | None = None) -> None:
    """The commit point of one batch: its record in ``batch_commit``, written atomically (see :func:`write_commits`).

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
    write_commits(group, {index: commit_record(chunks)}, records)


def write_commits(group: zarr.Group, texts: Mapping[int, str],
                  records: zarr.Array | None = None, known: dict | None = None) -> None:
    """The commit point of batches: their records written, one whole chunk of ``batch_commit`` at a time.

    A chunk holds the records of consecutive batches (:data:`~sweep.store.schema.COMMIT_GROUP` in
    a store of format 4, one before); each chunk the batches touch is written
    whole, once, atomically (a file renamed into place, an object put), with
    the records of its other batches as they were.

    Args:
        group: the store, open for writing.
        texts: batch -> its commit record (:func:`~sweep.store.schema.commit_record`).
        records: the ``batch_commit`` array, if already looked up.
        known: chunk index -> the records the chunk holds, kept between calls
            by a caller that is the store's only committer (read from the store
            where missing, updated after each write).

    Raises:
        OSError: the store cannot be written.
    """
    records = records if records is not None else group["batch_commit"]
    known = known if known is not None else {}
    size, total = records.chunks[0], records.shape[0]
    by_chunk: dict[int, dict[int, str]] = {}
    for index, text in texts.items():
        by_chunk.setdefault(index // size, {})[index] = text
    for c, in_chunk in by_chunk.items():
        start, stop = c * size, min((c + 1) * size, total)
        if len(in_chunk) == stop - start:
            current = [""] * (stop - start)
        else:
            current = list(known[c]) if c in known else _read_chunk(records, start, stop)
        for index, text in in_chunk.items():
            current[index - start] = text
        put_whole_chunk(records, slice(start, stop), np.array(current, dtype=object))
        known[c] = current


def _read_chunk(records: zarr.Array, start: int, stop: int) -> list[str]:
    """The records of one chunk of ``batch_commit``; all empty where it does not decode.

    A check finds every batch of an undecodable chunk damaged (its record
    unreadable), so they all run again: until each is committed, it is pending.
    """
    try:
        return [str(t) for t in records[start:stop]]
    except Exception:  # noqa: BLE001 - codecs raise many types for bad bytes
        return [""] * (stop - start)


class BatchCommitter:
    """The writer of one store's commit records (the driver's part of writing a batch).

    The store's chunk layout and its ``batch_commit`` array are looked up
    once, and the records of each chunk of ``batch_commit`` kept once read
    or written, so that committing a task's batches costs one small write:
    the committer must be the store's only one while it is used.

    Args:
        path: the store (or an open ``zarr.Group`` of it).
    """

    def __init__(self, path):
        self.group = writable_group(path)
        self.layout = chunk_layout(self.group)
        self.records = self.group["batch_commit"]
        self.shared_message = store_format(self.group) < 3
        self._known: dict = {}

    def commit(self, written: WrittenBatch) -> None:
        """Commit a batch written by :func:`sweep.store.write.write_batch_data` (see :meth:`commit_all`)."""
        self.commit_all([written])

    def commit_all(self, batches: list[WrittenBatch]) -> None:
        """Commit batches written by :func:`sweep.store.write.write_batch_data`: write their commit records.

        Each record and its chunk table come from the batch's writer; the
        table's paths must be exactly those the store's metadata give the
        batch. In a
        store of format 2 the batches' messages and times are written here
        first (they share chunks with other batches there, so only one
        process may write them).  The records sharing a chunk of
        ``batch_commit`` are written together (:func:`write_commits`).

        Raises:
            ValueError: a table names other chunks than its batch has (nothing is committed).
            OSError: the store cannot be written.
        """
        for written in batches:
            keys = batch_chunks(self.group, written.index, self.layout)
            if sorted(written.chunks) != keys:
                raise ValueError(f"{store_root(self.group)}: batch {written.index} was written with "
                                 f"other chunks ({sorted(written.chunks)[:3]}...) than the store has "
                                 f"({keys[:3]}...)")
        if self.shared_message:
            for written in batches:
                self.group["batch_message"][written.index] = written.message
                self.group["batch_seconds"][written.index] = written.seconds
        write_commits(self.group, {w.index: w.record or commit_record(w.chunks) for w in batches}, self.records,
                      self._known)


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
