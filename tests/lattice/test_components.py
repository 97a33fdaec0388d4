"""Connected components and percolation vs scipy.ndimage.label and NetworkX."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

import catalytic as cat
from tests.support.backends import available_backends
from tests.support.oracles import graph_of, winding_oracle
from tests.support.strategies import LARGE_EXAMPLES, large_lattice_specs, lattice_specs, make


def ndimage_structure(stencil, d):
    # von Neumann = cross (connectivity 1), Moore = full 3^d (connectivity d)
    return ndimage.generate_binary_structure(d, 1 if stencil == "von_neumann" else d)


def as_partition(labels):
    flat = labels.reshape(-1)
    parts = {}
    for i, lab in enumerate(flat.tolist()):
        if lab > 0:
            parts.setdefault(lab, set()).add(i)
    return {frozenset(p) for p in parts.values()}


def spans_oracle(labels, axis):
    lo = set(np.take(labels, 0, axis=axis).reshape(-1).tolist()) - {0}
    hi = set(np.take(labels, -1, axis=axis).reshape(-1).tolist()) - {0}
    return bool(lo & hi)


@given(spec=lattice_specs(periodic=False))
def test_open_axes_labels_equal_ndimage_label(spec):
    """Same labels, same numbering (raster order of first site), same sizes."""
    L = make(spec)
    mask = spec["mask"] if spec["mask"] is not None else np.ones(spec["shape"], bool)
    want, count = ndimage.label(mask, structure=ndimage_structure(spec["stencil"], mask.ndim))
    sizes = np.bincount(want.reshape(-1), minlength=count + 1)[1:]
    for b in available_backends():
        comp = L.connected_components(backend=b)
        assert isinstance(comp, cat.Components)
        assert comp.labels.shape == L.shape
        np.testing.assert_array_equal(comp.labels, want, err_msg=b)
        assert comp.count == count and isinstance(comp.count, int)
        np.testing.assert_array_equal(comp.sizes, sizes, err_msg=b)
        for axis in range(L.dimensions):
            assert L.percolates(axis, backend=b) == spans_oracle(want, axis), (b, axis)


@given(spec=lattice_specs())
def test_components_with_periodic_axes_match_networkx(spec):
    L = make(spec)
    G = graph_of(spec)
    want = {frozenset(c) for c in nx.connected_components(G)}
    for b in available_backends():
        comp = L.connected_components(backend=b)
        assert as_partition(comp.labels) == want, b
        assert comp.count == len(want)
        # numbering: 1..count in order of the lowest flat index of each component
        firsts = sorted(min(c) for c in want)
        assert [int(comp.labels.reshape(-1)[i]) for i in firsts] == list(range(1, len(want) + 1))
        assert sorted(comp.sizes.tolist()) == sorted(len(c) for c in want)
        assert comp.sizes.sum() == L.n_open
        if spec["mask"] is not None:
            assert (comp.labels[~spec["mask"]] == 0).all()


@given(spec=lattice_specs(), axis=st.integers(0, 4))
def test_percolates_matches_label_oracle(spec, axis):
    L = make(spec)
    d = L.dimensions
    axis %= d
    G = graph_of(spec)
    labels = np.zeros(L.n_points, dtype=np.int64)
    for k, c in enumerate(nx.connected_components(G), start=1):
        labels[list(c)] = k
    want = spans_oracle(labels.reshape(L.shape), axis)
    if spec["periodic"][axis]:  # a periodic axis is spanned by wrapping (test_percolation.py)
        want = bool(winding_oracle(spec["shape"], spec["periodic"], spec["stencil"],
                                   spec["mask"])[1][axis])
    for b in available_backends():
        assert L.percolates(axis, backend=b) is want, b
        assert L.percolates(axis - d, backend=b) is want  # negative axes count from the end


@pytest.mark.parametrize("density", [0.3, 0.5927, 0.8])
def test_site_percolation_large_matches_ndimage(density, backend, on_backend):
    rng = np.random.default_rng(int(density * 1000))
    shape = (61, 47)
    mask = rng.random(shape) < density
    L = cat.Lattice(shape=shape, mask=mask)
    want, count = ndimage.label(mask)
    comp = on_backend(L.connected_components)
    np.testing.assert_array_equal(comp.labels, want)
    assert comp.count == count
    for axis in (0, 1):
        assert on_backend(L.percolates, axis) == spans_oracle(want, axis)


def test_3d_moore_large_matches_ndimage(backend, on_backend):
    rng = np.random.default_rng(3)
    mask = rng.random((17, 19, 23)) < 0.25
    L = cat.Lattice(shape=mask.shape, mask=mask, stencil="moore")
    want, count = ndimage.label(mask, structure=np.ones((3, 3, 3), bool))
    comp = on_backend(L.connected_components)
    np.testing.assert_array_equal(comp.labels, want)
    assert comp.count == count
    np.testing.assert_array_equal(comp.sizes, np.bincount(want.reshape(-1))[1:])


def test_periodic_wrap_joins_clusters(backend, on_backend):
    mask = np.zeros((4, 6), bool)
    mask[1, 0] = mask[1, 5] = True  # neighbours only through the periodic axis 1
    mask[3, 2] = True
    open_ = on_backend(cat.Lattice(shape=(4, 6), mask=mask).connected_components)
    assert open_.count == 3
    P = cat.Lattice(shape=(4, 6), mask=mask, periodic=(False, True))
    per = on_backend(P.connected_components)
    assert per.count == 2
    assert per.labels[1, 0] == per.labels[1, 5] == 1 and per.labels[3, 2] == 2
    assert per.sizes.tolist() == [2, 1]


def test_percolation_simple_cases(backend, on_backend):
    mask = np.zeros((5, 5), bool)
    mask[:, 2] = True  # a vertical bar spans axis 0 only
    L = cat.Lattice(shape=(5, 5), mask=mask)
    assert on_backend(L.percolates, 0) is True
    assert on_backend(L.percolates, 1) is False
    full = cat.Lattice(shape=(3, 1, 4))
    assert all(on_backend(full.percolates, a) for a in range(3))
    diag = np.eye(5, dtype=bool)
    assert on_backend(cat.Lattice(shape=(5, 5), mask=diag).percolates, 0) is False
    assert on_backend(cat.Lattice(shape=(5, 5), mask=diag, stencil="moore").percolates, 0) is True


@settings(max_examples=LARGE_EXAMPLES)
@given(spec=large_lattice_specs())
def test_backends_agree_with_reference_on_larger_lattices(spec):
    L = make(spec)
    ref = L.connected_components(backend="numpy")
    ref_deg = L.run("degree", backend="numpy")
    if not any(spec["periodic"]) and spec["mask"] is not None:
        structure = ndimage_structure(spec["stencil"], L.dimensions)
        want, _ = ndimage.label(spec["mask"], structure=structure)
        np.testing.assert_array_equal(ref.labels, want)
    for b in available_backends():
        comp = L.connected_components(backend=b)
        np.testing.assert_array_equal(comp.labels, ref.labels, err_msg=b)
        assert comp.count == ref.count
        np.testing.assert_array_equal(comp.sizes, ref.sizes)
        np.testing.assert_array_equal(L.run("degree", backend=b), ref_deg, err_msg=b)
        for axis in range(L.dimensions):
            want = (L.percolates(axis, backend="numpy") if spec["periodic"][axis]
                    else spans_oracle(ref.labels, axis))
            assert L.percolates(axis, backend=b) == want


# -- edges SciPy and cc3d accept (issue 23, item 18) -------------------------------------------
def centre_only(d):
    """SciPy's structuring element with only its centre: no site touches another."""
    s = np.zeros((3,) * d, dtype=bool)
    s[(1,) * d] = True
    return s


def offsets_from_structure(structure):
    """A structuring element as stencil offsets (the centre dropped), as a user converts
    one: an empty (0, d) array for the centre alone."""
    centre = np.array(structure.shape) // 2
    off = np.argwhere(structure) - centre
    return off[np.any(off != 0, axis=1)]


@pytest.mark.parametrize("shape", [(7,), (5, 6), (3, 4, 5), (1, 9), (2, 1, 3)])
@pytest.mark.parametrize("periodic", [False, True])
def test_empty_stencil_every_site_alone_as_ndimage_label(shape, periodic):
    """SciPy labels every foreground site apart under the centre-only element; so does
    catalytic with the empty stencil it converts to, on every backend and in batches."""
    d = len(shape)
    mask = np.random.default_rng(d).random(shape) < 0.6
    mask.reshape(-1)[0] = True
    structure = centre_only(d)
    want, count = ndimage.label(mask, structure=structure)
    stencil = offsets_from_structure(structure)
    assert stencil.shape == (0, d)
    L = cat.Lattice(shape=shape, stencil=stencil, periodic=periodic, mask=mask)
    for b in available_backends():
        comp = L.connected_components(backend=b)
        np.testing.assert_array_equal(comp.labels, want, err_msg=b)
        assert comp.count == count == mask.sum()
        np.testing.assert_array_equal(comp.sizes, np.ones(count, dtype=np.int64))
        np.testing.assert_array_equal(L.run("degree", backend=b), np.zeros(shape, np.int64))
        for axis in range(d):
            # one site touches both faces of an open axis of length 1; nothing wraps
            spans = not periodic and spans_oracle(want, axis)
            assert L.percolates(axis, backend=b) == spans, (b, axis)
        stack = np.stack([mask, ~mask])
        got = L.run("batched.connected_components", stack, backend=b)
        assert [c.count for c in got] == [count, int((~mask).sum())]
        np.testing.assert_array_equal(got[1].labels, ndimage.label(~mask, structure)[0])
        dist = L.distance_field(0, backend=b)
        assert dist.reshape(-1)[0] == 0 and (dist.reshape(-1)[1:] == -1).all()
    assert cat.Lattice(shape=shape, stencil=[]).stencil == "custom"


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 2), (2, 3, 0)])
@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("stencil", ["von_neumann", "moore"])
def test_zero_size_lattice_has_no_component(shape, periodic, stencil):
    """A zero-size image: scipy.ndimage.label gives empty labels and 0 components; so
    does every backend, and nothing percolates or spans."""
    want, count = ndimage.label(np.ones(shape, bool))
    assert want.shape == shape and count == 0
    L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil)
    assert L.n_points == 0
    for b in available_backends():
        comp = L.connected_components(backend=b)
        assert comp.labels.shape == shape and comp.count == 0 and comp.sizes.size == 0, b
        assert all(L.percolates(a, backend=b) is False for a in range(len(shape))), b
        span = L.run("spanning_clusters", axes=tuple(range(len(shape))), backend=b)
        assert all(v.size == 0 for v in span.clusters.values())
        assert L.run("degree", backend=b).shape == shape
        twins = L.run("batched.percolates", np.ones((2,) + shape, bool), backend=b)
        assert twins == [False, False], b
        with pytest.raises(IndexError, match="out of range for 0 sites"):
            L.distance_field(0, backend=b)
