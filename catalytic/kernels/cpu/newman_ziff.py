"""Newman-Ziff sweeps: occupy a lattice's sites or bonds one at a time in random order and
record, after every occupation, the cluster observables and the first spanning and
wrapping (Newman & Ziff, PRL 85, 4104 (2000); PRE 64, 016706 (2001)).

Elements
    ``kind = 0`` (site): the existing sites, each joined to its occupied neighbours
    through the lattice's open bonds. ``kind = 1`` (bond): the usable bonds ``(s,
    start)``, flat index ``s * n + start`` (both ends exist, the bond stays inside the
    open axes, it is open); every existing site is present from the start. Parallel
    bonds (a periodic axis shorter than the stencil's span) and self-loop bonds (an axis
    of length 1) are separate elements, each with its own seam crossings.
Order
    Sweep ``b`` shuffles the elements (ascending) by Fisher-Yates from the end: position
    ``t`` swaps with ``mulhi64(w_t, t + 1)``, ``w_t = splitmix64(key + (b * E + t) *
    GOLDEN)`` (``E`` = n for sites, ``len(bond_offsets) * n`` for bonds; the
    multiply-shift of :mod:`catalytic.kernels.random`, biased below ``(t + 1) 2**-64``):
    any sweep can be computed on its own, so sweeps split across calls (``first``) give
    the orders one call would. (A sort by the words would cost more than the sweep.)
Clusters
    Union-find by size with path halving. Each site keeps its displacement to its parent
    in seam crossings per periodic axis; a step ``u -> v`` through an offset that crosses
    the seam ``t`` times joins two roots with ``disp[root_v] = D_u - t - D_v`` (``D_x``:
    x's displacement to its root), and inside one cluster a non-zero ``D_u - t - D_v``
    on axis ``a`` closes a cycle that wraps around ``a`` (Machta et al., PRE 54, 1332
    (1996)). Every root keeps two face bits per open axis (touches index 0 / L - 1).
Records
    ``events[b]``: columns ``0..d-1`` the occupation number at which a cluster first
    spans open axis ``a`` (touches both faces), ``d..2d-1`` first wraps periodic axis
    ``a``, ``2d`` first wraps any axis, ``2d+1`` has wrapped every periodic axis (-1:
    never, or not that kind of axis). ``acc[g]``: per recorded occupation number
    ``n = r * n_stride``, sums over group ``g``'s sweeps of each chosen observable and of
    its square: the largest cluster, the mean size of the other clusters
    ``(sum s^2 - s_max^2) / (occupied sites - s_max)`` (0 when there is none), and the
    number of clusters (in bond percolation every existing site is in a cluster).

Cost: O(m) for the order plus O(m k alpha(m)) for the unions per sweep, m elements, k
stencil offsets; per thread ``n (8 + 4 P + 8 [open axes]) + 8 m`` bytes of scratch (a 32-bit
row of parent, size and displacements per site, faces, the order) and the accumulators.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import get_num_threads, njit, prange

from catalytic.kernels.cpu._budget import _frozen
from catalytic.kernels.cpu.neighbors import bond_open, c_strides, neighbor
from catalytic.kernels.random import (GOLDEN, _mulhi64_nb, _splitmix64_nb, mulhi64,
                                      splitmix64, stream_key)

__all__ = ["OBSERVABLES", "elements", "sample_order", "sweeps", "spanning_thresholds"]

#: the per-occupation observables, in accumulator order
OBSERVABLES = ("largest", "mean_size", "clusters")


def sample_order(key, b, E, elems) -> np.ndarray:
    """The elements of sweep ``b`` in occupation order (NumPy; the kernel's twin)."""
    m = len(elems)
    t = np.arange(m, dtype=np.uint64)
    words = splitmix64(np.uint64(key) + (np.uint64(b) * np.uint64(E) + t) * GOLDEN)
    picks = mulhi64(words, t + np.uint64(1)).astype(np.int64)
    order = np.array(elems, dtype=np.int64)
    for i in range(m - 1, 0, -1):
        j = picks[i]
        order[i], order[j] = order[j], order[i]
    return order


@njit(cache=True, nogil=True)
def _shuffle(order, elems, key, base):
    """Fisher-Yates from the end: position ``t`` swaps with ``mulhi64(word_t, t + 1)``,
    word ``t`` being ``splitmix64(key + (base + t) * GOLDEN)``."""
    m = elems.shape[0]
    for t in range(m):
        order[t] = elems[t]
    for t in range(m - 1, 0, -1):
        w = _splitmix64_nb(key + (base + np.uint64(t)) * GOLDEN)
        j = np.int64(_mulhi64_nb(w, np.uint64(t + 1)))
        x = order[t]
        order[t] = order[j]
        order[j] = x


@njit(cache=True, nogil=True)
def _bond_elements(out, n, shape, strides, periodic, offsets, open_, bond_slot, bits, words):
    """Write the usable bonds' flat indices ``s * n + start`` (ascending per plane) into
    ``out``; return how many."""
    m = 0
    for k in range(offsets.shape[0]):
        s = bond_slot[k]
        if s < 0:
            continue
        for i in range(n):
            if open_.shape[0] != 0 and open_[i] == 0:
                continue
            j = neighbor(i, k, shape, strides, periodic, offsets, open_)
            if j < 0 or not bond_open(i, j, s, bits, words):
                continue
            out[m] = s * n + i
            m += 1
    return m


@njit(cache=True, nogil=True, inline="always")
def _root(st, P, x, D):
    """Root of ``x`` (path halving); ``D`` gets x's displacement to it per periodic axis.
    ``st[i]``: parent, cluster size (roots), displacement to the parent per periodic
    axis: one row per site, so a step up the tree reads one cache line."""
    for q in range(P):
        D[q] = 0
    while st[x, 0] != x:
        p = st[x, 0]
        g = st[p, 0]
        if g != p:
            for q in range(P):
                st[x, 2 + q] += st[p, 2 + q]
            st[x, 0] = g
        for q in range(P):
            D[q] += st[x, 2 + q]
        x = st[x, 0]
    return x


@njit(cache=True, nogil=True, inline="always")
def _step(c, k, shape, strides, periodic, pidx, offsets, open_, T):
    """The site one step along offset ``k`` from coordinates ``c`` (-1: none), with the
    step's seam crossings per periodic axis in ``T``."""
    j = 0
    for a in range(shape.shape[0]):
        x = c[a] + offsets[k, a]
        L = shape[a]
        t = 0
        if x < 0 or x >= L:
            if periodic[a] == 0:
                return -1
            t = x // L  # floor division: -1 below 0, 1 past L - 1
            x -= t * L
        q = pidx[a]
        if q >= 0:
            T[q] = t
        j += x * strides[a]
    if open_.shape[0] != 0 and open_[j] == 0:
        return -1
    return j


@njit(cache=True, nogil=True, inline="always")
def _coords(i, strides, c):
    rem = i
    for a in range(strides.shape[0]):
        c[a] = rem // strides[a]
        rem -= c[a] * strides[a]


@njit(cache=True, nogil=True, inline="always")
def _faces(c, shape, oidx):
    f = np.uint64(0)
    for a in range(shape.shape[0]):
        q = oidx[a]
        if q >= 0:
            if c[a] == 0:
                f |= np.uint64(1) << np.uint64(2 * q)
            if c[a] == shape[a] - 1:
                f |= np.uint64(2) << np.uint64(2 * q)
    return f


@njit(cache=True, nogil=True, inline="always")
def _merge(ru, rv, T, st, face, P, Du, Dv):
    """Join root ``ru`` (``Du``: u's displacement to it) and root ``rv`` (``Dv``: v's)
    across a step ``u -> v`` with seam crossings ``T``. Returns ``(root, merged sizes
    product or 0, wrap bits)`` as :func:`_join`; ``Du`` becomes u's displacement to the
    returned root."""
    if ru == rv:
        w = 0
        for q in range(P):
            if Du[q] - T[q] - Dv[q] != 0:
                w |= 1 << q
        return ru, 0, w
    prod = np.int64(st[ru, 1]) * np.int64(st[rv, 1])
    if st[ru, 1] < st[rv, 1]:  # union by size: the smaller root goes under the larger
        st[ru, 0] = rv
        for q in range(P):
            st[ru, 2 + q] = Dv[q] + T[q] - Du[q]
            Du[q] += st[ru, 2 + q]
        st[rv, 1] += st[ru, 1]
        if face.shape[0] != 0:
            face[rv] |= face[ru]
        return rv, prod, 0
    st[rv, 0] = ru
    for q in range(P):
        st[rv, 2 + q] = Du[q] - T[q] - Dv[q]
    st[ru, 1] += st[rv, 1]
    if face.shape[0] != 0:
        face[ru] |= face[rv]
    return ru, prod, 0


@njit(cache=True, nogil=True, inline="always")
def _join(u, v, T, st, face, P, Du, Dv):
    """Join the clusters of ``u`` and ``v`` across a step with seam crossings ``T``.
    Returns ``(root, merged sizes product or 0, wrap bits)``: the root now holding both,
    ``size_a * size_b`` when two clusters merged (0 when they were one), and bit ``q``
    set when the step closes a cycle wrapping periodic axis ``q``."""
    ru = _root(st, P, u, Du)
    rv = _root(st, P, v, Dv)
    return _merge(ru, rv, T, st, face, P, Du, Dv)


@njit(cache=True, nogil=True, inline="always")
def _add(acc, row, col, v):
    """``acc[row, col] += v`` (the CUDA twin adds atomically: threads share ``acc``)."""
    acc[row, col] += v


@njit(cache=True, nogil=True)
def _one_sweep(ev, acc, order, kind, sites, shape, strides, periodic, offsets, open_,
               bond_slot, bits, words, fwd, pidx, oidx, n_stride, oslot, stop, st, fac, T,
               Du, Dv, c):
    """One sweep in ``order``: its events into ``ev``, its observables added to
    ``acc`` (rows ``oslot``, ``oslot + 1``: value and square). Without observables it
    stops once event column ``stop`` is found (``stop < 0``: every event). ``T``,
    ``Du``, ``Dv`` (one per periodic axis, at least 1) and ``c`` (one per axis) are
    scratch. Allocates nothing, so the CUDA twin compiles this very source."""
    d = shape.shape[0]
    n = st.shape[0]
    m = order.shape[0]
    P = 0
    Q = 0
    for a in range(d):
        if pidx[a] >= 0:
            P += 1
        if oidx[a] >= 0:
            Q += 1
    recording = oslot[0] >= 0 or oslot[1] >= 0 or oslot[2] >= 0
    n_sites = sites.shape[0]
    has_bits = bits.shape[0] != 0
    for x in range(ev.shape[0]):
        ev[x] = -1
    found = 0
    if kind == 0:
        for i in range(n):
            st[i, 0] = -1
        clusters = 0
        s2 = 0
        smax = 0
        occupied = 0
    else:
        for i in range(n):
            st[i, 0] = i
            st[i, 1] = 1
            for q in range(P):
                st[i, 2 + q] = 0
        for t in range(n_sites if fac.shape[0] != 0 else 0):
            # faces; an open axis of length 1 is spanned by any one site
            i = sites[t]
            _coords(i, strides, c)
            f = _faces(c, shape, oidx)
            fac[i] = f
            for a in range(d):
                qa = oidx[a]
                if qa >= 0 and ev[a] < 0 and (f >> np.uint64(2 * qa)) & np.uint64(3) == 3:
                    ev[a] = 0
                    found += 1
        clusters = n_sites
        s2 = n_sites
        smax = 1 if n_sites > 0 else 0
        occupied = n_sites
    todo = Q + P + (2 if P > 0 else 0)
    wrapped = 0
    # n = t is recorded, as row r_, when tick comes down to 0: no division per n
    tick = 0
    r_ = -1
    for t in range(m + 1):
        if t > 0:
            e = order[t - 1]
            wbits = 0
            if kind == 0:
                s = e
                _coords(s, strides, c)
                st[s, 0] = s
                st[s, 1] = 1
                for q in range(P):
                    st[s, 2 + q] = 0
                if fac.shape[0] != 0:
                    fac[s] = _faces(c, shape, oidx)
                clusters += 1
                s2 += 1
                occupied += 1
                if smax < 1:
                    smax = 1
                # s's root and its displacement to it (Du), kept through the joins
                root = s
                for q in range(P):
                    Du[q] = 0
                for k in range(offsets.shape[0]):
                    j = _step(c, k, shape, strides, periodic, pidx, offsets, open_, T)
                    if j < 0 or st[j, 0] < 0:
                        continue
                    if has_bits and not bond_open(s, j, bond_slot[k], bits, words):
                        continue
                    r, prod, w = _merge(root, _root(st, P, j, Dv), T, st, fac, P, Du, Dv)
                    root = r
                    wbits |= w
                    if prod > 0:
                        clusters -= 1
                        s2 += 2 * prod
                        if st[r, 1] > smax:
                            smax = st[r, 1]
            else:
                sl = e // n
                i = e - sl * n
                _coords(i, strides, c)
                j = _step(c, fwd[sl], shape, strides, periodic, pidx, offsets, open_, T)
                r, prod, w = _join(i, j, T, st, fac, P, Du, Dv)
                root = r
                wbits = w
                if prod > 0:
                    clusters -= 1
                    s2 += 2 * prod
                    if st[r, 1] > smax:
                        smax = st[r, 1]
            if found < todo:
                f = fac[_root(st, P, root, Du)] if fac.shape[0] != 0 else np.uint64(0)
                for a in range(d):
                    qa = oidx[a]
                    if qa >= 0 and ev[a] < 0 and (f >> np.uint64(2 * qa)) & np.uint64(3) == 3:
                        ev[a] = t
                        found += 1
                if wbits != 0:
                    for a in range(d):
                        qa = pidx[a]
                        if qa >= 0 and ev[d + a] < 0 and (wbits >> qa) & 1:
                            ev[d + a] = t
                            found += 1
                            wrapped += 1
                    if ev[2 * d] < 0:
                        ev[2 * d] = t
                        found += 1
                    if wrapped == P and ev[2 * d + 1] < 0:
                        ev[2 * d + 1] = t
                        found += 1
        if recording:
            if tick == 0:
                tick = n_stride
                r_ += 1
                if oslot[0] >= 0:
                    v = float(smax)
                    _add(acc, oslot[0], r_, v)
                    _add(acc, oslot[0] + 1, r_, v * v)
                if oslot[1] >= 0:
                    rest = occupied - smax
                    v = float(s2 - smax * smax) / rest if rest > 0 else 0.0
                    _add(acc, oslot[1], r_, v)
                    _add(acc, oslot[1] + 1, r_, v * v)
                if oslot[2] >= 0:
                    v = float(clusters)
                    _add(acc, oslot[2], r_, v)
                    _add(acc, oslot[2] + 1, r_, v * v)
            tick -= 1
        elif found == todo or (stop >= 0 and ev[stop] >= 0):
            break


@njit(cache=True, nogil=True, parallel=True)
def _sweeps(events, acc, orders, key, b0, elems, E, kind, sites, shape, strides, periodic,
            offsets, open_, bond_slot, bits, words, fwd, pidx, oidx, n_stride, oslot, stop,
            state, face, obuf):
    S = events.shape[0]
    G = acc.shape[0]
    d = shape.shape[0]
    P = max(state.shape[2] - 2, 1)
    for g in prange(G):
        lo = (S * g) // G
        hi = (S * (g + 1)) // G
        T = np.zeros(P, dtype=np.int64)
        Du = np.zeros(P, dtype=np.int64)
        Dv = np.zeros(P, dtype=np.int64)
        c = np.zeros(d, dtype=np.int64)
        for q in range(lo, hi):
            if orders.shape[0] != 0:
                order = orders[q]
            else:
                order = obuf[g]
                _shuffle(order, elems, key, np.uint64(b0 + q) * np.uint64(E))
            _one_sweep(events[q], acc[g], order, kind, sites, shape, strides, periodic,
                       offsets, open_, bond_slot, bits, words, fwd, pidx, oidx, n_stride,
                       oslot, stop, state[g], face[g], T, Du, Dv, c)


def elements(kind, shape, periodic, offsets, open_, bond_slot, bits, words) -> np.ndarray:
    """The elements a sweep occupies (int64, ascending): the existing sites for
    ``kind="site"``, the usable bonds' flat indices ``s * n + start`` for ``"bond"``."""
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    n = int(np.prod(shape))
    if kind == "site":
        return np.arange(n, dtype=np.int64) if len(open_) == 0 else np.flatnonzero(open_)
    kf = int((np.asarray(bond_slot) >= 0).sum())
    out = np.empty(kf * n, dtype=np.int64)
    m = _bond_elements(out, n, shape, c_strides(shape), np.ascontiguousarray(periodic, np.uint8),
                       np.ascontiguousarray(offsets, np.int64),
                       _frozen(np.ascontiguousarray(open_, np.uint8)),
                       _frozen(np.ascontiguousarray(bond_slot, np.int64)),
                       _frozen(np.ascontiguousarray(bits, np.uint32)), words)
    out = out[:m]
    # the planes come in ascending order already; sort only if a stencil says otherwise
    return out if np.all(out[1:] > out[:-1]) else np.sort(out)


class SweepPlan(NamedTuple):
    """The host-side tables of a run of sweeps (:func:`plan`), shared by the CPU kernel
    and its CUDA twin."""

    shape: np.ndarray
    periodic: np.ndarray
    offsets: np.ndarray
    open_: np.ndarray
    bond_slot: np.ndarray
    bits: np.ndarray
    strides: np.ndarray
    elems: np.ndarray
    sites: np.ndarray
    fwd: np.ndarray
    pidx: np.ndarray
    oidx: np.ndarray
    oslot: np.ndarray
    orders: np.ndarray
    d: int
    n: int
    m: int
    E: int
    P: int
    count: int


def plan(kind, shape, periodic, offsets, open_, bond_slot, bits, words, observables, orders,
         count) -> SweepPlan:
    """Writeable copies of the lattice arrays (the geometry's are read-only, a second
    Numba type), the elements, the forward-offset and axis tables, the observables'
    accumulator rows, and the explicit ``orders`` (then ``count`` is their number)."""
    shape = np.array(shape, dtype=np.int64)
    d = shape.shape[0]
    n = int(np.prod(shape))
    periodic = np.array(periodic, dtype=np.uint8)
    offsets = np.array(offsets, dtype=np.int64, order="C")
    open_ = np.array(open_, dtype=np.uint8)
    bond_slot = np.array(bond_slot, dtype=np.int64)
    bits = np.array(bits, dtype=np.uint32)
    elems = elements(kind, shape, periodic, offsets, open_, bond_slot, bits, words)
    sites = elements("site", shape, periodic, offsets, open_, bond_slot, bits, words)
    kf = int((bond_slot >= 0).sum())
    fwd = np.zeros(max(kf, 1), dtype=np.int64)
    for k in range(offsets.shape[0]):
        if bond_slot[k] >= 0:
            fwd[bond_slot[k]] = k
    P = int(periodic.sum())
    pidx = np.full(d, -1, dtype=np.int64)
    oidx = np.full(d, -1, dtype=np.int64)
    pidx[periodic == 1] = np.arange(P)
    oidx[periodic == 0] = np.arange(d - P)
    if orders is None:
        orders = np.zeros((0, 0), dtype=np.int64)
    else:
        orders = np.ascontiguousarray(orders, dtype=np.int64)
        count = orders.shape[0]
    oslot = np.full(3, -1, dtype=np.int64)
    for o, name in enumerate(observables):
        oslot[OBSERVABLES.index(name)] = 2 * o
    return SweepPlan(shape, periodic, offsets, open_, bond_slot, bits, c_strides(shape), elems,
                     sites, fwd, pidx, oidx, oslot, orders, d, n, elems.shape[0],
                     n if kind == "site" else kf * n, P, count)


def sweeps(kind, shape, periodic, offsets, open_, bond_slot, bits, words, count, seed,
           first=0, observables=OBSERVABLES, n_stride=1, orders=None, threads=None, stop=-1):
    """Run sweeps ``first .. first + count - 1`` (or one per row of ``orders``, an int64
    ``(count, N)`` array of element orders, each a permutation of :func:`elements`).

    Returns ``(events, sums, N)``: ``events`` int64 ``(count, 2d + 2)`` (module
    docstring), ``sums`` ``{observable: float64 (2, R)}`` (row 0 the sum over sweeps,
    row 1 the sum of squares, at ``n = 0, n_stride, 2 n_stride, ...``; R =
    ``N // n_stride + 1``) and ``N``, the number of elements. Without observables a
    sweep stops once every event is found, or with ``stop >= 0`` once event column
    ``stop`` is (the others may then be -1)."""
    p = plan(kind, shape, periodic, offsets, open_, bond_slot, bits, words, observables,
             orders, count)
    d, n, m, P, count = p.d, p.n, p.m, p.P, p.count
    R = m // n_stride + 1
    G = max(1, min(threads or get_num_threads(), count))
    events = np.empty((count, 2 * d + 2), dtype=np.int64)
    acc = np.zeros((G, 2 * len(observables), R if observables else 0), dtype=np.float64)
    if count:
        _sweeps(events, acc, p.orders, stream_key(seed), first, p.elems, p.E,
                0 if kind == "site" else 1, p.sites, p.shape, p.strides, p.periodic,
                p.offsets, p.open_, p.bond_slot, p.bits, words, p.fwd, p.pidx, p.oidx,
                n_stride, p.oslot, stop,
                np.empty((G, n, 2 + P), np.int32), np.empty((G, n if d > P else 0), np.uint64),
                np.empty((G, m if p.orders.shape[0] == 0 else 0), np.int64))
    total = acc[0] if G == 1 else acc.sum(axis=0)
    sums = {name: total[2 * o:2 * o + 2] for o, name in enumerate(observables)}
    return events, sums, m


def spanning_thresholds(shape, periodic, offsets, open_, samples, axis, seed, first=0,
                        bond_args=None):
    """For sweeps ``first .. first + samples - 1`` of site percolation: how many sites
    were occupied when a cluster first touched both faces of the open ``axis`` (-1:
    never). int64 array; the events-only mode of :func:`sweeps`, each sweep stopping at
    that event."""
    n = int(np.prod(shape))
    if bond_args is None:
        bond_args = (np.zeros(len(offsets), np.int64), np.zeros(0, np.uint32), (n + 31) // 32)
    events, _, _ = sweeps("site", shape, periodic, offsets, open_, *bond_args[:3], samples, seed,
                          first=first, observables=(), stop=axis)
    return events[:, axis].copy()
