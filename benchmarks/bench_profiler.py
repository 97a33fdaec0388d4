"""What the profiler costs: per routed call, enabled and disabled.

    python benchmarks/bench_profiler.py [--output reports/profiler.md] [--calls 5000]

Measured in this run on this machine: small routed calls (their time is mostly the
engine's own per-call work, so the profiler's share is largest there) timed in
alternating rounds with the profiler disabled and enabled (``--rounds`` rounds of
``--calls`` calls each; records are dropped between rounds). The overhead per call is
the difference of the medians of the per-round means. The disabled cost is what the
engine does per call for the profiler when it is off, the ``profiler.active()`` test,
timed on its own, against the run-to-run spread of a disabled call.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import timeit
from pathlib import Path

import numpy as np

import catalytic as cat
from catalytic import profiler

LIMIT_US = 5.0


def per_call(func, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        func()
    return (time.perf_counter() - t0) / calls


def measure(name, func, calls, rounds):
    prof = cat.get_profiler()
    func()  # warm-up: JIT, caches
    off, on = [], []
    for _ in range(rounds):
        prof.disable()
        prof.reset()
        off.append(per_call(func, calls))
        prof.enable()
        on.append(per_call(func, calls))
        prof.disable()
        prof.reset()
    return {"name": name, "off": statistics.median(off), "on": statistics.median(on),
            "off_spread": statistics.stdev(off) if len(off) > 1 else 0.0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=Path("reports/profiler.md"))
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    L = cat.Lattice(shape=(8, 8))
    data = np.arange(10, dtype=np.int64)
    rows = [
        measure("L.degree() on 8 x 8 (numba-cpu)", L.degree, args.calls, args.rounds),
        measure("L.connected_components() on 8 x 8", L.connected_components, args.calls,
                args.rounds),
        measure("L.xor_transform(10 int64) (numpy)", lambda: L.xor_transform(data),
                args.calls, args.rounds),
    ]
    cat.get_profiler().disable()
    n = 1_000_000
    check = min(timeit.repeat(profiler.active, number=n, repeat=5)) / n
    rss = (min(timeit.repeat(profiler._peak_rss, number=n // 10, repeat=5)) / (n // 10)
           if profiler._peak_rss else None)
    lines = [
        "# Profiler overhead",
        "",
        f"Measured by `python benchmarks/bench_profiler.py` on {platform.platform()}, "
        f"Python {platform.python_version()}; {args.rounds} alternating rounds of "
        f"{args.calls} calls, medians of the per-round means.",
        "",
        "| routed call | disabled (us) | enabled (us) | overhead per call (us) | "
        f"within {LIMIT_US:.0f} us |",
        "|---|---:|---:|---:|:---:|",
    ]
    for r in rows:
        over = (r["on"] - r["off"]) * 1e6
        lines.append(f"| {r['name']} | {r['off'] * 1e6:.2f} | {r['on'] * 1e6:.2f} | "
                     f"{over:.2f} | {'yes' if over <= LIMIT_US else 'NO'} |")
    spread = min(r["off_spread"] for r in rows) * 1e6
    lines += [
        "",
        "Enabled, each call records its operation, backend, reason, predicted and "
        "measured time and the growth of the process's peak RSS (two `getrusage` calls"
        + (f", {2 * rss * 1e6:.2f} us of the overhead measured on their own" if rss else
           ": not available on this platform")
        + "); on a GPU backend also CUDA events, transfer counts and monitor snapshots "
        "(not measured here: no GPU).",
        "",
        f"Disabled, the engine's only work for the profiler is `profiler.active()`: "
        f"{check * 1e9:.0f} ns per call, against a run-to-run spread (standard deviation "
        f"of the per-round means) of {spread * 1e3:.0f} ns for the cheapest call above: "
        "not measurable in a routed call.",
    ]
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
