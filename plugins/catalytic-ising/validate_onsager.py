"""Validate catalytic-ising against Onsager's exact solution of the 2-D square lattice.

    python plugins/catalytic-ising/validate_onsager.py [--size 64] [--sweeps 4000]
        [--burn 1000] [--method heatbath] [--temperatures 1.8,2.0,2.2,Tc,2.6] [--seed 1]

For each temperature: a periodic L x L lattice, ``--burn`` sweeps from all spins up,
then ``--sweeps`` measured sweeps. Prints the measured energy per site and |m| per site,
each with its statistical error (the standard error of the means of 20 consecutive
blocks, which holds the autocorrelation when blocks are longer than it), next to the
exact infinite-lattice values: the energy at every T, the spontaneous magnetisation
below T_c (Yang). A finite lattice differs from the infinite one by finite-size
corrections, largest at T_c and for |m| above T_c (it stays of order L**(-1/8) there
instead of 0); the diff/err columns say how many statistical errors apart measured and
exact are, so a large value away from T_c would be a bug, and at T_c it measures the
finite-size shift.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import catalytic as cat
import catalytic_ising as ci

BLOCKS = 20


def blocked(x):
    """Mean and its standard error from ``BLOCKS`` consecutive block means."""
    b = np.asarray(x)[: len(x) // BLOCKS * BLOCKS].reshape(BLOCKS, -1).mean(axis=1)
    return float(np.mean(x)), float(b.std(ddof=1) / math.sqrt(BLOCKS))


def run(L, T, burn, sweeps, method, seed):
    beta = 1.0 / T
    s = np.ones(L.shape, dtype=np.int8)
    s = L.run("ising_sweep", s, beta=beta, sweeps=burn, seed=seed, method=method)
    series = []
    for t in range(sweeps):
        s = L.run("ising_sweep", s, beta=beta, sweeps=1, seed=seed, start=burn + t,
                  method=method)
        series.append(s)
    return L.run("ising_observables", np.stack(series), beta=beta)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--sweeps", type=int, default=4000)
    ap.add_argument("--burn", type=int, default=1000)
    ap.add_argument("--method", choices=("metropolis", "heatbath"), default="heatbath")
    ap.add_argument("--temperatures", default="1.8,2.0,2.2,Tc,2.6")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    temps = [ci.T_C if t.strip() == "Tc" else float(t) for t in args.temperatures.split(",")]
    L = cat.Lattice(shape=(args.size, args.size), periodic=True)
    print(f"{args.size} x {args.size} periodic square lattice, {args.method}, "
          f"{args.burn} + {args.sweeps} sweeps per temperature, seed {args.seed}; "
          f"T_c = {ci.T_C:.6f}")
    print(f"{'T':>9} | {'energy':>18} {'exact':>9} {'diff/err':>8} | "
          f"{'|m|':>18} {'exact':>9} {'diff/err':>8} | {'time':>6}")
    for T in temps:
        t0 = time.perf_counter()
        obs = run(L, T, args.burn, args.sweeps, args.method, args.seed)
        e, de = blocked(obs["energy"])
        m, dm = blocked(np.abs(obs["magnetisation"]))
        ee, em = ci.onsager_energy(T), ci.onsager_magnetisation(T)
        ze = (e - ee) / de if de > 0 else math.inf
        zm = (m - em) / dm if dm > 0 else math.inf
        exact_m = f"{em:9.5f}" if T < ci.T_C else f"{'0 (T>=Tc)':>9}"
        print(f"{T:9.5f} | {e:9.5f} +- {de:.5f} {ee:9.5f} {ze:8.1f} | "
              f"{m:9.5f} +- {dm:.5f} {exact_m} {zm:8.1f} | {time.perf_counter() - t0:5.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
