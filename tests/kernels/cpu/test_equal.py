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
from catalytic.kernels.cpu import _budget, _equal_trees, _treegen
from catalytic.kernels.cpu import equal as E
from tests.lattice.test_label import (SPLIT_CASES, assert_components, canonical, oracle,
                                      run_args, valued_specs)
from tests.support.kernel_calls import count_kernel_calls
from tests.support.strategies import make
from tests.support.threads import threads  # noqa: F401 (a fixture)


def equal_args(L, values, background=0):
    """``label_equal`` arguments for ``values`` (delta 0) on lattice ``L``."""
    return run_args(L, values, background, 0)[:5]


def test_the_generated_trees_are_what_the_generator_writes():
    path = pathlib.Path(_equal_trees.__file__)
    assert path.read_text() == _treegen.source(), (
        "run `python -m catalytic.kernels.cpu._treegen`")


@pytest.mark.parametrize("name, d, most", _treegen.STENCILS)
def test_each_tree_is_found_for_its_stencil(name, d, most):
    offs = E.plan(_treegen.stencil(d, most).tobytes(), d)[0]
    assert _equal_trees.TREES[tuple(map(tuple, offs.tolist()))] == name


@given(case=valued_specs(bonds=False), small_budget=st.booleans())
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_equal_values_label_as_the_graph_does(monkeypatch, threads, case, small_budget):
    """Every lattice without bonds (custom stencils, periodic axes, masks); the values
    compared for equality whatever ``delta`` the case drew; kernel calls of a few rows
    half the time."""
    spec, values, background, _ = case
    L = make(spec)
    if small_budget:
        monkeypatch.setattr(_budget, "_BUDGET", 40)
    want = oracle(spec, values, background, 0)
    assert_components(E.label_equal(*equal_args(L, values, background)), want)


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
        got = E.label_equal(*equal_args(L, values))
        assert_components(got, want)
        with monkeypatch.context() as m:
            m.setattr(_equal_trees, "TREES", {})
            assert_components(E.label_equal(*equal_args(L, values)), want)
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
    assert_components(E.label_equal(*equal_args(L, values)), want)
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


def test_long_runs_go_to_the_run_labelling_only_without_covering_neighbours():
    """Von Neumann's stencil on long runs: the value runs; on short runs, or with
    Moore's stencil (its first neighbour covers every other), the site scan. Both give
    the numpy backend's labels."""
    few, many = _images((30, 40, 50), 0)
    for stencil, values, long_ in (("von_neumann", few, True), ("von_neumann", many, False),
                                   ("moore", few, False)):
        L = cat.Lattice(shape=few.shape, stencil=stencil)
        args = equal_args(L, values)
        assert E.runs_are_long(L.geometry.offsets, 3, args[3], args[4], 50, 4) is long_
        np.testing.assert_array_equal(L.label(values, backend="numba-cpu").labels,
                                      L.label(values, backend="numpy").labels)
