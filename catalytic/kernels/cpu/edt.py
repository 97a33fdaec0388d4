"""The exact Euclidean distance transform: one pass per axis of lower envelopes of
parabolas (Felzenszwalb and Huttenlocher, "Distance transforms of sampled functions",
Theory of Computing 8, 2012).

A pass along axis ``a`` replaces the squared distance ``f`` of every site ``q`` of a line
by ``min_p f(p) + w (q - p)^2`` over the sites ``p`` of its line, ``w`` the axis' spacing
squared: the lower envelope of one parabola per site, built left to right and read left
to right, O(n) a line. The passes run from the last axis to the first, starting from 0
at the features and inf elsewhere; after the last one ``f`` is the squared distance to
the nearest feature, exact for integer spacings (every value and comparison is then an
integer below 2**53) and within rounding otherwise.

Labels (a value array): a site's features are the sites of another value, and the sites
marked ``zero`` (background, blocked). A line falls into segments: maximal runs of
unmarked sites of one value. The neighbours just outside a segment are its nearest
features along the line (0 there), and every site beyond one is farther than it, so each
segment is an envelope of its own sites and its two ends (Zlateski's ``edt`` package does
the same). A site marked ``zero`` is its own nearest feature. With one value everywhere
this is the transform of the marked sites.

Periodic axes: a line with a segment end somewhere is read from one, round the ring; a
line without one (every site of one value, none marked) is an envelope over its sites
repeated at ``p - n`` and ``p + n``, read on ``[0, n)``.

Dense features: the first pass (along rows) is in closed form (the nearer end of each
segment; on an open axis without values two sweeps a row, :func:`_open_rows`), and a
later line without values whose f is on average at most :data:`NEAR` spacings squared
is done without an envelope, each site looking outward a step each way until the step
passes its best (:func:`_around`, the cuda twin's way). A tile of such lines whose f is
nowhere above :data:`REACH` squared spacings squared does the same a row of the tile at
a time (:func:`_tile_rows`): contiguous loops over the tile's lines, and no transpose.

Ties: a query keeps the parabola it holds unless the next one is strictly lower, so of
two features at the same distance along a line the one at the lower (unwrapped)
coordinate wins; over the passes (last axis first), the nearest feature is the one whose
displacement from the site is the smallest in C order, a periodic component taken the
short way round (at exactly half the axis, the negative way). Exact for integer
spacings, like the distances.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _frozen

__all__ = ["transform"]


@njit(cache=True, nogil=True, inline="always")
def _wrap(x, n):
    """``x % n`` for ``-n <= x < 2 n``, without a division."""
    return x - n if x >= n else (x + n if x < 0 else x)


@njit(cache=True, nogil=True, inline="always")
def _add(k, u, fu, iu, w, v, vf, vi, z):
    """Put the parabola of vertex ``u`` and height ``fu`` (feature ``iu``) on the
    envelope ``v, vf, vi, z`` of ``k + 1`` parabolas (``z[j]``: where parabola j starts
    being the lowest); returns the new last index."""
    while k >= 0:
        s = ((fu + w * u * u) - (vf[k] + w * v[k] * v[k])) / (2.0 * w * (u - v[k]))
        if s <= z[k]:
            k -= 1
        else:
            k += 1
            v[k] = u
            vf[k] = fu
            vi[k] = iu
            z[k] = s
            return k
    v[0] = u
    vf[0] = fu
    vi[0] = iu
    z[0] = -np.inf
    return 0


@njit(cache=True, nogil=True, inline="always")
def _read(k, q, w, j, v, vf):
    """The envelope's parabola lowest at ``q`` (>= the last one read, ``j``): the next
    one only when strictly lower."""
    while j < k:
        a = q - v[j]
        b = q - v[j + 1]
        if w * b * b + vf[j + 1] < w * a * a + vf[j]:
            j += 1
        else:
            break
    return j


@njit(cache=True, nogil=True, inline="always")
def _span(lf, li, track, n, w, u0, u1, q0, q1, left, right, v, vf, vi, z):
    """The envelope of the sites at unwrapped positions [u0, u1) of a line of ``n``
    (``lf``, ``li``: f and nearest feature, at the position modulo n), with a feature
    (f 0) at ``u0 - 1`` if ``left`` (its flat index) is not -1 and at ``u1`` if
    ``right`` is not; read at [q0, q1) into the same arrays (every site is read before
    one is written)."""
    k = -1
    if left >= 0:
        k = _add(k, np.float64(u0 - 1), 0.0, left, w, v, vf, vi, z)
    for u in range(u0, u1):
        p = _wrap(u, n)
        if lf[p] != np.inf:
            k = _add(k, np.float64(u), lf[p], li[p] if track else 0, w, v, vf, vi, z)
    if right >= 0:
        k = _add(k, np.float64(u1), 0.0, right, w, v, vf, vi, z)
    j = 0
    for u in range(q0, q1):
        p = _wrap(u, n)
        if k < 0:
            lf[p] = np.inf
            if track:
                li[p] = -1
            continue
        q = np.float64(u)
        j = _read(k, q, w, j, v, vf)
        a = q - v[j]
        lf[p] = w * a * a + vf[j]
        if track:
            li[p] = vi[j]


#: a line without values whose f is finite and on average at most NEAR spacings squared
#: is done by looking outward from each site (no envelope): a site looks at most
#: sqrt(f / w) steps each way, so the line at most about sqrt(NEAR) n in all
NEAR = 64


@njit(cache=True, nogil=True, inline="always")
def _around(lf, li, track, n, w, periodic, of, oi):
    """Each site's least ``f + w d^2`` over the sites ``d`` steps away, looked at outward
    while ``w d^2`` is at most the best so far (``lf`` finite; read into ``of``,
    ``oi``). The same tie rule as the envelope: a candidate below the site replaces an
    equal best (its displacement is the lower), one above does not."""
    down = n // 2 if periodic else n - 1  # the most steps below (above: n - n//2 - 1)
    up = n - n // 2 - 1 if periodic else n - 1
    for q in range(n):
        best = lf[q]
        at = li[q] if track else 0
        r = 1
        while w * r * r <= best and (r <= down or r <= up):
            step = w * r * r
            if r <= down and (periodic or q - r >= 0):
                p = _wrap(q - r, n)
                if lf[p] + step <= best:
                    best = lf[p] + step
                    if track:
                        at = li[p]
            if r <= up and (periodic or q + r < n):
                p = _wrap(q + r, n)
                if lf[p] + step < best:
                    best = lf[p] + step
                    if track:
                        at = li[p]
            r += 1
        of[q] = best
        if track:
            oi[q] = at


@njit(cache=True, nogil=True, inline="always")
def _line(lf, li, lk, lz, n, periodic, by_value, track, w, base, stride, v, vf, vi, z, of,
          oi):
    """One line of ``n`` sites (flat index ``base + p stride``) gathered in ``lf`` (f),
    ``li`` (nearest feature so far), ``lk`` (keys) and ``lz`` (marked), both read
    ``by_value`` only (without values a marked site's f is 0 already, and the line is one
    envelope, or with dense features no envelope: :func:`_around`, into the scratch
    ``of``, ``oi`` of n): the new f and features in place."""
    # the line is read from p0: 0 on an open axis, round a ring from a segment's start (a
    # marked site, or a site after a marked one or one of another value). A line without
    # a segment end (no values; one value round a ring and no mark) is one span, on a
    # ring every site at p - n, p, p + n read on [0, n). One call of _span: its code is
    # inlined once.
    if not by_value:
        total = 0.0
        for p in range(n):
            total += lf[p]  # inf where a site has no feature yet
        if total <= NEAR * w * n:
            _around(lf, li, track, n, w, periodic, of, oi)
            for p in range(n):
                lf[p] = of[p]
                if track:
                    li[p] = oi[p]
            return
    p0 = 0
    whole = not by_value
    if by_value and periodic:
        p0 = -1
        for p in range(n):
            prev = p - 1 if p > 0 else n - 1
            if lz[p] != 0 or lz[prev] != 0 or lk[p] != lk[prev]:
                p0 = p
                break
        whole = p0 < 0
    t = 0
    while t < n:
        if whole:
            u0, u1 = (-(n // 2), 2 * n - n // 2) if periodic else (0, n)
            q0, q1, left, right, e = 0, n, -1, -1, n
        else:
            p = _wrap(p0 + t, n)
            if lz[p] != 0:
                lf[p] = 0.0
                if track:
                    li[p] = base + p * stride
                t += 1
                continue
            # the segment of unwrapped positions [p0 + t, p0 + e): its ends are features
            e = t + 1
            while e < n:
                r = _wrap(p0 + e, n)
                if lz[r] != 0 or lk[r] != lk[p]:
                    break
                e += 1
            u0 = q0 = p0 + t
            u1 = q1 = p0 + e
            left = base + _wrap(p0 + t - 1, n) * stride if periodic or p0 + t > 0 else -1
            right = base + _wrap(p0 + e, n) * stride if periodic or p0 + e < n else -1
        _span(lf, li, track, n, w, u0, u1, q0, q1, left, right, v, vf, vi, z)
        t = e


#: "no feature on this side" in :func:`_open_rows`: farther than any row is long
_NONE = 1 << 40


@njit(cache=True, nogil=True, inline="always")
def _open_rows(f, fi, zero, L, w, track, a0, a1):
    """Rows [a0, a1) of an open axis without values, in two sweeps a row: the last
    feature at or before each site, then the next one at or after it, the nearer taken
    (the left one on a tie, as the segment rule of :func:`_rows` takes it)."""
    for row in range(a0, a1):
        base = row * L
        last = -_NONE
        for p in range(L):  # f holds the steps back to the last feature for now
            last = p if zero[base + p] != 0 else last
            f[base + p] = p - last  # exact below 2**24 (float32); else past _NONE / 2
        nxt = _NONE
        for p in range(L - 1, -1, -1):
            nxt = p if zero[base + p] != 0 else nxt
            a = f[base + p]
            b = np.float64(nxt - p)
            # selects, not branches: which end is nearer is a coin toss on noisy images
            m = a if a <= b else b
            f[base + p] = w * m * m if m < _NONE // 2 else np.inf
            if track:
                j = p - np.int64(a) if a <= b else nxt
                fi[base + p] = base + j if m < _NONE // 2 else -1


@njit(cache=True, nogil=True, parallel=True)
def _rows(f, fi, keys, zero, L, periodic, w, by_value, track, r0, r1, T):
    """The first pass, along the last axis (rows of ``L`` sites), rows [r0, r1) in ``T``
    chunks: with only the marked sites at 0, a site's envelope is the two ends of its
    segment, so f is the squared distance to the nearer end (the lower one on a tie)."""
    for t in prange(T):
        a0 = r0 + (r1 - r0) * t // T
        a1 = r0 + (r1 - r0) * (t + 1) // T
        if not periodic and not by_value:
            _open_rows(f, fi, zero, L, w, track, a0, a1)
            continue
        for row in range(a0, a1):
            base = row * L
            # read from p0: 0, or round a ring from a segment's start
            p0 = 0
            if periodic:
                p0 = -1
                for p in range(L):
                    prev = base + (p - 1 if p > 0 else L - 1)
                    i = base + p
                    if zero[i] != 0 or zero[prev] != 0 or by_value and keys[i] != keys[prev]:
                        p0 = p
                        break
                if p0 < 0:  # one segment round the whole ring: no feature on it
                    for p in range(L):
                        f[base + p] = np.inf
                        if track:
                            fi[base + p] = -1
                    continue
            t0 = 0
            while t0 < L:
                i = base + _wrap(p0 + t0, L)
                if zero[i] != 0:
                    f[i] = 0.0
                    if track:
                        fi[i] = i
                    t0 += 1
                    continue
                e = t0 + 1
                while e < L:
                    r = base + _wrap(p0 + e, L)
                    if zero[r] != 0 or by_value and keys[r] != keys[i]:
                        break
                    e += 1
                lo = periodic or p0 + t0 > 0
                hi = periodic or p0 + e < L
                left = base + _wrap(p0 + t0 - 1, L)
                right = base + _wrap(p0 + e, L)
                for s in range(t0, e):
                    r = base + _wrap(p0 + s, L)
                    a = s - t0 + 1  # steps to the left end
                    b = e - s  # to the right end
                    if lo and (not hi or a <= b):
                        f[r] = w * a * a
                        if track:
                            fi[r] = left
                    elif hi:
                        f[r] = w * b * b
                        if track:
                            fi[r] = right
                    else:
                        f[r] = np.inf
                        if track:
                            fi[r] = -1
                t0 = e


#: columns gathered at once in a pass along an axis other than the last, with values
#: and without: a cache line of float32 (of float64 too without values) each time a
#: tile reads or writes a line position; more with values slowed the 4-label
#: benchmark, whose tiles are transposed into lines (keys and marks too)
TILE_VALUES = 16
TILE = 32
#: a tile of lines without values, each line dense (see :data:`NEAR`), whose largest f
#: is at most REACH**2 spacings squared, is done row by row (:func:`_tile_rows`): no
#: site then looks more than REACH steps each way
REACH = 32


@njit(cache=True, nogil=True, inline="always")
def _tile_rows(f, fi, sf, si, track, n, stride, B, first, periodic, w, root, best, at, out):
    """The lines of a tile (``B`` neighbouring lines, gathered row by row in ``sf``,
    ``si``: position p of line c at ``[p, c]``) done as :func:`_around` does each, but a
    row of the tile at a time, every line of it in step (contiguous, so the loops
    vectorise), written straight into ``f`` and ``fi`` (square roots with ``root``, of
    the value rounded to f's type, as the per-line pass takes them). A row looks out
    until the step passes the largest best of the row: a line that stopped earlier in
    :func:`_around` meets only candidates above its best then, and keeps it."""
    down = n // 2 if periodic else n - 1
    up = n - n // 2 - 1 if periodic else n - 1
    for q in range(n):
        more = 0  # whether some line's best is at least the next step (an OR: it vectorises)
        for c in range(B):
            best[c] = sf[q, c]
            more |= best[c] >= w
        if track:
            for c in range(B):
                at[c] = si[q, c]
        lo_lim = down if periodic else q
        up_lim = up if periodic else n - 1 - q
        r = 1
        while more and (r <= lo_lim or r <= up_lim):
            step = w * r * r
            # below, an equal candidate wins (the lower displacement); above, only a
            # strictly lower one. Loops without a branch in them, so that they vectorise
            if r <= lo_lim and track:
                p = _wrap(q - r, n)
                for c in range(B):
                    x = sf[p, c] + step
                    take = x <= best[c]
                    best[c] = x if take else best[c]
                    at[c] = si[p, c] if take else at[c]
            elif r <= lo_lim:
                p = _wrap(q - r, n)
                for c in range(B):
                    x = sf[p, c] + step
                    best[c] = x if x <= best[c] else best[c]
            if r <= up_lim and track:
                p = _wrap(q + r, n)
                for c in range(B):
                    x = sf[p, c] + step
                    take = x < best[c]
                    best[c] = x if take else best[c]
                    at[c] = si[p, c] if take else at[c]
            elif r <= up_lim:
                p = _wrap(q + r, n)
                for c in range(B):
                    x = sf[p, c] + step
                    best[c] = x if x < best[c] else best[c]
            r += 1
            more = 0
            reach = w * r * r
            for c in range(B):
                more |= best[c] >= reach
        s = first + q * stride
        for c in range(B):
            out[c] = best[c]  # rounded to f's type
        if root:
            for c in range(B):
                f[s + c] = np.sqrt(out[c])
        else:
            for c in range(B):
                f[s + c] = out[c]
        if track:
            for c in range(B):
                fi[s + c] = at[c]


@njit(cache=True, nogil=True, parallel=True)
def _columns(f, fi, keys, zero, n, stride, periodic, w, by_value, track, root, l0, l1, T,
             tw):
    """A pass along an axis of ``n`` sites and stride ``stride`` (> 1): tiles
    [l0, l1) of ``tw`` neighbouring lines (tile ``l``: outer ``l // tiles``, the
    lines from inner ``(l % tiles) tw``, ``tiles`` the tiles of one outer index), in
    ``T`` chunks, ``f`` and ``fi`` updated in place (with ``root``, the last pass, f's
    square root: one pass over the result less). A tile without values is gathered row
    by row; if its lines are dense and near (:data:`REACH`) it is done row by row
    (:func:`_tile_rows`), else each line in turn (:func:`_line`)."""
    tiles = (stride + tw - 1) // tw
    for t in prange(T):
        a0 = l0 + (l1 - l0) * t // T
        a1 = l0 + (l1 - l0) * (t + 1) // T
        bf = np.empty((tw, n), dtype=f.dtype)
        bi = np.empty((tw, n if track else 0), dtype=np.int64)
        bk = np.empty((tw, n if by_value else 0), dtype=keys.dtype)
        bz = np.empty((tw, n if by_value else 0), dtype=np.uint8)
        sf = np.empty((0 if by_value else n, tw), dtype=f.dtype)
        si = np.empty((n if track and not by_value else 0, tw), dtype=np.int64)
        sums = np.empty(tw, dtype=np.float64)
        his = np.empty(tw, dtype=np.float64)
        best = np.empty(tw, dtype=np.float64)
        at = np.empty(tw, dtype=np.int64)
        out = np.empty(tw, dtype=f.dtype)
        of = np.empty(n, dtype=f.dtype)
        oi = np.empty(n if track else 0, dtype=np.int64)
        m = 2 * n + 2
        v = np.empty(m, dtype=np.float64)
        vf = np.empty(m, dtype=f.dtype)
        vi = np.empty(m, dtype=np.int64)
        z = np.empty(m, dtype=np.float64)
        for tile in range(a0, a1):
            first = (tile // tiles) * n * stride + (tile % tiles) * tw
            B = min(tw, stride - (tile % tiles) * tw)
            if by_value:
                for p in range(n):
                    s = first + p * stride
                    for c in range(B):
                        bf[c, p] = f[s + c]
                    if track:
                        for c in range(B):
                            bi[c, p] = fi[s + c]
                    for c in range(B):
                        bk[c, p] = keys[s + c]
                        bz[c, p] = zero[s + c]
            else:
                for c in range(B):
                    sums[c] = 0.0
                    his[c] = 0.0
                for p in range(n):
                    s = first + p * stride
                    for c in range(B):
                        sf[p, c] = f[s + c]
                        sums[c] += sf[p, c]  # inf where a site has no feature yet
                        his[c] = max(his[c], sf[p, c])
                    if track:
                        for c in range(B):
                            si[p, c] = fi[s + c]
                near = True
                for c in range(B):
                    near = near and sums[c] <= NEAR * w * n and his[c] <= REACH * REACH * w
                if near:
                    _tile_rows(f, fi, sf, si, track, n, stride, B, first, periodic, w, root,
                               best, at, out)
                    continue
                for p in range(n):
                    for c in range(B):
                        bf[c, p] = sf[p, c]
                    if track:
                        for c in range(B):
                            bi[c, p] = si[p, c]
            for c in range(B):
                _line(bf[c], bi[c], bk[c], bz[c], n, periodic, by_value, track, w,
                      first + c, stride, v, vf, vi, z, of, oi)
            for p in range(n):
                s = first + p * stride
                if root:
                    for c in range(B):
                        f[s + c] = np.sqrt(bf[c, p])
                else:
                    for c in range(B):
                        f[s + c] = bf[c, p]
                if track:
                    for c in range(B):
                        fi[s + c] = bi[c, p]


def transform(shape, periodic, spacing, zero, keys=None, dtype=np.float64, squared=False,
              indices=False, rows=1):
    """The exact Euclidean distance transform of a lattice.

    Parameters
    ----------
    shape : sequence of int
    periodic : sequence of bool
        One per axis.
    spacing : sequence of float
        The distance between neighbouring sites along each axis (finite, > 0).
    zero : ndarray of uint8, shape (n,)
        The marked sites: features (at distance 0) whatever their value.
    keys : ndarray of uint32 or uint64, shape (n,), optional
        Site values as keys compared for equality: a site's features are then also the
        sites of another value. None: the marked sites are the only features.
    dtype : float64 or float32
        The type the squared distances are summed in and returned as.
    squared : bool
        Return squared distances.
    indices : bool
        Also return the flat index of each site's nearest feature (-1 where none is).
    rows : int
        A stack of ``rows`` lattices: ``zero`` (and ``keys``) hold ``rows x n`` sites, row
        after row, and each row gets its own transform, every pass over the lines of
        every row at once (indices within the row).

    Returns
    -------
    distances : ndarray of ``dtype``, (n,)
        inf where no feature is.
    nearest : ndarray of int64, (n,)
        Only with ``indices``.

    Notes
    -----
    O(n d) time, every pass in parallel over its lines in kernel calls of about
    ``_budget._BUDGET`` sites; memory: the result (and the indices), and per thread a
    few arrays of the longest axis.

    Examples
    --------
    >>> zero = np.array([1, 0, 0, 0, 0, 0], np.uint8)
    >>> transform((6,), (False,), (1.0,), zero).tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    >>> transform((6,), (True,), (1.0,), zero).tolist()
    [0.0, 1.0, 2.0, 3.0, 2.0, 1.0]
    >>> keys = np.array([1, 1, 2, 2, 2, 2], np.uint32)
    >>> d, near = transform((6,), (False,), (0.5,), zero * 0, keys, indices=True)
    >>> d.tolist(), near.tolist()
    ([1.0, 0.5, 0.5, 1.0, 1.5, 2.0], [2, 2, 1, 1, 1, 1])
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    one = int(np.prod(shape))
    # the stack is one more axis in front, along which no pass runs
    n = one * int(rows)
    dtype = np.dtype(dtype)
    zero = _frozen(np.ascontiguousarray(zero, dtype=np.uint8).reshape(n))
    by_value = keys is not None
    # (a dummy of the type int64 values give: one compiled kernel less)
    keys = _frozen(keys if by_value else np.zeros(1, dtype=np.uint64))
    # the first pass (along the last axis) writes every site
    f = np.empty(n, dtype=dtype)
    fi = np.empty(n if indices else 1, dtype=np.int64)
    threads = numba.get_num_threads()
    if n == 0:
        return (f, fi) if indices else f
    stride = 1
    for axis in range(d - 1, -1, -1):
        L = int(shape[axis])
        w = float(spacing[axis]) ** 2
        per = np.bool_(periodic[axis])
        if axis == d - 1:
            lines = n // L
            step = max(1, _budget._BUDGET // L)
            for r0 in range(0, lines, step):
                r1 = min(lines, r0 + step)
                _rows(f, fi, keys, zero, np.int64(L), per, w, np.bool_(by_value),
                      np.bool_(indices), np.int64(r0), np.int64(r1),
                      np.int64(max(1, min(threads, r1 - r0))))
        else:
            tw = TILE_VALUES if by_value else TILE
            tiles = n // (L * stride) * -(-stride // tw)
            step = max(1, _budget._BUDGET // (L * tw))
            for l0 in range(0, tiles, step):
                l1 = min(tiles, l0 + step)
                _columns(f, fi, keys, zero, np.int64(L), np.int64(stride), per, w,
                         np.bool_(by_value), np.bool_(indices),
                         np.bool_(axis == 0 and not squared), np.int64(l0), np.int64(l1),
                         np.int64(max(1, min(threads, l1 - l0))), np.int64(tw))
        stride *= L
    if d == 1 and not squared:  # otherwise the last pass took the roots
        np.sqrt(f, out=f)
    if indices and rows > 1:
        np.remainder(fi, one, out=fi, where=fi >= 0)
    return (f, fi) if indices else f
