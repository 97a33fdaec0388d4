"""The exact Euclidean distance transform (``Lattice.distance_transform``) against the
``edt`` package (C++, threaded: given Numba's thread count) and SciPy's
``distance_transform_edt``, measured in one run, answers compared first.

Issue 27's targets: at most 0.8x edt's time with the same number of threads, and at
most 0.1x SciPy's, at 512^2, 2048^2 and 256^3 with 30% features. edt returns float32, so
catalytic is timed with ``dtype=float32`` against it and with float64 (SciPy's type)
against SciPy. The labels row (4 values at random, edt's multi-label mode) is not a
target. Times are the best of ``--repeat`` calls (SciPy: of one, at 256^3 it takes
seconds), with the thread count and load average printed beside them.

    PYTHONPATH=$PWD python benchmarks/bench_edt.py [--repeat 5] [--sizes 512,2048,256x3]
"""

from __future__ import annotations

import argparse
import os

import numba
import numpy as np
import scipy.ndimage as ndi

import catalytic as cat
from _timing import best


def shape_of(text):
    """``512`` -> (512, 512); ``256x3`` -> (256, 256, 256)."""
    side, _, d = text.partition("x")
    return (int(side),) * int(d or 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="512,2048,256x3")
    args = ap.parse_args()
    import edt

    threads = numba.get_num_threads()
    print(f"numba threads {threads} (edt parallel={threads}), wall time, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| image | edt | catalytic float32 | ratio | SciPy | catalytic float64 | ratio |\n"
          "|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for text in args.sizes.split(","):
        shape = shape_of(text)
        L = cat.Lattice(shape=shape)
        inside = rng.random(shape) >= 0.3  # 30% features
        ours32 = lambda: L.distance_transform(~inside, dtype=np.float32,  # noqa: E731
                                              backend="numba-cpu")
        ours64 = lambda: L.distance_transform(~inside, backend="numba-cpu")  # noqa: E731
        theirs = lambda: edt.edt(inside, black_border=False, parallel=threads)  # noqa: E731
        sp = lambda: ndi.distance_transform_edt(inside)  # noqa: E731
        want = sp()
        if not (np.array_equal(ours64(), want)
                and np.allclose(ours32(), theirs(), rtol=1e-6)):
            raise AssertionError(f"{shape}: catalytic, edt and SciPy disagree")
        te, t32 = best(theirs, args.repeat), best(ours32, args.repeat)
        ts, t64 = best(sp, 1), best(ours64, args.repeat)
        name = " x ".join(map(str, shape))
        print(f"| {name}, 30% features | {te * 1e3:.1f} ms | {t32 * 1e3:.1f} ms | "
              f"{t32 / te:.2f}x | {ts * 1e3:.0f} ms | {t64 * 1e3:.1f} ms | {t64 / ts:.3f}x |")
        if len(shape) == 3:
            labels = rng.integers(0, 4, size=shape).astype(np.uint32)
            mine = lambda: L.distance_transform(values=labels, dtype=np.float32,  # noqa: E731
                                                backend="numba-cpu")
            other = lambda: edt.edt(labels, black_border=False, parallel=threads)  # noqa: E731
            if not np.allclose(mine(), other(), rtol=1e-6):
                raise AssertionError(f"{shape} labels: catalytic and edt disagree")
            te, tm = best(other, args.repeat), best(mine, args.repeat)
            print(f"| {name}, 4 labels | {te * 1e3:.1f} ms | {tm * 1e3:.1f} ms | "
                  f"{tm / te:.2f}x | | | |")


if __name__ == "__main__":
    main()
