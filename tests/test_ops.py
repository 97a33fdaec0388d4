"""``cat.ops``: array operations routed like lattice operations, checked against NumPy."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import catalytic as cat
from tests.support.backends import available_backends

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
small_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)


def float_arrays(shape=small_shapes):
    return hnp.arrays(np.float64, shape, elements=finite)


# -- matmul ----------------------------------------------------------------------------------
@given(m=st.integers(1, 24), k=st.integers(0, 24), n=st.integers(1, 24), seed=st.integers(0, 999),
       as_int=st.booleans())
def test_matmul_matches_numpy(m, k, n, seed, as_int):
    rng = np.random.default_rng(seed)
    if as_int:
        a, b = rng.integers(-9, 9, (m, k)), rng.integers(-9, 9, (k, n))
    else:
        a, b = rng.normal(size=(m, k)), rng.normal(size=(k, n))
    a0, b0 = a.copy(), b.copy()
    want = np.matmul(a.astype(float), b.astype(float))
    for bk in available_backends():
        got = cat.ops.matmul(a, b, backend=bk)
        assert got.dtype == np.float64 and got.shape == (m, n)
        if as_int:
            np.testing.assert_array_equal(got, want, err_msg=bk)  # exact: small integers
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * max(k, 1), err_msg=bk)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_matmul_large_and_non_contiguous():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(130, 77))
    b = rng.normal(size=(154, 65))[::2]  # non-contiguous rows
    want = a @ b
    for bk in available_backends():
        np.testing.assert_allclose(cat.ops.matmul(a, b, backend=bk), want, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(cat.ops.matmul(a, b.copy(), backend=bk), want, rtol=1e-11,
                                   atol=1e-11)


def test_matmul_errors():
    with pytest.raises(ValueError, match="align"):
        cat.ops.matmul(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="2-D"):
        cat.ops.matmul(np.ones(3), np.ones((3, 1)))
    with pytest.raises(TypeError):
        cat.ops.matmul(np.ones((2, 2), bool), np.ones((2, 2)))


# -- reduce ---------------------------------------------------------------------------------
@given(x=float_arrays(), op=st.sampled_from(["sum", "min", "max", "mean"]))
def test_reduce_float_matches_numpy(x, op):
    if x.size == 0 and op != "sum":
        for bk in available_backends():
            with pytest.raises(ValueError, match="empty"):
                cat.ops.reduce(x, op, backend=bk)
        return
    want = {"sum": np.sum, "min": np.min, "max": np.max, "mean": np.mean}[op](x)
    tol = 1e-12 * (np.abs(x).sum() + 1)
    for bk in available_backends():
        got = cat.ops.reduce(x, op, backend=bk)
        assert np.ndim(got) == 0
        if op in ("min", "max"):
            assert got == want, bk
        else:
            assert abs(float(got) - float(want)) <= tol, bk


INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.dtype(">i4"), np.dtype(">u8")]
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


@st.composite
def int_arrays(draw):
    """Integer arrays of every width, values anywhere in range but often at its ends
    (where sums overflow and float64 accumulation loses the low bits)."""
    dtype = np.dtype(draw(st.sampled_from(INT_DTYPES)))
    info = np.iinfo(dtype)
    ends = st.sampled_from([info.min, info.max, info.max - 1, info.min + 1, 0, 1])
    elements = st.one_of(st.integers(int(info.min), int(info.max)), ends)
    return draw(hnp.arrays(dtype, small_shapes, elements=elements))


@given(x=int_arrays(), op=st.sampled_from(["sum", "min", "max", "mean"]))
def test_reduce_integers_exact(x, op):
    """The oracle is Python's int arithmetic: sums are exact or raise OverflowError (never
    wrap), means are the exact sum over n, correctly rounded."""
    if x.size == 0 and op != "sum":
        return
    exact = sum(x.reshape(-1).tolist())
    for bk in available_backends():
        if op == "sum" and not INT64_MIN <= exact <= INT64_MAX:
            with pytest.raises(OverflowError, match=str(exact)):
                cat.ops.reduce(x, op, backend=bk)
            continue
        got = cat.ops.reduce(x, op, backend=bk)
        if op == "sum":
            assert type(got) is np.int64 and int(got) == exact, bk
        elif op == "mean":
            assert type(got) is np.float64 and got == exact / x.size, bk
        else:
            assert int(got) == int(getattr(np, op)(x)), bk


def test_reduce_integer_sums_that_fit_are_exact_near_the_int64_limits(backend):
    cases = [
        ([INT64_MAX, -1, 1], np.int64),  # fits, though a running sum passes the limit
        ([INT64_MIN, 0], np.int64),
        ([INT64_MAX - 1, 1], np.uint64),
        ([2**62] * 2 + [-(2**62)] * 2 + [INT64_MAX], np.int64),
        ([2**32 - 1] * 5, np.uint32),
        # float64 accumulation: 2**63 - 2**63 + 3 = 3, a mean of 1.0 instead of 2/3
        ([INT64_MAX, INT64_MIN, 3], np.int64),
        ([INT64_MAX, INT64_MIN, 3], ">i8"),
    ]
    for values, dtype in cases:
        x = np.array(values, dtype=dtype)
        exact = sum(values)
        got = cat.ops.reduce(x, "sum", backend=backend)
        assert type(got) is np.int64 and int(got) == exact, values
        assert cat.ops.reduce(x, "mean", backend=backend) == exact / len(values), values


@pytest.mark.parametrize(
    "values, dtype",
    [
        ([INT64_MAX, 1], np.int64),
        ([2**62] * 3, np.int64),
        ([INT64_MIN, -1], np.int64),
        ([2**63 + 5, 1], np.uint64),  # uint64 above 2**63: was cast to int64 and wrapped
        ([2**64 - 1] * 3, np.uint64),
        ([INT64_MAX] * 2, ">i8"),
    ],
)
def test_reduce_integer_sum_overflow_raises_and_the_mean_stays_right(values, dtype, backend):
    x = np.array(values, dtype=dtype)
    exact = sum(values)
    with pytest.raises(OverflowError) as err:
        cat.ops.reduce(x, "sum", backend=backend)
    msg = str(err.value)
    assert str(exact) in msg and "int64" in msg and "astype(np.float64)" in msg
    mean = cat.ops.reduce(x, "mean", backend=backend)
    assert type(mean) is np.float64 and mean == exact / len(values)
    np.testing.assert_array_equal(x, np.array(values, dtype=dtype))  # input untouched


def test_reduce_integer_mean_is_the_exact_sum_correctly_rounded(backend):
    # float64 accumulation gives (2**53 + 1) + 1 = 2**53: the mean would be 2/3 off
    x = np.array([2**53, 1, 1], dtype=np.int64)
    assert cat.ops.reduce(x, "mean", backend=backend) == (2**53 + 2) / 3


@pytest.mark.parametrize("n", [70_001, 1_000_003])  # past the serial and parallel thresholds
def test_reduce_integer_sums_of_large_arrays(n, backend):
    if backend == "cuda" and SIM:
        if n > 100_000:
            pytest.skip("the simulator runs this test once, shrunk to a few blocks")
        n = 1001  # four blocks: the simulator runs some thousand threads a second
    # partial sums overflow on the way, the total does not: exact, no false alarm
    x = np.full(n, 2**60, dtype=np.int64)
    x[n // 2 :] = -(2**60)
    x[-1] = 12345
    want = sum(x.tolist())
    got = cat.ops.reduce(x, "sum", backend=backend)
    assert int(got) == want
    assert cat.ops.reduce(x, "mean", backend=backend) == want / n
    c = 2**63 // n + 1  # n * c > 2**63 - 1
    u = np.full(n, c, dtype=np.uint64)
    with pytest.raises(OverflowError, match=str(n * c)):
        cat.ops.reduce(u, "sum", backend=backend)
    assert cat.ops.reduce(u, "mean", backend=backend) == float(c)
    y = np.random.default_rng(0).normal(size=n)
    assert float(cat.ops.reduce(y, "sum", backend=backend)) == pytest.approx(y.sum(), abs=1e-8)
    assert float(cat.ops.reduce(y, "max", backend=backend)) == y.max()


def test_reduce_unsigned_min_max_and_unknown_op():
    u = np.array([2**63 + 5, 1, 2**64 - 1, 7], dtype=np.uint64)
    for bk in available_backends():
        assert int(cat.ops.reduce(u, "min", backend=bk)) == 1
        assert int(cat.ops.reduce(u, "max", backend=bk)) == 2**64 - 1
    with pytest.raises(ValueError, match="unknown reduce"):
        cat.ops.reduce(u, "prod")


# -- elementwise ---------------------------------------------------------------------------------
UNARY = {"neg": np.negative, "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "log": np.log,
         "sin": np.sin, "cos": np.cos}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "max": np.maximum, "min": np.minimum, "pow": np.power}


@given(x=hnp.arrays(np.float64, small_shapes, elements=st.floats(0.01, 50)),
       op=st.sampled_from(sorted(UNARY)), negate=st.booleans())
def test_elementwise_unary_matches_numpy(x, op, negate):
    if negate and op not in ("sqrt", "log"):
        x = -x
    want = UNARY[op](x)
    for bk in available_backends():
        got = cat.ops.elementwise(op, x, backend=bk)
        assert got.dtype == np.float64 and got.shape == x.shape
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0, err_msg=f"{bk} {op}")


@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=5),
    op=st.sampled_from(sorted(BINARY)),
    seed=st.integers(0, 999),
)
def test_elementwise_binary_broadcasts_like_numpy(shapes, op, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes.input_shapes
    a = rng.uniform(0.5, 3, size=sa)
    b = rng.integers(-3, 4, size=sb)  # integers: promoted to float64
    with np.errstate(all="ignore"):  # b may hold zeros: div gives inf as in NumPy
        want = BINARY[op](a, b.astype(np.float64))
    for bk in available_backends():
        with np.errstate(all="ignore"):
            got = cat.ops.elementwise(op, a, b, backend=bk)
        assert got.shape == shapes.result_shape and got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0, err_msg=f"{bk} {op}")


def test_elementwise_special_values_agree():
    a = np.array([1.0, -1.0, 0.0, 0.0, 4.0])
    b = np.array([0.0, 0.0, 0.0, 2.0, 0.5])
    with np.errstate(all="ignore"):
        want_div = a / b
        want_log = np.log(a)
    for bk in available_backends():
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(cat.ops.elementwise("div", a, b, backend=bk), want_div)
            np.testing.assert_array_equal(cat.ops.elementwise("log", a, backend=bk), want_log)
        got = cat.ops.elementwise("neg", np.float64(3.0), backend=bk)
        assert got.shape == () and got == -3.0


def test_elementwise_errors():
    with pytest.raises(ValueError, match="unknown elementwise"):
        cat.ops.elementwise("tan", np.ones(2))
    with pytest.raises(ValueError, match="binary"):
        cat.ops.elementwise("add", np.ones(2))
    with pytest.raises(ValueError, match="unary"):
        cat.ops.elementwise("neg", np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="broadcast"):
        cat.ops.elementwise("add", np.ones(2), np.ones(3))


# -- normalize / scale ---------------------------------------------------------------------------
@given(x=float_arrays(), factor=finite)
def test_normalize_scale_match_numpy(x, factor):
    span = x.max() - x.min() if x.size else 0.0
    want = np.zeros_like(x) if span == 0 else (x - x.min()) / span
    for bk in available_backends():
        got = cat.ops.normalize(x, backend=bk)
        assert got.shape == x.shape and got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=bk)
        np.testing.assert_array_equal(cat.ops.scale(x, factor, backend=bk), x * factor)


# -- NaN and inf: IEEE propagation, as NumPy ------------------------------------------------------
special = st.sampled_from([np.nan, np.inf, -np.inf])
with_specials = st.one_of(finite, special)


def assert_same_floats(got, want, msg=""):
    """Equal NaN positions, equal infinities, finite values within rounding."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, msg
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=msg)
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=msg)
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-12, atol=1e-9, err_msg=msg)


@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=20),
                    elements=with_specials),
       op=st.sampled_from(["sum", "min", "max", "mean"]))
def test_reduce_nan_and_inf_propagate_as_in_numpy(x, op):
    reducer = {"sum": np.sum, "min": np.min, "max": np.max, "mean": np.mean}[op]
    x32 = x.astype(np.float32)
    for bk in available_backends():
        with np.errstate(invalid="ignore"):  # inf - inf: NumPy warns, the kernels do not
            got, want = cat.ops.reduce(x, op, backend=bk), reducer(x)
            # float32 is reduced in float64
            got32 = cat.ops.reduce(x32, op, backend=bk)
            want32 = reducer(x32.astype(np.float64))
        assert_same_floats(got, want, f"{bk} {op}")
        assert_same_floats(got32, want32, f"{bk} {op} float32")


@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=12),
                    elements=with_specials),
       factor=finite)
def test_normalize_and_scale_nan_and_inf_as_in_numpy(x, factor):
    """normalize is (x - min) / (max - min) evaluated as NumPy does: one NaN makes min and
    max NaN, so every value is NaN; a constant array gives zeros."""
    lo, hi = x.min(), x.max()
    with np.errstate(all="ignore"):
        want = np.zeros_like(x) if hi == lo else (x - lo) / (hi - lo)
        want_scaled = x * factor
    for bk in available_backends():
        with np.errstate(all="ignore"):
            assert_same_floats(cat.ops.normalize(x, backend=bk), want, bk)
            assert_same_floats(cat.ops.scale(x, factor, backend=bk), want_scaled, bk)


# The CUDA simulator runs Python's math module, which raises on sqrt(-1), exp(1e6),
# sin(inf), ... where a GPU (and NumPy) give NaN or inf: under the simulator those unary
# ops are checked on the CPU backends only (on a GPU, every op runs).
SIM_SAFE_UNARY = ("neg", "abs")


@given(a=hnp.arrays(np.float64, st.integers(1, 30), elements=with_specials),
       b=hnp.arrays(np.float64, st.integers(1, 30), elements=with_specials),
       data=st.data())
def test_elementwise_nan_and_inf_as_in_numpy(a, b, data):
    b = np.resize(b, a.shape)
    op = data.draw(st.sampled_from(sorted(BINARY) + sorted(UNARY)))
    with np.errstate(all="ignore"):
        want = BINARY[op](a, b) if op in BINARY else UNARY[op](a)
    for bk in available_backends():
        if bk == "cuda" and SIM and op in UNARY and op not in SIM_SAFE_UNARY:
            continue
        with np.errstate(all="ignore"):
            got = (cat.ops.elementwise(op, a, b, backend=bk) if op in BINARY
                   else cat.ops.elementwise(op, a, backend=bk))
        if op in ("pow", "exp", "sin", "cos"):
            # libm and NumPy's SIMD versions differ by an ulp or two
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{bk} {op}")
            np.testing.assert_allclose(got, want, rtol=1e-13, err_msg=f"{bk} {op}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{bk} {op}")


@given(m=st.integers(1, 6), k=st.integers(1, 6), n=st.integers(1, 6), data=st.data())
def test_matmul_nan_and_inf_as_in_numpy(m, k, n, data):
    a = data.draw(hnp.arrays(np.float64, (m, k), elements=with_specials))
    b = data.draw(hnp.arrays(np.float64, (k, n), elements=with_specials))
    with np.errstate(all="ignore"):
        want = a @ b
    for bk in available_backends():
        with np.errstate(all="ignore"):
            assert_same_floats(cat.ops.matmul(a, b, backend=bk), want, bk)


# -- random ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("distribution", ["uniform", "normal", "integers"])
@pytest.mark.parametrize("shape", [(1,), (17,), (3, 5, 7), (1000,), (257, 129)])
def test_random_reproducible_and_identical_across_backends(distribution, shape):
    ref = cat.ops.random(shape, seed=42, distribution=distribution, backend="numpy")
    want_dtype = np.uint64 if distribution == "integers" else np.float64
    assert ref.shape == shape and ref.dtype == want_dtype
    np.testing.assert_array_equal(cat.ops.random(shape, 42, distribution), ref)
    for bk in available_backends():
        got = cat.ops.random(shape, seed=42, distribution=distribution, backend=bk)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref, err_msg=bk)
    if ref.size > 1:
        other = cat.ops.random(shape, seed=43, distribution=distribution)
        assert not np.array_equal(other, ref)
    # a stream is one sequence: a longer draw starts with the shorter one
    flat = cat.ops.random((ref.size + 5,), 42, distribution).reshape(-1)
    np.testing.assert_array_equal(flat[: ref.size], ref.reshape(-1))


def test_random_distributions_statistics():
    n = 200_000
    for bk in available_backends():
        u = cat.ops.random((n,), seed=3, distribution="uniform", backend=bk)
        assert u.min() >= 0.0 and u.max() < 1.0
        assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
        counts = np.histogram(u, bins=10, range=(0, 1))[0]
        assert np.all(np.abs(counts - n / 10) < 6 * np.sqrt(n / 10))
        z = cat.ops.random((n,), seed=3, distribution="normal", backend=bk)
        assert abs(z.mean()) < 5 / np.sqrt(n) and abs(z.std() - 1) < 0.01
        r = cat.ops.random((n,), seed=3, distribution="integers", backend=bk)
        bits = np.unpackbits(r.view(np.uint8)).mean()
        assert abs(bits - 0.5) < 0.005
        assert len(np.unique(r)) == n


def test_random_errors():
    with pytest.raises(ValueError, match="distribution"):
        cat.ops.random((3,), distribution="poisson")
    with pytest.raises(ValueError):
        cat.ops.random((3,), seed=-1)
    with pytest.raises(ValueError):
        cat.ops.random((0,))
    with pytest.raises(TypeError):
        cat.ops.random((3,), seed=1.5)


def test_ops_decisions_are_explained():
    eng = cat.get_engine()
    for bk in available_backends():
        cat.ops.reduce(np.arange(5), "sum", backend=bk)
        assert eng.last_decision.backend == bk and eng.last_decision.forced
    dec = eng.explain("matmul", np.ones((3, 3)), np.ones((3, 3)))
    assert dec.backend in dec.predictions
    assert dec.predictions[dec.backend] == min(dec.predictions.values())
    assert dec.work == 27.0


def test_scalar_types_agree_across_backends():
    x = np.array([3, 1], np.float32)
    got = {b: cat.ops.reduce(x, "max", backend=b) for b in available_backends()}
    assert all(type(v) is np.float32 and v == 3 for v in got.values())
    neg = {b: cat.ops.elementwise("neg", 3.0, backend=b) for b in available_backends()}
    assert all(np.ndim(v) == 0 and not isinstance(v, np.ndarray) and v == -3 for v in neg.values())
