"""The layout move of release 0.2 keeps every old import path for one release.

Specification: each flat module of ``solver/`` and ``sweep/`` that moved into
a sub-package still imports under its old path, as the very same module
object, with a DeprecationWarning naming the new path; an old module whose
name is now a sub-package (``solver.integrate``) serves the old module's
names; the package's public functions that share a name with an old module
(``solver.lagrangian``, ``solver.ddt``, ``solver.equilibrium``) stay
functions.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import solver
from solver.module_aliases import SOLVER_MOVED

SWEEP_MOVED = {"sweep.design_spec": "sweep.design.spec", "sweep.design_record": "sweep.design.record",
               "sweep.runner_cli": "sweep.cli.sweep_command"}


@pytest.mark.parametrize("old,new", sorted({**SOLVER_MOVED, **SWEEP_MOVED}.items()))
def test_an_old_module_path_is_the_new_module(old, new):
    import sweep  # noqa: F401  (installs sweep's aliases)

    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize("package,name,home", [
    ("solver.integrate", "Integrator", "solver.integrate.integrator"),
    ("solver.integrate", "order_for_tol", "solver.integrate.integrator"),
    ("solver.taylor", "TaylorProgram", "solver.taylor.program"),
    ("solver.dae", "DAE", "solver.dae.problem"),
    ("sweep.design", "build_problem", "sweep.design.optimize"),
    ("sweep.cli", "main", "sweep.cli.app"),
])
def test_an_old_module_now_a_package_serves_its_names(package, name, home):
    with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved to {home}.{name}"):
        value = getattr(importlib.import_module(package), name)
    assert value is getattr(importlib.import_module(home), name)


def test_a_package_serves_its_own_modules_without_a_warning(recwarn):
    from solver.integrate import xla_setup
    from sweep.cli import sweep_command

    assert xla_setup.__name__ == "solver.integrate.xla_setup"
    assert sweep_command.__name__ == "sweep.cli.sweep_command"
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_an_unknown_name_of_a_package_is_an_attribute_error():
    import solver.integrate

    with pytest.raises(AttributeError, match="module 'solver.integrate' has no attribute 'no_such_name'"):
        solver.integrate.no_such_name  # noqa: B018


def test_public_functions_named_like_old_modules_stay_functions():
    import solver.mechanics.lagrangian  # noqa: F401
    import solver.analysis.equilibrium  # noqa: F401
    import solver.dae.derivative  # noqa: F401

    assert callable(solver.lagrangian) and solver.lagrangian.__name__ == "lagrangian"
    assert callable(solver.equilibrium) and solver.equilibrium.__name__ == "equilibrium"
    assert callable(solver.ddt) and solver.ddt.__name__ == "ddt"


def test_every_public_name_of_the_package_imports():
    for name in solver.__all__:
        assert getattr(solver, name) is not None, name


def test_the_mechsweep_entry_point_runs():
    out = subprocess.run([sys.executable, "-c", "from sweep.cli.app import main; raise SystemExit(main(['--help']))"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "mechsweep" in out.stdout


@pytest.mark.parametrize("package", ["solver", "sweep.store", "sweep.cli.app"])
def test_names_served_on_first_use_are_their_home_modules_objects(package):
    # solver, sweep.store and sweep.cli.app serve their public names lazily (module_aliases.lazy_names):
    # each one is the very object of its home module, listed by dir(), and kept once looked up.
    module = importlib.import_module(package)
    for name in getattr(module, "__all__", []):
        value = getattr(module, name)
        assert name in dir(module) and name in vars(module), name
        if callable(value) or isinstance(value, type(module)):   # functions, classes, modules: their home's own
            home = importlib.import_module(getattr(value, "__module__", None) or value.__name__)
            assert getattr(home, name, value) is value, name
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        getattr(module, "no_such_name")


def test_sub_packages_stay_attributes_of_a_bare_import():
    # Before the names were served lazily, `import solver` imported solver.api and with it solver.dae,
    # solver.integrate, ...: code that reached them as attributes keeps working.
    code = ("import solver, sweep.store; print(solver.dae.structure.analyse.__name__, solver.api.solve.__name__, "
            "sweep.store.check.check_store.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["analyse", "solve", "check_store"]
