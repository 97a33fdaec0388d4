"""CUDA twin of :mod:`catalytic.kernels.cpu.edt`: the exact Euclidean distance
transform, one pass per axis (last axis first), one thread per site and pass.

Where the CPU twin builds a lower envelope of parabolas per line, a thread here looks
along its site's line, one step each way at a time, until the step alone passes the best:
the least of ``f(p) + w d^2`` over the sites ``p`` of the line, ``d`` steps away, with f
0 at the site's features (a marked site, or with values one of another value). This is
the numpy reference's pass (:mod:`catalytic.backends._distance`) with an early stop, so
the same tie rule: a candidate below the site replaces an equal best, one above does not
(at exactly half a periodic axis only the one below is looked at). O(steps to the
nearest feature along the line) per site, so a line without one costs its length per
site. The passes alternate between two pairs of buffers; the last one takes the square
roots.

Agreement: the distances are the CPU twin's bit for bit for integer spacings (every
value an integer), within rounding otherwise; each ``w d^2`` is two rounded products
(:func:`~catalytic.kernels.cuda._exact.mul`, never fused with the add), the CPU twin's
``(w d) d``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda._exact import mul
from catalytic.kernels.cuda.arrays import _shape

__all__ = ["transform"]


@cuda.jit
def _pass_kernel(f_in, i_in, f_out, i_out, keys, marked, n, stride, periodic, w, by_value,
                 track, root, total):
    """One pass along an axis of ``n`` sites and stride ``stride`` over ``total`` sites
    (grid stride): ``f_out``, ``i_out`` from ``f_in``, ``i_in``."""
    down_ring = n // 2
    up_ring = n - n // 2 - 1
    for s in range(cuda.grid(1), total, cuda.gridsize(1)):
        q = (s // stride) % n
        base = s - q * stride
        best = f_in[s]
        at = i_in[s] if track else 0
        down = down_ring if periodic else q
        up = up_ring if periodic else n - 1 - q
        r = 1
        while r <= down or r <= up:
            step = mul(mul(w, float(r)), float(r))
            if step > best:
                break
            for side in range(2):
                if side == 0:
                    if r > down:
                        continue
                    p = q - r
                    if p < 0:
                        p += n
                else:
                    if r > up:
                        continue
                    p = q + r
                    if p >= n:
                        p -= n
                j = base + p * stride
                g = f_in[j]
                k = i_in[j] if track else 0
                if by_value and (marked[j] != 0 or keys[j] != keys[s]):
                    g = 0.0
                    k = j
                total_here = g + step
                # below the site an equal candidate wins (its displacement is the lower)
                if total_here < best or side == 0 and total_here == best:
                    best = total_here
                    at = k
            r += 1
        f_out[s] = math.sqrt(best) if root else best
        if track:
            i_out[s] = at


def transform(shape, periodic, spacing, zero, keys=None, dtype=np.float64, squared=False,
              indices=False, rows=1, *, stream=0):
    """The exact Euclidean distance transform on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.edt.transform`: the same contract
    (host arrays in and out); only what differs is said here.

    Parameters
    ----------
    stream : numba stream or 0, optional
        Stream for the copies and the launches.

    Notes
    -----
    d launches of one thread a site (a grid stride), each O(n times the steps to the
    nearest feature along a line) work; device memory: two buffers of the result (and of
    the indices), the marked sites and the keys.

    Examples
    --------
    On a GPU (the simulator pass runs this example in
    ``tests/backends/cuda_backend/test_distance_transform_cuda.py``):

    >>> zero = np.array([1, 0, 0, 0, 0, 0], np.uint8)
    >>> transform((6,), (True,), (1.0,), zero).tolist()  # doctest: +SKIP
    [0.0, 1.0, 2.0, 3.0, 2.0, 1.0]
    """
    shape = tuple(int(x) for x in shape)
    d = len(shape)
    one = math.prod(shape)
    n = one * int(rows)
    dtype = np.dtype(dtype)
    zero = np.ascontiguousarray(zero, dtype=np.uint8).reshape(n)
    f = np.where(zero != 0, 0.0, np.inf).astype(dtype)
    fi = (np.where(zero != 0, np.arange(n, dtype=np.int64), -1) if indices
          else np.zeros(1, dtype=np.int64))
    if n == 0:
        return (f, fi) if indices else f
    by_value = keys is not None
    keys = (np.ascontiguousarray(keys).reshape(n) if by_value
            else np.zeros(1, dtype=np.uint64))
    d_f = [_transfer.to_device(f, stream=stream),
           cuda.device_array(n, dtype=dtype, stream=stream)]
    d_i = [_transfer.to_device(fi, stream=stream),
           cuda.device_array(fi.shape[0], dtype=np.int64, stream=stream)]
    d_keys = _transfer.to_device(keys, stream=stream)
    d_zero = _transfer.to_device(zero, stream=stream)
    blocks, threads = _shape(n)
    stride, now = 1, 0
    for axis in range(d - 1, -1, -1):
        _pass_kernel[blocks, threads, stream](
            d_f[now], d_i[now], d_f[1 - now], d_i[1 - now], d_keys, d_zero,
            np.int64(shape[axis]), np.int64(stride), np.bool_(periodic[axis]),
            np.float64(float(spacing[axis]) ** 2), np.bool_(by_value), np.bool_(indices),
            np.bool_(axis == 0 and not squared), np.int64(n))
        stride *= shape[axis]
        now = 1 - now
    _transfer.to_host(d_f[now], stream=stream, out=f)
    if indices:
        _transfer.to_host(d_i[now], stream=stream, out=fi)
    if stream:
        stream.synchronize()
    if indices and rows > 1:
        np.remainder(fi, one, out=fi, where=fi >= 0)
    return (f, fi) if indices else f
