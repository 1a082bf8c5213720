"""The jaxpr types mechsweep reads, without importing the rest of ``jax.extend``.

These are :mod:`jax.extend.core`'s names (that module re-exports them from
JAX's core).  Importing ``jax.extend.core`` runs ``jax.extend``'s package,
which imports every one of its modules, Pallas and Mosaic's kernels and
checkify among them: time at every process's start (a command, each sweep
worker; ``workflows/benchmarks/results/startup.txt``) for names none of
mechsweep uses.  They are taken here from
where ``jax.extend.core`` takes them; ``tests/test_imports.py`` checks that
they are still the same objects, so a JAX that moves them fails there
first.  The rest of mechsweep imports them from this module only.
"""

from __future__ import annotations

from jax._src.core import ClosedJaxpr, Jaxpr, Literal, Primitive, jaxpr_as_fun

__all__ = ["ClosedJaxpr", "Jaxpr", "Literal", "Primitive", "jaxpr_as_fun"]
