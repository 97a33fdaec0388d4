"""Device-memory monitor: one reading of the truth, pressure levels, automatic cleanup.

``get_monitor()`` returns the process-wide :class:`DeviceMemoryMonitor`. It reads used,
free and total bytes from a *provider*: the current CUDA context (after flushing
Numba's deferred frees, which otherwise hold back up to 10 frees or 20% of device
memory, so an unflushed reading under-reports free memory), host memory through psutil
when there is no GPU (the snapshot then says ``device="host"``), or any callable a test
injects. Every free-memory question the cuda backend asks (can a call run there, make
room for it, how many closeness sources fit in a batch) goes through the monitor.

What the monitor does
---------------------
* Accounts for what catalytic itself holds on the device: each registered *cache*
  (the cuda backend's per-lattice copies of mask, weights and key; a memory pool)
  reports its bytes and can evict one entry at a time, least recently used first.
* After every call on a GPU backend it takes a snapshot (bounded history, peak kept),
  states the pressure level (``low`` < 70% used <= ``elevated`` < 85% <= ``high`` <
  95% <= ``critical``), tells listeners when the level changes (the engine turns that
  into the ``catalytic_memory_pressure(level, snapshot)`` plugin hook), and when usage
  reaches the threshold (0.85 by default; ``CATALYTIC_MEMORY_THRESHOLD`` or
  ``Engine(memory_threshold=...)``) runs :meth:`~DeviceMemoryMonitor.cleanup`: evict
  cached copies least recently used first until below the threshold, trim the caches
  that can trim (a pool), flush deferred frees, run the callbacks registered with
  :meth:`~DeviceMemoryMonitor.register_cleanup`, and record what each step freed.
* :meth:`~DeviceMemoryMonitor.can_allocate` answers the router's "does it fit" with a
  bool, without side effects (``router.explain()`` never cleans up);
  :meth:`~DeviceMemoryMonitor.shortfall` gives the reason when it does not;
  :meth:`~DeviceMemoryMonitor.make_room` evicts on the run path.
* Leak detection: when device usage grows across a whole window of GPU calls while the
  engine's own accounting does not, the window's operations are reported
  (``stats()["leaks"]`` and a ``ResourceWarning``).

Host memory is read here too, in one place (:func:`available_memory`): the engine, the
lattice, the batch processor and the numpy backend check large host allocations with
:func:`check_host_memory` before they are made.

Calls on CPU backends cost the monitor nothing (no reading is taken). Threads: one
re-entrant lock guards the monitor's state; device readings, the caches' byte counts
and evictions, cleanup callbacks and listeners all run *without* it held, so a
callback may call the monitor (or start another cleanup, which then returns at once)
and a cache may hold its own lock while it registers, without deadlocking.

Examples
--------
>>> from catalytic.memory import DeviceMemoryMonitor
>>> device = {"free": 300, "total": 1000}
>>> mon = DeviceMemoryMonitor(0.85, provider=lambda: (device["free"], device["total"]))
>>> mon.snapshot().level, mon.snapshot().used
('elevated', 700)
>>> device["free"] = 100
>>> mon.check("demo").level        # 90% used: above the threshold, a cleanup ran
'high'
>>> mon.stats()["cleanups"]
1
"""

from __future__ import annotations

import math
import numbers
import operator
import threading
import time
import warnings
import weakref
from collections import deque
from typing import Callable, NamedTuple

from catalytic.config import check_fraction
from catalytic.device import numba_cuda, simulator_active
from catalytic.errors import InsufficientMemoryError, MemoryShortfall

#: pressure levels: (name, lowest used fraction)
LEVELS = (("low", 0.0), ("elevated", 0.70), ("high", 0.85), ("critical", 0.95))
#: snapshots kept in the history
HISTORY = 256
#: GPU calls in a leak-detection window, and the growth (bytes) that counts as a leak
LEAK_WINDOW = 32
LEAK_MIN_GROWTH = 16 * 2**20
#: host allocations below this many bytes are not checked: a psutil reading costs more
#: than such an allocation risks (reports/memory.md, reports/design_notes.md)
MEMORY_CHECK_MIN_BYTES = 32 * 2**20


def _read_host() -> tuple[int, int]:
    """(available, total) bytes of host memory now: the only reader of host memory."""
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def available_memory() -> int:
    """Bytes of host memory available now."""
    return _read_host()[0]


def host_shortfall(what: str, needed: int) -> MemoryShortfall | None:
    """Why ``needed`` bytes of host memory for ``what`` do not fit (a
    :class:`~catalytic.errors.MemoryShortfall`), or None when they do; below
    :data:`MEMORY_CHECK_MIN_BYTES` nothing is read."""
    if needed < MEMORY_CHECK_MIN_BYTES:
        return None
    avail = available_memory()
    return MemoryShortfall(what, needed, avail) if needed > avail else None


def check_host_memory(what: str, needed: int) -> None:
    """Raise :class:`~catalytic.errors.InsufficientMemoryError` if ``needed`` bytes of
    host memory are not available (:func:`host_shortfall`)."""
    short = host_shortfall(what, needed)
    if short is not None:
        raise InsufficientMemoryError(what, short.needed, short.available)


def level_of(fraction: float | None) -> str:
    """Pressure level of a used fraction (``"unknown"`` when it cannot be known)."""
    if fraction is None or not math.isfinite(fraction):
        return "unknown"
    for name, lo in _LEVELS_DOWN:
        if fraction >= lo:
            return name
    return LEVELS[0][0]


_LEVELS_DOWN = tuple(reversed(LEVELS))


class Snapshot(NamedTuple):
    """One reading: device (``"cuda:0"``, ``"simulator"``, ``"host"``, or the name an
    injected provider gives), total/free/used bytes (None when the device cannot say, as
    the simulator cannot), used fraction, bytes catalytic's caches hold, pressure level,
    the operation it followed, and ``time.time()``."""

    device: str
    total: int | None
    free: int | None
    used: int | None
    fraction: float | None
    engine_bytes: int
    level: str
    op: str | None = None
    time: float = 0.0

    def as_dict(self) -> dict:
        return self._asdict()


class _Cache:
    """A registered cache: its bytes, and how to evict its least recently used entry
    (returns the bytes released, or None when empty) or trim it (returns bytes)."""

    def __init__(self, name, held, evict=None, trim=None):
        self.name, self.held, self.evict, self.trim = name, held, evict, trim


def _device_provider():
    """(free, total, device name) of the current CUDA context, deferred frees flushed
    first; None when there is no usable GPU (simulator: free and total unknown)."""
    if simulator_active():
        return "simulator"
    try:
        cuda = numba_cuda()
        if not cuda.is_available():
            return None
        ctx = cuda.current_context()
    except Exception:
        return None

    def read():
        _flush(ctx)
        free, total = ctx.get_memory_info()
        return int(free), int(total)

    return read, f"cuda:{ctx.device.id}"


def _flush(ctx) -> None:
    """Run Numba's deferred frees now (an external memory manager has none)."""
    pending = getattr(ctx.memory_manager, "deallocations", None)
    if pending is not None:
        pending.clear()


class DeviceMemoryMonitor:
    """See the module docstring.

    Parameters
    ----------
    threshold : float, default 0.85
        Used fraction at which :meth:`check` runs a cleanup, in (0, 1].
    provider : callable () -> (free, total), optional
        Where readings come from (bytes). Default: the current CUDA device, the host
        (psutil) when there is no GPU; under the simulator free and total are unknown.
    device : str, optional
        The name snapshots carry for an injected provider.
    history : int, default 256
        Snapshots kept.
    leak_window : int, default 32
        GPU calls per leak-detection window.
    leak_min_growth : int, default 16 MiB
        Growth of device usage over a window, not matched by catalytic's own
        accounting, that counts as a leak.
    """

    def __init__(self, threshold: float = 0.85, *, provider=None, device=None,
                 history: int = HISTORY, leak_window: int = LEAK_WINDOW,
                 leak_min_growth: int = LEAK_MIN_GROWTH):
        self.threshold = _check_threshold(threshold)
        self._lock = threading.RLock()
        self._provider = provider
        self._device = device or ("injected" if provider is not None else None)
        self._caches: dict[str, _Cache] = {}
        self._callbacks: list[tuple[str, Callable]] = []
        self._listeners: list = []
        self._history: deque = deque(maxlen=history)
        self._peak: Snapshot | None = None
        self._level = None
        self._cleaning = False
        self._leak_window = leak_window
        self._leak_min_growth = leak_min_growth
        self._window: deque = deque(maxlen=leak_window)
        self._counts = {"snapshots": 0, "checks": 0, "cleanups": 0, "evictions": 0,
                        "evicted_bytes": 0, "pressure_events": 0}
        self._cleanup_log: deque = deque(maxlen=64)
        self._pressure_log: deque = deque(maxlen=64)
        self._leaks: deque = deque(maxlen=16)

    # -- readings ---------------------------------------------------------------------
    def set_provider(self, provider=None, device: str | None = None):
        """Read from ``provider()`` -> (free, total) from now on (None: the default
        device or host reading); returns the previous ``(provider, device)``."""
        with self._lock:
            old = (self._provider, self._device)
            self._provider = provider
            self._device = device or ("injected" if provider is not None else None)
            return old

    def _read(self):
        """(free, total, device) from the provider; None values when unknown."""
        if self._provider is None:
            found = _device_provider()
            if found == "simulator":
                return None, None, "simulator"
            if found is None:
                free, total = _read_host()
                return free, total, "host"
            read, name = found
            free, total = read()
            return free, total, name
        free, total = self._provider()
        if free is None or total is None or free != free or total != total \
                or total == math.inf or free == math.inf:
            return None, None, self._device
        return int(free), int(total), self._device

    def engine_bytes(self) -> int:
        """Bytes held by catalytic's registered caches (lattice copies, pool)."""
        total = 0
        for cache in list(self._caches.values()):
            try:
                total += int(cache.held(keep=None))
            except Exception:  # a cache that cannot count must not break a reading
                pass
        return total

    def snapshot(self, op: str | None = None) -> Snapshot:
        """A reading now (recorded in the history, peak updated)."""
        snap = self._take(op)
        with self._lock:
            self._record(snap)
        return snap

    def _take(self, op) -> Snapshot:
        # no monitor lock here: the caches take their own locks to count their bytes
        free, total, device = self._read()
        used = None if total is None else total - free
        fraction = None if not total else used / total
        return Snapshot(device, total, free, used, fraction, self.engine_bytes(),
                        level_of(fraction), op, time.time())

    def _record(self, snap) -> None:
        self._counts["snapshots"] += 1
        self._history.append(snap)
        if snap.used is not None and (self._peak is None or snap.used > (self._peak.used or 0)):
            self._peak = snap

    # -- questions the router and the backends ask --------------------------------------
    def reclaimable(self, keep=None) -> int:
        """Bytes the caches could release (all entries; ``keep`` is the owner a call
        needs, whose entries the cache leaves alone)."""
        total = 0
        for cache in list(self._caches.values()):
            if cache.evict is None:
                continue
            try:
                total += int(cache.held(keep=keep))
            except Exception:
                pass
        return total

    def free_bytes(self) -> float:
        """Free device bytes now (``inf`` when the device cannot say, as under the
        simulator)."""
        free, _total, _ = self._read()
        return math.inf if free is None else float(free)

    def can_allocate(self, nbytes: int, *, margin: float = 0.9, keep=None) -> bool:
        """Whether ``nbytes`` fit in ``margin`` of free memory, counting what the caches
        could release (all but ``keep``'s entries) as free. Only reads: it never evicts
        (``router.explain()`` asks it too). :meth:`shortfall` says why not.

        Parameters
        ----------
        nbytes : int
            Bytes wanted: an integer (or a float with a whole value), finite and >= 0.
        margin : float, default 0.9
            Fraction of free memory the call may take, in (0, 1].
        keep : object, optional
            The owner the call needs (a lattice), whose cached entries do not count as
            reclaimable.

        Returns
        -------
        bool
            True when they fit.

        Raises
        ------
        TypeError
            ``nbytes`` or ``margin`` is not a number (a bool counts as not a number).
        ValueError
            ``nbytes`` is NaN, infinite, negative or fractional; ``margin`` is outside
            (0, 1].

        Examples
        --------
        >>> mon = DeviceMemoryMonitor(provider=lambda: (1000, 4000))
        >>> mon.can_allocate(900), mon.can_allocate(901)
        (True, False)
        >>> if not mon.can_allocate(2000):
        ...     print(mon.shortfall(2000))
        device memory needs 2.0 KiB (2000 bytes), only 900 B (900 bytes) available
        """
        return self.shortfall(nbytes, margin=margin, keep=keep) is None

    def shortfall(self, nbytes: int, *, margin: float = 0.9, keep=None):
        """Why ``nbytes`` do not fit (see :meth:`can_allocate`, which takes the same
        arguments and raises the same errors), or None when they fit.

        Returns
        -------
        MemoryShortfall or None
            A :class:`~catalytic.errors.MemoryShortfall`, a reason string carrying
            ``needed`` (``nbytes``) and ``available`` (``margin`` of free plus
            reclaimable bytes) that the router turns into an
            :class:`~catalytic.errors.InsufficientMemoryError` when memory is why
            nothing can run a call; None when the bytes fit.
        """
        nbytes = _check_nbytes(nbytes)
        margin = check_fraction(margin, "margin")
        free = self.free_bytes()
        if nbytes <= margin * free:
            return None
        avail = margin * (free + self.reclaimable(keep))
        if nbytes > avail:
            return MemoryShortfall("device memory", nbytes, int(avail))
        return None

    def make_room(self, nbytes: int, *, margin: float = 0.9, keep=None) -> int:
        """Evict cached copies, least recently used first, until ``nbytes`` fit in
        ``margin`` of free memory (the run path; :meth:`can_allocate` only reads).

        Parameters
        ----------
        nbytes, margin, keep
            As :meth:`can_allocate` takes them (``keep``'s entries are never evicted).

        Returns
        -------
        int
            The bytes released (by the caches' accounting); the eviction stops when
            nothing is left to evict, whether or not ``nbytes`` then fit.

        Raises
        ------
        TypeError, ValueError
            As :meth:`can_allocate`.
        """
        nbytes = _check_nbytes(nbytes)
        margin = check_fraction(margin, "margin")
        released = 0
        while nbytes > margin * self.free_bytes():
            got = self._evict_one(keep)
            if got is None:
                break
            released += got
            self._flush_deferred()
        return released

    # -- the check after a GPU call ----------------------------------------------------
    def check(self, op: str | None = None, *, threshold: float | None = None) -> Snapshot:
        """The reading after a GPU call: snapshot, pressure, cleanup and leak check.

        Listeners hear of a change of pressure level; at ``threshold`` or above,
        :meth:`cleanup` runs; growth of device usage over a window of calls that
        catalytic's own caches do not account for is reported as a leak.

        Parameters
        ----------
        op : str, optional
            The operation the reading follows (kept in the snapshot and the logs).
        threshold : float, optional
            Used fraction in (0, 1] at which to clean up (the calling engine's
            setting); default: the monitor's own.

        Returns
        -------
        Snapshot
            The reading, taken before any cleanup.

        Raises
        ------
        TypeError
            ``threshold`` is not a number (checked before the reading).
        ValueError
            ``threshold`` is outside (0, 1] (checked before the reading).

        Warns
        -----
        ResourceWarning
            A leak was found (also kept in ``stats()["leaks"]``).
        """
        threshold = self.threshold if threshold is None else check_fraction(threshold,
                                                                             "threshold")
        snap = self._take(op)
        with self._lock:
            self._record(snap)
            self._counts["checks"] += 1
            changed = snap.level != self._level
            previous, self._level = self._level, snap.level
            if changed:
                self._counts["pressure_events"] += 1
                self._pressure_log.append({"from": previous, "to": snap.level,
                                           "op": op, "fraction": snap.fraction})
            leak = self._leak_check(snap)
        if changed:
            self._notify(snap)
        if leak is not None:
            warnings.warn(leak["message"], ResourceWarning, stacklevel=2)
        if snap.fraction is not None and snap.fraction >= threshold:
            self.cleanup(reason=f"{snap.fraction:.0%} used after {op or 'a call'}",
                         target=threshold)
        return snap

    def _leak_check(self, snap):
        if snap.used is None:
            return None
        if self._window and snap.used < self._window[-1][0]:
            self._window.clear()  # usage fell: a new run of growth starts here
        self._window.append((snap.used, snap.engine_bytes, snap.op))
        if len(self._window) < self._leak_window:
            return None
        growth = snap.used - self._window[0][0]
        own = snap.engine_bytes - self._window[0][1]
        if growth - max(own, 0) < self._leak_min_growth:
            return None
        ops = sorted({w[2] for w in self._window if w[2]})
        leak = {"growth": growth, "engine_growth": own, "calls": len(self._window),
                "ops": ops, "time": time.time(),
                "message": (f"device memory grew by {growth} bytes over the last "
                            f"{len(self._window)} GPU calls ({', '.join(ops) or 'unnamed'}) "
                            f"while catalytic's own caches changed by {own} bytes: a leak?")}
        self._leaks.append(leak)
        self._window.clear()
        return leak

    # -- cleanup ------------------------------------------------------------------------
    def register_cache(self, name: str, held, evict=None, trim=None) -> None:
        """Account for a cache: ``held(keep=None)`` -> bytes it holds (not counting
        ``keep``'s entries); ``evict(keep=None)`` evicts its least recently used entry
        (never ``keep``'s) and returns the bytes released, or None when it has nothing
        to evict; ``trim()`` returns the bytes released."""
        with self._lock:
            self._caches[name] = _Cache(name, held, evict, trim)

    def unregister_cache(self, name: str) -> None:
        with self._lock:
            self._caches.pop(name, None)

    def register_cleanup(self, fn: Callable[[], object], name: str | None = None) -> str:
        """Call ``fn()`` at every cleanup (after evictions and flushing). Returns the name
        to unregister it with."""
        if not callable(fn):
            raise TypeError(f"cleanup callback must be callable, got {fn!r}")
        name = name or getattr(fn, "__qualname__", repr(fn))
        with self._lock:
            self._callbacks.append((name, fn))
        return name

    def unregister_cleanup(self, name: str) -> None:
        with self._lock:
            before = len(self._callbacks)
            self._callbacks = [(n, f) for n, f in self._callbacks if n != name]
            if len(self._callbacks) == before:
                raise ValueError(f"no cleanup callback named {name!r}")

    def add_listener(self, fn) -> None:
        """``fn(level, snapshot)`` is called when the pressure level changes (held weakly
        when ``fn`` is a bound method, so an engine can go away)."""
        ref = weakref.WeakMethod(fn) if hasattr(fn, "__self__") else (lambda: fn)
        with self._lock:
            self._listeners.append(ref)

    def _notify(self, snap):
        with self._lock:
            live = [(r, r()) for r in self._listeners]
            self._listeners = [r for r, f in live if f is not None]
        for _, fn in live:
            if fn is None:
                continue
            try:
                fn(snap.level, snap)
            except Exception as err:  # a listener must not break the call it follows
                warnings.warn(f"memory-pressure listener {fn!r} raised {err!r}", RuntimeWarning)

    def _evict_one(self, keep=None):
        for cache in list(self._caches.values()):
            if cache.evict is None:
                continue
            got = cache.evict(keep=keep)
            if got is not None:
                with self._lock:
                    self._counts["evictions"] += 1
                    self._counts["evicted_bytes"] += int(got)
                return int(got)
        return None

    def _flush_deferred(self) -> None:
        if self._provider is not None:
            return
        try:
            cuda = numba_cuda()
            if not simulator_active() and cuda.is_available():
                _flush(cuda.current_context())
        except Exception:
            pass

    def cleanup(self, reason: str = "requested", *, target: float | None = None) -> dict:
        """Free device memory until usage is below ``target``.

        Steps, each recorded with the bytes it released (by catalytic's accounting) and
        the drop in used device memory it measured: evict cached copies least recently
        used first until below target; trim the caches that can trim (a pool); flush
        Numba's deferred frees; run the registered callbacks. A cleanup started while
        one is running (from a callback, or another thread) returns at once.

        Parameters
        ----------
        reason : str, default "requested"
            Why, kept in the record.
        target : float, optional
            Used fraction in (0, 1] to get below; default: the monitor's threshold.

        Returns
        -------
        dict
            The record: ``reason``, ``time``, ``before`` and ``after`` (used bytes) and
            ``steps`` (``step``, ``released``, ``measured``); for a cleanup skipped
            because another is running, ``reason`` and ``skipped``.

        Raises
        ------
        TypeError
            ``target`` is not a number (checked before anything is evicted).
        ValueError
            ``target`` is outside (0, 1] (checked before anything is evicted).
        """
        target = self.threshold if target is None else check_fraction(target, "target")
        with self._lock:
            if self._cleaning:
                return {"reason": reason, "skipped": "a cleanup is already running"}
            self._cleaning = True
        try:
            record = {"reason": reason, "time": time.time(), "steps": []}
            before = self.snapshot("cleanup")
            record["before"] = before.used

            def step(name, released, start):
                now = self.snapshot("cleanup")
                measured = None if start.used is None or now.used is None else start.used - now.used
                record["steps"].append({"step": name, "released": int(released),
                                        "measured": measured})
                return now

            snap, released = before, 0
            while snap.fraction is not None and snap.fraction >= target:
                got = self._evict_one()
                if got is None:
                    break
                released += got
                self._flush_deferred()
                snap = self.snapshot("cleanup")
            if released:
                snap = step("evict least recently used", released, before)
            start, trimmed = snap, 0
            for cache in list(self._caches.values()):
                if cache.trim is not None:
                    trimmed += int(cache.trim() or 0)
            snap = step("trim pool", trimmed, start)
            start = snap
            self._flush_deferred()
            snap = step("flush deferred frees", 0, start)
            with self._lock:
                callbacks = list(self._callbacks)
            for name, fn in callbacks:
                start = snap
                try:
                    fn()
                except Exception as err:
                    warnings.warn(f"cleanup callback {name!r} raised {err!r}", RuntimeWarning)
                snap = step(f"callback {name}", 0, start)
            record["after"] = snap.used
            with self._lock:
                self._counts["cleanups"] += 1
                self._cleanup_log.append(record)
            return record
        finally:
            with self._lock:
                self._cleaning = False

    # -- reporting ----------------------------------------------------------------------
    def stats(self) -> dict:
        """Counts, the last snapshot, the peak, recent cleanups (with bytes freed per
        step), pressure events and leak reports; every figure measured."""
        with self._lock:
            return {
                **self._counts,
                "threshold": self.threshold,
                "level": self._level,
                "last": self._history[-1].as_dict() if self._history else None,
                "peak": self._peak.as_dict() if self._peak else None,
                "recent_cleanups": list(self._cleanup_log),
                "pressure_log": list(self._pressure_log),
                "leaks": [{k: v for k, v in x.items() if k != "message"} for x in self._leaks],
                "caches": sorted(self._caches),
                "pool": pool_stats() if pool_installed() else None,
            }

    def report(self) -> str:
        """The current reading and the counts, in words (``catalytic info`` prints it)."""
        snap = self.snapshot("report")
        s = self.stats()
        if snap.device == "host":
            head = "no GPU: host memory"
        elif snap.device == "simulator":
            head = "CUDA simulator: device memory not measurable"
        else:
            head = f"device {snap.device}"
        if snap.total:
            head += (f", {snap.used / 2**30:.2f} of {snap.total / 2**30:.2f} GiB used "
                     f"({snap.fraction:.0%}, {snap.level})")
        lines = [head,
                 f"catalytic caches hold {snap.engine_bytes} bytes; cleanup threshold "
                 f"{self.threshold:.0%}; {s['cleanups']} cleanups, {s['evictions']} evictions "
                 f"({s['evicted_bytes']} bytes), {s['pressure_events']} pressure changes, "
                 f"{len(s['leaks'])} leak reports"]
        if s["peak"]:
            lines.append(f"peak {s['peak']['used']} bytes used (after {s['peak']['op']})")
        return "\n".join(lines)

    def reset(self) -> None:
        """Forget history, counts and logs (caches and callbacks stay registered)."""
        with self._lock:
            self._history.clear()
            self._peak = None
            self._level = None
            self._window.clear()
            for k in self._counts:
                self._counts[k] = 0
            self._cleanup_log.clear()
            self._pressure_log.clear()
            self._leaks.clear()


def _check_threshold(value) -> float:
    return check_fraction(value, "memory threshold")


def _check_nbytes(nbytes) -> int:
    """``nbytes`` as an int: an integer, or a float with a whole value; finite, >= 0."""
    if isinstance(nbytes, bool):
        raise TypeError(f"nbytes must be a number of bytes, got {nbytes!r}")
    try:
        n = operator.index(nbytes)
    except TypeError:
        if not isinstance(nbytes, numbers.Real):
            raise TypeError(f"nbytes must be a number of bytes, got {nbytes!r}") from None
        x = float(nbytes)
        if not math.isfinite(x) or not x.is_integer():
            raise ValueError(f"nbytes must be a whole, finite number of bytes, "
                             f"got {nbytes!r}") from None
        n = int(x)
    if n < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    return n


_monitor: DeviceMemoryMonitor | None = None
_monitor_lock = threading.Lock()


def get_monitor() -> DeviceMemoryMonitor:
    """The process-wide monitor (threshold from ``CATALYTIC_MEMORY_THRESHOLD``)."""
    global _monitor
    if _monitor is None:
        with _monitor_lock:
            if _monitor is None:
                from catalytic.config import load_settings

                mon = DeviceMemoryMonitor(load_settings().memory_threshold)
                if pool_installed():  # chosen through NUMBA_CUDA_MEMORY_MANAGER
                    _register_pool(mon)
                _monitor = mon
    return _monitor


# -- the pooled allocator (RMM behind Numba's EMM interface): see catalytic._pool ----------
def _register_pool(mon) -> None:
    """Count the pool's blocks in use as catalytic's, and trim it at cleanups (its free
    blocks already count as free memory in the device reading)."""
    from catalytic import _pool

    mon.register_cache(
        "memory pool",
        held=lambda keep=None: int((_pool.pool_stats() or {}).get("bytes_in_use", 0)),
        trim=_pool.trim_pool,
    )


def install_pool(initial_size=None, maximum_size=None) -> str:
    """Install RAPIDS RMM's pool as Numba's device allocator (before the first GPU
    allocation) and let the monitor account for it; see
    :func:`catalytic._pool.install_pool`."""
    from catalytic import _pool

    what = _pool.install_pool(initial_size=initial_size, maximum_size=maximum_size)
    if _pool.pool_installed():
        _register_pool(get_monitor())
    return what


def pool_installed() -> bool:
    from catalytic import _pool

    return _pool.pool_installed()


def pool_stats():
    """Pool figures (bytes reserved, in use, cached; allocations, hits, misses), or None
    when no pool is installed; see :func:`catalytic._pool.pool_stats`."""
    from catalytic import _pool

    return _pool.pool_stats()


def __getattr__(name):
    if name in ("PoolTooLateError", "PoolUnavailableError", "trim_pool"):
        from catalytic import _pool

        return getattr(_pool, name)
    raise AttributeError(f"module 'catalytic.memory' has no attribute {name!r}")
