"""Spanning and wrapping clusters (``spanning_clusters``, ``percolates``) against
brute-force oracles that share no code with catalytic: a pure-Python BFS with unwrapped
coordinates (``winding_oracle``, shared with the components tests), and NetworkX on a
many-fold cover of the periodic lattice."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import catalytic as cat
from tests.support.backends import available_backends
from tests.support.oracles import coords_of, flat_index, offsets_of, oracle_graph, winding_oracle
from tests.support.strategies import lattice_specs, make


# -- oracles ---------------------------------------------------------------------------
def face_oracle(labels, axis):
    lo = set(np.take(labels, 0, axis=axis).reshape(-1).tolist()) - {0}
    hi = set(np.take(labels, -1, axis=axis).reshape(-1).tolist()) - {0}
    return lo & hi


def _prime_above(m):
    p = m + 1
    while any(p % q == 0 for q in range(2, int(p**0.5) + 1)):
        p += 1
    return p


def cover_oracle(shape, periodic, stencil, mask, axis):
    """Labels (lowest-flat-index numbering) of the clusters wrapping periodic ``axis``,
    from NetworkX on the T-fold cover along ``axis`` (T a prime above every possible
    winding): a cluster wraps iff its lift holds two copies of one site."""
    shape = tuple(shape)
    offsets = offsets_of(stencil, len(shape))
    reach = int(np.abs(offsets[:, axis]).max())
    n = math.prod(shape)
    t = _prime_above(max(n * reach, 2))
    big = list(shape)
    big[axis] *= t
    big_mask = np.ones(shape, bool) if mask is None else mask
    big_mask = np.concatenate([big_mask] * t, axis=axis)
    G = oracle_graph(tuple(big), periodic, stencil, big_mask)
    firsts = []
    wrapping = set()
    for comp in nx.connected_components(G):
        projected = [flat_index(_fold(coords_of(v, big), shape), shape) for v in comp]
        firsts.append(min(projected))
        if len(set(projected)) < len(projected):
            wrapping.add(min(projected))
    order = {f: k for k, f in enumerate(sorted(set(firsts)), start=1)}
    return {order[f] for f in wrapping}


def _fold(coords, shape):
    return tuple(c % s for c, s in zip(coords, shape))


def expected(spec):
    labels, wraps = winding_oracle(spec["shape"], spec["periodic"], spec["stencil"], spec["mask"])
    want = {}
    for a in range(len(spec["shape"])):
        want[a] = wraps[a] if spec["periodic"][a] else face_oracle(labels, a)
    return labels, want


def check_all_backends(L, spec):
    labels, want = expected(spec)
    d = L.dimensions
    for b in available_backends():
        res = L.spanning_clusters(backend=b)
        assert isinstance(res, cat.results.SpanningClusters)
        np.testing.assert_array_equal(res.components.labels, labels, err_msg=b)
        assert list(res.clusters) == list(range(d))
        for a in range(d):
            got = res.clusters[a]
            assert got.dtype == np.int64 and (np.diff(got) > 0).all()
            assert set(got.tolist()) == want[a], (b, a)
            assert L.percolates(a, backend=b) is bool(want[a]), (b, a)


# -- hypothesis: every backend vs the oracles -------------------------------------------------
@given(spec=lattice_specs(max_dim=3))
def test_spanning_clusters_match_winding_oracle(spec):
    check_all_backends(make(spec), spec)


@settings(max_examples=60)
@given(spec=lattice_specs(max_dim=3, max_sites=24, periodic=True), data=st.data())
def test_winding_oracle_agrees_with_networkx_cover(spec, data):
    """The two oracles agree (and catalytic with them) on small fully periodic lattices."""
    axis = data.draw(st.integers(0, len(spec["shape"]) - 1))
    labels, wraps = winding_oracle(spec["shape"], spec["periodic"], spec["stencil"], spec["mask"])
    cover = cover_oracle(spec["shape"], spec["periodic"], spec["stencil"], spec["mask"], axis)
    assert wraps[axis] == cover
    got = make(spec).spanning_clusters(axis, backend="numpy").clusters[axis]
    assert set(got.tolist()) == cover


@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    density=st.sampled_from([0.4, 0.6, 0.8]),
    data=st.data(),
)
def test_custom_long_offsets_on_short_periodic_axes(shape, seed, density, data):
    """Offsets up to 3 long on axes as short as 1: a step's displacement is the offset
    itself, not the wrapped difference."""
    d = len(shape)
    rng = np.random.default_rng(seed)
    k = data.draw(st.integers(1, 3))
    offs = rng.integers(-3, 4, size=(k, d))
    offs = offs[np.abs(offs).sum(axis=1) > 0]
    if not len(offs):
        offs = np.eye(d, dtype=np.int64)[:1] * 2
    offs = np.unique(np.concatenate([offs, -offs]), axis=0)
    per = tuple(data.draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    mask = rng.random(shape) < density
    spec = {"shape": tuple(shape), "periodic": per, "stencil": offs, "mask": mask}
    check_all_backends(make(spec), spec)


# -- hand-made cases --------------------------------------------------------------------------
def test_issue_example_straddling_pair_does_not_wrap(backend, on_backend):
    m = np.zeros((10, 10), bool)
    m[9, 5] = m[0, 5] = True
    L = cat.Lattice(shape=(10, 10), mask=m, periodic=(True, False))
    assert on_backend(L.percolates, 0) is False
    res = on_backend(L.spanning_clusters)
    assert res.clusters[0].tolist() == [] and res.clusters[1].tolist() == []
    assert res.components.count == 1  # still one cluster across the seam
    m[:, 5] = True  # a full ring
    L = cat.Lattice(shape=(10, 10), mask=m, periodic=(True, False))
    assert on_backend(L.percolates, 0) is True
    assert on_backend(L.spanning_clusters, [0]).clusters == {0: np.array([1])}
    # the same masks on an open axis 0: the ring spans, the pair touches both faces
    O = cat.Lattice(shape=(10, 10), mask=m)
    assert on_backend(O.percolates, 0) is True


def test_moore_diagonal_ring_and_helix(backend, on_backend):
    eye = np.eye(6, dtype=bool)
    P = cat.Lattice(shape=(6, 6), mask=eye, periodic=True, stencil="moore")
    res = on_backend(P.spanning_clusters)
    # the diagonal closes through the corner: winding (1, 1)
    assert res.clusters[0].tolist() == [1] and res.clusters[1].tolist() == [1]
    assert on_backend(cat.Lattice(shape=(6, 6), mask=eye, periodic=True).percolates, 0) is False
    # a broken diagonal: touches every row, wraps nothing
    broken = eye.copy()
    broken[3, 3] = False
    Q = cat.Lattice(shape=(6, 6), mask=broken, periodic=True, stencil="moore")
    assert not any(on_backend(Q.percolates, a) for a in (0, 1))


def test_mixed_axes_and_several_clusters(backend, on_backend):
    m = np.zeros((5, 8), bool)
    m[:, 0] = True  # ring around periodic axis 0 (label 1)
    m[1, 2:] = True  # touches the last face of open axis 1 only (label 2)
    m[3, 2:8] = True
    m[3, 1] = True  # joins ring with row 3: spans axis 1 and wraps axis 0 (label 1)
    L = cat.Lattice(shape=(5, 8), mask=m, periodic=(True, False))
    res = on_backend(L.spanning_clusters, (1, 0))
    assert list(res.clusters) == [1, 0]
    assert res.clusters[0].tolist() == [1]
    assert res.clusters[1].tolist() == [1]
    assert res.components.count == 2


def test_one_d_rings_and_tiny_axes(backend, on_backend):
    for n in (1, 2, 3, 7):
        ring = cat.Lattice(shape=(n,), periodic=True)
        assert on_backend(ring.percolates, 0) is True, n
    cut = np.ones(7, bool)
    cut[4] = False
    assert on_backend(cat.Lattice(shape=(7,), mask=cut, periodic=True).percolates, 0) is False
    # length-1 periodic axis: every site is its own neighbour across the seam
    L = cat.Lattice(shape=(1, 5), periodic=(True, False))
    res = on_backend(L.spanning_clusters)
    assert res.clusters[0].tolist() == [1] and res.clusters[1].tolist() == [1]
    # length-2 periodic axis, nearest neighbours: two steps of +1 go around
    L = cat.Lattice(shape=(2, 3), mask=np.array([[1, 0, 0], [1, 0, 1]], bool),
                    periodic=(True, False))
    assert on_backend(L.spanning_clusters, 0).clusters[0].tolist() == [1]


def test_three_d_slab_wraps_two_axes_not_the_third(backend, on_backend):
    m = np.zeros((4, 5, 6), bool)
    m[:, :, 2] = True  # a plane: wraps axes 0 and 1
    m[1, 1, 3] = True
    L = cat.Lattice(shape=m.shape, mask=m, periodic=True)
    res = on_backend(L.spanning_clusters)
    assert res.clusters[0].tolist() == [1] and res.clusters[1].tolist() == [1]
    assert res.clusters[2].tolist() == []


def test_axes_argument_validation():
    L = cat.Lattice(shape=(3, 4))
    assert list(L.spanning_clusters(-1).clusters) == [1]
    assert list(L.spanning_clusters(np.int64(0)).clusters) == [0]
    with pytest.raises(ValueError, match="out of range"):
        L.spanning_clusters(2)
    with pytest.raises(ValueError, match="twice"):
        L.spanning_clusters([0, -2])
    with pytest.raises(TypeError, match="integer"):
        L.spanning_clusters([0.5])
    with pytest.raises(TypeError, match="axes"):
        L.spanning_clusters(object())
    with pytest.raises(TypeError, match="integer"):
        L.spanning_clusters(True)


def test_explain_covers_spanning_clusters():
    L = cat.Lattice(shape=(16, 16), periodic=True)
    dec = cat.get_engine().router.explain("spanning_clusters", L)
    assert dec.op == "spanning_clusters"
    assert dec.backend in available_backends()


@pytest.mark.parametrize("periodic", [False, True])
def test_larger_site_percolation_backends_agree(periodic, backend, on_backend):
    rng = np.random.default_rng(11)
    mask = rng.random((61, 47)) < 0.6
    L = cat.Lattice(shape=mask.shape, mask=mask, periodic=periodic)
    ref = L.spanning_clusters(backend="numpy")
    got = on_backend(L.spanning_clusters)
    np.testing.assert_array_equal(got.components.labels, ref.components.labels)
    for a in (0, 1):
        np.testing.assert_array_equal(got.clusters[a], ref.clusters[a])
    spec = {"shape": mask.shape, "periodic": (periodic,) * 2, "stencil": "von_neumann",
            "mask": mask}
    _, want = expected(spec)
    assert {a: set(v.tolist()) for a, v in ref.clusters.items()} == want
