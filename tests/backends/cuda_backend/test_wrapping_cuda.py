"""Wrapping on the cuda backend: ``spanning_clusters``, ``percolates`` and their batched
twins along periodic axes find the clusters of non-zero winding on the device
(``kernels.cuda.winding``: an open labelling joined across the seams), never through the
host's O(n) forest (``_common.wrapping_labels``, made to raise here). Checked against the
winding oracle built bond by bond (:func:`tests.support.oracles.bond_graph_windings`):
dimensions 1-3, periodic axes of length 1 and 2 (self-loop and parallel bonds), von
Neumann, Moore and custom stencils, masks, bonds and bond weights (the simulator pass)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.backends import _common
from catalytic.backends import cuda_backend as cb
from catalytic.kernels.cuda import winding
from tests.support.oracles import bond_graph_windings, usable_bonds
from tests.support.strategies import L1, L2, custom_stencil, lattice_specs, make

sim = pytest.mark.sim


@pytest.fixture(autouse=True)
def on_the_device(monkeypatch):
    """The host's O(n) winding check must not run (the device does it), and no call may
    fall back to a CPU backend (which would hide a failure of the cuda one)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the cuda backend called the host winding check")

    monkeypatch.setattr(_common, "wrapping_labels", refuse)
    eng = cat.get_engine()
    before = eng.fallback_count
    yield
    assert eng.fallback_count == before, eng.fallbacks[-1:]


def _some_periodic(spec):
    """The spec with its first axis made periodic when none was."""
    per = tuple(spec["periodic"])
    if not any(per):
        spec = dict(spec, periodic=(True,) + per[1:])
    return spec


# tiny lattices: the simulator starts a Python thread for every launched thread
SPECS = st.one_of(
    lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=40),
    lattice_specs(max_dim=3, custom=True, max_sites=40),
).map(_some_periodic)
# one step of a knight's move winds once round the length-2 axis, or twice round the
# length-1 axis
KNIGHT = {"shape": (2, 1, 3), "periodic": (True, True, False), "stencil": custom_stencil(3),
          "mask": None, "weights": None, "bonds": None, "bond_weights": None}


def _expected(spec, labels, axes):
    """``{axis: sorted labels}``: the oracle's wrapping clusters on periodic axes, the
    clusters touching both faces on open ones."""
    _, wraps = bond_graph_windings(spec)
    out = {}
    for a in axes:
        if spec["periodic"][a]:
            out[a] = sorted(wraps[a])
        else:
            lo, hi = np.take(labels, 0, axis=a), np.take(labels, -1, axis=a)
            out[a] = sorted(set(lo[lo > 0].tolist()) & set(hi[hi > 0].tolist()))
    return out


@sim
@given(spec=SPECS, single=st.just(False))
@example(spec=L2, single=True)
@example(spec=L1, single=True)
@example(spec=KNIGHT, single=True)
@settings(max_examples=10, deadline=None)
def test_spanning_and_percolation_match_the_winding_oracle(spec, single):
    L = make(spec)
    d = len(spec["shape"])
    labels, _ = bond_graph_windings(spec)
    res = L.spanning_clusters(backend="cuda")
    comp = res.components
    assert comp.labels.tolist() == labels.tolist()
    assert comp.count == int(labels.max(initial=0))
    assert comp.sizes.tolist() == np.bincount(labels.reshape(-1),
                                              minlength=comp.count + 1)[1:].tolist()
    want = _expected(spec, labels, range(d))
    assert {a: res.clusters[a].tolist() for a in range(d)} == want
    assert all(res.clusters[a].dtype == np.int64 for a in range(d))
    if single:  # percolates is a spanning call of its own: on the explicit cases only
        got = L.percolates(0, backend="cuda")
        assert type(got) is bool and got is bool(want[0])


@sim
def test_five_periodic_axes_with_bonds_and_a_mask():
    # one labelling tracks any number of axes (numba-cpu's kernel tracks 4 at a time)
    rng = np.random.default_rng(4)
    shape = (2, 1, 2, 3, 1)
    spec = {"shape": shape, "periodic": (True,) * 5, "stencil": "von_neumann",
            "mask": rng.random(shape) < 0.9, "weights": None,
            "bonds": rng.random((5,) + shape) < 0.8, "bond_weights": None}
    L = make(spec)
    labels, wraps = bond_graph_windings(spec)
    res = L.spanning_clusters(backend="cuda")
    assert res.components.labels.tolist() == labels.tolist()
    assert {a: res.clusters[a].tolist() for a in range(5)} == {a: sorted(wraps[a])
                                                               for a in range(5)}
    assert any(wraps.values())  # the case is not vacuous


@sim
def test_the_labels_equal_the_periodic_labelling_across_blocks():
    # 9x9 torus near the threshold: 81 sites, two blocks of the simulator's 64 threads;
    # the open labelling splits clusters along both seams and the seam steps join them
    rng = np.random.default_rng(11)
    mask = rng.random((9, 9)) < 0.62
    L = cat.Lattice(shape=(9, 9), periodic=True, mask=mask)
    spec = {"shape": (9, 9), "periodic": (True, True), "stencil": "von_neumann",
            "mask": mask, "weights": None}
    res = L.spanning_clusters(backend="cuda")  # (puts the tables on the device)
    # beyond what the labelling copies, a second call copies back the step count and
    # the R seam steps (5 int32 each: lattice, two open labels, two crossings), not
    # O(n) more; over go the zeroed counts and step counter (2 int64) and the
    # renumbering tables (base and earlier merges of the one lattice, and a pair per
    # open cluster merged away); the seam tables are on the device already
    cb.reset_transfer_stats()
    comp = L.connected_components(backend="cuda")
    labelling = cb.transfer_stats()
    cb.reset_transfer_stats()
    again = L.spanning_clusters(backend="cuda")
    t = cb.transfer_stats()
    R = sum(1 for _, c, _, _, off in usable_bonds(spec)
            if any(x + o >= m for x, o, m in zip(c, off, (9, 9))))
    merged = cat.Lattice(shape=(9, 9), mask=mask).connected_components(backend="numpy").count
    merged -= comp.count
    assert R > 0 and merged > 0
    assert t["d2h_bytes"] - labelling["d2h_bytes"] == 8 + 20 * R, (t, labelling)
    assert t["h2d_bytes"] - labelling["h2d_bytes"] == 16 + 8 * (2 + 2 * merged), (t, labelling)
    want = _expected(spec, comp.labels, (0, 1))
    for got in (res, again):
        assert got.components.labels.tolist() == comp.labels.tolist()
        assert got.components.count == comp.count
        assert got.components.sizes.tolist() == comp.sizes.tolist()
        assert {a: got.clusters[a].tolist() for a in (0, 1)} == want
    # one of the two periodic axes asked (axis 0 stays periodic in the open labelling)
    one = L.spanning_clusters(axes=(1,), backend="cuda")
    assert one.components.labels.tolist() == comp.labels.tolist()
    assert one.clusters[1].tolist() == want[1]


BATCH_SPECS = st.one_of(
    lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=21, masks=False),
    lattice_specs(max_dim=3, custom=True, max_sites=21, masks=False),
).map(_some_periodic)


@sim
@given(spec=BATCH_SPECS, seed=st.integers(0, 2**32 - 1))
@example(spec=L2, seed=3)
@example(spec=L1, seed=5)
@settings(max_examples=4, deadline=None)
def test_batched_twins_match_the_winding_oracle_in_every_row(spec, seed):
    L = make(spec)
    d = len(spec["shape"])
    rng = np.random.default_rng(seed)
    stack = rng.random((3,) + tuple(spec["shape"])) < 0.75
    stack[1] = False  # a row without a site: no cluster at all
    eng = cat.get_engine()
    spans = eng.run("batched.spanning_clusters", L, stack, axes=tuple(range(d)),
                    backend="cuda")
    perc = eng.run("batched.percolates", L, stack, axis=d - 1, backend="cuda")
    for b in range(3):
        row = dict(spec, mask=stack[b])
        labels, _ = bond_graph_windings(row)
        comp = spans[b].components
        assert comp.labels.tolist() == labels.tolist()
        assert comp.count == int(labels.max(initial=0))
        assert comp.sizes.tolist() == np.bincount(labels.reshape(-1),
                                                  minlength=comp.count + 1)[1:].tolist()
        want = _expected(row, labels, range(d))
        assert {a: spans[b].clusters[a].tolist() for a in range(d)} == want
        assert perc[b] is bool(want[d - 1])


def test_the_kernel_refuses_axes_that_cannot_wrap():
    L = cat.Lattice(shape=(3, 4), periodic=(True, False))
    g = L.geometry
    args = (g.shape_arr, g.periodic_arr, g.offsets, g.open_flat)
    with pytest.raises(ValueError, match="axis 1 is not periodic"):
        winding.wrapping_components(*args, [1])
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        winding.wrapping_components(*args, [2])
    with pytest.raises(ValueError, match="axis 0 is named twice"):
        winding.wrapping_components(*args, [0, 0])
    with pytest.raises(ValueError, match="no axis"):
        winding.wrapping_components(*args, [])


def test_the_seam_bound_counts_the_sites_whose_step_crosses_a_seam():
    # von Neumann on 4x5: the half stencil's two steps cross a seam from one row or
    # column each; a knight's move stays off both seams from a 2x4 or 3x3 block only
    vn = cat.Lattice(shape=(4, 5), periodic=True).geometry.offsets
    assert winding.seam_rows_bound((4, 5), vn, [0]) == 5
    assert winding.seam_rows_bound((4, 5), vn, [0, 1]) == 5 + 4
    kn = custom_stencil(2)
    # half: (-1, 0), (0, -1), (-2, -1), (-1, 2)
    want = 5 + 4 + (20 - 2 * 4) + (20 - 3 * 3)
    assert winding.seam_rows_bound((4, 5), kn, [0, 1]) == want
