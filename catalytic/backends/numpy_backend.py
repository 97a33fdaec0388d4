"""The ``numpy`` backend: NumPy / SciPy / NetworkX reference implementations.

Every operation has its reference here; the other backends are tested against it. It is
also the route for small work (lowest overhead) and for graph-library algorithms
(betweenness, communities), which build an explicit graph from the implicit lattice.

This module is a plugin like any other: it declares its backend and gives its
implementations through the ``catalytic_add_*`` hooks; the operations themselves are
declared by :mod:`catalytic.catalogue`.
"""

from __future__ import annotations

import numpy as np

from catalytic import memory
from catalytic import catalogue as O
from catalytic import results as R
from catalytic.backends import _common as C
from catalytic.hookspecs import hookimpl

NAME = "numpy"


# -- paths ------------------------------------------------------------------------------
def distance_field(lat, sources, *, spacing=None, parents=False, nearest=False):
    g = lat.geometry.with_spacing(spacing)
    d = C.dist_from(g, sources)
    if not (parents or nearest):
        return d.reshape(g.shape)
    par = C.parents_from(g, d, sources)
    return C.field_outputs(g, d, par if parents else None,
                           C.roots_of(par) if nearest else None)


def shortest_path(lat, start, end, *, spacing=None):
    g = lat.geometry.with_spacing(spacing)
    dist = C.dist_from(g, [start])
    return R.PathResult(C.walk_back(g, dist, start, end), C.path_distance(g, dist, end))


def shortest_paths(lat, start, ends, *, spacing=None, first=False):
    g = lat.geometry.with_spacing(spacing)
    dist = C.dist_from(g, [start])
    return C.paths_to(g, dist, start, ends, first)


def count_shortest_paths(lat, start, end):
    return C.count_paths_exact(lat.geometry, start, end)


def all_paths(lat, start, end, *, max_length=None, limit=O.DEFAULT_PATH_LIMIT,
              max_steps=O.DEFAULT_SEARCH_STEPS):
    """Depth-first enumeration of simple paths, bounded three ways: ``max_length``
    (depth), ``limit`` (paths found) and ``max_steps`` (sites pushed onto the path in
    all). The paths found are held as they are found; when their bytes outgrow the memory
    that was free at the start, the search stops with InsufficientMemoryError."""
    from catalytic.errors import InsufficientMemoryError

    g = lat.geometry
    cutoff = g.n_open - 1 if max_length is None else max_length
    if start == end:
        return [np.array([start], dtype=np.int64)]
    nbrs: dict[int, list[int]] = {}
    site_neighbours = _site_neighbours(g)

    def neighbours(v):
        if v not in nbrs:
            nbrs[v] = site_neighbours(v)
        return nbrs[v]

    out = []
    out_bytes = 0
    room = None  # free memory for the output, read when the output first grows large
    steps = 0
    path = [start]
    on_path = {start}
    stack = [iter(neighbours(start))]
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            on_path.discard(path.pop())
            continue
        if nxt in on_path:
            continue
        if nxt == end:
            if len(path) > cutoff:  # one more step would exceed max_length (max_length=0)
                continue
            found = np.array(path + [end], dtype=np.int64)
            out.append(found)
            if len(out) > limit:
                raise ValueError(
                    f"more than limit={limit} paths from {start} to {end}; pass a smaller "
                    "max_length or a larger limit"
                )
            out_bytes += found.nbytes + 112  # the array and its header
            if out_bytes >= _OUTPUT_CHECK_BYTES:
                room = memory.available_memory() if room is None else room
                if out_bytes > room // 2:
                    raise InsufficientMemoryError(
                        f"find_all_paths output ({len(out)} paths so far)", 2 * out_bytes, room
                    )
            continue
        if len(path) < cutoff:
            steps += 1
            if steps > max_steps:
                raise ValueError(
                    f"find_all_paths from {start} to {end} stopped after max_steps="
                    f"{max_steps} search steps ({len(out)} paths found, path depth "
                    f"{len(path)}) without finishing; pass max_length to bound the path "
                    "length, or a larger max_steps"
                )
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(neighbours(nxt)))
    return out


def _site_neighbours(g):
    """``neighbours(v)``: ``g.get_neighbors(v)`` as a list, in plain Python (cheaper for
    one site than the vectorised path, and the all-paths search asks per site; see
    reports/design_notes.md). A closed bond drops its step before duplicates are
    removed, so the first usable of parallel bonds counts."""
    shape, periodic, d = g.shape, g.periodic, g.dimensions
    strides = [int(s) for s in g.strides]
    offsets = [tuple(int(x) for x in o) for o in g.offsets]
    open_ = g.open_flat if g.mask is not None else None
    dedupe = g.dedupe
    bits = None if g.bond_bits is None else g.bond_bits.tolist()
    slots = [int(s) for s in g.bond_slot]
    words = g.bond_words

    def neighbours(v):
        c, r = [], v
        for s in strides:
            q, r = divmod(r, s)
            c.append(q)
        out = []
        for k, o in enumerate(offsets):
            j = 0
            for a in range(d):
                x = c[a] + o[a]
                if not 0 <= x < shape[a]:
                    if not periodic[a]:
                        break
                    x %= shape[a]
                j += x * strides[a]
            else:
                if open_ is not None and not open_[j]:
                    continue
                if bits is not None:
                    plane = slots[k]
                    start, plane = (v, plane) if plane >= 0 else (j, ~plane)
                    if not (bits[plane * words + (start >> 5)] >> (start & 31)) & 1:
                        continue
                out.append(j)
        if dedupe:
            out = [u for u in dict.fromkeys(out) if u != v]
        return out

    return neighbours


#: output bytes of find_all_paths below which free memory is not read (a psutil reading
#: is not free; see memory.MEMORY_CHECK_MIN_BYTES)
_OUTPUT_CHECK_BYTES = 64 * 2**20


def path_catalytic(lat, start, end, aux):
    """Level-synchronous BFS whose whole state (1 + dist mod 3, 0 = unseen) lives in
    borrowed memory; the walk-back reads the mod-3 marks."""
    from catalytic.catalysis import borrowed_scratch

    g = lat.geometry
    with borrowed_scratch(lat, aux, g.n_points) as (state, _):
        state[:] = 0
        state[start] = 1
        frontier = np.array([start], dtype=np.int64)
        level = 0
        while frontier.size and state[end] == 0:
            level += 1
            nb = _expand(g, frontier)
            nb = np.unique(nb[state[nb] == 0])
            state[nb] = 1 + level % 3
            frontier = nb
        if state[end] == 0:
            return R.PathResult(np.zeros(0, dtype=np.int64), np.inf if g.weighted else -1)
        path = [end]
        v = end
        for lev in range(level, 0, -1):
            want = 1 + (lev - 1) % 3
            nbrs = np.sort(g.get_neighbors(v))
            v = int(nbrs[np.argmax(state[nbrs] == want)])
            path.append(v)
        return R.PathResult(np.array(path[::-1], dtype=np.int64), level)


def _expand(g, frontier):
    return g.displace(frontier)[1]


# -- components and structure ------------------------------------------------------------
def connected_components(lat):
    from scipy.sparse.csgraph import connected_components as cc

    g = lat.geometry
    _, raw = cc(C.adjacency(g), directed=False)
    labels, count = C.canonical_labels(raw, g.open_flat, g.shape)
    return R.Components(labels, count, C.component_sizes(labels, count))


def label(lat, keys, sites, delta):
    """Clusters of close values: the usable neighbour pairs between labelled sites
    whose keys are at most ``delta`` apart, labelled by SciPy."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components as cc

    g = lat.geometry.with_mask(sites.reshape(lat.geometry.shape).view(bool))
    rows, cols = g.neighbor_pairs()
    a, b = keys[rows], keys[cols]
    with np.errstate(invalid="ignore"):  # inf - inf: equal infinities are joined by a == b
        close = (a == b) | (np.maximum(a, b) - np.minimum(a, b) <= delta)
    n = g.n_points
    adj = sp.coo_array((np.ones(int(close.sum()), dtype=np.int8), (rows[close], cols[close])),
                       shape=(n, n)).tocsr()
    _, raw = cc(adj, directed=False)
    labels, count = C.canonical_labels(raw, sites, g.shape)
    return R.Components(labels, count, C.component_sizes(labels, count))


def batched_label(lat, stack, keys, sites, delta):
    """``label`` of every row of ``stack`` (rows labelled one after another)."""
    return [label(lat, keys, row & sites, delta) for row in stack]


def cluster_statistics(lat, labels, field):
    from catalytic.backends._clusters import cluster_statistics as stats

    return stats(lat.geometry, labels, field)


def region_graph(lat, labels):
    from catalytic.backends._clusters import region_graph as graph

    return graph(lat.geometry, labels)


def distance_transform(lat, marked, keys, spacing, squared, dtype, indices):
    from catalytic.backends._distance import distance_transform as transform

    return transform(lat.geometry, marked, keys, spacing, squared, dtype, indices)


def transport(lat, high, low, *, conductance, tol, maxiter=None):
    """The reference: the reduced system assembled and solved by SciPy's ``spsolve``
    (``maxiter`` unused: the solve is direct)."""
    from catalytic.backends import _transport as T

    g = lat.geometry
    far, inside = T.far_ends(g)
    sigma = T.bond_conductances(g, conductance, (far, inside))
    red = T.reduce(g, T.conducting_labels(g, sigma, far), high, low)
    phi, residual = T.reference_solve(g, sigma, red, tol, far)
    return T.finish(g, sigma, red, phi, high, 0, residual, far)


def batched_distance_transform(lat, rows, keys, spacing, squared, dtype, indices):
    from catalytic.backends._distance import distance_transform_stack

    return distance_transform_stack(lat.geometry, rows, keys, spacing, squared, dtype,
                                    indices)


def percolates(lat, *, axis=0):
    return C.percolates_with(connected_components, lat, axis)


def spanning_clusters(lat, *, axes):
    """Labels of the clusters spanning (open axis) or wrapping (periodic axis) each
    axis, from one labelling."""
    return C.spanning_with(connected_components, lat, axes)


def degree(lat):
    return lat.geometry.degree()


def analyze_structure(lat, *, max_diameter_sites=20_000):
    from scipy.sparse.csgraph import connected_components as cc

    g = lat.geometry
    a = C.adjacency(g)
    deg = np.diff(a.indptr)
    open_idx = g.open_sites()
    v = len(open_idx)
    e = int(a.nnz // 2)
    n_comp = 0
    largest = 0
    if v:
        _, raw = cc(a, directed=False)
        sizes = np.bincount(raw[open_idx])
        sizes = sizes[sizes > 0]
        n_comp, largest = len(sizes), int(sizes.max())
    a64 = a.astype(np.int64)
    tri = np.asarray((a64 @ a64).multiply(a64).sum(axis=1)).reshape(-1)[open_idx] / 2
    d_open = deg[open_idx].astype(np.float64)
    pairs = d_open * (d_open - 1) / 2
    local = np.divide(tri, pairs, out=np.zeros_like(tri, dtype=np.float64), where=pairs > 0)
    diameter, how = _diameter(g, a, open_idx, max_diameter_sites, n_comp)
    return {
        "shape": g.shape,
        "dimensions": g.dimensions,
        "periodic": g.periodic,
        "stencil": g.stencil,
        "vertices": v,
        "blocked": g.n_points - v,
        "edges": e,
        "is_connected": n_comp == 1,
        "n_components": n_comp,
        "largest_component": largest,
        "diameter": diameter,
        "diameter_method": how,
        "avg_degree": float(d_open.mean()) if v else 0.0,
        "min_degree": int(d_open.min()) if v else 0,
        "max_degree": int(d_open.max()) if v else 0,
        "density": 2.0 * e / (v * (v - 1)) if v > 1 else 0.0,
        "clustering_coefficient": float(local.mean()) if v else 0.0,
        "triangles": int(tri.sum() // 3),
    }


def _diameter(g, a, open_idx, max_sites, n_comp):
    """Largest finite hop distance between two sites (max over components)."""
    if len(open_idx) == 0:
        return 0, "empty"
    if (g.mask is None and g.bond_bits is None and g.stencil in ("von_neumann", "moore")
            and not g.dedupe):
        reach = [(s // 2 if p else s - 1) for s, p in zip(g.shape, g.periodic)]
        d = sum(reach) if g.stencil == "von_neumann" else max(reach)
        return int(d), "closed form (full lattice)"
    if len(open_idx) > max_sites:
        return None, (
            f"skipped: {len(open_idx)} sites > max_diameter_sites={max_sites} "
            "(exact diameter is all-pairs BFS, O(V E))"
        )
    from scipy.sparse.csgraph import dijkstra

    best = 0
    for chunk in np.array_split(open_idx, max(1, len(open_idx) // 256)):
        d = dijkstra(a, indices=chunk, unweighted=True)
        d = d[np.isfinite(d)]
        best = max(best, int(d.max()))
    return best, "all-pairs BFS"


# -- centrality and communities -----------------------------------------------------------
def centrality(lat, *, method="degree", k=None, seed=None):
    g = lat.geometry
    open_idx = g.open_sites()
    if method == "degree":
        return C.finish_centrality(g, np.diff(C.adjacency(g).indptr), degree=True)
    out = np.full(g.n_points, np.nan)
    if method == "closeness":
        out[open_idx] = _closeness(g, open_idx)
    elif method == "betweenness":
        import networkx as nx

        bc = nx.betweenness_centrality(g.to_networkx(), k=k, seed=seed)
        out[open_idx] = [bc[int(i)] for i in open_idx]
    elif method == "eigenvector":
        out[open_idx] = _eigenvector(g, open_idx)
    return out.reshape(g.shape)


def _closeness(g, open_idx):
    """NetworkX closeness (wf_improved=True) from BFS distances, in chunks of sources."""
    from scipy.sparse.csgraph import dijkstra

    a = C.adjacency(g)
    v = len(open_idx)
    res = np.zeros(v)
    for chunk_ids in np.array_split(np.arange(v), max(1, v // 256)):
        d = dijkstra(a, indices=open_idx[chunk_ids], unweighted=True)
        finite = np.isfinite(d)
        tot = np.where(finite, d, 0).sum(axis=1)
        r = finite.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where((tot > 0) & (v > 1), (r - 1) / tot * (r - 1) / max(v - 1, 1), 0.0)
        res[chunk_ids] = c
    return res


def _eigenvector(g, open_idx):
    """Leading eigenvector of the adjacency (unit Euclidean norm, non-negative), as
    ``networkx.eigenvector_centrality_numpy`` normalises it."""
    from scipy.sparse.linalg import eigsh

    from scipy.sparse.csgraph import connected_components as cc

    a = C.adjacency(g).astype(np.float64)[open_idx][:, open_idx]
    v = len(open_idx)
    if v == 0:
        return np.zeros(0)
    if v == 1:
        return np.array([1.0])
    n_comp = cc(a, directed=False)[0]
    if n_comp > 1:
        raise ValueError(
            f"eigenvector centrality is ambiguous on a disconnected lattice ({n_comp} "
            "components: each has its own leading eigenvector); compute it per component"
        )
    if v < 3:
        w, vec = np.linalg.eigh(a.toarray())
        x = vec[:, -1]
    else:
        _, vec = eigsh(a, k=1, which="LA", v0=np.ones(v))
        x = vec[:, 0]
    x = np.abs(x) if x.sum() >= 0 else -x
    x = np.abs(x)
    return x / np.linalg.norm(x)


def communities(lat, *, method="louvain", seed=0):
    from networkx.algorithms import community as nxc

    g = lat.geometry
    if method == "edge_betweenness" and g.n_open > 2000:
        raise ValueError(
            f"edge_betweenness (Girvan-Newman) is O(E^2 V); {g.n_open} sites is too many "
            "(limit 2000): use method='louvain'"
        )
    G = g.to_networkx()
    if G.number_of_nodes() == 0:
        return R.Communities(np.full(g.shape, -1, dtype=np.int64), 0, 0.0)
    # bond weights are the edges' "weight": modularity is 0/0 when they sum to 0
    no_weight = g.bond_weights is not None and G.size(weight="weight") == 0
    if method == "louvain" and no_weight:
        parts = [{v} for v in G.nodes]
    elif method == "louvain":
        parts = nxc.louvain_communities(G, seed=seed)
    elif method == "label_propagation":
        parts = list(nxc.asyn_lpa_communities(G, seed=seed))
    else:
        if G.number_of_edges() == 0:
            parts = [{n} for n in G.nodes]
        else:
            parts = list(next(nxc.girvan_newman(G)))
    labels = np.full(g.n_points, -1, dtype=np.int64)
    parts = sorted((sorted(p) for p in parts), key=lambda p: p[0])
    for k, p in enumerate(parts):
        labels[np.asarray(p, dtype=np.int64)] = k
    q = 0.0
    if G.number_of_edges() and not no_weight:
        q = nxc.modularity(G, [set(p) for p in parts])
    return R.Communities(labels.reshape(g.shape), len(parts), float(q))


# -- fields -------------------------------------------------------------------------------
def _laplacian_matrix(g):
    """``D - A``: with bond weights, ``A`` holds the conductances (the least of
    parallel bonds; a bond of weight 0 is still an edge), otherwise 1 per edge."""
    from scipy.sparse.csgraph import laplacian as csl

    if g.bond_weights is not None:
        return csl(g.adjacency(weighted=True))
    return csl(C.adjacency(g).astype(np.float64))


def _apply_laplacian(g, L, f):
    """``L @ f``, 0 at blocked sites: csgraph stores their (zero) diagonal explicitly, and
    ``0 * nan`` would turn a NaN or inf held by a blocked site into NaN."""
    out = np.asarray(L @ f).reshape(-1)  # (a 1 x 1 sparse matrix gives a scalar)
    if g.mask is not None:
        out[g.open_flat == 0] = 0.0
    return out


def laplacian(lat, field):
    g = lat.geometry
    f = field.reshape(-1).astype(np.float64)
    return _apply_laplacian(g, _laplacian_matrix(g), f).reshape(g.shape)


def diffuse(lat, field, *, steps=1, alpha=0.1):
    g = lat.geometry
    L = _laplacian_matrix(g)
    f = field.reshape(-1).astype(np.float64)
    for _ in range(steps):
        f = f - alpha * _apply_laplacian(g, L, f)
    return f.reshape(g.shape)


# -- transforms and array ops ---------------------------------------------------------------
@O.xor_values
def xor_transform(lat, data, key=None):
    """The reference: the lattice's key bytes repeated over the data's bytes (native
    order, so its values: ``O.xor_values``), or an integer key elementwise, repeated."""
    src = np.ascontiguousarray(data)
    if key is None:
        raw = src.reshape(-1).view(np.uint8)
        k = lat.key_buffer
        if raw.size <= k.size:
            out = raw ^ k[: raw.size]
        else:
            out = raw ^ np.resize(k, raw.size)
        return out.view(src.dtype).reshape(np.shape(data))
    flat = src.reshape(-1)
    kk = key if key.size >= flat.size else np.resize(key, flat.size)
    return (flat ^ kk[: flat.size]).reshape(np.shape(data))


def normalize(data):
    x = data.astype(np.float64)
    if x.size == 0:
        return x
    lo, hi = x.min(), x.max()
    if hi == lo:
        return np.zeros_like(x)
    return (x - lo) / (hi - lo)


def scale(data, *, factor=1.0):
    return data.astype(np.float64) * factor


def matmul(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _int_sum(x) -> int:
    """The exact sum of an integer array, as a Python int (never wraps)."""
    flat = x.reshape(-1)
    n = flat.size
    if x.dtype.itemsize <= 4 and n < 2**31:  # |x| < 2**32: the int64 sum cannot overflow
        return int(flat.sum(dtype=np.int64))
    if n <= 64:
        return sum(flat.tolist())
    # 64-bit values: sum the high and low 32-bit halves apart (each sum of at most 2**20
    # halves fits in int64), then join them in Python ints
    total = 0
    for lo in range(0, n, 1 << 20):
        c = flat[lo : lo + (1 << 20)]
        total += (int((c >> 32).sum(dtype=np.int64)) << 32) + int(
            (c & 0xFFFFFFFF).sum(dtype=np.int64)
        )
    return total


def reduce(x, op):
    if x.dtype.kind in "iu" and op in ("sum", "mean"):
        total = _int_sum(x)
        if op == "sum":
            return O.int_sum_result(total, x.dtype)
        return np.float64(total / x.size)  # int / int is correctly rounded
    if op == "sum":
        return x.sum(dtype=np.float64)
    if op == "mean":
        return np.float64(np.mean(x, dtype=np.float64))
    return getattr(np, op)(x)


_UFUNC = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power, "neg": np.negative,
    "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos,
}


def elementwise(op, a, b=None):
    a = a.astype(np.float64)
    if b is None:
        return _UFUNC[op](a)
    return _UFUNC[op](a, b.astype(np.float64))


def random(shape, seed, distribution):
    from catalytic.kernels.random import random_numpy

    return random_numpy(shape, seed, distribution)


# -- batched twins: the reference loops over the rows ----------------------------------------
def batched_connected_components(lat, stack):
    """``connected_components`` of ``lat.with_mask(row)`` for every row of ``stack``
    (an ensemble of masks, ``(B, *shape)``): a list of Components."""
    return [connected_components(one) for one in C.each_lattice(lat, stack)]


def batched_percolates(lat, stack, *, axis=0):
    """``percolates(axis)`` of ``lat.with_mask(row)`` for every row of ``stack``."""
    return [percolates(one, axis=axis) for one in C.each_lattice(lat, stack)]


def batched_spanning_clusters(lat, stack, *, axes):
    """``spanning_clusters(axes)`` of ``lat.with_mask(row)`` for every row of ``stack``."""
    return [spanning_clusters(one, axes=axes) for one in C.each_lattice(lat, stack)]


def batched_distance_field(lat, stack, sources):
    """``distance_field(sources)`` of ``lat.with_mask(row)`` for every row of ``stack``."""
    return [distance_field(one, sources) for one in C.each_lattice(lat, stack)]


def batched_laplacian(lat, fields):
    """``laplacian(field)`` on ``lat`` for every row of ``fields`` (B, n), each in the
    lattice's shape."""
    return [laplacian(lat, f) for f in fields]


def batched_xor_transform(lat, data, key=None):
    """``xor_transform(row, key)`` on ``lat`` for every row of ``data``: each row from
    the start of the key, as a single call."""
    return [xor_transform(lat, row, key) for row in data]


def spanning_thresholds(lat, samples, *, axis=0, seed=0):
    """Newman-Ziff thresholds the slow, independent way: for each sample, the same
    occupation order as the kernel (``kernels.cpu.percolation.sample_order``), then a
    binary search for the first prefix of it whose lattice spans ``axis``, every
    prefix labelled afresh by :func:`percolates`."""
    from catalytic.kernels.cpu.percolation import sample_order
    from catalytic.kernels.random import stream_key

    g = lat.geometry
    n = g.n_points
    open_idx = np.arange(n) if g.mask is None else np.flatnonzero(g.open_flat)
    key = stream_key(seed)
    base = lat.with_mask(np.zeros(g.shape, dtype=bool))

    def spans(order, t):
        m = np.zeros(n, dtype=bool)
        m[order[:t]] = True
        return percolates(base.with_mask(m.reshape(g.shape)), axis=axis)

    out = np.empty(samples, dtype=np.int64)
    for b in range(samples):
        order = sample_order(key, b, n, open_idx)
        if not spans(order, len(order)):
            out[b] = -1
            continue
        lo, hi = 0, len(order)  # spans(hi), not spans(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if spans(order, mid) else (mid, hi)
        out[b] = hi
    return out


def newman_ziff(lat, count, *, first=0, kind="site", seed=0, observables=O.NZ_OBSERVABLES,
                n_stride=1):
    """Newman-Ziff sweeps the slow, independent way: the kernel's occupation orders
    (``kernels.cpu.newman_ziff.sample_order``), then every prefix labelled afresh by
    ``scipy.sparse.csgraph.connected_components`` over the usable bonds, and wrapping
    found by giving every site of a component a lift (its seam crossings from the
    component's first site along a breadth-first tree) and testing every bond against
    it. O(N^2) per sweep: small lattices only."""
    from collections import deque

    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components as cc

    from catalytic.kernels.cpu.newman_ziff import sample_order
    from catalytic.kernels.random import stream_key
    from catalytic.percolation import NZResult

    g = lat.geometry
    n, d = g.n_points, g.dimensions
    sites = g.open_sites()
    # every usable bond once (from either end's steps), with its ends and seam crossings
    _, _, e = g.displace(sites, bond_index=True)
    bonds = np.unique(e)
    plane, start = np.divmod(bonds, n)
    c0 = np.stack(np.unravel_index(start, g.shape), axis=1)
    c1 = c0 + g.bond_offsets[plane]
    turns = np.floor_divide(c1, np.asarray(g.shape))
    end = np.ravel_multi_index(tuple((c1 % np.asarray(g.shape)).T), g.shape)
    pax = [a for a in range(d) if g.periodic[a]]
    turns = turns[:, pax]
    elems = sites if kind == "site" else bonds
    N = len(elems)
    coords = np.stack(np.unravel_index(np.arange(n), g.shape), axis=1)
    key = stream_key(seed)
    stride_n = np.arange(0, N + 1, n_stride)
    sums = {name: np.zeros((2, len(stride_n))) for name in observables}
    events = np.full((count, 2 * d + 2), -1, dtype=np.int64)

    def state(occ, active):
        """Cluster sizes, and per open axis / periodic axis whether a cluster spans /
        wraps it, of the occupied sites ``occ`` (bool per site) joined by ``active``
        bonds."""
        u, v, t = start[active], end[active], turns[active]
        adj = coo_array((np.ones(len(u)), (u, v)), shape=(n, n))
        _, lab = cc(adj, directed=False)
        lab = np.where(occ, lab, -1)
        ids, sizes = np.unique(lab[occ], return_counts=True)
        span = np.zeros(d, dtype=bool)
        for a in range(d):
            if not g.periodic[a]:
                lo = np.unique(lab[occ & (coords[:, a] == 0)])
                hi = np.unique(lab[occ & (coords[:, a] == g.shape[a] - 1)])
                span[a] = len(np.intersect1d(lo, hi)) > 0
        wrap = np.zeros(d, dtype=bool)
        if pax and len(u):
            nbrs = {}
            for x, y, tt in zip(u.tolist(), v.tolist(), t.tolist()):
                nbrs.setdefault(x, []).append((y, np.array(tt)))
                nbrs.setdefault(y, []).append((x, -np.array(tt)))
            lift = {}
            for root in nbrs:
                if root in lift:
                    continue
                lift[root] = np.zeros(len(pax), dtype=np.int64)
                todo = deque([root])
                while todo:
                    x = todo.popleft()
                    for y, tt in nbrs[x]:
                        if y not in lift:
                            lift[y] = lift[x] + tt
                            todo.append(y)
            for x, y, tt in zip(u.tolist(), v.tolist(), t):
                wrap[pax] |= (lift[x] + tt - lift[y]) != 0
        return sizes, span, wrap

    for q in range(count):
        order = sample_order(key, first + q, n if kind == "site" else len(g.bond_offsets) * n,
                             elems)
        ev = events[q]
        for t in range(N + 1):
            if kind == "site":
                occ = np.zeros(n, dtype=bool)
                occ[order[:t]] = True
                active = occ[start] & occ[end]
            else:
                occ = np.zeros(n, dtype=bool)
                occ[sites] = True
                active = np.isin(bonds, order[:t])
            sizes, span, wrap = state(occ, active)
            for a in range(d):
                if span[a] and ev[a] < 0:
                    ev[a] = t
                if wrap[a] and ev[d + a] < 0:
                    ev[d + a] = t
            if wrap.any() and ev[2 * d] < 0:
                ev[2 * d] = t
            if pax and wrap[pax].all() and ev[2 * d + 1] < 0:
                ev[2 * d + 1] = t
            if t % n_stride:
                continue
            r = t // n_stride
            smax = int(sizes.max()) if len(sizes) else 0
            rest = int(sizes.sum()) - smax
            values = {"largest": float(smax),
                      "mean_size": (float((sizes.astype(np.float64) ** 2).sum() - smax * smax)
                                    / rest if rest > 0 else 0.0),
                      "clusters": float(len(sizes))}
            for name in observables:
                sums[name][0, r] += values[name]
                sums[name][1, r] += values[name] ** 2
    return NZResult(kind=kind, shape=g.shape, periodic=g.periodic, N=N, n_sites=len(sites),
                    n_stride=n_stride, seed=seed, ranges=[(first, first + count)],
                    events=events, sums=sums)


def _nz_fits(lat, count, **kwargs):
    """The sums and one sweep's scratch must fit in free memory."""
    return memory.host_shortfall(*O.nz_memory(lat, count, threads=1, **kwargs))


#: seconds the reference spends relabelling one prefix of a sweep (at least): its
#: O(N^2) per sweep is what the work count (O(N log N)) cannot see
NZ_PREFIX_S = 50e-6


def _nz_terms(params, lat, count, *, kind="site", **_):
    """The reference relabels every prefix of every sweep."""
    prefix = params.get("nz_prefix_s", NZ_PREFIX_S)
    return {"relabel every prefix": count * (O.nz_elements(lat, kind) + 1) * prefix}


# -- registration ---------------------------------------------------------------------------
#: this backend's implementation of each operation the core declares (catalytic.catalogue)
IMPLEMENTATIONS = {
    "distance_field": distance_field,
    "shortest_path": shortest_path,
    "shortest_paths": shortest_paths,
    "count_shortest_paths": count_shortest_paths,
    "all_paths": all_paths,
    "path_catalytic": path_catalytic,
    "connected_components": connected_components,
    "label": label,
    "cluster_statistics": cluster_statistics,
    "batched.label": batched_label,
    "region_graph": region_graph,
    "distance_transform": distance_transform,
    "transport": transport,
    "batched.distance_transform": batched_distance_transform,
    "percolates": percolates,
    "spanning_clusters": spanning_clusters,
    "degree": degree,
    "analyze_structure": analyze_structure,
    "centrality": centrality,
    "communities": communities,
    "laplacian": laplacian,
    "diffuse": diffuse,
    "xor_transform": xor_transform,
    "normalize": normalize,
    "scale": scale,
    "matmul": matmul,
    "reduce": reduce,
    "elementwise": elementwise,
    "random": random,
    "batched.connected_components": batched_connected_components,
    "batched.percolates": batched_percolates,
    "batched.spanning_clusters": batched_spanning_clusters,
    "batched.distance_field": batched_distance_field,
    "batched.laplacian": batched_laplacian,
    "batched.xor_transform": batched_xor_transform,
    "spanning_thresholds": spanning_thresholds,
    "newman_ziff": newman_ziff,
}

#: default cost (overhead_s, throughput) used until ``catalytic calibrate`` measures one
DEFAULT_COST = (20e-6, 2e7)


@hookimpl
def catalytic_add_backends(registry):
    registry.add_backend(
        NAME, available=(True, "NumPy/SciPy/NetworkX are dependencies"), device="cpu",
        description="NumPy / SciPy / NetworkX reference implementations",
    )


#: operations whose reference implementation builds an explicit graph (CSR, NetworkX)
GRAPH_OPS = {
    "distance_field", "shortest_path", "shortest_paths", "count_shortest_paths", "connected_components",
    "label", "percolates", "spanning_clusters", "degree", "analyze_structure", "centrality", "communities", "laplacian",
    "diffuse", "batched.connected_components", "batched.percolates", "batched.spanning_clusters",
    "batched.distance_field", "batched.laplacian",
}


def _graph_fits(lat, *args, **kwargs):
    """The explicit graph must fit in free memory; otherwise say how much it needs."""
    return memory.host_shortfall("the explicit graph", O.mem_graph(lat))


#: the operations whose implementation here honours bonds and bond weights (the router
#: refuses the others a lattice that has them)
BONDS: set[str] = {
    "transport",  # the conductances are read from the bonds (backends._transport)
    "distance_field", "shortest_path", "shortest_paths", "count_shortest_paths", "all_paths", "path_catalytic",
    "connected_components", "label", "batched.label", "cluster_statistics", "region_graph",
    "percolates",
    "spanning_clusters", "degree", "analyze_structure", "centrality", "communities", "laplacian", "diffuse", "batched.connected_components",
    "batched.percolates", "batched.spanning_clusters", "batched.distance_field",
    "batched.laplacian",
    "newman_ziff",  # its reference reads the usable bonds (Geometry.displace)
    "spanning_thresholds",  # each prefix labelled by percolates, which honours them
}


@hookimpl
def catalytic_add_operations(registry):
    for name, func in IMPLEMENTATIONS.items():
        supports = _graph_fits if name in GRAPH_OPS else None
        supports = _nz_fits if name == "newman_ziff" else supports
        registry.add_implementation(name, NAME, func, supports=supports, cost=DEFAULT_COST,
                                    bonds=name in BONDS,
                                    terms=_nz_terms if name == "newman_ziff" else None)
