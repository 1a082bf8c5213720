"""Old module paths kept importable for one release after the layout move.

Release 0.2 moved the flat modules of ``solver/`` and ``sweep/`` into
sub-packages (``solver.linalg`` is now ``solver.numerics.linalg``, and so
on; CHANGELOG-style list in :data:`SOLVER_MOVED`).  Code that imports an old
path gets the module at its new home, the very same module object, and a
:class:`DeprecationWarning` naming the new path.  Where an old module's name
is now a sub-package (``solver.integrate``), the sub-package forwards the old
module's names to its new home the same way (:func:`forward_attributes`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Callable, Mapping

__all__ = ["SOLVER_MOVED", "install", "forward_attributes", "lazy_names"]

# Old module path -> new module path.  ``solver.lagrangian``, ``solver.equilibrium``
# and ``solver.ddt`` are left out: they are the package's public functions, and
# an alias module of the same name would shadow them.
SOLVER_MOVED = {
    "solver.primitives": "solver.dae.primitives", "solver.concrete": "solver.dae.concrete",
    "solver.sparsity": "solver.dae.sparsity", "solver.structure": "solver.dae.structure",
    "solver.trace_flags": "solver.dae.trace_flags",
    "solver.tape": "solver.taylor.tape", "solver.compact": "solver.taylor.compact",
    "solver.clean": "solver.taylor.clean", "solver.degree": "solver.taylor.degree",
    "solver.pointwise": "solver.taylor.pointwise",
    "solver.linalg": "solver.numerics.linalg", "solver.kkt": "solver.numerics.kkt",
    "solver.jacobian": "solver.numerics.jacobian",
    "solver.initialize": "solver.integrate.initialize", "solver.sensitivity": "solver.integrate.sensitivity",
    "solver.serial": "solver.integrate.solve_lock", "solver.xla_setup": "solver.integrate.xla_setup",
    "solver.natural": "solver.mechanics.natural", "solver.mechanism": "solver.mechanics.mechanism",
    "solver.cloth": "solver.mechanics.cloth", "solver.siconos": "solver.mechanics.siconos",
    "solver.yamlio": "solver.models.yamlio", "solver.expr": "solver.models.expr",
    "solver.solution": "solver.results.solution", "solver.balance": "solver.results.balance",
    "solver.plot": "solver.results.plot", "solver.diagnose": "solver.analysis.diagnose",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old path will be removed in the next release",
                  DeprecationWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        _warn(spec.name, self.target)
        return importlib.import_module(self.target)

    def exec_module(self, module):
        # The target module is already executed: nothing to run again.
        pass


class _AliasFinder(importlib.abc.MetaPathFinder):
    def __init__(self, aliases: Mapping[str, str]):
        self.aliases = dict(aliases)

    def find_spec(self, fullname, path=None, target=None):
        new = self.aliases.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install(aliases: Mapping[str, str]) -> None:
    """Make each old module path in ``aliases`` import the module at its new path.

    Args:
        aliases: old dotted module path -> new dotted module path.
    """
    # First: an editable install's finder would otherwise look for the old file.
    sys.meta_path.insert(0, _AliasFinder(aliases))


def forward_attributes(package: str, target: str, names: frozenset[str] | None = None) -> Callable[[str], object]:
    """A module ``__getattr__`` that serves an old module's names from its new home.

    Args:
        package: the sub-package whose path was the old module's (``__name__``).
        target: the module the old module became.
        names: the names forwarded (default: every public name of ``target``).

    Returns:
        A function to assign to the package's ``__getattr__`` (PEP 562).
    """

    def __getattr__(name: str):
        if name.startswith("__") or (names is not None and name not in names):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            # A module of the sub-package itself, not one of the old module's names.
            return importlib.import_module(f"{package}.{name}")
        module = importlib.import_module(target)
        try:
            value = getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        _warn(f"{package}.{name}", f"{target}.{name}")
        return value

    return __getattr__


def lazy_names(package: str, homes: Mapping[str, tuple[str, ...]]) -> tuple[Callable[[str], object], Callable[[], list]]:
    """A module's ``__getattr__`` and ``__dir__`` for public names that load on first use (PEP 562).

    A package that re-exports its modules' names imports every one of those
    modules, and what they import, with its first line; served lazily, a
    name costs its import only when it is used (``mechsweep --help`` need
    not wait for JAX).

    Args:
        package: the module's ``__name__`` (it must be importing or imported).
        homes: module -> the names it gives; a name equal to a sub-module's
            own name (``solver.status``) gives the module itself.  Any other
            sub-module is served as an attribute too (``solver.dae`` after a
            bare ``import solver``), as it was when the package imported it.

    Returns:
        ``(__getattr__, __dir__)``, to assign at the module's top level.  A
        name is imported from its home at its first access and then kept in
        the module's namespace.
    """
    home_of = {name: home for home, names in homes.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str):
        home = home_of.get(name)
        if (home is None and "__path__" in namespace and not name.startswith("__")
                and importlib.util.find_spec(f"{package}.{name}") is not None):
            home = f"{package}.{name}"  # a sub-module, reachable as an attribute as when the package imported it
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(home)
        value = module if home == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list:
        return sorted(set(namespace) | set(home_of))

    return __getattr__, __dir__
