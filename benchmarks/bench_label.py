"""Multi-label and continuous-value labelling (``Lattice.label``) against cc3d, measured
in one run, answers compared first (the same partition).

Issue 26's targets: at most 0.8x cc3d's time on 256^3 label images with few large
regions and with many small ones, connectivity 6 and 26, and with ``delta`` on
continuous values. Times are the best of ``--repeat`` calls (wall, or with
``--cpu-time`` this thread's CPU time: use it with ``NUMBA_NUM_THREADS=1`` on a busy
machine), with the thread count and load average printed beside them.

    PYTHONPATH=$PWD python benchmarks/bench_label.py [--size 256] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

import catalytic as cat
from catalytic.tools.bench import same_partition

CLOCK = [time.perf_counter]


def best(f, repeat):
    f()
    out = []
    for _ in range(repeat):
        t0 = CLOCK[0]()
        f()
        out.append(CLOCK[0]() - t0)
    return min(out)


def images(n, seed=0):
    """(name, values, delta) cases of an n^3 image: few large regions (blocks of 8 labels
    with 10% noise), many small ones (4 labels at random), continuous values."""
    rng = np.random.default_rng(seed)
    idx = np.indices((n, n, n), dtype=np.int32)
    few = (idx[0] * 2 // n * 4 + idx[1] * 2 // n * 2 + idx[2] * 2 // n + 1).astype(np.uint32)
    few[rng.random(few.shape) < 0.1] = 0
    many = rng.integers(0, 4, size=(n, n, n), dtype=np.uint32)
    smooth = np.cumsum(rng.normal(size=(n, n, n)).astype(np.float32), axis=2)
    smooth /= np.abs(smooth).max()
    return [("few large regions", few, 0), ("many small regions", many, 0),
            ("continuous, delta 0.05", smooth, 0.05)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu-time", action="store_true")
    args = ap.parse_args()
    import cc3d

    if args.cpu_time:
        CLOCK[0] = time.thread_time
    n = args.size
    print(f"numba threads {numba.get_num_threads()}, "
          f"{'CPU time' if args.cpu_time else 'wall time'}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| image | connectivity | cc3d | catalytic | ratio |\n|---|---|---|---|---|")
    for conn, stencil in ((6, "von_neumann"), (26, "moore")):
        L = cat.Lattice(shape=(n, n, n), stencil=stencil)
        for name, values, delta in images(n):
            ours = L.label(values, delta=delta, backend="numba-cpu")
            theirs = cc3d.connected_components(values, connectivity=conn, delta=delta)
            if not same_partition(ours.labels, theirs):
                raise AssertionError(f"{name}, connectivity {conn}: cc3d and catalytic "
                                     "disagree")
            tc = best(lambda: cc3d.connected_components(values, connectivity=conn,
                                                        delta=delta), args.repeat)
            to = best(lambda: L.label(values, delta=delta, backend="numba-cpu"), args.repeat)
            print(f"| {n}^3 {name} | {conn} | {tc * 1e3:.0f} ms | {to * 1e3:.0f} ms | "
                  f"{to / tc:.2f}x |")


if __name__ == "__main__":
    main()
