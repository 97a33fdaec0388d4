"""Pure lattice geometry: shape, periodic axes, stencil, mask, weights.

Nothing here stores an edge list. Neighbours come from index arithmetic; the only arrays
held are the ones the user gave (mask, weights, bonds packed one bit per bond, bond
weights) and the tiny stencil tables.

The neighbour set of a site ``i`` is: for each stencil offset, the displaced coordinates,
wrapped on periodic axes, dropped when they leave an open axis or land on a blocked
site or through a closed bond; then duplicates and ``i`` itself removed (this only
happens when a periodic axis is shorter than twice the stencil's reach). Every backend
uses this definition.

Bonds
-----
A bond joins site ``i`` to ``i + o`` for a *forward* offset ``o`` (a stencil row whose
first non-zero component is positive; :attr:`Geometry.bond_offsets`, in stencil order),
wrapped across a periodic seam; it belongs to the site it starts from. ``bonds[s, *c]``
is the bond from the site at coordinates ``c`` along forward offset ``s``; an entry whose
bond would leave an open axis is ignored. A bond is usable when it is open and both its
sites exist. Crossing a bond costs its weight, and entering a site its site weight: a
step ``u -> v`` costs ``bond_weight(u, v) + weights[v]``.

Where a periodic axis is so short that two bonds join the same pair of sites (length 2,
or length <= 2*reach), the graph operations see one edge, present when any of them is
usable and weighing the least of the usable ones; a bond from a site to itself (a
periodic axis of length 1) is no edge. Wrapping and bond percolation count every bond.
"""

from __future__ import annotations

import itertools
import math
import numbers
import numpy as np

from catalytic.kernels.cpu.neighbors import c_strides, step_lengths

_INT64_MAX = np.iinfo(np.int64).max
#: the most the weights may sum to. A path enters each site at most once, so its exact
#: cost is at most the exact sum; the float64 sums the searches compute, and NumPy's sum
#: of the weights, are within a factor (1 + 2**-53)**n < 1.01 of exact ones for n < 2**46
#: sites. So below half the largest float64 every path cost, and every sum a search tries
#: (a path cost plus one weight), stays finite: inf only ever means unreachable.
WEIGHT_SUM_LIMIT = 2.0**1022
_NO_BITS = np.zeros(0, dtype=np.uint32)
_NO_WEIGHTS = np.zeros(0, dtype=np.float64)
_NO_BITS.setflags(write=False)
_NO_WEIGHTS.setflags(write=False)
STENCILS = ("von_neumann", "moore")


def _as_shape(shape, *, allow_empty: bool = False) -> tuple[int, ...]:
    """``shape`` as a tuple of Python ints; with ``allow_empty`` an axis may have 0 sites
    (a zero-size lattice, as NumPy and SciPy allow a zero-size image)."""
    if isinstance(shape, (numbers.Integral, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        items = list(shape)
    except TypeError:
        raise ValueError(f"shape must be a sequence of positive integers, got {shape!r}") from None
    if len(items) == 0:
        raise ValueError("shape must have at least one axis, got ()")
    out = []
    for s in items:
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (numbers.Integral, np.integer)):
            if isinstance(s, (float, np.floating)) and float(s).is_integer() and s > 0:
                raise ValueError(
                    f"shape sizes must be integers, got {s!r} in {tuple(items)!r}; "
                    f"use {int(s)}"
                )
            raise ValueError(f"shape sizes must be positive integers, got {s!r} in {tuple(items)!r}")
        if s < 0 or (s == 0 and not allow_empty):
            zero = " (or 0 for an empty axis)" if allow_empty else ""
            raise ValueError(
                f"shape sizes must be positive{zero}, got {int(s)} in {tuple(items)!r}"
            )
        out.append(int(s))
    n = math.prod(out)
    if n > _INT64_MAX:
        raise ValueError(
            f"shape {tuple(out)} has {n} sites, more than int64 can index ({_INT64_MAX})"
        )
    return tuple(out)


def _as_periodic(periodic, d: int) -> tuple[bool, ...]:
    if isinstance(periodic, (bool, np.bool_)):
        return (bool(periodic),) * d
    try:
        items = list(periodic)
    except TypeError:
        raise ValueError(
            f"periodic must be a bool or a sequence of {d} bools, got {periodic!r}"
        ) from None
    if len(items) != d:
        raise ValueError(f"periodic has {len(items)} entries for a {d}-D lattice: {periodic!r}")
    for p in items:
        if not isinstance(p, (bool, np.bool_)):
            raise ValueError(f"periodic entries must be bools, got {p!r} in {periodic!r}")
    return tuple(bool(p) for p in items)


def stencil_offsets(stencil, d: int) -> tuple[str, np.ndarray]:
    """Return ``(name, offsets)`` for a stencil name or a user array of integer offsets.

    Examples
    --------
    >>> name, off = stencil_offsets("von_neumann", 2)
    >>> off.tolist()
    [[-1, 0], [1, 0], [0, -1], [0, 1]]
    >>> stencil_offsets("moore", 3)[1].shape
    (26, 3)
    >>> stencil_offsets(np.zeros((0, 2), int), 2)[1].shape  # no neighbours at all
    (0, 2)
    """
    if isinstance(stencil, str):
        if stencil == "von_neumann":
            off = np.zeros((2 * d, d), dtype=np.int64)
            for a in range(d):
                off[2 * a, a] = -1
                off[2 * a + 1, a] = 1
            return stencil, off
        if stencil == "moore":
            rows = [r for r in itertools.product((-1, 0, 1), repeat=d) if any(r)]
            return stencil, np.array(rows, dtype=np.int64).reshape(-1, d)
        raise ValueError(f"unknown stencil {stencil!r}; use one of {STENCILS} or an array of offsets")
    arr = np.asarray(stencil)
    if arr.size == 0 and arr.ndim <= 2 and (arr.ndim < 2 or arr.shape[1] == d):
        # no offsets (SciPy's structuring element with only its centre): every site alone
        return "custom", np.zeros((0, d), dtype=np.int64)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"stencil offsets must be integers, got dtype {arr.dtype}")
    if arr.ndim == 1 and d == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] != d:
        raise ValueError(
            f"stencil offsets must have shape (k, {d}) for a {d}-D lattice, got {arr.shape}"
        )
    if np.abs(arr.astype(object)).max() >= 2**31:
        raise ValueError(f"stencil offsets must be smaller than 2**31 in magnitude, got {arr.tolist()}")
    arr = arr.astype(np.int64)
    if np.any(np.all(arr == 0, axis=1)):
        raise ValueError("stencil offsets must not contain the zero offset")
    rows = {tuple(r) for r in arr.tolist()}
    if len(rows) != arr.shape[0]:
        raise ValueError("stencil offsets contain duplicate rows")
    missing = [r for r in rows if tuple(-x for x in r) not in rows]
    if missing:
        raise ValueError(
            f"stencil must be symmetric (neighbourhood is undirected): offset(s) "
            f"{sorted(missing)[:3]} lack their negation; add them"
        )
    return "custom", arr.copy()


class Geometry:
    """Validated description of an n-D lattice. Pure: no algorithm lives here.

    Parameters
    ----------
    shape : int or sequence of int
        Sites per axis, each >= 0 (an axis of 0 sites makes a lattice of no sites, as a
        zero-size image: no component, nothing to index).
    periodic : bool or sequence of bool
        Whether each axis wraps.
    stencil : {"von_neumann", "moore"} or array_like of shape (k, d)
        Neighbour offsets. A user array must be integer, symmetric and free of zero rows;
        it may be empty (k = 0, SciPy's structuring element with only its centre): then
        no site has a neighbour and each is its own component.
    mask : bool ndarray of ``shape``, optional
        True where a site exists. Copied; the copy (``mask``, and its flat uint8 view
        ``open_flat``) is read-only, as device copies of it are cached.
    weights : real ndarray of ``shape``, optional
        Cost of entering each site; finite and >= 0, summing to at most 2**1022 (about
        4.49e307, blocked sites included) so that no path cost overflows to inf, the
        value that means unreachable (see :data:`WEIGHT_SUM_LIMIT`). Copied as float64,
        read-only.
    bonds : bool ndarray of shape ``(len(bond_offsets),) + shape``, optional
        True where a bond is open (see *Bonds* in the module docstring for the layout);
        None opens every bond. Stored packed, one bit per bond (``bond_bits``).
    bond_weights : real ndarray of shape ``(len(bond_offsets),) + shape``, optional
        Cost of crossing each bond (the conductance of a Laplacian); finite and >= 0.
        With site weights, a path pays both; both together sum to at most 2**1022.
        Copied as float64 (``bond_weights``, flat, plane by plane), read-only.

    Examples
    --------
    >>> g = Geometry((3, 4), periodic=(True, False))
    >>> g.n_points, g.coords_to_index((1, 2)), g.index_to_coords(6).tolist()
    (12, 6, [1, 2])
    >>> sorted(g.get_neighbors(0).tolist())
    [1, 4, 8]

    A bond layout, one plane per forward offset, built with NumPy:

    >>> g.bond_offsets.tolist()
    [[1, 0], [0, 1]]
    >>> bonds = np.ones((2, 3, 4), dtype=bool)
    >>> bonds[1, 0, 0] = False          # close the bond (0, 0) -> (0, 1)
    >>> sorted(g.with_bonds(bonds).get_neighbors(0).tolist())
    [4, 8]
    """

    def __init__(self, shape, periodic=False, stencil="von_neumann", mask=None, weights=None,
                 bonds=None, bond_weights=None):
        self.shape = _as_shape(shape, allow_empty=True)
        d = len(self.shape)
        self.dimensions = d
        self.n_points = math.prod(self.shape)
        self.periodic = _as_periodic(periodic, d)
        self.stencil, self.offsets = stencil_offsets(stencil, d)
        self.strides = c_strides(self.shape)
        self.shape_arr = np.asarray(self.shape, dtype=np.int64)
        self.periodic_arr = np.asarray(self.periodic, dtype=np.uint8)
        reach = np.abs(self.offsets).max(axis=0, initial=0)
        # a periodic axis shorter than 2*reach+1 can fold two offsets (or one and the
        # site itself) onto the same site; kernels then de-duplicate
        self.dedupe = bool(
            any(p and self.shape[a] < 2 * reach[a] + 1 for a, p in enumerate(self.periodic))
        )
        self._bond_tables()
        self.mask = self._check_mask(mask)
        self.weights = self._check_weights(weights)
        self.bond_bits = self._check_bonds(bonds)
        self.bond_weights = self._check_bond_weights(bond_weights)
        #: Euclidean length of each stencil step (:meth:`with_spacing`), or None
        self.step_lengths = None
        if self.mask is None:
            self.open_flat = np.zeros(0, dtype=np.uint8)
        else:
            self.open_flat = self.mask.reshape(-1).view(np.uint8)
        # read-only: backends cache device copies of these, so an edit in place would
        # silently leave the copy stale (views of them are read-only too)
        for a in (self.mask, self.weights, self.open_flat, self.bond_bits, self.bond_weights):
            if a is not None:
                a.setflags(write=False)

    def _bond_tables(self):
        """``bond_offsets`` (the forward half of the stencil, in stencil order) and
        ``bond_slot``: per stencil row, ``s`` when it is forward offset ``s``, ``~s`` when
        it is the negation of forward offset ``s`` (the bond is then read at the far
        end, the site it starts from)."""
        off = self.offsets
        nz = off != 0
        first = off[np.arange(len(off)), nz.argmax(axis=1)] if len(off) else np.zeros(0, np.int64)
        forward = np.flatnonzero(first > 0)
        self.bond_offsets = off[forward]
        self.bond_offsets.setflags(write=False)
        where = {tuple(r): s for s, r in enumerate(self.bond_offsets.tolist())}
        slot = np.empty(len(off), dtype=np.int64)
        for k, r in enumerate(off.tolist()):
            s = where.get(tuple(r))
            slot[k] = s if s is not None else ~where[tuple(-x for x in r)]
        self.bond_slot = slot
        self.bond_slot.setflags(write=False)
        self.bond_words = (self.n_points + 31) // 32

    def with_mask(self, mask) -> "Geometry":
        """This geometry with another mask (None: every site open): the shape, stencil
        and derived tables are shared, not rebuilt; only the mask is checked and copied.
        Weights, bonds and bond weights are kept."""
        g = object.__new__(Geometry)
        g.__dict__.update(self.__dict__)
        g.mask = g._check_mask(mask)
        if g.mask is None:
            g.open_flat = np.zeros(0, dtype=np.uint8)
        else:
            g.open_flat = g.mask.reshape(-1).view(np.uint8)
            g.mask.setflags(write=False)
        return g

    def with_bonds(self, bonds) -> "Geometry":
        """This geometry with other bonds (None: every bond open), sharing everything
        else (tables, mask, weights, bond weights); only the bonds are checked and
        packed."""
        g = object.__new__(Geometry)
        g.__dict__.update(self.__dict__)
        g.bond_bits = g._check_bonds(bonds)
        if g.bond_bits is not None:
            g.bond_bits.setflags(write=False)
        return g

    def with_spacing(self, spacing) -> "Geometry":
        """This geometry with Euclidean step costs, sharing everything else: a step
        along stencil row ``k`` costs ``step_lengths[k]`` (the offset's length under
        ``spacing``, float64 (d,), finite and > 0, checked by the caller), times its
        cost without spacing (bond weight plus the weight of the site entered) where
        the geometry has weights: ``c = fl(length * fl(bond_weight + weights[v]))``,
        ``c = length`` without either kind of weight. None: hop counts and weights as
        they were."""
        g = object.__new__(Geometry)
        g.__dict__.update(self.__dict__)
        if spacing is None:
            g.step_lengths = None
            return g
        lengths = step_lengths(self.offsets, spacing)
        lengths.setflags(write=False)
        g.step_lengths = lengths
        return g

    def step_cost(self, k, bond, entered) -> np.ndarray:
        """The cost of steps along stencil rows ``k`` (int64) through bonds ``bond``
        (flat bond indices, as :meth:`displace` gives; unread without bond weights)
        into sites ``entered`` (flat): ``fl(bond_weight + weights[v])``, 0 for a kind of
        weight the geometry lacks, and with :meth:`with_spacing` times the step's length
        (the length alone without weights). float64, one per step."""
        entered = np.asarray(entered, dtype=np.int64)
        cost = np.zeros(entered.shape[0])
        if self.bond_weights is not None:
            cost = cost + self.bond_weights[bond]
        if self.weights is not None:
            cost = cost + self.weights.reshape(-1)[entered]
        if self.step_lengths is None:
            return cost
        if self.weights is None and self.bond_weights is None:
            return self.step_lengths[k].astype(np.float64)
        return self.step_lengths[k] * cost

    # -- validation -------------------------------------------------------------------
    def _bond_shape(self) -> tuple[int, ...]:
        return (len(self.bond_offsets),) + self.shape

    def _check_bonds(self, bonds):
        """``bonds`` packed little-endian into uint32 words, one row of
        ``bond_words`` words per forward offset (flat), or None."""
        if bonds is None:
            return None
        arr = np.asarray(bonds)
        if arr.dtype != np.bool_:
            raise TypeError(f"bonds must be a boolean array, got dtype {arr.dtype}")
        if arr.shape != self._bond_shape():
            raise ValueError(
                f"bonds has shape {arr.shape}; this lattice needs {self._bond_shape()}: one "
                f"plane per forward offset ({len(self.bond_offsets)}: "
                f"{self.bond_offsets.tolist()}) by the lattice shape {self.shape}"
            )
        kf, words = len(self.bond_offsets), self.bond_words
        flat = np.zeros((kf, words * 32), dtype=np.bool_)
        flat[:, : self.n_points] = arr.reshape(kf, -1)
        packed = np.packbits(flat, axis=1, bitorder="little")  # (kf, 4*words) bytes
        return np.ascontiguousarray(packed).view("<u4").astype(np.uint32).reshape(-1)

    def _check_bond_weights(self, bond_weights):
        if bond_weights is None:
            return None
        arr = np.asarray(bond_weights)
        if arr.dtype == np.bool_ or not (
            np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
        ):
            raise TypeError(f"bond_weights must be a real numeric array, got dtype {arr.dtype}")
        if arr.shape != self._bond_shape():
            raise ValueError(
                f"bond_weights has shape {arr.shape}; this lattice needs "
                f"{self._bond_shape()}: one plane per forward offset "
                f"({self.bond_offsets.tolist()}) by the lattice shape {self.shape}"
            )
        out = np.array(arr, dtype=np.float64, order="C", copy=True)
        for bad, what in ((np.isnan(out), "NaN"), (np.isinf(out), "inf"), (out < 0, "negative")):
            if bad.any():
                where = np.argwhere(bad)[0]
                raise ValueError(
                    f"bond_weights must be finite and >= 0, got {what} value "
                    f"{out[tuple(where)]} at (plane, *coords) {tuple(where.tolist())}; close "
                    "the bond with bonds= instead of an infinite weight"
                )
        with np.errstate(over="ignore"):
            total = float(out.sum()) + (0.0 if self.weights is None else float(self.weights.sum()))
        if total > WEIGHT_SUM_LIMIT:
            raise ValueError(
                f"bond_weights and weights sum to {total:.6g}, more than 2**1022 (about "
                "4.49e307): a path's cost could overflow float64 to inf, which means "
                "unreachable; scale the weights down"
            )
        return out.reshape(-1)

    def _check_mask(self, mask):
        if mask is None:
            return None
        arr = np.asarray(mask)
        if arr.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array, got dtype {arr.dtype}")
        if arr.shape != self.shape:
            raise ValueError(f"mask has shape {arr.shape}, lattice has shape {self.shape}")
        return np.array(arr, dtype=np.bool_, order="C", copy=True)

    def _check_weights(self, weights):
        if weights is None:
            return None
        arr = np.asarray(weights)
        if arr.dtype == np.bool_ or not (
            np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
        ):
            raise TypeError(f"weights must be a real numeric array, got dtype {arr.dtype}")
        if arr.shape != self.shape:
            raise ValueError(f"weights have shape {arr.shape}, lattice has shape {self.shape}")
        out = np.array(arr, dtype=np.float64, order="C", copy=True)
        if np.isnan(out).any():
            raise ValueError(f"weights contain NaN at {np.argwhere(np.isnan(out))[0].tolist()}")
        if np.isinf(out).any():
            raise ValueError(
                f"weights contain inf at {np.argwhere(np.isinf(out))[0].tolist()}; "
                "block the site with mask instead"
            )
        if (out < 0).any():
            where = np.argwhere(out < 0)[0]
            raise ValueError(
                f"weights must be >= 0, got {out[tuple(where)]} at {where.tolist()}"
            )
        with np.errstate(over="ignore"):
            total = float(out.sum())
        if total > WEIGHT_SUM_LIMIT:
            big = np.argwhere(out == out.max())[0].tolist()
            raise ValueError(
                f"weights sum to {total:.6g}, more than 2**1022 (about 4.49e307): a path's "
                "cost could overflow float64 to inf, which means unreachable; scale the "
                f"weights down (the largest, {out.max():.6g}, is at {big})"
            )
        return out

    # -- indexing -----------------------------------------------------------------------
    @staticmethod
    def _int64(values, what: str) -> np.ndarray:
        """``values`` as int64, refusing bools, non-integers and unsigned values that
        int64 cannot hold (naming the value, before it could wrap)."""
        arr = np.asarray(values)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{what} must be integers, got dtype {arr.dtype}")
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and arr.max() > _INT64_MAX:
            raise IndexError(f"{what} value {int(arr.max())} out of range")
        return arr.astype(np.int64, copy=False)

    def coords_to_index(self, coords):
        """Flat C-order index of ``coords`` (shape (d,) -> int, (k, d) -> (k,) int64).

        Raises ``IndexError`` for coordinates outside the lattice (no wrapping).
        """
        arr = self._int64(coords, "coordinates")
        d = self.dimensions
        if arr.shape[-1:] != (d,) or arr.ndim > 2:
            raise ValueError(f"coordinates must have shape ({d},) or (k, {d}), got {arr.shape}")
        bad = (arr < 0) | (arr >= self.shape_arr)
        if bad.any():
            row = arr if arr.ndim == 1 else arr[np.nonzero(bad.any(axis=1))[0][0]]
            raise IndexError(f"coordinates {row.tolist()} out of range for shape {self.shape}")
        flat = arr @ self.strides
        return int(flat) if arr.ndim == 1 else flat

    def index_to_coords(self, index):
        """Coordinates of a flat index (int -> (d,), (k,) -> (k, d)); IndexError if out of range."""
        arr = self._int64(index, "indices")
        if arr.ndim > 1:
            raise ValueError(f"indices must be a scalar or 1-D, got shape {arr.shape}")
        bad = (arr < 0) | (arr >= self.n_points)
        if np.any(bad):
            v = arr if arr.ndim == 0 else arr[np.nonzero(bad)[0][0]]
            raise IndexError(f"index {int(v)} out of range for {self.n_points} sites")
        coords = np.stack(np.unravel_index(arr, self.shape), axis=-1).astype(np.int64)
        return coords

    def site(self, site, what: str = "site") -> int:
        """Validate one site, given as a flat index (int) or its coordinates (a tuple,
        list or 1-D array of d ints); return its flat index.

        Raises ``IndexError`` when out of range or blocked, ``TypeError`` for bools and
        non-integers.
        """
        if isinstance(site, (bool, np.bool_)):
            raise TypeError(f"{what} must be an int index or coordinates, got {site!r}")
        if isinstance(site, (numbers.Integral, np.integer)):
            i = int(site)
            if not 0 <= i < self.n_points:
                raise IndexError(f"{what} index {i} out of range for {self.n_points} sites")
        else:
            arr = self._int64(site, what)
            if arr.ndim != 1:
                raise ValueError(
                    f"{what} must be a flat index or a coordinate tuple of length "
                    f"{self.dimensions}, got {site!r}"
                )
            i = self.coords_to_index(arr)
        if self.mask is not None and not self.open_flat[i]:
            raise IndexError(f"{what} {self._describe(i)} is blocked by the mask")
        return i

    def sites(self, sites, what: str = "sources") -> np.ndarray:
        """Validate many sites; return their sorted unique flat indices (int64).

        Accepted: an int (one flat index); a tuple of d ints (one site's coordinates); a
        1-D array or list of flat indices; a (k, d) array or list of coordinate rows. A
        plain list of exactly d ints on a d-D lattice (d > 1) is refused as ambiguous.
        """
        d = self.dimensions
        if isinstance(sites, (numbers.Integral, np.integer, bool, np.bool_)):
            return np.array([self.site(sites, what)], dtype=np.int64)
        if isinstance(sites, tuple) and len(sites) == d and all(
            isinstance(c, (numbers.Integral, np.integer)) for c in sites
        ):
            return np.array([self.site(sites, what)], dtype=np.int64)
        if (isinstance(sites, list) and d > 1 and len(sites) == d
                and all(isinstance(c, (numbers.Integral, np.integer)) for c in sites)):
            raise ValueError(
                f"{what}={sites!r} is ambiguous on a {d}-D lattice: pass a tuple "
                f"{tuple(sites)!r} for one site's coordinates, or np.array({sites!r}) for "
                "flat indices"
            )
        arr = np.asarray(sites)
        if arr.size == 0:
            raise ValueError(f"{what} must name at least one site")
        arr = self._int64(arr, what)
        if arr.ndim == 2:
            flat = self.coords_to_index(arr)
        elif arr.ndim <= 1:
            flat = arr.reshape(-1)
            bad = (flat < 0) | (flat >= self.n_points)
            if bad.any():
                raise IndexError(
                    f"{what} index {int(flat[bad][0])} out of range for {self.n_points} sites"
                )
        else:
            raise ValueError(f"{what} must be indices (k,) or coordinates (k, d), got {arr.shape}")
        if self.mask is not None:
            blocked = self.open_flat[flat] == 0
            if blocked.any():
                raise IndexError(f"{what} {self._describe(int(flat[blocked][0]))} is blocked by the mask")
        return np.unique(flat)

    def _describe(self, i: int) -> str:
        return f"{i} (coords {self.index_to_coords(i).tolist()})"

    def is_open(self, i: int) -> bool:
        return self.mask is None or bool(self.open_flat[i])

    # -- neighbours -------------------------------------------------------------------
    def displace(self, sites: np.ndarray, *, bond_index: bool = False,
                 step_index: bool = False):
        """Every stencil neighbour of every site in ``sites`` (flat int64 indices).

        Returns ``(src, nbr)``: position in ``sites`` and flat index of each neighbour
        that exists (wrapped on periodic axes, inside open axes, not blocked, through an
        open bond), ordered by site then stencil. Duplicates from small periodic axes
        are *not* removed. With ``bond_index``, also the flat index ``s * n + start`` of
        each step's bond into the planes of ``bonds``/``bond_weights``; with
        ``step_index``, last, the stencil row of each step. Memory O(len(sites) k d).
        """
        coords = np.stack(np.unravel_index(sites, self.shape), axis=-1).astype(np.int64)
        nb = coords[:, None, :] + self.offsets[None, :, :]
        keep = np.ones(nb.shape[:2], dtype=bool)
        for a in range(self.dimensions):
            if self.periodic[a]:
                nb[:, :, a] %= self.shape[a]
            else:
                keep &= (nb[:, :, a] >= 0) & (nb[:, :, a] < self.shape[a])
        src, k = np.nonzero(keep)
        nbr = nb[keep] @ self.strides
        if self.mask is not None:
            ok = self.open_flat[nbr] == 1
            src, k, nbr = src[ok], k[ok], nbr[ok]
        if self.bond_bits is None and not bond_index:
            return (src, nbr, k) if step_index else (src, nbr)
        slot = self.bond_slot[k]
        forward = slot >= 0
        plane = np.where(forward, slot, ~slot)
        start = np.where(forward, np.asarray(sites, dtype=np.int64)[src], nbr)
        if self.bond_bits is not None:
            word = self.bond_bits[plane * self.bond_words + (start >> 5)]
            ok = ((word >> (start & 31).astype(np.uint32)) & 1).astype(bool)
            src, nbr, plane, start, k = src[ok], nbr[ok], plane[ok], start[ok], k[ok]
        out = (src, nbr) + ((plane * self.n_points + start,) if bond_index else ())
        return out + (k,) if step_index else out

    def get_neighbors(self, index) -> np.ndarray:
        """Neighbour set of one site (flat index or coordinates), in stencil order.

        Raises ``IndexError`` for a site out of range or blocked.
        """
        i = self.site(index)
        _, flat = self.displace(np.array([i], dtype=np.int64))
        if self.dedupe:
            _, first = np.unique(flat, return_index=True)
            flat = flat[np.sort(first)]
            flat = flat[flat != i]
        return flat

    def open_sites(self) -> np.ndarray:
        """Flat indices (int64, ascending) of the sites that exist."""
        if self.mask is None:
            return np.arange(self.n_points, dtype=np.int64)
        return np.flatnonzero(self.open_flat).astype(np.int64, copy=False)

    @property
    def has_bonds(self) -> bool:
        """Whether the geometry has bonds or bond weights (operations must honour them)."""
        return self.bond_bits is not None or self.bond_weights is not None

    @property
    def weighted(self) -> bool:
        """Whether paths have costs (site weights, bond weights or step lengths): float
        distances by Dijkstra instead of hop counts."""
        return (self.weights is not None or self.bond_weights is not None
                or self.step_lengths is not None)

    def bond_mask(self) -> np.ndarray:
        """The bonds as a bool array of shape ``(len(bond_offsets),) + shape`` (a new
        array; all True when none were given)."""
        kf = len(self.bond_offsets)
        if self.bond_bits is None:
            return np.ones((kf,) + self.shape, dtype=bool)
        as_bytes = self.bond_bits.astype("<u4").view(np.uint8).reshape(kf, -1)
        bits = np.unpackbits(as_bytes, axis=1, count=self.n_points, bitorder="little")
        return bits.astype(bool).reshape((kf,) + self.shape)

    def bond_ends(self, sites=None):
        """Every usable bond once (each forward offset from the site it starts at):
        ``(i, j, turns)``, int64 flat indices of its ends and int64 ``(m, d)`` the turns
        the step from ``i`` to ``j`` makes round each periodic axis (0 on open axes).
        Parallel bonds of short periodic axes and self-loop bonds are all listed.

        ``sites`` (bool, flat, open sites only), when given, keeps the bonds whose two
        ends it marks instead of those between open sites. Memory O(n d) per forward
        offset.
        """
        d, n = self.dimensions, self.n_points
        shape = np.asarray(self.shape, dtype=np.int64)
        keep_sites = (np.ones(n, bool) if self.mask is None else self.mask.reshape(-1)) \
            if sites is None else np.asarray(sites, bool)
        coords = np.stack(np.unravel_index(np.arange(n), self.shape), axis=-1).astype(np.int64)
        planes = None if self.bond_bits is None else self.bond_mask().reshape(-1, n)
        out_i, out_j, out_q = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [
            np.zeros((0, d), np.int64)]
        for s, off in enumerate(self.bond_offsets):
            t = coords + off
            keep = keep_sites.copy()
            if planes is not None:
                keep &= planes[s]
            q = np.zeros_like(t)
            for a in range(d):
                if self.periodic[a]:
                    q[:, a] = np.floor_divide(t[:, a], shape[a])
                    t[:, a] -= q[:, a] * shape[a]
                else:
                    keep &= (t[:, a] >= 0) & (t[:, a] < shape[a])
            i = np.flatnonzero(keep)
            j = (t[i] @ self.strides).astype(np.int64)
            ok = keep_sites[j]
            out_i.append(i[ok])
            out_j.append(j[ok])
            out_q.append(q[i[ok]])
        return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_q)

    def neighbor_pairs(self, *, costs: bool = False):
        """All directed neighbour pairs ``(rows, cols)`` as int64 arrays (vectorised),
        self-loops dropped; parallel bonds (small periodic axes) give repeated pairs.

        With ``costs``, also each pair's bond weight (float64; 0 without bond weights).
        Memory is O(k n); used to build explicit graphs (reference backend, exports).
        """
        idx = self.open_sites()
        if costs:
            src, cols, e = self.displace(idx, bond_index=True)
        else:
            src, cols = self.displace(idx)
        rows = idx[src]
        keep = rows != cols if self.dedupe else slice(None)
        rows, cols = rows[keep], cols[keep]
        if not costs:
            return rows, cols
        bw = np.zeros(len(rows)) if self.bond_weights is None else self.bond_weights[e[keep]]
        return rows, cols, bw

    def adjacency(self, dtype=np.int8, *, weighted: bool = False):
        """Symmetric adjacency as ``scipy.sparse.csr_array``, no self-loops.

        Entries are 1 (``dtype``), or with ``weighted`` the bond weight (float64; the
        least over parallel bonds; an edge of weight 0 is stored as an explicit 0, so
        use the sparsity structure, not the values, for the edge set).
        """
        import scipy.sparse as sp

        n = self.n_points
        if weighted:
            rows, cols, bw = self.neighbor_pairs(costs=True)
            if self.dedupe and len(rows):
                order = np.lexsort((bw, cols, rows))
                rows, cols, bw = rows[order], cols[order], bw[order]
                first = np.ones(len(rows), dtype=bool)
                first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
                rows, cols, bw = rows[first], cols[first], bw[first]
            return sp.csr_array((bw, (rows, cols)), shape=(n, n))
        rows, cols = self.neighbor_pairs()
        a = sp.coo_array((np.ones(len(rows), dtype=dtype), (rows, cols)), shape=(n, n)).tocsr()
        a.sum_duplicates()
        if self.dedupe:
            a.data[:] = 1
        return a

    def to_networkx(self):
        """``networkx.Graph`` of the open sites: node = flat index with attribute
        ``coords`` (and ``weight`` on a weighted geometry), one edge per neighbour pair
        (with attribute ``weight``, its bond weight, when the geometry has bond weights)."""
        import networkx as nx

        G = nx.Graph()
        open_idx = self.open_sites()
        coords = np.stack(np.unravel_index(open_idx, self.shape), axis=1)
        if self.weights is None:
            G.add_nodes_from((int(i), {"coords": tuple(int(x) for x in c)})
                             for i, c in zip(open_idx, coords))
        else:
            w = self.weights.reshape(-1)
            G.add_nodes_from(
                (int(i), {"coords": tuple(int(x) for x in c), "weight": float(w[i])})
                for i, c in zip(open_idx, coords)
            )
        if self.bond_weights is not None:
            a = self.adjacency(weighted=True).tocoo()
            keep = a.row < a.col
            G.add_weighted_edges_from(
                zip(a.row[keep].tolist(), a.col[keep].tolist(), a.data[keep].tolist())
            )
            return G
        rows, cols = self.neighbor_pairs()
        keep = rows < cols
        G.add_edges_from(zip(rows[keep].tolist(), cols[keep].tolist()))
        return G

    def degree(self) -> np.ndarray:
        """Number of neighbours of every site (0 for blocked), shape ``self.shape``."""
        if self.dedupe:  # duplicate pairs must be merged: count the adjacency's rows
            deg = np.diff(self.adjacency().indptr)
        else:
            deg = np.bincount(self.neighbor_pairs()[0], minlength=self.n_points)
        return deg.astype(np.int64).reshape(self.shape)

    # -- sizes --------------------------------------------------------------------------
    @property
    def n_open(self) -> int:
        return self.n_points if self.mask is None else int(np.count_nonzero(self.open_flat))

    def kernel_args(self):
        """The plain arrays every kernel takes: shape, periodic, offsets, open_, dedupe."""
        return self.shape_arr, self.periodic_arr, self.offsets, self.open_flat, self.dedupe

    def bond_args(self):
        """The bond arrays a bond-aware kernel takes: ``bond_slot`` (int64[k]),
        ``bits`` (uint32, ``bond_words`` words per forward offset; length 0 when every
        bond is open), ``bond_words`` and ``bw`` (float64, ``n`` per forward offset;
        length 0 without bond weights). See :func:`~catalytic.kernels.cpu.neighbors.bond_at`."""
        bits = _NO_BITS if self.bond_bits is None else self.bond_bits
        bw = _NO_WEIGHTS if self.bond_weights is None else self.bond_weights
        return self.bond_slot, bits, self.bond_words, bw

    def nbytes(self) -> int:
        """Bytes held by this geometry (stencil tables, plus the user's mask, weights,
        packed bonds and bond weights)."""
        total = self.offsets.nbytes + self.strides.nbytes + self.shape_arr.nbytes
        total += self.bond_offsets.nbytes + self.bond_slot.nbytes
        for a in (self.mask, self.weights, self.bond_bits, self.bond_weights):
            if a is not None:
                total += a.nbytes
        return int(total)

    def __repr__(self) -> str:
        extra = ""
        if self.mask is not None:
            extra += f", mask={self.n_open}/{self.n_points} open"
        if self.weights is not None:
            extra += ", weighted"
        if self.bond_bits is not None:
            n_bonds = int(np.unpackbits(self.bond_bits.view(np.uint8)).sum())
            extra += f", bonds={n_bonds}/{len(self.bond_offsets) * self.n_points} open"
        if self.bond_weights is not None:
            extra += ", bond-weighted"
        return (
            f"Geometry(shape={self.shape}, periodic={self.periodic}, "
            f"stencil={self.stencil!r}{extra})"
        )
