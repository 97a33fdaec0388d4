"""Structure analysis, centrality and communities vs NetworkX on independent graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import catalytic as cat
from tests.support.backends import available_backends, declines
from tests.support.oracles import graph_of, open_sites
from tests.support.strategies import lattice_specs, make

CENTRALITY = {
    "degree": nx.degree_centrality,
    "closeness": nx.closeness_centrality,  # wf_improved=True, NetworkX's default
    "betweenness": nx.betweenness_centrality,  # normalised
    "eigenvector": nx.eigenvector_centrality_numpy,  # unit Euclidean norm
}


def nx_diameter(G):
    """Largest finite distance (max over components), as analyze_structure defines it."""
    return max(nx.diameter(G.subgraph(c)) for c in nx.connected_components(G))


# -- analyze_structure ----------------------------------------------------------------------
@given(spec=lattice_specs(max_sites=200))
def test_analyze_structure_matches_networkx(spec):
    L = make(spec)
    G = graph_of(spec)
    for b in available_backends():
        if declines(b, "analyze_structure", L) is not None:
            with pytest.raises(cat.NoBackendError):
                L.analyze_structure(backend=b)
            continue
        s = L.analyze_structure(backend=b)
        v = G.number_of_nodes()
        assert s["vertices"] == v and s["blocked"] == L.n_points - v
        assert s["edges"] == G.number_of_edges()
        assert s["is_connected"] == nx.is_connected(G)
        assert s["n_components"] == nx.number_connected_components(G)
        assert s["largest_component"] == max(len(c) for c in nx.connected_components(G))
        assert s["diameter"] == nx_diameter(G), s["diameter_method"]
        degs = [d for _, d in G.degree]
        assert s["avg_degree"] == pytest.approx(np.mean(degs))
        assert (s["min_degree"], s["max_degree"]) == (min(degs), max(degs))
        assert s["density"] == pytest.approx(nx.density(G))
        assert s["clustering_coefficient"] == pytest.approx(nx.average_clustering(G))
        assert s["triangles"] == sum(nx.triangles(G).values()) // 3
        assert s["shape"] == L.shape and s["stencil"] == L.stencil


@pytest.mark.parametrize(
    "shape, periodic, stencil",
    [
        ((5, 7), False, "von_neumann"),
        ((5, 7), True, "von_neumann"),
        ((4, 3, 5), (True, False, True), "von_neumann"),
        ((6, 5), False, "moore"),
        ((5, 6), True, "moore"),
        ((3, 4, 5), (False, True, False), "moore"),
        ((2, 2, 3), True, "moore"),
        ((2, 5), True, "von_neumann"),
    ],
)
def test_diameter_of_full_lattices(shape, periodic, stencil):
    """Full lattices: the closed form must equal NetworkX's all-pairs diameter."""
    L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil)
    G = graph_of({"shape": shape, "periodic": periodic if not isinstance(periodic, bool)
                  else (periodic,) * len(shape), "stencil": stencil, "mask": None})
    s = L.analyze_structure()
    assert s["diameter"] == nx.diameter(G)
    assert s["edges"] == G.number_of_edges()


def test_diameter_skipped_past_site_limit():
    mask = np.ones((30, 30), bool)
    mask[15, 15] = False  # masked: no closed form, needs all-pairs BFS
    L = cat.Lattice(shape=(30, 30), mask=mask)
    s = L.analyze_structure(max_diameter_sites=100)
    assert s["diameter"] is None and "max_diameter_sites" in s["diameter_method"]
    assert L.analyze_structure()["diameter"] == 58


# -- centrality ---------------------------------------------------------------------------------
@given(
    spec=lattice_specs(max_sites=100, max_dim=4),
    method=st.sampled_from(["degree", "closeness", "betweenness"]),
)
def test_centrality_matches_networkx(spec, method):
    L = make(spec)
    G = graph_of(spec)
    want_d = CENTRALITY[method](G)
    sites = open_sites(spec)
    want = np.full(L.n_points, np.nan)
    want[sites] = [want_d[int(i)] for i in sites]
    for b in available_backends():
        if declines(b, "centrality", L, method=method) is not None:
            with pytest.raises(cat.NoBackendError):
                L.calculate_centrality(method, backend=b)
            continue
        got = L.calculate_centrality(method, backend=b)
        assert got.shape == L.shape and got.dtype == np.float64
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-9, atol=1e-12, err_msg=b)


@given(spec=lattice_specs(max_sites=120, max_dim=4))
def test_eigenvector_centrality_matches_networkx(spec):
    G = graph_of(spec)
    assume(G.number_of_nodes() >= 3 and nx.is_connected(G))
    L = make(spec)
    want_d = nx.eigenvector_centrality_numpy(G)
    sites = open_sites(spec)
    for b in available_backends():
        if declines(b, "centrality", L, method="eigenvector") is not None:
            continue
        got = L.calculate_centrality("eigenvector", backend=b).reshape(-1)
        assert np.isnan(got[np.setdiff1d(np.arange(L.n_points), sites)]).all()
        np.testing.assert_allclose(got[sites], [want_d[int(i)] for i in sites], atol=1e-8)
        assert np.linalg.norm(got[sites]) == pytest.approx(1.0)


def test_centrality_nan_on_blocked_and_reference_cases(backend, on_backend):
    mask = np.ones((5, 6), bool)
    mask[2, 1:5] = False
    L = cat.Lattice(shape=(5, 6), mask=mask)
    G = graph_of({"shape": (5, 6), "periodic": (False, False), "stencil": "von_neumann",
                  "mask": mask})
    for method in ("degree", "closeness"):
        got = on_backend(L.calculate_centrality, method)
        assert np.isnan(got[~mask]).all() and np.isfinite(got[mask]).all()
        want = CENTRALITY[method](G)
        np.testing.assert_allclose(got.reshape(-1)[np.flatnonzero(mask)],
                                   [want[int(i)] for i in np.flatnonzero(mask)], rtol=1e-12)


def test_centrality_large_lattice_agrees_across_backends():
    rng = np.random.default_rng(11)
    mask = rng.random((30, 29)) < 0.7
    L = cat.Lattice(shape=mask.shape, mask=mask, periodic=(True, False))
    ref = {m: L.calculate_centrality(m, backend="numpy") for m in ("degree", "closeness")}
    G = graph_of({"shape": mask.shape, "periodic": (True, False), "stencil": "von_neumann",
                  "mask": mask})
    cl = nx.closeness_centrality(G)
    want = [cl[int(i)] for i in np.flatnonzero(mask)]
    np.testing.assert_allclose(ref["closeness"][mask], want, rtol=1e-12)
    for b in available_backends():
        for m, want in ref.items():
            if declines(b, "centrality", L, method=m) is None:
                np.testing.assert_allclose(L.calculate_centrality(m, backend=b), want, rtol=1e-12)


# -- communities -----------------------------------------------------------------------------------
@given(
    spec=lattice_specs(max_sites=150, max_dim=3),
    method=st.sampled_from(["louvain", "label_propagation"]),
    seed=st.integers(0, 1000),
)
def test_communities_partition_and_modularity(spec, method, seed):
    check_communities(spec, method, seed)


@given(spec=lattice_specs(max_sites=30, max_dim=2))
def test_edge_betweenness_communities(spec):
    check_communities(spec, "edge_betweenness", 0)


def check_communities(spec, method, seed):
    L = make(spec, seed=seed)
    G = graph_of(spec)
    sites = open_sites(spec)
    for b in available_backends():
        if declines(b, "communities", L, method=method) is not None:
            with pytest.raises(cat.NoBackendError):
                L.find_communities(method, backend=b)
            continue
        com = L.find_communities(method, backend=b)
        assert isinstance(com, cat.Communities)
        assert com.labels.shape == L.shape
        flat = com.labels.reshape(-1)
        blocked = np.setdiff1d(np.arange(L.n_points), sites)
        assert (flat[blocked] == -1).all()
        assert (flat[sites] >= 0).all()
        assert set(flat[sites].tolist()) == set(range(com.count))
        parts = [set(np.flatnonzero(flat == k).tolist()) for k in range(com.count)]
        assert all(parts), "empty community"
        # numbered 0.. in order of lowest flat index
        assert [min(p) for p in parts] == sorted(min(p) for p in parts)
        q = nx.community.modularity(G, parts) if G.number_of_edges() else 0.0
        assert com.modularity == pytest.approx(q, abs=1e-12)
        # the same seed gives the same partition; the lattice seed is the default
        again = L.find_communities(method, seed=seed, backend=b)
        np.testing.assert_array_equal(again.labels, com.labels)
        assert again.modularity == com.modularity


def test_louvain_finds_planted_structure():
    """Two dense blocks joined by one bridge site: Louvain separates them."""
    mask = np.zeros((5, 11), bool)
    mask[:, :5] = True
    mask[:, 6:] = True
    mask[2, 5] = True
    L = cat.Lattice(shape=mask.shape, mask=mask, stencil="moore")
    com = L.find_communities("louvain", seed=3)
    assert com.count >= 2
    assert com.labels[0, 0] != com.labels[0, 10]
    G = graph_of({"shape": mask.shape, "periodic": (False, False), "stencil": "moore",
                  "mask": mask})
    parts = [set(np.flatnonzero(com.labels.reshape(-1) == k).tolist()) for k in range(com.count)]
    assert com.modularity == pytest.approx(nx.community.modularity(G, parts))
    assert com.modularity > 0.3


def test_eigenvector_centrality_on_degenerate_lattices():
    import networkx as nx

    blocked = cat.Lattice(shape=(3, 3), mask=np.zeros((3, 3), bool))
    assert np.isnan(blocked.calculate_centrality("eigenvector")).all()
    m = np.ones((3, 7), bool)
    m[:, 3] = False
    split = cat.Lattice(shape=(3, 7), mask=m)
    # NetworkX refuses too: the leading eigenvector is not unique
    with pytest.raises(nx.AmbiguousSolution):
        nx.eigenvector_centrality_numpy(split.to_networkx())
    with pytest.raises(ValueError, match="disconnected"):
        split.calculate_centrality("eigenvector")
