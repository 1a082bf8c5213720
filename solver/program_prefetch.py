"""Executables loaded ahead: a command's programs read from the compilation cache while its model is still being read.

A warm command (``mechsweep simulate MODEL`` with every program in JAX's
persistent compilation cache) spends a large part of its start loading
executables: XLA rebuilds each one's HLO module and its buffer assignment
from the cache entry, 0.3-0.5 s for a mid-size model's run program on the
2-core machine.  The run program's load started only once the model was read
and its compiled model built, so the command waited for it.

This module starts those loads at the command's start instead, on one
background thread (XLA releases Python's lock while it deserialises, so the
load takes the other core while the main thread reads the model):

1. :func:`start` is given a key for what is about to run (the command and
   the bytes of its model file).  It reads the record this key's last process
   left (``<cache>/prefetch/<key>.json``: the cache keys of the executables
   that process asked the cache for, with their compile options and
   devices) and deserialises those executables, largest first;
2. JAX's cache read (``jax._src.compilation_cache.get_executable_and_time``,
   which :func:`start` wraps) returns an executable loaded ahead when its
   cache key and compile options are the ones asked for, waiting for it if
   its load is under way.  One whose load has not begun is read by the
   caller as before, and the thread skips it: the small programs a command
   needs first are not queued behind the large one it needs last;
3. :func:`save` writes this process's record for the next one.

:func:`programs_loaded_ahead` does both around a block (the commands that
compile in their own process use it: ``mechsweep simulate``,
``equilibrium``, ``plot`` and ``animate`` of a model file, ``design`` and
``sweep --estimate``).

An executable is served only for the exact cache key and compile options it
was stored under, so a run gives the same bits with or without this module;
a stale or foreign record only costs the spare core some work.  Anything
unexpected (a cache entry gone, a JAX whose internals differ) falls back to
JAX's own read.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading

from solver.errors import switch

__all__ = ["programs_loaded_ahead", "start", "save", "stats", "SUBDIRECTORY", "AHEAD_ENV", "MAX_RECORDS"]

#: Where the records go under JAX's compilation cache directory.
SUBDIRECTORY = "prefetch"

#: The most records kept; past it, the records written longest ago are deleted down to 80 % of it.  A
#: record is a few kilobytes, one per command, build choice and version of a file.
MAX_RECORDS = 1000

#: The environment variable that turns loading ahead off (``off``, ``0``, ``false``, ``no``): every
#: executable is then read when JAX asks for it, and no record is read or written.
AHEAD_ENV = "MECHSWEEP_PROGRAMS_AHEAD"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_key: str | None = None
_asked: list[dict] = []       # what this process asked the cache for, in order (the next record)
_recording = False            # from start() to save(): a long session does not keep a list forever
_taken: dict[str, str] = {}   # cache key -> who reads it: "thread" (loaded ahead) or "caller" (read by JAX)
_loaded: dict[str, tuple] = {}   # cache key -> (compile options' bytes, executable, compile time)
_done: dict[str, threading.Event] = {}
_original = None

#: Counts of this process: executables loaded ahead, and of them served to a caller.
stats = {"loaded": 0, "served": 0}


def _directory():
    import jax

    root = jax.config.jax_compilation_cache_dir
    return os.path.join(root, SUBDIRECTORY) if root else None


def _record_path(key: str):
    directory = _directory()
    return os.path.join(directory, f"{key}.json") if directory else None


@contextlib.contextmanager
def programs_loaded_ahead(*parts: str | bytes):
    """Context manager: :func:`start` on entry, :func:`save` on exit (also when the block raises).

    Args:
        *parts: what identifies the work in the block (see :func:`start`).

    Yields:
        :func:`start`'s answer: whether executables are served from loads ahead.
    """
    started = start(*parts)
    try:
        yield started
    finally:
        if started:
            save()


def start(*parts: str | bytes) -> bool:
    """Begin loading, on a background thread, the executables that the last process of the same key asked for.

    Call it once, at the start of a command, after JAX's compilation cache is
    configured; :func:`save` at its end writes the record for the next one.

    Args:
        *parts: what identifies the work to come (a command's name, its
            build choice, its model file's bytes): their digest keys the record.

    Returns:
        True when this process serves executables loaded ahead (the hook
        is installed, whether or not a record was found); False when there
        is no compilation cache, :data:`AHEAD_ENV` says ``off``, this JAX
        has no such hook point, or :func:`start` was called before.
    """
    global _key, _recording
    if not switch(AHEAD_ENV):
        return False
    if _key is not None or _directory() is None or not _install():
        return False
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    _key = h.hexdigest()[:40]
    _recording = True
    try:
        with open(_record_path(_key)) as f:
            record = [entry for entry in json.load(f) if isinstance(entry, dict) and isinstance(entry.get("key"), str)]
    except (OSError, ValueError, TypeError):  # TypeError: a record that is not a list
        return True  # no record yet (a first run): this process writes one
    with _lock:
        for entry in record:
            _done.setdefault(entry["key"], threading.Event())
    threading.Thread(target=_load_all, args=(record,), name="mechsweep-prefetch", daemon=True).start()
    return True


def save() -> None:
    """Write this process's record (the executables it asked the cache for) for the next :func:`start` of its key.

    Nothing happens without a :func:`start` or when nothing was asked.  What
    the process asks for after this is not recorded.
    """
    global _recording
    if _key is None:
        return
    with _lock:
        first = {}
        for entry in _asked:   # each executable once, where it was first asked for
            first.setdefault(entry["key"], entry)
        asked, _recording = list(first.values()), False
        _asked.clear()
    if not asked:
        return
    _log.debug("programs: %d executables loaded ahead, %d of them used", stats["loaded"], stats["served"])
    path = _record_path(_key)
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".partial-")
        with os.fdopen(fd, "w") as f:
            json.dump(asked, f)
        os.replace(tmp, path)  # the next process reads the whole record or none
        tmp = None
        _prune(os.path.dirname(path), MAX_RECORDS)
    except OSError as exc:  # a read-only cache: the next process loads nothing ahead
        _log.debug("record of the executables not written (%s)", exc)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(directory: str, most: int) -> None:
    """Past ``most`` records, delete those written longest ago until 80 % of ``most`` are left."""
    records = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(".json"):
                with contextlib.suppress(OSError):
                    records.append((entry.stat().st_mtime, entry.path))
    if len(records) <= most:
        return
    for _, path in sorted(records)[:len(records) - int(0.8 * most)]:
        with contextlib.suppress(OSError):   # another process deleted it first
            os.unlink(path)


def _install() -> bool:
    """Wrap JAX's persistent-cache read, once; False where this JAX has no such function."""
    global _original
    if _original is not None:
        return True
    try:
        from jax._src import compilation_cache
    except ImportError:
        return False
    original = getattr(compilation_cache, "get_executable_and_time", None)
    if original is None:
        return False
    _original = original
    compilation_cache.get_executable_and_time = _read
    return True


def _read(cache_key, compile_options, backend, executable_devices):
    """JAX's cache read, served from the executables loaded ahead where one matches."""
    options = compile_options.SerializeAsString()
    with _lock:
        if _recording:
            _asked.append({"key": cache_key, "options": base64.b64encode(options).decode(),
                           "devices": [device.id for device in executable_devices]})
        ahead = _taken.setdefault(cache_key, "caller") == "thread"
        done = _done.get(cache_key)
    if ahead and done is not None:
        done.wait()
        with _lock:
            loaded = _loaded.pop(cache_key, None)
            served = loaded is not None and loaded[0] == options
            stats["served"] += served
        if served:
            return loaded[1], loaded[2]
    return _original(cache_key, compile_options, backend, executable_devices)


def _load_all(record: list[dict]) -> None:
    """Deserialise the record's executables, largest first (the thread's work)."""
    try:
        from jax._src import compilation_cache, xla_bridge
        from jax._src.lib import xla_client

        backend = xla_bridge.get_backend()
        cache = compilation_cache._get_cache(backend)
        devices = {device.id: device for device in backend.devices()}
    except Exception as exc:  # a JAX whose internals differ: no key is taken, every read goes to JAX
        _log.debug("executables not loaded ahead: %s", exc)
        return
    root = os.path.dirname(_directory())
    # The largest (a run program) first: a command needs its small programs (the consistent start's)
    # first, and reads those itself while this thread loads the large one.
    record = sorted(record, key=lambda entry: -_size(os.path.join(root, f"{entry['key']}-cache")))
    for entry in record:
        key = entry["key"]
        with _lock:
            if key in _taken:   # read by a caller already, or listed twice
                continue
            _taken[key] = "thread"
        try:
            raw = cache.get(key) if cache is not None else None
            if raw is not None:
                serialized, compile_time = compilation_cache.extract_executable_and_time(
                    compilation_cache.decompress_executable(raw))
                options = base64.b64decode(entry["options"])
                executable = backend.deserialize_executable(
                    serialized, xla_client.DeviceList(tuple(devices[i] for i in entry["devices"])),
                    xla_client.CompileOptions.ParseFromString(options))
                with _lock:
                    _loaded[key] = (options, executable, compile_time)
                    stats["loaded"] += 1
        except Exception as exc:  # a foreign or damaged entry: the caller reads it as JAX does
            _log.debug("executable %s not loaded ahead: %s", key, exc)
        finally:
            _done[key].set()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
