"""Paths: distance fields, shortest paths, path counts, simple paths.

Oracles: NetworkX BFS / Dijkstra on an independently built graph, closed forms
(Manhattan, periodic and Chebyshev distances, multinomial path counts).
"""

from __future__ import annotations

import itertools
import math
import os

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import catalytic as cat
from tests.support.backends import available_backends, declines
from tests.support.oracles import (
    FLOAT_RTOL,
    coords_of,
    entering_cost_digraph,
    graph_of,
    oracle_graph,
)
from tests.support.strategies import (
    LARGE_EXAMPLES,
    large_lattice_specs,
    lattice_specs,
    make,
    pick_open,
)


# -- helpers ----------------------------------------------------------------------------------
def hop_field(G, sources, n):
    d = nx.multi_source_dijkstra_path_length(G, set(sources))  # unit weights: BFS
    return np.array([d.get(i, -1) for i in range(n)], dtype=np.int64)


def cost_field(D, sources, n):
    d = nx.multi_source_dijkstra_path_length(D, set(sources), weight="weight")
    return np.array([d.get(i, np.inf) for i in range(n)], dtype=np.float64)


def tie_rule_path(G, start, end):
    """The documented tie rule, from NetworkX distances: walking back from ``end``, step
    to the neighbour with the smallest flat index that lies on a shortest path."""
    d = nx.single_source_shortest_path_length(G, start)
    if end not in d:
        return []
    path, v = [end], end
    while v != start:
        v = min(u for u in G.neighbors(v) if d.get(u, -1) == d[v] - 1)
        path.append(v)
    return path[::-1]


def assert_valid_path(G, path, start, end):
    path = [int(x) for x in path]
    assert path[0] == start and path[-1] == end
    assert len(set(path)) == len(path), "path revisits a site"
    for u, v in zip(path, path[1:]):
        assert G.has_edge(u, v), f"{u} -> {v} is not a lattice edge"


def multinomial(ks):
    out = math.factorial(sum(ks))
    for k in ks:
        out //= math.factorial(k)
    return out


def count_oracle(G, start, end):
    """Number of shortest paths by dynamic programming over NetworkX BFS layers."""
    ds = nx.single_source_shortest_path_length(G, start)
    if end not in ds:
        return 0
    count = {start: 1}
    for v in sorted(ds, key=ds.get):
        if v != start:
            count[v] = sum(count[u] for u in G.neighbors(v) if ds.get(u, -2) == ds[v] - 1)
    return count[end]


# -- distance fields ---------------------------------------------------------------------------
@given(spec=lattice_specs(), data=st.data())
def test_distance_field_single_and_multi_source(spec, data):
    L = make(spec)
    G = graph_of(spec)
    n = L.n_points
    k = data.draw(st.integers(1, 4), label="k")
    sources = sorted({pick_open(spec, data, "src") for _ in range(k)})
    want1 = hop_field(G, sources[:1], n).reshape(L.shape)
    want = hop_field(G, sources, n).reshape(L.shape)
    coords = np.array([coords_of(s, L.shape) for s in sources])
    for b in available_backends():
        got1 = L.distance_field(sources[0], backend=b)
        assert got1.dtype == np.int64 and got1.shape == L.shape
        np.testing.assert_array_equal(got1, want1, err_msg=b)
        np.testing.assert_array_equal(L.distance_field(np.array(sources), backend=b), want, err_msg=b)
        np.testing.assert_array_equal(L.distance_field(coords, backend=b), want, err_msg=b)
        np.testing.assert_array_equal(
            L.distance_field(tuple(int(c) for c in coords[0]), backend=b), want1, err_msg=b
        )


@given(spec=lattice_specs(weights=True), data=st.data())
def test_weighted_distance_field_is_entering_cost_dijkstra(spec, data):
    L = make(spec)
    D = entering_cost_digraph(graph_of(spec), spec["weights"])
    sources = sorted({pick_open(spec, data, "src") for _ in range(data.draw(st.integers(1, 3)))})
    want = cost_field(D, sources, L.n_points).reshape(L.shape)
    exact = bool(np.all(spec["weights"] == np.round(spec["weights"])))
    for b in available_backends():
        got = L.distance_field(np.array(sources), backend=b)
        assert got.dtype == np.float64 and got.shape == L.shape
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=b)
        if exact:  # integer-valued weights: sums are exact in any order
            np.testing.assert_array_equal(got, want, err_msg=b)
        else:
            np.testing.assert_allclose(got, want, rtol=FLOAT_RTOL, err_msg=b)
        assert np.all(got.reshape(-1)[sources] == 0)


def test_weighted_zero_weights_and_blocked():
    w = np.array([[0.0, 0.0, 5.0], [1.0, 0.0, 0.0], [2.0, 3.0, 0.0]])
    mask = np.ones((3, 3), bool)
    mask[0, 2] = False
    L = cat.Lattice(shape=(3, 3), weights=w, mask=mask)
    D = entering_cost_digraph(oracle_graph((3, 3), False, "von_neumann", mask), w)
    want = cost_field(D, [0], 9).reshape(3, 3)
    for b in available_backends():
        got = L.distance_field(0, backend=b)
        np.testing.assert_array_equal(got, want, err_msg=b)
        assert got[0, 2] == np.inf and got[2, 2] == 0.0 and got[2, 0] == 3.0


@pytest.mark.parametrize("shape", [(13,), (7, 5), (4, 3, 5), (3, 2, 3, 2)])
@pytest.mark.parametrize("periodic", [False, True])
def test_distance_closed_forms(shape, periodic, backend, on_backend):
    L = cat.Lattice(shape=shape, periodic=periodic)
    src = tuple(s // 3 for s in shape)
    got = on_backend(L.distance_field, src)
    grid = np.indices(shape)
    dx = np.abs(grid - np.array(src).reshape(-1, *([1] * len(shape))))
    if periodic:
        dx = np.minimum(dx, np.array(shape).reshape(-1, *([1] * len(shape))) - dx)
    np.testing.assert_array_equal(got, dx.sum(axis=0))
    # Moore: Chebyshev distance
    M = cat.Lattice(shape=shape, periodic=periodic, stencil="moore")
    np.testing.assert_array_equal(on_backend(M.distance_field, src), dx.max(axis=0))


def test_distance_unreachable_and_blocked(backend, on_backend):
    mask = np.ones((5, 6), bool)
    mask[:, 2] = False  # a wall
    L = cat.Lattice(shape=(5, 6), mask=mask)
    d = on_backend(L.distance_field, (0, 0))
    assert (d[:, 3:] == -1).all() and (d[:, 2] == -1).all()
    np.testing.assert_array_equal(d[:, :2], np.add.outer(np.arange(5), np.arange(2)))
    W = cat.Lattice(shape=(5, 6), mask=mask, weights=np.ones((5, 6)))
    dw = on_backend(W.distance_field, (0, 0))
    assert np.isinf(dw[:, 2:]).all()
    np.testing.assert_array_equal(dw[:, :2], d[:, :2])


# -- shortest paths ------------------------------------------------------------------------------
@given(spec=lattice_specs(), data=st.data())
def test_shortest_path_valid_oracle_length_and_tie_rule(spec, data):
    L = make(spec)
    G = graph_of(spec)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    want = tie_rule_path(G, s, t)
    for b in available_backends():
        res = L.find_shortest_path(s, t, backend=b)
        assert isinstance(res, cat.PathResult)
        if not want:
            assert len(res.path) == 0 and res.distance == -1
            continue
        assert_valid_path(G, res.path, s, t)
        assert res.distance == len(res.path) - 1 == nx.shortest_path_length(G, s, t)
        assert isinstance(res.distance, (int, np.integer))
        assert res.path.tolist() == want, f"{b}: tie rule"


@given(spec=lattice_specs(weights=True), data=st.data())
def test_weighted_shortest_path_agrees_across_backends(spec, data):
    L = make(spec)
    G = graph_of(spec)
    D = entering_cost_digraph(G, spec["weights"])
    w = spec["weights"].reshape(-1)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    try:
        want = nx.dijkstra_path_length(D, s, t, weight="weight")
    except nx.NetworkXNoPath:
        want = np.inf
    results = {}
    for b in available_backends():
        why = declines(b, "shortest_path", L, s, t)
        if why is not None:
            assert (w == 0).any(), f"{b} declined a positive-weight lattice: {why}"
            with pytest.raises(cat.NoBackendError):
                L.find_shortest_path(s, t, backend=b)
            continue
        res = L.find_shortest_path(s, t, backend=b)
        results[b] = res
        if not np.isfinite(want):
            assert len(res.path) == 0 and res.distance == np.inf
            continue
        assert_valid_path(G, res.path, s, t)
        assert res.distance == pytest.approx(want, rel=FLOAT_RTOL)
        assert res.distance == pytest.approx(w[res.path[1:]].sum(), rel=FLOAT_RTOL)
    ref = results["numpy"]
    for b, res in results.items():
        assert res.path.tolist() == ref.path.tolist(), f"{b} path differs from numpy"
        assert res.distance == pytest.approx(ref.distance, rel=FLOAT_RTOL)


def test_shortest_path_start_equals_end_and_coordinates(backend, on_backend):
    L = cat.Lattice(shape=(4, 5), periodic=(True, False))
    res = on_backend(L.find_shortest_path, (2, 3), (2, 3))
    assert res.path.tolist() == [13] and res.distance == 0
    res = on_backend(L.find_shortest_path, (0, 0), (3, 4))
    assert res.distance == 1 + 4  # wraps on axis 0
    assert L.index_to_coords(res.path).tolist()[0] == [0, 0]
    assert L.index_to_coords(res.path).tolist()[-1] == [3, 4]


def test_shortest_path_unreachable(backend, on_backend):
    mask = np.ones((4, 4), bool)
    mask[2, :] = False
    L = cat.Lattice(shape=(4, 4), mask=mask)
    res = on_backend(L.find_shortest_path, 0, 15)
    assert len(res.path) == 0 and res.distance == -1
    W = cat.Lattice(shape=(4, 4), mask=mask, weights=np.full((4, 4), 2.0))
    res = on_backend(W.find_shortest_path, 0, 15)
    assert len(res.path) == 0 and res.distance == np.inf


# -- path counts ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "box", [(1,), (5,), (3, 4), (2, 3, 4), (3, 3, 3), (2, 1, 2, 3), (1, 1, 1, 1, 1)]
)
def test_count_corner_to_corner_is_multinomial(box, backend, on_backend):
    L = cat.Lattice(shape=tuple(k + 1 for k in box))
    assert on_backend(L.count_shortest_paths, 0, L.n_points - 1) == multinomial(box)


def test_count_periodic_antipodes():
    """On an even periodic axis the antipode is reached both ways round."""
    for b in available_backends():
        L = cat.Lattice(shape=(6, 8), periodic=True)
        assert L.count_shortest_paths((0, 0), (3, 4), backend=b) == multinomial((3, 4)) * 4
        L = cat.Lattice(shape=(6, 7), periodic=(True, False))
        assert L.count_shortest_paths((0, 0), (3, 6), backend=b) == multinomial((3, 6)) * 2
        R = cat.Lattice(shape=(10,), periodic=True)
        assert R.count_shortest_paths(0, 5, backend=b) == 2
        assert R.count_shortest_paths(0, 4, backend=b) == 1


def test_count_overflowing_int64_is_exact(backend, on_backend):
    L = cat.Lattice(shape=(40, 40, 40))
    want = math.factorial(117) // math.factorial(39) ** 3
    assert want > 2**63
    got = on_backend(L.count_shortest_paths, 0, L.n_points - 1)
    assert type(got) is int and got == want


@given(spec=lattice_specs(max_sites=64), data=st.data())
def test_count_matches_networkx_all_shortest_paths(spec, data):
    L = make(spec)
    G = graph_of(spec)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    want = count_oracle(G, s, t)
    if 0 < want <= 5000:
        assert want == len(list(nx.all_shortest_paths(G, s, t)))
    for b in available_backends():
        got = L.count_shortest_paths(s, t, backend=b)
        assert type(got) is int and got == want, b


@given(spec=lattice_specs(max_sites=48, weights=True), data=st.data())
def test_weighted_count_matches_networkx(spec, data):
    w = spec["weights"]
    L = make(spec)
    D = entering_cost_digraph(graph_of(spec), w)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    reachable = nx.has_path(D, s, t)
    for b in available_backends():
        why = declines(b, "count_shortest_paths", L, s, t)
        if why is not None:
            with pytest.raises(cat.NoBackendError):
                L.count_shortest_paths(s, t, backend=b)
            continue
        if reachable and (w == 0).any():
            with pytest.raises(ValueError, match="zero-weight"):
                L.count_shortest_paths(s, t, backend=b)
            continue
        got = L.count_shortest_paths(s, t, backend=b)
        if not reachable:
            assert got == 0
        elif np.all(w == np.round(w)):  # exact ties need exact sums
            assert got == len(list(nx.all_shortest_paths(D, s, t, weight="weight")))
        else:
            assert got >= 1


def test_count_unreachable_is_zero(backend, on_backend):
    mask = np.ones((3, 5), bool)
    mask[:, 1] = False
    L = cat.Lattice(shape=(3, 5), mask=mask)
    assert on_backend(L.count_shortest_paths, 0, 14) == 0
    assert on_backend(L.count_shortest_paths, 0, 0) == 1


# -- weights near the overflow limit (issue 23, item 5) -----------------------------------------------
def test_path_costs_at_the_weight_limit_stay_finite():
    """Weights summing to 2**1022, the most accepted: no path cost, nor any sum a search
    tries on the way, reaches inf, so every site is reachable on every backend."""
    w = np.full((2, 5), 2.0**1022 / 10)
    L = cat.Lattice(shape=(2, 5), weights=w, periodic=(False, True))
    with pytest.raises(ValueError, match="overflow"):
        cat.Lattice(shape=(1, 5), weights=np.array([[1, 1e308, 1e308, 1e308, 1.0]]))
    for b in available_backends():
        d = L.distance_field(0, backend=b)
        assert np.isfinite(d).all(), b
        res = L.find_shortest_path(0, 7, backend=b)
        assert res.path.tolist() == [0, 1, 2, 7] and res.distance == 3 * w[0, 0], b
        if declines(b, "count_shortest_paths", L, 0, 7) is None:
            assert L.count_shortest_paths(0, 7, backend=b) == 3, b


# -- weights across many orders of magnitude: float sums that tie ---------------------------------
#: the CUDA simulator runs a few thousand threads a second: fewer draws there
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def float_dag_oracle(G, w, s, t):
    """The shortest paths of a weighted lattice from their definition (see
    ``catalytic.backends._common.plateau_depths``), on NetworkX alone, by enumeration.

    ``D``: NetworkX's Dijkstra on the entering-cost digraph, which sums in path order in
    float64 as catalytic does. A step u -> v is tight when ``D[u] + w[v] == D[v]``; the
    depth of ``s`` and of each site entered by a tight step that rises in cost is 0, any
    other site's is its hop distance from those over tight steps of equal cost. The
    shortest paths are the simple paths of tight steps (enumerated by NetworkX) whose
    equal-cost steps go one level deeper each. Returns ``(D, paths)``, ``paths`` None
    when ``t`` is unreachable."""
    D = nx.single_source_dijkstra_path_length(entering_cost_digraph(G, w), s, weight="weight")
    if t not in D:
        return D, None

    def tight(u, v):
        return D[u] + w[v] == D[v]

    entries = {v for v in D if v == s or any(tight(u, v) and D[u] < D[v] for u in G[v])}
    P = nx.DiGraph()
    P.add_nodes_from(D)
    P.add_edges_from((u, v) for u in D for v in G[u] if D[u] == D[v] and tight(u, v))
    depth = nx.multi_source_dijkstra_path_length(P, entries)  # unit steps: BFS depth
    T = nx.DiGraph()
    T.add_nodes_from(D)
    T.add_edges_from((u, v) for u in D for v in G[u] if tight(u, v))
    paths = [p for p in nx.all_simple_paths(T, s, t)] if s != t else [[s]]
    paths = [p for p in paths
             if all(D[u] < D[v] or depth[u] + 1 == depth[v] for u, v in zip(p, p[1:]))]
    return D, paths


def path_sum(w, path):
    """The float64 cost of a path: the weights entered, summed left to right."""
    total = 0.0
    for v in path[1:]:
        total += float(w[v])
    return total


#: weights that make float sums tie: 1e16 + 1 == 1e16, 2**53 + 1 == 2**53, 1e-17 vanishes
#: next to 1, and ordinary values between
MAGNITUDES = [1.0, 1.0, 2.0, 0.5, 3.0, 1e-17, 1e-8, 1e8, 2.0**53, 1e16, 3e16, 1e20, 1e300]


@st.composite
def mixed_magnitude_specs(draw, *, zeros):
    spec = draw(lattice_specs(max_sites=14, max_dim=3))
    n = math.prod(spec["shape"])
    choices = MAGNITUDES + ([0.0] if zeros else [])
    spec["weights"] = np.array(
        draw(st.lists(st.sampled_from(choices), min_size=n, max_size=n)), dtype=np.float64
    ).reshape(spec["shape"])
    return spec


def test_absorbed_weights_regression_1d():
    """Issue 23, item 9: in float64 1e16 + 1 == 1e16, so sites 0, 1 and 2 all cost 1e16
    from 3; the count was 0 (site 1 counted before site 2) and the numpy walk back from
    1 stepped 1 -> 0 -> 1 for ever."""
    w = np.array([1, 1, 1e16, 1.0])
    L = cat.Lattice(shape=(4,), weights=w)
    assert L.count_shortest_paths(3, 1) == 1
    assert L.count_shortest_paths(3, 0) == 1
    for b in available_backends():
        for end, want in ((1, [3, 2, 1]), (0, [3, 2, 1, 0]), (2, [3, 2])):
            res = L.find_shortest_path(3, end, backend=b)
            assert res.path.tolist() == want, b
            assert res.distance == 1e16, b
        assert L.find_shortest_path(0, 3, backend=b).path.tolist() == [0, 1, 2, 3]
        if declines(b, "count_shortest_paths", L, 3, 1) is None:
            assert L.count_shortest_paths(3, 1, backend=b) == 1, b


def test_absorbed_weights_plateau_2d():
    """A whole region behind two 1e16 sites costs 1e16 (each 1 it adds vanishes). From
    the last corner to the first, index order runs against the paths: the count (which
    summed sites in index order) was wrong, and the walk back must cross the plateau by
    the fewest equal-cost steps instead of wandering along tight steps."""
    w = np.ones((4, 5))
    w[3, 3] = 1e16
    w[2, 4] = 1e16
    L = cat.Lattice(shape=(4, 5), weights=w)
    G = oracle_graph((4, 5), False)
    D, paths = float_dag_oracle(G, w.reshape(-1), 19, 0)
    # enter at (3, 3) or (2, 4) (depth 0), then 6 plateau steps, each one deeper
    assert len(paths) == math.comb(6, 3) + math.comb(6, 2)
    want = min(paths, key=lambda p: p[::-1])
    assert L.count_shortest_paths(19, 0) == len(paths)
    for b in available_backends():
        np.testing.assert_array_equal(L.distance_field(19, backend=b).reshape(-1),
                                      [D[i] for i in range(20)], err_msg=b)
        res = L.find_shortest_path(19, 0, backend=b)
        assert res.path.tolist() == want and res.distance == D[0] == 1e16, b
        assert len(res.path) == 8


@settings(max_examples=10 if SIM else 150)
@given(spec=mixed_magnitude_specs(zeros=False), data=st.data())
def test_mixed_magnitude_weights_match_the_float_dag_oracle(spec, data):
    """Weights from 1e-17 to 1e300 (ties in float64 everywhere): every backend's costs,
    path and count are those of the explicit-graph oracle, and the path is one of the
    paths counted."""
    L = make(spec)
    G = graph_of(spec)
    w = spec["weights"].reshape(-1)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    D, paths = float_dag_oracle(G, w, s, t)
    want_d = np.array([D.get(i, np.inf) for i in range(L.n_points)])
    for b in available_backends():
        np.testing.assert_array_equal(L.distance_field(s, backend=b).reshape(-1), want_d,
                                      err_msg=b)
        res = L.find_shortest_path(s, t, backend=b)
        if paths is None:
            assert len(res.path) == 0 and res.distance == np.inf, b
            continue
        assert res.path.tolist() == min(paths, key=lambda p: p[::-1]), b
        assert res.distance == D[t] == path_sum(w, res.path), b
        if declines(b, "count_shortest_paths", L, s, t) is None:
            assert L.count_shortest_paths(s, t, backend=b) == len(paths), b


@settings(max_examples=6 if SIM else 60)
@given(spec=mixed_magnitude_specs(zeros=True), data=st.data())
def test_mixed_magnitude_and_zero_weights_paths_agree(spec, data):
    """Zero weights as well (paths on every backend now, a count nowhere): the path is
    the oracle's, on every backend."""
    L = make(spec)
    w = spec["weights"].reshape(-1)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    D, paths = float_dag_oracle(graph_of(spec), w, s, t)
    for b in available_backends():
        res = L.find_shortest_path(s, t, backend=b)
        if paths is None:
            assert len(res.path) == 0, b
        else:
            assert res.path.tolist() == min(paths, key=lambda p: p[::-1]), b
            assert res.distance == D[t] == path_sum(w, res.path), b


@settings(max_examples=8 if SIM else 80)
@given(spec=lattice_specs(max_sites=16, max_dim=3), data=st.data())
def test_exact_integer_weights_count_every_exact_shortest_path(spec, data):
    """Where float sums are exact (small integers), the DAG is the exact one: the count
    is the number of least-cost paths in Fraction arithmetic, by NetworkX."""
    from fractions import Fraction

    n = math.prod(spec["shape"])
    w = np.array(data.draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)), dtype=float)
    spec["weights"] = w.reshape(spec["shape"])
    L = make(spec)
    G = graph_of(spec)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    E = nx.DiGraph()
    E.add_nodes_from(G.nodes)
    for u, v in G.edges:
        E.add_edge(u, v, weight=Fraction(int(w[v])))
        E.add_edge(v, u, weight=Fraction(int(w[u])))
    want = 0
    if nx.has_path(E, s, t):
        want = sum(1 for _ in nx.all_shortest_paths(E, s, t, weight="weight"))
    for b in available_backends():
        if declines(b, "count_shortest_paths", L, s, t) is None:
            assert L.count_shortest_paths(s, t, backend=b) == want, b


# -- all simple paths ------------------------------------------------------------------------------
@given(spec=lattice_specs(max_sites=10, max_dim=3), data=st.data())
def test_find_all_paths_matches_all_simple_paths(spec, data):
    L = make(spec)
    G = graph_of(spec)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    max_length = data.draw(st.none() | st.integers(0, 8), label="max_length")
    if s == t:
        want = {(s,)}
    else:
        want = {tuple(p) for p in nx.all_simple_paths(G, s, t, cutoff=max_length)}
    for b in available_backends():
        if declines(b, "all_paths", L, s, t) is not None:
            continue
        got = L.find_all_paths(s, t, max_length=max_length, backend=b)
        tuples = [tuple(int(x) for x in p) for p in got]
        assert len(tuples) == len(set(tuples)), "duplicate paths"
        assert set(tuples) == want, b


def test_find_all_paths_grid_counts_and_limit(backend, on_backend):
    L = cat.Lattice(shape=(4, 4))
    G = oracle_graph((4, 4), False)
    want = {tuple(p) for p in nx.all_simple_paths(G, 0, 15)}
    assert len(want) == 184
    got = on_backend(L.find_all_paths, 0, 15)
    assert {tuple(p.tolist()) for p in got} == want
    short = on_backend(L.find_all_paths, 0, 15, max_length=6)
    assert len(short) == 20 == math.comb(6, 3)  # only the shortest ones fit
    assert on_backend(L.find_all_paths, 0, 15, max_length=5) == []
    with pytest.raises(ValueError, match="limit"):
        on_backend(L.find_all_paths, 0, 15, limit=10)
    assert len(on_backend(L.find_all_paths, 0, 15, limit=184)) == 184


def test_find_all_paths_unreachable_and_trivial(backend, on_backend):
    mask = np.array([[True, False, True], [True, False, True]])
    L = cat.Lattice(shape=(2, 3), mask=mask)
    assert on_backend(L.find_all_paths, 0, 2) == []
    (only,) = on_backend(L.find_all_paths, 3, 3)
    assert only.tolist() == [3]


def test_periodic_all_paths_ring(backend, on_backend):
    R = cat.Lattice(shape=(6,), periodic=True)
    got = {tuple(p.tolist()) for p in on_backend(R.find_all_paths, 0, 3)}
    assert got == {(0, 1, 2, 3), (0, 5, 4, 3)}


def test_paths_results_identical_across_backends_large():
    """Bigger lattices than the hypothesis draws, where numba's kernels take over."""
    rng = np.random.default_rng(5)
    shape = (23, 31, 7)
    mask = rng.random(shape) < 0.75
    s = int(np.flatnonzero(mask)[0])
    t = int(np.flatnonzero(mask)[-1])
    L = cat.Lattice(shape=shape, mask=mask, periodic=(False, True, False))
    w = rng.integers(1, 4, size=shape).astype(float)
    W = cat.Lattice(shape=shape, mask=mask, periodic=(False, True, False), weights=w)
    ref = {
        "d": L.distance_field(np.array([s, t]), backend="numpy"),
        "p": L.find_shortest_path(s, t, backend="numpy"),
        "c": L.count_shortest_paths(s, t, backend="numpy"),
        "wd": W.distance_field(s, backend="numpy"),
        "wp": W.find_shortest_path(s, t, backend="numpy"),
    }
    G = oracle_graph(shape, (False, True, False), "von_neumann", mask)
    np.testing.assert_array_equal(ref["d"].reshape(-1), hop_field(G, [s, t], L.n_points))
    assert ref["c"] == count_oracle(G, s, t)
    for b in available_backends():
        np.testing.assert_array_equal(L.distance_field(np.array([s, t]), backend=b), ref["d"])
        p = L.find_shortest_path(s, t, backend=b)
        assert p.path.tolist() == ref["p"].path.tolist() and p.distance == ref["p"].distance
        assert L.count_shortest_paths(s, t, backend=b) == ref["c"]
        np.testing.assert_array_equal(W.distance_field(s, backend=b), ref["wd"])
        wp = W.find_shortest_path(s, t, backend=b)
        assert wp.path.tolist() == ref["wp"].path.tolist() and wp.distance == ref["wp"].distance


def test_all_pairs_on_tiny_lattice_match_networkx():
    """Exhaustive: every pair of a masked periodic 3x4 Moore lattice."""
    mask = np.array([[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 0]], bool)
    L = cat.Lattice(shape=(3, 4), periodic=True, stencil="moore", mask=mask)
    G = oracle_graph((3, 4), True, "moore", mask)
    sites = np.flatnonzero(mask)
    for b in available_backends():
        for s, t in itertools.product(sites.tolist(), repeat=2):
            res = L.find_shortest_path(s, t, backend=b)
            assert res.distance == nx.shortest_path_length(G, s, t)
            n_paths = len(list(nx.all_shortest_paths(G, s, t)))
            assert L.count_shortest_paths(s, t, backend=b) == n_paths


@settings(max_examples=LARGE_EXAMPLES)
@given(spec=large_lattice_specs(), data=st.data())
def test_backends_agree_with_reference_on_larger_lattices(spec, data):
    L = make(spec)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    ref_d = L.distance_field(np.array([s, t]), backend="numpy")
    ref_p = L.find_shortest_path(s, t, backend="numpy")
    ref_c = L.count_shortest_paths(s, t, backend="numpy")
    ref_cat = L.find_path_catalytic(s, t, backend="numpy")
    assert ref_cat.path.tolist() == ref_p.path.tolist()
    for b in available_backends():
        np.testing.assert_array_equal(L.distance_field(np.array([s, t]), backend=b), ref_d, err_msg=b)
        p = L.find_shortest_path(s, t, backend=b)
        assert p.path.tolist() == ref_p.path.tolist() and p.distance == ref_p.distance, b
        assert L.count_shortest_paths(s, t, backend=b) == ref_c, b
        c = L.find_path_catalytic(s, t, backend=b)
        assert c.path.tolist() == ref_p.path.tolist() and c.distance == ref_p.distance, b


@settings(max_examples=LARGE_EXAMPLES)
@given(spec=large_lattice_specs(weights=True), data=st.data())
def test_weighted_backends_agree_with_reference_on_larger_lattices(spec, data):
    L = make(spec)
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    ref_d = L.distance_field(s, backend="numpy")
    ref_p = L.find_shortest_path(s, t, backend="numpy")
    for b in available_backends():
        np.testing.assert_array_equal(L.distance_field(s, backend=b), ref_d, err_msg=b)
        p = L.find_shortest_path(s, t, backend=b)
        assert p.path.tolist() == ref_p.path.tolist() and p.distance == ref_p.distance, b


def test_find_all_paths_on_a_huge_lattice_stops_with_a_clear_error():
    """2^31 x 2^31 sites and no max_length: the search is bounded by max_steps (it used
    to grow memory until the process was killed)."""
    L = cat.Lattice(shape=(2**31, 2**31))
    with pytest.raises(ValueError, match="max_steps=20000 search steps"):
        L.find_all_paths(0, L.n_points - 1, limit=10, max_steps=20_000)
    # max_length bounds the depth: nothing of length <= 3 reaches the far corner
    assert L.find_all_paths(0, L.n_points - 1, max_length=3) == []


def test_find_all_paths_max_steps_counts_search_steps():
    L = cat.Lattice(shape=(4, 4))
    assert len(L.find_all_paths(0, 15, max_steps=10**6)) == 184
    with pytest.raises(ValueError, match="max_steps=50 "):
        L.find_all_paths(0, 15, max_steps=50)
    for bad, err in ((0, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(err, match="max_steps"):
            L.find_all_paths(0, 15, max_steps=bad)


def test_find_all_paths_memory_model_refuses_before_work(monkeypatch):
    import catalytic.memory as memory_mod

    L = cat.Lattice(shape=(2**31, 2**31))
    need = cat.catalogue.mem_all_paths(L, 0, 1, max_steps=10**6)
    assert need >= 10**6 * (160 + 48 * 4)  # a visited site's neighbour list, each step
    monkeypatch.setattr(memory_mod, "available_memory", lambda: need - 1)
    with pytest.raises(cat.InsufficientMemoryError) as info:
        L.find_all_paths(0, 1, max_steps=10**6)
    assert info.value.needed == need


def test_find_all_paths_output_is_checked_as_it_grows(monkeypatch):
    import catalytic.backends.numpy_backend as nb
    import catalytic.memory as memory_mod

    L = cat.Lattice(shape=(4, 4))
    monkeypatch.setattr(nb, "_OUTPUT_CHECK_BYTES", 1)
    monkeypatch.setattr(memory_mod, "available_memory", lambda: 20_000)
    with pytest.raises(cat.InsufficientMemoryError, match="find_all_paths output"):
        L.find_all_paths(0, 15)
