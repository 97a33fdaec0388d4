"""The cuda backend under the device-memory monitor: LRU eviction and routing by room."""

from __future__ import annotations

import numpy as np
import pytest

import catalytic as cat
from catalytic.backends import cuda_backend as cb
from catalytic.memory import get_monitor

pytestmark = pytest.mark.sim


@pytest.fixture
def device(monkeypatch):
    """A fake device reading for the process-wide monitor: ``state["free"]`` bytes free
    of ``state["total"]``."""
    state = {"free": 10**6, "total": 2 * 10**6}
    mon = get_monitor()
    monkeypatch.setattr(mon, "_provider", lambda: (state["free"], state["total"]))
    monkeypatch.setattr(mon, "_device", "test device")
    cb.cleanup()
    yield state
    cb.cleanup()


def test_evictions_are_least_recently_used_first(device):
    a, b, c = (cat.Lattice(shape=(6, 7), mask=np.ones((6, 7), bool)) for _ in range(3))
    for L in (a, b, c, a):  # a used again: b is now the least recently used
        L.degree(backend="cuda")
    assert [id(x) for x in cb._resident_lattices()] == [id(b), id(c), id(a)]
    freed = cb.evict_lru()
    assert freed == b.geometry.mask.nbytes and "cuda" not in b._backend_state
    assert cb.evict_lru(keep=c) == a.geometry.mask.nbytes  # c is kept, a goes
    assert [id(x) for x in cb._resident_lattices()] == [id(c)]


def test_cleanup_at_the_threshold_evicts_oldest_lattices(device):
    lats = [cat.Lattice(shape=(6, 7), mask=np.ones((6, 7), bool)) for _ in range(3)]
    for L in lats:
        L.degree(backend="cuda")
    device["free"] = int(0.1 * device["total"])  # 90% used: the next call cleans up
    before = get_monitor().stats()["cleanups"]
    lats[2].degree(backend="cuda")
    assert get_monitor().stats()["cleanups"] == before + 1
    # the fake reading never drops, so every copy goes, oldest first, the newest last
    assert all("cuda" not in L._backend_state for L in lats)


def test_no_room_on_the_device_routes_to_the_cpu_with_the_reason(device):
    L = cat.Lattice(shape=(20, 20))
    device["free"] = 100  # the call needs 24 bytes a site
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert dec.backend != "cuda" and "device memory" in dec.rejected["cuda"]
    np.testing.assert_array_equal(L.distance_field(0), L.distance_field(0, backend="numpy"))


def test_accounting_follows_cleanup_release_and_garbage_collection(device):
    import gc

    base = cb.cached_bytes()
    a = cat.Lattice(shape=(6, 7), mask=np.ones((6, 7), bool))
    b = cat.Lattice(shape=(6, 7), mask=np.ones((6, 7), bool), weights=np.ones((6, 7)))
    a.degree(backend="cuda")
    b.distance_field(0, backend="cuda")
    want = a.geometry.mask.nbytes + b.geometry.mask.nbytes + b.geometry.weights.nbytes
    assert cb.cached_bytes() - base == want
    assert cb.cached_bytes(exclude=a) - base == want - a.geometry.mask.nbytes
    a.cleanup()
    assert cb.cached_bytes() - base == want - a.geometry.mask.nbytes
    del b
    gc.collect()
    assert cb.cached_bytes() == base
