"""Bonds in the geometry: layout, packing, the neighbour set and explicit graphs with
closed bonds and bond weights (against a NetworkX graph built bond by bond), bad input,
and the router's refusal of every graph operation that does not honour bonds."""

from __future__ import annotations

import pickle

import networkx as nx
import numpy as np
import pytest
from hypothesis import example, given, settings

import catalytic as cat
from catalytic.errors import NoBackendError
from tests.support.oracles import bond_graph, forward_offsets
from tests.support.strategies import L1, L2, lattice_specs, make

SPECS = lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64)


def _edges(G):
    return sorted((min(u, v), max(u, v)) for u, v in G.edges)


# -- layout ------------------------------------------------------------------------------
@pytest.mark.parametrize("stencil, d, want", [
    ("von_neumann", 2, [(1, 0), (0, 1)]),
    ("moore", 2, [(0, 1), (1, -1), (1, 0), (1, 1)]),
    ("von_neumann", 3, [(1, 0, 0), (0, 1, 0), (0, 0, 1)]),
    ([[2, 1], [-2, -1], [0, -1], [0, 1]], 2, [(2, 1), (0, 1)]),
])
def test_bond_offsets_are_the_forward_half_in_stencil_order(stencil, d, want):
    L = cat.Lattice(shape=(3,) * d, stencil=stencil)
    assert [tuple(r) for r in L.bond_offsets.tolist()] == want
    assert want == forward_offsets(stencil, d)
    assert L.bonds is None and L.bond_weights is None


@given(spec=SPECS)
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=40, deadline=None)
def test_bonds_round_trip_and_pack_one_bit_each(spec):
    L = make(spec)
    assert np.array_equal(L.bonds, spec["bonds"])
    if spec.get("bond_weights") is not None:
        assert np.array_equal(L.bond_weights, spec["bond_weights"])
    g = L.geometry
    kf = len(g.bond_offsets)
    assert g.bond_bits.dtype == np.uint32 and g.bond_bits.size == kf * ((g.n_points + 31) // 32)
    assert g.bond_bits.nbytes <= kf * (g.n_points // 8 + 4)


# -- the neighbour graph ---------------------------------------------------------------------
@given(spec=SPECS)
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=60, deadline=None)
def test_neighbours_degree_adjacency_and_networkx_match_the_bond_graph(spec):
    L = make(spec)
    G = bond_graph(spec)
    for i in G.nodes:
        got = L.get_neighbors(int(i)).tolist()
        assert sorted(got) == sorted(G[i]), i
        assert len(set(got)) == len(got)
    deg = np.zeros(L.n_points, np.int64)
    for i in G.nodes:
        deg[i] = G.degree(i)
    assert L.geometry.degree().reshape(-1).tolist() == deg.tolist()
    A = L.geometry.adjacency()
    assert A.nnz == 2 * G.number_of_edges()
    assert _edges(nx.from_scipy_sparse_array(A)) == _edges(G)
    H = L.to_networkx()
    assert sorted(H.nodes) == sorted(G.nodes) and _edges(H) == _edges(G)
    if spec.get("bond_weights") is not None:
        for u, v, w in G.edges(data="weight"):
            assert H[u][v]["weight"] == w
        W = L.geometry.adjacency(weighted=True)
        for u, v, w in G.edges(data="weight"):
            assert W[u, v] == w and W[v, u] == w
    else:
        assert all("weight" not in a for _, _, a in H.edges(data=True))


def test_a_bond_across_the_seam_belongs_to_the_site_it_starts_from():
    bonds = np.ones((1, 5), bool)
    bonds[0, 4] = False  # 4 -> 0 across the seam
    L = cat.Lattice(shape=(5,), periodic=True, bonds=bonds)
    assert sorted(L.get_neighbors(0).tolist()) == [1]
    assert sorted(L.get_neighbors(4).tolist()) == [3]
    bonds[0, 4], bonds[0, 0] = True, False  # now 0 -> 1 is closed
    M = L.with_bonds(bonds)
    assert sorted(M.get_neighbors(0).tolist()) == [4]


def test_entries_of_bonds_leaving_an_open_axis_are_ignored():
    bonds = np.ones((1, 5), bool)
    L = cat.Lattice(shape=(5,), bonds=bonds)
    bonds[0, 4] = False  # the bond 4 -> 5 does not exist on an open axis
    M = cat.Lattice(shape=(5,), bonds=bonds)
    assert _edges(L.to_networkx()) == _edges(M.to_networkx())


def test_parallel_bonds_on_a_length_two_axis_make_one_edge_of_the_least_weight():
    # sites 0 and 1 of a periodic axis of length 2 are joined by two bonds
    g = cat.Lattice(shape=(2,), periodic=True, bond_weights=np.array([[3.0, 5.0]])).geometry
    assert g.adjacency(weighted=True).toarray().tolist() == [[0, 3], [3, 0]]
    # the first (direct) bond closed: the one across the seam still joins them
    h = g.with_bonds(np.array([[False, True]]))
    assert h.get_neighbors(0).tolist() == [1] and h.degree().tolist() == [1, 1]
    assert h.adjacency(weighted=True).toarray().tolist() == [[0, 5], [5, 0]]
    assert g.with_bonds(np.array([[False, False]])).degree().tolist() == [0, 0]


# -- with_bonds, copies, pickling ---------------------------------------------------------------
def test_with_bonds_shares_everything_else_and_copies_the_bonds():
    mask = np.ones((4, 4), bool)
    mask[1, 1] = False
    bw = np.full((2, 4, 4), 2.0)
    L = cat.Lattice(shape=(4, 4), mask=mask, weights=np.ones((4, 4)), bond_weights=bw, seed=7)
    bonds = np.zeros((2, 4, 4), bool)
    M = L.with_bonds(bonds)
    bonds[:] = True  # the caller's array is copied
    assert not M.bonds.any() and L.bonds is None
    assert M.geometry.mask is L.geometry.mask and M.geometry.bond_weights is L.geometry.bond_weights
    assert M.seed == 7 and M.geometry.degree().sum() == 0
    N = M.with_mask(None)
    assert N.geometry.bond_bits is M.geometry.bond_bits
    assert M.with_bonds(None).bonds is None
    with pytest.raises(ValueError):
        M.geometry.bond_bits[0] = 1  # read-only: device copies are cached


def test_a_lattice_with_bonds_pickles_with_them():
    bonds = np.random.default_rng(1).random((4, 3, 4)) < 0.5
    L = cat.Lattice(shape=(3, 4), stencil="moore", bonds=bonds,
                    bond_weights=np.full((4, 3, 4), 1.5))
    M = pickle.loads(pickle.dumps(L))
    assert np.array_equal(M.bonds, bonds) and np.array_equal(M.bond_weights, L.bond_weights)
    assert "bonds" in repr(L) and "bond-weighted" in repr(L)


def test_memory_figures_count_one_bit_per_bond():
    L = cat.Lattice(shape=(64, 64), bonds=np.ones((2, 64, 64), bool),
                    bond_weights=np.ones((2, 64, 64)))
    mem = L.estimate_memory_usage()
    assert mem["bonds"] == 2 * 64 * 64 // 8 and mem["bond_weights"] == 2 * 64 * 64 * 8


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, err, words", [
    ({"bonds": np.ones((2, 3, 3), int)}, TypeError, "bonds must be a boolean array"),
    ({"bonds": np.ones((4, 3, 3), bool)}, ValueError, "(2, 3, 3)"),
    ({"bonds": np.ones((3, 3), bool)}, ValueError, "one plane per forward offset"),
    ({"bond_weights": np.ones((2, 3, 3), complex)}, TypeError, "real numeric"),
    ({"bond_weights": np.ones((2, 3, 4))}, ValueError, "bond_weights has shape (2, 3, 4)"),
    ({"bond_weights": np.where(np.arange(18).reshape(2, 3, 3) == 5, -1.0, 1.0)}, ValueError,
     "negative value -1.0 at (plane, *coords) (0, 1, 2)"),
    ({"bond_weights": np.where(np.arange(18).reshape(2, 3, 3) == 9, np.nan, 1.0)}, ValueError,
     "NaN value nan at (plane, *coords) (1, 0, 0)"),
    ({"bond_weights": np.where(np.arange(18).reshape(2, 3, 3) == 0, np.inf, 1.0)}, ValueError,
     "inf value inf"),
    ({"bond_weights": np.full((2, 3, 3), 2.0**1020)}, ValueError, "sum to"),
])
def test_bad_bonds_are_refused_naming_the_argument_and_value(kw, err, words):
    with pytest.raises(err) as info:
        cat.Lattice(shape=(3, 3), **kw)
    assert words in str(info.value)


def test_with_bonds_checks_its_argument():
    L = cat.Lattice(shape=(3, 3))
    with pytest.raises(TypeError, match="boolean"):
        L.with_bonds(np.ones((2, 3, 3)))
    with pytest.raises(ValueError, match=r"\(2, 3, 3\)"):
        L.with_bonds(np.ones((2, 3), bool))


# -- operations that do not honour bonds refuse them --------------------------------------------
def test_graph_operations_without_a_bond_aware_implementation_refuse_bonds():
    registry = cat.get_engine().registry
    L = cat.Lattice(shape=(4, 4), bonds=np.ones((2, 4, 4), bool))
    for op, impls in registry.implementations.items():
        spec = registry.operations.get(op)
        if spec is None or not spec.topology or any(i.bonds for i in impls.values()):
            continue
        for backend in impls:
            assert not cat.get_engine().router.can_run(backend, (L,), {}, op), (op, backend)
    # one end to end: the error names the reason instead of ignoring the bonds
    if not any(i.bonds for i in registry.implementations["percolates"].values()):
        with pytest.raises(NoBackendError, match="does not honour bonds"):
            L.percolates(0)


def test_operations_on_data_alone_run_on_a_lattice_with_bonds():
    L = cat.Lattice(shape=(4, 4), bonds=np.zeros((2, 4, 4), bool))
    data = np.arange(8, dtype=np.uint8)
    assert np.array_equal(L.xor_transform(L.xor_transform(data)), data)
