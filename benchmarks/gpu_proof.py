"""The GPU proof in one command: ``bash benchmarks/gpu_proof.sh`` (which runs this file).

On a machine with an NVIDIA GPU, within ``--budget`` seconds (540 by default, so that
one command of 10 minutes holds it), the steps below run in this order, most valuable
report first, each in its own process with its own time limit (the CUDA kernels are
not cached on disk, so each process compiles those it launches):

1. ``bench_gpu.py`` bandwidth, BFS, components, transfers and transport: ``reports/gpu.md`` and
   ``reports/gpu.json`` (rewritten after each part, so a stopped run leaves what it
   measured);
2. the CUDA tests (``tests/kernels/cuda`` and ``tests/backends/cuda_backend``) on the GPU,
   not the simulator: ``reports/gpu_tests.xml``;
3. bonds at size (``gpu_proof_support/gpu_proof_bonds.py``): bond-masked BFS, Dijkstra
   with bond weights and components on cuda at 512^2 and 128^3 against SciPy (and
   numba-cpu where it honours bonds), with the time of each beside the call without
   bonds, and wrapping on tori at p_c against numba-cpu with its time beside cuda's
   labelling: ``reports/gpu_bonds.json``;
4. the catalytic-ising plugin's CUDA tests: ``reports/gpu_tests_ising.xml``;
5. ``catalytic calibrate --quick``: ``reports/calibration_gpu.json``, the device under
   ``machine.gpu``;
6. ``bench_gpu.py`` router sweep, routed with that calibration, appended to ``gpu.md``;
7. ``bench_memory.py``: ``reports/memory_gpu.md``.

Then a summary (device, each step's status and time, test counts, notes) is appended to
``reports/gpu.md`` and stored under ``"proof"`` in ``reports/gpu.json``; everything
printed goes to ``reports/gpu_proof.log`` too. ``--copy-to DIR`` copies these files to
DIR after every step (a device session gets back only what lies in its ``$OUT``).

A step past its limit gets Ctrl-C (pytest then still writes its results), then is
killed 10 s later. A step that cannot start in the time left is not run. Where
Hypothesis is not installed, the tests run with a stand-in that skips each property
test (``gpu_proof_support/no_hypothesis``); where catalytic-ising has no entry point,
its tests register it themselves (``gpu_proof_support/gpu_proof_ising.py``). Nothing is
installed.

Exit status: 0 when every step passed; 1 when one failed, timed out or was not run;
2, before any work, when there is no NVIDIA GPU (numba.cuda sees none).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "benchmarks" / "gpu_proof_support"
#: the CUDA test suite and the plugin's tests, relative to the repository root
CUDA_TESTS = ("tests/kernels/cuda", "tests/backends/cuda_backend")
PLUGIN_TESTS = "plugins/catalytic-ising/tests"
#: numba-cpu 512^3 BFS and cc3d on the 2-core development machine, the baselines of
#: bench_gpu.py's targets. The BFS time is read from reports/core.json (bench_core.py's
#: ``results.bfs512``); reports/ holds no cc3d time at bench_gpu's sizes, so these
#: two are the ones measured with commit 2b1b4ff (bench_gpu.py's usage line).
CORE_REPORT = "reports/core.json"
CC3D_DEV_SECONDS = "2048x2048=0.0567,512x512x512=2.10"
CC3D_SOURCE = "cc3d on the 2-core development machine, commit 2b1b4ff (bench_gpu.py's usage line)"
#: seconds kept for the summary, and the least time a step is started with
RESERVE_S = 15
MIN_STEP_S = 20
#: seconds between Ctrl-C and the kill of a step past its limit
GRACE_S = 10
NO_GPU = "gpu_proof: no NVIDIA GPU: numba.cuda sees none, so there is nothing to prove here"

_PROBE = """
import json
import catalytic as cat
gpus = [d for d in cat.devices() if not d.get("simulator")]
print(json.dumps(gpus[0] if gpus else None, default=str))
"""


def _numba_cuda_wants_row_stack() -> bool:
    """Whether the installed numba-cuda's array overloads name ``np.row_stack``."""
    spec = importlib.util.find_spec("numba_cuda")
    if spec is None or not spec.submodule_search_locations:
        return False
    source = Path(list(spec.submodule_search_locations)[0], "numba", "cuda", "np", "arrayobj.py")
    try:
        return "np.row_stack" in source.read_text()
    except OSError:
        return False


@dataclass
class Step:
    """One command of the proof and, after it ran, its outcome."""

    name: str
    argv: list
    limit_s: float
    outputs: list = field(default_factory=list)
    needs: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    junit: str | None = None
    status: str = "not run"
    seconds: float = 0.0
    returncode: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _shown(path, root: Path = ROOT) -> str:
    """A path as the report names it: from the repository root when it lies there."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def device_line(dev: dict) -> str:
    """``name, compute capability X.Y, driver D, runtime R`` of a ``cat.devices()`` entry."""
    cc = dev.get("compute_capability")
    cc = ".".join(map(str, cc)) if isinstance(cc, (list, tuple)) else cc
    return (f"{dev.get('name')}, compute capability {cc}, driver {dev.get('driver_version')}, "
            f"runtime {dev.get('runtime_version')}")


def cpu_bfs_default(root: Path = ROOT) -> tuple[float | None, str]:
    """(seconds, source) of the numba-cpu 512^3 BFS in ``reports/core.json``; None
    with the reason when the file or the entry is missing."""
    path = root / CORE_REPORT
    try:
        seconds = float(json.loads(path.read_text())["results"]["bfs512"]["seconds"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        return None, f"none: {CORE_REPORT} has no results.bfs512.seconds ({type(err).__name__})"
    return seconds, f"{CORE_REPORT} results.bfs512 (bench_core.py, 2-core development machine)"


def plan(*, reports: Path, cpu_bfs: float | None, cc3d: str, python: str = sys.executable,
         root: Path = ROOT) -> list[Step]:
    """The steps, in the order they run; ``reports`` is where they write."""
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    gpu_md = reports / "gpu.md"
    bench = [python, "benchmarks/bench_gpu.py", "--output", rel(gpu_md)]
    if cpu_bfs is not None:
        bench += ["--cpu-bfs-seconds", f"{cpu_bfs:.3g}"]
    if cc3d:
        bench += ["--cc3d-seconds", cc3d]
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    calibration = reports / "calibration_gpu.json"
    # limits from the first run on hardware (H200, 2026-11-26, reports/gpu.md): the first
    # bench_gpu part took 34 s, the CUDA tests 205 s, calibrate 52 s, and the sweep
    # reached 2048^2 in 90 s (its 4096^2 row needs more: the NumPy reference there)
    return [
        # (+60 s for transport, not yet run on hardware: four lattices, each solved on
        # both backends, and its kernels compiled)
        Step("bench_gpu.py: bandwidth, BFS, components, transfers, transport",
             bench + ["--parts", "bandwidth,bfs,components,transfers,transport"], 150,
             outputs=[gpu_md, reports / "gpu.json"], needs=["benchmarks/bench_gpu.py"]),
        Step("CUDA tests", pytest + list(CUDA_TESTS) + ["--junitxml", rel(reports / "gpu_tests.xml")],
             240, outputs=[reports / "gpu_tests.xml"], needs=list(CUDA_TESTS),
             junit=str(reports / "gpu_tests.xml")),
        Step("gpu_proof_bonds.py: bond-masked BFS, Dijkstra, components, wrapping",
             [python, "benchmarks/gpu_proof_support/gpu_proof_bonds.py", "--output",
              rel(reports / "gpu_bonds.json")], 120, outputs=[reports / "gpu_bonds.json"],
             needs=["benchmarks/gpu_proof_support/gpu_proof_bonds.py"]),
        Step("catalytic-ising CUDA tests",
             pytest + ["-p", "gpu_proof_ising", PLUGIN_TESTS, "-k", "cuda",
                       "--junitxml", rel(reports / "gpu_tests_ising.xml")],
             60, outputs=[reports / "gpu_tests_ising.xml"], needs=[PLUGIN_TESTS],
             junit=str(reports / "gpu_tests_ising.xml")),
        Step("catalytic calibrate --quick",
             [python, "-m", "catalytic.cli", "calibrate", "--quick", "--output", rel(calibration)],
             90, outputs=[calibration]),
        Step("bench_gpu.py: router sweep, calibrated here", bench + ["--parts", "sweep", "--append"],
             150, outputs=[gpu_md, reports / "gpu.json"], needs=["benchmarks/bench_gpu.py"],
             env={"CATALYTIC_CALIBRATION": str(calibration)}),
        Step("bench_memory.py", [python, "benchmarks/bench_memory.py", "--output",
                                 rel(reports / "memory_gpu.md")],
             45, outputs=[reports / "memory_gpu.md"], needs=["benchmarks/bench_memory.py"]),
    ]


def _sigint_default():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_step(step: Step, *, limit_s: float, env: dict, log, cwd: Path = ROOT) -> Step:
    """Run ``step.argv`` for at most ``limit_s`` seconds (Ctrl-C, then a kill after
    :data:`GRACE_S`), its output copied to stdout and ``log``; sets the step's status:
    ``ok``, ``failed (exit N)`` or ``timed out after N s``."""
    t0 = time.monotonic()
    # SIGINT at its default in the step: started from a shell's background (nohup, &),
    # this script inherits it ignored, and so would the step, which then could not
    # write its results on Ctrl-C
    proc = subprocess.Popen(step.argv, cwd=cwd, env={**env, **step.env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_sigint_default)

    def copy():
        for line in iter(proc.stdout.readline, b""):
            text = line.decode(errors="replace")
            sys.stdout.write(text)
            sys.stdout.flush()
            log.write(text)
        log.flush()

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(timeout=5)
    step.seconds = time.monotonic() - t0
    step.returncode = proc.returncode
    if timed_out:
        step.status = f"timed out after {limit_s:.0f} s"
    elif proc.returncode == 0:
        step.status = "ok"
    else:
        step.status = f"failed (exit {proc.returncode})"
    return step


def junit_counts(path) -> dict | None:
    """``{tests, passed, failed, errors, skipped, stand_in_skips, failures}`` of a pytest
    JUnit XML file (``failures``: the ids of failed and erroring tests); None when the
    file is missing or unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0,
              "stand_in_skips": 0, "failures": []}
    for case in root.iter("testcase"):
        counts["tests"] += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None:
            counts["failed"] += 1
            counts["failures"].append(name)
        elif case.find("error") is not None:
            counts["errors"] += 1
            counts["failures"].append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
            if "gpu_proof stand-in" in (case.find("skipped").get("message") or ""):
                counts["stand_in_skips"] += 1
        else:
            counts["passed"] += 1
    return counts


def stamp_calibration(path, device: str) -> bool:
    """Write the device's name under ``machine.gpu`` of a calibration file (a key the
    calibration schema allows); False when the file is missing or unreadable."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(doc, dict):
        return False
    machine = doc.get("machine") if isinstance(doc.get("machine"), dict) else {}
    doc["machine"] = {**machine, "gpu": device}
    path.write_text(json.dumps(doc, indent=1))
    return True


def summary(steps, *, device: str, budget_s: float, wall_s: float, notes, exit_status: int,
            root: Path = ROOT) -> tuple[str, dict]:
    """The summary as markdown and as a JSON-ready dict."""
    tests = {}
    for step in steps:
        if step.junit:
            tests[step.name] = junit_counts(step.junit)
    lines = ["", "## The proof run (benchmarks/gpu_proof.sh)", "",
             f"Device: {device}.",
             f"Run on {datetime.date.today().isoformat()}: {wall_s:.0f} s of a {budget_s:.0f} s "
             f"budget; exit status {exit_status}.", "",
             "| step | status | seconds | limit | writes |", "| --- | --- | ---: | ---: | --- |"]
    for s in steps:
        outs = ", ".join(_shown(o, root) for o in s.outputs)
        lines.append(f"| {s.name} | {s.status} | {s.seconds:.0f} | {s.limit_s:.0f} | {outs} |")
    lines.append("")
    for name, c in tests.items():
        if c is None:
            lines.append(f"- {name}: no results (the step wrote no JUnit file).")
            continue
        stand_in = (f", of which {c['stand_in_skips']} property tests (Hypothesis missing)"
                    if c["stand_in_skips"] else "")
        lines.append(f"- {name}: {c['passed']} passed, {c['failed']} failed, {c['errors']} errors, "
                     f"{c['skipped']} skipped{stand_in}.")
        for failure in c["failures"][:20]:
            lines.append(f"  - not passed: `{failure}`")
        if len(c["failures"]) > 20:
            lines.append(f"  - and {len(c['failures']) - 20} more (see the JUnit file)")
    lines += [f"- {note}" for note in notes]
    doc = {"device": device, "date": datetime.date.today().isoformat(), "budget_s": budget_s,
           "wall_s": wall_s, "exit_status": exit_status,
           "steps": [{"name": s.name, "status": s.status, "seconds": s.seconds,
                      "limit_s": s.limit_s, "returncode": s.returncode,
                      "argv": [os.path.basename(a) if a == sys.executable else a for a in s.argv],
                      "outputs": [_shown(o, root) for o in s.outputs]} for s in steps],
           "tests": tests, "notes": list(notes)}
    return "\n".join(lines) + "\n", doc


def append_summary(reports: Path, text: str, doc: dict, device: str) -> None:
    """Append the summary to ``gpu.md`` and store it under ``"proof"`` in ``gpu.json``,
    creating either file (with the device) when the benchmark wrote none."""
    md, js = reports / "gpu.md", reports / "gpu.json"
    head = md.read_text().rstrip("\n") + "\n" if md.is_file() else (
        f"# GPU benchmarks\n\nDevice: {device}.\nbench_gpu.py wrote no report in this run "
        "(see its step below).\n")
    md.write_text(head + text)
    try:
        facts = json.loads(js.read_text()) if js.is_file() else {}
    except ValueError:
        facts = {}
    if not isinstance(facts, dict):
        facts = {}
    facts.setdefault("device", device)
    facts["proof"] = doc
    js.write_text(json.dumps(facts, indent=1, default=str))


def _copy(reports: Path, dest: Path | None, names) -> None:
    if dest is None:
        return
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = reports / name
        if src.is_file():
            shutil.copy2(src, dest / name)


#: what the proof writes under the reports folder (removed at the start of a run)
WRITES = ("gpu.md", "gpu.json", "gpu_tests.xml", "gpu_bonds.json", "gpu_tests_ising.xml",
          "calibration_gpu.json", "memory_gpu.md", "gpu_proof.log")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=540.0,
                    help="seconds for the whole run, the summary included (default 540)")
    ap.add_argument("--reports", type=Path, default=ROOT / "reports",
                    help="folder the reports go to (default: reports/)")
    ap.add_argument("--copy-to", type=Path, default=None, metavar="DIR",
                    help="copy the reports here after every step (e.g. a device session's $OUT)")
    ap.add_argument("--cpu-bfs-seconds", type=float, default=None,
                    help=f"bench_gpu.py's BFS baseline (default: from {CORE_REPORT})")
    ap.add_argument("--cc3d-seconds", default=None,
                    help=f"bench_gpu.py's cc3d baselines (default: {CC3D_DEV_SECONDS})")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the steps and their commands; run nothing (no GPU needed)")
    args = ap.parse_args(argv)
    if args.budget < RESERVE_S + MIN_STEP_S:
        ap.error(f"--budget must be at least {RESERVE_S + MIN_STEP_S} s, got {args.budget}")
    t0 = time.monotonic()
    reports = args.reports.resolve()
    notes = []
    if args.cpu_bfs_seconds is None:
        cpu_bfs, source = cpu_bfs_default()
    else:
        cpu_bfs, source = args.cpu_bfs_seconds, "given with --cpu-bfs-seconds"
    notes.append(f"bench_gpu.py's BFS baseline: {cpu_bfs:.3g} s, from {source}." if cpu_bfs
                 else f"bench_gpu.py's BFS baseline: {source}.")
    cc3d = CC3D_DEV_SECONDS if args.cc3d_seconds is None else args.cc3d_seconds
    notes.append(f"bench_gpu.py's cc3d baselines: {cc3d or 'none'}, from "
                 f"{CC3D_SOURCE if args.cc3d_seconds is None else 'given with --cc3d-seconds'}.")
    steps = plan(reports=reports, cpu_bfs=cpu_bfs, cc3d=cc3d)

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONUNBUFFERED"] = "1"  # the steps' output reaches the log as it is printed
    path = [str(ROOT), str(SUPPORT), str(ROOT / "plugins" / "catalytic-ising")]
    if importlib.util.find_spec("hypothesis") is None:
        path.insert(0, str(SUPPORT / "no_hypothesis"))
        notes.append("Hypothesis is not installed here: the tests ran with a stand-in "
                     "(benchmarks/gpu_proof_support/no_hypothesis) that skips each property "
                     "test; every other test ran as usual.")
    if not hasattr(__import__("numpy"), "row_stack") and _numba_cuda_wants_row_stack():
        path.insert(0, str(SUPPORT / "numpy_row_stack"))
        notes.append("NumPy here has no np.row_stack, which this numba-cuda overloads when it "
                     "compiles a kernel: the steps ran with a sitecustomize "
                     "(benchmarks/gpu_proof_support/numpy_row_stack) that sets np.row_stack = "
                     "np.vstack first; without it every CUDA compile fails.")
    if "ising" not in {ep.name for ep in metadata.entry_points(group="catalytic")}:
        notes.append("catalytic-ising is not installed here: its tests registered "
                     "catalytic_ising.plugin from the checkout on the engine "
                     "(benchmarks/gpu_proof_support/gpu_proof_ising.py), as its entry point would.")
    env["PYTHONPATH"] = os.pathsep.join(path + [p for p in [os.environ.get("PYTHONPATH")] if p])

    if args.dry_run:
        print(f"gpu_proof plan (budget {args.budget:.0f} s, reports in {reports}):")
        for s in steps:
            print(f"  [{s.limit_s:>4.0f} s] {s.name}: {' '.join(s.argv)}"
                  + "".join(f" ({k}={v})" for k, v in s.env.items()))
        for note in notes:
            print(f"  note: {note}")
        return 0

    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, timeout=120,
                               capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        print("gpu_proof: the device probe took over 120 s; nothing run", file=sys.stderr)
        return 1
    if probe.returncode != 0:
        print(f"gpu_proof: the device probe failed (exit {probe.returncode}); nothing run:\n"
              f"{probe.stderr.strip()}", file=sys.stderr)
        return 1
    dev = json.loads(probe.stdout.strip().splitlines()[-1])
    if dev is None:
        print(NO_GPU, file=sys.stderr)
        return 2
    device = device_line(dev)

    reports.mkdir(parents=True, exist_ok=True)
    for name in WRITES:  # every report of this folder is then from this run
        (reports / name).unlink(missing_ok=True)
    deadline = t0 + args.budget - RESERVE_S
    with open(reports / "gpu_proof.log", "w") as log:
        def say(text):
            print(text, flush=True)
            log.write(text + "\n")
            log.flush()

        say(f"gpu_proof: {device}; budget {args.budget:.0f} s")
        for step in steps:
            missing = [p for p in step.needs if not (ROOT / p).exists()]
            left = deadline - time.monotonic() - GRACE_S
            if missing:
                step.status = f"failed: missing {', '.join(missing)}"
            elif left < MIN_STEP_S:
                step.status = f"not run: {max(left, 0):.0f} s left"
            else:
                cal = step.env.get("CATALYTIC_CALIBRATION")
                if cal is not None and not Path(cal).is_file():
                    step.env = {}  # a missing file named there would stop the engine
                    notes.append(f"{step.name}: calibrate wrote no file, so it routed with "
                                 "the calibration catalytic found by itself (named in its rows).")
                step.limit_s = min(step.limit_s, left)
                say(f"\n=== {step.name} (limit {step.limit_s:.0f} s): {' '.join(step.argv)}")
                run_step(step, limit_s=step.limit_s, env=env, log=log)
                if step.name.startswith("catalytic calibrate") and not stamp_calibration(
                        step.outputs[0], device):
                    notes.append("calibrate wrote no calibration file to stamp with the device.")
            say(f"=== {step.name}: {step.status} ({step.seconds:.0f} s)")
            _copy(reports, args.copy_to, WRITES)
        status = 0 if all(s.ok for s in steps) else 1
        text, doc = summary(steps, device=device, budget_s=args.budget,
                            wall_s=time.monotonic() - t0, notes=notes, exit_status=status)
        append_summary(reports, text, doc, device)
        say(text)
    _copy(reports, args.copy_to, WRITES)
    return status


if __name__ == "__main__":
    sys.exit(main())
