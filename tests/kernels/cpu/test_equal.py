"""The site-by-site labelling of equal values (``kernels.cpu.equal``): against the
definition (NetworkX) on every kind of lattice without bonds, against cc3d on the
stencils with a decision tree, the trees against the general scan, split over threads
and kernel calls, and the generated trees against their generator."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.backends.numba_cpu import _background_key
from catalytic.kernels.cpu import _budget, _equal_trees, _treegen
from catalytic.kernels.cpu import equal as E
from tests.lattice.test_label import (SPLIT_CASES, assert_components, canonical, oracle,
                                      run_args, valued_specs)
from tests.support.kernel_calls import count_kernel_calls
from tests.support.strategies import make
from tests.support.threads import threads  # noqa: F401 (a fixture)


def equal_args(L, values, background=0, by_key=False):
    """``label_equal`` arguments for ``values`` (delta 0) on lattice ``L``; ``by_key``:
    the labelled sites as the background's key where the backend gives them so."""
    args = run_args(L, values, background, 0)[:5]
    if by_key:
        args = (*args[:4], _background_key(L.geometry, args[3], args[4]))
    return args


def test_the_generated_trees_are_what_the_generator_writes():
    path = pathlib.Path(_equal_trees.__file__)
    assert path.read_text() == _treegen.source(), (
        "run `python -m catalytic.kernels.cpu._treegen`")


@pytest.mark.parametrize("name, d, most", _treegen.STENCILS)
def test_each_tree_is_found_for_its_stencil(name, d, most):
    offs = E.plan(_treegen.stencil(d, most).tobytes(), d)[0]
    assert _equal_trees.TREES[tuple(map(tuple, offs.tolist()))] == name


@given(case=valued_specs(bonds=False), small_budget=st.booleans(), by_key=st.booleans())
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_equal_values_label_as_the_graph_does(monkeypatch, threads, case, small_budget,
                                              by_key):
    """Every lattice without bonds (custom stencils, periodic axes, masks); the values
    compared for equality whatever ``delta`` the case drew; kernel calls of a few rows
    half the time; the labelled sites as an array or as the background's key."""
    spec, values, background, _ = case
    L = make(spec)
    if small_budget:
        monkeypatch.setattr(_budget, "_BUDGET", 40)
    want = oracle(spec, values, background, 0)
    assert_components(E.label_equal(*equal_args(L, values, background, by_key)), want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64, np.float32, bool])
def test_the_background_key_stands_for_the_sites_only_without_a_mask(dtype):
    """Without a mask the unlabelled sites are exactly those holding the background's
    key (-0.0 among them for a background of 0.0); with a mask, or with no site of the
    background, the site array stays."""
    values = np.array([[0, 1, 2, 0], [1, 0, 0, 1]]).astype(dtype)
    if dtype == np.float32:
        values[1, 1] = -0.0
    L = cat.Lattice(shape=values.shape, stencil="moore")
    keys, sites = run_args(L, values, 0, 0)[3:5]
    bg = _background_key(L.geometry, keys, sites)
    assert np.isscalar(bg) and bg.dtype == keys.dtype
    np.testing.assert_array_equal(keys != bg, sites != 0)
    labels = E.label_equal(*equal_args(L, values, 0, True))[0].reshape(values.shape)
    np.testing.assert_array_equal(labels != 0, values != 0)
    assert isinstance(_background_key(L.geometry, *run_args(L, values, 7, 0)[3:5]),
                      np.ndarray)
    Lm = cat.Lattice(shape=values.shape, stencil="moore", mask=values != 2)
    keys, sites = run_args(Lm, values, 0, 0)[3:5]
    assert _background_key(Lm.geometry, keys, sites) is sites


def _images(shape, seed):
    """Few large regions (blocks of 3 values a side, 10% zeros) and many small ones."""
    rng = np.random.default_rng(seed)
    few = sum((np.arange(n) * 3 // n).reshape([-1 if a == axis else 1
                                                for a in range(len(shape))])
              for axis, n in enumerate(shape)) + 1
    few = np.broadcast_to(few, shape).copy()
    few[rng.random(shape) < 0.1] = 0
    return few, rng.integers(0, 4, size=shape)


@pytest.mark.parametrize("shape, connectivity", [
    ((61, 47), 4), ((61, 47), 8), ((23, 19, 31), 6), ((23, 19, 31), 18),
    ((23, 19, 31), 26), ((3, 5, 2), 26)])
def test_tree_stencils_match_cc3d_and_the_general_scan(monkeypatch, threads, shape,
                                                       connectivity):
    """cc3d on open lattices of the tree stencils (with a mask the trees read the sites:
    blocked sites holding a value equal to their neighbours' are not joined)."""
    import cc3d

    stencil = "von_neumann" if connectivity in (4, 6) else (
        "moore" if connectivity in (8, 26) else _treegen.stencil(3, 2).tolist())
    L = cat.Lattice(shape=shape, stencil=stencil)
    for values in _images(shape, connectivity):
        want = canonical(cc3d.connected_components(values, connectivity=connectivity))
        for by_key in (False, True):
            assert_components(E.label_equal(*equal_args(L, values, 0, by_key)), want)
            with monkeypatch.context() as m:
                m.setattr(_equal_trees, "TREES", {})
                assert_components(E.label_equal(*equal_args(L, values, 0, by_key)), want)
        blocked = np.random.default_rng(3).random(shape) < 0.2
        Lm = cat.Lattice(shape=shape, stencil=stencil, mask=~blocked)
        masked = np.where(blocked, 0, values)
        want = canonical(cc3d.connected_components(masked, connectivity=connectivity))
        assert_components(E.label_equal(*equal_args(Lm, values)), want)


EQUAL_CASES = [c for c in sorted(SPLIT_CASES) if "delta" not in c]


@pytest.mark.parametrize("case", EQUAL_CASES)
def test_larger_equal_labellings_match_the_numpy_backend(monkeypatch, threads, case):
    """Row chunks over threads with their seams, periodic seams, windows of the normal
    budget; then a budget of a few rows: many kernel calls, the same labels."""
    L, values, _ = SPLIT_CASES[case]()
    want = L.label(values, backend="numpy").labels
    assert_components(E.label_equal(*equal_args(L, values)), want)
    calls = count_kernel_calls(monkeypatch, {E: ("_final", "_wraps")})
    monkeypatch.setattr(_budget, "_BUDGET", 3 * L.shape[-1])
    assert_components(E.label_equal(*equal_args(L, values, 0, True)), want)
    rows = L.geometry.n_points // L.shape[-1]
    assert calls["_final"] >= -(-(-(-rows // threads)) // max(1, 3 // threads))
    if L.geometry.periodic_arr.any():
        assert calls["_wraps"] >= rows // 3


def test_a_stencil_too_wide_for_the_cover_bits_is_refused_and_labelled_by_runs():
    L = cat.Lattice(shape=(2, 3, 2, 3, 2), stencil="moore")  # 121 backward offsets
    values = np.random.default_rng(0).integers(0, 3, size=L.shape)
    assert not E.applies(L.geometry.offsets, 5)
    with pytest.raises(ValueError, match="at most 62 backward offsets"):
        E.label_equal(*equal_args(L, values))
    np.testing.assert_array_equal(L.label(values, backend="numba-cpu").labels,
                                  L.label(values, backend="numpy").labels)


def test_keys_and_sites_are_not_written():
    L = cat.Lattice(shape=(20, 30), stencil="moore", periodic=True)
    values = np.random.default_rng(1).integers(0, 3, size=L.shape).astype(np.int32)
    args = equal_args(L, values)
    before = [a.copy() for a in args[3:]]
    E.label_equal(*args)
    for a, b in zip(args[3:], before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("stencil, kind, near, runs", [
    ("von_neumann", "long", 100, True), ("von_neumann", "long", None, False),
    ("von_neumann", "short", 100, False), ("moore", "long", 100, False)])
def test_runs_label_only_long_runs_of_far_rows_without_covering_neighbours(
        monkeypatch, stencil, kind, near, runs):
    """Von Neumann's stencil on runs of 25 whose earlier rows lie farther back than
    ``NEAR`` sites: the value runs; on short runs, with the rows near (the default
    ``NEAR`` on this lattice), or with Moore's stencil (its first neighbour covers every
    other), the site scan. Both give the numpy backend's labels."""
    shape = (30, 40, 50)
    values = (np.indices(shape)[0] // 10 * 2 + np.arange(50) // 25 + 1 if kind == "long"
              else _images(shape, 0)[1])
    if near is not None:
        monkeypatch.setattr(E, "NEAR", near)
    L = cat.Lattice(shape=shape, stencil=stencil)
    args = equal_args(L, values)
    assert E.prefer_runs(L.geometry.offsets, shape, args[3], args[4]) is runs
    np.testing.assert_array_equal(L.label(values, backend="numba-cpu").labels,
                                  L.label(values, backend="numpy").labels)
