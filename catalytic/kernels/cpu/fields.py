"""Lattice field kernels: graph Laplacian and explicit diffusion.

Conventions (``shape``, ``strides``, ``periodic``, ``offsets``, ``open_``, ``dedupe``) are
those of :mod:`catalytic.kernels.cpu.neighbors`. A field is a flat, C-ordered float64 array
with one value per site (``n = prod(shape)``).

The Laplacian is the combinatorial graph Laplacian of the neighbour relation

    (L f)_i = deg_i * f_i - sum_{j in N(i)} f_j,

where ``N(i)`` is the neighbour set of site ``i`` and ``deg_i = |N(i)|``; it is 0 at
blocked sites. For an asymmetric stencil the relation is directed and ``deg_i`` is the
out-degree (``scipy.sparse.csgraph.laplacian(A, use_out_degree=True)``).

Two kernels compute it, with the same result bit for bit (each site sums its neighbours
in stencil order, starting from 0.0, then forms ``deg * f_i - acc``):

* ``_rows_kernel``: used when ``dedupe`` is False (every stencil offset reaches a distinct
  site other than ``i``). It walks the lattice row by row along the last axis and
  resolves the displacement of every other axis once per row. Without a mask, the
  row interior (where no last-axis displacement leaves the row) is summed with ``out``
  as the accumulator, up to four offsets per pass, in contiguous loops that vectorise;
  the row ends, and every site of a masked lattice, take the per-site path with wrap,
  bounds and mask checks. It handles any stencil, periodic axes and masks.
* ``_generic_kernel``: calls :func:`neighbors_into` per site; used when ``dedupe`` is
  True, where duplicates and self-loops must be dropped.

Both run ``prange`` over chunks of the lattice; each site's output depends only on the
input field, so the result is deterministic for any number of threads.

Interrupts
----------
Python signal handlers (Ctrl-C's ``KeyboardInterrupt``, a ``SIGALRM`` handler that
raises) only run when a kernel call returns, so one pass over the lattice is split into
kernel calls of about ``_BUDGET`` neighbour reads, and
:func:`diffuse` makes one pass per step: an interrupt surfaces between two calls, on the
main thread (the only one Python runs signal handlers on). The result does not depend on
the split.
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from catalytic.kernels.cpu._budget import _frozen
from catalytic.kernels.cpu.neighbors import bond_neighbors_into, c_strides, neighbors_into

__all__ = ["laplacian", "diffuse"]

#: Sites per ``prange`` chunk; below this a single chunk is used.
_CHUNK_SITES = 1 << 14
#: Work per kernel call, in neighbour reads (sites times stencil entries; a masked site
#: counts 4 times, a de-duplicated one k times, as they take the slower per-site
#: paths): a pass over a larger lattice is split into several calls so that signal
#: handlers run between them (times in reports/kernel_tuning.md). Read at each call, so
#: a test can shrink it.
_BUDGET = 1 << 25


# --------------------------------------------------------------------------- kernels


@njit(cache=True, nogil=True, parallel=True)
def _generic_kernel(
    shape, strides, periodic, offsets, open_, dedupe, field, out, alpha, euler, nbr, chunk,
    s_lo, s_hi,
):
    """Laplacian (``euler`` False) or one Euler step (True) via ``neighbors_into``, for
    sites ``[s_lo, s_hi)``.

    ``nbr`` is int64[nchunks, k] scratch, one row per chunk; chunk ``c`` covers sites
    ``[s_lo + c * chunk, min(s_hi, s_lo + (c + 1) * chunk))``.
    """
    has_mask = open_.shape[0] != 0
    for c in prange(nbr.shape[0]):
        buf = nbr[c]
        lo = s_lo + c * chunk
        hi = min(s_hi, lo + chunk)
        for i in range(lo, hi):
            fi = field[i]
            if has_mask and open_[i] == 0:
                lap = 0.0
            else:
                m = neighbors_into(i, shape, strides, periodic, offsets, open_, dedupe, buf)
                acc = 0.0
                for q in range(m):
                    acc += field[buf[q]]
                lap = m * fi - acc
            if euler:
                out[i] = fi - alpha * lap
            else:
                out[i] = lap


@njit(cache=True, nogil=True, parallel=True)
def _bond_kernel(
    shape, strides, periodic, offsets, open_, dedupe, bond_slot, bits, words, bw, field, out,
    alpha, euler, nbr, wnbr, chunk, s_lo, s_hi,
):
    """``_generic_kernel`` through open bonds with conductances: ``(L f)_i = sum_j c_ij
    (f_i - f_j)`` formed as ``deg_i f_i - acc`` with ``deg_i = sum_j c_ij`` and ``acc =
    sum_j c_ij f_j`` in stencil order, ``c_ij`` the least bond weight over the usable
    parallel bonds (1.0 without bond weights, which gives the unweighted result bit for
    bit). ``wnbr`` is float64 scratch shaped like ``nbr``."""
    has_mask = open_.shape[0] != 0
    hasw = bw.shape[0] != 0
    for c in prange(nbr.shape[0]):
        buf = nbr[c]
        wbuf = wnbr[c]
        lo = s_lo + c * chunk
        hi = min(s_hi, lo + chunk)
        for i in range(lo, hi):
            fi = field[i]
            if has_mask and open_[i] == 0:
                lap = 0.0
            else:
                m = bond_neighbors_into(i, shape, strides, periodic, offsets, open_, dedupe,
                                        bond_slot, bits, words, bw, buf, wbuf)
                acc = 0.0
                if hasw:
                    deg = 0.0
                    for q in range(m):
                        acc += wbuf[q] * field[buf[q]]
                        deg += wbuf[q]
                    lap = deg * fi - acc
                else:
                    for q in range(m):
                        acc += field[buf[q]]
                    lap = m * fi - acc
            if euler:
                out[i] = fi - alpha * lap
            else:
                out[i] = lap


@njit(cache=True, nogil=True, inline="always")
def _edge_site(x, row0, w, wrap_last, d, k, rb, offsets, open_, has_mask, field, out, alpha,
               euler):
    """One site of ``_rows_kernel`` with full last-axis wrap/bounds and mask checks."""
    i = row0 + x
    fi = field[i]
    if has_mask and open_[i] == 0:
        lap = 0.0
    else:
        acc = 0.0
        m = 0
        for q in range(k):
            b = rb[q]
            if b < 0:
                continue
            cx = x + offsets[q, d - 1]
            if cx < 0 or cx >= w:
                if wrap_last:
                    cx %= w
                else:
                    continue
            j = b + cx
            if has_mask and open_[j] == 0:
                continue
            acc += field[j]
            m += 1
        lap = m * fi - acc
    if euler:
        out[i] = fi - alpha * lap
    else:
        out[i] = lap


@njit(cache=True, nogil=True)
def _add_rows(acc, field, src, q, g, cnt, first):
    """``acc[x] += field[src[q] + x] + ... + field[src[q + g - 1] + x]`` for x < cnt, the
    terms added one by one in that order (``first``: start from 0.0, not from ``acc``,
    as the per-site path does). Up to four neighbour rows per pass over ``acc``: with
    one pass per stencil offset the interior was compute bound (reports/kernel_tuning.md).
    Not inlined: a call per row costs nothing measurable and saves compilation."""
    z = 0.0
    a = field[src[q]:src[q] + cnt]
    if g == 1:
        for x in range(cnt):
            acc[x] = (z if first else acc[x]) + a[x]
        return
    b = field[src[q + 1]:src[q + 1] + cnt]
    if g == 2:
        for x in range(cnt):
            acc[x] = ((z if first else acc[x]) + a[x]) + b[x]
        return
    e = field[src[q + 2]:src[q + 2] + cnt]
    if g == 3:
        for x in range(cnt):
            acc[x] = (((z if first else acc[x]) + a[x]) + b[x]) + e[x]
        return
    h = field[src[q + 3]:src[q + 3] + cnt]
    for x in range(cnt):
        acc[x] = ((((z if first else acc[x]) + a[x]) + b[x]) + e[x]) + h[x]


@njit(cache=True, nogil=True, parallel=True)
def _rows_kernel(shape, strides, periodic, offsets, open_, field, out, alpha, euler, base, rows,
                 seg, s_lo, s_hi):
    """Laplacian or one Euler step, row by row along the last axis (no dedupe), for row
    segments ``[s_lo, s_hi)``: each row is cut into segments of ``seg`` sites (one per
    row unless rows are longer).

    ``base`` is int64[nchunks, 2k] scratch: per stencil offset, the flat index of the
    displaced row start (or -1 when the displacement leaves an open axis), then the
    interior's source starts of the offsets that land. Chunk ``c``
    covers segments ``[s_lo + c * rows, min(s_hi, s_lo + (c + 1) * rows))``.
    """
    d = shape.shape[0]
    k = offsets.shape[0]
    w = shape[d - 1]
    wrap_last = periodic[d - 1] != 0
    has_mask = open_.shape[0] != 0
    spr = (w + seg - 1) // seg
    for c in prange(base.shape[0]):
        rb = base[c, :k]
        src = base[c, k:]
        g_lo = s_lo + c * rows
        g_hi = min(s_hi, g_lo + rows)
        for sg in range(g_lo, g_hi):
            if spr == 1:  # whole rows
                r = sg
                x0 = 0
                x1 = w
            else:
                r = sg // spr
                x0 = (sg - r * spr) * seg
                x1 = min(w, x0 + seg)
            row0 = r * w
            # Resolve every axis but the last once for this row.
            for q in range(k):
                b = 0
                rem = row0
                for a in range(d - 1):
                    cc = rem // strides[a]
                    rem -= cc * strides[a]
                    cc += offsets[q, a]
                    if cc < 0 or cc >= shape[a]:
                        if periodic[a]:
                            cc %= shape[a]
                        else:
                            b = -1
                            break
                    b += cc * strides[a]
                rb[q] = b
            # Interior [xlo, xhi): every last-axis displacement stays inside the row, so
            # (without a mask) the degree is constant and the sums vectorise; ``out``
            # is the accumulator, filled in stencil order exactly like the scalar path.
            xlo = 0
            xhi = w
            m_in = 0
            for q in range(k):
                if rb[q] < 0:
                    continue
                m_in += 1
                ol = offsets[q, d - 1]
                xlo = max(xlo, -ol)
                xhi = min(xhi, w - ol)
            if has_mask or xhi <= xlo:
                xlo = 0
                xhi = 0
            # this segment's share [ilo, ihi) of the interior
            ilo = max(xlo, x0)
            ihi = max(min(xhi, x1), ilo)
            cnt = ihi - ilo
            acc = out[row0 + ilo : row0 + ihi]
            own = field[row0 + ilo : row0 + ihi]
            m = 0
            for q in range(k):
                if rb[q] >= 0:
                    src[m] = rb[q] + offsets[q, d - 1] + ilo
                    m += 1
            if m == 0:
                for x in range(cnt):
                    acc[x] = 0.0
            for q in range(0, m, 4):
                _add_rows(acc, field, src, q, min(4, m - q), cnt, q == 0)
            if euler:
                for x in range(cnt):
                    acc[x] = own[x] - alpha * (m_in * own[x] - acc[x])
            else:
                for x in range(cnt):
                    acc[x] = m_in * own[x] - acc[x]
            # Edges (and every site when there is a mask): per-site checks.
            for x in range(x0, min(xlo, x1)):
                _edge_site(x, row0, w, wrap_last, d, k, rb, offsets, open_, has_mask,
                           field, out, alpha, euler)
            for x in range(max(xhi, x0), x1):
                _edge_site(x, row0, w, wrap_last, d, k, rb, offsets, open_, has_mask,
                           field, out, alpha, euler)


# --------------------------------------------------------------------------- host side


def _prepare(shape, periodic, offsets, open_):
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    if d == 0 or np.any(shape < 0):
        raise ValueError(f"shape must be a non-empty sequence of sizes >= 0, got {shape.tolist()}")
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(-1)
    if periodic.shape[0] != d:
        raise ValueError(f"periodic has {periodic.shape[0]} entries for a {d}-d shape")
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets.ndim != 2 or offsets.shape[1] != d:
        raise ValueError(f"offsets must have shape (k, {d}), got {offsets.shape}")
    n = int(np.prod(shape))
    open_ = _frozen(np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1))
    if open_.shape[0] not in (0, n):
        raise ValueError(f"open_ must have length 0 or {n}, got {open_.shape[0]}")
    return shape, c_strides(shape), periodic, offsets, open_, n


def _check_field(name, a, n):
    if not isinstance(a, np.ndarray) or a.dtype != np.float64:
        raise TypeError(f"{name} must be a float64 ndarray, got {getattr(a, 'dtype', type(a))}")
    if a.ndim != 1 or a.shape[0] != n or not a.flags.c_contiguous:
        raise ValueError(f"{name} must be a contiguous 1-d array of length {n}, got shape {a.shape}")


def _launch(shape, strides, periodic, offsets, open_, dedupe, field, out, alpha, euler,
            bonds=None):
    """Pick the kernel and the chunking, allocate the per-chunk scratch, run one pass in
    kernel calls of about ``_BUDGET`` neighbour reads each (one call when the lattice is
    smaller)."""
    n = field.shape[0]
    k = max(offsets.shape[0], 1)
    if n == 0:
        return
    field = _frozen(field)  # the user's field, or a diffusion step's scratch
    T = get_num_threads()
    if bonds is not None:
        slot, bits, words, bw = bonds
        per_call = min(n, max(1, _BUDGET // (k * k)))  # sites per kernel call
        chunk = max(_CHUNK_SITES, -(-per_call // (8 * T)))
        nbr = np.empty((-(-per_call // chunk), k), dtype=np.int64)
        wnbr = np.empty(nbr.shape, dtype=np.float64)
        for lo in range(0, n, per_call):
            hi = min(n, lo + per_call)
            m = -(-(hi - lo) // chunk)
            _bond_kernel(
                shape, strides, periodic, offsets, open_, bool(dedupe), slot, bits, words, bw,
                field, out, float(alpha), euler, nbr[:m], wnbr[:m], chunk, lo, hi,
            )
    elif dedupe:
        per_call = min(n, max(1, _BUDGET // (k * k)))  # sites per kernel call
        chunk = max(_CHUNK_SITES, -(-per_call // (8 * T)))
        nbr = np.empty((-(-per_call // chunk), k), dtype=np.int64)
        for lo in range(0, n, per_call):
            hi = min(n, lo + per_call)
            _generic_kernel(
                shape, strides, periodic, offsets, open_, bool(dedupe), field, out,
                float(alpha), euler, nbr[:-(-(hi - lo) // chunk)], chunk, lo, hi,
            )
    else:
        w = int(shape[-1])
        cost = k * (4 if open_.shape[0] else 1)  # per site
        # whole rows, or rows cut into 8 segments per thread per call when one row
        # alone is over the budget (a 1-D lattice is one row)
        seg = w if cost * w <= _BUDGET else max(1, _BUDGET // (8 * T * cost))
        nseg = n // w * -(-w // seg)
        per_call = min(nseg, max(1, _BUDGET // (cost * seg)))  # segments per kernel call
        rows = max(1, _CHUNK_SITES // seg, -(-per_call // (8 * T)))  # segments per chunk
        base = np.empty((-(-per_call // rows), 2 * k), dtype=np.int64)
        for lo in range(0, nseg, per_call):
            hi = min(nseg, lo + per_call)
            _rows_kernel(
                shape, strides, periodic, offsets, open_, field, out, float(alpha), euler,
                base[:-(-(hi - lo) // rows)], rows, seg, lo, hi,
            )


def laplacian(shape, periodic, offsets, open_, dedupe, field, out, *, bonds=None):
    """Graph Laplacian of a site field over the lattice neighbour set.

    Parameters
    ----------
    shape : array_like of int, (d,)
        Sites per axis.
    periodic : array_like of bool, (d,)
        True where the axis wraps.
    offsets : array_like of int, (k, d)
        Stencil displacements, in stencil order.
    open_ : array_like of uint8, (n,) or (0,)
        1 where the site exists; an empty array means every site exists.
    dedupe : bool
        True when offsets can coincide (small periodic axes) or reach the site itself;
        duplicates and self-loops are then dropped. With False the caller asserts there
        are none, and the faster row kernel is used.
    field : ndarray of float64, (n,)
        Input values, flat C order.
    out : ndarray of float64, (n,)
        Output buffer, must not overlap ``field``.
    bonds : tuple, optional
        ``(bond_slot, bits, words, bw)`` as ``Geometry.bond_args()`` gives them: the
        neighbour set through open bonds, each edge weighted by its conductance ``c_ij``
        (the least bond weight over usable parallel bonds; 1 without bond weights).

    Returns
    -------
    out : ndarray of float64, (n,)
        ``(L f)_i = deg_i f_i - sum_{j in N(i)} f_j``, 0 at blocked sites; with
        ``bonds``, ``sum_{j in N(i)} c_ij (f_i - f_j)``.

    Raises
    ------
    TypeError
        If ``field`` or ``out`` is not float64.
    ValueError
        If the geometry arrays are inconsistent, the fields have the wrong length, or
        ``out`` overlaps ``field``.

    Notes
    -----
    O(n k d) work (O(n k) plus O(n/w k d) on the row kernel, w the last-axis size) and
    O(threads k) scratch. Each site sums its neighbours in stencil order, so the result
    does not depend on the thread count, and both kernels agree bit for bit. Large
    lattices are done in several kernel calls of about ``_BUDGET`` neighbour reads, so a
    signal handler (Ctrl-C) runs between two of them (see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([0.0, 1.0, 0.0])
    >>> laplacian((3,), (False,), [[-1], [1]], np.zeros(0, np.uint8), False, f, np.empty(3))
    array([-1.,  2., -1.])
    """
    shape, strides, periodic, offsets, open_, n = _prepare(shape, periodic, offsets, open_)
    _check_field("field", field, n)
    _check_field("out", out, n)
    if np.shares_memory(field, out):
        raise ValueError("out must not overlap field")
    _launch(shape, strides, periodic, offsets, open_, dedupe, field, out, 0.0, False,
            _bond_arrays(bonds))
    return out


def _bond_arrays(bonds):
    """``bonds`` as the bond kernel takes them, or None."""
    if bonds is None:
        return None
    slot, bits, words, bw = bonds
    return (_frozen(np.ascontiguousarray(slot, dtype=np.int64)),
            _frozen(np.ascontiguousarray(bits, dtype=np.uint32)), int(words),
            _frozen(np.ascontiguousarray(bw, dtype=np.float64)))


def diffuse(shape, periodic, offsets, open_, dedupe, field, steps, alpha, out, *,
            bonds=None):
    """Explicit-Euler diffusion ``f <- f - alpha * L f``, repeated ``steps`` times.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`laplacian`.
    field : ndarray of float64, (n,)
        Initial values; not modified.
    steps : int
        Number of Euler steps, >= 0.
    alpha : float
        Step size. The scheme is stable for ``0 <= alpha <= 1 / max_deg`` (symmetric
        stencils; with bond weights the largest weighted degree); it is not checked.
    out : ndarray of float64, (n,)
        Output buffer, must not overlap ``field``.
    bonds : tuple, optional
        As in :func:`laplacian` (bond weights are conductances).

    Returns
    -------
    out : ndarray of float64, (n,)
        The field after ``steps`` steps; blocked sites keep their initial value.

    Raises
    ------
    TypeError
        If ``field`` or ``out`` is not float64.
    ValueError
        If ``steps`` is negative, the geometry is inconsistent or the buffers overlap.

    Notes
    -----
    O(steps n k) work. One scratch field (n float64) is allocated; the steps ping-pong
    between it and ``out`` so that the last one lands in ``out``. Each step computes
    ``f_i - alpha * (deg_i f_i - acc_i)`` with the same summation order as
    :func:`laplacian`; against repeated sparse mat-vecs ``f - alpha * (L @ f)`` it agrees
    to rounding (relative error ~ ``steps * k * eps``). Each step is one or more kernel
    calls of about ``_BUDGET`` neighbour reads, so a signal handler (Ctrl-C) runs between
    two of them (see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([0.0, 1.0, 0.0])
    >>> diffuse((3,), (False,), [[-1], [1]], np.zeros(0, np.uint8), False, f, 1, 0.25,
    ...         np.empty(3))
    array([0.25, 0.5 , 0.25])
    """
    shape, strides, periodic, offsets, open_, n = _prepare(shape, periodic, offsets, open_)
    _check_field("field", field, n)
    _check_field("out", out, n)
    steps = int(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if np.shares_memory(field, out):
        raise ValueError("out must not overlap field")
    if steps == 0:
        out[:] = field
        return out
    scratch = np.empty(n, dtype=np.float64) if steps > 1 else out
    src = field
    bonds = _bond_arrays(bonds)
    for s in range(steps):
        dst = out if (steps - 1 - s) % 2 == 0 else scratch
        _launch(shape, strides, periodic, offsets, open_, dedupe, src, dst, alpha, True,
                bonds)
        src = dst
    return out
