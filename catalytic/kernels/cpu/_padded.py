"""The padded index space of the CPU traversal kernels (BFS, Dijkstra, paths, closeness).

Padded index space
------------------
The traversal kernels (BFS, Dijkstra, path counting, closeness, shortest paths) work in a
*padded* copy of the lattice: every axis gets a halo of ``r_a = max |offsets[:, a]|``
cells on both sides, so a stencil step is a single addition ``q = p + flat_offset[k]``
with no division and no bounds test. Halo cells hold ``WALL`` (the step left an open
axis) or ``PORTAL`` (the step left only periodic axes); only when a portal is hit is the
wrapped site computed from coordinates, which happens at the boundary alone. Blocked
sites hold ``WALL`` too. Padded indices keep the C order of the real indices, so "the
smallest flat index" means the same in both spaces.

When the halo would more than double the array (many tiny axes) the kernels run on the
unpadded array instead (``Plan.mode`` 0) and compute every step from coordinates: same
results, slower steps. Without periodic halos (``Plan.mode`` 1) the hot loops skip the
portal test.

Bonds reach the traversals as :class:`BondCells` (built once per lattice by
:func:`plan_bonds`, kept in its numba-cpu cache): ``ceil(k/8)`` bytes per padded cell
whose bit ``k`` says whether the bond that stencil step ``k`` crosses from that cell is
open, backward steps included (their bit is the forward bond's, read at the far end when
the bytes are built), so a step tests a bit of the cell it leaves; and, with bond
weights, one float64 plane per forward offset, read at the cell the bond starts from.
Given length-0 arrays, a kernel runs its loops without bonds. The BFS goes one step
further: its work array holds each unvisited cell's bond bits in the cell's own value
(:func:`code_bonds`), so a step reads nothing but the cell it may claim.

Numba does not inline a helper ``@njit`` function into code that runs inside a
``prange`` loop, so the hot loops of the traversals spell out what a helper would do.

The fill and copy of the padded arrays run in kernel calls of about ``_budget._BUDGET``
cells (see "Interrupts" in :mod:`catalytic.kernels.cpu._budget`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu._budget import _INT32_LIMIT, _frozen, _segments
from catalytic.kernels.cpu.neighbors import c_strides

UNVISITED = -1
WALL = -2
PORTAL = -3

# ---------------------------------------------------------------------------------------
# Geometry of the padded index space (host side)
# ---------------------------------------------------------------------------------------


class Plan(NamedTuple):
    """Lattice geometry as the traversal kernels need it (built by :func:`make_plan`)."""

    shape: np.ndarray  # int64[d]
    strides: np.ndarray  # int64[d], real C-order strides
    periodic: np.ndarray  # uint8[d]
    offs: np.ndarray  # int64[k, d], stencil without offsets that can never land
    noffs: np.ndarray  # int64[k, d], the same stencil negated (in-neighbours)
    r: np.ndarray  # int64[d], halo width per axis (0 when not padded)
    pshape: np.ndarray  # int64[d]
    pstrides: np.ndarray  # int64[d]
    foff: np.ndarray  # int64[k], flat padded offset of each stencil entry
    nfoff: np.ndarray  # int64[k], the same negated
    n: int  # real number of sites
    psize: int  # number of padded cells
    n_open: int
    padded: bool
    mode: int  # 0 unpadded, 1 padded without portals, 2 padded with portals
    itype: type  # np.int32 or np.int64: enough for any padded index or distance
    open_: np.ndarray  # uint8[n] or length 0


def make_plan(shape, periodic, offsets, open_) -> Plan:
    """Choose the padded index space for a lattice.

    Parameters
    ----------
    shape, periodic, offsets, open_
        The lattice, as in ``neighbors.py``.

    Returns
    -------
    Plan
        Halo widths, padded shape and strides, flat offsets, index dtype.

    Notes
    -----
    O(k d) plus one O(n) pass to count the open sites.
    """
    shape = np.ascontiguousarray(shape, dtype=np.int64).reshape(-1)
    d = shape.shape[0]
    periodic = np.ascontiguousarray(periodic, dtype=np.uint8).reshape(d)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1, d)
    open_ = _frozen(np.ascontiguousarray(open_, dtype=np.uint8).reshape(-1))
    n = int(np.prod(shape, dtype=object))
    # An offset that leaves an open axis from every site never gives a neighbour.
    never = ((np.abs(offsets) >= shape) & (periodic == 0)).any(axis=1)
    offs = np.ascontiguousarray(offsets[~never])
    if offs.shape[0]:
        r = np.abs(offs).max(axis=0).astype(np.int64)
    else:
        r = np.zeros(d, dtype=np.int64)
    pshape = shape + 2 * r
    psize = int(np.prod(pshape, dtype=object))
    padded = psize <= 2 * n + 65536
    if not padded:
        r = np.zeros(d, dtype=np.int64)
        pshape = shape.copy()
        psize = n
    pstrides = c_strides(pshape)
    foff = np.ascontiguousarray(offs @ pstrides, dtype=np.int64)
    n_open = int(np.count_nonzero(open_)) if open_.shape[0] else n
    itype = np.int32 if psize <= _INT32_LIMIT else np.int64
    mode = 0 if not padded else (2 if bool(((periodic != 0) & (r > 0)).any()) else 1)
    return Plan(
        shape, c_strides(shape), periodic, offs, np.ascontiguousarray(-offs), r, pshape,
        pstrides, foff, np.ascontiguousarray(-foff), n, psize, n_open, padded, mode, itype,
        open_,
    )


def _to_padded(idx, g: Plan) -> np.ndarray:
    """Padded indices of real flat indices ``idx`` (vectorised, O(len(idx) d))."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    coords = (idx[:, None] // g.strides) % g.shape
    return ((coords + g.r) * g.pstrides).sum(axis=1).astype(np.int64)


def _to_real(pidx, g: Plan) -> np.ndarray:
    """Real flat indices of interior padded indices ``pidx`` (vectorised)."""
    pidx = np.asarray(pidx, dtype=np.int64).reshape(-1)
    coords = (pidx[:, None] // g.pstrides) % g.pshape - g.r
    return (coords * g.strides).sum(axis=1).astype(np.int64)


# ---------------------------------------------------------------------------------------
# Padded-space kernels shared by the traversals
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _fill_seg(dst, src_open, src_vals, has_mask, has_vals, open_val, wall_val):
    """Fill one interior row segment: open cells get ``src_vals[x]`` (or ``open_val``),
    blocked cells ``wall_val``."""
    if has_mask:
        if has_vals:
            for x in range(dst.shape[0]):
                dst[x] = src_vals[x] if src_open[x] != 0 else wall_val
        else:
            for x in range(dst.shape[0]):
                dst[x] = open_val if src_open[x] != 0 else wall_val
    elif has_vals:
        for x in range(dst.shape[0]):
            dst[x] = src_vals[x]
    else:
        for x in range(dst.shape[0]):
            dst[x] = open_val


@njit(cache=True, nogil=True, inline="always")
def _row_frame(out, prow, x0, x1, wall_val, portal_val, shape, periodic, r, pshape):
    """Fill what cells [x0, x1) of padded row ``prow`` take without the lattice's data:
    all of them in a wall or portal row, else the halo cells of the last axis. Returns
    ``(a, b, ib)``: the interior cells [a, b) left to fill (none when ``a >= b``) and
    the flat site of cell ``a``."""
    d = shape.shape[0]
    PL = pshape[d - 1]
    L = shape[d - 1]
    rL = r[d - 1]
    # a leading coordinate in the halo of an open axis: a wall row; of a periodic one:
    # a portal row; else the row's index among the lattice's rows
    rem = prow
    wall = False
    portal = False
    realrow = 0
    mult = 1
    for ax in range(d - 2, -1, -1):
        c = rem % pshape[ax]
        rem //= pshape[ax]
        c -= r[ax]
        if c < 0 or c >= shape[ax]:
            if periodic[ax]:
                portal = True
            else:
                wall = True
        else:
            realrow += c * mult
        mult *= shape[ax]
    base = prow * PL
    row = out[base:base + PL]
    if wall:
        row[x0:x1] = wall_val
        return 0, 0, 0
    halo_val = portal_val if periodic[d - 1] else wall_val
    a = max(x0, rL)  # the interior part [a, b) of the segment
    b = min(x1, rL + L)
    row[x0:min(x1, rL)] = halo_val
    row[max(x0, rL + L):x1] = halo_val
    if a >= b:
        return 0, 0, 0
    if portal:
        row[a:b] = portal_val
        return 0, 0, 0
    return a, b, realrow * L + a - rL


@njit(cache=True, nogil=True)
def _fill_row(out, prow, x0, x1, vals, open_, open_val, wall_val, portal_val, shape, periodic,
              r, pshape):
    """Fill cells [x0, x1) of padded row ``prow`` (see :func:`_fill_padded`)."""
    a, b, ib = _row_frame(out, prow, x0, x1, wall_val, portal_val, shape, periodic, r,
                          pshape)
    if a >= b:
        return
    base = prow * pshape[pshape.shape[0] - 1]
    row = out[base:base + pshape[pshape.shape[0] - 1]]
    n = b - a
    has_mask = open_.shape[0] != 0
    has_vals = vals.shape[0] != 0
    _fill_seg(row[a:b], open_[ib:ib + n] if has_mask else open_,
              vals[ib:ib + n] if has_vals else vals, has_mask, has_vals, open_val, wall_val)


@njit(cache=True, nogil=True, parallel=True)
def _fill_padded(out, vals, open_, open_val, wall_val, portal_val, shape, periodic, r, pshape,
                 seg, lo, hi):
    """Write the padded cell classes of segments [lo, hi) into ``out`` (length
    prod(pshape)); every padded row is cut into segments of ``seg`` cells (one segment
    per row unless rows are longer).

    Interior open cells get ``vals[i]`` (or ``open_val`` when ``vals`` is empty), blocked
    cells and halo cells outside an open axis get ``wall_val``, halo cells outside only
    periodic axes get ``portal_val``. Parallel over segments. O(cells).
    """
    PL = pshape[shape.shape[0] - 1]
    spr = (PL + seg - 1) // seg
    # one prange loop and one argument type per call site: each further one compiles again
    for ss in prange(lo, hi):
        s = np.int64(ss)
        prow = s // spr
        x0 = (s - prow * spr) * seg
        _fill_row(out, prow, x0, min(PL, x0 + seg), vals, open_, open_val, wall_val,
                  portal_val, shape, periodic, r, pshape)


@njit(cache=True, nogil=True)
def _copy_seg(dst, src, clip):
    if clip:
        for x in range(dst.shape[0]):
            v = src[x]
            dst[x] = v if v >= 0 else -1
    else:
        for x in range(dst.shape[0]):
            dst[x] = src[x]


@njit(cache=True, nogil=True)
def _unpad_row(src, dst, row, x0, x1, shape, r, pshape, clip):
    d = shape.shape[0]
    L = shape[d - 1]
    rem = row
    prow = 0
    pmult = 1
    for a in range(d - 2, -1, -1):
        c = rem % shape[a]
        rem //= shape[a]
        prow += (c + r[a]) * pmult
        pmult *= pshape[a]
    pb = prow * pshape[d - 1] + r[d - 1]
    ib = row * L
    _copy_seg(dst[ib + x0:ib + x1], src[pb + x0:pb + x1], clip)


@njit(cache=True, nogil=True, parallel=True)
def _unpad(src, dst, shape, r, pshape, clip, seg, lo, hi):
    """Copy the interior of padded ``src`` into real-space ``dst``, segments [lo, hi) of
    it: every real row is cut into segments of ``seg`` sites (one segment per row unless
    rows are longer). With ``clip`` every negative value becomes -1. Parallel over
    segments. O(sites)."""
    L = shape[shape.shape[0] - 1]
    spr = (L + seg - 1) // seg
    for ss in prange(lo, hi):
        s = np.int64(ss)
        row = s // spr
        x0 = (s - row * spr) * seg
        _unpad_row(src, dst, row, x0, min(L, x0 + seg), shape, r, pshape, clip)


@njit(cache=True, nogil=True)
def _resolve(p, k, offs, r, shape, pstrides, periodic):
    """Padded index of the k-th stencil neighbour of padded cell ``p`` computed from
    coordinates (wrapping periodic axes), or -1 when it leaves an open axis.
    O(d) divisions; used at portals and when the lattice is not padded."""
    d = shape.shape[0]
    q = 0
    rem = p
    for a in range(d):
        c = rem // pstrides[a]
        rem -= c * pstrides[a]
        c = c - r[a] + offs[k, a]
        n_a = shape[a]
        if c < 0 or c >= n_a:
            if periodic[a]:
                c %= n_a
            else:
                return -1
        q += (c + r[a]) * pstrides[a]
    return q


@njit(cache=True, nogil=True)
def _step(cls, p, k, foff, offs, r, shape, pstrides, periodic, mode):
    """Cell reached from padded cell ``p`` by stencil entry ``k``: a padded index (which
    may hold ``WALL``) or -1 when the step leaves an open axis. ``cls`` is the array
    whose halo cells are marked ``PORTAL``; ``mode`` as in :class:`Plan`. For the cold
    paths (walk-backs); the hot loops spell this out."""
    if mode != 0:
        q = p + foff[k]
        if mode == 2 and cls[q] == PORTAL:
            q = _resolve(p, k, offs, r, shape, pstrides, periodic)
        return q
    return _resolve(p, k, offs, r, shape, pstrides, periodic)


# ---------------------------------------------------------------------------------------
# The padded arrays (host side)
# ---------------------------------------------------------------------------------------


def _interior(a, g: Plan) -> np.ndarray:
    """The real sites of the flat padded array ``a``, as a d-dimensional view."""
    return a.reshape(tuple(g.pshape))[tuple(slice(r, r + s) for r, s in zip(g.r, g.shape))]


def _fill_small(out, vals, g: Plan, open_val, wall_val, portal_val):
    """What :func:`_fill_padded` writes, in NumPy: every cell a portal, then the halo
    slabs of the open axes walls (a cell outside an open axis is a wall whatever the
    other axes say), then the real sites. Single-threaded; for small lattices."""
    d = g.shape.shape[0]
    full = out.reshape(tuple(g.pshape))
    full[...] = portal_val
    for a in range(d):
        ra = int(g.r[a])
        if ra and not g.periodic[a]:
            cut = [slice(None)] * d
            cut[a] = slice(0, ra)
            full[tuple(cut)] = wall_val
            cut[a] = slice(ra + int(g.shape[a]), None)
            full[tuple(cut)] = wall_val
    inner = _interior(out, g)
    shape = tuple(g.shape)
    has_mask = g.open_.shape[0] != 0
    if vals.shape[0]:
        np.copyto(inner, vals.reshape(shape))
        if has_mask:
            np.copyto(inner, wall_val, where=g.open_.reshape(shape) == 0)
    elif has_mask:
        # (not wall_val + open * (open_val - wall_val): that is NaN for infinite values)
        t = out.dtype.type
        inner[...] = t(open_val)
        np.copyto(inner, t(wall_val), where=g.open_.reshape(shape) == 0)
    else:
        inner[...] = open_val


def _unpad_small(src, dst, g: Plan, clip):
    """What :func:`_unpad` writes, in NumPy (``dst`` contiguous). Single-threaded."""
    dst_nd = dst.reshape(tuple(g.shape))
    np.copyto(dst_nd, _interior(src, g))
    if clip:
        np.maximum(dst, -1, out=dst)


# Below this many padded cells NumPy writes and reads back the layout, so a first call
# compiles neither :func:`_fill_padded` nor :func:`_unpad` (reports/kernel_tuning.md).
_SMALL_LAYOUT = 1 << 19


def _fill_classes(out, vals, g: Plan, open_val, wall_val, portal_val):
    """:func:`_fill_padded` over the whole padded array, in calls of about ``_BUDGET``
    cells (NumPy below ``_SMALL_LAYOUT`` cells)."""
    if g.psize < _SMALL_LAYOUT:
        return _fill_small(out, vals, g, open_val, wall_val, portal_val)
    PL = int(g.pshape[-1])
    seg, calls = _segments(out.shape[0] // PL if PL else 0, PL)
    vals = _frozen(vals)
    for a, b in calls:
        _fill_padded(out, vals, g.open_, open_val, wall_val, portal_val, g.shape, g.periodic,
                     g.r, g.pshape, seg, a, b)


def _unpad_all(src, dst, g: Plan, clip):
    """:func:`_unpad` over the whole lattice, in calls of about ``_BUDGET`` sites (NumPy
    below ``_SMALL_LAYOUT`` padded cells)."""
    if g.psize < _SMALL_LAYOUT:
        return _unpad_small(src, dst, g, clip)
    L = int(g.shape[-1])
    seg, calls = _segments(g.n // L if L else 0, L)
    for a, b in calls:
        _unpad(src, dst, g.shape, g.r, g.pshape, clip, seg, a, b)


def _work_array(g: Plan, open_val=UNVISITED) -> np.ndarray:
    work = np.empty(g.psize, dtype=g.itype)
    empty = np.empty(0, dtype=g.itype)
    t = g.itype
    _fill_classes(work, empty, g, t(open_val), t(WALL), t(PORTAL))
    return work


class BondCells(NamedTuple):
    """The bonds of a lattice in the padded index space of a :class:`Plan` (built by
    :func:`bond_cells`); the traversal kernels take its fields as arguments.

    ``bits``   uint8[psize * nw]: bit ``k & 7`` of byte ``p * nw + (k >> 3)`` is set
               when the bond that stencil step ``k`` of the plan (``offs[k]``) crosses
               from cell ``p`` is open; 0 on halo cells. Length 0: every bond open.
    ``nw``     bytes per cell, ``ceil(k / 8)``.
    ``bw``     float64[kf * psize]: the weight of forward bond ``s`` that starts at
               cell ``p`` at ``s * psize + p`` (0 on halo cells). Length 0: no bond
               weights.
    ``slot``   int64[k]: the forward offset ``s`` step ``k`` crosses a bond of.
    ``fwd``    uint8[k]: 1 when step ``k`` is forward (its bond starts at the cell
               stepped from), 0 when backward (it starts at the cell stepped to).
    """

    bits: np.ndarray
    nw: int
    bw: np.ndarray
    slot: np.ndarray
    fwd: np.ndarray


NO_BONDS = BondCells(np.zeros(0, dtype=np.uint8), 1, np.zeros(0, dtype=np.float64),
                     np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8))


@njit(cache=True, nogil=True, parallel=True)
def _bond_bytes(pbits, planes, slot, fwd, offs, shape, periodic, r, pstrides, nw, coords, lo,
                hi, ch):
    """Real rows [lo, hi) of :func:`bond_cells`' bytes (``pbits`` zeroed): bit ``k`` of
    real site ``i``'s cell is ``planes[slot[k], i]`` when step ``k`` is forward, else
    that of the site the step reaches (0 when it leaves an open axis). ``planes``:
    uint8[kf, n] of 0/1. Parallel over chunks of ``ch`` rows, chunk j keeping the
    coordinates of its row in ``coords[j]`` (stepped like an odometer, no division per
    row). O((hi - lo) L k)."""
    d = shape.shape[0]
    L = shape[d - 1]
    K = offs.shape[0]
    nch = (hi - lo + ch - 1) // ch
    for jj in prange(nch):
        j = np.int64(jj)
        c = coords[j]
        row0 = lo + j * ch
        rem = row0
        for a in range(d - 2, -1, -1):
            c[a] = rem % shape[a]
            rem //= shape[a]
        for row in range(row0, min(hi, row0 + ch)):
            pb = r[d - 1]  # the padded cell of (row, 0)
            for a in range(d - 1):
                pb += (c[a] + r[a]) * pstrides[a]
            out = pbits[pb * nw:(pb + L) * nw]
            for k in range(K):
                pl = planes[slot[k]]
                nb = row * L
                dx = 0
                if fwd[k] == 0:
                    # the row the step reaches, wrapped on periodic axes
                    nb = 0
                    ok = True
                    for a in range(d - 1):
                        y = c[a] + offs[k, a]
                        if y < 0 or y >= shape[a]:
                            if periodic[a]:
                                y %= shape[a]
                            else:
                                ok = False
                        nb = nb * shape[a] + y
                    if not ok:
                        continue
                    nb *= L
                    dx = offs[k, d - 1]
                w = k >> 3
                sh = k & 7
                x0 = min(max(-dx, 0), L)  # [x0, x1): x + dx stays in the row
                x1 = max(min(L - dx, L), x0)
                if nw == 1:
                    src = pl[nb + x0 + dx:nb + x1 + dx]
                    dst = out[x0:x1]
                    for x in range(dst.shape[0]):
                        dst[x] |= src[x] << sh
                else:
                    for x in range(x0, x1):
                        out[x * nw + w] |= pl[nb + x + dx] << sh
                if periodic[d - 1]:
                    for x in range(0, x0):
                        out[x * nw + w] |= pl[nb + (x + dx) % L] << sh
                    for x in range(x1, L):
                        out[x * nw + w] |= pl[nb + (x + dx) % L] << sh
            for a in range(d - 2, -1, -1):  # the next row
                c[a] += 1
                if c[a] < shape[a]:
                    break
                c[a] = 0


def bond_cells(g: Plan, offsets, bond_slot, bits, words, bw) -> BondCells:
    """The bonds of ``Geometry.bond_args()`` laid out for plan ``g`` (whose ``offs`` are
    ``offsets`` less the rows that never land).

    A backward step's bit is the forward bond's bit read at the site the step
    reaches, so a kernel tests every step of a cell in the bytes of that cell. Halo
    cells get no bits, nor does a step that leaves an open axis; blocked sites get
    theirs (the bytes do not depend on the mask). O(k n) time, in kernel calls of
    about ``_BUDGET`` steps; ceil(k/8) bytes per padded cell, plus 8 kf with bond
    weights.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, g.shape.shape[0])
    where = {tuple(r): i for i, r in enumerate(offsets.tolist())}
    sl = np.asarray(bond_slot, dtype=np.int64)
    plan_slot = np.array([sl[where[tuple(r)]] for r in g.offs.tolist()], dtype=np.int64)
    K = plan_slot.shape[0]
    slot = np.where(plan_slot >= 0, plan_slot, ~plan_slot).astype(np.int64)
    fwd = (plan_slot >= 0).astype(np.uint8)
    nomask = g._replace(open_=_frozen(np.zeros(0, dtype=np.uint8)))
    n = g.n
    pbits = NO_BONDS.bits
    nw = max(1, (K + 7) // 8)
    if np.asarray(bits).shape[0] and K:
        raw = np.ascontiguousarray(bits, dtype="<u4").view(np.uint8).reshape(
            np.asarray(bits).shape[0] // words, -1)
        planes = np.unpackbits(raw, axis=1, count=n, bitorder="little")
        pbits = np.zeros(g.psize * nw, dtype=np.uint8)
        L = int(g.shape[-1])
        rows = n // L if L else 0
        step = max(1, _budget._BUDGET // max(L * K, 1))
        ch = max(1, min(64, step // 2))  # rows per chunk: two chunks a call at least
        coords = np.empty((-(-step // ch), g.shape.shape[0]), dtype=np.int64)
        for a in range(0, rows, step):
            _bond_bytes(pbits, planes, slot, fwd, g.offs, g.shape, g.periodic, g.r,
                        g.pstrides, np.int64(nw), coords, np.int64(a),
                        np.int64(min(rows, a + step)), np.int64(ch))
    pbw = NO_BONDS.bw
    bw = np.asarray(bw, dtype=np.float64)
    if bw.shape[0]:
        kf = bw.shape[0] // max(n, 1)
        pbw = np.empty(kf * g.psize, dtype=np.float64)
        for s in range(kf):
            _fill_classes(pbw[s * g.psize:(s + 1) * g.psize],
                          np.ascontiguousarray(bw[s * n:(s + 1) * n]), nomask, 0.0, 0.0, 0.0)
    return BondCells(pbits, nw, pbw, slot, fwd)


def plan_bonds(g: Plan, offsets, bonds, cache=None) -> BondCells:
    """:func:`bond_cells` of ``bonds`` (``Geometry.bond_args()``, or None: no bonds) for
    plan ``g``, kept in ``cache`` (a lattice's backend cache, or None) under
    ``"padded_bonds"``: the cells depend on the geometry only, never on a plan's mask."""
    if bonds is None:
        return NO_BONDS
    cells = None if cache is None else cache.get("padded_bonds")
    if cells is None:
        cells = bond_cells(g, offsets, *bonds)
        if cache is not None:
            cache["padded_bonds"] = cells
    return cells


@njit(cache=True, nogil=True)
def _fill_coded_serial(out, bits, nw, open_, sign, shape, periodic, r, pshape, seg, lo, hi):
    """:func:`_fill_coded` on this thread alone (small arrays: no parallel launch)."""
    PL = pshape[shape.shape[0] - 1]
    spr = (PL + seg - 1) // seg
    for s in range(lo, hi):
        prow = s // spr
        x0 = (s - prow * spr) * seg
        _fill_coded_row(out, prow, x0, min(PL, x0 + seg), bits, nw, open_, sign, shape,
                        periodic, r, pshape)


def coded_steps(g: Plan) -> int:
    """The most stencil steps a bond-coded work array of plan ``g`` holds
    (:func:`code_bonds`): 30 with int32 cells, 62 with int64."""
    return 30 if g.itype == np.int32 else 62


@njit(cache=True, nogil=True)
def _code_seg(dst, bits, open_, nw, sign):
    """Interior cells of :func:`_fill_coded_row`: ``sign`` with the cell's bond bytes
    where the site is open (``open_`` length 0: all are), ``sign`` where it is not."""
    has_mask = open_.shape[0] != 0
    # branch-free (the bytes masked, not a conditional load): LLVM vectorises it
    if nw == 1:
        if has_mask:
            for x in range(dst.shape[0]):
                dst[x] = sign | (np.int64(bits[x]) & -np.int64(open_[x] != 0))
        else:
            for x in range(dst.shape[0]):
                dst[x] = sign | np.int64(bits[x])
        return
    for x in range(dst.shape[0]):
        c = np.int64(0)
        for w in range(nw):
            c |= np.int64(bits[x * nw + w]) << (8 * w)
        if has_mask:
            c &= -np.int64(open_[x] != 0)
        dst[x] = sign | c


@njit(cache=True, nogil=True)
def _fill_coded_row(out, prow, x0, x1, bits, nw, open_, sign, shape, periodic, r, pshape):
    """Cells [x0, x1) of padded row ``prow`` of :func:`code_bonds` (the classes of
    :func:`_fill_row`, open cells coded)."""
    a, b, ib = _row_frame(out, prow, x0, x1, sign, PORTAL, shape, periodic, r, pshape)
    if a >= b:
        return
    base = prow * pshape[pshape.shape[0] - 1]
    row = out[base:base + pshape[pshape.shape[0] - 1]]
    _code_seg(row[a:b], bits[(base + a) * nw:(base + b) * nw],
              open_[ib:ib + b - a] if open_.shape[0] != 0 else open_, nw, sign)


@njit(cache=True, nogil=True, parallel=True)
def _fill_coded(out, bits, nw, open_, sign, shape, periodic, r, pshape, seg, lo, hi):
    """Segments [lo, hi) of :func:`code_bonds`, cut as in :func:`_fill_padded`.
    Parallel over segments. O(cells)."""
    PL = pshape[shape.shape[0] - 1]
    spr = (PL + seg - 1) // seg
    for ss in prange(lo, hi):
        s = np.int64(ss)
        prow = s // spr
        x0 = (s - prow * spr) * seg
        _fill_coded_row(out, prow, x0, min(PL, x0 + seg), bits, nw, open_, sign, shape,
                        periodic, r, pshape)


def code_bonds(g: Plan, cells: BondCells):
    """A bond-coded work array for plan ``g``: the BFS claim test reads the bonds in the
    cell it claims, so a step costs no read besides the cell's own.

    Unvisited open cell ``q`` holds ``sign | b`` (``sign`` the least value of
    ``g.itype``), ``b`` the bond bits of ``q`` (bit ``k`` set when step ``k`` from
    ``q`` crosses an open bond); blocked cells and walls hold ``sign``; portals
    ``PORTAL``. Every code is below ``-2**30`` (K <= :func:`coded_steps`), so it is
    neither a distance nor ``UNVISITED``, ``WALL`` or ``PORTAL``. A step ``p -> q``
    along ``-offs[k]`` crosses the bond of step ``k`` from ``q``, so it is open iff
    bit ``k`` of ``q``'s code is set; distances overwrite the codes.

    Returns None when ``cells`` has no bond bits or the plan has more steps than a
    code holds. O(psize), in calls of about ``_budget._BUDGET`` cells, on one thread
    below ``_SMALL_LAYOUT`` cells.
    """
    K = g.offs.shape[0]
    if cells.bits.shape[0] == 0 or K > coded_steps(g):
        return None
    t = g.itype
    work = np.empty(g.psize, dtype=t)
    PL = int(g.pshape[-1])
    seg, calls = _segments(work.shape[0] // PL if PL else 0, PL)
    sign = np.int64(np.iinfo(t).min)
    fill = _fill_coded_serial if g.psize < _SMALL_LAYOUT else _fill_coded
    for a, b in calls:
        fill(work, cells.bits, np.int64(cells.nw), g.open_, sign, g.shape, g.periodic, g.r,
             g.pshape, seg, a, b)
    return work


def _geo(g: Plan):
    return (g.foff, g.offs, g.r, g.shape, g.pstrides, g.periodic, g.mode)


def _ngeo(g: Plan):
    return (g.nfoff, g.noffs, g.r, g.shape, g.pstrides, g.periodic, g.mode)
