"""L.with_mask(mask): the same lattice with another mask, built without re-validating
the rest; every result equals a lattice built from scratch."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import catalytic as cat
from tests.support.backends import available_backends

CPU = [b for b in available_backends() if b in ("numpy", "numba-cpu")]


def _base():
    rng = np.random.default_rng(7)
    return cat.Lattice(shape=(9, 11), periodic=(True, False), stencil="moore",
                       weights=rng.uniform(0.5, 2, (9, 11)), seed=42, aux_memory_size=500,
                       enable_gpu=False)


@pytest.mark.parametrize("backend", CPU)
def test_with_mask_equals_a_lattice_built_from_scratch(backend):
    base = _base()
    mask = np.random.default_rng(1).random((9, 11)) < 0.7
    mask[0, 0] = True
    got = base.with_mask(mask)
    want = cat.Lattice(shape=(9, 11), periodic=(True, False), stencil="moore",
                       weights=base.weights, mask=mask, seed=42, aux_memory_size=500,
                       enable_gpu=False)
    assert got.shape == want.shape and got.periodic == want.periodic
    assert got.stencil == want.stencil and got.n_open == want.n_open
    assert got.enable_gpu is False and got.seed == 42
    np.testing.assert_array_equal(got.mask, mask)
    np.testing.assert_array_equal(got.weights, want.weights)
    z = np.zeros(500, np.uint8)
    np.testing.assert_array_equal(got.xor_transform(z, backend=backend),
                                  want.xor_transform(z, backend=backend))
    np.testing.assert_array_equal(got.distance_field(0, backend=backend),
                                  want.distance_field(0, backend=backend))
    a, b = got.connected_components(backend=backend), want.connected_components(backend=backend)
    np.testing.assert_array_equal(a.labels, b.labels)
    # pickles by definition like any lattice
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(got)).mask, mask)


def test_with_mask_leaves_the_original_alone_and_copies_the_mask():
    base = _base()
    mask = np.ones((9, 11), bool)
    mask[3, 3] = False
    L = base.with_mask(mask)
    mask[4, 4] = False  # the caller's array is copied
    assert L.n_open == 9 * 11 - 1 and base.mask is None and base.n_open == 9 * 11
    with pytest.raises(ValueError, match="read-only"):
        L.geometry.mask[0, 0] = False
    assert base.with_mask(None).n_open == 9 * 11


@pytest.mark.parametrize("mask, err", [(np.ones((9, 10), bool), ValueError),
                                       (np.ones((9, 11), np.int8), TypeError)])
def test_with_mask_checks_the_mask(mask, err):
    with pytest.raises(err, match="mask"):
        _base().with_mask(mask)
