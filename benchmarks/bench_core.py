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


MEDIANS = {}


def best_of(func, repeat, label=None):
    """Best of ``repeat`` timed calls after a warm-up; the median is kept in MEDIANS."""
    func()  # warm-up (JIT, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    if label:
        MEDIANS[label] = float(np.median(times))
    return min(times)


def med(label):
    return f"median {fmt(MEDIANS[label])}"


def once(func):
    t0 = time.perf_counter()
    out = func()
    return time.perf_counter() - t0, out


def fmt(t):
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


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
    t_cat = best_of(lambda: L.distance_field(src), repeat, "df_cat")
    decision = L.last_decision
    ref = L.distance_field(src).reshape(-1)

    t_build_adj, A = once(lambda: L.get_adjacency_matrix())
    rows_, cols_ = A.nonzero()
    keep = rows_ < cols_
    edges = np.stack([rows_[keep], cols_[keep]], axis=1)
    t_build_ig, G = once(lambda: ig.Graph(n=L.n_points, edges=edges, directed=False))
    t_ig = best_of(lambda: G.distances(source=[src], mode="all"), repeat, "df_ig")
    d_ig = np.array(G.distances(source=[src], mode="all")[0], dtype=np.float64)
    d_ig = np.where(np.isinf(d_ig), -1, d_ig).astype(np.int64)
    assert np.array_equal(d_ig, ref), "igraph disagrees with catalytic"

    t_sp = best_of(lambda: dijkstra(A, indices=src, unweighted=True), repeat)

    t_build_nx, Gnx = once(lambda: L.to_networkx())
    t_nx, dnx = once(lambda: nx.single_source_shortest_path_length(Gnx, src))
    assert all(ref[k] == v for k, v in dnx.items()) and len(dnx) == int((ref >= 0).sum())
    del Gnx, dnx
    gc.collect()

    rows.append(("distance field, 100^3, 30% blocked, 1 source", "catalytic (" + decision.backend + ")", t_cat, med("df_cat")))
    rows.append(("", "igraph Graph.distances", t_ig, f"{t_ig / t_cat:.1f}x slower (target >= 10x); {med('df_ig')}, "
                 f"ratio of medians {MEDIANS['df_ig'] / MEDIANS['df_cat']:.1f}x"))
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
    t_cat = best_of(lambda: L.connected_components(), repeat, "cc_cat")
    backend = L.last_decision.backend
    comps = L.connected_components()
    t_nd = best_of(lambda: ndimage.label(occ), repeat, "cc_nd")
    lab, n = ndimage.label(occ)
    assert n == comps.count and np.array_equal(lab, comps.labels), "ndimage disagrees"

    Lp = cat.Lattice(shape=shape, mask=occ, periodic=True)
    t_per = best_of(lambda: Lp.connected_components(), repeat)
    cp = Lp.connected_components()
    rows.append(("components, 2048^2 site percolation p=0.6", f"catalytic ({backend})", t_cat, med("cc_cat")))
    rows.append(("", "scipy.ndimage.label", t_nd, f"catalytic / ndimage = {t_cat / t_nd:.2f} (target <= 1.5); {med('cc_nd')}, "
                 f"ratio of medians {MEDIANS['cc_cat'] / MEDIANS['cc_nd']:.2f}"))
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
    key = L.key_buffer[: data.nbytes].view(np.int64)
    t_np = min(timeit.repeat(lambda: np.bitwise_xor(data, key), number=n, repeat=5)) / n
    rows.append(("routed xor_transform, 5 x int64", f"catalytic ({backend}), end to end", t_routed,
                 f"{t_routed * 1e6:.2f} us (target <= 10 us)"))
    rows.append(("", "raw np.bitwise_xor with the same key", t_np, f"{t_np * 1e6:.2f} us"))
    facts["xor_small"] = {"routed_s": t_routed, "backend": backend, "numpy_s": t_np}


_IGRAPH_HUGE = """
import sys, time, igraph as ig
side = int(sys.argv[1])
t0 = time.perf_counter()
G = ig.Graph.Lattice([side] * 3, circular=False)
rss = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(f"BUILT {time.perf_counter() - t0:.1f} {rss}", flush=True)
t0 = time.perf_counter()
d = G.distances(source=[0])
print(f"DIST {time.perf_counter() - t0:.1f} {max(d[0])}", flush=True)
"""


def _igraph_huge(side, cap_bytes):
    """Run igraph on the huge lattice in a subprocess whose address space is capped."""
    import subprocess

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _IGRAPH_HUGE, str(side)], capture_output=True,
                          text=True, preexec_fn=limit, timeout=1200)
    wall = time.perf_counter() - t0
    out = {"returncode": proc.returncode, "wall_s": wall, "cap_bytes": cap_bytes}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts[0] == "BUILT":
            out["build_s"], out["build_peak_rss"] = float(parts[1]), int(parts[2])
        if parts[0] == "DIST":
            out["distances_s"] = float(parts[1])
    err = proc.stderr.strip().splitlines()
    out["error"] = err[-1] if proc.returncode and err else ""
    return out


def _networkx_bytes_per_element():
    """Bytes per (node + edge) of a NetworkX grid graph, measured with tracemalloc."""
    import tracemalloc

    import networkx as nx

    tracemalloc.start()
    G = nx.grid_graph(dim=[40, 40, 40])
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return size / (G.number_of_nodes() + G.number_of_edges())


_CATALYTIC_HUGE = """
import sys, time
import catalytic as cat

def hwm():
    # VmHWM: peak RSS of this address space (ru_maxrss would include the parent's
    # peak, which survives fork + exec on Linux)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

side = int(sys.argv[1])
cat.Lattice(shape=(8, 8, 8)).distance_field(0)  # load the compiled kernels first
base = hwm()
L = cat.Lattice(shape=(side, side, side))
t0 = time.perf_counter()
d = L.distance_field(0)
t = time.perf_counter() - t0
peak = hwm()
expect = 3 * (side - 1)
ok = int(d.max()) == expect and int(d[-1, -1, -1]) == expect
print("RESULT", t, peak, base, int(ok), L.last_decision.backend, L.n_points)
"""


def bench_huge(rows, facts, igraph_huge):
    import subprocess

    import psutil

    side = 465  # 465^3 = 100,544,625 sites
    proc = subprocess.run([sys.executable, "-c", _CATALYTIC_HUGE, str(side)],
                          capture_output=True, text=True, check=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][0].split()
    t, peak, base, ok, backend, n = float(line[1]), int(line[2]), int(line[3]), line[4] == "1", line[5], int(line[6])
    expect = 3 * (side - 1)
    n_edges = 3 * side * side * (side - 1)
    total = psutil.virtual_memory().total
    rows.append((f"distance field, {side}^3 = {n:,} sites", f"catalytic ({backend}, own process)", t,
                 f"max distance {expect if ok else 'WRONG'} (closed form {expect}); peak RSS "
                 f"{peak / 2**30:.2f} GiB, of which {base / 2**30:.2f} GiB before the lattice "
                 f"(machine {total / 2**30:.0f} GiB)"))
    facts["huge"] = {"sites": n, "seconds": t, "backend": backend, "peak_rss": peak,
                     "rss_before": base, "correct": ok}
    if igraph_huge:
        cap = 20 * 2**30
        ig = _igraph_huge(side, cap)
        if "distances_s" in ig:
            note = (f"ran: build {ig['build_s']:.0f} s, distances {ig['distances_s']:.1f} s")
            t_ig = ig["distances_s"]
        else:
            built = (f"built the graph in {ig.get('build_s', float('nan')):.0f} s at "
                     f"{ig.get('build_peak_rss', 0) / 2**30:.1f} GiB, then " if "build_s" in ig else "")
            note = f"{built}failed under a {cap / 2**30:.0f} GiB limit: {ig['error']}"
            t_ig = float("nan")
        rows.append(("", "igraph Graph.Lattice + distances (subprocess)", t_ig, note))
        facts["huge"]["igraph"] = ig
    per = _networkx_bytes_per_element()
    need = per * (n + n_edges)
    rows.append(("", "NetworkX (projected, not run)", float("nan"),
                 f"{per:.0f} B per node+edge measured on a 40^3 grid_graph x {n + n_edges:,} "
                 f"= {need / 2**30:.0f} GiB"))
    facts["huge"]["networkx_bytes_per_element"] = per
    facts["huge"]["networkx_projected_bytes"] = need
    # the baseline of the GPU target (512^3 BFS on cuda >= 20x numba-cpu on this machine)
    proc = subprocess.run([sys.executable, "-c", _CATALYTIC_HUGE, "512"],
                          capture_output=True, text=True, check=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][0].split()
    t512, ok512 = float(line[1]), line[4] == "1"
    rows.append(("distance field, 512^3 = 134,217,728 sites (baseline for the GPU target)",
                 f"catalytic ({line[5]}, own process)", t512,
                 f"closed form {'ok' if ok512 else 'WRONG'}; pass --cpu-bfs-seconds {t512:.2f} "
                 "to benchmarks/bench_gpu.py"))
    facts["bfs512"] = {"seconds": t512, "backend": line[5], "correct": ok512}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-huge", action="store_true", help="skip the 10^8-site run")
    ap.add_argument("--igraph-huge", action="store_true",
                    help="also try igraph on the 10^8-site lattice (subprocess capped at 20 GiB; ~2 min)")
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
        bench_huge(rows, facts, args.igraph_huge)

    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
               f"Python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}")
    lines = [
        "# Core benchmarks",
        "",
        f"Measured by `python benchmarks/bench_core.py {' '.join(sys.argv[1:] if argv is None else argv)}`"
        f" on {time.strftime('%Y-%m-%d')} ({machine}).",
        "Time = best of " + str(args.repeat) + " runs after a warm-up call (medians in the notes: this "
        "2-core machine is shared, and parallel kernels lose most when another process takes a core); "
        "graph construction for the other libraries is not counted in their times.",
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
