"""The two numba-cpu labellings of equal values side by side: site by site
(``kernels.cpu.equal.label_equal``) and by runs (``kernels.cpu.values.label_values``),
on blocks of equal values with a share of background noise, and which one
``equal.prefer_runs`` picks. Answers compared first (the same labels).

The site scan reads the earlier plane again: near (256^3, 4096^2) it stays in a core's
cache, far (32 x 32 x 16384) it does not, and long runs there favour the runs.

    PYTHONPATH=$PWD python benchmarks/bench_equal_paths.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os

import numba
import numpy as np

import catalytic as cat
from _timing import best
from catalytic import catalogue
from catalytic.backends.numba_cpu import _background_key
from catalytic.kernels.cpu import equal, values

SHAPES = ((256, 256, 256), (4096, 4096), (32, 32, 16384))
NOISE = (0.0, 0.01, 0.1, 0.3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"numba threads {numba.get_num_threads()}, wall time, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| shape | noise | site by site | by runs | prefer_runs |\n|---|---|---|---|---|")
    for shape in SHAPES:
        g = cat.Lattice(shape=shape, stencil="von_neumann").geometry
        idx = np.indices(shape, dtype=np.int64)
        blocks = sum(idx[a] * 2 // n << a for a, n in enumerate(shape)).astype(np.uint32) + 1
        del idx
        for p in NOISE:
            v = blocks.copy()
            v[rng.random(shape) < p] = 0
            (_, keys, sites, _), _ = catalogue.v_label(cat.Lattice(shape=shape), v)
            bg = _background_key(g, keys, sites)
            a = g.shape_arr, g.periodic_arr, g.offsets, keys
            by_sites = equal.label_equal(*a, bg)
            by_runs = values.label_values(*a, sites, 0)
            if not (np.array_equal(by_sites[0], by_runs[0]) and by_sites[1] == by_runs[1]):
                raise AssertionError(f"{shape}, noise {p}: the two labellings disagree")
            ts = best(lambda: equal.label_equal(*a, bg), args.repeat)
            tr = best(lambda: values.label_values(*a, sites, 0), args.repeat)
            pick = equal.prefer_runs(g.offsets, shape, keys, sites)
            print(f"| {' x '.join(map(str, shape))} | {p:.0%} | {ts * 1e3:.0f} ms | "
                  f"{tr * 1e3:.0f} ms | {'runs' if pick else 'sites'} |")


if __name__ == "__main__":
    main()
