"""The cuda backend's cached device copies of a lattice's mask and weights: used in
place by every kernel host function (never copied back and forth per call), and never
out of step with the host arrays (those are read-only)."""

from __future__ import annotations

import numpy as np
import pytest

import catalytic as cat
from catalytic.backends import cuda_backend as cb

sim = pytest.mark.sim


def _masked(shape, periodic, stencil="von_neumann", seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) > 0.3
    return cat.Lattice(shape=shape, periodic=periodic, stencil=stencil, mask=mask)


@sim
@pytest.mark.parametrize("shape, periodic, stencil", [
    ((9, 13), (True, False), "von_neumann"),
    ((2, 9), (True, True), "moore"),  # dedupe kernel
])
@pytest.mark.parametrize("op", ["laplacian", "diffuse"])
def test_masked_field_ops_copy_only_the_field_after_the_first_call(shape, periodic, stencil, op):
    L = _masked(shape, periodic, stencil)
    g = L.geometry
    assert g.mask is not None and g.dedupe == (stencil == "moore")
    f = np.random.default_rng(1).standard_normal(shape)
    kw = {"steps": 3, "alpha": 0.1} if op == "diffuse" else {}
    want = getattr(L, op)(f, backend="numpy", **kw)
    getattr(L, op)(f, backend="cuda", **kw)  # caches the mask on the device
    for _ in range(2):
        cb.reset_transfer_stats()
        got = getattr(L, op)(f, backend="cuda", **kw)
        t = cb.transfer_stats()
        # the field alone: the mask (g.open_flat.nbytes) and the lattice tables stay put
        assert t["h2d_bytes"] == f.nbytes, (t, g.open_flat.nbytes)
        assert t["d2h_bytes"] == got.nbytes
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@sim
def test_the_cached_mask_and_weights_cannot_fall_out_of_step():
    rng = np.random.default_rng(2)
    L = cat.Lattice(shape=(6, 7), mask=rng.random((6, 7)) > 0.2,
                    weights=rng.random((6, 7)) + 0.1)
    src = int(L.geometry.open_sites()[0])
    first = L.distance_field(src, backend="cuda")  # caches mask and weights
    assert {"open_", "weights"} <= set(cb.resident(L))
    g = L.geometry
    for a in (g.mask, g.weights, g.open_flat):
        with pytest.raises(ValueError, match="read-only"):
            a.reshape(-1)[src] = 0
    np.testing.assert_array_equal(L.distance_field(src, backend="cuda"), first)
    np.testing.assert_allclose(first, L.distance_field(src, backend="numpy"), rtol=1e-12)


@sim
def test_graph_calls_reuse_tables_and_bring_back_only_results():
    """After a first call, a weighted path search copies over only its source and its
    sweep flag (the lattice tables, mask and weights are on the device already) and
    copies back only the costs and the flag readings, not the weights and mask it walks
    on (the host has those); closeness copies back no mask either."""
    rng = np.random.default_rng(3)
    L = cat.Lattice(shape=(7, 9), mask=rng.random((7, 9)) > 0.2,
                    weights=rng.random((7, 9)) + 0.1)
    n = L.geometry.n_points
    sites = np.flatnonzero(L.geometry.open_flat)
    s, e = int(sites[0]), int(sites[-1])
    want = L.find_shortest_path(s, e, backend="numpy")
    L.find_shortest_path(s, e, backend="cuda")  # caches the tables, mask and weights
    cb.reset_transfer_stats()
    got = L.find_shortest_path(s, e, backend="cuda")
    t = cb.transfer_stats()
    # over: the source (an int32 worklist entry), the near-far counters, threshold and
    # minima, the weight-sum cells (4 + 24 + 8 + 16 + 16 bytes); neither tables, mask
    # nor weights
    assert t["h2d_bytes"] == 68, t
    # back: the costs, the weight sums and one 24-byte count reading per batch of steps;
    # the weights (8 bytes a site) or the mask (63 bytes) would show
    extra = t["d2h_bytes"] - 8 * n - 16
    assert extra % 24 == 0 and 0 < extra < 8 * n, t
    np.testing.assert_array_equal(got.path, want.path)
    L.calculate_centrality("closeness", backend="cuda")
    cb.reset_transfer_stats()
    L.calculate_centrality("closeness", backend="cuda")
    assert cb.transfer_stats()["d2h_bytes"] < L.geometry.open_flat.nbytes + 64 * 16
    # after a GPU failure the cached tables go with the lattices' copies
    from catalytic.kernels.cuda import graph

    assert graph._table_cache
    cb.cleanup()
    assert not graph._table_cache


@sim
def test_hop_path_is_walked_on_the_device():
    """An unweighted path search copies back the end's distance, the frontier counts and
    the path itself, never the n distances (the walk back runs on the device); it is
    still the CPU twin's path (smallest index one hop closer at every tie)."""
    rng = np.random.default_rng(4)
    L = cat.Lattice(shape=(9, 11), periodic=(True, False), mask=rng.random((9, 11)) > 0.1)
    sites = np.flatnonzero(L.geometry.open_flat)
    s, e = int(sites[0]), int(sites[-1])
    want = L.find_shortest_path(s, e, backend="numpy")
    assert want.path.shape[0] > 2
    L.find_shortest_path(s, e, backend="cuda")  # caches the tables and the mask
    cb.reset_transfer_stats()
    got = L.find_shortest_path(s, e, backend="cuda")
    t = cb.transfer_stats()
    np.testing.assert_array_equal(got.path, want.path)
    assert got.distance == want.distance
    extra = t["d2h_bytes"] - 8 - 8 * want.path.shape[0]  # end's distance, the path
    assert extra % 24 == 0 and 0 < extra < 8 * L.n_points, t  # count readings only
