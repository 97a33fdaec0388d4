"""Newman-Ziff sweeps: occupy a lattice's open sites one at a time in random order and
record when a cluster first spans an axis (Newman & Ziff, PRL 85, 4104 (2000)).

The random order of sample ``b`` sorts the open sites by the 64-bit words
``splitmix64(key + (b * n + site) * GOLDEN)`` of :mod:`catalytic.kernels.random` (the
seed's stream, one word per site and sample), so NumPy and Numba give the same order,
whatever the thread count. Clusters are merged by union-find (union by size, path
halving); every root keeps two face bits (touches index 0 / index L - 1 of the axis),
and the sweep stops at the first occupation that joins both in one cluster.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu.neighbors import neighbor
from catalytic.kernels.cpu.components import _find
from catalytic.kernels.random import GOLDEN, _splitmix64_nb, splitmix64

__all__ = ["spanning_thresholds", "sample_order"]


def sample_order(key, b, n, open_idx) -> np.ndarray:
    """The open sites in sample ``b``'s occupation order (NumPy; the kernel's twin)."""
    words = splitmix64(np.uint64(key) + (np.uint64(b) * np.uint64(n)
                                         + open_idx.astype(np.uint64)) * GOLDEN)
    return open_idx[np.argsort(words, kind="stable")]


@njit(cache=True, nogil=True, parallel=True)
def _sweeps(out, key, open_idx, n, shape, strides, periodic, offsets, open_, stride_a, L_a,
            b0):
    m = open_idx.shape[0]
    for q in prange(out.shape[0]):
        b = b0 + q
        words = np.empty(m, dtype=np.uint64)
        base = np.uint64(b) * np.uint64(n)
        for t in range(m):
            words[t] = _splitmix64_nb(key + (base + np.uint64(open_idx[t])) * GOLDEN)
        order = open_idx[np.argsort(words, kind="mergesort")]
        parent = np.full(n, -1, dtype=np.int64)
        size = np.zeros(n, dtype=np.int64)
        face = np.zeros(n, dtype=np.uint8)
        found = -1
        for t in range(m):
            s = order[t]
            parent[s] = s
            size[s] = 1
            c = (s // stride_a) % L_a
            face[s] = (1 if c == 0 else 0) | (2 if c == L_a - 1 else 0)
            for k in range(offsets.shape[0]):
                j = neighbor(s, k, shape, strides, periodic, offsets, open_)
                if j < 0 or parent[j] < 0:
                    continue
                ra = _find(parent, s)
                rb = _find(parent, j)
                if ra == rb:
                    continue
                if size[ra] < size[rb]:
                    ra, rb = rb, ra
                parent[rb] = ra
                size[ra] += size[rb]
                face[ra] |= face[rb]
            if face[_find(parent, s)] == 3:
                found = t + 1
                break
        out[q] = found


def spanning_thresholds(shape, periodic, offsets, open_, samples, axis, seed, first=0):
    """For samples ``first .. first + samples - 1``: how many open sites were occupied
    when a cluster first touched both faces of ``axis`` (-1: never, when even all open
    sites do not span). int64 array. O(m log m + m k alpha) per sample for m open sites;
    about 30 bytes per site per thread."""
    from catalytic.kernels.cpu.neighbors import c_strides
    from catalytic.kernels.random import stream_key

    shape = np.ascontiguousarray(shape, dtype=np.int64)
    n = int(np.prod(shape))
    open_ = np.ascontiguousarray(open_, dtype=np.uint8)
    open_idx = np.arange(n, dtype=np.int64) if open_.shape[0] == 0 else np.flatnonzero(open_)
    strides = c_strides(shape)
    out = np.empty(samples, dtype=np.int64)
    if samples:
        _sweeps(out, stream_key(seed), open_idx, n, shape, strides,
                np.ascontiguousarray(periodic, dtype=np.uint8),
                np.ascontiguousarray(offsets, dtype=np.int64), open_, int(strides[axis]),
                int(shape[axis]), first)
    return out
