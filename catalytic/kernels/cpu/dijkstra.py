"""Weighted distances on implicit lattices: Dijkstra with a ring of cost buckets in front
of a small binary heap.

The search runs in the padded index space of :mod:`catalytic.kernels.cpu._padded`, in
kernel calls of about ``_budget._BUDGET`` units (see "Interrupts" in
:mod:`catalytic.kernels.cpu._budget`). Distances follow out-neighbours (see
:mod:`catalytic.kernels.cpu`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numba.extending import intrinsic

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _HEAP_COST, _filled
from catalytic.kernels.cpu._padded import (
    NO_BONDS,
    PORTAL,
    WALL,
    BondCells,
    Plan,
    _fill_classes,
    _geo,
    _resolve,
    _to_padded,
    _unpad_all,
    make_plan,
    plan_bonds,
)
from catalytic.kernels.cpu.neighbors import step_lengths

__all__ = ["dijkstra_distance", "plan_lengths"]

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
                  foff, offs, r, shape, pstrides, periodic, mode, stops, marks, need, bits,
                  nw, bw, slot, fwd, ln):
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
    size, limit cell + 1 (0: none yet), marked cells settled]``; all arrays of entries
    have one length. With cells to stop at (:func:`_is_stop`: ``stops``, and ``marks``
    for many of them) it stops once ``need`` of them are settled and then every cell
    with cost <= the cost of the last of them (the limit cell), so those costs equal a
    full run's. Returns after about ``budget`` units: 0 (call again), 1 (done) or 2
    (call again with all entry arrays longer, their first entries kept).

    Entries leave the heap in order of cost, and a bucket only after all earlier ones
    (:func:`_bucket` is monotone, and no relaxation gives a cost below the one being
    settled), so cells are settled in non-decreasing cost as by any Dijkstra. The ring
    slides with ``cur``, so an entry sent to the overflow can come due while the ring
    still holds later buckets: before each cell is settled, the overflow's entries of
    bucket ``<= cur`` join the heap (and a cost they give of a bucket below ``cur``
    goes to the heap too). Without that, a search that stops at a cell could settle it
    before its cost was final.
    O((n + e) log n) over all calls if every cost falls in one bucket; with the bucket
    width the host picks, the heap holds a few entries at a time.

    ``bits, nw, bw, slot, fwd``: the fields of
    :class:`~catalytic.kernels.cpu._padded.BondCells`. A step through a closed bond is
    not taken; a step ``p -> q`` costs ``fl(bond weight + pw[q])``, and with step
    lengths ``ln`` (float64[k]; length 0: none) step ``k`` costs ``ln[k]`` times that.
    """
    K = foff.shape[0]
    hb = bits.shape[0] != 0
    hw = bw.shape[0] != 0
    hl = ln.shape[0] != 0
    P = pd.shape[0]
    nb = ring.shape[0]
    mask = nb - 1
    cap = ekey.shape[0]
    limit = pd[st[6] - 1] if st[6] != 0 else np.inf
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
        # the ring slides with cur, so an overflow entry's bucket can come due while the
        # ring still holds later ones: it joins the heap before anything is settled
        while st[5] > 0 and _bucket(okey[0], inv) <= cur and hs + K < cap:
            q = oidx[0]
            key = okey[0]
            _heap_pop(okey, oidx, st[5])
            st[5] -= 1
            used += 1
            if key == pd[q]:  # else stale
                _heap_push(hkey, hidx, hs, key, q)
                hs += 1
        if st[5] > 0 and _bucket(okey[0], inv) <= cur:
            break  # no room in the heap for the entries due
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
        limit = _count_stop(p, dp, limit, st, 6, stops, marks, need)
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
            if hb and ((bits[p * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
                continue
            if hw:
                w = bw[slot[k] * P + (p if fwd[k] != 0 else q)] + w
            if hl:
                w = ln[k] * w
            nd = dp + w
            if nd < pd[q]:
                pd[q] = nd
                b = _bucket(nd, inv)
                if b <= cur:  # below cur from an entry the overflow gave the heap
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
def _length_run(pd, qk, qs, head, size, lk, kcls, C, st, budget, foff, offs, r, shape,
                pstrides, periodic, mode, stops, marks, need, bits, nw):
    """Dijkstra when every step costs one of a few lengths (step lengths, no weight of
    either kind): one FIFO queue per distinct length instead of a priority queue,
    resumable.

    Step ``k`` costs ``lk[k]`` and is of class ``kcls[k]`` (one of ``C``, one per
    distinct length). A cell improved to cost ``c`` by a step of class ``j`` joins
    queue ``j`` as the entry ``(qk[j, e], qs[j, e]) = (c, cell)`` (a circular buffer,
    ``head[j]``, ``size[j]``; its length a power of two). Cells are settled in
    non-decreasing cost, so the keys ``fl(D(p) + length)`` pushed into a queue never
    decrease (a rounded sum does not decrease with ``D(p)``): each queue is sorted, and
    the least cost queued is the least of the heads. A cell's costs only fall, so of its
    entries the one whose key is its cost is live, the others are stale and dropped
    where they are met. The costs are those of any float64 Dijkstra (see
    :func:`_weighted_search`).

    ``pd`` holds the cell classes as well as the costs: inf on open cells not reached,
    -inf on walls (no cost is below it, so no step enters one) and NaN on portals (no
    comparison with it holds; mode 2 resolves them). ``st = [limit cell + 1, marked
    cells settled]``; ``stops``, ``marks``, ``need`` as in :func:`_dijkstra_run`;
    ``bits, nw``: open bonds as there. Returns after about
    ``budget`` units: 0 (call again), 1 (done) or 2 (call again with longer queues,
    :func:`_longer_queues`). O(1) per queued entry, O(k) per settled cell.
    """
    K = foff.shape[0]
    cap = qs.shape[1]
    mask = cap - 1
    hb = bits.shape[0] != 0
    limit = pd[st[0] - 1] if st[0] != 0 else np.inf
    used = 0
    while used < budget:
        best = -1
        bkey = np.inf
        for j in range(C):
            while size[j] > 0 and qk[j, head[j]] != pd[qs[j, head[j]]]:  # stale
                head[j] = (head[j] + 1) & mask
                size[j] -= 1
                used += 1
            if size[j] > 0 and qk[j, head[j]] < bkey:
                bkey = qk[j, head[j]]
                best = j
            if size[j] + K > cap:
                return 2  # no room for k more entries
        if best < 0:
            return 1
        h = head[best]
        p = qs[best, h]
        head[best] = (h + 1) & mask
        size[best] -= 1
        if mode != 0 and size[best] > _AHEAD:  # the cell popped a few pops from now
            _prefetch_costs(pd, qs[best, (h + _AHEAD) & mask], foff)
        dp = bkey
        if dp > limit:
            return 1
        used += K
        limit = _count_stop(p, dp, limit, st, 0, stops, marks, need)
        for k in range(K):
            if mode != 0:
                q = p + foff[k]
                dq = pd[q]
                if mode == 2 and dq != dq:  # a portal
                    q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                    dq = pd[q]
            else:
                q = _resolve(p, k, offs, r, shape, pstrides, periodic)
                if q < 0:
                    continue
                dq = pd[q]
            nd = dp + lk[k]
            if nd < dq:
                if hb and ((bits[p * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
                    continue
                pd[q] = nd
                j = kcls[k]
                e = (head[j] + size[j]) & mask
                qk[j, e] = nd
                qs[j, e] = q
                size[j] += 1
    return 0


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
    as it mostly waits on memory (measured in ``reports/kernel_tuning.md``)."""
    for k in range(foff.shape[0]):
        _prefetch(pd, p + foff[k])
        _prefetch(pw, p + foff[k])


@njit(cache=True, nogil=True, inline="always")
def _is_stop(p, stops, marks):
    """Whether cell ``p`` is one to stop at: marked in ``marks`` when it is not empty,
    else one of the few ``stops``."""
    if marks.shape[0] != 0:
        return marks[p] != 0
    for s in stops:
        if s == p:
            return True
    return False


@njit(cache=True, nogil=True, inline="always")
def _count_stop(p, dp, limit, st, at, stops, marks, need):
    """The limit after settling cell ``p`` at cost ``dp``: until ``need`` cells to stop
    at are settled (counted in ``st[at + 1]``), each one counts, and the one that makes
    ``need`` sets the limit to its cost (``st[at]``: that cell + 1, for a resumed
    call)."""
    if st[at] == 0 and _is_stop(p, stops, marks):
        st[at + 1] += 1
        if st[at + 1] >= need:
            st[at] = p + 1
            return dp
    return limit


#: How many pops ahead :func:`_length_run` prefetches the neighbours of a queued cell.
_AHEAD = 8


@njit(cache=True, nogil=True)
def _prefetch_costs(pd, p, foff):
    """Prefetch the cost of each padded neighbour of ``p``."""
    for k in range(foff.shape[0]):
        _prefetch(pd, p + foff[k])


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


# ---------------------------------------------------------------------------------------
# Host functions
# ---------------------------------------------------------------------------------------


def _bucket_scale(g: Plan, weights) -> tuple[float, int]:
    """``(inv, ring length)`` for :func:`_dijkstra_run`'s queue. They only set its speed:
    every choice settles cells in non-decreasing cost.

    A bucket is ``1 / inv`` wide: the largest of about 4096 sampled weights over
    ``per``, the power of two at or below half the wave front (estimated as the open
    sites over the longest axis: the cross-section of a box), so that a bucket holds
    a few of the queued entries; the ring spans two such weights, and later costs
    wait in the overflow (the sweep that chose ``per`` is in
    ``reports/kernel_tuning.md``). Below a front of 16 sites (chains, strips), where
    the ring is slower, and without a positive finite sample (all zero, say), ``inv``
    is 0 and the heap alone orders every cost."""
    wave = max(g.n_open, 1) / max(int(g.shape.max()), 1)
    if wave < 16:
        return 0.0, 2
    per = 1 << int(min(16, math.log2(wave / 2)))
    sample = weights[:: max(1, weights.shape[0] // 4096)]
    wmax = float(sample.max()) if sample.shape[0] else 0.0
    inv = per / wmax if wmax > 0 else 0.0
    return (inv if math.isfinite(inv) else 0.0), 2 * per


def _sample(a):
    """About 4096 entries of ``a``, evenly spaced."""
    return a[:: max(1, a.shape[0] // 4096)]


def _cell_args(cells: BondCells):
    """The arguments the kernels take for ``cells``: bits, nw, bw, slot, fwd."""
    return cells.bits, np.int64(cells.nw), cells.bw, cells.slot, cells.fwd


def _longer(a, used):
    """A copy of ``a`` twice as long, the first ``used`` entries kept."""
    out = np.empty(2 * a.shape[0], dtype=a.dtype)
    out[:used] = a[:used]
    return out


def plan_lengths(g: Plan, spacing) -> np.ndarray:
    """The Euclidean length of each of plan ``g``'s stencil steps under ``spacing``
    (:func:`~catalytic.kernels.cpu.neighbors.step_lengths`); length 0 for None."""
    if spacing is None:
        return np.zeros(0, dtype=np.float64)
    return step_lengths(g.offs, spacing)


def _longer_queues(qk, qs, head, size):
    """:func:`_length_run`'s queues in buffers twice as long, each queue's entries
    first, in order (``head`` reset to 0 in place)."""
    C, cap = qs.shape
    out = [np.empty((C, 2 * cap), dtype=a.dtype) for a in (qk, qs)]
    for j in range(C):
        at = (head[j] + np.arange(size[j])) % cap
        out[0][j, :size[j]] = qk[j, at]
        out[1][j, :size[j]] = qs[j, at]
    head[:] = 0
    return out


def _length_cap(g: Plan, m: int) -> int:
    """The first length of :func:`_length_run`'s queues, for ``m`` sources: a power of
    two, at least 4096, twice the sources and stencil, and about a wave front (the open
    sites over the longest axis). They double whenever one is full."""
    wave = g.n_open // max(int(g.shape.max()), 1)
    return 1 << max(12, int(max(wave, 2 * (m + g.offs.shape[0]))).bit_length())


#: Up to this many cells to stop at are compared one by one as each cell is settled;
#: more are marked in an array of a byte per cell (a read per settled cell, most often
#: a cache miss: it doubled the time of a search with one stop).
_FEW_STOPS = 16


def _marks(g: Plan, stops):
    """The cells to stop at as the searches take them: ``(stops, marks)``, the sorted
    padded cells and, for more than ``_FEW_STOPS`` of them, a uint8 per padded cell,
    1 at each (else length 0)."""
    stops = np.unique(np.asarray([] if stops is None else stops, dtype=np.int64))
    if stops.shape[0] <= _FEW_STOPS:
        return stops, np.zeros(0, dtype=np.uint8)
    marks = np.zeros(g.psize, dtype=np.uint8)
    marks[stops] = 1
    return stops, marks


def _length_search(g: Plan, psrc, stops, need, cells: BondCells, ln):
    """:func:`_weighted_search` when every step costs its length alone: one FIFO queue
    per distinct length (:func:`_length_run`). Returns the padded costs, -inf on walls
    and NaN on portals."""
    pd = np.empty(g.psize, dtype=np.float64)
    _fill_classes(pd, np.zeros(0), g, np.inf, -np.inf, np.nan)
    lens, kcls = np.unique(ln, return_inverse=True)
    kcls = kcls.astype(np.int64)
    C = lens.shape[0]
    psrc = np.unique(np.asarray(psrc, dtype=np.int64))
    m = psrc.shape[0]
    cap = _length_cap(g, m)
    qk = np.empty((C, cap), dtype=np.float64)
    qs = np.empty((C, cap), dtype=g.itype)
    head = np.zeros(C, dtype=np.int64)
    size = np.zeros(C, dtype=np.int64)
    pd[psrc] = 0.0
    qk[0, :m] = 0.0  # cost 0: the least, so queue 0 stays sorted
    qs[0, :m] = psrc
    size[0] = m
    st = np.zeros(2, dtype=np.int64)
    stops, marks = _marks(g, stops)
    budget = _budget._BUDGET
    while True:
        rc = _length_run(pd, qk, qs, head, size, ln, kcls, np.int64(C), st, budget,
                         *_geo(g), stops, marks, np.int64(need), cells.bits,
                         np.int64(cells.nw))
        if rc == 1:
            return pd
        if rc == 2:
            qk, qs = _longer_queues(qk, qs, head, size)


def _weighted_search(g: Plan, weights, psrc, stops=None, need=1,
                     cells: BondCells = NO_BONDS, ln=None):
    """Dijkstra from padded sources over the open bonds of ``cells``, a step ``u -> v``
    costing ``fl(bond weight + weights[v])`` (``weights`` None: 0), times the step's
    length ``ln[k]`` with lengths (:func:`plan_lengths`; then without weights of
    either kind a step costs its length); returns (padded costs, padded entry weights).

    The costs are those of any float64 Dijkstra (the indexed binary heap this queue
    replaced, SciPy's), bit for bit, whatever order it settles equal costs in. Each
    ends with ``D(v) = min fl(D(u) + c(u, v))`` over the in-steps ``u -> v`` (0 at
    sources), ``c`` the step cost. Were ``D1(v) < D2(v)`` for two of them, take the
    first cell ``x`` with ``D1(x) < D2(x)`` on the path that gave ``v`` its cost in the
    first: its predecessor ``u`` has ``D2(u) <= D1(u)``, and ``fl(a + c)`` does not
    decrease with ``a``, so ``D2(x) <= fl(D2(u) + c(u, x)) <= fl(D1(u) + c(u, x)) =
    D1(x)``, a contradiction. With ``stops`` (padded cells) the search ends once ``need``
    of them are settled, and the same holds for every cell with cost <= the cost of the
    last of those, which is all a walk back from any of them reads.
    """
    ln = np.zeros(0) if ln is None else np.ascontiguousarray(ln, dtype=np.float64)
    if ln.shape[0] and weights is None and cells.bw.shape[0] == 0:
        # a few step costs: no heap (walls and portals then back to inf in the costs)
        pd = _length_search(g, psrc, stops, need, cells, ln)
        pw = np.empty(g.psize, dtype=np.float64)
        _fill_classes(pw, np.zeros(0), g, 1.0, float(WALL), float(PORTAL))
        pd[pw < 0] = np.inf
        return pd, pw
    wf = np.zeros(0) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    # with lengths and no weight of either kind, entering a site costs 1 (times the length)
    unit = 1.0 if ln.shape[0] and weights is None and cells.bw.shape[0] == 0 else 0.0
    pw = np.empty(g.psize, dtype=np.float64)
    _fill_classes(pw, wf, g, unit, float(WALL), float(PORTAL))
    pd = _filled(g.psize, np.inf, np.float64)
    # a sample of the step costs: site weights and bond weights (times the longest step)
    sample = np.concatenate([_sample(wf), _sample(cells.bw), np.array([unit])])
    inv, nring = _bucket_scale(g, sample * (ln.max() if ln.shape[0] else 1.0))
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
    st = np.array([0, m, 0, -1, 0, 0, 0, 0], dtype=np.int64)
    geo = _geo(g)
    stops, marks = _marks(g, stops)
    budget = _budget._BUDGET
    while True:
        rc = _dijkstra_run(pd, pw, *ent, ring, st, inv, budget, *geo, stops, marks,
                           np.int64(need), *_cell_args(cells), ln)
        if rc == 1:
            return pd, pw
        if rc == 2:
            ent = [_longer(a, k) for a, k in zip(ent, st[[1, 1, 5, 5, 4, 4, 4]])]


def dijkstra_distance(shape, periodic, offsets, open_, dedupe, weights, sources, *, bonds=None,
                      cache=None, spacing=None) -> np.ndarray:
    """Multi-source weighted distances, where a step ``u -> v`` costs ``fl(bond weight +
    weights[v])``, times the step's Euclidean length with ``spacing``.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`catalytic.kernels.cpu.bfs.bfs_distance` (``dedupe`` is
        unused).
    weights : ndarray of float64, (n,), or None
        Finite, non-negative cost of entering each site (the lattice's geometry checks
        them); None: 0.
    sources : array_like of int
        Flat indices of open sites (cost 0); the caller has checked them (in range, not
        blocked).
    bonds : tuple, optional
        ``Geometry.bond_args()``: steps through closed bonds are not taken, and a bond's
        weight (0 without bond weights) is paid on crossing it. None: every bond open,
        no bond weights.
    cache : dict, optional
        Where the padded bonds are kept between calls (a lattice's backend cache; see
        :func:`catalytic.kernels.cpu._padded.plan_bonds`).
    spacing : ndarray of float64, (d,), optional
        Finite, > 0 (the caller has checked it): a step along offset ``o`` costs its
        length ``|o * spacing|`` times its cost as above (the length alone with neither
        site nor bond weights); see :meth:`catalytic.geometry.Geometry.with_spacing`.

    Returns
    -------
    ndarray of float64, (n,)
        Least cost from the nearest source along out-neighbours, summed in path order
        in float64; inf for unreachable and blocked sites.

    Notes
    -----
    Dijkstra whose queue is a ring of cost buckets in front of a binary heap that holds
    the current bucket only (see :func:`_dijkstra_run`); the costs are those of any
    float64 Dijkstra, bit for bit (:func:`_weighted_search` says why). O((n + e) log n)
    time at worst (every cost in one bucket), near O(n + e) when the weights spread the
    costs over the buckets. Memory: 16 bytes per padded cell, plus 44 (56 with int64
    indices) per queue slot, of which there are at most twice as many as entries were
    ever queued at once (about the wave front). Runs in kernel calls of about
    ``_budget._BUDGET`` units, so a signal handler (Ctrl-C) runs between two of them;
    see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> dijkstra_distance((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False,
    ...                   np.array([5.0, 1.0, 2.0, 0.5]), [0])
    array([0. , 1. , 3. , 3.5])
    """
    g = make_plan(shape, periodic, offsets, open_)
    cells = plan_bonds(g, offsets, bonds, cache)
    ln = plan_lengths(g, spacing)
    psrc = _to_padded(sources, g)
    if ln.shape[0] and weights is None and cells.bw.shape[0] == 0:
        pd = _length_search(g, psrc, None, 1, cells, ln)
        out = np.empty(g.n, dtype=np.float64)
        _unpad_all(pd, out, g, False)
        out[out == -np.inf] = np.inf  # blocked
        return out
    pd, _ = _weighted_search(g, weights, psrc, cells=cells, ln=ln)
    out = np.empty(g.n, dtype=np.float64)
    _unpad_all(pd, out, g, False)
    return out
