"""The padded layout (``kernels/cpu/_padded.py``): what NumPy writes for small lattices
is what the kernels write for large ones, and searches agree across the threshold.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalytic.kernels.cpu import _padded, bfs, dijkstra
from tests.support.oracles import von_neumann

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- padded layout: NumPy for small lattices, parallel kernels for large ones ---------------


@st.composite
def layouts(draw):
    """A lattice, any stencil of reach up to 2 (halos of width 0 to 2 per axis, offsets
    that never land), a mask or none, site values or none."""
    d = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, {1: 40, 2: 9, 3: 5, 4: 4}[d]), min_size=d,
                                max_size=d)))
    periodic = np.array(draw(st.lists(st.booleans(), min_size=d, max_size=d)), np.uint8)
    offs = np.array(draw(st.lists(st.lists(st.integers(-2, 2), min_size=d, max_size=d),
                                  min_size=1, max_size=6)), np.int64).reshape(-1, d)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = math.prod(shape)
    open_ = ((rng.random(n) < 0.7).astype(np.uint8) if draw(st.booleans())
             else np.zeros(0, np.uint8))
    vals = rng.random(n) if draw(st.booleans()) else None
    return _padded.make_plan(shape, periodic, offs, open_), vals


def _both_layouts(fn):
    """``fn()`` with the layout written by NumPy and by the kernels."""
    keep = _padded._SMALL_LAYOUT
    try:
        _padded._SMALL_LAYOUT = 1 << 62
        small = fn()
        _padded._SMALL_LAYOUT = 0
        return small, fn()
    finally:
        _padded._SMALL_LAYOUT = keep


@settings(max_examples=150)
@given(layouts())
def test_small_layout_is_what_the_kernels_write(layout):
    """The NumPy fill and read-back used below ``_SMALL_LAYOUT`` cells give the kernels'
    arrays cell for cell: halo portals and walls, blocked sites, values, clipping."""
    g, vals = layout

    def fill():
        if vals is None:
            return _padded._work_array(g)
        out = np.empty(g.psize, np.float64)
        _padded._fill_classes(out, vals, g, 0.0, float(_padded.WALL), float(_padded.PORTAL))
        return out

    small, padded = _both_layouts(fill)
    np.testing.assert_array_equal(small, padded)
    # reading back: negative values clipped to -1 for the hop searches, as they are
    # for the weighted ones
    clip = vals is None
    src = padded + (np.arange(g.psize) % 3 - 1 if clip else 0)
    small, kernel = _both_layouts(lambda: _unpadded(src, g, clip))
    np.testing.assert_array_equal(small, kernel)
    if not clip and g.open_.shape[0] == 0:
        np.testing.assert_array_equal(kernel, vals)  # every site comes back where it was


def _unpadded(src, g, clip):
    out = np.empty(g.n, src.dtype if not clip else np.int64)
    _padded._unpad_all(src, out, g, clip)
    return out


def test_searches_agree_across_the_layout_threshold():
    """One lattice just past ``_SMALL_LAYOUT`` padded cells (kernel layout) and the same
    search with the NumPy layout: identical distance fields, hop and weighted."""
    shape = (82, 81, 80)
    rng = np.random.default_rng(2)
    open_ = (rng.random(math.prod(shape)) < 0.75).astype(np.uint8)
    open_[0] = 1
    args = (shape, np.array([1, 0, 1], np.uint8), von_neumann(3), open_, False)
    assert _padded.make_plan(*args[:4]).psize >= _padded._SMALL_LAYOUT
    w = rng.uniform(0.5, 2.0, open_.size)
    small, kernel = _both_layouts(lambda: (bfs.bfs_distance(*args, [0]),
                                           dijkstra.dijkstra_distance(*args, w, [0])))
    np.testing.assert_array_equal(small[0], kernel[0])
    np.testing.assert_array_equal(small[1], kernel[1])
    assert (kernel[0] > 10).any()
