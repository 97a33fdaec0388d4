"""CUDA twin of :mod:`catalytic.kernels.random`: counter-based random arrays on the GPU.

The device functions are compiled with ``cuda.jit(device=True)`` from the very Python
scalar functions that NumPy runs on arrays and ``njit`` compiles
(:func:`~catalytic.kernels.random.splitmix64`, ``uniform53``, ``uniform24``,
``mulhi64``, ``neg2log1m``, ``cos2pi``), with ``fastmath`` off, and one thread computes
one element from its counter ``start + i``, so the streams are the same on every backend.

Agreement with ``random_numpy``/``random_numba``:

* ``uniform`` (float64 and float32) and ``integers`` (raw and bounded, any integer
  dtype): integer arithmetic plus one exact scaling: bit-identical everywhere.
* ``normal``: bit-identical too. Every product of the log and cosine series that an
  addition uses is written with :func:`~catalytic.kernels.cuda._exact.mul` (``_mul``
  in the shared source), a multiply that the GPU never fuses into an FMA with the
  addition (see that module); the PTX checks find no product left that could be.

Integer outputs are written through an unsigned view of the output with the value
masked to the item width (``& mask``): the same bits as the CPU twin's truncating
conversion, and a store the simulator accepts.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from catalytic.kernels import random as _rnd
from catalytic.kernels.cuda._exact import mul
from catalytic.kernels.cuda.arrays import TPB, _blocks, _finish, _flat, _out_buffer

__all__ = ["random_cuda"]

GOLDEN = _rnd.GOLDEN

_splitmix64 = cuda.jit(device=True)(_rnd.splitmix64)
_uniform53 = cuda.jit(device=True)(_rnd.uniform53)
_uniform24 = cuda.jit(device=True)(_rnd.uniform24)
_mulhi64 = cuda.jit(device=True)(_rnd.mulhi64)

_neg2log1m = cuda.jit(device=True)(_rnd.rebind(_rnd.neg2log1m, _mul=mul))
_cos2pi = cuda.jit(device=True)(_rnd.rebind(_rnd.cos2pi, _mul=mul))


@cuda.jit
def _fill_kernel(kind, out, key, start, low, span, mask):
    """Element ``i`` of a flat output from counter ``start + i``; ``kind`` as the CPU's
    ``_fill_range`` (0 uniform53, 1 uniform24, 2 normal, 3 raw, 4 bounded). Integer
    kinds store ``value & mask`` into an unsigned view of the output."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        c = start + np.uint64(i)
        if kind == 0:
            out[i] = _uniform53(_splitmix64(key + c * GOLDEN))
        elif kind == 1:
            out[i] = _uniform24(_splitmix64(key + c * GOLDEN))
        elif kind == 2:
            c2 = c * np.uint64(2)
            x1 = _splitmix64(key + c2 * GOLDEN)
            x2 = _splitmix64(key + (c2 + np.uint64(1)) * GOLDEN)
            out[i] = math.sqrt(_neg2log1m(x1)) * _cos2pi(x2)
        elif kind == 3:
            out[i] = (_splitmix64(key + c * GOLDEN) + low) & mask
        else:
            out[i] = (_mulhi64(_splitmix64(key + c * GOLDEN), span) + low) & mask


def random_cuda(
    shape,
    seed,
    distribution="uniform",
    dtype=None,
    *,
    low=None,
    high=None,
    start=0,
    out=None,
    stream=0,
):
    """Counter-based random array computed on the device, one thread per element.

    The CUDA twin of :func:`catalytic.kernels.random.random_numba`: the same parameters,
    checks and values, bit for bit (the module docstring says how); only what differs is
    said here.

    Parameters
    ----------
    out : ndarray or device array, optional
        As the twin's, or a device array. Without it a device array is allocated.
    stream : numba stream or 0, optional
        Stream for the copies and the launch.

    Returns
    -------
    device array or ndarray
        Shaped ``shape``: ``out`` reshaped when given (a NumPy ``out`` is filled by a
        copy back), else a new device array.

    Notes
    -----
    O(n) work, no temporaries; each element depends only on its counter.

    Examples
    --------
    >>> import numpy as np
    >>> from catalytic.kernels.random import random_numpy
    >>> a = random_cuda(5, seed=3).copy_to_host()  # doctest: +SKIP
    >>> bool(np.array_equal(a, random_numpy(5, seed=3)))  # doctest: +SKIP
    True
    """
    shape, n, key, start_u, kind, dt, low_u, span_u = _rnd._parse(
        shape, seed, distribution, dtype, low, high, start
    )
    if out is None:
        out = cuda.device_array(n, dtype=dt, stream=stream)
    o, o_dev = _flat("out", out)
    if o.dtype != dt or o.shape[0] != n:
        raise ValueError(f"out must be a {dt} array of {n} elements")
    mask = np.uint64(0)
    if np.issubdtype(dt, np.integer):
        bits = 8 * dt.itemsize
        mask = np.uint64((1 << bits) - 1)
        o = o.view(np.dtype(f"u{dt.itemsize}"))
    if n:
        d_o = _out_buffer(o, o_dev, stream)
        _fill_kernel[_blocks(n), TPB, stream](kind, d_o, key, start_u, low_u, span_u, mask)
        _finish(d_o, o, o_dev, stream)
    return out.reshape(shape)
