"""CUDA twins of :mod:`catalytic.kernels.cpu.arrays`: XOR, reductions, elementwise, matmul.
Each host function's docstring names its twin and says only what differs from it.

Launches
--------
The 1-d kernels walk their elements with a grid stride (``for i in range(cuda.grid(1), n,
cuda.gridsize(1))``), so the grid is sized to the device, not to the data
(:func:`_shape`): blocks of ``TPB`` threads (a smaller power of two for fewer elements),
at most 8 blocks per multiprocessor on a GPU (one wave of resident threads; each thread
then handles ``n / (2048 * multiprocessors)`` elements); under the CUDA simulator,
where every launched thread costs real time, at most ``SIM_BLOCKS`` blocks of
``SIM_THREADS``. The host function beside each kernel validates, moves data and picks
the launch shape; the kernels allocate nothing and decide nothing (an ``op`` code
selects the operation, as in the CPU twin).

* XOR works on 8-byte words. Where ``data`` and ``out`` lie at the same offset from an
  8-byte boundary, the bytes before the first boundary and after the last whole word go
  through the byte kernel and the rest through the word kernel, on ``uint64`` views. A
  thread assembles its key word once (eight key bytes, one modulo); the launch makes the
  grid's x stride a multiple of the key period in words, ``p / gcd(p, 8)``, or covers a
  row in one pass (:func:`_xor_grid`), so that word is the key for every word the thread
  visits and the inner loop only loads, XORs and stores (two words a step, both loaded
  first: 16 bytes in flight per thread). Arrays at different offsets, and batched rows
  that are not whole aligned words, take the byte kernel, with the key byte fixed per
  thread the same way. Batched XOR runs the same two kernels on a 2-d grid: x over the
  words (or bytes) of a row, y over the rows.
* Reductions are deterministic: each thread adds up its grid-stride share in order,
  each block combines its threads by a shared-memory tree (the simulator has no warp
  shuffles) and writes one partial, and a second launch of one block combines the
  partials by the same tree. No atomics: the order of every operation depends only on
  ``n`` and the launch shape (the number of multiprocessors), so a float sum gives the
  same bits on every run on a given GPU model. ``normalize`` finds min and max in one
  fused pass.
* ``matmul`` goes through cuBLAS (``cupy.matmul``) when CuPy can be imported and a GPU
  is present (:func:`_cupy`); otherwise, and always under the simulator, through
  ``_matmul_kernel``, one thread per output element on ``MM_TPB`` x ``MM_TPB`` blocks.

Arrays in, arrays out: every host function accepts NumPy arrays or CUDA device arrays
(anything with ``__cuda_array_interface__``). NumPy inputs are copied to the device;
the result goes where ``out`` lives: a device ``out`` is filled on the device and
returned, a NumPy ``out`` is filled by a copy back and returned. ``reduce`` returns a
NumPy scalar. ``stream=`` (default 0, the default stream) orders every copy and launch.

Agreement with the CPU twins:

* ``xor_bytes``, ``xor_elems``, ``xor_bytes_batched``, integer ``reduce`` (exact sums,
  also the ``mean``), ``min``/``max``, ``scale``, ``normalize`` and the elementwise
  ``add sub mul div max min neg abs sqrt``: bit for bit, NaN and inf included.
* float ``sum``/``mean``: reproducible bit for bit from run to run (above), but summed
  in another order than the CPU twin: error at most about
  ``(ceil(n / T) + ceil(B / TPB) + 2 log2(TPB)) * eps * sum(|x|)``, with ``T`` the
  threads and ``B`` the blocks of the first launch (on a GPU ``T = 2048 *
  multiprocessors``, 270,336 on a 132-multiprocessor H100); the tests hold it to
  ``1e-12 * sum(|x|)`` against the CPU twin and check the exact order against a NumPy
  replay of it.
* ``pow exp log sin cos`` use libdevice on a GPU (1-2 ulp), the C library on the CPU:
  they agree to 4 ulp.
* ``matmul``: the Numba kernel adds each ``out[i, j]``'s products in increasing ``k``
  starting from 0.0, exactly like the CPU twin, so the simulator agrees bit for bit; on
  a GPU, NVVM contracts ``acc + a * b`` into an FMA (numba-cuda compiles with
  ``-fma=1`` even without ``fastmath``), and cuBLAS sums in an order of its own, also
  with FMAs: either agrees to ``|out - ref| <= k eps (|a| @ |b|)``.
"""

from __future__ import annotations

import functools
import math
import os
import sys

import numpy as np
from numba import cuda, float64, int64, uint8, uint64
from numba.cuda.cudadrv import devicearray

from catalytic.kernels.cpu.arrays import BINARY_OPS, REDUCE_OPS, UNARY_OPS, _sum_as
from catalytic.kernels.cuda import _transfer

__all__ = [
    "TPB",
    "MM_TPB",
    "SIM_THREADS",
    "SIM_BLOCKS",
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

#: Threads per block of the 1-d launches on a GPU (the size of the reductions' shared
#: arrays, the most any block may have).
TPB = 256
#: Side of the square tile (and thread block) of ``matmul``.
MM_TPB = 16
#: Threads per block and most blocks of a grid-stride launch under the CUDA simulator,
#: where every thread, and every barrier it waits at, costs real time (on a GPU:
#: ``TPB`` threads, 8 blocks per multiprocessor). Small, so that the tests' sizes run
#: through the stride loops several times and reach the reductions' second launch.
SIM_THREADS = 32
SIM_BLOCKS = 2
#: Elements per launch of an integer sum: the sum of up to 2**30 values (or 32-bit
#: halves of values) below 2**32 in magnitude stays below 2**62, so the int64
#: accumulators, each holding the sum of a subset, cannot overflow; longer arrays take
#: several launches.
INT_SUM_LAUNCH = 1 << 30

_SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
#: The word kernel assembles key words little-endian, as CUDA devices (and the hosts
#: that run the simulator) store them.
_LITTLE = sys.byteorder == "little"


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


def _resident_blocks():
    """Blocks of ``TPB`` threads the GPU holds at once: 8 per multiprocessor (2048
    threads each). The grid-stride launches of every CUDA module size to this."""
    return 8 * int(getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1))


def _max_blocks():
    """Most blocks of a grid-stride launch: one wave of resident blocks on a GPU
    (:func:`_resident_blocks`), ``SIM_BLOCKS`` under the simulator."""
    if _SIMULATOR:
        return SIM_BLOCKS
    return _resident_blocks()


def _threads(work):
    """Threads per block for ``work >= 1`` items: ``TPB`` (``SIM_THREADS`` under the
    simulator), or the power of two at or above ``work`` when that is smaller (the
    reduction trees need a power of two)."""
    return min(SIM_THREADS if _SIMULATOR else TPB, 1 << (work - 1).bit_length())


def _shape(work):
    """``(blocks, threads)`` of a 1-d grid-stride launch over ``work >= 1`` items."""
    threads = _threads(work)
    return min(-(-work // threads), _max_blocks()), threads


def _launch(kernel, work, stream, *args):
    """``kernel(*args)`` on the grid-stride launch shape for ``work >= 1`` items."""
    blocks, threads = _shape(work)
    kernel[blocks, threads, stream](*args)


def _address(a):
    """Device address of the first byte of a device array (under the simulator, of the
    NumPy array it wraps)."""
    ary = getattr(a, "_ary", None)
    if ary is not None:
        return ary.ctypes.data
    return a.__cuda_array_interface__["data"][0]


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


def _make_xor_kernel(item):
    """XOR kernel on ``item`` (uint8 or uint64) views, with a 2-d grid stride: x over the
    items of a row, y over the rows."""
    size = item.bitwidth // 8

    def kernel(data, key, krow, k0, out):
        """Row ``b`` of ``out``: ``data[b] ^ key[b * krow]``, item ``j`` meeting the key
        bytes from offset ``k0 + size * j`` (mod ``p``) on, little-endian.

        Each thread assembles its key item once per row; the launch (:func:`_xor_grid`)
        keeps the x stride a multiple of the key period in items, so it serves every
        item the thread visits in the row. Two items per step, both loaded before
        either is stored (``out`` may be ``data``); unsigned item indices need no
        negative-index check.
        """
        gx, y = cuda.grid(2)
        gsx, sy = cuda.gridsize(2)
        x = uint64(gx)
        sx = uint64(gsx)
        w = uint64(out.shape[1])
        p = key.shape[1]
        c = (k0 + size * gx) % p
        for b in range(y, out.shape[0], sy):
            r = b * krow
            k = uint64(0)
            o = c
            for e in range(size):
                k |= uint64(key[r, o]) << uint64(8 * e)
                o += 1
                if o == p:
                    o = 0
            kw = item(k)
            j = x
            while j + sx < w:
                u = data[b, j]
                v = data[b, j + sx]
                out[b, j] = u ^ kw
                out[b, j + sx] = v ^ kw
                j += sx + sx
            if j < w:
                out[b, j] = data[b, j] ^ kw

    return cuda.jit(kernel)


_xor_bytes_kernel = _make_xor_kernel(uint8)
_xor_words_kernel = _make_xor_kernel(uint64)


def _xor_grid(rows, items, period):
    """``(grid, block)`` of an XOR launch over ``rows`` x ``items`` whose key repeats every
    ``period`` items: the x stride (grid x block width) is a multiple of ``period``, or
    the x threads cover a row in one pass; at most :func:`_max_blocks` blocks unless a
    longer period needs more."""
    tx = _threads(items)
    ty = _threads(rows * tx) // tx  # rows per block: short rows share a block
    need = -(-items // tx)
    q = period // math.gcd(period, tx)  # fewest blocks whose threads span whole periods
    bx = min(need, q * max(1, min(need, _max_blocks()) // q))
    by = min(-(-rows // ty), max(1, _max_blocks() // bx))
    return (bx, by), (tx, ty)


def _xor_launch(kernel, size, data, key, krow, k0, out, stream):
    rows, items = out.shape
    p = key.shape[1]
    grid, block = _xor_grid(rows, items, p // math.gcd(p, size))
    kernel[grid, block, stream](data, key, krow, np.int64(k0), out)


def _xor_device(data, key, krow, out, stream):
    """``out = data ^ key`` on (B, m) uint8 device arrays; row ``b`` takes key row
    ``b * krow`` from its first byte. Whole aligned words through the word kernel, the
    rest through the byte kernel."""
    B, m = out.shape
    p = key.shape[1]
    off = _address(data) % 8
    h = min(m, -off % 8)  # bytes before the first 8-byte boundary
    w = (m - h) // 8
    if not (_LITTLE and w and _address(out) % 8 == off and (B == 1 or (h == 0 and m % 8 == 0))):
        _xor_launch(_xor_bytes_kernel, 1, data, key, krow, 0, out, stream)
        return
    if h == 0 and 8 * w == m:
        _xor_launch(_xor_words_kernel, 8, data.view(np.uint64), key, krow, 0,
                    out.view(np.uint64), stream)
        return
    d, o = data.reshape(m), out.reshape(m)
    e = h + 8 * w
    for lo, hi in ((0, h), (h, e), (e, m)):
        if hi > lo:
            dd, oo = d[lo:hi], o[lo:hi]
            if (lo, hi) == (h, e):
                _xor_launch(_xor_words_kernel, 8, dd.view(np.uint64).reshape(1, w), key, krow,
                            lo % p, oo.view(np.uint64).reshape(1, w), stream)
            else:
                _xor_launch(_xor_bytes_kernel, 1, dd.reshape(1, hi - lo), key, krow, lo % p,
                            oo.reshape(1, hi - lo), stream)


def _check_u8(**arrays):
    for name, a in arrays.items():
        if a.dtype != np.uint8:
            raise TypeError(f"{name} must be uint8, got {a.dtype}")


def xor_bytes(data_u8, key_u8, out_u8, *, stream=0):
    """XOR a byte stream with a repeating key, on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.xor_bytes`: the same contract and
    the same bytes; only what differs is said here.

    Parameters
    ----------
    data_u8, key_u8, out_u8 : ndarray or device array of uint8
        As the twin's; device arrays are read and written where they are (see "Arrays in,
        arrays out" in the module docstring).
    stream : numba stream or 0, optional
        Stream for the copies and the launches.

    Returns
    -------
    out_u8 : ndarray or device array of uint8
        ``out_u8``, filled.

    Raises
    ------
    TypeError
        Also when an argument is not an array.

    Notes
    -----
    O(n) work, memory bound. When ``data`` and ``out`` start at the same offset from an
    8-byte boundary (always for NumPy arrays, which are copied to fresh device buffers),
    the whole words between the first and the last boundary go through the word kernel
    (8 bytes per thread and stride step) and the at most 7 + 7 bytes around them through
    the byte kernel: up to three launches. Otherwise one launch of the byte kernel. The
    key item of each thread is fixed (see the module docstring): no modulo in the loops.

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
    _check_u8(data_u8=data, key_u8=key, out_u8=out)
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
    _xor_device(d_data.reshape(1, n), d_key.reshape(1, key.shape[0]), 0, d_out.reshape(1, n),
                stream)
    _finish(d_out, out, out_dev, stream)
    return out_u8


def xor_elems(data, key, out, *, stream=0):
    """XOR an integer array with a key repeated elementwise, on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.xor_elems`: the same contract and
    the same bits; only what differs is said here.

    Parameters
    ----------
    data, key, out : ndarray or device array of one integer dtype
        As the twin's; device arrays are read and written where they are.
    stream : numba stream or 0, optional
        Stream for the copies and the launches.

    Returns
    -------
    out : ndarray or device array
        ``out``, filled.

    Notes
    -----
    :func:`xor_bytes` on uint8 views, as in the twin.

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
    """:func:`xor_bytes` on every row of a (B, m) stack, in one launch.

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
    O(B m) work, memory bound, on a 2-d grid (x along a row, y over the rows). The word
    kernel when the rows are whole 8-byte words on 8-byte boundaries (``m`` a multiple
    of 8, ``data`` and ``out`` aligned: always for NumPy arrays) or ``B = 1``, as in
    :func:`xor_bytes`; the byte kernel otherwise. Bit-identical to the CPU twin row by row.

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
    _check_u8(data_u8=data, key_u8=key, out_u8=out)
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
    _xor_device(d_data, d_key, krow, d_out, stream)
    _finish(d_out, out, out_dev, stream)
    return out_u8


# =========================================================================== reductions


@cuda.jit(device=True)
def _add(a, b):
    return a + b


@cuda.jit(device=True)
def _lo(a, b):
    """``np.minimum(a, b)``: a NaN wins, a tie keeps ``a``."""
    if a != a or a <= b:
        return a
    return b


@cuda.jit(device=True)
def _hi(a, b):
    """``np.maximum(a, b)``: a NaN wins, a tie keeps ``a``."""
    if a != a or a >= b:
        return a
    return b


def _make_tree(fa, fb):
    """A device function folding a pair of values per thread over a block by a
    shared-memory tree (``blockDim.x`` a power of two ``<= TPB``), ``fa`` over the first
    values and ``fb`` over the second: thread ``t`` takes in ``t + s`` for s = blockDim/2,
    blockDim/4, ..., 1, a fixed order. Thread 0 writes the pair to ``out[0, block]`` and
    ``out[1, block]``; ``sa`` and ``sb`` hold ``TPB`` entries each."""

    @cuda.jit(device=True)
    def tree(sa, sb, a, b, out):
        t = cuda.threadIdx.x
        sa[t] = a
        sb[t] = b
        cuda.syncthreads()
        s = cuda.blockDim.x // 2
        while s > 0:
            if t < s:
                sa[t] = fa(sa[t], sa[t + s])
                sb[t] = fb(sb[t], sb[t + s])
            cuda.syncthreads()
            s //= 2
        if t == 0:
            out[0, cuda.blockIdx.x] = sa[0]
            out[1, cuda.blockIdx.x] = sb[0]

    return tree


_sum_tree = _make_tree(_add, _add)


def _make_fold_kernel(acc, fa, fb, idempotent):
    """A block reduction in ``acc`` (a Numba type) that writes two values per block:
    ``fa`` folded over row 0 of a 2-d ``x``, ``fb`` over its last row. Sums
    (``idempotent`` False) start from 0; min and max start from the row's first
    element, so they need no identity."""
    tree = _make_tree(fa, fb)

    def kernel(x, out):
        """``out[0, block]``, ``out[1, block]``: ``fa`` over ``x[0]`` and ``fb`` over
        ``x[-1]``, this block's grid-stride share (each thread folding its elements in
        order, then the block tree). ``x`` has one row (then both use it, read once),
        or the two rows of partials a first launch wrote."""
        sa = cuda.shared.array(TPB, dtype=acc)
        sb = cuda.shared.array(TPB, dtype=acc)
        last = x.shape[0] - 1
        if idempotent:
            a = acc(x[0, 0])
            b = acc(x[last, 0])
        else:
            a = acc(0)
            b = acc(0)
        for i in range(cuda.grid(1), x.shape[1], cuda.gridsize(1)):
            v = acc(x[0, i])
            a = fa(a, v)
            if last:
                v = acc(x[last, i])
            b = fb(b, v)
        tree(sa, sb, a, b, out)

    return cuda.jit(kernel)


@cuda.jit
def _sum_split_kernel(x, hmask, out):
    """Block sums of 64-bit integers (int64, or uint64 viewed as int64) as two int64
    sums, as the CPU twin's ``_sum_split_range``: ``out[0, block]`` of the high halves
    ``(x >> 32) & hmask`` (``hmask`` -1 signed, 0xFFFFFFFF unsigned), ``out[1, block]``
    of the low halves ``x & 0xFFFFFFFF``, over this block's grid-stride share."""
    sh = cuda.shared.array(TPB, dtype=int64)
    sl = cuda.shared.array(TPB, dtype=int64)
    h = int64(0)
    lw = int64(0)
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        a = x[i]
        h += (a >> 32) & hmask
        lw += a & 0xFFFFFFFF
    _sum_tree(sh, sl, h, lw, out)


_sum_f64_kernel = _make_fold_kernel(float64, _add, _add, False)
_sum_i64_kernel = _make_fold_kernel(int64, _add, _add, False)
_minmax_f64_kernel = _make_fold_kernel(float64, _lo, _hi, True)
_minmax_i64_kernel = _make_fold_kernel(int64, _lo, _hi, True)
_minmax_u64_kernel = _make_fold_kernel(uint64, _lo, _hi, True)


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


def _block_reduce(first, finish, x, acc, stream, *args):
    """Run ``first(x, *args, partials)`` on the grid-stride shape for ``x``'s last axis,
    writing two values per block; when there are several blocks, ``finish(partials,
    result)`` on one block combines them in a fixed order. Returns the two results on
    the host (one 16-byte copy)."""
    blocks, threads = _shape(x.shape[x.ndim - 1])
    part = cuda.device_array((2, blocks), dtype=acc, stream=stream)
    first[blocks, threads, stream](x, *args, part)
    if blocks > 1:
        res = cuda.device_array((2, 1), dtype=acc, stream=stream)
        finish[1, _threads(blocks), stream](part, res)
        part = res
    h = _transfer.to_host(part, stream=stream)
    if stream:
        stream.synchronize()
    return h[:, 0]


def _sum_device(d_x, stream):
    """Float64 sum of a non-empty device array."""
    row = d_x.reshape(1, d_x.shape[0])
    return _block_reduce(_sum_f64_kernel, _sum_f64_kernel, row, np.float64, stream)[0]


def int_sum(x, *, stream=0):
    """The exact sum of an integer or bool array, as a Python int, on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.int_sum`: the same contract and the
    same exact sum; only what differs is said here.

    Parameters
    ----------
    x : ndarray or device array of integer or bool dtype
        As the twin's; a device array is read where it is.
    stream : numba stream or 0, optional
        Stream for the copies and the launches.

    Notes
    -----
    O(n) work, memory bound, in launches of at most ``INT_SUM_LAUNCH`` elements, each a
    grid-stride block reduction and (for several blocks) a one-block launch over the
    block partials. Elements of up to 32 bits are summed in int64; 64-bit elements are
    split into 32-bit halves summed apart (``_sum_split_kernel``), so no accumulator can
    overflow. Each launch pair copies back one 16-byte result; the per-launch sums are
    joined in Python ints.

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
        if split:
            h, lw = _block_reduce(_sum_split_kernel, _sum_i64_kernel, part, np.int64, stream,
                                  hmask).tolist()
            total += (h << 32) + lw
        else:
            row = part.reshape(1, part.shape[0])
            total += int(_block_reduce(_sum_i64_kernel, _sum_i64_kernel, row, np.int64,
                                       stream)[0])
    return total


def _minmax_device(d_x, stream):
    """``(min, max)`` of a non-empty device array in one pass, as the accumulator type
    (float64, int64 or uint64); both NaN when any element is NaN."""
    if np.issubdtype(d_x.dtype, np.floating):
        acc, kernel = np.float64, _minmax_f64_kernel
    elif np.issubdtype(d_x.dtype, np.unsignedinteger):
        acc, kernel = np.uint64, _minmax_u64_kernel
    else:
        acc, kernel = np.int64, _minmax_i64_kernel
    row = d_x.reshape(1, d_x.shape[0])
    mn, mx = _block_reduce(kernel, kernel, row, acc, stream)
    return mn, mx


def reduce(x, op, *, stream=0):
    """Reduce a flat array with ``sum``, ``min``, ``max`` or ``mean``, on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.reduce`: the same contract (result
    dtypes, NaN and inf, errors); only what differs is said here.

    Parameters
    ----------
    x : ndarray or device array
        As the twin's; a device array is read where it is.
    op : {"sum", "min", "max", "mean"}
    stream : numba stream or 0, optional
        Stream for the copies and the launches.

    Returns
    -------
    scalar
        A NumPy scalar, also for a device ``x`` (one 8-byte copy back). Bit-identical to
        the twin except the float ``sum`` and ``mean`` (below).

    Notes
    -----
    O(n) work, memory bound: a grid-stride pass that leaves one partial per block (each
    thread adds its share in order, then a shared-memory tree per block), and, for
    several blocks, one block that combines the partials by the same tree. No atomics,
    so the order of the operations depends only on ``n`` and the device. Integer sums
    and the integer ``mean`` are exact as in the twin; ``min`` and ``max`` come from one
    pass that finds both. Float sums (float32 is summed in float64) are the same bits on
    every run on a given GPU model (or the simulator), but summed in another order than
    the twin's: against the exact sum the error is at most about
    ``(ceil(n / T) + ceil(B / TPB) + 2 log2(TPB)) * eps * sum(|x|)``, with ``T`` the
    threads and ``B`` the blocks of the first launch.

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
    r = _minmax_device(_to_device(x, dev, stream), stream)[0 if op == "min" else 1]
    if is_bool:
        return np.bool_(r)
    return x.dtype.type(r)


# =========================================================================== elementwise


@cuda.jit
def _binary_kernel(code, a, b, out):
    """``out[i] = op(a[i], b[i])`` over a grid stride; ``code`` indexes ``BINARY_OPS``."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
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
        elif code == 4:
            r = _hi(x, y)
        elif code == 5:
            r = _lo(x, y)
        else:
            r = x**y
        out[i] = r


@cuda.jit
def _unary_kernel(code, a, out):
    """``out[i] = op(a[i])`` over a grid stride; ``code`` indexes ``UNARY_OPS``."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
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
    """Elementwise float64 maths, ``out = op(a, b)`` or ``out = op(a)``, on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.elementwise`: the same contract;
    only what differs is said here.

    Parameters
    ----------
    op, a, b, out
        As the twin's; ``a``, ``b`` and ``out`` may be device arrays, read and written
        where they are.
    stream : numba stream or 0, optional
        Stream for the copies and the launch.

    Returns
    -------
    out : ndarray or device array of float64
        ``out``, filled. ``+ - * / neg abs sqrt max min`` bit-identical to the twin;
        ``pow exp log sin cos`` within 4 ulp of it.

    Notes
    -----
    O(n) work, memory bound, over a grid stride; the op is an int code, the same for
    every thread. ``+ - * / neg abs sqrt`` are correctly rounded (``fastmath`` off) and
    ``max``/``min`` follow ``np.maximum``/``np.minimum``; ``pow exp log sin cos`` use
    libdevice. On a GPU, out-of-domain inputs give NaN/inf as in NumPy; the simulator
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
        _launch(_binary_kernel, n, stream, BINARY_OPS.index(op), d_x, d_y, d_o)
    else:
        _launch(_unary_kernel, n, stream, UNARY_OPS.index(op), d_x, d_o)
    _finish(d_o, o, o_dev, stream)
    return out


# =========================================================================== scale / normalize


@cuda.jit
def _affine_kernel(x, shift, div, mul, out):
    """``out[i] = (float64(x[i]) - shift) / div * mul`` over a grid stride (no
    multiply-add to contract)."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = (float64(x[i]) - shift) / div * mul


@cuda.jit
def _fill_kernel(out, value):
    """``out[i] = value`` over a grid stride."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = value


def scale(x, factor, out, *, stream=0):
    """Multiply by a constant, ``out = float64(x) * factor``, on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.scale`: the same contract and the
    same bits; only what differs is said here.

    Parameters
    ----------
    x, factor, out
        As the twin's; ``x`` and ``out`` may be device arrays, read and written where they
        are.
    stream : numba stream or 0, optional
        Stream for the copies and the launch.

    Returns
    -------
    out : ndarray or device array of float64
        ``out``, filled.

    Notes
    -----
    O(n) work, memory bound, over a grid stride.

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
    _launch(_affine_kernel, n, stream, d_v, 0.0, 1.0, float(factor), d_o)
    _finish(d_o, o, o_dev, stream)
    return out


def normalize(x, out, *, stream=0):
    """Min-max normalisation to [0, 1], on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.normalize`: the same contract and
    the same bits; only what differs is said here.

    Parameters
    ----------
    x, out
        As the twin's; either may be a device array, read and written where it is.
    stream : numba stream or 0, optional
        Stream for the copies and the launches.

    Returns
    -------
    out : ndarray or device array of float64
        ``out``, filled.

    Notes
    -----
    Two passes over ``x``, O(n) each, memory bound: one reduction finds min and max
    together (a grid-stride launch and a one-block launch over its block partials; the
    two scalars come back to the host, 16 bytes, which picks the case), then the affine
    map over a grid stride.

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
    mn, mx = (float(v) for v in _minmax_device(d_v, stream))
    if mn != mn:
        _launch(_fill_kernel, n, stream, d_o, np.nan)
    elif mx == mn:
        _launch(_fill_kernel, n, stream, d_o, 0.0)
    else:
        _launch(_affine_kernel, n, stream, d_v, mn, mx - mn, 1.0, d_o)
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


@functools.cache
def _cupy():
    """CuPy, when it can be imported and a GPU is present (never under the simulator);
    otherwise None. Looked up once per process."""
    if _SIMULATOR or not cuda.is_available():
        return None
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def _cublas_matmul(cp, a, b, out, stream):
    """``out = a @ b`` by cuBLAS (``cupy.matmul`` on zero-copy CuPy views of the device
    arrays), queued on ``stream``."""
    ptr = 0
    if stream:
        handle = stream.handle  # a ctypes pointer (its .value) or a CUDA bindings object
        value = getattr(handle, "value", None)
        ptr = int(handle) if value is None else int(value or 0)
    with cp.cuda.ExternalStream(ptr) if ptr else cp.cuda.Stream.null:
        cp.matmul(cp.asarray(a), cp.asarray(b), out=cp.asarray(out))


def matmul(a, b, out, *, stream=0):
    """Dense float64 matrix product ``out = a @ b`` on the device: cuBLAS when CuPy is
    there, else shared-memory tiles.

    The CUDA twin of :func:`catalytic.kernels.cpu.arrays.matmul`: the same contract; only
    what differs is said here.

    Parameters
    ----------
    a, b, out
        As the twin's; any of them may be a device array, read and written where it is.
    stream : numba stream or 0, optional
        Stream for the copies and the launch.

    Returns
    -------
    out : ndarray or device array of float64, (m, n)
        ``out``, filled: bit-identical to the twin under the simulator, within
        ``k eps (|a| @ |b|)`` of it on a GPU.

    Notes
    -----
    O(m k n) flops. With CuPy installed (``pip install cupy-cuda13x``) and a GPU
    present, cuBLAS's DGEMM computes the product in place in ``out`` (CuPy views of the
    device arrays, no copies), on ``stream``: its own blocking and order of summation,
    with FMAs. Otherwise, and always under the simulator, ``_matmul_kernel``: a 2-d grid
    of ``MM_TPB`` x ``MM_TPB`` blocks, one thread per output element; each input element
    is read from global memory ``n / MM_TPB`` (resp. ``m / MM_TPB``) times. Its products
    are added in increasing k from 0.0, as the twin does; on a GPU the multiply-adds are
    contracted to FMAs.

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
    cp = _cupy()
    if cp is not None:
        _cublas_matmul(cp, d_a, d_b, d_o, stream)
    else:
        grid = (-(-n // MM_TPB), -(-m // MM_TPB))
        _matmul_kernel[grid, (MM_TPB, MM_TPB), stream](d_a, d_b, d_o)
    _finish(d_o, o2, o_dev, stream)
    return out
