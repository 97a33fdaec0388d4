"""Site-by-site labelling of equal values: the parts every stencil shares.

:mod:`catalytic.kernels.cpu.equal` labels the clusters of equal values one site at a
time in C order, as two-pass labellings do (Rosenfeld and Pfaltz; the decision trees
of Wu, Otoo and Suzuki, 2009): a site whose value equals a backward neighbour's takes
that neighbour's provisional label, joins the labels of the other equal backward
neighbours by union-find, and otherwise starts a label of its own. Equality is
transitive, so two equal backward neighbours that are neighbours of each other already
share a set: once a site has joined one of them it skips the backward neighbours that
one *covers* (its own neighbours among them). The backward offsets come in a priority
order with a bitmask of what each covers (``equal._plan``); this module holds the
general scan, used for every site of a stencil without a generated decision tree
(:mod:`catalytic.kernels.cpu._equal_trees`) and for the sites near an edge of a
stencil with one.

Provisional labels of the row chunk from row ``r0`` start above ``r0 * L`` (so every
chunk has its own range below ``n``); ``eq`` is their union-find forest with
``eq[x] <= x`` (``components._union``). A site's backward neighbours in rows before
``r0``, and those across a periodic axis, are joined afterwards (``equal._seams``,
``equal._wraps``): here every axis is open.

The labelled sites come in one of two forms, and every kernel here compiles for each:
an array of uint8 (non-zero: labelled), or the background's key alone, a scalar of the
keys' type, when the labelled sites are exactly those whose key differs from it (no
mask). The second reads no site array, and a neighbour whose key equals a labelled
site's is labelled too, so a tree's questions are one comparison each (:func:`_on`,
:func:`_joins`).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, types
from numba.extending import overload

from catalytic.kernels.cpu._rows import _row_coords
from catalytic.kernels.cpu.components import _stencil_halves, _union

#: the most backward offsets (half the stencil) the site labelling takes: its cover
#: masks are the bits of an int64
MAX_BACK = 62


def _on(sites, keys, i):
    """Whether site ``i`` is labelled (``sites``: an array, or the background's key)."""
    return sites[i] != 0 if isinstance(sites, np.ndarray) else keys[i] != sites


def _joins(sites, keys, n, cur):
    """Whether neighbour ``n`` is labelled with key ``cur`` (that of a labelled site)."""
    return keys[n] == cur and (not isinstance(sites, np.ndarray) or sites[n] != 0)


@overload(_on)
def _on_numba(sites, keys, i):
    if isinstance(sites, types.Array):
        return lambda sites, keys, i: sites[i] != 0
    return lambda sites, keys, i: keys[i] != sites


@overload(_joins)
def _joins_numba(sites, keys, n, cur):
    if isinstance(sites, types.Array):
        return lambda sites, keys, n, cur: keys[n] == cur and sites[n] != 0
    # a key equal to a labelled site's is not the background's
    return lambda sites, keys, n, cur: keys[n] == cur


@njit(cache=True, nogil=True, inline="always")
def _back_invalid(row, r0, shape, offs, c):
    """Bits of the backward offsets ``offs`` (priority order) that from row ``row``
    leave the lattice along an axis other than the last (every axis taken as open) or
    reach a row before ``r0``. ``c``: scratch of d - 1 int64."""
    d = shape.shape[0]
    _row_coords(row, shape, c)
    bits = np.int64(0)
    for j in range(offs.shape[0]):
        t = np.int64(0)
        bad = False
        for a in range(d - 1):
            v = c[a] + offs[j, a]
            bad |= v < 0 or v >= shape[a]
            t = t * shape[a] + v
        if bad or t < r0:
            bits |= np.int64(1) << j
    return bits


@njit(cache=True, nogil=True, inline="always")
def _x_invalid(x, L, offs):
    """Bits of the backward offsets whose last-axis step leaves [0, L) from ``x``."""
    d = offs.shape[1]
    bits = np.int64(0)
    for j in range(offs.shape[0]):
        v = x + offs[j, d - 1]
        if v < 0 or v >= L:
            bits |= np.int64(1) << j
    return bits


@njit(cache=True, nogil=True, inline="always")
def _site_any(keys, sites, labels, eq, i, cov, lin, adj, full, nl):
    """Label site ``i`` (labelled, not yet written) from its backward neighbours not in
    ``cov``; returns the last provisional label used."""
    cur = keys[i]
    lbl = labels.dtype.type(0)
    for j in range(lin.shape[0]):
        if (cov >> j) & 1:
            continue
        n = i + lin[j]
        if _joins(sites, keys, n, cur):
            if lbl == 0:
                lbl = labels[n]
            else:
                _union(eq, lbl, labels[n])
            cov |= adj[j]
            if cov == full:
                break
    if lbl == 0:
        nl += 1
        lbl = labels.dtype.type(nl)
        eq[nl] = nl
    labels[i] = lbl
    return nl


@njit(cache=True, nogil=True, inline="always")
def _edge(keys, sites, labels, eq, i, base, L, offs, lin, adj, full, nl):
    """Label site ``i`` of the row from ``base`` with the general scan, the offsets that
    leave the row's ends left out (a row whose other offsets are all valid)."""
    if not _on(sites, keys, i):
        labels[i] = 0
        return nl
    return _site_any(keys, sites, labels, eq, i, _x_invalid(i - base, L, offs), lin, adj,
                     full, nl)


@njit(cache=True, nogil=True, inline="always")
def _row_any(keys, sites, labels, eq, base, L, inv, reach, offs, lin, adj, full, nl):
    """Label the row of ``L`` sites from ``base`` with the general scan (``inv``: the
    row's invalid offsets, ``reach`` the longest last-axis step). Returns ``nl``."""
    for x in range(L):
        i = base + x
        if not _on(sites, keys, i):
            labels[i] = 0
            continue
        cov = inv
        if x < reach or x >= L - reach:
            cov |= _x_invalid(x, L, offs)
        nl = _site_any(keys, sites, labels, eq, i, cov, lin, adj, full, nl)
    return nl


@njit(cache=True, nogil=True)
def _rows_any(keys, sites, labels, eq, shape, offs, lin, adj, reach, nl, r0, ra, rb):
    """Label rows [ra, rb) of the chunk from row ``r0`` with the general scan; returns
    the last provisional label used (``nl`` the one before). O(sites x offsets)."""
    d = shape.shape[0]
    L = shape[d - 1]
    full = (np.int64(1) << offs.shape[0]) - 1
    c = np.empty(d - 1, dtype=np.int64)
    for row in range(ra, rb):
        inv = _back_invalid(row, r0, shape, offs, c)
        nl = _row_any(keys, sites, labels, eq, row * L, L, inv, reach, offs, lin, adj, full,
                      nl)
    return nl


@functools.lru_cache(maxsize=64)
def plan(key: bytes, d: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(offs, cover, reach)`` for the offsets table with raw bytes ``key``: the
    backward half of the stencil (``components._stencil_halves``) in priority order
    (those covering the most others first, steps along the last axis after the rest on a
    tie, then C order), ``cover[j]`` the bits of the offsets that ``offs[j]`` covers
    (itself, and every other whose difference from it is a step of the stencil), and the
    longest last-axis step; ``cover`` is empty for more than :data:`MAX_BACK` offsets.
    Cached; the arrays are read-only.

    Examples
    --------
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1], [-1, -1], [1, 1], [-1, 1],
    ...                 [1, -1]])
    >>> offs, cover, reach = plan(off.tobytes(), 2)
    >>> offs.tolist(), [bin(b) for b in cover], reach
    ([[-1, 0], [-1, -1], [0, -1], [-1, 1]], ['0b1111', '0b111', '0b111', '0b1001'], 1)
    """
    half = _stencil_halves(key, d)[0]
    steps = {tuple(int(v) for v in o) for o in half}
    steps |= {tuple(-v for v in o) for o in steps}
    rows = [tuple(int(v) for v in o) for o in half]

    def covers(o, p):
        return tuple(b - a for a, b in zip(o, p)) in steps

    order = sorted(rows, key=lambda o: (-sum(covers(o, p) for p in rows), o[-1] != 0, o))
    k = len(order)
    cover = np.array([(1 << j) | sum(1 << m for m in range(k) if covers(order[j], order[m]))
                      for j in range(k)] if k <= MAX_BACK else [], dtype=np.int64)
    offs = np.array(order, dtype=np.int64).reshape(k, d)
    reach = int(np.abs(offs[:, -1]).max(initial=0))
    offs.setflags(write=False)
    cover.setflags(write=False)
    return offs, cover, reach
