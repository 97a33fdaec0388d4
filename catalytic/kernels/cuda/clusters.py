"""Per-cluster statistics on the device: the CUDA twins of
:mod:`catalytic.kernels.cpu.clusters`, whose contracts they keep; the floating-point
sums are made by atomic additions in no fixed order, so they agree with the CPU's to
rounding.

* :func:`moments`: three launches of one thread a site: sizes, first sites, coordinate
  extremes and the field's sum and extremes (NaN set aside); where the extremes are
  (the lowest site holding each, or the lowest NaN); the moments of the unwrapped
  coordinates about each cluster's first site.
* :func:`unwrap` (periodic axes): the labels labelled again with the periodic axes
  open and only bonds between equal labels
  (:func:`catalytic.kernels.cuda.winding.piece_windings`); the seam steps place each
  piece in its cluster, so a site's unwrapped coordinates are its own plus its piece's
  offset, which :func:`moments` reads.
* :func:`arcs` (periodic axes): a bit per label and coordinate, then one thread per
  label and axis finds the largest gap round the circle.
* :func:`contacts`, the twin of :func:`catalytic.kernels.cpu.clusters.contacts` (the
  region graph): one thread a site counts, then writes, the usable bonds along the
  forward offsets that join it to another label, each as a code of the two labels at a
  slot taken by an atomic counter; the host counts the codes.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from catalytic.kernels.cpu.neighbors import c_strides
from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda.graph import THREADS, _blocks, _device
from catalytic.kernels.cuda.neighbors import bond_open

__all__ = ["moments", "arcs", "unwrap", "contacts"]


@cuda.jit
def _sums(labels, strides, field, sizes, first, lo, hi, fsum, fmin, fmax, nan_at):
    i = cuda.grid(1)
    if i >= labels.shape[0]:
        return
    lab = labels[i]
    if lab == 0:
        return
    cuda.atomic.add(sizes, lab, 1)
    cuda.atomic.min(first, lab, i)
    rem = i
    for a in range(strides.shape[0]):
        c = rem // strides[a]
        rem -= c * strides[a]
        cuda.atomic.min(lo, (lab, a), c)
        cuda.atomic.max(hi, (lab, a), c)
    if field.shape[0] != 0:
        v = field[i]
        if math.isnan(v):
            cuda.atomic.min(nan_at, lab, i)
        else:
            cuda.atomic.add(fsum, lab, v)
            cuda.atomic.min(fmin, lab, v)
            cuda.atomic.max(fmax, lab, v)


@cuda.jit
def _where(labels, field, fmin, fmax, amin, amax):
    i = cuda.grid(1)
    if i >= labels.shape[0]:
        return
    lab = labels[i]
    if lab == 0:
        return
    v = field[i]
    if v == fmin[lab]:
        cuda.atomic.min(amin, lab, i)
    if v == fmax[lab]:
        cuda.atomic.min(amax, lab, i)


@cuda.jit
def _moments(labels, strides, first, pieces, shift, m1, m2):
    """Site ``i``: its unwrapped coordinates about its label's first site, added to the
    first and second moments. ``pieces`` (empty: no windings) gives each site's piece,
    and ``shift[piece]`` the piece's offset (coordinates) in its unwrapped cluster."""
    i = cuda.grid(1)
    if i >= labels.shape[0]:
        return
    lab = labels[i]
    if lab == 0:
        return
    f = first[lab]
    if f == i:
        return
    d = strides.shape[0]
    wound = pieces.shape[0] != 0
    pi = pieces[i] if wound else 0
    pf = pieces[f] if wound else 0
    rem = i
    remf = f
    for a in range(d):
        c = rem // strides[a]
        rem -= c * strides[a]
        cf = remf // strides[a]
        remf -= cf * strides[a]
        xa = float(c - cf)
        if wound:
            xa += float(shift[pi, a] - shift[pf, a])
        cuda.atomic.add(m1, (lab, a), xa)
        rem_b = rem
        remf_b = remf
        for b in range(a + 1, d):
            cb = rem_b // strides[b]
            rem_b -= cb * strides[b]
            cfb = remf_b // strides[b]
            remf_b -= cfb * strides[b]
            xb = float(cb - cfb)
            if wound:
                xb += float(shift[pi, b] - shift[pf, b])
            cuda.atomic.add(m2, (lab, a, b), xa * xb)
        cuda.atomic.add(m2, (lab, a, a), xa * xa)


@cuda.jit
def _piece_labels(labels, pieces, out):
    """``out[piece] = label`` for every labelled site (a piece holds one label)."""
    i = cuda.grid(1)
    if i < labels.shape[0] and labels[i] != 0:
        out[pieces[i]] = labels[i]


@cuda.jit
def _occupy(labels, strides, shape, axes, bitmap):
    """Mark, per tracked axis ``q``, the coordinates each label occupies along
    ``axes[q]``: bit ``x`` of ``bitmap[q, label]``."""
    i = cuda.grid(1)
    if i >= labels.shape[0]:
        return
    lab = labels[i]
    if lab == 0:
        return
    for q in range(axes.shape[0]):
        ax = axes[q]
        x = (i // strides[ax]) % shape[ax]
        cuda.atomic.or_(bitmap, (q, lab, x >> 5), np.uint32(1) << np.uint32(x & 31))


@cuda.jit
def _gaps(bitmap, shape, axes, lo, hi):
    """Thread (q, label): the largest gap round the circle between the coordinates the
    label occupies along ``axes[q]`` (the wrap-round gap wins ties, as on the CPU), and
    the arc ``[lo, hi)`` that leaves it out; nothing for a label with no site."""
    t = cuda.grid(1)
    k = bitmap.shape[1]
    if t >= axes.shape[0] * k:
        return
    q = t // k
    lab = t - q * k
    ax = axes[q]
    length = shape[ax]
    first = -1
    prev = -1
    best = 0
    at = 0
    for x in range(length):
        if (bitmap[q, lab, x >> 5] >> np.uint32(x & 31)) & np.uint32(1):
            if first < 0:
                first = x
            elif x - prev > best:
                best = x - prev
                at = x
            prev = x
    if first < 0:
        return
    wrap_gap = first + length - prev
    if wrap_gap >= best:
        best = wrap_gap
        at = first
    lo[lab, ax] = at
    hi[lab, ax] = at + length - best + 1


def arcs(labels, count, shape, periodic, *, stream=0):
    """``(lo, hi)`` int64 (count + 1, d), as :func:`catalytic.kernels.cpu.clusters.arcs`
    gives them: the shortest arc of each periodic axis that holds every coordinate each
    label occupies (0 on open axes). A bit per label and coordinate of each periodic
    axis on the device, then one thread per label and axis."""
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    d = shape.shape[0]
    axes = np.flatnonzero(np.asarray(periodic)).astype(np.int64)
    lo = np.zeros((count + 1, d), np.int64)
    hi = np.zeros((count + 1, d), np.int64)
    n = labels.shape[0]
    if axes.size == 0 or n == 0:
        return lo, hi
    dev = _transfer.to_device
    words = int(-(-shape[axes].max() // 32))
    bitmap = dev(np.zeros((axes.size, count + 1, words), np.uint32), stream=stream)
    d_shape, d_axes = dev(shape, stream=stream), dev(axes, stream=stream)
    _occupy[_blocks(n), THREADS, stream](_device(labels, np.int64, stream),
                                         dev(c_strides(shape), stream=stream), d_shape,
                                         d_axes, bitmap)
    d_lo, d_hi = dev(lo, stream=stream), dev(hi, stream=stream)
    _gaps[_blocks(axes.size * (count + 1)), THREADS, stream](bitmap, d_shape, d_axes, d_lo,
                                                              d_hi)
    lo, hi = _transfer.to_host(d_lo, stream=stream), _transfer.to_host(d_hi, stream=stream)
    if stream != 0:
        stream.synchronize()
    return lo, hi


def unwrap(labels, count, shape, periodic, offsets, bonds, *, stream=0):
    """Where each site of each label lies once the label is unwrapped across the seams,
    as device tables for :func:`moments`, and the axes each label wraps.

    ``labels`` (int64, n) must give each label one cluster of the lattice (its sites
    joined by usable bonds); ``bonds`` the ``bond_args()`` tuple whose bits join only
    sites of one label (``None``: every bond usable). Returns ``(pieces, shift, wraps)``:
    the device pieces of :func:`catalytic.kernels.cuda.winding.piece_windings`, per piece
    its offset in coordinates (int64 (m + 1, d), on the device), and ``wraps`` bool
    (count, d).

    Raises
    ------
    ValueError
        A label whose sites form more than one cluster.
    """
    from catalytic.kernels.cuda import winding

    shape = np.ascontiguousarray(shape, dtype=np.int64)
    d = shape.shape[0]
    axes = np.flatnonzero(np.asarray(periodic)).astype(np.int64)
    open_ = (np.asarray(labels) != 0).view(np.uint8)
    pieces, m, root, pos, wrap = winding.piece_windings(shape, periodic, offsets, open_, axes,
                                                        stream=stream, bonds=bonds)
    d_labels = _device(labels, np.int64, stream)
    d_owner = _transfer.to_device(np.zeros(m + 1, np.int64), stream=stream)
    n = labels.shape[0]
    if n:
        _piece_labels[_blocks(n), THREADS, stream](d_labels, pieces, d_owner)
    owner = _transfer.to_host(d_owner, stream=stream)
    if stream != 0:
        stream.synchronize()
    roots = np.flatnonzero(root == np.arange(m + 1))[1:]
    seen = np.bincount(owner[roots], minlength=count + 1)
    if (seen[1:] > 1).any():
        bad = int(np.flatnonzero(seen[1:] > 1)[0]) + 1
        raise ValueError(f"label {bad} is not one cluster: its sites are not all joined "
                         "by usable bonds of this lattice")
    shift = np.zeros((m + 1, d), np.int64)
    shift[:, axes] = pos * shape[axes]
    wraps = np.zeros((count + 1, d), bool)
    wraps[owner[roots][:, None], axes[None, :]] = wrap[roots]
    return pieces, _transfer.to_device(shift, stream=stream), wraps[1:]


def moments(labels, count, shape, field, *, stream=0, pieces=None, shift=None):
    """The CPU twin's ``(sizes, first, lo, hi, (fsum, fmin, fmax, argmin, argmax), m1,
    m2)``, as host arrays (rows 0..count, row 0 unused).

    Parameters
    ----------
    labels : ndarray of int64, (n,)
    count : int
    shape : ndarray of int64, (d,)
    field : ndarray of float64, (n,), or None
    stream : numba.cuda stream, optional
    pieces, shift : device arrays, optional
        From :func:`unwrap`: each site's piece and each piece's offset, which the
        moments add to the coordinates. None: no windings (no periodic axis).
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    d = shape.shape[0]
    n = labels.shape[0]
    big = np.iinfo(np.int64).max
    dev = _transfer.to_device
    d_labels = _device(labels, np.int64, stream)
    d_strides = dev(c_strides(shape), stream=stream)
    has = field is not None
    d_field = _device(field if has else np.zeros(0), np.float64, stream)
    sizes = dev(np.zeros(count + 1, np.int64), stream=stream)
    first = dev(np.full(count + 1, big, np.int64), stream=stream)
    lo = dev(np.full((count + 1, d), big, np.int64), stream=stream)
    hi = dev(np.full((count + 1, d), -1, np.int64), stream=stream)
    fsum = dev(np.zeros(count + 1), stream=stream)
    fmin = dev(np.full(count + 1, np.inf), stream=stream)
    fmax = dev(np.full(count + 1, -np.inf), stream=stream)
    nan_at = dev(np.full(count + 1, big, np.int64), stream=stream)
    amin = dev(np.full(count + 1, big, np.int64), stream=stream)
    amax = dev(np.full(count + 1, big, np.int64), stream=stream)
    m1 = dev(np.zeros((count + 1, d)), stream=stream)
    m2 = dev(np.zeros((count + 1, d, d)), stream=stream)
    grid = (_blocks(n), THREADS, stream)
    if n:
        _sums[grid](d_labels, d_strides, d_field, sizes, first, lo, hi, fsum, fmin, fmax,
                    nan_at)
        if has:
            _where[grid](d_labels, d_field, fmin, fmax, amin, amax)
        if pieces is None:
            pieces = cuda.device_array(0, np.int32, stream=stream)
            shift = cuda.device_array((0, d), np.int64, stream=stream)
        _moments[grid](d_labels, d_strides, first, pieces, shift, m1, m2)
    host = [_transfer.to_host(a, stream=stream) for a in
            (sizes, first, lo, hi, fsum, fmin, fmax, nan_at, amin, amax, m1, m2)]
    if stream != 0:
        stream.synchronize()
    sizes, first, lo, hi, fsum, fmin, fmax, nan_at, amin, amax, m1, m2 = host
    empty = sizes == 0
    first[empty] = -1
    lo[empty] = 0
    hi[empty] = 0
    # NaN is the extreme of its cluster, at its lowest NaN site, as on the CPU
    nan = nan_at != big
    fsum[nan] = np.nan
    for v, at in ((fmin, amin), (fmax, amax)):
        v[nan] = np.nan
        at[nan] = nan_at[nan]
        v[empty] = np.nan
        at[empty] = -1
    return sizes, first, lo, hi, (fsum, fmin, fmax, amin, amax), m1, m2


@cuda.jit
def _contacts(labels, shape, strides, periodic, fwd, bits, words, count, n_out, codes):
    """Site ``i``: every usable bond along a forward offset to a site of another non-zero
    label, counted in ``n_out[0]``; written as ``min * (count + 1) + max`` at the slot the
    count gives, where ``codes`` has room (none: a counting launch)."""
    i = cuda.grid(1)
    if i >= labels.shape[0]:
        return
    a_lab = labels[i]
    if a_lab == 0:
        return
    d = shape.shape[0]
    for k in range(fwd.shape[0]):
        j = 0
        ok = True
        for a in range(d):
            x = (i // strides[a]) % shape[a] + fwd[k, a]
            if x < 0 or x >= shape[a]:
                if periodic[a] == 0:
                    ok = False
                    break
                x %= shape[a]
            j += x * strides[a]
        if not ok:
            continue
        b_lab = labels[j]
        if b_lab == 0 or b_lab == a_lab or not bond_open(i, j, k, bits, words):
            continue
        slot = cuda.atomic.add(n_out, 0, 1)
        if slot < codes.shape[0]:
            codes[slot] = min(a_lab, b_lab) * (count + 1) + max(a_lab, b_lab)


def contacts(labels, count, shape, periodic, bond_offsets, bits, words, *, stream=0) -> dict:
    """``{(a, b): bonds}`` for labels ``0 < a < b`` joined by usable bonds, as
    :func:`catalytic.kernels.cpu.clusters.contacts` gives them: each bond once, along the
    forward offsets ``bond_offsets``, forward offset ``s`` reading bond plane ``s`` of
    ``bits`` (a device or host uint32 array; empty: every bond usable).

    Two launches of one thread a site (count, then write at atomically taken slots) and
    the codes counted on the host; their order on the device does not matter."""
    shape = np.ascontiguousarray(shape, dtype=np.int64)
    n = labels.shape[0]
    if n == 0:
        return {}
    dev = _transfer.to_device
    d_labels = _device(labels, np.int64, stream)
    fwd = np.ascontiguousarray(bond_offsets, dtype=np.int64).reshape(-1, shape.shape[0])
    args = (d_labels, dev(shape, stream=stream), dev(c_strides(shape), stream=stream),
            dev(np.ascontiguousarray(periodic, dtype=np.uint8), stream=stream),
            dev(fwd, stream=stream), _device(bits, np.uint32, stream), np.int64(words),
            np.int64(count))
    n_out = dev(np.zeros(1, np.int64), stream=stream)
    grid = (_blocks(n), THREADS, stream)
    _contacts[grid](*args, n_out, cuda.device_array(0, np.int64, stream=stream))
    h_out = _transfer.to_host(n_out, stream=stream)
    if stream != 0:
        stream.synchronize()
    m = int(h_out[0])
    codes = np.zeros(0, np.int64)
    if m:
        d_codes = cuda.device_array(m, np.int64, stream=stream)
        n_out = dev(np.zeros(1, np.int64), stream=stream)
        _contacts[grid](*args, n_out, d_codes)
        codes = _transfer.to_host(d_codes, stream=stream)
        if stream != 0:
            stream.synchronize()
    pairs, k = np.unique(codes, return_counts=True)
    return {(int(p // (count + 1)), int(p % (count + 1))): int(c) for p, c in zip(pairs, k)}
