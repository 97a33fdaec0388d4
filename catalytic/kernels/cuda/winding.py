"""The clusters that wrap periodic axes, on the device, for about the cost of a labelling:
the CUDA counterpart of :mod:`catalytic.kernels.cpu.winding` (a different algorithm,
the same answers as ``backends._common.wrapping_labels``).

The lattice is labelled with the tracked periodic axes made open (the union-find of
:mod:`~catalytic.kernels.cuda.graph`, same stencil, mask and bonds): the *open labels*.
The steps that cross a tracked seam, the only ones that labelling left out, are then
gathered on the device as rows ``(lattice, open label of u, open label of v, seam
crossings per tracked axis)`` (:func:`_seam_steps`); only those rows, O(sites near a
seam), come back to the host, where a union-find with displacements over the open labels
they name joins the open clusters and finds the cycles of non-zero winding
(:func:`catalytic.kernels.cpu.seams._seam_union`, which the chunked labelling shares).
One more launch renumbers the open labels into the labels of the periodic lattice
(:func:`_relabel`) before they are copied back.

Every bond counts separately (parallel bonds of short periodic axes and self-loop bonds
included, closed bonds excluded), as in ``backends._common.wrapping_labels``: the steps
walked are those of the labelling's half stencil
(:func:`catalytic.kernels.cpu.components._stencil_halves`), which meets every bond
exactly once, read at its slot (:func:`catalytic.kernels.cuda.graph._half_slots`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import cuda

from catalytic.kernels.cpu.seams import _seam_union
from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda import graph as _g
from catalytic.kernels.cuda.neighbors import bond_open, inside

__all__ = ["wrapping_components", "wrapping_components_batched", "seam_rows_bound",
           "piece_windings"]

#: columns of a seam row before the seam crossings: lattice, open label of the
#: step's start, open label of its end
_HEAD = 3


# ---------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------


@cuda.jit
def _seam_steps(shape, strides, periodic, track, half, lo, hi, hslot, bits, words, label,
                axes, rows, count):
    """One thread per (lattice, site) of a (B, n) stack of open labels (0 on blocked
    sites): every step ``v -> u`` along an offset of ``half`` that crosses the seam of a
    tracked axis (``track[a]`` 1; ``periodic`` the lattice's own flags), ends on an open
    site and passes an open bond (``hslot``, ``bits``, ``words``) takes a row of
    ``rows`` (of the labels' dtype) by an atomic increment of ``count[0]``: ``(b,
    label[b, v], label[b, u], floor((x_a + o_a) / L_a) for each a of axes)``. A site
    whose every step stays inside the lattice without wrapping (:func:`inside`,
    ``lo``/``hi`` of ``half``) reads no memory and writes nothing. Rows past the end of
    ``rows`` are counted but not written."""
    t = cuda.grid(1)
    n = label.shape[1]
    if t < label.shape[0] * n:
        b = t // n
        v = t - b * n
        if not inside(v, strides, lo, hi) and label[b, v] != 0:
            lv = label[b, v]
            d = shape.shape[0]
            for k in range(half.shape[0]):
                j = 0
                rem = v
                cross = False
                ok = True
                for a in range(d):
                    c = rem // strides[a]
                    rem -= c * strides[a]
                    c += half[k, a]
                    if c < 0 or c >= shape[a]:
                        if periodic[a] == 0:
                            ok = False
                            break
                        if track[a] != 0:
                            cross = True
                        c %= shape[a]
                    j += c * strides[a]
                if not (ok and cross) or label[b, j] == 0:
                    continue
                if not bond_open(v, j, hslot[k], bits, words):
                    continue
                s = cuda.atomic.add(count, 0, 1)
                if s < rows.shape[0]:
                    rows[s, 0] = b
                    rows[s, 1] = lv
                    rows[s, 2] = label[b, j]
                    for q in range(axes.shape[0]):
                        a = axes[q]
                        c = (v // strides[a]) % shape[a] + half[k, a]
                        rows[s, _HEAD + q] = c // shape[a]


@cuda.jit(device=True)
def _below(sorted_, x):
    """How many entries of the ascending ``sorted_`` are smaller than ``x``."""
    lo = 0
    hi = sorted_.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@cuda.jit
def _relabel(label, base, gone, into, gone_before):
    """Open labels to the periodic lattice's, in place, one thread per (lattice, site):
    open label ``l`` of row ``b`` is node ``g = base[b] + l``; the nodes ``gone``
    (ascending) joined a set whose smallest node is ``into`` (the same index); the new
    label is the rank of ``g``'s smallest node among the nodes of row ``b`` that are
    not gone (``gone_before[b]``: the gone nodes of the earlier rows). Two binary
    searches per site over the gone nodes; 0 stays 0."""
    t = cuda.grid(1)
    n = label.shape[1]
    if t < label.shape[0] * n:
        b = t // n
        v = t - b * n
        lab = label[b, v]
        if lab != 0:
            g = base[b] + lab
            i = _below(gone, g)
            r = into[i] if i < gone.shape[0] and gone[i] == g else g
            label[b, v] = r - base[b] - (_below(gone, r) - gone_before[b])


# ---------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------


def _merge(rows, counts, p):
    """The seam rows of a stack joined on the host: ``(gone, into, gone_before, base,
    counts, found)``, the tables of :func:`_relabel`, the periodic lattices' cluster
    counts, and ``found[b][q]`` the sorted new labels of row ``b``'s clusters that wrap
    tracked axis ``q``. Nodes are the open labels the rows name, ``base[b] + label``
    across the stack (``counts`` the open labellings' counts); O(R log R) for R rows."""
    B = counts.shape[0]
    base = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(counts, out=base[1:])
    ga = base[rows[:, 0]] + rows[:, 1].astype(np.int64)
    gb = base[rows[:, 0]] + rows[:, 2].astype(np.int64)
    touched, inv = np.unique(np.concatenate([ga, gb]), return_inverse=True)
    R = rows.shape[0]
    root, wrap, _ = _seam_union(inv[:R].astype(np.int64), inv[R:].astype(np.int64),
                             np.ascontiguousarray(rows[:, _HEAD:], dtype=np.int64),
                             touched.shape[0])
    moved = root != np.arange(touched.shape[0])
    gone = np.ascontiguousarray(touched[moved])
    into = np.ascontiguousarray(touched[root[moved]])
    gone_upto = np.searchsorted(gone, base, side="right")  # gone nodes <= base[b]
    gone_before = np.ascontiguousarray(gone_upto[:B])
    new_counts = counts - np.diff(gone_upto)
    found = [[np.zeros(0, dtype=np.int64) for _ in range(p)] for _ in range(B)]
    hit = np.flatnonzero(~moved & wrap.any(axis=1))
    if hit.size:
        g = touched[hit]
        row = np.searchsorted(base, g, side="left") - 1
        new = g - base[row] - (np.searchsorted(gone, g) - gone_before[row])
        for b in np.unique(row):
            sel = row == b
            for q in range(p):
                found[b][q] = np.sort(new[sel & (wrap[hit, q] != 0)]).astype(np.int64)
    return gone, into, gone_before, base[:B], new_counts, found


def _tracked(shape, periodic, axes):
    """``axes`` as an int64 array, checked: distinct periodic axes of the lattice."""
    d = len(shape)
    out = []
    for a in axes:
        a = int(a)
        if not 0 <= a < d:
            raise ValueError(f"axis {a} is out of range for a {d}-D lattice")
        if not periodic[a]:
            raise ValueError(f"axis {a} is not periodic: only periodic axes wrap")
        if a in out:
            raise ValueError(f"axis {a} is named twice")
        out.append(a)
    if not out:
        raise ValueError("no axis to track: name at least one periodic axis")
    return np.array(out, dtype=np.int64)


def seam_rows_bound(shape, offsets, axes) -> int:
    """The most seam rows one lattice can give: per offset of the labelling's half
    stencil, the sites from which it crosses the seam of some axis of ``axes``
    (``n - n / prod(L_a) * prod(max(L_a - |o_a|, 0))``), before masks and bonds."""
    from catalytic.kernels.cpu.components import _stencil_halves

    shape = [int(x) for x in np.asarray(shape).reshape(-1)]
    d = len(shape)
    n = math.prod(shape)
    if n == 0:
        return 0
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    half, _ = _stencil_halves(offsets.tobytes(), d)
    axes = [int(a) for a in axes]
    rest = n // math.prod(shape[a] for a in axes)
    total = 0
    for o in half:
        stay = math.prod(max(shape[a] - abs(int(o[a])), 0) for a in axes)
        total += n - rest * stay
    return total


class _SeamTables(NamedTuple):
    """The seam kernel's small tables on the device, for one lattice and tracked axes."""

    cap: int  # seam rows one lattice can give (:func:`seam_rows_bound`)
    d_track: object  # uint8 (d,): 1 on the tracked axes
    d_half: object  # int64 (h, d): the labelling's half stencil
    d_lo: object  # int64 (d,): the half stencil's fast range (``graph._fast``)
    d_hi: object
    d_hslot: object  # int64 (h,): the bond slot of each half entry
    d_axes: object  # int64 (p,): the tracked axes, in the order asked


def _seam_tables(t, axes) -> _SeamTables:
    """The seam tables of lattice tables ``t`` and tracked ``axes``, copied to the device
    once per geometry, axes and CUDA context and kept beside the lattice tables (in
    ``graph``'s cache, so ``graph.clear_tables`` forgets them too)."""
    from catalytic.kernels.cpu.components import _stencil_halves

    key = ("seam", t.shape.tobytes(), t.periodic.tobytes(), t.offsets.tobytes(),
           axes.tobytes(), _g._context_key())
    with _g._table_lock:
        hit = _g._table_cache.get(key)
        if hit is not None:
            _g._table_cache.move_to_end(key)
            return hit
    half, _ = _stencil_halves(np.ascontiguousarray(t.offsets).tobytes(), t.shape.shape[0])
    half = np.ascontiguousarray(half, dtype=np.int64)
    _foff, lo, hi = _g._fast(t.shape, t.strides, half)
    track = np.zeros(t.shape.shape[0], dtype=np.uint8)
    track[axes] = 1
    dev = _transfer.to_device
    st = _SeamTables(seam_rows_bound(t.shape, t.offsets, axes), dev(track), dev(half),
                     dev(lo), dev(hi), dev(_g._half_slots(t.offsets, t.bslot, half)),
                     dev(axes))
    with _g._table_lock:
        _g._table_cache[key] = st
        while len(_g._table_cache) > _g.TABLES_CACHED:
            _g._table_cache.popitem(last=False)
    return st


def _open_labels_and_seam_rows(t, d_stack, axes, stream, bonds):
    """The labelling of a checked device stack (B, n) with the tracked ``axes`` made
    open, and the steps across their seams (:func:`_seam_steps`): ``(label, counts,
    rows)``, the device labels (B, n), the host counts (B,) and host seam rows (R, 3 + p)."""
    opened = t.periodic.copy()
    opened[axes] = 0
    t_open = _g._tables(t.shape, opened, t.offsets, stream)
    bd = _g._bonds(t, bonds, stream)
    B, n, p = d_stack.shape[0], t.n, axes.shape[0]
    # the counts and, after them, the seam step counter: one array, one read
    info = _transfer.to_device(np.zeros(B + 1, dtype=np.int64), stream=stream)
    label, _ = _g._components_run(t_open, d_stack, stream, bd, device=True, counts=info[:B])
    st = _seam_tables(t, axes)
    cap = B * st.cap
    if cap and n:
        rows = cuda.device_array((cap, _HEAD + p), dtype=label.dtype, stream=stream)
        d_bits, words, _ = bd
        _g._launch(_seam_steps, B * n, stream, t.d_shape, t.d_strides, t.d_periodic,
                   st.d_track, st.d_half, st.d_lo, st.d_hi, st.d_hslot, d_bits,
                   np.int64(words), label, st.d_axes, rows, info[B:])
    host = _g._read(info, stream)
    counts, R = host[:B], int(host[B])
    if R > cap:
        raise AssertionError(f"{R} seam steps, more than the bound {cap}")
    got = _g._read(rows[:R], stream) if R else np.zeros((0, _HEAD + p), label.dtype)
    return label, counts, got


def _run(shape, periodic, offsets, d_stack, axes, stream, bonds):
    """:func:`wrapping_components_batched` on a checked device stack (B, n) or (B, 0)."""
    t = _g._tables(shape, periodic, offsets, stream)
    B, n, p = d_stack.shape[0], t.n, axes.shape[0]
    label, counts, rows = _open_labels_and_seam_rows(t, d_stack, axes, stream, bonds)
    if rows.shape[0] == 0:
        return _g._read(label, stream), counts, [
            {int(a): np.zeros(0, dtype=np.int64) for a in axes} for _ in range(B)]
    gone, into, gone_before, base, counts, found = _merge(rows, counts, p)
    if gone.shape[0]:
        # the four tables in one copy: base and gone_before (B each), gone and into
        G = gone.shape[0]
        packed = _transfer.to_device(np.concatenate([base, gone_before, gone, into]),
                                     stream=stream)
        _g._launch(_relabel, B * n, stream, label, packed[:B], packed[2 * B:2 * B + G],
                   packed[2 * B + G:], packed[B:2 * B])
    return _g._read(label, stream), counts, [
        {int(a): found[b][q] for q, a in enumerate(axes)} for b in range(B)]


def piece_windings(shape, periodic, offsets, open_, axes, *, stream=0, bonds=None):
    """The open labelling of :func:`wrapping_components` and where each of its pieces
    lies in its periodic cluster: the windings that unwrap a cluster across the seams.

    Parameters
    ----------
    shape, periodic, offsets, open_, axes, stream, bonds
        As :func:`wrapping_components` takes them.

    Returns
    -------
    pieces : device array of int32 (int64 when n >= 2**31), (n,)
        The open labels (the tracked axes made open): pieces 1..m, 0 on blocked sites.
    m : int
        The number of pieces.
    root : ndarray of int64, (m + 1,)
        Each piece's cluster on the periodic lattice, named by its smallest piece
        (``root[0]`` = 0).
    pos : ndarray of int64, (m + 1, len(axes))
        Each piece's seam crossings relative to its root piece: a site of piece ``k``
        lies at ``x + pos[k] * L`` (along the tracked axes, of lengths ``L``) in the
        unwrapped copy of its cluster that holds the root piece at its own coordinates.
    wrap : ndarray of bool, (m + 1, len(axes))
        On root pieces, whether the cluster wraps each tracked axis (holds a cycle of
        non-zero winding along it); False elsewhere.

    Notes
    -----
    The labelling, one launch for the seam steps, and a union-find with displacements
    over the pieces those steps name on the host, as :func:`wrapping_components`; the
    positions are the union-find's own (see its notes for why they are consistent).
    """
    axes = _tracked(shape, periodic, axes)
    t = _g._tables(shape, periodic, offsets, stream)
    d_open = _g._device(open_, np.uint8, stream)
    n, p = t.n, axes.shape[0]
    label, counts, got = _open_labels_and_seam_rows(
        t, d_open.reshape(1, d_open.shape[0]), axes, stream, bonds)
    m, R = int(counts[0]), got.shape[0]
    root = np.arange(m + 1, dtype=np.int64)
    pos = np.zeros((m + 1, p), dtype=np.int64)
    wrap = np.zeros((m + 1, p), dtype=bool)
    if R:
        ga, gb = got[:, 1].astype(np.int64), got[:, 2].astype(np.int64)
        touched, inv = np.unique(np.concatenate([ga, gb]), return_inverse=True)
        r, w, q = _seam_union(inv[:R].astype(np.int64), inv[R:].astype(np.int64),
                              np.ascontiguousarray(got[:, _HEAD:], dtype=np.int64),
                              touched.shape[0])
        root[touched] = touched[r]
        pos[touched] = q
        wrap[touched] = (w != 0) & (r == np.arange(touched.shape[0]))[:, None]
    flat = label.reshape(n) if n else label.reshape(0)
    return flat, m, root, pos, wrap


def wrapping_components(shape, periodic, offsets, open_, axes, *, stream=0, bonds=None):
    """Label the components of the open sites and find the ones that wrap periodic axes.

    Parameters
    ----------
    shape, periodic, offsets, open_
        The lattice, as :func:`catalytic.kernels.cuda.graph.connected_components` takes
        it (``open_`` a uint8 host or device array, length 0: every site open).
    axes : sequence of int
        Distinct periodic axes whose wrapping is asked (at least one).
    stream : numba.cuda stream, optional
        Stream for every copy and launch (0: the default stream).
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` may be a device array): only open bonds join
        sites and carry windings. None: every bond open.

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (n,)
        The labels :func:`~catalytic.kernels.cuda.graph.connected_components` gives:
        1..count in order of each component's lowest flat index, 0 on blocked sites.
    count : int
    wraps : dict
        ``{axis: sorted int64 labels}`` of the components that wrap each of ``axes``:
        that hold a cycle whose displacement along the axis is a non-zero multiple of
        its length (``backends._common.wrapping_labels``).

    Raises
    ------
    ValueError
        An axis that is out of range, not periodic or named twice; no axis.

    Notes
    -----
    Why the open labelling and the seam steps are enough. Give every step ``u -> v`` its
    seam crossings ``t`` along the tracked axes; a cluster wraps along axis ``a`` iff
    some closed walk has a non-zero ``a`` entry in the sum of its ``t``. The steps with
    ``t = 0`` are exactly those the labelling with the tracked axes open keeps, so
    inside one open cluster every path sums to 0 and every site can sit at position 0.
    Contract each open cluster to a node: a closed walk of the lattice becomes a closed
    walk of the seam steps with the same sum, and a closed walk of the seam steps lifts
    back to one of the lattice (joining consecutive steps inside each open cluster by
    zero-sum paths). So the clusters and their windings are those of the small graph of
    open clusters and seam steps, which the union-find with displacements decides
    exactly: positions agree with the tree of its unions, and each other step inside a
    set closes that tree's fundamental cycle, whose sum is the step's disagreement; the
    fundamental cycles generate every cycle, so a set wraps along ``a`` iff some
    disagreement is non-zero there. Its smallest open label holds the set's lowest site
    (open labels are numbered by lowest site), so ranking sets by it numbers them as the
    periodic labelling does.

    Cost: the union-find labelling (5 + 2 log_256(n) launches), one launch over the
    sites for the seam steps (a site away from every seam and edge does d divisions
    and writes nothing), one renumbering launch (two binary searches per site over the
    open clusters that merged), and on the host O(R log R) for the R seam steps, which
    are all that comes back besides the labels. Device memory: the labelling's 16 bytes
    per site plus ``4 (3 + p)`` bytes (8 past 2**31 sites) per possible seam step
    (:func:`seam_rows_bound`).

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([[-1], [1]])
    >>> wrapping_components((4,), np.ones(1, np.uint8), off, np.zeros(0, np.uint8),
    ...                     [0])  # doctest: +SKIP
    (array([1, 1, 1, 1], dtype=int32), 1, {0: array([1])})
    """
    _tracked(shape, periodic, axes)
    d_open = _g._device(open_, np.uint8, stream)
    labels, counts, wraps = wrapping_components_batched(
        shape, periodic, offsets, d_open.reshape(1, d_open.shape[0]), axes, stream=stream,
        bonds=bonds)
    return labels[0], int(counts[0]), wraps[0]


def wrapping_components_batched(shape, periodic, offsets, open_stack, axes, *, stream=0,
                                bonds=None):
    """:func:`wrapping_components` of every row of a (B, n) stack of masks (or (B, 0):
    all open), all in the same launches, as
    :func:`~catalytic.kernels.cuda.graph.connected_components_batched` labels them.

    Returns
    -------
    labels : ndarray of int32 (int64 when n >= 2**31), (B, n)
    counts : ndarray of int64, (B,)
    wraps : list of dict
        One ``{axis: sorted int64 labels}`` per row.

    Raises
    ------
    ValueError
        As :func:`wrapping_components`, and ``open_stack`` not 2-D with n or 0 columns.
    """
    axes = _tracked(shape, periodic, axes)
    if len(open_stack.shape) != 2:
        raise ValueError(f"open_stack must be 2-D (B, n), got shape {open_stack.shape}")
    t = _g._tables(shape, periodic, offsets, stream)
    d_stack = _g._device(open_stack, np.uint8, stream)
    B, n = d_stack.shape[0], t.n
    if d_stack.shape[1] not in (0, n):
        raise ValueError(f"open_stack rows have {d_stack.shape[1]} entries, lattice {n} sites")
    if B * n == 0:
        return (np.zeros((B, n), dtype=np.int32), np.zeros(B, dtype=np.int64),
                [{int(a): np.zeros(0, dtype=np.int64) for a in axes} for _ in range(B)])
    return _run(shape, periodic, offsets, d_stack, axes, stream, bonds)
