"""What the residual interpreters share: call primitives and the unsupported-primitive error.

Two modules interpret a residual's jaxpr primitive by primitive: the
structural analysis (:mod:`solver.dae.sparsity`) and the Taylor engine
(:mod:`solver.taylor.program`).  Both look through *call-like* primitives (``pjit``
from ``jax.jit``, ``custom_jvp_call`` from ``jax.nn`` functions, ``remat``,
...), whose body is a jaxpr taking the equation's operands, and both raise
:class:`UnsupportedPrimitiveError` for an operation they have no rule for.
"""

from __future__ import annotations

__all__ = ["UnsupportedPrimitiveError", "CALL_JAXPR_PARAM", "call_body"]


class UnsupportedPrimitiveError(ValueError, NotImplementedError):
    """The residual uses a JAX primitive the structural analysis or the Taylor engine has no rule for.

    The message names the primitive and where it was used.  It is a
    ``ValueError`` (the residual is not one the solver accepts) and, as the
    Taylor engine's error used to be, a ``NotImplementedError``.
    """


# Call-like primitives -> the parameter holding their body (a Jaxpr or a
# ClosedJaxpr).  The body's first inputs are the equation's operands
# (custom_vjp_call may carry more operands than its body reads).
CALL_JAXPR_PARAM = {
    "pjit": "jaxpr", "jit": "jaxpr",
    "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
    "remat": "jaxpr", "remat2": "jaxpr", "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


def call_body(eqn):
    """The body of a call-like equation.

    Args:
        eqn: a jaxpr equation whose primitive is in :data:`CALL_JAXPR_PARAM`.

    Returns:
        ``(jaxpr, consts)``: the open body jaxpr and its constants (``[]``
        for an open body).

    Raises:
        UnsupportedPrimitiveError: the equation carries no body.
    """
    name = eqn.primitive.name
    body = eqn.params.get(CALL_JAXPR_PARAM.get(name, ""))
    if body is None:
        raise UnsupportedPrimitiveError(f"cannot look inside the call primitive {name!r}: it carries no jaxpr")
    if hasattr(body, "jaxpr") and hasattr(body, "consts"):  # a ClosedJaxpr
        return body.jaxpr, list(body.consts)
    return body, []
