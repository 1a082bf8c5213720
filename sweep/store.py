"""Zarr store of a sweep: template, per-batch region writes, status, resume.

Layout (one Zarr v3 group, written through xarray, chunked along ``point`` by
the sweep's batch size so that one batch is one chunk of every variable):

- coordinates: one per swept parameter on ``point``; ``time``; one per
  component dimension of the outputs (e.g. ``axis``);
- data variables from the :class:`Schema`, ``(point, *dims)`` float64, NaN
  until written (the template never writes their chunks, and NaN is the Zarr
  fill value);
- ``status(point)`` int8 (codes in :mod:`solver.status`, -1 = pending) and
  ``steps(point)`` int64 (-1 until written);
- ``batch_message(batch)`` text (why a batch failed, empty otherwise) and
  ``batch_seconds(batch)`` (compute time of the batch on its worker).

A batch is written data first and ``status`` last, and a local Zarr store
writes each chunk atomically (temporary file + rename), so a batch is complete
exactly when its status chunk holds no -1: a driver killed at any moment
leaves a store that resumes correctly.

Only local filesystem paths are supported as stores (the template is created
in a temporary directory and renamed into place, which object stores cannot
do).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import dask.array as da
import numpy as np
import xarray as xr
import zarr

from solver import status as st
from solver.errors import InputError
from solver.solution import package_versions

__all__ = [
    "BatchResult", "Schema", "MODES", "create_template", "prepare_store", "write_batch",
    "read_status", "pending_batches", "failed_points", "failed_batches", "open_store",
    "store_attrs", "batch_slices", "status_report",
]

#: How an existing store is treated (see :func:`prepare_store`).
MODES = ("resume", "overwrite", "retry-failed")

#: Variables every sweep store has besides the schema's; schema names must differ.
RESERVED = ("status", "steps", "batch_message", "batch_seconds", "point", "batch", "time")

STORE_FORMAT = 1


@dataclass
class BatchResult:
    """What a batch function returns for ``B`` points.

    Attributes:
        status: ``(B,)`` int8 status codes (:mod:`solver.status`), none pending.
        steps: ``(B,)`` integer step counts.
        data: output name -> array with leading dimension ``B`` and the rest as
            in the :class:`Schema` (e.g. ``(B, T)`` or ``(B, T, 3)``).
        message: why the batch (or some of its points) failed; empty when fine.
        seconds: compute time of the batch, filled in by the runtime.
    """

    status: np.ndarray
    steps: np.ndarray
    data: dict[str, np.ndarray]
    message: str = ""
    seconds: float = math.nan

    @classmethod
    def failed(cls, n: int, code: int, message: str) -> "BatchResult":
        """A result in which all ``n`` points failed with ``code`` and carry no data.

        Args:
            n: number of points in the batch.
            code: the status code for all of them.
            message: why.

        Returns:
            The result; missing data are written as NaN by :func:`write_batch`.
        """
        return cls(np.full(n, code, np.int8), np.zeros(n, np.int64), {}, message)


@dataclass(frozen=True)
class Schema:
    """Shapes of the per-point outputs, without the ``point`` dimension.

    Attributes:
        time: the output times ``(T,)``.
        variables: output name -> its dimensions after ``point``, each either
            ``"time"`` or a key of ``coords``; ``()`` for a scalar per point
            (a metric).
        coords: component dimension -> its coordinate values, e.g.
            ``{"axis": ["x", "y", "z"]}``.
        attrs: variable or coordinate name -> attributes (e.g. ``units``).
    """

    time: np.ndarray
    variables: Mapping[str, tuple[str, ...]]
    coords: Mapping[str, np.ndarray] = field(default_factory=dict)
    attrs: Mapping[str, Mapping] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        """Length of every dimension other than ``point``."""
        out = {"time": len(self.time)}
        out.update({name: len(values) for name, values in self.coords.items()})
        return out

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of one point's value of output ``name`` (without ``point``)."""
        sizes = self.sizes()
        return tuple(sizes[d] for d in self.variables[name])

    def validate(self, parameters=()) -> None:
        """Check names and dimensions.

        Args:
            parameters: the swept parameter names (they become coordinates, so
                outputs must not reuse them).

        Raises:
            ValueError: an unknown dimension or a clashing name.
        """
        sizes = self.sizes()
        for name, dims in self.variables.items():
            if name in RESERVED or name in parameters or name in self.coords:
                raise ValueError(f"output name {name!r} clashes with a coordinate or a "
                                 f"reserved variable ({', '.join(RESERVED)})")
            for d in dims:
                if d not in sizes:
                    raise ValueError(f"output {name!r} has dimension {d!r}, which is neither "
                                     f"'time' nor one of the schema coords {sorted(self.coords)}")


def batch_slices(n_points: int, batch: int) -> list[slice]:
    """The point ranges of the batches: ``batch`` points each, the last one shorter.

    Args:
        n_points: number of points of the sweep.
        batch: points per batch (positive).

    Returns:
        One slice per batch, in order.
    """
    return [slice(start, min(start + batch, n_points)) for start in range(0, n_points, batch)]


def _attr_value(value):
    """A JSON-safe attribute value: scalars and flat lists kept, the rest as JSON text."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, bool, int, float)) for v in value):
        return list(value)
    return json.dumps(value, default=str, sort_keys=True)


def _is_store(path: Path) -> bool:
    return (path / "zarr.json").is_file()


def _template(spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
              attrs: Mapping, batch: int) -> tuple[xr.Dataset, dict]:
    """The template dataset and its encoding (chunking: one batch per chunk)."""
    names = list(points)
    n = len(next(iter(points.values()))) if points else 0
    if n == 0:
        raise ValueError("a sweep needs at least one point")
    for name, values in points.items():
        if np.shape(values) != (n,):
            raise ValueError(f"swept parameter {name!r} has shape {np.shape(values)}, "
                             f"expected ({n},) like the others")
    schema.validate(names)
    sizes = schema.sizes()
    n_batches = -(-n // batch)

    coords = {name: ("point", np.asarray(values)) for name, values in points.items()}
    coords["time"] = ("time", np.asarray(schema.time, dtype=np.float64))
    for dim, values in schema.coords.items():
        values = np.asarray(values)
        # Text components (axis names) go in as variable-length strings: the
        # fixed-width numpy form has no Zarr v3 specification yet.
        coords[dim] = (dim, values.astype(object) if values.dtype.kind == "U" else values)

    data_vars, encoding = {}, {}
    for name, dims in schema.variables.items():
        shape = (n,) + tuple(sizes[d] for d in dims)
        chunks = (batch,) + shape[1:]
        data_vars[name] = (("point",) + tuple(dims),
                           da.full(shape, np.nan, dtype=np.float64, chunks=chunks),
                           dict(schema.attrs.get(name, {})))
        encoding[name] = {"chunks": chunks, "fill_value": np.nan}
    data_vars["status"] = ("point", np.full(n, st.PENDING, np.int8), st.cf_attrs())
    data_vars["steps"] = ("point", np.full(n, -1, np.int64),
                          {"long_name": "accepted integration steps (-1: not run)"})
    data_vars["batch_message"] = ("batch", np.full(n_batches, "", dtype=object),
                                  {"long_name": "why the batch failed (empty: no message)"})
    data_vars["batch_seconds"] = ("batch", np.full(n_batches, np.nan),
                                  {"long_name": "compute time of the batch on its worker",
                                   "units": "s"})
    for name in ("status", "steps"):
        encoding[name] = {"chunks": (batch,)}
    for name in ("batch_message", "batch_seconds"):
        encoding[name] = {"chunks": (min(n_batches, 1024),)}

    all_attrs = {str(k): _attr_value(v) for k, v in attrs.items()}
    all_attrs.update({
        "sweep_hash": str(spec_hash),
        "sweep_batch": int(batch),
        "sweep_n_points": int(n),
        "sweep_parameters": names,
        "sweep_outputs": list(schema.variables),
        "package_versions": json.dumps(package_versions(), sort_keys=True),
        "mechsweep_store_format": STORE_FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })
    ds = xr.Dataset(data_vars, coords=coords, attrs=all_attrs)
    for name, a in schema.attrs.items():
        if name in ds.coords:
            ds[name].attrs.update(a)
    return ds, encoding


def create_template(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
                    attrs: Mapping, batch: int) -> None:
    """Write an empty sweep store: coordinates, attributes, pending status.

    The data variables are dask-backed and written with ``compute=False``, so
    only their metadata reach the disk and every chunk reads as NaN until its
    batch is written. The store is built in a temporary sibling directory and
    renamed into place, so a half-written template never exists at ``path``.

    Args:
        path: the store directory (must not exist).
        spec_hash: the sweep's hash, checked on resume.
        points: swept parameter -> values ``(n_points,)``, in point order.
        schema: the outputs per point.
        attrs: dataset attributes (title, model YAML text, solver settings...);
            values that are not JSON scalars or flat lists are stored as JSON text.
        batch: points per batch (= chunk length along ``point``).

    Raises:
        FileExistsError: ``path`` exists.
        ValueError: inconsistent points or schema.
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; remove it or resume it")
    if batch < 1:
        raise ValueError(f"batch must be a positive number of points, got {batch}")
    ds, encoding = _template(spec_hash, points, schema, attrs, int(batch))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            # Consolidated metadata (so that a plain xr.open_zarr is quick and quiet) is
            # a zarr-python extension of format 3; it never changes after the template.
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
            ds.to_zarr(tmp, mode="w-", compute=False, encoding=encoding, consolidated=True,
                       zarr_format=3)
        os.rename(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def store_attrs(path) -> dict:
    """The attributes of a store's root group (no data read).

    Args:
        path: the store.

    Returns:
        The attributes as a dict.
    """
    return dict(zarr.open_group(str(path), mode="r").attrs)


def prepare_store(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
                  attrs: Mapping, batch: int, mode: str = "resume") -> list[int]:
    """Make the store ready for a run and say which batches must run.

    - no store at ``path``: write the template; all batches run;
    - ``resume`` (default): the store must come from the same sweep (same
      hash); only batches with pending points run;
    - ``retry-failed``: as resume, plus batches that contain failed points;
    - ``overwrite``: delete the store and start over.

    Args:
        path: the store directory.
        spec_hash, points, schema, attrs, batch: as for :func:`create_template`.
        mode: one of :data:`MODES`.

    Returns:
        The indices of the batches to run, ascending.

    Raises:
        InputError: unknown mode; the store belongs to another sweep (hash
            mismatch) or has another batch size; ``path`` is something other
            than a sweep store.
    """
    path = Path(path)
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    n_batches = len(batch_slices(len(next(iter(points.values()))), batch))
    if path.exists() and mode == "overwrite":
        if not _is_store(path) and any(path.iterdir()):
            raise InputError("exists and is not a Zarr store; refusing to delete it even with "
                             "--overwrite. Choose another --out path", file=str(path))
        shutil.rmtree(path)
    if not path.exists():
        create_template(path, spec_hash, points, schema, attrs, batch)
        return list(range(n_batches))

    if not _is_store(path):
        raise InputError("exists and is not a Zarr store. Choose another --out path",
                         file=str(path))
    old = store_attrs(path)
    if "sweep_hash" not in old:
        raise InputError("is a Zarr store but not a mechsweep sweep store (no sweep_hash "
                         "attribute). Pass --overwrite to replace it, or choose a new --out path",
                         file=str(path))
    if old["sweep_hash"] != spec_hash:
        raise InputError(f"the store was written by sweep {old['sweep_hash']}, but this sweep "
                         f"has hash {spec_hash} (the sweep file, its model or an override "
                         f"changed). Pass --overwrite to replace the store, or choose a new "
                         f"--out path", file=str(path))
    if old.get("sweep_batch") != batch:
        raise InputError(f"the store was written with Batch {old.get('sweep_batch')}, but this "
                         f"run uses Batch {batch}. Use the store's batch size, pass --overwrite "
                         f"to replace the store, or choose a new --out path", file=str(path))
    todo = set(pending_batches(path))
    if mode == "retry-failed":
        todo |= set(failed_batches(path))
    return sorted(todo)


def _batch_index(group: zarr.Group, sl: slice) -> int:
    batch = int(group.attrs["sweep_batch"])
    n = int(group.attrs["sweep_n_points"])
    if sl.start % batch or sl.stop != min(sl.start + batch, n):
        raise ValueError(f"slice {sl} is not a batch of this store (batch {batch}, {n} points)")
    return sl.start // batch


def write_batch(path, batch_slice: slice, result: BatchResult) -> None:
    """Write one finished batch into the store: data first, ``status`` last.

    Points whose status is not success are written as NaN whatever data the
    result holds for them; outputs missing from ``result.data`` are NaN.

    Args:
        path: the store (or an open ``zarr.Group`` of it, to save re-opening).
        batch_slice: the points of the batch, ``slice(start, stop)`` aligned
            with the store's batches.
        result: the batch's result, already checked against the schema (see
            :func:`sweep.run.check_result`).

    Raises:
        ValueError: the slice is not a batch of the store.
    """
    group = path if isinstance(path, zarr.Group) else zarr.open_group(str(path), mode="r+")
    index = _batch_index(group, batch_slice)
    n = batch_slice.stop - batch_slice.start
    codes = np.asarray(result.status, dtype=np.int8).reshape(n)
    bad = codes != st.SUCCESS
    for name in group.attrs["sweep_outputs"]:
        target = group[name]
        value = result.data.get(name)
        if value is None:
            value = np.full((n,) + target.shape[1:], np.nan)
        else:
            value = np.array(value, dtype=np.float64).reshape((n,) + target.shape[1:])
            value[bad] = np.nan
        target[batch_slice] = value
    group["batch_message"][index] = str(result.message or "")
    group["batch_seconds"][index] = float(result.seconds)
    group["steps"][batch_slice] = np.asarray(result.steps, dtype=np.int64).reshape(n)
    _write_status(group, batch_slice, codes)


def _write_status(group: zarr.Group, batch_slice: slice, codes: np.ndarray) -> None:
    # The commit point of a batch: one chunk, written atomically by the store.
    group["status"][batch_slice] = codes


def read_status(path) -> np.ndarray:
    """The ``status(point)`` codes of a store.

    Args:
        path: the store.

    Returns:
        ``(n_points,)`` int8 array.
    """
    return zarr.open_group(str(path), mode="r")["status"][:]


def pending_batches(path, batch: int | None = None) -> list[int]:
    """Batches that still have pending points (never completed).

    Args:
        path: the store.
        batch: points per batch; default the store's own.

    Returns:
        Batch indices, ascending.
    """
    return _batches_where(path, batch, lambda s: s == st.PENDING)


def failed_batches(path, batch: int | None = None) -> list[int]:
    """Batches that contain failed points (status above success).

    Args:
        path: the store.
        batch: points per batch; default the store's own.

    Returns:
        Batch indices, ascending.
    """
    return _batches_where(path, batch, st.is_failure)


def _batches_where(path, batch, test) -> list[int]:
    codes = read_status(path)
    if batch is None:
        batch = int(store_attrs(path)["sweep_batch"])
    return [i for i, sl in enumerate(batch_slices(len(codes), batch)) if test(codes[sl]).any()]


def failed_points(path) -> np.ndarray:
    """Indices of the points that failed (status above success).

    Args:
        path: the store.

    Returns:
        Point indices, ascending (int64 array).
    """
    return np.flatnonzero(st.is_failure(read_status(path)))


def open_store(path) -> xr.Dataset:
    """Open a sweep store lazily as an xarray Dataset with the ``.sweep`` accessor.

    Args:
        path: the store.

    Returns:
        The dataset (dask-backed; nothing is read until used).

    Raises:
        FileNotFoundError: no store at ``path``.
    """
    import sweep.accessor  # noqa: F401  (registers ds.sweep)

    if not _is_store(Path(path)):
        raise FileNotFoundError(f"{path}: no Zarr store there")
    return xr.open_zarr(str(path))


def status_report(path) -> str:
    """The text of ``mechsweep status STORE``: title, hash, batches, counts by status.

    Args:
        path: the store.

    Returns:
        A multi-line report; failed batches' messages are listed (first line
        of each, at most ten).

    Raises:
        InputError: no sweep store at ``path``.
    """
    path = Path(path)
    if not _is_store(path):
        raise InputError("no Zarr store there", file=str(path))
    group = zarr.open_group(str(path), mode="r")
    attrs = dict(group.attrs)
    if "sweep_hash" not in attrs:
        raise InputError("a Zarr store, but not a mechsweep sweep store (no sweep_hash attribute)",
                         file=str(path))
    codes = group["status"][:]
    batch = int(attrs["sweep_batch"])
    slices = batch_slices(len(codes), batch)
    pending = [i for i, sl in enumerate(slices) if (codes[sl] == st.PENDING).any()]
    values, counts = np.unique(codes, return_counts=True)
    lines = [
        f"store:      {path}",
        f"title:      {attrs.get('title', '')}",
        f"sweep hash: {attrs['sweep_hash']}",
        f"created:    {attrs.get('created', '?')}",
        f"points:     {len(codes)} ({batch} per batch)",
        f"batches:    {len(slices) - len(pending)} done, {len(pending)} pending, "
        f"{len(slices)} in all",
        "status:",
    ]
    width = max(len(st.meaning(v)) for v in values)
    for v, c in zip(values, counts):
        lines.append(f"  {st.meaning(v):<{width}}  {int(c):>8}  ({int(v)}: "
                     f"{st.DESCRIPTIONS.get(int(v), 'unknown code')})")
    messages = group["batch_message"][:]
    noted = [(i, str(m)) for i, m in enumerate(messages) if str(m)]
    if noted:
        lines.append("batch messages:")
        for i, m in noted[:10]:
            lines.append(f"  batch {i}: {m.strip().splitlines()[0]}")
        if len(noted) > 10:
            lines.append(f"  ... and {len(noted) - 10} more (variable batch_message)")
    if pending:
        lines.append("resume with: mechsweep sweep SWEEP.yaml --out " + str(path))
    return "\n".join(lines)
