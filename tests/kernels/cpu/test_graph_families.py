"""The graph kernel families together on hypothesis-drawn lattices: BFS distances,
components, degrees and shortest paths against the shared oracles.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalytic.kernels.cpu import bfs, components, degree, paths
from tests.support.graph_cases import (
    Case,
    bfs_oracle,
    canonical_labels,
    draw_sources,
    walk_oracle,
)
from tests.support.oracles import moore, von_neumann

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- property test: random lattices --------------------------------------------------------


@st.composite
def lattices(draw):
    d = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, {1: 12, 2: 6, 3: 4, 4: 3}[d]), min_size=d,
                                max_size=d)))
    periodic = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    offs = von_neumann(d) if draw(st.booleans()) else moore(d)
    p_open = draw(st.sampled_from([1.0, 0.8, 0.5]))
    return Case(shape, periodic, offs, p_open, draw(st.integers(0, 2**16)))


@given(lattices())
def test_random_lattices_distances_components_degree(case):
    src = draw_sources(case, 2)
    np.testing.assert_array_equal(bfs.bfs_distance(*case.args, src), bfs_oracle(case, src))
    labels, count = components.connected_components(*case.args)
    comps = list(nx.connected_components(case.graph()))
    assert count == len(comps)
    np.testing.assert_array_equal(labels, canonical_labels(case, comps))
    np.testing.assert_array_equal(degree.degree(*case.args), [len(x) for x in case.nbrs])
    s, e = (int(x) for x in case.rng.choice(case.open_sites(), 2))
    np.testing.assert_array_equal(paths.shortest_path(*case.args, s, e), walk_oracle(case, s, e))
