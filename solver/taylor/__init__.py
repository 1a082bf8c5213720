"""Taylor series of the solution: the staged program and its two engines.

Modules: ``ir`` (what the engines share: the flattened equations, the
primitive classes, coefficient arithmetic), ``program`` (the Taylor program
over the residual's jaxpr: stages, offsets; the looped engine),
``recurrences`` (the looped engine's order-axis arithmetic and nonlinear
recurrences), ``tape`` (the unrolled engine), ``compact`` (the compact
engine for large tapes, with ``compact_build``, ``compact_powers``,
``compact_table``, ``compact_kinds`` and ``compact_batch``), ``function_series`` (the series of a
function of known series, every order at once: the events'), ``clean`` (tape simplification),
``degree`` (which stages are affine) and ``pointwise`` (residual values at a
point from the coefficients).
"""

from solver.module_aliases import forward_attributes

# ``solver.taylor`` was the module ``solver.taylor.program`` before release 0.2.
__getattr__ = forward_attributes(__name__, "solver.taylor.program")
