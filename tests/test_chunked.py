"""``cat.ChunkedLattice``: one lattice labelled chunk by chunk on a real ``LocalCluster``
(two worker processes on loopback) and joined across the chunks' faces. Against the
same lattice labelled in memory (which the rest of the suite holds to SciPy, NetworkX and
cc3d): the same clusters under the documented numbering (checked on its own), their
sizes, spanning and wrapping, over hypothesis lattices (1-3 D, periodic axes, Moore
stencils, masks, bonds) and chunkings down to one site along an axis; the chunk-by-chunk
random lattices; bad input; and a worker lost after the labelling."""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import catalytic as cat
from tests.lattice.test_label import valued_specs
from tests.support.strategies import lattice_specs, make

distributed = pytest.importorskip("distributed", reason='needs pip install "catalytic[dask]"')
da = pytest.importorskip("dask.array", reason='needs pip install "catalytic[dask]"')

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client():
    """Two single-threaded workers talking TCP on loopback, in this process (worker
    processes would each import and load the kernels again, on every CI run: the
    tests that need processes, a killed worker and the pickling of every task, start
    their own)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        assert all(w.startswith("tcp://127.0.0.1") for w in c.scheduler_info()["workers"])
        yield c


def _chunkings(shape):
    """A strategy of chunk sizes per axis, one site up to the whole axis."""
    return st.tuples(*[st.integers(1, s) for s in shape])


def _same_components(comp, ref, client, chunks):
    """The chunked components equal the in-memory ones: the same clusters (a bijection
    of labels on the labelled sites), sizes and count, numbered as documented. Returns
    the map from chunked labels to in-memory ones."""
    # (a client that is not the default one: the arrays are computed on its cluster)
    labels = comp.labels.compute(scheduler=client)
    sizes = comp.sizes.compute(scheduler=client)
    assert labels.shape == ref.labels.shape and comp.count == ref.count
    assert sizes.shape == (ref.count,)
    on = ref.labels > 0
    assert ((labels > 0) == on).all()
    pairs = set(zip(labels[on].tolist(), ref.labels[on].tolist()))
    assert len(pairs) == ref.count == len({a for a, _ in pairs})
    assert all(sizes[a - 1] == ref.sizes[b - 1] for a, b in pairs)
    _numbering(labels, chunks)
    return dict(pairs)


def _same(C, L, chunks):
    """The chunked answers equal the in-memory ones: the components
    (:func:`_same_components`), and spanning and wrapping on every axis."""
    to_ref = _same_components(C.connected_components(), L.connected_components(), C.client,
                              chunks)
    span = C.spanning_clusters()
    want = L.spanning_clusters()
    for axis in range(L.dimensions):
        got = sorted(to_ref[a] for a in span.clusters[axis].tolist())
        assert got == want.clusters[axis].tolist(), axis
        assert C.percolates(axis) == L.percolates(axis)


def _chunked_like(L, sizes, client):
    """``L`` as a chunked lattice cut into ``sizes`` (its mask and bonds)."""
    mask = L.mask if L.mask is not None else np.ones(L.shape, bool)
    bonds = L.bonds
    return cat.ChunkedLattice(da.from_array(mask, chunks=sizes), periodic=L.periodic,
                              stencil=L.offsets, client=client,
                              bonds=None if bonds is None else
                              da.from_array(bonds, chunks=(bonds.shape[0],) + sizes))


def _numbering(labels, chunks):
    """Labels 1..count in order of (first chunk in C order holding the cluster, lowest
    chunk-local flat index of its sites there)."""
    bounds = [np.concatenate([[0], np.cumsum(c)]) for c in chunks]
    first = {}
    for idx in np.ndindex(*[len(c) for c in chunks]):
        where = tuple(slice(b[i], b[i + 1]) for b, i in zip(bounds, idx))
        block = labels[where].reshape(-1)
        for pos, lab in enumerate(block.tolist()):
            if lab > 0 and lab not in first:
                first[lab] = (idx, pos)
            # within a chunk the first visit in flat order is the lowest index
    order = sorted(first, key=lambda lab: first[lab])
    assert order == list(range(1, len(order) + 1))


@given(spec=lattice_specs(max_dim=3, max_sites=120, bonds=True), data=st.data())
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_chunked_labels_equal_the_in_memory_ones(client, spec, data):
    L = make(spec)
    C = _chunked_like(L, data.draw(_chunkings(L.shape), label="chunks"), client)
    _same(C, L, C.mask.chunks)


@given(case=valued_specs(max_sites=100), data=st.data())
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_chunked_labels_of_values_equal_the_in_memory_ones(client, case, data):
    """Multi-label and continuous values (ints, floats with delta, bools, uint8; a
    background or none), as ``Lattice.label`` gives them in memory."""
    spec, values, background, delta = case
    L = make(spec)
    assume(np.abs(L.offsets).max() <= 1)  # the knight's-move stencil reaches two steps
    C = _chunked_like(L, data.draw(_chunkings(L.shape), label="chunks"), client)
    comp = C.label(values, background=background, delta=delta)
    _same_components(comp, L.label(values, background=background, delta=delta), client,
                     C.mask.chunks)


def test_values_are_checked_before_the_graph_is_computed(client):
    C = cat.ChunkedLattice(np.ones((4, 6), bool), chunks=(2, 3), client=client)
    with pytest.raises(TypeError, match="boolean, integer or float"):
        C.label(np.array([["a"] * 6] * 4))
    with pytest.raises(ValueError, match="shape"):
        C.label(np.zeros((4, 5)))
    with pytest.raises(ValueError, match="tile the lattice"):
        C.label(da.zeros((4, 6), chunks=(4, 3)))
    for bad, err in ((-1, ValueError), (float("nan"), ValueError), ("1", TypeError)):
        with pytest.raises(err, match="delta"):
            C.label(np.zeros((4, 6)), delta=bad)
    with pytest.raises(ValueError, match="NaN"):
        C.label(np.zeros((4, 6)), background=float("nan"))
    values = np.zeros((4, 6))
    values[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):  # found when its chunk is labelled
        C.label(values, background=None)


@pytest.mark.parametrize("shape, periodic, stencil, chunks", [
    ((9, 11), True, "von_neumann", (1, 11)),  # one site along an axis: every layer a chunk
    ((9, 11), (False, True), "moore", (2, 3)),  # diagonal bonds across chunk corners
    ((5, 6, 7), (True, False, True), "moore", (2, 6, 1)),
    ((40,), True, "von_neumann", (7,)),
    ((3, 1, 4), True, "von_neumann", (1, 1, 2)),  # a periodic axis of one site
    ((2, 8), True, "moore", (1, 3)),  # a periodic axis of two sites
])
def test_chunkings_of_one_site_and_short_periodic_axes(client, shape, periodic, stencil,
                                                       chunks):
    rng = np.random.default_rng(len(shape) + sum(chunks))
    for p in (0.55, 1.0):
        mask = rng.random(shape) < p
        L = cat.Lattice(shape=shape, periodic=periodic, stencil=stencil, mask=mask)
        C = cat.ChunkedLattice(mask, chunks=chunks, periodic=periodic, stencil=stencil,
                               client=client)
        _same(C, L, C.mask.chunks)


def test_wrapping_needs_a_loop_not_a_seam(client):
    """A bar that straddles the periodic seam of axis 0 does not wrap it; a ring does;
    the bar crossing chunk boundaries and the seam as a single cluster."""
    m = np.zeros((10, 10), bool)
    m[8:10, 5] = m[0:3, 5] = True  # across the seam, five sites
    C = cat.ChunkedLattice(m, chunks=3, periodic=(True, False), client=client)
    comp = C.connected_components()
    assert comp.count == 1 and comp.sizes.compute(scheduler=client).tolist() == [5]
    assert not C.percolates(0)
    m[:, 5] = True
    assert cat.ChunkedLattice(m, chunks=3, periodic=(True, False), client=client).percolates(0)


@pytest.mark.parametrize("chunks", [(2, 6), (3, 2)])
def test_a_diagonal_ring_winds_across_both_seams_at_a_corner(client, chunks):
    """Sites (i, i) on a 6 x 6 torus with the Moore stencil: one cluster, closed by the
    diagonal bond from (5, 5) to (0, 0) across both seams at once, so it wraps both
    axes; the sites (i, 5 - i) close their loop the other way round. That corner bond
    alone, between (5, 5) and (0, 0), is a bar, wrapping nothing: the bond lies in the
    seams of both axes, and each must count both crossings."""
    bar = np.zeros((6, 6), bool)
    bar[5, 5] = bar[0, 0] = True
    for m, wraps in ((np.eye(6, dtype=bool), True), (np.fliplr(np.eye(6, dtype=bool)), True),
                     (bar, False)):
        L = cat.Lattice(shape=(6, 6), periodic=True, stencil="moore", mask=m)
        C = cat.ChunkedLattice(m, chunks=chunks, periodic=True, stencil="moore",
                               client=client)
        assert C.percolates(0) == C.percolates(1) == wraps
        _same(C, L, C.mask.chunks)


@pytest.mark.parametrize("kind", ["site", "bond"])
def test_random_lattices_are_made_on_the_workers_as_in_memory(client, kind):
    """Each draw is the uniform of its flat index: the same lattice for every chunking,
    ``cat.ops.random(...) < p`` in memory, and so the same answers."""
    shape, p, seed = (24, 30), 0.55 if kind == "site" else 0.5, 7
    want = cat.ops.random(shape if kind == "site" else (2,) + shape, seed) < p
    for chunks in ((5, 30), (24, 7), (1, 30)):
        C = cat.ChunkedLattice.random(shape, p, chunks=chunks, seed=seed, kind=kind,
                                      periodic=(True, False), client=client)
        got = C.mask.compute() if kind == "site" else C.bonds.compute()
        assert (got == want).all()
        if kind == "site":
            L = cat.Lattice(shape=shape, periodic=(True, False), mask=want)
        else:
            L = cat.Lattice(shape=shape, periodic=(True, False), bonds=want)
        _same(C, L, C.mask.chunks)


def test_bad_input_is_refused_before_the_graph_is_computed(client):
    m = np.ones((6, 6), bool)
    with pytest.raises(TypeError, match="bool"):
        cat.ChunkedLattice(m.astype(np.uint8), chunks=3, client=client)
    with pytest.raises(TypeError, match="bool"):
        cat.ChunkedLattice(da.ones((6, 6), chunks=3, dtype=np.uint8), client=client)
    with pytest.raises(ValueError, match="chunks="):
        cat.ChunkedLattice(da.from_array(m, chunks=3), chunks=2, client=client)
    with pytest.raises(ValueError, match="tile the lattice"):
        cat.ChunkedLattice(da.from_array(m, chunks=3), client=client,
                           bonds=da.ones((2, 6, 6), chunks=(2, 2, 3), dtype=bool))
    with pytest.raises(ValueError, match="shape"):
        cat.ChunkedLattice(m, chunks=3, client=client, bonds=np.ones((2, 6, 5), bool))
    with pytest.raises(ValueError, match="one\\s+step"):
        cat.ChunkedLattice(m, chunks=3, client=client, stencil=[[2, 0], [-2, 0]])
    unknown = da.from_array(np.arange(12), chunks=4)
    unknown = unknown[unknown % 2 == 0] >= 0  # chunks of unknown size
    with pytest.raises(ValueError, match="unknown"):
        cat.ChunkedLattice(unknown, client=client)
    with pytest.raises(ValueError, match="at least one site"):
        cat.ChunkedLattice(np.ones((0, 3), bool), client=client)
    with pytest.raises(ValueError, match="probability"):
        cat.ChunkedLattice.random((4, 4), 1.5, chunks=2, client=client)
    with pytest.raises(ValueError, match="kind"):
        cat.ChunkedLattice.random((4, 4), 0.5, chunks=2, kind="edge", client=client)
    with pytest.raises(ValueError, match="axis"):
        cat.ChunkedLattice(m, chunks=3, client=client).percolates(2)


def test_a_cluster_that_cannot_be_reached_is_a_clear_error():
    m = np.ones((4, 4), bool)
    if not _has_default_client():
        with pytest.raises(ValueError, match="no Dask client"):
            cat.ChunkedLattice(m, chunks=2)
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c:
        closed = distributed.Client(c, set_as_default=False)
        closed.close()
    with pytest.raises(ConnectionError, match="cannot be reached"):
        cat.ChunkedLattice(m, chunks=2, client=closed)


def _has_default_client():
    try:
        distributed.get_client()
    except ValueError:
        return False
    return True


def test_a_chunk_that_is_not_its_declared_dtype_is_a_clear_error(client):
    """A Dask array may declare one dtype and hold another: the chunk says so."""
    import dask

    good = da.from_delayed(dask.delayed(np.ones)((3, 4), bool), (3, 4), dtype=bool)
    bad = da.from_delayed(dask.delayed(np.ones)((3, 4), np.int8), (3, 4), dtype=bool)
    C = cat.ChunkedLattice(da.concatenate([good, bad]), client=client)
    with pytest.raises(TypeError, match="not bool"):
        C.connected_components()
    # values whose chunks disagree on dtype: their keys would not compare
    ints = da.from_delayed(dask.delayed(np.ones)((3, 4), np.int64), (3, 4), dtype=np.int64)
    floats = da.from_delayed(dask.delayed(np.ones)((3, 4), np.float64), (3, 4),
                             dtype=np.int64)
    C = cat.ChunkedLattice(da.ones((6, 4), chunks=(3, 4), dtype=bool), client=client)
    with pytest.raises(TypeError, match="declared dtype"):
        C.label(da.concatenate([ints, floats]))


def test_a_lost_worker_is_recomputed_and_the_answer_is_unchanged():
    """The pieces' sizes live on the workers between the labelling and the relabelling:
    a worker killed in between loses its share, Dask computes it again from the mask,
    and the labels and sizes are the in-memory ones still."""
    shape = (40, 48)
    mask = cat.ops.random(shape, 3) < 0.6
    L = cat.Lattice(shape=shape, periodic=(True, False), mask=mask)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        C = cat.ChunkedLattice(mask, chunks=(10, 12), periodic=(True, False), client=c)
        comp = C.connected_components()
        kept = list(C._merge().sizes.values())  # the pieces' sizes, on the workers
        held = c.who_has(kept)
        victim = next(iter(next(w for w in held.values() if w)))
        with contextlib.suppress(Exception):  # the worker dies before it answers
            c.run(os._exit, 1, workers=[victim])  # its nanny starts a fresh one
        _replaced(c, victim)
        _same(C, L, C.mask.chunks)
        assert comp.count == L.connected_components().count
        # now a worker killed while the labels are computed: the right labels, or an
        # error that says a worker was lost
        running = c.compute(comp.labels)
        victim = next(iter(c.scheduler_info()["workers"]))
        with contextlib.suppress(Exception):
            c.run(os._exit, 1, workers=[victim])
        try:
            got = running.result(timeout=120)
        except Exception as err:  # an error must say that a worker was lost
            assert isinstance(err, (distributed.scheduler.KilledWorker,
                                    distributed.client.FutureCancelledError)) or (
                "worker" in str(err).lower()), repr(err)
            return
        ref = L.connected_components()
        on = ref.labels > 0
        assert len(set(zip(got[on].tolist(), ref.labels[on].tolist()))) == ref.count


def _replaced(c, victim, timeout=60.0):
    """Wait until the scheduler has dropped the killed worker and its nanny's fresh one
    has joined: two workers, the victim not among them."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        workers = c.scheduler_info()["workers"]
        if victim not in workers and len(workers) == 2:
            return
        time.sleep(0.1)
    raise AssertionError(f"worker {victim} was not replaced in {timeout} s")


def test_the_class_docstring_example_holds_on_the_shared_cluster(client):
    m = np.array([[1, 1, 0, 1], [0, 1, 0, 1], [1, 1, 0, 1]], bool)
    C = cat.ChunkedLattice(m, chunks=2, periodic=(False, True), client=client)
    comp = C.connected_components()
    assert comp.count == 1 and C.percolates(0) and not C.percolates(1)
    assert math.prod(comp.labels.shape) == 12


def test_stats_count_the_faces_and_pieces(client):
    """``stats()`` against a count made here: every chunk's faces (two layers an axis),
    its clusters labelled in memory with every axis open, and the bonds that join two
    open sites across a boundary between chunks."""
    shape, chunks = (12, 10), (5, 4)
    mask = cat.ops.random(shape, 9) < 0.6
    C = cat.ChunkedLattice(mask, chunks=chunks, periodic=(True, False), client=client)
    s = C.stats()
    bounds = [np.concatenate([[0], np.cumsum(c)]) for c in C.mask.chunks]
    faces = pieces = 0
    for idx in np.ndindex(*C.mask.numblocks):
        block = mask[tuple(slice(b[i], b[i + 1]) for b, i in zip(bounds, idx))]
        faces += 2 * (block.shape[0] + block.shape[1])
        pieces += cat.Lattice(shape=block.shape, mask=block).connected_components().count
    # across the boundaries of axis 0 (rows 4|5, 9|10 and the seam 11|0) and axis 1
    across = sum(int((mask[r] & mask[(r + 1) % 12]).sum()) for r in (4, 9, 11))
    across += sum(int((mask[:, c] & mask[:, c + 1]).sum()) for c in (3, 7))
    assert s["chunks"] == 9 and s["face_sites"] == faces and s["pieces"] == pieces
    assert s["bonds_across"] == across
    assert 0 < s["pieces_on_faces"] <= pieces and s["face_bytes"] >= 4 * faces
    assert s["chunks_s"] > 0 and s["merge_s"] > 0
