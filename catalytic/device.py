"""Which CUDA devices this process can use: one probe, shared by the cuda backend, the
device-memory monitor, the batch processor and the profiler.

``numba.cuda`` is imported on first use, never when this module is, so ``import
catalytic`` works without the ``cuda`` extra. Under ``NUMBA_ENABLE_CUDASIM=1`` Numba's
CUDA simulator stands in for a device: results are real, speed is not.
"""

from __future__ import annotations

import os


def simulator_active() -> bool:
    """Whether Numba's CUDA simulator is on.

    Returns
    -------
    bool
        True when the environment variable ``NUMBA_ENABLE_CUDASIM`` is ``"1"``, read at
        each call.
    """
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def numba_cuda():
    """The ``numba.cuda`` module, imported on first use.

    Returns
    -------
    module
        ``numba.cuda``.

    Raises
    ------
    ImportError
        When Numba's CUDA target is not installed; the message names the extra to
        install (``pip install "catalytic[cuda]"``), chained from the original error.
    """
    try:
        from numba import cuda
    except ImportError as err:  # numba without its CUDA target
        raise ImportError(
            'the cuda backend needs numba-cuda: pip install "catalytic[cuda]"'
        ) from err
    return cuda


def probe() -> tuple[bool, str]:
    """Whether CUDA kernels can run in this process, and why.

    Returns
    -------
    ok : bool
        True on a usable GPU, and under the simulator.
    reason : str
        The device's name and compute capability; that the simulator is on; or why
        there is no device (numba-cuda missing, no GPU or driver, a driver error).
        Never raises.
    """
    try:
        cuda = numba_cuda()
    except ImportError as err:
        return False, str(err)
    if simulator_active():
        return True, "CUDA simulator (NUMBA_ENABLE_CUDASIM=1): correct results, not GPU speed"
    try:
        if not cuda.is_available():
            return False, "no CUDA GPU or driver found (numba.cuda.is_available() is False)"
        dev = cuda.get_current_device()
        cc = ".".join(map(str, dev.compute_capability))
        name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
        return True, f"{name}, compute capability {cc}"
    except Exception as err:  # driver present but broken
        return False, f"CUDA driver error: {type(err).__name__}: {err}"


def devices() -> list[dict]:
    """Every CUDA device this process sees.

    Returns
    -------
    list of dict
        One dict per device with ``id``, ``name``, ``simulator`` (bool),
        ``compute_capability`` (tuple), ``total_memory`` and ``free_memory`` (bytes),
        ``driver_version`` and ``runtime_version`` (None when unreadable). Empty when
        there is no device or numba-cuda is missing; under the simulator one entry with
        ``simulator=True`` and None for every figure.

    Examples
    --------
    >>> import catalytic as cat
    >>> isinstance(cat.devices(), list)
    True
    """
    try:
        cuda = numba_cuda()
    except ImportError:
        return []
    if simulator_active():
        return [{"id": 0, "name": "CUDA simulator", "simulator": True,
                 "compute_capability": None, "total_memory": None, "free_memory": None,
                 "driver_version": None, "runtime_version": None}]
    if not cuda.is_available():
        return []
    out = []
    driver = runtime = None
    try:
        driver = cuda.cudadrv.driver.driver.get_version()
    except Exception:
        pass
    try:
        runtime = cuda.runtime.get_version()
    except Exception:
        pass
    for dev in cuda.list_devices():
        with cuda.gpus[dev.id]:
            free, total = cuda.current_context().get_memory_info()
            d = cuda.get_current_device()
            name = d.name.decode() if isinstance(d.name, bytes) else d.name
            out.append({"id": dev.id, "name": name, "simulator": False,
                        "compute_capability": tuple(d.compute_capability),
                        "total_memory": int(total), "free_memory": int(free),
                        "driver_version": driver, "runtime_version": runtime})
    return out
