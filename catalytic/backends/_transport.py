"""Host code every backend's ``transport`` shares: the bond conductances, the reduction
of the network to the components that join both electrodes, the reference solve
(SciPy's ``spsolve`` on the assembled matrix) and the currents and conductance read from
a potential.

The problem, on the lattice's bonds (each forward bond ``s`` at site ``i``, from ``i`` to
``j = i + bond_offsets[s]``, a resistor of conductance ``sigma[s, i]``): the potential is
1 on the ``high`` electrode and 0 on ``low``, and every other site ``i`` conserves
current, ``sum_j sigma_ij (phi_i - phi_j) = 0`` (no current leaves through the lattice's
faces: insulating). The sites of a component (of the sites joined by bonds of conductance
> 0) touching both electrodes are solved for; a component touching one electrode only
is at its potential and carries no current; one touching none has no potential (NaN).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from catalytic.errors import ConvergenceError
from catalytic.results import Transport

__all__ = ["bond_conductances", "Reduced", "reduce", "far_ends", "assemble",
           "conducting_labels", "default_maxiter", "reference_solve", "finish",
           "iterative_transport"]


def far_ends(g):
    """Per forward bond plane ``s``: the far end ``j[s, i]`` of the bond from each site
    ``i`` (wrapped on periodic axes; the site itself where the bond leaves an open
    axis) and whether it exists, as ``(j, inside)``, int64 and bool arrays of shape
    ``(len(bond_offsets), n)``: the layout of the bonds and of the currents, where
    :meth:`Geometry.bond_ends` lists the usable bonds. Every function below takes ``j``
    from one call."""
    n, d = g.n_points, g.dimensions
    kf = len(g.bond_offsets)
    site = np.arange(n, dtype=np.int64)
    coord = {}
    far = np.empty((kf, n), dtype=np.int64)
    inside = np.ones((kf, n), dtype=bool)
    for s, off in enumerate(np.asarray(g.bond_offsets)):
        j = site.copy()
        for a in range(d):
            o = int(off[a])
            if o == 0:
                continue
            if a not in coord:
                coord[a] = (site // g.strides[a]) % g.shape[a]
            t = coord[a] + o
            if g.periodic[a]:
                wrapped = t % g.shape[a]
                j += (wrapped - coord[a]) * g.strides[a]
            else:
                ok = (t >= 0) & (t < g.shape[a])
                inside[s] &= ok
                j += np.where(ok, o, 0) * g.strides[a]
        far[s] = np.where(inside[s], j, site)
    return far, inside


def bond_conductances(g, rule: str, ends) -> np.ndarray:
    """The conductance of every bond, ``(len(bond_offsets), n)`` float64, 0 where the
    bond is closed or leaves the lattice or either end is blocked.

    ``rule``: ``"bonds"`` the bond weights; ``"sites"`` the harmonic mean of the site
    weights at its ends, ``2 w_i w_j / (w_i + w_j)`` (0 when either is 0: the series
    conductance of two half-sites of conductivity ``w``); ``"unit"`` 1.
    """
    n = g.n_points
    kf = len(g.bond_offsets)
    far, inside = ends
    open_ = g.bond_mask().reshape(kf, n) & inside
    if g.mask is not None:
        m = g.mask.reshape(-1)
        open_ &= m[None, :] & m[far]
    if rule == "bonds":
        sigma = np.asarray(g.bond_weights, dtype=np.float64).reshape(kf, n).copy()
    elif rule == "sites":
        w = np.asarray(g.weights, dtype=np.float64).reshape(-1)
        wi, wj = w[None, :], w[far]
        total = wi + wj
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            # 2 wi wj / (wi + wj) without overflow: wi * (2 wj / (wi + wj))
            sigma = np.where(total > 0, wi * (2.0 * wj / np.where(total > 0, total, 1.0)),
                             0.0)
    else:
        sigma = np.ones((kf, n), dtype=np.float64)
    sigma[~open_] = 0.0
    return sigma


class Reduced(NamedTuple):
    """The network reduced to what needs solving.

    ``free``: bool (n,), the sites solved for (in a component joining both electrodes,
    on neither); ``phi``: float64 (n,), the potential known so far (1 and 0 on the
    electrodes and the components that touch one, NaN on blocked and isolated sites,
    0 on ``free`` sites); ``isolated`` and ``one_sided``: the open sites of components
    touching no electrode and one electrode; ``joined``: whether any component touches
    both."""
    free: np.ndarray
    phi: np.ndarray
    isolated: int
    one_sided: int
    joined: bool


def reduce(g, labels: np.ndarray, high: np.ndarray, low: np.ndarray) -> Reduced:
    """The reduction given ``labels`` (int, (n,), 0 on blocked sites, the components of
    the conducting bonds) and the electrodes (flat indices of open sites)."""
    n = g.n_points
    top = int(labels.max(initial=0))
    touches_high = np.zeros(top + 1, dtype=bool)
    touches_low = np.zeros(top + 1, dtype=bool)
    touches_high[labels[high]] = True
    touches_low[labels[low]] = True
    touches_high[0] = touches_low[0] = False
    both = touches_high & touches_low
    comp_high = touches_high[labels]
    comp_low = touches_low[labels]
    open_ = labels > 0
    phi = np.full(n, np.nan)
    phi[comp_high & ~comp_low] = 1.0
    phi[comp_low & ~comp_high] = 0.0
    free = both[labels]
    phi[free] = 0.0
    phi[high] = 1.0
    phi[low] = 0.0
    free[high] = False
    free[low] = False
    isolated = int((open_ & ~comp_high & ~comp_low).sum())
    one_sided = int((open_ & (comp_high ^ comp_low)).sum())
    return Reduced(free, phi, isolated, one_sided, bool(both.any()))


def assemble(g, sigma: np.ndarray, red: Reduced, far: np.ndarray):
    """The reduced system ``A x = b`` over the free sites as a SciPy CSR matrix: ``A``
    the weighted Laplacian of the bonds between free sites plus, on its diagonal, each
    free site's conductance to the electrodes; ``b`` the current the electrodes drive
    into each. Returns ``(A, b, where)``, ``where`` the free sites' flat indices."""
    import scipy.sparse as sp

    where = np.flatnonzero(red.free)
    m = where.shape[0]
    pos = np.full(g.n_points, -1, dtype=np.int64)
    pos[where] = np.arange(m)
    kf = len(g.bond_offsets)
    i = np.broadcast_to(np.arange(g.n_points), (kf, g.n_points)).reshape(-1)
    j = far.reshape(-1)
    s = sigma.reshape(-1)
    keep = (s > 0) & (i != j)
    i, j, s = i[keep], j[keep], s[keep]
    fi, fj = red.free[i], red.free[j]
    diag = (np.bincount(pos[i[fi]], s[fi], minlength=m)
            + np.bincount(pos[j[fj]], s[fj], minlength=m))
    # a free site's bond to a fixed one: its conductance times the fixed potential
    ij = fi & ~fj
    ji = fj & ~fi
    b = (np.bincount(pos[i[ij]], s[ij] * red.phi[j[ij]], minlength=m)
         + np.bincount(pos[j[ji]], s[ji] * red.phi[i[ji]], minlength=m))
    both = fi & fj
    rows = np.concatenate([pos[i[both]], pos[j[both]], np.arange(m)])
    cols = np.concatenate([pos[j[both]], pos[i[both]], np.arange(m)])
    vals = np.concatenate([-s[both], -s[both], diag])
    A = sp.csr_array((vals, (rows, cols)), shape=(m, m))
    A.sum_duplicates()
    return A, b, where


def conducting_labels(g, sigma: np.ndarray, far: np.ndarray) -> np.ndarray:
    """The components of the open sites joined by bonds of conductance > 0, by SciPy's
    ``connected_components`` (the reference's): int64 (n,), 0 on blocked sites, 1.. on
    open ones (numbered in no particular order)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n = g.n_points
    keep = sigma > 0
    i = np.broadcast_to(np.arange(n), sigma.shape)[keep]
    graph = sp.csr_array((np.ones(i.shape[0], dtype=np.int8), (i, far[keep])), shape=(n, n))
    _, comp = connected_components(graph, directed=False)
    labels = comp.astype(np.int64) + 1
    if g.mask is not None:
        labels[~g.mask.reshape(-1)] = 0
    return labels


def default_maxiter(g) -> int:
    """The iteration limit of an iterative solve when the caller gives none: 1000, or
    20 per site of the longest axis on larger lattices."""
    return max(1000, 20 * max(g.shape, default=1))


def relative_residual(A, x, b) -> float:
    """``|b - A x| / |b|`` (0 when ``b`` is 0 and so is the residual)."""
    r = float(np.linalg.norm(b - A @ x))
    nb = float(np.linalg.norm(b))
    return r / nb if nb > 0 else r


def reference_solve(g, sigma: np.ndarray, red: Reduced, tol: float, far: np.ndarray):
    """The potential by SciPy's direct ``spsolve`` on the assembled system; returns
    ``(phi, residual)``. Raises :class:`ConvergenceError` when the residual is above
    ``tol`` (rounding on a system too ill-conditioned for it)."""
    from scipy.sparse.linalg import spsolve

    phi = red.phi.copy()
    if not red.free.any():
        return phi, 0.0
    A, b, where = assemble(g, sigma, red, far)
    x = np.atleast_1d(spsolve(A.tocsc(), b))
    res = relative_residual(A, x, b)
    if not res <= tol:
        raise ConvergenceError(res, 0, tol)
    phi[where] = x
    return phi, res


def finish(g, sigma: np.ndarray, red: Reduced, phi: np.ndarray, high: np.ndarray,
           iterations: int, residual: float, far: np.ndarray) -> Transport:
    """The result from the potential: each bond's current ``sigma (phi_i - phi_j)``
    (0 on bonds of conductance 0, and on those of a component at one potential), and the
    conductance, the net current out of the high electrode (exactly 0 when no component
    joins the electrodes)."""
    kf = len(g.bond_offsets)
    currents = phi[far]
    np.subtract(phi[None, :], currents, out=currents)
    currents *= sigma
    # no current where there is no conductance, nor on isolated components (no
    # potential: NaN)
    currents[(sigma == 0) | np.isnan(currents)] = 0.0
    if red.joined:
        on = np.zeros(g.n_points, dtype=bool)
        on[high] = True
        # out of the high sites along their bonds, less what their bonds bring in
        leaving = currents[:, on]
        entering = currents[on[far]]
        conductance = float(math.fsum(leaving.reshape(-1)) - math.fsum(entering.reshape(-1)))
    else:
        conductance = 0.0
    return Transport(phi.reshape(g.shape), currents.reshape((kf,) + g.shape), conductance,
                     int(iterations), float(residual), red.isolated, red.one_sided)


def iterative_transport(lat, high, low, conductance, tol, maxiter, label, solve):
    """``transport`` by an iterative solver, as numba-cpu and cuda run it: the bonds'
    conductances; the components of the conducting bonds by ``label(geometry)`` (the
    geometry with only the conducting bonds open; flat labels, 0 on blocked sites);
    the reduction; and ``solve(A, b, tol, maxiter)`` -> ``(x, iterations, residual)``
    on the assembled system, which must reach ``tol`` (else :class:`ConvergenceError`
    with what it reached)."""
    g = lat.geometry
    far, inside = far_ends(g)
    sigma = bond_conductances(g, conductance, (far, inside))
    kf = len(g.bond_offsets)
    labels = label(g.with_bonds((sigma > 0).reshape((kf,) + g.shape)))
    red = reduce(g, np.asarray(labels).reshape(-1).astype(np.int64, copy=False), high, low)
    phi = red.phi.copy()
    iterations, residual = 0, 0.0
    if red.free.any():
        A, b, where = assemble(g, sigma, red, far)
        limit = default_maxiter(g) if maxiter is None else maxiter
        x, iterations, residual = solve(A, b, tol, limit)
        if not residual <= tol:
            raise ConvergenceError(residual, iterations, tol)
        phi[where] = x
    return finish(g, sigma, red, phi, high, iterations, residual, far)
