"""The ``mechsweep`` command line: ``app`` (the parser and ``main``) and one module per command group.

``solver_commands`` (check, simulate, equilibrium, plot, animate),
``sweep_command`` (sweep and ``make run``), ``store_commands`` (status),
``design_command`` (design), ``results`` (``simulate --out`` files) and
``common`` (argument types, exit codes, file checks, progress lines).
"""

from solver.module_aliases import forward_attributes

# ``sweep.cli`` was the module ``sweep.cli.app`` before release 0.2.
__getattr__ = forward_attributes(__name__, "sweep.cli.app")
