"""Engine, router and plugins: dispatch by predicted cost, forcing, statistics,
registration errors, entry points, fallback."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

import catalytic as cat
import catalytic.engine as engine_mod
from catalytic.registry import Registry
from tests.support.backends import available_backends

_ids = itertools.count()

needs_numba = pytest.mark.skipif(
    "numba-cpu" not in available_backends(), reason="the numba-cpu backend is not available"
)

#: numpy: cheap to start, slow per unit; numba-cpu: expensive to start, fast per unit.
#: predicted(n) = overhead + n / throughput crosses over at n ~ 1000.
NUMPY_COST = (1e-6, 1e6)
NUMBA_COST = (1e-3, 1e9)


class Recorder:
    """A plugin adding one operation ("double") with a numpy and a numba-cpu version
    that record which one ran."""

    def __init__(self, op=None, backends=("numpy", "numba-cpu"), sleep=0.0):
        self.op = op or f"t_double_{next(_ids)}"
        self.backends = backends
        self.calls: list[str] = []
        self.sleep = sleep

    def _impl(self, backend):
        def double(x):
            self.calls.append(backend)
            if self.sleep:
                time.sleep(self.sleep)
            return 2 * np.asarray(x)

        return double

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        registry.add_operation(self.op, work=lambda x: float(np.asarray(x).size), doc="test op")
        costs = {"numpy": NUMPY_COST, "numba-cpu": NUMBA_COST}
        for b in self.backends:
            registry.add_implementation(self.op, b, self._impl(b), cost=costs.get(b, NUMPY_COST))


@pytest.fixture
def plugin():
    eng = cat.get_engine()
    p = Recorder()
    name = eng.register_plugin(p, f"recorder-{p.op}")
    yield p
    if name in eng.plugin_names():
        eng.unregister_plugin(name)


def predicted(cost, work):
    return cost[0] + work / cost[1]


# -- dispatch -----------------------------------------------------------------------------------
@needs_numba
def test_router_dispatches_plugin_op_by_predicted_cost(plugin):
    eng = cat.get_engine()
    small, large = np.arange(10), np.arange(100_000)
    dec = eng.explain(plugin.op, small)
    assert plugin.calls == []  # explain runs nothing
    assert dec.predictions == pytest.approx(
        {"numpy": predicted(NUMPY_COST, 10), "numba-cpu": predicted(NUMBA_COST, 10)}
    )
    assert dec.sources == {"numpy": "plugin default, uncalibrated",
                           "numba-cpu": "plugin default, uncalibrated"}
    assert dec.backend == "numpy" and not dec.forced and dec.work == 10
    assert "lowest predicted cost" in dec.reason
    np.testing.assert_array_equal(eng.run(plugin.op, small), 2 * small)
    assert plugin.calls == ["numpy"]
    assert eng.last_decision.backend == "numpy"

    dec = eng.explain(plugin.op, large)
    assert dec.backend == "numba-cpu"
    assert dec.predictions["numba-cpu"] < dec.predictions["numpy"]
    eng.run(plugin.op, large)
    assert plugin.calls == ["numpy", "numba-cpu"]
    assert str(eng.last_decision).startswith(f"{plugin.op} -> numba-cpu")


class Terms:
    """A plugin op whose numba-cpu implementation adds a cost term: 1 ms per 1000
    elements of its argument, or an exception."""

    op = "terms_probe"

    def __init__(self, fail=False):
        self.fail = fail
        self.params = []

    def _terms(self, params, x):
        self.params.append(params)
        if self.fail == "raise":
            raise RuntimeError("no estimate")
        if self.fail == "nan":
            return {"staging": float("nan")}
        return {"staging": np.asarray(x).size * 1e-6}

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        registry.add_operation(self.op, work=lambda x: float(np.asarray(x).size), doc="probe")
        registry.add_implementation(self.op, "numpy", lambda x: np.asarray(x) + 1,
                                    cost=NUMPY_COST)
        registry.add_implementation(self.op, "numba-cpu", lambda x: np.asarray(x) + 1,
                                    cost=NUMBA_COST, terms=self._terms)


@needs_numba
@pytest.mark.parametrize("fail", [None, "raise", "nan"])
def test_cost_terms_are_added_and_named(fail):
    eng = cat.get_engine()
    probe = Terms(fail)
    name = eng.register_plugin(probe, f"terms-probe-{fail}")
    try:
        x = np.arange(100_000)
        dec = eng.explain(probe.op, x)
        assert probe.params and probe.params[-1] == {}  # no calibrated parameters
        if fail:  # a terms() that raises, or gives no time, rules the backend out
            assert "numba-cpu" not in dec.predictions and dec.backend == "numpy"
            assert "terms()" in str(dec.rejected["numba-cpu"])
            why = "no estimate" if fail == "raise" else "finite seconds"
            assert why in str(dec.rejected["numba-cpu"])
        else:
            assert dec.terms == {"numba-cpu": {"staging": pytest.approx(0.1)}}
            assert dec.predictions["numba-cpu"] == pytest.approx(
                predicted(NUMBA_COST, x.size) + 0.1)
            assert dec.backend == "numpy"  # the 0.1 s term outweighs numba-cpu's speed
            assert "staging 100.00 ms" in str(dec)
            forced = eng.explain(probe.op, x, backend="numba-cpu")
            assert forced.terms == dec.terms
            assert forced.predictions == pytest.approx({"numba-cpu": dec.predictions["numba-cpu"]})
    finally:
        eng.unregister_plugin(name)


@needs_numba
def test_forced_backend_argument(plugin):
    eng = cat.get_engine()
    eng.run(plugin.op, np.arange(3), backend="numba-cpu")
    assert plugin.calls == ["numba-cpu"]
    dec = eng.last_decision
    assert dec.forced and dec.backend == "numba-cpu" and "backend= argument" in dec.reason
    assert list(dec.predictions) == ["numba-cpu"]
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        eng.run(plugin.op, np.arange(3), backend="nope")
    assert plugin.calls == ["numba-cpu"]


@needs_numba
def test_catalytic_backend_environment_variable(monkeypatch, restore_engine):
    original = cat.get_engine()
    monkeypatch.setenv("CATALYTIC_BACKEND", "numba-cpu")
    eng = cat.reset_engine()
    assert cat.get_engine() is eng is not original
    p = Recorder()
    eng.register_plugin(p, "env-recorder")
    eng.run(p.op, np.arange(3))  # numpy would be predicted cheaper
    assert p.calls == ["numba-cpu"]
    assert eng.last_decision.forced and "CATALYTIC_BACKEND" in eng.last_decision.reason
    eng.run(p.op, np.arange(3), backend="numpy")  # the argument beats the environment
    assert p.calls == ["numba-cpu", "numpy"]
    L = cat.Lattice(shape=(3, 3))
    L.distance_field(0)
    assert L.last_decision.backend == "numba-cpu"
    # keyword settings beat the environment
    eng2 = cat.reset_engine(backend="numpy")
    cat.Lattice(shape=(3, 3)).distance_field(0)
    assert eng2.last_decision.backend == "numpy"


def test_reset_engine_fixture_restored_the_global_engine(restore_engine):
    # companion to the test above: the engine is the one the session started with and
    # has no forced backend left over
    assert cat.get_engine().settings.backend is None


def test_lattice_run_and_apply_transformation_reach_plugin_ops():
    eng = cat.get_engine()

    class LatticeOps:
        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("t_open_sites", work=lambda lat, **kw: float(lat.n_points),
                                   validate=lambda lat, *, offset=0: ((lat,), {"offset": offset}))
            registry.add_implementation("t_open_sites", "numpy",
                                        lambda lat, *, offset=0: lat.n_open + offset)
            registry.add_operation("t_negate", work=lambda data: float(np.asarray(data).size))
            registry.add_implementation("t_negate", "numpy", lambda data: -np.asarray(data))

    eng.register_plugin(LatticeOps(), "lattice-ops")
    try:
        L = cat.Lattice(shape=(3, 4), mask=np.arange(12).reshape(3, 4) % 3 > 0)
        assert L.run("t_open_sites") == 8
        assert L.run("t_open_sites", offset=2, backend="numpy") == 10
        negated = L.apply_transformation(np.arange(3), "t_negate")
        np.testing.assert_array_equal(negated, -np.arange(3))
        assert "t_open_sites" in eng.operations()
    finally:
        eng.unregister_plugin("lattice-ops")
    assert "t_open_sites" not in eng.operations() and "t_negate" not in eng.operations()
    with pytest.raises(ValueError, match="unknown operation"):
        L.run("t_open_sites")


# -- registration errors ------------------------------------------------------------------------
def test_duplicate_operation_name_is_an_error_and_rolls_back(plugin):
    eng = cat.get_engine()
    victim_op = f"t_only_b_{next(_ids)}"

    class Dup:
        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation(victim_op, work=lambda x: 1.0)
            registry.add_implementation(victim_op, "numpy", lambda x: x)
            registry.add_operation(plugin.op, work=lambda x: 1.0)  # taken by the recorder

    before_ops = set(eng.operations())
    before_plugins = eng.plugin_names()
    with pytest.raises(cat.PluginError) as info:
        eng.register_plugin(Dup(), "dup-plugin")
    msg = str(info.value)
    assert "dup-plugin" in msg and f"recorder-{plugin.op}" in msg and plugin.op in msg
    assert "catalytic_add_operations" in msg
    assert set(eng.operations()) == before_ops and victim_op not in eng.registry.implementations
    assert eng.plugin_names() == before_plugins
    # the first plugin's operation is intact
    np.testing.assert_array_equal(eng.run(plugin.op, np.arange(2), backend="numpy"), [0, 2])
    # the name is free again: a fixed plugin can register under it
    eng.register_plugin(Recorder(op=victim_op, backends=("numpy",)), "dup-plugin")
    eng.unregister_plugin("dup-plugin")


def test_duplicate_implementation_is_an_error(plugin):
    eng = cat.get_engine()

    class DupImpl:
        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_implementation(plugin.op, "numpy", lambda x: x)

    with pytest.raises(cat.PluginError, match="already has a 'numpy' implementation") as info:
        eng.register_plugin(DupImpl(), "dup-impl")
    assert "dup-impl" in str(info.value)
    assert "dup-impl" not in eng.plugin_names()
    assert eng.registry.implementations[plugin.op]["numpy"].plugin == f"recorder-{plugin.op}"


@pytest.mark.parametrize("hook", ["catalytic_add_backends", "catalytic_add_operations"])
def test_plugin_whose_hook_raises_names_plugin_and_hook(hook):
    eng = cat.get_engine()
    op = f"t_half_{next(_ids)}"

    class Broken:
        pass

    def add_backends(self, registry):
        registry.add_backend("t-half-backend")
        if hook == "catalytic_add_backends":
            raise RuntimeError("boom in backends")

    def add_operations(self, registry):
        registry.add_operation(op, work=lambda: 1.0)
        raise RuntimeError("boom in operations")

    Broken.catalytic_add_backends = cat.hookimpl(add_backends)
    Broken.catalytic_add_operations = cat.hookimpl(add_operations)
    before = (set(eng.operations()), set(eng.backends()), eng.plugin_names())
    with pytest.raises(cat.PluginError) as info:
        eng.register_plugin(Broken(), "broken-plugin")
    msg = str(info.value)
    assert "broken-plugin" in msg and hook in msg and "RuntimeError" in msg
    assert isinstance(info.value.__cause__, RuntimeError)
    assert (set(eng.operations()), set(eng.backends()), eng.plugin_names()) == before


def test_invalid_names_and_costs_are_rejected():
    eng = cat.get_engine()

    class BadName:
        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("has space", work=lambda: 1.0)

    class BadCost:
        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("t_bad_cost", work=lambda: 1.0)
            registry.add_implementation("t_bad_cost", "numpy", lambda: 1, cost=(0.0, 0.0))

    for p, name in ((BadName(), "bad-name"), (BadCost(), "bad-cost")):
        with pytest.raises(cat.PluginError, match=name):
            eng.register_plugin(p, name)
        assert name not in eng.plugin_names()
    assert "t_bad_cost" not in eng.operations()


@pytest.mark.parametrize("bad", ["t_trailing\n", "t-trailing\n", "\nt_leading", "t_mid\ndle",
                                 "t_tab\t", "", "1t", "t space", 42])
@pytest.mark.parametrize("where", ["operation", "backend", "implementation op",
                                   "implementation backend"])
def test_names_with_a_newline_or_other_junk_are_refused(bad, where):
    eng = cat.get_engine()
    good_op = f"t_good_{next(_ids)}"

    class Named:
        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            if where == "backend":
                registry.add_backend(bad)

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            op = bad if where in ("operation", "implementation op") else good_op
            backend = bad if where == "implementation backend" else "numpy"
            if where != "implementation op":
                registry.add_operation(op, work=lambda: 1.0)
            registry.add_implementation(op, backend, lambda: 1)

    before = (set(eng.operations()), set(eng.backends()))
    try:
        with pytest.raises(cat.PluginError, match="name must be an identifier-like string") \
                as info:
            eng.register_plugin(Named(), "named-plugin")
    finally:  # a name let through must not stay registered for the next tests
        if "named-plugin" in eng.plugin_names():
            eng.unregister_plugin("named-plugin")
    assert repr(bad) in str(info.value) and "named-plugin" in str(info.value)
    assert (set(eng.operations()), set(eng.backends())) == before
    assert "named-plugin" not in eng.plugin_names()


@pytest.mark.parametrize("cost, error", [
    ((float("nan"), 1e6), "finite"), ((1e-6, float("nan")), "finite"),
    ((float("inf"), 1e6), "finite"), ((1e-6, float("inf")), "finite"),
    ((-1e-6, 1e6), "finite"), ((1e-6, -1e6), "finite"),
    (("1e-6", 1e6), "pair of numbers"), ((1e-6,), "pair of numbers"),
    ((True, 1e6), "pair of numbers"),
])
def test_default_costs_must_be_finite(cost, error):
    eng = cat.get_engine()
    op = f"t_cost_{next(_ids)}"

    class Costed:
        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation(op, work=lambda: 1.0)
            registry.add_implementation(op, "numpy", lambda: 1, cost=cost)

    try:
        with pytest.raises(cat.PluginError, match=error) as info:
            eng.register_plugin(Costed(), "costed-plugin")
    finally:  # a cost let through must not stay registered for the next tests
        if "costed-plugin" in eng.plugin_names():
            eng.unregister_plugin("costed-plugin")
    assert f"cost of {op!r} on 'numpy'" in str(info.value) and repr(cost) in str(info.value)
    assert op not in eng.operations()


# -- backends from plugins, availability, fallback -------------------------------------------------
def test_unavailable_backend_is_rejected_with_reason():
    eng = cat.get_engine()

    class Offline:
        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend(
                "t-offline", available=(False, "no such device here"), device="gpu"
            )

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("t_offline_op", work=lambda: 1.0)
            registry.add_implementation("t_offline_op", "t-offline", lambda: 1)

    eng.register_plugin(Offline(), "offline")
    try:
        assert eng.backends()["t-offline"] == (False, "no such device here")
        with pytest.raises(cat.NoBackendError) as info:
            eng.run("t_offline_op")
        msg = str(info.value)
        assert "no such device here" in msg and "CATALYTIC_BACKEND" in msg
        with pytest.raises(cat.NoBackendError, match="cannot run"):
            eng.run("t_offline_op", backend="t-offline")
        with pytest.raises(cat.NoBackendError, match="no 'numpy' implementation"):
            eng.run("t_offline_op", backend="numpy")
    finally:
        eng.unregister_plugin("offline")
    assert "t-offline" not in eng.backends()


def test_operation_without_implementation():
    eng = cat.get_engine()

    class Empty:
        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("t_empty_op", work=lambda: 1.0)

    eng.register_plugin(Empty(), "empty")
    try:
        with pytest.raises(cat.NoBackendError, match="has no implementation"):
            eng.run("t_empty_op")
    finally:
        eng.unregister_plugin("empty")


def _flaky_gpu_plugin(fail_times):
    class FlakyGPU:
        """Backend 't-gpu' whose implementation fails ``fail_times`` times."""

        calls: list = []
        cleanups = 0

        def cleanup(self):
            type(self).cleanups += 1

        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend("t-gpu", available=True, device="gpu",
                                 cleanup=self.cleanup)

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("t_gpu_op", work=lambda x: 1.0)

            def gpu(x):
                FlakyGPU.calls.append("t-gpu")
                if len([c for c in FlakyGPU.calls if c == "t-gpu"]) <= fail_times:
                    raise RuntimeError("device out of memory")
                return x + 1

            def cpu(x):
                FlakyGPU.calls.append("numpy")
                return x + 1

            registry.add_implementation("t_gpu_op", "t-gpu", gpu, cost=(0.0, 1e12))
            registry.add_implementation("t_gpu_op", "numpy", cpu, cost=(1.0, 1.0))

    FlakyGPU.calls = []
    return FlakyGPU


def test_gpu_failure_retries_once_then_falls_back():
    eng = cat.Engine(disable_plugin_autoload=True)
    P = _flaky_gpu_plugin(fail_times=5)
    eng.register_plugin(P(), "t-gpu")
    assert eng.explain("t_gpu_op", 1).backend == "t-gpu"
    assert eng.run("t_gpu_op", 1) == 2
    assert P.calls == ["t-gpu", "t-gpu", "numpy"]
    # cleaned up before the retry, and again after it failed (no device state is left)
    assert P.cleanups == 2
    (fb,) = eng.fallbacks
    assert fb["from"] == "t-gpu" and fb["to"] == "numpy" and "device out of memory" in fb["reason"]
    assert eng.last_decision.backend == "numpy" and "fell back" in eng.last_decision.reason
    assert eng.router.stats()["t_gpu_op"]["numpy"]["fallbacks"] == 1


def test_gpu_failure_once_is_retried_on_the_gpu():
    eng = cat.Engine(disable_plugin_autoload=True)
    P = _flaky_gpu_plugin(fail_times=1)
    eng.register_plugin(P(), "t-gpu")
    assert eng.run("t_gpu_op", 1) == 2
    assert P.calls == ["t-gpu", "t-gpu"] and eng.fallbacks == []


def test_gpu_failure_without_fallback_raises():
    eng = cat.Engine(disable_plugin_autoload=True, fallback=False)
    P = _flaky_gpu_plugin(fail_times=5)
    eng.register_plugin(P(), "t-gpu")
    with pytest.raises(RuntimeError, match="out of memory"):
        eng.run("t_gpu_op", 1)
    assert P.calls == ["t-gpu", "t-gpu"]


def test_catalytic_fallback_environment_variable(monkeypatch):
    monkeypatch.setenv("CATALYTIC_FALLBACK", "0")
    assert cat.Engine(disable_plugin_autoload=True).settings.fallback is False
    monkeypatch.setenv("CATALYTIC_FALLBACK", "maybe")
    with pytest.raises(ValueError, match="CATALYTIC_FALLBACK"):
        cat.Engine()


# -- statistics -----------------------------------------------------------------------------------
def test_router_stats_count_calls_and_measured_time():
    eng = cat.get_engine()
    p = Recorder(backends=("numpy",), sleep=0.01)
    eng.register_plugin(p, "stats-recorder")
    try:
        for _ in range(3):
            eng.run(p.op, np.arange(4))
        eng.run(p.op, np.arange(4), backend="numpy")
        s = eng.router.stats()[p.op]
        assert list(s) == ["numpy"]
        row = s["numpy"]
        assert row["calls"] == 4 == len(p.calls) and row["forced"] == 1 and row["fallbacks"] == 0
        # the first call (JIT / cache loading) is kept apart from the model check
        assert row["first_call_s"] >= 0.01
        assert row["timed_calls"] == 3
        assert row["measured_s"] >= 3 * 0.01  # really measured: each call sleeps 10 ms
        assert row["mean_measured_s"] == pytest.approx(row["measured_s"] / 3)
        assert row["predicted_s"] == pytest.approx(3 * predicted(NUMPY_COST, 4))
        ratio = row["measured_s"] / row["predicted_s"]
        assert row["measured_over_predicted"] == pytest.approx(ratio)
    finally:
        eng.unregister_plugin("stats-recorder")


def test_lattice_calls_are_counted_per_backend(backend):
    eng = cat.get_engine()
    L = cat.Lattice(shape=(5, 6))
    before = eng.router.stats().get("connected_components", {}).get(backend, {}).get("calls", 0)
    L.connected_components(backend=backend)
    L.connected_components(backend=backend)
    after = eng.router.stats()["connected_components"][backend]
    assert after["calls"] == before + 2
    assert after["first_call_s"] > 0 and after["measured_s"] > 0 and after["timed_calls"] >= 1


# -- routing policy of lattices -------------------------------------------------------------------
@needs_numba
def test_smart_routing_off_sends_lattice_calls_to_numpy():
    eng = cat.get_engine()
    shape = (400, 400)
    smart = cat.Lattice(shape=shape)
    plain = cat.Lattice(shape=shape, enable_smart_routing=False)
    dec_plain = eng.explain("distance_field", plain, 0)
    assert dec_plain.backend == "numpy"
    assert "smart routing is off" in dec_plain.rejected["numba-cpu"]
    dec_smart = eng.explain("distance_field", smart, 0)
    assert dec_smart.backend == min(dec_smart.predictions, key=dec_smart.predictions.get)
    assert set(dec_smart.predictions) >= {"numpy", "numba-cpu"}
    d = plain.distance_field(0)
    assert plain.last_decision.backend == "numpy"
    assert int(d[-1, -1]) == 798
    plain.distance_field(0, backend="numba-cpu")  # naming a backend still works
    assert plain.last_decision.backend == "numba-cpu"


def test_explain_on_lattice_operations_lists_every_backend():
    eng = cat.get_engine()
    L = cat.Lattice(shape=(9, 9))
    dec = eng.explain("centrality", L, method="betweenness")
    assert dec.backend == min(dec.predictions, key=dec.predictions.get)
    for b in available_backends():
        assert b in dec.predictions or b in dec.rejected
    assert all(isinstance(r, str) and r for r in dec.rejected.values())
    # betweenness is one BFS per site: work = sites x stencil x sources
    assert dec.work == 81 * 4 * 81
    assert eng.explain("centrality", L, method="degree").work == 81 * 4
    text = str(dec)
    assert text.splitlines()[0].startswith(f"centrality -> {dec.backend}")


# -- entry points ----------------------------------------------------------------------------------
class FakeEntryPoint:
    def __init__(self, name, value, load):
        self.name, self.value, self._load = name, value, load

    def load(self):
        return self._load()


def test_broken_entry_point_is_reported_and_engine_keeps_working(monkeypatch):
    monkeypatch.delenv("CATALYTIC_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    good = Recorder(op="t_from_entry_point", backends=("numpy",))

    def broken():
        raise ImportError("No module named 'missing_dependency'")

    eps = [
        FakeEntryPoint("broken-plugin", "broken_pkg.plugin", broken),
        FakeEntryPoint("good-plugin", "good_pkg.plugin", lambda: good),
    ]
    asked = []

    def entry_points(**kw):
        asked.append(kw)
        return [ep for ep in eps if kw.get("group") == "catalytic"]

    monkeypatch.setattr(engine_mod.metadata, "entry_points", entry_points)
    with pytest.warns(RuntimeWarning, match="broken-plugin"):
        eng = cat.Engine()
    assert asked == [{"group": "catalytic"}]
    msg = eng.plugin_errors["broken-plugin"]
    assert "broken_pkg.plugin" in msg and "ImportError" in msg and "missing_dependency" in msg
    assert "good-plugin" in eng.plugin_names() and "broken-plugin" not in eng.plugin_names()
    np.testing.assert_array_equal(eng.run("t_from_entry_point", np.arange(3)), [0, 2, 4])
    # built-in operations work as before
    assert eng.run("reduce", np.arange(5), "sum") == 10
    L = cat.Lattice(shape=(4, 4), engine=eng)
    assert int(L.distance_field(0)[3, 3]) == 6


def test_plugin_autoload_can_be_disabled(monkeypatch):
    monkeypatch.setenv("CATALYTIC_DISABLE_PLUGIN_AUTOLOAD", "1")

    def entry_points(**kw):
        raise AssertionError("entry points must not be read")

    monkeypatch.setattr(engine_mod.metadata, "entry_points", entry_points)
    eng = cat.Engine()
    assert eng.plugin_errors == {} and {"numpy", "numba-cpu"} <= set(eng.plugin_names())


def test_a_backend_lifecycle_is_what_it_declared_not_attributes_of_its_plugin():
    """The engine uses the lifecycle a backend declared in add_backend; functions of the
    same names on the plugin object are not looked up (the plugin API's contract)."""
    eng = cat.Engine(disable_plugin_autoload=True)
    P = _flaky_gpu_plugin(fail_times=5)

    class Undeclared(P):
        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend("t-gpu", available=True, device="gpu")

    eng.register_plugin(Undeclared(), "t-gpu")
    assert eng.run("t_gpu_op", 1) == 2 and P.calls == ["t-gpu", "t-gpu", "numpy"]
    assert P.cleanups == 0  # a method called cleanup, never declared: not called
    backend = eng.registry.backends["t-gpu"]
    assert (backend.cleanup, backend.synchronize, backend.fatal_error) == (None, None, None)
    assert backend.monitored is False


@pytest.mark.parametrize("kwargs, match", [
    ({"cleanup": "free"}, "cleanup of backend 'x-gpu' must be callable"),
    ({"synchronize": 1}, "synchronize of backend 'x-gpu' must be callable"),
    ({"fatal_error": True}, "fatal_error of backend 'x-gpu' must be callable"),
    ({"monitored": 1}, "monitored of backend 'x-gpu' must be True or False"),
])
def test_add_backend_refuses_a_lifecycle_that_is_not_one(kwargs, match):
    reg = Registry()
    with pytest.raises(TypeError, match=match):
        reg.add_backend("x-gpu", device="gpu", **kwargs)
    assert "x-gpu" not in reg.backends


def test_the_cuda_backend_declares_its_lifecycle():
    b = cat.get_engine().registry.backends["cuda"]
    assert b.monitored is True
    assert all(callable(f) for f in (b.fatal_error, b.synchronize, b.cleanup))


# -- the contract between the lattice and the backends --------------------------------------
def test_a_backend_keeps_its_per_lattice_state_in_the_lattice_cache_and_releases_it():
    """backend_cache is the backend's own dict on the lattice; cleanup() runs the release
    each backend declared, then empties every cache; with_mask starts with none."""
    released = []

    class Cached:
        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend("t-cache", device="gpu", release=released.append)

    eng = cat.Engine(disable_plugin_autoload=True)
    eng.register_plugin(Cached(), "t-cache")
    L = cat.Lattice(shape=(4, 4), engine=eng)
    assert L.backend_cache("t-cache", create=False) is None
    cache = L.backend_cache("t-cache")
    cache["copy"] = np.arange(3)
    assert L.backend_cache("t-cache") is cache and L.backend_cache("t-cache", create=False) is cache
    assert L.with_mask(np.ones((4, 4), bool)).backend_cache("t-cache", create=False) is None
    L.cleanup()
    assert released == [L] and L.backend_cache("t-cache", create=False) is None
    L.backend_cache("t-cache")["x"] = 1
    assert L.drop_backend_cache("t-cache") == {"x": 1} and L.drop_backend_cache("t-cache") is None


def test_the_key_buffer_is_the_lattice_buffer_and_a_search_records_its_borrow():
    L = cat.Lattice(shape=(6, 6))
    assert L.key_buffer is L.key_buffer and L.key_buffer.dtype == np.uint8
    before = L.key_buffer.copy()
    assert L.last_borrow is None
    for backend in ("numpy", "numba-cpu"):
        L.find_path_catalytic(0, 35, backend=backend)
        record = L.last_borrow
        assert record is not None and record.borrowed == 36 and "own buffer" in record.method
    np.testing.assert_array_equal(L.key_buffer, before)
    L.record_borrow(None)
    assert L.last_borrow is None


def test_the_router_takes_the_routing_policy_a_first_argument_offers():
    L = cat.Lattice(shape=(8, 8), enable_gpu=False)
    allowed, reference_only, bonds = L.routing_policy()
    backends = cat.get_engine().registry.backends
    assert allowed(backends["numba-cpu"]) and not allowed(backends["cuda"])
    assert reference_only is False
    slow = cat.Lattice(shape=(8, 8), enable_smart_routing=False)
    assert slow.routing_policy()[1] is True
    assert slow.engine.explain("degree", slow).backend == "numpy"
