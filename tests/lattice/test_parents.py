"""Parental fields, paths read from them, and nearest-source maps (``distance_field``
with ``return_parents`` / ``return_sources``, ``path_from_parents``): against
``find_shortest_path`` (the same canonical paths), dijkstra3d's ``parental_field`` and
``path_from_parents`` (paths of the same length), SciPy's ``dijkstra(min_only=True)``
sources (the same nearest distance), every backend against the reference over
hypothesis lattices, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.kernels.cpu import _budget
from tests.support.strategies import make, path_cases as cases

BACKENDS = ["numpy", "numba-cpu"]


def _sources(L, k, seed):
    open_ = L.geometry.open_sites()
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(open_, min(k, len(open_)), replace=False))


@given(case=cases(), small=st.booleans())
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
def test_every_backend_gives_the_reference_parents_and_sources(monkeypatch, case, small):
    """Bit for bit, kernel calls of a few rows included."""
    spec, spacing, k, seed = case
    L = make(spec)
    if L.geometry.n_open == 0:
        return
    src = _sources(L, k, seed)
    want = L.distance_field(src, spacing=spacing, return_parents=True, return_sources=True,
                            backend="numpy")
    if small:
        monkeypatch.setattr(_budget, "_BUDGET", 7)
    got = L.distance_field(src, spacing=spacing, return_parents=True, return_sources=True,
                           backend="numba-cpu")
    for a, b in zip(want, got):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@given(case=cases(max_sites=200))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_paths_from_one_source_s_parents_are_find_shortest_path_s(case):
    spec, spacing, _, seed = case
    L = make(spec)
    if L.geometry.n_open == 0:
        return
    s = int(_sources(L, 1, seed)[0])
    for backend in BACKENDS:
        d, parents = L.distance_field(s, spacing=spacing, return_parents=True,
                                      backend=backend)
        for t in L.geometry.open_sites():
            want = L.find_shortest_path(s, int(t), spacing=spacing, backend=backend)
            assert np.array_equal(L.path_from_parents(parents, int(t)), want.path)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("weighted", [False, True])
def test_paths_are_as_short_as_dijkstra3d_s_parental_paths(backend, weighted):
    d3 = pytest.importorskip("dijkstra3d", reason="dijkstra3d is the oracle")
    shape = (14, 15, 16)
    rng = np.random.default_rng(4)
    w = rng.random(shape) + 0.5 if weighted else np.ones(shape)
    src = (3, 4, 5)
    theirs = d3.parental_field(w, source=src, connectivity=26)
    L = cat.Lattice(shape=shape, stencil="moore", weights=w if weighted else None)
    d, parents = L.distance_field(src, return_parents=True, backend=backend)
    for t in [(0, 0, 0), (13, 14, 15), (13, 0, 7), (3, 4, 5), (8, 2, 11)]:
        ours = L.path_from_parents(parents, t)
        other = d3.path_from_parents(theirs, target=t)
        flat = np.ravel_multi_index(tuple(np.asarray(other, np.int64).T), shape)
        assert ours[0] == flat[0] and ours[-1] == flat[-1]
        if weighted:  # a step costs the weight of the site entered
            assert math.isclose(w.reshape(-1)[ours[1:]].sum(), d[t], rel_tol=1e-12)
            assert math.isclose(d[t], w.reshape(-1)[flat[1:]].sum(), rel_tol=1e-5)
        else:
            assert len(ours) == len(flat) == d[t] + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nearest_sources_are_at_scipy_s_least_distance_and_form_connected_regions(
        backend, weighted):
    from scipy.sparse.csgraph import connected_components, dijkstra

    shape = (30, 31)
    rng = np.random.default_rng(8)
    mask = rng.random(shape) < 0.8
    w = rng.integers(1, 4, shape).astype(float) if weighted else None
    L = cat.Lattice(shape=shape, periodic=(True, False), mask=mask, weights=w)
    src = np.sort(rng.choice(L.geometry.open_sites(), 12, replace=False))
    d, near = L.distance_field(src, return_sources=True, backend=backend)
    graph = (L.get_adjacency_matrix().astype(float) if not weighted
             else L.geometry.adjacency(dtype=np.float64).multiply(w.reshape(1, -1)).tocsr())
    each = dijkstra(graph, directed=weighted, indices=src, unweighted=not weighted)
    _, _, theirs = dijkstra(graph, directed=weighted, indices=src, unweighted=not weighted,
                            min_only=True, return_predecessors=True)
    flat_d = d.reshape(-1).astype(float)
    reached = np.flatnonzero(near.reshape(-1) >= 0)
    assert np.array_equal(reached, np.flatnonzero(np.isfinite(each.min(axis=0))))
    row = np.searchsorted(src, near.reshape(-1)[reached])
    np.testing.assert_array_equal(each[row, reached], flat_d[reached])
    # where one source is strictly nearest, SciPy names it too
    order = np.sort(each[:, reached], axis=0)
    unique = order[0] < order[1]
    np.testing.assert_array_equal(near.reshape(-1)[reached][unique], theirs[reached][unique])
    adjacency = L.get_adjacency_matrix()
    for s in src:  # each source's sites: one connected piece of the lattice graph
        at = np.flatnonzero(near.reshape(-1) == s)
        assert connected_components(adjacency[at][:, at], directed=False)[0] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreached_and_blocked_sites_have_no_parent_and_no_source(backend):
    mask = np.ones((3, 5), bool)
    mask[:, 2] = False
    L = cat.Lattice(shape=(3, 5), mask=mask)
    d, parents, near = L.distance_field(0, return_parents=True, return_sources=True,
                                        backend=backend)
    assert (parents[:, 2:] == -1).all() and (near[:, 2:] == -1).all()
    assert parents[0, 0] == 0 and near[1, 1] == 0
    assert L.path_from_parents(parents, (0, 4)).size == 0
    assert L.path_from_parents(parents, 0).tolist() == [0]


def test_path_from_parents_refuses_what_is_not_a_parental_field():
    L = cat.Lattice(shape=(2, 3))
    _, parents = L.distance_field(0, return_parents=True)
    with pytest.raises(ValueError, match="shape"):
        L.path_from_parents(parents[:, :2], 1)
    with pytest.raises(TypeError, match="integers"):
        L.path_from_parents(parents.astype(float), 1)
    loop = parents.copy()
    loop.reshape(-1)[:2] = [1, 0]
    with pytest.raises(ValueError, match="does not end"):
        L.path_from_parents(loop, 1)
    far = parents.copy()
    far.reshape(-1)[4] = 99
    with pytest.raises(ValueError, match="parent 99"):
        L.path_from_parents(far, 4)
    with pytest.raises(IndexError):
        L.path_from_parents(parents, 6)
    with pytest.raises(TypeError, match="return_parents"):
        L.distance_field(0, return_parents="yes")
    with pytest.raises(TypeError, match="return_sources"):
        L.distance_field(0, return_sources=1)
