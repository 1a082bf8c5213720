"""Counting how many calls run at once, for the tests of the process-wide solve lock."""

import threading
import time


class OverlapCounter:
    """Wraps functions so that ``most`` is the largest number of their calls ever running at once.

    Each wrapped call pauses ``pause`` seconds before it starts, long enough
    for a second thread to arrive while the first is inside.
    """

    def __init__(self, pause: float = 0.2):
        self.pause, self.most = pause, 0
        self._running, self._guard = 0, threading.Lock()

    def wrap(self, fn):
        """``fn``, counted."""

        def counted(*args, **kwargs):
            with self._guard:
                self._running += 1
                self.most = max(self.most, self._running)
            time.sleep(self.pause)
            try:
                return fn(*args, **kwargs)
            finally:
                with self._guard:
                    self._running -= 1

        return counted


def in_two_threads(work) -> list:
    """``[work(), work()]``, each called in a thread of its own, both started before either is joined."""
    results = [None, None]

    def run(i):
        results[i] = work()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results
