"""The looped engine's coefficient arithmetic on order-axis arrays: operands, sums, row writes, recurrences.

:class:`~solver.taylor.program.TaylorProgram` keeps a node's Taylor
coefficients in an array whose leading axis is the order and computes one
order per stage with a traced index.  Here: its operands
(:class:`ConstOperand`, :class:`SeriesOperand`), the sum over the order axis
(:func:`order_sum`), the write of one order's row that stays in place under
``vmap`` (:func:`write_row`), Cauchy sums (:func:`conv`) and the recurrences
of the nonlinear primitives (:func:`nonlinear_coef`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from solver.dae.primitives import UnsupportedPrimitiveError

__all__ = ["ConstOperand", "SeriesOperand", "coef_at", "conv", "mul_const", "nonlinear_coef", "order_sum",
           "write_row"]


class ConstOperand:
    """An operand known at every stage (a parameter's node, a literal): its series is ``value, 0, 0, …``."""

    def __init__(self, value):
        self.value = value

    def coef(self, m):
        v = jnp.asarray(self.value)
        return jnp.where(m == 0, v, jnp.zeros_like(v))

    def coef0(self):
        return self.value

    def series(self, K):
        v = jnp.asarray(self.value, dtype=jnp.float64)
        return jnp.zeros((K,) + v.shape).at[0].set(v)


class SeriesOperand:
    """An operand that is a series: its coefficient array ``arr`` (order axis first)."""

    def __init__(self, arr):
        self.arr = arr

    def coef(self, m):
        return coef_at(self.arr, m)

    def coef0(self):
        return self.arr[0]

    def series(self, K):
        return self.arr


def coef_at(arr, i):
    """``arr[i]`` along the order axis for an in-range traced i.

    A dynamic slice without the negative-index wrap-around that ``arr[i]``
    and ``lax``'s default emit (compare, add, select per access;
    ``allow_negative_indices=False``): the interpreted program has
    thousands of these reads, and they dominate compile time.
    """
    return lax.dynamic_index_in_dim(arr, i, 0, keepdims=False, allow_negative_indices=False)


def order_sum(terms):
    """Σ over the leading (order) axis, as a contraction with ones.

    XLA:CPU lowers a reduce over the leading axis of a (K, n) array to a
    strided loop that falls out of cache for large n (measured: 190–340 ns
    per element at n = 24,300 against 14 ns for the contraction), which made
    a step of a large particle system super-linear in n.
    """
    return jnp.tensordot(jnp.ones(terms.shape[0], terms.dtype), terms, axes=1)


def write_row(arr, m, val):
    """``arr`` with ``arr[clip(m)] = val`` along the order axis.

    For m < 0 this overwrites row 0 with a value computed from inputs that
    are not yet known either.  That is harmless: a node's order m only grows
    from stage to stage, row 0 is computed properly when m reaches 0 (from
    operands that reached it earlier, their offsets being at least the
    node's), and every reader masks rows it has not reached.  Keeping the
    old row instead (a read of ``arr`` before the update) made XLA copy
    every coefficient array on every stage.
    """
    mc = jnp.clip(m, 0, arr.shape[0] - 1)
    val = jnp.broadcast_to(jnp.asarray(val, dtype=arr.dtype), arr.shape[1:])
    return _update_row(arr, val, mc)



def _update_row_plain(arr, val, i):
    return lax.dynamic_update_index_in_dim(arr, val, i, 0, allow_negative_indices=False)


@jax.custom_batching.custom_vmap
def _update_row_batched(arr, val, i):
    return _update_row_plain(arr, val, i)


@_update_row_batched.def_vmap
def _update_row_rule(axis_size, in_batched, arr, val, i):
    arr_b, val_b, i_b = in_batched
    if i_b:
        # A per-element row (not used by the engine): the general scatter.
        out = jax.vmap(_update_row_plain, in_axes=(0 if arr_b else None, 0 if val_b else None, 0))(arr, val, i)
        return out, True
    if not arr_b:
        arr = jnp.broadcast_to(arr, (axis_size,) + arr.shape)
    if not val_b:
        val = jnp.broadcast_to(val, (axis_size,) + val.shape)
    # The batch axis leads; the row index is shared, so this stays one
    # in-place dynamic_update_slice.
    zero = jnp.zeros((), dtype=jnp.asarray(i).dtype)
    return lax.dynamic_update_slice(arr, val[:, None], (zero, i) + (zero,) * (arr.ndim - 2),
                                    allow_negative_indices=False), True


@jax.custom_jvp
def _update_row(arr, val, i):
    """``arr[i] = val`` (order axis 0) that stays a dynamic_update_slice under vmap.

    JAX batches ``dynamic_update_slice`` as a scatter, which XLA:CPU emits
    as a loop over the whole array after copying it: for a batch of
    pendulums most of a step went into these copies.  With the row index
    shared by the batch (it is the stage's order) the update is one
    in-place ``dynamic_update_slice`` on the batched array instead.  Under
    differentiation the update is the plain one (primal and tangent), so
    forward and reverse mode work as for ``dynamic_update_index_in_dim``.
    """
    return _update_row_batched(arr, val, i)


@_update_row.defjvp
def _update_row_jvp(primals, tangents):
    arr, val, i = primals
    darr, dval, _ = tangents
    # The plain update for the primal as well: JAX's rule for
    # differentiating a custom_vmap function under vmap (vmap of jvp of
    # grad, as in the Hessians of the initialiser) mis-batches.
    out = _update_row_plain(arr, val, i)
    darr = jnp.zeros_like(arr) if type(darr) is jax.custom_derivatives.SymbolicZero else darr
    return out, _update_row_plain(darr, dval, i)




def mul_const(a, b, mc):
    """Coefficient ``mc`` of the product of two operands of which at least one is a :class:`ConstOperand`."""
    if isinstance(a, ConstOperand) and isinstance(b, ConstOperand):
        return jnp.where(mc == 0, a.value * b.value, 0.0 * a.value * b.value)
    if isinstance(a, ConstOperand):
        return a.value * b.coef(mc)
    return a.coef(mc) * b.value


def _align(A, ndim):
    """Insert axes after the order axis so element shapes broadcast like numpy."""
    return A.reshape(A.shape[:1] + (1,) * (ndim - A.ndim) + A.shape[1:]) if A.ndim < ndim else A


def conv(A, B, m, lo, top, weight_a=None):
    """Σ_{r=lo}^{m-top} wa(r) A[r] B[m-r] over the leading (order) axis."""
    nd = max(A.ndim, B.ndim)
    A, B = _align(A, nd), _align(B, nd)
    K = A.shape[0]
    r = jnp.arange(K)
    Bg = jnp.take(B, jnp.clip(m - r, 0, B.shape[0] - 1), axis=0)
    Aw = A if weight_a is None else A * weight_a(r).reshape((K,) + (1,) * (A.ndim - 1))
    A_, B_ = jnp.broadcast_arrays(Aw, Bg)
    mask = ((r >= lo) & (r <= m - top)).reshape((K,) + (1,) * (A_.ndim - 1))
    return order_sum(jnp.where(mask, A_ * B_, 0.0))


def nonlinear_coef(name, e, ops, m, mc, nodes, aux, idx_e, K):
    """Order-m coefficient of a nonlinear elementwise primitive.

    The recurrences come from the ODE each function satisfies (z' = f'(x) x')
    written for normalised coefficients; auxiliaries hold companion series.
    """
    out = e.outvars[0]
    Z = nodes[out]
    mf = mc.astype(jnp.float64)
    safe_m = jnp.maximum(mf, 1.0)
    wr = lambda r: r.astype(jnp.float64)

    def S(op):
        arr = op.series(K)
        return jnp.broadcast_to(_align(arr, Z.ndim), Z.shape)

    def getaux(tag):
        return aux[(idx_e, tag)]

    def setaux(tag, val):
        aux[(idx_e, tag)] = write_row(aux[(idx_e, tag)], m, val)

    if name == "div":
        a, b = ops
        if isinstance(b, ConstOperand):
            return a.coef(mc) / b.value
        A, B = S(a), S(b)
        return (coef_at(A, mc) - conv(B, Z, m, 1, 0)) / B[0]
    if name in ("integer_pow", "square"):
        n = 2 if name == "square" else int(e.params["y"])
        x = ops[0]
        X = S(x)
        if n == 0:
            return jnp.where(mc == 0, 1.0, 0.0) * jnp.ones(Z.shape[1:])
        if n == 1:
            return coef_at(X, mc)
        if n < 0:
            # z = 1 / x^|n|: powers kept as auxiliaries, then a division.
            P = X
            for i in range(2, -n + 1):
                val = conv(P, X, m, 0, 0)
                setaux(f"p{i}", val)
                P = getaux(f"p{i}")
            return (jnp.where(mc == 0, 1.0, 0.0) - conv(P, Z, m, 1, 0)) / P[0]
        if n == 2 and name == "square":
            return conv(X, X, m, 0, 0)
        P = X
        for i in range(2, n):
            setaux(f"p{i}", conv(P, X, m, 0, 0))
            P = getaux(f"p{i}")
        return conv(P, X, m, 0, 0)
    if name in ("sqrt", "rsqrt", "cbrt") or (name == "pow" and isinstance(ops[1], ConstOperand)):
        x = ops[0]
        X = S(x)
        if name == "sqrt":
            z0 = jnp.sqrt(X[0])
            rest = (coef_at(X, mc) - conv(Z, Z, m, 1, 1)) / (2.0 * Z[0])
            return jnp.where(mc == 0, z0, rest)
        a = {"rsqrt": -0.5, "cbrt": 1.0 / 3.0}.get(name)
        if a is None:
            a = ops[1].value
        z0 = X[0] ** a if name != "cbrt" else jnp.cbrt(X[0])
        # z_m = 1/(m x0) Σ_{j=0}^{m-1} (a (m-j) - j) x_{m-j} z_j
        r = jnp.arange(K)
        Xg = jnp.take(X, jnp.clip(mc - r, 0, K - 1), axis=0)
        coef = (a * (mf - wr(r)) - wr(r)).reshape((K,) + (1,) * (Z.ndim - 1))
        mask = (r <= mc - 1).reshape((K,) + (1,) * (Z.ndim - 1))
        s = order_sum(jnp.where(mask, coef * Xg * Z, 0.0))
        return jnp.where(mc == 0, z0, s / (safe_m * X[0]))
    if name == "pow":
        # x ** y with both series: exp(y log x) through auxiliaries.
        x, y = ops
        X, Y = S(x), S(y)
        Lg = getaux("log")
        l0 = jnp.log(X[0])
        lm = (coef_at(X, mc) - conv(Lg, X, m, 1, 1, weight_a=wr) / safe_m) / X[0]
        setaux("log", jnp.where(mc == 0, l0, lm))
        Lg = getaux("log")
        setaux("prod", conv(Y, Lg, m, 0, 0))
        W = getaux("prod")
        return jnp.where(mc == 0, jnp.exp(W[0]), conv(W, Z, m, 1, 0, weight_a=wr) / safe_m)
    if name in ("exp", "exp2", "expm1"):
        X = S(ops[0])
        if name == "exp2":
            X = X * jnp.log(2.0)
        z0 = {"exp": jnp.exp, "exp2": lambda v: jnp.exp(v), "expm1": jnp.expm1}[name](X[0])
        Zp = Z if name != "expm1" else Z.at[0].add(1.0)
        return jnp.where(mc == 0, z0, conv(X, Zp, m, 1, 0, weight_a=wr) / safe_m)
    if name in ("log", "log1p"):
        X = S(ops[0])
        x0 = X[0] + (1.0 if name == "log1p" else 0.0)
        Xp = X.at[0].set(x0)
        z0 = jnp.log(x0)
        rest = (coef_at(X, mc) - conv(Z, Xp, m, 1, 1, weight_a=wr) / safe_m) / x0
        return jnp.where(mc == 0, z0, rest)
    if name in ("sin", "cos", "sinh", "cosh"):
        X = S(ops[0])
        comp = getaux("comp")
        hyper = name in ("sinh", "cosh")
        f0, g0 = {"sin": (jnp.sin, jnp.cos), "cos": (jnp.cos, jnp.sin),
                  "sinh": (jnp.sinh, jnp.cosh), "cosh": (jnp.cosh, jnp.sinh)}[name]
        # d/dt sin = cos x', d/dt cos = -sin x'; hyperbolic: both +.
        sz = 1.0 if (hyper or name == "sin") else -1.0
        sc = 1.0 if (hyper or name == "cos") else -1.0
        zm = jnp.where(mc == 0, f0(X[0]), sz * conv(X, comp, m, 1, 0, weight_a=wr) / safe_m)
        cm = jnp.where(mc == 0, g0(X[0]), sc * conv(X, Z, m, 1, 0, weight_a=wr) / safe_m)
        setaux("comp", cm)
        return zm
    if name in ("tan", "tanh", "logistic"):
        X = S(ops[0])
        U = getaux("comp")  # 1 + z^2, 1 - z^2 or z (1 - z)
        z0 = {"tan": jnp.tan, "tanh": jnp.tanh, "logistic": jax.nn.sigmoid}[name](X[0])
        zm = jnp.where(mc == 0, z0, conv(X, U, m, 1, 0, weight_a=wr) / safe_m)
        Znew = write_row(Z, m, zm)
        zz = conv(Znew, Znew, m, 0, 0)
        if name == "tan":
            um = jnp.where(mc == 0, 1.0, 0.0) + zz
        elif name == "tanh":
            um = jnp.where(mc == 0, 1.0, 0.0) - zz
        else:
            um = coef_at(Znew, mc) - zz
        setaux("comp", um)
        return zm
    if name in ("asin", "acos", "atan", "asinh", "acosh", "atanh", "atan2"):
        # Q z' = sign * (numerator)' with Q = sqrt(1 - x^2) (asin/acos),
        # 1 + x^2 (atan), x^2 + y^2 (atan2) ...: z_m from coefficient m-1.
        if name == "atan2":
            Y, X = S(ops[0]), S(ops[1])
            Qn = conv(X, X, m, 0, 0) + conv(Y, Y, m, 0, 0)
            setaux("q", Qn)
            Q = getaux("q")
            # (x y' - y x')_{m-1} = Σ_{r=0}^{m-1} (m-r) (x_r y_{m-r} - y_r x_{m-r})
            w = lambda r: (mf - wr(r))
            rhs = conv(X, Y, m, 0, 1, weight_a=w) - conv(Y, X, m, 0, 1, weight_a=w)
            z0 = jnp.arctan2(Y[0], X[0])
        else:
            X = S(ops[0])
            xx = conv(X, X, m, 0, 0)
            one = jnp.where(mc == 0, 1.0, 0.0)
            Qold = getaux("q")
            if name in ("asin", "acos", "asinh", "acosh", "atanh"):
                if name == "atanh":
                    qn = one - xx
                else:
                    sgn = {"asin": -1.0, "acos": -1.0, "asinh": 1.0, "acosh": 1.0}[name]
                    base0 = {"asin": 1.0 - X[0] ** 2, "acos": 1.0 - X[0] ** 2,
                             "asinh": 1.0 + X[0] ** 2, "acosh": X[0] ** 2 - 1.0}[name]
                    # Q^2 = 1 -+ x^2 (or x^2 - 1): Q_m from the square root recurrence.
                    target = sgn * xx if name != "acosh" else xx
                    qn = jnp.where(mc == 0, jnp.sqrt(base0),
                                   (target - conv(Qold, Qold, m, 1, 1)) / (2.0 * jnp.where(mc == 0, 1.0, Qold[0])))
            else:  # atan
                qn = one + xx
            setaux("q", qn)
            Q = getaux("q")
            sign = -1.0 if name == "acos" else 1.0
            rhs = sign * mf * coef_at(X, mc)
            z0 = {"asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan, "asinh": jnp.arcsinh,
                  "acosh": jnp.arccosh, "atanh": jnp.arctanh}[name](X[0])
        # Σ_{r=1}^{m-1} Q_r (m - r) z_{m-r}
        corr = conv(Q, Z, m, 1, 1, weight_a=lambda r: (mf - wr(r)))
        return jnp.where(mc == 0, z0, (rhs - corr) / (safe_m * Q[0]))
    if name == "abs":
        X = S(ops[0])
        return jnp.sign(X[0]) * coef_at(X, mc)
    if name in ("max", "min"):
        A, B = S(ops[0]), S(ops[1])
        pick_a = (A[0] >= B[0]) if name == "max" else (A[0] <= B[0])
        return jnp.where(pick_a, coef_at(A, mc), coef_at(B, mc))
    if name == "clamp":
        lo, X, hi = (S(o) for o in ops)
        inside = (X[0] >= lo[0]) & (X[0] <= hi[0])
        return jnp.where(inside, coef_at(X, mc), jnp.where(X[0] < lo[0], coef_at(lo, mc), coef_at(hi, mc)))
    if name in ("reduce_max", "reduce_min"):
        X = S(ops[0])
        axes = tuple(e.params["axes"])
        arg = (jnp.argmax if name == "reduce_max" else jnp.argmin)
        # The extreme element at order 0 carries the series.
        moved = jnp.moveaxis(X, [a + 1 for a in axes], list(range(X.ndim - len(axes), X.ndim)))
        flat = moved.reshape(moved.shape[: X.ndim - len(axes)] + (-1,))
        i0 = arg(flat[0], axis=-1)
        return jnp.take_along_axis(coef_at(flat, mc), i0[..., None], axis=-1)[..., 0]
    raise UnsupportedPrimitiveError(f"the Taylor engine has no rule for the operation '{name}' (used at {e.source})")
