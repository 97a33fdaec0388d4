"""The 2-D conductivity exponent from ``Lattice.transport``: the mean conductance of
square lattices at the bond percolation threshold (p = 1/2, exact) falls as
``L^(-t / nu)`` with the side ``L``, so ``t = -nu * slope`` of ``log <G>`` against
``log L``, ``nu = 4/3`` exactly in 2-D. The published value is t = 1.30 (t / nu =
0.9745(15), Normand and Herrmann, Int. J. Mod. Phys. C 6, 813 (1995); Grassberger,
Physica A 262, 251 (1999): t = 1.310(1)).

Each lattice: bonds open with probability 1/2, unit conductances, the left and right
faces the electrodes; ``<G>`` over every lattice (those without a path give 0). The
error of each mean is its standard error; the slope is a weighted least-squares fit,
its error from the fit, over the sides from ``--smallest`` on.

    PYTHONPATH=$PWD python benchmarks/conductivity_exponent.py [--sides 16,...] [--samples N]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import catalytic as cat

NU = 4.0 / 3.0


def mean_conductance(side, samples, seed):
    rng = np.random.default_rng(seed)
    base = cat.Lattice(shape=(side, side))
    lo, hi = base.face(1, "low"), base.face(1, "high")
    g = np.empty(samples)
    for k in range(samples):
        bonds = rng.random((2, side, side)) < 0.5
        L = cat.Lattice(shape=(side, side), bonds=bonds)
        g[k] = L.transport(lo, hi, tol=1e-10, backend="numba-cpu").conductance
    return g.mean(), g.std(ddof=1) / math.sqrt(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sides", default="16,32,64,128,256")
    ap.add_argument("--samples", default="2000,1000,500,250,125")
    ap.add_argument("--smallest", type=int, default=32)
    args = ap.parse_args()
    sides = [int(s) for s in args.sides.split(",")]
    counts = [int(s) for s in args.samples.split(",")]
    print("| side | lattices | <G> | standard error | seconds |\n|---|---|---|---|---|")
    rows = []
    for side, n in zip(sides, counts):
        t = time.perf_counter()
        m, e = mean_conductance(side, n, side)
        rows.append((side, m, e))
        print(f"| {side} | {n} | {m:.5f} | {e:.5f} | {time.perf_counter() - t:.1f} |",
              flush=True)
    fit = [(s, m, e) for s, m, e in rows if s >= args.smallest]
    x = np.log([s for s, _, _ in fit])
    y = np.log([m for _, m, _ in fit])
    w = 1.0 / np.array([e / m for _, m, e in fit]) ** 2  # the error of log <G>
    X = np.column_stack([np.ones_like(x), x])
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    beta = cov @ X.T @ (w * y)
    slope, err = beta[1], math.sqrt(cov[1, 1])
    chi2 = float(np.sum(w * (y - X @ beta) ** 2))
    print(f"\nslope {slope:.4f} +- {err:.4f} over sides {fit[0][0]}-{fit[-1][0]} "
          f"(chi2 {chi2:.2f}, {len(fit) - 2} degrees of freedom): "
          f"t = {-NU * slope:.3f} +- {NU * err:.3f} (published 1.30)")


if __name__ == "__main__":
    main()
