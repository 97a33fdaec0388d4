"""Counter-based random numbers that are bit-identical in NumPy, Numba and CUDA.

A stream is a seed; its value ``i`` is a pure function of ``(seed, i)``:

    key   = splitmix64(seed mod 2**64)
    raw_i = splitmix64(key + i * GOLDEN)          (uint64 arithmetic, wrapping)

which is SplitMix64's output sequence started from state ``key``: any element can be
computed on its own, in any order, on any thread, and the same seed gives the same
numbers in every process and on every backend. ``splitmix64`` is Vigna's mixer
(Stafford's "Mix13" constants), a bijection on 64-bit words.

Distributions, for element ``c = start + i`` of the output:

``uniform``  float64: ``(raw_c >> 11) * 2**-53``, the top 53 bits, in [0, 1).
             float32: ``(raw_c >> 40) * 2**-24``, the top 24 bits, in [0, 1) (exact in
             float32, so never rounded up to 1).
``normal``   Box-Muller from the uniforms of counters ``2c`` and ``2c + 1``:
             ``sqrt(-2 ln(1 - u1)) * cos(2 pi u2)``; ``1 - u1`` is in (0, 1] so the log
             is finite. float32 output is the float64 value rounded.
``integers`` no bounds: ``raw_c`` as uint64. With ``low <= x < high``: Lemire's
             multiply-shift without rejection, ``low + floor(raw_c * span / 2**64)``
             with ``span = high - low``. Every value in range is reached by
             ``floor(2**64 / span)`` or ``ceil(2**64 / span)`` words, so its probability
             is within ``2**-64`` of ``1 / span``: a relative bias below ``span * 2**-64``
             (< 2**-40 for spans below 2**24, < 2**-32 below 2**32).

Why the log and cosine are written out here: ``np.log``/``np.cos`` may use NumPy's own
SIMD code (on AVX-512 machines) while Numba calls the C library, and the two can differ in the
last bit. ``neg2log1m`` and ``cos2pi`` therefore use only ``+ - * /`` and integer
operations, which IEEE 754 rounds identically everywhere; the one ``sqrt`` is correctly
rounded in NumPy, Numba and CUDA alike. The range reductions come from the integer bits
(no ``frexp``, no branches), so the same source runs on arrays and on scalars.

The scalar core (``splitmix64``, ``uniform53``, ``uniform24``, ``mulhi64``,
``neg2log1m``, ``cos2pi``) is plain Python on ``np.uint64``/float64 values: NumPy runs
it on whole arrays, ``njit`` compiles it (the ``*_nb`` twins below, with
``error_model="numpy"`` so the division has no zero check and the loops vectorise), and
``numba.cuda.jit(device=True)`` can compile the same functions. Each is a leaf (it calls
no other core function), so every target composes them itself. (On NumPy *scalars*,
rather than arrays, NumPy warns about the intended uint64 wrap-around.) On CUDA keep the default
``fastmath=False``: fast math contracts multiply-adds into FMAs and approximates sqrt
and division, which would change the last bits of ``normal``. ``uniform`` and
``integers`` are exact integer arithmetic on every target.
"""

from __future__ import annotations

import math
import operator

import numpy as np
from numba import get_num_threads, njit, prange

__all__ = [
    "DISTRIBUTIONS",
    "GOLDEN",
    "splitmix64",
    "uniform53",
    "uniform24",
    "mulhi64",
    "neg2log1m",
    "cos2pi",
    "stream_key",
    "random_numpy",
    "random_numba",
    "uniform_at",
]

DISTRIBUTIONS = ("uniform", "normal", "integers")

_U = np.uint64
GOLDEN = _U(0x9E3779B97F4A7C15)
_MIX1 = _U(0xBF58476D1CE4E5B9)
_MIX2 = _U(0x94D049BB133111EB)
_ZERO = _U(0)
_ONE = _U(1)
_TWO = _U(2)
_THREE = _U(3)
_S2, _S4, _S8, _S16, _S32 = _U(2), _U(4), _U(8), _U(16), _U(32)
_S11, _S27, _S30, _S31, _S40, _S50, _S63 = (
    _U(11), _U(27), _U(30), _U(31), _U(40), _U(50), _U(63)
)
_M32 = _U(0xFFFFFFFF)
_M50 = _U((1 << 50) - 1)
_TWO50 = _U(1 << 50)
_TWO53 = _U(1 << 53)
#: floor(sqrt(2) * 2**52): mantissas above it are halved so the log argument is near 1.
_SQ2_MANT = _U(6369051672525772)

_TWO_M24 = 2.0**-24
_TWO_M52 = 2.0**-52
_TWO_M53 = 2.0**-53
#: ln 2 split so that ``e * _LN2_HI`` is exact for |e| < 2**20 (fdlibm's constants).
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
#: pi/4 per unit of the 50-bit octant remainder.
_PI4_2M50 = (math.pi / 4.0) * 2.0**-50

# atanh series: ln f = 2s (1 + z/3 + z^2/5 + ...), s = (f-1)/(f+1), z = s^2 <= 0.0295;
# terms up to z^11/23 leave a truncation error below 1e-19.
_L1, _L2, _L3, _L4, _L5, _L6 = 1 / 3, 1 / 5, 1 / 7, 1 / 9, 1 / 11, 1 / 13
_L7, _L8, _L9, _L10, _L11 = 1 / 15, 1 / 17, 1 / 19, 1 / 21, 1 / 23
# Taylor series of cos and sin on [0, pi/4]: the first omitted terms are below 3e-18.
_C1, _C2, _C3, _C4 = -1 / 2, 1 / 24, -1 / 720, 1 / 40320
_C5, _C6, _C7, _C8 = -1 / 3628800, 1 / 479001600, -1 / 87178291200, 1 / 20922789888000
_N1, _N2, _N3, _N4 = -1 / 6, 1 / 120, -1 / 5040, 1 / 362880
_N5, _N6, _N7, _N8 = -1 / 39916800, 1 / 6227020800, -1 / 1307674368000, 1 / 355687428096000


# --------------------------------------------------------------------------- scalar core


def splitmix64(x):
    """SplitMix64 output for state ``x`` (uint64 scalar or array): mix(x + GOLDEN)."""
    z = x + GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


def uniform53(x):
    """Top 53 bits of the uint64 ``x`` as a float64 in [0, 1) (exact)."""
    return (x >> _S11) * _TWO_M53


def uniform24(x):
    """Top 24 bits of the uint64 ``x`` as a float in [0, 1), exact in float32."""
    return (x >> _S40) * _TWO_M24


def mulhi64(a, b):
    """High 64 bits of the 128-bit product of uint64 ``a`` and ``b`` (from 32-bit halves)."""
    a_lo = a & _M32
    a_hi = a >> _S32
    b_lo = b & _M32
    b_hi = b >> _S32
    p0 = a_lo * b_lo
    p1 = a_lo * b_hi
    p2 = a_hi * b_lo
    p3 = a_hi * b_hi
    mid = (p0 >> _S32) + (p1 & _M32) + (p2 & _M32)
    return p3 + (p1 >> _S32) + (p2 >> _S32) + (mid >> _S32)


def _mul(a, b):
    """``a * b``. Every product that an addition uses below goes through this, so the
    CUDA build can bind it to a multiply with explicit rounding
    (:mod:`catalytic.kernels.cuda._exact`): otherwise the GPU compilers may fuse
    ``a * b + c`` into one FMA (one rounding instead of two) even with fastmath off,
    and GPU results would differ from the CPU's in the last bits."""
    return a * b


def neg2log1m(x):
    """``-2 ln(1 - u)`` for ``u = uniform53(x)``, with ``+ - * /`` and integer ops only.

    ``1 - u = v * 2**-53`` with the integer ``v = 2**53 - (x >> 11)`` in [1, 2**53]. Its
    bit length ``e`` comes from a branch-free binary search; ``v = 2**e * f``, ``f`` is
    moved into [sqrt(2)/2, sqrt(2)] and ``ln f`` is the atanh series. Accurate to a few
    ulp; the result is in [0, 2 * 53 ln 2].
    """
    v = _TWO53 - (x >> _S11)
    t = v
    e = _ZERO
    s = ((_ZERO - (t >> _S32)) >> _S63) * _S32
    t = t >> s
    e = e + s
    s = ((_ZERO - (t >> _S16)) >> _S63) * _S16
    t = t >> s
    e = e + s
    s = ((_ZERO - (t >> _S8)) >> _S63) * _S8
    t = t >> s
    e = e + s
    s = ((_ZERO - (t >> _S4)) >> _S63) * _S4
    t = t >> s
    e = e + s
    s = ((_ZERO - (t >> _S2)) >> _S63) * _S2
    t = t >> s
    e = e + s
    e = e + ((_ZERO - (t >> _ONE)) >> _S63)
    mant = (v << (_S63 - e)) >> _S11  # top bit moved to bit 52: in [2**52, 2**53)
    big = (_SQ2_MANT - mant) >> _S63  # 1 when mant / 2**52 > sqrt(2)
    f = _mul(mant * _TWO_M52, 1.0 - _mul(0.5, big))
    ex = (e + big) * 1.0 - 53.0
    s2 = (f - 1.0) / (f + 1.0)
    z = s2 * s2
    q = _L11
    q = _mul(q, z) + _L10
    q = _mul(q, z) + _L9
    q = _mul(q, z) + _L8
    q = _mul(q, z) + _L7
    q = _mul(q, z) + _L6
    q = _mul(q, z) + _L5
    q = _mul(q, z) + _L4
    q = _mul(q, z) + _L3
    q = _mul(q, z) + _L2
    q = _mul(q, z) + _L1
    two_s = s2 + s2
    lnf = two_s + _mul(two_s, _mul(z, q))
    return 0.0 - _mul(2.0, _mul(ex, _LN2_HI) + (lnf + _mul(ex, _LN2_LO)))  # never -0.0


def cos2pi(x):
    """``cos(2 pi u)`` for ``u = uniform53(x)``, with ``+ - * /`` and integer ops only.

    The top 3 of the 53 bits pick the octant, the other 50 the angle inside it; odd
    octants use the complement so the series argument ``t`` is always in [0, pi/4]. Both
    complements come from integers, so the reduction is exact. ``cos(2 pi u)`` is then
    ``A cos t + B sin t`` with one of A, B zero and the other +-1, formed from the octant
    bits without tables or branches (so it vectorises); the products are exact. Absolute
    error about 1e-16.
    """
    m = x >> _S11
    o = m >> _S50
    r = m & _M50
    t = _mul(r + (o & _ONE) * (_TWO50 - r - r), _PI4_2M50)
    z = t * t
    c = _C8
    c = _mul(c, z) + _C7
    c = _mul(c, z) + _C6
    c = _mul(c, z) + _C5
    c = _mul(c, z) + _C4
    c = _mul(c, z) + _C3
    c = _mul(c, z) + _C2
    c = _mul(c, z) + _C1
    c = _mul(c, z) + 1.0
    n = _N8
    n = _mul(n, z) + _N7
    n = _mul(n, z) + _N6
    n = _mul(n, z) + _N5
    n = _mul(n, z) + _N4
    n = _mul(n, z) + _N3
    n = _mul(n, z) + _N2
    n = _mul(n, z) + _N1
    sn = t + _mul(t, _mul(z, n))
    # Nearest quadrant p = round(o / 2) mod 4; angle = p pi/2 +- t. cos of it is
    # cos t (p = 0), -cos t (p = 2), or +-sin t (p odd, sign from p and o's parity).
    p = ((o + _ONE) >> _ONE) & _THREE
    odd_p = (p & _ONE) * 1.0
    sgn_p = 1.0 - (p & _TWO) * 1.0
    sgn_o = _mul((o & _ONE) * 1.0, 2.0) - 1.0
    return _mul((1.0 - odd_p) * sgn_p, c) + _mul(odd_p * (sgn_p * sgn_o), sn)


_splitmix64_nb = njit(cache=True, nogil=True, inline="always", error_model="numpy")(splitmix64)
_uniform53_nb = njit(cache=True, nogil=True, inline="always", error_model="numpy")(uniform53)
_uniform24_nb = njit(cache=True, nogil=True, inline="always", error_model="numpy")(uniform24)
_mulhi64_nb = njit(cache=True, nogil=True, inline="always", error_model="numpy")(mulhi64)
_mul_nb = njit(cache=True, nogil=True, inline="always", error_model="numpy")(_mul)


def rebind(func, **names):
    """``func`` with the same code but some global names bound to other objects: how
    one scalar source is compiled for NumPy, Numba and CUDA with a different ``_mul``."""
    import types

    glb = dict(func.__globals__)
    glb.update(names)
    new = types.FunctionType(func.__code__, glb, func.__name__, func.__defaults__, func.__closure__)
    new.__qualname__, new.__doc__, new.__module__ = func.__qualname__, func.__doc__, func.__module__
    return new


_neg2log1m_nb = njit(cache=True, nogil=True, inline="always", error_model="numpy")(
    rebind(neg2log1m, _mul=_mul_nb))
_cos2pi_nb = njit(cache=True, nogil=True, inline="always", error_model="numpy")(
    rebind(cos2pi, _mul=_mul_nb))


# --------------------------------------------------------------------------- arguments

_UNIFORM53, _UNIFORM24, _NORMAL, _RAW, _BOUNDED = range(5)


def stream_key(seed):
    """The uint64 key of stream ``seed`` (any Python or NumPy integer, taken mod 2**64).

    Examples
    --------
    >>> stream_key(0)
    np.uint64(16294208416658607535)
    """
    try:
        s = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be an integer, got {type(seed).__name__}") from None
    return splitmix64(np.array([s % (1 << 64)], dtype=np.uint64))[0]


def _parse(shape, seed, distribution, dtype, low, high, start):
    """Validate; return (shape, n, key, start_u64, kind, out_dtype, low_u64, span_u64)."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"shape must have sizes >= 0, got {shape}")
    n = math.prod(shape)
    key = stream_key(seed)
    try:
        start = operator.index(start)
    except TypeError:
        raise TypeError(f"start must be an integer, got {type(start).__name__}") from None
    start_u = np.uint64(start % (1 << 64))
    low_u = np.uint64(0)
    span_u = np.uint64(0)
    if distribution in ("uniform", "normal"):
        if low is not None or high is not None:
            raise ValueError(f"low/high apply to 'integers' only, not {distribution!r}")
        dt = np.dtype(np.float64 if dtype is None else dtype)
        if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise TypeError(f"{distribution!r} gives float32 or float64, not {dt}")
        if distribution == "normal":
            kind = _NORMAL
        else:
            kind = _UNIFORM53 if dt == np.float64 else _UNIFORM24
    elif distribution == "integers":
        if low is None and high is None:
            dt = np.dtype(np.uint64 if dtype is None else dtype)
            if dt not in (np.dtype(np.uint64), np.dtype(np.int64)):
                raise TypeError(f"raw 'integers' are 64-bit words: uint64 or int64, not {dt}")
            kind = _RAW
        else:
            if high is None:
                raise ValueError("'integers' with low needs high (high is exclusive)")
            lo = 0 if low is None else operator.index(low)
            hi = operator.index(high)
            span = hi - lo
            if span <= 0:
                raise ValueError(f"need low < high, got low={lo}, high={hi}")
            dt = np.dtype(np.int64 if dtype is None else dtype)
            if not np.issubdtype(dt, np.integer):
                raise TypeError(f"'integers' needs an integer dtype, got {dt}")
            info = np.iinfo(dt)
            if lo < info.min or hi - 1 > info.max:
                raise ValueError(f"[{lo}, {hi}) does not fit in {dt}")
            if span == 1 << 64:
                kind = _RAW  # every word is a value: low + raw (mod 2**64) is low + raw
            else:
                kind = _BOUNDED
                span_u = np.uint64(span)
            low_u = np.uint64(lo % (1 << 64))
    else:
        raise ValueError(f"unknown distribution {distribution!r}; expected one of {DISTRIBUTIONS}")
    return shape, n, key, start_u, kind, dt, low_u, span_u


# --------------------------------------------------------------------------- numpy

#: Elements per vectorised block in ``random_numpy``.
_NUMPY_BLOCK = 1 << 13


def random_numpy(shape, seed, distribution="uniform", dtype=None, *, low=None, high=None, start=0):
    """Counter-based random array, computed with vectorised NumPy.

    Parameters
    ----------
    shape : int or tuple of int
        Output shape; element ``i`` in C order uses counter ``start + i``.
    seed : int
        Stream seed, taken mod 2**64.
    distribution : {"uniform", "normal", "integers"}
    dtype : dtype, optional
        ``uniform``/``normal``: float64 (default) or float32. ``integers``: uint64
        (default) or int64 for raw words; for bounded values int64 by default, or any
        integer dtype that holds ``[low, high)``.
    low, high : int, optional
        Bounds for ``integers``, ``low <= x < high`` (``low`` defaults to 0).
    start : int, optional
        Counter of the first element, so a long stream can be made in pieces.

    Returns
    -------
    ndarray
        Bit-identical to :func:`random_numba` with the same arguments.

    Raises
    ------
    ValueError
        Unknown distribution, bad bounds or shape.
    TypeError
        Non-integer seed/shape/start or an unsupported dtype.

    Notes
    -----
    O(n) work, done in blocks of ``_NUMPY_BLOCK`` elements so the temporaries stay small
    (and are not freshly mapped pages each time).
    See the module docstring for the construction and the bias of bounded integers.

    Examples
    --------
    >>> x = random_numpy(3, seed=1)
    >>> bool(((0 <= x) & (x < 1)).all())
    True
    >>> random_numpy(4, seed=1, distribution="integers", low=0, high=10).dtype
    dtype('int64')
    """
    shape, n, key, start_u, kind, dt, low_u, span_u = _parse(
        shape, seed, distribution, dtype, low, high, start
    )
    out = np.empty(n, dtype=dt)
    view = out.view(np.int64) if dt == np.uint64 else out
    for lo in range(0, n, _NUMPY_BLOCK):
        hi = min(n, lo + _NUMPY_BLOCK)
        ctr = np.arange(lo, hi, dtype=np.uint64) + start_u
        res = _numpy_block(kind, key, ctr, low_u, span_u)
        if res.dtype == np.uint64:
            res = res.view(np.int64)
        view[lo:hi] = res  # int64 -> narrower ints truncates, float64 -> float32 rounds
    return out.reshape(shape)


def uniform_at(seed, counters):
    """The float64 uniforms of stream ``seed`` at the given counters (any integer array,
    taken as uint64): element ``c`` of ``random_numpy(shape, seed)`` is
    ``uniform_at(seed, c)``, so a piece of a large array can be made on its own.

    Examples
    --------
    >>> bool((uniform_at(5, np.array([[2, 0]])) == random_numpy(3, 5)[[[2, 0]]]).all())
    True
    """
    ctr = np.asarray(counters).astype(np.uint64)
    return _numpy_block(_UNIFORM53, stream_key(seed), ctr, None, None)


def _numpy_block(kind, key, ctr, low_u, span_u):
    """The distribution ``kind`` at the uint64 counters ``ctr``, as uint64 or float64."""
    if kind == _NORMAL:
        c2 = ctr * _U(2)
        x1 = splitmix64(key + c2 * GOLDEN)
        x2 = splitmix64(key + (c2 + _ONE) * GOLDEN)
        return np.sqrt(neg2log1m(x1)) * cos2pi(x2)
    x = splitmix64(key + ctr * GOLDEN)
    if kind == _UNIFORM53:
        return uniform53(x)
    if kind == _UNIFORM24:
        return uniform24(x)
    if kind == _RAW:
        return x + low_u
    return mulhi64(x, span_u) + low_u


# --------------------------------------------------------------------------- numba


@njit(cache=True, nogil=True, error_model="numpy")
def _fill_range(kind, out, key, start, low, span, lo, hi):
    """Write elements ``[lo, hi)`` of a flat output; ``kind`` selects the distribution."""
    o = out[lo:hi]
    base = start + np.uint64(lo)
    if kind == 0:
        for i in range(hi - lo):
            c = base + np.uint64(i)
            o[i] = _uniform53_nb(_splitmix64_nb(key + c * GOLDEN))
    elif kind == 1:
        for i in range(hi - lo):
            c = base + np.uint64(i)
            o[i] = _uniform24_nb(_splitmix64_nb(key + c * GOLDEN))
    elif kind == 2:
        for i in range(hi - lo):
            c2 = (base + np.uint64(i)) * np.uint64(2)
            x1 = _splitmix64_nb(key + c2 * GOLDEN)
            x2 = _splitmix64_nb(key + (c2 + np.uint64(1)) * GOLDEN)
            o[i] = math.sqrt(_neg2log1m_nb(x1)) * _cos2pi_nb(x2)
    elif kind == 3:
        for i in range(hi - lo):
            c = base + np.uint64(i)
            o[i] = _splitmix64_nb(key + c * GOLDEN) + low
    else:
        for i in range(hi - lo):
            c = base + np.uint64(i)
            o[i] = _mulhi64_nb(_splitmix64_nb(key + c * GOLDEN), span) + low


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def _fill_par(kind, out, key, start, low, span, chunk):
    n = out.shape[0]
    for c in prange(-(-n // chunk)):
        lo = c * chunk
        _fill_range(kind, out, key, start, low, span, lo, min(n, lo + chunk))


#: Elements below which ``random_numba`` fills serially.
_PAR_MIN = 1 << 14


def random_numba(
    shape, seed, distribution="uniform", dtype=None, *, low=None, high=None, start=0, out=None
):
    """Counter-based random array, computed by a parallel ``@njit`` kernel.

    Same parameters and result as :func:`random_numpy`, bit for bit, plus:

    Parameters
    ----------
    out : ndarray, optional
        C-contiguous array of the output dtype and size to fill (it is reshaped to
        ``shape`` in the returned view).

    Returns
    -------
    ndarray

    Raises
    ------
    ValueError, TypeError
        As :func:`random_numpy`; also when ``out`` has the wrong dtype or size.

    Notes
    -----
    O(n) work, no temporaries. Each element depends only on its counter, so the result
    does not depend on the chunking or the thread count.

    Examples
    --------
    >>> import numpy as np
    >>> a = random_numba((2, 3), seed=7, distribution="normal")
    >>> bool(np.array_equal(a, random_numpy((2, 3), seed=7, distribution="normal")))
    True
    """
    shape, n, key, start_u, kind, dt, low_u, span_u = _parse(
        shape, seed, distribution, dtype, low, high, start
    )
    if out is None:
        out = np.empty(shape, dtype=dt)
    elif not isinstance(out, np.ndarray) or out.dtype != dt or out.size != n:
        raise ValueError(f"out must be a {dt} array of {n} elements")
    elif not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    flat = out.reshape(-1)
    if n < _PAR_MIN:
        _fill_range(kind, flat, key, start_u, low_u, span_u, 0, n)
    else:
        chunk = max(_PAR_MIN // 4, -(-n // (4 * get_num_threads())))
        _fill_par(kind, flat, key, start_u, low_u, span_u, chunk)
    return out.reshape(shape)
