"""Graph kernels on implicit lattices: distances, paths, components, closeness, degree.

Every host function here takes the lattice as plain arrays (see ``_lattice.py`` for the
conventions: ``shape``, ``periodic``, ``offsets``, ``open_``, ``dedupe``) and returns plain
arrays. The engine has validated the input; the host functions only choose array sizes
and dtypes, allocate, and call the ``@njit`` kernels beside them.

Padded index space
------------------
The traversal kernels (BFS, Dijkstra, path counting, closeness, shortest paths) work in a
*padded* copy of the lattice: every axis gets a halo of ``r_a = max |offsets[:, a]|``
cells on both sides, so a stencil step is a single addition ``q = p + flat_offset[k]``
with no division and no bounds test. Halo cells hold ``WALL`` (the step left an open
axis) or ``PORTAL`` (the step left only periodic axes); only when a portal is hit is the
wrapped site computed from coordinates, which happens at the boundary alone. Blocked
sites hold ``WALL`` too. Padded indices keep the C order of the real indices, so "the
smallest flat index" means the same in both spaces.

When the halo would more than double the array (many tiny axes) the kernels run on the
unpadded array instead (``Plan.mode`` 0) and compute every step from coordinates: same
results, slower steps. Without periodic halos (``Plan.mode`` 1) the hot loops skip the
portal test.

Numba does not inline a helper ``@njit`` function into code that runs inside a
``prange`` loop, so the hot loops below spell out what a helper would do.

Threads
-------
Every host function runs its kernels on Numba's current thread count (the numba-cpu
backend decides it per call: the free CPUs, or one thread for small lattices). Results
never depend on the thread count: parallel loops write disjoint outputs, and the one
shared structure (the BFS distance array) only ever sees the same value written twice.

Graph conventions
-----------------
The out-neighbours of site ``i`` are its neighbour set from ``_lattice.py``. Distances
follow out-neighbours; paths are walked back over *in*-neighbours (the stencil negated),
which for the usual symmetric stencils is the same set as the neighbour set.
Connected components treat the neighbour relation as undirected.

Interrupts
----------
While an ``@njit`` function runs, the calling thread does not come back to the Python
interpreter, so Python signal handlers (``KeyboardInterrupt`` from Ctrl-C, a ``SIGALRM``
handler that raises) wait until it returns. Every long loop here is therefore
resumable: a kernel call does about ``_BUDGET`` units of work (a unit is about one
neighbour visit or one site scanned; a BFS level, a walk step and a heap pop cost
``_LEVEL_COST`` or ``_HEAP_COST`` more), leaves its position in a small int64 state
array that the host function holds (or, for row passes, takes a window of rows), and
returns; the host function calls it again until the work is done. A pending handler
runs between two calls, so its exception leaves the host function within one call,
and everything the call allocated is freed as it unwinds. The BFS distances, the hop
and weighted searches and their walk-backs, path counting, closeness (a call may stop
inside a search), the catalytic path, every phase of the component labelling and the
fill and copy of the padded arrays work this way; their results do not depend on the
budget, bit for bit.

Measured on two cores of a shared 2-core cloud machine, on lattices of 1e7 to 4e7 sites,
every call of these kernels took 5-60 ms once the arrays were in memory, and 0.1-0.4 s
when it wrote memory the process had never touched (page faults); the budget does not
grow with the lattice, so neither do these times. Not split: single NumPy calls over
the whole lattice (an allocation, ``count_nonzero``, the index conversion of a returned
path: one memory pass each), and one row of the last axis in the component labelling
(a 1-D lattice is one row: a phase took about 150 ms per 4e7 sites there, so about
4.5 s for 1.2e9, extrapolated). Python runs signal
handlers on the main thread only, so Ctrl-C does not stop a search that another thread
(a thread pool) started. An interrupted call cannot be resumed: calling it again starts
from scratch.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange
from numba.extending import intrinsic

from catalytic.kernels.cpu._lattice import c_strides, check_sources, neighbors_into

__all__ = [
    "bfs_distance",
    "dijkstra_distance",
    "shortest_path",
    "count_shortest_paths",
    "connected_components",
    "connected_components_batched",
    "closeness",
    "catalytic_path",
    "degree",
]

UNVISITED = -1
WALL = -2
PORTAL = -3
INT64_MAX = np.iinfo(np.int64).max
_INT32_LIMIT = 2**31 - 1
# Constant arguments for calls between kernels. A plain ``0`` or ``False`` at a call site
# is typed as a literal, and each literal value compiles the callee once more (about
# 0.5-1.5 s per copy on a cold start); NumPy scalars are typed as plain int64/bool.
_ZERO = np.int64(0)
_NO = np.bool_(False)
_YES = np.bool_(True)

#: Work units one kernel call does before it returns to its host function, so that
#: signal handlers can run (see "Interrupts" above). Read by the host functions at each
#: call, so a test can shrink it; the results do not depend on it.
_BUDGET = 1 << 23
#: Extra units charged per BFS level (or partial level) a call expands, for the level's
#: own bookkeeping (about 100 ns, measured on a 1-D chain): chains of tiny levels (long
#: thin lattices) then come back as often as wide ones.
_LEVEL_COST = 64
#: Units charged per Dijkstra heap pop besides its k neighbour visits (the sifts).
_HEAP_COST = 32

# ---------------------------------------------------------------------------------------
# Geometry of the padded index space (host side)
# ---------------------------------------------------------------------------------------


class Plan(NamedTuple):
    """Lattice geometry as the traversal kernels need it (built by :func:`make_plan`)."""

    shape: np.ndarray  # int64[d]
    strides: np.ndarray  # int64[d], real C-order strides
    periodic: np.ndarray  # uint8[d]
    offs: np.ndarray  # int64[k, d], stencil without offsets that can never land
    noffs: np.ndarray  # int64[k, d], the same stencil negated (in-neighbours)
    r: np.ndarray  # int64[d], halo width per axis (0 when not padded)
    pshape: np.ndarray  # int64[d]
    pstrides: np.ndarray  # int64[d]
    foff: np.ndarray  # int64[k], flat padded offset of each stencil entry
    nfoff: np.ndarray  # int64[k], the same negated
    n: int  # real number of sites
    psize: int  # number of padded cells
    n_open: int
    padded: bool
    mode: int  # 0 unpadded, 1 padded without portals, 2 padded with portals
    itype: type  # np.int32 or np.int64: enough for any padded index or distance
    open_: np.ndarray  # uint8[n] or length 0


def make_plan(shape, periodic, offsets, open_) -> Plan:
    """Choose the padded index space for a lattice.

    Parameters
    ----------
    shape, periodic, offsets, open_
        The lattice, as in ``_lattice.py``.

    Returns
    -------
    Plan
        Halo widths, padded shape and strides, flat offsets, index dtype.

    Notes
    -----
    O(k d) plus one O(n) pass to count the open sites.
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    open_ = np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1)
    n = int(np.prod(shape, dtype=object))
    # An offset that leaves an open axis from every site never gives a neighbour.
    never = ((np.abs(offsets) >= shape) & (periodic == 0)).any(axis=1)
    offs = np.ascontiguousarray(offsets[~never])
    if offs.shape[0]:
        r = np.abs(offs).max(axis=0).astype(np.int64)
    else:
        r = np.zeros(d, dtype=np.int64)
    pshape = shape + 2 * r
    psize = int(np.prod(pshape, dtype=object))
    padded = psize <= 2 * n + 65536
    if not padded:
        r = np.zeros(d, dtype=np.int64)
        pshape = shape.copy()
        psize = n
    pstrides = c_strides(pshape)
    foff = np.ascontiguousarray(offs @ pstrides, dtype=np.int64)
    n_open = int(np.count_nonzero(open_)) if open_.shape[0] else n
    itype = np.int32 if psize <= _INT32_LIMIT else np.int64
    mode = 0 if not padded else (2 if bool(((periodic != 0) & (r > 0)).any()) else 1)
    return Plan(
        shape, c_strides(shape), periodic, offs, np.ascontiguousarray(-offs), r, pshape,
        pstrides, foff, np.ascontiguousarray(-foff), n, psize, n_open, padded, mode, itype,
        open_,
    )


def _to_padded(idx, g: Plan) -> np.ndarray:
    """Padded indices of real flat indices ``idx`` (vectorised, O(len(idx) d))."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    coords = (idx[:, None] // g.strides) % g.shape
    return ((coords + g.r) * g.pstrides).sum(axis=1).astype(np.int64)


def _to_real(pidx, g: Plan) -> np.ndarray:
    """Real flat indices of interior padded indices ``pidx`` (vectorised)."""
    pidx = np.asarray(pidx, dtype=np.int64).reshape(-1)
    coords = (pidx[:, None] // g.pstrides) % g.pshape - g.r
    return (coords * g.strides).sum(axis=1).astype(np.int64)


# ---------------------------------------------------------------------------------------
# Padded-space kernels shared by the traversals
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _fill_seg(dst, src_open, src_vals, has_mask, has_vals, open_val, wall_val):
    """Fill one interior row segment: open cells get ``src_vals[x]`` (or ``open_val``),
    blocked cells ``wall_val``."""
    if has_mask:
        if has_vals:
            for x in range(dst.shape[0]):
                dst[x] = src_vals[x] if src_open[x] != 0 else wall_val
        else:
            for x in range(dst.shape[0]):
                dst[x] = open_val if src_open[x] != 0 else wall_val
    elif has_vals:
        for x in range(dst.shape[0]):
            dst[x] = src_vals[x]
    else:
        for x in range(dst.shape[0]):
            dst[x] = open_val


@njit(cache=True, nogil=True)
def _fill_row(out, prow, x0, x1, vals, open_, open_val, wall_val, portal_val, shape, periodic,
              r, pshape):
    """Fill cells [x0, x1) of padded row ``prow`` (see :func:`_fill_padded`)."""
    d = shape.shape[0]
    PL = pshape[d - 1]
    L = shape[d - 1]
    rL = r[d - 1]
    rem = prow
    wall = False
    portal = False
    realrow = 0
    mult = 1
    for a in range(d - 2, -1, -1):
        c = rem % pshape[a]
        rem //= pshape[a]
        c -= r[a]
        if c < 0 or c >= shape[a]:
            if periodic[a]:
                portal = True
            else:
                wall = True
        else:
            realrow += c * mult
        mult *= shape[a]
    base = prow * PL
    row = out[base:base + PL]
    if wall:
        row[x0:x1] = wall_val
        return
    halo_val = portal_val if periodic[d - 1] else wall_val
    a = max(x0, rL)  # the interior part [a, b) of the segment
    b = min(x1, rL + L)
    row[x0:min(x1, rL)] = halo_val
    row[max(x0, rL + L):x1] = halo_val
    if a >= b:
        return
    if portal:
        row[a:b] = portal_val
        return
    ib = realrow * L + a - rL
    n = b - a
    has_mask = open_.shape[0] != 0
    has_vals = vals.shape[0] != 0
    _fill_seg(row[a:b], open_[ib:ib + n] if has_mask else open_,
              vals[ib:ib + n] if has_vals else vals, has_mask, has_vals, open_val, wall_val)


@njit(cache=True, nogil=True, parallel=True)
def _fill_padded(out, vals, open_, open_val, wall_val, portal_val, shape, periodic, r, pshape,
                 seg, lo, hi):
    """Write the padded cell classes of segments [lo, hi) into ``out`` (length
    prod(pshape)); every padded row is cut into segments of ``seg`` cells (one segment
    per row unless rows are longer).

    Interior open cells get ``vals[i]`` (or ``open_val`` when ``vals`` is empty), blocked
    cells and halo cells outside an open axis get ``wall_val``, halo cells outside only
    periodic axes get ``portal_val``. Parallel over segments. O(cells).
    """
    PL = pshape[shape.shape[0] - 1]
    spr = (PL + seg - 1) // seg
    # one prange loop and one argument type per call site: every further one costs
    # about half a second of compilation on a cold start
    for ss in prange(lo, hi):
        s = np.int64(ss)
        prow = s // spr
        x0 = (s - prow * spr) * seg
        _fill_row(out, prow, x0, min(PL, x0 + seg), vals, open_, open_val, wall_val,
                  portal_val, shape, periodic, r, pshape)


@njit(cache=True, nogil=True)
def _copy_seg(dst, src, clip):
    if clip:
        for x in range(dst.shape[0]):
            v = src[x]
            dst[x] = v if v >= 0 else -1
    else:
        for x in range(dst.shape[0]):
            dst[x] = src[x]


@njit(cache=True, nogil=True)
def _unpad_row(src, dst, row, x0, x1, shape, r, pshape, clip):
    d = shape.shape[0]
    L = shape[d - 1]
    rem = row
    prow = 0
    pmult = 1
    for a in range(d - 2, -1, -1):
        c = rem % shape[a]
        rem //= shape[a]
        prow += (c + r[a]) * pmult
        pmult *= pshape[a]
    pb = prow * pshape[d - 1] + r[d - 1]
    ib = row * L
    _copy_seg(dst[ib + x0:ib + x1], src[pb + x0:pb + x1], clip)


@njit(cache=True, nogil=True, parallel=True)
def _unpad(src, dst, shape, r, pshape, clip, seg, lo, hi):
    """Copy the interior of padded ``src`` into real-space ``dst``, segments [lo, hi) of
    it: every real row is cut into segments of ``seg`` sites (one segment per row unless
    rows are longer). With ``clip`` every negative value becomes -1. Parallel over
    segments. O(sites)."""
    L = shape[shape.shape[0] - 1]
    spr = (L + seg - 1) // seg
    for ss in prange(lo, hi):
        s = np.int64(ss)
        row = s // spr
        x0 = (s - row * spr) * seg
        _unpad_row(src, dst, row, x0, min(L, x0 + seg), shape, r, pshape, clip)


@njit(cache=True, nogil=True)
def _resolve(p, k, offs, r, shape, pstrides, periodic):
    """Padded index of the k-th stencil neighbour of padded cell ``p`` computed from
    coordinates (wrapping periodic axes), or -1 when it leaves an open axis.
    O(d) divisions; used at portals and when the lattice is not padded."""
    d = shape.shape[0]
    q = 0
    rem = p
    for a in range(d):
        c = rem // pstrides[a]
        rem -= c * pstrides[a]
        c = c - r[a] + offs[k, a]
        n_a = shape[a]
        if c < 0 or c >= n_a:
            if periodic[a]:
                c %= n_a
            else:
                return -1
        q += (c + r[a]) * pstrides[a]
    return q


@njit(cache=True, nogil=True)
def _step(cls, p, k, foff, offs, r, shape, pstrides, periodic, mode):
    """Cell reached from padded cell ``p`` by stencil entry ``k``: a padded index (which
    may hold ``WALL``) or -1 when the step leaves an open axis. ``cls`` is the array
    whose halo cells are marked ``PORTAL``; ``mode`` as in :class:`Plan`. For the cold
    paths (walk-backs); the hot loops spell this out."""
    if mode != 0:
        q = p + foff[k]
        if mode == 2 and cls[q] == PORTAL:
            q = _resolve(p, k, offs, r, shape, pstrides, periodic)
        return q
    return _resolve(p, k, offs, r, shape, pstrides, periodic)


@njit(cache=True, nogil=True)
def _expand(work, src, lo, hi, dst, m, dn, foff, offs, r, shape, pstrides, periodic, mode):
    """Label every unvisited neighbour of ``src[lo:hi]`` with ``dn`` and append it to
    ``dst`` from position ``m``; return the new end. O((hi - lo) k).

    Branch-free claim: each neighbour cell is read, written back (unchanged, or ``dn``
    over ``UNVISITED``), and written to ``dst[m]`` with ``m`` advanced only when it was
    claimed, so ``dst`` needs one spare slot past the last claim. Cell values only ever
    go from ``UNVISITED`` to a distance, which makes the write-back safe when two threads
    expand disjoint frontier slices at once: both may claim one cell (same ``dn``, one
    duplicate entry in the next frontier), nothing else can happen.
    """
    K = foff.shape[0]
    if mode == 1:  # no portals: one addition per step
        for h in range(lo, hi):
            p = src[h]
            for k in range(K):
                q = p + foff[k]
                v = work[q]
                c = v == UNVISITED
                work[q] = dn if c else v
                dst[m] = q
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
def _bfs_queue(work, queue, st, stop, budget, foff, offs, r, shape, pstrides, periodic, mode):
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
                    periodic, mode)
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
                mode):
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
                         periodic, mode)


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
def _bfs_frontiers(work, a, b, st, bufs, cnt, par_min, budget, stop, foff, offs, r, shape,
                   pstrides, periodic, mode):
    """Level-synchronous BFS with two frontier arrays ``a`` and ``b``, resumable.

    ``st = [m, lo, m2, dn, c]``: the current frontier is ``a[:m]`` (``c`` 0) or ``b[:m]``
    (``c`` 1), its cells before ``lo`` are expanded, and the ``m2`` cells they labelled
    ``dn`` are at the start of the other array. Start from ``[m, 0, 0, 1, 0]`` with the
    sources in ``a[:m]``; the search is over when ``m`` is 0. With ``stop >= 0`` it ends
    (``m`` set to 0) after the level that labels ``stop``: every cell nearer than
    ``stop`` then has its final distance, as do the cells at ``stop``'s. Returns after
    about ``budget`` units (at a round or slice boundary, possibly mid-level).

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
                # the whole level: the constant start positions let LLVM specialise
                # the inlined expansion (about 5% faster than the general call below)
                hi = m
                m2 = _expand(work, cur, _ZERO, m, nxt, _ZERO, dn, foff, offs, r, shape, pstrides,
                             periodic, mode)
            else:
                hi = min(m, lo + max((budget - used) // K, 1))
                m2 = _expand(work, cur, lo, hi, nxt, m2, dn, foff, offs, r, shape,
                             pstrides, periodic, mode)
        else:
            hi = min(m, lo + T * chunk)
            _expand_par(work, cur, lo, hi, bufs, cnt, dn, foff, offs, r, shape,
                        pstrides, periodic, mode)
            tot = 0
            for t in range(T):
                tot += cnt[t]
            if m2 + tot > cap:
                m2 = _dedupe_level(work, nxt, m2, bufs, cnt, dn)
            else:
                for t in range(T):
                    # an element loop, not a slice assignment: the shape check of the
                    # latter compiles Numba's string formatting (3 s of a cold start)
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
            if stop >= 0 and work[stop] != UNVISITED:
                m = 0
        if used >= budget:
            break
    st[0] = m
    st[1] = lo
    st[2] = m2
    st[3] = dn
    st[4] = c


@njit(cache=True, nogil=True)
def _walk_hops_part(work, path, m, m_end, nfoff, noffs, r, shape, pstrides, periodic, mode):
    """Steps ``m .. m_end - 1`` of :func:`_walk_back_hops`: ``path[:m]`` is already
    walked, ``path[m]`` becomes the in-neighbour of ``path[m - 1]`` with the smallest
    index whose distance is one less. O((m_end - m) k)."""
    K = nfoff.shape[0]
    v = path[m - 1]
    D = work[v]
    for h in range(m, m_end):
        best = -1
        for k in range(K):
            u = _step(work, v, k, nfoff, noffs, r, shape, pstrides, periodic, mode)
            if u < 0:
                continue
            if work[u] == D - 1 and (best < 0 or u < best):
                best = u
        path[h] = best
        v = best
        D -= 1


@njit(cache=True, nogil=True)
def _walk_back_hops(work, path, nfoff, noffs, r, shape, pstrides, periodic, mode, end):
    """Walk from ``end`` to the source over in-neighbours, each time to the one with the
    smallest index whose distance is one less. Writes end..start into ``path``
    (length work[end] + 1) in one call (the CPU host function calls
    :func:`_walk_hops_part` in chunks instead). O(D k)."""
    D = work[end]
    path[0] = end
    _walk_hops_part(work, path, 1, D + 1, nfoff, noffs, r, shape, pstrides, periodic, mode)
    return D + 1


@njit(cache=True, nogil=True)
def _count_run(work, cnt, queue, buf, st, budget, foff, offs, r, shape, pstrides, periodic,
               mode, dedupe, end):
    """Count shortest hop paths to ``end`` by BFS layer dynamic programming, resumable.

    ``st = [head, tail, limit]``: the FIFO ``queue[head:tail]`` still to expand, and the
    distance of ``end`` once labelled (INT64_MAX before). Start from ``[0, 1, INT64_MAX]``
    with the start cell in ``queue[0]``, its ``work`` 0 and its ``cnt`` 1. Returns after
    about ``budget`` units; done when ``head == tail``, and then ``cnt[end]`` is the count
    if ``work[end] >= 0``. Counts saturate at INT64_MAX; a saturated count means "at
    least INT64_MAX". O(visited * k), plus O(k^2) per site with ``dedupe``, over all calls.
    """
    K = foff.shape[0]
    head = st[0]
    tail = st[1]
    limit = st[2]
    cost = K + 1 + (K * K // 8 if dedupe else 0)
    used = 0
    while head < tail:
        if used >= budget:
            break
        used += cost
        p = queue[head]
        head += 1
        dp = work[p]
        if dp >= limit:
            head = tail
            break
        c = cnt[p]
        dn = dp + 1
        m = 0
        for k in range(K):
            if mode != 0:
                q = p + foff[k]
                if mode == 2 and work[q] == PORTAL:
                    q = _resolve(p, k, offs, r, shape, pstrides, periodic)
            else:
                q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                if q < 0:
                    continue
            if dedupe:
                dup = False
                for t in range(m):
                    if buf[t] == q:
                        dup = True
                        break
                if dup:
                    continue
                buf[m] = q
                m += 1
            v = work[q]
            if v == UNVISITED:
                work[q] = dn
                cnt[q] = c
                queue[tail] = q
                tail += 1
                if q == end:
                    limit = dn
            elif v == dn:
                if cnt[q] > INT64_MAX - c:
                    cnt[q] = INT64_MAX
                else:
                    cnt[q] += c
    st[0] = head
    st[1] = tail
    st[2] = limit


# ---------------------------------------------------------------------------------------
# Dijkstra: a ring of cost buckets in front of a small binary heap
# ---------------------------------------------------------------------------------------

#: The last bucket number of the Dijkstra queue: every cost with ``cost * inv >= _FAR``
#: is in it (no larger float is cast to int64), ordered by the heap alone.
_FAR = 1 << 60
#: First length of the Dijkstra queue's entry arrays (at least twice the sources and
#: stencil); they double whenever one is full.
_QUEUE_CAP0 = 4096


@njit(cache=True, nogil=True, inline="always")
def _bucket(key, inv):
    """Bucket number of a non-negative cost: ``floor(key * inv)``, at most ``_FAR``.

    Monotone in ``key`` (a rounded product with a non-negative constant is, and so is
    the floor), which is all the exactness of the queue rests on: a lower cost never
    gets a later bucket."""
    f = key * inv
    return np.int64(f) if f < _FAR else np.int64(_FAR)


@njit(cache=True, nogil=True)
def _heap_push(hkey, hidx, size, key, idx):
    """Add ``(key, idx)`` to the binary min-heap ``hkey/hidx[:size]``."""
    i = size
    while i > 0:
        par = (i - 1) >> 1
        if hkey[par] <= key:
            break
        hkey[i] = hkey[par]
        hidx[i] = hidx[par]
        i = par
    hkey[i] = key
    hidx[i] = idx


@njit(cache=True, nogil=True)
def _heap_pop(hkey, hidx, size):
    """Remove the root of the binary min-heap ``hkey/hidx[:size]`` (``size > 0``)."""
    size -= 1
    key = hkey[size]
    idx = hidx[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and hkey[c + 1] < hkey[c]:
            c += 1
        if hkey[c] >= key:
            break
        hkey[i] = hkey[c]
        hidx[i] = hidx[c]
        i = c
    hkey[i] = key
    hidx[i] = idx


@njit(cache=True, nogil=True)
def _dijkstra_run(pd, pw, hkey, hidx, okey, oidx, ekey, eidx, enext, ring, st, inv, budget,
                  foff, offs, r, shape, pstrides, periodic, mode, stop):
    """Dijkstra in padded space with a bucketed queue, resumable.

    ``pd`` holds tentative costs (inf = not reached), ``pw`` the cost of entering each
    cell (``WALL``/``PORTAL`` negative). A queue entry is a (cost, cell) pair in bucket
    ``_bucket(cost, inv)``. The entries of the current bucket ``cur`` are in the binary
    heap ``hkey/hidx``; those of a bucket ``b`` with ``cur < b < cur + len(ring)`` in
    the list that ``ring[b % len(ring)]`` heads (linked through ``enext``, entry ``e``
    holding ``ekey[e], eidx[e]``); later ones in the binary heap ``okey/oidx`` (the
    overflow). A cell is queued again each time its cost drops, the older entry left
    where it is: an entry whose cost is above the cell's ``pd`` is stale and dropped
    where it is met.

    ``st = [cur, heap size, ring entries, free-list head, entries ever used, overflow
    size, stop settled]``; all arrays of entries have one length. With ``stop >= 0`` it
    stops once every cell with cost <= cost(stop) is settled, so those costs equal a
    full run's. Returns after about ``budget`` units: 0 (call again), 1 (done) or 2
    (call again with all entry arrays longer, their first entries kept).

    Entries leave the heap in order of cost, and a bucket only after all earlier ones
    (:func:`_bucket` is monotone, and no relaxation gives a cost below the one being
    settled), so cells are settled in non-decreasing cost as by any Dijkstra.
    O((n + e) log n) over all calls if every cost falls in one bucket; with the bucket
    width the host picks, the heap holds a few entries at a time.
    """
    K = foff.shape[0]
    nb = ring.shape[0]
    mask = nb - 1
    cap = ekey.shape[0]
    limit = pd[stop] if stop >= 0 and st[6] != 0 else np.inf
    cost = K + _HEAP_COST
    used = 0
    hs = st[1]
    cur = st[0]
    while used < budget:
        if hs == 0:  # the next non-empty bucket becomes the heap
            if st[2] == 0:
                if st[5] > cap:
                    break  # the overflow might not fit into the entries
                u = _dijkstra_refill(pd, okey, oidx, ekey, eidx, enext, ring, st, inv)
                if u < 0:
                    st[1] = 0
                    return 1
                used += u
                cur = st[0]
            while True:  # the ring holds an entry, so this ends within len(ring) slots
                cur += 1
                used += 1
                e = ring[cur & mask]
                if e >= 0:
                    break
            ring[cur & mask] = -1
            while e >= 0:
                q = eidx[e]
                if ekey[e] == pd[q]:  # else stale
                    _heap_push(hkey, hidx, hs, ekey[e], q)
                    hs += 1
                    if mode != 0:
                        _prefetch_around(pd, pw, q, foff)
                st[2] -= 1
                nxt = enext[e]
                enext[e] = st[3]  # to the free list
                st[3] = e
                used += 1
                e = nxt
            st[0] = cur
            continue
        if hs + K > cap or st[2] + K > cap or st[5] + K > cap:
            break  # no room for K more entries
        p = hidx[0]
        dp = hkey[0]
        _heap_pop(hkey, hidx, hs)
        hs -= 1
        if mode != 0 and hs > 0:
            _prefetch_around(pd, pw, hidx[0], foff)
        if dp != pd[p]:
            used += 1  # stale
            continue
        if dp > limit:
            st[1] = hs
            return 1
        used += cost
        if p == stop:
            limit = dp
            st[6] = 1
        for k in range(K):
            if mode != 0:
                q = p + foff[k]
                w = pw[q]
                if mode == 2 and w == PORTAL:
                    q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                    w = pw[q]
            else:
                q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                if q < 0:
                    continue
                w = pw[q]
            if w < 0:
                continue
            nd = dp + w
            if nd < pd[q]:
                pd[q] = nd
                b = _bucket(nd, inv)
                if b == cur:
                    _heap_push(hkey, hidx, hs, nd, q)
                    hs += 1
                elif b - cur < nb:
                    _ring_add(ekey, eidx, enext, ring, st, b & mask, nd, q)
                else:
                    _heap_push(okey, oidx, st[5], nd, q)
                    st[5] += 1
    st[1] = hs
    return 0 if used >= budget else 2


@njit(cache=True, nogil=True)
def _walk_dag_part(pd, pw, depth, path, m, budget, nfoff, noffs, r, shape, pstrides, periodic,
                   mode, start):
    """Continue the walk back whose sites so far are ``path[:m]`` (end first) over the
    shortest-path DAG (see :func:`weighted_walk`): from ``v``, to the in-neighbour ``u``
    of smallest index with a tight step ``u -> v`` that rises in cost or, where ``v`` has
    a plateau depth ``> 0`` in ``depth``, one that comes from depth ``depth[v] - 1``.

    The stencil steps are spelled out here and in :func:`_plateau_part` (a call of
    :func:`_step`, even inlined, made these loops about 5x slower).

    Returns ``(m, status)`` after about ``budget`` units: status 0 (call again), 1
    (``path[m - 1]`` is ``start``), 2 (``path[m - 1]`` has no rising tight step and no
    depth yet: compute its plateau's depths with :func:`_plateau_part`, then call again)
    or 3 (no step into ``path[m - 1]``: the costs are inconsistent)."""
    K = nfoff.shape[0]
    used = 0
    v = path[m - 1]
    while v != start:
        if used >= budget:
            return m, 0
        used += K + _LEVEL_COST
        dv = pd[v]
        wv = pw[v]
        hv = depth[v] if depth.shape[0] else -1
        best = -1
        for k in range(K):
            if mode == 0:
                u = _resolve(v, k, noffs, r, shape, pstrides, periodic)
                if u < 0:
                    continue
            else:
                u = v + nfoff[k]
                if mode == 2 and pw[u] == PORTAL:
                    u = _resolve(v, k, noffs, r, shape, pstrides, periodic)
            if pw[u] < 0 or pd[u] + wv != dv:
                continue
            if hv > 0:
                ok = pd[u] == dv and depth[u] == hv - 1
            else:
                ok = pd[u] < dv
            if ok and (best < 0 or u < best):
                best = u
        if best < 0:
            return m, (2 if hv == -1 else 3)
        path[m] = best
        m += 1
        v = best
    return m, 1


@njit(cache=True, nogil=True)
def _plateau_part(pd, pw, depth, members, queue, st, budget, start, foff, offs, nfoff, noffs,
                  r, shape, pstrides, periodic, mode):
    """Plateau depths (see :func:`weighted_walk`) for the sites from which a path of
    plateau steps leads to ``members[0]``, resumable. ``depth`` is -1 where unknown.

    ``st = [phase, i, m, j, t]``. Phase 0 collects those sites into ``members[:m]``
    (marked -2 in ``depth``) by a search back over plateau steps from ``members[0]``;
    phase 1 gives depth 0 to ``start`` and to the members entered by a tight step that
    rises in cost, queueing them in ``queue``; phase 2 searches forward from them over
    plateau steps among the members, each one deeper than its parent (``queue[j:t]``
    still to expand). A shallowest plateau path into a member only passes through
    members, so its depth is the one a search over the whole plateau gives. Returns 1
    when done, 0 to be called again (about ``budget`` units a call). O(members k)."""
    K = foff.shape[0]
    c = pd[members[0]]
    used = 0
    phase, i, m, j, t = st[0], st[1], st[2], st[3], st[4]
    while used < budget:
        if phase == 0:
            if i == m:
                phase, i = 1, 0
                continue
            x = members[i]
            i += 1
            used += K
            if c + pw[x] != c:
                continue  # entering x changes the cost: no plateau step into it
            for k in range(K):
                if mode == 0:
                    u = _resolve(x, k, noffs, r, shape, pstrides, periodic)
                    if u < 0:
                        continue
                else:
                    u = x + nfoff[k]
                    if mode == 2 and pw[u] == PORTAL:
                        u = _resolve(x, k, noffs, r, shape, pstrides, periodic)
                if pw[u] >= 0 and depth[u] == -1 and pd[u] == c:
                    depth[u] = -2
                    members[m] = u
                    m += 1
        elif phase == 1:
            if i == m:
                phase = 2
                continue
            x = members[i]
            i += 1
            used += K
            entry = x == start
            for k in range(K):
                if entry:
                    break
                if mode == 0:
                    u = _resolve(x, k, noffs, r, shape, pstrides, periodic)
                    if u < 0:
                        continue
                else:
                    u = x + nfoff[k]
                    if mode == 2 and pw[u] == PORTAL:
                        u = _resolve(x, k, noffs, r, shape, pstrides, periodic)
                if pw[u] >= 0 and pd[u] < c and pd[u] + pw[x] == c:
                    entry = True
            if entry:
                depth[x] = 0
                queue[t] = x
                t += 1
        else:
            if j == t:
                st[0], st[1], st[2], st[3], st[4] = phase, i, m, j, t
                return 1
            x = queue[j]
            j += 1
            used += K
            for k in range(K):
                if mode == 0:
                    y = _resolve(x, k, offs, r, shape, pstrides, periodic)
                    if y < 0:
                        continue
                else:
                    y = x + foff[k]
                    if mode == 2 and pw[y] == PORTAL:
                        y = _resolve(x, k, offs, r, shape, pstrides, periodic)
                if pw[y] >= 0 and depth[y] == -2 and pd[y] == c and c + pw[y] == c:
                    depth[y] = depth[x] + 1
                    queue[t] = y
                    t += 1
    st[0], st[1], st[2], st[3], st[4] = phase, i, m, j, t
    return 0


def weighted_walk(pd, pw, ps, pe, n_open, geo, ngeo) -> np.ndarray:
    """The shortest path ``ps .. pe`` (padded or, with mode 0 tables, plain indices) on
    the costs ``pd`` of a search from ``ps``; ``pw`` the entry weights (negative on walls
    and portals), ``geo``/``ngeo`` the stencil tables forward and negated.

    The tie rule, shared with the numpy reference (``backends._common.plateau_depths``,
    where the definitions are): a step u -> v is tight when ``pd[u] + pw[v] == pd[v]``
    in float64; a tight step with ``pd[u] == pd[v]`` (a zero weight, or one too small to
    change the sum) is a plateau step; the depth of ``ps`` and of every site entered by
    a rising tight step is 0, any other site's is one more than its shallowest plateau
    in-neighbour's. The walk goes from ``pe`` to the in-neighbour of smallest index
    along a rising tight step, or along a plateau step from one level shallower: the
    shortest-path DAG, so it always ends, on a simple path whose float64 cost in path
    order is ``pd[pe]``. Depths are computed only for the plateaus the walk meets
    (:func:`_plateau_part`), so lattices without them pay nothing for them. Only costs
    ``<= pd[pe]`` are read: a search stopped once those are final is enough.
    O(visited k); kernel calls of about ``_BUDGET`` units.
    """
    path = np.empty(max(n_open, 1), dtype=np.int64)
    path[0] = pe
    m = 1
    depth = np.empty(0, dtype=np.int64)
    budget = _BUDGET
    while True:
        m, status = _walk_dag_part(pd, pw, depth, path, m, budget, *ngeo, ps)
        if status == 1:
            return path[:m][::-1]
        if status == 3:
            raise AssertionError(f"weighted walk: no shortest-path step into cell {path[m - 1]}")
        if status == 2:
            if depth.shape[0] == 0:  # the first plateau met: room for the depths
                depth = _filled(pd.shape[0], -1, np.int64)
                members = np.empty(max(n_open, 1), dtype=np.int64)
                queue = np.empty(max(n_open, 1), dtype=np.int64)
            members[0] = path[m - 1]
            depth[members[0]] = -2
            st = np.array([0, 0, 1, 0, 0], dtype=np.int64)
            while not _plateau_part(pd, pw, depth, members, queue, st, budget, ps, *geo[:2],
                                    *ngeo[:2], *geo[2:]):
                pass
            if depth[members[0]] <= 0:
                raise AssertionError(f"weighted walk: cell {members[0]} has no plateau depth")


@intrinsic
def _prefetch(typingctx, arr, i):
    """Start loading ``arr[i]`` into the CPU caches (``llvm.prefetch``, read, keep). A
    hint only: it never faults, so ``i`` may be out of range."""
    from llvmlite import ir
    from numba.core import cgutils, types

    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        idx = context.cast(builder, args[1], sig.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [idx])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, i), codegen


@njit(cache=True, nogil=True)
def _prefetch_around(pd, pw, p, foff):
    """Prefetch the cost and weight of each padded neighbour of ``p``. The Dijkstra does
    it a few pops ahead (for the entries of a new bucket and for the next heap root),
    as it mostly waits on memory: a field from a corner, weights uniform in [1, 4),
    took 113 ms at 128^3 and 1.31 s at 256^3 with it, 120 ms and 1.88 s without
    (medians of 5, interleaved, on the project's 2-core machine)."""
    for k in range(foff.shape[0]):
        _prefetch(pd, p + foff[k])
        _prefetch(pw, p + foff[k])


@njit(cache=True, nogil=True)
def _ring_add(ekey, eidx, enext, ring, st, s, key, q):
    """Queue ``(key, q)`` in ring slot ``s`` of :func:`_dijkstra_run`'s queue, in the
    free list's first entry or else a new one (the caller makes sure one is left)."""
    e = st[3]
    if e >= 0:
        st[3] = enext[e]
    else:
        e = st[4]
        st[4] = e + 1
    ekey[e] = key
    eidx[e] = q
    enext[e] = ring[s]
    ring[s] = e
    st[2] += 1


@njit(cache=True, nogil=True)
def _dijkstra_refill(pd, okey, oidx, ekey, eidx, enext, ring, st, inv):
    """Refill the empty ring of :func:`_dijkstra_run`'s queue from its overflow: the
    overflow's buckets that fit into the ring, from its lowest (which needs as many free
    entries as the overflow holds), the stale entries dropped; that bucket minus one
    becomes current. Returns the units done (one per entry moved), or -1 when the
    queue is empty. O(entries moved * log(overflow))."""
    nb = ring.shape[0]
    mask = nb - 1
    used = 0
    os = st[5]
    while os > 0 and okey[0] != pd[oidx[0]]:  # stale
        _heap_pop(okey, oidx, os)
        os -= 1
        used += 1
    if os == 0:
        st[5] = 0
        return -1
    lo = _bucket(okey[0], inv)
    while os > 0:
        key = okey[0]
        q = oidx[0]
        b = _bucket(key, inv)
        if b - lo >= nb:
            break
        _heap_pop(okey, oidx, os)
        os -= 1
        used += 1
        if key == pd[q]:
            _ring_add(ekey, eidx, enext, ring, st, b & mask, key, q)
    st[5] = os
    st[0] = lo - 1
    return used


@njit(cache=True, nogil=True, parallel=True)
def _closeness_run(work_t, queue_t, st_t, psrc, out, n_open, budget, foff, offs, r, shape,
                   pstrides, periodic, mode):
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
            used += _bfs_queue(work, queue, q, -1, budget - used, foff, offs, r, shape,
                               pstrides, periodic, mode)
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
# Real-space kernels: row targets, components, degree, catalytic path
# ---------------------------------------------------------------------------------------


# A row is a line along the last axis; rows are numbered in C order over the other axes.
# The row passes below keep the current row's coordinates (one division per axis at the
# start of a pass, then an odometer step per row) and find a neighbour row with
# multiplications only: a division per axis per offset per row cost about a third of a
# 3-D labelling.


@njit(cache=True, nogil=True, inline="always")
def _row_coords(row, shape, c):
    """Write the coordinates of ``row`` (over all axes but the last) into ``c``."""
    for a in range(c.shape[0] - 1, -1, -1):
        c[a] = row % shape[a]
        row //= shape[a]


@njit(cache=True, nogil=True, inline="always")
def _next_row(c, shape):
    """Advance the row coordinates ``c`` by one row (C order)."""
    a = c.shape[0] - 1
    while a >= 0:
        c[a] += 1
        if c[a] < shape[a]:
            return
        c[a] = 0
        a -= 1


@njit(cache=True, nogil=True, inline="always")
def _row_target(c, o, shape, periodic):
    """Row reached by offset ``o`` from the row at coordinates ``c``, with periodic wrap,
    or -1 when it leaves an open axis. A modulo only when a periodic axis wraps."""
    t = 0
    for a in range(c.shape[0]):
        n_a = shape[a]
        x = c[a] + o[a]
        if x < 0 or x >= n_a:
            if periodic[a]:
                x %= n_a
            else:
                return -1
        t = t * n_a + x
    return t


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
    invariant holds and no separate find is needed. On 256x256 lattices (p = 0.6) it
    cut the union phase of the labelling by 40% against find-find-link with path
    halving."""
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

    The same loop twice: from a constant 0 LLVM unrolls it further, 20% faster on the
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


@njit(cache=True, nogil=True)
def _chunk_bounds(nrow, T, t):
    return nrow * t // T, nrow * (t + 1) // T


@njit(cache=True, nogil=True)
def _window(nrow, T, t, s, w):
    """Rows of window ``s`` (``w`` rows each) of chunk ``t`` of ``T``: a call of a row
    kernel does one window of every chunk, so its host function can return to Python
    between calls while the chunks (and the work each thread does) stay those of one
    whole pass. Returns (chunk start, chunk end, window start, window end)."""
    lo, hi = _chunk_bounds(nrow, T, t)
    a = min(hi, lo + s * w)
    return lo, hi, a, min(hi, a + w)


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
            # the whole chunk in one window (lattices under _BUDGET sites): passing the
            # same values twice lets LLVM specialise the call, 1-3% faster
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
                                                          re, row_ptr[row], True)
    n_runs = row_ptr[nrow]
    lab[0] = -1
    for a in range(n_runs):
        lab[a + 1] = a
    rp = lab[1:n_runs + 1]
    _runs_union_rows(rp, rs, re, row_ptr, _ZERO, nrow, _ZERO, nrow, _NO, half, shape,
                     periodic)
    count = _relabel(rp, 0, n_runs, 0)
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
                deg[i] = neighbors_into(i, shape, strides, periodic, offs, open_, True, buf)


@njit(cache=True, nogil=True)
def _coords(p, strides, c):
    rem = p
    for a in range(strides.shape[0]):
        q = rem // strides[a]
        rem -= q * strides[a]
        c[a] = q


@njit(cache=True, nogil=True)
def _from_coords(c, k, offs, shape, strides, periodic, open_):
    """Neighbour of the site at coordinates ``c`` along stencil entry ``k`` (as
    ``_lattice.neighbor``), or -1."""
    j = 0
    for a in range(shape.shape[0]):
        x = c[a] + offs[k, a]
        n_a = shape[a]
        if x < 0 or x >= n_a:
            if periodic[a]:
                x %= n_a
            else:
                return -1
        j += x * strides[a]
    if open_.shape[0] != 0 and open_[j] == 0:
        return -1
    return j


@njit(cache=True, nogil=True)
def _catalytic_bfs(state, queue, c, st, budget, end, offs, shape, strides, periodic, open_):
    """BFS whose only per-site state is ``state[i]`` = 0 (unvisited) or 1 + dist mod 3,
    resumable.

    ``st = [head, tail, level_end, level, dist]``: the FIFO ``queue[head:tail]`` still to
    expand, the queue position where level ``level + 1`` starts, and dist(start, end)
    once found (-1 before). Start from ``[0, 1, 1, 0, -1]`` with ``state[:n]`` zeroed,
    ``state[start]`` 1 and ``queue[0] = start``. Returns after about ``budget`` units;
    done when ``head == tail``, with ``dist`` -1 when ``end`` is unreachable.
    O(visited * k d) over all calls.
    """
    K = offs.shape[0]
    head = st[0]
    tail = st[1]
    level_end = st[2]
    level = st[3]
    cost = K * 2 + 1
    used = 0
    while head < tail:
        if used >= budget:
            break
        used += cost
        if head == level_end:
            level += 1
            level_end = tail
        p = queue[head]
        head += 1
        nxt = 1 + (level + 1) % 3
        _coords(p, strides, c)
        for k in range(K):
            j = _from_coords(c, k, offs, shape, strides, periodic, open_)
            if j < 0 or state[j] != 0:
                continue
            state[j] = nxt
            queue[tail] = j
            tail += 1
            if j == end:
                st[4] = level + 1
                head = tail
                break
    st[0] = head
    st[1] = tail
    st[2] = level_end
    st[3] = level


@njit(cache=True, nogil=True)
def _catalytic_walk(state, path, c, D, m, m_end, noffs, shape, strides, periodic, open_):
    """Steps ``m .. m_end - 1`` of the walk from ``path[0]`` = ``end`` (distance D) back
    to the source: each time to the smallest-index in-neighbour whose state says the
    distance one less (mod 3). Writes end..start into ``path[:D + 1]`` over calls with
    consecutive ranges from m = 1. O((m_end - m) k d)."""
    K = noffs.shape[0]
    v = path[m - 1]
    for h in range(m, m_end):
        want = 1 + (D - h) % 3
        _coords(v, strides, c)
        best = -1
        for k in range(K):
            u = _from_coords(c, k, noffs, shape, strides, periodic, open_)
            if u >= 0 and state[u] == want and (best < 0 or u < best):
                best = u
        path[h] = best
        v = best


# ---------------------------------------------------------------------------------------
# Host functions
# ---------------------------------------------------------------------------------------


def _segments(nrow, row_len):
    """Cut ``nrow`` rows of ``row_len`` cells into segments of at most ``_BUDGET`` cells
    (whole rows unless they are longer) and group them into kernel calls of about
    ``_BUDGET`` cells, so signal handlers run between calls. Returns the segment length
    and the (first, end) segment range of each call."""
    seg = max(1, min(int(row_len), _BUDGET))
    nseg = nrow * -(-int(row_len) // seg)
    step = max(1, _BUDGET // seg)
    return seg, [(a, min(nseg, a + step)) for a in range(0, nseg, step)]


def _interior(a, g: Plan) -> np.ndarray:
    """The real sites of the flat padded array ``a``, as a d-dimensional view."""
    return a.reshape(tuple(g.pshape))[tuple(slice(r, r + s) for r, s in zip(g.r, g.shape))]


def _fill_small(out, vals, g: Plan, open_val, wall_val, portal_val):
    """What :func:`_fill_padded` writes, in NumPy: every cell a portal, then the halo
    slabs of the open axes walls (a cell outside an open axis is a wall whatever the
    other axes say), then the real sites. Single-threaded; for small lattices."""
    d = g.shape.shape[0]
    full = out.reshape(tuple(g.pshape))
    full[...] = portal_val
    for a in range(d):
        ra = int(g.r[a])
        if ra and not g.periodic[a]:
            cut = [slice(None)] * d
            cut[a] = slice(0, ra)
            full[tuple(cut)] = wall_val
            cut[a] = slice(ra + int(g.shape[a]), None)
            full[tuple(cut)] = wall_val
    inner = _interior(out, g)
    shape = tuple(g.shape)
    has_mask = g.open_.shape[0] != 0
    if vals.shape[0]:
        np.copyto(inner, vals.reshape(shape))
        if has_mask:
            np.copyto(inner, wall_val, where=g.open_.reshape(shape) == 0)
    elif has_mask:
        # wall_val + open * (open_val - wall_val), in the type of ``out``
        t = out.dtype.type
        np.multiply(g.open_.reshape(shape), t(open_val - wall_val), out=inner)
        inner += t(wall_val)
    else:
        inner[...] = open_val


def _unpad_small(src, dst, g: Plan, clip):
    """What :func:`_unpad` writes, in NumPy (``dst`` contiguous). Single-threaded."""
    dst_nd = dst.reshape(tuple(g.shape))
    np.copyto(dst_nd, _interior(src, g))
    if clip:
        np.maximum(dst, -1, out=dst)


# Below this many padded cells the padded layout is written and read back by NumPy
# instead of the parallel kernels :func:`_fill_padded` and :func:`_unpad`: on a 64^3
# lattice that is 0.1 ms slower per search (1.7 ms), and a first call in a fresh
# process does not compile those kernels (2 s of its 5 s on an empty Numba cache).
_SMALL_LAYOUT = 1 << 19


def _fill_classes(out, vals, g: Plan, open_val, wall_val, portal_val):
    """:func:`_fill_padded` over the whole padded array, in calls of about ``_BUDGET``
    cells (NumPy below ``_SMALL_LAYOUT`` cells)."""
    if g.psize < _SMALL_LAYOUT:
        return _fill_small(out, vals, g, open_val, wall_val, portal_val)
    PL = int(g.pshape[-1])
    seg, calls = _segments(out.shape[0] // PL if PL else 0, PL)
    for a, b in calls:
        _fill_padded(out, vals, g.open_, open_val, wall_val, portal_val, g.shape, g.periodic,
                     g.r, g.pshape, seg, a, b)


def _unpad_all(src, dst, g: Plan, clip):
    """:func:`_unpad` over the whole lattice, in calls of about ``_BUDGET`` sites (NumPy
    below ``_SMALL_LAYOUT`` padded cells)."""
    if g.psize < _SMALL_LAYOUT:
        return _unpad_small(src, dst, g, clip)
    L = int(g.shape[-1])
    seg, calls = _segments(g.n // L if L else 0, L)
    for a, b in calls:
        _unpad(src, dst, g.shape, g.r, g.pshape, clip, seg, a, b)


def _filled(size, value, dtype) -> np.ndarray:
    """``np.full(size, value, dtype)`` filled in slices of ``_BUDGET`` entries (one
    NumPy fill of a 1e9-entry array takes seconds and is not interruptible)."""
    out = np.empty(size, dtype=dtype)
    step = max(_BUDGET, 1)
    for a in range(0, size, step):
        out[a:a + step] = value
    return out


def _arange(start, stop, dtype) -> np.ndarray:
    """``np.arange(start, stop, dtype=dtype)``, in slices of ``_BUDGET`` entries when
    longer."""
    size = stop - start
    step = max(_BUDGET, 1)
    if size <= step:
        return np.arange(start, stop, dtype=dtype)
    out = np.empty(size, dtype=dtype)
    for a in range(0, size, step):
        b = min(size, a + step)
        out[a:b] = np.arange(start + a, start + b, dtype=dtype)
    return out


def _work_array(g: Plan, open_val=UNVISITED) -> np.ndarray:
    work = np.empty(g.psize, dtype=g.itype)
    empty = np.empty(0, dtype=g.itype)
    t = g.itype
    _fill_classes(work, empty, g, t(open_val), t(WALL), t(PORTAL))
    return work


def _geo(g: Plan):
    return (g.foff, g.offs, g.r, g.shape, g.pstrides, g.periodic, g.mode)


def _ngeo(g: Plan):
    return (g.nfoff, g.noffs, g.r, g.shape, g.pstrides, g.periodic, g.mode)


def _hop_search(g: Plan, psrc, stop=-1):
    """BFS from padded sources ``psrc`` (ending after ``stop``'s level, see
    :func:`_bfs_frontiers`), wide levels on all of Numba's threads, in calls of about
    ``_BUDGET`` units; returns the padded distance array."""
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
    geo = _geo(g)
    par_min = _PAR_MIN
    budget = _BUDGET
    if stop >= 0 and work[stop] == 0:  # a source: nothing to search
        return work
    while st[0] > 0:
        _bfs_frontiers(work, cur, nxt, st, bufs, cnt, par_min, budget, stop, *geo)
    return work


# Frontier sizes for the parallel BFS: below _PAR_MIN cells a level is expanded by one
# thread (a parallel launch costs a few microseconds); _PAR_CHUNK cells per thread per round.
_PAR_MIN = 1024
_PAR_CHUNK = 8192


def bfs_distance(shape, periodic, offsets, open_, dedupe, sources) -> np.ndarray:
    """Multi-source hop distances.

    Parameters
    ----------
    shape : array_like of int, (d,)
    periodic : array_like of uint8, (d,)
    offsets : ndarray of int64, (k, d)
    open_ : ndarray of uint8, (n,) or (0,)
    dedupe : bool
        Unused: duplicate neighbours and self-loops cannot change a BFS distance.
    sources : array_like of int
        Flat indices of open source sites (distance 0).

    Returns
    -------
    ndarray of int64, (n,)
        Hops from the nearest source; -1 for unreachable and blocked sites.

    Notes
    -----
    Level-synchronous BFS in the padded index space, O(n k) time. Levels of at least
    ``_PAR_MIN`` cells are split over Numba's threads; distances do not depend on
    their number. Memory: the int32 padded work
    array, two int32 frontier arrays of n_open entries, then the int64 result: at most
    12 bytes per site at once (int64 work and frontiers past 2**31 padded cells).

    The search runs in kernel calls of about ``_BUDGET`` units (neighbour visits), also
    splitting wide levels, so a signal handler (Ctrl-C) runs within one call (5-60 ms
    measured, longer while fresh memory is first written) and its exception leaves this
    function; see "Interrupts" in the module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> bfs_distance((2, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False, [0])
    array([0, 1, 2, 1, 2, 3])
    """
    g = make_plan(shape, periodic, offsets, open_)
    work = _hop_search(g, _to_padded(sources, g))
    out = np.empty(g.n, dtype=np.int64)
    _unpad_all(work, out, g, True)
    return out


def _bucket_scale(g: Plan, weights) -> tuple[float, int]:
    """``(inv, ring length)`` for :func:`_dijkstra_run`'s queue. They only set its speed:
    every choice settles cells in non-decreasing cost.

    A bucket is ``1 / inv`` wide: the largest of about 4096 sampled weights over
    ``per``, the power of two at or below half the wave front (estimated as the open
    sites over the longest axis: the cross-section of a box), so that a bucket holds
    a few of the queued entries; the ring spans two such weights, and later costs
    wait in the overflow. A field from a corner of a cube, weights uniform
    in [1, 4), medians of 5 interleaved: at 128^3 (``per`` 8192) 110 ms, with 2048
    123 ms, 32768 118 ms, 65536 123 ms; at 256^3 (``per`` 32768) 1.24 s, with 2048
    1.43 s, 8192 1.32 s, 65536 1.71 s. Below a front of 16 sites (chains, strips), and
    without a positive finite sample (all zero, say), ``inv`` is 0 and the heap alone
    orders every cost: on a chain of 4e6 sites the ring took twice the time."""
    wave = max(g.n_open, 1) / max(int(g.shape.max()), 1)
    if wave < 16:
        return 0.0, 2
    per = 1 << int(min(16, math.log2(wave / 2)))
    sample = weights[:: max(1, weights.shape[0] // 4096)]
    wmax = float(sample.max()) if sample.shape[0] else 0.0
    inv = per / wmax if wmax > 0 else 0.0
    return (inv if math.isfinite(inv) else 0.0), 2 * per


def _longer(a, used):
    """A copy of ``a`` twice as long, the first ``used`` entries kept."""
    out = np.empty(2 * a.shape[0], dtype=a.dtype)
    out[:used] = a[:used]
    return out


def _weighted_search(g: Plan, weights, psrc, stop=-1):
    """Dijkstra from padded sources; returns (padded costs, padded entry weights).

    The costs are those of any float64 Dijkstra (the indexed binary heap this queue
    replaced, SciPy's), bit for bit, whatever order it settles equal costs in. Each
    ends with ``D(v) = min fl(D(u) + w[v])`` over the in-neighbours ``u`` (0 at
    sources). Were ``D1(v) < D2(v)`` for two of them, take the first cell ``x`` with
    ``D1(x) < D2(x)`` on the path that gave ``v`` its cost in the first: its
    predecessor ``u`` has ``D2(u) <= D1(u)``, and ``fl(a + w)`` does not decrease with
    ``a``, so ``D2(x) <= fl(D2(u) + w[x]) <= fl(D1(u) + w[x]) = D1(x)``, a
    contradiction. With ``stop`` the same holds for every cell with cost <= cost(stop),
    which is all the walk back from ``stop`` reads.
    """
    wf = np.ascontiguousarray(weights, dtype=np.float64)
    pw = np.empty(g.psize, dtype=np.float64)
    _fill_classes(pw, wf, g, 0.0, float(WALL), float(PORTAL))
    pd = _filled(g.psize, np.inf, np.float64)
    inv, nring = _bucket_scale(g, wf)
    ring = np.full(nring, -1, dtype=np.int64)
    psrc = np.unique(np.asarray(psrc, dtype=np.int64))
    m = psrc.shape[0]
    cap = max(_QUEUE_CAP0, 2 * (m + g.offs.shape[0]))
    # heap, overflow heap, ring entries: (cost, cell) pairs, the ring's linked
    ent = [np.empty(cap, dtype=t) for t in (np.float64, g.itype) * 3] + [
        np.empty(cap, dtype=np.int64)]
    pd[psrc] = 0.0
    ent[0][:m] = 0.0  # all keys equal: already a heap, of bucket 0
    ent[1][:m] = psrc
    st = np.array([0, m, 0, -1, 0, 0, 0], dtype=np.int64)
    geo = _geo(g)
    budget = _BUDGET
    while True:
        rc = _dijkstra_run(pd, pw, *ent, ring, st, inv, budget, *geo, stop)
        if rc == 1:
            return pd, pw
        if rc == 2:
            ent = [_longer(a, k) for a, k in zip(ent, st[[1, 1, 5, 5, 4, 4, 4]])]


def dijkstra_distance(shape, periodic, offsets, open_, dedupe, weights, sources) -> np.ndarray:
    """Multi-source weighted distances, where entering site v costs ``weights[v]``.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    weights : ndarray of float64, (n,)
        Non-negative cost of entering each site.
    sources : array_like of int
        Flat indices of open source sites (cost 0).

    Returns
    -------
    ndarray of float64, (n,)
        Least cost from the nearest source; inf for unreachable and blocked sites.

    Notes
    -----
    Dijkstra whose queue is a ring of cost buckets in front of a binary heap that holds
    the current bucket only (see :func:`_dijkstra_run`); the costs are those of any
    float64 Dijkstra, bit for bit. O((n + e) log n) time at worst (every cost in one
    bucket), near O(n + e) when the weights spread the costs over the buckets. Memory:
    16 bytes per padded cell, plus 44 (56 with int64 indices) per queue slot, of which
    there are at most twice as many as entries were ever queued at once (about the
    wave front). Runs in kernel calls of about ``_BUDGET`` units, so a signal handler
    (Ctrl-C) runs between two of them; see "Interrupts" in the module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> dijkstra_distance((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False,
    ...                   np.array([5.0, 1.0, 2.0, 0.5]), [0])
    array([0. , 1. , 3. , 3.5])
    """
    g = make_plan(shape, periodic, offsets, open_)
    pd, _ = _weighted_search(g, weights, _to_padded(sources, g))
    out = np.empty(g.n, dtype=np.float64)
    _unpad_all(pd, out, g, False)
    return out


def shortest_path(shape, periodic, offsets, open_, dedupe, start, end, weights=None) -> np.ndarray:
    """One shortest path from ``start`` to ``end``, chosen by the project-wide tie rule.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    start, end : int
        Flat indices of open sites.
    weights : ndarray of float64, (n,), optional
        Cost of entering each site; hop counts when None.

    Returns
    -------
    ndarray of int64
        Flat indices start..end; length 0 when ``end`` is unreachable.

    Notes
    -----
    Distances from ``start`` (the search stops once ``end``'s distance is final), then a
    walk back from ``end``: at site v with distance D it moves to the in-neighbour u of
    smallest flat index with dist[u] == D - 1 (hops), or along an edge of the weighted
    shortest-path DAG (:func:`weighted_walk`: a tight step dist[u] + weights[v] ==
    dist[v] that rises in cost, or one of equal cost, which zero or below-rounding
    weights make, from one plateau level shallower). O(n k) hops, O((n + e) log n)
    weighted. The search and the walk run in kernel calls of about
    ``_BUDGET`` units, so a signal handler (Ctrl-C) runs between two of them; see
    "Interrupts" in the module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> shortest_path((3, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False, 0, 8)
    array([0, 1, 2, 5, 8])
    """
    g = make_plan(shape, periodic, offsets, open_)
    ps, pe = _to_padded([start, end], g)
    ngeo = _ngeo(g)
    budget = _BUDGET
    if weights is None:
        work = _hop_search(g, [ps], stop=pe)
        D = int(work[pe])
        if D < 0:
            return np.empty(0, dtype=np.int64)
        path = np.empty(D + 1, dtype=np.int64)
        path[0] = pe
        step = max(1, budget // (g.offs.shape[0] + _LEVEL_COST))  # a step costs a level
        for a in range(1, D + 1, step):
            _walk_hops_part(work, path, a, min(D + 1, a + step), *ngeo)
        return _to_real(path[::-1], g)
    pd, pw = _weighted_search(g, weights, [ps], stop=pe)
    if not np.isfinite(pd[pe]):
        return np.empty(0, dtype=np.int64)
    return _to_real(weighted_walk(pd, pw, ps, pe, g.n_open, _geo(g), ngeo), g)


def count_shortest_paths(shape, periodic, offsets, open_, dedupe, start, end):
    """Number of distinct shortest hop paths from ``start`` to ``end``.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance`; ``dedupe`` matters here (a duplicated
        neighbour must not count twice).
    start, end : int
        Flat indices of open sites.

    Returns
    -------
    count : int
        The number of paths (0 when unreachable); meaningless when ``overflowed``.
    overflowed : bool
        True when the count at ``end`` reached 2**63 - 1 (counts saturate there, so a
        large count elsewhere that does not reach ``end`` does not raise it); the caller
        then recomputes exactly.

    Notes
    -----
    BFS layer dynamic programming, stopping after the layer before ``end``:
    O(n k) time (O(n k^2) with ``dedupe``), int32 distances and int64 counts per cell.
    Runs in kernel calls of about ``_BUDGET`` units, so a signal handler (Ctrl-C) runs
    between two of them; see "Interrupts" in the module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> count_shortest_paths((3, 4), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8),
    ...                      False, 0, 11)
    (10, False)
    """
    if start == end:
        return 1, False
    g = make_plan(shape, periodic, offsets, open_)
    ps, pe = _to_padded([start, end], g)
    work = _work_array(g)
    cnt = np.empty(g.psize, dtype=np.int64)
    queue = np.empty(max(g.n_open, 1), dtype=g.itype)
    buf = np.empty(max(g.offs.shape[0], 1), dtype=np.int64)
    work[ps] = 0
    cnt[ps] = 1
    queue[0] = ps
    st = np.array([0, 1, INT64_MAX], dtype=np.int64)
    geo = _geo(g)
    budget = _BUDGET
    while st[0] < st[1]:
        _count_run(work, cnt, queue, buf, st, budget, *geo, bool(dedupe), pe)
    c = int(cnt[pe]) if work[pe] >= 0 else 0
    if c == INT64_MAX:
        return c, True
    return c, False


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
    building these is about 10 us of Python, a quarter of a small labelling."""
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
#: saves there. Measured on 2 threads, the parallel passes win from about 30,000 sites
#: in 3-D (32^3: 0.24 against 0.30 ms) and 45,000 in 2-D (256^2: 0.20 against 0.25 ms)
_WHOLE_WORK = 90_000


def connected_components(shape, periodic, offsets, open_, dedupe, *, sizes=False):
    """Label the connected components of the open sites.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused). The neighbour
        relation is taken as undirected, so asymmetric stencils are allowed.
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
    first element and one ordered pass numbers the components. When the stencil holds the unit step
    along the last axis (von Neumann, Moore) the elements are runs of open sites along
    that axis: branch-free scans find the runs and write the labels, union-find joins
    the runs a shifted run overlaps. Otherwise the elements are the sites. Rows are
    split into one chunk per thread, joined in parallel, then the chunk seams are joined
    in order. O(n + R k alpha) time for R runs (O(n k alpha) per site); besides the
    labels, about 12 bytes per run (R <= n/2 + 1). A lattice of up to ``_WHOLE_WORK``
    site-offsets (any size on one thread) whose labelling fits in one ``_BUDGET`` is labelled
    over runs by a single serial kernel call (:func:`_runs_whole`), sizes included:
    the same labels, without the fixed cost of six kernel launches.

    Every phase runs in kernel calls over windows of about ``_BUDGET`` sites (one
    window of each thread's chunk per call), so a signal handler (Ctrl-C) runs between
    two of them; a row of the last axis is never split, so a lattice with very long rows
    (a 1-D lattice of 1e9 sites is one row) goes seconds without a check. See
    "Interrupts" in the module docstring.

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
    open_ = np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1)
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
            and n * (4 + 4 * half.shape[0]) <= _BUDGET):
        if open_.shape[0] == 0:
            open_ = np.ones(n, dtype=np.uint8)
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
    step = max(_BUDGET, count + 1, 1)
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
    count = _relabel(parent, 0, n, 0)
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
    launch per ``_BUDGET`` of work instead of six serial-fraction launches per lattice.
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
    stack = np.ascontiguousarray(stack, dtype=np.uint8)
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
    step = max(T, _BUDGET // max(1, n * (4 + 4 * half.shape[0])))
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
    """Sorted int64 labels of the clusters touching both faces of ``axis``, for every
    row of a (B, n) stack of labellings of ``shape`` (components numbered 1..counts[b],
    0 blocked): ``_common.face_spanning`` of each row, in one parallel kernel.

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
    ``_BUDGET`` work (larger lattices are worth splitting across threads one by one)."""
    n = math.prod(int(x) for x in shape)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    half = _stencil_halves(offsets.tobytes(), offsets.shape[1])[0]
    return n <= _INT32_LIMIT and n * (4 + 4 * half.shape[0]) <= _BUDGET


def _components_windows(shape, periodic, open_, n, half, runs, ltype, L, nrow, T, sizes):
    """:func:`connected_components` in windowed kernel calls (see its Notes). Returns
    ``(labels, count, sizes)``; with ``sizes`` over runs, the sizes are summed per run
    (:func:`_run_sizes`, a pass over the runs instead of one over the labels), else
    ``sizes`` is None."""
    # Each kernel call does window s (w rows) of each of the T row chunks.
    w = max(1, _BUDGET // (T * L))
    chunk_rows = -(-nrow // T)
    wins = range(-(-chunk_rows // w))
    if runs:
        if open_.shape[0] == 0:
            open_ = _filled(n, 1, np.uint8)  # one run per row; O(n) bytes, rarely used
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
            for a in range(0, n_runs, max(_BUDGET, 1)):
                _run_sizes(size_of, lab, rs, re, a, min(n_runs, a + max(_BUDGET, 1)))
            size_of = size_of[1:]
        return labels, count, size_of
    parent = np.empty(n, dtype=ltype)
    step = max(_BUDGET, 1)
    for a in range(0, n, step):
        _cc_init(parent, open_, a, min(n, a + step))
    # a site costs one union per half-offset, about 4 units each
    w = max(1, _BUDGET // (T * L * 4 * max(half.shape[0], 1)))
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
    step = max(_BUDGET, 1)
    for a in range(0, parent.shape[0], step):
        count = _relabel_window(parent, a, min(parent.shape[0], a + step), count)
    return int(count)


def closeness(shape, periodic, offsets, open_, dedupe, sources=None) -> np.ndarray:
    """Closeness centrality (NetworkX ``closeness_centrality``, ``wf_improved=True``).

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    sources : array_like of int, optional
        Open sites to compute; all open sites when None.

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
    closeness uses in-distances; the two agree for symmetric stencils). Runs in kernel
    calls of about ``_BUDGET`` units per thread (a call may stop inside a search), so a
    signal handler (Ctrl-C) runs between two of them; see "Interrupts" in the module
    docstring.

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
    budget = _BUDGET
    while (st_t[:, 0] < ns).any():
        _closeness_run(work_t, queue_t, st_t, psrc, vals, g.n_open, budget, *geo)
    out[src] = vals
    return out


def catalytic_path(shape, periodic, offsets, open_, dedupe, start, end, state) -> np.ndarray:
    """Shortest hop path whose per-site search state lives in borrowed memory.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    start, end : int
        Flat indices of open sites.
    state : ndarray of uint8, length >= n
        Borrowed memory: ``state[:n]`` is overwritten (0 unvisited, 1 + dist mod 3
        visited); the caller restores it. ``state[n:]`` is not touched.

    Returns
    -------
    ndarray of int64
        Flat indices start..end, the same path as :func:`shortest_path` for symmetric
        stencils; length 0 when unreachable.

    Notes
    -----
    BFS with an int32 FIFO queue of n_open entries (int64 past 2**31 sites), stopping
    when ``end`` is labelled, then a walk back choosing the smallest-index in-neighbour
    whose state encodes distance D-1. Distances mod 3 identify D-1 because neighbours
    of a symmetric stencil differ by at most one hop. O(n k) time. The search and the
    walk run in kernel calls of about ``_BUDGET`` units, so a signal handler (Ctrl-C)
    runs between two of them (the caller's restoring of ``state`` then runs as the
    exception unwinds); see "Interrupts" in the module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> st = np.full(9, 7, np.uint8)
    >>> catalytic_path((3, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False,
    ...                0, 8, st)
    array([0, 1, 2, 5, 8])
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offs = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    open_ = np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1)
    n = int(np.prod(shape, dtype=object))
    assert state.dtype == np.uint8 and state.shape[0] >= n
    n_open = int(np.count_nonzero(open_)) if open_.shape[0] else n
    queue = np.empty(max(n_open, 1), dtype=np.int32 if n <= _INT32_LIMIT else np.int64)
    strides = c_strides(shape)
    c = np.empty(d, dtype=np.int64)
    budget = _BUDGET
    step = max(budget, 1)
    for a in range(0, n, step):  # state[:n] = 0, in slices
        state[a:min(n, a + step)] = 0
    start = int(start)
    end = int(end)
    state[start] = 1
    queue[0] = start
    st = np.array([0, 1, 1, 0, -1], dtype=np.int64)
    while start != end and st[0] < st[1]:
        _catalytic_bfs(state, queue, c, st, budget, end, offs, shape, strides, periodic,
                       open_)
    D = 0 if start == end else int(st[4])
    if D < 0:
        return np.empty(0, dtype=np.int64)
    path = np.empty(D + 1, dtype=np.int64)
    path[0] = end
    noffs = np.ascontiguousarray(-offs)
    step = max(1, budget // max(2 * offs.shape[0], 1))
    for a in range(1, D + 1, step):
        _catalytic_walk(state, path, c, D, a, min(D + 1, a + step), noffs, shape, strides,
                        periodic, open_)
    return path[::-1].copy()


def degree(shape, periodic, offsets, open_, dedupe) -> np.ndarray:
    """Size of each site's neighbour set.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance`. With ``dedupe`` the duplicates and
        self-loops that small periodic axes create are not counted.

    Returns
    -------
    ndarray of int64, (n,)
        Degree of each open site; 0 for blocked sites.

    Notes
    -----
    Parallel over rows: O(n k) time without ``dedupe``, O(n k^2) with it.

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
    open_ = np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1)
    n = int(np.prod(shape, dtype=object))
    deg = np.empty(n, dtype=np.int64)
    if n == 0:
        return deg
    if dedupe:
        T = max(1, min(numba.get_num_threads(), n))
        buf_t = np.empty((T, max(offs.shape[0], 1)), dtype=np.int64)
        _degree_dedupe(deg, buf_t, open_, offs, shape, c_strides(shape), periodic)
    else:
        _degree_rows(deg, open_, offs, shape, periodic)
    return deg
