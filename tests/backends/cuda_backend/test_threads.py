"""Threads sharing a lattice on the cuda backend get the serial answers.

The cuda backend caches the lattice's XOR key on the device the first time a call
needs it; that copy must never be taken while another thread has the lattice's buffer
on loan for a catalytic path search (it would cache search marks as the key). Each
thread queues its calls on its own CUDA stream.

One of three files about threads: this one holds the cuda backend's per-thread streams
and device key cache; ``tests/lattice/test_threads.py`` shares one lattice between Python
threads, and ``tests/backends/test_numba_cpu.py`` holds the numba-cpu backend's
thread-count policy.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import catalytic as cat

pytestmark = pytest.mark.sim


def test_key_is_never_cached_from_a_borrowed_buffer():
    L = cat.Lattice(shape=(12, 12), seed=5)
    data = np.arange(64, dtype=np.uint8)
    want = L.xor_transform(data, backend="numpy").tobytes()
    path = L.find_shortest_path(0, L.n_points - 1, backend="numpy").path.tolist()
    barrier = threading.Barrier(4)
    wrong = []

    def searcher():
        barrier.wait()
        for _ in range(20):
            got = L.find_path_catalytic(0, L.n_points - 1, backend="numpy").path.tolist()
            if got != path:
                wrong.append("path")

    def xorer():
        barrier.wait()
        for _ in range(3):
            if L.xor_transform(data, backend="cuda").tobytes() != want:
                wrong.append("xor")
            L.cleanup()  # drop the device copy so the next call caches it again

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    threads += [threading.Thread(target=xorer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not wrong
    assert L.xor_transform(data, backend="cuda").tobytes() == want


def test_each_thread_queues_its_calls_on_its_own_stream(monkeypatch):
    """Every kernel host function a call reaches gets the calling thread's stream (not
    the default stream 0, which would queue all threads' work behind one another); two
    threads get two streams, and each still gets the serial answer."""
    from catalytic.backends import cuda_backend as cb
    from catalytic.kernels.cuda import arrays, fields, graph

    seen = []
    for module, name in [(graph, "bfs_distance"), (graph, "shortest_path"),
                         (graph, "connected_components"), (fields, "laplacian"),
                         (arrays, "normalize")]:
        real = getattr(module, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen.append((threading.get_ident(), _name, kwargs.get("stream", 0)))
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    L = cat.Lattice(shape=(6, 7), mask=np.arange(42).reshape(6, 7) % 9 != 4)
    f = np.linspace(0.0, 1.0, 42).reshape(6, 7)
    want = [L.distance_field(0, backend="numpy"), L.find_shortest_path(0, 41, backend="numpy"),
            L.connected_components(backend="numpy").labels, L.laplacian(f, backend="numpy"),
            cat.ops.normalize(f, backend="numpy")]
    got = {}
    barrier = threading.Barrier(2)

    def work(tag):
        barrier.wait()
        got[tag] = ([L.distance_field(0, backend="cuda"),
                     L.find_shortest_path(0, 41, backend="cuda"),
                     L.connected_components(backend="cuda").labels,
                     L.laplacian(f, backend="cuda"), cat.ops.normalize(f, backend="cuda")],
                    cb.call_stream())

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(got) == 2
    (res0, s0), (res1, s1) = got[0], got[1]
    assert s0 is not s1 and s0 != 0 and s1 != 0
    for res in (res0, res1):
        np.testing.assert_array_equal(res[0], want[0])
        np.testing.assert_array_equal(res[1].path, want[1].path)
        np.testing.assert_array_equal(res[2], want[2])
        np.testing.assert_allclose(res[3], want[3], rtol=1e-12, atol=1e-12)  # sparse @ f
        np.testing.assert_array_equal(res[4], want[4])
    idents = {t.ident: got_t for t, got_t in zip(threads, (s0, s1))}
    assert len(seen) == 10 and {name for _, name, _ in seen} == {
        "bfs_distance", "shortest_path", "connected_components", "laplacian", "normalize"}
    for ident, _name, stream in seen:
        assert stream is idents[ident]
