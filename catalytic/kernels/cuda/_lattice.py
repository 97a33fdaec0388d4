"""Device-side lattice arithmetic for the CUDA kernels.

``neighbor`` is compiled from the very same Python source as the CPU twin
(:func:`catalytic.kernels.cpu._lattice.neighbor`), so both backends define neighbours
identically. The CPU kernels collect a site's de-duplicated neighbour set into a scratch
row (:func:`catalytic.kernels.cpu._lattice.neighbors_into`); on the device a per-thread
buffer sized for the largest stencil would be a ``cuda.local.array`` of fixed size, which
the driver reserves for every thread that can be resident (hundreds of MB on an H100).
The kernels instead ask :func:`is_first` of each neighbour, recomputing the earlier
ones: the same set, in the same (stencil) order, with no local memory.
"""

from __future__ import annotations

from numba import cuda

from catalytic.kernels.cpu import _lattice as _cpu

neighbor = cuda.jit(device=True)(_cpu.neighbor.py_func)


@cuda.jit(device=True)
def is_first(i, k, j, shape, strides, periodic, offsets, open_):
    """True when ``j`` (>= 0), the neighbour of site ``i`` through stencil offset ``k``,
    belongs to the de-duplicated neighbour set at this position: it is not ``i`` itself
    and no earlier offset reaches it. Walking ``k`` in order and keeping the neighbours
    for which this holds gives exactly ``neighbors_into(..., dedupe=True)`` of the CPU
    twin, in the same order. O(k d) per call."""
    if j == i:
        return False
    for q in range(k):
        if neighbor(i, q, shape, strides, periodic, offsets, open_) == j:
            return False
    return True
