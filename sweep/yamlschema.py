"""Declared schemas of YAML input files: field types worded as the project words them, and the adapter to InputError.

A file kind's schema (:mod:`sweep.file_schemas`) is a pydantic model per
mapping of the file (a :class:`Section`) whose fields use the types made
here.  Each type checks a value with the project's own checks
(:mod:`solver.models.yamlio`'s ``require_*``), so that a message reads as
it always has: "expected a whole number >= 1, got 0", "unknown key 'Batches';
valid keys: ...; did you mean 'Batch'?", "unknown value 'halton'; valid
choices: ...".  Pydantic's own coercions and messages are never used.

:func:`validate` runs a schema on data read by
:func:`solver.models.yamlio.load_yaml` and turns the first error into an
:class:`~solver.errors.InputError` naming the file, the key path and the
line (from the reader's :class:`~solver.models.yamlio.Locator`).  Pydantic
reports errors in declaration order, depth first, and the keys of a mapping
in file order: the first one is the one a reader going down the file meets
first, as the imperative checks before reported.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, ClassVar, Mapping

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError, \
    WrapValidator, model_validator
from pydantic_core import PydanticCustomError

from solver.errors import InputError
from solver.models.yamlio import (Locator, check_keys, describe_value, require_document, require_int,
                                  require_list, require_mapping, require_number, require_str)

__all__ = ["Section", "validate", "problem", "worded", "Str", "Int", "Number", "Mapping_", "Table",
           "List", "Optional_", "Key", "known_keys"]

#: The error type of every schema error worded here.
ERROR_TYPE = "mechsweep"


def problem(message: str, sub: tuple = ()) -> PydanticCustomError:
    """A schema error with the project's wording.

    Args:
        message: the whole message, as the user reads it.
        sub: the key path below the value being checked where the problem
            is (an unknown key, say), ``()`` for the value itself.

    Returns:
        The error to raise from a validator.
    """
    return PydanticCustomError(ERROR_TYPE, "{message}", {"message": message, "sub": tuple(sub)})


def worded(check: Callable, **options) -> Callable[[Any], Any]:
    """``check(value, **options)`` as a validator: its InputError becomes a schema error.

    Args:
        check: a ``require_*`` function of :mod:`solver.models.yamlio`, or
            any function of the value that raises InputError (located by
            its message only).
        options: its keyword arguments.

    Returns:
        A function of the value returning what ``check`` returns.
    """
    def run(value: Any) -> Any:
        try:
            return check(value, **options)
        except InputError as err:
            raise problem(err.message) from None
    return run


# ------------------------------------------------------------------ field types
# Each is ``Annotated[type, validators]``; the validators word every refusal.

def Str(choices: tuple | None = None) -> Any:
    """A non-empty string, optionally one of ``choices`` (the message lists them)."""
    return Annotated[str, BeforeValidator(worded(require_str, choices=choices))]


def Int(minimum: int | None = None) -> Any:
    """A whole number (``1e3`` counts), at least ``minimum``."""
    return Annotated[int, BeforeValidator(worded(require_int, minimum=minimum))]


def Number(positive: bool = False) -> Any:
    """A finite real number (not a boolean), positive when asked."""
    return Annotated[float, BeforeValidator(worded(require_number, positive=positive))]


def Mapping_(what: str = "a mapping (key: value lines)", nullable: bool = False) -> Any:
    """A free mapping, its content unchecked (``{}`` for an empty value when ``nullable``)."""
    return Annotated[dict, BeforeValidator(worded(require_mapping, allow_none=nullable, what=what))]


def Key(check: Callable[[Any], Any]) -> Any:
    """A mapping's key checked by ``check`` (which raises InputError or a schema error)."""
    return Annotated[Any, BeforeValidator(worded(check))]


def Table(key: Any, value: Any, *, what: str, nullable: bool = False, empty: str | None = None) -> Any:
    """A mapping ``KEY: VALUE`` in file order.

    Args:
        key, value: the types of the keys and of the values.
        what: how to name the expectation when the value is no mapping.
        nullable: an empty value reads as ``{}``.
        empty: the message refusing an empty mapping, or None to accept one.
    """
    def shape(data: Any) -> Any:
        data = require_mapping(data, allow_none=nullable, what=what)
        if empty is not None and not data:
            raise InputError(empty)
        return data
    return Annotated[dict[key, value], BeforeValidator(worded(shape))]


def List(item: Any = Any, *, what: str = "a list", nonempty: bool = False, length: int | None = None,
         unique: str | None = None) -> Any:
    """A list of ``item``.

    Args:
        item: the items' type.
        what: how to name the expectation (``"[lo, hi]"``).
        nonempty: refuse ``[]``.
        length: the exact number of items, if fixed.
        unique: refuse a repeated item with this message (``{}`` stands for the item).
    """
    checks = [BeforeValidator(worded(require_list, what=what, nonempty=nonempty, length=length))]
    if unique is not None:
        def once(items: list) -> list:
            dup = next((v for i, v in enumerate(items) if v in items[:i]), None)
            if dup is not None:
                raise problem(unique.format(dup))
            return items
        checks.append(AfterValidator(once))
    return Annotated[(list[item], *checks)]


def Optional_(kind: Any) -> Any:
    """``kind``, or an empty value (``None``) left as None."""
    return Annotated[kind, WrapValidator(lambda value, inner: None if value is None else inner(value))]


# ------------------------------------------------------------------ mappings

def known_keys(data: Mapping, valid: tuple, required: tuple = ()) -> None:
    """:func:`solver.models.yamlio.check_keys` as a schema check.

    Raises:
        PydanticCustomError: the first unknown key (located at it, with the
            valid keys and the closest one), else every missing required key.
    """
    unknown = next((k for k in data if k not in valid), None)
    try:
        check_keys(data, valid, required)
    except InputError as err:
        raise problem(err.message, () if unknown is None else (unknown,)) from None


class Section(BaseModel):
    """A mapping of a file with declared keys: the fields (by alias), required when without default.

    Subclasses set :attr:`what` (the expectation named when the value is no
    mapping) and :attr:`nullable` (an empty value reads as ``{}``), and may
    override :meth:`check_keys` (other wording) or :meth:`check_presence`
    (rules between keys, checked before the values).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    what: ClassVar[str] = "a mapping (key: value lines)"
    nullable: ClassVar[bool] = False

    @classmethod
    def keys(cls) -> tuple:
        """The valid keys, in declaration order."""
        return tuple(f.alias or name for name, f in cls.model_fields.items())

    @classmethod
    def required(cls) -> tuple:
        """The keys that must be given."""
        return tuple(f.alias or name for name, f in cls.model_fields.items() if f.is_required())

    @classmethod
    def check_keys(cls, data: Mapping) -> None:
        """Refuse the first unknown key, then the missing ones (:func:`known_keys`)."""
        known_keys(data, cls.keys(), cls.required())

    @classmethod
    def check_presence(cls, data: Mapping) -> None:
        """Rules between keys, checked after the keys and before the values (none by default)."""

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        if data is None and cls.nullable:
            data = {}
        if not isinstance(data, Mapping):
            raise problem(f"expected {cls.what}, got {describe_value(data)}")
        cls.check_keys(data)
        cls.check_presence(data)
        return data

    def given(self, key: str) -> bool:
        """Whether the file gave ``key`` (by its alias)."""
        name = next((n for n, f in type(self).model_fields.items() if (f.alias or n) == key), key)
        return name in self.model_fields_set


# ------------------------------------------------------------------ the adapter

def validate(schema: type[Section], data: Any, loc: Locator, *, document: str | None = None) -> Any:
    """Check data read from a file against its schema.

    Args:
        schema: the file's top :class:`Section`.
        data: what :func:`solver.models.yamlio.load_yaml` read.
        loc: its locator (the file's name and the lines of its keys; a
            Locator without lines gives messages without line numbers).
        document: if given, the whole file must be a mapping, and this names
            it (``"a sweep file: a mapping with keys ..."``), without quoting
            a file that is no mapping (:func:`solver.models.yamlio.require_document`).

    Returns:
        The schema's instance.

    Raises:
        InputError: the first problem, with the file, the key path, the line
            of the key (or of its nearest ancestor in the file) and the
            message of the check that refused it.
    """
    if document is not None:
        data = require_document(data, loc, document)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        ctx = first.get("ctx") or {}
        path = _key_path(data, first["loc"]) + tuple(ctx.get("sub", ()))
        # Every check here words its own errors; pydantic's wording is a fallback only.
        message = ctx["message"] if first["type"] == ERROR_TYPE else first["msg"]
        raise loc.error(message, path) from None


def _key_path(data: Any, where: tuple) -> tuple:
    """Pydantic's error location as the file's key path.

    Pydantic writes keys that are not strings or integers (``null``,
    ``1.5``) as text, ``true`` as 1, and adds ``'[key]'`` after a refused
    key: the walk down the data finds the file's own keys and drops the marker.
    """
    out: list = []
    node = data
    for item in where:
        found = _file_keys(node, item) if isinstance(node, Mapping) else []
        if found:
            out.append(found[0])
            node = node[found[0]]
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            out.append(item)
            node = node[item]
        elif item != "[key]":
            out.append(item)  # a key the file does not give (a required one)
            node = None
    return tuple(out)


def _file_keys(mapping: Mapping, item: Any) -> list:
    """The mapping's keys that pydantic may have written as ``item``, the likeliest first."""
    same = [k for k in mapping if k == item or str(k) == str(item)]
    return sorted(same, key=lambda k: type(k) is not type(item))
