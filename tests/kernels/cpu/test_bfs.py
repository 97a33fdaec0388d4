"""Breadth-first search (``kernels/cpu/bfs.py``): distance fields and closeness against
SciPy's csgraph and NetworkX on the shared small lattices, and the parallel frontier
rounds, on one thread and on all of Numba's threads.
"""

from __future__ import annotations

import math

import networkx as nx
import numba
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

from catalytic.kernels.cpu import _padded, bfs, catalytic_path, dijkstra, paths
from tests.support.graph_cases import (
    ASYM,
    CASES,
    Case,
    asym_ids,
    bfs_oracle,
    draw_sources,
    ids,
    walk_oracle,
)
from tests.support.oracles import von_neumann

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- BFS -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_bfs_distance_matches_scipy(case):
    for k in (1, 3):
        src = draw_sources(case, k)
        got = bfs.bfs_distance(*case.args, src)
        assert got.dtype == np.int64 and got.shape == (case.n,)
        np.testing.assert_array_equal(got, bfs_oracle(case, src))


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_bfs_dedupe_flag_does_not_change_distances(case):
    src = draw_sources(case, 2)
    a = bfs.bfs_distance(*case.args[:4], False, src)
    b = bfs.bfs_distance(*case.args[:4], True, src)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("par_min", [1, 16])
def test_bfs_parallel_frontiers(monkeypatch, par_min, threads):
    """Levels expanded by all threads (tiny chunks: many rounds per level)."""
    if threads == "one-thread":
        pytest.skip("needs the parallel paths")
    monkeypatch.setattr(bfs, "_PAR_MIN", par_min)
    monkeypatch.setattr(bfs, "_PAR_CHUNK", 7)
    for case in (CASES[14], CASES[15], CASES[21]):
        src = draw_sources(case, 2)
        np.testing.assert_array_equal(bfs.bfs_distance(*case.args, src), bfs_oracle(case, src))


@pytest.mark.parametrize("par_min", [1, 16])
def test_hop_path_on_parallel_frontiers(monkeypatch, par_min, threads):
    """The hop search of shortest_path runs the frontier BFS and ends after the level
    that reaches the end: the same path as on one thread with whole levels, and as long
    as the oracle distance."""
    if threads == "one-thread":
        pytest.skip("needs the parallel paths")
    for case in (CASES[14], CASES[15], CASES[21]):
        start, end = draw_sources(case, 2)
        want = bfs_oracle(case, [start])[end]
        numba.set_num_threads(1)
        serial = paths.shortest_path(*case.args, start, end)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        monkeypatch.setattr(bfs, "_PAR_MIN", par_min)
        monkeypatch.setattr(bfs, "_PAR_CHUNK", 7)
        got = paths.shortest_path(*case.args, start, end)
        monkeypatch.undo()
        np.testing.assert_array_equal(got, serial)
        assert len(got) - 1 == want if want >= 0 else len(got) == 0


def test_bfs_larger_lattices_against_scipy():
    rng = np.random.default_rng(7)
    for shape, per in [((40, 30, 25), (0, 0, 0)), ((40, 30, 25), (1, 0, 1)), ((97, 101), (1, 1))]:
        d = len(shape)
        n = math.prod(shape)
        mask = rng.random(n) < 0.75
        offs = von_neumann(d)
        src = np.flatnonzero(mask)[[0, n // 3]]
        got = bfs.bfs_distance(np.array(shape), np.array(per, np.uint8), offs,
                               mask.astype(np.uint8), False, src)
        # explicit graph from numpy index arithmetic (vectorised, independent of the kernels)
        idx = np.arange(n)
        coords = np.stack(np.unravel_index(idx, shape), axis=1)
        rows, cols = [], []
        for off in offs:
            c = coords + off
            ok = np.ones(n, dtype=bool)
            for a in range(d):
                if per[a]:
                    c[:, a] %= shape[a]
                else:
                    ok &= (c[:, a] >= 0) & (c[:, a] < shape[a])
            j = np.ravel_multi_index(tuple(np.where(ok[:, None], c, 0).T), shape)
            ok &= mask & mask[j]
            rows.append(idx[ok])
            cols.append(j[ok])
        A = sp.csr_array((np.ones(sum(r.size for r in rows)),
                          (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))
        ref = csgraph.dijkstra(A, indices=src, unweighted=True, min_only=True)
        ref = np.where(np.isinf(ref), -1, ref).astype(np.int64)
        ref[~mask] = -1
        np.testing.assert_array_equal(got, ref)


def test_unpadded_geometry_path():
    """Many tiny axes: the halo would more than double the array, so the kernels run
    unpadded; results must not change."""
    case = Case((9000, 2, 2), (0, 1, 0), von_neumann(3), 0.8, 11)
    g = _padded.make_plan(*case.args[:4])
    assert not g.padded and g.mode == 0
    src = draw_sources(case, 2)
    np.testing.assert_array_equal(bfs.bfs_distance(*case.args, src), bfs_oracle(case, src))
    w = case.rng.uniform(0.5, 2.0, case.n)
    ref = csgraph.dijkstra(case.csr(w), directed=True, indices=src, min_only=True)
    ref[~case.mask] = np.inf
    np.testing.assert_allclose(dijkstra.dijkstra_distance(*case.args, w, src), ref, rtol=1e-12)
    s, e = int(src[0]), int(case.open_sites()[-1])
    path = paths.shortest_path(*case.args, s, e)
    np.testing.assert_array_equal(path, walk_oracle(case, s, e))
    np.testing.assert_array_equal(catalytic_path.catalytic_path(*case.args, s, e,
                                                                np.zeros(case.n, np.uint8)), path)
    np.testing.assert_array_equal(paths.shortest_path(*case.args, s, e, weights=np.ones(case.n)),
                                  path)
    s2 = int(case.open_sites()[5])
    U = case.graph()
    expect = sum(1 for _ in nx.all_shortest_paths(U, s, s2)) if nx.has_path(U, s, s2) else 0
    assert paths.count_shortest_paths(*case.args, s, s2) == (expect, False)
    got = bfs.closeness(*case.args, sources=src)
    for v in src:
        assert got[v] == pytest.approx(nx.closeness_centrality(U, u=int(v)), rel=1e-12)


def test_dedupe_level_drops_repeats():
    work = np.full(10, -1, dtype=np.int32)
    work[[2, 5, 7]] = 3
    nxt = np.array([2, 5, 2, 0, 0, 0], dtype=np.int32)
    bufs = np.array([[7, 5, 0], [2, 7, 0]], dtype=np.int32)
    cnt = np.array([2, 2], dtype=np.int64)
    k = bfs._dedupe_level(work, nxt, 3, bufs, cnt, 3)
    assert k == 3 and sorted(nxt[:k].tolist()) == [2, 5, 7]
    assert (work[[2, 5, 7]] == 3).all()


# -- closeness -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_closeness_matches_networkx(case):
    ref = nx.closeness_centrality(case.graph(), wf_improved=True)
    got = bfs.closeness(*case.args)
    expect = np.full(case.n, np.nan)
    for v, c in ref.items():
        expect[v] = c
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=0)
    src = draw_sources(case, 2)
    part = bfs.closeness(*case.args, sources=src)
    sel = np.full(case.n, np.nan)
    sel[src] = expect[src]
    np.testing.assert_allclose(part, sel, rtol=1e-12)


def test_closeness_refuses_blocked_and_out_of_range_sources():
    off = np.array([[-1], [1]])
    open_ = np.array([1, 0, 1], np.uint8)
    with pytest.raises(IndexError, match="blocked"):
        bfs.closeness((3,), np.zeros(1, np.uint8), off, open_, False, sources=[0, 1])
    with pytest.raises(IndexError, match="out of range"):
        bfs.closeness((3,), np.zeros(1, np.uint8), off, open_, False, sources=[3])
