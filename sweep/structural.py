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
import hashlib
import json
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from solver import status as st
from solver.errors import InputError
from sweep.log import PLAIN, get_logger
from sweep.store.schema import place
from sweep.store.tree import ROOT_MARK, is_structural_store, open_tree, root_attrs
# Re-exported: the store's root was made and read here before sweep.structural_store.
from sweep.structural_store import (STRUCTURAL_FORMAT, consolidate_root, create_root, points_dataset, prepare_root,
                                    status_report)

__all__ = ["ROOT_MARK", "STRUCTURAL_FORMAT", "Group", "FailedGroup", "StructuralSummary",
           "group_label", "plan_groups", "failed_batch", "is_structural_store", "root_attrs",
           "create_root", "prepare_root", "run_groups", "run_structural_file", "status_report",
           "open_tree", "points_dataset", "describe_groups"]

log = get_logger("structural")


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
        batch_line: the dry run's line on a batch's outputs and a worker's
            estimated peak memory (:func:`sweep.pipeline.check_batch_memory`).
    """

    label: str
    sizes: dict
    index: np.ndarray
    spec: Any
    context: Any = None
    error: str = ""
    unknowns: int | None = None
    model: Any = field(default=None, repr=False)
    batch_line: str = ""

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
            ``sweep.pipeline.check_swept_names``).
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
            schema = Schema(time=np.asarray(pipeline.sweep_times(spec, base), dtype=float),
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
            # A batch of this structure must fit a worker (its model sets the
            # estimate): refused before anything runs, as for a plain sweep.
            try:
                group.batch_line = pipeline.check_batch_memory(gspec, context, model)
            except InputError as err:
                raise InputError(f"structure {label}: {err.message}", file=err.file, path=err.path) from None
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
            if g.batch_line:
                lines.append("      " + g.batch_line.strip())
    lines.append(f"  store:     about {format_bytes(need)} uncompressed in all ({spec.n_points} "
                 f"points in {len(groups)} groups)")
    return "\n".join(lines)


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

    @property
    def compile_seconds(self) -> float:
        """The workers' seconds spent compiling, summed over every group's batches."""
        return sum(s.compile_seconds for s in self.groups.values())

    @property
    def solve_seconds(self) -> float:
        """The rest of the workers' batch time, summed over every group's batches."""
        return sum(s.solve_seconds for s in self.groups.values())

    @property
    def batches_run(self) -> list:
        """(group label, batch) pairs this run wrote."""
        return [(label, i) for label, s in self.groups.items() for i in s.batches_run]

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
               scheduler_file=None, cluster=None, mode: str = "resume", progress: bool = False,
               note: Callable[[str], None] | None = None, progress_every: float | None = None,
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
        note: where the one line per group goes (default: an ``INFO`` record of
            the ``mechsweep.structural`` logger, :mod:`sweep.log`).

    Returns:
        A :class:`StructuralSummary`.

    Raises:
        InputError: see :func:`prepare_root` and :func:`sweep.run.run_sweep`.
    """
    out = place(out)
    note = log.info if note is None else note
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
                started.append(stack.enter_context(dask_client(workers, scheduler, scheduler_file, cluster,
                                                               tiered=True)))
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
        consolidate_root(out)
    return summary


def run_structural_file(spec, base, names, out, *, workers=None, scheduler=None,
                        scheduler_file=None, cluster=None, mode="resume", dry_run=False,
                        progress=False, plot=None, echo=None, estimate=False, progress_every=None,
                        worker_timeout=None):
    """:func:`sweep.cli.sweep_command.run_sweep_file` for a sweep with structural parameters.

    The names are checked (structural values must be whole numbers), the
    groups planned and every group's model built once before anything is
    written; a dry run then prints the sweep, the groups and the store's
    size (``--estimate``: compile and run each group's first batch).

    ``plot``: a function drawing the summary picture (store path -> PNG path
    or None; :func:`sweep.cli.sweep_command.summary_plot`), or None for none.
    ``echo``: where the dry run's report and the summary go (the command
    line passes ``print``; default: ``INFO`` records of the
    ``mechsweep.structural`` logger).  ``progress``: a progress bar on a
    terminal (off by default).

    Returns:
        A :class:`StructuralSummary`, or None for a dry run.

    Raises:
        InputError: bad names or values, a store over ``MAX_STORE_BYTES``, an
            unusable ``--out``.
    """
    from sweep.pipeline import check_swept_names

    check_swept_names(spec, base)
    echo = log.info if echo is None else echo
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
        log.info(f"  estimate:  {g.label}: compiling and running batch 0 ({g.context.batch} "
                 f"points) ...", extra=PLAIN)
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
