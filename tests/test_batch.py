"""BatchProcessor: results equal one-by-one calls, errors are kept with their index."""

from __future__ import annotations

import re

import numpy as np
import pytest

import catalytic as cat
from tests.support.backends import available_backends

CPU = [b for b in available_backends() if b in ("numpy", "numba-cpu")]


def _lattices(n=6, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        shape = (12, 10) if i % 3 else (7, 9)  # two geometries, interleaved
        mask = rng.random(shape) < 0.65
        mask.flat[0] = True
        out.append(cat.Lattice(shape=shape, mask=mask, periodic=(i % 2 == 0, False)))
    return out


CASES = [
    ("connected_components", (), {}, lambda L, b: L.connected_components(backend=b),
     lambda r: (r.labels.tobytes(), r.count)),
    ("percolates", (), {"axis": 1}, lambda L, b: L.percolates(1, backend=b), bool),
    ("distance_field", (0,), {}, lambda L, b: L.distance_field(0, backend=b), lambda r: r.tobytes()),
    ("degree", (), {}, lambda L, b: L.degree(backend=b), lambda r: r.tobytes()),
]


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("executor", ["serial", "threads"])
@pytest.mark.parametrize("op, args, kwargs, single, key", CASES, ids=[c[0] for c in CASES])
def test_map_equals_one_by_one(backend, executor, op, args, kwargs, single, key):
    lats = _lattices()
    res = cat.BatchProcessor(lats, executor=executor, progress=False).map(
        op, *args, backend=backend, **kwargs)
    assert res.ok and len(res) == len(lats)
    assert [key(r) for r in res] == [key(single(L, backend)) for L in lats]


def test_groups_and_stats_are_honest():
    lats = _lattices()
    bp = cat.BatchProcessor(lats, progress=False)
    # shape (7, 9) for 0 and 3, (12, 10) otherwise; axis 0 periodic for even indices
    assert bp.groups() == [[0], [1, 5], [2, 4], [3]]
    bp.map("degree")
    s = bp.stats()
    assert s["items"] == 6 and s["groups"] == len(bp.groups()) and sum(s["group_sizes"]) == 6
    assert s["mode"] == "loop" and s["launches"] == 6
    assert s["wall_seconds"] > 0 and s["items_per_second"] > 0


def test_errors_are_kept_with_their_index():
    lats = _lattices(4)
    lats[2] = cat.Lattice(shape=(3, 3), mask=np.array([[0, 1, 1]] * 3, bool))  # site 0 blocked
    res = cat.BatchProcessor(lats, progress=False).map("distance_field", 0)
    assert not res.ok and list(res.errors) == [2] and res[2] is None
    assert isinstance(res.errors[2], IndexError)
    assert all(res[i] is not None for i in (0, 1, 3))
    with pytest.raises(cat.BatchError, match="item 2 failed: IndexError") as info:
        cat.BatchProcessor(lats, fail_fast=True, progress=False).map("distance_field", 0)
    assert info.value.index == 2 and isinstance(info.value.__cause__, IndexError)


def test_bad_arguments_fail_before_work():
    with pytest.raises(ValueError, match="unknown executor"):
        cat.BatchProcessor([], executor="gpu")
    with pytest.raises(ValueError, match="unknown operation"):
        cat.BatchProcessor(_lattices(1)).map("no_such_op")
    with pytest.raises(ValueError, match="client="):
        cat.BatchProcessor([], client=object())
    with pytest.raises(TypeError, match="progress"):
        cat.BatchProcessor([], progress="yes")


def test_progress_bar_is_off_when_not_a_terminal(capsys):
    lats = [cat.Lattice(shape=(4, 4)) for _ in range(60)]  # above the 50-item threshold
    cat.BatchProcessor(lats).map("degree")
    assert capsys.readouterr().err == ""  # stderr is captured, not a terminal
    pytest.importorskip("tqdm", reason="tqdm draws the bar when asked")
    cat.BatchProcessor(lats, progress=True).map("degree")
    assert "60/60" in capsys.readouterr().err


def test_older_api_wrappers():
    from catalytic.batch import (batch_find_shortest_paths, batch_matrix_multiply,
                                 batch_xor_transform, execute_parallel)

    L = cat.Lattice(shape=(6, 6))
    arrays = [np.arange(5) * i for i in range(4)]
    assert [a.tolist() for a in batch_xor_transform(L, arrays)] == \
        [L.xor_transform(a).tolist() for a in arrays]
    paths = batch_find_shortest_paths(L, [(0, 35), (5, 30)])
    assert [p.distance for p in paths] == [10, 10]
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(batch_matrix_multiply([(a, a.T)])[0], a @ a.T)
    res = execute_parallel([lambda: 1, lambda: 1 / 0, lambda: 3])
    assert list(res) == [1, None, 3] and isinstance(res.errors[1], ZeroDivisionError)


@pytest.mark.slow
def test_dask_local_cluster_gives_the_serial_results():
    """A real LocalCluster: two worker processes on loopback, started and closed here."""
    distributed = pytest.importorskip("distributed", reason='needs pip install "catalytic[dask]"')
    lats = _lattices(8, seed=3)
    lats[5] = cat.Lattice(shape=(3, 3), mask=np.array([[0, 1, 1]] * 3, bool))
    serial = cat.BatchProcessor(lats, progress=False).map("distance_field", 0)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        # force_executor: items this small run serially by default (predicted cheaper)
        got = cat.BatchProcessor(lats, executor="dask", client=client, progress=False,
                                 force_executor=True).map("distance_field", 0)
        # an ensemble: one group, split over both workers, each part one batched call
        base = cat.Lattice(shape=(20, 20), periodic=(True, False))
        rng = np.random.default_rng(4)
        ens = [base.with_mask(rng.random((20, 20)) < 0.6) for _ in range(9)]
        bp = cat.BatchProcessor(ens, executor="dask", client=client, progress=False,
                                force_executor=True, batched=True)
        perc = bp.map("spanning_clusters", axes=(0, 1))
        group = bp.stats()["per_group"][0]
        assert group["mode"] == "batched" and group["tasks"] == 2 and group["calls"] == 2
        # fail_fast names the lowest failing index, not the first group's failure
        with pytest.raises(cat.BatchError, match="item 1 failed") as info:
            cat.BatchProcessor(_two_failures(), executor="dask", client=client,
                               fail_fast=True, progress=False).map("distance_field", 0)
        assert info.value.index == 1
    want = cat.BatchProcessor(ens, progress=False).map("spanning_clusters", axes=(0, 1))
    for g, w in zip(perc, want):
        assert all(np.array_equal(g.clusters[a], w.clusters[a]) for a in (0, 1))
        assert np.array_equal(g.components.labels, w.components.labels)
    assert list(got.errors) == list(serial.errors) == [5]
    assert isinstance(got.errors[5], IndexError)
    for g, s in zip(got, serial):
        assert (g is None and s is None) or np.array_equal(g, s)


# -- every built-in operation, on every backend that runs it --------------------------------
def same(a, b) -> bool:
    """Equal results: arrays bit for bit (NaN where NaN), named tuples and dicts field by
    field, everything else by ==."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
                and np.array_equal(a, b, equal_nan=np.asarray(a).dtype.kind == "f"))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b or (a != a and b != b)


def _ensemble_of(shape=(6, 7), n=4, seed=2, **geometry):
    base = cat.Lattice(shape=shape, **geometry)
    rng = np.random.default_rng(seed)
    masks = rng.random((n,) + shape) < 0.75
    masks[:, 0, 0] = masks[:, -1, -1] = True
    return [base.with_mask(m) for m in masks]


FIELD = np.linspace(-1.0, 2.0, 42).reshape(6, 7)
#: (op, args, kwargs) of every built-in lattice operation, on 6 x 7 lattices
LATTICE_OPS = [
    ("distance_field", (np.array([0, 41]),), {}),
    ("shortest_path", (0, 41), {}),
    ("count_shortest_paths", (0, 41), {}),
    ("all_paths", (0, 9), {"max_length": 3}),
    ("path_catalytic", (0, 41, None), {}),
    ("connected_components", (), {}),
    ("percolates", (), {"axis": 1}),
    ("spanning_clusters", (), {"axes": (0, 1)}),
    ("degree", (), {}),
    ("analyze_structure", (), {}),
    ("centrality", (), {"method": "closeness"}),
    ("communities", (), {"method": "label_propagation", "seed": 3}),
    ("laplacian", (FIELD,), {}),
    ("diffuse", (FIELD,), {"steps": 3, "alpha": 0.1}),
    ("xor_transform", (np.arange(12, dtype=np.int32), None), {}),
]


def _runs_on(backend, op, L, args, kwargs):
    from tests.support.backends import declines

    return declines(backend, op, L, *args, **kwargs) is None


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op, args, kwargs", LATTICE_OPS, ids=[c[0] for c in LATTICE_OPS])
def test_every_operation_batched_equals_single_calls(backend, op, args, kwargs):
    lats = _ensemble_of(periodic=(True, False))
    if not _runs_on(backend, op, lats[0], args, kwargs):
        pytest.skip(f"{backend} does not run {op}")
    bp = cat.BatchProcessor(lats, progress=False, batched=True)  # the twin, whatever it costs
    got = bp.map(op, *args, backend=backend, **kwargs)
    assert got.ok, got.errors
    for g, L in zip(got, lats):
        assert same(g, L.run(op, *args, backend=backend, **kwargs)), op
    assert bp.stats()["mode"] == ("batched" if op in MASK_TWINS else "loop")


#: operations whose batched twin runs over a stack of masks (the others' twins, if any,
#: run over a stack of data with ``lattice=``; over lattices they refuse and loop)
MASK_TWINS = {"distance_field", "connected_components", "percolates", "spanning_clusters"}

DATA_OPS = [
    ("laplacian", [np.random.default_rng(i).random((6, 7)) for i in range(4)], (), {}),
    ("diffuse", [np.random.default_rng(i).random((6, 7)) for i in range(3)], (),
     {"steps": 2, "alpha": 0.2}),
    ("xor_transform", [np.arange(10, dtype=np.int64) * i for i in range(5)], (), {}),
    ("xor_transform", [np.arange(10, dtype=np.int16) + i for i in range(3)],
     (np.array([7, 9], np.int16),), {}),
]


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op, items, args, kwargs", DATA_OPS,
                         ids=["laplacian", "diffuse", "xor", "xor_key"])
def test_arrays_with_a_lattice_equal_single_calls(backend, op, items, args, kwargs):
    L = cat.Lattice(shape=(6, 7), periodic=(False, True), seed=5)
    before = [x.copy() for x in items]
    bp = cat.BatchProcessor(items, lattice=L, progress=False, batched=True)
    got = bp.map(op, *args, backend=backend, **kwargs)
    assert got.ok and len(got) == len(items)
    for g, x in zip(got, items):
        assert same(g, L.run(op, x, *args, backend=backend, **kwargs))
    twin = "batched." + op in cat.get_engine().operations()
    assert bp.stats()["mode"] == ("batched" if twin else "loop")
    assert all(np.array_equal(x, y) for x, y in zip(items, before))  # inputs untouched


def test_distance_twin_refuses_what_single_calls_refuse():
    """A source blocked in one lattice: the twin refuses the group, the loop keeps the
    error with that lattice's index."""
    lats = _ensemble_of()
    m = lats[2].geometry.mask.copy()
    m[0, 0] = False
    lats[2] = lats[0].with_mask(m)
    bp = cat.BatchProcessor(lats, progress=False, batched=True)  # the twin, whatever it costs
    res = bp.map("distance_field", 0)
    assert list(res.errors) == [2] and isinstance(res.errors[2], IndexError)
    assert bp.stats()["mode"] == "loop" and "blocked site in row 2" in bp.stats()["per_group"][0]["reason"]
    weighted = cat.Lattice(shape=(6, 7), weights=np.ones((6, 7)))
    bp = cat.BatchProcessor([weighted, weighted.with_mask(np.ones((6, 7), bool))], progress=False)
    bp.map("distance_field", 0)
    assert "unweighted" in bp.stats()["per_group"][0]["reason"]


@pytest.mark.slow
def test_dask_without_a_client_starts_and_closes_its_own_cluster():
    pytest.importorskip("distributed", reason='needs pip install "catalytic[dask]"')
    from catalytic.batch import _gpus_visible

    lats = _ensemble_of(n=5)
    bp = cat.BatchProcessor(lats, executor="dask", max_workers=2, progress=False,
                            force_executor=True, batched=True)
    got = bp.map("connected_components")
    assert all(same(g, L.connected_components()) for g, L in zip(got, lats))
    group = bp.stats()["per_group"][0]
    assert group["tasks"] == 2 and group["mode"] == "batched"
    if not _gpus_visible():  # then the cluster was a LocalCluster of 2 processes
        assert group["calls"] == 2


def test_dask_cuda_cluster_where_installed():
    """On a machine with GPUs and dask_cuda, executor="dask" starts a LocalCUDACluster
    (one worker per GPU) and gives the serial results."""
    import importlib.util

    from catalytic.batch import _gpus_visible

    if importlib.util.find_spec("dask_cuda") is None:
        pytest.skip("dask_cuda is not installed (it needs a CUDA machine)")
    if not _gpus_visible():
        pytest.skip("no CUDA GPU visible")
    lats = _ensemble_of(n=4)
    got = cat.BatchProcessor(lats, executor="dask", progress=False).map("percolates", axis=0)
    assert list(got) == [L.percolates(0) for L in lats]


# -- stopping: fail_fast and KeyboardInterrupt on the threads executor ----------------------
class _Counted:
    """A plugin op ``counted_test(data)`` on arrays whose first value is the item's index:
    item 0 raises ``first``; every other item waits until item 0 is about to raise, then
    counts itself and sleeps briefly (so that item 0's thread runs meanwhile)."""

    def __init__(self, first):
        import threading

        self.first = first
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.ran = []

    def call(self, data):
        import time

        i = int(data[0])
        if i == 0:
            self.gate.set()
            raise self.first("item 0 fails")
        self.gate.wait(10)
        with self.lock:
            self.ran.append(i)
        time.sleep(0.03)
        return i

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        registry.add_operation("counted_test", work=lambda data: float(data.size))
        registry.add_implementation("counted_test", "numpy", self.call)


WORKERS = 2
QUEUED = 200


@pytest.mark.parametrize("first", [ValueError, KeyboardInterrupt])
def test_threads_stop_queued_items_after_item_0_fails(first):
    """fail_fast (a BatchError for item 0) or a KeyboardInterrupt from item 0: the items
    queued behind it are never started."""
    eng = cat.Engine(disable_plugin_autoload=True)
    plugin = _Counted(first)
    eng.register_plugin(plugin, "counted-test")
    items = [np.array([i]) for i in range(QUEUED)]
    bp = cat.BatchProcessor(items, executor="threads", max_workers=WORKERS, fail_fast=True,
                            engine=eng, progress=False)
    expected = cat.BatchError if first is ValueError else KeyboardInterrupt
    with pytest.raises(expected) as info:
        bp.map("counted_test")
    if first is ValueError:
        assert info.value.index == 0 and isinstance(info.value.__cause__, ValueError)
    assert len(plugin.ran) <= WORKERS + 2, plugin.ran


@pytest.mark.parametrize("first", [ValueError, KeyboardInterrupt])
def test_execute_parallel_threads_stop_queued_calls(first):
    from catalytic.batch import execute_parallel

    plugin = _Counted(first)
    calls = [lambda i=i: plugin.call(np.array([i])) for i in range(QUEUED)]
    expected = cat.BatchError if first is ValueError else KeyboardInterrupt
    with pytest.raises(expected):
        execute_parallel(calls, executor="threads", max_workers=WORKERS, fail_fast=True)
    assert len(plugin.ran) <= WORKERS + 2, plugin.ran


# -- which failure fail_fast reports ----------------------------------------------------------
def _blocked_at_0(shape, periodic=(False, False)):
    mask = np.ones(shape, bool)
    mask.flat[0] = False
    return cat.Lattice(shape=shape, mask=mask, periodic=periodic)


def _two_failures():
    """Items 1 and 2 fail (site 0 blocked); item 2 shares a group with item 0, which runs
    first, so a run in group order meets item 2 before item 1."""
    return [cat.Lattice(shape=(4, 5)), _blocked_at_0((3, 3)), _blocked_at_0((4, 5)),
            cat.Lattice(shape=(3, 3)), cat.Lattice(shape=(4, 5))]


@pytest.mark.parametrize("executor", ["serial", "threads"])
def test_fail_fast_reports_the_lowest_failing_index(executor):
    lats = _two_failures()
    bp = cat.BatchProcessor(lats, executor=executor, max_workers=2, progress=False)
    assert bp.groups() == [[0, 2, 4], [1, 3]]
    assert list(bp.map("distance_field", 0).errors) == [1, 2]
    with pytest.raises(cat.BatchError, match="item 1 failed: IndexError") as info:
        cat.BatchProcessor(lats, executor=executor, max_workers=2, fail_fast=True,
                           progress=False).map("distance_field", 0)
    assert info.value.index == 1 and isinstance(info.value.__cause__, IndexError)


def test_execute_parallel_fail_fast_reports_the_lowest_failing_index():
    from catalytic.batch import execute_parallel

    for executor in ("serial", "threads"):
        with pytest.raises(cat.BatchError) as info:
            execute_parallel([lambda: 1, lambda: 1 / 0, lambda: [][0]], executor=executor,
                             fail_fast=True)
        assert info.value.index == 1 and isinstance(info.value.__cause__, ZeroDivisionError)


# -- clear errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [123, None, ["degree"]])
def test_op_must_be_a_name(op):
    with pytest.raises(TypeError, match=r"op must be the name of an operation \(a str\), "
                                        r"got " + re.escape(repr(op))):
        cat.BatchProcessor(_lattices(2), progress=False).map(op)


@pytest.mark.parametrize("executor", ["serial", "threads", "dask"])
def test_an_empty_batch_says_so(executor):
    bp = cat.BatchProcessor([], executor=executor, progress=False)
    res = bp.map("degree")
    s = bp.stats()
    assert list(res) == [] and res.ok
    assert s["mode"] == "empty" and s["items"] == 0 and s["groups"] == 0
    assert s["launches"] == 0 and s["per_group"] == []


class _RuntimeOp:
    """A plugin registered at run time: an operation and a backend of its own."""

    @cat.hookimpl
    def catalytic_add_backends(self, registry):
        registry.add_backend("runtime-test", available=True)

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        from catalytic import catalogue as O

        registry.add_operation("runtime_open_test", work=O.sites_work, validate=O.v_none)
        registry.add_implementation("runtime_open_test", "numpy",
                                    lambda lat: int(lat.geometry.n_open))
        registry.add_implementation("degree", "runtime-test",
                                    lambda lat: np.zeros(lat.shape, np.int64))


def test_dask_refuses_a_plugin_registered_at_run_time_before_submitting():
    """Workers build their own engines without it: said at once, no cluster started."""
    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(_RuntimeOp(), "runtime-test")
    lats = [cat.Lattice(shape=(3, 4), engine=eng) for _ in range(3)]
    bp = cat.BatchProcessor(lats, executor="dask", engine=eng, progress=False)
    with pytest.raises(cat.PluginError,
                       match=r"operation 'runtime_open_test' comes from plugin 'runtime-test'"
                             r".*entry point in group 'catalytic'"):
        bp.map("runtime_open_test")
    with pytest.raises(cat.PluginError, match="backend 'runtime-test' comes from plugin"):
        bp.map("degree", backend="runtime-test")
    # the same engine on the serial executor runs it
    assert list(cat.BatchProcessor(lats, engine=eng, progress=False).map(
        "runtime_open_test")) == [12, 12, 12]


def test_plugins_from_entry_points_and_built_ins_reach_dask_workers(tmp_path, monkeypatch):
    """A real entry point (a distribution's metadata on sys.path) passes the check that a
    plugin registered at run time fails."""
    from catalytic.batch import _worker_problem

    (tmp_path / "catalytic_ep_test_plugin.py").write_text(
        "import catalytic as cat\n"
        "from catalytic import catalogue as O\n"
        "@cat.hookimpl\n"
        "def catalytic_add_operations(registry):\n"
        "    registry.add_operation('ep_open_test', work=O.sites_work, validate=O.v_none)\n"
        "    registry.add_implementation('ep_open_test', 'numpy',\n"
        "                                lambda lat: int(lat.geometry.n_open))\n")
    info = tmp_path / "catalytic_ep_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: catalytic-ep-test-plugin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text("[catalytic]\nep-test = catalytic_ep_test_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CATALYTIC_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    loaded = cat.Engine()
    assert "ep-test" in loaded.plugin_names()
    assert _worker_problem([loaded], "ep_open_test") is None
    assert _worker_problem([loaded], "connected_components", "numba-cpu") is None
    # the same module registered by hand on an engine that loads no entry points
    import catalytic_ep_test_plugin

    by_hand = cat.Engine(disable_plugin_autoload=True)
    by_hand.register_plugin(catalytic_ep_test_plugin, "ep-test")
    assert "plugin autoload is off" in _worker_problem([by_hand], "ep_open_test")


def test_a_dask_task_returns_the_records_its_profiler_dropped(monkeypatch):
    """A task's own profiler keeps at most ``max_records``; what it dropped travels with
    its records, so the client's ``merge`` counts it (the cap holds across workers)."""
    from catalytic import profiler
    from catalytic.batch import _run_group

    monkeypatch.setattr(profiler.Profiler, "max_records", 2)
    lattices = [cat.Lattice(shape=(4, 4)) for _ in range(5)]
    prof = cat.get_profiler()
    prof.enable()
    try:
        values, errors, _, info = _run_group("degree", lattices, list(range(5)), (), {},
                                             False, collect=True,
                                             plan={"batched": False, "reason": "a loop",
                                                   "predicted_s": float("nan")})
    finally:
        prof.disable()
    assert errors == {} and len(values) == 5
    assert len(info["profile"]) == 2 and info["profile_dropped"] == 3
