"""Lattice arithmetic for kernels, public for plugin authors.

A plugin's ``@njit`` kernel sees a lattice as the plain arrays of
``lattice.geometry.kernel_args()``: ``(shape, periodic, offsets, open_, dedupe)`` (see
:mod:`catalytic.kernels.cpu.neighbors` for their meaning) plus C-order ``strides``
(:func:`c_strides`). With these functions it defines neighbours exactly as every
built-in backend does:

``neighbor(i, k, shape, strides, periodic, offsets, open_)``
    Flat index of the k-th stencil neighbour of site ``i``, or -1 (off an open axis,
    or a blocked site). ``@njit``; callable from other ``@njit`` code.
``neighbors_into(i, shape, strides, periodic, offsets, open_, dedupe, out)``
    Writes the de-duplicated neighbour set of ``i`` into ``out``; returns its size.

For ``@cuda.jit`` kernels, :func:`cuda_functions` returns the device twins
``(neighbor, is_first)``, compiled from the same source: walk ``k`` over the stencil and
keep ``j = neighbor(...)`` when ``j >= 0 and (not dedupe or is_first(i, k, j, ...))``.

Examples
--------
>>> import numpy as np, catalytic as cat
>>> from catalytic.kernels.neighbors import c_strides, neighbors_into
>>> L = cat.Lattice(shape=(3, 3), periodic=True)
>>> shape, periodic, offsets, open_, dedupe = L.geometry.kernel_args()
>>> out = np.empty(len(offsets), np.int64)
>>> m = neighbors_into(4, shape, c_strides(shape), periodic, offsets, open_, dedupe, out)
>>> sorted(out[:m].tolist())
[1, 3, 5, 7]
"""

from __future__ import annotations

from catalytic.kernels.cpu.neighbors import c_strides, neighbor, neighbors_into

__all__ = ["c_strides", "neighbor", "neighbors_into", "cuda_functions"]


def cuda_functions():
    """``(neighbor, is_first)`` as CUDA device functions (needs numba-cuda)."""
    from catalytic.kernels.cuda import neighbors as device

    return device.neighbor, device.is_first
