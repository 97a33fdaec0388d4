"""``Lattice.transport``, the lattice as a resistor network: closed forms (a uniform
block, layers in series and in parallel, a single path, two sites of the harmonic-mean
rule), SciPy's ``spsolve`` on a matrix assembled here bond by bond (an independent
assembly) over hypothesis lattices, current conservation, the reduction to the
components joining both electrodes, the multigrid's levels on odd and periodic axes,
and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import spsolve

import catalytic as cat
from catalytic.kernels.cpu import transport as K
from tests.support.strategies import lattice_specs, make

BACKENDS = ["numpy", "numba-cpu"]
TOL = 1e-12


def _faces(L, axis=-1):
    return L.face(axis, "low"), L.face(axis, "high")


def _oracle(L, high, low, rule):
    """The potential and conductance from a matrix assembled here: every forward bond
    of every site, its conductance by ``rule``, the far end by coordinates; the
    Laplacian of the free sites of the components joining both electrodes, by
    ``spsolve``; NaN off every electrode's component."""
    g = L.geometry
    n = g.n_points
    mask = np.ones(n, bool) if g.mask is None else g.mask.reshape(-1)
    bonds = g.bond_mask().reshape(len(g.bond_offsets), n)
    w = None if g.weights is None else g.weights.reshape(-1)
    edges = []
    for s, off in enumerate(g.bond_offsets):
        for i in range(n):
            x = np.array(np.unravel_index(i, g.shape)) + off
            ok = True
            for a in range(g.dimensions):
                if g.periodic[a]:
                    x[a] %= g.shape[a]
                elif not 0 <= x[a] < g.shape[a]:
                    ok = False
            if not ok:
                continue
            j = int(np.ravel_multi_index(tuple(x), g.shape))
            if not (mask[i] and mask[j] and bonds[s, i]) or i == j:
                continue
            if rule == "bonds":
                c = g.bond_weights[s * n + i]
            elif rule == "sites":
                c = 2 * w[i] * w[j] / (w[i] + w[j]) if w[i] + w[j] > 0 else 0.0
            else:
                c = 1.0
            if c > 0:
                edges.append((i, j, c))
    # components by union-find
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j, _ in edges:
        parent[find(i)] = find(j)
    hi, lo = set(high.tolist()), set(low.tolist())
    roots_hi = {find(i) for i in hi}
    roots_lo = {find(i) for i in lo}
    phi = np.full(n, np.nan)
    free = []
    for i in range(n):
        if not mask[i]:
            continue
        r = find(i)
        if i in hi:
            phi[i] = 1.0
        elif i in lo:
            phi[i] = 0.0
        elif r in roots_hi and r in roots_lo:
            free.append(i)
        elif r in roots_hi:
            phi[i] = 1.0
        elif r in roots_lo:
            phi[i] = 0.0
    if free:
        pos = {v: k for k, v in enumerate(free)}
        A = sp.lil_matrix((len(free), len(free)))
        b = np.zeros(len(free))
        for i, j, c in edges:
            for u, v in ((i, j), (j, i)):
                if u in pos:
                    A[pos[u], pos[u]] += c
                    if v in pos:
                        A[pos[u], pos[v]] -= c
                    else:
                        b[pos[u]] += c * phi[v]
        phi[free] = np.atleast_1d(spsolve(A.tocsc(), b))
    joined = bool(roots_hi & roots_lo)
    G = 0.0
    if joined:
        for i, j, c in edges:
            if i in hi and j not in hi:
                G += c * (phi[i] - phi[j])
            elif j in hi and i not in hi:
                G += c * (phi[j] - phi[i])
    return phi.reshape(g.shape), G


def _close(a, b, scale=1.0):
    return math.isclose(a, b, rel_tol=1e-8, abs_tol=1e-9 * scale)


# -- closed forms -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, periodic", [((3, 4), False), ((5, 4, 6), False),
                                             ((6, 9), (True, False)), ((40, 50), False)])
def test_a_uniform_block_conducts_its_cross_section_over_its_length(backend, shape,
                                                                    periodic):
    L = cat.Lattice(shape=shape, periodic=periodic)
    t = L.transport(*_faces(L), backend=backend, tol=TOL)
    n = shape[-1]
    area = math.prod(shape[:-1])
    assert _close(t.conductance, area / (n - 1))
    line = np.linspace(1.0, 0.0, n)
    np.testing.assert_allclose(t.potential, np.broadcast_to(line, shape), atol=1e-9)
    assert t.isolated == 0 and t.one_sided == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_layers_in_series_and_in_parallel(backend):
    """Bond conductances varying along the current (series: resistances add) and
    across it (parallel: conductances add)."""
    rows, n = 7, 9
    L0 = cat.Lattice(shape=(rows, n))
    rng = np.random.default_rng(4)
    along = rng.uniform(0.5, 3.0, n)  # the conductance of the bonds leaving column x
    bw = np.ones((2, rows, n))
    bw[1] = along[None, :]
    L = cat.Lattice(shape=(rows, n), bond_weights=bw)
    t = L.transport(*_faces(L0), backend=backend, tol=TOL)
    assert _close(t.conductance, rows / np.sum(1.0 / along[:-1]))
    across = rng.uniform(0.5, 3.0, rows)
    bw = np.zeros((2, rows, n))  # no current between rows: parallel chains
    bw[1] = across[:, None]
    L = cat.Lattice(shape=(rows, n), bond_weights=bw)
    t = L.transport(*_faces(L0), backend=backend, tol=TOL)
    assert _close(t.conductance, across.sum() / (n - 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_single_path_through_a_maze(backend):
    """A snake of open sites: resistors in series, conductance 1 / sum(1 / sigma)."""
    mask = np.zeros((7, 7), bool)
    mask[0::2, :] = True
    for r in range(1, 7, 2):
        mask[r, 6 if r % 4 == 1 else 0] = True
    rng = np.random.default_rng(2)
    bw = rng.uniform(0.2, 5.0, (2, 7, 7))
    L = cat.Lattice(shape=(7, 7), mask=mask, bond_weights=bw)
    path = L.find_shortest_path(0, 48).path
    G = 0.0
    resist = 0.0
    for u, v in zip(path[:-1], path[1:]):
        a, b = min(u, v), max(u, v)
        s = 1 if b - a == 1 else 0
        resist += 1.0 / bw.reshape(2, -1)[s, a]
    G = 1.0 / resist
    t = L.transport(0, 48, backend=backend, tol=TOL)
    assert _close(t.conductance, G)
    # every bond of the path carries the same current
    cur = np.abs(t.currents.reshape(2, -1))
    assert np.allclose(cur[cur > 1e-12], G)


@pytest.mark.parametrize("backend", BACKENDS)
def test_site_conductivities_meet_by_the_harmonic_mean(backend):
    L = cat.Lattice(shape=(1, 2), weights=np.array([[2.0, 6.0]]))
    t = L.transport(0, 1, backend=backend)
    assert _close(t.conductance, 2 * 2.0 * 6.0 / 8.0)
    assert L.transport(0, 1, conductance="unit", backend=backend).conductance == 1.0


# -- against an independent assembly ------------------------------------------------------


@st.composite
def networks(draw):
    spec = draw(lattice_specs(max_dim=3, max_sites=60, weights=True, bonds=True))
    L = make(spec)
    g = L.geometry
    open_ = g.open_sites()
    if len(open_) < 2:
        return None
    picks = draw(st.permutations(open_.tolist()))
    k = draw(st.integers(1, max(1, len(picks) // 3)))
    high = np.array(sorted(picks[:k]))
    low = np.array(sorted(picks[k:k + draw(st.integers(1, max(1, len(picks) - k)))]))
    rules = ["unit"] + (["sites"] if g.weights is not None else []) + (
        ["bonds"] if g.bond_weights is not None else [])
    return spec, high, low, draw(st.sampled_from(rules)), draw(st.sampled_from([4, None]))


@given(case=networks())
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
def test_every_backend_solves_the_assembled_network(monkeypatch, case):
    """Potentials, the conductance and the reduction's counts, on both backends; with
    ``coarsest`` 4 the multigrid takes every level down to a few sites (odd axes,
    periodic ones of 1 and 2 blocks)."""
    if case is None:
        return
    spec, high, low, rule, coarsest = case
    L = make(spec)
    want_phi, want_G = _oracle(L, high, low, rule)
    if coarsest is not None:
        monkeypatch.setattr(K, "COARSEST", coarsest)
    scale = max(1.0, float(np.nanmax(L.transport(high, low, conductance=rule,
                                                 backend="numpy").currents, initial=0)))
    for backend in BACKENDS:
        t = L.transport(high, low, conductance=rule, backend=backend, tol=TOL)
        np.testing.assert_allclose(t.potential, want_phi, rtol=1e-7, atol=1e-8,
                                   err_msg=backend)
        assert _close(t.conductance, want_G, scale), backend
        assert t.residual <= TOL


@pytest.mark.parametrize("shape, periodic, stencil", [
    ((33, 35), (True, False), "von_neumann"), ((9, 7, 11), (False, True, True), "moore"),
    ((5, 3, 4, 6), True, "von_neumann")], ids=["2d", "3d-moore", "4d-periodic"])
def test_many_levels_on_odd_and_periodic_axes_match_the_reference(shape, periodic, stencil):
    """Lattices over the multigrid's direct-solve size: levels of odd sizes, blocks
    round periodic axes, Moore's coarse stencils; bonds, bond weights and a mask."""
    rng = np.random.default_rng(len(shape))
    L0 = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil)
    kf = len(L0.bond_offsets)
    L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil,
                    mask=rng.random(shape) < 0.85, bonds=rng.random((kf,) + shape) < 0.8,
                    bond_weights=rng.uniform(0.1, 10.0, (kf,) + shape))
    assert L.geometry.n_points > K.COARSEST
    hi, lo = L.face(0, "low"), L.face(0, "high")
    if periodic is True:  # no faces on a torus: two sets of sites
        hi = np.zeros(L.geometry.n_points, bool)
        lo = hi.copy()
        hi[0:40:3] = True
        lo[200:300:7] = True
    want = L.transport(hi, lo, backend="numpy")
    got = L.transport(hi, lo, backend="numba-cpu", tol=TOL)
    assert got.iterations > 0 and want.conductance > 0
    np.testing.assert_allclose(got.potential, want.potential, rtol=1e-8, atol=1e-9)
    assert _close(got.conductance, want.conductance)
    np.testing.assert_allclose(got.currents, want.currents, rtol=1e-7, atol=1e-8)
    assert (got.isolated, got.one_sided) == (want.isolated, want.one_sided)


@given(case=networks())
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_current_is_conserved_at_every_site_off_the_electrodes(case):
    if case is None:
        return
    spec, high, low, rule, _ = case
    L = make(spec)
    g = L.geometry
    n = g.n_points
    for backend in BACKENDS:
        t = L.transport(high, low, conductance=rule, backend=backend, tol=TOL)
        kf = len(g.bond_offsets)
        cur = t.currents.reshape(kf, n)
        net = cur.sum(axis=0)
        for s, off in enumerate(g.bond_offsets):
            src = np.arange(n)
            x = np.stack(np.unravel_index(src, g.shape), axis=1) + off
            keep = np.ones(n, bool)
            for a in range(g.dimensions):
                if g.periodic[a]:
                    x[:, a] %= g.shape[a]
                else:
                    keep &= (x[:, a] >= 0) & (x[:, a] < g.shape[a])
            j = np.ravel_multi_index(tuple(x[keep].T), g.shape)
            np.subtract.at(net, j, cur[s][keep])
        off_electrodes = np.ones(n, bool)
        off_electrodes[high] = off_electrodes[low] = False
        scale = max(1.0, float(np.abs(cur).max(initial=0)))
        assert np.abs(net[off_electrodes]).max(initial=0) <= 1e-8 * scale
        # what leaves the high electrode arrives at the low one
        assert _close(net[high].sum(), -net[low].sum(), scale)
        assert _close(net[high].sum(), t.conductance, scale)


# -- the reduction ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_components_off_the_electrodes_are_left_out_and_said_so(backend):
    mask = np.zeros((5, 6), bool)
    mask[:4, :3] = True  # the left part: 12 sites
    mask[:3, 4:] = True  # the right part: 6 sites, apart from the left
    mask[4, 4:] = True  # an island of 2 sites, apart from both
    L = cat.Lattice(shape=(5, 6), mask=mask)
    t = L.transport(L.face(1, "low"), (0, 2), backend=backend)
    assert t.conductance > 0.0
    assert t.isolated == 8 and t.one_sided == 0
    assert np.isnan(t.potential[:, 3:]).all() and not np.isnan(t.potential[:4, :3]).any()
    assert not t.currents[:, :, 3:].any()
    # now each part touches one face only: nothing joins the electrodes
    apart = L.transport(L.face(1, "low"), L.face(1, "high"), backend=backend)
    assert apart.conductance == 0.0 and apart.iterations == 0
    assert apart.isolated == 0 and apart.one_sided == 20
    assert (apart.potential[:4, :3] == 1.0).all()
    assert (apart.potential[:3, 4:] == 0.0).all() and (apart.potential[4, 4:] == 0.0).all()
    assert not apart.currents.any()


def test_the_solve_that_stops_early_says_how_far_it_got():
    L = cat.Lattice(shape=(30, 30))
    with pytest.raises(cat.ConvergenceError, match="relative residual") as err:
        L.transport(*_faces(L), maxiter=1, tol=1e-14, backend="numba-cpu")
    assert err.value.iterations == 1 and err.value.residual > 1e-14
    import pickle

    back = pickle.loads(pickle.dumps(err.value))  # as a worker process sends it
    assert (back.residual, back.iterations, back.tol, str(back)) == (
        err.value.residual, 1, 1e-14, str(err.value))


# -- bad input ----------------------------------------------------------------------------


def test_bad_input_is_refused_before_any_work():
    L = cat.Lattice(shape=(4, 5), mask=np.eye(4, 5, dtype=bool) | True)
    hi, lo = _faces(L)
    with pytest.raises(ValueError, match="overlap"):
        L.transport(hi, hi | lo)
    with pytest.raises(ValueError, match="no open site"):
        L.transport(np.zeros((4, 5), bool), lo)
    with pytest.raises(ValueError, match="shape"):
        L.transport(np.ones(3, bool), lo)
    with pytest.raises(ValueError, match="conductance"):
        L.transport(hi, lo, conductance="ohms")
    with pytest.raises(ValueError, match="bond_weights"):
        L.transport(hi, lo, conductance="bonds")
    with pytest.raises(ValueError, match="weights"):
        L.transport(hi, lo, conductance="sites")
    for tol in (0, 1, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="tol"):
            L.transport(hi, lo, tol=tol)
    with pytest.raises(TypeError, match="tol"):
        L.transport(hi, lo, tol="small")
    with pytest.raises(ValueError, match="maxiter"):
        L.transport(hi, lo, maxiter=0)
    with pytest.raises(TypeError, match="maxiter"):
        L.transport(hi, lo, maxiter=2.5)
    with pytest.raises(IndexError):
        L.transport(20, lo)
    blocked = cat.Lattice(shape=(4, 5), mask=~np.eye(4, 5, dtype=bool))
    with pytest.raises(IndexError, match="blocked"):
        blocked.transport(0, 3)
    with pytest.raises(ValueError, match="axis"):
        L.face(2)
    with pytest.raises(ValueError, match="side"):
        L.face(0, "left")


def test_negative_or_nan_conductances_never_reach_the_solver():
    for bad in (-1.0, np.nan):
        bw = np.ones((2, 3, 3))
        bw[0, 1, 1] = bad
        with pytest.raises(ValueError):
            cat.Lattice(shape=(3, 3), bond_weights=bw)


def test_a_blocked_site_on_a_face_is_left_out_of_the_electrode():
    mask = np.ones((3, 4), bool)
    mask[1, 0] = False
    L = cat.Lattice(shape=(3, 4), mask=mask)
    a = L.transport(*_faces(L), backend="numpy")
    b = L.transport(np.array([0, 8]), L.face(1, "high"), backend="numpy")
    assert a.conductance == b.conductance


# -- built on it: conductivity, tortuosity, hitting probabilities --------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_effective_conductivity_of_uniform_and_layered_lattices(backend):
    for shape, axis in (((6, 7), 0), ((4, 5, 6), 2), ((3, 4, 5), -2)):
        L = cat.Lattice(shape=shape, periodic=tuple(a != axis % len(shape) for a in
                                                    range(len(shape))))
        assert _close(L.effective_conductivity(axis, backend=backend, tol=TOL), 1.0)
    # layers across axis 1: series, the harmonic mean of the layer conductances
    rng = np.random.default_rng(8)
    layer = rng.uniform(0.5, 4.0, 9)
    bw = np.ones((2, 5, 9))
    bw[1] = layer[None, :]
    L = cat.Lattice(shape=(5, 9), bond_weights=bw)
    want = 8 / np.sum(1.0 / layer[:-1])
    assert _close(L.effective_conductivity(1, backend=backend, tol=TOL), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tortuosity_by_poresspy_s_definition(backend):
    """Straight channels: tortuosity 1 and formation factor 1 / porosity; a channel that
    bends: longer paths, tortuosity above 1, and the effective porosity leaves out the
    dead pores and the islands."""
    m = np.zeros((9, 12), bool)
    m[::2] = True
    r = cat.Lattice(shape=(9, 12), mask=m).tortuosity(1, backend=backend, tol=TOL)
    assert _close(r.tortuosity, 1.0) and _close(r.formation_factor, 9 / 5)
    assert r.porosity == r.effective_porosity == 5 / 9
    # an S-bend from the left face to the right one, a dead end and an island
    m = np.zeros((7, 7), bool)
    m[1, :4] = m[1:6, 3] = m[5, 3:] = True
    m[3, 4:6] = True  # a dead end off the bend
    m[0, 6] = True  # an island on the right face
    r = cat.Lattice(shape=(7, 7), mask=m).tortuosity(1, backend=backend, tol=TOL)
    path = 4 + 4 + 3  # the sites of the S: 11 sites, 10 bonds in series
    d_eff = (1.0 / 10) * 6 / 7  # G (n - 1) / A, A = 49 / 7
    assert _close(r.effective_diffusivity, d_eff)
    assert r.effective_porosity == (path + 2) / 49  # the bend and its dead end
    assert _close(r.tortuosity, r.effective_porosity / d_eff)
    assert r.porosity == int(m.sum()) / 49
    with pytest.raises(ValueError, match="no open site.*infinite"):
        cat.Lattice(shape=(7, 7), mask=m).tortuosity(0, backend=backend)
    m[6, 0] = True  # now both faces of axis 0 have sites, but no cluster joins them
    with pytest.raises(ValueError, match="no cluster joins.*infinite"):
        cat.Lattice(shape=(7, 7), mask=m).tortuosity(0, backend=backend)
    with pytest.raises(ValueError, match="periodic"):
        cat.Lattice(shape=(7, 7), periodic=True).tortuosity(0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hitting_probabilities_are_harmonic_and_the_gambler_s_ruin(backend):
    h = cat.Lattice(shape=(11,)).hitting_probability(2, 9, backend=backend, tol=TOL)
    want = np.clip((9 - np.arange(11)) / 7, 0, 1)
    np.testing.assert_allclose(h, want, atol=1e-9)
    rng = np.random.default_rng(5)
    mask = rng.random((12, 13)) < 0.8
    bw = rng.uniform(0.2, 3.0, (2, 12, 13))
    L = cat.Lattice(shape=(12, 13), periodic=(True, False), mask=mask, bond_weights=bw)
    a, b = L.face(1, "low"), L.face(1, "high")
    h = L.hitting_probability(a, b, backend=backend, tol=TOL)
    t = L.transport(a, b, backend=backend, tol=TOL)
    # each site off a and b: the walk's next step averaged (the flows in and out agree)
    g = L.geometry
    inside = ~np.isnan(h) & ~a & ~b
    for i in np.flatnonzero(inside.reshape(-1)):
        src, nbr, e = g.displace(np.array([i]), bond_index=True)
        w = g.bond_weights[e]
        assert math.isclose(h.reshape(-1)[i], float(w @ h.reshape(-1)[nbr]) / w.sum(),
                            rel_tol=1e-8, abs_tol=1e-9)
    assert ((h >= -1e-12) | np.isnan(h)).all() and ((h <= 1 + 1e-12) | np.isnan(h)).all()
    np.testing.assert_array_equal(np.isnan(h), np.isnan(t.potential))
