"""Point-to-point shortest paths (``Lattice.find_shortest_path``, corner to corner, von
Neumann stencil) against dijkstra3d's A* (``compass=True``) and bidirectional search,
measured in one run, path lengths compared first.

Issue 27's target: no row loses to dijkstra3d; at most 1.0x its best time at 48^3 and
0.5x at 256^3, unweighted and weighted. The benchmark suite's rows (``catalytic bench``)
are lattices without blocked sites, where catalytic reads the hops in closed form; the
rows with 10% of the sites blocked at random are the general case (one sweep for a
monotone path, else the search). Weights uniform in [1, 4). Times are medians of
``--repeat`` calls (dijkstra3d's bidirectional search at 256^3: of one). A dijkstra3d
path longer than catalytic's is shown as not shortest and is no competitor; one
shorter would stop the run.

    PYTHONPATH=$PWD python benchmarks/bench_point_to_point.py [--repeat 20] [--sizes 48,256]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import catalytic as cat
from _timing import median


def show(t):
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--sizes", default="48,256")
    args = ap.parse_args()
    import dijkstra3d

    print(f"wall time, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| lattice | costs | catalytic | dijkstra3d A* | bidirectional | ratio to the best "
          "|\n|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for side in map(int, args.sizes.split(",")):
        shape = (side,) * 3
        n = side ** 3
        end = (side - 1,) * 3
        for blocked in (0.0, 0.1):
            mask = rng.random(shape) >= blocked
            mask[0, 0, 0] = mask[end] = True
            for weighted in (False, True):
                w = rng.uniform(1.0, 4.0, shape) if weighted else None
                L = cat.Lattice(shape=shape, mask=None if blocked == 0 else mask, weights=w)
                field = np.where(mask, 1.0 if w is None else w, np.inf).astype(np.float32)
                ours = L.find_shortest_path(0, n - 1)
                repeat = args.repeat if side < 128 else max(3, args.repeat // 5)
                row = [show(median(lambda: L.find_shortest_path(0, n - 1), repeat))]
                times = []
                for opts in ({"compass": True}, {"bidirectional": True}):
                    def call():
                        return dijkstra3d.dijkstra(field, (0, 0, 0), end, connectivity=6,
                                                   **opts)
                    p = call()
                    length = len(p) - 1 if w is None else float(w[tuple(p[1:].T)].sum())
                    tol = 1e-4 * max(ours.distance, 1)  # dijkstra3d sums in float32
                    if length < ours.distance - tol:
                        raise AssertionError(f"{shape} {opts}: dijkstra3d's path ({length}) "
                                             f"is shorter than catalytic's "
                                             f"({ours.distance})")
                    t = median(call, repeat if side < 128 or "compass" in opts else 1)
                    if length > ours.distance + tol:  # no competitor: not a shortest path
                        row.append(f"{show(t)} (not shortest: {length:.2f})")
                        continue
                    times.append(t)
                    row.append(show(t))
                ratio = median(lambda: L.find_shortest_path(0, n - 1), repeat) / min(times)
                print(f"| {side}^3, {int(blocked * 100)}% blocked | "
                      f"{'weighted' if weighted else 'hops'} | " + " | ".join(row)
                      + f" | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
