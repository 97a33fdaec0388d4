"""Device-side lattice arithmetic for the CUDA kernels.

``neighbor`` is compiled from the very same Python source as the CPU twin
(:func:`catalytic.kernels.cpu._lattice.neighbor`), so both backends define neighbours
identically. ``neighbors_into`` repeats the CPU version's few lines because a CUDA device
function cannot call a CPU-compiled one.
"""

from __future__ import annotations

from numba import cuda

from catalytic.kernels.cpu import _lattice as _cpu

#: largest stencil a kernel's local neighbour buffer holds (5-D Moore has 242)
MAX_STENCIL = 256

neighbor = cuda.jit(device=True)(_cpu.neighbor.py_func)


@cuda.jit(device=True)
def neighbors_into(i, shape, strides, periodic, offsets, open_, dedupe, out):
    """Write the neighbour set of site ``i`` into ``out``; return the count (see CPU twin)."""
    m = 0
    for k in range(offsets.shape[0]):
        j = neighbor(i, k, shape, strides, periodic, offsets, open_)
        if j < 0:
            continue
        if dedupe:
            if j == i:
                continue
            seen = False
            for q in range(m):
                if out[q] == j:
                    seen = True
                    break
            if seen:
                continue
        out[m] = j
        m += 1
    return m
