"""Several targets in one search (``find_shortest_path`` to the nearest of several ends,
``find_shortest_paths`` to each): against one ``find_shortest_path`` per end and NetworkX
distances, every backend against the reference over hypothesis lattices, the early stop
of the CPU searches, bad input."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import catalytic as cat
from catalytic.kernels.cpu import _padded, bfs, dijkstra
from tests.support.strategies import make, path_cases

BACKENDS = ["numpy", "numba-cpu"]


def cases(max_sites=300):
    """:func:`tests.support.strategies.path_cases`, up to five ends (repeats allowed)."""
    return path_cases(max_sites=max_sites, max_sites_picked=5)


def _pick(L, k, seed):
    open_ = L.geometry.open_sites()
    rng = np.random.default_rng(seed)
    return int(open_[0]), rng.choice(open_, k)  # repeats allowed


@given(case=cases())
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_each_path_is_the_single_search_s_and_the_first_is_the_nearest(case):
    spec, spacing, k, seed = case
    L = make(spec)
    if L.geometry.n_open == 0:
        return
    s, ends = _pick(L, k, seed)
    singles = [L.find_shortest_path(s, int(e), spacing=spacing, backend="numpy")
               for e in ends]
    far = np.inf if L.geometry.weighted or spacing is not None else -1
    reached = [p.distance != far for p in singles]
    for backend, few in (("numpy", 16), ("numba-cpu", 16), ("numba-cpu", 0)):
        with pytest.MonkeyPatch.context() as m:  # few = 0: the stops marked per cell
            m.setattr(dijkstra, "_FEW_STOPS", few)
            every = L.find_shortest_paths(s, ends, spacing=spacing, backend=backend)
            first = L.find_shortest_path(s, ends, spacing=spacing, backend=backend)
        for got, want in zip(every, singles):
            assert np.array_equal(got.path, want.path) and got.distance == want.distance
        if not any(reached):
            assert first.path.size == 0 and first.distance == far
            continue
        best = min((p.distance, int(e)) for p, e, r in zip(singles, ends, reached) if r)
        assert (first.distance, int(first.path[-1])) == best
        assert np.array_equal(first.path, singles[list(ends).index(best[1])].path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_nearest_end_is_at_networkx_s_least_distance(backend):
    rng = np.random.default_rng(3)
    shape = (20, 25)
    mask = rng.random(shape) < 0.7
    mask[0, 0] = True
    w = rng.random(shape) + 0.2
    L = cat.Lattice(shape=shape, mask=mask, weights=w)
    ends = rng.choice(L.geometry.open_sites(), 6, replace=False)
    G = nx.DiGraph()
    for u, v in zip(*L.geometry.neighbor_pairs()):
        G.add_edge(int(u), int(v), weight=float(w.reshape(-1)[v]))
    far = nx.single_source_dijkstra_path_length(G, 0)
    want = min((far[int(e)] for e in ends if int(e) in far), default=math.inf)
    got = L.find_shortest_path(0, ends, backend=backend)
    assert math.isclose(got.distance, want, rel_tol=1e-12)


def test_the_cpu_searches_stop_once_the_first_or_every_end_is_reached():
    """A long strip: an end next to the start leaves the far end unreached; asking for
    every end reaches it."""
    shape = (1, 400)
    g = _padded.make_plan(np.array(shape), np.zeros(2, np.uint8),
                          np.array([[0, -1], [0, 1]]), np.zeros(0, np.uint8))
    ps, near, far = _padded._to_padded([0, 3, 399], g)
    work = bfs._hop_search(g, [ps], stops=[near, far], need=1)
    assert work[near] == 3 and work[far] < 0
    assert bfs._hop_search(g, [ps], stops=[near, far], need=2)[far] == 399
    pd, _ = dijkstra._weighted_search(g, np.ones(400), [ps], stops=[near, far], need=1)
    assert pd[near] == 3.0 and not np.isfinite(pd[far])
    pd, _ = dijkstra._weighted_search(g, np.ones(400), [ps], stops=[near, far], need=2)
    assert pd[far] == 399.0
    pd = dijkstra._length_search(g, [ps], [near, far], 1, _padded.NO_BONDS, np.ones(2))
    assert pd[near] == 3.0 and not np.isfinite(pd[far])
    many = np.concatenate([[far], _padded._to_padded(np.arange(300, 330), g)])
    pd, _ = dijkstra._weighted_search(g, np.ones(400), [ps], stops=many, need=1)
    assert pd[many[1]] == 300.0 and not np.isfinite(pd[far])  # marked, not compared


@pytest.mark.parametrize("ends, error, match", [
    (np.array([], dtype=np.int64), ValueError, "at least one"),
    (np.array([0, 99]), IndexError, "out of range"),
    (np.array([0, 7]), IndexError, "blocked"),
    ([1, 2], ValueError, "ambiguous")])
def test_bad_ends_are_refused_before_work(ends, error, match):
    mask = np.ones((3, 4), bool)
    mask[1, 3] = False
    L = cat.Lattice(shape=(3, 4), mask=mask)
    with pytest.raises(error, match=match):
        L.find_shortest_paths(0, ends)
    with pytest.raises(error, match=match):
        L.find_shortest_path(0, ends)
