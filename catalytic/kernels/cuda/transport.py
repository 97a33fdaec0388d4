"""CUDA twin of :mod:`catalytic.kernels.cpu.transport`: conjugate gradients
preconditioned by aggregation multigrid, with the iteration on the device.

The hierarchy is the CPU twin's, built on the host (:func:`~catalytic.kernels.cpu.
transport.hierarchy`: the pairing is sequential, and a level's Galerkin product is
SciPy's); :func:`upload` copies its levels to the device once, and :func:`solve` runs
the CPU twin's iteration there, step for step: the same W-cycle (:data:`~catalytic.
kernels.cpu.transport.OMEGA`, ``SWEEPS``, ``GAMMA``, ``OVER``), the same stopping rule.
The host only launches and reads the two dot products of each step (one 16-byte copy
each).

Kernels, one thread a row or site over a grid stride: a CSR pass (``A x``, the residual
or a damped Jacobi sweep, as the twin's ``_row``); the restriction, each coarse site
summing its aggregate's members in index order (a gather: no atomics, so a solve gives
the same bits on every run on a given GPU); the prolongation; the coarsest level's dense
inverse as a matrix-vector product; the conjugate-gradient updates; and two dot products
a launch, each thread summing its share in order and each block by a shared-memory tree
(the array kernels' reduction, :mod:`catalytic.kernels.cuda.arrays`).

Agreement: the same iteration as the CPU twin, its sums in another order (and fused
multiply-adds where the GPU makes them), so the potential agrees within the tolerance,
not bit for bit, and the iteration count may differ by one or two.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float64

from catalytic.kernels.cpu import transport as _cpu
from catalytic.kernels.cpu.transport import hierarchy
from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda.arrays import (
    TPB,
    _block_reduce,
    _shape,
    _sum_f64_kernel,
    _sum_tree,
)

__all__ = ["Device", "hierarchy", "upload", "solve", "device_bytes"]


_row = cuda.jit(device=True)(_cpu.row)


@cuda.jit
def _csr_pass(indptr, indices, data, x, b, out, dinv, omega, mode):
    """Every row of the CSR matrix (the CPU twin's row, :func:`~catalytic.kernels.cpu.
    transport.row`): ``mode`` 0 writes ``out = A x``; 1 the residual ``out = b - A x``;
    2 a Jacobi sweep ``out = x + omega dinv (b - A x)``."""
    for i in range(cuda.grid(1), indptr.shape[0] - 1, cuda.gridsize(1)):
        _row(indptr, indices, data, x, b, out, dinv, omega, mode, i)


@cuda.jit
def _jacobi_start(dinv, b, x, omega):
    """``x = omega dinv b``: the first Jacobi sweep from 0."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        x[i] = omega * dinv[i] * b[i]


@cuda.jit
def _restrict(start, members, r, out):
    """``out[a]``: the sum of ``r`` over the members of aggregate ``a``
    (``members[start[a]:start[a + 1]]``, in index order)."""
    for a in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        acc = 0.0
        for k in range(start[a], start[a + 1]):
            acc += r[members[k]]
        out[a] = acc


@cuda.jit
def _prolong(agg, e, x, over):
    """``x += over e[agg]``: the coarse correction, piecewise constant."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        x[i] += over * e[agg[i]]


@cuda.jit
def _coarsest_solve(inverse, b, out):
    """``out = inverse @ b``: the coarsest level's solve, one thread a row."""
    m = out.shape[0]
    for i in range(cuda.grid(1), m, cuda.gridsize(1)):
        acc = 0.0
        for j in range(m):
            acc += inverse[i, j] * b[j]
        out[i] = acc


@cuda.jit
def _cg_step(x, r, p, q, alpha):
    """The conjugate-gradient update ``x += alpha p``, ``r -= alpha q``."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        x[i] += alpha * p[i]
        r[i] -= alpha * q[i]


@cuda.jit
def _cg_direction(p, z, beta, first):
    """The next search direction: ``p = z`` (``first``), else ``p = z + beta p``."""
    for i in range(cuda.grid(1), p.shape[0], cuda.gridsize(1)):
        if first:
            p[i] = z[i]
        else:
            p[i] = z[i] + beta * p[i]


@cuda.jit
def _cg_zero(x):
    """``x = 0``."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        x[i] = 0.0


@cuda.jit
def _cg_dots(a, b, c, d, out):
    """This block's share of ``a . b`` and ``c . d``: ``out[0, block]`` and
    ``out[1, block]`` (each thread summing its grid-stride share in order, then the
    block's tree)."""
    sa = cuda.shared.array(TPB, dtype=float64)
    sb = cuda.shared.array(TPB, dtype=float64)
    u = 0.0
    v = 0.0
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        u += a[i] * b[i]
        v += c[i] * d[i]
    _sum_tree(sa, sb, u, v, out)


class _Level:
    """One level on the device: the CSR arrays, ``dinv``, the aggregates (``agg``, and
    their members in index order: ``start``, ``members``), and the cycle's vectors
    ``x``, ``y`` and ``b``."""

    def __init__(self, lv, stream):
        put = lambda a: _transfer.to_device(a, stream=stream)  # noqa: E731
        n = lv.indptr.shape[0] - 1
        self.n = n
        self.indptr, self.indices = put(lv.indptr), put(lv.indices)
        self.data, self.dinv = put(lv.data), put(np.ascontiguousarray(lv.dinv))
        self.agg = self.start = self.members = None
        if lv.agg is not None:
            agg = np.ascontiguousarray(lv.agg, dtype=np.int64)
            self.agg = put(agg)
            self.members = put(np.argsort(agg, kind="stable").astype(np.int64))
            start = np.zeros(lv.m + 1, dtype=np.int64)
            np.cumsum(np.bincount(agg, minlength=lv.m), out=start[1:])
            self.start = put(start)
        self.x, self.y, self.b = (cuda.device_array(n, dtype=np.float64, stream=stream)
                                  for _ in range(3))


class Device:
    """A :class:`~catalytic.kernels.cpu.transport.Hierarchy` on the device
    (:func:`upload`): its levels, finest first, and the coarsest level's dense inverse
    (None when it only smooths)."""

    def __init__(self, levels, inverse):
        self.levels = levels
        self.inverse = inverse


def device_bytes(h) -> int:
    """Device bytes :func:`upload` and :func:`solve` take for the hierarchy ``h``."""
    total = 0
    for lv in h.levels:
        n = lv.indptr.shape[0] - 1
        total += lv.indptr.nbytes + lv.indices.nbytes + lv.data.nbytes + 32 * n
        if lv.agg is not None:
            total += 16 * n + 8 * (lv.m + 1)
    if h.inverse is not None:
        total += h.inverse.nbytes
    return total + 40 * (h.levels[0].indptr.shape[0] - 1)  # the iteration's b x r p q


def upload(h, *, stream=0) -> Device:
    """Copy the hierarchy ``h`` (:func:`~catalytic.kernels.cpu.transport.hierarchy`) to
    the device."""
    levels = [_Level(lv, stream) for lv in h.levels]
    inverse = None
    if h.inverse is not None:
        inverse = _transfer.to_device(np.ascontiguousarray(h.inverse, dtype=np.float64),
                                      stream=stream)
    return Device(levels, inverse)


def _launch(kernel, work, stream, *args):
    blocks, threads = _shape(max(work, 1))
    kernel[blocks, threads, stream](*args)


def _pass(lv, x, b, out, omega, mode, stream):
    _launch(_csr_pass, lv.n, stream, lv.indptr, lv.indices, lv.data, x, b, out, lv.dinv,
            np.float64(omega), np.int64(mode))


def _cycle(dv, level, b, stream):
    """The W-cycle from ``level`` on the device vector ``b`` of that level; returns the
    device vector holding the approximation of ``A^-1 b`` (the level's ``x`` or ``y``)."""
    lv = dv.levels[level]
    last = level == len(dv.levels) - 1
    if last and dv.inverse is not None:
        _launch(_coarsest_solve, lv.n, stream, dv.inverse, b, lv.x)
        return lv.x
    x, y = lv.x, lv.y
    _launch(_jacobi_start, lv.n, stream, lv.dinv, b, x, np.float64(_cpu.OMEGA))
    for _ in range(_cpu.SWEEPS - 1):
        _pass(lv, x, b, y, _cpu.OMEGA, 2, stream)
        x, y = y, x
    if not last:
        nxt = dv.levels[level + 1]
        for _ in range(_cpu.GAMMA):
            _pass(lv, x, b, y, 0.0, 1, stream)  # the residual
            _launch(_restrict, nxt.n, stream, lv.start, lv.members, y, nxt.b)
            e = _cycle(dv, level + 1, nxt.b, stream)
            _launch(_prolong, lv.n, stream, lv.agg, e, x, np.float64(_cpu.OVER))
    for _ in range(_cpu.SWEEPS):
        _pass(lv, x, b, y, _cpu.OMEGA, 2, stream)
        x, y = y, x
    return x


def _two_dots(a, b, c, d, stream):
    """``(a . b, c . d)`` on the host."""
    u, v = _block_reduce(_cg_dots, _sum_f64_kernel, a, np.float64, stream, b, c, d)
    return float(u), float(v)


def _back(x, stream):
    h = _transfer.to_host(x, stream=stream)
    if stream:
        stream.synchronize()
    return h


def solve(dv: Device, b, tol: float, maxiter: int, *, stream=0):
    """Preconditioned conjugate gradients on the device, on the finest level of ``dv``.

    The CUDA twin of :func:`catalytic.kernels.cpu.transport.solve`: the same contract
    (``b`` a host array, ``(x, iterations, residual)`` back on the host); only what
    differs is said here.

    Parameters
    ----------
    dv : Device
        The hierarchy on the device (:func:`upload`).
    stream : numba stream or 0, optional
        Stream for the copies and the launches.

    Notes
    -----
    Each step is a W-cycle (a few launches a level visited: one thread a row or site)
    and two reductions whose two values each come back to the host; device memory:
    :func:`device_bytes`.

    Examples
    --------
    On a GPU (the simulator pass runs this example in
    ``tests/backends/cuda_backend/test_transport_cuda.py``):

    >>> import scipy.sparse as sp
    >>> from catalytic.kernels.cpu.transport import hierarchy
    >>> A = sp.csr_array(np.array([[2.0, -1.0], [-1.0, 2.0]]))
    >>> x, its, res = solve(upload(hierarchy(A)), np.array([1.0, 0.0]), 1e-12, 10)  # doctest: +SKIP
    >>> np.round(x * 3, 12).tolist()  # doctest: +SKIP
    [2.0, 1.0]
    """
    lv = dv.levels[0]
    n = lv.n
    b = np.ascontiguousarray(b, dtype=np.float64)
    if b.shape != (n,):
        raise ValueError(f"b must have shape ({n},), got {b.shape}")
    nb = float(np.sqrt(_cpu._dot(b, b)))
    if nb == 0.0 or n == 0:
        return np.zeros(n), 0, 0.0
    d_b = _transfer.to_device(b, stream=stream)
    r = _transfer.to_device(b, stream=stream)
    x, p, q = (cuda.device_array(n, dtype=np.float64, stream=stream) for _ in range(3))
    _launch(_cg_zero, n, stream, x)
    z = _cycle(dv, 0, r, stream)
    _launch(_cg_direction, n, stream, p, z, np.float64(0.0), np.bool_(True))
    rz, _ = _two_dots(r, z, r, z, stream)
    it = 0
    while it < maxiter:
        it += 1
        _pass(lv, p, p, q, 0.0, 0, stream)
        pq, _ = _two_dots(p, q, p, q, stream)
        if not pq > 0.0:
            break  # p is 0 (nothing left to correct) or rounding took over
        alpha = rz / pq
        _launch(_cg_step, n, stream, x, r, p, q, np.float64(alpha))
        rr, _ = _two_dots(r, r, r, r, stream)
        if np.sqrt(rr) <= tol * nb:
            _pass(lv, x, d_b, r, 0.0, 1, stream)  # the true residual
            rr, _ = _two_dots(r, r, r, r, stream)
            res = float(np.sqrt(rr)) / nb
            if res <= tol:
                return _back(x, stream), it, res
        z = _cycle(dv, 0, r, stream)
        rz_new, _ = _two_dots(r, z, r, z, stream)
        _launch(_cg_direction, n, stream, p, z, np.float64(rz_new / rz), np.bool_(False))
        rz = rz_new
    _pass(lv, x, d_b, r, 0.0, 1, stream)
    rr, _ = _two_dots(r, r, r, r, stream)
    return _back(x, stream), it, float(np.sqrt(rr)) / nb
