"""The lattice Laplace equation on the sites of a resistor network that need solving:
conjugate gradients preconditioned by aggregation multigrid.

The operator is the weighted Laplacian of the network's solved sites (symmetric
positive definite: every component holds a site coupled to an electrode), a sparse
matrix in CSR form (int32 column indices where they fit). Its coarse levels aggregate sites that the
network joins, never sites it does not: each pass pairs every site with its
neighbour of strongest coupling not yet taken (a site left alone joins the aggregate of
its strongest neighbour), two passes a level (Notay's double pairwise aggregation, so
aggregates of about 4), and the coarse operator is the Galerkin product ``P^T A P`` of
the piecewise-constant prolongation ``P``: again a resistor network, the couplings
between two aggregates summed. Aggregating blocks of the lattice instead joins sites
across gaps of the network, and at the percolation threshold took many times the
iterations (``reports/transport.md``).

The preconditioner is a W-cycle (two coarse corrections a level): damped Jacobi sweeps
before and after (as many of each, so it is symmetric), each coarse correction scaled
by :data:`OVER` (piecewise-constant corrections are too small: Braess's
over-correction), and the coarsest level's dense inverse.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["Hierarchy", "hierarchy", "solve"]

#: Jacobi damping of the smoother
OMEGA = 0.67
#: Jacobi sweeps before and after the coarse corrections
SWEEPS = 1
#: coarse corrections a level (2: a W-cycle)
GAMMA = 2
#: the scale of each coarse correction
OVER = 1.5
#: a level with at most this many sites is solved directly (a dense inverse)
COARSEST = 256
#: pairing passes a level
PASSES = 2


def row(indptr, indices, data, x, b, out, dinv, omega, mode, i):
    """Row ``i`` of a pass: ``mode`` 0 writes ``out = A x``; 1 the residual
    ``out = b - A x``; 2 a Jacobi sweep ``out = x + omega dinv (b - A x)``. Plain
    Python: compiled here by ``njit`` and by the CUDA twin as a device function."""
    acc = 0.0
    for e in range(indptr[i], indptr[i + 1]):
        acc += data[e] * x[indices[e]]
    if mode == 0:
        out[i] = acc
    elif mode == 1:
        out[i] = b[i] - acc
    else:
        out[i] = x[i] + omega * dinv[i] * (b[i] - acc)


_row = njit(cache=True, nogil=True, inline="always")(row)


@njit(cache=True, nogil=True, parallel=True)
def _sweep_par(indptr, indices, data, x, b, out, dinv, omega, mode):
    """A pass over every row (:func:`_row`) on Numba's threads."""
    for i in prange(indptr.shape[0] - 1):
        _row(indptr, indices, data, x, b, out, dinv, omega, mode, i)


@njit(cache=True, nogil=True)
def _sweep_one(indptr, indices, data, x, b, out, dinv, omega, mode):
    """The same pass on this thread."""
    for i in range(indptr.shape[0] - 1):
        _row(indptr, indices, data, x, b, out, dinv, omega, mode, i)


#: a level of fewer rows takes :func:`_sweep_one`: a parallel region then costs more than
#: its rows, and its threads spin on, slowing the host code between the cycle's many
#: small passes
PARALLEL_ROWS = 1 << 15


def _sweep(indptr, indices, data, x, b, out, dinv, omega, mode):
    """A pass over the rows on the threads its size pays for."""
    f = _sweep_par if indptr.shape[0] > PARALLEL_ROWS else _sweep_one
    f(indptr, indices, data, x, b, out, dinv, omega, mode)


@njit(cache=True, nogil=True)
def _dot(a, b):
    """``a . b`` on this thread. NumPy's goes to BLAS, whose threads then spin beside
    Numba's and slowed every cycle several times over on two cores."""
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


def _norm(a):
    return float(np.sqrt(_dot(a, a)))


@njit(cache=True, nogil=True)
def _pair(indptr, indices, data, agg):
    """One pass of pairwise aggregation in index order: each site not yet taken pairs
    with its neighbour of strongest coupling (most negative entry) not yet taken; a
    site with none joins the aggregate of its strongest neighbour (alone when it has
    no neighbour). Writes ``agg`` (the aggregate of each site); returns their number."""
    n = agg.shape[0]
    for i in range(n):
        agg[i] = -1
    m = 0
    for i in range(n):
        if agg[i] >= 0:
            continue
        best = -1
        strongest = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            if j != i and agg[j] < 0 and -data[e] > strongest:
                strongest = -data[e]
                best = j
        if best >= 0:
            agg[i] = m
            agg[best] = m
            m += 1
            continue
        strongest = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            if j != i and -data[e] > strongest:
                strongest = -data[e]
                best = j
        if best >= 0:
            agg[i] = agg[best]
        else:
            agg[i] = m
            m += 1
    return m


class Level:
    """One level: the CSR arrays (int64 indices), the Jacobi ``dinv``, and ``agg`` (the
    aggregate of each site on the next level; None on the coarsest) with ``m`` the
    next level's size."""

    def __init__(self, A, agg=None, m=0):
        self.A = A
        self.indptr = A.indptr.astype(np.int64)
        # int32 columns where they fit: the passes read them every sweep, and they
        # are half the bytes the sweep moves
        self.indices = A.indices.astype(np.int32 if A.shape[0] < 2**31 else np.int64)
        self.data = np.ascontiguousarray(A.data, dtype=np.float64)
        self.dinv = 1.0 / A.diagonal()
        self.agg = agg
        self.m = m


class Hierarchy:
    """The levels, finest first, and the inverse of the coarsest level's matrix (dense;
    None when that level is larger than :data:`COARSEST`, which then only smooths)."""

    def __init__(self, levels, inverse):
        self.levels = levels
        self.inverse = inverse

    @property
    def sizes(self):
        """The number of sites of each level, finest first."""
        return [lv.A.shape[0] for lv in self.levels]


def _galerkin(A, agg, m):
    """``P^T A P`` for the aggregates ``agg`` (``m`` of them), in CSR."""
    import scipy.sparse as sp

    n = A.shape[0]
    P = sp.csr_array((np.ones(n), (np.arange(n), agg)), shape=(n, m))
    C = (P.T @ A @ P).tocsr()
    C.sum_duplicates()
    return C


def hierarchy(A, coarsest=None) -> Hierarchy:
    """The levels of the symmetric positive definite CSR matrix ``A`` (a Laplacian
    plus a non-negative diagonal, couplings <= 0): :data:`PASSES` pairing passes a
    level down to :data:`COARSEST` sites, or until a level no longer shrinks by a
    tenth."""
    coarsest = COARSEST if coarsest is None else coarsest
    levels = []
    A = A.tocsr()
    while A.shape[0] > coarsest:
        n = A.shape[0]
        agg = np.arange(n, dtype=np.int64)
        C = A
        for _ in range(PASSES):
            step = np.empty(C.shape[0], dtype=np.int64)
            C_ind = C.indptr.astype(np.int64), C.indices.astype(np.int64), C.data
            m = _pair(*C_ind, step)
            agg = step[agg]
            C = _galerkin(C, step, m)
        if C.shape[0] > 0.9 * n:
            break
        levels.append(Level(A, agg, C.shape[0]))
        A = C
    levels.append(Level(A))
    inverse = None
    if A.shape[0] <= max(coarsest, 1):
        # by eigenvalues, the smallest kept above rounding: a Galerkin diagonal is a
        # difference (a site's couplings less those inside its aggregate), so a level
        # whose sites barely touch an electrode may come out singular in float64
        lam, V = np.linalg.eigh(A.toarray())
        lam = np.maximum(lam, max(float(lam.max(initial=0.0)), 1e-300) * 1e-13)
        inverse = (V / lam) @ V.T
    return Hierarchy(levels, inverse)


def _apply(lv: Level, x, out, b=None):
    mode = np.int64(0 if b is None else 1)
    _sweep(lv.indptr, lv.indices, lv.data, x, x if b is None else b, out, lv.dinv, 0.0,
           mode)
    return out


def _cycle(h: Hierarchy, level: int, b):
    """The W-cycle from ``level``: an approximation of ``A^-1 b``."""
    lv = h.levels[level]
    last = level == len(h.levels) - 1
    if last and h.inverse is not None:
        return h.inverse @ b
    x = OMEGA * lv.dinv * b
    y = np.empty_like(b)
    for _ in range(SWEEPS - 1):
        _sweep(lv.indptr, lv.indices, lv.data, x, b, y, lv.dinv, OMEGA, np.int64(2))
        x, y = y, x
    if not last:
        for _ in range(GAMMA):
            _apply(lv, x, y, b)  # the residual
            e = _cycle(h, level + 1, np.bincount(lv.agg, y, minlength=lv.m))
            x += OVER * e[lv.agg]
    for _ in range(SWEEPS):
        _sweep(lv.indptr, lv.indices, lv.data, x, b, y, lv.dinv, OMEGA, np.int64(2))
        x, y = y, x
    return x


def solve(h: Hierarchy, b, tol: float, maxiter: int):
    """Preconditioned conjugate gradients on the finest level of ``h`` from 0 until the
    relative residual ``|b - A x| / |b|`` is at most ``tol`` (the true residual, checked
    when the recurred one gets there) or ``maxiter`` iterations. Returns ``(x,
    iterations, residual)``; the caller decides what a residual above ``tol`` means."""
    lv = h.levels[0]
    b = np.ascontiguousarray(b, dtype=np.float64)
    nb = _norm(b)
    x = np.zeros_like(b)
    if nb == 0.0:
        return x, 0, 0.0
    r = b.copy()
    q = np.empty_like(b)
    z = _cycle(h, 0, r)
    p = z.copy()
    rz = _dot(r, z)
    it = 0
    while it < maxiter:
        it += 1
        _apply(lv, p, q)
        pq = _dot(p, q)
        if not pq > 0.0:
            break  # p is 0 (nothing left to correct) or rounding took over
        alpha = rz / pq
        x += alpha * p
        r -= alpha * q
        if _norm(r) <= tol * nb:
            _apply(lv, x, r, b)  # the true residual
            res = _norm(r) / nb
            if res <= tol:
                return x, it, res
        z = _cycle(h, 0, r)
        rz_new = _dot(r, z)
        p *= rz_new / rz
        p += z
        rz = rz_new
    _apply(lv, x, r, b)
    return x, it, _norm(r) / nb
