"""Batched twins (``batched.connected_components``, ``batched.percolates``,
``batched.spanning_clusters``) and the BatchProcessor's batched groups: every row equals
the single call on ``lattice.with_mask(row)`` (itself checked against SciPy and brute
force elsewhere) and ``scipy.ndimage.label`` directly; memory decides the batch size;
a shortfall splits a call, never fails it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

import catalytic as cat
from catalytic import memory as memory_module
from catalytic.kernels.cpu import components
from tests.support.backends import available_backends
from tests.support.strategies import lattice_specs, make

CPU = [b for b in available_backends() if b in ("numpy", "numba-cpu")]


def _same_components(a, b):
    return (a.count == b.count and a.labels.dtype == b.labels.dtype
            and np.array_equal(a.labels, b.labels) and np.array_equal(a.sizes, b.sizes))


def _same_spanning(a, b):
    return (a.clusters.keys() == b.clusters.keys()
            and all(np.array_equal(a.clusters[k], b.clusters[k]) for k in a.clusters)
            and _same_components(a.components, b.components))


def _stack(spec, rows, seed):
    rng = np.random.default_rng(seed)
    return rng.random((rows,) + tuple(spec["shape"])) < rng.uniform(0.3, 0.9)


@pytest.mark.parametrize("backend", CPU)
@settings(max_examples=25, deadline=None)
@given(spec=lattice_specs(max_dim=3, masks=False), rows=st.integers(0, 5),
       seed=st.integers(0, 2**32 - 1))
def test_twins_equal_single_calls_on_every_row(backend, spec, rows, seed):
    L = make(spec)
    stack = _stack(spec, rows, seed)
    eng = cat.get_engine()
    axes = tuple(range(len(spec["shape"])))
    comps = eng.run("batched.connected_components", L, stack, backend=backend)
    spans = eng.run("batched.spanning_clusters", L, stack, axes=axes, backend=backend)
    perc = eng.run("batched.percolates", L, stack, axis=-1, backend=backend)
    assert len(comps) == len(spans) == len(perc) == rows
    for b in range(rows):
        one = L.with_mask(stack[b])
        assert _same_components(comps[b], one.connected_components(backend=backend))
        assert _same_spanning(spans[b], one.spanning_clusters(axes, backend=backend))
        assert perc[b] is one.percolates(-1, backend=backend)


def test_cpu_kernel_agrees_with_ndimage_label():
    """The batched kernel against the independent oracle, for both of its paths (runs:
    von Neumann; sites: a stencil without the unit last-axis step)."""
    rng = np.random.default_rng(5)
    masks = rng.random((7, 20, 17)) < 0.6
    vn = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
    labels, counts, sizes = components.connected_components_batched(
        (20, 17), np.zeros(2, np.uint8), vn, masks.reshape(7, -1).view(np.uint8), False)
    for b in range(7):
        want, count = ndimage.label(masks[b])
        assert counts[b] == count and np.array_equal(labels[b].reshape(20, 17), want)
        assert np.array_equal(sizes[b], np.bincount(want.reshape(-1))[1:])
    # steps of two along both axes: the 4 sub-lattices of a doubled grid
    two = 2 * vn
    labels, counts, _ = components.connected_components_batched(
        (20, 17), np.zeros(2, np.uint8), two, masks.reshape(7, -1).view(np.uint8), False)
    for b in range(7):
        count = 0
        for r in (0, 1):
            for c in (0, 1):
                count += ndimage.label(masks[b][r::2, c::2])[1]
        assert counts[b] == count


def test_stack_validation_is_clear():
    L = cat.Lattice(shape=(4, 5))
    eng = cat.get_engine()
    with pytest.raises(ValueError, match=r"\(B, \*\(4, 5\)\) or \(B, 20\)"):
        eng.run("batched.connected_components", L, np.ones((3, 5, 4), bool))
    with pytest.raises(TypeError, match="bool or integer"):
        eng.run("batched.connected_components", L, np.ones((3, 20)))
    with pytest.raises(ValueError, match="other than 0 and 1"):
        eng.run("batched.connected_components", L, np.full((3, 20), 2))
    with pytest.raises(ValueError, match="axis 2 out of range"):
        eng.run("batched.percolates", L, np.ones((3, 20), bool), axis=2)
    masks = np.ones((2, 4, 5), bool)
    before = masks.copy()
    eng.run("batched.percolates", L, masks, axis=0)
    assert np.array_equal(masks, before)  # the caller's stack is not modified


def test_router_explains_a_batched_call():
    L = cat.Lattice(shape=(32, 32))
    stack = np.ones((50, 32, 32), bool)
    d = cat.get_engine().explain("batched.percolates", L, stack, axis=0)
    assert d.op == "batched.percolates" and d.work == 50 * (32 * 32 * 4 + 1500)
    assert set(d.predictions) >= set(CPU)


# -- the BatchProcessor -------------------------------------------------------------------
def _ensemble(n=9, shape=(24, 20), p=0.6, seed=0, **geometry):
    base = cat.Lattice(shape=shape, **geometry)
    rng = np.random.default_rng(seed)
    return [base.with_mask(rng.random(shape) < p) for _ in range(n)]


@pytest.mark.parametrize("executor", ["serial", "threads"])
@pytest.mark.parametrize("op, kwargs", [("connected_components", {}),
                                        ("percolates", {"axis": 1}),
                                        ("spanning_clusters", {"axes": (0, 1)})])
def test_batched_groups_equal_single_calls(executor, op, kwargs):
    lats = _ensemble(periodic=(True, False)) + _ensemble(4, shape=(9, 9), seed=1)
    # batched=True: the twin whatever the router predicts (tests/test_batch_choice.py
    # checks the choice)
    bp = cat.BatchProcessor(lats, executor=executor, progress=False, batched=True)
    res = bp.map(op, **kwargs)
    s = bp.stats()
    assert res.ok and s["mode"] == "batched" and s["batched_items"] == 13
    assert s["launches"] == 2  # one call per group: everything fits in memory here
    for got, L in zip(res, lats):
        want = L.run(op, **kwargs)
        if op == "connected_components":
            assert _same_components(got, want)
        elif op == "spanning_clusters":
            assert _same_spanning(got, want)
        else:
            assert got is want
    assert all(g["backends"] for g in s["per_group"])


def test_loops_say_why():
    L = cat.Lattice(shape=(6, 6))
    bp = cat.BatchProcessor([L, L.with_mask(np.eye(6, dtype=bool)), cat.Lattice(shape=(3,))],
                            progress=False)
    bp.map("degree")
    s = bp.stats()
    assert s["mode"] == "loop" and s["launches"] == 3
    reasons = [g["reason"] for g in s["per_group"]]
    assert reasons == ["no batched twin 'batched.degree' is registered", "a single item"]


def test_batch_size_comes_from_the_host_guard(monkeypatch):
    lats = _ensemble(10)
    per_item = cat.get_engine().registry.operation("batched.percolates").memory(
        lats[0], np.ones((1, lats[0].n_points), np.uint8), axis=0)
    # room for three lattices in half of "available" memory
    monkeypatch.setattr(memory_module, "available_memory", lambda: 2 * 3 * per_item + 1)
    bp = cat.BatchProcessor(lats, progress=False, batched=True)
    res = bp.map("percolates", axis=0)
    s = bp.stats()
    assert s["per_group"][0]["memory"]["batch_size"] == 3 and s["launches"] == 4
    assert list(res) == [L.percolates(0) for L in lats]
    # max_batch_size caps it further
    bp = cat.BatchProcessor(lats, progress=False, max_batch_size=2, batched=True)
    bp.map("percolates", axis=0)
    assert bp.stats()["launches"] == 5


class _ShortTwin:
    """A plugin op whose batched twin runs short of memory above two rows and on any
    stack holding a lattice of five open sites, whose single call fails."""

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        from catalytic import catalogue as O

        def open_count(lat):
            if lat.geometry.n_open == 5:
                raise ValueError("five open sites")
            return lat.geometry.n_open

        def twin(lat, stack):
            if stack.shape[0] > 2 or (stack.sum(axis=1) == 5).any():
                raise cat.InsufficientMemoryError("the test twin", 10**12, 10**6)
            return [int(r.sum()) for r in stack]

        registry.add_operation("open_count_test", work=O.sites_work, validate=O.v_none)
        registry.add_implementation("open_count_test", "numpy", open_count)
        registry.add_operation("batched.open_count_test", work=O.stack_work,
                               validate=O.batched(O.v_none))
        registry.add_implementation("batched.open_count_test", "numpy", twin)


def test_a_shortfall_halves_the_call_and_a_failing_item_keeps_its_index():
    eng = cat.get_engine()
    eng.register_plugin(_ShortTwin(), "short-twin-test")
    try:
        masks = np.zeros((7, 3, 3), bool)
        for b in range(7):
            masks[b].flat[:b + 1] = True  # item b has b + 1 open sites
        lats = [cat.Lattice(shape=(3, 3), mask=m) for m in masks]
        bp = cat.BatchProcessor(lats, progress=False, batched=True)
        res = bp.map("open_count_test")
        s = bp.stats()
        # 7 -> [0 1 2] [3 4 5 6]; [0 1 2] -> [0] [1 2]; [3 4 5 6] -> [3 4] [5 6];
        # [3 4] -> [3] [4]; item 4 alone does not fit and runs its single call, which fails
        assert s["splits"] == 4 and s["launches"] == 5 and s["batched_items"] == 6
        assert list(res) == [1, 2, 3, 4, None, 6, 7]
        assert list(res.errors) == [4] and isinstance(res.errors[4], ValueError)
        assert "does not fit" in s["per_group"][0]["fallback"]
        with pytest.raises(cat.BatchError, match="item 4 failed: ValueError"):
            cat.BatchProcessor(lats, progress=False, fail_fast=True,
                               batched=True).map("open_count_test")
    finally:
        eng.unregister_plugin("short-twin-test")


@pytest.mark.parametrize("backend", CPU)
def test_threads_sharing_a_lattice_get_the_serial_answer(backend):
    from concurrent.futures import ThreadPoolExecutor

    L = cat.Lattice(shape=(20, 24), periodic=(True, False))
    stacks = [np.random.default_rng(s).random((6, 20, 24)) < 0.6 for s in range(8)]
    eng = cat.get_engine()

    def run(stack):
        return eng.run("batched.spanning_clusters", L, stack, axes=(0, 1), backend=backend)

    serial = [run(s) for s in stacks]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(run, stacks))
    for a, b in zip(serial, threaded):
        assert all(_same_spanning(x, y) for x, y in zip(a, b))


# -- a plugin's twin that breaks its contract ------------------------------------------------
class _OpenSitesTwin:
    """A plugin op counting open sites, whose twin's list of per-row results goes through
    ``returns`` first (to drop a row, or return None)."""

    def __init__(self, returns):
        self.returns = returns

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        from catalytic import catalogue as O

        registry.add_operation("open_sites_test", work=O.sites_work, validate=O.v_none)
        registry.add_implementation("open_sites_test", "numpy",
                                    lambda lat: int(lat.geometry.n_open))
        registry.add_operation("batched.open_sites_test", work=O.stack_work,
                               validate=O.batched(O.v_none))
        registry.add_implementation("batched.open_sites_test", "numpy",
                                    lambda lat, stack: self.returns([int(r.sum()) for r in stack]))


@pytest.mark.parametrize("returns, says", [
    (lambda rows: rows[:-1], "returned 3 results for 4 rows"),
    (lambda rows: None, "returned NoneType, not a sequence"),
    (lambda rows: iter(rows[:-1]), "returned 3 results for 4 rows"),
], ids=["one-too-few", "none", "iterator"])
@pytest.mark.parametrize("executor", ["serial", "threads"])
def test_a_twin_returning_the_wrong_count_falls_back_to_single_calls(returns, says, executor):
    """The rows of a short (or missing) result cannot be matched to items: the whole call
    runs as single calls, said in stats; no item is left None without an error."""
    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(_OpenSitesTwin(returns), "open-sites-test")
    lats = _ensemble(4, shape=(5, 6), seed=7, engine=eng)
    bp = cat.BatchProcessor(lats, executor=executor, engine=eng, progress=False)
    res = bp.map("open_sites_test")
    assert res.ok and list(res) == [int(L.geometry.mask.sum()) for L in lats]
    group = bp.stats()["per_group"][0]
    assert group["mode"] == "loop" and group["batched_items"] == 0 and group["calls"] == 4
    assert says in group["fallback"] and "plugin 'open-sites-test'" in group["fallback"]
    assert group["reason"] == group["fallback"]


def _scipy_components(lat, row):
    """Components of one row of a stack, from ``scipy.ndimage.label`` (a von Neumann
    cross: the open 2-D lattices below)."""
    labels, count = ndimage.label(row.reshape(lat.shape).astype(bool))
    return cat.Components(labels.astype(np.int32), count,
                          np.bincount(labels.reshape(-1), minlength=count + 1)[1:])


class _ComponentsBackend:
    """A plugin backend 'rows-test' giving the built-in ``batched.connected_components``
    (cheaper than any other by its declared cost, so the router picks it): SciPy's
    labelling passed through ``spoil`` row by row."""

    def __init__(self, spoil):
        self.spoil = spoil

    @cat.hookimpl
    def catalytic_add_backends(self, registry):
        registry.add_backend("rows-test", available=True)

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        def twin(lat, stack):
            return [self.spoil(_scipy_components(lat, row)) for row in stack]

        registry.add_implementation("batched.connected_components", "rows-test", twin,
                                    cost=(0.0, 1e12))


SPOILED = [
    (lambda c: c._replace(labels=c.labels.astype(np.int64)), "labels has dtype int64, not int32"),
    (lambda c: c._replace(labels=c.labels.reshape(-1)), "labels has shape (30,), not (5, 6)"),
    (lambda c: c._replace(count=float(c.count)), "count is"),
    (lambda c: c._replace(sizes=c.sizes[:-1]), "sizes has shape"),
    (lambda c: tuple(c), "it is a tuple, not Components"),
]


@pytest.mark.parametrize("spoil, says", SPOILED,
                         ids=["labels-dtype", "labels-shape", "count", "sizes", "type"])
def test_a_plugin_backends_rows_are_held_to_the_single_calls_contract(spoil, says):
    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(_ComponentsBackend(spoil), "rows-test")
    lats = _ensemble(3, shape=(5, 6), seed=8, engine=eng)
    bp = cat.BatchProcessor(lats, engine=eng, progress=False)
    res = bp.map("connected_components")
    assert res.ok
    for got, L in zip(res, lats):  # the single calls' answers, on the built-in backends
        want = _scipy_components(L, L.geometry.mask)
        assert got.labels.dtype == np.int32 and _same_components(got, want)
    group = bp.stats()["per_group"][0]
    assert group["mode"] == "loop" and "on backend 'rows-test'" in group["fallback"]
    assert "row 0 breaks the contract of 'connected_components'" in group["fallback"]
    assert says in group["fallback"]


def test_a_plugin_backends_rows_that_keep_the_contract_are_used():
    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(_ComponentsBackend(lambda c: c), "rows-test")
    lats = _ensemble(3, shape=(5, 6), seed=8, engine=eng)
    bp = cat.BatchProcessor(lats, engine=eng, progress=False)
    res = bp.map("connected_components")
    assert res.ok and all(_same_components(g, L.connected_components()) for g, L in zip(res, lats))
    group = bp.stats()["per_group"][0]
    assert group["mode"] == "batched" and group["backends"] == {"rows-test": 1}
