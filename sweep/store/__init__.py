"""Zarr store of a sweep: template, per-batch region writes, commit records, checks.

One concern per module:

- :mod:`sweep.store.schema`: the layout, the format versions, the result
  types (:class:`BatchResult`, :class:`Schema`, :class:`WrittenBatch`) and
  the chunk files of each batch;
- :mod:`sweep.store.template`: a new store's template, and an existing one
  checked and planned for a run (:func:`plan_store`, :data:`MODES`);
- :mod:`sweep.store.write`: a batch's chunks, written by the worker that
  computed it (:func:`write_batch_data`);
- :mod:`sweep.store.commit`: commit records, written by the driver alone
  (:class:`BatchCommitter`, :func:`commit_batch`);
- :mod:`sweep.store.check`: every batch against its commit record: done,
  pending or damaged (:func:`check_store`);
- :mod:`sweep.store.report`: the text of ``mechsweep status``;
- :mod:`sweep.store.tree`: opening a store for analysis (:func:`open_store`),
  a structural sweep's root as an ``xarray.DataTree``.

A batch is written in two places: its worker writes its chunks and sends
back only their checksums; the driver writes its commit record. A batch
counts as done only once its commit record is written and its chunks match
it, so a driver or worker killed at any moment leaves every batch either
committed with all its chunks, or not committed and run again by a resume.

Every name is importable from ``sweep.store`` as well.
"""

from solver.module_aliases import lazy_names

# Each name loads its module on first use: ``mechsweep status`` reads commit
# records and chunks without waiting for xarray and Dask, which only the
# template and the analysis need.
__getattr__, __dir__ = lazy_names(__name__, {
    "sweep.store.check": ("CHECK_LEVELS", "StoreCheck", "check_store", "failed_batches", "failed_points",
                          "pending_batches", "read_status"),
    "sweep.store.commit": ("BatchCommitter", "commit_batch", "write_batch"),
    "sweep.store.report": ("failure_groups", "status_report"),
    "sweep.store.schema": ("COMMIT_FORMAT", "COMMIT_GROUP", "FAILURE_ARRAYS", "RESERVED", "STORE_FORMAT",
                           "BatchResult", "Schema", "WrittenBatch", "batch_slices", "commit_chunk_length",
                           "effective_batch", "store_attrs", "store_format"),
    "sweep.store.template": ("MODES", "create_template", "plan_store", "prepare_store", "store_token",
                             "template_ready", "variable_length_text", "write_dataset", "zarr_ready"),
    "sweep.store.tree": ("ROOT_MARK", "is_structural_store", "open_store", "open_tree", "root_attrs"),
    "sweep.store.write": ("failure_columns", "write_batch_data", "writer_group"),
})

__all__ = [
    "BatchResult", "Schema", "MODES", "create_template", "prepare_store", "plan_store",
    "write_batch", "write_batch_data", "commit_batch", "BatchCommitter", "WrittenBatch",
    "read_status", "pending_batches", "failed_points", "failed_batches", "open_store",
    "store_attrs", "batch_slices", "effective_batch", "status_report", "check_store", "StoreCheck",
    "CHECK_LEVELS", "FAILURE_ARRAYS", "failure_columns", "failure_groups",
    "RESERVED", "STORE_FORMAT", "COMMIT_GROUP", "COMMIT_FORMAT", "variable_length_text", "zarr_ready", "write_dataset",
    "store_format", "writer_group", "ROOT_MARK", "root_attrs", "is_structural_store", "open_tree",
    "store_token", "template_ready", "commit_chunk_length",
]
