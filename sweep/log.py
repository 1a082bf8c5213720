"""The ``mechsweep`` logger: where the library's progress lines and notes go, and the CLI's set-up of it.

The library writes nothing by itself: progress and notes are ``INFO``
records of ``logging.getLogger("mechsweep")`` and its children
(``mechsweep.sweep``, ``mechsweep.design``, ``mechsweep.structural``,
``mechsweep.cli``), which has a :class:`logging.NullHandler`.  A program that
wants them configures logging as usual, e.g.::

    import logging
    logging.basicConfig(level=logging.INFO)

The ``mechsweep`` command line installs :func:`cli_logging`: one line per
record on stderr, ``[mechsweep] message`` (or the bare message for records
logged with ``extra=PLAIN``, the indented continuation lines of a report).
"""

from __future__ import annotations

import contextlib
import logging
import sys

__all__ = ["LOGGER", "PLAIN", "get_logger", "cli_logging", "CliFormatter", "StderrHandler"]

#: The name of the package's logger; children are ``mechsweep.<part>``.
LOGGER = "mechsweep"

#: ``extra=`` of a record the command line writes without the ``[mechsweep]`` prefix.
PLAIN = {"mechsweep_plain": True}

logging.getLogger(LOGGER).addHandler(logging.NullHandler())


def get_logger(part: str | None = None) -> logging.Logger:
    """The ``mechsweep`` logger, or its child ``mechsweep.<part>``.

    Args:
        part: the child's name (``"sweep"``, ``"design"``...), or None.

    Returns:
        The :class:`logging.Logger`.
    """
    return logging.getLogger(LOGGER if not part else f"{LOGGER}.{part}")


class StderrHandler(logging.StreamHandler):
    """A stream handler on whatever ``sys.stderr`` is when a record is written.

    A handler bound to the stream at set-up would keep writing to a stream
    that was replaced since (a test's captured stderr, a redirect).
    """

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        # StreamHandler.__init__ sets it; the current sys.stderr is always used.
        pass


class CliFormatter(logging.Formatter):
    """``[mechsweep] message``, or the bare message for records with ``extra=PLAIN``."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if getattr(record, "mechsweep_plain", False) else f"[mechsweep] {text}"


@contextlib.contextmanager
def cli_logging(level: int = logging.INFO):
    """Show the ``mechsweep`` records of ``level`` and above on stderr while the block runs.

    Records do not propagate to the root logger meanwhile (a program that
    configured logging itself would print them twice); the logger's
    previous level and propagation are restored afterwards.

    Args:
        level: ``logging.INFO`` (progress and notes), ``logging.DEBUG``
            (``--verbose``) or ``logging.WARNING`` (``--quiet``).

    Yields:
        The handler installed.
    """
    logger = logging.getLogger(LOGGER)
    handler = StderrHandler()
    handler.setFormatter(CliFormatter("%(message)s"))
    handler.setLevel(level)
    before = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]
