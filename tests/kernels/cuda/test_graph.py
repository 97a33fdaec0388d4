"""The CUDA graph kernels (``catalytic.kernels.cuda.graph``) against their CPU twins.

* ``sim`` tests (``NUMBA_ENABLE_CUDASIM=1``): every host function on small lattices,
  1-D to 4-D, periodic and open axes, von Neumann, Moore and an asymmetric stencil,
  periodic axes of size 1 and 2, random masks, sizes that are not multiples of the
  block size and a few that span several blocks; integer results and relaxation costs
  bit for bit, closeness to 1e-12.
* ``ptx`` tests (no simulator): every ``@cuda.jit`` kernel of the module compiles to
  sm_90 PTX for the argument types the host functions launch it with
  (``test_ptx.py`` checks that every kernel of every cuda module has a case).
"""

from __future__ import annotations

import itertools
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalytic.kernels.cpu import bfs, components, degree, dijkstra, paths

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

sim = pytest.mark.sim
ptx = pytest.mark.ptx


# ---------------------------------------------------------------------------------------
# Lattices
# ---------------------------------------------------------------------------------------


def von_neumann(d):
    out = []
    for a in range(d):
        for s in (-1, 1):
            o = [0] * d
            o[a] = s
            out.append(o)
    return np.array(out, dtype=np.int64)


def moore(d):
    return np.array([o for o in itertools.product((-1, 0, 1), repeat=d) if any(o)],
                    dtype=np.int64)


ASYM = np.array([[0, 1], [1, 0], [1, 1]], dtype=np.int64)  # directed: no inverse steps


def _case(name, shape, periodic, offsets, p_open, dedupe, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if p_open >= 1.0:
        open_ = np.zeros(0, dtype=np.uint8)
    else:
        open_ = (rng.random(n) < p_open).astype(np.uint8)
    return pytest.param(
        (np.array(shape, np.int64), np.array(periodic, np.uint8), offsets, open_, dedupe),
        id=name,
    )


# n <= ~550 sites each (the simulator runs a few thousand threads per second)
CASES = [
    _case("1d-open-11", (11,), (0,), von_neumann(1), 1.0, False, 0),
    _case("1d-per-7-mask", (7,), (1,), von_neumann(1), 0.8, False, 1),
    _case("2d-7x9-per0-vn-mask", (7, 9), (1, 0), von_neumann(2), 0.75, False, 2),
    _case("2d-11x13-open-moore-mask", (11, 13), (0, 0), moore(2), 0.6, False, 3),
    _case("3d-5x6x7-mixed-vn-mask", (5, 6, 7), (1, 0, 1), von_neumann(3), 0.7, False, 4),
    _case("2d-2x9-per-moore-dedupe", (2, 9), (1, 1), moore(2), 0.85, True, 5),
    _case("3d-1x5x6-per-moore-dedupe", (1, 5, 6), (1, 0, 1), moore(3), 0.8, True, 6),
    _case("4d-3x3x2x4-vn-dedupe", (3, 3, 2, 4), (1, 0, 1, 1), von_neumann(4), 0.8, True, 7),
    _case("2d-6x7-asym-per1", (6, 7), (0, 1), ASYM, 0.85, False, 8),
    _case("2d-23x24-vn-mask-blocks", (23, 24), (0, 1), von_neumann(2), 0.8, False, 9),
]

# the cheaper subset for the (source x site) closeness scan
SMALL = [c for c in CASES if int(np.prod(c.values[0][0])) <= 100]


def _open_sites(lat):
    shape, _, _, open_, _ = lat
    n = int(np.prod(shape))
    return np.flatnonzero(open_) if open_.shape[0] else np.arange(n)


def _pick(lat, k, seed):
    sites = _open_sites(lat)
    rng = np.random.default_rng(seed)
    return rng.choice(sites, size=min(k, sites.shape[0]), replace=False).astype(np.int64)


def _weights(lat, seed, kind):
    n = int(np.prod(lat[0]))
    rng = np.random.default_rng(seed)
    if kind == "ties":  # small integers: many equal-cost paths, exercises the tie rule
        return rng.integers(1, 4, n).astype(np.float64)
    if kind == "zeros":  # zero-cost sites: plateaus of equal cost, walked by depth
        w = rng.integers(0, 3, n).astype(np.float64)
        return w
    if kind == "absorbed":  # 1 next to 1e16 vanishes in float64: plateaus again
        return rng.choice([1.0, 1.0, 2.0, 1e16], n)
    return rng.random(n) + 0.01


def _graph():
    from catalytic.kernels.cuda import graph

    return graph


# ---------------------------------------------------------------------------------------
# Simulator parity with the CPU twins
# ---------------------------------------------------------------------------------------


@sim
@pytest.mark.parametrize("lat", CASES)
def test_bfs_distance_matches_cpu(lat):
    g = _graph()
    src = _pick(lat, 2, 10)
    got = g.bfs_distance(*lat, src).copy_to_host()
    want = bfs.bfs_distance(*lat, src)
    assert got.dtype == want.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@sim
@pytest.mark.parametrize("lat", CASES)
def test_relax_distance_equals_dijkstra_bit_for_bit(lat):
    g = _graph()
    src = _pick(lat, 2, 11)
    w = _weights(lat, 12, "float")
    got = g.relax_distance(*lat, w, src).copy_to_host()
    want = dijkstra.dijkstra_distance(*lat, w, src)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)  # exact, inf included


@sim
@pytest.mark.parametrize("lat", CASES)
def test_shortest_path_hops_is_the_cpu_path(lat):
    g = _graph()
    for seed in range(2):
        s, e = _pick(lat, 2, 20 + seed) if _open_sites(lat).shape[0] > 1 else (0, 0)
        got = g.shortest_path(*lat, int(s), int(e))
        want = paths.shortest_path(*lat, int(s), int(e))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


@sim
@pytest.mark.parametrize("kind", ["float", "ties", "zeros", "absorbed"])
@pytest.mark.parametrize("lat", [CASES[2], CASES[3], CASES[5], CASES[8]])
def test_shortest_path_weighted_is_the_cpu_path(lat, kind):
    g = _graph()
    w = _weights(lat, 30, kind)
    s, e = _pick(lat, 2, 31)
    got = g.shortest_path(*lat, int(s), int(e), w)
    want = paths.shortest_path(*lat, int(s), int(e), w)
    np.testing.assert_array_equal(got, want)


@sim
def test_shortest_path_across_absorbed_weights():
    """Issue 23, item 9: 1e16 + 1 == 1e16, so sites 0..2 all cost 1e16 from 3; the walk
    back must follow the plateau by depth (3, 2, 1, 0), never 1 -> 0 -> 1."""
    g = _graph()
    lat = (np.array([4]), np.zeros(1, np.uint8), von_neumann(1), np.zeros(0, np.uint8), False)
    w = np.array([1, 1, 1e16, 1.0])
    for end, want in ((1, [3, 2, 1]), (0, [3, 2, 1, 0]), (3, [3])):
        np.testing.assert_array_equal(g.shortest_path(*lat, 3, end, w), want)
    # a 4 x 5 plateau behind (3, 3) and (2, 4): crossed in 6 equal-cost steps, each one
    # level deeper, to the first corner (the old walk wandered 15 steps along the rows)
    lat = (np.array([4, 5]), np.zeros(2, np.uint8), von_neumann(2), np.zeros(0, np.uint8),
           False)
    w = np.ones(20)
    w[[18, 14]] = 1e16
    np.testing.assert_array_equal(g.shortest_path(*lat, 19, 0, w), [19, 14, 9, 4, 3, 2, 1, 0])


@sim
@pytest.mark.parametrize("lat", CASES)
def test_connected_components_bit_exact(lat):
    g = _graph()
    labels, count = g.connected_components(*lat)
    want, want_count = components.connected_components(*lat)
    assert count == want_count
    assert labels.dtype == want.dtype
    np.testing.assert_array_equal(labels, want)


class _StaleLoads:
    """A label array whose plain loads show a fixed old copy, as a multiprocessor's L1
    line can after another multiprocessor's compare-and-swap changed the value in L2,
    while the simulator's ``atomic.cas`` (which holds its lock) reads and writes the
    current values, as the hardware's atomics at L2 do. Counts plain loads, and gives
    up past ``limit`` of them: a union that never ends."""

    def __init__(self, current, stale, limit=10_000):
        from numba.cuda.simulator import kernelapi

        self.current, self.stale, self.limit = current, stale, limit
        self.shape, self.loads, self._cas = current.shape, 0, kernelapi.caslock

    def __getitem__(self, i):
        if self._cas.locked():
            return self.current[i]
        self.loads += 1
        if self.loads > self.limit:
            raise RuntimeError(f"union-find link still climbing after {self.limit} loads")
        return self.stale[i]

    def __setitem__(self, i, v):
        self.current[i] = v


@pytest.mark.simulator_only
def test_union_find_link_ends_when_plain_loads_are_stale():
    """Site 3 was hung under 1 by another multiprocessor, but this one's loads still see
    3 as a root. Linking 2 with 3 swaps at 3, fails, and must climb on from the parent
    the swap returned (1), not from 3 again, which it would see as a root forever."""
    from numba import cuda

    g = _graph()
    views = []

    @cuda.jit
    def link(current, stale, a, b):
        views.append(_StaleLoads(current, stale))  # the simulator runs Python here
        g._link(views[0], a, b)

    current = np.array([0, 1, 2, 1], dtype=np.int32)
    link[1, 1](current, np.arange(4, dtype=np.int32), 2, 3)
    # one tree {1, 2, 3} under its smallest index; parents never rise
    assert current.tolist() == [0, 1, 1, 1]
    assert views[0].loads < 20


@sim
@pytest.mark.parametrize("dedupe", [False, True])
@pytest.mark.parametrize("lat", CASES)
def test_degree_matches_cpu(lat, dedupe):
    g = _graph()
    lat = lat[:4] + (dedupe,)
    got = g.degree(*lat)
    want = degree.degree(*lat)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@sim
@pytest.mark.parametrize("lat", SMALL)
def test_closeness_matches_cpu(lat):
    g = _graph()
    src = _pick(lat, 3, 40)
    got = g.closeness(*lat, src, batch=2)  # 2 batches, the last one partial
    want = bfs.closeness(*lat, src)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert np.isnan(got).sum() == np.isnan(want).sum()


@sim
def test_bfs_distance_many_sources_spans_several_blocks():
    g = _graph()
    lat = CASES[-1].values[0]  # 552 sites
    src = _pick(lat, 300, 13)  # a first frontier of 300 entries: several blocks
    np.testing.assert_array_equal(g.bfs_distance(*lat, src).copy_to_host(),
                                  bfs.bfs_distance(*lat, src))


@sim
@pytest.mark.parametrize("per_check", [1, 3])
def test_levels_queued_between_host_reads(monkeypatch, per_check):
    """Levels, sweeps and closeness levels launched in batches with the host reading only
    between them, on a grid-stride grid of 2 blocks: the same distances, the same early
    stop for a path (launches past the end's level do nothing), the same sums."""
    g = _graph()
    monkeypatch.setattr(g, "LAUNCHES_PER_CHECK", per_check)
    monkeypatch.setattr(g, "_grid_blocks", lambda work: 2)
    lat = CASES[4].values[0]  # 3-D, mixed axes, 210 sites
    src = _pick(lat, 2, 60)
    np.testing.assert_array_equal(g.bfs_distance(*lat, src).copy_to_host(),
                                  bfs.bfs_distance(*lat, src))
    s, e = (int(x) for x in _pick(lat, 2, 61))
    np.testing.assert_array_equal(g.shortest_path(*lat, s, e), paths.shortest_path(*lat, s, e))
    w = _weights(lat, 62, "float")
    np.testing.assert_array_equal(g.relax_distance(*lat, w, src).copy_to_host(),
                                  dijkstra.dijkstra_distance(*lat, w, src))
    small = SMALL[0].values[0]
    c_src = _pick(small, 3, 63)
    np.testing.assert_allclose(g.closeness(*small, c_src, batch=2),
                               bfs.closeness(*small, c_src), rtol=0, atol=1e-12)


@sim
@pytest.mark.parametrize("delta, case", [(1e-3, 2), (0.7, 4), (1e9, 4)])
def test_near_far_costs_do_not_depend_on_the_bucket_width(delta, case):
    """Narrow buckets (a step per few vertices: on the 63-site lattice, which needs
    fewer of them), middling, and one bucket (a plain worklist): the same costs as
    Dijkstra, bit for bit, zero weights included."""
    g = _graph()
    lat = CASES[case].values[0]
    src = _pick(lat, 2, 65)
    for kind in ("float", "zeros"):
        w = _weights(lat, 66, kind)
        np.testing.assert_array_equal(
            g.relax_distance(*lat, w, src, delta=delta).copy_to_host(),
            dijkstra.dijkstra_distance(*lat, w, src))
    with pytest.raises(ValueError, match="delta"):
        g.relax_distance(*lat, w, src, delta=0.0)


@sim
def test_bfs_stop_leaves_the_last_level_complete():
    """With a stop site the search ends after its level, and that level is complete:
    every site nearer than the stop, and every site as near, has its final distance;
    the farther ones stay -1."""
    g = _graph()
    lat = CASES[-1].values[0]
    src = int(_pick(lat, 1, 64)[0])
    full = bfs.bfs_distance(*lat, [src])
    assert (full > 7).any()
    stop = int(np.flatnonzero(full == 7)[0])
    t = g._tables(*lat[:3], 0)
    got = g._bfs_run(t, g._device(lat[3], np.uint8, 0), [src], 0, stop=stop).copy_to_host()
    near = (full >= 0) & (full <= 7)
    np.testing.assert_array_equal(got[near], full[near])
    assert (got[~near] == -1).all()


@sim
@pytest.mark.parametrize("blocks, extra", [(0, 1), (1, -1), (1, 0), (1, 1), (2, 188)],
                         ids=["one", "block-1", "block", "block+1", "3+blocks"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_device_scan_is_cumsum(blocks, extra, dtype):
    """The prefix sum behind the component numbering, across block boundaries of
    ``THREADS`` entries (the last case: three blocks or more, their totals scanned by a
    recursive call)."""
    from numba import cuda

    g = _graph()
    n = blocks * g.THREADS + extra
    a = np.random.default_rng(n).integers(0, 3, n).astype(dtype)
    d = cuda.to_device(a)
    g._scan(d, 0)
    got = d.copy_to_host()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.cumsum(a))


@sim
def test_closeness_refuses_blocked_and_out_of_range_sources():
    g = _graph()
    off = np.array([[-1], [1]])
    open_ = np.array([1, 0, 1], np.uint8)
    with pytest.raises(IndexError, match="blocked"):
        g.closeness((3,), np.zeros(1, np.uint8), off, open_, False, [0, 1])
    with pytest.raises(IndexError, match="out of range"):
        g.closeness((3,), np.zeros(1, np.uint8), off, open_, False, [3])


@sim
def test_closeness_spans_several_blocks():
    g = _graph()
    lat = CASES[3].values[0]  # 143 sites, Moore: 2 x 143 pairs per level, several blocks
    src = _pick(lat, 2, 41)
    got = g.closeness(*lat, src, batch=2)
    np.testing.assert_allclose(got, bfs.closeness(*lat, src), rtol=0, atol=1e-12)


@st.composite
def small_lattices(draw):
    d = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 5), min_size=d, max_size=d))
    periodic = draw(st.lists(st.integers(0, 1), min_size=d, max_size=d))
    offsets = moore(d) if draw(st.booleans()) else von_neumann(d)
    n = int(np.prod(shape))
    if draw(st.booleans()):
        open_ = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.uint8)
    else:
        open_ = np.zeros(0, np.uint8)
    dedupe = any(p and s <= 2 for p, s in zip(periodic, shape))
    return (np.array(shape, np.int64), np.array(periodic, np.uint8), offsets, open_, dedupe)


@sim
@settings(max_examples=10, deadline=None)
@given(lat=small_lattices(), data=st.data())
def test_property_bfs_components_degree_agree_with_cpu(lat, data):
    g = _graph()
    sites = _open_sites(lat)
    src = [data.draw(st.sampled_from(sites.tolist()))] if sites.shape[0] else []
    np.testing.assert_array_equal(g.bfs_distance(*lat, src).copy_to_host(),
                                  bfs.bfs_distance(*lat, src))
    labels, count = g.connected_components(*lat)
    want, want_count = components.connected_components(*lat)
    assert count == want_count
    np.testing.assert_array_equal(labels, want)
    np.testing.assert_array_equal(g.degree(*lat), degree.degree(*lat))


@settings(max_examples=60, deadline=None)
@given(lat=small_lattices(), reach=st.integers(1, 3), data=st.data())
def test_fast_neighbour_path_is_the_general_one(lat, reach, data):
    """For every site inside ``_fast``'s range on every axis, one addition of the flat
    offset gives what the general decoding gives (on the host: the device functions are
    the same arithmetic), for stencils of reach up to 3, offsets that never land too."""
    from catalytic.kernels.cpu.neighbors import c_strides, neighbor

    shape, periodic = lat[0], lat[1]
    d = shape.shape[0]
    offs = np.array(data.draw(st.lists(st.lists(st.integers(-reach, reach), min_size=d,
                                                max_size=d), min_size=1, max_size=5)),
                    dtype=np.int64)
    strides = c_strides(shape)
    foff, lo, hi = _graph()._fast(shape, strides, offs)
    none = np.zeros(0, np.uint8)
    for i in range(int(np.prod(shape))):
        c = np.array(np.unravel_index(i, tuple(shape)))
        if ((c >= lo) & (c < hi)).all():
            for k in range(offs.shape[0]):
                assert i + foff[k] == neighbor(i, k, shape, strides, periodic, offs, none)
    # on an axis the stencil moves along by at most 1, only its first and last
    # coordinates are outside
    step1 = np.abs(offs).max(axis=0) <= 1
    assert (lo[step1] <= 1).all() and (hi[step1] >= shape[step1] - 1).all()


@sim
def test_closeness_all_sources_default_batch():
    g = _graph()
    lat = (np.array([3, 4], np.int64), np.array([1, 0], np.uint8), von_neumann(2),
           np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1], np.uint8), False)
    got = g.closeness(*lat)
    want = bfs.closeness(*lat)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert np.isnan(got[lat[3] == 0]).all()


@sim
@pytest.mark.parametrize("lat", [CASES[1], CASES[2], CASES[5], CASES[7], CASES[8]])
def test_bfs_distance_batched_rows_match_cpu(lat):
    g = _graph()
    shape, periodic, offsets, open_, dedupe = lat
    n = int(np.prod(shape))
    rng = np.random.default_rng(50)
    base = open_ if open_.shape[0] else np.ones(n, np.uint8)
    stack = np.stack([base, (rng.random(n) < 0.8).astype(np.uint8), np.ones(n, np.uint8)])
    stack[:, 0] = 1  # a common open source
    src = np.array([0, 0, n - 1], dtype=np.int64)
    got = g.bfs_distance_batched(shape, periodic, offsets, stack, dedupe, src).copy_to_host()
    assert got.shape == (3, n)
    for b in range(3):
        want = bfs.bfs_distance(shape, periodic, offsets, stack[b], dedupe, [src[b]])
        np.testing.assert_array_equal(got[b], want)


@sim
def test_bfs_distance_batched_all_open_stack():
    g = _graph()
    shape, periodic, offsets = np.array([5, 6], np.int64), np.array([0, 1], np.uint8), moore(2)
    got = g.bfs_distance_batched(shape, periodic, offsets, np.zeros((2, 0), np.uint8), False,
                                 [0, 17]).copy_to_host()
    for b, s in enumerate([0, 17]):
        want = bfs.bfs_distance(shape, periodic, offsets, np.zeros(0, np.uint8), False, [s])
        np.testing.assert_array_equal(got[b], want)


@sim
@pytest.mark.parametrize("lat", [CASES[1], CASES[2], CASES[5], CASES[8]])
def test_connected_components_batched_rows_match_cpu(lat):
    g = _graph()
    shape, periodic, offsets, open_, dedupe = lat
    n = int(np.prod(shape))
    rng = np.random.default_rng(51)
    base = open_ if open_.shape[0] else np.ones(n, np.uint8)
    # percolation samples around p_c, one fully blocked and one fully open lattice
    stack = np.stack([base, (rng.random(n) < 0.6).astype(np.uint8),
                      np.zeros(n, np.uint8), np.ones(n, np.uint8)])
    labels, counts = g.connected_components_batched(shape, periodic, offsets, stack, dedupe)
    assert labels.shape == (4, n) and counts.shape == (4,)
    for b in range(4):
        want, want_count = components.connected_components(shape, periodic, offsets, stack[b],
                                                            dedupe)
        np.testing.assert_array_equal(labels[b], want.reshape(-1))
        assert counts[b] == want_count


@sim
def test_connected_components_batched_all_open_and_device_stack():
    from numba import cuda

    g = _graph()
    shape, periodic, offsets = np.array([4, 5], np.int64), np.array([1, 0], np.uint8), ASYM
    labels, counts = g.connected_components_batched(shape, periodic, offsets,
                                                    np.zeros((2, 0), np.uint8), False)
    want, want_count = components.connected_components(shape, periodic, offsets,
                                                        np.zeros(0, np.uint8), False)
    for b in range(2):
        np.testing.assert_array_equal(labels[b], want.reshape(-1))
        assert counts[b] == want_count
    stack = (np.random.default_rng(3).random((2, 20)) < 0.5).astype(np.uint8)
    labels, counts = g.connected_components_batched(shape, periodic, offsets,
                                                    cuda.to_device(stack), False)
    for b in range(2):
        want, want_count = components.connected_components(shape, periodic, offsets, stack[b],
                                                            False)
        np.testing.assert_array_equal(labels[b], want.reshape(-1))
        assert counts[b] == want_count
    with pytest.raises(ValueError, match="entries"):
        g.connected_components_batched(shape, periodic, offsets, np.ones((2, 7), np.uint8), False)


@sim
def test_device_inputs_and_a_stream_are_accepted():
    from numba import cuda

    g = _graph()
    shape, periodic, offsets, open_, dedupe = CASES[2].values[0]
    w = _weights(CASES[2].values[0], 60, "float")
    src = _pick(CASES[2].values[0], 1, 61)
    stream = cuda.stream()
    d_open = cuda.to_device(open_)
    d_w = cuda.to_device(w)
    got = g.relax_distance(shape, periodic, offsets, d_open, dedupe, d_w, src, stream=stream)
    np.testing.assert_array_equal(got.copy_to_host(),
                                  dijkstra.dijkstra_distance(shape, periodic, offsets, open_,
                                                             dedupe, w, src))
    got = g.bfs_distance(shape, periodic, offsets, d_open, dedupe, src, stream=stream)
    np.testing.assert_array_equal(got.copy_to_host(),
                                  bfs.bfs_distance(shape, periodic, offsets, open_, dedupe, src))
    s, e = _pick(CASES[2].values[0], 2, 62)
    np.testing.assert_array_equal(
        g.shortest_path(shape, periodic, offsets, d_open, dedupe, s, e, d_w, stream=stream),
        paths.shortest_path(shape, periodic, offsets, open_, dedupe, s, e, w))


@sim
def test_unreachable_and_trivial_paths():
    g = _graph()
    shape, periodic, offsets = np.array([3, 5], np.int64), np.zeros(2, np.uint8), von_neumann(2)
    open_ = np.array([1, 1, 0, 1, 1,
                      1, 1, 0, 1, 1,
                      1, 1, 0, 1, 1], np.uint8)  # column 2 blocked: two halves
    lat = (shape, periodic, offsets, open_, False)
    assert g.shortest_path(*lat, 0, 4).shape == (0,)
    assert g.shortest_path(*lat, 0, 4, np.ones(15)).shape == (0,)
    np.testing.assert_array_equal(g.shortest_path(*lat, 6, 6), [6])
    d = g.bfs_distance(*lat, [0]).copy_to_host()
    assert (d[[2, 3, 4, 7, 8, 9, 12, 13, 14]] == -1).all()
    r = g.relax_distance(*lat, np.ones(15), [0]).copy_to_host()
    assert np.isinf(r[[2, 3, 4]]).all()
    labels, count = g.connected_components(*lat)
    assert count == 2 and (labels[open_ == 0] == 0).all()


@sim
def test_bad_arguments_name_the_value():
    g = _graph()
    lat = (np.array([3, 4], np.int64), np.zeros(2, np.uint8), von_neumann(2),
           np.zeros(0, np.uint8), False)
    with pytest.raises(IndexError, match="99"):
        g.bfs_distance(*lat, [99])
    with pytest.raises(ValueError, match="batch"):
        g.closeness(*lat, batch=0)
    with pytest.raises(ValueError, match="3 entries"):
        g.bfs_distance_batched(*lat[:3], np.ones((2, 12), np.uint8), False, [0, 1, 2])


@sim
@pytest.mark.parametrize("dedupe", [False, True])
def test_degree_of_a_stencil_past_the_old_buffer_size(dedupe):
    """No per-thread buffer bounds the stencil any more (it was 256 offsets): 288
    offsets, most of them landing on the same few sites of a small periodic lattice."""
    g = _graph()
    big = np.array([o for o in itertools.product(range(-3, 4), repeat=2) if any(o)] * 6)
    lat = (np.array([3, 4], np.int64), np.array([1, 0], np.uint8), big,
           np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1], np.uint8), dedupe)
    assert big.shape[0] == 288
    np.testing.assert_array_equal(g.degree(*lat), degree.degree(*lat))


@sim
def test_closeness_bit_passes_and_repeated_sources():
    """More sources than a word has bits (two passes of 64 and a remainder), a source
    named twice, and a batch outside 1..64 refused."""
    g = _graph()
    lat = (np.array([9, 9], np.int64), np.zeros(2, np.uint8), moore(2),
           np.zeros(0, np.uint8), False)  # 81 sites, 8 levels from a corner
    src = _pick(lat, 70, 70)
    assert src.shape[0] == 70
    src = np.concatenate([src, src[:3]])
    np.testing.assert_allclose(g.closeness(*lat, src), bfs.closeness(*lat, src), rtol=0,
                               atol=1e-12)
    for bad in (0, 65):
        with pytest.raises(ValueError, match="1 to 64"):
            g.closeness(*lat, src, batch=bad)


# ---------------------------------------------------------------------------------------
# PTX for sm_90
# ---------------------------------------------------------------------------------------


def _ptx_cases():
    from numba import types as T

    i64, u8, f64, o = T.int64[::1], T.uint8[::1], T.float64[::1], T.int64[:, ::1]
    i32 = T.int32[::1]
    geo = (i64, i64, u8, o)  # shape, strides, periodic, offsets
    fast = (i64, i64, i64)  # foff, lo, hi
    bonds = (i64, T.uint32[::1], T.int64)  # bond slots, bits, words
    return {
        "_fill[int64]": ("_fill", (i64, T.int64)),
        "_fill[float64]": ("_fill", (f64, T.float64)),
        "_scatter[int64]": ("_scatter", (i64, T.int32[::1], T.int64)),
        "_scatter[float64]": ("_scatter", (f64, T.int32[::1], T.float64)),
        "_scatter[int64 index]": ("_scatter", (i64, i64, T.int64)),
        "_bfs_level": ("_bfs_level",
                       geo + fast + (u8,) + bonds + (i64, i32, i32, i64, T.int64, T.int64)),
        "_bfs_level[int64 index]": ("_bfs_level",
                                    geo + fast + (u8,) + bonds + (i64, i64, i64, i64, T.int64,
                                                                  T.int64)),
        "_nf_relax": ("_nf_relax", geo + fast + (u8,) + bonds + (f64, f64, f64, f64, i32, i32,
                                                                 i64, T.int64, i32, i32, f64)),
        "_nf_far_min": ("_nf_far_min", (f64, T.int32[::1], i64, T.int64, f64)),
        "_nf_split": ("_nf_split", (f64, i32, i32, i32, i64, T.int64, f64, f64, T.float64)),
        "_weight_sum": ("_weight_sum", (f64, u8, f64)),
        "_fill[int32]": ("_fill", (T.int32[::1], T.int32)),
        "_uf_init": ("_uf_init", (T.int32[:, ::1], T.uint8[:, ::1])),
        "_uf_union": ("_uf_union", geo + fast + (T.uint8[:, ::1],) + bonds
                      + (T.int32[:, ::1],)),
        "_uf_union[int64 index]": ("_uf_union", geo + fast + (T.uint8[:, ::1],) + bonds
                                   + (T.int64[:, ::1],)),
        "_uf_roots[int32]": ("_uf_roots", (T.int32[:, ::1], i32)),
        "_uf_roots[int64]": ("_uf_roots", (T.int64[:, ::1], i64)),
        "_uf_number[int32]": ("_uf_number", (T.int32[:, ::1], i32, T.int32[:, ::1], i64)),
        "_scan_blocks[int32]": ("_scan_blocks", (T.int32[::1], T.int32[::1])),
        "_scan_blocks[int64]": ("_scan_blocks", (i64, i64)),
        "_scan_add[int32]": ("_scan_add", (T.int32[::1], T.int32[::1])),
        "_degree": ("_degree", geo + fast + (u8, u8) + bonds + (T.boolean, i64)),
        "_walk_hops": ("_walk_hops", geo + fast + (u8,) + bonds + (i64, T.int64, i64)),
        "_parents[hops]": ("_parents", geo + fast + (u8,) + bonds
                           + (f64, f64, f64, i64, u8, i64, T.boolean, i64)),
        "_parents[costs]": ("_parents", geo + fast + (u8,) + bonds
                            + (f64, f64, f64, f64, u8, i64, T.boolean, i64)),
        "_jump": ("_jump", (i64, i64, i32)),
        "_fill[uint64]": ("_fill", (T.uint64[::1], T.uint64)),
        "_bits_start": ("_bits_start", (T.uint64[::1], T.uint64[::1], i64)),
        "_bits_level": ("_bits_level",
                        geo + fast + (u8,) + bonds + (T.uint64[::1], T.uint64[::1],
                                                      T.uint64[::1], T.int64, i64, i64, i64)),
        "_batched_init": ("_batched_init", (T.int64[:, ::1], i64)),
        "_batched_level": ("_batched_level",
                           geo + fast + (T.uint8[:, ::1],) + bonds
                           + (T.int64[:, ::1], T.int64, i64)),
    }


PTX_IDS = list(_ptx_cases())


@ptx
@pytest.mark.parametrize("case", PTX_IDS)
def test_kernel_compiles_to_sm90_ptx(compile_ptx, case):
    g = _graph()
    name, argtypes = _ptx_cases()[case]
    text = compile_ptx(getattr(g, name), argtypes)
    assert ".entry" in text
    if name in ("_bfs_level", "_uf_union"):
        assert "atom.global.cas" in text  # the claim, the link: a compare-and-swap
    if name == "_bits_level":
        assert "atom.global.add" in text and "atom.shared.add" in text
        assert "popc.b64" in text


@ptx
def test_near_far_fences_between_a_new_cost_and_the_claim(compile_ptx):
    """The hardware may reorder what the simulator cannot: in ``_nf_relax`` the 64-bit
    compare-and-swap that lowers a cost (``atomic.min`` on a float is a swap loop) is
    followed by a ``membar.gl`` (``fence.sc.gpu``) before the 32-bit swap that claims
    the vertex; and the vertex being expanded drops its claim, then fences, then reads
    its cost. A fence on both sides keeps an improvement from being lost."""
    g = _graph()
    text = compile_ptx(g._nf_relax, _ptx_cases()["_nf_relax"][1])
    ops = [m.group(0) for m in re.finditer(
        r"membar\.gl|atom\.global\.(?:cas\.b64|cas\.b32|exch\.b32)|ld\.volatile\.global\.f64",
        text)]
    # the expansion: claim and flag dropped, a fence, then the cost read
    assert ops[:4] == ["atom.global.exch.b32", "atom.global.exch.b32", "membar.gl",
                       "ld.volatile.global.f64"], ops
    # the relaxation: the cost swap, a fence, the claim, with nothing between them
    lower = ops.index("atom.global.cas.b64")
    assert ops[lower + 1:lower + 3] == ["membar.gl", "atom.global.cas.b32"], ops


@pytest.mark.skipif(SIM, reason="about the real driver's context handles")
@pytest.mark.parametrize("kind", ["ctypes", "bindings"])
def test_table_cache_key_reads_either_kind_of_context_handle(monkeypatch, kind):
    """The cached tables are keyed by CUDA context: numba-cuda's ctypes binding gives a
    c_void_p handle, the NVIDIA CUDA bindings a CUcontext (an int, no ``value``)."""
    import ctypes
    import types

    g = _graph()
    if kind == "ctypes":
        handle = ctypes.c_void_p(1234)
    else:
        driver = pytest.importorskip("cuda.bindings.driver",
                                     reason="the NVIDIA CUDA bindings are not installed")
        handle = driver.CUcontext(1234)
    monkeypatch.setattr(g, "_SIMULATOR", False)
    monkeypatch.setattr(g.cuda, "current_context",
                        lambda: types.SimpleNamespace(handle=handle))
    assert g._context_key() == 1234
