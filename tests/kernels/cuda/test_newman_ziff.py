"""The CUDA Newman-Ziff twin against the CPU kernel (itself checked against exhaustive
enumeration in tests/kernels/cpu/test_newman_ziff.py): the same events and sums for the
same sweeps, random or explicit orders, site and bond, masks, closed bonds, periodic
axes of length 1 and 2, sweeps split over several launches; and the cuda backend's
newman_ziff equals numba-cpu's. ``sim`` tests (the simulator, or a GPU); the kernel's
PTX case is in test_fields_arrays.KERNELS."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import catalytic as cat
from catalytic.kernels.cpu import newman_ziff as cpu
from catalytic.kernels.cuda import newman_ziff as gpu

# the simulator runs device code on NumPy scalars, which warn about the intended
# wrap-around of uint64 arithmetic
pytestmark = [pytest.mark.sim, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

LATTICES = [
    ((4, 5), (True, False), "site", 0.9, 0.8),
    ((2, 3), (True, True), "bond", 1.0, 0.7),   # parallel bonds on the axis of length 2
    ((1, 4), (True, False), "bond", 1.0, 1.0),  # self-loop bonds on the axis of length 1
]


def _args(L):
    g = L.geometry
    slot, bits, words, _ = g.bond_args()
    return g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, slot, bits, words


def _same(a, b):
    assert np.array_equal(a[0], b[0]) and a[2] == b[2] and a[1].keys() == b[1].keys()
    for k in a[1]:
        assert np.allclose(a[1][k], b[1][k], rtol=1e-12, atol=1e-12), k


@pytest.mark.parametrize("shape, periodic, kind, density, open_bonds", LATTICES)
def test_random_orders_match_the_cpu_kernel(shape, periodic, kind, density, open_bonds,
                                            monkeypatch):
    rng = np.random.default_rng(sum(shape))
    L = cat.Lattice(shape=shape, periodic=periodic, mask=rng.random(shape) < density,
                    bonds=rng.random((2,) + shape) < open_bonds)
    want = cpu.sweeps(kind, *_args(L), 5, 9, first=3)
    _same(gpu.sweeps_cuda(kind, *_args(L), 5, 9, first=3), want)
    monkeypatch.setattr(gpu, "LAUNCH_BYTES", 1)  # one sweep per launch
    _same(gpu.sweeps_cuda(kind, *_args(L), 5, 9, first=3), want)
    events = gpu.sweeps_cuda(kind, *_args(L), 5, 9, first=3, observables=())[0]
    assert np.array_equal(events, want[0])


def test_every_order_of_a_ring_matches_the_cpu_kernel():
    L = cat.Lattice(shape=(5,), periodic=True)
    orders = np.array(list(itertools.permutations(range(5))), dtype=np.int64)
    _same(gpu.sweeps_cuda("site", *_args(L), 0, 0, orders=orders, n_stride=2),
          cpu.sweeps("site", *_args(L), 0, 0, orders=orders, n_stride=2))


def test_the_cuda_backend_gives_the_kernel_result():
    L = cat.Lattice(shape=(3, 4), periodic=(True, False),
                    bonds=np.random.default_rng(1).random((2, 3, 4)) < 0.8)
    for kind in ("site", "bond"):
        a = L.newman_ziff(4, kind=kind, seed=2, backend="cuda")
        b = L.newman_ziff(4, kind=kind, seed=2, backend="numba-cpu")
        assert np.array_equal(a.events, b.events) and a.ranges == b.ranges
        for k in a.sums:
            assert np.allclose(a.sums[k], b.sums[k], rtol=1e-12), k
