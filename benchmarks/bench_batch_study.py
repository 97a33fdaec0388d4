"""A site-percolation study as a batch: components and spanning clusters of an ensemble.

    python benchmarks/bench_batch_study.py [--output reports/batch_study.md]
                                           [--samples 200] [--dask-samples 2000] [--no-dask]

(also run by ``python benchmarks/bench_batch.py --study``, whose report it joins)

Part 1, measured in this run on this machine: ``--samples`` lattices of 128 x 128 (open
axes, von Neumann) at p = 0.6, labelled with the spanning clusters along both axes:

* batched: ``BatchProcessor(lattices).map("spanning_clusters", axes=(0, 1))``, which
  stacks the masks and runs the routed twin ``batched.spanning_clusters``;
* a Python loop of single routed calls, ``L.spanning_clusters((0, 1))``, and the loop the
  study used before (``L.connected_components()`` then ``L.percolates(0)``);
* a loop of ``scipy.ndimage.label`` over the same masks plus the same spanning check in
  NumPy (labels on both faces, intersected); and ``cc3d.connected_components`` the same
  way when connected-components-3d is installed.

Every variant starts from the same list of lattices (or their masks) and every result
is checked against the batched one. Times: the best of 5 rounds (after a warm-up).
Building the lattices (``base.with_mask(m)``) is timed on its own.

Part 2: the same study with ``--dask-samples`` lattices of 256 x 256 on a
``LocalCluster`` of 2 single-threaded worker processes (loopback), against the serial
executor (whose kernel uses both cores), with the cluster already running; and the
cluster start-up on its own. Reported as measured, ratio included.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np
from scipy import ndimage

import catalytic as cat


def best(func, rounds=5):
    func()  # warm-up: JIT, caches
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return min(times)


def face_spanning(labels, axis):
    lo = np.take(labels, 0, axis=axis)
    hi = np.take(labels, -1, axis=axis)
    return np.intersect1d(lo[lo > 0], hi[hi > 0])


def ensemble(samples, shape, p=0.6, seed=0):
    rng = np.random.default_rng(seed)
    masks = rng.random((samples,) + shape) < p
    base = cat.Lattice(shape=shape)
    return base, masks


def part1(samples):
    shape = (128, 128)
    base, masks = ensemble(samples, shape)
    lats = [base.with_mask(m) for m in masks]
    out = {}
    out["build: base.with_mask(m) for every mask"] = best(lambda: [base.with_mask(m) for m in masks])
    out["build: cat.Lattice(shape, mask=m) for every mask"] = best(
        lambda: [cat.Lattice(shape=shape, mask=m) for m in masks])

    bp = cat.BatchProcessor(lats, progress=False, batched=True)
    batched = bp.map("spanning_clusters", axes=(0, 1))
    out["batched: BatchProcessor.map('spanning_clusters', axes=(0, 1))"] = best(
        lambda: bp.map("spanning_clusters", axes=(0, 1)))
    stats = bp.stats()

    single = [L.spanning_clusters((0, 1)) for L in lats]
    out["loop: L.spanning_clusters((0, 1))"] = best(
        lambda: [L.spanning_clusters((0, 1)) for L in lats])
    out["loop: L.connected_components(); L.percolates(0)"] = best(
        lambda: [(L.connected_components(), L.percolates(0)) for L in lats])

    def nd_loop():
        res = []
        for m in masks:
            labels, count = ndimage.label(m)
            res.append((labels, count, face_spanning(labels, 0), face_spanning(labels, 1)))
        return res

    nd = nd_loop()
    out["loop: scipy.ndimage.label + NumPy spanning"] = best(nd_loop)

    cc3d_note = None
    try:
        import cc3d
    except ImportError:
        cc3d_note = "connected-components-3d is not installed: pip install connected-components-3d"
    if cc3d_note is None:
        def cc_loop():
            res = []
            for m in masks:
                labels, count = cc3d.connected_components(m, connectivity=4, return_N=True)
                res.append((labels, count, face_spanning(labels, 0), face_spanning(labels, 1)))
            return res

        cc = cc_loop()
        out["loop: cc3d.connected_components + NumPy spanning"] = best(cc_loop)
    # every variant agrees with the batched results
    for b in range(samples):
        got = batched[b]
        assert np.array_equal(got.components.labels, single[b].components.labels)
        assert np.array_equal(got.components.labels, nd[b][0]) and got.components.count == nd[b][1]
        for a in (0, 1):
            assert np.array_equal(got.clusters[a], single[b].clusters[a])
            assert np.array_equal(got.clusters[a], nd[b][2 + a])
        if cc3d_note is None:  # cc3d numbers components by its own scan: compare counts
            assert cc[b][1] == got.components.count
            assert len(cc[b][2]) == len(got.clusters[0]) and len(cc[b][3]) == len(got.clusters[1])
    spanning = float(np.mean([g.clusters[0].size > 0 for g in batched]))
    # the labelling kernel alone, on every thread count up to Numba's
    from catalytic.kernels.cpu import components

    g = base.geometry
    stack = masks.reshape(samples, -1).view(np.uint8)
    kernel = {}
    threads = numba.get_num_threads()
    for T in sorted({1, threads}):
        numba.set_num_threads(T)
        try:
            kernel[T] = best(lambda: components.connected_components_batched(
                g.shape_arr, g.periodic_arr, g.offsets, stack, g.dedupe))
        finally:
            numba.set_num_threads(threads)
    return out, stats, cc3d_note, spanning, kernel


def part2(samples):
    from distributed import Client, LocalCluster

    shape = (256, 256)
    base, masks = ensemble(samples, shape, seed=1)
    lats = [base.with_mask(m) for m in masks]
    serial_bp = cat.BatchProcessor(lats, progress=False)
    serial = serial_bp.map("spanning_clusters", axes=(0, 1))
    t_serial = best(lambda: serial_bp.map("spanning_clusters", axes=(0, 1)), rounds=3)
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None)
    client = Client(cluster)
    t_start = time.perf_counter() - t0
    try:
        bp = cat.BatchProcessor(lats, executor="dask", client=client, progress=False,
                                force_executor=True)
        got = bp.map("spanning_clusters", axes=(0, 1))  # also the workers' warm-up
        t_dask = best(lambda: bp.map("spanning_clusters", axes=(0, 1)), rounds=3)
        group = bp.stats()["per_group"][0]
    finally:
        client.close()
        cluster.close()
    for g, s in zip(got, serial):
        assert np.array_equal(g.components.labels, s.components.labels)
        assert all(np.array_equal(g.clusters[a], s.clusters[a]) for a in (0, 1))
    return {"serial": t_serial, "dask": t_dask, "start": t_start, "group": group,
            "shape": shape, "samples": samples}


def report(samples, p1, p2) -> str:
    times, stats, cc3d_note, spanning, kernel = p1
    batched = times["batched: BatchProcessor.map('spanning_clusters', axes=(0, 1))"]
    lines = [
        "# Batch processor: a site-percolation ensemble",
        "",
        f"Measured by `python benchmarks/bench_batch_study.py` on {platform.platform()}, "
        f"{os.cpu_count()} CPUs, Numba {numba.__version__} with {numba.get_num_threads()} "
        f"threads, Python {platform.python_version()}; all figures from one run.",
        "",
        f"## {samples} lattices of 128 x 128, p = 0.6, spanning clusters along both axes",
        "",
        "Every variant starts from the same lattices (or masks) and gives the same labels "
        "and spanning clusters (checked in the run; cc3d numbers its components its own way, "
        f"so its counts are compared). Fraction spanning axis 0: {spanning:.3f}. Best of 5.",
        "",
        "| variant | total ms | us per lattice | time / batched |",
        "|---|---:|---:|---:|",
    ]
    for name, t in times.items():
        if name.startswith("build"):
            continue
        lines.append(f"| {name} | {t * 1e3:.1f} | {t / samples * 1e6:.1f} | {t / batched:.2f} |")
    if cc3d_note:
        lines.append(f"| cc3d | not measured: {cc3d_note} | | |")
    loop = times["loop: L.connected_components(); L.percolates(0)"]
    nd = times["loop: scipy.ndimage.label + NumPy spanning"]
    lines += [
        "",
        "Against the targets of the batch issue, in this run: a loop of single calls "
        f"(`connected_components()` then `percolates(0)`, the study's loop) takes "
        f"{loop / batched:.2f}x the batched time, "
        + ("meeting" if loop / batched >= 5 else "short of")
        + " the 5x asked (that loop is "
        f"{460e-6 * samples / loop:.1f}x faster than the 460 us per lattice the issue "
        "measured when it was filed; against that figure, not measured "
        f"here, the ratio would be {460e-6 * samples / batched:.1f}x); the loop of "
        f"`scipy.ndimage.label` takes {nd / batched:.2f}x the batched time, "
        + ("so batched is faster, as asked." if nd > batched else "so batched is slower.")
        + " Of the batched time, the labelling kernel alone (the host function "
        "`connected_components_batched` on the stacked masks) takes "
        + ", ".join(f"{t / samples * 1e6:.1f} us per lattice on {T} thread(s)"
                    for T, t in kernel.items()) + ".",
    ]
    if len(kernel) > 1:
        k1, kT = kernel[1], kernel[max(kernel)]
        lines[-1] += (
            " The study's loop labels every lattice twice (`percolates` labels again), on "
            "one thread (single calls on lattices this small stay on one thread); the "
            "batched map labels it once, on every thread. With the per-call overheads "
            f"left out, that alone bounds the ratio near 2 x {k1 / samples * 1e6:.0f} / "
            f"{kT / samples * 1e6:.0f} = {2 * k1 / kT:.1f}x on this machine: the 5x needs "
            "more cores (the batched kernel shares lattices out over threads, the loop "
            "cannot), not a faster kernel, which would speed both sides alike.")
    g = stats["per_group"][0]
    lines += [
        "",
        f"The batched map made {stats['launches']} routed call(s) of "
        f"`batched.spanning_clusters` on {g['backends']} (batch size "
        f"{g['memory']['batch_size']} from {g['memory']['host_available'] / 2**30:.1f} GiB "
        f"available host memory and {g['memory']['per_item_bytes']} bytes per lattice).",
        "",
        "Building the lattices, not counted above:",
        "",
        "| build | total ms | us per lattice |",
        "|---|---:|---:|",
    ]
    for name, t in times.items():
        if name.startswith("build"):
            lines.append(f"| {name[7:]} | {t * 1e3:.1f} | {t / samples * 1e6:.1f} |")
    if p2 is not None:
        grp = p2["group"]
        ratio = p2["serial"] / p2["dask"]
        lines += [
            "",
            f"## Dask: {p2['samples']} lattices of {p2['shape'][0]} x {p2['shape'][1]}, "
            "2 worker processes against the serial executor",
            "",
            "The cluster runs before timing starts (its start-up is listed on its own); the "
            f"group was split into {grp['tasks']} parts, each one batched call on a worker "
            "(lattices travel by definition: geometry, mask, seed). Best of 3.",
            "",
            "| executor | total s | us per lattice |",
            "|---|---:|---:|",
            f"| serial (one process, its kernel on {numba.get_num_threads()} threads) | "
            f"{p2['serial']:.3f} | {p2['serial'] / p2['samples'] * 1e6:.1f} |",
            f"| dask, 2 workers x 1 thread | {p2['dask']:.3f} | "
            f"{p2['dask'] / p2['samples'] * 1e6:.1f} |",
            f"| LocalCluster start-up (once) | {p2['start']:.3f} | |",
            "",
            f"Serial / Dask = {ratio:.2f} "
            + ("(Dask faster)." if ratio > 1 else "(Dask slower: on this machine the serial "
               "executor's kernel already uses every core, and Dask adds pickling and "
               "transfer of every mask; Dask pays off across machines or GPUs, not here)."),
        ]
    return "\n".join(lines) + "\n"


def run(samples=200, dask_samples=2000, dask=True) -> str:
    """The study's report, measured now."""
    p1 = part1(samples)
    p2 = part2(dask_samples) if dask else None
    return report(samples, p1, p2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=Path("reports/batch_study.md"))
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--dask-samples", type=int, default=2000)
    ap.add_argument("--no-dask", action="store_true")
    args = ap.parse_args(argv)
    text = run(args.samples, args.dask_samples, not args.no_dask)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
