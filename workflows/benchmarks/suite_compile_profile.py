"""Where the test suite's time goes: a pytest plugin that records every XLA compile, and its summary.

The suite is compile-bound (issue 11): this measures by how much, and which
programs.  As a plugin (``-p suite_compile_profile`` with this folder on
``PYTHONPATH``) it records, per test, JAX's compile-phase durations (tracing,
lowering, XLA) and every persistent-cache miss (program name, seconds) and
hit, and each pytest worker writes them to ``$SUITE_PROFILE_DIR``
(default ``/tmp/suite_profile``).  Run as a script it summarises those files.

Command (from an empty compile cache, as workflows/benchmarks/results/suite_compile.txt)::

    rm -rf /tmp/suite_profile /tmp/emptycache
    PYTHONPATH=workflows/benchmarks MECHSWEEP_JAX_CACHE=/tmp/emptycache \\
        .venv/bin/python -m pytest -q -n auto --dist loadfile -p suite_compile_profile tests
    .venv/bin/python workflows/benchmarks/suite_compile_profile.py
"""

from __future__ import annotations

import collections
import glob
import json
import os
import time

import pytest

OUT_DIR = os.environ.get("SUITE_PROFILE_DIR", "/tmp/suite_profile")

_current = {"test": "<collection>"}
_phases: dict = collections.defaultdict(lambda: collections.defaultdict(float))
_programs: list = []
_tests: list = []  # (node id, wall-clock start, end) of each test's setup, call and teardown


def _install():
    """Listen to JAX's duration events and wrap its compile-and-cache-write step."""
    import jax.monitoring
    from jax._src import compiler

    def on_duration(event, duration, **_):
        _phases[_current["test"]][event] += duration

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    real_compile = compiler._compile_and_write_cache
    real_hit = compiler.log_persistent_cache_hit

    def compile_and_write(backend, computation, devices, options, callbacks, module_name, cache_key):
        start = time.monotonic()
        out = real_compile(backend, computation, devices, options, callbacks, module_name, cache_key)
        _programs.append(("miss", _current["test"], module_name, time.monotonic() - start))
        return out

    def hit(module_name, cache_key):
        _programs.append(("hit", _current["test"], module_name, 0.0))
        return real_hit(module_name, cache_key)

    compiler._compile_and_write_cache = compile_and_write
    compiler.log_persistent_cache_hit = hit


def pytest_configure(config):
    _install()


def pytest_runtest_setup(item):
    _current["test"] = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.time()
    yield
    _tests.append((item.nodeid, start, time.time()))


def pytest_sessionfinish(session):
    os.makedirs(OUT_DIR, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(OUT_DIR, f"{worker}.json"), "w") as f:
        json.dump({"phases": _phases, "programs": _programs, "tests": _tests}, f)


def _recorded(folder: str) -> dict:
    """{worker: its recorded data} of the files in ``folder`` (the pytest workers', or the one of a plain run)."""
    paths = sorted(glob.glob(os.path.join(folder, "gw*.json")) or glob.glob(os.path.join(folder, "*.json")))
    return {os.path.basename(path)[:-5]: json.load(open(path)) for path in paths}


def _per_file(runs) -> dict[str, float]:
    """{test file: seconds its tests took (setup, call, teardown)}, largest first."""
    per_file = collections.defaultdict(float)
    for nodeid, start, end in runs:
        per_file[nodeid.split("::")[0]] += end - start
    return dict(sorted(per_file.items(), key=lambda kv: -kv[1]))


def summarise(folder: str = OUT_DIR, top: int = 25) -> str:
    """The recorded workers' totals, programs by name and the slowest compiles, as text."""
    phases, programs, workers = collections.defaultdict(float), [], {}
    recorded = _recorded(folder)
    for worker, data in recorded.items():
        workers[worker] = data.get("tests", [])
        for per_test in data["phases"].values():
            for event, seconds in per_test.items():
                phases[event] += seconds
        programs += data["programs"]
    misses = [p for p in programs if p[0] == "miss"]
    lines = ["JAX compile phases, all workers (seconds):"]
    lines += [f"  {seconds:8.1f}  {event}" for event, seconds in sorted(phases.items(), key=lambda kv: -kv[1])]
    lines.append(f"programs compiled: {len(misses)} ({sum(p[3] for p in misses):.1f} s); "
                 f"loaded from the cache: {sum(p[0] == 'hit' for p in programs)}")
    for low, high in ((0, 1), (1, 5), (5, 15), (15, 1e9)):
        sel = [p[3] for p in misses if low <= p[3] < high]
        lines.append(f"  compiles of {low}-{high if high < 1e9 else 'inf'} s: {len(sel):5d}, {sum(sel):7.1f} s")
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for p in misses:
        by_name[p[2]][0] += 1
        by_name[p[2]][1] += p[3]
    lines.append("by program name (count, seconds):")
    lines += [f"  {n:5d} {s:7.1f}  {name}" for name, (n, s) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]]
    lines.append(f"the {top} slowest compiles:")
    lines += [f"  {p[3]:6.1f} s  {p[2]:20s} {p[1]}" for p in sorted(misses, key=lambda p: -p[3])[:top]]
    lines += _schedule(workers, top)
    lines += _split_phases(recorded, top, key=lambda nodeid: nodeid.split("::")[0], what="test files")
    lines += _split_phases(recorded, top, key=lambda nodeid: nodeid, what="tests")
    return "\n".join(lines)


PHASE_COLUMNS = (("trace", "/jax/core/compile/jaxpr_trace_duration"),
                 ("lower", "/jax/core/compile/jaxpr_to_mlir_module_duration"),
                 ("xla", "/jax/core/compile/backend_compile_duration"))


def _split_phases(recorded: dict, top: int, key, what: str) -> list[str]:
    """Lines splitting the seconds of the ``top`` longest groups of tests (``key(node id)``: a file, or the
    test itself) into tracing, lowering, XLA and the rest."""
    groups = collections.defaultdict(lambda: collections.defaultdict(float))
    for data in recorded.values():
        for nodeid, start, end in data.get("tests", []):
            groups[key(nodeid)]["total"] += end - start
        for test, per_test in data["phases"].items():
            for column, event in PHASE_COLUMNS:
                groups[key(test)][column] += per_test.get(event, 0.0)
    timed = [kv for kv in groups.items() if kv[1]["total"]]  # phases outside a timed test (collection) left out
    if not timed:
        return []
    lines = [f"the {top} longest {what} split (seconds): total, trace, lower, xla, rest"]
    for name, cols in sorted(timed, key=lambda kv: -kv[1]["total"])[:top]:
        phases = [cols[column] for column, _ in PHASE_COLUMNS]
        lines.append(f"  {cols['total']:7.1f} {phases[0]:7.1f} {phases[1]:7.1f} {phases[2]:7.1f} "
                     f"{cols['total'] - sum(phases):7.1f}  {name}")
    return lines


def _schedule(workers: dict, top: int) -> list[str]:
    """Lines on how the test files shared the workers: each worker's busy time and idle tail, the longest files."""
    runs = [t for tests in workers.values() for t in tests]
    if not runs:
        return []
    first, last = min(t[1] for t in runs), max(t[2] for t in runs)
    lines = [f"workers (tests' wall-clock span {last - first:.0f} s):"]
    for name, tests in sorted(workers.items()):
        if tests:
            end = max(t[2] for t in tests)
            lines.append(f"  {name}: busy {sum(t[2] - t[1] for t in tests):6.0f} s, "
                         f"idle at the end {last - end:5.0f} s, last file {tests[-1][0].split('::')[0]}")
    lines.append(f"the {top} longest test files (seconds):")
    lines += [f"  {s:7.1f}  {f}" for f, s in list(_per_file(runs).items())[:top]]
    return lines


def file_seconds(folder: str = OUT_DIR) -> dict[str, float]:
    """{test file: seconds its tests took (setup, call, teardown)} from the recorded workers, largest first."""
    runs = [t for data in _recorded(folder).values() for t in data.get("tests", [])]
    return {f: round(s, 1) for f, s in _per_file(runs).items()}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write-file-seconds", metavar="JSON",
                        help="also write each test file's seconds here (tests/file_seconds.json: the order "
                             "in which conftest.py hands files to pytest-xdist's workers)")
    args = parser.parse_args()
    print(summarise())
    if args.write_file_seconds:
        with open(args.write_file_seconds, "w") as f:
            json.dump(file_seconds(), f, indent=0)
            f.write("\n")
