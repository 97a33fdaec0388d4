"""Where a study spends its time: a profiler that records only what it measured.

``cat.get_profiler().enable()`` (or ``CATALYTIC_PROFILE=1`` in the environment) turns it
on; from then on the engine records every routed operation. Named regions group them:

>>> import catalytic as cat
>>> prof = cat.get_profiler()
>>> prof.reset(); prof.enable()
>>> @cat.profile("study")
... def study():
...     L = cat.Lattice(shape=(32, 32))
...     with cat.profile("components"):
...         L.connected_components()
...     return L.distance_field(0)
>>> _ = study()
>>> prof.disable()
>>> [(r["kind"], r["name"]) for r in prof.records()]
[('region', 'study'), ('region', 'components'), ('op', 'connected_components'), ('op', 'distance_field')]
>>> prof.summary()["connected_components"]["count"]
1
>>> prof.reset()


The package's rooms, each importing only those after it:
:mod:`~catalytic.profiler.recorder` records (:class:`Profiler`, regions, the
:class:`profile` decorator, the process-wide and task profilers);
:mod:`~catalytic.profiler.compile_events` times Numba's compilation per thread;
:mod:`~catalytic.profiler.gpu` measures a call on a GPU (CUDA events, NVTX ranges);
:mod:`~catalytic.profiler.html` draws a run as one HTML page; and
:mod:`~catalytic.profiler.runs` reads runs back (what a record holds, the file's schema,
:func:`load`, summaries, :func:`compare`, trace events). Neither the runs nor the page
import the recorder.

``CATALYTIC_PROFILE=1`` in the environment enables the process-wide profiler when this
package is imported (``CATALYTIC_PROFILE_RSS=1`` with ``rss=True``).
"""

from __future__ import annotations

import os

from catalytic.profiler import recorder as _recorder
from catalytic.profiler.recorder import (
    Profiler,
    active,
    get_profiler,
    profile,
    task_profiler,
)
from catalytic.profiler.runs import (
    DEFAULT_THRESHOLD,
    SCHEMA,
    SCHEMA_VERSION,
    Comparison,
    bottlenecks,
    check_document,
    compare,
    format_summary,
    load,
    summarize,
    trace_events,
)

__all__ = [
    "DEFAULT_THRESHOLD",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Comparison",
    "Profiler",
    "active",
    "bottlenecks",
    "check_document",
    "compare",
    "format_summary",
    "get_profiler",
    "load",
    "profile",
    "summarize",
    "task_profiler",
    "trace_events",
]

_write = _recorder._write  # the CLI writes the report page with it

_ON = ("1", "true", "yes", "on")
if os.environ.get("CATALYTIC_PROFILE", "").strip() in _ON:
    get_profiler().enable(rss=os.environ.get("CATALYTIC_PROFILE_RSS", "").strip() in _ON)
