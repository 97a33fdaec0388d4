"""``benchmarks/gpu_proof.sh``: the GPU proof in one command.

On a machine without a GPU (this one, CI) the script must refuse at once; its parts
(the step runner, the JUnit counts, the summary, the calibration stamp, the Hypothesis
stand-in) are checked here on real processes and files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cuda_passes import CUDA_TEST_DIRS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_proof.sh"
STAND_IN = ROOT / "benchmarks" / "gpu_proof_support" / "no_hypothesis"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_proof", ROOT / "benchmarks" / "gpu_proof.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks the module up
    spec.loader.exec_module(module)
    return module


gp = _load()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.update(extra)
    return env


def _gpu_here() -> bool:
    probe = subprocess.run([sys.executable, "-c", "from numba import cuda; print(cuda.is_available())"],
                           env=_env(), capture_output=True, text=True)
    return probe.stdout.strip() == "True"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_2_before_any_work(tmp_path):
    if _gpu_here():
        pytest.skip("this machine has a GPU: the script would run the proof")
    # the simulator variable is set on purpose: the proof never counts the simulator
    proc = subprocess.run(["bash", str(SCRIPT), "--reports", str(tmp_path / "reports"),
                           "--copy-to", str(tmp_path / "out")], cwd=tmp_path,
                          env=_env(NUMBA_ENABLE_CUDASIM="1"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [gp.NO_GPU] and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no reports folder, nothing copied


def test_the_plan_names_paths_that_exist_and_writes_only_what_it_cleans_and_copies(tmp_path):
    """Every script and test folder a step needs is in the repository (a move of the
    CUDA tests must update the proof), and every output lies in the reports folder
    under a name the run removes first and copies after each step."""
    steps = gp.plan(reports=tmp_path, cpu_bfs=5.0, cc3d="2048x2048=0.05")
    assert [s.name.split(":")[0] for s in steps][:2] == ["bench_gpu.py", "CUDA tests"]
    assert set(gp.CUDA_TESTS) == set(CUDA_TEST_DIRS)  # every CUDA test folder, no other
    for step in steps:
        for need in step.needs:
            assert (ROOT / need).exists(), (step.name, need)
        for arg in step.argv[1:]:
            if arg.endswith(".py"):
                assert (ROOT / arg).is_file(), arg
        for out in step.outputs:
            assert out.parent == tmp_path and out.name in gp.WRITES
    assert (gp.SUPPORT / "gpu_proof_ising.py").is_file()
    assert (STAND_IN / "hypothesis" / "strategies.py").is_file()
    assert "--cpu-bfs-seconds" in steps[0].argv and "2048x2048=0.05" in steps[0].argv


def test_the_bfs_baseline_comes_from_reports_core_json(tmp_path):
    seconds, source = gp.cpu_bfs_default()
    want = json.loads((ROOT / "reports" / "core.json").read_text())["results"]["bfs512"]["seconds"]
    assert seconds == want and "reports/core.json" in source
    assert gp.cpu_bfs_default(tmp_path)[0] is None  # no reports/core.json there


# -- the step runner ---------------------------------------------------------------------
def _step(code, limit=30):
    return gp.Step("s", [sys.executable, "-c", textwrap.dedent(code)], limit)


@pytest.mark.parametrize("code, status, rc", [
    ("print('hello')", "ok", 0),
    ("import sys; print('hello'); sys.exit(3)", "failed (exit 3)", 3),
])
def test_a_step_reports_its_exit_and_its_output_reaches_the_log(tmp_path, code, status, rc):
    with open(tmp_path / "log", "w") as log:
        step = gp.run_step(_step(code), limit_s=30, env=_env(), log=log)
    assert (step.status, step.returncode) == (status, rc)
    assert (tmp_path / "log").read_text() == "hello\n"


def test_a_step_past_its_limit_gets_ctrl_c_and_pytest_style_cleanup_runs(tmp_path):
    code = """
        import time
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            print("interrupted: results written")
            raise SystemExit(2)
    """
    with open(tmp_path / "log", "w") as log:
        step = gp.run_step(_step(code), limit_s=1, env=_env(PYTHONUNBUFFERED="1"), log=log)
    assert step.status == "timed out after 1 s" and step.returncode == 2
    assert "interrupted: results written" in (tmp_path / "log").read_text()


def test_a_step_that_ignores_ctrl_c_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(gp, "GRACE_S", 1)
    code = """
        import signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        time.sleep(60)
    """
    with open(tmp_path / "log", "w") as log:
        step = gp.run_step(_step(code), limit_s=1, env=_env(), log=log)
    assert step.status == "timed out after 1 s" and step.returncode == -9


# -- the Hypothesis stand-in and the JUnit counts ------------------------------------------
FIXTURE_TESTS = '''
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

settings.register_profile("p", max_examples=3, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("p")


@st.composite
def pairs(draw):
    return draw(st.integers(0, 3)), draw(st.integers(0, 3))


NUMBERS = st.integers(0, 9).map(lambda x: 2 * x) | st.just(1)


def test_passes():
    assert True


def test_fails():
    assert False


@pytest.fixture
def broken():
    raise RuntimeError("broken fixture")


def test_errors(broken):
    pass


def test_skips():
    pytest.skip("a plain skip")


@pytest.mark.parametrize("k", [1, 2])
@settings(max_examples=5, deadline=None)
@given(p=pairs(), n=NUMBERS)
def test_property(k, p, n, tmp_path):
    raise AssertionError("a property test must not run without Hypothesis")
'''


@pytest.fixture(scope="module")
def junit_without_hypothesis(tmp_path_factory):
    """A pytest run of FIXTURE_TESTS with the stand-in in Hypothesis's place (and
    Hypothesis's own pytest plugin off, as where it is not installed)."""
    d = tmp_path_factory.mktemp("standin")
    (d / "test_fixture.py").write_text(FIXTURE_TESTS)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:hypothesispytest", "-o", "addopts=", "test_fixture.py",
                           "--junitxml", str(d / "junit.xml")],
                          cwd=d, env=_env(PYTHONPATH=str(STAND_IN)), capture_output=True, text=True,
                          timeout=120)
    return proc, d / "junit.xml"


def test_without_hypothesis_each_property_test_is_skipped_and_the_others_run(junit_without_hypothesis):
    proc, _ = junit_without_hypothesis
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_fails and test_errors
    assert "1 failed, 1 passed, 3 skipped, 1 error" in proc.stdout, proc.stdout
    assert "a property test must not run" not in proc.stdout


def test_junit_counts_match_the_run(junit_without_hypothesis):
    _, path = junit_without_hypothesis
    c = gp.junit_counts(path)
    assert {k: c[k] for k in ("tests", "passed", "failed", "errors", "skipped", "stand_in_skips")} == {
        "tests": 6, "passed": 1, "failed": 1, "errors": 1, "skipped": 3, "stand_in_skips": 2}
    assert sorted(f.split("::")[1] for f in c["failures"]) == ["test_errors", "test_fails"]
    assert gp.junit_counts(path.parent / "missing.xml") is None


# -- the calibration stamp and the summary -------------------------------------------------
def test_the_calibration_gets_the_device_and_still_reads_back(tmp_path):
    from catalytic.router import read_calibration, shipped_calibration_path

    path = tmp_path / "calibration_gpu.json"
    shutil.copy(shipped_calibration_path(), path)
    before = json.loads(path.read_text())
    assert gp.stamp_calibration(path, "NVIDIA H200, compute capability 9.0")
    doc = read_calibration(path)  # the router's own schema check
    assert doc["machine"] == {**before.get("machine", {}), "gpu": "NVIDIA H200, compute capability 9.0"}
    assert doc["entries"] == before["entries"]
    assert not gp.stamp_calibration(tmp_path / "none.json", "x")


def _ran(name, status, outputs=(), junit=None):
    step = gp.Step(name, [sys.executable, "x.py"], 60, outputs=list(outputs), junit=junit)
    step.status, step.seconds = status, 12.0
    return step


def test_the_summary_is_appended_to_the_report_and_stored_in_its_json(tmp_path, junit_without_hypothesis):
    _, junit = junit_without_hypothesis
    md, js = tmp_path / "gpu.md", tmp_path / "gpu.json"
    md.write_text("# GPU benchmarks\n\n| a | b |\n")
    js.write_text(json.dumps({"device": {"name": "H200"}, "bfs": {"gpu_s": 0.1}}))
    steps = [_ran("bench", "ok", [md]), _ran("CUDA tests", "failed (exit 1)", junit=str(junit)),
             _ran("memory", "not run: 3 s left")]
    text, doc = gp.summary(steps, device="H200, compute capability 9.0", budget_s=540,
                           wall_s=300, notes=["a note"], exit_status=1, root=tmp_path)
    gp.append_summary(tmp_path, text, doc, "H200, compute capability 9.0")
    got = md.read_text()
    assert got.startswith("# GPU benchmarks\n\n| a | b |\n") and got.endswith(text)
    for line in ("Device: H200, compute capability 9.0.", "| bench | ok | 12 | 60 | gpu.md |",
                 "| memory | not run: 3 s left |", "exit status 1",
                 "- CUDA tests: 1 passed, 1 failed, 1 errors, 3 skipped, of which 2 property tests",
                 "- a note"):
        assert line in got, line
    facts = json.loads(js.read_text())
    assert facts["bfs"] == {"gpu_s": 0.1} and facts["device"] == {"name": "H200"}
    assert facts["proof"]["exit_status"] == 1
    assert [s["status"] for s in facts["proof"]["steps"]] == ["ok", "failed (exit 1)", "not run: 3 s left"]
    assert facts["proof"]["tests"]["CUDA tests"]["failed"] == 1


def test_without_a_benchmark_report_the_summary_starts_one_naming_the_device(tmp_path):
    text, doc = gp.summary([_ran("bench", "failed (exit 1)")], device="H100", budget_s=540,
                           wall_s=5, notes=[], exit_status=1, root=tmp_path)
    gp.append_summary(tmp_path, text, doc, "H100")
    assert (tmp_path / "gpu.md").read_text().startswith("# GPU benchmarks\n\nDevice: H100.\n")
    assert json.loads((tmp_path / "gpu.json").read_text())["device"] == "H100"


def test_a_run_on_a_gpu_machine_keeps_order_stamps_copies_and_fails_on_a_failed_step(
        tmp_path, monkeypatch):
    """``main`` with the device probe answering as on a GPU machine (none is here) and
    short real steps in place of the proof's: every step runs in order or says why not,
    the calibration gets the device, the sweep sees it, the reports are copied, the
    summary ends the report, and one failed step makes the exit status 1."""
    from catalytic.router import shipped_calibration_path

    reports, out = tmp_path / "reports", tmp_path / "out"
    cal = reports / "calibration_gpu.json"
    py = lambda code: [sys.executable, "-c", code]  # noqa: E731
    steps = [
        gp.Step("bench", py(f"open({str(reports / 'gpu.md')!r}, 'w').write('# GPU benchmarks\\n')"),
                30, outputs=[reports / "gpu.md"]),
        gp.Step("catalytic calibrate --quick",
                py(f"import shutil; shutil.copy({str(shipped_calibration_path())!r}, {str(cal)!r})"),
                30, outputs=[cal]),
        gp.Step("sweep", py("import os; print('sweep calibration:', os.environ['CATALYTIC_CALIBRATION'])"),
                30, env={"CATALYTIC_CALIBRATION": str(cal)}),
        gp.Step("failing", py("raise SystemExit(4)"), 30),
        gp.Step("moved", py("pass"), 30, needs=["tests/no_such_folder"]),
    ]
    monkeypatch.setattr(gp, "plan", lambda **kwargs: steps)
    monkeypatch.setattr(gp, "_PROBE", "import json; print(json.dumps({'name': 'Test GPU', "
                        "'compute_capability': [9, 0], 'driver_version': 13000, 'runtime_version': 13000}))")
    assert gp.main(["--reports", str(reports), "--copy-to", str(out), "--budget", "120"]) == 1
    device = "Test GPU, compute capability 9.0, driver 13000, runtime 13000"
    assert [s.status for s in steps] == ["ok", "ok", "ok", "failed (exit 4)",
                                         "failed: missing tests/no_such_folder"]
    assert json.loads(cal.read_text())["machine"]["gpu"] == device
    log = (reports / "gpu_proof.log").read_text()
    assert f"sweep calibration: {cal}" in log
    md = (reports / "gpu.md").read_text()
    assert md.startswith("# GPU benchmarks\n") and f"Device: {device}." in md
    assert "| failing | failed (exit 4) |" in md and "exit status 1" in md
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["gpu.md", "gpu.json", "calibration_gpu.json", "gpu_proof.log"])
    assert (out / "gpu.md").read_text() == md


def test_the_row_stack_shim_sets_the_alias_only_where_numpy_lacks_it(monkeypatch):
    """numba-cuda's array overloads name ``np.row_stack``, which NumPy 2.5 removed: the
    proof's sitecustomize puts the alias back (as ``np.vstack``), and leaves NumPy alone
    where it has one."""
    import runpy

    import numpy as np

    shim = gp.SUPPORT / "numpy_row_stack" / "sitecustomize.py"
    monkeypatch.delattr(np, "row_stack", raising=False)
    runpy.run_path(str(shim))
    assert np.row_stack is np.vstack
    mine = object()
    monkeypatch.setattr(np, "row_stack", mine, raising=False)
    runpy.run_path(str(shim))
    assert np.row_stack is mine


def test_the_row_stack_shim_is_wanted_only_by_a_numba_cuda_that_names_it(tmp_path, monkeypatch):
    """The plan puts the shim on PYTHONPATH (with a note) only when NumPy lacks
    ``row_stack`` and the installed numba-cuda's array overloads name it."""
    source = tmp_path / "numba_cuda" / "numba" / "cuda" / "np"
    source.mkdir(parents=True)
    (tmp_path / "numba_cuda" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "numba_cuda", raising=False)
    (source / "arrayobj.py").write_text("overload(np.row_stack)(impl_np_vstack)\n")
    assert gp._numba_cuda_wants_row_stack() is True
    (source / "arrayobj.py").write_text("overload(np.vstack)(impl_np_vstack)\n")
    assert gp._numba_cuda_wants_row_stack() is False
    (source / "arrayobj.py").unlink()
    assert gp._numba_cuda_wants_row_stack() is False
