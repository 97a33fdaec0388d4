"""Device-side lattice arithmetic for the CUDA kernels.

``neighbor`` is compiled from the very same Python source as the CPU twin
(:func:`catalytic.kernels.cpu.neighbors.neighbor`), so both backends define neighbours
identically. The CPU kernels collect a site's de-duplicated neighbour set into a scratch
row (:func:`catalytic.kernels.cpu.neighbors.neighbors_into`); on the device a per-thread
buffer sized for the largest stencil would be a ``cuda.local.array`` of fixed size, which
the driver reserves for every thread that can be resident (hundreds of MB on an H100).
The kernels instead ask :func:`is_first` of each neighbour, recomputing the earlier
ones: the same set, in the same (stencil) order, with no local memory.

``neighbor`` decodes the site's coordinates for every offset (d divisions each). The
hot kernels decode them once per site instead (:func:`inside`): a site whose every
coordinate keeps the whole stencil on the lattice, without wrapping, reaches its k-th
neighbour at ``i + foff[k]`` (:func:`step`), and only the sites near an edge or seam
take the general path. There, distinct stencil entries reach distinct sites, so the
de-duplicated set needs no recomputation either: :func:`kept` reads a per-entry flag
(``kernels.cuda.graph._first``) on the fast path and asks :func:`is_first` elsewhere.

Bonds (``Geometry.bond_args()``): a kernel takes ``bslot`` (the slot of each entry of
the offsets table it walks: ``bond_slot`` for the stencil, its bitwise complement for
the negated stencil), ``bits``, ``words`` and ``bw``, length-0 arrays for "none".
:func:`bond_open` and :func:`bond_at` are the CPU helpers compiled for the device. A
step counts only through an open bond, and under ``dedupe`` the first *usable*
occurrence of a neighbour wins (:func:`first_usable`); a fast-path site never sees two
entries reach one site, so its per-entry flag needs no bond test.
"""

from __future__ import annotations

from numba import cuda

from catalytic.kernels.cpu import neighbors as _cpu

neighbor = cuda.jit(device=True)(_cpu.neighbor.py_func)
bond_open = cuda.jit(device=True)(_cpu.bond_open.py_func)
bond_at = cuda.jit(device=True)(_cpu.bond_at.py_func)


@cuda.jit(device=True)
def is_first(i, k, j, shape, strides, periodic, offsets, open_):
    """True when ``j`` (>= 0), the neighbour of site ``i`` through stencil offset ``k``,
    belongs to the de-duplicated neighbour set at this position: it is not ``i`` itself
    and no earlier offset reaches it. Walking ``k`` in order and keeping the neighbours
    for which this holds gives exactly ``neighbors_into(..., dedupe=True)`` of the CPU
    twin, in the same order. O(k d) per call."""
    if j == i:
        return False
    for q in range(k):
        if neighbor(i, q, shape, strides, periodic, offsets, open_) == j:
            return False
    return True


@cuda.jit(device=True)
def first_usable(i, k, j, shape, strides, periodic, offsets, open_, bslot, bits, words):
    """:func:`is_first` with bonds: ``j`` (>= 0, reached from ``i`` through entry ``k``
    by an open bond) is not ``i`` and no earlier entry reaches it through an open bond.
    O(k d) per call."""
    if j == i:
        return False
    for q in range(k):
        if (neighbor(i, q, shape, strides, periodic, offsets, open_) == j
                and bond_open(i, j, bslot[q], bits, words)):
            return False
    return True


@cuda.jit(device=True)
def least_bond(i, k, j, shape, strides, periodic, offsets, open_, bslot, bits, words, bw, n):
    """The least weight of the open bonds joining ``i`` to ``j`` through entry ``k`` and
    the later entries (the parallel bonds of a short periodic axis; ``k`` is the first
    usable one, so the earlier ones add nothing); ``n`` sites. O(k d) per call."""
    c = bw[bond_at(i, j, bslot[k], n)]
    for q in range(k + 1, offsets.shape[0]):
        if (neighbor(i, q, shape, strides, periodic, offsets, open_) == j
                and bond_open(i, j, bslot[q], bits, words)):
            c = min(c, bw[bond_at(i, j, bslot[q], n)])
    return c


@cuda.jit(device=True)
def inside(i, strides, lo, hi):
    """True when every coordinate ``c_a`` of site ``i`` lies in ``[lo[a], hi[a])``, the
    range from which every offset of a stencil stays on the lattice without wrapping
    (see ``kernels.cuda.graph._fast``). d divisions, once per site."""
    rem = i
    for a in range(strides.shape[0]):
        c = rem // strides[a]
        rem -= c * strides[a]
        if c < lo[a] or c >= hi[a]:
            return False
    return True


@cuda.jit(device=True)
def step(i, k, fast, foff, shape, strides, periodic, offsets, open_):
    """:func:`neighbor`, by one addition of the flat offset ``foff[k]`` when ``fast``
    (site ``i`` is :func:`inside`): the same site or -1."""
    if fast:
        j = i + foff[k]
        if open_.shape[0] != 0 and open_[j] == 0:
            return -1
        return j
    return neighbor(i, k, shape, strides, periodic, offsets, open_)


@cuda.jit(device=True)
def kept(i, k, j, fast, first, dedupe, shape, strides, periodic, offsets, open_, bslot, bits,
         words):
    """True when ``j`` (>= 0), reached from site ``i`` through stencil entry ``k`` by
    :func:`step`, counts in ``i``'s neighbour set: the bond open (:func:`bond_open`)
    and, without ``dedupe``, always; with it, ``first[k]`` when ``fast`` (the entry is
    neither the zero offset nor a repeat of an earlier one, O(1)) and :func:`is_first`
    (:func:`first_usable` with bonds) otherwise (O(k d))."""
    if not bond_open(i, j, bslot[k], bits, words):
        return False
    if not dedupe:
        return True
    if fast:
        return first[k] != 0
    if bits.shape[0] == 0:
        return is_first(i, k, j, shape, strides, periodic, offsets, open_)
    return first_usable(i, k, j, shape, strides, periodic, offsets, open_, bslot, bits, words)
