"""Every real root of an event's Taylor polynomial in a step, isolated and polished.

On every accepted step the
integrator has the solution's Taylor polynomial on ``[t, t + h]``; the
event's own Taylor polynomial there comes from it by Taylor-mode automatic
differentiation (``jax.experimental.jet``): no extra equation is integrated
and the step size is not touched.

Roots are isolated on that polynomial as in heyoka's event detection, with a
fixed amount of work so that it runs under ``jit`` and ``vmap``:

* the polynomial is rescaled to ``u = s / h`` in [0, 1] and written in
  Bernstein form on each of :data:`SUBINTERVALS` equal pieces of the step (one
  constant matrix product);
* by Descartes' rule of signs in Bernstein form, a piece whose coefficients
  do not change sign holds no root, and a piece with exactly one sign change
  holds exactly one, which Newton's method polishes inside its bracket to
  machine precision;
* a piece with more sign changes (two roots closer than ``h /
  SUBINTERVALS``, or a tangency) is resolved by the signs at its ends: an
  odd count of roots there is reported as one crossing, at the polished
  root of the bracket; an even count is reported as none.

Two crossings in one step are therefore both found as long as they lie in
different pieces.  Each crossing has a direction (the sign change across
it: ``up`` from negative to non-negative, ``down`` the reverse); an event
keeps the directions it asks for.  A zero value counts as positive, so a
root at the boundary of two pieces is found once.
"""

from __future__ import annotations

import math

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["SUBINTERVALS", "NEWTON_ITERATIONS", "bernstein_pieces", "isolate_roots", "polynomial_value"]

#: Equal pieces of a step whose Bernstein coefficients are examined.
SUBINTERVALS = 16

#: Safeguarded Newton iterations that polish a bracketed root (quadratic
#: convergence from a bracket of h / SUBINTERVALS: far more than enough).
NEWTON_ITERATIONS = 12


# ------------------------------------------------------------- Bernstein form
def bernstein_pieces(degree: int, pieces: int = SUBINTERVALS) -> np.ndarray:
    """Matrices from power coefficients on [0, 1] to Bernstein coefficients on each piece.

    Args:
        degree: the polynomial degree P.
        pieces: the number of equal pieces of [0, 1].

    Returns:
        (pieces, P + 1, P + 1) array ``T`` with ``T[i] @ c`` the Bernstein
        coefficients of ``sum_k c[k] u**k`` on ``[i / pieces, (i + 1) / pieces]``.
    """
    P = degree
    # Power basis -> Bernstein basis on [0, 1]: b_i = sum_{j<=i} C(i,j)/C(P,j) d_j.
    to_b = np.zeros((P + 1, P + 1))
    for i in range(P + 1):
        for j in range(i + 1):
            to_b[i, j] = math.comb(i, j) / math.comb(P, j)
    out = np.empty((pieces, P + 1, P + 1))
    w = 1.0 / pieces
    for i in range(pieces):
        a = i * w
        # q(x) = p(a + w x): d_j = sum_{k>=j} c_k C(k,j) a^(k-j) w^j.
        shift = np.zeros((P + 1, P + 1))
        for j in range(P + 1):
            for k in range(j, P + 1):
                shift[j, k] = math.comb(k, j) * a ** (k - j) * w ** j
        out[i] = to_b @ shift
    return out


def polynomial_value(c, u):
    """``sum_k c[k] u**k`` and its derivative by Horner's rule (c: (P + 1,), u: scalar)."""
    P = c.shape[0] - 1
    y, dy = c[P], jnp.zeros_like(c[P])
    for k in range(P - 1, -1, -1):
        dy = dy * u + y
        y = y * u + c[k]
    return y, dy


def _positive(x):
    # A zero counts as positive: a root on the boundary of two pieces is found once.
    return x >= 0


def isolate_roots(c, pieces_matrix):
    """Every real root of a polynomial on [0, 1], one per piece, polished.

    Args:
        c: (P + 1,) power coefficients in u (the event's Taylor coefficients
            times h**k).
        pieces_matrix: :func:`bernstein_pieces` of degree P (as an array).

    Returns:
        (found, u, sign): (pieces,) bool, whether the piece holds a crossing;
        its root in [0, 1]; and its direction (+1 up, -1 down).  Pieces are
        in time order.
    """
    B = jnp.einsum("ijk,k->ij", pieces_matrix, c)  # (pieces, P + 1)
    pos = _positive(B)
    changes = jnp.sum(pos[:, 1:] != pos[:, :-1], axis=1)
    # The ends' values are the first and last Bernstein coefficients.
    left, right = B[:, 0], B[:, -1]
    found = (changes > 0) & (_positive(left) != _positive(right))
    sign = jnp.where(_positive(right), 1, -1)
    n = pieces_matrix.shape[0]
    a = jnp.arange(n, dtype=c.dtype) / n
    b = a + 1.0 / n
    # Safeguarded Newton inside each bracket: a step leaving the bracket is
    # replaced by bisection, and the bracket shrinks with every sign.
    fa_pos = _positive(left)

    def newton(_, state):
        lo, hi, x = state
        y, dy = jax.vmap(polynomial_value, in_axes=(None, 0))(c, x)
        same_as_lo = _positive(y) == fa_pos
        lo = jnp.where(same_as_lo, x, lo)
        hi = jnp.where(same_as_lo, hi, x)
        step = jnp.where(dy != 0, y / jnp.where(dy != 0, dy, 1.0), 0.0)
        x_new = x - step
        inside = (x_new >= lo) & (x_new <= hi) & (dy != 0)
        return lo, hi, jnp.where(inside, x_new, 0.5 * (lo + hi))

    lo, hi, x = lax.fori_loop(0, NEWTON_ITERATIONS, newton, (a, b, 0.5 * (a + b)))
    return found, jnp.clip(x, a, b), sign
