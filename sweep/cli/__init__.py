"""The ``mechsweep`` command line: ``app`` (the parser and every command) and ``sweep_command`` (``sweep`` and ``make run``)."""

from solver.module_aliases import forward_attributes

# ``sweep.cli`` was the module ``sweep.cli.app`` before release 0.2.
__getattr__ = forward_attributes(__name__, "sweep.cli.app")
