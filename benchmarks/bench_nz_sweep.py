"""Cost of a Newman-Ziff sweep against one labelling of the same lattice (issue 25,
"Cost of a sweep": a full sweep at most 3x a ``connected_components`` labelling).

For each lattice (periodic, von Neumann): one sweep of site and of bond percolation,
with every observable recorded at every n and events-only (``observables=()``, stopping
once every event is found), through the kernel's host function
``kernels.cpu.newman_ziff.sweeps``, against ``kernels.cpu.components.connected_components``
on the lattice at the site threshold. Single thread: one sweep a call. All threads: as
many sweeps a call as threads, time per sweep, against one labelling (itself parallel).
Times are the best of ``--repeat`` rounds, the calls of a round interleaved, so a change
of load reaches all of them alike; read the ratios.

The row "random-order floor" is a lower bound on any sweep that adds the sites in a
random order, as Newman-Ziff does by definition: for each site of a sweep's order (made
beforehand, not timed) it checks its neighbours in a byte map of occupied sites, reads
the 12-byte union-find rows of the occupied ones only (a join must at least read those
to find their clusters) and marks its own, with no root search and no observables.
Where that floor is already above 3x the labelling, no random-order sweep meets the
target on this machine.

    PYTHONPATH=$PWD python benchmarks/bench_nz_sweep.py [--repeat 5] [--sizes 256 512 128^3]
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

import catalytic as cat
from catalytic.kernels.cpu import components as CC
from catalytic.kernels.cpu import newman_ziff as nz

P_C = {2: 0.592746, 3: 0.3116077}


@numba.njit(cache=True, nogil=True)
def _touch(st, occ, order, shape, strides):
    """For each site of ``order``: look its von Neumann neighbours (periodic) up in the
    occupied map ``occ``, read the rows of the occupied ones, mark its own row and map
    entry; the memory traffic every random-order sweep needs."""
    d = shape.shape[0]
    acc = 0
    for t in range(order.shape[0]):
        s = order[t]
        rem = s
        for a in range(d):
            x = rem // strides[a]
            rem -= x * strides[a]
            for step in (-1, 1):
                y = x + step
                j = s + step * strides[a]
                if y < 0:
                    j += shape[a] * strides[a]
                elif y >= shape[a]:
                    j -= shape[a] * strides[a]
                if occ[j]:
                    acc += st[j, 0] + st[j, 1] + st[j, 2]
        st[s, 0] = s
        st[s, 1] = 1
        occ[s] = 1
    return acc


@numba.njit(cache=True, nogil=True, parallel=True)
def _touch_floor(state, occ, orders, shape, strides):
    """One random-order touch pass per row of ``orders``, rows shared out over threads."""
    total = 0
    for q in numba.prange(orders.shape[0]):
        occ[q, :] = 0
        total += _touch(state[q], occ[q], orders[q], shape, strides)
    return total


def together(fs, repeat):
    """The best time of each of ``fs`` over ``repeat`` interleaved rounds."""
    for f in fs:
        f()
    times = [[] for _ in fs]
    for _ in range(repeat):
        for f, ts in zip(fs, times):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
    return [min(ts) for ts in times]


def lattice(size):
    shape = tuple(int(x) for x in size.split("^")[0].split("x")) if "x" in size else None
    if shape is None:
        side, _, dim = size.partition("^")
        shape = (int(side),) * int(dim or 2)
    return shape


def run(shape, threads, repeat):
    numba.set_num_threads(threads)
    L = cat.Lattice(shape=shape, periodic=True)
    g = L.geometry
    bs, bits, words, _ = g.bond_args()
    rng = np.random.default_rng(0)
    M = cat.Lattice(shape=shape, periodic=True, mask=rng.random(shape) < P_C[len(shape)])
    k = M.geometry.kernel_args()
    calls = [lambda: CC.connected_components(*k)]
    names = ["labelling at p_c"]
    for kind in ("site", "bond"):
        for obs, label in ((nz.OBSERVABLES, "all observables"), ((), "events only")):
            calls.append(lambda kind=kind, obs=obs: nz.sweeps(
                kind, g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, bs, bits, words,
                threads, 1, observables=obs, threads=threads))
            names.append(f"{kind} sweep, {label}")
    n = int(np.prod(shape))
    orders = np.stack([nz.sample_order(7, b, n, np.arange(n)) for b in range(threads)])
    state = np.zeros((threads, n, 3), dtype=np.int32)
    occ = np.zeros((threads, n), dtype=np.uint8)
    strides = np.array([int(np.prod(shape[a + 1:])) for a in range(len(shape))], np.int64)
    shp = np.array(shape, dtype=np.int64)
    calls.append(lambda: _touch_floor(state, occ, orders, shp, strides))
    names.append("random-order floor (no union-find)")
    times = together(calls, repeat)
    lab = times[0]
    tag = "x".join(map(str, shape))
    for name, t in zip(names, times):
        per = t if name.startswith("labelling") else t / threads
        print(f"| {tag} | {threads} | {name} | {per * 1e3:.2f} ms | {per / n * 1e9:.0f} ns "
              f"| {per / lab:.2f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", nargs="*", default=["256", "512", "128^3"])
    ap.add_argument("--threads", nargs="*", type=int,
                    default=sorted({1, numba.config.NUMBA_NUM_THREADS}))
    a = ap.parse_args()
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}\n")
    print("| lattice | threads | call | time (per sweep) | per site | vs labelling |")
    print("|---|---|---|---|---|---|")
    for th in a.threads:
        for size in a.sizes:
            run(lattice(size), th, a.repeat)


if __name__ == "__main__":
    main()
