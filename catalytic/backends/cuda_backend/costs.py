"""What a call on the cuda backend costs beyond its work: the router's default costs
for this backend, and its cost terms, the kernel launches a call queues and the bytes it
moves over PCIe, priced with parameters that ``catalytic calibrate`` measures
(:func:`measure_terms`) or, until then, :data:`DEFAULT_TERMS`."""

from __future__ import annotations

import math
import time

import numpy as np

from catalytic import catalogue as O
from catalytic.backends import _common as C
from catalytic.backends.cuda_backend.residency import _not_resident
from catalytic.device import numba_cuda

#: ``(overhead_s, work_units_per_s)`` until ``catalytic calibrate`` runs on a GPU
#: machine: uncalibrated defaults, labelled as such in every Decision
GPU_DEFAULT_COST = (100e-6, 2e10)
#: ``(overhead_s, work_units_per_s)`` under the simulator: slow enough that the router
#: never picks it unless a call names ``backend="cuda"``
SIMULATOR_COST = (5e-3, 3e3)
#: the cost-term parameters until ``catalytic calibrate`` measures them on a GPU
#: (:func:`measure_terms`): seconds per queued kernel launch, PCIe bytes per second.
#: Orders of magnitude, not measurements (reports/kernel_tuning.md, "cuda backend")
DEFAULT_TERMS = {"launch_s": 5e-6, "pcie_bytes_per_s": 25e9}


def hops_estimate(g, a=None, b=None) -> int:
    """A lower bound on the hops between two sites, exact when no site is blocked.

    Per axis the displacement (the shorter way round a periodic axis); then the larger
    of the most steps one axis needs (at most ``max |offset|`` along it per hop) and of
    the total (at most ``max_k sum |offset_k|`` per hop). Exact for von Neumann and
    Moore stencils on an unblocked lattice; blocked sites only add hops.

    Parameters
    ----------
    g : Geometry
    a, b : int, optional
        Flat site indices. Without them: the lattice's diameter the same way (the most
        BFS levels a search can take from its source, were nothing blocked).

    Returns
    -------
    int

    Examples
    --------
    >>> from catalytic.geometry import Geometry
    >>> hops_estimate(Geometry((64, 64)))
    126
    >>> hops_estimate(Geometry((64, 64), periodic=True, stencil="moore"))
    32
    >>> hops_estimate(Geometry((4, 5)), 0, 19)
    7
    """
    shape = np.asarray(g.shape, dtype=np.int64)
    per = np.asarray(g.periodic_arr, dtype=bool)
    if a is None:
        delta = np.where(per, shape // 2, shape - 1)
    else:
        ca = np.array(np.unravel_index(int(a), g.shape))
        cb = np.array(np.unravel_index(int(b), g.shape))
        delta = np.abs(ca - cb)
        delta = np.where(per, np.minimum(delta, shape - delta), delta)
    offsets = np.abs(np.asarray(g.offsets, dtype=np.int64))
    if offsets.size == 0:
        return 0
    reach = offsets.max(axis=0)
    moving = reach > 0
    per_axis = int(np.max(-(-delta[moving] // reach[moving]), initial=0))
    total = -(-int(delta[moving].sum()) // max(int(offsets.sum(axis=1).max()), 1))
    return max(per_axis, total)


def _host_bytes(args, kwargs) -> int:
    """Bytes of the NumPy arrays among the arguments (copied to the device)."""
    return sum(a.nbytes for a in list(args) + list(kwargs.values())
               if isinstance(a, np.ndarray))


def _launches_of_labelling(sites) -> int:
    """Launches of one union-find labelling (:func:`..graph._components_run`)."""
    return 5 + 2 * max(1, math.ceil(math.log(max(sites, 2), 256)))


def _terms_for(op):
    """The cost terms of one operation on this backend.

    Parameters
    ----------
    op : str
        An operation name (a batched twin's included).

    Returns
    -------
    callable or None
        ``terms(params, *args, **kwargs) -> {term: seconds}``: ``"launches"``, the
        kernel launches the call queues (a BFS or a relaxation: one per level or sweep,
        from :func:`hops_estimate`) at ``launch_s`` each, and ``"PCIe"``, the bytes it
        moves between host and device (lattice arrays not yet on the device, NumPy
        inputs, results copied back) at ``pcie_bytes_per_s``; array operations have the
        PCIe term only. ``params`` come from calibration; a missing one is taken from
        :data:`DEFAULT_TERMS`. None for an operation without terms here.
    """
    def lattice_terms(launches, back_per_site, weights=False, back=None, bond_weights=None):
        def terms(params, lat, *args, **kwargs):
            p = {**DEFAULT_TERMS, **params}
            n = lat.geometry.n_points
            returned = back_per_site * n if back is None else back(lat, *args, **kwargs)
            moved = (_not_resident(lat, weights, bond_weights) + _host_bytes(args, kwargs)
                     + returned)
            return {"launches": launches(lat, *args, **kwargs) * p["launch_s"],
                    "PCIe": moved / p["pcie_bytes_per_s"]}
        return terms

    def arrays_terms(params, *args, **kwargs):
        p = {**DEFAULT_TERMS, **params}
        values = list(args) + list(kwargs.values())
        host = _host_bytes(args, kwargs)
        if any(O.on_device(a) for a in values):
            return {"PCIe": host / p["pcie_bytes_per_s"]}  # the result stays there
        return {"PCIe": 2 * host / p["pcie_bytes_per_s"]}  # in, and a result as large back

    def weighted(g):
        return g.weights is not None or g.bond_weights is not None

    def levels(lat, *args, **kwargs):
        # weighted: near-far, three launches a step, about a step a level
        return (3 if weighted(lat.geometry) else 1) * (hops_estimate(lat.geometry) + 1)

    def path_levels(lat, start, end, *args, **kwargs):
        if weighted(lat.geometry):  # the whole near-far run, then the walk
            return levels(lat)
        return hops_estimate(lat.geometry, start, end) + 1

    def path_back(lat, start, end, *args, **kwargs):
        if weighted(lat.geometry):  # the costs, for the walk on the host
            return 8 * lat.geometry.n_points
        return 8 * (hops_estimate(lat.geometry, start, end) + 2)  # end's distance, the path

    def labelling(lat, *args, **kwargs):
        return _launches_of_labelling(lat.geometry.n_points)

    def stack_labelling(lat, stack, *args, **kwargs):
        return _launches_of_labelling(stack.size)

    def closeness_levels(lat, *, method="degree", k=None, seed=None):
        return levels(lat) if method == "closeness" else 1

    def one(lat, *args, **kwargs):
        return 1

    def steps(lat, field, *, steps=1, alpha=0.1):
        return steps

    table = {
        "distance_field": lattice_terms(levels, 8, weights=True),
        "shortest_path": lattice_terms(path_levels, 0, weights=True, back=path_back),
        "shortest_paths": lattice_terms(levels, 8, weights=True),
        "connected_components": lattice_terms(labelling, 4),
        "percolates": lattice_terms(labelling, 4),
        "spanning_clusters": lattice_terms(labelling, 4),
        "degree": lattice_terms(one, 8),
        "centrality": lattice_terms(closeness_levels, 8),
        "laplacian": lattice_terms(one, 8, bond_weights=True),
        "diffuse": lattice_terms(steps, 8, bond_weights=True),
        "batched.distance_field": lattice_terms(levels, 0),
        "batched.laplacian": lattice_terms(one, 0, bond_weights=True),
        "batched.xor_transform": lattice_terms(one, 0),
    }
    for twin in C.stack_twins(None):  # (the twins' names only)
        table[twin] = lattice_terms(stack_labelling, 0)
    for name in ("xor_transform", "normalize", "scale", "reduce", "elementwise", "matmul"):
        table[name] = arrays_terms
    return table.get(op)


def measure_terms(*, launches=1000, nbytes=1 << 28, repeat=3) -> dict:
    """Measure the cost-term parameters on the current device (``catalytic calibrate``).

    Parameters
    ----------
    launches : int, default 1000
        One-thread kernel launches queued back to back, then one synchronisation.
    nbytes : int, default 256 MiB
        Size of the copy from pageable host memory to the device and back.
    repeat : int, default 3
        The best of this many rounds is kept.

    Returns
    -------
    dict
        ``launch_s``, seconds per queued launch, and ``pcie_bytes_per_s``, bytes per
        second of the copies both ways; the keys of :data:`DEFAULT_TERMS`.

    Raises
    ------
    ImportError
        When numba-cuda is not installed.
    """
    cuda = numba_cuda()
    from catalytic.kernels.cuda import graph as g

    one = cuda.device_array(1, dtype=np.int64)
    host = np.ones(max(nbytes // 8, 1), dtype=np.float64)
    dev = cuda.device_array_like(host)
    g._fill[1, 1](one, np.int64(0))  # compile and warm up
    dev.copy_to_device(host)
    cuda.synchronize()
    best_launch = best_copy = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(launches):
            g._fill[1, 1](one, np.int64(0))
        cuda.synchronize()
        best_launch = min(best_launch, (time.perf_counter() - t0) / launches)
        t0 = time.perf_counter()
        dev.copy_to_device(host)
        dev.copy_to_host(host)
        cuda.synchronize()
        best_copy = min(best_copy, time.perf_counter() - t0)
    return {"launch_s": best_launch, "pcie_bytes_per_s": 2 * host.nbytes / best_copy}


