"""An analytic batch function for the sweep runtime tests (importable by Dask workers).

Damped oscillator ``x'' + 2 zeta omega x' + omega**2 x = 0``, ``x(0) = 1``,
``x'(0) = 0``, whose underdamped closed form is

    x(t) = exp(-zeta omega t) (cos(wd t) + zeta omega / wd sin(wd t))
    x'(t) = -(omega**2 / wd) exp(-zeta omega t) sin(wd t),   wd = omega sqrt(1 - zeta**2).

Points "fail" on purpose: ``zeta >= 1`` (no underdamped solution) gives
``no_assembly``, ``omega > omega_max`` gives ``max_steps``, and a batch
containing ``omega == raise_at`` raises. A batch can hold ``hog_bytes`` of
memory (so tests can exceed a worker's memory limit), sleep (so tests can kill
processes while tasks run) and append a line to a log file (so tests can see
which batches ran, and in which run).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from solver import status as st
from sweep.store import BatchResult, Schema, batch_slices


@dataclass
class ToyContext:
    """What stays fixed: output times and the test knobs."""

    time: np.ndarray = field(default_factory=lambda: np.linspace(0.0, 2.0, 9))
    sleep: float = 0.0
    log: str | None = None
    tag: str = "run"
    omega_max: float = np.inf
    raise_at: float | None = None
    hog_bytes: int = 0

    @property
    def schema(self) -> Schema:
        return Schema(time=self.time,
                      variables={"x": ("time",), "pos": ("time", "axis"), "x_end": ()},
                      coords={"axis": np.array(["x", "y", "z"])},
                      attrs={"x": {"units": "m"}, "time": {"units": "s"}})

    @property
    def attrs(self) -> dict:
        return {"model_yaml": "Title: toy oscillator\n", "solver_settings": {"tol": 1e-10}}


def oscillator(omega: float, zeta: float, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form position and velocity of one underdamped point."""
    wd = omega * np.sqrt(1.0 - zeta ** 2)
    decay = np.exp(-zeta * omega * t)
    x = decay * (np.cos(wd * t) + zeta * omega / wd * np.sin(wd * t))
    v = -(omega ** 2 / wd) * decay * np.sin(wd * t)
    return x, v


def toy_batch(points: dict, context: ToyContext) -> BatchResult:
    """The batch function: one closed-form trajectory per point."""
    omega, zeta = np.asarray(points["omega"]), np.asarray(points["zeta"])
    if context.log:
        with open(context.log, "a") as f:
            f.write(f"{context.tag} {float(omega[0])!r} {float(zeta[0])!r} {os.getpid()}\n")
    held = np.ones(context.hog_bytes // 8) if context.hog_bytes else None   # touched: resident
    if context.sleep:
        time.sleep(context.sleep)
    del held
    if context.raise_at is not None and np.any(omega == context.raise_at):
        raise RuntimeError(f"toy failure at omega={context.raise_at}")
    n, t = len(omega), context.time
    status = np.zeros(n, np.int8)
    x = np.full((n, len(t)), np.nan)
    pos = np.full((n, len(t), 3), np.nan)
    for i in range(n):
        if zeta[i] >= 1.0:
            status[i] = st.NO_ASSEMBLY
        elif omega[i] > context.omega_max:
            status[i] = st.MAX_STEPS
        else:
            x[i], v = oscillator(omega[i], zeta[i], t)
            pos[i] = np.stack([x[i], v / omega[i], np.zeros_like(t)], axis=-1)
    steps = np.ceil(omega * t[-1] * 10).astype(np.int64)
    return BatchResult(status, steps, {"x": x, "pos": pos, "x_end": x[:, -1]})


def grid_spec(omegas, zetas, batch: int, hash: str = "toyhash-1", title: str = "toy sweep"):
    """A spec-like object: the Cartesian product omega x zeta, omega slowest."""
    om, ze = np.meshgrid(np.asarray(omegas, float), np.asarray(zetas, float), indexing="ij")
    points = {"omega": om.ravel(), "zeta": ze.ravel()}
    n = om.size
    return SimpleNamespace(points=points, batch=batch, hash=hash, title=title, n_points=n,
                           n_batches=len(batch_slices(n, batch)))


def serial_reference(spec, context: ToyContext) -> dict:
    """A plain loop over the batches (no store, no Dask), failed points set to NaN.

    A batch that raises counts as ``error`` for all its points, as the runtime's
    contract says.
    """
    quiet = ToyContext(time=context.time, omega_max=context.omega_max, raise_at=context.raise_at)
    parts = []
    for sl in batch_slices(spec.n_points, spec.batch):
        try:
            parts.append(toy_batch({k: v[sl] for k, v in spec.points.items()}, quiet))
        except RuntimeError:
            parts.append(BatchResult.failed(sl.stop - sl.start, st.ERROR, "raised"))
            parts[-1].data = {"x": np.full((sl.stop - sl.start, len(context.time)), np.nan),
                              "pos": np.full((sl.stop - sl.start, len(context.time), 3), np.nan),
                              "x_end": np.full(sl.stop - sl.start, np.nan)}
    out = {"status": np.concatenate([p.status for p in parts]),
           "steps": np.concatenate([p.steps for p in parts])}
    for name in ("x", "pos", "x_end"):
        out[name] = np.concatenate([p.data[name] for p in parts])
        out[name][out["status"] != st.SUCCESS] = np.nan
    return out


def first_points(spec) -> dict:
    """(omega, zeta) of each batch's first point -> batch index, to decode the log."""
    return {(spec.points["omega"][sl.start], spec.points["zeta"][sl.start]): i
            for i, sl in enumerate(batch_slices(spec.n_points, spec.batch))}


def read_log(path, spec) -> list[tuple[str, int, int]]:
    """The log as (tag, batch index, pid) lines."""
    index = first_points(spec)
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):     # being written right now
                break
            tag, omega, zeta, pid = line.split()
            out.append((tag, index[(float(omega), float(zeta))], int(pid)))
    return out
