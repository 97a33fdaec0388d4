"""An ``igraph`` backend for catalytic: the lattice's explicit graph handed to igraph.

The second worked example of a plugin: instead of a new operation it adds a *backend*
(``catalytic_add_backends``) and gives that backend implementations of operations
catalytic already has (``catalytic_add_operations``): ``distance_field`` (igraph's BFS
and Dijkstra), ``connected_components`` and ``centrality`` (closeness, betweenness).
Results equal the reference backend's (the tests check it); the router picks this
backend only when its predicted cost wins or a call names ``backend="igraph"``.

Building the graph costs time and memory (an edge list of n k entries, then igraph's
own copy); it is built once per lattice and kept while the lattice lives.

Examples
--------
>>> import catalytic as cat, catalytic_igraph
>>> eng = cat.Engine(disable_plugin_autoload=True)
>>> eng.register_plugin(catalytic_igraph, "igraph")
'igraph'
>>> L = cat.Lattice(shape=(4, 4), engine=eng)
>>> L.distance_field(0, backend="igraph").max(), L.last_decision.backend
(np.int64(6), 'igraph')
"""

from __future__ import annotations

import weakref

import numpy as np
from numba import njit

import catalytic as cat
from catalytic.kernels.neighbors import c_strides, neighbors_into

NAME = "igraph"
#: (overhead s, work units per s): a guess from one 2-core machine (graph building
#: excluded: it happens once per lattice), labelled "plugin default" by the router
COST = (200e-6, 2e7)

_graphs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _available():
    try:
        import igraph
    except ImportError:
        return False, "python-igraph is not installed: pip install python-igraph"
    return True, f"python-igraph {igraph.__version__}"


@njit(cache=True, nogil=True)
def _edges(shape, strides, periodic, offsets, open_):
    """Directed edges i -> j over the de-duplicated neighbour sets of the open sites."""
    n = 1
    for a in range(shape.shape[0]):
        n *= shape[a]
    k = offsets.shape[0]
    src = np.empty(n * k, dtype=np.int64)
    dst = np.empty(n * k, dtype=np.int64)
    buf = np.empty(max(k, 1), dtype=np.int64)
    e = 0
    for i in range(n):
        if open_.shape[0] != 0 and open_[i] == 0:
            continue
        m = neighbors_into(i, shape, strides, periodic, offsets, open_, True, buf)
        for q in range(m):
            src[e] = i
            dst[e] = buf[q]
            e += 1
    return src[:e], dst[:e]


def graph_of(lat):
    """``(directed igraph.Graph, dst of every edge)``, built once per lattice."""
    import igraph

    hit = _graphs.get(lat)
    if hit is None:
        shape, periodic, offsets, open_, _ = lat.geometry.kernel_args()
        src, dst = _edges(shape, c_strides(shape), periodic, offsets, open_)
        g = igraph.Graph(n=lat.geometry.n_points, edges=np.stack([src, dst], 1),
                         directed=True)
        hit = _graphs[lat] = (g, dst)
    return hit


def distance_field(lat, sources):
    g, dst = graph_of(lat)
    geo = lat.geometry
    w = None if geo.weights is None else geo.weights.reshape(-1)[dst]  # entering cost
    d = np.asarray(g.distances(source=[int(s) for s in sources], weights=w, mode="out"),
                   dtype=np.float64).min(axis=0)
    if w is None:
        out = np.where(np.isfinite(d), d, -1).astype(np.int64)
    else:
        out = d
    return out.reshape(geo.shape)


def connected_components(lat):
    g, _ = graph_of(lat)
    geo = lat.geometry
    raw = np.asarray(g.connected_components(mode="weak").membership, dtype=np.int64)
    sites = np.arange(geo.n_points) if geo.mask is None else np.flatnonzero(geo.open_flat)
    # components numbered 1..count by their lowest site, blocked sites 0 (the reference)
    _, first, inv = np.unique(raw[sites], return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    labels = np.zeros(geo.n_points, dtype=np.int32 if geo.n_points < 2**31 else np.int64)
    labels[sites] = rank[inv] + 1
    sizes = np.bincount(labels, minlength=len(first) + 1)[1:].astype(np.int64)
    return cat.Components(labels.reshape(geo.shape), len(first), sizes)


def centrality(lat, *, method="degree", k=None, seed=None):
    """Closeness (NetworkX's ``wf_improved`` form) and betweenness (normalised as
    NetworkX does for undirected graphs) over the open sites; blocked sites NaN.
    Exact betweenness only: ``k`` is refused by :func:`_centrality_supported`."""
    g, _ = graph_of(lat)
    geo = lat.geometry
    und = g.as_undirected(mode="collapse")
    n_open = geo.n_open
    if method == "closeness":
        reach = np.asarray(und.connected_components().sizes())[und.connected_components().membership]
        c = np.nan_to_num(np.asarray(und.closeness(normalized=True), dtype=np.float64))
        vals = c * (reach - 1) / (n_open - 1) if n_open > 1 else np.zeros(geo.n_points)
    else:
        b = np.asarray(und.betweenness(directed=False), dtype=np.float64)
        vals = b * 2.0 / ((n_open - 1) * (n_open - 2)) if n_open > 2 else np.zeros_like(b)
    if geo.mask is not None:
        vals[geo.open_flat == 0] = np.nan
    return vals.reshape(geo.shape)


def _centrality_supported(lat, *, method="degree", k=None, seed=None):
    if method not in ("closeness", "betweenness"):
        return f"centrality method {method!r} is not implemented on the igraph backend"
    if k is not None:
        return (f"sampled betweenness (k={k}) is not implemented on the igraph backend "
                "(igraph has no NetworkX-compatible source sampling)")
    return None


@cat.hookimpl
def catalytic_add_backends(registry):
    registry.add_backend(NAME, available=_available, device="cpu",
                         description="python-igraph on the lattice's explicit graph")


@cat.hookimpl
def catalytic_add_operations(registry):
    registry.add_implementation("distance_field", NAME, distance_field, cost=COST)
    registry.add_implementation("connected_components", NAME, connected_components, cost=COST)
    registry.add_implementation("centrality", NAME, centrality, cost=COST,
                                supports=_centrality_supported)
