"""``ds.sweep``: views of a sweep dataset (importing this module registers it).

A sweep store keeps its points on one flat ``point`` dimension with one
coordinate per swept parameter, which fits any design (grids, zipped axes,
Latin hypercube samples). These helpers give the other views people want:

- ``ds.sweep.parameters``: the swept parameter names;
- ``ds.sweep.grid()``: the flat points as an N-d grid over the product axes;
- ``ds.sweep.failures()``: the failed points with the meaning of their code,
  their failure time and reason; ``ds.sweep.failure_table()`` the same as a
  table (one row per failed point: parameters, status, meaning, time, reason);
- ``ds.sweep.successes()``: the points that integrated to the end.
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from solver import status as st

__all__ = ["SweepAccessor"]


@xr.register_dataset_accessor("sweep")
class SweepAccessor:
    """Sweep helpers on an ``xarray.Dataset`` with a ``point`` dimension."""

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    @property
    def parameters(self) -> list[str]:
        """The swept parameters: the ``sweep_parameters`` attribute, else every
        1-d coordinate on ``point``."""
        names = self._ds.attrs.get("sweep_parameters")
        if isinstance(names, str):
            names = json.loads(names)
        if names:
            return list(names)
        return [name for name, c in self._ds.coords.items() if c.dims == ("point",)]

    def grid_axes(self) -> list[str]:
        """The parameters that span the points as a full Cartesian grid.

        Parameters are taken in order; one whose value is fixed by those already
        taken (the second member of a zipped pair) is skipped. A design with no
        product (zipped axes only, or samples) gives its first parameter alone.

        Returns:
            The axis names.

        Raises:
            ValueError: the points are not a full grid (e.g. random samples).
        """
        ds = self._ds
        axes, seen = [], np.zeros(ds.sizes["point"], dtype=np.int64)
        for name in self.parameters:
            _, codes = np.unique(ds[name].values, return_inverse=True)
            combined = seen * (codes.max() + 1) + codes
            if len(np.unique(combined)) > len(np.unique(seen)):
                axes.append(name)
                _, seen = np.unique(combined, return_inverse=True)
        sizes = [len(np.unique(ds[name].values)) for name in axes]
        if int(np.prod(sizes)) != ds.sizes["point"]:
            raise ValueError(
                f"the {ds.sizes['point']} points are not a full grid over {axes} "
                f"(sizes {sizes}); pass the grid axes explicitly or keep the flat point form")
        return axes

    def grid(self, axes: list[str] | None = None) -> xr.Dataset:
        """The dataset with ``point`` unstacked into one dimension per grid axis.

        Args:
            axes: the parameters to use as dimensions; default :meth:`grid_axes`.
                Other parameters become coordinates over those dimensions.

        Returns:
            The gridded dataset (points missing from the grid are NaN).

        Raises:
            ValueError: ``axes`` do not identify the points uniquely.
        """
        ds = self._ds
        axes = list(axes) if axes is not None else self.grid_axes()
        keys = list(zip(*(ds[a].values.tolist() for a in axes)))
        if len(set(keys)) != len(keys):
            raise ValueError(f"the axes {axes} do not identify the points uniquely")
        # Per-batch variables have no place on a grid of points.
        flat = ds.drop_dims("batch", errors="ignore")
        if len(axes) == 1:
            # One axis (a zipped or sampled design): no MultiIndex to unstack.
            return flat.swap_dims(point=axes[0]).sortby(axes[0])
        return flat.set_index(point=axes).unstack("point")

    def failures(self) -> xr.Dataset:
        """The failed points (status above success), with when and why each one failed.

        A failed point's series hold its samples up to its failure time and
        NaN after it; its metrics are NaN.

        Returns:
            The selection along ``point`` (possibly empty), with a
            ``status_meaning`` coordinate (``no_assembly``,
            ``singular_jacobian``, ...) and the variables ``failure_time``
            (NaN where unknown) and ``failure_reason`` (text naming the
            model's parts); a store written before these variables existed
            (format 2) gets them as NaN and empty text.
        """
        ds = self._ds
        codes = np.asarray(ds["status"].values)
        sel = ds.isel(point=np.flatnonzero(st.is_failure(codes)))
        n = sel.sizes["point"]
        if "failure_time" not in sel:
            sel = sel.assign(failure_time=("point", np.full(n, np.nan)))
        if "failure_reason" not in sel:
            sel = sel.assign(failure_reason=("point", np.full(n, "", dtype=object)))
        meanings = np.array([st.meaning(c) for c in np.asarray(sel["status"].values)], dtype=object)
        return sel.assign_coords(status_meaning=("point", meanings))

    def failure_table(self):
        """The failed points as a table: one row each, what to look at first.

        Returns:
            ``pandas.DataFrame`` indexed by ``point``, with a column per
            swept parameter, then ``status`` (code), ``status_meaning``,
            ``failure_time`` and ``failure_reason`` (empty: no rows when
            nothing failed).
        """
        import pandas as pd

        sel = self.failures()
        columns = {name: np.asarray(sel[name].values) for name in self.parameters if name in sel}
        columns["status"] = np.asarray(sel["status"].values)
        columns["status_meaning"] = np.asarray(sel["status_meaning"].values, dtype=object)
        columns["failure_time"] = np.asarray(sel["failure_time"].values, dtype=float)
        columns["failure_reason"] = np.asarray(sel["failure_reason"].values, dtype=object)
        index = pd.Index(np.asarray(sel["point"].values) if "point" in sel.coords
                         else np.flatnonzero(st.is_failure(np.asarray(self._ds["status"].values))),
                         name="point")
        return pd.DataFrame(columns, index=index)

    def successes(self) -> xr.Dataset:
        """The points that integrated successfully.

        Returns:
            The selection along ``point``.
        """
        codes = np.asarray(self._ds["status"].values)
        return self._ds.isel(point=np.flatnonzero(~st.is_failure(codes) & (codes >= st.SUCCESS)))
