"""Per-cluster statistics (``Lattice.cluster_statistics``): against a brute-force oracle
that unwraps each cluster by walking it bond by bond (hypothesis over dimensions 1-3,
periodic axes, custom stencils, masks, bonds), against SciPy's ``ndimage`` measurements
on open lattices, the summaries against their definitions, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from scipy import ndimage

import catalytic as cat
from tests.lattice.test_label import canonical
from tests.support.oracles import _per, bond_graph_unwrapped, coords_of
from tests.support.strategies import L1, L2, lattice_specs, make
from tests.support.threads import threads  # noqa: F401 (the fixture)

BACKENDS = ("numpy", "numba-cpu")


def walk(spec):
    """``(labels, pos, wraps)`` from the oracle that unwraps each cluster by walking its
    bonds (:func:`tests.support.oracles.bond_graph_unwrapped`), ``wraps`` as label ->
    the set of axes it wraps."""
    labels, pos, by_axis = bond_graph_unwrapped(spec)
    wraps = {c: {a for a, cs in by_axis.items() if c in cs}
             for c in range(1, labels.max(initial=0) + 1)}
    return labels, pos, wraps


def shortest_arc(xs, length):
    """``(lo, hi)`` of the shortest arc holding the coordinates ``xs`` of a periodic
    axis, by trying every start and extent; ties go to the arc not crossing the seam,
    then to the lowest start."""
    best = None
    for extent in range(1, length + 1):
        for lo in range(length):
            if all((x - lo) % length < extent for x in xs):
                key = (extent, lo + extent > length, lo)
                best = key if best is None or key < best else best
        if best is not None:
            return best[2], best[2] + best[0]


SPECS = lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64)


@given(spec=SPECS)
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=60, deadline=None)
def test_statistics_match_the_unwrapping_walk(spec):
    L = make(spec)
    labels, pos, wraps = walk(spec)
    field = np.random.default_rng(0).normal(size=spec["shape"])
    for b in BACKENDS:
        check_against_walk(L.cluster_statistics(labels, field=field, backend=b), labels,
                           pos, wraps, spec, field)


def check_against_walk(st, labels, pos, wraps, spec, field):
    shape, d = tuple(spec["shape"]), len(spec["shape"])
    periodic = _per(spec["periodic"], d)
    count = labels.max(initial=0)
    assert st.count == count
    flat = labels.reshape(-1)
    fflat = field.reshape(-1)
    for c in range(1, count + 1):
        sites = np.flatnonzero(flat == c)
        u = np.array([pos[i] for i in sites], dtype=float)
        coords = np.array([coords_of(i, shape) for i in sites])
        assert st.sizes[c - 1] == sites.size
        assert set(np.flatnonzero(st.wraps[c - 1])) == wraps[c]
        mean = u.mean(axis=0)
        cov = (u - mean).T @ (u - mean) / sites.size
        for a in range(d):
            if a in wraps[c]:
                assert np.isnan(st.centroid[c - 1, a])
                assert np.isnan(st.gyration[c - 1, a]).all()
                assert st.bbox[c - 1, a].tolist() == [0, shape[a]]
                continue
            want = mean[a] % shape[a] if periodic[a] else mean[a]
            assert st.centroid[c - 1, a] == pytest.approx(want, abs=1e-9)
            for b in range(d):
                if b not in wraps[c]:
                    assert st.gyration[c - 1, a, b] == pytest.approx(cov[a, b], abs=1e-9)
            if periodic[a]:
                assert tuple(st.bbox[c - 1, a]) == shortest_arc(set(coords[:, a]), shape[a])
                assert not st.faces[c - 1, a].any()
            else:
                lo, hi = coords[:, a].min(), coords[:, a].max()
                assert st.bbox[c - 1, a].tolist() == [lo, hi + 1]
                assert st.faces[c - 1, a].tolist() == [lo == 0, hi == shape[a] - 1]
        if wraps[c]:
            assert np.isnan(st.radius_of_gyration[c - 1])
        else:
            assert st.radius_of_gyration[c - 1] == pytest.approx(np.sqrt(np.trace(cov)))
        v = fflat[sites]
        assert st.field["sum"][c - 1] == pytest.approx(v.sum())
        assert st.field["mean"][c - 1] == pytest.approx(v.mean())
        assert st.field["min"][c - 1] == v.min() and st.field["max"][c - 1] == v.max()
        assert st.field["argmin"][c - 1] == sites[v.argmin()]
        assert st.field["argmax"][c - 1] == sites[v.argmax()]


@pytest.mark.parametrize("shape", [(40, 33), (9, 11, 13)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_open_lattices_measure_as_scipy_ndimage(shape, backend):
    rng = np.random.default_rng(len(shape))
    mask = rng.random(shape) < 0.55
    L = cat.Lattice(shape=shape, mask=mask)
    labels = L.connected_components().labels
    field = rng.normal(size=shape)
    st = L.cluster_statistics(labels, field=field, backend=backend)
    idx = np.arange(1, st.count + 1)
    boxes = ndimage.find_objects(labels)
    assert st.bbox.tolist() == [[[s.start, s.stop] for s in box] for box in boxes]
    np.testing.assert_allclose(st.centroid, ndimage.center_of_mass(mask, labels, idx))
    np.testing.assert_allclose(st.field["sum"], ndimage.sum_labels(field, labels, idx))
    np.testing.assert_allclose(st.field["mean"], ndimage.mean(field, labels, idx))
    np.testing.assert_array_equal(st.field["min"], ndimage.minimum(field, labels, idx))
    np.testing.assert_array_equal(st.field["max"], ndimage.maximum(field, labels, idx))
    for name, scipy_pos in (("argmin", ndimage.minimum_position),
                            ("argmax", ndimage.maximum_position)):
        want = np.ravel_multi_index(np.array(scipy_pos(field, labels, idx)).T, shape)
        np.testing.assert_array_equal(st.field[name], want)
    assert st.sizes.tolist() == np.bincount(labels.reshape(-1))[1:].tolist()


def test_a_cluster_across_the_seam_is_measured_where_it_lies():
    """A horizontal bar of 5 sites crossing the seam of axis 1 on a 8 x 10 torus: its
    box is the 5-site arc, its centroid the bar's middle (at the seam), not the
    lattice's; a full ring wraps the axis and has no centroid along it."""
    m = np.zeros((8, 10), bool)
    m[3, [8, 9, 0, 1, 2]] = True
    m[6, :] = True
    L = cat.Lattice(shape=(8, 10), periodic=True, mask=m)
    st = L.cluster_statistics(L.connected_components())
    bar, ring = 0, 1
    assert st.bbox[bar].tolist() == [[3, 4], [8, 13]]
    assert st.centroid[bar].tolist() == [3.0, 0.0]
    assert st.gyration[bar, 1, 1] == pytest.approx(2.0)  # (4 + 1 + 0 + 1 + 4) / 5
    assert st.wraps[ring].tolist() == [False, True]
    assert st.centroid[ring, 0] == 6.0 and np.isnan(st.centroid[ring, 1])
    assert st.bbox[ring].tolist() == [[6, 7], [0, 10]]
    assert st.spans.tolist() == [[False, False], [False, True]]
    # SciPy on the same labels: one box the width of the lattice, a centroid far away
    assert ndimage.find_objects(L.connected_components().labels)[bar][1] == slice(0, 10)


def test_size_distribution_mean_size_and_correlation_length_by_definition():
    rng = np.random.default_rng(4)
    L = cat.Lattice(shape=(30, 30), periodic=True, mask=rng.random((30, 30)) < 0.5)
    st = L.cluster_statistics(L.connected_components())
    finite = ~st.spans.any(axis=1)
    s = st.sizes[finite]
    got_s, got_n = st.size_distribution(exclude="spanning")
    want_s, want_counts = np.unique(s, return_counts=True)
    assert got_s.tolist() == want_s.tolist()
    np.testing.assert_allclose(got_n, want_counts / 900)
    assert st.mean_cluster_size() == pytest.approx((got_s ** 2 * got_n).sum()
                                                   / (got_s * got_n).sum())
    rg = st.radius_of_gyration[finite]
    assert st.correlation_length() == pytest.approx(
        np.sqrt(2 * (s ** 2 * rg ** 2).sum() / (s ** 2).sum()))
    all_s, all_n = st.size_distribution()
    assert (all_s * all_n).sum() * 900 == st.sizes.sum()


def test_statistics_of_multi_label_images():
    values = np.array([[1, 1, 2, 2], [1, 0, 0, 2], [3, 3, 0, 2]])
    L = cat.Lattice(shape=(3, 4))
    comp = L.label(values)
    st = L.cluster_statistics(comp, field=values)
    assert st.sizes.tolist() == [3, 4, 2]
    assert st.field["mean"].tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("labels, field, err, match", [
    (np.zeros((3, 3)), None, TypeError, "labels must be an integer array"),
    (np.zeros((4, 3), int), None, ValueError, "labels has shape"),
    (-np.ones((3, 3), int), None, ValueError, "labels must be >= 0"),
    (np.zeros((3, 3), int), np.zeros((3, 4)), ValueError, "field has shape"),
    (np.zeros((3, 3), int), np.zeros((3, 3), complex), TypeError, "field must be a real"),
])
def test_bad_input(labels, field, err, match):
    with pytest.raises(err, match=match):
        cat.Lattice(shape=(3, 3)).cluster_statistics(labels, field=field)


def test_with_a_periodic_axis_a_label_must_be_one_cluster():
    labels = np.zeros((4, 4), int)
    labels[0, 0] = labels[2, 2] = 1
    for b in BACKENDS:
        with pytest.raises(ValueError, match="label 1 is not one cluster"):
            cat.Lattice(shape=(4, 4), periodic=(True, False)).cluster_statistics(
                labels, backend=b)
        # without one, the label's sites are measured together, as SciPy measures them
        st = cat.Lattice(shape=(4, 4)).cluster_statistics(labels, backend=b)
        assert st.sizes.tolist() == [2] and st.centroid.tolist() == [[1.0, 1.0]]


def test_a_label_on_a_blocked_site_is_refused():
    m = np.ones((2, 2), bool)
    m[0, 0] = False
    with pytest.raises(ValueError, match="at blocked site"):
        cat.Lattice(shape=(2, 2), mask=m).cluster_statistics(np.ones((2, 2), int))


def test_to_pandas_has_a_row_per_label():
    pd = pytest.importorskip("pandas", reason="pandas is optional (to_pandas only)")
    L = cat.Lattice(shape=(4, 4), mask=np.eye(4, dtype=bool))
    df = L.cluster_statistics(L.connected_components()).to_pandas()
    assert list(df.index) == [1, 2, 3, 4] and (df["size"] == 1).all()
    assert isinstance(df, pd.DataFrame)


def same_statistics(a, b):
    """Assert two :class:`ClusterStatistics` equal: counts, boxes, faces and wraps exactly,
    centroids, gyration and field reductions to rounding."""
    for name in ("sizes", "bbox", "faces", "wraps"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("centroid", "gyration", "radius_of_gyration"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-9, atol=1e-9,
                                   err_msg=name)
    for key in a.field:
        np.testing.assert_allclose(a.field[key], b.field[key], rtol=1e-9, err_msg=key)


@pytest.mark.parametrize("shape, periodic, stencil", [
    ((90, 70), (True, False), "von_neumann"), ((24, 25, 26), True, "moore"),
    ((300,), True, "von_neumann")])
def test_numba_statistics_equal_the_reference_on_larger_lattices(monkeypatch, shape, periodic,
                                                                  stencil):
    """Lattices whose labels split over the threads, and a breadth-first search resumed
    over many kernel calls (the budget shrunk to a few sites a call): the reference's
    statistics either way."""
    from catalytic.kernels.cpu import _budget

    rng = np.random.default_rng(len(shape))
    L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil,
                    mask=rng.random(shape) < (0.6 if len(shape) < 3 else 0.3))
    labels = L.connected_components().labels
    field = rng.normal(size=shape)
    want = L.cluster_statistics(labels, field=field, backend="numpy")
    same_statistics(L.cluster_statistics(labels, field=field, backend="numba-cpu"), want)
    monkeypatch.setattr(_budget, "_BUDGET", 7)
    same_statistics(L.cluster_statistics(labels, field=field, backend="numba-cpu"), want)


@pytest.mark.parametrize("shape, periodic", [((200, 120), (True, False)), ((24, 20, 30), True),
                                             ((150, 100), False)])
def test_few_labels_split_rows_over_threads_and_merge_as_the_reference(
        monkeypatch, threads, shape, periodic):
    """Few clusters: each thread sums its share of the rows into its own per-label arrays,
    about its own first site of each label, and the shares are shifted and added. The
    result is the reference's, with windings across seams, ties and NaN and infinite
    values in the field (the first site of the extreme, a NaN before any number), and
    budget windows of a few rows."""
    from catalytic.kernels.cpu import _budget
    from catalytic.kernels.cpu import clusters as K

    calls = []
    real = K._moments_split
    monkeypatch.setattr(K, "_moments_split", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(sum(shape))
    L = cat.Lattice(shape=shape, periodic=periodic, mask=rng.random(shape) < 0.8)
    labels = L.connected_components().labels
    assert 1 < labels.max() < 40
    field = rng.integers(-2, 3, shape).astype(float)  # many ties
    field.flat[rng.choice(field.size, 6, replace=False)] = [np.nan, np.nan, np.inf, -np.inf,
                                                            np.inf, -np.inf]
    want = L.cluster_statistics(labels, field=field, backend="numpy")
    for budget in (_budget._BUDGET, 3 * shape[-1]):
        monkeypatch.setattr(_budget, "_BUDGET", budget)
        got = L.cluster_statistics(labels, field=field, backend="numba-cpu")
        same_statistics(got, want)
        for key in ("argmin", "argmax"):
            np.testing.assert_array_equal(got.field[key], want.field[key], err_msg=key)
    assert bool(calls) == (threads > 1)


@pytest.mark.parametrize("shape", [(30, 27), (8, 9, 10)])
def test_regionprops_subset_matches_scikit_image(shape):
    """scikit-image's ``label`` (multi-label, background 0, connectivity 1 and the
    lattice's Moore stencil for full connectivity) and ``regionprops`` area, bounding box,
    centroid and inertia tensor (``trace(G) I - G`` of the gyration tensor G)."""
    measure = pytest.importorskip("skimage.measure",
                                  reason="scikit-image is not installed (pip install "
                                         "scikit-image)")
    rng = np.random.default_rng(len(shape))
    img = rng.integers(0, 3, size=shape)
    d = len(shape)
    for connectivity, stencil in ((1, "von_neumann"), (d, "moore")):
        L = cat.Lattice(shape=shape, stencil=stencil)
        comp = L.label(img)
        want = measure.label(img, background=0, connectivity=connectivity)
        np.testing.assert_array_equal(comp.labels, canonical(want))
        for b in BACKENDS:
            st = L.cluster_statistics(comp, backend=b)
            props = measure.regionprops(comp.labels)
            assert [p.area for p in props] == st.sizes.tolist()
            assert [tuple(p.bbox) for p in props] == [
                tuple(st.bbox[c, :, 0]) + tuple(st.bbox[c, :, 1]) for c in range(st.count)]
            np.testing.assert_allclose([p.centroid for p in props], st.centroid)
            g = st.gyration
            inertia = np.trace(g, axis1=1, axis2=2)[:, None, None] * np.eye(d) - g
            np.testing.assert_allclose([p.inertia_tensor for p in props], inertia,
                                       atol=1e-9)


def test_arcs_break_ties_toward_the_wrap_round_gap_then_the_lowest_start():
    """Equal largest gaps: the arc that does not cross the seam, else the one that starts
    lowest, in the reference and in the numba-cpu kernel alike (a difference the CUDA
    tests on periodic lattices found)."""
    from catalytic.backends._clusters import _arcs
    from catalytic.kernels.cpu import clusters as K

    for xs, want in [([0, 2, 3, 4, 6, 7, 8], (2, 10)),  # gaps 0->2 and 4->6: the first
                     ([1, 2, 5, 6, 7], (1, 8)),  # 2->5 and 7->1 round the seam: equal
                     ([2, 3, 4, 6, 7], (2, 8))]:  # the wrap-round gap 7->2 is the largest
        xs = np.array(xs)
        lo, hi = _arcs(np.ones(xs.size, np.int64), xs, 1, 9)
        assert (int(lo[0]), int(hi[0])) == want, xs
        labels = np.zeros(9, np.int64)
        labels[xs] = 1
        klo, khi = K.arcs(labels, 1, np.array([9]), np.array([True]))
        assert (int(klo[1, 0]), int(khi[1, 0])) == want, xs
