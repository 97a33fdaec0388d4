"""The numba-cpu backend decides how many threads a graph call runs on (the kernels only
read Numba's thread count): one on small lattices, the free CPUs on large ones, and the
caller's thread count is restored afterwards.

One of three files about threads: this one holds the numba-cpu backend's thread-count
policy; ``tests/lattice/test_threads.py`` shares one lattice between Python threads, and
``tests/backends/cuda_backend/test_threads.py`` holds the cuda backend's per-thread
streams and device key cache."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import catalytic as cat
from catalytic.backends import numba_cpu
from catalytic.kernels.cpu import bfs, components

pytestmark = pytest.mark.skipif(numba.get_num_threads() < 2, reason="needs 2 Numba threads")


@pytest.fixture
def seen(monkeypatch):
    """Thread counts the BFS kernel ran with."""
    counts = []
    real = bfs.bfs_distance

    def spy(*args, **kwargs):
        counts.append(numba.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(bfs, "bfs_distance", spy)
    return counts


def test_small_lattices_run_on_one_thread(seen):
    before = numba.get_num_threads()
    L = cat.Lattice(shape=(8, 8))
    np.testing.assert_array_equal(L.distance_field(0, backend="numba-cpu"),
                                  L.distance_field(0, backend="numpy"))
    assert seen == [1]
    assert numba.get_num_threads() == before


def test_large_lattices_run_on_the_free_cpus(seen, monkeypatch):
    before = numba.get_num_threads()
    monkeypatch.setattr(numba_cpu, "PAR_SITES", 16)
    L = cat.Lattice(shape=(8, 8))
    for free in (2, 1):
        monkeypatch.setattr(numba_cpu, "free_threads", lambda free=free: free)
        L.distance_field(0, backend="numba-cpu")
    assert seen == [2, 1]
    assert numba.get_num_threads() == before


def test_the_thread_count_is_restored_when_the_kernel_raises(monkeypatch):
    before = numba.get_num_threads()

    def broken(*args, **kwargs):
        raise RuntimeError("kernel failed")

    monkeypatch.setattr(bfs, "bfs_distance", broken)
    with pytest.raises(RuntimeError, match="kernel failed"):
        cat.Lattice(shape=(4, 4)).distance_field(0, backend="numba-cpu")
    assert numba.get_num_threads() == before


def test_free_threads_is_between_one_and_numbas_count():
    assert 1 <= numba_cpu.free_threads() <= numba.get_num_threads()


def test_components_take_threads_by_site_offsets(monkeypatch):
    """A labelling runs on the free CPUs from components._WHOLE_WORK site-offsets (sites
    times half the stencil): a 32^3 lattice (98,304) does, a 28^3 one (65,856) and a
    256 x 256 one (131,072 sites but 2 offsets) follow the same measure."""
    counts = []
    real = components.connected_components

    def spy(*args, **kwargs):
        counts.append(numba.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(components, "connected_components", spy)
    monkeypatch.setattr(numba_cpu, "free_threads", lambda: 2)
    for shape in ((32, 32, 32), (28, 28, 28), (256, 256), (180, 180)):
        cat.Lattice(shape=shape).connected_components(backend="numba-cpu")
    assert counts == [2, 1, 2, 1]


def test_free_cpus_are_read_once_per_ttl(monkeypatch):
    reads = []

    def read():
        reads.append(1)
        return 1

    monkeypatch.setattr(numba_cpu, "_read_free_cpus", read)
    monkeypatch.setattr(numba_cpu, "_free_cpus", (-float("inf"), 0))
    monkeypatch.setattr(numba_cpu, "FREE_CPUS_TTL", 3600.0)
    assert [numba_cpu.free_threads() for _ in range(3)] == [1, 1, 1]
    assert len(reads) == 1
    monkeypatch.setattr(numba_cpu, "FREE_CPUS_TTL", 0.0)
    numba_cpu.free_threads()
    assert len(reads) == 2
