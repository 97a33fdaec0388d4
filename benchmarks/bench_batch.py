"""The batch processor against the loops it replaces, measured side by side.

    python benchmarks/bench_batch.py [--output reports/batch.md] [--lattices 300]
                                     [--rounds 5] [--tiny 10000] [--dask] [--study]

Part 1, the ensembles of issue 23 item 19: ``--lattices`` lattices of 128 x 128 (open,
von Neumann) with site masks at p = 0.6 (site 0 kept open: the source of the distance
fields), built with ``cat.Lattice(shape, mask=m)``. For ``connected_components``,
``percolates`` (axis 0) and ``distance_field`` from corner 0, every answer of
``BatchProcessor(lattices).map(op)`` is first checked against the loop of single calls
``[L.op() for L in lattices]`` (and the labels against ``scipy.ndimage.label``); then,
interleaved round by round so that other load on the machine hits every variant alike,
the best of ``--rounds`` of: the map as it chooses, the map forced to the batched twin
(``batched=True``) and to a loop (``batched=False``), the loop of single calls, and for
components a loop of ``scipy.ndimage.label``. The table gives the loop's time over
each variant's (above 1: faster than the loop) and the map's reason from ``stats()``.

Part 2, executors on tiny items: ``--tiny`` lattices of 8 x 8 (p = 0.6),
``connected_components``: the serial map, ``executor="threads"`` as it chooses and
forced (``force_executor=True``), and with ``--dask`` a ``LocalCluster`` of 2
single-threaded worker processes as it chooses and forced (the cluster's start-up
timed with it, as a user's first map pays it; one round each). Then the threads
crossover: loops of single ``distance_field`` calls (``batched=False``) on lattices of
growing size, serial against the threads executor forced, next to the router's
prediction per call, which the executor compares with ``batch.THREAD_MIN_ITEM_S``.

``--study``: also the older percolation-study tables (spanning clusters of 200
lattices, and Dask against serial on 2000 lattices of 256 x 256).
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
from catalytic import batch as B

SHAPE = (128, 128)


def interleaved(funcs: dict, rounds: int) -> dict:
    """Best seconds of each function over ``rounds`` rounds, every round running each
    once in turn (after one warm-up call each), the order rotated from round to round:
    what one variant leaves behind (memory to fault in again, caches) falls on each of
    the others in turn."""
    for f in funcs.values():
        f()
    best = {k: float("inf") for k in funcs}
    keys = list(funcs)
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            t0 = time.perf_counter()
            funcs[k]()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def _masks(n, shape, p=0.6, seed=0):
    masks = np.random.default_rng(seed).random((n,) + shape) < p
    masks.reshape(n, -1)[:, 0] = True
    return masks


def _same(op, a, b) -> bool:
    if op == "connected_components":
        return (a.count == b.count and np.array_equal(a.labels, b.labels)
                and np.array_equal(a.sizes, b.sizes))
    if op == "percolates":
        return a is b
    return a.dtype == b.dtype and np.array_equal(a, b)


OPS = [("connected_components", (), {}), ("percolates", (), {"axis": 0}),
       ("distance_field", (0,), {})]


def part1(n, rounds):
    masks = _masks(n, SHAPE)
    lats = [cat.Lattice(shape=SHAPE, mask=m) for m in masks]
    rows = []
    for op, args, kwargs in OPS:
        auto = cat.BatchProcessor(lats, progress=False)
        twin = cat.BatchProcessor(lats, progress=False, batched=True)
        loop_map = cat.BatchProcessor(lats, progress=False, batched=False)
        single = [L.run(op, *args, **kwargs) for L in lats]
        for bp in (auto, twin, loop_map):
            got = bp.map(op, *args, **kwargs)
            assert got.ok and all(_same(op, g, s) for g, s in zip(got, single)), op
        if op == "connected_components":
            for m, s in zip(masks, single):
                want, count = ndimage.label(m)
                assert s.count == count and np.array_equal(s.labels, want)
        funcs = {
            "loop": lambda: [L.run(op, *args, **kwargs) for L in lats],
            "map": lambda: auto.map(op, *args, **kwargs),
            "map, batched=True": lambda: twin.map(op, *args, **kwargs),
            "map, batched=False": lambda: loop_map.map(op, *args, **kwargs),
        }
        if op == "connected_components":
            funcs["loop of scipy.ndimage.label"] = lambda: [ndimage.label(m) for m in masks]
        best = interleaved(funcs, rounds)
        auto.map(op, *args, **kwargs)
        g = auto.stats()["per_group"][0]
        rows.append((op, best, g["mode"], g["reason"]))
    return rows


def part2(n, dask):
    masks = np.random.default_rng(1).random((n, 8, 8)) < 0.6
    lats = [cat.Lattice(shape=(8, 8), mask=m) for m in masks]
    op = "connected_components"
    want = [L.connected_components() for L in lats]
    variants = [("serial", {}), ("threads", {"executor": "threads"}),
                ("threads, force_executor=True", {"executor": "threads",
                                                  "force_executor": True})]
    if dask:
        variants += [("dask (own LocalCluster)", {"executor": "dask", "max_workers": 2}),
                     ("dask (own LocalCluster), force_executor=True",
                      {"executor": "dask", "max_workers": 2, "force_executor": True})]
    out = []
    cat.BatchProcessor(lats[:50], progress=False).map(op)  # JIT
    for name, kw in variants:
        bp = cat.BatchProcessor(lats, progress=False, **kw)
        t0 = time.perf_counter()
        got = bp.map(op)
        t = time.perf_counter() - t0
        assert got.ok and all(_same(op, g, w) for g, w in zip(got, want)), name
        s = bp.stats()
        out.append((name, t, s["executor_used"], s["executor_reason"]))
    return out, (dask_costs(lats) if dask else None)


def dask_costs(lats):
    """What the Dask executor's own costs are here: a LocalCluster of 2 worker processes
    started and warmed by a first map of 2 items; then, on that running cluster, forced
    maps of growing size (best of 2): their time against the items gives the cost per
    item shipped (the slope) and per map of 2 tasks (the intercept)."""
    from distributed import Client, LocalCluster

    op = "connected_components"
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None)
    client = Client(cluster)
    try:
        cat.BatchProcessor(lats[:2], executor="dask", client=client, progress=False,
                           force_executor=True).map(op)
        start = time.perf_counter() - t0
        sizes = [n for n in (100, 1000, len(lats)) if n <= len(lats)]
        times = []
        for n in sizes:
            bp = cat.BatchProcessor(lats[:n], executor="dask", client=client, progress=False,
                                    force_executor=True)
            times.append(min(_timed(lambda: bp.map(op)) for _ in range(2)))
    finally:
        client.close()
        cluster.close()
    slope, intercept = np.polyfit(sizes, times, 1)
    return {"start": start, "sizes": sizes, "times": times, "per_item": slope,
            "per_map": intercept}


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def crossover(rounds):
    """Serial against forced threads for loops of single distance_field calls."""
    out = []
    for side, count in ((16, 400), (64, 200), (128, 100), (256, 40), (512, 12)):
        shape = (side, side)
        masks = _masks(count, shape, seed=side)
        lats = [cat.Lattice(shape=shape, mask=m) for m in masks]
        ser = cat.BatchProcessor(lats, progress=False, batched=False)
        thr = cat.BatchProcessor(lats, progress=False, batched=False, executor="threads",
                                 max_workers=2, force_executor=True)
        best = interleaved({"serial": lambda: ser.map("distance_field", 0),
                            "threads": lambda: thr.map("distance_field", 0)}, rounds)
        per_item = ser.stats()["predicted_seconds"] / count
        out.append((shape, count, per_item, best["serial"], best["threads"]))
    return out


def report(args, rows, tiny, cross, study) -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    lines = [
        "# Batch processor against the loops it replaces",
        "",
        f"Measured by `{' '.join(['python benchmarks/bench_batch.py'] + sys.argv[1:])}` "
        f"on {platform.platform()}, "
        f"{os.cpu_count()} CPUs, Numba {numba.__version__} ({numba.get_num_threads()} "
        f"threads), Python {platform.python_version()}; all figures from one run"
        + (f", load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
           "(1 / 5 / 15 min; the variants of a table were run in turn, round by round, so "
           "they shared whatever load there was)" if load else "") + ".",
        "",
        f"## {args.lattices} lattices of {SHAPE[0]} x {SHAPE[1]}, site masks at p = 0.6",
        "",
        "Answers checked equal first (components also against `scipy.ndimage.label`). "
        f"Best of {args.rounds} interleaved rounds (the order rotated each round); speed = "
        "loop time / variant time.",
        "",
        "| operation | variant | total ms | us per lattice | speed over the loop |",
        "|---|---|---:|---:|---:|",
    ]
    for op, best, _, _ in rows:
        for name, t in best.items():
            lines.append(f"| {op} | {name} | {t * 1e3:.1f} | {t / args.lattices * 1e6:.1f} "
                         f"| {best['loop'] / t:.2f}x |")
    lines += ["", "How the map chose (`stats()['per_group'][0]`):", ""]
    for op, _, mode, reason in rows:
        lines.append(f"- `{op}`: {mode}. {reason}")
    lines += [
        "",
        f"## Executors on {args.tiny} lattices of 8 x 8 (`connected_components`)",
        "",
        "One round each, answers checked against single calls; a Dask row includes "
        "starting its own cluster.",
        "",
        "| executor | total s | us per lattice | ran on | why |",
        "|---|---:|---:|---|---|",
    ]
    tiny, costs = tiny
    for name, t, used, why in tiny:
        lines.append(f"| {name} | {t:.3f} | {t / args.tiny * 1e6:.1f} | {used} | {why} |")
    if costs is not None:
        lines += [
            "",
            "The Dask executor's own costs, measured here (`dask_costs`): a LocalCluster of "
            f"2 workers started and warmed by a first map in {costs['start']:.2f} s; on it, "
            "forced maps of "
            + ", ".join(f"{n} items in {t:.3f} s" for n, t in zip(costs["sizes"],
                                                                costs["times"]))
            + f": {costs['per_item'] * 1e6:.0f} us per item and {costs['per_map']:.3f} s "
            f"per map of 2 tasks (least squares). The choice uses DASK_START_S = "
            f"{B.DASK_START_S} s, DASK_ITEM_S = {B.DASK_ITEM_S * 1e6:.0f} us, DASK_TASK_S = "
            f"{B.DASK_TASK_S * 1e3:.0f} ms.",
        ]
    lines += [
        "",
        "## Threads crossover: loops of single `distance_field` calls",
        "",
        f"`batched=False`, serial against `executor='threads'` (2 threads, forced); best of "
        f"{args.rounds} interleaved rounds. The executor runs threads by itself where the "
        f"predicted call is at least `THREAD_MIN_ITEM_S` = {B.THREAD_MIN_ITEM_S * 1e6:.0f} us "
        "(set from where these runs cross over on a machine with no other work; lattices of 2^16 sites and more already run each "
        "call on every free thread).",
        "",
        "| lattice | calls | predicted us per call | serial ms | threads ms | serial / threads |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for shape, count, per_item, ts, tt in cross:
        lines.append(f"| {shape[0]} x {shape[1]} | {count} | {per_item * 1e6:.0f} | "
                     f"{ts * 1e3:.1f} | {tt * 1e3:.1f} | {ts / tt:.2f} |")
    text = "\n".join(lines) + "\n"
    if study is not None:
        text += "\n" + study
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=Path("reports/batch.md"))
    ap.add_argument("--lattices", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tiny", type=int, default=10_000)
    ap.add_argument("--dask", action="store_true", help="also the Dask executor")
    ap.add_argument("--study", action="store_true",
                    help="also the percolation-study tables (benchmarks/bench_batch_study.py)")
    args = ap.parse_args(argv)
    rows = part1(args.lattices, args.rounds)
    tiny = part2(args.tiny, args.dask)
    cross = crossover(args.rounds)
    study = None
    if args.study:
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_batch_study

        study = bench_batch_study.run()
    text = report(args, rows, tiny, cross, study)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
