"""Bonds on the cuda backend: every operation it declares bond-aware, run with
``backend="cuda"`` on small lattices (the simulator pass), against the NetworkX graph
built bond by bond (:func:`tests.support.oracles.bond_graph`) and the step-cost digraph
(:func:`tests.support.oracles.step_cost_digraph`); the device copies of the bonds, cached
once per lattice and counted."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.backends import cuda_backend as CB
from catalytic.backends.cuda_backend import implementations as impl
from tests.support.oracles import bond_graph, coords_of, open_sites, step_cost_digraph
from tests.support.strategies import L1, L2, custom_stencil, lattice_specs, make

sim = pytest.mark.sim

# tiny lattices: the simulator starts a Python thread for every launched thread
SPECS = st.one_of(lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=27),
                  lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=27,
                                weights=True))
# L2 with site weights too, and its first (direct) bonds closed where a parallel one is open
L2W = {**L2, "weights": np.array([[0.5, 2.0, 1.0], [0.0, 3.0, 1.5]]),
       "bonds": np.array([[[False, False, True], [True, True, True]],
                          [[True, True, False], [True, True, True]]])}


def _components_of(G):
    return sorted(sorted(c) for c in nx.connected_components(G))


def _check_components(labels, count, G, n):
    labels = np.asarray(labels).reshape(-1)
    comps = _components_of(G)
    assert count == len(comps)
    got = {}
    for i in range(n):
        if labels[i]:
            got.setdefault(int(labels[i]), []).append(i)
    assert sorted(got.values()) == comps
    assert all(labels[i] == 0 for i in range(n) if i not in G)


def _laplacian_oracle(G, f, conductance):
    out = np.zeros(len(f))
    for i in G.nodes:
        for j, a in G[i].items():
            c = a["weight"] if conductance else 1.0
            out[i] += c * (f[i] - f[j])
    return out


def _costs(spec, G):
    """The oracle's distances from a source: hops, or Dijkstra on step costs."""
    weighted = spec.get("weights") is not None or spec.get("bond_weights") is not None
    if not weighted:
        return False, lambda s: nx.single_source_shortest_path_length(G, s)
    D = step_cost_digraph(G, spec.get("weights"))
    return True, lambda s: nx.single_source_dijkstra_path_length(D, s)


# -- every bond-aware operation against the bond graph -------------------------------------
@sim
@given(spec=SPECS, data=st.data())
@example(spec=L2, data=None)
@example(spec=L1, data=None)
@example(spec=L2W, data=None)
@example(spec={**L2W, "bond_weights": None}, data=None)
@settings(max_examples=5, deadline=None)
def test_cuda_operations_match_the_bond_graph(spec, data):
    L = make(spec)
    G = bond_graph(spec)
    n = L.n_points
    sites = open_sites(spec)
    if data is None:
        s, e = int(sites[0]), int(sites[-1])
    else:
        s = int(sites[data.draw(st.integers(0, len(sites) - 1), label="source")])
        e = int(sites[data.draw(st.integers(0, len(sites) - 1), label="end")])
    # neighbour sets: degree counts a neighbour once, however many parallel bonds
    deg = L.degree(backend="cuda").reshape(-1)
    assert deg.tolist() == [G.degree(i) if i in G else 0 for i in range(n)]
    comp = L.connected_components(backend="cuda")
    _check_components(comp.labels, comp.count, G, n)
    # distances and a shortest path
    weighted, oracle = _costs(spec, G)
    want = oracle(s)
    dist = L.distance_field([s], backend="cuda").reshape(-1)
    for i in range(n):
        if i in want:
            assert dist[i] == want[i], i
        else:
            assert dist[i] == (np.inf if weighted else -1), i
    path, length = L.find_shortest_path(s, e, backend="cuda")
    if e not in want:
        assert len(path) == 0 and length == (np.inf if weighted else -1)
    else:
        assert path[0] == s and path[-1] == e and length == want[e]
        assert all(G.has_edge(int(u), int(v)) for u, v in zip(path[:-1], path[1:]))
        if weighted:
            D = step_cost_digraph(G, spec.get("weights"))
            total = 0.0
            for u, v in zip(path[:-1], path[1:]):
                total += D[int(u)][int(v)]["weight"]
            assert total == length
        else:
            assert len(path) - 1 == length
    # fields: conductance = bond weight (1 without), least of parallel bonds
    f = np.random.default_rng(n).random(L.shape)
    lap = L.laplacian(f, backend="cuda").reshape(-1)
    want_lap = _laplacian_oracle(G, f.reshape(-1), spec.get("bond_weights") is not None)
    np.testing.assert_allclose(lap, want_lap, rtol=1e-12, atol=1e-12)
    diff = L.diffuse(f, steps=1, alpha=0.05, allow_unstable=True, backend="cuda").reshape(-1)
    np.testing.assert_allclose(diff, f.reshape(-1) - 0.05 * want_lap, rtol=1e-12, atol=1e-12)


@sim
@pytest.mark.parametrize("spec", [L2, L1, L2W], ids=["L2", "L1", "L2W"])
def test_closeness_and_degree_centrality_count_hops_through_open_bonds(spec):
    L = make(spec)
    G = bond_graph(spec)
    got = L.calculate_centrality("closeness", backend="cuda").reshape(-1)
    want = nx.closeness_centrality(G)
    for i in G.nodes:
        assert got[i] == pytest.approx(want[i], abs=1e-12)
    got = L.calculate_centrality("degree", backend="cuda").reshape(-1)
    want = nx.degree_centrality(G)
    for i in G.nodes:
        assert got[i] == pytest.approx(want[i], abs=1e-12)


@sim
def test_a_closed_bond_is_not_walked_back_along_a_hop_path():
    # 3x3: from corner 0 to the centre 4, sites 1 and 3 are both one hop closer; the
    # walk takes the smallest index, 1, unless the bond 1 - 4 is closed
    bonds = np.ones((2, 3, 3), bool)
    bonds[0, 0, 1] = False  # (0, 1) -> (1, 1)
    L = cat.Lattice(shape=(3, 3), bonds=bonds)
    assert L.find_shortest_path(0, 4, backend="cuda").path.tolist() == [0, 3, 4]
    assert L.with_bonds(None).find_shortest_path(0, 4, backend="cuda").path.tolist() == [0, 1, 4]


@sim
def test_zero_bond_weights_make_plateaus_that_the_walk_crosses_in_order():
    # a zero-cost corridor: every step along axis 1 of row 0 costs 0
    bw = np.ones((2, 3, 4))
    bw[1, 0, :] = 0.0
    spec = {"shape": (3, 4), "periodic": (False, True), "stencil": "von_neumann",
            "mask": None, "weights": None, "bonds": None, "bond_weights": bw}
    L = make(spec)
    G = bond_graph(spec)
    want = nx.single_source_dijkstra_path_length(step_cost_digraph(G), 0)
    path, length = L.find_shortest_path(0, 11, backend="cuda")
    assert length == want[11]
    assert all(G.has_edge(int(u), int(v)) for u, v in zip(path[:-1], path[1:]))
    assert len(set(path.tolist())) == len(path)
    # a plateau entered from above: 0 and 1 both cost 1 from 3, and each is the other's
    # smallest tight in-neighbour; only the plateau depths order the walk back
    L = cat.Lattice(shape=(4,), bond_weights=np.array([[0.0, 0.0, 1.0, 5.0]]))
    path, length = L.find_shortest_path(3, 0, backend="cuda")
    assert path.tolist() == [3, 2, 1, 0] and length == 1.0


# -- spanning ---------------------------------------------------------------------------------
def _spans(spec, G, axis):
    """Component site-sets touching both faces of open ``axis``."""
    shape = spec["shape"]
    out = []
    for comp in _components_of(G):
        cs = [coords_of(i, shape)[axis] for i in comp]
        if 0 in cs and shape[axis] - 1 in cs:
            out.append(comp)
    return out


@sim
@pytest.mark.parametrize("seed", [0, 1])
def test_spanning_and_percolation_along_open_axes_follow_the_bonds(seed):
    rng = np.random.default_rng(seed)
    spec = {"shape": (5, 5), "periodic": (False, True), "stencil": "moore", "mask": None,
            "weights": None, "bonds": rng.random((4, 5, 5)) < 0.45, "bond_weights": None}
    L = make(spec)
    G = bond_graph(spec)
    res = L.spanning_clusters(axes=(0,), backend="cuda")
    labels = res.components.labels.reshape(-1)
    got = sorted(sorted(np.flatnonzero(labels == lab).tolist()) for lab in res.clusters[0])
    assert got == _spans(spec, G, 0)
    assert L.percolates(0, backend="cuda") == bool(got)


def _winding_oracle(spec):
    """``{axis: [component site-sets that wrap it]}`` for the periodic axes of a spec
    with bonds: a breadth-first search per cluster gives each site an unwrapped
    position; every usable bond is its own step (parallel bonds and self-loops too), and
    a step that reaches a visited site at another unwrapped position closes a cycle
    winding along each axis where they differ."""
    from tests.support.oracles import flat_index, forward_offsets, is_open, offsets_of

    shape = tuple(spec["shape"])
    d = len(shape)
    per = spec["periodic"]
    per = (per,) * d if isinstance(per, bool) else tuple(per)
    fwd = forward_offsets(spec["stencil"], d)
    bonds, mask = spec.get("bonds"), spec.get("mask")
    n = math.prod(shape)
    pos, label, wraps = {}, {}, {a: set() for a in range(d) if per[a]}
    for s0 in range(n):
        if s0 in label or not is_open(mask, s0):
            continue
        label[s0], pos[s0] = s0, coords_of(s0, shape)
        queue = [s0]
        while queue:
            u = queue.pop()
            cu = coords_of(u, shape)
            for off in map(tuple, offsets_of(spec["stencil"], d).tolist()):
                q = tuple(p + o for p, o in zip(pos[u], off))
                c = [x + o for x, o in zip(cu, off)]
                if any(not per[a] and not 0 <= c[a] < shape[a] for a in range(d)):
                    continue
                c = [x % m for x, m in zip(c, shape)]
                v = flat_index(c, shape)
                if not is_open(mask, v):
                    continue
                s, start = (fwd.index(off), cu) if off in fwd else (
                    fwd.index(tuple(-o for o in off)), tuple(c))
                if bonds is not None and not bonds[(s,) + tuple(start)]:
                    continue
                if v not in label:
                    label[v], pos[v] = s0, q
                    queue.append(v)
                else:
                    for a in wraps:
                        if pos[v][a] != q[a]:
                            wraps[a].add(s0)
    comps = {}
    for v, r in label.items():
        comps.setdefault(r, []).append(v)
    return {a: sorted(sorted(comps[r]) for r in roots) for a, roots in wraps.items()}


@sim
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_wrapping_along_periodic_axes_follows_every_bond(seed):
    rng = np.random.default_rng(seed)
    shape, stencil = [((4, 4), "von_neumann"), ((2, 3), "moore"), ((1, 3), "moore"),
                      ((1, 3), "von_neumann")][seed]
    kf = len(cat.Lattice(shape=shape, stencil=stencil).bond_offsets)
    bonds = rng.random((kf,) + shape) < 0.6
    if seed == 3:  # the self-loop bonds along the length-1 axis closed: no winding there
        bonds[0], bonds[1] = False, True
    spec = {"shape": shape, "periodic": (True, True), "stencil": stencil, "mask": None,
            "weights": None, "bonds": bonds, "bond_weights": None}
    L = make(spec)
    want = _winding_oracle(spec)
    res = L.spanning_clusters(axes=(0, 1), backend="cuda")
    labels = res.components.labels.reshape(-1)
    for a in (0, 1):
        got = sorted(sorted(np.flatnonzero(labels == lab).tolist()) for lab in res.clusters[a])
        assert got == want[a], a
        assert L.percolates(a, backend="cuda") == bool(want[a])


# -- batched twins ------------------------------------------------------------------------------
@sim
def test_batched_twins_honour_the_lattices_bonds_in_every_row():
    rng = np.random.default_rng(3)
    spec = {"shape": (4, 4), "periodic": (True, False), "stencil": custom_stencil(2),
            "mask": None, "weights": None, "bonds": rng.random((4, 4, 4)) < 0.6,
            "bond_weights": None}
    base = make(spec)
    masks = rng.random((2, 4, 4)) < 0.8
    masks[:, 0, 0] = True
    eng = cat.get_engine()
    comps = eng.run("batched.connected_components", base, masks, backend="cuda")
    dists = eng.run("batched.distance_field", base, masks, [0], backend="cuda")
    spans = eng.run("batched.spanning_clusters", base, masks, axes=(1,), backend="cuda")
    perc = eng.run("batched.percolates", base, masks, axis=1, backend="cuda")
    fields = rng.random((2, 16))
    laps = eng.run("batched.laplacian", base.with_mask(None), fields, backend="cuda")
    G0 = bond_graph({**spec, "mask": None})
    for b in range(2):
        row = {**spec, "mask": masks[b]}
        G = bond_graph(row)
        _check_components(comps[b].labels, comps[b].count, G, 16)
        want = nx.single_source_shortest_path_length(G, 0)
        d = dists[b].reshape(-1)
        assert [d[i] for i in range(16)] == [want.get(i, -1) for i in range(16)]
        labels = spans[b].components.labels.reshape(-1)
        got = sorted(sorted(np.flatnonzero(labels == lab).tolist())
                     for lab in spans[b].clusters[1])
        assert got == _spans(row, G, 1)
        assert perc[b] == bool(got)
        np.testing.assert_allclose(laps[b].reshape(-1), _laplacian_oracle(G0, fields[b], False),
                                   rtol=1e-12, atol=1e-12)


# -- the kernels' tables and the device copies ------------------------------------------------
@pytest.mark.parametrize("stencil, d", [("von_neumann", 1), ("von_neumann", 3), ("moore", 2),
                                        ("moore", 3), ("custom", 2)])
def test_the_kernels_bond_slots_are_the_geometrys(stencil, d):
    from catalytic.kernels.cuda.graph import _bond_slots

    st_ = custom_stencil(d) if stencil == "custom" else stencil
    g = cat.Lattice(shape=(3,) * d, stencil=st_).geometry
    assert _bond_slots(np.asarray(g.offsets)).tolist() == g.bond_slot.tolist()


@sim
def test_bonds_are_cached_on_the_device_once_per_lattice_and_counted():
    shape = (4, 4)
    bonds = np.random.default_rng(5).random((2,) + shape) < 0.7
    bw = np.full((2,) + shape, 2.0)
    L = cat.Lattice(shape=shape, bonds=bonds, bond_weights=bw)
    g = L.geometry
    m = g.open_flat.nbytes
    CB.release(L)
    before = CB.cached_bytes()
    assert impl._sites(16, True)(L) == 16 * 16 + g.bond_bits.nbytes + g.bond_weights.nbytes
    assert CB.residency._not_resident(L) == m + g.bond_bits.nbytes
    assert CB.residency._not_resident(L, True) == m + g.bond_bits.nbytes + g.bond_weights.nbytes
    L.connected_components(backend="cuda")
    held = L.backend_cache(CB.NAME)
    assert "bond_bits" in held and "bond_weights" not in held  # labels read no costs
    L.distance_field([0], backend="cuda")
    assert "bond_weights" in held
    assert CB.cached_bytes() - before == m + g.bond_bits.nbytes + g.bond_weights.nbytes
    assert CB.residency._not_resident(L, True) == 0
    CB.reset_transfer_stats()
    L.distance_field([0], backend="cuda")
    assert CB.transfer_stats()["h2d_bytes"] < g.bond_weights.nbytes  # not copied again
    # another lattice's bonds have their own copies: nothing stale
    M = L.with_bonds(~bonds)
    assert (M.degree(backend="cuda") == M.geometry.degree()).all()
    assert not (M.degree(backend="cuda") == L.degree(backend="cuda")).all()
    assert CB.release(L) == m + g.bond_bits.nbytes + g.bond_weights.nbytes
    CB.release(M)


def test_the_device_model_counts_bonds_and_bond_weights():
    L = cat.Lattice(shape=(8, 8), stencil="moore", bonds=np.ones((4, 8, 8), bool),
                    bond_weights=np.ones((4, 8, 8)))
    kf, n = 4, 64
    bits = kf * math.ceil(n / 32) * 4
    assert impl._sites(24)(L) == 24 * n + bits
    assert impl._sites(24, True)(L) == 24 * n + bits + 8 * kf * n
    assert impl._stacked(17)(L, np.ones((3, n), np.uint8)) == 17 * 3 * n + bits + 8 * kf * n
    assert impl._sites(24)(L.with_bonds(None)) == 24 * n  # bond weights only where read
