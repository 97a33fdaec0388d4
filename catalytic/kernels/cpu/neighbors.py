"""Scalar lattice arithmetic shared by the CPU kernels and compiled for their CUDA twins.

Every kernel sees the implicit lattice as plain arrays:

``shape``      int64[d]    sites per axis
``strides``    int64[d]    C-order strides in sites (last axis fastest, stride 1)
``periodic``   uint8[d]    1 where the axis wraps
``offsets``    int64[k, d] the stencil: integer displacement of each neighbour
``open_``      uint8[n]    1 where the site exists; length-0 array means "all sites exist"
``dedupe``     bool        True when a small periodic axis can make two offsets land on
                           the same site (or on the site itself); the kernels then drop
                           duplicates and self-loops, so the neighbour *set* is the same
                           on every backend.

The neighbour set of site ``i`` is: for each offset, the displaced coordinates, wrapped on
periodic axes, dropped when they leave an open axis or land on a blocked site; then
duplicates and ``i`` itself removed. Order is the stencil order (first occurrence wins).

Bond-aware kernels also take (``Geometry.bond_args()``):

``bond_slot``  int64[k]    per offset ``k``: ``s`` when it is forward offset ``s``, ``~s``
                           when it is the negation of forward offset ``s``
``bits``       uint32      bond ``(s, start)`` open iff bit ``start & 31`` of word
                           ``s * words + (start >> 5)`` is set; length 0: all open
``words``      int         words per forward offset
``bw``         float64     weight of bond ``(s, start)`` at ``s * n + start``; length 0:
                           no bond weights

A step ``i -> j`` through offset ``k`` uses the bond that starts at ``i`` when ``k`` is
forward, else the one that starts at ``j`` (so a bond across a periodic seam is found
from either end). With bonds, the neighbour set drops steps through closed bonds before
duplicates are removed (the first *usable* occurrence wins).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def neighbor(i, k, shape, strides, periodic, offsets, open_):
    """Flat index of the k-th stencil neighbour of site ``i``, or -1 if there is none."""
    d = shape.shape[0]
    j = 0
    rem = i
    for a in range(d):
        c = rem // strides[a]
        rem -= c * strides[a]
        c += offsets[k, a]
        n_a = shape[a]
        if c < 0 or c >= n_a:
            if periodic[a]:
                c %= n_a
            else:
                return -1
        j += c * strides[a]
    if open_.shape[0] != 0 and open_[j] == 0:
        return -1
    return j


@njit(cache=True, nogil=True, inline="always")
def bond_at(i, j, slot, n):
    """Flat index ``s * n + start`` of the bond a step ``i -> j`` crosses, ``slot`` being
    ``bond_slot[k]`` of the step's offset."""
    if slot >= 0:
        return slot * n + i
    return (~slot) * n + j


@njit(cache=True, nogil=True, inline="always")
def bond_open(i, j, slot, bits, words):
    """Whether the bond a step ``i -> j`` crosses is open (always, when ``bits`` is empty)."""
    if bits.shape[0] == 0:
        return True
    if slot >= 0:
        s, a = slot, i
    else:
        s, a = ~slot, j
    return (bits[s * words + (a >> 5)] >> (a & 31)) & 1 != 0


@njit(cache=True, nogil=True)
def neighbors_into(i, shape, strides, periodic, offsets, open_, dedupe, out):
    """Write the neighbour set of site ``i`` into ``out`` (length >= k); return the count."""
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


@njit(cache=True, nogil=True)
def bond_neighbors_into(i, shape, strides, periodic, offsets, open_, dedupe, bond_slot, bits,
                        words, bw, out, wout):
    """:func:`neighbors_into` honouring bonds: a step through a closed bond is dropped
    before duplicates are (the first *usable* occurrence wins), and ``wout[q]`` receives
    the least bond weight over the usable steps to ``out[q]`` (0.0 without bond
    weights). ``bond_slot``, ``bits``, ``words``, ``bw`` as ``Geometry.bond_args()``
    gives them. Returns the count."""
    n = shape[0] * strides[0]
    hasw = bw.shape[0] != 0
    m = 0
    for k in range(offsets.shape[0]):
        j = neighbor(i, k, shape, strides, periodic, offsets, open_)
        if j < 0:
            continue
        slot = bond_slot[k]
        if not bond_open(i, j, slot, bits, words):
            continue
        w = bw[bond_at(i, j, slot, n)] if hasw else 0.0
        if dedupe:
            if j == i:
                continue
            seen = -1
            for q in range(m):
                if out[q] == j:
                    seen = q
                    break
            if seen >= 0:
                wout[seen] = min(wout[seen], w)
                continue
        out[m] = j
        wout[m] = w
        m += 1
    return m


def c_strides(shape) -> np.ndarray:
    """C-order strides, in sites, of ``shape`` as an int64 array."""
    shape = np.asarray(shape, dtype=np.int64)
    strides = np.ones(shape.shape[0], dtype=np.int64)
    for a in range(shape.shape[0] - 2, -1, -1):
        strides[a] = strides[a + 1] * shape[a + 1]
    return strides


def step_lengths(offsets, spacing) -> np.ndarray:
    """The Euclidean length of each stencil offset (rows of ``offsets``) under
    ``spacing`` (float64, one per axis): ``sqrt(sum((offset * spacing) ** 2))`` in
    float64. Every backend takes a step's length from here, so all of them round it
    alike."""
    off = np.asarray(offsets, dtype=np.float64).reshape(-1, len(spacing))
    return np.sqrt(((off * np.asarray(spacing, dtype=np.float64)) ** 2).sum(axis=1))


def check_sources(src, n, open_=None) -> None:
    """IndexError for a source (int64 array) outside ``[0, n)``, or on a blocked site
    when ``open_`` is given (length 0: all sites open). Host-side, shared by the CPU and
    CUDA host functions."""
    if src.size == 0:
        return
    if src.min() < 0 or src.max() >= n:
        bad = src[(src < 0) | (src >= n)][0]
        raise IndexError(f"source {bad} out of range for a lattice of {n} sites")
    if open_ is not None and open_.shape[0] and not open_[src].all():
        raise IndexError(f"source {src[open_[src] == 0][0]} is a blocked site")
