"""The plugin object catalytic loads through the ``catalytic`` entry-point group.

Two hook implementations are all a plugin needs: ``catalytic_add_operations`` declares
the operations (name, work and memory models, argument validation) and gives each
backend's implementation. The engine then validates, routes, explains, profiles and
batches these operations like its own.
"""

from __future__ import annotations

import functools
import math
import numbers
import weakref

import numpy as np

import catalytic as cat
from catalytic_ising import kernels

METHODS = ("metropolis", "heatbath")


# -- validation: every check before any work -------------------------------------------
def _real(x, name, *, positive=False):
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {x!r}")
    x = float(x)
    if not math.isfinite(x) or (positive and x < 0):
        raise ValueError(f"{name} must be finite{' and >= 0' if positive else ''}, got {x}")
    return x


def _count(x, name):
    if isinstance(x, bool) or not isinstance(x, (numbers.Integral, np.integer)) or x < 0:
        raise ValueError(f"{name} must be a non-negative int, got {x!r}")
    return int(x)


def spins_of(lat, spins) -> np.ndarray:
    """``spins`` as a flat int8 copy: +1/-1 on open sites, 0 on blocked ones."""
    g = lat.geometry
    a = np.asarray(spins)
    if a.shape not in (g.shape, (g.n_points,)):
        raise ValueError(f"spins have shape {a.shape}; the lattice has {g.shape}")
    if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
        raise TypeError(f"spins must be integers +1/-1, got dtype {a.dtype}")
    flat = a.reshape(-1)
    bad = (flat != 1) & (flat != -1)  # in the caller's dtype: a cast to int8 would wrap
    if g.mask is not None:
        bad &= g.mask.reshape(-1)
    if bad.any():
        site = int(np.flatnonzero(bad)[0])
        raise ValueError(f"spins on open sites must be +1 or -1, got {flat[site].item()!r} "
                         f"at site {site}")
    flat = flat.astype(np.int8)
    if g.mask is not None:
        flat[~g.mask.reshape(-1)] = 0
    return flat


def v_sweep(lat, spins, *, beta, sweeps=1, seed=0, start=0, method="metropolis",
            field=0.0, coupling=1.0):
    if not hasattr(lat, "geometry"):
        raise TypeError(f"ising_sweep runs on a catalytic lattice, got {type(lat).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    kw = {"beta": _real(beta, "beta", positive=True), "sweeps": _count(sweeps, "sweeps"),
          "seed": _count(seed, "seed"), "start": _count(start, "start"), "method": method,
          "field": _real(field, "field"), "coupling": _real(coupling, "coupling")}
    if kw["seed"] >= 2**64 or kw["start"] + kw["sweeps"] >= 2**63:
        raise ValueError("seed must be below 2**64 and start + sweeps below 2**63")
    colouring(lat)  # a lattice without a proper colouring is refused here
    return (lat, spins_of(lat, spins)), kw


def v_observables(lat, series, *, beta=None, coupling=1.0, field=0.0):
    g = lat.geometry
    a = np.asarray(series)
    if a.shape in (g.shape, (g.n_points,)):
        a = a.reshape(1, -1)
    elif a.ndim >= 2 and a.shape[1:] in (g.shape, (g.n_points,)):
        a = a.reshape(a.shape[0], -1)
    else:
        raise ValueError(f"series must be one configuration {g.shape} or (T, *{g.shape}), "
                         f"got {a.shape}")
    if a.shape[0] == 0:
        raise ValueError("series holds no configuration")
    rows = np.stack([spins_of(lat, r) for r in a])
    kw = {"beta": None if beta is None else _real(beta, "beta", positive=True),
          "coupling": _real(coupling, "coupling"), "field": _real(field, "field")}
    return (lat, rows), kw


# -- what the kernels need, built once per lattice -------------------------------------
#: lattice -> {"colouring": colouring(lat), "rows": row_geometry(lat)}, filled as they
#: are asked for; a lattice's geometry never changes, and the entry goes when the
#: lattice does
_per_lattice: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def colouring(lat) -> tuple[np.ndarray, int]:
    """``(colour per site as uint8, number of colours)``: a proper colouring of the
    neighbour graph, so one colour class can be updated at once. The stencil's reach
    ``r_a`` along each axis gives ``colour = sum_a (x_a mod (r_a + 1)) * stride_a``
    (parity, 2 colours, when every offset is a unit step along one axis); it is
    checked against every stencil step (:func:`neighbour_table` with ``all_sites``, the
    mask ignored, so the colouring holds for every mask on the geometry), and refused
    with the reason when a periodic axis's length breaks it (a periodic axis of odd
    length for nearest neighbours)."""
    cache = _per_lattice.setdefault(lat, {})
    if "colouring" in cache:
        return cache["colouring"]
    g = lat.geometry
    off = np.asarray(g.offsets, dtype=np.int64)
    coords = np.indices(g.shape).reshape(g.dimensions, -1)
    unit = bool(len(off)) and bool((np.abs(off).sum(axis=1) == 1).all())
    if unit:
        colour, ncol = (coords.sum(axis=0) % 2).astype(np.uint8), 2
    else:
        reach = np.abs(off).max(axis=0) + 1 if len(off) else np.ones(g.dimensions, np.int64)
        colour = np.zeros(g.n_points, dtype=np.int64)
        ncol = 1
        for a in range(g.dimensions):
            colour = colour * reach[a] + coords[a] % reach[a]
            ncol *= int(reach[a])
        if ncol > 255:
            raise ValueError(f"the stencil needs {ncol} colour classes; at most 255")
        colour = colour.astype(np.uint8)
    # check: no stencil step (blocked sites included) joins two sites of one colour
    nbr = neighbour_table(lat, all_sites=True)
    clash = (nbr >= 0) & (colour[np.maximum(nbr, 0)] == colour[:, None])
    if clash.any():
        site, k = np.argwhere(clash)[0]
        raise ValueError(
            f"no checkerboard for this lattice: site {int(site)} and its neighbour "
            f"{int(nbr[site, k])} share a colour (a periodic axis whose length is not a "
            "multiple of the stencil's reach + 1, e.g. odd with nearest neighbours)")
    cache["colouring"] = (colour, ncol)
    return colour, ncol


def acceptance(beta, k, method, field, coupling) -> np.ndarray:
    """The (2, 2k + 1) table the kernels read (see ``kernels.sweeps_cpu``)."""
    m = np.arange(-k, k + 1, dtype=np.float64)
    if method == "heatbath":
        p_up = 1.0 / (1.0 + np.exp(-2.0 * beta * (coupling * m + field)))
        return np.stack([p_up, p_up])
    # spin s flips: dE = 2 s (J h + field) = 2 (J s h + s field), indexed by s * h
    down = np.minimum(1.0, np.exp(-2.0 * beta * (coupling * m - field)))  # s = -1
    up = np.minimum(1.0, np.exp(-2.0 * beta * (coupling * m + field)))    # s = +1
    return np.stack([down, up])


@functools.lru_cache(maxsize=64)
def _thresholds(beta, k, method, field, coupling) -> np.ndarray:
    """``kernels.thresholds`` of :func:`acceptance`, read-only, kept for repeated calls
    (a chain run one sweep a call)."""
    thr = kernels.thresholds(acceptance(beta, k, method, field, coupling))
    thr.setflags(write=False)
    return thr


def _args(lat, beta, method, field, coupling):
    g = lat.geometry
    shape, periodic, offsets, open_, dedupe = g.kernel_args()
    if open_.shape[0] == 0:
        open_ = np.ones(g.n_points, dtype=np.uint8)
    colour, ncol = colouring(lat)
    from catalytic.kernels.neighbors import c_strides

    table = acceptance(beta, len(offsets), method, field, coupling)
    return colour, ncol, shape, c_strides(shape), periodic, offsets, open_, bool(dedupe), table


def row_geometry(lat):
    """The arguments that describe ``lat`` to ``kernels.sweeps_rows``, ``(lead,
    row_strides, periodic_lead, width, wrap)``, or None where that kernel does not
    apply: it takes the von Neumann stencil (the 2d unit steps, in any order) on one to
    three axes, with or without a mask (a blocked site's spin is 0, which adds nothing
    to a neighbour sum). A periodic axis of length 1 or 2 reaches no other site, or one
    site twice (counted once), as an open axis does, so it is passed as open."""
    cache = _per_lattice.setdefault(lat, {})
    if "rows" not in cache:
        cache["rows"] = _row_geometry(lat.geometry)
    return cache["rows"]


def _row_geometry(g):
    d = g.dimensions
    units = {tuple(int(x) for x in s * e) for s in (-1, 1) for e in np.eye(d, dtype=np.int64)}
    if d > 3 or len(g.offsets) != 2 * d or {tuple(o) for o in g.offsets.tolist()} != units:
        return None
    from catalytic.kernels.neighbors import c_strides

    wraps = [bool(p) and n > 2 for p, n in zip(g.periodic, g.shape)]
    lead = np.asarray(g.shape[:-1], dtype=np.uint64)
    return (lead, c_strides(g.shape[:-1]).astype(np.uint64), np.asarray(wraps[:-1], np.uint8),
            g.shape[-1], wraps[-1])


def neighbour_table(lat, *, all_sites=False) -> np.ndarray:
    """(n, k) flat neighbour indices in stencil order, -1 where there is none or for a
    repeat of an earlier one or the site itself (catalytic's neighbour set), vectorised
    over the sites: the numpy reference's input. ``all_sites``: as if no site were
    blocked."""
    g = lat.geometry
    n, k = g.n_points, len(g.offsets)
    coords = np.indices(g.shape).reshape(g.dimensions, -1)
    open_ = np.ones(n, bool) if g.mask is None or all_sites else g.mask.reshape(-1)
    out = np.full((n, k), -1, dtype=np.int64)
    for q, o in enumerate(np.asarray(g.offsets, dtype=np.int64)):
        tgt = coords + o[:, None]
        keep = open_.copy()
        for a in range(g.dimensions):
            if g.periodic[a]:
                tgt[a] %= g.shape[a]
            else:
                keep &= (tgt[a] >= 0) & (tgt[a] < g.shape[a])
        j = np.full(n, -1, dtype=np.int64)
        j[keep] = np.ravel_multi_index(tgt[:, keep], g.shape)
        j[j >= 0] = np.where(open_[j[j >= 0]], j[j >= 0], -1)
        j[j == np.arange(n)] = -1
        for p in range(q):
            j[j == out[:, p]] = -1
        out[:, q] = j
    return out


# -- implementations ------------------------------------------------------------------------
def _finish(lat, flat):
    return flat.reshape(lat.geometry.shape)


def _padded(spins, width):
    """The spins, then a row of ``width`` zeros (``kernels.sweeps_rows``' layout)."""
    out = np.zeros(spins.shape[0] + width, dtype=np.int8)
    out[:spins.shape[0]] = spins
    return out


def sweep_numba(lat, spins, *, beta, sweeps, seed, start, method, field, coupling):
    rows = row_geometry(lat)
    if rows is not None:
        k = len(lat.geometry.offsets)
        thr = _thresholds(beta, k, method, field, coupling)
        out = _padded(spins, rows[3])
        kernels.sweeps_rows(out, *rows, thr, k, method == "heatbath", np.uint64(seed), start,
                            sweeps)
        return _finish(lat, out[:spins.shape[0]])
    colour, ncol, *geo, table = _args(lat, beta, method, field, coupling)
    out = spins.copy()
    # a seed is a uint64 (a Python int from 2**63 up does not convert to the kernel's int64)
    kernels.sweeps_cpu(out, colour, ncol, *geo, table, method == "heatbath", np.uint64(seed),
                       start, sweeps)
    return _finish(lat, out)


def sweep_cuda(lat, spins, *, beta, sweeps, seed, start, method, field, coupling):
    rows = row_geometry(lat)
    if rows is not None:
        k = len(lat.geometry.offsets)
        thr = _thresholds(beta, k, method, field, coupling)
        out = kernels.sweeps_rows_cuda(_padded(spins, rows[3]), *rows, thr, k,
                                       method == "heatbath", seed, start, sweeps)
        return _finish(lat, out[:spins.shape[0]])
    colour, ncol, *geo, table = _args(lat, beta, method, field, coupling)
    out = kernels.sweeps_cuda(spins, colour, ncol, *geo, table, method == "heatbath", seed,
                              start, sweeps)
    return _finish(lat, out)


def sweep_numpy(lat, spins, *, beta, sweeps, seed, start, method, field, coupling):
    colour, ncol = colouring(lat)
    table = acceptance(beta, len(lat.geometry.offsets), method, field, coupling)
    with np.errstate(over="ignore"):  # the hash multiplies modulo 2**64 on purpose
        out = kernels.sweeps_numpy(spins, colour, ncol, neighbour_table(lat), table,
                                   method == "heatbath", seed, start, sweeps)
    return _finish(lat, out)


def observables(lat, rows, *, beta=None, coupling=1.0, field=0.0) -> dict:
    """Energy and magnetisation per open site of each configuration, their means, and
    with ``beta`` the susceptibility and the Binder cumulant."""
    g = lat.geometry
    shape, periodic, offsets, open_, dedupe = g.kernel_args()
    if open_.shape[0] == 0:
        open_ = np.ones(g.n_points, dtype=np.uint8)
    from catalytic.kernels.neighbors import c_strides

    strides = c_strides(shape)
    n = g.n_open
    bonds = np.empty(g.n_points, dtype=np.int64)
    e, m = np.empty(len(rows)), np.empty(len(rows))
    for t, s in enumerate(rows):
        kernels.bond_sums(s, shape, strides, periodic, offsets, open_, bool(dedupe), bonds)
        total = int(s.sum(dtype=np.int64))
        e[t] = (-coupling * bonds.sum() / 2.0 - field * total) / n
        m[t] = total / n
    out = {"energy": e, "magnetisation": m, "energy_mean": float(e.mean()),
           "abs_magnetisation_mean": float(np.abs(m).mean())}
    m2, m4 = float((m ** 2).mean()), float((m ** 4).mean())
    if beta is not None:
        out["susceptibility"] = beta * n * (m2 - out["abs_magnetisation_mean"] ** 2)
        out["specific_heat"] = beta ** 2 * n * float(e.var())
    out["binder"] = 1.0 - m4 / (3.0 * m2 ** 2) if m2 > 0 else float("nan")
    return out


def _sweep_work(lat, spins, *, sweeps=1, **_):
    return float(lat.geometry.n_points * len(lat.geometry.offsets) * max(sweeps, 1))


def _cuda_ok(lat, spins, **_):
    if lat.geometry.n_points >= 2**31:
        return "more than 2**31 sites"
    return None


@cat.hookimpl
def catalytic_add_operations(registry):
    registry.add_operation(
        "ising_sweep", work=_sweep_work, validate=v_sweep,
        memory=lambda lat, spins, **_: 3 * lat.geometry.n_points,
        doc="Ising Monte Carlo sweeps (checkerboard Metropolis or heat bath)")
    # (overhead s, work units per s): measured on a 2-core machine for 16^2..256^2
    # lattices, until `catalytic calibrate` learns plugin operations; labelled
    # "plugin default, uncalibrated" in every routing decision
    registry.add_implementation("ising_sweep", "numpy", sweep_numpy, cost=(60e-6, 6e7))
    registry.add_implementation("ising_sweep", "numba-cpu", sweep_numba, cost=(30e-6, 1.5e8))
    registry.add_implementation("ising_sweep", "cuda", sweep_cuda, supports=_cuda_ok)
    registry.add_operation(
        "ising_observables", work=lambda lat, rows, **_: float(rows.size * 4),
        validate=v_observables, memory=lambda lat, rows, **_: 8 * lat.geometry.n_points,
        doc="energy, magnetisation, susceptibility and Binder cumulant of configurations")
    registry.add_implementation("ising_observables", "numba-cpu", observables)
