"""Sweeps over structural parameters: one model, one compile and one store group per structure.

A *structural* parameter fixes the model's size (the ``N`` of repeated parts
``P{i} for i in 1..N``, a cloth's ``rows``/``cols``; the model's
``param_info.structural``). It cannot vary across the points of one
compiled model, so a sweep that varies it (or sets it in ``constants``) is
split into *structure groups*: the points with the same structural values,
in the sweep's order.  Each group

- builds its model once: the base model (the file with the sweep's
  ``Override``) built again with ``PhysicalParams`` set to the group's values
  (:func:`sweep.pipeline.rebuild_structural`, as ``simulate --set N=5``);
- compiles it once (per worker process) and runs its points through the
  ordinary pipeline (:func:`sweep.pipeline.batch_fn`,
  :func:`sweep.run.run_sweep`), in batches of the sweep's ``Batch``;
- is stored as an ordinary, complete sweep store (template, status, commit
  records, resume, verification: :mod:`sweep.store`) in a child group of one
  Zarr root, named by its values: ``STORE.zarr/N=3`` (several structural
  parameters: ``N=3,M=2``, in the model's order of its parameters).

The root ``STORE.zarr`` is a Zarr group (no arrays) whose attributes say
that it is a structural sweep (``mechsweep_structural_sweep``, the format)
and list the groups (``sweep_groups``, ``sweep_group_points``), the
structural parameters (``structural_parameters``), the sweep's hash
(``structural_sweep_hash``), title and model path.  Its metadata are
consolidated once the groups exist, so ``xarray.open_zarr(STORE, group="N=3")``
and ``xarray.open_datatree(STORE, engine="zarr")`` read it without warnings.
A group's store has the structural names as (constant) coordinates on
``point``, and the attributes ``sweep_group`` and ``structural_values``.

A group whose model cannot be built (an impossible structure, such as
``N = 0``) never stops the sweep: its store is written with its points'
status ``error``, no series (only the metrics, NaN) and the reason in
``batch_message`` (and the attribute ``group_error``); the other groups run.

:func:`sweep.store.open_store` on a structural store returns an
:class:`xarray.DataTree` with one node per group (each the Dataset
``open_store`` gives for a plain store), or with ``group="N=3"`` that one
Dataset.
"""

from __future__ import annotations

import contextlib

import dataclasses
import datetime
import hashlib
import json
import shutil
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.location import StoreLocation, is_url
from sweep.store.schema import is_store, place
from sweep.store.tree import ROOT_MARK, groups_of, is_structural_store, open_tree, root_attrs

__all__ = ["ROOT_MARK", "STRUCTURAL_FORMAT", "Group", "FailedGroup", "StructuralSummary",
           "group_label", "plan_groups", "failed_batch", "is_structural_store", "root_attrs",
           "create_root", "prepare_root", "run_groups", "run_structural_file", "status_report",
           "open_tree", "points_dataset", "describe_groups"]

#: Layout version of the structural root (groups are ordinary stores of their own format).
STRUCTURAL_FORMAT = 1


def _progress(message: str) -> None:
    print(f"[mechsweep] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ groups

def group_label(sizes: dict) -> str:
    """``{"N": 3, "M": 2}`` -> ``"N=3,M=2"``: the name of a structure group."""
    return ",".join(f"{k}={int(v)}" for k, v in sizes.items())


@dataclass
class FailedGroup:
    """The context of a structure group whose model cannot be built.

    Attributes:
        message: why (the first line says which structure).
        schema: its store's outputs: the sweep's metrics only (the series
            depend on a model there is not).
        attrs: its store's attributes.
        batch: points per batch.
    """

    message: str
    schema: Any
    attrs: dict
    batch: int


def failed_batch(points: dict, context: FailedGroup):
    """The batch function of a group that cannot be built: every point ``error``."""
    from sweep.store import BatchResult

    n = len(next(iter(points.values())))
    return BatchResult.failed(n, st.ERROR, context.message)


@dataclass
class Group:
    """One structure group of a sweep.

    Attributes:
        label: its name, e.g. ``"N=3"`` (the child group of the store).
        sizes: structural parameter -> whole value.
        index: the sweep's point indices of its points, ascending.
        spec: a :class:`sweep.spec.SweepSpec` of its points (the sweep's
            file, outputs and batch; its own points, constants and hash).
        context: its :class:`sweep.pipeline.SweepContext`, or a
            :class:`FailedGroup` when its model cannot be built.
        error: why it cannot be built (empty when it can).
        unknowns: the size of its model's DAE (None when not built).
        model: its built model, kept for a run in this process.
    """

    label: str
    sizes: dict
    index: np.ndarray
    spec: Any
    context: Any = None
    error: str = ""
    unknowns: int | None = None
    model: Any = field(default=None, repr=False)

    @property
    def n_points(self) -> int:
        return int(len(self.index))

    @property
    def n_batches(self) -> int:
        return -(-self.n_points // int(self.spec.batch))


def _group_hash(spec_hash: str, label: str) -> str:
    return hashlib.sha256(f"{spec_hash}\n{label}".encode()).hexdigest()


def _error_text(err: BaseException) -> str:
    if isinstance(err, InputError):
        return str(err)
    tb = traceback.format_exception(err)
    return f"{type(err).__name__}: {err}\n" + "".join(tb[-3:])


def plan_groups(spec, base, names: list[str], keep_models: bool = False) -> list[Group]:
    """Split a sweep into structure groups and build each group's model once.

    Args:
        spec: the sweep (its names already checked, structural values whole:
            ``sweep.pipeline._check_swept_names``).
        base: its model (:func:`sweep.pipeline.load_model`).
        names: its structural names (:func:`sweep.pipeline.structural_names`).
        keep_models: keep each built model on its group (for a run in this
            process, which then builds nothing again).

    Returns:
        The groups, in ascending order of their structural values. A group
        whose model cannot be built (any error) has ``error`` set and a
        :class:`FailedGroup` context; this never raises for one group.
    """
    from sweep import pipeline
    from sweep.store import Schema

    n = spec.n_points
    columns = [np.asarray(spec.points[k], dtype=float) if k in spec.points
               else np.full(n, float(spec.constants[k])) for k in names]
    table = np.stack(columns, axis=1).astype(np.int64)
    constants = {k: v for k, v in spec.constants.items() if k not in names}
    groups = []
    for row in np.unique(table, axis=0):
        sizes = {k: int(v) for k, v in zip(names, row)}
        label = group_label(sizes)
        index = np.flatnonzero((table == row).all(axis=1))
        points = {k: np.asarray(v)[index] for k, v in spec.points.items()}
        for k in names:       # a structural constant is a coordinate of the group's points too
            points.setdefault(k, np.full(len(index), float(sizes[k])))
        gspec = dataclasses.replace(spec, points=points, n_points=int(len(index)),
                                    constants=constants, hash=_group_hash(spec.hash, label))
        group = Group(label, sizes, index, gspec)
        attrs = {"sweep_group": label, "structural_values": json.dumps(sizes),
                 "structural_parameters": list(names)}
        try:
            model, context = pipeline.group_context(gspec, base, sizes)
        except Exception as err:  # noqa: BLE001 - one impossible structure must not stop the sweep
            group.error = f"structure {label} cannot be built: {_error_text(err)}"
            schema = Schema(time=np.asarray(pipeline._times(spec, base), dtype=float),
                            variables={m: () for m in spec.outputs.metrics})
            group.context = FailedGroup(group.error, schema, {
                "title": spec.title, "model_yaml": base.text, "model_path": str(spec.model_path),
                "model_kind": base.kind, "group_error": group.error, **attrs}, int(gspec.batch))
        else:
            # Out of range values are bad input (exit 2), not an impossible structure.
            context.value_check = pipeline.check_point_values(gspec, model)
            context.attrs.update(attrs)
            context.attrs["model_overrides"] = json.dumps(context.override, sort_keys=True,
                                                          default=str)
            group.context, group.unknowns = context, int(model.dae.n)
            group.model = model if keep_models else None
        groups.append(group)
    return groups


def _store_bytes(group: Group) -> float:
    from sweep.pipeline import store_bytes

    if group.error:
        return float(group.n_points) * (8.0 * (len(group.context.schema.variables)
                                               + len(group.spec.points)) + 9.0)
    return store_bytes(group.spec, group.context)[0]


def check_size(spec, groups: list[Group]) -> float:
    """The store's uncompressed size over all groups, checked against ``MAX_STORE_BYTES``.

    Raises:
        InputError: over the limit, with the limit and how to raise it.
    """
    from solver.errors import MAX_STORE_BYTES, size_limit_message

    need = sum(_store_bytes(g) for g in groups)
    message = size_limit_message(
        "MAX_STORE_BYTES", MAX_STORE_BYTES, need,
        f"the store of {spec.n_points} points in {len(groups)} structure groups (every value "
        f"of each group's outputs, 8 bytes a value)",
        "lower the number of points, the structures, the output times or the variables")
    if message:
        raise InputError(message, file=str(spec.path), path="Sweep")
    return need


def describe_groups(spec, names: list[str], groups: list[Group], need: float) -> str:
    """The dry run's lines on the structure groups and the store's size."""
    from solver.errors import format_bytes

    width = max(len(g.label) for g in groups)
    lines = [f"  structure: {', '.join(names)} fix{'es' if len(names) == 1 else ''} the model's "
             f"size: {len(groups)} group{'s' if len(groups) != 1 else ''}, each built and "
             f"compiled once and stored as its own Zarr group (STORE.zarr/{groups[0].label}, ...)"]
    for g in groups:
        head = (f"    {g.label:<{width}}  {g.n_points:>6} point{'s' if g.n_points != 1 else ' '} in "
                f"{g.n_batches} batch{'es' if g.n_batches != 1 else ''}")
        if g.error:
            first = g.error.splitlines()[0]
            lines.append(f"{head}  CANNOT BE BUILT (its points will be recorded as failed, "
                         f"status error): {first}")
        else:
            lines.append(f"{head}  {g.unknowns} unknowns, about {format_bytes(_store_bytes(g))}")
    lines.append(f"  store:     about {format_bytes(need)} uncompressed in all ({spec.n_points} "
                 f"points in {len(groups)} groups)")
    return "\n".join(lines)


# ------------------------------------------------------------------ the root

def _root_attrs_for(spec, names: list[str], groups: list[Group]) -> dict:
    from solver.results.solution import package_versions

    return {
        ROOT_MARK: STRUCTURAL_FORMAT,
        "title": spec.title,
        "model_path": str(spec.model_path),
        "structural_sweep_hash": spec.hash,
        "structural_parameters": list(names),
        "structural_n_points": int(spec.n_points),
        "sweep_batch": int(spec.batch),
        "sweep_groups": [g.label for g in groups],
        "sweep_group_points": [g.n_points for g in groups],
        "package_versions": json.dumps(package_versions(), sort_keys=True),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _consolidate(path) -> None:
    """Consolidate the root's metadata (the groups' included) for quiet xarray opens."""
    import zarr

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
        zarr.consolidate_metadata(str(path))


def _template(group_path: Path, group: Group) -> None:
    from sweep.store import create_template

    ctx = group.context
    create_template(group_path, group.spec.hash, group.spec.points, ctx.schema, ctx.attrs,
                    int(group.spec.batch))


def create_root(path, spec, names: list[str], groups: list[Group]) -> None:
    """Write an empty structural store: the root and every group's template.

    Built in a temporary sibling folder and renamed into place, so a half
    written store never exists at ``path``.

    Raises:
        FileExistsError: ``path`` exists.
    """
    import zarr

    if StoreLocation(path).exists():
        raise FileExistsError(f"{path} exists; remove it or resume it")
    if is_url(path):
        # No rename on object storage: built in a local folder and uploaded, the groups'
        # template records last (a group without one is made again by the next run).
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mechsweep-template-") as folder:
            local = Path(folder) / "store.zarr"
            zarr.open_group(str(local), mode="w-", zarr_format=3,
                            attributes=_root_attrs_for(spec, names, groups))
            for g in groups:
                _template(local / g.label, g)
            _consolidate(local)
            StoreLocation(path).upload(local, last=tuple(f"{g.label}/template_commit/c" for g in groups))
        return
    from sweep.folders import publish, temporary_sibling

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    try:
        zarr.open_group(str(tmp), mode="w-", zarr_format=3,
                        attributes=_root_attrs_for(spec, names, groups))
        for g in groups:
            _template(tmp / g.label, g)
        _consolidate(tmp)
        publish(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def prepare_root(path, spec, names: list[str], groups: list[Group], mode: str) -> bool:
    """Make the structural store at ``path`` ready; whether it was created new.

    ``overwrite`` deletes a store there (a plain or structural sweep store,
    never another folder); a new (or empty) path gets :func:`create_root`;
    an existing structural store must come from the same sweep (same hash).

    Raises:
        InputError: ``path`` is no Zarr store, a store of another sweep (or a
            plain sweep store) without ``--overwrite``, or of a newer format.
    """
    from sweep.store import MODES

    where = StoreLocation(path)
    path = place(path)
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if where.exists() and mode == "overwrite":
        if not is_store(path) and (where.remote or any(path.iterdir())):
            raise InputError("exists and is not a Zarr store; refusing to delete it even with "
                             "--overwrite. Choose another --out path", file=str(path))
        where.remove()
    if not where.remote and path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
        path.rmdir()          # an empty folder given as --out
    if not where.exists():
        create_root(path, spec, names, groups)
        return True
    if not is_store(path):
        raise InputError("exists and is not a Zarr store. Choose another --out path",
                         file=str(path))
    attrs = root_attrs(path)
    if ROOT_MARK not in attrs:
        what = ("a sweep store of one structure (no groups)" if "sweep_hash" in attrs
                else "a Zarr store but not a mechsweep sweep store")
        raise InputError(f"is {what}, but this sweep varies the structural parameter"
                         f"{'s' if len(names) > 1 else ''} {', '.join(names)} and stores one "
                         f"Zarr group per structure. Pass --overwrite to replace it, or choose "
                         f"a new --out path", file=str(path))
    fmt = attrs.get(ROOT_MARK)
    if not isinstance(fmt, int) or fmt > STRUCTURAL_FORMAT:
        raise InputError(f"written by a newer mechsweep (structural store format {fmt!r}); this "
                         f"version reads formats up to {STRUCTURAL_FORMAT}. Use a newer mechsweep",
                         file=str(path))
    if attrs.get("structural_sweep_hash") != spec.hash:
        raise InputError(f"the store was written by sweep {attrs.get('structural_sweep_hash')}, "
                         f"but this sweep has hash {spec.hash} (the sweep file, its model or an "
                         f"override changed). Pass --overwrite to replace the store, or choose a "
                         f"new --out path", file=str(path))
    return False


# ------------------------------------------------------------------ running

@dataclass
class StructuralSummary:
    """What a structural sweep run did: one :class:`sweep.run.SweepSummary` per group.

    Attributes:
        store: the store path.
        names: the structural parameters.
        groups: label -> its summary, in group order.
        errors: label -> why its model cannot be built (its points failed).
    """

    store: str
    names: list
    groups: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)

    @property
    def n_points(self) -> int:
        return sum(s.n_points for s in self.groups.values())

    @property
    def store_by_status(self) -> dict[str, int]:
        """Status name -> points in the whole store (all groups) afterwards, in code order."""
        return _add(s.store_by_status for s in self.groups.values())

    @property
    def stopped(self) -> str:
        """Why a group's run stopped early, or empty."""
        return next((f"{label}: {s.stopped}" for label, s in self.groups.items() if s.stopped), "")

    @property
    def batches_left(self) -> list:
        """(group label, batch) pairs this run meant to run but left pending."""
        return [(label, i) for label, s in self.groups.items() for i in s.batches_left]

    @property
    def by_status(self) -> dict[str, int]:
        """Status name -> points written by this run (all groups), in code order."""
        return _add(s.by_status for s in self.groups.values())

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.store_by_status.items())
        lines = [f"{self.store}: {self.n_points} points in {len(self.groups)} structure groups "
                 f"({', '.join(self.names)}), one Zarr group each"]
        for label, s in self.groups.items():
            status = ", ".join(f"{k} {v}" for k, v in s.store_by_status.items())
            line = (f"  {label}: {_count(s.n_points, 'point')} in {_count(s.n_batches, 'batch')}; "
                    f"this run wrote {_count(len(s.batches_run), 'batch')} "
                    f"({_count(s.points_run, 'point')}); status: {status}")
            if label in self.errors:
                line += f"; cannot be built: {self.errors[label].splitlines()[0]}"
            lines.append(line)
            for i, why in sorted(s.batches_damaged.items()):
                lines.append(f"    batch {i} failed verification and was run again: "
                             f"{'; '.join(why)}")
            if s.batches_left:
                lines.append(f"    {len(s.batches_left)} batches left pending; run again to resume")
        lines.append(f"store status: {counts}")
        return "\n".join(lines)


def _add(counts) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items(), key=lambda kv: (st.CODES.get(kv[0], 99), kv[0])))


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("ch") else "s")


def run_groups(spec, names: list[str], groups: list[Group], out, *, workers=None, scheduler=None,
               scheduler_file=None, cluster=None, mode: str = "resume", progress: bool = True,
               note: Callable[[str], None] = _progress, progress_every: float | None = None,
               worker_timeout: float | None = None) -> StructuralSummary:
    """Run the structure groups in turn, each into its own group of the store.

    Args:
        spec, names, groups: the sweep, its structural names and
            :func:`plan_groups`.
        out: the store (root) path.
        workers, scheduler, scheduler_file, cluster, progress, progress_every, worker_timeout: as
            for :func:`sweep.run.run_sweep`, for every group that can be built.
        mode: ``resume``, ``overwrite`` (the whole store) or ``retry-failed``;
            each group is then resumed (or retried) on its own store.
        note: where the one line per group goes (stderr by default).

    Returns:
        A :class:`StructuralSummary`.

    Raises:
        InputError: see :func:`prepare_root` and :func:`sweep.run.run_sweep`.
    """
    out = place(out)
    prepare_root(out, spec, names, groups, mode)
    if workers == 0 or all(g.error for g in groups):
        return _run_groups(spec, names, groups, out, None, mode, progress, note, progress_every, worker_timeout)
    from sweep.run.cluster import dask_client, say_dashboard

    # One cluster for every group, started when the first group has batches
    # to run: starting a LocalCluster's worker processes (and their imports)
    # again for each structure cost seconds per group.
    with contextlib.ExitStack() as stack:
        started = []

        def client():
            if not started:
                started.append(stack.enter_context(dask_client(workers, scheduler, scheduler_file, cluster)))
                say_dashboard(started[0])
            return started[0]

        return _run_groups(spec, names, groups, out, client, mode, progress, note, progress_every, worker_timeout)


def _run_groups(spec, names, groups, out, client, mode, progress, note, progress_every=None,
                worker_timeout=None) -> StructuralSummary:
    """:func:`run_groups` on a prepared root; ``client`` (see :func:`sweep.run.run_sweep`) None: in this process."""
    from sweep.pipeline import batch_fn, remember_model
    from sweep.run import run_sweep

    workers = 0 if client is None else None
    group_mode = "retry-failed" if mode == "retry-failed" else "resume"
    summary = StructuralSummary(str(out), list(names))
    recreated = False
    for i, g in enumerate(groups, 1):
        path = out / g.label
        if not path.exists():        # deleted since: written again (and the root re-consolidated)
            recreated = True
        where = f"group {i}/{len(groups)}, {g.label}: {g.n_points} points in {g.n_batches} " \
                f"batch{'es' if g.n_batches != 1 else ''}"
        if g.error:
            note(f"{where}: cannot be built, its points are recorded as failed (error): "
                 f"{g.error.splitlines()[0]}")
            summary.errors[g.label] = g.error
            s = run_sweep(g.spec, failed_batch, g.context, path, workers=0, mode=group_mode,
                          progress=False, schema=g.context.schema, attrs=g.context.attrs)
        else:
            per = "" if workers == 0 else " (per worker)"
            note(f"{where}: its model ({g.unknowns} unknowns) is built for {g.label} and compiled "
                 f"once{per} for all its points")
            if g.model is not None:
                remember_model(g.context.key, g.model)
            s = run_sweep(g.spec, batch_fn, g.context, path, workers=workers, client=client, mode=group_mode,
                          progress=progress, schema=g.context.schema, attrs=g.context.attrs,
                          progress_every=progress_every, worker_timeout=worker_timeout)
            g.model = None
        summary.groups[g.label] = s
    if recreated:
        _consolidate(out)
    return summary


def run_structural_file(spec, base, names, out, *, workers=None, scheduler=None,
                        scheduler_file=None, cluster=None, mode="resume", dry_run=False,
                        progress=True, plot=None, echo=print, estimate=False, progress_every=None,
                        worker_timeout=None):
    """:func:`sweep.cli.sweep_command.run_sweep_file` for a sweep with structural parameters.

    The names are checked (structural values must be whole numbers), the
    groups planned and every group's model built once before anything is
    written; a dry run then prints the sweep, the groups and the store's
    size (``--estimate``: compile and run each group's first batch).

    ``plot``: a function drawing the summary picture (store path -> PNG path
    or None; :func:`sweep.cli.sweep_command.summary_plot`), or None for none.

    Returns:
        A :class:`StructuralSummary`, or None for a dry run.

    Raises:
        InputError: bad names or values, a store over ``MAX_STORE_BYTES``, an
            unusable ``--out``.
    """
    from sweep.pipeline import _check_swept_names

    _check_swept_names(spec, base)
    in_process = workers == 0 or (dry_run and estimate)
    groups = plan_groups(spec, base, names, keep_models=in_process)
    need = check_size(spec, groups)
    if dry_run:
        echo(spec.describe(batches=sum(g.n_batches for g in groups)))
        echo(describe_groups(spec, names, groups, need))
        checks = sorted({g.context.value_check for g in groups if not g.error})
        echo("  checked:   the model loads for every structure that is not marked; parameter "
             "and output names match; in each structure group, "
             + ("; ".join(checks) if checks else "no values (no group can be built)"))
        if estimate:
            echo(_estimate(groups, workers, scheduler or scheduler_file or cluster))
        return None
    summary = run_groups(spec, names, groups, out, workers=workers, scheduler=scheduler,
                         scheduler_file=scheduler_file, cluster=cluster, mode=mode,
                         progress=progress, progress_every=progress_every, worker_timeout=worker_timeout)
    echo(str(summary))
    if plot:
        png = plot(out)
        if png:
            echo(f"summary picture: {png}")
    return summary


def _estimate(groups: list[Group], workers, remote) -> str:
    """``--estimate`` for structure groups: compile and run each group's first batch."""
    from sweep.pipeline import estimate_run, remember_model
    from sweep.run import format_seconds, local_cores

    n_workers = workers or local_cores()
    lines, total = [], 0.0
    for g in groups:
        if g.error:
            continue
        print(f"  estimate:  {g.label}: compiling and running batch 0 ({g.context.batch} "
              f"points) ...", file=sys.stderr, flush=True)
        if g.model is not None:
            remember_model(g.context.key, g.model)
        e = estimate_run(g.spec, g.context, n_workers)
        g.model = None
        total += e["total_seconds"]
        lines.append(f"    {g.label}: compile {e['compile_seconds']:.3g} s, {e['seconds_per_point']:.3g} "
                     f"s a point ({e['failed']} of batch 0 failed), about "
                     f"{format_seconds(e['total_seconds'])}")
    basis = (f"{n_workers} workers" + ("" if workers else " (the local cores; set --workers)")
             + (" (assumed for the given scheduler or cluster)" if remote else ""))
    return "\n".join(["  estimate per group (groups run one after the other):", *lines,
                      f"  total:     about {format_seconds(total)} on {basis}"])


# ------------------------------------------------------------------ reading

def status_report(path, level: str = "quick") -> tuple[str, bool]:
    """``mechsweep status`` of a structural store: a header, then each group's report.

    Args:
        path: the root.
        level: the :func:`sweep.store.check_store` level for every group.

    Returns:
        ``(text, ok)``: ``ok`` is False when a group's store is damaged or
        missing (pending batches are not damage).

    Raises:
        InputError: not a structural store; ``--verify`` on a group of
            format 1 (cannot happen for stores written by this version).
    """
    from sweep.store import check_store
    from sweep.store import status_report as group_report

    path = place(path)
    attrs, labels = groups_of(path)
    points = attrs.get("sweep_group_points") or [None] * len(labels)
    ok, totals, reports = True, {}, []
    for label, n in zip(labels, points):
        gpath = path / label
        if not is_store(gpath):
            ok = False
            reports.append(f"group {label}: MISSING ({n} points): its Zarr group is gone; "
                           f"'mechsweep sweep SWEEP.yaml --out {path} --resume' recomputes it")
            totals["missing"] = totals.get("missing", 0) + int(n or 0)
            continue
        try:
            check = check_store(gpath, level)
        except InputError as err:      # its metadata unreadable: the other groups still report
            ok = False
            reports.append(f"group {label}: UNREADABLE ({n} points): {err}; 'mechsweep sweep "
                           f"SWEEP.yaml --out {path} --overwrite' recomputes the store")
            totals["damaged"] = totals.get("damaged", 0) + int(n or 0)
            continue
        ok = ok and check.ok
        for i, sl in enumerate(check.slices):
            codes = check.codes[sl]
            if i in check.damaged:
                totals["damaged"] = totals.get("damaged", 0) + len(codes)
                continue
            for v, c in zip(*np.unique(codes, return_counts=True)):
                totals[st.meaning(v)] = totals.get(st.meaning(v), 0) + int(c)
        text = group_report(gpath, check=check)
        reports.append(f"group {label}:\n" + "\n".join("  " + line for line in text.splitlines()))
    lines = [
        f"store:      {path} (structural sweep: one Zarr group per structure)",
        f"title:      {attrs.get('title', '')}",
        f"sweep hash: {attrs.get('structural_sweep_hash', '?')}",
        f"created:    {attrs.get('created', '?')}",
        f"structural: {', '.join(attrs.get('structural_parameters') or [])}",
        f"points:     {attrs.get('structural_n_points', '?')} in {len(labels)} groups: "
        + ", ".join(f"{label} ({n})" for label, n in zip(labels, points)),
        "status:     " + (", ".join(f"{k} {v}" for k, v in sorted(
            totals.items(), key=lambda kv: (st.CODES.get(kv[0], 99), kv[0]))) or "nothing"),
        *reports,
    ]
    return "\n".join(lines), ok


def points_dataset(path):
    """The per-point values of every group of a structural store, as one Dataset.

    The coordinates on ``point`` (swept names, the structural ones among
    them), the scalar outputs (metrics) and ``status`` of the groups,
    concatenated along ``point`` in group order (for summaries and plots;
    the series stay in the groups, whose shapes differ).
    """
    import xarray as xr

    path = place(path)
    attrs, labels = groups_of(path)
    parts = []
    for label in labels:
        if not is_store(path / label):
            continue
        ds = xr.open_zarr(str(path / label))
        keep = [v for v in ds.data_vars if ds[v].dims == ("point",)]
        parts.append(ds[keep])        # keeps the coordinates on point only
    if not parts:
        return xr.Dataset(attrs=attrs)
    combined = xr.concat(parts, dim="point", join="outer", data_vars="all", coords="different",
                         compat="equals")
    combined.attrs = dict(attrs)
    return combined
