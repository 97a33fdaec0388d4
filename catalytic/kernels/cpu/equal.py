"""Labelling by equal site values, site by site (lattices without bonds).

Neighbouring labelled sites join when their values are equal (a multi-label image, as
cc3d labels one). The sites are labelled in C order with provisional labels and
union-find (:mod:`catalytic.kernels.cpu._sites`; decision trees for the common stencils
in :mod:`catalytic.kernels.cpu._equal_trees`), one chunk of rows per thread; then the
chunk seams and the periodic seams are joined, the forest is numbered, and one pass
writes the final labels and counts the sizes. Any stencil with at most
:data:`MAX_BACK` backward offsets, any dimension, periodic axes. Values come as keys
compared for equality only (``catalogue.label_keys`` with ``delta`` 0).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu import _equal_trees
from catalytic.kernels.cpu import components as _components
from catalytic.kernels.cpu._budget import _INT32_LIMIT
from catalytic.kernels.cpu._rows import _row_coords, _row_target, _window
from catalytic.kernels.cpu._sites import (MAX_BACK, _back_invalid, _joins, _on, _rows_any,
                                          _x_invalid, plan)
from catalytic.kernels.cpu.components import _union

__all__ = ["label_equal", "applies", "prefer_runs", "MAX_BACK", "SAMPLE_ROWS", "LONG_RUN",
           "NEAR"]

#: rows :func:`prefer_runs` looks at
SAMPLE_ROWS = 64
#: the average run of equal values (sites) from which :func:`prefer_runs` may choose runs
LONG_RUN = 16
#: the farthest backward reach (sites) within which the site scan finds the earlier rows
#: it reads again (keys and labels, 8 bytes a site: 1 MiB) in a core's cache
NEAR = 1 << 17


def applies(offsets, d) -> bool:
    """Whether :func:`label_equal` takes a stencil: at most :data:`MAX_BACK` offsets in
    its backward half."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    return plan(offsets.tobytes(), d)[0].shape[0] <= MAX_BACK


def prefer_runs(offsets, shape, keys, sites) -> bool:
    """Whether the union-find over runs of equal values (``values.label_values``) should
    label rather than the site scan: with a stencil none of whose backward offsets covers
    another (von Neumann's: every equal neighbour is a union for the site scan), that
    reaches more than :data:`NEAR` sites back (the site scan then reads the earlier rows
    again from memory), on runs of :data:`LONG_RUN` sites or more on average in
    :data:`SAMPLE_ROWS` rows spread over the lattice. ``sites``: an array (uint8).

    Examples
    --------
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> keys = np.repeat(np.array([1, 2], np.uint32), 1 << 18)
    >>> prefer_runs(off, (2, 1 << 18), keys, np.ones(keys.size, np.uint8))
    True
    >>> prefer_runs(off, (1 << 10, 1 << 9), keys, np.ones(keys.size, np.uint8))
    False
    """
    shape = np.asarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    offs, cover, _ = plan(offsets.tobytes(), d)
    if cover.shape[0] == 0 or any(int(c) & (int(c) - 1) for c in cover):
        return False
    strides = np.cumprod(np.r_[shape[:0:-1], 1])[::-1]
    if int(-(offs @ strides).min()) <= NEAR:
        return False
    L = int(shape[-1])
    nrow = keys.shape[0] // L
    rows = np.unique(np.linspace(0, nrow - 1, min(nrow, SAMPLE_ROWS)).astype(np.int64))
    at = (rows[:, None] * L + np.arange(L)).reshape(-1)
    k = keys[at].reshape(-1, L)
    on = sites[at].reshape(-1, L) != 0
    starts = on.copy()
    starts[:, 1:] &= ~(on[:, :-1] & (k[:, 1:] == k[:, :-1]))
    n_runs = int(starts.sum())
    return n_runs * LONG_RUN <= int(on.sum()) and n_runs > 0


@njit(cache=True, nogil=True, parallel=True)
def _pass_any(keys, sites, labels, eq, shape, offs, lin, adj, reach, nxt, T, s, w):
    """Window ``s`` (``w`` rows) of each of the ``T`` row chunks, the general scan."""
    nrow = keys.shape[0] // shape[shape.shape[0] - 1]
    for t in prange(T):
        lo, _, a, b = _window(nrow, T, t, s, w)
        nxt[t] = _rows_any(keys, sites, labels, eq, shape, offs, lin, adj, reach, nxt[t], lo,
                           a, b)


@njit(cache=True, nogil=True)
def _seams(keys, sites, labels, eq, shape, offs, lin, reach, T, t, back):
    """Join the sites of the first ``back`` rows of chunk ``t`` to their equal backward
    neighbours in rows before the chunk (every axis open). O(back L k)."""
    d = shape.shape[0]
    L = shape[d - 1]
    nrow = keys.shape[0] // L
    lo, hi, _, _ = _window(nrow, T, t, 0, 0)
    c = np.empty(d - 1, dtype=np.int64)
    for row in range(lo, min(hi, lo + back)):
        cross = _back_invalid(row, lo, shape, offs, c) & ~_back_invalid(row, 0, shape, offs,
                                                                         c)
        if cross == 0:
            continue
        for x in range(L):
            i = row * L + x
            if not _on(sites, keys, i):
                continue
            todo = cross
            if x < reach or x >= L - reach:
                todo &= ~_x_invalid(x, L, offs)
            for j in range(offs.shape[0]):
                if (todo >> j) & 1:
                    n = i + lin[j]
                    if _joins(sites, keys, n, keys[i]):
                        _union(eq, labels[i], labels[n])


@njit(cache=True, nogil=True)
def _wraps(keys, sites, labels, eq, shape, periodic, offs, ra, rb):
    """Join the sites of rows [ra, rb) to their equal backward neighbours across a
    periodic axis (the pairs the open scan left out). O((rb - ra) k d) plus the sites of
    the pairs that wrap."""
    d = shape.shape[0]
    L = shape[d - 1]
    k = offs.shape[0]
    per_last = periodic[d - 1] != 0
    c = np.empty(d - 1, dtype=np.int64)
    for row in range(ra, rb):
        _row_coords(row, shape, c)
        for j in range(k):
            o = offs[j]
            # the target row, and whether reaching it wraps an axis other than the last
            t = _row_target(c, o, shape, periodic)
            if t < 0:
                continue
            wrapped = False
            for a in range(d - 1):
                v = c[a] + o[a]
                wrapped |= v < 0 or v >= shape[a]
            ol = o[d - 1]
            # without a wrap across the rows only the ends of the row can wrap
            x_lo, x_hi = 0, L
            if not wrapped:
                if not per_last or ol == 0:
                    continue
                x_lo, x_hi = (0, min(L, -ol)) if ol < 0 else (max(0, L - ol), L)
            for x in range(x_lo, x_hi):
                x2 = x + ol
                if x2 < 0 or x2 >= L:
                    if not per_last:
                        continue
                    x2 %= L
                i = row * L + x
                n = t * L + x2
                if _on(sites, keys, i) and _joins(sites, keys, n, keys[i]):
                    _union(eq, labels[i], labels[n])


@njit(cache=True, nogil=True, parallel=True)
def _final(labels, eq, part, T, s, w, L):
    """Final labels (``eq`` numbered) of window ``s`` of each row chunk, and the chunk's
    sizes counted into ``part``: with four rows per chunk, site i into row
    ``4 t + i % 4`` (four counters a label, so a run of equal labels is not one chain
    of increments of one counter), otherwise into row ``t``."""
    nrow = labels.shape[0] // L
    ways = part.shape[0] // T
    for t in prange(T):
        _, _, a, b = _window(nrow, T, t, s, w)
        x = a * L
        end = b * L
        # unsigned indices: Numba then adds no wraparound of negative ones to each access
        u1, u2, u3 = np.uint64(1), np.uint64(2), np.uint64(3)
        if ways == 4:
            s0 = part[4 * t]
            s1 = part[4 * t + 1]
            s2 = part[4 * t + 2]
            s3 = part[4 * t + 3]
            while x + 4 <= end:
                i = np.uint64(x)
                v0 = eq[np.uint64(labels[i])]
                v1 = eq[np.uint64(labels[i + u1])]
                v2 = eq[np.uint64(labels[i + u2])]
                v3 = eq[np.uint64(labels[i + u3])]
                labels[i] = v0
                labels[i + u1] = v1
                labels[i + u2] = v2
                labels[i + u3] = v3
                s0[np.uint64(v0)] += 1
                s1[np.uint64(v1)] += 1
                s2[np.uint64(v2)] += 1
                s3[np.uint64(v3)] += 1
                x += 4
        sz = part[ways * t]
        for x in range(x, end):
            i = np.uint64(x)
            v = eq[np.uint64(labels[i])]
            labels[i] = v
            sz[np.uint64(v)] += 1


#: the most labels for which the final pass counts sizes four ways per thread
_FOUR_WAYS = 1 << 16


def label_equal(shape, periodic, offsets, keys, sites):
    """Label the clusters of equal values of a lattice without bonds.

    Parameters
    ----------
    shape, periodic, offsets
        The lattice, as in :func:`catalytic.kernels.cpu.components.connected_components`
        (at most :data:`MAX_BACK` offsets in the stencil's backward half: :func:`applies`).
    keys : ndarray, shape (n,)
        Site values as keys compared for equality (``catalogue.label_keys`` with
        ``delta`` 0); read, never written.
    sites : ndarray of uint8, shape (n,), or scalar
        The labelled sites (open and not background): non-zero. Or the background's
        key, when the labelled sites are exactly those whose key differs from it (a
        lattice without a mask): then no site array is read.

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (n,)
        0 off the labelled sites; clusters 1..count in the order of their lowest flat
        index (the labels of ``values.label_values`` with ``delta`` 0).
    count : int
    sizes : ndarray of int64, (count,)

    Raises
    ------
    ValueError
        A stencil with more than :data:`MAX_BACK` backward offsets.

    Notes
    -----
    Two passes over the sites and one over the provisional labels: O(n k) at most, O(n)
    when equal neighbours cover one another (a site equal to the first neighbour its
    tree asks about is done). Each thread labels a chunk of rows; every phase runs in
    kernel calls of about ``_budget._BUDGET`` sites (see "Interrupts" in
    :mod:`catalytic.kernels.cpu._budget`). Memory: the labels, a forest of the same
    width and length (only the pages of labels used are touched) and the sizes per
    thread.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> keys = np.array([1, 1, 2, 1, 3, 2], np.uint32)
    >>> labels, count, sizes = label_equal((2, 3), np.zeros(2, np.uint8), off, keys,
    ...                                    np.ones(6, np.uint8))
    >>> labels.tolist(), count, sizes.tolist()
    ([1, 1, 2, 1, 3, 2], 3, [3, 2, 1])

    The same with 2 as the background, given as its key:

    >>> label_equal((2, 3), np.zeros(2, np.uint8), off, keys, 2)[0].tolist()
    [1, 1, 0, 1, 2, 0]
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    if not isinstance(sites, np.ndarray):
        sites = keys.dtype.type(sites)
    offs, adj, reach = plan(offsets.tobytes(), d)
    k = offs.shape[0]
    if k > MAX_BACK:
        raise ValueError(f"label_equal takes at most {MAX_BACK} backward offsets, got {k}")
    n = math.prod(shape.tolist())
    ltype = np.int32 if n <= _INT32_LIMIT else np.int64
    if n == 0:
        return np.empty(0, dtype=ltype), 0, np.zeros(0, dtype=np.int64)
    L = int(shape[-1])
    nrow = n // L
    strides = np.ones(d, dtype=np.int64)
    for a in range(d - 2, -1, -1):
        strides[a] = strides[a + 1] * shape[a + 1]
    lin = offs @ strides
    T = max(1, min(numba.get_num_threads(), nrow))
    labels = np.empty(n, dtype=ltype)
    eq = np.empty(n + 1, dtype=ltype)
    eq[0] = 0
    nxt = np.array([_window(nrow, T, t, 0, 0)[0] * L for t in range(T)], dtype=np.int64)
    w = max(1, _budget._BUDGET // (T * L))
    chunk_rows = -(-nrow // T)  # the largest chunk
    wins = range(-(-chunk_rows // w))
    name = _equal_trees.TREES.get(tuple(map(tuple, offs.tolist())))
    for s in wins:
        if name is None:
            _pass_any(keys, sites, labels, eq, shape, offs, lin, adj, np.int64(reach), nxt,
                      T, s, w)
        else:
            _equal_trees.PASSES[name](keys, sites, labels, eq, shape, offs, lin, adj, nxt, T,
                                      s, w)
    # rows a backward offset reaches back across: a chunk seam joins that many rows
    back = int(max(0, -int(np.min(offs[:, :-1] @ strides[:-1] // L, initial=0))))
    for t in range(1, T):
        _seams(keys, sites, labels, eq, shape, offs, lin, np.int64(reach), T, t,
               np.int64(back))
    if periodic.any():
        step = max(1, _budget._BUDGET // (L * max(k, 1)))
        for a in range(0, nrow, step):
            _wraps(keys, sites, labels, eq, shape, periodic, offs, a, min(nrow, a + step))
    count = _number(eq, nxt, T, nrow, L)
    ways = 4 if count < _FOUR_WAYS else 1
    # each counter row padded to whole cache lines: threads counting into neighbouring
    # rows would otherwise share lines, and with few labels wait on each other
    ctype = np.int32 if n <= _INT32_LIMIT else np.int64
    line = 64 // np.dtype(ctype).itemsize
    part = np.zeros((T * ways, -(-(count + 1) // line) * line + line), dtype=ctype)
    for s in wins:
        _final(labels, eq, part, T, s, w, L)
    sizes = part.sum(axis=0, dtype=np.int64)[1:count + 1]
    return labels, count, sizes


def _number(eq, nxt, T, nrow, L) -> int:
    """Number the forest's trees 1..count by root, each chunk's provisional labels (from
    its first site + 1 to ``nxt[t]``) in turn, in ranges of ``_BUDGET``."""
    count = 0
    step = max(_budget._BUDGET, 1)
    for t in range(T):
        lo = _window(nrow, T, t, 0, 0)[0] * L + 1
        hi = int(nxt[t]) + 1
        for a in range(lo, hi, step):
            count = _components._relabel_window(eq, a, min(hi, a + step), count)
    return int(count)
