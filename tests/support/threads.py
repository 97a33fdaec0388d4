"""The ``threads`` fixture of the tests that run a kernel on one Numba thread, then two
(row chunks joined in parallel, then their seams; parallel frontiers; closeness slots).
A test module imports it by name (``from tests.support.threads import threads``), which
makes it that module's ``threads`` fixture."""

from __future__ import annotations

import numba
import pytest


@pytest.fixture(params=[1, 2], ids=["one-thread", "two-threads"])
def threads(request):
    """Numba on one thread, then two; skipped where Numba has fewer threads."""
    prev = numba.get_num_threads()
    if request.param > prev:
        pytest.skip(f"needs {request.param} Numba threads, has {prev}")
    numba.set_num_threads(request.param)
    try:
        yield request.param
    finally:
        numba.set_num_threads(prev)
