"""The Newman-Ziff kernel against exhaustive enumeration: on lattices of at most 7 sites
or bonds, every occupation order (all N! of them, through the explicit-orders entry
point) must give exactly the averages over every subset of n elements, for site and
bond percolation, open and periodic axes (lengths 1 and 2 included: self-loop and
parallel bonds), masks and closed bonds; and the random orders must be the documented
ones."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

import catalytic as cat
from catalytic.kernels.cpu import newman_ziff as nz
from catalytic.kernels.random import stream_key
from tests.support.percolation_oracle import existing_sites, exact_averages, usable_bonds

_B = np.array  # short for the bond planes below

CASES = {
    # 6 sites, open
    "site 2x3 open": ({"shape": (2, 3), "periodic": (False, False), "stencil": "von_neumann"},
                      "site"),
    # wraps around axis 0 of length 3
    "site 3x2 cylinder": ({"shape": (3, 2), "periodic": (True, False),
                           "stencil": "von_neumann"}, "site"),
    # a torus with an axis of length 2 (parallel bonds), two closed bonds
    "site 2x3 torus, closed bonds": ({"shape": (2, 3), "periodic": (True, True),
                                      "stencil": "von_neumann",
                                      "bonds": _B([[[1, 1, 0], [1, 1, 1]],
                                                   [[1, 1, 1], [1, 0, 1]]], bool)}, "site"),
    # Moore stencil on a cylinder with a mask
    "site moore masked": ({"shape": (3, 3), "periodic": (False, True), "stencil": "moore",
                           "mask": _B([[1, 1, 0], [1, 0, 1], [1, 1, 1]], bool)}, "site"),
    # 7 bonds, open
    "bond 2x3 open": ({"shape": (2, 3), "periodic": (False, False), "stencil": "von_neumann"},
                      "bond"),
    # a periodic axis of length 1 (self-loop bonds) and a ring of 3
    "bond 1x3 torus": ({"shape": (1, 3), "periodic": (True, True), "stencil": "von_neumann"},
                       "bond"),
    # a 2x2 torus: every pair joined by two parallel bonds, one closed, one site missing
    "bond 2x2 torus masked": ({"shape": (2, 2), "periodic": (True, True),
                               "stencil": "von_neumann",
                               "mask": _B([[1, 1], [1, 0]], bool),
                               "bonds": _B([[[1, 1], [1, 1]], [[1, 0], [1, 1]]], bool)},
                              "bond"),
    # 7 bonds on a cylinder: a wrapping ring (row 0) and a square that does not wrap
    "bond 2x3 cylinder, closed bonds": ({"shape": (2, 3), "periodic": (False, True),
                                         "stencil": "von_neumann",
                                         "bonds": _B([[[1, 1, 1], [1, 1, 1]],
                                                      [[1, 1, 1], [1, 0, 0]]], bool)},
                                        "bond"),
    # a ring of 7 sites: 7 bonds, wrapping only when all are occupied
    "bond 1-D ring of 7": ({"shape": (7,), "periodic": (True,), "stencil": "von_neumann"},
                           "bond"),
}


def _lattice(spec):
    kw = {k: spec[k] for k in ("periodic", "stencil", "mask", "bonds") if spec.get(k) is not None}
    return cat.Lattice(shape=spec["shape"], **kw)


def _run(L, kind, count, seed=0, first=0, orders=None, **kw):
    g = L.geometry
    slot, bits, words, _ = g.bond_args()
    return nz.sweeps(kind, g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, slot, bits,
                     words, count, seed, first=first, orders=orders, **kw)


@pytest.mark.parametrize("name", list(CASES))
def test_every_order_gives_the_exact_subset_averages(name, threads):
    spec, kind = CASES[name]
    L = _lattice(spec)
    exact, N = exact_averages(spec, kind)
    elems = [b[0] for b in usable_bonds(spec)] if kind == "bond" else existing_sites(spec)
    g = L.geometry
    slot, bits, words, _ = g.bond_args()
    got_elems = nz.elements(kind, g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, slot,
                            bits, words)
    assert got_elems.tolist() == elems and N <= 7
    orders = np.array(list(itertools.permutations(elems)), dtype=np.int64).reshape(-1, N)
    events, sums, m = _run(L, kind, 0, orders=orders)
    S = math.factorial(N)
    assert m == N and events.shape == (S, 2 * g.dimensions + 2)
    for what, key in (("largest", "largest"), ("clusters", "clusters")):
        total, squares = sums[what]
        assert [Fraction(x) / S for x in total] == exact[key]
        assert [Fraction(x) / S for x in squares] == exact[key + "2"]
    assert sums["mean_size"][0] / S == pytest.approx(exact["mean_size"], rel=1e-12, abs=1e-12)
    d = g.dimensions

    def by_n(col):
        ev = events[:, col]
        return [Fraction(int(((ev >= 0) & (ev <= n)).sum()), S) for n in range(N + 1)]

    for a in range(d):
        assert by_n(a) == exact["span"][a], f"span axis {a}"
        assert by_n(d + a) == exact["wrap"][a], f"wrap axis {a}"
    assert by_n(2 * d) == exact["wrap_any"]
    assert by_n(2 * d + 1) == exact["wrap_all"]


def test_random_orders_are_the_documented_ones_and_split_runs_agree(threads):
    """Sweep b's order sorts the elements by splitmix64(key + (b E + e) GOLDEN): the
    explicit orders built that way in NumPy give the same events and sums, and sweeps
    split across calls (``first``) give the events of one call."""
    L = cat.Lattice(shape=(5, 6), periodic=(True, False),
                    mask=np.random.default_rng(3).random((5, 6)) < 0.85)
    g = L.geometry
    slot, bits, words, _ = g.bond_args()
    for kind, E in (("site", g.n_points), ("bond", len(g.bond_offsets) * g.n_points)):
        elems = nz.elements(kind, g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, slot,
                            bits, words)
        orders = np.stack([nz.sample_order(stream_key(7), b, E, elems) for b in range(9)])
        ev, sums, _ = _run(L, kind, 9, seed=7)
        ev_o, sums_o, _ = _run(L, kind, 0, orders=orders)
        assert np.array_equal(ev, ev_o)
        for k in sums:
            assert np.allclose(sums[k], sums_o[k], rtol=1e-13, atol=0)
        ev_a, _, _ = _run(L, kind, 4, seed=7)
        ev_b, _, _ = _run(L, kind, 5, seed=7, first=4)
        assert np.array_equal(np.concatenate([ev_a, ev_b]), ev)
        # events only: each sweep stops when all are found, with the same events
        ev_e, sums_e, _ = _run(L, kind, 9, seed=7, observables=())
        assert np.array_equal(ev_e, ev) and sums_e == {}


def test_stride_records_every_mth_occupation():
    L = cat.Lattice(shape=(6, 7), periodic=True)
    _, full, N = _run(L, "bond", 5, seed=1)
    _, every3, _ = _run(L, "bond", 5, seed=1, n_stride=3, observables=("clusters",))
    assert list(every3) == ["clusters"]
    assert np.array_equal(every3["clusters"], full["clusters"][:, ::3])
    assert every3["clusters"].shape == (2, N // 3 + 1)


def test_large_lattice_reaches_every_thread_and_agrees_with_labelling(threads):
    """A 40x40 torus (both kinds) and a 12^3 cube: at full occupation one cluster
    holds every site, and the site sweep's spanning count equals a labelling of the
    prefix it names (one sweep checked through connected_components)."""
    for shape, per in (((40, 40), True), ((12, 12, 12), False)):
        L = cat.Lattice(shape=shape, periodic=per)
        for kind in ("site", "bond"):
            ev, sums, N = _run(L, kind, 4, seed=2)
            assert sums["largest"][0][-1] == 4 * L.n_points
            assert sums["clusters"][0][-1] == 4
            assert (ev[:, :len(shape)] >= 0).all() or per
    L = cat.Lattice(shape=(12, 12, 12))
    ev, _, _ = _run(L, "site", 1, seed=5, observables=())
    g = L.geometry
    order = nz.sample_order(stream_key(5), 0, g.n_points, np.arange(g.n_points))
    for t, want in ((ev[0, 0] - 1, False), (ev[0, 0], True)):
        m = np.zeros(g.n_points, bool)
        m[order[:t]] = True
        assert L.with_mask(m.reshape(L.shape)).percolates(0) == want
