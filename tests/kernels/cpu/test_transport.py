"""The aggregation multigrid of ``kernels/cpu/transport.py`` against dense matrices and
SciPy: the passes over the rows, aggregates that the network joins, each coarse level
the Galerkin product ``P^T A P`` of the level above (``P`` built here from the
aggregates), the W-cycle a symmetric positive definite preconditioner, and the solve
against ``spsolve``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import spsolve

from catalytic.kernels.cpu import transport as K


def _network(n, rng, density=0.02, ground=0.05):
    """A random resistor network's reduced matrix: a weighted Laplacian plus a
    non-negative diagonal, every component grounded somewhere."""
    a = sp.random_array((n, n), density=density, rng=rng, format="coo")
    w = sp.coo_array((rng.uniform(0.1, 5.0, a.nnz), (a.row, a.col)), shape=(n, n))
    W = (w + w.T).tocsr()
    W.setdiag(0)
    W.eliminate_zeros()
    g = np.where(rng.random(n) < ground, rng.uniform(0.5, 2.0, n), 0.0)
    _, comp = connected_components(W, directed=False)
    first = np.unique(comp, return_index=True)[1]
    g[first] += 1.0  # no component floats
    L = sp.diags_array(np.asarray(W.sum(axis=1)).ravel() + g) - W
    return L.tocsr()


def _lattice_network(shape, rng, p=0.7):
    """A site-diluted square or cubic lattice of random conductances, grounded on its
    first layer: the matrices transport solves."""
    n = int(np.prod(shape))
    idx = np.arange(n).reshape(shape)
    on = rng.random(shape) < p
    rows, cols = [], []
    for a in range(len(shape)):
        lo = [slice(None)] * len(shape)
        hi = [slice(None)] * len(shape)
        lo[a], hi[a] = slice(0, -1), slice(1, None)
        keep = on[tuple(lo)] & on[tuple(hi)]
        rows.append(idx[tuple(lo)][keep])
        cols.append(idx[tuple(hi)][keep])
    r, c = np.concatenate(rows), np.concatenate(cols)
    w = sp.coo_array((rng.uniform(0.2, 3.0, r.size), (r, c)), shape=(n, n))
    W = (w + w.T).tocsr()
    g = np.zeros(n)
    g[idx[0].ravel()] = 1.0
    _, comp = connected_components(W, directed=False)
    grounded = np.zeros(comp.max() + 1, bool)
    grounded[comp[g > 0]] = True
    keep = np.flatnonzero(grounded[comp] & on.ravel())
    L = (sp.diags_array(np.asarray(W.sum(axis=1)).ravel() + g) - W).tocsr()
    return L[keep][:, keep].tocsr()


CASES = [("random", 400), ("lattice", (30, 40)), ("lattice", (12, 10, 9))]


def _matrix(kind, size, seed):
    rng = np.random.default_rng(seed)
    return _network(size, rng) if kind == "random" else _lattice_network(size, rng)


def test_the_passes_are_scipy_s_products():
    A = _matrix("random", 300, 1)
    lv = K.Level(A)
    rng = np.random.default_rng(2)
    x, b = rng.standard_normal((2, A.shape[0]))
    out = np.empty_like(x)
    for rows in (K.PARALLEL_ROWS, 0):  # on one thread, and on many
        K.PARALLEL_ROWS = rows
        try:
            K._sweep(lv.indptr, lv.indices, lv.data, x, b, out, lv.dinv, 0.0, np.int64(0))
            np.testing.assert_allclose(out, A @ x, rtol=1e-13, atol=1e-13)
            K._sweep(lv.indptr, lv.indices, lv.data, x, b, out, lv.dinv, 0.0, np.int64(1))
            np.testing.assert_allclose(out, b - A @ x, rtol=1e-13, atol=1e-13)
            K._sweep(lv.indptr, lv.indices, lv.data, x, b, out, lv.dinv, 0.7, np.int64(2))
            want = x + 0.7 * (b - A @ x) / A.diagonal()
            np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13)
        finally:
            K.PARALLEL_ROWS = 1 << 15


@pytest.mark.parametrize("kind, size", CASES)
def test_aggregates_are_joined_by_the_network_and_levels_are_galerkin_products(kind, size):
    A = _matrix(kind, size, 3)
    h = K.hierarchy(A, coarsest=8)
    assert len(h.levels) > 2
    for fine, coarse in zip(h.levels[:-1], h.levels[1:]):
        n, m = fine.A.shape[0], coarse.A.shape[0]
        assert m < 0.9 * n and np.array_equal(np.unique(fine.agg), np.arange(m))
        # each aggregate is connected through the fine level's couplings
        off = fine.A.copy()
        off.setdiag(0)
        off.eliminate_zeros()
        for a in np.unique(fine.agg)[:: max(1, m // 50)]:
            members = np.flatnonzero(fine.agg == a)
            sub = off[members][:, members]
            assert connected_components(sub, directed=False)[0] == 1, members
        P = sp.csr_array((np.ones(n), (np.arange(n), fine.agg)), shape=(n, m))
        want = (P.T @ fine.A @ P).toarray()
        np.testing.assert_allclose(coarse.A.toarray(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind, size", CASES)
def test_the_w_cycle_is_symmetric_positive_definite(kind, size):
    A = _matrix(kind, size, 4)
    if A.shape[0] > 700:  # the preconditioner as a dense matrix: keep it small
        A = A[:700][:, :700].tocsr()  # a principal block: still positive definite
    h = K.hierarchy(A, coarsest=8)
    n = A.shape[0]
    M = np.column_stack([K._cycle(h, 0, e) for e in np.eye(n)])
    np.testing.assert_allclose(M, M.T, rtol=1e-9, atol=1e-12)
    assert np.linalg.eigvalsh((M + M.T) / 2).min() > 0


@pytest.mark.parametrize("kind, size", CASES)
def test_the_solve_reaches_its_tolerance_and_spsolve_s_answer(kind, size):
    A = _matrix(kind, size, 5)
    rng = np.random.default_rng(6)
    b = rng.standard_normal(A.shape[0])
    h = K.hierarchy(A)
    x, it, res = K.solve(h, b, 1e-11, 500)
    assert res <= 1e-11 and 0 < it < 100
    assert np.linalg.norm(b - A @ x) <= 1e-11 * np.linalg.norm(b) * (1 + 1e-6)
    np.testing.assert_allclose(x, spsolve(A.tocsc(), b), rtol=1e-7, atol=1e-9)
    x, it, res = K.solve(h, b, 1e-11, 2)  # stopped early: says so
    assert it == 2 and res > 1e-11
