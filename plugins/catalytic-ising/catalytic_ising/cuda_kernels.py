"""The ``@cuda.jit`` twin of ``kernels.sweeps_cpu``'s colour pass (imported on first
use: it needs numba-cuda). Kept in a module of its own with ``cuda`` a module global, as
Numba's CUDA simulator expects of the kernels it runs."""

from __future__ import annotations

from numba import cuda

from catalytic.kernels.lattice import cuda_functions
from catalytic_ising.kernels import _uniform_source

d_neighbor, d_is_first = cuda_functions()
d_uniform = cuda.jit(device=True)(_uniform_source)


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
