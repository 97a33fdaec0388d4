"""Geometry: indexing, neighbour sets, degrees, explicit graphs (vs NetworkX and an
independent neighbour enumerator)."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import catalytic as cat
from tests.support.backends import available_backends
from tests.support.oracles import (
    coords_of,
    flat_index,
    grid_oracle,
    graph_of,
    moore_oracle,
    offsets_of,
    open_sites,
    oracle_graph,
    oracle_neighbors,
)
from tests.support.strategies import lattice_specs, make

KNIGHT = [(1, 2), (2, 1), (-1, 2), (-2, 1), (1, -2), (2, -1), (-1, -2), (-2, -1)]


# -- indexing ------------------------------------------------------------------------------
@given(spec=lattice_specs(masks=False), data=st.data())
def test_coords_index_round_trip_is_c_order(spec, data):
    L = make(spec)
    shape = spec["shape"]
    n = math.prod(shape)
    assert L.shape == shape and L.dimensions == len(shape) and L.n_points == n
    idx = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)))
    coords = L.index_to_coords(idx)
    assert coords.shape == (len(idx), len(shape))
    assert [tuple(c) for c in coords.tolist()] == [coords_of(int(i), shape) for i in idx]
    back = L.coords_to_index(coords)
    assert back.tolist() == idx.tolist()
    assert back.tolist() == np.ravel_multi_index(coords.T, shape).tolist()
    # scalar forms
    i = int(idx[0])
    c = L.index_to_coords(i)
    assert c.shape == (len(shape),)
    j = L.coords_to_index(tuple(int(x) for x in c))
    assert isinstance(j, int) and j == i == flat_index(c.tolist(), shape)


def test_full_index_table_matches_numpy_unravel():
    L = cat.Lattice(shape=(3, 1, 4, 2))
    coords = L.index_to_coords(np.arange(L.n_points))
    assert coords.tolist() == np.argwhere(np.ones(L.shape, bool)).tolist()  # C order
    assert L.coords_to_index(coords).tolist() == list(range(L.n_points))


# -- neighbour sets ---------------------------------------------------------------------------
@given(spec=lattice_specs())
def test_get_neighbors_matches_independent_enumerator(spec):
    L = make(spec)
    off = offsets_of(spec["stencil"], len(spec["shape"]))
    for i in open_sites(spec):
        got = L.get_neighbors(int(i))
        assert got.dtype.kind == "i"
        want = oracle_neighbors(spec["shape"], spec["periodic"], off, spec["mask"], int(i))
        assert sorted(got.tolist()) == sorted(want)
        assert len(set(got.tolist())) == len(got), "duplicate neighbour"
        assert int(i) not in got.tolist(), "self-loop"


@given(spec=lattice_specs(stencils=("von_neumann",)))
def test_von_neumann_neighbours_match_networkx_grid_graph(spec):
    L = make(spec)
    G = grid_oracle(spec["shape"], spec["periodic"], spec["mask"])
    for i in open_sites(spec):
        assert sorted(L.get_neighbors(int(i)).tolist()) == sorted(G.neighbors(int(i)))
    # coordinates are accepted as well as flat indices
    i = int(open_sites(spec)[-1])
    c = tuple(coords_of(i, spec["shape"]))
    assert sorted(L.get_neighbors(c).tolist()) == sorted(G.neighbors(i))


@given(spec=lattice_specs(stencils=("moore",), max_dim=3))
def test_moore_neighbours_match_strong_product(spec):
    L = make(spec)
    G = moore_oracle(spec["shape"], spec["periodic"], spec["mask"])
    for i in open_sites(spec):
        assert sorted(L.get_neighbors(int(i)).tolist()) == sorted(G.neighbors(int(i)))


@given(spec=lattice_specs())
def test_degree_matches_oracle_on_every_backend(spec):
    L = make(spec)
    G = graph_of(spec, all_nodes=True)
    want = np.array([G.degree(i) for i in range(L.n_points)]).reshape(spec["shape"])
    for b in available_backends():
        deg = L.run("degree", backend=b)
        assert deg.shape == L.shape
        np.testing.assert_array_equal(deg, want, err_msg=f"backend {b}")


@given(spec=lattice_specs())
def test_adjacency_matrix_sparse_and_dense(spec):
    L = make(spec)
    G = graph_of(spec, all_nodes=True)
    want = nx.to_scipy_sparse_array(G, nodelist=range(L.n_points), dtype=np.int64).toarray()
    A = L.get_adjacency_matrix()
    assert sp.issparse(A) and A.format == "csr"
    np.testing.assert_array_equal(A.toarray(), want)
    D = L.get_adjacency_matrix(dense=True)
    assert isinstance(D, np.ndarray) and D.shape == (L.n_points, L.n_points)
    np.testing.assert_array_equal(D, want)
    assert not np.any(np.diag(D)), "self-loop in adjacency"
    np.testing.assert_array_equal(D, D.T)


@given(spec=lattice_specs(stencils=("von_neumann",)))
def test_adjacency_matches_networkx_grid_graph(spec):
    """Under the node mapping coords -> flat index (C order)."""
    L = make(spec)
    G = grid_oracle(spec["shape"], spec["periodic"], spec["mask"])
    G.add_nodes_from(range(L.n_points))  # blocked sites: empty rows
    want = nx.to_scipy_sparse_array(G, nodelist=range(L.n_points), dtype=np.int64)
    assert (L.get_adjacency_matrix() != want).nnz == 0


@given(spec=lattice_specs(weights=True))
def test_to_networkx_nodes_edges_and_attributes(spec):
    L = make(spec)
    H = L.to_networkx()
    G = graph_of(spec)
    assert set(H.nodes) == set(G.nodes)
    assert {frozenset(e) for e in H.edges} == {frozenset(e) for e in G.edges}
    w = spec["weights"].reshape(-1)
    for i, attrs in H.nodes(data=True):
        assert attrs["coords"] == coords_of(i, spec["shape"])
        assert attrs["weight"] == w[i]
    assert nx.number_of_selfloops(H) == 0


def test_to_networkx_unweighted_has_coords_only():
    L = cat.Lattice(shape=(2, 3))
    H = L.to_networkx()
    assert dict(H.nodes(data=True))[5] == {"coords": (1, 2)}
    assert H.number_of_edges() == 7


# -- small periodic axes: no self-loops, no duplicates ---------------------------------------
@pytest.mark.parametrize(
    "shape, stencil, deg",
    [
        ((1,), "von_neumann", 0),
        ((2,), "von_neumann", 1),
        ((3,), "von_neumann", 2),
        ((1, 5), "von_neumann", 2),
        ((2, 2), "von_neumann", 2),
        ((2, 5), "von_neumann", 3),
        ((1, 1, 1), "moore", 0),
        ((2, 2), "moore", 3),
        ((2, 3), "moore", 5),
        ((3, 3), "moore", 8),
        ((2, 2, 2), "moore", 7),
        ((1, 2, 3), "moore", 5),
    ],
)
def test_small_periodic_axes_dedupe_rule(shape, stencil, deg, backend):
    L = cat.Lattice(shape=shape, periodic=True, stencil=stencil)
    n = L.n_points
    for i in range(n):
        nb = L.get_neighbors(i).tolist()
        assert len(nb) == deg == len(set(nb)) and i not in nb
    np.testing.assert_array_equal(L.run("degree", backend=backend), np.full(shape, deg))
    D = L.get_adjacency_matrix(dense=True)
    assert D.max(initial=0) <= 1 and not np.diag(D).any()
    assert int(D.sum()) == n * deg
    G = oracle_graph(shape, True, stencil, all_nodes=True)
    np.testing.assert_array_equal(D, nx.to_numpy_array(G, nodelist=range(n), dtype=np.int64))
    # paths see the same graph
    want = nx.single_source_shortest_path_length(G, 0)
    got = L.distance_field(0, backend=backend).reshape(-1)
    assert {i: int(got[i]) for i in range(n) if got[i] >= 0} == want


# -- custom stencils ------------------------------------------------------------------------
@pytest.mark.parametrize("periodic", [False, True, (True, False)])
@pytest.mark.parametrize("shape", [(5, 7), (4, 4), (3, 9), (8, 1)])
def test_knight_moves(shape, periodic, backend):
    L = cat.Lattice(shape=shape, periodic=periodic, stencil=np.array(KNIGHT))
    assert L.stencil == "custom"
    assert {tuple(r) for r in L.offsets.tolist()} == set(KNIGHT)
    G = oracle_graph(shape, periodic, KNIGHT, all_nodes=True)
    for i in range(L.n_points):
        nb = L.get_neighbors(i).tolist()
        assert sorted(nb) == sorted(G.neighbors(i)) and len(nb) == len(set(nb))
    want_deg = np.array([G.degree(i) for i in range(L.n_points)]).reshape(shape)
    np.testing.assert_array_equal(L.run("degree", backend=backend), want_deg)
    got = L.distance_field(0, backend=backend).reshape(-1)
    want = nx.single_source_shortest_path_length(G, 0)
    np.testing.assert_array_equal(got, [want.get(i, -1) for i in range(L.n_points)])


def test_custom_stencil_1d_long_range(backend):
    # offsets +-1 and +-3 on an open 1-D line, given as a flat 1-D array
    L = cat.Lattice(shape=(10,), stencil=np.array([-3, -1, 1, 3]))
    G = oracle_graph((10,), False, [[-3], [-1], [1], [3]])
    assert sorted(L.get_neighbors(4).tolist()) == [1, 3, 5, 7]
    want = nx.single_source_shortest_path_length(G, 0)
    got = L.distance_field(0, backend=backend)
    assert got.tolist() == [want[i] for i in range(10)]


def test_custom_stencil_float_integers_accepted():
    L = cat.Lattice(shape=(4, 4), stencil=np.array([[0.0, 1.0], [0.0, -1.0]]))
    assert sorted(L.get_neighbors(5).tolist()) == [4, 6]


def test_named_stencil_offsets():
    for d in (1, 2, 3, 4):
        for name in ("von_neumann", "moore"):
            L = cat.Lattice(shape=(3,) * d, stencil=name)
            assert L.stencil == name
            assert {tuple(r) for r in L.offsets.tolist()} == {
                tuple(r) for r in offsets_of(name, d).tolist()
            }
    assert len(cat.Lattice(shape=(3,) * 3, stencil="moore").offsets) == 26


# -- older API, aliases, housekeeping -------------------------------------------------------
def test_older_constructor_api():
    L = cat.UnifiedCatalyticLattice(dimensions=3, size=4)
    assert L.shape == (4, 4, 4) and L.dimensions == 3 and L.n_points == 64
    assert L.periodic == (False, False, False) and L.stencil == "von_neumann"
    assert cat.UnifiedCatalyticLattice(size=(2, 5)).shape == (2, 5)
    assert cat.UnifiedCatalyticLattice(dimensions=2, size=[3, 6]).shape == (3, 6)
    assert cat.Lattice is cat.UnifiedCatalyticLattice
    assert isinstance(cat.Lattice(shape=(2,)), cat.UnifiedCatalyticLattice)


def test_periodic_per_axis_and_numpy_integer_shape():
    L = cat.Lattice(shape=(3, 4), periodic=[True, False])
    assert L.periodic == (True, False)
    M = cat.Lattice(shape=np.array([3, 5]), periodic=np.array([False, True]))
    assert M.shape == (3, 5) and M.periodic == (False, True)
    assert all(type(s) is int for s in M.shape)


def test_build_lattice_and_context_manager():
    L = cat.Lattice(shape=(3, 3), mask=np.eye(3, dtype=bool))
    assert L.build_lattice() is L
    assert L.n_open == 3
    with cat.Lattice(shape=(4,)) as M:
        assert isinstance(M, cat.Lattice)
        assert M.distance_field(0).tolist() == [0, 1, 2, 3]


def test_memory_figures_are_real_byte_counts():
    m = np.ones((10, 20), bool)
    w = np.ones((10, 20))
    L = cat.Lattice(shape=(10, 20), mask=m, weights=w, aux_memory_size=333)
    mem = L.estimate_memory_usage()
    assert mem["mask"] == m.nbytes and mem["weights"] == w.nbytes and mem["aux"] == 333
    # structure = the stencil table (4 offsets x 2 axes) + strides + shape, and the bond
    # tables (2 forward offsets x 2 axes, one slot per offset), int64 each
    table = (4 * 2 + 2 + 2 + 2 * 2 + 4) * 8
    assert mem["structure"] == table
    assert mem["bonds"] == 0 and mem["bond_weights"] == 0
    assert mem["total_held"] == table + m.nbytes + w.nbytes + 333
    met = L.get_metrics()
    assert (met.n_points, met.n_open, met.n_blocked) == (200, 200, 0)
    assert met.total_bytes == mem["total_held"] and met.process_rss > 0


def test_mask_and_weights_are_read_only():
    """Backends cache device copies of the mask and weights; an edit in place would leave
    them stale, so the geometry's arrays (and their views) refuse it."""
    rng = np.random.default_rng(0)
    mask = rng.random((4, 5)) > 0.3
    weights = rng.random((4, 5))
    L = cat.Lattice(shape=(4, 5), mask=mask, weights=weights)
    g = L.geometry
    for a in (g.mask, g.weights, g.open_flat, g.weights.reshape(-1), g.mask.reshape(-1)):
        assert not a.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0
    # the user's arrays stay theirs and writable; the geometry copied them
    mask[0, 0] = not mask[0, 0]
    weights[0, 0] = 9.0
    assert g.mask[0, 0] != mask[0, 0] and g.weights[0, 0] != 9.0
    # the lattice's own properties are writable copies
    m = L.mask
    m[0, 0] = not m[0, 0]
    assert m[0, 0] != g.mask[0, 0]
    np.testing.assert_array_equal(g.open_flat, g.mask.reshape(-1))
    assert cat.Lattice(shape=(3,)).geometry.open_flat.flags.writeable is False


# -- empty stencils and zero-size lattices (issue 23, item 18) -----------------------------------
@pytest.mark.parametrize("stencil", [np.zeros((0, 2), int), [], np.zeros((0, 2)), ()])
def test_empty_stencil_gives_no_neighbours(stencil):
    L = cat.Lattice(shape=(3, 4), stencil=stencil, periodic=(True, False))
    assert L.geometry.offsets.shape == (0, 2) and L.stencil == "custom"
    assert all(L.get_neighbors(i).size == 0 for i in range(L.n_points))
    assert L.get_adjacency_matrix().nnz == 0
    H = L.to_networkx()
    assert H.number_of_nodes() == 12 and H.number_of_edges() == 0
    for b in available_backends():
        np.testing.assert_array_equal(L.run("degree", backend=b), np.zeros((3, 4), np.int64))
        f = np.arange(12.0).reshape(3, 4)
        np.testing.assert_array_equal(L.laplacian(f, backend=b), np.zeros((3, 4)))
    info = L.analyze_structure()
    assert (info["edges"], info["n_components"], info["diameter"]) == (0, 12, 0)


@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 0, 3)])
@pytest.mark.parametrize("periodic", [False, True])
def test_zero_size_lattice(shape, periodic):
    """An axis of 0 sites is a lattice with no site (NumPy's and SciPy's zero-size
    arrays): every per-site result is empty in the lattice's shape, and a site is out
    of range."""
    L = cat.Lattice(shape=shape, periodic=periodic)
    assert L.shape == shape and L.n_points == 0 and L.geometry.n_open == 0
    with pytest.raises(IndexError, match="out of range"):
        L.index_to_coords(0)
    with pytest.raises(IndexError, match="out of range"):
        L.coords_to_index((0,) * len(shape))
    with pytest.raises(IndexError, match="out of range for 0 sites"):
        L.get_neighbors(0)
    assert L.get_adjacency_matrix().shape == (0, 0)
    assert L.get_adjacency_matrix(dense=True).shape == (0, 0)
    assert L.to_networkx().number_of_nodes() == 0
    info = L.analyze_structure()
    assert (info["vertices"], info["edges"], info["n_components"], info["diameter"]) == (0, 0, 0, 0)
    assert math.isnan(L.get_metrics().bytes_per_site)
    for b in available_backends():
        assert L.run("degree", backend=b).shape == shape
        assert L.laplacian(np.zeros(shape), backend=b).shape == shape
        assert L.diffuse(np.zeros(shape), 2, 0.1, backend=b).shape == shape
    with pytest.raises(ValueError, match="positive"):  # the older API keeps size >= 1
        cat.UnifiedCatalyticLattice(dimensions=2, size=0)


# -- weights whose sums could overflow (issue 23, item 5) -------------------------------------------
def test_weights_whose_path_sums_could_overflow_are_refused():
    """The issue's case: a connected 1 x 5 lattice with three sites of 1e308 made every
    path past them cost inf, which reads as unreachable. Such weights are refused, with
    the reason, before any operation can run."""
    w = np.array([[1, 1e308, 1e308, 1e308, 1.0]])
    with pytest.raises(ValueError, match=r"weights sum to inf, more than 2\*\*1022") as info:
        cat.Lattice(shape=(1, 5), weights=w)
    assert "overflow" in str(info.value) and "unreachable" in str(info.value)
    # finite sums past the limit too, and blocked sites count (with_mask may open them)
    w = np.full((1, 5), 2.0**1021)
    with pytest.raises(ValueError, match="sum to 1.12"):
        cat.Lattice(shape=(1, 5), weights=w, mask=np.array([[1, 1, 0, 0, 0]], bool))
    # at the limit exactly: accepted
    w = np.array([[0, 2.0**1020, 2.0**1020, 2.0**1020, 2.0**1020]])
    assert cat.Lattice(shape=(1, 5), weights=w).weights.sum() == 2.0**1022
