"""Several targets in one search on the cuda backend (``kernels.cuda.graph.shortest_paths``:
hops, weights, bonds, step lengths), against the numpy reference, in the simulator pass
on tiny lattices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

# no call may fall back to a CPU backend (an autouse fixture)
from tests.backends.cuda_backend.test_label_cuda import no_fallback  # noqa: F401
from tests.lattice.test_targets import _pick, cases
from tests.support.strategies import make

sim = pytest.mark.sim


# tiny lattices: the simulator starts a Python thread for every launched thread
@sim
@given(case=cases(max_sites=60))
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cuda_gives_the_reference_paths(case):
    spec, spacing, k, seed = case
    L = make(spec)
    if L.geometry.n_open == 0:
        return
    s, ends = _pick(L, k, seed)
    want = L.find_shortest_paths(s, ends, spacing=spacing, backend="numpy")
    got = L.find_shortest_paths(s, ends, spacing=spacing, backend="cuda")
    for a, b in zip(got, want):
        assert np.array_equal(a.path, b.path) and a.distance == b.distance
    a = L.find_shortest_path(s, ends, spacing=spacing, backend="cuda")
    b = L.find_shortest_path(s, ends, spacing=spacing, backend="numpy")
    assert np.array_equal(a.path, b.path) and a.distance == b.distance
