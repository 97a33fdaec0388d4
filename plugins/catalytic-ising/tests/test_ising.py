"""catalytic-ising: loaded through the entry point, the same spins on every backend,
reproducible chains, clear refusals, and the physics against exact results (Onsager,
Yang) and limits that need no theory (infinite and zero temperature)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import catalytic as cat
import catalytic_ising as ci

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _cuda_ok() -> bool:
    ok, _ = cat.get_engine().backends().get("cuda", (False, ""))
    return ok


def _random_spins(L, seed=0):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(L.shape) < 0.5, 1, -1).astype(np.int8)


@pytest.mark.parametrize("module", ["catalytic_ising", "catalytic_ising.plugin"])
def test_docstring_examples(module):
    """The examples in the installed package's docstrings (doctest)."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and (result.attempted > 0 or module != "catalytic_ising")


def test_loaded_through_the_entry_point():
    eng = cat.get_engine()
    assert "ising" in eng.plugin_names()
    assert {"ising_sweep", "ising_observables"} <= set(eng.operations())
    assert set(eng.registry.implementations["ising_sweep"]) == {"numpy", "numba-cpu", "cuda"}


@st.composite
def ising_lattices(draw):
    d = draw(st.integers(1, 3))
    stencil = draw(st.sampled_from(["von_neumann", "moore"] if d > 1 else ["von_neumann"]))
    periodic = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    # a periodic axis gets an even length (the checkerboard needs it)
    shape = tuple(2 * draw(st.integers(1, 4)) if p else draw(st.integers(2, 7))
                  for p in periodic)
    mask = None
    if draw(st.booleans()):
        mask = np.random.default_rng(draw(st.integers(0, 99))).random(shape) < 0.8
    return cat.Lattice(shape=shape, periodic=periodic, stencil=stencil, mask=mask)


@settings(max_examples=30, deadline=None)
@given(L=ising_lattices(), seed=st.integers(0, 2**40), method=st.sampled_from(["metropolis", "heatbath"]),
       beta=st.floats(0.0, 1.5), field=st.sampled_from([0.0, 0.3, -1.0]))
def test_numpy_and_numba_cpu_give_the_same_spins(L, seed, method, beta, field):
    s0 = _random_spins(L, seed % 1000)
    kw = dict(beta=beta, sweeps=3, seed=seed, method=method, field=field)
    ref = L.run("ising_sweep", s0, backend="numpy", **kw)
    got = L.run("ising_sweep", s0, backend="numba-cpu", **kw)
    np.testing.assert_array_equal(got, ref)
    if L.geometry.mask is not None:
        assert (got[~L.geometry.mask] == 0).all()
    assert got.dtype == np.int8 and got.shape == L.shape


def test_thresholds_decide_as_the_uniform_does():
    """``bits < thresholds(p)`` is ``bits * 2**-53 < p``, in exact rational arithmetic,
    at the edges of every probability (0, 1, powers of two, table values, neighbours)."""
    from fractions import Fraction

    from catalytic_ising import kernels, plugin

    ps = [0.0, 1.0, 0.5, 0.25, 2.0 ** -53, 2.0 ** -54, 1.0 - 2.0 ** -53, 1 / 3, 0.1]
    ps += plugin.acceptance(0.44, 4, "metropolis", 0.3, 1.0).ravel().tolist()
    ps += plugin.acceptance(1.7, 6, "heatbath", -1.0, 0.5).ravel().tolist()
    ps += [np.nextafter(p, 2.0) for p in ps] + [np.nextafter(p, -1.0) for p in ps if p > 0]
    ps = [min(p, 1.0) for p in ps]
    thr = kernels.thresholds(np.array(ps))
    for p, t in zip(ps, thr.tolist()):
        for bits in {0, 1, t - 1, t, t + 1, 2**53 - 1}:
            if 0 <= bits < 2**53:
                assert (bits < t) == (Fraction(bits, 2**53) < Fraction(p)), (p, bits)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), step=st.integers(0, 2**63 - 1),
       i=st.integers(0, 2**40))
def test_the_row_kernels_hash_is_uniforms(seed, step, i):
    from catalytic_ising import kernels

    key = kernels._key(np.uint64(seed), np.uint64(step))
    bits = kernels._bits(np.uint64(key), np.uint64(i))  # key came back as a Python int
    assert 0 <= bits < 2**53
    assert bits * 2.0 ** -53 == kernels.uniform(np.uint64(seed), np.uint64(step), np.uint64(i))


@st.composite
def row_lattices(draw):
    """Von Neumann lattices for the row kernel: rows long enough to have an inside,
    periodic axes of length 2 (one neighbour reached twice), masks, the stencil's
    offsets in another order."""
    d = draw(st.integers(1, 3))
    periodic = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    top = {1: 40, 2: 24, 3: 12}[d]
    shape = tuple(2 * draw(st.integers(1, 3)) if p else draw(st.integers(1, 4))
                  for p in periodic[:-1])
    shape += (2 * draw(st.integers(1, top // 2)) if periodic[-1] else draw(st.integers(1, top)),)
    mask = None
    if draw(st.booleans()):
        mask = np.random.default_rng(draw(st.integers(0, 99))).random(shape) < 0.8
    stencil = "von_neumann"
    if draw(st.booleans()):
        off = cat.geometry.stencil_offsets("von_neumann", d)[1]
        stencil = off[np.random.default_rng(draw(st.integers(0, 99))).permutation(len(off))]
    return cat.Lattice(shape=shape, periodic=periodic, stencil=stencil, mask=mask)


@settings(max_examples=40, deadline=None)
@given(L=row_lattices(), seed=st.integers(0, 2**64 - 1),
       method=st.sampled_from(["metropolis", "heatbath"]), beta=st.floats(0.0, 1.5),
       field=st.sampled_from([0.0, 0.3, -1.0]), start=st.integers(0, 2**40))
def test_the_row_kernel_gives_the_reference_spins(L, seed, method, beta, field, start):
    from catalytic_ising import plugin

    assert plugin.row_geometry(L) is not None  # these lattices take the row kernel
    s0 = np.where(L.geometry.mask if L.geometry.mask is not None else True,
                  _random_spins(L, seed % 1000), 0)
    kw = dict(beta=beta, sweeps=3, seed=seed, start=start, method=method, field=field)
    np.testing.assert_array_equal(L.run("ising_sweep", s0, backend="numba-cpu", **kw),
                                  L.run("ising_sweep", s0, backend="numpy", **kw))


def test_other_stencils_take_the_general_kernel():
    from catalytic_ising import plugin

    general = [cat.Lattice(shape=(4, 6), periodic=True, stencil="moore"),
               cat.Lattice(shape=(2, 4, 2, 4), periodic=True),  # four axes
               cat.Lattice(shape=(4, 6), stencil=[[0, 1], [0, -1]]),  # one axis' steps
               cat.Lattice(shape=(9,), stencil=[[2], [-2]])]
    for L in general:
        assert plugin.row_geometry(L) is None
        s0 = _random_spins(L, 3)
        for seed in (8, 2**64 - 5):  # a seed is a uint64, also after a small one
            kw = dict(beta=0.6, sweeps=3, seed=seed, field=0.2)
            np.testing.assert_array_equal(L.run("ising_sweep", s0, backend="numba-cpu", **kw),
                                          L.run("ising_sweep", s0, backend="numpy", **kw))


def test_a_chain_in_pieces_equals_one_call_and_inputs_stay():
    L = cat.Lattice(shape=(12, 10), periodic=True)
    s0 = _random_spins(L, 4)
    keep = s0.copy()
    whole = L.run("ising_sweep", s0, beta=0.4, sweeps=9, seed=11)
    part = L.run("ising_sweep", s0, beta=0.4, sweeps=4, seed=11)
    part = L.run("ising_sweep", part, beta=0.4, sweeps=5, seed=11, start=4)
    np.testing.assert_array_equal(whole, part)
    np.testing.assert_array_equal(s0, keep)  # the caller's spins are not touched
    other = L.run("ising_sweep", s0, beta=0.4, sweeps=9, seed=12)
    assert not np.array_equal(whole, other)  # another seed, another chain


def test_refusals_are_clear():
    L = cat.Lattice(shape=(6, 6), periodic=True)
    up = np.ones((6, 6), np.int8)
    with pytest.raises(ValueError, match="no checkerboard"):
        cat.Lattice(shape=(5, 6), periodic=True).run("ising_sweep", np.ones((5, 6)), beta=1)
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        L.run("ising_sweep", up * 2, beta=1.0)
    with pytest.raises(ValueError, match=r"\+1 or -1, got 257 at site 7"):
        wide = up.astype(np.int16)
        wide[1, 1] = 257  # 1 once cast to int8: checked before the cast
        L.run("ising_sweep", wide, beta=1.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        L.run("ising_sweep", up, beta=-1.0)
    with pytest.raises(ValueError, match="method"):
        L.run("ising_sweep", up, beta=1.0, method="glauber")
    with pytest.raises(ValueError, match="shape"):
        L.run("ising_sweep", np.ones((6, 5), np.int8), beta=1.0)
    with pytest.raises(TypeError, match="integers"):
        L.run("ising_sweep", up.astype(float), beta=1.0)


def test_energy_of_known_configurations():
    L = cat.Lattice(shape=(8, 8), periodic=True)
    up = np.ones(L.shape, np.int8)
    neel = np.where(np.indices(L.shape).sum(axis=0) % 2 == 0, 1, -1).astype(np.int8)
    obs = L.run("ising_observables", np.stack([up, neel, -up]))
    np.testing.assert_allclose(obs["energy"], [-2.0, 2.0, -2.0])
    np.testing.assert_allclose(obs["magnetisation"], [1.0, 0.0, -1.0])
    # a mask: only bonds between open sites count, against an explicit count
    m = np.random.default_rng(3).random((8, 8)) < 0.7
    Lm = L.with_mask(m)
    s = np.where(m, _random_spins(L, 5), 0).astype(np.int8)
    bonds = sum(int(s.flat[i]) * int(s.flat[j]) for i in np.flatnonzero(m)
                for j in Lm.geometry.get_neighbors(i) if j > i)
    got = Lm.run("ising_observables", s, field=0.5)
    assert got["energy"][0] == pytest.approx((-bonds - 0.5 * s.sum()) / m.sum())


def _measure(L, T, sweeps, *, burn=300, method="metropolis", seed=1):
    s = np.ones(L.shape, np.int8)
    s = L.run("ising_sweep", s, beta=1 / T, sweeps=burn, seed=seed, method=method)
    series = []
    for t in range(sweeps):
        s = L.run("ising_sweep", s, beta=1 / T, sweeps=1, seed=seed, start=burn + t,
                  method=method)
        series.append(s)
    return L.run("ising_observables", np.stack(series), beta=1 / T)


@pytest.mark.parametrize("method", ["metropolis", "heatbath"])
def test_square_lattice_against_onsager(method):
    """32 x 32 periodic, a fixed seed: |m| and the energy at T = 2.0, and the energy at
    T_c, within tolerances far below the size of any error in the update rule (a factor
    2 in the coupling moves the energy by ~1). At T_c the tolerance holds the finite-size
    shift and the statistics of 2000 sweeps at critical slowing down: over seeds 1-6 and
    both methods the means measured here were -1.432 +- 0.016 (min -1.461, max -1.400)."""
    L = cat.Lattice(shape=(32, 32), periodic=True)
    low = _measure(L, 2.0, 400, method=method)
    assert low["abs_magnetisation_mean"] == pytest.approx(ci.onsager_magnetisation(2.0), abs=0.01)
    assert low["energy_mean"] == pytest.approx(ci.onsager_energy(2.0), abs=0.01)
    crit = _measure(L, ci.T_C, 2000, burn=1000, method=method)
    assert crit["energy_mean"] == pytest.approx(-math.sqrt(2), abs=0.05)


def test_limits_need_no_theory():
    L = cat.Lattice(shape=(40, 40), periodic=True)
    hot = L.run("ising_sweep", np.ones(L.shape, np.int8), beta=0.0, sweeps=5, seed=2,
                method="heatbath")
    assert abs(hot.mean()) < 4 / math.sqrt(hot.size)  # coin flips
    cold = L.run("ising_sweep", np.ones(L.shape, np.int8), beta=5.0, sweeps=50, seed=2)
    assert cold.min() == 1  # no flip has probability above e**-40
    cube = cat.Lattice(shape=(8, 8, 8), periodic=True)
    ordered = _measure(cube, 3.0, 50, burn=100)  # simple cubic: T_c ~ 4.51
    disordered = _measure(cube, 8.0, 50, burn=100)
    assert ordered["abs_magnetisation_mean"] > 0.9 > 0.3 > disordered["abs_magnetisation_mean"]
    assert ordered["binder"] == pytest.approx(2 / 3, abs=0.02)


def test_router_sends_big_lattices_to_compiled_code():
    L = cat.Lattice(shape=(256, 256), periodic=True)
    d = cat.get_engine().explain("ising_sweep", L, np.ones(L.shape, np.int8), beta=0.4,
                                 sweeps=100)
    assert d.backend in ("numba-cpu", "cuda")


@pytest.mark.skipif(not (SIM or _cuda_ok()), reason="runs the CUDA kernel: set "
                    "NUMBA_ENABLE_CUDASIM=1, or run on a GPU")
@pytest.mark.parametrize("method", ["metropolis", "heatbath"])
@pytest.mark.parametrize("case", ["rows 2-D", "rows 3-D", "general"])
def test_cuda_gives_the_numba_cpu_spins(method, case):
    from catalytic_ising import plugin

    L = {"rows 2-D": cat.Lattice(shape=(6, 8), periodic=(True, False),
                                 mask=np.arange(48).reshape(6, 8) % 7 != 2),  # 48 threads
         "rows 3-D": cat.Lattice(shape=(4, 3, 6), periodic=(True, False, True)),
         "general": cat.Lattice(shape=(4, 6), periodic=True, stencil="moore")}[case]
    assert (plugin.row_geometry(L) is None) == (case == "general")
    s0 = _random_spins(L, 9)
    if L.geometry.mask is not None:
        s0 = np.where(L.geometry.mask, s0, 0)
    kw = dict(beta=0.5, sweeps=3, seed=77, method=method, field=0.2)
    got = L.run("ising_sweep", s0, backend="cuda", **kw)
    assert L.last_decision.backend == "cuda"
    np.testing.assert_array_equal(got, L.run("ising_sweep", s0, backend="numba-cpu", **kw))


def _nvvm() -> bool:
    if SIM:
        return False
    try:
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _nvvm(), reason="compiles for a GPU: needs NVVM (pip install "
                    "\"catalytic[cuda]\"), and not the simulator")
@pytest.mark.parametrize("kernel", ["row_pass", "colour_pass"])
def test_cuda_kernels_compile_for_a_gpu(kernel, monkeypatch):
    """Both kernels type and lower to sm_90 PTX with the argument types the host
    passes, also on a machine without a GPU."""
    import types

    import numba.cuda.dispatcher as dispatcher
    from numba import cuda
    from numba import types as T

    # device functions compile for "the current device": say it is an H100
    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: types.SimpleNamespace(compute_capability=(9, 0)))
    from catalytic_ising import cuda_kernels

    a = lambda t: t[::1]  # noqa: E731
    args = {"row_pass": (a(T.int8), a(T.uint64), a(T.uint64), a(T.uint8), T.uint64,
                         T.boolean, a(T.int64), T.int64, T.boolean, T.uint64, T.uint64,
                         T.uint64, T.uint64),
            "colour_pass": (a(T.int8), a(T.uint8), T.uint8, a(T.int64), a(T.int64),
                            a(T.uint8), T.int64[:, ::1], a(T.uint8), T.boolean,
                            T.float64[:, ::1], T.boolean, T.uint64, T.uint64)}[kernel]
    ptx, _ = cuda.compile_ptx(getattr(cuda_kernels, kernel).py_func, args, cc=(9, 0))
    assert ".target sm_90" in ptx and ".local" not in ptx
