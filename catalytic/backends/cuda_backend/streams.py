"""Where the cuda backend's work is queued: one CUDA stream per thread, and the kernel
modules' host functions bound to it. Under the simulator, calls take turns instead."""

from __future__ import annotations

import functools
import threading

from catalytic.device import numba_cuda

#: Numba's CUDA simulator swaps the kernel module's ``cuda`` global while a kernel runs,
#: so under it the backend's calls take turns (on a GPU they run concurrently)
_SIMULATOR_LOCK = threading.Lock()


class _OnStream:
    """A kernel module whose host functions run on ``stream``: ``_OnStream(m, s).f(...)``
    is ``m.f(..., stream=s)``, also where the host wrappers shared with numba-cpu
    (``_common.*_with``) call them without a stream."""

    def __init__(self, module, stream):
        self._module = module
        self._stream = stream

    def __getattr__(self, name):
        return functools.partial(getattr(self._module, name), stream=self._stream)


_thread = threading.local()


def call_stream():
    """This thread's CUDA stream, on which every call of the backend queues its copies
    and launches.

    One stream per thread and CUDA context, made on first use, so calls from several
    threads overlap on the device instead of queueing behind one another on the default
    stream. Numba's streams are blocking streams: work on the default stream (the cached
    lattice copies, a user's own copies) stays ordered with them.

    Returns
    -------
    numba.cuda stream
        The same object for every call from this thread while the context lives.

    Raises
    ------
    ImportError
        When numba-cuda is not installed.
    """
    ctx = _graph_module()._context_key()
    held = getattr(_thread, "stream", None)
    if held is None or held[0] != ctx:
        held = _thread.stream = (ctx, numba_cuda().stream())
    return held[1]


def _graph_module():
    from catalytic.kernels.cuda import graph

    return graph


def _graph():
    """The graph kernels' host functions, on this thread's stream."""
    return _OnStream(_graph_module(), call_stream())


def _fields():
    """The field kernels' host functions, on this thread's stream."""
    from catalytic.kernels.cuda import fields

    return _OnStream(fields, call_stream())


def _arrays():
    """The array kernels' host functions, on this thread's stream."""
    from catalytic.kernels.cuda import arrays

    return _OnStream(arrays, call_stream())
