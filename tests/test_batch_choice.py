"""The batch processor's choices by predicted cost: a batched twin or a loop of single
calls, and the executor asked for or serial. Engines here read calibration files written
by the tests, so every prediction is known in closed form; results are checked against
single calls and ``scipy.ndimage.label``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import ndimage

import catalytic as cat
from catalytic import batch as B
from catalytic.catalogue import ROW_WORK, check_stack
from catalytic.router import ROUTED_CALL_S

SLOW = {"overhead_s": 1.0, "throughput": 1e3}  # numpy, never chosen


def _engine(tmp_path, entries):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    return cat.Engine(disable_plugin_autoload=True, calibration_path=str(path))


def _costs(single, twin, op="connected_components"):
    """Calibration entries: ``op`` and its twin on numba-cpu at (overhead_s, throughput),
    numpy far slower for both."""
    return {op: {"numba-cpu": {"overhead_s": single[0], "throughput": single[1]},
                 "numpy": SLOW},
            "batched." + op: {"numba-cpu": {"overhead_s": twin[0], "throughput": twin[1]},
                              "numpy": SLOW}}


def _ensemble(eng, n=6, shape=(16, 16), seed=0):
    rng = np.random.default_rng(seed)
    base = cat.Lattice(shape=shape, engine=eng)
    return [base.with_mask(rng.random(shape) < 0.6) for _ in range(n)]


def _check_components(res, lats):
    for got, L in zip(res, lats):
        want, count = ndimage.label(L.geometry.mask)
        assert got.count == count and np.array_equal(got.labels, want)


def test_the_cheaper_way_runs_and_stats_say_why(tmp_path):
    # single calls cost 1 ms each, the twin 10 us a call: six lattices run batched
    eng = _engine(tmp_path, _costs((1e-3, 1e9), (1e-5, 1e9)))
    lats = _ensemble(eng)
    bp = cat.BatchProcessor(lats, progress=False)
    res = bp.map("connected_components")
    g = bp.stats()["per_group"][0]
    assert g["mode"] == "batched" and bp.stats()["launches"] == 1
    assert g["reason"].startswith("batched: 1 call of 'batched.connected_components' on "
                                  "numba-cpu predicted")
    assert "6 single calls on numba-cpu" in g["reason"]
    _check_components(res, lats)
    # the twin now costs 1 s a call: the same lattices run as a loop
    eng = _engine(tmp_path, _costs((1e-3, 1e9), (1.0, 1e9)))
    lats = _ensemble(eng)
    bp = cat.BatchProcessor(lats, progress=False)
    res = bp.map("connected_components")
    s = bp.stats()
    g = s["per_group"][0]
    assert g["mode"] == "loop" and s["launches"] == 6 and s["batched_items"] == 0
    assert g["reason"].startswith("a loop: 6 single calls on numba-cpu predicted")
    assert g["choice"]["predicted_s"]["loop"] < g["choice"]["predicted_s"]["batched"]
    assert g["predicted_s"] == g["choice"]["predicted_s"]["loop"]
    _check_components(res, lats)


def test_predictions_are_the_calibrated_model(tmp_path):
    """Loop: rows x (overhead + work / throughput + ROUTED_CALL_S); twin: the same per
    call of at most ``per_call`` rows, its work per row the sites times the stencil plus
    ROW_WORK."""
    o1, t1, o2, t2 = 3e-5, 2e8, 7e-5, 5e8
    eng = _engine(tmp_path, _costs((o1, t1), (o2, t2)))
    L = cat.Lattice(shape=(16, 12), engine=eng)
    one = check_stack(L, np.ones((1, 16, 12), bool))
    sites = 16 * 12 * 4
    c = eng.router.compare_batch("connected_components", ((L,), {}), ((L, one), {}), 10, 4)
    want_loop = 10 * (o1 + sites / t1 + ROUTED_CALL_S)
    want_twin = (2 * (o2 + 4 * (sites + ROW_WORK) / t2 + ROUTED_CALL_S)
                 + (o2 + 2 * (sites + ROW_WORK) / t2 + ROUTED_CALL_S))
    assert math.isclose(c.seconds["loop"], want_loop, rel_tol=1e-12)
    assert math.isclose(c.seconds["batched"], want_twin, rel_tol=1e-12)
    assert c.batched == (want_twin <= want_loop)
    assert c.backends == {"batched": "numba-cpu", "loop": "numba-cpu"}
    assert "3 calls of 'batched.connected_components'" in c.reason


def test_batched_keyword_forces_either_way(tmp_path):
    slow_twin = _engine(tmp_path, _costs((1e-3, 1e9), (1.0, 1e9)))
    lats = _ensemble(slow_twin)
    bp = cat.BatchProcessor(lats, progress=False, batched=True)
    res = bp.map("connected_components")
    g = bp.stats()["per_group"][0]
    assert g["mode"] == "batched" and g["reason"].startswith("batched=True (by cost alone, a loop")
    _check_components(res, lats)
    fast_twin = _engine(tmp_path, _costs((1e-3, 1e9), (1e-5, 1e9)))
    lats = _ensemble(fast_twin)
    bp = cat.BatchProcessor(lats, progress=False, batched=False)
    res = bp.map("connected_components")
    g = bp.stats()["per_group"][0]
    assert g["mode"] == "loop" and g["reason"] == "batched=False: a loop of single calls"
    _check_components(res, lats)
    with pytest.raises(TypeError, match="batched must be None, True or False"):
        cat.BatchProcessor(lats, batched="yes")
    with pytest.raises(TypeError, match="force_executor"):
        cat.BatchProcessor(lats, force_executor=None)


def test_an_uncalibrated_plugin_twin_still_runs(tmp_path):
    """With only the generic guess on a side (a plugin's twin nobody measured), nothing is
    compared: the twin runs, and the reason says why."""
    eng = _engine(tmp_path, {})

    class Twin:
        calls = 0

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            from catalytic import catalogue as O

            def twin(lat, stack):
                Twin.calls += 1
                return [int(r.sum()) for r in stack]

            registry.add_operation("open_sum_test", work=O.sites_work, validate=O.v_none)
            registry.add_implementation("open_sum_test", "numpy",
                                        lambda lat: int(lat.geometry.n_open))
            registry.add_operation("batched.open_sum_test", work=O.stack_work,
                                   validate=O.batched(O.v_none))
            registry.add_implementation("batched.open_sum_test", "numpy", twin)

    eng.register_plugin(Twin(), "open-sum-test")
    lats = _ensemble(eng, n=5)
    bp = cat.BatchProcessor(lats, progress=False, engine=eng)
    assert list(bp.map("open_sum_test")) == [L.geometry.n_open for L in lats]
    g = bp.stats()["per_group"][0]
    assert g["mode"] == "batched" and Twin.calls == 1
    assert "no calibrated or declared cost for 'batched.open_sum_test' on numpy" in g["reason"]


def _degree_engine(tmp_path, overhead):
    return _engine(tmp_path, {"degree": {"numba-cpu": {"overhead_s": overhead,
                                                       "throughput": 1e9},
                                         "numpy": SLOW}})


def test_threads_on_tiny_items_run_serially_and_heavy_ones_in_chunks(tmp_path):
    # predicted 1 us a call: threads would only pass the GIL around
    lats = _ensemble(_degree_engine(tmp_path, 1e-6), n=20)
    bp = cat.BatchProcessor(lats, executor="threads", max_workers=2, progress=False)
    res = bp.map("degree")
    s = bp.stats()
    assert s["executor"] == "threads" and s["executor_used"] == "serial"
    assert s["executor_reason"].startswith("threads asked for, but no two tasks")
    assert "tasks" not in s["per_group"][0]
    assert all(np.array_equal(r, L.degree()) for r, L in zip(res, lats))
    # forced, they run on the threads, in a few chunks rather than one task per item
    bp = cat.BatchProcessor(lats, executor="threads", max_workers=2, progress=False,
                            force_executor=True)
    res = bp.map("degree")
    s = bp.stats()
    assert s["executor_used"] == "threads" and s["executor_reason"] == "force_executor=True"
    assert s["per_group"][0]["tasks"] == B.CHUNKS_PER_WORKER * 2
    assert all(np.array_equal(r, L.degree()) for r, L in zip(res, lats))
    # predicted 1 ms a call: worth the threads by cost
    lats = _ensemble(_degree_engine(tmp_path, 1e-3), n=20)
    bp = cat.BatchProcessor(lats, executor="threads", max_workers=2, progress=False)
    res = bp.map("degree")
    s = bp.stats()
    assert s["executor_used"] == "threads" and s["per_group"][0]["tasks"] == 8
    assert s["per_group"][0]["mode"] == "loop" and s["launches"] == 20
    assert all(np.array_equal(r, L.degree()) for r, L in zip(res, lats))


def test_dask_on_tiny_items_runs_serially_without_starting_a_cluster(tmp_path, monkeypatch):
    def no_cluster(*_):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(B, "_local_cluster", no_cluster)
    eng = _engine(tmp_path, _costs((1e-5, 1e9), (1e-5, 1e9)))
    lats = _ensemble(eng, n=12)
    bp = cat.BatchProcessor(lats, executor="dask", progress=False)
    res = bp.map("connected_components")
    s = bp.stats()
    assert s["executor"] == "dask" and s["executor_used"] == "serial"
    assert s["executor_reason"].startswith("dask asked for, but serial predicted")
    assert "cluster start" in s["executor_reason"] and "12 items shipped" in s["executor_reason"]
    _check_components(res, lats)


def test_executor_plan_prefers_dask_only_when_the_work_pays_for_it():
    """The rule in closed form: dask when start-up + shipping + tasks + work / workers is
    below the serial work."""
    groups = [list(range(100))]
    cheap = [{"batched": True, "predicted_s": 0.5, "reason": ""}]
    dear = [{"batched": True, "predicted_s": 100.0, "reason": ""}]
    ex, why, parts = B.executor_plan("dask", cheap, groups, 2)
    assert ex == "serial" and parts == [groups[0:1]]
    ex, why, parts = B.executor_plan("dask", dear, groups, 2)
    assert ex == "dask" and [len(p) for p in parts[0]] == [50, 50]
    cost = B.DASK_START_S + 100 * B.DASK_ITEM_S + 2 * B.DASK_TASK_S + 100.0 / 2
    assert f"dask {B._fmt(cost)}" in why
    # a running cluster has no start-up to pay
    edge = [{"batched": True, "predicted_s": 2 * (100 * B.DASK_ITEM_S + 2 * B.DASK_TASK_S)
             + 1e-3, "reason": ""}]
    assert B.executor_plan("dask", edge, groups, 2, own_cluster=False)[0] == "dask"
    assert B.executor_plan("dask", edge, groups, 2, own_cluster=True)[0] == "serial"
    unknown = [{"batched": True, "predicted_s": math.nan, "reason": ""}]
    assert B.executor_plan("dask", unknown, groups, 2)[0] == "dask"
