"""``catalytic bench``: routed calls against SciPy on the same inputs, measured now.

A quick, installed check of where this machine stands (the full comparisons against
igraph, NetworkX, cc3d and dijkstra3d live in the repository's ``benchmarks/``). Each
row checks that both sides give the same answer, then times them: the best of 5 calls
after a warm-up (JIT compilation is not counted), SciPy's graph construction outside its
time.

* connected components of a site-percolation mask (p = 0.6): ``L.connected_components()``
  against ``scipy.ndimage.label``;
* a distance field from one corner of an open grid: ``L.distance_field(0)`` against
  ``scipy.sparse.csgraph.shortest_path(unweighted=True)`` on the grid's adjacency;
* an ensemble of 100 masks, components and spanning clusters:
  ``BatchProcessor.map("spanning_clusters")`` against a loop of ``ndimage.label``.
"""

from __future__ import annotations

import time

import numpy as np


def _best(func, repeat=5):
    func()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - t0)
    return best


def _grid_graph(shape):
    import scipy.sparse as sp

    n = int(np.prod(shape))
    idx = np.arange(n).reshape(shape)
    rows, cols = [], []
    for a in range(len(shape)):
        lo = np.take(idx, range(shape[a] - 1), axis=a).reshape(-1)
        hi = np.take(idx, range(1, shape[a]), axis=a).reshape(-1)
        rows += [lo, hi]
        cols += [hi, lo]
    r, c = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_array((np.ones(len(r)), (r, c)), shape=(n, n))


def rows(quick: bool):
    """``(what, size, catalytic_s, scipy_s)`` rows, measured in this call."""
    from scipy import ndimage
    from scipy.sparse.csgraph import shortest_path

    import catalytic as cat

    rng = np.random.default_rng(0)
    sides = (64, 256) if quick else (64, 256, 1024)
    out = []
    for s in sides:
        mask = rng.random((s, s)) < 0.6
        L = cat.Lattice(shape=(s, s), mask=mask)
        got = L.connected_components()
        want, count = ndimage.label(mask)
        assert got.count == count and np.array_equal(got.labels, want)
        out.append(("connected components", f"{s}x{s}", _best(L.connected_components),
                    _best(lambda: ndimage.label(mask))))
    for s in sides[:2] if quick else sides[:3]:
        L = cat.Lattice(shape=(s, s))
        graph = _grid_graph((s, s))
        d = L.distance_field(0).reshape(-1)
        ref = shortest_path(graph, unweighted=True, indices=0)
        assert np.array_equal(d, ref.astype(np.int64))
        out.append(("distance field", f"{s}x{s}", _best(lambda: L.distance_field(0)),
                    _best(lambda: shortest_path(graph, unweighted=True, indices=0))))
    base = cat.Lattice(shape=(128, 128))
    masks = rng.random((100, 128, 128)) < 0.6
    lats = [base.with_mask(m) for m in masks]
    bp = cat.BatchProcessor(lats, progress=False)

    def nd_loop():
        res = []
        for m in masks:
            lab, _ = ndimage.label(m)
            lo, hi = lab[0], lab[-1]
            res.append(np.intersect1d(lo[lo > 0], hi[hi > 0]))
        return res

    got = bp.map("spanning_clusters", axes=(0,))
    assert all(np.array_equal(g.clusters[0], w) for g, w in zip(got, nd_loop()))
    out.append(("ensemble: components + spanning", "100 x 128x128",
                _best(lambda: bp.map("spanning_clusters", axes=(0,))), _best(nd_loop)))
    return out


def run(quick: bool = False) -> int:
    """Print the rows; returns 0."""
    import numba

    print(f"catalytic bench{' --quick' if quick else ''}: best of 5 after a warm-up, "
          f"{numba.get_num_threads()} Numba threads; each row checked equal first")
    print(f"{'what':<34}{'size':>15}{'catalytic':>12}{'SciPy':>12}{'SciPy/catalytic':>17}")
    for what, size, ours, theirs in rows(quick):
        print(f"{what:<34}{size:>15}{ours * 1e3:>10.3f}ms{theirs * 1e3:>10.3f}ms"
              f"{theirs / ours:>16.2f}x")
    return 0
