"""The igraph backend gives the reference backend's answers (hypothesis over lattices
with periodic axes, stencils, masks and weights, zeros included), routes and refuses
like a backend, and keeps one graph per living lattice.

Tested on a private engine, from this checkout (catalytic's pyproject puts
``plugins/catalytic-igraph`` on pytest's ``pythonpath``): installing the plugin would add
a backend to every engine (the main suite's too), which is what a user who wants it does
with ``pip install plugins/catalytic-igraph``."""

from __future__ import annotations

import doctest
import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import catalytic as cat

pytest.importorskip("igraph", reason="python-igraph is not installed")
import catalytic_igraph as cig  # noqa: E402  (from the checkout: pyproject's pytest pythonpath)


@pytest.fixture(scope="module")
def eng():
    engine = cat.Engine(disable_plugin_autoload=True)
    engine.register_plugin(cig, "igraph")
    return engine


@st.composite
def lattices(draw, max_sites=60):
    d = draw(st.integers(1, 3))
    cap = {1: 40, 2: 8, 3: 4}[d]
    shape = tuple(draw(st.lists(st.integers(1, cap), min_size=d, max_size=d)))
    while np.prod(shape) > max_sites:
        shape = tuple(max(1, s - 1) if s == max(shape) else s for s in shape)
    periodic = tuple(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    stencil = draw(st.sampled_from(["von_neumann", "moore"] if d > 1 else ["von_neumann"]))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    mask = rng.random(shape) < 0.75 if draw(st.booleans()) else None
    if mask is not None:
        mask.flat[0] = True
    weights = None
    if draw(st.booleans()):
        weights = rng.integers(0, 4, shape).astype(float)  # zero-cost sites included
    return dict(shape=shape, periodic=periodic, stencil=stencil, mask=mask, weights=weights)


@settings(max_examples=40, deadline=None)
@given(spec=lattices())
def test_same_answers_as_the_reference(eng, spec):
    L = cat.Lattice(**spec, engine=eng)
    a, b = L.distance_field(0, backend="igraph"), L.distance_field(0, backend="numpy")
    assert a.dtype == b.dtype and np.array_equal(a, b)
    ca, cb = L.connected_components(backend="igraph"), L.connected_components(backend="numpy")
    assert ca.count == cb.count and ca.labels.dtype == cb.labels.dtype
    assert np.array_equal(ca.labels, cb.labels) and np.array_equal(ca.sizes, cb.sizes)
    for method in ("closeness", "betweenness"):
        x = L.calculate_centrality(method, backend="igraph")
        y = L.calculate_centrality(method, backend="numpy")
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True)


def test_routes_and_refuses_like_a_backend(eng):
    L = cat.Lattice(shape=(6, 6), engine=eng)
    d = eng.explain("connected_components", L, backend="igraph")
    assert d.backend == "igraph" and "plugin default" in d.sources["igraph"]
    assert eng.backends()["igraph"][0] and "python-igraph" in eng.backends()["igraph"][1]
    d = eng.explain("centrality", L, method="eigenvector")
    assert "not implemented on the igraph backend" in d.rejected["igraph"]
    src = np.array([0, 35])
    np.testing.assert_array_equal(L.distance_field(src, backend="igraph"),
                                  L.distance_field(src, backend="numpy"))


def test_an_option_added_after_the_plugin_was_written_is_refused_with_its_name(eng):
    """distance_field grew ``spacing`` and ``return_parents``; this plugin's
    implementation takes neither: calls without them still go to it, calls with them
    are refused there with the option's name, and forcing it is an error."""
    L = cat.Lattice(shape=(6, 6), engine=eng)
    assert eng.explain("distance_field", L, 0, backend="igraph").backend == "igraph"
    d = eng.explain("distance_field", L, 0, spacing=(1, 2))
    assert "takes no spacing" in d.rejected["igraph"] and d.backend != "igraph"
    d = eng.explain("distance_field", L, 0, return_parents=True)
    assert "takes no parents" in d.rejected["igraph"]
    np.testing.assert_array_equal(L.distance_field(0, spacing=(1, 2)),
                                  L.distance_field(0, spacing=(1, 2), backend="numpy"))
    with pytest.raises(cat.errors.NoBackendError, match="takes no spacing"):
        L.distance_field(0, spacing=(1, 2), backend="igraph")


def test_one_graph_per_living_lattice(eng):
    L = cat.Lattice(shape=(5, 5), engine=eng)
    L.connected_components(backend="igraph")
    L.distance_field(0, backend="igraph")
    assert sum(1 for k in cig._graphs.keys() if k is L) == 1
    before = len(cig._graphs)
    del L
    gc.collect()
    assert len(cig._graphs) == before - 1


def test_docstring_example():
    assert doctest.testmod(cig).failed == 0
