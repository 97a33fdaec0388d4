"""``catalytic bench``: catalytic against the strongest peer for each workload, measured
in one run on this machine, at several sizes.

    catalytic bench [--quick] [--output reports]
    python benchmarks/run.py [--quick]            # the same, from a checkout

Every row first checks that the systems agree (labels up to renumbering, distances
exactly or to float32 precision where a peer computes in float32, fields to 1e-9), then
times each: the median of at least 3 calls (1 for the rows that run NetworkX's
algorithms, which take seconds) after a warm-up call (JIT compilation, caches
and graph construction are not counted; building a peer's graph is timed on its own and
listed). Workloads and peers:

* connected components, site percolation p = 0.6: cc3d and ``scipy.ndimage.label``
  (2-D and 3-D, open; periodic against cc3d's ``periodic_boundary``); 3-D at p = 0.35
  (just above the threshold) up to 464^3 = 10^8 sites;
* distance fields from a corner, unweighted and weighted (the cost of entering a site):
  dijkstra3d (3-D), igraph, SciPy csgraph, NetworkX (smallest size only);
  corner-to-corner shortest paths, unweighted and weighted: dijkstra3d
  (bidirectional and A*), igraph, csgraph. Above 96^3 only dijkstra3d runs (the others
  need an explicit graph of 10^8 edges);
* closeness and betweenness centrality: igraph, networkit, rustworkx, NetworkX
  (closeness, smallest size);
* the Laplacian of a periodic field: ``scipy.ndimage.laplace`` (mode "wrap", negated)
  and a NumPy copy of the field (the memory-bandwidth floor: into an existing array in
  2-D, into a new array, as catalytic returns one, in 3-D);
* XOR with a key and matmul: NumPy;
* router overhead: a routed call on 8 x 8 against the kernel called directly;
* cold start: a fresh process computing a 64^3 distance field, with an empty Numba
  cache, a warm one, and after ``catalytic warmup``, against dijkstra3d's fresh process,
  timed to the answer and to the end of the process (and 256^3 on an empty cache);
* first test run: the project's ``python -m pytest`` on an empty Numba cache (full runs
  from a checkout only).

Writes ``benchmarks.md``, ``benchmarks.json`` and ``benchmarks.png`` (time per site
against size, log-log, one panel per workload) into ``--output``. A peer that is not
installed is listed as such (``pip install "catalytic[bench]"``), never estimated.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH_EXTRA = 'pip install "catalytic[bench]"'


def median_time(func, min_repeat=3, budget=0.3, max_repeat=25):
    """Median seconds of ``func()`` after a warm-up call: at least ``min_repeat``
    calls, more (up to ``max_repeat``) while under ``budget`` seconds in all."""
    func()
    times, spent = [], 0.0
    while len(times) < min_repeat or (spent < budget and len(times) < max_repeat):
        t0 = time.perf_counter()
        func()
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
    return float(np.median(times))


def _peer(name):
    try:
        return __import__(name)
    except ImportError:
        return None


def same_partition(a, b) -> bool:
    """Whether two labellings describe the same clusters, numbering aside.

    Parameters
    ----------
    a, b : array_like of int
        Labellings of the same sites (any shape, compared flat); label 0 is background.

    Returns
    -------
    bool
        True when both mark the same sites as background and every cluster of ``a`` is
        exactly one cluster of ``b``.

    Notes
    -----
    O(n log n) in the number of sites n (a sort of the label pairs).

    Examples
    --------
    >>> same_partition([[1, 1, 0], [2, 0, 3]], [[7, 7, 0], [5, 0, 4]])
    True
    >>> same_partition([1, 1, 2], [1, 2, 2])
    False
    >>> same_partition([1, 0], [1, 1])
    False
    """
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if not np.array_equal(a == 0, b == 0):
        return False
    pairs = np.unique(np.stack([a, b]), axis=1)
    return len(np.unique(pairs[0])) == pairs.shape[1] == len(np.unique(pairs[1]))


def _grid_edges(shape, periodic=False):
    """Directed edges (src, dst) of the von Neumann grid of ``shape``."""
    idx = np.arange(int(np.prod(shape))).reshape(shape)
    src, dst = [], []
    for a in range(len(shape)):
        if periodic:
            nxt = np.roll(idx, -1, axis=a)
            lo, hi = idx.reshape(-1), nxt.reshape(-1)
        else:
            lo = np.take(idx, range(shape[a] - 1), axis=a).reshape(-1)
            hi = np.take(idx, range(1, shape[a]), axis=a).reshape(-1)
        src += [lo, hi]
        dst += [hi, lo]
    return np.concatenate(src), np.concatenate(dst)


def _values(scores) -> np.ndarray:
    """A {node: value} mapping over nodes 0..n-1 as an array."""
    return np.array([scores[i] for i in range(len(scores))])


def _networkit_graph(n, edges):
    import networkit as nk

    g = nk.Graph(n)
    for a, b in edges:
        g.addEdge(a, b)
    return g


def _rustworkx_graph(n, edges):
    import rustworkx as rx

    g = rx.PyGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from_no_data(edges)
    return g


class Suite:
    """Collects rows: (workload, size, sites, system, seconds or None, agree, note)."""

    def __init__(self, quick):
        self.quick = quick
        self.rows = []

    def add(self, workload, size, sites, system, seconds, agree=None, note=""):
        seconds = None if seconds is None else float(seconds)
        agree = None if agree is None else bool(agree)
        self.rows.append({"workload": workload, "size": size, "sites": int(sites),
                          "system": system, "seconds": seconds, "agree": agree, "note": note})
        t = "-" if seconds is None else f"{seconds * 1e3:10.3f} ms"
        flag = "" if agree is None else ("  agrees" if agree else "  DISAGREES")
        print(f"  {workload:<34} {size:>12} {system:<28} {t:>14}{flag} {note}", flush=True)

    def missing(self, workload, size, sites, system, module):
        self.add(workload, size, sites, system, None, None, f"not installed ({BENCH_EXTRA})")

    # -- components ------------------------------------------------------------------
    def components(self):
        import catalytic as cat
        from scipy import ndimage

        cc3d = _peer("cc3d")
        rng = np.random.default_rng(0)
        sides = {2: (256, 1024) if self.quick else (256, 1024, 4096),
                 3: (32, 64) if self.quick else (32, 64, 160)}
        cases = [((s,) * d, periodic, 0.6) for d in (2, 3) for periodic in (False, True)
                 for s in sides[d]]
        # just above the 3-D percolation threshold (0.3116): one spanning cluster among
        # many small ones; up to 10^8 sites (464^3) to show the cost per site
        cases += [((s,) * 3, periodic, 0.35) for periodic in (False, True)
                  for s in ((128,) if self.quick else (128, 256, 464))]
        for shape, periodic, p in cases:
            w = (f"components {len(shape)}-D {'periodic' if periodic else 'open'}"
                 + ("" if p == 0.6 else f", p = {p}"))
            size = "x".join(map(str, shape))
            n = int(np.prod(shape))
            mask = rng.random(shape) < p
            L = cat.Lattice(shape=shape, mask=mask, periodic=periodic)
            ours = L.connected_components()
            self.add(w, size, n, "catalytic", median_time(L.connected_components))
            if not periodic:
                lab, count = ndimage.label(mask)
                ok = count == ours.count and np.array_equal(lab, ours.labels)
                self.add(w, size, n, "scipy.ndimage.label", median_time(lambda: ndimage.label(mask)), ok)
            if cc3d is None:
                self.missing(w, size, n, "cc3d", "cc3d")
                continue
            conn = 4 if len(shape) == 2 else 6
            lab = cc3d.connected_components(mask, connectivity=conn, periodic_boundary=periodic)
            self.add(w, size, n, "cc3d", median_time(lambda: cc3d.connected_components(
                mask, connectivity=conn, periodic_boundary=periodic)),
                same_partition(lab, ours.labels))

    # -- distances and paths -----------------------------------------------------------
    def distances(self):
        import catalytic as cat
        import scipy.sparse as sp
        from scipy.sparse.csgraph import dijkstra, shortest_path

        ig, d3, nx = _peer("igraph"), _peer("dijkstra3d"), _peer("networkx")
        rng = np.random.default_rng(1)
        for weighted in (False, True):
            for s in ((24, 48) if self.quick else (24, 48, 96, 128)):
                shape = (s, s, s)
                n = s ** 3
                w = f"distance field 3-D {'weighted' if weighted else 'unweighted'}"
                size = f"{s}^3"
                weights = rng.uniform(1.0, 4.0, shape) if weighted else None
                L = cat.Lattice(shape=shape, weights=weights)
                ours = L.distance_field(0).astype(np.float64)
                self.add(w, size, n, "catalytic", median_time(lambda: L.distance_field(0)))
                if s > 96:  # the specialist only: explicit graphs cost too much memory here
                    self._dijkstra3d_field(d3, w, size, n, shape, weights, ours)
                    continue
                src, dst = _grid_edges(shape)
                cost = np.ones(len(dst)) if weights is None else weights.reshape(-1)[dst]
                t0 = time.perf_counter()
                G = sp.csr_array((cost, (src, dst)), shape=(n, n))
                build = time.perf_counter() - t0
                ref = (shortest_path(G, unweighted=True, indices=0) if not weighted
                       else dijkstra(G, indices=0))
                ok = np.allclose(ref, ours.reshape(-1), rtol=1e-12, atol=1e-9)
                f = ((lambda: shortest_path(G, unweighted=True, indices=0)) if not weighted
                     else (lambda: dijkstra(G, indices=0)))
                self.add(w, size, n, "scipy csgraph", median_time(f), ok,
                         f"graph built in {build * 1e3:.0f} ms, not counted")
                self._dijkstra3d_field(d3, w, size, n, shape, weights, ours)
                if ig is None:
                    self.missing(w, size, n, "igraph", "igraph")
                else:
                    g = ig.Graph(n=n, edges=np.stack([src, dst], 1).tolist(), directed=True)
                    wts = None if weights is None else cost.tolist()
                    got = np.array(g.distances(source=[0], weights=wts)[0], dtype=np.float64)
                    ok = np.allclose(got, ours.reshape(-1), rtol=1e-12)
                    self.add(w, size, n, "igraph", median_time(
                        lambda: g.distances(source=[0], weights=wts)), ok)
                if nx is not None and s == 24:
                    Gx = nx.DiGraph()
                    Gx.add_weighted_edges_from(zip(src.tolist(), dst.tolist(), cost.tolist()))
                    f = ((lambda: nx.single_source_shortest_path_length(Gx, 0)) if not weighted
                         else (lambda: nx.single_source_dijkstra_path_length(Gx, 0)))
                    got = f()
                    ok = all(abs(got[i] - ours.reshape(-1)[i]) < 1e-9 for i in range(n))
                    self.add(w, size, n, "networkx", median_time(f, min_repeat=1, budget=0),
                             ok)
        # point to point, corner to corner: the path's length (hops or summed cost)
        for weighted in (False, True):
            for s in ((48,) if self.quick else (48, 96, 256)):
                shape = (s, s, s)
                n = s ** 3
                w = f"shortest path 3-D {'weighted' if weighted else 'unweighted'}"
                size = f"{s}^3"
                weights = rng.uniform(1.0, 4.0, shape) if weighted else None
                L = cat.Lattice(shape=shape, weights=weights)
                ours = float(L.find_shortest_path(0, n - 1).distance)
                self.add(w, size, n, "catalytic", median_time(
                    lambda: L.find_shortest_path(0, n - 1)))
                if s > 96:  # the specialist only, as above
                    self._dijkstra3d_path(d3, w, size, n, s, weights, ours)
                    continue
                src, dst = _grid_edges(shape)
                cost = np.ones(len(dst)) if weights is None else weights.reshape(-1)[dst]
                G = sp.csr_array((cost, (src, dst)), shape=(n, n))

                def csg():
                    d, pred = dijkstra(G, indices=0, return_predecessors=True,
                                       unweighted=not weighted)
                    return d[n - 1]

                self.add(w, size, n, "scipy csgraph (whole field, then the end)",
                         median_time(csg), abs(csg() - ours) <= 1e-9 * max(ours, 1))
                if ig is not None:
                    g = ig.Graph(n=n, edges=np.stack([src, dst], 1).tolist(), directed=True)
                    wts = None if weights is None else cost.tolist()

                    def igp():
                        return g.get_shortest_path(0, n - 1, weights=wts)

                    path = np.array(igp())
                    length = (len(path) - 1 if weights is None
                              else float(weights.reshape(-1)[path[1:]].sum()))
                    self.add(w, size, n, "igraph get_shortest_path", median_time(igp),
                             abs(length - ours) <= 1e-9 * max(ours, 1))
                self._dijkstra3d_path(d3, w, size, n, s, weights, ours)

    def _dijkstra3d_field(self, d3, w, size, n, shape, weights, ours):
        if d3 is None:
            self.missing(w, size, n, "dijkstra3d", "dijkstra3d")
            return
        field = np.ones(shape, np.float32) if weights is None else weights.astype(np.float32)
        got = d3.distance_field(field, source=(0, 0, 0), connectivity=6)
        ok = np.allclose(got.reshape(-1), ours.reshape(-1), rtol=1e-5)
        self.add(w, size, n, "dijkstra3d (float32)", median_time(
            lambda: d3.distance_field(field, source=(0, 0, 0), connectivity=6)), ok)

    def _dijkstra3d_path(self, d3, w, size, n, s, weights, ours):
        """dijkstra3d's two point-to-point searches: bidirectional and A* (``compass``)."""
        if d3 is None:
            self.missing(w, size, n, "dijkstra3d", "dijkstra3d")
            return
        shape = (s, s, s)
        field = np.ones(shape, np.float32) if weights is None else weights.astype(np.float32)
        for name, opts in (("bidirectional", {"bidirectional": True}),
                           ("A* (compass)", {"compass": True})):
            def call():
                return d3.dijkstra(field, (0, 0, 0), (s - 1,) * 3, connectivity=6, **opts)

            length = float(field[tuple(call()[1:].T)].sum())
            self.add(w, size, n, f"dijkstra3d {name} (float32)", median_time(call),
                     abs(length - ours) <= 1e-4 * max(ours, 1))

    # -- centrality -------------------------------------------------------------------
    def centrality(self):
        self._centrality("closeness", (24, 48) if self.quick else (24, 48, 96))

    def betweenness(self):
        """Exact betweenness (every site a source)."""
        self._centrality("betweenness", (16, 24) if self.quick else (16, 24, 32, 60))

    def _centrality(self, method, sides):
        import catalytic as cat

        ig, nk, rx, nx = (_peer(m) for m in ("igraph", "networkit", "rustworkx", "networkx"))

        def run_nk(algo):
            algo.run()
            return algo.scores()

        # peer: (build the graph from n and the undirected edges, compute the scores)
        closeness = method == "closeness"
        peers = {
            "igraph": (ig, lambda n, und: ig.Graph(n=n, edges=und),
                       (lambda g: g.closeness()) if closeness else
                       (lambda g: np.array(g.betweenness()) * 2.0 / ((g.vcount() - 1)
                                                                    * (g.vcount() - 2)))),
            "networkit": (nk, _networkit_graph,
                          (lambda g: run_nk(nk.centrality.Closeness(
                              g, True, nk.centrality.ClosenessVariant.GENERALIZED)))
                          if closeness else
                          (lambda g: run_nk(nk.centrality.Betweenness(g, normalized=True)))),
            "rustworkx": (rx, _rustworkx_graph,
                          (lambda g: _values(rx.closeness_centrality(g))) if closeness else
                          (lambda g: _values(rx.betweenness_centrality(g, normalized=True)))),
        }
        for s in sides:
            n = s * s
            w, size = f"{method} centrality 2-D", f"{s}x{s}"
            L = cat.Lattice(shape=(s, s))
            ours = L.calculate_centrality(method).reshape(-1)
            self.add(w, size, n, "catalytic", median_time(
                lambda: L.calculate_centrality(method), budget=0.5),
                note=f"{L.last_decision.backend} backend")
            src, dst = _grid_edges((s, s))
            und = [(int(a), int(b)) for a, b in zip(src, dst) if a < b]
            for name, (module, build, score) in peers.items():
                if module is None:
                    self.missing(w, size, n, name, name)
                    continue
                g = build(n, und)
                ok = np.allclose(score(g), ours, rtol=1e-9, atol=1e-12)
                self.add(w, size, n, name, median_time(lambda: score(g)), ok)
            if nx is not None and closeness and s == sides[0]:
                Gx = nx.Graph(und)
                ok = np.allclose(_values(nx.closeness_centrality(Gx)), ours, rtol=1e-9)
                self.add(w, size, n, "networkx", median_time(
                    lambda: nx.closeness_centrality(Gx), min_repeat=1, budget=0), ok)

    # -- fields and arrays ----------------------------------------------------------------
    def fields_and_arrays(self):
        import catalytic as cat
        from scipy import ndimage

        rng = np.random.default_rng(2)
        for s in ((256, 1024) if self.quick else (256, 1024, 4096)):
            shape = (s, s)
            n = s * s
            w, size = "Laplacian 2-D periodic", f"{s}x{s}"
            L = cat.Lattice(shape=shape, periodic=True)
            f = rng.random(shape)
            ours = L.laplacian(f)
            self.add(w, size, n, "catalytic", median_time(lambda: L.laplacian(f)))
            ref = -ndimage.laplace(f, mode="wrap")
            self.add(w, size, n, "scipy.ndimage.laplace", median_time(
                lambda: ndimage.laplace(f, mode="wrap")), bool(np.allclose(ref, ours, atol=1e-9)))
            out = np.empty_like(f)
            self.add(w, size, n, "numpy copy (bandwidth floor)", median_time(
                lambda: np.copyto(out, f)))
        for s in ((128,) if self.quick else (128, 512)):
            shape = (s, s, s)
            n = s ** 3
            w, size = "Laplacian 3-D periodic", f"{s}^3"
            L = cat.Lattice(shape=shape, periodic=True)
            f = rng.random(shape)
            ours = L.laplacian(f)
            self.add(w, size, n, "catalytic", median_time(lambda: L.laplacian(f)))
            if s <= 128:
                ref = -ndimage.laplace(f, mode="wrap")
                self.add(w, size, n, "scipy.ndimage.laplace", median_time(
                    lambda: ndimage.laplace(f, mode="wrap")),
                    bool(np.allclose(ref, ours, atol=1e-9)))
            del ours
            # catalytic returns a new array, so the floor is a copy into a new one
            self.add(w, size, n, "numpy f.copy() (bandwidth floor, new array)",
                     median_time(f.copy))
        for m in ((10**5, 10**7) if self.quick else (10**5, 10**7, 10**8)):
            w, size = "XOR with a key (int64)", f"{m:.0e}"
            L = cat.Lattice(shape=(8, 8))
            data = rng.integers(0, 2**62, m)
            key = rng.integers(0, 2**62, 4096)
            ours = L.xor_transform(data, key)
            self.add(w, size, m, "catalytic", median_time(lambda: L.xor_transform(data, key)))
            kk = np.resize(key, m)
            self.add(w, size, m, "numpy a ^ key", median_time(lambda: data ^ kk),
                     bool(np.array_equal(ours, data ^ kk)), "key pre-tiled, not counted")
        for m in ((256, 1024) if self.quick else (256, 1024, 2048)):
            import catalytic.ops as ops

            a, b = rng.random((m, m)), rng.random((m, m))
            w, size = "matmul float64", f"{m}x{m}"
            ours = ops.matmul(a, b)
            self.add(w, size, m * m, "catalytic", median_time(lambda: ops.matmul(a, b)))
            self.add(w, size, m * m, "numpy @", median_time(lambda: a @ b),
                     bool(np.allclose(ours, a @ b, rtol=1e-12)))

    # -- overheads ----------------------------------------------------------------------------
    def overheads(self):
        import catalytic as cat
        from catalytic.kernels.cpu import components as graph

        L = cat.Lattice(shape=(8, 8), mask=np.random.default_rng(3).random((8, 8)) < 0.6)
        args = L.geometry.kernel_args()
        self.add("router overhead, 8x8 components", "8x8", 64, "catalytic routed call",
                 median_time(L.connected_components, min_repeat=200))
        self.add("router overhead, 8x8 components", "8x8", 64, "kernel called directly",
                 median_time(lambda: graph.connected_components(*args, sizes=True),
                             min_repeat=200))
        # a fresh process: import, build a lattice, one distance field (numba-cpu). The
        # child prints the wall clock when it has the answer: "first answer" is from the
        # launch to then, "whole process" adds the interpreter's teardown (after compiling,
        # Python's last collection of Numba's compiler objects).
        def code(s):
            return ("import time, catalytic as cat; "
                    f"cat.Lattice(shape=({s}, {s}, {s})).distance_field(0, backend='numba-cpu'); "
                    "print(time.time())")

        def fresh(args, env):
            t0 = time.time()
            done = subprocess.run([sys.executable, *args], env=env, check=True,
                                  capture_output=True, text=True)
            end = time.time()
            try:
                first = float(done.stdout.split()[-1]) - t0
            except (IndexError, ValueError):  # not one of ours: no time printed
                first = None
            return first, end - t0

        def cold(s, label, args, env):
            first, whole = fresh(args, env)
            w, size = "cold start (fresh process)", f"{s}^3"
            if first is not None:
                self.add(w, size, s ** 3, f"{label}: first answer", first)
            self.add(w, size, s ** 3, f"{label}: whole process", whole)

        w, size, n = "cold start (fresh process)", "64^3", 64 ** 3
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            cold(64, "catalytic, empty Numba cache", ["-c", code(64)], env)
            cold(64, "catalytic, warm Numba cache", ["-c", code(64)], env)
        if not self.quick:
            # past _SMALL_LAYOUT: the parallel layout kernels compile as well
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, NUMBA_CACHE_DIR=cache)
                cold(256, "catalytic, empty Numba cache", ["-c", code(256)], env)
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            self.add(w, size, n, "catalytic warmup (once, all groups)",
                     fresh(["-m", "catalytic.cli", "warmup"], env)[1])
            cold(64, "catalytic, after catalytic warmup", ["-c", code(64)], env)
        self.add(w, size, n, "python + numpy + scipy import",
                 fresh(["-c", "import numpy, scipy.ndimage"], None)[1])
        d3 = _peer("dijkstra3d")
        if d3 is not None:
            self.add(w, size, n, "dijkstra3d: import and one distance field", fresh(
                ["-c", "import numpy as np, dijkstra3d; "
                 "dijkstra3d.distance_field(np.ones((64, 64, 64), np.float32), (0, 0, 0))"],
                None)[1])

    def first_test_run(self):
        """The project's test command (the README's first half) on an empty Numba cache,
        when run from a checkout (a ``tests`` folder here)."""
        if self.quick:
            print("  first test run: not with --quick (it takes minutes)")
            return
        if not Path("tests").is_dir() or not Path("pyproject.toml").is_file():
            print("  first test run: no checkout here (tests/, pyproject.toml); skipped")
            return
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p",
                                   "no:cacheprovider"], env=env, capture_output=True,
                                  text=True)
            seconds = time.perf_counter() - t0
        last = (done.stdout.strip().splitlines() or ["?"])[-1].strip("= ")
        self.add("first test run (python -m pytest)", "suite", 1, "empty Numba cache",
                 seconds, done.returncode == 0, last)


def _fmt(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.2f} s"


def write_reports(rows, out: Path, quick: bool, seconds: float, baseline=None) -> list:
    """Write benchmarks.json/.md/.png into ``out``. ``baseline`` (the document of an
    earlier run, see :func:`load_baseline`) adds its times as a "before" column on the
    rows it also measured."""
    import numba

    out.mkdir(parents=True, exist_ok=True)
    machine = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
               "python": platform.python_version(), "numpy": np.__version__,
               "numba": numba.__version__, "numba_threads": numba.get_num_threads()}
    doc = {"quick": quick, "seconds": seconds, "machine": machine, "rows": rows}
    paths = [out / "benchmarks.json", out / "benchmarks.md"]
    paths[0].write_text(json.dumps(doc, indent=1))
    lines = [
        "# Benchmarks: catalytic against the strongest peers",
        "",
        f"Measured by `catalytic bench{' --quick' if quick else ''}` in one run of "
        f"{seconds:.0f} s on {machine['platform']}, {machine['cpu_count']} CPUs, Numba "
        f"{machine['numba']} ({machine['numba_threads']} threads), Python "
        f"{machine['python']}. Median of at least 3 calls (1 for rows running NetworkX's "
        "algorithms) after a warm-up; answers "
        "checked before timing. `x catalytic` is the system's time over catalytic's "
        "(above 1: catalytic is faster).",
    ]
    before = {}
    if baseline is not None:
        before = {(r["workload"], r["size"], r["system"]): r["seconds"]
                  for r in baseline["rows"]}
        lines += ["", f"`before`: the same row in {baseline['source']}, a run of "
                  f"{baseline['seconds']:.0f} s on the same kind of machine, kept for "
                  "comparison (empty where that run had no such row)."]
    lines += [
        "",
        "| workload | size | system | median | x catalytic | agrees | note |"
        + (" before |" if before else ""),
        "|---|---:|---|---:|---:|:---:|---|" + ("---:|" if before else ""),
    ]
    ours = {(r["workload"], r["size"]): r["seconds"] for r in rows
            if r["system"] == "catalytic" and r["seconds"]}
    for r in rows:
        t = _fmt(r["seconds"])
        base = ours.get((r["workload"], r["size"]))
        ratio = (f"{r['seconds'] / base:.2f}" if base and r["seconds"] and
                 r["system"] != "catalytic" else "")
        agree = "" if r["agree"] is None else ("yes" if r["agree"] else "**NO**")
        old = before.get((r["workload"], r["size"], r["system"]))
        lines.append(f"| {r['workload']} | {r['size']} | {r['system']} | {t} | {ratio} | "
                     f"{agree} | {r['note']} |" + (f" {_fmt(old)} |" if before else ""))
    paths[1].write_text("\n".join(lines) + "\n")
    png = _plot(rows, out / "benchmarks.png")
    return paths + ([png] if png else [])


def _plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return None
    workloads = [w for w in dict.fromkeys(r["workload"] for r in rows)
                 if len({r["size"] for r in rows if r["workload"] == w}) > 1]
    if not workloads:
        return None
    cols = 3
    nrows = -(-len(workloads) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.8 * nrows), squeeze=False)
    for ax, w in zip(axes.flat, workloads):
        for system in dict.fromkeys(r["system"] for r in rows if r["workload"] == w):
            pts = [(r["sites"], r["seconds"] / r["sites"]) for r in rows
                   if r["workload"] == w and r["system"] == system and r["seconds"]]
            if len(pts) > 0:
                x, y = zip(*pts)
                ax.loglog(x, y, "o-", label=system, lw=2.5 if system == "catalytic" else 1)
        ax.set_title(w, fontsize=10)
        ax.set_xlabel("sites (elements)")
        ax.set_ylabel("seconds per site")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(workloads):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return path


PARTS = ("components", "distances", "centrality", "betweenness", "fields", "overheads",
         "first_test_run")


def load_baseline(path) -> dict:
    """An earlier run's benchmarks.json, for the "before" column; ``source`` names it."""
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError(f"{path} is not a benchmarks.json written by catalytic bench")
    doc["source"] = f"`{path}`"
    return doc


def run(quick: bool = False, output="reports", only=None, baseline=None) -> int:
    """Run the suite (or the ``only`` parts of :data:`PARTS`), print the rows, write the
    reports; returns 1 if any answers disagreed, else 0. ``baseline``: the path of an
    earlier benchmarks.json, read before anything is written (it may be the one this
    run replaces), whose times become the "before" column."""
    import numba

    parts = PARTS if only is None else tuple(only)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; choose from {PARTS}")
    base = None if baseline is None else load_baseline(baseline)
    print(f"catalytic bench{' --quick' if quick else ''}: {numba.get_num_threads()} Numba "
          "threads; answers checked before timing")
    suite = Suite(quick)
    t0 = time.perf_counter()
    funcs = {"components": suite.components, "distances": suite.distances,
             "centrality": suite.centrality, "betweenness": suite.betweenness,
             "fields": suite.fields_and_arrays,
             "overheads": suite.overheads, "first_test_run": suite.first_test_run}
    for part in parts:
        funcs[part]()
    paths = write_reports(suite.rows, Path(output), quick, time.perf_counter() - t0, base)
    print("wrote " + ", ".join(str(p) for p in paths))
    bad = [r for r in suite.rows if r["agree"] is False]
    for r in bad:
        print(f"DISAGREE: {r['workload']} {r['size']} {r['system']}", file=sys.stderr)
    return 1 if bad else 0
