"""CUDA twins of the CPU graph kernels: :mod:`~catalytic.kernels.cpu.bfs`,
:mod:`~catalytic.kernels.cpu.dijkstra`, :mod:`~catalytic.kernels.cpu.paths`,
:mod:`~catalytic.kernels.cpu.components`, :mod:`~catalytic.kernels.cpu.degree` and the
stack BFS of :mod:`~catalytic.kernels.cpu.batched`. Each host function's docstring names
its twin and says only what differs from it.

Every host function takes the lattice as the CPU twin does, ``(shape, periodic, offsets,
open_, dedupe, ...)`` with the conventions of ``kernels/cpu/neighbors.py``, copies the
small tables (shape, strides, periodic, offsets) to the device itself, once per geometry
(:func:`_tables` keeps them), and accepts ``open_`` and ``weights`` either as NumPy
arrays or as Numba device arrays (the caller caches device copies of those, and passes
the host arrays too where a function reads them on the host, so nothing the host has is
copied back). Functions documented as returning a device array leave the result on the
GPU; ``.copy_to_host()`` brings it back.

Kernels
-------
One thread per element (``i = cuda.grid(1)``, a bounds guard, the work); the host
functions pick the launch shape: a 1-D grid of :data:`THREADS` threads per block and
``ceil(work / THREADS)`` blocks. Kernels allocate nothing, not even per-thread local
arrays (``degree`` de-duplicates by recomputing earlier neighbours, see
:func:`~catalytic.kernels.cuda.neighbors.is_first`), and use only plain loads and stores
and the ``cuda.atomic`` functions, so they run unchanged under the CUDA simulator.

Every neighbour is computed by the device :func:`~catalytic.kernels.cuda.neighbors.neighbor`,
compiled from the same source as the CPU one, so the neighbour *set* is the same on both
backends; the BFS, relaxation, union and level kernels decode a site's coordinates once
and, away from edges and seams, add flat offsets instead (:func:`_fast`,
:func:`~catalytic.kernels.cuda.neighbors.step`: d divisions per site instead of k d).
Distances follow out-neighbours; kernels that *pull* values (relaxation, the level
scans) read over in-neighbours, i.e. the negated stencil.

Bonds: every host function takes ``bonds=`` (``Geometry.bond_args()``, bits and bond
weights possibly device copies) and its kernels test the bond of each step
(:func:`~catalytic.kernels.cuda.neighbors.bond_open`; the slot tables of the stencil, the
negated stencil and the union half are derived from the offsets, :func:`_bond_slots`).
Without bonds they get length-0 arrays, so a kernel has one signature either way; the
relaxation's step cost becomes ``fl(bond weight + weights[v])``, and the weighted walk
back of a lattice with bonds runs on the host with that cost (:func:`_bond_walk`).

Iterative kernels report progress through the device: the BFS levels keep the frontier
lengths there (:func:`_bfs_level`), the sweeps a one-element ``flag`` array that the
launch of iteration ``it`` sets to ``it`` when anything changed (never reset). The host
queues batches of 1, 2, 4, ... up to :data:`LAUNCHES_PER_CHECK` launches and reads once
per batch, instead of waiting on the device after every launch. Components need no
iteration: union-find in a fixed number of launches.

Results equal the CPU twin's bit for bit (distances, labels, paths, degrees) and
closeness agrees to rounding of one identical float expression (it is computed on the
host from the same integer sums, so in practice also bit for bit).
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np
from numba import cuda, int64, uint64

from catalytic.kernels.cpu.neighbors import c_strides, check_sources, step_lengths
from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda._exact import mul
from catalytic.kernels.cuda.neighbors import bond_at, bond_open, inside, kept, step
from catalytic.kernels.cuda.arrays import _resident_blocks

__all__ = [
    "THREADS",
    "bfs_distance",
    "relax_distance",
    "parents",
    "roots",
    "shortest_path",
    "shortest_paths",
    "connected_components",
    "degree",
    "closeness",
    "bfs_distance_batched",
    "connected_components_batched",
]

_SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
#: threads per block for every launch in this module: 256 on a GPU; 64 under the
#: simulator, which starts a Python thread for every launched thread, the padding of the
#: last block included (a launch over 10 sites costs 64 thread starts, not 256).
#: ``_bits_level`` counts its 64 sources with one thread each: at least 64.
THREADS = 64 if _SIMULATOR else 256
#: most kernel launches the level and sweep loops make between two host reads (4 under
#: the simulator, where each launch past the end costs real time: the same loop, fewer
#: wasted launches; the tests also run it with 1 and 3)
LAUNCHES_PER_CHECK = 4 if _SIMULATOR else 32
#: sources of one bit-parallel closeness pass: the bits of a word
BITS = 64
#: near-far bucket width, in mean site weights
BUCKET_EDGES = 8.0


# ---------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------


@cuda.jit
def _fill(a, val):
    """``a[:] = val`` (1-D)."""
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] = val


@cuda.jit
def _scatter(a, idx, val):
    """``a[idx] = val`` for every entry of ``idx``."""
    i = cuda.grid(1)
    if i < idx.shape[0]:
        a[idx[i]] = val


@cuda.jit
def _bfs_level(shape, strides, periodic, offsets, foff, lo, hi, open_, bslot, bits, words, dist,
               cur, nxt, cnt, dn, stop):
    """BFS level ``dn`` with the frontier's length kept on the device, so the host can
    launch many levels before it reads anything back.

    ``cnt`` (int64[3]) is a ring of frontier lengths: this level expands
    ``cur[:cnt[(dn - 1) % 3]]`` (grid-stride), claims every unvisited out-neighbour with a
    compare-and-swap of ``dist`` from -1 to ``dn`` and, when this thread won the claim,
    appends it to ``nxt`` at ``atomic.add(cnt[dn % 3])``. Thread 0 zeroes
    ``cnt[(dn + 1) % 3]``, the length the previous level read (launches on one stream
    run in order, so that level is over). With ``stop >= 0`` a level that starts after
    the one that reached ``stop`` does nothing, and the lengths fall to 0; the level that
    reaches it completes. Each site is claimed once, so ``nxt`` needs at most n entries.
    ``foff``, ``lo``, ``hi``: the fast neighbour path (:func:`_fast`); ``bslot``,
    ``bits``, ``words``: the bonds (a step through a closed one is no step)."""
    i = cuda.grid(1)
    if i == 0:
        cnt[(dn + 1) % 3] = 0
    if stop >= 0:
        ds = dist[stop]
        if ds >= 0 and ds < dn:
            return
    m = cnt[(dn - 1) % 3]
    slot = dn % 3
    for h in range(i, m, cuda.gridsize(1)):
        p = cur[h]
        fast = inside(p, strides, lo, hi)
        for k in range(offsets.shape[0]):
            q = step(p, k, fast, foff, shape, strides, periodic, offsets, open_)
            if q >= 0 and dist[q] == -1 and bond_open(p, q, bslot[k], bits, words):
                if cuda.atomic.cas(dist, q, -1, dn) == -1:
                    nxt[cuda.atomic.add(cnt, slot, 1)] = q


@cuda.jit
def _nf_relax(shape, strides, periodic, offsets, foff, lo, hi, open_, bslot, bits, words, bw,
              weights, ln, dist, cur, nxt, cnt, j, inq, far, thr):
    """Near-far step ``j``, relaxing (Davidson, Baxter, Garland and Owens, IPDPS 2014).

    The near list ``cur[:cnt[(j - 1) % 3]]`` (grid-stride) pushes along out-neighbours:
    ``dist[v] = min(dist[v], dist[u] + weights[v])`` by ``atomic.min``; a vertex improved
    below the threshold ``thr[0]`` joins the next near list (``nxt`` at
    ``atomic.add(cnt[j % 3])``, once: ``inq`` is its claim), one improved at or above it
    is flagged ``far``. A vertex's claim and flag are dropped before its cost is read
    (atomically, after a fence), so an improvement that comes later queues it again.
    The improving thread fences too, between its new cost and its look at the claim:
    without it the GPU may let both threads read the old values (the claim still held,
    the cost not yet lowered), and the improvement would reach no near list (the
    store-buffering pattern; two ``fence.sc`` forbid it). Thread 0 zeroes
    ``cnt[(j + 1) % 3]``, the count the previous step read. The ring of counts works as
    in :func:`_bfs_level`.

    Bonds: a step through a closed bond is none; with bond weights (``bw`` not empty)
    a step u -> v costs ``fl(bw[bond] + weights[v])`` (``weights`` may then be empty:
    no site weights), and ``dist[u]`` plus that. With step lengths (``ln`` not empty)
    step ``k`` costs ``ln[k]`` times its cost (``ln[k]`` alone when ``bw`` and
    ``weights`` are both empty)."""
    i = cuda.grid(1)
    if i == 0:
        cnt[(j + 1) % 3] = 0
    m = cnt[(j - 1) % 3]
    n = dist.shape[0]
    has_bw = bw.shape[0] != 0
    has_w = weights.shape[0] != 0
    has_ln = ln.shape[0] != 0
    slot = j % 3
    t = thr[0]
    for h in range(i, m, cuda.gridsize(1)):
        u = cur[h]
        cuda.atomic.exch(inq, u, 0)
        cuda.atomic.exch(far, u, 0)
        cuda.threadfence()
        du = cuda.atomic.min(dist, u, math.inf)  # a coherent read
        fast = inside(u, strides, lo, hi)
        for k in range(offsets.shape[0]):
            v = step(u, k, fast, foff, shape, strides, periodic, offsets, open_)
            if v >= 0 and bond_open(u, v, bslot[k], bits, words):
                if has_bw:
                    sc = bw[bond_at(u, v, bslot[k], n)]
                    if has_w:
                        sc += weights[v]
                elif has_w:
                    sc = weights[v]
                else:
                    sc = 1.0
                if has_ln:  # never fused with the add below: the CPU twin's rounding
                    sc = mul(ln[k], sc)
                c = du + sc
                if c < dist[v] and c < cuda.atomic.min(dist, v, c):
                    cuda.threadfence()
                    if c < t:
                        if cuda.atomic.cas(inq, v, 0, 1) == 0:
                            nxt[cuda.atomic.add(cnt, slot, 1)] = v
                    else:
                        far[v] = 1


@cuda.jit
def _nf_far_min(dist, far, cnt, j, fmin):
    """Near-far step ``j``, when the relaxing left the near list empty: the least cost
    among the far vertices into ``fmin[j % 2]`` (left +inf otherwise). Grid-stride."""
    if cnt[j % 3] > 0:
        return
    for v in range(cuda.grid(1), dist.shape[0], cuda.gridsize(1)):
        if far[v] != 0:
            cuda.atomic.min(fmin, j % 2, dist[v])


@cuda.jit
def _nf_split(dist, far, inq, nxt, cnt, j, fmin, thr, delta):
    """Near-far step ``j``, when a least far cost ``f`` was found: the threshold becomes
    ``f + delta``, and every far vertex below it joins the near list (the one of cost
    ``f`` at least, so every split makes progress). Thread 0 resets the other ``fmin``
    slot for the next step. Grid-stride."""
    i = cuda.grid(1)
    if i == 0:
        fmin[(j + 1) % 2] = math.inf
    f = fmin[j % 2]
    if f == math.inf:
        return
    t = f + delta
    if i == 0:
        thr[0] = t
    slot = j % 3
    for v in range(i, dist.shape[0], cuda.gridsize(1)):
        if far[v] != 0 and dist[v] < t:
            far[v] = 0
            if cuda.atomic.cas(inq, v, 0, 1) == 0:
                nxt[cuda.atomic.add(cnt, slot, 1)] = v


@cuda.jit
def _weight_sum(weights, open_, out):
    """``out[0]`` += the weights of the open sites, ``out[1]`` += their number
    (grid-stride, one atomic add pair per thread): for the near-far bucket width."""
    acc = 0.0
    m = 0
    for v in range(cuda.grid(1), weights.shape[0], cuda.gridsize(1)):
        if open_.shape[0] == 0 or open_[v] != 0:
            acc += weights[v]
            m += 1
    cuda.atomic.add(out, 0, acc)
    cuda.atomic.add(out, 1, float(m))


@cuda.jit(device=True)
def _root(label, x):
    """The root of ``x``'s tree: ``label`` followed to its fixed point."""
    p = label[x]
    while p != x:
        x = p
        p = label[x]
    return x


@cuda.jit(device=True)
def _link(label, a, b):
    """Join the trees of open sites ``a`` and ``b``: the larger root is hung under the
    smaller one by a compare-and-swap that only succeeds while it is still a root;
    when another thread got there first, the swap returns that root's new parent, and
    the climb goes on from there. Parents only ever decrease, so every root is the
    smallest index of its tree, and a component's root ends as its smallest flat index
    (Playne and Hawick, IEEE TPDS 2018; Komura 2015).

    The climb from the swap's answer is what makes the loop end on a GPU. :func:`_root`
    reads with plain loads, which may be served by this multiprocessor's L1 cache and
    so may still show ``b`` as a root after another multiprocessor's swap changed it
    in L2; climbing from ``b`` again could then fail the same swap forever. The swap
    itself is resolved at L2 and returns the current parent, which is smaller than
    ``b``: every failure lowers ``a + b``, so the loop ends whatever the loads saw
    (Allegretti, Bolelli and Grana, IEEE TPDS 2020, use the same step)."""
    while True:
        a = _root(label, a)
        b = _root(label, b)
        if a == b:
            return
        if a > b:
            t = a
            a = b
            b = t
        old = cuda.atomic.cas(label, b, b, a)
        if old == b:
            return
        b = old


@cuda.jit
def _uf_union(shape, strides, periodic, half, hfoff, lo, hi, open_stack, hslot, bits, words,
              label):
    """Link every open site with its neighbour along each offset of ``half`` (one offset
    of each {o, -o} pair: the relation is undirected), over a stack of lattices (one
    lattice is a stack of 1), one thread per (lattice, site) pair: lattice ``b`` links
    only inside its own label row, with its own mask row. Only through open bonds:
    ``hslot`` is the bond slot of each ``half`` entry (backward ones, so the bond is read
    at the far end), ``bits``/``words`` the bonds every lattice of the stack shares."""
    t = cuda.grid(1)
    n = label.shape[1]
    if t < label.shape[0] * n:
        b = t // n
        v = t - b * n
        lab = label[b]
        if lab[v] >= 0:
            row = open_stack[b]
            fast = inside(v, strides, lo, hi)
            for k in range(half.shape[0]):
                u = step(v, k, fast, hfoff, shape, strides, periodic, half, row)
                if u >= 0 and u != v and bond_open(v, u, hslot[k], bits, words):
                    _link(lab, v, u)


@cuda.jit
def _uf_roots(label, flags):
    """``label[v]`` = its root, and ``flags[v]`` = 1 where ``v`` is a root (an open site
    that is its component's smallest index), 0 elsewhere; over the flattened rows of a
    (B, n) stack too, where every row's labels are indices into that row."""
    t = cuda.grid(1)
    n = label.shape[1]
    if t < label.shape[0] * n:
        b = t // n
        v = t - b * n
        lab = label[b]
        lv = lab[v]
        if lv >= 0:
            r = _root(lab, v)
            lab[v] = r
            flags[t] = 1 if r == v else 0
        else:
            flags[t] = 0


@cuda.jit
def _uf_number(label, scan, out, counts):
    """Final labels: ``out[b, v]`` is the number of roots of row ``b`` up to and
    including ``v``'s root (``scan`` is the inclusive scan of the flattened root flags),
    0 on blocked sites; the last site of each row writes the row's count."""
    t = cuda.grid(1)
    n = label.shape[1]
    if t < label.shape[0] * n:
        b = t // n
        v = t - b * n
        base = scan[t - v - 1] if b > 0 else 0
        r = label[b, v]
        out[b, v] = scan[t - v + r] - base if r >= 0 else 0
        if v == n - 1:
            counts[b] = scan[t] - base


@cuda.jit
def _scan_blocks(a, sums):
    """Inclusive prefix sum of each block's slice of ``a``, in place (Hillis-Steele in
    shared memory); ``sums[block]`` receives the slice's total."""
    buf = cuda.shared.array(THREADS, int64)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    buf[t] = a[i] if i < a.shape[0] else 0
    cuda.syncthreads()
    off = 1
    while off < THREADS:
        v = buf[t - off] if t >= off else 0
        cuda.syncthreads()
        buf[t] += v
        cuda.syncthreads()
        off *= 2
    if i < a.shape[0]:
        a[i] = buf[t]
    if t == THREADS - 1:
        sums[cuda.blockIdx.x] = buf[t]


@cuda.jit
def _scan_add(a, sums):
    """Add the scanned totals of the earlier blocks to each block's slice of ``a``."""
    i = cuda.grid(1)
    b = cuda.blockIdx.x
    if b > 0 and i < a.shape[0]:
        a[i] += sums[b - 1]


@cuda.jit
def _degree(shape, strides, periodic, offsets, foff, lo, hi, first, open_, bslot, bits, words,
            dedupe, deg):
    """``deg[i]`` = size of the neighbour set of open site ``i`` (0 when blocked): a
    neighbour counts where :func:`kept` (through an open bond; with ``dedupe`` its first
    usable occurrence, no local buffer). The fast neighbour path away from edges and
    seams (:func:`_fast`)."""
    i = cuda.grid(1)
    if i < deg.shape[0]:
        m = 0
        if open_.shape[0] == 0 or open_[i] != 0:
            fast = inside(i, strides, lo, hi)
            for k in range(offsets.shape[0]):
                j = step(i, k, fast, foff, shape, strides, periodic, offsets, open_)
                if j >= 0 and kept(i, k, j, fast, first, dedupe, shape, strides, periodic,
                                   offsets, open_, bslot, bits, words):
                    m += 1
        deg[i] = m


@cuda.jit
def _walk_hops(shape, strides, periodic, noffsets, nfoff, lo, hi, open_, nslot, bits, words, dist,
               end, path):
    """One thread walks a shortest hop path back from ``end``: ``path[0] = end``, then
    each ``path[h]`` is the in-neighbour (``noffsets``, the negated stencil) of
    ``path[h - 1]`` with the smallest flat index whose distance is one less, the CPU
    twin's rule (``_walk_back_hops``), through open bonds (``nslot``: the bond slots of
    ``noffsets``). ``path`` has ``dist[end] + 1`` entries.
    O(D k) serial work: D steps of k independent loads, instead of copying all n
    distances to the host."""
    if cuda.grid(1) == 0:
        v = end
        path[0] = v
        D = dist[v]
        for h in range(1, path.shape[0]):
            fast = inside(v, strides, lo, hi)
            best = -1
            for k in range(noffsets.shape[0]):
                u = step(v, k, fast, nfoff, shape, strides, periodic, noffsets, open_)
                if (u >= 0 and dist[u] == D - 1 and (best < 0 or u < best)
                        and bond_open(v, u, nslot[k], bits, words)):
                    best = u
            path[h] = best
            v = best
            D -= 1


@cuda.jit
def _parents(shape, strides, periodic, noffsets, nfoff, lo, hi, open_, bslot, bits, words, bw,
             w, ln, dist, src, depth, hops, parent):
    """The parental field, one thread a site (grid-stride): the CPU twin's
    (``kernels.cpu.parents._parents_rows``) rule and arguments, the in-neighbours found
    along the negated stencil (``noffsets``, ``nfoff``, ``lo``, ``hi``) and each step
    ``u -> v`` through the bond of ``bslot[k]``, as the twin's."""
    n = dist.shape[0]
    hbw = bw.shape[0] != 0
    hw = w.shape[0] != 0
    hl = ln.shape[0] != 0
    hd = depth.shape[0] != 0
    unit = 1.0 if hl and not hbw and not hw else 0.0
    for v in range(cuda.grid(1), n, cuda.gridsize(1)):
        if src[v] != 0:
            parent[v] = v
            continue
        dv = dist[v]
        if (hops and dv < 0) or (not hops and not dv < math.inf):
            parent[v] = -1
            continue
        fast = inside(v, strides, lo, hi)
        wv = w[v] if hw else unit
        best = -1
        for k in range(noffsets.shape[0]):
            u = step(v, k, fast, nfoff, shape, strides, periodic, noffsets, open_)
            if u < 0 or u == v or (best >= 0 and u >= best):
                continue
            du = dist[u]
            if hops:
                if du != dv - 1:
                    continue
            else:
                if not du < math.inf:
                    continue
                cost = wv
                if hbw:
                    cost = bw[bond_at(u, v, bslot[k], n)] + wv
                if hl:  # never fused with the add below: the CPU twin's rounding
                    cost = mul(ln[k], cost)
                if du + cost != dv:
                    continue
                if not (du < dv or (hd and depth[u] == depth[v] - 1)):
                    continue
            if bond_open(u, v, bslot[k], bits, words):
                best = u
        parent[v] = best


@cuda.jit
def _jump(cur, nxt, changed):
    """One round of pointer jumping, grid-stride: ``nxt[v] = cur[cur[v]]`` (-1 stays
    -1); ``changed[0]`` set to 1 where one changed."""
    for v in range(cuda.grid(1), cur.shape[0], cuda.gridsize(1)):
        p = cur[v]
        q = cur[p] if p >= 0 else -1
        nxt[v] = q
        if q != p:
            changed[0] = 1


@cuda.jit
def _bits_start(seen, front, src):
    """Source ``s`` of a pass is bit ``s`` of the words of its site: ``seen`` and
    ``front`` (zeroed) get it. The sources are distinct sites, one thread each."""
    s = cuda.grid(1)
    if s < src.shape[0]:
        bit = uint64(1) << uint64(s)
        seen[src[s]] = bit
        front[src[s]] = bit


@cuda.jit
def _bits_level(shape, strides, periodic, noffsets, nfoff, lo, hi, open_, nslot, bits, words,
                seen, front, nxt, level, reach, tot, flag):
    """One BFS level for up to 64 sources at once, one thread per site: bit ``s`` of a
    site's word is source ``s``. A site's new bits are those of its in-neighbours'
    frontier words that it has not seen; they become its word of the next frontier
    (``nxt``, written for every site) and join ``seen``. Each new bit adds one site at
    distance ``level + 1`` to its source: counted per block in shared memory, then
    ``reach[s]`` and ``tot[s]`` take one atomic add per block and source. Writes
    ``level + 1`` to ``flag[0]`` when any site was reached. Only thread v writes
    ``seen[v]`` and ``nxt[v]``, and ``front`` is read-only here, so the launch needs no
    other ordering. In-neighbours count only through open bonds (``nslot``: the bond
    slots of ``noffsets``)."""
    cnt = cuda.shared.array(64, int64)
    t = cuda.threadIdx.x
    if t < 64:
        cnt[t] = 0
    cuda.syncthreads()
    v = cuda.grid(1)
    if v < seen.shape[0]:
        new = uint64(0)
        if open_.shape[0] == 0 or open_[v] != 0:
            fast = inside(v, strides, lo, hi)
            for k in range(noffsets.shape[0]):
                u = step(v, k, fast, nfoff, shape, strides, periodic, noffsets, open_)
                if u >= 0 and bond_open(v, u, nslot[k], bits, words):
                    new |= front[u]
            new &= ~seen[v]
        nxt[v] = new
        if new != 0:
            seen[v] |= new
            flag[0] = level + 1
            w = new
            while w != 0:
                # the lowest set bit's index (cuda.ffs is 32-bit in the simulator)
                cuda.atomic.add(cnt, cuda.popc(w ^ (w - uint64(1))) - 1, 1)
                w &= w - uint64(1)
    cuda.syncthreads()
    if t < 64 and cnt[t] != 0:
        cuda.atomic.add(reach, t, cnt[t])
        cuda.atomic.add(tot, t, cnt[t] * (level + 1))


@cuda.jit
def _batched_init(dist, src):
    """Row ``b`` of ``dist`` (B, n): 0 at ``src[b]``, -1 elsewhere."""
    t = cuda.grid(1)
    n = dist.shape[1]
    if t < dist.shape[0] * n:
        b = t // n
        v = t - b * n
        dist[b, v] = 0 if v == src[b] else -1


@cuda.jit
def _batched_level(shape, strides, periodic, noffsets, nfoff, lo, hi, open_stack, nslot, bits,
                   words, dist, level, flag):
    """One BFS level over a stack of lattices, one thread per (lattice, site) pair:
    an open unvisited site with an in-neighbour at distance ``level`` in its own
    lattice (``open_stack[b]``; a (B, 0) stack means all sites open) gets
    ``level + 1``, through open bonds (``nslot``: the bond slots of ``noffsets``; the
    bonds are the lattice's, shared by the stack). Writes ``level + 1`` to ``flag[0]``
    when any site was reached."""
    t = cuda.grid(1)
    n = dist.shape[1]
    if t < dist.shape[0] * n:
        b = t // n
        v = t - b * n
        row = open_stack[b]
        if dist[b, v] == -1 and (row.shape[0] == 0 or row[v] != 0):
            fast = inside(v, strides, lo, hi)
            for k in range(noffsets.shape[0]):
                u = step(v, k, fast, nfoff, shape, strides, periodic, noffsets, row)
                if u >= 0 and dist[b, u] == level and bond_open(v, u, nslot[k], bits, words):
                    dist[b, v] = level + 1
                    flag[0] = level + 1
                    break


@cuda.jit
def _uf_init(label, open_stack):
    """Row ``b`` of ``label`` (B, n): ``v`` at open sites of lattice ``b``, -1 at blocked
    ones (a (B, 0) ``open_stack`` means all sites open)."""
    t = cuda.grid(1)
    n = label.shape[1]
    if t < label.shape[0] * n:
        b = t // n
        v = t - b * n
        row = open_stack[b]
        if row.shape[0] != 0 and row[v] == 0:
            label[b, v] = -1
        else:
            label[b, v] = v


# ---------------------------------------------------------------------------------------
# Host helpers
# ---------------------------------------------------------------------------------------


class _Tables(NamedTuple):
    """The small lattice tables, on the host and on the device."""

    n: int
    shape: np.ndarray
    strides: np.ndarray
    periodic: np.ndarray
    offsets: np.ndarray  # int64 (k, d)
    d_shape: object
    d_strides: object
    d_periodic: object
    d_offsets: object
    d_noffsets: object  # the stencil negated: in-neighbours
    d_fast: tuple  # (foff, lo, hi) of the stencil, for the fast neighbour path
    d_nfast: tuple  # the same of the negated stencil
    d_first: object  # uint8 (k,): the de-duplicated set on the fast path (:func:`_first`)
    bslot: np.ndarray  # int64 (k,): the bond slot of each stencil entry (:func:`_bond_slots`)
    d_bslot: object
    d_nslot: object  # the bond slots of the negated stencil (~bslot)
    d_nobits: object  # uint32 (0,): every bond open
    d_nobw: object  # float64 (0,): no bond weights


def _fast(shape, strides, offsets):
    """``(foff, lo, hi)``: the flat offset of each stencil entry, and per axis the
    coordinate range ``[lo, hi)`` from which every entry stays on the lattice without
    wrapping (empty when some entry reaches past the axis). Sites inside it on every
    axis find their neighbours by one addition (:func:`~.neighbors.step`)."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, shape.shape[0])
    if offsets.shape[0] == 0:
        zero = np.zeros(shape.shape[0], dtype=np.int64)
        return np.zeros(0, dtype=np.int64), zero, zero
    lo = np.maximum(0, (-offsets).max(axis=0))
    hi = shape - np.maximum(0, offsets.max(axis=0))
    return (np.ascontiguousarray(offsets @ strides, dtype=np.int64),
            lo.astype(np.int64), hi.astype(np.int64))


def _first(offsets):
    """uint8 per stencil entry: 1 when the entry is not the zero offset and no earlier
    entry equals it. For a site on the fast path (no entry wraps or leaves the lattice)
    distinct entries reach distinct sites, so these are exactly the entries that
    :func:`~.neighbors.is_first` keeps there, found without recomputing any neighbour."""
    k = offsets.shape[0]
    first = np.zeros(k, dtype=np.uint8)
    for q in range(k):
        first[q] = offsets[q].any() and not (offsets[:q] == offsets[q]).all(axis=1).any()
    return first


def _bond_slots(offsets):
    """int64 per stencil entry, ``Geometry.bond_slot`` from the offsets alone: ``s`` for
    the ``s``-th forward entry (first non-zero component positive, stencil order),
    ``~s`` for the negation of forward entry ``s``. An entry without a forward twin (a
    stencil that cannot carry bonds) gets 0, never read: such a lattice has no bonds."""
    k = offsets.shape[0]
    slot = np.zeros(k, dtype=np.int64)
    where = {}
    for q in range(k):
        nz = np.flatnonzero(offsets[q])
        if nz.size and offsets[q, nz[0]] > 0:
            where[tuple(offsets[q].tolist())] = len(where)
    for q in range(k):
        row = tuple(offsets[q].tolist())
        if row in where:
            slot[q] = where[row]
        else:
            s = where.get(tuple((-offsets[q]).tolist()))
            slot[q] = 0 if s is None else ~s
    return slot


#: device copies of the small lattice tables, by geometry and CUDA context (and the seam
#: tables of ``kernels.cuda.winding``, under keys of their own): most recent last, at
#: most TABLES_CACHED of them (a few hundred bytes each)
_table_cache: "OrderedDict[tuple, tuple]" = OrderedDict()
_table_lock = threading.Lock()
TABLES_CACHED = 64


def _tables(shape, periodic, offsets, stream) -> _Tables:
    """The lattice tables on the host and the device. The device copies are made once
    per geometry and CUDA context, synchronously (so any stream may use them at once),
    and reused by later calls: no allocation or copy per call. ``stream`` is accepted
    for the callers' symmetry."""
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    key = (shape.tobytes(), periodic.tobytes(), offsets.tobytes(), _context_key())
    with _table_lock:
        hit = _table_cache.get(key)
        if hit is not None:
            _table_cache.move_to_end(key)
            return hit
    strides = c_strides(shape)
    n = int(np.prod(shape, dtype=object))
    dev = _transfer.to_device
    noffsets = np.ascontiguousarray(-offsets)
    bslot = _bond_slots(offsets)
    t = _Tables(n, shape, strides, periodic, offsets, dev(shape), dev(strides),
                dev(periodic), dev(offsets), dev(noffsets),
                tuple(dev(a) for a in _fast(shape, strides, offsets)),
                tuple(dev(a) for a in _fast(shape, strides, noffsets)), dev(_first(offsets)),
                bslot, dev(bslot), dev(np.ascontiguousarray(~bslot)),
                dev(np.zeros(0, dtype=np.uint32)), dev(np.zeros(0, dtype=np.float64)))
    with _table_lock:
        _table_cache[key] = t
        while len(_table_cache) > TABLES_CACHED:
            _table_cache.popitem(last=False)
    return t


def _context_key():
    """Which CUDA context device copies belong to (the simulator has one)."""
    if _SIMULATOR:
        return 0
    handle = cuda.current_context().handle
    value = getattr(handle, "value", None)  # a ctypes handle; the CUDA bindings' is an int
    return int(handle) if value is None else value


def clear_tables() -> None:
    """Forget the cached device tables (after a CUDA failure, with the context)."""
    with _table_lock:
        _table_cache.clear()


def _bonds(t: _Tables, bonds, stream, weights=False):
    """``(bits, words, bw)`` on the device from a ``Geometry.bond_args()`` tuple (its
    ``bond_slot`` is :func:`_bond_slots` of the offsets, kept in the tables), or the
    empty arrays for ``bonds`` None. ``bw`` only with ``weights`` (the empty array
    otherwise: kernels that ignore costs get no copy)."""
    if bonds is None:
        return t.d_nobits, 0, t.d_nobw
    _slot, bits, words, bw = bonds
    d_bits = t.d_nobits if bits.shape[0] == 0 else _device(bits, np.uint32, stream)
    d_bw = t.d_nobw if not weights or bw.shape[0] == 0 else _device(bw, np.float64, stream)
    return d_bits, int(words), d_bw


def _is_device(a) -> bool:
    """True for a Numba device array (real or simulated)."""
    return hasattr(a, "copy_to_host")


def _device(a, dtype, stream):
    """``a`` as a device array of ``dtype``: Numba device arrays pass through unchanged,
    other ``__cuda_array_interface__`` arrays (CuPy, PyTorch) are wrapped without a copy."""
    if not _is_device(a) and hasattr(a, "__cuda_array_interface__"):
        a = cuda.as_cuda_array(a)
    if _is_device(a):
        if a.dtype != np.dtype(dtype):
            raise TypeError(f"device array has dtype {a.dtype}, expected {np.dtype(dtype)}")
        return a
    return _transfer.to_device(np.ascontiguousarray(a, dtype=dtype), stream=stream)


def _host(a, dtype):
    """``a`` as a contiguous NumPy array of ``dtype`` (copied back from the device)."""
    if _is_device(a):
        a = _transfer.to_host(a)
    return np.ascontiguousarray(a, dtype=dtype)


def _read(d_arr, stream) -> np.ndarray:
    """Copy a (small) device array back and wait for it."""
    h = _transfer.to_host(d_arr, stream=stream)
    if stream != 0:
        stream.synchronize()
    return h


def _blocks(work: int) -> int:
    return (work + THREADS - 1) // THREADS


def _launch(kernel, work, stream, *args):
    """Run ``kernel`` over ``work`` threads (nothing when ``work`` is 0)."""
    if work > 0:
        kernel[_blocks(work), THREADS, stream](*args)


def _index_type(n: int):
    """int32 for site indices below 2**31 (half the memory traffic of int64), else int64."""
    return np.int32 if n < 2**31 else np.int64


def _grid_blocks(work: int) -> int:
    """Blocks for a grid-stride kernel over at most ``work`` items: enough for a full
    wave of resident threads (8 blocks of 256 per multiprocessor), one block under the
    simulator, where every launched thread costs real time."""
    cap = 1
    if not _SIMULATOR:
        cap = _resident_blocks()
    return max(1, min(_blocks(work), cap))


def _checks():
    """Launches between two host reads in the level and sweep loops: 1, 2, 4, ... up to
    :data:`LAUNCHES_PER_CHECK`. A launch after the work is over does nothing harmful
    (an empty level, a sweep that changes nothing), so at most that many minus one are
    wasted at the end, while a search of D levels waits on the host about
    D / LAUNCHES_PER_CHECK times instead of D."""
    k = 1
    while True:
        yield k
        k = min(2 * k, LAUNCHES_PER_CHECK)


def _scan(a, stream):
    """Inclusive prefix sum of the 1-D device array ``a`` in place: block scans, the
    block totals scanned the same way (recursively), then added back. 2 + 2 log_256(n)
    launches."""
    nb = _blocks(a.shape[0])
    sums = cuda.device_array(nb, dtype=a.dtype, stream=stream)
    _scan_blocks[nb, THREADS, stream](a, sums)
    if nb > 1:
        _scan(sums, stream)
        _scan_add[nb, THREADS, stream](a, sums)


def _bfs_run(t: _Tables, d_open, src, stream, stop=-1, bd=None):
    """Level-synchronous frontier BFS from the flat indices ``src``; returns the device
    int64 distance array. The frontier lengths stay on the device (:func:`_bfs_level`),
    and the host reads them only between batches of levels (:func:`_checks`). With
    ``stop >= 0`` it stops after the level that reaches ``stop`` (distances up to that
    level are final). ``bd``: the device bonds (:func:`_bonds`; None: every bond open)."""
    d_bits, words, _ = _bonds(t, None, stream) if bd is None else bd
    n = t.n
    dist = cuda.device_array(n, dtype=np.int64, stream=stream)
    _launch(_fill, n, stream, dist, np.int64(-1))
    src = np.unique(np.asarray(src, dtype=np.int64).reshape(-1))
    check_sources(src, n)
    m = int(src.shape[0])
    if m == 0 or n == 0:
        return dist
    cap = max(n, m)
    cur = cuda.device_array(cap, dtype=_index_type(cap), stream=stream)
    nxt = cuda.device_array(cap, dtype=_index_type(cap), stream=stream)
    _transfer.host_to(cur[:m], src.astype(cur.dtype), stream=stream)
    _launch(_scatter, m, stream, dist, cur[:m], np.int64(0))
    cnt = _transfer.to_device(np.array([m, 0, 0], dtype=np.int64), stream=stream)
    blocks = _grid_blocks(cap)
    dn = 1
    for k in _checks():
        for _ in range(k):
            _bfs_level[blocks, THREADS, stream](
                t.d_shape, t.d_strides, t.d_periodic, t.d_offsets, *t.d_fast, d_open,
                t.d_bslot, d_bits, np.int64(words), dist, cur, nxt, cnt, np.int64(dn),
                np.int64(stop))
            cur, nxt = nxt, cur
            dn += 1
        if _read(cnt, stream)[(dn - 1) % 3] == 0:
            return dist


def _bucket_width(d_w, d_open, n, stream, d_bw=None) -> float:
    """The near-far bucket width: :data:`BUCKET_EDGES` times the mean cost of a step,
    the mean weight of the open sites plus the mean bond weight (1.0 when that is 0).
    Any width gives the same costs; it only trades the number of steps against the
    work repeated within one."""
    mean = 0.0
    # bond weights count every bond: an empty mask (``d_open`` itself when it is the empty
    # no-mask array: a GPU refuses any slice of an empty device array, even ``[:0]``)
    no_mask = d_open if d_open.shape[0] == 0 else d_open[:0]
    for arr, mask in ((d_w, d_open), (d_bw, no_mask)):
        if arr is None or arr.shape[0] == 0:
            continue
        out = _transfer.to_device(np.zeros(2, dtype=np.float64), stream=stream)
        _weight_sum[_grid_blocks(arr.shape[0]), THREADS, stream](arr, mask, out)
        total, m = _read(out, stream)
        mean += total / m if m else 0.0
    return BUCKET_EDGES * mean if mean > 0 else 1.0


def _relax_run(t: _Tables, d_open, d_w, src, stream, delta=None, bd=None, ln=None):
    """Near-far to the fixed point (:func:`_nf_relax`, :func:`_nf_far_min`,
    :func:`_nf_split` per step, all decided on the device; the host reads one count
    between batches of steps, :func:`_checks`). Returns the device float64 costs.
    ``bd``: the device bonds and bond weights (:func:`_bonds`; None: none); ``d_w`` may
    then be empty (no site weights). ``ln``: the length of each step of ``t``'s stencil
    (float64 host array; None: none), then ``d_w`` and the bond weights may both be
    empty (a step costs its length)."""
    d_bits, words, d_bw = _bonds(t, None, stream) if bd is None else bd
    n = t.n
    dist = cuda.device_array(n, dtype=np.float64, stream=stream)
    _launch(_fill, n, stream, dist, np.float64(np.inf))
    src = np.unique(np.asarray(src, dtype=np.int64).reshape(-1))
    check_sources(src, n)
    m = int(src.shape[0])
    if m == 0 or n == 0:
        return dist
    if delta is None:
        delta = _bucket_width(d_w, d_open, n, stream, d_bw)
        if ln is not None:  # the mean step is about the mean length times that
            unweighted = d_w.shape[0] == 0 and d_bw.shape[0] == 0
            delta = (BUCKET_EDGES if unweighted else delta) * float(ln.mean() if len(ln) else 1)
    d_ln = t.d_nobw if ln is None else _transfer.to_device(
        np.ascontiguousarray(ln, dtype=np.float64), stream=stream)
    cur = cuda.device_array(n, dtype=_index_type(n), stream=stream)
    nxt = cuda.device_array(n, dtype=_index_type(n), stream=stream)
    _transfer.host_to(cur[:m], src.astype(cur.dtype), stream=stream)
    _launch(_scatter, m, stream, dist, cur[:m], np.float64(0.0))
    inq = cuda.device_array(n, dtype=np.int32, stream=stream)
    far = cuda.device_array(n, dtype=np.int32, stream=stream)
    _launch(_fill, n, stream, inq, np.int32(0))
    _launch(_fill, n, stream, far, np.int32(0))
    cnt = _transfer.to_device(np.array([m, 0, 0], dtype=np.int64), stream=stream)
    fmin = _transfer.to_device(np.full(2, np.inf), stream=stream)
    thr = _transfer.to_device(np.array([delta], dtype=np.float64), stream=stream)
    blocks = _grid_blocks(n)
    j = 1
    for k in _checks():
        for _ in range(k):
            _nf_relax[blocks, THREADS, stream](
                t.d_shape, t.d_strides, t.d_periodic, t.d_offsets, *t.d_fast, d_open,
                t.d_bslot, d_bits, np.int64(words), d_bw, d_w, d_ln, dist, cur, nxt, cnt,
                np.int64(j), inq, far, thr)
            _nf_far_min[blocks, THREADS, stream](dist, far, cnt, np.int64(j), fmin)
            _nf_split[blocks, THREADS, stream](dist, far, inq, nxt, cnt, np.int64(j), fmin,
                                               thr, np.float64(delta))
            cur, nxt = nxt, cur
            j += 1
        if _read(cnt, stream)[(j - 1) % 3] == 0:  # no near vertex, and none far
            return dist


# ---------------------------------------------------------------------------------------
# Host functions
# ---------------------------------------------------------------------------------------


def bfs_distance(shape, periodic, offsets, open_, dedupe, sources, *, stream=0, bonds=None):
    """Multi-source hop distances, left on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.bfs.bfs_distance`: the same contract and
    the same distances; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe, sources
        As the twin's; ``open_`` may also be a uint8 device array, read in place.
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` and ``bw`` may be device arrays, read in
        place): a step through a closed bond is no step. None: every bond open.

    Returns
    -------
    device array of int64, (n,)
        The twin's distances, dtype included, left on the device
        (``.copy_to_host()`` brings them back).

    Raises
    ------
    IndexError
        A source outside ``[0, n)`` (the twin does not check).

    Notes
    -----
    Level-synchronous frontier BFS: one launch per level, grid-stride over the frontier,
    claiming unvisited out-neighbours with ``atomic.cas`` and appending them to the next
    frontier with ``atomic.add``. The frontier lengths stay on the device, so the host
    queues up to :data:`LAUNCHES_PER_CHECK` levels between two reads of them (24 bytes)
    instead of waiting after every level. O(n k) work, O(diameter) launches, about
    diameter / LAUNCHES_PER_CHECK host reads, 24 bytes per site (distances and two
    frontiers).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> bfs_distance((2, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False,
    ...              [0]).copy_to_host()  # doctest: +SKIP
    array([0, 1, 2, 1, 2, 3])
    """
    t = _tables(shape, periodic, offsets, stream)
    return _bfs_run(t, _device(open_, np.uint8, stream), sources, stream,
                    bd=_bonds(t, bonds, stream))


def relax_distance(shape, periodic, offsets, open_, dedupe, weights, sources, *, stream=0,
                   delta=None, bonds=None, spacing=None):
    """Multi-source weighted distances (entering site v costs ``weights[v]``), left on
    the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.dijkstra.dijkstra_distance`: the same
    contract and the same costs, bit for bit; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe, weights, sources
        As the twin's; ``open_`` and ``weights`` may also be device arrays, read in place.
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    delta : float, optional
        Near-far bucket width (> 0); see Notes. It sets the speed only.
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` and ``bw`` may be device arrays, read in
        place): a step through a closed bond is no step, and with bond weights a step u -> v costs
        ``fl(bond weight + weights[v])`` (``weights`` may then be a length-0 array: no
        site weights). None: every bond open.
    spacing : ndarray of float64, (d,), optional
        Euclidean step costs, as the twin's (``weights`` may then be a length-0 array).

    Returns
    -------
    device array of float64, (n,)
        The twin's costs, left on the device.

    Raises
    ------
    ValueError
        ``delta`` not a finite number > 0.
    IndexError
        A source outside ``[0, n)`` (the twin does not check).

    Notes
    -----
    Near-far label correcting (Davidson et al., IPDPS 2014): a worklist of the vertices
    whose cost improved below a threshold is relaxed in parallel, pushing ``dist[v] =
    min(dist[v], dist[u] + w[v])`` with ``atomic.min``; vertices improved past the
    threshold wait as "far", and when the near list runs dry the threshold moves to the
    least far cost plus ``delta`` (default :data:`BUCKET_EDGES` mean weights) and the
    far vertices below it come back. Every step is decided on the device; the host reads
    one count between batches of up to :data:`LAUNCHES_PER_CHECK` steps. Float addition
    of a non-negative weight is monotone, so the fixed point is the least left-to-right
    sum over paths, exactly what Dijkstra computes with the same expression, whatever
    the order of the pushes and whatever ``delta``. Work: each vertex relaxed about once
    per time its cost improves, plus two scans of the far flags per bucket; 8 bytes of
    cost, 16 of worklists and 8 of flags per site.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> relax_distance((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False,
    ...                np.array([5.0, 1.0, 2.0, 0.5]), [0]).copy_to_host()  # doctest: +SKIP
    array([0. , 1. , 3. , 3.5])
    """
    if delta is not None and not (math.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be a finite number > 0, got {delta!r}")
    t = _tables(shape, periodic, offsets, stream)
    d_w = _device(weights, np.float64, stream)
    return _relax_run(t, _device(open_, np.uint8, stream), d_w, sources, stream, delta,
                      bd=_bonds(t, bonds, stream, weights=True), ln=_lengths(t, spacing))


def _lengths(t: _Tables, spacing):
    """The Euclidean length of each step of ``t``'s stencil under ``spacing`` (the
    CPU twins' :func:`~catalytic.kernels.cpu.neighbors.step_lengths`); None for None."""
    return None if spacing is None else step_lengths(t.offsets, spacing)


def shortest_path(shape, periodic, offsets, open_, dedupe, start, end, weights=None, *,
                  stream=0, host=None, bonds=None, spacing=None) -> np.ndarray:
    """One shortest path from ``start`` to ``end``, searched on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.paths.shortest_path`: the same contract
    and the same path; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe, start, end, weights
        As the twin's; ``open_`` and ``weights`` may also be device arrays, read in place.
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    host : tuple of ndarray, optional
        ``(open_, weights)`` on the host when the caller has them beside device copies
        passed as ``open_`` and ``weights``: the weighted walk back reads these instead
        of copying the device arrays back.
    bonds : tuple, optional
        ``Geometry.bond_args()``: steps only through open bonds; with bond weights the
        path is weighted (``weights`` may then be None: no site weights) and a step
        u -> v costs ``fl(bond weight + weights[v])``. The bond-weighted or bond-masked
        weighted walk back runs on the host (:func:`_bond_walk`), which then needs the
        host ``bits`` and ``bw`` (device copies are copied back).
    spacing : ndarray of float64, (d,), optional
        Euclidean step costs, as the twin's.

    Raises
    ------
    IndexError
        ``start`` or ``end`` outside ``[0, n)`` (the twin does not check).

    Notes
    -----
    The distances come from the device (:func:`bfs_distance` stopping after ``end``'s
    level, or :func:`relax_distance`). Hops: one device thread walks back from ``end``
    (:func:`_walk_hops`), to the in-neighbour of smallest flat index one hop closer,
    the twin's rule; only the path (8 bytes a site on it) and ``end``'s distance
    come back. Weighted: the costs come back and the walk runs on the host with the
    twin's own walk (``weighted_walk`` in unpadded mode), so its tie rule, the
    shortest-path DAG with its plateau depths for zero or absorbed weights, is the
    twin's by construction. Weighted distances beyond cost(end) differ from the twin's
    early-stopped Dijkstra, but the walk reads none of them, so the path is the same.
    O(n k) device work; O(D k) for the walk.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> shortest_path((3, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False,
    ...               0, 8)  # doctest: +SKIP
    array([0, 1, 2, 5, 8])
    """
    path, _ = shortest_paths(shape, periodic, offsets, open_, dedupe, start, [end], weights,
                             stream=stream, host=host, bonds=bonds, spacing=spacing)[0]
    return path


def shortest_paths(shape, periodic, offsets, open_, dedupe, start, ends, weights=None, *,
                   first=False, stream=0, host=None, bonds=None, spacing=None):
    """Shortest paths from ``start`` to several ends from one search on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.paths.shortest_paths`: the same
    contract and the same paths (``open_``, ``weights``, ``stream``, ``host``,
    ``bonds`` as :func:`shortest_path` takes them). The search runs to its end (the
    level-synchronous BFS and the near-far relaxation have no early stop for a set of
    cells); the walks back are :func:`shortest_path`'s.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> p = np.zeros(2, np.uint8)
    >>> shortest_paths((3, 3), p, off, np.zeros(0, np.uint8), False, 0, [8, 4],
    ...                first=True)  # doctest: +SKIP
    (1, array([0, 1, 4]), 2)
    """
    from catalytic.kernels.cpu.paths import weighted_walk

    t = _tables(shape, periodic, offsets, stream)
    start = int(start)
    ends = np.asarray(ends, dtype=np.int64).reshape(-1)
    if not (0 <= start < t.n and ((ends >= 0) & (ends < t.n)).all()):
        raise IndexError(f"start {start} or an end out of range for {t.n} sites")
    d_open = _device(open_, np.uint8, stream)
    bond_weighted = bonds is not None and bonds[3].shape[0] != 0
    ln = _lengths(t, spacing)
    none = np.empty(0, dtype=np.int64)
    if weights is None and not bond_weighted and ln is None:
        d_bits, words, _ = bd = _bonds(t, bonds, stream)
        stop = int(ends[0]) if ends.shape[0] == 1 else -1
        d_dist = _bfs_run(t, d_open, [start], stream, stop=stop, bd=bd)
        dist = _read(d_dist, stream)[ends] if ends.shape[0] > 1 else np.array(
            [int(_read(d_dist[stop : stop + 1], stream)[0])])

        def walk(j):
            D = int(dist[j])
            if D < 0:
                return none, -1
            d_path = cuda.device_array(D + 1, dtype=np.int64, stream=stream)
            _walk_hops[1, 1, stream](t.d_shape, t.d_strides, t.d_periodic, t.d_noffsets,
                                     *t.d_nfast, d_open, t.d_nslot, d_bits, np.int64(words),
                                     d_dist, np.int64(ends[j]), d_path)
            return _read(d_path, stream)[::-1].copy(), D
    elif bonds is not None:
        d_w = t.d_nobw if weights is None else _device(weights, np.float64, stream)
        pd = _read(_relax_run(t, d_open, d_w, [start], stream,
                              bd=_bonds(t, bonds, stream, weights=True), ln=ln), stream)
        dist = pd[ends]
        w = None if weights is None else _host(
            weights if host is None else host[1], np.float64)
        open_h = _host(open_ if host is None else host[0], np.uint8)

        def walk(j):
            if not np.isfinite(dist[j]):
                return none, np.inf
            return _bond_walk(t, pd, w, open_h, bonds, start, int(ends[j]), ln), float(dist[j])
    else:
        k = t.offsets.shape[0]
        foff = np.zeros(k, dtype=np.int64)  # unused in unpadded mode 0 except for its length
        noffs = np.ascontiguousarray(-t.offsets)
        offs = np.ascontiguousarray(t.offsets, dtype=np.int64)
        r = np.zeros(t.shape.shape[0], dtype=np.int64)
        d_w = t.d_nobw if weights is None else _device(weights, np.float64, stream)
        pd = _read(_relax_run(t, d_open, d_w, [start], stream, ln=ln), stream)
        dist = pd[ends]
        open_h = _host(open_ if host is None else host[0], np.uint8)
        if weights is None:  # step lengths alone: entering a site costs 1, times the length
            w = np.ones(t.n)
        else:
            w = _host(weights if host is None else host[1], np.float64)
        pw = w.copy() if open_h.shape[0] == 0 else np.where(open_h != 0, w, -2.0)
        n_open = t.n if open_h.shape[0] == 0 else int(np.count_nonzero(open_h))
        tail = (r, t.shape, t.strides, t.periodic, 0)

        def walk(j):
            if not np.isfinite(dist[j]):
                return none, np.inf
            return weighted_walk(pd, pw, start, int(ends[j]), n_open, (foff, offs) + tail,
                                 (foff, noffs) + tail, ln=ln).copy(), float(dist[j])
    if not first:
        return [walk(j) for j in range(ends.shape[0])]
    reached = (dist >= 0) & np.isfinite(dist)
    if not reached.any():
        return -1, none, (-1 if dist.dtype.kind in "iu" else np.inf)
    j = int(np.lexsort((np.arange(ends.shape[0]), ends, np.where(reached, dist, 0),
                        ~reached))[0])
    return (j,) + walk(j)


def parents(shape, periodic, offsets, open_, dist, sources, *, depth=None, weights=None,
            bonds=None, lengths=None, stream=0):
    """The parental field of a distance field, left on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.parents.parents`: the same contract
    and the same parents; ``open_``, ``dist`` and ``weights`` may also be device
    arrays, read in place, and ``stream`` (0: the default) takes every copy and launch.
    One thread a site, O(n k) work.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> parents((2, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8),
    ...         np.array([0, 1, 2, 1, 2, 3]), np.array([0])).copy_to_host().tolist()
    ... # doctest: +SKIP
    [0, 0, 1, 0, 1, 2]
    """
    t = _tables(shape, periodic, offsets, stream)
    d_dist = dist if _is_device(dist) else _transfer.to_device(
        np.ascontiguousarray(dist).reshape(-1), stream=stream)
    hops = d_dist.dtype.kind in "iu"
    if d_dist.dtype not in (np.int64, np.float64):
        raise TypeError(f"dist must be int64 hops or float64 costs, got {d_dist.dtype}")
    src = np.zeros(t.n, dtype=np.uint8)
    src[np.asarray(sources, dtype=np.int64)] = 1
    d_bits, words, d_bw = _bonds(t, bonds, stream, weights=True)
    none = t.d_nobw
    d_w = none if weights is None else _device(weights, np.float64, stream)
    d_ln = none if lengths is None else _transfer.to_device(
        np.ascontiguousarray(lengths, dtype=np.float64), stream=stream)
    d_depth = _transfer.to_device(np.zeros(0, np.int64) if depth is None or len(depth) == 0
                                  else np.ascontiguousarray(depth, np.int64), stream=stream)
    out = cuda.device_array(t.n, dtype=np.int64, stream=stream)
    if t.n:
        _parents[_grid_blocks(t.n), THREADS, stream](
            t.d_shape, t.d_strides, t.d_periodic, t.d_noffsets, *t.d_nfast,
            _device(open_, np.uint8, stream), t.d_bslot, d_bits, np.int64(words), d_bw, d_w,
            d_ln, d_dist, _transfer.to_device(src, stream=stream), d_depth, hops, out)
    return out


def roots(parents, *, stream=0):
    """Where each chain of ``parents`` (a device or host int64 array) ends, left on the
    device: the CUDA twin of :func:`catalytic.kernels.cpu.parents.roots`, by rounds of
    pointer jumping (:func:`_jump`), the host reading one flag per batch of rounds.
    ``parents`` is left as it is."""
    src = parents if _is_device(parents) else _transfer.to_device(
        np.ascontiguousarray(parents, dtype=np.int64).reshape(-1), stream=stream)
    n = src.shape[0]
    cur = cuda.device_array(n, dtype=np.int64, stream=stream)
    nxt = cuda.device_array(n, dtype=np.int64, stream=stream)
    if n == 0:
        return cur
    flag = cuda.device_array(1, dtype=np.int32, stream=stream)
    blocks = _grid_blocks(n)
    _jump[blocks, THREADS, stream](src, cur, flag)  # the first round into arrays of its own
    for k in _checks():
        _launch(_fill, 1, stream, flag, np.int32(0))
        for _ in range(k):  # a round past the fixed point changes nothing
            _jump[blocks, THREADS, stream](cur, nxt, flag)
            cur, nxt = nxt, cur
        if _read(flag, stream)[0] == 0:
            return cur


def _bond_steps(t: _Tables, open_h, bonds):
    """Every usable step of the lattice, on the host: ``(u, v, bw, k)`` int64, int64,
    float64 (bond weight, 0 without bond weights), int64 (stencil row), one per stencil
    entry and site, so parallel bonds give repeated pairs. O(n k d) vectorised."""
    slot = t.bslot
    bits, words, bw = _host(bonds[1], np.uint32), int(bonds[2]), _host(bonds[3], np.float64)
    n = t.n
    sites = np.arange(n, dtype=np.int64) if open_h.shape[0] == 0 else np.flatnonzero(open_h)
    coords = np.unravel_index(sites, tuple(int(x) for x in t.shape))
    us, vs, ws, ks = [], [], [], []
    for k in range(t.offsets.shape[0]):
        keep = np.ones(sites.shape[0], dtype=bool)
        j = np.zeros(sites.shape[0], dtype=np.int64)
        for a in range(t.shape.shape[0]):
            y = coords[a].astype(np.int64) + int(t.offsets[k, a])
            if t.periodic[a]:
                y %= int(t.shape[a])
            else:
                keep &= (y >= 0) & (y < t.shape[a])
            j += y * int(t.strides[a])
        u, v = sites[keep], j[keep]
        if open_h.shape[0]:
            ok = open_h[v] != 0
            u, v = u[ok], v[ok]
        s = int(slot[k])
        start = u if s >= 0 else v
        plane = s if s >= 0 else ~s
        if bits.shape[0]:
            ok = (bits[plane * words + (start >> 5)] >> (start & 31).astype(np.uint32)) & 1 != 0
            u, v, start = u[ok], v[ok], start[ok]
        ok = u != v
        u, v, start = u[ok], v[ok], start[ok]
        us.append(u)
        vs.append(v)
        ws.append(bw[plane * n + start] if bw.shape[0] else np.zeros(u.shape[0]))
        ks.append(np.full(u.shape[0], k, dtype=np.int64))
    if not us:
        none = np.zeros(0, dtype=np.int64)
        return none, none, np.zeros(0), none
    return tuple(np.concatenate(a) for a in (us, vs, ws, ks))


def _bond_walk(t: _Tables, pd, w, open_h, bonds, start, end, ln=None) -> np.ndarray:
    """The shortest path ``start .. end`` on the costs ``pd`` of a search from
    ``start`` over a lattice with bonds, by the project-wide tie rule
    (``backends._common.plateau_depths``) with the step cost ``fl(bw + w[v])`` in place
    of ``w[v]`` (times the step's length ``ln[k]`` with lengths): tight steps ``fl(pd[u] + c) == pd[v]``; plateau steps (tight, equal
    costs) ordered by their depth from the sites entered by a rising tight step; the
    walk goes back to the in-neighbour of smallest index along a rising tight step or a
    plateau step one level up. Host NumPy/SciPy, O(n k) time and memory."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import dijkstra

    u, v, bw, k = _bond_steps(t, open_h, bonds)
    if ln is not None and w is None and bonds[3].shape[0] == 0:
        c = ln[k]  # step lengths alone
    else:
        c = bw + w[v] if w is not None else bw
        if ln is not None:
            c = ln[k] * c
    ok = np.isfinite(pd[u]) & np.isfinite(pd[v])
    u, v, c = u[ok], v[ok], c[ok]
    tight = pd[u] + c == pd[v]
    u, v = u[tight], v[tight]
    rise = pd[u] < pd[v]
    n = t.n
    depth = np.zeros(n, dtype=np.int64)
    deep = np.zeros(n, dtype=bool)
    deep[v[~rise]] = True  # entered by a plateau step ...
    deep[v[rise]] = False  # ... and by no rising one
    deep[start] = False
    if deep.any():
        pu, pv = u[~rise], v[~rise]
        pk = deep[pv]
        pu, pv = pu[pk], pv[pk]
        roots = np.unique(pu[~deep[pu]])
        g = csr_array((np.ones(len(pu) + len(roots), dtype=np.int8),
                       (np.concatenate([pu, np.full(len(roots), n)]),
                        np.concatenate([pv, roots]))), shape=(n + 1, n + 1))
        hops = dijkstra(g, indices=n, unweighted=True)[:n]
        if np.isinf(hops[deep]).any():
            raise AssertionError("a site on a cost plateau was not reached by the plateau search")
        depth[deep] = hops[deep].astype(np.int64) - 1
    dag = rise | (depth[u] == depth[v] - 1)
    u, v = u[dag], v[dag]
    order = np.lexsort((u, v))  # by v, then smallest u first
    u, v = u[order], v[order]
    first = np.full(n, -1, dtype=np.int64)
    head = np.ones(v.shape[0], dtype=bool)
    head[1:] = v[1:] != v[:-1]
    first[v[head]] = u[head]
    path = [end]
    x = end
    while x != start:
        x = int(first[x])
        if x < 0 or len(path) >= n:  # (a DAG walk visits each site once)
            raise AssertionError(f"bond walk: no shortest-path step into site {path[-1]}")
        path.append(x)
    return np.array(path[::-1], dtype=np.int64)


def connected_components(shape, periodic, offsets, open_, dedupe, *, stream=0, bonds=None):
    """Label the connected components of the open sites on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.components.connected_components`: the same
    contract and the same labels; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        As the twin's; ``open_`` may also be a uint8 device array, read in place.
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` may be a device array, read in place): only
        open bonds join sites. None: every bond open.

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (n,)
    count : int
        As the twin's; there is no ``sizes`` option.

    Notes
    -----
    Union-find on the device in a fixed number of launches, whatever the lattice: every
    site its own tree; one thread per site links it with its neighbour along each
    offset of half the stencil (:func:`_link`: the larger root under the smaller by
    ``atomic.cas``, so each component's root is its smallest flat index); every site
    replaced by its root; the roots counted by a prefix sum (:func:`_scan`), which
    numbers the components in order of their smallest index. 5 + 2 log_256(n) launches,
    O(n k alpha) work; on the device 8 bytes per site of parents, 4 of prefix sums and 4
    of labels (int64 past 2**31 sites), and only the labels come back.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> m = np.array([1, 0, 1, 1, 0, 1], np.uint8)
    >>> connected_components((2, 3), np.zeros(2, np.uint8), off, m, False)  # doctest: +SKIP
    (array([1, 0, 2, 1, 0, 2], dtype=int32), 2)
    """
    t = _tables(shape, periodic, offsets, stream)
    if t.n == 0:
        return np.empty(0, dtype=np.int32), 0
    d_open = _device(open_, np.uint8, stream)
    labels, counts = _components_run(t, d_open.reshape(1, d_open.shape[0]), stream,
                                     _bonds(t, bonds, stream))
    return labels[0], int(counts[0])


def _half_slots(offsets, bslot, half):
    """int64 per row of ``half``: the bond slot of the stencil entry it is (0 for a row
    that is no entry, the negation of one in an asymmetric stencil, which has no bonds)."""
    out = np.zeros(half.shape[0], dtype=np.int64)
    for h in range(half.shape[0]):
        hit = np.flatnonzero((offsets == half[h]).all(axis=1))
        out[h] = bslot[hit[0]] if hit.size else 0
    return out


def _components_run(t: _Tables, d_stack, stream, bd=None, *, device=False, counts=None):
    """Union-find labelling of a (B, n) stack of masks (B, 0: all open) on the device:
    init, union, roots (and root flags), a scan of the flags, numbering: 5 + 2 log_256(Bn)
    launches whatever the lattice. ``bd``: the device bonds (:func:`_bonds`; None: every
    bond open), shared by the stack. Returns the host labels (B, n) and counts (B,), or
    with ``device`` both as device arrays, nothing read back (the winding check of
    :mod:`~catalytic.kernels.cuda.winding` goes on from them); ``counts``: a device
    int64 (B,) array to number into (a view of a larger one that is read back at once)."""
    from catalytic.kernels.cpu.components import _stencil_halves

    n = t.n
    B = d_stack.shape[0]
    d_bits, words, _ = _bonds(t, None, stream) if bd is None else bd
    half, _ = _stencil_halves(np.ascontiguousarray(t.offsets).tobytes(), t.shape.shape[0])
    half = np.ascontiguousarray(half, dtype=np.int64)
    d_half = _transfer.to_device(half, stream=stream)
    d_hslot = _transfer.to_device(_half_slots(t.offsets, t.bslot, half), stream=stream)
    d_hfast = [_transfer.to_device(a, stream=stream) for a in _fast(t.shape, t.strides, half)]
    label = cuda.device_array((B, n), dtype=_index_type(n), stream=stream)
    _launch(_uf_init, B * n, stream, label, d_stack)
    _launch(_uf_union, B * n, stream, t.d_shape, t.d_strides, t.d_periodic, d_half, *d_hfast,
            d_stack, d_hslot, d_bits, np.int64(words), label)
    ltype = np.int32 if n < 2**31 else np.int64
    scan = cuda.device_array(B * n, dtype=ltype if B * n < 2**31 else np.int64,
                             stream=stream)
    _launch(_uf_roots, B * n, stream, label, scan)
    _scan(scan, stream)
    out = cuda.device_array((B, n), dtype=ltype, stream=stream)
    if counts is None:
        counts = cuda.device_array(B, dtype=np.int64, stream=stream)
    _launch(_uf_number, B * n, stream, label, scan, out, counts)
    if device:
        return out, counts
    return _read(out, stream), _read(counts, stream)


def degree(shape, periodic, offsets, open_, dedupe, *, stream=0, bonds=None) -> np.ndarray:
    """Size of each site's neighbour set, computed on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.degree.degree`: the same contract and the
    same degrees; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        As the twin's; ``open_`` may also be a uint8 device array, read in place.
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` may be a device array): a neighbour counts
        through an open bond, once however many parallel bonds join it. None: all open.

    Notes
    -----
    One thread per site, no local buffer: O(n k) work away from edges and seams
    (:func:`_fast`), O(n k d) at them and O(n k^2 d) there with ``dedupe`` (each
    neighbour compared with the earlier offsets' neighbours, recomputed).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> degree((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False)  # doctest: +SKIP
    array([1, 2, 2, 1])
    """
    t = _tables(shape, periodic, offsets, stream)
    d_open = _device(open_, np.uint8, stream)
    d_bits, words, _ = _bonds(t, bonds, stream)
    deg = cuda.device_array(t.n, dtype=np.int64, stream=stream)
    _launch(_degree, t.n, stream, t.d_shape, t.d_strides, t.d_periodic, t.d_offsets, *t.d_fast,
            t.d_first, d_open, t.d_bslot, d_bits, np.int64(words), bool(dedupe), deg)
    return _read(deg, stream)


def closeness(shape, periodic, offsets, open_, dedupe, sources=None, *, batch=None,
              stream=0, open_host=None, bonds=None) -> np.ndarray:
    """Closeness centrality (NetworkX ``closeness_centrality``, ``wf_improved=True``),
    computed on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.bfs.closeness`: the same contract; the
    same float expression on the same integer sums, so equal to it (tested to 1e-12). Only
    what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe, sources
        As the twin's; ``open_`` may also be a uint8 device array, read in place.
    batch : int, optional
        Sources searched at once, 1 to :data:`BITS` (the default, one bit of a 64-bit
        word each).
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    open_host : ndarray of uint8, optional
        ``open_`` on the host when the caller passes a device copy as ``open_`` and has
        the host array too (read instead of copying the mask back).
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` may be a device array): hops only through
        open bonds (bond weights are not read: closeness counts hops). None: all open.

    Raises
    ------
    ValueError
        ``batch`` not in 1..64.

    Notes
    -----
    Bit-parallel multi-source BFS, as the CPU's
    :func:`catalytic.kernels.cpu.centrality.closeness`: up to 64 sources at a time,
    source s being bit s of a 64-bit word per site (seen, frontier, next frontier: 24
    bytes per site whatever the sources). Each level is one launch with one thread per site, which ORs its
    in-neighbours' frontier words, keeps the bits it has not seen, and counts each new
    bit for its source (per block in shared memory, then one ``atomic.add`` per block
    and source into the reach count and distance sum, which are integers: exact). The
    host reads the flag after batches of up to :data:`LAUNCHES_PER_CHECK` levels, and
    the sums once per pass. O(n k) work per level for 64 sources at once, levels up to
    the pass's largest eccentricity. A source named twice is searched once.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> closeness((3,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8),
    ...           False)  # doctest: +SKIP
    array([0.66666667, 1.        , 0.66666667])
    """
    t = _tables(shape, periodic, offsets, stream)
    n = t.n
    open_h = _host(open_ if open_host is None else open_host, np.uint8)
    if sources is None:
        src = np.flatnonzero(open_h) if open_h.shape[0] else np.arange(n)
    else:
        src = np.asarray(sources, dtype=np.int64).reshape(-1)
    src = src.astype(np.int64)
    check_sources(src, n, open_h)
    out = np.full(n, np.nan)
    if src.shape[0] == 0:
        return out
    n_open = int(np.count_nonzero(open_h)) if open_h.shape[0] else n
    S = BITS if batch is None else int(batch)
    if not 1 <= S <= BITS:
        raise ValueError(f"batch must be 1 to {BITS} sources, got {batch}")
    uniq, back = np.unique(src, return_inverse=True)
    d_open = _device(open_, np.uint8, stream)
    d_bits, words, _ = _bonds(t, bonds, stream)
    seen, front, nxt = (cuda.device_array(n, dtype=np.uint64, stream=stream)
                        for _ in range(3))
    vals = np.empty(uniq.shape[0], dtype=np.float64)
    for b0 in range(0, uniq.shape[0], S):
        bs = uniq[b0:b0 + S]
        ns = bs.shape[0]
        reach = _transfer.to_device(np.ones(ns, dtype=np.int64), stream=stream)
        tot = _transfer.to_device(np.zeros(ns, dtype=np.int64), stream=stream)
        flag = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
        _launch(_fill, n, stream, seen, np.uint64(0))
        _launch(_fill, n, stream, front, np.uint64(0))
        _launch(_bits_start, ns, stream, seen, front, _transfer.to_device(bs, stream=stream))
        level = 0
        for k in _checks():
            for _ in range(k):
                _launch(_bits_level, n, stream, t.d_shape, t.d_strides, t.d_periodic,
                        t.d_noffsets, *t.d_nfast, d_open, t.d_nslot, d_bits,
                        np.int64(words), seen, front, nxt, np.int64(level), reach, tot, flag)
                front, nxt = nxt, front
                level += 1
            if _read(flag, stream)[0] != level:  # the last level reached nothing
                break
        r = _read(reach, stream)
        s = _read(tot, stream)
        c = np.zeros(ns, dtype=np.float64)
        ok = s > 0
        if n_open > 1:
            c[ok] = (r[ok] - 1.0) / s[ok]
            c[ok] *= (r[ok] - 1.0) / (n_open - 1)
        vals[b0:b0 + ns] = c
    out[src] = vals[back]
    return out


def bfs_distance_batched(shape, periodic, offsets, open_stack, dedupe, sources, *, stream=0,
                         bonds=None):
    """Hop distances on a stack of same-shape lattices, one source each, left on the
    device.

    The CUDA twin of :func:`catalytic.kernels.cpu.batched.bfs_distance_batched`: the same
    contract and the same distances for one source per lattice; only what differs is said
    here.

    Parameters
    ----------
    shape, periodic, offsets, open_stack, dedupe
        As the twin's; ``open_stack`` may also be a uint8 device array, read in place.
    sources : array_like of int, (B,)
        The open source site of each lattice: one each (the twin also takes ``(B, m)``).
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    bonds : tuple, optional
        ``Geometry.bond_args()`` of the lattice every row shares (``bits`` may be a
        device array): hops only through open bonds. None: all open.

    Returns
    -------
    device array of int64, (B, n)
        The twin's rows, left on the device.

    Raises
    ------
    ValueError
        ``open_stack`` not 2-D with n or 0 columns, or ``sources`` not of length B.
    IndexError
        A source outside ``[0, n)``; a blocked source is not checked (the twin's is).

    Notes
    -----
    Level-synchronous scan: one launch per level over all B*n (lattice, site) pairs,
    each unvisited open site pulling from its in-neighbours at the current level.
    O(B n k) work per level, levels up to the largest eccentricity, the flag read after
    batches of up to :data:`LAUNCHES_PER_CHECK` levels; 8 bytes per pair.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> st = np.array([[1, 1, 1], [1, 0, 1]], np.uint8)
    >>> bfs_distance_batched((3,), np.zeros(1, np.uint8), off, st, False,
    ...                      [0, 0]).copy_to_host()  # doctest: +SKIP
    array([[ 0,  1,  2],
           [ 0, -1, -1]])
    """
    t = _tables(shape, periodic, offsets, stream)
    n = t.n
    if len(open_stack.shape) != 2:
        raise ValueError(f"open_stack must be 2-D (B, n), got shape {open_stack.shape}")
    d_stack = _device(open_stack, np.uint8, stream)
    B = d_stack.shape[0]
    src = np.asarray(sources, dtype=np.int64).reshape(-1)
    if src.shape[0] != B:
        raise ValueError(f"sources has {src.shape[0]} entries, open_stack {B} rows")
    check_sources(src, n)
    if d_stack.shape[1] not in (0, n):
        raise ValueError(f"open_stack rows have {d_stack.shape[1]} entries, lattice {n} sites")
    dist = cuda.device_array((B, n), dtype=np.int64, stream=stream)
    if B * n == 0:
        return dist
    _launch(_batched_init, B * n, stream, dist, _transfer.to_device(src, stream=stream))
    d_bits, words, _ = _bonds(t, bonds, stream)
    flag = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
    level = 0
    for k in _checks():
        for _ in range(k):
            _launch(_batched_level, B * n, stream, t.d_shape, t.d_strides, t.d_periodic,
                    t.d_noffsets, *t.d_nfast, d_stack, t.d_nslot, d_bits, np.int64(words),
                    dist, np.int64(level), flag)
            level += 1
        if _read(flag, stream)[0] != level:  # the last level reached nothing
            return dist


def connected_components_batched(shape, periodic, offsets, open_stack, dedupe, *, stream=0,
                                 bonds=None):
    """Label the components of a stack of same-shape lattices, all in the same launches.

    The CUDA twin of :func:`catalytic.kernels.cpu.components.connected_components_batched`:
    the same labels and counts, without the sizes; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_stack, dedupe
        As the twin's; ``open_stack`` may also be a uint8 device array, read in place.
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    bonds : tuple, optional
        ``Geometry.bond_args()`` of the lattice every row shares (``bits`` may be a
        device array): only open bonds join sites. None: every bond open.

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (B, n)
        Row b equals ``connected_components`` of lattice b.
    counts : ndarray of int64, (B,)

    Raises
    ------
    ValueError
        ``open_stack`` not 2-D with n or 0 columns. No lattice is too large (the twin
        refuses those :func:`catalytic.kernels.cpu.components.batch_fits` rejects).

    Notes
    -----
    The union-find of :func:`connected_components` over all B*n (lattice, site) pairs at
    once, each lattice linking inside its own row, and one prefix sum over all the
    rows' root flags: the same 5 + 2 log_256(Bn) launches; 16 bytes per pair on the
    device.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> st = np.array([[1, 1, 1], [1, 0, 1]], np.uint8)
    >>> connected_components_batched((3,), np.zeros(1, np.uint8), off, st,
    ...                              False)  # doctest: +SKIP
    (array([[1, 1, 1],
           [1, 0, 2]], dtype=int32), array([1, 2]))
    """
    t = _tables(shape, periodic, offsets, stream)
    n = t.n
    if len(open_stack.shape) != 2:
        raise ValueError(f"open_stack must be 2-D (B, n), got shape {open_stack.shape}")
    d_stack = _device(open_stack, np.uint8, stream)
    B = d_stack.shape[0]
    if d_stack.shape[1] not in (0, n):
        raise ValueError(f"open_stack rows have {d_stack.shape[1]} entries, lattice {n} sites")
    if B * n == 0:
        return np.zeros((B, n), dtype=np.int32), np.zeros(B, dtype=np.int64)
    return _components_run(t, d_stack, stream, _bonds(t, bonds, stream))
