"""The cuda backend's implementations: one host function per operation, each launching
the ``@cuda.jit`` kernels of :mod:`catalytic.kernels.cuda` on this thread's stream, and
:data:`IMPLEMENTATIONS`, what each needs on the device.

A GPU array passed in stays on the device and gives a GPU result (a Numba device array,
which exposes ``__cuda_array_interface__`` to CuPy, PyTorch, ...); host inputs give host
results. Each implementation's contract is its operation's (:mod:`catalytic.catalogue`);
a docstring here says only what differs on the device. Each is registered through
:func:`_implementation`, which asks whether the call fits on the device and makes room
before it runs.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from catalytic import catalogue as O
from catalytic import results as R
from catalytic.backends import _common as C
from catalytic.backends.cuda_backend.residency import (
    _args,
    _bond_args,
    _key,
    _make_room,
    _room,
    resident,
    to_host,
)
from catalytic.backends.cuda_backend.streams import (
    _SIMULATOR_LOCK,
    _arrays,
    _fields,
    _graph,
    _OnStream,
    call_stream,
)
from catalytic.device import numba_cuda, simulator_active


# -- what a call needs on the device, and how the registry runs it -----------------------------
def _lattice_of(args):
    return args[0] if args and hasattr(args[0], "geometry") else None


def _bond_bytes(g, weights):
    """Device bytes of a lattice's bonds (kf/8 a site) and, with ``weights``, its bond
    weights (8 kf a site)."""
    out = 0 if g.bond_bits is None else int(g.bond_bits.nbytes)
    if weights and g.bond_weights is not None:
        out += int(g.bond_weights.nbytes)
    return out


def _sites(per_site, bond_weights=False):
    """Device bytes of a lattice call: ``per_site`` bytes for every site, plus the bonds
    (and, with ``bond_weights``, the bond weights)."""
    return lambda lat, *args, **kwargs: (lat.geometry.n_points * per_site
                                         + _bond_bytes(lat.geometry, bond_weights))


def _field_need(lat, *args, parents=False, nearest=False, **kwargs):
    """Device bytes of ``distance_field``: 24 a site for the search, 9 more for the
    parents (and the sources flags), 16 more for the nearest sources' pointer jumping."""
    per_site = 24 + 9 * (parents or nearest) + 16 * nearest
    return lat.geometry.n_points * per_site + _bond_bytes(lat.geometry, True)


def _stacked(per_site):
    """Device bytes of a batched twin: ``per_site`` bytes for every site of every row,
    plus the lattice's bonds (and bond weights) that every row shares."""
    return lambda lat, stack, *args, **kwargs: (stack.size * per_site
                                                + _bond_bytes(lat.geometry, True))


def _seam_bytes(g, axes) -> int:
    """Device bytes of the seam steps one lattice may give when ``axes`` include periodic
    ones (``kernels.cuda.winding``: 3 + p labels a step, p periodic axes asked)."""
    wrapped = [a for a in axes if g.periodic[a]]
    if not wrapped:
        return 0
    from catalytic.kernels.cuda.winding import seam_rows_bound

    label = 4 if g.n_points < 2**31 else 8
    return label * (3 + len(wrapped)) * seam_rows_bound(g.shape, g.offsets, wrapped)


def _spanning(per_site, batched=False):
    """Device bytes of a spanning call (``axes=`` or ``axis=``): the labelling's
    ``per_site`` bytes (:func:`_sites`, or :func:`_stacked` for a batched twin) and the
    seam steps of every lattice."""
    def need(lat, *args, axes=None, axis=0, **kwargs):
        labelling = (_stacked if batched else _sites)(per_site)(lat, *args)
        rows = len(args[0]) if batched else 1
        return labelling + rows * _seam_bytes(lat.geometry, (axis,) if axes is None else axes)

    return need


def _arrays_need(factor=3):
    """Device bytes of an array call: host inputs are copied over and a result of the
    same size is made (``factor`` times their bytes); GPU inputs only add a result."""
    def need(*args, **kwargs):
        total = 0
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, np.ndarray):
                total += factor * a.nbytes
            elif O.on_device(a):
                total += int(a.nbytes)
        return total

    return need


def _implementation(func, need, check=None):
    """``(run, supports)`` for the registry: ``supports`` says whether the call fits on
    the device (and passes ``check``); ``run`` makes room for it, then runs it."""
    def supports(*args, **kwargs):
        why = check(*args, **kwargs) if check is not None else None
        return why or _room(need(*args, **kwargs), _lattice_of(args))

    @functools.wraps(func)
    def run(*args, **kwargs):
        with _SIMULATOR_LOCK if simulator_active() else contextlib.nullcontext():
            _make_room(need(*args, **kwargs), _lattice_of(args))
            return func(*args, **kwargs)

    return run, supports


# -- implementations --------------------------------------------------------------------------
def _weighted(g) -> bool:
    """Costs are floats: the lattice has site weights or bond weights."""
    return g.weights is not None or g.bond_weights is not None


def distance_field(lat, sources, *, spacing=None, parents=False, nearest=False):
    g = lat.geometry
    w = None
    if not _weighted(g) and spacing is None:
        d_dist = _graph().bfs_distance(*_args(lat), sources, bonds=_bond_args(lat))
    else:
        w = resident(lat).get("weights", g.weights)
        if w is None:  # bond weights or step lengths only
            w = np.zeros(0, dtype=np.float64)
        d_dist = _graph().relax_distance(*_args(lat), w, sources, bonds=_bond_args(lat, True),
                                         spacing=spacing)
    d = to_host(d_dist)
    if not (parents or nearest):
        return d.reshape(g.shape)
    gs = g.with_spacing(spacing)
    d_par = _graph().parents(
        *_args(lat)[:4], d_dist, sources, depth=C.plateau_depths_if_any(gs, d, sources),
        weights=None if w is None or len(w) == 0 else w, bonds=_bond_args(lat, True),
        lengths=gs.step_lengths)
    near = to_host(_graph().roots(d_par)) if nearest else None
    return C.field_outputs(g, d, to_host(d_par) if parents else None, near)


def shortest_path(lat, start, end, *, spacing=None):
    g = lat.geometry
    w = resident(lat).get("weights")
    host = (g.open_flat, None if g.weights is None else g.weights.reshape(-1))
    path = _graph().shortest_path(*_args(lat), start, end, w, host=host,
                                  bonds=_bond_args(lat, True), spacing=spacing)
    # the cost as every backend sums it: the step costs in path order
    return C.path_result(g.with_spacing(spacing), path)


def shortest_paths(lat, start, ends, *, spacing=None, first=False):
    g = lat.geometry
    w = resident(lat).get("weights")
    host = (g.open_flat, None if g.weights is None else g.weights.reshape(-1))
    out = _graph().shortest_paths(*_args(lat), start, ends, w, first=first, host=host,
                                  bonds=_bond_args(lat, True), spacing=spacing)
    gs = g.with_spacing(spacing)
    # the costs as every backend sums them: the step costs in path order
    if first:
        j, path, _ = out
        return j, C.path_result(gs, path)
    return [C.path_result(gs, path) for path, _ in out]


def connected_components(lat):
    g = lat.geometry
    labels, count = _graph().connected_components(*_args(lat), bonds=_bond_args(lat))
    labels = to_host(labels).reshape(g.shape)
    return R.Components(labels, int(count), C.component_sizes(labels, int(count)))


def _values():
    """The value-bond kernel's host function (``kernels.cuda.values``), on this thread's
    stream."""
    from catalytic.kernels.cuda import values

    return _OnStream(values, call_stream())


def _value_bonds(lat, keys, delta):
    """``bonds=`` for the labelling kernels: the bonds joining close keys, made on the
    device (``kernels.cuda.values``) and ANDed with the lattice's own (read in place)."""
    g = lat.geometry
    slot, user, words, _ = g.bond_args()
    if g.bond_bits is not None:
        user = resident(lat)["bond_bits"]
    bits = _values().value_bonds(keys, delta, g.bond_offsets, g.shape_arr, g.periodic_arr,
                                 user, words)
    return slot, bits, words, np.zeros(0)


def label(lat, keys, sites, delta):
    """The bonds joining close keys made on the device, and labelled there."""
    g = lat.geometry
    labels, count = _graph().connected_components(
        g.shape_arr, g.periodic_arr, g.offsets, sites, g.dedupe,
        bonds=_value_bonds(lat, keys, delta))
    labels = to_host(labels).reshape(g.shape)
    return R.Components(labels, int(count), C.component_sizes(labels, int(count)))


def batched_label(lat, stack, keys, sites, delta):
    """The value bonds made once on the device for every row, and the rows labelled in
    the same launches (``connected_components_batched``)."""
    g = lat.geometry
    labels, counts = _graph().connected_components_batched(
        g.shape_arr, g.periodic_arr, g.offsets, stack & sites, g.dedupe,
        bonds=_value_bonds(lat, keys, delta))
    labels = to_host(labels)
    sizes = [C.component_sizes(labels[b], int(counts[b])) for b in range(len(counts))]
    return C.components_of_stack(g, labels, counts, sizes)


def cluster_statistics(lat, labels, field):
    """The per-label sums by atomic additions on the device (``kernels.cuda.clusters``),
    assembled as the CPU backends assemble theirs. With a periodic axis, the labels are
    first labelled again with the periodic axes open, the bonds joining equal labels
    only, and the pieces placed in their clusters by the seam steps
    (``kernels.cuda.winding.piece_windings``); the sums then take each site's piece
    offset, and the arcs come from a bit per label and coordinate."""
    from catalytic.backends._clusters import from_moments
    from catalytic.kernels.cuda import clusters

    g = lat.geometry
    K = _OnStream(clusters, call_stream())
    count = int(labels.max(initial=0))
    wraps = np.zeros((count, g.dimensions), bool)
    pieces = shift = arcs = None
    if any(g.periodic):
        bonds = _value_bonds(lat, O.value_keys(labels), 0)
        pieces, shift, wraps = K.unwrap(labels, count, g.shape_arr, g.periodic_arr,
                                        g.offsets, bonds)
        arcs = K.arcs(labels, count, g.shape_arr, g.periodic_arr)
    sizes, first, lo, hi, fparts, m1, m2 = K.moments(labels, count, g.shape_arr, field,
                                                     pieces=pieces, shift=shift)
    return from_moments(g, sizes, first, lo, hi, fparts if field is not None else None, m1,
                        m2, wraps, arcs)


def _stats_periodic_bytes(lat, labels):
    """Device bytes the periodic part of ``cluster_statistics`` adds: the labelling of
    ``label`` (keys, sites, union-find, value bonds), a piece offset per site at most,
    and a bit per label (at most one a site) and coordinate of each periodic axis."""
    g = lat.geometry
    n = g.n_points
    words = sum(-(-s // 32) for s, p in zip(g.shape, g.periodic) if p)
    return (n * (25 + 8 * g.dimensions) + 2 * _bond_bytes(g, False)
            + 4 * len(g.bond_offsets) * g.bond_words + 4 * n * words)


def region_graph(lat, labels):
    """Contacts counted on the device, one thread a site (``kernels.cuda.clusters``)."""
    from catalytic.kernels.cuda import clusters

    g = lat.geometry
    _, _, words, _ = g.bond_args()
    bits = resident(lat)["bond_bits"] if g.bond_bits is not None else np.zeros(0, np.uint32)
    return _OnStream(clusters, call_stream()).contacts(
        labels, int(labels.max(initial=0)), g.shape_arr, g.periodic_arr, g.bond_offsets, bits,
        words)


def _edt():
    """The distance transform's host function (``kernels.cuda.edt``), on this thread's
    stream."""
    from catalytic.kernels.cuda import edt

    return _OnStream(edt, call_stream())


def distance_transform(lat, marked, keys, spacing, squared, dtype, indices):
    """One launch a pass, one thread a site (``kernels.cuda.edt``)."""
    return C.distance_transform_with(_edt(), lat, marked, keys, spacing, squared, dtype,
                                     indices)


def batched_distance_transform(lat, rows, keys, spacing, squared, dtype, indices):
    """Every row in the same launches (``kernels.cuda.edt.transform`` with ``rows``)."""
    return C.batched_distance_transform_with(_edt(), lat, rows, keys, spacing, squared,
                                             dtype, indices)


def transport(lat, high, low, *, conductance, tol, maxiter=None):
    """The components of the conducting bonds labelled on the device, the multigrid
    hierarchy built on the host (``kernels.cpu.transport.hierarchy``, as numba-cpu's),
    and the conjugate gradients on the device (``kernels.cuda.transport``)."""
    from catalytic.backends import _transport as T
    from catalytic.kernels.cuda import transport

    def label(gc):
        labels, _ = _graph().connected_components(*_args(lat), bonds=gc.bond_args())
        return to_host(labels)

    def solve(A, b, tol, limit):
        K = _OnStream(transport, call_stream())
        return K.solve(K.upload(transport.hierarchy(A)), b, tol, limit)

    return T.iterative_transport(lat, high, low, conductance, tol, maxiter, label, solve)


def _transport_need(lat, *args, **kwargs):
    """Device bytes of ``transport``: the labelling's 24 a site and the solve's. A level
    of the hierarchy holds a CSR row (8 bytes of row start, 12 a coupling: at most
    ``2 kf + 1`` on the finest, ``kf`` forward bonds a site), ``dinv``, three vectors
    of the cycle and two of the aggregates (8 bytes each); each pairing level has about a
    quarter of the sites of the one above, so all the coarse levels about a third of the
    finest (half is counted); and five vectors of the iteration."""
    g = lat.geometry
    kf = len(g.bond_offsets)
    finest = 8 + 12 * (2 * kf + 1) + 48
    per_site = 24 + 3 * finest // 2 + 40
    return g.n_points * per_site + _bond_bytes(g, True)


def _winding():
    """The wrapping kernels' host functions (``kernels.cuda.winding``), on this thread's
    stream."""
    from catalytic.kernels.cuda import winding

    return _OnStream(winding, call_stream())


def _spanning_from(g, comp, axes, wraps):
    """:class:`SpanningClusters` from a labelling and ``wraps`` (periodic axis -> labels
    of the clusters wrapping it); open axes by their faces."""
    return R.SpanningClusters({a: wraps[a] if g.periodic[a] else C.face_spanning(comp.labels, a)
                               for a in axes}, comp)


def spanning_clusters(lat, *, axes):
    """Periodic axes: labelled with those axes open, the open clusters joined across the
    seams and their windings checked from the seam steps alone
    (``kernels.cuda.winding``: only those steps and the labels come back); open axes
    only: the labelling and its faces."""
    g = lat.geometry
    wrapped = [a for a in axes if g.periodic[a]]
    if not wrapped:
        return C.spanning_with(connected_components, lat, axes)
    labels, count, wraps = _winding().wrapping_components(*_args(lat)[:4], wrapped,
                                                          bonds=_bond_args(lat))
    labels = labels.reshape(g.shape)
    comp = R.Components(labels, count, C.component_sizes(labels, count))
    return _spanning_from(g, comp, axes, wraps)


def percolates(lat, *, axis=0):
    return bool(spanning_clusters(lat, axes=(axis,)).clusters[axis].size)


def _label_stack(lat, stack):
    """``(labels (B, n), comps)``: every row labelled together, by one union-find over
    all (row, site) pairs in a fixed number of launches."""
    g = lat.geometry
    labels, counts = _graph().connected_components_batched(
        g.shape_arr, g.periodic_arr, g.offsets, stack, g.dedupe, bonds=_bond_args(lat))
    sizes = [C.component_sizes(labels[b], int(counts[b])) for b in range(len(counts))]
    return labels, C.components_of_stack(g, labels, counts, sizes)


def batched_spanning_clusters(lat, stack, *, axes):
    """Periodic axes: every row by :func:`spanning_clusters`' method, all rows in the same
    launches (``kernels.cuda.winding``); open axes by one face kernel over the rows."""
    g = lat.geometry
    wrapped = [a for a in axes if g.periodic[a]]
    if not wrapped:
        return C.spanning_of_stack(lat, stack, *_label_stack(lat, stack), axes)
    labels, counts, wraps = _winding().wrapping_components_batched(
        g.shape_arr, g.periodic_arr, g.offsets, stack, wrapped, bonds=_bond_args(lat))
    sizes = [C.component_sizes(labels[b], int(counts[b])) for b in range(len(counts))]
    comps = C.components_of_stack(g, labels, counts, sizes)
    faces = [a for a in axes if not g.periodic[a]]
    opened = C.spanning_of_stack(lat, stack, labels, comps, faces)
    return [R.SpanningClusters({a: w[a] if g.periodic[a] else s.clusters[a] for a in axes}, c)
            for s, w, c in zip(opened, wraps, comps)]


def batched_percolates(lat, stack, *, axis=0):
    return [bool(s.clusters[axis].size)
            for s in batched_spanning_clusters(lat, stack, axes=(axis,))]


def batched_distance_field(lat, stack, sources):
    """One source per row, every row searched together: one launch per BFS level."""
    g = lat.geometry
    src = np.full(stack.shape[0], int(sources[0]), dtype=np.int64)
    d = _graph().bfs_distance_batched(g.shape_arr, g.periodic_arr, g.offsets, stack,
                                       g.dedupe, src, bonds=_bond_args(lat))
    return [row.reshape(g.shape) for row in to_host(d).astype(np.int64, copy=False)]


def _one_source(lat, stack, sources):
    if len(sources) != 1:
        return (f"{len(sources)} sources: the batched BFS kernel takes one source per "
                "lattice")
    return None


def degree(lat):
    deg = _graph().degree(*_args(lat), bonds=_bond_args(lat))
    return to_host(deg).astype(np.int64, copy=False).reshape(lat.geometry.shape)


def centrality(lat, *, method="degree", k=None, seed=None):
    if method == "degree":
        return C.finish_centrality(lat.geometry, degree(lat), degree=True)
    return C.finish_centrality(
        lat.geometry, _graph().closeness(*_args(lat), None, open_host=lat.geometry.open_flat,
                                         bonds=_bond_args(lat)),
        degree=False)


def _centrality_supported(lat, *, method="degree", k=None, seed=None):
    if method not in ("degree", "closeness"):
        runs = "the numpy and numba-cpu backends run" if method == "betweenness" else (
            "the numpy backend runs")
        return f"centrality method {method!r} is not implemented on the cuda backend ({runs} it)"
    return None


def _field_io(lat, field):
    """Flat input and output buffers: on the device when the field already is (the
    result then stays there), on the host otherwise."""
    n = lat.geometry.n_points
    if O.on_device(field):
        return field.reshape(n), numba_cuda().device_array(n, dtype=np.float64), True
    f = np.ascontiguousarray(field.reshape(-1), dtype=np.float64)
    return f, np.empty(n, dtype=np.float64), False


def laplacian(lat, field):
    """Graph Laplacian on the device; a device field gives a device result."""
    f, out, dev = _field_io(lat, field)
    if out.size == 0:  # a zero-size lattice: nothing to launch
        return out.reshape(lat.geometry.shape)
    res = _fields().laplacian(*_args(lat), f, out, bonds=_bond_args(lat, True))
    return res.reshape(lat.geometry.shape) if dev else to_host(res).reshape(lat.geometry.shape)


def diffuse(lat, field, *, steps=1, alpha=0.1):
    """Explicit diffusion steps on the device; a device field gives a device result."""
    f, out, dev = _field_io(lat, field)
    if out.size == 0:  # a zero-size lattice: nothing to launch
        return out.reshape(lat.geometry.shape)
    res = _fields().diffuse(*_args(lat), f, steps, alpha, out, bonds=_bond_args(lat, True))
    return res.reshape(lat.geometry.shape) if dev else to_host(res).reshape(lat.geometry.shape)


def batched_laplacian(lat, fields):
    """Every row in one launch over all (row, site) pairs."""
    g = lat.geometry
    out = _fields().laplacian_batched(*_args(lat), fields, np.empty_like(fields),
                                      bonds=_bond_args(lat, True))
    return [row.reshape(g.shape) for row in out]


# -- array operations -------------------------------------------------------------------------
def _device_out(shape, dtype=np.float64):
    return numba_cuda().device_array(tuple(shape), dtype=dtype)


def _flat(x):
    return x.reshape(x.size)


@O.xor_values
def xor_transform(lat, data, key=None):
    """XOR on the device; the lattice's key is cached there after the first call."""
    A = _arrays()
    if not O.on_device(data):
        return C.xor_with(A, lat, data, key, key_bytes=None if key is not None else _key(lat))
    out = _device_out(data.shape, data.dtype)
    if key is None:
        A.xor_bytes(_flat(data).view(np.uint8), _key(lat), _flat(out).view(np.uint8))
    else:
        A.xor_elems(_flat(data), key, _flat(out))
    return out


@O.xor_values
def batched_xor_transform(lat, data, key=None):
    """Every row XORed with the lattice's key (cached on the device) in one launch."""
    B = data.shape[0]
    out = np.empty_like(data)
    _arrays().xor_bytes_batched(data.reshape(B, -1).view(np.uint8), _key(lat),
                                out.reshape(B, -1).view(np.uint8))
    return list(out)


def _lattice_key_only(lat, data, key=None):
    if key is not None:
        return "an explicit key: the batched XOR kernel uses the lattice's key"
    return _xor_supported(lat, data)


def _xor_supported(lat, data, key=None):
    # (host data of any byte order runs as its native copy: O.xor_values)
    if O.on_device(data) and not np.dtype(data.dtype).isnative:
        return f"GPU data in non-native byte order {np.dtype(data.dtype).str}"
    return None


def normalize(data):
    if not O.on_device(data):
        return C.normalize_with(_arrays(), data)
    out = _device_out(data.shape)
    _arrays().normalize(_flat(data), _flat(out))
    return out


def scale(data, *, factor=1.0):
    if not O.on_device(data):
        return C.scale_with(_arrays(), data, factor)
    out = _device_out(data.shape)
    _arrays().scale(_flat(data), factor, _flat(out))
    return out


def reduce(x, op):
    if not O.on_device(x):
        return C.reduce_with(_arrays(), x, op)
    if op in ("sum", "mean") and np.dtype(x.dtype).kind in "iu":
        # exact on the device (one 16-byte copy back), then as every backend: int64 or
        # OverflowError, and a correctly rounded mean
        total = _arrays().int_sum(_flat(x))
        return O.int_sum_result(total, x.dtype) if op == "sum" else np.float64(total / x.size)
    return _arrays().reduce(_flat(x), op)


def _f64(x):
    """A GPU operand as is; a host operand as a contiguous float64 array (the kernel
    copies it over)."""
    return x if O.on_device(x) else np.ascontiguousarray(x, dtype=np.float64)


def elementwise(op, a, b=None):
    if not (O.on_device(a) or O.on_device(b)):
        return C.elementwise_with(_arrays(), op, a, b)
    out = _device_out(a.shape)
    _arrays().elementwise(op, _flat(_f64(a)), None if b is None else _flat(_f64(b)), _flat(out))
    return out


def matmul(a, b):
    if not (O.on_device(a) or O.on_device(b)):
        return to_host(C.matmul_with(_arrays(), a, b))
    out = _device_out((a.shape[0], b.shape[1]))
    return _arrays().matmul(_f64(a), _f64(b), out)


def random(shape, seed, distribution):
    from catalytic.kernels.cuda.random import random_cuda

    return to_host(random_cuda(shape, seed, distribution, stream=call_stream()))


def newman_ziff(lat, count, *, first=0, kind="site", seed=0, observables=O.NZ_OBSERVABLES,
                n_stride=1):
    """One sweep per thread (``kernels.cuda.newman_ziff``); host results."""
    from catalytic.kernels.cuda.newman_ziff import sweeps_cuda
    from catalytic.percolation import NZResult

    g = lat.geometry
    slot, bits, words, _ = g.bond_args()
    events, sums, N = sweeps_cuda(kind, g.shape_arr, g.periodic_arr, g.offsets, g.open_flat,
                                  slot, bits, words, count, seed, first=first,
                                  observables=observables, n_stride=n_stride,
                                  stream=call_stream())
    return NZResult(kind=kind, shape=g.shape, periodic=g.periodic, N=N, n_sites=g.n_open,
                    n_stride=n_stride, seed=seed, ranges=[(first, first + count)],
                    events=events, sums=sums)


def _nz_need(lat, count, *, kind="site", observables=O.NZ_OBSERVABLES, n_stride=1, **_):
    """Device bytes of a launch: its sweeps' rows and the shared sums."""
    from catalytic.kernels.cuda.newman_ziff import device_bytes, per_launch

    g = lat.geometry
    n, m, d, p = g.n_points, O.nz_elements(lat, kind), g.dimensions, sum(g.periodic)
    rows = 2 * len(observables) * (m // n_stride + 1)
    return device_bytes(n, m, d, p, per_launch(n, m, d, p, count), rows)


IMPLEMENTATIONS = {
    # op: (implementation, device bytes it needs, other condition)
    "distance_field": (distance_field, _field_need, None),
    "shortest_path": (shortest_path, _sites(16, True), None),
    "shortest_paths": (shortest_paths, _sites(16, True), None),
    "connected_components": (connected_components, _sites(24), None),
    # labels, field, and per label (count <= n): 8 sums and extremes, d + d^2 moments;
    # with periodic axes also the relabelling's keys, bonds and pieces, and the arcs' bits
    "cluster_statistics": (cluster_statistics, lambda lat, labels, field=None, **k: (
        lat.geometry.n_points * (16 + 8 * (lat.geometry.dimensions + 1) ** 2)
        + (_stats_periodic_bytes(lat, labels) if any(lat.geometry.periodic) else 0)),
        None),
    # labels, and a code per bond between labels (at most the forward bonds of a site)
    "region_graph": (region_graph, lambda lat, labels, **k: (
        lat.geometry.n_points * 8 * (1 + len(lat.geometry.bond_offsets))
        + _bond_bytes(lat.geometry, False)), None),
    "batched.label": (batched_label, lambda lat, stack, *a, **k: (
        stack.size * 17 + lat.geometry.n_points * 9 + 2 * _bond_bytes(lat.geometry, False)
        + 4 * len(lat.geometry.bond_offsets) * lat.geometry.bond_words), None),
    # the keys, the labelled sites, the labelling's 16 B and the value bonds
    "label": (label, lambda lat, *a, **k: (lat.geometry.n_points * 25
                                           + 2 * _bond_bytes(lat.geometry, False)
                                           + 4 * len(lat.geometry.bond_offsets)
                                           * lat.geometry.bond_words), None),
    # two buffers of distances and of indices, the marked sites and the keys
    "distance_transform": (distance_transform, _sites(41), None),
    "transport": (transport, _transport_need, None),
    "percolates": (percolates, _spanning(24), None),
    "spanning_clusters": (spanning_clusters, _spanning(24), None),
    "degree": (degree, _sites(16), None),
    "centrality": (centrality, _sites(25), _centrality_supported),  # 3 uint64 words + mask
    "laplacian": (laplacian, _sites(24, True), None),
    "diffuse": (diffuse, _sites(32, True), None),
    "xor_transform": (xor_transform, _arrays_need(), _xor_supported),
    "normalize": (normalize, _arrays_need(), None),
    "scale": (scale, _arrays_need(), None),
    "reduce": (reduce, _arrays_need(1), None),
    "elementwise": (elementwise, _arrays_need(), None),
    "matmul": (matmul, _arrays_need(2), None),
    "random": (random, lambda shape, seed, dist: 16 * int(np.prod(shape)), None),
    # a stack of B masks: the masks, int64 parents, int32 prefix sums and int32 labels
    # (per row-site: 17 B)
    **{twin: (func, _stacked(17), None)
       for twin, func in C.stack_twins(_label_stack).items()},
    # the labelling's 17 B per row-site, and the seam steps the rows may give
    "batched.percolates": (batched_percolates, _spanning(17, batched=True), None),
    "batched.spanning_clusters": (batched_spanning_clusters, _spanning(17, batched=True),
                                  None),
    # masks and int64 distances per row-site
    "batched.distance_field": (batched_distance_field, _stacked(9), _one_source),
    # as distance_transform, per row-site (the keys repeated for every row)
    "batched.distance_transform": (batched_distance_transform, _stacked(41), None),
    # fields in and out, float64
    "batched.laplacian": (batched_laplacian, _stacked(16), None),
    "batched.xor_transform": (batched_xor_transform, lambda lat, data, key=None: 2 * data.nbytes,
                              _lattice_key_only),
    "newman_ziff": (newman_ziff, _nz_need, None),
}


