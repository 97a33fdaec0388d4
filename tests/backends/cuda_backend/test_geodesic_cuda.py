"""Euclidean step costs (``spacing=``) on the cuda backend: the near-far kernel with step
lengths, and the walks back over its costs (with and without bonds), bit for bit
against the numpy reference, in the simulator pass on tiny lattices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import catalytic as cat
# no call may fall back to a CPU backend (an autouse fixture)
from tests.backends.cuda_backend.test_label_cuda import no_fallback  # noqa: F401
from tests.support.strategies import lattice_specs, make

sim = pytest.mark.sim


@st.composite
def cases(draw):
    spec = draw(lattice_specs(max_dim=3, weights=True, bonds=True, max_sites=60))
    d = len(spec["shape"])
    spacing = draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 3.0]), min_size=d, max_size=d))
    return spec, spacing


# tiny lattices: the simulator starts a Python thread for every launched thread
@sim
@given(case=cases())
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cuda_gives_the_reference_field_and_path(case):
    spec, spacing = case
    L = make(spec)
    if L.geometry.n_open == 0:
        return
    open_ = L.geometry.open_sites()
    a, b = int(open_[0]), int(open_[-1])
    ref = L.distance_field(a, spacing=spacing, backend="numpy")
    np.testing.assert_array_equal(L.distance_field(a, spacing=spacing, backend="cuda"), ref)
    want = L.find_shortest_path(a, b, spacing=spacing, backend="numpy")
    got = L.find_shortest_path(a, b, spacing=spacing, backend="cuda")
    assert np.array_equal(got.path, want.path) and got.distance == want.distance


@sim
@pytest.mark.parametrize("kw", [{}, {"weights": True}, {"bonds": True}])
def test_each_kind_of_step_cost_runs(kw):
    """Lengths alone, times site weights (zeros among them: plateaus), and through
    bonds: every branch of the kernel and of the two walks."""
    shape = (5, 6)
    rng = np.random.default_rng(2)
    args = {}
    if kw.get("weights"):
        args["weights"] = np.where(rng.random(shape) < 0.3, 0.0, rng.random(shape))
    if kw.get("bonds"):
        args["bonds"] = rng.random((4,) + shape) < 0.85
    L = cat.Lattice(shape=shape, periodic=(True, False), stencil="moore", **args)
    spacing = (1.0, 2.5)
    ref = L.distance_field(0, spacing=spacing, backend="numpy")
    np.testing.assert_array_equal(L.distance_field(0, spacing=spacing, backend="cuda"), ref)
    want = L.find_shortest_path(0, 29, spacing=spacing, backend="numpy")
    got = L.find_shortest_path(0, 29, spacing=spacing, backend="cuda")
    assert np.array_equal(got.path, want.path) and got.distance == want.distance
