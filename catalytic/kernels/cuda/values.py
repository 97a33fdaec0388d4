"""Bonds from site values on the device: the CUDA twin of
:mod:`catalytic.kernels.cpu.values`, whose contract it keeps (the same bits, from the
same ``_close`` and ``neighbor`` source). The bits stay on the device, where the bond-
aware labelling (:func:`catalytic.kernels.cuda.graph.connected_components`) reads them.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from catalytic.kernels.cpu import values as _cpu
from catalytic.kernels.cpu.neighbors import c_strides
from catalytic.kernels.cuda.graph import THREADS, _blocks, _device
from catalytic.kernels.cuda.neighbors import neighbor

__all__ = ["value_bonds"]

close = cuda.jit(device=True)(_cpu._close.py_func)


@cuda.jit
def _value_bits(out, keys, delta, shape, strides, periodic, fwd, no_sites, user, words):
    """One thread a word: bit ``i & 31`` of word ``s * words + (i >> 5)`` set when the
    neighbour of site ``i`` along forward offset ``s`` exists and its key is close to
    site ``i``'s, ANDed with ``user`` (length 0: every bond open). O(32 d) a thread."""
    t = cuda.grid(1)
    if t >= out.shape[0]:
        return
    s = t // words
    lo = (t - s * words) * 32
    hi = min(keys.shape[0], lo + 32)
    word = np.uint32(0)
    for i in range(lo, hi):
        j = neighbor(i, s, shape, strides, periodic, fwd, no_sites)
        if j >= 0 and close(keys[i], keys[j], delta):
            word |= np.uint32(1) << np.uint32(i - lo)
    if user.shape[0] != 0:
        word &= user[t]
    out[t] = word


def value_bonds(keys, delta, bond_offsets, shape, periodic, user_bits, words, *, stream=0):
    """:func:`catalytic.kernels.cpu.values.value_bonds` on the device.

    Parameters
    ----------
    keys, delta, bond_offsets, shape, periodic, words
        As the twin's; ``keys`` may also be a device array (float64 or uint64 there).
    user_bits : ndarray or device array of uint32
        The lattice's own bond bits (length 0: every bond open), read in place when on
        the device.
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).

    Returns
    -------
    device array of uint32, (kf * words,)
        The twin's bits, left on the device.
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    fwd = np.ascontiguousarray(bond_offsets, dtype=np.int64).reshape(-1, shape.shape[0])
    kf = fwd.shape[0]
    # narrower integer keys (equality only) widen to uint64: one kernel signature fewer
    # to compile per key width, and the cost is a copy to the device either way
    wide = keys.dtype if keys.dtype in (np.float64, np.uint64) else np.uint64
    d_keys = _device(keys, wide, stream)
    out = cuda.device_array(kf * words, dtype=np.uint32, stream=stream)
    if out.shape[0] == 0:
        return out
    dt = np.dtype(wide).type
    user = _device(user_bits, np.uint32, stream)
    _value_bits[_blocks(out.shape[0]), THREADS, stream](
        out, d_keys, dt(delta), _device(shape, np.int64, stream),
        _device(c_strides(shape), np.int64, stream),
        _device(np.ascontiguousarray(periodic, dtype=np.uint8), np.uint8, stream),
        _device(fwd, np.int64, stream), _device(np.zeros(0, np.uint8), np.uint8, stream),
        user, np.int64(words))
    return out
