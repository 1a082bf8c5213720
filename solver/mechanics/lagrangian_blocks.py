"""The block structure of a Lagrangian DAE's mass matrix, and the KKT solve that uses it.

:func:`solve_kkt` solves ``[[M, Gᵀ], [G, 0]]`` from the diagonal blocks of
M; :class:`LagrangianBlocks` (mixed into
:class:`solver.mechanics.lagrangian.LagrangianDAE`) finds those blocks from
the jaxpr of ∂L/∂q' (or a declaration, checked numerically) and hands the
integrator its KKT structure as data.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

import jax
import jax.numpy as jnp

from solver.dae import jaxpr_core
from solver.dae.csr import CSR, connected_components
from solver.errors import InputError
from solver.mechanics.lagrangian_inputs import f64
from solver.numerics.kkt import KKTBlocks, MassBlocks, kkt_factor, kkt_solve

__all__ = ["LagrangianBlocks", "solve_kkt"]


# ---------------------------------------------------------------- KKT solves
def _normalise_blocks(M_blocks, n_hint: int | None = None):
    """-> list of (index (nb, b) int array or None for contiguous, blocks)."""
    if isinstance(M_blocks, (list, tuple)) and M_blocks and isinstance(M_blocks[0], (list, tuple)):
        groups = [(np.asarray(idx, dtype=np.int64), f64(B)) for idx, B in M_blocks]
    else:
        B = f64(M_blocks)
        if B.ndim == 2:  # a single dense block
            B = B[None]
        groups = [(None, B)]
    for idx, B in groups:
        if B.ndim != 3 or B.shape[1] != B.shape[2]:
            raise InputError(f"solve_kkt: mass blocks must have shape (nb, b, b), got {B.shape}")
        if idx is not None and idx.shape != B.shape[:2]:
            raise InputError(
                f"solve_kkt: block index has shape {idx.shape} but the blocks have shape {B.shape}"
            )
    return groups


def solve_kkt(M_blocks, G, rhs):
    """Solve ``[[M, Gᵀ], [G, 0]] [x; y] = rhs`` with a block-diagonal M.

    Block solves with M and a dense Schur complement ``S = G M⁻¹ Gᵀ`` on the
    n_c constraints: cost O(n b²) + O(n n_c²) + O(n_c³) instead of
    O((n + n_c)³).  Pure ``jax.numpy``: safe under ``jit`` and ``vmap`` (keep
    block indices as static numpy arrays, outside the mapped arguments).

    Args:
        M_blocks: the diagonal blocks of M, either an array (nb, b, b) of
            contiguous blocks (M = blockdiag in flat coordinate order, n =
            nb·b; a single (n, n) matrix is one dense block), or a sequence
            of ``(index, blocks)`` pairs, ``index`` an int array (nb, b) of
            flat coordinate indices and ``blocks`` the (nb, b, b) matrices
            ``M[index[i][:, None], index[i][None, :]]``; the indices of all
            pairs together must partition 0..n−1 (as returned by
            :meth:`LagrangianDAE.mass_matrix_blocks`).
        G: constraint Jacobian (n_c, n), or None / shape (0, n) for none.
        rhs: right-hand side of shape (n + n_c,) or (n + n_c, k): the first n
            rows pair with M, the last n_c with the constraints.

    Returns:
        The solution, same shape as ``rhs`` (x first, then y).

    Raises:
        InputError: inconsistent shapes.
    """
    groups = _normalise_blocks(M_blocks)
    n = sum(int(np.prod(B.shape[:2])) for _, B in groups)
    rhs = f64(rhs)
    nc = 0 if G is None else int(G.shape[0])
    if rhs.shape[0] != n + nc:
        raise InputError(
            f"solve_kkt: rhs has {rhs.shape[0]} rows but M is {n}x{n} with {nc} constraints "
            f"(expected {n + nc})"
        )
    if nc and tuple(G.shape) != (nc, n):
        raise InputError(f"solve_kkt: G has shape {tuple(G.shape)}, expected ({nc}, {n})")
    return kkt_solve(kkt_factor(groups, f64(G) if nc else None), rhs)


def _input_dependence(closed) -> list[set]:
    """For each output of a closed jaxpr, the set of input positions it reads.

    Array-level and conservative: an equation's outputs depend on all of its
    inputs (nested jaxprs included), which can only over-estimate coupling.
    """
    jaxpr = closed.jaxpr
    deps: dict = {}
    for i, v in enumerate(jaxpr.invars):
        deps[v] = {i}
    for v in jaxpr.constvars:
        deps[v] = set()
    for eqn in jaxpr.eqns:
        s: set = set()
        for v in eqn.invars:
            if not isinstance(v, jaxpr_core.Literal):
                s |= deps.get(v, set())
        for o in eqn.outvars:
            deps[o] = s
    return [set() if isinstance(o, jaxpr_core.Literal) else deps.get(o, set()) for o in jaxpr.outvars]


def _components(pattern) -> list[np.ndarray]:
    """The connected components of a coupling pattern (a square :class:`CSR`): sorted index arrays, by first index."""
    count, label = connected_components(pattern)
    order = np.argsort(label, kind="stable")      # the indices of each component together, ascending
    bounds = np.searchsorted(label[order], np.arange(count + 1))
    return sorted((order[bounds[k]:bounds[k + 1]] for k in range(count)), key=lambda rows: rows[0])


def _element_components(closed, coords, n_q: int) -> list[np.ndarray] | None:
    """The flat coordinates that ∂L/∂q' couples, element by element: sorted index arrays; None if unknown.

    Each momentum element's dependence on the flat q' is read from the jaxpr
    by the Σ-method's structural analysis (:func:`solver.dae.sparsity.jaxpr_dependencies`),
    so a mass matrix that is diagonal inside a vector coordinate, or that
    several coordinates computed together as one array leave uncoupled, is
    found so.  None where the jaxpr holds a primitive without an element
    rule.
    """
    from solver.dae.sparsity import UnsupportedPrimitiveError, jaxpr_dependencies

    in_deps = [CSR(np.ones(c.size, np.int32), np.arange(c.offset, c.offset + c.size, dtype=np.int32),
                   np.arange(c.size + 1, dtype=np.int64), (c.size, n_q)) for c in coords]
    try:
        outs = jaxpr_dependencies(closed, in_deps, n_q)
    except UnsupportedPrimitiveError:
        return None
    rows = [CSR.empty(c.size, n_q) if d is None else d for c, d in zip(coords, outs)]
    return _components(CSR.vstack(rows))


def _name_components(closed, coords) -> list[np.ndarray]:
    """The flat coordinates of the named coordinates that ∂L/∂q' couples, by whole arrays (conservative)."""
    pairs = [(i, j) for i, d in enumerate(_input_dependence(closed)) for j in d]
    i, j = (np.array(x, dtype=np.int64) for x in zip(*pairs)) if pairs else (np.zeros(0, np.int64),) * 2
    coupled = CSR.from_coo(i, j, np.ones(len(i)), (len(coords), len(coords)))
    return [np.concatenate([np.arange(coords[m].offset, coords[m].offset + coords[m].size) for m in members])
            for members in _components(coupled)]


# ---------------------------------------------------------------- the mixin
class LagrangianBlocks:
    """The mass-block and KKT methods of :class:`solver.mechanics.lagrangian.LagrangianDAE`.

    A mixin: it uses the DAE's coordinate layout (``coords``, ``n_q``,
    ``n_c``, ``var_index``, ``multiplier``, ``params``), its kernels
    (``_momenta``, ``_constraints_flat``, ``_jit``) and its conversions
    (``_as_dict``, ``_flatten``, ``_unflatten``, ``_params``, ``_zeros_q``),
    and the ``_mass_blocks`` / ``_declared_blocks`` state its constructor sets.
    """

    # ----------------------------------------------------------- mass blocks
    @property
    def mass_blocks(self) -> MassBlocks:
        """Block-diagonal structure of M (:class:`MassBlocks`), found once.

        Coupling between named coordinates is read structurally from the
        jaxpr of ∂L/∂q' (conservative); inside a coordinate the blocks are
        dense unless the builder declared ``mass_blocks={name: b}``.  A
        declaration is checked numerically at a random point (M v against the
        block product for a random v).

        Raises:
            InputError: a declaration contradicts the model's M.
        """
        if self._mass_blocks is None:
            self._mass_blocks = self._find_mass_blocks()
            if self._declared_blocks:
                err = self._check_blocks_random()
                if not err <= 1e-10:
                    decl, self._mass_blocks = self._declared_blocks, None
                    raise InputError(
                        f"mass_blocks={decl!r} does not match the mass matrix ∂²L/∂q'² "
                        f"(relative mismatch {err:.2e} at a random point): M couples "
                        "coordinates across the declared blocks", path="mass_blocks")
        return self._mass_blocks

    def _declared(self) -> dict:
        decl = self._declared_blocks
        if decl is None:
            return {}
        if decl == "diagonal":
            return {c.name: 1 for c in self.coords}
        if not isinstance(decl, Mapping):
            raise InputError("mass_blocks must be None, 'diagonal' or a dict "
                             "{coordinate: block size}", path="mass_blocks")
        out = {}
        for k, b in decl.items():
            if k not in self.var_index or k == self.multiplier:
                raise InputError(f"mass_blocks: unknown coordinate {k!r}; the coordinates are "
                                 f"{[c.name for c in self.coords]}", path="mass_blocks")
            size = self.var_index[k].size
            if not isinstance(b, (int, np.integer)) or b < 1 or size % b:
                raise InputError(f"mass_blocks[{k!r}] = {b!r}: the block size must be a "
                                 f"positive integer dividing the coordinate size {size}",
                                 path="mass_blocks")
            out[k] = int(b)
        return out

    def _find_mass_blocks(self) -> MassBlocks:
        names = [c.name for c in self.coords]
        shapes = [jax.ShapeDtypeStruct(c.shape, jnp.float64) for c in self.coords]
        params = {k: f64(v) for k, v in self.params.items()}

        def mom(*qd_list):
            qd = dict(zip(names, qd_list))
            q = self._zeros_q()
            m = self._momenta(jnp.float64(0.0), q, qd, params)
            return [m[n] for n in names]

        closed = jax.make_jaxpr(mom)(*shapes)
        components = _element_components(closed, self.coords, self.n_q)
        if components is None:      # a primitive without an element rule: couple by names
            components = _name_components(closed, self.coords)
        declared = self._declared()
        # (first flat index, size) of each declared coordinate -> its declared block size
        spans = {(c.offset, c.size): declared[c.name] for c in self.coords if c.name in declared}
        by_size: dict = {}
        used_decl = False
        for rows in components:
            b = spans.get((int(rows[0]), len(rows))) if rows[-1] - rows[0] == len(rows) - 1 else None
            if b is not None:   # a coordinate found dense inside, declared finer by its builder
                blocks = rows.reshape(-1, b)
                used_decl = used_decl or blocks.shape[0] > 1
            else:
                blocks = rows[None, :]
            for r in blocks:
                by_size.setdefault(len(r), []).append(r)
        groups = tuple(np.asarray(by_size[b], dtype=np.int64) for b in sorted(by_size))
        return MassBlocks(self.n_q, groups, "structural+declared" if used_decl else "structural")

    def mass_matrix_blocks(self, t, q, qd, params=None, structure: MassBlocks | None = None):
        """The diagonal blocks of M without forming M: O(n) for block-diagonal M.

        Each group of block size b costs b Hessian-vector products (column k
        of every block at once, since blocks do not couple).

        Args:
            t, q, qd, params: the point (see class doc).
            structure: block structure; default :attr:`mass_blocks`.

        Returns:
            ``[(index, blocks), ...]`` ready for :func:`solve_kkt`.
        """
        args = (f64(t), self._as_dict(q), self._as_dict(qd, "qd"), self._params(params))
        if structure is not None and structure is not self._mass_blocks:
            return self._k_blocks(*args, structure)
        structure = self.mass_blocks
        return self._jit("blocks", lambda *a: self._k_blocks(*a, structure))(*args)

    def kkt_blocks(self) -> KKTBlocks:
        """The system Jacobian ``[[M, Gᵀ], [G, 0]]`` as data, for the structured solve.

        What :class:`solver.integrate.integrator.Integrator` needs for ``linear="kkt"``
        (see :class:`solver.numerics.kkt.KKTBlocks`): the mass-block structure (found
        on first use, :attr:`mass_blocks`), the blocks of M at a point, the
        flat constraints and the coordinate layout.  Cheap: nothing is
        traced until the structure is asked for.
        """
        return KKTBlocks(
            coords=tuple(c.name for c in self.coords), n_q=self.n_q, n_c=self.n_c,
            mass_blocks=lambda t, q, qd, p: self._k_blocks(t, q, qd, p, self.mass_blocks),
            constraints=(lambda t, q, p: self._constraints_flat(t, self._unflatten(q), p)) if self.n_c else None,
            flatten=self._flatten, unflatten=self._unflatten,
            find_mass_structure=lambda: self.mass_blocks)

    def _k_blocks(self, t, q, qd, p, structure):
        qd_flat = self._flatten(qd)

        def Mv(s):
            f = lambda x: self._flatten(self._momenta(t, q, self._unflatten(x), p))
            return jax.jvp(f, (qd_flat,), (s,))[1]

        out = []
        for idx in structure.groups:
            nb, b = idx.shape
            # Seed k has ones at the k-th index of every block: M·seed_k holds
            # column k of all blocks at once (blocks do not couple).
            seeds = np.zeros((b, self.n_q))
            seeds[np.arange(b)[:, None], idx.T] = 1.0
            cols = jax.vmap(Mv)(jnp.asarray(seeds))  # (b, n)
            out.append((idx, jnp.transpose(cols[:, idx], (1, 2, 0))))
        return out

    def _check_blocks_random(self) -> float:
        rng = np.random.default_rng(12345)
        q = rng.uniform(0.2, 1.0, self.n_q)
        qd = rng.uniform(-1.0, 1.0, self.n_q)
        v = rng.standard_normal(self.n_q)
        structure = self._mass_blocks

        @jax.jit  # one compile instead of hundreds of eager dispatches
        def mismatch(q, qd, v, p):
            qd_d, q_d = self._unflatten(qd), self._unflatten(q)
            f = lambda x: self._flatten(self._momenta(jnp.float64(0.3), q_d, self._unflatten(x), p))
            Mv = jax.jvp(f, (qd,), (v,))[1]
            blocks = self._k_blocks(jnp.float64(0.3), q_d, qd_d, p, structure)
            Bv = jnp.zeros(self.n_q)
            for idx, B in blocks:
                Bv = Bv.at[idx].set(jnp.einsum("nij,nj->ni", B, v[idx]))
            return jnp.max(jnp.abs(Mv - Bv)), jnp.max(jnp.abs(Mv))

        err, scale = (float(x) for x in mismatch(f64(q), f64(qd), f64(v), self._params(None)))
        err = err / (scale or 1.0)
        return err if np.isfinite(err) else 0.0  # outside L's domain: no evidence
