"""Pryce's Σ-method: signature matrix, HVT, offsets, index, DOF, stage plan.

Host-side numpy.  The signature matrix Σ (σ_ij = highest derivative order of
unknown j in equation i, ``NEG_INF`` where it does not occur) is found
structurally from the traced residual (:mod:`solver.dae.sparsity`).  A highest
value transversal (HVT) is a linear assignment; the canonical offsets c, d
come from Pryce's fixed-point iteration (Pryce, BIT 41, 2001; Nedialkov &
Pryce, BIT 2005).  See docs/method.md §2.

Large systems stay sparse: Σ is kept as its finite entries
(:class:`SparseSignature`); the dense matrix is built only on request.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from solver.dae.csr import CSR
from solver.dae.sparsity import dependency_pattern
from solver.dae.transversal import transversal

__all__ = ["NEG_INF", "StructurallySingularError", "SparseSignature", "Structure",
           "signature", "signature_matrix", "analyse", "analyse_dae"]

# σ_ij for "x_j does not occur in f_i" (−∞ in the papers).
NEG_INF = -(10 ** 9)
# __str__ prints the full Σ table up to this many unknowns.
TABLE_LIMIT = 40


class StructurallySingularError(ValueError):
    """No transversal of finite entries: the DAE is structurally singular."""


# ------------------------------------------------------------------ Σ storage
@dataclasses.dataclass(frozen=True)
class SparseSignature:
    """The finite entries of a signature matrix.

    Attributes:
        shape: (number of equations, number of unknowns).
        rows, cols, orders: int64 arrays, one element per finite σ_ij,
            sorted by (row, col); every order is >= 0.
    """

    shape: tuple
    rows: np.ndarray
    cols: np.ndarray
    orders: np.ndarray

    def __post_init__(self):
        rows, cols, orders = (np.asarray(a, np.int64).ravel() for a in (self.rows, self.cols, self.orders))
        if not len(rows) == len(cols) == len(orders):
            raise ValueError("SparseSignature: rows, cols and orders must have the same length")
        if np.any(orders < 0):
            raise ValueError("SparseSignature: orders must be >= 0 (absent entries are not stored)")
        n_eq, n_var = (int(k) for k in self.shape)
        if len(rows) and (rows.min() < 0 or rows.max() >= n_eq or cols.min() < 0 or cols.max() >= n_var):
            raise ValueError(f"SparseSignature: an index lies outside the shape {(n_eq, n_var)}")
        # Row-major order lets value() search; duplicates would be ambiguous.
        order = np.lexsort((cols, rows))
        rows, cols, orders = rows[order], cols[order], orders[order]
        if np.any((rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])):
            raise ValueError("SparseSignature: an entry (i, j) is given twice")
        for name, val in (("shape", (n_eq, n_var)), ("rows", rows), ("cols", cols), ("orders", orders)):
            object.__setattr__(self, name, val)

    @classmethod
    def from_dense(cls, sigma) -> "SparseSignature":
        """From a dense matrix with ``NEG_INF`` for absent entries.

        Raises:
            ValueError: not a 2-D integer matrix, or an entry that is neither
                ``NEG_INF`` nor >= 0.
        """
        a = np.asarray(sigma)
        if a.ndim != 2:
            raise ValueError(f"a signature matrix must be 2-D, got shape {a.shape}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
                raise ValueError("signature matrix entries must be integers (NEG_INF for absent)")
        a = a.astype(np.int64)
        bad = (a < 0) & (a != NEG_INF)
        if np.any(bad):
            i, j = np.argwhere(bad)[0]
            raise ValueError(f"signature matrix entry ({i}, {j}) is {a[i, j]}; entries are "
                             f"derivative orders >= 0 or NEG_INF ({NEG_INF}) for 'absent'")
        rows, cols = np.nonzero(a != NEG_INF)
        return cls(a.shape, rows.astype(np.int64), cols.astype(np.int64), a[rows, cols])

    @classmethod
    def from_pattern(cls, pattern: CSR) -> "SparseSignature":
        """From a sparse pattern whose stored entries are ``σ_ij + 1 >= 1`` (one per position)."""
        rows, cols = pattern.rows(), pattern.indices.astype(np.int64)
        order = np.lexsort((cols, rows))
        return cls(pattern.shape, rows[order], cols[order], pattern.data[order].astype(np.int64) - 1)

    def todense(self) -> np.ndarray:
        """The dense n_eq x n_var int64 matrix with ``NEG_INF`` for absent entries."""
        a = np.full(self.shape, NEG_INF, dtype=np.int64)
        a[self.rows, self.cols] = self.orders
        return a

    def value(self, i, j) -> np.ndarray:
        """σ_ij for index arrays i, j (``NEG_INF`` where absent)."""
        i, j = np.broadcast_arrays(np.asarray(i, np.int64), np.asarray(j, np.int64))
        key = self.rows * self.shape[1] + self.cols
        want = i * self.shape[1] + j
        pos = np.minimum(np.searchsorted(key, want), max(len(key) - 1, 0))
        found = key[pos] == want if len(key) else np.zeros(want.shape, bool)
        return np.where(found, self.orders[pos] if len(key) else 0, NEG_INF)


# ---------------------------------------------------------------- from a DAE
def signature(dae) -> SparseSignature:
    """Σ of a DAE, found structurally from its traced residual, kept sparse.

    Args:
        dae: a :class:`solver.dae.problem.DAE`.

    Returns:
        The finite entries of Σ (n_eq x n_var, element level for vectors).

    Raises:
        solver.dae.primitives.UnsupportedPrimitiveError: the residual uses a JAX
            primitive the analysis has no rule for.
    """
    return SparseSignature.from_pattern(dependency_pattern(dae))


def signature_matrix(dae) -> np.ndarray:
    """Σ of a DAE as a dense n_eq x n_var int64 array (``NEG_INF`` = absent).

    Args:
        dae: a :class:`solver.dae.problem.DAE`.

    Returns:
        The signature matrix.  For very large systems prefer
        :func:`signature` (memory proportional to the nonzeros).

    Raises:
        solver.dae.primitives.UnsupportedPrimitiveError: as :func:`signature`.
    """
    return signature(dae).todense()


# ------------------------------------------------------------------ analysis
@dataclasses.dataclass(frozen=True, eq=False)
class Structure:
    """Result of the Σ-method.

    Attributes:
        signature: the finite entries of Σ (:class:`SparseSignature`).
        c: equation offsets (int64, length n), canonical (smallest, min 0).
        d: variable offsets, d_j − c_i >= σ_ij with equality on the HVT.
        transversal: ``transversal[i]`` = the unknown matched to equation i.
        index: structural index ν = max c + (1 if some d_j = 0).
        dof: degrees of freedom Σd − Σc.
        equation_names, variable_names: labels for messages and tables.

    ``sigma`` is the dense Σ (built on first access; n² memory).
    """

    signature: SparseSignature
    c: np.ndarray
    d: np.ndarray
    transversal: np.ndarray
    index: int
    dof: int
    equation_names: list
    variable_names: list

    @functools.cached_property
    def sigma(self) -> np.ndarray:
        """Dense Σ, int64, ``NEG_INF`` for absent entries."""
        return self.signature.todense()

    @property
    def n(self) -> int:
        return len(self.c)

    @property
    def hvt_value(self) -> int:
        """Σ_i σ_{i, transversal[i]}, the value of the HVT."""
        return int(self.signature.value(np.arange(self.n), self.transversal).sum())

    def jacobian_pattern(self) -> CSR:
        """Where the system Jacobian may be nonzero: σ_ij = d_j − c_i.

        Returns:
            Boolean :class:`~solver.dae.csr.CSR` (n x n); J_ij = ∂f_i/∂x_j^(d_j − c_i) at these entries.
        """
        s = self.signature
        tight = s.orders == self.d[s.cols] - self.c[s.rows]
        return CSR.from_coo(s.rows[tight], s.cols[tight], np.ones(int(tight.sum()), bool), s.shape)

    def stage_plan(self) -> list:
        """The stages k = −max d … 0 of the Taylor solution.

        Returns:
            A list of ``(k, equations, unknowns)``: ``equations`` the indices i
            with k + c_i >= 0 (coefficient k + c_i of f_i is solved), and
            ``unknowns`` the pairs (j, k + d_j) with k + d_j >= 0 (Taylor
            coefficient X[j, k + d_j] is solved for).
        """
        plan = []
        for k in range(-int(self.d.max()), 1):
            eqs = [int(i) for i in np.nonzero(k + self.c >= 0)[0]]
            unk = [(int(j), int(k + self.d[j])) for j in np.nonzero(k + self.d >= 0)[0]]
            plan.append((k, eqs, unk))
        return plan

    def __str__(self) -> str:
        n = self.n
        head = f"Σ-method structural analysis: {n} equations, {n} unknowns"
        tail = f"structural index {self.index}, DOF {self.dof}, HVT value {self.hvt_value}"
        if n > TABLE_LIMIT:
            c_counts = ", ".join(f"{k}: {v}" for k, v in zip(*np.unique(self.c, return_counts=True)))
            d_counts = ", ".join(f"{k}: {v}" for k, v in zip(*np.unique(self.d, return_counts=True)))
            return (f"{head}\n{len(self.signature.orders)} finite entries in Σ (table omitted)\n"
                    f"equations per c: {{{c_counts}}}\nunknowns per d: {{{d_counts}}}\n{tail}")
        sig = self.sigma
        ename = max(len(e) for e in self.equation_names)
        cw = max(3, len(str(int(self.c.max()))) + 1)
        width = max(4, max(len(v) for v in self.variable_names) + 1,
                    len(str(int(sig.max(initial=0)))) + 2)
        lead = " " * cw + " " * ename + " "
        lines = [head, "",
                 lead + "".join(f"{v:>{width}}" for v in self.variable_names),
                 f"{'c':>{cw - 1}} {'':{ename}} " + "".join(f"{'d=' + str(x):>{width}}" for x in self.d)]
        for i in range(n):
            cells = []
            for j in range(n):
                s = "." if sig[i, j] == NEG_INF else str(int(sig[i, j]))
                s += "*" if self.transversal[i] == j else " "
                cells.append(f"{s:>{width}}")
            lines.append(f"{int(self.c[i]):>{cw - 1}} {self.equation_names[i]:<{ename}} " + "".join(cells))
        lines += ["", "(* = highest value transversal, . = does not occur)", tail]
        return "\n".join(lines)


def _alternating_reach(start, indptr, indices, partner):
    """Vertices reachable from unmatched ``start`` vertices by alternating paths.

    Args:
        start: unmatched vertices on side A.
        indptr, indices: CSR adjacency from side A to side B.
        partner: for every B vertex, its matched A vertex (-1 if none).

    Returns:
        (sorted A vertices, sorted B vertices) reached.
    """
    a_seen, b_seen, frontier = set(start), set(), list(start)
    while frontier:
        a = frontier.pop()
        for b in indices[indptr[a]:indptr[a + 1]].tolist():
            if b not in b_seen:
                b_seen.add(b)
                nxt = int(partner[b])
                if nxt >= 0 and nxt not in a_seen:
                    a_seen.add(nxt)
                    frontier.append(nxt)
    return sorted(a_seen), sorted(b_seen)


def _singular_message(s: SparseSignature, match: np.ndarray, enames, vnames) -> str:
    """Name the Hall-violating sets of a structurally singular Σ.

    With a maximum matching, the equations reachable by alternating paths
    from the unmatched equations involve fewer variables than their number
    (and dually for variables).  These sets are the same for every maximum
    matching (Dulmage-Mendelsohn), so the message is deterministic.
    """
    pattern = CSR.from_coo(s.rows, s.cols, np.ones(len(s.rows), np.int8), s.shape)
    by_col = pattern.T
    matched = match >= 0
    row_of_col = np.full(s.shape[1], -1, np.int64)
    row_of_col[match[matched]] = np.nonzero(matched)[0]
    eqs, eq_vars = _alternating_reach(np.nonzero(~matched)[0].tolist(), pattern.indptr,
                                      pattern.indices, row_of_col)
    free_vars = np.nonzero(row_of_col < 0)[0].tolist()
    vars_, var_eqs = _alternating_reach(free_vars, by_col.indptr, by_col.indices, match)

    def listing(items, labels, noun):
        shown = ", ".join(labels[k] for k in items[:20]) + (", …" if len(items) > 20 else "")
        if len(items) == 1:
            return f"the {noun} {shown}"
        return f"the {len(items)} {noun}s {shown}"

    def only(items, labels, noun):
        return f"only {listing(items, labels, noun)}" if items else f"no {noun} at all"

    involve = "involves" if len(eqs) == 1 else "involve"
    occur = "occurs" if len(vars_) == 1 else "occur"
    return (f"structurally singular DAE: {listing(eqs, enames, 'equation')} {involve} "
            f"{only(eq_vars, vnames, 'variable')}, and {listing(vars_, vnames, 'variable')} "
            f"{occur} in {only(var_eqs, enames, 'equation')}, so no transversal (a distinct "
            f"variable for every equation) exists. Look for a missing, duplicated or "
            f"dependent equation.")


def _offsets(s: SparseSignature, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pryce's fixed-point iteration for the smallest offsets."""
    n = s.shape[0]
    sig_hvt = s.value(np.arange(n), perm)
    c = np.zeros(n, np.int64)
    d = None
    # Each sweep either stops or raises some d_j, and the d_j are bounded when
    # the transversal is an HVT (Pryce 2001): the cap only guards against bugs.
    for _ in range(10 + n * n * (int(s.orders.max(initial=0)) + 1)):
        new_d = np.zeros(s.shape[1], np.int64)
        np.maximum.at(new_d, s.cols, s.orders + c[s.rows])
        if d is not None and np.array_equal(new_d, d):
            return c, d
        d = new_d
        c = d[perm] - sig_hvt
    raise RuntimeError("Pryce's offset iteration did not converge (is the transversal an HVT?)")


def analyse(sigma, equation_names=None, variable_names=None) -> Structure:
    """Σ-method analysis of a signature matrix.

    Args:
        sigma: a square signature matrix, dense (``NEG_INF`` for absent
            entries) or a :class:`SparseSignature`.
        equation_names, variable_names: labels (default ``f0``…, ``x0``…).

    Returns:
        A :class:`Structure` with the HVT, canonical offsets, index and DOF.

    Raises:
        ValueError: sigma is not square or has invalid entries.
        StructurallySingularError: no transversal of finite entries; the
            message names equations that involve too few variables.
    """
    s = sigma if isinstance(sigma, SparseSignature) else SparseSignature.from_dense(sigma)
    n_eq, n_var = s.shape
    if n_eq != n_var:
        raise ValueError(f"the signature matrix must be square, got {n_eq} equations and {n_var} unknowns")
    if n_eq == 0:
        raise ValueError("the signature matrix is empty")
    enames = list(equation_names) if equation_names is not None else [f"f{i}" for i in range(n_eq)]
    vnames = list(variable_names) if variable_names is not None else [f"x{j}" for j in range(n_var)]
    if len(enames) != n_eq or len(vnames) != n_var:
        raise ValueError(f"got {len(enames)} equation and {len(vnames)} variable names for a "
                         f"{n_eq} x {n_var} signature matrix")
    perm, perfect = transversal(s.shape, s.rows, s.cols, s.orders)
    if not perfect:
        raise StructurallySingularError(_singular_message(s, perm, enames, vnames))
    c, d = _offsets(s, perm)
    index = int(c.max()) + (1 if np.any(d == 0) else 0)
    dof = int(d.sum() - c.sum())
    return Structure(s, c, d, perm, index, dof, enames, vnames)


def analyse_dae(dae) -> Structure:
    """Σ-method analysis of a :class:`solver.dae.problem.DAE` (what ``dae.structure`` returns).

    Raises:
        StructurallySingularError: as :func:`analyse`, naming the DAE's
            equations (``f0``, ``f1[2]``…) and components (``x``, ``q[1]``…).
        solver.dae.primitives.UnsupportedPrimitiveError: as :func:`signature`.
    """
    return analyse(signature(dae), dae.equation_names(), dae.component_names())
