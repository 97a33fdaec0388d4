"""``transport`` on the cuda backend (``kernels.cuda.transport``: the CPU twin's
hierarchy, the conjugate gradients on the device): against the bond-by-bond SciPy
oracle of ``tests/lattice/test_transport.py`` over hypothesis networks, the closed form
of a uniform block, the reduction's counts, the iteration limit, and the CPU twin's
iterates step for step through several levels, in the simulator pass on tiny systems
(the simulator starts a Python thread for every launched thread)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings

import catalytic as cat
from catalytic.kernels.cpu import transport as CPU
from catalytic.kernels.cuda import transport as GPU
# no call may fall back to a CPU backend (an autouse fixture)
from tests.backends.cuda_backend.test_label_cuda import no_fallback  # noqa: F401
from tests.lattice.test_transport import _close, _oracle, networks
from tests.support.strategies import make

sim = pytest.mark.sim
TOL = 1e-12


@sim
@given(case=networks())
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
def test_cuda_solves_the_assembled_network(case):
    """Potentials, the conductance and the reduction's counts (up to 60 sites: the
    coarsest level at once, one step)."""
    if case is None:
        return
    spec, high, low, rule, _ = case
    L = make(spec)
    want_phi, want_G = _oracle(L, high, low, rule)
    ref = L.transport(high, low, conductance=rule, backend="numpy")
    t = L.transport(high, low, conductance=rule, backend="cuda", tol=TOL)
    scale = max(1.0, float(np.nanmax(ref.currents, initial=0)))
    np.testing.assert_allclose(t.potential, want_phi, rtol=1e-7, atol=1e-8)
    assert _close(t.conductance, want_G, scale)
    assert t.residual <= TOL
    assert (t.isolated, t.one_sided) == (ref.isolated, ref.one_sided)
    np.testing.assert_allclose(t.currents, ref.currents, rtol=1e-7, atol=1e-8 * scale)


@sim
def test_a_uniform_block_through_several_levels(monkeypatch):
    """A 6 x 5 block of unit resistors between its short faces conducts 5/5 = 1; with
    the coarsest level at 4 sites the W-cycle runs through three levels."""
    monkeypatch.setattr(CPU, "COARSEST", 4)
    L = cat.Lattice(shape=(6, 5))
    t = L.transport(L.face(0, "low"), L.face(0, "high"), backend="cuda", tol=1e-10)
    assert t.iterations > 1 and t.residual <= 1e-10
    assert abs(t.conductance - 5 / 5) <= 1e-9
    np.testing.assert_allclose(t.potential, np.repeat(np.linspace(1, 0, 6)[:, None], 5, 1),
                               atol=1e-9)


@sim
def test_components_off_the_electrodes_and_no_path():
    mask = np.zeros((5, 6), bool)
    mask[:4, :3] = True
    mask[:3, 4:] = True
    mask[4, 4:] = True
    L = cat.Lattice(shape=(5, 6), mask=mask)
    t = L.transport(L.face(1, "low"), (0, 2), backend="cuda")
    ref = L.transport(L.face(1, "low"), (0, 2), backend="numpy")
    assert (t.isolated, t.one_sided) == (8, 0)
    np.testing.assert_allclose(t.potential, ref.potential, atol=1e-9)
    apart = L.transport(L.face(1, "low"), L.face(1, "high"), backend="cuda")
    assert apart.conductance == 0.0 and apart.iterations == 0 and apart.one_sided == 20


def _system(nx, seed=0):
    """A ``nx`` x ``nx`` grid of random conductances held at 1 along its first row: the
    matrix and the right-hand side."""
    rng = np.random.default_rng(seed)
    n = nx * nx
    idx = np.arange(n).reshape(nx, nx)
    i = np.concatenate([idx[:-1].ravel(), idx[:, :-1].ravel()])
    j = np.concatenate([idx[1:].ravel(), idx[:, 1:].ravel()])
    s = rng.uniform(0.1, 1.0, i.size)
    W = sp.coo_array((np.r_[s, s], (np.r_[i, j], np.r_[j, i])), shape=(n, n)).tocsr()
    d = np.asarray(W.sum(axis=1)).ravel()
    d[idx[0]] += 1.0
    b = np.zeros(n)
    b[idx[0]] = 1.0
    return (sp.diags_array(d) - W).tocsr(), b


@sim
def test_the_device_iteration_is_the_cpu_twin_s_step_for_step():
    """Three steps through three levels (coarsest 8 sites): the same iterate and
    residual as :func:`catalytic.kernels.cpu.transport.solve`, within rounding."""
    A, b = _system(8)
    h = CPU.hierarchy(A, coarsest=8)
    assert len(h.levels) == 3 and h.inverse is not None
    x, its, res = GPU.solve(GPU.upload(h), b, 1e-30, 3)
    want, want_its, want_res = CPU.solve(h, b, 1e-30, 3)
    assert its == want_its == 3
    np.testing.assert_allclose(x, want, rtol=1e-11, atol=1e-13)
    assert abs(res - want_res) <= 1e-9 * want_res
    assert 0 < res < 0.1  # three steps gained more than a digit


@sim
def test_the_iteration_limit_is_an_error_with_its_residual(monkeypatch):
    monkeypatch.setattr(CPU, "COARSEST", 4)
    L = cat.Lattice(shape=(6, 5))
    with pytest.raises(cat.ConvergenceError, match="relative residual") as err:
        L.transport(L.face(0, "low"), L.face(0, "high"), maxiter=1, tol=1e-14,
                    backend="cuda")
    assert err.value.iterations == 1 and err.value.residual > 1e-14


@sim
def test_the_host_function_docstring_example():
    A = sp.csr_array(np.array([[2.0, -1.0], [-1.0, 2.0]]))
    x, its, res = GPU.solve(GPU.upload(GPU.hierarchy(A)), np.array([1.0, 0.0]), 1e-12, 10)
    assert np.round(x * 3, 12).tolist() == [2.0, 1.0]
    assert its == 1 and res <= 1e-12
    # a zero right-hand side needs no step
    x, its, res = GPU.solve(GPU.upload(GPU.hierarchy(A)), np.zeros(2), 1e-12, 10)
    assert its == 0 and res == 0.0 and not x.any()
    with pytest.raises(ValueError, match="shape"):
        GPU.solve(GPU.upload(GPU.hierarchy(A)), np.zeros(3), 1e-12, 10)


@pytest.mark.parametrize("shape, stencil, p", [
    ((64, 64), "von_neumann", 1.0), ((64, 64), "von_neumann", 0.62),
    ((64, 64), "moore", 0.45), ((16, 16, 16), "von_neumann", 1.0),
    ((16, 16, 16), "moore", 1.0), ((16, 16, 16), "von_neumann", 0.35)])
def test_the_device_bytes_of_a_solve_are_within_what_the_backend_asks_for(shape, stencil,
                                                                          p):
    """:func:`device_bytes` of the real hierarchy, against what the registry makes room
    for before the call (``_transport_need``, per site of the lattice); on the host,
    no device needed."""
    from catalytic.backends import _transport as T
    from catalytic.backends.cuda_backend.implementations import _transport_need

    rng = np.random.default_rng(3)
    L = cat.Lattice(shape=shape, stencil=stencil, mask=rng.random(shape) < p)
    g = L.geometry
    far, inside = T.far_ends(g)
    sigma = T.bond_conductances(g, "unit", (far, inside))
    hi = np.flatnonzero(L.face(0, "low").reshape(-1) & g.mask.reshape(-1))
    lo = np.flatnonzero(L.face(0, "high").reshape(-1) & g.mask.reshape(-1))
    red = T.reduce(g, T.conducting_labels(g, sigma, far), hi, lo)
    if p > 0.5:
        assert red.joined
    A, _, _ = T.assemble(g, sigma, red, far)
    h = CPU.hierarchy(A, coarsest=16)
    labelling = 24 * g.n_points
    assert GPU.device_bytes(h) + labelling <= _transport_need(L)
    assert GPU.device_bytes(h) >= sum(lv.data.nbytes for lv in h.levels)
