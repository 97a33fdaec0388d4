"""Small lattices for the CPU graph kernels' tests (``tests/kernels/cpu``), with the
oracles those tests share.

The oracle graphs are built here from the neighbour definition in
``catalytic/kernels/cpu/neighbors.py`` (displace, wrap periodic axes, drop off open axes
and on blocked sites, drop self and duplicates) by a slow pure-Python enumerator that
shares no code with the kernels.

The cases are built once per session; each carries its own random generator, from
which the tests draw sources and site pairs.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from tests.support.oracles import moore, von_neumann


def neighbours(i, shape, periodic, offsets, open_):
    """Neighbour set of site i, written from the definition (stencil order)."""
    coords = []
    rem = i
    for n in reversed(shape):
        coords.append(rem % n)
        rem //= n
    coords = coords[::-1]
    out = []
    for off in offsets:
        j = 0
        for a, n in enumerate(shape):
            y = coords[a] + int(off[a])
            if periodic[a]:
                y %= n
            elif not 0 <= y < n:
                break
            j = j * n + y
        else:
            if open_[j] and j != i and j not in out:
                out.append(j)
    return out


class Case:
    """A small lattice plus everything the oracles need."""

    def __init__(self, shape, periodic, offsets, p_open, seed):
        self.shape = tuple(int(s) for s in shape)
        self.d = len(self.shape)
        self.n = math.prod(self.shape)
        self.periodic = np.array(periodic, dtype=np.uint8)
        self.offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, self.d)
        rng = np.random.default_rng(seed)
        self.rng = rng
        if p_open >= 1.0:
            self.mask = np.ones(self.n, dtype=bool)
            self.open_ = np.zeros(0, dtype=np.uint8)  # "all open"
        else:
            self.mask = rng.random(self.n) < p_open
            if not self.mask.any():
                self.mask[rng.integers(self.n)] = True
            self.open_ = self.mask.astype(np.uint8)
        self.nbrs = [
            neighbours(i, self.shape, self.periodic, self.offsets, self.mask)
            if self.mask[i] else []
            for i in range(self.n)
        ]
        # would a kernel see duplicates or self-loops? (the engine's rule is conservative)
        raw = 0
        for i in range(self.n):
            if self.mask[i]:
                raw += sum(
                    1
                    for k in range(len(self.offsets))
                    if self._raw_neighbour(i, k) is not None
                )
        self.dedupe = raw != sum(len(x) for x in self.nbrs)
        self.args = (np.array(self.shape, dtype=np.int64), self.periodic, self.offsets,
                     self.open_, self.dedupe)

    def _raw_neighbour(self, i, k):
        coords = np.unravel_index(i, self.shape)
        j = 0
        for a, n in enumerate(self.shape):
            y = int(coords[a]) + int(self.offsets[k, a])
            if self.periodic[a]:
                y %= n
            elif not 0 <= y < n:
                return None
            j = j * n + y
        return j if self.mask[j] else None

    def csr(self, weights=None):
        rows = [i for i in range(self.n) for _ in self.nbrs[i]]
        cols = [j for i in range(self.n) for j in self.nbrs[i]]
        if weights is None:
            data = np.ones(len(cols))
        else:
            data = weights[np.array(cols, dtype=np.int64)] if cols else np.zeros(0)
        return sp.csr_array((data, (rows, cols)), shape=(self.n, self.n))

    def digraph(self, weights=None):
        D = nx.DiGraph()
        D.add_nodes_from(int(i) for i in np.flatnonzero(self.mask))
        for i in range(self.n):
            for j in self.nbrs[i]:
                if weights is None:
                    D.add_edge(i, j)
                else:
                    D.add_edge(i, j, weight=float(weights[j]))
        return D

    def graph(self):
        U = nx.Graph()
        U.add_nodes_from(int(i) for i in np.flatnonzero(self.mask))
        for i in range(self.n):
            for j in self.nbrs[i]:
                U.add_edge(i, j)
        return U

    def open_sites(self):
        return np.flatnonzero(self.mask)

    def __repr__(self):
        per = "".join("P" if p else "o" for p in self.periodic)
        return f"Case{self.shape}{per}k{len(self.offsets)}"


SPECS = [
    # shape, periodic, stencil, p_open
    ((7,), (0,), "vn", 1.0),
    ((9,), (1,), "vn", 0.8),
    ((1,), (1,), "vn", 1.0),
    ((2,), (1,), "vn", 1.0),
    ((13,), (0,), "moore", 0.7),
    ((5, 7), (0, 0), "vn", 1.0),
    ((5, 7), (0, 0), "vn", 0.6),
    ((6, 5), (1, 0), "moore", 0.7),
    ((4, 5), (1, 1), "vn", 0.75),
    ((1, 6), (1, 0), "vn", 0.8),
    ((2, 5), (1, 1), "moore", 0.8),
    ((2, 2), (1, 1), "moore", 1.0),
    ((7, 1), (0, 1), "vn", 0.9),
    ((3, 4, 5), (0, 0, 0), "vn", 1.0),
    ((3, 4, 5), (0, 0, 0), "vn", 0.65),
    ((4, 3, 5), (1, 0, 1), "moore", 0.5),
    ((2, 3, 2), (1, 1, 1), "vn", 0.8),
    ((5, 1, 4), (0, 1, 0), "moore", 0.7),
    ((3, 2, 3, 4), (0, 0, 0, 0), "vn", 0.7),
    ((3, 3, 2, 3), (1, 0, 1, 0), "moore", 0.6),
    ((2, 2, 2, 2), (1, 1, 1, 1), "moore", 1.0),
    ((4, 3, 3, 3), (1, 1, 1, 1), "vn", 0.75),
]


def _case(spec, seed):
    shape, per, kind, p = spec
    offs = von_neumann(len(shape)) if kind == "vn" else moore(len(shape))
    return Case(shape, per, offs, p, seed)


CASES = [_case(s, 100 + i) for i, s in enumerate(SPECS)]

# Stencils that are not symmetric (directed neighbour relation), or skip the unit step
# along the last axis (connected components then take the per-site path).
ASYM = [
    Case((5, 6), (0, 0), [[0, 1], [1, 0]], 0.8, 1),
    Case((5, 6), (1, 1), [[0, 1], [1, 0]], 0.8, 2),
    Case((6, 7), (0, 0), [[1, 2], [2, -1]], 0.9, 3),
    Case((6, 7), (0, 1), [[1, 1], [-1, 1], [0, 2]], 0.85, 4),
    Case((4, 5, 3), (1, 0, 1), [[0, 0, 2], [1, -1, 0], [0, 2, 1]], 0.8, 5),
    Case((9,), (1,), [[3], [-2]], 0.8, 6),
]

ids = [repr(c) for c in CASES]
asym_ids = [repr(c) for c in ASYM]


def draw_sources(case, k=2):
    open_sites = case.open_sites()
    return np.sort(case.rng.choice(open_sites, size=min(k, open_sites.size), replace=False))


def bfs_oracle(case, sources):
    d = csgraph.dijkstra(case.csr(), directed=True, indices=sources, unweighted=True,
                         min_only=True)
    out = np.where(np.isinf(d), -1, d).astype(np.int64)
    out[~case.mask] = -1
    return out


def walk_oracle(case, start, end, weights=None):
    """The project's tie rule, straight from its statement, on oracle distances."""
    if weights is None:
        dist = bfs_oracle(case, np.array([start]))
        if dist[end] < 0:
            return np.zeros(0, dtype=np.int64)
        path = [end]
        v = end
        while v != start:
            v = min(u for u in case.nbrs[v] if dist[u] == dist[v] - 1)
            path.append(v)
        return np.array(path[::-1], dtype=np.int64)
    dist = csgraph.dijkstra(case.csr(weights), directed=True, indices=start)
    if not np.isfinite(dist[end]):
        return np.zeros(0, dtype=np.int64)
    path = [end]
    v = end
    while v != start:
        v = min(u for u in case.nbrs[v] if dist[u] + weights[v] == dist[v])
        path.append(v)
        assert len(path) <= case.n
    return np.array(path[::-1], dtype=np.int64)


def draw_pairs(case, k=4):
    o = case.open_sites()
    pairs = [(o[0], o[-1]), (o[-1], o[0]), (o[0], o[0])]
    for _ in range(k):
        pairs.append(tuple(case.rng.choice(o, 2)))
    return pairs


def canonical_labels(case, components):
    labels = np.zeros(case.n, dtype=np.int64)
    for k, comp in enumerate(sorted(components, key=min), start=1):
        labels[list(comp)] = k
    return labels
