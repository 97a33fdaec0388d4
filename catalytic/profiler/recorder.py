"""The recorder: :class:`Profiler`, its regions, the :class:`profile` decorator and
context manager, the process-wide profiler and the task profilers of Dask workers. What a
record holds and the files a run is written to are described in
:mod:`catalytic.profiler.runs`; :mod:`catalytic.profiler` is the face that re-exports
these names.

Opt-in, because it costs two ``getrusage`` system calls per call (a large part of the
recording cost of a small call): with ``enable(rss=True)`` (or ``CATALYTIC_PROFILE_RSS=1``)
every operation also records ``rss_peak_growth_bytes``; otherwise that field is absent.

On a GPU with the ``nvtx`` package installed, every operation and region is also an
NVTX range, so Nsight Systems shows them on its timeline (:mod:`catalytic.profiler.gpu`).

Threads and tasks: records from every thread go to one list (an atomic count of the
places taken keeps ``max_records`` across threads); a region is
the parent of the operations run inside it in its own thread, or its own asyncio task
(open regions are kept in a context variable); the batch processor passes the caller's
region to its worker threads and Dask tasks. Generators and coroutines: see
:class:`profile`.

Memory: at most :attr:`Profiler.max_records` records are kept, recorded here or merged
from workers (later ones are counted in ``dropped``); the exports stream them, holding a
reference per record beyond them. What a record costs in memory and time, enabled and
disabled, is measured by ``benchmarks/bench_profiler.py`` (``reports/profiler.md``).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import inspect
import itertools
import json
import math
import operator
import os
import platform
import sys
import threading
import time
from pathlib import Path
from threading import get_ident as _get_ident
from time import perf_counter as _perf_counter

from catalytic.kernels import transfer_counts
from catalytic.profiler import compile_events as _compiles
from catalytic.profiler import gpu as _gpu
from catalytic.profiler.compile_events import _compile_seconds_since, _listen
from catalytic.profiler.gpu import _gpu_begin, _gpu_end, _nvtx_pop, _nvtx_push
from catalytic.profiler.runs import (
    SCHEMA,
    SCHEMA_VERSION,
    _jsonable,
    _trace_stream,
    bottlenecks,
    format_summary,
    summarize,
)

try:  # the process's peak RSS: ru_maxrss is KiB on Linux, bytes on macOS
    import resource as _resource

    _RSS_UNIT = 1 if platform.system() == "Darwin" else 1024

    def _peak_rss() -> int:
        return _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss * _RSS_UNIT
except ImportError:  # Windows: not measurable this way
    _peak_rss = None


#: One record as kept in memory: a tuple, built once when the call or region ends, and
#: of the router's decision only the figures its reason is worded from (a decision holds
#: several dicts). Read out as the schema's dict by :meth:`Profiler._plain_record`;
#: ``extra`` holds the rare fields (``error``, ``fallback_from``, a GPU's measurements, a
#: merged record's others) or is None.
_Record = collections.namedtuple(
    "_Record", "kind name id parent thread start wall backend reason forced work "
    "predicted runner rss compile extra")
_tuple_new = tuple.__new__  # _Record from a tuple display, without namedtuple's own __new__
# The record of a routed CPU call the router sent by comparing two backends' predicted
# costs, which ran there and compiled nothing (most calls), is kept as a plain tuple
# instead, built with the least work while the call returns (Profiler.end_op):
# (name, backend, id, open, ident, start, wall, predicted, runner, forced, work), where
# ``open`` is the regions open in the caller's context (its parent is found among them
# when read) and ``ident`` the thread's ident. Its id and start are at a _Record's
# places; Profiler._resolved makes it a _Record.


def _region_record(name, head, wall, extra) -> _Record:
    """A region's record: ``head`` is (id, parent, thread, start) from Profiler._head_of."""
    rid, parent, thread, start = head
    return _tuple_new(_Record, ("region", name, rid, parent, thread, start, wall, None, None,
                                None, None, None, None, None, None, extra))


#: ``_Record.reason`` of a router's default reason, worded only when read out (wording
#: costs more than the rest of the record)
_WORD_LATER = object()
#: schema fields with a place in _Record (the others of a merged record go to ``extra``)
_SLOTTED = {"kind", "name", "id", "parent", "thread", "start_s", "wall_s", "backend",
            "reason", "forced", "work", "predicted_s", "rss_peak_growth_bytes",
            "compile_s"}
_BY_ID = operator.itemgetter(2)  # a _Record's id, and a plain tuple record's


def _once(text):
    """``text`` as the one string object of its value (None and non-strings as they are)."""
    return sys.intern(text) if type(text) is str else text

_BY_START = operator.itemgetter(5)  # a _Record's start, and a plain tuple record's


class Profiler:
    """Records of routed operations and named regions (:mod:`catalytic.profiler.runs`).

    Use the process-wide one, :func:`get_profiler`; ``Profiler()`` makes a private one
    (Dask workers use one per task).
    """

    #: records kept at most, recorded here or merged from workers; later ones are counted
    #: in ``dropped``. What a record costs in memory, and an export at this cap, is
    #: measured in ``reports/profiler.md`` (benchmarks/bench_profiler.py).
    max_records = 1_000_000

    def __init__(self):
        self.enabled = False
        self.rss = False
        self.dropped = 0
        self._lock = threading.Lock()
        self._records: list = []
        # places taken in _records since the last reset: next() on it is atomic, so
        # threads recording at once keep at most max_records without a lock (a call
        # ending while reset() runs may add one past it)
        self._taken = itertools.count()
        self._ids = itertools.count(1)
        self._threads: dict = {}
        self._decision_type = None  # the router's Decision class, to word reasons
        self.epoch = time.perf_counter()

    # -- switching -------------------------------------------------------------------
    def enable(self, rss: bool = False) -> None:
        """Start recording; ``rss=True`` also records each operation's
        ``rss_peak_growth_bytes`` (two system calls per call: module docstring). Numba's
        compile events are listened to only while some profiler is enabled."""
        if not isinstance(rss, bool):
            raise TypeError(f"rss must be True or False, got {rss!r}")
        self.rss = rss and _peak_rss is not None
        if not self.enabled:
            self.enabled = True
            _listen(+1)

    def disable(self) -> None:
        """Stop recording; what was recorded stays until :meth:`reset`."""
        if self.enabled:
            self.enabled = False
            _listen(-1)

    def reset(self) -> None:
        """Forget every record (regions open in some thread stay open there, and are
        recorded when they end)."""
        with self._lock:
            self._records = []
            self._taken = itertools.count()
            self.dropped = 0
            self.epoch = time.perf_counter()

    def records(self) -> list:
        """The records as the schema's dicts (:mod:`catalytic.profiler.runs`), in the
        order they started."""
        return self._plain()

    # -- the regions open where the caller runs ------------------------------------------
    def current_region(self):
        """The id of the innermost region of this profiler open in the caller's context
        (its thread, or its asyncio task), or None."""
        return self._innermost(_OPEN.get())

    def _innermost(self, frames):
        """The id of the innermost region of this profiler among ``frames``, or None."""
        for frame in reversed(frames):
            if frame.prof is self:
                return frame.rid
        return None

    def _thread(self, t=None):
        """The number of thread ``t`` (its ident; default the caller's) in this run."""
        if t is None:
            t = _get_ident()
        num = self._threads.get(t)
        if num is None:
            with self._lock:
                num = self._threads.setdefault(t, len(self._threads))
        return num

    def _add(self, rec) -> None:
        if next(self._taken) < self.max_records:
            self._records.append(rec)
        else:
            self._drop()

    def _drop(self) -> None:
        with self._lock:
            self.dropped += 1

    def _head_of(self, start) -> tuple:
        """(id, parent, thread, start relative to the epoch) of a record starting now."""
        return next(self._ids), self.current_region(), self._thread(), start - self.epoch

    # -- regions ----------------------------------------------------------------------
    def region(self, name: str) -> "_Region":
        """A context manager recording a named region (see :func:`profile`)."""
        return _Region(self, name)

    def adopt(self, parent):
        """A context manager making region id ``parent`` (from another thread's
        :meth:`current_region`) the enclosing region of the records made inside it."""
        return _Adopt(self, parent)

    # -- operations (called by the engine) ----------------------------------------------
    def begin_op(self, decision, device: str):
        """Start an operation record; returns a token for :meth:`end_op`.

        The token is ``(decision, start, compile sequence, id, more)``: ``more`` is None
        for a CPU call without ``rss`` or NVTX, the common case, which :meth:`end_op`
        records with the least work (this runs on every routed call while recording);
        else what the other measurements began with. On a CPU backend nothing is copied
        to a device, so the transfer counter is not read."""
        if device == "cpu" and not self.rss and _gpu._nvtx is False:
            return decision, _perf_counter(), _compiles._compile_seq, next(self._ids), None
        start = _perf_counter()
        gpu = moved = extra = None
        if device != "cpu":
            moved = transfer_counts()
            extra = {}
            gpu = _gpu_begin(extra)
        more = (moved, _peak_rss() if self.rss else None, gpu, extra,
                _nvtx_push(decision.op) if _gpu._nvtx is not False else None)
        return decision, start, _compiles._compile_seq, next(self._ids), more

    def end_op(self, tok, decision, error: BaseException | None = None) -> None:
        """Finish an operation record started by :meth:`begin_op`; ``decision`` is where
        the call ran in the end (a fallback's, when the chosen backend failed)."""
        chosen, start, seq, rid, more = tok
        wall = _perf_counter() - start
        preds = decision.predictions
        if (more is not None or chosen is not decision or error is not None
                or seq != _compiles._compile_seq or decision._reason is not None
                or len(preds) != 2):
            return self._end_op(tok, decision, error, wall)
        # The common case: a CPU call that ran where the router's cost comparison of two
        # backends sent it, compiling nothing. It is kept as a plain tuple (see _Record)
        # of what cannot be had later; the regions open (their parent) and the thread
        # are resolved when read (_resolved). This runs on every recorded routed call.
        try:
            predicted = preds[decision.backend]
        except KeyError:
            return self._end_op(tok, decision, error, wall)
        first, second = preds.values()
        if self._decision_type is None:
            self._decision_type = type(decision)
        rec = (decision.op, decision.backend, rid, _OPEN.get(), _get_ident(),
               start - self.epoch, wall, predicted, second if first is predicted else first,
               decision.forced, decision.work)
        if next(self._taken) < self.max_records:  # atomic: no lock on this path
            self._records.append(rec)
        else:
            self._drop()

    def _end_op(self, tok, decision, error, wall) -> None:
        """:meth:`end_op` with everything measured: a device's figures, the peak RSS,
        NVTX, compilation during the call, a fallback, an error."""
        chosen, start, seq, rid, more = tok
        moved, rss, gpu, extra, nvtx = (None,) * 5 if more is None else more
        if gpu is not None:
            _gpu_end(extra, gpu)
            wall = _perf_counter() - start
        if nvtx:
            _nvtx_pop(nvtx)
        if rss is not None:
            rss = max(0, _peak_rss() - rss)
        comp = _compile_seconds_since(seq) if seq != _compiles._compile_seq else 0.0
        comp = min(comp, wall) if comp else 0.0  # never above the call's own time
        backend = decision.backend
        if moved is not None or backend != chosen.backend or error is not None:
            extra = {} if extra is None else extra
            if moved is not None:
                after = transfer_counts()
                extra["h2d_bytes"] = after[0] - moved[0]
                extra["d2h_bytes"] = after[1] - moved[1]
            if backend != chosen.backend:
                extra["fallback_from"] = chosen.backend
            if error is not None:
                extra["error"] = type(error).__name__
        preds = decision.predictions
        predicted = preds.get(backend)
        runner = None
        reason = decision._reason
        if reason is None and predicted is not None:
            for other, t in preds.items():
                if other != backend and (runner is None or t < runner):
                    runner = t
            if self._decision_type is None:
                self._decision_type = type(decision)
            reason = _WORD_LATER
        elif reason is None:
            try:
                reason = decision.reason
            except Exception:  # a reason that cannot be worded must not fail the call
                reason = None
        rec = _tuple_new(_Record, (
            "op", decision.op, rid, self.current_region() if _OPEN.get() else None,
            self._thread(), start - self.epoch, wall, backend, reason,
            bool(decision.forced), decision.work, predicted, runner, rss, comp,
            extra or None))
        self._add(rec)

    # -- reading --------------------------------------------------------------------------
    def _refs(self) -> list:
        """The kept records in the order they started (a list of references: no copy of
        the records themselves)."""
        with self._lock:
            refs = list(self._records)
        refs.sort(key=_BY_ID)
        refs.sort(key=_BY_START)  # stable: ties in start time stay in id order
        return refs

    def _resolved(self, r):
        """Record ``r`` as a _Record (a plain tuple one resolved; others as they are)."""
        if type(r) is not tuple:
            return r
        name, backend, rid, frames, ident, start, wall, predicted, runner, forced, work = r
        return _tuple_new(_Record, (
            "op", name, rid, self._innermost(frames) if frames else None,
            self._thread(ident), start, wall, backend, _WORD_LATER, forced, work, predicted,
            runner, None, 0.0, None))

    def _reason(self, r):
        if r.reason is not _WORD_LATER:
            return r.reason
        preds = {r.backend: r.predicted}
        if r.runner is not None:
            preds[None] = r.runner  # the runner-up's figure: its name is not worded
        return self._decision_type(r.name, r.backend, None, preds, work=r.work).reason

    def _plain_record(self, r, words: bool = True) -> dict:
        """Record ``r`` as the schema's dict (JSON-ready); ``words=False`` leaves the
        reason out (summaries do not need it)."""
        r = self._resolved(r)
        d = {"kind": r.kind, "name": r.name, "id": r.id, "parent": r.parent,
             "thread": r.thread, "start_s": r.start, "wall_s": r.wall}
        if r.backend is not None:
            d["backend"] = r.backend
        if words and r.reason is not None:
            d["reason"] = self._reason(r)
        if r.forced is not None:
            d["forced"] = r.forced
        if r.work is not None and math.isfinite(r.work):
            d["work"] = r.work
        if r.predicted is not None and math.isfinite(r.predicted):
            d["predicted_s"] = r.predicted
        if r.rss is not None:
            d["rss_peak_growth_bytes"] = r.rss
        if r.compile is not None:
            d["compile_s"] = r.compile
        if r.extra:
            d.update(r.extra)
        return d

    def _plain(self, words: bool = True) -> list:
        """Every record as the schema's dict, in the order they started."""
        return [self._plain_record(r, words) for r in self._refs()]

    def _head(self) -> dict:
        """The JSON document of :meth:`as_dict` without its records."""
        import numba

        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "numba": numba.__version__, "cpu_count": os.cpu_count()},
            "dropped": self.dropped,
        }

    def as_dict(self) -> dict:
        """The run as the JSON document :meth:`export_json` writes."""
        return dict(self._head(), records=self._plain())

    def summary(self) -> dict:
        """Per operation (and per region): count, total, mean, min, max, std of the wall
        time in seconds, overall and per backend (see :func:`summarize`)."""
        return summarize(self._plain_record(r, False) for r in self._refs())

    def bottlenecks(self, n: int = 5) -> list:
        """The ``n`` operations with the largest total time: ``(name, total_s, share)``
        with ``share`` the fraction of all operations' time."""
        return bottlenecks((self._plain_record(r, False) for r in self._refs()), n)

    def print_summary(self, file=None) -> None:
        """Print :meth:`summary` as a table, slowest total first."""
        print(format_summary(self.summary()), file=file)

    # -- files ------------------------------------------------------------------------------
    def export_json(self, path) -> Path:
        """Write the run as JSON (schema in :mod:`catalytic.profiler.runs`), one record a line,
        streamed: beyond the records kept, the export holds one record at a time. The
        file appears complete or not at all. Returns the path."""
        with _replacing(path) as fh:
            fh.write(json.dumps(self._head(), default=_jsonable)[:-1] + ', "records": [')
            sep = "\n"
            for r in self._refs():
                fh.write(sep + json.dumps(self._plain_record(r), default=_jsonable))
                sep = ",\n"
            fh.write("\n]}\n")
        return Path(path)

    def export_trace(self, path) -> Path:
        """Write Chrome trace-event JSON (``chrome://tracing``, Perfetto), streamed as
        :meth:`export_json` is."""
        with _replacing(path) as fh:
            fh.write('{"displayTimeUnit": "ms", "traceEvents": [')
            sep = "\n"
            for event in _trace_stream(self._plain_record(r) for r in self._refs()):
                fh.write(sep + json.dumps(event, default=_jsonable))
                sep = ",\n"
            fh.write("\n]}\n")
        return Path(path)

    def export_html(self, path, title: str = "catalytic profile") -> Path:
        """Write one self-contained HTML page (no network): timeline, per-operation
        bars, summary table. The summary counts every record; the timeline and the
        table of records hold the first :data:`catalytic.profiler.html.MAX_DRAWN`."""
        from catalytic.profiler.html import MAX_DRAWN, page

        refs = self._refs()
        drawn = [self._plain_record(r) for r in refs[:MAX_DRAWN]]
        summary = summarize(self._plain_record(r, False) for r in refs)
        n_ops = sum(1 for r in refs if type(r) is tuple or r.kind == "op")
        return _write(path, page(self._head(), drawn, summary, len(refs), n_ops, title))

    # -- Dask workers ----------------------------------------------------------------------
    def merge(self, records, *, worker: str, parent=None, dropped: int = 0) -> None:
        """Add records collected elsewhere (plain records, as a Dask worker's task
        returns them): their ids are made unique here, their thread becomes ``worker``,
        and their top-level records hang under region ``parent``. Start times stay
        relative to the worker's own clock. :attr:`max_records` holds here too: records
        past it are counted in ``dropped``, as are the ``dropped`` the worker counted."""
        with self._lock:
            mapping = {r["id"]: next(self._ids) for r in records}
            self.dropped += dropped
            for r in records:
                if next(self._taken) >= self.max_records:
                    self.dropped += 1
                    continue
                up = r.get("parent")
                extra = {key: r[key] for key in r.keys() - _SLOTTED} or None
                # unpickled records bring a copy of each string per record: kept once
                rec = _tuple_new(_Record, (
                    _once(r["kind"]), _once(r["name"]), mapping[r["id"]],
                    parent if up is None else mapping.get(up, parent), worker,
                    r["start_s"], r["wall_s"], _once(r.get("backend")),
                    _once(r.get("reason")), r.get("forced"), r.get("work"),
                    r.get("predicted_s"), None, r.get("rss_peak_growth_bytes"),
                    r.get("compile_s"), extra))
                self._records.append(rec)


#: the regions open in this context (a thread, an asyncio task), innermost last: a tuple
#: of _Frame shared by every Profiler. A context variable, not a thread-local: asyncio
#: tasks interleave in one thread, and each task works on its own copy.
_OPEN: contextvars.ContextVar = contextvars.ContextVar("catalytic_profile_open", default=())


class _Frame:
    """One open region: ``owner`` (the object whose exit closes it), ``prof`` (None when
    profiling was off at entry), ``rid`` (the id records made inside get as parent), and
    for a region being recorded its name, the head of its record
    (:meth:`Profiler._head_of`), its start time and NVTX range."""

    __slots__ = ("owner", "prof", "rid", "name", "head", "start", "nvtx")

    def __init__(self, owner, prof, rid, name=None, head=None, start=None, nvtx=None):
        self.owner, self.prof, self.rid = owner, prof, rid
        self.name, self.head, self.start, self.nvtx = name, head, start, nvtx


def _push(frame) -> None:
    _OPEN.set(_OPEN.get() + (frame,))


def _pop(owner):
    """Take ``owner``'s innermost frame off this context's stack; None if it has none
    here (entered in another context)."""
    st = _OPEN.get()
    for i in range(len(st) - 1, -1, -1):
        if st[i].owner is owner:
            _OPEN.set(st[:i] + st[i + 1:])
            return st[i]
    return None


def _enter(owner, prof, name) -> None:
    """Open a region named ``name`` for ``owner``; recorded when ``prof`` is enabled.
    Each entry has its own frame, so one owner entered again (recursion) or in several
    threads or tasks at once opens one region per entry."""
    if prof.enabled:
        start = time.perf_counter()
        head = prof._head_of(start)
        _push(_Frame(owner, prof, head[0], name, head, start, _nvtx_push(name)))
    else:  # a placeholder, so that the matching exit closes this entry and no other
        _push(_Frame(owner, None, None))


def _exit(owner, et) -> None:
    frame = _pop(owner)
    if frame is None or frame.head is None:
        return
    wall = time.perf_counter() - frame.start
    _nvtx_pop(frame.nvtx)
    frame.prof._add(_region_record(frame.name, frame.head, wall,
                                   None if et is None else {"error": et.__name__}))


class _Region:
    """``Profiler.region(name)``: a reusable context manager (see :func:`_enter`)."""

    __slots__ = ("prof", "name")

    def __init__(self, prof, name):
        self.prof = prof
        self.name = name

    def __enter__(self):
        _enter(self, self.prof, self.name)
        return self

    def __exit__(self, et, ev, tb):
        _exit(self, et)
        return False


class _Adopt:
    __slots__ = ("prof", "parent")

    def __init__(self, prof, parent):
        self.prof, self.parent = prof, parent

    def __enter__(self):
        if self.parent is not None:
            _push(_Frame(self, self.prof, self.parent))
        return self

    def __exit__(self, *exc):
        if self.parent is not None:
            _pop(self)
        return False


class _Span:
    """The region of one generator (or async generator) call: one record from its first
    resumption to its last (exhausted, closed or raised), on the stack only while the
    generator's own code runs, so that what its consumer does between items is not
    counted inside it."""

    __slots__ = ("prof", "name", "head", "start", "error")

    def __init__(self, prof, name):
        self.prof, self.name, self.error = prof, name, None
        self.start = time.perf_counter()
        self.head = prof._head_of(self.start)

    def __enter__(self):  # one resumption
        _push(_Frame(self, self.prof, self.head[0], nvtx=_nvtx_push(self.name)))
        return self

    def __exit__(self, *exc):
        frame = _pop(self)
        if frame is not None:
            _nvtx_pop(frame.nvtx)
        return False

    def finish(self) -> None:
        wall = time.perf_counter() - self.start
        self.prof._add(_region_record(
            self.name, self.head, wall,
            None if self.error is None else {"error": type(self.error).__name__}))


def _decorate(func, name):
    """``func`` wrapped in a region named ``name`` (default: its qualified name); a
    function, so it binds as a method. Generators, async generators and coroutines get a
    wrapper of their own kind whose region spans their execution (module docstring)."""
    if isinstance(func, (staticmethod, classmethod)):
        return type(func)(_decorate(func.__func__, name))
    if not callable(func):
        raise TypeError(f"@profile({name!r}) decorates a function, got {func!r}")
    name = name or getattr(func, "__qualname__", None) or repr(func)
    if inspect.isasyncgenfunction(func):
        return _async_generator_wrapper(func, name)
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def coroutine(*args, **kwargs):
            prof = _PROFILER
            if not prof.enabled:
                return await func(*args, **kwargs)
            # a task works on its own copy of the context: its awaits leave other tasks'
            # records outside this region
            with _Region(prof, name):
                return await func(*args, **kwargs)

        return coroutine
    if inspect.isgeneratorfunction(func):
        return _generator_wrapper(func, name)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        prof = _PROFILER
        if not prof.enabled:
            return func(*args, **kwargs)
        with _Region(prof, name):
            return func(*args, **kwargs)

    return wrapper


def _generator_wrapper(func, name):
    @functools.wraps(func)
    def generator(*args, **kwargs):
        gen = func(*args, **kwargs)
        prof = _PROFILER
        if not prof.enabled:
            return (yield from gen)
        span = _Span(prof, name)
        try:
            sent = thrown = None
            while True:
                with span:
                    try:
                        item = gen.send(sent) if thrown is None else gen.throw(thrown)
                    except StopIteration as stop:
                        return stop.value
                sent = thrown = None
                try:
                    sent = yield item
                except GeneratorExit:
                    with span:
                        gen.close()
                    raise
                except BaseException as exc:  # thrown in by the consumer: passed on
                    thrown = exc
        except GeneratorExit:
            raise
        except BaseException as exc:
            span.error = exc
            raise
        finally:
            span.finish()

    return generator


def _async_generator_wrapper(func, name):
    @functools.wraps(func)
    async def generator(*args, **kwargs):
        agen = func(*args, **kwargs)
        prof = _PROFILER
        span = _Span(prof, name) if prof.enabled else None
        inside = span if span is not None else contextlib.nullcontext()
        try:
            sent = thrown = None
            while True:
                with inside:
                    try:
                        item = await (agen.asend(sent) if thrown is None
                                      else agen.athrow(thrown))
                    except StopAsyncIteration:
                        return
                sent = thrown = None
                try:
                    sent = yield item
                except GeneratorExit:
                    with inside:
                        await agen.aclose()
                    raise
                except BaseException as exc:
                    thrown = exc
        except GeneratorExit:
            raise
        except BaseException as exc:
            if span is not None:
                span.error = exc
            raise
        finally:
            if span is not None:
                span.finish()

    return generator


class profile:  # noqa: N801 - used as a decorator and a context manager, like contextlib's
    """``@cat.profile``, ``@cat.profile("name")`` or ``with cat.profile("name"):``.

    A region of the process-wide profiler: the operations run inside it are recorded
    under it (when profiling is enabled; otherwise the decorated function is called
    directly). As a bare decorator the region is named after the function's qualified
    name. A decorated function stays a function: as a method it gets ``self`` (also
    over ``staticmethod`` / ``classmethod``).

    A generator or async generator function gets one region per call, from its first
    item's request to its end (exhausted, closed or raised); what runs inside its own
    code is recorded under the region, what its consumer does between items is not. A
    coroutine function (``async def``) gets one region per call from its start to its
    return, holding what it runs and awaits; other asyncio tasks that run meanwhile
    record outside it.

    One ``profile("name")`` object may be entered again while open (recursion) and in
    several threads or tasks at once: each entry records its own region.

    Examples
    --------
    >>> import catalytic as cat
    >>> @cat.profile
    ... def step():
    ...     return 1
    >>> with cat.profile("outer"):
    ...     step()
    1
    >>> class Study:
    ...     @cat.profile
    ...     def run(self, n):
    ...         yield from range(n)
    >>> list(Study().run(3))
    [0, 1, 2]
    """

    def __new__(cls, name=None):
        if callable(name) or isinstance(name, (staticmethod, classmethod)):
            return _decorate(name, None)  # @profile without arguments
        return super().__new__(cls)

    def __init__(self, name=None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"a region name must be a string, got {name!r}")
        self._name = name

    def __call__(self, func):
        """``@profile("name")`` (or ``@profile()``) applied to ``func``."""
        return _decorate(func, self._name)

    def __enter__(self):
        if self._name is None:
            raise TypeError("with cat.profile(...) needs a region name")
        _enter(self, _PROFILER, self._name)
        return self

    def __exit__(self, et, ev, tb):
        _exit(self, et)
        return False


# -- the process-wide profiler ----------------------------------------------------------
_PROFILER = Profiler()


def get_profiler() -> Profiler:
    """The process-wide profiler."""
    return _PROFILER


_task = threading.local()
#: task profilers open in any thread (so that active() costs one test when none is)
_tasks_open = 0


def active():
    """The profiler that records this thread's calls now, or None: a task's own profiler
    (Dask workers, see :func:`task_profiler`), else the process-wide one when enabled.
    The engine asks this once per call; disabled, it costs two attribute tests."""
    if _tasks_open:
        p = getattr(_task, "profiler", None)
        if p is not None:
            return p
    return _PROFILER if _PROFILER.enabled else None


class task_profiler:  # noqa: N801
    """Record this thread's calls in a fresh :class:`Profiler` for the ``with`` block
    (a Dask task on a worker); ``.records`` holds them afterwards (plain records, for
    :meth:`Profiler.merge`), ``.dropped`` those not kept past its ``max_records``."""

    def __enter__(self):
        global _tasks_open
        self.profiler = Profiler()
        self.profiler.enable(rss=_PROFILER.rss)
        self._prev = getattr(_task, "profiler", None)
        _task.profiler = self.profiler
        with _tasks_lock:
            _tasks_open += 1
        return self

    def __exit__(self, *exc):
        global _tasks_open
        _task.profiler = self._prev
        self.profiler.disable()
        with _tasks_lock:
            _tasks_open -= 1
        self.records = self.profiler._plain()
        self.dropped = self.profiler.dropped
        return False


_tasks_lock = threading.Lock()


# -- helpers --------------------------------------------------------------------------------
def _write(path, text) -> Path:
    with _replacing(path) as fh:
        fh.write(text)
    return Path(path)


@contextlib.contextmanager
def _replacing(path):
    """A text file written beside ``path`` that replaces it when the block ends without
    an error (an interrupted export leaves no half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            yield fh
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
