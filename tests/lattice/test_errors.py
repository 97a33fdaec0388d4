"""Bad input: clear errors before any work, and the user's arrays are never modified."""

from __future__ import annotations

import numpy as np
import pytest

import catalytic as cat
import catalytic.memory as memory_mod
from tests.support.backends import available_backends

TINY = 1000  # bytes "available" when a test fakes a nearly full machine


# -- shapes ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape, match",
    [
        # an axis of 0 sites is a zero-size lattice (tests/test_geometry.py), not an error
        ((-1, 4), "positive"),
        ((3, -2, 2), "positive"),
        ((3.0, 4), "integers"),
        ((2.5,), "positive integers"),
        ((), "at least one axis"),
        ((True, 3), "positive integers"),
        (("3", 4), "positive integers"),
        ((2**32, 2**32), "int64"),
        ((2**62, 4), "int64"),
        (None, "shape"),
    ],
)
def test_bad_shapes_raise_value_error(shape, match):
    with pytest.raises(ValueError, match=match):
        cat.Lattice(shape=shape)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dimensions": 0, "size": 4},
        {"dimensions": -2, "size": 4},
        {"dimensions": 2, "size": 0},
        {"dimensions": 2, "size": -3},
        {"dimensions": 2, "size": 2.0},
        {"dimensions": 2.0, "size": 2},
        {"dimensions": 3, "size": (2, 2)},
        {"size": 5},
        {"dimensions": 2, "size": 3, "shape": (3, 3)},
        {},
    ],
)
def test_bad_older_api_arguments(kwargs):
    with pytest.raises(ValueError):
        cat.UnifiedCatalyticLattice(**kwargs)


def test_bad_periodic_and_seed():
    with pytest.raises(ValueError, match="periodic"):
        cat.Lattice(shape=(3, 3), periodic=(True,))
    with pytest.raises(ValueError, match="periodic"):
        cat.Lattice(shape=(3, 3), periodic=(1, 0))
    with pytest.raises(ValueError):
        cat.Lattice(shape=(3,), seed=-1)
    with pytest.raises(TypeError):
        cat.Lattice(shape=(3,), seed=1.5)
    with pytest.raises(ValueError):
        cat.Lattice(shape=(3,), aux_memory_size=0)
    with pytest.raises(TypeError):
        cat.Lattice(shape=(3,), aux_memory_size=10.0)


# -- stencils --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "stencil, match",
    [
        ("hexagonal", "unknown stencil"),
        ("Moore", "unknown stencil"),
        (np.array([[1, 0], [-1, 0], [0, 0]]), "zero offset"),
        (np.array([[1, 0], [0, 1]]), "symmetric"),
        (np.array([[1, 0], [-1, 0], [1, 0], [-1, 0]]), "duplicate"),
        (np.array([[1, 0, 0], [-1, 0, 0]]), r"\(k, 2\)"),
        (np.array([[0.5, 0], [-0.5, 0]]), "integers"),
        (np.zeros((0, 3), dtype=int), r"\(k, 2\)"),  # empty is fine, with d columns
    ],
)
def test_bad_stencils_raise_value_error(stencil, match):
    with pytest.raises(ValueError, match=match):
        cat.Lattice(shape=(4, 4), stencil=stencil)


# -- mask and weights ------------------------------------------------------------------------------
def test_mask_errors():
    with pytest.raises(ValueError, match="shape"):
        cat.Lattice(shape=(3, 4), mask=np.ones((4, 3), bool))
    with pytest.raises(ValueError, match="shape"):
        cat.Lattice(shape=(3, 4), mask=np.ones(12, bool))
    for bad in (np.ones((3, 4), int), np.ones((3, 4)), np.ones((3, 4), np.uint8)):
        with pytest.raises(TypeError, match="bool"):
            cat.Lattice(shape=(3, 4), mask=bad)


@pytest.mark.parametrize("bad_value, match", [(np.nan, "NaN"), (-0.5, ">= 0"), (np.inf, "inf"),
                                              (-np.inf, "inf")])
def test_weight_errors(bad_value, match):
    w = np.ones((3, 4))
    w[1, 2] = bad_value
    with pytest.raises(ValueError, match=match) as info:
        cat.Lattice(shape=(3, 4), weights=w)
    assert "[1, 2]" in str(info.value)  # names where


def test_weight_shape_and_dtype_errors():
    with pytest.raises(ValueError, match="shape"):
        cat.Lattice(shape=(3, 4), weights=np.ones((3, 5)))
    with pytest.raises(TypeError):
        cat.Lattice(shape=(3, 4), weights=np.ones((3, 4), bool))
    with pytest.raises(TypeError):
        cat.Lattice(shape=(3, 4), weights=np.full((3, 4), "a"))
    # integer weights are fine (copied as float64)
    L = cat.Lattice(shape=(3, 4), weights=np.ones((3, 4), np.int32))
    assert L.weights.dtype == np.float64


# -- methods and options ---------------------------------------------------------------------------
def test_unknown_methods_raise_value_error():
    L = cat.Lattice(shape=(4, 4))
    with pytest.raises(ValueError, match="unknown centrality method 'pagerank'"):
        L.calculate_centrality("pagerank")
    with pytest.raises(ValueError, match="unknown community method 'spectral'"):
        L.find_communities("spectral")
    with pytest.raises(ValueError, match="unknown operation"):
        L.run("no_such_operation")
    with pytest.raises(ValueError, match="axis 2 out of range"):
        L.percolates(2)
    with pytest.raises(ValueError, match="max_length"):
        L.find_all_paths(0, 5, max_length=-1)
    with pytest.raises(ValueError, match="limit"):
        L.find_all_paths(0, 5, limit=0)
    with pytest.raises(ValueError, match="steps"):
        L.diffuse(np.zeros((4, 4)), steps=-1)
    with pytest.raises(ValueError, match="alpha"):
        L.diffuse(np.zeros((4, 4)), steps=1, alpha=np.nan)


def test_edge_betweenness_size_limit():
    L = cat.Lattice(shape=(50, 50))
    with pytest.raises(ValueError, match="louvain"):
        L.find_communities("edge_betweenness")


# -- sites -----------------------------------------------------------------------------------------
def test_out_of_range_and_blocked_sites_raise_index_error(backend):
    mask = np.ones((4, 5), bool)
    mask[1, 1] = False
    L = cat.Lattice(shape=(4, 5), mask=mask)
    blocked_flat = 6
    calls = [
        lambda s: L.distance_field(s, backend=backend),
        lambda s: L.find_shortest_path(s, 0, backend=backend),
        lambda s: L.find_shortest_path(0, s, backend=backend),
        lambda s: L.count_shortest_paths(0, s, backend=backend),
        lambda s: L.find_path_catalytic(s, 0, backend=backend),
        lambda s: L.get_neighbors(s),
    ]
    for call in calls:
        for site in (20, -1, (4, 0), (0, 5), (-1, 0), 10**20):
            with pytest.raises(IndexError):
                call(site)
        for site in (blocked_flat, (1, 1)):
            with pytest.raises(IndexError, match="blocked"):
                call(site)
    with pytest.raises(IndexError, match="blocked"):
        L.distance_field(np.array([0, blocked_flat]), backend=backend)
    with pytest.raises(IndexError):
        L.distance_field(np.array([0, 25]), backend=backend)
    with pytest.raises(IndexError):
        L.index_to_coords(20)
    with pytest.raises(IndexError):
        L.coords_to_index((4, 0))


def test_bad_site_types():
    L = cat.Lattice(shape=(4, 5))
    with pytest.raises(TypeError):
        L.distance_field(1.5)
    with pytest.raises(TypeError):
        L.distance_field([True])
    with pytest.raises(ValueError, match="at least one"):
        L.distance_field([])
    with pytest.raises(ValueError):
        L.find_shortest_path((1, 2, 3), 0)
    with pytest.raises(TypeError):
        L.coords_to_index((1.0, 2.0))


# -- fields and transforms -------------------------------------------------------------------------
def test_field_errors():
    L = cat.Lattice(shape=(3, 4))
    with pytest.raises(ValueError, match="shape"):
        L.laplacian(np.zeros((4, 3)))
    with pytest.raises(TypeError):
        L.laplacian(np.zeros((3, 4), bool))
    # NaN and inf are values, not errors: they propagate (test_fields_transforms.py)
    assert np.isnan(L.laplacian(np.full((3, 4), np.nan))).all()


def test_xor_float_data_raises_type_error(backend):
    L = cat.Lattice(shape=(3,))
    for bad in (np.zeros(3), np.float32(1.0), [1.0, 2.0]):
        with pytest.raises(TypeError, match="integer"):
            L.xor_transform(bad, backend=backend)


# each refused dtype gets a message that is true for it, and says what to do instead
XOR_REFUSALS = [
    (np.array([True, False]), r"dtype bool; booleans .*\.astype\(np\.uint8\)"),
    (np.ones(3, np.float32), r"float32; XOR of float bits .*\.view\(np\.uint32\)"),
    (np.ones(3, np.float16), r"float16; XOR of float bits .*\.view\(np\.uint16\)"),
    (np.ones(2, np.complex128), r"complex dtype complex128; XOR of complex .*np\.uint64"),
    (np.ones(2, np.complex64), r"complex dtype complex64; .*np\.uint32"),
    (np.array([1, 2**70], dtype=object), r"dtype object .*np\.asarray\(data, dtype=np\.int64\)"),
    (np.array(["ab", "c"]), r"string dtype <U2; .*encode\(\)"),
    (np.array([b"ab", b"c"]), r"bytes dtype \|S2; .*\.view\(np\.uint8\)"),
    (np.zeros(2, dtype=[("a", np.int32), ("b", np.float64)]), r"structured dtype .*data\['name'\]"),
    (np.zeros(2, dtype="V4"), r"raw void dtype \|V4"),
    (np.array(["2024-01-01"], dtype="datetime64[D]"), r"datetime64\[D\] \(datetimes\); .*np\.int64"),
    (np.array([3], dtype="timedelta64[s]"), r"timedelta64\[s\] \(time differences\)"),
]


@pytest.mark.parametrize("data, message", XOR_REFUSALS, ids=[str(d.dtype) for d, _ in XOR_REFUSALS])
def test_xor_refusals_say_what_the_data_is(data, message, backend):
    L = cat.Lattice(shape=(3,))
    with pytest.raises(TypeError, match=message) as err:
        L.xor_transform(data, backend=backend)
    assert str(err.value).startswith("xor_transform needs integer data, got ")
    if data.dtype.kind != "f":
        assert "float" not in str(err.value)


# -- memory ----------------------------------------------------------------------------------------
@pytest.fixture
def tiny_machine(monkeypatch):
    monkeypatch.setattr(memory_mod, "available_memory", lambda: TINY)


def _assert_names_bytes(err, needed_at_least):
    assert isinstance(err, MemoryError) and isinstance(err, cat.InsufficientMemoryError)
    assert err.available == TINY and err.needed >= needed_at_least
    msg = str(err)
    assert f"{err.needed} bytes" in msg and f"{TINY} bytes" in msg


def test_lattice_too_big_for_memory(tiny_machine):
    with pytest.raises(cat.InsufficientMemoryError) as info:
        cat.Lattice(shape=(4, 4), aux_memory_size=64 * 2**20)
    _assert_names_bytes(info.value, 64 * 2**20)
    weights = np.ones((2048, 2048), dtype=np.float32)  # the copy would be 32 MiB of float64
    with pytest.raises(MemoryError) as info:
        cat.Lattice(shape=weights.shape, weights=weights)
    _assert_names_bytes(info.value, 8 * weights.size)


def test_operation_too_big_for_memory(tiny_machine):
    L = cat.Lattice(shape=(2048, 2048))  # implicit: constructing needs no memory
    eng = cat.get_engine()
    before = eng.router.stats().get("distance_field", {})
    with pytest.raises(cat.InsufficientMemoryError) as info:
        L.distance_field(0)
    _assert_names_bytes(info.value, 16 * L.n_points)
    assert "distance_field" in str(info.value)
    assert eng.router.stats().get("distance_field", {}) == before  # nothing ran
    with pytest.raises(cat.InsufficientMemoryError) as info:
        cat.Lattice(shape=(100, 100)).get_adjacency_matrix(dense=True)
    _assert_names_bytes(info.value, 10_000**2)
    with pytest.raises(cat.InsufficientMemoryError):
        cat.ops.random((2048, 2048))


def test_memory_guard_leaves_small_work_alone(tiny_machine):
    L = cat.Lattice(shape=(64, 64))
    assert L.distance_field(0).max() == 126  # below the check threshold: no psutil call


# -- inputs are never modified ---------------------------------------------------------------------
def test_user_arrays_unchanged_and_copied(backend):
    rng = np.random.default_rng(0)
    mask = rng.random((7, 9)) < 0.8
    mask[0, 0] = mask[-1, -1] = True
    weights = rng.uniform(0.5, 2, size=(7, 9))
    field = rng.normal(size=(7, 9))
    copies = [a.copy() for a in (mask, weights, field)]
    L = cat.Lattice(shape=(7, 9), mask=mask, weights=weights)
    U = cat.Lattice(shape=(7, 9), mask=mask)
    before = {
        "d": L.distance_field(0, backend=backend),
        "c": U.connected_components(backend=backend).labels,
        "lap": U.laplacian(field, backend=backend),
    }
    for call in (
        lambda: L.find_shortest_path(0, 62, backend=backend),
        lambda: U.count_shortest_paths(0, 62, backend=backend),
        lambda: U.diffuse(field, 3, 0.1, backend=backend),
        lambda: U.find_path_catalytic(0, 62, backend=backend),
        lambda: U.percolates(0, backend=backend),
        lambda: U.calculate_centrality("degree", backend=backend),
    ):
        call()
    for a, c in zip((mask, weights, field), copies):
        np.testing.assert_array_equal(a, c)
    # the lattice holds copies: mutating the user's arrays later changes nothing
    mask[:] = False
    weights[:] = 100.0
    np.testing.assert_array_equal(L.mask, copies[0])
    np.testing.assert_array_equal(L.weights, copies[1])
    np.testing.assert_array_equal(L.distance_field(0, backend=backend), before["d"])
    np.testing.assert_array_equal(U.connected_components(backend=backend).labels, before["c"])
    np.testing.assert_array_equal(U.laplacian(field, backend=backend), before["lap"])
    # and the arrays the lattice hands out are copies too
    L.mask[:] = False
    assert L.n_open == int(copies[0].sum())


def test_xor_data_and_key_unchanged(backend):
    L = cat.Lattice(shape=(3,))
    data = np.arange(100, dtype=np.int64)
    key = np.array([7, 11, 13], dtype=np.int64)
    d0, k0 = data.copy(), key.copy()
    L.xor_transform(data, backend=backend)
    L.xor_transform(data, key, backend=backend)
    np.testing.assert_array_equal(data, d0)
    np.testing.assert_array_equal(key, k0)


def test_rejected_float_data_is_left_untouched():
    data = np.ones(5)
    keep = data.copy()
    L = cat.Lattice(shape=(5,))
    with pytest.raises(TypeError):
        L.xor_transform(data)
    np.testing.assert_array_equal(data, keep)


def test_error_messages_carry_the_offending_value():
    with pytest.raises(ValueError, match="-7"):
        cat.Lattice(shape=(3, -7))
    with pytest.raises(ValueError, match="'hexagonal'"):
        cat.Lattice(shape=(3,), stencil="hexagonal")
    L = cat.Lattice(shape=(3, 3))
    with pytest.raises(IndexError, match="9"):
        L.distance_field(9)
    assert all(b in cat.get_engine().backends() for b in available_backends())


def test_reference_backend_is_ruled_out_when_its_explicit_graph_cannot_fit(monkeypatch):
    """The numpy reference builds a CSR graph (~40 B per stencil entry); when that does not
    fit, the router says so and picks numba-cpu; forcing numpy raises the MemoryError
    subclass with the byte counts, before any allocation."""
    import catalytic.memory as M

    L = cat.Lattice(shape=(400, 400, 400))  # 6.4e7 sites: graph ~15.4 GiB
    monkeypatch.setattr(M, "available_memory", lambda: 2 * 2**30)
    dec = cat.get_engine().explain("distance_field", L, 0)
    assert dec.backend == "numba-cpu"
    assert "explicit graph needs" in dec.rejected["numpy"]
    with pytest.raises(cat.InsufficientMemoryError) as info:
        L.distance_field(0, backend="numpy")
    assert info.value.available == 2 * 2**30
    assert info.value.needed > info.value.available
    assert str(info.value.needed) in str(info.value)


def test_sources_list_of_d_ints_is_refused_as_ambiguous():
    L = cat.Lattice(shape=(4, 5))
    with pytest.raises(ValueError, match="ambiguous"):
        L.distance_field([1, 2])
    # the two explicit spellings mean what they say
    by_coords = L.distance_field((1, 2))
    by_index = L.distance_field(np.array([1, 2]))
    assert by_coords[1, 2] == 0 and by_coords.reshape(-1)[1] != 0
    assert by_index.reshape(-1)[1] == 0 and by_index.reshape(-1)[2] == 0
    # a list of another length is flat indices, a nested list is coordinate rows
    assert (L.distance_field([0, 1, 2]).reshape(-1)[:3] == 0).all()
    assert L.distance_field([[1, 2], [3, 4]])[3, 4] == 0


def test_unsigned_indices_beyond_int64_are_named_not_wrapped():
    L = cat.Lattice(shape=(4, 5))
    with pytest.raises(IndexError, match="18446744073709551615"):
        L.distance_field(np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(IndexError, match="18446744073709551615"):
        L.index_to_coords(np.uint64(2**64 - 1))


def test_bools_are_not_sites_or_axes():
    L = cat.Lattice(shape=(4, 5))
    with pytest.raises(TypeError):
        L.find_shortest_path(True, 3)
    with pytest.raises(TypeError):
        L.distance_field(True)
    with pytest.raises(TypeError):
        L.percolates(axis=True)


def test_object_buffers_and_huge_offsets_are_refused():
    L = cat.Lattice(shape=(4, 5))
    with pytest.raises(TypeError, match="auxiliary_memory"):
        L.find_path_catalytic(0, 19, auxiliary_memory=np.empty(40, dtype=object))
    with pytest.raises(ValueError, match="2\\*\\*31"):
        cat.Lattice(shape=(4, 5), periodic=True, stencil=[[2**62, 0], [-(2**62), 0]])


def test_to_networkx_refuses_graphs_that_cannot_fit(monkeypatch):
    monkeypatch.setattr(memory_mod, "available_memory", lambda: 2**30)
    L = cat.Lattice(shape=(1000, 1000, 100))
    with pytest.raises(cat.InsufficientMemoryError, match="networkx graph"):
        L.to_networkx()


# -- GPU arrays on a machine that cannot use them ------------------------------------------------
class _ForeignGPUArray:
    """What CuPy or PyTorch hand over: only ``__cuda_array_interface__``."""

    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f8", "data": (4096, False),
                                "version": 3, "strides": None}


@pytest.mark.skipif(cat.get_engine().backends()["cuda"][0], reason="needs a machine without CUDA")
def test_a_gpu_array_without_a_usable_gpu_is_a_type_error_that_says_so():
    with pytest.raises(TypeError, match="GPU array"):
        cat.ops.normalize(_ForeignGPUArray())
    with pytest.raises(TypeError, match="GPU array"):
        cat.Lattice(shape=(3,)).laplacian(_ForeignGPUArray())
