"""The ``cuda`` backend: host side of the ``@cuda.jit`` kernels in :mod:`catalytic.kernels.cuda`.

What lives here (and not in the kernels): whether a GPU is there, whether the device has
room for a call, launch orchestration, and *residency*: a lattice's mask, weights and
XOR key are copied to the device once and cached on the lattice (``lattice.cleanup()``
releases them; a call that needs the room releases other lattices' copies first, and
:func:`cleanup` drops them all after a GPU failure). GPU arrays passed in stay on the
device and give GPU results. Every copy between host and device goes through
:func:`to_device` / :func:`to_host`, which count the bytes each way
(:func:`transfer_stats`).

Under ``NUMBA_ENABLE_CUDASIM=1`` the backend runs on Numba's CUDA simulator: results are
real, speed is not (a few thousand threads a second), so its cost model keeps the router
away from it unless a call names ``backend="cuda"``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
import weakref
from collections import OrderedDict

import numpy as np

from catalytic import operations as O
from catalytic.backends import _common as C
from catalytic.devices import devices, numba_cuda as _cuda, probe, simulator_active
from catalytic.hookspecs import hookimpl

NAME = "cuda"
#: the profiler's NVTX probe imports this name; ``catalytic.devices.probe`` is the probe
_available = probe
#: fraction of the device's free memory a call may plan to use
DEVICE_MEMORY_MARGIN = 0.9
#: default costs until ``catalytic calibrate`` runs on a GPU machine (uncalibrated guesses,
#: labelled as such in every Decision): kernel launch + transfer overhead, work units / s
GPU_DEFAULT_COST = (100e-6, 2e10)
#: the simulator: correct but some thousand threads a second
SIMULATOR_COST = (5e-3, 3e3)

#: lattices with device copies, least recently used first: id(lattice) -> weakref
_resident: "OrderedDict[int, weakref.ref]" = OrderedDict()
#: guards ``_resident`` and the lattices' cached copies (calls from several threads)
_resident_lock = threading.RLock()
_registered = False
#: bytes of every cached copy, and per lattice (kept as copies are made, released and
#: garbage-collected, so reading them is O(1))
_cached_total = 0
_bytes: dict[int, int] = {}


def _resident_lattices() -> list:
    """Live lattices with device copies, least recently used first."""
    with _resident_lock:
        live = [(k, r()) for k, r in _resident.items()]
        for k, lat in live:
            if lat is None:
                del _resident[k]
        return [lat for _, lat in live if lat is not None]


# -- transfers and residency ---------------------------------------------------------------
def _transfer():
    from catalytic.kernels.cuda import _transfer as t

    return t


def to_device(arr, stream=0):
    """Copy a host array to the device (counted with every kernel's own copies)."""
    return _transfer().to_device(arr, stream=stream)


def to_host(x):
    """A host copy of a device array (counted); numpy arrays pass through."""
    if not hasattr(x, "copy_to_host"):
        return x
    return _transfer().to_host(x)


def transfer_stats() -> dict:
    """Bytes and copies host->device and device->host since start (or the last reset),
    counting every copy the backend and the CUDA kernels' host functions make."""
    try:
        t = _transfer()
    except ImportError:
        return {"h2d_bytes": 0, "d2h_bytes": 0, "h2d_copies": 0, "d2h_copies": 0}
    with t._lock:
        return dict(t.COUNTS)


def reset_transfer_stats() -> None:
    t = _transfer()
    with t._lock:
        for k in t.COUNTS:
            t.COUNTS[k] = 0


def _cached(lat, name, host):
    """The device copy ``name`` of a lattice's ``host`` array, made on first use."""
    with _resident_lock:
        state = lat.backend_cache(NAME)
        d = state.get(name)
        _touch(lat)
        if d is None:
            global _cached_total
            _register_with_monitor()
            d = state[name] = to_device(host) if host.size else host
            _cached_total += int(d.nbytes)
            _bytes[id(lat)] = _bytes.get(id(lat), 0) + int(d.nbytes)
        return d


def _touch(lat) -> None:
    """Mark ``lat`` as the most recently used lattice on the device."""
    key = id(lat)
    ref = _resident.get(key)
    if ref is None or ref() is not lat:
        _resident[key] = weakref.ref(lat, lambda r, k=key: _forget(k, r))
    _resident.move_to_end(key)


def _forget(key, ref) -> None:
    """A lattice with device copies was garbage-collected: its copies went with it."""
    global _cached_total
    with _resident_lock:
        if _resident.get(key) is ref:
            del _resident[key]
            _cached_total -= _bytes.pop(key, 0)


def resident(lat) -> dict:
    """The lattice's device-side copies (mask as uint8 sites, weights), made once."""
    g = lat.geometry
    _cached(lat, "open_", g.open_flat)
    if g.weights is not None:
        _cached(lat, "weights", g.weights.reshape(-1))
    return lat.backend_cache(NAME)


def _key(lat):
    """The lattice's catalytic XOR key on the device (it never changes: borrowing
    operations restore it bit for bit, and the engine checks)."""
    return _cached(lat, "key", lat.key_buffer)


def _held(lat) -> int:
    return sum(int(d.nbytes) for d in (lat.backend_cache(NAME, create=False) or {}).values())


def release(lat) -> int:
    """Drop one lattice's cached device copies; returns their bytes."""
    global _cached_total
    with _resident_lock:
        freed = _held(lat)
        lat.drop_backend_cache(NAME)
        if _resident.pop(id(lat), None) is not None:
            _cached_total -= _bytes.pop(id(lat), 0)
        return freed


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
    """Why ``err`` leaves the CUDA context unusable for the rest of the process (a
    sticky error such as an illegal address), or None when a retry may succeed. The
    engine then disables this backend at once instead of retrying on every call."""
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
    """Wait for this thread's stream (:func:`call_stream`) to finish its work: the engine
    calls this after every call here, so the time it records is device time, not
    launch time, and a result left on the device is complete when the call returns.
    Other threads' calls are not waited for."""
    if not simulator_active():
        call_stream().synchronize()


def cleanup() -> None:
    """Drop every cached device copy (after a GPU failure), the kernels' cached lattice
    tables included."""
    for lat in _resident_lattices():
        release(lat)
    with contextlib.suppress(ImportError):
        _graph_module().clear_tables()


def cached_bytes(exclude=None) -> int:
    """Device bytes held by cached lattice copies (all but ``exclude``'s)."""
    with _resident_lock:
        if exclude is None:
            return _cached_total
        return _cached_total - _bytes.get(id(exclude), 0)


def evict_lru(keep=None):
    """Release the least recently used lattice's copies (never ``keep``'s); returns the
    bytes released, or None when there is nothing to release."""
    with _resident_lock:
        for lat in _resident_lattices():
            if lat is not keep:
                return release(lat)
    return None


def _register_with_monitor() -> None:
    """Let the device-memory monitor count and evict the lattice copies."""
    global _registered
    if not _registered:
        from catalytic.memory import get_monitor

        get_monitor().register_cache(
            "cuda lattice copies",
            # (reading the running total needs no lock: one int, replaced whole)
            held=lambda keep=None: _cached_total if keep is None else cached_bytes(keep),
            evict=evict_lru,
        )
        _registered = True


def _args(lat):
    g = lat.geometry
    st = resident(lat)
    return g.shape_arr, g.periodic_arr, g.offsets, st["open_"], g.dedupe


# -- device-memory checks ----------------------------------------------------------------------
# A check (``supports``, asked by the router, also by ``explain``) only reads: a call fits
# when it fits in free memory, or would once other lattices' cached copies are released.
# Both questions go to the device-memory monitor, which evicts (least recently used
# first) on the run path only (:func:`_make_room`), never while routing.
def _room(needed: int, lattice=None):
    """None if ``needed`` bytes fit on the device (with a margin), counting other
    lattices' cached copies as reclaimable; else the shortfall."""
    from catalytic.memory import get_monitor

    try:
        return get_monitor().shortfall(needed, margin=DEVICE_MEMORY_MARGIN, keep=lattice)
    except Exception as err:
        return f"cannot read free device memory: {err}"


def _make_room(needed: int, lattice=None) -> None:
    """Release other lattices' cached copies, least recently used first, until
    ``needed`` bytes fit."""
    from catalytic.memory import get_monitor

    if _resident:
        get_monitor().make_room(needed, margin=DEVICE_MEMORY_MARGIN, keep=lattice)


def _lattice_of(args):
    return args[0] if args and hasattr(args[0], "geometry") else None


def _sites(per_site):
    """Device bytes of a lattice call: ``per_site`` bytes for every site."""
    return lambda lat, *args, **kwargs: lat.geometry.n_points * per_site


def _stacked(per_site):
    """Device bytes of a batched twin: ``per_site`` bytes for every site of every row."""
    return lambda lat, stack, *args, **kwargs: stack.size * per_site


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


#: Numba's CUDA simulator is not thread-safe: while it runs a kernel it swaps the
#: ``cuda`` name in the kernel module's globals for a fake module, so host code of that
#: module running in another thread at the same moment fails ("'FakeCUDAModule' object
#: has no attribute 'device_array'"). Under the simulator, calls take turns; on a GPU
#: they run concurrently.
_SIMULATOR_LOCK = threading.Lock()


# -- kernels ----------------------------------------------------------------------------------
class _OnStream:
    """A kernel module whose host functions run on ``stream``: ``_OnStream(m, s).f(...)``
    is ``m.f(..., stream=s)``, also where the host wrappers shared with numba-cpu
    (``_common.*_with``) call them without a stream."""

    def __init__(self, module, stream):
        self._module = module
        self._stream = stream

    def __getattr__(self, name):
        return functools.partial(getattr(self._module, name), stream=self._stream)


_thread = threading.local()


def call_stream():
    """This thread's CUDA stream, on which every call of the backend queues its copies
    and launches: calls from several threads overlap on the device instead of queueing
    behind one another on the default stream. One per thread and CUDA context, made on
    first use; :func:`synchronize` waits for it alone. Numba's streams are blocking
    streams, so work on the default stream (the cached lattice copies, a user's own
    copies) stays ordered with them."""
    ctx = _graph_module()._context_key()
    held = getattr(_thread, "stream", None)
    if held is None or held[0] != ctx:
        held = _thread.stream = (ctx, _cuda().stream())
    return held[1]


def _graph_module():
    from catalytic.kernels.cuda import graph

    return graph


def _graph():
    """The graph kernels' host functions, on this thread's stream."""
    return _OnStream(_graph_module(), call_stream())


def _fields():
    """The field kernels' host functions, on this thread's stream."""
    from catalytic.kernels.cuda import fields

    return _OnStream(fields, call_stream())


def _arrays():
    """The array kernels' host functions, on this thread's stream."""
    from catalytic.kernels.cuda import arrays

    return _OnStream(arrays, call_stream())


# -- implementations --------------------------------------------------------------------------
def distance_field(lat, sources):
    g = lat.geometry
    if g.weights is None:
        d = _graph().bfs_distance(*_args(lat), sources)
        return to_host(d).astype(np.int64, copy=False).reshape(g.shape)
    d = _graph().relax_distance(*_args(lat), resident(lat)["weights"], sources)
    return to_host(d).reshape(g.shape)


def shortest_path(lat, start, end):
    g = lat.geometry
    w = resident(lat).get("weights")
    host = (g.open_flat, None if g.weights is None else g.weights.reshape(-1))
    return C.path_result(g, _graph().shortest_path(*_args(lat), start, end, w, host=host))


def connected_components(lat):
    g = lat.geometry
    labels, count = _graph().connected_components(*_args(lat))
    labels = to_host(labels).reshape(g.shape)
    return O.Components(labels, int(count), C.component_sizes(labels, int(count)))


def percolates(lat, *, axis=0):
    return C.percolates_with(connected_components, lat, axis)


def spanning_clusters(lat, *, axes):
    """Labels from this backend's kernels; the winding check on the host (SciPy)."""
    return C.spanning_with(connected_components, lat, axes)


def _label_stack(lat, stack):
    """``(labels (B, n), comps)``: every row labelled together, by one union-find over
    all (row, site) pairs in a fixed number of launches."""
    g = lat.geometry
    labels, counts = _graph().connected_components_batched(
        g.shape_arr, g.periodic_arr, g.offsets, stack, g.dedupe)
    sizes = [C.component_sizes(labels[b], int(counts[b])) for b in range(len(counts))]
    return labels, C.components_of_stack(g, labels, counts, sizes)


def batched_distance_field(lat, stack, sources):
    """One source per row, every row searched together: one launch per BFS level."""
    g = lat.geometry
    src = np.full(stack.shape[0], int(sources[0]), dtype=np.int64)
    d = _graph().bfs_distance_batched(g.shape_arr, g.periodic_arr, g.offsets, stack,
                                       g.dedupe, src)
    return [row.reshape(g.shape) for row in to_host(d).astype(np.int64, copy=False)]


def _one_source(lat, stack, sources):
    if len(sources) != 1:
        return (f"{len(sources)} sources: the batched BFS kernel takes one source per "
                "lattice")
    return None


def degree(lat):
    return to_host(_graph().degree(*_args(lat))).astype(np.int64, copy=False).reshape(lat.geometry.shape)


def centrality(lat, *, method="degree", k=None, seed=None):
    if method == "degree":
        return C.finish_centrality(lat.geometry, degree(lat), degree=True)
    return C.finish_centrality(
        lat.geometry, _graph().closeness(*_args(lat), None, open_host=lat.geometry.open_flat),
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
        return field.reshape(n), _cuda().device_array(n, dtype=np.float64), True
    f = np.ascontiguousarray(field.reshape(-1), dtype=np.float64)
    return f, np.empty(n, dtype=np.float64), False


def laplacian(lat, field):
    """Graph Laplacian on the device; a device field gives a device result."""
    f, out, dev = _field_io(lat, field)
    if out.size == 0:  # a zero-size lattice: nothing to launch
        return out.reshape(lat.geometry.shape)
    res = _fields().laplacian(*_args(lat), f, out)
    return res.reshape(lat.geometry.shape) if dev else to_host(res).reshape(lat.geometry.shape)


def diffuse(lat, field, *, steps=1, alpha=0.1):
    """Explicit diffusion steps on the device; a device field gives a device result."""
    f, out, dev = _field_io(lat, field)
    if out.size == 0:  # a zero-size lattice: nothing to launch
        return out.reshape(lat.geometry.shape)
    res = _fields().diffuse(*_args(lat), f, steps, alpha, out)
    return res.reshape(lat.geometry.shape) if dev else to_host(res).reshape(lat.geometry.shape)


def batched_laplacian(lat, fields):
    """Every row in one launch over all (row, site) pairs."""
    g = lat.geometry
    out = _fields().laplacian_batched(*_args(lat), fields, np.empty_like(fields))
    return [row.reshape(g.shape) for row in out]


# Array operations: a GPU input gives a GPU result (a Numba device array, which exposes
# ``__cuda_array_interface__`` to CuPy, PyTorch, ...); host inputs give host results.
def _device_out(shape, dtype=np.float64):
    return _cuda().device_array(tuple(shape), dtype=dtype)


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


IMPLEMENTATIONS = {
    # op: (implementation, device bytes it needs, other condition)
    "distance_field": (distance_field, _sites(24), None),
    "shortest_path": (shortest_path, _sites(16), None),
    "connected_components": (connected_components, _sites(24), None),
    "percolates": (percolates, _sites(24), None),
    "spanning_clusters": (spanning_clusters, _sites(24), None),
    "degree": (degree, _sites(16), None),
    "centrality": (centrality, _sites(25), _centrality_supported),  # 3 uint64 words + mask
    "laplacian": (laplacian, _sites(24), None),
    "diffuse": (diffuse, _sites(32), None),
    "xor_transform": (xor_transform, _arrays_need(), _xor_supported),
    "normalize": (normalize, _arrays_need(), None),
    "scale": (scale, _arrays_need(), None),
    "reduce": (reduce, _arrays_need(1), None),
    "elementwise": (elementwise, _arrays_need(), None),
    "matmul": (matmul, _arrays_need(2), None),
    "random": (random, lambda shape, seed, dist: 16 * int(np.prod(shape)), None),
    # a stack of B masks: the masks, int64 parents, int32 prefix sums and int32 labels
    # (per row-site: 17 B)
    **{twin: (func, _stacked(17), None) for twin, func in C.stack_twins(_label_stack).items()},
    # masks and int64 distances per row-site
    "batched.distance_field": (batched_distance_field, _stacked(9), _one_source),
    # fields in and out, float64
    "batched.laplacian": (batched_laplacian, _stacked(16), None),
    "batched.xor_transform": (batched_xor_transform, lambda lat, data, key=None: 2 * data.nbytes,
                              _lattice_key_only),
}


# -- cost terms -------------------------------------------------------------------------------
#: Parameters of the cost terms until ``catalytic calibrate`` measures them on a GPU
#: (:func:`measure_terms`). Neither is a measurement. ``launch_s``: a kernel launch
#: queued behind others costs on the order of microseconds (NVIDIA's CUDA Graphs
#: documentation gives no single figure). ``pcie_bytes_per_s``: 25 GB/s, about 40% of
#: the published PCIe Gen5 x16 link rate (64 GB/s each way, H100 PCIe), which copies from
#: pageable host memory do not reach.
DEFAULT_TERMS = {"launch_s": 5e-6, "pcie_bytes_per_s": 25e9}


def hops_estimate(g, a=None, b=None) -> int:
    """Hops between flat sites ``a`` and ``b`` of geometry ``g`` when no site is blocked,
    from below: per axis the displacement (the shorter way round a periodic axis), then
    the larger of the most steps one axis needs (at most ``max |offset|`` along it per
    hop) and of the total (at most ``max_k sum |offset_k|`` per hop). Exact for von
    Neumann and Moore stencils on an unblocked lattice; blocked sites only add hops.
    Without ``a``, ``b``: the lattice's diameter the same way (the farthest a BFS level
    count can be from its source, were nothing blocked).

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


def _not_resident(lat, weights=False) -> int:
    """Bytes of the lattice's mask (and weights) that a call would copy to the device
    first: 0 once they are cached there (:func:`resident`)."""
    g = lat.geometry
    held = lat.backend_cache(NAME, create=False) or {}
    out = 0 if "open_" in held else int(g.open_flat.nbytes)
    if weights and g.weights is not None and "weights" not in held:
        out += 8 * g.n_points
    return out


def _host_bytes(args, kwargs) -> int:
    """Bytes of the NumPy arrays among the arguments (copied to the device)."""
    return sum(a.nbytes for a in list(args) + list(kwargs.values())
               if isinstance(a, np.ndarray))


def _launches_of_labelling(sites) -> int:
    """Launches of one union-find labelling (:func:`..graph._components_run`)."""
    return 5 + 2 * max(1, math.ceil(math.log(max(sites, 2), 256)))


def _terms_for(op):
    """``terms(params, *args, **kwargs)`` of ``op`` on this backend, or None: the
    kernel launches a call queues (a BFS or a relaxation: one per level or sweep, about
    the hops estimate) and the bytes it moves over PCIe (lattice arrays not yet on the
    device, NumPy inputs, results copied back), at ``launch_s`` and
    ``pcie_bytes_per_s`` (``params`` from calibration, else :data:`DEFAULT_TERMS`)."""
    def lattice_terms(launches, back_per_site, weights=False, back=None):
        def terms(params, lat, *args, **kwargs):
            p = {**DEFAULT_TERMS, **params}
            n = lat.geometry.n_points
            returned = back_per_site * n if back is None else back(lat, *args, **kwargs)
            moved = _not_resident(lat, weights) + _host_bytes(args, kwargs) + returned
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

    def levels(lat, *args, **kwargs):
        # weighted: near-far, three launches a step, about a step a level
        return (3 if lat.geometry.weights is not None else 1) * (hops_estimate(lat.geometry) + 1)

    def path_levels(lat, start, end, *args, **kwargs):
        if lat.geometry.weights is not None:  # the whole near-far run, then the walk
            return levels(lat)
        return hops_estimate(lat.geometry, start, end) + 1

    def path_back(lat, start, end, *args, **kwargs):
        if lat.geometry.weights is not None:  # the costs, for the walk on the host
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
        "connected_components": lattice_terms(labelling, 4),
        "percolates": lattice_terms(labelling, 4),
        "spanning_clusters": lattice_terms(labelling, 4),
        "degree": lattice_terms(one, 8),
        "centrality": lattice_terms(closeness_levels, 8),
        "laplacian": lattice_terms(one, 8),
        "diffuse": lattice_terms(steps, 8),
        "batched.distance_field": lattice_terms(levels, 0),
        "batched.laplacian": lattice_terms(one, 0),
        "batched.xor_transform": lattice_terms(one, 0),
    }
    for twin in C.stack_twins(_label_stack):
        table[twin] = lattice_terms(stack_labelling, 0)
    for name in ("xor_transform", "normalize", "scale", "reduce", "elementwise", "matmul"):
        table[name] = arrays_terms
    return table.get(op)


def measure_terms(*, launches=1000, nbytes=1 << 28, repeat=3) -> dict:
    """The cost-term parameters on this device, for ``catalytic calibrate``:
    ``launch_s``, the seconds per kernel launch queued back to back (a one-thread
    kernel ``launches`` times, then one synchronisation), and ``pcie_bytes_per_s``, the
    rate of a copy of ``nbytes`` from pageable host memory to the device and back. Best
    of ``repeat``."""
    cuda = _cuda()
    g = _graph_module()
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


@hookimpl
def catalytic_add_backends(registry):
    registry.add_backend(NAME, available=probe, device="gpu",
                         description="Numba @cuda.jit kernels, data cached on the device",
                         fatal_error=fatal_error, synchronize=synchronize, cleanup=cleanup,
                         release=release, monitored=True)


@hookimpl
def catalytic_add_operations(registry):
    cost = SIMULATOR_COST if simulator_active() else GPU_DEFAULT_COST
    for op, (func, need, check) in IMPLEMENTATIONS.items():
        run, supports = _implementation(func, need, check)
        registry.add_implementation(op, NAME, run, supports=supports, cost=cost,
                                    terms=_terms_for(op))
