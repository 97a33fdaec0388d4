"""The ``cuda`` backend: host side of the ``@cuda.jit`` kernels in :mod:`catalytic.kernels.cuda`.

The plugin module the engine registers. It declares the backend and its lifecycle
(:func:`fatal_error`, :func:`synchronize`, :func:`cleanup`, :func:`release`; watched
by the device-memory monitor) and adds its implementations with their costs. The work
lives in one module per job:

``residency``
    the per-lattice device copies (mask, weights, bonds, bond weights, XOR key), least
    recently used first;
    every copy between host and device, counted (:func:`transfer_stats`); whether a
    call fits in device memory.
``streams``
    one CUDA stream per thread (:func:`call_stream`); the kernel modules bound to it.
``implementations``
    one host function per operation and what each needs on the device.
``costs``
    default costs and the cost terms: kernel launches and PCIe bytes.

Whether a GPU is there is :mod:`catalytic.device`. Under ``NUMBA_ENABLE_CUDASIM=1``
the backend runs on Numba's CUDA simulator: results are real, speed is not, so its
default cost keeps the router away from it unless a call names ``backend="cuda"``.
"""

from __future__ import annotations

import contextlib

from catalytic.backends.cuda_backend.costs import (
    DEFAULT_TERMS,
    GPU_DEFAULT_COST,
    SIMULATOR_COST,
    _terms_for,
    hops_estimate,
    measure_terms,
)
from catalytic.backends.cuda_backend.implementations import (
    IMPLEMENTATIONS,
    _centrality_supported,
    _implementation,
)
from catalytic.backends.cuda_backend.residency import (
    DEVICE_MEMORY_MARGIN,
    NAME,
    _args,
    _register_with_monitor,
    _resident_lattices,
    cached_bytes,
    evict_lru,
    release,
    reset_transfer_stats,
    resident,
    to_device,
    to_host,
    transfer_stats,
)
from catalytic.backends.cuda_backend.streams import _graph_module, call_stream
from catalytic.device import devices, probe, simulator_active
from catalytic.hookspecs import hookimpl


__all__ = [
    "DEFAULT_TERMS", "DEVICE_MEMORY_MARGIN", "GPU_DEFAULT_COST", "IMPLEMENTATIONS", "NAME",
    "SIMULATOR_COST", "STICKY_ERRORS", "cached_bytes", "call_stream",
    "catalytic_add_backends", "catalytic_add_operations", "cleanup", "devices",
    "evict_lru", "fatal_error", "hops_estimate", "measure_terms", "release",
    "reset_transfer_stats", "resident", "simulator_active", "synchronize", "to_device",
    "to_host", "transfer_stats",
    # private names that tests, benchmarks and the profiler read here
    "_args", "_centrality_supported", "_register_with_monitor",
    "_resident_lattices", "_terms_for",
]

#: CUDA driver errors after which the context is unusable ("sticky" errors: every later
#: call in the process fails too), by code and by name
STICKY_ERRORS = {
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
}


def fatal_error(err) -> str | None:
    """Whether ``err`` leaves the CUDA context unusable for the rest of the process.

    The engine disables the backend at once on such an error instead of retrying it on
    every call.

    Parameters
    ----------
    err : BaseException
        An exception raised by a call on this backend.

    Returns
    -------
    str or None
        Why, for a sticky error (one of :data:`STICKY_ERRORS`, by the error's ``code``
        or by name in its message); None when a retry may succeed.
    """
    code = getattr(err, "code", None)
    try:
        code = int(code) if code is not None else None
    except (TypeError, ValueError):
        code = None
    text = str(err)
    name = STICKY_ERRORS.get(code) or next((n for n in STICKY_ERRORS.values() if n in text), None)
    if name is None:
        return None
    return (f"sticky CUDA error {name} ({type(err).__name__}: {text}); the CUDA context "
            "cannot be used again in this process (restart it to use the GPU)")


def synchronize() -> None:
    """Wait until this thread's stream (:func:`call_stream`) has finished its work.

    The engine calls this after every call on this backend, so the time it records is
    device time, not launch time, and a result left on the device is complete when the
    call returns. Other threads' work is not waited for; under the simulator it does
    nothing.
    """
    if not simulator_active():
        call_stream().synchronize()


def cleanup() -> None:
    """Drop every cached device copy and the kernels' cached lattice tables.

    The engine calls this after a GPU failure, before it retries.
    """
    for lat in _resident_lattices():
        release(lat)
    with contextlib.suppress(ImportError):
        _graph_module().clear_tables()


@hookimpl
def catalytic_add_backends(registry):
    registry.add_backend(NAME, available=probe, device="gpu",
                         description="Numba @cuda.jit kernels, data cached on the device",
                         fatal_error=fatal_error, synchronize=synchronize, cleanup=cleanup,
                         release=release, monitored=True)


#: the operations whose implementation here honours bonds and bond weights (the router
#: refuses the others a lattice that has them)
BONDS: set[str] = {
    "distance_field", "shortest_path", "shortest_paths", "connected_components", "label",
    "batched.label",
    "cluster_statistics", "region_graph", "percolates",
    "spanning_clusters", "degree", "centrality", "laplacian", "diffuse",
    "batched.connected_components", "batched.percolates", "batched.spanning_clusters",
    "batched.distance_field", "batched.laplacian",
    "newman_ziff",  # its kernel reads the bonds (kernels.cuda.newman_ziff)
    "transport",  # the conductances are read from the bonds (backends._transport)
}


@hookimpl
def catalytic_add_operations(registry):
    cost = SIMULATOR_COST if simulator_active() else GPU_DEFAULT_COST
    for op, (func, need, check) in IMPLEMENTATIONS.items():
        run, supports = _implementation(func, need, check)
        registry.add_implementation(op, NAME, run, supports=supports, cost=cost,
                                    terms=_terms_for(op), bonds=op in BONDS)
