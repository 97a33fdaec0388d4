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
        bp = cat.BatchProcessor(lats, progress=False, batched=True)
        res = bp.map("percolates", axis=0, backend="cuda")
        s = bp.stats()
        assert s["per_group"][0]["memory"]["device_free"] == free
        assert s["per_group"][0]["memory"]["batch_size"] == 2 and s["launches"] == 3
        assert s["per_group"][0]["backends"] == {"cuda": 3}
        assert list(res) == [L.percolates(0) for L in lats]
        assert stack_bytes * 2 < free  # the device check let each call run
    finally:
        mon.set_provider(*old)


@sim
def test_distance_laplacian_and_xor_twins_on_cuda_equal_numba_cpu():
    base, masks = _ensemble(3, (5, 6), (False, True), 3)
    masks[:, 0, 0] = masks[:, 1, 1] = True
    eng = cat.get_engine()
    got = eng.run("batched.distance_field", base, masks, 0, backend="cuda")
    want = eng.run("batched.distance_field", base, masks, 0, backend="numba-cpu")
    assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want))
    # several sources: the batched BFS kernel takes one per lattice, and says so
    with pytest.raises(cat.NoBackendError, match="one source per lattice"):
        eng.run("batched.distance_field", base, masks, np.array([0, 7]), backend="cuda")
    fields = np.random.default_rng(4).random((3, 5, 6))
    got = eng.run("batched.laplacian", base, fields, backend="cuda")
    want = eng.run("batched.laplacian", base, fields, backend="numba-cpu")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    data = np.arange(3 * 7, dtype=np.int32).reshape(3, 7)
    got = eng.run("batched.xor_transform", base, data, backend="cuda")
    assert all(np.array_equal(g, base.xor_transform(d)) for g, d in zip(got, data))
    # XOR acts on values: a byte-swapped stack gives the same values in its own dtype
    swapped = (data * 1013).astype(data.dtype.newbyteorder("S"))
    assert not swapped.dtype.isnative
    got = eng.run("batched.xor_transform", base, swapped, backend="cuda")
    assert eng.last_decision.backend == "cuda"
    for g, d in zip(got, swapped):
        assert g.dtype == d.dtype
        np.testing.assert_array_equal(g, base.xor_transform(d.astype(np.int32), backend="numpy"))
        np.testing.assert_array_equal(base.xor_transform(g, backend="cuda"), d)


CUDA_OPS = [
    ("distance_field", (0,), {}),
    ("shortest_path", (0, 29), {}),
    ("connected_components", (), {}),
    ("percolates", (), {"axis": 0}),
    ("spanning_clusters", (), {"axes": (0, 1)}),
    ("degree", (), {}),
    ("centrality", (), {"method": "degree"}),
    ("laplacian", (np.linspace(0, 1, 30).reshape(5, 6),), {}),
    ("diffuse", (np.linspace(0, 1, 30).reshape(5, 6),), {"steps": 2}),
]


@sim
@pytest.mark.parametrize("op, args, kwargs", CUDA_OPS, ids=[c[0] for c in CUDA_OPS])
def test_batch_processor_on_cuda_equals_single_cuda_calls(op, args, kwargs):
    base, masks = _ensemble(3, (5, 6), (True, False), 5)
    masks[:, 0, 0] = masks[:, -1, -1] = True
    lats = [base.with_mask(m) for m in masks]
    bp = cat.BatchProcessor(lats, progress=False, batched=True)  # the twins, whatever they cost
    got = bp.map(op, *args, backend="cuda", **kwargs)
    assert got.ok, got.errors
    for g, L in zip(got, lats):
        want = L.run(op, *args, backend="cuda", **kwargs)
        if isinstance(want, tuple):
            for x, y in zip(g, want):
                if isinstance(x, dict):
                    assert all(np.array_equal(x[k], y[k]) for k in x)
                elif isinstance(x, tuple):
                    assert all(np.array_equal(u, v) for u, v in zip(x, y))
                else:
                    assert np.array_equal(x, y)
        else:
            np.testing.assert_array_equal(g, want)
    batched = op in ("distance_field", "connected_components", "percolates",
                     "spanning_clusters")
    assert bp.stats()["mode"] == ("batched" if batched else "loop")
    if batched:
        assert bp.stats()["per_group"][0]["backends"] == {"cuda": 1}
