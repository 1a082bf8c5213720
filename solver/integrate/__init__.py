"""Integration: the step loop, consistent initial values, sensitivities, the solve lock, XLA settings.

Modules: ``integrator`` (:class:`~solver.integrate.integrator.Integrator`,
put together from ``layout`` (the flat state layout), ``stages`` (the
series: stage 0 by Newton, the later stages by the chosen engine), ``step``
(step size, polynomial shift, projection, one step), ``single_run`` (one
run's step loop), ``pool`` (a batch on a pool of slots) and ``tangents``
(forward-mode tangents of a run)), ``calls`` (which of them integrates B
points, and building its program ahead), ``choices`` (engine, stage solver, slot
counts and XLA options), ``run_args`` (cached device arguments, output-time
padding), ``step_events`` and ``roots`` (events within a step),
``initialize`` (consistent initial values by IPOPT or Gauss–Newton),
``sensitivity`` (forward-mode design sensitivities), ``solve_lock`` (one
solve at a time per process) and ``xla_setup`` (the XLA:CPU flags, set
before JAX starts).
"""

from solver.module_aliases import forward_attributes

# ``solver.integrate`` was the module ``solver.integrate.integrator`` before release 0.2.
__getattr__ = forward_attributes(__name__, "solver.integrate.integrator")
