"""The pytest plugin behind the CUDA tests (loaded by ``tests/conftest.py``): their
markers, the simulator's launch recorder, its refusal to slice an empty device array (as
a GPU refuses it), the cuda backend re-enabled after each test, and the ``compile_ptx``
fixture.

The CUDA tests are every test file under :data:`CUDA_TEST_DIRS` (the CUDA kernels'
tests and the cuda backend's); the README's simulator pass names these folders. There
are three ways to run them.

* With ``NUMBA_ENABLE_CUDASIM=1`` (set before Numba is imported, as the README's test
  command does): every kernel runs in the simulator at small size and is compared with
  its CPU twin. Tests marked ``sim``, plus ``simulator_only`` ones about the simulator
  itself.
* Without it, on any machine: every kernel is compiled to PTX for sm_90 (H100) with NVVM,
  proving it types and lowers for a real GPU even on a machine without one. Tests marked
  ``ptx``; skipped with a reason when NVVM (``pip install "catalytic[cuda]"``) is missing.
* Without it, on a machine with a GPU: the ``sim`` tests run on the GPU as well, so the
  same comparisons with the CPU twins run on hardware.

Under pytest-xdist (``-n 2``, as the README's simulator pass runs), each worker records
its own launches and hands them to the controller, which runs the whole-session checks
(every kernel launched, every launch signature in the snapshot) on their union once
every worker is done, and fails the session if they fail; in the workers those two
tests skip.
"""

from __future__ import annotations

import os
import pathlib
import types as pytypes

import numpy as np
import pytest

from tests.support import ROOT, cuda_kernels

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _gpu_available() -> bool:
    if SIM:
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False


GPU = _gpu_available()


def _nvvm_available() -> bool:
    if SIM:
        return False
    try:
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
        return True
    except Exception:
        return False


#: the tests that check every kernel ran, and every launch signature is in the
#: snapshot; moved to the end of the run
LAST = ("test_every_cuda_kernel_ran_in_the_simulator",
        "test_every_launch_signature_is_in_the_snapshot")
#: the folders of the CUDA tests, relative to the repository root (the README's
#: simulator pass and ``benchmarks/gpu_proof.py`` name the same)
CUDA_TEST_DIRS = ("tests/kernels/cuda", "tests/backends/cuda_backend")


def _partial(config, items):
    """Why the selected tests may not launch every kernel (a ``-k``/``-m`` filter,
    deselected or single tests, a CUDA test file left out), or None when every CUDA test
    file is collected whole."""
    opt = config.option
    for flag, what in ((opt.keyword, "-k"), (opt.markexpr, "-m"),
                       (getattr(opt, "deselect", None), "--deselect"),
                       (getattr(opt, "lf", False), "--lf")):
        if flag:
            return f"{what} selects tests"
    if any("::" in str(a) for a in config.args):
        return "single tests named"
    have = {pathlib.Path(str(item.path)).resolve() for item in items}
    missing = sorted(str(p.relative_to(ROOT)) for d in CUDA_TEST_DIRS
                     for p in (ROOT / d).rglob("test_*.py") if p.resolve() not in have)
    return f"not collected: {', '.join(missing)}" if missing else None


@pytest.fixture(scope="session", autouse=True)
def _record_simulator_launches():
    """Under the simulator, note the Python function of every kernel launched from the
    host (``cuda_kernels.LAUNCHED``) and its argument types (``cuda_kernels.SIGNATURES``),
    for the checks that every kernel ran and that every launch signature compiles."""
    if not SIM:
        yield
        return
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    real = FakeCUDAKernel.__call__

    def call(self, *args):
        if not self._device:
            cuda_kernels.record(self.fn, args)
        return real(self, *args)

    FakeCUDAKernel.__call__ = call
    try:
        yield
    finally:
        FakeCUDAKernel.__call__ = real


@pytest.fixture(scope="session", autouse=True)
def _empty_device_arrays_refuse_slicing():
    """Under the simulator, slicing an empty device array raises, as it does on a GPU.

    numba-cuda allocates no device memory for an empty array, and ``MemoryPointer.view``
    refuses any slice of that NULL buffer ("non-empty slice into empty slice"), even
    ``d[:0]`` (an empty slice of a non-empty array has a pointer, and may be sliced); the
    simulator wraps a NumPy array and would let the slice pass. The GPU
    proof found a kernel host function doing this (the bucket width of a lattice without a
    mask): with this the simulator pass fails there too."""
    if not SIM:
        yield
        return
    import threading

    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    from numba.cuda.simulator.kernel import BlockThread

    real = FakeCUDAArray.__getitem__

    def getitem(self, idx):
        if isinstance(threading.current_thread(), BlockThread):
            return real(self, idx)  # inside a kernel: an array is indexed, never viewed
        root = self._ary  # the allocation this array views: NULL on a GPU when empty
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.size == 0:
            raise RuntimeError("non-empty slice into empty slice (numba-cuda refuses any "
                               "slice of an empty device array on a GPU)")
        return real(self, idx)

    FakeCUDAArray.__getitem__ = getitem
    try:
        yield
    finally:
        FakeCUDAArray.__getitem__ = real


@pytest.fixture(autouse=True)
def _cuda_enabled_again_after_each_test():
    """After each test, re-enable the cuda backend if the engine disabled it after
    repeated failures, so one test's failures are reported by that test and do not make
    every later test in the process fail with "disabled for this process"."""
    yield
    import catalytic as cat

    engine = cat.get_engine()
    backend = engine.registry.backends.get("cuda")
    if backend is not None and backend.disabled:
        engine.reset_backend("cuda")


# -- pytest-xdist: the whole-session checks over every worker's launches -------------------
def _xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _xdist_controller(config) -> bool:
    return getattr(config.option, "dist", "no") != "no" and not _xdist_worker(config)


def pytest_sessionfinish(session):
    """A worker hands its launches to the controller; the controller, once every worker
    is done, runs the checks of :data:`LAST` on their union (each worker saw only the
    launches of its own share of the tests, so there they skip)."""
    config = session.config
    if not SIM:
        return
    if _xdist_worker(config):
        config.workeroutput["cuda_launches"] = {
            "launched": cuda_kernels.launched_names(),
            "signatures": cuda_kernels.launched_signatures(),
            "partial": cuda_kernels.PARTIAL[0]}
        return
    parts = getattr(config, "_cuda_launches", None)
    if not _xdist_controller(config) or not parts:
        return
    report = config.pluginmanager.get_plugin("terminalreporter")
    report.write("\n")  # after the workers' progress line
    partial = next((p["partial"] for p in parts if p["partial"] is not None), None)
    if partial is not None:
        report.write_line(f"whole-session CUDA checks skipped: only part of the CUDA "
                          f"tests ran ({partial})")
        return
    never = cuda_kernels.never_launched(
        set().union(*(p["launched"] for p in parts)))
    got = cuda_kernels.merge_signatures(p["signatures"] for p in parts)
    failures = []
    if never:
        failures.append(f"kernels no test launched in the simulator: {never}")
    if os.environ.get("CATALYTIC_WRITE_LAUNCH_SIGNATURES") == "1":
        cuda_kernels.write_snapshot(got)
        report.write_line(f"wrote {cuda_kernels.SNAPSHOT.name}: "
                          f"{len(cuda_kernels._flat(got))} signatures")
    else:
        missing, stale = cuda_kernels.snapshot_diff(got)
        if missing or stale:
            failures.append(
                f"{cuda_kernels.SNAPSHOT.name} is out of date (rewrite it with "
                f"CATALYTIC_WRITE_LAUNCH_SIGNATURES=1 and a full simulator pass): launched "
                f"but not in it: {missing}; in it but not launched: {stale}")
    for text in failures:
        report.write_sep("=", "whole-session CUDA check failed", red=True)
        report.write_line(text)
    if failures:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        report.write_line(f"whole-session CUDA checks passed over {len(parts)} workers: "
                          "every kernel launched, every launch signature in the snapshot")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """Controller side of pytest-xdist: keep each finished worker's launches."""
    out = getattr(node, "workeroutput", {}).get("cuda_launches")
    if out is not None:
        config = node.config
        if not hasattr(config, "_cuda_launches"):
            config._cuda_launches = []
        config._cuda_launches.append(out)


def pytest_collection_modifyitems(config, items):
    last = [item for item in items if item.name in LAST]
    if last:
        items[:] = [item for item in items if item.name not in LAST] + last
        if _xdist_worker(config):
            for item in last:
                item.add_marker(pytest.mark.skip(
                    reason="pytest-xdist: a worker sees only its share of the launches; "
                    "the controller checks them all at the end of the session"))
    cuda_kernels.PARTIAL[0] = _partial(config, items)
    nvvm_ok = None
    for item in items:
        if "simulator_only" in item.keywords and not SIM:
            item.add_marker(pytest.mark.skip(reason="about the simulator: run with NUMBA_ENABLE_CUDASIM=1"))
        if "sim" in item.keywords and not (SIM or GPU):
            item.add_marker(pytest.mark.skip(
                reason="runs CUDA kernels: set NUMBA_ENABLE_CUDASIM=1, or run on a GPU"))
        if "ptx" in item.keywords:
            if SIM:
                item.add_marker(pytest.mark.skip(reason="PTX compile test: run without the simulator"))
                continue
            if nvvm_ok is None:
                nvvm_ok = _nvvm_available()
            if not nvvm_ok:
                item.add_marker(pytest.mark.skip(reason='NVVM missing: pip install "catalytic[cuda]"'))


@pytest.fixture
def compile_ptx(monkeypatch):
    """``compile_ptx(kernel, argtypes) -> str``: PTX of a @cuda.jit kernel for sm_90.

    Device functions are compiled for "the current device"; without a GPU there is none,
    so the dispatcher is told the device is compute capability 9.0 (an H100).
    """
    from numba import cuda
    import numba.cuda.dispatcher as dispatcher

    monkeypatch.setattr(
        dispatcher, "get_current_device", lambda: pytypes.SimpleNamespace(compute_capability=(9, 0))
    )

    def compile_(kernel, argtypes):
        func = getattr(kernel, "py_func", kernel)
        ptx, _ = cuda.compile_ptx(func, tuple(argtypes), cc=(9, 0))
        assert ".target sm_90" in ptx
        return ptx

    return compile_
