"""Fuzzing of model and sweep files through the command line (shared by the test and the script).

:func:`cases` is a hypothesis strategy of :class:`Case`.  A case starts from
one of three shipped models, one per YAML kind (:data:`BASES`): the
``DAE``-kind pendulum (``configs/mechanisms/pendulum.yaml``), the
``Mechanism``-kind Mechanism0 (``mechanism0.yaml``, the talk's parts format)
and the ``Lagrangian``-kind double pendulum (``double_pendulum.yaml``), and
from small sweeps of each.  It makes 1 to 3 mutations: keys deleted, renamed
or added; values replaced by other types (null, booleans, huge or non-finite
numbers, strings, lists, mappings); numbers scaled, negated, zeroed or made
huge; expressions broken (unknown names and functions, unbalanced or deeply
nested parentheses, primes, Python code); and, sometimes, the YAML text
itself cut or given tags, aliases and tabs.

Each case is one command (``Case.command``):

* ``check MODEL`` — a mutated model;
* ``simulate MODEL`` — a small share of the model cases
  (``simulate_percent``): the model is first given a short run
  (``tend = t0 +`` :data:`SIMULATE_TEND`, :data:`SIMULATE_SAMPLES` output
  times, ``max_steps`` :data:`SIMULATE_MAX_STEPS`) and then mutated, so a
  mutation can still lengthen it; ``--json``, ``--out`` (in the case's
  folder) and a fuzzed ``--set NAME=VALUE`` are added at random;
* ``sweep SWEEP --dry-run --out OUT`` — a mutated sweep of the base model
  (whose file is mutated too, one time in four).

:func:`run_case` writes a case into a fresh folder and runs it in-process
through :func:`sweep.cli.app.main`, and returns an :class:`Outcome`: the exit
code, whether a traceback was printed or an exception escaped, whether it
ran past its time limit, and any file written outside its folder.
:class:`CaseRunner` does the same in a child process, started afresh every
few hundred cases: a process keeps every model it has compiled (so one
process cannot run thousands of cases), and a case that kills its process
is then a *crash* of that case.
:func:`base_cases` are the unmutated inputs, every base with every command,
which must all exit 0 (the mutations start from valid files), and
:func:`regression_cases` inputs that the fuzz found mishandled once.

Used by ``tests/test_fuzz_inputs.py`` (bounded to about a minute) and
``workflows/fuzz_inputs.py`` (N cases, a table of counts).
"""

from __future__ import annotations

import contextlib
import copy
import faulthandler
import io
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs" / "mechanisms"
CASE_SECONDS = 60
"""A case running longer than this counts as a hang (it is interrupted by SIGALRM)."""
WEDGED_SECONDS = 3 * CASE_SECONDS
"""A case still running after this long (SIGALRM cannot interrupt compiled code)
dumps every thread's stack and ends the process, rather than hanging the run."""

SIMULATE_PERCENT = 10
"""Share of cases (percent) that run ``simulate`` (the rest split between check and sweep)."""
SIMULATE_TEND = 0.25
SIMULATE_SAMPLES = 6
SIMULATE_MAX_STEPS = 2000


@dataclass(frozen=True)
class Base:
    """A shipped model the cases start from, and sweeps of it."""

    name: str
    kind: str
    file: Path
    sweeps: tuple
    params: tuple
    """Names of its parameters (for ``simulate --set``)."""


BASES = {
    "pendulum": Base("pendulum", "DAE", CONFIGS / "pendulum.yaml", (
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
    ), ("g", "L")),
    "mechanism0": Base("mechanism0", "Mechanism", CONFIGS / "mechanism0.yaml", (
        {"Title": "Fuzzed Mechanism0 sweep", "Model": "model.yaml",
         "Override": {"ProblemData": {"tend": 1}, "SolverParams": {"Integration": {"tol": 1e-8}}},
         "Sweep": {"product": {"k": {"logspace": [2, 3, 3]}, "m": [1, 2]}},
         "Outputs": {"variables": ["A", "B"], "samples": 11,
                     "metrics": {"By_min": {"of": "B[1]", "reduce": "min"},
                                 "Bx_range": {"of": "Bx", "reduce": "range"}}},
         "Batch": 4},
        {"Model": "model.yaml",
         "Sweep": {"zip": {"mu": {"values": [0.2, 0.5, 1.0]}, "l": {"range": [0.9, 1.1, 0.1]}},
                   "constants": {"M": 1.5}},
         "Outputs": {"dt": 0.5, "metrics": {"Ay": {"of": "A[1]", "reduce": "final"}}},
         "Batch": 2},
    ), ("L", "M", "k", "l", "mu", "m")),
    "double_pendulum": Base("double_pendulum", "Lagrangian", CONFIGS / "double_pendulum.yaml", (
        {"Title": "Fuzzed double pendulum sweep", "Model": "model.yaml",
         "Override": {"ProblemData": {"tend": 1}},
         "Sweep": {"product": {"th1": [0.5, 1.0], "th2": {"range": [1.0, 2.0, 0.5]}}},
         "Outputs": {"variables": ["P2"], "samples": 11,
                     "metrics": {"x2": {"of": "P2[0]", "reduce": "mean"}}},
         "Batch": 2},
        {"Model": "model.yaml",
         "Sweep": {"sample": {"method": "sobol", "n": 4, "seed": 3,
                              "bounds": {"l2": [0.5, 1.0], "m2": [0.5, 2]}},
                   "constants": {"g": 1.6}},
         "Outputs": {"samples": 5, "metrics": {"r": {"of": "constraint_residual", "reduce": "max"}}},
         "Batch": 4},
    ), ("m1", "m2", "l1", "l2", "g", "th1", "th2")),
}
COMMANDS = ("check", "simulate", "sweep")

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
# simulate --set NAME=VALUE: values of every sort, names that are no parameter.
SET_VALUES = ["0", "-1", "2.5", "1e300", "-1e300", "1e-300", "nan", "inf", "-inf", "x", "",
              "[1, 2]", "10**9", "2*pi", "1/0", "1e999", "__import__('os')", "true", "0x10"]
SET_NAMES = ["nope", "t", "tend", "", "x", "lam", "N", "g=1", "ü"]


@dataclass
class Case:
    """One fuzzed input: ``command`` is ``check``, ``simulate`` or ``sweep`` (``--dry-run``).

    ``options`` are extra arguments of ``simulate``; ``{folder}`` in them is
    the case's folder.
    """

    command: str
    base: str
    model_text: str
    sweep_text: str = ""
    options: list = field(default_factory=list)
    ops: list = field(default_factory=list)

    def describe(self) -> str:
        """``command base [options] ops``, for messages."""
        return f"{self.command} {self.base} {self.options} {self.ops}"

    def key(self) -> tuple:
        """What the case runs: equal keys give equal outcomes (hypothesis repeats cases)."""
        return (self.command, self.base, self.model_text, self.sweep_text, tuple(self.options))


@dataclass
class Outcome:
    """What running a case gave (``crash``: the process running it died)."""

    code: int | None
    traceback: bool
    hang: bool
    seconds: float
    stray: list
    output: str
    crash: bool = False


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


@lru_cache(maxsize=None)
def _base_data(name: str) -> dict:
    """A base model's data as the project's loader reads it (YAML 1.2 numbers)."""
    from solver.models.yamlio import load_yaml

    data, _ = load_yaml(BASES[name].file)
    return data


def _short(data: dict) -> dict:
    """A model made quick to simulate: a short interval, few outputs, few steps."""
    data = copy.deepcopy(data)
    pd = data["ProblemData"]
    pd["tend"] = pd.get("t0", 0) + SIMULATE_TEND
    pd.pop("dt", None)
    pd["samples"] = SIMULATE_SAMPLES
    data.setdefault("SolverParams", {}).setdefault("Integration", {})["max_steps"] = SIMULATE_MAX_STEPS
    return data


def _simulate_options(draw, base: Base) -> list:
    options = []
    if draw(st.booleans()):
        options.append("--json")
    out = draw(st.sampled_from([None, None, None, "run.zarr", "run.nc"]))
    if out:
        options += ["--out", "{folder}/" + out]
    if draw(st.integers(0, 3)) == 0:
        name = draw(st.sampled_from(list(base.params) + SET_NAMES))
        options += ["--set", f"{name}={draw(st.sampled_from(SET_VALUES))}"]
    return options


@st.composite
def cases(draw, simulate_percent: int = SIMULATE_PERCENT) -> Case:
    """A fuzzed model (for ``check`` or ``simulate``) or sweep (for ``sweep --dry-run``)."""
    # sampled_from, not integers: hypothesis' integers favour small values,
    # which would skew the shares.
    base = BASES[draw(st.sampled_from(sorted(BASES)))]
    model = _base_data(base.name)
    model_ops: list = []
    roll = draw(st.sampled_from(range(100)))
    if roll < simulate_percent:
        text = draw(_file(_short(model), model_ops))
        return Case("simulate", base.name, text, options=_simulate_options(draw, base), ops=model_ops)
    if roll < simulate_percent + (100 - simulate_percent) // 2:
        return Case("check", base.name, draw(_file(model, model_ops)), ops=model_ops)
    sweep_ops: list = []
    sweep = draw(st.sampled_from(base.sweeps))
    sweep_text = draw(_file(sweep, sweep_ops))
    model_text = draw(_file(model, model_ops, mutate=draw(st.integers(0, 3)) == 0))
    return Case("sweep", base.name, model_text, sweep_text,
                ops=[f"sweep: {o}" for o in sweep_ops] + [f"model: {o}" for o in model_ops])


def base_cases() -> list:
    """Every base with every command, unmutated (each must exit 0)."""
    out = []
    for name, base in BASES.items():
        model = _base_data(name)
        out.append(Case("check", name, _dump(model)))
        out.append(Case("simulate", name, _dump(_short(model)), options=["--json"]))
        out.append(Case("sweep", name, _dump(model), _dump(base.sweeps[0])))
    return out


def regression_cases() -> list:
    """Inputs the fuzz has found mishandled, kept as explicit examples of the test.

    They must keep the property (exit 0, 1 or 2, no traceback), not exit 0.
    """
    huge_steps = _short(_base_data("pendulum"))
    huge_steps["SolverParams"]["Integration"]["max_steps"] = 1e300
    null_metric = copy.deepcopy(BASES["pendulum"].sweeps[0])
    first = next(iter(null_metric["Outputs"]["metrics"]))
    null_metric["Outputs"]["metrics"][first]["of"] = None
    return [
        # Found 2026-11-23: a whole number >= 2**63 passes the reader and
        # overflows the jitted run (OverflowError, exit 1 with a traceback).
        Case("simulate", "pendulum", _dump(huge_steps), options=["--json"],
             ops=["regression: number SolverParams.Integration.max_steps = 1e300"]),
        # Found 2026-11-28 (seed 202): a plain metric with 'of: null' passed the sweep file's
        # schema and died in the pipeline (TypeError, a traceback).
        Case("sweep", "pendulum", _dump(_base_data("pendulum")), _dump(null_metric),
             ops=["regression: sweep Outputs.metrics.<first>.of = null"]),
    ]


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
    from sweep.cli.app import main

    folder.mkdir(parents=True)
    (folder / "model.yaml").write_text(case.model_text, encoding="utf-8")
    if case.command == "check":
        argv = ["check", str(folder / "model.yaml")]
    elif case.command == "simulate":
        argv = ["simulate", str(folder / "model.yaml")] + [
            o.replace("{folder}", str(folder)) for o in case.options]
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
    faulthandler.dump_traceback_later(max(WEDGED_SECONDS, 3 * seconds), exit=True, file=sys.__stderr__)
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
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
    seconds_taken = time.perf_counter() - t
    hang = hang or seconds_taken > seconds
    after = {p: v for p, v in snapshot(watched).items() if not p.startswith(str(folder) + os.sep)}
    stray = changed(before, after)
    if case.command == "sweep" and (folder / "out.zarr").exists():
        stray.append(str(folder / "out.zarr"))  # a dry run writes nothing, not even --out
    text = out.getvalue() + err.getvalue()
    traceback = traceback or "Traceback" in text
    return Outcome(code, traceback, hang, seconds_taken, stray, text)


# ------------------------------------------------------------------ a child process
def _serve(conn) -> None:
    """The child's loop: receive ``(case, folder, seconds)``, send back its :class:`Outcome`."""
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(run_case(*job))


class CaseRunner:
    """Runs cases one at a time in a child process, started afresh every ``recycle`` cases.

    The child keeps what the solver leaves in a process (every compiled
    model stays alive while its process does: ``solver.compiled``'s registry),
    so a long run cannot exhaust the memory maps of the caller, and a case
    that kills its process (an abort in compiled code, memory) is reported as
    a crash of that case instead of ending the run.  Use as a context manager::

        with CaseRunner() as runner:
            outcome = runner.run(case, folder)
    """

    def __init__(self, recycle: int = 200):
        self.recycle = recycle
        self._child = self._conn = None
        self._done = 0

    def __enter__(self) -> "CaseRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        conn, child_conn = ctx.Pipe()
        child = ctx.Process(target=_serve, args=(child_conn,), daemon=True)
        child.start()
        child_conn.close()
        self._child, self._conn, self._done = child, conn, 0

    def close(self) -> None:
        """Stop the child (it finishes nothing: call between cases)."""
        if self._child is None:
            return
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._child.join(10)
        if self._child.is_alive():
            self._child.kill()
            self._child.join()
        self._conn.close()
        self._child = self._conn = None

    def run(self, case: Case, folder: Path, seconds: int = CASE_SECONDS) -> Outcome:
        """:func:`run_case` in the child; a child that dies or never answers is a crash or hang."""
        if self._child is None or self._done >= self.recycle:
            self.close()
            self._start()
        self._done += 1
        t = time.perf_counter()
        self._conn.send((case, folder, seconds))
        # The child interrupts a case at ``seconds`` and ends itself at
        # WEDGED_SECONDS; this is the last resort.
        wait = max(WEDGED_SECONDS, 3 * seconds) + 60
        try:
            if self._conn.poll(wait):
                return self._conn.recv()
            hang, why = True, f"no answer from the child in {wait} s: killed"
        except (EOFError, OSError):
            self._child.join(5)
            # faulthandler ends a wedged child (exit code 1) at WEDGED_SECONDS.
            hang = time.perf_counter() - t >= max(WEDGED_SECONDS, 3 * seconds)
            why = f"the child process died (exit code {self._child.exitcode})"
        self._child.kill()
        self._child.join()
        self._conn.close()
        self._child = self._conn = None
        return Outcome(None, False, hang, time.perf_counter() - t, [], why, crash=not hang)
