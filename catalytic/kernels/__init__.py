"""Kernels: ``cpu`` (``@njit``) and ``cuda`` (``@cuda.jit``) twins with their host
functions. This module keeps the per-thread count of bytes copied between host and
device (the cuda host functions add to it through ``cuda._transfer``), so a profiler
can attribute copies to the call that made them even while other threads copy too."""

from __future__ import annotations

import threading

_local = threading.local()


def add_transfer(direction: str, nbytes: int) -> None:
    """Count ``nbytes`` copied ``"h2d"`` or ``"d2h"`` by the calling thread."""
    if direction == "h2d":
        _local.h2d = getattr(_local, "h2d", 0) + int(nbytes)
    else:
        _local.d2h = getattr(_local, "d2h", 0) + int(nbytes)


def transfer_counts() -> tuple[int, int]:
    """``(h2d_bytes, d2h_bytes)`` copied by the calling thread since it started."""
    return getattr(_local, "h2d", 0), getattr(_local, "d2h", 0)
