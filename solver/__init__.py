"""mechsweep's solver: a JAX Taylor-series DAE integrator in the style of DAETS.

Front door::

    import solver
    dae = solver.DAE(residual, variables=["x", "y", "lam"], params={"g": 9.81, "L": 1.0})
    dae.structure            # Σ-method analysis
    ds = solver.solve(dae, t_span=(0, 10), values={...}, fixed=[...], tol=1e-10)
"""

# First: XLA reads its flags when JAX starts its backend (see xla_setup).
from solver.integrate import xla_setup

# The one place the package changes JAX's global configuration: Taylor
# coefficients of order 15-20 need float64 (docs/method.md §4), and every module
# of solver/ and sweep/ is imported through this package, so no library
# module sets it again.  JAX itself is not imported here (a command that
# computes nothing, ``mechsweep --help`` or ``status``, does not wait for it):
# the setting is made when JAX is imported, before anything uses it.
xla_setup.configure_jax({"jax_enable_x64": True})
xla_setup.scan_only_jax_packages()

from solver import module_aliases as _module_aliases  # noqa: E402

_module_aliases.install(_module_aliases.SOLVER_MOVED)

# The public names load on first use, so that importing one part of the
# package (the CLI's argument parser, ``solver.errors``, a store reader) does
# not wait for SciPy, xarray and the whole integrator.
__getattr__, __dir__ = _module_aliases.lazy_names(__name__, {
    "solver.dae.problem": ("DAE", "ddt", "DAEDefinitionError"),
    "solver.dae.event": ("Event",),
    "solver.errors": ("InputError",),
    "solver.api": ("solve", "solve_batch", "integrator_for", "consistent_point"),
    "solver.compiled": ("Compiled", "compiled_model", "compile_clock"),
    "solver.tiered": ("tiered_compiles", "set_tiered"),
    "solver.program_prefetch": ("programs_loaded_ahead",),
    "solver.integrate.integrator": ("order_for_tol",),
    "solver.status": ("status",),
    "solver.mechanics.lagrangian": ("lagrangian",),
    "solver.models": ("load",),
    "solver.analysis.equilibrium": ("equilibrium",),
    "solver.mechanics.siconos": ("lagrangian_ds",),
})

__all__ = ["DAE", "Event", "ddt", "solve", "solve_batch", "compiled_model", "Compiled", "integrator_for",
           "consistent_point", "order_for_tol", "compile_clock", "tiered_compiles", "set_tiered",
           "programs_loaded_ahead", "InputError",
           "DAEDefinitionError", "status", "lagrangian", "load", "lagrangian_ds", "equilibrium"]
