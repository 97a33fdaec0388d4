"""The newman_ziff operation and catalytic.percolation: the numpy reference equals the
kernel (random lattices with bonds, masks, periodic axes of length 1 and 2), the
canonical convolution against direct sampling at fixed p, the square bond L x (L + 1)
crossing probability 1/2 at p = 1/2, thresholds and crossings with jackknife errors,
merged split runs (BatchProcessor chunks), the binomial window at N = 1e8, the memory
guard and bad input."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic import percolation as P
from catalytic.errors import InsufficientMemoryError
from tests.support.percolation_oracle import cluster_state, existing_sites, usable_bonds
from tests.support.strategies import L1, L2, lattice_specs, make


def _same(a, b):
    assert a.N == b.N and a.n_sites == b.n_sites and a.ranges == b.ranges
    assert np.array_equal(a.events, b.events)
    assert a.observables == b.observables
    for k in a.sums:
        assert np.allclose(a.sums[k], b.sums[k], rtol=1e-12, atol=1e-12), k


# -- the reference equals the kernel --------------------------------------------------------
@given(spec=lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=16),
       kind=st.sampled_from(["site", "bond"]), seed=st.integers(0, 2**64 - 1))
@example(spec=L2, kind="bond", seed=1)
@example(spec=L1, kind="bond", seed=2)
@example(spec=L2, kind="site", seed=3)
@settings(max_examples=15, deadline=None)
def test_reference_equals_kernel(spec, kind, seed):
    L = make(spec)
    fast = L.newman_ziff(2, kind=kind, seed=seed, first=5, backend="numba-cpu")
    slow = L.newman_ziff(2, kind=kind, seed=seed, first=5, backend="numpy")
    _same(fast, slow)
    want = len(usable_bonds(spec)) if kind == "bond" else len(existing_sites(spec))
    assert fast.N == want


def test_bonds_are_honoured_and_weights_ignored():
    """Closing every bond along axis 1 leaves only axis-0 chains: nothing spans axis 1
    in either kind; bond weights change nothing."""
    bonds = np.ones((2, 5, 6), bool)
    bonds[1] = False
    L = cat.Lattice(shape=(5, 6), bonds=bonds)
    for kind in ("site", "bond"):
        res = L.newman_ziff(20, kind=kind, seed=1)
        assert (res.event("span", axis=1) == -1).all()
        assert (res.event("span", axis=0) > 0).all()
        w = L.with_bonds(bonds)
        heavy = cat.Lattice(shape=(5, 6), bonds=bonds, bond_weights=np.full((2, 5, 6), 3.0))
        _same(heavy.newman_ziff(20, kind=kind, seed=1), w.newman_ziff(20, kind=kind, seed=1))
    assert L.newman_ziff(3, kind="bond").N == 4 * 6


# -- canonical curves against direct sampling ----------------------------------------------
def _z(a, ea, b, eb):
    return abs(a - b) / math.sqrt(ea * ea + eb * eb)


def test_site_canonical_matches_direct_sampling():
    """At p = 0.6 on a 10 x 10 cylinder: wrapping (axis 0), spanning (axis 1) and the
    largest cluster from the sweeps' convolution against binomial masks labelled by
    spanning_clusters."""
    L = cat.Lattice(shape=(10, 10), periodic=(True, False))
    p, S = 0.6, 800
    res = L.newman_ziff(S, seed=11)
    rng = np.random.default_rng(5)
    lattices = [L.with_mask(rng.random(L.shape) < p) for _ in range(S)]
    out = cat.BatchProcessor(lattices, progress=False).map("spanning_clusters", axes=(0, 1))
    wrap = np.array([r.clusters[0].size > 0 for r in out], dtype=float)
    span = np.array([r.clusters[1].size > 0 for r in out], dtype=float)
    largest = np.array([r.components.sizes.max() if r.components.count else 0 for r in out],
                       dtype=float)
    for what, axis, direct in (("wrap", 0, wrap), ("span", 1, span)):
        m, e = res.canonical(what, p, axis=axis)
        assert _z(m, e, direct.mean(), direct.std() / math.sqrt(S)) < 4, what
    m, e = res.canonical("largest", p)
    assert _z(m, e, largest.mean(), largest.std() / math.sqrt(S)) < 4


def test_bond_canonical_matches_direct_sampling():
    """Bond percolation on a 5 x 5 torus at p = 0.45: wrapping in either axis, the
    largest cluster and the number of clusters against random bond sets labelled by the
    NetworkX oracle."""
    spec = {"shape": (5, 5), "periodic": (True, True), "stencil": "von_neumann"}
    L = cat.Lattice(shape=(5, 5), periodic=True)
    p, S = 0.45, 1200
    res = L.newman_ziff(S, kind="bond", seed=2)
    bonds = usable_bonds(spec)
    rng = np.random.default_rng(9)
    sites = existing_sites(spec)
    rows = []
    for _ in range(S):
        keep = [b for b, x in zip(bonds, rng.random(len(bonds)) < p) if x]
        sizes, _, wrap = cluster_state(spec, sites, keep)
        rows.append((any(wrap), max(sizes), len(sizes)))
    direct = np.array(rows, dtype=float)
    for col, (what, kw) in enumerate((("wrap_any", {}), ("largest", {}), ("clusters", {}))):
        m, e = res.canonical(what, p, **kw)
        d = direct[:, col]
        assert _z(m, e, d.mean(), d.std() / math.sqrt(S)) < 4, what


def test_square_bond_crossing_is_one_half_at_one_half():
    """Self-duality: an L x (L + 1) square bond lattice is crossed along its long axis
    with probability exactly 1/2 at p = 1/2, and the threshold estimate of that crossing
    lands on 1/2 within its jackknife error."""
    L = cat.Lattice(shape=(12, 13))
    res = L.newman_ziff(3000, kind="bond", seed=4, observables=())
    m, e = res.canonical("span", 0.5, axis=1)
    assert abs(m - P.TARGETS["square_bond_crossing"]) < 4 * e and 0 < e < 0.02
    est = P.threshold(res, "span", 0.5, axis=1)
    assert abs(est.value - 0.5) < 4 * est.stderr and est.blocks == 16
    # the short axis is crossed more easily, so its curve reaches 1/2 earlier
    assert P.threshold(res, "span", 0.5, axis=0).value < est.value


def test_jackknife_errors_match_the_spread_of_independent_runs():
    L = cat.Lattice(shape=(8, 9))
    runs = [L.newman_ziff(300, kind="bond", seed=s, observables=()) for s in range(8)]
    ests = [P.threshold(r, "span", 0.5, axis=1) for r in runs]
    spread = np.std([x.value for x in ests], ddof=1)
    mean_err = np.mean([x.stderr for x in ests])
    assert 0.4 < spread / mean_err < 2.5


def test_square_site_wrapping_threshold_and_crossing_of_two_sizes():
    """Site percolation on square tori: the probabilities of wrapping one axis, either
    and both cross their universal values (0.521, 0.690, 0.352) near p_c = 0.5927, and
    the curves of two sizes cross there too."""
    small = cat.Lattice(shape=(8, 8), periodic=True).newman_ziff(1500, seed=1, observables=())
    large = cat.Lattice(shape=(16, 16), periodic=True).newman_ziff(1500, seed=2,
                                                                    observables=())
    for what, target, kw in (("wrap", "square_wrap", {"axis": 1}),
                             ("wrap_any", "square_wrap_any", {}),
                             ("wrap_all", "square_wrap_all", {})):
        est = P.threshold(large, what, P.TARGETS[target], **kw)
        assert abs(est.value - 0.5927) < 4 * est.stderr + 0.002 and est.stderr < 0.01, what
    cross = P.crossing(small, large, "wrap_any")
    assert 0.55 < cross.value < 0.64 and 0 < cross.stderr < 0.03
    with pytest.raises(ValueError, match="do not cross"):
        P.crossing(large, small, "wrap_any")


# -- microcanonical and canonical curves ------------------------------------------------------
def test_curves_at_the_ends_and_with_a_stride():
    L = cat.Lattice(shape=(7, 6), periodic=(True, False))
    res = L.newman_ziff(40, kind="bond", seed=8)
    # the reference relabels every prefix: the router knows it is the slow way
    assert L.last_decision.backend == "numba-cpu"
    mean, err = res.microcanonical("clusters")
    assert mean[0] == L.n_points and mean[-1] == 1 and err[0] == 0
    m, _ = res.canonical("clusters", [0.0, 1.0])
    assert m.tolist() == [L.n_points, 1.0]
    r, _ = res.canonical("wrap", np.array([[0.0], [1.0]]), axis=0)
    assert r.shape == (2, 1) and r.ravel().tolist() == [0.0, 1.0]
    prob, _ = res.microcanonical("span", axis=1)
    assert prob[-1] == 1 and np.all(np.diff(prob) >= 0)
    m2, e2 = res.microcanonical("largest", moment=2)
    assert m2[-1] == L.n_points ** 2 and np.isnan(e2).all()
    strided = L.newman_ziff(40, kind="bond", seed=8, n_stride=4, observables=["largest"])
    assert strided.observables == ("largest",) and np.array_equal(strided.n, res.n[::4])
    a, _ = strided.canonical("largest", 0.55)
    b, eb = res.canonical("largest", 0.55)
    assert abs(a - b) < 0.2 + 4 * eb
    with pytest.raises(ValueError, match="not recorded"):
        strided.canonical("clusters", 0.5)


def test_binomial_convolution_is_stable_at_a_hundred_million():
    N, stride = 10**8, 10**4
    n = np.arange(0, N + 1, stride, dtype=np.float64)
    sums = {"largest": np.stack([n, n * n]), "clusters": np.stack([n * n, n ** 4])}
    res = P.NZResult(kind="site", shape=(10**4, 10**4), periodic=(False, False), N=N,
                     n_sites=N, n_stride=stride, seed=0, ranges=[(0, 1)],
                     events=np.array([[N // 2, N // 3, -1, -1, -1, -1]]), sums=sums)
    for p in (1e-6, 0.3, 0.5927, 1 - 1e-6):
        m, _ = res.canonical("largest", p)  # linear: exact through the interpolation
        assert m == pytest.approx(N * p, rel=1e-12)
        if 0.01 < p < 0.99:  # n^2 interpolated between strides: off by <= stride^2 / 4
            m, _ = res.canonical("clusters", p)
            assert m == pytest.approx(N * p * (1 - p) + (N * p) ** 2, rel=1e-7)
        k, w = P.binomial_window(N, p)
        assert w.sum() == pytest.approx(1.0, abs=1e-12) and len(k) < 1e6
    r, _ = res.canonical("span", [0.49, 0.5, 0.51], axis=0)
    assert r[0] < 1e-100 and r[1] == pytest.approx(0.5, abs=1e-3) and r[2] == 1.0


# -- split runs, the batch processor, merging ----------------------------------------------
def test_split_runs_merge_into_one_run(capsys):
    L = cat.Lattice(shape=(9, 8), periodic=(False, True),
                    mask=np.random.default_rng(0).random((9, 8)) < 0.9)
    one = L.newman_ziff(12, kind="bond", seed=6, first=3)
    split = L.newman_ziff(12, kind="bond", seed=6, first=3, chunks=5, executor="threads")
    _same(one.merge(), L.newman_ziff(range(3, 15), kind="bond", seed=6))
    assert np.array_equal(split.events, one.events)
    for k in ("largest", "clusters"):  # integer-valued: exact in any summation order
        assert np.array_equal(split.sums[k], one.sums[k])
    assert np.allclose(split.sums["mean_size"], one.sums["mean_size"], rtol=1e-12)
    parts = cat.BatchProcessor([range(3, 8), range(8, 15)], lattice=L, progress=True).map(
        "newman_ziff", kind="bond", seed=6)
    assert "newman_ziff" in capsys.readouterr().err  # the progress bar
    merged = parts[0].merge(parts[1])
    assert pickle.loads(pickle.dumps(merged)) == merged  # results travel (Dask)
    assert merged.ranges == ((3, 8), (8, 15)) and np.array_equal(merged.events, one.events)
    with pytest.raises(ValueError, match="two of the results"):
        one.merge(parts[0])
    with pytest.raises(ValueError, match="differ"):
        one.merge(L.newman_ziff(range(20, 22), kind="site", seed=6))
    with pytest.raises(TypeError, match="NZResult"):
        one.merge(3)


def test_spanning_thresholds_is_the_events_only_sweep():
    L = cat.Lattice(shape=(10, 9), periodic=(False, True))
    th = L.run("spanning_thresholds", 30, axis=0, seed=4)
    res = L.newman_ziff(30, seed=4, observables=())
    assert np.array_equal(th, res.event("span", axis=0))


def test_spanning_thresholds_honour_closed_bonds_on_both_backends():
    bonds = np.random.default_rng(3).random((2, 8, 7)) < 0.7
    L = cat.Lattice(shape=(8, 7), periodic=(False, True), bonds=bonds)
    fast = L.run("spanning_thresholds", 20, axis=0, seed=2, backend="numba-cpu")
    slow = L.run("spanning_thresholds", 20, axis=0, seed=2, backend="numpy")
    assert np.array_equal(fast, slow)
    # closed bonds delay spanning: never earlier than with every bond open
    free = L.with_bonds(None).run("spanning_thresholds", 20, axis=0, seed=2)
    assert np.all((fast == -1) | (fast >= free)) and np.any(fast != free)


# -- memory and bad input -----------------------------------------------------------------
def test_memory_guard_names_the_remedy(monkeypatch):
    from catalytic import memory

    L = cat.Lattice(shape=(1000, 1000))
    monkeypatch.setattr(memory, "available_memory", lambda: 10 * 2**20)
    for backend in ("numba-cpu", "numpy"):
        with pytest.raises(InsufficientMemoryError, match="n_stride=.*observables="):
            L.newman_ziff(4, backend=backend)


@pytest.mark.parametrize("kwargs, err, match", [
    ({"sweeps": 0}, ValueError, "sweeps must be >= 1"),
    ({"sweeps": 2.5}, TypeError, "sweeps must be an integer"),
    ({"sweeps": range(0, 4, 2)}, ValueError, "step 1"),
    ({"sweeps": range(3, 3)}, ValueError, "non-empty"),
    ({"sweeps": range(2, 4), "first": 1}, ValueError, "first=1"),
    ({"kind": "edge"}, ValueError, "kind must be one of"),
    ({"seed": -1}, ValueError, "seed must be >= 0"),
    ({"seed": 2**64}, ValueError, "seed must be < 2\\*\\*64"),
    ({"seed": 0.5}, TypeError, "seed must be an integer"),
    ({"first": -2}, ValueError, "first must be >= 0"),
    ({"observables": ["largest", "size"]}, ValueError, "unknown observable 'size'"),
    ({"observables": ["clusters", "clusters"]}, ValueError, "twice"),
    ({"observables": 3}, TypeError, "observables must be a sequence"),
    ({"n_stride": 0}, ValueError, "n_stride must be >= 1"),
    ({"chunks": 0}, ValueError, "chunks must be a positive int"),
])
def test_bad_input_is_refused_before_any_work(kwargs, err, match):
    L = cat.Lattice(shape=(4, 4))
    kw = {"sweeps": 3, **kwargs}
    with pytest.raises(err, match=match):
        L.newman_ziff(kw.pop("sweeps"), **kw)
    if "chunks" not in kw:
        with pytest.raises(err, match=match):
            L.run("newman_ziff", kwargs.get("sweeps", 3), **{k: v for k, v in kw.items()})


def test_bad_analysis_input():
    res = cat.Lattice(shape=(4, 5), periodic=(True, False)).newman_ziff(20, seed=1)
    for p in (1.5, -0.1, np.nan, [0.2, 2.0]):
        with pytest.raises(ValueError, match="p must be in \\[0, 1\\]"):
            res.canonical("wrap", p, axis=0)
    with pytest.raises(TypeError, match="real number"):
        res.canonical("largest", "half")
    with pytest.raises(ValueError, match="periodic"):
        res.event("span", axis=0)
    with pytest.raises(ValueError, match="open"):
        res.event("wrap", axis=1)
    with pytest.raises(ValueError, match="needs an axis"):
        res.canonical("span", 0.5)
    with pytest.raises(ValueError, match="unknown event"):
        res.event("spans", axis=1)
    with pytest.raises(ValueError, match="unknown observable or event"):
        res.canonical("size", 0.5)
    for target in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="target must be in \\(0, 1\\)"):
            P.threshold(res, "wrap", target, axis=0)
    with pytest.raises(ValueError, match="blocks must be >= 2"):
        P.threshold(res, "wrap", 0.5, axis=0, blocks=1)
    with pytest.raises(ValueError, match="needs a periodic axis"):
        cat.Lattice(shape=(3, 3)).newman_ziff(2).event("wrap_any")
