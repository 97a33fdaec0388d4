"""CUDA array, field and random kernels against their CPU twins.

Two passes (see ``tests/support/cuda_passes.py``):

* ``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/kernels/cuda/test_fields_arrays.py``
  runs the ``sim`` tests: every host function in the simulator, with sizes that are not
  multiples of the block size, compared with the CPU twin (bit for bit unless a
  tolerance is stated). On a machine with a GPU the same tests run on the GPU without
  the simulator.
* ``python -m pytest tests/kernels/cuda/test_fields_arrays.py`` runs the ``ptx`` tests:
  every ``@cuda.jit`` kernel compiled to sm_90 PTX for the argument types its host
  function launches it with.

Tests with neither mark only check argument validation and run in both passes.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

from catalytic.kernels import random as rnd
from catalytic.kernels.cpu import arrays as cpu_arrays
from catalytic.kernels.cpu import fields as cpu_fields
from catalytic.kernels.cuda import arrays as gpu_arrays
from catalytic.kernels.cuda import fields as gpu_fields
from catalytic.kernels.cuda import random as gpu_random
from catalytic.kernels.cuda import newman_ziff as NZ
from catalytic.kernels.cuda import clusters as CL
from catalytic.kernels.cuda import values as VB
from catalytic.kernels.cuda import winding as WD
from catalytic.kernels.cuda import edt as EDT
from catalytic.kernels.cuda import transport as TR

# The simulator runs device code on NumPy scalars, which warn about the intended
# wrap-around of uint64 arithmetic and about IEEE inf/NaN results.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
SIZES = [1, 7, 255, 257, 1000]
EPS = np.finfo(np.float64).eps


def _rng(seed=0):
    return np.random.default_rng(seed)


def _host(a):
    return a.copy_to_host() if cuda.devicearray.is_cuda_ndarray(a) else a


# =========================================================================== XOR


class _Launches:
    """Stands in for a kernel in the module under test, records every launch (launch
    configuration, arguments) and runs it on the real kernel."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.calls = []

    def __getitem__(self, config):
        def launch(*args):
            self.calls.append((config, args))
            return self.kernel[config](*args)

        return launch


def _spy(monkeypatch, name):
    spy = _Launches(getattr(gpu_arrays, name))
    monkeypatch.setattr(gpu_arrays, name, spy)
    return spy


def _items(spy):
    """Items (words or bytes) the recorded XOR launches covered: ``out`` is the last argument."""
    return sum(int(args[-1].size) for _cfg, args in spy.calls)


XOR_KEYS = [1, 3, 7, 8, 13, 300, 4096]


@pytest.mark.sim
@pytest.mark.parametrize("n", SIZES + [0, 8, 2053])
@pytest.mark.parametrize("p", XOR_KEYS)
def test_xor_bytes_matches_cpu(n, p):
    rng = _rng(n * 31 + p)
    d = rng.integers(0, 256, n, dtype=np.uint8)
    k = rng.integers(0, 256, p, dtype=np.uint8)
    got = gpu_arrays.xor_bytes(d, k, np.empty_like(d))
    want = cpu_arrays.xor_bytes(d, k, np.empty_like(d))
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
@pytest.mark.parametrize("p", [1, 3, 8, 13, 4096])
@pytest.mark.parametrize("d_off, o_off", [(0, 0), (3, 3), (5, 13), (3, 0), (1, 6)])
def test_xor_bytes_words_between_the_boundaries(p, d_off, o_off, monkeypatch):
    """Device arrays at byte offsets: when data and out share the offset from an 8-byte
    boundary, everything between the first and the last boundary goes through the word
    kernel and only the head and tail bytes through the byte kernel; otherwise the byte
    kernel does it all. Either way the result is the CPU twin's."""
    n = 700
    rng = _rng(p + 10 * d_off + o_off)
    d = rng.integers(0, 256, n, dtype=np.uint8)
    k = rng.integers(0, 256, p, dtype=np.uint8)
    dd = cuda.to_device(np.concatenate([np.zeros(d_off, np.uint8), d]))[d_off:]
    oo = cuda.device_array(n + o_off, np.uint8)[o_off:]
    words = _spy(monkeypatch, "_xor_words_kernel")
    bytes_ = _spy(monkeypatch, "_xor_bytes_kernel")
    res = gpu_arrays.xor_bytes(dd, cuda.to_device(k), oo)
    assert res is oo
    np.testing.assert_array_equal(oo.copy_to_host(), cpu_arrays.xor_bytes(d, k, np.empty_like(d)))
    # allocations start on 8-byte boundaries: the offsets decide
    if (d_off - o_off) % 8 == 0:
        w = (n - (-d_off) % 8) // 8
        assert _items(words) == w and _items(bytes_) == n - 8 * w
    else:
        assert not words.calls and _items(bytes_) == n


@pytest.mark.sim
@pytest.mark.parametrize("p", [3, 13, 4096])
def test_xor_stride_loops_keep_each_threads_key(p, monkeypatch):
    """One block: every thread walks many words (or bytes) of the row with a stride that
    is a multiple of the key period; the result is still the CPU twin's."""
    monkeypatch.setattr(gpu_arrays, "_max_blocks", lambda: 1)
    n = 9000
    rng = _rng(p)
    d = rng.integers(0, 256, n, dtype=np.uint8)
    k = rng.integers(0, 256, p, dtype=np.uint8)
    want = cpu_arrays.xor_bytes(d, k, np.empty_like(d))
    words = _spy(monkeypatch, "_xor_words_kernel")
    np.testing.assert_array_equal(gpu_arrays.xor_bytes(d, k, np.empty_like(d)), want)
    assert _items(words) == n // 8
    dd = cuda.to_device(d)
    out = cuda.device_array(n + 1, np.uint8)[1:]  # another offset: the byte kernel
    np.testing.assert_array_equal(gpu_arrays.xor_bytes(dd, k, out).copy_to_host(), want)


@pytest.mark.parametrize("cap", [2, 1056])
def test_xor_grid_fixes_each_threads_key(cap, monkeypatch):
    """The launch shape of the XOR kernels: the x stride is a multiple of the key period
    (in items) or covers the row in one pass, so each thread's key item stays fixed;
    the grid stays within ``max(cap, the blocks of one period)`` and near ``cap`` when
    there is enough work. ``cap`` 1056: 8 blocks on each of an H100's 132
    multiprocessors."""
    monkeypatch.setattr(gpu_arrays, "_max_blocks", lambda: cap)
    for rows in (1, 3, 1000):
        for items in (1, 7, 100, 5000, 10**6):
            for period in (1, 3, 13, 125, 512, 4095, 10**6 + 1):
                (bx, by), (tx, ty) = gpu_arrays._xor_grid(rows, items, period)
                case = (rows, items, period, bx, by, tx, ty)
                sx = bx * tx
                assert sx % period == 0 or sx >= items, case
                q = period // np.gcd(period, tx)
                need = -(-items // tx)
                assert bx * by <= max(cap, q) and bx > min(need, cap) - q, case
                assert tx * ty <= gpu_arrays.TPB and by <= -(-rows // ty), case
                assert tx & (tx - 1) == 0 and ty & (ty - 1) == 0, case


@pytest.mark.sim
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_xor_elems_every_integer_dtype(dtype):
    rng = _rng(np.dtype(dtype).itemsize)
    info = np.iinfo(dtype)
    n = [257, 255, 7, 130][np.dtype(dtype).itemsize.bit_length() - 1]  # <= 1040 bytes
    d = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).reshape(-1, 1)
    k = rng.integers(info.min, info.max, 3, dtype=dtype, endpoint=True)
    got = gpu_arrays.xor_elems(d, k, np.empty_like(d))
    want = cpu_arrays.xor_elems(d, k, np.empty_like(d))
    assert got.shape == d.shape and got.dtype == d.dtype
    np.testing.assert_array_equal(got, want)
    # an involution, in place on the device
    dd = cuda.to_device(got.reshape(-1))
    back = gpu_arrays.xor_elems(dd, cuda.to_device(k), dd)
    assert back is dd
    np.testing.assert_array_equal(back.copy_to_host(), d.reshape(-1))


def _tail(d_arr, off):
    """``d_arr[off:]``, a view that starts ``off`` bytes in; an empty device array as it is
    (a GPU refuses any slice of one, see ``tests/support/cuda_passes.py``)."""
    return d_arr if d_arr.shape[0] == 0 else d_arr[off:]


@pytest.mark.sim
@settings(max_examples=15)
@given(
    data=st.binary(min_size=0, max_size=600),
    key=st.binary(min_size=1, max_size=40),
    d_off=st.integers(0, 7),
    o_off=st.integers(0, 7),
)
def test_xor_bytes_property(data, key, d_off, o_off):
    d = np.frombuffer(data, dtype=np.uint8).copy()
    k = np.frombuffer(key, dtype=np.uint8).copy()
    want = cpu_arrays.xor_bytes(d, k, np.empty_like(d))
    np.testing.assert_array_equal(gpu_arrays.xor_bytes(d, k, np.empty_like(d)), want)
    n = d.shape[0]
    dd = _tail(cuda.to_device(np.concatenate([np.zeros(d_off, np.uint8), d])), d_off)
    oo = _tail(cuda.device_array(n + o_off, np.uint8), o_off)
    np.testing.assert_array_equal(gpu_arrays.xor_bytes(dd, k, oo).copy_to_host(), want)


@pytest.mark.sim
@pytest.mark.parametrize("B, m, krows, p", [
    (1, 7, 1, 5), (3, 257, 1, 5), (4, 100, 4, 5), (5, 1, 5, 5),  # bytes
    (1, 37, 1, 13), (3, 64, 3, 13), (6, 24, 1, 3), (2, 1000, 1, 4096),  # words
])
def test_xor_bytes_batched_matches_rows(B, m, krows, p, monkeypatch):
    rng = _rng(B * m)
    d = rng.integers(0, 256, (B, m), dtype=np.uint8)
    k = rng.integers(0, 256, (krows, p), dtype=np.uint8)
    words = _spy(monkeypatch, "_xor_words_kernel")
    got = gpu_arrays.xor_bytes_batched(d, k, np.empty_like(d))
    for b in range(B):
        want = cpu_arrays.xor_bytes(d[b], k[b if krows == B else 0], np.empty(m, np.uint8))
        np.testing.assert_array_equal(got[b], want)
    # whole aligned words, or a single row of at least one word: the word kernel
    assert bool(words.calls) == (m >= 8 and (B == 1 or m % 8 == 0))
    # a 1-d key is shared by every row; device arrays in, device array out
    dd = cuda.to_device(d)
    out = cuda.device_array_like(dd)
    res = gpu_arrays.xor_bytes_batched(dd, cuda.to_device(k[0]), out)
    assert res is out
    for b in range(B):
        want = cpu_arrays.xor_bytes(d[b], k[0], np.empty(m, np.uint8))
        np.testing.assert_array_equal(res.copy_to_host()[b], want)


# =========================================================================== reductions

# (dtype, n): one size per dtype keeps the simulator quick (each block waits at a
# barrier once per level of its tree).
INT_REDUCE_CASES = [
    (np.int8, 257),
    (np.uint8, 255),
    (np.int16, 7),
    (np.uint16, 1),
    (np.int32, 300),
    (np.uint32, 7),
    (np.int64, 257),
    (np.uint64, 100),
    (np.bool_, 257),
]


def _same_result_or_error(f, g):
    """Call both; they must return the same value and type, or raise the same error."""
    try:
        want = f()
    except OverflowError as err:
        with pytest.raises(OverflowError, match=re.escape(str(err))):
            g()
        return
    got = g()
    assert type(got) is type(want), (type(got), type(want))
    assert got == want


@pytest.mark.sim
@pytest.mark.parametrize("dtype, n", INT_REDUCE_CASES)
@pytest.mark.parametrize("op", ["sum", "min", "max", "mean"])
def test_reduce_integers_exact(dtype, n, op):
    rng = _rng(n)
    if dtype == np.bool_:
        x = rng.random(n) < 0.5
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    assert gpu_arrays.int_sum(x) == sum(x.tolist())
    _same_result_or_error(lambda: cpu_arrays.reduce(x, op), lambda: gpu_arrays.reduce(x, op))


@pytest.mark.sim
@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32, np.uint32])
def test_int_sum_is_exact_past_the_limits_and_over_several_launches(dtype, monkeypatch):
    # blocks of 8 threads under the simulator (each simulated thread costs real time):
    # exactness does not depend on the width of the block tree
    monkeypatch.setattr(gpu_arrays, "SIM_THREADS", 8)
    info = np.iinfo(dtype)
    for x in (np.full(300, info.max, dtype), np.full(300, info.min, dtype),
              np.array([info.max, info.max, 1, info.min], dtype)):
        exact = sum(x.tolist())
        assert gpu_arrays.int_sum(x) == exact
        assert gpu_arrays.int_sum(cuda.to_device(x)) == exact
        with monkeypatch.context() as m:
            m.setattr(gpu_arrays, "INT_SUM_LAUNCH", 128)  # 3 launches of <= 128
            assert gpu_arrays.int_sum(x) == exact
            assert gpu_arrays.int_sum(cuda.to_device(x)) == exact
        for op in ("sum", "mean"):
            _same_result_or_error(lambda: cpu_arrays.reduce(x, op),
                                  lambda: gpu_arrays.reduce(cuda.to_device(x), op))


@pytest.mark.sim
def test_reduce_integer_sum_raises_where_numpy_wraps():
    x = np.array([2**62, 2**62, 2**62, 7], dtype=np.int64)
    with pytest.raises(OverflowError, match=str(3 * 2**62 + 7)):
        gpu_arrays.reduce(x, "sum")
    u = np.array([2**63, 2**63, 5], dtype=np.uint64)
    with pytest.raises(OverflowError, match=str(2**64 + 5)):
        gpu_arrays.reduce(u, "sum")
    assert gpu_arrays.reduce(u, "mean") == (2**64 + 5) / 3


@pytest.mark.sim
@pytest.mark.parametrize("dtype, n", [(np.float64, 1000), (np.float32, 257), (np.float64, 1)])
@pytest.mark.parametrize("op", ["sum", "mean", "min", "max"])
def test_reduce_floats(dtype, n, op):
    x = (_rng(n).standard_normal(n) * 1e3).astype(dtype)
    got = gpu_arrays.reduce(x, op)
    want = cpu_arrays.reduce(x, op)
    assert type(got) is type(want)
    if op in ("min", "max"):
        assert got == want
    else:
        # stated tolerance: (ceil(n / T) + ceil(B / TPB) + 2 log2(TPB)) eps sum|x|, held
        # to 1e-12 sum|x|
        scale = float(np.sum(np.abs(x.astype(np.float64))))
        if op == "mean":
            scale /= n
        assert abs(got - want) <= 1e-12 * scale
    # the same bits on every run: no atomics, a fixed order
    assert all(gpu_arrays.reduce(x, op).tobytes() == got.tobytes() for _ in range(2))


def _fold_in_launch_order(v, blocks, threads):
    """The block partials of a sum kernel launch, in NumPy float64 and in the kernel's
    order: thread g adds v[g], v[g + T], v[g + 2T], ... from 0.0 (T = blocks x threads),
    then each block folds its threads' sums by the tree (t += t + s, s = threads / 2,
    ..., 1)."""
    total = blocks * threads
    acc = np.zeros(total)
    for lo in range(0, v.shape[0], total):
        chunk = v[lo : lo + total]
        acc[: chunk.shape[0]] += chunk
    tree = acc.reshape(blocks, threads)
    s = threads // 2
    while s:
        tree[:, :s] = tree[:, :s] + tree[:, s : 2 * s]
        s //= 2
    return tree[:, 0].copy()


def _sum_in_launch_order(x):
    """The float sum the kernels compute, replayed on the host: the first launch on the
    module's launch shape, then one block over its partials."""
    blocks, threads = gpu_arrays._shape(x.shape[0])
    part = _fold_in_launch_order(x.astype(np.float64), blocks, threads)
    if blocks > 1:
        part = _fold_in_launch_order(part, 1, gpu_arrays._threads(blocks))
    return part[0]


@pytest.mark.sim
@pytest.mark.parametrize("n, blocks, sim_threads", [
    (1000, None, None), (1, None, None), (700, 3, None), (5000, 7, 8), (700, 2, 256),
])
def test_float_sum_follows_the_fixed_order(n, blocks, sim_threads, monkeypatch):
    """The float sum is the replay of its fixed order, bit for bit (several blocks, an
    odd number of them, a block of ``TPB`` threads): it cannot depend on timing."""
    if blocks is not None:
        monkeypatch.setattr(gpu_arrays, "_max_blocks", lambda: blocks)
    if sim_threads is not None:
        monkeypatch.setattr(gpu_arrays, "SIM_THREADS", sim_threads)
    rng = _rng(n)
    x = rng.standard_normal(n) * 10.0 ** rng.uniform(0, 8, n)  # another order, other bits
    got = gpu_arrays.reduce(x, "sum")
    assert got.tobytes() == np.float64(_sum_in_launch_order(x)).tobytes()
    assert got.tobytes() == gpu_arrays.reduce(cuda.to_device(x), "sum").tobytes()
    x32 = x.astype(np.float32)
    assert gpu_arrays.reduce(x32, "sum") == _sum_in_launch_order(x32)


@pytest.mark.sim
def test_reductions_over_an_odd_number_of_blocks(monkeypatch):
    """Three blocks of partials, combined by a block of four threads (one with none)."""
    monkeypatch.setattr(gpu_arrays, "_max_blocks", lambda: 3)
    monkeypatch.setattr(gpu_arrays, "SIM_THREADS", 8)  # fewer simulated threads, same tree
    assert gpu_arrays._shape(700)[0] == 3 and gpu_arrays._threads(3) == 4
    rng = _rng(7)
    x = rng.integers(-(2**62), 2**62, 700, dtype=np.int64)
    assert gpu_arrays.int_sum(x) == sum(x.tolist())
    u = rng.integers(0, 2**16, 700, dtype=np.uint16)
    assert gpu_arrays.int_sum(u) == sum(u.tolist())
    f = rng.standard_normal(700)
    for op in ("min", "max"):
        assert gpu_arrays.reduce(f, op) == cpu_arrays.reduce(f, op)
        assert gpu_arrays.reduce(u, op) == cpu_arrays.reduce(u, op)


@pytest.mark.sim
def test_reduce_int_mean_and_empty():
    x = np.arange(-3, 300, dtype=np.int32)
    assert abs(gpu_arrays.reduce(x, "mean") - cpu_arrays.reduce(x, "mean")) <= 1e-13 * 300
    e = np.zeros(0, np.float64)
    assert np.isnan(gpu_arrays.reduce(e, "mean"))
    assert gpu_arrays.reduce(e, "sum") == 0.0
    assert gpu_arrays.reduce(np.zeros(0, np.int8), "sum") == np.int64(0)
    with pytest.raises(ValueError, match="zero-size"):
        gpu_arrays.reduce(e, "min")


@pytest.mark.sim
@pytest.mark.parametrize("op", ["min", "max", "sum"])
def test_reduce_nan_propagates(op):
    x = np.array([1.0, 2.0, np.nan, -4.0, 5.0, 0.5, 3.0])
    assert np.isnan(gpu_arrays.reduce(x, op))
    assert np.isnan(gpu_arrays.reduce(x.astype(np.float32), op))
    assert np.isnan(cpu_arrays.reduce(x, op))
    # a NaN in one thread's share of the last block, an inf elsewhere
    y = _rng(1).standard_normal(200)
    y[3] = np.inf
    y[190] = np.nan
    assert np.isnan(gpu_arrays.reduce(y, op)) and np.isnan(cpu_arrays.reduce(y, op))
    y[190] = -np.inf if op == "min" else np.inf
    assert gpu_arrays.reduce(y, op) == cpu_arrays.reduce(y, op)


@pytest.mark.sim
def test_reduce_device_input_returns_scalar():
    x = np.arange(7, dtype=np.int16)
    got = gpu_arrays.reduce(cuda.to_device(x), "sum")
    assert isinstance(got, np.int64) and got == 21


# =========================================================================== elementwise

EXACT_BINARY = ["add", "sub", "mul", "div", "max", "min"]
EXACT_UNARY = ["neg", "abs", "sqrt"]


def _operands(op, n, seed):
    rng = _rng(seed)
    a = rng.standard_normal(n) * 3.0
    b = rng.standard_normal(n) * 3.0
    if op in ("sqrt", "log", "pow"):
        a = np.abs(a) + 0.01  # the simulator's math.sqrt/log raise out of domain
    if op in ("max", "min") and n >= 7:
        a[1] = np.nan
        b[2] = np.nan
        a[3] = b[3] = np.nan
        a[4], b[4] = 0.0, -0.0
        a[5], b[5] = -0.0, 0.0
    return a, b


@pytest.mark.sim
@pytest.mark.parametrize("n", [1, 257])
@pytest.mark.parametrize("op", cpu_arrays.BINARY_OPS + cpu_arrays.UNARY_OPS)
def test_elementwise_matches_cpu(op, n):
    a, b = _operands(op, n, n)
    if op in cpu_arrays.UNARY_OPS:
        b = None
    got = gpu_arrays.elementwise(op, a, b, np.empty(n))
    want = cpu_arrays.elementwise(op, a, b, np.empty(n))
    if op in EXACT_BINARY + EXACT_UNARY:
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))  # bits
    else:
        np.testing.assert_array_max_ulp(got, want, maxulp=4)  # stated: 4 ulp


@pytest.mark.sim
def test_elementwise_in_place_on_device():
    a, b = _operands("add", 1000, 1)
    da, db = cuda.to_device(a), cuda.to_device(b)
    res = gpu_arrays.elementwise("mul", da, db, da)
    assert res is da
    np.testing.assert_array_equal(res.copy_to_host(), a * b)
    s = cuda.stream()
    out = np.empty((10, 100))
    res = gpu_arrays.elementwise("neg", a.reshape(10, 100), None, out, stream=s)
    assert res is out
    np.testing.assert_array_equal(out, -a.reshape(10, 100))


# =========================================================================== scale / normalize


@pytest.mark.sim
@pytest.mark.parametrize(
    "dtype, n", [(np.float64, 257), (np.float32, 7), (np.int16, 255), (np.uint64, 1), (np.bool_, 7)]
)
def test_scale_matches_cpu(dtype, n):
    x = (_rng(n).standard_normal(n) * 100).astype(dtype)
    got = gpu_arrays.scale(x, 0.37, np.empty(n))
    np.testing.assert_array_equal(got, cpu_arrays.scale(x, 0.37, np.empty(n)))


@pytest.mark.sim
@pytest.mark.parametrize("dtype, n", [(np.float64, 257), (np.int32, 255), (np.uint8, 7)])
def test_normalize_matches_cpu(dtype, n):
    x = (_rng(n).standard_normal(n) * 50 + 100).astype(dtype)
    got = gpu_arrays.normalize(x, np.empty(n))
    np.testing.assert_array_equal(got, cpu_arrays.normalize(x, np.empty(n)))


@pytest.mark.sim
def test_normalize_constant_nan_and_in_place():
    c = np.full(7, 3.5)
    np.testing.assert_array_equal(gpu_arrays.normalize(c, np.empty(7)), np.zeros(7))
    x = np.array([1.0, np.nan, 2.0])
    assert np.isnan(gpu_arrays.normalize(x, np.empty(3))).all()
    y = np.array([2.0, 4.0, 3.0])
    dy = cuda.to_device(y)
    assert gpu_arrays.normalize(dy, dy) is dy
    np.testing.assert_array_equal(dy.copy_to_host(), [0.0, 1.0, 0.5])


@pytest.mark.sim
def test_normalize_reads_x_once_for_min_and_max(monkeypatch):
    """One fused pass finds min and max (plus a one-block launch over its partials);
    the pair comes back as one 16-byte copy."""
    from catalytic.kernels.cuda import _transfer

    x = _rng(4).standard_normal(300)
    spy = _spy(monkeypatch, "_minmax_f64_kernel")
    d_x, d_out = cuda.to_device(x), cuda.device_array(300)
    with _transfer._lock:
        before = dict(_transfer.COUNTS)
    gpu_arrays.normalize(d_x, d_out)
    with _transfer._lock:
        d2h = _transfer.COUNTS["d2h_bytes"] - before["d2h_bytes"]
    assert d2h == 16
    passes = [args for _cfg, args in spy.calls if args[0].size == 300]
    assert len(passes) == 1 and len(spy.calls) == 2  # the pass over x, then the partials
    np.testing.assert_array_equal(d_out.copy_to_host(), cpu_arrays.normalize(x, np.empty(300)))


# =========================================================================== matmul


@pytest.mark.sim
@pytest.mark.parametrize("m, k, n", [(17, 33, 9), (1, 1, 1), (16, 16, 16), (5, 0, 3), (3, 20, 1)])
def test_matmul_matches_cpu_bitwise(m, k, n):
    rng = _rng(m * k + n)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    got = gpu_arrays.matmul(a, b, np.empty((m, n)))
    want = cpu_arrays.matmul(a, b, np.empty((m, n)))
    if SIM:  # same order of additions, and no FMA in the simulator
        np.testing.assert_array_equal(got, want)
    # the GPU tolerance (FMA contraction): k eps (|a| @ |b|) against the exact-order sum
    np.testing.assert_array_less(np.abs(got - a @ b), k * EPS * (np.abs(a) @ np.abs(b)) + 1e-300)


@pytest.mark.sim
def test_matmul_device_arrays():
    rng = _rng(3)
    a, b = rng.standard_normal((18, 5)), rng.standard_normal((5, 17))
    out = cuda.device_array((18, 17))
    res = gpu_arrays.matmul(cuda.to_device(a), cuda.to_device(b), out)
    assert res is out
    want = cpu_arrays.matmul(a, b, np.empty((18, 17)))
    if SIM:
        np.testing.assert_array_equal(res.copy_to_host(), want)
    bound = 2 * 5 * EPS * (np.abs(a) @ np.abs(b))  # k = 5; FMAs on a GPU, or cuBLAS
    np.testing.assert_array_less(np.abs(res.copy_to_host() - want), bound)


@pytest.mark.sim
def test_matmul_without_cupy_runs_the_numba_kernel(monkeypatch):
    """No cuBLAS under the simulator (nor without CuPy): the tiled kernel runs."""
    if SIM:
        assert gpu_arrays._cupy() is None
    elif gpu_arrays._cupy() is not None:
        pytest.skip("CuPy and a GPU are present: matmul goes through cuBLAS (tested below)")
    spy = _spy(monkeypatch, "_matmul_kernel")
    a, b = _rng(4).standard_normal((20, 3)), _rng(5).standard_normal((3, 18))
    got = gpu_arrays.matmul(a, b, np.empty((20, 18)))
    assert len(spy.calls) == 1
    np.testing.assert_array_less(np.abs(got - a @ b), 3 * EPS * (np.abs(a) @ np.abs(b)) + 1e-300)


class _MustNotRun:
    def __getitem__(self, config):
        raise AssertionError("the Numba matmul kernel was launched: cuBLAS was not used")


def test_matmul_through_cublas(monkeypatch):
    """With CuPy and a GPU, matmul is cuBLAS's DGEMM on views of the device arrays,
    queued on the caller's stream; within k eps (|a| @ |b|) of the CPU twin."""
    if SIM:
        pytest.skip("the CUDA simulator has no cuBLAS: matmul runs _matmul_kernel there")
    if not cuda.is_available():
        pytest.skip("no GPU: the cuBLAS path needs one")
    cp = pytest.importorskip("cupy", reason="CuPy is not installed (pip install cupy-cuda13x): "
                                            "matmul runs _matmul_kernel")
    assert gpu_arrays._cupy() is cp
    monkeypatch.setattr(gpu_arrays, "_matmul_kernel", _MustNotRun())
    rng = _rng(6)
    for m, k, n in [(17, 33, 9), (5, 0, 3), (130, 70, 65)]:
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        want = cpu_arrays.matmul(a, b, np.empty((m, n)))
        bound = 2 * k * EPS * (np.abs(a) @ np.abs(b)) + 1e-300
        got = gpu_arrays.matmul(a, b, np.empty((m, n)))
        np.testing.assert_array_less(np.abs(got - want), bound)
        s = cuda.stream()
        out = cuda.device_array((m, n))
        res = gpu_arrays.matmul(cuda.to_device(a, stream=s), cuda.to_device(b, stream=s), out,
                                stream=s)
        s.synchronize()
        assert res is out
        np.testing.assert_array_less(np.abs(out.copy_to_host() - want), bound)


# =========================================================================== fields


def _von_neumann(d):
    offs = []
    for a in range(d):
        for s in (-1, 1):
            o = [0] * d
            o[a] = s
            offs.append(o)
    return np.array(offs, dtype=np.int64)


def _moore(d):
    g = np.stack(np.meshgrid(*([[-1, 0, 1]] * d), indexing="ij"), -1).reshape(-1, d)
    return g[np.any(g != 0, axis=1)].astype(np.int64)


NOMASK = np.zeros(0, np.uint8)

# (shape, periodic, offsets, masked, dedupe)
LATTICES = [
    ((7, 9), (True, False), _von_neumann(2), False, False),
    ((7, 9), (True, False), _von_neumann(2), True, False),
    ((7, 9), (True, True), np.array([[0, 1], [1, 1], [-2, 0]]), True, False),  # asymmetric
    ((5, 6, 7), (True, False, True), _moore(3), True, False),
    ((5, 6, 7), (False, False, False), _von_neumann(3), False, True),
    ((1, 2, 5), (True, True, True), _von_neumann(3), False, True),  # self-loops, duplicates
    ((2, 9), (True, True), _moore(2), True, True),
    ((13,), (True,), np.array([[-1], [1], [2]]), False, False),
    # repeated entries and the zero offset, dropped on the fast path by their flags too
    ((6, 8), (False, True), np.array([[0, 1], [1, 0], [0, 1], [0, 0], [-1, 0]]), True, True),
    ((6, 8), (False, True), np.array([[0, 1], [1, 0], [0, 1], [0, 0], [-1, 0]]), False, False),
]


def _mask(shape, masked, seed=0):
    n = int(np.prod(shape))
    return (_rng(seed).random(n) > 0.25).astype(np.uint8) if masked else NOMASK


@pytest.mark.sim
@pytest.mark.parametrize("shape, periodic, offsets, masked, dedupe", LATTICES)
def test_laplacian_matches_cpu(shape, periodic, offsets, masked, dedupe):
    n = int(np.prod(shape))
    open_ = _mask(shape, masked, n)
    f = _rng(n).standard_normal(n)
    got = gpu_fields.laplacian(shape, periodic, offsets, open_, dedupe, f, np.empty(n))
    want = cpu_fields.laplacian(shape, periodic, offsets, open_, dedupe, f, np.empty(n))
    np.testing.assert_array_equal(got, want)  # simulator: bit for bit


@pytest.mark.sim
@pytest.mark.parametrize("steps", [0, 1, 4])
@pytest.mark.parametrize("shape, periodic, offsets, masked, dedupe", [LATTICES[1], LATTICES[6]])
def test_diffuse_matches_cpu(shape, periodic, offsets, masked, dedupe, steps):
    n = int(np.prod(shape))
    open_ = _mask(shape, masked, 1)
    f = _rng(steps).standard_normal(n)
    alpha = 1.0 / (2 * offsets.shape[0])
    got = gpu_fields.diffuse(shape, periodic, offsets, open_, dedupe, f, steps, alpha, np.empty(n))
    want = cpu_fields.diffuse(shape, periodic, offsets, open_, dedupe, f, steps, alpha, np.empty(n))
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
def test_diffuse_device_arrays():
    shape, periodic, offsets = (7, 9), (True, True), _von_neumann(2)
    f = _rng(5).standard_normal(63)
    d_out = cuda.device_array(63)
    res = gpu_fields.diffuse(shape, periodic, offsets, NOMASK, False, cuda.to_device(f), 3, 0.2, d_out)
    assert res is d_out
    want = cpu_fields.diffuse(shape, periodic, offsets, NOMASK, False, f, 3, 0.2, np.empty(63))
    np.testing.assert_array_equal(res.copy_to_host(), want)


@pytest.mark.sim
@pytest.mark.parametrize("lattice", [LATTICES[3], LATTICES[6], LATTICES[5]])
def test_laplacian_batched_matches_rows(lattice):
    shape, periodic, offsets, masked, dedupe = lattice
    n = int(np.prod(shape))
    open_ = _mask(shape, masked, 2)
    fs = _rng(n).standard_normal((3, n))
    got = gpu_fields.laplacian_batched(shape, periodic, offsets, open_, dedupe, fs, np.empty((3, n)))
    for b in range(3):
        want = cpu_fields.laplacian(shape, periodic, offsets, open_, dedupe, fs[b], np.empty(n))
        np.testing.assert_array_equal(got[b], want)


@pytest.mark.sim
@pytest.mark.parametrize("lattice", [LATTICES[1], LATTICES[6], LATTICES[9]])
def test_field_kernels_stride_over_sites_and_rows(lattice, monkeypatch):
    """A grid smaller than the work (one block of 8 x 1 threads, 2 x 1 blocks): every
    thread strides over several sites and rows, and the result is still the CPU's."""
    shape, periodic, offsets, masked, dedupe = lattice
    n = int(np.prod(shape))
    open_ = _mask(shape, masked, 4)
    monkeypatch.setattr(gpu_fields, "_launch_shape", lambda n, rows: ((2, 1), (8, 1)))
    fs = _rng(n + 1).standard_normal((3, n))
    got = gpu_fields.laplacian_batched(shape, periodic, offsets, open_, dedupe, fs,
                                       np.empty((3, n)))
    for b in range(3):
        want = cpu_fields.laplacian(shape, periodic, offsets, open_, dedupe, fs[b], np.empty(n))
        np.testing.assert_array_equal(got[b], want)
    want = cpu_fields.diffuse(shape, periodic, offsets, open_, dedupe, fs[0], 2, 0.1, np.empty(n))
    np.testing.assert_array_equal(
        gpu_fields.diffuse(shape, periodic, offsets, open_, dedupe, fs[0], 2, 0.1, np.empty(n)),
        want)


@pytest.mark.sim
@pytest.mark.parametrize("shape, periodic, offsets, masked, dedupe", [LATTICES[3], LATTICES[6]])
def test_device_mask_is_read_in_place(shape, periodic, offsets, masked, dedupe):
    """A device ``open_`` (the backend's cached copy) goes to the kernel as is, and the
    small tables stay on the device from one call to the next: a call copies over its
    field, neither the mask (nor via the host) nor the tables."""
    from catalytic.kernels.cuda import _transfer

    n = int(np.prod(shape))
    open_ = _mask(shape, masked, 3)
    d_open = cuda.to_device(open_)
    f = _rng(3).standard_normal(n)
    gpu_fields.laplacian(shape, periodic, offsets, d_open, dedupe, f, np.empty(n))  # tables
    for call, args in [(gpu_fields.laplacian, ()), (gpu_fields.diffuse, (2, 0.05))]:
        cpu_call = getattr(cpu_fields, call.__name__)
        want = cpu_call(shape, periodic, offsets, open_, dedupe, f, *args, np.empty(n))
        with _transfer._lock:
            before = dict(_transfer.COUNTS)
        got = call(shape, periodic, offsets, d_open, dedupe, f, *args, np.empty(n))
        with _transfer._lock:
            h2d = _transfer.COUNTS["h2d_bytes"] - before["h2d_bytes"]
        assert h2d == f.nbytes  # the lattice tables are on the device from the first call
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="uint8"):
        gpu_fields.laplacian(shape, periodic, offsets, cuda.to_device(open_.astype(bool)),
                             dedupe, f, np.empty(n))
    with pytest.raises(ValueError, match=f"length 0 or {n}"):
        gpu_fields.laplacian(shape, periodic, offsets, cuda.to_device(open_[:-1]), dedupe, f,
                             np.empty(n))


@pytest.mark.sim
def test_transfers_refuse_device_arrays():
    """A device array is never sent through NumPy (a silent round trip via the host)."""
    from catalytic.kernels.cuda import _transfer

    d = cuda.to_device(np.arange(4, dtype=np.uint8))
    with pytest.raises(TypeError, match="already on the device"):
        _transfer.to_device(d)
    with pytest.raises(TypeError, match="already on the device"):
        _transfer.host_to(cuda.device_array(4, dtype=np.uint8), d)


# =========================================================================== random

RANDOM_CASES = [
    ("uniform", {}),
    ("uniform", {"dtype": np.float32}),
    ("normal", {}),
    ("normal", {"dtype": np.float32}),
    ("integers", {}),
    ("integers", {"dtype": np.int64}),
    ("integers", {"low": -10, "high": 10}),
    ("integers", {"low": -128, "high": 128, "dtype": np.int8}),
    ("integers", {"low": 3, "high": 200, "dtype": np.uint8}),
    ("integers", {"low": 0, "high": 65536, "dtype": np.uint16}),
    ("integers", {"low": -(2**31), "high": 2**31, "dtype": np.int32}),
    ("integers", {"low": -(2**63), "high": 2**63, "dtype": np.int64}),  # full span
    ("integers", {"low": 5, "high": 2**64 - 1, "dtype": np.uint64}),
]


@pytest.mark.sim
@pytest.mark.parametrize("distribution, kw", RANDOM_CASES)
@pytest.mark.parametrize("shape, start", [((3, 5, 7), 0), (257, 2**64 - 100)])
def test_random_bit_identical(distribution, kw, shape, start):
    got = gpu_random.random_cuda(shape, 12345, distribution, start=start, **kw)
    want = rnd.random_numpy(shape, 12345, distribution, start=start, **kw)
    got = got.copy_to_host()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(got, rnd.random_numba(shape, 12345, distribution, start=start, **kw))


@pytest.mark.sim
def test_random_out_numpy_and_device():
    out = np.empty((4, 8), np.float64)
    res = gpu_random.random_cuda((4, 8), 9, "normal", out=out)
    assert res.base is out or res is out
    np.testing.assert_array_equal(out, rnd.random_numpy((4, 8), 9, "normal"))
    d = cuda.device_array(32, np.int16)
    res = gpu_random.random_cuda(32, 9, "integers", low=-7, high=9, dtype=np.int16, out=d)
    np.testing.assert_array_equal(
        _host(res), rnd.random_numpy(32, 9, "integers", low=-7, high=9, dtype=np.int16)
    )
    assert gpu_random.random_cuda(0, 1).shape == (0,)


# =========================================================================== validation (both passes)


def test_argument_errors():
    u8 = np.zeros(4, np.uint8)
    with pytest.raises(TypeError, match="uint8"):
        gpu_arrays.xor_bytes(u8.astype(np.int8), u8, u8)
    with pytest.raises(ValueError, match="empty"):
        gpu_arrays.xor_bytes(u8, u8[:0], u8)
    with pytest.raises(TypeError, match="share a dtype"):
        gpu_arrays.xor_elems(np.zeros(3, np.int32), np.zeros(1, np.int64), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="unknown reduction"):
        gpu_arrays.reduce(u8, "prod")
    with pytest.raises(TypeError, match="float16"):
        gpu_arrays.reduce(np.zeros(2, np.float16), "sum")
    with pytest.raises(ValueError, match="unknown op"):
        gpu_arrays.elementwise("tan", np.zeros(2), None, np.zeros(2))
    with pytest.raises(ValueError, match="binary"):
        gpu_arrays.elementwise("add", np.zeros(2), None, np.zeros(2))
    with pytest.raises(TypeError, match="float64"):
        gpu_arrays.elementwise("neg", np.zeros(2, np.float32), None, np.zeros(2))
    with pytest.raises(ValueError, match="C-contiguous"):
        gpu_arrays.scale(np.zeros((4, 4))[:, 0], 2.0, np.zeros(4))
    with pytest.raises(ValueError, match="chain"):
        gpu_arrays.matmul(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)))
    a = np.zeros((3, 3))
    with pytest.raises(ValueError, match="overlap"):
        gpu_arrays.matmul(a, np.zeros((3, 3)), a)
    f = np.zeros(9)
    with pytest.raises(ValueError, match="overlap"):
        gpu_fields.laplacian((9,), (True,), [[1], [-1]], NOMASK, False, f, f)
    with pytest.raises(ValueError, match="steps"):
        gpu_fields.diffuse((9,), (True,), [[1], [-1]], NOMASK, False, f, -1, 0.1, np.zeros(9))
    with pytest.raises(TypeError, match="float64"):
        gpu_fields.laplacian((9,), (True,), [[1], [-1]], NOMASK, False, f.astype(np.float32), np.zeros(9))
    with pytest.raises(ValueError, match="shape"):
        gpu_fields.laplacian_batched((9,), (True,), [[1], [-1]], NOMASK, False, f, np.zeros(9))
    with pytest.raises(ValueError, match="unknown distribution"):
        gpu_random.random_cuda(3, 0, "poisson")
    with pytest.raises(ValueError, match="out must be"):
        gpu_random.random_cuda(3, 0, out=np.zeros(3, np.float32))


# =========================================================================== PTX for sm_90

from numba import types as nt  # noqa: E402

F64 = nt.float64[::1]
F64_2D = nt.float64[:, ::1]
U8 = nt.uint8[::1]
U8_2D = nt.uint8[:, ::1]
U64_2D = nt.uint64[:, ::1]
I64 = nt.int64[::1]
I64_2D = nt.int64[:, ::1]
#: the Laplacian kernels' lattice arguments: shape, strides, periodic, offsets, the fast
#: path's foff, lo, hi, the de-duplication flags, open_, and the bonds: bond slots, bits,
#: words, bond weights
LAP_TABLES = (I64, I64, U8, nt.int64[:, ::1], I64, I64, I64, U8, U8, I64, nt.uint32[::1],
              nt.int64, F64)


def _kernels():
    """(name, kernel, argtypes, must-contain) for every @cuda.jit kernel written here."""
    A, Fm, R = gpu_arrays, gpu_fields, gpu_random
    lap = LAP_TABLES
    out = [
        ("xor_bytes", A._xor_bytes_kernel, (U8_2D, U8_2D, nt.int64, nt.int64, U8_2D), "xor.b"),
        ("xor_words", A._xor_words_kernel, (U64_2D, U8_2D, nt.int64, nt.int64, U64_2D), "xor.b64"),
        ("sum_f64<f64>", A._sum_f64_kernel, (F64_2D, F64_2D), "bar.sync"),
        ("sum_f64<f32>", A._sum_f64_kernel, (nt.float32[:, ::1], F64_2D), "cvt.f64.f32"),
        ("sum_i64<i8>", A._sum_i64_kernel, (nt.int8[:, ::1], I64_2D), "bar.sync"),
        ("sum_i64<u8>", A._sum_i64_kernel, (U8_2D, I64_2D), "bar.sync"),
        ("sum_i64<u32>", A._sum_i64_kernel, (nt.uint32[:, ::1], I64_2D), "bar.sync"),
        ("sum_i64<i64>", A._sum_i64_kernel, (I64_2D, I64_2D), "bar.sync"),
        ("sum_split<i64>", A._sum_split_kernel, (I64, nt.int64, I64_2D), "shr.s64"),
        ("minmax_f64<f64>", A._minmax_f64_kernel, (F64_2D, F64_2D), "bar.sync"),
        ("minmax_f64<f32>", A._minmax_f64_kernel, (nt.float32[:, ::1], F64_2D), "bar.sync"),
        ("minmax_i64<i16>", A._minmax_i64_kernel, (nt.int16[:, ::1], I64_2D), "min.s64"),
        ("minmax_u64<u64>", A._minmax_u64_kernel, (U64_2D, U64_2D), "max.u64"),
        ("binary", A._binary_kernel, (nt.int64, F64, F64, F64), "div.rn.f64"),
        ("unary", A._unary_kernel, (nt.int64, F64, F64), "sqrt.rn.f64"),
        ("affine<i16>", A._affine_kernel, (nt.int16[::1], nt.float64, nt.float64, nt.float64, F64), "div.rn.f64"),
        ("affine<f64>", A._affine_kernel, (F64, nt.float64, nt.float64, nt.float64, F64), "div.rn.f64"),
        ("fill", A._fill_kernel, (F64, nt.float64), "st.global"),
        ("matmul", A._matmul_kernel, (F64_2D, F64_2D, F64_2D), ".shared"),
        ("lap", Fm._lap_kernel, lap + (F64_2D, F64_2D, nt.float64, nt.boolean), "ld.global"),
        ("lap_dedupe", Fm._lap_dedupe_kernel, lap + (F64_2D, F64_2D, nt.float64, nt.boolean), "ld.global"),
    ]
    nzi = (I64, I64, I64, U8, I64_2D, U8, I64, nt.uint32[::1], nt.int64, I64, I64, I64,
           nt.int64, I64, nt.int64)  # shape .. stop, as sweeps_cuda launches it
    out.append(("newman_ziff", NZ._sweeps_kernel,
                (I64_2D, F64_2D, I64_2D, nt.uint64, nt.int64, I64, nt.int64, nt.int64) + nzi
                + (nt.int32[:, :, ::1], U64_2D) + (I64_2D,) * 5, "atom.global.add.f64"))
    for lab in (nt.int32[:, ::1], I64_2D):  # int64 labels past 2**31 sites
        # shape, strides, periodic, track, half, lo, hi, slots, bits, words, labels, axes
        seam = (I64, I64, U8, U8, I64_2D, I64, I64, I64, nt.uint32[::1], nt.int64, lab, I64)
        out.append((f"seam_steps<{lab.dtype}>", WD._seam_steps, seam + (lab, I64),
                    "atom.global.add.u64"))
        out.append((f"relabel<{lab.dtype}>", WD._relabel, (lab,) + (I64,) * 4, "ld.global"))
    # the statistics: labels, strides, field, sizes, first, lo, hi, sums, extremes, NaN
    out.append(("cluster_sums", CL._sums,
                (I64, I64, F64, I64, I64, I64_2D, I64_2D, F64, F64, F64, I64), "atom.global"))
    out.append(("cluster_where", CL._where, (I64, F64, F64, F64, I64, I64), "atom.global"))
    # labels, strides, first, pieces, piece offsets, m1, m2
    out.append(("cluster_moments", CL._moments,
                (I64, I64, I64, nt.int32[::1], I64_2D, F64_2D, nt.float64[:, :, ::1]),
                "atom.global.add.f64"))
    out.append(("cluster_piece_labels", CL._piece_labels, (I64, nt.int32[::1], I64),
                "st.global"))
    # labels, strides, shape, axes, bits; bits, shape, axes, lo, hi
    out.append(("cluster_occupy", CL._occupy, (I64, I64, I64, I64, nt.uint32[:, :, ::1]),
                "atom.global.or.b32"))
    out.append(("cluster_gaps", CL._gaps, (nt.uint32[:, :, ::1], I64, I64, I64_2D, I64_2D),
                "st.global"))
    # the region graph: labels, shape, strides, periodic, forward offsets, bits, words,
    # count, the counter, the codes
    out.append(("cluster_contacts", CL._contacts,
                (I64, I64, I64, U8, I64_2D, nt.uint32[::1], nt.int64, nt.int64, I64, I64),
                "atom.global.add.u64"))
    for key, kd in (("f64", nt.float64), ("u64", nt.uint64)):
        # out, keys, delta, shape, strides, periodic, forward offsets, no sites, user
        # bits, words
        out.append((f"value_bits<{key}>", VB._value_bits,
                    (nt.uint32[::1], kd[::1], kd, I64, I64, U8, I64_2D, U8, nt.uint32[::1],
                     nt.int64), "st.global.u32"))
    for key in (nt.uint32, nt.uint64):
        for fname, farr in (("f64", F64), ("f32", nt.float32[::1])):
            # f in, indices in, f out, indices out, keys, marked, n, stride, periodic, w,
            # by_value, track, root, total
            out.append((f"edt_pass<{fname},{key}>", EDT._pass_kernel,
                        (farr, I64, farr, I64, key[::1], U8, nt.int64, nt.int64, nt.boolean,
                         nt.float64, nt.boolean, nt.boolean, nt.boolean, nt.int64),
                        "sqrt.rn.f"))
    # transport: the CSR pass with int32 columns (int64 past 2**31 rows): indptr,
    # indices, data, x, b, out, dinv, omega, mode
    for key, idx in (("i32", nt.int32[::1]), ("i64", I64)):
        out.append((f"transport_csr_pass<{key}>", TR._csr_pass,
                    (I64, idx, F64, F64, F64, F64, F64, nt.float64, nt.int64), "ld.global"))
    out.append(("transport_jacobi_start", TR._jacobi_start, (F64, F64, F64, nt.float64),
                "mul.f64"))
    out.append(("transport_restrict", TR._restrict, (I64, I64, F64, F64), "add.f64"))
    out.append(("transport_prolong", TR._prolong, (I64, F64, F64, nt.float64), "f64"))
    out.append(("transport_coarsest", TR._coarsest_solve, (F64_2D, F64, F64), "f64"))
    out.append(("transport_cg_step", TR._cg_step, (F64, F64, F64, F64, nt.float64), "f64"))
    out.append(("transport_cg_direction", TR._cg_direction,
                (F64, F64, nt.float64, nt.boolean), "f64"))
    out.append(("transport_cg_zero", TR._cg_zero, (F64,), "st.global"))
    out.append(("transport_cg_dots", TR._cg_dots, (F64, F64, F64, F64, F64_2D),
                "bar.sync"))
    rargs = (nt.uint64,) * 5
    for name, arr in [
        ("f64", F64),
        ("f32", nt.float32[::1]),
        ("u64", nt.uint64[::1]),
        ("u32", nt.uint32[::1]),
        ("u16", nt.uint16[::1]),
        ("u8", U8),
    ]:
        out.append((f"random<{name}>", R._fill_kernel, (nt.int64, arr) + rargs, "shr.u64"))
    return out


KERNELS = _kernels()


@pytest.mark.ptx
@pytest.mark.parametrize("name, kernel, argtypes, needle", KERNELS, ids=[k[0] for k in KERNELS])
def test_ptx_compiles_for_sm90(compile_ptx, name, kernel, argtypes, needle):
    ptx = compile_ptx(kernel, argtypes)
    assert ".entry" in ptx
    assert needle in ptx, f"{name}: expected {needle!r} in the PTX"


#: the grid-stride kernels of ``arrays`` (every array kernel but ``matmul``) and of
#: ``transport`` (all of them)
STRIDED = [k for k in KERNELS if k[1] in (
    gpu_arrays._xor_bytes_kernel, gpu_arrays._xor_words_kernel, gpu_arrays._sum_f64_kernel,
    gpu_arrays._sum_i64_kernel, gpu_arrays._sum_split_kernel, gpu_arrays._minmax_f64_kernel,
    gpu_arrays._minmax_i64_kernel, gpu_arrays._minmax_u64_kernel, gpu_arrays._binary_kernel,
    gpu_arrays._unary_kernel, gpu_arrays._affine_kernel, gpu_arrays._fill_kernel)
    or k[0].startswith("transport_")]


@pytest.mark.ptx
@pytest.mark.parametrize("name, kernel, argtypes, needle", STRIDED, ids=[k[0] for k in STRIDED])
def test_ptx_array_kernels_stride_and_use_no_atomics(compile_ptx, name, kernel, argtypes, needle):
    """The stride is the grid's size (``%nctaid``), and no kernel uses atomics: the
    reductions (the solver's dot products and restriction too) combine their partials
    in a fixed order."""
    ptx = compile_ptx(kernel, argtypes)
    assert "%nctaid.x" in ptx, f"{name}: no grid stride"
    assert not re.search(r"\s(atom|red)\.", ptx), f"{name}: atomics"


@pytest.mark.ptx
def test_ptx_xor_words_moves_two_words_per_step(compile_ptx):
    """8-byte loads and stores, two of each in the loop body (both loads first)."""
    ptx = compile_ptx(gpu_arrays._xor_words_kernel, (U64_2D, U8_2D, nt.int64, nt.int64, U64_2D))
    body = ptx[ptx.index("ld.global.u64"):]
    ops = re.findall(r"(ld|st)\.global\.u64", body)
    assert ops[:4] == ["ld", "ld", "st", "st"], ops


@pytest.mark.ptx
def test_ptx_matmul_uses_two_shared_tiles(compile_ptx):
    ptx = compile_ptx(gpu_arrays._matmul_kernel, (F64_2D, F64_2D, F64_2D))
    decls = [ln for ln in ptx.splitlines() if ".shared" in ln and ".align" in ln]
    assert len(decls) == 2, decls
    assert "bar.sync" in ptx


@pytest.mark.ptx
def test_ptx_random_normal_is_fma_free(compile_ptx):
    """NVVM fuses a * b + c into an FMA even without fastmath; the series of 'normal'
    multiply through ``_mul``, bound to libdevice's dmul_rn on CUDA, which PTX never
    fuses: so the GPU performs the same correctly rounded operations as the CPU."""
    ptx = compile_ptx(gpu_random._fill_kernel, (nt.int64, F64) + (nt.uint64,) * 5)
    assert "fma.rn.f64" not in ptx
    assert "mul.rn.f64" in ptx
