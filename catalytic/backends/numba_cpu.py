"""The ``numba-cpu`` backend: ``@njit`` kernels for large work without a GPU.

Host side only: unpack the lattice into the plain arrays the kernels take, allocate
outputs, shape the results exactly like the reference backend does, and decide how many
threads a graph call runs on (:func:`on_free_cpus`). The kernels live in
:mod:`catalytic.kernels.cpu`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
import time

import numba
import numpy as np

from catalytic import catalogue as O
from catalytic import results as R
from catalytic.backends import _common as C
from catalytic.hookspecs import hookimpl

NAME = "numba-cpu"


# One lazy accessor per kernel family: this module is imported at engine start, a kernel
# module only when an operation first needs it.
def _bfs():
    from catalytic.kernels.cpu import bfs

    return bfs


def _dijkstra():
    from catalytic.kernels.cpu import dijkstra

    return dijkstra


def _parents():
    from catalytic.kernels.cpu import parents

    return parents


def _paths():
    from catalytic.kernels.cpu import paths

    return paths


def _catalytic_path():
    from catalytic.kernels.cpu import catalytic_path

    return catalytic_path


def _components():
    from catalytic.kernels.cpu import components

    return components


def _values():
    from catalytic.kernels.cpu import values

    return values


def _equal():
    from catalytic.kernels.cpu import equal

    return equal


def _edt():
    from catalytic.kernels.cpu import edt

    return edt


def _clusters():
    from catalytic.kernels.cpu import clusters

    return clusters


def _degree():
    from catalytic.kernels.cpu import degree

    return degree


def _centrality():
    from catalytic.kernels.cpu import centrality

    return centrality


def _fields():
    from catalytic.kernels.cpu import fields

    return fields


def _arrays():
    from catalytic.kernels.cpu import arrays

    return arrays


def _k(lat):
    return lat.geometry.kernel_args()


def _bk(lat):
    """The keyword arguments that make a traversal kernel honour the lattice's bonds
    (none without bonds): the bond arrays, and this backend's cache of the lattice,
    where the kernels keep the bonds laid out in their padded index space."""
    g = lat.geometry
    if not g.has_bonds:
        return {}
    return {"bonds": g.bond_args(), "cache": lat.backend_cache(NAME)}


def _weighted(g) -> bool:
    """Whether distances on ``g`` are costs (site weights or bond weights), not hops."""
    return g.weights is not None or g.bond_weights is not None


# -- threads -------------------------------------------------------------------------------
#: below this many sites a graph call runs on one thread (parallel launches cost more than
#: they save there, and it skips the /proc reads of free_threads)
PAR_SITES = 1 << 16
#: ``on`` while this thread's calls take every one of Numba's threads (every_thread)
_every = threading.local()


@contextlib.contextmanager
def every_thread():
    """Calls made inside the block, from this thread, run on all of Numba's threads
    however busy the machine is (``catalytic warmup`` compiles the parallel paths there,
    which a busy machine's calls would not take)."""
    before = getattr(_every, "on", False)
    _every.on = True
    try:
        yield
    finally:
        _every.on = before


def free_threads() -> int:
    """Numba's thread count, cut to the CPUs that no other task is running on right now.

    Returns
    -------
    int
        Between 1 and ``numba.get_num_threads()``. On Linux: the CPUs of this process's
        affinity minus the runnable tasks of ``/proc/loadavg`` that are not this
        process's own running threads (Numba's workers spin for a while after a
        parallel loop). Elsewhere, or when ``/proc`` cannot be read, all of Numba's
        threads.

    Notes
    -----
    A parallel kernel meets its threads at a barrier after every ``prange`` (a BFS once
    per level). When another process keeps a core busy, every barrier waits for a
    descheduled thread's next time slice, which costs far more than running on one
    thread fewer (measurements: reports/design_notes.md). A reading is reused for
    :data:`FREE_CPUS_TTL` seconds, so small calls do not pay for the ``/proc`` reads.
    """
    T = numba.get_num_threads()
    if T <= 1:
        return 1
    if getattr(_every, "on", False):
        return T
    global _free_cpus
    now = time.monotonic()
    seen, free = _free_cpus
    if now - seen >= FREE_CPUS_TTL:
        free = _read_free_cpus()
        _free_cpus = (now, free)
    return max(1, min(T, free))


#: seconds a reading of the free CPUs is reused; (when, free CPUs) of the last one
FREE_CPUS_TTL = 0.1
_free_cpus = (-math.inf, 0)


def _read_free_cpus() -> int:
    """CPUs this process may use that no other task is running on (a large number when
    /proc cannot be read)."""
    try:
        ncpu = len(os.sched_getaffinity(0))
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        own = 0
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            own += stat[stat.rindex(")") + 2] == "R"
    except (AttributeError, OSError, ValueError, IndexError):
        return 1 << 30
    return ncpu - max(running - own, 0)


def on_free_cpus(func, *, stacked=False, size=None, serial_below=None):
    """Run a lattice implementation with Numba's thread count set (for this calling
    thread, as ``numba.set_num_threads`` does) to :func:`free_threads`, or to 1 on
    lattices under :data:`PAR_SITES` sites (with ``stacked``, a batched twin: the sites
    of every row of its stack; with ``size``, ``size(lat, *args, **kwargs)`` units of
    work, such as the sites visited, for operations that visit each many times, and
    ``serial_below()`` the units below which one thread runs); results never depend
    on it."""

    @functools.wraps(func)
    def wrapper(lat, *args, **kwargs):
        sites = lat.geometry.n_points if size is None else size(lat, *args, **kwargs)
        if stacked:
            sites *= args[0].shape[0]
        limit = PAR_SITES if serial_below is None else serial_below()
        T = 1 if sites < limit else free_threads()
        prev = numba.get_num_threads()
        if T == prev:
            return func(lat, *args, **kwargs)
        numba.set_num_threads(T)
        try:
            return func(lat, *args, **kwargs)
        finally:
            numba.set_num_threads(prev)

    return wrapper


#: serialises numba-cpu calls while Numba's threading layer may be "workqueue", which
#: aborts the process when two threads launch parallel kernels at once
_WORKQUEUE_LOCK = threading.Lock()
_layer_safe = False


def _threading_layer_is_safe() -> bool:
    """True once Numba has chosen a thread-safe threading layer (tbb or omp). Numba
    chooses on the first parallel launch; until then the answer is False."""
    global _layer_safe
    if not _layer_safe:
        try:
            _layer_safe = numba.threading_layer() != "workqueue"
        except ValueError:  # no parallel kernel has run yet
            return False
    return _layer_safe


def thread_safe(func):
    """Run ``func`` under a process-wide lock unless Numba's threading layer is known to
    be thread-safe, so that threads sharing a lattice never crash the process (with
    tbb or omp, the usual layers, calls run concurrently)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if _layer_safe or _threading_layer_is_safe():
            return func(*args, **kwargs)
        with _WORKQUEUE_LOCK:
            return func(*args, **kwargs)

    return wrapper


# -- paths --------------------------------------------------------------------------------
def distance_field(lat, sources, *, spacing=None, parents=False, nearest=False):
    g = lat.geometry
    w = None if g.weights is None else g.weights.reshape(-1)
    if not _weighted(g) and spacing is None:
        d = _bfs().bfs_distance(*_k(lat), sources, **_bk(lat))
    else:
        d = _dijkstra().dijkstra_distance(*_k(lat), w, sources, spacing=spacing, **_bk(lat))
    if not (parents or nearest):
        return d.reshape(g.shape)
    gs = g.with_spacing(spacing)
    kern = _parents()
    par = kern.parents(g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, d, sources,
                       depth=C.plateau_depths_if_any(gs, d, sources), weights=w,
                       bonds=g.bond_args() if g.has_bonds else None,
                       lengths=gs.step_lengths)
    return C.field_outputs(g, d, par if parents else None,
                           kern.roots(par) if nearest else None)


def shortest_path(lat, start, end, *, spacing=None):
    g = lat.geometry
    w = None if g.weights is None else g.weights.reshape(-1)
    if g.bond_weights is None and spacing is None:
        return C.path_result(g, _paths().shortest_path(*_k(lat), start, end, w, **_bk(lat)))
    # the cost as the search summed it: the step costs in path order
    path, cost = _paths().shortest_path(*_k(lat), start, end, w, with_cost=True,
                                        spacing=spacing, **_bk(lat))
    return R.PathResult(path, cost)


def shortest_paths(lat, start, ends, *, spacing=None, first=False):
    g = lat.geometry
    w = None if g.weights is None else g.weights.reshape(-1)
    out = _paths().shortest_paths(*_k(lat), start, ends, w, first=first, spacing=spacing,
                                  **_bk(lat))
    if first:
        j, path, length = out
        return j, R.PathResult(path, length)
    return [R.PathResult(p, length) for p, length in out]


def count_shortest_paths(lat, start, end):
    count, overflowed = _paths().count_shortest_paths(*_k(lat), start, end, **_bk(lat))
    if overflowed:
        # more than 2**63 - 1 paths: recount exactly with Python integers
        return C.count_paths_exact(lat.geometry, start, end)
    return int(count)


def _unweighted_only(lat, *args, **kwargs):
    if _weighted(lat.geometry):
        return "weighted path counting is implemented in the numpy backend only"
    return None


def _no_bond_weights(lat, *args, **kwargs):
    if lat.geometry.bond_weights is not None:
        return ("catalytic paths are hop paths; bond weights are implemented in the numpy "
                "backend only")
    return None


def path_catalytic(lat, start, end, aux):
    from catalytic.catalysis import borrowed_scratch

    g = lat.geometry
    with borrowed_scratch(lat, aux, g.n_points) as (state, _):
        path = _catalytic_path().catalytic_path(*_k(lat), start, end, state,
                                                bonds=_bk(lat).get("bonds"))
    return C.path_result(g, path)


# -- components, structure, centrality ---------------------------------------------------
def _winding():
    from catalytic.kernels.cpu import winding

    return winding


def _bonds(g):
    """``(bond_slot, bits, words)`` of a geometry (``bits`` empty: every bond open)."""
    return g.bond_args()[:3]


#: the most sites a labelling with int32 labels holds
_INT32_LIMIT = 2**31 - 1
#: periodic axes one labelling tracks windings along (``kernels.cpu.winding._LANES``)
_LANES = 4


def connected_components(lat):
    """Without closed bonds the run or site labelling (``kernels.cpu.components``); with
    them the bond-aware one (``kernels.cpu.winding``)."""
    g = lat.geometry
    if g.bond_bits is not None:
        labels, count, sizes, _ = _winding().label_windings(*_k(lat)[:4], *_bonds(g))
        return R.Components(labels.reshape(g.shape), count, sizes)
    labels, count, sizes = _components().connected_components(*_k(lat), sizes=True)
    return R.Components(labels.reshape(g.shape), count, sizes)


def label(lat, keys, sites, delta):
    """Clusters of close values, without bonds: of equal values (``delta`` 0) site by
    site (``kernels.cpu.equal.label_equal``), except where ``equal.prefer_runs`` says
    the runs do less (long runs, far rows, no neighbour covering another); there, and
    for close values, with the unit last-axis step, union-find over runs of close values
    (``kernels.cpu.values.label_values``).
    Otherwise the bonds joining close keys (``kernels.cpu.values``), ANDed with the
    lattice's own, labelled by the bond-aware labelling."""
    g = lat.geometry
    V, E = _values(), _equal()
    if (g.bond_bits is None and delta == 0 and E.applies(g.offsets, g.dimensions)
            and not (V.runs_apply(g.offsets, g.dimensions)
                     and E.prefer_runs(g.offsets, g.shape, keys, sites))):
        labels, count, sizes = E.label_equal(g.shape_arr, g.periodic_arr, g.offsets, keys,
                                             _background_key(g, keys, sites))
        return R.Components(labels.reshape(g.shape), count, sizes)
    if g.bond_bits is None and V.runs_apply(g.offsets, g.dimensions):
        labels, count, sizes = V.label_values(g.shape_arr, g.periodic_arr, g.offsets, keys,
                                              sites, delta)
        return R.Components(labels.reshape(g.shape), count, sizes)
    slot, user, words, _ = g.bond_args()
    bits = V.value_bonds(keys, delta, g.bond_offsets, g.shape_arr, g.periodic_arr, user,
                         words)
    labels, count, sizes, _ = _winding().label_windings(
        g.shape_arr, g.periodic_arr, g.offsets, sites, slot, bits, words)
    return R.Components(labels.reshape(g.shape), count, sizes)


def _background_key(g, keys, sites):
    """``sites``, or the background's key where the unlabelled sites are exactly those
    with that key: on a lattice without a mask some site is the background's
    (``catalogue.v_label``). The site labelling then reads the keys alone."""
    if g.mask is not None:
        return sites
    first = int(np.argmin(sites))
    return keys[first] if sites[first] == 0 else sites


def batched_label(lat, stack, keys, sites, delta):
    """The bonds joining close values made once for every row, and the rows labelled in
    one batched bond-aware labelling (``kernels.cpu.winding``)."""
    g = lat.geometry
    slot, user, words, _ = g.bond_args()
    bits = _values().value_bonds(keys, delta, g.bond_offsets, g.shape_arr, g.periodic_arr,
                                 user, words)
    labels, counts, sizes, _ = _winding().label_windings_batched(
        g.shape_arr, g.periodic_arr, g.offsets, stack & sites, slot, bits, words)
    return C.components_of_stack(g, labels, counts, sizes)


def region_graph(lat, labels):
    """Contacts counted over the rows in two threaded passes (``kernels.cpu.clusters``)."""
    g = lat.geometry
    _, bits, words, _ = g.bond_args()
    return _clusters().contacts(labels, int(labels.max(initial=0)), g.shape_arr,
                                g.periodic_arr, g.bond_offsets, bits, words)


def distance_transform(lat, marked, keys, spacing, squared, dtype, indices):
    """The separable passes of ``kernels.cpu.edt``, each in parallel over its lines."""
    return C.distance_transform_with(_edt(), lat, marked, keys, spacing, squared, dtype,
                                     indices)


def transport(lat, high, low, *, conductance, tol, maxiter=None):
    """The components of the conducting bonds by the bond-aware labelling
    (``kernels.cpu.winding``), then conjugate gradients preconditioned by aggregation
    multigrid (``kernels.cpu.transport``) on the sites that join both electrodes."""
    from catalytic.backends import _transport as T
    from catalytic.kernels.cpu import transport as K

    def label(gc):
        return _winding().label_windings(*gc.kernel_args()[:4], *_bonds(gc))[0]

    def solve(A, b, tol, limit):
        return K.solve(K.hierarchy(A), b, tol, limit)

    return T.iterative_transport(lat, high, low, conductance, tol, maxiter, label, solve)


def batched_distance_transform(lat, rows, keys, spacing, squared, dtype, indices):
    """Every row in the same kernel calls (``kernels.cpu.edt.transform`` with ``rows``)."""
    return C.batched_distance_transform_with(_edt(), lat, rows, keys, spacing, squared,
                                             dtype, indices)


def cluster_statistics(lat, labels, field):
    """The windings by union-find in flat order in Numba (periodic axes only), the sums
    and extremes in one threaded pass, the arcs from a counting sort by label
    (``kernels.cpu.clusters``), assembled as the reference assembles its own."""
    from catalytic.backends._clusters import from_moments

    g = lat.geometry
    K = _clusters()
    d = g.dimensions
    count = int(labels.max(initial=0))
    wraps = np.zeros((count, d), bool)
    w = np.zeros((0, d), np.int32)
    arcs = None
    if any(g.periodic):
        _, bits, words, _ = g.bond_args()
        w, wraps = K.unwrap(labels, count, g.shape_arr, g.periodic_arr, g.bond_offsets,
                            bits, words)
        arcs = K.arcs(labels, count, g.shape_arr, g.periodic_arr)
    sizes, first, lo, hi, fparts, m1, m2 = K.moments(labels, count, g.shape_arr, w, field)
    return from_moments(g, sizes, first, lo, hi, fparts if field is not None else None, m1,
                        m2, wraps, arcs)


def _spanning_from(g, comp, axes, wrapping):
    """:class:`SpanningClusters` from a labelling and ``wrapping`` (periodic axis ->
    labels of the clusters wrapping it); open axes by their faces."""
    out = {a: wrapping[a] if g.periodic[a] else C.face_spanning(comp.labels, a)
           for a in axes}
    return R.SpanningClusters(out, comp)


def _wrapping(wrapped, found) -> list:
    """Per lattice, ``{axis: labels}`` from the wrap bits of :func:`_windings_of` (one
    array per lattice and group of at most ``_LANES`` axes)."""
    out = []
    for per_group in found:
        d = {}
        for g0, wraps in zip(range(0, len(wrapped), _LANES), per_group):
            for q, a in enumerate(wrapped[g0:g0 + _LANES]):
                d[a] = np.flatnonzero(wraps & (1 << q)).astype(np.int64)
        out.append(d)
    return out


def spanning_clusters(lat, *, axes):
    """Periodic axes (or closed bonds): the wrapping clusters found in the labelling
    itself (``kernels.cpu.winding``; one labelling per 4 periodic axes); open axes
    only: any labelling and its faces."""
    g = lat.geometry
    wrapped = [a for a in axes if g.periodic[a]]
    if not (wrapped or g.bond_bits is not None) or g.n_points > _INT32_LIMIT:
        return C.spanning_with(connected_components, lat, axes)
    groups = [wrapped[i:i + _LANES] for i in range(0, len(wrapped), _LANES)] or [[]]
    found = []
    for group in groups:
        labels, count, sizes, wraps = _winding().label_windings(*_k(lat)[:4], *_bonds(g),
                                                                group)
        found.append(wraps)
    comp = R.Components(labels.reshape(g.shape), count, sizes)
    return _spanning_from(g, comp, axes, _wrapping(wrapped, [found])[0])


def percolates(lat, *, axis=0):
    return bool(spanning_clusters(lat, axes=(axis,)).clusters[axis].size)


def _label_stack(lat, stack):
    """``(labels, comps)``: the rows labelled by one parallel kernel (lattices shared out
    over threads), each row into an array of its own (``labels``: the list of them;
    with closed bonds one (B, n) array); lattices too large for one serial labelling one
    by one (each across threads; ``labels`` is then None)."""
    g = lat.geometry
    if not _components().batch_fits(g.shape, g.offsets):
        return None, [connected_components(one) for one in C.each_lattice(lat, stack)]
    if g.bond_bits is not None:
        labels, counts, sizes, _ = _winding().label_windings_batched(
            g.shape_arr, g.periodic_arr, g.offsets, stack, *_bonds(g))
        return labels, C.components_of_stack(g, labels, counts, sizes)
    labels, counts, sizes = _batched().connected_components_rows(
        g.shape_arr, g.periodic_arr, g.offsets, stack)
    return labels, C.components_of_stack(g, labels, counts, sizes)


def batched_spanning_clusters(lat, stack, *, axes):
    """Periodic axes: every row labelled with its wrapping clusters by one parallel
    kernel (``kernels.cpu.winding``); open axes only: the stack's labelling and one
    parallel face kernel."""
    g = lat.geometry
    wrapped = [a for a in axes if g.periodic[a]]
    if not wrapped:
        return C.spanning_of_stack(lat, stack, *_label_stack(lat, stack), axes)
    if not _components().batch_fits(g.shape, g.offsets):
        return [spanning_clusters(one, axes=axes) for one in C.each_lattice(lat, stack)]
    found = []
    for i in range(0, len(wrapped), _LANES):
        labels, counts, sizes, wraps = _winding().label_windings_batched(
            g.shape_arr, g.periodic_arr, g.offsets, stack, *_bonds(g), wrapped[i:i + _LANES])
        found.append(wraps)
    comps = C.components_of_stack(g, labels, counts, sizes)
    return [_spanning_from(g, c, axes, w)
            for c, w in zip(comps, _wrapping(wrapped, list(zip(*found))))]


def _batched():
    from catalytic.kernels.cpu import batched

    return batched


def batched_percolates(lat, stack, *, axis=0):
    """Open axes without closed bonds: the rows' run union-find and face check without
    labels (``kernels.cpu.batched.percolates_batched``); otherwise from
    :func:`batched_spanning_clusters`."""
    g = lat.geometry
    if g.bond_bits is None and _batched().spans_fits(g.shape, g.periodic, g.offsets, axis):
        out = _batched().percolates_batched(g.shape_arr, g.periodic_arr, g.offsets, stack,
                                            axis)
        return [bool(x) for x in out]
    return [bool(s.clusters[axis].size)
            for s in batched_spanning_clusters(lat, stack, axes=(axis,))]


def batched_distance_field(lat, stack, sources):
    """Every row searched by one serial kernel call, the rows shared out over threads
    (``kernels.cpu.batched.bfs_distance_batched``); the fields are the rows of one
    (B, n) array, as the cuda twin returns them."""
    g = lat.geometry
    src = np.broadcast_to(np.asarray(sources, dtype=np.int64), (stack.shape[0], len(sources)))
    d = _batched().bfs_distance_batched(g.shape_arr, g.periodic_arr, g.offsets, stack,
                                        g.dedupe, src, **_bk(lat))
    return [row.reshape(g.shape) for row in d]


def spanning_thresholds(lat, samples, *, axis=0, seed=0):
    """Newman-Ziff sweeps, the samples in parallel (kernels.cpu.percolation)."""
    from catalytic.kernels.cpu.percolation import spanning_thresholds as sweeps

    g = lat.geometry
    return sweeps(g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, samples, axis, seed,
                  bond_args=g.bond_args())


def newman_ziff(lat, count, *, first=0, kind="site", seed=0,
                observables=O.NZ_OBSERVABLES, n_stride=1):
    """Newman-Ziff sweeps, groups of sweeps in parallel (kernels.cpu.newman_ziff)."""
    from catalytic.kernels.cpu import newman_ziff as nz
    from catalytic.percolation import NZResult

    g = lat.geometry
    slot, bits, words, _ = g.bond_args()
    events, sums, N = nz.sweeps(kind, g.shape_arr, g.periodic_arr, g.offsets, g.open_flat,
                                slot, bits, words, count, seed, first=first,
                                observables=observables, n_stride=n_stride)
    return NZResult(kind=kind, shape=g.shape, periodic=g.periodic, N=N, n_sites=g.n_open,
                    n_stride=n_stride, seed=seed, ranges=[(first, first + count)],
                    events=events, sums=sums)


def _nz_fits(lat, count, **kwargs):
    """The sweeps' scratch and sums must fit in free memory (one group per thread)."""
    from catalytic import memory

    return memory.host_shortfall(*O.nz_memory(lat, count, threads=numba.get_num_threads(),
                                              **kwargs))


def degree(lat):
    g = lat.geometry
    return _degree().degree(*_k(lat), bonds=g.bond_args()).reshape(g.shape)


def centrality(lat, *, method="degree", k=None, seed=None):
    g = lat.geometry
    if method == "degree":
        deg = _degree().degree(*_k(lat), bonds=g.bond_args())
        return C.finish_centrality(g, deg, degree=True)
    if method == "closeness":
        vals = _centrality().closeness(*_k(lat), **_bk(lat))
    else:
        vals = _centrality().betweenness_centrality(*_k(lat), k=k, seed=seed, **_bk(lat))
    return C.finish_centrality(g, vals, degree=False)


def _centrality_supported(lat, *, method="degree", k=None, seed=None):
    if method not in ("degree", "closeness", "betweenness"):
        return f"centrality method {method!r} is implemented in the numpy backend (NetworkX)"
    return None


def _centrality_size(lat, *, method="degree", k=None, seed=None):
    """Sites visited by a centrality call, for the thread choice: one search per
    source for closeness and betweenness (so even small lattices are worth threads)."""
    g = lat.geometry
    if method in ("closeness", "betweenness"):
        return g.n_points * (g.n_open if k is None else k)
    return g.n_points


def _components_size(lat, *args, **kwargs):
    """Site-offsets of a labelling (sites times the offsets of half the stencil): one
    thread below ``components._WHOLE_WORK`` of them, the kernel's own serial/parallel
    crossover."""
    g = lat.geometry
    half, _ = _components()._stencil_halves(
        np.ascontiguousarray(g.offsets, dtype=np.int64).tobytes(), len(g.shape))
    return g.n_points * half.shape[0]


# -- fields -------------------------------------------------------------------------------
def _field_bonds(g):
    """The bonds the field kernels take (conductances), or None without any."""
    return g.bond_args() if g.has_bonds else None


def laplacian(lat, field):
    g = lat.geometry
    f = np.ascontiguousarray(field.reshape(-1), dtype=np.float64)
    out = np.empty(g.n_points, dtype=np.float64)
    return _fields().laplacian(*_k(lat), f, out, bonds=_field_bonds(g)).reshape(g.shape)


def diffuse(lat, field, *, steps=1, alpha=0.1):
    g = lat.geometry
    f = np.ascontiguousarray(field.reshape(-1), dtype=np.float64)
    out = np.empty(g.n_points, dtype=np.float64)
    return _fields().diffuse(*_k(lat), f, steps, alpha, out,
                             bonds=_field_bonds(g)).reshape(g.shape)


def batched_laplacian(lat, fields):
    """The single Laplacian kernel row by row (one routed call for all rows)."""
    g = lat.geometry
    out = np.empty_like(fields)
    for f, o in zip(fields, out):
        _fields().laplacian(*_k(lat), f, o, bonds=_field_bonds(g))
    return [o.reshape(g.shape) for o in out]


# -- transforms and array ops -----------------------------------------------------------------
@O.xor_values
def xor_transform(lat, data, key=None):
    return C.xor_with(_arrays(), lat, data, key)


def batched_xor_transform(lat, data, key=None):
    """The single XOR kernel row by row (one routed call for all rows)."""
    return [xor_transform(lat, row, key) for row in data]


def normalize(data):
    return C.normalize_with(_arrays(), data)


def scale(data, *, factor=1.0):
    return C.scale_with(_arrays(), data, factor)


def matmul(a, b):
    return C.matmul_with(_arrays(), a, b)


def reduce(x, op):
    return C.reduce_with(_arrays(), x, op)


def elementwise(op, a, b=None):
    return C.elementwise_with(_arrays(), op, a, b)


def random(shape, seed, distribution):
    from catalytic.kernels.random import random_numba

    return random_numba(shape, seed, distribution)


IMPLEMENTATIONS = {
    "distance_field": (distance_field, None),
    "shortest_path": (shortest_path, None),
    "shortest_paths": (shortest_paths, None),
    "count_shortest_paths": (count_shortest_paths, _unweighted_only),
    "path_catalytic": (path_catalytic, _no_bond_weights),
    "connected_components": (connected_components, None),
    "label": (label, None),
    "cluster_statistics": (cluster_statistics, None),
    "batched.label": (batched_label, None),
    "region_graph": (region_graph, None),
    "distance_transform": (distance_transform, None),
    "transport": (transport, None),
    "batched.distance_transform": (batched_distance_transform, None),
    "percolates": (percolates, None),
    "spanning_clusters": (spanning_clusters, None),
    "degree": (degree, None),
    "centrality": (centrality, _centrality_supported),
    "laplacian": (laplacian, None),
    "diffuse": (diffuse, None),
    "xor_transform": (xor_transform, None),
    "normalize": (normalize, None),
    "scale": (scale, None),
    "matmul": (matmul, None),
    "reduce": (reduce, None),
    "elementwise": (elementwise, None),
    "random": (random, None),
    **{twin: (func, None) for twin, func in C.stack_twins(_label_stack).items()},
    "batched.percolates": (batched_percolates, None),
    "batched.spanning_clusters": (batched_spanning_clusters, None),
    "batched.distance_field": (batched_distance_field, None),
    "batched.laplacian": (batched_laplacian, None),
    "batched.xor_transform": (batched_xor_transform, None),
    "spanning_thresholds": (spanning_thresholds, None),
    "newman_ziff": (newman_ziff, _nz_fits),
}

#: default cost (overhead_s, throughput) used until ``catalytic calibrate`` measures one
DEFAULT_COST = (30e-6, 1e8)


def _available():
    try:
        import numba
    except ImportError as err:  # numba is a dependency, but say so plainly if it is broken
        return False, f"numba cannot be imported: {err}"
    return True, f"numba {numba.__version__}"


@hookimpl
def catalytic_add_backends(registry):
    registry.add_backend(
        NAME, available=_available, device="cpu", description="Numba @njit CPU kernels"
    )


#: operations that run the graph kernels (their thread count is chosen per call)
GRAPH_OPS = {"distance_field", "shortest_path", "shortest_paths", "count_shortest_paths", "path_catalytic",
             "connected_components", "label", "batched.label", "percolates",
             "spanning_clusters", "degree", "centrality", "batched.connected_components", "batched.percolates",
             "batched.spanning_clusters", "batched.distance_field"}


#: op -> (work measure, the work from which threads run) where not the sites and
#: PAR_SITES
SIZES = {"centrality": (_centrality_size, None)}
for _op in ("connected_components", "label", "percolates", "spanning_clusters"):
    SIZES[_op] = (_components_size, lambda: _components()._WHOLE_WORK)


#: the operations whose implementation here honours bonds and bond weights (the router
#: refuses the others a lattice that has them)
BONDS: set[str] = {
    "transport",  # the conductances are read from the bonds (backends._transport)
    "distance_field", "shortest_path", "shortest_paths", "count_shortest_paths", "path_catalytic", "centrality",
    "batched.distance_field", "connected_components", "label", "batched.label",
    "cluster_statistics", "region_graph", "percolates",
    "spanning_clusters", "degree", "laplacian", "diffuse", "batched.connected_components", "batched.percolates",
    "batched.spanning_clusters", "batched.laplacian",
    "newman_ziff", "spanning_thresholds",  # the Newman-Ziff kernel reads them
}


@hookimpl
def catalytic_add_operations(registry):
    for op, (func, supports) in IMPLEMENTATIONS.items():
        stacked = op.startswith(O.BATCHED_PREFIX)
        size, serial_below = SIZES.get(op, (None, None))
        run = thread_safe(on_free_cpus(func, stacked=stacked, size=size,
                                       serial_below=serial_below) if op in GRAPH_OPS
                          else func)
        registry.add_implementation(op, NAME, run, supports=supports, cost=DEFAULT_COST,
                                    bonds=op in BONDS)
