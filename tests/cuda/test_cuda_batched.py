"""The cuda backend's batched twins (``batched.connected_components`` and friends) run
through the engine and the BatchProcessor: every row equals the numba-cpu result, and
the device-memory monitor decides how many lattices go into one call."""

from __future__ import annotations

import numpy as np
import pytest

import catalytic as cat
from catalytic.memory import get_monitor

sim = pytest.mark.sim


def _ensemble(n, shape, periodic, seed):
    base = cat.Lattice(shape=shape, periodic=periodic)
    rng = np.random.default_rng(seed)
    return base, rng.random((n,) + shape) < 0.6


@sim
@pytest.mark.parametrize("shape, periodic", [((6, 7), (True, False)), ((3, 4, 4), False)])
def test_twins_on_cuda_equal_numba_cpu(shape, periodic):
    base, masks = _ensemble(4, shape, periodic, 1)  # 4 x ~100 threads per sweep
    eng = cat.get_engine()
    axes = tuple(range(len(shape)))
    got = eng.run("batched.spanning_clusters", base, masks, axes=axes, backend="cuda")
    assert eng.last_decision.backend == "cuda"
    want = eng.run("batched.spanning_clusters", base, masks, axes=axes, backend="numba-cpu")
    for g, w in zip(got, want):
        assert g.components.count == w.components.count
        np.testing.assert_array_equal(g.components.labels, w.components.labels)
        np.testing.assert_array_equal(g.components.sizes, w.components.sizes)
        for a in axes:
            np.testing.assert_array_equal(g.clusters[a], w.clusters[a])
    perc = eng.run("batched.percolates", base, masks, axis=0, backend="cuda")
    assert perc == [base.with_mask(m).percolates(0) for m in masks]


@sim
def test_the_monitor_sizes_cuda_batches():
    base, masks = _ensemble(5, (5, 6), False, 2)
    lats = [base.with_mask(m) for m in masks]
    mon = get_monitor()
    stack_bytes = 9 * 30  # the cuda twin's device model: 9 bytes per row-site
    per_item = cat.get_engine().registry.operation("batched.percolates").memory(
        base, np.ones((1, 30), np.uint8), axis=0)
    free = 2 * 2 * per_item + 1  # half of it holds two lattices
    old = mon.set_provider(lambda: (free, 2 * free), device="test")
    try:
        bp = cat.BatchProcessor(lats, progress=False)
        res = bp.map("percolates", axis=0, backend="cuda")
        s = bp.stats()
        assert s["per_group"][0]["memory"]["device_free"] == free
        assert s["per_group"][0]["memory"]["batch_size"] == 2 and s["launches"] == 3
        assert s["per_group"][0]["backends"] == {"cuda": 3}
        assert list(res) == [L.percolates(0) for L in lats]
        assert stack_bytes * 2 < free  # the device check let each call run
    finally:
        mon.set_provider(*old)
