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
    Sweep ``b`` sorts the elements by the 64-bit words ``splitmix64(key + (b * E + e) *
    GOLDEN)`` (``E`` = n for sites, ``len(bond_offsets) * n`` for bonds) of
    :mod:`catalytic.kernels.random`: any sweep can be computed on its own, so sweeps
    split across calls (``first``) give the orders one call would.
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

Cost: O(m log m) for the order plus O(m k alpha(m)) for the unions per sweep, m elements;
per thread ``(24 + 4 P + 16 m / n) n`` bytes of scratch and the accumulators.
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from catalytic.kernels.cpu.neighbors import bond_open, c_strides, neighbor
from catalytic.kernels.random import GOLDEN, _splitmix64_nb, splitmix64, stream_key

__all__ = ["OBSERVABLES", "elements", "sample_order", "sweeps", "spanning_thresholds"]

#: the per-occupation observables, in accumulator order
OBSERVABLES = ("largest", "mean_size", "clusters")


def sample_order(key, b, E, elems) -> np.ndarray:
    """The elements of sweep ``b`` in occupation order (NumPy; the kernel's twin)."""
    words = splitmix64(np.uint64(key) + (np.uint64(b) * np.uint64(E)
                                         + elems.astype(np.uint64)) * GOLDEN)
    return elems[np.argsort(words, kind="stable")]


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


@njit(cache=True, nogil=True)
def _root(parent, disp, P, x, D):
    """Root of ``x`` (path halving); ``D`` gets x's displacement to it per periodic axis."""
    for q in range(P):
        D[q] = 0
    while parent[x] != x:
        p = parent[x]
        g = parent[p]
        if g != p:
            for q in range(P):
                disp[x * P + q] += disp[p * P + q]
            parent[x] = g
        for q in range(P):
            D[q] += disp[x * P + q]
        x = parent[x]
    return x


@njit(cache=True, nogil=True)
def _turns(i, k, shape, strides, pidx, offsets, T):
    """Seam crossings per periodic axis of the step from site ``i`` along offset ``k``."""
    for a in range(shape.shape[0]):
        q = pidx[a]
        if q >= 0:
            c = (i // strides[a]) % shape[a] + offsets[k, a]
            T[q] = c // shape[a]  # floor division: -1 below 0, 1 past L - 1


@njit(cache=True, nogil=True)
def _faces(i, shape, strides, oidx):
    f = np.uint64(0)
    for a in range(shape.shape[0]):
        q = oidx[a]
        if q >= 0:
            c = (i // strides[a]) % shape[a]
            if c == 0:
                f |= np.uint64(1) << np.uint64(2 * q)
            if c == shape[a] - 1:
                f |= np.uint64(2) << np.uint64(2 * q)
    return f


@njit(cache=True, nogil=True)
def _join(u, v, T, parent, size, disp, face, P, Du, Dv):
    """Join the clusters of ``u`` and ``v`` across a step with seam crossings ``T``.
    Returns ``(root, merged sizes product or 0, wrap bits)``: the root now holding both,
    ``size_a * size_b`` when two clusters merged (0 when they were one), and bit ``q``
    set when the step closes a cycle wrapping periodic axis ``q``."""
    ru = _root(parent, disp, P, u, Du)
    rv = _root(parent, disp, P, v, Dv)
    if ru == rv:
        w = 0
        for q in range(P):
            if Du[q] - T[q] - Dv[q] != 0:
                w |= 1 << q
        return ru, 0, w
    prod = size[ru] * size[rv]
    if size[ru] >= size[rv]:
        parent[rv] = ru
        for q in range(P):
            disp[rv * P + q] = Du[q] - T[q] - Dv[q]
        size[ru] += size[rv]
        face[ru] |= face[rv]
        return ru, prod, 0
    parent[ru] = rv
    for q in range(P):
        disp[ru * P + q] = Dv[q] + T[q] - Du[q]
    size[rv] += size[ru]
    face[rv] |= face[ru]
    return rv, prod, 0


@njit(cache=True, nogil=True, parallel=True)
def _sweeps(events, acc, orders, key, b0, elems, E, kind, sites, shape, strides, periodic,
            offsets, open_, bond_slot, bits, words, fwd, pidx, oidx, n_stride, oslot,
            parent, size, disp, face, wbuf):
    d = shape.shape[0]
    n = parent.shape[1]
    m = elems.shape[0]
    P = 0
    Q = 0
    for a in range(d):
        if pidx[a] >= 0:
            P += 1
        if oidx[a] >= 0:
            Q += 1
    S = events.shape[0]
    G = acc.shape[0]
    R = acc.shape[2]
    recording = oslot[0] >= 0 or oslot[1] >= 0 or oslot[2] >= 0
    n_sites = sites.shape[0]
    for g in prange(G):
        lo = (S * g) // G
        hi = (S * (g + 1)) // G
        par = parent[g]
        siz = size[g]
        dsp = disp[g]
        fac = face[g]
        wd = wbuf[g]
        T = np.zeros(max(P, 1), dtype=np.int64)
        Du = np.zeros(max(P, 1), dtype=np.int64)
        Dv = np.zeros(max(P, 1), dtype=np.int64)
        for q in range(lo, hi):
            ev = events[q]
            for c in range(ev.shape[0]):
                ev[c] = -1
            if orders.shape[0] != 0:
                order = orders[q]
            else:
                base = np.uint64(b0 + q) * np.uint64(E)
                for t in range(m):
                    wd[t] = _splitmix64_nb(key + (base + np.uint64(elems[t])) * GOLDEN)
                order = elems[np.argsort(wd[:m], kind="mergesort")]
            for c in range(dsp.shape[0]):
                dsp[c] = 0
            if kind == 0:
                for i in range(n):
                    par[i] = -1
                clusters = 0
                s2 = 0
                smax = 0
                occupied = 0
            else:
                for i in range(n):
                    par[i] = i
                    siz[i] = 1
                    fac[i] = _faces(i, shape, strides, oidx)
                clusters = n_sites
                s2 = n_sites
                smax = 1 if n_sites > 0 else 0
                occupied = n_sites
            found = 0
            todo = Q + P + (2 if P > 0 else 0)
            wrapped = 0
            if kind == 1:  # an open axis of length 1 is spanned by any one site
                for t in range(n_sites):
                    f = fac[sites[t]]
                    for a in range(d):
                        qa = oidx[a]
                        if qa >= 0 and ev[a] < 0 and (f >> np.uint64(2 * qa)) & np.uint64(3) == 3:
                            ev[a] = 0
                            found += 1
            for t in range(m + 1):
                if t > 0:
                    e = order[t - 1]
                    root = -1
                    wbits = 0
                    if kind == 0:
                        s = e
                        par[s] = s
                        siz[s] = 1
                        fac[s] = _faces(s, shape, strides, oidx)
                        clusters += 1
                        s2 += 1
                        occupied += 1
                        if smax < 1:
                            smax = 1
                        root = s
                        for k in range(offsets.shape[0]):
                            j = neighbor(s, k, shape, strides, periodic, offsets, open_)
                            if j < 0 or par[j] < 0:
                                continue
                            if not bond_open(s, j, bond_slot[k], bits, words):
                                continue
                            _turns(s, k, shape, strides, pidx, offsets, T)
                            r, prod, w = _join(s, j, T, par, siz, dsp, fac, P, Du, Dv)
                            root = r
                            wbits |= w
                            if prod > 0:
                                clusters -= 1
                                s2 += 2 * prod
                                if siz[r] > smax:
                                    smax = siz[r]
                    else:
                        sl = e // n
                        i = e - sl * n
                        k = fwd[sl]
                        j = neighbor(i, k, shape, strides, periodic, offsets, open_)
                        _turns(i, k, shape, strides, pidx, offsets, T)
                        r, prod, w = _join(i, j, T, par, siz, dsp, fac, P, Du, Dv)
                        root = r
                        wbits = w
                        if prod > 0:
                            clusters -= 1
                            s2 += 2 * prod
                            if siz[r] > smax:
                                smax = siz[r]
                    if found < todo:
                        f = fac[_root(par, dsp, P, root, Du)]
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
                    if t % n_stride == 0:
                        r_ = t // n_stride
                        if oslot[0] >= 0:
                            v = float(smax)
                            acc[g, oslot[0], r_] += v
                            acc[g, oslot[0] + 1, r_] += v * v
                        if oslot[1] >= 0:
                            rest = occupied - smax
                            v = (s2 - smax * smax) / rest if rest > 0 else 0.0
                            acc[g, oslot[1], r_] += v
                            acc[g, oslot[1] + 1, r_] += v * v
                        if oslot[2] >= 0:
                            v = float(clusters)
                            acc[g, oslot[2], r_] += v
                            acc[g, oslot[2] + 1, r_] += v * v
                elif found == todo:
                    break


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
                       np.ascontiguousarray(open_, np.uint8), bond_slot, bits, words)
    return np.sort(out[:m])


def scratch_bytes(n, m, periodic_axes, threads) -> int:
    """Bytes of a call's per-thread scratch (parent, size, displacements, faces, sort
    words and order) and its element list."""
    return threads * (n * (24 + 4 * periodic_axes) + 16 * m) + 8 * m


def sweeps(kind, shape, periodic, offsets, open_, bond_slot, bits, words, count, seed,
           first=0, observables=OBSERVABLES, n_stride=1, orders=None, threads=None):
    """Run sweeps ``first .. first + count - 1`` (or one per row of ``orders``, an int64
    ``(count, N)`` array of element orders, each a permutation of :func:`elements`).

    Returns ``(events, sums, N)``: ``events`` int64 ``(count, 2d + 2)`` (module
    docstring), ``sums`` ``{observable: float64 (2, R)}`` (row 0 the sum over sweeps,
    row 1 the sum of squares, at ``n = 0, n_stride, 2 n_stride, ...``; R =
    ``N // n_stride + 1``) and ``N``, the number of elements."""
    # writeable copies (the geometry's arrays are read-only, a second Numba type)
    shape = np.array(shape, dtype=np.int64)
    d = shape.shape[0]
    n = int(np.prod(shape))
    periodic = np.array(periodic, dtype=np.uint8)
    offsets = np.array(offsets, dtype=np.int64, order="C")
    open_ = np.array(open_, dtype=np.uint8)
    bond_slot = np.array(bond_slot, dtype=np.int64)
    bits = np.array(bits, dtype=np.uint32)
    strides = c_strides(shape)
    elems = elements(kind, shape, periodic, offsets, open_, bond_slot, bits, words)
    m = elems.shape[0]
    sites = elements("site", shape, periodic, offsets, open_, bond_slot, bits, words)
    kf = int((bond_slot >= 0).sum())
    E = n if kind == "site" else kf * n
    fwd = np.zeros(max(kf, 1), dtype=np.int64)
    for k in range(offsets.shape[0]):
        if bond_slot[k] >= 0:
            fwd[bond_slot[k]] = k
    pidx = np.full(d, -1, dtype=np.int64)
    oidx = np.full(d, -1, dtype=np.int64)
    pidx[periodic == 1] = np.arange(int(periodic.sum()))
    oidx[periodic == 0] = np.arange(d - int(periodic.sum()))
    P = int(periodic.sum())
    if orders is None:
        orders = np.zeros((0, 0), dtype=np.int64)
    else:
        orders = np.ascontiguousarray(orders, dtype=np.int64)
        count = orders.shape[0]
    oslot = np.full(3, -1, dtype=np.int64)
    for o, name in enumerate(observables):
        oslot[OBSERVABLES.index(name)] = 2 * o
    R = m // n_stride + 1
    G = max(1, min(threads or get_num_threads(), count))
    events = np.empty((count, 2 * d + 2), dtype=np.int64)
    acc = np.zeros((G, 2 * len(observables), R if observables else 0), dtype=np.float64)
    if count:
        _sweeps(events, acc, orders, stream_key(seed), first, elems, E,
                0 if kind == "site" else 1, sites, shape, strides, periodic, offsets,
                open_, bond_slot, bits, words, fwd, pidx, oidx, n_stride, oslot,
                np.empty((G, n), np.int64), np.empty((G, n), np.int64),
                np.empty((G, n * P), np.int32), np.empty((G, n), np.uint64),
                np.empty((G, m if orders.shape[0] == 0 else 0), np.uint64))
    total = acc.sum(axis=0)
    sums = {name: total[2 * o:2 * o + 2] for o, name in enumerate(observables)}
    return events, sums, m


def spanning_thresholds(shape, periodic, offsets, open_, samples, axis, seed, first=0,
                        bond_args=None):
    """For sweeps ``first .. first + samples - 1`` of site percolation: how many sites
    were occupied when a cluster first touched both faces of the open ``axis`` (-1:
    never). int64 array; the events-only mode of :func:`sweeps` (each sweep stops once
    every event is found)."""
    n = int(np.prod(shape))
    if bond_args is None:
        bond_args = (np.zeros(len(offsets), np.int64), np.zeros(0, np.uint32), (n + 31) // 32)
    events, _, _ = sweeps("site", shape, periodic, offsets, open_, *bond_args[:3], samples, seed,
                          first=first, observables=())
    return events[:, axis].copy()
