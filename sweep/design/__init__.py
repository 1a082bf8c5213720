"""Kinematic design: the design file, the optimisation problem and its driver, and a run's record.

Modules: ``spec`` (design files), ``problem`` (the problem checked against
its model and one design point's evaluation), ``starts`` (starts from a
sweep store or given values), ``optimize`` (one start's optimisation and the
driver of them all) and ``record`` (a run's history Dataset, its Zarr write
and picture).
"""

from solver.module_aliases import forward_attributes

# ``sweep.design`` was the module ``sweep.design.optimize`` before release 0.2.
__getattr__ = forward_attributes(__name__, "sweep.design.optimize")
