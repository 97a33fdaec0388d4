"""Every copy between host and device made by the CUDA kernels' host functions and by
the cuda backend goes through here, so the bytes moved each way are counted in one
place (``catalytic.backends.cuda_backend.transfer_stats()`` reports them)."""

from __future__ import annotations

import threading

import numpy as np
from numba import cuda

from catalytic.kernels import add_transfer

_lock = threading.Lock()
COUNTS = {"h2d_bytes": 0, "d2h_bytes": 0, "h2d_copies": 0, "d2h_copies": 0}


def _count(direction: str, nbytes: int) -> None:
    with _lock:
        COUNTS[f"{direction}_bytes"] += int(nbytes)
        COUNTS[f"{direction}_copies"] += 1
    add_transfer(direction, nbytes)  # this thread's own count (the profiler reads it)


def _host_array(a):
    """``a`` as a contiguous NumPy array; a device array is refused, since NumPy would
    copy it to the host (uncounted) only for it to be copied back."""
    if hasattr(a, "copy_to_host") or hasattr(a, "__cuda_array_interface__"):
        raise TypeError(f"{type(a).__name__} is already on the device: use it as is, "
                        "not through a host copy")
    return np.ascontiguousarray(a)


def to_device(a, stream=0):
    """Host array -> new device array (counted)."""
    a = _host_array(a)
    _count("h2d", a.nbytes)
    return cuda.to_device(a, stream=stream)


def to_host(d, stream=0, out=None):
    """Device array -> host array (counted); ``out`` receives it when given."""
    h = d.copy_to_host(stream=stream) if out is None else d.copy_to_host(out, stream=stream)
    _count("d2h", h.nbytes)
    return h


def host_to(dst, src, stream=0):
    """Copy host array ``src`` into existing device array ``dst`` (counted)."""
    src = _host_array(src)
    _count("h2d", src.nbytes)
    dst.copy_to_device(src, stream=stream)
