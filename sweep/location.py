"""Where a sweep store lives: a local directory or an object-store URL.

A store is opened by Zarr from either (``zarr.open_group("s3://bucket/s.zarr")``
reaches S3 through fsspec). What Zarr does not offer is the handful of
file operations that the integrity checks need: a chunk's bytes with a stamp
that changes whenever it is rewritten, its size, whether it is there, and
removing a whole store. :class:`StoreLocation` gives them for both kinds:

- a local directory: the stamp is the file's modification time in
  nanoseconds (an ``int``);
- an object store (``s3://``, ``gs://``, any URL fsspec knows): the stamp is
  the object's ETag (a ``str``), which changes with every write.

Credentials for object stores come from the environment, as the storage
libraries read them (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, a profile,
an instance role...). They are never passed through mechsweep, so none can be
written into a store's attributes or a log.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["StoreLocation", "is_url"]


def is_url(where: Any) -> bool:
    """Whether ``where`` names an object store (``scheme://...``) rather than a local path."""
    return "://" in str(where)


def _stamp(info: dict) -> str:
    """What changes whenever an object is written: its ETag (S3), MD5 (GCS) or time."""
    return str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("mtime"))


class StoreLocation:
    """A store's root (or a group inside it) and the file operations the checks need.

    Args:
        where: a local path, an object-store URL such as ``s3://bucket/s.zarr``,
            or a ``StoreLocation``.

    Raises:
        ImportError: the URL's scheme needs a package that is not installed
            (``s3://`` needs ``s3fs``: ``pip install 'mechsweep[s3]'``).
    """

    def __init__(self, where: Any, _fs: Any = None, _root: str | None = None):
        if isinstance(where, StoreLocation):
            self.url, self.fs, self.root = where.url, where.fs, where.root
            return
        self.url = str(where).rstrip("/") if is_url(where) else str(where)
        if _fs is not None:
            self.fs, self.root = _fs, _root
        elif is_url(self.url):
            import fsspec

            self.fs, self.root = fsspec.core.url_to_fs(self.url)
            self.root = self.root.rstrip("/")
        else:
            self.fs, self.root = None, str(Path(self.url))

    @classmethod
    def of_group(cls, group) -> "StoreLocation":
        """The location of an open Zarr group (of a local or an fsspec store).

        Raises:
            ValueError: a store of another kind (in memory, zip).
        """
        store, sub = group.store, group.path
        while getattr(store, "_store", None) is not None:     # a zarr.storage.WrapperStore
            store = store._store
        if getattr(store, "root", None) is not None:          # zarr.storage.LocalStore
            root = Path(store.root) / sub if sub else Path(store.root)
            return cls(root)
        fs = getattr(store, "fs", None)
        if fs is not None:                                    # zarr.storage.FsspecStore
            root = "/".join(p for p in (store.path.rstrip("/"), sub) if p)
            # Zarr's file system is in asynchronous mode: open a synchronous one on the same URL.
            protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
            return cls(f"{protocol}://{root}")
        raise ValueError(f"a sweep store must be a local directory or an object store URL, "
                         f"not {store!r}")

    # ------------------------------------------------------------------ naming
    @property
    def remote(self) -> bool:
        """Whether this is an object store."""
        return self.fs is not None

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"StoreLocation({self.url!r})"

    def __truediv__(self, name: str) -> "StoreLocation":
        """The location of a group (or file) ``name`` inside this one."""
        if self.remote:
            return StoreLocation(f"{self.url}/{name}", _fs=self.fs, _root=f"{self.root}/{name}")
        return StoreLocation(Path(self.root) / name)

    @property
    def name(self) -> str:
        """The last part of the path (``s.zarr``)."""
        return self.url.rstrip("/").rsplit("/", 1)[-1] if self.remote else Path(self.root).name

    @property
    def parent(self) -> "StoreLocation":
        """The location one level up."""
        if self.remote:
            url, root = self.url.rsplit("/", 1)[0], self.root.rsplit("/", 1)[0]
            return StoreLocation(url, _fs=self.fs, _root=root)
        return StoreLocation(Path(self.root).parent)

    def _key(self, key: str) -> str:
        return f"{self.root}/{key}" if self.remote else os.path.join(self.root, key)

    # ------------------------------------------------------------- operations
    def exists(self, key: str = "") -> bool:
        """Whether the file ``key`` (or, with no key, anything at all) is there."""
        if self.remote:
            path = self._key(key) if key else self.root
            self.fs.invalidate_cache(path)
            return self.fs.exists(path)
        return os.path.exists(self._key(key) if key else self.root)

    def is_store(self) -> bool:
        """Whether a Zarr group's metadata (``zarr.json``) is here."""
        return self.exists("zarr.json")

    def read(self, key: str) -> tuple[bytes, int | str]:
        """A file's bytes and its stamp (modification time in ns, or ETag).

        Raises:
            FileNotFoundError: no such file.
        """
        if self.remote:
            path = self._key(key)
            stamp = self._info(path)[1]
            return self.fs.cat_file(path), stamp
        with open(self._key(key), "rb") as f:
            return f.read(), os.fstat(f.fileno()).st_mtime_ns

    def stat(self, key: str) -> tuple[int, int | str] | None:
        """A file's size and stamp; None when it is missing."""
        if self.remote:
            try:
                return self._info(self._key(key))
            except FileNotFoundError:
                return None
        try:
            st = os.stat(self._key(key))
        except FileNotFoundError:
            return None
        return st.st_size, st.st_mtime_ns

    def _info(self, path: str) -> tuple[int, str]:
        self.fs.invalidate_cache(path)        # a listing cached earlier would hide a rewrite
        info = self.fs.info(path)
        if info.get("type") == "directory":
            raise FileNotFoundError(path)
        return int(info["size"]), _stamp(info)

    # ---------------------------------------------------- many files at once
    # An object store answers each request after tens of milliseconds: the checks and the
    # workers ask for many chunks at once, concurrently (or by one listing), not one by one.

    def read_many(self, keys: list[str]) -> dict[str, tuple[bytes, int | str] | None]:
        """:meth:`read` of each key (None for a missing file); concurrent on an object store."""
        if not self.remote or not keys:
            out = {}
            for key in keys:
                try:
                    out[key] = self.read(key)
                except FileNotFoundError:
                    out[key] = None
            return out

        async def one(path):
            info = await self.fs._info(path)
            if info.get("type") == "directory":
                raise FileNotFoundError(path)
            return await self.fs._cat_file(path), _stamp(info)

        def plain(path):
            return self.fs.cat_file(path), _stamp(self.fs.info(path))

        return dict(zip(keys, self._gather(one, plain, [self._key(k) for k in keys])))

    def read_bytes_many(self, keys: list[str]) -> dict[str, bytes | None]:
        """The bytes of each file ``keys`` (None for a missing one), without their stamps.

        One request a file on an object store, where :meth:`read_many` makes
        two (the stamp is the object's ETag, from its own request).
        """
        if not self.remote or not keys:
            out = {}
            for key in keys:
                try:
                    with open(self._key(key), "rb") as f:
                        out[key] = f.read()
                except FileNotFoundError:
                    out[key] = None
            return out

        async def one(path):
            return await self.fs._cat_file(path)

        return dict(zip(keys, self._gather(one, self.fs.cat_file, [self._key(k) for k in keys])))

    def stats(self, keys: list[str]) -> dict[str, tuple[int, int | str] | None]:
        """:meth:`stat` of each key; on an object store from one listing of the store."""
        if not self.remote:
            return {key: self.stat(key) for key in keys}
        self.fs.invalidate_cache(self.root)
        try:
            listing = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            listing = {}
        found = {}
        for path, info in listing.items():
            found[path.removeprefix(self.root + "/")] = (int(info["size"]), _stamp(info))
        return {key: found.get(key) for key in keys}

    def _gather(self, one, plain, paths: list[str], limit: int = 32) -> list:
        """``one(path)`` of each path, concurrently (``plain(path)`` one by one on a synchronous file system)."""
        import asyncio

        from fsspec.asyn import sync

        for path in paths:
            self.fs.invalidate_cache(path)

        async def run():
            gate = asyncio.Semaphore(limit)

            async def guarded(path):
                async with gate:
                    try:
                        return await one(path)
                    except FileNotFoundError:
                        return None

            return await asyncio.gather(*(guarded(p) for p in paths))

        if getattr(self.fs, "async_impl", False):
            return sync(self.fs.loop, run)
        out = []
        for path in paths:                       # a synchronous file system: one by one
            try:
                out.append(plain(path))
            except FileNotFoundError:
                out.append(None)
        return out

    def upload(self, folder, last: tuple[str, ...] = ()) -> None:
        """Copy a local folder's files here, concurrently; files named in ``last`` after the rest.

        A store built in a local folder is published to an object store this
        way (there is no rename there): what marks it complete goes last.

        Args:
            folder: the local folder.
            last: keys (relative paths) to write only once all others are written.
        """
        folder = Path(folder)
        keys = sorted(str(p.relative_to(folder)).replace(os.sep, "/")
                      for p in folder.rglob("*") if p.is_file())
        first = [k for k in keys if k not in last]
        for batch in (first, [k for k in keys if k in last]):
            if batch:
                self.fs.put([str(folder / k) for k in batch], [self._key(k) for k in batch])
        self.fs.invalidate_cache(self.root)

    def remove(self) -> None:
        """Remove everything here (a whole store), if anything is."""
        if self.remote:
            if self.exists():
                self.fs.rm(self.root, recursive=True)
                self.fs.invalidate_cache(self.root)
        elif os.path.isdir(self.root) and not os.path.islink(self.root):
            shutil.rmtree(self.root)
        elif os.path.lexists(self.root):
            os.remove(self.root)
