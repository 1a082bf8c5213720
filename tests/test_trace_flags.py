"""solver.trace_flags: a per-thread switch read while tracing, set for a block."""

import threading

import pytest

from solver.dae.trace_flags import TraceFlag


def test_a_flag_is_set_inside_its_block_only_and_restored_after_an_exception():
    flag = TraceFlag()
    assert not flag.on
    with flag.set():
        assert flag.on
        with flag.set(False):
            assert not flag.on
        assert flag.on
    assert not flag.on
    with pytest.raises(RuntimeError):
        with flag.set():
            raise RuntimeError("inside")
    assert not flag.on


def test_a_flag_set_in_one_thread_is_off_in_another():
    flag = TraceFlag()
    seen = []
    with flag.set():
        worker = threading.Thread(target=lambda: seen.append(flag.on))
        worker.start()
        worker.join()
        assert flag.on
    assert seen == [False]
