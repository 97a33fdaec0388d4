"""The catalytic path search (``kernels/cpu/catalytic_path.py``) gives the shortest path."""

from __future__ import annotations

import numpy as np
import pytest

from catalytic.kernels.cpu import catalytic_path, paths
from tests.support.graph_cases import CASES, draw_pairs, ids

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- catalytic path ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_catalytic_path_equals_shortest_path(case):
    rng = np.random.default_rng(5)
    for s, e in draw_pairs(case):
        state = rng.integers(0, 256, case.n + 17, dtype=np.uint8)
        tail = state[case.n:].copy()
        got = catalytic_path.catalytic_path(*case.args, int(s), int(e), state)
        np.testing.assert_array_equal(got, paths.shortest_path(*case.args, int(s), int(e)))
        np.testing.assert_array_equal(state[case.n:], tail)  # only state[:n] is used
