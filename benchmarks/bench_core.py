"""Core benchmarks: catalytic against igraph, NetworkX and SciPy, measured in one run.

    python benchmarks/bench_core.py [--skip-huge] [--output reports/core.md]

Every figure is a wall-clock measurement taken in this run on this machine (best of
``--repeat``; JIT compilation excluded by a warm-up call). Graph construction for
igraph/NetworkX/SciPy is measured separately and *not* counted in their algorithm time.
Needs: pip install "catalytic[bench]" (python-igraph).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import time
import timeit
from pathlib import Path

import numpy as np

import catalytic as cat


def best_of(func, repeat):
    func()  # warm-up (JIT, caches)
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - t0)
    return best


def once(func):
    t0 = time.perf_counter()
    out = func()
    return time.perf_counter() - t0, out


def fmt(t):
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def bench_distance_field(repeat, rows, facts):
    import igraph as ig
    import networkx as nx
    from scipy.sparse.csgraph import dijkstra

    shape = (100, 100, 100)
    rng = np.random.default_rng(0)
    mask = rng.random(shape) >= 0.30
    mask[0, 0, 0] = True
    L = cat.Lattice(shape=shape, mask=mask)
    src = 0
    t_cat = best_of(lambda: L.distance_field(src), repeat)
    decision = L.last_decision
    ref = L.distance_field(src).reshape(-1)

    t_build_adj, A = once(lambda: L.get_adjacency_matrix())
    rows_, cols_ = A.nonzero()
    keep = rows_ < cols_
    edges = np.stack([rows_[keep], cols_[keep]], axis=1)
    t_build_ig, G = once(lambda: ig.Graph(n=L.n_points, edges=edges, directed=False))
    t_ig = best_of(lambda: G.distances(source=[src], mode="all"), repeat)
    d_ig = np.array(G.distances(source=[src], mode="all")[0], dtype=np.float64)
    d_ig = np.where(np.isinf(d_ig), -1, d_ig).astype(np.int64)
    assert np.array_equal(d_ig, ref), "igraph disagrees with catalytic"

    t_sp = best_of(lambda: dijkstra(A, indices=src, unweighted=True), repeat)

    t_build_nx, Gnx = once(lambda: L.to_networkx())
    t_nx, dnx = once(lambda: nx.single_source_shortest_path_length(Gnx, src))
    assert all(ref[k] == v for k, v in dnx.items()) and len(dnx) == int((ref >= 0).sum())
    del Gnx, dnx
    gc.collect()

    rows.append(("distance field, 100^3, 30% blocked, 1 source", "catalytic (" + decision.backend + ")", t_cat, ""))
    rows.append(("", "igraph Graph.distances", t_ig, f"{t_ig / t_cat:.1f}x slower (target >= 10x)"))
    rows.append(("", "NetworkX single_source_shortest_path_length", t_nx, f"{t_nx / t_cat:.0f}x slower (target >= 100x)"))
    rows.append(("", "SciPy csgraph BFS (dijkstra unweighted)", t_sp, f"{t_sp / t_cat:.1f}x slower"))
    facts["distance_field"] = {
        "catalytic_s": t_cat, "backend": decision.backend, "igraph_s": t_ig, "networkx_s": t_nx,
        "scipy_s": t_sp, "igraph_ratio": t_ig / t_cat, "networkx_ratio": t_nx / t_cat,
        "igraph_build_s": t_build_ig, "networkx_build_s": t_build_nx, "adjacency_build_s": t_build_adj,
        "edges": int(keep.sum()),
    }


def bench_components(repeat, rows, facts):
    from scipy import ndimage

    shape = (2048, 2048)
    rng = np.random.default_rng(1)
    occ = rng.random(shape) < 0.6
    L = cat.Lattice(shape=shape, mask=occ)
    t_cat = best_of(lambda: L.connected_components(), repeat)
    backend = L.last_decision.backend
    comps = L.connected_components()
    t_nd = best_of(lambda: ndimage.label(occ), repeat)
    lab, n = ndimage.label(occ)
    assert n == comps.count and np.array_equal(lab, comps.labels), "ndimage disagrees"

    Lp = cat.Lattice(shape=shape, mask=occ, periodic=True)
    t_per = best_of(lambda: Lp.connected_components(), repeat)
    cp = Lp.connected_components()
    rows.append(("components, 2048^2 site percolation p=0.6", f"catalytic ({backend})", t_cat, ""))
    rows.append(("", "scipy.ndimage.label", t_nd, f"catalytic / ndimage = {t_cat / t_nd:.2f} (target <= 1.5)"))
    rows.append(("", "catalytic, periodic axes (ndimage cannot)", t_per, f"{cp.count} clusters vs {comps.count} open"))
    facts["components"] = {
        "catalytic_s": t_cat, "backend": backend, "ndimage_s": t_nd, "ratio": t_cat / t_nd,
        "periodic_s": t_per, "clusters_open": comps.count, "clusters_periodic": cp.count,
    }


def bench_xor(rows, facts):
    L = cat.Lattice(shape=(8, 8))
    data = np.arange(5, dtype=np.int64)
    L.xor_transform(data)
    n = 20000
    t_routed = min(timeit.repeat(lambda: L.xor_transform(data), number=n, repeat=5)) / n
    backend = L.last_decision.backend
    key = L._aux[: data.nbytes].view(np.int64)
    t_np = min(timeit.repeat(lambda: np.bitwise_xor(data, key), number=n, repeat=5)) / n
    rows.append(("routed xor_transform, 5 x int64", f"catalytic ({backend}), end to end", t_routed,
                 f"{t_routed * 1e6:.2f} us (target <= 10 us)"))
    rows.append(("", "raw np.bitwise_xor with the same key", t_np, f"{t_np * 1e6:.2f} us"))
    facts["xor_small"] = {"routed_s": t_routed, "backend": backend, "numpy_s": t_np}


def bench_huge(rows, facts):
    import igraph as ig

    # measured igraph memory per edge on a 10^6-site lattice, to project 10^8 sites
    small = cat.Lattice(shape=(100, 100, 100))
    A = small.get_adjacency_matrix()
    r, c = A.nonzero()
    keep = r < c
    edges = np.stack([r[keep], c[keep]], axis=1)
    import psutil

    proc = psutil.Process()
    before = proc.memory_info().rss
    G = ig.Graph(n=small.n_points, edges=edges, directed=False)
    ig_bytes = proc.memory_info().rss - before
    per_edge = ig_bytes / max(1, G.ecount())
    del G, A, r, c, edges
    gc.collect()

    side = 465  # 465^3 = 100,544,625 sites
    L = cat.Lattice(shape=(side, side, side))
    rss0 = proc.memory_info().rss
    t, d = once(lambda: L.distance_field(0))
    backend = L.last_decision.backend
    peak = peak_rss_bytes()
    expect = 3 * (side - 1)
    ok = int(d.max()) == expect and int(d[-1, -1, -1]) == expect
    n_edges = 3 * side * side * (side - 1)
    avail = psutil.virtual_memory().total
    rows.append((f"distance field, {side}^3 = {L.n_points:,} sites", f"catalytic ({backend})", t,
                 f"max distance {int(d.max())} (closed form {expect}, {'ok' if ok else 'WRONG'}); "
                 f"peak RSS {peak / 2**30:.2f} GiB"))
    rows.append(("", "igraph (projected, not run)", float("nan"),
                 f"{per_edge:.0f} B/edge measured on 10^6 sites x {n_edges:,} edges = "
                 f"{per_edge * n_edges / 2**30:.1f} GiB for the graph alone (machine: {avail / 2**30:.0f} GiB)"))
    facts["huge"] = {"sites": L.n_points, "seconds": t, "backend": backend, "peak_rss": peak,
                     "rss_before": rss0, "correct": ok, "igraph_bytes_per_edge": per_edge,
                     "igraph_projected_bytes": per_edge * n_edges}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-huge", action="store_true", help="skip the 10^8-site run")
    ap.add_argument("--output", type=Path, default=Path(__file__).resolve().parent.parent / "reports" / "core.md")
    args = ap.parse_args(argv)
    import numba

    rows, facts = [], {}
    print("measuring distance field ...", flush=True)
    bench_distance_field(args.repeat, rows, facts)
    print("measuring components ...", flush=True)
    bench_components(args.repeat, rows, facts)
    print("measuring small xor ...", flush=True)
    bench_xor(rows, facts)
    if not args.skip_huge:
        print("measuring 10^8-site distance field ...", flush=True)
        bench_huge(rows, facts)

    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
               f"Python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}")
    lines = [
        "# Core benchmarks",
        "",
        f"Measured by `python benchmarks/bench_core.py` on {time.strftime('%Y-%m-%d')} ({machine}).",
        "Best of " + str(args.repeat) + " runs after a warm-up call; graph construction for the other "
        "libraries is not counted in their times.",
        "",
        "| workload | implementation | time | note |",
        "| --- | --- | --- | --- |",
    ]
    for what, impl, t, note in rows:
        tt = "n/a" if t != t else fmt(t)
        lines.append(f"| {what} | {impl} | {tt} | {note} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    args.output.with_suffix(".json").write_text(json.dumps({"machine": machine, "results": facts}, indent=1))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
