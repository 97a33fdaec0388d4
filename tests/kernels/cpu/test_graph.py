"""Numba CPU graph kernels against SciPy / NetworkX / closed-form oracles.

The oracle graphs are built here from the neighbour definition in
``catalytic/kernels/cpu/neighbors.py`` (displace, wrap periodic axes, drop off open axes
and on blocked sites, drop self and duplicates) by a slow pure-Python enumerator that
shares no code with the kernels.
"""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import scipy.ndimage as ndi
import scipy.sparse as sp
from scipy.sparse import csgraph

from catalytic.kernels.cpu import (
    _budget,
    _padded,
    bfs,
    catalytic_path,
    components,
    degree,
    dijkstra,
    paths,
)


#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- oracle side ---------------------------------------------------------------------------


def von_neumann(d):
    rows = []
    for a in range(d):
        for s in (-1, 1):
            r = [0] * d
            r[a] = s
            rows.append(r)
    return np.array(rows, dtype=np.int64)


def moore(d):
    rows = [r for r in itertools.product((-1, 0, 1), repeat=d) if any(r)]
    return np.array(rows, dtype=np.int64).reshape(-1, d)


def neighbours(i, shape, periodic, offsets, open_):
    """Neighbour set of site i, written from the definition (stencil order)."""
    coords = []
    rem = i
    for n in reversed(shape):
        coords.append(rem % n)
        rem //= n
    coords = coords[::-1]
    out = []
    for off in offsets:
        j = 0
        for a, n in enumerate(shape):
            y = coords[a] + int(off[a])
            if periodic[a]:
                y %= n
            elif not 0 <= y < n:
                break
            j = j * n + y
        else:
            if open_[j] and j != i and j not in out:
                out.append(j)
    return out


class Case:
    """A small lattice plus everything the oracles need."""

    def __init__(self, shape, periodic, offsets, p_open, seed):
        self.shape = tuple(int(s) for s in shape)
        self.d = len(self.shape)
        self.n = math.prod(self.shape)
        self.periodic = np.array(periodic, dtype=np.uint8)
        self.offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, self.d)
        rng = np.random.default_rng(seed)
        self.rng = rng
        if p_open >= 1.0:
            self.mask = np.ones(self.n, dtype=bool)
            self.open_ = np.zeros(0, dtype=np.uint8)  # "all open"
        else:
            self.mask = rng.random(self.n) < p_open
            if not self.mask.any():
                self.mask[rng.integers(self.n)] = True
            self.open_ = self.mask.astype(np.uint8)
        self.nbrs = [
            neighbours(i, self.shape, self.periodic, self.offsets, self.mask)
            if self.mask[i] else []
            for i in range(self.n)
        ]
        # would a kernel see duplicates or self-loops? (the engine's rule is conservative)
        raw = 0
        for i in range(self.n):
            if self.mask[i]:
                raw += sum(
                    1
                    for k in range(len(self.offsets))
                    if self._raw_neighbour(i, k) is not None
                )
        self.dedupe = raw != sum(len(x) for x in self.nbrs)
        self.args = (np.array(self.shape, dtype=np.int64), self.periodic, self.offsets,
                     self.open_, self.dedupe)

    def _raw_neighbour(self, i, k):
        coords = np.unravel_index(i, self.shape)
        j = 0
        for a, n in enumerate(self.shape):
            y = int(coords[a]) + int(self.offsets[k, a])
            if self.periodic[a]:
                y %= n
            elif not 0 <= y < n:
                return None
            j = j * n + y
        return j if self.mask[j] else None

    def csr(self, weights=None):
        rows = [i for i in range(self.n) for _ in self.nbrs[i]]
        cols = [j for i in range(self.n) for j in self.nbrs[i]]
        if weights is None:
            data = np.ones(len(cols))
        else:
            data = weights[np.array(cols, dtype=np.int64)] if cols else np.zeros(0)
        return sp.csr_array((data, (rows, cols)), shape=(self.n, self.n))

    def digraph(self, weights=None):
        D = nx.DiGraph()
        D.add_nodes_from(int(i) for i in np.flatnonzero(self.mask))
        for i in range(self.n):
            for j in self.nbrs[i]:
                if weights is None:
                    D.add_edge(i, j)
                else:
                    D.add_edge(i, j, weight=float(weights[j]))
        return D

    def graph(self):
        U = nx.Graph()
        U.add_nodes_from(int(i) for i in np.flatnonzero(self.mask))
        for i in range(self.n):
            for j in self.nbrs[i]:
                U.add_edge(i, j)
        return U

    def open_sites(self):
        return np.flatnonzero(self.mask)

    def __repr__(self):
        per = "".join("P" if p else "o" for p in self.periodic)
        return f"Case{self.shape}{per}k{len(self.offsets)}"


SPECS = [
    # shape, periodic, stencil, p_open
    ((7,), (0,), "vn", 1.0),
    ((9,), (1,), "vn", 0.8),
    ((1,), (1,), "vn", 1.0),
    ((2,), (1,), "vn", 1.0),
    ((13,), (0,), "moore", 0.7),
    ((5, 7), (0, 0), "vn", 1.0),
    ((5, 7), (0, 0), "vn", 0.6),
    ((6, 5), (1, 0), "moore", 0.7),
    ((4, 5), (1, 1), "vn", 0.75),
    ((1, 6), (1, 0), "vn", 0.8),
    ((2, 5), (1, 1), "moore", 0.8),
    ((2, 2), (1, 1), "moore", 1.0),
    ((7, 1), (0, 1), "vn", 0.9),
    ((3, 4, 5), (0, 0, 0), "vn", 1.0),
    ((3, 4, 5), (0, 0, 0), "vn", 0.65),
    ((4, 3, 5), (1, 0, 1), "moore", 0.5),
    ((2, 3, 2), (1, 1, 1), "vn", 0.8),
    ((5, 1, 4), (0, 1, 0), "moore", 0.7),
    ((3, 2, 3, 4), (0, 0, 0, 0), "vn", 0.7),
    ((3, 3, 2, 3), (1, 0, 1, 0), "moore", 0.6),
    ((2, 2, 2, 2), (1, 1, 1, 1), "moore", 1.0),
    ((4, 3, 3, 3), (1, 1, 1, 1), "vn", 0.75),
]


def _case(spec, seed):
    shape, per, kind, p = spec
    offs = von_neumann(len(shape)) if kind == "vn" else moore(len(shape))
    return Case(shape, per, offs, p, seed)


CASES = [_case(s, 100 + i) for i, s in enumerate(SPECS)]

# Stencils that are not symmetric (directed neighbour relation), or skip the unit step
# along the last axis (connected components then take the per-site path).
ASYM = [
    Case((5, 6), (0, 0), [[0, 1], [1, 0]], 0.8, 1),
    Case((5, 6), (1, 1), [[0, 1], [1, 0]], 0.8, 2),
    Case((6, 7), (0, 0), [[1, 2], [2, -1]], 0.9, 3),
    Case((6, 7), (0, 1), [[1, 1], [-1, 1], [0, 2]], 0.85, 4),
    Case((4, 5, 3), (1, 0, 1), [[0, 0, 2], [1, -1, 0], [0, 2, 1]], 0.8, 5),
    Case((9,), (1,), [[3], [-2]], 0.8, 6),
]

ids = [repr(c) for c in CASES]
asym_ids = [repr(c) for c in ASYM]


def _sources(case, k=2):
    open_sites = case.open_sites()
    return np.sort(case.rng.choice(open_sites, size=min(k, open_sites.size), replace=False))


def _bfs_oracle(case, sources):
    d = csgraph.dijkstra(case.csr(), directed=True, indices=sources, unweighted=True,
                         min_only=True)
    out = np.where(np.isinf(d), -1, d).astype(np.int64)
    out[~case.mask] = -1
    return out


# -- BFS -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_bfs_distance_matches_scipy(case):
    for k in (1, 3):
        src = _sources(case, k)
        got = bfs.bfs_distance(*case.args, src)
        assert got.dtype == np.int64 and got.shape == (case.n,)
        np.testing.assert_array_equal(got, _bfs_oracle(case, src))


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_bfs_dedupe_flag_does_not_change_distances(case):
    src = _sources(case, 2)
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
        src = _sources(case, 2)
        np.testing.assert_array_equal(bfs.bfs_distance(*case.args, src), _bfs_oracle(case, src))


@pytest.mark.parametrize("par_min", [1, 16])
def test_hop_path_on_parallel_frontiers(monkeypatch, par_min, threads):
    """The hop search of shortest_path runs the frontier BFS and ends after the level
    that reaches the end: the same path as on one thread with whole levels, and as long
    as the oracle distance."""
    if threads == "one-thread":
        pytest.skip("needs the parallel paths")
    for case in (CASES[14], CASES[15], CASES[21]):
        start, end = _sources(case, 2)
        want = _bfs_oracle(case, [start])[end]
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
    src = _sources(case, 2)
    np.testing.assert_array_equal(bfs.bfs_distance(*case.args, src), _bfs_oracle(case, src))
    w = case.rng.uniform(0.5, 2.0, case.n)
    ref = csgraph.dijkstra(case.csr(w), directed=True, indices=src, min_only=True)
    ref[~case.mask] = np.inf
    np.testing.assert_allclose(dijkstra.dijkstra_distance(*case.args, w, src), ref, rtol=1e-12)
    s, e = int(src[0]), int(case.open_sites()[-1])
    path = paths.shortest_path(*case.args, s, e)
    np.testing.assert_array_equal(path, _walk_oracle(case, s, e))
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


# -- Dijkstra ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_dijkstra_matches_scipy(case):
    w = case.rng.uniform(0.1, 3.0, case.n)
    src = _sources(case, 2)
    ref = csgraph.dijkstra(case.csr(w), directed=True, indices=src, min_only=True)
    ref[~case.mask] = np.inf
    got = dijkstra.dijkstra_distance(*case.args, w, src)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", CASES[::3], ids=ids[::3])
def test_dijkstra_zero_weights_match_networkx(case):
    w = case.rng.choice([0.0, 0.0, 1.0, 2.5], size=case.n)
    src = _sources(case, 2)
    ref = np.full(case.n, np.inf)
    for v, dv in nx.multi_source_dijkstra_path_length(case.digraph(w), set(src.tolist())).items():
        ref[v] = dv
    np.testing.assert_allclose(dijkstra.dijkstra_distance(*case.args, w, src), ref, rtol=1e-12)


# -- shortest paths ------------------------------------------------------------------------


def _walk_oracle(case, start, end, weights=None):
    """The project's tie rule, straight from its statement, on oracle distances."""
    if weights is None:
        dist = _bfs_oracle(case, np.array([start]))
        if dist[end] < 0:
            return np.zeros(0, dtype=np.int64)
        path = [end]
        v = end
        while v != start:
            v = min(u for u in case.nbrs[v] if dist[u] == dist[v] - 1)
            path.append(v)
        return np.array(path[::-1], dtype=np.int64)
    dist = csgraph.dijkstra(case.csr(weights), directed=True, indices=start)
    if not np.isfinite(dist[end]):
        return np.zeros(0, dtype=np.int64)
    path = [end]
    v = end
    while v != start:
        v = min(u for u in case.nbrs[v] if dist[u] + weights[v] == dist[v])
        path.append(v)
        assert len(path) <= case.n
    return np.array(path[::-1], dtype=np.int64)


def _pairs(case, k=4):
    o = case.open_sites()
    pairs = [(o[0], o[-1]), (o[-1], o[0]), (o[0], o[0])]
    for _ in range(k):
        pairs.append(tuple(case.rng.choice(o, 2)))
    return pairs


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_shortest_path_hops_tie_rule(case):
    for s, e in _pairs(case):
        got = paths.shortest_path(*case.args, int(s), int(e))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _walk_oracle(case, s, e))


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_shortest_path_weighted_tie_rule(case):
    # few distinct weights: many equal-cost ties, exactly representable sums
    w = case.rng.choice([0.5, 1.0, 1.5, 2.0], size=case.n)
    for s, e in _pairs(case):
        got = paths.shortest_path(*case.args, int(s), int(e), weights=w)
        np.testing.assert_array_equal(got, _walk_oracle(case, s, e, w))


@pytest.mark.parametrize("case", CASES[::2], ids=ids[::2])
def test_shortest_path_zero_weights_is_a_shortest_simple_path(case):
    """Zero costs allow cycles of tight steps; the walk must still end at ``start`` with
    a simple path of least cost."""
    w = case.rng.choice([0.0, 0.0, 0.0, 1.0], size=case.n)
    for s, e in _pairs(case):
        got = paths.shortest_path(*case.args, int(s), int(e), weights=w)
        # networkx, not scipy: scipy reads explicit zeros in a sparse matrix as "no edge"
        ref = nx.single_source_dijkstra_path_length(case.digraph(w), int(s))
        if int(e) not in ref:
            assert got.size == 0
            continue
        assert got[0] == s and got[-1] == e
        assert len(set(got.tolist())) == got.size
        for u, v in zip(got[:-1], got[1:]):
            assert v in case.nbrs[u]
        assert math.isclose(float(w[got[1:]].sum()), ref[int(e)], rel_tol=1e-12, abs_tol=1e-12)


def test_shortest_path_unreachable_is_empty():
    mask = np.array([1, 1, 0, 1, 1], dtype=np.uint8)
    args = (np.array([5]), np.zeros(1, np.uint8), von_neumann(1), mask, False)
    assert paths.shortest_path(*args, 0, 4).size == 0
    assert paths.shortest_path(*args, 0, 4, weights=np.ones(5)).size == 0
    assert catalytic_path.catalytic_path(*args, 0, 4, np.zeros(5, np.uint8)).size == 0
    assert paths.count_shortest_paths(*args, 0, 4) == (0, False)
    np.testing.assert_array_equal(paths.shortest_path(*args, 3, 3), [3])


# -- counting ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 4, 5), (6,), (2, 7), (4, 4, 4, 2), (1, 5)])
def test_count_shortest_paths_closed_form(shape):
    d = len(shape)
    n = math.prod(shape)
    args = (np.array(shape), np.zeros(d, np.uint8), von_neumann(d), np.zeros(0, np.uint8), False)
    steps = [s - 1 for s in shape]
    expect = math.factorial(sum(steps))
    for s in steps:
        expect //= math.factorial(s)
    assert paths.count_shortest_paths(*args, 0, n - 1) == (expect, False)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_count_shortest_paths_matches_networkx(case):
    U = case.graph()
    for s, e in _pairs(case, 3):
        s, e = int(s), int(e)
        got = paths.count_shortest_paths(*case.args, s, e)
        if nx.has_path(U, s, e):
            expect = sum(1 for _ in nx.all_shortest_paths(U, s, e))
        else:
            expect = 0
        assert got == (expect, False)


def test_count_shortest_paths_periodic_duplicates_counted_once():
    # periodic axis of size 2: +1 and -1 reach the same site; one path, not two
    args = (np.array([2]), np.ones(1, np.uint8), von_neumann(1), np.zeros(0, np.uint8), True)
    assert paths.count_shortest_paths(*args, 0, 1) == (1, False)
    args = (np.array([2, 3]), np.array([1, 0], np.uint8), von_neumann(2), np.zeros(0, np.uint8),
            True)
    assert paths.count_shortest_paths(*args, 0, 5) == (3, False)


def test_count_shortest_paths_overflow_flag():
    def count(m):
        args = (np.array([m, m]), np.zeros(2, np.uint8), von_neumann(2), np.zeros(0, np.uint8),
                False)
        return paths.count_shortest_paths(*args, 0, m * m - 1)

    assert count(34) == (math.comb(66, 33), False)  # 7.2e18 < 2**63
    assert count(35)[1] is True  # C(68, 34) = 2.8e19
    assert count(120)[1] is True


# -- connected components ------------------------------------------------------------------


def _canonical(case, components):
    labels = np.zeros(case.n, dtype=np.int64)
    for k, comp in enumerate(sorted(components, key=min), start=1):
        labels[list(comp)] = k
    return labels


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_connected_components_match_networkx(case):
    labels, count = components.connected_components(*case.args)
    comps = list(nx.connected_components(case.graph()))
    assert count == len(comps)
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, _canonical(case, comps))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["vn", "moore"])
def test_connected_components_match_ndimage(d, kind):
    rng = np.random.default_rng(d * 10 + len(kind))
    shape = {1: (301,), 2: (67, 45), 3: (17, 13, 11), 4: (7, 6, 5, 9)}[d]
    offs = von_neumann(d) if kind == "vn" else moore(d)
    structure = ndi.generate_binary_structure(d, 1 if kind == "vn" else d)
    for p in (0.3, 0.55, 0.8, 1.0):
        mask = rng.random(shape) < p
        labels, count = components.connected_components(np.array(shape), np.zeros(d, np.uint8),
                                                        offs, mask.reshape(-1).astype(np.uint8),
                                                        False)
        ref, ref_count = ndi.label(mask, structure=structure)
        assert count == ref_count
        np.testing.assert_array_equal(labels, ref.reshape(-1))


def test_connected_components_percolation_lattice():
    rng = np.random.default_rng(3)
    mask = rng.random((300, 257)) < 0.6
    labels, count = components.connected_components(np.array(mask.shape), np.zeros(2, np.uint8),
                                                    von_neumann(2),
                                                    mask.reshape(-1).view(np.uint8), False)
    ref, ref_count = ndi.label(mask)
    assert count == ref_count
    np.testing.assert_array_equal(labels, ref.reshape(-1))


@pytest.mark.parametrize("shape", [(1,), (7,), (8, 8), (64, 64), (5, 1), (9, 6, 7)])
@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("kind", ["vn", "moore"])
def test_connected_components_single_call_matches_windows(monkeypatch, shape, periodic,
                                                         kind):
    """Small lattices take the single-call labelling; with a tiny budget the same
    lattice goes through the windowed kernels: same labels, count and sizes."""
    d = len(shape)
    offs = von_neumann(d) if kind == "vn" else moore(d)
    per = np.full(d, periodic, np.uint8)
    rng = np.random.default_rng(sum(shape))
    for p in (0.0, 0.4, 0.6, 1.0):
        mask = (rng.random(shape) < p).reshape(-1).astype(np.uint8)
        for open_ in (mask, np.zeros(0, np.uint8)):
            args = (np.array(shape), per, offs, open_, False)
            whole = components.connected_components(*args, sizes=True)
            monkeypatch.setattr(_budget, "_BUDGET", 7)
            windows = components.connected_components(*args, sizes=True)
            monkeypatch.undo()
            assert whole[1] == windows[1]
            np.testing.assert_array_equal(whole[0], windows[0])
            np.testing.assert_array_equal(whole[2], windows[2])
            assert whole[0].dtype == np.int32 and whole[2].dtype == np.int64
            ref = np.bincount(whole[0], minlength=whole[1] + 1)[1:]
            np.testing.assert_array_equal(whole[2], ref)
            assert components.connected_components(*args)[1] == whole[1]


# -- closeness -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_closeness_matches_networkx(case):
    ref = nx.closeness_centrality(case.graph(), wf_improved=True)
    got = bfs.closeness(*case.args)
    expect = np.full(case.n, np.nan)
    for v, c in ref.items():
        expect[v] = c
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=0)
    src = _sources(case, 2)
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


# -- catalytic path ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_catalytic_path_equals_shortest_path(case):
    rng = np.random.default_rng(5)
    for s, e in _pairs(case):
        state = rng.integers(0, 256, case.n + 17, dtype=np.uint8)
        tail = state[case.n:].copy()
        got = catalytic_path.catalytic_path(*case.args, int(s), int(e), state)
        np.testing.assert_array_equal(got, paths.shortest_path(*case.args, int(s), int(e)))
        np.testing.assert_array_equal(state[case.n:], tail)  # only state[:n] is used


# -- degree --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_degree_matches_definition(case):
    expect = np.array([len(x) for x in case.nbrs], dtype=np.int64)
    got = degree.degree(*case.args)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expect)
    # the de-duplicating path gives the same sets when there is nothing to remove
    np.testing.assert_array_equal(degree.degree(*case.args[:4], True), expect)


# -- property test: random lattices --------------------------------------------------------


@st.composite
def lattices(draw):
    d = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, {1: 12, 2: 6, 3: 4, 4: 3}[d]), min_size=d,
                                max_size=d)))
    periodic = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    offs = von_neumann(d) if draw(st.booleans()) else moore(d)
    p_open = draw(st.sampled_from([1.0, 0.8, 0.5]))
    return Case(shape, periodic, offs, p_open, draw(st.integers(0, 2**16)))


@given(lattices())
def test_random_lattices_distances_components_degree(case):
    src = _sources(case, 2)
    np.testing.assert_array_equal(bfs.bfs_distance(*case.args, src), _bfs_oracle(case, src))
    labels, count = components.connected_components(*case.args)
    comps = list(nx.connected_components(case.graph()))
    assert count == len(comps)
    np.testing.assert_array_equal(labels, _canonical(case, comps))
    np.testing.assert_array_equal(degree.degree(*case.args), [len(x) for x in case.nbrs])
    s, e = (int(x) for x in case.rng.choice(case.open_sites(), 2))
    np.testing.assert_array_equal(paths.shortest_path(*case.args, s, e), _walk_oracle(case, s, e))


# -- Dijkstra's bucketed queue: exact on large lattices, for any queue setting ----------------

#: 67,200 sites: above 2**16, where the backend runs on all threads
BIG = (42, 40, 40)


def _relax_oracle(shape, mask, w, sources):
    """Least entering costs on an open von Neumann lattice by Bellman-Ford sweeps in
    NumPy (relax every site from its 2d neighbours until nothing changes); zero weights
    are fine. Its fixed point is the least float64 sum over paths, which every Dijkstra
    reaches bit for bit (``fl(x + w)`` grows with ``x``), so the comparison is exact."""
    d = len(shape)
    W = np.where(mask, w, np.inf).reshape(shape)  # a blocked site is never entered
    dist = np.full(shape, np.inf)
    dist.reshape(-1)[np.asarray(sources)] = 0.0
    while True:
        best = dist.copy()
        for a in range(d):
            for lo, hi in ((slice(1, None), slice(None, -1)), (slice(None, -1), slice(1, None))):
                to = [slice(None)] * d
                fr = [slice(None)] * d
                to[a], fr[a] = lo, hi
                np.minimum(best[tuple(to)], dist[tuple(fr)] + W[tuple(to)], out=best[tuple(to)])
        if np.array_equal(best, dist):
            return dist.reshape(-1)
        dist = best


def _vn_open_neighbours(shape, mask, v):
    """Open von Neumann neighbours of flat site ``v`` on an open lattice, in pure Python."""
    strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    out = []
    for a, (n_a, s_a) in enumerate(zip(shape, strides)):
        x = (v // s_a) % n_a
        for step in (-1, 1):
            if 0 <= x + step < n_a and mask[v + step * s_a]:
                out.append(v + step * s_a)
    return out


def _tie_walk(shape, mask, w, dist, start, end):
    """The project's tie rule on a given cost field, from its statement
    (``backends._common.plateau_depths``): a step u -> v is tight when ``dist[u] + w[v]
    == dist[v]``; the depth of ``start`` and of each site entered by a tight step rising
    in cost is 0, any other site's is one more than its shallowest in-neighbour along a
    tight step of equal cost (breadth-first); from ``end``, step to the in-neighbour of
    smallest flat index along a rising tight step or an equal-cost one from one level
    shallower."""
    from collections import deque

    limit = dist[end]
    near = [v for v in np.flatnonzero(dist <= limit).tolist()]
    nb = {v: _vn_open_neighbours(shape, mask, v) for v in near}
    depth = {}
    for v in near:
        if v == start or any(dist[u] < dist[v] and dist[u] + w[v] == dist[v] for u in nb[v]):
            depth[v] = 0
    queue = deque(sorted(depth))
    while queue:
        x = queue.popleft()
        for y in nb[x]:
            if y in nb and y not in depth and dist[y] == dist[x] and dist[x] + w[y] == dist[y]:
                depth[y] = depth[x] + 1
                queue.append(y)
    path = [end]
    while path[-1] != start:
        v = path[-1]
        path.append(min(u for u in nb[v] if dist[u] + w[v] == dist[v] and (
            dist[u] < dist[v] or depth.get(u, -9) == depth[v] - 1)))
        assert len(path) <= len(near)
    return np.array(path[::-1], dtype=np.int64)


def _big_weights(kind, n, rng):
    if kind == "uniform":
        return rng.uniform(1.0, 10.0, n)
    if kind == "ties":  # exact sums: many equal costs
        return rng.choice([1.0, 2.0, 3.0], n)
    if kind == "zeros":
        return rng.choice([0.0, 0.0, 0.5, 1.0, 1.5], n)
    # "outliers": rare huge weights off the sampled sites (the bucket width ignores them,
    # so their costs go through the overflow, and past _FAR buckets)
    w = rng.choice([0.0, 0.25, 0.5, 1.0], n)
    rare = rng.choice(n, n // 500, replace=False)
    rare = rare[rare % max(1, n // 4096) != 0]
    w[rare] = rng.choice([1e6, 1e300], rare.size)
    return w


def _args(shape, mask):
    open_ = np.zeros(0, np.uint8) if mask.all() else mask.astype(np.uint8)
    return (np.array(shape), np.zeros(len(shape), np.uint8), von_neumann(len(shape)), open_,
            False)


@pytest.mark.parametrize("kind", ["uniform", "ties", "zeros", "outliers"])
def test_dijkstra_large_lattice_is_exact(kind):
    rng = np.random.default_rng(["uniform", "ties", "zeros", "outliers"].index(kind))
    n = math.prod(BIG)
    mask = rng.random(n) < (1.0 if kind == "uniform" else 0.9)
    w = _big_weights(kind, n, rng)
    src = np.sort(rng.choice(np.flatnonzero(mask), 2, replace=False))
    got = dijkstra.dijkstra_distance(*_args(BIG, mask), w, src)
    np.testing.assert_array_equal(got, _relax_oracle(BIG, mask, w, src))
    if kind == "uniform":  # SciPy's Dijkstra (positive weights only) gives the same bits
        idx = np.arange(n).reshape(BIG)
        rows, cols = [], []
        for a in range(3):
            for sl, sr in ((slice(1, None), slice(None, -1)), (slice(None, -1), slice(1, None))):
                to = [slice(None)] * 3
                fr = [slice(None)] * 3
                to[a], fr[a] = sl, sr
                rows.append(idx[tuple(fr)].ravel())
                cols.append(idx[tuple(to)].ravel())
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        A = sp.csr_array((w[cols], (rows, cols)), shape=(n, n))
        ref = csgraph.dijkstra(A, directed=True, indices=src, min_only=True)
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("kind", ["uniform", "ties", "zeros"])
def test_weighted_path_is_the_walk_on_the_full_field(kind):
    """The point-to-point search stops once the end is settled; its path is the tie-rule
    walk on the full field (every cost it can look at is final), near and far."""
    rng = np.random.default_rng(11)
    n = math.prod(BIG)
    mask = rng.random(n) < 0.85
    w = _big_weights(kind, n, rng)
    args = _args(BIG, mask)
    sites = np.flatnonzero(mask)
    s = int(sites[0])
    field = dijkstra.dijkstra_distance(*args, w, [s])
    ends = [int(sites[-1]), int(sites[1]), s] + [int(e) for e in rng.choice(sites, 4)]
    for e in ends:
        got = paths.shortest_path(*args, s, e, weights=w)
        if not np.isfinite(field[e]):
            assert got.size == 0
            continue
        np.testing.assert_array_equal(got, _tie_walk(BIG, mask, w, field, s, e))
        assert math.isclose(w[got[1:]].sum(), field[e], rel_tol=1e-12)


@pytest.mark.parametrize("inv, ring", [(0.0, 2), (3.0, 2), (1e-3, 64), (1e9, 8), (1e30, 4)],
                         ids=["one-bucket", "ring-of-2", "wide", "narrow", "far"])
def test_dijkstra_queue_settings_do_not_change_bits(monkeypatch, inv, ring):
    """Bucket width and ring length set the speed only: one bucket (the heap alone), a
    ring of two slots (most entries through the overflow), buckets so narrow that costs
    pass _FAR. Entry arrays start at their smallest, so they grow many times; and every
    kernel call does a few units only (resumed state)."""
    rng = np.random.default_rng(5)
    shape = (9, 11, 10)
    n = math.prod(shape)
    mask = rng.random(n) < 0.85
    w = rng.choice([0.0, 0.5, 1.0, 1.5, 2.0], n)
    args = _args(shape, mask)
    sites = np.flatnonzero(mask)
    src = sites[:2]
    want = _relax_oracle(shape, mask, w, src)
    s = int(sites[0])
    field = _relax_oracle(shape, mask, w, [s])
    ends = [int(e) for e in sites[np.isfinite(field[sites])][::7]]
    walks = [_tie_walk(shape, mask, w, field, s, e) for e in ends]
    monkeypatch.setattr(dijkstra, "_bucket_scale", lambda g, weights: (inv, ring))
    monkeypatch.setattr(dijkstra, "_QUEUE_CAP0", 1)
    for budget in (_budget._BUDGET, 3):
        monkeypatch.setattr(_budget, "_BUDGET", budget)
        np.testing.assert_array_equal(dijkstra.dijkstra_distance(*args, w, src), want)
        for e, path in zip(ends, walks):
            np.testing.assert_array_equal(paths.shortest_path(*args, s, e, weights=w), path)


def test_dijkstra_resumes_bit_for_bit_on_a_large_lattice(monkeypatch):
    """Above 2**16 sites, a small budget (hundreds of kernel calls) gives the one-call
    field and path bit for bit."""
    rng = np.random.default_rng(3)
    n = math.prod(BIG)
    mask = rng.random(n) < 0.9
    w = _big_weights("zeros", n, rng)
    args = _args(BIG, mask)
    sites = np.flatnonzero(mask)
    s, e = int(sites[0]), int(sites[-1])
    field = dijkstra.dijkstra_distance(*args, w, [s])
    path = paths.shortest_path(*args, s, e, weights=w)
    monkeypatch.setattr(_budget, "_BUDGET", 5000)
    np.testing.assert_array_equal(dijkstra.dijkstra_distance(*args, w, [s]), field)
    np.testing.assert_array_equal(paths.shortest_path(*args, s, e, weights=w), path)


@st.composite
def zero_tie_lattices(draw):
    """Small open von Neumann lattices, weights mostly 0 (long cycles of tight steps),
    two open sites."""
    d = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(2, {1: 12, 2: 6, 3: 4}[d]), min_size=d,
                                max_size=d)))
    n = math.prod(shape)
    mask = np.array(draw(st.lists(st.sampled_from([True] * 7 + [False]), min_size=n,
                                  max_size=n)))
    mask[:2] = True
    w = np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 0.0, 1.0, 0.5]), min_size=n,
                               max_size=n)))
    sites = np.flatnonzero(mask)
    s = draw(st.sampled_from(sites.tolist()))
    e = draw(st.sampled_from(sites.tolist()))
    return shape, mask, w, s, e


@settings(max_examples=300)
@given(zero_tie_lattices())
def test_weighted_path_with_zero_ties_is_the_full_field_walk(lat):
    """The search stops after the end, but only once every cost equal to the end's is
    settled: zero weights make the walk look at cells of exactly that cost."""
    shape, mask, w, s, e = lat
    field = _relax_oracle(shape, mask, w, [s])
    got = paths.shortest_path(*_args(shape, mask), s, e, weights=w)
    if not np.isfinite(field[e]):
        assert got.size == 0
    else:
        np.testing.assert_array_equal(got, _tie_walk(shape, mask, w, field, s, e))


@pytest.mark.parametrize("shape, s, e, w", [
    ((3, 5), 12, 3, [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0]),
    ((4, 3), 11, 10, [1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1]),
    ((3, 4), 10, 2, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0]),
])
def test_weighted_path_settles_every_cost_tied_with_the_end(shape, s, e, w):
    """Cases where stopping at the end's own pop (before the other cells of its cost)
    gives another path than the walk on the full field (found by trying that change)."""
    w = np.array(w, dtype=np.float64)
    mask = np.ones(w.size, dtype=bool)
    want = _tie_walk(shape, mask, w, _relax_oracle(shape, mask, w, [s]), s, e)
    np.testing.assert_array_equal(paths.shortest_path(*_args(shape, mask), s, e, weights=w), want)


def test_weighted_path_across_absorbed_weights():
    """Issue 23, item 9: in float64 1e16 + 1 == 1e16, so every site behind the 1e16 one
    costs 1e16: the walk follows the plateau by depth (a shortest crossing), where the
    old walk went along tight steps in index order (3 -> 2 -> 1 -> 0 -> back up)."""
    args = _args((4,), np.ones(4, bool))
    w = np.array([1, 1, 1e16, 1.0])
    np.testing.assert_array_equal(paths.shortest_path(*args, 3, 1, weights=w), [3, 2, 1])
    np.testing.assert_array_equal(paths.shortest_path(*args, 3, 0, weights=w), [3, 2, 1, 0])
    shape = (4, 5)
    w = np.ones(20)
    w[[18, 14]] = 1e16  # (3, 3) and (2, 4), beside the start (3, 4)
    got = paths.shortest_path(*_args(shape, np.ones(20, bool)), 19, 0, weights=w)
    assert got.size == 8  # 1 entry step and 6 plateau steps, not a wander of 15
    field = dijkstra.dijkstra_distance(*_args(shape, np.ones(20, bool)), w, [19])
    np.testing.assert_array_equal(got, _tie_walk(shape, np.ones(20, bool), w, field, 19, 0))


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(zero_tie_lattices(), st.sampled_from([1e16, 2.0**60]))
def test_weighted_path_with_absorbed_ties_resumes_bit_for_bit(monkeypatch, lat, big):
    """Plateaus made by rounding (big weights next to 0.5, 1 and 0) as well as by zeros:
    the walk is the rule's, with plateau depths computed in kernel calls of a few units
    each as in one call."""
    shape, mask, w, s, e = lat
    w = np.where(w == 0.5, big, w)
    field = _relax_oracle(shape, mask, w, [s])
    want = paths.shortest_path(*_args(shape, mask), s, e, weights=w)
    if not np.isfinite(field[e]):
        assert want.size == 0
        return
    np.testing.assert_array_equal(want, _tie_walk(shape, mask, w, field, s, e))
    with monkeypatch.context() as m:
        m.setattr(_budget, "_BUDGET", 3)
        np.testing.assert_array_equal(paths.shortest_path(*_args(shape, mask), s, e, weights=w),
                                      want)


# -- padded layout: NumPy for small lattices, parallel kernels for large ones ---------------


@st.composite
def layouts(draw):
    """A lattice, any stencil of reach up to 2 (halos of width 0 to 2 per axis, offsets
    that never land), a mask or none, site values or none."""
    d = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, {1: 40, 2: 9, 3: 5, 4: 4}[d]), min_size=d,
                                max_size=d)))
    periodic = np.array(draw(st.lists(st.booleans(), min_size=d, max_size=d)), np.uint8)
    offs = np.array(draw(st.lists(st.lists(st.integers(-2, 2), min_size=d, max_size=d),
                                  min_size=1, max_size=6)), np.int64).reshape(-1, d)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = math.prod(shape)
    open_ = ((rng.random(n) < 0.7).astype(np.uint8) if draw(st.booleans())
             else np.zeros(0, np.uint8))
    vals = rng.random(n) if draw(st.booleans()) else None
    return _padded.make_plan(shape, periodic, offs, open_), vals


def _both_layouts(fn):
    """``fn()`` with the layout written by NumPy and by the kernels."""
    keep = _padded._SMALL_LAYOUT
    try:
        _padded._SMALL_LAYOUT = 1 << 62
        small = fn()
        _padded._SMALL_LAYOUT = 0
        return small, fn()
    finally:
        _padded._SMALL_LAYOUT = keep


@settings(max_examples=150)
@given(layouts())
def test_small_layout_is_what_the_kernels_write(layout):
    """The NumPy fill and read-back used below ``_SMALL_LAYOUT`` cells give the kernels'
    arrays cell for cell: halo portals and walls, blocked sites, values, clipping."""
    g, vals = layout

    def fill():
        if vals is None:
            return _padded._work_array(g)
        out = np.empty(g.psize, np.float64)
        _padded._fill_classes(out, vals, g, 0.0, float(_padded.WALL), float(_padded.PORTAL))
        return out

    small, padded = _both_layouts(fill)
    np.testing.assert_array_equal(small, padded)
    # reading back: negative values clipped to -1 for the hop searches, as they are
    # for the weighted ones
    clip = vals is None
    src = padded + (np.arange(g.psize) % 3 - 1 if clip else 0)
    small, kernel = _both_layouts(lambda: _unpadded(src, g, clip))
    np.testing.assert_array_equal(small, kernel)
    if not clip and g.open_.shape[0] == 0:
        np.testing.assert_array_equal(kernel, vals)  # every site comes back where it was


def _unpadded(src, g, clip):
    out = np.empty(g.n, src.dtype if not clip else np.int64)
    _padded._unpad_all(src, out, g, clip)
    return out


def test_searches_agree_across_the_layout_threshold():
    """One lattice just past ``_SMALL_LAYOUT`` padded cells (kernel layout) and the same
    search with the NumPy layout: identical distance fields, hop and weighted."""
    shape = (82, 81, 80)
    rng = np.random.default_rng(2)
    open_ = (rng.random(math.prod(shape)) < 0.75).astype(np.uint8)
    open_[0] = 1
    args = (shape, np.array([1, 0, 1], np.uint8), von_neumann(3), open_, False)
    assert _padded.make_plan(*args[:4]).psize >= _padded._SMALL_LAYOUT
    w = rng.uniform(0.5, 2.0, open_.size)
    small, kernel = _both_layouts(lambda: (bfs.bfs_distance(*args, [0]),
                                           dijkstra.dijkstra_distance(*args, w, [0])))
    np.testing.assert_array_equal(small[0], kernel[0])
    np.testing.assert_array_equal(small[1], kernel[1])
    assert (kernel[0] > 10).any()
