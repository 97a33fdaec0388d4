"""Parental fields and nearest sources on the cuda backend (``kernels.cuda.graph._parents``
and ``_jump``), bit for bit against the numpy reference, in the simulator pass on tiny
lattices: hops, weights (plateaus included), bonds, step lengths."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import catalytic as cat
# no call may fall back to a CPU backend (an autouse fixture)
from tests.backends.cuda_backend.test_label_cuda import no_fallback  # noqa: F401
from tests.lattice.test_parents import _sources, cases
from tests.support.strategies import make

sim = pytest.mark.sim


# tiny lattices: the simulator starts a Python thread for every launched thread
@sim
@given(case=cases(max_sites=60))
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cuda_gives_the_reference_parents_and_sources(case):
    spec, spacing, k, seed = case
    L = make(spec)
    if L.geometry.n_open == 0:
        return
    src = _sources(L, k, seed)
    want = L.distance_field(src, spacing=spacing, return_parents=True, return_sources=True,
                            backend="numpy")
    got = L.distance_field(src, spacing=spacing, return_parents=True, return_sources=True,
                           backend="cuda")
    for a, b in zip(want, got):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@sim
@pytest.mark.parametrize("kind", ["hops", "weights", "bonds", "lengths"])
def test_each_kind_of_field_runs(kind):
    """Every branch of the kernel: hops, a plateau of zero weights (depths), bond
    weights through closed bonds, lengths alone; the nearest sources of a long chain
    (several rounds of pointer jumping)."""
    shape = (4, 9)
    rng = np.random.default_rng(1)
    args = {}
    if kind == "weights":
        args["weights"] = np.where(rng.random(shape) < 0.4, 0.0, 1.0)
    if kind == "bonds":
        args["bonds"] = rng.random((2,) + shape) < 0.8
        args["bond_weights"] = rng.integers(1, 3, (2,) + shape).astype(float)
    L = cat.Lattice(shape=shape, periodic=(False, True), **args)
    spacing = (1.0, 0.5) if kind == "lengths" else None
    src = np.array([0, 20])
    want = L.distance_field(src, spacing=spacing, return_parents=True, return_sources=True,
                            backend="numpy")
    got = L.distance_field(src, spacing=spacing, return_parents=True, return_sources=True,
                           backend="cuda")
    for a, b in zip(want, got):
        assert np.array_equal(a, b)
