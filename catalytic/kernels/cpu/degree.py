"""Degrees of implicit lattices: the size of each site's neighbour set."""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu._budget import _YES, _frozen
from catalytic.kernels.cpu.neighbors import bond_neighbors_into, c_strides, neighbors_into
from catalytic.kernels.cpu._rows import _row_coords, _row_target

__all__ = ["degree"]


@njit(cache=True, nogil=True, parallel=True)
def _degree_rows(deg, open_, offs, shape, periodic):
    """Degree without duplicates possible: per row, count stencil entries that land on
    an open site. O(n k)."""
    d = shape.shape[0]
    L = shape[d - 1]
    per_last = periodic[d - 1] != 0
    has_mask = open_.shape[0] != 0
    K = offs.shape[0]
    nrow = deg.shape[0] // L
    for prow in prange(nrow):
        row = np.int64(prow)
        bi = row * L
        for x in range(L):
            deg[bi + x] = 0
        c = np.empty(d - 1, dtype=np.int64)
        _row_coords(row, shape, c)
        for k in range(K):
            o = offs[k]
            rt = _row_target(c, o, shape, periodic)
            if rt < 0:
                continue
            bj = rt * L
            cl = o[d - 1]
            if per_last:
                s = cl % L
                x0 = 0
                x1 = L
            else:
                s = cl
                x0 = max(0, -cl)
                x1 = min(L, L - cl)
            for x in range(x0, x1):
                x2 = x + s
                if x2 >= L:
                    x2 -= L
                if has_mask and open_[bj + x2] == 0:
                    continue
                deg[bi + x] += 1
        if has_mask:
            for x in range(L):
                if open_[bi + x] == 0:
                    deg[bi + x] = 0


@njit(cache=True, nogil=True, parallel=True)
def _degree_dedupe(deg, buf_t, open_, offs, shape, strides, periodic):
    """Degree as the size of the de-duplicated neighbour set (``neighbors_into``), thread
    slot t taking sites t, t+T, ... with its own buffer. O(n k^2)."""
    T = buf_t.shape[0]
    n = deg.shape[0]
    has_mask = open_.shape[0] != 0
    for tt in prange(T):
        t = np.int64(tt)
        buf = buf_t[t]
        for i in range(t, n, T):
            if has_mask and open_[i] == 0:
                deg[i] = 0
            else:
                deg[i] = neighbors_into(i, shape, strides, periodic, offs, open_, _YES, buf)


@njit(cache=True, nogil=True, parallel=True)
def _degree_bonds(deg, buf_t, wbuf_t, open_, offs, shape, strides, periodic, dedupe,
                  bond_slot, bits, words, bw):
    """Degree as the size of the neighbour set through open bonds
    (``bond_neighbors_into``), thread slot t taking sites t, t+T, ... O(n k^2)."""
    T = buf_t.shape[0]
    n = deg.shape[0]
    has_mask = open_.shape[0] != 0
    for tt in prange(T):
        t = np.int64(tt)
        buf = buf_t[t]
        wbuf = wbuf_t[t]
        for i in range(t, n, T):
            if has_mask and open_[i] == 0:
                deg[i] = 0
            else:
                deg[i] = bond_neighbors_into(i, shape, strides, periodic, offs, open_, dedupe,
                                             bond_slot, bits, words, bw, buf, wbuf)


def degree(shape, periodic, offsets, open_, dedupe, *, bonds=None) -> np.ndarray:
    """Size of each site's neighbour set.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`catalytic.kernels.cpu.bfs.bfs_distance`. With
        ``dedupe`` the duplicates and self-loops that small periodic axes create are not
        counted.
    bonds : tuple, optional
        ``(bond_slot, bits, words, bw)`` as ``Geometry.bond_args()`` gives them: steps
        through closed bonds are not counted (parallel bonds count once when one of them
        is open). None or empty ``bits``: every bond open.

    Returns
    -------
    ndarray of int64, (n,)
        Degree of each open site; 0 for blocked sites.

    Notes
    -----
    Parallel over rows: O(n k) time without ``dedupe``, O(n k^2) with it or with closed
    bonds (parallel over sites; k int64 and k float64 of scratch per thread). One
    kernel call over the whole lattice: not split for interrupts (see
    :mod:`catalytic.kernels.cpu._budget`). The result does not depend on the thread
    count.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> degree((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False)
    array([1, 2, 2, 1])
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offs = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    open_ = _frozen(np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1))
    n = int(np.prod(shape, dtype=object))
    deg = np.empty(n, dtype=np.int64)
    if n == 0:
        return deg
    if bonds is not None and len(bonds[1]):
        slot, bits, words, bw = bonds
        T = max(1, min(numba.get_num_threads(), n))
        k = max(offs.shape[0], 1)
        _degree_bonds(deg, np.empty((T, k), dtype=np.int64), np.empty((T, k)), open_, offs,
                      shape, c_strides(shape), periodic, bool(dedupe),
                      _frozen(np.ascontiguousarray(slot, dtype=np.int64)),
                      _frozen(np.ascontiguousarray(bits, dtype=np.uint32)), int(words),
                      _frozen(np.ascontiguousarray(bw, dtype=np.float64)))
    elif dedupe:
        T = max(1, min(numba.get_num_threads(), n))
        buf_t = np.empty((T, max(offs.shape[0], 1)), dtype=np.int64)
        _degree_dedupe(deg, buf_t, open_, offs, shape, c_strides(shape), periodic)
    else:
        _degree_rows(deg, open_, offs, shape, periodic)
    return deg
