"""The numpy CSR pattern that reading a model uses instead of SciPy's, and its connected components.

Each operation against SciPy's own on random patterns: building from
coordinates (duplicates summed, columns sorted), stacking, transposing, the
dense form, and the components of an undirected coupling graph.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

from solver.dae.csr import CSR, connected_components


def random_coo(rng, shape, nnz):
    return (rng.integers(0, shape[0], nnz), rng.integers(0, shape[1], nnz), rng.integers(1, 9, nnz))


@pytest.mark.parametrize("shape, nnz", [((1, 1), 1), ((5, 7), 12), ((40, 30), 300), ((30, 40), 0), ((8, 8), 64)])
def test_from_coordinates_sums_duplicates_and_sorts_like_scipy(shape, nnz):
    rng = np.random.default_rng(nnz)
    rows, cols, data = random_coo(rng, shape, nnz)
    ours = CSR.from_coo(rows, cols, data, shape)
    ref = sp.csr_array((data, (rows, cols)), shape=shape)
    ref.sum_duplicates()
    ref.sort_indices()
    np.testing.assert_array_equal(ours.indptr, ref.indptr)
    np.testing.assert_array_equal(ours.indices, ref.indices)
    np.testing.assert_array_equal(ours.data, ref.data)
    np.testing.assert_array_equal(ours.toarray(), ref.toarray())
    np.testing.assert_array_equal(ours.T.toarray(), ref.toarray().T)
    assert ours.nnz == ref.nnz and ours.shape == shape


def test_stacking_matches_scipy_and_keeps_empty_blocks():
    rng = np.random.default_rng(3)
    blocks = [CSR.from_coo(*random_coo(rng, (4, 6), 9), (4, 6)), CSR.empty(3, 6),
              CSR.from_coo(*random_coo(rng, (2, 6), 5), (2, 6))]
    stacked = CSR.vstack(blocks)
    ref = sp.vstack([b.to_scipy() for b in blocks], format="csr")
    assert stacked.shape == (9, 6)
    np.testing.assert_array_equal(stacked.toarray(), ref.toarray())
    np.testing.assert_array_equal(stacked.indptr, ref.indptr)


def test_bad_arrays_and_widths_are_refused():
    with pytest.raises(ValueError, match=r"CSR arrays do not fit shape \(2, 2\)"):
        CSR(np.ones(2), [0, 1], [0, 1], (2, 2))
    with pytest.raises(ValueError, match="vstack needs blocks of one width, got \\[2, 3\\]"):
        CSR.vstack([CSR.empty(1, 2), CSR.empty(1, 3)])


@pytest.mark.parametrize("n, nnz", [(1, 0), (10, 4), (50, 40), (200, 150), (60, 400)])
def test_connected_components_are_scipys_numbered_by_their_smallest_node(n, nnz):
    rng = np.random.default_rng(n + nnz)
    rows, cols, data = random_coo(rng, (n, n), nnz)
    pattern = CSR.from_coo(rows, cols, data, (n, n))
    count, labels = connected_components(pattern)
    ref_count, ref_labels = csgraph.connected_components(pattern.to_scipy(), directed=False)
    assert count == ref_count
    # The same partition: equal labels exactly where SciPy's are equal.
    np.testing.assert_array_equal(labels[:, None] == labels[None, :], ref_labels[:, None] == ref_labels[None, :])
    firsts = [int(np.flatnonzero(labels == k)[0]) for k in range(count)]
    assert firsts == sorted(firsts)
