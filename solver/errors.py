"""Errors about user input that name the place and the fix.

Every message a user sees for bad input (YAML files, expressions, parameters,
impossible designs) goes through :class:`InputError`, so that the CLI can print
it without a traceback and exit with code 2.
"""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad user input, with its location.

    Args:
        message: what is wrong and what would be right (valid choices).
        file: the file it came from, if any.
        path: the key path inside the file, e.g. ``PartData.Springs.AB``.
        line: 1-based line number, where known.

    The string form is ``FILE:LINE: PATH: MESSAGE`` with absent parts left out.
    """

    def __init__(self, message: str, file: str | None = None, path: str | None = None,
                 line: int | None = None):
        self.message, self.file, self.path, self.line = message, file, path, line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        elif self.line:
            where = f"line {self.line}: "
        if self.path:
            where += f"{self.path}: "
        return where + self.message

    def located(self, file: str | None = None, path: str | None = None,
                line: int | None = None) -> "InputError":
        """A copy with missing location parts filled in (existing ones kept)."""
        return InputError(self.message, self.file or file, self.path or path, self.line or line)
