"""Batched CPU kernels (``kernels/cpu/batched.py``) against independent oracles: every
row against NetworkX on the graph built from the neighbour definition
(``tests.support.oracles``), and SciPy's ``ndimage.label`` for the face check, on one
thread and on all of Numba's threads, with small kernel budgets too."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import ndimage

from catalytic.kernels.cpu import batched as KB
from catalytic.kernels.cpu import _budget, bfs, components
from tests.support.oracles import offsets_of, oracle_graph
from tests.support.strategies import lattice_specs


def _masks(shape, rows, seed, p=None):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.3, 0.9) if p is None else p
    return rng.random((rows,) + tuple(shape)) < p


def _oracle_spans(shape, periodic, stencil, mask, axis) -> bool:
    """A cluster of the graph (NetworkX components) holding a site with coordinate 0
    and one with coordinate L - 1 along ``axis``."""
    g = oracle_graph(shape, periodic, stencil, mask)
    for comp in nx.connected_components(g):
        c = np.array([np.unravel_index(i, shape)[axis] for i in comp])
        if (c == 0).any() and (c == shape[axis] - 1).any():
            return True
    return False


def _oracle_hops(shape, periodic, stencil, mask, sources) -> np.ndarray:
    g = oracle_graph(shape, periodic, stencil, mask, all_nodes=True)
    out = np.full(math.prod(shape), -1, dtype=np.int64)
    for i, h in nx.multi_source_dijkstra_path_length(g, set(int(s) for s in sources)).items():
        out[i] = h
    return out


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # threads: per test
@given(spec=lattice_specs(max_dim=3, masks=False), rows=st.integers(0, 4),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_percolates_batched_equals_networkx(threads, spec, rows, seed, data):
    shape, per = spec["shape"], spec["periodic"]
    offsets = offsets_of(spec["stencil"], len(shape))
    open_axes = [a for a in range(len(shape)) if not per[a]]
    if not open_axes:
        return
    axis = data.draw(st.sampled_from(open_axes), label="axis")
    assert KB.spans_fits(shape, np.array(per, np.uint8), offsets, axis)
    masks = _masks(shape, rows, seed)
    got = KB.percolates_batched(shape, np.array(per, np.uint8), offsets,
                                masks.reshape(rows, math.prod(shape)).view(np.uint8), axis)
    assert got.dtype == np.bool_ and got.shape == (rows,)
    for b in range(rows):
        assert bool(got[b]) is _oracle_spans(shape, per, spec["stencil"], masks[b], axis)


def test_percolates_batched_against_ndimage_on_an_ensemble(threads):
    """Many 2-D lattices near the threshold (both answers common), against the labels
    of ``scipy.ndimage.label``; all-open rows (a (B, 0) stack) span."""
    shape = (31, 23)
    masks = _masks(shape, 60, 3, p=0.6)
    vn = offsets_of("von_neumann", 2)
    for axis in (0, 1):
        got = KB.percolates_batched(shape, np.zeros(2, np.uint8), vn,
                                    masks.reshape(60, -1).view(np.uint8), axis)
        want = []
        for m in masks:
            lab, _ = ndimage.label(m)
            lo, hi = np.take(lab, 0, axis), np.take(lab, -1, axis)
            want.append(bool(np.intersect1d(lo[lo > 0], hi[hi > 0]).size))
        assert got.tolist() == want and 0 < sum(want) < 60
    full = KB.percolates_batched(shape, np.zeros(2, np.uint8), vn, np.zeros((3, 0), np.uint8), 0)
    assert full.tolist() == [True] * 3


def test_small_budgets_give_the_same_answers(threads, monkeypatch):
    shape = (17, 13)
    masks = _masks(shape, 9, 4, p=0.6)
    masks[:, 0, 0] = True
    stack = masks.reshape(9, -1).view(np.uint8)
    args = (shape, np.array([1, 0], np.uint8), offsets_of("moore", 2))
    src = np.zeros(9, np.int64)
    want_p = KB.percolates_batched(*args, stack, 1)
    want_d = KB.bfs_distance_batched(*args, stack, False, src)
    # one lattice per thread per kernel call (and still one serial labelling each)
    monkeypatch.setattr(_budget, "_BUDGET", 17 * 13 * (4 + 4 * 4))
    assert np.array_equal(KB.percolates_batched(*args, stack, 1), want_p)
    assert np.array_equal(KB.bfs_distance_batched(*args, stack, False, src), want_d)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # threads: per test
@given(spec=lattice_specs(max_dim=3, masks=False), rows=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1), many=st.booleans())
def test_bfs_distance_batched_equals_networkx(threads, spec, rows, seed, many):
    shape, per = spec["shape"], spec["periodic"]
    offsets = offsets_of(spec["stencil"], len(shape))
    n = math.prod(shape)
    masks = _masks(shape, rows, seed)
    rng = np.random.default_rng(seed)
    m = 3 if many else 1
    src = rng.integers(0, n, size=(rows, m))
    flat = masks.reshape(rows, -1)
    flat[np.arange(rows)[:, None], src] = True  # sources are open
    got = KB.bfs_distance_batched(shape, np.array(per, np.uint8), offsets,
                                  flat.view(np.uint8), False, src if many else src[:, 0])
    assert got.dtype == np.int64 and got.shape == (rows, n)
    for b in range(rows):
        want = _oracle_hops(shape, per, spec["stencil"], masks[b], src[b])
        assert np.array_equal(got[b], want)
        # and the single kernel, bit for bit
        assert np.array_equal(got[b], bfs.bfs_distance(shape, np.array(per, np.uint8), offsets,
                                                       flat[b].view(np.uint8), False, src[b]))


def test_bad_stacks_and_sources_are_refused_clearly():
    vn = offsets_of("von_neumann", 2)
    per = np.zeros(2, np.uint8)
    with pytest.raises(ValueError, match=r"\(B, 12\) or \(B, 0\)"):
        KB.percolates_batched((3, 4), per, vn, np.ones((2, 5), np.uint8), 0)
    with pytest.raises(ValueError, match="axis 2 out of range"):
        KB.percolates_batched((3, 4), per, vn, np.ones((2, 12), np.uint8), 2)
    with pytest.raises(ValueError, match="open axis"):
        KB.percolates_batched((3, 4), np.array([1, 0], np.uint8), vn,
                              np.ones((2, 12), np.uint8), 0)
    with pytest.raises(ValueError, match="B = 2"):
        KB.bfs_distance_batched((3, 4), per, vn, np.ones((2, 12), np.uint8), False, [0])
    with pytest.raises(IndexError, match="out of range"):
        KB.bfs_distance_batched((3, 4), per, vn, np.ones((2, 12), np.uint8), False, [0, 12])
    stack = np.ones((2, 12), np.uint8)
    stack[1, 5] = 0
    with pytest.raises(IndexError, match="source 5 is a blocked site in row 1"):
        KB.bfs_distance_batched((3, 4), per, vn, stack, False, [5, 5])
    before = stack.copy()
    KB.bfs_distance_batched((3, 4), per, vn, stack, False, [0, 0])
    KB.percolates_batched((3, 4), per, vn, stack, 1)
    assert np.array_equal(stack, before)  # the caller's stack is not modified


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # threads: per test
@given(spec=lattice_specs(max_dim=3, masks=False), rows=st.integers(0, 4),
       seed=st.integers(0, 2**32 - 1))
def test_connected_components_rows_equal_the_single_kernel(threads, spec, rows, seed):
    """Each row's labels in an array of its own, bit for bit the single labelling (both
    kernel paths: runs for von Neumann and Moore, sites for stencils without the unit
    last-axis step are covered below), counts and sizes against the labels."""
    shape, per = spec["shape"], np.array(spec["periodic"], np.uint8)
    offsets = offsets_of(spec["stencil"], len(shape))
    n = math.prod(shape)
    stack = _masks(shape, rows, seed).reshape(rows, n).view(np.uint8)
    labels, counts, sizes = KB.connected_components_rows(shape, per, offsets, stack)
    assert len(labels) == len(sizes) == rows and counts.shape == (rows,)
    for b in range(rows):
        want, count = components.connected_components(shape, per, offsets, stack[b], False)
        assert labels[b].dtype == np.int32 and labels[b].flags.owndata
        assert np.array_equal(labels[b], want) and counts[b] == count
        assert np.array_equal(sizes[b], np.bincount(want, minlength=count + 1)[1:])
    assert len({id(a) for a in labels}) == rows  # every row its own array


def test_connected_components_rows_against_ndimage_and_its_faces(threads):
    masks = _masks((20, 17), 7, 5, p=0.6)
    vn = offsets_of("von_neumann", 2)
    stack = masks.reshape(7, -1).view(np.uint8)
    labels, counts, _ = KB.connected_components_rows((20, 17), np.zeros(2, np.uint8), vn, stack)
    for b in range(7):
        want, count = ndimage.label(masks[b])
        assert counts[b] == count and np.array_equal(labels[b].reshape(20, 17), want)
    for axis in (0, 1):
        faces = KB.face_spanning_rows(labels, counts, (20, 17), axis)
        for b in range(7):
            lab = labels[b].reshape(20, 17)
            lo, hi = np.take(lab, 0, axis), np.take(lab, -1, axis)
            assert np.array_equal(faces[b], np.intersect1d(lo[lo > 0], hi[hi > 0]))
    # steps of two along both axes: no unit step, the sites kernel
    two = 2 * vn
    labels, counts, _ = KB.connected_components_rows((20, 17), np.zeros(2, np.uint8), two, stack)
    for b in range(7):
        count = sum(ndimage.label(masks[b][r::2, c::2])[1] for r in (0, 1) for c in (0, 1))
        assert counts[b] == count
        want, _ = components.connected_components((20, 17), np.zeros(2, np.uint8), two, stack[b],
                                                  False)
        assert np.array_equal(labels[b], want)
    with pytest.raises(ValueError, match="C-contiguous int32"):
        KB.face_spanning_rows([np.zeros(340, np.int64)], np.array([0]), (20, 17), 0)
