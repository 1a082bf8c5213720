"""Forward-mode Jacobians whose basis is a constant of the program.

``jax.jacfwd`` pushes forward the columns of ``jnp.eye(n)``, an iota
expression.  XLA does not fold iotas, and inside the step loop it hoists
each one into a kernel of the program's entry, where a small model's run
pays for it on every call (``Integrator._run``).  :func:`jacfwd` is the same
Jacobian with the basis from :func:`solver.numerics.linalg.identity`: literal data
up to a few hundred inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from solver.numerics.linalg import identity

__all__ = ["jacfwd", "with_value"]


def with_value(f):
    """``f`` returning ``(f(x), f(x))`` from one evaluation of ``f``.

    A Jacobian transform given it with ``has_aux=True`` returns the value
    beside the Jacobian, and traces ``f`` once: ``lambda y: (f(y), f(y))``
    traces it twice, and a Taylor program's hidden constraints are tens of
    milliseconds of tracing each time.

    Args:
        f: function of one argument.

    Returns:
        The function ``x -> (f(x), f(x))``.
    """

    def both(x):
        value = f(x)
        return value, value

    return both


def jacfwd(f, has_aux: bool = False):
    """``jax.jacfwd(f, has_aux=has_aux)`` for a function of one pytree argument.

    Args:
        f: function of one argument (a pytree of float arrays) returning a
            pytree of arrays, or ``(out, aux)`` when ``has_aux``.
        has_aux: as for ``jax.jacfwd``.

    Returns:
        A function of the argument returning the Jacobian in ``jax.jacfwd``'s
        layout (for each output leaf, the input pytree of arrays shaped
        ``out.shape + in.shape``), and ``aux`` with it when ``has_aux``.
    """

    def jac(x):
        leaves, tree = jax.tree_util.tree_flatten(x)
        sizes = [int(np.size(leaf)) for leaf in leaves]
        n = sum(sizes)
        dtype = jnp.result_type(*leaves) if leaves else jnp.result_type(float)
        basis = identity(n, dtype)
        tangents, at = [], 0
        for leaf, size in zip(leaves, sizes):
            tangents.append(basis[:, at:at + size].reshape((n,) + np.shape(leaf)))
            at += size
        tangent_tree = jax.tree_util.tree_unflatten(tree, tangents)

        def push(t):
            if has_aux:
                _, dy, aux = jax.jvp(f, (x,), (t,), has_aux=True)
                return dy, aux
            return jax.jvp(f, (x,), (t,))[1]

        out = jax.vmap(push, out_axes=(0, None) if has_aux else 0)(tangent_tree)
        dy, aux = out if has_aux else (out, None)

        def split(col):  # (n, *out_shape) -> the input pytree of (*out_shape, *in_shape)
            parts, at = [], 0
            for leaf, size in zip(leaves, sizes):
                block = jnp.moveaxis(col[at:at + size], 0, -1)
                parts.append(block.reshape(col.shape[1:] + np.shape(leaf)))
                at += size
            return jax.tree_util.tree_unflatten(tree, parts)

        J = jax.tree_util.tree_map(split, dy)
        return (J, aux) if has_aux else J

    return jac
