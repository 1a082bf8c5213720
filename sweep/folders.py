"""A sweep store's folder: built aside and published by rename (local), leased to one writer (local or object store).

* :func:`temporary_sibling` names the folder a new store is built in
  (``.NAME.tmp-PID`` beside it) after removing the temporaries that runs
  killed while building left behind; :func:`publish` renames it into place
  and turns losing a creation race into a clear message.
* :class:`StoreLease` keeps two runs from writing one store at once: a lease
  file ``.NAME.lease`` beside the store, created exclusively, naming the
  process that holds it. A second writer is refused with a message naming
  the holder; a lease whose process is gone (same host, no such process) is
  taken over.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
from pathlib import Path

from solver.errors import InputError

__all__ = ["StoreLease", "publish", "temporary_sibling", "remove_stale_temporaries"]


def _alive(pid: int) -> bool:
    """Whether a process with this id runs on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: it exists
        return True
    return True


def remove_stale_temporaries(path) -> list[Path]:
    """Remove ``.NAME.tmp-PID`` folders beside ``path`` whose process is gone.

    A run killed while it built a store's template leaves such a folder;
    nothing else reads it. Folders of running processes are left alone.

    Args:
        path: the store's path.

    Returns:
        The folders removed.
    """
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    prefix = f".{path.name}.tmp-"
    for entry in path.parent.iterdir():
        if not entry.name.startswith(prefix):
            continue
        pid = entry.name[len(prefix):]
        if pid.isdigit() and not _alive(int(pid)) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def temporary_sibling(path) -> Path:
    """The folder to build the store at ``path`` in, stale temporaries removed first.

    Args:
        path: the store's path.

    Returns:
        ``.NAME.tmp-PID`` beside it, not existing.
    """
    path = Path(path)
    remove_stale_temporaries(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp


def publish(tmp: Path, path: Path) -> None:
    """Rename the built folder ``tmp`` to ``path``.

    Raises:
        InputError: another run created ``path`` meanwhile (the rename found
            it there); this run's folder is removed.
    """
    try:
        os.rename(tmp, path)
    except OSError:
        if not path.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError("another run created this store while this one was building it; "
                         "resume that store with --resume, or choose another --out path",
                         file=str(path)) from None


class StoreLease:
    """The right to write one store, held by one process at a time.

    Use as a context manager around a run's writes::

        with StoreLease(path):
            ...

    On an object store (``s3://...``) the lease is an object beside the
    store, created with a conditional write that fails when it exists (S3's
    ``If-None-Match``), so the same guarantee holds there.

    Attributes:
        path: the store.
        file: the lease file, ``.NAME.lease`` beside the store.
    """

    def __init__(self, path):
        from sweep.location import StoreLocation, is_url

        self.remote = is_url(path)
        if self.remote:
            where = StoreLocation(path)
            self.path = where
            self.file = where.parent / f".{where.name}.lease"
        else:
            self.path = Path(path)
            self.file = self.path.with_name(f".{self.path.name}.lease")
        self._held = False

    # The three operations on the lease file, local or remote.
    def _create(self, text: str) -> bool:
        if self.remote:
            try:
                with self.file.fs.open(self.file.root, "xb") as f:
                    f.write(text.encode())
            except FileExistsError:
                return False
            return True
        self.file.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return True

    def _read(self) -> str | None:
        try:
            if self.remote:
                self.file.fs.invalidate_cache(self.file.root)
                return self.file.fs.cat_file(self.file.root).decode()
            return self.file.read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def _remove(self) -> None:
        try:
            if self.remote:
                self.file.fs.rm_file(self.file.root)
            else:
                self.file.unlink()
        except FileNotFoundError:
            pass

    def holder(self) -> dict | None:
        """The lease file's record (pid, host, since), or None when nobody holds it."""
        try:
            data = json.loads(self._read() or "")
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def _stale(self, record: dict | None) -> bool:
        if record is None:
            return True    # unreadable or half written: its writer died while writing it
        pid = record.get("pid")
        return record.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid)

    def acquire(self) -> None:
        """Take the lease.

        Raises:
            InputError: another live process holds it (the message names it
                and says what to do).
        """
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        for _ in range(2):
            if not self._create(json.dumps(record)):
                held = self.holder()
                if not self._stale(held):
                    raise InputError(
                        f"another mechsweep run is writing this store (pid {held.get('pid')} on "
                        f"{held.get('host')}, since {held.get('since')}); wait for it to finish. If that "
                        f"run is gone (another host, or a lost machine), remove {self.file} and resume",
                        file=str(self.path)) from None
                # The holder is dead: take the lease over (one taker wins the create).
                self._remove()
                continue
            # Two takers of one stale lease: the second's unlink may remove the
            # first's new file; whoever's record is not there has lost.
            if (self.holder() or {}).get("pid") != os.getpid():
                continue
            self._held = True
            return
        raise InputError(f"could not take the lease {self.file}: another run took it first; "
                         f"wait for it to finish", file=str(self.path))

    def release(self) -> None:
        """Give the lease back (only a lease this object holds)."""
        if self._held:
            self._held = False
            held = self.holder()
            if held is None or held.get("pid") == os.getpid():
                self._remove()

    def __enter__(self) -> "StoreLease":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
