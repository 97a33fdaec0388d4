"""``label`` on the cuda backend: the bonds joining close values are made on the device
(``kernels.cuda.values``, bit for bit the numba-cpu twin's) and labelled there; labels
against the NetworkX oracle of ``tests/lattice/test_label.py`` (dimensions 1-3,
periodic axes, custom stencils, masks, bonds; integer, float and boolean values; with
and without ``delta``), in the simulator pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.kernels.cpu import values as cpu_values
from catalytic.kernels.cuda import values as cuda_values
from tests.lattice.test_cluster_statistics import same_statistics
from tests.lattice.test_label import oracle, valued_specs
from tests.support.oracles import region_contacts
from tests.support.strategies import L1, L2, lattice_specs, make

sim = pytest.mark.sim


@pytest.fixture(autouse=True)
def no_fallback():
    """No call may fall back to a CPU backend (which would hide a failure here)."""
    eng = cat.get_engine()
    before = eng.fallback_count
    yield
    assert eng.fallback_count == before, eng.fallbacks[-1:]


# tiny lattices: the simulator starts a Python thread for every launched thread
@sim
@given(case=valued_specs(max_sites=40))
@example(case=(L2, np.array([[1, 1, 2], [1, 2, 2]]), 0, 0))
@example(case=(L1, np.array([[3, 3, 0]]), None, 0))
@settings(max_examples=25, deadline=None)
def test_cuda_labels_match_the_graph_of_close_values(case):
    spec, values, background, delta = case
    L = make(spec)
    want = oracle(spec, values, background, delta)
    comp = L.label(values, background=background, delta=delta, backend="cuda")
    np.testing.assert_array_equal(comp.labels, want)
    assert comp.count == want.max(initial=0)
    assert comp.sizes.tolist() == np.bincount(want.reshape(-1),
                                              minlength=comp.count + 1)[1:].tolist()


@sim
@pytest.mark.parametrize("dtype", [np.float64, np.uint64, np.uint32])
def test_device_bits_equal_the_cpu_twins(dtype):
    """The device's value bonds are the numba-cpu kernel's, word for word, ANDed with
    the lattice's own bonds, on a periodic Moore lattice of 3 words a plane; uint32 keys
    (integers with delta 0, as ``label_keys`` gives them) widen on the device."""
    rng = np.random.default_rng(5)
    L = cat.Lattice(shape=(9, 10), periodic=(True, False), stencil="moore",
                    bonds=rng.random((4, 9, 10)) < 0.8)
    g = L.geometry
    keys = rng.integers(0, 3, size=g.n_points).astype(dtype)
    delta = {np.float64: 0.5, np.uint64: dtype(1), np.uint32: 0}[dtype]
    _, user, words, _ = g.bond_args()
    want = cpu_values.value_bonds(keys, delta, g.bond_offsets, g.shape_arr, g.periodic_arr,
                                  user, words)
    got = cuda_values.value_bonds(keys, delta, g.bond_offsets, g.shape_arr, g.periodic_arr,
                                  user, words).copy_to_host()
    np.testing.assert_array_equal(got, want)


@sim
def test_cuda_batched_label_rows_equal_single_calls():
    rng = np.random.default_rng(9)
    values = rng.integers(0, 3, size=(5, 6))
    stack = rng.random((3, 5, 6)) < 0.8
    L = cat.Lattice(shape=(5, 6), periodic=(True, False), bonds=rng.random((2, 5, 6)) < 0.9)
    rows = cat.get_engine().run("batched.label", L, stack, values, backend="cuda")
    for row, m in zip(rows, stack):
        one = L.with_mask(m).label(values, backend="numpy")
        np.testing.assert_array_equal(row.labels, one.labels)
        assert row.count == one.count and row.sizes.tolist() == one.sizes.tolist()


@sim
@given(spec=lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=40, periodic=False))
@settings(max_examples=15, deadline=None)
def test_cuda_statistics_equal_the_reference_on_open_lattices(spec):
    """``cluster_statistics`` on the device (open lattices): the reference's sizes,
    boxes, faces, centroids, gyration and field reductions, a NaN and infinities in the
    field included."""
    L = make(spec)
    labels = L.connected_components(backend="numpy").labels
    field = np.random.default_rng(3).normal(size=spec["shape"])
    flat = field.reshape(-1)
    if flat.size > 2:
        flat[0], flat[1], flat[2] = np.nan, np.inf, -np.inf
    want = L.cluster_statistics(labels, field=field, backend="numpy")
    got = L.cluster_statistics(labels, field=field, backend="cuda")
    same_statistics(got, want)


@sim
@given(spec=lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=40))
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=25, deadline=None)
def test_cuda_statistics_equal_the_reference_with_periodic_axes(spec):
    """With periodic axes: clusters unwrapped across the seams on the device (pieces of
    the labelling with the periodic axes open, placed by the seam steps), the shortest
    arcs from a bit per label and coordinate, the axes each cluster wraps: the
    reference's statistics, field reductions included."""
    L = make(spec)
    labels = L.connected_components(backend="numpy").labels
    field = np.random.default_rng(4).normal(size=spec["shape"])
    want = L.cluster_statistics(labels, field=field, backend="numpy")
    got = L.cluster_statistics(labels, field=field, backend="cuda")
    assert cat.get_engine().last_decision.backend == "cuda"
    same_statistics(got, want)


@sim
def test_cuda_statistics_of_a_cluster_across_the_seam_and_one_that_wraps():
    """A cluster across the seam of a ring is measured where it lies; a row that closes
    round the torus wraps that axis and has no centroid along it."""
    L = cat.Lattice(shape=(6, 8), periodic=True)
    labels = np.zeros((6, 8), int)
    labels[2, [6, 7, 0, 1]] = 1  # across the seam of axis 1
    labels[4, :] = 2  # round axis 1
    got = L.cluster_statistics(labels, backend="cuda")
    want = L.cluster_statistics(labels, backend="numpy")
    np.testing.assert_array_equal(got.bbox, want.bbox)
    np.testing.assert_array_equal(got.wraps, [[False, False], [False, True]])
    assert got.centroid[0].tolist() == [2.0, 7.5]
    assert np.isnan(got.centroid[1, 1]) and got.centroid[1, 0] == 4.0


@sim
def test_cuda_statistics_refuse_a_label_of_two_clusters_on_a_periodic_lattice():
    L = cat.Lattice(shape=(4, 6), periodic=(True, False))
    labels = np.zeros((4, 6), int)
    labels[0, 0] = labels[0, 3] = 1
    with pytest.raises(ValueError, match="label 1 is not one cluster"):
        L.cluster_statistics(labels, backend="cuda")


@sim
@given(spec=lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=40),
       seed=st.integers(0, 2**32 - 1))
@example(spec=L2, seed=0)
@settings(max_examples=20, deadline=None)
def test_cuda_region_graph_counts_the_usable_bonds_between_regions(spec, seed):
    """``region_graph`` on the device: the contacts the oracle counts over the usable
    bonds (periodic axes, custom stencils, masks and bonds included)."""
    labels = np.random.default_rng(seed).integers(0, 4, size=spec["shape"])
    L = make(spec)
    assert L.region_graph(labels, backend="cuda") == region_contacts(spec, labels)
    assert cat.get_engine().last_decision.backend == "cuda"


@sim
def test_cuda_region_graph_of_one_region_or_none_is_empty():
    L = cat.Lattice(shape=(3, 4), periodic=True)
    assert L.region_graph(np.zeros((3, 4), int), backend="cuda") == {}
    assert L.region_graph(np.full((3, 4), 2), backend="cuda") == {}
    two = np.repeat([[1], [2], [2]], 4, axis=1)
    # rows 0-1 and, across the seam, rows 2-0: 4 + 4 bonds
    assert L.region_graph(two, backend="cuda") == {(1, 2): 8}
