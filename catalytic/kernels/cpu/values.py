"""Bonds from site values: which neighbours a multi-label or continuous-value labelling
joins.

Two neighbouring sites join when their values are close: equal, or with ``delta`` apart
by at most ``delta``. :func:`value_bonds` writes that as bond bits in the layout of
``Geometry.bond_args()`` (bit ``start & 31`` of word ``s * words + (start >> 5)`` for
forward offset ``s``), ANDed with the lattice's own bonds, so the bond-aware labelling
(:mod:`catalytic.kernels.cpu.winding`) labels values as it labels bonds.

Values come as *keys* (``catalogue.value_keys``): float64, or the integers mapped in
order onto uint64 so that a difference never overflows. NaN is refused before a key is
made.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._rows import _row_coords, _row_target

__all__ = ["value_bonds"]

#: words (32 sites each, every forward offset) one block of a kernel call writes
_BLOCK_WORDS = 64


@njit(cache=True, nogil=True, inline="always")
def _close(a, b, delta):
    """``a`` and ``b`` at most ``delta`` apart (equal infinities are close); the
    difference taken larger minus smaller, so unsigned keys never wrap."""
    if a == b:
        return True
    return (a - b if a > b else b - a) <= delta


@njit(cache=True, nogil=True, parallel=True)
def _value_bits(out, keys, delta, offs, shape, periodic, user, words, lo, hi):
    """Blocks [lo, hi) of :func:`value_bonds` (``_BLOCK_WORDS`` words of every forward
    offset each): a block owns its words in every plane, so blocks run in parallel
    without sharing a word. O(sites x forward offsets)."""
    d = shape.shape[0]
    L = shape[d - 1]
    n = keys.shape[0]
    kf = offs.shape[0]
    per_last = periodic[d - 1] != 0
    has_user = user.shape[0] != 0
    for b in prange(lo, hi):
        w0 = np.int64(b) * _BLOCK_WORDS
        w1 = min(words, w0 + _BLOCK_WORDS)
        c = np.empty(d - 1, dtype=np.int64)
        for s in range(kf):
            o = offs[s]
            cl = o[d - 1]
            base = s * words
            for w in range(w0, w1):
                out[base + w] = 0
            i = w0 * 32
            end = min(n, w1 * 32)
            while i < end:
                row = i // L
                x = i - row * L
                _row_coords(row, shape, c)
                rt = _row_target(c, o, shape, periodic)
                stop = min(L, x + (end - i))
                if rt >= 0:
                    bj = rt * L
                    for xx in range(x, stop):
                        x2 = xx + cl
                        if x2 < 0 or x2 >= L:
                            if not per_last:
                                continue
                            x2 %= L
                        site = row * L + xx
                        if _close(keys[site], keys[bj + x2], delta):
                            out[base + (site >> 5)] |= np.uint32(1) << np.uint32(site & 31)
                i = row * L + stop
            if has_user:
                for w in range(w0, w1):
                    out[base + w] &= user[base + w]


def value_bonds(keys, delta, bond_offsets, shape, periodic, user_bits, words):
    """Bond bits joining neighbours whose keys are at most ``delta`` apart.

    Parameters
    ----------
    keys : ndarray of float64 or uint64, shape (n,)
        Site values as keys (float64, or integers mapped in order onto uint64).
    delta : float or int
        The largest difference that joins (0: equal keys only); a float for float64
        keys, a non-negative int below 2**64 for uint64 keys.
    bond_offsets : ndarray of int64, shape (kf, d)
        The forward offsets (``Geometry.bond_offsets``).
    shape, periodic : ndarray
        The lattice's shape (int64[d]) and periodic flags (uint8[d]).
    user_bits : ndarray of uint32
        The lattice's own bond bits (``Geometry.bond_args()[1]``; length 0: all open).
    words : int
        Words per forward offset (``Geometry.bond_words``).

    Returns
    -------
    ndarray of uint32, shape (kf * words,)
        Bit ``i & 31`` of word ``s * words + (i >> 5)`` set when the bond from site
        ``i`` along forward offset ``s`` exists (does not leave an open axis), is open
        in ``user_bits``, and joins close keys. Blocked sites are not read here: the
        labelling drops bonds to them.

    Examples
    --------
    >>> import numpy as np
    >>> keys = np.array([1.0, 1.0, 2.0, 2.0])
    >>> value_bonds(keys, 0.0, np.array([[1]]), np.array([4]), np.array([0], np.uint8),
    ...             np.zeros(0, np.uint32), 1).tolist()
    [5]
    """
    offs = np.ascontiguousarray(bond_offsets, dtype=np.int64)
    kf = offs.shape[0]
    out = np.empty(kf * words, dtype=np.uint32)
    if kf == 0 or keys.shape[0] == 0:
        out[:] = 0
        return out
    dt = keys.dtype.type
    delta = dt(delta)
    blocks = -(-words // _BLOCK_WORDS)
    # a call does about _BUDGET site steps, so a signal handler runs between calls
    step = max(1, _budget._BUDGET // (_BLOCK_WORDS * 32 * kf))
    for lo in range(0, blocks, step):
        _value_bits(out, keys, delta, offs, shape, periodic, user_bits, np.int64(words),
                    np.int64(lo), np.int64(min(blocks, lo + step)))
    return out
