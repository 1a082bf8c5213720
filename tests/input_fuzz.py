"""Fuzzing of model and sweep files through the command line (shared by the test and the script).

:func:`cases` is a hypothesis strategy of :class:`Case`: the shipped pendulum
model (``configs/mechanisms/pendulum.yaml``) and a small sweep of it, with 1
to 3 mutations each: keys deleted, renamed or added; values replaced by other
types (null, booleans, huge or non-finite numbers, strings, lists, mappings);
numbers scaled, negated, zeroed or made huge; expressions broken (unknown
names and functions, unbalanced or deeply nested parentheses, primes, Python
code); and, sometimes, the YAML text itself cut or given tags, aliases and
tabs.  :func:`run_case` writes a case into a fresh folder and runs it
in-process through :func:`sweep.cli.main`: ``check MODEL`` for a model,
``sweep SWEEP --dry-run --out OUT`` for a sweep (never a simulation), and
returns an :class:`Outcome`: the exit code, whether a traceback was printed
or an exception escaped, whether it ran past its time limit, and any file
written outside its folder.

Used by ``tests/test_fuzz_inputs.py`` (bounded to about a minute) and
``workflows/fuzz_inputs.py`` (N cases, a table of counts).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
MODEL_FILE = ROOT / "configs" / "mechanisms" / "pendulum.yaml"
CASE_SECONDS = 60
"""A case running longer than this counts as a hang (it is interrupted by SIGALRM)."""

SWEEPS = [
    {"Title": "Fuzzed pendulum sweep", "Model": "model.yaml",
     "Override": {"ProblemData": {"tend": 2}},
     "Sweep": {"product": {"L": {"linspace": [0.8, 1.2, 3]}},
               "zip": {"g": {"values": [9.7, 9.81]}}},
     "Outputs": {"variables": ["x", "y"], "samples": 21,
                 "metrics": {"ymax": {"of": "y", "reduce": "max"}}},
     "Batch": 4},
    {"Model": "model.yaml",
     "Sweep": {"sample": {"method": "lhs", "n": 8, "seed": 1, "bounds": {"L": [0.5, 1.5]}},
               "constants": {"g": 9.8}},
     "Outputs": {"dt": 0.1, "metrics": {"r": {"of": "constraint_residual", "reduce": "absmax"}}},
     "Batch": 3},
]

# Replacement values of every type; numbers that are huge, tiny, negative or not finite.
ODD_NUMBERS = [0, -1, 1, 2, 0.5, -0.0, 1e-300, 1e300, 1e308, 10 ** 9, 10 ** 30, -10 ** 12,
               float("inf"), float("-inf"), float("nan"), 3.7]
EXPRESSION_BITS = ["'", "''", "**", "(", ")", "+", "*", "-", " x", "/0", "sin(", "foo", "lam'",
                   "__import__('os').system('true')", "open('x')", "[1, 2]", "1e999", "q[5]",
                   "x.y", "x[0]", "lambda: 0", "sqrt(-1)", "log(0)", "atan2(x)", "#", ";", "'''",
                   "t", "pi", "e", "dot(x, y)", "norm(3)"]
KEYS = ["Title", "Kind", "PhysicalParams", "Variables", "Let", "Equations", "ProblemData",
        "SolverParams", "Animation", "Model", "Override", "Sweep", "Outputs", "Batch", "product",
        "zip", "sample", "constants", "values", "linspace", "logspace", "range", "samples", "dt",
        "tend", "t0", "fixed", "tol", "order", "method", "n", "seed", "bounds", "metrics", "of",
        "reduce", "variables", "x", "L", "g", "Integration", "init", "max_steps", "h_max", "mode",
        "__class__", "", " ", "x'", "ü"]
TEXT_BITS = ["!!python/object/apply:os.system ['true']", "&a [1, 2]", "*a", "*nope", "{", "[",
             "\t", ": :", "- - -", "---\n", "...\n", "%YAML 1.1\n", "? ", "|", ">", "'", '"',
             "!!binary aGVsbG8=", "!!set {a, b}", "<<: {x: 1}", "\x00", "\ufeff"]


@dataclass
class Case:
    """One fuzzed input: ``kind`` is ``"model"`` (run ``check``) or ``"sweep"`` (``--dry-run``)."""

    kind: str
    model_text: str
    sweep_text: str = ""
    ops: list = field(default_factory=list)


@dataclass
class Outcome:
    """What running a case gave."""

    code: int | None
    traceback: bool
    hang: bool
    seconds: float
    stray: list
    output: str


# ------------------------------------------------------------------ mutations
def _paths(data, prefix=()):
    """Every key path of a YAML tree (mappings and lists), the root's children first."""
    items = data.items() if isinstance(data, dict) else enumerate(data) \
        if isinstance(data, list) else ()
    for k, v in items:
        yield prefix + (k,)
        yield from _paths(v, prefix + (k,))


def _parent(data, path):
    for k in path[:-1]:
        data = data[k]
    return data


def _values():
    scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(ODD_NUMBERS),
                        st.integers(-10 ** 20, 10 ** 20),
                        st.floats(allow_nan=True, allow_infinity=True),
                        st.text(max_size=12))
    return st.one_of(scalars, st.lists(scalars, max_size=4),
                     st.dictionaries(st.sampled_from(KEYS), scalars, max_size=3))


def _expression(draw, text: str) -> str:
    how = draw(st.sampled_from(["append", "insert", "replace", "nest", "long", "cut"]))
    bit = draw(st.sampled_from(EXPRESSION_BITS))
    if how == "append":
        return text + bit
    if how == "insert":
        i = draw(st.integers(0, len(text)))
        return text[:i] + bit + text[i:]
    if how == "replace":
        return bit
    if how == "nest":
        depth = draw(st.sampled_from([3, 50, 400, 3000]))
        return "(" * depth + text + ")" * depth
    if how == "long":
        return text + " + x" * draw(st.sampled_from([10, 200]))
    i = draw(st.integers(0, len(text)))
    return text[:i]


def _number(draw, x):
    how = draw(st.sampled_from(["neg", "zero", "scale", "huge", "odd", "string", "bool"]))
    if how == "neg":
        return -x
    if how == "zero":
        return 0
    if how == "scale":
        return x * draw(st.sampled_from([1e-9, 1e3, 1e9, 1e30]))
    if how == "huge":
        return draw(st.sampled_from([10 ** 9, 10 ** 12, 10 ** 30, 1e300]))
    if how == "string":
        return str(x) + draw(st.sampled_from(["", "x", " m", "e"]))
    if how == "bool":
        return draw(st.booleans())
    return draw(st.sampled_from(ODD_NUMBERS))


def _mutate(draw, data, ops: list):
    """One mutation of a YAML tree (in place where possible); the new tree."""
    paths = list(_paths(data))
    if not paths:
        return draw(_values())
    path = draw(st.sampled_from(paths))
    parent, key = _parent(data, path), path[-1]
    value = parent[key]
    op = draw(st.sampled_from(["delete", "rename", "add", "type", "number", "expression"]))
    if op == "number" and not (isinstance(value, (int, float)) and not isinstance(value, bool)):
        op = "type"
    if op == "expression" and not isinstance(value, str):
        op = "type"
    if op == "delete":
        del parent[key]
    elif op == "rename" and isinstance(parent, dict):
        new = draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)))
        parent[new] = parent.pop(key)
    elif op == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(KEYS))] = draw(_values())
    elif op == "add":
        parent.append(draw(_values()))
    elif op == "number":
        parent[key] = _number(draw, value)
    elif op == "expression":
        parent[key] = _expression(draw, value)
    else:
        parent[key] = draw(_values())
    ops.append(f"{op} {'.'.join(map(str, path))}")
    return data


def _text(draw, text: str, ops: list) -> str:
    """A mutation of the YAML text itself (cut, tags, aliases, tabs, odd characters)."""
    i = draw(st.integers(0, len(text)))
    how = draw(st.sampled_from(["insert", "cut", "line"]))
    ops.append(f"text {how} at {i}")
    if how == "insert":
        return text[:i] + draw(st.sampled_from(TEXT_BITS)) + text[i:]
    if how == "cut":
        return text[:i]
    lines = text.splitlines(keepends=True)
    j = draw(st.integers(0, max(len(lines) - 1, 0)))
    return "".join(lines[:j] + [draw(st.sampled_from(TEXT_BITS)) + " " + (lines[j] if lines else "")]
                   + lines[j + 1:])


def _dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10 ** 6)


@st.composite
def _file(draw, base, ops: list, mutate: bool = True) -> str:
    data = copy.deepcopy(base)
    if not mutate:
        return _dump(data)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):  # mostly one: more cases load
        data = _mutate(draw, data, ops)
    text = _dump(data)
    if draw(st.integers(0, 5)) == 0:
        text = _text(draw, text, ops)
    return text


@st.composite
def cases(draw) -> Case:
    """A fuzzed model (for ``check``) or sweep (for ``sweep --dry-run``)."""
    model = yaml.safe_load(MODEL_FILE.read_text())
    model_ops: list = []
    if draw(st.booleans()):
        return Case("model", draw(_file(model, model_ops)), ops=model_ops)
    sweep_ops: list = []
    sweep = draw(st.sampled_from(SWEEPS))
    sweep_text = draw(_file(sweep, sweep_ops))
    model_text = draw(_file(model, model_ops, mutate=draw(st.integers(0, 3)) == 0))
    return Case("sweep", model_text, sweep_text,
                ops=[f"sweep: {o}" for o in sweep_ops] + [f"model: {o}" for o in model_ops])


# ------------------------------------------------------------------ running
class _Hang(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Hang()


def _listing(folder: Path) -> dict:
    """path -> (size, mtime) of every file below ``folder`` (not following links)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in (".git", ".venv", ".hypothesis", "__pycache__",
                                                 ".pytest_cache")]
        for name in files:
            p = os.path.join(root, name)
            try:
                s = os.lstat(p)
            except OSError:
                continue
            out[p] = (s.st_size, s.st_mtime_ns)
    return out


def snapshot(folders) -> dict:
    """The listing of several folders, to compare before and after cases."""
    out = {}
    for f in folders:
        out.update(_listing(Path(f)))
    return out


def changed(before: dict, after: dict) -> list:
    """Files created, changed or deleted between two snapshots."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def run_case(case: Case, folder: Path, seconds: int = CASE_SECONDS) -> Outcome:
    """Write a case into ``folder`` (empty, made here) and run it through the CLI.

    Returns:
        :class:`Outcome`; ``stray`` lists files created, changed or deleted
        outside ``folder`` in its parent (the working directory of the run).
    """
    from sweep.cli import main

    folder.mkdir(parents=True)
    (folder / "model.yaml").write_text(case.model_text, encoding="utf-8")
    if case.kind == "model":
        argv = ["check", str(folder / "model.yaml")]
    else:
        (folder / "sweep.yaml").write_text(case.sweep_text, encoding="utf-8")
        argv = ["sweep", str(folder / "sweep.yaml"), "--dry-run", "--out", str(folder / "out.zarr")]
    # The case runs in folder's parent (a temporary folder of the caller), so
    # that a relative write lands where it is seen.  The repository is not
    # watched: its files may be edited meanwhile by whoever works on it.
    watched = [folder.parent]
    before = {p: v for p, v in snapshot(watched).items() if not p.startswith(str(folder) + os.sep)}
    out, err = io.StringIO(), io.StringIO()
    code, traceback, hang = None, False, False
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    cwd = os.getcwd()
    os.chdir(folder.parent)
    signal.alarm(seconds)
    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except _Hang:
        hang = True
    except BaseException as exc:  # noqa: BLE001 - any escape is a finding
        traceback = True
        err.write(f"\nuncaught {type(exc).__name__}: {exc}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
    seconds_taken = time.perf_counter() - t
    hang = hang or seconds_taken > seconds
    after = {p: v for p, v in snapshot(watched).items() if not p.startswith(str(folder) + os.sep)}
    stray = changed(before, after)
    if case.kind == "sweep" and (folder / "out.zarr").exists():
        stray.append(str(folder / "out.zarr"))  # a dry run writes nothing, not even --out
    text = out.getvalue() + err.getvalue()
    traceback = traceback or "Traceback" in text
    return Outcome(code, traceback, hang, seconds_taken, stray, text)
