"""Bond-masked distance fields against the same call without bonds, on numba-cpu.

    python benchmarks/bench_bond_traversals.py [--rounds 7] [--shapes 512x512 128x128x128]
                                               [--every-thread] [--no-bonds]

For each shape (von Neumann, open axes, mask at p = 0.9): ``distance_field`` from the
first site without bonds, with every bond open (given explicitly, so the bond loops
run), and with random bonds open at p = 0.7; the bond calls are timed warm (their
padded bond words already in the lattice's numba-cpu cache) and the first call that
builds them separately, and the size of those words is printed per bond. Calls
alternate between the variants, each figure the median of ``--rounds`` calls (JIT
compilation excluded by a warm-up call). The backend picks the
thread count of each call from the free CPUs; with ``--every-thread`` every call takes
all of Numba's threads (set ``NUMBA_NUM_THREADS`` to fix them). ``--no-bonds`` times
the call without bonds alone, the same work on any checkout. Run it with
``PYTHONPATH`` on another checkout to time that checkout's no-bond path in the same way
(its bond rows are skipped when the backend refuses bonds there).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import numpy as np

import catalytic as cat
from catalytic.backends import numba_cpu
from catalytic.errors import NoBackendError

CPU = "numba-cpu"


def _shape(text):
    return tuple(int(x) for x in text.split("x"))


def _time(func):
    t = time.perf_counter()
    func()
    return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--shapes", nargs="+", default=["512x512", "128x128x128"])
    ap.add_argument("--every-thread", action="store_true",
                    help="every call on all of Numba's threads, however busy the machine")
    ap.add_argument("--no-bonds", action="store_true", help="only the call without bonds")
    args = ap.parse_args(argv)
    with numba_cpu.every_thread() if args.every_thread else contextlib.nullcontext():
        _run(args)


def _cache_size(text, lat, kf):
    """Print the bytes the backend keeps for a lattice's bonds, per bond (edge)."""
    cells = (lat.backend_cache(CPU, create=False) or {}).get("padded_bonds")
    if cells is None:
        return
    bonds = kf * lat.n_points
    print(f"{text}: padded bond bytes kept per lattice {cells.bits.nbytes} B = "
          f"{8 * cells.bits.nbytes / bonds:.2f} bits per bond (the geometry's own copy: "
          f"{8 * lat.geometry.bond_bits.nbytes / bonds:.2f})")


def _run(args):
    for text in args.shapes:
        shape = _shape(text)
        rng = np.random.default_rng(0)
        mask = rng.random(shape) < 0.9
        mask.reshape(-1)[0] = True
        L = cat.Lattice(shape=shape, mask=mask)
        kf = len(L.bond_offsets)
        variants = {"no bonds": L}
        try:
            bonded = (("all bonds open", 1.0), ("bonds at 0.7", 0.7))
            for name, p in () if args.no_bonds else bonded:
                B = L.with_bonds(rng.random((kf,) + shape) < p)
                B.distance_field(0, backend=CPU)  # the backend refuses bonds before this change
                fresh = B.with_bonds(B.bonds)  # an empty cache
                first = _time(lambda: fresh.distance_field(0, backend=CPU))
                variants[name] = B
                print(f"{text} {name}: first call (builds the padded bond words) "
                      f"{first * 1e3:.1f} ms")
            if not args.no_bonds:
                _cache_size(text, B, kf)
        except NoBackendError:
            print(f"{text}: bonds refused on this checkout; timing the no-bond path only")
        L.distance_field(0, backend=CPU)
        times = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, lat in variants.items():
                times[name].append(_time(lambda lat=lat: lat.distance_field(0, backend=CPU)))
        base = statistics.median(times["no bonds"])
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"{text} {name}: median {med * 1e3:.1f} ms (min {min(ts) * 1e3:.1f}) "
                  f"= {med / base:.2f}x no bonds")


if __name__ == "__main__":
    main()
