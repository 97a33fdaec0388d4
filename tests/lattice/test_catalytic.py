"""The catalytic guarantee: lent memory comes back bit-identical, also on errors."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import catalytic as cat
import catalytic.backends.numba_cpu as numba_cpu
import catalytic.backends.numpy_backend as numpy_backend
from tests.support.backends import available_backends
from tests.support.strategies import lattice_specs, make, pick_open

_ids = itertools.count()


def digest(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()).hexdigest()


def own_key(L) -> np.ndarray:
    """The lattice's aux bytes, read through the public API (XOR with zeros)."""
    return L.xor_transform(np.zeros(L.estimate_memory_usage()["aux"], np.uint8), backend="numpy")


def buffers(n, tmp_path):
    """Lent buffers of every kind, each at least ``n`` bytes."""
    rng = np.random.default_rng(0)
    mm = np.memmap(tmp_path / f"aux{next(_ids)}.bin", dtype=np.uint8, mode="w+", shape=(n + 100,))
    mm[:] = (np.arange(n + 100) // 16 % 5).astype(np.uint8)  # compressible
    mm.flush()
    return {
        "zeros": (np.zeros(n + 10, np.uint8), True),
        "pattern": ((np.arange(n + 64) % 7).astype(np.uint8), True),
        "pattern_int32": ((np.arange(n // 4 + 20) % 3).astype(np.int32), True),
        "random": (rng.integers(0, 256, size=n + 10, dtype=np.uint8), False),
        "too_small": (np.zeros(max(n // 2, 1) - 1 or 1, np.uint8), False),
        "memmap": (mm, True),
    }


# -- same results as the ordinary path search -----------------------------------------------------
@given(spec=lattice_specs(), data=st.data())
def test_catalytic_path_equals_shortest_path(spec, data):
    spec = dict(spec, weights=None)
    L = make(spec, aux_memory_size=max(1, int(np.prod(spec["shape"]))))
    s, t = pick_open(spec, data, "start"), pick_open(spec, data, "end")
    key = own_key(L)
    for b in available_backends():
        want = L.find_shortest_path(s, t, backend=b)
        got = L.find_path_catalytic(s, t, backend=b)
        assert isinstance(got, cat.PathResult)
        assert got.path.tolist() == want.path.tolist(), b
        assert got.distance == want.distance
        assert L.last_borrow is not None and L.last_borrow.needed == L.n_points
        np.testing.assert_array_equal(own_key(L), key)


@pytest.mark.parametrize(
    "kind", ["zeros", "pattern", "pattern_int32", "random", "too_small", "memmap"]
)
def test_lent_buffer_comes_back_bit_identical(kind, backend, on_backend, tmp_path):
    rng = np.random.default_rng(1)
    shape = (23, 19)
    mask = rng.random(shape) < 0.7
    mask[0, 0] = mask[-1, -1] = True
    L = cat.Lattice(shape=shape, mask=mask, periodic=(True, False))
    n = L.n_points
    buf, usable = buffers(n, tmp_path)[kind]
    before = digest(buf)
    copy = np.array(buf)
    want = L.find_shortest_path(0, n - 1, backend="numpy")
    got = on_backend(L.find_path_catalytic, 0, n - 1, buf)
    assert got.path.tolist() == want.path.tolist() and got.distance == want.distance
    assert digest(buf) == before
    np.testing.assert_array_equal(np.asarray(buf), copy)
    rec = L.last_borrow
    assert rec.needed == n
    if usable:
        assert rec.borrowed == n and "lent buffer" in rec.method
        assert 0 < rec.clean_bytes <= n // 2
    else:
        assert rec.borrowed == 0 and rec.method.startswith("fresh memory")
    if kind == "memmap":
        on_disk = np.fromfile(buf.filename, dtype=np.uint8)
        np.testing.assert_array_equal(on_disk, copy)


def test_own_buffer_is_used_and_regenerated(backend, on_backend):
    L = cat.Lattice(shape=(12, 13), seed=77, aux_memory_size=500)
    key, aux = own_key(L), L._aux.copy()
    res = on_backend(L.find_path_catalytic, 0, L.n_points - 1)
    assert res.distance == 11 + 12
    assert L.last_borrow.borrowed == L.n_points and "own buffer" in L.last_borrow.method
    np.testing.assert_array_equal(own_key(L), key)
    np.testing.assert_array_equal(L._aux, aux)
    # too small own buffer: fresh memory, still unchanged
    S = cat.Lattice(shape=(12, 13), aux_memory_size=10)
    s_aux = S._aux.copy()
    assert on_backend(S.find_path_catalytic, 0, 155).distance == 23
    assert S.last_borrow.borrowed == 0
    np.testing.assert_array_equal(S._aux, s_aux)


def test_catalytic_unreachable_and_trivial(backend, on_backend):
    mask = np.ones((5, 5), bool)
    mask[2] = False
    L = cat.Lattice(shape=(5, 5), mask=mask, aux_memory_size=64)
    aux = L._aux.copy()
    res = on_backend(L.find_path_catalytic, 0, 24)
    assert len(res.path) == 0 and res.distance == -1
    res = on_backend(L.find_path_catalytic, 3, 3)
    assert res.path.tolist() == [3] and res.distance == 0
    np.testing.assert_array_equal(L._aux, aux)


def test_catalytic_rejects_weighted_and_bad_buffers():
    W = cat.Lattice(shape=(3, 3), weights=np.ones((3, 3)))
    with pytest.raises(ValueError, match="weighted"):
        W.find_path_catalytic(0, 8)
    L = cat.Lattice(shape=(3, 3))
    with pytest.raises(TypeError):
        L.find_path_catalytic(0, 8, bytearray(100))
    with pytest.raises(ValueError, match="contiguous"):
        L.find_path_catalytic(0, 8, np.zeros((20, 20), np.uint8)[:, ::2])
    ro = np.zeros(100, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        L.find_path_catalytic(0, 8, ro)


# -- failures mid-way ------------------------------------------------------------------------------
class Boom(RuntimeError):
    pass


def test_numpy_search_raising_midway_restores_the_buffer(monkeypatch, tmp_path):
    L = cat.Lattice(shape=(15, 15), aux_memory_size=300)
    lent = (np.arange(400) % 3).astype(np.uint8)
    lent_copy, own = lent.copy(), L._aux.copy()
    real_expand = numpy_backend._expand
    calls = []

    def expand_then_fail(g, frontier):
        calls.append(1)
        if len(calls) == 3:  # the scratch is already half written
            raise Boom("kernel failed")
        return real_expand(g, frontier)

    monkeypatch.setattr(numpy_backend, "_expand", expand_then_fail)
    for buf, copy in ((lent, lent_copy), (None, own)):
        calls.clear()
        with pytest.raises(Boom):
            L.find_path_catalytic(0, 224, buf, backend="numpy")
        assert len(calls) == 3
        np.testing.assert_array_equal(L._aux if buf is None else buf, copy)


@pytest.mark.skipif("numba-cpu" not in available_backends(), reason="numba-cpu not available")
def test_numba_search_raising_midway_restores_the_buffer(monkeypatch):
    L = cat.Lattice(shape=(15, 15), aux_memory_size=300)
    lent = np.zeros(400, np.uint8)
    own = L._aux.copy()

    class ScribblingKernels:
        @staticmethod
        def catalytic_path(*args, **kwargs):  # kwargs: the bond arrays
            state = args[-1]
            state[:] = 0xAB  # writes all over the borrowed scratch ...
            raise Boom("kernel failed")  # ... and dies

    monkeypatch.setattr(numba_cpu, "_catalytic_path", lambda: ScribblingKernels)
    for buf, copy in ((lent, np.zeros(400, np.uint8)), (None, own)):
        with pytest.raises(Boom):
            L.find_path_catalytic(0, 224, buf, backend="numba-cpu")
        np.testing.assert_array_equal(L._aux if buf is None else buf, copy)


# -- the engine's own check ------------------------------------------------------------------------
class Borrower:
    """A plugin operation that borrows a buffer and misbehaves in a chosen way."""

    def __init__(self, mode):
        self.mode = mode
        self.op = f"t_borrow_{mode}_{next(_ids)}"

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        registry.add_operation(
            self.op, work=lambda buf: float(buf.size), borrows=lambda buf: buf, doc="test"
        )

        def impl(buf):
            raw = buf.reshape(-1).view(np.uint8)
            saved = raw.copy()
            raw[:5] ^= 0xFF  # use the buffer as scratch
            if self.mode == "restores":
                raw[:] = saved
                return "ok"
            if self.mode == "restores_then_raises":
                raw[:] = saved
                raise Boom("failed cleanly")
            if self.mode == "raises":
                raise Boom("failed dirty")
            return "forgot to restore"

        for b in available_backends():
            registry.add_implementation(self.op, b, impl)


@pytest.mark.parametrize(
    "mode, error",
    [("restores", None), ("restores_then_raises", Boom), ("corrupts", cat.CatalyticViolation),
     ("raises", cat.CatalyticViolation)],
)
def test_engine_verifies_borrowed_memory(mode, error, backend):
    eng = cat.get_engine()
    p = Borrower(mode)
    eng.register_plugin(p, p.op)
    try:
        buf = np.arange(64, dtype=np.uint8)
        if error is None:
            assert eng.run(p.op, buf, backend=backend) == "ok"
            return
        with pytest.raises(error) as info:
            eng.run(p.op, buf, backend=backend)
        if error is cat.CatalyticViolation:
            msg = str(info.value)
            assert p.op in msg and backend in msg
            if mode == "raises":
                assert isinstance(info.value.__cause__, Boom)
                assert "raised" in msg
    finally:
        eng.unregister_plugin(p.op)


def test_xor_with_own_key_leaves_the_key_alone(backend, on_backend):
    L = cat.Lattice(shape=(2,), seed=5, aux_memory_size=100)
    aux = L._aux.copy()
    for _ in range(3):
        on_backend(L.xor_transform, np.arange(1000, dtype=np.int64))
    np.testing.assert_array_equal(L._aux, aux)
