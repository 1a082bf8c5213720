"""The jitted kernels of a DAE's residual at rest and its derivatives, built once per DAE."""

from __future__ import annotations

import weakref

import jax
import jax.numpy as jnp

from solver.dae.problem import DAE
from solver.program_store import dae_identity, stored_jit
from solver.taylor.pointwise import residual_at
from solver.taylor.program import TaylorProgram

__all__ = ["RestKernels", "rest_kernels"]


# ------------------------------------------------------------------ kernels
class RestKernels:
    """Jitted residual at rest and its derivatives, built once per DAE.

    ``x`` is the flat vector of every variable's value (DAE layout); ``v``
    and ``a`` the first and second derivatives, zero except to differentiate
    (``C = ∂F/∂x'``, ``M = ∂F/∂x''``).
    """

    def __init__(self, dae: DAE):
        s = dae.structure
        # The Taylor order plays no part in a pointwise evaluation: the lowest.
        self.prog = TaylorProgram(dae, s.c, s.d, 2)
        self.dae = dae
        prog = self.prog

        def levels(x, v, a):
            out = {}
            for var in dae.variables:
                sl = slice(var.offset, var.offset + var.size)
                out[var.name] = [jnp.reshape(y[sl], var.shape) for y in (x, v, a)]
            return out

        def F(x, t, params, v=None, a=None):
            v = jnp.zeros_like(x) if v is None else v
            a = jnp.zeros_like(x) if a is None else a
            return residual_at(prog, t, prog.constants(params), levels(x, v, a))

        zero = jnp.zeros_like
        identity = dae_identity(dae, "rest kernels")  # kept in the program store for a model file
        self.F = stored_jit(F, identity, "rest_residual")
        self.J = stored_jit(jax.jacfwd(F), identity, "rest_jacobian")
        self.M = stored_jit(lambda x, t, p: jax.jacfwd(lambda a: F(x, t, p, None, a))(zero(x)), identity, "rest_mass")
        self.C = stored_jit(lambda x, t, p: jax.jacfwd(lambda v: F(x, t, p, v))(zero(x)), identity, "rest_damping")
        self.H = stored_jit(lambda x, y, t, p: jax.hessian(lambda z: jnp.dot(y, F(z, t, p)))(x), identity,
                            "rest_hessian")


_KERNELS: "weakref.WeakKeyDictionary[DAE, RestKernels]" = weakref.WeakKeyDictionary()


def rest_kernels(dae: DAE) -> RestKernels:
    """The :class:`RestKernels` of ``dae``, built on first use and kept while ``dae`` lives."""
    if dae not in _KERNELS:
        _KERNELS[dae] = RestKernels(dae)
    return _KERNELS[dae]
