"""The numpy reference backend honours bonds (closed bonds and bond weights) in every
graph operation: against a NetworkX graph built bond by bond (``bond_graph``), Dijkstra
on the step-cost digraph (a step ``u -> v`` costs its bond weight plus the weight of
``v``), path enumeration, SciPy's components, a bond-aware winding oracle, NetworkX's
centralities and a Laplacian built from the oracle's conductances."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import connected_components as scipy_cc

import catalytic as cat
from catalytic.backends._common import path_result
from catalytic.catalogue import diffusion_limit
from tests.support.oracles import (FLOAT_ATOL, FLOAT_RTOL, bond_graph, bond_graph_windings,
                                   open_sites, step_cost_digraph)
from tests.support.strategies import L1, L2, lattice_specs, make

NP = "numpy"
SPECS = lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64)
# with and without site weights (bond weights come half the time in both)
WSPECS = st.one_of(SPECS, lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64,
                                        weights=True))
# L2 with site weights too: both costs paid on each step
L2W = dict(L2, weights=np.array([[1.0, 0.5, 2.0], [0.25, 3.0, 1.0]]))
IDX = st.integers(0, 63)


def _pick(spec, k):
    """The ``k``-th open site of the spec (cyclically)."""
    sites = open_sites(spec)
    return int(sites[k % len(sites)])


def _weighted(spec):
    return spec.get("weights") is not None or spec.get("bond_weights") is not None


def _digraph(spec, G):
    return step_cost_digraph(G, spec.get("weights"))


def _path_cost(D, path):
    """The left-to-right float sum of the oracle's step costs along ``path``."""
    total = 0.0
    for u, v in zip(path[:-1], path[1:]):
        total += D[u][v]["weight"]
    return total


def _canonical(labels_by_site, n):
    """Labels renumbered 1.. by lowest flat index (0 stays 0)."""
    out = np.zeros(n, dtype=np.int64)
    seen = {}
    for i in range(n):
        lab = labels_by_site[i]
        if lab:
            out[i] = seen.setdefault(lab, len(seen) + 1)
    return out


def _oracle_labels(spec, G):
    """Component labels of the bond graph by SciPy, numbered by lowest flat index."""
    n = math.prod(spec["shape"])
    rows, cols = zip(*G.edges) if G.number_of_edges() else ((), ())
    a = sp.coo_array((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()
    _, raw = scipy_cc(a, directed=False)
    lab = np.zeros(n, dtype=np.int64)
    for i in G.nodes:
        lab[i] = raw[i] + 1
    return _canonical(lab, n)


# -- paths ------------------------------------------------------------------------------
@given(spec=WSPECS, i=IDX, j=IDX)
@example(spec=L2, i=0, j=5)
@example(spec=L2W, i=0, j=5)
@example(spec=L1, i=0, j=5)
@settings(max_examples=40, deadline=None)
def test_distances_and_shortest_paths_match_dijkstra_on_the_bond_graph(spec, i, j):
    L = make(spec)
    G = bond_graph(spec)
    s, t = _pick(spec, i), _pick(spec, j)
    dist = L.distance_field(s, backend=NP).reshape(-1)
    res = L.find_shortest_path(s, t, backend=NP)
    if _weighted(spec):
        D = _digraph(spec, G)
        want = nx.single_source_dijkstra_path_length(D, s)
        assert dist.dtype == np.float64
        got = {i: float(dist[i]) for i in range(dist.size) if np.isfinite(dist[i])}
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[i] for i in want], list(want.values()),
                                   rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
        if t not in want:
            assert res.path.size == 0 and res.distance == np.inf
            return
        path = res.path.tolist()
        assert all(D.has_edge(u, v) for u, v in zip(path[:-1], path[1:]))
        # the distance is the path's own left-to-right sum of step costs, and the least;
        # the compiled backends' paths are costed by path_result
        assert res.distance == _path_cost(D, path) == dist[t]
        assert path_result(L.geometry, res.path).distance == res.distance
        assert math.isclose(res.distance, want[t], rel_tol=FLOAT_RTOL, abs_tol=FLOAT_ATOL)
    else:
        want = nx.single_source_shortest_path_length(G, s)
        assert dist.dtype == np.int64
        assert {i: int(dist[i]) for i in range(dist.size) if dist[i] >= 0} == want
        if t not in want:
            assert res.path.size == 0 and res.distance == -1
            return
        path = res.path.tolist()
        assert all(G.has_edge(u, v) for u, v in zip(path[:-1], path[1:]))
        assert res.distance == len(path) - 1 == want[t]
    assert path[0] == s and path[-1] == t


def _integral(spec):
    return all(a is None or np.all(a == np.round(a))
               for a in (spec.get("weights"), spec.get("bond_weights")))


@given(spec=WSPECS, i=IDX, j=IDX)
@example(spec=L2, i=0, j=5)
@example(spec=dict(L2W, weights=np.ones((2, 3))), i=0, j=5)
@example(spec=L1, i=0, j=5)
@settings(max_examples=40, deadline=None)
def test_path_counts_match_networkx_all_shortest_paths(spec, i, j):
    L = make(spec)
    G = bond_graph(spec)
    s, t = _pick(spec, i), _pick(spec, j)
    weighted = _weighted(spec)
    D = _digraph(spec, G) if weighted else G
    reachable = nx.has_path(D, s, t)
    if weighted and reachable:
        if spec.get("bond_weights") is None:
            zero = bool((spec["weights"] == 0).any())  # the site-weight rule, unchanged
        else:
            zero = any(c == 0 for _, _, c in D.edges(data="weight"))
        if zero:
            with pytest.raises(ValueError, match="zero-cost cycles"):
                L.count_shortest_paths(s, t, backend=NP)
            return
    got = L.count_shortest_paths(s, t, backend=NP)
    assert type(got) is int
    if not reachable:
        assert got == 0
    elif not weighted or _integral(spec):  # exact ties need exact sums
        want = len(list(nx.all_shortest_paths(D, s, t, weight="weight" if weighted else None)))
        assert got == want
    else:
        assert got >= 1


def test_a_zero_cost_step_refuses_counting_and_a_zero_bond_alone_does_not():
    # bond weight 0 plus site weight 0 on the step into site 1: a zero-cost cycle
    bw = np.array([[0.0, 2.0, 2.0, 2.0]])
    L = cat.Lattice(shape=(4,), bond_weights=bw, weights=np.array([1.0, 0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="zero-cost steps .* zero-cost cycles"):
        L.count_shortest_paths(0, 3, backend=NP)
    # bond weights of 0 but every site weight positive: no step is free
    M = cat.Lattice(shape=(2, 2), periodic=False, bond_weights=np.zeros((2, 2, 2)),
                    weights=np.ones((2, 2)))
    assert M.count_shortest_paths(0, 3, backend=NP) == 2
    assert M.find_shortest_path(0, 3, backend=NP).distance == 2.0


def test_zero_cost_plateaus_of_bond_weights_give_a_dag():
    # only bond weights, most of them 0: plateaus of equal cost, walked by depth
    bw = np.zeros((2, 3, 4))
    bw[0, 1, :] = 1.0  # the bonds from row 1 to row 2 cost 1
    L = cat.Lattice(shape=(3, 4), bond_weights=bw)
    r = L.find_shortest_path(0, 11, backend=NP)
    assert r.distance == 1.0 and r.path[0] == 0 and r.path[-1] == 11
    d = L.distance_field(0, backend=NP)
    assert d.tolist() == [[0.0] * 4, [0.0] * 4, [1.0] * 4]


@given(spec=SPECS, i=IDX, j=IDX)
@example(spec=L2, i=0, j=5)
@example(spec=L1, i=0, j=5)
@settings(max_examples=30, deadline=None)
def test_all_paths_are_the_simple_paths_of_the_bond_graph(spec, i, j):
    L = make(spec)
    G = bond_graph(spec)
    s, t = _pick(spec, i), _pick(spec, j)
    if s == t:
        return
    got = sorted(p.tolist() for p in L.find_all_paths(s, t, max_length=3, backend=NP))
    want = sorted(nx.all_simple_paths(G, s, t, cutoff=3))
    assert got == want


@given(spec=SPECS, i=IDX, j=IDX)
@example(spec=dict(L2, bond_weights=None), i=0, j=5)
@settings(max_examples=25, deadline=None)
def test_catalytic_paths_cross_open_bonds_and_refuse_bond_weights(spec, i, j):
    L = make(spec)
    s, t = _pick(spec, i), _pick(spec, j)
    if spec.get("bond_weights") is not None:
        with pytest.raises(ValueError, match="weighted"):
            L.find_path_catalytic(s, t, backend=NP)
        return
    G = bond_graph(spec)
    res = L.find_path_catalytic(s, t, backend=NP)
    want = nx.single_source_shortest_path_length(G, s).get(t, -1)
    assert res.distance == want
    assert np.array_equal(res.path, L.find_shortest_path(s, t, backend=NP).path)
    path = res.path.tolist()
    assert all(G.has_edge(u, v) for u, v in zip(path[:-1], path[1:]))


# -- the first usable of parallel bonds ---------------------------------------------------
def test_a_closed_first_parallel_bond_does_not_hide_an_open_one():
    # periodic axis of length 2: bond 0 -> 1 is closed, the one across the seam (1 -> 0)
    # is open and weighs 5; the closed one would weigh 3
    kw = {"shape": (2,), "periodic": True, "bond_weights": np.array([[3.0, 5.0]])}
    closed = np.array([[False, True]])
    L = cat.Lattice(**kw, bonds=closed, weights=np.array([1.0, 0.5]))
    assert L.distance_field(0, backend=NP).tolist() == [0.0, 5.5]
    r = L.find_shortest_path(1, 0, backend=NP)
    assert r.path.tolist() == [1, 0] and r.distance == 6.0
    assert L.count_shortest_paths(0, 1, backend=NP) == 1
    assert [p.tolist() for p in L.find_all_paths(0, 1, backend=NP)] == [[0, 1]]
    assert L.connected_components(backend=NP).count == 1
    assert L.degree(backend=NP).tolist() == [1, 1]
    f = np.array([1.0, 0.0])
    assert L.laplacian(f, backend=NP).tolist() == [5.0, -5.0]
    # both open: the least, 3, conducts and is paid
    both = cat.Lattice(**kw)
    assert both.laplacian(f, backend=NP).tolist() == [3.0, -3.0]
    assert both.find_shortest_path(0, 1, backend=NP).distance == 3.0
    # hop counts without weights: the open seam bond joins them in one step
    U = cat.Lattice(shape=(2,), periodic=True, bonds=closed)
    assert U.find_path_catalytic(0, 1, backend=NP).path.tolist() == [0, 1]
    assert [p.tolist() for p in U.find_all_paths(1, 0, backend=NP)] == [[1, 0]]
    assert U.distance_field(1, backend=NP).tolist() == [1, 0]


# -- components, spanning and wrapping -------------------------------------------------------
@given(spec=SPECS)
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=40, deadline=None)
def test_components_spanning_and_wrapping_match_the_bond_oracles(spec):
    L = make(spec)
    G = bond_graph(spec)
    n = L.n_points
    comp = L.connected_components(backend=NP)
    want = _oracle_labels(spec, G)
    assert comp.labels.reshape(-1).tolist() == want.tolist()
    assert comp.count == int(want.max(initial=0))
    assert comp.sizes.tolist() == np.bincount(want, minlength=comp.count + 1)[1:].tolist()
    wind_labels, wraps = bond_graph_windings(spec)
    assert _canonical(wind_labels.reshape(-1), n).tolist() == want.tolist()
    d = len(spec["shape"])
    res = L.spanning_clusters(backend=NP)
    lab = want.reshape(spec["shape"])
    for a in range(d):
        if spec["periodic"][a]:
            expect = sorted(wraps[a])
        else:
            lo, hi = np.take(lab, 0, axis=a), np.take(lab, -1, axis=a)
            expect = sorted(set(lo[lo > 0].tolist()) & set(hi[hi > 0].tolist()))
        assert res.clusters[a].tolist() == expect, a
        assert L.percolates(a, backend=NP) is bool(expect)


@pytest.mark.parametrize("seam, wraps", [((True, True), True), ((True, False), False),
                                         ((False, True), False)])
def test_parallel_bonds_on_a_length_two_axis_wrap_only_when_both_are_open(seam, wraps):
    L = cat.Lattice(shape=(2,), periodic=True, bonds=np.array([seam]))
    assert L.percolates(0, backend=NP) is wraps
    assert L.connected_components(backend=NP).count == 1


@pytest.mark.parametrize("open_", [True, False])
def test_a_self_loop_bond_on_a_length_one_axis_wraps_when_open(open_):
    bonds = np.ones((2, 1, 3), bool)
    bonds[1] = False  # three clusters of one site each
    bonds[0, 0, 1] = open_  # the bond of site (0, 1) to itself along axis 0
    L = cat.Lattice(shape=(1, 3), periodic=(True, False), bonds=bonds)
    want = [1, 2, 3] if open_ else [1, 3]
    assert L.spanning_clusters(0, backend=NP).clusters[0].tolist() == want


@settings(max_examples=15, deadline=None)
@given(spec=lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64, masks=False),
       seed=st.integers(0, 2**32 - 1))
@example(spec=L2, seed=3)
def test_batched_twins_on_a_lattice_with_bonds_match_the_oracles(spec, seed):
    L = make(spec)
    rng = np.random.default_rng(seed)
    stack = rng.random((3,) + tuple(spec["shape"])) < 0.7
    stack.reshape(3, -1)[:, 0] = True
    eng = cat.get_engine()
    d = len(spec["shape"])
    comps = eng.run("batched.connected_components", L, stack, backend=NP)
    spans = eng.run("batched.spanning_clusters", L, stack, axes=tuple(range(d)), backend=NP)
    perc = eng.run("batched.percolates", L, stack, axis=0, backend=NP)
    fields = rng.random((3, L.n_points))
    laps = eng.run("batched.laplacian", L, fields, backend=NP)
    weighted = spec.get("bond_weights") is not None
    if weighted:
        with pytest.raises(ValueError, match="unweighted"):
            eng.run("batched.distance_field", L, stack, 0, backend=NP)
    else:
        dists = eng.run("batched.distance_field", L, stack, 0, backend=NP)
    for b in range(3):
        row = dict(spec, mask=stack[b])
        G = bond_graph(row)
        want = _oracle_labels(row, G)
        assert comps[b].labels.reshape(-1).tolist() == want.tolist()
        _, wraps = bond_graph_windings(row)
        if spec["periodic"][0]:
            assert spans[b].clusters[0].tolist() == sorted(wraps[0])
            assert perc[b] is bool(wraps[0])
        if not weighted:
            hops = nx.single_source_shortest_path_length(G, 0)
            assert dists[b].reshape(-1).tolist() == [hops.get(i, -1) for i in range(L.n_points)]
        np.testing.assert_allclose(laps[b].reshape(-1), _oracle_laplacian(spec, fields[b]),
                                   rtol=FLOAT_RTOL, atol=FLOAT_ATOL)


# -- degree, structure, centrality, communities ------------------------------------------------
@given(spec=SPECS)
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=30, deadline=None)
def test_degree_and_structure_match_the_bond_graph(spec):
    L = make(spec)
    G = bond_graph(spec)
    deg = L.degree(backend=NP).reshape(-1)
    assert deg.tolist() == [G.degree(i) if i in G else 0 for i in range(L.n_points)]
    st_ = L.analyze_structure(backend=NP)
    v = G.number_of_nodes()
    parts = list(nx.connected_components(G))
    assert st_["vertices"] == v and st_["edges"] == G.number_of_edges()
    assert st_["n_components"] == len(parts)
    assert st_["largest_component"] == max((len(p) for p in parts), default=0)
    assert st_["diameter"] == max((nx.diameter(G.subgraph(p)) for p in parts), default=0)
    assert st_["triangles"] == sum(nx.triangles(G).values()) // 3
    assert math.isclose(st_["clustering_coefficient"], nx.average_clustering(G) if v else 0.0,
                        rel_tol=FLOAT_RTOL, abs_tol=FLOAT_ATOL)


def test_the_closed_form_diameter_is_not_taken_when_bonds_are_closed():
    bonds = np.ones((2, 5, 5), bool)
    bonds[1, :, :4] = False  # every bond along axis 1 closed but those from the last column
    L = cat.Lattice(shape=(5, 5), bonds=bonds)
    s = L.analyze_structure(backend=NP)
    assert s["n_components"] == 5 and s["diameter"] == 4 and s["diameter_method"] != (
        "closed form (full lattice)")


@given(spec=SPECS)
@example(spec=L2)
@settings(max_examples=20, deadline=None)
def test_centralities_match_networkx_on_the_bond_graph(spec):
    L = make(spec)
    G = bond_graph(spec)
    nodes = sorted(G.nodes)

    def at(values):
        return np.array([values[i] for i in nodes])

    def ours(method):
        return L.calculate_centrality(method, backend=NP).reshape(-1)[nodes]

    tol = {"rtol": FLOAT_RTOL, "atol": FLOAT_ATOL}
    np.testing.assert_allclose(ours("degree"), at(nx.degree_centrality(G)), **tol)
    np.testing.assert_allclose(ours("closeness"), at(nx.closeness_centrality(G)), **tol)
    np.testing.assert_allclose(ours("betweenness"),
                               at(nx.betweenness_centrality(G, weight=None)), **tol)
    if len(nodes) > 1 and nx.is_connected(G):
        _, vec = np.linalg.eigh(nx.to_numpy_array(G, nodelist=nodes, weight=None))
        want = np.abs(vec[:, -1]) / np.linalg.norm(vec[:, -1])
        np.testing.assert_allclose(ours("eigenvector"), want, atol=1e-6)


@given(spec=SPECS)
@example(spec=L2)
@settings(max_examples=20, deadline=None)
def test_louvain_modularity_is_weighted_by_the_bond_weights(spec):
    L = make(spec)
    G = bond_graph(spec)
    res = L.find_communities("louvain", seed=1, backend=NP)
    labels = res.labels.reshape(-1)
    parts = [set(np.flatnonzero(labels == k).tolist()) for k in range(res.count)]
    assert sorted(set().union(*parts)) == sorted(G.nodes)
    weight = "weight" if spec.get("bond_weights") is not None else None
    total = G.size(weight=weight)
    want = nx.community.modularity(G, parts, weight=weight) if total else 0.0
    assert math.isclose(res.modularity, want, rel_tol=FLOAT_RTOL, abs_tol=FLOAT_ATOL)


def test_bond_weights_that_sum_to_zero_give_every_site_its_own_community():
    L = cat.Lattice(shape=(2, 3), bond_weights=np.zeros((2, 2, 3)))
    res = L.find_communities("louvain", backend=NP)
    assert res.count == 6 and res.modularity == 0.0
    assert sorted(res.labels.reshape(-1).tolist()) == list(range(6))


def test_louvain_splits_at_the_light_bond():
    bw = np.full((1, 8), 5.0)
    bw[0, 5] = 0.01  # 5 -- 6 barely joined
    L = cat.Lattice(shape=(8,), bond_weights=bw)
    labels = L.find_communities("louvain", seed=0, backend=NP).labels
    assert labels[5] != labels[6]


# -- Laplacian and diffusion ------------------------------------------------------------------
def _oracle_laplacian(spec, f):
    """``(D - C) f`` from the oracle graph: conductance = bond weight, or 1 without
    bond weights; 0 on blocked sites."""
    G = bond_graph(spec, all_nodes=True)
    n = math.prod(spec["shape"])
    has_bw = spec.get("bond_weights") is not None
    out = np.zeros(n)
    for i in range(n):
        if spec.get("mask") is not None and not spec["mask"].reshape(-1)[i]:
            continue
        for j, a in G[i].items():
            c = a["weight"] if has_bw else 1.0
            out[i] += c * f[i] - c * f[j]
    return out


@given(spec=SPECS, seed=st.integers(0, 2**32 - 1))
@example(spec=L2, seed=0)
@example(spec=L1, seed=0)
@settings(max_examples=30, deadline=None)
def test_laplacian_and_diffusion_use_the_bond_weights_as_conductances(spec, seed):
    L = make(spec)
    n = L.n_points
    f = np.random.default_rng(seed).normal(size=n)
    got = L.laplacian(f.reshape(L.shape), backend=NP).reshape(-1)
    np.testing.assert_allclose(got, _oracle_laplacian(spec, f), rtol=FLOAT_RTOL, atol=1e-9)
    G = bond_graph(spec)
    if spec.get("bond_weights") is not None:
        top = max((G.degree(i, weight="weight") for i in G.nodes), default=0.0)
        want = 1.0 / top if top > 0 else math.inf
        assert math.isclose(diffusion_limit(L), want, rel_tol=FLOAT_RTOL)
    else:
        assert diffusion_limit(L) == 1.0 / max(len(L.geometry.offsets), 1)
    alpha = min(diffusion_limit(L), 1.0)
    want = f.copy()
    for _ in range(3):
        want = want - alpha * _oracle_laplacian(spec, want)
    got = L.diffuse(f.reshape(L.shape), steps=3, alpha=alpha, backend=NP).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_the_diffusion_limit_follows_the_largest_weighted_degree():
    bw = np.ones((2, 4, 4))
    bw[0, 1, 1] = 10.0  # sites (1, 1) and (2, 1): weighted degree 13
    L = cat.Lattice(shape=(4, 4), periodic=True, bond_weights=bw)
    assert diffusion_limit(L) == 1 / 13
    f = np.zeros((4, 4))
    with pytest.raises(ValueError, match="largest weighted degree .* of 13"):
        L.diffuse(f, alpha=0.1, backend=NP)
    L.diffuse(f, alpha=1 / 13, backend=NP)
    # conductances below 1 allow a larger step than 1 / k
    small = cat.Lattice(shape=(4, 4), periodic=True, bond_weights=np.full((2, 4, 4), 0.5))
    assert diffusion_limit(small) == 0.5
    assert diffusion_limit(L.with_bonds(np.zeros((2, 4, 4), bool))) == math.inf


def test_a_lattice_with_bond_weights_is_weighted():
    L = cat.Lattice(shape=(3, 3), bond_weights=np.ones((2, 3, 3)))
    assert L.geometry.weighted and not cat.Lattice(shape=(3, 3)).geometry.weighted
    assert cat.Lattice(shape=(3, 3), weights=np.ones((3, 3))).geometry.weighted
    assert L.distance_field(0, backend=NP).dtype == np.float64
    with pytest.raises(ValueError, match="bond weights"):
        L.find_path_catalytic(0, 8)
    with pytest.raises(ValueError, match="unweighted"):
        cat.get_engine().run("batched.distance_field", L, np.ones((2, 3, 3), bool), 0,
                             backend=NP)


def test_bonds_are_refused_by_no_numpy_graph_operation_named_here():
    L = cat.Lattice(shape=(3, 3), bonds=np.ones((2, 3, 3), bool))
    router = cat.get_engine().router
    for op in ("distance_field", "shortest_path", "count_shortest_paths", "all_paths",
               "path_catalytic", "connected_components", "percolates", "spanning_clusters",
               "degree", "analyze_structure", "centrality", "communities", "laplacian",
               "diffuse"):
        assert router.can_run(NP, (L,), {}, op), op
