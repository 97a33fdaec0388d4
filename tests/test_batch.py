"""BatchProcessor: results equal one-by-one calls, errors are kept with their index."""

from __future__ import annotations

import numpy as np
import pytest

import catalytic as cat
from lattice_oracles import available_backends

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
    from lattice_oracles import declines

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
