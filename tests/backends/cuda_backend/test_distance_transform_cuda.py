"""``distance_transform`` and its batched twin on the cuda backend (``kernels.cuda.edt``,
one thread a site and pass): against the brute-force oracle of
``tests/lattice/test_distance_transform.py`` (distances and the tie rule, masks,
periodic axes, values, integer and real spacings) and the numba-cpu twin, in the
simulator pass on tiny lattices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import catalytic as cat
# no call may fall back to a CPU backend (an autouse fixture)
from tests.backends.cuda_backend.test_label_cuda import no_fallback  # noqa: F401
from tests.lattice.test_distance_transform import _marked, brute, cases
from tests.support.strategies import make

sim = pytest.mark.sim


# tiny lattices: the simulator starts a Python thread for every launched thread
@sim
@given(case=cases(max_sites=60))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cuda_gives_the_brute_force_answer(case):
    spec, args, step, exact = case
    L = make(spec)
    features, values = _marked(L, args)
    d2, near = brute(L.shape, L.periodic, step, features, values)
    got, at = L.distance_transform(**args, spacing=step, squared=True, return_indices=True,
                                   backend="cuda")
    if exact:
        np.testing.assert_array_equal(got, d2)
        np.testing.assert_array_equal(at, near)
    else:
        np.testing.assert_allclose(got, d2, rtol=1e-12)
    cpu = L.distance_transform(**args, spacing=step, backend="numba-cpu")
    np.testing.assert_allclose(L.distance_transform(**args, spacing=step, backend="cuda"),
                               cpu, rtol=1e-12)


@sim
def test_cuda_float32_and_the_batched_twin_match_numba_cpu():
    rng = np.random.default_rng(6)
    L = cat.Lattice(shape=(5, 7), periodic=(True, False))
    values = rng.integers(0, 3, L.shape)
    for kw in ({}, {"values": values}, {"features": rng.random(L.shape) < 0.2}):
        got = L.distance_transform(**kw, dtype=np.float32, backend="cuda")
        assert got.dtype == np.float32
        np.testing.assert_array_equal(
            got, L.distance_transform(**kw, dtype=np.float32, backend="numba-cpu"))
    # boolean values: uint32 keys (the launches of this test are every signature the
    # hypothesis test above may draw)
    np.testing.assert_array_equal(
        L.distance_transform(values=values > 0, background=None, backend="cuda"),
        L.distance_transform(values=values > 0, background=None, backend="numba-cpu"))
    stack = rng.random((3, *L.shape)) < 0.7
    eng = cat.get_engine()
    for kw in ({}, {"values": values}):
        got = eng.run("batched.distance_transform", L, stack, **kw, return_indices=True,
                      backend="cuda")
        want = eng.run("batched.distance_transform", L, stack, **kw, return_indices=True,
                       backend="numba-cpu")
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])


@sim
def test_the_host_function_docstring_example():
    from catalytic.kernels.cuda.edt import transform

    zero = np.array([1, 0, 0, 0, 0, 0], np.uint8)
    assert transform((6,), (True,), (1.0,), zero).tolist() == [0.0, 1.0, 2.0, 3.0, 2.0, 1.0]
