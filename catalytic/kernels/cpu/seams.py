"""Joining the pieces of clusters that a chunked labelling cut apart: a union-find over
the bonds that cross the chunks' faces, keeping each piece's image displacement so that
a cluster that closes a loop around a periodic axis is seen to wrap it.

A piece is a cluster of one chunk labelled with every axis open, so its sites lie in one
image of the lattice. A bond from piece ``u`` to piece ``v`` that crosses a periodic
seam ``w`` times forward (``w`` a vector of -1, 0 or 1 per axis) places ``v`` in the
image ``D_v = D_u + w``. The union-find keeps each piece's displacement from its root;
a bond inside one set whose displacements disagree closes a loop of non-zero winding:
the set wraps every axis where they differ.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["join"]


@njit(cache=True, nogil=True)
def _find(parent, pot, x, acc, old):
    """The root of ``x``, with its path pointed at the root and each node's displacement
    made relative to it (``acc`` and ``old``: scratch of length d)."""
    d = acc.shape[0]
    for k in range(d):
        acc[k] = 0
    r = x
    while parent[r] != r:
        for k in range(d):
            acc[k] += pot[r, k]
        r = parent[r]
    # acc: x's displacement from the root; each node up the path then has acc less
    # the displacements below it
    y = x
    while parent[y] != r and y != r:
        up = parent[y]
        for k in range(d):
            old[k] = pot[y, k]
            pot[y, k] = acc[k]
            acc[k] -= old[k]
        parent[y] = r
        y = up
    return r


@njit(cache=True, nogil=True)
def _join(u, v, w, parent, pot, wraps):
    d = w.shape[1]
    acc = np.empty(d, dtype=np.int64)
    old = np.empty(d, dtype=np.int64)
    for e in range(u.shape[0]):
        a = u[e]
        b = v[e]
        ra = _find(parent, pot, a, acc, old)
        rb = _find(parent, pot, b, acc, old)
        if ra != rb:
            # D_b = D_a + w: the root of b, relative to the root of a
            if ra < rb:
                parent[rb] = ra
                for k in range(d):
                    pot[rb, k] = pot[a, k] + w[e, k] - pot[b, k]
                    wraps[ra, k] |= wraps[rb, k]
            else:
                parent[ra] = rb
                for k in range(d):
                    pot[ra, k] = pot[b, k] - w[e, k] - pot[a, k]
                    wraps[rb, k] |= wraps[ra, k]
        else:
            for k in range(d):
                if pot[b, k] != pot[a, k] + w[e, k]:
                    wraps[ra, k] = True


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
    d = w.shape[1]
    parent = np.arange(m, dtype=np.int64)
    pot = np.zeros((m, d), dtype=np.int64)
    wraps = np.zeros((m, d), dtype=np.bool_)
    _join(u, v, w, parent, pot, wraps)
    root = np.empty(m, dtype=np.int64)
    _roots(parent, pot, root)
    return root, wraps


@njit(cache=True, nogil=True)
def _roots(parent, pot, root):
    d = pot.shape[1]
    acc = np.empty(d, dtype=np.int64)
    old = np.empty(d, dtype=np.int64)
    for x in range(root.shape[0]):
        root[x] = _find(parent, pot, x, acc, old)
