"""Hop distances on implicit lattices: multi-source BFS, and closeness (a BFS per source).

The searches run in the padded index space of :mod:`catalytic.kernels.cpu._padded`, in
kernel calls of about ``_budget._BUDGET`` units (see "Interrupts" in
:mod:`catalytic.kernels.cpu._budget`). Distances follow out-neighbours (see
:mod:`catalytic.kernels.cpu`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _LEVEL_COST, _NO, _YES, _ZERO
from catalytic.kernels.cpu.neighbors import check_sources
from catalytic.kernels.cpu._padded import (
    NO_BONDS,
    PORTAL,
    BondCells,
    UNVISITED,
    Plan,
    _geo,
    _ngeo,
    _resolve,
    code_bonds,
    plan_bonds,
    _to_padded,
    _unpad_all,
    _work_array,
    make_plan,
)

# Unsigned indices in the hot loops: a signed one costs a negative-index fix-up per access.
_U = np.uint64
# ``stop`` of a search that runs to the end, typed int64 like the host's (see _budget._ZERO)
_NO_STOP = np.int64(-1)

__all__ = ["bfs_distance", "closeness"]


@njit(cache=True, nogil=True, inline="always")
def _expand_coded(work, src, lo, hi, dst, m, dn, foff, offs, r, shape, pstrides, periodic,
                  mode, shared):
    """The bond-coded loops of :func:`_expand` (see there)."""
    K = foff.shape[0]
    if mode == 1 and not shared:
        for h in range(lo, hi):
            p = src[_U(h)]
            for k in range(K):
                q = p + foff[k]
                v = work[_U(q)]
                c = np.int64(v < 0) & ((np.int64(v) >> k) & 1)
                work[_U(q)] = dn if c else v
                dst[_U(m)] = q
                m += c
        return m
    if mode == 1:
        for h in range(lo, hi):
            p = src[_U(h)]
            vp = work[_U(p)]
            for k in range(K):
                q = p + foff[k]
                v = work[_U(q)]
                c = np.int64(v < 0) & ((np.int64(v) >> k) & 1)
                work[_U(q if c else p)] = dn if c else vp
                dst[_U(m)] = q
                m += c
        return m
    for h in range(lo, hi):
        p = src[h]
        vp = work[p]
        for k in range(K):
            if mode == 0:
                q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                if q < 0:
                    continue
                v = work[q]
            else:
                q = p + foff[k]
                v = work[q]
                if v == PORTAL:
                    q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                    v = work[q]
            c = np.int64(v < 0) & ((np.int64(v) >> k) & 1)
            work[q if c else p] = dn if c else vp
            dst[m] = q
            m += c
    return m


@njit(cache=True, nogil=True)
def _expand(work, src, lo, hi, dst, m, dn, foff, offs, r, shape, pstrides, periodic, mode,
            bits, nw, shared, coded):
    """Label every unvisited neighbour of ``src[lo:hi]`` with ``dn`` and append it to
    ``dst`` from position ``m``; return the new end. O((hi - lo) k). ``bits``/``nw``:
    the bond words of :class:`~catalytic.kernels.cpu._padded.BondCells` (length 0:
    every bond open); a step through a closed bond claims nothing and, when other
    threads expand into ``work`` at the same time (``shared``), writes nothing either.

    Branch-free claim: each neighbour cell is read, written back (unchanged, or ``dn``
    over ``UNVISITED``), and written to ``dst[m]`` with ``m`` advanced only when it was
    claimed, so ``dst`` needs one spare slot past the last claim. Cell values only ever
    go from ``UNVISITED`` to a distance, which makes the write-back safe when two threads
    expand disjoint frontier slices at once: both may claim one cell (same ``dn``, one
    duplicate entry in the next frontier), nothing else can happen. A closed step must
    not write back an ``UNVISITED`` it read: another thread may have claimed the cell
    since, so with ``shared`` it re-reads and writes back ``p`` itself (labelled for
    good) instead.

    ``coded``: ``work`` is a bond-coded array (:func:`~catalytic.kernels.cpu._padded.code_bonds`)
    and ``foff``/``offs`` the negated stencil: the step ``p -> q`` through ``-offs[k]``
    crosses the bond of step ``k`` from ``q``, so the claim tests bit ``k`` of the value it
    reads (negative, so unvisited) and no bond array. A step that does not claim writes
    back ``v`` alone, or with ``shared`` ``p``'s own value to ``p`` (``v`` may be an
    unvisited cell another thread has claimed since).
    """
    K = foff.shape[0]
    if coded:
        return _expand_coded(work, src, lo, hi, dst, m, dn, foff, offs, r, shape, pstrides,
                             periodic, mode, shared)
    if bits.shape[0] != 0:
        # the bond loops: the claim also needs the step's bit of the cell's word
        if mode == 1 and nw == 1 and shared:
            for h in range(lo, hi):
                p = src[h]
                word = np.int64(bits[p])
                for k in range(K):
                    q = p + (foff[k] & -(word & 1))
                    word >>= 1
                    v = work[q]
                    c = v == UNVISITED
                    work[q] = dn if c else v
                    dst[m] = q
                    m += c
            return m
        if mode == 1 and nw == 1:
            for h in range(lo, hi):
                p = src[h]
                word = np.int64(bits[p])
                for k in range(K):
                    q = p + foff[k]
                    v = work[q]
                    c = np.int64(v == UNVISITED) & word  # 0 or 1: bit 0 is step k's
                    word >>= 1
                    work[q] = dn if c else v
                    dst[m] = q
                    m += c
            return m
        for h in range(lo, hi):
            p = src[h]
            base = p * nw
            for k in range(K):
                if ((bits[base + (k >> 3)] >> (k & 7)) & 1) == 0:
                    continue
                if mode == 0:
                    q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                    if q < 0:
                        continue
                    v = work[q]
                else:
                    q = p + foff[k]
                    v = work[q]
                    if mode == 2 and v == PORTAL:
                        q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                        v = work[q]
                c = v == UNVISITED
                work[q] = dn if c else v
                dst[m] = q
                m += c
        return m
    if mode == 1:  # no portals: one addition per step
        for h in range(lo, hi):
            p = src[_U(h)]
            for k in range(K):
                q = p + foff[k]
                v = work[_U(q)]
                c = v == UNVISITED
                work[_U(q)] = dn if c else v
                dst[_U(m)] = q
                m += c
    elif mode == 2:
        for h in range(lo, hi):
            p = src[h]
            for k in range(K):
                q = p + foff[k]
                v = work[q]
                if v == PORTAL:
                    q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                    v = work[q]
                c = v == UNVISITED
                work[q] = dn if c else v
                dst[m] = q
                m += c
    else:
        for h in range(lo, hi):
            p = src[h]
            for k in range(K):
                q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                if q < 0:
                    continue
                v = work[q]
                c = v == UNVISITED
                work[q] = dn if c else v
                dst[m] = q
                m += c
    return m


@njit(cache=True, nogil=True)
def _bfs_queue(work, queue, st, stop, budget, foff, offs, r, shape, pstrides, periodic, mode,
               bits, nw):
    """Level-synchronous BFS in one queue, resumable: each level is appended after the
    previous one. Stops after the level that labels ``stop`` (-1: never).

    ``st = [lo, hi, t, dn, tot]``: ``queue[lo:hi]`` are the cells of the level being
    expanded still to do, ``queue[hi:t]`` the cells labelled ``dn`` so far, ``tot`` the sum
    of the distances of the completed levels. Start from ``[0, m0, m0, 1, 0]`` with the
    sources (labelled 0) in ``queue[:m0]``. Returns after about ``budget`` units and
    returns the units done; the search is over when ``lo == hi``, then ``hi`` cells are
    labelled at total distance ``tot``. ``queue`` needs n_open + 1 slots.
    O(visited * k) over all calls.
    """
    K = max(foff.shape[0], 1)
    lo = st[0]
    hi = st[1]
    t = st[2]
    dn = st[3]
    tot = st[4]
    used = 0
    while lo < hi:
        e = min(hi, lo + max((budget - used) // K, 1))
        t = _expand(work, queue, lo, e, queue, t, dn, foff, offs, r, shape, pstrides,
                    periodic, mode, bits, nw, _NO, _NO)
        used += (e - lo) * K + _LEVEL_COST
        lo = e
        if lo == hi:
            tot += dn * (t - hi)
            hi = t
            dn += 1
            if stop >= 0 and work[stop] != UNVISITED:
                lo = hi
                break
        if used >= budget:
            break
    st[0] = lo
    st[1] = hi
    st[2] = t
    st[3] = dn
    st[4] = tot
    return used


@njit(cache=True, nogil=True, parallel=True)
def _expand_par(work, cur, lo, hi, bufs, cnt, dn, foff, offs, r, shape, pstrides, periodic,
                mode, bits, nw, coded):
    """Expand ``cur[lo:hi]`` split into one slice per thread, thread t appending to
    ``bufs[t]`` and leaving its count in ``cnt[t]`` (see :func:`_expand` for why the
    concurrent claims are safe)."""
    T = bufs.shape[0]
    m = hi - lo
    for tt in prange(T):
        t = np.int64(tt)
        a = lo + m * t // T
        b = lo + m * (t + 1) // T
        cnt[t] = _expand(work, cur, a, b, bufs[t], _ZERO, dn, foff, offs, r, shape, pstrides,
                         periodic, mode, bits, nw, _YES, coded)


@njit(cache=True, nogil=True)
def _dedupe_level(work, nxt, m, bufs, cnt, dn):
    """Append the thread buffers to ``nxt[:m]`` dropping repeated cells (all labelled
    ``dn``), compacting ``nxt[:m]`` too; returns the new length. Only needed when
    duplicates would overflow ``nxt``. O(entries)."""
    mark = PORTAL - 1
    k = 0
    for h in range(m):
        q = nxt[h]
        if work[q] == dn:
            work[q] = mark
            nxt[k] = q
            k += 1
    for t in range(bufs.shape[0]):
        for h in range(cnt[t]):
            q = bufs[t, h]
            if work[q] == dn:
                work[q] = mark
                nxt[k] = q
                k += 1
    for h in range(k):
        work[nxt[h]] = dn
    return k


@njit(cache=True, nogil=True)
def _bfs_frontiers(work, a, b, st, bufs, cnt, par_min, budget, stops, need, foff, offs, r,
                   shape, pstrides, periodic, mode, bits, nw, coded):
    """Level-synchronous BFS with two frontier arrays ``a`` and ``b``, resumable.

    ``st = [m, lo, m2, dn, c]``: the current frontier is ``a[:m]`` (``c`` 0) or ``b[:m]``
    (``c`` 1), its cells before ``lo`` are expanded, and the ``m2`` cells they labelled
    ``dn`` are at the start of the other array. Start from ``[m, 0, 0, 1, 0]`` with the
    sources in ``a[:m]``; the search is over when ``m`` is 0. With cells in ``stops``
    (int64; length 0: none) it ends (``m`` set to 0) after the level by which ``need``
    of them are labelled: every cell nearer than the last of those then has its final
    distance, as do the cells at its distance. Returns after about ``budget`` units (at
    a round or slice boundary, possibly mid-level).

    Levels of at least ``par_min`` cells are expanded by all threads in rounds of
    ``bufs.shape[1] // k`` cells per thread; smaller ones by this thread alone, in slices
    that fit the budget. A cell claimed by two threads at once appears twice in the next
    frontier, which costs one redundant expansion; if such repeats would overflow the
    next frontier the level is de-duplicated. ``a`` and ``b`` need n_open + 1 slots.
    O(n k / threads) for large frontiers, over all calls.
    """
    T = bufs.shape[0]
    K = max(foff.shape[0], 1)
    chunk = max((bufs.shape[1] - 1) // K, 1)
    cap = b.shape[0] - 1
    m = st[0]
    lo = st[1]
    m2 = st[2]
    dn = st[3]
    c = st[4]
    if c == 0:
        cur = a
        nxt = b
    else:
        cur = b
        nxt = a
    used = 0
    while m > 0:
        if T == 1 or m < par_min:
            if lo == 0 and m * K <= budget - used:
                # the whole level: constant start positions let LLVM specialise the call
                hi = m
                m2 = _expand(work, cur, _ZERO, m, nxt, _ZERO, dn, foff, offs, r, shape, pstrides,
                             periodic, mode, bits, nw, _NO, coded)
            else:
                hi = min(m, lo + max((budget - used) // K, 1))
                m2 = _expand(work, cur, lo, hi, nxt, m2, dn, foff, offs, r, shape,
                             pstrides, periodic, mode, bits, nw, _NO, coded)
        else:
            hi = min(m, lo + T * chunk)
            _expand_par(work, cur, lo, hi, bufs, cnt, dn, foff, offs, r, shape,
                        pstrides, periodic, mode, bits, nw, coded)
            tot = 0
            for t in range(T):
                tot += cnt[t]
            if m2 + tot > cap:
                m2 = _dedupe_level(work, nxt, m2, bufs, cnt, dn)
            else:
                for t in range(T):
                    # not a slice assignment, whose shape check compiles string formatting
                    for j in range(cnt[t]):
                        nxt[m2 + j] = bufs[t, j]
                    m2 += cnt[t]
        used += (hi - lo) * K + _LEVEL_COST
        lo = hi
        if lo == m:
            cur, nxt = nxt, cur
            c = 1 - c
            m = m2
            m2 = 0
            lo = 0
            dn += 1
            if stops.shape[0] != 0:
                got = 0
                for s in stops:  # negative means unvisited
                    got += work[s] >= 0
                if got >= need:
                    m = 0
        if used >= budget:
            break
    st[0] = m
    st[1] = lo
    st[2] = m2
    st[3] = dn
    st[4] = c


@njit(cache=True, nogil=True, parallel=True)
def _closeness_run(work_t, queue_t, st_t, psrc, out, n_open, budget, foff, offs, r, shape,
                   pstrides, periodic, mode, bits, nw):
    """One BFS per source, resumable; thread slot t takes sources t, t+T, t+2T, ... and
    reuses ``work_t[t]`` (reset through its queue after each search) and ``queue_t[t]``.

    ``st_t[t] = [s, lo, hi, t, dn, tot, busy]``: slot t is on source index ``s``, with
    the :func:`_bfs_queue` state in the middle while ``busy``. Start from
    ``[t, 0, 0, 0, 0, 0, 0]``; every slot does about ``budget`` units per call; done when
    every ``s >= len(psrc)``. O(len(psrc) * n k / T) over all calls.
    """
    T = work_t.shape[0]
    ns = psrc.shape[0]
    for tt in prange(T):
        t = np.int64(tt)
        work = work_t[t]
        queue = queue_t[t]
        st = st_t[t]
        q = st[1:6]
        used = 0
        while st[0] < ns and used < budget:
            s = st[0]
            if st[6] == 0:
                p0 = psrc[s]
                work[p0] = 0
                queue[0] = p0
                q[0] = 0
                q[1] = 1
                q[2] = 1
                q[3] = 1
                q[4] = 0
                st[6] = 1
            used += _bfs_queue(work, queue, q, _NO_STOP, budget - used, foff, offs, r, shape,
                               pstrides, periodic, mode, bits, nw)
            if q[0] < q[1]:
                continue
            reached = q[1]
            tot = q[4]
            for h in range(reached):
                work[queue[h]] = UNVISITED
            used += reached
            if tot > 0 and n_open > 1:
                c = (reached - 1.0) / tot
                c *= (reached - 1.0) / (n_open - 1)
            else:
                c = 0.0
            out[s] = c
            st[6] = 0
            st[0] = s + T


# ---------------------------------------------------------------------------------------
# Host functions
# ---------------------------------------------------------------------------------------


def _hop_search(g: Plan, psrc, stops=None, need=1, cells: BondCells = NO_BONDS):
    """BFS from padded sources ``psrc`` (ending after the level by which ``need`` of the
    padded cells ``stops`` are labelled, see :func:`_bfs_frontiers`) over the open bonds
    of ``cells``, wide levels on all of
    Numba's threads, in calls of about ``_BUDGET`` units; returns the padded distance
    array (negative where not reached). With bond bits the search runs on the
    bond-coded array of :func:`~catalytic.kernels.cpu._padded.code_bonds` when the
    plan's steps fit a code."""
    work = code_bonds(g, cells)
    coded = work is not None
    if not coded:
        work = _work_array(g)
    psrc = np.unique(np.asarray(psrc, dtype=np.int64))
    m = psrc.shape[0]
    cap = max(g.n_open, m) + max(1024, g.n_open >> 8) + 1
    cur = np.empty(cap, dtype=g.itype)
    nxt = np.empty(cap, dtype=g.itype)
    work[psrc] = 0
    cur[:m] = psrc
    T = numba.get_num_threads()
    K = max(g.offs.shape[0], 1)
    bufs = np.empty((T, K * _PAR_CHUNK + 1) if T > 1 else (1, 1), dtype=g.itype)
    cnt = np.zeros(bufs.shape[0], dtype=np.int64)
    st = np.array([m, 0, 0, 1, 0], dtype=np.int64)
    # bond-coded: the negated stencil (see _expand), the bonds in the cells
    geo = _ngeo(g) if coded else _geo(g)
    bits = NO_BONDS.bits if coded else cells.bits
    par_min = _PAR_MIN
    budget = _budget._BUDGET
    stops = np.unique(np.asarray([] if stops is None else stops, dtype=np.int64))
    need = np.int64(need)
    if stops.shape[0] and np.count_nonzero(work[stops] == 0) >= need:
        return work  # sources: nothing to search
    while st[0] > 0:
        _bfs_frontiers(work, cur, nxt, st, bufs, cnt, par_min, budget, stops, need, *geo,
                       bits, cells.nw, _YES if coded else _NO)
    return work


# Frontier sizes for the parallel BFS: below _PAR_MIN cells a level is expanded by one
# thread (a parallel launch costs a few microseconds); _PAR_CHUNK cells per thread per round.
_PAR_MIN = 1024
_PAR_CHUNK = 8192


def bfs_distance(shape, periodic, offsets, open_, dedupe, sources, *, bonds=None,
                 cache=None) -> np.ndarray:
    """Multi-source hop distances: the hops from each site's nearest source.

    Parameters
    ----------
    shape : array_like of int, (d,)
        Sites per axis.
    periodic : array_like of uint8, (d,)
        1 where the axis wraps.
    offsets : ndarray of int64, (k, d)
        The stencil: one displacement per neighbour.
    open_ : ndarray of uint8, (n,) or (0,)
        1 where the site exists; length 0 when every site does.
    dedupe : bool
        Unused: duplicate neighbours and self-loops cannot change a BFS distance.
    sources : array_like of int
        Flat indices of open sites (distance 0); the caller has checked them (in range,
        not blocked). A repeated source counts once.
    bonds : tuple, optional
        ``Geometry.bond_args()``: steps through closed bonds are not taken (bond
        weights are ignored: hops). None: every bond open.
    cache : dict, optional
        Where the padded bond words are kept between calls (a lattice's backend
        cache; see :func:`catalytic.kernels.cpu._padded.plan_bonds`).

    Returns
    -------
    ndarray of int64, (n,)
        Hops from the nearest source along out-neighbours; -1 for unreachable and
        blocked sites.

    Notes
    -----
    Level-synchronous BFS in the padded index space (:mod:`catalytic.kernels.cpu._padded`):
    O(n k) time. Levels of at least ``_PAR_MIN`` cells are split over Numba's threads;
    the distances do not depend on the thread count. Memory: the int32 padded work
    array, two int32 frontier arrays of n_open entries, then the int64 result: at most
    12 bytes per site at once (int64 work and frontiers past 2**31 padded cells). With
    bonds the work array starts as the bond codes of
    :func:`~catalytic.kernels.cpu._padded.code_bonds` (up to 30 stencil steps, 62 past
    2**31 cells; more take the bond bytes, one read per frontier cell), built from the
    bond bytes kept in ``cache``: ceil(k/8) bytes per padded cell, kept for the
    lattice's lifetime.

    The search runs in kernel calls of about ``_budget._BUDGET`` neighbour visits, wide
    levels split too, so a signal handler (Ctrl-C) runs between two calls and its
    exception leaves this function; see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> bfs_distance((2, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False, [0])
    array([0, 1, 2, 1, 2, 3])
    """
    g = make_plan(shape, periodic, offsets, open_)
    cells = plan_bonds(g, offsets, bonds, cache)
    work = _hop_search(g, _to_padded(sources, g), cells=cells)
    out = np.empty(g.n, dtype=np.int64)
    _unpad_all(work, out, g, True)
    return out


def closeness(shape, periodic, offsets, open_, dedupe, sources=None, *, bonds=None,
              cache=None) -> np.ndarray:
    """Closeness centrality (NetworkX ``closeness_centrality``, ``wf_improved=True``), one
    BFS per source.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    sources : array_like of int, optional
        Open sites to compute; all open sites when None.
    bonds, cache
        As in :func:`bfs_distance` (hops over the open bonds).

    Returns
    -------
    ndarray of float64, (n,)
        For each source with r sites reachable (itself included) at total distance tot,
        ``(r-1)/tot * (r-1)/(n_open-1)`` (0 when tot == 0 or n_open == 1); nan for every
        site not computed, blocked sites included.

    Raises
    ------
    IndexError
        A source out of range or blocked.

    Notes
    -----
    One BFS per source, the sources spread over the threads, each thread with its own
    padded work array and queue: O(len(sources) n k / threads) time,
    O(threads * n) memory. Distances are taken along out-neighbours (NetworkX's directed
    closeness uses in-distances; the two agree for symmetric stencils). The reference
    for :func:`catalytic.kernels.cpu.centrality.closeness`, which computes the same
    values bit for bit from 256 sources at once. Runs in kernel calls of about
    ``_budget._BUDGET`` units per thread (a call may stop inside a search), so a signal
    handler (Ctrl-C) runs between two of them; see "Interrupts" in
    :mod:`catalytic.kernels.cpu._budget`.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> closeness((3,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False)
    array([0.66666667, 1.        , 0.66666667])
    """
    g = make_plan(shape, periodic, offsets, open_)
    if sources is None:
        src = np.flatnonzero(g.open_) if g.open_.shape[0] else np.arange(g.n)
    else:
        src = np.asarray(sources, dtype=np.int64).reshape(-1)
    src = src.astype(np.int64)
    check_sources(src, g.n, g.open_)
    out = np.full(g.n, np.nan)
    if src.shape[0] == 0:
        return out
    T = max(1, min(numba.get_num_threads(), src.shape[0]))
    work_t = np.empty((T, g.psize), dtype=g.itype)
    work_t[0] = _work_array(g)
    work_t[1:] = work_t[0]
    queue_t = np.empty((T, g.n_open + 1), dtype=g.itype)
    vals = np.empty(src.shape[0], dtype=np.float64)
    psrc = _to_padded(src, g)
    st_t = np.zeros((T, 7), dtype=np.int64)
    st_t[:, 0] = np.arange(T)
    ns = src.shape[0]
    geo = _geo(g)
    cells = plan_bonds(g, offsets, bonds, cache)
    budget = _budget._BUDGET
    while (st_t[:, 0] < ns).any():
        _closeness_run(work_t, queue_t, st_t, psrc, vals, g.n_open, budget, *geo, cells.bits,
                       cells.nw)
    out[src] = vals
    return out
