"""``kernels.cpu.seams.join``, the union-find of the chunked labelling, against a
breadth-first oracle that places every piece in its image and reads a wrap off every
bond whose ends disagree, over hypothesis graphs (loops, self-bonds, parallel bonds,
several periodic axes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalytic.kernels.cpu.seams import join


def _oracle(u, v, w, m):
    """Each piece's set (its smallest piece) and, per set, the axes it wraps: a search
    from the smallest piece gives each piece an image; a bond whose far end's image is
    not its near end's plus the bond's crossings closes a winding loop."""
    d = w.shape[1]
    adj = [[] for _ in range(m)]
    for a, b, s in zip(u.tolist(), v.tolist(), w):
        adj[a].append((b, s))
        adj[b].append((a, -s))
    comp = np.full(m, -1)
    image = np.zeros((m, d), dtype=np.int64)
    wraps = {}
    for s0 in range(m):
        if comp[s0] >= 0:
            continue
        comp[s0] = s0
        flags = np.zeros(d, dtype=bool)
        stack = [s0]
        while stack:
            x = stack.pop()
            for y, s in adj[x]:
                if comp[y] < 0:
                    comp[y] = s0
                    image[y] = image[x] + s
                    stack.append(y)
                else:
                    flags |= image[y] != image[x] + s
        wraps[s0] = flags
    return comp, wraps


@st.composite
def graphs(draw):
    m = draw(st.integers(1, 25))
    d = draw(st.integers(1, 3))
    e = draw(st.integers(0, 40))
    u = np.array(draw(st.lists(st.integers(0, m - 1), min_size=e, max_size=e)), dtype=np.int64)
    v = np.array(draw(st.lists(st.integers(0, m - 1), min_size=e, max_size=e)), dtype=np.int64)
    # mostly bonds inside one image, some across a seam either way
    w = np.array(draw(st.lists(st.lists(st.sampled_from([0, 0, 0, 1, -1]), min_size=d,
                                        max_size=d), min_size=e, max_size=e)),
                 dtype=np.int64).reshape(e, d)
    return u, v, w, m


@given(graphs())
@settings(max_examples=300, deadline=None)
def test_join_gives_the_oracle_s_sets_and_wraps(g):
    u, v, w, m = g
    root, wraps = join(u, v, w, m)
    comp, want = _oracle(u, v, w, m)
    np.testing.assert_array_equal(root, comp)
    for s0, flags in want.items():
        np.testing.assert_array_equal(wraps[s0], flags, err_msg=f"set {s0}")


def test_a_ring_through_the_seam_wraps_and_a_bar_across_it_does_not():
    # four pieces in a ring: 0-1-2-3 inside, 3-0 across the seam forward
    root, wraps = join(np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0]),
                       np.array([[0], [0], [0], [1]]), 4)
    assert root.tolist() == [0, 0, 0, 0] and wraps[0].tolist() == [True]
    # the same pieces as a bar: crossing the seam once, no loop
    root, wraps = join(np.array([0, 1, 2]), np.array([1, 2, 3]),
                       np.array([[0], [1], [0]]), 4)
    assert root.tolist() == [0, 0, 0, 0] and wraps[0].tolist() == [False]
    # a loop that crosses the seam forward and back again: winding 0
    root, wraps = join(np.array([0, 1]), np.array([1, 0]), np.array([[1], [-1]]), 2)
    assert wraps[0].tolist() == [False]
    # a piece bonded to itself across the seam (an axis of one site)
    root, wraps = join(np.array([0]), np.array([0]), np.array([[0, 1]]), 1)
    assert wraps[0].tolist() == [False, True]


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="shapes"):
        join(np.array([0, 1]), np.array([1]), np.zeros((2, 1)), 2)
    with pytest.raises(ValueError, match="shapes"):
        join(np.array([0]), np.array([1]), np.zeros(1), 2)
