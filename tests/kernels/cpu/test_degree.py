"""Degrees (``kernels/cpu/degree.py``) from the neighbour definition."""

from __future__ import annotations

import numpy as np
import pytest

from catalytic.kernels.cpu import degree
from tests.support.graph_cases import ASYM, CASES, asym_ids, ids

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- degree --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_degree_matches_definition(case):
    expect = np.array([len(x) for x in case.nbrs], dtype=np.int64)
    got = degree.degree(*case.args)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expect)
    # the de-duplicating path gives the same sets when there is nothing to remove
    np.testing.assert_array_equal(degree.degree(*case.args[:4], True), expect)
