"""Connected components (``kernels/cpu/components.py``) against NetworkX and
``scipy.ndimage.label``; the single call against the windowed labelling.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.ndimage as ndi

from catalytic.kernels.cpu import _budget, components
from tests.support.graph_cases import ASYM, CASES, asym_ids, canonical_labels, ids
from tests.support.oracles import moore, von_neumann

#: every test on one thread and on all of Numba's threads (tests/kernels/cpu/conftest.py)
pytestmark = pytest.mark.usefixtures("threads")


# -- connected components ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES + ASYM, ids=ids + asym_ids)
def test_connected_components_match_networkx(case):
    labels, count = components.connected_components(*case.args)
    comps = list(nx.connected_components(case.graph()))
    assert count == len(comps)
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, canonical_labels(case, comps))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["vn", "moore"])
def test_connected_components_match_ndimage(d, kind):
    rng = np.random.default_rng(d * 10 + len(kind))
    shape = {1: (301,), 2: (67, 45), 3: (17, 13, 11), 4: (7, 6, 5, 9)}[d]
    offs = von_neumann(d) if kind == "vn" else moore(d)
    structure = ndi.generate_binary_structure(d, 1 if kind == "vn" else d)
    for p in (0.3, 0.55, 0.8, 1.0):
        mask = rng.random(shape) < p
        labels, count = components.connected_components(np.array(shape), np.zeros(d, np.uint8),
                                                        offs, mask.reshape(-1).astype(np.uint8),
                                                        False)
        ref, ref_count = ndi.label(mask, structure=structure)
        assert count == ref_count
        np.testing.assert_array_equal(labels, ref.reshape(-1))


def test_connected_components_percolation_lattice():
    rng = np.random.default_rng(3)
    mask = rng.random((300, 257)) < 0.6
    labels, count = components.connected_components(np.array(mask.shape), np.zeros(2, np.uint8),
                                                    von_neumann(2),
                                                    mask.reshape(-1).view(np.uint8), False)
    ref, ref_count = ndi.label(mask)
    assert count == ref_count
    np.testing.assert_array_equal(labels, ref.reshape(-1))


@pytest.mark.parametrize("shape", [(1,), (7,), (8, 8), (64, 64), (5, 1), (9, 6, 7)])
@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("kind", ["vn", "moore"])
def test_connected_components_single_call_matches_windows(monkeypatch, shape, periodic,
                                                         kind):
    """Small lattices take the single-call labelling; with a tiny budget the same
    lattice goes through the windowed kernels: same labels, count and sizes."""
    d = len(shape)
    offs = von_neumann(d) if kind == "vn" else moore(d)
    per = np.full(d, periodic, np.uint8)
    rng = np.random.default_rng(sum(shape))
    for p in (0.0, 0.4, 0.6, 1.0):
        mask = (rng.random(shape) < p).reshape(-1).astype(np.uint8)
        for open_ in (mask, np.zeros(0, np.uint8)):
            args = (np.array(shape), per, offs, open_, False)
            whole = components.connected_components(*args, sizes=True)
            monkeypatch.setattr(_budget, "_BUDGET", 7)
            windows = components.connected_components(*args, sizes=True)
            monkeypatch.undo()
            assert whole[1] == windows[1]
            np.testing.assert_array_equal(whole[0], windows[0])
            np.testing.assert_array_equal(whole[2], windows[2])
            assert whole[0].dtype == np.int32 and whole[2].dtype == np.int64
            ref = np.bincount(whole[0], minlength=whole[1] + 1)[1:]
            np.testing.assert_array_equal(whole[2], ref)
            assert components.connected_components(*args)[1] == whole[1]
