"""Labelling by site values: which neighbours a multi-label or continuous-value
labelling joins, and the labelling itself on lattices without bonds.

Two neighbouring sites join when their values are close: equal, or with ``delta`` apart
by at most ``delta``. :func:`value_bonds` writes that as bond bits in the layout of
``Geometry.bond_args()`` (bit ``start & 31`` of word ``s * words + (start >> 5)`` for
forward offset ``s``), ANDed with the lattice's own bonds, so the bond-aware labelling
(:mod:`catalytic.kernels.cpu.winding`) labels values as it labels bonds. Without bonds,
:func:`label_values` labels the values directly (the numba-cpu backend takes equal
values, ``delta`` 0, site by site instead, :mod:`catalytic.kernels.cpu.equal`, except
on long runs of a von Neumann-like stencil), by union-find over runs of close values
along the last axis (the stencil holding the unit step along it).

Values come as *keys* (``catalogue.label_keys``): float64, or the integers mapped in
order onto uint64 so that a difference never overflows; with ``delta`` 0, where only
equality counts, values may also come as their bits (uint32 or uint64: a view of 4- and
8-byte integers, no copy; floats as float64 bits with -0.0 made 0.0). NaN is refused before a key is made. With ``delta`` 0
the kernels get ``delta`` None, a specialisation of its own in which :func:`_close` is
``==`` and the scans over sites vectorise.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu import components as _components
from catalytic.kernels.cpu._budget import _INT32_LIMIT, _NO, _YES, _ZERO, _arange
from catalytic.kernels.cpu._rows import _next_row, _row_coords, _row_target, _window
from catalytic.kernels.cpu.components import (
    _WHOLE_WORK,
    _first_overlap,
    _relabel,
    _stencil_halves,
    _union,
)

__all__ = ["value_bonds", "label_values", "runs_apply"]

#: words (32 sites each, every forward offset) one block of a kernel call writes
_BLOCK_WORDS = 64

#: the average run length (sites) from which the split labelling writes its value runs
#: with a branch per run (:func:`_vrow_write_long`) rather than branch-free
LONG_RUN = 4


@njit(cache=True, nogil=True, inline="always")
def _close(a, b, delta):
    """``a`` and ``b`` at most ``delta`` apart (equal infinities are close); the
    difference taken larger minus smaller, so unsigned keys never wrap. ``delta`` None:
    equal (a specialisation of its own, whose loops the compiler can vectorise)."""
    if delta is None:
        return a == b
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
    keys : ndarray of float64 or unsigned integers, shape (n,)
        Site values as keys (float64, or integers mapped in order onto uint64; with
        ``delta`` 0 any unsigned integer dtype: equality is all that counts).
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
    delta = None if delta == 0 else keys.dtype.type(delta)
    blocks = -(-words // _BLOCK_WORDS)
    # a call does about _BUDGET site steps, so a signal handler runs between calls
    step = max(1, _budget._BUDGET // (_BLOCK_WORDS * 32 * kf))
    for lo in range(0, blocks, step):
        _value_bits(out, keys, delta, offs, shape, periodic, user_bits, np.int64(words),
                    np.int64(lo), np.int64(min(blocks, lo + step)))
    return out


# --- labelling over value runs (lattices without bonds) --------------------------------
# A value run is a maximal stretch of labelled sites along the last axis whose
# consecutive values are close; with the unit last-axis step in the stencil it is
# connected, so union-find over value runs labels the values as
# :mod:`catalytic.kernels.cpu.components` labels a mask over runs. With delta = 0 a run
# holds one value and two runs join on one comparison; otherwise the overlap of the two
# runs is compared site by site until a close pair is found.


@njit(cache=True, nogil=True, inline="always")
def _vrow_count(keys, open_, base, L, delta):
    """Value runs of the row of ``L`` sites from ``base`` (``open_`` the labelled
    bytes). Branch-free; O(L). The rows here index the whole arrays from ``base``:
    a row slice would be an array view of its own, whose loops compile slower."""
    c = 0
    prev = 0
    pk = keys[base]
    for x in range(L):
        o = (np.int64(open_[base + x]) + 255) >> 8
        k = keys[base + x]
        link = prev & np.int64(_close(pk, k, delta))
        c += o & (link ^ 1)
        prev = o
        pk = k
    return c


@njit(cache=True, nogil=True, inline="always")
def _vrow_write(keys, open_, base, L, delta, rs, re, rk, k0, spill):
    """Write the value runs of the row of ``L`` sites from ``base`` (start, exclusive
    end along the last axis, key at the start) from slot ``k0``; with ``spill``
    branch-free, slot ``k0 + count`` receiving scratch (as
    ``components._runs_write_row``). Returns the count."""
    ks = k0
    ke = k0
    prev = np.int64(0)
    pk = keys[base]
    if spill:
        for x in range(L):
            o = (np.int64(open_[base + x]) + 255) >> 8
            k = keys[base + x]
            cut = (o & prev & np.int64(_close(pk, k, delta))) ^ 1
            pk = k
            re[ke] = x
            ke += prev & cut
            rs[ks] = x
            rk[ks] = k
            ks += o & cut
            prev = o
    else:
        for x in range(L):
            o = (np.int64(open_[base + x]) + 255) >> 8
            k = keys[base + x]
            cut = (o & prev & np.int64(_close(pk, k, delta))) ^ 1
            pk = k
            if prev & cut:
                re[ke] = x
                ke += 1
            if o & cut:
                rs[ks] = x
                rk[ks] = k
                ks += 1
            prev = o
    if prev:
        re[ke] = L
    return ks - k0


@njit(cache=True, nogil=True, inline="always")
def _vrow_write_long(keys, open_, base, L, delta, rs, re, rk, k0):
    """:func:`_vrow_write` for rows of long runs: a branch per run end instead of three
    stores per site, which pays when runs average several sites (a mispredicted branch
    costs about as much as the stores of a few sites). Returns the count."""
    ks = k0
    x = 0
    while x < L:
        if open_[base + x] == 0:
            x += 1
            continue
        k = keys[base + x]
        rs[ks] = x
        rk[ks] = k
        x += 1
        while x < L and open_[base + x] != 0 and _close(keys[base + x - 1], keys[base + x],
                                                        delta):
            x += 1
        re[ks] = x
        ks += 1
    return ks - k0


@njit(cache=True, nogil=True, parallel=True)
def _vruns_count(keys, open_, delta, L, row_cnt, T, s, w):
    """``row_cnt[row]``: the value runs of each row of window ``s``; row chunks in
    parallel. O(T w L)."""
    nrow = row_cnt.shape[0]
    for tt in prange(T):
        _, _, a, b = _window(nrow, T, np.int64(tt), s, w)
        for row in range(a, b):
            row_cnt[row] = _vrow_count(keys, open_, row * L, L, delta)


@njit(cache=True, nogil=True, parallel=True)
def _vruns_write(keys, open_, delta, L, row_ptr, rs, re, rk, T, s, w, long_runs):
    """Fill ``rs``/``re`` for the rows of window ``s`` (the scratch slot rule of
    ``components._runs_write``); with ``long_runs`` by :func:`_vrow_write_long`.
    O(T w L)."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        _, hi, a, b = _window(nrow, T, np.int64(tt), s, w)
        for row in range(a, b):
            if long_runs:
                _vrow_write_long(keys, open_, row * L, L, delta, rs, re, rk, row_ptr[row])
            else:
                _vrow_write(keys, open_, row * L, L, delta, rs, re, rk, row_ptr[row],
                            row_ptr[row + 1] < row_ptr[hi])


@njit(cache=True, nogil=True, inline="always")
def _vruns_piece(rp, a, rs, re, rk, b, b1, lo, e, keys, delta, exact, base_a, base_b,
                 cmin, cmax, per_last, L):
    """Join run ``a`` with the runs b, b+1, ... (< b1) that start before ``e`` and face
    it with a close pair of sites; ``[lo, e)`` is the part of the target row that ``a``
    shifted by ``cmin..cmax`` covers. With ``exact`` the runs' keys ``rk`` decide."""
    ra = rs[a]
    ln = re[a] - ra
    ka = rk[a]
    while b < b1 and rs[b] < e:
        if exact:
            if rk[b] == ka:
                _union(rp, a, b)
        else:
            hit = False
            for x in range(max(rs[b], lo), min(re[b], e)):
                kb = keys[base_b + x]
                for c in range(cmin, cmax + 1):
                    off = x - c - ra
                    if per_last:
                        off %= L
                    # a run never crosses the seam, so ra + off stays in the row
                    if off >= 0 and off < ln and _close(keys[base_a + ra + off], kb,
                                                        delta):
                        hit = True
                        break
                if hit:
                    _union(rp, a, b)
                    break
        b += 1


@njit(cache=True, nogil=True)
def _vruns_union_rows(rp, rs, re, rk, row_ptr, keys, delta, exact, row_lo, row_hi,
                      chunk_lo, chunk_hi, cross, goff, gspan, shape, periodic):
    """``components._runs_union_rows`` for value runs: a run joins the runs it overlaps
    along each offset of the half stencil where a pair of facing sites is close
    (``exact``: delta is 0, and the runs' keys ``rk`` decide). The offsets come in
    groups (:func:`_row_groups`): group g reaches the row of ``goff[g]`` with the shifts
    ``goff[g, -1] .. goff[g, -1] + gspan[g]`` along the last axis, so one merge walk
    does them all. O(runs * groups) with ``exact``, else up to O(sites * offsets)."""
    d = shape.shape[0]
    L = shape[d - 1]
    per_last = periodic[d - 1] != 0
    G = goff.shape[0]
    c = np.empty(d - 1, dtype=np.int64)
    # the pairs one walk notes: at most the runs of two rows
    pa = np.empty(2 * L + 2, dtype=np.int64)
    pb = np.empty(2 * L + 2, dtype=np.int64)
    _row_coords(row_lo, shape, c)
    for row in range(row_lo, row_hi):
        if row > row_lo:
            _next_row(c, shape)
        a0 = row_ptr[row]
        a1 = row_ptr[row + 1]
        if a0 == a1:
            continue
        base_a = row * L
        for h in range(G):
            rt = _row_target(c, goff[h], shape, periodic)
            if rt < 0:
                continue
            inside = rt >= chunk_lo and rt < chunk_hi
            if inside == cross:
                continue
            b0 = row_ptr[rt]
            b1 = row_ptr[rt + 1]
            if b0 == b1:
                continue
            base_b = rt * L
            cmin = goff[h, d - 1]
            span = gspan[h]
            cmax = cmin + span
            if rt == row and span == 0 and (cmin == 1 or cmin == -1):
                # the unit step joins runs only across the periodic seam
                if (per_last and rs[a0] == 0 and re[a1 - 1] == L
                        and _close(keys[base_a + L - 1], keys[base_a], delta)):
                    _union(rp, a0, a1 - 1)
                continue
            # shifts along a periodic last axis can wrap a run past the seam, and the
            # shifted starts are then not ascending: binary search for the first
            # overlap, as components._runs_union_rows does
            wrap = per_last and (cmin != 0 or span != 0)
            b = b0
            if exact and not wrap and span == 0:
                # one shift branch-free: a two-pointer walk over both rows' runs
                # (disjoint and ascending) notes the overlapping pairs of equal keys,
                # then they are joined
                a = a0
                m = 0
                while a < a1 and b < b1:
                    ea = re[a] + cmin
                    eb = re[b]
                    pa[m] = a
                    pb[m] = b
                    m += (rs[a] + cmin < eb) & (rs[b] < ea) & (rk[a] == rk[b])
                    a += ea <= eb
                    b += eb <= ea
                for q in range(m):
                    _union(rp, pa[q], pb[q])
                continue
            if exact and not wrap:
                # several shifts: the runs each shifted run covers, on the run keys
                for a in range(a0, a1):
                    s = rs[a] + cmin
                    e = re[a] + cmax
                    while b < b1 and re[b] <= s:
                        b += 1
                    ka = rk[a]
                    bb = b
                    while bb < b1 and rs[bb] < e:
                        if rk[bb] == ka:
                            _union(rp, a, bb)
                        bb += 1
                continue
            for a in range(a0, a1):
                if wrap:
                    ln = re[a] - rs[a] + span
                    if ln >= L:
                        s = 0
                        e = L
                    else:
                        s = (rs[a] + cmin) % L
                        e = s + ln
                    b = _first_overlap(rs, re, b0, b1, s)
                else:
                    s = max(rs[a] + cmin, 0)
                    e = min(re[a] + cmax, L)
                    if s >= e:
                        continue
                    while b < b1 and re[b] <= s:
                        b += 1
                _vruns_piece(rp, a, rs, re, rk, b, b1, s, min(e, L), keys, delta, exact,
                             base_a, base_b, cmin, cmax, per_last, L)
                if e > L:
                    _vruns_piece(rp, a, rs, re, rk, b0, b1, 0, e - L, keys, delta, exact,
                                 base_a, base_b, cmin, cmax, per_last, L)


@njit(cache=True, nogil=True, parallel=True)
def _vruns_union_inside(rp, rs, re, rk, row_ptr, keys, delta, exact, goff, gspan, shape,
                        periodic, T, s, w):
    """Value-run unions inside the row chunks, window ``s`` of each, in parallel (every
    window before :func:`_vruns_union_cross`, as ``components._runs_union_inside``)."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        lo, hi, a, b = _window(nrow, T, np.int64(tt), s, w)
        _vruns_union_rows(rp, rs, re, rk, row_ptr, keys, delta, exact, a, b, lo, hi, _NO,
                          goff, gspan, shape, periodic)


@njit(cache=True, nogil=True)
def _vruns_union_cross(rp, rs, re, rk, row_ptr, keys, delta, exact, goff, gspan, shape,
                       periodic, T, s, w):
    """Value-run unions across chunk boundaries (window ``s`` of each chunk), in order."""
    nrow = row_ptr.shape[0] - 1
    for t in range(T):
        lo, hi, a, b = _window(nrow, T, t, s, w)
        _vruns_union_rows(rp, rs, re, rk, row_ptr, keys, delta, exact, a, b, lo, hi, _YES,
                          goff, gspan, shape, periodic)


@njit(cache=True, nogil=True, inline="always")
def _vrow_label(out, keys, open_, base, L, delta, lab, a):
    """Labels of the row of ``L`` sites from ``base`` whose first run is ``a``
    (``lab[a + 1]`` is run a's label): a running count of run starts picks the run, the
    labelled bit zeroes the gaps. Branch-free; O(L)."""
    prev = np.int64(0)
    pk = keys[base]
    for x in range(L):
        o = (np.int64(open_[base + x]) + 255) >> 8
        k = keys[base + x]
        a += o & ((prev & np.int64(_close(pk, k, delta))) ^ 1)
        pk = k
        prev = o
        out[base + x] = lab[a] * o


@njit(cache=True, nogil=True, parallel=True)
def _vruns_label(out, keys, open_, delta, lab, row_ptr, L, T, s, w):
    """Labels of the rows of window ``s``; parallel over row chunks. O(T w L)."""
    nrow = row_ptr.shape[0] - 1
    for tt in prange(T):
        _, _, a, b = _window(nrow, T, np.int64(tt), s, w)
        for row in range(a, b):
            if row_ptr[row + 1] == row_ptr[row]:
                out[row * L:(row + 1) * L] = 0
            else:
                _vrow_label(out, keys, open_, row * L, L, delta, lab, row_ptr[row])


@njit(cache=True, nogil=True)
def _vruns_whole(out, sizes, keys, open_, delta, exact, row_ptr, rs, re, rk, lab, goff,
                 gspan, shape, periodic):
    """Every phase of the value-run labelling in one serial call (as
    ``components._runs_whole``): the same scans and unions as the windowed kernels with
    one chunk, so the same labels. ``rs``/``re`` hold at least one slot more than the
    runs, ``lab`` one more than ``rs``, ``sizes`` at least runs + 1 entries. Returns
    the count. O(n + R k alpha) with ``exact``."""
    nrow = row_ptr.shape[0] - 1
    L = shape[shape.shape[0] - 1]
    row_ptr[0] = 0
    for row in range(nrow):
        row_ptr[row + 1] = row_ptr[row] + _vrow_write(keys, open_, row * L, L, delta, rs,
                                                      re, rk, row_ptr[row], True)
    n_runs = row_ptr[nrow]
    lab[0] = -1
    for a in range(n_runs):
        lab[a + 1] = a
    rp = lab[1:n_runs + 1]
    _vruns_union_rows(rp, rs, re, rk, row_ptr, keys, delta, exact, _ZERO, nrow, _ZERO, nrow,
                      _NO, goff, gspan, shape, periodic)
    count = _relabel(rp, 0, n_runs, 0)
    lab[0] = 0
    for row in range(nrow):
        if row_ptr[row + 1] == row_ptr[row]:
            out[row * L:(row + 1) * L] = 0
        else:
            _vrow_label(out, keys, open_, row * L, L, delta, lab, row_ptr[row])
    sizes[:count + 1] = 0
    for a in range(n_runs):
        sizes[lab[a + 1]] += re[a] - rs[a]
    return count


@functools.lru_cache(maxsize=256)
def _row_groups(key: bytes, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(goff, gspan)`` for the offsets table with raw bytes ``key``: the half stencil
    (``components._stencil_halves``) grouped by the row it reaches, each group a
    maximal range of consecutive shifts along the last axis: ``goff[g]`` the offset of
    the smallest shift, ``gspan[g]`` the shifts past it. Offsets within one row stay
    alone (the unit step is the periodic seam's). Cached, read-only."""
    half = _stencil_halves(key, d)[0]
    rows = {}
    for o in half.tolist():
        rows.setdefault(tuple(o[:-1]), []).append(o[-1])
    goff, gspan = [], []
    for r, shifts in rows.items():
        shifts = sorted(shifts)
        lo = 0
        for i in range(1, len(shifts) + 1):
            if i == len(shifts) or shifts[i] != shifts[i - 1] + 1 or not any(r):
                goff.append(list(r) + [shifts[lo]])
                gspan.append(shifts[i - 1] - shifts[lo])
                lo = i
    goff = np.array(goff, dtype=np.int64).reshape(-1, d)
    gspan = np.array(gspan, dtype=np.int64)
    goff.setflags(write=False)
    gspan.setflags(write=False)
    return goff, gspan


def runs_apply(offsets, d) -> bool:
    """Whether :func:`label_values` applies to a stencil: it holds the unit step along
    the last axis (then a value run is connected). Returns a bool."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    return bool(_stencil_halves(offsets.tobytes(), d)[1])


def label_values(shape, periodic, offsets, keys, open_, delta):
    """Label the clusters of close values of a lattice without bonds.

    Parameters
    ----------
    shape, periodic, offsets
        The lattice, as in :func:`catalytic.kernels.cpu.components.connected_components`;
        the stencil holds the unit step along the last axis (:func:`runs_apply`).
    keys : ndarray of float64 or unsigned integers, shape (n,)
        Site values as keys (``catalogue.label_keys``), as in :func:`value_bonds`.
    open_ : ndarray of uint8, shape (n,)
        The labelled sites (open and not background): non-zero.
    delta : float or int
        As in :func:`value_bonds`.

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (n,)
        0 off the labelled sites; clusters 1..count in the order of their lowest flat
        index: the labels of ``winding.label_windings`` on the bits of
        :func:`value_bonds`.
    count : int
    sizes : ndarray of int64, (count,)

    Raises
    ------
    ValueError
        A stencil without the unit last-axis step.

    Notes
    -----
    Union-find over value runs (maximal stretches of labelled sites along the last axis
    whose neighbours are close), split over threads and kernel calls as
    ``components.connected_components`` splits its runs: one chunk of rows per thread,
    runs counted then written and joined inside each chunk in parallel, the chunk seams
    joined in order, every phase in kernel calls of about ``_budget._BUDGET`` sites
    (see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`); one serial call when
    the whole labelling fits in one budget and is small (``components._WHOLE_WORK``) or
    runs on one thread. With ``delta`` 0 two overlapping runs join on one comparison:
    O(n + R k alpha) for R runs; otherwise their facing sites are compared until a
    close pair: up to O(n k). About 20 bytes per run (R <= n) besides the labels.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> keys = np.array([1.0, 1.0, 2.0, 1.0, 3.0, 2.0])
    >>> labels, count, sizes = label_values((2, 3), np.zeros(2, np.uint8), off, keys,
    ...                                     np.ones(6, np.uint8), 0.0)
    >>> labels.tolist(), count, sizes.tolist()
    ([1, 1, 2, 1, 3, 2], 3, [3, 2, 1])
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    half, unit = _stencil_halves(offsets.tobytes(), d)
    goff, gspan = _row_groups(offsets.tobytes(), d)
    n = math.prod(shape.tolist())
    ltype = np.int32 if n <= _INT32_LIMIT else np.int64
    if n == 0:
        return np.empty(0, dtype=ltype), 0, np.zeros(0, dtype=np.int64)
    L = int(shape[-1])
    if not (unit or L == 1):
        raise ValueError("label_values needs a stencil with the unit step along the last "
                         "axis")
    exact = np.bool_(delta == 0)
    delta = None if exact else keys.dtype.type(delta)
    nrow = n // L
    T = max(1, min(numba.get_num_threads(), nrow))
    if ((T == 1 or n * half.shape[0] <= _WHOLE_WORK)
            and n * (4 + 4 * half.shape[0]) <= _budget._BUDGET):
        labels = np.empty(n, dtype=np.int32)
        size_of = np.empty(n + 1, dtype=np.int64)
        count = int(_vruns_whole(labels, size_of, keys, open_, delta, exact,
                                 np.empty(nrow + 1, dtype=np.int64),
                                 np.empty(n + 1, dtype=np.int32),
                                 np.empty(n + 1, dtype=np.int32),
                                 np.empty(n + 1, dtype=keys.dtype),
                                 np.empty(n + 2, dtype=np.int32), goff, gspan, shape,
                                 periodic))
        return labels, count, size_of[1:count + 1].copy()
    # each kernel call does window s (w rows) of each of the T row chunks
    w = max(1, _budget._BUDGET // (T * L))
    chunk_rows = -(-nrow // T)
    wins = range(-(-chunk_rows // w))
    row_cnt = np.empty(nrow, dtype=np.int64)
    for s in wins:
        _vruns_count(keys, open_, delta, L, row_cnt, T, s, w)
    row_ptr = np.zeros(nrow + 1, dtype=np.int64)
    np.cumsum(row_cnt, out=row_ptr[1:])
    n_runs = int(row_ptr[-1])
    xtype = np.int32 if L <= _INT32_LIMIT else np.int64
    rs = np.empty(n_runs + 1, dtype=xtype)
    re = np.empty(n_runs + 1, dtype=xtype)
    rk = np.empty(n_runs + 1, dtype=keys.dtype)
    # runs of LONG_RUN sites or more on average: one branch per run beats the
    # branch-free scan's stores per site
    long_runs = np.bool_(n_runs * LONG_RUN <= n)
    for s in wins:
        _vruns_write(keys, open_, delta, L, row_ptr, rs, re, rk, T, s, w, long_runs)
    # lab[0] = 0 ahead of the run forest rp = lab[1:], so lab[a + 1] labels run a
    lab = _arange(-1, n_runs, np.int32 if n_runs < _INT32_LIMIT else np.int64)
    rp = lab[1:]
    for s in wins:
        _vruns_union_inside(rp, rs, re, rk, row_ptr, keys, delta, exact, goff, gspan, shape,
                            periodic, T, s, w)
    if T > 1:
        for s in wins:
            _vruns_union_cross(rp, rs, re, rk, row_ptr, keys, delta, exact, goff, gspan,
                               shape, periodic, T, s, w)
    count = _components._relabel_all(rp)
    lab[0] = 0
    labels = np.empty(n, dtype=ltype)
    lab = lab.astype(ltype, copy=False)
    for s in wins:
        _vruns_label(labels, keys, open_, delta, lab, row_ptr, L, T, s, w)
    sizes = np.zeros(count + 1, dtype=np.int64)
    step = max(_budget._BUDGET, 1)
    for a in range(0, n_runs, step):
        _components._run_sizes(sizes, lab, rs, re, a, min(n_runs, a + step))
    return labels, count, sizes[1:]
