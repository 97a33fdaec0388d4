"""The numba-cpu traversals honour bonds: distance fields (BFS, and Dijkstra with bond
and site weights, a step ``u -> v`` costing ``bond weight + weights[v]``), shortest
paths, path counts, catalytic paths, closeness and betweenness, and the batched
distance fields, against graphs built bond by bond (``tests.support.oracles``, no
catalytic code) with NetworkX on small lattices and SciPy's csgraph on larger ones that
reach the padded, portal, unpadded and multi-threaded kernel paths."""

from __future__ import annotations

import collections
import math

import networkx as nx
import numba
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import dijkstra as cs_dijkstra

import catalytic as cat
from catalytic.backends import numba_cpu
from catalytic.errors import NoBackendError
from catalytic.kernels.cpu import _budget, _padded, bfs
from catalytic.kernels.cpu import centrality as CC
from tests.support.oracles import bond_graph, open_sites, step_cost_digraph, usable_bonds
from tests.support.strategies import L1, L2, lattice_specs, make, pick_open

CPU = "numba-cpu"
SPECS = lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64)
# site weights too (the strategy then always draws them)
WSPECS = lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64, weights=True)
ANY = st.one_of(SPECS, WSPECS)
# L2 with site weights, and with its bonds but no bond weights
L2W = {**L2, "weights": np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])}
L2M = {**L2, "bond_weights": None}


def _weighted(spec) -> bool:
    return spec.get("weights") is not None or spec.get("bond_weights") is not None


def _oracle_distances(spec, G, src) -> np.ndarray:
    """Hops (-1 unreachable) or costs (inf) from ``src`` on the bond graph ``G``."""
    n = math.prod(spec["shape"])
    if _weighted(spec):
        out = np.full(n, np.inf)
        D = step_cost_digraph(G, spec.get("weights"))
        for v, d in nx.single_source_dijkstra_path_length(D, src).items():
            out[v] = d
        return out
    out = np.full(n, -1, dtype=np.int64)
    for v, d in nx.single_source_shortest_path_length(G, src).items():
        out[v] = d
    return out


def _step_cost(spec, G, u, v) -> float:
    w = spec.get("weights")
    return G[u][v]["weight"] + (0.0 if w is None else float(w.reshape(-1)[v]))


def _check_distances(spec, got, want):
    if _weighted(spec):
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-12, atol=0)
    else:
        assert got.reshape(-1).tolist() == want.tolist()


# -- distance fields ----------------------------------------------------------------------
@given(spec=ANY, data=st.data())
@example(spec=L2, data=None)
@example(spec=L2W, data=None)
@example(spec=L2M, data=None)
@example(spec=L1, data=None)
@settings(max_examples=40, deadline=None)
def test_distance_field_matches_the_bond_graph(spec, data):
    L = make(spec)
    G = bond_graph(spec)
    src = pick_open(spec, data) if data is not None else 0
    got = L.distance_field(src, backend=CPU)
    _check_distances(spec, got, _oracle_distances(spec, G, src))


def test_the_first_usable_of_parallel_bonds_joins_the_sites():
    # sites 0 and 1 of a periodic axis of length 2 are joined by the direct bond
    # (bond (0, 0)) and the one across the seam (bond (0, 1))
    closed_first = np.array([[False, True]])
    L = cat.Lattice(shape=(2,), periodic=True, bonds=closed_first)
    assert L.distance_field(0, backend=CPU).tolist() == [0, 1]
    assert L.find_shortest_path(0, 1, backend=CPU).path.tolist() == [0, 1]
    assert L.count_shortest_paths(0, 1, backend=CPU) == 1
    assert L.find_path_catalytic(0, 1, backend=CPU).path.tolist() == [0, 1]
    W = cat.Lattice(shape=(2,), periodic=True, bonds=closed_first,
                    bond_weights=np.array([[3.0, 5.0]]))
    assert W.distance_field(0, backend=CPU).tolist() == [0.0, 5.0]
    assert W.with_bonds(None).distance_field(1, backend=CPU).tolist() == [3.0, 0.0]
    r = W.with_bonds(None).find_shortest_path(1, 0, backend=CPU)
    assert r.path.tolist() == [1, 0] and r.distance == 3.0
    # both closed: apart; a 2 x 2 Moore torus where four bonds join each pair
    assert L.with_bonds(np.array([[False, False]])).distance_field(0, backend=CPU).tolist() \
        == [0, -1]
    M = cat.Lattice(shape=(2, 2), periodic=True, stencil="moore",
                    bonds=np.zeros((4, 2, 2), bool))
    bonds = np.zeros((4, 2, 2), bool)
    bonds[2, 1, 1] = True  # (1, 1) -> (2, 1) = (0, 1): the seam copy of the (1,0) bond
    assert M.with_bonds(bonds).distance_field(1, backend=CPU).reshape(-1).tolist() == \
        [-1, 0, -1, 1]
    assert M.with_bonds(bonds).count_shortest_paths(1, 3, backend=CPU) == 1


# -- shortest paths -----------------------------------------------------------------------
@given(spec=ANY, data=st.data())
@example(spec=L2, data=None)
@example(spec=L2W, data=None)
@example(spec=L2M, data=None)
@example(spec=L1, data=None)
@settings(max_examples=40, deadline=None)
def test_shortest_path_is_a_tight_walk_of_the_bond_graph_by_the_tie_rule(spec, data):
    L = make(spec)
    G = bond_graph(spec)
    if data is None:
        s, e = 0, int(max(G.nodes))
    else:
        s, e = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    want = _oracle_distances(spec, G, s)
    r = L.find_shortest_path(s, e, backend=CPU)
    path = r.path.tolist()
    if not (np.isfinite(want[e]) and want[e] >= 0):
        assert path == [] and r.distance == (np.inf if _weighted(spec) else -1)
        return
    assert path[0] == s and path[-1] == e and len(set(path)) == len(path)
    assert all(G.has_edge(u, v) for u, v in zip(path, path[1:]))
    if not _weighted(spec):
        assert r.distance == len(path) - 1 == want[e]
        # the tie rule: each step back goes to the in-neighbour of smallest index
        for u, v in zip(path, path[1:]):
            assert u == min(x for x in G[v] if want[x] == want[v] - 1)
        return
    # the cost is the left-to-right sum of the step costs, each step tight on the
    # search's own costs (checked against Dijkstra above)
    D = L.distance_field(s, backend=CPU).reshape(-1)
    cost = 0.0
    for u, v in zip(path, path[1:]):
        c = _step_cost(spec, G, u, v)
        assert D[u] + c == D[v]
        cost += c
        # the tie rule where v has no plateau in-step: the tight in-neighbour of
        # smallest index
        tight = [x for x in G[v] if D[x] + _step_cost(spec, G, x, v) == D[v]]
        if all(D[x] < D[v] for x in tight):
            assert u == min(tight)
    assert r.distance == cost == D[e]
    np.testing.assert_allclose(r.distance, want[e], rtol=1e-12)


def test_the_hop_walk_back_skips_a_closed_bond_to_a_smaller_neighbour():
    # 3 x 3: the centre 4 is two hops from 0 by 1 and by 3; the bond 1 -> 4 is closed,
    # so the walk back from 4 must take 3 although 1 is the smaller index
    bonds = np.ones((2, 3, 3), bool)
    bonds[0, 0, 1] = False  # forward offset (1, 0) from (0, 1) = site 1
    L = cat.Lattice(shape=(3, 3), bonds=bonds)
    assert L.distance_field(0, backend=CPU).reshape(-1)[4] == 2
    assert L.find_shortest_path(0, 4, backend=CPU).path.tolist() == [0, 3, 4]
    # the weighted walk back: the same tie at cost 2
    W = cat.Lattice(shape=(3, 3), bonds=bonds, weights=np.ones((3, 3)))
    assert W.find_shortest_path(0, 4, backend=CPU).path.tolist() == [0, 3, 4]


def test_an_entry_into_a_plateau_pays_the_bond_weight():
    # a ring 0-1-2-3-0: 0 -> 3 costs 1 and 3 -> 2 costs 2**-53, absorbed (a plateau at
    # cost 1); 1 is at 1 - 2**-53 and 1 -> 2 would reach exactly 1 on the site weight
    # alone, but its bond weighs 1: 2 is no entry of the plateau, its depth is 1
    eps = 2.0**-53
    bw = np.array([[1 - eps, 1.0, 0.0, 1.0]])  # bonds 0-1, 1-2, 2-3, 3-0 (the seam)
    w = np.array([0.0, 0.0, eps, 0.0])
    L = cat.Lattice(shape=(4,), periodic=True, weights=w, bond_weights=bw)
    assert L.distance_field(0, backend=CPU).tolist() == [0.0, 1 - eps, 1.0, 1.0]
    r = L.find_shortest_path(0, 2, backend=CPU)
    assert r.path.tolist() == [0, 3, 2] and r.distance == 1.0


def test_a_closed_bond_makes_no_entry_into_a_plateau():
    # the ring of the test above: 1 -> 2 would be a rising step to cost 1 (0.5 + 0.5),
    # but its bond is closed, so 2 is reached on the plateau from 3
    bonds = np.array([[True, False, True, True]])
    bw = np.array([[0.5, 0.5, 0.0, 1.0]])
    L = cat.Lattice(shape=(4,), periodic=True, bonds=bonds, bond_weights=bw)
    assert L.distance_field(0, backend=CPU).tolist() == [0.0, 0.5, 1.0, 1.0]
    r = L.find_shortest_path(0, 2, backend=CPU)
    assert r.path.tolist() == [0, 3, 2] and r.distance == 1.0


@pytest.mark.parametrize("bond_1_4", ["closed", "weight 2"])
def test_plateau_depths_follow_only_free_open_bonds(bond_1_4):
    # 2 x 3: 0 -> 1 costs 1, then a plateau 1 -> 2 -> 5 -> 4 of free bonds; the bond
    # 1 -> 4 (closed, or costing 2) gives 4 no depth 1: the walk back from 4 goes
    # round the plateau
    bonds = np.ones((2, 2, 3), bool)
    bw = np.zeros((2, 2, 3))
    bw[0, 0, 0] = 5.0  # 0 -> 3
    bw[1, 0, 0] = 1.0  # 0 -> 1
    if bond_1_4 == "closed":
        bonds[0, 0, 1] = False
    else:
        bw[0, 0, 1] = 2.0
    L = cat.Lattice(shape=(2, 3), bonds=bonds, bond_weights=bw)
    assert L.distance_field(0, backend=CPU).tolist() == [[0, 1, 1], [1, 1, 1]]
    r = L.find_shortest_path(0, 4, backend=CPU)
    assert r.path.tolist() == [0, 1, 2, 5, 4] and r.distance == 1.0


def test_plateaus_of_zero_bond_weights_walk_by_depth():
    # a row of 5 sites where crossing every bond is free but the middle site costs 1:
    # the costs are 0,0,1,1,1 and the walk from 4 back to 0 crosses the plateau 2..4
    bw = np.zeros((1, 5))
    w = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    L = cat.Lattice(shape=(5,), weights=w, bond_weights=bw)
    r = L.find_shortest_path(0, 4, backend=CPU)
    assert r.path.tolist() == [0, 1, 2, 3, 4] and r.distance == 1.0
    # a bond weight raises the end of the plateau: 3 -> 4 costs 2 now
    bw[0, 3] = 2.0
    r = cat.Lattice(shape=(5,), weights=w, bond_weights=bw).find_shortest_path(
        0, 4, backend=CPU)
    assert r.path.tolist() == [0, 1, 2, 3, 4] and r.distance == 3.0


# -- path counts --------------------------------------------------------------------------
@given(spec=SPECS, data=st.data())
@example(spec=L2M, data=None)
@example(spec=L1, data=None)
@settings(max_examples=30, deadline=None)
def test_count_shortest_paths_matches_networkx(spec, data):
    spec = {**spec, "bond_weights": None}
    L = make(spec)
    G = bond_graph(spec)
    if data is None:
        s, e = 0, int(max(G.nodes))
    else:
        s, e = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    want = sum(1 for _ in nx.all_shortest_paths(G, s, e)) if nx.has_path(G, s, e) else 0
    assert L.count_shortest_paths(s, e, backend=CPU) == want


def test_path_counts_past_int64_are_recounted_over_the_open_bonds():
    # 40 x 40 corner to corner with the bond (0, 0) -> (1, 0) closed: every path starts
    # with (0, 0) -> (0, 1), C(77, 38) of them, more than 2**63
    bonds = np.ones((2, 40, 40), bool)
    bonds[0, 0, 0] = False
    L = cat.Lattice(shape=(40, 40), bonds=bonds)
    assert L.count_shortest_paths(0, L.n_points - 1, backend=CPU) == math.comb(77, 38)


def test_weighted_path_counts_are_refused_with_bond_weights_as_with_site_weights():
    L = cat.Lattice(shape=(3, 3), bond_weights=np.ones((2, 3, 3)))
    with pytest.raises(NoBackendError, match="weighted path counting"):
        L.count_shortest_paths(0, 8, backend=CPU)


# -- catalytic paths ----------------------------------------------------------------------
@given(spec=SPECS, data=st.data())
@example(spec=L2M, data=None)
@example(spec=L1, data=None)
@settings(max_examples=25, deadline=None)
def test_catalytic_path_follows_the_open_bonds(spec, data):
    spec = {**spec, "bond_weights": None, "weights": None}
    L = make(spec)
    G = bond_graph(spec)
    if data is None:
        s, e = 0, int(max(G.nodes))
    else:
        s, e = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    aux = np.random.default_rng(0).integers(0, 256, L.n_points + 7, dtype=np.uint8)
    before = aux.copy()
    r = L.find_path_catalytic(s, e, aux, backend=CPU)
    assert np.array_equal(aux, before)
    want = L.find_shortest_path(s, e, backend=CPU)
    assert r.path.tolist() == want.path.tolist() and r.distance == want.distance
    if nx.has_path(G, s, e):
        assert r.distance == nx.shortest_path_length(G, s, e)
        assert all(G.has_edge(u, v) for u, v in zip(r.path, r.path[1:]))
    else:
        assert r.distance == -1


def test_catalytic_paths_refuse_bond_weights():
    L = cat.Lattice(shape=(3, 3), bond_weights=np.ones((2, 3, 3)))
    with pytest.raises(ValueError, match="bond weights"):  # refused before routing
        L.find_path_catalytic(0, 8, backend=CPU)


# -- centrality ---------------------------------------------------------------------------
def _as_array(values, n, sites):
    out = np.full(n, np.nan)
    out[sites] = [values[int(i)] for i in sites]
    return out


@given(spec=SPECS)
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=25, deadline=None)
def test_centrality_matches_networkx_on_the_bond_graph(spec):
    # hop centralities: the bond mask counts, bond weights do not (as site weights)
    L = make(spec)
    G = bond_graph(spec)
    n, sites = L.n_points, open_sites(spec)
    got = L.calculate_centrality("closeness", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, _as_array(nx.closeness_centrality(G), n, sites),
                               rtol=1e-12, atol=1e-15)
    got = L.calculate_centrality("betweenness", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, _as_array(nx.betweenness_centrality(G), n, sites),
                               rtol=1e-9, atol=1e-12)
    got = L.calculate_centrality("degree", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, _as_array(nx.degree_centrality(G), n, sites), rtol=1e-12)


@pytest.mark.parametrize("kernel", ["bit-parallel", "one search per source"])
def test_centrality_on_two_threads_matches_networkx(kernel, threaded, monkeypatch):
    # 300 open sites: two batches of 256 sources for the bit-parallel closeness
    if kernel != "bit-parallel":
        monkeypatch.setattr(CC, "_BITS_BYTES", 1)
    rng = np.random.default_rng(3)
    spec = {"shape": (18, 19), "periodic": (True, False), "stencil": "moore",
            "mask": rng.random((18, 19)) < 0.9, "weights": None,
            "bonds": rng.random((4, 18, 19)) < 0.6, "bond_weights": None}
    L = make(spec)
    G = bond_graph(spec)
    n, sites = L.n_points, open_sites(spec)
    got = L.calculate_centrality("closeness", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, _as_array(nx.closeness_centrality(G), n, sites),
                               rtol=1e-12, atol=1e-15)
    if kernel == "bit-parallel":
        got = L.calculate_centrality("betweenness", k=40, seed=2, backend=CPU).reshape(-1)
        want = nx.betweenness_centrality(G, k=40, seed=2)
        np.testing.assert_allclose(got, _as_array(want, n, sites), rtol=1e-9, atol=1e-12)


# -- batched distance fields --------------------------------------------------------------
@given(spec=SPECS, data=st.data())
@example(spec=L2, data=None)
@example(spec=L1, data=None)
@settings(max_examples=20, deadline=None)
def test_batched_distance_fields_match_each_bond_graph(spec, data):
    # batched fields are hop counts: bond weights, like site weights, run one by one
    spec = {**spec, "weights": None, "bond_weights": None}
    L = make({**spec, "mask": None})
    rng = np.random.default_rng(0 if data is None else data.draw(st.integers(0, 99)))
    stack = rng.random((3,) + tuple(spec["shape"])) < 0.8
    stack.reshape(3, -1)[:, 0] = True
    rows = cat.get_engine().run("batched.distance_field", L, stack, [0], backend=CPU)
    for row, got in zip(stack, rows):
        one = {**spec, "mask": row}
        _check_distances(one, got, _oracle_distances(one, bond_graph(one), 0))


def test_batched_distance_fields_refuse_bond_weights():
    L = cat.Lattice(shape=(3, 3), bond_weights=np.ones((2, 3, 3)))
    with pytest.raises(ValueError, match="unweighted"):
        cat.get_engine().run("batched.distance_field", L, np.ones((2, 9), bool), [0],
                             backend=CPU)


# -- larger lattices: padded, portal, unpadded and multi-threaded paths -------------------
def _cs_matrix(spec, G):
    """The step-cost matrix of the bond graph ``G`` (``u -> v``: its bond weight plus
    ``weights[v]``), built from the oracle's edges."""
    n = math.prod(spec["shape"])
    w = spec.get("weights")
    rows, cols, vals = [], [], []
    for u, v, b in G.edges(data="weight"):
        for a, z in ((u, v), (v, u)):
            rows.append(a)
            cols.append(z)
            vals.append(b + (0.0 if w is None else float(w.reshape(-1)[z])))
    return sp.csr_array((vals, (rows, cols)), shape=(n, n))


def _large(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    if name == "2d-60":
        shape, per, stencil = (60, 60), (False, True), "von_neumann"
    elif name == "2d-64-open":  # no portals: the bond loops of padded mode 1
        shape, per, stencil = (64, 61), False, "von_neumann"
    elif name == "3d-14-moore":
        shape, per, stencil = (14, 14, 14), (True, False, True), "moore"
    elif name == "2d-48":  # more than 32 steps: two bond words per cell
        shape, per = (9, 11), (True, False)
        stencil = np.array([o for o in np.ndindex(7, 7) if o != (3, 3)]) - 3
    else:  # "unpadded": tiny periodic axes, so the kernels step by coordinates
        shape, per, stencil = (2, 2, 2, 2, 2, 2, 2, 2, 2, 3), True, "von_neumann"
    kf = len(cat.Lattice(shape=shape, periodic=per, stencil=stencil).bond_offsets)
    spec = {"shape": shape, "periodic": per, "stencil": stencil,
            "mask": rng.random(shape) < 0.9,
            "weights": rng.uniform(0.0, 1.0, shape) if name == "2d-60" else None,
            "bonds": rng.random((kf,) + shape) < 0.7,
            # positive: csgraph would drop an explicit zero of the oracle matrix
            "bond_weights": rng.uniform(0.1, 2.0, (kf,) + shape)}
    spec["mask"].reshape(-1)[0] = True
    return spec


LARGE = {"2d-60": 2, "2d-64-open": 1, "3d-14-moore": 2, "2d-48": 2, "unpadded": 0}


@pytest.fixture
def threaded(monkeypatch):
    """The backend's graph calls on two threads, and parallel BFS levels from 8 cells."""
    monkeypatch.setattr(numba_cpu, "PAR_SITES", 16)
    monkeypatch.setattr(numba_cpu, "free_threads", lambda: 2)
    monkeypatch.setattr(bfs, "_PAR_MIN", 8)


@pytest.mark.parametrize("name", list(LARGE))
def test_larger_lattices_match_scipy(name, threaded):
    spec = _large(name)
    L = make(spec)
    assert _padded.make_plan(*L.geometry.kernel_args()[:4]).mode == LARGE[name]
    G = bond_graph(spec)
    M = _cs_matrix(spec, G)
    src = np.array([0, int(open_sites(spec)[-1])])
    # hops over the open bonds
    hops = cs_dijkstra(M, indices=src, unweighted=True, min_only=True)
    H = make({**spec, "weights": None, "bond_weights": None})
    got = H.distance_field(src, backend=CPU).reshape(-1)
    assert got.tolist() == np.where(np.isfinite(hops), hops, -1).astype(int).tolist()
    # costs: bond weights plus site weights
    got = L.distance_field(src, backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, cs_dijkstra(M, indices=src, min_only=True), rtol=1e-12)
    # a shortest path to the last site reachable from src[0]: along open bonds, its
    # cost the sum of its steps
    want = cs_dijkstra(M, indices=src[0])
    e = int(np.flatnonzero(np.isfinite(want))[-1])
    r = L.find_shortest_path(src[0], e, backend=CPU)
    steps = list(zip(r.path, r.path[1:]))
    assert r.path[0] == src[0] and r.path[-1] == e
    assert all(G.has_edge(u, v) for u, v in steps)
    np.testing.assert_allclose(r.distance, sum(M[u, v] for u, v in steps), rtol=1e-12)
    np.testing.assert_allclose(r.distance, want[e], rtol=1e-12)


# -- the bond-coded BFS (bonds read in the cell a step claims) ---------------------------
def _usable_steps(spec):
    """``{(i, off)}``: the steps from site ``i`` along stencil offset ``off`` that cross
    a usable bond, from the oracle's bonds (a bond is stepped along from both ends)."""
    steps = set()
    for _, _, i, j, off in usable_bonds(spec):
        steps.add((i, off))
        steps.add((j, tuple(-x for x in off)))
    return steps


CODED = {"L2": L2, "L1": L1, **{name: _large(name) for name in LARGE}}
# int64 cells (lattices past 2**31 cells) on the small and the portal-free cases
CODED_CASES = [(name, np.int32) for name in CODED] + [
    (name, np.int64) for name in ("L2", "L1", "2d-64-open", "2d-48")]


@pytest.mark.parametrize(("name", "itype"), CODED_CASES)
def test_bond_codes_hold_the_usable_steps(name, itype):
    """Every open cell's code has bit k set iff step k from it crosses a usable bond (to an
    open site), is below -2**30; blocked sites and walls hold the bare sign, portals
    PORTAL. More steps than a code holds: no codes."""
    spec = CODED[name]
    L = make(spec)
    args = L.geometry.kernel_args()
    g = _padded.make_plan(*args[:4])._replace(itype=itype)
    cells = _padded.plan_bonds(g, args[2], L.geometry.bond_args())
    work = _padded.code_bonds(g, cells)
    if g.offs.shape[0] > _padded.coded_steps(g):
        assert work is None
        return
    assert work.dtype == itype
    sign = np.iinfo(itype).min
    usable = _usable_steps(spec)
    n = math.prod(spec["shape"])
    cell = _padded._to_padded(np.arange(n), g)
    mask = spec.get("mask")
    per = np.broadcast_to(np.asarray(spec["periodic"], bool), (len(spec["shape"]),))
    for i in range(n):
        v = int(work[cell[i]])
        if mask is not None and not mask.reshape(-1)[i]:
            assert v == sign
            continue
        assert v < -2**30
        c = np.array(np.unravel_index(i, spec["shape"]))
        for k, off in enumerate(map(tuple, g.offs.tolist())):
            t = c + off
            if not (per | ((t >= 0) & (t < spec["shape"]))).all():
                continue  # no site there
            j = int(np.ravel_multi_index(tuple(t % spec["shape"]), spec["shape"]))
            if mask is None or mask.reshape(-1)[j]:
                assert (v >> k) & 1 == ((i, off) in usable), (i, k)
    halo = np.ones(g.psize, bool)
    halo[cell] = False
    assert set(np.unique(work[halo]).tolist()) <= {sign, _padded.PORTAL}


@pytest.mark.parametrize("coded", [True, False])
@pytest.mark.parametrize("name", [n for n in LARGE if n != "2d-48"])
def test_bond_coded_bfs_on_parallel_frontiers(name, coded, monkeypatch):
    """The BFS over bond codes (int32 and int64 cells), every level split over all
    threads in tiny rounds, and the BFS over bond bytes it replaces (codes turned off),
    give the hop distances of the bond graph."""
    spec = _large(name)
    L = make(spec)
    args = L.geometry.kernel_args()
    G = bond_graph(spec)
    src = np.array([0, int(open_sites(spec)[-1])])
    hops = cs_dijkstra(_cs_matrix(spec, G), indices=src, unweighted=True, min_only=True)
    want = np.where(np.isfinite(hops), hops, -1).astype(np.int64)
    monkeypatch.setattr(bfs, "_PAR_MIN", 1)
    monkeypatch.setattr(bfs, "_PAR_CHUNK", 7)
    if not coded:
        monkeypatch.setattr(_padded, "coded_steps", lambda g: 0)
    prev = numba.get_num_threads()
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    try:
        got = bfs.bfs_distance(*args, src, bonds=L.geometry.bond_args())
        assert got.tolist() == want.tolist()
        g = _padded.make_plan(*args[:4])._replace(itype=np.int64)
        cells = _padded.plan_bonds(g, args[2], L.geometry.bond_args())
        assert (_padded.code_bonds(g, cells) is not None) == coded
        work = bfs._hop_search(g, _padded._to_padded(src, g), cells=cells)
        out = np.empty(g.n, dtype=np.int64)
        _padded._unpad_all(work, out, g, True)
        assert out.tolist() == want.tolist()
    finally:
        numba.set_num_threads(prev)


def test_bond_layouts_and_coded_searches_run_in_budget_sized_calls(monkeypatch):
    """With a budget of 256 units the bond bytes, the bond codes and the coded BFS are
    made in many kernel calls (so a signal handler runs between them), and give what
    one call per pass gives."""
    spec = _large("2d-60")
    L = make(spec)
    args = L.geometry.kernel_args()
    bonds = L.geometry.bond_args()
    g = _padded.make_plan(*args[:4])
    cells = _padded.bond_cells(g, args[2], *bonds)
    codes = _padded.code_bonds(g, cells)
    dist = bfs.bfs_distance(*args, [0], bonds=bonds)
    calls = collections.Counter()

    def counted(name, real):
        def spy(*a):
            calls[name] += 1
            return real(*a)
        return spy

    for name in ("_bond_bytes", "_fill_coded", "_fill_coded_serial"):
        monkeypatch.setattr(_padded, name, counted(name, getattr(_padded, name)))
    monkeypatch.setattr(bfs, "_bfs_frontiers", counted("bfs", bfs._bfs_frontiers))
    monkeypatch.setattr(_budget, "_BUDGET", 256)
    got = _padded.bond_cells(g, args[2], *bonds)
    assert np.array_equal(got.bits, cells.bits)
    assert calls["_bond_bytes"] == 60  # one row of 60 sites and 4 steps per call
    assert np.array_equal(_padded.code_bonds(g, got), codes)
    assert calls["_fill_coded"] + calls["_fill_coded_serial"] >= g.psize // 256
    assert bfs.bfs_distance(*args, [0], bonds=bonds).tolist() == dist.tolist()
    assert calls["bfs"] >= np.count_nonzero(dist >= 0) * 4 // 256
