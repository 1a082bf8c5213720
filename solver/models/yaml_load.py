"""Reading YAML input files: the YAML 1.2 core-schema loader, line numbers, input limits.

:func:`load_yaml` reads a file (or YAML text) into plain data and a
:class:`Locator` that knows the line of every key path, for messages; the
scalar rules and the limits are described in :mod:`solver.models.yamlio`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml
from yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent, StreamEndEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from solver.errors import InputError, how_to_raise, limit
from solver.errors import MAX_YAML_BYTES, check_regular_file  # noqa: F401 (this module's names before they moved)

__all__ = ["LIBYAML_MAX_DEPTH", "Locator", "MAX_YAML_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "Path_",
           "check_regular_file", "format_path", "load_yaml"]


# Input limits (see the module docstring); MECHSWEEP_<NAME> overrides each.
# MAX_YAML_BYTES and check_regular_file live with the other limits in solver.errors, which a command
# line can import to refuse a missing file before it loads the solver.
MAX_YAML_DEPTH = 100
"""Deepest nesting of lists and mappings; models need fewer than 10 levels.
Values above a few hundred may exceed Python's recursion limit."""
# libyaml's own nesting limit: PyYAML 6.0.4 and later refuse deeper files while scanning.
LIBYAML_MAX_DEPTH = 1000
MAX_YAML_NODES = 1_000_000
"""Most values and collections in a file with its aliases expanded."""

Path_ = tuple  # a key path: keys (str, int, ...) and list indices (int)

# The C parser is several times faster on big generated models; both give marks.
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):
    """Safe loader with the YAML 1.2 core scalar rules (see module docstring)."""

    # Own tables, so that the resolvers below do not leak into yaml.SafeLoader.
    yaml_implicit_resolvers: dict = {}
    yaml_constructors = dict(_Base.yaml_constructors)


def _int(loader: _Loader, node: ScalarNode) -> int:
    text = loader.construct_scalar(node)
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body[:2] in ("0o", "0O"):
        return sign * int(body[2:], 8)
    if body[:2] in ("0x", "0X"):
        return sign * int(body[2:], 16)
    return sign * int(body, 10)


def _float(loader: _Loader, node: ScalarNode) -> float:
    text = loader.construct_scalar(node).lower()
    if text.lstrip("+-") == ".inf":
        return -math.inf if text.startswith("-") else math.inf
    if text == ".nan":
        return math.nan
    return float(text)


def _bool(loader: _Loader, node: ScalarNode) -> bool:
    return loader.construct_scalar(node).lower() == "true"


_Loader.add_constructor("tag:yaml.org,2002:int", _int)
_Loader.add_constructor("tag:yaml.org,2002:float", _float)
_Loader.add_constructor("tag:yaml.org,2002:bool", _bool)
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool",
                              re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int",
                              re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                              list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+.0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:null",
                              re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
# Keep '<<' merge keys working for people who share blocks with anchors.
_Loader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])

_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}"
               for t in ("str", "int", "float", "bool", "null", "seq", "map")}

# PyYAML's problems, said in the words of someone writing an input file.
_HINTS = (
    ("mapping values are not allowed",
     "a ':' appears where no 'key: value' can start; check the indentation, "
     "or quote a value that contains ': '"),
    ("could not find expected ':'", "a line is missing the ':' of 'key: value'"),
    ("did not find expected key", "the indentation of this line does not match the lines above"),
    ("expected <block end>", "the indentation of this line does not match the lines above"),
    ("did not find expected ',' or ']'", "a '[...]' list is not closed"),
    ("did not find expected ',' or '}'", "a '{...}' mapping is not closed"),
    ("found unexpected end of stream", "the file ends inside an unfinished quote or bracket"),
    ("expected a single document", "the file holds more than one YAML document ('---')"),
    ("found undefined alias", "an '*alias' refers to an '&anchor' that was not defined"),
)


@dataclass
class Locator:
    """Where each key of a loaded YAML file sits.

    Attributes:
        file: the file name used in messages (``None`` for anonymous text).
        lines: maps key paths such as ``("PartData", "Springs", "AB")`` (list
            items by index) to the 1-based line of the key, or of the item.
        text: the YAML text that was read.
    """

    file: str | None = None
    lines: dict[Path_, int] = field(default_factory=dict)
    text: str = ""

    def line(self, path: Iterable) -> int | None:
        """The 1-based line of exactly this key path, or ``None`` if absent."""
        return self.lines.get(tuple(path))

    def nearest(self, path: Iterable) -> int | None:
        """The line of ``path`` or of its deepest ancestor present in the file."""
        path = tuple(path)
        for k in range(len(path), -1, -1):
            if path[:k] in self.lines:
                return self.lines[path[:k]]
        return None

    def error(self, message: str, path: Iterable = ()) -> InputError:
        """An :class:`InputError` located at ``path`` (nearest known line)."""
        path = tuple(path)
        return InputError(message, file=self.file, path=format_path(path) or None,
                          line=self.nearest(path) if path else None)


def format_path(path: Iterable) -> str:
    """``("Sweep", "zip", "k", 2)`` -> ``"Sweep.zip.k[2]"``."""
    out = ""
    for key in path:
        if isinstance(key, int) and not isinstance(key, bool):
            out += f"[{key}]"
        else:
            out += ("." if out else "") + str(key)
    return out


def _syntax_error(exc: yaml.YAMLError, file: str | None, text: str) -> InputError:
    problem = getattr(exc, "problem", None) or str(exc)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    both = problem + " " + (getattr(exc, "context", None) or "")
    words = next((hint for key, hint in _HINTS if key in both), None)
    if "cannot start any token" in problem and mark is not None:
        # libyaml does not say which character; the reader wants to know.
        lines = text.splitlines()
        row = lines[mark.line] if mark.line < len(lines) else ""
        char = row[mark.column] if mark.column < len(row) else "?"
        words = ("tab characters cannot be used for indentation; use spaces" if char == "\t"
                 else f"a value cannot start with '{char}'; put the value in quotes")
    message = f"YAML syntax error: {words} (parser: {problem})" if words else \
        f"YAML syntax error: {problem}"
    context = getattr(exc, "context", None)
    if context:
        cmark = getattr(exc, "context_mark", None)
        message += f"; {context}" + (f" at line {cmark.line + 1}" if cmark else "")
    return InputError(message, file=file, line=mark.line + 1 if mark else None)


def _read(path_or_text: Any, file: str | None) -> tuple[str, str | None]:
    """Decide whether we were given a path or YAML text, and get the text."""
    if isinstance(path_or_text, os.PathLike) or (
            isinstance(path_or_text, str) and "\n" not in path_or_text
            and (os.path.isfile(path_or_text) or path_or_text.endswith((".yaml", ".yml")))):
        path = Path(path_or_text)
        file = file or str(path)
        check_regular_file(path, file)
        try:
            return path.read_text(encoding="utf-8"), file
        except FileNotFoundError:
            raise InputError("file not found", file=file) from None
        except IsADirectoryError:
            raise InputError("expected a YAML file, found a folder", file=file) from None
        except UnicodeDecodeError as exc:
            raise InputError(f"file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                             file=file) from None
        except OSError as exc:
            raise InputError(f"cannot read the file ({exc.strerror or exc})", file=file) from None
    if not isinstance(path_or_text, str):
        raise TypeError(f"load_yaml expects a path or YAML text, got {type(path_or_text).__name__}")
    return path_or_text, file


def load_yaml(path_or_text: str | os.PathLike, file: str | None = None) -> tuple[Any, Locator]:
    """Read one YAML document into plain Python data, remembering key lines.

    Args:
        path_or_text: a path (``pathlib.Path``, or a string naming an existing
            file or ending in ``.yaml``/``.yml``), or the YAML text itself (any
            other string, in particular one containing a newline).
        file: name to use in messages; defaults to the path when one is given.

    Returns:
        ``(data, locator)``: ``data`` is made of dict (file order kept), list,
        str, int, float, bool and None; ``locator`` gives the line of each
        key path (see :class:`Locator`).  An empty document gives ``None``.

    Raises:
        InputError: file missing, unreadable or not a regular file, YAML
            syntax errors (with the line and the parser's problem in plain
            words), duplicate keys, keys that are not scalars, recursive
            aliases, unsupported tags, and files over the input limits
            (:data:`MAX_YAML_BYTES`, :data:`MAX_YAML_DEPTH`,
            :data:`MAX_YAML_NODES`), found before anything is built.
    """
    text, file = _read(path_or_text, file)
    loc = Locator(file=file, text=text)
    try:
        _check_size(text, file)
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, file, text) from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, loc
        loc.lines[()] = node.start_mark.line + 1
        data = _build(loader, node, (), loc, set())
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, file, text) from None
    except RecursionError:
        # Only reachable when MECHSWEEP_MAX_YAML_DEPTH was raised too far.
        raise InputError(f"the lists and mappings nest too deeply for Python's recursion limit; "
                         f"lower MECHSWEEP_MAX_YAML_DEPTH (default {MAX_YAML_DEPTH})",
                         file=file) from None
    finally:
        loader.dispose()
    return data, loc


def _check_size(text: str, file: str | None) -> None:
    """Bound nesting depth and alias expansion on the event stream, before composing.

    An alias is one parser event whatever it stands for, so the expanded size
    is counted without expanding anything: each anchor's block size is
    remembered, and each alias adds it.  The C parser walks nesting without
    recursion, so a ``[[[...]]]`` 10,000 deep is seen here before the
    (recursive) composer could overflow.

    Raises:
        InputError: deeper than :data:`MAX_YAML_DEPTH` or more than
            :data:`MAX_YAML_NODES` nodes after alias expansion (file, line,
            the limit and how to raise it).
        yaml.YAMLError: a syntax error (reported by the caller).
    """
    max_depth = limit("MAX_YAML_DEPTH", MAX_YAML_DEPTH)
    max_nodes = limit("MAX_YAML_NODES", MAX_YAML_NODES)
    parser = _Loader(text)
    try:
        expanded = 0
        stack: list[tuple[int, str | None]] = []  # open collections: (count at start, anchor)
        sizes: dict[str, int] = {}                 # anchor -> expanded size of its block
        while True:
            event = parser.get_event()
            if isinstance(event, StreamEndEvent):
                return
            if isinstance(event, AliasEvent):
                if event.anchor not in sizes:
                    return  # undefined (or recursive) alias: the composer reports it
                expanded += sizes[event.anchor]
            elif isinstance(event, ScalarEvent):
                expanded += 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, CollectionStartEvent):
                stack.append((expanded, event.anchor))
                expanded += 1
                if len(stack) > max_depth:
                    raise _too_deep(max_depth, file, event.start_mark.line + 1)
            elif isinstance(event, CollectionEndEvent):
                start, anchor = stack.pop()
                if anchor:
                    sizes[anchor] = expanded - start
            if expanded > max_nodes:
                what = (f"the alias '*{event.anchor}' here brings the count to {expanded} "
                        f"(each '*alias' repeats the whole '&anchor' block it names)"
                        if isinstance(event, AliasEvent) else f"{expanded} at this line")
                raise InputError(
                    f"too many values once the aliases are expanded: {what}; the limit is "
                    f"{max_nodes} (MAX_YAML_NODES); {how_to_raise('MAX_YAML_NODES')}",
                    file=file, line=event.start_mark.line + 1)
    except yaml.YAMLError as exc:
        # libyaml (bundled with PyYAML from 6.0.4) stops at its own limit,
        # 1,000 levels, scanning ahead of the events counted above.
        if "maximum nesting depth" not in (getattr(exc, "problem", None) or ""):
            raise
        mark = getattr(exc, "problem_mark", None)
        raise _too_deep(max_depth, file, mark.line + 1 if mark else None) from None
    finally:
        parser.dispose()


def _too_deep(max_depth: int, file: str | None, line: int | None) -> InputError:
    """The message for lists and mappings nested deeper than ``max_depth`` (or libyaml's limit, when lower)."""
    if max_depth >= LIBYAML_MAX_DEPTH:
        return InputError(f"lists and mappings are nested more than {LIBYAML_MAX_DEPTH} levels deep here, "
                          f"the YAML parser's own limit; model and sweep files need fewer than 10",
                          file=file, line=line)
    return InputError(f"lists and mappings are nested more than {max_depth} levels deep here; "
                      f"the limit is {max_depth} (MAX_YAML_DEPTH) and model and sweep files "
                      f"need fewer than 10; {how_to_raise('MAX_YAML_DEPTH')}", file=file, line=line)


def _build(loader: _Loader, node, path: Path_, loc: Locator, active: set) -> Any:
    """Turn a node into plain data, recording lines (walks aliases again)."""
    if node.tag not in _PLAIN_TAGS:
        raise InputError(f"the tag '{node.tag}' is not supported; write plain values",
                         file=loc.file, path=format_path(path) or None,
                         line=node.start_mark.line + 1)
    if isinstance(node, ScalarNode):
        return loader.construct_object(node)
    if id(node) in active:
        raise InputError("an alias refers to the block that contains it (recursive alias)",
                         file=loc.file, path=format_path(path) or None,
                         line=node.start_mark.line + 1)
    active.add(id(node))
    try:
        if isinstance(node, SequenceNode):
            out = []
            for i, child in enumerate(node.value):
                loc.lines.setdefault(path + (i,), child.start_mark.line + 1)
                out.append(_build(loader, child, path + (i,), loc, active))
            return out
        assert isinstance(node, MappingNode)
        own = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
        # Merged-in keys come first and may be overridden (last wins, as PyYAML
        # orders them); only a key written twice in this mapping is an error.
        loader.flatten_mapping(node)
        out: dict = {}
        written: set = set()
        for knode, vnode in node.value:
            line = knode.start_mark.line + 1
            if not isinstance(knode, ScalarNode):
                raise InputError("a key must be a plain name or number, not a list or mapping",
                                 file=loc.file, path=format_path(path) or None, line=line)
            key = _build(loader, knode, path, loc, active)
            if key in written and id(knode) in own:
                raise InputError(
                    f"duplicate key '{key}' (first given at line {loc.line(path + (key,))})",
                    file=loc.file, path=format_path(path) or None, line=line)
            if id(knode) in own:
                written.add(key)
            loc.lines[path + (key,)] = line
            out.pop(key, None)  # an overriding key takes the place where it is written
            out[key] = _build(loader, vnode, path + (key,), loc, active)
        return out
    finally:
        active.discard(id(node))
