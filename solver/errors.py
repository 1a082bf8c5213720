"""Errors about user input that name the place and the fix.

Every message a user sees for bad input (YAML files, expressions, parameters,
impossible designs) goes through :class:`InputError`, so that the CLI can print
it without a traceback and exit with code 2.

The input limits (docs/reference/input-limits.md) share :func:`limit` (a limit's
value, from its constant or the environment variable ``MECHSWEEP_<NAME>``)
and the wording of their messages: what the input would need, the limit, and
how to change it.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from pathlib import Path

__all__ = ["InputError", "limit", "limit_env", "switch", "SWITCH_ON", "SWITCH_OFF", "how_to_raise", "format_bytes",
           "did_you_mean", "size_limit_message", "check_regular_file", "LIMIT_ENV_PREFIX", "MAX_OUTPUT_BYTES",
           "MAX_STORE_BYTES", "MAX_YAML_BYTES"]


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


# ------------------------------------------------------------------ limits
# Every input limit of the package (YAML size and nesting, output sizes, grid
# sizes...) is a module-level constant next to the code it protects; its
# value can be changed without editing code through the environment variable
# ``MECHSWEEP_<NAME>`` (``MECHSWEEP_MAX_YAML_DEPTH=200``), read when the limit
# is checked so that a sweep's workers see the driver's setting too.
LIMIT_ENV_PREFIX = "MECHSWEEP_"

_UNITS = {"": 1, "k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "t": 1000 ** 4,
          "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def limit_env(name: str) -> str:
    """The environment variable that overrides the limit ``name`` (``MECHSWEEP_NAME``)."""
    return LIMIT_ENV_PREFIX + name


def limit(name: str, default: int) -> int:
    """The value of an input limit: ``default``, unless its variable is set.

    Args:
        name: the limit's constant name, e.g. ``"MAX_YAML_DEPTH"``.
        default: the constant's value.

    Returns:
        The positive whole number set in ``MECHSWEEP_<name>`` (a plain number,
        ``1e6``, or with a unit: ``8GiB``, ``500MB``, ``2k``), else ``default``.

    Raises:
        InputError: the variable is set to something else.
    """
    env = limit_env(name)
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:[eE][+]?[0-9]+)?)\s*([A-Za-z]*)", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise InputError(f"{env}={text!r}: expected a positive whole number, optionally with a "
                         f"unit (e.g. 8GiB, 500MB, 2k)")
    value = float(match.group(1)) * _UNITS[unit]
    if not 1 <= value < 2 ** 63:
        raise InputError(f"{env}={text!r}: expected a positive whole number")
    return int(value)


#: How an on/off switch in the environment is spelled (any case, spaces around it ignored).
SWITCH_ON = ("on", "1", "true", "yes")
SWITCH_OFF = ("off", "0", "false", "no")


def switch(env: str, default: bool = True) -> bool:
    """Whether the on/off switch in the environment variable ``env`` is on.

    Every ``MECHSWEEP_*`` switch is read here, so all take the same spellings
    (:data:`SWITCH_ON`, :data:`SWITCH_OFF`).

    Args:
        env: the variable's name, e.g. ``"MECHSWEEP_PROGRAM_STORE"``.
        default: the answer where the variable is unset or empty.

    Returns:
        True for ``on``, ``1``, ``true``, ``yes``; False for ``off``, ``0``,
        ``false``, ``no``; ``default`` where unset.

    Raises:
        InputError: the variable holds anything else (the message lists the
            valid values).
    """
    text = os.environ.get(env, "")
    value = text.strip().lower()
    if not value:
        return default
    if value in SWITCH_ON:
        return True
    if value in SWITCH_OFF:
        return False
    raise InputError(f"{env}={text!r}: use on or off ({', '.join(SWITCH_ON + SWITCH_OFF)}), or unset it")


def how_to_raise(name: str) -> str:
    """``"set MECHSWEEP_NAME to raise it"``, the end of every limit message."""
    return f"set the environment variable {limit_env(name)} to raise it"


def format_bytes(n: float) -> str:
    """``8053063680`` -> ``"7.5 GiB"`` (binary units, 3 significant digits)."""
    if abs(n) < 1024:
        return f"{n:.0f} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        # Below 999.5, not 1024: three digits of 1000-1023 would read "1e+03".
        if abs(n) < 999.5:
            return f"{n:.3g} {unit}"
    return f"{n / 1024:.3g} PiB"


def did_you_mean(word: str, choices) -> str | None:
    """The choice closest to ``word`` (ignoring case), or ``None`` if none is close.

    Args:
        word: what was written.
        choices: the valid words.

    Returns:
        The closest valid word as it is spelled in ``choices``, or None.
    """
    choices = [str(c) for c in choices]
    lowered = {c.lower(): c for c in choices}
    match = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


# Output arrays are float64: one number is 8 bytes.
MAX_OUTPUT_BYTES = 4 * 2 ** 30
"""Most memory for the outputs of one run, or of one sweep batch (4 GiB)."""
MAX_STORE_BYTES = 2 ** 40
"""Largest sweep store (its outputs on disk, uncompressed: 1 TiB)."""
MAX_YAML_BYTES = 64 * 2 ** 20
"""Largest YAML file read (bytes); the project's files are a few KiB."""


def check_regular_file(path: Path, file: str | None = None) -> None:
    """Refuse what cannot be a YAML input file, before reading it.

    Args:
        path: the path given.
        file: its name in messages (default ``str(path)``).

    Raises:
        InputError: ``path`` does not exist, is a folder, is not a regular
            file (``/dev/null``, a pipe: reading one could block or give
            nothing), or is larger than :data:`MAX_YAML_BYTES`.
    """
    file = file or str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError("file not found", file=file) from None
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=file) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError("expected a YAML file, found a folder", file=file)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"expected a YAML file, found {_file_kind(info.st_mode)}", file=file)
    cap = limit("MAX_YAML_BYTES", MAX_YAML_BYTES)
    if info.st_size > cap:
        raise InputError(f"the file has {format_bytes(info.st_size)}, more than the limit of "
                         f"{format_bytes(cap)} for a YAML input (MAX_YAML_BYTES); "
                         f"{how_to_raise('MAX_YAML_BYTES')}", file=file)


def _file_kind(mode: int) -> str:
    """Words for a file that is not regular (for messages)."""
    if stat.S_ISCHR(mode):
        return "a character device (such as /dev/null), not a regular file"
    if stat.S_ISBLK(mode):
        return "a block device, not a regular file"
    if stat.S_ISFIFO(mode):
        return "a named pipe, not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    return "something that is not a regular file"


def size_limit_message(name: str, default: int, need: float, what: str, fix: str) -> str | None:
    """The message for a size over its limit, or ``None`` when it fits.

    Args:
        name: the limit's name (``"MAX_OUTPUT_BYTES"``).
        default: its constant's value.
        need: the estimated bytes.
        what: the setting and how the estimate is made, e.g. ``"ProblemData.samples
            = 1000000000 output times x 7 values (8 bytes each)"``.
        fix: what to lower, e.g. ``"lower samples"``.

    Returns:
        ``"WHAT would need 52.2 GiB; the limit is 4 GiB (NAME); FIX, or set
        the environment variable MECHSWEEP_NAME to raise it"``, or ``None``.

    Raises:
        InputError: the limit's environment variable is malformed.
    """
    cap = limit(name, default)
    if need <= cap:
        return None
    return (f"{what} would need {format_bytes(need)}; the limit is {format_bytes(cap)} ({name}); "
            f"{fix}, or {how_to_raise(name)}")
