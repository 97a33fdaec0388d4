"""The cuda backend's host side: availability, devices, routing, residency, transfers,
device-memory checks, and the failure path (clean up, retry once, fall back)."""

from __future__ import annotations

import numpy as np
import pytest

import catalytic as cat
from catalytic.backends import cuda_backend as cb

SIM = __import__("os").environ.get("NUMBA_ENABLE_CUDASIM") == "1"

sim = pytest.mark.sim


@pytest.mark.skipif(SIM, reason="checks the no-GPU, no-simulator case")
def test_without_gpu_the_backend_is_unavailable_and_says_why():
    ok, why = cat.get_engine().backends()["cuda"]
    assert not ok and "no CUDA GPU" in why
    assert cat.devices() == []
    L = cat.Lattice(shape=(6, 7))
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert dec.backend != "cuda" and "unavailable" in dec.rejected["cuda"]
    with pytest.raises(cat.NoBackendError, match="cuda"):
        L.distance_field(0, backend="cuda")


@pytest.mark.skipif(SIM, reason="checks the no-GPU, no-simulator case")
def test_info_names_the_missing_gpu(capsys):
    from catalytic.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU found" in out and "cuda" in out


def _lattices():
    rng = np.random.default_rng(3)
    mask = rng.random((7, 9)) < 0.75
    mask[0, 0] = True
    w = rng.uniform(0.5, 2.0, (7, 9))
    return [
        cat.Lattice(shape=(7, 9), mask=mask),
        cat.Lattice(shape=(5, 6), periodic=True, stencil="moore"),
        cat.Lattice(shape=(7, 9), mask=mask, weights=w),
        cat.Lattice(shape=(2, 3, 5), periodic=(True, False, True)),
    ]


@sim
def test_simulator_is_available_but_never_chosen_unforced():
    ok, why = cat.get_engine().backends()["cuda"]
    assert ok and "simulator" in why
    assert cat.devices()[0]["simulator"] is True
    L = cat.Lattice(shape=(64, 64))
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert dec.backend != "cuda" and "cuda" in dec.predictions


@sim
@pytest.mark.parametrize("idx", range(4))
def test_forced_cuda_matches_the_reference(idx):
    L = _lattices()[idx]
    src = int(np.flatnonzero(L.geometry.open_flat)[0]) if L.geometry.mask is not None else 0
    end = int(np.flatnonzero(L.geometry.open_flat)[-1]) if L.geometry.mask is not None else L.n_points - 1
    np.testing.assert_array_equal(L.distance_field(src, backend="cuda"), L.distance_field(src, backend="numpy"))
    assert L.last_decision.backend == "numpy"
    got, want = L.find_shortest_path(src, end, backend="cuda"), L.find_shortest_path(src, end, backend="numpy")
    np.testing.assert_array_equal(got.path, want.path)
    assert got.distance == want.distance
    c_got, c_want = L.connected_components(backend="cuda"), L.connected_components(backend="numpy")
    np.testing.assert_array_equal(c_got.labels, c_want.labels)
    assert c_got.count == c_want.count
    np.testing.assert_array_equal(L.degree(backend="cuda"), L.degree(backend="numpy"))
    f = np.linspace(0, 1, L.n_points).reshape(L.shape)
    np.testing.assert_allclose(L.laplacian(f, backend="cuda"), L.laplacian(f, backend="numpy"), rtol=1e-12, atol=1e-12)


@sim
def test_mask_and_weights_are_copied_once_and_released_by_cleanup():
    L = _lattices()[2]
    cb.reset_transfer_stats()
    L.distance_field(0, backend="cuda")
    first = cb.transfer_stats()
    assert first["h2d_bytes"] >= L.geometry.mask.nbytes + L.geometry.weights.nbytes
    assert first["d2h_bytes"] >= 8 * L.n_points  # the result came back
    L.distance_field(0, backend="cuda")
    second = cb.transfer_stats()
    # an identical second call makes the same small copies (tables, sources, counters)
    # but not the mask and weights: the first moved exactly those bytes more
    again = second["h2d_bytes"] - first["h2d_bytes"]
    assert first["h2d_bytes"] - again == L.geometry.mask.nbytes + L.geometry.weights.nbytes
    assert "cuda" in L._backend_state
    L.cleanup()
    assert "cuda" not in L._backend_state


@sim
def test_device_memory_shortfall_is_a_reason_and_a_memory_error(monkeypatch):
    L = _lattices()[0]
    monkeypatch.setattr(cb, "free_device_memory", lambda: 1000.0)
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert "device memory" in dec.rejected["cuda"]
    with pytest.raises(cat.InsufficientMemoryError, match="device memory"):
        L.distance_field(0, backend="cuda")


@sim
def test_a_failure_is_retried_once_then_falls_back_to_the_cpu(monkeypatch):
    from catalytic.kernels.cuda import graph

    L = _lattices()[0]
    want = L.distance_field(0, backend="numpy")
    calls = {"n": 0}
    real = graph.bfs_distance

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated launch failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(graph, "bfs_distance", flaky)
    np.testing.assert_array_equal(L.distance_field(0, backend="cuda"), want)
    assert calls["n"] == 2 and L.last_decision.backend == "cuda"

    def broken(*args, **kwargs):
        raise RuntimeError("simulated out of memory")

    monkeypatch.setattr(graph, "bfs_distance", broken)
    eng = cat.get_engine()
    before = len(eng.fallbacks)
    np.testing.assert_array_equal(L.distance_field(0, backend="cuda"), want)
    assert len(eng.fallbacks) == before + 1
    assert eng.fallbacks[-1]["from"] == "cuda" and eng.fallbacks[-1]["to"] in ("numpy", "numba-cpu")
    assert "failed twice" in L.last_decision.reason
    assert "cuda" not in L._backend_state  # cleaned up after the failure


@sim
def test_fallback_off_raises(monkeypatch):
    from catalytic.kernels.cuda import graph

    def broken(*args, **kwargs):
        raise RuntimeError("simulated launch failure")

    monkeypatch.setattr(graph, "bfs_distance", broken)
    eng = cat.reset_engine(fallback=False)
    try:
        L = cat.Lattice(shape=(5, 5))
        with pytest.raises(RuntimeError, match="simulated launch failure"):
            L.distance_field(0, backend="cuda")
    finally:
        cat.reset_engine()
    assert eng.fallbacks == []


@sim
def test_device_fields_stay_on_the_device_through_chained_calls():
    from numba import cuda

    L = cat.Lattice(shape=(6, 7), periodic=(True, False))
    f = np.linspace(-1, 1, L.n_points).reshape(L.shape)
    want = L.diffuse(L.laplacian(f, backend="numpy"), steps=2, alpha=0.1, backend="numpy")
    dev = cuda.to_device(f)
    cb.reset_transfer_stats()
    lap = L.laplacian(dev)  # unforced: CPU backends decline device input
    assert L.last_decision.backend == "cuda"
    assert "GPU" in L.last_decision.rejected["numpy"]
    out = L.diffuse(lap, steps=2, alpha=0.1)
    assert hasattr(out, "copy_to_host") and tuple(out.shape) == L.shape
    assert cb.transfer_stats()["d2h_bytes"] == 0  # nothing came back until asked
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        L.laplacian(cuda.to_device(np.zeros(5)))


@sim
def test_transfers_count_the_kernels_own_copies():
    L = cat.Lattice(shape=(4, 4), aux_memory_size=64)
    data = np.arange(100, dtype=np.int32)
    cb.reset_transfer_stats()
    out = L.xor_transform(data, backend="cuda")
    t = cb.transfer_stats()
    # the data and the key went over, the result came back
    assert t["h2d_bytes"] >= data.nbytes + 64 and t["d2h_bytes"] >= out.nbytes
    np.testing.assert_array_equal(L.xor_transform(out, backend="numpy"), data)


@sim
def test_ops_without_device_passthrough_refuse_gpu_arrays_clearly():
    from numba import cuda

    d = cuda.to_device(np.ones(3))
    with pytest.raises(TypeError, match="GPU array"):
        cat.ops.elementwise("neg", d)
    with pytest.raises(TypeError, match="GPU array"):
        cat.ops.reduce(d)
    with pytest.raises(TypeError, match="GPU array"):
        cat.Lattice(shape=(3,)).xor_transform(cuda.to_device(np.arange(3)))
