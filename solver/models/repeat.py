"""Repeated parts in model files: ``for`` clauses, ``sum(...)`` and ``{...}`` placeholders.

Expanded on the file's data when it is loaded, before any kind reads it
(:func:`expand`), so that N-part models need no generator script:

* a mapping key ``KEY for i in A..B`` gives one entry per whole number i
  from A to B (inclusive; none when B < A), its key and value with ``{...}``
  placeholders filled in: ``P{i}P{i+1} for i in 0..N: [k, l, 0]``;
* a list item that is a one-entry mapping ``- for i in A..B: VALUE`` gives
  one item per i;
* ``sum(BODY for i in A..B)`` inside a string is the sum of the BODY terms,
  ``((BODY_A) + ... + (BODY_B))`` (``0`` for an empty range);
* ``{expr}`` in a key or a string is replaced by the value of ``expr``, a
  whole number: ``R{i-1}``, ``{N+1}``.

Several clauses make nested loops (``for i in 1..m for j in 1..n``, the
first outermost; later bounds may use earlier variables).  Bounds and
placeholders are expressions of the safe language (:mod:`solver.models.expr`) in
the loop variables and the file's PhysicalParams; the parameters they use
are *structural* (fixed at load time, not traced, refused as sweep axes),
since they change the model's size.  ``Title``, ``Kind`` and
``PhysicalParams`` are not expanded.

Safety: nothing is executed; every expression goes through the whitelisted
parser.  The expansion counts the values it makes against the input limit
``MAX_YAML_NODES`` (docs/reference/input-limits.md) before making them, a ``sum``
against the expression length limit (:data:`solver.models.expr.MAX_LENGTH`), and
the nesting of loops (``for`` clauses and ``sum`` together) against
:data:`MAX_SUM_NESTING`.  ``for`` is a Python
keyword and ``sum`` no function of the language, so no valid expression or
name is ever read as a repeat.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

import numpy as np

from solver.errors import InputError, how_to_raise, limit
from solver.models.expr import MAX_LENGTH, ExprError, check_name, evaluate_constant, parse
from solver.models.yamlio import MAX_YAML_NODES, Locator, format_path

__all__ = ["expand", "MAX_SUM_NESTING"]

MAX_SUM_NESTING = 8
"""Deepest nesting of loops: ``for`` clauses and ``sum(...)`` inside one another."""

_FROZEN = ("Title", "Kind", "PhysicalParams")
_FOR_WORD = re.compile(r"(?:^|\s)for\s+")
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(.+?)\s*\.\.\s*(.+?)\s*$")
_SUM = re.compile(r"\bsum\s*\(")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_OPEN, _CLOSE = "([{", ")]}"
_NAME_OR_INT = r"(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)"
_SIMPLE = re.compile(rf"^\s*[-+]?\s*{_NAME_OR_INT}(?:\s*[-+]\s*{_NAME_OR_INT})*\s*$")
_TERM = re.compile(rf"([-+]?)\s*({_NAME_OR_INT})")


def expand(data: Any, loc: Locator) -> Any:
    """The file's data with every repeat expanded (see the module docstring).

    Args:
        data: the file's data (a mapping; overrides already merged).
        loc: its locator.  Its line table is rewritten for the expanded key
            paths (each made entry gets its template's line), and
            ``loc.repeat_names`` is set to the parameters the repeats used
            (read as structural by :func:`solver.models.scope.read_params`).

    Returns:
        The expanded data (``data`` itself when it holds no repeat).

    Raises:
        InputError: a malformed clause, a bound or placeholder that is not a
            whole number, a loop variable that hides a parameter, a key made
            twice, or more values than the input limits allow; located at
            the template.
    """
    raw_lines = loc.__dict__.setdefault("_raw_lines", dict(loc.lines))
    exp = _Expander(data, loc, raw_lines)
    try:
        out = exp.walk(data, (), (), {}, top=True)
    except RecursionError:
        # Only reachable when MECHSWEEP_MAX_YAML_DEPTH was raised too far.
        raise InputError("the lists and mappings nest too deeply for Python's recursion limit; "
                         "lower MECHSWEEP_MAX_YAML_DEPTH", file=loc.file) from None
    loc.repeat_names = exp.closure()
    if exp.changed:
        loc.lines = exp.lines
        return out
    loc.lines = dict(raw_lines)
    return data


def _depths(text: str) -> list[int]:
    """Bracket depth before each character of ``text``."""
    out, d = [], 0
    for c in text:
        out.append(d)
        if c in _OPEN:
            d += 1
        elif c in _CLOSE:
            d = max(0, d - 1)
    return out


def _split_for(text: str) -> tuple[str, list[str]]:
    """``'P{i} for i in 1..N'`` -> ``('P{i}', ['i in 1..N'])``; no clause -> ``(text, [])``.

    Only ``for`` at bracket depth 0 counts (a ``sum(... for ...)`` inside is left).
    """
    depth = _depths(text)
    cuts = [m for m in _FOR_WORD.finditer(text) if depth[m.start()] == 0]
    if not cuts:
        return text, []
    head = text[:cuts[0].start()]
    clauses = [text[m.end():(cuts[k + 1].start() if k + 1 < len(cuts) else len(text))]
               for k, m in enumerate(cuts)]
    return head, clauses


class _Scope:
    """Loop variables and PhysicalParams for bounds and placeholders (records parameters used)."""

    def __init__(self, exp: "_Expander", env: Mapping[str, int]):
        self.exp, self.env = exp, env

    def names(self):
        return list(self.env) + list(self.exp.param_values())

    def lookup(self, name, order):
        if order:
            raise ExprError(f"{name}{chr(39) * order}: a repeat's bounds and placeholders are "
                            f"whole numbers; they have no derivatives")
        if name in self.env:
            return np.float64(self.env[name])
        params = self.exp.param_values()
        if name in self.exp.param_errors:
            raise self.exp.param_errors[name]
        if name not in params:
            raise KeyError(name)
        self.exp.used.add(name)
        return np.asarray(params[name], dtype=np.float64)

    def derivative(self, thunk, order):
        raise ExprError("a repeat's bounds and placeholders have no derivatives")


class _Expander:
    def __init__(self, data: Any, loc: Locator, raw_lines: dict):
        self.data, self.loc, self.raw_lines = data, loc, raw_lines
        self.lines: dict = {}
        self.used: set = set()
        self.changed = False
        self.count = 0
        self.cap = limit("MAX_YAML_NODES", MAX_YAML_NODES)
        self._params: dict | None = None
        self.param_errors: dict = {}
        self._values: dict = {}   # (text, loop values) -> whole number

    # ------------------------------------------------------------ helpers
    def error(self, message: str, path: tuple) -> InputError:
        line = None
        for k in range(len(path), -1, -1):
            if path[:k] in self.raw_lines:
                line = self.raw_lines[path[:k]]
                break
        return InputError(message, file=self.loc.file, path=format_path(path) or None, line=line)

    def param_values(self) -> dict:
        """PhysicalParams evaluated in file order (entries that fail are remembered)."""
        if self._params is None:
            self._params = {}
            raw = self.data.get("PhysicalParams") if isinstance(self.data, Mapping) else None
            if isinstance(raw, Mapping):
                for name, value in raw.items():
                    path = ("PhysicalParams", name)
                    try:
                        v = evaluate_constant(value, self._params, file=self.loc.file,
                                              path=format_path(path),
                                              line=self.raw_lines.get(path))
                    except InputError as err:
                        self.param_errors[str(name)] = err
                        continue
                    if not isinstance(v, list):
                        self._params[str(name)] = v
        return self._params

    def closure(self) -> set:
        """The parameters used, with those their definitions use (``M: 2*N`` used -> N too),
        so that no free parameter is left that a structural one was computed from."""
        raw = self.data.get("PhysicalParams") if isinstance(self.data, Mapping) else None
        out, todo = set(), list(self.used)
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            if isinstance(raw, Mapping) and name in raw:
                try:
                    names = parse(raw[name]).names()
                except InputError:
                    names = set()
                todo.extend(n for n in names if n in raw)
        return out

    def whole(self, text: str, env: Mapping, path: tuple, what: str) -> int:
        """The value of ``text`` (an expression), which must be a whole number."""
        key = (text, tuple(sorted(env.items())))
        if key not in self._values:
            self._values[key] = self._whole(text, env, path, what)
        return self._values[key]

    def _whole(self, text: str, env: Mapping, path: tuple, what: str) -> int:
        fast = self._simple(text, env)
        if fast is not None:
            return fast
        line = self.raw_lines.get(path)
        expr = parse(text, file=self.loc.file, path=format_path(path), line=line)
        value = np.asarray(expr.evaluate(_Scope(self, env)), dtype=float)
        if value.ndim != 0 or not np.isfinite(value) or not float(value).is_integer():
            shown = value.tolist() if value.ndim else float(value)
            raise self.error(f"{what} '{text.strip()}' must be a whole number, got {shown}", path)
        return int(value)

    def _simple(self, text: str, env: Mapping) -> int | None:
        """``i``, ``i+1``, ``N - 2``...: sums of loop variables, whole-number
        parameters and integer literals, computed directly (the general
        evaluator costs ~0.1 ms a call; a 10,000-part model has tens of
        thousands of placeholders).  ``None`` for anything else."""
        m = _SIMPLE.match(text)
        if not m:
            return None
        total = 0
        for sign, term in _TERM.findall(text):
            if term.isdigit():
                value = int(term)
            elif term in env:
                value = env[term]
            else:
                params = self.param_values()
                v = params.get(term)
                if term in self.param_errors or v is None or np.ndim(v) != 0 \
                        or not float(v).is_integer():
                    return None   # the general path gives the message
                self.used.add(term)
                value = int(v)
            total += -value if sign == "-" else value
        return total

    def tick(self, n: int, path: tuple) -> None:
        self.count += n
        if self.count > self.cap:
            raise self.error(
                f"too many values once the repeats are expanded: more than {self.cap}; the "
                f"limit is {self.cap} (MAX_YAML_NODES); {how_to_raise('MAX_YAML_NODES')}", path)

    def loops(self, clauses: list[str], env: Mapping, path: tuple) -> Iterator[dict]:
        """Every assignment of the clauses' variables, first clause outermost."""
        if not clauses:
            yield dict(env)
            return
        if len(clauses) + len(env) > MAX_SUM_NESTING:
            raise self.error(f"repeats are nested more than {MAX_SUM_NESTING} deep here (for "
                             f"clauses and sum(...) together)", path)
        m = _CLAUSE.match(clauses[0])
        if not m:
            raise self.error(f"cannot read the repeat clause 'for {clauses[0].strip()}'; write "
                             f"'for i in A..B' (A, B whole-number expressions, B included)", path)
        var, lo_text, hi_text = m.groups()
        where = dict(file=self.loc.file, path=format_path(path), line=self.raw_lines.get(path))
        check_name(var, "loop variable", **where)
        if var in env:
            raise self.error(f"loop variable '{var}' is already the variable of an outer loop; "
                             f"use another name", path)
        if var in self.param_values() or var in self.param_errors:
            raise self.error(f"loop variable '{var}' has the name of a PhysicalParams entry; "
                             f"use another name", path)
        lo = self.whole(lo_text, env, path, "the lower bound")
        hi = self.whole(hi_text, env, path, "the upper bound")
        n = max(0, hi - lo + 1)
        if self.count + n > self.cap:
            self.tick(n, path)
        for value in range(lo, hi + 1):
            inner = dict(env)
            inner[var] = value
            yield from self.loops(clauses[1:], inner, path)

    # ------------------------------------------------------------ strings
    def placeholders(self, text: str, env: Mapping, path: tuple) -> str:
        if "{" not in text:
            return text

        def fill(m):
            return str(self.whole(m.group(1), env, path, "the placeholder"))

        out = _PLACEHOLDER.sub(fill, text)
        if out != text:
            self.changed = True
        return out

    def sums(self, text: str, env: Mapping, path: tuple, depth: int = 0) -> str:
        """Expand ``sum(BODY for i in A..B)``, then the placeholders."""
        out, pos = [], 0
        for m in _SUM.finditer(text):
            if m.start() < pos:
                continue
            start = m.end()
            d, k = 1, start
            while k < len(text) and d:
                d += text[k] in "([{"
                d -= text[k] in ")]}"
                k += 1
            if d:
                continue   # unclosed: the expression parser reports it
            body, clauses = _split_for(text[start:k - 1])
            if not clauses:
                continue   # not a repeat: the parser says 'sum' is no function
            if depth >= MAX_SUM_NESTING:
                raise self.error(f"sum(...) is nested more than {MAX_SUM_NESTING} deep", path)
            terms, size = [], 0
            for inner in self.loops(clauses, env, path):
                term = self.sums(body, inner, path, depth + 1)
                size += len(term) + 5
                if size > MAX_LENGTH:
                    raise self.error(f"sum(...) expands to more than {MAX_LENGTH} characters, the "
                                     f"length limit of an expression", path)
                terms.append(f"({term.strip()})")
                self.tick(1, path)
            out.append(text[pos:m.start()])
            out.append("(" + " + ".join(terms) + ")" if terms else "0")
            pos = k
            self.changed = True
        out.append(text[pos:])
        return self.placeholders("".join(out), env, path)

    # ------------------------------------------------------------ walk
    def walk(self, node: Any, old: tuple, new: tuple, env: Mapping, top: bool = False) -> Any:
        if old in self.raw_lines:
            self.lines[new] = self.raw_lines[old]
        self.tick(1, old)
        if isinstance(node, Mapping):
            out: dict = {}
            for key, value in node.items():
                kold = old + (key,)
                if top and key in _FROZEN:
                    out[key] = self.copy(value, kold, new + (key,))
                    continue
                head, clauses = _split_for(key) if isinstance(key, str) else (key, [])
                if clauses:
                    self.changed = True
                    envs = self.loops(clauses, env, kold)
                    head = head.strip()
                else:
                    envs = [env]
                for inner in envs:
                    k2 = self.placeholders(head, inner, kold) if isinstance(head, str) else head
                    if k2 in out:
                        raise self.error(f"the key '{k2}' is made twice (by this repeat or by "
                                         f"another entry); each key must be new", kold)
                    if kold in self.raw_lines:
                        self.lines[new + (k2,)] = self.raw_lines[kold]
                    out[k2] = self.walk(value, kold, new + (k2,), inner)
            return out
        if isinstance(node, list):
            out_list: list = []
            for i, item in enumerate(node):
                iold = old + (i,)
                key = next(iter(item)) if isinstance(item, Mapping) and len(item) == 1 else None
                head, clauses = _split_for(key) if isinstance(key, str) else ("", [])
                if env and isinstance(item, Mapping) and len(item) == 1 and item[key] is None \
                        and isinstance(key, str):
                    # YAML read a placeholder item [{i}, 0] as the mapping {i: null}.
                    raise self.error(f"'{{{key}}}' inside [...] is read by YAML as a mapping, "
                                     f"not a placeholder; quote the item (\"{{{key}}}\") or the "
                                     f"whole list (\"[{{{key}}}, ...]\")", iold)
                if clauses and not head.strip():
                    self.changed = True
                    for inner in self.loops(clauses, env, iold + (key,)):
                        if iold in self.raw_lines:
                            self.lines[new + (len(out_list),)] = self.raw_lines[iold]
                        out_list.append(self.walk(item[key], iold + (key,),
                                                  new + (len(out_list),), inner))
                else:
                    out_list.append(self.walk(item, iold, new + (len(out_list),), env))
            return out_list
        if isinstance(node, str):
            return self.sums(node, env, old)
        return node

    def copy(self, node: Any, old: tuple, new: tuple) -> Any:
        """A frozen section: lines recorded, nothing expanded."""
        if old in self.raw_lines:
            self.lines[new] = self.raw_lines[old]
        if isinstance(node, Mapping):
            return {k: self.copy(v, old + (k,), new + (k,)) for k, v in node.items()}
        if isinstance(node, list):
            return [self.copy(v, old + (i,), new + (i,)) for i, v in enumerate(node)]
        return node
