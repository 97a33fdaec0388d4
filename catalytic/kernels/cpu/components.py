"""Connected components of implicit lattices: union-find over runs or sites, one lattice
split across threads or a stack of lattices shared out over them.

The neighbour relation is taken as undirected (see :mod:`catalytic.kernels.cpu`). Every
phase runs in kernel calls of about ``_budget._BUDGET`` units (see "Interrupts" in
:mod:`catalytic.kernels.cpu._budget`).
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import (_INT32_LIMIT, _NO, _YES, _ZERO, _arange, _filled,
                                           _frozen)
from catalytic.kernels.cpu._rows import _next_row, _row_coords, _row_target, _window

__all__ = ["connected_components", "connected_components_batched", "face_spanning_batched",
           "batch_fits"]


@njit(cache=True, nogil=True)
def _find(parent, x):
    """Root of ``x`` with path halving."""
    while True:
        p = parent[x]
        if p == x:
            return x
        gp = parent[p]
        parent[x] = gp
        x = gp


@njit(cache=True, nogil=True, inline="always")
def _union(parent, a, b):
    """Join the sets of ``a`` and ``b`` so that every root stays the smallest index of its
    set and ``parent[x] <= x`` throughout.

    Rem's algorithm with splicing (Patwary, Blair and Manne, SEA 2010): climb from both
    ends at once, always from the side whose parent is larger, and hang that node under
    the other side's parent on the way (the splice), until the parents meet or the
    climbing node is a root, which is then linked. Parents only ever decrease, so the
    invariant holds and no separate find is needed; it beat find-find-link with path
    halving on the union phase (reports/kernel_tuning.md)."""
    pa = parent[a]
    pb = parent[b]
    while pa != pb:
        if pa > pb:
            parent[a] = pb
            if a == pa:
                return
            a = pa
            pa = parent[a]
        else:
            parent[b] = pa
            if b == pb:
                return
            b = pb
            pb = parent[b]


@njit(cache=True, nogil=True)
def _relabel(parent, lo, hi, count):
    """Turn a forest with ``parent[x] <= x`` into labels in place, entries [lo, hi) of it
    (call it for consecutive ranges from 0, passing the count so far): entries < 0
    become 0, trees are numbered 1..count by their root (= smallest index). When x is
    reached its parent has already been converted to the label of their common root.
    Returns the count so far. Branch-free; O(hi - lo).

    The same loop twice: from a constant 0 LLVM unrolls it further, which pays on the
    single range that every forest under ``_BUDGET`` entries is relabelled in."""
    if lo == 0:
        for i in range(hi):
            p = parent[i]
            isroot = p == i
            count += isroot
            lab = parent[max(p, 0)]
            v = count if isroot else lab
            parent[i] = v if p >= 0 else 0
        return count
    for i in range(lo, hi):
        p = parent[i]
        isroot = p == i
        count += isroot
        lab = parent[max(p, 0)]
        v = count if isroot else lab
        parent[i] = v if p >= 0 else 0
    return count


@njit(cache=True, nogil=True)
def _relabel_window(parent, lo, hi, count):
    """:func:`_relabel` as the host function calls it, one window at a time (a kernel of
    its own, so the one-call labellings that call :func:`_relabel` never depend on a
    function the interrupt tests replace to count calls)."""
    return _relabel(parent, lo, hi, count)


# --- components over runs ------------------------------------------------------------
# A run is a maximal stretch of open sites along the last axis. When the stencil holds
# the unit step along the last axis (von Neumann, Moore, most user stencils) a run is
# connected, so union-find over runs instead of sites does the same job with about
# p(1-p) as many elements and with branch-free scans over the sites.


# In the scans below ``(v + 255) >> 8`` is the open bit of a uint8 ``v``: a compare
# there (or a helper function, which Numba does not inline into code called from a
# parallel loop) makes them several times slower.


@njit(cache=True, nogil=True)
def _runs_count_row(seg):
    c = 0
    prev = 0
    for x in range(seg.shape[0]):
        o = (np.int64(seg[x]) + 255) >> 8
        c += o & (prev ^ 1)
        prev = o
    return c


@njit(cache=True, nogil=True, parallel=True)
def _runs_count(open_, L, row_cnt, T, s, w):
    """``row_cnt[row]`` = number of runs in each row of window ``s`` (see
    :func:`_window`); parallel over row chunks. O(T w L)."""
    nrow = row_cnt.shape[0]
    for tt in prange(T):
        _, _, a, b = _window(nrow, T, np.int64(tt), s, w)
        for row in range(a, b):
            row_cnt[row] = _runs_count_row(open_[row * L:(row + 1) * L])


@njit(cache=True, nogil=True)
def _runs_write_row(seg, rs, re, k0, spill):
    """Write the run starts and ends (x, exclusive end) of one row from slot ``k0``.

    With ``spill`` the scan is branch-free and slot ``k0 + count`` (the next row's first)
    receives scratch values; without it only the row's own slots are written.
    """
    L = seg.shape[0]
    ks = k0
    ke = k0
    prev = 0
    if spill:
        for x in range(L):
            o = (np.int64(seg[x]) + 255) >> 8
            rs[ks] = x
            ks += o & (prev ^ 1)
            re[ke] = x
            ke += prev & (o ^ 1)
            prev = o
    else:
        for x in range(L):
            o = (np.int64(seg[x]) + 255) >> 8
            if o > prev:
                rs[ks] = x
                ks += 1
            elif prev > o:
                re[ke] = x
                ke += 1
            prev = o
    if prev:
        re[ke] = L
    return ks - k0


@njit(cache=True, nogil=True, parallel=True)
def _runs_write(open_, L, row_ptr, rs, re, T, s, w):
    """Fill ``rs``/``re`` for the rows of window ``s``: row chunks in parallel, each in
    ascending order (over the windows too). A row's scratch slot is the first slot of
    the next row that has runs; the scan may use it only when that row lies in the same
    chunk (it is then rewritten later, in this window or a later one). O(T w L)."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        _, hi, a, b = _window(nrow, T, np.int64(tt), s, w)
        for row in range(a, b):
            _runs_write_row(open_[row * L:(row + 1) * L], rs, re, row_ptr[row],
                            row_ptr[row + 1] < row_ptr[hi])


@njit(cache=True, nogil=True)
def _first_overlap(rs, re, b0, b1, s):
    """First run in [b0, b1) whose end is past ``s`` (binary search)."""
    while b0 < b1:
        mid = (b0 + b1) >> 1
        if re[mid] <= s:
            b0 = mid + 1
        else:
            b1 = mid
    return b0


@njit(cache=True, nogil=True, inline="always")
def _runs_union_piece(rp, a, rs, re, b, b1, e):
    """Join run ``a`` with runs b, b+1, ... (< b1) that start before ``e``."""
    while b < b1 and rs[b] < e:
        _union(rp, a, b)
        b += 1


@njit(cache=True, nogil=True)
def _runs_union_rows(rp, rs, re, row_ptr, row_lo, row_hi, chunk_lo, chunk_hi, cross, half,
                     shape, periodic):
    """Join the runs of rows [row_lo, row_hi) with the runs they touch along each offset
    of ``half`` (both ends open). With ``cross`` False only target rows inside
    [chunk_lo, chunk_hi), with ``cross`` True only the others. O(runs * offsets)."""
    d = shape.shape[0]
    L = shape[d - 1]
    per_last = periodic[d - 1] != 0
    H = half.shape[0]
    c = np.empty(d - 1, dtype=np.int64)
    _row_coords(row_lo, shape, c)
    for row in range(row_lo, row_hi):
        if row > row_lo:
            _next_row(c, shape)
        a0 = row_ptr[row]
        a1 = row_ptr[row + 1]
        if a0 == a1:
            continue
        for h in range(H):
            rt = _row_target(c, half[h], shape, periodic)
            if rt < 0:
                continue
            inside = rt >= chunk_lo and rt < chunk_hi
            if inside == cross:
                continue
            b0 = row_ptr[rt]
            b1 = row_ptr[rt + 1]
            if b0 == b1:
                continue
            cl = half[h, d - 1]
            if rt == row and (cl == 1 or cl == -1):
                # the unit step joins runs only across the periodic seam
                if per_last and rs[a0] == 0 and re[a1 - 1] == L:
                    _union(rp, a0, a1 - 1)
                continue
            # a shift along a periodic last axis can wrap a run past the seam, and the
            # shifted starts are then not ascending: find each run's first overlap by
            # binary search. Without a last-axis shift (cl == 0) nothing wraps and the
            # merge walk of the open case applies.
            wrap = per_last and cl != 0
            b = b0
            for a in range(a0, a1):
                if wrap:
                    ln = re[a] - rs[a]
                    if ln >= L:
                        s = 0
                        e = L
                    else:
                        s = (rs[a] + cl) % L
                        e = s + ln
                    b = _first_overlap(rs, re, b0, b1, s)
                else:
                    s = max(rs[a] + cl, 0)
                    e = min(re[a] + cl, L)
                    if s >= e:
                        continue
                    while b < b1 and re[b] <= s:
                        b += 1
                _runs_union_piece(rp, a, rs, re, b, b1, min(e, L))
                if e > L:
                    _runs_union_piece(rp, a, rs, re, b0, b1, e - L)


@njit(cache=True, nogil=True, parallel=True)
def _runs_union_inside(rp, rs, re, row_ptr, half, shape, periodic, T, s, w):
    """Run unions inside the row chunks, window ``s`` of each, in parallel: the chunks
    touch disjoint run ranges as long as no union across chunks has been made, so
    every window of this pass runs before :func:`_runs_union_cross`."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        lo, hi, a, b = _window(nrow, T, np.int64(tt), s, w)
        if a == lo and b == hi:
            # the whole chunk in one window: the same values twice let LLVM specialise
            _runs_union_rows(rp, rs, re, row_ptr, lo, hi, lo, hi, _NO, half, shape,
                             periodic)
        else:
            _runs_union_rows(rp, rs, re, row_ptr, a, b, lo, hi, _NO, half, shape,
                             periodic)


@njit(cache=True, nogil=True)
def _runs_union_cross(rp, rs, re, row_ptr, half, shape, periodic, T, s, w):
    """Run unions across chunk boundaries (window ``s`` of each chunk), in order."""
    nrow = row_ptr.shape[0] - 1
    for t in range(T):
        lo, hi, a, b = _window(nrow, T, t, s, w)
        _runs_union_rows(rp, rs, re, row_ptr, a, b, lo, hi, _YES, half, shape, periodic)


@njit(cache=True, nogil=True)
def _runs_label_row(out, seg, lab, a0):
    """Labels of one row whose first run is ``a0``; ``lab[a + 1]`` is the label of run
    ``a``. A running count of run starts picks the run, the open bit zeroes the gaps.
    Branch-free; O(L)."""
    a = a0
    prev = 0
    for x in range(seg.shape[0]):
        o = (np.int64(seg[x]) + 255) >> 8
        a += o & (prev ^ 1)
        prev = o
        out[x] = lab[a] * o


@njit(cache=True, nogil=True, parallel=True)
def _runs_label(out, open_, lab, row_ptr, L, T, s, w):
    """Labels of the rows of window ``s``; parallel over row chunks. O(T w L)."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        _, _, a, b = _window(nrow, T, np.int64(tt), s, w)
        for row in range(a, b):
            if row_ptr[row + 1] == row_ptr[row]:
                out[row * L:(row + 1) * L] = 0
            else:
                _runs_label_row(out[row * L:(row + 1) * L], open_[row * L:(row + 1) * L],
                                lab, row_ptr[row])


@njit(cache=True, nogil=True)
def _runs_whole(out, sizes, open_, row_ptr, rs, re, lab, half, shape, periodic):
    """Every phase of the run labelling in one serial call, for lattices whose whole
    labelling fits in one ``_BUDGET`` (one kernel call instead of six: on a 64x64
    lattice the calls cost more than the work). Same scans and unions as the windowed
    kernels with one chunk, so the same labels. ``rs``/``re`` hold at least one slot
    more than the runs (the branch-free scan spills into it), ``lab`` one more than
    ``rs``; ``sizes[c]`` receives the sites of component c (``sizes`` is zeroed here,
    at least runs + 1 entries). Returns the component count. O(n + R k alpha)."""
    nrow = row_ptr.shape[0] - 1
    L = shape[shape.shape[0] - 1]
    row_ptr[0] = 0
    for row in range(nrow):  # count and write in one scan (each row spills into the next)
        row_ptr[row + 1] = row_ptr[row] + _runs_write_row(open_[row * L:(row + 1) * L], rs,
                                                          re, row_ptr[row], _YES)
    n_runs = row_ptr[nrow]
    lab[0] = -1
    for a in range(n_runs):
        lab[a + 1] = a
    rp = lab[1:n_runs + 1]
    _runs_union_rows(rp, rs, re, row_ptr, _ZERO, nrow, _ZERO, nrow, _NO, half, shape,
                     periodic)
    count = _relabel(rp, _ZERO, n_runs, _ZERO)
    lab[0] = 0
    for row in range(nrow):
        a0 = row_ptr[row]
        if row_ptr[row + 1] == a0:
            out[row * L:(row + 1) * L] = 0
        else:
            _runs_label_row(out[row * L:(row + 1) * L], open_[row * L:(row + 1) * L], lab,
                            a0)
    sizes[:count + 1] = 0
    for a in range(n_runs):
        sizes[lab[a + 1]] += re[a] - rs[a]
    return count


# --- components over sites (stencils without the unit last-axis step) ----------------


@njit(cache=True, nogil=True)
def _cc_rows(parent, row_lo, row_hi, chunk_lo, chunk_hi, cross, half, shape, periodic):
    """Union every open site of rows [row_lo, row_hi) with its neighbour along each offset
    of ``half``. With ``cross`` False only pairs whose other row lies in
    [chunk_lo, chunk_hi), with ``cross`` True only the others. O(n k alpha)."""
    d = shape.shape[0]
    L = shape[d - 1]
    per_last = periodic[d - 1] != 0
    H = half.shape[0]
    c = np.empty(d - 1, dtype=np.int64)
    _row_coords(row_lo, shape, c)
    for row in range(row_lo, row_hi):
        if row > row_lo:
            _next_row(c, shape)
        bi = row * L
        for h in range(H):
            rt = _row_target(c, half[h], shape, periodic)
            if rt < 0:
                continue
            inside = rt >= chunk_lo and rt < chunk_hi
            if inside == cross:
                continue
            bj = rt * L
            cl = half[h, d - 1]
            if per_last:
                s = cl % L
                x0 = 0
                x1 = L
            else:
                s = cl
                x0 = max(0, -cl)
                x1 = min(L, L - cl)
            for x in range(x0, x1):
                i = bi + x
                if parent[i] < 0:
                    continue
                x2 = x + s
                if x2 >= L:
                    x2 -= L
                j = bj + x2
                if parent[j] < 0:
                    continue
                _union(parent, i, j)


@njit(cache=True, nogil=True, parallel=True)
def _cc_init(parent, open_, lo, hi):
    has_mask = open_.shape[0] != 0
    for i in prange(lo, hi):
        if has_mask and open_[i] == 0:
            parent[i] = -1
        else:
            parent[i] = i


@njit(cache=True, nogil=True, parallel=True)
def _cc_union_inside(parent, L, half, shape, periodic, T, s, w):
    """Site unions inside the row chunks, window ``s`` of each, in parallel (every
    window before :func:`_cc_union_cross`, as for the runs)."""
    nrow = parent.shape[0] // L
    for tt in prange(T):
        lo, hi, a, b = _window(nrow, T, np.int64(tt), s, w)
        _cc_rows(parent, a, b, lo, hi, _NO, half, shape, periodic)


@njit(cache=True, nogil=True)
def _cc_union_cross(parent, L, half, shape, periodic, T, s, w):
    """Site unions across chunk boundaries (window ``s`` of each chunk), in order."""
    nrow = parent.shape[0] // L
    for t in range(T):
        lo, hi, a, b = _window(nrow, T, t, s, w)
        _cc_rows(parent, a, b, lo, hi, _YES, half, shape, periodic)


def _half_stencil(offsets) -> np.ndarray:
    """One representative per {o, -o} pair (the one whose first non-zero entry is
    negative), zero offsets dropped, duplicates removed. Cached per offsets table (see
    :func:`_stencil_halves`): the array returned is shared and read-only."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    return _stencil_halves(offsets.tobytes(), offsets.shape[1])[0]


@functools.lru_cache(maxsize=256)
def _stencil_halves(key: bytes, d: int) -> tuple[np.ndarray, bool]:
    """``(half, unit)`` for the offsets table with raw bytes ``key``: the half stencil
    (:func:`_half_stencil`, read-only) and whether it holds the unit step along the last
    axis (the run labelling applies). Cached: a lattice's table never changes, and
    building these in Python is a noticeable part of a small labelling
    (reports/kernel_tuning.md)."""
    offsets = np.frombuffer(key, dtype=np.int64).reshape(-1, d)
    rows = set()
    for o in offsets:
        nz = np.flatnonzero(o)
        if nz.shape[0] == 0:
            continue
        c = o if o[nz[0]] < 0 else -o
        rows.add(tuple(int(x) for x in c))
    unit = (0,) * (d - 1) + (-1,)
    if not rows:
        half = np.zeros((0, d), dtype=np.int64)
    else:
        half = np.array(sorted(rows), dtype=np.int64).reshape(-1, d)
    half.setflags(write=False)
    return half, unit in rows


#: lattices of up to this many site-offsets (sites times the offsets of half the
#: stencil) are labelled by one serial kernel call (:func:`_runs_whole`) whatever the
#: thread count (within ``_BUDGET``): a parallel pass costs more in launches than it
#: saves there (the crossover measured in reports/kernel_tuning.md)
_WHOLE_WORK = 90_000


def connected_components(shape, periodic, offsets, open_, dedupe, *, sizes=False):
    """Label the connected components of the open sites.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`catalytic.kernels.cpu.bfs.bfs_distance` (``dedupe`` is
        unused). The neighbour relation is taken as undirected, so asymmetric stencils
        are allowed.
    sizes : bool, optional
        Also return the size of each component.

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (n,)
        0 for blocked sites; components numbered 1..count in the order of their lowest
        flat index (the numbering of ``scipy.ndimage.label``).
    count : int
    sizes : ndarray of int64, (count,)
        Only with ``sizes=True``: the sites labelled ``1..count``.

    Notes
    -----
    Union-find (Rem's algorithm with splicing, see :func:`_union`) over one offset of
    each {o, -o} pair, parents only ever decreasing, so every root is its component's
    first element and one ordered pass numbers the components. When the stencil holds
    the unit step along the last axis (von Neumann, Moore) the elements are runs of open
    sites along that axis: branch-free scans find the runs and write the labels,
    union-find joins the runs a shifted run overlaps. Otherwise the elements are the
    sites. Rows are split into one chunk per thread, joined in parallel, then the chunk
    seams are joined in order. O(n + R k alpha) time for R runs (O(n k alpha) per site);
    besides the labels, about 12 bytes per run (R <= n/2 + 1). A lattice of up to
    ``_WHOLE_WORK`` site-offsets (any size on one thread) whose labelling fits in one
    ``_budget._BUDGET`` is labelled over runs by a single serial kernel call
    (:func:`_runs_whole`), sizes included: the same labels, without the fixed cost of
    six kernel launches. The labels do not depend on the thread count.

    Every phase runs in kernel calls over windows of about ``_budget._BUDGET`` sites (one
    window of each thread's chunk per call), so a signal handler (Ctrl-C) runs between
    two of them; a row of the last axis is never split, so a lattice with very long rows
    (a 1-D lattice is one row) goes longer without a check. See "Interrupts" in
    :mod:`catalytic.kernels.cpu._budget`.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> m = np.array([1, 0, 1, 1, 0, 1], np.uint8)
    >>> connected_components((2, 3), np.zeros(2, np.uint8), off, m, False)
    (array([1, 0, 2, 1, 0, 2], dtype=int32), 2)
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    open_ = _frozen(np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1))
    n = math.prod(shape.tolist())
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    half, runs = _stencil_halves(offsets.tobytes(), d)
    ltype = np.int32 if n <= _INT32_LIMIT else np.int64
    if n == 0:
        empty = np.empty(0, dtype=ltype), 0
        return empty + (np.zeros(0, dtype=np.int64),) if sizes else empty
    L = int(shape[-1])
    nrow = n // L
    T = max(1, min(numba.get_num_threads(), nrow))
    runs = runs or L == 1
    if (runs and (T == 1 or n * half.shape[0] <= _WHOLE_WORK)
            and n * (4 + 4 * half.shape[0]) <= _budget._BUDGET):
        if open_.shape[0] == 0:
            open_ = _frozen(np.ones(n, dtype=np.uint8))
        bound = nrow * ((L + 1) // 2) + 1  # runs (at most one per two sites) + spill
        labels = np.empty(n, dtype=np.int32)
        size_of = np.empty(bound, dtype=np.int64)
        count = int(_runs_whole(labels, size_of, open_, np.empty(nrow + 1, dtype=np.int64),
                                np.empty(bound, dtype=np.int32),
                                np.empty(bound, dtype=np.int32),
                                np.empty(bound + 1, dtype=np.int32), half, shape, periodic))
        if sizes:
            return labels, count, size_of[1:count + 1]
        return labels, count
    labels, count, size_of = _components_windows(shape, periodic, open_, n, half, runs,
                                                 ltype, L, nrow, T, sizes)
    if sizes:
        return labels, count, size_of if size_of is not None else _sizes(labels, count)
    return labels, count


def _sizes(labels, count) -> np.ndarray:
    """Sites per label 1..count (int64), counted in slices of at least ``_BUDGET``
    labels so that signal handlers run between them."""
    step = max(_budget._BUDGET, count + 1, 1)
    out = np.zeros(count + 1, dtype=np.int64)
    for a in range(0, labels.shape[0], step):
        out += np.bincount(labels[a:a + step], minlength=count + 1)
    return out[1:]


@njit(cache=True, nogil=True)
def _sites_whole(parent, sizes, open_, half, shape, periodic):
    """Site union-find labelling of one whole lattice in one serial call (stencils
    without the unit last-axis step): the unions of :func:`_cc_union_inside` with one
    chunk, then :func:`_relabel`, so the labels of :func:`connected_components`.
    ``sizes`` (at least n + 1 entries) receives the sites per label. Returns the count."""
    n = parent.shape[0]
    L = shape[shape.shape[0] - 1]
    for i in range(n):
        parent[i] = i if open_[i] != 0 else -1
    _cc_rows(parent, _ZERO, n // L, _ZERO, n // L, _NO, half, shape, periodic)
    count = _relabel(parent, _ZERO, n, _ZERO)
    sizes[:count + 1] = 0
    for i in range(n):
        sizes[parent[i]] += 1
    return count


@njit(cache=True, nogil=True, parallel=True)
def _runs_batched(out, sizes, counts, stack, lo, hi, row_ptr, rs, re, lab, half, shape,
                  periodic):
    """:func:`_runs_whole` on lattices [lo, hi) of a stack, in parallel, scratch per
    thread (``row_ptr``, ``rs``, ``re``, ``lab`` have one row per thread)."""
    for b in prange(lo, hi):
        t = numba.get_thread_id()
        counts[b] = _runs_whole(out[b], sizes[b], stack[b], row_ptr[t], rs[t], re[t],
                                lab[t], half, shape, periodic)


@njit(cache=True, nogil=True, parallel=True)
def _sites_batched(out, sizes, counts, stack, lo, hi, half, shape, periodic):
    """:func:`_sites_whole` on lattices [lo, hi) of a stack, in parallel."""
    for b in prange(lo, hi):
        counts[b] = _sites_whole(out[b], sizes[b], stack[b], half, shape, periodic)


def connected_components_batched(shape, periodic, offsets, open_stack, dedupe):
    """Label the components of a stack of same-shape lattices (the masks of an
    ensemble), the lattices in parallel.

    Parameters
    ----------
    shape, periodic, offsets, dedupe
        The common lattice, as in :func:`connected_components` (``dedupe`` is unused).
    open_stack : ndarray of uint8, (B, n) or (B, 0)
        Row b is lattice b's ``open_``; (B, 0) means every site of every lattice is open.

    Returns
    -------
    labels : ndarray of int32, (B, n)
        Row b equals ``connected_components`` of lattice b, bit for bit.
    counts : ndarray of int64, (B,)
    sizes : list of B int64 arrays
        ``sizes[b][c]`` is the sites labelled ``c + 1`` in lattice b.

    Raises
    ------
    ValueError
        ``open_stack`` not 2-D with n or 0 columns, or a lattice too large for one
        serial labelling (:func:`batch_fits`; label those one by one with
        :func:`connected_components`, which splits one lattice across threads).

    Notes
    -----
    Each lattice is labelled by one serial kernel (:func:`_runs_whole` over runs when
    the stencil holds the unit last-axis step, else :func:`_sites_whole` over sites),
    and the lattices are handed out to Numba's threads one at a time: one parallel
    launch per ``_budget._BUDGET`` of work instead of six serial-fraction launches per
    lattice. The result does not depend on the thread count.
    Scratch is per thread (runs) or the labels themselves (sites); per lattice the result
    holds 4 n bytes of labels and 4 n (runs) or 8 n (sites) bytes of sizes until they
    are cut to the counts.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> st = np.array([[1, 1, 1], [1, 0, 1]], np.uint8)
    >>> labels, counts, sizes = connected_components_batched(
    ...     (3,), np.zeros(1, np.uint8), off, st, False)
    >>> labels.tolist(), counts.tolist(), [s.tolist() for s in sizes]
    ([[1, 1, 1], [1, 0, 2]], [1, 2], [[3], [1, 1]])
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    n = math.prod(shape.tolist())
    stack = np.asarray(open_stack)
    if stack.ndim != 2 or stack.shape[1] not in (0, n):
        raise ValueError(f"open_stack must be (B, {n}) or (B, 0), got shape {stack.shape}")
    B = stack.shape[0]
    if not batch_fits(shape, offsets):
        raise ValueError(f"a lattice of {n} sites is too large for one serial labelling; "
                         "label it with connected_components")
    if stack.shape[1] == 0:
        stack = np.ones((B, n), dtype=np.uint8)
    stack = _frozen(np.ascontiguousarray(stack, dtype=np.uint8))
    half, runs = _stencil_halves(offsets.tobytes(), d)
    L = int(shape[-1]) if n else 1
    runs = runs or L == 1
    labels = np.empty((B, n), dtype=np.int32)
    counts = np.zeros(B, dtype=np.int64)
    if B == 0 or n == 0:
        return labels, counts, [np.zeros(0, dtype=np.int64) for _ in range(B)]
    nrow = n // L
    bound = nrow * ((L + 1) // 2) + 1 if runs else n + 1
    sizes = np.empty((B, bound), dtype=np.int64)
    T = numba.get_num_threads()  # scratch rows: any thread of the team may take a lattice
    # lattices per kernel call: about one _BUDGET of work (see "Interrupts")
    step = max(T, _budget._BUDGET // max(1, n * (4 + 4 * half.shape[0])))
    # lattices handed out one at a time: a descheduled thread holds up one, not a share
    prev = numba.set_parallel_chunksize(1)
    try:
        if runs:
            row_ptr = np.empty((T, nrow + 1), dtype=np.int64)
            rs = np.empty((T, bound), dtype=np.int32)
            re = np.empty((T, bound), dtype=np.int32)
            lab = np.empty((T, bound + 1), dtype=np.int32)
            for lo in range(0, B, step):
                _runs_batched(labels, sizes, counts, stack, lo, min(B, lo + step), row_ptr,
                              rs, re, lab, half, shape, periodic)
        else:
            for lo in range(0, B, step):
                _sites_batched(labels, sizes, counts, stack, lo, min(B, lo + step), half,
                               shape, periodic)
    finally:
        numba.set_parallel_chunksize(prev)
    return labels, counts, [sizes[b, 1:counts[b] + 1].copy() for b in range(B)]


@njit(cache=True, nogil=True, parallel=True)
def _faces_batched(labels, counts, outer, L, inner, out, found):
    """For each row b of a (B, n) stack of labellings viewed as (outer, L, inner): the
    labels on both faces (index 0 and L - 1 of the middle axis), ascending, into
    ``out[b, :found[b]]``. O(face + count) per row."""
    for b in prange(labels.shape[0]):
        found[b] = _face_labels(labels[b], counts[b], outer, L, inner, out[b])


@njit(cache=True, nogil=True)
def _face_labels(row, count, outer, L, inner, out) -> int:
    """The labels (1..count) of one labelling ``row``, viewed as (outer, L, inner), that
    lie on both faces of the middle axis, ascending, into ``out``; returns how many."""
    seen = np.zeros(count + 1, dtype=np.uint8)
    for o in range(outer):
        lo = o * L * inner
        hi = lo + (L - 1) * inner
        for i in range(inner):
            seen[row[lo + i]] |= 1
            seen[row[hi + i]] |= 2
    k = 0
    for c in range(1, count + 1):
        if seen[c] == 3:
            out[k] = c
            k += 1
    return k


def face_spanning_batched(labels, counts, shape, axis) -> list:
    """The clusters touching both faces of ``axis``, for every row of a stack of
    labellings: ``backends._common.face_spanning`` of each row, in one parallel kernel.

    Parameters
    ----------
    labels : ndarray of int, (B, n)
        Row b labels lattice b of ``shape``: components numbered 1..counts[b], 0 on
        blocked sites (as :func:`connected_components_batched` returns them).
    counts : array_like of int, (B,)
        The number of components of each row.
    shape : sequence of int, (d,)
        The common lattice shape (C order, n sites).
    axis : int
        The axis whose two faces (coordinate 0 and ``shape[axis] - 1``) are checked.

    Returns
    -------
    list of B ndarray of int64
        The labels of row b found on both faces, ascending.

    Notes
    -----
    O(B (face + count)) time; a (B, face) int64 scratch array plus ``count + 1`` bytes
    per row while it runs.

    Examples
    --------
    >>> import numpy as np
    >>> lab = np.array([[1, 0, 1, 1], [1, 2, 0, 2]], np.int32)
    >>> [a.tolist() for a in face_spanning_batched(lab, np.array([1, 2]), (2, 2), 0)]
    [[1], [2]]
    """
    shape = [int(x) for x in shape]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    B = labels.shape[0]
    out = np.empty((B, outer * inner), dtype=np.int64)
    found = np.zeros(B, dtype=np.int64)
    if B and outer * inner and shape[axis]:
        _faces_batched(labels, np.ascontiguousarray(counts, dtype=np.int64), outer,
                       shape[axis], inner, out, found)
    return [out[b, :found[b]].copy() for b in range(B)]


def batch_fits(shape, offsets) -> bool:
    """Whether one lattice of ``shape`` with ``offsets`` is labelled by one serial
    kernel call in :func:`connected_components_batched`: int32 labels and at most
    ``_budget._BUDGET`` work (larger lattices are worth splitting across threads one by
    one, with :func:`connected_components`). Returns a bool."""
    n = math.prod(int(x) for x in shape)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    half = _stencil_halves(offsets.tobytes(), offsets.shape[1])[0]
    return n <= _INT32_LIMIT and n * (4 + 4 * half.shape[0]) <= _budget._BUDGET


def _components_windows(shape, periodic, open_, n, half, runs, ltype, L, nrow, T, sizes):
    """:func:`connected_components` in windowed kernel calls (see its Notes). Returns
    ``(labels, count, sizes)``; with ``sizes`` over runs, the sizes are summed per run
    (:func:`_run_sizes`, a pass over the runs instead of one over the labels), else
    ``sizes`` is None."""
    # Each kernel call does window s (w rows) of each of the T row chunks.
    w = max(1, _budget._BUDGET // (T * L))
    chunk_rows = -(-nrow // T)
    wins = range(-(-chunk_rows // w))
    if runs:
        if open_.shape[0] == 0:
            # one run per row; O(n) bytes, rarely used
            open_ = _frozen(_filled(n, 1, np.uint8))
        row_cnt = np.empty(nrow, dtype=np.int64)
        for s in wins:
            _runs_count(open_, L, row_cnt, T, s, w)
        row_ptr = np.zeros(nrow + 1, dtype=np.int64)
        np.cumsum(row_cnt, out=row_ptr[1:])
        n_runs = int(row_ptr[-1])
        xtype = np.int32 if L <= _INT32_LIMIT else np.int64
        rs = np.empty(n_runs + 1, dtype=xtype)
        re = np.empty(n_runs + 1, dtype=xtype)
        for s in wins:
            _runs_write(open_, L, row_ptr, rs, re, T, s, w)
        # lab[0] = 0 ahead of the run forest rp = lab[1:], so lab[a + 1] labels run a
        lab = _arange(-1, n_runs, np.int32 if n_runs < _INT32_LIMIT else np.int64)
        rp = lab[1:]
        for s in wins:
            _runs_union_inside(rp, rs, re, row_ptr, half, shape, periodic, T, s, w)
        if T > 1:
            for s in wins:
                _runs_union_cross(rp, rs, re, row_ptr, half, shape, periodic, T, s, w)
        count = _relabel_all(rp)
        lab[0] = 0
        labels = np.empty(n, dtype=ltype)
        lab = lab.astype(ltype, copy=False)
        for s in wins:
            _runs_label(labels, open_, lab, row_ptr, L, T, s, w)
        size_of = None
        if sizes:
            size_of = np.zeros(count + 1, dtype=np.int64)
            for a in range(0, n_runs, max(_budget._BUDGET, 1)):
                _run_sizes(size_of, lab, rs, re, a, min(n_runs, a + max(_budget._BUDGET, 1)))
            size_of = size_of[1:]
        return labels, count, size_of
    parent = np.empty(n, dtype=ltype)
    step = max(_budget._BUDGET, 1)
    for a in range(0, n, step):
        _cc_init(parent, open_, a, min(n, a + step))
    # a site costs one union per half-offset, about 4 units each
    w = max(1, _budget._BUDGET // (T * L * 4 * max(half.shape[0], 1)))
    wins = range(-(-chunk_rows // w))
    for s in wins:
        _cc_union_inside(parent, L, half, shape, periodic, T, s, w)
    if T > 1:
        for s in wins:
            _cc_union_cross(parent, L, half, shape, periodic, T, s, w)
    return parent, _relabel_all(parent), None


@njit(cache=True, nogil=True)
def _run_sizes(sizes, lab, rs, re, lo, hi):
    """Add the length of runs [lo, hi) to their component's size (``lab[a + 1]`` is the
    label of run ``a``). O(hi - lo)."""
    for a in range(lo, hi):
        sizes[lab[a + 1]] += re[a] - rs[a]


def _relabel_all(parent) -> int:
    """:func:`_relabel_window` over the whole forest in ranges of ``_BUDGET`` entries."""
    count = 0
    step = max(_budget._BUDGET, 1)
    for a in range(0, parent.shape[0], step):
        count = _relabel_window(parent, a, min(parent.shape[0], a + step), count)
    return int(count)
