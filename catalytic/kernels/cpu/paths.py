"""Shortest paths on implicit lattices: the walk back over a hop or weighted search, and
the number of shortest hop paths.

The searches are those of :mod:`catalytic.kernels.cpu.bfs` and
:mod:`catalytic.kernels.cpu.dijkstra`; paths are walked back over *in*-neighbours (the
stencil negated), which for the usual symmetric stencils is the same set as the
neighbour set. Everything runs in kernel calls of about ``_budget._BUDGET`` units (see
"Interrupts" in :mod:`catalytic.kernels.cpu._budget`).
"""

from __future__ import annotations

import itertools

import numpy as np
from numba import njit

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _LEVEL_COST, _filled, _frozen
from catalytic.kernels.cpu._padded import (
    NO_BONDS,
    PORTAL,
    UNVISITED,
    BondCells,
    Plan,
    _geo,
    _ngeo,
    _resolve,
    _step,
    _to_padded,
    _to_real,
    _work_array,
    make_plan,
    plan_bonds,
)
from catalytic.kernels.cpu.bfs import _hop_search
from catalytic.kernels.cpu.dijkstra import _cell_args, _weighted_search, plan_lengths
from catalytic.kernels.cpu._rows import _next_row, _row_coords
from catalytic.kernels.cpu.neighbors import c_strides, neighbor

__all__ = ["shortest_path", "shortest_paths", "count_shortest_paths"]

#: Where a path count saturates ("at least this many").
INT64_MAX = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def _walk_hops_part(work, path, m, m_end, nfoff, noffs, r, shape, pstrides, periodic, mode,
                    bits, nw):
    """Steps ``m .. m_end - 1`` of :func:`_walk_back_hops`: ``path[:m]`` is already
    walked, ``path[m]`` becomes the in-neighbour of ``path[m - 1]`` with the smallest
    index whose distance is one less and whose step into it crosses an open bond
    (``bits``/``nw`` of :class:`~catalytic.kernels.cpu._padded.BondCells`; length 0:
    all open). O((m_end - m) k)."""
    K = nfoff.shape[0]
    hb = bits.shape[0] != 0
    v = path[m - 1]
    D = work[v]
    for h in range(m, m_end):
        best = -1
        for k in range(K):
            u = _step(work, v, k, nfoff, noffs, r, shape, pstrides, periodic, mode)
            if u < 0:
                continue
            # u -> v is step k from u
            if hb and ((bits[u * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
                continue
            if work[u] == D - 1 and (best < 0 or u < best):
                best = u
        path[h] = best
        v = best
        D -= 1


@njit(cache=True, nogil=True)
def _walk_back_hops(work, path, nfoff, noffs, r, shape, pstrides, periodic, mode, end, bits,
                    nw):
    """Walk from ``end`` to the source over in-neighbours, each time to the one with the
    smallest index whose distance is one less. Writes end..start into ``path``
    (length work[end] + 1) in one call (the CPU host function calls
    :func:`_walk_hops_part` in chunks instead). O(D k)."""
    D = work[end]
    path[0] = end
    _walk_hops_part(work, path, 1, D + 1, nfoff, noffs, r, shape, pstrides, periodic, mode,
                    bits, nw)
    return D + 1


@njit(cache=True, nogil=True)
def _count_run(work, cnt, queue, buf, st, budget, foff, offs, r, shape, pstrides, periodic,
               mode, dedupe, end, bits, nw):
    """Count shortest hop paths to ``end`` by BFS layer dynamic programming, resumable.

    ``st = [head, tail, limit]``: the FIFO ``queue[head:tail]`` still to expand, and the
    distance of ``end`` once labelled (INT64_MAX before). Start from ``[0, 1, INT64_MAX]``
    with the start cell in ``queue[0]``, its ``work`` 0 and its ``cnt`` 1. Returns after
    about ``budget`` units; done when ``head == tail``, and then ``cnt[end]`` is the count
    if ``work[end] >= 0``. Counts saturate at INT64_MAX; a saturated count means "at
    least INT64_MAX". O(visited * k), plus O(k^2) per site with ``dedupe``, over all calls.
    Steps through closed bonds (``bits``/``nw``, length 0: all open) are not taken, and
    not seen by the duplicate test (the first usable step to a cell counts).
    """
    K = foff.shape[0]
    hb = bits.shape[0] != 0
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
            if hb and ((bits[p * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
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


@njit(cache=True, nogil=True)
def _walk_dag_part(pd, pw, depth, path, m, budget, nfoff, noffs, r, shape, pstrides, periodic,
                   mode, start, bits, nw, bw, slot, fwd, ln):
    """Continue the walk back whose sites so far are ``path[:m]`` (end first) over the
    shortest-path DAG (see :func:`weighted_walk`): from ``v``, to the in-neighbour ``u``
    of smallest index with a tight step ``u -> v`` that rises in cost or, where ``v`` has
    a plateau depth ``> 0`` in ``depth``, one that comes from depth ``depth[v] - 1``.

    The stencil steps are spelled out here and in :func:`_plateau_part`: a call of
    :func:`_step`, even inlined, made these loops several times slower.

    Returns ``(m, status)`` after about ``budget`` units: status 0 (call again), 1
    (``path[m - 1]`` is ``start``), 2 (``path[m - 1]`` has no rising tight step and no
    depth yet: compute its plateau's depths with :func:`_plateau_part`, then call again)
    or 3 (no step into ``path[m - 1]``: the costs are inconsistent).

    ``bits, nw, bw, slot, fwd``: :class:`~catalytic.kernels.cpu._padded.BondCells`; a
    step ``u -> v`` needs an open bond and costs ``fl(bond weight + pw[v])``, times
    ``ln[k]`` for step ``k`` with step lengths (``ln`` of length 0: none)."""
    K = nfoff.shape[0]
    hb = bits.shape[0] != 0
    hw = bw.shape[0] != 0
    hl = ln.shape[0] != 0
    P = pd.shape[0]
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
            if pw[u] < 0:
                continue
            # u -> v is step k from u
            if hb and ((bits[u * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
                continue
            c = wv
            if hw:
                c = bw[slot[k] * P + (u if fwd[k] != 0 else v)] + wv
            if hl:
                c = ln[k] * c
            if pd[u] + c != dv:
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
                  r, shape, pstrides, periodic, mode, bits, nw, bw, slot, fwd, ln):
    """Plateau depths (see :func:`weighted_walk`) for the sites from which a path of
    plateau steps leads to ``members[0]``, resumable. ``depth`` is -1 where unknown.

    ``st = [phase, i, m, j, t]``. Phase 0 collects those sites into ``members[:m]``
    (marked -2 in ``depth``) by a search back over plateau steps from ``members[0]``;
    phase 1 gives depth 0 to ``start`` and to the members entered by a tight step that
    rises in cost, queueing them in ``queue``; phase 2 searches forward from them over
    plateau steps among the members, each one deeper than its parent (``queue[j:t]``
    still to expand). A shallowest plateau path into a member only passes through
    members, so its depth is the one a search over the whole plateau gives. Returns 1
    when done, 0 to be called again (about ``budget`` units a call). O(members k).
    Bonds (``bits, nw, bw, slot, fwd``) and step lengths ``ln`` as in
    :func:`_walk_dag_part`."""
    K = foff.shape[0]
    hb = bits.shape[0] != 0
    hw = bw.shape[0] != 0
    hl = ln.shape[0] != 0
    P = pd.shape[0]
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
            if not hw and not hl and c + pw[x] != c:
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
                if pw[u] < 0 or depth[u] != -1 or pd[u] != c:
                    continue
                if hb and ((bits[u * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
                    continue
                if hw or hl:
                    cu = pw[x]
                    if hw:
                        cu = bw[slot[k] * P + (u if fwd[k] != 0 else x)] + cu
                    if hl:
                        cu = ln[k] * cu
                    if c + cu != c:
                        continue
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
                if pw[u] < 0 or pd[u] >= c:
                    continue
                if hb and ((bits[u * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
                    continue
                cx = pw[x]
                if hw:
                    cx = bw[slot[k] * P + (u if fwd[k] != 0 else x)] + cx
                if hl:
                    cx = ln[k] * cx
                if pd[u] + cx == c:
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
                if pw[y] < 0 or depth[y] != -2 or pd[y] != c:
                    continue
                if hb and ((bits[x * nw + (k >> 3)] >> (k & 7)) & 1) == 0:
                    continue
                cy = pw[y]
                if hw:
                    cy = bw[slot[k] * P + (x if fwd[k] != 0 else y)] + cy
                if hl:
                    cy = ln[k] * cy
                if c + cy == c:
                    depth[y] = depth[x] + 1
                    queue[t] = y
                    t += 1
    st[0], st[1], st[2], st[3], st[4] = phase, i, m, j, t
    return 0


@njit(cache=True, nogil=True)
def _free_hops(u, sc, shape, strides, periodic, chebyshev):
    """Hops from the site of coordinates ``sc`` to site ``u`` on a lattice without
    blocked sites or bonds: per axis the distance (the short way round a periodic
    axis), summed (von Neumann) or the largest (Moore)."""
    total = 0
    rem = u
    for a in range(shape.shape[0]):
        c = rem // strides[a]
        rem -= c * strides[a]
        x = abs(c - sc[a])
        if periodic[a] != 0:
            x = min(x, shape[a] - x)
        total = max(total, x) if chebyshev else total + x
    return total


@njit(cache=True, nogil=True)
def _walk_free(path, sc, shape, strides, periodic, noffsets, chebyshev):
    """:func:`_walk_back_hops` with the distances in closed form (:func:`_free_hops`):
    ``path[0]`` is the end, ``path`` has its hops + 1 entries; each next entry is the
    in-neighbour of smallest flat index one hop nearer. O(len(path) k d)."""
    none = np.zeros(0, dtype=np.uint8)
    K = noffsets.shape[0]
    v = path[0]
    for h in range(1, path.shape[0]):
        want = path.shape[0] - 1 - h
        best = -1
        for k in range(K):
            u = neighbor(v, k, shape, strides, periodic, noffsets, none)
            if (u >= 0 and u != v and (best < 0 or u < best)
                    and _free_hops(u, sc, shape, strides, periodic, chebyshev) == want):
                best = u
        path[h] = best
        v = best


@njit(cache=True, nogil=True)
def _monotone_sweep(reach, open_, strides, sc, sign, ext, lstr, r0, r1):
    """Mark the sites of the box from the start (coordinates ``sc``) towards the end
    (``sign`` per axis, ``ext`` sites per axis, local C strides ``lstr``) that a path
    stepping only towards the end reaches: ``reach[i] = 1`` when the site is open and
    is the start or follows a marked site on some axis. Box rows (all axes but the
    last) ``[r0, r1)``, the rows before them done. O(box d)."""
    d = ext.shape[0]
    L = ext[d - 1]
    s_last = sign[d - 1] * strides[d - 1]
    idx = np.zeros(d - 1, dtype=np.int64)  # the row's box coordinates
    _row_coords(r0, ext, idx)
    has_mask = open_.shape[0] != 0
    pb = np.empty(max(d - 1, 1), dtype=np.int64)
    for row in range(r0, r1):
        vb = sc[d - 1] * strides[d - 1]
        ib = row * L
        m = 0  # the rows before this one along each axis where there is one
        for a in range(d - 1):
            vb += (sc[a] + sign[a] * idx[a]) * strides[a]
            if idx[a] > 0:
                pb[m] = ib - lstr[a]
                m += 1
        prev = np.uint8(1) if row == 0 else np.uint8(0)  # the start is reached
        for x in range(L):
            acc = prev
            for j in range(m):
                acc |= reach[pb[j] + x]
            if has_mask:
                acc &= open_[vb + x * s_last]
            reach[ib + x] = acc
            prev = acc
        _next_row(idx, ext)


@njit(cache=True, nogil=True)
def _monotone_walk(reach, path, strides, sign, ext, lstr):
    """Walk back over :func:`_monotone_sweep`'s marks from the box's far corner (the
    end, ``path[0]``): each next site is, of the marked ones a step nearer the start,
    the one of smallest flat index. ``path`` has the box's L1 extent + 1 entries."""
    d = ext.shape[0]
    idx = ext - 1
    i = 0
    for a in range(d):
        i += idx[a] * lstr[a]
    v = path[0]
    for h in range(1, path.shape[0]):
        best = -1
        bestv = 0
        for a in range(d):
            if idx[a] > 0 and reach[i - lstr[a]] != 0:
                u = v - sign[a] * strides[a]
                if best < 0 or u < bestv:
                    best = a
                    bestv = u
        idx[best] -= 1
        i -= lstr[best]
        v = bestv
        path[h] = v


# ---------------------------------------------------------------------------------------
# Host functions
# ---------------------------------------------------------------------------------------


def weighted_walk(pd, pw, ps, pe, n_open, geo, ngeo, cells: BondCells = NO_BONDS,
                  ln=None) -> np.ndarray:
    """The shortest path ``ps .. pe`` (padded or, with mode 0 tables, plain indices) on
    the costs ``pd`` of a search from ``ps``; ``pw`` the entry weights (negative on walls
    and portals), ``geo``/``ngeo`` the stencil tables forward and negated.

    The tie rule, shared with the numpy reference (``backends._common.plateau_depths``,
    where the definitions are): a step u -> v (through an open bond of ``cells``, which
    are laid out for the tables ``geo``) is tight when ``pd[u] + c(u, v) == pd[v]`` in
    float64, ``c(u, v) = fl(bond weight + pw[v])`` its cost (``pw[v]`` without bond
    weights; times the step's length ``ln[k]`` with step lengths, float64 per step of
    ``geo``'s tables); a tight step with ``pd[u] == pd[v]`` (a zero weight, or one too small to
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
    cargs = _cell_args(cells) + (np.zeros(0) if ln is None else ln,)
    budget = _budget._BUDGET
    while True:
        m, status = _walk_dag_part(pd, pw, depth, path, m, budget, *ngeo, ps, *cargs)
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
                                    *ngeo[:2], *geo[2:], *cargs):
                pass
            if depth[members[0]] <= 0:
                raise AssertionError(f"weighted walk: cell {members[0]} has no plateau depth")


def shortest_path(shape, periodic, offsets, open_, dedupe, start, end, weights=None, *,
                  bonds=None, cache=None, with_cost=False, spacing=None):
    """One shortest path from ``start`` to ``end``, chosen by the project-wide tie rule.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`catalytic.kernels.cpu.bfs.bfs_distance` (``dedupe`` is
        unused).
    start, end : int
        Flat indices of open sites; the caller has checked them.
    weights : ndarray of float64, (n,), optional
        Finite, non-negative cost of entering each site; hop counts when None (and
        no bond weights).
    bonds : tuple, optional
        ``Geometry.bond_args()``: only open bonds are crossed, and with bond weights
        a step ``u -> v`` costs ``fl(bond weight + weights[v])`` (costs, not hops, even
        when ``weights`` is None). None: every bond open.
    cache : dict, optional
        Where the padded bonds are kept between calls (see
        :func:`catalytic.kernels.cpu._padded.plan_bonds`).
    with_cost : bool
        Also return the path's length: hops, or its cost as the search summed it
        (step costs left to right; inf when unreachable, -1 hops).
    spacing : ndarray of float64, (d,), optional
        Euclidean step costs, as in
        :func:`catalytic.kernels.cpu.dijkstra.dijkstra_distance`.

    Returns
    -------
    ndarray of int64
        Flat indices start..end; length 0 when ``end`` is unreachable. With
        ``with_cost``, ``(path, length)``.

    Notes
    -----
    Distances from ``start`` (the search stops once ``end``'s distance is final), then a
    walk back from ``end``: at site v with distance D it moves to the in-neighbour u of
    smallest flat index with dist[u] == D - 1 (hops), or along an edge of the weighted
    shortest-path DAG (:func:`weighted_walk`: a tight step dist[u] + weights[v] ==
    dist[v] that rises in cost, or one of equal cost, which zero or below-rounding
    weights make, from one plateau level shallower). O(n k) hops, O((n + e) log n)
    weighted. The search and the walk run in kernel calls of about ``_budget._BUDGET``
    units, so a signal handler (Ctrl-C) runs between two of them; see "Interrupts" in
    :mod:`catalytic.kernels.cpu._budget`.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> shortest_path((3, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False, 0, 8)
    array([0, 1, 2, 5, 8])
    """
    _, path, length = shortest_paths(shape, periodic, offsets, open_, dedupe, start, [end],
                                     weights, first=True, bonds=bonds, cache=cache,
                                     spacing=spacing)
    return (path, length) if with_cost else path


def shortest_paths(shape, periodic, offsets, open_, dedupe, start, ends, weights=None, *,
                   first=False, bonds=None, cache=None, spacing=None):
    """Shortest paths from ``start`` to several ends, from one search that stops when
    the first of them (``first``) or all of them are reached.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe, start, weights, bonds, cache, spacing
        As in :func:`shortest_path`.
    ends : sequence of int
        Flat indices of open sites (repeats allowed); the caller has checked them.
    first : bool
        Stop at the nearest end: of ends at the same distance, the one of smallest flat
        index (the first of them in ``ends``).

    Returns
    -------
    list of (path, length), one per end in order; with ``first``, ``(j, path, length)``
        for the nearest end ``ends[j]`` (``j`` -1, the path empty, when none is
        reachable). Paths and lengths as :func:`shortest_path` gives them with
        ``with_cost``.

    Notes
    -----
    The search ends after the BFS level, or once the Dijkstra has settled every cost up
    to the one, at which the first (or last) end is reached: every cost a walk back from
    those ends reads is then final, so each path is the one :func:`shortest_path` gives.
    Hops on a lattice without blocked sites or bonds under the von Neumann or Moore
    stencil have a closed form (per axis the distance, the short way round a periodic
    axis; summed, or the largest): there the walk reads it and nothing is searched,
    O(path k d) a path (:func:`_free_paths`). With blocked sites, one end, the von
    Neumann stencil and open axes, a path that steps only towards the end is shortest
    when there is one: one sweep over the box between the two sites finds it
    (:func:`_monotone_path`), and the search runs only when there is none.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> p = np.zeros(2, np.uint8)
    >>> shortest_paths((3, 3), p, off, np.zeros(0, np.uint8), False, 0, [8, 4], first=True)
    (1, array([0, 1, 4]), 2)
    """
    ends = np.asarray(ends, dtype=np.int64).reshape(-1)
    if weights is None and spacing is None and bonds is None:
        chebyshev = _free_metric(offsets, np.zeros(0), None)  # the stencil's, if any
        if chebyshev is not None and np.asarray(open_).reshape(-1).shape[0] == 0:
            # hops in closed form: no search
            return _free_paths(shape, periodic, offsets, start, ends, first, chebyshev)
        if chebyshev is False and ends.shape[0] == 1:  # a monotone path: no search either
            path = _monotone_path(shape, periodic, open_, start, int(ends[0]))
            if path is not None:
                return (0, path, len(path) - 1) if first else [(path, len(path) - 1)]
    g = make_plan(shape, periodic, offsets, open_)
    ps = int(_to_padded([start], g)[0])
    pe = _to_padded(ends, g)
    stops = np.unique(pe)
    need = 1 if first else stops.shape[0]
    cells = plan_bonds(g, offsets, bonds, cache)
    hops = weights is None and cells.bw.shape[0] == 0 and spacing is None
    if hops:
        work = _hop_search(g, [ps], stops=stops, need=need, cells=cells)
        dist = work[pe].astype(np.int64)
        reached = dist >= 0
    else:
        ln = plan_lengths(g, spacing)
        pd, pw = _weighted_search(g, weights, [ps], stops=stops, need=need, cells=cells,
                                  ln=ln)
        dist = pd[pe]
        reached = np.isfinite(dist)
    none = np.empty(0, dtype=np.int64)
    unreached = -1 if hops else np.inf

    def one(j):
        if not reached[j]:
            return none, unreached
        if hops:
            return _hop_walk(g, work, int(pe[j]), cells), int(dist[j])
        return (_to_real(weighted_walk(pd, pw, ps, int(pe[j]), g.n_open, _geo(g), _ngeo(g),
                                       cells, ln), g), float(dist[j]))

    if not first:
        return [one(j) for j in range(ends.shape[0])]
    if not reached.any():
        return -1, none, unreached
    # the nearest, then the smallest flat index (the first of its repeats)
    j = int(np.lexsort((np.arange(ends.shape[0]), ends, np.where(reached, dist, 0),
                        ~reached))[0])
    return (j,) + one(j)


def _free_metric(offsets, open_, bonds):
    """Whether hops have a closed form here, and which: None when not (a blocked site,
    bonds, or another stencil), False for the von Neumann stencil (hops sum over the
    axes), True for the Moore stencil (the largest axis counts)."""
    if np.asarray(open_).reshape(-1).shape[0] != 0 or bonds is not None:
        return None
    offsets = np.asarray(offsets, dtype=np.int64)
    d = offsets.shape[1]
    rows = {tuple(r) for r in offsets.tolist()}
    if len(rows) != offsets.shape[0]:
        return None
    axes = {tuple(s * (i == a) for i in range(d)) for a in range(d) for s in (1, -1)}
    if rows == axes:
        return False
    if rows == set(itertools.product((-1, 0, 1), repeat=d)) - {(0,) * d}:
        return True
    return None


def _free_paths(shape, periodic, offsets, start, ends, first, chebyshev):
    """:func:`shortest_paths` on a lattice without blocked sites, bonds or weights under
    the von Neumann or Moore stencil: the hops in closed form, each path walked back
    from them (:func:`_walk_free`), no search. O(path k d) a path."""
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(-1)
    strides = c_strides(shape)
    sc = np.array(np.unravel_index(int(start), tuple(shape)), dtype=np.int64)
    ec = np.array(np.unravel_index(ends, tuple(shape)), dtype=np.int64).reshape(
        shape.shape[0], -1)
    x = np.abs(ec - sc[:, None])
    x = np.where(periodic[:, None] != 0, np.minimum(x, shape[:, None] - x), x)
    dist = x.max(axis=0, initial=0) if chebyshev else x.sum(axis=0)
    noffsets = np.ascontiguousarray(-np.asarray(offsets, dtype=np.int64))

    def one(j):
        path = np.empty(int(dist[j]) + 1, dtype=np.int64)
        path[0] = ends[j]
        _walk_free(path, sc, shape, strides, periodic, noffsets, np.bool_(chebyshev))
        return path[::-1].copy(), int(dist[j])

    if not first:
        return [one(j) for j in range(ends.shape[0])]
    j = int(np.lexsort((np.arange(ends.shape[0]), ends, dist))[0])
    return (j,) + one(j)


def _monotone_path(shape, periodic, open_, start, end):
    """The shortest hop path ``start .. end`` when it is a monotone one, else None.

    Under the von Neumann stencil, along open axes, no path is shorter than the L1
    distance, and the paths of that length are the ones that step only towards the
    end. When one exists (:func:`_monotone_sweep` over the box between the two sites),
    the hops are the L1 distance and the sites one hop nearer the start are exactly the
    marked box neighbours nearer it, so the walk back (:func:`_monotone_walk`) is the
    search's (the smallest flat index one hop nearer). The caller has checked that the
    stencil is von Neumann's; None (search instead) with a periodic axis. O(box d), no queue; in calls of about
    ``_BUDGET`` units."""
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    if np.asarray(periodic).any():
        return None
    strides = c_strides(shape)
    sc = np.array(np.unravel_index(int(start), tuple(shape)), dtype=np.int64)
    ec = np.array(np.unravel_index(int(end), tuple(shape)), dtype=np.int64)
    sign = np.where(ec >= sc, 1, -1).astype(np.int64)
    ext = np.abs(ec - sc) + 1
    lstr = c_strides(ext)
    reach = np.empty(int(np.prod(ext)), dtype=np.uint8)
    open_ = _frozen(np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1))
    rows = reach.shape[0] // int(ext[-1])
    step = max(1, _budget._BUDGET // max(1, int(ext[-1]) * d))
    for r0 in range(0, rows, step):
        _monotone_sweep(reach, open_, strides, sc, sign, ext, lstr, np.int64(r0),
                        np.int64(min(rows, r0 + step)))
    if reach[-1] == 0:
        return None
    path = np.empty(int((ext - 1).sum()) + 1, dtype=np.int64)
    path[0] = end
    _monotone_walk(reach, path, strides, sign, ext, lstr)
    return path[::-1].copy()


def _hop_walk(g: Plan, work, pe: int, cells: BondCells) -> np.ndarray:
    """The shortest hop path to padded cell ``pe`` on the distances ``work`` (walked
    back by :func:`_walk_hops_part`), as real flat indices from its source."""
    ngeo = _ngeo(g)
    D = int(work[pe])
    path = np.empty(D + 1, dtype=np.int64)
    path[0] = pe
    # a step costs a level
    step = max(1, _budget._BUDGET // (g.offs.shape[0] + _budget._LEVEL_COST))
    for a in range(1, D + 1, step):
        _walk_hops_part(work, path, a, min(D + 1, a + step), *ngeo, cells.bits,
                        np.int64(cells.nw))
    return _to_real(path[::-1], g)


def count_shortest_paths(shape, periodic, offsets, open_, dedupe, start, end, *, bonds=None,
                         cache=None):
    """Number of distinct shortest hop paths from ``start`` to ``end``.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`catalytic.kernels.cpu.bfs.bfs_distance`; ``dedupe``
        matters here (a duplicated neighbour must not count twice).
    start, end : int
        Flat indices of open sites; the caller has checked them.
    bonds, cache
        As in :func:`shortest_path`: hop paths over the open bonds (bond weights are
        not read; the caller refuses them).

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
    Runs in kernel calls of about ``_budget._BUDGET`` units, so a signal handler (Ctrl-C)
    runs between two of them; see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`.

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
    cells = plan_bonds(g, offsets, bonds, cache)
    budget = _budget._BUDGET
    while st[0] < st[1]:
        _count_run(work, cnt, queue, buf, st, budget, *geo, bool(dedupe), pe, cells.bits,
                   np.int64(cells.nw))
    c = int(cnt[pe]) if work[pe] >= 0 else 0
    if c == INT64_MAX:
        return c, True
    return c, False
