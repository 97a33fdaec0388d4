"""What a doctest or a README example may not leave behind in the process: another
process-wide engine, plugins or operations on it, the process-wide profiler switched on
or holding records, Numba's thread count, a pooled allocator, ``CATALYTIC_*`` and
``NUMBA_*`` environment variables.

An example that registers a plugin does so on an engine of its own
(``cat.Engine(disable_plugin_autoload=True)``); one that profiles resets the profiler
after it.
"""

from __future__ import annotations

import os


def process_state() -> dict:
    """The process-wide state, as plain values that compare equal when nothing changed."""
    import numba

    import catalytic as cat
    import catalytic._pool as pool
    import catalytic.engine as engine_mod

    eng = engine_mod._engine
    prof = cat.get_profiler()
    return {
        "engine": eng,  # the object: compared by identity
        "plugins": sorted(eng.plugin_names()) if eng is not None else None,
        "operations": sorted(eng.registry.operations) if eng is not None else None,
        "profiler enabled": prof.enabled,
        "profiler records": len(prof.records()),
        "numba threads": numba.get_num_threads(),
        "pool installed": pool.pool_installed(),
        "environment": {k: v for k, v in os.environ.items()
                        if k.startswith(("CATALYTIC_", "NUMBA_"))},
    }


def changes(before: dict, after: dict) -> dict:
    """``{what: (before, after)}`` for each entry of the state that changed."""
    return {k: (before[k], after[k]) for k in before if before[k] != after[k]}
