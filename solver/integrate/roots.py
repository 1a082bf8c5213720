"""Every real root of an event's Taylor polynomial in a step, isolated and polished.

On every accepted step the
integrator has the solution's Taylor polynomial on ``[t, t + h]``; the
event's own Taylor polynomial there comes from it by Taylor arithmetic
through the event function (:mod:`solver.taylor.function_series`): no extra
equation is integrated and the step size is not touched.

Roots are isolated on that polynomial as in heyoka's event detection, with a
fixed amount of work so that it runs under ``jit`` and ``vmap``:

* the polynomial is rescaled to ``u = s / h`` in [0, 1] and written in
  Bernstein form on each of :data:`SUBINTERVALS` equal pieces of the step (one
  constant matrix product);
* by Descartes' rule of signs in Bernstein form, a piece whose coefficients
  do not change sign holds no root, and a piece with exactly one sign change
  holds exactly one, which Newton's method, kept inside the bracket,
  polishes to machine precision;
* a piece with more sign changes (two roots closer than ``h /
  SUBINTERVALS``, or complex roots near it) is examined again on
  ``SUBINTERVALS`` sub-pieces; the first :data:`REFINED` such pieces of a step
  are, and a sub-piece (or a piece past those) that is still ambiguous is
  resolved by the signs at its ends: an odd count of roots there is reported
  as one crossing, at the polished root of the bracket; an even count as
  none;
* before all this, a polynomial whose Bernstein coefficients on the whole
  step change sign once (neither end value zero) has exactly one root there
  (most steps with a crossing): :func:`single_root` polishes it on [0, 1]
  without pieces (:func:`whole_step` tells which).

Two crossings in one step are therefore both found unless they lie within
``h / SUBINTERVALS**2`` of each other (or in a third ambiguous piece).
Each crossing has a direction (the sign change across
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

__all__ = ["SUBINTERVALS", "REFINED", "POLISH_ITERATIONS", "CLEAR_MARGIN", "clear_of_roots", "fine_pieces",
           "bernstein_pieces", "isolate_roots",
           "root_brackets", "polished_roots", "single_root", "whole_step", "polynomial_value"]

#: Equal pieces of a step whose Bernstein coefficients are examined.
SUBINTERVALS = 16

#: Relative size (to the largest Bernstein coefficient of the step) below
#: which a coefficient counts as zero.
ROUNDING = 1e-14

#: How far (relative) a polynomial's constant coefficient must exceed the
#: bound on the rest for :func:`clear_of_roots`: well above :data:`ROUNDING`,
#: so that a step it clears has no Bernstein coefficient within rounding of zero.
CLEAR_MARGIN = 1e-12

#: Ambiguous pieces (more than one sign change of their Bernstein
#: coefficients) examined again on SUBINTERVALS sub-pieces each, per step.
REFINED = 2

#: The most safeguarded Newton iterations that polish a bracketed root (fewer
#: where a step settles first).  From the secant point of a whole step's
#: bracket, 8 left the bouncing ball's first impact 1.7e-12 from the exact time
#: and 10 reached rounding: 16 keep a margin.
POLISH_ITERATIONS = 16


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


def fine_pieces(degree: int, pieces: int = SUBINTERVALS) -> np.ndarray:
    """:func:`bernstein_pieces` with ``pieces**2`` pieces, grouped as (pieces, pieces, P + 1, P + 1)."""
    return bernstein_pieces(degree, pieces * pieces).reshape(pieces, pieces, degree + 1, degree + 1)


def polynomial_value(c, u):
    """``sum_k c[..., k] u**k`` and its derivative by Horner's rule.

    Args:
        c: (..., P + 1) power coefficients, the last axis the powers.
        u: the points, broadcast against ``c[..., 0]``.

    Returns:
        (y, dy): the values and the derivatives, of the broadcast shape.
    """
    P = c.shape[-1] - 1
    y, dy = c[..., P], jnp.zeros_like(c[..., P])
    for k in range(P - 1, -1, -1):
        dy = dy * u + y
        y = y * u + c[..., k]
    return y, dy


def _positive(x):
    # A zero counts as positive: a root on the boundary of two pieces is found once.
    return x >= 0


def _rounded_to_zero(B, scale):
    """``B`` with values within rounding of ``scale`` (its largest coefficient) set to zero."""
    return jnp.where(jnp.abs(B) <= ROUNDING * scale, 0.0, B)


def _brackets(B, a, w):
    """Crossings of pieces given their Bernstein coefficients B (..., pieces, P + 1) on [a, a + w]."""
    pos = _positive(B)
    changes = jnp.sum(pos[..., 1:] != pos[..., :-1], axis=-1)
    left, right = B[..., 0], B[..., -1]  # the values at the ends
    found = _positive(left) != _positive(right)
    sign = jnp.where(_positive(right), 1, -1)
    # Beside a zero end, the sign of the polynomial inside is that of the next
    # coefficient (B[..., 1] at the left end, B[..., -2] at the right).
    return found, changes, sign, (left, right, B[..., 1], B[..., -2]), a, a + w


def earliest(keys, valid, k: int):
    """One-hot selections of the ``k`` smallest valid keys, in order, without a sort.

    XLA:CPU compiles no loop with a sort or a scatter into one function
    (:mod:`solver.integrate.xla_setup`), so the step loop of a small model
    would run kernel by kernel; ranks by pairwise comparison are a few
    hundred vector operations instead.

    Args:
        keys: (..., n) values (ties broken by position).
        valid: (..., n) bool (broadcast against ``keys``); invalid entries
            are never selected.
        k: how many.

    Returns:
        (..., k, n) float array whose row j is the one-hot of the j-th
        smallest valid key (all zero when fewer than j + 1 are valid):
        ``M @ values`` gathers, ``M.sum(-1) > 0`` says which rows hold one.
    """
    keys, valid = jnp.broadcast_arrays(keys, valid)
    n = keys.shape[-1]
    idx = jnp.arange(n)
    other, this = keys[..., None, :], keys[..., :, None]
    before = valid[..., None, :] & ((other < this) | ((other == this) & (idx[None, :] < idx[:, None])))
    rank = jnp.where(valid, jnp.sum(before, axis=-1), n)
    return (rank[..., None, :] == jnp.arange(k)[:, None]).astype(keys.dtype)


# A Newton step this small relative to u (a few units in the last place)
# ends the polishing: the next ones would only move u within rounding.
_SETTLED = 4 * float(np.finfo(np.float64).eps)


def _polish(c, lo, hi, f_lo, f_hi, inner_lo, inner_hi):
    """The root in each bracket [lo, hi] (values f_lo, f_hi at its ends, of opposite signs).

    ``c``: (..., P + 1) coefficients; the brackets (..., K), K of them for
    each polynomial.  Newton's method on the polynomial from the bracket's
    secant point, kept inside the bracket: each iterate's sign replaces the
    end of that sign, and a Newton step that would leave the bracket is a
    bisection instead.  A simple root is reached to rounding in a few
    iterations (quadratic convergence), a double one halves its error each
    time; each bracket stops where it settles.  One loop over every bracket
    of every polynomial, not a loop under ``vmap`` (whose batching made a
    model's run program trace longer), and not unrolled iterations (XLA
    copies each into every kernel that reads it: a model with events
    compiled a quarter longer for no faster run).
    """
    left_positive = _positive(f_lo)
    # A zero at an end (a zero counts as positive) is this bracket's root only
    # where the polynomial beside it inside has the other end's sign;
    # otherwise that zero is a root of the next piece (or touches zero), and
    # this bracket's root lies inside.  A stand-in value of the end's sign
    # then starts the secant away from that end.
    f_lo = jnp.where((f_lo == 0) & _positive(inner_lo), -f_hi, f_lo)
    f_hi = jnp.where((f_hi == 0) & _positive(inner_hi), -f_lo, f_hi)
    span = f_hi - f_lo
    x = jnp.where(span != 0, (lo * f_hi - hi * f_lo) / jnp.where(span != 0, span, 1.0), 0.5 * (lo + hi))
    x = jnp.clip(x, lo, hi)
    coefficients = c[..., None, :]

    def newton(state):
        i, lo, hi, x, settled = state
        y, dy = polynomial_value(coefficients, x)
        moves_lo = _positive(y) == left_positive
        lo, hi = jnp.where(moves_lo, x, lo), jnp.where(moves_lo, hi, x)
        newton_x = x - y / jnp.where(dy != 0, dy, 1.0)
        inside = (dy != 0) & (newton_x >= lo) & (newton_x <= hi)
        new = jnp.where(y == 0, x, jnp.where(inside, newton_x, 0.5 * (lo + hi)))
        # Settled: a Newton step within rounding of u (a simple root is there
        # after a few iterations; a bisection or a double root goes on).
        now = inside & (jnp.abs(new - x) <= _SETTLED * jnp.maximum(jnp.abs(x), 1e-300)) | (y == 0)
        return i + 1, lo, hi, jnp.where(settled, x, new), settled | now

    def going(state):
        i, _, _, _, settled = state
        return (i < POLISH_ITERATIONS) & ~jnp.all(settled)

    _, _, _, x, _ = lax.while_loop(going, newton, (0, lo, hi, x, jnp.zeros(x.shape, bool)))
    return x


def isolate_roots(c, pieces_matrix, fine_matrix=None, first: int | None = None, lazy: bool = False):
    """Every real root of a polynomial on [0, 1], polished, with their directions.

    :func:`root_brackets`, then :func:`polished_roots`, for one polynomial
    (the arguments and the slots are those of :func:`root_brackets`).

    Returns:
        (found, u, sign): bool, whether a slot holds a crossing; its root in
        [0, 1]; and its direction (+1 up, -1 down).
    """
    found, sign, brackets = root_brackets(c[None, :], pieces_matrix, fine_matrix, first, lazy)
    return found[0], polished_roots(c[None, :], *brackets)[0], sign[0]


def root_brackets(c, pieces_matrix, fine_matrix=None, first: int | None = None, lazy: bool = False):
    """Brackets of every real root of E polynomials on [0, 1], with their directions.

    The polynomials (a model's events) go through as one array, not under
    ``vmap``: batching rules made a model's run program trace longer, and
    turned the lazy refinement's ``lax.cond`` into a select that computed
    it on every step.

    Args:
        c: (E, P + 1) power coefficients in u (each event's Taylor
            coefficients times h**k).
        pieces_matrix: :func:`bernstein_pieces` of degree P (L pieces).
        fine_matrix: optional (L, L, P + 1, P + 1): :func:`bernstein_pieces`
            of degree P with L² pieces, grouped by coarse piece.  The first
            :data:`REFINED` pieces of each polynomial whose Bernstein
            coefficients change sign more than once are then examined again
            on L sub-pieces each.
        first: keep only this many slots of each polynomial, the earliest
            that hold a crossing (they come in time order); None: every slot.
        lazy: refine under a ``lax.cond``, only when a piece is ambiguous
            (a single run; under ``vmap`` a cond computes both branches).

    Returns:
        (found, sign, brackets), each (E, slots): bool, whether a slot holds
        a crossing; its direction (+1 up, -1 down); and the arguments of
        :func:`polished_roots` after ``c`` (the bracket, the values at its
        ends and the Bernstein coefficients beside them).  Slots are the L
        pieces, then L sub-pieces of each refined piece (not in time
        order), or with ``first`` the earliest crossings in time order.
    """
    n = pieces_matrix.shape[0]
    events = c.shape[0]
    dt = c.dtype
    B = jnp.einsum("ijk,ek->eij", pieces_matrix, c)  # (E, L, P + 1)
    # Values within rounding of zero are zero: the two pieces that share an end
    # compute its value by different sums, and must agree on its sign.
    scale = jnp.max(jnp.abs(B), axis=(1, 2), keepdims=True)
    B = _rounded_to_zero(B, scale)
    a = jnp.broadcast_to(jnp.arange(n, dtype=dt) / n, (events, n))
    found, changes, sign, (f_lo, f_hi, in_lo, in_hi), lo, hi = _brackets(B, a, 1.0 / n)
    if fine_matrix is not None:
        ambiguous = changes >= 2

        def refine(_):
            # The first REFINED ambiguous pieces of each polynomial, in time order.
            onehot = earliest(jnp.arange(n, dtype=dt), ambiguous, REFINED)   # (E, REFINED, L)
            picked = onehot.sum(axis=-1) > 0
            order = (onehot @ jnp.arange(n, dtype=dt)).astype(jnp.int32)    # (E, REFINED)
            # Dynamic slices of the constant, not a gather: the loop still compiles whole.
            sub = jnp.stack([jnp.stack([lax.dynamic_index_in_dim(fine_matrix, order[e, r], keepdims=False,
                                                                   allow_negative_indices=False)
                                        for r in range(REFINED)]) for e in range(events)])
            Bf = jnp.einsum("erjkl,el->erjk", sub, c)  # (E, REFINED, L, P + 1)
            Bf = _rounded_to_zero(Bf, scale[..., None])
            af = (order[..., None] * n + jnp.arange(n)).astype(dt) / (n * n)
            f2, _, s2, ends, lo2, hi2 = _brackets(Bf.reshape(events, -1, B.shape[-1]), af.reshape(events, -1),
                                                  1.0 / (n * n))
            return jnp.sum(onehot, axis=1) > 0, f2 & jnp.repeat(picked, n, axis=-1), s2, ends, lo2, hi2

        def none_ambiguous(_):
            zeros = jnp.zeros((events, REFINED * n), dt)
            return (jnp.zeros((events, n), bool), jnp.zeros((events, REFINED * n), bool),
                    jnp.ones((events, REFINED * n), sign.dtype), (zeros, zeros, zeros, zeros), zeros, zeros)

        if lazy:
            # Two roots in one piece are rare: most steps skip the refinement.
            refined, f2, s2, (flo2, fhi2, inlo2, inhi2), lo2, hi2 = lax.cond(jnp.any(ambiguous), refine,
                                                                             none_ambiguous, None)
        else:
            refined, f2, s2, (flo2, fhi2, inlo2, inhi2), lo2, hi2 = refine(None)

        def joined(x, y):
            return jnp.concatenate([x, y], axis=-1)

        found = joined(found & ~refined, f2)
        sign, f_lo, f_hi, in_lo, in_hi = (joined(x, y) for x, y in ((sign, s2), (f_lo, flo2), (f_hi, fhi2),
                                                                    (in_lo, inlo2), (in_hi, inhi2)))
        lo, hi = joined(lo, lo2), joined(hi, hi2)
    if first is not None and first < found.shape[-1]:
        # Only the earliest crossings are polished (the caller keeps no more).
        pick = earliest(lo, found, first)   # (E, first, slots)

        def picked(x):
            return jnp.einsum("efk,ek->ef", pick, x.astype(dt))

        found = pick.sum(axis=-1) > 0
        lo_f = picked(lo)
        sign, hi, f_lo, f_hi, in_lo, in_hi = (picked(x) for x in (sign, hi, f_lo, f_hi, in_lo, in_hi))
        sign = sign.astype(jnp.int32)
        # Unused rows: a harmless bracket [0, 1] of a positive and a negative value.
        lo = jnp.where(found, lo_f, 0.0)
        hi = jnp.where(found, hi, 1.0)
        f_lo = jnp.where(found, f_lo, 1.0)
        f_hi = jnp.where(found, f_hi, -1.0)
    return found, sign, (lo, hi, f_lo, f_hi, in_lo, in_hi)


def polished_roots(c, lo, hi, f_lo, f_hi, inner_lo, inner_hi):
    """The root in each bracket, polished, with its derivatives (:func:`_implicit_root`).

    Args:
        c: (..., P + 1) power coefficients in u of one or more polynomials.
        lo, hi: (..., K) brackets, K for each polynomial, holding a sign
            change (a bracket that holds none gives a point inside it).
        f_lo, f_hi: the values at the brackets' ends.
        inner_lo, inner_hi: the Bernstein coefficients beside the ends (the
            sign inside beside a zero end).

    Returns:
        (..., K) roots in u.
    """
    fixed = jax.lax.stop_gradient
    u = _polish(fixed(c), *(fixed(e) for e in (lo, hi, f_lo, f_hi, inner_lo, inner_hi)))
    return _implicit_root(c, u)


def single_root(c, B):
    """The root of each polynomial whose Bernstein coefficients on [0, 1] change sign once.

    By Descartes' rule of signs in Bernstein form one sign change (and
    non-zero values at both ends) means exactly one root in (0, 1): most
    steps with a crossing have one, and need neither pieces nor
    refinement (:func:`whole_step` tells which).

    Args:
        c: (..., P + 1) power coefficients in u.
        B: (..., P + 1) their Bernstein coefficients on [0, 1], values
            within rounding of zero set to zero.

    Returns:
        (found, u, sign), each of shape (..., 1), as :func:`isolate_roots`.
    """
    starts = jnp.zeros(B.shape[:-1] + (1,), c.dtype)   # one bracket, [0, 1], per polynomial
    found, _, sign, ends, lo, hi = _brackets(B[..., None, :], starts, 1.0)
    return found, polished_roots(c, lo, hi, *ends), sign


def whole_step(c, whole_matrix):
    """Bernstein coefficients on [0, 1] and whether :func:`single_root` applies to them.

    Args:
        c: (..., P + 1) power coefficients in u.
        whole_matrix: ``bernstein_pieces(P, 1)[0]``.

    Returns:
        (B, simple): B (..., P + 1), values within rounding of zero set to
        zero; simple (...) is True when B changes sign at most once and
        neither end is zero.
    """
    B = c @ whole_matrix.T
    B = _rounded_to_zero(B, jnp.max(jnp.abs(B), axis=-1, keepdims=True))
    _, changes, _, (left, right, _, _), _, _ = _brackets(B[..., None, :], 0.0, 1.0)
    return B, (changes[..., 0] <= 1) & (left[..., 0] != 0) & (right[..., 0] != 0)


def clear_of_roots(c, h):
    """Whether a polynomial in s has no root on [0, h], by a bound cheaper than Bernstein's.

    ``|q(s) - c0| <= sum_k |ck| |h|^k`` on the interval: where ``|c0|``
    exceeds that sum by more than :data:`CLEAR_MARGIN` (relative), every
    Bernstein coefficient of q on [0, h] has the sign of ``c0``, none
    within rounding of zero (:func:`whole_step` finds no sign change).  The
    sum by Horner's rule is a few fused operations: the test of every step.

    Args:
        c: (..., P + 1) power coefficients in s, the last axis the powers.
        h: the interval's length (either sign).

    Returns:
        bool array of shape ``c.shape[:-1]``; False means "not excluded" (a
        root is possible, or the bound is not tight enough to say).
    """
    a = jnp.abs(c)
    degree = c.shape[-1] - 1
    step = jnp.abs(h)
    rest = jnp.zeros_like(a[..., 0])
    for k in range(degree, 0, -1):
        rest = (rest + a[..., k]) * step
    return a[..., 0] - rest > CLEAR_MARGIN * (a[..., 0] + rest)


def _implicit_root(c, u):
    """The polished roots ``u`` with their derivatives by the implicit function theorem.

    One Newton step at a root moves it by rounding only, and its derivative
    with respect to the coefficients is exactly ``-(dq)(u) / q'(u)``: under
    ``jax.jvp`` (design sensitivities) an event time then moves with the
    parameters as dt*/dp = -(dg/dp + dg/dx dx/dp) / (dg/dt).
    """
    y, dy = polynomial_value(c[..., None, :], u)
    step = jnp.where(dy != 0, y / jnp.where(dy != 0, dy, 1.0), 0.0)
    # The step's value is rounding: keep the polished root, take the step's derivative.
    return u - step + jax.lax.stop_gradient(step)
