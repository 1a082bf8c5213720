"""Σ-method structural analysis: signature matrices, HVT, offsets, index, DOF.

References: Pryce, "A simple structural analysis method for DAEs", BIT 41
(2001); Nedialkov & Pryce, "Solving DAEs by Taylor series (I)", BIT 45 (2005);
docs/method.md §2 (the pendulum's published offsets).  The dependency patterns
Σ is read from (primitive by primitive, against numeric Jacobians) are
specified in tests/test_sparsity.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jax
import jax.numpy as jnp
import scipy.sparse as sp

from solver.dae.problem import DAE, DAEDefinitionError, ddt
from solver.dae import structure, transversal
from solver.dae.structure import (NEG_INF, SparseSignature, StructurallySingularError, analyse,
                              analyse_dae, signature_matrix)

N = NEG_INF


# ----------------------------------------------------------------- pendulums
def pendulum_residual(t, v, p):
    x, y, lam = v["x"], v["y"], v["lam"]
    return [x[2] + lam[0] * x[0], y[2] + lam[0] * y[0] - p["g"], x[0] ** 2 + y[0] ** 2 - p["L"] ** 2]


def pendulum():
    return DAE(pendulum_residual, ["x", "y", "lam"], {"g": 9.81, "L": 1.0})


def test_pendulum_matches_published_offsets():
    """docs/method.md §2 / Pryce 2001: c = (0,0,2), d = (2,2,0), ν = 3, DOF = 2."""
    s = pendulum().structure
    np.testing.assert_array_equal(s.sigma, [[2, N, 0], [N, 2, 0], [0, 0, N]])
    np.testing.assert_array_equal(s.c, [0, 0, 2])
    np.testing.assert_array_equal(s.d, [2, 2, 0])
    assert (s.index, s.dof, s.hvt_value) == (3, 2, 2)
    # The HVT uses only finite entries on which d_j - c_i = σ_ij.
    for i, j in enumerate(s.transversal):
        assert s.d[j] - s.c[i] == s.sigma[i, j]
    # System Jacobian pattern [[1,0,x],[0,1,y],[2x,2y,0]] (docs/method.md §2).
    np.testing.assert_array_equal(s.jacobian_pattern().toarray(),
                                  [[1, 0, 1], [0, 1, 1], [1, 1, 0]])
    assert s.equation_names == ["f0", "f1", "f2"] and s.variable_names == ["x", "y", "lam"]


def test_pendulum_stage_plan():
    """docs/method.md §3: stage k solves f_i, k + c_i >= 0, for X[j, k + d_j]."""
    plan = pendulum().structure.stage_plan()
    assert plan == [
        (-2, [2], [(0, 0), (1, 0)]),
        (-1, [2], [(0, 1), (1, 1)]),
        (0, [0, 1, 2], [(0, 2), (1, 2), (2, 0)]),
    ]


def test_vector_pendulum_equals_scalar_pendulum():
    """q = (x, y) declared as one vector variable gives the same analysis."""
    def residual(t, v, p):
        q, lam = v["q"], v["lam"]
        return [q[2] + lam[0] * q[0] - jnp.array([0.0, p["g"]]), jnp.dot(q[0], q[0]) - p["L"] ** 2]

    vec = DAE(residual, {"q": 2, "lam": 1}, {"g": 9.81, "L": 1.0}).structure
    ref = pendulum().structure
    np.testing.assert_array_equal(vec.sigma, ref.sigma)
    np.testing.assert_array_equal(vec.c, ref.c)
    np.testing.assert_array_equal(vec.d, ref.d)
    assert (vec.index, vec.dof) == (ref.index, ref.dof)
    assert vec.variable_names == ["q[0]", "q[1]", "lam[0]"]
    assert vec.equation_names == ["f0[0]", "f0[1]", "f1"]


def test_double_pendulum_cartesian():
    """Two point masses on rods, Cartesian coordinates with two multipliers.

    Standard index-3 formulation (e.g. Nedialkov & Pryce's examples): the
    four positions have d = 2, the multipliers d = 0, the two length
    constraints c = 2; 4 DOF (two angles and their rates).
    """
    def residual(t, v, p):
        x1, y1, x2, y2 = (v[k][0] for k in ("x1", "y1", "x2", "y2"))
        l1, l2 = v["l1"][0], v["l2"][0]
        return [v["x1"][2] + l1 * x1 - l2 * (x2 - x1),
                v["y1"][2] + l1 * y1 - l2 * (y2 - y1) + p["g"],
                v["x2"][2] + l2 * (x2 - x1),
                v["y2"][2] + l2 * (y2 - y1) + p["g"],
                x1 ** 2 + y1 ** 2 - p["L1"] ** 2,
                (x2 - x1) ** 2 + (y2 - y1) ** 2 - p["L2"] ** 2]

    s = DAE(residual, ["x1", "y1", "x2", "y2", "l1", "l2"], {"g": 9.81, "L1": 1.0, "L2": 0.5}).structure
    np.testing.assert_array_equal(s.c, [0, 0, 0, 0, 2, 2])
    np.testing.assert_array_equal(s.d, [2, 2, 2, 2, 0, 0])
    assert (s.index, s.dof) == (3, 4)


def test_talk_implicit_example_with_ddt():
    """f0 = ((x1' sin t)')² / (1 + x2'²) + t² cos x2, f1 = x1 x2 − t.

    By hand: ddt raises x1' to x1'' so σ00 = 2; x2' and x2 give σ01 = 1;
    f1 has both unknowns undifferentiated: Σ = [[2, 1], [0, 0]].
    Transversals: (0,0)+(1,1) = 2 > (0,1)+(1,0) = 1, so the HVT is the
    diagonal.  Iteration: c = (0,0) → d = (2,1) → c = (2−2, 1−0) = (0,1)
    → d = (max(2, 0+1), max(1, 0+1)) = (2,1), stable.  DOF = 3 − 1 = 2,
    ν = max c = 1 (no d_j = 0).
    """
    def residual(t, v, p):
        x1, x2 = v["x1"], v["x2"]
        return [ddt(x1[1] * jnp.sin(t)) ** 2 / (1 + x2[1] ** 2) + t ** 2 * jnp.cos(x2[0]),
                x1[0] * x2[0] - t]

    s = DAE(residual, ["x1", "x2"]).structure
    np.testing.assert_array_equal(s.sigma, [[2, 1], [0, 0]])
    np.testing.assert_array_equal(s.transversal, [0, 1])
    np.testing.assert_array_equal(s.c, [0, 1])
    np.testing.assert_array_equal(s.d, [2, 1])
    assert (s.index, s.dof) == (1, 2)


def test_nested_ddt_raises_orders_twice():
    """ddt(ddt(x) * y) has x'' and y' (and ddt of a parameter/time term adds nothing)."""
    def residual(t, v, p):
        x, y = v["x"], v["y"]
        return [ddt(ddt(x[0]) * y[0]) + ddt(p["a"] * t), y[0] - x[0]]

    sig = signature_matrix(DAE(residual, ["x", "y"], {"a": 2.0}))
    np.testing.assert_array_equal(sig, [[2, 1], [0, 0]])


@pytest.mark.parametrize("n", [5, 8])
def test_linear_chain_has_index_n(n):
    """x_i' = x_{i+1} (i < n−1), x_0 = sin t: structural index n.

    The only transversal is f_i ↔ x_{i+1}, f_{n−1} ↔ x_0 (x_0 is the only
    unknown of the last equation), all with σ = 0.  Equality on it gives
    d_{i+1} = c_i and d_0 = c_{n−1}; the inequalities d_i ≥ c_i + 1 (from
    σ_ii = 1) and d ≥ 0 are tightest at d_{n−1} = 0, so the smallest offsets
    are d_j = n−1−j, c_i = n−2−i (i < n−1), c_{n−1} = n−1.  Then
    DOF = Σd − Σc = 0 and ν = max c + 1 = n (d_{n−1} = 0).
    """
    names = [f"x{k}" for k in range(n)]

    def residual(t, v, p):
        return [v[names[i]][1] - v[names[i + 1]][0] for i in range(n - 1)] + [v["x0"][0] - jnp.sin(t)]

    s = DAE(residual, names).structure
    np.testing.assert_array_equal(s.d, [n - 1 - j for j in range(n)])
    np.testing.assert_array_equal(s.c, [n - 2 - i for i in range(n - 1)] + [n - 1])
    assert (s.index, s.dof) == (n, 0)


# ------------------------------------------------------------------ singular
def test_structurally_singular_dae_names_the_culprits():
    """f1 and f2 only involve x; y and z only occur in f0."""
    def residual(t, v, p):
        x, y, z = v["x"], v["y"], v["z"]
        return [x[2] + y[0] + z[0], x[0] - jnp.cos(t), x[1] + jnp.sin(x[0])]

    with pytest.raises(StructurallySingularError) as err:
        analyse_dae(DAE(residual, ["x", "y", "z"]))
    assert str(err.value) == (
        "structurally singular DAE: the 2 equations f1, f2 involve only the variable x, "
        "and the 2 variables y, z occur in only the equation f0, so no transversal "
        "(a distinct variable for every equation) exists. Look for a missing, duplicated "
        "or dependent equation.")
    assert isinstance(err.value, ValueError)


def test_structurally_singular_matrix_with_an_empty_row():
    with pytest.raises(StructurallySingularError, match="the equation b involves no variable at all"):
        analyse(np.array([[1, 0], [N, N]]), ["a", "b"], ["u", "v"])


def test_analyse_rejects_bad_matrices():
    with pytest.raises(ValueError, match="square"):
        analyse(np.zeros((2, 3), int))
    with pytest.raises(ValueError, match=r"entry \(0, 1\) is -3"):
        analyse(np.array([[0, -3], [0, 0]]))


# --------------------------------------------------------- property tests
@st.composite
def signature_matrices(draw, max_n=6, max_order=4):
    """Random Σ with a planted finite transversal (so it is not singular)."""
    n = draw(st.integers(1, max_n))
    entries = st.one_of(st.just(N), st.integers(0, max_order))
    sigma = np.array(draw(st.lists(st.lists(entries, min_size=n, max_size=n),
                                   min_size=n, max_size=n)), dtype=np.int64)
    perm = draw(st.permutations(range(n)))
    for i, j in enumerate(perm):
        if sigma[i, j] == N:
            sigma[i, j] = draw(st.integers(0, max_order))
    return sigma


def brute_force_hvt_value(sigma):
    n = len(sigma)
    best = None
    for perm in itertools.permutations(range(n)):
        vals = sigma[np.arange(n), perm]
        if np.all(vals != N):
            best = vals.sum() if best is None else max(best, vals.sum())
    return best


@settings(max_examples=150, deadline=None)
@given(signature_matrices())
def test_offsets_satisfy_pryce_conditions(sigma):
    s = analyse(sigma)
    finite = sigma != N
    gap = s.d[None, :] - s.c[:, None]
    assert np.all(gap[finite] >= sigma[finite])
    rows = np.arange(len(sigma))
    np.testing.assert_array_equal(gap[rows, s.transversal], sigma[rows, s.transversal])
    assert sorted(s.transversal) == list(rows)
    assert s.c.min() == 0 and s.d.min() >= 0
    assert s.hvt_value == brute_force_hvt_value(sigma)
    assert s.dof == s.d.sum() - s.c.sum() == s.hvt_value  # Σd − Σc = val(HVT)
    assert s.index == s.c.max() + (1 if np.any(s.d == 0) else 0)


@settings(max_examples=80, deadline=None)
@given(signature_matrices(max_n=4, max_order=2))
def test_offsets_are_the_smallest(sigma):
    """No valid offsets c' ≤ c other than c itself (valid offsets form a lattice,
    so any valid c' ≱ c would give a valid min(c, c') ≤ c)."""
    s = analyse(sigma)
    rows = np.arange(len(sigma))
    finite = sigma != N
    for c2 in itertools.product(*(range(ci + 1) for ci in s.c)):
        c2 = np.array(c2)
        d2 = np.where(finite, sigma + c2[:, None], N).max(axis=0).clip(min=0)
        valid = np.array_equal(d2[s.transversal] - c2, sigma[rows, s.transversal])
        assert valid == np.array_equal(c2, s.c)


@settings(max_examples=60, deadline=None)
@given(signature_matrices(max_n=6))
def test_every_highest_value_transversal_gives_the_same_offsets(sigma):
    """Canonical offsets do not depend on which HVT is found (Pryce 2001):
    every maximal permutation, found by brute force, gives the analysis's c and d."""
    s = analyse(sigma)
    sparse = SparseSignature.from_dense(sigma)
    n = sigma.shape[0]
    best = brute_force_hvt_value(sigma)
    maximal = [np.array(perm) for perm in itertools.permutations(range(n))
               if np.all(sigma[np.arange(n), perm] > N) and sigma[np.arange(n), perm].sum() == best]
    assert maximal
    for perm in maximal:
        c, d = structure._offsets(sparse, perm)
        np.testing.assert_array_equal(c, s.c)
        np.testing.assert_array_equal(d, s.d)


# ----------------------------------------------------------- large systems
def spring_grid(m, n):
    """Point masses on an m×n grid, linear springs to the 4 neighbours."""
    def residual(t, v, p):
        x = v["x"][0].reshape(m, n, 3)
        acc = v["x"][2].reshape(m, n, 3)

        def tension(d):
            length = jnp.sqrt(jnp.sum(d * d, axis=-1, keepdims=True))
            return p["k"] * (length - p["L"]) * d / length

        fr = tension(x[1:] - x[:-1])
        fc = tension(x[:, 1:] - x[:, :-1])
        force = (jnp.pad(fr, ((0, 1), (0, 0), (0, 0))) - jnp.pad(fr, ((1, 0), (0, 0), (0, 0)))
                 + jnp.pad(fc, ((0, 0), (0, 1), (0, 0))) - jnp.pad(fc, ((0, 0), (1, 0), (0, 0))))
        return [(p["mass"] * (acc - jnp.array([0.0, 0.0, -p["g"]])) - force).ravel()]

    return DAE(residual, {"x": m * n * 3}, {"k": 100.0, "L": 0.1, "g": 9.81, "mass": 0.01})


def test_spring_grid_signature_is_exact():
    m = n = 30
    dae = spring_grid(m, n)
    s = analyse_dae(dae)
    # Reference by loops: particle (a, b) couples to itself and its grid
    # neighbours, all three coordinates at order 0; its own coordinate at 2.
    rows, cols, orders = [], [], []
    for a in range(m):
        for b in range(n):
            near = [(a, b)] + [(a + da, b + db) for da, db in ((1, 0), (-1, 0), (0, 1), (0, -1))
                               if 0 <= a + da < m and 0 <= b + db < n]
            for k in range(3):
                i = (a * n + b) * 3 + k
                for a2, b2 in near:
                    for k2 in range(3):
                        j = (a2 * n + b2) * 3 + k2
                        rows.append(i), cols.append(j), orders.append(2 if i == j else 0)
    ref = sp.csr_array((np.array(orders) + 1, (rows, cols)), shape=(dae.n, dae.n))
    got = sp.csr_array((s.signature.orders + 1, (s.signature.rows, s.signature.cols)), shape=(dae.n, dae.n))
    assert (ref != got).nnz == 0
    assert np.all(s.c == 0) and np.all(s.d == 2)
    assert (s.index, s.dof) == (0, 2 * dae.n)


def test_cloth_scale_grid_is_analysed_sparse():
    """90×90×3 = 24,300 unknowns: every particle couples to itself and its
    grid neighbours (3×3 coordinates each), so Σ has 9·(mn + 2·#springs)
    finite entries, kept sparse throughout."""
    m = n = 90
    dae = spring_grid(m, n)
    s = analyse_dae(dae)
    springs = m * (n - 1) + n * (m - 1)
    assert len(s.signature.orders) == 9 * (m * n + 2 * springs)
    assert np.all(s.signature.value(np.arange(dae.n), np.arange(dae.n)) == 2)
    assert np.all(s.c == 0) and np.all(s.d == 2) and s.dof == 2 * dae.n


def test_sparse_signature_validates_and_sorts():
    s = SparseSignature((2, 2), [1, 0], [0, 1], [3, 0])
    np.testing.assert_array_equal(s.todense(), [[N, 0], [3, N]])
    np.testing.assert_array_equal(s.value([0, 1, 1], [1, 0, 1]), [0, 3, N])
    with pytest.raises(ValueError, match="given twice"):
        SparseSignature((2, 2), [0, 0], [1, 1], [0, 2])
    with pytest.raises(ValueError, match="outside the shape"):
        SparseSignature((2, 2), [2], [0], [0])


def test_str_shows_table_offsets_index_and_dof():
    text = str(pendulum().structure)
    lines = text.splitlines()
    assert any(line.split()[:2] == ["2", "f2"] and "0*" in line for line in lines)  # c=2 row, HVT mark
    assert "d=2" in text and "d=0" in text
    assert "structural index 3, DOF 2" in text
    big = str(analyse(np.diag(np.full(50, 1))))
    assert "table omitted" in big and "structural index 0, DOF 50" in big


# ------------------------------------------------------------------ tracing
@pytest.mark.parametrize("k", [0, 1, 2, 3, 5])
def test_a_residual_is_traced_over_exactly_the_derivatives_it_reads(k):
    # One trace serves a residual within the first trace's orders (2); above
    # them it is traced again with its own.  Either way the jaxpr takes t, the
    # parameters and each variable's derivatives up to the highest it reads,
    # and computes the residual.
    def residual(t, v, p):
        return [v["x"][k] + p["a"] * v["y"][0] * jnp.sin(v["x"][0]) - t, v["y"][1] - p["a"] * v["x"][0]]

    dae = DAE(residual, ["x", "y"], {"a": 2.0})
    assert dae.orders == {"x": k, "y": 1}
    assert dae.input_keys == ([("t",), ("p", "a")] + [("x", "x", l) for l in range(k + 1)]
                              + [("x", "y", 0), ("x", "y", 1)])
    args = [0.3, 2.0] + [0.1 * (l + 1) for l in range(k + 1)] + [0.7, -0.4]
    out = jax.core.eval_jaxpr(dae.jaxpr.jaxpr, dae.jaxpr.consts, *args)
    x = args[2:3 + k]
    expected = [x[k] + 2.0 * 0.7 * np.sin(x[0]) - 0.3, -0.4 - 2.0 * x[0]]
    np.testing.assert_allclose(np.concatenate([np.ravel(o) for o in out]), expected, rtol=1e-15)


def test_a_variable_no_equation_reads_is_refused_above_the_first_traces_orders_too():
    with pytest.raises(DAEDefinitionError, match=r"variables \['z'\] do not appear in any equation"):
        DAE(lambda t, v, p: [v["x"][4] + v["y"][0], v["y"][0] - 1.0, v["x"][0]], ["x", "y", "z"])


# ------------------------------------------- the transversal: numpy below the limit, SciPy above
@st.composite
def any_signatures(draw, max_n=40, max_order=5):
    """Random sparse Σ, singular or not: each entry finite with a drawn density."""
    n = draw(st.integers(1, max_n))
    density = draw(st.sampled_from([0.05, 0.1, 0.3, 0.7]))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    rng = np.random.default_rng(seed)
    sigma = np.where(rng.random((n, n)) < density, rng.integers(0, max_order + 1, (n, n)), N)
    if draw(st.booleans()):      # plant a transversal: not singular
        perm = rng.permutation(n)
        sigma[np.arange(n), perm] = np.maximum(sigma[np.arange(n), perm], rng.integers(0, max_order + 1, n))
    return sigma


@settings(max_examples=120, deadline=None)
@given(any_signatures())
def test_the_dense_and_the_sparse_transversal_agree(sigma):
    """The numpy Hungarian method (small models) against SciPy's Hopcroft-Karp and LAPJVsp (large ones):
    the same verdict, a maximum matching of the same size on finite entries, the same HVT value."""
    from scipy.sparse.csgraph import maximum_bipartite_matching

    s = SparseSignature.from_dense(sigma)
    n = len(sigma)
    dense, perfect_dense = transversal._dense(n, s.rows, s.cols, s.orders)
    sparse, perfect_sparse = transversal._sparse(s.shape, s.rows, s.cols, s.orders)
    assert perfect_dense == perfect_sparse
    pattern = sp.csr_array((np.ones(len(s.rows), np.int8), (s.rows, s.cols)), shape=s.shape)
    most = int(np.sum(maximum_bipartite_matching(pattern, perm_type="column") >= 0))
    for match in (dense, sparse):
        used = match[match >= 0]
        assert len(used) == len(set(used.tolist())) == most
        assert np.all(sigma[np.nonzero(match >= 0)[0], used] != N)
    if perfect_dense:
        rows = np.arange(n)
        assert sigma[rows, dense].sum() == sigma[rows, sparse].sum()
    else:
        names = [f"f{i}" for i in range(n)], [f"x{j}" for j in range(n)]
        assert structure._singular_message(s, dense, *names) == structure._singular_message(s, sparse, *names)


def test_analyse_gives_the_same_structure_on_either_side_of_the_dense_limit(monkeypatch):
    """A 150 x 150 random Σ with a planted transversal: SciPy's path (above the limit) and numpy's (the limit
    raised past it) give the same offsets, index and DOF."""
    rng = np.random.default_rng(7)
    n = 150
    sigma = np.where(rng.random((n, n)) < 0.04, rng.integers(0, 4, (n, n)), N)
    sigma[np.arange(n), rng.permutation(n)] = rng.integers(0, 4, n)
    assert n > transversal.DENSE_LIMIT
    above = analyse(sigma)
    monkeypatch.setattr(transversal, "DENSE_LIMIT", n)
    below = analyse(sigma)
    np.testing.assert_array_equal(above.c, below.c)
    np.testing.assert_array_equal(above.d, below.d)
    assert (above.index, above.dof, above.hvt_value) == (below.index, below.dof, below.hvt_value)


def test_reading_a_model_does_not_import_scipys_sparse_package():
    """SciPy's sparse package costs a fifth of a second to import: reading a model (its trace, Σ, offsets,
    mass blocks) must not need it.  In a fresh process, as every command and sweep worker starts."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import sys, solver\n"
            "for name in ('rscr', 'pendulum', 'free_body', 'car'):\n"
            "    solver.load(f'configs/mechanisms/{name}.yaml')\n"
            "print(sorted(m for m in sys.modules if m.startswith('scipy.sparse')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
