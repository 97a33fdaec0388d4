"""Multi-label and continuous-value labelling (``Lattice.label``) against cc3d on open
lattices (connectivity 4, 8, 6, 18, 26; ``delta``), against NetworkX on the graph a spec
describes (periodic axes, custom stencils, masks, bonds), backends against each other,
exact integer differences at the ends of int64 and uint64, the labels' ``dtype`` and
``out=``, and bad input."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.catalogue import v_label
from catalytic.kernels.cpu import _budget
from catalytic.kernels.cpu import values as V
from tests.support.kernel_calls import count_kernel_calls
from tests.support.oracles import bond_graph, moore, von_neumann
from tests.support.strategies import L1, L2, lattice_specs, make
from tests.support.threads import threads  # noqa: F401 (a fixture)

BACKENDS = ("numpy", "numba-cpu")


def canonical(labels):
    """Labels renumbered 1.. in order of their lowest flat index (0 stays 0)."""
    flat = np.asarray(labels).reshape(-1)
    out = np.zeros(flat.size, np.int64)
    fg = np.flatnonzero(flat)
    if fg.size:
        _, first, inv = np.unique(flat[fg], return_index=True, return_inverse=True)
        rank = np.empty(first.size, np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        out[fg] = rank[inv] + 1
    return out.reshape(np.shape(labels))


def close(a, b, delta):
    """The joining rule in exact Python arithmetic."""
    a, b = a.item(), b.item()
    return a == b or abs(a - b) <= delta


def oracle(spec, values, background, delta):
    """Labels from the definition: NetworkX components of the bond graph restricted to
    labelled sites, keeping the edges between close values."""
    flat = np.asarray(values).reshape(-1)
    G = bond_graph(spec)
    keep = [i for i in G.nodes if background is None or flat[i] != background]
    H = nx.Graph()
    H.add_nodes_from(keep)
    H.add_edges_from((u, v) for u, v in G.subgraph(keep).edges
                     if close(flat[u], flat[v], delta))
    out = np.zeros(flat.size, np.int64)
    for c, comp in enumerate(sorted(nx.connected_components(H), key=min), 1):
        out[list(comp)] = c
    return out.reshape(spec["shape"])


# -- against NetworkX on every kind of lattice --------------------------------------------
@st.composite
def valued_specs(draw, max_sites=64, bonds=True):
    """A spec (with bonds half the time, if ``bonds``), values of one of four kinds, a
    background (0 or None) and a delta."""
    plain = lattice_specs(max_dim=3, custom=True, max_sites=max_sites)
    spec = draw(st.one_of(lattice_specs(max_dim=3, bonds=True, custom=True,
                                        max_sites=max_sites), plain) if bonds else plain)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["int", "float", "bool", "uint8"]))
    shape = spec["shape"]
    if kind == "int":
        values = rng.integers(-2, 3, size=shape)
        delta = draw(st.sampled_from([0, 1, 1.5]))
    elif kind == "float":
        values = np.round(rng.uniform(-1, 1, size=shape), 1)
        delta = draw(st.sampled_from([0.0, 0.2, 0.5]))
    elif kind == "bool":
        values = rng.random(shape) < 0.6
        delta = 0
    else:
        values = rng.integers(0, 4, size=shape).astype(np.uint8)
        delta = draw(st.sampled_from([0, 2]))
    background = draw(st.sampled_from([0, None]))
    return spec, values, background, delta


@given(case=valued_specs())
@example(case=(L2, np.array([[1, 1, 2], [1, 2, 2]]), 0, 0))
@example(case=(L1, np.array([[3, 3, 0]]), None, 0))
@settings(max_examples=60, deadline=None)
def test_labels_match_the_graph_of_close_values(case):
    spec, values, background, delta = case
    L = make(spec)
    want = oracle(spec, values, background, delta)
    for b in BACKENDS:
        comp = L.label(values, background=background, delta=delta, backend=b)
        np.testing.assert_array_equal(comp.labels, want, err_msg=b)
        assert comp.count == want.max(initial=0)
        assert comp.sizes.tolist() == np.bincount(want.reshape(-1),
                                                  minlength=comp.count + 1)[1:].tolist()


# -- the numba-cpu value runs split over threads and kernel calls -------------------------
def run_args(L, values, background, delta):
    """``values.label_values`` arguments: the keys, labelled sites and delta that the
    backends receive."""
    (_, keys, sites, key_delta), _ = v_label(L, values, background, delta)
    g = L.geometry
    return g.shape_arr, g.periodic_arr, g.offsets, keys, sites, key_delta


def assert_components(got, want):
    labels, count, sizes = got
    want = np.asarray(want).reshape(-1)
    np.testing.assert_array_equal(labels, want)
    assert count == want.max(initial=0)
    assert sizes.tolist() == np.bincount(want, minlength=count + 1)[1:].tolist()


@given(case=valued_specs(bonds=False), big=st.booleans())
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_value_runs_split_over_row_chunks_match_the_graph(monkeypatch, threads, case, big):
    # never one serial call: kernel calls of a few rows (one thread: always; two
    # threads: half the time) or of the normal budget
    spec, values, background, delta = case
    L = make(spec)
    if not V.runs_apply(L.geometry.offsets, L.dimensions):
        return  # the bits path (test_labels_match_the_graph_of_close_values)
    monkeypatch.setattr(V, "_WHOLE_WORK", 0)
    monkeypatch.setattr(_budget, "_BUDGET", 1 << 23 if big and threads > 1 else 40)
    want = oracle(spec, values, background, delta)
    assert_components(V.label_values(*run_args(L, values, background, delta)), want)


def _valued(shape, stencil, periodic, kind, delta, seed=11):
    """A lattice with a mask (8% blocked) and values: ``ints`` in 0..3 (many small
    clusters), ``walk`` integers in 0..40 drifting along the last axis, ``blocks`` (long
    runs), or ``floats`` in [0, 1) rounded to 0.05."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) >= 0.08
    if kind == "ints":
        values = rng.integers(0, 4, size=shape)
    elif kind == "walk":
        values = np.cumsum(rng.integers(-1, 2, size=shape), axis=-1) % 41
    elif kind == "blocks":  # long runs: cubes of 8 sites a side, 10% of sites 0
        values = (np.indices(shape) // 8).sum(axis=0) % 3 + 1
        values[rng.random(shape) < 0.1] = 0
    else:
        values = np.round(rng.random(shape) * 20) / 20
    L = cat.Lattice(shape=shape, stencil=stencil, periodic=periodic, mask=mask)
    return L, values, delta


SPLIT_CASES = {
    "64^3-open-von-neumann": lambda: _valued((64, 64, 64), "von_neumann", False, "ints", 0),
    "40^3-periodic-moore-delta": lambda: _valued((40, 40, 40), "moore", True, "walk", 1),
    # runs of several sites on average: the writer with a branch per run
    "48^3-periodic-moore-blocks": lambda: _valued((48, 48, 48), "moore", (False, True, True),
                                                  "blocks", 0),
    "300x300-periodic-moore": lambda: _valued((300, 300), "moore", True, "ints", 0),
    "300x300-open-moore-delta": lambda: _valued((300, 300), "moore", False, "floats", 0.1),
    "300x300-periodic-von-neumann-delta": lambda: _valued((300, 300), "von_neumann",
                                                          (False, True), "walk", 2),
    # shifts 0 and 1 to the next row: a dilated run wraps the seam from an unshifted start
    "300x300-periodic-triangular": lambda: _valued(
        (300, 300), [[1, 0], [-1, 0], [0, 1], [0, -1], [1, -1], [-1, 1]], True, "ints", 0),
    "300x300-periodic-von-neumann": lambda: _valued((300, 300), "von_neumann", True,
                                                    "walk", 0),
}
_REFERENCE = {}

#: the host-called kernels of the split value-run labelling (no other kernel calls them)
RUN_KERNELS = ("_vruns_count", "_vruns_write", "_vruns_union_inside", "_vruns_union_cross",
               "_vruns_label")


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_larger_value_labellings_match_the_numpy_backend(monkeypatch, threads, case):
    """Row chunks over threads, windows of the normal budget, periodic seams along the
    rows and across them; then a budget of a few rows: many kernel calls, the same
    labels."""
    L, values, delta = SPLIT_CASES[case]()
    if case not in _REFERENCE:
        comp = L.label(values, delta=delta, backend="numpy")
        _REFERENCE[case] = comp.labels
    want = _REFERENCE[case]
    assert_components(V.label_values(*run_args(L, values, 0, delta)), want)
    calls = count_kernel_calls(monkeypatch, {V: RUN_KERNELS})
    monkeypatch.setattr(_budget, "_BUDGET", 3 * L.shape[-1])
    assert_components(V.label_values(*run_args(L, values, 0, delta)), want)
    rows = L.geometry.n_points // L.shape[-1]
    windows = -(-(-(-rows // threads)) // max(1, 3 // threads))  # windows of each chunk
    for name in RUN_KERNELS:
        if name != "_vruns_union_cross" or threads > 1:
            assert calls[name] >= windows, name
    comp = L.label(values, delta=delta, backend="numba-cpu")
    np.testing.assert_array_equal(comp.labels, want)


@given(rows=st.integers(1, 6), L=st.integers(1, 40), kind=st.sampled_from(["int", "float"]),
       run=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_both_run_writers_write_the_same_runs(rows, L, kind, run, seed):
    """The branch-free writer and the one with a branch per run (chosen by the average
    run length) write the same value runs, keys included: values constant over stretches
    of about ``run`` sites, some sites closed."""
    rng = np.random.default_rng(seed)
    steps = rng.random((rows, L)) < 1 / run
    values = np.cumsum(steps, axis=1) % 3
    open_ = (rng.random(rows * L) >= 0.15).view(np.uint8)
    if kind == "float":
        keys, delta = values.reshape(-1) * 0.5, 0.5
    else:
        keys, delta = values.reshape(-1).astype(np.uint64), None
    cnt = np.empty(rows, np.int64)
    V._vruns_count(keys, open_, delta, L, cnt, 1, 0, rows)
    ptr = np.zeros(rows + 1, np.int64)
    np.cumsum(cnt, out=ptr[1:])
    got = []
    for long_runs in (False, True):
        rs, re = np.full(ptr[-1] + 1, -1, np.int32), np.full(ptr[-1] + 1, -1, np.int32)
        rk = np.zeros(ptr[-1] + 1, keys.dtype)
        V._vruns_write(keys, open_, delta, L, ptr, rs, re, rk, 1, 0, rows, np.bool_(long_runs))
        got.append((rs[:-1], re[:-1], rk[:-1]))
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    assert (got[0][1] > got[0][0]).all()


# -- against cc3d on open lattices ---------------------------------------------------------
@pytest.fixture(scope="module")
def cc3d():
    return pytest.importorskip("cc3d", reason="cc3d is not installed "
                                              "(pip install connected-components-3d)")


def stencil_of(connectivity, d):
    if connectivity in (4, 6):
        return von_neumann(d)
    if connectivity in (8, 26):
        return moore(d)
    assert connectivity == 18
    off = moore(3)
    return off[np.abs(off).sum(axis=1) <= 2]


def images(shape, seed):
    """A label image of few large regions (smoothed noise) and one of many small ones."""
    rng = np.random.default_rng(seed)
    few = np.zeros(shape, np.int64)
    for axis in range(len(shape)):
        few += (np.arange(shape[axis]) * 3 // shape[axis]).reshape(
            [-1 if a == axis else 1 for a in range(len(shape))])
    few[rng.random(shape) < 0.1] = 0
    many = rng.integers(0, 4, size=shape)
    return few, many


@pytest.mark.parametrize("shape, connectivity", [
    ((40, 33), 4), ((40, 33), 8), ((70, 70), 4),
    ((9, 11, 13), 6), ((9, 11, 13), 18), ((9, 11, 13), 26), ((24, 24, 24), 26)])
def test_multi_label_matches_cc3d(cc3d, shape, connectivity):
    L = cat.Lattice(shape=shape, stencil=stencil_of(connectivity, len(shape)))
    for values in images(shape, connectivity):
        want = canonical(cc3d.connected_components(values, connectivity=connectivity))
        for b in BACKENDS:
            comp = L.label(values, backend=b)
            np.testing.assert_array_equal(comp.labels, want, err_msg=b)
            assert comp.count == want.max()


@pytest.mark.parametrize("shape, connectivity", [((40, 33), 4), ((9, 11, 13), 26),
                                                 ((9, 11, 13), 18), ((9, 11, 13), 6)])
@pytest.mark.parametrize("delta", [0.1, 0.25])
def test_continuous_values_match_cc3d_with_delta(cc3d, shape, connectivity, delta):
    rng = np.random.default_rng(7)
    # unrounded: no difference lies within rounding of delta (cc3d subtracts in the
    # values' own type, catalytic in float64)
    values = rng.uniform(0, 1, size=shape)
    values[rng.random(shape) < 0.2] = 0
    L = cat.Lattice(shape=shape, stencil=stencil_of(connectivity, len(shape)))
    want = canonical(cc3d.connected_components(values, connectivity=connectivity,
                                               delta=delta))
    for b in BACKENDS:
        np.testing.assert_array_equal(L.label(values, delta=delta, backend=b).labels, want,
                                      err_msg=b)


def test_eight_connected_continuous_values_follow_the_definition():
    """cc3d 4.1.1 labels this 2-D image with delta=1 and connectivity 8 as two clusters
    (its 8-connected scan skips neighbours that are joined anyway when values are
    equal, not when they are only close); every site here reaches every other through
    neighbours at most 1 apart, which the NetworkX oracle and catalytic agree on."""
    v = np.array([[1.0, 3.0, 3.0], [1.0, 2.0, 4.0]])
    spec = {"shape": (2, 3), "periodic": False, "stencil": "moore"}
    want = oracle(spec, v, 0, 1)
    assert want.tolist() == [[1, 1, 1], [1, 1, 1]]
    for b in BACKENDS:
        got = cat.Lattice(shape=(2, 3), stencil="moore").label(v, delta=1, backend=b)
        np.testing.assert_array_equal(got.labels, want, err_msg=b)


# -- exact differences, dtypes, out= ------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int8])
def test_integer_differences_are_exact_at_the_ends_of_the_type(dtype):
    info = np.iinfo(dtype)
    values = np.array([info.min, info.max, info.max - 1, info.min + 1, info.min + 3],
                      dtype=dtype)
    L = cat.Lattice(shape=(5,))
    for delta in (0, 1, 2, info.max - info.min, math.inf):
        want = oracle({"shape": (5,), "periodic": False, "stencil": "von_neumann"},
                      values, None, delta)
        for b in BACKENDS:
            got = L.label(values, background=None, delta=delta, backend=b).labels
            np.testing.assert_array_equal(got, want, err_msg=f"{b} delta={delta}")


INTEGER_DTYPES = (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                  np.int64, np.uint64)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_exact_keys_are_the_values_own_bits_and_label_as_int64_does(dtype):
    """With delta 0 integers of 4 or 8 bytes reach the kernels as an unsigned view of
    the values (no copy; negative values change their bits, never their equalities),
    narrower ones as their bits widened to uint32; the labels are those of the same
    values as int64."""
    rng = np.random.default_rng(7)
    wide = rng.integers(-2, 3, size=(6, 7, 8))
    values = (wide > 0) if dtype is np.bool_ else wide.astype(dtype)
    L = cat.Lattice(shape=(6, 7, 8), stencil="moore")
    (_, keys, sites, key_delta), _ = v_label(L, values, 0, 0.5)  # floor(0.5) = 0
    size = np.dtype(dtype).itemsize
    assert key_delta == 0 and keys.dtype == np.dtype(f"u{max(size, 4)}")
    assert np.shares_memory(keys, values) == (size >= 4)
    assert sites.tolist() == (values.reshape(-1) != 0).tolist()
    # with delta 1 the keys are a copy: the uint64 order map
    (_, keys1, _, _), _ = v_label(L, values, 0, 1)
    assert keys1.dtype == np.uint64 and not np.shares_memory(keys1, values)
    want = L.label(values.astype(np.int64), backend="numpy").labels
    for b in BACKENDS:
        np.testing.assert_array_equal(L.label(values, backend=b).labels, want, err_msg=b)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_exact_float_keys_are_bits_and_minus_zero_equals_zero(dtype):
    """With delta 0 floats reach the kernels as the bits of their float64 values, -0.0
    made 0.0: the one pair of equal floats whose bits differ still joins."""
    values = np.array([[-0.0, 0.0, 1.5, 1.5, -np.inf, -np.inf, 2.0]], dtype=dtype)
    L = cat.Lattice(shape=values.shape)
    (_, keys, _, _), _ = v_label(L, values, None, 0)
    assert keys.dtype == np.uint64
    for b in BACKENDS:
        got = L.label(values, background=None, backend=b).labels
        assert got.tolist() == [[1, 1, 2, 2, 3, 3, 4]], b


@pytest.mark.parametrize("dtype", [np.int32, np.uint16])
def test_narrow_exact_keys_split_over_row_chunks_match_the_numpy_backend(monkeypatch,
                                                                         threads, dtype):
    """The split value-run labelling (row chunks over threads, windows of a few rows)
    on uint32 keys (a view of int32 values, uint16 ones widened), at a size that
    reaches it."""
    values = np.random.default_rng(11).integers(-1, 3, size=(40, 30, 50)).astype(dtype)
    L = cat.Lattice(shape=(40, 30, 50), periodic=(True, False, True), stencil="moore")
    want = L.label(values, backend="numpy").labels
    monkeypatch.setattr(_budget, "_BUDGET", 3 * L.shape[-1])
    args = run_args(L, values, 0, 0)
    assert args[3].dtype == np.uint32
    assert_components(V.label_values(*args), want)


def test_infinite_values_join_their_equals_and_inf_delta_joins_everything():
    v = np.array([np.inf, np.inf, -np.inf, 1.0, 2.0])
    L = cat.Lattice(shape=(5,))
    for b in BACKENDS:
        assert L.label(v, background=None, backend=b).labels.tolist() == [1, 1, 2, 3, 4]
        assert L.label(v, background=None, delta=np.inf,
                       backend=b).labels.tolist() == [1, 1, 1, 1, 1]


def test_dtype_and_out():
    values = (np.indices((15, 20)).sum(axis=0) % 2) + 1  # a checkerboard: 300 labels
    L = cat.Lattice(shape=(15, 20))
    comp = L.label(values)
    assert comp.count == 300 and comp.labels.dtype == np.int32
    assert L.label(values, dtype="smallest").labels.dtype == np.uint16
    small = cat.Lattice(shape=(3, 4))
    assert small.label(np.ones((3, 4)), dtype="smallest").labels.dtype == np.uint8
    np.testing.assert_array_equal(L.label(values, dtype=np.int64).labels, comp.labels)
    out = np.full((15, 20), 7, np.uint8)
    with pytest.raises(ValueError, match="300 labels do not fit in uint8"):
        L.label(values, out=out)
    assert (out == 7).all()  # untouched
    out = np.zeros((15, 20), np.uint16)
    res = L.label(values, out=out)
    assert res.labels is out
    np.testing.assert_array_equal(out, comp.labels)
    c2 = L.connected_components(dtype="smallest")
    assert c2.labels.dtype == np.uint8 and c2.count == 1


def test_out_may_be_a_memmap(tmp_path):
    values = np.random.default_rng(3).integers(0, 3, size=(30, 30))
    L = cat.Lattice(shape=(30, 30))
    mm = np.lib.format.open_memmap(tmp_path / "labels.npy", mode="w+", dtype=np.uint32,
                                   shape=(30, 30))
    want = L.label(values).labels
    L.label(values, out=mm)
    mm.flush()
    np.testing.assert_array_equal(np.load(tmp_path / "labels.npy"), want)


def test_values_are_not_modified_and_may_be_read_only():
    values = np.random.default_rng(1).integers(0, 3, size=(12, 12))
    values.setflags(write=False)
    before = values.copy()
    for b in BACKENDS:
        cat.Lattice(shape=(12, 12), periodic=True).label(values, backend=b)
    np.testing.assert_array_equal(values, before)


def test_blocked_sites_are_never_labelled_and_their_nan_is_fine():
    mask = np.array([[True, False, True, True]])
    v = np.array([[1.0, np.nan, 1.0, 1.0]])
    L = cat.Lattice(shape=(1, 4), mask=mask)
    for b in BACKENDS:
        assert L.label(v, backend=b).labels.tolist() == [[1, 0, 2, 2]]


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, err, match", [
    ({"values": np.zeros((4, 4))}, ValueError, "values has shape"),
    ({"values": np.zeros((3, 4), complex)}, TypeError, "boolean, integer or float"),
    ({"values": np.array([["a"] * 4] * 3)}, TypeError, "boolean, integer or float"),
    ({"values": np.full((3, 4), np.nan)}, ValueError, "NaN at site"),
    ({"delta": -1}, ValueError, "delta must be >= 0"),
    ({"delta": float("nan")}, ValueError, "delta must be >= 0"),
    ({"delta": "1"}, TypeError, "delta must be a real number"),
    ({"delta": True}, TypeError, "delta must be a real number"),
    ({"background": "x"}, TypeError, "background must be a real number or None"),
    ({"background": float("nan")}, ValueError, "background must not be NaN"),
    ({"dtype": np.float64}, TypeError, "dtype must be an integer dtype"),
    ({"dtype": "smallest", "out": np.zeros((3, 4), np.int32)}, ValueError, "twice"),
    ({"out": np.zeros((4, 3), np.int32)}, ValueError, "out has shape"),
    ({"out": np.zeros((3, 4))}, TypeError, "out must have an integer dtype"),
    ({"out": [[0] * 4] * 3}, TypeError, "out must be a NumPy array"),
    ({"out": np.zeros((3, 4), np.int32), "dtype": np.int64}, ValueError, "differs"),
])
def test_bad_input_is_refused_before_work(kwargs, err, match):
    L = cat.Lattice(shape=(3, 4))
    kwargs = {"values": np.ones((3, 4), np.int64), **kwargs}
    for b in BACKENDS:
        with pytest.raises(err, match=match):
            L.label(backend=b, **kwargs)


def test_read_only_out_is_refused():
    out = np.zeros((3, 4), np.int32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="out is read-only"):
        cat.Lattice(shape=(3, 4)).label(np.ones((3, 4)), out=out)


# -- the batched twin ---------------------------------------------------------------------
@pytest.mark.parametrize("shape, periodic, stencil", [
    ((12, 13), False, "von_neumann"), ((40, 41), True, "moore"), ((6, 7, 8), (True, False, True),
                                                                  "von_neumann")])
def test_batched_label_rows_equal_single_calls(shape, periodic, stencil):
    """Every row of ``batched.label`` (one value array, a stack of masks) equals
    ``label`` on the lattice with that row's mask, on every backend."""
    rng = np.random.default_rng(len(shape))
    values = rng.integers(0, 3, size=shape)
    stack = rng.random((4,) + shape) < 0.8
    L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil,
                    bonds=rng.random((len(cat.Lattice(shape=shape, stencil=stencil)
                                          .bond_offsets),) + shape) < 0.9)
    eng = cat.get_engine()
    for b in BACKENDS:
        rows = eng.run("batched.label", L, stack, values, background=0, delta=0, backend=b)
        assert len(rows) == len(stack)
        for row, m in zip(rows, stack):
            one = L.with_mask(m).label(values, backend="numpy")
            np.testing.assert_array_equal(row.labels, one.labels, err_msg=b)
            assert row.count == one.count and row.sizes.tolist() == one.sizes.tolist()


def test_batched_label_refuses_nan_where_a_row_is_open():
    L = cat.Lattice(shape=(2, 3))
    v = np.ones((2, 3))
    v[1, 2] = np.nan
    stack = np.ones((2, 2, 3), bool)
    stack[0, 1, 2] = False
    with pytest.raises(ValueError, match="NaN at site"):
        cat.get_engine().run("batched.label", L, stack, v)
    stack[1, 1, 2] = False  # no row opens it: fine
    rows = cat.get_engine().run("batched.label", L, stack, v)
    assert [r.count for r in rows] == [1, 1]
