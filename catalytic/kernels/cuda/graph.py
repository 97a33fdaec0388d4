"""CUDA twins of the graph kernels in :mod:`catalytic.kernels.cpu.graph`.

Every host function takes the lattice as the CPU twin does, ``(shape, periodic, offsets,
open_, dedupe, ...)`` with the conventions of ``kernels/cpu/_lattice.py``, copies the
small tables (shape, strides, periodic, offsets) to the device itself, and accepts
``open_`` and ``weights`` either as NumPy arrays or as Numba device arrays (the caller
caches device copies of those). Functions documented as returning a device array leave
the result on the GPU; ``.copy_to_host()`` brings it back.

Kernels
-------
One thread per element (``i = cuda.grid(1)``, a bounds guard, the work); the host
functions pick the launch shape: a 1-D grid of :data:`THREADS` threads per block and
``ceil(work / THREADS)`` blocks. Kernels allocate nothing, not even per-thread local
arrays (``degree`` de-duplicates by recomputing earlier neighbours, see
:func:`~catalytic.kernels.cuda._lattice.is_first`), and use only plain loads and stores
and the ``cuda.atomic`` functions, so they run unchanged under the CUDA simulator.

Every neighbour is computed by the device :func:`~catalytic.kernels.cuda._lattice.neighbor`,
compiled from the same source as the CPU one, so the neighbour *set* is the same on both
backends. Distances follow out-neighbours; kernels that *pull* values (relaxation,
the level scans) read over in-neighbours, i.e. the negated stencil.

Iterative kernels report progress through a one-element ``flag`` array: the launch of
iteration ``it`` writes ``it`` there when anything changed, so the host reads one value
per iteration and never has to reset the flag.

Results equal the CPU twin's bit for bit (distances, labels, paths, degrees) and
closeness agrees to rounding of one identical float expression (it is computed on the
host from the same integer sums, so in practice also bit for bit).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import cuda

from catalytic.kernels.cpu._lattice import c_strides, check_sources
from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda._lattice import is_first, neighbor

__all__ = [
    "THREADS",
    "bfs_distance",
    "relax_distance",
    "shortest_path",
    "connected_components",
    "degree",
    "closeness",
    "bfs_distance_batched",
    "connected_components_batched",
]

#: threads per block for every launch in this module
THREADS = 256
#: sources per closeness batch when the device cannot report its free memory (simulator)
SIM_BATCH = 64
#: share of the free device memory a closeness batch may take
BATCH_MEMORY_SHARE = 0.5


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
def _bfs_expand(shape, strides, periodic, offsets, open_, dist, cur, m, nxt, cnt, slot, dn):
    """Expand the frontier ``cur[:m]`` (one thread per entry): every unvisited
    out-neighbour is claimed with a compare-and-swap of ``dist`` from -1 to ``dn`` and,
    when this thread won the claim, appended to ``nxt`` at ``atomic.add(cnt[slot])``.
    Thread 0 zeroes the other counter ``cnt[1 - slot]``, which the next level appends to
    (the host has already read it). Each site is claimed once, so ``nxt`` needs at most
    n entries."""
    h = cuda.grid(1)
    if h == 0:
        cnt[1 - slot] = 0
    if h < m:
        p = cur[h]
        for k in range(offsets.shape[0]):
            q = neighbor(p, k, shape, strides, periodic, offsets, open_)
            if q >= 0 and dist[q] == -1:
                if cuda.atomic.cas(dist, q, -1, dn) == -1:
                    nxt[cuda.atomic.add(cnt, slot, 1)] = q


@cuda.jit
def _relax_pull(shape, strides, periodic, noffsets, open_, weights, dist, flag, it):
    """One Bellman-Ford sweep, pulling over in-neighbours (``noffsets`` is the negated
    stencil): ``dist[v] = min(dist[v], min_u dist[u] + weights[v])`` for open ``v``.
    Values only decrease and each is the cost of some walk, so sweeps may read values
    other threads are writing. Writes ``it`` to ``flag[0]`` on any improvement."""
    v = cuda.grid(1)
    if v < dist.shape[0]:
        if open_.shape[0] == 0 or open_[v] != 0:
            dv = dist[v]
            wv = weights[v]
            best = dv
            for k in range(noffsets.shape[0]):
                u = neighbor(v, k, shape, strides, periodic, noffsets, open_)
                if u >= 0:
                    c = dist[u] + wv
                    if c < best:
                        best = c
            if best < dv:
                dist[v] = best
                flag[0] = it


@cuda.jit
def _cc_init(label, open_):
    """``label[v] = v`` for open sites, -1 for blocked ones."""
    v = cuda.grid(1)
    if v < label.shape[0]:
        if open_.shape[0] != 0 and open_[v] == 0:
            label[v] = -1
        else:
            label[v] = v


@cuda.jit(device=True)
def _smallest_label(v, shape, strides, periodic, offsets, noffsets, open_, label):
    """The smallest label over open site ``v`` and its out- and in-neighbours (the
    relation is undirected), then followed through ``label[m]`` while that is smaller."""
    m = label[v]
    for k in range(offsets.shape[0]):
        u = neighbor(v, k, shape, strides, periodic, offsets, open_)
        if u >= 0:
            lu = label[u]
            if lu < m:
                m = lu
    for k in range(noffsets.shape[0]):
        u = neighbor(v, k, shape, strides, periodic, noffsets, open_)
        if u >= 0:
            lu = label[u]
            if lu < m:
                m = lu
    lm = label[m]
    while lm < m:
        m = lm
        lm = label[m]
    return m


@cuda.jit
def _cc_pull(shape, strides, periodic, offsets, noffsets, open_, label, flag, it):
    """One label-propagation sweep with pointer jumping (:func:`_smallest_label` for
    every open site). ``label[x] <= x`` for every open ``x`` and labels only decrease,
    so concurrent sweeps stay consistent; at the fixed point every site holds the
    smallest flat index of its component. Writes ``it`` to ``flag[0]`` on any change."""
    v = cuda.grid(1)
    if v < label.shape[0]:
        lv = label[v]
        if lv >= 0:
            m = _smallest_label(v, shape, strides, periodic, offsets, noffsets, open_, label)
            if m < lv:
                label[v] = m
                flag[0] = it


@cuda.jit
def _degree(shape, strides, periodic, offsets, open_, dedupe, deg):
    """``deg[i]`` = size of the neighbour set of open site ``i`` (0 when blocked); with
    ``dedupe`` a neighbour counts only where :func:`is_first` (no local buffer)."""
    i = cuda.grid(1)
    if i < deg.shape[0]:
        m = 0
        if open_.shape[0] == 0 or open_[i] != 0:
            for k in range(offsets.shape[0]):
                j = neighbor(i, k, shape, strides, periodic, offsets, open_)
                if j >= 0 and (not dedupe
                               or is_first(i, k, j, shape, strides, periodic, offsets, open_)):
                    m += 1
        deg[i] = m


@cuda.jit
def _multi_init(dist, open_, src):
    """Row ``s < len(src)`` of ``dist`` (S, n): 0 at ``src[s]``, -1 at the other open
    sites, -2 at blocked ones (never claimed by :func:`_multi_level`)."""
    t = cuda.grid(1)
    n = dist.shape[1]
    if t < src.shape[0] * n:
        s = t // n
        v = t - s * n
        if v == src[s]:
            dist[s, v] = 0
        elif open_.shape[0] != 0 and open_[v] == 0:
            dist[s, v] = -2
        else:
            dist[s, v] = -1


@cuda.jit
def _multi_level(shape, strides, periodic, noffsets, open_, dist, ns, level, reach, tot,
                 flag):
    """One BFS level for ``ns`` sources at once, one thread per (source, site) pair:
    an unvisited site with an in-neighbour at distance ``level`` gets ``level + 1`` and
    adds itself to its source's ``reach`` count and ``tot`` distance sum. Only entries
    equal to -1 change, so the values compared with ``level`` are stable during the
    launch. Writes ``level + 1`` to ``flag[0]`` when any site was reached."""
    t = cuda.grid(1)
    n = dist.shape[1]
    if t < ns * n:
        s = t // n
        v = t - s * n
        if dist[s, v] == -1:
            for k in range(noffsets.shape[0]):
                u = neighbor(v, k, shape, strides, periodic, noffsets, open_)
                if u >= 0 and dist[s, u] == level:
                    dist[s, v] = level + 1
                    cuda.atomic.add(reach, s, 1)
                    cuda.atomic.add(tot, s, level + 1)
                    flag[0] = level + 1
                    break


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
def _batched_level(shape, strides, periodic, noffsets, open_stack, dist, level, flag):
    """One BFS level over a stack of lattices, one thread per (lattice, site) pair:
    an open unvisited site with an in-neighbour at distance ``level`` in its own
    lattice (``open_stack[b]``; a (B, 0) stack means all sites open) gets
    ``level + 1``. Writes ``level + 1`` to ``flag[0]`` when any site was reached."""
    t = cuda.grid(1)
    n = dist.shape[1]
    if t < dist.shape[0] * n:
        b = t // n
        v = t - b * n
        row = open_stack[b]
        if dist[b, v] == -1 and (row.shape[0] == 0 or row[v] != 0):
            for k in range(noffsets.shape[0]):
                u = neighbor(v, k, shape, strides, periodic, noffsets, row)
                if u >= 0 and dist[b, u] == level:
                    dist[b, v] = level + 1
                    flag[0] = level + 1
                    break


@cuda.jit
def _cc_init_batched(label, open_stack):
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


@cuda.jit
def _cc_pull_batched(shape, strides, periodic, offsets, noffsets, open_stack, label, flag, it):
    """:func:`_cc_pull` over a stack of lattices, one thread per (lattice, site) pair;
    every lattice ``b`` reads only its own mask row and its own label row."""
    t = cuda.grid(1)
    n = label.shape[1]
    if t < label.shape[0] * n:
        b = t // n
        v = t - b * n
        lab = label[b]
        lv = lab[v]
        if lv >= 0:
            m = _smallest_label(v, shape, strides, periodic, offsets, noffsets, open_stack[b], lab)
            if m < lv:
                lab[v] = m
                flag[0] = it


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


def _tables(shape, periodic, offsets, stream) -> _Tables:
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    strides = c_strides(shape)
    n = int(np.prod(shape, dtype=object))

    def dev(a):
        return _transfer.to_device(a, stream=stream)

    return _Tables(n, shape, strides, periodic, offsets, dev(shape), dev(strides),
                   dev(periodic), dev(offsets), dev(np.ascontiguousarray(-offsets)))


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


def _bfs_run(t: _Tables, d_open, src, stream, stop=-1):
    """Level-synchronous frontier BFS from the flat indices ``src``; returns the device
    int64 distance array. With ``stop >= 0`` it stops after the level that reaches
    ``stop`` (distances up to that level are final)."""
    n = t.n
    dist = cuda.device_array(n, dtype=np.int64, stream=stream)
    _launch(_fill, n, stream, dist, np.int64(-1))
    src = np.unique(np.asarray(src, dtype=np.int64).reshape(-1))
    check_sources(src, n)
    m = int(src.shape[0])
    if m == 0 or n == 0:
        return dist
    cap = max(n, m)
    cur = cuda.device_array(cap, dtype=np.int64, stream=stream)
    nxt = cuda.device_array(cap, dtype=np.int64, stream=stream)
    _transfer.host_to(cur[:m], src, stream=stream)
    _launch(_scatter, m, stream, dist, cur[:m], np.int64(0))
    cnt = _transfer.to_device(np.zeros(2, dtype=np.int64), stream=stream)
    dn = 1
    while m > 0:
        if stop >= 0 and _read(dist[stop:stop + 1], stream)[0] >= 0:
            break
        slot = dn & 1
        _launch(_bfs_expand, m, stream, t.d_shape, t.d_strides, t.d_periodic, t.d_offsets,
                d_open, dist, cur, np.int64(m), nxt, cnt, np.int64(slot), np.int64(dn))
        m = int(_read(cnt, stream)[slot])
        cur, nxt = nxt, cur
        dn += 1
    return dist


def _relax_run(t: _Tables, d_open, d_w, src, stream):
    """Pull relaxation to the fixed point; returns the device float64 cost array."""
    n = t.n
    dist = cuda.device_array(n, dtype=np.float64, stream=stream)
    _launch(_fill, n, stream, dist, np.float64(np.inf))
    src = np.unique(np.asarray(src, dtype=np.int64).reshape(-1))
    check_sources(src, n)
    if src.shape[0] == 0 or n == 0:
        return dist
    _launch(_scatter, src.shape[0], stream, dist, _transfer.to_device(src, stream=stream),
            np.float64(0.0))
    flag = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
    it = 1
    while True:
        _launch(_relax_pull, n, stream, t.d_shape, t.d_strides, t.d_periodic, t.d_noffsets,
                d_open, d_w, dist, flag, np.int64(it))
        if _read(flag, stream)[0] != it:
            return dist
        it += 1


# ---------------------------------------------------------------------------------------
# Host functions
# ---------------------------------------------------------------------------------------


def bfs_distance(shape, periodic, offsets, open_, dedupe, sources, *, stream=0):
    """Multi-source hop distances, left on the device.

    Parameters
    ----------
    shape : array_like of int, (d,)
    periodic : array_like of uint8, (d,)
    offsets : ndarray of int64, (k, d)
    open_ : ndarray or device array of uint8, (n,) or (0,)
    dedupe : bool
        Unused: duplicate neighbours and self-loops cannot change a BFS distance.
    sources : array_like of int
        Flat indices of open source sites (distance 0).
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).

    Returns
    -------
    device array of int64, (n,)
        Hops from the nearest source; -1 for unreachable and blocked sites. int64 (as
        the CPU twin returns), so the copied-back array equals it dtype and all.

    Raises
    ------
    IndexError
        A source outside ``[0, n)``.

    Notes
    -----
    Level-synchronous frontier BFS: one launch per level with one thread per frontier
    site, which claims unvisited out-neighbours with ``atomic.cas`` and appends them to
    the next frontier with ``atomic.add``; the host reads the next frontier's length
    (8 bytes) after every level. O(n k) work, O(diameter) launches, 24 bytes per site
    (distances and two frontiers).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> bfs_distance((2, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False,
    ...              [0]).copy_to_host()  # doctest: +SKIP
    array([0, 1, 2, 1, 2, 3])
    """
    t = _tables(shape, periodic, offsets, stream)
    return _bfs_run(t, _device(open_, np.uint8, stream), sources, stream)


def relax_distance(shape, periodic, offsets, open_, dedupe, weights, sources, *, stream=0):
    """Multi-source weighted distances (entering site v costs ``weights[v]``), on the device.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    weights : ndarray or device array of float64, (n,)
        Non-negative cost of entering each site.
    sources : array_like of int
        Flat indices of open source sites (cost 0).
    stream : numba.cuda stream, optional

    Returns
    -------
    device array of float64, (n,)
        Least cost from the nearest source; inf for unreachable and blocked sites.
        Bit for bit the CPU twin's Dijkstra values.

    Notes
    -----
    Bellman-Ford style pull relaxation, one thread per site, ``dist[v] = min(dist[v],
    dist[u] + w[v])`` over the in-neighbours ``u``, swept until a sweep changes nothing.
    Float addition of a non-negative weight is monotone, so the fixed point is the
    least left-to-right sum over paths, which is exactly what Dijkstra computes with
    the same expression. O(n k) per sweep, at most (hops of the longest shortest path
    + 1) sweeps, usually far fewer since sweeps see each other's updates; 8 bytes per
    site.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> relax_distance((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False,
    ...                np.array([5.0, 1.0, 2.0, 0.5]), [0]).copy_to_host()  # doctest: +SKIP
    array([0. , 1. , 3. , 3.5])
    """
    t = _tables(shape, periodic, offsets, stream)
    d_w = _device(weights, np.float64, stream)
    return _relax_run(t, _device(open_, np.uint8, stream), d_w, sources, stream)


def shortest_path(shape, periodic, offsets, open_, dedupe, start, end, weights=None, *,
                  stream=0) -> np.ndarray:
    """One shortest path from ``start`` to ``end``, the same one the CPU twin returns.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    start, end : int
        Flat indices of open sites.
    weights : ndarray or device array of float64, (n,), optional
        Cost of entering each site; hop counts when None.
    stream : numba.cuda stream, optional

    Returns
    -------
    ndarray of int64
        Flat indices start..end; length 0 when ``end`` is unreachable.

    Notes
    -----
    The distances come from the device (:func:`bfs_distance` stopping after ``end``'s
    level, or :func:`relax_distance`); the walk back from ``end`` runs on the host with
    the CPU twin's own walk-back kernels (``_walk_back_hops``, ``_walk_back_weighted``
    in unpadded mode), so the tie rule is the CPU's by construction: the in-neighbour of
    smallest flat index one hop closer, or on a tight step (weighted; marks and
    backtracking only matter with zero weights). Weighted distances beyond
    cost(end) differ from the CPU's early-stopped Dijkstra, but no such site can be
    tight on the walk, so the path is the same. O(n k) device work, O(D k) host work.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> shortest_path((3, 3), np.zeros(2, np.uint8), off, np.zeros(0, np.uint8), False,
    ...               0, 8)  # doctest: +SKIP
    array([0, 1, 2, 5, 8])
    """
    from catalytic.kernels.cpu.graph import _walk_back_hops, _walk_back_weighted

    t = _tables(shape, periodic, offsets, stream)
    start = int(start)
    end = int(end)
    if not (0 <= start < t.n and 0 <= end < t.n):
        raise IndexError(f"start {start} or end {end} out of range for {t.n} sites")
    d_open = _device(open_, np.uint8, stream)
    k = t.offsets.shape[0]
    nfoff = np.zeros(k, dtype=np.int64)  # unused in unpadded mode 0 except for its length
    noffs = np.ascontiguousarray(-t.offsets)
    r = np.zeros(t.shape.shape[0], dtype=np.int64)
    if weights is None:
        dist = _read(_bfs_run(t, d_open, [start], stream, stop=end), stream)
        D = int(dist[end])
        if D < 0:
            return np.empty(0, dtype=np.int64)
        path = np.empty(D + 1, dtype=np.int64)
        _walk_back_hops(dist, path, nfoff, noffs, r, t.shape, t.strides, t.periodic, 0, end)
        return path[::-1].copy()
    d_w = _device(weights, np.float64, stream)
    pd = _read(_relax_run(t, d_open, d_w, [start], stream), stream)
    if not np.isfinite(pd[end]):
        return np.empty(0, dtype=np.int64)
    w = _host(d_w, np.float64)
    open_h = _host(open_, np.uint8)
    pw = w.copy() if open_h.shape[0] == 0 else np.where(open_h != 0, w, -2.0)
    n_open = t.n if open_h.shape[0] == 0 else int(np.count_nonzero(open_h))
    mark = np.zeros(t.n, dtype=np.uint8)
    stack = np.empty(max(n_open, 1), dtype=np.int64)
    m = _walk_back_weighted(pd, pw, mark, stack, nfoff, noffs, r, t.shape, t.strides,
                            t.periodic, 0, start, end)
    return stack[:m][::-1].copy()


def connected_components(shape, periodic, offsets, open_, dedupe, *, stream=0):
    """Label the connected components of the open sites.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused). The neighbour
        relation is taken as undirected, so asymmetric stencils are allowed.
    stream : numba.cuda stream, optional

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (n,)
        0 for blocked sites; components numbered 1..count in the order of their lowest
        flat index, exactly as the CPU twin numbers them.
    count : int

    Notes
    -----
    Label propagation with pointer jumping on the device (one thread per site; each
    sweep takes the smallest label over the site, its out- and in-neighbours, then
    follows ``label[label]`` down), repeated until a sweep changes nothing; every site
    then holds its component's smallest flat index, and the host renumbers them in
    O(n) without sorting. O(n k) per sweep, 8 bytes per site on the device.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> m = np.array([1, 0, 1, 1, 0, 1], np.uint8)
    >>> connected_components((2, 3), np.zeros(2, np.uint8), off, m, False)  # doctest: +SKIP
    (array([1, 0, 2, 1, 0, 2], dtype=int32), 2)
    """
    t = _tables(shape, periodic, offsets, stream)
    n = t.n
    if n == 0:
        return np.empty(0, dtype=np.int32), 0
    d_open = _device(open_, np.uint8, stream)
    label = cuda.device_array(n, dtype=np.int64, stream=stream)
    _launch(_cc_init, n, stream, label, d_open)
    flag = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
    it = 1
    while True:
        _launch(_cc_pull, n, stream, t.d_shape, t.d_strides, t.d_periodic, t.d_offsets,
                t.d_noffsets, d_open, label, flag, np.int64(it))
        if _read(flag, stream)[0] != it:
            break
        it += 1
    labels, counts = _number_by_lowest_index(_read(label, stream).reshape(1, n))
    return labels[0], int(counts[0])


def _number_by_lowest_index(raw):
    """Rows of fixed-point labels (each open site holds its component's lowest flat
    index, -1 blocked) renumbered 1..count in order of that index, 0 blocked; and the
    count of every row. O(B n) on the host, no sort: a component's number is how many
    component roots (``raw[v] == v``) its root is at or after."""
    B, n = raw.shape
    roots = np.cumsum(raw == np.arange(n), axis=1)
    dtype = np.int32 if n < 2**31 else np.int64
    labels = np.take_along_axis(roots, np.maximum(raw, 0), axis=1).astype(dtype)
    labels[raw < 0] = 0
    return labels, roots[:, -1].astype(np.int64) if n else np.zeros(B, np.int64)


def degree(shape, periodic, offsets, open_, dedupe, *, stream=0) -> np.ndarray:
    """Size of each site's neighbour set.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance`. With ``dedupe`` the duplicates and
        self-loops that small periodic axes create are not counted.
    stream : numba.cuda stream, optional

    Returns
    -------
    ndarray of int64, (n,)
        Degree of each open site; 0 for blocked sites.

    Notes
    -----
    One thread per site, no local buffer: O(n k d) work, O(n k^2 d) with ``dedupe``
    (each neighbour is compared with the earlier offsets' neighbours, recomputed).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> degree((4,), np.zeros(1, np.uint8), off, np.zeros(0, np.uint8), False)  # doctest: +SKIP
    array([1, 2, 2, 1])
    """
    t = _tables(shape, periodic, offsets, stream)
    d_open = _device(open_, np.uint8, stream)
    deg = cuda.device_array(t.n, dtype=np.int64, stream=stream)
    _launch(_degree, t.n, stream, t.d_shape, t.d_strides, t.d_periodic, t.d_offsets, d_open,
            bool(dedupe), deg)
    return _read(deg, stream)


def _closeness_batch(n: int, n_src: int) -> int:
    """Sources per closeness batch: as many (S, n) int32 rows as fit in
    ``BATCH_MEMORY_SHARE`` of the free device memory, ``SIM_BATCH`` when the device
    reports no finite free memory (the simulator), at least 1, at most ``n_src``."""
    from catalytic.memory import get_monitor

    free = get_monitor().free_bytes()  # deferred frees flushed: one reading of the truth
    if not math.isfinite(free):
        S = SIM_BATCH
    else:
        S = int(BATCH_MEMORY_SHARE * free // (4 * max(n, 1) + 64))
    return max(1, min(S, n_src))


def closeness(shape, periodic, offsets, open_, dedupe, sources=None, *, batch=None,
              stream=0) -> np.ndarray:
    """Closeness centrality (NetworkX ``closeness_centrality``, ``wf_improved=True``).

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    sources : array_like of int, optional
        Open sites to compute; all open sites when None.
    batch : int, optional
        Sources searched at once; by default as many as fit in half the free device
        memory (64 under the simulator).
    stream : numba.cuda stream, optional

    Returns
    -------
    ndarray of float64, (n,)
        For each source with r sites reachable (itself included) at total distance tot,
        ``(r-1)/tot * (r-1)/(n_open-1)`` (0 when tot == 0 or n_open == 1); nan for every
        site not computed, blocked sites included. The same float expression as the CPU
        twin on the same integers, so equal to it (tested to 1e-12).

    Raises
    ------
    ValueError
        ``batch`` < 1.
    IndexError
        A source out of range or blocked.

    Notes
    -----
    S sources at a time share an (S, n) int32 distance array; each BFS level is one
    launch over all S*n (source, site) pairs, pulling from in-neighbours at the current
    level, and each newly reached site adds to its source's reach count and distance
    sum with ``atomic.add``; the host reads one flag per level and the sums per batch.
    Every level scans all pairs: O(n k) work per source per level, levels up to the
    batch's largest eccentricity; 4 bytes per (source, site) pair.

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
    open_h = _host(open_, np.uint8)
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
    if batch is None:
        S = _closeness_batch(n, src.shape[0])
    else:
        S = int(batch)
        if S < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        S = min(S, src.shape[0])
    d_open = _device(open_, np.uint8, stream)
    dist = cuda.device_array((S, n), dtype=np.int32, stream=stream)
    vals = np.empty(src.shape[0], dtype=np.float64)
    for b0 in range(0, src.shape[0], S):
        bs = src[b0:b0 + S]
        ns = bs.shape[0]
        d_src = _transfer.to_device(bs, stream=stream)
        reach = _transfer.to_device(np.ones(ns, dtype=np.int64), stream=stream)
        tot = _transfer.to_device(np.zeros(ns, dtype=np.int64), stream=stream)
        flag = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
        _launch(_multi_init, ns * n, stream, dist, d_open, d_src)
        level = 0
        while True:
            _launch(_multi_level, ns * n, stream, t.d_shape, t.d_strides, t.d_periodic,
                    t.d_noffsets, d_open, dist, np.int64(ns), np.int64(level), reach, tot,
                    flag)
            if _read(flag, stream)[0] != level + 1:
                break
            level += 1
        r = _read(reach, stream)
        s = _read(tot, stream)
        c = np.zeros(ns, dtype=np.float64)
        ok = s > 0
        if n_open > 1:
            c[ok] = (r[ok] - 1.0) / s[ok]
            c[ok] *= (r[ok] - 1.0) / (n_open - 1)
        vals[b0:b0 + ns] = c
    out[src] = vals
    return out


def bfs_distance_batched(shape, periodic, offsets, open_stack, dedupe, sources, *, stream=0):
    """Hop distances on a stack of same-shape lattices, one source each, on the device.

    Parameters
    ----------
    shape, periodic, offsets, dedupe
        The common lattice, as in :func:`bfs_distance` (``dedupe`` is unused).
    open_stack : ndarray or device array of uint8, (B, n) or (B, 0)
        Row b is lattice b's ``open_``; (B, 0) means every site of every lattice is open.
    sources : array_like of int, (B,)
        Flat index of the open source site of each lattice.
    stream : numba.cuda stream, optional

    Returns
    -------
    device array of int64, (B, n)
        Row b equals the CPU ``bfs_distance`` of lattice b from ``sources[b]``.

    Raises
    ------
    ValueError
        ``open_stack`` not 2-D with n or 0 columns, or ``sources`` not of length B.
    IndexError
        A source outside ``[0, n)``.

    Notes
    -----
    Level-synchronous scan: one launch per level over all B*n (lattice, site) pairs,
    each unvisited open site pulling from its in-neighbours at the current level.
    O(B n k) work per level, levels up to the largest eccentricity; 8 bytes per pair.

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
    flag = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
    level = 0
    while True:
        _launch(_batched_level, B * n, stream, t.d_shape, t.d_strides, t.d_periodic,
                t.d_noffsets, d_stack, dist, np.int64(level), flag)
        if _read(flag, stream)[0] != level + 1:
            return dist
        level += 1


def connected_components_batched(shape, periodic, offsets, open_stack, dedupe, *, stream=0):
    """Label the components of a stack of same-shape lattices in one launch per sweep.

    Parameters
    ----------
    shape, periodic, offsets, dedupe
        The common lattice, as in :func:`connected_components` (``dedupe`` is unused).
    open_stack : ndarray or device array of uint8, (B, n) or (B, 0)
        Row b is lattice b's ``open_`` (a percolation sample, say); (B, 0) means every
        site of every lattice is open.
    stream : numba.cuda stream, optional

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (B, n)
        Row b equals ``connected_components`` of lattice b: 0 on blocked sites,
        components 1..count in order of their lowest flat index.
    counts : ndarray of int64, (B,)

    Raises
    ------
    ValueError
        ``open_stack`` not 2-D with n or 0 columns.

    Notes
    -----
    The sweeps of :func:`connected_components` over all B*n (lattice, site) pairs at
    once, until no lattice changes: O(B n k) per sweep, as many sweeps as the slowest
    lattice needs; 8 bytes per pair on the device.

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
    label = cuda.device_array((B, n), dtype=np.int64, stream=stream)
    _launch(_cc_init_batched, B * n, stream, label, d_stack)
    flag = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
    it = 1
    while True:
        _launch(_cc_pull_batched, B * n, stream, t.d_shape, t.d_strides, t.d_periodic,
                t.d_offsets, t.d_noffsets, d_stack, label, flag, np.int64(it))
        if _read(flag, stream)[0] != it:
            break
        it += 1
    return _number_by_lowest_index(_read(label, stream))
