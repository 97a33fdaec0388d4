"""Run one operation over many lattices or arrays: ``cat.BatchProcessor``.

``BatchProcessor(items).map("connected_components")`` runs a registered operation on
every item through the engine (routing, validation, memory checks and all) and returns
the results in input order. Items are grouped by geometry (shape, periodic axes,
stencil) so that a group can later run as one batched kernel launch; today every group
runs as a loop of single calls, and :meth:`BatchProcessor.stats` says so
(``"mode": "loop"``), so no figure claims a batched launch that did not happen.

Executors
---------
``"serial"``
    One item after the other in this thread.
``"threads"``
    A thread pool; every public call gives the serial answer when threads share a
    lattice or a lent buffer (see :mod:`catalytic.catalysis`), so results equal the
    serial executor's.
``"dask"``
    Groups run as tasks on a ``dask.distributed`` cluster: the ``client=`` you pass, or
    a ``LocalCluster`` started for the call and closed after it. Lattices travel by
    their definition (geometry, seed, engine settings; see ``Lattice.__reduce__``), not
    their caches. Needs ``pip install "catalytic[dask]"``.

Errors
------
An item whose call raises does not sink the batch: the exception is kept with the item's
index (``result.errors``) and its result is None, unless ``fail_fast=True``, which
raises :class:`BatchError` naming the first failing index (chained from its exception).

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
import os
import sys
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from catalytic.errors import CatalyticError

EXECUTORS = ("serial", "threads", "dask")
#: a progress bar is shown (when it can be) for batches of at least this many items
PROGRESS_MIN_ITEMS = 50


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
    return hasattr(x, "geometry") and hasattr(x, "_routing_policy")


def _group_key(item):
    """Items that could share one batched launch: same geometry tables (or, for plain
    arrays, the same shape and dtype)."""
    if _is_lattice(item):
        g = item.geometry
        return ("lattice", g.shape, g.periodic, g.offsets.tobytes(), g.weights is not None)
    shape = getattr(item, "shape", None)
    dtype = str(getattr(item, "dtype", type(item).__name__))
    return ("array", tuple(shape) if shape is not None else None, dtype)


def _call_one(engine, op, item, args, kwargs):
    if _is_lattice(item):
        return item.run(op, *args, **kwargs)
    return engine.run(op, item, *args, **kwargs)


def _run_group(op, items, indices, args, kwargs, fail_fast, engine=None):
    """Run ``op`` on each item of a group; returns ``(values, errors, seconds)`` with
    errors keyed by input index. Module-level so Dask can ship it to workers."""
    if engine is None:
        from catalytic.engine import get_engine

        engine = get_engine()
    values, errors = [], {}
    t0 = time.perf_counter()
    for i, item in zip(indices, items):
        try:
            values.append(_call_one(engine, op, item, args, kwargs))
        except Exception as err:
            if fail_fast:
                raise BatchError(i, err) from err
            values.append(None)
            errors[i] = err
    return values, errors, time.perf_counter() - t0


class BatchProcessor:
    """Run registered operations over many lattices or arrays (module docstring).

    Parameters
    ----------
    items : sequence
        Lattices (operations on lattices) or arrays (array operations such as
        ``xor_transform``'s data are not lattices: use :func:`batch_xor_transform`).
    executor : {"serial", "threads", "dask"}, default "serial"
    max_workers : int, optional
        Threads for ``"threads"`` (default: the CPU count), workers for a ``LocalCluster``
        started by ``"dask"`` (default 2).
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
    """

    def __init__(self, items, *, executor="serial", max_workers=None, progress=None,
                 fail_fast=False, client=None, engine=None):
        try:
            self.items = list(items)
        except TypeError:
            raise TypeError(f"items must be a sequence of lattices or arrays, got {items!r}") from None
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor {executor!r}; use one of {EXECUTORS}")
        if max_workers is not None and (isinstance(max_workers, bool)
                                        or not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers must be a positive int, got {max_workers!r}")
        if progress not in (None, True, False):
            raise TypeError(f"progress must be None, True or False, got {progress!r}")
        if client is not None and executor != "dask":
            raise ValueError("client= is only used with executor='dask'")
        self.executor = executor
        self.max_workers = max_workers
        self.progress = progress
        self.fail_fast = bool(fail_fast)
        self.client = client
        self.engine = engine
        self._stats: dict = {}

    # -- grouping --------------------------------------------------------------------
    def groups(self) -> list[list[int]]:
        """Indices of the items that share a geometry (or array shape and dtype), each
        group in input order, groups in order of their first item."""
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

    # -- running ---------------------------------------------------------------------
    def map(self, op: str, *args, **kwargs) -> BatchResult:
        """Run ``op`` on every item (the item is its first argument, then ``args`` and
        ``kwargs``); results in input order. See the module docstring for errors."""
        from catalytic.engine import get_engine

        engine = self.engine or get_engine()
        engine.registry.operation(op)  # an unknown name fails before any work
        groups = self.groups()
        t0 = time.perf_counter()
        bar = None
        if self._show_progress():
            from tqdm import tqdm

            bar = tqdm(total=len(self.items), desc=op, file=sys.stderr)
        try:
            if self.executor == "dask":
                done = self._map_dask(op, groups, args, kwargs)
            else:
                done = self._map_local(engine, op, groups, args, kwargs, bar)
        finally:
            if bar is not None:
                bar.close()
        values = [None] * len(self.items)
        errors: dict = {}
        times = []
        for idx, (vals, errs, seconds) in zip(groups, done):
            for i, v in zip(idx, vals):
                values[i] = v
            errors.update(errs)
            times.append(seconds)
        wall = time.perf_counter() - t0
        self._stats = {
            "op": op,
            "executor": self.executor,
            "items": len(self.items),
            "groups": len(groups),
            "group_sizes": [len(g) for g in groups],
            "mode": "loop",
            "mode_reason": "each item is a single routed call (no batched launch yet)",
            "launches": len(self.items),
            "errors": len(errors),
            "group_seconds": times,
            "wall_seconds": wall,
            "items_per_second": len(self.items) / wall if wall > 0 else None,
        }
        return BatchResult(values, dict(sorted(errors.items())))

    def _map_local(self, engine, op, groups, args, kwargs, bar):
        if self.executor == "serial":
            done = []
            for idx in groups:
                done.append(_run_group(op, [self.items[i] for i in idx], idx, args, kwargs,
                                       self.fail_fast, engine))
                if bar is not None:
                    bar.update(len(idx))
            return done
        workers = self.max_workers or os.cpu_count() or 1
        # one task per item (grouping does not matter for a loop); reassembled per group
        with ThreadPoolExecutor(workers) as pool:
            futures = {}
            for idx in groups:
                for i in idx:
                    futures[i] = pool.submit(_run_group, op, [self.items[i]], [i], args,
                                             kwargs, self.fail_fast, engine)
            done = []
            for idx in groups:
                vals, errs, secs = [], {}, 0.0
                for i in idx:
                    v, e, s = futures[i].result()
                    vals += v
                    errs.update(e)
                    secs += s
                    if bar is not None:
                        bar.update(1)
                done.append((vals, errs, secs))
            return done

    def _map_dask(self, op, groups, args, kwargs):
        try:
            from distributed import Client, LocalCluster
        except ImportError as err:
            raise ImportError(
                'executor="dask" needs dask.distributed: pip install "catalytic[dask]"'
            ) from err
        own = None
        client = self.client
        if client is None:
            cluster = LocalCluster(n_workers=self.max_workers or 2, threads_per_worker=1,
                                   processes=True, host="127.0.0.1", dashboard_address=None)
            client = Client(cluster)
            own = (client, cluster)
        try:
            futures = [client.submit(_run_group, op, [self.items[i] for i in idx], idx, args,
                                     kwargs, self.fail_fast, pure=False) for idx in groups]
            return client.gather(futures)
        finally:
            if own is not None:
                own[0].close()
                own[1].close()

    def stats(self) -> dict:
        """The last :meth:`map`: items, groups (and their sizes), how they ran
        (``mode``), launches, errors, seconds per group, wall time and items per
        second, all measured."""
        return dict(self._stats)

    def execute_parallel(self, callables=None):
        """Call each callable (default: the items) with no arguments on this
        processor's executor; results in order, errors collected as in :meth:`map`."""
        return execute_parallel(self.items if callables is None else callables,
                                executor=self.executor, max_workers=self.max_workers,
                                fail_fast=self.fail_fast)


# -- the older API's conveniences -------------------------------------------------------
def batch_xor_transform(lattice, arrays, key=None, **options) -> BatchResult:
    """``lattice.xor_transform(a, key)`` for every array, in order."""
    return execute_parallel([lambda a=a: lattice.xor_transform(a, key) for a in arrays],
                            **options)


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
    order, failures collected in ``errors`` unless ``fail_fast``."""
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
        with ThreadPoolExecutor(max_workers or os.cpu_count() or 1) as pool:
            done = list(pool.map(lambda p: one(*p), enumerate(callables)))
    return BatchResult([v for v, _ in done], {i: e for i, (_, e) in enumerate(done) if e})
