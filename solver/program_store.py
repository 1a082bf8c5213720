"""Compiled programs kept on disk under mechsweep's own key, loaded without tracing.

JAX's persistent compilation cache keeps XLA's executables, but it finds one
by the program's StableHLO, so every process first traces the program to a
jaxpr and lowers it, and for a model of some size that is most of a warm
start (docs/explanation/engines.md, "The program store").  This module keeps the lowered
program itself (``jax.export``'s serialised StableHLO, zstd-compressed) under a key that
mechsweep can compute *before* tracing:

* the identity of the model: a digest of the model file's data (as read,
  every repeat expanded and override merged), set on the DAE by the model
  reader (:func:`mark_dae`), plus its parameter defaults and the
  compiled model's settings (order, stage solver, engine, events) given by
  the caller;
* the program's name and its arguments' structure, shapes and dtypes, and
  its static arguments;
* the environment: the source of the ``solver`` package, the JAX and jaxlib
  versions, the backend and device, ``XLA_FLAGS`` and the JAX settings that
  change a trace.

A program built on a hit is exactly the one stored (the StableHLO is
deserialised and called, and XLA's executable comes from the compilation
cache), so a warm run gives the same bits as the run that stored it.  On a
miss the program is traced and exported once, written atomically, and the
run goes through the exported program too, so first and later runs take
one path.  A file that cannot be read back is traced again and rewritten.

The store lives in ``programs/`` under JAX's compilation cache directory
(``jax_compilation_cache_dir``, which the commands set) and is off where that
is unset, for DAEs built in Python (their residual is arbitrary code, which
no key can see through), or with ``MECHSWEEP_PROGRAM_STORE=off``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pathlib
import tempfile
import threading

import numpy as np

import jax

from solver.errors import limit, switch

__all__ = ["stored_jit", "mark_dae", "dae_identity", "store_directory", "program_stem", "stats",
           "STORE_ENV", "SUBDIRECTORY", "STORE_BYTES"]

#: The environment variable that turns the store off (``off``, ``0``, ``false``).
STORE_ENV = "MECHSWEEP_PROGRAM_STORE"

#: Where the programs go under JAX's compilation cache directory.
SUBDIRECTORY = "programs"

#: The store's default size; past it, the programs used longest ago are deleted
#: (``MECHSWEEP_PROGRAM_STORE_BYTES`` overrides it: ``500MB``, ``8GiB``).
STORE_BYTES = 2 * 2 ** 30

#: The name ending of a stored program (serialised, zstd-compressed).
_SUFFIX = ".exported.zst"

_log = logging.getLogger(__name__)
_lock = threading.Lock()

#: Counts of this process: programs loaded from the store, traced and stored, and
#: traced without the store after a failure to export or write.
stats = {"loaded": 0, "stored": 0, "unstored": 0}


def store_directory() -> pathlib.Path | None:
    """The directory of stored programs, or None when the store is off.

    Returns:
        ``<jax_compilation_cache_dir>/programs``; None when JAX has no
        compilation cache directory or :data:`STORE_ENV` says ``off``.
    """
    if not switch(STORE_ENV):
        return None
    root = jax.config.jax_compilation_cache_dir
    return pathlib.Path(root) / SUBDIRECTORY if root else None


# ------------------------------------------------------------------ keys
def _canonical(value) -> str:
    """A deterministic text of plain data (YAML's dicts, lists, strings, numbers)."""
    if isinstance(value, dict):
        items = sorted((_canonical(k), _canonical(v)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    if isinstance(value, np.ndarray):
        return f"array({value.dtype},{value.shape},{hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()})"
    return f"{type(value).__name__}:{value!r}"


def mark_dae(dae, kind: str, data) -> None:
    """Give a DAE read from a model file the fingerprint that lets its programs be stored.

    The fingerprint (``dae.source_fingerprint``) is a digest of the model's
    kind and data: equal data gives an equal digest in every process.

    Args:
        dae: the DAE the model reader built.
        kind: the model's kind (``DAE``, ``Lagrangian``, ``Mechanism``).
        data: the data the model was built from (plain YAML data: every
            repeat expanded, every override merged).
    """
    dae.source_fingerprint = hashlib.sha256(_canonical({"kind": kind, "data": data}).encode()).hexdigest()


def dae_identity(dae, *settings) -> str | None:
    """The key part that names one compiled model of a DAE, or None for a DAE built in Python.

    Args:
        dae: the DAE (its ``source_fingerprint``, parameter defaults, events
            and event capacity are part of the identity).
        *settings: plain values that select the compiled model (order,
            stage solver, engine, ...).

    Returns:
        A hex digest, or None when the DAE has no ``source_fingerprint``.
    """
    source = getattr(dae, "source_fingerprint", None)
    if source is None:
        return None
    events = [(e.name, e.direction, e.terminal, e.cooldown, e.kind, e.zeno_time, e.record,
               e.reset is None, e.restitution is None) for e in getattr(dae, "events", ())]
    parts = {"source": source, "class": type(dae).__qualname__, "settings": list(settings),
             "params": {k: np.asarray(v) for k, v in dae.params.items()}, "events": events,
             "max_events": getattr(dae, "max_events", None)}
    return hashlib.sha256(_canonical(parts).encode()).hexdigest()


@functools.cache
def _source_digest() -> str:
    """A digest of every Python file of the ``solver`` package (a changed line is a new program)."""
    root = pathlib.Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _environment() -> str:
    import jaxlib
    device = jax.devices()[0]
    config = {name: getattr(jax.config, name, None) for name in
              ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_dtype_promotion",
               "jax_numpy_rank_promotion")}
    return _canonical({"solver": _source_digest(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                       "backend": jax.default_backend(), "device": device.device_kind,
                       "xla_flags": os.environ.get("XLA_FLAGS", ""), "config": config})


def _key(identity: str, name: str, statics: dict, tree, avals) -> str:
    shapes = [(tuple(a.shape), str(a.dtype), bool(getattr(a, "weak_type", False))) for a in avals]
    text = _canonical({"identity": identity, "name": name, "statics": {k: repr(v) for k, v in statics.items()},
                       "tree": str(tree), "avals": shapes, "environment": _environment()})
    return hashlib.sha256(text.encode()).hexdigest()


def program_stem(directory: pathlib.Path, identity: str, name: str, statics: dict, tree, avals) -> pathlib.Path:
    """Where the files of one program go in the store, less their ending.

    Args:
        directory: the store (:func:`store_directory`).
        identity: the compiled model's :func:`dae_identity`.
        name: the program's name within it.
        statics: its static arguments by name.
        tree, avals: the tree structure and abstract values of its other arguments.

    Returns:
        ``directory / "<name>-<first 40 hex digits of the key>"``.
    """
    return directory / f"{name}-{_key(identity, name, statics, tree, avals)[:40]}"


# ------------------------------------------------------------------ the jit
def stored_jit(fn, identity: str | None, name: str, *, static_argnames=(), compiler_options=None):
    """``jax.jit(fn)``, whose lowered program is kept in and loaded from the store.

    Args:
        fn: the function to compile (arrays in, arrays out; no host callbacks).
        identity: what the program is of (:func:`dae_identity`); None: a
            plain ``jax.jit``.
        name: the program's name within that identity (``"run"``, ...).
        static_argnames: keyword arguments passed as Python values (part of
            the key).
        compiler_options: XLA options, as for ``jax.jit``.

    Returns:
        A jitted function with ``fn``'s signature.  Where the store is off
        (:func:`store_directory`) it is ``jax.jit(fn, ...)`` itself.
    """
    static_argnames = tuple(static_argnames)
    if identity is None or store_directory() is None:
        return jax.jit(fn, static_argnames=static_argnames, compiler_options=compiler_options)

    def traced(*args, **kwargs):
        # Runs only when JAX traces this jit (a new shape or static value):
        # the stored program replaces the trace of fn.
        statics = {k: kwargs.pop(k) for k in static_argnames if k in kwargs}
        leaves, tree = jax.tree.flatten((args, kwargs))
        avals = [jax.typeof(x) for x in leaves]
        program = _program(fn, identity, name, statics, tree, avals)
        if program is None:
            return fn(*args, **kwargs, **statics)
        return program.call(*args, **kwargs)

    traced.__name__ = f"stored_{getattr(fn, '__name__', name)}"
    return jax.jit(traced, static_argnames=static_argnames, compiler_options=compiler_options)


def _program(fn, identity, name, statics, tree, avals):
    """The exported program for these arguments: read from the store, or traced and written."""
    from jax import export

    directory = store_directory()
    if directory is None:  # turned off since the jit was made
        return None
    stem = program_stem(directory, identity, name, statics, tree, avals)
    path = stem.with_name(stem.name + _SUFFIX)
    if path.exists():
        try:
            program = export.deserialize(bytearray(_decompress(path.read_bytes())))
            with contextlib.suppress(OSError):
                os.utime(path)  # used now: the last to go when the store is pruned
            with _lock:
                stats["loaded"] += 1
            return program
        except Exception as exc:  # a truncated or foreign file: traced again and replaced
            _log.warning("stored program %s could not be read (%s); tracing it again", path.name, exc)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False)) for a in avals]
    args, kwargs = jax.tree.unflatten(tree, structs)
    try:
        program = export.export(jax.jit(functools.partial(fn, **statics)))(*args, **kwargs)
        blob = _compress(program.serialize())
    except Exception as exc:  # something export cannot express: the plain trace
        _log.warning("program %s could not be exported (%s); it is traced in every process", name, exc)
        with _lock:
            stats["unstored"] += 1
        return None
    tmp = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".partial-")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)  # readers see the whole file or none
        _prune(directory, limit("PROGRAM_STORE_BYTES", STORE_BYTES), keep=path)
    except OSError as exc:
        _log.warning("program %s could not be stored in %s (%s)", name, directory, exc)
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    with _lock:
        stats["stored"] += 1
    return program


def _compress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


def _decompress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdDecompressor().decompress(data)


def _prune(directory: pathlib.Path, max_bytes: int, keep: pathlib.Path) -> None:
    """Delete the programs used longest ago until the store holds at most 80 % of ``max_bytes``.

    Only when it holds more than ``max_bytes``; never ``keep`` (the program
    just written).  A file another process deletes first is skipped.
    """
    files = []
    for path in directory.glob(f"*{_SUFFIX}"):
        with contextlib.suppress(OSError):
            stat = path.stat()
            files.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    if total <= max_bytes:
        return
    for _, size, path in sorted(files, key=lambda f: f[0]):
        if total <= 0.8 * max_bytes:
            break
        if path == keep:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
