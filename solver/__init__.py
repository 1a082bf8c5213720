"""mechsweep's solver: a JAX Taylor-series DAE integrator in the style of DAETS.

Front door::

    import solver
    dae = solver.DAE(residual, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})
    dae.structure            # Σ-method analysis
    ds = solver.solve(dae, t_span=(0, 10), values={...}, fixed=[...], tol=1e-10)
"""

# First: XLA reads its flags when JAX starts its backend (see xla_setup).
from solver.integrate import xla_setup  # noqa: F401

import jax as _jax  # noqa: E402

# The one place the package changes JAX's global configuration: Taylor
# coefficients of order 15-20 need float64 (docs/method.md §4), and every module
# of solver/ and sweep/ is imported through this package, so no library
# module sets it again.
_jax.config.update("jax_enable_x64", True)

from solver.dae.problem import DAE, ddt, DAEDefinitionError  # noqa: E402
from solver.dae.event import Event  # noqa: E402
from solver.errors import InputError  # noqa: E402
from solver.api import solve, solve_batch, integrator_for, consistent_point  # noqa: E402
from solver.compiled import Compiled, compiled_model, compile_clock  # noqa: E402
from solver.integrate.integrator import order_for_tol  # noqa: E402
from solver import status  # noqa: E402
from solver import module_aliases as _module_aliases  # noqa: E402

_module_aliases.install(_module_aliases.SOLVER_MOVED)

__all__ = ["DAE", "Event", "ddt", "solve", "solve_batch", "compiled_model", "Compiled", "integrator_for",
           "consistent_point", "order_for_tol", "compile_clock", "InputError",
           "DAEDefinitionError", "status", "lagrangian", "load", "lagrangian_ds", "equilibrium"]


def __getattr__(name):
    # Facilities written on top of the core load lazily (and may be absent
    # while they are being built).
    if name == "lagrangian":
        from solver.mechanics.lagrangian import lagrangian

        return lagrangian
    if name == "load":
        from solver.models import load

        return load
    if name == "equilibrium":
        from solver.analysis.equilibrium import equilibrium

        return equilibrium
    if name == "lagrangian_ds":
        from solver.mechanics.siconos import lagrangian_ds

        return lagrangian_ds
    raise AttributeError(f"module 'solver' has no attribute {name!r}")
