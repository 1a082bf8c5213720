"""The import map of solver/ and sweep/: one direction, no cycles.

Specification (issue 12):

* ``solver`` never imports ``sweep`` (the sweep pipeline is built on the
  solver's public API, never the other way round);
* the core (``solver.dae``, ``solver.taylor``, ``solver.numerics``,
  ``solver.integrate``) never imports a facility built on top of it
  (``solver.mechanics``, ``solver.models``): a facility hands the core its
  structure as data;
* no two modules import each other, directly or through others;
* ``sweep`` uses only ``solver``'s public API: the package's exports
  (``solver.__all__``) and the public modules of :data:`SOLVER_PUBLIC`,
  never a private name.

Imports are read from the source by ``ast`` (nothing is imported), at every
level: an import inside a function is as much a dependency as one at the top
of the file, it is only hidden.  ``importlib.import_module("solver.x")``
with a literal name counts too.  A package's ``__init__`` re-exporting its
children is not a dependency of those children.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("solver", "sweep")
CORE = ("solver.dae", "solver.taylor", "solver.numerics", "solver.integrate")
FACILITIES = ("solver.mechanics", "solver.models")


# ------------------------------------------------------------------ the scan
def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = f
    return mods


def _imported_names(tree: ast.AST, package: str) -> set[str]:
    """Every dotted name an import statement anywhere in ``tree`` may load."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            out.add(node.args[0].value)
    # "import solver.a.b" loads solver.a as well.
    for name in list(out):
        parts = name.split(".")
        out.update(".".join(parts[:k]) for k in range(1, len(parts)))
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of solver/ and sweep/ it imports (itself excluded)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = _imported_names(ast.parse(path.read_text(), str(path)), package) & set(mods)
        deps.discard(name)
        # A package's __init__ is loaded before its children whatever they
        # import; it re-exports them, which makes it no dependency of theirs.
        graph[name] = {d for d in deps if not (mods[d].name == "__init__.py" and name.startswith(d + "."))}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


GRAPH = import_graph()


def _is(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") or name.startswith(p + "_") for p in prefixes)


# --------------------------------------------------------------- the scan works
def test_the_scan_reads_both_packages_and_imports_at_every_level():
    assert {"solver", "sweep", "solver.mechanics.lagrangian"} | set(CORE) <= set(GRAPH)
    assert "solver.taylor.program" in GRAPH["solver.integrate.integrator"]
    tree = ast.parse("import jax\n"
                     "from . import b\n"
                     "from .c import thing\n"
                     "def f():\n"
                     "    from ..other.d import e\n"
                     "    import solver.x.y\n"
                     "    return importlib.import_module('solver.z')\n")
    names = _imported_names(tree, "solver.pkg")
    assert {"jax", "solver.pkg.b", "solver.pkg.c", "solver.other.d", "solver.other.d.e",
            "solver.x", "solver.x.y", "solver.z"} <= names


def test_the_cycle_finder_finds_planted_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}}) == [["a", "b", "c"],
                                                                                       ["d", "e"]]


# ---------------------------------------------------------------- the rules
def test_solver_never_imports_sweep():
    bad = sorted(f"{a} imports {d}" for a, ds in GRAPH.items() if _is(a, ("solver",))
                 for d in ds if _is(d, ("sweep",)))
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("core", CORE)
def test_the_core_never_imports_a_facility(core):
    bad = sorted(d for d in GRAPH[core] if _is(d, FACILITIES))
    assert bad == [], f"{core} imports the facilities {bad}: pass their structure as data instead"


def test_there_is_no_import_cycle():
    found = cycles(GRAPH)
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


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


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _is(m, ("sweep",))))
def test_sweep_uses_only_the_solver_public_api(module):
    path = _modules()[module]
    bad = solver_uses(ast.parse(path.read_text(), str(path)))
    assert bad == [], (f"{module} reaches solver internals; export what it needs from solver "
                       f"(solver/__init__.py) or use a public module:\n" + "\n".join(bad))
