"""Connected components that honour bonds and find the clusters that wrap periodic axes,
in the labelling itself: union-find over runs that keeps each element's winding (seam
crossings) relative to its parent.

A run here is a stretch of open sites along the last axis joined by open unit bonds
(the stencil's unit step along that axis); without that step every open site is a run
of its own. Each run lies inside one row without crossing the seam, so all its sites
sit at one winding. A step from run ``a`` to run ``b`` that crosses the seams ``t``
(a vector, one entry per axis tracked) joins them with ``pos(b) = pos(a) + t``; a step
inside one set whose ``pos`` already differ by something else closes a cycle of
non-zero winding, and the cluster wraps along every axis where they differ (the test
of Newman and Ziff, PRE 64, 016706, 2001; Machta et al., PRE 54, 1332, 1996).

Every bond counts separately (parallel bonds of short periodic axes and self-loop
bonds included, closed bonds excluded), as in ``backends._common.wrapping_labels``.
Bonds are read at the far end of the step: the half stencil of the labelling is the
backward one (see :func:`catalytic.kernels.cpu.components._stencil_halves`).
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu import components as _components
from catalytic.kernels.cpu._budget import _INT32_LIMIT, _NO, _YES, _ZERO, _frozen
from catalytic.kernels.cpu._rows import _next_row, _row_coords, _window
from catalytic.kernels.cpu.components import _first_overlap, _stencil_halves, _union

__all__ = ["label_windings", "label_windings_batched"]

#: axes whose windings a labelling tracks at most (lanes of ``disp`` per run)
_LANES = 4
#: lattices of up to this many site-offsets (sites times half-stencil offsets) within
#: one ``_BUDGET`` are labelled by one serial call whatever the thread count: the
#: crossover of the labelling without bonds (``components._WHOLE_WORK``)
_WHOLE_WORK = _components._WHOLE_WORK


@njit(cache=True, nogil=True, inline="always")
def _bit(bits, word0, g):
    """Bit ``g`` of the plane whose words start at ``word0``."""
    return (np.int64(bits[word0 + (g >> 5)]) >> (g & 31)) & 1


@njit(cache=True, nogil=True, inline="always")
def _any_bit(bits, word0, g0, g1):
    """Whether any bit ``g0 <= g < g1`` (``g0 < g1``) of the plane at ``word0`` is set:
    a word at a time."""
    w0 = g0 >> 5
    w1 = (g1 - 1) >> 5
    lo = np.int64(bits[word0 + w0]) >> (g0 & 31)
    if w0 == w1:
        return (lo & ((np.int64(1) << (g1 - g0)) - 1)) != 0
    if lo != 0:
        return True
    for w in range(w0 + 1, w1):
        if bits[word0 + w] != 0:
            return True
    hi = np.int64(bits[word0 + w1]) & ((np.int64(1) << (((g1 - 1) & 31) + 1)) - 1)
    return hi != 0


@njit(cache=True, nogil=True, inline="always")
def _all_bits(bits, word0, g0, g1):
    """Whether every bit ``g0 <= g < g1`` (``g0 < g1``) of the plane at ``word0`` is set:
    a word at a time."""
    full = np.int64(0xFFFFFFFF)
    w0 = g0 >> 5
    w1 = (g1 - 1) >> 5
    lo = (~np.int64(bits[word0 + w0]) & full) >> (g0 & 31)
    if w0 == w1:
        return (lo & ((np.int64(1) << (g1 - g0)) - 1)) == 0
    if lo != 0:
        return False
    for w in range(w0 + 1, w1):
        if np.int64(bits[word0 + w]) != full:
            return False
    hi = ~np.int64(bits[word0 + w1]) & ((np.int64(1) << (((g1 - 1) & 31) + 1)) - 1)
    return hi == 0


@njit(cache=True, nogil=True, inline="always")
def _linked(bits, ub, hasb, unit, base, L):
    """Whether the runs of the row at flat ``base`` need its unit bonds read site by
    site: bonds given, the stencil holds the unit step (``unit``), and some unit bond
    inside the row (plane at word ``ub``; the bond into site x starts at x - 1) closed.
    Otherwise open neighbours along the row join as without bonds (``unit``)."""
    if not hasb or unit == 0 or L < 2:
        return False
    return not _all_bits(bits, ub, base, base + L - 1)


# The row scans below work on a slice of one row (``seg``: its open flags, ``dst``: its
# labels; indices from 0 let LLVM drop the negative-index checks); bit ``gb + x`` of
# the words from ``bits[w0]`` is the unit bond into site x. ``(v + 255) >> 8`` is the
# open bit of a uint8 ``v``. With ``lk`` False the unit bonds are not read (see
# :func:`_linked`), and the labels are found by a second scan; with ``lk`` the scan
# that writes the runs leaves each site's run in ``dst`` (-1 off the runs) and the
# labels are gathered from it (cheaper than reading the bonds again).


@njit(cache=True, nogil=True, inline="always")
def _row_bits(bits, ub, hasb, unit, base, L):
    """``(lk, w0, gb)`` of the row at flat ``base`` (see above)."""
    return _linked(bits, ub, hasb, unit, base, L), ub + (base >> 5), (base & 31) - 1


@njit(cache=True, nogil=True, inline="always")
def _row_count(seg, bits, w0, gb, lk, unit):
    """The runs of one row. Branch-free; O(L)."""
    c = np.int64(0)
    prev = np.int64(0)
    if lk:
        for x in range(seg.shape[0]):
            o = (np.int64(seg[x]) + 255) >> 8
            g = max(gb + x, 0)  # at x = 0 the bit is unused: prev is 0
            link = (np.int64(bits[w0 + (g >> 5)]) >> (g & 31)) & 1
            c += o & ((o & prev & link) ^ 1)
            prev = o
    elif unit:
        for x in range(seg.shape[0]):
            o = (np.int64(seg[x]) + 255) >> 8
            c += o & (prev ^ 1)
            prev = o
    else:
        for x in range(seg.shape[0]):
            c += (np.int64(seg[x]) + 255) >> 8
    return c


@njit(cache=True, nogil=True, inline="always")
def _row_scan(seg, dst, bits, w0, gb, lk, unit, rs, re, k, keep):
    """Write the runs of one row from slot ``k``: ``rs``/``re`` (start, exclusive end
    along the row); the slot past its last run receives scratch; with ``lk`` or
    ``keep`` each site's run into ``dst`` (see above). Branch-free; returns the next
    free slot."""
    L = seg.shape[0]
    ks = k
    ke = k
    prev = np.int64(0)
    if lk:
        for x in range(L):
            o = (np.int64(seg[x]) + 255) >> 8
            g = max(gb + x, 0)
            link = (np.int64(bits[w0 + (g >> 5)]) >> (g & 31)) & 1
            cut = (o & prev & link) ^ 1
            re[ke] = x
            ke += prev & cut
            rs[ks] = x
            ks += o & cut
            dst[x] = o * ks - 1
            prev = o
    elif unit:
        for x in range(L):
            o = (np.int64(seg[x]) + 255) >> 8
            re[ke] = x
            ke += prev & (o ^ 1)
            rs[ks] = x
            ks += o & (prev ^ 1)
            if keep:
                dst[x] = o * ks - 1
            prev = o
    else:
        for x in range(L):
            o = (np.int64(seg[x]) + 255) >> 8
            re[ke] = x
            ke += prev
            rs[ks] = x
            ks += o
            if keep:
                dst[x] = o * ks - 1
            prev = o
    if prev:
        re[ke] = L
    return ks


@njit(cache=True, nogil=True, inline="always")
def _row_scan_tight(seg, dst, bits, w0, gb, lk, unit, rs, re, k):
    """:func:`_row_scan` writing only the row's own slots (a branch per site)."""
    L = seg.shape[0]
    ks = k
    ke = k
    prev = np.int64(0)
    link = unit
    for x in range(L):
        o = (np.int64(seg[x]) + 255) >> 8
        if lk:
            g = max(gb + x, 0)
            link = (np.int64(bits[w0 + (g >> 5)]) >> (g & 31)) & 1
        cut = (o & prev & link) ^ 1
        if prev & cut:
            re[ke] = x
            ke += 1
        if o & cut:
            rs[ks] = x
            ks += 1
        if lk:
            dst[x] = o * ks - 1
        prev = o
    if prev:
        re[ke] = L
    return ks


@njit(cache=True, nogil=True, inline="always")
def _row_label(dst, seg, lk, unit, lab, a):
    """Labels of one row whose first run is ``a`` (``lab[a + 1]`` is run a's label):
    with ``lk`` gathered from the runs in ``dst``, else a running count of run starts
    picks the run and the open bit zeroes the gaps. Branch-free; O(L)."""
    prev = np.int64(0)
    if lk:
        for x in range(seg.shape[0]):
            dst[x] = lab[dst[x] + 1]
    elif unit:
        for x in range(seg.shape[0]):
            o = (np.int64(seg[x]) + 255) >> 8
            a += o & (prev ^ 1)
            prev = o
            dst[x] = lab[a] * o
    else:
        for x in range(seg.shape[0]):
            o = (np.int64(seg[x]) + 255) >> 8
            a += o
            dst[x] = lab[a] * o


@njit(cache=True, nogil=True)
def _scan_rows(open_, bits, words, us, L, row_lo, row_hi, row_ptr, rs, re, k, out):
    """Runs of rows [row_lo, row_hi) from slot ``k``: ``rs``/``re`` (start, exclusive end
    along the last axis), ``row_ptr[row]`` the row's first run; one slot past the last
    run receives scratch; ``out`` each site's run, -1 off the runs (gathered into labels
    by :func:`_write_labels`: on a lattice labelled in one call a cache-resident pass,
    cheaper than a second scan). ``us`` is the unit bond's plane (-1: no unit step,
    every site its own run). Branch-free over the sites; returns the next free slot."""
    hasb = bits.shape[0] != 0
    ub = max(us, 0) * words
    unit = np.int64(1 if us >= 0 else 0)
    for row in range(row_lo, row_hi):
        row_ptr[row] = k
        base = row * L
        lk, w0, gb = _row_bits(bits, ub, hasb, unit, base, L)
        k = _row_scan(open_[base:base + L], out[base:base + L], bits, w0, gb, lk, unit,
                      rs, re, k, True)
    return k


@njit(cache=True, nogil=True)
def _count_rows(open_, bits, words, us, L, row_lo, row_hi, row_cnt):
    """``row_cnt[row]``: the runs of each row of [row_lo, row_hi) (as
    :func:`_scan_rows` finds them). Branch-free; O(sites)."""
    hasb = bits.shape[0] != 0
    ub = max(us, 0) * words
    unit = np.int64(1 if us >= 0 else 0)
    for row in range(row_lo, row_hi):
        base = row * L
        lk, w0, gb = _row_bits(bits, ub, hasb, unit, base, L)
        row_cnt[row] = _row_count(open_[base:base + L], bits, w0, gb, lk, unit)


@njit(cache=True, nogil=True)
def _write_rows(open_, bits, words, us, L, row_lo, row_hi, row_ptr, end, rs, re, out,
                parent, disp, flag, P):
    """:func:`_scan_rows` of rows [row_lo, row_hi) into the slots ``row_ptr`` gives them
    (counted by :func:`_count_rows`), each run then its own set (winding 0, no wrap);
    ``end`` is the first slot another thread may write: a row whose scratch slot would
    reach it is scanned without spilling."""
    hasb = bits.shape[0] != 0
    ub = max(us, 0) * words
    unit = np.int64(1 if us >= 0 else 0)
    for row in range(row_lo, row_hi):
        k = row_ptr[row]
        k1 = row_ptr[row + 1]
        base = row * L
        lk, w0, gb = _row_bits(bits, ub, hasb, unit, base, L)
        seg = open_[base:base + L]
        dst = out[base:base + L]
        if k1 < end:
            _row_scan(seg, dst, bits, w0, gb, lk, unit, rs, re, k, False)
        else:
            _row_scan_tight(seg, dst, bits, w0, gb, lk, unit, rs, re, k)
        for a in range(k, k1):
            parent[a] = a
        if P:
            flag[k:k1] = 0
            disp[k * _LANES:k1 * _LANES] = 0


@njit(cache=True, nogil=True)
def _label_rows(out, open_, bits, words, us, L, row_lo, row_hi, row_ptr, lab):
    """Labels of the sites of rows [row_lo, row_hi) (:func:`_row_label`; ``out`` as the
    scan left it); ``lab[a + 1]`` is run a's label. O(sites)."""
    hasb = bits.shape[0] != 0
    ub = max(us, 0) * words
    unit = np.int64(1 if us >= 0 else 0)
    for row in range(row_lo, row_hi):
        base = row * L
        a = row_ptr[row]
        if row_ptr[row + 1] == a:
            out[base:base + L] = 0
            continue
        lk = _linked(bits, ub, hasb, unit, base, L)
        _row_label(out[base:base + L], open_[base:base + L], lk, unit, lab, a)


@njit(cache=True, nogil=True)
def _wind_rows(parent, disp, flag, rs, re, row_ptr, row_lo, row_hi, chunk_lo, chunk_hi,
               cross, bits, words, hslot, unit_h, half, shape, periodic, wax):
    """Join the runs of rows [row_lo, row_hi) with the runs they reach along each offset
    of ``half`` through open bonds, with the seam crossings of the tracked axes ``wax``.
    With ``cross`` False only target rows inside [chunk_lo, chunk_hi), with ``cross``
    True only the others. O(runs * offsets + bond words).

    Without tracked axes the unions are Rem's (:func:`_union`); with them, path halving
    that keeps each element's winding relative to its parent (``disp``, P per element),
    the larger root linked under the smaller so that ``parent[x] <= x`` holds as
    :func:`_relabel_runs` needs; a step inside one set whose windings disagree sets the
    root's ``flag`` bit of each axis where they do. Written out in the loop (no helper
    taking arrays): Numba's array bookkeeping around such helpers cost several times
    the unions."""
    d = shape.shape[0]
    L = shape[d - 1]
    per_last = periodic[d - 1] != 0
    hasb = bits.shape[0] != 0
    H = half.shape[0]
    P = wax.shape[0]
    lastq = -1
    for q in range(P):
        if wax[q] == d - 1:
            lastq = q
    c = np.empty(d - 1, dtype=np.int64)  # the row's coordinates
    tv = np.empty(d, dtype=np.int64)  # seam crossings of a row step, per axis
    t = np.zeros(_LANES, dtype=np.int64)  # ... of the step, per tracked axis
    _row_coords(row_lo, shape, c)
    for row in range(row_lo, row_hi):
        if row > row_lo:
            _next_row(c, shape)
        a0 = row_ptr[row]
        a1 = row_ptr[row + 1]
        if a0 == a1:
            continue
        for h in range(H):
            wb = hslot[h] * words
            seam = h == unit_h
            if seam:
                # runs hold the unit steps inside a row; only the seam step is left
                rt = row
                if not per_last or rs[a0] != 0 or re[a1 - 1] != L:
                    continue
                if hasb and _bit(bits, wb, row * L + L - 1) == 0:
                    continue
                for q in range(P):
                    t[q] = -1 if q == lastq else 0
            else:
                rt = 0
                for a in range(d - 1):
                    x = c[a] + half[h, a]
                    m = shape[a]
                    tv[a] = 0
                    if x < 0 or x >= m:
                        if periodic[a] == 0:
                            rt = -1
                            break
                        tv[a] = x // m
                        x -= tv[a] * m
                    rt = rt * m + x
                if rt < 0:
                    continue
                for q in range(P):
                    t[q] = tv[wax[q]] if wax[q] != d - 1 else 0
            inside = chunk_lo <= rt < chunk_hi
            if inside == cross:
                continue
            b0 = row_ptr[rt]
            b1 = row_ptr[rt + 1]
            if b0 == b1:
                continue
            cl = half[h, d - 1]
            tb = rt * L
            wrap = per_last and cl != 0
            bm = b0
            # the seam step joins the row's first run with its last: one pass of the
            # loops below with a = a0, b = a1 - 1 and no bond left to check; a target
            # row whose bonds along this offset are all open needs no check either
            chk = hasb and not seam and not _all_bits(bits, wb, tb, tb + L)
            if P == 0 and not seam and not wrap:
                # labels only, no shift across the seam: the merge walk of
                # components._runs_union_rows, plus the bond check
                bm = b0
                for a in range(a0, a1):
                    p0 = max(rs[a] + cl, 0)
                    p1 = min(re[a] + cl, L)
                    if p0 >= p1:
                        continue
                    while bm < b1 and re[bm] <= p0:
                        bm += 1
                    b = bm
                    while b < b1 and rs[b] < p1:
                        if not chk or _any_bit(bits, wb, tb + max(p0, rs[b]),
                                               tb + min(p1, re[b])):
                            _union(parent, a, b)
                        b += 1
                continue
            for a in range(a0, a0 + 1 if seam else a1):
                # the overlap of run a shifted by cl with the target row: one or (when
                # the shift crosses the seam) two pieces at two windings
                if seam:
                    q0 = 0
                    p0 = 0
                    p1 = 0
                elif wrap:
                    y0 = rs[a] + cl
                    q0 = y0 // L
                    p0 = y0 - q0 * L
                    p1 = p0 + re[a] - rs[a]
                else:
                    q0 = 0
                    p0 = max(rs[a] + cl, 0)
                    p1 = min(re[a] + cl, L)
                    if p0 >= p1:
                        continue
                    while bm < b1 and re[bm] <= p0:
                        bm += 1
                for piece in range(2 if p1 > L else 1):
                    bend = b1
                    if seam:
                        b = a1 - 1
                        bend = a1
                        e = L + 1
                        s0 = 0
                    elif piece == 1:
                        q0 += 1
                        b = b0
                        s0 = 0
                        e = p1 - L
                    else:
                        b = _first_overlap(rs, re, b0, b1, p0) if wrap else bm
                        s0 = p0
                        e = min(p1, L)
                    if lastq >= 0 and not seam:
                        t[lastq] = q0
                    # the step's seam crossings, one lane per tracked axis (4 lanes, the
                    # unused ones 0): scalars, so the unions below keep them in registers
                    t0 = t[0]
                    t1 = t[1]
                    t2 = t[2]
                    t3 = t[3]
                    while b < bend and rs[b] < e:
                        if chk and not _any_bit(
                                bits, wb, tb + max(s0, rs[b]), tb + min(e, re[b])):
                            b += 1
                            continue
                        if P == 0:
                            _union(parent, a, b)
                        else:
                            # roots of a and b with their windings (path halving)
                            u = a
                            u0 = u1 = u2 = u3 = 0
                            while parent[u] != u:
                                pu = parent[u]
                                x = u * 4
                                y = pu * 4
                                w0 = disp[x] + disp[y]
                                w1 = disp[x + 1] + disp[y + 1]
                                w2 = disp[x + 2] + disp[y + 2]
                                w3 = disp[x + 3] + disp[y + 3]
                                disp[x] = w0
                                disp[x + 1] = w1
                                disp[x + 2] = w2
                                disp[x + 3] = w3
                                u0 += w0
                                u1 += w1
                                u2 += w2
                                u3 += w3
                                parent[u] = parent[pu]
                                u = parent[u]
                            v = b
                            v0 = v1 = v2 = v3 = 0
                            while parent[v] != v:
                                pv = parent[v]
                                x = v * 4
                                y = pv * 4
                                w0 = disp[x] + disp[y]
                                w1 = disp[x + 1] + disp[y + 1]
                                w2 = disp[x + 2] + disp[y + 2]
                                w3 = disp[x + 3] + disp[y + 3]
                                disp[x] = w0
                                disp[x + 1] = w1
                                disp[x + 2] = w2
                                disp[x + 3] = w3
                                v0 += w0
                                v1 += w1
                                v2 += w2
                                v3 += w3
                                parent[v] = parent[pv]
                                v = parent[v]
                            # pos(b) - pos(a) through the tree minus through this step
                            z0 = u0 + t0 - v0
                            z1 = u1 + t1 - v1
                            z2 = u2 + t2 - v2
                            z3 = u3 + t3 - v3
                            if u == v:
                                flag[u] |= ((z0 != 0) | ((z1 != 0) << 1) | ((z2 != 0) << 2)
                                            | ((z3 != 0) << 3))
                            else:
                                if u > v:
                                    u, v = v, u
                                    z0, z1, z2, z3 = -z0, -z1, -z2, -z3
                                parent[v] = u
                                x = v * 4
                                disp[x] = z0
                                disp[x + 1] = z1
                                disp[x + 2] = z2
                                disp[x + 3] = z3
                                flag[u] |= flag[v]
                        b += 1


@njit(cache=True, nogil=True)
def _relabel_runs(parent, flag, sizes, wraps, rs, re, lo, hi, count, P):
    """Number the sets 1..count by their root (the smallest run, so the order of the
    lowest flat index), runs [lo, hi) of them (call it for consecutive ranges from 0,
    passing the count so far): ``parent`` becomes the runs' labels, ``sizes`` and
    ``wraps`` (index = label) each label's sites and wrap bits. Returns the count."""
    if lo == 0:
        wraps[0] = 0
        sizes[0] = 0
    for a in range(lo, hi):
        p = parent[a]
        if p == a:
            count += 1
            parent[a] = count
            sizes[count] = 0
            wraps[count] = flag[a] if P else 0
        else:
            parent[a] = parent[p]
        sizes[parent[a]] += re[a] - rs[a]
    return count


@njit(cache=True, nogil=True)
def _write_labels(out, lab, lo, hi):
    """Labels of sites [lo, hi), which hold their run (-1 off the runs): ``lab[a + 1]``
    is run a's label, ``lab[0]`` 0. Branch-free; O(hi - lo)."""
    for i in range(lo, hi):
        out[i] = lab[out[i] + 1]


@njit(cache=True, nogil=True)
def _init_runs(parent, flag, disp, P, lo, hi):
    """Every run of [lo, hi) its own set, at winding 0, wrapping nothing."""
    for a in range(lo, hi):
        parent[a] = a
    if P:
        flag[lo:hi] = 0
        disp[lo * _LANES:hi * _LANES] = 0


@njit(cache=True, nogil=True)
def _wind_whole(out, sizes, wraps, open_, bits, words, us, half, hslot, unit_h, shape,
                periodic, wax, row_ptr, rs, re, lab, disp, flag):
    """One lattice in one serial call: runs, unions with windings, labels. ``sizes`` and
    ``wraps`` hold at least runs + 1 entries (index = label), ``lab`` runs + 2 (the run
    forest from index 1). Returns the count."""
    L = shape[shape.shape[0] - 1]
    nrow = out.shape[0] // L
    P = wax.shape[0]
    R = _scan_rows(open_, bits, words, us, L, 0, nrow, row_ptr, rs, re, 0, out)
    row_ptr[nrow] = R
    lab[0] = 0
    parent = lab[1:]
    _init_runs(parent, flag, disp, P, 0, R)
    _wind_rows(parent, disp, flag, rs, re, row_ptr, _ZERO, nrow, _ZERO, nrow, _NO, bits,
               words, hslot, unit_h, half, shape, periodic, wax)
    count = _relabel_runs(parent, flag, sizes, wraps, rs, re, _ZERO, R, _ZERO, P)
    _write_labels(out, lab, 0, out.shape[0])
    return count


@njit(cache=True, nogil=True, parallel=True)
def _wind_batched(out, sizes, wraps, counts, stack, lo, hi, bits, words, us, half, hslot,
                  unit_h, shape, periodic, wax, row_ptr, rs, re, lab, disp, flag):
    """:func:`_wind_whole` on lattices [lo, hi) of a stack, in parallel, scratch per
    thread (one row of each scratch array)."""
    for b in prange(lo, hi):
        k = numba.get_thread_id()
        counts[b] = _wind_whole(out[b], sizes[b], wraps[b], stack[b], bits, words, us, half,
                                hslot, unit_h, shape, periodic, wax, row_ptr[k], rs[k],
                                re[k], lab[k], disp[k], flag[k])


# --- one lattice split over threads ------------------------------------------------------
# As components._components_windows: every call does window s (w rows) of each of the T
# row chunks; the run scan counts, then writes at the prefix sums; the unions inside a
# chunk touch only its own runs, so chunks join in parallel (windings included: a
# chunk's unions read and write only its runs' parents and displacements), every
# window of them before the unions across chunk seams, which run in order.


@njit(cache=True, nogil=True, parallel=True)
def _par_count(open_, bits, words, us, L, row_cnt, T, s, w):
    """:func:`_count_rows` of window ``s`` of each row chunk, in parallel."""
    nrow = row_cnt.shape[0]
    for tt in prange(T):
        _, _, a, b = _window(nrow, T, np.int64(tt), s, w)
        _count_rows(open_, bits, words, us, L, a, b, row_cnt)


@njit(cache=True, nogil=True, parallel=True)
def _par_write(open_, bits, words, us, L, row_ptr, rs, re, out, parent, disp, flag, P, T,
               s, w):
    """:func:`_write_rows` of window ``s`` of each row chunk, in parallel (a chunk's
    first slot past its runs belongs to the next chunk: never spilled into)."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        _, hi, a, b = _window(nrow, T, np.int64(tt), s, w)
        _write_rows(open_, bits, words, us, L, a, b, row_ptr, row_ptr[hi], rs, re, out,
                    parent, disp, flag, P)


@njit(cache=True, nogil=True, parallel=True)
def _par_inside(parent, disp, flag, rs, re, row_ptr, bits, words, hslot, unit_h, half,
                shape, periodic, wax, T, s, w):
    """:func:`_wind_rows` inside the row chunks (targets in the same chunk), window ``s``
    of each, in parallel; every window of it before :func:`_par_cross`."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        lo, hi, a, b = _window(nrow, T, np.int64(tt), s, w)
        _wind_rows(parent, disp, flag, rs, re, row_ptr, a, b, lo, hi, _NO, bits, words,
                   hslot, unit_h, half, shape, periodic, wax)


@njit(cache=True, nogil=True)
def _par_cross(parent, disp, flag, rs, re, row_ptr, bits, words, hslot, unit_h, half,
               shape, periodic, wax, T, s, w):
    """:func:`_wind_rows` across the chunk seams (targets in other chunks), window ``s``
    of each chunk, in order."""
    nrow = row_ptr.shape[0] - 1
    for t in range(T):
        lo, hi, a, b = _window(nrow, T, np.int64(t), s, w)
        _wind_rows(parent, disp, flag, rs, re, row_ptr, a, b, lo, hi, _YES, bits, words,
                   hslot, unit_h, half, shape, periodic, wax)


@njit(cache=True, nogil=True, parallel=True)
def _par_labels(out, open_, bits, words, us, L, row_ptr, lab, T, s, w):
    """:func:`_label_rows` of window ``s`` of each row chunk, in parallel."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        _, _, a, b = _window(nrow, T, np.int64(tt), s, w)
        _label_rows(out, open_, bits, words, us, L, a, b, row_ptr, lab)


def _wind_windows(labels, open_, bits, words, us, half, hslot, unit_h, shape, periodic,
                  wax, n, L, T):
    """:func:`_wind_whole` over T row chunks in calls of about ``_budget._BUDGET`` units
    (see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`). Returns
    ``(count, sizes, wraps)`` (``sizes`` and ``wraps`` indexed by label, from 0)."""
    P = wax.shape[0]
    nrow = n // L
    budget = max(1, _budget._BUDGET)
    chunk_rows = -(-nrow // T)
    w = max(1, budget // (T * L))
    wins = range(-(-chunk_rows // w))
    row_cnt = np.empty(nrow, dtype=np.int64)
    for s in wins:
        _par_count(open_, bits, words, us, L, row_cnt, T, s, w)
    row_ptr = np.zeros(nrow + 1, dtype=np.int64)
    np.cumsum(row_cnt, out=row_ptr[1:])
    R = int(row_ptr[-1])
    rs = np.empty(R + 1, dtype=np.int32)
    re = np.empty(R + 1, dtype=np.int32)
    lab = np.empty(R + 1, dtype=np.int32)
    parent = lab[1:]
    disp = np.empty(R * _LANES if P else 0, dtype=np.int32)
    flag = np.empty(R if P else 0, dtype=np.uint8)
    for s in wins:
        _par_write(open_, bits, words, us, L, row_ptr, rs, re, labels, parent, disp, flag,
                   P, T, s, w)
    # a row's unions cost about 4 units per site and half-stencil offset
    wu = max(1, budget // (T * L * 4 * max(half.shape[0], 1)))
    uwins = range(-(-chunk_rows // wu))
    for s in uwins:
        _par_inside(parent, disp, flag, rs, re, row_ptr, bits, words, hslot, unit_h, half,
                    shape, periodic, wax, T, s, wu)
    if T > 1:
        for s in uwins:
            _par_cross(parent, disp, flag, rs, re, row_ptr, bits, words, hslot, unit_h,
                       half, shape, periodic, wax, T, s, wu)
    sizes = np.empty(R + 1, dtype=np.int64)
    wraps = np.empty(R + 1, dtype=np.uint8)
    count = 0
    for lo in range(0, R, budget):
        count = _relabel_runs(parent, flag, sizes, wraps, rs, re, lo, min(R, lo + budget),
                              count, P)
    if R == 0:
        sizes[0] = 0
        wraps[0] = 0
    lab[0] = 0
    for s in wins:
        _par_labels(labels, open_, bits, words, us, L, row_ptr, lab, T, s, w)
    return int(count), sizes, wraps


@functools.lru_cache(maxsize=256)
def _tables(key: bytes, slot_key: bytes, d: int):
    """``(half, hslot, unit_h)`` for an offsets table: the backward half stencil, per
    half row the forward bond plane of its negation (0 where the stencil lacks it: only
    asymmetric stencils without bonds), and the row of the unit last-axis step (-1:
    none). Read-only, cached per table."""
    offsets = np.frombuffer(key, dtype=np.int64).reshape(-1, d)
    slot = np.frombuffer(slot_key, dtype=np.int64)
    half, _ = _stencil_halves(key, d)
    rows = {tuple(r): k for k, r in enumerate(offsets.tolist())}
    hslot = np.zeros(half.shape[0], dtype=np.int64)
    unit_h = -1
    for h, r in enumerate(half.tolist()):
        k = rows.get(tuple(-x for x in r))
        if k is not None and slot.shape[0]:
            hslot[h] = slot[k]
        if r == [0] * (d - 1) + [-1]:
            unit_h = h
    hslot.setflags(write=False)
    return half, hslot, unit_h


def _prepare(shape, offsets, bond_slot, bits, axes):
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    slot = np.ascontiguousarray(bond_slot, dtype=np.int64).reshape(-1)
    half, hslot, unit_h = _tables(offsets.tobytes(), slot.tobytes(), d)
    us = int(hslot[unit_h]) if unit_h >= 0 else -1
    if unit_h < 0 and shape.shape[0] and shape[-1] == 1:
        us = -1  # one site per row: runs are sites, no unit bond to read
    bits = _frozen(np.ascontiguousarray(bits, dtype=np.uint32).reshape(-1))
    wax = np.array([int(a) for a in axes], dtype=np.int64)
    if wax.shape[0] > _LANES:
        raise ValueError(f"at most {_LANES} axes can be tracked for wrapping, got {len(wax)}")
    return shape, d, half, hslot, unit_h, us, bits, wax


def _bound(n, L, us, bits) -> int:
    """Runs a lattice can hold, plus one: one per two sites of a row when open neighbours
    along the last axis always join (the unit step, no bonds), else one per site."""
    if us >= 0 and bits.shape[0] == 0:
        return n // L * ((L + 1) // 2) + 1
    return n + 1


def _scratch(T, m, nrow, P):
    """Per-thread scratch rows of :func:`_wind_whole` for ``m - 1`` runs at most:
    ``(row_ptr, rs, re, lab, disp, flag)``."""
    return (np.empty((T, nrow + 1), dtype=np.int64), np.empty((T, m), dtype=np.int32),
            np.empty((T, m), dtype=np.int32), np.empty((T, m + 1), dtype=np.int32),
            np.empty((T, m * _LANES if P else 0), dtype=np.int32),
            np.empty((T, m if P else 0), dtype=np.uint8))


def label_windings(shape, periodic, offsets, open_, bond_slot, bits, words, axes=()):
    """Label the connected components of the open sites joined by open bonds, and find
    the clusters that wrap the periodic ``axes``.

    Parameters
    ----------
    shape, periodic, offsets, open_
        The lattice, as in :func:`catalytic.kernels.cpu.components.connected_components`
        (a symmetric stencil when there are bonds).
    bond_slot, bits, words
        The bonds, as ``Geometry.bond_args()`` gives them (``bits`` of length 0: every
        bond open).
    axes : sequence of int, optional
        Periodic axes (at most 4) whose wrapping clusters are wanted; empty: labels only.

    Returns
    -------
    labels : ndarray of int32, (n,)
        0 on blocked sites; components 1..count in the order of their lowest flat index,
        the labels of ``connected_components`` on the graph without the closed bonds.
    count : int
    sizes : ndarray of int64, (count,)
    wraps : ndarray of uint8, (count + 1,)
        Bit q of ``wraps[c]`` set when cluster c wraps ``axes[q]`` (a cycle of non-zero
        winding along it); entry 0 (blocked sites) is 0.

    Raises
    ------
    ValueError
        More than 4 axes, or a lattice of 2**31 sites or more.

    Notes
    -----
    Union-find (path halving, the larger root linked under the smaller) over runs, each
    element keeping its winding relative to its parent along every tracked axis: a step
    that joins two sets fixes the new root's winding, a step inside one set whose
    windings disagree marks the set as wrapping. Without tracked axes the unions are
    Rem's (see :func:`catalytic.kernels.cpu.components._union`). A bond check costs a
    word of bits per 32 sites of overlap. O(n + R k alpha) time for R runs. A lattice of
    up to ``_WHOLE_WORK`` site-offsets (any size on one thread) whose labelling fits in
    one ``_budget._BUDGET`` is labelled by one serial kernel call, with 21 bytes of
    scratch per possible run (38 with tracked axes; R <= n/2 + 1 without bonds when the
    stencil holds the unit step, else n). A larger one is split as
    :func:`catalytic.kernels.cpu.components.connected_components` splits it: one chunk
    of rows per thread (``numba.get_num_threads()``), runs counted then written and
    joined inside each chunk in parallel, the chunk seams joined in order, 21 (38)
    bytes per run found; every phase in kernel calls of about ``_budget._BUDGET``
    units, so a signal handler (Ctrl-C) runs between two of them (see "Interrupts" in
    :mod:`catalytic.kernels.cpu._budget`).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> slot = np.array([-1, 0])
    >>> bits = np.array([0b1011], np.uint32)   # bond 2 -> 3 closed, 3 -> 0 open
    >>> lab, count, sizes, wraps = label_windings((4,), np.ones(1, np.uint8), off,
    ...                                           np.zeros(0, np.uint8), slot, bits, 1, (0,))
    >>> lab.tolist(), count, wraps.tolist()
    ([1, 1, 1, 1], 1, [0, 0])
    >>> lab, count, sizes, wraps = label_windings((4,), np.ones(1, np.uint8), off,
    ...                                           np.zeros(0, np.uint8), slot,
    ...                                           np.zeros(0, np.uint32), 1, (0,))
    >>> wraps.tolist()
    [0, 1]
    """
    shape, d, half, hslot, unit_h, us, bits, wax = _prepare(shape, offsets, bond_slot, bits,
                                                            axes)
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    n = math.prod(shape.tolist())
    if n > _INT32_LIMIT:
        raise ValueError(f"a lattice of {n} sites is too large for label_windings")
    open_ = np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1)
    if n == 0:
        return (np.zeros(0, np.int32), 0, np.zeros(0, np.int64), np.zeros(1, np.uint8))
    if open_.shape[0] == 0:
        open_ = np.ones(n, dtype=np.uint8)
    open_ = _frozen(open_)
    L = int(shape[-1])
    nrow = n // L
    labels = np.empty(n, dtype=np.int32)
    words = int(words)
    one_call = n * (4 + 4 * half.shape[0]) <= _budget._BUDGET
    T = 1 if one_call and n * half.shape[0] <= _WHOLE_WORK else max(
        1, min(numba.get_num_threads(), nrow))
    if one_call and T == 1:
        m = _bound(n, L, us, bits)
        row_ptr, rs, re, lab, disp, flag = (a[0] for a in _scratch(1, m, nrow, wax.shape[0]))
        sizes = np.empty(m, dtype=np.int64)
        wraps = np.empty(m, dtype=np.uint8)
        count = int(_wind_whole(labels, sizes, wraps, open_, bits, words, us, half, hslot,
                                unit_h, shape, periodic, wax, row_ptr, rs, re, lab, disp,
                                flag))
    else:
        count, sizes, wraps = _wind_windows(labels, open_, bits, words, us, half, hslot,
                                            unit_h, shape, periodic, wax, n, L, T)
    return labels, count, sizes[1:count + 1].copy(), wraps[:count + 1].copy()


def label_windings_batched(shape, periodic, offsets, open_stack, bond_slot, bits, words,
                           axes=()):
    """:func:`label_windings` for a stack of masks over one lattice (its bonds shared),
    the lattices shared out over threads one at a time.

    Parameters
    ----------
    open_stack : ndarray of uint8, (B, n) or (B, 0)
        Row b is lattice b's ``open_``; (B, 0): every site of every lattice open.
    Others as in :func:`label_windings`.

    Returns
    -------
    labels : ndarray of int32, (B, n)
    counts : ndarray of int64, (B,)
    sizes : list of B int64 arrays
    wraps : list of B uint8 arrays (counts[b] + 1 entries)
        Row b of each is :func:`label_windings` of lattice b, bit for bit.

    Notes
    -----
    Scratch per thread; per lattice 4 n bytes of labels, and 9 bytes per possible run
    of sizes and wrap bits until they are cut to the counts. The result does not depend
    on the thread count.

    Examples
    --------
    >>> import numpy as np
    >>> st = np.array([[1, 1, 1, 1], [1, 0, 1, 1]], np.uint8)
    >>> lab, counts, sizes, wraps = label_windings_batched(
    ...     (4,), np.ones(1, np.uint8), np.array([[-1], [1]]), st, np.array([-1, 0]),
    ...     np.zeros(0, np.uint32), 1, (0,))
    >>> counts.tolist(), [w.tolist() for w in wraps]
    ([1, 1], [[0, 1], [0, 0]])
    """
    shape, d, half, hslot, unit_h, us, bits, wax = _prepare(shape, offsets, bond_slot, bits,
                                                            axes)
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    n = math.prod(shape.tolist())
    stack = np.asarray(open_stack)
    if stack.ndim != 2 or stack.shape[1] not in (0, n):
        raise ValueError(f"open_stack must be (B, {n}) or (B, 0), got shape {stack.shape}")
    if n > _INT32_LIMIT:
        raise ValueError(f"a lattice of {n} sites is too large for label_windings_batched")
    B = stack.shape[0]
    labels = np.empty((B, n), dtype=np.int32)
    counts = np.zeros(B, dtype=np.int64)
    if B == 0 or n == 0:
        return (labels, counts, [np.zeros(0, np.int64) for _ in range(B)],
                [np.zeros(1, np.uint8) for _ in range(B)])
    if stack.shape[1] == 0:
        stack = np.ones((B, n), dtype=np.uint8)
    stack = _frozen(np.ascontiguousarray(stack, dtype=np.uint8))
    P = wax.shape[0]
    T = numba.get_num_threads()
    m = _bound(n, int(shape[-1]), us, bits)
    row_ptr, rs, re, lab, disp, flag = _scratch(T, m, n // int(shape[-1]), P)
    sizes = np.empty((B, m), dtype=np.int64)
    wraps = np.empty((B, m), dtype=np.uint8)
    prev = numba.set_parallel_chunksize(1)
    try:
        _wind_batched(labels, sizes, wraps, counts, stack, 0, B, bits, int(words), us, half,
                      hslot, unit_h, shape, periodic, wax, row_ptr, rs, re, lab, disp,
                      flag)
    finally:
        numba.set_parallel_chunksize(prev)
    return (labels, counts, [sizes[b, 1:counts[b] + 1].copy() for b in range(B)],
            [wraps[b, :counts[b] + 1].copy() for b in range(B)])
