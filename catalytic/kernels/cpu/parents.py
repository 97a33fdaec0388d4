"""Parental fields and nearest sources, read from a distance field.

A search gives each reached site its distance; the parental field gives it the
neighbour a shortest path reaches it from, by the tie rule every path of the engine
follows (``backends._common.walk_back``): the in-neighbour of smallest flat index one
hop closer, or on the weighted shortest-path DAG (a tight step that rises in cost, or a
plateau step one level deeper; ``backends._common.plateau_depths``). A source is its
own parent; a blocked or unreached site has -1. The nearest source of a site is where
its chain of parents ends (pointer jumping). Both run in parallel over the rows of the
lattice, in kernel calls of about ``_budget._BUDGET`` units (see "Interrupts" in
:mod:`catalytic.kernels.cpu._budget`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _frozen
from catalytic.kernels.cpu._rows import _row_coords
from catalytic.kernels.cpu.neighbors import bond_at, bond_open, c_strides

__all__ = ["parents", "roots"]


@njit(cache=True, nogil=True, inline="always")
def _in_neighbour(v, k, c, fast, foff, shape, strides, periodic, offsets, open_):
    """The site ``u`` with ``u + offsets[k] == v`` (``c``: the coordinates of ``v``;
    ``fast``: ``v`` is far enough from every edge that ``v - foff[k]`` is it), or -1
    when it leaves an open axis or is blocked."""
    if fast:
        u = v - foff[k]
    else:
        u = 0
        for a in range(shape.shape[0]):
            y = c[a] - offsets[k, a]
            if y < 0 or y >= shape[a]:
                if periodic[a] == 0:
                    return -1
                y %= shape[a]
            u += y * strides[a]
    if open_.shape[0] != 0 and open_[u] == 0:
        return -1
    return u


@njit(cache=True, nogil=True, parallel=True)
def _parents_rows(dist, src, depth, parent, r0, r1, hops, shape, strides, periodic, offsets,
                  foff, reach, open_, bslot, bits, words, bw, w, ln):
    """Parents of the sites of rows ``[r0, r1)`` (a row: the sites along the last axis).

    ``hops``: ``dist`` holds hop counts (-1: none), a parent is one less. Otherwise
    float64 costs (inf: none) and a step ``u -> v`` along offset ``k`` costs
    ``fl(bond weight + w[v])`` (0 for an empty ``bw`` or ``w``; 1 for both empty with
    lengths), times ``ln[k]`` when ``ln`` is not empty; a parent takes a tight step
    (``fl(dist[u] + c) == dist[v]``) that rises in cost or, where ``depth`` is not
    empty, a plateau step from one level shallower. ``src`` (uint8): 1 at the sources,
    their own parents. O(k) a site."""
    d = shape.shape[0]
    L = shape[d - 1]
    K = offsets.shape[0]
    n = dist.shape[0]
    hbw = bw.shape[0] != 0
    hw = w.shape[0] != 0
    hl = ln.shape[0] != 0
    hd = depth.shape[0] != 0
    unit = 1.0 if hl and not hbw and not hw else 0.0
    for row in prange(r0, r1):
        c = np.empty(d, dtype=np.int64)
        _row_coords(row, shape, c[:d - 1])
        inner = True
        for a in range(d - 1):
            inner = inner and reach[a] <= c[a] < shape[a] - reach[a]
        for x in range(L):
            c[d - 1] = x
            v = row * L + x
            if src[v] != 0:
                parent[v] = v
                continue
            dv = dist[v]
            if (hops and dv < 0) or (not hops and not dv < np.inf):
                parent[v] = -1
                continue
            fast = inner and reach[d - 1] <= x < L - reach[d - 1]
            wv = w[v] if hw else unit
            best = -1
            for k in range(K):
                u = _in_neighbour(v, k, c, fast, foff, shape, strides, periodic, offsets,
                                  open_)
                if u < 0 or u == v or (best >= 0 and u >= best):
                    continue
                du = dist[u]
                if hops:
                    if du != dv - 1:
                        continue
                else:
                    if not du < np.inf:
                        continue
                    cost = wv
                    if hbw:
                        cost = bw[bond_at(u, v, bslot[k], n)] + wv
                    if hl:
                        cost = ln[k] * cost
                    if du + cost != dv:
                        continue
                    if not (du < dv or (hd and depth[u] == depth[v] - 1)):
                        continue
                if bond_open(u, v, bslot[k], bits, words):
                    best = u
            parent[v] = best


@njit(cache=True, nogil=True, parallel=True)
def _jump(cur, nxt, lo, hi):
    """One round of pointer jumping over ``[lo, hi)``: ``nxt[v] = cur[cur[v]]`` (-1
    stays -1). Returns how many changed."""
    changed = 0
    for v in prange(lo, hi):
        p = cur[v]
        q = cur[p] if p >= 0 else -1
        nxt[v] = q
        if q != p:
            changed += 1
    return changed


def parents(shape, periodic, offsets, open_, dist, sources, *, depth=None, weights=None,
            bonds=None, lengths=None) -> np.ndarray:
    """The parental field of a distance field.

    Parameters
    ----------
    shape, periodic, offsets, open_
        The lattice, as in :func:`catalytic.kernels.cpu.bfs.bfs_distance`.
    dist : ndarray, (n,)
        Hop counts (int64, -1 where none) or costs (float64, inf where none) from
        ``sources``, as the searches give them.
    sources : ndarray of int64
        The flat indices the search started from.
    depth : ndarray of int64, (n,), optional
        Plateau depths (``backends._common.plateau_depths``) of a weighted field that
        has plateaus; None: none (plateau steps are then no parents' steps).
    weights : ndarray of float64, (n,), optional
        Site weights of a weighted field.
    bonds : tuple, optional
        ``Geometry.bond_args()``: closed bonds are no steps; bond weights are costs.
    lengths : ndarray of float64, (k,), optional
        Step lengths (``neighbors.step_lengths``) of a field measured with spacing.

    Returns
    -------
    ndarray of int64, (n,)
        Each source its own flat index; each other reached site the in-neighbour of
        smallest flat index on a shortest path to it (one hop closer, or on the
        shortest-path DAG); -1 at blocked and unreached sites.

    Notes
    -----
    O(n k), in parallel over rows; sites far enough from the edges find their
    in-neighbours by one subtraction each.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> d = np.array([0, 1, 2, 1, 2, 3])
    >>> parents((2, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), d,
    ...         np.array([0])).tolist()
    [0, 0, 1, 0, 1, 2]
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    n = int(np.prod(shape))
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    strides = c_strides(shape)
    dist = np.ascontiguousarray(dist).reshape(-1)
    hops = dist.dtype.kind in "iu"
    dist = _frozen(dist.astype(np.int64 if hops else np.float64, copy=False))
    src = np.zeros(n, dtype=np.uint8)
    src[np.asarray(sources, dtype=np.int64)] = 1
    if bonds is None:
        bslot = np.zeros(offsets.shape[0], dtype=np.int64)
        bits, words, bw = np.zeros(0, np.uint32), 0, np.zeros(0)
    else:
        bslot, bits, words, bw = bonds
    f64 = np.zeros(0)
    out = np.empty(n, dtype=np.int64)
    reach = np.abs(offsets).max(axis=0) if offsets.shape[0] else np.zeros(d, np.int64)
    L = int(shape[-1]) if d else 1
    rows = n // L if L else 0
    step = max(1, _budget._BUDGET // max(1, L * offsets.shape[0]))
    args = (shape, strides, periodic, offsets, offsets @ strides, reach.astype(np.int64),
            _frozen(np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1)),
            _frozen(np.ascontiguousarray(bslot, dtype=np.int64)),
            _frozen(np.ascontiguousarray(bits, dtype=np.uint32)), np.int64(words),
            _frozen(np.ascontiguousarray(bw, dtype=np.float64)),
            _frozen(f64 if weights is None else np.ascontiguousarray(weights, np.float64)),
            _frozen(f64 if lengths is None else np.ascontiguousarray(lengths, np.float64)))
    dep = _frozen(np.zeros(0, np.int64) if depth is None
                  else np.ascontiguousarray(depth, dtype=np.int64))
    for r0 in range(0, rows, step):
        _parents_rows(dist, _frozen(src), dep, out, np.int64(r0),
                      np.int64(min(rows, r0 + step)), np.bool_(hops), *args)
    return out


def roots(parents) -> np.ndarray:
    """Where each chain of ``parents`` ends (a site that is its own parent): the
    nearest source of every site of a parental field, -1 where the parent is -1.
    Pointer jumping, O(n log L) for chains of at most L steps, in parallel.

    Examples
    --------
    >>> roots(np.array([0, 0, 1, -1, 3])).tolist()
    [0, 0, 0, -1, -1]
    """
    cur = np.array(parents, dtype=np.int64).reshape(-1)
    nxt = np.empty_like(cur)
    n = cur.shape[0]
    step = max(1, _budget._BUDGET)
    while True:
        changed = 0
        for lo in range(0, n, step):
            changed += _jump(cur, nxt, np.int64(lo), np.int64(min(n, lo + step)))
        cur, nxt = nxt, cur
        if changed == 0:
            return cur
