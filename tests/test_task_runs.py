"""How a sweep's batches are grouped into Dask tasks (``sweep.run.task_runs``): guided self-scheduling.

A task runs consecutive batches; it takes at most ``share`` of the batches
left per worker thread and at most ``most``, so tasks shrink to one batch as
the sweep ends, and never span a gap (a resumed sweep's pending batches) or a
chunk of commit records.
"""

import numpy as np
import pytest

from sweep.run import TASK_MOST_BATCHES, TASK_SHARE, task_runs


def check_runs(batches, runs, most, boundary):
    assert [b for run in runs for b in run] == batches                     # all, in order, once
    for run in runs:
        assert 1 <= len(run) <= most
        assert run == list(range(run[0], run[0] + len(run)))              # consecutive
        if boundary > 1:
            assert run[0] // boundary == run[-1] // boundary                # within one chunk of records


@pytest.mark.parametrize("seed", range(20))
def test_runs_cover_the_batches_in_order_without_crossing_gaps_or_record_chunks(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    batches = sorted(rng.choice(4000, n, replace=False).tolist()) if seed % 2 else list(range(n))
    threads = int(rng.integers(1, 200))
    boundary = int(rng.choice([1, 4, 32]))
    runs = task_runs(batches, threads, boundary=boundary)
    check_runs(batches, runs, TASK_MOST_BATCHES, boundary)


def test_tasks_take_a_share_of_the_batches_left_per_thread_and_shrink_to_one():
    runs = task_runs(list(range(200)), 1)
    sizes = [len(r) for r in runs]
    assert TASK_SHARE == 1 / 8
    assert sizes[:3] == [25, 21, 19]                                           # 200/8, 175/8, 154/8
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1
    assert len(runs) == 36                                                     # 200 batches in 36 tasks
    # The last batches, fewer than 1/share per thread, go one a task.
    left = 200 - np.cumsum([0] + sizes[:-1])
    assert all(s == 1 for s, n in zip(sizes, left) if n * TASK_SHARE < 2)


def test_a_short_sweep_and_an_unknown_cluster_get_one_batch_a_task():
    assert task_runs(list(range(12)), 2) == [[i] for i in range(12)]          # 12 batches, 2 threads
    assert task_runs(list(range(500)), 0) == [[i] for i in range(500)]        # no worker known yet


def test_the_most_batches_a_task_runs_is_the_chunk_of_commit_records():
    from sweep.store import COMMIT_GROUP

    assert TASK_MOST_BATCHES == COMMIT_GROUP
    runs = task_runs(list(range(10, 1000)), 1, boundary=COMMIT_GROUP)
    assert max(len(r) for r in runs) == COMMIT_GROUP and runs[0] == list(range(10, 32))
