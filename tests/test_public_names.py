"""Every public name the README of release 0.1 showed users still imports and is the documented kind of thing.

Specification (issue 40: "every public name of today's README still imports
and works"): the layout move split modules and moved the README's content
into the docs site, and a user's script written against the README of
release 0.1 must keep running.  The names below are every ``solver.…`` and
``sweep.…`` name that README (and ``docs/``) named, as it named them; the
accessor's methods are reached as users reach them, ``ds.sweep.grid()``.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest
import xarray as xr

# Module paths the README named.
MODULES = [
    "solver.dae", "solver.dae.sparsity", "solver.dae.structure", "solver.integrate", "solver.integrate.initialize",
    "solver.integrate.integrator", "solver.mechanics", "solver.mechanics.natural", "solver.mechanics.stops",
    "solver.models", "solver.numerics", "solver.numerics.kkt", "solver.status", "solver.taylor",
    "solver.taylor.clean", "sweep.accessor", "sweep.store",
]

# Functions and classes the README named, by the path it gave.
CALLABLES = [
    "solver.DAE", "solver.Event", "solver.api.integrator_for", "solver.compiled_model", "solver.dae.problem.DAE",
    "solver.ddt", "solver.equilibrium", "solver.integrate.Integrator", "solver.integrate.integrator.output_rows",
    "solver.integrate.integrator.step_loop_condition", "solver.integrate.integrator.tape_ops",
    "solver.integrate.sensitivity.metric_tangent", "solver.lagrangian", "solver.lagrangian_ds", "solver.load",
    "solver.mechanics.stops.Stop", "solver.solve", "solver.solve_batch",
    "sweep.design.optimize.build_problem", "sweep.design.optimize.evaluate", "sweep.design.optimize.run_design",
    "sweep.design.spec.load_design", "sweep.run.configure_jax", "sweep.run.dask_client", "sweep.store.open_store",
]

# Values the README named.
VALUES = ["solver.integrate.integrator.WHOLE_ROUND_CPU_OPTIONS", "sweep.pipeline.MODEL_BUILDS"]

# The ``ds.sweep`` accessor's methods the README used.
ACCESSOR_METHODS = ["grid", "failures", "failure_table"]


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("name", MODULES)
def test_a_module_path_of_the_readme_imports(name):
    assert isinstance(importlib.import_module(name), types.ModuleType)


@pytest.mark.parametrize("name", CALLABLES)
def test_a_function_or_class_of_the_readme_is_still_there(name):
    obj = resolve(name)
    assert inspect.isclass(obj) or callable(obj), f"{name} is {type(obj).__name__}, not a function or class"
    assert not isinstance(obj, types.ModuleType), f"{name} became a module"


@pytest.mark.parametrize("name", VALUES)
def test_a_value_of_the_readme_is_still_there(name):
    assert resolve(name) is not None


@pytest.mark.parametrize("method", ACCESSOR_METHODS)
def test_the_sweep_accessor_keeps_its_methods(method):
    import sweep.accessor  # noqa: F401  (registers ds.sweep)

    assert callable(getattr(xr.Dataset().sweep, method))
