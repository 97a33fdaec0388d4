"""Connected components on lattices above the one-call size (65,536 sites), on all of
Numba's threads: the windowed, multi-threaded labelling (row chunks joined in parallel,
then their seams) against SciPy (``ndimage.label`` for open axes, ``csgraph`` on an
explicit adjacency built by NumPy index arithmetic for periodic ones)."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from scipy import ndimage
from scipy.sparse import csgraph

from catalytic.kernels.cpu import components


def _offsets(d, stencil):
    """von Neumann, Moore, or Moore without the last-axis steps (no runs along the last
    axis: the per-site labelling)."""
    if stencil == "von_neumann":
        eye = np.eye(d, dtype=np.int64)
        return np.concatenate([-eye, eye])
    grid = np.stack(np.meshgrid(*[[-1, 0, 1]] * d, indexing="ij"), -1).reshape(-1, d)
    keep = np.any(grid != 0, axis=1)
    if stencil == "no_last_step":
        keep &= np.any(grid[:, :-1] != 0, axis=1)
    return grid[keep]


def _structure(offs, d):
    s = np.zeros((3,) * d, bool)
    s[(1,) * d] = True
    for o in offs:
        s[tuple(o + 1)] = True
    return s


def _csgraph_labels(shape, periodic, offs, mask):
    """Labels 1..count numbered by lowest flat index, 0 on blocked sites."""
    n = math.prod(shape)
    idx = np.arange(n)
    coords = np.stack(np.unravel_index(idx, shape), axis=1)
    rows, cols = [], []
    for off in offs:
        c = coords + off
        ok = mask.copy()
        for a in range(len(shape)):
            if periodic[a]:
                c[:, a] %= shape[a]
            else:
                ok &= (c[:, a] >= 0) & (c[:, a] < shape[a])
        j = np.ravel_multi_index(tuple(np.where(ok[:, None], c, 0).T), shape)
        ok &= mask[j]
        rows.append(idx[ok])
        cols.append(j[ok])
    r, c = np.concatenate(rows), np.concatenate(cols)
    A = sp.csr_array((np.ones(r.size), (r, c)), shape=(n, n))
    _, comp = csgraph.connected_components(A, directed=False)
    comp = np.where(mask, comp, -1)
    # renumber by lowest flat index
    first = {}
    out = np.zeros(n, dtype=np.int64)
    for i in np.flatnonzero(mask):
        out[i] = first.setdefault(comp[i], len(first) + 1)
    return out


CASES = [
    ((301, 257), 0.5927, "von_neumann"),
    ((64, 40, 33), 0.3116, "von_neumann"),
    ((520, 130), 0.5, "moore"),
    ((260, 270), 0.45, "no_last_step"),
]


@pytest.fixture(autouse=True)
def all_threads():
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one CPU: the multi-threaded labelling is not reached")
    prev = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(prev)


@pytest.mark.parametrize("shape, p, stencil", CASES)
def test_open_axes_match_ndimage(shape, p, stencil):
    d = len(shape)
    mask = np.random.default_rng(d).random(shape) < p
    assert mask.size * d > components._WHOLE_WORK  # the parallel passes, not one serial call
    offs = _offsets(d, stencil)
    labels, count = components.connected_components(np.array(shape), np.zeros(d, np.uint8), offs,
                                                    mask.reshape(-1).view(np.uint8), False)
    want, want_count = ndimage.label(mask, structure=_structure(offs, d))
    assert count == want_count
    np.testing.assert_array_equal(labels.reshape(shape), want)


@pytest.mark.parametrize("shape, p, stencil", CASES)
@pytest.mark.parametrize("periodic", ["all", "first", "last"])
def test_periodic_axes_match_csgraph(shape, p, stencil, periodic):
    d = len(shape)
    per = {"all": [1] * d, "first": [1] + [0] * (d - 1), "last": [0] * (d - 1) + [1]}[periodic]
    mask = np.random.default_rng(d + 7).random(shape) < p
    offs = _offsets(d, stencil)
    flat = mask.reshape(-1)
    labels, count, sizes = components.connected_components(
        np.array(shape), np.array(per, np.uint8), offs, flat.view(np.uint8), False,
        sizes=True)
    want = _csgraph_labels(shape, per, offs, flat)
    assert count == want.max()
    np.testing.assert_array_equal(labels, want)
    np.testing.assert_array_equal(sizes, np.bincount(want)[1:])
