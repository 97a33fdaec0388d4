"""Hypothesis strategies that draw lattice descriptions ("specs": shape, periodic axes,
stencil, mask, weights), and the lattice a spec describes.

A spec is a plain dict, so the oracles in :mod:`tests.support.oracles` read it without
catalytic; :func:`make` builds the :class:`catalytic.Lattice` it describes.
"""

from __future__ import annotations

import math
import os

import numpy as np
from hypothesis import strategies as st

import catalytic as cat
from tests.support.oracles import forward_offsets, open_sites

#: largest size per axis drawn for each dimension, so n_points stays <= ~400
AXIS_CAP = {1: 40, 2: 14, 3: 7, 4: 4, 5: 3}


def make(spec, **extra):
    """A lattice from a spec dict drawn by :func:`lattice_specs`."""
    keys = ("periodic", "stencil", "mask", "weights", "bonds", "bond_weights")
    kw = {k: spec[k] for k in keys if spec.get(k) is not None}
    return cat.Lattice(shape=spec["shape"], **kw, **extra)


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
    bonds=False,
    custom=False,
):
    """A random lattice description: 1-D to ``max_dim``-D, periodic/open per axis, a
    stencil, optionally a random mask (at several densities) and random weights.

    With ``bonds``, also random bonds and, half the time, bond weights (keys ``bonds``,
    ``bond_weights``, in the layout of :attr:`catalytic.Lattice.bond_offsets`); with
    ``custom``, the stencil may also be a custom one (a knight's move plus the axes)."""
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
    if custom:
        allowed.append("custom")
    stencil = draw(st.sampled_from(allowed or ["von_neumann"]))
    if stencil == "custom":
        stencil = custom_stencil(d)
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
    spec = {"shape": shape, "periodic": per, "stencil": stencil, "mask": mask, "weights": w}
    if bonds:
        _draw_bonds(draw, spec)
    return spec


#: parallel bonds along a periodic axis of length 2 (bond weights 1..12, some bonds
#: closed): a case random draws rarely hit
L2 = {"shape": (2, 3), "periodic": (True, False), "stencil": "von_neumann", "mask": None,
      "weights": None, "bonds": np.array([[[False, True, True], [True, True, False]],
                                          [[True, True, True], [True, False, True]]]),
      "bond_weights": np.arange(12, dtype=float).reshape(2, 2, 3) + 1}
#: self-loop bonds along periodic axes of length 1 (Moore, every bond open)
L1 = {"shape": (1, 3), "periodic": (True, True), "stencil": "moore", "mask": None,
      "weights": None, "bonds": np.ones((4, 1, 3), bool), "bond_weights": None}


def custom_stencil(d: int) -> np.ndarray:
    """A custom symmetric stencil: the axes, plus a knight's move in 2-D and up."""
    rows = []
    for a in range(d):
        e = [0] * d
        e[a] = 1
        rows += [e, [-x for x in e]]
    if d >= 2:
        knight = [2, 1] + [0] * (d - 2)
        rows += [knight, [-x for x in knight], [1, -2] + [0] * (d - 2), [-1, 2] + [0] * (d - 2)]
    return np.array(rows, dtype=np.int64)


def _draw_bonds(draw, spec):
    """Add random ``bonds`` (at one of several densities) and, half the time, random
    ``bond_weights`` to ``spec``, in the layout of ``Lattice.bond_offsets``."""
    shape = spec["shape"]
    kf = len(forward_offsets(spec["stencil"], len(shape)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    density = draw(st.sampled_from([0.4, 0.7, 0.9, 1.0]))
    spec["bonds"] = rng.random((kf,) + shape) < density
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["integer", "float", "with_zeros"]))
        if kind == "integer":
            spec["bond_weights"] = rng.integers(1, 5, size=(kf,) + shape).astype(float)
        elif kind == "float":
            spec["bond_weights"] = rng.uniform(0.1, 3.0, size=(kf,) + shape)
        else:
            spec["bond_weights"] = rng.integers(0, 3, size=(kf,) + shape).astype(float)


def pick_open(spec, data, label="site"):
    """Draw one open site (flat index) of the spec with hypothesis ``data``."""
    sites = open_sites(spec)
    return int(sites[data.draw(st.integers(0, len(sites) - 1), label=label)])


#: larger lattices for backend agreement (compared with the reference, not NetworkX);
#: fewer examples than the small draws (each costs ~0.1-1 s); raise it to hunt bugs
LARGE_EXAMPLES = int(os.environ.get("CATALYTIC_LARGE_EXAMPLES", "15"))
LARGE_AXIS_CAP = {1: 3000, 2: 90, 3: 22, 4: 9}


@st.composite
def large_lattice_specs(draw, *, weights=False, bonds=False):
    """Lattices of up to ~10^4 sites: odd sizes, tiny and long axes, where the
    compiled kernels' chunking and padding paths differ from the small draws; with
    ``bonds``, random bonds and bond weights as :func:`lattice_specs` draws them."""
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
    spec = {"shape": shape, "periodic": per, "stencil": stencil, "mask": mask, "weights": w}
    if bonds:
        _draw_bonds(draw, spec)
    return spec


@st.composite
def path_cases(draw, max_sites=400, max_sites_picked=4):
    """A lattice for the path searches (up to 3-D, masks, bonds, site weights half the
    time, zeros among them half of those: cost plateaus), a spacing or None, how many
    sites to pick (1 to ``max_sites_picked``) and a seed to pick them with:
    ``(spec, spacing, k, seed)``."""
    spec = draw(lattice_specs(max_dim=3, weights=draw(st.booleans()), bonds=True,
                              max_sites=max_sites))
    d = len(spec["shape"])
    spacing = draw(st.one_of(st.none(), st.lists(st.sampled_from([0.5, 1.0, 2.0, 0.3]),
                                                 min_size=d, max_size=d)))
    if spec.get("weights") is not None and draw(st.booleans()):
        w = spec["weights"].copy()
        w.reshape(-1)[::2] = 0.0  # cost plateaus
        spec = dict(spec, weights=w)
    k = draw(st.integers(1, max_sites_picked))
    seed = draw(st.integers(0, 2**16))
    return spec, spacing, k, seed
