"""Integration: the step loop, consistent initial values, sensitivities, the solve lock, XLA settings.

Modules: ``integrator`` (:class:`~solver.integrate.integrator.Integrator`:
series, step size, projection, runs and batch pools), ``initialize``
(consistent initial values by IPOPT or Gauss–Newton), ``sensitivity``
(forward-mode design sensitivities), ``solve_lock`` (one solve at a time per
process) and ``xla_setup`` (the XLA:CPU flags, set before JAX starts).
"""

from solver.module_aliases import forward_attributes

# ``solver.integrate`` was the module ``solver.integrate.integrator`` before release 0.2.
__getattr__ = forward_attributes(__name__, "solver.integrate.integrator")
