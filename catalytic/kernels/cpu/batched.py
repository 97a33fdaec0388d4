"""Kernels over stacks of same-geometry lattices (the masks of an ensemble), the lattices
shared out over Numba's threads: the CPU side of the batched twins
(``catalogue.BATCHED_PREFIX``). The labelling of a stack is
:func:`catalytic.kernels.cpu.components.connected_components_batched`; here are the kernels
that answer less than a labelling, and the hop distances.

Each lattice of a stack is handled by one serial kernel call on one thread, with
scratch per thread; the lattices are handed out to the threads one at a time
(``numba.set_parallel_chunksize(1)``), so a thread that the operating system deschedules
holds up one lattice, not a fixed share of the stack. Every host function works in
kernel calls of about ``_budget._BUDGET`` units, so signal handlers run between them
(see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`). Results never depend on the
thread count or the budget.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange
from numba.core import types
from numba.extending import intrinsic

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _NO, _YES, _ZERO, _frozen
from catalytic.kernels.cpu._padded import (
    PORTAL,
    UNVISITED,
    WALL,
    _fill_row,
    _to_padded,
    _unpad_row,
    make_plan,
    plan_bonds,
)
from catalytic.kernels.cpu.bfs import _bfs_queue
from catalytic.kernels.cpu.components import (
    _face_labels,
    _find,
    _runs_union_rows,
    _runs_whole,
    _runs_write_row,
    _sites_whole,
    _stencil_halves,
    batch_fits,
)

__all__ = ["percolates_batched", "spans_fits", "bfs_distance_batched",
           "connected_components_rows", "face_spanning_rows"]


def _stack_of(open_stack, n) -> np.ndarray:
    """``open_stack`` as C-contiguous uint8 (B, n); (B, 0) means all open."""
    stack = np.asarray(open_stack)
    if stack.ndim != 2 or stack.shape[1] not in (0, n):
        raise ValueError(f"open_stack must be (B, {n}) or (B, 0), got shape {stack.shape}")
    if stack.shape[1] == 0:
        return _frozen(np.ones((stack.shape[0], n), dtype=np.uint8))
    return _frozen(np.ascontiguousarray(stack, dtype=np.uint8))


def _launch(kernel, B, per_row, *args):
    """``kernel(lo, hi, *args)`` over rows [0, B) in calls of about ``_budget._BUDGET``
    units (``per_row`` each, at least one row per thread per call), the rows handed out
    one at a time."""
    T = numba.get_num_threads()
    step = max(T, _budget._BUDGET // max(1, per_row))
    prev = numba.set_parallel_chunksize(1)
    try:
        for lo in range(0, B, step):
            kernel(lo, min(B, lo + step), *args)
    finally:
        numba.set_parallel_chunksize(prev)


# -- labels written into arrays of their own -----------------------------------------------


@intrinsic
def _pointer(typingctx, address, like):
    """The int64 ``address`` as a pointer to ``like``'s dtype (for ``numba.carray``)."""
    if not isinstance(address, types.Integer) or not isinstance(like, types.Array):
        return None
    sig = types.CPointer(like.dtype)(address, like)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


def _addresses(arrays) -> np.ndarray:
    """Data addresses of C-contiguous arrays, which must outlive the kernel call."""
    return np.array([a.__array_interface__["data"][0] for a in arrays], dtype=np.int64)


@njit(cache=True, nogil=True, parallel=True)
def _runs_rows(lo, hi, addrs, like, n, sizes, counts, stack, row_ptr, rs, re, lab, half,
               shape, periodic):
    """``components._runs_whole`` for rows [lo, hi), row b's labels into the n int32 at
    ``addrs[b]``, scratch per thread."""
    for b in prange(lo, hi):
        t = numba.get_thread_id()
        out = numba.carray(_pointer(addrs[b], like), n)
        counts[b] = _runs_whole(out, sizes[b], stack[b], row_ptr[t], rs[t], re[t], lab[t],
                                half, shape, periodic)


@njit(cache=True, nogil=True, parallel=True)
def _sites_rows(lo, hi, addrs, like, n, sizes, counts, stack, half, shape, periodic):
    """``components._sites_whole`` for rows [lo, hi), row b's labels at ``addrs[b]``."""
    for b in prange(lo, hi):
        out = numba.carray(_pointer(addrs[b], like), n)
        counts[b] = _sites_whole(out, sizes[b], stack[b], half, shape, periodic)


def connected_components_rows(shape, periodic, offsets, open_stack):
    """``components.connected_components_batched`` with every lattice's labels in an array of
    its own, written there by the kernel (no (B, n) block to copy out of).

    Parameters
    ----------
    shape, periodic, offsets
        The common lattice, as in ``components.connected_components``.
    open_stack : ndarray of uint8, (B, n) or (B, 0)
        Row b is lattice b's ``open_``; (B, 0) means every site of every lattice is open.

    Returns
    -------
    labels : list of B int32 arrays, (n,)
        ``labels[b]`` equals ``connected_components`` of lattice b, bit for bit.
    counts : ndarray of int64, (B,)
    sizes : list of B int64 arrays
        ``sizes[b][c]`` is the sites labelled ``c + 1`` in lattice b.

    Raises
    ------
    ValueError
        ``open_stack`` not (B, n) or (B, 0), or a lattice too large for one serial
        labelling (``components.batch_fits``).

    Notes
    -----
    The kernels of ``components.connected_components_batched``, writing through each row's
    own data pointer; the arrays are allocated here and held until the call returns.
    O(n + R k alpha) per lattice for R runs.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> st = np.array([[1, 1, 1], [1, 0, 1]], np.uint8)
    >>> labels, counts, sizes = connected_components_rows((3,), np.zeros(1, np.uint8), off, st)
    >>> [a.tolist() for a in labels], counts.tolist(), [s.tolist() for s in sizes]
    ([[1, 1, 1], [1, 0, 2]], [1, 2], [[3], [1, 1]])
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    n = math.prod(shape.tolist())
    stack = _stack_of(open_stack, n)
    B = stack.shape[0]
    if not batch_fits(shape, offsets):
        raise ValueError(f"a lattice of {n} sites is too large for one serial labelling; "
                         "label it with connected_components")
    labels = [np.empty(n, dtype=np.int32) for _ in range(B)]
    counts = np.zeros(B, dtype=np.int64)
    if B == 0 or n == 0:
        return labels, counts, [np.zeros(0, dtype=np.int64) for _ in range(B)]
    half, runs = _stencil_halves(offsets.tobytes(), d)
    L = int(shape[-1])
    runs = runs or L == 1
    nrow = n // L
    bound = nrow * ((L + 1) // 2) + 1 if runs else n + 1
    sizes = np.empty((B, bound), dtype=np.int64)
    addrs = _addresses(labels)
    like = labels[0]
    per_row = n * (4 + 4 * half.shape[0])
    if runs:
        T = numba.get_num_threads()  # scratch rows: any thread of the team may take a row
        row_ptr = np.empty((T, nrow + 1), dtype=np.int64)
        rs = np.empty((T, bound), dtype=np.int32)
        re = np.empty((T, bound), dtype=np.int32)
        lab = np.empty((T, bound + 1), dtype=np.int32)
        _launch(_runs_rows, B, per_row, addrs, like, np.int64(n), sizes, counts, stack,
                row_ptr, rs, re, lab, half, shape, periodic)
    else:
        _launch(_sites_rows, B, per_row, addrs, like, np.int64(n), sizes, counts, stack,
                half, shape, periodic)
    return labels, counts, [sizes[b, 1:counts[b] + 1].copy() for b in range(B)]


@njit(cache=True, nogil=True, parallel=True)
def _faces_rows(addrs, like, n, counts, outer, L, inner, out, found):
    """``components._faces_batched`` over labellings held at ``addrs`` (n int32 each)."""
    for b in prange(addrs.shape[0]):
        row = numba.carray(_pointer(addrs[b], like), n)
        found[b] = _face_labels(row, counts[b], outer, L, inner, out[b])


def face_spanning_rows(labels, counts, shape, axis) -> list:
    """``components.face_spanning_batched`` for labellings given as a list of arrays (int32,
    C-contiguous, n each): sorted int64 labels of the clusters touching both faces of
    ``axis``, per row.

    Examples
    --------
    >>> import numpy as np
    >>> lab = [np.array([1, 0, 1, 1], np.int32), np.array([1, 2, 0, 2], np.int32)]
    >>> [a.tolist() for a in face_spanning_rows(lab, np.array([1, 2]), (2, 2), 0)]
    [[1], [2]]
    """
    shape = [int(x) for x in shape]
    n = math.prod(shape)
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    B = len(labels)
    out = np.empty((B, outer * inner), dtype=np.int64)
    found = np.zeros(B, dtype=np.int64)
    for a in labels:
        if a.dtype != np.int32 or a.size != n or not a.flags.c_contiguous:
            raise ValueError(f"labels must be C-contiguous int32 arrays of {n} entries")
    if B and outer * inner:
        _faces_rows(_addresses(labels), labels[0], np.int64(n),
                    np.ascontiguousarray(counts, dtype=np.int64), outer, shape[axis], inner,
                    out, found)
    return [out[b, :found[b]].copy() for b in range(B)]


# -- percolation without labels ----------------------------------------------------------


@njit(cache=True, nogil=True)
def _spans_whole(open_, row_ptr, rs, re, rp, mark, half, shape, periodic, axis):
    """Whether one cluster of one lattice touches both faces of open ``axis``: the run
    union-find of ``components._runs_whole`` (same scans and unions), then the roots of the
    runs on face 0 are marked and the runs on the last face looked up. No labels, no
    sizes. ``rs``/``re`` need one slot more than the runs (the scan spills into it)."""
    d = shape.shape[0]
    nrow = row_ptr.shape[0] - 1
    L = shape[d - 1]
    row_ptr[0] = 0
    for row in range(nrow):
        row_ptr[row + 1] = row_ptr[row] + _runs_write_row(open_[row * L:(row + 1) * L], rs,
                                                          re, row_ptr[row], _YES)
    n_runs = row_ptr[nrow]
    if n_runs == 0:
        return False
    p = rp[:n_runs]
    for a in range(n_runs):
        p[a] = a
    _runs_union_rows(p, rs, re, row_ptr, _ZERO, nrow, _ZERO, nrow, _NO, half, shape,
                     periodic)
    mark[:n_runs] = 0
    if axis == d - 1:
        for row in range(nrow):
            a0 = row_ptr[row]
            if a0 < row_ptr[row + 1] and rs[a0] == 0:
                mark[_find(p, a0)] = 1
        for row in range(nrow):
            a1 = row_ptr[row + 1] - 1
            if a1 >= row_ptr[row] and re[a1] == L and mark[_find(p, a1)] != 0:
                return True
        return False
    # rows are the C-order coordinates over axes 0..d-2: face rows of ``axis`` come in
    # ``outer`` blocks of ``inner`` consecutive rows
    inner = 1
    for a in range(axis + 1, d - 1):
        inner *= shape[a]
    La = shape[axis]
    outer = nrow // (La * inner)
    for o in range(outer):
        base = o * La * inner
        for a in range(row_ptr[base], row_ptr[base + inner]):
            mark[_find(p, a)] = 1
    for o in range(outer):
        base = o * La * inner + (La - 1) * inner
        for a in range(row_ptr[base], row_ptr[base + inner]):
            if mark[_find(p, a)] != 0:
                return True
    return False


@njit(cache=True, nogil=True, parallel=True)
def _spans_rows(lo, hi, out, stack, row_ptr, rs, re, rp, mark, half, shape, periodic,
                axis):
    """:func:`_spans_whole` for rows [lo, hi) of the stack, scratch per thread."""
    for b in prange(lo, hi):
        t = numba.get_thread_id()
        out[b] = _spans_whole(stack[b], row_ptr[t], rs[t], re[t], rp[t], mark[t], half,
                              shape, periodic, axis)


def spans_fits(shape, periodic, offsets, axis) -> bool:
    """Whether :func:`percolates_batched` answers for this geometry: ``axis`` open, the
    stencil holding the unit step along the last axis (or that axis of length 1), and
    one lattice within one serial labelling (``components.batch_fits``)."""
    d = len(shape)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    _, runs = _stencil_halves(offsets.tobytes(), d)
    return (not periodic[axis] and (runs or int(shape[-1]) == 1)
            and batch_fits(shape, offsets))


def percolates_batched(shape, periodic, offsets, open_stack, axis) -> np.ndarray:
    """Whether one cluster touches both faces of an open ``axis``, for every lattice of
    a stack: the answer of ``connected_components`` followed by the face check, without
    the labels.

    Parameters
    ----------
    shape, periodic, offsets
        The common lattice, as in ``components.connected_components``.
    open_stack : ndarray of uint8, (B, n) or (B, 0)
        Row b is lattice b's ``open_``; (B, 0) means every site of every lattice is open.
    axis : int
        An open axis, in ``[0, d)``.

    Returns
    -------
    ndarray of bool, (B,)

    Raises
    ------
    ValueError
        ``open_stack`` not (B, n) or (B, 0), or a geometry :func:`spans_fits` refuses
        (a periodic ``axis`` needs the winding check on labels).

    Notes
    -----
    Per lattice: the run scan and run union-find of ``components._runs_whole``, then the roots
    of the runs on the first face are marked and the runs on the last face looked up
    (path halving). The labels, the relabelling and the sizes are never written. O(n +
    R k alpha) per lattice for R runs; scratch about 2.5 n bytes per thread.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    >>> st = np.array([[1, 0, 1, 0], [1, 0, 0, 1]], np.uint8)  # two 2 x 2 lattices
    >>> percolates_batched((2, 2), np.zeros(2, np.uint8), off, st, 0).tolist()
    [True, False]
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    n = math.prod(shape.tolist())
    axis = int(axis)
    if not 0 <= axis < d:
        raise ValueError(f"axis {axis} out of range for {d} dimensions")
    if not spans_fits(shape, periodic, offsets, axis):
        raise ValueError(f"percolates_batched needs an open axis, a stencil with the unit "
                         f"last-axis step and lattices of one serial labelling; got axis "
                         f"{axis} of shape {tuple(shape.tolist())}")
    stack = _stack_of(open_stack, n)
    B = stack.shape[0]
    out = np.zeros(B, dtype=np.bool_)
    if B == 0 or n == 0:
        return out
    half, _ = _stencil_halves(offsets.tobytes(), d)
    L = int(shape[-1])
    nrow = n // L
    bound = nrow * ((L + 1) // 2) + 2
    T = numba.get_num_threads()  # scratch rows: any thread of the team may take a lattice
    row_ptr = np.empty((T, nrow + 1), dtype=np.int64)
    rs = np.empty((T, bound), dtype=np.int32)
    re = np.empty((T, bound), dtype=np.int32)
    rp = np.empty((T, bound), dtype=np.int32)
    mark = np.empty((T, bound), dtype=np.uint8)
    _launch(_spans_rows, B, n * (4 + 4 * half.shape[0]), out, stack, row_ptr, rs, re, rp,
            mark, half, shape, periodic, np.int64(axis))
    return out


# -- hop distances -----------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _bfs_one(out, open_, psrc, work, queue, st, vals, cls, foff, offs, r, shape, pstrides,
             periodic, mode, pshape, n_prow, bits, nw):
    """Hop distances of one lattice into ``out`` (n int64): the padded cell classes of
    ``_padded._fill_padded`` row by row, the queue BFS of ``bfs._bfs_queue`` from the
    padded sources ``psrc`` to the end, then the interior copied out with unreachable
    and blocked sites as -1 (``_padded._unpad``). ``bits``/``nw``: the bond words the
    lattices share (:class:`~catalytic.kernels.cpu._padded.BondCells`; length 0: all
    open)."""
    PL = pshape[pshape.shape[0] - 1]
    for prow in range(n_prow):
        _fill_row(work, prow, _ZERO, PL, vals, open_, cls[0], cls[1], cls[2], shape,
                  periodic, r, pshape)
    m = psrc.shape[0]
    for j in range(m):
        work[psrc[j]] = 0
        queue[j] = psrc[j]
    st[0] = 0
    st[1] = m
    st[2] = m
    st[3] = 1
    st[4] = 0
    big = np.int64(1) << 62
    while st[0] < st[1]:
        _bfs_queue(work, queue, st, np.int64(-1), big, foff, offs, r, shape, pstrides,
                   periodic, mode, bits, nw)
    L = shape[shape.shape[0] - 1]
    nrow = out.shape[0] // L
    for row in range(nrow):
        _unpad_row(work, out, row, _ZERO, L, shape, r, pshape, _YES)


@njit(cache=True, nogil=True, parallel=True)
def _bfs_rows(lo, hi, out, stack, psrc, work, queue, st, vals, cls, foff, offs, r, shape,
              pstrides, periodic, mode, pshape, n_prow, bits, nw):
    """:func:`_bfs_one` for rows [lo, hi) of the stack (row b from ``psrc[b]``), scratch
    per thread."""
    for b in prange(lo, hi):
        t = numba.get_thread_id()
        _bfs_one(out[b], stack[b], psrc[b], work[t], queue[t], st[t], vals, cls, foff, offs,
                 r, shape, pstrides, periodic, mode, pshape, n_prow, bits, nw)


def bfs_distance_batched(shape, periodic, offsets, open_stack, dedupe, sources, *, bonds=None,
                         cache=None) -> np.ndarray:
    """Hop distances on a stack of same-shape lattices, the lattices shared out over the
    threads (twin: :func:`catalytic.kernels.cuda.graph.bfs_distance_batched`).

    Parameters
    ----------
    shape, periodic, offsets, dedupe
        The common lattice, as in ``bfs.bfs_distance`` (``dedupe`` is unused).
    open_stack : ndarray of uint8, (B, n) or (B, 0)
        Row b is lattice b's ``open_``; (B, 0) means every site of every lattice is open.
    sources : array_like of int, (B,) or (B, m)
        The open source site of each lattice (or its ``m`` sources, distance 0).
    bonds, cache
        The bonds every lattice of the stack shares, as in ``bfs.bfs_distance`` (hops
        over the open bonds).

    Returns
    -------
    ndarray of int64, (B, n)
        Row b equals ``bfs.bfs_distance`` of lattice b from its sources: hops from the
        nearest source, -1 for unreachable and blocked sites.

    Raises
    ------
    ValueError
        ``open_stack`` not (B, n) or (B, 0), or ``sources`` without B rows.
    IndexError
        A source outside ``[0, n)`` or blocked in its lattice.

    Notes
    -----
    Per lattice, on one thread: the padded layout of ``bfs.bfs_distance`` (same
    :class:`~catalytic.kernels.cpu._padded.Plan`), its queue BFS, and the copy out, in one
    kernel call instead of a host function's dozen NumPy steps; the lattices are shared
    out over the threads. O(n k) per lattice; scratch per thread: the padded work array
    and a queue of n + 2 entries (int32 below 2**31 padded cells).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> st = np.array([[1, 1, 1], [1, 0, 1]], np.uint8)
    >>> bfs_distance_batched((3,), np.zeros(1, np.uint8), off, st, False, [0, 0])
    array([[ 0,  1,  2],
           [ 0, -1, -1]])
    """
    g = make_plan(shape, periodic, offsets, np.zeros(0, dtype=np.uint8))
    n = g.n
    stack = _stack_of(open_stack, n)
    B = stack.shape[0]
    src = np.asarray(sources, dtype=np.int64)
    if src.ndim == 1:
        src = src.reshape(-1, 1)
    if src.ndim != 2 or src.shape[0] != B:
        raise ValueError(f"sources must be (B,) or (B, m) with B = {B}, got shape "
                         f"{np.shape(sources)}")
    bad = (src < 0) | (src >= n)
    if bad.any():
        raise IndexError(f"source {int(src[bad][0])} out of range [0, {n})")
    if B and src.shape[1]:
        blocked = stack[np.arange(B)[:, None], src] == 0
        if blocked.any():
            b, j = np.argwhere(blocked)[0]
            raise IndexError(f"source {int(src[b, j])} is a blocked site in row {int(b)}")
    out = np.empty((B, n), dtype=np.int64)
    if B == 0 or n == 0:
        return out
    # a source given twice is queued twice: its second expansion claims nothing
    psrc = _to_padded(src.reshape(-1), g).reshape(src.shape)
    psrc = np.ascontiguousarray(psrc, dtype=g.itype)
    T = numba.get_num_threads()  # scratch rows: any thread of the team may take a lattice
    work = np.empty((T, g.psize), dtype=g.itype)
    queue = np.empty((T, n + psrc.shape[1] + 2), dtype=g.itype)
    st = np.empty((T, 5), dtype=np.int64)
    vals = _frozen(np.empty(0, dtype=g.itype))
    cls = np.array([UNVISITED, WALL, PORTAL], dtype=g.itype)
    K = max(g.offs.shape[0], 1)
    n_prow = g.psize // int(g.pshape[-1])
    cells = plan_bonds(g, offsets, bonds, cache)
    _launch(_bfs_rows, B, g.psize + n * K, out, stack, psrc, work, queue, st, vals, cls,
            g.foff, g.offs, g.r, g.shape, g.pstrides, g.periodic, np.int64(g.mode),
            g.pshape, np.int64(n_prow), cells.bits, np.int64(cells.nw))
    return out
