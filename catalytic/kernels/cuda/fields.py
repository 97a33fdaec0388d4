"""CUDA twins of :mod:`catalytic.kernels.cpu.fields`: graph Laplacian and explicit diffusion.

Lattice conventions (``shape``, ``strides``, ``periodic``, ``offsets``, ``open_``,
``dedupe``) are those of :mod:`catalytic.kernels.cpu._lattice`; neighbours come from the
device :func:`catalytic.kernels.cuda._lattice.neighbor`, compiled from the CPU source.

One thread per site (per (field, site) pair for a batch): thread ``t`` of a (B, n) stack
owns site ``i = t % n`` of field ``b = t // n``. Each site sums its neighbours in stencil
order starting from 0.0, then forms ``deg * f_i - acc`` (and ``f_i - alpha * lap`` for an
Euler step): the CPU twin's per-site order. Two kernels:

* ``_lap_kernel`` (``dedupe`` False): walks the stencil, skipping offsets with no site.
* ``_lap_dedupe_kernel`` (``dedupe`` True): the same walk, dropping duplicates and
  self-loops by recomputing the earlier offsets' neighbours
  (:func:`catalytic.kernels.cuda._lattice.is_first`); no per-thread local buffer, so
  any stencil size, O(k^2 d) per site.

Agreement: bit-identical to the CPU twin. The simulator shows it; on a GPU the only
risk is NVVM's FMA contraction (numba-cuda compiles with NVVM's default ``-fma=1`` even
without ``fastmath``). With the NVVM shipped for sm_90 today, the PTX of both kernels
has no ``fma`` instruction; ``test_ptx_laplacian_kernels_have_no_fma`` checks it, so a
compiler that starts contracting them is caught (the difference would then be within
``2 eps (deg |f_i| + sum_j |f_j|)`` per Laplacian value).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from catalytic.kernels.cpu.fields import _prepare
from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda._lattice import is_first, neighbor
from catalytic.kernels.cuda.arrays import (
    TPB,
    _blocks,
    _device_view,
    _finish,
    _is_device,
    _out_buffer,
    _overlap,
    _to_device,
)

__all__ = ["laplacian", "diffuse", "laplacian_batched"]


# --------------------------------------------------------------------------- kernels


@cuda.jit
def _lap_kernel(shape, strides, periodic, offsets, open_, field, out, alpha, euler):
    """Laplacian (``euler`` False) or one Euler step of every row of a (B, n) stack."""
    t = cuda.grid(1)
    n = field.shape[1]
    if t < field.shape[0] * n:
        b = t // n
        i = t - b * n
        fi = field[b, i]
        if open_.shape[0] != 0 and open_[i] == 0:
            lap = 0.0
        else:
            acc = 0.0
            m = 0
            for k in range(offsets.shape[0]):
                j = neighbor(i, k, shape, strides, periodic, offsets, open_)
                if j >= 0:
                    acc += field[b, j]
                    m += 1
            lap = m * fi - acc
        if euler:
            out[b, i] = fi - alpha * lap
        else:
            out[b, i] = lap


@cuda.jit
def _lap_dedupe_kernel(shape, strides, periodic, offsets, open_, field, out, alpha, euler):
    """As ``_lap_kernel``, over the de-duplicated neighbour set: an offset counts only
    when :func:`is_first` says no earlier offset reaches the same site (nor the site
    itself), so the set and its order are ``neighbors_into``'s, with no local buffer."""
    t = cuda.grid(1)
    n = field.shape[1]
    if t < field.shape[0] * n:
        b = t // n
        i = t - b * n
        fi = field[b, i]
        if open_.shape[0] != 0 and open_[i] == 0:
            lap = 0.0
        else:
            acc = 0.0
            m = 0
            for k in range(offsets.shape[0]):
                j = neighbor(i, k, shape, strides, periodic, offsets, open_)
                if j >= 0 and is_first(i, k, j, shape, strides, periodic, offsets, open_):
                    acc += field[b, j]
                    m += 1
            lap = m * fi - acc
        if euler:
            out[b, i] = fi - alpha * lap
        else:
            out[b, i] = lap


# --------------------------------------------------------------------------- host side


def _stack(name, a, n, batched):
    """``(2-d (B, n) view, is_device)`` of a float64 field or stack of fields."""
    if _is_device(a):
        a = _device_view(a)
        dev = True
        contiguous = a.is_c_contiguous()
    elif isinstance(a, np.ndarray):
        dev = False
        contiguous = a.flags.c_contiguous
    else:
        raise TypeError(f"{name} must be a float64 ndarray or device array, got {type(a).__name__}")
    if a.dtype != np.float64:
        raise TypeError(f"{name} must be float64, got {a.dtype}")
    want = 2 if batched else 1
    if a.ndim != want or a.shape[a.ndim - 1] != n or not contiguous:
        what = f"(B, {n})" if batched else f"({n},)"
        raise ValueError(f"{name} must be a contiguous array of shape {what}, got {tuple(a.shape)}")
    if not batched:
        a = a.reshape(1, n)
    return a, dev


def _device_open(open_, n):
    """A device ``open_`` (the caller's cached copy) as a flat uint8 device view, used
    in place: never through NumPy, which would copy it to the host and back."""
    d = _device_view(open_)
    if d.dtype != np.uint8:
        raise TypeError(f"open_ device array has dtype {d.dtype}, expected uint8")
    if d.size not in (0, n) or not d.is_c_contiguous():
        raise ValueError(f"open_ must be a contiguous array of length 0 or {n}, "
                         f"got shape {tuple(d.shape)}")
    return d.reshape(d.size)


class _Geometry:
    """The validated lattice arrays, and the kernel that fits ``dedupe``. ``open_`` may
    be a device array (it is then used as is; the small tables are always copied)."""

    def __init__(self, shape, periodic, offsets, open_, dedupe):
        d_open = open_ if _is_device(open_) else None
        if d_open is not None:
            open_ = np.zeros(0, np.uint8)  # checked below, against n
        shape, strides, periodic, offsets, open_, n = _prepare(shape, periodic, offsets, open_)
        self.n = n
        self.host = (shape, strides, periodic, offsets, open_)
        self.d_open = None if d_open is None else _device_open(d_open, n)
        self.args = None
        self.kernel = _lap_dedupe_kernel if dedupe else _lap_kernel

    def upload(self, stream):
        tables = tuple(_transfer.to_device(a, stream=stream) for a in self.host[:4])
        d_open = self.d_open
        if d_open is None:
            d_open = _transfer.to_device(self.host[4], stream=stream)
        self.args = tables + (d_open,)

    def launch(self, src, dst, alpha, euler, stream):
        total = src.shape[0] * self.n
        if total:
            self.kernel[_blocks(total), TPB, stream](*self.args, src, dst, float(alpha), euler)


def _run(shape, periodic, offsets, open_, dedupe, field, steps, alpha, out, stream, batched):
    geo = _Geometry(shape, periodic, offsets, open_, dedupe)
    f, f_dev = _stack("field", field, geo.n, batched)
    o, o_dev = _stack("out", out, geo.n, batched)
    if tuple(f.shape) != tuple(o.shape):
        raise ValueError(f"out has shape {tuple(o.shape)}, field has {tuple(f.shape)}")
    if _overlap(f, f_dev, o, o_dev):
        raise ValueError("out must not overlap field")
    geo.upload(stream)
    d_f = _to_device(f, f_dev, stream)
    d_o = _out_buffer(o, o_dev, stream)
    if steps is None:
        geo.launch(d_f, d_o, 0.0, False, stream)
    elif steps == 0:
        d_o.copy_to_device(d_f, stream=stream)
    else:
        scratch = cuda.device_array(d_o.shape, dtype=np.float64, stream=stream) if steps > 1 else d_o
        src = d_f
        for s in range(steps):
            dst = d_o if (steps - 1 - s) % 2 == 0 else scratch
            geo.launch(src, dst, alpha, True, stream)
            src = dst
    _finish(d_o, o, o_dev, stream)
    return out


def laplacian(shape, periodic, offsets, open_, dedupe, field, out, *, stream=0):
    """Graph Laplacian of a site field over the lattice neighbour set, on the GPU.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`catalytic.kernels.cpu.fields.laplacian`; ``open_``
        may also be a uint8 device array (a cached copy), read in place, not copied.
    field : ndarray or device array of float64, (n,)
        Input values, flat C order.
    out : ndarray or device array of float64, (n,)
        Output buffer, must not overlap ``field``.
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array of float64, (n,)
        ``(L f)_i = deg_i f_i - sum_{j in N(i)} f_j``, 0 at blocked sites.

    Raises
    ------
    TypeError
        If ``field`` or ``out`` is not float64, or a device ``open_`` not uint8.
    ValueError
        If the geometry is inconsistent, the fields have the wrong length or ``out``
        overlaps ``field``.

    Notes
    -----
    O(n k d) work, one thread per site. Same per-site summation order as the CPU twin,
    no FMA contraction in the PTX: bit-identical.

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([0.0, 1.0, 0.0])
    >>> laplacian((3,), (False,), [[-1], [1]], np.zeros(0, np.uint8), False, f,
    ...           np.empty(3))  # doctest: +SKIP
    array([-1.,  2., -1.])
    """
    return _run(shape, periodic, offsets, open_, dedupe, field, None, 0.0, out, stream, False)


def laplacian_batched(shape, periodic, offsets, open_, dedupe, fields, out, *, stream=0):
    """:func:`laplacian` of every row of a (B, n) stack of fields, in one launch.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice shared by every field.
    fields : ndarray or device array of float64, (B, n)
    out : ndarray or device array of float64, (B, n); must not overlap ``fields``.
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array of float64, (B, n)
        Row ``b`` equals ``laplacian(..., fields[b], ...)`` bit for bit.

    Raises
    ------
    TypeError, ValueError
        As :func:`laplacian`.

    Notes
    -----
    O(B n k d) work over B*n threads (thread ``t``: field ``t // n``, site ``t % n``).

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    >>> laplacian_batched((3,), (True,), [[-1], [1]], np.zeros(0, np.uint8), False, f,
    ...                   np.empty_like(f))  # doctest: +SKIP
    array([[-1.,  2., -1.],
           [ 0.,  0.,  0.]])
    """
    return _run(shape, periodic, offsets, open_, dedupe, fields, None, 0.0, out, stream, True)


def diffuse(shape, periodic, offsets, open_, dedupe, field, steps, alpha, out, *, stream=0):
    """Explicit-Euler diffusion ``f <- f - alpha * L f``, repeated ``steps`` times, on the GPU.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice, as in :func:`laplacian`.
    field : ndarray or device array of float64, (n,)
        Initial values; not modified.
    steps : int
        Number of Euler steps, >= 0.
    alpha : float
        Step size (stable for ``0 <= alpha <= 1 / max_deg``; not checked).
    out : ndarray or device array of float64, (n,)
        Output buffer, must not overlap ``field``.
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array of float64, (n,)
        The field after ``steps`` steps; blocked sites keep their initial value.

    Raises
    ------
    TypeError
        If ``field`` or ``out`` is not float64.
    ValueError
        If ``steps`` is negative, the geometry is inconsistent or the buffers overlap.

    Notes
    -----
    O(steps n k) work, one launch per step; the steps ping-pong between ``out`` and
    one device scratch field so that the last lands in ``out`` (only the final result
    is copied back). Bit-identical to the CPU twin (same per-site order, no FMA).

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([0.0, 1.0, 0.0])
    >>> diffuse((3,), (False,), [[-1], [1]], np.zeros(0, np.uint8), False, f, 1, 0.25,
    ...         np.empty(3))  # doctest: +SKIP
    array([0.25, 0.5 , 0.25])
    """
    steps = int(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    return _run(shape, periodic, offsets, open_, dedupe, field, steps, alpha, out, stream, False)
