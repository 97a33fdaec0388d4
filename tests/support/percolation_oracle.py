"""Percolation by exhaustive enumeration, from the definitions and without catalytic code:
the usable bonds of a spec, the clusters of a set of occupied sites and bonds (NetworkX),
spanning by faces, wrapping by lifts along a breadth-first tree, and the exact averages
over every subset of n elements (what a uniformly random occupation order's prefix of
length n is)."""

from __future__ import annotations

import itertools
import math
from collections import deque
from fractions import Fraction

import networkx as nx
import numpy as np

from tests.support.oracles import _per, forward_offsets


def existing_sites(spec) -> list[int]:
    mask = spec.get("mask")
    n = math.prod(spec["shape"])
    if mask is None:
        return list(range(n))
    return [int(i) for i in np.flatnonzero(np.asarray(mask).reshape(-1))]


def usable_bonds(spec) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """``(bond id s * n + start, start, end, seam crossings per periodic axis)`` of every
    usable bond (open, both ends exist, inside the open axes), by id."""
    shape = tuple(spec["shape"])
    d = len(shape)
    periodic = _per(spec["periodic"], d)
    n = math.prod(shape)
    exists = set(existing_sites(spec))
    bonds = spec.get("bonds")
    out = []
    for s, off in enumerate(forward_offsets(spec["stencil"], d)):
        for start in range(n):
            c = np.unravel_index(start, shape)
            if start not in exists or (bonds is not None and not bonds[(s,) + tuple(c)]):
                continue
            c2, turns, inside = [], [], True
            for a in range(d):
                x = int(c[a]) + off[a]
                if periodic[a]:
                    turns.append(x // shape[a])
                    x %= shape[a]
                elif not 0 <= x < shape[a]:
                    inside = False
                c2.append(x)
            if not inside:
                continue
            end = int(np.ravel_multi_index(c2, shape))
            if end in exists:
                out.append((s * n + start, start, end, tuple(turns)))
    return out


def cluster_state(spec, sites, bonds):
    """``(sizes, span, wrap)`` of the occupied ``sites`` joined by ``bonds`` (items of
    :func:`usable_bonds`): cluster sizes, and per axis whether a cluster touches both
    faces of it (open axes) or closes a cycle around it (periodic axes)."""
    shape = tuple(spec["shape"])
    d = len(shape)
    periodic = _per(spec["periodic"], d)
    pax = [a for a in range(d) if periodic[a]]
    G = nx.Graph()
    G.add_nodes_from(sites)
    adj = {v: [] for v in sites}
    for _, u, v, t in bonds:
        G.add_edge(u, v)
        adj[u].append((v, np.array(t, dtype=np.int64)))
        adj[v].append((u, -np.array(t, dtype=np.int64)))
    comps = list(nx.connected_components(G))
    span = [False] * d
    wrap = [False] * d
    for comp in comps:
        coords = np.array([np.unravel_index(v, shape) for v in comp]).reshape(len(comp), d)
        for a in range(d):
            if not periodic[a] and coords[:, a].min() == 0 and coords[:, a].max() == shape[a] - 1:
                span[a] = True
        root = next(iter(comp))
        lift = {root: np.zeros(len(pax), dtype=np.int64)}
        todo = deque([root])
        while todo:
            x = todo.popleft()
            for y, t in adj[x]:
                if y not in lift:
                    lift[y] = lift[x] + t
                    todo.append(y)
        for x in comp:
            for y, t in adj[x]:
                for q, a in enumerate(pax):
                    if lift[x][q] + t[q] - lift[y][q] != 0:
                        wrap[a] = True
    return sorted(len(c) for c in comps), span, wrap


def exact_averages(spec, kind):
    """Per occupation number n = 0..N, the exact average over every n-subset of the
    elements (sites or usable bonds): ``{"largest": [Fraction], "largest2", "clusters",
    "clusters2", "mean_size": [float], "span": [[Fraction] per axis], "wrap": ...,
    "wrap_any", "wrap_all"}``, and N."""
    d = len(spec["shape"])
    periodic = _per(spec["periodic"], d)
    pax = [a for a in range(d) if periodic[a]]
    sites = existing_sites(spec)
    bonds = usable_bonds(spec)
    elems = sites if kind == "site" else bonds
    N = len(elems)
    out = {k: [] for k in ("largest", "largest2", "clusters", "clusters2", "mean_size",
                           "wrap_any", "wrap_all")}
    out["span"] = [[] for _ in range(d)]
    out["wrap"] = [[] for _ in range(d)]
    for n in range(N + 1):
        acc = {k: Fraction(0) for k in out if k not in ("span", "wrap", "mean_size")}
        span = [0] * d
        wrap = [0] * d
        mean_size = 0.0
        count = 0
        for subset in itertools.combinations(elems, n):
            if kind == "site":
                occ = set(subset)
                active = [b for b in bonds if b[1] in occ and b[2] in occ]
                sizes, sp, wr = cluster_state(spec, sorted(occ), active)
            else:
                sizes, sp, wr = cluster_state(spec, sites, list(subset))
            smax = max(sizes, default=0)
            rest = sum(sizes) - smax
            acc["largest"] += smax
            acc["largest2"] += smax * smax
            acc["clusters"] += len(sizes)
            acc["clusters2"] += len(sizes) ** 2
            mean_size += (sum(s * s for s in sizes) - smax * smax) / rest if rest else 0.0
            acc["wrap_any"] += any(wr)
            acc["wrap_all"] += bool(pax) and all(wr[a] for a in pax)
            for a in range(d):
                span[a] += sp[a]
                wrap[a] += wr[a]
            count += 1
        for k, v in acc.items():
            out[k].append(v / count)
        out["mean_size"].append(mean_size / count)
        for a in range(d):
            out["span"][a].append(Fraction(span[a], count))
            out["wrap"][a].append(Fraction(wrap[a], count))
    return out, N
