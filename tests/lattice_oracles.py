"""Independent oracles and hypothesis strategies shared by the lattice tests.

Nothing here imports catalytic's geometry or backends: the neighbour rule, the explicit
graphs and the stencils are rebuilt from the definitions in DESIGN.md so that the tests
compare catalytic against something it does not share code with.

(Kept out of ``conftest.py`` so test modules can import it by name without clashing
with other ``conftest`` modules under ``tests/``.)
"""

from __future__ import annotations

import itertools
import math
import os

import networkx as nx
import numpy as np
from hypothesis import strategies as st

import catalytic as cat

#: floats from different backends (summation order, eigen-solvers) agree to this
FLOAT_RTOL = 1e-9
FLOAT_ATOL = 1e-12

#: largest size per axis drawn for each dimension, so n_points stays <= ~400
AXIS_CAP = {1: 40, 2: 14, 3: 7, 4: 4, 5: 3}


# -- backends ---------------------------------------------------------------------------
def available_backends() -> list[str]:
    """Every backend the engine reports as available, reference ('numpy') first."""
    names = [n for n, (ok, _) in cat.get_engine().backends().items() if ok]
    return sorted(names, key=lambda n: (n != "numpy", n))


def declines(backend: str, op: str, *args, **kwargs) -> str | None:
    """Why ``backend`` cannot run ``op(*args, **kwargs)`` (None when it can).

    Asked through the public ``explain`` with the backend forced, the way a user would.
    """
    try:
        cat.get_engine().explain(op, *args, backend=backend, **kwargs)
    except cat.NoBackendError as err:
        return str(err)
    return None


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


def _per(periodic, d):
    if isinstance(periodic, (bool, np.bool_)):
        return (bool(periodic),) * d
    return tuple(bool(p) for p in periodic)


# -- lattices from specs ----------------------------------------------------------------------
def make(spec, **extra):
    """A lattice from a spec dict drawn by :func:`lattice_specs`."""
    kw = {k: spec[k] for k in ("periodic", "stencil", "mask", "weights") if spec.get(k) is not None}
    return cat.Lattice(shape=spec["shape"], **kw, **extra)


def graph_of(spec, *, all_nodes=False):
    return oracle_graph(
        spec["shape"], spec["periodic"], spec["stencil"], spec.get("mask"), all_nodes=all_nodes
    )


def open_sites(spec) -> np.ndarray:
    n = math.prod(spec["shape"])
    m = spec.get("mask")
    return np.arange(n) if m is None else np.flatnonzero(m.reshape(-1))


@st.composite
def lattice_specs(
    draw,
    *,
    max_dim=5,
    stencils=("von_neumann", "moore"),
    masks=True,
    weights=False,
    max_sites=None,
    periodic=None,
    moore_max_dim=3,
):
    """A random lattice description: 1-D to ``max_dim``-D, periodic/open per axis, a
    stencil, optionally a random mask (at several densities) and random weights."""
    d = draw(st.integers(1, max_dim))
    cap = AXIS_CAP[d]
    shape = tuple(draw(st.lists(st.integers(1, cap), min_size=d, max_size=d)))
    if max_sites is not None and math.prod(shape) > max_sites:
        # shrink the largest axes until the lattice fits (keeps every draw usable)
        shape = list(shape)
        while math.prod(shape) > max_sites:
            a = int(np.argmax(shape))
            shape[a] -= 1
        shape = tuple(shape)
    if periodic is None:
        per = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    else:
        per = (bool(periodic),) * d
    allowed = [s for s in stencils if s != "moore" or d <= moore_max_dim]
    stencil = draw(st.sampled_from(allowed or ["von_neumann"]))
    mask = None
    if masks and draw(st.booleans()):
        density = draw(st.sampled_from([0.5, 0.65, 0.8, 0.95]))
        seed = draw(st.integers(0, 2**32 - 1))
        mask = np.random.default_rng(seed).random(shape) < density
        if not mask.any():
            mask.reshape(-1)[0] = True
    w = None
    if weights:
        kind = draw(st.sampled_from(["integer", "float", "with_zeros"]))
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        if kind == "integer":
            w = rng.integers(1, 5, size=shape).astype(np.float64)
        elif kind == "float":
            w = rng.uniform(0.1, 3.0, size=shape)
        else:
            w = rng.integers(0, 3, size=shape).astype(np.float64)
    return {"shape": shape, "periodic": per, "stencil": stencil, "mask": mask, "weights": w}


def pick_open(spec, data, label="site"):
    """Draw one open site (flat index) of the spec with hypothesis ``data``."""
    sites = open_sites(spec)
    return int(sites[data.draw(st.integers(0, len(sites) - 1), label=label)])


#: larger lattices for backend agreement (compared with the reference, not NetworkX);
#: fewer examples than the small draws (each costs ~0.1-1 s); raise it to hunt bugs
LARGE_EXAMPLES = int(os.environ.get("CATALYTIC_LARGE_EXAMPLES", "15"))
LARGE_AXIS_CAP = {1: 3000, 2: 90, 3: 22, 4: 9}


@st.composite
def large_lattice_specs(draw, *, weights=False):
    """Lattices of up to ~10^4 sites: odd sizes, tiny and long axes, where the
    compiled kernels' chunking and padding paths differ from the small draws."""
    d = draw(st.integers(1, 4))
    cap = LARGE_AXIS_CAP[d]
    # each axis is tiny (1 in 4) or long; sizes come from a drawn seed because
    # hypothesis's own integer draws favour small values
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="shape seed"))
    shape = tuple(
        int(rng.integers(1, 5)) if rng.random() < 0.25 else int(rng.integers(cap // 2, cap + 1))
        for _ in range(d)
    )
    per = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    stencil = draw(st.sampled_from(["von_neumann", "moore"] if d <= 3 else ["von_neumann"]))
    mask = None
    if draw(st.booleans()):
        density = draw(st.sampled_from([0.45, 0.6, 0.75, 0.9]))
        mask = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).random(shape) < density
        mask.reshape(-1)[0] = True
    w = None
    if weights:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        w = rng.integers(1, 6, size=shape).astype(np.float64)
    return {"shape": shape, "periodic": per, "stencil": stencil, "mask": mask, "weights": w}
