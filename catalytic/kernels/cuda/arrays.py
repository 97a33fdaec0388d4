"""CUDA twins of :mod:`catalytic.kernels.cpu.arrays`: XOR, reductions, elementwise, matmul.

Every kernel is one thread per element (``i = cuda.grid(1)``, a bounds guard, the work),
launched on a 1-d grid of ``TPB`` threads per block; ``matmul`` uses ``MM_TPB`` x ``MM_TPB``
blocks. The host function beside each kernel validates, moves data and picks the launch
shape; the kernels allocate nothing and decide nothing (an ``op`` code selects the
operation, as in the CPU twin).

Arrays in, arrays out: every host function accepts NumPy arrays or CUDA device arrays
(anything with ``__cuda_array_interface__``). NumPy inputs are copied to the device;
the result goes where ``out`` lives: a device ``out`` is filled on the device and
returned, a NumPy ``out`` is filled by a copy back and returned. ``reduce`` returns a
NumPy scalar. ``stream=`` (default 0, the default stream) orders every copy and launch.

Agreement with the CPU twins:

* ``xor_bytes``, ``xor_elems``, integer ``reduce`` (exact sums, also the ``mean``),
  ``min``/``max``, ``scale``, ``normalize`` and the elementwise
  ``add sub mul div max min neg abs sqrt``: bit for bit, NaN and inf included.
* float ``sum``/``mean``: each block sums its ``TPB`` elements by a shared-memory tree,
  then the block sums are added with ``cuda.atomic.add`` in whatever order the blocks
  finish, so the last bits can change from run to run. The error is at most about
  ``(log2(TPB) + ceil(n / TPB) + 2) * eps * sum(|x|)``; the tests hold it to
  ``1e-12 * sum(|x|)`` against the CPU twin.
* ``pow exp log sin cos`` use libdevice on a GPU (1-2 ulp), the C library on the CPU:
  they agree to 4 ulp.
* ``matmul``: each ``out[i, j]`` adds its products in increasing ``k`` starting from 0.0,
  exactly like the CPU twin, so the simulator agrees bit for bit; on a GPU, NVVM
  contracts ``acc + a * b`` into an FMA (numba-cuda compiles with ``-fma=1`` even
  without ``fastmath``), so the result agrees to ``|out - ref| <= k eps (|a| @ |b|)``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float64, int64, uint64
from numba.cuda.cudadrv import devicearray

from catalytic.kernels.cpu.arrays import BINARY_OPS, REDUCE_OPS, UNARY_OPS, _sum_as
from catalytic.kernels.cuda import _transfer

__all__ = [
    "TPB",
    "MM_TPB",
    "xor_bytes",
    "xor_elems",
    "xor_bytes_batched",
    "reduce",
    "int_sum",
    "elementwise",
    "scale",
    "normalize",
    "matmul",
]

#: Threads per block of every 1-d launch.
TPB = 256
#: Side of the square tile (and thread block) of ``matmul``.
MM_TPB = 16
#: Elements per launch of an integer sum: the sum of up to 2**30 values (or 32-bit
#: halves of values) below 2**32 in magnitude stays below 2**62, so the int64
#: accumulators cannot overflow; longer arrays take several launches.
INT_SUM_LAUNCH = 1 << 30


# =========================================================================== host helpers


def _is_device(a):
    return bool(devicearray.is_cuda_ndarray(a)) or hasattr(a, "__cuda_array_interface__")


def _device_view(a):
    """A Numba device array for ``a`` (a Numba device array or a CAI object)."""
    if devicearray.is_cuda_ndarray(a):
        return a
    return cuda.as_cuda_array(a)


def _flat(name, a):
    """``(flat view, is_device)`` of a C-contiguous NumPy or device array."""
    if _is_device(a):
        a = _device_view(a)
        if not a.is_c_contiguous():
            raise ValueError(f"{name} must be C-contiguous")
        return a.reshape(a.size), True
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be an ndarray or a CUDA device array, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return a.reshape(-1), False


def _rows(name, a):
    """``(2-d array, is_device)`` of a C-contiguous (B, m) NumPy or device array."""
    if _is_device(a):
        a = _device_view(a)
        ok = a.is_c_contiguous()
        dev = True
    elif isinstance(a, np.ndarray):
        ok = a.flags.c_contiguous
        dev = False
    else:
        raise TypeError(f"{name} must be an ndarray or a CUDA device array, got {type(a).__name__}")
    if not ok:
        raise ValueError(f"{name} must be C-contiguous")
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-d (batch, items), got shape {tuple(a.shape)}")
    return a, dev


def _to_device(a, is_dev, stream):
    """Device copy of a NumPy array; device arrays pass through."""
    return a if is_dev else _transfer.to_device(a, stream=stream)


def _out_buffer(o, is_dev, stream):
    """Where a kernel writes ``o``: ``o`` itself on the device, else a fresh buffer."""
    return o if is_dev else cuda.device_array(o.shape, dtype=o.dtype, stream=stream)


def _finish(d, o, is_dev, stream):
    """Copy ``d`` back into the NumPy ``o`` (unless ``o`` is on the device); wait."""
    if not is_dev:
        _transfer.to_host(d, stream=stream, out=o)
        if stream:
            stream.synchronize()


def _blocks(n):
    return -(-n // TPB)


def _dev_ptr_range(a):
    iface = getattr(a, "__cuda_array_interface__", None)
    if iface is None:
        return None
    ptr = iface["data"][0]
    return ptr, ptr + a.size * a.dtype.itemsize


def _overlap(a, a_dev, b, b_dev):
    """True when two arrays share memory (device arrays: by pointer range)."""
    if a is b:
        return True
    if a_dev != b_dev:
        return False
    if not a_dev:
        return bool(np.shares_memory(a, b))
    ra, rb = _dev_ptr_range(a), _dev_ptr_range(b)
    if ra is None or rb is None:  # the simulator: its arrays wrap NumPy arrays
        aa, bb = getattr(a, "_ary", None), getattr(b, "_ary", None)
        return aa is not None and bb is not None and bool(np.shares_memory(aa, bb))
    return ra[0] < rb[1] and rb[0] < ra[1] and ra[0] != ra[1] and rb[0] != rb[1]


# =========================================================================== XOR


@cuda.jit
def _xor_kernel(data, key, out):
    """``out[i] = data[i] ^ key[i % len(key)]``."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = data[i] ^ key[i % key.shape[0]]


@cuda.jit
def _xor_batched_kernel(data, key, krow, out):
    """Row ``b`` of ``out``: ``data[b] ^ key[b * krow]`` repeated; one thread per byte."""
    t = cuda.grid(1)
    m = out.shape[1]
    if t < out.shape[0] * m:
        b = t // m
        j = t - b * m
        out[b, j] = data[b, j] ^ key[b * krow, j % key.shape[1]]


def xor_bytes(data_u8, key_u8, out_u8, *, stream=0):
    """XOR a byte stream with a repeating key: ``out[i] = data[i] ^ key[i % len(key)]``.

    Parameters
    ----------
    data_u8 : ndarray or device array of uint8, (n,)
        Input bytes.
    key_u8 : ndarray or device array of uint8, (p,)
        Key bytes, ``p >= 1`` (``p = 0`` is allowed only when ``n = 0``).
    out_u8 : ndarray or device array of uint8, (n,)
        Output; may be ``data_u8`` itself (in place).
    stream : numba stream or 0, optional
        Stream for the copies and the launch.

    Returns
    -------
    out_u8 : ndarray or device array of uint8
        ``out_u8``, filled.

    Raises
    ------
    TypeError
        If an array is not uint8 or not an array.
    ValueError
        If the lengths disagree, an array is not contiguous, or the key is empty.

    Notes
    -----
    O(n) work, one thread per byte, memory bound. Bit-identical to the CPU twin.

    Examples
    --------
    >>> import numpy as np
    >>> d = np.arange(5, dtype=np.uint8)
    >>> xor_bytes(d, np.array([1, 2], np.uint8), np.empty(5, np.uint8))  # doctest: +SKIP
    array([1, 3, 3, 1, 5], dtype=uint8)
    """
    data, data_dev = _flat("data_u8", data_u8)
    key, key_dev = _flat("key_u8", key_u8)
    out, out_dev = _flat("out_u8", out_u8)
    for name, a in (("data_u8", data), ("key_u8", key), ("out_u8", out)):
        if a.dtype != np.uint8:
            raise TypeError(f"{name} must be uint8, got {a.dtype}")
    n = data.shape[0]
    if out.shape[0] != n:
        raise ValueError(f"out_u8 has {out.shape[0]} bytes, data_u8 has {n}")
    if n == 0:
        return out_u8
    if key.shape[0] == 0:
        raise ValueError("key_u8 is empty")
    d_data = _to_device(data, data_dev, stream)
    d_key = _to_device(key, key_dev, stream)
    d_out = _out_buffer(out, out_dev, stream)
    _xor_kernel[_blocks(n), TPB, stream](d_data, d_key, d_out)
    _finish(d_out, out, out_dev, stream)
    return out_u8


def xor_elems(data, key, out, *, stream=0):
    """XOR an integer array with a key repeated elementwise: ``out[i] = data[i] ^ key[i % len(key)]``.

    Parameters
    ----------
    data : ndarray or device array of an integer dtype
        Input, C-contiguous, any shape (treated as flat).
    key : ndarray or device array of the same dtype, (p,)
        Key elements, ``p >= 1``.
    out : ndarray or device array of the same dtype and size as ``data``
        Output; may be ``data`` (in place).
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array

    Raises
    ------
    TypeError
        If the dtypes differ or are not integer.
    ValueError
        If the sizes disagree, an array is not contiguous or the key is empty.

    Notes
    -----
    O(n) work: :func:`xor_bytes` on uint8 views (repeating ``p`` elements is repeating
    their ``p * itemsize`` bytes on any byte order).

    Examples
    --------
    >>> import numpy as np
    >>> xor_elems(np.array([1, 2, 3], np.int32), np.array([1], np.int32),
    ...           np.empty(3, np.int32))  # doctest: +SKIP
    array([0, 3, 2], dtype=int32)
    """
    d, _ = _flat("data", data)
    k, _ = _flat("key", key)
    o, _ = _flat("out", out)
    if not np.issubdtype(d.dtype, np.integer):
        raise TypeError(f"data must have an integer dtype, got {d.dtype}")
    if k.dtype != d.dtype or o.dtype != d.dtype:
        raise TypeError(f"data, key and out must share a dtype, got {d.dtype}, {k.dtype}, {o.dtype}")
    if o.shape[0] != d.shape[0]:
        raise ValueError(f"out has {o.shape[0]} elements, data has {d.shape[0]}")
    xor_bytes(d.view(np.uint8), k.view(np.uint8), o.view(np.uint8), stream=stream)
    return out


def xor_bytes_batched(data_u8, key_u8, out_u8, *, stream=0):
    """:func:`xor_bytes` on every row of a (B, m) stack, in one launch over B*m threads.

    Parameters
    ----------
    data_u8 : ndarray or device array of uint8, (B, m)
    key_u8 : ndarray or device array of uint8, (p,), (1, p) or (B, p)
        One key for every row, or one key per row; each row restarts its key at 0.
    out_u8 : ndarray or device array of uint8, (B, m); may be ``data_u8``.
    stream : numba stream or 0, optional

    Returns
    -------
    out_u8 : ndarray or device array of uint8, (B, m)
        Row ``b`` equals ``xor_bytes(data_u8[b], key_b, ...)``.

    Raises
    ------
    TypeError
        If an array is not uint8.
    ValueError
        If the shapes disagree or the key is empty.

    Notes
    -----
    O(B m) work, one thread per byte.

    Examples
    --------
    >>> import numpy as np
    >>> d = np.zeros((2, 3), np.uint8)
    >>> xor_bytes_batched(d, np.array([[1], [2]], np.uint8), np.empty_like(d))  # doctest: +SKIP
    array([[1, 1, 1],
           [2, 2, 2]], dtype=uint8)
    """
    data, data_dev = _rows("data_u8", data_u8)
    if getattr(key_u8, "ndim", None) == 1:
        key_u8 = key_u8.reshape(1, key_u8.shape[0])
    key, key_dev = _rows("key_u8", key_u8)
    out, out_dev = _rows("out_u8", out_u8)
    for name, a in (("data_u8", data), ("key_u8", key), ("out_u8", out)):
        if a.dtype != np.uint8:
            raise TypeError(f"{name} must be uint8, got {a.dtype}")
    B, m = data.shape
    if tuple(out.shape) != (B, m):
        raise ValueError(f"out_u8 has shape {tuple(out.shape)}, data_u8 has {(B, m)}")
    if key.shape[0] not in (1, B):
        raise ValueError(f"key_u8 must have 1 or {B} rows, got {key.shape[0]}")
    if B * m == 0:
        return out_u8
    if key.shape[1] == 0:
        raise ValueError("key_u8 is empty")
    krow = 1 if key.shape[0] == B and B > 1 else 0
    d_data = _to_device(data, data_dev, stream)
    d_key = _to_device(key, key_dev, stream)
    d_out = _out_buffer(out, out_dev, stream)
    _xor_batched_kernel[_blocks(B * m), TPB, stream](d_data, d_key, krow, d_out)
    _finish(d_out, out, out_dev, stream)
    return out_u8


# =========================================================================== reductions


def _make_sum_kernel(acc):
    """Block tree sum in ``acc`` (a Numba type), then one atomic add per block."""

    def kernel(x, out):
        sm = cuda.shared.array(TPB, dtype=acc)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        v = acc(0)
        if i < x.shape[0]:
            v = acc(x[i])
        sm[t] = v
        cuda.syncthreads()
        s = TPB // 2
        while s > 0:
            if t < s:
                sm[t] += sm[t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0:
            cuda.atomic.add(out, 0, sm[0])

    return cuda.jit(kernel)


def _make_minmax_kernel(acc):
    """Block tree min (``op`` 0) or max (1) in ``acc``, then one atomic per block.

    Out-of-range threads load ``ident``. A NaN wins every comparison, so a block whose
    result is NaN sets ``nan[0] = 1`` instead of touching ``out``.
    """

    def kernel(x, op, ident, out, nan):
        sm = cuda.shared.array(TPB, dtype=acc)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        v = ident
        if i < x.shape[0]:
            v = acc(x[i])
        sm[t] = v
        cuda.syncthreads()
        s = TPB // 2
        while s > 0:
            if t < s:
                a = sm[t]
                b = sm[t + s]
                if a == a:
                    if b != b:
                        sm[t] = b
                    elif op == 0:
                        if b < a:
                            sm[t] = b
                    elif b > a:
                        sm[t] = b
            cuda.syncthreads()
            s //= 2
        if t == 0:
            r = sm[0]
            if r != r:
                nan[0] = 1
            elif op == 0:
                cuda.atomic.min(out, 0, r)
            else:
                cuda.atomic.max(out, 0, r)

    return cuda.jit(kernel)


@cuda.jit
def _sum_split_kernel(x, hmask, out):
    """Exact sum of 64-bit integers (int64, or uint64 viewed as int64) as two int64 sums,
    as the CPU twin's ``_sum_split_range``: block tree sums of the high halves
    ``(x >> 32) & hmask`` (``hmask`` -1 signed, 0xFFFFFFFF unsigned) and of the low
    halves ``x & 0xFFFFFFFF``, added atomically to ``out[0]`` and ``out[1]``."""
    sh = cuda.shared.array(TPB, dtype=int64)
    sl = cuda.shared.array(TPB, dtype=int64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    h = int64(0)
    lw = int64(0)
    if i < x.shape[0]:
        a = x[i]
        h = (a >> 32) & hmask
        lw = a & 0xFFFFFFFF
    sh[t] = h
    sl[t] = lw
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if t < s:
            sh[t] += sh[t + s]
            sl[t] += sl[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, sh[0])
        cuda.atomic.add(out, 1, sl[0])


_sum_f64_kernel = _make_sum_kernel(float64)
_sum_i64_kernel = _make_sum_kernel(int64)
_minmax_f64_kernel = _make_minmax_kernel(float64)
_minmax_i64_kernel = _make_minmax_kernel(int64)
_minmax_u64_kernel = _make_minmax_kernel(uint64)


def _numeric(name, a):
    """``(flat, is_device, is_bool)`` of a numeric array; bool is viewed as uint8."""
    x, dev = _flat(name, a)
    if x.dtype == np.bool_:
        return x.view(np.uint8), dev, True
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise TypeError(f"{name} must have an integer, float or bool dtype, got {x.dtype}")
    if x.dtype == np.float16:
        raise TypeError(f"{name}: float16 is not supported, cast to float32 or float64")
    return x, dev, False


def _sum_device(d_x, stream):
    """Float64 sum of a non-empty device array."""
    n = d_x.shape[0]
    d_out = _transfer.to_device(np.zeros(1, dtype=np.float64), stream=stream)
    _sum_f64_kernel[_blocks(n), TPB, stream](d_x, d_out)
    return _transfer.to_host(d_out, stream=stream)[0]


def int_sum(x, *, stream=0):
    """The exact sum of an integer or bool array, as a Python int (never wraps).

    Parameters
    ----------
    x : ndarray or device array of integer or bool dtype
        C-contiguous, native byte order, any shape (treated as flat).
    stream : numba stream or 0, optional

    Returns
    -------
    int
        ``sum(x.tolist())``, however large; equal to the CPU twin's.

    Raises
    ------
    TypeError
        If ``x`` is not an integer or bool array.

    Notes
    -----
    O(n) work, one thread per element, in launches of at most ``INT_SUM_LAUNCH``
    elements. Elements of up to 32 bits are summed in int64; 64-bit elements are split
    into 32-bit halves summed apart (``_sum_split_kernel``), so no accumulator can
    overflow. Each launch copies back one 16-byte (8-byte for narrower types) result;
    the per-launch sums are joined in Python ints.

    Examples
    --------
    >>> import numpy as np
    >>> int_sum(np.array([2**62, 2**62, 2**62], dtype=np.int64))  # doctest: +SKIP
    13835058055282163712
    """
    x, dev, _ = _numeric("x", x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"x must have an integer or bool dtype, got {x.dtype}")
    n = x.shape[0]
    if n == 0:
        return 0
    d_x = _to_device(x, dev, stream)
    split = x.dtype.itemsize == 8
    if split:
        d_x = d_x.view(np.int64)
        hmask = np.int64(0xFFFFFFFF if x.dtype.kind == "u" else -1)
    total = 0
    for lo in range(0, n, INT_SUM_LAUNCH):
        part = d_x if n <= INT_SUM_LAUNCH else d_x[lo : min(n, lo + INT_SUM_LAUNCH)]
        m = part.shape[0]
        if split:
            d_out = _transfer.to_device(np.zeros(2, dtype=np.int64), stream=stream)
            _sum_split_kernel[_blocks(m), TPB, stream](part, hmask, d_out)
            h, lw = _transfer.to_host(d_out, stream=stream).tolist()
            total += (h << 32) + lw
        else:
            d_out = _transfer.to_device(np.zeros(1, dtype=np.int64), stream=stream)
            _sum_i64_kernel[_blocks(m), TPB, stream](part, d_out)
            total += int(_transfer.to_host(d_out, stream=stream)[0])
    return total


def _minmax_device(d_x, op, stream):
    """``op`` 0 (min) or 1 (max) of a non-empty device array, as the accumulator type;
    NaN (float) when any element is NaN."""
    n = d_x.shape[0]
    dt = d_x.dtype
    if np.issubdtype(dt, np.floating):
        acc_t, kernel = np.float64, _minmax_f64_kernel
        ident = np.inf if op == 0 else -np.inf
    elif np.issubdtype(dt, np.unsignedinteger):
        acc_t, kernel = np.uint64, _minmax_u64_kernel
        ident = np.iinfo(np.uint64).max if op == 0 else 0
    else:
        acc_t, kernel = np.int64, _minmax_i64_kernel
        info = np.iinfo(np.int64)
        ident = info.max if op == 0 else info.min
    ident = acc_t(ident)
    d_out = _transfer.to_device(np.full(1, ident, dtype=acc_t), stream=stream)
    d_nan = _transfer.to_device(np.zeros(1, dtype=np.int32), stream=stream)
    kernel[_blocks(n), TPB, stream](d_x, op, ident, d_out, d_nan)
    r = _transfer.to_host(d_out, stream=stream)[0]
    if _transfer.to_host(d_nan, stream=stream)[0]:
        return acc_t(np.nan)
    return r


def reduce(x, op, *, stream=0):
    """Reduce a flat array with ``sum``, ``min``, ``max`` or ``mean``.

    Parameters
    ----------
    x : ndarray or device array
        C-contiguous, integer, bool or float32/float64 dtype (treated as flat).
    op : {"sum", "min", "max", "mean"}
    stream : numba stream or 0, optional

    Returns
    -------
    scalar
        As the CPU twin: ``sum`` float64 for floats, int64 for signed integers and bool,
        uint64 for unsigned; ``min``/``max`` a scalar of ``x.dtype`` (NaN if any element
        is NaN); ``mean`` float64 (NaN for an empty array). A NumPy scalar, also for a
        device ``x`` (one 8-byte copy back).

    Raises
    ------
    ValueError
        If ``op`` is unknown, or ``min``/``max`` of an empty array.
    TypeError
        If the dtype is not supported.
    OverflowError
        If the exact sum of integers does not fit the result dtype (as the CPU twin).

    Notes
    -----
    O(n) work, one thread per element: a shared-memory tree reduction per block of
    ``TPB`` threads, then ``cuda.atomic.add/min/max`` of the block results into a
    1-element output. Integer sums are exact (:func:`int_sum`) and the integer ``mean``
    is that sum over ``n``, correctly rounded: bit-identical to the CPU twin. min/max
    are exact and NaN wins, as in ``np.min``. Float sums (float32 is summed in float64)
    depend on the order in which blocks finish: error at most about
    ``(log2(TPB) + ceil(n / TPB) + 2) * eps * sum(|x|)``; NaN and inf propagate.

    Examples
    --------
    >>> import numpy as np
    >>> reduce(np.arange(10), "sum")  # doctest: +SKIP
    np.int64(45)
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {REDUCE_OPS}")
    x, dev, is_bool = _numeric("x", x)
    n = x.shape[0]
    is_float = np.issubdtype(x.dtype, np.floating)
    if op == "sum" or op == "mean":
        if op == "mean" and n == 0:
            return np.float64(np.nan)
        if not is_float:
            total = int_sum(x, stream=stream)
            if op == "mean":
                return np.float64(total / n)
            return _sum_as(total, "bool" if is_bool else x.dtype)
        s = _sum_device(_to_device(x, dev, stream), stream) if n else 0.0
        return np.float64(s / n) if op == "mean" else np.float64(s)
    if n == 0:
        raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
    r = _minmax_device(_to_device(x, dev, stream), 0 if op == "min" else 1, stream)
    if is_bool:
        return np.bool_(r)
    return x.dtype.type(r)


# =========================================================================== elementwise


@cuda.jit
def _binary_kernel(code, a, b, out):
    """``out[i] = op(a[i], b[i])``; ``code`` indexes ``BINARY_OPS``."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        x = a[i]
        y = b[i]
        if code == 0:
            r = x + y
        elif code == 1:
            r = x - y
        elif code == 2:
            r = x * y
        elif code == 3:
            r = x / y
        elif code == 4:  # np.maximum: NaN propagates, ties keep x
            if x != x or x >= y:
                r = x
            else:
                r = y
        elif code == 5:  # np.minimum
            if x != x or x <= y:
                r = x
            else:
                r = y
        else:
            r = x**y
        out[i] = r


@cuda.jit
def _unary_kernel(code, a, out):
    """``out[i] = op(a[i])``; ``code`` indexes ``UNARY_OPS``."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        x = a[i]
        if code == 0:
            r = -x
        elif code == 1:
            r = abs(x)
        elif code == 2:
            r = math.sqrt(x)
        elif code == 3:
            r = math.exp(x)
        elif code == 4:
            r = math.log(x)
        elif code == 5:
            r = math.sin(x)
        else:
            r = math.cos(x)
        out[i] = r


def _check_f64(name, a, n):
    if a.dtype != np.float64:
        raise TypeError(f"{name} must be float64 (cast beforehand), got {a.dtype}")
    if a.shape[0] != n:
        raise ValueError(f"{name} has {a.shape[0]} elements, expected {n}")


def elementwise(op, a, b, out, *, stream=0):
    """Elementwise float64 maths, ``out = op(a, b)`` or ``out = op(a)``.

    Parameters
    ----------
    op : str
        Binary: ``add sub mul div max min pow``; unary: ``neg abs sqrt exp log sin cos``.
    a : ndarray or device array of float64
        First operand, C-contiguous, any shape (treated as flat).
    b : ndarray or device array of float64, or None
        Second operand, same size; None for a unary op.
    out : ndarray or device array of float64
        Output, same size; may be ``a`` or ``b`` (in place).
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array of float64

    Raises
    ------
    ValueError
        If ``op`` is unknown, ``b`` does not match the arity, or the sizes differ.
    TypeError
        If an array is not float64.

    Notes
    -----
    O(n) work, one thread per element; the op is an int code, the same for every
    thread. ``+ - * / neg abs sqrt`` are correctly rounded (``fastmath`` off) and
    ``max``/``min`` follow ``np.maximum``/``np.minimum`` (NaN propagates), so these are
    bit-identical to the CPU twin; ``pow exp log sin cos`` use libdevice (within 4 ulp
    of NumPy). On a GPU, out-of-domain inputs give NaN/inf as in NumPy; the simulator
    runs Python's ``math`` and raises instead.

    Examples
    --------
    >>> import numpy as np
    >>> elementwise("add", np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.empty(2))  # doctest: +SKIP
    array([4., 6.])
    """
    if op in BINARY_OPS:
        if b is None:
            raise ValueError(f"{op!r} is binary: b is required")
    elif op in UNARY_OPS:
        if b is not None:
            raise ValueError(f"{op!r} is unary: b must be None")
    else:
        raise ValueError(f"unknown op {op!r}; expected one of {BINARY_OPS + UNARY_OPS}")
    x, x_dev = _flat("a", a)
    n = x.shape[0]
    o, o_dev = _flat("out", out)
    _check_f64("a", x, n)
    _check_f64("out", o, n)
    if op in BINARY_OPS:
        y, y_dev = _flat("b", b)
        _check_f64("b", y, n)
    if n == 0:
        return out
    d_x = _to_device(x, x_dev, stream)
    d_o = _out_buffer(o, o_dev, stream)
    if op in BINARY_OPS:
        d_y = _to_device(y, y_dev, stream)
        _binary_kernel[_blocks(n), TPB, stream](BINARY_OPS.index(op), d_x, d_y, d_o)
    else:
        _unary_kernel[_blocks(n), TPB, stream](UNARY_OPS.index(op), d_x, d_o)
    _finish(d_o, o, o_dev, stream)
    return out


# =========================================================================== scale / normalize


@cuda.jit
def _affine_kernel(x, shift, div, mul, out):
    """``out[i] = (float64(x[i]) - shift) / div * mul`` (no multiply-add to contract)."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = (float64(x[i]) - shift) / div * mul


@cuda.jit
def _fill_kernel(out, value):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = value


def scale(x, factor, out, *, stream=0):
    """Multiply by a constant: ``out = float64(x) * factor``.

    Parameters
    ----------
    x : ndarray or device array of integer, bool or float dtype
        C-contiguous, any shape (treated as flat).
    factor : float
    out : ndarray or device array of float64, same size; may be ``x`` (float64).
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array of float64
        Bit-identical to ``x.astype(np.float64) * factor``.

    Raises
    ------
    TypeError
        If ``x`` is not numeric or ``out`` is not float64.
    ValueError
        If the sizes differ.

    Notes
    -----
    O(n) work, one thread per element.

    Examples
    --------
    >>> import numpy as np
    >>> scale(np.array([1, 2, 3]), 0.5, np.empty(3))  # doctest: +SKIP
    array([0.5, 1. , 1.5])
    """
    v, v_dev, _ = _numeric("x", x)
    o, o_dev = _flat("out", out)
    n = v.shape[0]
    _check_f64("out", o, n)
    if n == 0:
        return out
    d_v = _to_device(v, v_dev, stream)
    d_o = _out_buffer(o, o_dev, stream)
    _affine_kernel[_blocks(n), TPB, stream](d_v, 0.0, 1.0, float(factor), d_o)
    _finish(d_o, o, o_dev, stream)
    return out


def normalize(x, out, *, stream=0):
    """Min-max normalisation to [0, 1]: ``out = (x - min) / (max - min)`` in float64.

    Parameters
    ----------
    x : ndarray or device array of integer, bool or float dtype
        C-contiguous, any shape (treated as flat).
    out : ndarray or device array of float64, same size; may be ``x`` (float64).
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array of float64
        All zeros when ``max == min``; all NaN when ``x`` holds a NaN; otherwise
        bit-identical to the CPU twin.

    Raises
    ------
    TypeError
        If ``x`` is not numeric or ``out`` is not float64.
    ValueError
        If the sizes differ.

    Notes
    -----
    Three launches, O(n) each: the min and max reductions of :func:`reduce` (their two
    scalars come back to the host, which picks the case), then the affine map.

    Examples
    --------
    >>> import numpy as np
    >>> normalize(np.array([2.0, 4.0, 3.0]), np.empty(3))  # doctest: +SKIP
    array([0. , 1. , 0.5])
    """
    v, v_dev, _ = _numeric("x", x)
    o, o_dev = _flat("out", out)
    n = v.shape[0]
    _check_f64("out", o, n)
    if n == 0:
        return out
    d_v = _to_device(v, v_dev, stream)
    d_o = _out_buffer(o, o_dev, stream)
    mn = float(_minmax_device(d_v, 0, stream))
    mx = float(_minmax_device(d_v, 1, stream))
    if mn != mn or mx != mx:
        _fill_kernel[_blocks(n), TPB, stream](d_o, np.nan)
    elif mx == mn:
        _fill_kernel[_blocks(n), TPB, stream](d_o, 0.0)
    else:
        _affine_kernel[_blocks(n), TPB, stream](d_v, mn, mx - mn, 1.0, d_o)
    _finish(d_o, o, o_dev, stream)
    return out


# =========================================================================== matmul


@cuda.jit
def _matmul_kernel(a, b, out):
    """Classic tiled ``out = a @ b``: each block stages MM_TPB x MM_TPB tiles of ``a`` and
    ``b`` in shared memory; each thread owns ``out[row, col]`` and adds its products in
    increasing k from 0.0. Out-of-range tile entries are 0.0 (they add +0.0)."""
    sa = cuda.shared.array((MM_TPB, MM_TPB), dtype=float64)
    sb = cuda.shared.array((MM_TPB, MM_TPB), dtype=float64)
    col, row = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    m = a.shape[0]
    kk = a.shape[1]
    n = b.shape[1]
    acc = 0.0
    for t0 in range(0, kk, MM_TPB):
        ka = t0 + tx
        kb = t0 + ty
        if row < m and ka < kk:
            sa[ty, tx] = a[row, ka]
        else:
            sa[ty, tx] = 0.0
        if kb < kk and col < n:
            sb[ty, tx] = b[kb, col]
        else:
            sb[ty, tx] = 0.0
        cuda.syncthreads()
        for q in range(MM_TPB):
            acc += sa[ty, q] * sb[q, tx]
        cuda.syncthreads()
    if row < m and col < n:
        out[row, col] = acc


def matmul(a, b, out, *, stream=0):
    """Dense float64 matrix product ``out = a @ b`` with shared-memory tiles.

    Parameters
    ----------
    a : ndarray or device array of float64, (m, k), C-contiguous
    b : ndarray or device array of float64, (k, n), C-contiguous
    out : ndarray or device array of float64, (m, n), C-contiguous; must not overlap
        ``a`` or ``b``.
    stream : numba stream or 0, optional

    Returns
    -------
    out : ndarray or device array of float64, (m, n)

    Raises
    ------
    TypeError
        If an array is not float64.
    ValueError
        If the shapes do not chain, an array is not 2-d C-contiguous, or ``out``
        overlaps an input.

    Notes
    -----
    O(m k n) flops on a 2-d grid of ``MM_TPB`` x ``MM_TPB`` blocks, one thread per
    output element; each input element is read from global memory ``n / MM_TPB`` (resp.
    ``m / MM_TPB``) times. Products are added in increasing k from 0.0, as the CPU twin
    does: bit-identical in the simulator; on a GPU the multiply-adds are contracted to
    FMAs, within ``k eps (|a| @ |b|)`` of the CPU twin.

    Examples
    --------
    >>> import numpy as np
    >>> matmul(np.eye(2), np.array([[1.0, 2.0], [3.0, 4.0]]), np.empty((2, 2)))  # doctest: +SKIP
    array([[1., 2.],
           [3., 4.]])
    """
    arrs = []
    for name, x in (("a", a), ("b", b), ("out", out)):
        x2, dev = _rows(name, x)
        if x2.dtype != np.float64:
            raise TypeError(f"{name} must be float64, got {x2.dtype}")
        arrs.append((x2, dev))
    (a2, a_dev), (b2, b_dev), (o2, o_dev) = arrs
    if a2.shape[1] != b2.shape[0] or tuple(o2.shape) != (a2.shape[0], b2.shape[1]):
        raise ValueError(
            f"shapes do not chain: {tuple(a2.shape)} @ {tuple(b2.shape)} -> {tuple(o2.shape)}"
        )
    if _overlap(o2, o_dev, a2, a_dev) or _overlap(o2, o_dev, b2, b_dev):
        raise ValueError("out must not overlap a or b")
    m, n = o2.shape
    if m * n == 0:
        return out
    d_a = _to_device(a2, a_dev, stream)
    d_b = _to_device(b2, b_dev, stream)
    d_o = _out_buffer(o2, o_dev, stream)
    grid = (-(-n // MM_TPB), -(-m // MM_TPB))
    _matmul_kernel[grid, (MM_TPB, MM_TPB), stream](d_a, d_b, d_o)
    _finish(d_o, o2, o_dev, stream)
    return out
