"""The device-memory monitor, with an injected memory-info source (no GPU needed)."""

from __future__ import annotations

import os
import re
import threading
import time
import warnings

import numpy as np
import pytest

import catalytic as cat
from catalytic.memory import DeviceMemoryMonitor, get_monitor, level_of

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


class FakeDevice:
    """A device of ``total`` bytes; ``other`` bytes used by someone else, plus what
    the fake cache holds."""

    def __init__(self, total=1000, other=0):
        self.total, self.other = total, other
        self.entries = {}  # name -> bytes, in least-recently-used order
        self.evicted = []

    def read(self):
        used = self.other + sum(self.entries.values())
        return self.total - used, self.total

    def held(self, keep=None):
        return sum(v for k, v in self.entries.items() if k != keep)

    def evict(self, keep=None):
        for name in list(self.entries):
            if name != keep:
                self.evicted.append(name)
                return self.entries.pop(name)
        return None

    def use(self, name, nbytes):
        self.entries.pop(name, None)
        self.entries[name] = nbytes


def monitor(dev, **kw):
    mon = DeviceMemoryMonitor(kw.pop("threshold", 0.85), provider=dev.read, device="fake", **kw)
    mon.register_cache("fake", dev.held, dev.evict)
    return mon


def test_levels():
    assert [level_of(f) for f in (0.0, 0.69, 0.7, 0.849, 0.85, 0.95, 1.0)] == [
        "low", "low", "elevated", "elevated", "high", "critical", "critical"]
    assert level_of(None) == "unknown"


def test_cleanup_at_the_threshold_and_not_below_evicts_lru_first():
    dev = FakeDevice(total=1000, other=100)
    mon = monitor(dev)
    for name in "abcd":
        dev.use(name, 150)  # 100 + 600 = 70%
    dev.use("a", 150)  # a is now the most recently used: order b, c, d, a
    mon.check("op")
    assert mon.stats()["cleanups"] == 0 and dev.evicted == []
    dev.use("e", 150)  # 85%: at the threshold
    snap = mon.check("op")
    assert snap.fraction == pytest.approx(0.85) and snap.level == "high"
    assert dev.evicted == ["b"]  # one eviction brings it below 85%, not all at once
    s = mon.stats()
    assert s["cleanups"] == 1 and s["evictions"] == 1 and s["evicted_bytes"] == 150
    steps = s["recent_cleanups"][-1]["steps"]
    assert steps[0] == {"step": "evict least recently used", "released": 150, "measured": 150}
    assert s["peak"]["used"] == 850


def test_callbacks_run_once_per_cleanup_and_may_call_the_monitor():
    dev = FakeDevice(total=1000, other=900)  # above the threshold, nothing to evict
    mon = monitor(dev)
    seen = []

    def callback():
        seen.append(mon.snapshot("inside").level)
        assert mon.cleanup("nested")["skipped"]  # a nested cleanup returns at once

    mon.register_cleanup(callback, "cb")
    mon.check("one")
    mon.check("two")
    assert seen == ["high", "high"]
    names = [st["step"] for st in mon.stats()["recent_cleanups"][-1]["steps"]]
    assert names == ["trim pool", "flush deferred frees", "callback cb"]
    mon.unregister_cleanup("cb")
    with pytest.raises(ValueError, match="no cleanup callback"):
        mon.unregister_cleanup("cb")


def test_threads_and_cleanups_do_not_deadlock():
    dev = FakeDevice(total=1000, other=880)
    lock = threading.Lock()
    mon = monitor(dev)

    def callback():
        with lock:
            dev.use(f"x{len(dev.entries)}", 1)
        mon.stats()
        mon.check("from a callback")

    mon.register_cleanup(callback)
    errors = []

    def worker(i):
        try:
            for _ in range(50):
                mon.check(f"op{i}")
                mon.can_allocate(10)
                mon.make_room(10)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors
    assert mon.stats()["cleanups"] >= 1


def test_leak_detector_fires_on_a_planted_leak_only():
    dev = FakeDevice(total=10**9)
    mon = monitor(dev, leak_window=8, leak_min_growth=1000)
    for i in range(16):  # steady: the same memory in use every call
        dev.use("steady", 5000)
        mon.check("steady_op")
    assert mon.stats()["leaks"] == []
    with pytest.warns(ResourceWarning, match="leak"):
        for i in range(8):
            dev.other += 4096  # grows, and catalytic's caches do not account for it
            mon.check("leaky_op")
    (leak,) = mon.stats()["leaks"]
    assert "leaky_op" in leak["ops"] and leak["growth"] >= 1000 and leak["engine_growth"] == 0
    # growth that catalytic's own cache accounts for is not a leak
    dev2 = FakeDevice(total=10**9)
    mon2 = monitor(dev2, leak_window=8, leak_min_growth=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(8):
            dev2.use(f"lattice{i}", 4096)
            mon2.check("caching_op")
    assert mon2.stats()["leaks"] == []


def test_can_allocate_only_reads_and_make_room_evicts():
    dev = FakeDevice(total=1000, other=500)
    mon = monitor(dev)
    dev.use("a", 200)
    dev.use("b", 200)
    assert mon.can_allocate(50) is True and mon.shortfall(50) is None
    assert mon.can_allocate(600) is False  # 100 free + 400 reclaimable, 90% margin: no
    short = mon.shortfall(600)
    assert short.needed == 600 and short.available == 450 and "device memory" in short
    assert mon.can_allocate(400, keep="b") is False  # b kept: only a reclaimable
    assert mon.shortfall(400, keep="b").available == 270
    assert mon.can_allocate(300) is True  # fits once the caches are emptied
    assert dev.evicted == []  # asking never evicts
    mon.make_room(250, keep="a")
    assert dev.evicted == ["b"]


@pytest.mark.parametrize("margin", [1.0, 0.5, 0.25])
def test_can_allocate_is_a_bool_that_says_whether_the_bytes_fit(margin):
    dev = FakeDevice(total=1000, other=600)
    mon = monitor(dev)
    dev.use("a", 200)  # 200 free, 200 reclaimable
    free, reclaimable = 200, 200
    # margins that are powers of two keep the products exact: the oracle is exact
    limit = int(margin * (free + reclaimable))
    for n in [0, 1, limit - 1, limit, limit + 1, 10 * limit, 10**30, 10**400]:
        got = mon.can_allocate(n, margin=margin)
        assert type(got) is bool and got == (n <= limit), n
        short = mon.shortfall(n, margin=margin)
        assert (short is None) == got
        if short is not None:
            assert short.needed == n and short.available == limit
    assert dev.evicted == []


@pytest.mark.parametrize("nbytes, error, shown", [
    (float("nan"), ValueError, "nan"),
    (float("inf"), ValueError, "inf"),
    (-1, ValueError, "-1"),
    (-0.5, ValueError, "-0.5"),
    (1.5, ValueError, "1.5"),
    (np.float64("nan"), ValueError, "nan"),
    ("10", TypeError, "'10'"),
    (None, TypeError, "None"),
    (True, TypeError, "True"),
    (1j, TypeError, "1j"),
])
def test_bad_byte_counts_are_refused_naming_the_value(nbytes, error, shown):
    dev = FakeDevice(total=1000, other=900)
    mon = monitor(dev)
    dev.use("a", 50)
    for ask in (mon.can_allocate, mon.shortfall, mon.make_room):
        with pytest.raises(error, match=rf"nbytes .*{re.escape(shown)}"):
            ask(nbytes)
    assert dev.evicted == []


@pytest.mark.parametrize("margin, error", [
    (0, ValueError), (-0.1, ValueError), (1.5, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), ("0.9", TypeError), (None, TypeError), (True, TypeError),
])
def test_bad_margins_are_refused_naming_the_value(margin, error):
    dev = FakeDevice(total=1000, other=900)
    mon = monitor(dev)
    dev.use("a", 50)
    for ask in (mon.can_allocate, mon.shortfall, mon.make_room):
        with pytest.raises(error, match=rf"margin .*{re.escape(repr(margin))}"):
            ask(10, margin=margin)
    assert dev.evicted == []


def test_whole_floats_and_numpy_integers_are_byte_counts():
    mon = DeviceMemoryMonitor(provider=lambda: (1000, 1000))
    assert mon.can_allocate(np.int64(900)) is True and mon.can_allocate(900.0) is True
    assert mon.can_allocate(np.uint8(255)) is True and mon.can_allocate(np.float32(901)) is False
    assert mon.shortfall(2.0**20).needed == 2**20


@pytest.mark.parametrize("bad, error", [
    (0, ValueError), (-0.5, ValueError), (1.5, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), ("0.5", TypeError), (False, TypeError),
])
def test_thresholds_outside_zero_one_are_refused_before_anything_is_evicted(bad, error):
    dev = FakeDevice(total=1000, other=100)
    mon = monitor(dev)
    for name in "abcd":
        dev.use(name, 150)  # 70% used
    with pytest.raises(error, match=rf"threshold .*{re.escape(repr(bad))}"):
        mon.check("op", threshold=bad)
    with pytest.raises(error, match=rf"target .*{re.escape(repr(bad))}"):
        mon.cleanup("asked", target=bad)
    with pytest.raises(error, match=rf"threshold .*{re.escape(repr(bad))}"):
        DeviceMemoryMonitor(bad)
    s = mon.stats()
    assert dev.evicted == [] and s["checks"] == 0 and s["snapshots"] == 0
    assert s["cleanups"] == 0
    # the edges of (0, 1] are accepted: at 1.0 nothing below 100% is cleaned up
    mon.check("op", threshold=1.0)
    assert mon.stats()["cleanups"] == 0 and dev.evicted == []


def test_threshold_must_be_a_fraction():
    with pytest.raises(ValueError, match="threshold"):
        DeviceMemoryMonitor(1.5)


@pytest.mark.skipif(SIM, reason="the host reading is what a machine without GPU or simulator gets")
def test_without_a_gpu_the_monitor_reports_host_memory():
    from catalytic.device import probe

    if probe()[0]:
        pytest.skip("a GPU is present")
    snap = DeviceMemoryMonitor().snapshot()
    assert snap.device == "host" and snap.total > 0 and 0 <= snap.fraction <= 1
    assert "no GPU: host memory" in DeviceMemoryMonitor().report()


# -- the engine: pressure hook, synchronising timings, sticky failures ---------------------------
def _gpu_plugin(impl, *, sync=None, fatal=None):
    """A plugin adding a monitored 'fakegpu' backend for op 'gpu_op'."""

    class Hooks:
        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend("fakegpu", device="gpu", synchronize=sync,
                                 fatal_error=fatal, monitored=True)

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("gpu_op", work=lambda x: 1.0)
            registry.add_implementation("gpu_op", "fakegpu", impl, cost=(0.0, 1e12))
            registry.add_implementation("gpu_op", "numpy", lambda x: x + 1, cost=(1.0, 1.0))

    return Hooks()


def test_pressure_hook_reaches_plugins(monkeypatch):
    dev = FakeDevice(total=1000, other=100)
    mon = get_monitor()
    monkeypatch.setattr(mon, "_provider", dev.read)
    monkeypatch.setattr(mon, "_device", "fake")
    monkeypatch.setattr(mon, "_level", None)
    eng = cat.Engine(disable_plugin_autoload=True)
    levels = []

    class Listener:
        @cat.hookimpl
        def catalytic_memory_pressure(self, level, snapshot):
            levels.append((level, snapshot.used))

    eng.register_plugin(_gpu_plugin(lambda x: x * 2), "fake-gpu")
    eng.register_plugin(Listener(), "listener")
    assert eng.run("gpu_op", 3) == 6
    dev.other = 900
    eng.run("gpu_op", 3)
    eng.run("gpu_op", 3)  # same level: no new event
    assert levels == [("low", 100), ("high", 900)]


def test_a_pressure_hook_that_raises_is_named_and_the_other_plugins_still_hear(monkeypatch):
    dev = FakeDevice(total=1000, other=100)
    mon = get_monitor()
    monkeypatch.setattr(mon, "_provider", dev.read)
    monkeypatch.setattr(mon, "_device", "fake")
    monkeypatch.setattr(mon, "_level", None)
    eng = cat.Engine(disable_plugin_autoload=True)
    heard = {"before": [], "after": [], "level-only": []}

    class Listener:
        def __init__(self, name):
            self.name = name

        @cat.hookimpl
        def catalytic_memory_pressure(self, level, snapshot):
            heard[self.name].append((level, snapshot.used))

    class Broken:
        @cat.hookimpl
        def catalytic_memory_pressure(self, level, snapshot):
            raise RuntimeError(f"cannot free at {level}")

    class LevelOnly:  # pluggy lets an implementation take a subset of the arguments
        @cat.hookimpl
        def catalytic_memory_pressure(self, level):
            heard["level-only"].append(level)

    eng.register_plugin(_gpu_plugin(lambda x: x * 2), "fake-gpu")
    eng.register_plugin(Listener("before"), "listener-before")
    eng.register_plugin(Broken(), "broken-listener")
    eng.register_plugin(Listener("after"), "listener-after")
    eng.register_plugin(LevelOnly(), "level-only")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert eng.run("gpu_op", 3) == 6
        dev.other = 900
        assert eng.run("gpu_op", 3) == 6
    assert heard == {"before": [("low", 100), ("high", 900)],
                     "after": [("low", 100), ("high", 900)], "level-only": ["low", "high"]}
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert messages == [
        f"plugin 'broken-listener' failed in hook catalytic_memory_pressure: "
        f"RuntimeError: cannot free at {level}" for level in ("low", "high")]


def test_a_wrapper_on_the_pressure_hook_is_named_and_not_run(monkeypatch):
    dev = FakeDevice(total=1000, other=100)
    mon = get_monitor()
    monkeypatch.setattr(mon, "_provider", dev.read)
    monkeypatch.setattr(mon, "_device", "fake")
    monkeypatch.setattr(mon, "_level", None)
    eng = cat.Engine(disable_plugin_autoload=True)
    ran, heard = [], []

    class Wrapper:
        @cat.hookimpl(wrapper=True)
        def catalytic_memory_pressure(self, level, snapshot):
            ran.append(level)
            return (yield)

    class Listener:
        @cat.hookimpl
        def catalytic_memory_pressure(self, level, snapshot):
            heard.append(level)

    eng.register_plugin(_gpu_plugin(lambda x: x * 2), "fake-gpu")
    eng.register_plugin(Listener(), "listener")
    eng.register_plugin(Wrapper(), "wrapping-plugin")
    with pytest.warns(RuntimeWarning, match="plugin 'wrapping-plugin': a wrapper on hook "
                                            "catalytic_memory_pressure is not run"):
        assert eng.run("gpu_op", 3) == 6
    assert ran == [] and heard == ["low"]


def test_gpu_time_is_recorded_after_synchronising():
    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(_gpu_plugin(lambda x: x, sync=lambda: time.sleep(0.05)), "fake-gpu")
    for _ in range(3):
        eng.run("gpu_op", 1)
    s = eng.router.stats()["gpu_op"]["fakegpu"]
    assert s["first_call_s"] >= 0.05 and s["mean_measured_s"] >= 0.05


def test_a_sticky_error_disables_the_backend_at_once():
    calls = []

    class IllegalAddress(RuntimeError):
        code = 700

    def broken(x):
        calls.append(x)
        raise IllegalAddress("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")

    from catalytic.backends.cuda_backend import fatal_error

    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(_gpu_plugin(broken, fatal=fatal_error), "fake-gpu")
    with pytest.warns(RuntimeWarning, match="sticky CUDA error"):
        assert eng.run("gpu_op", 1) == 2  # fell back to numpy, without a retry
    assert calls == [1]
    ok, why = eng.backends()["fakegpu"]
    assert not ok and "CUDA_ERROR_ILLEGAL_ADDRESS" in why
    assert eng.run("gpu_op", 1) == 2 and calls == [1]  # never tried again
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in eng.explain("gpu_op", 1).rejected["fakegpu"]


def test_fatal_error_recognises_sticky_codes_only():
    from catalytic.backends.cuda_backend import fatal_error

    class Err(Exception):
        def __init__(self, code, msg):
            super().__init__(msg)
            self.code = code

    assert "CUDA_ERROR_LAUNCH_FAILED" in fatal_error(Err(719, "launch failed"))
    assert fatal_error(Err(2, "CUDA_ERROR_OUT_OF_MEMORY")) is None
    assert fatal_error(RuntimeError("oops")) is None
    assert "ILLEGAL_ADDRESS" in fatal_error(RuntimeError("[700] CUDA_ERROR_ILLEGAL_ADDRESS"))


def test_every_builtin_operation_declares_its_host_memory():
    eng = cat.get_engine()
    builtin = [op for op in eng.operations() if eng.registry.operations[op].plugin == "catalytic"]
    missing = [op for op in builtin if eng.registry.operations[op].memory is None]
    assert len(builtin) >= 28 and missing == []


def test_host_guard_refuses_an_oversized_lattice_before_allocating():
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(cat.InsufficientMemoryError) as info:
        cat.Lattice(shape=(2**20, 2**20), mask=np.ones((1, 1), bool))
    elapsed = time.perf_counter() - t0
    assert info.value.needed > info.value.available
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB
    assert elapsed < 1.0
