"""The import map of solver/ and sweep/: one direction, layers, no cycles, no private names across modules.

Specification (issues 12 and 40):

* the import order is declared as contracts in ``pyproject.toml``
  (``[tool.importlinter]``) and checked by import-linter, which reads every
  import statement of every module (inside functions too) without importing
  anything:

  - ``solver`` never imports ``sweep`` (the sweep pipeline is built on the
    solver's public API, never the other way round);
  - each package is a stack of layers: a layer imports only the layers
    below it (e.g. the core, ``solver.dae``, ``solver.taylor``,
    ``solver.numerics``, ``solver.integrate``, never imports a facility
    built on top of it, ``solver.mechanics`` or ``solver.models``: a facility
    hands the core its structure as data);
  - no import cycles among the modules of any package;

* no module imports another module's private name (``from a import _b``):
  what modules share has a public name in its home module;
* ``sweep`` uses only ``solver``'s public API: the package's exports
  (``solver.__all__``) and the public modules of :data:`SOLVER_PUBLIC`,
  never a private name.

Each check is shown to fail on a planted violation.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("solver", "sweep")


def _modules() -> dict[str, Path]:
    """Every module of solver/ and sweep/, by dotted name."""
    mods = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = f
    return mods


MODULES = _modules()


# ------------------------------------------------------- the contracts (import-linter)
def lint_imports(root: Path, *contracts: str) -> subprocess.CompletedProcess:
    """Run import-linter on the packages under ``root`` with ``root/pyproject.toml``'s contracts (or those named)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    chosen = [arg for contract in contracts for arg in ("--contract", contract)]
    return subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--no-cache", *chosen, str(root / "pyproject.toml")],
        cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_declared_import_contracts_are_kept():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "broken" in run.stdout and " 0 broken" in run.stdout


def layered_names() -> set[str]:
    """Every module or package named in a layer of the layers contracts of ``pyproject.toml``."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return {part.strip() for c in contracts if c["type"] == "layers" for layer in c["layers"]
            for part in layer.replace(":", "|").split("|")}


def test_every_module_sits_in_a_layer():
    # A module outside every layer would escape the layers contracts: a new module must be placed.
    layered = layered_names()
    packages = {"solver", "sweep", "solver.analysis"}   # containers whose children are placed one by one
    loose = sorted(m for m in MODULES if m not in packages and not any(m == n or m.startswith(n + ".")
                                                                          for n in layered))
    assert loose == [], f"place these modules in a layer of [tool.importlinter] in pyproject.toml: {loose}"


@pytest.fixture
def copy_of_the_packages(tmp_path):
    """solver/, sweep/ and pyproject.toml copied, for planting violations."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("module, planted, contract", [
    ("solver/dae/__init__.py", "import sweep.store", "solver-below-sweep"),
    ("solver/taylor/__init__.py", "def _f():\n    from solver.models import model", "solver-layers"),
    ("sweep/location.py", "def _f():\n    import sweep.store", "sweep-layers"),
    ("solver/results/planted_a.py", "import solver.results.planted_b", "no-cycles"),
], ids=["solver-imports-sweep", "core-imports-a-facility", "upward-in-sweep", "cycle"])
def test_a_planted_violation_breaks_its_contract(copy_of_the_packages, module, planted, contract):
    path = copy_of_the_packages / module
    path.write_text((path.read_text() if path.exists() else "") + "\n\n" + planted + "\n")
    if contract == "no-cycles":  # its partner, importing it back
        (path.parent / "planted_b.py").write_text("from solver.results import planted_a\n")
    run = lint_imports(copy_of_the_packages, contract)
    assert run.returncode == 1 and "1 broken" in run.stdout, run.stdout + run.stderr


# ------------------------------------------------------ private names stay at home
def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(tree: ast.AST) -> list[str]:
    """Every private name of another module ``tree`` takes, as ``"line N: module._name"``.

    ``from solver.x import _name`` and ``from sweep.x import _name``, and
    ``module._name`` where ``module`` is a module of the packages imported
    by name (``from sweep import pipeline``, ``import sweep.pipeline as pipeline``).
    """
    bad, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] in PACKAGES:
            bad.extend(f"line {node.lineno}: {node.module}.{a.name}" for a in node.names if _private(a.name))
            modules.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                            if f"{node.module}.{a.name}" in MODULES})
        elif isinstance(node, ast.Import):
            modules.update({a.asname: a.name for a in node.names
                            if a.asname and a.name.split(".")[0] in PACKAGES})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in modules and _private(node.attr):
            bad.append(f"line {node.lineno}: {modules[node.value.id]}.{node.attr}")
    return sorted(set(bad), key=lambda b: (int(b.split(":")[0].split()[1]), b))


def test_the_private_import_scan_finds_planted_ones():
    tree = ast.parse("from solver.taylor.program import _LINEAR, TaylorProgram\n"
                     "from solver import module_aliases as _aliases\n"
                     "def f():\n"
                     "    from sweep.store import _place\n"
                     "from numpy import _core\n"
                     "from sweep import pipeline\n"
                     "import sweep.metrics as m\n"
                     "x = pipeline._model(1) + m._fold + pipeline.public + zarr_store._store\n")
    assert private_imports(tree) == ["line 1: solver.taylor.program._LINEAR", "line 4: sweep.store._place",
                                     "line 8: sweep.metrics._fold", "line 8: sweep.pipeline._model"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_private_name_of_another(module):
    bad = private_imports(ast.parse(MODULES[module].read_text(), str(MODULES[module])))
    assert bad == [], (f"{module} imports private names; give them a public name in their module "
                       f"(and a docstring) if they are shared:\n" + "\n".join(bad))


# ------------------------------------------------- sweep uses the solver's public API
# What sweep/ may import from solver/ (issue 12: "sweep -> solver's public API
# only"): the package itself, whose exports (``solver.__all__``) are the front
# door, and the modules documented for users: status codes, input errors and
# limits, the expression language and YAML reading of the model files, the
# model kinds (``solver.models``, ``solver.models.model``), the names of the
# outputs (``solution``, ``sensitivity``), and the ``check``/``plot`` facilities. The engine
# (``compiled``, ``api``, ``initialize``, ``balance``...), the core and the
# facilities' internals are reached through ``solver``'s exports only.
SOLVER_PUBLIC = ("solver", "solver.status", "solver.errors", "solver.models.expr", "solver.models.yamlio",
                 "solver.models", "solver.models.model", "solver.results.solution", "solver.analysis.diagnose",
                 "solver.results.plot", "solver.integrate.sensitivity", "solver.module_aliases")


def _exports(path: Path) -> set[str]:
    """``__all__`` of a module, read by ``ast``."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__"
                                                for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


SOLVER_EXPORTS = _exports(ROOT / "solver" / "__init__.py")


def solver_uses(tree: ast.AST) -> list[str]:
    """Every use of solver/ outside its public API in ``tree``, as ``"line N: what"``.

    ``from solver.M import name`` and ``import solver.M`` need M in
    :data:`SOLVER_PUBLIC` and a name without a leading underscore;
    ``from solver import name`` and ``solver.name`` need a name of
    ``solver.__all__`` or a public module.
    """
    bad = []

    def check(line, module, name=None):
        if not (module == "solver" or module.startswith("solver.")):
            return
        if module not in SOLVER_PUBLIC:
            bad.append(f"line {line}: {module}" + (f".{name}" if name else "") +
                       f" ({module} is not public)")
        elif module == "solver" and name is not None and name not in SOLVER_EXPORTS \
                and f"solver.{name}" not in SOLVER_PUBLIC:
            bad.append(f"line {line}: solver.{name} (not in solver.__all__)")
        elif name is not None and name.startswith("_"):
            bad.append(f"line {line}: {module}.{name} (private)")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                check(node.lineno, node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                check(node.lineno, a.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "solver":
            check(node.lineno, "solver", node.attr)
    return sorted(bad, key=lambda b: int(b.split(":")[0].split()[1]))


def test_the_public_api_scan_finds_planted_uses():
    tree = ast.parse("import solver\n"
                     "from solver.integrate.integrator import order_for_tol\n"
                     "from solver.results.solution import _json_safe, output_layout\n"
                     "from solver import order_for_tol, status, nothing_exported\n"
                     "import solver.compiled\n"
                     "x = solver.integrate.integrator.order_for_tol(1e-8) + solver.order_for_tol(1e-8)\n"
                     "y = solver.status.SUCCESS\n")
    assert solver_uses(tree) == [
        "line 2: solver.integrate.integrator.order_for_tol (solver.integrate.integrator is not public)",
        "line 3: solver.results.solution._json_safe (private)",
        "line 4: solver.nothing_exported (not in solver.__all__)",
        "line 5: solver.compiled (solver.compiled is not public)",
        "line 6: solver.integrate (not in solver.__all__)",
    ]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[0] == "sweep"))
def test_sweep_uses_only_the_solver_public_api(module):
    path = MODULES[module]
    bad = solver_uses(ast.parse(path.read_text(), str(path)))
    assert bad == [], (f"{module} reaches solver internals; export what it needs from solver "
                       f"(solver/__init__.py) or use a public module:\n" + "\n".join(bad))


# ------------------------------------------------------------- module size and purpose
MAX_MODULE_LINES = 700


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_is_small_and_says_what_it_is_for(module):
    text = MODULES[module].read_text()
    lines = len(text.splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines: split it at a seam (at most {MAX_MODULE_LINES})"
    doc = ast.get_docstring(ast.parse(text))
    assert doc and doc.splitlines()[0].strip(), f"{module} has no docstring whose first line states its concern"


def _printed_by_a_new_python(code: str) -> str:
    """What ``code`` prints (stripped), run by a new Python in the repository; it must exit 0."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_solving_commands_start_without_the_sweep_pipeline():
    """``mechsweep simulate`` (and check, equilibrium, plot, animate) imports neither Dask nor Zarr,
    which it does not use.  Their modules and the JAX set-up are imported in a fresh interpreter,
    as the command line does for them."""
    code = ("import sys\n"
            "from sweep.cli import app\n"
            "app.cmd_simulate, app.cmd_check, app.cmd_equilibrium\n"
            "from sweep.jax_cache import configure_jax\n"
            "print(sorted(m for m in ('dask', 'distributed', 'zarr', 'sweep.store', 'sweep.run') "
            "if m in sys.modules))\n")
    assert _printed_by_a_new_python(code) == "[]"
    # and the sweep's commands still come from the same place
    code = "from sweep.cli import app\nprint(app.cmd_sweep.__module__, app.main_default.__module__)\n"
    assert _printed_by_a_new_python(code).split() == ["sweep.cli.sweep_command"] * 2


def test_the_jaxpr_types_are_jax_extend_cores_and_the_solver_does_not_import_jax_extend():
    """solver.dae.jaxpr_core holds jax.extend.core's own objects (a JAX that moves them fails here), and
    the solver's modules import none of jax.extend's package (Pallas, Mosaic, checkify)."""
    import jax.extend.core

    from solver.dae import jaxpr_core

    for name in jaxpr_core.__all__:
        assert getattr(jaxpr_core, name) is getattr(jax.extend.core, name), name
    code = ("import sys\n"
            "import solver, solver.api, solver.models, solver.compiled, solver.mechanics.lagrangian\n"
            "import solver.integrate.single_run, solver.integrate.pool, solver.taylor.compact\n"
            "print(sorted(m for m in sys.modules if m.startswith(('jax.extend', 'jax._src.pallas'))))\n")
    assert _printed_by_a_new_python(code) == "[]"


def test_an_unknown_name_of_the_command_line_module_is_an_attribute_error():
    from sweep.cli import app

    with pytest.raises(AttributeError, match="has no attribute 'cmd_nothing'"):
        app.cmd_nothing  # noqa: B018
