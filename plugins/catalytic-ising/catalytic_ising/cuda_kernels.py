"""The ``@cuda.jit`` twins of the colour passes of ``kernels.sweeps_cpu`` and
``kernels.sweeps_rows`` (imported on first use: they need numba-cuda). Kept in a module
of its own with ``cuda`` a module global, as Numba's CUDA simulator expects of the
kernels it runs. The device functions are compiled from the CPU kernels' sources."""

from __future__ import annotations

import numpy as np
from numba import cuda

from catalytic.kernels.neighbors import cuda_functions
from catalytic_ising import kernels as _k

d_neighbor, d_is_first = cuda_functions()
d_uniform, d_key, d_bits, d_row, d_update = (
    cuda.jit(device=True)(f) for f in (_k._uniform_source, _k._key_source, _k._bits_source,
                                       _k._row_source, _k._update_source))


@cuda.jit
def colour_pass(spins, colour, c, shape, strides, periodic, offsets, open_, dedupe, table,
                heatbath, seed, t):
    """One thread per site: update it when it has colour ``c`` (see sweeps_cpu)."""
    i = cuda.grid(1)
    if i >= spins.shape[0]:
        return
    s = spins[i]
    if colour[i] != c or s == 0:
        return
    k = offsets.shape[0]
    h = 0
    for q in range(k):
        j = d_neighbor(i, q, shape, strides, periodic, offsets, open_)
        if j >= 0 and (not dedupe or d_is_first(i, q, j, shape, strides, periodic, offsets,
                                                open_)):
            h += spins[j]
    u = d_uniform(seed, t, i)
    if heatbath:
        spins[i] = 1 if u < table[0, h + k] else -1
    elif u < table[(s + 1) // 2, s * h + k]:
        spins[i] = -s


@cuda.jit
def row_pass(spins, lead, row_strides, periodic_lead, width, wrap, thr, k, heatbath, seed, t,
             c, half):
    """One thread per pair of neighbouring sites of a row (``half`` pairs a row): update
    the one of colour ``c`` (see sweeps_rows; the scalars but ``k`` and the flags are
    uint64)."""
    q = np.uint64(cuda.grid(1))
    rows = np.uint64(spins.shape[0]) // width - np.uint64(1)
    if q >= rows * half:
        return
    r = q // half
    zero = rows * width
    j, b0, b1, b2, b3 = d_row(r, lead, row_strides, periodic_lead, width, zero, c)
    j += np.uint64(2) * (q % half)
    if j >= width:
        return
    row = r * width
    i = row + j
    last = width - np.uint64(1)
    left = i - np.uint64(1) if j > np.uint64(0) else (row + last if wrap else zero)
    right = i + np.uint64(1) if j < last else (row if wrap else zero)
    h = (np.int64(spins[b0 + j]) + spins[b1 + j] + spins[b2 + j] + spins[b3 + j]
         + spins[left] + spins[right])
    d_update(spins, i, h, d_bits(d_key(seed, t), i), thr, k, heatbath)
