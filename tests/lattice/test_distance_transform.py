"""The exact Euclidean distance transform (``Lattice.distance_transform``): against
SciPy's ``distance_transform_edt`` (with ``sampling`` and ``return_indices``) and the
``edt`` package's labels on open lattices, periodic axes against SciPy on a tiled copy,
the tie rule against a brute-force oracle of its own, every backend against the
reference over hypothesis lattices (kernel calls of a few lines included), bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.ndimage as ndi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import catalytic as cat
from catalytic.kernels.cpu import _budget
from tests.support.strategies import lattice_specs, make
from tests.support.threads import threads  # noqa: F401 (a fixture)

BACKENDS = ["numpy", "numba-cpu"]


def brute(shape, periodic, spacing, features, values=None):
    """Squared distances and nearest features by looking at every feature, ties by the
    least displacement in C order (periodic components in [-(n // 2), n - n // 2))."""
    n = math.prod(shape)
    coords = np.array(np.unravel_index(np.arange(n), shape)).T
    feat = features.reshape(-1)
    vals = None if values is None else values.reshape(-1)
    d2 = np.full(n, np.inf)
    near = np.full(n, -1)
    for i in range(n):
        cand = feat if vals is None else feat | (vals != vals[i])
        at = np.flatnonzero(cand)
        if at.size == 0:
            continue
        disp = coords[at] - coords[i]
        for a, m in enumerate(shape):
            if periodic[a]:
                disp[:, a] = (disp[:, a] + m // 2) % m - m // 2
        dist = ((disp * np.asarray(spacing, float)) ** 2).sum(axis=1)
        best = np.flatnonzero(dist == dist.min())
        pick = min(best, key=lambda j: tuple(disp[j]))
        d2[i], near[i] = dist[pick], at[pick]
    return d2.reshape(shape), near.reshape(shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, sampling, inside", [
    ((37,), None, 0.8), ((23, 31), (1, 1), 0.8), ((23, 31), (2.5, 0.4), 0.8),
    ((9, 11, 13), (1, 2, 3), 0.8), ((9, 11, 13), (0.3, 1.7, 1.1), 0.8),
    ((5, 4, 6, 3), None, 0.8), ((60, 70), (1, 1), 0.999), ((30, 40, 50), (0.7, 1, 1.3), 0.999)])
def test_open_lattices_match_scipy(backend, shape, sampling, inside):
    """Dense features (each pass looks around each site) and sparse ones (envelopes)."""
    rng = np.random.default_rng(len(shape))
    inside = rng.random(shape) < inside
    inside.reshape(-1)[0] = False  # one feature at least
    want, (idx) = ndi.distance_transform_edt(inside, sampling=sampling, return_indices=True)
    L = cat.Lattice(shape=shape)
    got, near = L.distance_transform(~inside, spacing=sampling, return_indices=True,
                                     backend=backend)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    # SciPy breaks ties its own way: the feature we name is at the distance it gives
    coords = np.array(np.unravel_index(near.reshape(-1), shape)).T.reshape(*shape, -1)
    here = np.moveaxis(np.indices(shape), 0, -1)
    step = np.ones(len(shape)) if sampling is None else np.asarray(sampling, float)
    np.testing.assert_allclose(np.sqrt((((coords - here) * step) ** 2).sum(-1)), want,
                               rtol=1e-13)
    assert not inside.reshape(-1)[near.reshape(-1)].any()
    assert idx.shape == (len(shape), *shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, spacing", [((40, 30), (1.0, 1.0)),
                                            ((12, 17, 9), (1.5, 0.7, 2.0))])
def test_labels_match_the_edt_package(backend, shape, spacing):
    edt = pytest.importorskip("edt", reason="the edt package is the oracle of labels")
    labels = np.random.default_rng(5).integers(0, 4, size=shape).astype(np.uint32)
    want = edt.edt(labels, anisotropy=spacing, black_border=False)  # float32
    got = cat.Lattice(shape=shape).distance_transform(values=labels, spacing=spacing,
                                                      backend=backend)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    got32 = cat.Lattice(shape=shape).distance_transform(values=labels, spacing=spacing,
                                                        dtype=np.float32, backend=backend)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_periodic_axes_match_scipy_on_a_tiled_copy(backend):
    """Three copies along each periodic axis: the middle one's distances are the
    periodic lattice's (a nearest feature is never more than half an axis away)."""
    rng = np.random.default_rng(2)
    shape, periodic, sampling = (13, 10, 7), (True, False, True), (1.0, 2.0, 0.5)
    inside = rng.random(shape) < 0.9
    tiled = np.tile(inside, [3 if p else 1 for p in periodic])
    middle = tuple(slice(n, 2 * n) if p else slice(None) for n, p in zip(shape, periodic))
    want = ndi.distance_transform_edt(tiled, sampling=sampling)[middle]
    L = cat.Lattice(shape=shape, periodic=periodic)
    got = L.distance_transform(~inside, spacing=sampling, backend=backend)
    np.testing.assert_allclose(got, want, rtol=1e-13)


@st.composite
def cases(draw, max_sites=2000):
    """A lattice (masks, periodic axes; up to ``max_sites`` sites), features from its
    mask, a drawn set or values, integer or real spacing."""
    spec = draw(lattice_specs(max_dim=4, max_sites=max_sites))
    shape = spec["shape"]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["mask", "features", "values", "values-bool"]))
    spacing = draw(st.sampled_from(["ones", "integers", "reals"]))
    step = {"ones": np.ones(len(shape)), "integers": rng.integers(1, 4, len(shape)),
            "reals": rng.uniform(0.2, 3.0, len(shape))}[spacing]
    args = {}
    if kind == "features":
        args["features"] = rng.random(shape) < draw(st.sampled_from([0.0, 0.02, 0.3]))
    elif kind == "values":
        args["values"] = rng.integers(0, draw(st.integers(1, 4)), size=shape)
    elif kind == "values-bool":
        args["values"] = rng.random(shape) < 0.7
        args["background"] = None
    return spec, args, step, spacing != "reals"


def _marked(L, args):
    """The features brute() looks at, and values (None without)."""
    g = L.geometry
    blocked = np.zeros(g.shape, bool) if g.mask is None else ~g.mask
    if "features" in args:
        return args["features"], None
    if "values" in args:
        v = np.asarray(args["values"])
        bg = args.get("background", 0)
        return blocked | (v == bg if bg is not None else False), v
    return blocked, None


@given(case=cases(), small_budget=st.booleans())
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_backend_gives_the_brute_force_answer(monkeypatch, threads, case,
                                                    small_budget):
    """Distances and nearest features, the tie rule included, exactly for integer
    spacings and within rounding otherwise; kernel calls of a few lines half the time."""
    spec, args, step, exact = case
    L = make(spec)
    if small_budget:
        monkeypatch.setattr(_budget, "_BUDGET", 16)
    features, values = _marked(L, args)
    d2, near = brute(L.shape, L.periodic, step, features, values)
    for backend in BACKENDS:
        got, at = L.distance_transform(**args, spacing=step, squared=True,
                                       return_indices=True, backend=backend)
        assert got.shape == at.shape == L.shape and got.dtype == np.float64
        if exact:
            np.testing.assert_array_equal(got, d2, err_msg=backend)
            np.testing.assert_array_equal(at, near, err_msg=backend)
        else:
            np.testing.assert_allclose(got, d2, rtol=1e-12, err_msg=backend)
            assert ((at == -1) == (near == -1)).all()
            ok = at >= 0
            coords = np.array(np.unravel_index(at[ok], L.shape)).T
            disp = coords - np.array(np.nonzero(ok)).T
            for a, m in enumerate(L.shape):
                if L.periodic[a]:
                    disp[:, a] = (disp[:, a] + m // 2) % m - m // 2
            np.testing.assert_allclose(((disp * step) ** 2).sum(1), d2[ok], rtol=1e-12)
        plain = L.distance_transform(**args, spacing=step, backend=backend)
        np.testing.assert_allclose(plain, np.sqrt(d2), rtol=1e-12)


def test_a_large_lattice_is_the_same_in_many_kernel_calls(monkeypatch, threads):
    """Lines split over threads and over kernel calls of a few tiles: the same bits."""
    rng = np.random.default_rng(8)
    shape = (37, 45, 70)
    values = rng.integers(0, 3, size=shape)
    L = cat.Lattice(shape=shape, periodic=(True, False, True))
    for kw in ({"features": rng.random(shape) < 0.01}, {"values": values}):
        want = L.distance_transform(**kw, spacing=(1, 2, 3), return_indices=True,
                                    backend="numba-cpu")
        monkeypatch.setattr(_budget, "_BUDGET", 100)
        got = L.distance_transform(**kw, spacing=(1, 2, 3), return_indices=True,
                                   backend="numba-cpu")
        monkeypatch.undo()
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        ref = L.distance_transform(**kw, spacing=(1, 2, 3), return_indices=True,
                                   backend="numpy")
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_feature_is_inf_everywhere(backend):
    L = cat.Lattice(shape=(4, 5), periodic=(True, False))
    d, near = L.distance_transform(return_indices=True, backend=backend)  # no mask
    assert np.isinf(d).all() and (near == -1).all()
    d = L.distance_transform(values=np.full((4, 5), 3), background=None, backend=backend)
    assert np.isinf(d).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_blocked_sites_are_the_default_features_and_features_may_be_sites(backend):
    mask = np.ones((6, 7), bool)
    mask[2, 3] = False
    L = cat.Lattice(shape=(6, 7), mask=mask)
    by_mask = L.distance_transform(backend=backend)
    np.testing.assert_array_equal(by_mask, ndi.distance_transform_edt(mask))
    np.testing.assert_array_equal(L.distance_transform((2, 3), backend=backend), by_mask)
    np.testing.assert_array_equal(L.distance_transform(np.array([17]), backend=backend),
                                  by_mask)
    np.testing.assert_array_equal(L.distance_transform(~mask.reshape(-1), backend=backend),
                                  by_mask)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_is_refused_at_open_sites_only(backend):
    """As ``label``: a blocked site is a feature whatever it holds."""
    values = np.array([[1.0, 1.0, np.nan, 2.0, 2.0]])
    L = cat.Lattice(shape=values.shape, mask=~np.isnan(values))
    np.testing.assert_array_equal(L.distance_transform(values=values, backend=backend),
                                  [[2.0, 1.0, 0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match="NaN"):
        cat.Lattice(shape=values.shape).distance_transform(values=values, backend=backend)


def test_inputs_are_not_modified_and_may_be_read_only():
    rng = np.random.default_rng(3)
    feats = rng.random((8, 9)) < 0.2
    values = rng.integers(0, 3, (8, 9)).astype(np.int32)
    for a in (feats, values):
        a.setflags(write=False)
    before = feats.copy(), values.copy()
    L = cat.Lattice(shape=(8, 9))
    for backend in BACKENDS:
        L.distance_transform(feats, return_indices=True, backend=backend)
        L.distance_transform(values=values, return_indices=True, backend=backend)
    np.testing.assert_array_equal(feats, before[0])
    np.testing.assert_array_equal(values, before[1])


@pytest.mark.parametrize("kwargs, error, match", [
    ({"spacing": 0}, ValueError, "finite and > 0"),
    ({"spacing": (1, -1)}, ValueError, "finite and > 0"),
    ({"spacing": (1, float("nan"))}, ValueError, "finite and > 0"),
    ({"spacing": (1, 2, 3)}, ValueError, "one per axis"),
    ({"spacing": "a"}, TypeError, "real numbers"),
    ({"squared": 1}, TypeError, "squared must be True or False"),
    ({"return_indices": None}, TypeError, "return_indices"),
    ({"dtype": np.int32}, TypeError, "float64 or float32"),
    ({"features": np.zeros((3, 4), bool), "values": np.zeros((4, 5))}, ValueError,
     "not both"),
    ({"features": np.zeros((3, 4), bool)}, ValueError, "shape"),
    ({"features": np.array([99])}, IndexError, "out of range"),
    ({"values": np.zeros((3, 4))}, ValueError, "shape"),
    ({"values": np.array([[np.nan] * 5] * 4)}, ValueError, "NaN"),
])
def test_bad_input_is_refused_before_work(kwargs, error, match):
    L = cat.Lattice(shape=(4, 5))
    with pytest.raises(error, match=match):
        L.distance_transform(**kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=20, deadline=None)
@given(spec=lattice_specs(max_dim=3, masks=False, max_sites=600),
       rows=st.integers(0, 4), kind=st.sampled_from(["mask", "values", "features"]),
       seed=st.integers(0, 2**32 - 1))
def test_the_batched_twin_is_the_single_call_on_every_row(backend, spec, rows, kind, seed):
    """``batched.distance_transform`` over a stack of masks: row b equals the single call
    on ``lattice.with_mask(row b)``, indices included (numba-cpu: every row in the same
    passes)."""
    L = make(spec)
    rng = np.random.default_rng(seed)
    stack = rng.random((rows, *L.shape)) < rng.uniform(0.5, 1.0)
    kw = {"values": rng.integers(0, 3, L.shape)} if kind == "values" else (
        {"features": rng.random(L.shape) < 0.1} if kind == "features" else {})
    kw["spacing"] = rng.integers(1, 3, L.dimensions)
    got = cat.get_engine().run("batched.distance_transform", L, stack, **kw,
                               return_indices=True, backend=backend)
    assert len(got) == rows
    for b in range(rows):
        want = L.with_mask(stack[b]).distance_transform(**kw, return_indices=True,
                                                        backend=backend)
        for x, y in zip(got[b], want):
            np.testing.assert_array_equal(x, y)


def test_the_batch_processor_runs_lattices_of_one_shape_in_one_call():
    base = cat.Lattice(shape=(20, 30), periodic=(True, False))
    rng = np.random.default_rng(4)
    lats = [base.with_mask(rng.random(base.shape) < 0.8) for _ in range(5)]
    bp = cat.BatchProcessor(lats, progress=False, batched=True)
    res = bp.map("distance_transform", spacing=(1.0, 2.0))
    assert res.ok and bp.stats()["mode"] == "batched" and bp.stats()["launches"] == 1
    for got, L in zip(res, lats):
        np.testing.assert_array_equal(got, L.distance_transform(spacing=(1.0, 2.0)))
