"""The problem: a DAE's residual, its ``ddt`` primitive, and its Σ-method structure.

Modules: ``problem`` (:class:`~solver.DAE`), ``derivative`` (the ``ddt``
primitive), ``primitives`` (the JAX primitives a residual may use),
``concrete`` (evaluating a residual on numbers), ``sparsity`` (which
variable and derivative each equation reads), ``structure`` (Pryce's
Σ-method: offsets, the system Jacobian's pattern, the index) and
``trace_flags``.
"""

from solver.module_aliases import forward_attributes

# ``solver.dae`` was the module ``solver.dae.problem`` before release 0.2.
__getattr__ = forward_attributes(__name__, "solver.dae.problem")
