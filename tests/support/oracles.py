"""Independent oracles: the lattice's neighbour rule, its explicit graphs and its
clusters, rebuilt from their definitions (C-order flat indices, displacement by the
stencil's offsets, wrap on periodic axes, drop off open axes and on blocked sites, no
self-loops, no duplicates) by plain Python, NetworkX and NumPy.

Nothing here imports catalytic, so a test compares catalytic against code it does not
share. The hypothesis strategies that draw lattices are in :mod:`tests.support.strategies`,
the list of backends in :mod:`tests.support.backends`.
"""

from __future__ import annotations

import itertools
import math
from collections import deque

import networkx as nx
import numpy as np

#: floats from different backends (summation order, eigen-solvers) agree to this
FLOAT_RTOL = 1e-9
FLOAT_ATOL = 1e-12


# -- stencils and neighbours ---------------------------------------------------------------
def von_neumann(d: int) -> np.ndarray:
    rows = []
    for a in range(d):
        for s in (-1, 1):
            r = [0] * d
            r[a] = s
            rows.append(r)
    return np.array(rows, dtype=np.int64)


def moore(d: int) -> np.ndarray:
    return np.array(
        [r for r in itertools.product((-1, 0, 1), repeat=d) if any(r)], dtype=np.int64
    ).reshape(-1, d)


def offsets_of(stencil, d: int) -> np.ndarray:
    if isinstance(stencil, str):
        return {"von_neumann": von_neumann, "moore": moore}[stencil](d)
    return np.asarray(stencil, dtype=np.int64).reshape(-1, d)


def flat_index(coords, shape) -> int:
    """C order, last axis fastest (written out, not via numpy)."""
    i = 0
    for c, n in zip(coords, shape):
        i = i * n + int(c)
    return i


def coords_of(i: int, shape) -> tuple[int, ...]:
    out = []
    for n in reversed(shape):
        out.append(i % n)
        i //= n
    return tuple(reversed(out))


def is_open(mask, i) -> bool:
    return mask is None or bool(mask.reshape(-1)[i])


def oracle_neighbors(shape, periodic, offsets, mask, i) -> list[int]:
    """Neighbour set of site ``i`` from the definition: displaced, wrapped on periodic
    axes, dropped off open axes or on blocked sites, no self, no duplicates."""
    if not is_open(mask, i):
        return []
    c = coords_of(i, shape)
    out = []
    for off in offsets:
        t = []
        for a, (x, o, n) in enumerate(zip(c, off, shape)):
            y = x + int(o)
            if periodic[a]:
                y %= n
            elif not 0 <= y < n:
                break
            t.append(y)
        else:
            j = flat_index(t, shape)
            if j != i and j not in out and is_open(mask, j):
                out.append(j)
    return out


def oracle_graph(shape, periodic, stencil="von_neumann", mask=None, *, all_nodes=False):
    """``nx.Graph`` of the open sites (or of all sites, blocked ones isolated)."""
    shape = tuple(shape)
    periodic = _per(periodic, len(shape))
    offsets = offsets_of(stencil, len(shape))
    n = math.prod(shape)
    G = nx.Graph()
    for i in range(n):
        if all_nodes or is_open(mask, i):
            G.add_node(i)
    for i in range(n):
        for j in oracle_neighbors(shape, periodic, offsets, mask, i):
            G.add_edge(i, j)
    return G


def grid_oracle(shape, periodic, mask=None):
    """Von Neumann lattice from ``networkx.grid_graph`` (relabelled to flat indices,
    self-loops of size-1 periodic axes removed, blocked sites removed)."""
    shape = tuple(shape)
    periodic = _per(periodic, len(shape))
    G = nx.grid_graph(dim=list(shape[::-1]), periodic=list(periodic[::-1]))
    if len(shape) == 1:  # grid_graph uses bare ints as nodes in 1-D
        G = nx.relabel_nodes(G, {v: (v,) for v in G.nodes})
    G = nx.relabel_nodes(G, {v: flat_index(v, shape) for v in G.nodes})
    G.remove_edges_from(list(nx.selfloop_edges(G)))
    if mask is not None:
        G.remove_nodes_from([int(i) for i in np.flatnonzero(~mask.reshape(-1))])
    return G


def moore_oracle(shape, periodic, mask=None):
    """Moore lattice as the strong product of paths / cycles (networkx)."""
    shape = tuple(shape)
    periodic = _per(periodic, len(shape))
    factors = [
        (nx.cycle_graph(n) if p and n > 2 else nx.path_graph(n)) for n, p in zip(shape, periodic)
    ]
    G = factors[0]
    G = nx.relabel_nodes(G, {v: (v,) for v in G.nodes})
    for f in factors[1:]:
        H = nx.strong_product(G, f)
        G = nx.relabel_nodes(H, {v: v[0] + (v[1],) for v in H.nodes})
    G = nx.relabel_nodes(G, {v: flat_index(v, shape) for v in G.nodes})
    G.remove_edges_from(list(nx.selfloop_edges(G)))
    if mask is not None:
        G.remove_nodes_from([int(i) for i in np.flatnonzero(~mask.reshape(-1))])
    return G


def entering_cost_digraph(G, weights) -> nx.DiGraph:
    """Directed graph where u -> v costs ``weights[v]`` (the cost of entering v)."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    D = nx.DiGraph()
    D.add_nodes_from(G.nodes)
    for u, v in G.edges:
        D.add_edge(u, v, weight=float(w[v]))
        D.add_edge(v, u, weight=float(w[u]))
    return D


def forward_offsets(stencil, d: int) -> list[tuple[int, ...]]:
    """The bond layout's planes, from the definition: the stencil rows whose first
    non-zero entry is positive, in stencil order."""
    return [tuple(int(x) for x in r) for r in offsets_of(stencil, d)
            if next(x for x in r if x != 0) > 0]


def usable_bonds(spec):
    """Every usable bond of a spec, from the definition: ``(s, c, i, j, off)`` for bond
    ``(s, c)`` joining site ``i`` (coordinates ``c``) to ``j`` at ``c + off`` (``off`` =
    forward offset ``s``, wrapped on periodic axes; none when that leaves an open
    axis), open and with both ends existing. Self-loop and parallel bonds included."""
    shape = tuple(spec["shape"])
    d = len(shape)
    periodic = _per(spec["periodic"], d)
    mask, bonds = spec.get("mask"), spec.get("bonds")
    n = math.prod(shape)
    for s, off in enumerate(forward_offsets(spec["stencil"], d)):
        for i in range(n):
            c = coords_of(i, shape)
            if bonds is not None and not bonds[(s,) + c]:
                continue
            t = []
            for a, (x, o, m) in enumerate(zip(c, off, shape)):
                y = x + o
                if periodic[a]:
                    y %= m
                elif not 0 <= y < m:
                    break
                t.append(y)
            else:
                j = flat_index(t, shape)
                if is_open(mask, i) and is_open(mask, j):
                    yield s, c, i, j, off


def region_contacts(spec, labels) -> dict:
    """``{(a, b): bonds}``: the usable bonds of ``spec`` (:func:`usable_bonds`, each once)
    between a site of label ``a`` and one of label ``b``, ``0 < a < b``."""
    flat = np.asarray(labels).reshape(-1)
    want = {}
    for _, _, i, j, _ in usable_bonds(spec):
        a, b = int(flat[i]), int(flat[j])
        if a and b and a != b:
            key = (min(a, b), max(a, b))
            want[key] = want.get(key, 0) + 1
    return want


def bond_graph(spec, *, all_nodes=False) -> nx.Graph:
    """``nx.Graph`` of a spec with bonds, built bond by bond from the definition: bond
    ``(s, c)`` joins the site at ``c`` to ``c + forward[s]`` (wrapped on periodic axes;
    none when that leaves an open axis); it is an edge when open, both ends exist and
    the ends differ. Parallel bonds give one edge weighing the least of them (attribute
    ``weight``, 0 without bond weights). No catalytic code is used."""
    mask, bw = spec.get("mask"), spec.get("bond_weights")
    n = math.prod(spec["shape"])
    G = nx.Graph()
    G.add_nodes_from(i for i in range(n) if all_nodes or is_open(mask, i))
    for s, c, i, j, _ in usable_bonds(spec):
        if j == i:
            continue
        w = 0.0 if bw is None else float(bw[(s,) + c])
        if G.has_edge(i, j):
            w = min(w, G[i][j]["weight"])
        G.add_edge(i, j, weight=w)
    return G


def step_cost_digraph(G, weights=None) -> nx.DiGraph:
    """Directed graph where ``u -> v`` costs the edge's ``weight`` plus ``weights[v]``
    (the cost model of a lattice with bond weights and site weights)."""
    w = None if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    D = nx.DiGraph()
    D.add_nodes_from(G.nodes)
    for u, v, b in G.edges(data="weight", default=0.0):
        D.add_edge(u, v, weight=b + (0.0 if w is None else float(w[v])))
        D.add_edge(v, u, weight=b + (0.0 if w is None else float(w[u])))
    return D


def _per(periodic, d):
    if isinstance(periodic, (bool, np.bool_)):
        return (bool(periodic),) * d
    return tuple(bool(p) for p in periodic)


# -- oracles over a spec drawn by tests.support.strategies.lattice_specs ----------------
def graph_of(spec, *, all_nodes=False):
    return oracle_graph(
        spec["shape"], spec["periodic"], spec["stencil"], spec.get("mask"), all_nodes=all_nodes
    )


def open_sites(spec) -> np.ndarray:
    n = math.prod(spec["shape"])
    m = spec.get("mask")
    return np.arange(n) if m is None else np.flatnonzero(m.reshape(-1))


# -- clusters that wrap periodic axes -------------------------------------------------------
def winding_oracle(shape, periodic, stencil, mask):
    """``(labels, wraps)``: labels numbered by lowest flat index, and for each periodic
    axis the set of labels whose cluster has a cycle of non-zero winding along it.

    BFS per cluster giving every site an unwrapped position (the offsets themselves
    are the displacements); a step to a visited site at another unwrapped position
    closes a cycle whose displacement is that difference."""
    shape = tuple(shape)
    d = len(shape)
    offsets = offsets_of(stencil, d)
    n = math.prod(shape)
    is_open = [mask is None or bool(mask.reshape(-1)[i]) for i in range(n)]
    labels = [0] * n
    pos = {}
    wraps = {a: set() for a in range(d) if periodic[a]}
    count = 0
    for s in range(n):
        if not is_open[s] or labels[s]:
            continue
        count += 1
        labels[s] = count
        pos[s] = coords_of(s, shape)
        queue = deque([s])
        while queue:
            u = queue.popleft()
            pu = pos[u]
            for off in offsets:
                q = tuple(x + int(o) for x, o in zip(pu, off))
                c = []
                for a in range(d):
                    if periodic[a]:
                        c.append(q[a] % shape[a])
                    elif 0 <= q[a] < shape[a]:
                        c.append(q[a])
                    else:
                        break
                else:
                    v = flat_index(c, shape)
                    if not is_open[v]:
                        continue
                    if not labels[v]:
                        labels[v] = count
                        pos[v] = q
                        queue.append(v)
                    else:
                        for a in wraps:
                            if pos[v][a] != q[a]:
                                wraps[a].add(count)
    return np.array(labels, dtype=np.int64).reshape(shape), wraps


def bond_graph_windings(spec):
    """``(labels, wraps)`` of :func:`winding_oracle` for a spec with bonds (see
    :func:`bond_graph_unwrapped`, which also gives the positions)."""
    labels, _, wraps = bond_graph_unwrapped(spec)
    return labels, wraps


def bond_graph_unwrapped(spec):
    """``(labels, pos, wraps)`` for a spec with bonds: the graph is built bond by bond
    (bond ``(s, c)`` joins ``c`` to ``c + forward[s]``, usable when open and both ends
    exist), every bond counted separately (parallel bonds of short periodic axes and
    self-loop bonds too), each carrying its offset as displacement. BFS per cluster over
    unwrapped positions (``pos[i]``: site ``i``'s, its cluster's lowest site at its own
    coordinates); a usable bond between two visited sites whose positions differ by
    something other than its offset closes a cycle of non-zero winding (``wraps``:
    periodic axis -> labels)."""
    shape = tuple(spec["shape"])
    d = len(shape)
    periodic = _per(spec["periodic"], d)
    mask = spec.get("mask")
    n = math.prod(shape)
    steps = [[] for _ in range(n)]  # site -> [(other end, displacement)]
    for _, _, i, j, off in usable_bonds(spec):
        steps[i].append((j, off))
        steps[j].append((i, tuple(-o for o in off)))
    labels = [0] * n
    pos = {}
    wraps = {a: set() for a in range(d) if periodic[a]}
    count = 0
    for s in range(n):
        if not is_open(mask, s) or labels[s]:
            continue
        count += 1
        labels[s] = count
        pos[s] = coords_of(s, shape)
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for v, off in steps[u]:
                q = tuple(x + o for x, o in zip(pos[u], off))
                if not labels[v]:
                    labels[v] = count
                    pos[v] = q
                    queue.append(v)
                else:
                    for a in wraps:
                        if pos[v][a] != q[a]:
                            wraps[a].add(count)
    return np.array(labels, dtype=np.int64).reshape(shape), pos, wraps
