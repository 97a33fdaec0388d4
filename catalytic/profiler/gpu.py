"""What a call on a GPU measures: CUDA events and device-memory snapshots around it, and
NVTX ranges for Nsight Systems. Each is absent where it cannot be had (the simulator, no
device, no ``nvtx`` package): nothing is estimated in its place."""

from __future__ import annotations

from catalytic.device import probe, simulator_active


def _gpu_begin(extra):
    """CUDA events recorded on the default stream, and the monitor's snapshot (into the
    record's ``extra`` dict), before a call on a GPU backend; None under the simulator
    or without a device."""
    if simulator_active():
        return None
    try:
        from numba import cuda

        from catalytic.memory import get_monitor

        extra["memory_before"] = get_monitor().snapshot().as_dict()
        start, end = cuda.event(), cuda.event()
        start.record()
        return start, end
    except Exception:  # no usable device: nothing measured, nothing recorded
        return None


def _gpu_end(extra, events) -> None:
    from numba import cuda

    from catalytic.memory import get_monitor

    start, end = events
    try:
        end.record()
        end.synchronize()
        extra["device_s"] = cuda.event_elapsed_time(start, end) / 1e3
        extra["memory_after"] = get_monitor().snapshot().as_dict()
    except Exception:  # a failed call may leave the context unusable: record nothing more
        pass


#: the ``nvtx`` module while ranges are pushed, False when they are not, None until probed
_nvtx = None


def _nvtx_module():
    global _nvtx
    if _nvtx is None:
        _nvtx = False
        if not simulator_active():
            try:
                import nvtx

                if probe()[0]:
                    _nvtx = nvtx
            except Exception:
                pass
    return _nvtx


def _nvtx_push(name):
    mod = _nvtx if _nvtx is not None else _nvtx_module()
    if mod:
        mod.push_range(message=f"catalytic.{name}")
        return True
    return None


def _nvtx_pop(pushed) -> None:
    if pushed:
        _nvtx.pop_range()
