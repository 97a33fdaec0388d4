"""``cat.ops``: array operations routed like lattice operations, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import catalytic as cat
from lattice_oracles import available_backends

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


@given(
    x=hnp.arrays(
        st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                         np.uint64, np.dtype(">i4"), np.dtype(">u8")]),
        small_shapes,
    ),
    op=st.sampled_from(["sum", "min", "max", "mean"]),
)
def test_reduce_integers_exact(x, op):
    if x.size == 0 and op != "sum":
        return
    if op == "sum":
        want = int(np.sum(x, dtype=np.int64))
    elif op == "mean":
        want = float(np.mean(x, dtype=np.float64))
    else:
        want = int(getattr(np, op)(x))
    for bk in available_backends():
        got = cat.ops.reduce(x, op, backend=bk)
        if op == "mean":
            assert float(got) == pytest.approx(want, rel=1e-12), bk
        else:
            assert int(got) == want, bk


def test_reduce_int64_sum_wraps_like_numpy_and_large():
    big = np.array([2**62, 2**62, 2**62], dtype=np.int64)
    x = np.arange(1_000_003, dtype=np.int64) * 7919
    y = np.random.default_rng(0).normal(size=1_000_003)
    for bk in available_backends():
        assert int(cat.ops.reduce(big, "sum", backend=bk)) == int(big.sum())  # wraps
        assert int(cat.ops.reduce(x, "sum", backend=bk)) == int(x.sum())
        assert float(cat.ops.reduce(y, "sum", backend=bk)) == pytest.approx(y.sum(), abs=1e-8)
        assert float(cat.ops.reduce(y, "max", backend=bk)) == y.max()
        assert float(cat.ops.reduce(y, "mean", backend=bk)) == pytest.approx(y.mean(), abs=1e-12)
    # unsigned values >= 2**63 stay unsigned in min / max / mean
    u = np.array([2**63 + 5, 1, 2**64 - 1, 7], dtype=np.uint64)
    for bk in available_backends():
        assert int(cat.ops.reduce(u, "min", backend=bk)) == 1
        assert int(cat.ops.reduce(u, "max", backend=bk)) == 2**64 - 1
        mean = float(cat.ops.reduce(u, "mean", backend=bk))
        assert mean == pytest.approx(float(u.mean()), rel=1e-15)
        assert int(cat.ops.reduce(u, "sum", backend=bk)) == int(u.sum(dtype=np.int64))
    with pytest.raises(ValueError, match="unknown reduce"):
        cat.ops.reduce(x, "prod")


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
