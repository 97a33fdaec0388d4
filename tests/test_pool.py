"""The pooled device allocator (RMM behind Numba's EMM interface): installed, refused
when too late or when another manager was chosen, a clear message when numba-cuda or
RMM is missing, the environment-variable route, and on a GPU real allocation and reuse.

Without a GPU the wiring is checked on Numba's own state (its memory-manager slot and
its record of created contexts); the GPU test runs in a fresh interpreter so that the
pool is installed before that process's first allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

import catalytic._pool as pool
from catalytic.errors import CatalyticError

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
needs_real_numba_cuda = pytest.mark.skipif(
    SIM, reason="NUMBA_ENABLE_CUDASIM=1: the simulator has no device memory manager to "
                "replace; the pass without the simulator checks the wiring")
HINT = 'pip install "catalytic[cuda]"'


def _run(script: str, **env) -> dict:
    """Run ``script`` in a fresh interpreter without the simulator; its last stdout line
    starting with RESULT is JSON."""
    full = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.fixture
def drv(monkeypatch):
    """Numba's driver module with a fresh memory-manager slot and catalytic's pool
    state cleared; both come back afterwards."""
    pytest.importorskip("numba.cuda", reason="needs numba-cuda (the cuda extra)")
    from numba.cuda.cudadrv import driver

    monkeypatch.setattr(driver, "_memory_manager", None)
    monkeypatch.setattr(driver.config, "CUDA_MEMORY_MANAGER", "default")
    monkeypatch.setattr(pool, "_settings", {"initial_size": None, "maximum_size": None})
    monkeypatch.setattr(pool, "_pools", {})
    # Numba's table of devices, emptied: on a GPU machine earlier tests created contexts
    monkeypatch.setattr(driver.driver, "devices", {})
    return driver


@pytest.fixture
def rmm():
    return pytest.importorskip("rmm", reason="needs RAPIDS RMM (rmm-cu13, in the cuda "
                                             "and dev extras on Linux)")


def _fake_context(monkeypatch, driver, device_id=7):
    """Record a created context in Numba's device table, as the first GPU allocation
    does (no GPU needed: the table is what the check reads)."""
    dev = types.SimpleNamespace(id=device_id, primary_context=object())
    monkeypatch.setitem(driver.driver.devices, device_id, dev)


# ------------------------------------------------------------------ everywhere


@pytest.mark.parametrize("kw, err, text", [
    ({"initial_size": -1}, ValueError, "got -1"),
    ({"maximum_size": 1.5}, TypeError, "float 1.5"),
    ({"initial_size": True}, TypeError, "bool True"),
    ({"initial_size": 4096, "maximum_size": 1024}, ValueError, "(1024) is below"),
])
def test_bad_sizes_are_refused_before_anything_happens(kw, err, text):
    with pytest.raises(err, match=r".*" + text.replace("(", r"\(").replace(")", r"\)")):
        pool.install_pool(**kw)


def test_module_imports_neither_numba_cuda_nor_rmm_and_says_what_to_install():
    """In a process where numba-cuda and RMM cannot be imported: importing works, the
    pool is reported absent, and install_pool names the extra."""
    out = _run("""
        import importlib.abc, json, sys

        class NoCuda(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name in ("numba.cuda", "rmm") or name.startswith(
                        ("numba.cuda.", "numba_cuda", "rmm.")):
                    raise ImportError(f"No module named {name!r}")
                return None

        sys.meta_path.insert(0, NoCuda())
        import catalytic._pool as pool
        loaded = [m for m in sys.modules if m.startswith(("numba.cuda", "rmm"))]
        out = {"loaded": loaded, "installed": pool.pool_installed(),
               "stats": pool.pool_stats()}
        try:
            pool.install_pool()
        except pool.PoolUnavailableError as err:
            out["error"] = str(err)
            out["is_import_error"] = isinstance(err, ImportError)
        print("RESULT", json.dumps(out))
    """)
    assert out["loaded"] == [] and out["installed"] is False and out["stats"] is None
    assert out["is_import_error"]
    assert "numba-cuda" in out["error"] and HINT in out["error"]


# ------------------------------------------------------------ the simulator pass


@pytest.mark.skipif(not SIM, reason="checks what install_pool does under the simulator "
                                    "(NUMBA_ENABLE_CUDASIM=1 only)")
def test_simulator_installs_nothing_and_says_so():
    said = pool.install_pool(initial_size=0)
    assert said.startswith("nothing installed") and "simulator" in said
    assert pool.pool_installed() is False and pool.pool_stats() is None
    assert pool.trim_pool() == 0


# ------------------------------------------------- the wiring, without the simulator


@needs_real_numba_cuda
def test_install_sets_numbas_memory_manager(drv, rmm):
    said = pool.install_pool(initial_size=1000, maximum_size=1 << 20)
    assert said.startswith("installed: RMM pool")
    assert "initial 1024 bytes" in said and "maximum 1048576 bytes" in said  # 256-aligned
    cls = drv._memory_manager
    assert cls is pool._numba_memory_manager and cls.__name__ == "CatalyticPoolManager"
    from rmm.allocators.numba import RMMNumbaManager

    assert issubclass(cls, RMMNumbaManager) and cls(context=None).interface_version == 1
    assert pool.pool_installed()
    stats = pool.pool_stats()
    assert stats["initial_size"] == 1024 and stats["maximum_size"] == 1 << 20
    assert stats["devices"] == {} and stats["allocations"] == stats["bytes_reserved"] == 0
    assert pool.install_pool(initial_size=1024, maximum_size=1 << 20).startswith(
        "already installed")
    # no context yet: the sizes may still change
    assert "initial 0 bytes, no maximum" in pool.install_pool(initial_size=0)


@needs_real_numba_cuda
def test_refused_when_a_cuda_context_exists(drv, rmm, monkeypatch):
    _fake_context(monkeypatch, drv)
    with pytest.raises(pool.PoolTooLateError) as info:
        pool.install_pool()
    msg = str(info.value)
    assert "CUDA context already exists on device(s) [7]" in msg
    assert "before the first GPU allocation" in msg
    assert "NUMBA_CUDA_MEMORY_MANAGER=catalytic._pool" in msg
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, CatalyticError)
    assert drv._memory_manager is None and not pool.pool_installed()


@needs_real_numba_cuda
def test_sizes_cannot_change_once_the_pool_is_in_use(drv, rmm, monkeypatch):
    pool.install_pool(initial_size=0)
    _fake_context(monkeypatch, drv)
    assert pool.install_pool(initial_size=0).startswith("already installed")
    with pytest.raises(pool.PoolTooLateError, match="cannot change now"):
        pool.install_pool(initial_size=1 << 20)
    assert pool.pool_stats()["initial_size"] == 0


@needs_real_numba_cuda
def test_another_memory_manager_is_not_replaced(drv, rmm, monkeypatch):
    from numba import cuda
    from rmm.allocators.numba import RMMNumbaManager

    cuda.set_memory_manager(RMMNumbaManager)  # a user's own choice, made first
    with pytest.raises(pool.PoolTooLateError,
                       match=r"rmm\.allocators\.numba\.RMMNumbaManager.*does not replace it"):
        pool.install_pool()
    assert drv._memory_manager is RMMNumbaManager

    monkeypatch.setattr(drv, "_memory_manager", None)
    monkeypatch.setattr(drv.config, "CUDA_MEMORY_MANAGER", "somebody.elses_manager")
    with pytest.raises(pool.PoolTooLateError,
                       match="NUMBA_CUDA_MEMORY_MANAGER=somebody.elses_manager"):
        pool.install_pool()
    # RMM's own plugin named in the environment: the pool is that plugin plus a pool
    monkeypatch.setattr(drv.config, "CUDA_MEMORY_MANAGER", "rmm.allocators.numba")
    assert not pool.pool_installed()
    assert pool.install_pool().startswith("installed")
    assert pool.pool_installed()


@needs_real_numba_cuda
def test_clear_message_when_rmm_is_missing(drv, monkeypatch):
    monkeypatch.setattr(pool, "_manager_class", None)
    for name in [m for m in sys.modules if m == "rmm" or m.startswith("rmm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rmm", None)  # import rmm -> ImportError
    with pytest.raises(pool.PoolUnavailableError) as info:
        pool.install_pool()
    msg = str(info.value)
    assert HINT in msg and "rmm-cu13" in msg and "Linux" in msg
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value.__cause__, ImportError)
    assert drv._memory_manager is None and not pool.pool_installed()


@needs_real_numba_cuda
def test_stats_and_trim_over_a_real_rmm_pool_without_a_gpu(drv, rmm):
    """An RMM pool of initial size 0 can be built without a device (it allocates
    nothing); its counters are read through the same path as on a GPU."""
    pool.install_pool(initial_size=0, maximum_size=1 << 20)
    pool._device_pool(0)
    stats = pool.pool_stats()
    assert list(stats["devices"]) == [0]
    assert stats["devices"][0] == {"bytes_reserved": 0, "bytes_in_use": 0, "bytes_cached": 0,
                                   "peak_bytes_in_use": 0, "allocations_in_use": 0,
                                   "allocations": 0, "hits": 0, "misses": 0}
    assert pool.trim_pool() == 0 and pool.pool_stats()["devices"] == {}


def _counters(current_bytes=0, current_count=0, peak_bytes=0, total_bytes=0, total_count=0):
    return types.SimpleNamespace(allocation_counts=types.SimpleNamespace(
        current_bytes=current_bytes, current_count=current_count, peak_bytes=peak_bytes,
        peak_count=current_count, total_bytes=total_bytes, total_count=total_count))


def test_hits_and_misses_come_from_the_two_counter_layers():
    """5 requests, the pool grew 3 times, once of them for its initial reservation:
    2 misses, 3 hits; cached = reserved - in use."""
    requested = _counters(current_bytes=300, current_count=1, peak_bytes=900,
                          total_bytes=1500, total_count=5)
    upstream = _counters(current_bytes=4096, total_bytes=4096, total_count=3)
    p = pool._DevicePool(types.SimpleNamespace(pool_size=lambda: 4096), requested,
                         upstream, grows_at_start=1)
    assert pool._device_stats(p) == {
        "bytes_reserved": 4096, "bytes_in_use": 300, "bytes_cached": 3796,
        "peak_bytes_in_use": 900, "allocations_in_use": 1, "allocations": 5,
        "hits": 3, "misses": 2}


# ------------------------------------------------- NUMBA_CUDA_MEMORY_MANAGER route


ENV_SCRIPT = """
    import json
    import catalytic._pool as pool
    from numba.cuda.cudadrv import driver
    out = {"before": pool.pool_installed()}
    driver._ensure_memory_manager()  # what Numba does when it creates a context
    out["manager"] = getattr(driver._memory_manager, "__qualname__", None)
    out["after"] = pool.pool_installed()
    try:
        out["install"] = pool.install_pool()
    except pool.PoolTooLateError as err:
        out["install"] = "refused: " + str(err)
    print("RESULT", json.dumps(out))
"""


@pytest.mark.parametrize("value, before, manager, install", [
    ("catalytic._pool", True, "CatalyticPoolManager", "already installed"),
    # RMM's plain plugin, once Numba has taken it, is not silently replaced
    ("rmm.allocators.numba", False, "RMMNumbaManager", "refused: another memory manager"),
])
def test_numba_cuda_memory_manager_is_honoured(rmm, value, before, manager, install):
    pytest.importorskip("numba.cuda", reason="needs numba-cuda (the cuda extra)")
    out = _run(ENV_SCRIPT, NUMBA_CUDA_MEMORY_MANAGER=value)
    assert out["before"] is before and out["manager"] == manager
    assert out["after"] is before and out["install"].startswith(install)


# ---------------------------------------------------------------- on a real GPU


GPU_SCRIPT = """
    import gc, json
    import numpy as np
    import catalytic._pool as pool
    out = {"install": pool.install_pool(initial_size=0)}
    from numba import cuda

    n = 1 << 18  # 1 MiB of float32
    a = cuda.to_device(np.arange(n, dtype=np.float32))
    out["first"] = pool.pool_stats()

    @cuda.jit
    def double(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] *= 2

    double[(n + 255) // 256, 256](a)
    out["kernel_ok"] = bool((a.copy_to_host() == 2 * np.arange(n, dtype=np.float32)).all())
    del a
    gc.collect()
    cuda.current_context().deallocations.clear()
    out["freed"] = pool.pool_stats()
    b = cuda.device_array(n, dtype=np.float32)
    out["reused"] = pool.pool_stats()
    free, total = cuda.current_context().get_memory_info()
    out["memory_info"] = [int(free), int(total)]
    try:
        pool.install_pool(initial_size=1 << 20)
    except pool.PoolTooLateError as err:
        out["late"] = str(err)
    del b
    gc.collect()
    out["trimmed"] = pool.trim_pool()
    out["after_trim"] = pool.pool_stats()
    print("RESULT", json.dumps(out, default=str))
"""

LATE_SCRIPT = """
    import json
    from numba import cuda
    import catalytic._pool as pool
    out = {}
    cuda.device_array(16)  # the first allocation creates the context
    try:
        pool.install_pool()
    except pool.PoolTooLateError as err:
        out["late"] = str(err)
    print("RESULT", json.dumps(out))
"""

OOM_SCRIPT = """
    import json
    import numpy as np
    import catalytic._pool as pool
    pool.install_pool(initial_size=0, maximum_size=1 << 20)
    from numba import cuda
    from numba.cuda.cudadrv.driver import CudaAPIError
    out = {}
    try:
        cuda.device_array(1 << 20, dtype=np.float32)  # 4 MiB > the 1 MiB maximum
    except CudaAPIError as err:
        out["oom"] = [int(err.code), str(err)]
    print("RESULT", json.dumps(out))
"""


def _gpu_reason() -> str | None:
    if SIM:
        return "NUMBA_ENABLE_CUDASIM=1: the simulator has no device memory to pool"
    try:
        import rmm  # noqa: F401
        from numba import cuda
    except ImportError as err:
        return f"needs numba-cuda and RMM ({err})"
    try:
        if not cuda.is_available():
            return "no CUDA GPU on this machine"
    except Exception as err:  # noqa: BLE001 - a broken driver is "no GPU" here
        return f"no usable CUDA GPU ({type(err).__name__}: {err})"
    return None


@pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))
def test_gpu_allocations_come_from_the_pool_and_are_reused():
    out = _run(GPU_SCRIPT)
    assert out["install"].startswith("installed") and out["kernel_ok"]
    first, freed, reused = out["first"], out["freed"], out["reused"]
    nbytes = 4 << 18
    assert first["bytes_in_use"] >= nbytes and first["misses"] >= 1
    assert first["bytes_reserved"] >= first["bytes_in_use"]
    assert freed["bytes_in_use"] == first["bytes_in_use"] - nbytes
    assert freed["bytes_cached"] >= nbytes  # the block stayed in the pool
    # the same size again: served from the pool, no new driver allocation
    assert reused["allocations"] == freed["allocations"] + 1
    assert reused["misses"] == freed["misses"] and reused["hits"] == freed["hits"] + 1
    assert reused["bytes_reserved"] == freed["bytes_reserved"]
    free, total = out["memory_info"]
    assert 0 < free <= total
    assert "cannot change now" in out["late"]
    assert out["trimmed"] == reused["bytes_reserved"] and out["after_trim"]["devices"] == {}
    assert list(out["first"]["devices"]) == ["0"]


@pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))
def test_gpu_too_late_after_the_first_allocation_and_oom_is_a_cuda_error():
    late = _run(LATE_SCRIPT)["late"]
    assert "CUDA context already exists on device(s) [0]" in late
    code, text = _run(OOM_SCRIPT)["oom"]
    from numba.cuda.cudadrv.driver import binding

    assert code == int(binding.CUresult.CUDA_ERROR_OUT_OF_MEMORY)
    assert "RMM pool could not allocate" in text
