"""Geodesic distances with Euclidean and anisotropic step costs (``spacing=`` of
``distance_field`` and ``find_shortest_path``): against dijkstra3d's
``euclidean_distance_field`` and its anisotropic ``dijkstra`` on open lattices, against
a NetworkX graph built here from the step lengths (periodic axes, bonds, weights), every
backend against the reference over hypothesis lattices, bad input."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import catalytic as cat
from tests.support.strategies import lattice_specs, make

BACKENDS = ["numpy", "numba-cpu"]


def oracle_graph(shape, periodic, stencil, spacing, mask=None, weights=None):
    """A NetworkX DiGraph of the lattice, built from coordinates: step u -> v along
    offset o costs ``hypot(o * spacing)``, times the weight of v where given (the least
    of parallel steps)."""
    G = nx.DiGraph()
    ok = np.ones(shape, bool) if mask is None else mask
    for c in itertools.product(*map(range, shape)):
        if ok[c]:
            G.add_node(c)
    for c in G.nodes:
        for o in stencil:
            t = []
            for a, (x, dx) in enumerate(zip(c, o)):
                y = x + dx
                if periodic[a]:
                    y %= shape[a]
                elif not 0 <= y < shape[a]:
                    break
                t.append(y)
            else:
                t = tuple(t)
                if t == c or not ok[t]:
                    continue
                cost = math.sqrt(sum((dx * s) ** 2 for dx, s in zip(o, spacing)))
                if weights is not None:
                    cost *= weights[t]
                if not G.has_edge(c, t) or G[c][t]["weight"] > cost:
                    G.add_edge(c, t, weight=cost)
    return G


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, anisotropy", [
    ((40, 50), (1, 1)), ((40, 50), (0.5, 2.0)), ((20, 21, 22), (1, 1, 1)),
    ((20, 21, 22), (1, 2, 3)), ((16, 18, 20), (0.4, 1.25, 2.0))])
def test_moore_steps_match_dijkstra3d_euclidean_distance_field(backend, shape, anisotropy):
    d3 = pytest.importorskip("dijkstra3d", reason="dijkstra3d is the oracle")
    rng = np.random.default_rng(len(shape))
    inside = rng.random(shape) < 0.75
    src = (0,) * len(shape)
    inside[src] = True
    # dijkstra3d takes three numbers on a 2-D image too (the third unused)
    want = d3.euclidean_distance_field(inside, source=src,
                                       anisotropy=tuple(anisotropy) + (1,) * (3 - len(shape)))
    got = cat.Lattice(shape=shape, stencil="moore", mask=inside).distance_field(
        src, spacing=anisotropy, backend=backend)
    reached = np.isfinite(got)
    assert np.array_equal(reached, np.isfinite(want) & inside)
    # dijkstra3d sums in float32
    np.testing.assert_allclose(got[reached], want[reached], rtol=1e-6)


def _cost(path, coords_of, spacing, weights):
    """A path's cost summed here: each step's length times the weight of the site it
    enters."""
    total = 0.0
    for a, b in zip(path[:-1], path[1:]):
        ca, cb = coords_of(a), coords_of(b)
        total += math.sqrt(sum(((y - x) * s) ** 2 for x, y, s in zip(ca, cb, spacing))) \
            * weights[cb]
    return total


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("anisotropy", [(1, 1, 1), (1, 2, 3), (0.7, 1.0, 1.9)])
def test_weighted_paths_cost_what_dijkstra3d_anisotropic_paths_cost(backend, anisotropy):
    d3 = pytest.importorskip("dijkstra3d", reason="dijkstra3d is the oracle")
    shape = (18, 19, 20)
    rng = np.random.default_rng(7)
    w = rng.random(shape) + 0.1
    src, tgt = (0, 0, 0), (17, 18, 19)
    theirs = d3.dijkstra(w, source=src, target=tgt, connectivity=26, anisotropy=anisotropy)
    ours = cat.Lattice(shape=shape, stencil="moore", weights=w).find_shortest_path(
        src, tgt, spacing=anisotropy, backend=backend)
    def flat(p): return np.ravel_multi_index(tuple(np.asarray(p, np.int64).T), shape)
    def coords_of(i): return tuple(int(x) for x in np.unravel_index(int(i), shape))
    their_cost = _cost(flat(theirs), coords_of, anisotropy, w)
    our_cost = _cost(ours.path, coords_of, anisotropy, w)
    assert ours.path[0] == flat([src])[0] and ours.path[-1] == flat([tgt])[0]
    assert math.isclose(our_cost, ours.distance, rel_tol=1e-12)
    # both are shortest (dijkstra3d's own sums are float32)
    assert math.isclose(our_cost, their_cost, rel_tol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("periodic, stencil", [((True, False), "moore"),
                                               ((True, True), "von_neumann"),
                                               ((False, True, True), "moore")])
def test_periodic_and_weighted_lattices_match_a_graph_built_from_lengths(backend, periodic,
                                                                         stencil):
    shape = (7, 9) if len(periodic) == 2 else (4, 5, 3)
    rng = np.random.default_rng(len(periodic) + len(stencil))
    mask = rng.random(shape) < 0.8
    mask.reshape(-1)[0] = True
    weights = rng.random(shape) + 0.5
    spacing = rng.choice([0.5, 1.0, 1.5, 2.0], len(shape))
    for w in (None, weights):
        L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil, mask=mask, weights=w)
        G = oracle_graph(shape, periodic, L.geometry.offsets.tolist(), spacing, mask, w)
        want = nx.single_source_dijkstra_path_length(G, (0,) * len(shape))
        got = L.distance_field(0, spacing=spacing, backend=backend)
        for c in itertools.product(*map(range, shape)):
            if c in want:
                assert math.isclose(got[c], want[c], rel_tol=1e-12), c
            else:
                assert got[c] == np.inf


@st.composite
def cases(draw):
    spec = draw(lattice_specs(max_dim=3, weights=True, bonds=True, max_sites=400))
    d = len(spec["shape"])
    spacing = draw(st.lists(st.sampled_from([0.25, 0.5, 1.0, 1.5, 3.0, 0.1]),
                            min_size=d, max_size=d))
    zeros = draw(st.booleans())  # zero weights: cost plateaus
    return spec, spacing, zeros


@given(case=cases())
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_every_backend_gives_the_reference_answer(case):
    """Bit for bit: the field, the path (the canonical tie rule) and its cost."""
    spec, spacing, zeros = case
    if zeros and spec.get("weights") is not None:
        w = spec["weights"].copy()
        w[::2] = 0.0
        spec = dict(spec, weights=w)
    L = make(spec)
    if L.geometry.n_open == 0:
        return
    open_ = L.geometry.open_sites()
    a, b = int(open_[0]), int(open_[-1])
    ref = L.distance_field(a, spacing=spacing, backend="numpy")
    path = L.find_shortest_path(a, b, spacing=spacing, backend="numpy")
    got = L.distance_field(a, spacing=spacing, backend="numba-cpu")
    assert got.dtype == np.float64 and np.array_equal(got, ref)
    p = L.find_shortest_path(a, b, spacing=spacing, backend="numba-cpu")
    assert np.array_equal(p.path, path.path) and p.distance == path.distance
    assert path.distance == ref.reshape(-1)[b]


def test_spacing_one_without_weights_on_a_von_neumann_lattice_is_the_hop_count():
    L = cat.Lattice(shape=(6, 7), periodic=(True, False))
    hops = L.distance_field((2, 3))
    for backend in BACKENDS:
        d = L.distance_field((2, 3), spacing=1, backend=backend)
        assert d.dtype == np.float64 and np.array_equal(d, hops.astype(float))
        p = L.find_shortest_path(0, 41, spacing=1, backend=backend)
        assert np.array_equal(p.path, L.find_shortest_path(0, 41).path)
        assert p.distance == 7.0  # one step round the seam, six along axis 1


@pytest.mark.parametrize("spacing, error, match", [
    (0, ValueError, "finite and > 0"), ((1, -1), ValueError, "finite and > 0"),
    ((1, np.nan), ValueError, "finite and > 0"), ((1, np.inf), ValueError, "finite and > 0"),
    ((1, 2, 3), ValueError, "one per axis"), ("1", TypeError, "real numbers"),
    ((1j, 1), TypeError, "real numbers")])
def test_bad_spacing_is_refused_before_work(spacing, error, match):
    L = cat.Lattice(shape=(4, 5), stencil="moore")
    with pytest.raises(error, match=match):
        L.distance_field(0, spacing=spacing)
    with pytest.raises(error, match=match):
        L.find_shortest_path(0, 7, spacing=spacing)
