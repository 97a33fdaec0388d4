"""Why ``Lattice.transport``'s finest level is an assembled matrix: one pass ``A x`` over
the CSR of the reduced system (the sites that join both electrodes, as numba-cpu's
solve runs it) against the same product matrix-free on the lattice (the bonds'
conductances read in place, vectors over every site, the sites outside the solve
skipped), on 512^2 site-diluted lattices from the threshold up, both in Numba on every
core, the products compared first. Then, for two of them, the share of an iteration
that the finest level's passes take.

    PYTHONPATH=$PWD python benchmarks/transport_matrix_free.py [--side 512]

The matrix-free pass is written here for the square lattice with open axes only: it is
the measurement, not a second solver.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit, prange

import catalytic as cat
from catalytic.backends import _transport as T
from catalytic.kernels.cpu import transport as K
from _timing import best


@njit(parallel=True)
def matrix_free(right, down, diag, free, x, out, nx, ny):
    """``out = A x`` on the ``nx`` x ``ny`` lattice: ``right[i]``, ``down[i]`` the
    conductances of the bonds from ``i`` along axis 1 and axis 0 (0 where the far end is
    not solved for), ``diag`` the diagonal; 0 off the solved sites."""
    for r in prange(nx):
        for c in range(ny):
            i = r * ny + c
            if not free[i]:
                out[i] = 0.0
                continue
            acc = diag[i] * x[i]
            if r + 1 < nx:
                acc -= down[i] * x[i + ny]
            if r > 0:
                acc -= down[i - ny] * x[i - ny]
            if c + 1 < ny:
                acc -= right[i] * x[i + 1]
            if c > 0:
                acc -= right[i - 1] * x[i - 1]
            out[i] = acc


def system(side, p):
    """The first seed's lattice with a cluster joining its left and right faces: the
    lattice, its conductances and far ends, the reduction, and the assembled system."""
    for seed in range(20):
        mask = np.random.default_rng(seed).random((side, side)) < p
        L = cat.Lattice(shape=(side, side), mask=mask)
        if L.percolates(1):
            break
    g = L.geometry
    far, inside = T.far_ends(g)
    sigma = T.bond_conductances(g, "unit", (far, inside))
    high = np.flatnonzero(L.face(1, "low").reshape(-1) & mask.reshape(-1))
    low = np.flatnonzero(L.face(1, "high").reshape(-1) & mask.reshape(-1))
    red = T.reduce(g, T.conducting_labels(g, sigma, far), high, low)
    A, b, where = T.assemble(g, sigma, red, far)
    return L, sigma, far, red, A, b, where


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=512)
    args = ap.parse_args(argv)
    side = args.side
    print("| p | sites solved / lattice | CSR pass | matrix-free pass | ratio |\n"
          "|---|---|---|---|---|")
    for p in (0.6, 0.65, 0.8, 1.0):
        L, sigma, far, red, A, b, where = system(side, p)
        lv = K.Level(A)
        m, n = A.shape[0], L.geometry.n_points
        x = np.random.default_rng(1).random(m)
        out = np.empty(m)
        t_csr = best(lambda: K._sweep(lv.indptr, lv.indices, lv.data, x, x, out, lv.dinv,
                                      0.0, np.int64(0)), 30)
        diag = np.zeros(n)
        diag[where] = A.diagonal()
        # von Neumann forward bonds: s = 0 along axis 0 (down), s = 1 along axis 1
        down = np.where(red.free & red.free[far[0]], sigma[0], 0.0)
        right = np.where(red.free & red.free[far[1]], sigma[1], 0.0)
        X = np.zeros(n)
        X[where] = x
        O = np.empty(n)
        t_mf = best(lambda: matrix_free(right, down, diag, red.free, X, O, side, side), 30)
        assert np.allclose(O[where], A @ x, rtol=1e-13, atol=1e-13)
        print(f"| {p} | {m} / {n} ({m / n:.0%}) | {t_csr * 1e3:.2f} ms | "
              f"{t_mf * 1e3:.2f} ms | {t_mf / t_csr:.2f}x |", flush=True)
    print("\n| p | iterations | ms an iteration | the finest level's 4 CSR passes a step |\n"
          "|---|---|---|---|")
    for p in (0.6, 1.0):
        L, sigma, far, red, A, b, where = system(side, p)
        h = K.hierarchy(A)
        K.solve(h, b, 1e-8, 1000)
        t = time.perf_counter()
        _, its, _ = K.solve(h, b, 1e-8, 1000)
        per = (time.perf_counter() - t) / its
        lv = h.levels[0]
        x = np.random.default_rng(1).random(A.shape[0])
        out = np.empty_like(x)
        t_pass = best(lambda: K._sweep(lv.indptr, lv.indices, lv.data, x, x, out, lv.dinv,
                                       0.0, np.int64(0)), 30)
        print(f"| {p} | {its} | {per * 1e3:.1f} | {4 * t_pass / per:.0%} |")


if __name__ == "__main__":
    main()
