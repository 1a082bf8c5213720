"""Executables loaded ahead (``solver.program_prefetch``): a command's programs read while its model is read.

Specification:

* a command's process records the executables it asked JAX's compilation
  cache for; the next process of the same command on the same model file
  loads them on a background thread from its start, and JAX's cache read
  takes them from there: the second ``mechsweep simulate`` of a model is
  served at least its run program that way, and prints the same numbers,
  bit for bit, as the first (and as a third with ``MECHSWEEP_PROGRAMS_AHEAD=off``,
  which loads nothing ahead);
* a record that matches nothing (keys no longer in the cache) or cannot be
  read changes nothing: the command runs as without it; a record of the
  wrong shape loads nothing, and its entries without a text key are dropped;
* a record lists each executable once; past ``MAX_RECORDS`` records, saving
  one deletes those written longest ago, down to 80 % of it;
* an executable loaded ahead is served only for the compile options it was
  loaded with, and once; one whose load has not begun is read by the
  caller itself (the thread then skips it), never waited for, however often
  it is asked for.
"""

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from solver import program_prefetch

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = ROOT / "configs" / "mechanisms" / "pendulum.yaml"

# One command in a fresh process, as the console script runs it, then what the module counted.
_CHILD = """
import json, sys
from sweep.cli.app import main
from solver import program_prefetch
code = main(["simulate", sys.argv[1], "--json"])
print(json.dumps({"code": code, "stats": program_prefetch.stats}))
"""


def _simulate(cache: Path, **env_extra: str) -> tuple[dict, dict]:
    """(the ``simulate --json`` summary, the child's ``program_prefetch.stats``) of one fresh process."""
    env = dict(os.environ, MECHSWEEP_JAX_CACHE=str(cache), **env_extra)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(PENDULUM)], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    summary, counted = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    assert counted["code"] == 0, out.stderr
    return summary, counted["stats"]


def _numbers(summary: dict) -> dict:
    return {k: summary[k] for k in ("final", "t_end", "steps", "max_constraint_residual", "energy_drift")}


def _records(cache: Path) -> list[Path]:
    return sorted((cache / program_prefetch.SUBDIRECTORY).glob("*.json"))


def test_a_second_simulate_is_served_the_executables_loaded_ahead_and_prints_the_same_numbers(tmp_path):
    cache = tmp_path / "cache"
    first, counted = _simulate(cache)
    assert counted == {"loaded": 0, "served": 0}                 # nothing recorded yet: compiled and recorded
    (record,) = _records(cache)
    keys = [entry["key"] for entry in json.loads(record.read_text())]
    assert any("run" in key for key in keys), keys
    second, counted = _simulate(cache)
    assert counted["served"] >= 1 and counted["loaded"] >= counted["served"], counted
    assert _numbers(second) == _numbers(first)
    third, counted = _simulate(cache, **{program_prefetch.AHEAD_ENV: "off"})
    assert counted == {"loaded": 0, "served": 0}
    assert _numbers(third) == _numbers(first)


def test_a_record_that_matches_nothing_or_cannot_be_read_changes_nothing(tmp_path):
    cache = tmp_path / "cache"
    first, _ = _simulate(cache)
    (record,) = _records(cache)
    entries = json.loads(record.read_text())
    record.write_text(json.dumps([dict(entry, key=entry["key"][:-8] + "00000000") for entry in entries]))
    again, counted = _simulate(cache)
    assert counted == {"loaded": 0, "served": 0}
    assert _numbers(again) == _numbers(first)
    record.write_text("{ not json")
    again, counted = _simulate(cache)
    assert counted == {"loaded": 0, "served": 0}
    assert _numbers(again) == _numbers(first)


class _Options:
    def __init__(self, text: bytes):
        self.text = text

    def SerializeAsString(self) -> bytes:
        return self.text


class _Device:
    id = 0


def _read_within(seconds: float, *args):
    """``program_prefetch._read(*args)``, which must return within ``seconds`` (a wait for nothing fails, not hangs)."""
    answer = []
    reader = threading.Thread(target=lambda: answer.append(program_prefetch._read(*args)), daemon=True)
    reader.start()
    reader.join(seconds)
    assert answer, f"_read{args[:1]} waited for a load that never comes"
    return answer[0]


def test_an_executable_loaded_ahead_is_served_only_for_its_own_options_and_never_waited_for_unbegun(monkeypatch):
    read_by_jax = []
    monkeypatch.setattr(program_prefetch, "_original", lambda key, options, *_: read_by_jax.append(key) or ("jax", 0))
    for name, value in (("_asked", []), ("_taken", {}), ("_loaded", {}), ("_done", {}), ("_recording", True),
                        ("stats", {"loaded": 0, "served": 0})):
        monkeypatch.setattr(program_prefetch, name, value)
    ready = threading.Event()
    ready.set()
    program_prefetch._done.update({"a": ready, "b": ready, "c": threading.Event()})
    program_prefetch._taken.update({"a": "thread", "b": "thread"})
    program_prefetch._loaded.update({"a": (b"quick", "ahead-a", 1), "b": (b"quick", "ahead-b", 1)})
    devices = [_Device()]
    assert program_prefetch._read("a", _Options(b"quick"), None, devices) == ("ahead-a", 1)
    assert program_prefetch._read("b", _Options(b"optimised"), None, devices) == ("jax", 0)
    # "c" is in the record but its load has not begun: the caller reads it now (its event, never set, is not
    # waited for), and the thread will skip it.  Asked again, it is read again, still without waiting.
    assert _read_within(10, "c", _Options(b"quick"), None, devices) == ("jax", 0)
    assert program_prefetch._taken["c"] == "caller"
    assert _read_within(10, "c", _Options(b"quick"), None, devices) == ("jax", 0)
    # An executable is served once; asked again, JAX reads it.
    assert program_prefetch._read("a", _Options(b"quick"), None, devices) == ("jax", 0)
    assert read_by_jax == ["b", "c", "c", "a"]
    assert program_prefetch.stats == {"loaded": 0, "served": 1}
    assert [entry["key"] for entry in program_prefetch._asked] == ["a", "b", "c", "c", "a"]
    assert base64.b64decode(program_prefetch._asked[1]["options"]) == b"optimised"


def test_a_record_of_the_wrong_shape_loads_nothing_and_its_bad_entries_are_dropped(monkeypatch, tmp_path):
    given = []
    monkeypatch.setattr(program_prefetch, "_directory", lambda: str(tmp_path))
    monkeypatch.setattr(program_prefetch, "_install", lambda: True)
    monkeypatch.setattr(program_prefetch, "_load_all", given.append)   # what the loading thread would load
    monkeypatch.setattr(program_prefetch, "_done", {})
    monkeypatch.setattr(program_prefetch, "_recording", False)
    monkeypatch.delenv(program_prefetch.AHEAD_ENV, raising=False)
    good = {"key": "jit_run-0123", "options": "", "devices": [0]}
    for text, loaded in (("[1, 2", None),                                    # not JSON: no thread at all
                         (json.dumps({"key": "jit_run-0123"}), []),          # not a list: nothing to load
                         (json.dumps([good, {"key": ["not", "text"]}, 3, {"no key": 1}]), [good])):
        monkeypatch.setattr(program_prefetch, "_key", None)
        path = Path(program_prefetch._record_path(hashlib.sha256(b"simulate\0model\0").hexdigest()[:40]))
        path.write_text(text)
        assert program_prefetch.start("simulate", "model") is True
        for _ in range(500):
            if loaded is None or given:
                break
            threading.Event().wait(0.01)
        assert (given.pop() if given else None) == loaded


def test_past_the_most_records_those_written_longest_ago_are_deleted_when_a_record_is_saved(monkeypatch, tmp_path):
    monkeypatch.setattr(program_prefetch, "_directory", lambda: str(tmp_path))
    monkeypatch.setattr(program_prefetch, "MAX_RECORDS", 5)
    for age, name in enumerate(["f", "e", "d", "c", "b", "a"]):      # a: written longest ago
        old = tmp_path / f"{name}.json"
        old.write_text("[]")
        os.utime(old, (1e9 - age * 100, 1e9 - age * 100))
    monkeypatch.setattr(program_prefetch, "_key", "new")
    monkeypatch.setattr(program_prefetch, "_recording", True)
    monkeypatch.setattr(program_prefetch, "_asked", [{"key": "jit_run-1", "options": "", "devices": [0]},
                                                     {"key": "jit_run-1", "options": "", "devices": [0]}])
    program_prefetch.save()
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == ["d", "e", "f", "new"]   # 7 records: 80 % of 5 kept
    assert json.loads((tmp_path / "new.json").read_text()) == [{"key": "jit_run-1", "options": "", "devices": [0]}]
    assert program_prefetch._asked == [] and not program_prefetch._recording
