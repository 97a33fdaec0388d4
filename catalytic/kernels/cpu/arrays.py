"""Array kernels: XOR with a repeating key, reductions, elementwise maths, scaling, matmul.

Every operation has a serial ``*_range`` kernel that works on ``[lo, hi)`` of flat arrays,
and most have a ``parallel=True`` driver that runs it over fixed-size chunks with
``prange``. The host function beside them validates, allocates what is needed (partials,
an expanded key) and picks serial or parallel from the size: small inputs never pay the
thread start-up.

Determinism: elementwise kernels and XOR write each output from its own inputs, so the
thread count cannot change them. Reductions split the input into chunks whose size
depends on ``n`` only (never on the thread count) and combine the per-chunk partials in
a fixed order, so a float sum is the same on any number of threads; integer sums are
exact (:func:`int_sum` returns a Python int; :func:`reduce` raises OverflowError when it
does not fit the result dtype).

Loops run over views with ``range(0, m)``: a loop index Numba knows is non-negative
needs no wrap-around check, which is what lets LLVM vectorise the inner loops.
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from catalytic.kernels.cpu._budget import _frozen

__all__ = [
    "xor_bytes",
    "xor_elems",
    "reduce",
    "int_sum",
    "elementwise",
    "scale",
    "normalize",
    "matmul",
    "BINARY_OPS",
    "UNARY_OPS",
    "REDUCE_OPS",
]

#: Elements below which the serial kernel runs (thread start-up costs a few microseconds).
_PAR_MIN = 1 << 16
#: Elements per reduction chunk: fixed, so partials do not depend on the thread count.
_RED_CHUNK = 1 << 14
#: Bytes the XOR key is expanded to (a whole number of key periods) for long inputs.
_XOR_PERIOD = 1 << 12

BINARY_OPS = ("add", "sub", "mul", "div", "max", "min", "pow")
UNARY_OPS = ("neg", "abs", "sqrt", "exp", "log", "sin", "cos")
REDUCE_OPS = ("sum", "min", "max", "mean")


def _chunking(n, min_chunk):
    """(chunk, nchunks) for an elementwise pass: ~4 chunks per thread, >= min_chunk."""
    chunk = max(min_chunk, -(-n // (4 * get_num_threads())))
    return chunk, -(-n // chunk)


def _flat(name, a):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be an ndarray, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return a.reshape(-1)


# =========================================================================== XOR


@njit(cache=True, nogil=True)
def _xor_range(data, key, out, lo, hi):
    """``out[i] = data[i] ^ key[(i - lo) % len(key)]`` for ``lo <= i < hi``, without modulo."""
    p = key.shape[0]
    i = lo
    if p >= 64:
        while i + p <= hi:
            d = data[i : i + p]
            o = out[i : i + p]
            for t in range(p):
                o[t] = d[t] ^ key[t]
            i += p
    else:
        while i + p <= hi:
            for t in range(p):
                out[i + t] = data[i + t] ^ key[t]
            i += p
    for t in range(hi - i):
        out[i + t] = data[i + t] ^ key[t]


@njit(cache=True, nogil=True, parallel=True)
def _xor_par(data, key, out, chunk):
    """``_xor_range`` over chunks of ``chunk`` bytes (a multiple of ``len(key)``)."""
    n = data.shape[0]
    for c in prange(-(-n // chunk)):
        lo = c * chunk
        _xor_range(data, key, out, lo, min(n, lo + chunk))


def xor_bytes(data_u8, key_u8, out_u8):
    """XOR a byte stream with a repeating key: ``out[i] = data[i] ^ key[i % len(key)]``.

    Parameters
    ----------
    data_u8 : ndarray of uint8, (n,)
        Input bytes (``arr.view(np.uint8)`` of any contiguous integer array).
    key_u8 : ndarray of uint8, (p,)
        Key bytes, ``p >= 1`` (``p = 0`` is allowed only when ``n = 0``).
    out_u8 : ndarray of uint8, (n,)
        Output; may be ``data_u8`` itself (in place).

    Returns
    -------
    out_u8 : ndarray of uint8

    Raises
    ------
    TypeError
        If an array is not uint8.
    ValueError
        If the lengths disagree, an array is not contiguous, or the key is empty.

    Notes
    -----
    O(n) work, memory bound. Inputs longer than ``_XOR_PERIOD`` bytes use a key tiled to
    ~4 KiB (one small allocation) so the inner loop is a long contiguous XOR that LLVM
    vectorises; above ``_PAR_MIN`` bytes the chunks run in parallel. The operation is
    an involution: applying it twice restores ``data``.

    Examples
    --------
    >>> import numpy as np
    >>> d = np.arange(5, dtype=np.uint8)
    >>> xor_bytes(d, np.array([1, 2], np.uint8), np.empty(5, np.uint8))
    array([1, 3, 3, 1, 5], dtype=uint8)
    """
    data = _flat("data_u8", data_u8)
    key = _flat("key_u8", key_u8)
    out = _flat("out_u8", out_u8)
    for name, a in (("data_u8", data), ("key_u8", key), ("out_u8", out)):
        if a.dtype != np.uint8:
            raise TypeError(f"{name} must be uint8, got {a.dtype}")
    n = data.shape[0]
    if out.shape[0] != n:
        raise ValueError(f"out_u8 has {out.shape[0]} bytes, data_u8 has {n}")
    if n == 0:
        return out_u8
    p = key.shape[0]
    if p == 0:
        raise ValueError("key_u8 is empty")
    if n > _XOR_PERIOD and p < _XOR_PERIOD:
        key = np.tile(key, -(-_XOR_PERIOD // p))
        p = key.shape[0]
    data = _frozen(data)
    key = _frozen(key)
    if n < _PAR_MIN:
        _xor_range(data, key, out, 0, n)
    else:
        chunk, _ = _chunking(n, _PAR_MIN)
        chunk = -(-chunk // p) * p
        _xor_par(data, key, out, chunk)
    return out_u8


def xor_elems(data, key, out):
    """XOR an integer array with a key repeated elementwise: ``out[i] = data[i] ^ key[i % len(key)]``.

    Parameters
    ----------
    data : ndarray of integer dtype
        Input, C-contiguous, any shape (treated as flat).
    key : ndarray of the same dtype, (p,)
        Key elements, ``p >= 1``.
    out : ndarray of the same dtype and size as ``data``
        Output; may be ``data`` (in place).

    Returns
    -------
    out : ndarray

    Raises
    ------
    TypeError
        If the dtypes differ or are not integer.
    ValueError
        If the sizes disagree, an array is not contiguous or the key is empty.

    Notes
    -----
    O(n) work. On little- or big-endian machines alike, repeating ``p`` key elements is
    repeating their ``p * itemsize`` bytes, so this is :func:`xor_bytes` on byte views.

    Examples
    --------
    >>> import numpy as np
    >>> xor_elems(np.array([1, 2, 3], np.int32), np.array([1], np.int32),
    ...           np.empty(3, np.int32))
    array([0, 3, 2], dtype=int32)
    """
    d = _flat("data", data)
    k = _flat("key", key)
    o = _flat("out", out)
    if not np.issubdtype(d.dtype, np.integer):
        raise TypeError(f"data must have an integer dtype, got {d.dtype}")
    if k.dtype != d.dtype or o.dtype != d.dtype:
        raise TypeError(f"data, key and out must share a dtype, got {d.dtype}, {k.dtype}, {o.dtype}")
    if o.shape[0] != d.shape[0]:
        raise ValueError(f"out has {o.shape[0]} elements, data has {d.shape[0]}")
    xor_bytes(d.view(np.uint8), k.view(np.uint8), o.view(np.uint8))
    return out


# =========================================================================== reductions


@njit(cache=True, nogil=True)
def _sum_f64_range(x, lo, hi):
    """Sum of ``float64(x[lo:hi])`` with eight interleaved accumulators, fixed order."""
    v = x[lo:hi]
    m = hi - lo
    m8 = m - m % 8
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    for i in range(0, m8, 8):
        a0 += np.float64(v[i])
        a1 += np.float64(v[i + 1])
        a2 += np.float64(v[i + 2])
        a3 += np.float64(v[i + 3])
        a4 += np.float64(v[i + 4])
        a5 += np.float64(v[i + 5])
        a6 += np.float64(v[i + 6])
        a7 += np.float64(v[i + 7])
    for i in range(m8, m):
        a0 += np.float64(v[i])
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))


@njit(cache=True, nogil=True)
def _sum_int_range(x, lo, hi, zero):
    """Integer sum of ``x[lo:hi]`` in the type of ``zero`` (int64): exact for elements of
    at most 32 bits and ``hi - lo < 2**31``."""
    v = x[lo:hi]
    acc = zero
    for i in range(hi - lo):
        acc += v[i]
    return acc


@njit(cache=True, nogil=True)
def _sum_split_range(x, lo, hi, hmask):
    """Exact sum of 64-bit integers ``x[lo:hi]`` (int64, or uint64 viewed as int64) as
    two int64 sums: of the high halves ``(x >> 32) & hmask`` (``hmask`` -1 for signed,
    0xFFFFFFFF for unsigned data) and of the low halves ``x & 0xFFFFFFFF``; the sum is
    ``high * 2**32 + low``. Each half is below 2**32 in magnitude, so neither sum can
    overflow for ``hi - lo < 2**31``."""
    v = x[lo:hi]
    h = np.int64(0)
    lw = np.int64(0)
    for i in range(hi - lo):
        a = v[i]
        h += (a >> 32) & hmask
        lw += a & 0xFFFFFFFF
    return h, lw


@njit(cache=True, nogil=True)
def _minmax_range(x, lo, hi):
    """(min, max, saw_nan) of ``x[lo:hi]``, ``hi > lo``."""
    v = x[lo:hi]
    mn = v[0]
    mx = v[0]
    nan = False
    for i in range(hi - lo):
        a = v[i]
        if a < mn:
            mn = a
        if a > mx:
            mx = a
        nan |= a != a
    return mn, mx, nan


@njit(cache=True, nogil=True, parallel=True)
def _sum_f64_par(x, chunk, partials):
    n = x.shape[0]
    for c in prange(partials.shape[0]):
        lo = c * chunk
        partials[c] = _sum_f64_range(x, lo, min(n, lo + chunk))


@njit(cache=True, nogil=True, parallel=True)
def _sum_int_par(x, chunk, partials, zero):
    n = x.shape[0]
    for c in prange(partials.shape[0]):
        lo = c * chunk
        partials[c] = _sum_int_range(x, lo, min(n, lo + chunk), zero)


@njit(cache=True, nogil=True, parallel=True)
def _sum_split_par(x, chunk, highs, lows, hmask):
    n = x.shape[0]
    for c in prange(highs.shape[0]):
        lo = c * chunk
        h, lw = _sum_split_range(x, lo, min(n, lo + chunk), hmask)
        highs[c] = h
        lows[c] = lw


@njit(cache=True, nogil=True, parallel=True)
def _minmax_par(x, chunk, mins, maxs, nans):
    n = x.shape[0]
    for c in prange(mins.shape[0]):
        lo = c * chunk
        mn, mx, nan = _minmax_range(x, lo, min(n, lo + chunk))
        mins[c] = mn
        maxs[c] = mx
        nans[c] = nan


def _numeric(name, x):
    x = _flat(name, x)
    if x.dtype == np.bool_:
        return x.view(np.uint8)
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise TypeError(f"{name} must have an integer, float or bool dtype, got {x.dtype}")
    if x.dtype == np.float16:
        raise TypeError(f"{name}: float16 is not supported, cast to float32 or float64")
    return x


def _sum_f64(x):
    n = x.shape[0]
    if n <= _RED_CHUNK:
        return np.float64(_sum_f64_range(x, 0, n))
    partials = np.empty(-(-n // _RED_CHUNK), dtype=np.float64)
    _sum_f64_par(x, _RED_CHUNK, partials)
    return np.float64(np.sum(partials))


def _minmax(x):
    """(min, max) of a non-empty flat array; NaN in both if any element is NaN."""
    n = x.shape[0]
    if n <= _RED_CHUNK:
        mn, mx, nan = _minmax_range(x, 0, n)
    else:
        nch = -(-n // _RED_CHUNK)
        mins = np.empty(nch, dtype=x.dtype)
        maxs = np.empty(nch, dtype=x.dtype)
        nans = np.empty(nch, dtype=np.bool_)
        _minmax_par(x, _RED_CHUNK, mins, maxs, nans)
        mn, mx, nan = mins.min(), maxs.max(), nans.any()
    if nan:
        return x.dtype.type(np.nan), x.dtype.type(np.nan)
    return x.dtype.type(mn), x.dtype.type(mx)


def int_sum(x):
    """The exact sum of an integer or bool array, as a Python int (never wraps).

    Parameters
    ----------
    x : ndarray of integer or bool dtype
        C-contiguous, native byte order, any shape (treated as flat).

    Returns
    -------
    int
        ``sum(x.tolist())``, however large.

    Raises
    ------
    TypeError
        If ``x`` is not an integer or bool array.

    Notes
    -----
    O(n) work, memory bound; parallel above ``_RED_CHUNK`` elements. Elements of up to
    32 bits are summed in int64 per chunk of ``_RED_CHUNK`` (exact: below 2**46). 64-bit
    elements are split into 32-bit halves summed apart (:func:`_sum_split_range`); the
    per-chunk partials are joined in Python ints, so no bound on ``n`` applies.

    Examples
    --------
    >>> import numpy as np
    >>> int_sum(np.array([2**62, 2**62, 2**62], dtype=np.int64))
    13835058055282163712
    """
    x = _numeric("x", x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"x must have an integer or bool dtype, got {x.dtype}")
    n = x.shape[0]
    nch = -(-n // _RED_CHUNK)
    if x.dtype.itemsize < 8:
        if n <= _RED_CHUNK:
            return int(_sum_int_range(x, 0, n, np.int64(0)))
        partials = np.empty(nch, dtype=np.int64)
        _sum_int_par(x, _RED_CHUNK, partials, np.int64(0))
        return sum(partials.tolist())
    hmask = np.int64(0xFFFFFFFF if x.dtype.kind == "u" else -1)
    v = x.view(np.int64)
    if n <= _RED_CHUNK:
        h, lw = _sum_split_range(v, 0, n, hmask)
        return (int(h) << 32) + int(lw)
    highs = np.empty(nch, dtype=np.int64)
    lows = np.empty(nch, dtype=np.int64)
    _sum_split_par(v, _RED_CHUNK, highs, lows, hmask)
    return (sum(highs.tolist()) << 32) + sum(lows.tolist())


def _sum_as(total, dtype):
    """The exact integer sum ``total`` in the dtype ``np.sum`` gives for ``dtype``
    (uint64 for unsigned integers, int64 for signed and bool), or an OverflowError
    where ``np.sum`` would wrap."""
    acc_t = np.uint64 if np.dtype(dtype).kind == "u" else np.int64
    info = np.iinfo(acc_t)
    if not info.min <= total <= info.max:
        raise OverflowError(
            f"the sum of this {np.dtype(dtype)} array is {total}, which does not fit "
            f"{acc_t.__name__} ([{info.min}, {info.max}])"
        )
    return acc_t(total)


def reduce(x, op):
    """Reduce a flat array with ``sum``, ``min``, ``max`` or ``mean``.

    Parameters
    ----------
    x : ndarray
        C-contiguous array of integer, bool or float32/float64 dtype (treated as flat).
    op : {"sum", "min", "max", "mean"}

    Returns
    -------
    scalar
        ``sum``: float64 for floats (float32 is summed in float64), int64 for signed
        integers and bool, uint64 for unsigned integers (the dtypes ``np.sum`` gives,
        except float32). ``min``/``max``: a scalar of ``x.dtype`` (NaN if any element
        is NaN, as ``np.min``). ``mean``: float64 (NaN for an empty array).

    Raises
    ------
    ValueError
        If ``op`` is unknown, or ``min``/``max`` of an empty array.
    TypeError
        If the dtype is not supported.
    OverflowError
        If the exact sum of integers does not fit the result dtype (where ``np.sum``
        would wrap silently).

    Notes
    -----
    O(n) work, memory bound; parallel above ``_RED_CHUNK`` elements.

    Integer sums are exact (:func:`int_sum`) and never wrap. ``mean`` of integers is
    that exact sum divided by ``n``, correctly rounded to float64.

    NaN and inf propagate as in NumPy: a NaN makes ``sum``, ``mean``, ``min`` and
    ``max`` NaN; ``inf`` and ``-inf`` together make the sum NaN.

    Float sums use chunks of ``_RED_CHUNK`` elements (a fixed size, so the result does
    not depend on the thread count), eight interleaved accumulators per chunk, and
    numpy's pairwise sum over the chunk partials. The error bound is about
    ``(_RED_CHUNK / 8 + log2(n) + 3) * eps * sum(|x|)`` ~ ``5e-13 * sum(|x|)``; the
    tests hold it to ``1e-12 * sum(|x|)`` against ``np.sum``.

    Examples
    --------
    >>> import numpy as np
    >>> reduce(np.arange(10), "sum"), reduce(np.arange(10.0), "mean")
    (np.int64(45), np.float64(4.5))
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {REDUCE_OPS}")
    is_bool = isinstance(x, np.ndarray) and x.dtype == np.bool_
    x = _numeric("x", x)
    n = x.shape[0]
    is_float = np.issubdtype(x.dtype, np.floating)
    if op == "sum":
        if is_float:
            return _sum_f64(x)
        return _sum_as(int_sum(x), "bool" if is_bool else x.dtype)
    if op == "mean":
        if n == 0:
            return np.float64(np.nan)
        if is_float:
            return np.float64(_sum_f64(x) / n)
        return np.float64(int_sum(x) / n)
    if n == 0:
        raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
    mn, mx = _minmax(x)
    r = mn if op == "min" else mx
    return np.bool_(r) if is_bool else r


# =========================================================================== elementwise


@njit(cache=True, nogil=True, error_model="numpy")
def _binary_range(code, a, b, out, lo, hi):
    """``out[lo:hi] = op(a[lo:hi], b[lo:hi])``; ``code`` indexes ``BINARY_OPS``."""
    x = a[lo:hi]
    y = b[lo:hi]
    o = out[lo:hi]
    m = hi - lo
    if code == 0:
        for i in range(m):
            o[i] = x[i] + y[i]
    elif code == 1:
        for i in range(m):
            o[i] = x[i] - y[i]
    elif code == 2:
        for i in range(m):
            o[i] = x[i] * y[i]
    elif code == 3:
        for i in range(m):
            o[i] = x[i] / y[i]
    elif code == 4:
        for i in range(m):
            o[i] = np.maximum(x[i], y[i])
    elif code == 5:
        for i in range(m):
            o[i] = np.minimum(x[i], y[i])
    else:
        for i in range(m):
            o[i] = np.power(x[i], y[i])


@njit(cache=True, nogil=True, error_model="numpy")
def _unary_range(code, a, out, lo, hi):
    """``out[lo:hi] = op(a[lo:hi])``; ``code`` indexes ``UNARY_OPS``."""
    x = a[lo:hi]
    o = out[lo:hi]
    m = hi - lo
    if code == 0:
        for i in range(m):
            o[i] = -x[i]
    elif code == 1:
        for i in range(m):
            o[i] = np.abs(x[i])
    elif code == 2:
        for i in range(m):
            o[i] = np.sqrt(x[i])
    elif code == 3:
        for i in range(m):
            o[i] = np.exp(x[i])
    elif code == 4:
        for i in range(m):
            o[i] = np.log(x[i])
    elif code == 5:
        for i in range(m):
            o[i] = np.sin(x[i])
    else:
        for i in range(m):
            o[i] = np.cos(x[i])


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _binary_par(code, a, b, out, chunk):
    n = out.shape[0]
    for c in prange(-(-n // chunk)):
        lo = c * chunk
        _binary_range(code, a, b, out, lo, min(n, lo + chunk))


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _unary_par(code, a, out, chunk):
    n = out.shape[0]
    for c in prange(-(-n // chunk)):
        lo = c * chunk
        _unary_range(code, a, out, lo, min(n, lo + chunk))


def _check_f64(name, a, n):
    a = _flat(name, a)
    if a.dtype != np.float64:
        raise TypeError(f"{name} must be float64 (cast beforehand), got {a.dtype}")
    if a.shape[0] != n:
        raise ValueError(f"{name} has {a.shape[0]} elements, expected {n}")
    return a


def elementwise(op, a, b, out):
    """Elementwise float64 maths, ``out = op(a, b)`` or ``out = op(a)``.

    Parameters
    ----------
    op : str
        Binary: ``add sub mul div max min pow``; unary: ``neg abs sqrt exp log sin cos``.
    a : ndarray of float64
        First operand, C-contiguous, any shape (treated as flat).
    b : ndarray of float64 or None
        Second operand, same size as ``a``; must be None for a unary op.
    out : ndarray of float64
        Output, same size; may be ``a`` or ``b`` (in place).

    Returns
    -------
    out : ndarray of float64

    Raises
    ------
    ValueError
        If ``op`` is unknown, ``b`` does not match the arity, or the sizes differ.
    TypeError
        If an array is not float64 (the caller casts beforehand).

    Notes
    -----
    O(n) work; parallel above ``_PAR_MIN`` elements. IEEE semantics as numpy's ufuncs
    (no exceptions: ``1/0 = inf``, ``log(-1) = nan``, ``max``/``min`` propagate NaN).
    ``+ - * / neg abs sqrt`` are correctly rounded and so bit-identical to numpy;
    ``pow exp log sin cos`` call the C library, while numpy may use its own SIMD
    versions: they agree to a few ulp.

    Examples
    --------
    >>> import numpy as np
    >>> elementwise("add", np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.empty(2))
    array([4., 6.])
    >>> elementwise("sqrt", np.array([4.0, 9.0]), None, np.empty(2))
    array([2., 3.])
    """
    if op in BINARY_OPS:
        if b is None:
            raise ValueError(f"{op!r} is binary: b is required")
    elif op in UNARY_OPS:
        if b is not None:
            raise ValueError(f"{op!r} is unary: b must be None")
    else:
        raise ValueError(f"unknown op {op!r}; expected one of {BINARY_OPS + UNARY_OPS}")
    x = _flat("a", a)
    n = x.shape[0]
    x = _check_f64("a", x, n)
    o = _check_f64("out", out, n)
    par = n >= _PAR_MIN
    chunk = _chunking(n, _PAR_MIN // 4)[0] if par else n
    if op in BINARY_OPS:
        y = _check_f64("b", b, n)
        code = BINARY_OPS.index(op)
        if par:
            _binary_par(code, x, y, o, chunk)
        else:
            _binary_range(code, x, y, o, 0, n)
    else:
        code = UNARY_OPS.index(op)
        if par:
            _unary_par(code, x, o, chunk)
        else:
            _unary_range(code, x, o, 0, n)
    return out


# =========================================================================== scale / normalize


@njit(cache=True, nogil=True, error_model="numpy")
def _affine_range(x, shift, div, mul, out, lo, hi):
    """``out[i] = (float64(x[i]) - shift) / div * mul`` over ``[lo, hi)``.

    ``scale`` passes (0, 1, factor) and ``normalize`` (min, max - min, 1); x - 0.0, x / 1.0
    and x * 1.0 are exact, so each is the plain expression bit for bit.
    """
    v = x[lo:hi]
    o = out[lo:hi]
    for i in range(hi - lo):
        o[i] = (np.float64(v[i]) - shift) / div * mul


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _affine_par(x, shift, div, mul, out, chunk):
    n = out.shape[0]
    for c in prange(-(-n // chunk)):
        lo = c * chunk
        _affine_range(x, shift, div, mul, out, lo, min(n, lo + chunk))


def _affine(x, shift, div, mul, out):
    n = x.shape[0]
    if n >= _PAR_MIN:
        _affine_par(x, shift, div, mul, out, _chunking(n, _PAR_MIN // 4)[0])
    else:
        _affine_range(x, shift, div, mul, out, 0, n)


def scale(x, factor, out):
    """Multiply by a constant: ``out = float64(x) * factor``.

    Parameters
    ----------
    x : ndarray of integer, bool or float dtype
        C-contiguous, any shape (treated as flat).
    factor : float
    out : ndarray of float64, same size; may be ``x`` when ``x`` is float64.

    Returns
    -------
    out : ndarray of float64
        Bit-identical to ``x.astype(np.float64) * factor``.

    Raises
    ------
    TypeError
        If ``x`` is not numeric or ``out`` is not float64.
    ValueError
        If the sizes differ.

    Notes
    -----
    O(n) work, memory bound; parallel above ``_PAR_MIN`` elements.

    Examples
    --------
    >>> import numpy as np
    >>> scale(np.array([1, 2, 3]), 0.5, np.empty(3))
    array([0.5, 1. , 1.5])
    """
    v = _numeric("x", x)
    o = _check_f64("out", out, v.shape[0])
    _affine(v, 0.0, 1.0, float(factor), o)
    return out


def normalize(x, out):
    """Min-max normalisation to [0, 1]: ``out = (x - min) / (max - min)`` in float64.

    Parameters
    ----------
    x : ndarray of integer, bool or float dtype
        C-contiguous, any shape (treated as flat).
    out : ndarray of float64, same size; may be ``x`` when ``x`` is float64.

    Returns
    -------
    out : ndarray of float64
        All zeros when ``max == min`` (a constant array); all NaN when ``x`` holds a
        NaN. Otherwise bit-identical to ``(x64 - x64.min()) / (x64.max() - x64.min())``
        with ``x64 = x.astype(np.float64)``.

    Raises
    ------
    TypeError
        If ``x`` is not numeric or ``out`` is not float64.
    ValueError
        If the sizes differ.

    Notes
    -----
    Two passes, O(n) each: a parallel min/max reduction, then the affine map.

    Examples
    --------
    >>> import numpy as np
    >>> normalize(np.array([2.0, 4.0, 3.0]), np.empty(3))
    array([0. , 1. , 0.5])
    """
    v = _numeric("x", x)
    n = v.shape[0]
    o = _check_f64("out", out, n)
    if n == 0:
        return out
    mn, mx = _minmax(v)
    mn, mx = float(mn), float(mx)
    if mn != mn:
        o.fill(np.nan)
    elif mx == mn:
        o.fill(0.0)
    else:
        _affine(v, mn, mx - mn, 1.0, o)
    return out


# =========================================================================== matmul

#: Tile sizes: rows per parallel block, depth and width of the cached tile of ``b``.
_MM_ROWS, _MM_DEPTH, _MM_COLS = 32, 128, 256


@njit(cache=True, nogil=True, parallel=True)
def _matmul_kernel(a, b, out, rows, depth, cols):
    """``out = a @ b`` by tiles; prange over blocks of ``rows`` rows of ``out``.

    For every ``out[i, j]`` the products are added in increasing ``k`` starting from
    0.0, whatever the tiling or thread count.
    """
    m = a.shape[0]
    kk = a.shape[1]
    n = b.shape[1]
    for blk in prange(-(-m // rows)):
        i0 = blk * rows
        i1 = min(m, i0 + rows)
        for i in range(i0, i1):
            orow = out[i]
            for j in range(n):
                orow[j] = 0.0
        for k0 in range(0, kk, depth):
            k1 = min(kk, k0 + depth)
            for j0 in range(0, n, cols):
                j1 = min(n, j0 + cols)
                w = j1 - j0
                i = i0
                # Four rows at a time: each loaded row of b feeds four output rows.
                while i + 4 <= i1:
                    o0 = out[i, j0:j1]
                    o1 = out[i + 1, j0:j1]
                    o2 = out[i + 2, j0:j1]
                    o3 = out[i + 3, j0:j1]
                    for k in range(k0, k1):
                        bk = b[k, j0:j1]
                        c0 = a[i, k]
                        c1 = a[i + 1, k]
                        c2 = a[i + 2, k]
                        c3 = a[i + 3, k]
                        for j in range(w):
                            bj = bk[j]
                            o0[j] += c0 * bj
                            o1[j] += c1 * bj
                            o2[j] += c2 * bj
                            o3[j] += c3 * bj
                    i += 4
                while i < i1:
                    o0 = out[i, j0:j1]
                    for k in range(k0, k1):
                        bk = b[k, j0:j1]
                        c0 = a[i, k]
                        for j in range(w):
                            o0[j] += c0 * bk[j]
                    i += 1


def matmul(a, b, out):
    """Dense float64 matrix product ``out = a @ b``, tiled, parallel over row blocks.

    Parameters
    ----------
    a : ndarray of float64, (m, k), C-contiguous
    b : ndarray of float64, (k, n), C-contiguous
    out : ndarray of float64, (m, n), C-contiguous; must not overlap ``a`` or ``b``.

    Returns
    -------
    out : ndarray of float64, (m, n)

    Raises
    ------
    TypeError
        If an array is not float64.
    ValueError
        If the shapes do not chain, an array is not 2-d C-contiguous, or ``out``
        overlaps an input.

    Notes
    -----
    O(m k n) flops, O(1) extra memory. Tiles of ``b`` (``_MM_DEPTH`` x ``_MM_COLS``,
    256 KiB) stay in cache while a block of ``_MM_ROWS`` rows streams over them, four
    output rows at a time. No FMA contraction and a fixed summation order (increasing
    k) per element, so the result does not depend on the thread count; against BLAS it
    agrees to ``|a @ b - out| <= k * eps * (|a| @ |b|)``. It is several times slower
    than a tuned BLAS; the router decides from calibration.

    Examples
    --------
    >>> import numpy as np
    >>> matmul(np.eye(2), np.array([[1.0, 2.0], [3.0, 4.0]]), np.empty((2, 2)))
    array([[1., 2.],
           [3., 4.]])
    """
    for name, x in (("a", a), ("b", b), ("out", out)):
        if not isinstance(x, np.ndarray) or x.dtype != np.float64:
            raise TypeError(f"{name} must be a float64 ndarray, got {getattr(x, 'dtype', type(x))}")
        if x.ndim != 2 or not x.flags.c_contiguous:
            raise ValueError(f"{name} must be a 2-d C-contiguous array, got shape {x.shape}")
    if a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"shapes do not chain: {a.shape} @ {b.shape} -> {out.shape}")
    if np.shares_memory(out, a) or np.shares_memory(out, b):
        raise ValueError("out must not overlap a or b")
    _matmul_kernel(a, b, out, _MM_ROWS, _MM_DEPTH, _MM_COLS)
    return out
