"""Result files of ``simulate --out``: a run's Dataset written as Zarr or netCDF and read back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from solver.errors import InputError

__all__ = ["write_result", "open_result", "NC_JSON_ATTRS"]

# Inside a netCDF result file: the attributes stored as JSON text, listed
# under this attribute (see _netcdf_safe).
NC_JSON_ATTRS = "mechsweep_json_attrs"


def _netcdf_safe(ds):
    """The Dataset with attributes that netCDF-3 (scipy's writer) can store.

    That writer keeps its own ``variables`` attribute (the Dataset's would
    overwrite it) and stores neither booleans, lists of strings nor
    mappings: such attributes go in as JSON text, listed in
    :data:`NC_JSON_ATTRS`, and :func:`_from_netcdf` restores them.
    """
    plain, encoded = {}, []
    for key, value in ds.attrs.items():
        simple = isinstance(value, (int, float, str)) and not isinstance(value, bool)
        numeric_list = (isinstance(value, (list, tuple, np.ndarray))
                        and np.asarray(value).dtype.kind in "if" and np.asarray(value).ndim == 1)
        if key != "variables" and (simple or numeric_list):
            plain[key] = value
        else:
            plain[key if key != "variables" else "mechsweep_variables"] = json.dumps(
                value.tolist() if isinstance(value, np.ndarray) else value, default=str)
            encoded.append(key)
    plain[NC_JSON_ATTRS] = json.dumps(encoded)
    ds.attrs = plain
    return ds


def _from_netcdf(ds):
    """Undo :func:`_netcdf_safe` on a Dataset read from a result file."""
    encoded = json.loads(ds.attrs.pop(NC_JSON_ATTRS, "[]"))
    for key in encoded:
        stored = "mechsweep_variables" if key == "variables" else key
        if stored in ds.attrs:
            ds.attrs[key] = json.loads(ds.attrs.pop(stored))
    return ds


def write_result(ds, path: str) -> None:
    """Write a Dataset as Zarr (``.zarr``) or netCDF (``.nc``).

    Raises:
        InputError: another extension, or the file cannot be written
            (permissions, a full disk).
    """
    if not path.endswith((".zarr", ".nc")):
        raise InputError(f"--out {path!r}: the result file must end in .zarr or .nc")
    try:
        if path.endswith(".zarr"):
            from sweep.store import write_dataset  # Zarr: imported when a .zarr is written

            write_dataset(ds, path)
        else:
            ds.copy(deep=False).assign_attrs().pipe(_netcdf_safe).to_netcdf(path)
    except OSError as exc:
        raise InputError(f"--out {path}: cannot write it ({exc.strerror or exc})") from None


def open_result(path: str):
    """Open a result written by ``simulate --out`` (.zarr folder or .nc file).

    Raises:
        InputError: missing or unreadable.
    """
    import xarray as xr

    p = Path(path)
    if not p.exists():
        raise InputError("file not found", file=path)
    try:
        if path.endswith(".nc"):
            return _from_netcdf(xr.open_dataset(path).load())
        return xr.open_zarr(path, consolidated=False).load()
    except Exception as exc:  # xarray/zarr raise many types for a bad store
        raise InputError(f"cannot read a result from it: {exc}", file=path) from None
