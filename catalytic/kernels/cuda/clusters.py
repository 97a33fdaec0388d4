"""Per-cluster sums on the device: the CUDA twin of
:func:`catalytic.kernels.cpu.clusters.moments` for lattices without periodic axes
(no windings), whose contract it keeps; the floating-point sums are made by atomic
additions in no fixed order, so they agree with the CPU's to rounding.

Three launches of one thread a site: sizes, first sites, coordinate extremes and the
field's sum and extremes (NaN set aside); where the extremes are (the lowest site
holding each, or the lowest NaN); the moments of the coordinates about each cluster's
first site.

:func:`contacts`, the twin of :func:`catalytic.kernels.cpu.clusters.contacts` (the
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

__all__ = ["moments", "contacts"]


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
def _moments(labels, strides, first, m1, m2):
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
    rem = i
    remf = f
    for a in range(d):
        c = rem // strides[a]
        rem -= c * strides[a]
        cf = remf // strides[a]
        remf -= cf * strides[a]
        xa = float(c - cf)
        cuda.atomic.add(m1, (lab, a), xa)
        rem_b = rem
        remf_b = remf
        for b in range(a + 1, d):
            cb = rem_b // strides[b]
            rem_b -= cb * strides[b]
            cfb = remf_b // strides[b]
            remf_b -= cfb * strides[b]
            cuda.atomic.add(m2, (lab, a, b), xa * float(cb - cfb))
        cuda.atomic.add(m2, (lab, a, a), xa * xa)


def moments(labels, count, shape, field, *, stream=0):
    """The CPU twin's ``(sizes, first, lo, hi, (fsum, fmin, fmax, argmin, argmax), m1,
    m2)`` for a lattice without windings, as host arrays (rows 0..count, row 0 unused).

    Parameters
    ----------
    labels : ndarray of int64, (n,)
    count : int
    shape : ndarray of int64, (d,)
    field : ndarray of float64, (n,), or None
    stream : numba.cuda stream, optional
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
        _moments[grid](d_labels, d_strides, first, m1, m2)
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
