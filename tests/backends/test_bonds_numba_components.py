"""The numba-cpu backend with bonds: components, spanning and wrapping clusters,
percolation, degree, Laplacian and diffusion (single calls and batched twins), against
oracles that share no code with catalytic: the graph built bond by bond
(``bond_graph``) with SciPy's csgraph labelling, the bond-by-bond winding BFS
(``bond_graph_windings``), a Laplacian summed from the graph's edge weights. Wrapping
without bonds is also checked on large tori against ``wrapping_labels``, the host
winding check the kernel replaced."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import connected_components as csgraph_components

import catalytic as cat
from catalytic.backends._common import wrapping_labels
from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu.winding import label_windings, label_windings_batched
from tests.support.kernel_calls import count_kernel_calls
from tests.support.oracles import bond_graph, bond_graph_windings
from tests.support.strategies import L1, L2, lattice_specs, make
from tests.support.threads import threads  # noqa: F401 (a fixture)

B = "numba-cpu"
SPECS = lattice_specs(max_dim=3, bonds=True, custom=True, max_sites=64)
P_C = 0.592746


# -- oracles -------------------------------------------------------------------------------
def csgraph_labels(G, n):
    """Labels of the nodes of ``G`` (flat indices < n) numbered 1.. by lowest index, 0
    elsewhere, from SciPy's csgraph labelling of its adjacency."""
    nodes = sorted(G.nodes)
    if not nodes:
        return np.zeros(n, np.int64)
    rows = [u for u, v in G.edges] + [v for u, v in G.edges]
    cols = [v for u, v in G.edges] + [u for u, v in G.edges]
    A = sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    _, raw = csgraph_components(A, directed=False)
    out = np.zeros(n, np.int64)
    order = {}
    for i in nodes:
        out[i] = order.setdefault(raw[i], len(order) + 1)
    return out


def face_sets(labels, axis):
    lo = set(np.take(labels, 0, axis=axis).reshape(-1).tolist()) - {0}
    hi = set(np.take(labels, -1, axis=axis).reshape(-1).tolist()) - {0}
    return lo & hi


def spanning_oracle(spec):
    labels, wraps = bond_graph_windings(spec)
    per = spec["periodic"]
    return labels, {a: (wraps[a] if per[a] else face_sets(labels, a))
                    for a in range(len(spec["shape"]))}


def laplacian_oracle(spec, f):
    """``sum_j c_ij (f_i - f_j)`` over the bond graph's edges, ``c_ij`` the edge's weight
    (least of parallel bonds) with bond weights, 1 without; 0 on blocked sites."""
    G = bond_graph(spec)
    f = f.reshape(-1)
    out = np.zeros_like(f)
    weighted = spec.get("bond_weights") is not None
    for u, v, w in G.edges(data="weight"):
        c = w if weighted else 1.0
        out[u] += c * (f[u] - f[v])
        out[v] += c * (f[v] - f[u])
    return out


# -- single calls against the bond graph ---------------------------------------------------
@given(spec=SPECS)
@example(spec=L2)
@example(spec=L1)
@settings(max_examples=40, deadline=None)
def test_components_spanning_and_percolation_match_the_bond_graph(spec):
    L = make(spec)
    n = L.n_points
    want = csgraph_labels(bond_graph(spec), n).reshape(L.shape)
    comp = L.connected_components(backend=B)
    np.testing.assert_array_equal(comp.labels, want)
    assert comp.count == want.max(initial=0)
    sizes = np.bincount(want.reshape(-1), minlength=comp.count + 1)[1:]
    assert comp.sizes.tolist() == sizes.tolist()
    labels, spans = spanning_oracle(spec)
    np.testing.assert_array_equal(labels, want)
    d = L.dimensions
    res = L.spanning_clusters(tuple(range(d)), backend=B)
    np.testing.assert_array_equal(res.components.labels, want)
    for a in range(d):
        got = res.clusters[a]
        assert got.dtype == np.int64 and (np.diff(got) > 0).all()
        assert set(got.tolist()) == spans[a], a
        assert L.percolates(a, backend=B) is bool(spans[a])


@given(spec=SPECS, seed=st.integers(0, 2**32 - 1))
@example(spec=L2, seed=0)
@example(spec=L1, seed=1)
@settings(max_examples=30, deadline=None)
def test_degree_laplacian_and_diffusion_match_the_bond_graph(spec, seed):
    L = make(spec)
    G = bond_graph(spec)
    deg = np.zeros(L.n_points, np.int64)
    for i in G.nodes:
        deg[i] = G.degree(i)
    np.testing.assert_array_equal(L.degree(backend=B).reshape(-1), deg)
    f = np.random.default_rng(seed).normal(size=L.shape)
    want = laplacian_oracle(spec, f)
    got = L.laplacian(f, backend=B).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * (1 + np.abs(want).max()))
    weighted = spec.get("bond_weights") is not None
    wdeg = max((sum(w if weighted else 1.0 for *_, w in G.edges(i, data="weight"))
                for i in G.nodes), default=0.0)
    alpha = 0.5 / max(len(L.geometry.offsets), wdeg, 1.0)
    g = f.reshape(-1).copy()
    for _ in range(3):
        g = g - alpha * laplacian_oracle(spec, g)
    got = cat.get_engine().run("diffuse", L, f, steps=3, alpha=alpha, backend=B)
    np.testing.assert_allclose(got.reshape(-1), g, rtol=1e-9,
                               atol=1e-12 * (1 + np.abs(g).max()))


def test_a_closed_first_bond_does_not_hide_an_open_parallel_one():
    # periodic axis of length 2: 0 - 1 directly (bond of site 0) and across the seam
    # (bond of site 1); the direct one closed
    L = cat.Lattice(shape=(2,), periodic=True, bonds=np.array([[False, True]]),
                    bond_weights=np.array([[3.0, 5.0]]))
    assert L.degree(backend=B).tolist() == [1, 1]
    assert L.connected_components(backend=B).count == 1
    assert L.laplacian(np.array([1.0, 0.0]), backend=B).tolist() == [5.0, -5.0]
    # both bonds open: one edge of the least weight, and the pair wraps (two bonds)
    M = L.with_bonds(np.array([[True, True]]))
    assert M.laplacian(np.array([1.0, 0.0]), backend=B).tolist() == [3.0, -3.0]
    assert M.percolates(0, backend=B) and not L.percolates(0, backend=B)


def test_a_self_loop_bond_wraps_a_length_one_axis_only_when_open():
    bonds = np.ones((2, 1, 4), bool)  # planes (1, 0) (self-loops) and (0, 1)
    bonds[0, 0, 2] = False
    L = cat.Lattice(shape=(1, 4), periodic=(True, False), bonds=bonds)
    assert L.connected_components(backend=B).count == 1
    assert L.percolates(0, backend=B)  # the other three self-loops are open
    bonds[0] = False
    assert not L.with_bonds(bonds).percolates(0, backend=B)
    assert L.with_bonds(bonds).degree(backend=B).tolist() == [[1, 2, 2, 1]]


# -- the kernel itself, and larger lattices (long runs, both seam pieces, many unions) --------
def _torus(shape, p_site, p_bond, seed, stencil="von_neumann", periodic=True):
    rng = np.random.default_rng(seed)
    L0 = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil)
    kf = len(L0.bond_offsets)
    mask = rng.random(shape) < p_site
    bonds = None if p_bond is None else rng.random((kf,) + tuple(shape)) < p_bond
    spec = {"shape": tuple(shape), "periodic": L0.periodic, "stencil": stencil,
            "mask": mask, "bonds": bonds}
    return make(spec), spec


@pytest.mark.parametrize("shape, stencil, p_site, p_bond", [
    ((128, 128), "von_neumann", 0.9, 0.55),
    ((20, 20, 20), "von_neumann", 0.85, 0.45),
    ((37, 41), "moore", 0.8, 0.3),
    ((30, 31), np.array([[2, 1], [-2, -1], [1, -2], [-1, 2], [0, 3], [0, -3]]), 0.9, 0.6),
])
def test_larger_bond_lattices_match_the_bond_graph(shape, stencil, p_site, p_bond):
    L, spec = _torus(shape, p_site, p_bond, 5, stencil)
    labels, spans = spanning_oracle(spec)
    np.testing.assert_array_equal(
        labels.reshape(-1), csgraph_labels(bond_graph(spec), L.n_points))
    res = L.spanning_clusters(tuple(range(len(shape))), backend=B)
    np.testing.assert_array_equal(res.components.labels, labels)
    for a in range(len(shape)):
        assert set(res.clusters[a].tolist()) == spans[a], a
    assert L.connected_components(backend=B).count == labels.max()


@pytest.mark.parametrize("shape, stencil, p", [
    ((128, 128), "von_neumann", P_C), ((128, 128), "moore", 0.4),
    ((24, 25, 26), "von_neumann", 0.3116), ((7, 300), "von_neumann", 0.75),
    ((31, 33), np.array([[0, 5], [0, -5], [3, 1], [-3, -1]]), 0.7),
])
def test_wrapping_without_bonds_matches_the_host_winding_check(shape, stencil, p):
    L, _ = _torus(shape, p, None, 9, stencil)
    ref = L.connected_components(backend="numpy").labels
    axes = tuple(range(len(shape)))
    want = wrapping_labels(L.geometry, ref, axes)
    res = L.spanning_clusters(axes, backend=B)
    np.testing.assert_array_equal(res.components.labels, ref)
    for a in axes:
        np.testing.assert_array_equal(res.clusters[a], want[a])
    g = L.geometry
    _, _, _, wraps = label_windings(g.shape_arr, g.periodic_arr, g.offsets, g.open_flat,
                                    *g.bond_args()[:3], axes)
    for q, a in enumerate(axes):
        np.testing.assert_array_equal(np.flatnonzero(wraps & (1 << q)), want[a])


def test_wrapping_counts_every_turn_of_a_long_step():
    # offsets 3 long on a periodic axis of length 2: a step crosses the seam once or twice
    L = cat.Lattice(shape=(2, 5), periodic=(True, False),
                    stencil=np.array([[3, 0], [-3, 0], [0, 1], [0, -1]]))
    g = L.geometry
    for m in (np.array([[1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], bool),
              np.array([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], bool)):
        M = L.with_mask(m)
        want = wrapping_labels(M.geometry, M.connected_components(backend="numpy").labels,
                               (0,))
        np.testing.assert_array_equal(M.spanning_clusters(0, backend=B).clusters[0], want[0])
    assert g.dedupe


# -- batched twins -----------------------------------------------------------------------
@given(spec=SPECS, rows=st.integers(0, 4), seed=st.integers(0, 2**32 - 1))
@example(spec=L2, rows=3, seed=2)
@settings(max_examples=20, deadline=None)
def test_batched_twins_with_bonds_match_the_bond_graph_row_by_row(spec, rows, seed):
    L = make(spec)
    rng = np.random.default_rng(seed)
    stack = rng.random((rows,) + tuple(spec["shape"])) < rng.uniform(0.4, 1.0)
    eng = cat.get_engine()
    d = L.dimensions
    axes = tuple(range(d))
    comps = eng.run("batched.connected_components", L, stack, backend=B)
    spans = eng.run("batched.spanning_clusters", L, stack, axes=axes, backend=B)
    percs = [eng.run("batched.percolates", L, stack, axis=a, backend=B) for a in axes]
    fields = rng.normal(size=(rows,) + tuple(spec["shape"]))
    M = L.with_mask(None)  # the Laplacian twin: fields over the one lattice
    laps = eng.run("batched.laplacian", M, fields, backend=B)
    assert len(comps) == len(spans) == rows
    mspec = dict(spec, mask=None)
    for b in range(rows):
        one = dict(spec, mask=stack[b])
        labels, want = spanning_oracle(one)
        np.testing.assert_array_equal(comps[b].labels, labels)
        np.testing.assert_array_equal(
            labels.reshape(-1), csgraph_labels(bond_graph(one), L.n_points))
        np.testing.assert_array_equal(spans[b].components.labels, labels)
        for a in axes:
            assert set(spans[b].clusters[a].tolist()) == want[a]
            assert percs[a][b] is bool(want[a])
        w = laplacian_oracle(mspec, fields[b])
        np.testing.assert_allclose(laps[b].reshape(-1), w, rtol=1e-9,
                                   atol=1e-12 * (1 + np.abs(w).max()))


def test_batched_wrapping_on_tori_matches_the_host_winding_check():
    rng = np.random.default_rng(3)
    L = cat.Lattice(shape=(128, 128), periodic=True)
    stack = rng.random((6, 128, 128)) < P_C
    spans = cat.get_engine().run("batched.spanning_clusters", L, stack, axes=(0, 1),
                                 backend=B)
    percs = cat.get_engine().run("batched.percolates", L, stack, axis=1, backend=B)
    for b in range(len(stack)):
        one = L.with_mask(stack[b])
        ref = one.connected_components(backend="numpy").labels
        want = wrapping_labels(one.geometry, ref, (0, 1))
        np.testing.assert_array_equal(spans[b].components.labels, ref)
        for a in (0, 1):
            np.testing.assert_array_equal(spans[b].clusters[a], want[a])
        assert percs[b] is bool(want[1].size)


def test_batched_kernel_rows_equal_single_calls_with_shared_bonds():
    L, spec = _torus((40, 41), 1.0, 0.6, 4)
    g = L.geometry
    stack = (np.random.default_rng(8).random((5, g.n_points)) < 0.8).astype(np.uint8)
    lab, counts, sizes, wraps = label_windings_batched(
        g.shape_arr, g.periodic_arr, g.offsets, stack, *g.bond_args()[:3], (0, 1))
    for b in range(5):
        one = label_windings(g.shape_arr, g.periodic_arr, g.offsets, stack[b],
                             *g.bond_args()[:3], (0, 1))
        np.testing.assert_array_equal(lab[b], one[0])
        assert counts[b] == one[1]
        np.testing.assert_array_equal(sizes[b], one[2])
        np.testing.assert_array_equal(wraps[b], one[3])


def test_a_large_labelling_runs_in_many_kernel_calls_with_the_same_result(monkeypatch,
                                                                         threads):
    L, spec = _torus((23, 29), 0.9, 0.6, 7)
    g = L.geometry
    args = (g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, *g.bond_args()[:3], (0, 1))
    whole = label_windings(*args)
    calls = _count_calls(monkeypatch)
    monkeypatch.setattr(_budget, "_BUDGET", 50)
    parts = label_windings(*args)
    # one row of each thread's chunk a call (23 rows on one thread), in every phase
    rows = -(-23 // threads)
    assert calls["_par_inside"] == rows
    assert calls["_par_cross"] == (rows if threads > 1 else 0)
    assert calls["_par_count"] == calls["_par_write"] == calls["_par_labels"] == rows
    for a, b in zip(parts, whole):
        np.testing.assert_array_equal(a, b)
    labels, spans = spanning_oracle(spec)
    np.testing.assert_array_equal(parts[0].reshape(L.shape), labels)
    for q in (0, 1):
        assert set(np.flatnonzero(parts[3] & (1 << q)).tolist()) == spans[q]


# -- one lattice split over threads ------------------------------------------------------
#: the host-called kernels of the split labelling (no other kernel calls them)
SPLIT_KERNELS = ("_par_count", "_par_write", "_par_inside", "_par_cross", "_par_labels")


def _count_calls(monkeypatch):
    """Count the calls of the split labelling's kernels (name -> calls)."""
    from catalytic.kernels.cpu import winding

    return count_kernel_calls(monkeypatch, {winding: SPLIT_KERNELS})


def _split_args(spec):
    """``label_windings`` arguments of a spec, its periodic axes tracked."""
    L = make(spec)
    g = L.geometry
    axes = tuple(a for a in range(L.dimensions) if g.periodic[a])
    return (g.shape_arr, g.periodic_arr, g.offsets, g.open_flat, *g.bond_args()[:3]), axes


def _assert_windings(got, want_labels, want_wraps, axes):
    """``label_windings`` output against the bond-by-bond winding oracle: labels, count,
    sizes, and the wrap bit of each tracked axis."""
    labels, count, sizes, wraps = got
    want = want_labels.reshape(-1)
    np.testing.assert_array_equal(labels, want)
    assert labels.dtype == np.int32 and count == want.max(initial=0)
    assert sizes.tolist() == np.bincount(want, minlength=count + 1)[1:].tolist()
    assert wraps.shape == (count + 1,) and wraps[0] == 0
    for q, a in enumerate(axes):
        assert set(np.flatnonzero(wraps & (1 << q)).tolist()) == want_wraps[a], a
    assert not (wraps >> len(axes)).any()


@given(spec=SPECS, big=st.booleans())
@example(spec=L2, big=False)
@example(spec=L1, big=False)
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_labelling_split_over_row_chunks_matches_the_bond_graph(monkeypatch, threads,
                                                                    spec, big):
    # every lattice split (no single call), in kernel calls of a few rows (one thread:
    # always; two threads: half the time) or of the normal budget
    from catalytic.kernels.cpu import winding

    monkeypatch.setattr(winding, "_WHOLE_WORK", 0)
    monkeypatch.setattr(_budget, "_BUDGET", 1 << 23 if big and threads > 1 else 40)
    args, axes = _split_args(spec)
    labels, wraps = bond_graph_windings(spec)
    _assert_windings(label_windings(*args, axes), labels, wraps, axes)
    _assert_windings(label_windings(*args), labels, {}, ())


def _rows_of_65():
    """Rows of 65 sites, every bond open but one unit bond per row at a word edge of the
    row's bits (or none): rows whose unit bonds are all open and rows with one closed;
    and one closed bond between rows, the only way left to site (3, 10)."""
    shape = (7, 65)
    bonds = np.ones((2,) + shape, bool)
    for row, x in enumerate((0, 30, 31, 32, 63, 64)):  # x = 64: the seam bond
        bonds[1, row + 1, x] = False
    bonds[0, 2, 10] = False  # (2, 10) - (3, 10)
    mask = np.ones(shape, bool)
    mask[3, 40] = mask[3, 9] = mask[3, 11] = mask[4, 10] = False
    return {"shape": shape, "periodic": (True, True), "stencil": "von_neumann",
            "mask": mask, "bonds": bonds}


def _case(shape, stencil, periodic, p_site, p_bond, seed=5):
    return _torus(shape, p_site, p_bond, seed, stencil, periodic)[1]


SPLIT_CASES = {
    "2d-torus": lambda: _case((40, 41), "von_neumann", True, 0.9, 0.55),
    "2d-torus-all-bonds-open": lambda: _case((40, 41), "von_neumann", True, 0.7, 1.0),
    "3d-mixed": lambda: _case((12, 13, 14), "von_neumann", (True, False, True), 0.85, 0.45),
    "3d-all-bonds-open": lambda: _case((12, 13, 14), "von_neumann", True, 0.4, 1.0),
    "moore": lambda: _case((37, 41), "moore", True, 0.8, 0.3),
    "knight": lambda: _case(
        (30, 31), np.array([[2, 1], [-2, -1], [1, -2], [-1, 2], [0, 3], [0, -3]]), True,
        0.9, 0.6),
    "open-short-rows": lambda: _case((50, 3), "von_neumann", False, 0.8, 0.7),
    "one-site-rows": lambda: _case((60, 1), "von_neumann", True, 0.9, 0.8),
    "rows-of-65": _rows_of_65,
}
_ORACLES = {}


@pytest.mark.parametrize("budget", [40, 1 << 23], ids=["small-budget", "normal-budget"])
@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_larger_lattices_split_over_row_chunks_match_the_bond_graph(monkeypatch, threads,
                                                                    case, budget):
    from catalytic.kernels.cpu import winding

    spec = SPLIT_CASES[case]()
    if case not in _ORACLES:
        _ORACLES[case] = bond_graph_windings(spec)
    labels, wraps = _ORACLES[case]
    args, axes = _split_args(spec)
    calls = _count_calls(monkeypatch)
    monkeypatch.setattr(winding, "_WHOLE_WORK", 0)
    monkeypatch.setattr(_budget, "_BUDGET", budget)
    _assert_windings(label_windings(*args, axes), labels, wraps, axes)
    _assert_windings(label_windings(*args), labels, {}, ())
    if threads > 1 or budget == 40:
        assert calls["_par_inside"] >= 2  # the split path, not the single call


@pytest.mark.parametrize("stencil, p_bond", [("von_neumann", 0.55), ("von_neumann", 1.0),
                                             ("moore", 0.35)])
def test_a_lattice_past_the_single_call_size_is_labelled_right_through_the_backend(
        stencil, p_bond):
    # 220^2 sites: past _WHOLE_WORK site-offsets, so split over the threads (when there
    # are several) unpatched
    L, spec = _torus((220, 220), 0.9, p_bond, 11, stencil)
    labels, wraps = bond_graph_windings(spec)
    comp = L.connected_components(backend=B)
    np.testing.assert_array_equal(comp.labels, labels)
    assert comp.sizes.tolist() == np.bincount(labels.reshape(-1))[1:].tolist()
    res = L.spanning_clusters((0, 1), backend=B)
    np.testing.assert_array_equal(res.components.labels, labels)
    for a in (0, 1):
        assert set(res.clusters[a].tolist()) == wraps[a]


def test_more_than_four_wrapped_axes_are_refused_by_the_kernel_and_answered_by_the_backend():
    from tests.support.oracles import winding_oracle

    mask = np.random.default_rng(6).random((2, 3, 2, 2, 3)) < 0.7
    L = cat.Lattice(shape=mask.shape, periodic=True, mask=mask)
    g = L.geometry
    with pytest.raises(ValueError, match="at most 4 axes"):
        label_windings(g.shape_arr, g.periodic_arr, g.offsets, g.open_flat,
                       *g.bond_args()[:3], range(5))
    labels, wraps = winding_oracle(mask.shape, (True,) * 5, "von_neumann", mask)
    res = L.spanning_clusters(range(5), backend=B)
    np.testing.assert_array_equal(res.components.labels, labels)
    assert all(set(res.clusters[a].tolist()) == wraps[a] for a in range(5))
    four = L.spanning_clusters(range(4), backend=B)
    assert all(set(four.clusters[a].tolist()) == wraps[a] for a in range(4))


def test_five_wrapped_axes_with_bonds_single_and_batched():
    rng = np.random.default_rng(12)
    shape = (2, 3, 2, 2, 3)
    L0 = cat.Lattice(shape=shape, periodic=True)
    bonds = rng.random((5,) + shape) < 0.7
    L = L0.with_bonds(bonds)
    stack = rng.random((3,) + shape) < 0.8
    spans = cat.get_engine().run("batched.spanning_clusters", L, stack, axes=range(5),
                                 backend=B)
    for b in range(3):
        spec = {"shape": shape, "periodic": (True,) * 5, "stencil": "von_neumann",
                "mask": stack[b], "bonds": bonds}
        labels, wraps = bond_graph_windings(spec)
        for res in (spans[b], L.with_mask(stack[b]).spanning_clusters(range(5), backend=B)):
            np.testing.assert_array_equal(res.components.labels, labels)
            assert all(set(res.clusters[a].tolist()) == wraps[a] for a in range(5))
