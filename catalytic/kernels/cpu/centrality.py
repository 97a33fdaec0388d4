"""Centrality kernels on implicit lattices: betweenness (Brandes) and closeness
(bit-parallel breadth-first search).

Both host functions take the lattice as plain arrays (``shape``, ``periodic``,
``offsets``, ``open_``, ``dedupe``; see ``neighbors.py``) and work in the padded index
space of :mod:`catalytic.kernels.cpu._padded` (its :class:`~catalytic.kernels.cpu._padded.Plan`
and class array: a stencil step is one addition, halo cells say ``WALL`` or ``PORTAL``).
The stencils the geometry accepts are symmetric, so the lattice graph is undirected:
out- and in-neighbours are one set, and ``d(s, v) == d(v, s)``.

Betweenness
-----------
One breadth-first search per source counting shortest paths (``sigma``, float64 as
NetworkX keeps it), then the dependencies accumulated in reverse search order, pulled
from each site's successors (``delta[v] = sigma[v] * sum_w (1 + delta[w]) / sigma[w]``
over the neighbours ``w`` one level further). The sources are cut into a fixed number of
chunks that depends on the sources and the lattice only; each chunk sums its sources in
order into its own accumulator, the threads share the chunks out, and the chunk sums
are added in chunk order at the end: the answer is the same, bit for bit, on any number
of threads.

Closeness
---------
Breadth-first search from 256 sources at once (``64 * _WORDS``): every site holds four
64-bit words of "reached from source j" bits; one level ORs the frontier words of each frontier site
into its neighbours and keeps the bits a site did not have. A site's new bits at level
``l`` are the sources at distance ``l`` from it, so ``l * popcount`` summed over the
levels and batches is the site's total distance to all others (by symmetry, its total
distance *from* them, which NetworkX's closeness uses) and ``popcount`` summed is the
size of its component. Only sites on a frontier are touched, and the sources of a batch
are a compact block of the lattice, so a site is on a frontier for about as many levels
as the block is wide rather than once per source. The sums are integers: the result
does not depend on the thread count or the batch size, and equals the one-search-per-
source kernel (:func:`catalytic.kernels.cpu.bfs.closeness`) bit for bit.

Interrupts
----------
As in :mod:`catalytic.kernels.cpu._budget`: every kernel call does about
``_budget._BUDGET`` work units per thread (read at each call, so a test can shrink it),
keeps its position in a small int64 state array and returns; the host function calls
it again until done, and a pending signal handler runs in between. Results do not
depend on the budget.
"""

from __future__ import annotations

import math
import random

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

from catalytic.kernels.cpu import _budget, _padded
from catalytic.kernels.cpu import bfs as _bfs
from catalytic.kernels.cpu.neighbors import check_sources

__all__ = ["betweenness", "betweenness_centrality", "closeness", "sample_sources"]

UNVISITED = _padded.UNVISITED
WALL = _padded.WALL
PORTAL = _padded.PORTAL
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)

#: Most chunk accumulators (float64, one per padded cell) betweenness keeps; fewer when
#: they would pass :data:`_ACC_BYTES`. A fixed number, so the summation order (and the
#: result, bit for bit) does not depend on the thread count.
_MAX_CHUNKS = 64
_ACC_BYTES = 1 << 26
#: Closeness batch size in 64-bit words per site (64 sources each); a compile-time
#: constant, so the word loops unroll. Fewer words mean more frontier visits, more make
#: each visit dearer (reports/kernel_tuning.md).
_WORDS = 4
#: Closeness scratch per padded cell per thread, and the most all threads may take.
_CELL_BYTES = 8 * (3 * _WORDS + 5)
_BITS_BYTES = 1 << 29


@intrinsic
def _popcount(typingctx, x):
    """Number of set bits of a uint64 (LLVM ``ctpop``: one instruction on x86-64)."""
    if not (isinstance(x, types.Integer) and x.bitwidth == 64):
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.int64(x), codegen


# ---------------------------------------------------------------------------------------
# Betweenness
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _neighbours(v, nb, work, foff, offs, r, shape, pstrides, periodic, mode, dedupe, bits, nw):
    """Write the neighbour cells of padded cell ``v`` into ``nb`` (walls included, none
    through a closed bond of ``bits``/``nw``, no repeats and not ``v`` itself when
    ``dedupe``); return their count. The slow path (unpadded lattices, tiny periodic
    axes, bonds); the hot loops spell out the common case."""
    m = 0
    hb = bits.shape[0] != 0
    for k in range(foff.shape[0]):
        if hb and ((bits[v * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
            continue
        if mode == 0:
            q = _padded._resolve(v, k, offs, r, shape, pstrides, periodic)
            if q < 0:
                continue
        else:
            q = v + foff[k]
            if mode == 2 and work[q] == PORTAL:
                q = _padded._resolve(v, k, offs, r, shape, pstrides, periodic)
        if dedupe:
            if q == v:
                continue
            seen = False
            for j in range(m):
                if nb[j] == q:
                    seen = True
            if seen:
                continue
        nb[m] = q
        m += 1
    return m


@njit(cache=True, nogil=True)
def _brandes_slot(work, sigma, coef, order, nb, st, acc, psrc, bounds, step, dedupe, budget,
                  foff, offs, r, shape, pstrides, periodic, mode, bits, nw):
    """One thread slot of :func:`_brandes_run`: chunks ``st[0]``, ``st[0] + step``, ...
    for about ``budget`` units."""
    nch = bounds.shape[0] - 1
    K = foff.shape[0]
    fast = mode != 0 and not dedupe and bits.shape[0] == 0
    used = 0
    while st[0] < nch and used < budget:
        c = st[0]
        i = st[1]
        if i >= bounds[c + 1]:
            st[0] = c + step
            if c + step < nch:
                st[1] = bounds[c + step]
            continue
        ph = st[2]
        h = st[3]
        e = st[4]
        s = psrc[i]
        if ph == 0:
            work[s] = 0
            sigma[s] = 1.0
            order[0] = s
            h = 0
            e = 1
            ph = 1
        if ph == 1:  # breadth-first search, counting shortest paths
            # one loop per neighbour rule, the visit spelled out in each: Numba does not
            # inline helpers here, and a test per site is measurably slower
            limit = h + max(1, (budget - used) // max(K, 1))
            h0 = h
            if fast and mode == 1:
                while h < e and h < limit:
                    v = order[h]
                    dn = work[v] + 1
                    sv = sigma[v]
                    for k in range(K):
                        q = v + foff[k]
                        w = work[q]
                        if w == UNVISITED:
                            work[q] = dn
                            sigma[q] = sv
                            order[e] = q
                            e += 1
                        elif w == dn:
                            sigma[q] += sv
                    h += 1
            elif fast:
                while h < e and h < limit:
                    v = order[h]
                    dn = work[v] + 1
                    sv = sigma[v]
                    for k in range(K):
                        q = v + foff[k]
                        if work[q] == PORTAL:
                            q = _padded._resolve(v, k, offs, r, shape, pstrides, periodic)
                        w = work[q]
                        if w == UNVISITED:
                            work[q] = dn
                            sigma[q] = sv
                            order[e] = q
                            e += 1
                        elif w == dn:
                            sigma[q] += sv
                    h += 1
            else:
                while h < e and h < limit:
                    v = order[h]
                    dn = work[v] + 1
                    sv = sigma[v]
                    m = _neighbours(v, nb, work, foff, offs, r, shape, pstrides, periodic,
                                    mode, dedupe, bits, nw)
                    for j in range(m):
                        q = nb[j]
                        w = work[q]
                        if w == UNVISITED:
                            work[q] = dn
                            sigma[q] = sv
                            order[e] = q
                            e += 1
                        elif w == dn:
                            sigma[q] += sv
                    h += 1
            used += (h - h0) * K
            if h < e:
                st[2] = 1
                st[3] = h
                st[4] = e
                continue
            ph = 2  # h == e: accumulate order[:e] from the end
        if ph == 2:  # dependencies, pulled from the successors one level further
            a = acc[c]
            stop = max(0, h - max(1, (budget - used) // max(K, 1)))
            used += (h - stop) * K
            if fast and mode == 1:
                for hh in range(h - 1, stop - 1, -1):
                    v = order[hh]
                    dn = work[v] + 1
                    tot = 0.0
                    for k in range(K):
                        q = v + foff[k]
                        if work[q] == dn:
                            tot += coef[q]
                    sv = sigma[v]
                    dv = sv * tot
                    coef[v] = (1.0 + dv) / sv
                    if v != s:
                        a[v] += dv
            else:
                for hh in range(h - 1, stop - 1, -1):
                    v = order[hh]
                    dn = work[v] + 1
                    tot = 0.0
                    if fast:
                        for k in range(K):
                            q = v + foff[k]
                            if work[q] == PORTAL:
                                q = _padded._resolve(v, k, offs, r, shape, pstrides, periodic)
                            if work[q] == dn:
                                tot += coef[q]
                    else:
                        m = _neighbours(v, nb, work, foff, offs, r, shape, pstrides, periodic,
                                        mode, dedupe, bits, nw)
                        for j in range(m):
                            q = nb[j]
                            if work[q] == dn:
                                tot += coef[q]
                    sv = sigma[v]
                    dv = sv * tot
                    coef[v] = (1.0 + dv) / sv
                    if v != s:
                        a[v] += dv
            h = stop
            if h > 0:
                st[2] = 2
                st[3] = h
                st[4] = e
                continue
            ph = 3
            h = e
        # ph == 3: reset the cells this search labelled
        stop = max(0, h - max(1, budget - used))
        used += h - stop
        while h > stop:
            h -= 1
            work[order[h]] = UNVISITED
        if h > 0:
            st[2] = 3
            st[3] = h
            st[4] = e
            continue
        st[1] = i + 1
        st[2] = 0
        st[3] = 0
        st[4] = 0


@njit(cache=True, nogil=True, parallel=True)
def _brandes_run(work_t, sigma_t, coef_t, order_t, nb_t, st_t, acc, psrc, bounds, dedupe,
                 budget, foff, offs, r, shape, pstrides, periodic, mode, bits, nw):
    """Brandes dependencies of the sources ``psrc``, chunk ``c`` (sources
    ``bounds[c]:bounds[c + 1]``) summed in source order into ``acc[c]``; thread slot t
    takes chunks t, t+T, t+2T, ... and keeps its search in ``work_t[t]`` (the padded
    class array, distances written over ``UNVISITED`` and reset after each search),
    ``sigma_t[t]`` (path counts), ``coef_t[t]`` (``(1 + delta) / sigma`` of finished
    cells), ``order_t[t]`` (the search order, which is also the queue) and ``nb_t[t]``
    (a neighbour buffer for the slow path).

    ``st_t[t] = [c, i, phase, h, e]``: chunk c, source index i, phase 0 (start a
    source), 1 (search: ``order[h:e]`` still to expand), 2 (accumulate: ``order[:h]``
    still to do, from the end), 3 (reset ``order[:h]``). Start from
    ``[t, bounds[t], 0, 0, 0]``; a slot is done when ``c >= len(bounds) - 1``. Every
    slot does about ``budget`` units per call (a unit is one neighbour visit). Steps
    through closed bonds (``bits``/``nw`` of
    :class:`~catalytic.kernels.cpu._padded.BondCells`) are not taken.
    O(len(psrc) * n k / T) over all calls.
    """
    T = work_t.shape[0]
    for tt in prange(T):
        t = np.int64(tt)
        _brandes_slot(work_t[t], sigma_t[t], coef_t[t], order_t[t], nb_t[t], st_t[t], acc,
                      psrc, bounds, T, dedupe, budget, foff, offs, r, shape, pstrides,
                      periodic, mode, bits, nw)


@njit(cache=True, nogil=True)
def _sum_chunks(acc, cells, out):
    """``out[i] = acc[0, cells[i]] + acc[1, cells[i]] + ...``, added in chunk order (so
    the same on any number of threads). O(len(acc) len(cells))."""
    for i in range(cells.shape[0]):
        p = cells[i]
        x = acc[0, p]
        for c in range(1, acc.shape[0]):
            x += acc[c, p]
        out[i] = x


def sample_sources(n_open: int, k: int, seed) -> np.ndarray:
    """Positions (in ascending order of the open sites) of the ``k`` sources NetworkX's
    ``betweenness_centrality(G, k=k, seed=seed)`` samples when ``G``'s nodes are the
    open sites in ascending order: ``random.Random(seed).sample(nodes, k)``, in the
    order drawn.

    Examples
    --------
    >>> sample_sources(10, 3, 0).tolist()
    [6, 9, 0]
    """
    return np.asarray(random.Random(seed).sample(range(n_open), k), dtype=np.int64)


def betweenness(shape, periodic, offsets, open_, dedupe, sources=None, *, bonds=None,
                cache=None) -> np.ndarray:
    """Shortest-path betweenness of every site, unnormalised, from ``sources``.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in ``neighbors.py``.
    sources : array_like of int, optional
        Flat indices of distinct open sites to start searches from; every open site
        when None (exact betweenness).
    bonds, cache
        As in :func:`catalytic.kernels.cpu.bfs.bfs_distance`: shortest hop paths over
        the open bonds (bond weights are not read).

    Returns
    -------
    ndarray of float64, (n,)
        For each open site v, the sum over the sources s != v of the dependency
        ``sum_t sigma(s, t | v) / sigma(s, t)`` (t over every site but s and v): what
        NetworkX's ``betweenness_centrality`` sums before ``_rescale`` (ordered pairs,
        endpoints excluded). NaN on blocked sites.

    Raises
    ------
    IndexError
        A source out of range or blocked.
    ValueError
        A source given twice.

    Notes
    -----
    Brandes' algorithm: one breadth-first search per source, O(len(sources) n k) time
    for n sites and k stencil offsets, O(T n) scratch for T threads plus one float64
    accumulator per source chunk (at most 64, and at most 64 MiB of them). Path counts
    are float64 (exact below 2**53 paths, as in NetworkX). Runs in kernel calls of about
    ``_budget._BUDGET`` units per thread, so a signal handler (Ctrl-C) runs between two
    of them. The result is bit-identical for any thread count and any budget.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> betweenness((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False)
    array([0., 4., 4., 0.])
    """
    g = _padded.make_plan(shape, periodic, offsets, open_)
    open_idx = np.flatnonzero(g.open_) if g.open_.shape[0] else np.arange(g.n)
    popen = _padded._to_padded(open_idx, g)
    if sources is None:
        src, psrc = open_idx, popen
    else:
        src = np.asarray(sources, dtype=np.int64).reshape(-1)
        check_sources(src, g.n, g.open_)
        if np.unique(src).shape[0] != src.shape[0]:
            raise ValueError("betweenness sources must be distinct")
        psrc = _padded._to_padded(src, g)
    out = np.full(g.n, np.nan)
    out[open_idx] = 0.0
    ns = src.shape[0]
    if ns == 0:
        return out
    nch = max(1, min(_MAX_CHUNKS, ns, _ACC_BYTES // (8 * g.psize)))
    bounds = np.arange(nch + 1, dtype=np.int64) * ns // nch
    T = max(1, min(numba.get_num_threads(), nch))
    work_t = np.empty((T, g.psize), dtype=g.itype)
    work_t[0] = _padded._work_array(g)
    work_t[1:] = work_t[0]
    sigma_t = np.empty((T, g.psize), dtype=np.float64)
    coef_t = np.empty((T, g.psize), dtype=np.float64)
    order_t = np.empty((T, g.n_open + 1), dtype=g.itype)
    nb_t = np.empty((T, max(g.offs.shape[0], 1)), dtype=np.int64)
    acc = np.zeros((nch, g.psize), dtype=np.float64)
    st_t = np.zeros((T, 5), dtype=np.int64)
    st_t[:, 0] = np.arange(T)
    st_t[:, 1] = bounds[:T]
    geo = _padded._geo(g)
    cells = _padded.plan_bonds(g, offsets, bonds, cache)
    while (st_t[:, 0] < nch).any():
        _brandes_run(work_t, sigma_t, coef_t, order_t, nb_t, st_t, acc, psrc, bounds,
                     bool(dedupe), _budget._BUDGET, *geo, cells.bits, np.int64(cells.nw))
    vals = np.empty(open_idx.shape[0])
    _sum_chunks(acc, popen, vals)
    out[open_idx] = vals
    return out


def betweenness_centrality(shape, periodic, offsets, open_, dedupe, k=None, seed=None, *,
                           bonds=None, cache=None):
    """NetworkX's ``betweenness_centrality(G, k=k, seed=seed)`` (normalised, endpoints
    excluded) of every site, for ``G`` the lattice graph with its open sites as nodes in
    ascending order.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in ``neighbors.py``.
    k : int, optional
        Number of sampled sources (1 <= k <= n_open); all open sites when None or
        n_open (NetworkX computes the exact value then too).
    seed : int, optional
        Seed of the sample: the sources are ``random.Random(seed).sample(nodes, k)``,
        as NetworkX draws them.
    bonds, cache
        As in :func:`betweenness`.

    Returns
    -------
    ndarray of float64, (n,)
        NaN on blocked sites. Exact: the raw sums of :func:`betweenness` times
        ``1 / ((v-1)(v-2))`` for v open sites. Sampled: times ``1 / ((k-1)(v-2))`` on
        the sampled sites (NaN there when k == 1, as NetworkX gives) and
        ``1 / (k (v-2))`` elsewhere. Unscaled (all 0) when v <= 2.

    Raises
    ------
    ValueError
        ``k`` outside 1..n_open.

    Notes
    -----
    The cost of :func:`betweenness` with k (or n_open) sources, plus the O(k) draw.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> betweenness_centrality((5,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8),
    ...                        False)
    array([0.        , 0.5       , 0.66666667, 0.5       , 0.        ])
    >>> betweenness_centrality((5,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8),
    ...                        False, k=2, seed=1)
    array([0.        , 1.        , 0.66666667, 0.33333333, 0.        ])
    """
    open_ = np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1)
    n = int(np.prod(np.asarray(shape, dtype=np.int64), dtype=object))
    open_idx = np.flatnonzero(open_) if open_.shape[0] else np.arange(n)
    v = open_idx.shape[0]
    if k is not None and not 1 <= k <= v:
        raise ValueError(f"k={k} sources must be between 1 and the {v} open sites")
    src = None
    if k is not None and k != v:
        src = open_idx[sample_sources(v, k, seed)]
    out = betweenness(shape, periodic, offsets, open_, dedupe, src, bonds=bonds, cache=cache)
    N = v - 1  # NetworkX's _rescale with normalized=True, endpoints=False
    if N < 2:
        return out
    if src is None:
        out[open_idx] *= 1 / (N * (N - 1))
        return out
    ks = src.shape[0]
    on_src = out[src] * (1 / ((ks - 1) * (N - 1)) if ks > 1 else math.nan)
    out[open_idx] *= 1 / (ks * (N - 1))
    out[src] = on_src
    return out


# ---------------------------------------------------------------------------------------
# Closeness
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _gather(bits, stamp, cand, m, cs, u, q):
    """OR frontier cell ``u``'s level bits into cell ``q``'s next-level bits (starting
    from zero, and listing ``q`` as a candidate, when ``q`` is first met this level:
    ``stamp[q] != cs``); returns the new candidate count."""
    if stamp[q] != cs:
        stamp[q] = cs
        cand[m] = q
        for w in range(_WORDS):
            bits[q, 2, w] = bits[u, 1, w]
        return m + 1
    for w in range(_WORDS):
        bits[q, 2, w] |= bits[u, 1, w]
    return m


@njit(cache=True, nogil=True)
def _bitbfs_slot(cls, bits, stamp, lists, far, cnt, st, psrc, step, budget, foff, offs, r,
                 shape, pstrides, periodic, mode, bond, nw):
    """One thread slot of :func:`_bitbfs_run`: batches ``st[0]``, ``st[0] + step``, ...
    for about ``budget`` units."""
    S = 64 * _WORDS
    ns = psrc.shape[0]
    nbatch = (ns + S - 1) // S
    K = foff.shape[0]
    hb = bond.shape[0] != 0
    used = 0
    while st[0] < nbatch and used < budget:
        b = st[0]
        lev = st[1]
        ncur = st[2]
        ph = st[3]
        h = st[4]
        m = st[5]
        nn = st[6]
        cs = st[7]
        if ph == 0:
            bits[:, 0, :] = 0
            used += bits.shape[0]
            lo = b * S
            hi = min(ns, lo + S)
            cur = lists[0]
            for i in range(lo, hi):
                p = psrc[i]
                j = i - lo
                for w in range(_WORDS):
                    bits[p, 1, w] = 0
                bit = np.uint64(1) << np.uint64(j & 63)
                bits[p, 1, j >> 6] = bit
                bits[p, 0, j >> 6] = bit
                cur[j] = p
                cnt[p] += 1
            lev = 0
            ncur = hi - lo
            ph = 1
            h = 0
            m = 0
            cs += 1
        cur = lists[lev & 1]
        cand = lists[1 - (lev & 1)]
        if ph == 1:
            # every neighbour cell is gathered, walls too (phase 2 drops them)
            e = min(ncur, h + max(1, (budget - used) // max(K, 1)))
            used += (e - h) * K
            if hb:
                # the bond loop: only steps through open bonds gather
                for hh in range(h, e):
                    u = cur[hh]
                    base = u * nw
                    for k in range(K):
                        if ((bond[base + (k >> 3)] >> (k & 7)) & 1) == 0:
                            continue
                        if mode == 0:
                            q = _padded._resolve(u, k, offs, r, shape, pstrides, periodic)
                            if q < 0:
                                continue
                        else:
                            q = u + foff[k]
                            if mode == 2 and cls[q] == PORTAL:
                                q = _padded._resolve(u, k, offs, r, shape, pstrides,
                                                     periodic)
                        m = _gather(bits, stamp, cand, m, cs, u, q)
            elif mode == 1:
                for hh in range(h, e):
                    u = cur[hh]
                    for k in range(K):
                        m = _gather(bits, stamp, cand, m, cs, u, u + foff[k])
            elif mode == 2:
                for hh in range(h, e):
                    u = cur[hh]
                    for k in range(K):
                        q = u + foff[k]
                        if cls[q] == PORTAL:
                            q = _padded._resolve(u, k, offs, r, shape, pstrides, periodic)
                        m = _gather(bits, stamp, cand, m, cs, u, q)
            else:
                for hh in range(h, e):
                    u = cur[hh]
                    for k in range(K):
                        q = _padded._resolve(u, k, offs, r, shape, pstrides, periodic)
                        if q >= 0:
                            m = _gather(bits, stamp, cand, m, cs, u, q)
            h = e
            if h == ncur:
                ph = 2
                h = 0
                nn = 0
        if ph == 2:
            lv = lev + 1
            e = min(m, h + max(1, budget - used))
            used += e - h
            for hh in range(h, e):
                v = cand[hh]
                if cls[v] != UNVISITED:
                    continue
                pc = 0
                for w in range(_WORDS):
                    x = bits[v, 2, w] & ~bits[v, 0, w]
                    bits[v, 0, w] |= x
                    bits[v, 1, w] = x
                    pc += _popcount(x)
                if pc != 0:
                    cand[nn] = v
                    nn += 1
                    cnt[v] += pc
                    far[v] += lv * pc
            h = e
            if h == m:  # level done: the kept candidates are the next frontier
                lev = lv
                ncur = nn
                ph = 1
                h = 0
                m = 0
                cs += 1
                if ncur == 0:
                    b += step
                    ph = 0
        st[0] = b
        st[1] = lev
        st[2] = ncur
        st[3] = ph
        st[4] = h
        st[5] = m
        st[6] = nn
        st[7] = cs


@njit(cache=True, nogil=True, parallel=True)
def _bitbfs_run(cls, bits_t, stamp_t, lists_t, far_t, cnt_t, st_t, psrc, budget, foff, offs,
                r, shape, pstrides, periodic, mode, bond, nw):
    """Bit-parallel BFS from batches of ``S = 64 _WORDS`` sources (batch b:
    ``psrc[S b:S (b + 1)]``; source j of a batch is bit ``j % 64`` of word ``j // 64``);
    thread slot t takes batches t, t+T, t+2T, ...

    Per slot and padded cell p, ``bits[p, 0]`` holds the sources that reached p,
    ``bits[p, 1]`` those that reached it at the current level (read only on frontier
    cells) and ``bits[p, 2]`` the next level's bits being gathered (valid where
    ``stamp[p]`` equals the slot's level stamp); ``lists[l & 1]`` is the frontier of
    level l, the other list the next level's candidates; ``far[p]`` and ``cnt[p]`` sum
    ``level * popcount`` and ``popcount`` of the new bits. ``cls`` is the shared class
    array (``UNVISITED`` open, ``WALL``, ``PORTAL``).

    ``st_t[t] = [b, level, ncur, phase, h, m, nn, stamp]``: phase 0 starts batch b,
    1 gathers (``cur[h:ncur]`` still to push, ``m`` candidates so far), 2 keeps the new
    bits (``cand[h:m]`` still to do, ``nn`` kept). Start from zeros with ``b = t``; a
    slot is done when ``b * S >= len(psrc)``. Every slot does about ``budget`` units per
    call (a unit is one neighbour of one frontier cell, or one candidate). ``bond``/``nw``:
    the bond words of :class:`~catalytic.kernels.cpu._padded.BondCells` (length 0:
    every bond open); a step through a closed bond gathers nothing.
    O(n * (levels a cell spends on a frontier)) per batch.
    """
    T = bits_t.shape[0]
    for tt in prange(T):
        t = np.int64(tt)
        _bitbfs_slot(cls, bits_t[t], stamp_t[t], lists_t[t], far_t[t], cnt_t[t], st_t[t],
                     psrc, T, budget, foff, offs, r, shape, pstrides, periodic, mode, bond, nw)


def _block_order(idx, shape, size) -> np.ndarray:
    """``idx`` (flat indices) reordered block by block: blocks of side about
    ``size ** (1/d)`` sites, in C order of the blocks, C order inside each, so that
    ``size`` consecutive entries lie close together. O(len(idx) d log len(idx))."""
    shape = np.asarray(shape, dtype=np.int64)
    d = shape.shape[0]
    side = max(1, int(round(size ** (1.0 / d))))
    coords = np.stack(np.unravel_index(idx, tuple(int(s) for s in shape)), axis=1)
    keys = [idx] + [coords[:, a] // side for a in range(d - 1, -1, -1)]
    return idx[np.lexsort(keys)]


def closeness(shape, periodic, offsets, open_, dedupe, *, bonds=None, cache=None) -> np.ndarray:
    """Closeness centrality of every open site (NetworkX ``closeness_centrality``,
    ``wf_improved=True``).

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in ``neighbors.py`` (``dedupe`` is unused: repeated neighbours
        and self-loops change no distance).
    bonds, cache
        As in :func:`catalytic.kernels.cpu.bfs.bfs_distance`: hop distances over the
        open bonds (bond weights are not read).

    Returns
    -------
    ndarray of float64, (n,)
        For each open site with r sites in its component (itself included) at total
        distance tot, ``(r-1)/tot * (r-1)/(n_open-1)`` (0 when tot == 0 or
        n_open == 1); NaN on blocked sites. Bit-identical to
        :func:`catalytic.kernels.cpu.bfs.closeness`.

    Notes
    -----
    Bit-parallel breadth-first search (see the module docstring): batches of
    ``64 * _WORDS`` (256) sources, each a compact block of the lattice, spread over
    the threads. Time O(n_open / 256 * n * w * k / T) for n sites, k stencil offsets
    and T threads, where w is the number of levels a site spends on a batch's frontier:
    about the width of a block of 256 sites in hops (30 levels on average on a
    96 x 96 square lattice, 20 on a 20^3 cube, 246 on a chain of 4000: counted from
    the distances) instead of once per source. Memory: about 128 bytes per
    padded cell per thread (three bitsets of 256 bits, a stamp, two sums, two lists);
    fewer threads run when that would pass ``_BITS_BYTES`` (512 MiB), and past it on one
    thread the one-search-per-source kernel runs instead (same result, 8 bytes per
    cell per thread). The stencil must be symmetric (every stencil the geometry
    accepts is). Runs in kernel calls of about ``_budget._BUDGET`` units per thread (a
    unit is one neighbour of a frontier cell).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> closeness((3,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False)
    array([0.66666667, 1.        , 0.66666667])
    """
    g = _padded.make_plan(shape, periodic, offsets, open_)
    out = np.full(g.n, np.nan)
    open_idx = np.flatnonzero(g.open_) if g.open_.shape[0] else np.arange(g.n)
    ns = open_idx.shape[0]
    if ns == 0:
        return out
    S = 64 * _WORDS
    nbatch = -(-ns // S)
    per_thread = g.psize * _CELL_BYTES
    if per_thread > _BITS_BYTES:
        kw = {} if bonds is None else {"bonds": bonds, "cache": cache}
        return _bfs.closeness(shape, periodic, offsets, open_, dedupe, None, **kw)
    T = max(1, min(numba.get_num_threads(), nbatch, _BITS_BYTES // per_thread))
    src = _block_order(open_idx, g.shape, S) if ns > S else open_idx
    psrc = _padded._to_padded(src, g)
    cls = _padded._work_array(g)
    bits_t = np.empty((T, g.psize, 3, _WORDS), dtype=np.uint64)
    stamp_t = np.zeros((T, g.psize), dtype=np.int64)
    lists_t = np.empty((T, 2, g.psize + 1), dtype=g.itype)
    far_t = np.zeros((T, g.psize), dtype=np.int64)
    cnt_t = np.zeros((T, g.psize), dtype=np.int64)
    st_t = np.zeros((T, 8), dtype=np.int64)
    st_t[:, 0] = np.arange(T)
    geo = _padded._geo(g)
    cells = _padded.plan_bonds(g, offsets, bonds, cache)
    while (st_t[:, 0] < nbatch).any():
        _bitbfs_run(cls, bits_t, stamp_t, lists_t, far_t, cnt_t, st_t, psrc, _budget._BUDGET, *geo,
                    cells.bits, np.int64(cells.nw))
    popen = _padded._to_padded(open_idx, g)
    tot = far_t[:, popen].sum(axis=0)
    reach = cnt_t[:, popen].sum(axis=0)
    vals = np.zeros(ns)
    ok = tot > 0
    if g.n_open > 1:
        rm1 = reach[ok] - 1.0
        vals[ok] = rm1 / tot[ok] * (rm1 / (g.n_open - 1))
    out[open_idx] = vals
    return out
