"""The everyday cluster tools: ``clusters.relabel``, ``dust``, ``largest_k`` and ``each``
against their definitions and cc3d's ``dust``/``largest_k``, and ``Lattice.region_graph``
against cc3d's ``region_graph``/``contacts`` on open lattices and against NetworkX on the
bond graph (periodic axes, custom stencils, masks, bonds)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic import clusters
from tests.lattice.test_label import canonical
from tests.support.oracles import bond_graph, region_contacts
from tests.support.strategies import L2, lattice_specs, make


@pytest.fixture(scope="module")
def cc3d():
    return pytest.importorskip("cc3d", reason="cc3d is not installed "
                                              "(pip install connected-components-3d)")


def test_relabel_closes_gaps_in_order_of_first_site():
    got = clusters.relabel(np.array([[5, 5, 0], [2, 9, 9]], np.uint16))
    assert got.labels.tolist() == [[1, 1, 0], [2, 3, 3]] and got.labels.dtype == np.uint16
    assert got.count == 3 and got.sizes.tolist() == [2, 1, 2]


@pytest.mark.parametrize("min_size", [0, 1, 2, 5, 40])
def test_dust_matches_cc3d(cc3d, min_size):
    rng = np.random.default_rng(min_size)
    img = rng.integers(0, 3, size=(24, 25)).astype(np.uint32)
    L = cat.Lattice(shape=img.shape)
    comp = L.label(img)
    got = clusters.dust(comp, min_size)
    want = cc3d.dust(img, min_size, connectivity=4)
    np.testing.assert_array_equal(got.labels != 0, want != 0)
    np.testing.assert_array_equal(got.labels, canonical(np.where(want != 0, comp.labels, 0)))
    assert got.sizes.min(initial=min_size) >= min_size
    assert got.sizes.sum() == (want != 0).sum()


@pytest.mark.parametrize("k", [0, 1, 3, 1000])
def test_largest_k_keeps_the_largest_numbered_from_the_largest(cc3d, k):
    rng = np.random.default_rng(k)
    img = rng.integers(0, 3, size=(20, 21)).astype(np.uint32)
    comp = cat.Lattice(shape=img.shape).label(img)
    got = clusters.largest_k(comp, k)
    order = np.argsort(-comp.sizes, kind="stable")[:k]
    assert got.count == min(k, comp.count)
    assert got.sizes.tolist() == comp.sizes[order].tolist()
    for new, old in enumerate(order, 1):
        np.testing.assert_array_equal(got.labels == new, comp.labels == old + 1)
    # cc3d keeps the same sites (its numbering differs), unless two sizes tie at the cut
    desc = np.sort(comp.sizes)[::-1]
    if 0 < k < comp.count and desc[k - 1] == desc[k]:
        return
    want = cc3d.largest_k(img, k, connectivity=4) if k else np.zeros_like(img)
    np.testing.assert_array_equal(got.labels != 0, want != 0)


def test_tools_refuse_bad_input():
    with pytest.raises(TypeError, match="min_size must be an integer"):
        clusters.dust(np.ones(3, int), 1.5)
    with pytest.raises(ValueError, match="k must be >= 0"):
        clusters.largest_k(np.ones(3, int), -1)
    with pytest.raises(TypeError, match="labels must be an integer array"):
        clusters.relabel(np.ones(3))
    with pytest.raises(ValueError, match="labels must be >= 0"):
        clusters.relabel(-np.ones(3, int))


def test_find_objects_is_scipys_and_refuses_a_box_across_a_seam():
    from scipy import ndimage

    rng = np.random.default_rng(2)
    labels = cat.Lattice(shape=(20, 22)).label(rng.integers(0, 4, size=(20, 22))).labels
    L = cat.Lattice(shape=(20, 22))
    assert clusters.find_objects(L.cluster_statistics(labels)) == ndimage.find_objects(labels)
    m = np.zeros((3, 5), bool)
    m[1, [0, 4]] = True
    T = cat.Lattice(shape=(3, 5), periodic=True, mask=m)
    with pytest.raises(ValueError, match="label 1 crosses the seam of periodic axis 1"):
        clusters.find_objects(T.cluster_statistics(T.connected_components()))


def test_each_gives_whole_clusters_across_the_seam():
    m = np.zeros((5, 8), bool)
    m[1, [6, 7, 0]] = True
    m[3, 2:4] = True
    L = cat.Lattice(shape=(5, 8), periodic=(False, True), mask=m)
    comp = L.connected_components()
    got = list(clusters.each(comp, L.cluster_statistics(comp)))
    assert [(lab, crop.tolist(), origin) for lab, crop, origin in got] == [
        (1, [[True, True, True]], (1, 6)), (2, [[True, True]], (3, 2))]


# -- the region graph -------------------------------------------------------------------------
@pytest.mark.parametrize("shape, connectivity, stencil", [
    ((30, 31), 4, "von_neumann"), ((30, 31), 8, "moore"), ((9, 10, 11), 6, "von_neumann"),
    ((9, 10, 11), 26, "moore")])
def test_region_graph_matches_cc3d(cc3d, shape, connectivity, stencil):
    rng = np.random.default_rng(connectivity)
    img = rng.integers(0, 6, size=shape).astype(np.uint32)
    L = cat.Lattice(shape=shape, stencil=stencil)
    got = L.region_graph(img, backend="numpy")
    assert L.region_graph(img, backend="numba-cpu") == got
    edges = {tuple(sorted(map(int, e))) for e in cc3d.region_graph(img, connectivity)}
    assert set(got) == edges
    if connectivity in (4, 6):  # one bond a unit of contact surface
        contacts = cc3d.contacts(img, connectivity=connectivity)
        assert got == {tuple(sorted(map(int, k))): int(round(v)) for k, v in contacts.items()}


@given(spec=lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64),
       seed=st.integers(0, 2**32 - 1))
@example(spec=L2, seed=0)
@settings(max_examples=40, deadline=None)
def test_region_graph_counts_the_usable_bonds_between_regions(spec, seed):
    labels = np.random.default_rng(seed).integers(0, 4, size=spec["shape"])
    flat = labels.reshape(-1)
    want = region_contacts(spec, labels)
    for b in ("numpy", "numba-cpu"):
        assert make(spec).region_graph(labels, backend=b) == want, b
    G = bond_graph(spec)
    assert set(want) == {tuple(sorted((int(flat[u]), int(flat[v])))) for u, v in G.edges
                         if flat[u] and flat[v] and flat[u] != flat[v]}


def test_region_graph_in_many_kernel_calls_is_the_same(monkeypatch):
    """numba-cpu's contacts with the budget shrunk to one row a call: the same graph."""
    from catalytic.kernels.cpu import _budget

    rng = np.random.default_rng(5)
    labels = rng.integers(0, 5, size=(30, 17, 9))
    L = cat.Lattice(shape=labels.shape, periodic=(True, False, True), stencil="moore")
    want = L.region_graph(labels, backend="numpy")
    monkeypatch.setattr(_budget, "_BUDGET", 5)
    assert L.region_graph(labels, backend="numba-cpu") == want
