"""Spin flips per ns of ``ising_sweep`` against a plain Numba checkerboard, in one process.

    python plugins/catalytic-ising/benchmarks/bench_ising.py [--repeats 9] [--sweeps 10]
        [--threads all,1] [--output FILE]

A flip is one attempted spin update (a site visited once in a sweep), as Ising
benchmarks count them; flips per ns = sites * sweeps / seconds / 1e9. Lattices:
periodic 1024^2 (2-D) and 128^3 (3-D), von Neumann stencil, Metropolis near T_c.

The reference is the code a user writes in twenty lines (:func:`plain_2d`,
:func:`plain_3d`): a checkerboard with ``prange`` over rows, an xorshift generator per
row, and the acceptance probabilities in a table. ``ising_sweep`` is timed as a user
calls it, ``L.run("ising_sweep", ...)`` (validation, routing and the copy of the spins
included), ``--sweeps`` sweeps a call.

Before any timing the answers are checked: the same seed gives the same spins on every
backend here (numpy, numba-cpu, cuda when a GPU is present); on 1024^2 at T = 2 both
codes reach Onsager's energy and Yang's |m| per site; on 128^3 at T = 4 (ordered, T_c ~
4.51) both reach the same ordered state (energy and |m| within 0.02 per site). The
script stops if a check fails.

Timing: after the checks (which compile everything), the two codes are run one after
the other, alternating which goes first, ``--repeats`` times; the table gives each
one's best run and the ratio of the bests, and the median of the per-round ratios,
which holds up better when other processes share the cores. ``--threads`` lists the
Numba thread counts to measure ("all": Numba's default). On cores that other processes
share, OpenMP threads that spin at each colour pass's barrier slow both codes down,
most on short passes (1024^2); the one-thread rows, or ``OMP_WAIT_POLICY=passive``,
show the kernels' own speed there.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time

import numba
import numpy as np
from numba import njit, prange

import catalytic as cat
import catalytic_ising as ci


# -- the plain reference: what a user writes without the plugin ------------------------
@njit(parallel=True, cache=True)
def plain_2d(s, prob, states, sweeps):
    """Checkerboard Metropolis on a periodic 2-D int8 lattice, in place. ``prob[(s h +
    4) // 2]``: acceptance of flipping spin ``s`` with neighbour sum ``h``; ``states``:
    one nonzero xorshift64 state per row."""
    n0, n1 = s.shape
    for _ in range(sweeps):
        for c in range(2):
            for r in prange(n0):
                x = states[r]
                up, down, row = s[(r - 1) % n0], s[(r + 1) % n0], s[r]
                for j in range((r + c) % 2, n1, 2):
                    h = up[j] + down[j] + row[j - 1] + row[(j + 1) % n1]
                    x ^= x << np.uint64(13)
                    x ^= x >> np.uint64(7)
                    x ^= x << np.uint64(17)
                    if (x >> np.uint64(11)) * 2.0 ** -53 < prob[(row[j] * h + 4) // 2]:
                        row[j] = -row[j]
                states[r] = x


@njit(parallel=True, cache=True)
def plain_3d(s, prob, states, sweeps):
    """:func:`plain_2d` on a periodic 3-D lattice (``prob[(s h + 6) // 2]``, one state
    per row of the last axis)."""
    n0, n1, n2 = s.shape
    for _ in range(sweeps):
        for c in range(2):
            for q in prange(n0 * n1):
                a, b = q // n1, q % n1
                x = states[q]
                s0, s1 = s[(a - 1) % n0, b], s[(a + 1) % n0, b]
                s2, s3, row = s[a, (b - 1) % n1], s[a, (b + 1) % n1], s[a, b]
                for j in range((a + b + c) % 2, n2, 2):
                    h = s0[j] + s1[j] + s2[j] + s3[j] + row[j - 1] + row[(j + 1) % n2]
                    x ^= x << np.uint64(13)
                    x ^= x >> np.uint64(7)
                    x ^= x << np.uint64(17)
                    if (x >> np.uint64(11)) * 2.0 ** -53 < prob[(row[j] * h + 6) // 2]:
                        row[j] = -row[j]
                states[q] = x


def plain_tables(shape, beta):
    """``(prob, states)`` for :func:`plain_2d` / :func:`plain_3d`."""
    k = 2 * len(shape)
    prob = np.minimum(1.0, np.exp(-2.0 * beta * np.arange(-k, k + 1, 2)))
    # one SplitMix64 output per row seeds its xorshift state (nearby seeds of a linear
    # generator would give correlated rows)
    x = np.arange(1, math.prod(shape[:-1]) + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return prob, (x ^ (x >> np.uint64(31))) | np.uint64(1)  # xorshift needs a nonzero state


def energy_and_m(s):
    """Energy per site (J = 1, periodic, nearest neighbours) and |m| per site, by NumPy."""
    bonds = sum(int((s.astype(np.int64) * np.roll(s, 1, axis=a)).sum()) for a in range(s.ndim))
    return -bonds / s.size, abs(int(s.sum(dtype=np.int64))) / s.size


# -- checks ----------------------------------------------------------------------------
def check_backends(log):
    """The same seed gives the same spins on every backend available here."""
    backends = ["numpy", "numba-cpu"]
    ok, why = cat.get_engine().backends().get("cuda", (False, "not registered"))
    backends += ["cuda"] if ok else []
    for shape in [(64, 64), (16, 16, 16)]:
        L = cat.Lattice(shape=shape, periodic=True)
        s0 = np.where(np.random.default_rng(1).random(shape) < 0.5, 1, -1).astype(np.int8)
        for method in ("metropolis", "heatbath"):
            kw = dict(beta=0.4, sweeps=5, seed=2**63 + 7, start=11, method=method)
            runs = {b: L.run("ising_sweep", s0, backend=b, **kw) for b in backends}
            for b, got in runs.items():
                if not np.array_equal(got, runs["numpy"]):
                    sys.exit(f"check failed: {b} and numpy differ on {shape}, {method}")
    log(f"- same seed, same spins: {', '.join(backends)} on 64^2 and 16^3, Metropolis and "
        f"heat bath{'' if ok else f' (cuda not checked: {why})'}")
    return ok


def check_physics(log, sweeps=200):
    """Both codes at equilibrium below T_c in 2-D (exact values) and 3-D (each other)."""
    rows = []
    for shape, T in [((1024, 1024), 2.0), ((128, 128, 128), 4.0)]:
        beta = 1.0 / T
        L = cat.Lattice(shape=shape, periodic=True)
        mine = L.run("ising_sweep", np.ones(shape, np.int8), beta=beta, sweeps=sweeps, seed=3)
        plain = np.ones(shape, np.int8)
        (plain_2d if len(shape) == 2 else plain_3d)(plain, *plain_tables(shape, beta), sweeps)
        (e1, m1), (e2, m2) = energy_and_m(mine), energy_and_m(plain)
        if len(shape) == 2:
            want = (ci.onsager_energy(T), ci.onsager_magnetisation(T))
            # a 1024^2 configuration at T = 2 fluctuates by ~1e-3 per site
            good = all(abs(e - want[0]) < 0.01 and abs(m - want[1]) < 0.01
                       for e, m in ((e1, m1), (e2, m2)))
            ref = f"exact {want[0]:.4f}, {want[1]:.4f}"
        else:
            # the same ordered state: a 128^3 configuration at T = 4 fluctuates by a few
            # 1e-3 per site, and xorshift's rows by somewhat more
            good = abs(e1 - e2) < 0.02 and abs(m1 - m2) < 0.02 and min(m1, m2) > 0.5
            ref = "each other"
        if not good:
            sys.exit(f"check failed on {shape} at T = {T}: ising_sweep e={e1:.4f} |m|={m1:.4f}, "
                     f"plain e={e2:.4f} |m|={m2:.4f}, against {ref}")
        rows.append(f"- {'x'.join(map(str, shape))} at T = {T}, {sweeps} sweeps from all up: "
                    f"energy, |m| per site: ising_sweep {e1:.4f}, {m1:.4f}; plain {e2:.4f}, "
                    f"{m2:.4f}; against {ref}")
    for r in rows:
        log(r)


# -- timing ----------------------------------------------------------------------------
def measure(shape, beta, sweeps, repeats, backend=None):
    """``(best plain, best ising_sweep, median ratio)`` in flips per ns, interleaved."""
    L = cat.Lattice(shape=shape, periodic=True)
    plain_fn = plain_2d if len(shape) == 2 else plain_3d
    prob, states = plain_tables(shape, beta)
    rng = np.random.default_rng(0)
    plain = np.where(rng.random(shape) < 0.5, 1, -1).astype(np.int8)
    mine = plain.copy()
    flips = math.prod(shape) * sweeps
    best_p = best_m = 0.0
    ratios = []
    for rep in range(repeats):
        times = {}
        for who in (("plain", "mine") if rep % 2 == 0 else ("mine", "plain")):
            t0 = time.perf_counter()
            if who == "plain":
                plain_fn(plain, prob, states, sweeps)
            else:
                mine = L.run("ising_sweep", mine, beta=beta, sweeps=sweeps, seed=5,
                             start=rep * sweeps, backend=backend)
            times[who] = time.perf_counter() - t0
        best_p = max(best_p, flips / times["plain"] / 1e9)
        best_m = max(best_m, flips / times["mine"] / 1e9)
        ratios.append(times["plain"] / times["mine"])
    return best_p, best_m, statistics.median(ratios)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--threads", default="all,1")
    ap.add_argument("--output")
    args = ap.parse_args(argv)
    lines = []

    def log(s=""):
        print(s, flush=True)
        lines.append(s)

    default_threads = numba.get_num_threads()
    log("# ising_sweep against a plain Numba checkerboard\n\nChecks:")
    gpu = check_backends(log)
    check_physics(log)
    log(f"\n{platform.machine()}, {default_threads} Numba threads ({numba.threading_layer()} "
        f"layer), Python {platform.python_version()}, Numba {numba.__version__}, catalytic-ising "
        f"{ci.__version__}")
    log(f"\nMetropolis, periodic von Neumann lattices, {args.sweeps} sweeps a call, best of "
        f"{args.repeats} interleaved rounds (flips per ns; ratio = ising_sweep / plain):\n")
    log("| lattice | threads | plain | ising_sweep | ratio of bests | median ratio |")
    log("|---|---|---|---|---|---|")
    for threads in args.threads.split(","):
        n = default_threads if threads.strip() == "all" else int(threads)
        numba.set_num_threads(n)
        for shape, beta in [((1024, 1024), 0.44), ((128, 128, 128), 0.2217)]:
            p, m, med = measure(shape, beta, args.sweeps, args.repeats)
            log(f"| {'^'.join([str(shape[0]), str(len(shape))])} | {n} | {p:.3f} | {m:.3f} | "
                f"{m / p:.2f} | {med:.2f} |")
    numba.set_num_threads(default_threads)
    if gpu:
        for shape, beta in [((1024, 1024), 0.44), ((128, 128, 128), 0.2217)]:
            p, m, med = measure(shape, beta, args.sweeps, args.repeats, backend="cuda")
            log(f"| {shape[0]}^{len(shape)} | cuda | {p:.3f} (CPU) | {m:.3f} | {m / p:.2f} | "
                f"{med:.2f} |")
    else:
        log("\nNo GPU here: the cuda backend was not measured.")
    if args.output:
        with open(args.output, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
