"""Validating data read from YAML: types, allowed and required keys, "did you mean", located messages.

Each ``require_*`` returns the value when it is of the expected kind and
otherwise raises an :class:`~solver.errors.InputError` naming the file, key
path and line (from a :class:`~solver.models.yaml_load.Locator`), what was
expected and the valid choices.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from solver.errors import InputError, did_you_mean
from solver.models.yaml_load import Locator, Path_, format_path

__all__ = ["check_keys", "describe_value", "did_you_mean", "require_bool", "require_document", "require_int",
           "require_list", "require_mapping", "require_number", "require_str"]


# ---------------------------------------------------------------- validation
def describe_value(value: Any) -> str:
    """Short words for what a value is, for 'expected X, got Y' messages."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string '{value}'" if len(value) <= 40 else f"the string '{value[:37]}...'"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _fail(loc: Locator | None, message: str, path: Path_) -> InputError:
    if loc is not None:
        return loc.error(message, path)
    return InputError(message, path=format_path(path) or None)


def _quoted(names: Iterable) -> str:
    return ", ".join(str(n) for n in names)


def require_mapping(value: Any, path: Path_ = (), loc: Locator | None = None, *,
                    allow_none: bool = False, what: str = "a mapping (key: value lines)") -> dict:
    """Check that ``value`` is a mapping.

    Args:
        value: the value read from the file.
        path: its key path, for the message.
        loc: the file's locator (gives file and line).
        allow_none: accept an empty value and return ``{}`` (``Gravity:``).
        what: how to name the expectation in the message.

    Returns:
        The mapping (``{}`` for an allowed ``None``).

    Raises:
        InputError: ``value`` is not a mapping.
    """
    if value is None and allow_none:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(loc, f"expected {what}, got {describe_value(value)}", tuple(path))
    return value


def require_document(value: Any, loc: Locator, what: str) -> dict:
    """Check that a whole file is a mapping, without quoting what it holds.

    A file given by mistake (``/etc/passwd`` as a model) reads as one long
    string; its content must not end up in a message, so only its kind is
    named.

    Args:
        value: the file's data.
        loc: its locator.
        what: how to name the expectation, e.g. ``"a model file: a mapping
            of top-level keys (Title, Kind, ...)"``.

    Returns:
        The mapping.

    Raises:
        InputError: ``value`` is not a mapping.
    """
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str):
        got = "plain text, not 'key: value' lines; is this the right file?"
    elif isinstance(value, list):
        got = "a list"
    elif value is None:
        got = "nothing (the file is empty)"
    else:
        got = "a single value, not 'key: value' lines; is this the right file?"
    raise loc.error(f"expected {what}, got {got}")


def check_keys(mapping: Mapping, allowed: Iterable[str], required: Iterable[str] = (),
               path: Path_ = (), loc: Locator | None = None) -> None:
    """Check a mapping's keys against the allowed and required ones.

    Args:
        mapping: the mapping read from the file.
        allowed: every valid key (required ones included or not; both count).
        required: keys that must be present.
        path: the mapping's key path.
        loc: the file's locator.

    Raises:
        InputError: on the first unknown key (with the valid keys and the
            closest one), else naming every missing required key.
    """
    path = tuple(path)
    required = list(required)
    valid = list(dict.fromkeys(list(allowed) + required))
    for key in mapping:
        if key not in valid:
            message = f"unknown key '{key}'; valid keys: {_quoted(valid)}"
            guess = did_you_mean(str(key), valid)
            if guess:
                message += f"; did you mean '{guess}'?"
            raise _fail(loc, message, path + (key,))
    missing = [k for k in required if k not in mapping]
    if missing:
        names = ", ".join(f"'{k}'" for k in missing)
        plural = "s" if len(missing) > 1 else ""
        raise _fail(loc, f"missing required key{plural} {names}; valid keys: {_quoted(valid)}",
                    path)


def require_number(value: Any, path: Path_ = (), loc: Locator | None = None, *,
                   positive: bool = False, finite: bool = True) -> float:
    """Check that ``value`` is a real number (not a boolean) and return it as float.

    Args:
        value: the value read from the file.
        path: its key path.
        loc: the file's locator.
        positive: require ``value > 0``.
        finite: refuse ``.inf`` and ``.nan``.

    Returns:
        ``float(value)``.

    Raises:
        InputError: not a number, not finite, or not positive when asked.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(loc, f"expected a number, got {describe_value(value)}", tuple(path))
    value = float(value)
    if finite and not math.isfinite(value):
        raise _fail(loc, f"expected a finite number, got {value}", tuple(path))
    if positive and not value > 0:
        raise _fail(loc, f"expected a positive number, got {value:g}", tuple(path))
    return value


def require_int(value: Any, path: Path_ = (), loc: Locator | None = None, *,
                minimum: int | None = None) -> int:
    """Check that ``value`` is a whole number (``1e3`` counts) and return it as int.

    Args:
        value: the value read from the file.
        path: its key path.
        loc: the file's locator.
        minimum: smallest allowed value, if any.

    Returns:
        ``int(value)``.

    Raises:
        InputError: not a whole number, or below ``minimum``.
    """
    ok = not isinstance(value, bool) and (
        isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
    if not ok:
        raise _fail(loc, f"expected a whole number, got {describe_value(value)}", tuple(path))
    value = int(value)
    if minimum is not None and value < minimum:
        raise _fail(loc, f"expected a whole number >= {minimum}, got {value}", tuple(path))
    return value


def require_list(value: Any, path: Path_ = (), loc: Locator | None = None, *,
                 nonempty: bool = False, length: int | None = None,
                 what: str = "a list") -> list:
    """Check that ``value`` is a list, optionally non-empty or of a given length.

    Args:
        value: the value read from the file.
        path: its key path.
        loc: the file's locator.
        nonempty: refuse ``[]``.
        length: exact length required, if any.
        what: how to name the expectation (e.g. ``"[start, stop, n]"``).

    Returns:
        The list.

    Raises:
        InputError: not a list, empty when refused, or of the wrong length.
    """
    if not isinstance(value, list):
        raise _fail(loc, f"expected {what}, got {describe_value(value)}", tuple(path))
    if length is not None and len(value) != length:
        raise _fail(loc, f"expected {what} ({length} items), got {len(value)} item"
                         f"{'' if len(value) == 1 else 's'}", tuple(path))
    if nonempty and not value:
        raise _fail(loc, f"expected {what} with at least one item, got an empty list", tuple(path))
    return value


def require_bool(value: Any, path: Path_ = (), loc: Locator | None = None) -> bool:
    """Check that ``value`` is a YAML boolean (``true`` or ``false``).

    Args:
        value: the value read from the file.
        path: its key path.
        loc: the file's locator.

    Returns:
        The boolean.

    Raises:
        InputError: anything else (``yes``, ``1``, ``"true"``: YAML 1.2 reads them as
            strings or numbers).
    """
    if not isinstance(value, bool):
        raise _fail(loc, f"expected true or false, got {describe_value(value)}", tuple(path))
    return value


def require_str(value: Any, path: Path_ = (), loc: Locator | None = None, *,
                choices: Iterable[str] | None = None) -> str:
    """Check that ``value`` is a non-empty string, optionally one of ``choices``.

    Args:
        value: the value read from the file.
        path: its key path.
        loc: the file's locator.
        choices: the valid values, if restricted.

    Returns:
        The string.

    Raises:
        InputError: not a string, empty, or not among ``choices`` (the
            message lists them and the closest one).
    """
    choices = list(choices) if choices is not None else None
    if not isinstance(value, str) or not value.strip():
        expected = f"one of {_quoted(choices)}" if choices else "a non-empty string"
        raise _fail(loc, f"expected {expected}, got {describe_value(value)}", tuple(path))
    if choices is not None and value not in choices:
        message = f"unknown value '{value}'; valid choices: {_quoted(choices)}"
        guess = did_you_mean(value, choices)
        if guess:
            message += f"; did you mean '{guess}'?"
        raise _fail(loc, message, tuple(path))
    return value
