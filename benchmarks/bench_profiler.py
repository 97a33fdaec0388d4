"""What the profiler costs: per routed call, enabled and disabled; memory per record and
at the peak of each export.

    python benchmarks/bench_profiler.py [--output reports/profiler.md] [--calls 5000]
                                        [--records 100000]

Measured in this run on this machine: small routed calls (their time is mostly the
engine's own per-call work, so the profiler's share is largest there) timed in
``--rounds`` pairs of short rounds of ``--calls`` calls, one round with the profiler
disabled and one enabled, in alternating order. The overhead per call is the median of
the pairs' differences: a pair's rounds are milliseconds apart, so other work on the
machine slows both about alike and cancels in the difference, which it does not in a
difference of long rounds' means. Records are kept over all rounds (reset only before
each routed call's pairs), as in a study, so what holding them costs is in the figure.
The disabled cost is what the engine does per call for the profiler when it is off, the
``profiler.active()`` test, timed on its own, against the spread of the disabled rounds.
Two lower bounds are measured the same way on the first call: the engine's calls of the
profiler doing nothing, and ``end_op`` keeping one tuple (what any in-memory record of a
call at least costs), with ``Profiler.begin_op`` and ``end_op`` replaced for those rounds.

Memory is measured with ``tracemalloc`` on ``--records`` records of real routed calls:
what the kept records hold (traced memory before and after ``reset()``, per record),
and the peak of traced memory above that while ``export_json``, ``export_trace`` and
``export_html`` write them; then the same number of plain records merged into a
profiler whose ``max_records`` is half of it (what a client holds from Dask workers).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit
import tracemalloc
from pathlib import Path

import numpy as np

import catalytic as cat
from catalytic import profiler
from catalytic.profiler import Profiler, html, recorder, runs

LIMIT_US = 5.0
#: the line of the report below which it is written by hand (kept when the run rewrites
#: the tables above it)
KEPT = "<!-- below: written by hand; bench_profiler.py keeps it when it rewrites the above -->"


def _load() -> str:
    """The 1-minute load average (other work on the machine inflates the times)."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except (AttributeError, OSError):
        return "unknown"


def per_call(func, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        func()
    return (time.perf_counter() - t0) / calls


def measure(name, func, calls, rounds, **enable):
    """Medians of the disabled and enabled rounds' per-call times, the median and
    quartiles of the pairs' differences, the disabled rounds' spread."""
    prof = cat.get_profiler()
    func()  # warm-up: JIT, caches
    prof.disable()
    prof.reset()
    off, on = [], []
    for i in range(rounds):
        if i % 2:
            prof.enable(**enable)
            on.append(per_call(func, calls))
            prof.disable()
            off.append(per_call(func, calls))
        else:
            off.append(per_call(func, calls))
            prof.enable(**enable)
            on.append(per_call(func, calls))
            prof.disable()
    prof.reset()
    diffs = [b - a for a, b in zip(off, on)]
    quart = statistics.quantiles(diffs, n=4)
    return {"name": name, "off": statistics.median(off), "on": statistics.median(on),
            "over": statistics.median(diffs), "q1": quart[0], "q3": quart[2],
            "off_spread": statistics.stdev(off)}


def _nothing(self, *args):
    return None


def _one_tuple(self, tok, decision, error=None):
    self._records.append((tok, decision, time.perf_counter()))


#: lower bounds, measured as the rows are, with the profiler's two engine-facing calls
#: replaced for the round: (what the row says, begin_op, end_op)
FLOORS = (
    ("engine's calls of `begin_op`/`end_op`, both doing nothing", _nothing, _nothing),
    ("`begin_op` as it is, `end_op` keeping one tuple (token, decision, end time)",
     Profiler.begin_op, _one_tuple),
)


def floor(name, func, calls, rounds, begin, end):
    """:func:`measure` with ``Profiler.begin_op`` and ``end_op`` replaced."""
    saved = Profiler.begin_op, Profiler.end_op
    Profiler.begin_op, Profiler.end_op = begin, end
    try:
        return measure(name, func, calls, rounds)
    finally:
        Profiler.begin_op, Profiler.end_op = saved


def recording(batches=200, calls=2000):
    """Seconds per ``begin_op`` + ``end_op`` of a private profiler on a real routing
    decision, the best of ``batches`` batches (the best is what other work on the
    machine inflates least)."""
    L = cat.Lattice(shape=(8, 8))
    decision = L.engine.router.decide("degree", (L,), {})
    prof = Profiler()
    prof.enable()

    def one():
        prof.end_op(prof.begin_op(decision, "cpu"), decision)

    best = math.inf
    for _ in range(batches):
        prof.reset()
        best = min(best, timeit.timeit(one, number=calls) / calls)
    return best


def memory(n):
    """Bytes per kept record, export peaks and a merge under the cap, on ``n`` records
    of real routed calls (mixed operations, as a study makes them)."""
    prof = cat.get_profiler()
    L = cat.Lattice(shape=(8, 8))
    data = np.arange(10, dtype=np.int64)
    calls = (L.degree, L.connected_components, lambda: L.xor_transform(data))
    for f in calls:
        f()
    prof.disable()
    prof.reset()
    gc.collect()
    tracemalloc.start()
    prof.enable()
    with cat.profile("study"):
        for i in range(n - 1):
            calls[i % 3]()
    prof.disable()
    out = {"records": len(prof._records)}
    # what workers send, for the merge below: as JSON text, sharing no object with the
    # records (a worker's records arrive unpickled, as objects of their own)
    sent = json.dumps(prof._plain(), default=runs._jsonable)
    with tempfile.TemporaryDirectory() as tmp:
        for name, export in (("export_json", prof.export_json),
                             ("export_trace", prof.export_trace),
                             ("export_html", prof.export_html)):
            gc.collect()
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            export(f"{tmp}/run.{name}")
            out[name] = tracemalloc.get_traced_memory()[1] - base
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    prof.reset()
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    out["per_record"] = (held - base) / out["records"]
    cap = Profiler()
    cap.max_records = out["records"] // 2
    plain = json.loads(sent)
    cap.merge(plain, worker="dask-task-0.0")
    del plain
    gc.collect()
    out["merged_kept"], out["merged_dropped"] = len(cap._records), cap.dropped
    out["merged_per_record"] = (tracemalloc.get_traced_memory()[0] - base) / len(cap._records)
    tracemalloc.stop()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=Path("reports/profiler.md"))
    ap.add_argument("--calls", type=int, default=200, help="calls per round")
    ap.add_argument("--rounds", type=int, default=300, help="pairs of rounds")
    ap.add_argument("--records", type=int, default=100_000,
                    help="records for the memory measurement")
    args = ap.parse_args(argv)
    if args.rounds < 2 or args.calls < 1 or args.records < 2:
        ap.error("--rounds needs at least 2 (quartiles), --calls 1, --records 2")
    load = _load()
    L = cat.Lattice(shape=(8, 8))
    data = np.arange(10, dtype=np.int64)
    rows = [
        measure("L.degree() on 8 x 8 (numba-cpu)", L.degree, args.calls, args.rounds),
        measure("L.connected_components() on 8 x 8", L.connected_components, args.calls,
                args.rounds),
        measure("L.xor_transform(10 int64) (numpy)", lambda: L.xor_transform(data),
                args.calls, args.rounds),
        measure("L.degree() on 8 x 8, enable(rss=True)", L.degree, args.calls, args.rounds,
                rss=True),
    ]
    floors = [floor(what, L.degree, args.calls, args.rounds, begin, end)
              for what, begin, end in FLOORS]
    cat.get_profiler().disable()
    alone = recording()
    n = 1_000_000
    check = min(timeit.repeat(profiler.active, number=n, repeat=5)) / n
    rss = (min(timeit.repeat(recorder._peak_rss, number=n // 10, repeat=5)) / (n // 10)
           if recorder._peak_rss else None)
    lines = [
        "# Profiler overhead",
        "",
        f"Measured by `python benchmarks/bench_profiler.py` on {platform.platform()}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs (load average "
        f"{load} before the timings, {_load()} after them: other work on the machine "
        f"inflates them); {args.rounds} pairs of rounds of {args.calls} calls, one "
        "disabled and one enabled, in alternating order: medians of the rounds' per-call "
        "times, and the median and quartiles of the pairs' differences.",
        "",
        "| routed call | disabled (us) | enabled (us) | overhead per call (us) | "
        f"quartiles (us) | within {LIMIT_US:.0f} us |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        over = r["over"] * 1e6
        lines.append(f"| {r['name']} | {r['off'] * 1e6:.2f} | {r['on'] * 1e6:.2f} | "
                     f"{over:.2f} | {r['q1'] * 1e6:.2f} to {r['q3'] * 1e6:.2f} | "
                     f"{'yes' if over <= LIMIT_US else 'NO'} |")
    lines += [
        "",
        "What any in-memory record costs here: the first row again (`L.degree()` on "
        "8 x 8), with the profiler's two engine-facing calls replaced for these rounds "
        "(the rest of the engine as it is):",
        "",
        "| `L.degree()` on 8 x 8, with | overhead per call (us) | quartiles (us) |",
        "|---|---:|---:|",
    ]
    for r in floors:
        lines.append(f"| {r['name']} | {r['over'] * 1e6:.2f} | {r['q1'] * 1e6:.2f} to "
                     f"{r['q3'] * 1e6:.2f} |")
    spread = min(r["off_spread"] for r in rows) * 1e6
    rss_words = (f"two `getrusage` calls, {2 * rss * 1e6:.2f} us measured on their own"
                 if rss else "not available on this platform")
    lines += [
        "",
        "Enabled, each call records its operation, backend, reason, predicted and "
        "measured time and the seconds Numba compiled during it (a process-wide count of "
        "compilations read at its start and end: the thread's own seconds are looked up "
        "only when it changed); "
        "the growth of the process's peak RSS only with `enable(rss=True)` (last row: "
        f"{rss_words}); on a GPU backend also CUDA events, transfer counts and monitor "
        "snapshots "
        "(not measured here: no GPU). Recording alone (`begin_op` + `end_op` on a "
        f"routing decision, best of 200 batches of 2000): {alone * 1e6:.2f} us per call.",
        "",
        f"Disabled, the engine's only work for the profiler is `profiler.active()`: "
        f"{check * 1e9:.0f} ns per call, against a spread (standard deviation of the "
        f"disabled rounds' per-call times) of {spread * 1e3:.0f} ns for the cheapest call "
        "above: "
        "not measurable in a routed call.",
    ]
    mem = memory(args.records)
    n, cap = mem["records"], Profiler.max_records
    lines += [
        "",
        "## Memory",
        "",
        f"Measured with `tracemalloc` on {n:,} records of routed calls (`degree`, "
        "`connected_components`, `xor_transform` on 8 x 8, in one region), in the same "
        "run.",
        "",
        "| what | bytes | per record |",
        "|---|---:|---:|",
        f"| records kept | {mem['per_record'] * n:,.0f} | {mem['per_record']:.0f} |",
    ]
    for name in ("export_json", "export_trace", "export_html"):
        lines.append(f"| peak above them during `{name}` | {mem[name]:,.0f} | "
                     f"{mem[name] / n:.1f} |")
    lines += [
        f"| {mem['merged_kept']:,} plain records merged under max_records = "
        f"{mem['merged_kept']:,} ({mem['merged_dropped']:,} dropped) | "
        f"{mem['merged_per_record'] * mem['merged_kept']:,.0f} | "
        f"{mem['merged_per_record']:.0f} |",
        "",
        f"At the cap (`Profiler.max_records` = {cap:,}) the records would hold "
        f"{mem['per_record'] * cap / 2**20:,.0f} MiB, and `export_json` / `export_trace` "
        f"{max(mem['export_json'], mem['export_trace']) / n * cap / 2**20:,.0f} MiB more "
        "at their peak: the per-record figures above times the cap (computed, not "
        "measured at the cap). The exports stream one record at a time; what grows with "
        "the records is the sorted list of references to them. `export_html` holds that "
        f"list and the page, which draws and lists the first {html.MAX_DRAWN:,} "
        "records only, so its peak stops growing there.",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if args.output.exists():  # the notes of earlier runs, below the marker, stay
        old = args.output.read_text()
        if KEPT in old:
            text += "\n" + KEPT + old.split(KEPT, 1)[1]
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
