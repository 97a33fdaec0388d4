"""The catalytic shortest path: a hop search whose only per-site state is one byte of
borrowed memory (0 unvisited, else 1 + distance mod 3), then a walk back over it.

The search and the walk run in kernel calls of about ``_budget._BUDGET`` units (see
"Interrupts" in :mod:`catalytic.kernels.cpu._budget`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _INT32_LIMIT, _frozen
from catalytic.kernels.cpu.neighbors import bond_open, c_strides

__all__ = ["catalytic_path"]

_NO_BITS = np.zeros(0, dtype=np.uint32)


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
    ``neighbors.neighbor``), or -1."""
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
def _catalytic_bfs(state, queue, c, st, budget, end, offs, shape, strides, periodic, open_,
                   slot, bits, words):
    """BFS whose only per-site state is ``state[i]`` = 0 (unvisited) or 1 + dist mod 3,
    resumable.

    ``st = [head, tail, level_end, level, dist]``: the FIFO ``queue[head:tail]`` still to
    expand, the queue position where level ``level + 1`` starts, and dist(start, end)
    once found (-1 before). Start from ``[0, 1, 1, 0, -1]`` with ``state[:n]`` zeroed,
    ``state[start]`` 1 and ``queue[0] = start``. Returns after about ``budget`` units;
    done when ``head == tail``, with ``dist`` -1 when ``end`` is unreachable. Steps
    through closed bonds (``slot, bits, words`` as ``neighbors.bond_open`` takes them;
    ``bits`` length 0: all open) are not taken. O(visited * k d) over all calls.
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
            if j < 0 or state[j] != 0 or not bond_open(p, j, slot[k], bits, words):
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
def _catalytic_walk(state, path, c, D, m, m_end, noffs, shape, strides, periodic, open_, slot,
                    bits, words):
    """Steps ``m .. m_end - 1`` of the walk from ``path[0]`` = ``end`` (distance D) back
    to the source: each time to the smallest-index in-neighbour whose state says the
    distance one less (mod 3), along an open bond. Writes end..start into
    ``path[:D + 1]`` over calls with consecutive ranges from m = 1. O((m_end - m) k d)."""
    K = noffs.shape[0]
    v = path[m - 1]
    for h in range(m, m_end):
        want = 1 + (D - h) % 3
        _coords(v, strides, c)
        best = -1
        for k in range(K):
            u = _from_coords(c, k, noffs, shape, strides, periodic, open_)
            # u -> v is offset k from u
            if (u >= 0 and state[u] == want and (best < 0 or u < best)
                    and bond_open(u, v, slot[k], bits, words)):
                best = u
        path[h] = best
        v = best


# ---------------------------------------------------------------------------------------
# Host function
# ---------------------------------------------------------------------------------------


def catalytic_path(shape, periodic, offsets, open_, dedupe, start, end, state, *,
                   bonds=None) -> np.ndarray:
    """Shortest hop path whose per-site search state lives in borrowed memory.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`catalytic.kernels.cpu.bfs.bfs_distance` (``dedupe`` is
        unused).
    start, end : int
        Flat indices of open sites; the caller has checked them.
    state : ndarray of uint8, length >= n
        Borrowed memory (dtype and length asserted): ``state[:n]`` is overwritten (0
        unvisited, 1 + dist mod 3 visited); the caller restores it. ``state[n:]`` is not
        touched.
    bonds : tuple, optional
        ``Geometry.bond_args()``: only open bonds are crossed (bond weights are not
        read: hops). None: every bond open.

    Returns
    -------
    ndarray of int64
        Flat indices start..end, the same path as
        :func:`catalytic.kernels.cpu.paths.shortest_path` for symmetric stencils; length 0
        when unreachable.

    Notes
    -----
    BFS with an int32 FIFO queue of n_open entries (int64 past 2**31 sites), stopping
    when ``end`` is labelled, then a walk back choosing the smallest-index in-neighbour
    whose state encodes distance D-1. Distances mod 3 identify D-1 because neighbours
    of a symmetric stencil differ by at most one hop. O(n k d) time (each step decodes
    coordinates); no memory per site besides ``state``. The search and the walk run in
    kernel calls of about ``_budget._BUDGET`` units, so a signal handler (Ctrl-C)
    runs between two of them (the caller's restoring of ``state`` then runs as the
    exception unwinds); see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`.

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
    open_ = _frozen(np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1))
    n = int(np.prod(shape, dtype=object))
    assert state.dtype == np.uint8 and state.shape[0] >= n
    n_open = int(np.count_nonzero(open_)) if open_.shape[0] else n
    queue = np.empty(max(n_open, 1), dtype=np.int32 if n <= _INT32_LIMIT else np.int64)
    strides = c_strides(shape)
    c = np.empty(d, dtype=np.int64)
    if bonds is None:
        slot, bits, words = np.zeros(offs.shape[0], dtype=np.int64), _NO_BITS, 0
    else:
        slot, bits, words = bonds[0], bonds[1], bonds[2]
    slot = _frozen(np.ascontiguousarray(slot, dtype=np.int64))
    bits = _frozen(np.ascontiguousarray(bits, dtype=np.uint32))
    budget = _budget._BUDGET
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
                       open_, slot, bits, words)
    D = 0 if start == end else int(st[4])
    if D < 0:
        return np.empty(0, dtype=np.int64)
    path = np.empty(D + 1, dtype=np.int64)
    path[0] = end
    noffs = np.ascontiguousarray(-offs)
    step = max(1, budget // max(2 * offs.shape[0], 1))
    for a in range(1, D + 1, step):
        _catalytic_walk(state, path, c, D, a, min(D + 1, a + step), noffs, shape, strides,
                        periodic, open_, slot, bits, words)
    return path[::-1].copy()
