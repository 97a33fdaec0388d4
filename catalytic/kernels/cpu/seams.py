"""Joining the pieces of clusters that a chunked labelling cut apart: a union-find over
the bonds that cross the chunks' faces, keeping each piece's image displacement so that
a cluster that closes a loop around a periodic axis is seen to wrap it.

A piece is a cluster of one chunk labelled with every axis open, so its sites lie in one
image of the lattice. A bond from piece ``u`` to piece ``v`` that crosses a periodic
seam ``w`` times forward (``w`` a vector of -1, 0 or 1 per axis) places ``v`` in the
image ``D_v = D_u + w``. The union-find keeps each piece's displacement from its root;
a bond inside one set whose displacements disagree closes a loop of non-zero winding:
the set wraps every axis where they differ. The CUDA labelling's seam steps are joined
on the host by the same union-find (:mod:`catalytic.kernels.cuda.winding`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["join"]


@njit(cache=True, nogil=True)
def _find(parent, pos, path, x):
    """The root of ``x``, every node on the way hung from it directly with its position
    (``pos``, seam crossings relative to its parent) made relative to the root."""
    m = 0
    r = x
    while parent[r] != r:
        path[m] = r
        m += 1
        r = parent[r]
    for i in range(m - 2, -1, -1):
        y = path[i]
        par = parent[y]
        for q in range(pos.shape[1]):
            pos[y, q] += pos[par, q]
        parent[y] = r
    return r


@njit(cache=True, nogil=True)
def _seam_union(ia, ib, turns, nodes):
    """Union-find with displacements over ``nodes`` nodes joined by the steps
    ``ia[e] -> ib[e]`` that cross the seams ``turns[e]``: ``pos(ib) = pos(ia) + turns``.
    Returns ``(root, wrap, pos)``: each node's root, the smallest node of its set; per
    root a uint8 flag per tracked axis, 1 where a step inside the set contradicts the
    positions (a cycle of non-zero winding along that axis); each node's position
    relative to its root."""
    p = turns.shape[1]
    parent = np.arange(nodes)
    pos = np.zeros((nodes, p), dtype=np.int64)
    wrap = np.zeros((nodes, p), dtype=np.uint8)
    path = np.empty(nodes, dtype=np.int64)
    for e in range(ia.shape[0]):
        a, b = ia[e], ib[e]
        ra = _find(parent, pos, path, a)
        rb = _find(parent, pos, path, b)
        if ra == rb:
            for q in range(p):
                if pos[b, q] - pos[a, q] != turns[e, q]:
                    wrap[ra, q] = 1
        elif ra < rb:
            parent[rb] = ra
            for q in range(p):
                pos[rb, q] = pos[a, q] + turns[e, q] - pos[b, q]
                wrap[ra, q] |= wrap[rb, q]
        else:
            parent[ra] = rb
            for q in range(p):
                pos[ra, q] = pos[b, q] - turns[e, q] - pos[a, q]
                wrap[rb, q] |= wrap[ra, q]
    for x in range(nodes):
        _find(parent, pos, path, x)
    return parent, wrap, pos


def join(u, v, w, m):
    """The sets of ``m`` pieces joined by the bonds ``u[e] -- v[e]``, each crossing the
    periodic seams ``w[e]`` times forward (int (E, d)).

    Returns
    -------
    root : int64 (m,)
        Each piece's set, as its smallest piece (so a set's number is its first piece).
    wraps : bool (m, d)
        On each set's root: whether the set wraps each axis (a loop of non-zero winding
        along it).

    Examples
    --------
    Three pieces in a ring around a periodic axis of three chunks: the last bond crosses
    the seam, so the set wraps.

    >>> import numpy as np
    >>> u, v = np.array([0, 1, 2]), np.array([1, 2, 0])
    >>> w = np.array([[0], [0], [1]])
    >>> root, wraps = join(u, v, w, 3)
    >>> root.tolist(), wraps[0].tolist()
    ([0, 0, 0], [True])
    """
    u = np.ascontiguousarray(u, dtype=np.int64)
    v = np.ascontiguousarray(v, dtype=np.int64)
    w = np.ascontiguousarray(w, dtype=np.int64)
    if w.ndim != 2 or w.shape[0] != u.shape[0] or v.shape != u.shape:
        raise ValueError(f"u, v and w must have shapes (E,), (E,) and (E, d), got "
                         f"{u.shape}, {v.shape} and {w.shape}")
    root, wraps, _ = _seam_union(u, v, w, m)
    return root, wraps.astype(bool)
