"""Profile runs read back: what a record holds, the file's schema and its check
(:func:`load`, :func:`check_document`), summaries, the comparison of two runs and Chrome
trace events. :mod:`catalytic.profiler.recorder` records the runs and
:mod:`catalytic.profiler` re-exports these names; nothing here imports the recorder (a
:class:`~catalytic.profiler.Profiler` passed in is read through its records).

What a record holds
-------------------
Every record: ``kind`` (``"op"`` or ``"region"``), ``name``, ``id``, ``parent`` (the
``id`` of the enclosing region, or None), ``thread`` (a small integer per thread, or
``"worker-N:..."`` for records collected from Dask workers), ``start_s`` (seconds since
the profiler's epoch, ``time.perf_counter``) and ``wall_s`` (measured), and ``error``
(the exception type's name when the call raised, else absent).

An operation record adds what the engine knows and measured: ``backend`` (the router's
choice), ``reason`` (why, in words), ``forced``, ``predicted_s`` (the cost model's
prediction for the chosen backend; absent when it made none, e.g. a forced backend with
no cost parameters), ``work``; on the cuda backend on a real GPU also ``device_s`` (CUDA
events around the call on the default stream), ``h2d_bytes`` and ``d2h_bytes`` (bytes
this thread copied each way during the call, from the transfer counter), and
``memory_before`` / ``memory_after`` (device-memory monitor snapshots). On every backend
``compile_s``: the seconds Numba spent compiling on the call's thread during the call,
or loading compiled code from its disk cache (its ``numba:compile`` and
``numba:compiler_lock`` events, outermost only, so a nested compile counts once; 0.0 when
nothing was compiled or loaded). The run time of a call is ``wall_s - compile_s``: summaries,
:meth:`Profiler.bottlenecks` and :func:`compare` use it, and show compilation apart
(``compile_total_s``), so a cold cache is not read as a slow or regressed operation. A
record without ``compile_s`` (written before it existed) compiled nothing that was seen.

``rss_peak_growth_bytes`` (an operation recorded with ``enable(rss=True)``; else
absent): how far the call raised the process's peak resident set (``getrusage``
high-water mark; 0 when the call stayed below an earlier peak, which is all that can be
measured without tracing every allocation). A figure that cannot be measured on this
machine is absent, never estimated: no ``device_s`` on a CPU backend or under the CUDA
simulator.

Files
-----
:meth:`Profiler.export_json` writes the records as JSON (``SCHEMA``, version
``SCHEMA_VERSION``)::

    {"schema": "catalytic-profile", "version": 1, "created": ISO 8601 time,
     "machine": {"platform", "python", "numba", "cpu_count"},
     "dropped": records not kept past Profiler.max_records (0 normally),
     "records": [record, ...]}

:func:`load` reads such a file back; :meth:`Profiler.export_trace` writes Chrome
trace-event JSON (``chrome://tracing``, Perfetto); :meth:`Profiler.export_html` one
self-contained HTML page (no network) with a timeline and per-operation bars.
:func:`compare` compares two runs per operation and flags regressions;
``catalytic report --compare before.json after.json`` exits 1 on one, and when the runs
share no operation (nothing was compared).
"""

from __future__ import annotations

import json
import math
import os

SCHEMA = "catalytic-profile"
SCHEMA_VERSION = 1
#: a per-operation mean this much slower (ratio - 1) counts as a regression in compare()
DEFAULT_THRESHOLD = 0.25


def load(path) -> dict:
    """A run written by :meth:`Profiler.export_json`, checked against the schema.

    Raises
    ------
    ValueError
        Not a catalytic profile, a version this catalytic cannot read, or a record that
        departs from the schema (see :func:`check_document`).
    """
    with open(path, encoding="utf-8") as fh:
        try:
            doc = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
            raise ValueError(f"{path}: not JSON ({type(err).__name__}: "
                             f"{_short(str(err), 120)})") from None
    check_document(doc, str(path))
    return doc


def _short(value, n=60) -> str:
    """``repr(value)`` cut to ``n`` characters: messages name a bad value on one line."""
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


#: what each field of a record must hold: (test, words for the message); the first
#: seven are in every record, ``backend`` in every operation record
_FIELDS = {
    "kind": (lambda v: v in ("op", "region"), '"op" or "region"'),
    "name": (lambda v: isinstance(v, str), "a string"),
    "id": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "parent": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
               "an integer or null"),
    "thread": (lambda v: isinstance(v, str) or (isinstance(v, int)
                                                 and not isinstance(v, bool)),
               "an integer or a string"),
    "start_s": (_is_number, "a finite number"),
    "wall_s": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0"),
    "backend": (lambda v: isinstance(v, str), "a string"),
    "reason": (lambda v: isinstance(v, str), "a string"),
    "forced": (lambda v: isinstance(v, bool), "true or false"),
    "work": (_is_number, "a finite number"),
    "predicted_s": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0"),
    "device_s": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0"),
    "h2d_bytes": (_is_count, "an integer >= 0"),
    "d2h_bytes": (_is_count, "an integer >= 0"),
    "rss_peak_growth_bytes": (_is_count, "an integer >= 0"),
    "compile_s": (lambda v: _is_number(v) and v >= 0, "a finite number >= 0"),
    "error": (lambda v: isinstance(v, str), "a string"),
    "fallback_from": (lambda v: isinstance(v, str), "a string"),
    "memory_before": (lambda v: isinstance(v, dict), "an object"),
    "memory_after": (lambda v: isinstance(v, dict), "an object"),
}
_REQUIRED = ("kind", "name", "id", "parent", "thread", "start_s", "wall_s")


def check_document(doc, where="profile") -> None:
    """Check a profile document against the schema (module docstring), fully: every
    field of every record, unique ids, parents that are regions and no cycle of parents.

    Raises
    ------
    ValueError
        One line naming the first departure: the record (its position in ``records``)
        and the field, with the value found.
    """
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{where}: not a catalytic profile (no \"schema\": \"{SCHEMA}\")")
    if doc.get("version") != SCHEMA_VERSION:
        raise ValueError(f"{where}: profile version {_short(doc.get('version'))}; this "
                         f"catalytic reads version {SCHEMA_VERSION}")
    if "created" in doc and not isinstance(doc["created"], str):
        raise ValueError(f"{where}: \"created\" must be a string, got {_short(doc['created'])}")
    machine = doc.get("machine", {})
    if not isinstance(machine, dict) or not all(
            v is None or isinstance(v, (str, int, float)) for v in machine.values()):
        raise ValueError(f"{where}: \"machine\" must be an object of plain values, got "
                         f"{_short(machine)}")
    if "dropped" in doc and not _is_count(doc["dropped"]):
        raise ValueError(f"{where}: \"dropped\" must be an integer >= 0, got "
                         f"{_short(doc['dropped'])}")
    recs = doc.get("records")
    if not isinstance(recs, list):
        raise ValueError(f"{where}: \"records\" must be a list")
    position = {}  # id -> index of its record
    for i, r in enumerate(recs):
        if not isinstance(r, dict):
            raise ValueError(f"{where}: record {i} is {type(r).__name__} "
                             f"{_short(r)}, not an object")
        for key in _REQUIRED + (("backend",) if r.get("kind") == "op" else ()):
            if key not in r:
                raise ValueError(f"{where}: record {i}: field {key!r} is missing")
        for key, value in r.items():
            rule = _FIELDS.get(key)
            if rule is not None and not rule[0](value):
                raise ValueError(f"{where}: record {i}: field {key!r} must be {rule[1]}, "
                                 f"got {_short(value)}")
        if "compile_s" in r and r["compile_s"] > r["wall_s"]:
            raise ValueError(f"{where}: record {i}: field 'compile_s' {_short(r['compile_s'])}"
                             f" is more than its 'wall_s' {_short(r['wall_s'])}")
        if r["id"] in position:
            raise ValueError(f"{where}: record {i}: field 'id' {r['id']} is also record "
                             f"{position[r['id']]}'s")
        position[r["id"]] = i
    acyclic: set = set()  # ids whose chain of parents is known to end
    for i, r in enumerate(recs):
        parent = r["parent"]
        if parent is None or parent not in position:
            continue  # top level, or a region not kept (past max_records)
        if recs[position[parent]]["kind"] != "region":
            raise ValueError(f"{where}: record {i}: field 'parent' {parent} is an operation "
                             "record, not a region")
        if parent == r["id"]:
            raise ValueError(f"{where}: record {i}: field 'parent' {parent} is the "
                             "record's own id")
        chain, rid = [r["id"]], parent
        while rid is not None and rid in position and rid not in acyclic:
            if rid in chain:
                loop = " -> ".join(str(x) for x in chain[chain.index(rid):] + [rid])
                raise ValueError(f"{where}: record {i}: field 'parent' makes a cycle of "
                                 f"regions ({loop})")
            chain.append(rid)
            rid = recs[position[rid]]["parent"]
        acyclic.update(chain)


def _records_of(run) -> list:
    if isinstance(run, (str, os.PathLike)):
        return load(run)["records"]
    if isinstance(run, dict):
        check_document(run)
        return run["records"]
    return run._plain(words=False)  # a Profiler


class _Stats:
    """Count, total, min, max and spread of a stream of times, in constant memory
    (Welford's update for the spread)."""

    __slots__ = ("count", "total", "mean", "m2", "lo", "hi")

    def __init__(self):
        self.count, self.total, self.mean, self.m2 = 0, 0.0, 0.0, 0.0
        self.lo = self.hi = None

    def add(self, x) -> None:
        self.count += 1
        self.total += x
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)
        self.lo = x if self.lo is None or x < self.lo else self.lo
        self.hi = x if self.hi is None or x > self.hi else self.hi

    def as_dict(self) -> dict:
        n = self.count
        std = math.sqrt(max(self.m2, 0.0) / (n - 1)) if n > 1 else 0.0
        return {"count": n, "total_s": self.total, "mean_s": self.total / n,
                "min_s": self.lo, "max_s": self.hi, "std_s": std}


def summarize(records) -> dict:
    """:meth:`Profiler.summary` of plain records (any iterable, read once, in memory
    that grows with the number of names, not of records): per operation (regions as
    ``"[region] name"``) count, total, mean, min, max and std of the run time, with
    ``backends`` (calls per backend) and ``by_backend`` (the same figures per backend),
    and ``device_total_s`` where device time was measured.

    An operation's run time is its ``wall_s`` less its ``compile_s`` (Numba compiling
    on the call's thread; a record without it compiled nothing that was seen); the
    compilation is summed apart in ``compile_total_s``, with ``compile_calls`` the calls
    that compiled, on every operation entry. A region's time is its wall time (what
    was compiled inside it included)."""
    groups: dict = {}
    for r in records:
        op = r["kind"] == "op"
        key = r["name"] if op else f"[region] {r['name']}"
        g = groups.get(key)
        if g is None:
            g = groups[key] = [_Stats(), {}, None, 0.0, 0, op]
        comp = r.get("compile_s", 0.0) if op else 0.0
        run = max(r["wall_s"] - comp, 0.0)
        g[0].add(run)
        if comp > 0:
            g[3] += comp
            g[4] += 1
        if "backend" in r:
            per = g[1].get(r["backend"])
            if per is None:
                per = g[1][r["backend"]] = _Stats()
            per.add(run)
        if "device_s" in r:
            g[2] = (g[2] or 0.0) + r["device_s"]
    out = {}
    for key, (total, per, device, comp, n_comp, op) in groups.items():
        entry = total.as_dict()
        if op:
            entry["compile_total_s"] = comp
            entry["compile_calls"] = n_comp
        if per:
            entry["backends"] = {b: st.count for b, st in per.items()}
            entry["by_backend"] = {b: st.as_dict() for b, st in per.items()}
        if device is not None:
            entry["device_total_s"] = device
        out[key] = entry
    return out


def bottlenecks(records, n=5) -> list:
    """:meth:`Profiler.bottlenecks` of plain records (run time: compilation left out)."""
    s = {k: v for k, v in summarize(records).items() if not k.startswith("[region]")}
    total = sum(v["total_s"] for v in s.values()) or 1.0
    top = sorted(s.items(), key=lambda kv: -kv[1]["total_s"])[:n]
    return [(k, v["total_s"], v["total_s"] / total) for k, v in top]


def format_summary(summary) -> str:
    rows = sorted(summary.items(), key=lambda kv: -kv[1]["total_s"])
    lines = [f"{'operation':<34}{'count':>7}{'total':>11}{'mean':>11}{'min':>11}"
             f"{'max':>11}{'std':>11}{'compile':>11}  backends"]
    for k, v in rows:
        be = ", ".join(f"{b} x{c}" for b, c in v.get("backends", {}).items())
        comp = _fmt(v["compile_total_s"]) if "compile_total_s" in v else "-"
        lines.append(f"{k:<34}{v['count']:>7}{_fmt(v['total_s']):>11}{_fmt(v['mean_s']):>11}"
                     f"{_fmt(v['min_s']):>11}{_fmt(v['max_s']):>11}{_fmt(v['std_s']):>11}"
                     f"{comp:>11}  {be}")
    compiled = sum(v.get("compile_total_s", 0.0) for v in summary.values())
    lines.append(f"Numba compilation: {_fmt(compiled)} in "
                 f"{sum(v.get('compile_calls', 0) for v in summary.values())} call(s), not "
                 "counted in the operations' times (regions' times include it)")
    return "\n".join(lines)


class Comparison:
    """Per-operation comparison of two runs (:func:`compare`): ``rows`` (dicts with
    ``op``, ``count_a``, ``count_b``, ``mean_a_s``, ``mean_b_s``, ``ratio``,
    ``regression``), ``only_a`` and ``only_b`` (operations in one run only),
    ``regressions`` (the flagged rows) and ``nothing_compared`` (True when the runs share
    no operation: then no regression can be seen, which is not the same as none)."""

    def __init__(self, rows, only_a, only_b, threshold):
        self.rows = rows
        self.only_a = only_a
        self.only_b = only_b
        self.threshold = threshold

    @property
    def regressions(self) -> list:
        return [r for r in self.rows if r["regression"]]

    @property
    def nothing_compared(self) -> bool:
        return not self.rows

    def __str__(self) -> str:
        lines = [f"{'operation':<34}{'n before':>9}{'n after':>9}{'mean before':>13}"
                 f"{'mean after':>13}{'after/before':>14}"]
        for r in self.rows:
            flag = "  REGRESSION" if r["regression"] else ""
            lines.append(f"{r['op']:<34}{r['count_a']:>9}{r['count_b']:>9}"
                         f"{_fmt(r['mean_a_s']):>13}{_fmt(r['mean_b_s']):>13}"
                         f"{r['ratio']:>13.2f}x{flag}")
        for name in self.only_a:
            lines.append(f"{name:<34} only in the first run")
        for name in self.only_b:
            lines.append(f"{name:<34} only in the second run")
        if self.nothing_compared:
            lines.append(f"nothing was compared: the runs share no operation (the first "
                         f"has {len(self.only_a)}, the second {len(self.only_b)})")
            return "\n".join(lines)
        n = len(self.regressions)
        lines.append(f"{n} regression(s) beyond {self.threshold:.0%} (and beyond the runs' "
                     "own spread)" if n else f"no regression beyond {self.threshold:.0%}")
        return "\n".join(lines)


def compare(a, b, *, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Compare two runs (profilers, loaded documents or paths) per operation.

    An operation regressed when its mean run time (wall time less Numba compilation:
    :func:`summarize`) in ``b`` is more than ``threshold``
    (0.25: 25%) above ``a``'s, *and* the difference is larger than three standard
    errors of the difference (from each run's spread; with a single sample on either
    side only the threshold applies). Noise within a run's spread is not flagged.

    Examples
    --------
    >>> def run(times):
    ...     return {"schema": "catalytic-profile", "version": 1, "records": [
    ...         {"kind": "op", "name": "percolates", "id": i, "parent": None, "thread": 0,
    ...          "start_s": 0.0, "wall_s": t, "backend": "numba-cpu"}
    ...         for i, t in enumerate(times)]}
    >>> c = compare(run([1.0, 1.1, 0.9]), run([2.0, 2.1, 1.9]))
    >>> [r["regression"] for r in c.rows], round(c.rows[0]["ratio"], 2)
    ([True], 2.0)
    """
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0, got {threshold!r}")
    sa = summarize([r for r in _records_of(a) if r["kind"] == "op"])
    sb = summarize([r for r in _records_of(b) if r["kind"] == "op"])
    rows = []
    for op in sorted(set(sa) & set(sb)):
        x, y = sa[op], sb[op]
        ratio = y["mean_s"] / x["mean_s"] if x["mean_s"] > 0 else math.inf
        se = math.sqrt(x["std_s"] ** 2 / x["count"] + y["std_s"] ** 2 / y["count"])
        noisy = x["count"] > 1 and y["count"] > 1 and (y["mean_s"] - x["mean_s"]) <= 3 * se
        rows.append({"op": op, "count_a": x["count"], "count_b": y["count"],
                     "mean_a_s": x["mean_s"], "mean_b_s": y["mean_s"], "ratio": ratio,
                     "regression": ratio > 1 + threshold and not noisy})
    return Comparison(rows, sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa)), threshold)


def trace_events(records) -> dict:
    """Chrome trace-event JSON (complete "X" events, microseconds) of plain records."""
    return {"traceEvents": list(_trace_stream(records)), "displayTimeUnit": "ms"}


def _trace_stream(records):
    """The trace events of plain records, one at a time, then one naming each thread."""
    pid = os.getpid()
    threads: dict = {}
    for r in records:
        tid = threads.setdefault(str(r["thread"]), len(threads))
        args = {k: v for k, v in r.items()
                if k not in ("kind", "name", "start_s", "wall_s", "thread")}
        yield {"name": r["name"], "cat": r["kind"], "ph": "X", "pid": pid, "tid": tid,
               "ts": r["start_s"] * 1e6, "dur": r["wall_s"] * 1e6, "args": args}
    for name, tid in threads.items():
        yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
               "args": {"name": f"thread {name}"}}


# -- helpers --------------------------------------------------------------------------------
def _fmt(t: float) -> str:
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3f} ms"
    return f"{t * 1e6:.1f} us"


def _jsonable(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)
