"""Components with bonds and wrapping on numba-cpu, measured in one run.

1. Wrapping as cheap as labelling: ``spanning_clusters((0, 1))`` on a 128^2 torus at the
   site threshold against ``connected_components`` of the same lattice (routed calls,
   and the kernels' host functions alone), single and batched (B lattices a call), and
   the host winding check (``backends._common.wrapping_labels``) that the kernel
   replaced.
2. Bond-masked components against the same call without bonds at 512^2 and 128^3
   (every site open; bonds open with probability ``--p-bond``, and all open).
3. The same bond graphs against the specialist: bond-masked components of every open
   site (open axes) against cc3d's ``color_connectivity_graph`` of the equivalent voxel
   connectivity graph, answers compared first, on Numba's threads and on one (cc3d
   runs on one).
4. ``--no-bonds``: calls on lattices without bonds, the same on any checkout (run it
   with ``PYTHONPATH`` at an older tree for the times before a change).
5. ``--cuda``: the rows of 1 on the cuda backend (routed calls; a GPU).
6. ``--tori N``: N 128^2 tori at p_c through ``batched.spanning_clusters`` on numba-cpu,
   their wrapping probabilities against the exact values of the infinite torus (Pinson,
   J. Stat. Phys. 75, 1167 (1994); Newman and Ziff, PRE 64, 016706 (2001)), in standard
   errors.

Times are the best of ``--repeat`` rounds (each the mean of a few calls), with the
thread count and load average printed beside them: on a busy machine read the ratios,
taken in the same run, rather than the absolute times, or use ``--cpu-time`` with one
Numba thread.

    PYTHONPATH=$PWD python benchmarks/bench_bonds_components.py [--tori 20000]
    NUMBA_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/bench_bonds_components.py --cpu-time
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

import catalytic as cat
from catalytic.backends import _common as C
from catalytic.kernels.cpu import components as CC

P_C = 0.59274621
#: wrapping probabilities of the infinite square torus at p_c (axis 0, either, both)
EXACT = {"axis 0": 0.521058290, "either": 0.690473725, "both": 0.351642855}
B_ROUTE = "numba-cpu"


#: the clock: wall time, or with --cpu-time this thread's CPU time (with
#: NUMBA_NUM_THREADS=1 the kernels run on the calling thread, and time spent waiting for
#: a core on a busy machine is not counted)
CLOCK = [time.perf_counter]


def best(f, repeat, number):
    return together([f], repeat, number)[0]


def together(fs, repeat, number):
    """The best time of each of ``fs``, their rounds interleaved (so a change of load
    reaches every one of them alike)."""
    for f in fs:
        f()
    times = [[] for _ in fs]
    for _ in range(repeat):
        for f, ts in zip(fs, times):
            t0 = CLOCK[0]()
            for _ in range(number):
                f()
            ts.append((CLOCK[0]() - t0) / number)
    return [min(ts) for ts in times]


def row(name, t, base=None):
    ratio = "" if base is None else f" | {t / base:.2f}x"
    print(f"| {name} | {t * 1e3:.3f} ms{ratio} |")


def wrapping(repeat, batch):
    from catalytic.kernels.cpu.winding import label_windings

    rng = np.random.default_rng(0)
    mask = rng.random((128, 128)) < P_C
    L = cat.Lattice(shape=(128, 128), periodic=True, mask=mask)
    g = L.geometry
    k = g.kernel_args()
    eng = cat.get_engine()
    print("\n## wrapping vs labelling, 128^2 torus at p_c (von Neumann)\n")
    print("| call | time | vs labelling |\n|---|---|---|")
    lab, wrap, rlab, rspan = together([
        lambda: CC.connected_components(*k, sizes=True),
        lambda: label_windings(*k[:4], *g.bond_args()[:3], (0, 1)),
        lambda: L.connected_components(backend=B_ROUTE),
        lambda: L.spanning_clusters((0, 1), backend=B_ROUTE)], repeat, 50)
    row("kernel: components.connected_components (labelling)", lab)
    row("kernel: winding.label_windings, axes (0, 1)", wrap, lab)
    labels = CC.connected_components(*k)[0].reshape(g.shape)
    row("host winding check: _common.spanning_clusters (before)",
        best(lambda: C.spanning_clusters(g, labels, (0, 1)), repeat, 5), lab)
    row("routed: L.connected_components", rlab)
    row("routed: L.spanning_clusters((0, 1))", rspan, rlab)
    stack = rng.random((batch, 128, 128)) < P_C
    blab, bspan = (t / batch for t in together([
        lambda: eng.run("batched.connected_components", L, stack, backend=B_ROUTE),
        lambda: eng.run("batched.spanning_clusters", L, stack, axes=(0, 1),
                        backend=B_ROUTE)], repeat, 3))
    row(f"routed batched.connected_components, per lattice (B={batch})", blab)
    row(f"routed batched.spanning_clusters((0, 1)), per lattice (B={batch})", bspan, blab)


def wrapping_cuda(repeat, batch):
    """The rows of :func:`wrapping` on the cuda backend (``--cuda``, a GPU): the
    wrapping of ``kernels.cuda.winding`` against the labelling it starts from."""
    rng = np.random.default_rng(0)
    L = cat.Lattice(shape=(128, 128), periodic=True, mask=rng.random((128, 128)) < P_C)
    eng = cat.get_engine()
    print("\n## wrapping vs labelling on cuda, 128^2 torus at p_c (von Neumann)\n")
    print("| call | time | vs labelling |\n|---|---|---|")
    rlab, rspan = together([
        lambda: L.connected_components(backend="cuda"),
        lambda: L.spanning_clusters((0, 1), backend="cuda")], repeat, 50)
    row("routed: L.connected_components", rlab)
    row("routed: L.spanning_clusters((0, 1))", rspan, rlab)
    stack = rng.random((batch, 128, 128)) < P_C
    blab, bspan = (t / batch for t in together([
        lambda: eng.run("batched.connected_components", L, stack, backend="cuda"),
        lambda: eng.run("batched.spanning_clusters", L, stack, axes=(0, 1),
                        backend="cuda")], repeat, 3))
    row(f"routed batched.connected_components, per lattice (B={batch})", blab)
    row(f"routed batched.spanning_clusters((0, 1)), per lattice (B={batch})", bspan, blab)


def bonds(repeat, p_bond):
    print(f"\n## components with bonds vs without (routed connected_components, "
          f"{B_ROUTE}, periodic)\n")
    print("| lattice | sites open | bonds | time | vs no bonds |\n|---|---|---|---|---|")
    for shape, p_site in (((512, 512), 1.0), ((512, 512), 0.6), ((128, 128, 128), 1.0),
                          ((128, 128, 128), 0.35)):
        rng = np.random.default_rng(1)
        L = cat.Lattice(shape=shape, periodic=True, mask=rng.random(shape) < p_site)
        kf = len(L.bond_offsets)
        name = "x".join(map(str, shape)) + f" | {p_site}"
        cases = ((f"random, p = {p_bond}", L.with_bonds(rng.random((kf,) + shape) < p_bond)),
                 ("all open", L.with_bonds(np.ones((kf,) + shape, bool))))
        base, *times = together([lambda M=M: M.connected_components(backend=B_ROUTE)
                                 for M in (L,) + tuple(M for _, M in cases)], repeat, 3)
        row(f"{name} | none", base)
        for (label, _), t in zip(cases, times):
            row(f"{name} | {label}", t, base)


def voxel_graph(bonds, offsets):
    """cc3d's voxel connectivity graph of von Neumann ``bonds`` on open axes: bit 2a of
    a voxel is its step +1 along axis a, bit 2a + 1 its step -1."""
    d = bonds.ndim - 1
    vcg = np.zeros(bonds.shape[1:], np.uint8)
    for plane, off in zip(bonds, offsets):
        a = int(np.flatnonzero(off)[0])
        fwd = plane.copy()
        fwd[(slice(None),) * a + (-1,)] = False  # a bond leaving an open axis is none
        vcg |= fwd.astype(np.uint8) << (2 * a)
        vcg |= np.roll(fwd, 1, axis=a).astype(np.uint8) << (2 * a + 1)
    return vcg if d == 2 else np.asfortranarray(vcg)


def peer(repeat, p_bond):
    try:
        import cc3d
    except ImportError:
        print("\n(cc3d is not installed: pip install connected-components-3d)")
        return
    from catalytic.tools.bench import same_partition

    print(f"\n## the same bond graph: catalytic against cc3d.color_connectivity_graph "
          f"(every site open, open axes, bonds at {p_bond})\n")
    print("| lattice | call | time | vs cc3d |\n|---|---|---|---|")
    threads = numba.get_num_threads()
    for shape in ((512, 512), (1024, 1024), (128, 128, 128)):
        rng = np.random.default_rng(1)
        L = cat.Lattice(shape=shape)
        b = rng.random((len(L.bond_offsets),) + shape) < p_bond
        M = L.with_bonds(b)
        vcg = voxel_graph(b, L.bond_offsets)
        conn = 4 if len(shape) == 2 else 6
        ours = M.connected_components(backend=B_ROUTE)
        theirs = cc3d.color_connectivity_graph(vcg, connectivity=conn)
        if not same_partition(ours.labels, theirs):
            raise AssertionError(f"{shape}: catalytic and cc3d disagree")

        def one_thread():
            numba.set_num_threads(1)
            try:
                M.connected_components(backend=B_ROUTE)
            finally:
                numba.set_num_threads(threads)

        tc, t2, t1, t0 = together([
            lambda: cc3d.color_connectivity_graph(vcg, connectivity=conn),
            lambda: M.connected_components(backend=B_ROUTE), one_thread,
            lambda: L.connected_components(backend=B_ROUTE)], repeat, 3)
        name = "x".join(map(str, shape))
        print(f"| {name} | cc3d (one thread) | {tc * 1e3:.3f} ms | 1.00x |")
        print(f"| {name} | catalytic without bonds, {threads} thread(s) (the floor's "
              f"scale) | {t0 * 1e3:.3f} ms | {t0 / tc:.2f}x |")
        if threads > 1:
            print(f"| {name} | catalytic, {threads} threads | {t2 * 1e3:.3f} ms | "
                  f"{t2 / tc:.2f}x |")
        print(f"| {name} | catalytic, 1 thread | {t1 * 1e3:.3f} ms | {t1 / tc:.2f}x |")


def no_bonds(repeat):
    rng = np.random.default_rng(0)
    T = cat.Lattice(shape=(128, 128), periodic=True, mask=rng.random((128, 128)) < P_C)
    S = cat.Lattice(shape=(512, 512), mask=rng.random((512, 512)) < 0.6)
    K = cat.Lattice(shape=(128,) * 3, mask=rng.random((128,) * 3) < 0.3116)
    f = rng.normal(size=(512, 512))
    stack = rng.random((32, 128, 128)) < P_C
    eng = cat.get_engine()
    cases = {
        "128^2 torus at p_c: connected_components": lambda: T.connected_components(
            backend=B_ROUTE),
        "128^2 torus at p_c: spanning_clusters((0, 1))": lambda: T.spanning_clusters(
            (0, 1), backend=B_ROUTE),
        "128^2 torus at p_c: batched.spanning_clusters((0, 1)), B = 32 (per call)":
            lambda: eng.run("batched.spanning_clusters", T, stack, axes=(0, 1),
                            backend=B_ROUTE),
        "512^2 open, p = 0.6: connected_components": lambda: S.connected_components(
            backend=B_ROUTE),
        "512^2 open, p = 0.6: spanning_clusters((0, 1))": lambda: S.spanning_clusters(
            (0, 1), backend=B_ROUTE),
        "128^3 open, p = 0.3116: connected_components": lambda: K.connected_components(
            backend=B_ROUTE),
        "512^2 open, p = 0.6: degree": lambda: S.degree(backend=B_ROUTE),
        "512^2 open, p = 0.6: laplacian": lambda: S.laplacian(f, backend=B_ROUTE),
    }
    print(f"\n## without bonds ({cat.__file__})\n")
    print("| call | time |\n|---|---|")
    for (name, _), t in zip(cases.items(), together(list(cases.values()), repeat, 3)):
        row(name, t)


def tori(count, chunk):
    eng = cat.get_engine()
    L = cat.Lattice(shape=(128, 128), periodic=True)
    rng = np.random.default_rng(2026)
    hits = {k: 0 for k in EXACT}
    t0 = time.perf_counter()
    for lo in range(0, count, chunk):
        stack = rng.random((min(chunk, count - lo), 128, 128)) < P_C
        for s in eng.run("batched.spanning_clusters", L, stack, axes=(0, 1),
                         backend=B_ROUTE):
            w0, w1 = bool(s.clusters[0].size), bool(s.clusters[1].size)
            hits["axis 0"] += w0
            hits["either"] += w0 or w1
            hits["both"] += w0 and w1
    took = time.perf_counter() - t0
    print(f"\n## {count} tori 128^2 at p_c through batched.spanning_clusters "
          f"({B_ROUTE}, {took:.1f} s)\n")
    print("| wrapping | measured | exact | standard errors |\n|---|---|---|---|")
    for k, exact in EXACT.items():
        r = hits[k] / count
        se = np.sqrt(r * (1 - r) / count)
        print(f"| {k} | {r:.5f} +- {se:.5f} | {exact:.6f} | {(r - exact) / se:+.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--p-bond", type=float, default=0.6)
    ap.add_argument("--tori", type=int, default=0)
    ap.add_argument("--cuda", action="store_true",
                    help="also the wrapping rows on the cuda backend (needs a GPU)")
    ap.add_argument("--skip", nargs="*", default=(), choices=("wrapping", "bonds", "peer"))
    ap.add_argument("--no-bonds", action="store_true",
                    help="only the calls without bonds (runs on older checkouts too)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time this thread's CPU time (use with NUMBA_NUM_THREADS=1)")
    args = ap.parse_args()
    if args.cpu_time:
        CLOCK[0] = time.thread_time
    print(f"numba threads {numba.get_num_threads()}, "
          f"{'CPU time' if args.cpu_time else 'wall time'}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.no_bonds:
        no_bonds(args.repeat)
        return
    if "wrapping" not in args.skip:
        wrapping(args.repeat, args.batch)
        if args.cuda:
            wrapping_cuda(args.repeat, args.batch)
    if "bonds" not in args.skip:
        bonds(args.repeat, args.p_bond)
    if "peer" not in args.skip:
        peer(args.repeat, args.p_bond)
    if args.tori:
        tori(args.tori, 500)


if __name__ == "__main__":
    main()
