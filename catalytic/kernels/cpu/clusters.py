"""Per-cluster statistics on the CPU: the windings that unwrap clusters across periodic
seams, and the sums, extremes and arcs of every cluster, in Numba.

The contract is the reference's (``backends/_clusters.py``); the numbers are the same
up to the order of floating-point sums.

* :func:`unwrap`: union-find with windings over the bonds of each cluster, in flat
  order (the larger root linked under the smaller, so each cluster's root is its
  lowest site), gives every site its winding relative to the root, and a bond inside
  one tree whose turns disagree with the windings marks the axes its label wraps. The
  sites go through in kernel calls of about ``_BUDGET`` units (``_budget``), so a
  signal handler runs between calls.
* :func:`moments`: sizes, the first site, coordinate extremes, the field's sum and
  extremes, and the first and second moments of the unwrapped coordinates about each
  cluster's first site (so the gyration does not lose digits to large coordinates), in
  one pass in flat order, a run of one label along the last axis at a time (its sums in
  closed form) where no windings are needed. With many labels, threads own ranges of
  labels holding about equal numbers of sites and each scans every site, writing only
  its own labels: no per-thread copies of the per-label arrays. With few, each thread
  scans a share of the rows into its own per-label arrays, its moments about its own
  first site of each label, and the host shifts them to the label's first site and
  adds them up.
* :func:`arcs`: the occupied coordinates of each cluster along a periodic axis, sorted,
  and the largest gap between them round the circle.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _frozen
from catalytic.kernels.cpu._rows import _next_row
from catalytic.kernels.cpu.neighbors import bond_open, c_strides

__all__ = ["unwrap", "moments", "arcs", "contacts"]


@njit(cache=True, nogil=True, inline="always")
def _find(parent, disp, x, tot, rem):
    """The root of ``x``, with ``tot`` (d) set to ``x``'s winding relative to it; the
    path is compressed (every node on it then points at the root, holding its own
    winding relative to it). ``rem`` is scratch (d)."""
    d = tot.shape[0]
    for a in range(d):
        tot[a] = 0
    r = x
    while parent[r] != r:
        for a in range(d):
            tot[a] += disp[r, a]
        r = parent[r]
    for a in range(d):
        rem[a] = tot[a]
    y = x
    while parent[y] != y:
        nxt = parent[y]
        parent[y] = r
        for a in range(d):
            step = disp[y, a]
            disp[y, a] = rem[a]
            rem[a] -= step
        y = nxt
    return r


@njit(cache=True, nogil=True)
def _unwrap_union(labels, shape, strides, periodic, fwd, bits, words, parent, disp, wraps,
                  lo, hi):
    """Sites [lo, hi) in flat order: every usable bond along a forward offset from the
    site to a site of its label joins their trees with the step's turns (the larger root
    under the smaller, so a cluster's root is its lowest site); a bond inside one tree
    whose turns disagree with the windings marks the axes its label wraps. O(forward
    offsets) union-find steps a site."""
    d = shape.shape[0]
    K = fwd.shape[0]
    c = np.empty(d, np.int64)
    t = np.empty(d, np.int64)
    ti = np.empty(d, np.int64)
    tj = np.empty(d, np.int64)
    rem = np.empty(d, np.int64)
    for i in range(lo, hi):
        lab = labels[i]
        if lab == 0:
            continue
        r = i
        for a in range(d):
            c[a] = r // strides[a]
            r -= c[a] * strides[a]
        for k in range(K):
            j = 0
            ok = True
            for a in range(d):
                x = c[a] + fwd[k, a]
                t[a] = 0
                if x < 0 or x >= shape[a]:
                    if periodic[a] == 0:
                        ok = False
                        break
                    t[a] = x // shape[a]
                    x -= t[a] * shape[a]
                j += x * strides[a]
            if not ok or labels[j] != lab:
                continue
            if not bond_open(i, j, np.int64(k), bits, words):
                continue
            ri = _find(parent, disp, np.int64(i), ti, rem)
            rj = _find(parent, disp, np.int64(j), tj, rem)
            if ri == rj:
                for a in range(d):
                    if ti[a] + t[a] != tj[a]:
                        wraps[lab, a] = 1
            elif ri < rj:
                parent[rj] = ri
                for a in range(d):
                    disp[rj, a] = ti[a] + t[a] - tj[a]
            else:
                parent[ri] = rj
                for a in range(d):
                    disp[ri, a] = tj[a] - t[a] - ti[a]


@njit(cache=True, nogil=True)
def _unwrap_flatten(labels, parent, disp, w, root, lo, hi):
    """Sites [lo, hi): each one's winding relative to its root into ``w``, and the root
    of each label into ``root`` (-2 when a label has two)."""
    d = w.shape[1]
    tot = np.empty(d, np.int64)
    rem = np.empty(d, np.int64)
    for i in range(lo, hi):
        lab = labels[i]
        if lab == 0:
            continue
        r = _find(parent, disp, np.int64(i), tot, rem)
        for a in range(d):
            w[i, a] = tot[a]
        if root[lab] == -1:
            root[lab] = r
        elif root[lab] != r:
            root[lab] = -2


def unwrap(labels, count, shape, periodic, bond_offsets, bits, words):
    """Windings of every site (int32 (n, d), relative to its cluster's lowest site) and
    the axes each label wraps (bool (count, d)), over the usable bonds between sites of
    one label (forward offset ``s`` reading bond plane ``s`` of ``bits``); a ValueError
    when a label's sites are not all joined. Union-find with windings in flat order, in
    kernel calls of about ``_BUDGET`` units."""
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    labels = _frozen(labels)
    n = int(labels.shape[0])
    d = shape.shape[0]
    fwd = np.ascontiguousarray(bond_offsets, dtype=np.int64).reshape(-1, d)
    parent = np.arange(n, dtype=np.int64)
    disp = np.zeros((n, d), np.int64)
    wraps = np.zeros((count + 1, d), np.uint8)
    strides = c_strides(shape)
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8)
    step = max(1, _budget._BUDGET // max(1, 4 * fwd.shape[0]))
    for lo in range(0, n, step):
        _unwrap_union(labels, shape, strides, periodic, fwd, bits, np.int64(words), parent,
                      disp, wraps, np.int64(lo), np.int64(min(n, lo + step)))
    w = np.empty((n, d), np.int32)
    root = np.full(count + 1, -1, np.int64)
    for lo in range(0, n, step):
        _unwrap_flatten(labels, parent, disp, w, root, np.int64(lo),
                        np.int64(min(n, lo + step)))
    split = np.flatnonzero(root == -2)
    if split.size:
        raise ValueError(f"label {int(split[0])} is not one cluster: its sites are not all "
                         "joined by usable bonds of this lattice")
    return w, wraps[1:].astype(bool)


@njit(cache=True, nogil=True, inline="always")
def _meet(lab, i, c, sizes, first, lo, hi, ref):
    """Site ``i`` at coordinates ``c`` seen in label ``lab``: the label's first site and
    reference point when it is new, its coordinate extremes widened otherwise."""
    if sizes[lab] == 0:
        first[lab] = i
        for a in range(c.shape[0]):
            lo[lab, a] = c[a]
            hi[lab, a] = c[a]
            ref[lab, a] = c[a]
    else:
        for a in range(c.shape[0]):
            lo[lab, a] = min(lo[lab, a], c[a])
            hi[lab, a] = max(hi[lab, a], c[a])


@njit(cache=True, nogil=True, inline="always")
def _site(lab, i, c, w, has_w, shape, sizes, first, lo, hi, ref, m1, m2, x):
    """Add site ``i`` (coordinates ``c``) to label ``lab``: size, first site, extremes,
    and its unwrapped coordinates about the first site to the moments."""
    d = c.shape[0]
    _meet(lab, i, c, sizes, first, lo, hi, ref)
    sizes[lab] += 1
    f = first[lab]
    for a in range(d):
        x[a] = c[a] - ref[lab, a]
        if has_w:
            x[a] += (np.int64(w[i, a]) - np.int64(w[f, a])) * shape[a]
    for a in range(d):
        m1[lab, a] += x[a]
        for b in range(a, d):
            m2[lab, a, b] += x[a] * x[b]


@njit(cache=True, nogil=True, inline="always")
def _run(lab, i, m, c, sizes, first, lo, hi, ref, m1, m2):
    """Add the run of ``m`` sites ``i .. i + m - 1`` along the last axis (the first at
    coordinates ``c``) to label ``lab``, without windings: its sums in closed form."""
    d = c.shape[0]
    last = d - 1
    _meet(lab, i, c, sizes, first, lo, hi, ref)
    hi[lab, last] = max(hi[lab, last], c[last] + m - 1)
    sizes[lab] += m
    fm = np.float64(m)
    p = np.float64(c[last] - ref[lab, last])
    k1 = fm * (fm - 1.0) / 2.0  # sum of 0 .. m-1
    k2 = (fm - 1.0) * fm * (2.0 * fm - 1.0) / 6.0  # sum of their squares
    s1 = fm * p + k1  # sum of the last coordinate about the first site
    s2 = fm * p * p + 2.0 * p * k1 + k2
    for a in range(last):
        oa = np.float64(c[a] - ref[lab, a])
        m1[lab, a] += fm * oa
        for b in range(a, last):
            m2[lab, a, b] += fm * oa * np.float64(c[b] - ref[lab, b])
        m2[lab, a, last] += oa * s1
    m1[lab, last] += s1
    m2[lab, last, last] += s2


@njit(cache=True, nogil=True, inline="always")
def _scan_rows(labels, shape, w, field, l0, l1, sizes, first, lo, hi, ref, fsum, fmin,
               fmax, amin, amax, m1, m2, r0, r1):
    """Add the sites of rows [r0, r1) with labels in [l0, l1) to the per-label arrays,
    row by row in flat order: without windings a run of one label along the last axis at
    once (closed-form sums), with them site by site."""
    n = labels.shape[0]
    d = shape.shape[0]
    L = shape[d - 1] if d else 1
    has_field = field.shape[0] != 0
    has_w = w.shape[0] != 0
    c = np.zeros(d, np.int64)
    rem = r0
    for a in range(d - 2, -1, -1):
        c[a] = rem % shape[a]
        rem //= shape[a]
    x = np.empty(d, np.float64)
    for base in range(r0 * L, min(n, r1 * L), L):
        xx = 0
        while xx < L:
            i = base + xx
            lab = labels[i]
            e = xx + 1
            while e < L and labels[base + e] == lab:
                e += 1
            if lab >= l0 and lab < l1:
                c[d - 1] = xx
                if has_w:
                    for q in range(xx, e):
                        c[d - 1] = q
                        _site(lab, base + q, c, w, has_w, shape, sizes, first, lo, hi,
                              ref, m1, m2, x)
                else:
                    _run(lab, i, e - xx, c, sizes, first, lo, hi, ref, m1, m2)
                if has_field:
                    for q in range(i, base + e):
                        v = field[q]
                        fsum[lab] += v
                        # NaN is the extreme of its cluster (the first NaN), as NumPy's
                        if amin[lab] < 0 or v < fmin[lab] or (
                                v != v and fmin[lab] == fmin[lab]):
                            fmin[lab] = v
                            amin[lab] = q
                        if amax[lab] < 0 or v > fmax[lab] or (
                                v != v and fmax[lab] == fmax[lab]):
                            fmax[lab] = v
                            amax[lab] = q
            xx = e
        _next_row(c[:d - 1], shape)


@njit(cache=True, nogil=True, parallel=True)
def _moments_run(labels, shape, w, bounds, field, sizes, first, lo, hi, ref, fsum, fmin,
                 fmax, amin, amax, m1, m2, r0, r1):
    """Many labels: thread ``t`` owns labels ``bounds[t] .. bounds[t + 1] - 1`` and scans
    every site of rows [r0, r1) (a window: the host goes through them in order), writing
    only its own labels' entries of the shared per-label arrays."""
    for t in prange(bounds.shape[0] - 1):
        _scan_rows(labels, shape, w, field, bounds[t], bounds[t + 1], sizes, first, lo, hi,
                   ref, fsum, fmin, fmax, amin, amax, m1, m2, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def _moments_split(labels, shape, w, field, sizes, first, lo, hi, ref, fsum, fmin, fmax,
                   amin, amax, m1, m2, r0, r1):
    """Few labels: thread ``t`` scans its share of rows [r0, r1) into its own per-label
    arrays (index ``t`` of each), every label; :func:`_merge` adds them up."""
    T = sizes.shape[0]
    rows = r1 - r0
    for t in prange(T):
        _scan_rows(labels, shape, w, field, 1, sizes.shape[1], sizes[t], first[t], lo[t],
                   hi[t], ref[t], fsum[t], fmin[t], fmax[t], amin[t], amax[t], m1[t], m2[t],
                   r0 + rows * t // T, r0 + rows * (t + 1) // T)


def _first_extreme(vals, at, smaller):
    """Per label, the extreme of the threads' extremes ``vals`` (T, k) at flat sites ``at``
    (-1: none): the least (``smaller``) or greatest value, on a tie the first site, and a
    NaN beats any number, the first NaN winning, as one scan in flat order finds it."""
    rank = np.where(at < 0, 2, np.where(np.isnan(vals), 0, 1))  # a NaN, a number, none
    key = np.where(rank == 1, vals if smaller else -vals, 0.0)
    best = np.lexsort((at, key, rank), axis=0)[0]  # by rank, then value, then site
    k = np.arange(vals.shape[1])
    return vals[best, k], at[best, k]


def _merge(sizes, first, lo, hi, ref, fparts, m1, m2, w, shape):
    """The per-label arrays of :func:`moments` from the threads' own (leading axis T):
    each thread's moments, taken about its own first site of the label, are shifted to
    the label's first site overall before they are added."""
    T, k = sizes.shape
    d = lo.shape[2]
    has = sizes > 0
    tot = sizes.sum(axis=0)
    big = np.iinfo(np.int64).max
    f_site = np.where(has, first, big)
    owner = np.argmin(f_site, axis=0)  # the thread that met each label first
    lab = np.arange(k)
    gfirst = np.where(tot > 0, first[owner, lab], -1)
    glo = np.where(has[..., None], lo, big).min(axis=0)
    ghi = np.where(has[..., None], hi, -big).max(axis=0)
    glo[tot == 0] = 0
    ghi[tot == 0] = 0
    # each thread's reference point (unwrapped) relative to the label's overall one
    u = ref.astype(np.float64)
    if w.shape[0]:
        wf = w[np.where(has, first, 0)].astype(np.float64)  # (T, k, d)
        u = u + wf * np.asarray(shape, np.float64)
    delta = np.where(has[..., None], u - u[owner, lab][None], 0.0)  # (T, k, d)
    n = sizes.astype(np.float64)[..., None]
    gm1 = (m1 + n * delta).sum(axis=0)
    full = m2 + np.swapaxes(m2, 2, 3)  # the upper triangles, made symmetric
    idx = np.arange(d)
    full[:, :, idx, idx] = m2[:, :, idx, idx]
    full = (full + m1[..., :, None] * delta[..., None, :] + delta[..., :, None] * m1[..., None, :]
            + n[..., None] * delta[..., :, None] * delta[..., None, :])
    gm2 = np.triu(full.sum(axis=0))
    fsum, fmin, fmax, amin, amax = fparts
    gfmin, gamin = _first_extreme(fmin, amin, True)
    gfmax, gamax = _first_extreme(fmax, amax, False)
    return (tot, gfirst, glo, ghi,
            (fsum.sum(axis=0), gfmin, gfmax, gamin, gamax), gm1, gm2)


def _bounds(sizes_prefix, count, T):
    """Label ranges ``[bounds[t], bounds[t + 1])`` holding about equal numbers of sites."""
    total = sizes_prefix[-1]
    cuts = np.searchsorted(sizes_prefix, np.arange(1, T) * total / T)
    return np.unique(np.r_[1, np.clip(cuts + 1, 1, count + 1), count + 1]).astype(np.int64)


def moments(labels, count, shape, w, field):
    """Per label 0..count: sizes (int64), first site, coordinate extremes (int64
    (count+1, d) each), field sum, min, max and their first sites (NaN/-1 without a
    field), and the first and second moments (float64) of the unwrapped coordinates
    about the first site. ``w`` (n, d) int32 windings, or length 0 (none)."""
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    d = shape.shape[0]
    labels = _frozen(labels)
    T = max(1, numba.get_num_threads())
    n_sites = labels.shape[0]
    L = int(shape[-1]) if d else 1
    nrow = labels.shape[0] // L if L else 0
    # few labels (per-thread arrays of at most 2 bytes a site): rows split over threads
    split = T > 1 and nrow >= 2 * T and 4 * (count + 1) * T * (d * d + 4 * d + 8) <= n_sites
    bounds = np.array([1, count + 1], np.int64)
    if T > 1 and count > 1 and not split:
        # about equal sites per thread, from every 16th site (one pass over 1/16th)
        pre = np.cumsum(np.bincount(labels[::16], minlength=count + 1)[1:])
        bounds = _bounds(np.r_[0, pre], count, T)
    sizes = np.zeros(count + 1, np.int64)
    first = np.full(count + 1, -1, np.int64)
    lo = np.zeros((count + 1, d), np.int64)
    hi = np.zeros((count + 1, d), np.int64)
    has = field is not None
    f = _frozen(np.ascontiguousarray(field, dtype=np.float64) if has else np.zeros(0))
    fsum = np.zeros(count + 1)
    fmin = np.full(count + 1, np.nan)
    fmax = np.full(count + 1, np.nan)
    amin = np.full(count + 1, -1, np.int64)
    amax = np.full(count + 1, -1, np.int64)
    m1 = np.zeros((count + 1, d))
    m2 = np.zeros((count + 1, d, d))
    ref = np.empty((count + 1, d), np.int64)
    # windows of about _BUDGET sites a thread scans, so a signal handler runs between
    step = max(1, _budget._BUDGET // max(1, L))
    parts = [sizes, first, lo, hi, ref, fsum, fmin, fmax, amin, amax, m1, m2]
    if split:
        # a thread per share of rows, each with its own per-label arrays, added up at the
        # end: with label ranges every thread would scan every site
        parts = [np.repeat(a[None], T, axis=0) for a in parts]
        step = max(step, T)
    for r0 in range(0, nrow, step):
        r1 = np.int64(min(nrow, r0 + step))
        if split:
            _moments_split(labels, shape, w, f, *parts, np.int64(r0), r1)
        else:
            _moments_run(labels, shape, w, bounds, f, *parts, np.int64(r0), r1)
    if split:
        sizes, first, lo, hi, ref, fsum, fmin, fmax, amin, amax, m1, m2 = parts
        return _merge(sizes, first, lo, hi, ref, (fsum, fmin, fmax, amin, amax), m1, m2, w,
                      shape)
    return sizes, first, lo, hi, (fsum, fmin, fmax, amin, amax), m1, m2


@njit(cache=True, nogil=True)
def _by_label(labels, starts, order):
    """Counting sort: the sites of each label ``l`` at ``order[starts[l]:starts[l+1]]``,
    in flat order (``starts`` from the sizes)."""
    fill = starts.copy()
    for i in range(labels.shape[0]):
        lab = labels[i]
        if lab != 0:
            order[fill[lab]] = i
            fill[lab] += 1


@njit(cache=True, nogil=True, parallel=True)
def _arcs_run(order, starts, shape, strides, axes, lo, hi, T, scratch):
    """Per label and periodic axis: its sites' distinct coordinates in order (sorted, or
    marked when the label has more sites than the axis has coordinates), the largest
    gap round the circle (the wrap-round gap wins ties), and the arc that leaves it out.
    Labels in ``T`` chunks (prange), each with its own ``scratch`` buffer (as long as
    the largest label or the longest periodic axis, whichever is longer)."""
    nl = starts.shape[0] - 1
    for ct in prange(T):
        xs_all = np.empty(scratch, np.int64)
        for lab in range(nl * ct // T, nl * (ct + 1) // T):
            a, b = starts[lab], starts[lab + 1]
            if a == b:
                continue
            for q in range(axes.shape[0]):
                ax = axes[q]
                length = shape[ax]
                if b - a > length:
                    # more sites than coordinates: mark them, O(sites + length)
                    seen = xs_all[scratch - length:]
                    for x in range(length):
                        seen[x] = 0
                    for k in range(a, b):
                        seen[(order[k] // strides[ax]) % length] = 1
                    m = 0
                    for x in range(length):
                        if seen[x]:
                            xs_all[m] = x
                            m += 1
                    xs = xs_all[:m]
                else:
                    m = b - a
                    xs = xs_all[:m]
                    for k in range(a, b):
                        xs[k - a] = (order[k] // strides[ax]) % length
                    xs.sort()
                best = xs[0] + length - xs[m - 1]
                at = xs[0]
                for k in range(1, m):
                    g = xs[k] - xs[k - 1]
                    if g > best:
                        best, at = g, xs[k]
                lo[lab, ax] = at
                hi[lab, ax] = at + length - best + 1


def arcs(labels, count, shape, periodic):
    """``(lo, hi)`` int64 (count + 1, d) of the shortest arc of each periodic axis
    holding every coordinate each label occupies (0 on open axes)."""
    labels = _frozen(labels)
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    d = shape.shape[0]
    sizes = np.bincount(labels, minlength=count + 1)
    sizes[0] = 0  # label 0 (no cluster) holds no slot
    starts = np.zeros(count + 2, np.int64)
    starts[1:] = np.cumsum(sizes)
    order = np.empty(int(starts[-1]), np.int64)
    _by_label(labels, starts, order)
    lo = np.zeros((count + 1, d), np.int64)
    hi = np.zeros((count + 1, d), np.int64)
    axes = np.flatnonzero(np.asarray(periodic)).astype(np.int64)
    T = max(1, min(numba.get_num_threads(), count + 1))
    longest = int(max(shape[axes].max(initial=0), sizes.max(initial=0)))
    # marking needs the axis's length at the end of the buffer, after m <= length
    # coordinates: twice the longest axis is always enough for that case
    scratch = max(longest, 2 * int(shape[axes].max(initial=0)), 1)
    _arcs_run(order, starts, shape, c_strides(shape), axes, lo, hi, np.int64(T),
              np.int64(scratch))
    return lo, hi


@njit(cache=True, nogil=True, parallel=True)
def _contacts_rows(labels, shape, periodic, fwd, slot, bits, words, count, row_ptr, codes,
                   write, r0, r1):
    """Per row (prange): every usable bond along a forward offset from a site of the row
    to a site of another non-zero label. Counting (``write`` False: ``row_ptr[r + 1]`` =
    the row's bonds) or writing each as the code ``min * (count + 1) + max`` at
    ``codes[row_ptr[r]:]``."""
    d = shape.shape[0]
    L = shape[d - 1]
    K = fwd.shape[0]
    for r in prange(r0, r1):
        c = np.empty(d, np.int64)
        rem = np.int64(r)
        for a in range(d - 2, -1, -1):
            c[a] = rem % shape[a]
            rem //= shape[a]
        k_out = row_ptr[r] if write else 0
        for xx in range(L):
            i = np.int64(r) * L + xx
            a_lab = labels[i]
            if a_lab == 0:
                continue
            c[d - 1] = xx
            for k in range(K):
                j = 0
                ok = True
                for a in range(d):
                    x = c[a] + fwd[k, a]
                    if x < 0 or x >= shape[a]:
                        if periodic[a] == 0:
                            ok = False
                            break
                        x %= shape[a]
                    j = j * shape[a] + x
                if not ok:
                    continue
                b_lab = labels[j]
                if b_lab == 0 or b_lab == a_lab:
                    continue
                if not bond_open(i, j, slot[k], bits, words):
                    continue
                if write:
                    lo_, hi_ = min(a_lab, b_lab), max(a_lab, b_lab)
                    codes[k_out] = lo_ * (count + 1) + hi_
                k_out += 1
        if not write:
            row_ptr[r + 1] = k_out


def contacts(labels, count, shape, periodic, bond_offsets, bits, words) -> dict:
    """``{(a, b): bonds}`` for labels ``0 < a < b`` joined by usable bonds (each bond
    once, along the forward offsets ``bond_offsets``, forward offset ``s`` reading bond
    plane ``s`` of ``bits``), from two threaded passes over the rows (count, write) and
    one sort."""
    labels = _frozen(labels)
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    fwd = np.ascontiguousarray(bond_offsets, dtype=np.int64).reshape(-1, shape.shape[0])
    slot = np.arange(fwd.shape[0], dtype=np.int64)
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8)
    nrow = labels.shape[0] // int(shape[-1]) if shape.shape[0] and shape[-1] else 0
    row_ptr = np.zeros(nrow + 1, np.int64)
    codes = np.zeros(0, np.int64)
    # windows of about _BUDGET bond steps, so a signal handler runs between calls
    step = max(1, _budget._BUDGET // max(1, int(shape[-1]) * max(1, fwd.shape[0])))
    for write in (False, True):
        if write:
            np.cumsum(row_ptr, out=row_ptr)
            codes = np.empty(int(row_ptr[-1]), np.int64)
        for r0 in range(0, nrow, step):
            _contacts_rows(labels, shape, periodic, fwd, slot, bits, np.int64(words),
                           np.int64(count), row_ptr, codes, np.bool_(write), np.int64(r0),
                           np.int64(min(nrow, r0 + step)))
    pairs, n = np.unique(codes, return_counts=True)
    return {(int(p // (count + 1)), int(p % (count + 1))): int(m) for p, m in zip(pairs, n)}
