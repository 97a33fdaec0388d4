"""Threads sharing a lattice on the cuda backend get the serial answers.

The cuda backend caches the lattice's XOR key on the device the first time a call
needs it; that copy must never be taken while another thread has the lattice's buffer
on loan for a catalytic path search (it would cache search marks as the key).
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
