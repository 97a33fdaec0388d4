"""Per-cluster statistics of a labelling that understand periodic axes (the reference
implementation: NumPy and SciPy).

A cluster is a set of sites with one label joined by the lattice's usable bonds: for the
labellings of ``connected_components``, and of ``label`` with ``delta=0``, exactly the
clusters those calls found. Its sites get *unwrapped* coordinates: a breadth-first
spanning tree of the cluster (from its lowest site) carries each site's winding, the
turns a tree path from the root makes round each periodic axis, and the coordinate plus
the axis length times the winding places each site beside its tree neighbours. A bond
of the cluster whose ends disagree by whole turns closes a cycle of non-zero winding:
the cluster wraps those axes, and has no centroid or gyration along them.
"""

from __future__ import annotations

import numpy as np

from catalytic.results import ClusterStatistics


def cluster_edges(g, flat):
    """Every usable bond joining two sites of one label (> 0), once: ``(i, j, q)``,
    with ``q`` (m, d) the turns the step from ``i`` to ``j`` makes round each periodic
    axis (:meth:`Geometry.bond_ends` on the labelled sites)."""
    i, j, q = g.bond_ends(flat != 0)
    same = flat[i] == flat[j]
    return i[same], j[same], q[same]


def windings(n, roots, i, j, q):
    """Each site's winding relative to its cluster's root, int64 (n, d), along a
    breadth-first spanning forest of the bonds ``(i, j, q)`` from ``roots``, and a bool
    (n,) of the sites the forest reached. O(n + m) work in one vectorised step per
    level of the deepest tree."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order

    d = q.shape[1]
    # a super-node n joined to every root: one search reaches every cluster
    rows = np.concatenate([i, j, np.full(roots.size, n)])
    cols = np.concatenate([j, i, roots])
    adj = sp.csr_array((np.ones(rows.size, np.int8), (rows, cols)), shape=(n + 1, n + 1))
    order, pred = breadth_first_order(adj, n, directed=True, return_predecessors=True)
    # the turns of each tree step pred -> v (the first bond joining them either way)
    key = np.concatenate([i * (n + 1) + j, j * (n + 1) + i])
    turns = np.concatenate([q, -q])
    sort = np.argsort(key, kind="stable")
    key, turns = key[sort], turns[sort]
    tree = order[1:]
    parent = pred[tree]
    step = np.zeros((tree.size, d), np.int64)
    inner = parent != n
    step[inner] = turns[np.searchsorted(key, parent[inner] * (n + 1) + tree[inner])]
    # breadth-first: the parents' positions never decrease along the order, so each
    # level is one block, and the next block holds the nodes whose parent is in it
    pos = np.empty(n + 1, np.int64)
    pos[order] = np.arange(order.size)
    ppos = pos[parent]
    w = np.zeros((n + 1, d), np.int64)
    lo = 1 + int(np.searchsorted(ppos, 1))  # the roots: positions [1, lo)
    while lo < order.size:
        hi = 1 + int(np.searchsorted(ppos, lo))
        w[order[lo:hi]] = w[parent[lo - 1:hi - 1]] + step[lo - 1:hi - 1]
        lo = hi
    reached = np.zeros(n + 1, bool)
    reached[order] = True
    return w[:n], reached[:n]


def _arcs(lab, x, count, length):
    """``(lo, hi)`` int64 (count,) of each cluster's shortest arc of a periodic axis of
    ``length`` holding every coordinate ``x`` its sites ``lab`` occupy: ``hi`` is
    exclusive and may pass ``length`` (the arc crosses the seam); a tie keeps the arc
    that does not cross it, and then the one that starts lowest."""
    pairs = np.unique(lab * length + x)
    lab_u, x_u = pairs // length, pairs % length
    first = np.r_[True, lab_u[1:] != lab_u[:-1]]
    last = np.r_[lab_u[1:] != lab_u[:-1], True]
    start = np.flatnonzero(first)
    # the gap before each occupied coordinate: from the previous one, or round the seam
    # from the cluster's last one
    prev = np.r_[0, x_u[:-1]]
    gap = x_u - prev
    last_of = np.repeat(x_u[last], np.diff(np.r_[start, pairs.size]))
    gap[first] = x_u[first] + length - last_of[first]
    # the largest gap per cluster; ties go to the wrap-round gap (the cluster's first),
    # then to the gap that ends lowest (the compiled backends' scan keeps the first)
    order = np.lexsort((-x_u, first, gap, lab_u))  # the chosen one last in each cluster
    top = order[np.r_[lab_u[order][1:] != lab_u[order][:-1], True]]
    lo = np.zeros(count, np.int64)
    hi = np.zeros(count, np.int64)
    c = lab_u[top] - 1
    lo[c] = x_u[top]
    hi[c] = x_u[top] + length - gap[top] + 1
    return lo, hi


def assemble(g, sizes, mean, cov, lo, hi, arc_lo, arc_hi, wraps, field) -> ClusterStatistics:
    """:class:`ClusterStatistics` from what every backend measures, per label 1..count
    (row ``label - 1``): ``sizes``, ``mean`` and ``cov`` of the unwrapped coordinates,
    coordinate extremes ``lo``/``hi`` (int64 (count, d), read on open axes), the
    shortest arcs ``arc_lo``/``arc_hi`` (read on periodic axes), ``wraps`` (bool
    (count, d)) and the field's reductions (a dict, or None)."""
    d = g.dimensions
    shape = np.asarray(g.shape, dtype=np.int64)
    periodic = np.asarray(g.periodic, dtype=bool)
    empty = sizes == 0
    centroid = np.where(periodic, np.mod(mean, shape), mean) if d else mean.copy()
    centroid[wraps] = np.nan
    gyration = cov.copy()
    gyration[wraps[:, :, None] | wraps[:, None, :]] = np.nan
    centroid[empty] = np.nan
    gyration[empty] = np.nan
    rg = np.sqrt(np.trace(gyration, axis1=1, axis2=2))
    bbox = np.stack([np.where(periodic, arc_lo, lo), np.where(periodic, arc_hi, hi + 1)],
                    axis=-1).astype(np.int64)
    full = np.stack([np.zeros(d, np.int64), shape], axis=-1)
    bbox[wraps] = np.broadcast_to(full, bbox.shape)[wraps]
    faces = np.stack([lo == 0, hi == shape - 1], axis=-1) & ~periodic[:, None]
    bbox[empty] = 0
    faces[empty] = False
    return ClusterStatistics(shape=tuple(g.shape), periodic=tuple(bool(p) for p in periodic),
                             sizes=sizes, bbox=bbox, centroid=centroid, gyration=gyration,
                             radius_of_gyration=rg, faces=faces, wraps=wraps, field=field)


def from_moments(g, sizes, first, lo, hi, fparts, m1, m2, wraps, arcs) -> ClusterStatistics:
    """:func:`assemble` from the per-label sums the compiled backends make (rows 0..count,
    row 0 unused): ``sizes``, ``first`` sites, coordinate extremes ``lo``/``hi``, the
    field's ``(sum, min, max, argmin, argmax)`` or None, the first and second moments
    ``m1`` (count+1, d) and ``m2`` (count+1, d, d; upper triangle) of the unwrapped
    coordinates about each first site, ``wraps`` (count, d) and the arcs ``(lo, hi)``
    (count+1, d) or None (no periodic axis)."""
    d = g.dimensions
    count = sizes.shape[0] - 1
    sizes, first, lo, hi, m1, m2 = sizes[1:], first[1:], lo[1:], hi[1:], m1[1:], m2[1:]
    safe = np.maximum(sizes, 1)[:, None]
    ref = (np.stack(np.unravel_index(np.maximum(first, 0), g.shape), axis=-1) if d
           else np.zeros((count, 0)))
    mean = ref + m1 / safe
    cov = m2 / safe[:, :, None]
    cov = np.triu(cov) + np.triu(cov, 1).transpose(0, 2, 1)
    cov -= (m1 / safe)[:, :, None] * (m1 / safe)[:, None, :]
    arc_lo = arc_hi = np.zeros((count, d), np.int64)
    if arcs is not None:
        arc_lo, arc_hi = arcs[0][1:], arcs[1][1:]
    reductions = None
    if fparts is not None:
        fsum, fmin, fmax, amin, amax = (a[1:] for a in fparts)
        reductions = {"sum": fsum, "mean": np.where(sizes > 0, fsum / safe[:, 0], np.nan),
                      "min": fmin, "max": fmax, "argmin": amin, "argmax": amax}
    return assemble(g, sizes, mean, cov, lo, hi, arc_lo, arc_hi, wraps, reductions)


def cluster_statistics(g, labels, field=None) -> ClusterStatistics:
    """:class:`ClusterStatistics` of ``labels`` (flat int64, 0 = no cluster, clusters
    1..count) on geometry ``g``, with the reductions of ``field`` (float64, flat) when
    given. With a periodic axis, each label's sites must be joined by usable bonds (a
    ValueError otherwise); without one, a label is measured as the sites that hold it."""
    flat = np.asarray(labels).reshape(-1).astype(np.int64)
    n, d = g.n_points, g.dimensions
    count = int(flat.max(initial=0))
    shape = np.asarray(g.shape, dtype=np.int64)
    periodic = np.asarray(g.periodic, dtype=bool)
    sites = np.flatnonzero(flat)
    lab = flat[sites]
    sizes = np.bincount(lab, minlength=count + 1)[1:].astype(np.int64)
    coords = np.stack(np.unravel_index(sites, g.shape), axis=-1).astype(np.int64)
    wraps = np.zeros((count, d), bool)
    u = coords.astype(np.float64)
    if periodic.any():
        roots = np.zeros(0, np.int64)
        if sites.size:
            _, first = np.unique(lab, return_index=True)
            roots = sites[first]
        i, j, q = cluster_edges(g, flat)
        w, reached = windings(n, roots, i, j, q)
        if not reached[sites].all():
            bad = int(flat[sites[~reached[sites]][0]])
            raise ValueError(f"label {bad} is not one cluster: its sites are not all "
                             "joined by usable bonds of this lattice")
        # a bond whose ends disagree by whole turns closes a cycle of that winding
        off = w[i] + q - w[j]
        bad = np.flatnonzero(off.any(axis=1))
        if bad.size:
            np.logical_or.at(wraps, flat[i[bad]] - 1, off[bad] != 0)
        u += w[sites] * shape  # unwrapped
    safe = np.maximum(sizes, 1)
    mean = np.stack([np.bincount(lab, u[:, a], minlength=count + 1)[1:] / safe
                     for a in range(d)], axis=-1) if d else np.zeros((count, 0))
    centred = u - mean[lab - 1]
    cov = np.zeros((count, d, d))
    for a in range(d):
        for b in range(a, d):
            cov[:, a, b] = cov[:, b, a] = np.bincount(
                lab, centred[:, a] * centred[:, b], minlength=count + 1)[1:] / safe
    lo = np.zeros((count, d), np.int64)
    hi = np.zeros((count, d), np.int64)
    arc_lo = np.zeros((count, d), np.int64)
    arc_hi = np.zeros((count, d), np.int64)
    for a in range(d):
        x = coords[:, a]
        if periodic[a]:
            if sites.size:
                arc_lo[:, a], arc_hi[:, a] = _arcs(lab, x, count, int(shape[a]))
            continue
        low = np.full(count + 1, shape[a], np.int64)
        high = np.full(count + 1, -1, np.int64)
        np.minimum.at(low, lab, x)
        np.maximum.at(high, lab, x)
        lo[:, a], hi[:, a] = low[1:], high[1:]
    reductions = None
    if field is not None:
        reductions = _reductions(np.asarray(field, np.float64).reshape(-1), sites, lab,
                                 count, sizes)
    return assemble(g, sizes, mean, cov, lo, hi, arc_lo, arc_hi, wraps, reductions)


def _reductions(f, sites, lab, count, sizes) -> dict:
    """Sum, mean, minimum and maximum of ``f`` over each cluster, and the flat index of
    the first site (lowest index) holding the minimum and the maximum (-1 and NaN for
    an empty label). NaN in ``f`` propagates to the sum and mean, and is the minimum and
    maximum of its cluster, as in NumPy."""
    v = f[sites]
    total = np.bincount(lab, v, minlength=count + 1)[1:]
    nan_at = np.isnan(v)
    if nan_at.any():
        has_nan = np.bincount(lab[nan_at], minlength=count + 1)[1:] > 0
    else:
        has_nan = np.zeros(count, bool)
    out = {"sum": total,
           "mean": np.where(sizes > 0, total / np.maximum(sizes, 1), np.nan)}
    for name, key in (("min", v), ("max", -v)):
        # by label, a NaN before any number (also before -inf, as np.argmin), value, site
        nan = np.isnan(key)
        order = np.lexsort((sites, np.where(nan, 0.0, key), ~nan, lab))
        first = order[np.r_[True, lab[order][1:] != lab[order][:-1]]] if order.size else order
        val = np.full(count, np.nan)
        at = np.full(count, -1, np.int64)
        val[lab[first] - 1] = v[first]
        at[lab[first] - 1] = sites[first]
        val[has_nan] = np.nan
        out[name], out["arg" + name] = val, at
    return out


def region_graph(g, flat):
    """``{(a, b): contacts}`` for labels ``0 < a < b``: the usable bonds joining a site
    of label ``a`` to one of label ``b`` (every bond counted, parallel ones too)."""
    i, j, _ = g.bond_ends(flat != 0)
    a, b = flat[i], flat[j]
    cross = a != b
    lo, hi = np.minimum(a[cross], b[cross]), np.maximum(a[cross], b[cross])
    if lo.size == 0:
        return {}
    pairs, counts = np.unique(np.stack([lo, hi], axis=1), axis=0, return_counts=True)
    return {(int(x), int(y)): int(c) for (x, y), c in zip(pairs, counts)}
