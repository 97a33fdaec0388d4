"""Shortest paths and path counts (``kernels/cpu/paths.py``): the tie rule on oracle
distances, closed forms and NetworkX.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalytic.kernels.cpu import catalytic_path, paths
from tests.support.graph_cases import CASES, draw_pairs, ids, walk_oracle
from tests.support.oracles import von_neumann

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- shortest paths ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_shortest_path_hops_tie_rule(case):
    for s, e in draw_pairs(case):
        got = paths.shortest_path(*case.args, int(s), int(e))
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, walk_oracle(case, s, e))


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_shortest_path_weighted_tie_rule(case):
    # few distinct weights: many equal-cost ties, exactly representable sums
    w = case.rng.choice([0.5, 1.0, 1.5, 2.0], size=case.n)
    for s, e in draw_pairs(case):
        got = paths.shortest_path(*case.args, int(s), int(e), weights=w)
        np.testing.assert_array_equal(got, walk_oracle(case, s, e, w))


@pytest.mark.parametrize("case", CASES[::2], ids=ids[::2])
def test_shortest_path_zero_weights_is_a_shortest_simple_path(case):
    """Zero costs allow cycles of tight steps; the walk must still end at ``start`` with
    a simple path of least cost."""
    w = case.rng.choice([0.0, 0.0, 0.0, 1.0], size=case.n)
    for s, e in draw_pairs(case):
        got = paths.shortest_path(*case.args, int(s), int(e), weights=w)
        # networkx, not scipy: scipy reads explicit zeros in a sparse matrix as "no edge"
        ref = nx.single_source_dijkstra_path_length(case.digraph(w), int(s))
        if int(e) not in ref:
            assert got.size == 0
            continue
        assert got[0] == s and got[-1] == e
        assert len(set(got.tolist())) == got.size
        for u, v in zip(got[:-1], got[1:]):
            assert v in case.nbrs[u]
        assert math.isclose(float(w[got[1:]].sum()), ref[int(e)], rel_tol=1e-12, abs_tol=1e-12)


def test_shortest_path_unreachable_is_empty():
    mask = np.array([1, 1, 0, 1, 1], dtype=np.uint8)
    args = (np.array([5]), np.zeros(1, np.uint8), von_neumann(1), mask, False)
    assert paths.shortest_path(*args, 0, 4).size == 0
    assert paths.shortest_path(*args, 0, 4, weights=np.ones(5)).size == 0
    assert catalytic_path.catalytic_path(*args, 0, 4, np.zeros(5, np.uint8)).size == 0
    assert paths.count_shortest_paths(*args, 0, 4) == (0, False)
    np.testing.assert_array_equal(paths.shortest_path(*args, 3, 3), [3])


# -- counting ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 4, 5), (6,), (2, 7), (4, 4, 4, 2), (1, 5)])
def test_count_shortest_paths_closed_form(shape):
    d = len(shape)
    n = math.prod(shape)
    args = (np.array(shape), np.zeros(d, np.uint8), von_neumann(d), np.zeros(0, np.uint8), False)
    steps = [s - 1 for s in shape]
    expect = math.factorial(sum(steps))
    for s in steps:
        expect //= math.factorial(s)
    assert paths.count_shortest_paths(*args, 0, n - 1) == (expect, False)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_count_shortest_paths_matches_networkx(case):
    U = case.graph()
    for s, e in draw_pairs(case, 3):
        s, e = int(s), int(e)
        got = paths.count_shortest_paths(*case.args, s, e)
        if nx.has_path(U, s, e):
            expect = sum(1 for _ in nx.all_shortest_paths(U, s, e))
        else:
            expect = 0
        assert got == (expect, False)


def test_count_shortest_paths_periodic_duplicates_counted_once():
    # periodic axis of size 2: +1 and -1 reach the same site; one path, not two
    args = (np.array([2]), np.ones(1, np.uint8), von_neumann(1), np.zeros(0, np.uint8), True)
    assert paths.count_shortest_paths(*args, 0, 1) == (1, False)
    args = (np.array([2, 3]), np.array([1, 0], np.uint8), von_neumann(2), np.zeros(0, np.uint8),
            True)
    assert paths.count_shortest_paths(*args, 0, 5) == (3, False)


def test_count_shortest_paths_overflow_flag():
    def count(m):
        args = (np.array([m, m]), np.zeros(2, np.uint8), von_neumann(2), np.zeros(0, np.uint8),
                False)
        return paths.count_shortest_paths(*args, 0, m * m - 1)

    assert count(34) == (math.comb(66, 33), False)  # 7.2e18 < 2**63
    assert count(35)[1] is True  # C(68, 34) = 2.8e19
    assert count(120)[1] is True


# -- lattices without blocked sites: hops in closed form ------------------------------------
@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
       data=st.data(), stencil=st.sampled_from(["von_neumann", "moore"]))
def test_free_lattices_walk_the_closed_form_to_the_search_s_paths(shape, data, stencil):
    """No mask, no bonds, no weights, von Neumann or Moore: the paths read from the
    closed-form hops (no search) are the reference's (a BFS and the tie rule), periodic
    axes of 1 and 2 sites included, for one end, the nearest of several, and each."""
    import catalytic as cat

    periodic = tuple(data.draw(st.lists(st.booleans(), min_size=len(shape),
                                        max_size=len(shape))))
    L = cat.Lattice(shape=tuple(shape), periodic=periodic, stencil=stencil)
    g = L.geometry
    metric = paths._free_metric(g.offsets, g.open_flat, None)
    # (in 1-D the two stencils are one: the sum and the largest agree)
    assert metric is not None and (len(shape) == 1 or metric is (stencil == "moore"))
    n = g.n_points
    start = data.draw(st.integers(0, n - 1))
    ends = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4)))
    want = [L.find_shortest_path(start, int(e), backend="numpy") for e in ends]
    got = paths.shortest_paths(*g.kernel_args(), start, ends)
    for (path, hops), w in zip(got, want):
        assert np.array_equal(path, w.path) and hops == w.distance
    j, path, hops = paths.shortest_paths(*g.kernel_args(), start, ends, first=True)
    best = min((w.distance, int(e)) for w, e in zip(want, ends))
    assert (hops, int(ends[j])) == best and np.array_equal(path, want[j].path)


def test_a_mask_bonds_or_another_stencil_search_as_before():
    import catalytic as cat

    g = cat.Lattice(shape=(4, 4)).geometry
    assert paths._free_metric(g.offsets, np.ones(16, np.uint8), None) is None
    assert paths._free_metric(g.offsets, g.open_flat, g.bond_args()) is None
    knight = np.array([[1, 2], [-1, -2], [1, 0], [-1, 0], [0, 1], [0, -1]])
    assert paths._free_metric(knight, g.open_flat, None) is None


@settings(max_examples=100, deadline=None)
@given(shape=st.lists(st.integers(1, 8), min_size=1, max_size=3), data=st.data(),
       blocked=st.sampled_from([0.05, 0.2, 0.4]))
def test_monotone_paths_are_the_search_s_paths_and_their_absence_searches(shape, data,
                                                                          blocked):
    """Von Neumann, open axes, blocked sites, one end: a path stepping only towards the
    end is read from one sweep and is the reference's; where none exists the sweep says
    so and the search gives the reference's (a detour, or none)."""
    import catalytic as cat

    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    mask = rng.random(tuple(shape)) >= blocked
    L = cat.Lattice(shape=tuple(shape), mask=mask)
    g = L.geometry
    open_ = g.open_sites()
    if open_.size == 0:
        return
    s = int(data.draw(st.sampled_from(open_.tolist())))
    e = int(data.draw(st.sampled_from(open_.tolist())))
    want = L.find_shortest_path(s, e, backend="numpy")
    mono = paths._monotone_path(g.shape_arr, g.periodic_arr, g.open_flat, s, e)
    l1 = int(np.abs(np.subtract(np.unravel_index(s, g.shape),
                                np.unravel_index(e, g.shape))).sum())
    if mono is not None:
        assert want.distance == l1 and np.array_equal(mono, want.path)
    else:
        assert want.distance != l1
    got = paths.shortest_path(*g.kernel_args(), s, e, with_cost=True)
    assert np.array_equal(got[0], want.path) and got[1] == want.distance
