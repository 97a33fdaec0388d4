"""Euclidean geodesic distance fields (``Lattice.distance_field`` with ``spacing=`` on a
Moore lattice) against dijkstra3d's ``euclidean_distance_field``, measured in one run,
answers compared first.

Issue 27's target: at most 0.7x dijkstra3d's time at 128^3 and 256^3. Both are serial
searches (dijkstra3d has no threads); the image is 10% blocked at random, one source in
a corner, isotropic and anisotropic spacings. dijkstra3d sums in float32, catalytic in
float64: the fields are compared within float32 rounding. Times are the best of
``--repeat`` calls, with the load average printed beside them.

    PYTHONPATH=$PWD python benchmarks/bench_geodesic.py [--repeat 3] [--sizes 128,256]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import catalytic as cat
from _timing import best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="128,256")
    args = ap.parse_args()
    import dijkstra3d

    print(f"wall time, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| image | spacing | dijkstra3d | catalytic | ratio |\n|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for side in map(int, args.sizes.split(",")):
        shape = (side,) * 3
        inside = rng.random(shape) >= 0.1
        src = (0, 0, 0)
        inside[src] = True
        L = cat.Lattice(shape=shape, stencil="moore", mask=inside)
        for spacing in ((1.0, 1.0, 1.0), (1.0, 1.0, 2.5)):
            ours = lambda: L.distance_field(src, spacing=spacing,  # noqa: E731
                                            backend="numba-cpu")
            theirs = lambda: dijkstra3d.euclidean_distance_field(  # noqa: E731
                inside, source=src, anisotropy=spacing)
            got, want = ours(), theirs()
            reached = np.isfinite(got)
            if not (np.array_equal(reached, np.isfinite(want) & inside)
                    and np.allclose(got[reached], want[reached], rtol=1e-5)):
                raise AssertionError(f"{shape} {spacing}: catalytic and dijkstra3d disagree")
            t3 = best(theirs, args.repeat)
            tc = best(ours, args.repeat)
            print(f"| {side}^3, 10% blocked | {spacing} | {t3:.3f} s | {tc:.3f} s | "
                  f"{tc / t3:.2f}x |")


if __name__ == "__main__":
    main()
