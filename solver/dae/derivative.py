"""``ddt``: d/dt of a sub-expression of a residual, as a JAX primitive.

``ddt(x)`` binds :data:`ddt_p`, which has no pointwise value: the structural
analysis (:mod:`solver.dae.sparsity`) raises the derivative orders below it by
one, and the Taylor engine (:mod:`solver.taylor.program`) shifts the series.  The
primitive is linear, so ``jvp``, transposition and batching are the op
itself.  Defined here, below :mod:`solver.dae.problem`, so that the interpreters of
a residual can recognise it without importing the DAE class.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.interpreters import ad, batching

from solver.dae import jaxpr_core

__all__ = ["ddt", "ddt_p"]

ddt_p = jaxpr_core.Primitive("ddt")


def ddt(x):
    """d/dt of a sub-expression of a residual.

    Args:
        x: any array expression of the residual's variables, their
            derivatives, parameters and time.

    Returns:
        An array of the same shape standing for dx/dt.  It is understood by
        the structural analysis (orders of every variable below it rise by
        one) and by the Taylor engine (a shift of the series); it has no
        pointwise numeric value of its own.
    """
    return ddt_p.bind(jnp.asarray(x, dtype=jnp.float64))


def _ddt_impl(x):
    raise RuntimeError(
        "solver.ddt(...) has no pointwise value: evaluate the residual through "
        "the solver (solver.solve / the Taylor engine), which differentiates it"
    )


ddt_p.def_impl(_ddt_impl)
ddt_p.def_abstract_eval(lambda x: x)
# d/dt commutes with linear maps: jvp and batching are the op itself.
ad.deflinear2(ddt_p, lambda ct, x: [ddt_p.bind(ct)])
batching.primitive_batchers[ddt_p] = lambda args, dims: (ddt_p.bind(args[0]), dims[0])

