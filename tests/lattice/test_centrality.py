"""Betweenness (exact and sampled) and closeness on the numba-cpu kernels
(``catalytic/kernels/cpu/centrality.py``) against NetworkX, through the public API and
the kernels: every geometry (periodic axes, stencils, masks, custom stencils with tiny
periodic axes, the unpadded index space), more than 2**16 sites, thread counts, kernel
budgets, signal handlers, validation, several Python threads, and the routing of the
new keywords to backends and plugins."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import networkx as nx
import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.backends import cuda_backend
from catalytic.kernels.cpu import centrality as CC
from catalytic.kernels.cpu import _budget, _padded, bfs
from tests.support.oracles import graph_of, open_sites, oracle_graph
from tests.support.strategies import lattice_specs, make

CPU = "numba-cpu"
#: the reference and the backend whose kernels this file covers, named rather than
#: the available backends (tests.support.backends): cuda declines betweenness
BACKENDS = ("numpy", CPU)


def as_array(values: dict, n: int, sites) -> np.ndarray:
    """NetworkX's {node: value} on the flat lattice, NaN on sites that are not nodes."""
    out = np.full(n, np.nan)
    out[sites] = [values[int(i)] for i in sites]
    return out


def vn_graph(mask, periodic) -> nx.Graph:
    """Von Neumann lattice graph of the True sites of ``mask`` (axes longer than 2),
    nodes in ascending flat order, built with NumPy rolls (not catalytic's geometry)."""
    idx = np.arange(mask.size).reshape(mask.shape)
    G_ = nx.Graph()
    G_.add_nodes_from(np.flatnonzero(mask).tolist())
    for a, per in enumerate(periodic):
        nxt_idx = np.roll(idx, -1, axis=a)
        both = mask & np.roll(mask, -1, axis=a)
        if not per:
            sl = [slice(None)] * mask.ndim
            sl[a] = -1
            both[tuple(sl)] = False
        G_.add_edges_from(zip(idx[both].tolist(), nxt_idx[both].tolist()))
    return G_


def nx_betweenness(G_, n, sites, k=None, seed=None) -> np.ndarray:
    return as_array(nx.betweenness_centrality(G_, k=k, seed=seed), n, sites)


@st.composite
def custom_specs(draw):
    """Lattices with a random symmetric stencil of reach <= 2 on axes of 1..6 sites,
    often periodic: repeated neighbours and self-loops (the ``dedupe`` path) and
    steps that leave the padded halo."""
    d = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, {1: 12, 2: 6, 3: 4}[d]), min_size=d,
                                max_size=d)))
    per = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    vec = st.tuples(*[st.integers(-2, 2)] * d).filter(any)
    half = draw(st.lists(vec, min_size=1, max_size=4, unique=True))
    offs = sorted({o for v in half for o in (v, tuple(-x for x in v))})
    mask = None
    if draw(st.booleans()):
        mask = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).random(shape) < 0.75
        mask.reshape(-1)[0] = True
    return {"shape": shape, "periodic": per, "stencil": np.array(offs, dtype=np.int64),
            "mask": mask}


# -- exact and sampled betweenness, closeness: NetworkX on every geometry -------------------
@given(spec=lattice_specs(max_sites=120, max_dim=4), data=st.data())
def test_betweenness_matches_networkx(spec, data):
    L = make(spec)
    G_ = graph_of(spec)  # nodes: the open sites in ascending order, as the API's sample
    sites = open_sites(spec)
    want = nx_betweenness(G_, L.n_points, sites)
    k = data.draw(st.integers(1, len(sites)), label="k")
    seed = data.draw(st.integers(0, 2**64 - 1), label="seed")
    want_k = nx_betweenness(G_, L.n_points, sites, k=k, seed=seed)
    for b in BACKENDS:
        got = L.calculate_centrality("betweenness", backend=b)
        assert got.shape == L.shape and got.dtype == np.float64
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-9, atol=1e-12, err_msg=b)
        got = L.calculate_centrality("betweenness", k=k, seed=seed, backend=b).reshape(-1)
        # k == 1: NetworkX scales the sampled site by 1/0 (NaN); both NaN there
        np.testing.assert_allclose(got, want_k, rtol=1e-9, atol=1e-12, err_msg=f"{b} k={k}")


@settings(max_examples=40)
@given(spec=custom_specs())
def test_custom_stencils_with_repeated_neighbours(spec):
    L = make(spec)
    G_ = oracle_graph(spec["shape"], spec["periodic"], spec["stencil"], spec["mask"])
    sites = open_sites(spec)
    got = L.calculate_centrality("betweenness", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, nx_betweenness(G_, L.n_points, sites), rtol=1e-9,
                               atol=1e-12)
    got = L.calculate_centrality("closeness", backend=CPU).reshape(-1)
    want = as_array(nx.closeness_centrality(G_), L.n_points, sites)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape, periodic, stencil", [
    ((5, 2), (False, True), "moore"),  # (1, 1) and (1, -1) are one site: counted once
    ((6, 4), (False, True), [[0, 1], [0, -1], [0, 2], [0, -2], [1, 0], [-1, 0], [1, 2],
                             [-1, -2], [1, -2], [-1, 2]]),
    ((3, 1, 4), (True, True, True), "moore"),  # self-loops and repeats on every axis
])
def test_tiny_periodic_axes_count_each_neighbour_once(shape, periodic, stencil):
    """Where two offsets reach one site, a multigraph would count some shortest paths
    twice (on the (5, 2) Moore lattice, (0, 0) -> (2, 0) has 2 paths, not 5)."""
    L = cat.Lattice(shape=shape, periodic=periodic, stencil=np.array(stencil) if
                    isinstance(stencil, list) else stencil)
    assert L.geometry.dedupe
    G_ = oracle_graph(shape, periodic, stencil, None)
    sites = np.arange(L.n_points)
    got = L.calculate_centrality("betweenness", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, nx_betweenness(G_, L.n_points, sites), rtol=1e-12)
    got = L.calculate_centrality("betweenness", k=3, seed=1, backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, nx_betweenness(G_, L.n_points, sites, 3, 1), rtol=1e-12)


@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_unpadded_index_space(periodic):
    """Nine axes of 2 sites: the halo would make the array 512 times larger, so the
    kernels step by coordinates (Plan.mode 0); periodic, +1 and -1 are one site."""
    shape = (2,) * 9
    mask = np.random.default_rng(5).random(shape) < 0.5
    L = cat.Lattice(shape=shape, periodic=periodic, mask=mask)
    assert _padded.make_plan(*L.geometry.kernel_args()[:4]).mode == 0
    G_ = oracle_graph(shape, (periodic,) * 9, "von_neumann", mask)
    sites = open_sites({"shape": shape, "mask": mask})
    got = L.calculate_centrality("betweenness", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, nx_betweenness(G_, L.n_points, sites), rtol=1e-9,
                               atol=1e-12)
    got = L.calculate_centrality("betweenness", k=9, seed=4, backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, nx_betweenness(G_, L.n_points, sites, 9, 4), rtol=1e-9,
                               atol=1e-12)
    got = L.calculate_centrality("closeness", backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, as_array(nx.closeness_centrality(G_), L.n_points, sites),
                               rtol=1e-12)


@given(spec=lattice_specs(max_sites=400, max_dim=4))
def test_closeness_equals_one_search_per_source(spec):
    """The bit-parallel closeness (batches of 256 sources) gives the one-BFS-per-source
    kernel's floats bit for bit, and NetworkX's."""
    args = make(spec).geometry.kernel_args()
    got = CC.closeness(*args)
    np.testing.assert_array_equal(got, bfs.closeness(*args, None))
    sites = open_sites(spec)
    want = as_array(nx.closeness_centrality(graph_of(spec)), got.shape[0], sites)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_closeness_memory_cap(monkeypatch):
    """Past the bitset memory cap closeness runs on fewer threads, then on the
    one-search-per-source kernel: the same floats either way."""
    args = _medium().geometry.kernel_args()
    want = CC.closeness(*args)
    psize = _padded.make_plan(*args[:4]).psize
    calls = []
    real = bfs.closeness
    monkeypatch.setattr(bfs, "closeness", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(CC, "_BITS_BYTES", psize * CC._CELL_BYTES)  # one thread's worth
    np.testing.assert_array_equal(CC.closeness(*args), want)
    assert not calls
    monkeypatch.setattr(CC, "_BITS_BYTES", psize * CC._CELL_BYTES - 1)
    np.testing.assert_array_equal(CC.closeness(*args), want)
    assert calls == [1]


def test_more_than_65536_sites():
    """Past 2**16 sites the backend runs on every free CPU: sampled betweenness on a
    periodic, masked lattice, and closeness on a lattice that is mostly blocked."""
    rng = np.random.default_rng(3)
    shape = (263, 251)
    mask = rng.random(shape) < 0.8
    L = cat.Lattice(shape=shape, periodic=(True, False), mask=mask, seed=99)
    assert L.n_points > 2**16
    G_ = vn_graph(mask, (True, False))
    sites = np.flatnonzero(mask)
    got = L.calculate_centrality("betweenness", k=3, backend=CPU).reshape(-1)
    np.testing.assert_allclose(got, nx_betweenness(G_, L.n_points, sites, 3, 99), rtol=1e-9,
                               atol=1e-15)
    assert np.isnan(got[~mask.reshape(-1)]).all()

    sparse = np.zeros((300, 250), bool)
    sparse[100:124, 50:73] = rng.random((24, 23)) < 0.9  # two separate pieces
    sparse[200:212, 10:20] = True
    L = cat.Lattice(shape=sparse.shape, mask=sparse)
    G_ = vn_graph(sparse, (False, False))
    sites = np.flatnonzero(sparse)
    got = L.calculate_centrality("closeness", backend=CPU).reshape(-1)
    want = as_array(nx.closeness_centrality(G_), L.n_points, sites)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert len(sites) > 2 * 64 * CC._WORDS  # several batches


# -- determinism: thread counts, kernel budgets, Python threads -----------------------------
def _medium():
    mask = np.random.default_rng(8).random((37, 29)) < 0.8
    return cat.Lattice(shape=(37, 29), periodic=(True, False), stencil="moore", mask=mask)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")
def test_thread_count_does_not_change_the_result():
    args = _medium().geometry.kernel_args()
    src = np.flatnonzero(args[3])[::7]
    prev = numba.get_num_threads()
    got = {}
    try:
        for t in (1, 2):
            numba.set_num_threads(t)
            got[t] = (CC.betweenness(*args), CC.betweenness(*args, src), CC.closeness(*args))
    finally:
        numba.set_num_threads(prev)
    for a, b in zip(got[1], got[2]):
        np.testing.assert_array_equal(a, b)


@pytest.fixture
def counted(monkeypatch):
    """Count the calls of the two kernels the host functions loop over."""
    calls = {}
    for name in ("_brandes_run", "_bitbfs_run"):
        def wrapper(*args, _real=getattr(CC, name), _name=name):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args)

        monkeypatch.setattr(CC, name, wrapper)
    return calls


@pytest.mark.parametrize("threads", [1, 2])
def test_small_budgets_give_the_same_result(monkeypatch, counted, threads):
    """With the work per kernel call shrunk to a few units the searches stop and resume
    mid-level and mid-phase, in many calls, and give the one-call result bit for bit."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("needs 2 Numba threads")
    rng = np.random.default_rng(1)
    args = cat.Lattice(shape=(9, 8), periodic=(True, False),
                       mask=rng.random((9, 8)) < 0.85).geometry.kernel_args()
    src = np.flatnonzero(args[3])[:5]
    # closeness: more than 256 open sites, so two batches (one per thread slot)
    cargs = cat.Lattice(shape=(19, 17), periodic=(False, True),
                        mask=rng.random((19, 17)) < 0.9).geometry.kernel_args()
    n_close = int(np.count_nonzero(cargs[3]))
    assert n_close > 64 * CC._WORDS
    prev = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        whole = (CC.betweenness(*args), CC.betweenness(*args, src), CC.closeness(*cargs))
        budget = 7
        monkeypatch.setattr(_budget, "_BUDGET", budget)
        counted.clear()
        parts = (CC.betweenness(*args), CC.betweenness(*args, src), CC.closeness(*cargs))
    finally:
        numba.set_num_threads(prev)
    for a, b in zip(whole, parts):
        np.testing.assert_array_equal(a, b)
    # units per search: k per site searched, k per site accumulated, 1 per reset; a call
    # ends each slot's last phase at most 3 k + 2 units past the budget
    K = _padded.make_plan(*args[:4]).offs.shape[0]
    U = graph_of({"shape": (9, 8), "periodic": (True, False), "stencil": "von_neumann",
                  "mask": args[3].reshape(9, 8).astype(bool)})
    sizes = [len(nx.node_connected_component(U, int(v))) for v in U]
    work = sum(sizes) * (2 * K + 1)
    assert counted["_brandes_run"] >= work // (threads * (budget + 3 * K + 2))
    # closeness: every open site pushes its k neighbours at least once (as a source)
    assert counted["_bitbfs_run"] >= n_close * K // (threads * (budget + K + 1))


def test_python_threads_sharing_a_lattice_get_the_serial_answers():
    L = _medium()
    calls = [("betweenness", {}), ("betweenness", {"k": 11, "seed": 2}), ("closeness", {})]
    serial = [L.calculate_centrality(m, backend=CPU, **kw) for m, kw in calls]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(L.calculate_centrality, m, backend=CPU, **kw)
                   for _ in range(3) for m, kw in calls]
        results = [f.result() for f in futures]
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r, serial[i % len(calls)])


class Deadline(Exception):
    """Raised by the SIGALRM handler below."""


@pytest.mark.skipif(not (hasattr(signal, "SIGALRM") and hasattr(signal, "setitimer")),
                    reason="needs SIGALRM and signal.setitimer (POSIX only)")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="Python runs signal handlers on the main thread only")
@pytest.mark.parametrize("method", ["betweenness", "closeness"])
def test_a_signal_handler_runs_within_a_second(method):
    """120 x 120 betweenness takes 1-2 s on two cores, 256 x 256 closeness about 4 s;
    a SIGALRM handler that raises at 0.2 s must stop them within a second."""
    cat.Lattice(shape=(5, 5)).calculate_centrality(method, backend=CPU)  # load the kernels
    side = 120 if method == "betweenness" else 256
    L = cat.Lattice(shape=(side, side))

    def on_alarm(signum, frame):
        raise Deadline

    old = signal.signal(signal.SIGALRM, on_alarm)
    t0 = time.perf_counter()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Deadline):
            L.calculate_centrality(method, backend=CPU)
        late = time.perf_counter() - t0 - 0.2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert late < 1.0, f"the handler ran {late:.2f} s after the deadline"
    small = cat.Lattice(shape=(1, 5))  # nothing half-done: the next call works
    np.testing.assert_allclose(small.calculate_centrality("betweenness", backend=CPU),
                               [[0, 0.5, 2 / 3, 0.5, 0]])


# -- keywords: defaults, validation, routing ---------------------------------------------------
def test_seed_defaults_to_the_lattice_seed_and_k_n_open_is_exact():
    L = cat.Lattice(shape=(7, 6), seed=12345)
    G_ = graph_of({"shape": (7, 6), "periodic": (False, False), "stencil": "von_neumann"})
    sites = np.arange(42)
    for b in BACKENDS:
        got = L.calculate_centrality("betweenness", k=5, backend=b)
        np.testing.assert_array_equal(
            got, L.calculate_centrality("betweenness", k=5, seed=12345, backend=b))
        np.testing.assert_allclose(got.reshape(-1), nx_betweenness(G_, 42, sites, 5, 12345),
                                   rtol=1e-12)
        np.testing.assert_array_equal(L.calculate_centrality("betweenness", k=42, backend=b),
                                      L.calculate_centrality("betweenness", backend=b))
    # the sample is NetworkX's draw over the open sites in ascending order
    np.testing.assert_array_equal(CC.sample_sources(42, 5, 7),
                                  nx.utils.create_py_random_state(7).sample(range(42), 5))


@pytest.mark.parametrize("method, kw, exc, match", [
    ("closeness", {"k": 3}, ValueError, "k=3 applies to method='betweenness' only"),
    ("degree", {"seed": 1}, ValueError, "seed=1 applies to method='betweenness' only"),
    ("eigenvector", {"k": 2, "seed": 0}, ValueError, "k=2 applies"),
    ("betweenness", {"k": 0}, ValueError, "k must be >= 1, got 0"),
    ("betweenness", {"k": 21}, ValueError, "k=21 sampled sources is more than the 20 open"),
    ("betweenness", {"k": 2.0}, TypeError, "k must be an integer, got 2.0"),
    ("betweenness", {"k": True}, TypeError, "k must be an integer, got True"),
    ("betweenness", {"k": 3, "seed": -1}, ValueError, "seed must be >= 0, got -1"),
    ("betweenness", {"k": 3, "seed": "7"}, TypeError, "seed must be an integer, got '7'"),
    ("betweenness", {"seed": 1.5}, TypeError, "seed must be an integer, got 1.5"),
])
def test_bad_keywords_are_refused_before_any_work(monkeypatch, method, kw, exc, match):
    def no_work(*a, **k):
        raise AssertionError("the computation started")

    monkeypatch.setattr(CC, "betweenness", no_work)
    monkeypatch.setattr(CC, "closeness", no_work)
    monkeypatch.setattr(nx, "betweenness_centrality", no_work)
    L = cat.Lattice(shape=(4, 5))
    for b in BACKENDS:
        with pytest.raises(exc, match=match):
            L.calculate_centrality(method, backend=b, **kw)


def test_k_on_a_lattice_without_open_sites():
    L = cat.Lattice(shape=(3, 3), mask=np.zeros((3, 3), bool))
    with pytest.raises(ValueError, match="k=1 sampled sources is more than the 0 open sites"):
        L.calculate_centrality("betweenness", k=1)
    assert np.isnan(L.calculate_centrality("betweenness", backend=CPU)).all()


def test_work_counts_the_sampled_sources_and_backends_say_why_not():
    eng = cat.get_engine()
    L = cat.Lattice(shape=(9, 9))
    assert eng.explain("centrality", L, method="betweenness").work == 81 * 4 * 81
    dec = eng.explain("centrality", L, method="betweenness", k=5)
    assert dec.work == 81 * 4 * 5
    assert CPU in dec.predictions
    # the cuda backend does not run betweenness (sampled or not) and says so
    why = cuda_backend._centrality_supported(L, method="betweenness", k=5, seed=0)
    assert "betweenness" in why and "numba-cpu" in why


def test_plugins_written_before_sampling_still_get_every_other_call():
    """An implementation ``centrality(lat, *, method)`` gets the exact calls (the engine
    passes ``k`` and ``seed`` only for a sampled betweenness); the igraph plugin refuses
    sampling with a reason and the router sends such calls elsewhere."""
    seen = []

    class Legacy:
        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend("legacy", available=True)

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            def centrality(lat, *, method="degree"):
                seen.append(method)
                return np.zeros(lat.shape)

            registry.add_implementation("centrality", "legacy", centrality)

    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(Legacy(), "legacy")
    L = cat.Lattice(shape=(4, 4), engine=eng)
    for m in ("degree", "closeness", "betweenness"):
        L.calculate_centrality(m, backend="legacy")
    L.calculate_centrality("betweenness", k=16, backend="legacy")  # k == n_open: exact
    assert seen == ["degree", "closeness", "betweenness", "betweenness"]
    # its signature takes no sample: the router says so before the call
    with pytest.raises(cat.NoBackendError, match="takes no k, seed"):
        L.calculate_centrality("betweenness", k=3, backend="legacy")

    pytest.importorskip("igraph", reason="python-igraph is not installed")
    import catalytic_igraph  # from the checkout: pyproject's pytest pythonpath

    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(catalytic_igraph, "igraph")
    L = cat.Lattice(shape=(5, 6), periodic=(True, False), engine=eng, seed=4)
    np.testing.assert_allclose(L.calculate_centrality("betweenness", backend="igraph"),
                               L.calculate_centrality("betweenness", backend="numpy"),
                               rtol=1e-9)
    with pytest.raises(cat.NoBackendError, match=r"sampled betweenness \(k=3\)"):
        L.calculate_centrality("betweenness", k=3, backend="igraph")
    dec = eng.explain("centrality", L, method="betweenness", k=3)
    assert "sampled betweenness" in dec.rejected["igraph"]
    np.testing.assert_allclose(L.calculate_centrality("betweenness", k=3),
                               L.calculate_centrality("betweenness", k=3, backend="numpy"),
                               rtol=1e-9)

