"""The profiler: records and nesting, files (JSON schema, Chrome trace, HTML opened in a
real headless Chromium), comparison, threads, Dask workers, and the CLI commands run as
a user runs them (subprocess, exit codes)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import catalytic as cat
from catalytic import profiler as P
from catalytic.profiler import compile_events, runs
from tests.support import ROOT


def _ops(records):
    return [r for r in records if r["kind"] == "op"]


# -- records ------------------------------------------------------------------------------
def test_disabled_records_nothing_and_regions_still_run():
    p = cat.get_profiler()
    p.disable()
    p.reset()

    @cat.profile
    def f(x):
        return x + 1

    with cat.profile("quiet"):
        assert f(1) == 2
        cat.Lattice(shape=(5, 5)).connected_components()
    assert p.records() == []


def test_regions_nest_and_operations_hang_under_them(prof):
    L = cat.Lattice(shape=(16, 16))

    @cat.profile
    def outer():
        with cat.profile("inner"):
            L.connected_components()
        return L.distance_field(0)

    @cat.profile("named")
    def named():
        return L.degree()

    outer()
    named()
    recs = prof.records()
    by = {(r["kind"], r["name"]): r for r in recs}
    o = by[("region", "test_regions_nest_and_operations_hang_under_them.<locals>.outer")]
    assert by[("region", "inner")]["parent"] == o["id"]
    assert by[("op", "connected_components")]["parent"] == by[("region", "inner")]["id"]
    assert by[("op", "distance_field")]["parent"] == o["id"]
    assert by[("op", "degree")]["parent"] == by[("region", "named")]["id"]
    assert by[("region", "named")]["parent"] is None
    # a region lasts at least as long as what it holds, and starts no later
    inner, cc = by[("region", "inner")], by[("op", "connected_components")]
    assert inner["start_s"] <= cc["start_s"]
    assert inner["start_s"] + inner["wall_s"] >= cc["start_s"] + cc["wall_s"]


def _by_id(recs):
    return {r["id"]: r for r in recs}


def _inside(outer, inner):
    """``inner`` lies within ``outer`` in time."""
    return (outer["start_s"] <= inner["start_s"]
            and inner["start_s"] + inner["wall_s"] <= outer["start_s"] + outer["wall_s"])


def test_a_generator_region_holds_what_the_generator_runs(prof):
    """One region per call, from the first item to the end; the generator's operations
    hang under it, its consumer's between items do not."""
    L = cat.Lattice(shape=(6, 6))

    @cat.profile
    def items(n):
        for i in range(n):
            L.degree()
            yield i
        L.percolates(0)

    with cat.profile("consumer"):
        for _ in items(3):
            L.connected_components()
    recs = prof.records()
    (gen,) = [r for r in recs if r["name"].endswith("items")]
    (consumer,) = [r for r in recs if r["name"] == "consumer"]
    assert gen["parent"] == consumer["id"]
    inner = [r for r in _ops(recs) if r["name"] in ("degree", "percolates")]
    outer = [r for r in _ops(recs) if r["name"] == "connected_components"]
    assert len(inner) == 4 and all(r["parent"] == gen["id"] and _inside(gen, r) for r in inner)
    assert len(outer) == 3 and all(r["parent"] == consumer["id"] for r in outer)
    assert prof.current_region() is None


def test_a_profiled_generator_behaves_as_the_generator(prof):
    """send, throw, close and the return value pass through; an error inside is recorded
    on the region."""
    import inspect

    L = cat.Lattice(shape=(4, 4))
    closed = []

    @cat.profile("echo")
    def echo():
        total = 0
        try:
            while True:
                try:
                    x = yield total
                except KeyError:
                    x = 100
                if x is None:
                    return total
                total += x
        finally:
            L.degree()  # runs on close(): inside the region
            closed.append(True)

    assert inspect.isgeneratorfunction(echo) and echo.__name__ == "echo"
    g = echo()
    assert next(g) == 0 and g.send(2) == 2 and g.throw(KeyError) == 102

    def delegate():
        return (yield from echo())

    d = delegate()
    next(d)
    d.send(5)
    with pytest.raises(StopIteration) as stop:
        d.send(None)
    assert stop.value.value == 5
    g.close()
    assert closed == [True, True]

    @cat.profile("fails")
    def fails():
        yield 1
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        list(fails())
    recs = prof.records()
    regions = [r for r in recs if r["kind"] == "region"]
    assert sorted(r["name"] for r in regions) == ["echo", "echo", "fails"]
    assert [r.get("error") for r in regions if r["name"] == "fails"] == ["ValueError"]
    (last,) = [r for r in regions if r["name"] == "echo" and r["start_s"] == min(
        x["start_s"] for x in regions if x["name"] == "echo")]
    assert [r["parent"] for r in _ops(recs)].count(last["id"]) == 1
    prof.disable()
    assert list(echo()) == [0]  # off: the same generator, nothing recorded


def test_async_regions_hold_their_own_task_s_operations(prof):
    """Two coroutines interleaved in one thread: each one's operations under its own
    region, which spans them; an async generator's as a generator's."""
    import asyncio

    L = cat.Lattice(shape=(6, 6))

    @cat.profile
    async def job(i):
        L.degree()
        await asyncio.sleep(0)  # the other task runs here
        L.percolates(0)
        return i

    @cat.profile("agen")
    async def agen():
        for i in range(2):
            L.connected_components()
            yield i

    async def main():
        with cat.profile("main"):
            got = await asyncio.gather(job(0), job(1))
            async for _ in agen():
                L.degree()
        return got

    assert asyncio.run(main()) == [0, 1]
    recs = prof.records()
    by = _by_id(recs)
    jobs = [r for r in recs if r["name"].endswith("job")]
    assert len(jobs) == 2
    for j in jobs:
        mine = [r for r in _ops(recs) if r["parent"] == j["id"]]
        assert sorted(r["name"] for r in mine) == ["degree", "percolates"]
        assert all(_inside(j, r) for r in mine) and by[j["parent"]]["name"] == "main"
    (ag,) = [r for r in recs if r["name"] == "agen"]
    assert [r["name"] for r in _ops(recs) if r["parent"] == ag["id"]] == [
        "connected_components"] * 2
    main_ops = [r["name"] for r in _ops(recs) if by.get(r["parent"], {}).get("name") == "main"]
    assert main_ops == ["degree", "degree"]  # the consumer's, between the items


def test_one_profile_object_entered_again_records_each_entry(prof):
    """Recursion and two threads through one ``cat.profile("x")``: one region per entry,
    each id once, nothing left open (also across reset)."""
    L = cat.Lattice(shape=(4, 4))
    region = cat.profile("level")

    def down(n):
        with region:
            L.degree()
            if n:
                down(n - 1)

    down(3)
    recs = prof.records()
    levels = [r for r in recs if r["name"] == "level"]
    assert len(levels) == 4 and len({r["id"] for r in recs}) == len(recs)
    chain = sorted(levels, key=lambda r: r["start_s"])
    assert [r["parent"] for r in chain] == [None] + [r["id"] for r in chain[:-1]]
    assert sorted(r["parent"] for r in _ops(recs)) == sorted(r["id"] for r in levels)
    assert prof.current_region() is None

    prof.reset()
    barrier = threading.Barrier(2)
    left_open = []

    def work():
        with region:
            barrier.wait()  # both threads inside the same object at once
            L.degree()
            barrier.wait()
        left_open.append(prof.current_region())

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = prof.records()
    levels = {r["id"]: r for r in recs if r["name"] == "level"}
    assert len(levels) == 2 and left_open == [None, None]
    for r in _ops(recs):
        assert levels[r["parent"]]["thread"] == r["thread"]
    prof.reset()
    L.degree()
    (op,) = prof.records()
    assert op["parent"] is None  # no id of an earlier region lingers


def test_profile_decorates_methods(prof):
    """A bare ``@cat.profile`` binds as a method (also when profiling is off)."""

    class Study:
        factor = 3

        @cat.profile
        def scaled(self, x):
            return self.factor * x

        @cat.profile("named")
        def named(self):
            return self.factor

        @cat.profile
        @staticmethod
        def static(x):
            return -x

        @cat.profile
        @classmethod
        def klass(cls):
            return cls.factor

    s = Study()
    assert (s.scaled(2), s.named(), s.static(1), Study.static(2), s.klass()) == (6, 3, -1, -2, 3)
    names = [r["name"] for r in prof.records()]
    assert names == ["test_profile_decorates_methods.<locals>.Study.scaled", "named",
                     "test_profile_decorates_methods.<locals>.Study.static",
                     "test_profile_decorates_methods.<locals>.Study.static",
                     "test_profile_decorates_methods.<locals>.Study.klass"]
    prof.disable()
    assert s.scaled(5) == 15 and Study.scaled.__name__ == "scaled"


def test_an_operation_record_holds_what_was_measured(prof):
    prof.enable(rss=True)  # rss_peak_growth_bytes is opt-in (two system calls per call)
    L = cat.Lattice(shape=(32, 32))
    L.connected_components()
    L.distance_field(0, backend="numpy")
    doc = prof.as_dict()
    first, second = _ops(doc["records"])
    assert first["backend"] == L.engine.router.decide(
        "connected_components", (L,), {}).backend
    assert first["reason"].startswith(("lowest predicted cost", "only backend"))
    assert first["predicted_s"] > 0 and first["wall_s"] > 0 and first["work"] == 32 * 32 * 4
    assert first["rss_peak_growth_bytes"] >= 0
    assert second["backend"] == "numpy" and second["forced"] is True
    for r in (first, second):  # CPU backends: nothing is measured on a device
        assert "device_s" not in r and "h2d_bytes" not in r and "memory_before" not in r


def test_a_failing_operation_is_recorded_with_its_error(prof):
    L = cat.Lattice(shape=(6, 6))
    with pytest.raises(ValueError, match="more than limit=2 paths"):
        L.find_all_paths(0, 35, limit=2)  # raised by the implementation, after routing
    (rec,) = _ops(prof.records())
    assert rec["name"] == "all_paths" and rec["error"] == "ValueError"
    assert rec["backend"] == "numpy" and rec["wall_s"] > 0


def test_summary_and_bottlenecks(prof):
    L = cat.Lattice(shape=(24, 24))
    for _ in range(4):
        L.connected_components()
    L.distance_field(0)
    s = prof.summary()
    cc = s["connected_components"]
    times = [r["wall_s"] for r in _ops(prof.records()) if r["name"] == "connected_components"]
    assert cc["count"] == 4 and cc["total_s"] == pytest.approx(sum(times))
    assert cc["min_s"] == min(times) and cc["max_s"] == max(times)
    assert cc["std_s"] == pytest.approx(np.std(times, ddof=1))
    L.connected_components(backend="numpy")
    s = prof.summary()["connected_components"]
    assert s["count"] == 5 and s["by_backend"]["numpy"]["count"] == 1
    assert sum(v["total_s"] for v in s["by_backend"].values()) == pytest.approx(s["total_s"])
    top = prof.bottlenecks(1)
    assert len(top) == 1 and top[0][0] in ("connected_components", "distance_field")
    assert sum(share for _, _, share in prof.bottlenecks(5)) == pytest.approx(1.0)


def test_environment_variable_turns_it_on():
    code = ("import catalytic as cat; L = cat.Lattice(shape=(4, 4)); L.degree(); "
            "p = cat.get_profiler(); print(p.enabled, len(p.records()))")
    env = dict(os.environ, CATALYTIC_PROFILE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["True", "1"]


# -- files -------------------------------------------------------------------------------------
def test_json_round_trip_and_schema(prof, tmp_path):
    with cat.profile("r"):
        cat.Lattice(shape=(8, 8)).percolates(0)
    path = prof.export_json(tmp_path / "run.json")
    doc = P.load(path)
    assert doc["schema"] == P.SCHEMA and doc["version"] == P.SCHEMA_VERSION
    assert doc["records"] == json.loads(json.dumps(prof.as_dict()["records"]))
    bad = dict(doc, version=99)
    with pytest.raises(ValueError, match="version 99"):
        P.check_document(bad)
    with pytest.raises(ValueError, match="not a catalytic profile"):
        P.check_document({"records": []})
    broken = dict(doc, records=[{k: v for k, v in doc["records"][1].items() if k != "wall_s"}])
    with pytest.raises(ValueError, match="wall_s"):
        P.check_document(broken)
    (tmp_path / "junk.json").write_text("{nope")
    with pytest.raises(ValueError, match="not JSON"):
        P.load(tmp_path / "junk.json")


def test_trace_is_valid_trace_event_json(prof, tmp_path):
    with cat.profile("region"):
        L = cat.Lattice(shape=(10, 10))
        L.connected_components()
        L.degree()
    trace = json.loads(prof.export_trace(tmp_path / "t.json").read_text())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(prof.records()) == 3
    for e in events:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["dur"] >= 0 and isinstance(e["tid"], int)
    region = next(e for e in events if e["name"] == "region")
    for e in events:  # the operations lie inside the region on the timeline
        assert region["ts"] <= e["ts"] and e["ts"] + e["dur"] <= region["ts"] + region["dur"] + 1e-6
    assert any(e["ph"] == "M" for e in trace["traceEvents"])


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_html_report_opens_in_headless_chromium(prof, tmp_path):
    with cat.profile("study"):
        L = cat.Lattice(shape=(20, 20))
        L.connected_components()
        L.distance_field(0)
    page = prof.export_html(tmp_path / "report.html", title="profile under test")
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") \
        and "https://" not in text  # self-contained: nothing fetched
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium here: apt-get install chromium (the CI script does)")
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "<title>profile under test</title>" in html
    for name in ("connected_components", "distance_field", "study"):
        assert f'data-name="{name}"' in html  # drawn on the timeline
    assert "Time per operation" in html and "<table>" in html
    shot = tmp_path / "report.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", "--window-size=1300,900", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000  # a picture, not a blank page


# -- comparison ------------------------------------------------------------------------------
class _Sleeper:
    """A plugin operation that takes a known time: the planted regression."""

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        registry.add_operation("sleep_test", work=lambda s: 1.0)
        registry.add_implementation("sleep_test", "numpy", lambda s: time.sleep(s))


def _run_of(seconds, calls, prof):
    prof.reset()
    prof.enable()
    eng = cat.get_engine()
    for _ in range(calls):
        eng.run("sleep_test", seconds)
    prof.disable()
    return prof.as_dict()


def test_compare_flags_a_planted_regression_and_not_noise(tmp_path):
    eng = cat.get_engine()
    eng.register_plugin(_Sleeper(), "sleeper-test")
    prof = cat.get_profiler()
    try:
        # sleeps long enough that a loaded machine's scheduling delays (a millisecond
        # or two) stay well inside compare()'s threshold: the same run is not flagged
        before = _run_of(0.02, 8, prof)
        again = _run_of(0.02, 8, prof)
        slower = _run_of(0.04, 8, prof)
    finally:
        eng.unregister_plugin("sleeper-test")
        prof.reset()
    same = P.compare(before, again)
    assert not same.regressions, str(same)
    worse = P.compare(before, slower)
    (row,) = worse.regressions
    assert row["op"] == "sleep_test" and row["ratio"] > 1.5
    assert "REGRESSION" in str(worse)
    # and from files, through the command line: exit 1 on the regression, 0 without
    a, b, c = (tmp_path / f"{n}.json" for n in "abc")
    for path, doc in ((a, before), (b, again), (c, slower)):
        path.write_text(json.dumps(doc))
    assert _cli("report", "--compare", str(a), str(b)).returncode == 0
    res = _cli("report", "--compare", str(a), str(c))
    assert res.returncode == 1 and "REGRESSION" in res.stdout


def test_compare_noise_within_the_spread_is_not_a_regression():
    def run(times):
        return {"schema": P.SCHEMA, "version": P.SCHEMA_VERSION, "records": [
            {"kind": "op", "name": "x", "id": i, "parent": None, "thread": 0,
             "start_s": 0.0, "wall_s": t, "backend": "numpy"} for i, t in enumerate(times)]}

    spread = [-0.4, 0.4, -0.3, 0.3, 0.0, 0.0]
    a = run([1.0 + x for x in spread])
    b = run([4 / 3 + x for x in spread])  # a third slower on average, within the spread
    c = run([2.0] * 6)
    assert P.compare(a, b).rows[0]["ratio"] > 1.25 and not P.compare(a, b).regressions
    assert P.compare(a, c).regressions
    with pytest.raises(ValueError, match="threshold"):
        P.compare(a, c, threshold=0)


def _run_doc(times, name="x"):
    return {"schema": P.SCHEMA, "version": P.SCHEMA_VERSION, "records": [
        {"kind": "op", "name": name, "id": i, "parent": None, "thread": 0, "start_s": 0.0,
         "wall_s": t, "backend": "numpy"} for i, t in enumerate(times)]}


@pytest.mark.parametrize("after", [[], "other op"])
def test_compare_of_runs_sharing_no_operation_fails_the_gate(tmp_path, after):
    """An empty second run (a study that crashed before its first call, a renamed
    operation) compares nothing: a CI gate must not read that as no regression."""
    before = _run_doc([1.0, 1.1])
    after = _run_doc([] if after == [] else [1.0], name="y")
    c = P.compare(before, after)
    assert c.nothing_compared and not c.regressions and c.only_a == ["x"]
    assert "nothing was compared" in str(c) and "no regression" not in str(c)
    assert not P.compare(before, before).nothing_compared
    (tmp_path / "a.json").write_text(json.dumps(before))
    (tmp_path / "b.json").write_text(json.dumps(after))
    res = _cli("report", "--compare", "a.json", "b.json", cwd=tmp_path)
    assert res.returncode == 1 and "nothing was compared" in res.stdout


# -- threads and workers ---------------------------------------------------------------------
def test_threads_record_under_their_own_regions(prof):
    L = cat.Lattice(shape=(12, 12))
    barrier = threading.Barrier(4)

    def work(i):
        barrier.wait()
        with cat.profile(f"t{i}"):
            for _ in range(5):
                L.connected_components()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = prof.records()
    regions = {r["id"]: r for r in recs if r["kind"] == "region"}
    assert sorted(r["name"] for r in regions.values()) == ["t0", "t1", "t2", "t3"]
    ops = _ops(recs)
    assert len(ops) == 20 and len({r["id"] for r in recs}) == 24
    for r in ops:  # each op under the region of its own thread
        assert regions[r["parent"]]["thread"] == r["thread"]


def test_batch_processor_threads_record_under_the_callers_region(prof):
    base = cat.Lattice(shape=(10, 10))
    lats = [cat.Lattice(shape=(10, 10)) for _ in range(3)] + [cat.Lattice(shape=(4,))]
    with cat.profile("sweep"):
        # forced: by predicted cost these tiny items would run serially, on this thread
        cat.BatchProcessor(lats, executor="threads", progress=False,
                           force_executor=True).map("degree")
        cat.BatchProcessor([base.with_mask(np.eye(10, dtype=bool)), base],
                           executor="threads", progress=False, force_executor=True,
                           batched=True).map("percolates", axis=0)
    recs = prof.records()
    (sweep,) = [r for r in recs if r["name"] == "sweep"]
    ops = _ops(recs)
    assert [r["name"] for r in ops].count("degree") == 4
    assert "batched.percolates" in [r["name"] for r in ops]
    assert all(r["parent"] == sweep["id"] for r in ops)


@pytest.mark.slow
def test_dask_worker_records_reach_the_client(prof):
    distributed = pytest.importorskip("distributed", reason='needs pip install "catalytic[dask]"')
    base = cat.Lattice(shape=(16, 16))
    rng = np.random.default_rng(1)
    lats = [base.with_mask(rng.random((16, 16)) < 0.6) for _ in range(6)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        with cat.profile("distributed"):
            cat.BatchProcessor(lats, executor="dask", client=client, progress=False,
                               force_executor=True, batched=True).map("percolates", axis=0)
    recs = prof.records()
    (region,) = [r for r in recs if r["kind"] == "region"]
    ops = _ops(recs)
    assert len(ops) == 2  # one batched call per worker
    assert all(r["name"] == "batched.percolates" and r["parent"] == region["id"]
               and str(r["thread"]).startswith("dask-task") for r in ops)


# -- the command line ---------------------------------------------------------------------------
def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "catalytic.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


SCRIPT = """
import sys
import catalytic as cat

@cat.profile
def main(n):
    L = cat.Lattice(shape=(n, n))
    with cat.profile("components"):
        L.connected_components()
    if sys.argv[2:] == ["fail"]:
        raise RuntimeError("planted failure")

main(int(sys.argv[1]))
"""


def test_cli_profile_and_report(tmp_path):
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    res = _cli("profile", "-o", str(tmp_path / "out" / "p"), str(script), "12")
    assert res.returncode == 0, res.stderr
    for suffix in (".json", ".trace.json", ".html"):
        assert (tmp_path / "out" / f"p{suffix}").exists()
    doc = P.load(tmp_path / "out" / "p.json")
    names = [r["name"] for r in doc["records"]]
    assert names[:3] == ["study.py", "main", "components"] and "connected_components" in names
    assert "connected_components" in res.stdout  # the summary is printed
    res = _cli("report", str(tmp_path / "out" / "p.json"), "-o", str(tmp_path / "r.html"))
    assert res.returncode == 0 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    # the script fails: exit 1 with one line naming it; the reports are still written
    res = _cli("profile", "-o", str(tmp_path / "f"), str(script), "8", "fail")
    assert res.returncode == 1 and "raised RuntimeError: planted failure" in res.stderr
    assert "main" in [r["name"] for r in P.load(tmp_path / "f.json")["records"]]


@pytest.mark.parametrize("args, code, message", [
    (("profile", "no_such_script.py"), 2, "no such script"),
    (("report",), 2, "give a profile"),
    (("report", "missing.json"), 1, "No such file"),
    (("report", "--compare", "one.json"), 2, "expected 2 arguments"),
    (("nonsense",), 2, "invalid choice"),
])
def test_cli_errors_exit_with_a_message(tmp_path, args, code, message):
    res = _cli(*args, cwd=tmp_path)
    assert res.returncode == code and message in res.stderr


EXITING = """
import sys
import catalytic as cat
with cat.profile("before exit"):
    cat.Lattice(shape=(6, 6)).degree()
sys.exit(eval(sys.argv[1]))
"""


@pytest.mark.parametrize("code, status, stderr", [
    ("'stopped: no input'", 1, "stopped: no input"), ("3", 3, ""), ("None", 0, ""),
    ("0", 0, "")])
def test_cli_profile_exits_as_the_script_does(tmp_path, code, status, stderr):
    """``sys.exit(...)`` in the script: the status and message ``python script.py``
    gives, after the reports are written."""
    script = tmp_path / "exits.py"
    script.write_text(EXITING)
    plain = subprocess.run([sys.executable, str(script), code], capture_output=True,
                           text=True, timeout=600)
    assert plain.returncode == status and stderr in plain.stderr  # the oracle: Python
    res = _cli("profile", "-o", str(tmp_path / "p"), str(script), code)
    assert res.returncode == status, res.stderr
    assert stderr in res.stderr and "Traceback" not in res.stderr
    if stderr:
        assert res.stderr.rstrip().splitlines()[-1] == stderr
    names = [r["name"] for r in P.load(tmp_path / "p.json")["records"]]
    assert "before exit" in names and "degree" in names


SLEEPER = """
import sys, time
import catalytic as cat
with cat.profile("work"):
    cat.Lattice(shape=(6, 6)).degree()
with cat.profile("waiting"):
    open(sys.argv[1], "w").close()  # ready: the test interrupts from here on
    for _ in range(3000):
        time.sleep(0.1)
"""


def test_cli_profile_interrupted_writes_what_was_recorded(tmp_path):
    """Ctrl-C (SIGINT) during the script: the reports hold what ran, exit 130."""
    import signal

    script, ready = tmp_path / "sleeper.py", tmp_path / "ready"
    script.write_text(SLEEPER)
    # SIGINT at its default in the child: a test run started in the background of a
    # shell inherits it ignored, and Python then never raises KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-m", "catalytic.cli", "profile", "-o",
                             str(tmp_path / "p"), str(script), str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        while not ready.exists() and proc.poll() is None:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    recs = {r["name"]: r for r in P.load(tmp_path / "p.json")["records"]}
    assert recs["work"].get("error") is None and "degree" in recs
    assert recs["waiting"]["error"] == "KeyboardInterrupt"
    assert (tmp_path / "p.html").exists() and (tmp_path / "p.trace.json").exists()


@pytest.mark.parametrize("extra", [("--threshold", "0"), ("--threshold", "-1"),
                                   ("--threshold", "nan"), ("--threshold", "inf"),
                                   ("--threshold", "x"), ("-o", "c.html")])
def test_cli_compare_usage_errors_exit_2(tmp_path, extra):
    """2 is a usage error, 1 a regression (or a failure): a CI gate tells them apart."""
    for name in "ab":
        (tmp_path / f"{name}.json").write_text(json.dumps(_run_doc([1.0])))
    res = _cli("report", "--compare", "a.json", "b.json", *extra, cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.strip() and not (tmp_path / "c.html").exists()
    if extra != ("--threshold", "0"):
        return  # the cases below do not depend on extra: checked once
    res = _cli("report", "a.json", "--threshold", "0.5", cwd=tmp_path)
    assert res.returncode == 2 and "--threshold goes with --compare" in res.stderr
    assert _cli("report", "--compare", "a.json", "b.json", "--threshold", "0.5",
                cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("cmd", ["info", "demo", "bench", "calibrate", "profile", "report",
                                 "recover", "warmup"])
def test_cli_help(cmd):
    res = _cli(cmd, "--help")
    assert res.returncode == 0 and "usage: catalytic " + cmd in res.stdout


def test_cli_bench_part_and_info(tmp_path):
    res = _cli("bench", "--quick", "--only", "fields", "--output", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "Laplacian 2-D periodic" in res.stdout and "agrees" in res.stdout
    report = (tmp_path / "benchmarks.md").read_text()
    assert "| Laplacian 2-D periodic | 256x256 | scipy.ndimage.laplace |" in report
    rows = json.loads((tmp_path / "benchmarks.json").read_text())["rows"]
    assert {r["system"] for r in rows} >= {"catalytic", "numpy @", "numpy a ^ key"}
    assert all(r["agree"] is not False for r in rows)
    assert _cli("bench", "--only", "nothing").returncode == 1
    res = _cli("info")
    assert res.returncode == 0 and "memory:" in res.stdout


def test_records_are_bounded(prof, monkeypatch):
    monkeypatch.setattr(prof, "max_records", 3)
    L = cat.Lattice(shape=(4, 4))
    for _ in range(5):
        L.degree()
    assert len(prof.records()) == 3 and prof.dropped == 2
    assert prof.as_dict()["dropped"] == 2
    prof.reset()
    assert prof.dropped == 0


# -- hostile profile files (a profile from elsewhere is untrusted input) ---------------------
HOSTILE = ('</title></style><script id="injected">alert(1)</script>'
           '<img src=x onerror="alert(2)">"\' & <!-- ]]>')
#: elements the report page is built from (and the tbody a browser adds); anything else
#: in the page was injected
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "svg", "g",
             "rect", "text", "table", "tbody", "tr", "th", "td"}


def _hostile_doc(s=HOSTILE):
    """A valid profile with ``s`` in every field of the schema that holds a string."""
    return {
        "schema": P.SCHEMA, "version": P.SCHEMA_VERSION, "created": s,
        "machine": {"platform": s, "python": s, "numba": s, "cpu_count": 2, s: s},
        "dropped": 0,
        "records": [
            {"kind": "region", "name": s, "id": 1, "parent": None, "thread": 0,
             "start_s": 0.0, "wall_s": 0.5, "error": s},
            {"kind": "op", "name": s, "id": 2, "parent": 1, "thread": 0, "start_s": 0.1,
             "wall_s": 0.2, "backend": s, "reason": s, "forced": False, "work": 64.0,
             "predicted_s": 0.1, "rss_peak_growth_bytes": 0, "error": s,
             "fallback_from": s, "device_s": 0.1, "h2d_bytes": 8, "d2h_bytes": 8,
             "memory_before": {s: s}, "memory_after": {s: s}},
            {"kind": "op", "name": "percolates", "id": 3, "parent": 1, "thread": s,
             "start_s": 0.3, "wall_s": 0.1, "backend": "numpy", "reason": s,
             "forced": True},
        ]}


class _Page:
    """What html.parser finds in a page: start tags, attribute names, text."""

    def __init__(self, text):
        from html.parser import HTMLParser

        self.tags, self.attrs, self.text = [], [], []
        page = self

        class Parser(HTMLParser):
            def handle_starttag(self, tag, attrs):
                page.tags.append(tag)
                page.attrs += [name for name, _ in attrs]

            handle_startendtag = handle_starttag

            def handle_data(self, data):
                page.text.append(data)

        p = Parser(convert_charrefs=True)
        p.feed(text)
        p.close()

    def assert_nothing_injected(self, hostile=HOSTILE):
        assert set(self.tags) <= PAGE_TAGS, set(self.tags) - PAGE_TAGS
        assert not [a for a in self.attrs if a.lower().startswith("on")]
        assert any(hostile in t for t in self.text)  # shown to the reader, as text


def test_report_of_a_hostile_profile_injects_nothing(tmp_path):
    from catalytic.cli import main

    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(_hostile_doc()))
    assert main(["report", str(path), "-o", str(tmp_path / "h.html")]) == 0
    _Page((tmp_path / "h.html").read_text()).assert_nothing_injected()


@pytest.mark.parametrize("where", ["created", "machine", "name", "thread", "backend",
                                   "reason", "error"])
def test_each_string_field_alone_is_shown_as_text(tmp_path, where):
    from catalytic.profiler.html import html_report

    doc = _hostile_doc("plain")
    if where in ("created",):
        doc[where] = HOSTILE
    elif where == "machine":
        doc["machine"] = {HOSTILE: HOSTILE}
    else:
        for r in doc["records"]:
            r[where] = HOSTILE
    P.check_document(doc)
    _Page(html_report(doc)).assert_nothing_injected()


def test_hostile_report_opened_in_headless_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium here: apt-get install chromium (the CI script does)")
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(_hostile_doc()))
    res = _cli("report", str(path), "-o", str(tmp_path / "h.html"))
    assert res.returncode == 0, res.stderr
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
         (tmp_path / "h.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = _Page(dom.stdout)  # the document as the browser built it
    assert "script" not in page.tags and "img" not in page.tags
    page.assert_nothing_injected()


# -- malformed profile files: one clear line, exit 1 ------------------------------------------
def _valid_doc():
    doc = _hostile_doc("plain")
    doc["records"].append({"kind": "region", "name": "inner", "id": 4, "parent": 1,
                           "thread": 0, "start_s": 0.05, "wall_s": 0.01})
    return doc


#: values each field must not hold (wrong type, or out of range)
WRONG = {
    "kind": ["ops", 1, None, ["op"]], "name": [1, None, ["x"], {"a": 1}],
    "id": ["1", 1.5, True, None], "parent": ["1", 1.5, True, [1]],
    "thread": [1.5, None, True, [0], {}],
    "start_s": ["0", None, True, float("nan"), float("inf"), [0.0]],
    "wall_s": [-1.0, "0.1", None, float("nan"), False],
    "backend": [None, 3, ["numpy"]], "reason": [3, None, ["r"]], "forced": ["no", 0, None],
    "work": ["64", float("inf"), None], "predicted_s": [-0.1, "x", float("nan")],
    "device_s": [-1, "x"], "h2d_bytes": [-8, 1.5, "8", True], "d2h_bytes": [-1, None],
    "rss_peak_growth_bytes": [-1, 0.5], "compile_s": [-0.1, "x", float("nan"), None, 1e9],
    "error": [1, None], "fallback_from": [1, None],
    "memory_before": [[1], "x", None], "memory_after": [1, "x"],
}


def _corruptions():
    from hypothesis import strategies as st

    n = len(_valid_doc()["records"])
    index = st.integers(0, n - 1)

    def missing(i, data):
        rec = _valid_doc()["records"][i]
        required = list(runs._REQUIRED) + (["backend"] if rec["kind"] == "op" else [])
        key = data.draw(st.sampled_from(required))
        return ("missing", i, key)

    def wrong(i, data):
        rec = _valid_doc()["records"][i]
        key = data.draw(st.sampled_from(sorted(k for k in rec if k in WRONG)))
        return ("wrong", i, key, data.draw(st.sampled_from(WRONG[key])))

    json_values = st.one_of(st.none(), st.integers(), st.text(max_size=5),
                            st.lists(st.integers(), max_size=3))
    return st.one_of(
        st.builds(lambda i, d: missing(i, d), index, st.data()),
        st.builds(lambda i, d: wrong(i, d), index, st.data()),
        st.tuples(st.just("not an object"), index, json_values),
        st.tuples(st.just("own parent"), index),
        st.tuples(st.just("cycle")),
        st.tuples(st.just("repeated id"), index, index).filter(lambda t: t[1] != t[2]),
    )


def _corrupt(c):
    """The valid document with corruption ``c``; the record index and the field the
    message must name."""
    doc = _valid_doc()
    recs = doc["records"]
    kind, *rest = c
    if kind == "missing":
        i, key = rest
        del recs[i][key]
    elif kind == "wrong":
        i, key, value = rest
        recs[i][key] = value
    elif kind == "not an object":
        i, value = rest
        recs[i] = value
        key = "not an object"
    elif kind == "own parent":
        (i,) = rest
        recs[i]["parent"] = recs[i]["id"]
        key = "parent"
    elif kind == "cycle":  # region 1 under region 4, which is under region 1
        recs[0]["parent"] = 4
        i, key = 0, "parent"
    else:
        a, b = rest
        recs[max(a, b)]["id"] = recs[min(a, b)]["id"]
        i, key = max(a, b), "id"
    return doc, i, key


def _report_exit(doc):
    """``catalytic report`` on ``doc`` written to a file: (exit status, stderr)."""
    import contextlib
    import io
    import tempfile

    from catalytic.cli import main

    err, out = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.json")
        with open(path, "w") as fh:
            json.dump(doc, fh)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            status = main(["report", path, "-o", os.path.join(tmp, "p.html")])
        wrote = os.path.exists(os.path.join(tmp, "p.html"))
    return status, err.getvalue(), wrote


def test_the_valid_documents_of_these_tests_pass():
    P.check_document(_valid_doc())
    assert _report_exit(_valid_doc())[0] == 0


def test_a_corrupted_profile_is_refused_in_one_line_naming_record_and_field():
    from hypothesis import given

    @given(_corruptions())
    def check(c):
        doc, i, key = _corrupt(c)
        with pytest.raises(ValueError) as info:
            P.check_document(doc, "p.json")
        msg = str(info.value)
        assert "\n" not in msg and f"record {i}" in msg and key in msg, (c, msg)
        status, err, wrote = _report_exit(doc)
        assert status == 1 and not wrote
        assert err.count("\n") == 1 and f"record {i}" in err and "Traceback" not in err

    check()


@pytest.mark.parametrize("c", [("missing", 1, "thread"), ("own parent", 0), ("cycle",),
                               ("not an object", 2, [1, 2]), ("wrong", 1, "wall_s", "x")])
def test_cli_refuses_a_malformed_profile_without_a_traceback(tmp_path, c):
    doc, i, key = _corrupt(c)
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    for args in (["bad.json"], ["--compare", "bad.json", "bad.json"]):
        res = _cli("report", *args, cwd=tmp_path)
        assert res.returncode == 1 and res.stderr.count("\n") == 1, res.stderr
        assert f"record {i}" in res.stderr and key in res.stderr
    assert not (tmp_path / "bad.html").exists()


def test_a_parent_past_the_cap_is_not_an_error(tmp_path):
    """A region that ended after max_records was reached is not in the file; what ran
    inside it is drawn at the top of its lane."""
    doc = _valid_doc()
    doc["records"][0]["parent"] = 999
    doc["records"][1]["thread"] = "dask-task-0.0"
    P.check_document(doc)
    assert _report_exit(doc)[0] == 0


@pytest.mark.parametrize("field", [k for k, (ok, _) in runs._FIELDS.items() if not ok(HOSTILE)]
                         + ["dropped", "machine"])
def test_a_hostile_string_in_a_field_that_holds_no_string_is_refused(field):
    """The rest of the schema's fields: a string there never reaches the page."""
    doc = _hostile_doc()
    if field == "dropped":
        doc["dropped"] = HOSTILE
    elif field == "machine":
        doc["machine"] = {"platform": {"nested": HOSTILE}}
    else:
        doc["records"][1][field] = HOSTILE
    status, err, wrote = _report_exit(doc)
    assert status == 1 and not wrote and field in err



# -- memory: the cap bounds what recording, merging and exporting hold ----------------------
def _plain_records(n, prof):
    """``n`` plain records of real calls, as a worker sends them (objects of their own)."""
    L = cat.Lattice(shape=(4, 4))
    prof.reset()
    with cat.profile("task"):
        for _ in range(n - 1):
            L.degree()
    plain = json.loads(json.dumps(prof.as_dict()["records"]))
    prof.reset()
    return plain


def test_merge_keeps_the_cap_and_counts_what_it_drops(prof, monkeypatch):
    sent = _plain_records(6, prof)
    monkeypatch.setattr(prof, "max_records", 4)
    L = cat.Lattice(shape=(4, 4))
    L.degree()
    prof.merge(sent, worker="dask-task-0.0", dropped=2)
    recs = prof.records()
    assert len(recs) == 4 and prof.dropped == 3 + 2
    assert prof.as_dict()["dropped"] == 5
    merged = [r for r in recs if r["thread"] == "dask-task-0.0"]
    assert len(merged) == 3 and len({r["id"] for r in recs}) == 4
    prof.merge(sent, worker="dask-task-0.1")  # full: every record counted, none kept
    assert len(prof.records()) == 4 and prof.dropped == 5 + 6


def test_reasons_read_out_are_the_router_s(prof):
    """Reasons are worded when read out, from the figures kept: the same words as the
    decision's."""
    L = cat.Lattice(shape=(16, 16))
    decisions = []
    for kw in ({}, {"backend": "numpy"}):
        L.connected_components(**kw)
        decisions.append(L.last_decision)
    L.xor_transform(np.arange(5))
    decisions.append(L.last_decision)
    recs = _ops(prof.records())
    assert [r["reason"] for r in recs] == [d.reason for d in decisions]
    assert [r["forced"] for r in recs] == [d.forced for d in decisions]
    assert [r.get("predicted_s") for r in recs] == [d.predictions.get(d.backend)
                                                    for d in decisions]


def _traced(func):
    """(result, bytes of traced memory the call held at its peak above its start)."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = func()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_kept_record_is_small(prof):
    """What the kept records hold, measured as what reset() frees (a bound well above
    the measured figure in reports/profiler.md: a memory test, not a timing test)."""
    import gc
    import tracemalloc

    L = cat.Lattice(shape=(8, 8))
    L.degree()
    prof.reset()
    n = 3000
    tracemalloc.start()
    try:
        for _ in range(n):
            L.degree()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        prof.reset()
        gc.collect()
        per_record = (held - tracemalloc.get_traced_memory()[0]) / n
    finally:
        tracemalloc.stop()
    assert 0 < per_record < 600, per_record


def test_exports_stream_in_memory_that_does_not_grow_with_the_records(prof, tmp_path):
    """export_json and export_trace hold a reference per record beyond the records, not
    a copy of them: their peak stays within a bound of a few dozen bytes a record."""
    n = 20_000
    sent = _plain_records(200, prof)
    for k in range(n // len(sent)):
        prof.merge(sent, worker=f"w{k}")
    assert len(prof._records) == n
    for export in (prof.export_json, prof.export_trace):
        path, peak = _traced(lambda: export(tmp_path / "run.json"))
        assert peak < 100 * n + 2**20, (export.__name__, peak / n)
    doc = P.load(prof.export_json(tmp_path / "r.json"))
    assert len(doc["records"]) == n and doc["records"][0]["start_s"] <= doc["records"][-1]["start_s"]
    _, peak = _traced(lambda: prof.export_html(tmp_path / "run.html"))
    assert peak < 100 * n + 16 * 2**20  # and the page of the first MAX_DRAWN records


def test_deeply_nested_regions_make_a_page(prof, tmp_path):
    """As deep as a profiled recursion goes: the page's nesting is not computed by
    recursion."""
    import contextlib

    region = cat.profile("level")
    with contextlib.ExitStack() as stack:
        for _ in range(1500):
            stack.enter_context(region)
        cat.Lattice(shape=(4, 4)).degree()
    page = prof.export_html(tmp_path / "deep.html").read_text()
    assert page.count('data-name="level"') == 1500
    from catalytic.cli import main

    assert main(["report", str(prof.export_json(tmp_path / "deep.json"))]) == 0


# -- Numba compilation, recorded apart -------------------------------------------------------
class _Compiler:
    """A plugin operation whose implementation calls a Numba function made for this
    instance: its first call compiles (a fresh dispatcher, no cache), later ones do not.
    The sleep gives every call the same known run time beside it."""

    def __init__(self, sleep=0.0):
        from numba import njit

        @njit
        def triple(x):
            total = 0
            for i in range(x):
                total += 3 * i
            return total

        self.triple, self.sleep = triple, sleep

    @cat.hookimpl
    def catalytic_add_operations(self, registry):
        def run(n):
            time.sleep(self.sleep)
            return self.triple(n)

        registry.add_operation("compile_test", work=lambda n: 1.0)
        registry.add_implementation("compile_test", "numpy", run)


def _listeners():
    from numba.core import event

    return [list(event._registered[k]) for k in ("numba:compile", "numba:compiler_lock")]


def test_numba_compilation_is_recorded_apart_from_the_run(prof):
    eng = cat.get_engine()
    eng.register_plugin(_Compiler(), "compiler-test")
    try:
        assert eng.run("compile_test", 10) == 135 and eng.run("compile_test", 10) == 135
    finally:
        eng.unregister_plugin("compiler-test")
    doc = prof.as_dict()
    P.check_document(doc)
    first, second = _ops(doc["records"])
    assert 0 < first["compile_s"] <= first["wall_s"]  # the first call compiled
    assert second["compile_s"] == 0.0  # the second found the compiled function
    assert "rss_peak_growth_bytes" not in first  # opt-in: enable(rss=True)
    with pytest.raises(TypeError, match="rss"):
        prof.enable(rss="yes")
    entry = prof.summary()["compile_test"]
    assert entry["compile_total_s"] == first["compile_s"] and entry["compile_calls"] == 1
    run_times = [r["wall_s"] - r["compile_s"] for r in (first, second)]
    assert entry["total_s"] == pytest.approx(sum(run_times))
    assert entry["max_s"] == pytest.approx(max(run_times))
    (top,) = prof.bottlenecks(1)
    assert top[0] == "compile_test" and top[1] == pytest.approx(sum(run_times))
    assert "Numba compilation" in P.format_summary(prof.summary())
    from catalytic.profiler.html import COMPILE_COLOUR, html_report

    page = html_report(doc)
    assert 'data-name="Numba compilation"' in page and COMPILE_COLOUR in page
    assert "<th>compile</th>" in page


def test_compile_listener_is_installed_only_while_profiling():
    p = cat.get_profiler()
    p.disable()
    before = _listeners()
    p.enable()
    try:
        grown = [len(b) + 1 for b in before]
        assert [len(x) for x in _listeners()] == grown
        with P.task_profiler():  # a second enabled profiler shares the one listener
            assert [len(x) for x in _listeners()] == grown
        assert [len(x) for x in _listeners()] == grown
    finally:
        p.disable()
        p.reset()
    assert _listeners() == before


def test_compare_is_not_tripped_by_a_cold_cache():
    eng = cat.get_engine()
    plugin = _Compiler(sleep=0.02)
    eng.register_plugin(plugin, "compiler-test")
    prof = cat.get_profiler()
    try:
        cold = _run_of_op("compile_test", 10, prof)  # compiles: one call each side
        warm = _run_of_op("compile_test", 10, prof)
    finally:
        eng.unregister_plugin("compiler-test")
        prof.reset()
    (c,) = _ops(cold["records"])
    (w,) = _ops(warm["records"])
    assert c["compile_s"] > 0 and w["compile_s"] == 0.0
    for a, b in ((warm, cold), (cold, warm)):
        result = P.compare(a, b)
        assert len(result.rows) == 1 and not result.regressions, str(result)


def _run_of_op(op, arg, prof):
    prof.reset()
    prof.enable()
    cat.get_engine().run(op, arg)
    prof.disable()
    return prof.as_dict()


# -- the recorded call's two paths (Profiler.end_op) -------------------------------------------
def test_a_plain_call_records_what_the_full_path_records(prof):
    """end_op keeps the common call (CPU, ran where sent, compiled nothing) in a compact
    form resolved when read; read out, it says what the full path says."""
    L = cat.Lattice(shape=(16, 16))
    decision = L.engine.router.decide("degree", (L,), {})
    assert decision._reason is None and len(decision.predictions) == 2  # the common case
    with cat.profile("outer"):
        for path in ("fast", "full"):
            tok = prof.begin_op(decision, "cpu")
            if path == "fast":
                prof.end_op(tok, decision)
            else:
                prof._end_op(tok, decision, None, 1e-6)
    region, fast, full = prof.records()
    assert type(prof._records[0]) is tuple  # kept compact, resolved above
    for r in (fast, full):
        del r["id"], r["start_s"], r["wall_s"]
    assert fast == full
    assert fast["parent"] == region["id"] and fast["thread"] == region["thread"]
    assert fast["reason"] == decision.reason and fast["compile_s"] == 0.0


def test_threads_recording_at_once_keep_the_cap(prof, monkeypatch):
    """No lock on the common path: the cap still holds with threads recording at once."""
    monkeypatch.setattr(prof, "max_records", 50)
    L = cat.Lattice(shape=(8, 8))
    L.degree()
    prof.reset()
    go = threading.Barrier(4)

    def work():
        go.wait()
        for _ in range(40):
            L.degree()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = prof.records()
    assert len(records) == 50 and prof.dropped == 4 * 40 - 50
    assert len({r["id"] for r in records}) == 50
    assert {r["thread"] for r in records} <= set(prof._threads.values())


def test_a_compile_in_another_thread_is_not_this_calls():
    """Compile seconds are the calling thread's: another thread's compile during a call
    changes the process-wide count, but adds nothing to this thread's seconds."""
    listener = compile_events._compile_listener()
    seq = compile_events._compile_seq
    seen = {}

    def compile_elsewhere():
        listener.on_start(None)
        time.sleep(0.01)
        listener.on_end(None)
        seen["there"] = compile_events._compile_seconds_since(seq)

    t = threading.Thread(target=compile_elsewhere)
    t.start()
    t.join()
    assert compile_events._compile_seq > seq
    assert seen["there"] >= 0.009
    assert compile_events._compile_seconds_since(seq) == 0.0
    assert compile_events._compile_seconds_since(compile_events._compile_seq) == 0.0


def test_bench_profiler_rewrites_its_tables_and_keeps_the_notes_below_them(tmp_path):
    """benchmarks/bench_profiler.py at a tiny size: it writes the overhead tables with
    the lower-bound rows, keeps what is below its marker in an earlier report, and puts
    the profiler's methods back after the lower-bound rounds."""
    script = ROOT / "benchmarks" / "bench_profiler.py"
    spec = importlib.util.spec_from_file_location("bench_profiler", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "profiler.md"
    out.write_text(f"# old tables\n\n{bench.KEPT}\n\n## Notes\n\nkept by hand\n")
    methods = P.Profiler.begin_op, P.Profiler.end_op
    try:
        assert bench.main(["--rounds", "2", "--calls", "1", "--records", "10",
                           "--output", str(out)]) == 0
    finally:
        cat.get_profiler().disable()
        cat.get_profiler().reset()
    assert (P.Profiler.begin_op, P.Profiler.end_op) == methods
    text = out.read_text()
    assert "# old tables" not in text and text.startswith("# Profiler overhead")
    assert text.count(bench.KEPT) == 1 and text.endswith("## Notes\n\nkept by hand\n")
    assert "both doing nothing" in text and "keeping one tuple" in text
