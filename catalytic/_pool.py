"""A pooled device allocator for Numba: RAPIDS RMM's pool behind Numba's External
Memory Management (EMM) interface.

``install_pool()`` (re-exported as ``catalytic.memory.install_pool``) makes every device
allocation Numba does (``cuda.device_array``, ``cuda.to_device``, kernel scratch) come
from an ``rmm.mr.PoolMemoryResource``: freed blocks stay in the pool and the next
request of a fitting size reuses them without a ``cudaMalloc``/``cudaFree`` pair.
The same manager is chosen without code by starting Python with
``NUMBA_CUDA_MEMORY_MANAGER=catalytic._pool`` (pool sizes are then RMM's defaults).

Why RMM's allocator and not ours: RMM's pool is the one the CUDA Python ecosystem
(cuDF, CuPy, Dask-CUDA) runs in production, and RMM ships the Numba plugin
(``rmm.allocators.numba.RMMNumbaManager``). The manager here is that plugin with four
changes, each because catalytic needs it:

* the pool is catalytic's own, built lazily per device at the first allocation (a pool
  cannot be built without a GPU, and the device is known only then) and passed to
  each ``DeviceBuffer`` explicitly, so installing it does not change which resource
  other RMM users in the process (CuPy, cuDF) allocate from, and its counters count
  only Numba's allocations;
* ``get_memory_info()`` answers (RMM's plugin raises ``NotImplementedError``, which would
  break every free-memory question the cuda backend and the memory monitor ask): free is
  the driver's free bytes plus the bytes the pool holds unused;
* an out-of-memory ``MemoryError`` from the pool becomes Numba's own
  ``CudaAPIError(CUDA_ERROR_OUT_OF_MEMORY)`` after flushing deferred frees and retrying
  once, as Numba's default manager does, so the engine treats it as a GPU failure
  (clean up, retry, fall back to the CPU) and not as a user error;
* statistics (:func:`pool_stats`): RMM's pool exposes only its size; the counts come
  from two ``rmm.mr.StatisticsResourceAdaptor`` layers, one above the pool (what Numba
  asked for) and one below it (what the pool took from the driver).

The module imports neither numba-cuda nor RMM until a function needs them, so
``import catalytic`` works without both.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from catalytic.errors import CatalyticError

__all__ = [
    "PoolTooLateError",
    "PoolUnavailableError",
    "install_pool",
    "pool_installed",
    "pool_stats",
    "trim_pool",
]

#: ``NUMBA_CUDA_MEMORY_MANAGER`` values that select this manager (the module exposes
#: ``_numba_memory_manager``, built on first access).
MANAGER_MODULES = ("catalytic._pool",)

_INSTALL_HINT = 'pip install "catalytic[cuda]"'
_ALIGN = 256  # RMM's pool wants sizes in multiples of 256 bytes

_lock = threading.RLock()
_settings: dict[str, int | None] = {"initial_size": None, "maximum_size": None}
_pools: dict[int, _DevicePool] = {}
_manager_class = None


class PoolUnavailableError(CatalyticError, ImportError):
    """The pool cannot be installed because numba-cuda or RMM is missing (or does not
    load); the message names the package and the extra to install."""


class PoolTooLateError(CatalyticError, RuntimeError):
    """Numba's memory manager is already fixed: a CUDA context exists (it took the
    manager installed when it was created), or another EMM plugin was chosen first."""


@dataclass
class _DevicePool:
    """One device's pool and the two counters around it."""

    pool: Any          # rmm.mr.PoolMemoryResource
    requested: Any     # StatisticsResourceAdaptor above the pool: what Numba asked for
    upstream: Any      # StatisticsResourceAdaptor below the pool: what the pool took
    grows_at_start: int  # upstream allocations made while building (the initial size)


# --------------------------------------------------------------------------- public


def install_pool(initial_size: int | None = None, maximum_size: int | None = None) -> str:
    """Make Numba allocate device memory from an RMM pool; call before the first GPU
    allocation.

    Parameters
    ----------
    initial_size : int, optional
        Bytes the pool reserves when it is built (at the first allocation on each
        device). None: RMM's default, half of the device's free memory then. ``0``:
        start empty and grow on demand. Rounded up to a multiple of 256.
    maximum_size : int, optional
        Bytes the pool may grow to on each device; None: no limit but the device.
        Rounded up to a multiple of 256; must not be below ``initial_size``.

    Returns
    -------
    str
        What was installed (or that it already was, or that nothing was: under the CUDA
        simulator, ``NUMBA_ENABLE_CUDASIM=1``, allocations are host memory and there is
        no memory manager to replace).

    Raises
    ------
    TypeError, ValueError
        A size that is not a non-negative integer, or a maximum below the initial size.
    PoolUnavailableError
        numba-cuda or RMM (``rmm-cu13``) is not installed or does not load; an
        ``ImportError``.
    PoolTooLateError
        A CUDA context already exists (its memory manager was fixed when it was
        created), the pool was installed with other sizes and is in use, or another
        memory manager was chosen (``cuda.set_memory_manager`` or
        ``NUMBA_CUDA_MEMORY_MANAGER``); a ``RuntimeError``.

    Notes
    -----
    Installing is O(1) and touches no GPU; each device's pool is built at its first
    allocation. Calling again with the same sizes returns at once. The pool serves
    allocations by best fit over its free blocks (coalescing on free), so reuse is
    O(log b) in the number of free blocks b instead of a driver call.

    Examples
    --------
    >>> import catalytic._pool as pool
    >>> pool.install_pool(initial_size=-1)
    Traceback (most recent call last):
    ...
    ValueError: initial_size must be a non-negative integer number of bytes, got -1
    """
    initial = _check_size("initial_size", initial_size)
    maximum = _check_size("maximum_size", maximum_size)
    if initial is not None and maximum is not None and maximum < initial:
        raise ValueError(f"maximum_size ({maximum}) is below initial_size ({initial})")
    if _simulator():
        return ("nothing installed: NUMBA_ENABLE_CUDASIM=1 runs kernels in the CUDA "
                "simulator, which allocates host memory and has no device memory "
                "manager to replace")
    drv = _numba_driver()
    cls = _pool_manager_class()
    with _lock:
        current = getattr(drv, "_memory_manager", None)
        contexts = _contexts(drv)
        wanted = {"initial_size": initial, "maximum_size": maximum}
        if current is cls or (current is None and _env_selects_us(drv)):
            if _settings == wanted:
                return "already installed: " + _describe()
            if contexts or _pools:
                raise PoolTooLateError(
                    f"the pool is already installed and in use on device(s) "
                    f"{_ids(contexts) or sorted(_pools)} with {_describe()}; its sizes "
                    f"cannot change now. Call install_pool(...) with the sizes you want "
                    f"before the first GPU allocation")
            _settings.update(wanted)
            if current is None:
                drv.set_memory_manager(cls)
            return "installed: " + _describe()
        if contexts:
            raise PoolTooLateError(
                f"a CUDA context already exists on device(s) {_ids(contexts)}; Numba "
                f"fixed its memory manager ({_name(current)}) when it created that "
                f"context. Call catalytic.memory.install_pool() before the first GPU "
                f"allocation, or start Python with "
                f"NUMBA_CUDA_MEMORY_MANAGER=catalytic._pool")
        env = _env_manager(drv)
        foreign = current is not None and current is not drv.NumbaCUDAMemoryManager
        if foreign or env not in ("default", "rmm.allocators.numba"):
            chosen = _name(current) if foreign else f"NUMBA_CUDA_MEMORY_MANAGER={env}"
            raise PoolTooLateError(
                f"another memory manager was chosen first ({chosen}); catalytic does "
                f"not replace it. Remove that choice, or set "
                f"NUMBA_CUDA_MEMORY_MANAGER=catalytic._pool")
        _settings.update(wanted)
        drv.set_memory_manager(cls)
        return "installed: " + _describe()


def pool_installed() -> bool:
    """Whether Numba allocates (or, at its first CUDA context, will allocate) from
    catalytic's RMM pool.

    Returns
    -------
    bool
        True after :func:`install_pool` or with ``NUMBA_CUDA_MEMORY_MANAGER`` naming
        this manager; False under the CUDA simulator, without numba-cuda, or with any
        other manager (plain ``rmm.allocators.numba`` included: it uses RMM's current
        resource, a pool only if you configured one).

    Notes
    -----
    O(1); imports neither RMM nor touches the GPU.

    Examples
    --------
    >>> from catalytic._pool import pool_installed
    >>> isinstance(pool_installed(), bool)
    True
    """
    if _simulator():
        return False
    try:
        drv = _numba_driver()
    except PoolUnavailableError:
        return False
    current = getattr(drv, "_memory_manager", None)
    if current is not None:
        return bool(getattr(current, "_catalytic_pool", False))
    return _env_selects_us(drv)


def pool_stats() -> dict | None:
    """Counters of catalytic's RMM pool, summed over devices and per device.

    Returns
    -------
    dict or None
        None when the pool is not installed. Otherwise (all measured by RMM, bytes as
        requested; the pool itself rounds each block up to 256 bytes):

        ``initial_size``, ``maximum_size``
            the configured sizes (None: RMM's default / no limit);
        ``bytes_reserved``
            what the pools hold from the driver (``PoolMemoryResource.pool_size()``);
        ``bytes_in_use``
            bytes of live allocations; ``allocations_in_use`` their number;
        ``bytes_cached``
            ``bytes_reserved - bytes_in_use``: held by the pool, free for reuse;
        ``peak_bytes_in_use``
            the highest ``bytes_in_use`` per device, summed;
        ``allocations``
            allocations Numba requested since each pool was built;
        ``misses``
            of those, the ones the pool could not serve from what it held and grew
            for (one upstream ``cudaMalloc`` each; the initial reservation is not
            counted);
        ``hits``
            ``allocations - misses``: served from memory already in the pool;
        ``devices``
            ``{device id: the same figures}`` for each device with a pool.

        Before the first allocation the figures are zero and ``devices`` is empty.

    Notes
    -----
    RMM's pool does not count hits or misses itself; they are derived from two
    ``StatisticsResourceAdaptor`` layers, one above the pool (requests) and one below it
    (upstream allocations): a request that made the pool grow is a miss. Fragmentation
    shows as a miss too (the pool grew although ``bytes_cached`` was large enough).
    O(devices).

    Examples
    --------
    >>> from catalytic._pool import pool_stats, pool_installed
    >>> pool_installed() or pool_stats() is None
    True
    """
    if not pool_installed():
        return None
    with _lock:
        devices = {dev: _device_stats(p) for dev, p in sorted(_pools.items())}
    keys = ("bytes_reserved", "bytes_in_use", "bytes_cached", "peak_bytes_in_use",
            "allocations_in_use", "allocations", "hits", "misses")
    out: dict[str, Any] = dict(_settings)
    out.update({k: sum(d[k] for d in devices.values()) for k in keys})
    out["devices"] = devices
    return out


def trim_pool() -> int:
    """Give back to the driver the pools that hold no live allocation.

    RMM's pool cannot shrink while any of its blocks is in use; a device's pool with
    nothing in use is dropped whole (its memory goes back to the driver) and a new one
    is built at the next allocation on that device.

    Returns
    -------
    int
        Bytes released (the dropped pools' ``bytes_reserved``); 0 when nothing could be.

    Notes
    -----
    O(devices). Call with the device's CUDA context current (as after any catalytic GPU
    call); Numba's deferred frees are not flushed here.

    Examples
    --------
    >>> from catalytic._pool import trim_pool
    >>> trim_pool() >= 0
    True
    """
    released = 0
    with _lock:
        for dev, p in list(_pools.items()):
            if _counts(p.requested)["current_bytes"] == 0:
                released += int(p.pool.pool_size())
                del _pools[dev]
    return released


# ------------------------------------------------------------------------ helpers


def _check_size(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int number of bytes or None, got "
                        f"{type(value).__name__} {value!r}")
    n = int(value.__index__())
    if n < 0:
        raise ValueError(f"{name} must be a non-negative integer number of bytes, got {n}")
    return -(-n // _ALIGN) * _ALIGN


def _simulator() -> bool:
    from numba import config

    return bool(getattr(config, "ENABLE_CUDASIM", 0)) or (
        os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"))


def _numba_driver():
    try:
        from numba.cuda.cudadrv import driver
    except ImportError as err:
        raise PoolUnavailableError(
            f"the device-memory pool needs numba-cuda, which is not installed: "
            f"{_INSTALL_HINT}") from err
    return driver


def _import_rmm():
    try:
        import rmm
        import rmm.mr
        from rmm.allocators.numba import RMMNumbaManager
    except (ImportError, OSError) as err:
        raise PoolUnavailableError(
            f"the device-memory pool needs RAPIDS RMM (package rmm-cu13, Linux only), "
            f"which is not installed or does not load ({type(err).__name__}: {err}): "
            f'{_INSTALL_HINT} installs it, or pip install rmm-cu13; without it Numba '
            f"allocates with cudaMalloc per array as before") from err
    return rmm, RMMNumbaManager


def _env_manager(drv) -> str:
    return str(getattr(drv.config, "CUDA_MEMORY_MANAGER", "default"))


def _env_selects_us(drv) -> bool:
    return _env_manager(drv) in MANAGER_MODULES


def _contexts(drv) -> list:
    """Numba devices that already have a (primary) context: read without initialising
    the driver."""
    devices = getattr(getattr(drv, "driver", None), "devices", None) or {}
    return [d for d in list(devices.values())
            if getattr(d, "primary_context", None) is not None]


def _ids(devices) -> list:
    return sorted(getattr(d, "id", "?") for d in devices)


def _name(cls) -> str:
    if cls is None:
        return "Numba's default, cudaMalloc per allocation"
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe() -> str:
    ini, mx = _settings["initial_size"], _settings["maximum_size"]
    ini_s = "half of the free device memory (RMM's default)" if ini is None else f"{ini} bytes"
    mx_s = "no maximum" if mx is None else f"maximum {mx} bytes"
    return (f"RMM pool (rmm.mr.PoolMemoryResource) for Numba device allocations, "
            f"initial {ini_s}, {mx_s}, built per device at its first allocation")


def _counts(adaptor) -> dict:
    counts = adaptor.allocation_counts
    counts = counts() if callable(counts) else counts
    if isinstance(counts, dict):
        return counts
    return {k: getattr(counts, k) for k in ("current_bytes", "current_count", "peak_bytes",
                                              "peak_count", "total_bytes", "total_count")}


def _device_stats(p: _DevicePool) -> dict:
    req, up = _counts(p.requested), _counts(p.upstream)
    reserved = int(p.pool.pool_size())
    misses = max(0, int(up["total_count"]) - p.grows_at_start)
    allocations = int(req["total_count"])
    in_use = int(req["current_bytes"])
    return {"bytes_reserved": reserved, "bytes_in_use": in_use,
            "bytes_cached": max(0, reserved - in_use),
            "peak_bytes_in_use": int(req["peak_bytes"]),
            "allocations_in_use": int(req["current_count"]), "allocations": allocations,
            "hits": max(0, allocations - misses), "misses": misses}


def _device_pool(device_id: int) -> _DevicePool:
    """The pool of ``device_id``, built on first use (the device's context current)."""
    with _lock:
        p = _pools.get(device_id)
        if p is None:
            rmm, _ = _import_rmm()
            upstream = rmm.mr.StatisticsResourceAdaptor(rmm.mr.CudaMemoryResource())
            pool = rmm.mr.PoolMemoryResource(upstream, _settings["initial_size"],
                                             _settings["maximum_size"])
            p = _DevicePool(pool, rmm.mr.StatisticsResourceAdaptor(pool), upstream,
                            int(_counts(upstream)["total_count"]))
            _pools[device_id] = p
        return p


def _pool_manager_class():
    """The EMM plugin class (built once: it subclasses RMM's, imported here)."""
    global _manager_class
    if _manager_class is not None:
        return _manager_class
    _, RMMNumbaManager = _import_rmm()
    from numba.cuda.cudadrv import driver as drv

    class CatalyticPoolManager(RMMNumbaManager):
        """RMM's Numba EMM plugin over catalytic's per-device pool (see module doc)."""

        _catalytic_pool = True

        def memalloc(self, size):
            from rmm import pylibrmm

            mr = _device_pool(self.context.device.id).requested

            def allocate():
                return pylibrmm.DeviceBuffer(size=size, mr=mr)

            try:
                try:
                    buf = allocate()
                except MemoryError:
                    self.deallocations.clear()  # Numba's deferred frees, then retry once
                    buf = allocate()
            except MemoryError as err:
                raise drv.CudaAPIError(
                    drv.binding.CUresult.CUDA_ERROR_OUT_OF_MEMORY,
                    f"RMM pool could not allocate {size} bytes: {err}") from err
            ptr = int(buf.ptr)
            allocations = self.allocations
            allocations[ptr] = buf

            def finalizer():
                if allocations:  # emptied already by a context reset
                    allocations.pop(ptr, None)

            return drv.MemoryPointer(self.context, drv.binding.CUdeviceptr(ptr), size,
                                     finalizer=finalizer)

        def get_memory_info(self):
            free, total = drv.driver.cuMemGetInfo()
            p = _pools.get(self.context.device.id)
            if p is not None:
                st = _device_stats(p)
                free += st["bytes_cached"]
                cap = _settings["maximum_size"]
                if cap is not None:
                    free = min(free, max(0, cap - st["bytes_in_use"]))
            return drv.MemoryInfo(free=int(free), total=int(total))

        def reset(self):
            super().reset()
            with _lock:  # the context goes away with the pool's memory: start afresh
                _pools.pop(self.context.device.id, None)

    CatalyticPoolManager.__module__ = __name__
    CatalyticPoolManager.__qualname__ = "CatalyticPoolManager"
    _manager_class = CatalyticPoolManager
    return _manager_class


def __getattr__(name: str):
    # NUMBA_CUDA_MEMORY_MANAGER=catalytic._pool: Numba imports this module and reads
    # ``_numba_memory_manager`` when it creates the first CUDA context.
    if name == "_numba_memory_manager":
        return _pool_manager_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
