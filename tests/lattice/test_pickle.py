"""Lattices pickle by geometry and seed, whatever engine they use (process pools, Dask)."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

import catalytic as cat


def _lattice(engine=None):
    rng = np.random.default_rng(5)
    mask = rng.random((7, 9)) >= 0.2
    mask[0, 0] = mask[-1, -1] = True
    weights = rng.uniform(0.5, 2.0, (7, 9))
    stencil = np.array([[1, 0], [-1, 0], [0, 1], [0, -1], [1, 1], [-1, -1]])
    return cat.Lattice(shape=(7, 9), periodic=(True, False), stencil=stencil, mask=mask,
                       weights=weights, seed=1234, aux_memory_size=333, enable_gpu=False,
                       engine=engine)


def _same_lattice(a, b):
    ga, gb = a.geometry, b.geometry
    assert ga.shape == gb.shape and ga.periodic == gb.periodic and ga.stencil == gb.stencil
    np.testing.assert_array_equal(ga.offsets, gb.offsets)
    np.testing.assert_array_equal(ga.mask, gb.mask)
    np.testing.assert_array_equal(ga.weights, gb.weights)
    assert (a.seed, a.enable_gpu, a.enable_smart_routing) == (b.seed, b.enable_gpu, b.enable_smart_routing)
    zeros = np.zeros(1000, np.uint8)
    np.testing.assert_array_equal(a.xor_transform(zeros), b.xor_transform(zeros))
    np.testing.assert_array_equal(a.distance_field(0), b.distance_field(0))


def test_pickle_round_trip_after_use():
    L = _lattice()
    L.find_shortest_path(0, L.n_points - 1)
    L.distance_field(0)
    L2 = pickle.loads(pickle.dumps(L))
    _same_lattice(L, L2)
    assert L2._engine is None and L2.engine is cat.get_engine()
    L3 = copy.deepcopy(L)
    _same_lattice(L, L3)


def test_pickle_with_its_own_engine():
    """Used to fail with "cannot pickle 'module' object"."""
    eng = cat.Engine(backend="numpy", disable_plugin_autoload=True)
    L = _lattice(engine=eng)
    blob = pickle.dumps(L)
    L2, L3 = pickle.loads(blob), pickle.loads(blob)
    _same_lattice(L, L2)
    assert L2.engine is not cat.get_engine()
    assert L2.engine.settings == eng.settings
    assert L2.engine is L3.engine  # one engine per distinct settings per process
    L2.distance_field(0)
    assert L2.last_decision.backend == "numpy" and L2.last_decision.forced


def _work(L):
    return L.distance_field(0), L.engine.settings.backend, L.xor_transform(np.arange(5))


def test_lattice_crosses_a_process_boundary():
    eng = cat.Engine(backend="numpy", disable_plugin_autoload=True)
    L = _lattice(engine=eng)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        dist, forced, enc = pool.submit(_work, L).result(timeout=120)
    np.testing.assert_array_equal(dist, L.distance_field(0))
    assert forced == "numpy"
    np.testing.assert_array_equal(enc, L.xor_transform(np.arange(5)))


@pytest.mark.parametrize("stencil", ["von_neumann", "moore"])
def test_named_stencils_stay_named(stencil):
    L = cat.Lattice(shape=(4, 5), stencil=stencil)
    assert pickle.loads(pickle.dumps(L)).stencil == stencil
