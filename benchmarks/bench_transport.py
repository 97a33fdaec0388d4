"""The resistor-network solve (``Lattice.transport``) against SciPy's ``cg`` with a
Jacobi preconditioner and pyamg's smoothed-aggregation solver, measured in one run,
answers compared first.

Issue 28's targets: time to the answer from a mask at most 0.5x SciPy's and at most
1.0x pyamg's, on 512^2 and 128^3 site-diluted lattices at and above the percolation
threshold, at the same relative residual (1e-8). A peer's time counts what a user of it
must do: label the clusters (``scipy.ndimage.label``), keep those touching both faces
(a floating cluster makes the matrix singular), assemble the Laplacian with the faces
as Dirichlet sites, solve, and sum the current out of the high face. Then the
iterations against the lattice side at the 2-D threshold, ours and pyamg's. Times are
the best of ``--repeat`` calls.

    PYTHONPATH=$PWD python benchmarks/bench_transport.py [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os

import numba
import numpy as np
import scipy.ndimage as ndi
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg

import catalytic as cat
from _timing import times

TOL = 1e-8


def best(f, repeat):
    """``(least seconds, the result)`` (:func:`_timing.times`)."""
    seconds, out = times(f, repeat)
    return min(seconds), out


def peer_system(mask):
    """What a user assembles from a mask (axis -1 the current's): the clusters joining
    both faces, the Laplacian of their sites off the faces, and the faces' drive."""
    d = mask.ndim
    labels, _ = ndi.label(mask)  # the nearest-neighbour clusters
    lo = np.unique(labels[..., 0])
    hi = np.unique(labels[..., -1])
    keep = np.isin(labels, np.intersect1d(lo[lo > 0], hi[hi > 0]))
    phi_fixed = np.full(mask.shape, np.nan)
    phi_fixed[..., 0] = 1.0
    phi_fixed[..., -1] = 0.0
    free = keep.copy()
    free[..., 0] = free[..., -1] = False
    idx = np.full(mask.shape, -1, dtype=np.int64)
    idx[free] = np.arange(int(free.sum()))
    rows, cols, vals = [], [], []
    diag = np.zeros(int(free.sum()))
    b = np.zeros_like(diag)
    for a in range(d):
        u = [slice(None)] * d
        v = [slice(None)] * d
        u[a], v[a] = slice(0, -1), slice(1, None)
        u, v = tuple(u), tuple(v)
        bond = keep[u] & keep[v]
        for s, t in ((u, v), (v, u)):
            fs = bond & free[s]
            np.add.at(diag, idx[s][fs], 1.0)
            both = fs & free[t]
            rows.append(idx[s][both])
            cols.append(idx[t][both])
            edge = fs & ~free[t]
            np.add.at(b, idx[s][edge], phi_fixed[t][edge])
    r, c = np.concatenate(rows), np.concatenate(cols)
    A = sp.csr_array((np.concatenate([-np.ones(r.size), diag]),
                      (np.concatenate([r, np.arange(diag.size)]),
                       np.concatenate([c, np.arange(diag.size)]))), shape=(diag.size,) * 2)
    return A, b, keep, idx, free


def peer_conductance(mask, x, keep, idx, free):
    """The current out of the high face (axis -1's first layer) from the solution."""
    phi = np.full(mask.shape, np.nan)
    phi[free] = x
    phi[..., 0] = np.where(keep[..., 0], 1.0, np.nan)
    phi[..., -1] = np.where(keep[..., -1], 0.0, np.nan)
    nxt = phi[..., 1]
    return float(np.nansum((phi[..., 0] - nxt)[keep[..., 0] & keep[..., 1]]))


def scipy_cg(mask):
    A, b, keep, idx, free = peer_system(mask)
    dinv = 1.0 / A.diagonal()
    M = LinearOperator(A.shape, matvec=lambda r: dinv * r)
    x, info = cg(A, b, rtol=TOL, maxiter=100_000, M=M)
    assert info == 0, info
    return peer_conductance(mask, x, keep, idx, free)


def pyamg_sa(mask, iterations=None):
    import pyamg

    A, b, keep, idx, free = peer_system(mask)
    ml = pyamg.smoothed_aggregation_solver(A)
    res = []
    x = ml.solve(b, tol=TOL, accel="cg", maxiter=1000, residuals=res)
    if iterations is not None:
        iterations.append(len(res) - 1)
    return peer_conductance(mask, x, keep, idx, free)


def ours(mask):
    L = cat.Lattice(shape=mask.shape, mask=mask)
    ax = mask.ndim - 1
    return L.transport(L.face(ax, "low"), L.face(ax, "high"), tol=TOL,
                       backend="numba-cpu")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller lattices")
    args = ap.parse_args()
    try:
        import pyamg  # noqa: F401
        have_amg = True
    except ImportError:
        have_amg = False
    print(f"numba threads {numba.get_num_threads()}, wall time, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; pyamg "
          f"{'installed' if have_amg else 'not installed: its column is empty'}\n")
    print("| lattice | p | sites in the solve | catalytic | iterations | SciPy cg + Jacobi | "
          "ratio | pyamg SA | ratio |\n|---|---|---|---|---|---|---|---|---|")
    side2, side3 = (128, 48) if args.quick else (512, 128)
    # near the threshold (2-D site percolation: 0.5927; 3-D: 0.3116) and above it
    cases = [((side2, side2), 0.60), ((side2, side2), 0.65), ((side3,) * 3, 0.32),
             ((side3,) * 3, 0.4)]
    for shape, p in cases:
        for seed in range(20):  # the first lattice with a cluster joining the faces
            mask = np.random.default_rng(seed).random(shape) < p
            if cat.Lattice(shape=shape, mask=mask).percolates(mask.ndim - 1):
                break
        t_ours, res = best(lambda: ours(mask), args.repeat)
        if res.conductance == 0.0:
            print(f"| {'x'.join(map(str, shape))} | {p} | no path | | | | | | |")
            continue
        t_cg, g_cg = best(lambda: scipy_cg(mask), 1)
        assert math.isclose(g_cg, res.conductance, rel_tol=1e-5), (g_cg, res.conductance)
        amg = ""
        if have_amg:
            t_amg, g_amg = best(lambda: pyamg_sa(mask), args.repeat)
            assert math.isclose(g_amg, res.conductance, rel_tol=1e-5)
            amg = f"{t_amg * 1e3:.0f} ms | {t_ours / t_amg:.2f}x"
        solved = int(np.isfinite(res.potential).sum() - res.one_sided)
        print(f"| {'x'.join(map(str, shape))} | {p} | {solved} | {t_ours * 1e3:.0f} ms | "
              f"{res.iterations} | {t_cg * 1e3:.0f} ms | {t_ours / t_cg:.2f}x | {amg} |",
              flush=True)
    print("\nIterations to a relative residual of 1e-8 against the side, 2-D site "
          "percolation at p = 0.5927 (five lattices a side; mean)\n")
    print("| side | catalytic | pyamg SA |\n|---|---|---|")
    for side in ((32, 64, 128) if args.quick else (64, 128, 256, 512, 1024)):
        mine, theirs = [], []
        for seed in range(5):
            mask = np.random.default_rng(seed).random((side, side)) < 0.5927
            r = ours(mask)
            if r.conductance == 0.0:
                continue
            mine.append(r.iterations)
            if have_amg:
                pyamg_sa(mask, theirs)
        print(f"| {side} | {np.mean(mine) if mine else float('nan'):.1f} "
              f"({len(mine)} spanning) | "
              f"{np.mean(theirs) if theirs else float('nan'):.1f} |", flush=True)


if __name__ == "__main__":
    main()
