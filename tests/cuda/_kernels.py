"""The CUDA kernels of ``catalytic.kernels.cuda``, enumerated, and the record of which
of them this test session launched in the simulator.

Shared by ``test_cuda_ptx`` (every kernel has a PTX case) and the coverage check in
``conftest`` (under ``NUMBA_ENABLE_CUDASIM=1`` every kernel ran at least once).
"""

from __future__ import annotations

import importlib
import os
import pkgutil

import catalytic.kernels.cuda as cuda_pkg

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

#: the Python functions of the kernels launched in this session (simulator only)
LAUNCHED: set = set()
#: why this session cannot tell whether every kernel ran (a subset of the CUDA tests
#: was selected), or None when it can; set by the conftest at collection
PARTIAL: list = ["not collected yet"]


def modules():
    """Every module of ``catalytic.kernels.cuda``, imported."""
    return [importlib.import_module(f"{cuda_pkg.__name__}.{m.name}")
            for m in pkgutil.iter_modules(cuda_pkg.__path__)]


def is_kernel(obj) -> bool:
    """A ``@cuda.jit`` kernel, on a GPU or under the simulator (device functions not)."""
    if SIM:
        from numba.cuda.simulator.kernel import FakeCUDAKernel

        return isinstance(obj, FakeCUDAKernel) and not obj._device
    from numba.cuda.dispatcher import CUDADispatcher

    return isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device")


def py_func(kernel):
    return kernel.fn if SIM else kernel.py_func


def all_kernels():
    """``{(module, name): kernel}`` of every kernel a cuda module defines (not imports),
    factory-made ones (``arrays._sum_f64_kernel``) included."""
    out = {}
    for mod in modules():
        for name, obj in vars(mod).items():
            if is_kernel(obj) and py_func(obj).__module__ == mod.__name__:
                out[(mod.__name__, name)] = obj
    return out
