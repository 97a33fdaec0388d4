"""Interrupting long CPU kernels (numba-cpu backend): the work budget of
``kernels/cpu/_budget.py``.

While a Numba kernel runs, the calling thread does not come back to the interpreter, so
Python signal handlers (Ctrl-C's ``KeyboardInterrupt``, a ``SIGALRM`` handler that
raises) wait for it to return. The CPU kernels therefore do about ``_BUDGET`` units of
work per call and their host functions call them again until done; a pending handler
runs between two calls.

* With the budget shrunk to a few units, every search, labelling and field pass runs
  in many kernel calls (counted here), stopping mid-level and mid-search, and the
  results are what independent oracles give (SciPy csgraph, NetworkX, the Laplacian
  from an explicit graph) and what one call gives, bit for bit.
* A real ``SIGALRM`` during a CPU distance field (BFS and Dijkstra), closeness, a
  bond-aware labelling (``winding.label_windings``) or catalytic path raises within a
  second of its deadline, and the memory lent to the catalytic path comes back intact.
  Before the kernels were split, the exception came only when the whole kernel
  returned, seconds later.
"""

from __future__ import annotations

import gc
import itertools
import math
import signal
import threading
import time

import networkx as nx
import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.sparse import csgraph

import catalytic as cat
from catalytic.kernels.cpu import fields as F
from catalytic.kernels.cpu import (
    _budget,
    _padded,
    bfs,
    catalytic_path,
    components,
    dijkstra,
    paths,
)
from tests.support.kernel_calls import count_kernel_calls
from tests.support.oracles import graph_of, open_sites
from tests.support.strategies import lattice_specs, make, pick_open
from tests.support.threads import threads  # noqa: F401 (a fixture)

#: host-called kernels whose calls are counted (only ones no other kernel calls)
COUNTED = {bfs: ["_bfs_frontiers", "_closeness_run"],
           dijkstra: ["_dijkstra_run"],
           paths: ["_count_run"],
           catalytic_path: ["_catalytic_bfs", "_catalytic_walk"],
           components: ["_runs_union_inside", "_runs_label", "_relabel_window",
                        "_cc_union_inside"],
           _padded: ["_fill_padded", "_unpad"],
           F: ["_rows_kernel", "_generic_kernel"]}

#: The fixtures below hold for every example of a test (they only patch module
#: globals). Fewer examples than elsewhere: every example makes hundreds of kernel
#: calls, and on a busy machine each parallel one waits for a time slice.
fixtures_ok = settings(max_examples=15,
                       suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def chunked(monkeypatch):
    """Shrink the work per kernel call to a few units and count the kernel calls.

    Returns ``run(func, *args)``: the result of ``func`` under the small budget (the
    calls it made are in ``run.calls``), checked equal to its result under the normal
    budget, bit for bit.
    """
    calls = count_kernel_calls(monkeypatch, COUNTED)
    # the padded layout by the (counted, chunked) kernels, not NumPy, at every size
    monkeypatch.setattr(_padded, "_SMALL_LAYOUT", 0)
    # parallel frontiers from 2 cells, in rounds of 3 cells per thread
    monkeypatch.setattr(bfs, "_PAR_MIN", 2)
    monkeypatch.setattr(bfs, "_PAR_CHUNK", 3)
    normal = (_budget._BUDGET, F._BUDGET)

    def run(func, *args, budget=5, **kwargs):
        monkeypatch.setattr(_budget, "_BUDGET", normal[0])
        monkeypatch.setattr(F, "_BUDGET", normal[1])
        whole = func(*args, **kwargs)
        monkeypatch.setattr(_budget, "_BUDGET", budget)
        monkeypatch.setattr(F, "_BUDGET", budget)
        calls.clear()
        got = func(*args, **kwargs)
        for a, b in zip(got if isinstance(got, tuple) else (got,),
                        whole if isinstance(whole, tuple) else (whole,)):
            np.testing.assert_array_equal(a, b)
        return got

    run.calls = calls
    return run


# -- oracles ------------------------------------------------------------------------------
def csr_of(spec):
    """Adjacency of the oracle graph (all sites, blocked ones isolated)."""
    n = math.prod(spec["shape"])
    return nx.to_scipy_sparse_array(graph_of(spec, all_nodes=True), nodelist=range(n),
                                    format="csr")


def hops_from(spec, sources):
    d = csgraph.dijkstra(csr_of(spec), indices=sources, unweighted=True, min_only=True)
    out = np.where(np.isinf(d), -1, d).astype(np.int64)
    if spec["mask"] is not None:
        out[~spec["mask"].reshape(-1)] = -1
    return out


def costs_from(spec, sources):
    """Entering site v costs weights[v]: edge u -> v of the directed graph weighs w[v]."""
    A = csr_of(spec).tocoo()
    w = spec["weights"].reshape(-1)
    # zero weights stay edges: give them a tiny stand-in, then subtract it exactly below
    eps = 1e-300
    W = A.copy()
    W.data = np.maximum(w[A.col], eps)
    d = csgraph.dijkstra(W.tocsr(), indices=sources, min_only=True)
    d[d < 1e-200] = 0.0
    if spec["mask"] is not None:
        d[~spec["mask"].reshape(-1)] = np.inf
    return d


def tie_rule_path(spec, start, end):
    """Walking back from ``end``, the neighbour of smallest flat index one hop closer."""
    d = hops_from(spec, [start])
    if d[end] < 0:
        return np.empty(0, dtype=np.int64)
    A = csr_of(spec)
    path = [end]
    while path[-1] != start:
        v = path[-1]
        nb = A.indices[A.indptr[v]:A.indptr[v + 1]]
        path.append(int(min(u for u in nb if d[u] == d[v] - 1)))
    return np.array(path[::-1], dtype=np.int64)


def path_count(spec, start, end):
    """Shortest hop paths by dynamic programming over the oracle's BFS layers."""
    d = hops_from(spec, [start])
    if d[end] < 0:
        return 0
    A = csr_of(spec)
    cnt = {start: 1}
    for v in sorted(np.flatnonzero(d >= 0), key=lambda v: d[v]):
        if v != start:
            nb = A.indices[A.indptr[v]:A.indptr[v + 1]]
            cnt[v] = sum(cnt[u] for u in nb if d[u] == d[v] - 1)
    return cnt[end]


def first_index_labels(spec):
    """Components numbered 1.. in the order of their lowest site, 0 for blocked sites."""
    n = math.prod(spec["shape"])
    _, lab = csgraph.connected_components(csr_of(spec), directed=False)
    opened = np.ones(n, bool) if spec["mask"] is None else spec["mask"].reshape(-1)
    out = np.zeros(n, dtype=np.int64)
    seen = {}
    for i in range(n):
        if opened[i]:
            out[i] = seen.setdefault(lab[i], len(seen) + 1)
    return out, len(seen)


def args_of(spec):
    return make(spec).geometry.kernel_args()


def assert_walk(spec, path, start, end):
    A = csr_of(spec)
    assert path[0] == start and path[-1] == end
    for u, v in zip(path, path[1:]):
        assert A[u, v] != 0, f"{u} -> {v} is not a lattice edge"


def diagonals(d):
    """Steps along every axis at once: no unit step along the last axis, so the
    components are joined per site instead of per run."""
    if d == 1:
        return np.array([[-2], [2]])
    return np.array(list(itertools.product((-1, 1), repeat=d)), dtype=np.int64)


specs = lattice_specs(max_dim=3, max_sites=150, weights=True)


# -- (1) many small calls give the one-call results ------------------------------------------
@fixtures_ok
@given(spec=specs, data=st.data())
def test_distance_fields_in_many_calls(chunked, threads, spec, data):
    src = np.array([pick_open(spec, data, "source")])
    got = chunked(bfs.bfs_distance, *args_of(spec), src)
    np.testing.assert_array_equal(got, hops_from(spec, src))
    # at most one round of 3 cells per thread, or 2 cells, per call
    assert chunked.calls["_bfs_frontiers"] >= np.count_nonzero(got >= 0) // (3 * threads)
    w = spec["weights"].reshape(-1)
    got = chunked(dijkstra.dijkstra_distance, *args_of(spec), w, src)
    np.testing.assert_allclose(got, costs_from(spec, src), rtol=1e-12, atol=1e-12)
    assert chunked.calls["_dijkstra_run"] >= np.count_nonzero(np.isfinite(got))


@fixtures_ok
@given(spec=specs, data=st.data())
def test_paths_in_many_calls(chunked, threads, spec, data):
    s = pick_open(spec, data, "start")
    e = pick_open(spec, data, "end")
    args = args_of(spec)
    want = tie_rule_path(spec, s, e)
    np.testing.assert_array_equal(chunked(paths.shortest_path, *args, s, e), want)
    n = math.prod(spec["shape"])
    state = np.full(n + 3, 7, dtype=np.uint8)
    np.testing.assert_array_equal(chunked(catalytic_path.catalytic_path, *args, s, e, state), want)
    assert (state[n:] == 7).all()
    if want.size > 2:
        assert chunked.calls["_catalytic_walk"] >= want.size - 1
    w = spec["weights"].reshape(-1)
    path = chunked(paths.shortest_path, *args, s, e, weights=w)
    cost = costs_from(spec, [s])[e]
    assert (path.size == 0) == np.isinf(cost)
    if path.size:
        assert_walk(spec, path, s, e)
        assert w[path[1:]].sum() == pytest.approx(cost, rel=1e-12, abs=1e-12)


@fixtures_ok
@given(spec=lattice_specs(max_dim=3, max_sites=150), data=st.data())
def test_path_counts_in_many_calls(chunked, threads, spec, data):
    s = pick_open(spec, data, "start")
    e = pick_open(spec, data, "end")
    got = chunked(paths.count_shortest_paths, *args_of(spec), s, e)
    assert got == (path_count(spec, s, e), False)


@fixtures_ok
@given(spec=lattice_specs(max_dim=3, max_sites=40))
def test_closeness_in_many_calls(chunked, threads, spec):
    budget = 100
    args = args_of(spec)
    got = chunked(bfs.closeness, *args, None, budget=budget)
    U = graph_of(spec)
    want = nx.closeness_centrality(U)
    sites = open_sites(spec)
    np.testing.assert_allclose(got[sites], [want[int(v)] for v in sites], rtol=1e-12)
    # every search expands its whole component, k units per site; a call does at most
    # budget + k + _LEVEL_COST units and a reset of at most n sites per thread
    k = _padded.make_plan(*args[:4]).offs.shape[0]
    work = sum(len(nx.node_connected_component(U, int(v))) * k for v in sites)
    per_call = threads * (budget + k + _budget._LEVEL_COST + len(sites))
    assert chunked.calls["_closeness_run"] >= work // per_call


@fixtures_ok
@given(spec=lattice_specs(max_dim=3, max_sites=150), diagonal=st.booleans())
def test_components_in_many_calls(chunked, threads, spec, diagonal):
    if diagonal:
        spec = dict(spec, stencil=diagonals(len(spec["shape"])))
    labels, count = chunked(components.connected_components, *args_of(spec))
    want, want_count = first_index_labels(spec)
    assert count == want_count
    np.testing.assert_array_equal(labels, want)
    assert chunked.calls["_relabel_window"] >= -(-count // 5)
    rows = math.prod(spec["shape"][:-1])
    if rows >= 2 * threads and spec["shape"][-1] >= 5:  # then a window is one row
        windows = chunked.calls.get("_runs_label", 0) + chunked.calls.get("_cc_union_inside", 0)
        assert windows >= rows // threads


@fixtures_ok
@given(spec=lattice_specs(max_dim=3, max_sites=150), steps=st.integers(1, 3))
def test_fields_in_many_calls(chunked, spec, steps):
    n = math.prod(spec["shape"])
    rng = np.random.default_rng(n)
    f = rng.random(n)
    A = csr_of(spec)
    deg = np.asarray(A.sum(axis=1)).reshape(-1)
    lap = lambda x: deg * x - A @ x  # noqa: E731
    budget = 37  # neighbour reads per call: one row, or a few
    got = chunked(F.laplacian, *args_of(spec), f, np.empty(n), budget=budget)
    np.testing.assert_allclose(got, lap(f), rtol=1e-12, atol=1e-12)
    want = f.copy()
    for _ in range(steps):
        want = want - 0.1 * lap(want)
    got = chunked(F.diffuse, *args_of(spec), f, steps, 0.1, np.empty(n), budget=budget)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    passes = chunked.calls.get("_rows_kernel", 0) + chunked.calls.get("_generic_kernel", 0)
    assert passes >= steps * min(n // budget, math.prod(spec["shape"][:-1]))


def test_the_budget_bounds_every_call(monkeypatch):
    """A BFS along a 1-D chain of 3000 sites with a budget of 1000 units: every kernel
    call expands as many levels as the budget pays for (2 units per cell and
    ``_LEVEL_COST`` per level), no more."""
    seen = []
    real = bfs._bfs_frontiers

    def spy(work, a, b, st, *rest):
        before = st.copy()
        real(work, a, b, st, *rest)
        seen.append(st[3] - before[3])  # levels done

    monkeypatch.setattr(bfs, "_bfs_frontiers", spy)
    monkeypatch.setattr(_budget, "_BUDGET", 1000)
    L = cat.Lattice(shape=(3000,))
    d = bfs.bfs_distance(*L.geometry.kernel_args(), [0])
    np.testing.assert_array_equal(d, np.arange(3000))
    most = -(-1000 // (2 + _budget._LEVEL_COST))
    assert max(seen) == most and min(seen) >= 1
    assert len(seen) == -(-3000 // most)


# -- (2) a real signal ------------------------------------------------------------------------
needs_alarm = pytest.mark.skipif(
    not (hasattr(signal, "SIGALRM") and hasattr(signal, "setitimer")),
    reason="needs SIGALRM and signal.setitimer (POSIX only)",
)


class Deadline(Exception):
    """Raised by the test's SIGALRM handler."""


DEADLINE = 0.2
#: a Python signal handler must run within this long after the deadline
GRACE = 1.0


def _box(r):
    return np.array([(a, b) for a in range(-r, r + 1) for b in range(-r, r + 1)
                     if (a, b) != (0, 0)], dtype=np.int64)


# Each returns (a small call that loads the compiled kernels, the long call). Without
# the first, the deadline could pass while Numba loads or compiles the kernels, in
# Python code, where any handler runs at once (and one raising inside the compiler
# comes out as a TypingError).


def _bfs_field():
    # 9e6 sites, 624 neighbours each: 2.5-5 s on two 2024 cloud cores, 200 MB
    box = _box(12)
    small = cat.Lattice(shape=(30, 30), stencil=box)
    L = cat.Lattice(shape=(3000, 3000), stencil=box)
    return (lambda: small.distance_field(0, backend="numba-cpu"),
            lambda: L.distance_field(0, backend="numba-cpu"))


def _dijkstra_field():
    # 2.9e6 sites, 440 neighbours each, Dijkstra (one thread): about 2.4 s there, 150 MB;
    # few sites, so that the arrays are filled (NumPy calls, where a handler runs at
    # once) well before the deadline
    w = np.random.default_rng(0).uniform(0.5, 2.0, (1700, 1700))
    small = cat.Lattice(shape=(30, 30), stencil=_box(10), weights=w[:30, :30])
    L = cat.Lattice(shape=(1700, 1700), stencil=_box(10), weights=w)
    return (lambda: small.distance_field(0, backend="numba-cpu"),
            lambda: L.distance_field(0, backend="numba-cpu"))


def _closeness():
    # 25600 searches of 25600 sites: about 4 s there, a few MB
    small = cat.Lattice(shape=(5, 5))
    L = cat.Lattice(shape=(160, 160))
    return (lambda: small.calculate_centrality(method="closeness", backend="numba-cpu"),
            lambda: L.calculate_centrality(method="closeness", backend="numba-cpu"))


def _bond_labelling():
    # 1.4e6 sites, 168 neighbours each, half the bonds closed, periodic: the split
    # bond-aware labelling, 4.2-5 s on two shared 2024 cloud cores, about 260 MB
    box = _box(6)
    rng = np.random.default_rng(0)

    def lattice(n):
        flips = np.unpackbits(rng.integers(0, 256, size=len(box) * n * n // 16,
                                           dtype=np.uint8))
        return cat.Lattice(shape=(n, n), periodic=True, stencil=box,
                           bonds=flips.view(bool).reshape(len(box) // 2, n, n))

    small, L = lattice(20), lattice(1200)

    def warm_up():
        # the one-call labelling, then the split kernels that the long call runs
        small.connected_components(backend="numba-cpu")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_budget, "_BUDGET", 1000)
            small.connected_components(backend="numba-cpu")

    return warm_up, lambda: L.connected_components(backend="numba-cpu")


def _lateness(call) -> float:
    """Run ``call`` on at most 2 threads (the same few seconds on a big machine), with
    the garbage collector off, under a SIGALRM handler that raises ``Deadline`` after
    ``DEADLINE`` s; it must raise. Returns how long after the deadline the exception
    arrived. Handler, collector and thread count are restored."""
    prev_threads = numba.get_num_threads()
    numba.set_num_threads(min(2, prev_threads))

    def on_alarm(signum, frame):
        raise Deadline

    # No garbage collection while the alarm is set: a handler that runs inside a gc
    # callback (hypothesis installs one to time collections) raises into code that
    # swallows the exception, and the call would then finish without it.
    gc.collect()
    gc_was_on = gc.isenabled()
    gc.disable()
    old = signal.signal(signal.SIGALRM, on_alarm)
    t0 = time.perf_counter()
    try:
        signal.setitimer(signal.ITIMER_REAL, DEADLINE)
        with pytest.raises(Deadline):
            call()
        return time.perf_counter() - t0 - DEADLINE
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if gc_was_on:
            gc.enable()
        numba.set_num_threads(prev_threads)


@needs_alarm
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="Python runs signal handlers on the main thread only")
@pytest.mark.parametrize("work", [_bfs_field, _dijkstra_field, _closeness, _bond_labelling],
                         ids=["bfs-distance-field", "dijkstra-distance-field", "closeness",
                              "bond-aware-labelling"])
def test_a_signal_handler_runs_within_a_second(work):
    warm_up, call = work()
    warm_up()
    prev_threads = numba.get_num_threads()
    late = _lateness(call)
    assert late < GRACE, f"the handler ran {late:.2f} s after the deadline"
    assert numba.get_num_threads() == prev_threads
    # nothing is left half-done: the next call works
    small = cat.Lattice(shape=(5, 7))
    np.testing.assert_array_equal(small.distance_field(0, backend="numba-cpu"),
                                  np.add.outer(np.arange(5), np.arange(7)))


@needs_alarm
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="Python runs signal handlers on the main thread only")
def test_an_interrupted_catalytic_path_gives_the_memory_back():
    n = 6000  # 3.6e7 sites: about 2 s on two 2024 cloud cores, 200 MB
    cat.Lattice(shape=(5, 5)).find_path_catalytic(0, 24, backend="numba-cpu")  # warm up
    L = cat.Lattice(shape=(n, n))
    aux = np.tile(np.arange(256, dtype=np.uint8), n * n // 256 + 1)[:n * n]
    before = aux.copy()
    late = _lateness(lambda: L.find_path_catalytic(0, n * n - 1, auxiliary_memory=aux,
                                                   backend="numba-cpu"))
    assert late < GRACE, f"the handler ran {late:.2f} s after the deadline"
    np.testing.assert_array_equal(aux, before)


def test_component_sizes_counted_in_pieces(monkeypatch):
    """The sizes of large labellings are counted piece by piece (so a signal handler can
    run between pieces) and equal one bincount."""
    from catalytic.backends import _common as C

    rng = np.random.default_rng(2)
    labels = rng.integers(0, 50, size=10_007).astype(np.int32)
    want = np.bincount(labels, minlength=50)[1:]
    monkeypatch.setattr(C, "SIZES_CHUNK", 64)
    calls = []
    real = np.bincount
    monkeypatch.setattr(np, "bincount", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = C.component_sizes(labels, 49)
    assert len(calls) == -(-labels.size // 64)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int64
