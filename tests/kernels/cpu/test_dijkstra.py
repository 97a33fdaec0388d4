"""Dijkstra (``kernels/cpu/dijkstra.py``) against SciPy and NetworkX on the shared small
lattices, and its bucketed queue exact on large lattices (against Bellman-Ford sweeps
in NumPy) for any queue setting, weighted paths included.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import scipy.sparse as sp
from scipy.sparse import csgraph

from catalytic.kernels.cpu import _budget, dijkstra, paths
from tests.support.graph_cases import ASYM, CASES, asym_ids, draw_sources, ids
from tests.support.oracles import von_neumann

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- Dijkstra ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_dijkstra_matches_scipy(case):
    w = case.rng.uniform(0.1, 3.0, case.n)
    src = draw_sources(case, 2)
    ref = csgraph.dijkstra(case.csr(w), directed=True, indices=src, min_only=True)
    ref[~case.mask] = np.inf
    got = dijkstra.dijkstra_distance(*case.args, w, src)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", CASES[::3], ids=ids[::3])
def test_dijkstra_zero_weights_match_networkx(case):
    w = case.rng.choice([0.0, 0.0, 1.0, 2.5], size=case.n)
    src = draw_sources(case, 2)
    ref = np.full(case.n, np.inf)
    for v, dv in nx.multi_source_dijkstra_path_length(case.digraph(w), set(src.tolist())).items():
        ref[v] = dv
    np.testing.assert_allclose(dijkstra.dijkstra_distance(*case.args, w, src), ref, rtol=1e-12)


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


@pytest.mark.parametrize("inv, ring", [(1.0, 4), (0.5, 8), (3.0, 2)])
def test_a_search_stopped_at_any_cell_gives_it_the_full_field_s_cost(monkeypatch, inv, ring):
    """Steps wider than the ring send entries to the overflow while the ring slides on
    (the ring once overtook them, and a search stopped at a cell settled it early, too
    high: CI found it through bond weights). Every open cell as the one stop, small
    entry arrays and budgets included."""
    rng = np.random.default_rng(17)
    shape = (6, 7, 8)
    n = math.prod(shape)
    mask = rng.random(n) < 0.9
    w = rng.uniform(0.1, 10.0, n)
    args = _args(shape, mask)
    sites = np.flatnonzero(mask)
    s = int(sites[0])
    field = _relax_oracle(shape, mask, w, [s])
    monkeypatch.setattr(dijkstra, "_bucket_scale", lambda g, weights: (inv, ring))
    for e in sites:
        if e % 5 == 0:  # and a few with everything small
            monkeypatch.setattr(dijkstra, "_QUEUE_CAP0", 1)
            monkeypatch.setattr(_budget, "_BUDGET", 3)
        _, cost = paths.shortest_path(*args, s, int(e), weights=w, with_cost=True)
        assert cost == field[e]
        monkeypatch.undo()
        monkeypatch.setattr(dijkstra, "_bucket_scale", lambda g, weights: (inv, ring))


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


@pytest.mark.parametrize("periodic", [(0, 0, 0), (1, 0, 1)])
def test_step_lengths_alone_take_fifo_queues_with_the_heap_s_bits(monkeypatch, periodic):
    """Step lengths without weights (one FIFO queue per length) give the bits of the
    bucketed heap on the same step costs (weights of 1, times the lengths), also with
    queues that start at 4 entries (grown many times) and kernel calls of 3 units."""
    rng = np.random.default_rng(11)
    shape = (12, 13, 11)
    n = math.prod(shape)
    mask = rng.random(n) < 0.85
    moore = np.array([o for o in np.ndindex(3, 3, 3) if o != (1, 1, 1)]) - 1
    args = (np.array(shape), np.array(periodic, np.uint8), moore, mask.astype(np.uint8),
            False)
    sites = np.flatnonzero(mask)
    src, s, e = sites[:3], int(sites[0]), int(sites[-1])
    spacing = np.array([1.0, 2.5, 0.7])
    ones = np.ones(n)
    want = dijkstra.dijkstra_distance(*args, ones, src, spacing=spacing)
    path = paths.shortest_path(*args, s, e, weights=ones, spacing=spacing)
    assert np.isfinite(want[sites]).mean() > 0.9
    for cap, budget in ((None, _budget._BUDGET), (4, 3)):
        if cap is not None:
            monkeypatch.setattr(dijkstra, "_length_cap", lambda g, m: cap)
        monkeypatch.setattr(_budget, "_BUDGET", budget)
        np.testing.assert_array_equal(dijkstra.dijkstra_distance(*args, None, src,
                                                                 spacing=spacing), want)
        np.testing.assert_array_equal(paths.shortest_path(*args, s, e, spacing=spacing), path)


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
