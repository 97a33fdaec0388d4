"""Stencil fields (Laplacian, diffusion) and XOR / array transformations."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import laplacian as csgraph_laplacian

import catalytic as cat
from tests.support.backends import available_backends, declines
from tests.support.oracles import graph_of, offsets_of, oracle_neighbors
from tests.support.strategies import (
    LARGE_EXAMPLES,
    large_lattice_specs,
    lattice_specs,
    make,
)

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def oracle_laplacian(spec):
    G = graph_of(spec, all_nodes=True)
    n = G.number_of_nodes()
    A = nx.to_scipy_sparse_array(G, nodelist=range(n), dtype=np.float64)
    return csgraph_laplacian(A)


def random_field(shape, seed, kind="float"):
    rng = np.random.default_rng(seed)
    if kind == "int":
        return rng.integers(-50, 50, size=shape)
    return rng.normal(size=shape) * 10


# -- Laplacian -----------------------------------------------------------------------------
@given(spec=lattice_specs(), seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["float", "int"]))
def test_laplacian_matches_csgraph(spec, seed, kind):
    L = make(spec)
    f = random_field(L.shape, seed, kind)
    f_copy = f.copy()
    Lmat = oracle_laplacian(spec)
    want = (Lmat @ f.reshape(-1).astype(np.float64)).reshape(L.shape)
    scale = np.abs(f).max() * (len(L.offsets) + 1)
    for b in available_backends():
        got = L.laplacian(f, backend=b)
        assert got.dtype == np.float64 and got.shape == L.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * scale, err_msg=b)
        # a flat field of n_points entries is accepted too
        np.testing.assert_allclose(L.laplacian(f.reshape(-1), backend=b), want, rtol=1e-12,
                                   atol=1e-12 * scale, err_msg=b)
    np.testing.assert_array_equal(f, f_copy)
    if spec["mask"] is not None:
        assert (want[~spec["mask"]] == 0).all()


@pytest.mark.parametrize("n", [3, 7, 16, 31])
def test_periodic_ring_eigenvalues(n, backend, on_backend):
    """On a ring of n sites, cos(2 pi k x / n) and sin(...) are eigenvectors with
    eigenvalue 2 - 2 cos(2 pi k / n)."""
    L = cat.Lattice(shape=(n,), periodic=True)
    x = np.arange(n)
    for k in range(n):
        lam = 2 - 2 * np.cos(2 * np.pi * k / n)
        for v in (np.cos(2 * np.pi * k * x / n), np.sin(2 * np.pi * k * x / n)):
            np.testing.assert_allclose(on_backend(L.laplacian, v), lam * v, atol=1e-12)


def test_periodic_torus_eigenvalues(backend, on_backend):
    """Products of ring eigenvectors on a torus: eigenvalues add across axes."""
    shape = (5, 8, 3)
    L = cat.Lattice(shape=shape, periodic=True)
    grids = np.indices(shape)
    for ks in [(0, 0, 0), (1, 0, 0), (2, 3, 1), (4, 7, 2)]:
        v = np.ones(shape)
        lam = 0.0
        for k, n, x in zip(ks, shape, grids):
            v = v * np.cos(2 * np.pi * k * x / n)
            lam += 2 - 2 * np.cos(2 * np.pi * k / n)
        np.testing.assert_allclose(on_backend(L.laplacian, v), lam * v, atol=1e-11)


def test_laplacian_large_agrees_across_backends():
    rng = np.random.default_rng(2)
    shape = (37, 41, 5)
    mask = rng.random(shape) < 0.8
    f = rng.normal(size=shape)
    for stencil in ("von_neumann", "moore"):
        L = cat.Lattice(shape=shape, mask=mask, stencil=stencil, periodic=(True, False, True))
        ref = L.laplacian(f, backend="numpy")
        spec = {"shape": shape, "periodic": (True, False, True), "stencil": stencil, "mask": mask}
        want = oracle_laplacian(spec) @ f.reshape(-1)
        np.testing.assert_allclose(ref.reshape(-1), want, atol=1e-12)
        for b in available_backends():
            np.testing.assert_allclose(L.laplacian(f, backend=b), ref, rtol=1e-12, atol=1e-12)


# -- diffusion --------------------------------------------------------------------------------
@given(spec=lattice_specs(), seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 12))
def test_diffuse_is_repeated_matvec_and_conserves_sum(spec, seed, steps):
    L = make(spec)
    f = random_field(L.shape, seed)
    f_copy = f.copy()
    alpha = 0.9 / (2 * len(L.offsets))  # stable: alpha < 2 / max eigenvalue
    Lmat = oracle_laplacian(spec)
    want = f.reshape(-1).astype(np.float64)
    for _ in range(steps):
        want = want - alpha * (Lmat @ want)
    want = want.reshape(L.shape)
    open_ = np.ones(L.shape, bool) if spec["mask"] is None else spec["mask"]
    for b in available_backends():
        got = L.diffuse(f, steps=steps, alpha=alpha, backend=b)
        assert got.dtype == np.float64 and got.shape == L.shape
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=b)
        assert got[open_].sum() == pytest.approx(f[open_].sum(), rel=1e-9, abs=1e-8)
        np.testing.assert_array_equal(got[~open_], f[~open_])  # blocked sites keep their value
    np.testing.assert_array_equal(f, f_copy)


def test_diffuse_converges_to_the_mean(backend, on_backend):
    L = cat.Lattice(shape=(6, 5), periodic=True)
    f = np.zeros((6, 5))
    f[2, 3] = 30.0
    got = on_backend(L.diffuse, f, 400, 0.2)
    np.testing.assert_allclose(got, np.full((6, 5), 1.0), atol=1e-6)
    assert on_backend(L.diffuse, f, 0, 0.2).tolist() == f.tolist()


def test_diffuse_large_agrees_across_backends():
    rng = np.random.default_rng(4)
    shape = (64, 65)
    mask = rng.random(shape) < 0.9
    L = cat.Lattice(shape=shape, mask=mask, stencil="moore")
    f = rng.random(shape)
    ref = L.diffuse(f, 25, 0.05, backend="numpy")
    for b in available_backends():
        got = L.diffuse(f, 25, 0.05, backend=b)
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
        assert got[mask].sum() == pytest.approx(f[mask].sum(), rel=1e-12)


# -- NaN and inf in fields: IEEE propagation, blocked sites stay out ------------------------------
def field_with_specials(shape, seed):
    """A float field with NaN, inf and -inf at random sites (about one site in five)."""
    rng = np.random.default_rng(seed)
    f = rng.normal(size=shape) * 10
    flat = f.reshape(-1)
    pick = rng.random(flat.size)
    flat[pick < 0.08] = np.nan
    flat[(pick >= 0.08) & (pick < 0.14)] = np.inf
    flat[(pick >= 0.14) & (pick < 0.2)] = -np.inf
    return f


def oracle_laplacian_ieee(spec, f):
    """``deg_i f_i - sum_j f_j`` site by site in Python floats (IEEE: 0 * inf and
    inf - inf are NaN), 0 at blocked sites, from the neighbour definition."""
    shape, mask = spec["shape"], spec["mask"]
    per = spec["periodic"]
    per = (per,) * len(shape) if isinstance(per, bool) else tuple(per)
    offsets = offsets_of(spec["stencil"], len(shape))
    flat = f.reshape(-1).tolist()
    out = []
    for i in range(len(flat)):
        if mask is not None and not mask.reshape(-1)[i]:
            out.append(0.0)
            continue
        nbrs = oracle_neighbors(shape, per, offsets, mask, i)
        out.append(len(nbrs) * flat[i] - sum(flat[j] for j in nbrs))
    return np.array(out).reshape(shape)


def assert_same_field(got, want, msg):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{msg}: NaN positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{msg}: infinities")
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-9, atol=1e-9, err_msg=msg)


@given(spec=lattice_specs(), seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 4),
       alpha=st.sampled_from([0.0, 0.05, 0.1]))
def test_laplacian_and_diffuse_propagate_nan_and_inf(spec, seed, steps, alpha):
    L = make(spec)
    f = field_with_specials(L.shape, seed)
    keep = f.copy()
    want = oracle_laplacian_ieee(spec, f)
    g = f.copy()
    with np.errstate(invalid="ignore"):
        for _ in range(steps):
            g = g - alpha * oracle_laplacian_ieee(spec, g)
    for b in available_backends():
        with np.errstate(invalid="ignore"):  # inf - inf: NumPy/SciPy warn, kernels do not
            lap = L.laplacian(f, backend=b)
            # NaN propagation of f - alpha L f for any alpha: a stencil with more than
            # 10 offsets puts 0.1 above the stability limit, which is not tested here
            dif = L.diffuse(f, steps=steps, alpha=alpha, allow_unstable=True, backend=b)
        assert_same_field(lap, want, f"{b} laplacian")
        assert_same_field(dif, g, f"{b} diffuse")
    np.testing.assert_array_equal(f, keep)


def test_blocked_sites_holding_nan_do_not_reach_their_neighbours(backend, on_backend):
    mask = np.ones((3, 4), bool)
    mask[1, 1] = False
    L = cat.Lattice(shape=(3, 4), mask=mask)
    f = np.arange(12.0).reshape(3, 4)
    f[1, 1] = np.nan  # blocked: not part of the lattice
    f[2, 3] = np.inf
    with np.errstate(invalid="ignore"):
        lap = on_backend(L.laplacian, f)
        dif = on_backend(L.diffuse, f, 2, 0.1)
    assert lap[1, 1] == 0.0
    want = np.isin(np.arange(12), [7, 10, 11]).reshape(3, 4)  # the inf site and its neighbours
    np.testing.assert_array_equal(~np.isfinite(lap), want)
    assert np.isnan(dif[1, 1]) and np.isfinite(dif[0, 0])  # blocked sites keep their value
    # one open site and no neighbour: deg * f = 0 * nan is NaN, 0 * inf too
    one = cat.Lattice(shape=(1,), mask=np.ones(1, bool))
    with np.errstate(invalid="ignore"):
        assert np.isnan(on_backend(one.laplacian, np.array([np.nan]))).all()
        assert np.isnan(on_backend(one.laplacian, np.array([np.inf]))).all()
        # f - alpha * (L f) as NumPy evaluates it: inf - 0 * nan is NaN, even for alpha = 0
        assert np.isnan(on_backend(one.diffuse, np.array([np.inf]), 1, 0.0)).all()


# -- XOR transform ---------------------------------------------------------------------------------
SHAPES = [(), (0,), (1,), (7,), (1001,), (2, 3), (3, 4, 5), (2, 0, 3)]


def sample(dtype, shape, seed=0):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_xor_with_lattice_key_is_self_inverse(dtype, shape, backend, on_backend):
    L = cat.Lattice(shape=(4, 4), seed=123, aux_memory_size=1000)
    data = sample(dtype, shape)
    keep = data.copy()
    out = on_backend(L.xor_transform, data)
    assert out.dtype == data.dtype and out.shape == data.shape
    np.testing.assert_array_equal(data, keep)  # input untouched
    back = on_backend(L.xor_transform, out)
    np.testing.assert_array_equal(back, data)
    # the key is the lattice's key bytes, repeated over the raw bytes of the data
    key = on_backend(L.xor_transform, np.zeros(1000, np.uint8))
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    want = (raw ^ np.resize(key, raw.size)).view(data.dtype).reshape(shape)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("key_len", [1, 3, 64, 2000])
def test_xor_with_explicit_key_repeats_elementwise(dtype, shape, key_len, backend, on_backend):
    L = cat.Lattice(shape=(3,))
    data = sample(dtype, shape, seed=1)
    keep = data.copy()
    key = sample(dtype, (key_len,), seed=2)
    key_keep = key.copy()
    out = on_backend(L.xor_transform, data, key)
    want = (data.reshape(-1) ^ np.resize(key, data.size)).reshape(shape) if data.size else data
    assert out.dtype == data.dtype and out.shape == data.shape
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(on_backend(L.xor_transform, out, key), data)
    np.testing.assert_array_equal(data, keep)
    np.testing.assert_array_equal(key, key_keep)


def test_xor_key_properties():
    data = np.arange(5000, dtype=np.uint8)
    a = cat.Lattice(shape=(2,), seed=7, aux_memory_size=1000)
    b = cat.Lattice(shape=(9, 9), seed=7, aux_memory_size=1000)
    c = cat.Lattice(shape=(2,), seed=8, aux_memory_size=1000)
    for bk in available_backends():
        xa = a.xor_transform(data, backend=bk)
        np.testing.assert_array_equal(xa, b.xor_transform(data, backend=bk))  # key = f(seed)
        assert not np.array_equal(xa, c.xor_transform(data, backend=bk))
        ks = xa ^ data  # key stream: period = aux_memory_size
        np.testing.assert_array_equal(ks[:1000], ks[1000:2000])
        np.testing.assert_array_equal(ks[:1000], ks[4000:5000])
        assert ks[:1000].any()


def test_xor_scalar_key_and_mixed_key_dtype(backend, on_backend):
    L = cat.Lattice(shape=(3,))
    data = np.arange(10, dtype=np.int16)
    np.testing.assert_array_equal(on_backend(L.xor_transform, data, 5), data ^ 5)
    np.testing.assert_array_equal(
        on_backend(L.xor_transform, data, np.array([1, 2], dtype=np.int64)),
        data ^ np.resize(np.array([1, 2], np.int16), 10),
    )
    with pytest.raises(ValueError):
        L.xor_transform(np.zeros(3, np.uint8), np.array([300]), backend=backend)


def test_xor_non_contiguous_and_large_agree_across_backends():
    L = cat.Lattice(shape=(3,), seed=99, aux_memory_size=777)
    base = sample(np.int32, (300, 400), seed=5)
    view = base[::2, ::3]
    ref = L.xor_transform(np.ascontiguousarray(view), backend="numpy")
    for b in available_backends():
        np.testing.assert_array_equal(L.xor_transform(view, backend=b), ref)
        np.testing.assert_array_equal(L.xor_transform(ref, backend=b), view)
        key = np.arange(13, dtype=np.int32)
        np.testing.assert_array_equal(L.xor_transform(base, key, backend=b),
                                      base ^ np.resize(key, base.shape))


def test_xor_big_endian_data():
    L = cat.Lattice(shape=(3,))
    data = np.arange(20, dtype=">i4")
    for b in available_backends():
        why = declines(b, "xor_transform", L, data)
        if why is not None:
            assert "byte order" in why
            continue
        out = L.xor_transform(data, backend=b)
        np.testing.assert_array_equal(L.xor_transform(out, backend=b), data)
    routed = L.xor_transform(data)  # the router picks a backend that can
    np.testing.assert_array_equal(L.xor_transform(routed), data)


# byte order: XOR acts on values, so a byte-swapped copy gives the same values in its
# own dtype on every backend, single or batched, and decrypts as the native copy does
WIDE_INT_DTYPES = [np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def _swapped(a):
    """The same values in the other byte order (a non-native dtype)."""
    return a.astype(a.dtype.newbyteorder("S"))


def _key_values(L, native_dtype, n):
    """Oracle of ``xor_transform(key=None)``: the lattice's key bytes repeated over the
    data's bytes in native order, read as n integers of the data's width."""
    key = L.xor_transform(np.zeros(L._aux.size, np.uint8), backend="numpy")
    width = np.dtype(native_dtype).itemsize
    return np.resize(key, n * width).view(native_dtype)


@pytest.mark.parametrize("dtype", WIDE_INT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("keyed", [False, True], ids=["lattice-key", "explicit-key"])
def test_xor_of_byte_swapped_data_is_xor_of_its_values(dtype, keyed, backend):
    """Every backend runs it (none declines a byte order) and gives the values' XOR."""
    def run(*args):
        out = L.xor_transform(*args, backend=backend)
        assert cat.get_engine().last_decision.backend == backend
        return out

    L = cat.Lattice(shape=(4, 4), seed=321, aux_memory_size=100)
    native = sample(dtype, (3, 41), seed=7)
    data = _swapped(native)
    assert not data.dtype.isnative and np.array_equal(data, native)
    keep = data.copy()
    key = sample(dtype, (5,), seed=8) if keyed else None
    stream = np.resize(key, native.size) if keyed else _key_values(L, dtype, native.size)
    want = native ^ stream.reshape(native.shape)  # values XOR key, exact
    out = run(data, key)
    assert out.dtype == data.dtype and out.shape == data.shape  # the input's byte order
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out, L.xor_transform(native, key, backend=backend))
    np.testing.assert_array_equal(data, keep)
    # decrypts in either byte order, on this backend and on the reference
    np.testing.assert_array_equal(run(out, key), native)
    np.testing.assert_array_equal(L.xor_transform(out.astype(dtype), key, backend="numpy"),
                                  native)
    np.testing.assert_array_equal(run(_swapped(want), key), native)


@pytest.mark.parametrize("dtype", WIDE_INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_batched_xor_of_byte_swapped_rows_equals_single_calls(dtype, backend):
    L = cat.Lattice(shape=(4, 4), seed=321, aux_memory_size=100)
    rows = _swapped(sample(dtype, (3, 2, 9), seed=9))
    eng = cat.get_engine()
    for key in (None, np.array([3, 1, 4], dtype=dtype)):
        args = () if key is None else (key,)
        try:
            got = eng.run("batched.xor_transform", L, rows, *args, backend=backend)
        except cat.NoBackendError as err:
            assert backend != "numpy" and "key" in str(err), err  # cuda: lattice key only
            continue
        for g, r in zip(got, rows):
            single = L.xor_transform(r, key, backend=backend)
            assert g.dtype == r.dtype == single.dtype and g.shape == r.shape
            np.testing.assert_array_equal(g, single)


@pytest.mark.parametrize("order", ["<", ">"])
def test_batch_processor_xor_keeps_byte_order_and_equals_single_calls(order):
    L = cat.Lattice(shape=(4, 4), seed=5, aux_memory_size=100)
    arrays = [sample(np.int32, (11,), seed=i).astype(order + "i4") for i in range(3)]
    bp = cat.BatchProcessor(arrays, lattice=L, progress=False, batched=True)
    res = bp.map("xor_transform")
    assert res.errors == {} and bp.stats()["mode"] == "batched"
    for got, a in zip(res, arrays):
        single = L.xor_transform(a)
        assert got.dtype == a.dtype == single.dtype
        np.testing.assert_array_equal(got, single)
        np.testing.assert_array_equal(got, L.xor_transform(a.astype(np.int32)))
        np.testing.assert_array_equal(L.xor_transform(got), a)  # decrypts


@pytest.mark.parametrize("bad", [np.ones(4), np.ones(3, np.float32), np.ones(2, bool), [0.5, 1.5],
                                 np.ones(2, complex)])
def test_xor_non_integer_data_raises_type_error(bad, backend):
    L = cat.Lattice(shape=(3,))
    with pytest.raises(TypeError, match="integer"):
        L.xor_transform(bad, backend=backend)
    with pytest.raises(TypeError):
        L.xor_transform(bad, np.array([1, 2]), backend=backend)


def test_xor_bad_keys():
    L = cat.Lattice(shape=(3,))
    with pytest.raises(TypeError):
        L.xor_transform(np.arange(3), np.array([1.5]))
    with pytest.raises(ValueError, match="empty"):
        L.xor_transform(np.arange(3), np.array([], dtype=np.int64))


# -- apply_transformation --------------------------------------------------------------------------
def test_apply_transformation_xor_normalize_scale(backend, on_backend):
    L = cat.Lattice(shape=(4,), seed=5)
    data = np.array([[3, -1, 7], [2, 2, 0]], dtype=np.int32)
    keep = data.copy()
    np.testing.assert_array_equal(on_backend(L.apply_transformation, data, "xor"),
                                  L.xor_transform(data, backend=backend))
    keyed = on_backend(L.apply_transformation, data, "xor", key=np.array([6]))
    np.testing.assert_array_equal(keyed, data ^ 6)
    norm = on_backend(L.apply_transformation, data, "normalize")
    assert norm.dtype == np.float64
    np.testing.assert_allclose(norm, (data - data.min()) / (data.max() - data.min()), rtol=1e-15)
    np.testing.assert_array_equal(on_backend(L.apply_transformation, np.full(5, 3.0), "normalize"),
                                  np.zeros(5))
    sc = on_backend(L.apply_transformation, data, "scale", factor=-2.5)
    np.testing.assert_allclose(sc, data * -2.5, rtol=0)
    np.testing.assert_array_equal(data, keep)


@given(x=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300), factor=st.floats(-1e3, 1e3))
def test_normalize_and_scale_agree_with_numpy(x, factor):
    x = np.array(x)
    L = cat.Lattice(shape=(2,))
    span = x.max() - x.min()
    want = np.zeros_like(x) if span == 0 else (x - x.min()) / span
    for b in available_backends():
        np.testing.assert_allclose(L.apply_transformation(x, "normalize", backend=b), want,
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(L.apply_transformation(x, "scale", factor=factor, backend=b),
                                   x * factor, rtol=1e-15, atol=0)


def test_apply_unknown_transformation():
    L = cat.Lattice(shape=(2,))
    with pytest.raises(ValueError, match="unknown operation"):
        L.apply_transformation(np.arange(3), "no_such_transform")


@settings(max_examples=LARGE_EXAMPLES)
@given(spec=large_lattice_specs(), seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 6))
def test_fields_agree_with_reference_on_larger_lattices(spec, seed, steps):
    L = make(spec)
    f = random_field(L.shape, seed)
    alpha = 0.9 / (2 * len(L.offsets))
    ref_l = L.laplacian(f, backend="numpy")
    ref_d = L.diffuse(f, steps, alpha, backend="numpy")
    for b in available_backends():
        np.testing.assert_allclose(L.laplacian(f, backend=b), ref_l, rtol=1e-12, atol=1e-10,
                                   err_msg=b)
        np.testing.assert_allclose(L.diffuse(f, steps, alpha, backend=b), ref_d, rtol=1e-10,
                                   atol=1e-10, err_msg=b)


# -- diffusion stability ----------------------------------------------------------------------
def test_unstable_diffusion_is_refused_with_the_limit():
    L = cat.Lattice(shape=(32, 32), periodic=True)
    f = np.random.default_rng(0).random(L.shape)
    with pytest.raises(ValueError, match=r"alpha <= 0\.25.*allow_unstable=True"):
        L.diffuse(f, steps=5, alpha=10)
    blown = L.diffuse(f, steps=50, alpha=10, allow_unstable=True)  # opted in: it blows up
    assert not np.isfinite(blown).all() or np.abs(blown).max() > 1e30
    with pytest.raises(ValueError, match=r"alpha <= 0\.038"):  # 3-D Moore: 26 offsets
        cat.Lattice(shape=(4, 4, 4), stencil="moore").diffuse(np.ones((4, 4, 4)))
    with pytest.raises(TypeError, match="allow_unstable"):
        L.diffuse(f, allow_unstable="yes")


def test_the_limit_is_exact_on_a_periodic_lattice():
    """The checkerboard is the Laplacian's top eigenvector (eigenvalue 2k = 8) on an
    even periodic lattice: at alpha = 1/k its amplitude stays 1 (factor 1 - 8 alpha = -1),
    just above it grows; so the bound cannot be loosened."""
    from catalytic.catalogue import diffusion_limit

    L = cat.Lattice(shape=(8, 8), periodic=True)
    alpha = diffusion_limit(L)
    assert alpha == 0.25
    board = np.indices(L.shape).sum(axis=0) % 2 * 2.0 - 1.0
    np.testing.assert_allclose(np.abs(L.diffuse(board, steps=101, alpha=alpha)), 1.0)
    over = L.diffuse(board, steps=101, alpha=alpha * 1.01, allow_unstable=True)
    assert np.abs(over).max() > 7  # (1.02)^101
