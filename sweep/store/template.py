"""Making a store ready for a run: its template written, or an existing one checked and planned.

The template is the store before any batch: coordinates, attributes, every
array's metadata, ``status`` pending. A local template is built in a
temporary folder and renamed into place; on an object store, where there is
no rename, it is built in a local temporary folder and uploaded, its
template record (:mod:`sweep.template_record`) last (a store without one is
made again by the next run). An existing store is checked
(:func:`sweep.store.check.check_store`) and resumed, retried or overwritten
(:data:`MODES`).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Mapping

import dask.array as da
import numpy as np
import xarray as xr
import zarr

from solver import status as st
from solver.errors import InputError
from solver.results.solution import package_versions
from sweep.folders import publish, temporary_sibling
from sweep.location import StoreLocation, is_url
from sweep.store.check import StoreCheck, check_store
from sweep.store.schema import (STORE_FORMAT, Schema, batch_slices, commit_chunk_length, effective_batch,
                                legacy_message, place, store_attrs)
from sweep.template_record import TEMPLATE_ARRAY, repair_coordinates, write_template_record

__all__ = [
    "MODES", "variable_length_text", "zarr_ready", "write_dataset", "create_template", "prepare_store",
    "plan_store", "store_token", "template_ready",
]


#: How an existing store is treated (see :func:`prepare_store`).
MODES = ("resume", "overwrite", "retry-failed")

#: Every chunk of a format-3 store: Zstandard, then a CRC32C of the compressed bytes, so that a
#: damaged chunk fails to decode with a checksum error wherever it is read, by any Zarr reader.
_COMPRESSORS = (zarr.codecs.ZstdCodec(level=0), zarr.codecs.Crc32cCodec())

#: The float outputs (the bulk of a store): a CRC32C only. Trajectories in float64 compress
#: by a few per cent, and compressing them was most of what a worker's write of a batch cost.
_CHECKSUM_ONLY = (zarr.codecs.Crc32cCodec(),)


def variable_length_text(values: np.ndarray) -> np.ndarray:
    """Fixed-width numpy text (``<U``) as variable-length strings; other arrays unchanged.

    The fixed-width form has no Zarr v3 specification yet: zarr warns that
    such arrays may become unreadable, by other libraries or its own later
    versions.  Variable-length strings have one.
    """
    return values.astype(object) if values.dtype.kind == "U" else values


def zarr_ready(ds):
    """``ds`` (an xarray Dataset) with every text coordinate and variable as :func:`variable_length_text`.

    Args:
        ds: the Dataset to be written to Zarr.

    Returns:
        A shallow copy; numeric arrays are shared, not copied.
    """
    text = {name: v.copy(data=variable_length_text(v.values)) for name, v in ds.variables.items()
            if v.dtype.kind == "U"}
    if not text:
        return ds
    return (ds.assign_coords({n: v for n, v in text.items() if n in ds.coords})
            .assign({n: v for n, v in text.items() if n not in ds.coords}))


def write_dataset(ds, path) -> None:
    """Write a whole Dataset as a new Zarr store (``simulate --out``, design histories).

    Text goes in as :func:`variable_length_text` and the metadata is
    consolidated, as the sweep stores have it, so that a plain
    ``xarray.open_zarr`` reads it without a warning; zarr's warning that
    consolidated metadata is an extension of format 3 concerns the writer
    only and is silenced.

    Args:
        ds: the Dataset.
        path: the store's path (replaced if it exists).

    Raises:
        OSError: the path cannot be written.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        zarr_ready(ds).to_zarr(path, mode="w", consolidated=True)


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


def create_template(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
                    attrs: Mapping, batch: int, store_id: str | None = None) -> None:
    """Write an empty sweep store: coordinates, attributes, pending status.

    Only the coordinates' chunks and every array's metadata reach the disk:
    every other chunk reads as its fill value (NaN, pending) until its batch
    is written. The store is built in a temporary sibling directory and
    renamed into place, so a half-written template never exists at ``path``.

    Args:
        path: the store directory (must not exist).
        spec_hash: the sweep's hash, checked on resume.
        points: swept parameter -> values ``(n_points,)``, in point order.
        schema: the outputs per point.
        attrs: dataset attributes (title, model YAML text, solver settings...);
            values that are not JSON scalars or flat lists are stored as JSON text.
        batch: points per batch (= chunk length along ``point``).
        store_id: what tells this store from any other once at the same path
            (its ``store_id`` attribute, see :func:`store_token`); default a
            new random one.

    Raises:
        FileExistsError: ``path`` exists.
        ValueError: inconsistent points or schema.
    """
    if StoreLocation(path).exists():
        raise FileExistsError(f"{path} exists; remove it or resume it")
    if batch < 1:
        raise ValueError(f"batch must be a positive number of points, got {batch}")
    arrays, root_attrs = _template_arrays(spec_hash, points, schema, attrs, int(batch), store_id)
    if is_url(path):
        # No rename on object storage: built in a local folder and uploaded, its template
        # record last, so that a creation cut short leaves a store without one (made again).
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mechsweep-template-") as folder:
            local = Path(folder) / "store.zarr"
            _write_template(arrays, root_attrs, local)
            write_template_record(local)
            StoreLocation(path).upload(local, last=(f"{TEMPLATE_ARRAY}/c",))
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    try:
        _write_template(arrays, root_attrs, tmp)
        write_template_record(tmp)
        publish(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


@dataclasses.dataclass(frozen=True)
class _TemplateArray:
    """One array of a store's template: its metadata, and its values for a coordinate."""

    name: str
    dims: tuple
    shape: tuple
    dtype: object            # a numpy dtype, or str for variable-length text
    chunks: tuple
    fill_value: object
    attrs: dict
    compressors: tuple
    values: np.ndarray | None = None     # a coordinate's values (written); None: no chunk written


def _template_arrays(spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
                     attrs: Mapping, batch: int, store_id: str | None = None) -> tuple[list[_TemplateArray], dict]:
    """The template's arrays (coordinates first) and the store's attributes."""
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

    def coordinate(name, dim, values):
        values = variable_length_text(np.asarray(values))
        text = values.dtype == object
        fill = "" if text else (np.nan if values.dtype.kind == "f" else 0)
        return _TemplateArray(name, (dim,), values.shape, str if text else values.dtype, values.shape, fill,
                              dict(schema.attrs.get(name, {})), _COMPRESSORS, values)

    arrays = [coordinate(name, "point", values) for name, values in points.items()]
    arrays.append(coordinate("time", "time", np.asarray(schema.time, dtype=np.float64)))
    arrays += [coordinate(dim, dim, values) for dim, values in schema.coords.items()]
    for name, dims in schema.variables.items():
        shape = (n,) + tuple(sizes[d] for d in dims)
        arrays.append(_TemplateArray(name, ("point",) + tuple(dims), shape, np.dtype(np.float64),
                                     (batch,) + shape[1:], np.nan, dict(schema.attrs.get(name, {})),
                                     _CHECKSUM_ONLY))
    # Fill value = pending / not run: a status or steps chunk that is missing must never read as a
    # finished point (format 1 filled status with 0 = success).  Every chunk of these arrays is
    # written by its batch; the per-batch ones (a chunk a batch) by the worker that runs it, the
    # commit records (which the driver alone writes) in chunks of COMMIT_GROUP batches: one write
    # commits a task's batches.
    per_point = [("status", np.int8, st.PENDING, st.cf_attrs()),
                 ("steps", np.int64, -1, {"long_name": "accepted integration steps (-1: not run)"}),
                 ("failure_time", np.float64, np.nan,
                  {"long_name": "time at which the point failed (NaN: it did not fail, "
                                "or failed with its whole batch)",
                   "units": str(schema.attrs.get("time", {}).get("units", "s"))}),
                 ("failure_reason", str, "", {"long_name": "why the point failed, naming the model's parts "
                                                           "(empty: it did not fail)"})]
    arrays += [_TemplateArray(name, ("point",), (n,), dtype if dtype is str else np.dtype(dtype), (batch,), fill,
                              dict(attrs_), _COMPRESSORS) for name, dtype, fill, attrs_ in per_point]
    per_batch = [("batch_message", str, "", 1, {"long_name": "why the batch failed (empty: no message)"}),
                 ("batch_seconds", np.float64, np.nan, 1, {"long_name": "compute time of the batch on its worker",
                                                           "units": "s"}),
                 ("batch_commit", str, "", commit_chunk_length(n_batches),
                  {"long_name": "commit record of the batch: JSON with the checksums of its chunks and its "
                                "completion time (empty: not committed)"})]
    arrays += [_TemplateArray(name, ("batch",), (n_batches,), dtype if dtype is str else np.dtype(dtype), (chunk,),
                              fill, dict(attrs_), _COMPRESSORS) for name, dtype, fill, chunk, attrs_ in per_batch]
    arrays.append(_TemplateArray(TEMPLATE_ARRAY, (), (), str, (), "",
                                 {"long_name": "template record: JSON with the checksums of the files "
                                               "written once (coordinates, metadata)"}, _COMPRESSORS))

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
        "store_id": str(store_id or uuid.uuid4().hex),
    })
    return arrays, all_attrs


def store_token(attrs: Mapping) -> str:
    """What tells a store from any other once at the same path: its id and sweep hash.

    A store written before stores had an id (``store_id``) is told by its
    creation time instead.

    Args:
        attrs: the store's root attributes (or at least ``store_id`` and ``sweep_hash``).

    Returns:
        The token, compared by :func:`template_ready`.
    """
    return f"{attrs.get('store_id') or attrs.get('created')} {attrs.get('sweep_hash')}"


def template_ready(path, token: str) -> bool:
    """Whether the store at ``path`` is the one of ``token``, its template written in full.

    A worker that computed its batch before the driver finished the template
    (they overlap, see :func:`sweep.run.run_sweep`) asks this before it
    writes: an older store still at the path (being overwritten) has another
    token, and a template is whole once its template record is written (its
    last file; a store written before template records is whole).

    Args:
        path: a local path or an object-store URL.
        token: :func:`store_token` of the store expected.

    Returns:
        True when the store is there, is that store and is whole; False
        otherwise (also when it cannot be read yet).
    """
    try:
        group = zarr.open_group(str(path), mode="r")
        if store_token(group.attrs) != token:
            return False
        # A store written before template records existed has none (and was whole before any
        # batch ran); a new one lists its record in the consolidated metadata from the start.
        return TEMPLATE_ARRAY not in group or bool(str(group[TEMPLATE_ARRAY][()]))
    except Exception:  # noqa: BLE001 - a store not there, half there or being removed is not ready
        return False


def _template(spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
              attrs: Mapping, batch: int, store_id: str | None = None) -> tuple[xr.Dataset, dict]:
    """The template as an xarray Dataset and its ``to_zarr`` encoding (for writers other than this module's).

    The numeric data variables are dask-backed (one chunk each), so that
    ``to_zarr(..., compute=False, encoding=...)`` writes their metadata and no
    chunk; the text ones are numpy arrays of their fill value.
    """
    arrays, all_attrs = _template_arrays(spec_hash, points, schema, attrs, batch, store_id)
    coords, data_vars, encoding = {}, {}, {}
    for a in arrays:
        if a.values is not None:
            coords[a.name] = (a.dims, a.values, a.attrs)
        else:
            dtype = object if a.dtype is str else a.dtype
            data = (np.full(a.shape, a.fill_value, dtype=object) if dtype is object
                    else da.full(a.shape, a.fill_value, dtype=dtype, chunks=a.shape or -1))
            data_vars[a.name] = (a.dims, data, a.attrs)
        encoding[a.name] = {"compressors": a.compressors}
        if a.values is None and a.dims:
            encoding[a.name]["chunks"] = a.chunks
            if a.dtype is not str:
                encoding[a.name]["fill_value"] = a.fill_value
    return xr.Dataset(data_vars, coords=coords, attrs=all_attrs), encoding


# The attribute xarray gives a float array with a fill value (its bytes, base64): the same
# metadata as a store xarray writes, so that xarray reads both alike.
_NAN_FILL = base64.b64encode(np.array(np.nan, dtype="<f8").tobytes()).decode()


def _write_template(arrays: list[_TemplateArray], root_attrs: dict, where) -> None:
    """Write the template into the local folder ``where``: metadata and coordinates, no batch's chunk.

    With zarr directly, not through xarray: the same metadata (the attributes xarray
    adds: a float array's ``_FillValue``, the ``coordinates`` that tie the swept
    parameters to every array along ``point``; tests/test_store_template.py compares
    the two), in a quarter of the time, which a sweep's start-up waited for.
    """
    non_dim = [a for a in arrays if a.values is not None and a.name not in a.dims]
    group = zarr.open_group(str(where), mode="w-", zarr_format=3, attributes=root_attrs)
    for a in arrays:
        # JSON values, as xarray encodes them (a status's flag values are numpy).
        attrs = {k: _attr_value(v) for k, v in a.attrs.items()}
        if a.values is None:
            tied = sorted(c.name for c in non_dim if set(c.dims) <= set(a.dims))
            if tied:
                attrs["coordinates"] = " ".join(tied)
        if a.dtype is not str and a.dtype.kind == "f":
            attrs["_FillValue"] = _NAN_FILL
        array = group.create_array(a.name, shape=a.shape, chunks=a.chunks, dtype=a.dtype, fill_value=a.fill_value,
                                   compressors=a.compressors, dimension_names=a.dims, attributes=attrs)
        if a.values is not None:
            array[...] = a.values
    with warnings.catch_warnings():
        # Consolidated metadata (so that a plain xr.open_zarr is quick and quiet) is
        # a zarr-python extension of format 3; it never changes after the template.
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        zarr.consolidate_metadata(str(where))


def prepare_store(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
                  attrs: Mapping, batch: int, mode: str = "resume",
                  verify: bool = True) -> list[int]:
    """Make the store ready for a run and say which batches must run.

    The same as :func:`plan_store`, returning only the batches.

    Returns:
        The indices of the batches to run, ascending.
    """
    return plan_store(path, spec_hash, points, schema, attrs, batch, mode, verify)[0]


def plan_store(path, spec_hash: str, points: Mapping[str, np.ndarray], schema: Schema,
               attrs: Mapping, batch: int, mode: str = "resume",
               verify: bool = True, store_id: str | None = None) -> tuple[list[int], "StoreCheck | None"]:
    """Make the store ready for a run; the batches to run and the check behind them.

    - no store at ``path``: write the template; all batches run;
    - ``resume`` (default): the store must come from the same sweep (same
      hash); every batch that is not done runs: pending ones, and damaged ones
      whose commit record does not match their chunks (:func:`check_store`);
    - ``retry-failed``: as resume, plus done batches that contain failed points;
    - ``overwrite``: delete the store and start over.

    Args:
        path: the store directory.
        spec_hash, points, schema, attrs, batch: as for :func:`create_template`.
        mode: one of :data:`MODES`.
        verify: check an existing store at level ``checksum`` (read every
            committed chunk; default) rather than ``quick``.
        store_id: the id of a store written here (see :func:`create_template`).

    Returns:
        ``(batches, check)``: the indices of the batches to run, ascending, and
        the :class:`StoreCheck` of the existing store (None for a new one).

    Raises:
        InputError: unknown mode; the store belongs to another sweep (hash
            mismatch), has another batch size or was written without commit
            records (format 1); ``path`` is something other than a sweep store.
    """
    where = StoreLocation(path)
    path = place(path)
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    n_batches = len(batch_slices(len(next(iter(points.values()))), batch))
    if where.exists() and mode == "overwrite":
        if not where.is_store() and (where.remote or any(path.iterdir())):
            raise InputError("exists and is not a Zarr store; refusing to delete it even with "
                             "--overwrite. Choose another --out path", file=str(path))
        where.remove()
    if where.remote and where.is_store() and _unfinished_template(path):
        # A run stopped while it wrote the template in place (object stores have no rename):
        # no batch can have been written yet, so it is made again.
        where.remove()
    if not where.exists():
        create_template(path, spec_hash, points, schema, attrs, batch, store_id)
        return list(range(n_batches)), None

    if not where.is_store():
        raise InputError("exists and is not a Zarr store. Choose another --out path",
                         file=str(path))
    old = store_attrs(path)
    if "mechsweep_structural_sweep" in old:
        raise InputError(f"holds a sweep over structural parameters (one Zarr group per "
                         f"structure: {', '.join(map(str, old.get('sweep_groups') or []))}), not "
                         f"this sweep. Pass --overwrite to replace it, or choose a new --out path",
                         file=str(path))
    if "sweep_hash" not in old:
        raise InputError("is a Zarr store but not a mechsweep sweep store (no sweep_hash "
                         "attribute). Pass --overwrite to replace it, or choose a new --out path",
                         file=str(path))
    if old["sweep_hash"] != spec_hash:
        raise InputError(f"the store was written by sweep {old['sweep_hash']}, but this sweep "
                         f"has hash {spec_hash} (the sweep file, its model or an override "
                         f"changed). Pass --overwrite to replace the store, or choose a new "
                         f"--out path", file=str(path))
    stored = old.get("sweep_batch")
    n_points = len(next(iter(points.values())))
    # A store of fewer points than its Batch (written before the batch was cut to
    # the points) has one chunk of all its points: the same layout.
    if not isinstance(stored, int) or effective_batch(stored, n_points) != batch:
        raise InputError(f"the store was written with Batch {old.get('sweep_batch')}, but this "
                         f"run uses Batch {batch}. Use the store's batch size, pass --overwrite "
                         f"to replace the store, or choose a new --out path", file=str(path))
    check = check_store(path, "checksum" if verify else "quick")
    if check.legacy:
        raise InputError(legacy_message(), file=str(path))
    if check.template_damage:
        _repair_template(path, check, points, schema)
    todo = set(check.todo)
    if mode == "retry-failed":
        todo |= {i for i in check.done if st.is_failure(check.codes[check.slices[i]]).any()}
    return sorted(todo), check


def _unfinished_template(path) -> bool:
    """Whether the store's template was never finished: its template record is not written."""
    try:
        group = zarr.open_group(str(path), mode="r")
        return TEMPLATE_ARRAY not in group or not str(group[TEMPLATE_ARRAY][()])
    except Exception:  # noqa: BLE001 - metadata cut short reads as unfinished too
        return True


def _repair_template(path: Path, check: "StoreCheck", points: Mapping[str, np.ndarray], schema: Schema) -> None:
    """Write damaged coordinates again from the sweep (they are derived data); refuse damaged metadata.

    Raises:
        InputError: the store's metadata or its template record is damaged
            (the message lists the files and says to use ``--overwrite``).
    """
    damage = check.template_damage
    if damage.metadata:
        raise InputError("the store's files written once are damaged: " + "; ".join(damage.lines()),
                         file=str(path))
    values = {name: np.asarray(v) for name, v in points.items()}
    values["time"] = np.asarray(schema.time, dtype=np.float64)
    values.update({dim: variable_length_text(np.asarray(v)) for dim, v in schema.coords.items()})
    repair_coordinates(path, damage, values)
    check.repaired = damage.coordinates
    check.template_damage = type(damage)()
    check.store_problems = [p for p in check.store_problems if p not in damage.lines()]
