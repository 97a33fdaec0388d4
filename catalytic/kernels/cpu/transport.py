"""The lattice Laplace equation, matrix-free: conjugate gradients preconditioned by an
aggregation multigrid on the lattice itself.

A level is a lattice operator ``(A x)_i = diag_i x_i - sum_k c[k, i] x[i + offs[k]]``
(neighbours wrapped on periodic axes; ``c[k, i]`` 0 where there is no neighbour, or
no coupling), symmetric positive definite on the sites with ``diag > 0`` and the
identity's zero elsewhere (sites outside the solve). The next level aggregates blocks of
2 sites per axis (``ceil(n / 2)`` coarse sites an axis; a block is one coarse site) with
piecewise-constant prolongation ``P`` and the Galerkin operator ``P^T A P``, which is
again a lattice operator: the coupling of two neighbouring blocks is the sum of the
couplings of the bonds between them, a block's diagonal the sum of its sites'
diagonals less the couplings inside it. So the coarse levels of a resistor network are
resistor networks on coarser lattices, of the same form, and symmetric positive
definite whenever the fine one is (``P`` has full rank on the blocks holding a solved
site). The stencil of a coarse level is von Neumann's when every fine offset lies along
one axis, Moore's otherwise; offsets reach at most 2 sites along an axis (a block then
only neighbours the blocks next to it).

The preconditioner is a V-cycle: damped Jacobi sweeps before and after (as many of
each, so it is symmetric), the coarse correction scaled by :data:`OVER` (aggregation's
piecewise-constant correction is too small: Braess's over-correction), and a dense
Cholesky solve on the coarsest level. Every kernel is parallel over the rows of its
level (all axes but the last).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from catalytic.kernels.cpu._budget import _frozen

__all__ = ["Hierarchy", "hierarchy", "solve", "apply"]

#: Jacobi damping of the smoother
OMEGA = 0.8
#: Jacobi sweeps before and after the coarse correction
SWEEPS = 2
#: the scale of the coarse correction (see the module docstring)
OVER = 1.6
#: a level with at most this many sites is solved directly (dense Cholesky)
COARSEST = 256


@njit(cache=True, nogil=True, inline="always")
def _row_base(row, shape, periodic, offs, k, coords):
    """The flat index of the first site of the row that offset ``k`` leads to from row
    ``row`` (coordinates ``coords`` of its axes but the last), or -1 when it leaves an
    open axis."""
    d = shape.shape[0]
    base = 0
    stride = shape[d - 1]
    for a in range(d - 2, -1, -1):
        y = coords[a] + offs[k, a]
        if periodic[a]:
            y %= shape[a]
        elif y < 0 or y >= shape[a]:
            return -1
        base += y * stride
        stride *= shape[a]
    return base


@njit(cache=True, nogil=True)
def _coords(index, shape, out):
    """The coordinates of flat index ``index`` on every axis, into ``out``."""
    rest = index
    for a in range(shape.shape[0] - 1, -1, -1):
        out[a] = rest % shape[a]
        rest //= shape[a]


@njit(cache=True, nogil=True)
def _decode(row, shape, coords):
    """The coordinates of row ``row`` along every axis but the last, into ``coords``."""
    d = shape.shape[0]
    rest = row
    for a in range(d - 2, -1, -1):
        coords[a] = rest % shape[a]
        rest //= shape[a]


@njit(cache=True, nogil=True, inline="always")
def _last(x, o, L, periodic_last):
    """The position along the last axis that step ``o`` leads to from ``x`` (-1 off an
    open axis)."""
    y = x + o
    if periodic_last:
        return y % L
    return y if 0 <= y < L else -1


@njit(cache=True, nogil=True, parallel=True)
def _residual(shape, periodic, offs, c, diag, x, b, r, omega, inv, xo, mode):
    """One pass over the level: ``mode`` 0 writes ``r = A x``; 1 the residual
    ``r = b - A x``; 2 a Jacobi sweep ``xo = x + omega inv (b - A x)`` (``inv``
    ``1 / diag``, 0 outside the solve)."""
    d = shape.shape[0]
    L = shape[d - 1]
    K = offs.shape[0]
    rows = x.shape[0] // L
    pl = periodic[d - 1] != 0
    for row in prange(rows):
        coords = np.empty(max(d - 1, 1), dtype=np.int64)
        _decode(row, shape, coords)
        bases = np.empty(K, dtype=np.int64)
        for k in range(K):
            bases[k] = _row_base(row, shape, periodic, offs, k, coords)
        start = row * L
        for x0 in range(L):
            i = start + x0
            acc = diag[i] * x[i]
            if diag[i] != 0.0:
                for k in range(K):
                    ck = c[k, i]
                    if ck != 0.0:
                        y = _last(x0, offs[k, d - 1], L, pl)
                        acc -= ck * x[bases[k] + y]
            if mode == 0:
                r[i] = acc
            elif mode == 1:
                r[i] = b[i] - acc
            else:
                xo[i] = x[i] + omega * inv[i] * (b[i] - acc)


@njit(cache=True, nogil=True, parallel=True)
def _restrict(fshape, cshape, r, rc):
    """``rc = P^T r``: each coarse site the sum of its block's sites."""
    d = fshape.shape[0]
    Lc = cshape[d - 1]
    Lf = fshape[d - 1]
    rows = rc.shape[0] // Lc
    for row in prange(rows):
        coords = np.empty(max(d - 1, 1), dtype=np.int64)
        _decode(row, cshape, coords)
        for xc in range(Lc):
            rc[row * Lc + xc] = 0.0
        # the 2^(d-1) fine rows of this coarse row
        for corner in range(1 << (d - 1)):
            base = 0
            stride = Lf
            ok = True
            for a in range(d - 2, -1, -1):
                y = 2 * coords[a] + ((corner >> a) & 1)
                if y >= fshape[a]:
                    ok = False
                base += y * stride
                stride *= fshape[a]
            if not ok:
                continue
            for xf in range(Lf):
                rc[row * Lc + xf // 2] += r[base + xf]


@njit(cache=True, nogil=True, parallel=True)
def _prolong(fshape, cshape, ec, x, scale):
    """``x += scale P ec``: each site its block's value."""
    d = fshape.shape[0]
    Lf = fshape[d - 1]
    Lc = cshape[d - 1]
    rows = x.shape[0] // Lf
    for row in prange(rows):
        coords = np.empty(max(d - 1, 1), dtype=np.int64)
        _decode(row, fshape, coords)
        base = 0
        stride = Lc
        for a in range(d - 2, -1, -1):
            base += (coords[a] // 2) * stride
            stride *= cshape[a]
        for xf in range(Lf):
            x[row * Lf + xf] += scale * ec[base + xf // 2]


@njit(cache=True, nogil=True, parallel=True)
def _coarsen(fshape, periodic, offs, c, ground, cshape, table, cc, cground):
    """The Galerkin operator of the next level, each coarse site from its own block:
    ``cground`` the sum of its sites' couplings to fixed sites (``ground``),
    ``cc[table[delta], I]`` the couplings from the block to its neighbour block
    ``I + delta`` (``delta`` a step of -1, 0 or 1 per axis, coded in base 3, axis 0
    first); couplings inside a block drop out. Only sums of couplings: no cancellation,
    so a coarse diagonal is positive exactly when the block holds a solved site."""
    d = fshape.shape[0]
    K = offs.shape[0]
    nc = cground.shape[0]
    inner = (3 ** d - 1) // 2
    for I in prange(nc):
        cc[:, I] = 0.0
        ci = np.empty(d, dtype=np.int64)
        _coords(I, cshape, ci)
        total = 0.0
        fx = np.empty(d, dtype=np.int64)
        for corner in range(1 << d):
            i = 0
            ok = True
            for a in range(d):
                fx[a] = 2 * ci[a] + ((corner >> a) & 1)
                if fx[a] >= fshape[a]:
                    ok = False
                i = i * fshape[a] + fx[a]
            if not ok:
                continue
            total += ground[i]
            for k in range(K):
                ck = c[k, i]
                if ck == 0.0:
                    continue
                code = 0
                for a in range(d):
                    o = offs[k, a]
                    y = fx[a] + o
                    if periodic[a]:
                        y %= fshape[a]
                    delta = y // 2 - ci[a]
                    if periodic[a]:  # the way the step went, round the ring
                        if o > 0 and delta < 0:
                            delta += cshape[a]
                        elif o < 0 and delta > 0:
                            delta -= cshape[a]
                    code = code * 3 + delta + 1
                if code != inner:
                    cc[table[code], I] += ck
        cground[I] = total


class Hierarchy:
    """The levels of one operator: ``shapes``, ``offs``, ``c``, ``diag`` (``ground``
    plus every coupling) and ``inv`` per level (finest first), the coarsest level's
    Cholesky factor (None when it was too large), ``periodic``."""

    def __init__(self, shapes, periodic, offs, c, diag, chol):
        self.shapes = shapes
        self.periodic = periodic
        self.offs = offs
        self.c = c
        self.diag = diag
        self.inv = [np.where(dg > 0, 1.0 / np.where(dg > 0, dg, 1.0), 0.0) for dg in diag]
        self.chol = chol


def _coarse_stencil(offs, d):
    """The offsets of the next level and the base-3 table of each step's index (-1 for
    steps not in it): von Neumann's when every offset of ``offs`` lies along one axis,
    else Moore's."""
    along = bool(np.all((offs != 0).sum(axis=1) <= 1))
    steps = []
    for code in range(3 ** d):
        delta = [(code // 3 ** (d - 1 - a)) % 3 - 1 for a in range(d)]
        nz = sum(1 for v in delta if v)
        if nz == 0 or (along and nz > 1):
            continue
        steps.append((code, delta))
    table = np.full(3 ** d, -1, dtype=np.int64)
    for k, (code, _) in enumerate(steps):
        table[code] = k
    return np.array([s for _, s in steps], dtype=np.int64).reshape(-1, d), table


def _dense(shape, periodic, offs, c, diag):
    """The level's operator as a dense matrix, the identity on sites outside the
    solve."""
    n = diag.shape[0]
    M = np.zeros((n, n))
    e = np.zeros(n)
    col = np.empty(n)
    for j in range(n):
        e[j] = 1.0
        _residual(shape, periodic, offs, c, diag, e, e, col, 0.0, e, e, np.int64(0))
        M[:, j] = col
        e[j] = 0.0
    out = diag == 0
    M[out, :] = 0.0
    M[:, out] = 0.0
    M[out, out] = 1.0
    return M


def hierarchy(shape, periodic, offs, c, ground, coarsest=None) -> Hierarchy:
    """The multigrid levels of the operator ``diag = ground + sum_k c[k]`` with
    couplings ``c`` along ``offs`` on a lattice of ``shape``/``periodic`` (``ground``:
    each site's coupling to fixed sites; a site with no coupling at all is outside the
    solve). ``offs`` may reach 2 sites along an axis (more: a single level, solved
    directly when it is small, else by Jacobi sweeps alone)."""
    coarsest = COARSEST if coarsest is None else coarsest
    shape = np.asarray(shape, dtype=np.int64)
    periodic = _frozen(np.asarray(periodic, dtype=np.uint8))
    d = shape.shape[0]
    offs = np.asarray(offs, dtype=np.int64)
    shapes, ol, cl, dl = [shape], [offs], [c], [ground + c.sum(axis=0)]
    reach = int(np.abs(offs).max(initial=0))
    g = ground
    while int(np.prod(shapes[-1])) > coarsest and reach <= 2 and shapes[-1].max() > 1:
        fshape = shapes[-1]
        cshape = (fshape + 1) // 2
        coffs, table = _coarse_stencil(ol[-1], d)
        nc = int(np.prod(cshape))
        cc = np.empty((coffs.shape[0], nc))
        cg = np.empty(nc)
        _coarsen(fshape, periodic, ol[-1], cl[-1], g, cshape, table, cc, cg)
        shapes.append(cshape)
        ol.append(coffs)
        cl.append(cc)
        dl.append(cg + cc.sum(axis=0))
        g = cg
        reach = 1
    chol = None
    if int(np.prod(shapes[-1])) <= max(coarsest, 1):
        chol = np.linalg.cholesky(_dense(shapes[-1], periodic, ol[-1], cl[-1], dl[-1]))
    return Hierarchy(shapes, periodic, ol, cl, dl, chol)


def apply(h: Hierarchy, level: int, x, out=None, b=None):
    """``A x`` (or ``b - A x`` given ``b``) on level ``level``."""
    out = np.empty_like(x) if out is None else out
    mode = np.int64(0 if b is None else 1)
    _residual(h.shapes[level], h.periodic, h.offs[level], h.c[level], h.diag[level], x,
              x if b is None else b, out, 0.0, x, x, mode)
    return out


def _cycle(h: Hierarchy, level: int, b):
    """The V-cycle from ``level``: an approximation of ``A^-1 b``."""
    if level == len(h.shapes) - 1 and h.chol is not None:
        import scipy.linalg

        x = scipy.linalg.cho_solve((h.chol, True), b)
        x[h.diag[level] == 0] = 0.0
        return x
    shape, off, c, dg, inv = (h.shapes[level], h.offs[level], h.c[level], h.diag[level],
                              h.inv[level])
    x = OMEGA * inv * b
    y = np.empty_like(b)
    for _ in range(SWEEPS - 1):
        _residual(shape, h.periodic, off, c, dg, x, b, b, OMEGA, inv, y, np.int64(2))
        x, y = y, x
    if level < len(h.shapes) - 1:
        r = apply(h, level, x, b=b)
        rc = np.empty(int(np.prod(h.shapes[level + 1])))
        _restrict(shape, h.shapes[level + 1], r, rc)
        ec = _cycle(h, level + 1, rc)
        _prolong(shape, h.shapes[level + 1], ec, x, OVER)
    for _ in range(SWEEPS):
        _residual(shape, h.periodic, off, c, dg, x, b, b, OMEGA, inv, y, np.int64(2))
        x, y = y, x
    return x


def solve(h: Hierarchy, b, tol: float, maxiter: int):
    """Preconditioned conjugate gradients on the finest level of ``h`` from 0 until the
    relative residual ``|b - A x| / |b|`` is at most ``tol`` (the true residual, checked
    when the recurred one gets there) or ``maxiter`` iterations. Returns ``(x,
    iterations, residual)``; the caller decides what a residual above ``tol`` means."""
    nb = float(np.linalg.norm(b))
    x = np.zeros_like(b)
    if nb == 0.0:
        return x, 0, 0.0
    r = b.copy()
    q = np.empty_like(b)
    z = _cycle(h, 0, r)
    p = z.copy()
    rz = float(r @ z)
    it = 0
    res = 1.0
    while it < maxiter:
        it += 1
        apply(h, 0, p, out=q)
        pq = float(p @ q)
        if not pq > 0.0:
            break  # p is 0 (nothing left to correct) or rounding took over
        alpha = rz / pq
        x += alpha * p
        r -= alpha * q
        if float(np.linalg.norm(r)) <= tol * nb:
            apply(h, 0, x, out=r, b=b)  # the true residual
            res = float(np.linalg.norm(r)) / nb
            if res <= tol:
                return x, it, res
        z = _cycle(h, 0, r)
        rz_new = float(r @ z)
        p *= rz_new / rz
        p += z
        rz = rz_new
    apply(h, 0, x, out=r, b=b)
    return x, it, float(np.linalg.norm(r)) / nb
