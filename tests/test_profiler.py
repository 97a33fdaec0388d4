"""The profiler: records and nesting, files (JSON schema, Chrome trace, HTML opened in a
real headless Chromium), comparison, threads, Dask workers, and the CLI commands run as
a user runs them (subprocess, exit codes)."""

from __future__ import annotations

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


def test_an_operation_record_holds_what_was_measured(prof):
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
        before = _run_of(0.002, 8, prof)
        again = _run_of(0.002, 8, prof)
        slower = _run_of(0.004, 8, prof)
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
            {"kind": "op", "name": "x", "id": i, "start_s": 0.0, "wall_s": t,
             "backend": "numpy"} for i, t in enumerate(times)]}

    spread = [-0.4, 0.4, -0.3, 0.3, 0.0, 0.0]
    a = run([1.0 + x for x in spread])
    b = run([4 / 3 + x for x in spread])  # a third slower on average, within the spread
    c = run([2.0] * 6)
    assert P.compare(a, b).rows[0]["ratio"] > 1.25 and not P.compare(a, b).regressions
    assert P.compare(a, c).regressions
    with pytest.raises(ValueError, match="threshold"):
        P.compare(a, c, threshold=0)


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
