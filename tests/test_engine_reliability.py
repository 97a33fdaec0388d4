"""Engine reliability: plugins whose ``supports()``/``work()`` raise, duplicate plugin
names, the circuit breaker for a failing non-CPU backend and the bounded fallback
record, calibration-file validation, and the ``CATALYTIC_*`` whitespace rule."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

import catalytic as cat
import catalytic.engine as engine_mod
from catalytic.cli import cmd_info, main
from catalytic.config import load_settings
from catalytic.errors import CalibrationError
from catalytic.router import read_calibration, shipped_calibration_path


def _engine(**overrides) -> cat.Engine:
    return cat.Engine(disable_plugin_autoload=True, **overrides)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No CATALYTIC_* variable from the outside, and an empty user config directory."""
    for var in ("CATALYTIC_BACKEND", "CATALYTIC_FALLBACK", "CATALYTIC_MEMORY_THRESHOLD",
                "CATALYTIC_CALIBRATION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CATALYTIC_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


@pytest.fixture
def global_engine(restore_engine, monkeypatch):
    """``install(eng)`` makes ``eng`` the process-wide engine (``None``: built on the
    next ``get_engine()``) for the test; the session's engine comes back afterwards."""

    def install(eng):
        monkeypatch.setattr(engine_mod, "_engine", eng)

    return install


# -- 3. plugins whose supports() or work() raise ----------------------------------------------
class Hooks:
    """Plugin with two CPU backends ``t-fast`` (cheaper) and ``t-slow``, and one
    operation ``t_op`` on both; ``supports`` maps backend -> supports function,
    ``work`` replaces the operation's work function."""

    def __init__(self, supports=None, work=None, validate=None):
        self.supports = supports or {}
        self.work = work or (lambda x: float(np.asarray(x).size))
        self.validate = validate
        self.calls: list[str] = []

    @cat.hookimpl
    def catalytic_add_backends(self, registry):
        registry.add_backend("t-fast")
        registry.add_backend("t-slow")

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        registry.add_operation("t_op", work=self.work, validate=self.validate)
        for name, cost in (("t-slow", (1.0, 1.0)), ("t-fast", (0.0, 1e12))):
            def impl(x, name=name):
                self.calls.append(name)
                return np.asarray(x) + 1

            registry.add_implementation("t_op", name, impl, cost=cost,
                                        supports=self.supports.get(name))


def _raise(err):
    def supports(*args, **kwargs):
        raise err

    return supports


def test_supports_that_raises_rules_out_only_that_backend():
    eng = _engine()
    p = Hooks(supports={"t-fast": _raise(RuntimeError("cannot inspect dtype"))})
    eng.register_plugin(p, "hooks-plugin")
    dec = eng.explain("t_op", np.arange(3))
    assert dec.backend == "t-slow" and "t-fast" not in dec.predictions
    why = dec.rejected["t-fast"]
    assert "'hooks-plugin'" in why and "supports()" in why
    assert "RuntimeError: cannot inspect dtype" in why and "'t-fast'" in why
    assert "cannot run: plugin 'hooks-plugin'" in str(dec)
    np.testing.assert_array_equal(eng.run("t_op", np.arange(3)), [1, 2, 3])
    assert p.calls == ["t-slow"]


def test_supports_that_raises_everywhere_is_a_plugin_error():
    eng = _engine()
    boom = KeyError("shape")
    p = Hooks(supports={"t-fast": _raise(RuntimeError("no")), "t-slow": _raise(boom)})
    eng.register_plugin(p, "hooks-plugin")
    with pytest.raises(cat.PluginError) as info:
        eng.run("t_op", np.arange(3))
    msg = str(info.value)
    assert "'hooks-plugin'" in msg and "supports()" in msg and "t_op" in msg
    assert "KeyError" in msg and "RuntimeError: no" in msg
    assert "unregister_plugin('hooks-plugin')" in msg
    assert info.value.__cause__ is boom  # the first backend in preference order
    assert p.calls == []


def test_forced_backend_whose_supports_raises_is_a_plugin_error():
    eng = _engine()
    boom = RuntimeError("cannot inspect dtype")
    eng.register_plugin(Hooks(supports={"t-fast": _raise(boom)}), "hooks-plugin")
    with pytest.raises(cat.PluginError) as info:
        eng.run("t_op", np.arange(3), backend="t-fast")
    msg = str(info.value)
    assert "'hooks-plugin'" in msg and "supports()" in msg and "backend= argument" in msg
    assert info.value.__cause__ is boom
    # the other backend is unaffected
    np.testing.assert_array_equal(eng.run("t_op", np.arange(2), backend="t-slow"), [1, 2])


def test_work_that_raises_routes_by_preference_without_predictions():
    eng = _engine()

    def work(x):
        raise ZeroDivisionError("bad work count")

    p = Hooks(work=work)
    eng.register_plugin(p, "hooks-plugin")
    dec = eng.explain("t_op", np.arange(3))
    # t-fast is predicted far cheaper; without a prediction, registration order decides
    assert dec.backend == "t-slow" and dec.predictions == {} and np.isnan(dec.work)
    assert "'hooks-plugin'" in dec.reason and "work()" in dec.reason
    assert "ZeroDivisionError: bad work count" in dec.reason and "preference order" in dec.reason
    assert dec.reason in str(dec)
    np.testing.assert_array_equal(eng.run("t_op", np.arange(3)), [1, 2, 3])
    assert p.calls == ["t-slow"]
    forced = eng.explain("t_op", np.arange(3), backend="t-fast")
    assert forced.backend == "t-fast" and forced.forced and "work()" in forced.reason
    assert eng.router.stats()["t_op"]["t-slow"]["calls"] == 1


@pytest.mark.parametrize("count, shown", [
    (float("nan"), "nan"), (np.float64("nan"), "nan"), (float("inf"), "inf"),
    (-float("inf"), "-inf"), (-1.0, "-1.0"), (-3, "-3.0"),
])
def test_work_that_is_not_a_finite_count_routes_without_predictions(prof, count, shown):
    eng = _engine()
    p = Hooks(work=lambda x: count)
    eng.register_plugin(p, "hooks-plugin")
    dec = eng.explain("t_op", np.arange(3))
    # as for a work() that raises: no prediction, the first backend in preference order
    assert dec.backend == "t-slow" and dec.predictions == {} and np.isnan(dec.work)
    assert "'hooks-plugin'" in dec.reason and "work()" in dec.reason
    assert f"finite number >= 0, got {shown}" in dec.reason and "nan s" not in dec.reason
    for _ in range(3):
        np.testing.assert_array_equal(eng.run("t_op", np.arange(3)), [1, 2, 3])
    assert p.calls == ["t-slow"] * 3
    forced = eng.explain("t_op", np.arange(3), backend="t-fast")
    assert forced.predictions == {} and f"got {shown}" in forced.reason
    # nothing that is not a number reaches the statistics or the profile's JSON
    stats = eng.router.stats()["t_op"]["t-slow"]
    assert stats["calls"] == 3 and stats["timed_calls"] == 0 and stats["predicted_s"] == 0
    json.dumps(stats, allow_nan=False)
    recs = [r for r in prof.as_dict()["records"] if r["name"] == "t_op"]
    assert len(recs) == 3 and all("'hooks-plugin'" in r["reason"] for r in recs)
    assert not any("predicted_s" in r or "work" in r for r in recs)
    json.dumps(prof.as_dict(), allow_nan=False)


def test_a_finite_count_of_zero_is_routed_by_the_overheads():
    eng = _engine()
    eng.register_plugin(Hooks(work=lambda x: 0), "hooks-plugin")
    dec = eng.explain("t_op", np.arange(3))
    assert dec.predictions == {"t-fast": 0.0, "t-slow": 1.0} and dec.backend == "t-fast"


def test_validate_errors_reach_the_caller_unchanged():
    eng = _engine()

    def validate(x):
        raise IndexError(f"site {x!r} is out of range")

    eng.register_plugin(Hooks(validate=validate), "hooks-plugin")
    with pytest.raises(IndexError, match="site 7 is out of range"):
        eng.run("t_op", 7)


def test_fallback_skips_a_cpu_backend_whose_supports_raises():
    eng = _engine()
    P = _failing_gpu_plugin()
    eng.register_plugin(P(), "t-gpu")

    class BrokenCPU:
        """A CPU backend for t_op_gpu, predicted cheaper than numpy, whose supports()
        raises."""

        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend("t-cpu")

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_implementation("t_op_gpu", "t-cpu", lambda x: x + 1, cost=(0.0, 1e12),
                                        supports=_raise(RuntimeError("cannot inspect dtype")))

    eng.register_plugin(BrokenCPU(), "broken-cpu")
    assert eng.run("t_op_gpu", 1) == 2  # numpy is the CPU backend that can take it
    assert P.gpu_calls == 2 and eng.fallbacks[-1]["to"] == "numpy"
    assert "'broken-cpu' failed in hook supports()" in eng.last_decision.rejected["t-cpu"]


def test_duplicate_plugin_name_is_a_plugin_error():
    eng = _engine()
    first = Hooks()
    eng.register_plugin(first, "hooks-plugin")

    class Other:
        pass

    with pytest.raises(cat.PluginError) as info:
        eng.register_plugin(Other(), "hooks-plugin")
    msg = str(info.value)
    assert "'hooks-plugin'" in msg and "already registered" in msg and "\n" not in msg
    with pytest.raises(cat.PluginError, match="already registered as 'hooks-plugin'"):
        eng.register_plugin(first, "hooks-plugin-again")
    assert eng.pm.get_plugin("hooks-plugin") is first and "hooks-plugin-again" not in eng.plugin_names()
    np.testing.assert_array_equal(eng.run("t_op", np.arange(2)), [1, 2])


# -- 4. circuit breaker and bounded fallback record -------------------------------------------
def _failing_gpu_plugin():
    class FailingGPU:
        """Backend 't-gpu' (device gpu) whose implementation raises ``errors[i]`` on
        call i (then the last one forever; None: succeed); numpy runs it too."""

        errors: list = [RuntimeError("device lost")]
        gpu_calls = 0

        @cat.hookimpl
        def catalytic_add_backends(self, registry):
            registry.add_backend("t-gpu", available=True, device="gpu")

        @cat.hookimpl
        def catalytic_add_operations(self, registry):
            registry.add_operation("t_op_gpu", work=lambda x: 1.0)

            def gpu(x):
                cls = FailingGPU
                err = cls.errors[min(cls.gpu_calls, len(cls.errors) - 1)]
                cls.gpu_calls += 1
                if err is not None:
                    raise err
                return x + 1

            registry.add_implementation("t_op_gpu", "t-gpu", gpu, cost=(0.0, 1e12))
            registry.add_implementation("t_op_gpu", "numpy", lambda x: x + 1, cost=(1.0, 1.0))

    return FailingGPU


def test_repeated_failures_disable_the_backend(global_engine, capsys):
    eng = _engine()
    P = _failing_gpu_plugin()
    eng.register_plugin(P(), "t-gpu")
    limit = engine_mod.BACKEND_FAILURE_LIMIT
    assert eng.explain("t_op_gpu", 1).backend == "t-gpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning before the limit
        for i in range(limit - 1):
            assert eng.run("t_op_gpu", 1) == 2
    assert P.gpu_calls == 2 * (limit - 1)
    assert eng.backends()["t-gpu"] == (True, "")
    with pytest.warns(RuntimeWarning, match="backend 't-gpu' disabled for this process"):
        assert eng.run("t_op_gpu", 1) == 2
    assert P.gpu_calls == 2 * limit
    assert "now disabled" in eng.fallbacks[-1]["reason"]
    # later calls do not try the backend at all
    for _ in range(5):
        assert eng.run("t_op_gpu", 1) == 2
    assert P.gpu_calls == 2 * limit
    assert eng.last_decision.backend == "numpy" and not eng.last_decision.forced
    assert len(eng.fallbacks) == limit and eng.fallback_count == limit

    ok, why = eng.backends()["t-gpu"]
    assert not ok and "RuntimeError" in why and "device lost" in why and f"{limit} calls" in why
    dec = eng.explain("t_op_gpu", 1)
    assert dec.backend == "numpy" and why in dec.rejected["t-gpu"]
    with pytest.raises(cat.NoBackendError, match="disabled for this process"):
        eng.run("t_op_gpu", 1, backend="t-gpu")

    global_engine(eng)
    assert cmd_info(None) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("t-gpu")]
    assert "UNAVAILABLE" in line and "disabled for this process" in line and "device lost" in line


def test_a_success_resets_the_count_and_other_exception_types_start_over():
    eng = _engine()
    P = _failing_gpu_plugin()
    boom, lost = RuntimeError("device lost"), OSError("driver reset")
    # calls (each failing twice unless said): 1, 2; 3 succeeds at once; 4, 5;
    # 6 with OSError; 7, 8 with RuntimeError (then RuntimeError forever)
    P.errors = [boom, boom, boom, boom, None, boom, boom, boom, boom, lost, lost, boom]
    eng.register_plugin(P(), "t-gpu")
    for _ in range(8):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert eng.run("t_op_gpu", 1) == 2
    assert P.gpu_calls == 15
    assert eng.backends()["t-gpu"][0] is True and eng.fallback_count == 7
    # call 9: the third RuntimeError call in a row since the OSError
    with pytest.warns(RuntimeWarning, match="disabled"):
        eng.run("t_op_gpu", 1)
    assert eng.backends()["t-gpu"][0] is False


def test_a_retry_that_succeeds_resets_the_count():
    eng = _engine()
    P = _failing_gpu_plugin()
    boom = RuntimeError("device lost")
    P.errors = [boom, boom, boom, boom, boom, None, boom, boom, boom, boom, None]
    eng.register_plugin(P(), "t-gpu")
    for _ in range(6):
        eng.run("t_op_gpu", 1)
    assert P.gpu_calls == 11 and eng.fallback_count == 4
    assert eng.backends()["t-gpu"][0] is True


def test_reset_backend_re_enables_and_refresh_does_not():
    eng = _engine()
    P = _failing_gpu_plugin()
    eng.register_plugin(P(), "t-gpu")
    with pytest.warns(RuntimeWarning, match="disabled"):
        for _ in range(engine_mod.BACKEND_FAILURE_LIMIT):
            eng.run("t_op_gpu", 1)
    eng.registry.refresh()
    assert eng.backends()["t-gpu"][0] is False
    assert eng.explain("t_op_gpu", 1).backend == "numpy"
    eng.reset_backend("t-gpu")
    assert eng.backends()["t-gpu"] == (True, "")
    assert eng.explain("t_op_gpu", 1).backend == "t-gpu"
    P.errors = [None]
    P.gpu_calls = 0
    assert eng.run("t_op_gpu", 1) == 2 and eng.last_decision.backend == "t-gpu"
    with pytest.raises(ValueError, match="unknown backend 'nope'.*t-gpu"):
        eng.reset_backend("nope")


def test_without_fallback_a_failing_backend_is_never_disabled():
    eng = _engine(fallback=False)
    P = _failing_gpu_plugin()
    eng.register_plugin(P(), "t-gpu")
    for _ in range(engine_mod.BACKEND_FAILURE_LIMIT + 1):
        with pytest.raises(RuntimeError, match="device lost"):
            eng.run("t_op_gpu", 1)
    assert P.gpu_calls == 2 * (engine_mod.BACKEND_FAILURE_LIMIT + 1)
    assert eng.backends()["t-gpu"] == (True, "") and eng.fallback_count == 0


def test_fallback_record_is_bounded_and_the_count_is_complete():
    eng = _engine()
    P = _failing_gpu_plugin()
    # alternate the exception type call by call: never disabled, always falls back
    P.errors = [RuntimeError("a"), RuntimeError("a"), OSError("b"), OSError("b")] * 80
    eng.register_plugin(P(), "t-gpu")
    n = engine_mod.FALLBACK_RECORD_MAX + 50
    for _ in range(n):
        assert eng.run("t_op_gpu", 1) == 2
    assert eng.backends()["t-gpu"][0] is True
    assert eng.fallback_count == n
    assert len(eng.fallbacks) == engine_mod.FALLBACK_RECORD_MAX
    assert "OSError: b" in eng.fallbacks[-1]["reason"]  # the newest are kept
    assert eng.router.stats()["t_op_gpu"]["numpy"]["fallbacks"] == n


# -- 5. calibration files --------------------------------------------------------------------
GOOD = {
    "version": 1,
    "created": "2026-01-01T00:00:00+00:00",
    "machine": {"cpu_count": 2},
    "model": "seconds = overhead_s + work / throughput",
    "entries": {
        "distance_field": {
            "numba-cpu": {"overhead_s": 1e-5, "throughput": 1e8, "samples": [[10.0, 1e-5]]},
        },
        # operations and backends of absent plugins are fine
        "t_absent_op": {"t-absent-backend": {"overhead_s": 0.0, "throughput": 1.0}},
    },
}


def _write(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _entry(**change):
    doc = json.loads(json.dumps(GOOD))
    entry = doc["entries"]["distance_field"]["numba-cpu"]
    for k, v in change.items():
        if v is _DROP:
            del entry[k]
        else:
            entry[k] = v
    return doc


_DROP = object()
_AT = "entries.distance_field.numba-cpu"


def _top(**change):
    doc = json.loads(json.dumps(GOOD))
    for k, v in change.items():
        if v is _DROP:
            del doc[k]
        else:
            doc[k] = v
    return doc


def test_a_good_file_and_the_shipped_file_are_accepted(tmp_path, clean_env):
    eng = _engine(calibration_path=str(_write(tmp_path / "cal.json", GOOD)))
    assert eng.router.calibration["distance_field"]["numba-cpu"]["throughput"] == 1e8
    assert eng.router.calibration_problem is None
    assert read_calibration(shipped_calibration_path())["version"] == 1


@pytest.mark.parametrize("doc, key, words", [
    (_top(extra=1), "extra", "unknown key"),
    (_top(entries=_DROP), "entries", "missing"),
    (_top(version="1"), "version", "must be an integer"),
    (_top(version=2), "version", "unsupported version 2"),
    (_top(version=True), "version", "must be an integer"),
    (_top(entries=[]), "entries", "must be an object"),
    (_top(model=3), "model", "must be a string"),
    (_top(entries={"distance_field": [1]}), "entries.distance_field", "must be an object"),
    (_top(entries={"distance_field": {"numpy": 5}}), "entries.distance_field.numpy",
     "must be an object"),
    (_entry(throughput=-1.0), f"{_AT}.throughput", "must be a finite number > 0, got -1.0"),
    (_entry(throughput=0), f"{_AT}.throughput", "> 0, got 0"),
    (_entry(throughput="fast"), f"{_AT}.throughput", "got 'fast'"),
    (_entry(overhead_s=-1e-6), f"{_AT}.overhead_s", "must be a finite number >= 0"),
    (_entry(overhead_s=None), f"{_AT}.overhead_s", "got None"),
    (_entry(throughput=_DROP), f"{_AT}.throughput", "missing"),
    (_entry(throughputs=1.0), f"{_AT}.throughputs", "unknown key"),
    (_entry(samples=[[1.0]]), f"{_AT}.samples[0]", "[work, seconds]"),
    (_entry(samples={}), f"{_AT}.samples", "must be a list"),
    (_top(terms=[]), "terms", "must be an object"),
    (_top(terms={"cuda": 5}), "terms.cuda", "must be an object of parameters"),
    (_top(terms={"cuda": {"launch_s": -1e-6}}), "terms.cuda.launch_s", "finite number >= 0"),
    (_top(terms={"cuda": {"launch_s": "fast"}}), "terms.cuda.launch_s", "got 'fast'"),
    ([1, 2], None, "must be a JSON object"),
])
def test_schema_errors_name_the_file_and_the_key(tmp_path, clean_env, doc, key, words):
    path = _write(tmp_path / "bad.json", doc)
    with pytest.raises(CalibrationError) as info:
        _engine(calibration_path=str(path))
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, cat.CatalyticError)
    assert err.path == str(path) and err.key == key
    msg = str(err)
    assert repr(str(path)) in msg and words in msg
    if key is not None:
        assert f": {key}: " in msg


def test_cost_term_parameters_reach_the_router(tmp_path, clean_env):
    doc = _top(terms={"cuda": {"launch_s": 2e-6, "pcie_bytes_per_s": 1e10}})
    eng = _engine(calibration_path=str(_write(tmp_path / "cal.json", doc)))
    assert eng.router.term_params == {"cuda": {"launch_s": 2e-6, "pcie_bytes_per_s": 1e10}}
    assert _engine(calibration_path=str(_write(tmp_path / "plain.json", GOOD))
                   ).router.term_params == {}


def test_non_finite_numbers_are_rejected(tmp_path, clean_env):
    text = json.dumps(GOOD).replace("100000000.0", "Infinity")
    assert "Infinity" in text
    path = _write(tmp_path / "inf.json", text)
    with pytest.raises(CalibrationError, match=f"{_AT}.throughput: must be a finite number"):
        read_calibration(path)


def test_malformed_json_names_the_file_line_and_column(tmp_path, clean_env):
    path = _write(tmp_path / "broken.json", '{\n "version": 1,\n "entries": {,}\n}\n')
    with pytest.raises(CalibrationError) as info:
        _engine(calibration_path=str(path))
    msg = str(info.value)
    assert str(path) in msg and "not valid JSON" in msg and "line 3, column 14" in msg
    assert info.value.key is None


def test_bad_calibration_environment_file_makes_info_say_so(tmp_path, clean_env, monkeypatch,
                                                           global_engine, capsys):
    path = _write(tmp_path / "env.json", _entry(throughput=-3.0))
    monkeypatch.setenv("CATALYTIC_CALIBRATION", f" {path} ")
    with pytest.raises(CalibrationError, match="env.json"):
        cat.Engine()
    global_engine(None)
    assert main(["info"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert str(path) in captured.err and f"{_AT}.throughput" in captured.err
    assert "PROBLEM" in captured.err


def test_bad_user_file_is_reported_and_the_shipped_file_used(clean_env, global_engine, capsys):
    user = _write(clean_env / "config" / "catalytic" / "calibration.json", '{"version": 1,')
    with pytest.warns(RuntimeWarning, match="calibration.json.*not valid JSON"):
        eng = cat.Engine()
    assert str(user) in eng.router.calibration_problem
    assert eng.router.calibration_source == str(shipped_calibration_path())
    assert eng.router.calibration  # the shipped entries are in use
    global_engine(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # info prints the problem; it does not warn it again
        assert cmd_info(None) == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("PROBLEM")]
    assert str(user) in line and "not valid JSON" in line
    # a good user file is used
    _write(user, GOOD)
    assert cat.Engine().router.calibration_source == str(user)


# -- 6. environment ---------------------------------------------------------------------------
def test_unknown_backend_setting_is_reported_by_info(clean_env, monkeypatch, global_engine, capsys):
    monkeypatch.setenv("CATALYTIC_BACKEND", "garbage")
    with pytest.warns(RuntimeWarning, match="CATALYTIC_BACKEND='garbage'.*numba-cpu, numpy"):
        eng = cat.Engine()
    with pytest.raises(ValueError, match="unknown backend 'garbage'; registered: .*numpy"):
        eng.run("reduce", np.arange(3), "sum")
    global_engine(None)
    assert cmd_info(None) == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("PROBLEM")]
    assert "CATALYTIC_BACKEND='garbage'" in line and "numba-cpu" in line and "numpy" in line


def test_known_backend_setting_is_shown_by_info(clean_env, monkeypatch, global_engine, capsys):
    monkeypatch.setenv("CATALYTIC_BACKEND", "numpy")
    global_engine(None)
    assert cmd_info(None) == 0
    assert "forced backend: numpy" in capsys.readouterr().out


@pytest.mark.parametrize("var, raw, setting, want", [
    ("CATALYTIC_BACKEND", " numpy\n", "backend", "numpy"),
    ("CATALYTIC_BACKEND", "   ", "backend", None),
    ("CATALYTIC_CALIBRATION", " /tmp/c.json ", "calibration_path", "/tmp/c.json"),
    ("CATALYTIC_CALIBRATION", " ", "calibration_path", None),
    ("CATALYTIC_FALLBACK", " 0 ", "fallback", False),
    ("CATALYTIC_FALLBACK", "", "fallback", True),
    ("CATALYTIC_FALLBACK", " Off", "fallback", False),
    ("CATALYTIC_MEMORY_THRESHOLD", " 0.5\t", "memory_threshold", 0.5),
    ("CATALYTIC_MEMORY_THRESHOLD", "", "memory_threshold", 0.85),
    ("CATALYTIC_DISABLE_PLUGIN_AUTOLOAD", " ", "disable_plugin_autoload", False),
])
def test_every_variable_is_stripped_and_empty_means_unset(clean_env, monkeypatch, var, raw,
                                                          setting, want):
    monkeypatch.setenv(var, raw)
    assert getattr(load_settings(), setting) == want


def test_bad_values_name_the_variable_and_the_raw_value(clean_env, monkeypatch):
    monkeypatch.setenv("CATALYTIC_FALLBACK", " maybe ")
    with pytest.raises(ValueError, match="CATALYTIC_FALLBACK=' maybe ' is not a boolean"):
        load_settings()
    monkeypatch.setenv("CATALYTIC_FALLBACK", "1")
    monkeypatch.setenv("CATALYTIC_MEMORY_THRESHOLD", "lots")
    with pytest.raises(ValueError, match="CATALYTIC_MEMORY_THRESHOLD='lots' is not a number"):
        load_settings()


@pytest.mark.parametrize("raw", ["1.5", " 0", "-0.2", "nan", "inf", "1e309"])
def test_a_memory_threshold_outside_zero_one_names_the_variable(clean_env, monkeypatch, raw):
    monkeypatch.setenv("CATALYTIC_MEMORY_THRESHOLD", raw)
    shown = f"CATALYTIC_MEMORY_THRESHOLD={raw!r} is not in (0, 1]"
    with pytest.raises(ValueError, match=re.escape(shown)):
        load_settings()
    with pytest.raises(ValueError, match=re.escape(shown)):
        cat.Engine()
    monkeypatch.setenv("CATALYTIC_MEMORY_THRESHOLD", "1")  # the upper edge is a threshold
    assert load_settings().memory_threshold == 1.0


@pytest.mark.parametrize("value, error", [
    (1.5, ValueError), (0.0, ValueError), (float("nan"), ValueError), ("0.5", TypeError),
    (None, TypeError), (True, TypeError),
])
def test_a_memory_threshold_keyword_outside_zero_one_names_the_setting(clean_env, value,
                                                                        error):
    with pytest.raises(error, match=rf"memory_threshold .*{re.escape(repr(value))}"):
        load_settings(memory_threshold=value)


def test_stripped_backend_variable_reaches_the_router(clean_env, monkeypatch):
    monkeypatch.setenv("CATALYTIC_BACKEND", "numpy ")
    eng = cat.Engine()
    assert eng.run("reduce", np.arange(4), "sum") == 6
    assert eng.last_decision.backend == "numpy" and eng.last_decision.forced
