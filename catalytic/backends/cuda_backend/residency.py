"""What the cuda backend holds on the device, and every copy between host and device.

A lattice's mask, weights, bonds (packed bits), bond weights and XOR key are copied to the device once, on first use, and
kept in the lattice's cache for this backend (``lat.backend_cache(NAME)``). The lattices
holding copies are kept least recently used first, with the bytes they hold, so the
device-memory monitor can count them in O(1) and evict them one lattice at a time.
Copies go through :func:`to_device` / :func:`to_host`, which count the bytes each way
together with the CUDA kernels' own copies (:func:`transfer_stats`).

The room checks live here too: a call fits when it fits in free device memory, or would
once other lattices' copies are released. Both questions go to the monitor, which
evicts on the run path only (:func:`_make_room`), never while routing.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

#: the name the backend registers under, and the key of its cache on each lattice
NAME = "cuda"
#: fraction of the device's free memory a call may plan to use
DEVICE_MEMORY_MARGIN = 0.9

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


# -- transfers ------------------------------------------------------------------------------
def _transfer():
    from catalytic.kernels.cuda import _transfer as t

    return t


def to_device(arr, stream=0):
    """Copy a host array to the device, counted in :func:`transfer_stats`.

    Parameters
    ----------
    arr : array_like
        A host array (made contiguous first).
    stream : numba.cuda stream or 0, optional
        The stream the copy is queued on (0: the default stream).

    Returns
    -------
    numba.cuda device array
        A new device array.

    Raises
    ------
    TypeError
        When ``arr`` is already on the device.
    """
    return _transfer().to_device(arr, stream=stream)


def to_host(x):
    """A host copy of a device array, counted in :func:`transfer_stats`.

    Parameters
    ----------
    x : numba.cuda device array or numpy.ndarray
        A NumPy array passes through unchanged (no copy, not counted).

    Returns
    -------
    numpy.ndarray
    """
    if not hasattr(x, "copy_to_host"):
        return x
    return _transfer().to_host(x)


def transfer_stats() -> dict:
    """Copies between host and device since the process started or the last reset.

    Returns
    -------
    dict
        ``h2d_bytes``, ``d2h_bytes``, ``h2d_copies``, ``d2h_copies`` (ints): every copy
        the backend and the CUDA kernels' host functions made. All zero when
        numba-cuda is not installed.
    """
    try:
        t = _transfer()
    except ImportError:
        return {"h2d_bytes": 0, "d2h_bytes": 0, "h2d_copies": 0, "d2h_copies": 0}
    with t._lock:
        return dict(t.COUNTS)


def reset_transfer_stats() -> None:
    """Set every count of :func:`transfer_stats` to zero.

    Raises
    ------
    ImportError
        When numba-cuda is not installed.
    """
    t = _transfer()
    with t._lock:
        for k in t.COUNTS:
            t.COUNTS[k] = 0


# -- the per-lattice device copies ------------------------------------------------------------
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
    """The lattice's device copies, made on first use.

    Parameters
    ----------
    lat : Lattice

    Returns
    -------
    dict
        The lattice's cache for this backend: ``"open_"``, the open sites as uint8 (one
        per site), ``"weights"`` when the lattice has weights (float64) and
        ``"bond_bits"`` when it has bonds (uint32, one bit a bond), as device arrays (a
        zero-size array stays on the host); ``"bond_weights"`` (float64) once a call
        that reads them has used them (:func:`_bond_args`), and a cached XOR key
        (``"key"``) once a call has used it.
    """
    g = lat.geometry
    _cached(lat, "open_", g.open_flat)
    if g.weights is not None:
        _cached(lat, "weights", g.weights.reshape(-1))
    if g.bond_bits is not None:
        _cached(lat, "bond_bits", g.bond_bits)
    return lat.backend_cache(NAME)


def _bond_args(lat, weights=False):
    """``Geometry.bond_args()`` with the bonds (and, with ``weights``, the bond weights)
    replaced by their device copies, made on first use; None when the lattice has
    neither (the kernels then take their no-bond path)."""
    g = lat.geometry
    if not g.has_bonds:
        return None
    slot, bits, words, bw = g.bond_args()
    if g.bond_bits is not None:
        bits = resident(lat)["bond_bits"]
    if weights and g.bond_weights is not None:
        bw = _cached(lat, "bond_weights", g.bond_weights)
    return slot, bits, words, bw


def _key(lat):
    """The lattice's catalytic XOR key on the device (it never changes: borrowing
    operations restore it bit for bit, and the engine checks)."""
    return _cached(lat, "key", lat.key_buffer)


def _held(lat) -> int:
    return sum(int(d.nbytes) for d in (lat.backend_cache(NAME, create=False) or {}).values())


def _not_resident(lat, weights=False, bond_weights=None) -> int:
    """Bytes of the lattice's mask and bonds (and weights, and bond weights: by default
    with the weights) that a call would copy to the device first: 0 once they are
    cached there (:func:`resident`)."""
    bond_weights = weights if bond_weights is None else bond_weights
    g = lat.geometry
    held = lat.backend_cache(NAME, create=False) or {}
    out = 0 if "open_" in held else int(g.open_flat.nbytes)
    if g.bond_bits is not None and "bond_bits" not in held:
        out += int(g.bond_bits.nbytes)
    if weights and g.weights is not None and "weights" not in held:
        out += 8 * g.n_points
    if bond_weights and g.bond_weights is not None and "bond_weights" not in held:
        out += int(g.bond_weights.nbytes)
    return out


def _args(lat):
    """The leading arguments of a graph or field kernel's host function for ``lat``:
    shape, periodic axes, offsets, the open sites on the device, and the dedupe flag."""
    g = lat.geometry
    st = resident(lat)
    return g.shape_arr, g.periodic_arr, g.offsets, st["open_"], g.dedupe


def release(lat) -> int:
    """Drop one lattice's cached device copies.

    Parameters
    ----------
    lat : Lattice

    Returns
    -------
    int
        The bytes the copies held (0 when there were none).
    """
    global _cached_total
    with _resident_lock:
        freed = _held(lat)
        lat.drop_backend_cache(NAME)
        if _resident.pop(id(lat), None) is not None:
            _cached_total -= _bytes.pop(id(lat), 0)
        return freed


def cached_bytes(exclude=None) -> int:
    """Device bytes held by the cached lattice copies.

    Parameters
    ----------
    exclude : Lattice, optional
        A lattice whose copies are not counted.

    Returns
    -------
    int
    """
    with _resident_lock:
        if exclude is None:
            return _cached_total
        return _cached_total - _bytes.get(id(exclude), 0)


def evict_lru(keep=None):
    """Release the copies of the least recently used lattice.

    Parameters
    ----------
    keep : Lattice, optional
        A lattice whose copies are never released.

    Returns
    -------
    int or None
        The bytes released, or None when no other lattice holds copies.
    """
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


# -- device-memory room ---------------------------------------------------------------------
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
