"""Numba's compile events, timed per thread: what a recorded call spent compiling.

While some profiler is enabled (:func:`_listen`), a listener of Numba's compile events
logs each outermost compilation's seconds in the compiling thread's log and counts it in
:data:`_compile_seq`. A recorded call notes the count when it starts; when it ends with
the count unchanged, it compiled nothing, and otherwise :func:`_compile_seconds_since`
sums its own thread's compilations since then (the recorder's ``compile_s``).
"""

from __future__ import annotations

import threading
import time

#: compilations finished in the process so far, any thread (a recorded call that sees it
#: unchanged compiled nothing, without looking further)
_compile_seq = 0
#: this thread's compilations: attribute ``log``, a list of (``_compile_seq`` after it,
#: seconds); ``depth`` and ``t0`` while one is under way
_compiled = threading.local()
_listening = [0, None]  # enabled profilers, the installed listener
_listen_lock = threading.Lock()
_seq_lock = threading.Lock()


#: Numba's events timed as compilation: a compile, and the compiler lock held around it
#: and around a load from the disk cache (which fires no compile event)
_COMPILE_EVENTS = ("numba:compiler_lock", "numba:compile")


def _compile_seconds_since(seq) -> float:
    """Seconds this thread spent compiling since ``_compile_seq`` was ``seq``."""
    total = 0.0
    for after, seconds in reversed(_compiled.__dict__.get("log", ())):
        if after <= seq:
            break
        total += seconds
    return total


def _compile_listener():
    """A listener of :data:`_COMPILE_EVENTS` logging each outermost event's duration in
    the compiling thread's ``_compiled.log`` (a compile inside a compile counts once)."""
    from numba.core import event

    class _Compiles(event.Listener):
        def on_start(self, ev):
            d = _compiled.__dict__
            depth = d.get("depth", 0)
            if depth == 0:
                d["t0"] = time.perf_counter()
            d["depth"] = depth + 1

        def on_end(self, ev):
            global _compile_seq
            d = _compiled.__dict__
            d["depth"] = depth = max(0, d.get("depth", 1) - 1)
            if depth == 0 and "t0" in d:
                seconds = time.perf_counter() - d.pop("t0")
                with _seq_lock:  # threads compile at once (the event ends unlocked)
                    _compile_seq += 1
                    seq = _compile_seq
                log = d.setdefault("log", [])
                log.append((seq, seconds))
                if len(log) > _COMPILE_LOG:
                    del log[: len(log) // 2]

    return _Compiles()


#: compilations a thread's log keeps (a call spanning more than half of them would
#: count too few seconds of compilation; each takes milliseconds or more)
_COMPILE_LOG = 4096


def _listen(change: int) -> None:
    """Count an enabled (+1) or disabled (-1) profiler; the listener is registered with
    Numba while the count is above 0 (disabled, profiling costs nothing at compile time)."""
    from numba.core import event

    with _listen_lock:
        before = _listening[0]
        _listening[0] = max(0, before + change)
        if before == 0 and _listening[0] > 0:
            _listening[1] = _listening[1] or _compile_listener()
            for kind in _COMPILE_EVENTS:
                event.register(kind, _listening[1])
        elif before > 0 and _listening[0] == 0:
            for kind in _COMPILE_EVENTS:
                event.unregister(kind, _listening[1])
