"""Per-thread switches that change how a function is traced, set for a block.

A traced program is built from Python, so a setting that only matters while
tracing (use XLA loops instead of LAPACK calls; give a run's carries a
tangent from the start) can be a flag read during the trace instead of an
argument threaded through every call.
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["TraceFlag"]


class TraceFlag:
    """A per-thread boolean, off unless a ``with flag.set(...)`` block is running in this thread."""

    def __init__(self):
        self._local = threading.local()

    @property
    def on(self) -> bool:
        """Whether the flag is set in this thread."""
        return getattr(self._local, "on", False)

    @contextlib.contextmanager
    def set(self, enabled: bool = True):
        """Within the block, the flag is ``enabled`` in this thread (restored after, also on an exception)."""
        before = self.on
        self._local.on = enabled
        try:
            yield
        finally:
            self._local.on = before
