"""Fixtures shared by the CPU kernel tests."""

from __future__ import annotations

import numba
import pytest


@pytest.fixture(params=["one-thread", "all-threads"])
def threads(request):
    """The test on one thread (as the backend runs small lattices) and on all of Numba's
    threads (row chunks, seams, per-thread buffers)."""
    prev = numba.get_num_threads()
    if request.param == "one-thread":
        numba.set_num_threads(1)
    try:
        yield request.param
    finally:
        numba.set_num_threads(prev)
