"""Small post-processing steps every backend shares (so results agree exactly)."""

from __future__ import annotations

import numpy as np

from catalytic import catalogue as O
from catalytic.results import Components, PathResult, SpanningClusters


def canonical_labels(raw: np.ndarray, open_flat: np.ndarray, shape) -> tuple[np.ndarray, int]:
    """Renumber component ids so components are 1..count in order of lowest flat index.

    ``raw`` holds any integer id per site; blocked sites (``open_flat == 0``) get 0.
    ``open_flat`` of length 0 means every site is open.
    """
    raw = raw.reshape(-1)
    n = raw.size
    open_idx = np.arange(n) if open_flat.size == 0 else np.flatnonzero(open_flat)
    ids = raw[open_idx]
    uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    dtype = np.int32 if n < 2**31 else np.int64
    labels = np.zeros(n, dtype=dtype)
    labels[open_idx] = rank[inv] + 1
    return labels.reshape(shape), len(uniq)


#: sites counted per ``np.bincount`` call in :func:`component_sizes` (at least)
SIZES_CHUNK = 1 << 24


def component_sizes(labels: np.ndarray, count: int) -> np.ndarray:
    """Sites per label ``1..count`` (int64). Counted in pieces of at least
    :data:`SIZES_CHUNK` sites (and at least ``count``, so the per-piece histograms cost
    no more than the sites), returning to Python between pieces so that signal handlers
    can run: one ``bincount`` over 1.2e9 labels would hold Ctrl-C for seconds."""
    flat = labels.reshape(-1)
    step = max(SIZES_CHUNK, count + 1)
    if flat.size <= step:
        return np.bincount(flat, minlength=count + 1)[1:].astype(np.int64)
    sizes = np.zeros(count + 1, dtype=np.int64)
    for lo in range(0, flat.size, step):
        sizes += np.bincount(flat[lo:lo + step], minlength=count + 1)
    return sizes[1:]


def spanning_with(components, lat, axes):
    """:class:`SpanningClusters` of ``lat`` from the labelling ``components(lat)`` (a
    backend's own ``connected_components``) and the winding check on the host."""
    comp = components(lat)
    return SpanningClusters(spanning_clusters(lat.geometry, comp.labels, axes), comp)


def percolates_with(components, lat, axis) -> bool:
    """Whether a cluster spans (open axis) or wraps (periodic axis) ``axis``."""
    return bool(spanning_with(components, lat, (axis,)).clusters[axis].size)


# -- batched twins (see catalogue.BATCHED_PREFIX) -----------------------------------------
def each_lattice(lat, stack):
    """``lat.with_mask(row)`` for every row of a checked stack (one at a time)."""
    shape = lat.geometry.shape
    for row in stack:
        yield lat.with_mask(row.view(np.bool_).reshape(shape))


def components_of_stack(geometry, labels, counts, sizes) -> list:
    """One :class:`Components` per row of a batched labelling, each owning its arrays
    (as a single call's would), in the lattice's shape: ``labels`` (B, n) rows are
    copied, a list of one array per row (already their own) is reshaped."""
    own = isinstance(labels, list)
    return [Components(labels[b].reshape(geometry.shape) if own
                       else labels[b].reshape(geometry.shape).copy(), int(counts[b]), sizes[b])
            for b in range(len(counts))]


def spanning_of_stack(lat, stack, labels, comps, axes) -> list:
    """:class:`SpanningClusters` for every row of a stack from its labelling: ``labels``
    (B, n) as the batched kernel gave them, a list of one array per row, or None;
    ``comps`` one :class:`Components` per row.
    Open axes by one parallel face kernel over all rows, periodic axes by
    :func:`wrapping_labels` row by row."""
    from catalytic.kernels.cpu.batched import face_spanning_rows
    from catalytic.kernels.cpu.components import face_spanning_batched
    g = lat.geometry
    found = [{} for _ in comps]
    counts = np.array([c.count for c in comps], dtype=np.int64)
    for a in axes:
        if g.periodic[a]:
            continue
        if labels is None:  # rows labelled one by one (large lattices): not stacked
            for b, c in enumerate(comps):
                found[b][a] = face_spanning(c.labels, a)
            continue
        faces = face_spanning_rows if isinstance(labels, list) else face_spanning_batched
        for b, labs in enumerate(faces(labels, counts, g.shape, a)):
            found[b][a] = labs
    wrapped = [a for a in axes if g.periodic[a]]
    if wrapped:
        for b, one in enumerate(each_lattice(lat, stack)):
            found[b].update(wrapping_labels(one.geometry, comps[b].labels, wrapped))
    return [SpanningClusters({a: f[a] for a in axes}, c) for f, c in zip(found, comps)]


def percolates_of_stack(lat, stack, labels, comps, axis) -> list:
    """Whether each row percolates along ``axis`` (see :func:`percolates_with`)."""
    return [bool(s.clusters[axis].size)
            for s in spanning_of_stack(lat, stack, labels, comps, (axis,))]


def stack_twins(label_stack) -> dict:
    """The batched twins of ``connected_components``, ``percolates`` and
    ``spanning_clusters`` from a backend's ``label_stack(lat, stack) -> (labels, comps)``
    (labels (B, n) or None, one :class:`Components` per row), keyed by twin name."""

    def batched_connected_components(lat, stack):
        return label_stack(lat, stack)[1]

    def batched_percolates(lat, stack, *, axis=0):
        return percolates_of_stack(lat, stack, *label_stack(lat, stack), axis)

    def batched_spanning_clusters(lat, stack, *, axes):
        return spanning_of_stack(lat, stack, *label_stack(lat, stack), axes)

    return {"batched.connected_components": batched_connected_components,
            "batched.percolates": batched_percolates,
            "batched.spanning_clusters": batched_spanning_clusters}


def face_spanning(labels: np.ndarray, axis: int) -> np.ndarray:
    """Sorted labels (int64) of the clusters touching both faces (index 0 and -1) of
    ``axis``."""
    if labels.shape[axis] == 0:  # a zero-size lattice has no face to touch
        return np.zeros(0, dtype=np.int64)
    lo = np.take(labels, 0, axis=axis)
    hi = np.take(labels, -1, axis=axis)
    return np.intersect1d(lo[lo > 0], hi[hi > 0]).astype(np.int64)


def spanning_clusters(geometry, labels: np.ndarray, axes) -> dict:
    """``{axis: sorted int64 labels}`` of the clusters that span each of ``axes``.

    ``labels`` are the lattice's component labels (any backend's, 0 on blocked sites).
    An open axis is spanned by a cluster touching both faces. A periodic axis is
    spanned by a cluster that *wraps*: it holds a cycle whose displacement along the
    axis is a non-zero multiple of the axis length (see :func:`wrapping_labels`).
    """
    out = {a: face_spanning(labels, a) for a in axes if not geometry.periodic[a]}
    periodic = [a for a in axes if geometry.periodic[a]]
    if periodic:
        out.update(wrapping_labels(geometry, labels, periodic))
    return {a: out[a] for a in axes}


def _stencil_edges(geometry, sites, axes):
    """Every stencil step out of ``sites`` (flat int64): ``(src, dst, turns)`` with
    ``turns[:, j]`` how many times the step crosses the seam of periodic axis
    ``axes[j]`` (``floor((x + offset) / L)``: the offset itself is the displacement,
    so steps longer than the axis count every turn). Self-loops and duplicates from
    short periodic axes are kept: they carry windings of their own. A step through a
    closed bond is dropped; parallel bonds are separate steps, each with its own bit."""
    g = geometry
    coords = np.unravel_index(sites, g.shape)
    src, dst, turns = [], [], []
    for k, off in enumerate(g.offsets):
        keep = np.ones(len(sites), dtype=bool)
        flat = np.zeros(len(sites), dtype=np.int64)
        t = np.zeros((len(sites), len(axes)), dtype=np.int64)
        for a in range(g.dimensions):
            y = coords[a].astype(np.int64) + int(off[a])
            if g.periodic[a]:
                q, y = np.divmod(y, g.shape[a])
                if a in axes:
                    t[:, axes.index(a)] = q
            else:
                keep &= (y >= 0) & (y < g.shape[a])
            flat += y * int(g.strides[a])
        if g.mask is not None:
            keep[keep] &= g.open_flat[flat[keep]] == 1
        if g.bond_bits is not None:
            # the bond of this step starts at the site, or at the far end for a backward offset
            slot = int(g.bond_slot[k])
            start = (sites if slot >= 0 else flat)[keep]
            word = g.bond_bits[(slot if slot >= 0 else ~slot) * g.bond_words + (start >> 5)]
            keep[keep] &= ((word >> (start & 31).astype(np.uint32)) & 1) == 1
        src.append(sites[keep])
        dst.append(flat[keep])
        turns.append(t[keep])
    if not src:  # an empty stencil: no step at all
        none = np.zeros(0, dtype=np.int64)
        return none, none, np.zeros((0, len(axes)), dtype=np.int64)
    return np.concatenate(src), np.concatenate(dst), np.concatenate(turns)


def wrapping_labels(geometry, labels: np.ndarray, axes) -> dict:
    """``{axis: sorted int64 labels}`` of the clusters that wrap each periodic axis.

    A cluster wraps along axis ``a`` when some site reaches itself by a path whose
    displacement along ``a`` is a non-zero multiple of ``L_a`` (a cycle of non-zero
    winding): the standard spanning estimator on periodic boundaries. A cluster that
    merely touches both sides of the seam does not wrap.

    Notes
    -----
    Every stencil step u -> v carries its seam crossings ``k`` (a vector, one entry per
    axis). A breadth-first spanning forest (SciPy, one root per label) gives each site
    its winding ``w`` relative to its root, summed along the tree by pointer doubling;
    a cluster wraps along ``a`` iff some step has ``w[v] - w[u] != k`` on ``a`` (the
    tree path and that step close a cycle of winding ``k - (w[v] - w[u])``).
    Time O(k n d + n log depth), memory O(k n (48 + 28 p)) bytes for n sites, k
    offsets and p axes asked (see ``catalogue.mem_spanning``).
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order

    g = geometry
    axes = list(axes)
    flat_labels = labels.reshape(-1)
    sites = g.open_sites()
    n = g.n_points
    empty = np.zeros(0, dtype=np.int64)
    if sites.size == 0:
        return {a: empty for a in axes}
    src, dst, turns = _stencil_edges(g, sites, axes)
    # one root per cluster (its first site), hung from a virtual super-root n
    _, roots = np.unique(flat_labels[sites], return_index=True)
    roots = sites[roots]
    rows = np.concatenate([src, np.full(len(roots), n, dtype=np.int64)])
    cols = np.concatenate([dst, roots])
    graph = sp.csr_array((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(n + 1, n + 1))
    _, pred = breadth_first_order(graph, n, directed=True, return_predecessors=True)
    pred = pred[:n].astype(np.int64)
    # turns of the tree step pred[v] -> v (any of the parallel steps: all are checked)
    jump = np.arange(n, dtype=np.int64)
    acc = np.zeros((n, len(axes)), dtype=np.int64)
    tree = pred[dst] == src
    acc[dst[tree]] = turns[tree]
    hang = (pred >= 0) & (pred < n)
    jump[hang] = pred[hang]
    # pointer doubling: acc[v] becomes v's winding relative to its root
    while True:
        nxt = jump[jump]
        if np.array_equal(nxt, jump):
            break
        acc += acc[jump]
        jump = nxt
    bad = (acc[dst] - acc[src]) != turns
    return {
        a: np.unique(flat_labels[src[bad[:, j]]]).astype(np.int64)
        for j, a in enumerate(axes)
    }


def walk_back(geometry, dist: np.ndarray, start: int, end: int) -> np.ndarray:
    """Shortest path start -> end from a distance field measured from ``start``.

    The tie rule every backend uses: from site v, step to the neighbour u with the
    smallest flat index such that ``dist[u] == dist[v] - 1`` (hops), or such that the
    step u -> v is an edge of the shortest-path DAG (weighted, see :func:`plateau_depths`).
    Returns flat indices, start first.
    """
    weighted = geometry.weighted
    unreachable = (dist[end] < 0) if not weighted else not np.isfinite(dist[end])
    if unreachable:
        return np.zeros(0, dtype=np.int64)
    depth = plateau_depths(geometry, dist, start) if weighted else None
    path = [end]
    v = end
    while v != start:
        if weighted:
            nbrs, cost = steps_into(geometry, v)
            ok = on_dag(dist, cost, depth, nbrs, v)
        else:
            nbrs = np.sort(geometry.get_neighbors(v))
            ok = dist[nbrs] == dist[v] - 1
        if not ok.any():
            raise AssertionError(f"distance field inconsistent at site {v}")
        v = int(nbrs[np.argmax(ok)])
        path.append(v)
    return np.array(path[::-1], dtype=np.int64)


def nearest_end(ends: np.ndarray, dist: np.ndarray) -> int:
    """The position in ``ends`` of the nearest end (``dist``: each end's distance, -1 or
    inf where unreached), of equally near ones the smallest flat index (its first
    repeat); -1 when none is reached."""
    reached = (dist >= 0) & np.isfinite(dist)
    if not reached.any():
        return -1
    return int(np.lexsort((np.arange(len(ends)), ends, np.where(reached, dist, 0),
                           ~reached))[0])


def paths_to(geometry, dist: np.ndarray, start: int, ends: np.ndarray, first: bool):
    """``shortest_paths`` from a whole distance field from ``start``: a
    :class:`PathResult` per end, or with ``first`` ``(j, PathResult)`` for the nearest
    end ``ends[j]`` (:func:`nearest_end`; -1 and an empty path when none is reached)."""
    def one(e):
        return PathResult(walk_back(geometry, dist, start, int(e)),
                          path_distance(geometry, dist, int(e)))

    if not first:
        return [one(e) for e in ends]
    j = nearest_end(ends, dist[ends])
    if j < 0:
        return -1, PathResult(np.zeros(0, dtype=np.int64),
                              np.inf if geometry.weighted else -1)
    return j, one(ends[j])


def steps_into(geometry, v: int):
    """``(u, cost)``: the neighbours ``u`` of site ``v`` (int64, ascending) and the cost
    of each step ``u -> v`` (float64, :meth:`Geometry.step_cost`: ``fl(bond_weight(u, v)
    + weights[v])``, times the step's length with spacing; the least over parallel
    bonds). O(k) for k stencil offsets."""
    g = geometry
    if g.bond_weights is None and g.step_lengths is None:  # every step into v costs w[v]
        wv = 0.0 if g.weights is None else g.weights.reshape(-1)[v]
        nbr = np.sort(g.get_neighbors(v))
        return nbr, np.full(len(nbr), wv)
    _, nbr, e, k = g.displace(np.array([v], dtype=np.int64), bond_index=True,
                              step_index=True)
    keep = nbr != v
    nbr, cost = _least_per_pair(np.zeros(keep.sum(), np.int64), nbr[keep],
                                g.step_cost(k[keep], e[keep], np.full(keep.sum(), v)))[1:]
    return nbr, cost


def _least_per_pair(rows, cols, cost):
    """``(rows, cols, cost)`` with one entry per ``(row, col)`` pair, the least cost,
    sorted by row then column."""
    order = np.lexsort((cost, cols, rows))
    rows, cols, cost = rows[order], cols[order], cost[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    return rows[first], cols[first], cost[first]


def step_costs(geometry):
    """Every usable directed step ``(rows, cols, cost)`` (int64, int64, float64), with
    ``cost`` as :meth:`Geometry.step_cost` gives it: one entry per neighbour pair (the
    least of parallel bonds) with bond weights or step lengths; without them the pairs
    of ``Geometry.neighbor_pairs`` (parallel bonds repeat a pair, at the same cost)."""
    g = geometry
    w = None if g.weights is None else g.weights.reshape(-1)
    if g.step_lengths is not None:
        idx = g.open_sites()
        src, cols, e, k = g.displace(idx, bond_index=True, step_index=True)
        rows = idx[src]
        keep = rows != cols
        return _least_per_pair(rows[keep], cols[keep],
                               g.step_cost(k[keep], e[keep], cols[keep]))
    if g.bond_weights is None:
        rows, cols = g.neighbor_pairs()
        return rows, cols, (np.zeros(len(cols)) if w is None else w[cols])
    a = g.adjacency(weighted=True).tocoo()
    rows, cols = a.row.astype(np.int64), a.col.astype(np.int64)
    cost = a.data.astype(np.float64) if w is None else a.data + w[cols]
    return rows, cols, cost


def on_dag(dist, cost, depth, u, v):
    """Whether each step ``u -> v`` (``u`` an array of neighbours of site ``v``, ``cost``
    each step's cost) is an edge of the shortest-path DAG of :func:`plateau_depths`:
    tight (``dist[u] + cost == dist[v]`` in float64), and either rising in cost or one
    plateau step deeper."""
    du, dv = dist[u], dist[v]
    return (du + cost == dv) & ((du < dv) | (depth[u] == depth[v] - 1))


def _least_step_into(geometry):
    """A lower bound of the cost of every step into each site (float64, (n,) or a
    scalar): :meth:`Geometry.step_cost` with the least bond weight and the shortest
    step (rounded sums and products do not fall when a term grows). O(n + bonds)."""
    g = geometry
    if len(g.offsets) == 0:
        return np.inf  # no step at all
    base = 0.0 if g.bond_weights is None else float(g.bond_weights.min(initial=np.inf))
    if g.weights is not None:
        base = base + g.weights.reshape(-1)
    elif g.bond_weights is None:  # step lengths alone
        base = 1.0
    if g.step_lengths is None:
        return base
    return float(g.step_lengths.min()) * base


def plateau_depths(geometry, dist: np.ndarray, start: int) -> np.ndarray:
    """Depth of every site on its cost plateau, which makes the shortest paths of a
    weighted lattice a DAG whatever the float sums do (int64, -1 where unreached).

    Definitions (every backend follows them; ``D = dist``, least costs from ``start``,
    each the left-to-right float64 sum of the step costs along a best path, which is
    what any float64 Dijkstra computes; a step ``u -> v`` costs
    ``c(u, v) = fl(bond_weight(u, v) + w[v])``, the least over parallel bonds, with 0
    for a kind of weight the lattice does not have):

    - a step u -> v is *tight* when ``fl(D[u] + c(u, v)) == D[v]``;
    - a tight step with ``D[u] == D[v]`` is a *plateau* step: ``c(u, v)`` is 0, or too
      small to change ``D[v]`` in float64 (``1e16 + 1 == 1e16``). Plateau steps can form
      cycles (1 -> 0 -> 1 above), so float equality alone does not order them;
    - the depth of ``start`` and of every site entered by a tight step that rises in
      cost is 0; any other reached site is one deeper than its shallowest plateau
      in-neighbour (a breadth-first search over plateau steps, from depth 0);
    - the *shortest-path DAG* holds the tight steps that rise in cost and the plateau
      steps that go one level deeper. It is acyclic (along a cycle of tight steps the
      cost is constant, so the depth would have to grow all round), and every reached
      site but ``start`` has an edge into it (the step that gave it its cost, or its
      search parent on the plateau), so a walk back along it always ends at ``start``.

    The shortest paths are the paths of this DAG from ``start``: each one's cost,
    summed in path order in float64, is ``D`` at its end, and so is the returned
    path's; :func:`walk_back` picks one, ``count_shortest_paths`` counts them. Without
    plateau steps (positive costs whose sums all change) the DAG is every tight step
    and every depth is 0. O(n k) time and memory, only when some reached site ``v``
    has a step in with ``fl(D[v] + c) == D[v]`` (O(n) to check without bond weights
    or step lengths; with them O(n) first against :func:`_least_step_into`, then O(n k)
    only when that bound allows a plateau).
    """
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import dijkstra

    d = np.asarray(dist, dtype=np.float64).reshape(-1)
    reached = np.isfinite(d)
    depth = np.where(reached, 0, -1).astype(np.int64)
    if geometry.bond_weights is not None or geometry.step_lengths is not None:
        # no step into v costs less than the bound, and fl(D + c) does not fall with c:
        # where D + bound changes D, no step into v is a plateau step
        maybe = reached & (d + _least_step_into(geometry) == d)
        maybe[start] = False
        if not maybe.any():
            return depth
    if geometry.bond_weights is None and geometry.step_lengths is None:
        w = geometry.weights.reshape(-1)
        flat = reached & (d + w == d)
        pairs = None
    else:
        pairs = step_costs(geometry)
        rows, cols, cost = pairs
        flat = np.zeros(d.shape[0], dtype=bool)
        flat[cols[d[cols] + cost == d[cols]]] = True
        flat &= reached
    flat[start] = False
    if not flat.any():
        return depth
    rows, cols, cost = step_costs(geometry) if pairs is None else pairs
    keep = flat[cols] & reached[rows]
    u, v, c = rows[keep], cols[keep], cost[keep]
    tight = d[u] + c == d[v]
    rise = tight & (d[u] < d[v])
    deep = flat.copy()
    deep[v[rise]] = False  # entered by a rising step: depth 0
    plat = tight & (d[u] == d[v]) & deep[v]
    u, v = u[plat], v[plat]
    # breadth-first from a super-root n hung above every depth-0 site with plateau steps
    n = d.shape[0]
    roots = np.unique(u[~deep[u]])
    g = csr_array((np.ones(len(u) + len(roots), dtype=np.int8),
                   (np.concatenate([u, np.full(len(roots), n)]), np.concatenate([v, roots]))),
                  shape=(n + 1, n + 1))
    hops = dijkstra(g, indices=n, unweighted=True)[:n]
    if np.isinf(hops[deep]).any():
        raise AssertionError("a site on a cost plateau was not reached by the plateau search")
    depth[deep] = hops[deep].astype(np.int64) - 1
    return depth


def path_result(geometry, path: np.ndarray):
    """:class:`PathResult` for a path (flat indices) found by a backend kernel.

    Length is the hop count, or on weighted lattices the left-to-right float64 sum of
    the step costs (:meth:`Geometry.step_cost`, exactly as Dijkstra accumulated them;
    the least of parallel bonds); an empty path means unreachable (-1 hops, ``inf``
    cost).
    """
    path = np.asarray(path, dtype=np.int64)
    g = geometry
    if not g.weighted:
        return PathResult(path, len(path) - 1 if len(path) else -1)
    if len(path) == 0:
        return PathResult(path, np.inf)
    if len(path) == 1:
        return PathResult(path, 0.0)
    if g.bond_weights is None and g.step_lengths is None:
        return PathResult(path, float(np.cumsum(g.weights.reshape(-1)[path[1:]])[-1]))
    return PathResult(path, float(np.cumsum(_path_step_costs(g, path))[-1]))


def _path_step_costs(g, path):
    """The least cost of the usable steps joining each consecutive pair of ``path``
    (``inf`` where none does)."""
    src, nbr, e, k = g.displace(path[:-1], bond_index=True, step_index=True)
    hit = nbr == path[1:][src]
    out = np.full(len(path) - 1, np.inf)
    np.minimum.at(out, src[hit], g.step_cost(k[hit], e[hit], nbr[hit]))
    return out


def finish_centrality(geometry, values: np.ndarray, *, degree: bool) -> np.ndarray:
    """Per-site centrality in the lattice's shape: degrees are normalised by
    ``n_open - 1`` (as NetworkX's degree centrality); blocked sites become NaN."""
    out = np.asarray(values, dtype=np.float64).reshape(-1)
    if degree:
        v = geometry.n_open
        out = out / (v - 1) if v > 1 else np.ones_like(out)
    if geometry.mask is not None:
        out[geometry.open_flat == 0] = np.nan
    return out.reshape(geometry.shape)


def path_distance(geometry, dist: np.ndarray, end: int):
    if not geometry.weighted:
        return int(dist[end])
    return float(dist[end])


# -- the distance transform's host wrappers (numba-cpu and cuda share them) ---------------
# ``kern`` is a module with ``transform`` as catalytic.kernels.cpu.edt has it.
def distance_transform_with(kern, lat, marked, keys, spacing, squared, dtype, indices):
    """``distance_transform``: the distances (and indices) in the lattice's shape."""
    g = lat.geometry
    out = kern.transform(g.shape, g.periodic, spacing, marked, keys, dtype, squared,
                         indices)
    if indices:
        return out[0].reshape(g.shape), out[1].reshape(g.shape)
    return out.reshape(g.shape)


def batched_distance_transform_with(kern, lat, rows, keys, spacing, squared, dtype,
                                    indices):
    """``batched.distance_transform``: every row in the same passes (the stack is one
    more axis, along which no pass runs: ``transform`` with ``rows``); one result a
    row. The keys, shared by the rows, are repeated for each."""
    g = lat.geometry
    B = rows.shape[0]
    out = kern.transform(g.shape, g.periodic, spacing, rows.reshape(-1),
                         None if keys is None else np.tile(keys, B), dtype, squared,
                         indices, rows=B)
    if indices:
        return list(zip(out[0].reshape(B, *g.shape), out[1].reshape(B, *g.shape)))
    return list(out.reshape(B, *g.shape))


# -- host wrappers around a backend's array kernels (numba-cpu and cuda share them) -------
# ``kern`` is a kernel module with the signatures of catalytic.kernels.cpu.arrays.
def xor_with(kern, lat, data, key=None, *, key_bytes=None):
    """``key_bytes``: the lattice's key where the kernels should read it (default
    ``lat.key_buffer``; the cuda backend passes its cached device copy)."""
    src = np.ascontiguousarray(data).reshape(np.shape(data))  # keeps 0-d arrays 0-d
    out = np.empty_like(src)
    if key is None:
        kb = lat.key_buffer if key_bytes is None else key_bytes
        kern.xor_bytes(src.reshape(-1).view(np.uint8), kb, out.reshape(-1).view(np.uint8))
    else:
        kern.xor_elems(src.reshape(-1), key, out.reshape(-1))
    return out


def normalize_with(kern, data):
    x = np.ascontiguousarray(data, dtype=np.float64).reshape(np.shape(data))
    out = np.empty_like(x)
    kern.normalize(x.reshape(-1), out.reshape(-1))
    return out


def scale_with(kern, data, factor):
    x = np.ascontiguousarray(data, dtype=np.float64).reshape(np.shape(data))
    out = np.empty_like(x)
    kern.scale(x.reshape(-1), factor, out.reshape(-1))
    return out


def matmul_with(kern, a, b):
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.float64)
    return kern.matmul(a, b, out)


def reduce_with(kern, x, op):
    arr = np.ascontiguousarray(x)
    if arr.dtype.kind in "iu":
        # the native dtype as it is (uint64 values >= 2**63 are not cast to negative int64)
        arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
        if op in ("sum", "mean"):
            # exact, never wrapping: int64 or OverflowError; a correctly rounded mean
            total = kern.int_sum(arr.reshape(-1))
            if op == "sum":
                return O.int_sum_result(total, arr.dtype)
            return np.float64(total / arr.size)
    else:
        arr = arr.astype(np.float64, copy=False)
    result = kern.reduce(arr.reshape(-1), op)
    if op in ("min", "max"):
        # the input's dtype, as NumPy's min/max give (values are exact in float64)
        return np.asarray(x).dtype.newbyteorder("=").type(result)
    return result


def elementwise_with(kern, op, a, b=None):
    a = np.asarray(a, dtype=np.float64)
    if b is not None:
        a, b = np.broadcast_arrays(a, np.asarray(b, dtype=np.float64))
        b = np.ascontiguousarray(b).reshape(-1)
    a2 = np.ascontiguousarray(a).reshape(a.shape)
    out = np.empty(a2.shape, dtype=np.float64)
    kern.elementwise(op, a2.reshape(-1), b, out.reshape(-1))
    return out[()] if out.ndim == 0 else out  # a scalar for 0-d input, as a ufunc gives


# -- explicit graphs and exact path counts (the numpy reference; numba-cpu's recount) ------
def adjacency(g):
    """The lattice graph as an int8 CSR adjacency matrix of its sites."""
    return g.adjacency(dtype=np.int8)


def entering_cost_graph(g):
    """Directed CSR: edge u -> v carries the step cost (:meth:`Geometry.step_cost`; the
    least of parallel bonds; explicit zeros stay edges)."""
    import scipy.sparse as sp

    if g.step_lengths is not None:
        rows, cols, cost = step_costs(g)
        return sp.csr_array((cost, (rows, cols)), shape=(g.n_points, g.n_points))
    if g.bond_weights is None:
        a = g.adjacency(dtype=np.float64)
        a.data = g.weights.reshape(-1)[a.indices].astype(np.float64)
        return a
    a = g.adjacency(weighted=True)
    if g.weights is not None:
        a.data = a.data + g.weights.reshape(-1)[a.indices]
    return a


def dist_from(g, sources, *, min_only=True):
    """SciPy's distances from ``sources``: int64 hops (-1 unreachable) on an unweighted
    geometry, float64 summed step costs (inf unreachable) on a weighted one (site or
    bond weights)."""
    from scipy.sparse.csgraph import dijkstra

    if not g.weighted:
        d = dijkstra(adjacency(g), indices=sources, unweighted=True, min_only=min_only)
        return np.where(np.isinf(d), -1, d).astype(np.int64)
    return dijkstra(entering_cost_graph(g), directed=True, indices=sources, min_only=min_only)


# -- parental fields and nearest sources ------------------------------------------------
def plateau_depths_if_any(geometry, dist, sources):
    """:func:`plateau_depths` from ``sources`` on a weighted geometry, or an empty array
    where no reached site has a plateau step into it (every depth 0; the kernels then
    read none) and on an unweighted one."""
    if not geometry.weighted:
        return np.zeros(0, dtype=np.int64)
    depth = plateau_depths(geometry, dist, sources)
    return depth if (depth > 0).any() else np.zeros(0, dtype=np.int64)


def parents_from(geometry, dist: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """The parental field of a distance field from ``sources`` (the reference): each
    source its own parent; each other reached site the in-neighbour :func:`walk_back`
    steps to from it (the smallest flat index one hop closer, or on the shortest-path
    DAG of :func:`plateau_depths`); -1 at blocked and unreached sites. int64 (n,).
    O(n k) vectorised."""
    g = geometry
    n = g.n_points
    d = np.asarray(dist).reshape(-1)
    if not g.weighted:
        rows, cols = g.neighbor_pairs()
        ok = (d[rows] >= 0) & (d[rows] == d[cols] - 1)
    else:
        rows, cols, cost = step_costs(g)
        depth = plateau_depths(g, d, sources)
        ok = np.isfinite(d[rows]) & on_dag(d, cost, depth, rows, cols)
    best = np.full(n, n, dtype=np.int64)
    np.minimum.at(best, cols[ok], rows[ok])
    parent = np.where(best < n, best, -1)
    parent[sources] = sources
    return parent


def field_outputs(geometry, dist, parents=None, nearest=None):
    """What ``distance_field`` returns: the distances alone, or a tuple of the distances,
    the parents (when given) and the nearest sources (when given), each in the
    lattice's shape."""
    shape = geometry.shape
    out = [np.asarray(dist).reshape(shape)]
    out += [np.asarray(a).reshape(shape) for a in (parents, nearest) if a is not None]
    return out[0] if len(out) == 1 else tuple(out)


def roots_of(parents: np.ndarray) -> np.ndarray:
    """The site each parental chain ends at (a site that is its own parent), by pointer
    jumping: -1 where the parent is -1. O(n log L) for chains of at most L steps."""
    cur = np.asarray(parents, dtype=np.int64).reshape(-1)
    while True:
        nxt = np.where(cur >= 0, cur[np.maximum(cur, 0)], -1)
        if np.array_equal(nxt, cur):
            return nxt
        cur = nxt


def count_paths_exact(g, start, end) -> int:
    """The number of shortest paths from ``start`` to ``end`` on geometry ``g``, in
    Python integers (exact however many there are)."""
    if g.weighted:
        return _count_weighted(g, start, end)
    ds = dist_from(g, [start])
    if ds[end] < 0:
        return 0
    de = dist_from(g, [end])
    total = ds[end]
    on_path = np.flatnonzero((ds >= 0) & (de >= 0) & (ds + de == total))
    order = on_path[np.argsort(ds[on_path], kind="stable")]
    count = {start: 1}
    for v in order[1:]:
        v = int(v)
        dv = ds[v]
        count[v] = sum(count.get(int(u), 0) for u in g.get_neighbors(v) if ds[u] == dv - 1)
    return int(count[end])


def _count_weighted(g, start, end):
    dist = dist_from(g, [start])
    if not np.isfinite(dist[end]):
        return 0
    if g.bond_weights is None:
        if (g.weights == 0).any():
            raise ValueError(
                "count_shortest_paths is not defined on lattices with zero-weight sites: "
                "zero-cost cycles make the number of minimum-cost paths infinite"
            )
    elif (step_costs(g)[2] == 0).any():
        raise ValueError(
            "count_shortest_paths is not defined on lattices with zero-cost steps (a "
            "usable bond whose weight plus the weight of the site entered is 0): "
            "zero-cost cycles make the number of minimum-cost paths infinite"
        )
    # the paths of the shortest-path DAG (see plateau_depths), counted in an order of its
    # edges: by cost, then by depth on the cost's plateau
    depth = plateau_depths(g, dist, start)
    cand = np.flatnonzero(dist <= dist[end])
    order = cand[np.lexsort((depth[cand], dist[cand]))]
    count = {start: 1}
    for v in order:
        v = int(v)
        if v == start:
            continue
        nbrs, cost = steps_into(g, v)
        on = on_dag(dist, cost, depth, nbrs, v)
        count[v] = sum(count.get(int(u), 0) for u in nbrs[on])
    return int(count[end])
