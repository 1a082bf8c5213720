"""The benchmarks' report: figures printed as they come and, with ``--out``,
saved under the command line that produced them."""

from __future__ import annotations

import sys
from pathlib import Path


class Report:
    """Collects the printed lines of one benchmark run."""

    def __init__(self):
        self.lines: list[str] = []

    def say(self, text: str = "") -> None:
        """Print a line now and keep it for :meth:`save`."""
        print(text, flush=True)
        self.lines.append(text)

    def save(self, out: str | None, append: bool = False) -> None:
        """Write the lines to ``out`` (if given), headed by the command that ran.

        Args:
            out: the result file, or None to write nothing.
            append: add the run after what the file holds (runs side by
                side, say in two builds) instead of replacing it.
        """
        if not out:
            return
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        script = Path(sys.argv[0])
        command = "$ .venv/bin/python workflows/benchmarks/" + " ".join([script.name] + sys.argv[1:])
        with path.open("a" if append else "w") as f:
            f.write(command + "\n\n" + "\n".join(self.lines) + "\n" + ("\n" if append else ""))
