"""The cuda backend's host side: availability, devices, routing, residency, transfers,
device-memory checks, and the failure path (clean up, retry once, fall back)."""

from __future__ import annotations

import numpy as np
import pytest

import catalytic as cat
from catalytic.backends import cuda_backend as cb
from catalytic.device import probe

SIM = __import__("os").environ.get("NUMBA_ENABLE_CUDASIM") == "1"
GPU = not SIM and probe()[0]
NO_GPU_CASE = "checks the no-GPU, no-simulator case"

sim = pytest.mark.sim


@pytest.mark.skipif(SIM or GPU, reason=NO_GPU_CASE)
def test_without_gpu_the_backend_is_unavailable_and_says_why():
    ok, why = cat.get_engine().backends()["cuda"]
    assert not ok and "no CUDA GPU" in why
    assert cat.devices() == []
    L = cat.Lattice(shape=(6, 7))
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert dec.backend != "cuda" and "unavailable" in dec.rejected["cuda"]
    with pytest.raises(cat.NoBackendError, match="cuda"):
        L.distance_field(0, backend="cuda")


@pytest.mark.skipif(SIM or GPU, reason=NO_GPU_CASE)
def test_info_names_the_missing_gpu(capsys):
    from catalytic.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU found" in out and "cuda" in out


def _lattices():
    rng = np.random.default_rng(3)
    mask = rng.random((7, 9)) < 0.75
    mask[0, 0] = True
    w = rng.uniform(0.5, 2.0, (7, 9))
    return [
        cat.Lattice(shape=(7, 9), mask=mask),
        cat.Lattice(shape=(5, 6), periodic=True, stencil="moore"),
        cat.Lattice(shape=(7, 9), mask=mask, weights=w),
        cat.Lattice(shape=(2, 3, 5), periodic=(True, False, True)),
    ]


@pytest.mark.simulator_only
def test_simulator_is_available_but_never_chosen_unforced():
    ok, why = cat.get_engine().backends()["cuda"]
    assert ok and "simulator" in why
    assert cat.devices()[0]["simulator"] is True
    L = cat.Lattice(shape=(64, 64))
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert dec.backend != "cuda" and "cuda" in dec.predictions


@sim
@pytest.mark.parametrize("idx", range(4))
def test_forced_cuda_matches_the_reference(idx):
    L = _lattices()[idx]
    src = int(np.flatnonzero(L.geometry.open_flat)[0]) if L.geometry.mask is not None else 0
    end = int(np.flatnonzero(L.geometry.open_flat)[-1]) if L.geometry.mask is not None else L.n_points - 1
    np.testing.assert_array_equal(L.distance_field(src, backend="cuda"), L.distance_field(src, backend="numpy"))
    assert L.last_decision.backend == "numpy"
    got, want = L.find_shortest_path(src, end, backend="cuda"), L.find_shortest_path(src, end, backend="numpy")
    np.testing.assert_array_equal(got.path, want.path)
    assert got.distance == want.distance
    c_got, c_want = L.connected_components(backend="cuda"), L.connected_components(backend="numpy")
    np.testing.assert_array_equal(c_got.labels, c_want.labels)
    assert c_got.count == c_want.count
    np.testing.assert_array_equal(L.degree(backend="cuda"), L.degree(backend="numpy"))
    f = np.linspace(0, 1, L.n_points).reshape(L.shape)
    np.testing.assert_allclose(L.laplacian(f, backend="cuda"), L.laplacian(f, backend="numpy"), rtol=1e-12, atol=1e-12)


@sim
def test_mask_and_weights_are_copied_once_and_released_by_cleanup():
    L = _lattices()[2]
    # the geometry's tables are cached per process: copy them now (a lattice of the same
    # geometry without mask or weights), so the counts below do not depend on test order
    cat.Lattice(shape=L.shape, periodic=L.periodic, stencil=L.geometry.offsets).distance_field(
        0, backend="cuda")
    cb.reset_transfer_stats()
    L.distance_field(0, backend="cuda")
    first = cb.transfer_stats()
    assert first["h2d_bytes"] >= L.geometry.mask.nbytes + L.geometry.weights.nbytes
    assert first["d2h_bytes"] >= 8 * L.n_points  # the result came back
    L.distance_field(0, backend="cuda")
    second = cb.transfer_stats()
    # an identical second call makes the same small copies (tables, sources, counters)
    # but not the mask and weights: the first moved exactly those bytes more
    again = second["h2d_bytes"] - first["h2d_bytes"]
    assert first["h2d_bytes"] - again == L.geometry.mask.nbytes + L.geometry.weights.nbytes
    assert "cuda" in L._backend_state
    L.cleanup()
    assert "cuda" not in L._backend_state


def _device_with_free(monkeypatch, free):
    """The device-memory monitor reads ``free`` bytes free of ``2 * free`` until the
    test ends (half used: below the cleanup threshold)."""
    from catalytic.memory import get_monitor

    mon = get_monitor()
    monkeypatch.setattr(mon, "_provider", lambda: (free, 2 * free))
    monkeypatch.setattr(mon, "_device", "test device")


@sim
def test_device_memory_shortfall_is_a_reason_and_a_memory_error(monkeypatch):
    L = _lattices()[0]
    _device_with_free(monkeypatch, 1000)
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert "device memory" in dec.rejected["cuda"]
    with pytest.raises(cat.InsufficientMemoryError, match="device memory"):
        L.distance_field(0, backend="cuda")


@sim
def test_a_failure_is_retried_once_then_falls_back_to_the_cpu(monkeypatch):
    from catalytic.kernels.cuda import graph

    L = _lattices()[0]
    want = L.distance_field(0, backend="numpy")
    calls = {"n": 0}
    real = graph.bfs_distance

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated launch failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(graph, "bfs_distance", flaky)
    np.testing.assert_array_equal(L.distance_field(0, backend="cuda"), want)
    assert calls["n"] == 2 and L.last_decision.backend == "cuda"

    def broken(*args, **kwargs):
        raise RuntimeError("simulated out of memory")

    monkeypatch.setattr(graph, "bfs_distance", broken)
    eng = cat.get_engine()
    before = len(eng.fallbacks)
    np.testing.assert_array_equal(L.distance_field(0, backend="cuda"), want)
    assert len(eng.fallbacks) == before + 1
    assert eng.fallbacks[-1]["from"] == "cuda" and eng.fallbacks[-1]["to"] in ("numpy", "numba-cpu")
    assert "failed twice" in L.last_decision.reason
    assert "cuda" not in L._backend_state  # cleaned up after the failure


@sim
def test_fallback_off_raises(monkeypatch):
    from catalytic.kernels.cuda import graph

    def broken(*args, **kwargs):
        raise RuntimeError("simulated launch failure")

    monkeypatch.setattr(graph, "bfs_distance", broken)
    eng = cat.reset_engine(fallback=False)
    try:
        L = cat.Lattice(shape=(5, 5))
        with pytest.raises(RuntimeError, match="simulated launch failure"):
            L.distance_field(0, backend="cuda")
    finally:
        cat.reset_engine()
    assert eng.fallbacks == []


@sim
def test_device_fields_stay_on_the_device_through_chained_calls():
    from numba import cuda

    L = cat.Lattice(shape=(6, 7), periodic=(True, False))
    f = np.linspace(-1, 1, L.n_points).reshape(L.shape)
    want = L.diffuse(L.laplacian(f, backend="numpy"), steps=2, alpha=0.1, backend="numpy")
    dev = cuda.to_device(f)
    cb.reset_transfer_stats()
    lap = L.laplacian(dev)  # unforced: CPU backends decline device input
    assert L.last_decision.backend == "cuda"
    assert "GPU" in L.last_decision.rejected["numpy"]
    out = L.diffuse(lap, steps=2, alpha=0.1)
    assert hasattr(out, "copy_to_host") and tuple(out.shape) == L.shape
    assert cb.transfer_stats()["d2h_bytes"] == 0  # nothing came back until asked
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        L.laplacian(cuda.to_device(np.zeros(5)))


@sim
def test_transfers_count_the_kernels_own_copies_and_the_key_is_cached():
    L = cat.Lattice(shape=(4, 4), aux_memory_size=64)
    data = np.arange(100, dtype=np.int32)
    cb.reset_transfer_stats()
    out = L.xor_transform(data, backend="cuda")
    t = cb.transfer_stats()
    # the data and the key went over, the result came back
    assert t["h2d_bytes"] == data.nbytes + 64 and t["d2h_bytes"] == out.nbytes
    np.testing.assert_array_equal(L.xor_transform(out, backend="numpy"), data)
    L.xor_transform(data, backend="cuda")
    # the key stayed on the device: the second call copied only the data over
    assert cb.transfer_stats()["h2d_bytes"] - t["h2d_bytes"] == data.nbytes


def _host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else x


@sim
def test_array_ops_keep_gpu_inputs_on_the_device():
    from numba import cuda

    rng = np.random.default_rng(5)
    L = cat.Lattice(shape=(3, 4), aux_memory_size=40)
    ints = rng.integers(-1000, 1000, (7, 9)).astype(np.int32)
    x = rng.normal(size=(5, 7))
    y = rng.normal(size=(5, 7))
    m = rng.normal(size=(7, 3))
    d_ints, d_x, d_y, d_m = (cuda.to_device(a) for a in (ints, x, y, m))
    key = np.array([3, -7], dtype=np.int32)
    cases = [
        (lambda: L.xor_transform(d_ints), lambda: L.xor_transform(ints, backend="numpy")),
        (lambda: L.xor_transform(d_ints, key), lambda: L.xor_transform(ints, key, backend="numpy")),
        (lambda: L.xor_transform(d_ints, cuda.to_device(key)),
         lambda: L.xor_transform(ints, key, backend="numpy")),
        (lambda: cat.ops.normalize(d_x), lambda: cat.ops.normalize(x, backend="numpy")),
        (lambda: cat.ops.normalize(d_ints), lambda: cat.ops.normalize(ints, backend="numpy")),
        (lambda: cat.ops.scale(d_x, factor=-2.5), lambda: cat.ops.scale(x, factor=-2.5, backend="numpy")),
        (lambda: cat.ops.elementwise("abs", d_x), lambda: np.abs(x)),
        (lambda: cat.ops.elementwise("mul", d_x, d_y), lambda: x * y),
        (lambda: cat.ops.elementwise("sub", d_x, y), lambda: x - y),
        (lambda: cat.ops.elementwise("max", x, d_y), lambda: np.maximum(x, y)),
        (lambda: cat.ops.matmul(d_x, m), None),
        (lambda: cat.ops.matmul(x, d_m), None),
    ]
    for run, reference in cases:
        cb.reset_transfer_stats()
        got = run()
        assert cat.get_engine().last_decision.backend == "cuda"
        assert "GPU" in cat.get_engine().last_decision.rejected["numpy"]
        assert hasattr(got, "copy_to_host"), "a GPU input gives a GPU result"
        # the result did not come back (normalize reads its min and max: 2 scalars)
        assert cb.transfer_stats()["d2h_bytes"] <= 24 < got.nbytes
        if reference is None:  # matmul: the reference is the CPU twin
            want = cat.ops.matmul(x, m, backend="numba-cpu")
            if not SIM:  # a GPU sums in FMAs (or cuBLAS's own order): within k eps |x| @ |m|
                bound = 2 * x.shape[1] * np.finfo(float).eps * (np.abs(x) @ np.abs(m))
                np.testing.assert_array_less(np.abs(got.copy_to_host() - want), bound)
                continue
        else:
            want = reference()
        np.testing.assert_array_equal(got.copy_to_host(), want)  # the simulator: same sums
    # the inputs are untouched
    for d, h in ((d_ints, ints), (d_x, x), (d_y, y), (d_m, m)):
        np.testing.assert_array_equal(d.copy_to_host(), h)


@sim
@pytest.mark.parametrize("op", ["sum", "min", "max", "mean"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint16, np.float64])
def test_reductions_of_gpu_arrays_match_the_reference(op, dtype):
    from numba import cuda

    x = (np.arange(1, 301) * 7919 % 1000).astype(dtype)
    got = cat.ops.reduce(cuda.to_device(x), op)
    assert cat.get_engine().last_decision.backend == "cuda"
    want = cat.ops.reduce(x, op, backend="numpy")
    assert type(got) is type(want)
    if op == "mean":
        assert got == pytest.approx(want, rel=1e-15)
    else:
        assert got == want


@sim
@pytest.mark.parametrize(
    "values, dtype",
    [([2**63 - 1, -1, 1], np.int64), ([2**63 - 1, 1], np.int64), ([-(2**63), -1], np.int64),
     ([2**63 + 5, 1], np.uint64), ([2**63 - 2, 1], np.uint64), ([2**64 - 1] * 3, np.uint64)],
)
def test_integer_sums_of_gpu_arrays_are_exact_or_raise(values, dtype):
    from numba import cuda

    d = cuda.to_device(np.array(values, dtype))
    exact = sum(values)
    if -(2**63) <= exact < 2**63:
        got = cat.ops.reduce(d, "sum")
        assert type(got) is np.int64 and int(got) == exact
    else:
        with pytest.raises(OverflowError, match=str(exact)):
            cat.ops.reduce(d, "sum")
    assert cat.get_engine().last_decision.backend == "cuda"
    assert cat.ops.reduce(d, "mean") == exact / len(values)


def _same_floats(got, want):
    got = got.copy_to_host() if hasattr(got, "copy_to_host") else np.asarray(got)
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-13)


@sim
def test_gpu_arrays_propagate_nan_and_inf_as_the_reference():
    from numba import cuda

    x = np.array([1.0, np.nan, 3.0, np.inf, -2.0, -np.inf, 0.5, 4.0])
    y = np.array([2.0, 1.0, np.inf, np.inf, np.nan, -np.inf, 0.0, -1.0])
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    with np.errstate(all="ignore"):
        for op in ("sum", "min", "max", "mean"):
            _same_floats(cat.ops.reduce(dx, op), cat.ops.reduce(x, op, backend="numpy"))
            _same_floats(cat.ops.reduce(dy[:6], op), cat.ops.reduce(y[:6], op, backend="numpy"))
        _same_floats(cat.ops.normalize(dy), cat.ops.normalize(y, backend="numpy"))
        _same_floats(cat.ops.scale(dx, -2.0), cat.ops.scale(x, -2.0, backend="numpy"))
        for op in ("add", "sub", "mul", "div", "max", "min", "pow"):
            _same_floats(cat.ops.elementwise(op, dx, dy),
                         cat.ops.elementwise(op, x, y, backend="numpy"))
        m = x.reshape(2, 4)
        _same_floats(cat.ops.matmul(cuda.to_device(m), cuda.to_device(y.reshape(4, 2))),
                     cat.ops.matmul(m, y.reshape(4, 2), backend="numpy"))
        mask = np.ones((5, 6), bool)
        mask[2, 2] = mask[0, 5] = False
        L = cat.Lattice(shape=(5, 6), mask=mask)
        f = np.resize(np.concatenate([x, y]), (5, 6))
        f[2, 2] = np.nan  # blocked
        got = L.laplacian(cuda.to_device(f))
        assert cat.get_engine().last_decision.backend == "cuda"
        _same_floats(got, L.laplacian(f, backend="numpy"))
        got = L.diffuse(cuda.to_device(f), 3, 0.1)
        assert cat.get_engine().last_decision.backend == "cuda"
        _same_floats(got, L.diffuse(f, 3, 0.1, backend="numpy"))


@sim
def test_gpu_xor_refusals_name_the_dtype():
    from numba import cuda

    L = cat.Lattice(shape=(3,))
    with pytest.raises(TypeError, match=r"dtype bool; .*astype\(np\.uint8\)"):
        L.xor_transform(cuda.to_device(np.ones(3, bool)))
    with pytest.raises(TypeError, match=r"float32; XOR of float bits .*np\.uint32"):
        L.xor_transform(cuda.to_device(np.ones(3, np.float32)))


@sim
def test_gpu_inputs_get_clear_errors_before_any_work():
    from numba import cuda

    f32 = cuda.to_device(np.ones(4, dtype=np.float32))
    with pytest.raises(TypeError, match="float64"):
        cat.ops.elementwise("neg", f32)
    with pytest.raises(TypeError, match="real numeric"):
        cat.ops.normalize(cuda.to_device(np.ones(4, dtype=bool)))
    with pytest.raises(TypeError, match="float64"):
        cat.ops.matmul(cuda.to_device(np.ones((2, 2), np.float32)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="no broadcasting"):
        cat.ops.elementwise("add", cuda.to_device(np.ones((2, 3))), np.ones(3))
    with pytest.raises(ValueError, match="C-contiguous"):
        cat.ops.scale(cuda.to_device(np.ones((4, 4)))[:, 1])
    with pytest.raises(ValueError, match="do not align"):
        cat.ops.matmul(cuda.to_device(np.ones((2, 3))), cuda.to_device(np.ones((2, 3))))
    with pytest.raises(ValueError, match="empty"):
        cat.ops.reduce(cuda.to_device(np.ones(0)), "min")
    L = cat.Lattice(shape=(3,))
    with pytest.raises(TypeError, match="integer data"):
        L.xor_transform(cuda.to_device(np.ones(3)))
    with pytest.raises(TypeError, match="dtype"):
        L.xor_transform(cuda.to_device(np.arange(3)), cuda.to_device(np.arange(3, dtype=np.int8)))
    with pytest.raises(TypeError, match="float64"):
        L.laplacian(cuda.to_device(np.ones(3, dtype=np.float32)))
    # a CPU backend forced on GPU input says why it cannot run it
    with pytest.raises(cat.NoBackendError, match="lives on the GPU"):
        cat.ops.normalize(cuda.to_device(np.ones(3)), backend="numba-cpu")


@sim
def test_a_gpu_input_failure_is_not_handed_to_a_cpu_backend(monkeypatch):
    from numba import cuda

    from catalytic.kernels.cuda import fields

    def broken(*args, **kwargs):
        raise RuntimeError("simulated launch failure")

    monkeypatch.setattr(fields, "laplacian", broken)
    L = cat.Lattice(shape=(3, 4))
    before = len(cat.get_engine().fallbacks)
    with pytest.raises(RuntimeError, match="simulated launch failure"):
        L.laplacian(cuda.to_device(np.ones(L.shape)))
    assert len(cat.get_engine().fallbacks) == before  # no CPU backend takes GPU arrays


@sim
def test_routing_checks_read_memory_and_the_run_makes_room(monkeypatch):
    rng = np.random.default_rng(1)
    big = cat.Lattice(shape=(10, 12), weights=rng.uniform(1, 2, (10, 12)))  # 960 bytes
    small = cat.Lattice(shape=(5, 5))
    big.distance_field(0, backend="cuda")
    held = cb.cached_bytes()
    assert held == big.geometry.weights.nbytes  # no mask: the weights alone
    # 600 bytes needed, 90 free: it fits only once the big lattice's copies go
    _device_with_free(monkeypatch, 100)
    dec = cat.get_engine().explain("distance_field", small, 0, backend="cuda")
    assert dec.backend == "cuda"
    assert "cuda" in big._backend_state, "routing must not release anything"
    np.testing.assert_array_equal(small.distance_field(0, backend="cuda"),
                                  small.distance_field(0, backend="numpy"))
    assert "cuda" not in big._backend_state and "cuda" in small._backend_state
    # with nothing left to release, the same shortfall is a reason and a MemoryError
    _device_with_free(monkeypatch, 10)
    with pytest.raises(cat.InsufficientMemoryError, match="device memory"):
        big.distance_field(0, backend="cuda")


@pytest.mark.simulator_only
def test_gpu_benchmark_script_runs_end_to_end_in_the_simulator(capsys, tmp_path):
    """The script that measures the GPU targets works before a GPU ever runs it (its
    smoke figures are not measurements, and it writes no report for them)."""
    import importlib.util

    from tests.support import ROOT

    path = ROOT / "benchmarks" / "bench_gpu.py"
    spec = importlib.util.spec_from_file_location("bench_gpu", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke", "--output", str(tmp_path / "gpu.md")]) == 0
    out = capsys.readouterr().out
    assert "closed form ok" in out and "router agreement" in out
    assert "conductance = numba-cpu" in out
    assert "not GPU measurements" in out
    assert not list(tmp_path.iterdir())


# -- cost terms: levels and PCIe -------------------------------------------------------------
@pytest.mark.parametrize("shape, periodic, stencil", [
    ((64, 64), False, "von_neumann"), ((9, 12, 7), (True, False, True), "von_neumann"),
    ((10, 13), False, "moore"), ((8, 9, 5), True, "moore"), ((40,), True, "von_neumann"),
])
def test_hops_estimate_is_the_unblocked_bfs(shape, periodic, stencil):
    """On an unblocked lattice the estimate is the BFS's own count: the diameter (the
    farthest site from a corner, and on a torus from anywhere) and every pair's hops."""
    from catalytic.kernels.cpu import bfs

    L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil)
    g = L.geometry
    far = bfs.bfs_distance(*g.kernel_args(), [0])
    assert cb.hops_estimate(g) == far.max()
    for b in np.random.default_rng(1).choice(g.n_points, 5):
        assert cb.hops_estimate(g, 0, int(b)) == far[b]
    # blocked sites only lengthen the paths: still a lower bound
    mask = np.random.default_rng(2).random(shape) < 0.7
    mask.reshape(-1)[0] = True
    M = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil, mask=mask)
    dist = bfs.bfs_distance(*M.geometry.kernel_args(), [0])
    for b in np.flatnonzero(dist > 0)[:20]:
        assert cb.hops_estimate(M.geometry, 0, int(b)) <= dist[b]


def test_gpu_prediction_counts_the_levels_of_a_small_search():
    """The review's case: uncalibrated, a 64x64 distance field was predicted at 0.1 ms on
    the GPU, while its 127 levels are 127 launches. The levels term now prices them."""
    L = cat.Lattice(shape=(64, 64))
    terms = cb._terms_for("distance_field")({}, L, np.array([0]))
    assert terms["launches"] == pytest.approx(127 * cb.DEFAULT_TERMS["launch_s"])
    # the int64 distances back, and the sources array over
    assert terms["PCIe"] == pytest.approx((8 * 4096 + 8) / cb.DEFAULT_TERMS["pcie_bytes_per_s"])
    work = cat.get_engine().registry.operation("distance_field").work(L, 0)
    gpu = cb.GPU_DEFAULT_COST[0] + work / cb.GPU_DEFAULT_COST[1] + sum(terms.values())
    assert gpu > 0.7e-3
    # calibrated parameters replace the defaults
    fast = cb._terms_for("distance_field")({"launch_s": 1e-6, "pcie_bytes_per_s": 1e12},
                                           L, np.array([0]))
    assert fast["launches"] == pytest.approx(127e-6)
    # a search to a near site queues only its own levels
    near = cb._terms_for("shortest_path")({}, L, 0, 65)
    assert near["launches"] == pytest.approx(3 * cb.DEFAULT_TERMS["launch_s"])
    # and brings back the path (walked on the device) and end's distance, not 8 n bytes
    assert near["PCIe"] == pytest.approx(8 * (2 + 2) / cb.DEFAULT_TERMS["pcie_bytes_per_s"])
    W = cat.Lattice(shape=(64, 64), weights=np.ones((64, 64)))
    W._backend_state["cuda"] = {"open_": object(), "weights": object()}  # as if resident
    weighted = cb._terms_for("shortest_path")({}, W, 0, 65)["PCIe"]
    assert weighted == pytest.approx(8 * 4096 / cb.DEFAULT_TERMS["pcie_bytes_per_s"])


def test_pcie_term_counts_what_is_not_on_the_device():
    mask = np.ones((32, 32), bool)
    mask[3, 4] = False
    L = cat.Lattice(shape=(32, 32), mask=mask, weights=np.ones((32, 32)))
    rate = cb.DEFAULT_TERMS["pcie_bytes_per_s"]
    before = cb._terms_for("distance_field")({}, L, np.array([0]))["PCIe"]
    # mask, weights and the sources over, the result back
    assert before == pytest.approx((1024 + 8 * 1024 + 8 + 8 * 1024) / rate)
    L._backend_state["cuda"] = {"open_": object(), "weights": object()}  # as if resident
    try:
        after = cb._terms_for("distance_field")({}, L, np.array([0]))["PCIe"]
    finally:
        L._backend_state.pop("cuda")
    assert after == pytest.approx((8 + 8 * 1024) / rate)
    x = np.ones(1000)
    assert cb._terms_for("reduce")({}, x, "sum")["PCIe"] == pytest.approx(2 * 8000 / rate)


@sim
def test_measured_terms_are_positive_rates():
    """The wiring of ``catalytic calibrate``'s GPU measurement (under the simulator the
    figures mean nothing; on a GPU they are the calibration)."""
    got = cb.measure_terms(launches=3, nbytes=4096, repeat=1)
    assert set(got) == {"launch_s", "pcie_bytes_per_s"}
    assert all(v > 0 and np.isfinite(v) for v in got.values())
