"""Run one operation over many lattices or arrays: ``cat.BatchProcessor``.

``BatchProcessor(items).map("connected_components")`` runs a registered operation on
every item through the engine (routing, validation, memory checks and all) and returns
the results in input order.

Batched calls
-------------
Lattices are grouped by geometry (shape, periodic axes, stencil, weights or not) and by
engine and routing flags. When the operation has a *batched twin* (an operation
registered as ``"batched." + op``, see :data:`catalytic.catalogue.BATCHED_PREFIX`:
``connected_components``, ``percolates``, ``spanning_clusters`` and ``distance_field``
over masks, ``laplacian`` and ``xor_transform`` over data are built in; a plugin may
register its own), a group of two or more lattices runs as routed calls of the twin
over a stack of their masks: on ``numba-cpu`` one parallel kernel labels many lattices
at once (lattices shared out over threads), on ``cuda`` one launch per sweep covers
every lattice, on ``numpy`` the reference loops. Each call of the twin is routed
like any other (``engine.explain("batched.percolates", L, stack, axis=0)``), with its
own measured cost. Arrays given with ``lattice=`` are grouped by shape and dtype and
stacked the same way for the data twins. Other operations, single items and other
arrays run as a loop of single calls. A group that could run as calls of the twin does so only when the router
predicts that cheaper than a loop of single calls (:meth:`Router.compare_batch
<catalytic.router.Router.compare_batch>`, from the calibrated cost of both: the twin
saves the per-call costs and shares lattices out over threads, but a twin can also be
the slower way, as the reference backend's loops are); ``batched=True`` or ``False``
decides instead. :meth:`BatchProcessor.stats` says which groups ran how and why, with
both predictions.

How many lattices go into one call comes from measured memory: the host memory
available now (the host guard) and, when a GPU backend may take the call, the
device-memory monitor's free bytes; a call gets at most ``memory_fraction`` of the
smaller, by the twin's own memory model. A call that still runs short of memory
(``InsufficientMemoryError``) is split in halves and retried, never failed; a single
lattice that does not fit fails as its single call would, with its index.

Executors
---------
``"serial"``
    One item after the other in this thread.
``"threads"``
    A thread pool; every public call gives the serial answer when threads share a
    lattice or a lent buffer (see :mod:`catalytic.catalysis`), so results equal the
    serial executor's. A batched group is one task; a loop group a few contiguous
    chunks per thread. Single calls predicted under :data:`THREAD_MIN_ITEM_S` hold the
    GIL for most of their time, so a map of only those runs serially. A ``fail_fast``
    failure or a ``KeyboardInterrupt`` cancels the work not yet started and reaches the
    caller without waiting for it.
``"dask"``
    Groups run as tasks on a ``dask.distributed`` cluster: the ``client=`` you pass, or
    a ``LocalCluster`` started for the call and closed after it. Lattices travel by
    their definition (geometry, seed, engine settings; see ``Lattice.__reduce__``), not
    their caches, and workers build their own engines: an operation or backend from a
    plugin registered at run time (``engine.register_plugin``) is refused before
    anything is submitted; install such a plugin with an entry point in the
    ``"catalytic"`` group. Needs ``pip install "catalytic[dask]"``. A map whose
    predicted work does not pay for the cluster (start-up, shipping every item, the
    tasks; see :func:`executor_plan`) runs serially, without starting one.

Either fallback is said in ``stats()["executor_used"]`` and ``["executor_reason"]``;
``force_executor=True`` runs on the executor asked for regardless.

Errors
------
An item whose call raises does not sink the batch: the exception is kept with the item's
index (``result.errors``) and its result is None, unless ``fail_fast=True``, which
raises :class:`BatchError` naming the lowest failing index (chained from its exception)
on every executor: items below a failure still run, items above it are not started.
A batched twin that raises, or returns other than one result per row as the single call
would (checked for a plugin's backend against the built-in operation's result type,
shapes and dtypes), has failed: its items run one by one, said in ``stats()``.

Examples
--------
>>> import numpy as np, catalytic as cat
>>> rng = np.random.default_rng(0)
>>> lattices = [cat.Lattice(shape=(16, 16), mask=rng.random((16, 16)) < 0.6) for _ in range(4)]
>>> res = cat.BatchProcessor(lattices, progress=False).map("percolates", axis=0)
>>> len(res), res.errors
(4, {})
>>> [bool(x) for x in res] == [L.percolates(axis=0) for L in lattices]
True
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import os
import queue
import sys
import threading
import time
import types
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

import numpy as np

from catalytic import memory
from catalytic.device import numba_cuda, simulator_active
from catalytic.errors import CatalyticError, InsufficientMemoryError, PluginError
from catalytic.catalogue import BATCHED_PREFIX
from catalytic.results import Components, SpanningClusters
from catalytic.profiler import get_profiler

EXECUTORS = ("serial", "threads", "dask")
#: a progress bar is shown (when it can be) for batches of at least this many items
PROGRESS_MIN_ITEMS = 50
#: share of the measured free memory (host, and device when a GPU may run the call) one
#: batched call may plan to use
MEMORY_FRACTION = 0.5
#: a loop group runs on the threads executor only when one of its single calls is
#: predicted to take at least this long: below it the call is mostly Python holding the
#: GIL, and threads only add their handoffs (the crossover benchmarks/bench_batch.py
#: measures)
THREAD_MIN_ITEM_S = 300e-6
#: tasks per worker thread a loop group is cut into (contiguous chunks of items)
CHUNKS_PER_WORKER = 4
#: the Dask executor's own costs, for the choice against serial: starting a LocalCluster
#: and warming its workers, shipping one item there and its result back, one task
#: (``benchmarks/bench_batch.py --dask`` measures them; reports/batch.md)
DASK_START_S = 5.0
DASK_ITEM_S = 600e-6
DASK_TASK_S = 0.05


def _local_cluster(n_workers):
    """A cluster for one :meth:`BatchProcessor.map`: with ``dask_cuda`` installed and
    GPUs visible, a ``LocalCUDACluster`` (one worker per GPU, or ``n_workers``);
    otherwise a ``LocalCluster`` of ``n_workers`` (default 2) single-threaded worker
    processes. Both listen on loopback only."""
    from distributed import LocalCluster

    if importlib.util.find_spec("dask_cuda") is not None and _gpus_visible():
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=n_workers, threads_per_worker=1,
                                host="127.0.0.1", dashboard_address=None)
    return LocalCluster(n_workers=n_workers or 2, threads_per_worker=1, processes=True,
                        host="127.0.0.1", dashboard_address=None)


def _gpus_visible() -> bool:
    """True when Numba sees a real GPU (not the simulator)."""
    if simulator_active():
        return False
    try:
        return bool(numba_cuda().is_available())
    except Exception:  # no numba-cuda, no driver
        return False


class BatchError(CatalyticError):
    """An item failed in a batch run with ``fail_fast=True``; ``index`` is its position."""

    def __init__(self, index: int, err: BaseException | str):
        self.index = index
        text = err if isinstance(err, str) else f"item {index} failed: {type(err).__name__}: {err}"
        super().__init__(text)

    def __reduce__(self):  # crosses process boundaries (Dask) by index and message
        return BatchError, (self.index, str(self))


class BatchResult(list):
    """The results in input order (None where an item failed), with ``errors``:
    ``{index: exception}`` for the items that failed."""

    def __init__(self, values, errors):
        super().__init__(values)
        self.errors = dict(errors)

    @property
    def ok(self) -> bool:
        """True when no item failed."""
        return not self.errors


def _is_lattice(x) -> bool:
    return hasattr(x, "geometry") and hasattr(x, "routing_policy")


def _group_key(item):
    """Items that could share one batched call: same geometry tables, engine and routing
    flags (or, for plain arrays, the same shape and dtype)."""
    if _is_lattice(item):
        g = item.geometry
        # weights and bonds by identity: lattices made by with_mask share them; others
        # that merely hold equal ones are not compared (a twin sees only the first
        # lattice's)
        held = (g.weights, g.bond_bits, g.bond_weights)
        return ("lattice", g.shape, g.periodic, g.offsets.tobytes(),
                tuple(None if a is None else id(a) for a in held), id(item._engine),
                item.enable_gpu, item.enable_smart_routing)
    shape = getattr(item, "shape", None)
    dtype = str(getattr(item, "dtype", type(item).__name__))
    return ("array", tuple(shape) if shape is not None else None, dtype)


def _call_one(engine, op, item, args, kwargs, lattice=None):
    if lattice is not None:
        return lattice.run(op, item, *args, **kwargs)
    if _is_lattice(item):
        return item.run(op, *args, **kwargs)
    return engine.run(op, item, *args, **kwargs)


def _loop(engine, op, items, indices, args, kwargs, fail_fast, values, errors, lattice=None):
    for i, item in zip(indices, items):
        try:
            values[i] = _call_one(engine, op, item, args, kwargs, lattice)
        except Exception as err:
            if fail_fast:
                raise BatchError(i, err) from err
            errors[i] = err


def _stack(items, lattice=None) -> np.ndarray:
    """What the twin's rows are: the items themselves stacked (arrays, with
    ``lattice=``), or the masks of same-geometry lattices as a (B, n) bool stack (True
    = open)."""
    if lattice is not None:
        arrays = [np.asarray(x) for x in items]
        # keep a shared dtype as it is (np.stack would make a non-native byte order native)
        shared = arrays[0].dtype if len({a.dtype for a in arrays}) == 1 else None
        return np.stack(arrays, dtype=shared)
    n = items[0].geometry.n_points
    stack = np.empty((len(items), n), dtype=np.bool_)  # every row written once
    for b, lat in enumerate(items):
        if lat.geometry.mask is not None:
            stack[b] = lat.geometry.mask.reshape(-1)
        else:
            stack[b] = True
    return stack


# -- what a batched twin must return ------------------------------------------------------
def _array_problem(v, shape, dtype, what="result") -> str | None:
    """Why ``v`` is not an ndarray of ``shape`` and ``dtype`` (byte order aside), or None."""
    if not isinstance(v, np.ndarray):
        return f"its {what} is a {type(v).__name__}, not an ndarray"
    if v.shape != tuple(shape):
        return f"its {what} has shape {v.shape}, not {tuple(shape)}"
    if v.dtype != dtype and v.dtype.newbyteorder("=") != np.dtype(dtype).newbyteorder("="):
        return f"its {what} has dtype {v.dtype}, not {np.dtype(dtype)}"
    return None


def _components_problem(lat, v) -> str | None:
    """:class:`Components` as ``connected_components`` on ``lat`` returns it: labels in
    the lattice's shape (int32, int64 past 2**31 sites), an int count, int64 sizes."""
    if not isinstance(v, Components):
        return f"it is a {type(v).__name__}, not Components"
    g = lat.geometry
    labels = np.int32 if g.n_points < 2**31 else np.int64
    problem = _array_problem(v.labels, g.shape, labels, "labels")
    if problem is not None:
        return problem
    if type(v.count) is not int and (not isinstance(v.count, numbers.Integral)
                                     or isinstance(v.count, bool)) or v.count < 0:
        return f"its count is {v.count!r}, not a non-negative int"
    return _array_problem(v.sizes, (v.count,), np.int64, "sizes")


def _spanning_problem(lat, v, axes) -> str | None:
    if not isinstance(v, SpanningClusters):
        return f"it is a {type(v).__name__}, not SpanningClusters"
    if not isinstance(v.clusters, dict) or sorted(v.clusters) != sorted(axes):
        keys = sorted(v.clusters) if isinstance(v.clusters, dict) else v.clusters
        return f"its clusters are keyed by {keys!r}, not the axes {sorted(axes)}"
    for axis, labels in v.clusters.items():
        if not isinstance(labels, np.ndarray) or labels.ndim != 1 or labels.dtype != np.int64:
            return f"its clusters[{axis}] is not a 1-D int64 array"
    return _components_problem(lat, v.components)


def _row_contract(engine, op, template, args, kwargs):
    """``check(item, value) -> problem or None``: what a row of ``op``'s twin must be, by
    the contract of the single built-in ``op`` (the result type, and the shape and dtype
    of its arrays); None for operations without one here (their rows are only counted)."""
    shape = template.geometry.shape
    if op == "connected_components":
        return lambda item, v: _components_problem(template, v)
    if op == "percolates":
        return lambda item, v: (None if isinstance(v, (bool, np.bool_))
                                else f"it is a {type(v).__name__}, not a bool")
    if op == "spanning_clusters":
        call = {k: v for k, v in kwargs.items() if k != "backend"}
        axes = engine.registry.operation(op).validate(template, *args, **call)[1]["axes"]
        return lambda item, v: _spanning_problem(template, v, axes)
    if op == "distance_field":
        dist = np.float64 if template.geometry.weighted else np.int64
        return lambda item, v: _array_problem(v, shape, dist)
    if op == "laplacian":
        return lambda item, v: _array_problem(v, shape, np.float64)
    if op == "xor_transform":
        return lambda item, v: _array_problem(v, np.shape(item), np.asarray(item).dtype)
    return None


def _twin_rows(engine, op, template, items, got, args, kwargs, rows=True):
    """``(rows, problem)``: the results ``got`` of ``op``'s twin for ``items`` as a list
    of one per row, and why they break the twin's contract (one result per row, each as
    the single call's: checked with ``rows``), or None."""
    if got is None or isinstance(got, (str, bytes, dict)) or not hasattr(got, "__iter__"):
        return None, f"returned {type(got).__name__}, not a sequence of one result per row"
    got = list(got)
    if len(got) != len(items):
        return None, f"returned {len(got)} results for {len(items)} rows"
    check = _row_contract(engine, op, template, args, kwargs) if rows else None
    if check is None:
        return got, None
    for b, (item, v) in enumerate(zip(items, got)):
        problem = check(item, v)
        if problem is not None:
            return None, f"row {b} breaks the contract of {op!r}: {problem}"
    return got, None


def _own_plugin(engine, name) -> bool:
    """True for the plugins the engine registers itself in every process: the modules of
    the ``catalytic`` package (its built-in backends)."""
    plugin = engine.pm.get_plugin(name) if name else None
    return isinstance(plugin, types.ModuleType) and plugin.__name__.startswith("catalytic.")


def _gpu_may_run(engine, template, kwargs) -> bool:
    if not template.enable_gpu:
        return False
    forced = kwargs.get("backend") or engine.settings.backend
    backends = engine.registry.backends
    if forced:
        return forced in backends and backends[forced].device != "cpu"
    return any(b.device != "cpu" and b.status()[0] for b in backends.values())


def batch_size(engine, twin, template, one, args, kwargs, limit=None) -> tuple[int, dict]:
    """Rows per call of the batched ``twin`` on ``template`` (``one``: a stack of one
    row), from measured memory (module docstring), and what it was computed from.
    Raises what the twin's validation raises."""
    spec = engine.registry.operation(twin)
    call = {k: v for k, v in kwargs.items() if k != "backend"}
    if spec.validate is not None:
        a, kw = spec.validate(template, one, *args, **call)
    else:
        a, kw = (template, one, *args), call
    per_item = int(spec.memory(*a, **kw)) if spec.memory is not None else 0
    host = memory.available_memory()
    budget = {"host_available": host, "per_item_bytes": per_item}
    free = host
    if _gpu_may_run(engine, template, kwargs):
        from catalytic.memory import get_monitor

        device = get_monitor().free_bytes()
        budget["device_free"] = device
        free = min(free, device)
    size = max(1, int(MEMORY_FRACTION * free // max(per_item, 1)))
    if limit is not None:
        size = min(size, limit)
    budget["batch_size"] = size
    return size, budget


def _batched(engine, op, template, items, indices, args, kwargs, fail_fast, values,
             errors, info, lattice=None):
    """One routed call of ``op``'s twin over the items (their masks, or with
    ``lattice=`` the items themselves). A memory shortfall halves the call (a single
    item then runs, and fails, as its single call); any other failure of the twin reruns
    its items one by one, said in ``info``. A twin that returns other than one result
    per row, each as the single call returns it (:func:`_twin_rows`), has failed:
    its rows cannot be matched to items, so none of them is kept."""
    twin = BATCHED_PREFIX + op
    try:
        got = template.engine.run(twin, template, _stack(items, lattice), *args, **kwargs)
    except InsufficientMemoryError as err:
        if len(items) > 1:
            info["splits"] += 1
            info.setdefault("split_reason", str(err))
            h = len(items) // 2
            for part in ((items[:h], indices[:h]), (items[h:], indices[h:])):
                _batched(engine, op, template, *part, args, kwargs, fail_fast, values,
                         errors, info, lattice)
            return
        info.setdefault("fallback", f"one item does not fit a batched call: {err}")
    except Exception as err:
        info.setdefault("fallback", f"the batched call failed: {type(err).__name__}: {err}")
    else:
        decision = template.engine.last_decision
        impl = (None if decision is None else
                template.engine.registry.implementations[twin].get(decision.backend))
        # rows from the project's own backends are tested against single calls; a
        # plugin's are checked here, and every twin's count
        rows = impl is None or not _own_plugin(template.engine, impl.plugin)
        got, problem = _twin_rows(template.engine, op, template, items, got, args, kwargs,
                                  rows)
        if problem is None:
            info["calls"] += 1
            info["batched_items"] += len(items)
            if decision is not None:
                info["backends"][decision.backend] = info["backends"].get(decision.backend,
                                                                          0) + 1
            for i, v in zip(indices, got):
                values[i] = v
            return
        where = "" if impl is None else f" on backend {impl.backend!r} (plugin {impl.plugin!r})"
        info.setdefault("fallback", f"the batched call{where} {problem}")
    _loop(engine, op, items, indices, args, kwargs, fail_fast, values, errors, lattice)
    info["calls"] += len(items)


def loop_reason(op, items, lattice=None) -> str | None:
    """Why a group of ``items`` runs ``op`` as a loop of single calls, or None when it
    runs as batched calls of ``op``'s twin."""
    if len(items) < 2:
        return "a single item"
    if lattice is None and not all(_is_lattice(x) for x in items):
        return "items are not lattices (pass lattice= to run a lattice operation on arrays)"
    if lattice is not None and any(_is_lattice(x) for x in items):
        return "items are lattices and lattice= is given"
    owner = lattice if lattice is not None else items[0]
    if BATCHED_PREFIX + op not in owner.engine.registry.operations:
        return f"no batched twin {BATCHED_PREFIX + op!r} is registered"
    return None


def _single_args(op, items, args, kwargs, lattice=None):
    """``(engine, args, kwargs)`` of the first item's single call, validated."""
    from catalytic.engine import get_engine

    first = items[0]
    if lattice is not None:
        engine, call = lattice.engine, (lattice, first, *args)
    elif _is_lattice(first):
        engine, call = first.engine, (first, *args)
    else:
        engine, call = get_engine(), (first, *args)
    spec = engine.registry.operation(op)
    kw = {k: v for k, v in kwargs.items() if k != "backend"}
    if spec.validate is not None:
        call, kw = spec.validate(*call, **kw)
    return engine, call, kw


def loop_seconds(op, items, args, kwargs, lattice=None) -> float:
    """Predicted seconds of ``op`` on every item as single calls (the first item's
    prediction, :data:`~catalytic.router.ROUTED_CALL_S` included, times the items), or
    NaN when nothing can be predicted (the first item's call is refused)."""
    from catalytic.router import ROUTED_CALL_S

    try:
        engine, call, kw = _single_args(op, items, args, kwargs, lattice)
        d = engine.router.decide(op, call, kw, backend=kwargs.get("backend"))
    except Exception:  # the loop reports it item by item
        return math.nan
    return len(items) * (d.predictions.get(d.backend, math.nan) + ROUTED_CALL_S)


def plan_group(op, items, args, kwargs, lattice=None, limit=None, batched=None) -> dict:
    """How a group runs ``op``: ``{"batched": bool, "reason": str, "predicted_s":
    seconds of the way chosen (NaN when unknown), "choice": {...} when both ways were
    predicted}``.

    A group that can run as calls of the twin (:func:`loop_reason`) does so when the
    router predicts the twin cheaper than a loop of single calls
    (:meth:`~catalytic.router.Router.compare_batch`, with the memory-bound batch size);
    ``batched=True`` runs the twin wherever it can, ``batched=False`` never."""
    reason = loop_reason(op, items, lattice)
    if reason is None and batched is False:
        reason = "batched=False: a loop of single calls"
    if reason is None:
        template = lattice if lattice is not None else items[0]
        twin = BATCHED_PREFIX + op
        try:
            one = _stack(items[:1], lattice)
            size, _ = batch_size(template.engine, twin, template, one, args, kwargs, limit)
            spec = template.engine.registry.operation(twin)
            kw = {k: v for k, v in kwargs.items() if k != "backend"}
            if spec.validate is not None:
                twin_call = spec.validate(template, one, *args, **kw)
            else:
                twin_call = ((template, one, *args), kw)
        except Exception as err:  # bad arguments: the loop reports them item by item
            reason = (f"the batched call refused its arguments: {type(err).__name__}: "
                      f"{err}")
    if reason is not None:
        return {"batched": False, "reason": reason,
                "predicted_s": loop_seconds(op, items, args, kwargs, lattice)}
    try:
        _, call, kw = _single_args(op, items, args, kwargs, lattice)
        choice = template.engine.router.compare_batch(
            op, (call, kw), twin_call, len(items), size, backend=kwargs.get("backend"))
    except Exception as err:  # the single call is refused: the twin, as before
        return {"batched": True, "predicted_s": math.nan,
                "reason": f"batched: a single call cannot be predicted "
                          f"({type(err).__name__}: {err})"}
    plan = {"batched": choice.batched, "reason": choice.reason,
            "predicted_s": choice.seconds["batched" if choice.batched else "loop"],
            "choice": {"predicted_s": choice.seconds, "backends": choice.backends}}
    if batched is True and not choice.batched:
        plan.update(batched=True, predicted_s=choice.seconds["batched"],
                    reason=f"batched=True (by cost alone, {choice.reason})")
    return plan


def _run_group(op, items, indices, args, kwargs, fail_fast, engine=None, limit=None,
               lattice=None, region=None, collect=False, plan=None):
    """Run ``op`` on a group: batched calls of its twin when ``plan`` (default:
    :func:`plan_group`) says so, else a loop of single calls. Returns ``(values, errors,
    seconds, info)`` with errors keyed by input index and ``info`` saying how the group
    ran and why (``reason``). Module-level so Dask can ship it to workers.

    Profiling: ``region`` (the caller's open region, for a thread of this process) is
    adopted as the parent of the group's records; with ``collect`` (a Dask task) the
    group's calls are recorded by a profiler of its own and returned in
    ``info["profile"]`` for the client to merge."""
    from catalytic import profiler

    if collect:
        with profiler.task_profiler() as tp:
            out = _run_group(op, items, indices, args, kwargs, fail_fast, engine, limit,
                             lattice, plan=plan)
        out[3]["profile"] = tp.records
        out[3]["profile_dropped"] = tp.dropped
        return out
    if region is not None:
        with profiler.get_profiler().adopt(region):
            return _run_group(op, items, indices, args, kwargs, fail_fast, engine, limit,
                              lattice, plan=plan)
    if engine is None:
        from catalytic.engine import get_engine

        engine = get_engine()
    t0 = time.perf_counter()
    values: dict = {}
    errors: dict = {}
    info = {"mode": "loop", "calls": 0, "splits": 0, "batched_items": 0, "backends": {}}
    if plan is None:
        plan = plan_group(op, items, args, kwargs, lattice, limit)
    info["predicted_s"] = plan["predicted_s"]
    if "choice" in plan:
        info["choice"] = plan["choice"]
    reason = None if plan["batched"] else plan["reason"]
    if reason is None:
        template = lattice if lattice is not None else items[0]
        try:
            one = _stack(items[:1], lattice)
            size, info["memory"] = batch_size(template.engine, BATCHED_PREFIX + op, template,
                                              one, args, kwargs, limit)
        except Exception as err:  # bad arguments: the loop reports them item by item
            reason = (f"the batched call refused its arguments: {type(err).__name__}: "
                      f"{err}")
    if reason is None:
        info["reason"] = plan["reason"]
        info["mode"] = "batched"
        for lo in range(0, len(items), size):
            _batched(engine, op, template, items[lo:lo + size], indices[lo:lo + size], args,
                     kwargs, fail_fast, values, errors, info, lattice)
        if info["batched_items"] < len(items):  # some calls fell back to the loop
            info["mode"] = "mixed" if info["batched_items"] else "loop"
            info["reason"] = info["fallback"]
    else:
        info["reason"] = reason
        _loop(engine, op, items, indices, args, kwargs, fail_fast, values, errors, lattice)
        info["calls"] = len(items)
    out = [values.get(i) for i in indices]
    return out, errors, time.perf_counter() - t0, info


def _merge(parts, reason):
    """One group's ``(values, errors, seconds, info)`` from the results of its parts
    (run as separate tasks): values in order, seconds and counts summed (seconds are
    task time, so they can exceed the wall time when parts ran at once). ``reason``:
    the group's :func:`loop_reason` (a part of one item has its own)."""
    values, errors, seconds = [], {}, 0.0
    info = None
    modes = set()
    for v, e, sec, inf in parts:
        values += v
        errors.update(e)
        seconds += sec
        modes.add(inf["mode"])
        if info is None:
            info = dict(inf, backends=dict(inf["backends"]), tasks=1)
            continue
        info["tasks"] += 1
        for key in ("calls", "splits", "batched_items"):
            info[key] += inf[key]
        for name, count in inf["backends"].items():
            info["backends"][name] = info["backends"].get(name, 0) + count
        for key in ("fallback", "split_reason", "memory"):
            if key in inf:
                info.setdefault(key, inf[key])
    info["mode"] = modes.pop() if len(modes) == 1 else "mixed"
    if reason is not None:
        info["reason"] = reason
    return values, errors, seconds, info


def _loaded_on_workers(engine, name) -> bool:
    """Whether a Dask worker's engine with ``engine``'s settings has plugin ``name``:
    the engine's own plugins always, a plugin of the ``"catalytic"`` entry-point group
    unless plugin autoload is off; not one registered by ``register_plugin``."""
    if _own_plugin(engine, name):
        return True
    plugin = engine.pm.get_plugin(name) if name else None
    if plugin is None or engine.settings.disable_plugin_autoload:
        return False
    if any(p is plugin for p, _ in engine.pm.list_plugin_distinfo()):
        return True
    for ep in metadata.entry_points(group="catalytic"):
        if ep.name == name:
            try:
                return ep.load() is plugin
            except Exception:  # a broken entry point is not this plugin
                return False
    return False


def _worker_problem(engines, op, backend=None) -> str | None:
    """Why Dask workers cannot run ``op`` (on ``backend``) as the ``engines`` here do, or
    None: workers build their engines afresh (the process engine, or one per unpickled
    lattice's settings) and so lack what was registered at run time."""
    for engine in engines:
        spec = engine.registry.operations.get(op)
        named = engine.registry.backends.get(backend) if backend is not None else None
        for what, plugin in ((f"operation {op!r}", spec and spec.plugin),
                             (f"backend {backend!r}", named and named.plugin)):
            if plugin is None or _loaded_on_workers(engine, plugin):
                continue
            how = ("plugin autoload is off, so workers load no entry points" if
                   engine.settings.disable_plugin_autoload else
                   "workers load only the built-in backends and the plugins installed "
                   "under the 'catalytic' entry-point group")
            return (f"{what} comes from plugin {plugin or '(none)'!r}, registered in this "
                    f"process and not installed for Dask workers ({how}), where every "
                    "item would fail; install the plugin as a package with an entry point "
                    "in group 'catalytic' on the workers too, or use executor='serial' or "
                    "'threads'")
    return None


class _Halt:
    """What the jobs of one threaded run share: the lowest failing index seen (a
    ``fail_fast`` :class:`BatchError`) and whether the run was interrupted."""

    def __init__(self):
        self.index = None
        self.interrupted = False
        self._lock = threading.Lock()

    def failed(self, index: int) -> None:
        with self._lock:
            if self.index is None or index < self.index:
                self.index = index

    def skip(self, first: int) -> bool:
        """True for a job (its lowest index ``first``) that can no longer change the
        outcome."""
        return self.interrupted or (self.index is not None and first > self.index)


_SKIPPED = object()


def _threaded(jobs, workers, done=None) -> list:
    """Run ``jobs``, ``[(first, fn, args)]`` with ``first`` the lowest input index a job
    covers, on ``workers`` threads; their results in the order given. ``done(result)`` is
    called on this thread as each finishes.

    A job raising :class:`BatchError` (``fail_fast``) stops the jobs whose indices are all
    above the failing one: those not started never start, those running are not waited
    for. Jobs covering a lower index still run, so the error raised names the lowest
    failing index, as the serial executor does. Any other exception, from a job or while
    waiting (``KeyboardInterrupt``), stops every job not started and is raised at once,
    without waiting for the running ones (Python cannot stop a running thread)."""
    halt = _Halt()

    def run(first, fn, args):
        if halt.skip(first):
            return _SKIPPED
        try:
            return fn(*args)
        except BatchError as err:
            halt.failed(err.index)
            raise
        except BaseException:
            halt.interrupted = True
            raise

    pool = ThreadPoolExecutor(workers)
    finished = queue.SimpleQueue()  # futures as they finish (one wait for all of them)
    ok = False
    try:
        # in input order, so that a failure leaves few lower indices to run
        pending = {}
        for k in sorted(range(len(jobs)), key=lambda k: jobs[k][0]):
            f = pool.submit(run, *jobs[k])
            pending[f] = k
            f.add_done_callback(finished.put)
        results = [None] * len(jobs)
        failure, cut = None, None
        while pending:
            f = finished.get()
            k = pending.pop(f, None)
            if k is None:  # cancelled or given up below
                continue
            err = f.exception()
            if isinstance(err, BatchError):
                if failure is None or err.index < failure.index:
                    failure = err
            elif err is not None:
                raise err
            elif failure is None:
                results[k] = f.result()
                if done is not None:
                    done(results[k])
            if halt.index is not None and halt.index != cut:
                cut = halt.index
                for g in [g for g, j in pending.items() if jobs[j][0] > cut]:
                    g.cancel()  # a running job cannot be: it is given up
                    del pending[g]
        if failure is not None:
            raise failure
        ok = True
        return results
    except BaseException:
        halt.interrupted = True
        raise
    finally:
        pool.shutdown(wait=ok, cancel_futures=True)


def _fmt(t: float) -> str:
    return "unknown" if math.isnan(t) else (f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s")


def _chunks(idx, k):
    """``idx`` cut into at most ``k`` contiguous parts of near-equal length."""
    k = max(1, min(k, len(idx)))
    return [idx[len(idx) * j // k:len(idx) * (j + 1) // k] for j in range(k)]


def executor_plan(executor, plans, groups, workers=None, *, own_cluster=True,
                  force=False):
    """Where the groups run and as which tasks: ``(executor, reason, parts)``, with
    ``parts[g]`` group g's indices cut into its tasks.

    The executor asked for runs unless it is predicted slower than serial (``force``
    runs it regardless), from the groups' predicted seconds (``plans``, see
    :func:`plan_group`):

    * ``"threads"``: a batched group is one task (its kernels use the threads); a loop
      group whose single calls are predicted at :data:`THREAD_MIN_ITEM_S` or more is cut
      into :data:`CHUNKS_PER_WORKER` contiguous chunks per thread. When no group gives
      two such tasks (nor do two groups together), everything runs serially: threads
      would only trade the GIL back and forth.
    * ``"dask"``: each group in one contiguous part per worker (``workers``, default 2);
      it runs there when the predicted serial seconds exceed the cluster's own costs
      (:data:`DASK_START_S` when it starts its own cluster, :data:`DASK_ITEM_S` per item
      shipped, :data:`DASK_TASK_S` per task) plus the serial seconds shared out over
      the workers; else serially. Without a prediction it runs as asked.
    """
    serial_parts = [[idx] for idx in groups]
    if executor == "serial":
        return "serial", "asked for", serial_parts
    total = math.fsum(p["predicted_s"] for p in plans)
    if executor == "threads":
        workers = workers or os.cpu_count() or 1
        parts, worth = [], 0
        for idx, plan in zip(groups, plans):
            per_item = plan["predicted_s"] / len(idx)
            if plan["batched"]:
                parts.append([idx])
                worth += 1
            elif force or math.isnan(per_item) or per_item >= THREAD_MIN_ITEM_S:
                parts.append(_chunks(idx, CHUNKS_PER_WORKER * workers))
                worth += len(parts[-1])
            else:
                parts.append([idx])
        if force:
            return "threads", "force_executor=True", parts
        if worth >= 2:
            return "threads", (f"tasks predicted to take at least "
                               f"{_fmt(THREAD_MIN_ITEM_S)} per item: {worth}"), parts
        return "serial", (f"threads asked for, but no two tasks predicted worth a thread "
                          f"(single calls under {_fmt(THREAD_MIN_ITEM_S)}; the whole map "
                          f"{_fmt(total)})"), serial_parts
    workers = workers or 2
    parts = [_chunks(idx, workers) for idx in groups]
    if force:
        return "dask", "force_executor=True", parts
    if math.isnan(total):
        return "dask", "asked for (no cost prediction to compare with serial)", parts
    items = sum(len(idx) for idx in groups)
    tasks = sum(len(p) for p in parts)
    start = DASK_START_S if own_cluster else 0.0
    dask = start + items * DASK_ITEM_S + tasks * DASK_TASK_S + total / workers
    words = (f"serial predicted {_fmt(total)}, dask {_fmt(dask)} ("
             + (f"cluster start {_fmt(start)}, " if own_cluster else "")
             + f"{items} items shipped, {tasks} tasks, the work over {workers} workers)")
    if dask < total:
        return "dask", words, parts
    return "serial", "dask asked for, but " + words, serial_parts


class BatchProcessor:
    """Run registered operations over many lattices or arrays (module docstring).

    Parameters
    ----------
    items : sequence
        Lattices (the operation's first argument), or arrays: the data of array
        operations (``normalize``, ``reduce``, ...), or with ``lattice=`` the second
        argument of a lattice operation (the fields of ``laplacian``, the data of
        ``xor_transform``).
    lattice : Lattice, optional
        Run ``lattice.run(op, item, ...)`` for every item (an array). Items of one shape
        and dtype then run as calls of the twin over their stack
        (``batched.laplacian``, ``batched.xor_transform``).
    executor : {"serial", "threads", "dask"}, default "serial"
    max_workers : int, optional
        Threads for ``"threads"`` (default: the CPU count), workers for a ``LocalCluster``
        started by ``"dask"`` (default 2; on a machine with GPUs and ``dask_cuda``
        installed, a ``LocalCUDACluster`` with one worker per GPU).
    max_batch_size : int, optional
        At most this many items per batched call (default: as many as measured memory
        allows, see the module docstring).
    progress : bool, optional
        Show a tqdm progress bar. Default: only for at least 50 items, when tqdm is
        installed and standard error is a terminal.
    fail_fast : bool, default False
        Raise :class:`BatchError` at the first failing item instead of collecting errors.
    client : dask.distributed.Client, optional
        The cluster for ``executor="dask"``; without one a ``LocalCluster`` is started
        (processes, loopback) for each :meth:`map` call and closed after it.
    engine : Engine, optional
        For array items and for the serial and threads executors (default: the
        process-wide engine; lattices use their own).
    batched : bool, optional
        Default (None): a group runs as calls of the operation's batched twin when the
        router predicts them cheaper than a loop of single calls. True: the twin
        wherever one can run the group; False: always a loop.
    force_executor : bool, default False
        Run on ``executor`` even where serial is predicted faster (by default a
        threads or dask map of items too small to pay for their tasks runs serially,
        and ``stats()`` says why).

    Raises
    ------
    TypeError
        ``items`` is not iterable; ``lattice`` is not a lattice; ``progress``,
        ``batched`` or ``force_executor`` is not a bool (None where allowed).
    ValueError
        An unknown executor, a ``max_workers`` or ``max_batch_size`` that is not a
        positive int, or ``client`` without ``executor="dask"``.
    """

    def __init__(self, items, *, lattice=None, executor="serial", max_workers=None,
                 max_batch_size=None, progress=None, fail_fast=False, client=None,
                 engine=None, batched=None, force_executor=False):
        try:
            self.items = list(items)
        except TypeError:
            raise TypeError(f"items must be a sequence of lattices or arrays, got {items!r}") from None
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor {executor!r}; use one of {EXECUTORS}")
        for name, v in (("max_workers", max_workers), ("max_batch_size", max_batch_size)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if progress not in (None, True, False):
            raise TypeError(f"progress must be None, True or False, got {progress!r}")
        if client is not None and executor != "dask":
            raise ValueError("client= is only used with executor='dask'")
        if lattice is not None and not _is_lattice(lattice):
            raise TypeError(f"lattice must be a catalytic lattice, got {type(lattice).__name__}")
        if batched not in (None, True, False):
            raise TypeError(f"batched must be None, True or False, got {batched!r}")
        if force_executor not in (True, False):
            raise TypeError(f"force_executor must be True or False, got {force_executor!r}")
        self.batched = batched
        self.force_executor = bool(force_executor)
        self.lattice = lattice
        self.executor = executor
        self.max_workers = max_workers
        self.max_batch_size = max_batch_size
        self.progress = progress
        self.fail_fast = bool(fail_fast)
        self.client = client
        self.engine = engine
        self._stats: dict = {}

    # -- grouping --------------------------------------------------------------------
    def groups(self) -> list[list[int]]:
        """Indices of the items that share a geometry, engine and routing flags (or, for
        arrays, a shape and dtype), each group in input order, groups in order of their
        first item."""
        out: OrderedDict = OrderedDict()
        for i, item in enumerate(self.items):
            out.setdefault(_group_key(item), []).append(i)
        return list(out.values())

    def _show_progress(self) -> bool:
        if self.progress is False:
            return False
        if self.progress is None and (len(self.items) < PROGRESS_MIN_ITEMS
                                      or not sys.stderr.isatty()):
            return False
        return importlib.util.find_spec("tqdm") is not None

    def _engines(self, engine) -> list:
        """The engines whose registries the items' calls use: the lattices' own (with
        ``lattice=``, its), and ``engine`` for array items."""
        if self.lattice is not None:
            return [self.lattice.engine]
        out = {}
        for item in self.items:
            e = item.engine if _is_lattice(item) else engine
            out.setdefault(id(e), e)
        return list(out.values())

    # -- running ---------------------------------------------------------------------
    def map(self, op: str, *args, **kwargs) -> BatchResult:
        """Run ``op`` on every item (the item is its first argument, then ``args`` and
        ``kwargs``; ``backend=`` names a backend as in a single call); results in input
        order. See the module docstring for batched calls and errors.

        Returns
        -------
        BatchResult
            A list of the results in input order (None where an item failed), with
            ``errors``: ``{index: exception}`` of the items that failed. How the map
            ran is in :meth:`stats`.

        Raises
        ------
        TypeError
            ``op`` is not a str.
        ValueError
            ``op`` is not a registered operation.
        PluginError
            With ``executor="dask"``: ``op`` (or the backend named by ``backend=``)
            comes from a plugin registered at run time, which the workers do not have.
        BatchError
            With ``fail_fast=True``: for the lowest failing index.
        """
        from catalytic.engine import get_engine

        if not isinstance(op, str):
            raise TypeError(f"op must be the name of an operation (a str), got {op!r}")
        engine = self.engine or get_engine()
        engine.registry.operation(op)  # an unknown name fails before any work
        if self.executor == "dask" and self.items:
            problem = _worker_problem(self._engines(engine), op, kwargs.get("backend"))
            if problem is not None:
                raise PluginError(problem)
        groups = self.groups()
        t0 = time.perf_counter()
        plans = [plan_group(op, [self.items[i] for i in idx], args, kwargs, self.lattice,
                            self.max_batch_size, self.batched) for idx in groups]
        executor, executor_reason, parts = self._executor_plan(plans, groups)
        bar = None
        if self._show_progress():
            from tqdm import tqdm

            bar = tqdm(total=len(self.items), desc=op, file=sys.stderr)
        try:
            if not groups:
                done = []
            elif executor == "dask":
                done = self._map_dask(op, groups, plans, parts, args, kwargs)
            else:
                done = self._map_local(engine, op, groups, plans, parts, args, kwargs, bar,
                                       executor)
        finally:
            if bar is not None:
                bar.close()
        values = [None] * len(self.items)
        errors: dict = {}
        per_group = []
        for idx, (vals, errs, seconds, info), part in zip(groups, done, parts):
            for i, v in zip(idx, vals):
                values[i] = v
            errors.update(errs)
            per_group.append(dict(info, items=len(idx), seconds=seconds))
            if executor != "serial":
                per_group[-1]["tasks"] = len(part)
        wall = time.perf_counter() - t0
        modes = {g["mode"] for g in per_group}
        self._stats = {
            "op": op,
            "executor": self.executor,
            "executor_used": executor,
            "executor_reason": executor_reason,
            "items": len(self.items),
            "groups": len(groups),
            "group_sizes": [len(g) for g in groups],
            "mode": "empty" if not modes else modes.pop() if len(modes) == 1 else "mixed",
            "launches": sum(g["calls"] for g in per_group),
            "batched_items": sum(g["batched_items"] for g in per_group),
            "splits": sum(g["splits"] for g in per_group),
            "errors": len(errors),
            "group_seconds": [g["seconds"] for g in per_group],
            "per_group": per_group,
            "predicted_seconds": math.fsum(p["predicted_s"] for p in plans),
            "wall_seconds": wall,
            "items_per_second": len(self.items) / wall if wall > 0 else None,
        }
        return BatchResult(values, dict(sorted(errors.items())))

    def _executor_plan(self, plans, groups):
        """``(executor, reason, parts)``: where the groups run and why, and each group's
        indices cut into the tasks it runs as (:func:`executor_plan`)."""
        workers = self.max_workers
        if self.executor == "dask" and self.client is not None:
            workers = max(1, len(self.client.scheduler_info()["workers"]))
        return executor_plan(self.executor, plans, groups, workers,
                             own_cluster=self.client is None, force=self.force_executor)

    def _map_local(self, engine, op, groups, plans, parts, args, kwargs, bar, executor):
        limit = self.max_batch_size
        update = None if bar is None else (lambda out: bar.update(len(out[0])))
        if executor == "serial":
            done, failure = [], None
            for idx, plan in zip(groups, plans):
                if failure is not None:
                    # only a lower index can still change which failure is reported
                    idx = [i for i in idx if i < failure.index]
                    if not idx:
                        continue
                try:
                    done.append(_run_group(op, [self.items[i] for i in idx], idx, args,
                                           kwargs, self.fail_fast, engine, limit,
                                           self.lattice, plan=plan))
                except BatchError as err:
                    if failure is None or err.index < failure.index:
                        failure = err
                    continue
                if update is not None:
                    update(done[-1])
            if failure is not None:
                raise failure
            return done
        workers = self.max_workers or os.cpu_count() or 1
        prof = get_profiler()
        region = prof.current_region() if prof.enabled else None
        # a batched group is one job (its kernels use the threads); a loop, a few chunks
        jobs, owner = [], []
        for g, (plan, cut) in enumerate(zip(plans, parts)):
            for part in cut:
                jobs.append((part[0], _run_group,
                             (op, [self.items[i] for i in part], part, args, kwargs,
                              self.fail_fast, engine, limit, self.lattice, region, False,
                              plan)))
                owner.append(g)
        results = _threaded(jobs, workers, update)
        outs = [[] for _ in groups]
        for g, out in zip(owner, results):
            outs[g].append(out)
        return [_merge(out, plan["reason"]) for out, plan in zip(outs, plans)]

    def _map_dask(self, op, groups, plans, parts, args, kwargs):
        try:
            from distributed import Client
        except ImportError as err:
            raise ImportError(
                'executor="dask" needs dask.distributed: pip install "catalytic[dask]"'
            ) from err
        prof = get_profiler()
        own = None
        client = self.client
        if client is None:
            cluster = _local_cluster(self.max_workers)
            client = Client(cluster)
            own = (client, cluster)
        try:
            tasks = []
            for plan, cut in zip(plans, parts):
                tasks.append([(part[0], client.submit(
                                   _run_group, op, [self.items[i] for i in part], part, args,
                                   kwargs, self.fail_fast, None, self.max_batch_size,
                                   self.lattice, None, prof.enabled, plan, pure=False))
                              for part in cut])
            gathered = self._gather_dask(client, tasks)
            done = []
            for g, plan in enumerate(plans):
                for n, part in enumerate(gathered[g]):  # the workers' records, under our region
                    records = part[3].pop("profile", None)
                    dropped = part[3].pop("profile_dropped", 0)
                    if records or dropped:
                        prof.merge(records or [], worker=f"dask-task-{g}.{n}",
                                   parent=prof.current_region(), dropped=dropped)
                done.append(_merge(gathered[g], plan["reason"]))
            return done
        finally:
            if own is not None:
                own[0].close()
                own[1].close()

    def _gather_dask(self, client, tasks):
        """The results of ``tasks`` (per group, its parts as ``(first index, future)``),
        gathered in input order of the parts' first items: after a ``fail_fast`` failure,
        only the parts that hold a lower index are still waited for, so the
        :class:`BatchError` raised names the lowest failing index; the others are
        cancelled."""
        flat = sorted((first, g, n, f) for g, futures in enumerate(tasks)
                      for n, (first, f) in enumerate(futures))
        parts = [[None] * len(futures) for futures in tasks]
        failure = None
        try:
            for first, g, n, f in flat:
                if failure is not None and first > failure.index:
                    break
                try:
                    parts[g][n] = f.result()
                except BatchError as err:
                    if failure is None or err.index < failure.index:
                        failure = err
            if failure is not None:
                raise failure
        except BaseException:
            client.cancel([f for *_, f in flat if not f.done()])
            raise
        return parts

    def stats(self) -> dict:
        """The last :meth:`map`: items, groups (and sizes), ``mode`` (``"batched"``,
        ``"loop"`` or ``"mixed"``; ``"empty"`` for a batch of no items, which runs
        nothing and starts no cluster), ``launches`` (routed calls: one per batched call,
        one per item of a loop), ``batched_items``, ``splits`` (batched calls halved for
        memory), errors, seconds per group, ``executor`` (asked for), ``executor_used``
        and ``executor_reason`` (why, with the predictions compared), and
        ``per_group``: how each group ran and why (``reason``: the twin or a loop, with
        both predictions when both could run it; ``predicted_s`` of the way chosen and
        ``choice`` with both), the backends of its batched calls, the memory its batch
        size came from and, off the serial executor, its ``tasks``; wall time and items
        per second. Seconds are measured except those named ``predicted``."""
        return dict(self._stats)

    def execute_parallel(self, callables=None):
        """Call each callable (default: the items) with no arguments on this
        processor's executor; results in order, errors collected as in :meth:`map`."""
        return execute_parallel(self.items if callables is None else callables,
                                executor=self.executor, max_workers=self.max_workers,
                                fail_fast=self.fail_fast)


# -- the older API's conveniences -------------------------------------------------------
def batch_xor_transform(lattice, arrays, key=None, **options) -> BatchResult:
    """``lattice.xor_transform(a, key)`` for every array, in order: arrays of one shape
    and dtype as calls of ``batched.xor_transform``. ``options`` go to
    :class:`BatchProcessor` (``executor``, ``fail_fast``, ...)."""
    options.setdefault("progress", False)
    bp = BatchProcessor(arrays, lattice=lattice, **options)
    return bp.map("xor_transform") if key is None else bp.map("xor_transform", key)


def batch_find_shortest_paths(lattice, pairs, **options) -> BatchResult:
    """``lattice.find_shortest_path(start, end)`` for every ``(start, end)`` pair."""
    return execute_parallel([lambda s=s, e=e: lattice.find_shortest_path(s, e)
                             for s, e in pairs], **options)


def batch_matrix_multiply(pairs, **options) -> BatchResult:
    """``cat.ops.matmul(a, b)`` for every ``(a, b)`` pair."""
    from catalytic.ops import matmul

    return execute_parallel([lambda a=a, b=b: matmul(a, b) for a, b in pairs], **options)


def execute_parallel(callables, *, executor="threads", max_workers=None,
                     fail_fast=False) -> BatchResult:
    """Call every callable with no arguments (``"serial"`` or ``"threads"``); results in
    order, failures collected in ``errors`` unless ``fail_fast``, which raises
    :class:`BatchError` for the lowest failing index. With ``"threads"``, a
    ``fail_fast`` failure or an exception that is not an ``Exception``
    (``KeyboardInterrupt``) cancels the calls not yet started and is raised without
    waiting for the running ones."""
    if executor not in ("serial", "threads"):
        raise ValueError(f"execute_parallel runs 'serial' or 'threads', got {executor!r}")
    callables = list(callables)
    for i, f in enumerate(callables):
        if not callable(f):
            raise TypeError(f"item {i} is not callable: {f!r}")

    def one(i, f):
        try:
            return f(), None
        except Exception as err:
            if fail_fast:
                raise BatchError(i, err) from err
            return None, err

    if executor == "serial":
        done = [one(i, f) for i, f in enumerate(callables)]
    else:
        done = _threaded([(i, one, (i, f)) for i, f in enumerate(callables)],
                         max_workers or os.cpu_count() or 1)
    return BatchResult([v for v, _ in done], {i: e for i, (_, e) in enumerate(done) if e})
