"""The profiler on the cuda backend: bytes moved each way are recorded per call (from
this thread's transfer count), device time and monitor snapshots only on a real GPU
(the simulator's timing says nothing about a device, so there they are absent)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import catalytic as cat

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
sim = pytest.mark.sim


@sim
def test_cuda_records_transfers_and_device_time_only_on_a_gpu(prof):
    from catalytic.kernels.cuda import graph

    L = cat.Lattice(shape=(6, 7), mask=np.arange(42).reshape(6, 7) % 5 != 3)
    L.cleanup()
    graph.clear_tables()
    L.distance_field(0, backend="cuda")
    L.distance_field(0, backend="cuda")  # the mask and the tables are on the device now
    L.connected_components(backend="numba-cpu")
    first, second, cpu = [r for r in prof.as_dict()["records"] if r["kind"] == "op"]
    assert first["backend"] == second["backend"] == "cuda"
    assert first["d2h_bytes"] >= 8 * 42 and second["d2h_bytes"] >= 8 * 42  # the result
    # the first call also copied the mask (42 bytes) and the geometry tables, which stay
    # on the device for the second
    g = L.geometry
    t = graph._tables(g.shape_arr, g.periodic_arr, g.offsets, 0)
    tables = sum(int(a.nbytes) for a in (t.d_shape, t.d_strides, t.d_periodic, t.d_offsets,
                                         t.d_noffsets, *t.d_fast, *t.d_nfast, t.d_first,
                                         t.d_bslot, t.d_nslot, t.d_nobits, t.d_nobw))
    assert first["h2d_bytes"] - second["h2d_bytes"] == 42 + tables
    assert second["h2d_bytes"] > 0
    assert ("device_s" in first) is (not SIM) and ("memory_before" in first) is (not SIM)
    if not SIM:
        assert 0 < first["device_s"] and "used" in first["memory_after"]
    assert "h2d_bytes" not in cpu and "device_s" not in cpu


@sim
def test_cuda_transfer_bytes_are_per_thread(prof):
    """Two threads on the cuda backend at once: both run there (under the simulator they
    take turns), and each record counts its own thread's bytes only."""
    lats = [cat.Lattice(shape=(5, 5 + i)) for i in range(2)]
    barrier = threading.Barrier(2)

    def work(L):
        barrier.wait()
        L.degree(backend="cuda")

    threads = [threading.Thread(target=work, args=(L,)) for L in lats]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = sorted((r for r in prof.as_dict()["records"] if r["kind"] == "op"),
                  key=lambda r: r["d2h_bytes"])
    assert [r["backend"] for r in recs] == ["cuda", "cuda"] and not any(
        "fallback_from" in r for r in recs)
    # degree comes back as int64 per site: 25 and 30 sites
    assert [r["d2h_bytes"] for r in recs] == [8 * 25, 8 * 30]


def test_nvtx_ranges_on_a_gpu(prof, monkeypatch):
    """With the nvtx package on a GPU machine, every operation and region is an NVTX
    range named catalytic.<name>, pushed and popped in order."""
    nvtx = pytest.importorskip("nvtx", reason="the nvtx package is not installed")
    from catalytic.device import probe
    from catalytic.profiler import gpu

    if SIM or not probe()[0]:
        pytest.skip("NVTX ranges are pushed on a machine with a GPU only")
    seen = []
    monkeypatch.setattr(nvtx, "push_range", lambda message=None, **kw: seen.append(message))
    monkeypatch.setattr(nvtx, "pop_range", lambda **kw: seen.append("pop"))
    monkeypatch.setattr(gpu, "_nvtx", None)  # probe again, with the patched module
    with cat.profile("region"):
        cat.Lattice(shape=(8, 8)).degree(backend="cuda")
    assert seen == ["catalytic.region", "catalytic.degree", "pop", "pop"]
