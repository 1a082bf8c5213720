"""Which unknowns, at which derivative order, every value of a jaxpr depends on.

The Σ-method needs σ_ij, the highest derivative order of unknown j in equation
i.  We get it *structurally*: interpret the traced residual (a jaxpr) once,
carrying for every value a sparse integer matrix ``W`` whose rows are the
value's flat elements and whose columns are the flat unknowns, with
``W[r, j] = 1 + (highest order of x_j that element r depends on)`` and no
entry when it does not depend on x_j.  No numeric Jacobian is evaluated, so
a large vectorised residual costs work proportional to the nonzeros.

Every primitive reduces to one operation, :func:`_combine`: output row ``o``
is the entry-wise maximum of some input rows ``i`` over a list of incidence
pairs ``(o, i)``.  The pairs come from

- elementwise ops: ``o == i`` (scalars broadcast);
- data-moving ops (reshape, slice, gather with constant indices, pad, ...):
  the primitive applied to an array of element ids says where every output
  element came from;
- reductions, cumulative ops, dot_general, scatter: index arithmetic on ids
  (dot_general uses the zero pattern of a constant factor, so a constant
  sparse matrix times a vector stays sparse);
- ``ddt``: the orders below it rise by one (``W.data + 1``).

Values that depend on no unknown carry ``None``; values computable from
constants alone (index arrays built by ``jnp`` indexing) are folded to numpy
arrays so that gather/scatter indices are known.  Integer and boolean values
(comparisons, argmax, indices) carry no dependency.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from solver.dae import jaxpr_core
from solver.dae.csr import CSR
from solver.dae.concrete import evaluate
from solver.dae.derivative import ddt_p
from solver.dae.primitives import CALL_JAXPR_PARAM, UnsupportedPrimitiveError, call_body

__all__ = ["UnsupportedPrimitiveError", "dependency_pattern", "jaxpr_dependencies"]


# ----------------------------------------------------------------- primitive sets
# f(x, y, ...) elementwise: output element r depends on element r of every input.
_ELEMENTWISE = frozenset("""
    neg sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh exp exp2 log
    log1p expm1 sqrt rsqrt cbrt abs square integer_pow pow add sub mul div rem max
    min atan2 logistic erf erfc erf_inv lgamma digamma igamma igammac
    bessel_i0e bessel_i1e nextafter copysign conj real imag complex
    convert_element_type reduce_precision clamp add_any stop_gradient
    optimization_barrier polygamma zeta regularized_incomplete_beta
    """.split())
# Piecewise constant in their float argument: zero derivative almost everywhere,
# so they contribute no structural dependency (a residual using only sign(x)
# does not determine x).
_ZERO_DERIVATIVE = frozenset("sign floor ceil round is_finite".split())
# Every output element is one input element (or a padding constant): the
# source of each output element is found by applying the primitive to ids.
_DATA_MOVING = frozenset("""
    reshape broadcast_in_dim slice concatenate transpose squeeze expand_dims rev
    pad gather dynamic_slice dynamic_update_slice copy split stack unstack tile
    """.split())
_REDUCTIONS = frozenset("reduce_sum reduce_max reduce_min reduce_prod".split())
_CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())
_SCATTERS = frozenset("scatter scatter-add scatter_add scatter-mul scatter_mul "
                      "scatter-min scatter_min scatter-max scatter_max".split())
# Dense linear algebra: every float output element conservatively depends on
# every input element (structurally exact for a generic full matrix).
_DENSE = frozenset("lu triangular_solve cholesky qr householder_product eigh svd "
                   "custom_linear_solve sort lu_pivots_to_permutation".split())
# Calls (pjit, custom_jvp_call, ...) are looked through: solver.primitives.


# -------------------------------------------------------------- sparse helpers
def _combine(n_out: int, n_cols: int, sources) -> CSR | None:
    """Entry-wise max of input rows gathered onto output rows.

    Args:
        n_out: number of output rows.
        n_cols: number of unknowns.
        sources: iterable of ``(W, out_rows, in_rows)``: for every k, row
            ``in_rows[k]`` of ``W`` (CSR, or None = no dependency) contributes
            to output row ``out_rows[k]``.

    Returns:
        The output pattern (CSR, sorted, no duplicates), or None if empty.
    """
    rows, cols, vals = [], [], []
    for W, out_rows, in_rows in sources:
        if W is None or W.nnz == 0 or len(in_rows) == 0:
            continue
        in_rows = np.asarray(in_rows, dtype=np.int64)
        out_rows = np.asarray(out_rows, dtype=np.int64)
        indptr = W.indptr.astype(np.int64)
        counts = indptr[in_rows + 1] - indptr[in_rows]
        total = int(counts.sum())
        if total == 0:
            continue
        # Position of every gathered nonzero inside W.indices/W.data.
        run_start = np.repeat(np.cumsum(counts) - counts, counts)
        pos = np.repeat(indptr[in_rows], counts) + (np.arange(total) - run_start)
        rows.append(np.repeat(out_rows, counts))
        cols.append(W.indices[pos].astype(np.int64))
        vals.append(W.data[pos])
    if not rows:
        return None
    rows, cols, vals = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    key = rows * n_cols + cols
    # Sort by (row, col), highest order first, and keep the first of each key.
    order = np.lexsort((-vals.astype(np.int64), key))
    key = key[order]
    keep = np.ones(len(key), bool)
    keep[1:] = key[1:] != key[:-1]
    order = order[keep]
    rows, cols, vals = rows[order], cols[order], vals[order]
    indptr = np.zeros(n_out + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_out), out=indptr[1:])
    return CSR(vals.astype(np.int32), cols.astype(np.int32), indptr, (n_out, n_cols))


def _union_row(deps, n_cols) -> CSR | None:
    """One row: the max over all rows of all given patterns."""
    srcs = [(W, np.zeros(W.shape[0], np.int64), np.arange(W.shape[0])) for W in deps if W is not None]
    return _combine(1, n_cols, srcs)


def _dense(n_out: int, n_cols: int, deps) -> CSR | None:
    """Every output element depends on every element of every input."""
    row = _union_row(deps, n_cols)
    if row is None:
        return None
    return _combine(n_out, n_cols, [(row, np.arange(n_out), np.zeros(n_out, np.int64))])


# ---------------------------------------------------------------- interpreter
def _size(aval) -> int:
    return int(np.prod(getattr(aval, "shape", ()), dtype=np.int64))


def _is_float(aval) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and np.issubdtype(dtype, np.inexact)


class _Interpreter:
    def __init__(self, n_cols: int, ddt_primitive):
        self.n_cols = n_cols
        self.ddt = ddt_primitive

    # Each value: (pattern or None, constant numpy array or None).
    def run(self, jaxpr, consts, in_deps, in_consts):
        env = {}

        def read(v):
            if isinstance(v, jaxpr_core.Literal):
                return None, np.asarray(v.val)
            return env[v]

        for v, c in zip(jaxpr.constvars, consts):
            env[v] = (None, None if c is None else np.asarray(c))
        for v, d, c in zip(jaxpr.invars, in_deps, in_consts):
            env[v] = (d, c)
        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            outs = self.eqn(eqn, [d for d, _ in ins], [c for _, c in ins])
            for v, o in zip(eqn.outvars, outs):
                env[v] = o
        return [read(v) for v in jaxpr.outvars]

    def eqn(self, eqn, deps, consts):
        prim = eqn.primitive
        n_outs = len(eqn.outvars)
        if prim is self.ddt:
            d = deps[0]
            if d is None:
                return [(None, None)]
            return [(d.with_data(d.data + 1), None)]
        if all(d is None for d in deps):
            if all(c is not None for c in consts):
                folded = _fold(eqn, consts)
                if folded is not None:
                    return [(None, c) for c in folded]
            return [(None, None)] * n_outs
        name = prim.name
        if name in CALL_JAXPR_PARAM:  # constants computed inside stay known
            outs = _call(self, eqn, deps, consts)
            return [(d if _is_float(v.aval) else None, c) for v, (d, c) in zip(eqn.outvars, outs)]
        if not any(_is_float(v.aval) for v in eqn.outvars):
            return [(None, None)] * n_outs
        rule = _RULES.get(name)
        if rule is None:
            if name in _ELEMENTWISE:
                rule = _elementwise
            elif name in _ZERO_DERIVATIVE:
                return [(None, None)] * n_outs
            elif name in _DATA_MOVING:
                rule = _data_moving
            elif name in _REDUCTIONS:
                rule = _reduction
            elif name in _CUMULATIVE:
                rule = _cumulative
            elif name in _SCATTERS:
                rule = _scatter
            elif name in _DENSE:
                rule = _dense_rule
            else:
                raise UnsupportedPrimitiveError(
                    f"structural analysis: no rule for the JAX primitive {name!r} "
                    f"(in `{_show(eqn)}`); write the residual with elementwise math, "
                    f"indexing, slicing, sums and dot products, or ask for a rule for {name!r}"
                )
        out_deps = rule(self, eqn, deps, consts)
        return [(None if not _is_float(v.aval) else d, None) for v, d in zip(eqn.outvars, out_deps)]


def _show(eqn) -> str:
    text = str(eqn).strip().splitlines()
    return text[0][:160] if text else eqn.primitive.name


def _fold(eqn, consts):
    """Evaluate an equation whose inputs are all constants (None on failure)."""
    try:
        out = evaluate(eqn.primitive, consts, eqn.primitive.get_bind_params(eqn.params))
    except Exception:  # a constant we cannot evaluate is merely not folded
        return None
    out = out if eqn.primitive.multiple_results else [out]
    return [np.asarray(o) for o in out]


# ---------------------------------------------------------------------- rules
def _elementwise(it, eqn, deps, consts):
    out_aval = eqn.outvars[0].aval
    n_out = _size(out_aval)
    ins = zip(eqn.invars, deps)
    if eqn.primitive.name == "select_n":
        if consts[0] is not None:  # a known predicate picks exact cases
            return _data_moving(it, eqn, deps, consts)
        ins = list(ins)[1:]
    ins = [(v, d) for v, d in ins if d is not None]
    if len(ins) == 1 and tuple(ins[0][0].aval.shape) == tuple(out_aval.shape):
        return [ins[0][1]]
    srcs = []
    for v, d in ins:
        # jaxpr operands broadcast like numpy (scalars, size-1 axes).
        shape = getattr(v.aval, "shape", ())
        try:
            in_rows = np.broadcast_to(np.arange(d.shape[0]).reshape(shape), out_aval.shape).ravel()
        except ValueError:
            raise UnsupportedPrimitiveError(
                f"structural analysis: operand shapes of {eqn.primitive.name!r} do not broadcast "
                f"(in `{_show(eqn)}`)") from None
        srcs.append((d, np.arange(n_out), in_rows))
    return [_combine(n_out, it.n_cols, srcs)]


def _data_moving(it, eqn, deps, consts):
    """Apply the primitive to element ids: each output id names its source."""
    ids, data_deps, offset = [], [], 0
    for v, d, c in zip(eqn.invars, deps, consts):
        if _is_float(v.aval):
            n = _size(v.aval)
            # ids are 1-based so that 0 marks "no source" (padding, fill).
            ids.append(np.arange(offset + 1, offset + n + 1, dtype=np.float64).reshape(v.aval.shape))
            data_deps.append((d, offset, n))
            offset += n
        elif c is not None:
            ids.append(c)
        else:  # an index that depends on time/parameters: any element may be picked
            return [_dense(_size(o.aval), it.n_cols, deps) for o in eqn.outvars]
    outs = evaluate(eqn.primitive, ids, eqn.primitive.get_bind_params(eqn.params))
    outs = outs if eqn.primitive.multiple_results else [outs]
    result = []
    for out in outs:
        src = np.nan_to_num(np.asarray(out, dtype=np.float64).ravel(), nan=0.0).astype(np.int64) - 1
        srcs = []
        for d, first, n in data_deps:
            hit = np.nonzero((src >= first) & (src < first + n))[0]
            srcs.append((d, hit, src[hit] - first))
        result.append(_combine(len(src), it.n_cols, srcs))
    return result


def _reduction(it, eqn, deps, consts):
    in_shape = eqn.invars[0].aval.shape
    axes = tuple(sorted(eqn.params["axes"]))
    out_shape = tuple(s for k, s in enumerate(in_shape) if k not in axes)
    n_out = int(np.prod(out_shape, dtype=np.int64))
    # Every input element lands on the output element its kept indices name.
    target = np.arange(n_out).reshape(out_shape)
    target = np.broadcast_to(np.expand_dims(target, axes), in_shape).ravel()
    return [_combine(n_out, it.n_cols, [(deps[0], target, np.arange(target.size))])]


def _cumulative(it, eqn, deps, consts):
    shape = eqn.invars[0].aval.shape
    axis, reverse = eqn.params["axis"], eqn.params.get("reverse", False)
    n = _size(eqn.invars[0].aval)
    ids = np.moveaxis(np.arange(n).reshape(shape), axis, -1).reshape(-1, shape[axis])
    # Output position b along the axis accumulates inputs a <= b (a >= b reversed).
    b, a = np.tril_indices(shape[axis]) if not reverse else np.triu_indices(shape[axis])
    return [_combine(n, it.n_cols, [(deps[0], ids[:, b].ravel(), ids[:, a].ravel())])]


def _dot_general(it, eqn, deps, consts):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    a_aval, b_aval = eqn.invars[0].aval, eqn.invars[1].aval
    lf = [k for k in range(len(a_aval.shape)) if k not in lc and k not in lb]
    rf = [k for k in range(len(b_aval.shape)) if k not in rc and k not in rb]
    nb = int(np.prod([a_aval.shape[k] for k in lb], dtype=np.int64))
    ni = int(np.prod([a_aval.shape[k] for k in lf], dtype=np.int64))
    nk = int(np.prod([a_aval.shape[k] for k in lc], dtype=np.int64))
    nj = int(np.prod([b_aval.shape[k] for k in rf], dtype=np.int64))

    def arrange(aval, const, batch, first, second):
        perm = list(batch) + list(first) + list(second)
        ids = np.transpose(np.arange(_size(aval)).reshape(aval.shape), perm)
        pattern = (np.ones(aval.shape, bool) if const is None
                   else np.asarray(const) != 0)
        return ids, np.transpose(pattern, perm)

    a_ids, a_pat = arrange(a_aval, consts[0], lb, lf, lc)
    b_ids, b_pat = arrange(b_aval, consts[1], rb, rc, rf)
    a_ids, a_pat = a_ids.reshape(nb, ni, nk), a_pat.reshape(nb, ni, nk)
    b_ids, b_pat = b_ids.reshape(nb, nk, nj), b_pat.reshape(nb, nk, nj)
    srcs = []
    if deps[0] is not None:
        # out[b,i,j] <- A[b,i,k] wherever B[b,k,j] may be nonzero.
        bb, kk, jj = np.nonzero(b_pat)
        i = np.arange(ni)[None, :]
        out = (bb[:, None] * ni + i) * nj + jj[:, None]
        srcs.append((deps[0], out.ravel(), a_ids[bb[:, None], i, kk[:, None]].ravel()))
    if deps[1] is not None:
        bb, ii, kk = np.nonzero(a_pat)
        j = np.arange(nj)[None, :]
        out = (bb[:, None] * ni + ii[:, None]) * nj + j
        srcs.append((deps[1], out.ravel(), b_ids[bb[:, None], kk[:, None], j].ravel()))
    return [_combine(nb * ni * nj, it.n_cols, srcs)]


def _scatter(it, eqn, deps, consts):
    operand, indices, updates = eqn.invars[:3]
    d_op, d_up = deps[0], deps[2]
    n_op = _size(operand.aval)
    if consts[1] is None:
        return [_dense(n_op, it.n_cols, [d_op, d_up])]
    p = eqn.params

    def add(u):
        return lax.scatter_add(jnp.zeros(operand.aval.shape, jnp.float64), consts[1], u,
                               p["dimension_numbers"], indices_are_sorted=p["indices_are_sorted"],
                               unique_indices=p["unique_indices"], mode=p["mode"])

    # The transpose of scatter-add is a gather: it tells each update element
    # the (1-based) id of the operand element it lands on, 0 if dropped.
    (target,) = jax.linear_transpose(add, jax.ShapeDtypeStruct(updates.aval.shape, jnp.float64))(
        jnp.asarray(np.arange(1, n_op + 1, dtype=np.float64).reshape(operand.aval.shape)))
    target = np.asarray(target).ravel().astype(np.int64) - 1
    hit = np.nonzero(target >= 0)[0]
    keep = np.ones(n_op, bool)
    if eqn.primitive.name == "scatter":  # overwritten operand elements are gone
        keep[target[hit]] = False
    kept = np.nonzero(keep)[0]
    return [_combine(n_op, it.n_cols, [(d_op, kept, kept), (d_up, target[hit], hit)])]


def _dense_rule(it, eqn, deps, consts):
    if _contains_ddt(eqn.params, it.ddt):
        raise UnsupportedPrimitiveError(
            f"structural analysis: ddt(...) inside {eqn.primitive.name!r} is not supported "
            f"(in `{_show(eqn)}`)")
    return [_dense(_size(v.aval), it.n_cols, deps) for v in eqn.outvars]


def _call(it, eqn, deps, consts):
    jaxpr, sub_consts = call_body(eqn)
    return it.run(jaxpr, sub_consts, deps, consts)


def _cond(it, eqn, deps, consts):
    branches = eqn.params["branches"]
    if consts[0] is not None:  # a constant index selects one branch
        k = int(np.clip(np.asarray(consts[0]), 0, len(branches) - 1))
        branches = [branches[k]]
    per_branch = [[d for d, _ in it.run(b.jaxpr, b.consts, deps[1:], consts[1:])] for b in branches]
    out = []
    for k, v in enumerate(eqn.outvars):
        n = _size(v.aval)
        out.append(_combine(n, it.n_cols, [(br[k], np.arange(n), np.arange(n)) for br in per_branch]))
    return out


def _loop(it, eqn, deps, consts):
    raise UnsupportedPrimitiveError(
        f"structural analysis: loops ({eqn.primitive.name!r}, from lax.scan/fori_loop/"
        f"while_loop or jnp functions built on them) are not supported in a residual; "
        f"write it with vectorised jnp operations (in `{_show(eqn)}`)")


# select_n: elementwise over its cases (the predicate carries no dependency),
# or data-moving when the predicate is a known constant.
_RULES: dict[str, Callable] = {"dot_general": _dot_general, "cond": _cond, "select_n": _elementwise,
                               "scan": _loop, "while": _loop}


def _contains_ddt(params, ddt_primitive) -> bool:
    def walk(obj):
        if isinstance(obj, jaxpr_core.ClosedJaxpr):
            return walk(obj.jaxpr)
        if isinstance(obj, jaxpr_core.Jaxpr):
            return any(e.primitive is ddt_primitive or walk(e.params) for e in obj.eqns)
        if isinstance(obj, dict):
            return any(walk(v) for v in obj.values())
        if isinstance(obj, (tuple, list)):
            return any(walk(v) for v in obj)
        return False

    return walk(params)


# ----------------------------------------------------------------- public API
def jaxpr_dependencies(closed_jaxpr, in_deps: Sequence, n_cols: int, ddt_primitive=ddt_p,
                       in_consts: Sequence | None = None) -> list:
    """Propagate dependency patterns through a closed jaxpr.

    Args:
        closed_jaxpr: the traced function.
        in_deps: per input, a :class:`~solver.dae.csr.CSR` pattern (rows = the input's flat elements,
            columns = unknowns, data = 1 + derivative order) or None.
        n_cols: number of unknowns (columns).
        ddt_primitive: the primitive standing for d/dt of its operand
            (default :data:`solver.dae.derivative.ddt_p`).
        in_consts: per input, a known numpy value or None.

    Returns:
        Per output, its CSR pattern or None (no dependency).

    Raises:
        UnsupportedPrimitiveError: a primitive with no structural rule.
    """
    in_consts = list(in_consts) if in_consts is not None else [None] * len(in_deps)
    it = _Interpreter(n_cols, ddt_primitive)
    outs = it.run(closed_jaxpr.jaxpr, closed_jaxpr.consts, list(in_deps), in_consts)
    return [d for d, _ in outs]


def dependency_pattern(dae) -> CSR:
    """The (n_eq x n_var) pattern of a DAE: data = 1 + σ_ij, absent = −∞.

    Args:
        dae: a :class:`solver.dae.problem.DAE` (its traced ``jaxpr``, ``input_keys``,
            ``var_index``).

    Returns:
        A :class:`~solver.dae.csr.CSR` with sorted indices; stored entries are ``σ_ij + 1 >= 1``.

    Raises:
        UnsupportedPrimitiveError: the residual uses a primitive with no rule.
    """
    n = dae.n
    in_deps = []
    for key in dae.input_keys:
        if key[0] != "x":
            in_deps.append(None)  # time and parameters: no unknown behind them
            continue
        var, order = dae.var_index[key[1]], key[2]
        m = var.size
        in_deps.append(CSR(np.full(m, order + 1, np.int32), np.arange(var.offset, var.offset + m, dtype=np.int32),
                           np.arange(m + 1, dtype=np.int64), (m, n)))
    outs = jaxpr_dependencies(dae.jaxpr, in_deps, n, ddt_p)
    blocks = [CSR.empty(_size(v.aval), n) if d is None else d
              for v, d in zip(dae.jaxpr.jaxpr.outvars, outs)]
    return CSR.vstack(blocks)
