"""The timing every benchmark script shares: one untimed call first (compiling,
warming caches), then ``repeat`` timed ones. The scripts run as
``PYTHONPATH=$PWD python benchmarks/<script>.py``, so this file is importable as
``_timing`` beside them."""

from __future__ import annotations

import statistics
import time


def times(f, repeat, clock=time.perf_counter):
    """``(seconds, result)``: the seconds of ``repeat`` timed calls of ``f`` after an
    untimed one, whose result comes back (a benchmark checks answers first)."""
    result = f()
    out = []
    for _ in range(repeat):
        t = clock()
        f()
        out.append(clock() - t)
    return out, result


def best(f, repeat):
    """The least of :func:`times`' seconds."""
    return min(times(f, repeat)[0])


def median(f, repeat):
    """The median of :func:`times`' seconds."""
    return float(statistics.median(times(f, repeat)[0]))
