"""Dense LU for the small linear systems of a step, vectorised across a batch.

Every step solves with the system Jacobian (Newton on stage 0, then once per
Taylor order) and with the projection's normal matrix.  For a mechanism these
systems are small (a pendulum: 3×3), and under ``jax.vmap`` XLA:CPU runs
LAPACK's ``getrf``/``getrs`` once per batch element through a custom call:
about 0.4 µs per element and call, most of a batched step's cost
(workflows/benchmarks/results/linalg.txt).  Small
systems are therefore written out here, row by row with static loops, so
that XLA fuses them into a few elementwise kernels over the batch: the
factorisation up to :data:`FACTOR_UNROLL_MAX` unknowns, the triangular
solves up to :data:`SOLVE_UNROLL_MAX`.  Larger systems keep LAPACK, whose
pivot vector the unrolled solve reads as well.

Gauss–Newton's minimum-norm correction ``−Gᵀ(G Gᵀ)⁻¹r``, with its
regularised normal matrix, is written once here (:func:`min_norm_factor`,
:func:`min_norm_step`) for the projection after a step and for the
consistent initialisation.

Partial pivoting is LAPACK's (the largest magnitude in the column, the first
one on ties, one row swap per column), so both paths give the same factors
up to rounding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from solver.dae.trace_flags import TraceFlag

__all__ = ["LU", "Cholesky", "lu_factor", "lu_solve", "solve_factored", "inverse", "apply_inverse", "solve",
           "pivots_singular", "min_norm_factor", "min_norm_step", "min_norm_correction", "identity", "diagonal",
           "matmul", "dot_general",
           "native_loops", "FACTOR_UNROLL_MAX", "SOLVE_UNROLL_MAX", "NATIVE_LOOP_MAX", "CONSTANT_IDENTITY_MAX",
           "SINGULAR_RTOL", "MIN_NORM_RTOL", "MIN_NORM_ATOL"]

# Measured on XLA:CPU under vmap (ns per batch element,
# workflows/benchmarks/results/linalg.txt): the unrolled factor beats getrf
# up to 5 unknowns (57 vs 123 at n = 3, 358 vs 311 at n = 6), the unrolled
# solve beats getrs well beyond (19 vs 220 at n = 3, 79 vs 351 at n = 8);
# the program grows like n² (solve) and n³ (factor), so both stay small.
FACTOR_UNROLL_MAX = 5
SOLVE_UNROLL_MAX = 8
# Past the unrolled sizes, up to this many unknowns, a single run (not a
# vmapped batch, see native_loops) factors and solves by XLA loops of masked
# whole-matrix updates instead of LAPACK: a custom call (like a dot or a
# scatter) keeps XLA:CPU from compiling the step loop as one function
# (solver.integrate.xla_setup), and a loop of kernels costs a mid-size model's run
# more than the O(n³) masked arithmetic (workflows/benchmarks/results/small_loops.txt).
# A single run's step loop is written this way only up to a smaller size
# (solver.integrate.single_run.WHOLE_LOOP_MAX_UNKNOWNS).
NATIVE_LOOP_MAX = 48

# A pivot below this fraction of the largest one counts as singular.
SINGULAR_RTOL = 1e-13

# Gauss–Newton's normal matrix G Gᵀ is regularised by
# (MIN_NORM_RTOL · trace(G Gᵀ)/m + MIN_NORM_ATOL) · I: a rank-deficient G
# (a redundant constraint, or no free entry in a row) then still factors, and
# the relative shift is far below the accuracy the projection needs.
MIN_NORM_RTOL = 1e-14
MIN_NORM_ATOL = 1e-300


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class LU:
    """An LU factorisation ``P A = L U`` (see :func:`lu_factor`).

    Attributes:
        lu: (n, n) with the unit-lower L below the diagonal and U on and
            above it (LAPACK's layout).
        piv: (n,) int32 pivot rows: row k was swapped with row ``piv[k]``
            at step k (LAPACK's ``ipiv``, zero-based).
        singular: traced bool, True when the smallest pivot is negligible
            against the largest (:data:`SINGULAR_RTOL`).
    """

    lu: object
    piv: object
    singular: object


_native = TraceFlag()
_native_batched = TraceFlag()


@contextlib.contextmanager
def native_loops(enabled: bool = True, batched: bool = False):
    """Within the block, trace mid-size factorisations and solves as XLA loops, not LAPACK calls.

    For sizes from ``FACTOR_UNROLL_MAX + 1`` (``SOLVE_UNROLL_MAX + 1`` for
    solves) up to :data:`NATIVE_LOOP_MAX`.  Set while tracing a single run
    (``Integrator._run``); a vmapped batch keeps LAPACK, whose batched call
    is cheaper per element than masked whole-matrix updates.

    Args:
        enabled: whether the loops are used.
        batched: the loops run under a ``vmap`` over the matrices (a forward-mode
            batch's slots): a row that the data pick (a pivot) is then read and
            written by masks, since a slice at a batched index is a gather.

    Returns:
        A context manager.
    """
    with _native.set(enabled), _native_batched.set(enabled and batched):
        yield


def _use_native(n: int, unrolled_max: int) -> bool:
    return unrolled_max < n <= NATIVE_LOOP_MAX and _native.on


def pivots_singular(diag):
    """True when the smallest pivot magnitude is negligible against the largest."""
    diag = jnp.abs(diag)
    return ~(jnp.min(diag) > SINGULAR_RTOL * jnp.maximum(jnp.max(diag), 1e-300))


# Identity matrices up to this size are numpy constants (see identity).
CONSTANT_IDENTITY_MAX = 256


def identity(n: int, dtype=float):
    """The n x n identity: literal data for small n, an iota expression beyond.

    XLA does not fold an iota, and inside the step loop it hoists each iota
    expression into a kernel of the program's entry, which a small model's
    run pays for on every call.  A large identity stays an expression: as a
    constant it would be n² numbers in the executable and the compile cache.
    """
    return np.eye(n, dtype=dtype) if n <= CONSTANT_IDENTITY_MAX else jnp.eye(n, dtype=dtype)


def diagonal(A):
    """The diagonal of a square (n, n) matrix, by constant indices (see :func:`_factor_unrolled`)."""
    i = np.arange(A.shape[-1])
    return A[i, i]


def _factor_unrolled(A):
    n = A.shape[-1]
    rows = [A[i] for i in range(n)]
    # Masks and index arrays are numpy constants, not iota expressions: XLA
    # does not fold an iota, and inside a loop it hoists each such
    # expression into a kernel of the program's entry, which costs a run
    # of a small model more than the expression (see Integrator._run).
    cols = np.arange(n)
    piv = []
    for k in range(n):
        # The first row i >= k of largest |A[i, k]|, found by a scan of
        # selects (a reduction per column would be a kernel of its own).
        best, p = jnp.abs(rows[k][k]), jnp.int32(k)
        for i in range(k + 1, n):
            bigger = jnp.abs(rows[i][k]) > best
            best, p = jnp.where(bigger, jnp.abs(rows[i][k]), best), jnp.where(bigger, i, p)
        piv.append(p)
        old_k = rows[k]
        for i in range(k + 1, n):
            rows[k] = jnp.where(p == i, rows[i], rows[k])
        for i in range(k + 1, n):
            rows[i] = jnp.where(p == i, old_k, rows[i])
        pivot = rows[k][k]
        pivot = jnp.where(pivot == 0.0, 1.0, pivot)
        for i in range(k + 1, n):
            m = rows[i][k] / pivot
            rows[i] = jnp.where(cols == k, m, jnp.where(cols > k, rows[i] - m * rows[k], rows[i]))
    return jnp.stack(rows), jnp.stack(piv).astype(jnp.int32)


def _factor_looped(A):
    """Partial-pivoting LU as a loop over columns of masked whole-matrix updates.

    No gather, scatter or custom call: the pivot row is found by a
    reduction, rows are picked, swapped and eliminated by selects and a
    rank-one update, so XLA:CPU can compile an enclosing loop as one
    function (and ``vmap`` batches it elementwise).  Picking by a select
    and a sum is exact and keeps a non-finite entry in its own row.
    """
    n = A.shape[-1]
    idx = np.arange(n)

    def step(k, carry):
        A, piv = carry
        at_k = idx == k
        col = jnp.sum(jnp.where(at_k[None, :], A, 0.0), axis=1)  # A[:, k]
        # The first row i >= k of largest |A[i, k]| (LAPACK's choice on ties).
        p = jnp.argmax(jnp.where(idx >= k, jnp.abs(col), -1.0)).astype(jnp.int32)
        at_p = idx == p
        row_k = jnp.sum(jnp.where(at_k[:, None], A, 0.0), axis=0)
        row_p = jnp.sum(jnp.where(at_p[:, None], A, 0.0), axis=0)
        A = jnp.where(at_k[:, None], row_p[None, :], jnp.where(at_p[:, None], row_k[None, :], A))
        col = jnp.where(at_k, jnp.sum(jnp.where(at_p, col, 0.0)),
                        jnp.where(at_p, jnp.sum(jnp.where(at_k, col, 0.0)), col))
        pivot = jnp.sum(jnp.where(at_k, col, 0.0))
        pivot = jnp.where(pivot == 0.0, 1.0, pivot)
        below = idx > k
        m = jnp.where(below, col / pivot, 0.0)
        A = A - m[:, None] * jnp.where(below, row_p, 0.0)[None, :]
        A = jnp.where(below[:, None] & at_k[None, :], m[:, None], A)
        return A, jnp.where(at_k, p, piv)

    return lax.fori_loop(0, n, step, (A, jnp.zeros(n, jnp.int32)))


def lu_factor(A) -> LU:
    """LU factorisation with partial pivoting of a square matrix.

    Args:
        A: (n, n) array (traced; ``vmap`` adds batch dimensions outside).

    Returns:
        :class:`LU`.  A (numerically) singular A is flagged in
        ``LU.singular``, never raised; solves with it are then meaningless
        (possibly non-finite).
    """
    n = A.shape[-1]
    if _use_native(n, FACTOR_UNROLL_MAX):
        lu, piv = _factor_looped(A)
    elif n > FACTOR_UNROLL_MAX:
        lu, piv = jsl.lu_factor(A)
    else:
        lu, piv = _factor_unrolled(A)
    return LU(lu, piv.astype(jnp.int32), pivots_singular(diagonal(lu)) if n else jnp.asarray(False))


def lu_solve(fact: LU, b):
    """Solve ``A x = b`` with a factorisation from :func:`lu_factor`.

    Args:
        fact: the :class:`LU` of A.
        b: (n,) or (n, k) right-hand side(s).

    Returns:
        x, shaped like b.
    """
    LUm = fact.lu
    n = LUm.shape[-1]
    if _use_native(n, SOLVE_UNROLL_MAX):
        return _solve_looped(LUm, fact.piv, b)
    if n > SOLVE_UNROLL_MAX:
        return jsl.lu_solve((LUm, fact.piv), b)
    y = [b[i] for i in range(n)]
    for k in range(n):  # the row swaps, in order
        p = fact.piv[k]
        for i in range(k + 1, n):
            swap = p == i
            y[k], y[i] = jnp.where(swap, y[i], y[k]), jnp.where(swap, y[k], y[i])
    for k in range(n):  # L y = P b, L unit lower
        for i in range(k + 1, n):
            y[i] = y[i] - LUm[i, k] * y[k]
    for i in reversed(range(n)):  # U x = y
        for j in range(i + 1, n):
            y[i] = y[i] - LUm[i, j] * y[j]
        y[i] = y[i] / LUm[i, i]
    return jnp.stack(y) if n else b


def _factored_solve(matrix_tangent, by_factors=None):
    """A solve ``f(M, fact, b) = A⁻¹ b`` by A's factors, whose forward mode is ``A⁻¹ (db − dA x)``.

    ``M`` is what A is made from, ``matrix_tangent(M, dM)`` gives dA: the
    factors themselves carry no tangent and the elimination is never
    differentiated.  ``by_factors(fact, b)`` solves (default :func:`lu_solve`).
    """
    by_factors = by_factors or lu_solve

    @jax.custom_jvp
    def solve_by_factors(M, fact, b):
        del M
        return by_factors(fact, b)

    @solve_by_factors.defjvp
    def _jvp(primals, tangents):
        M, fact, b = primals
        dM, _, db = tangents
        x = by_factors(fact, b)
        return x, by_factors(fact, db - matmul(matrix_tangent(M, dM), x))

    return solve_by_factors


_solve_factored = _factored_solve(lambda A, dA: dA)


def solve_factored(A, fact: LU, b):
    """``A⁻¹ b`` by A's factorisation, differentiated as a solve, not as the factorisation.

    Forward mode gives ``d(A⁻¹ b) = A⁻¹ (db − dA A⁻¹ b)`` with the same
    factors: the elimination itself is never differentiated.  Through
    :func:`lu_factor`'s own arithmetic (an unrolled elimination for small
    systems) the tangents took half of a forward-mode (sensitivity) run's
    program, and most of its compile.

    Args:
        A: (n, n) the matrix (its tangent is the one that counts).
        fact: :func:`lu_factor` of ``lax.stop_gradient(A)``.
        b: (n,) or (n, k) right-hand side(s).

    Returns:
        x, shaped like b.
    """
    return _solve_factored(A, fact, b)


def _solve_looped(LUm, piv, b):
    """:func:`lu_solve` by loops of selects and rank-one updates (see :func:`_factor_looped`)."""
    n = LUm.shape[-1]
    idx = np.arange(n)
    y = b if b.ndim == 2 else b[:, None]

    def pick_row(M, at):
        return jnp.sum(jnp.where(at[:, None], M, 0.0), axis=0)

    def pick_col(M, at):
        return jnp.sum(jnp.where(at[None, :], M, 0.0), axis=1)

    def swap(k, y):  # rows k and piv[k]
        at_k = idx == k
        at_p = idx == jnp.sum(jnp.where(at_k, piv, 0))
        yk, yp = pick_row(y, at_k), pick_row(y, at_p)
        return jnp.where(at_k[:, None], yp[None, :], jnp.where(at_p[:, None], yk[None, :], y))

    def forward(k, y):  # L y = P b, L unit lower
        at_k = idx == k
        lk = jnp.where(idx > k, pick_col(LUm, at_k), 0.0)
        return y - lk[:, None] * pick_row(y, at_k)[None, :]

    def backward(j, y):  # U x = y, from the last row up
        k = n - 1 - j
        at_k = idx == k
        uk = pick_col(LUm, at_k)  # column k of U (rows <= k)
        xk = pick_row(y, at_k) / jnp.sum(jnp.where(at_k, uk, 0.0))
        y = jnp.where(at_k[:, None], xk[None, :], y)
        return y - jnp.where(idx < k, uk, 0.0)[:, None] * xk[None, :]

    y = lax.fori_loop(0, n, swap, y)
    y = lax.fori_loop(0, n, forward, y)
    y = lax.fori_loop(0, n, backward, y)
    return y if b.ndim == 2 else y[:, 0]


def matmul(A, B):
    """``A @ B`` (B a matrix or a vector) by :func:`dot_general`: under
    :func:`native_loops`, for small operands, multiplies and a sum, since
    XLA:CPU hands a dot to Eigen, which keeps it from compiling an
    enclosing loop whole.
    """
    return dot_general(A, B, (((A.ndim - 1,), (0,)), ((), ())))


def dot_general(a, b, dimension_numbers, **params):
    """``lax.dot_general``; under :func:`native_loops`, for small operands, as multiplies and a sum.

    For a model's own products (``jnp.dot`` of vectors and small matrices)
    re-evaluated in the step: XLA:CPU hands a dot to Eigen, which keeps it
    from compiling an enclosing loop whole.  ``params``
    (precision, preferred type) are those of the traced primitive.
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    if not getattr(_native, "on", False) or a.size * b.size > NATIVE_LOOP_MAX ** 3:
        if "out_sharding" in params:  # a traced primitive's own parameters: rebind it as it was
            return lax.dot_general_p.bind(a, b, dimension_numbers=dimension_numbers, **params)
        return lax.dot_general(a, b, dimension_numbers, precision=params.get("precision"),
                               preferred_element_type=params.get("preferred_element_type"))
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [i for i in range(a.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(b.ndim) if i not in rc and i not in rb]
    nb = int(np.prod([a.shape[i] for i in lb], dtype=int))
    nc = int(np.prod([a.shape[i] for i in lc], dtype=int))
    At = jnp.transpose(a, list(lb) + lf + list(lc)).reshape(nb, -1, nc)
    Bt = jnp.transpose(b, list(rb) + rf + list(rc)).reshape(nb, -1, nc)
    out = jnp.sum(At[:, :, None, :] * Bt[:, None, :, :], axis=-1)
    shape = [a.shape[i] for i in lb] + [a.shape[i] for i in lf] + [b.shape[i] for i in rf]
    pref = params.get("preferred_element_type")
    return out.reshape(shape).astype(pref if pref is not None else jnp.result_type(a, b))


def inverse(A) -> tuple:
    """``A⁻¹`` and whether A is (numerically) singular; forward mode gives ``-A⁻¹ dA A⁻¹``.

    Under :func:`native_loops`, for the sizes it covers, one loop of
    Gauss–Jordan elimination with partial pivoting on ``[A | I]``, rows
    read and written by dynamic slices: about 2n³ operations in n passes,
    where a factorisation and a solve with the identity by masked
    whole-matrix updates (:func:`_factor_looped`, :func:`_solve_looped`)
    take four loops and several times the arithmetic.  Elsewhere
    :func:`lu_factor` and :func:`solve_factored`.  The pivots are those of
    the LU factorisation (the same rows are chosen), so ``singular`` is
    :func:`lu_factor`'s.

    Args:
        A: (n, n) array.

    Returns:
        ``(inverse, singular)``: (n, n) and a traced bool.  A singular A's
        inverse is meaningless (possibly non-finite).
    """
    n = A.shape[-1]
    if not _use_native(n, FACTOR_UNROLL_MAX):
        fact = lu_factor(lax.stop_gradient(A))
        return solve_factored(A, fact, identity(n, A.dtype)), fact.singular
    X, singular = _gauss_jordan(lax.stop_gradient(A))
    return _inverse_tangent(A, X), singular


@jax.custom_jvp
def _inverse_tangent(A, X):
    """X (= A⁻¹, computed without tangent), given the inverse's tangent ``-X dA X``."""
    del A
    return X


@_inverse_tangent.defjvp
def _inverse_tangent_jvp(primals, tangents):
    A, X = primals
    dA, _ = tangents
    return X, -matmul(X, matmul(dA, X))


# The loops' indices (a counter, a pivot's row) are in range: their slices go without
# lax's negative-index wrap-around, a compare, an add and a select per access.
_slice_in_dim = functools.partial(lax.dynamic_slice_in_dim, allow_negative_indices=False)
_index_in_dim = functools.partial(lax.dynamic_index_in_dim, allow_negative_indices=False)
_update_slice_in_dim = functools.partial(lax.dynamic_update_slice_in_dim, allow_negative_indices=False)


def _gauss_jordan(A):
    """(A⁻¹, singular) by Gauss–Jordan elimination with partial pivoting (see :func:`inverse`)."""
    n = A.shape[-1]
    idx = np.arange(n)
    batched = _native_batched.on
    W = jnp.concatenate([A, identity(n, A.dtype)], axis=1)

    def step(k, carry):
        W, smallest, largest = carry
        col = _slice_in_dim(W, k, 1, axis=1)[:, 0]
        # The first row i >= k of largest |W[i, k]| (LAPACK's choice on ties).
        p = jnp.argmax(jnp.where(idx >= k, jnp.abs(col), -1.0))
        row_k = _slice_in_dim(W, k, 1, axis=0)
        # k is the loop's counter, p the data's: under a vmap over the matrices (batched) the
        # row at p is picked and replaced by masks, as a slice at a batched index is a gather.
        if batched:
            at_p = idx == p
            row_p = jnp.sum(jnp.where(at_p[:, None], W, 0.0), axis=0, keepdims=True)
            pivot = jnp.sum(jnp.where(at_p, col, 0.0))
        else:
            row_p = _slice_in_dim(W, p, 1, axis=0)
            pivot = _index_in_dim(col, p, keepdims=False)
        size = jnp.abs(pivot)
        smallest, largest = jnp.minimum(smallest, size), jnp.maximum(largest, size)
        # Swap rows k and p (the column too, for the elimination below).
        W = jnp.where((idx == p)[:, None], row_k, W) if batched else _update_slice_in_dim(W, row_k, p, 0)
        col = jnp.where(idx == p, _index_in_dim(col, k, keepdims=False), col)
        row = row_p / jnp.where(pivot == 0.0, 1.0, pivot)
        # Every other row loses its multiple of the pivot row; the pivot row becomes the scaled one.
        W = W - jnp.where(idx == k, 0.0, col)[:, None] * row
        W = _update_slice_in_dim(W, row, k, axis=0)
        return W, smallest, largest

    big = jnp.asarray(jnp.inf, A.dtype)
    W, smallest, largest = lax.fori_loop(0, n, step, (W, big, jnp.zeros((), A.dtype)))
    singular = ~(smallest > SINGULAR_RTOL * jnp.maximum(largest, 1e-300)) if n else jnp.asarray(False)
    return W[:, n:], singular


def apply_inverse(inverse, b):
    """``inverse @ b`` by elementwise arithmetic that fuses into one kernel.

    A ``dot`` of a small matrix is a call into Eigen of its own on XLA:CPU
    (and under ``vmap`` a batched one); multiply-adds of the columns (or,
    past :data:`SOLVE_UNROLL_MAX` unknowns, a product and a sum) fuse with
    their neighbours.

    Args:
        inverse: (n, n) an inverse, e.g. ``lu_solve(lu_factor(A), eye(n))``.
        b: (n,) right-hand side.

    Returns:
        (n,) the solution of ``A x = b``.
    """
    n = b.shape[0]
    if n > SOLVE_UNROLL_MAX:
        return jnp.sum(inverse * b[None, :], axis=1)
    # Column by column: under vmap a reduction over a minor axis of a few
    # elements is a slow loop on XLA:CPU (a batch of 1,000 pendulums took
    # 1.5x as long), multiply-adds of whole columns are vector operations.
    x = inverse[:, 0] * b[0]
    for j in range(1, n):
        x = x + inverse[:, j] * b[j]
    return x


def solve(A, b):
    """Solve ``A x = b`` (A square, b a vector) by :func:`lu_factor` and :func:`lu_solve`.

    Returns:
        x; meaningless (possibly non-finite) when A is singular, no error
        raised.
    """
    return lu_solve(lu_factor(A), b)


def _normal_matrix(G):
    """Gauss–Newton's regularised normal matrix ``G Gᵀ + (MIN_NORM_RTOL·trace(G Gᵀ)/m + MIN_NORM_ATOL)·I``."""
    A = matmul(G, G.T)
    m = A.shape[0]
    return A + identity(m) * (MIN_NORM_RTOL * jnp.sum(diagonal(A)) / m + MIN_NORM_ATOL)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Cholesky:
    """A Cholesky factorisation ``A = L Lᵀ`` of a symmetric positive definite matrix (see :func:`min_norm_factor`).

    Attributes:
        L: (n, n) lower triangular, positive diagonal.
        singular: traced bool, True when the smallest pivot ``L_kk²`` is
            negligible against the largest (:data:`SINGULAR_RTOL`), as
            :func:`lu_factor` flags its pivots.
    """

    L: object
    singular: object


def min_norm_factor(G) -> LU | Cholesky:
    """Factorise Gauss–Newton's regularised normal matrix for :func:`min_norm_step`.

    Under :func:`native_loops`, for the sizes it covers, by Cholesky (the
    matrix is symmetric positive definite): one loop over the columns,
    read and written by dynamic slices at the loop's counter, about n³
    operations where the pivoted LU's masked whole-matrix updates take
    several times that, and its solves O(n²) where those of the LU take
    O(n³).  No pivot is chosen by the data, so a vmap over the matrices
    keeps the slices slices.  Elsewhere :func:`lu_factor`.

    Args:
        G: (m, n) constraint Jacobian (m >= 1), typically of full row rank.

    Returns:
        The :class:`LU` or :class:`Cholesky` of ``A = G Gᵀ +
        (MIN_NORM_RTOL·trace(G Gᵀ)/m + MIN_NORM_ATOL)·I``.  Reuse it for
        several right-hand sides (a chord iteration with G frozen).  Its
        factors carry no tangent: forward mode differentiates
        :func:`min_norm_step`'s solve, as :func:`solve_factored` does.
    """
    A = _normal_matrix(lax.stop_gradient(G))
    if _use_native(A.shape[-1], FACTOR_UNROLL_MAX):
        return _cholesky_looped(A)
    return lu_factor(A)


def _cholesky_looped(A) -> Cholesky:
    """:class:`Cholesky` of A by a loop of rank-one updates (see :func:`min_norm_factor`)."""
    n = A.shape[-1]
    idx = np.arange(n)
    # Rounding may leave a pivot of a rank-deficient G's normal matrix at or below zero; it is
    # floored at the matrix's regularisation (the shift of _normal_matrix), not taken to a NaN.
    floor = MIN_NORM_RTOL * jnp.sum(diagonal(A)) / n + MIN_NORM_ATOL

    def step(k, carry):
        W, L = carry
        col = _slice_in_dim(W, k, 1, axis=1)[:, 0]
        d = jnp.sqrt(jnp.maximum(_index_in_dim(col, k, keepdims=False), floor))
        below = jnp.where(idx > k, col / d, 0.0)
        W = W - below[:, None] * below[None, :]
        L = _update_slice_in_dim(L, jnp.where(idx == k, d, below)[:, None], k, axis=1)
        return W, L

    _, L = lax.fori_loop(0, n, step, (A, jnp.zeros_like(A)))
    pivots = diagonal(L) ** 2
    return Cholesky(L, ~(jnp.min(pivots) > SINGULAR_RTOL * jnp.maximum(jnp.max(pivots), 1e-300)))


def _cholesky_solve(fact: Cholesky, b):
    """``A⁻¹ b`` for ``A = L Lᵀ`` by two substitutions, at the loop's counter (b: (n,) or (n, k))."""
    L = fact.L
    n = L.shape[-1]
    idx = np.arange(n)
    y = b if b.ndim == 2 else b[:, None]

    def forward(k, y):  # L y = b
        col = _slice_in_dim(L, k, 1, axis=1)          # (n, 1): column k of L
        yk = _slice_in_dim(y, k, 1, axis=0) / _slice_in_dim(col, k, 1, axis=0)
        y = _update_slice_in_dim(y, yk, k, axis=0)
        return y - jnp.where((idx > k)[:, None], col, 0.0) * yk

    def backward(j, y):  # Lᵀ x = y, from the last row up
        k = n - 1 - j
        col = _slice_in_dim(L, k, 1, axis=1)          # column k of L: row k of Lᵀ
        xk = _slice_in_dim(y, k, 1, axis=0) / _slice_in_dim(col, k, 1, axis=0)
        y = _update_slice_in_dim(y, xk, k, axis=0)
        # Rows i < k lose L[k, i] x_k: row k of L, as a column.
        row = _slice_in_dim(L, k, 1, axis=0).T
        return y - jnp.where((idx < k)[:, None], row, 0.0) * xk

    y = lax.fori_loop(0, n, forward, y)
    y = lax.fori_loop(0, n, backward, y)
    return y if b.ndim == 2 else y[:, 0]


def _normal_matrix_tangent(G, dG):
    """The tangent of :func:`_normal_matrix` (G) along dG."""
    dGG = matmul(dG, G.T)
    dA0 = dGG + dGG.T
    m = dA0.shape[0]
    return dA0 + identity(m) * (MIN_NORM_RTOL * jnp.sum(diagonal(dA0)) / m)


# A⁻¹ r for A = _normal_matrix(G), by its factors (LU or Cholesky); differentiated as solve_factored is.
_normal_solve = _factored_solve(_normal_matrix_tangent)
_normal_solve_cholesky = _factored_solve(_normal_matrix_tangent, _cholesky_solve)


def min_norm_step(fact: LU, G, r):
    """The minimum-norm correction ``δ = −Gᵀ (G Gᵀ)⁻¹ r``.

    For G of full row rank, δ is the shortest vector with ``G δ = −r``: one
    Gauss–Newton step towards ``g(z) = 0`` from a point with residual
    ``r = g(z)`` and Jacobian ``G`` is ``z + δ``.

    Args:
        fact: :func:`min_norm_factor` of the same G.
        G: (m, n) the Jacobian.
        r: (m,) the residual.

    Returns:
        δ, shape (n,).
    """
    solve = _normal_solve_cholesky if isinstance(fact, Cholesky) else _normal_solve
    return -matmul(G.T, solve(G, fact, r))


def min_norm_correction(G, r):
    """``min_norm_step(min_norm_factor(G), G, r)``: one Gauss–Newton correction."""
    return min_norm_step(min_norm_factor(G), G, r)
