"""Batch-last evaluation of the compact engine's passes under ``jax.vmap``, and its flag for tangents.

:func:`batch_last` replaces JAX's batching of a stage pass by a native one
with the batch on the table's last axis; :func:`batched_tangents` extends
it to forward mode within a block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from solver.dae.trace_flags import TraceFlag

__all__ = ["batch_last", "batched_tangents"]


_tangents_batch_last = TraceFlag()


def batched_tangents(enabled: bool = True):
    """Within the block, forward mode through a vmapped stage pass runs batch-last too.

    Differentiated, a stage pass is by default the plain computation, which
    ``jax.vmap`` then batches batch-first: right for one run's
    sensitivities, where the primal has no batch and only the directions
    do (the batch-last rule would compute the primal once per direction).
    A batch's sensitivities (:meth:`solver.integrate.integrator.Integrator._run_tangents`
    with slots) set this flag: the slots' vmap then applies the batch-last
    rule to the pass's jvp too (RSCR, 64 points, 2 directions: 1.7-2.3 ->
    1.0-1.1 s; workflows/benchmarks/results/sensitivity.txt).

    Args:
        enabled: the flag's value within the block.

    Returns:
        A context manager.
    """
    return _tangents_batch_last.set(enabled)


def batch_last(native, last_in, last_out):
    """A function with JAX's batching replaced by a native batch-last one.

    ``native(*args)`` computes on single arguments, or on a batch along the
    last axis for the arguments flagged in ``last_in`` (the others keep the
    batch first: they go to ``jax.vmap`` inside ``native``, or are not
    batched at all when it is called unbatched).  Under ``jax.vmap`` the
    flagged arguments are moved batch-last once, ``native`` runs on the
    batch, and the outputs flagged in ``last_out`` are moved back.  JAX's own
    batching of the table's gathers and in-place updates changes layouts
    around each of them; a batch-last table keeps every gathered row a
    contiguous block and every operation a vector operation over the batch.
    Differentiated, the function is the plain computation, or, under
    :func:`batched_tangents`, the batch-last one (for the primal and the
    tangents batched alike).

    ``native`` receives a keyword ``batched`` (False or the batch size).
    """

    def plain(*args):
        return native(*args, batched=False)

    @jax.custom_batching.custom_vmap
    def batched(*args):
        return plain(*args)

    @batched.def_vmap
    def rule(axis_size, in_batched, *args):
        moved = []
        for arg, flag, last in zip(args, in_batched, last_in):
            def one(x, f):
                if last:
                    return jnp.moveaxis(x, 0, -1) if f else jnp.broadcast_to(x[..., None], x.shape + (axis_size,))
                return x if f else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
            moved.append(jax.tree_util.tree_map(one, arg, flag))
        out = native(*moved, batched=axis_size)
        outs = out if isinstance(out, tuple) else (out,)
        back = tuple(jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, -1, 0), o) if last else o
                     for o, last in zip(outs, last_out))
        flags = jax.tree_util.tree_map(lambda _: True, back)
        return (back if isinstance(out, tuple) else back[0]), (flags if isinstance(out, tuple) else flags[0])

    @jax.custom_jvp
    def fn(*args):
        return batched(*args)

    @fn.defjvp
    def fn_jvp(primals, tangents):
        return jax.jvp(batched if _tangents_batch_last.on else plain, primals, tangents)

    return fn
