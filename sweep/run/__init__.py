"""Run a sweep on Dask: tasks of consecutive batches, written by their workers, committed by the driver.

The runtime knows nothing about the solver but its status codes. It is given a
*batch function*, a picklable module-level callable ::

    batch_fn(points: dict[str, np.ndarray (B,)], context) -> BatchResult

and a *context* carrying what stays fixed across points (model, outputs, time
grid) plus, as attributes, the store :class:`~sweep.store.Schema` (``schema``)
and the dataset attributes (``attrs``) unless those are passed explicitly.

Flow: prepare the store (template, or resume / retry / overwrite), start or
connect to a Dask cluster, submit the batches in tasks of one or several
consecutive batches (:func:`run_and_write_batches`; several while many batches
are left per worker thread, one each towards the end: :func:`task_runs`).
Each task computes its batches one after another, writes each batch's chunks
into the store itself (batches are chunk-aligned, so no two tasks write the
same file) and returns only the status codes and the chunks' checksums. The
driver, the only writer of commit records, commits a task's batches as it
completes (one write where their records share a chunk): the data never pass
through it, and a batch counts as done only once its commit record is
written, after its data and its ``status`` (see :mod:`sweep.store`). On an existing store every committed batch is first
checked against its commit record (checksums of all its chunks), and batches
that fail run again. The workers must therefore see the store: a file system
they share with the driver, or object storage.

Failures never end a sweep (status codes from :mod:`solver.status`): an
exception in the batch function becomes status ``error`` for its points with
the message kept in ``batch_message``; a task whose workers died too often
(``KilledWorker``) becomes ``worker_lost``, its message saying when a nanny
stopped the worker for memory and which ``Batch`` to try; a result that does not match the
schema becomes ``error``. Tasks cancelled because the scheduler went away are
left pending for a later resume.

Workers start each program's batches on a quick build while one worker per
host compiles the optimised build (:mod:`solver.tiered`, turned on by
:class:`JaxSetup`); after the last batch the driver waits for a build still
compiling, saying so (:func:`finish_worker_builds`).

One concern per module:

- :mod:`sweep.run.worker`: JAX set-up on the workers, the task of a run of
  batches (:func:`run_and_write_batches`, each batch by
  :func:`run_and_write_batch`) and the worker's checks (:func:`check_worker`);
- :mod:`sweep.run.cluster`: cluster files, clusters and clients
  (:func:`load_cluster_config`, :func:`dask_client`), the watch for a
  cluster without workers, and the wait for the workers' optimised builds;
- :mod:`sweep.run.driver`: :func:`run_sweep`, the tasks' sizes
  (:func:`task_runs`), committing batches as they complete, the summary and
  the progress lines.

Every name is importable from ``sweep.run`` as well.
"""

from sweep.run.cluster import (CLUSTER_KEYS, MEMORY_RESTART_EVENT, WORKER_TIMEOUT, WorkerWatch, check_dask_target,
                               dask_client, finish_worker_builds, load_cluster_config, local_cores, make_cluster,
                               memory_kills, say_dashboard, start_client, worker_lost_message, worker_threads)
from sweep.run.driver import (TASK_MOST_BATCHES, TASK_SHARE, ProgressLog, SweepSummary, format_seconds, interrupt,
                              run_sweep, task_runs)
from sweep.run.worker import (CACHE_MIN_COMPILE_SECONDS, JaxSetup, Unfit, WriteFailed, check_result, check_worker,
                              checked_or_failed, configure_jax, default_jax_cache_dir, keep_freed_memory,
                              package_version, pin_to_core, run_and_write_batch, run_and_write_batches, run_batch_task,
                              tiered_report)
from sweep.store import BatchResult

__all__ = [
    "BatchResult", "SweepSummary", "run_sweep", "run_batch_task", "check_result",
    "configure_jax", "JaxSetup", "load_cluster_config", "make_cluster", "default_jax_cache_dir",
    "check_dask_target", "dask_client",
    "CLUSTER_KEYS", "WORKER_TIMEOUT", "WorkerWatch", "local_cores", "say_dashboard", "start_client",
    "worker_threads", "ProgressLog", "format_seconds", "interrupt", "CACHE_MIN_COMPILE_SECONDS", "Unfit",
    "WriteFailed", "check_worker", "checked_or_failed", "package_version", "pin_to_core", "run_and_write_batch",
    "MEMORY_RESTART_EVENT", "memory_kills", "worker_lost_message", "run_and_write_batches", "task_runs",
    "TASK_MOST_BATCHES", "TASK_SHARE", "keep_freed_memory", "finish_worker_builds", "tiered_report",
]
