"""The operation catalogue: the built-in operations, their argument validation, and
their work and memory models.

Backends give implementations; what an operation *is* (its arguments, its errors, how
much work and memory it takes) lives here, once, and what it returns in
:mod:`catalytic.results`. :data:`CATALOGUE` lists them, and this module declares them as
the engine's first plugin (``"catalytic"``), through the same hook a third-party plugin
uses.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from catalytic.hookspecs import hookimpl


CENTRALITY_METHODS = ("degree", "closeness", "betweenness", "eigenvector")
COMMUNITY_METHODS = ("louvain", "label_propagation", "edge_betweenness")
REDUCE_OPS = ("sum", "min", "max", "mean")
UNARY_OPS = ("neg", "abs", "sqrt", "exp", "log", "sin", "cos")
BINARY_OPS = ("add", "sub", "mul", "div", "max", "min", "pow")
DISTRIBUTIONS = ("uniform", "normal", "integers")

#: find_all_paths stops and raises past this many paths unless told otherwise
DEFAULT_PATH_LIMIT = 100_000
#: find_all_paths stops and raises after this many search steps (sites pushed onto the
#: depth-first path) unless told otherwise, so that a search without ``max_length`` on a
#: large lattice ends before it fills memory (its cost: reports/design_notes.md)
DEFAULT_SEARCH_STEPS = 1_000_000


# -- helpers --------------------------------------------------------------------------
def geom(lat):
    return lat.geometry


def sites_work(lat, *_, **__) -> float:
    g = lat.geometry
    return float(g.n_points * len(g.offsets))


def centrality_work(lat, *, method="degree", k=None, seed=None):
    """Degree is one pass; closeness and betweenness are one BFS per site (per sampled
    source for betweenness with ``k``); eigenvector is an iterative eigensolver (counted
    as 100 passes)."""
    base = sites_work(lat)
    if method in ("closeness", "betweenness"):
        return base * (lat.geometry.n_open if k is None else k)
    if method == "eigenvector":
        return base * 100
    return base


def on_device(x) -> bool:
    """True for a GPU array: anything exposing ``__cuda_array_interface__``, or Numba's
    device arrays (whose simulator version marks itself with ``__cuda_ndarray__``)."""
    if isinstance(x, np.ndarray):
        return False
    return hasattr(x, "__cuda_array_interface__") or bool(getattr(x, "__cuda_ndarray__", False))


def device_array(x, name, *, float64=False):
    """A GPU argument as a Numba device array, checked from its metadata (nothing is
    copied). Arrays from other libraries (CuPy, PyTorch, ...) are viewed through
    ``__cuda_array_interface__``; results of the cuda backend are Numba device arrays,
    which expose that interface in turn."""
    if not getattr(x, "__cuda_ndarray__", False):
        try:
            from numba import cuda
        except ImportError:
            raise TypeError(
                f"{name} is a GPU array; GPU arrays need the cuda backend: "
                'pip install "catalytic[cuda]"'
            ) from None
        try:
            x = cuda.as_cuda_array(x)
        except Exception as err:  # no driver, or an interface Numba cannot read
            raise TypeError(
                f"{name} is a GPU array that Numba cannot use here ({type(err).__name__}: "
                f"{str(err).strip()})"
            ) from err
    dt = np.dtype(x.dtype)
    if dt == np.bool_ or not (np.issubdtype(dt, np.integer) or np.issubdtype(dt, np.floating)):
        raise TypeError(f"{name} must be a real numeric array, got dtype {dt}")
    if float64 and dt != np.float64:
        raise TypeError(f"a GPU {name} must be float64 (cast it on the device), got {dt}")
    if not x.is_c_contiguous():
        raise ValueError(f"a GPU {name} must be C-contiguous")
    return x


def _lattice_field(lat, field, name="field"):
    """A site field for ``laplacian``/``diffuse``: the lattice's shape (or flat), real
    numbers; GPU fields are checked from their metadata only.

    NaN and inf are accepted and propagate as IEEE arithmetic makes them, as
    ``scipy.ndimage.laplace`` and NumPy do: a non-finite value at an open site makes its
    own Laplacian value and its open neighbours' non-finite (``inf - inf`` and
    ``0 * inf`` are NaN), and a diffusion step spreads it one site further. Blocked sites
    are not part of the lattice: whatever they hold, their Laplacian is 0 and diffusion
    leaves them as they are. Every backend gives the same NaN positions. This is the
    rule of every array operation (see :mod:`catalytic.ops`); site ``weights``, part of
    the lattice's definition, still refuse NaN.
    """
    if on_device(field):
        # checked from its metadata: copying it to the host would defeat keeping it there
        field = device_array(field, name, float64=True)
        if tuple(field.shape) not in (lat.geometry.shape, (lat.geometry.n_points,)):
            raise ValueError(
                f"{name} has shape {tuple(field.shape)}; expected the lattice shape "
                f"{lat.geometry.shape}"
            )
        return field
    arr = np.asarray(field)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    if arr.shape != lat.geometry.shape and arr.shape != (lat.geometry.n_points,):
        raise ValueError(
            f"{name} has shape {arr.shape}; expected the lattice shape {lat.geometry.shape}"
        )
    return arr.reshape(lat.geometry.shape)


def _check_int(value, name, minimum=0):
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_float(value, name, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if lo is not None and v < lo or hi is not None and v > hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    return v


def _check_method(method, allowed, what):
    if method not in allowed:
        raise ValueError(f"unknown {what} method {method!r}; use one of {allowed}")
    return method


def _numeric_array(x, name, *, gpu_float64=False):
    """A host array as ``np.asarray`` gives it, or a GPU array as a Numba device array
    (float64 only when ``gpu_float64``: results are float64 and a GPU array is not cast
    behind the caller's back)."""
    if on_device(x):
        return device_array(x, name, float64=gpu_float64)
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuf":  # integers and floats; not bool, complex, ...
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    return arr


def int_sum_result(total: int, dtype) -> np.int64:
    """The result of ``reduce(x, "sum")`` for integer ``x`` from its exact sum ``total``
    (a Python int): ``np.int64(total)``, or an OverflowError when it does not fit.

    Every backend computes ``total`` exactly (never wrapping) and calls this, so they
    agree on the result and on the error.
    """
    if -(2**63) <= total < 2**63:
        return np.int64(total)
    raise OverflowError(
        f"reduce 'sum' of this {np.dtype(dtype).newbyteorder('=')} array is {total}, outside "
        "the int64 range [-2**63, 2**63 - 1]; sum x.astype(np.float64) for a float result, "
        "or sum(x.tolist()) for the exact Python int"
    )


# -- validators (public arguments -> plain arguments) ------------------------------------
def v_sources(lat, sources):
    return (lat, lat.geometry.sites(sources, "sources")), {}


def v_pair(lat, start, end):
    g = lat.geometry
    return (lat, g.site(start, "start"), g.site(end, "end")), {}


def _path_spacing(g, spacing):
    """``spacing`` of the path operations: None (hops, or weights as they are) or the
    float64 spacing per axis (:func:`_spacing`'s checks) that makes steps Euclidean."""
    return None if spacing is None else _spacing(g, spacing)


def _given(**options) -> dict:
    """The options a caller gave, those at their defaults (None, False) left out: an
    implementation written before an option existed still takes every call without it
    (and the router refuses it one with it: ``registry.keywords_of``)."""
    return {k: v for k, v in options.items() if v is not None and v is not False}


def v_distance_field(lat, sources, spacing=None, return_parents=False,
                     return_sources=False):
    """``distance_field``: the sources (:meth:`Geometry.sites`), ``spacing``, and whether
    the parental field (``parents``) and the nearest sources (``nearest``) come too."""
    for name, flag in (("return_parents", return_parents),
                       ("return_sources", return_sources)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    (lat, src), _ = v_sources(lat, sources)
    return (lat, src), _given(spacing=_path_spacing(lat.geometry, spacing),
                              parents=bool(return_parents), nearest=bool(return_sources))


def sites_in_order(g, sites, what: str) -> np.ndarray:
    """:meth:`Geometry.sites`'s checks, the flat indices (int64) in the order given,
    repeats kept."""
    g.sites(sites, what)
    if isinstance(sites, (numbers.Integral, np.integer)) or (
            isinstance(sites, tuple) and len(sites) == g.dimensions):
        return np.array([g.site(sites, what)], dtype=np.int64)
    arr = np.asarray(sites)
    if arr.ndim == 2:
        return np.asarray(g.coords_to_index(arr.astype(np.int64)), dtype=np.int64)
    return arr.reshape(-1).astype(np.int64)


def v_shortest_paths(lat, start, ends, spacing=None, first=False):
    """``shortest_paths``: the start, the ends (:func:`sites_in_order`), ``spacing`` and
    whether the search stops at the first end reached."""
    if not isinstance(first, (bool, np.bool_)):
        raise TypeError(f"first must be True or False, got {first!r}")
    g = lat.geometry
    s = g.site(start, "start")
    return (lat, s, sites_in_order(g, ends, "ends")), _given(
        spacing=_path_spacing(g, spacing), first=bool(first))


def mem_distance_field(lat, *_, parents=False, nearest=False, **__):
    """16 bytes a site for the search, 8 more for each of the parents and the nearest
    sources (the parents are made for the nearest sources too)."""
    return lat.geometry.n_points * (16 + 8 * (parents or nearest) + 8 * nearest)


def v_shortest_path(lat, start, end, spacing=None):
    """``shortest_path``: the two sites and ``spacing``."""
    args, _ = v_pair(lat, start, end)
    return args, _given(spacing=_path_spacing(lat.geometry, spacing))


def v_all_paths(lat, start, end, max_length=None, limit=DEFAULT_PATH_LIMIT,
                max_steps=DEFAULT_SEARCH_STEPS):
    g = lat.geometry
    if max_length is not None:
        max_length = _check_int(max_length, "max_length", 0)
    limit = _check_int(limit, "limit", 1)
    max_steps = _check_int(max_steps, "max_steps", 1)
    return (lat, g.site(start, "start"), g.site(end, "end")), {
        "max_length": max_length,
        "limit": limit,
        "max_steps": max_steps,
    }


def v_catalytic(lat, start, end, auxiliary_memory=None):
    g = lat.geometry
    s, e = g.site(start, "start"), g.site(end, "end")
    aux = lat.key_buffer if auxiliary_memory is None else auxiliary_memory
    if not isinstance(aux, np.ndarray):
        raise TypeError(
            f"auxiliary_memory must be a numpy array or memmap, got {type(aux).__name__}"
        )
    if aux.dtype.hasobject:
        raise TypeError("auxiliary_memory must hold plain data (numbers or bytes), not objects")
    if not aux.flags.c_contiguous:
        raise ValueError("auxiliary_memory must be C-contiguous")
    if not aux.flags.writeable:
        raise ValueError("auxiliary_memory must be writeable (it is borrowed and restored)")
    return (lat, s, e, aux), {}


def v_none(lat):
    return (lat,), {}


def v_percolates(lat, axis=0):
    d = lat.geometry.dimensions
    axis = _check_int(axis, "axis", -d)
    if not -d <= axis < d:
        raise ValueError(f"axis {axis} out of range for a {d}-D lattice")
    return (lat,), {"axis": axis % d}


def v_thresholds(lat, samples, axis=0, seed=0):
    """``spanning_thresholds``: a positive number of samples, an open axis (wrapping is
    not tracked by the sweep), an integer seed."""
    d = lat.geometry.dimensions
    samples = _check_int(samples, "samples", 1)
    axis = _check_int(axis, "axis", -d)
    if not -d <= axis < d:
        raise ValueError(f"axis {axis} out of range for a {d}-D lattice")
    axis %= d
    if lat.geometry.periodic[axis]:
        raise ValueError(
            f"axis {axis} is periodic: spanning_thresholds finds spanning between the "
            "two faces of an open axis; for wrapping use Lattice.newman_ziff (its "
            "'wrap' events)")
    seed = _check_int(seed, "seed", 0)
    return (lat, samples), {"axis": axis, "seed": seed}


#: what a Newman-Ziff sweep occupies, and the per-occupation observables it can record
NZ_KINDS = ("site", "bond")
NZ_OBSERVABLES = ("largest", "mean_size", "clusters")


def v_newman_ziff(lat, sweeps, kind="site", seed=0, first=0, observables=NZ_OBSERVABLES,
                  n_stride=1):
    """``newman_ziff``: ``sweeps`` a positive int (sweeps ``first .. first + sweeps -
    1``) or a non-empty ``range`` of sweep indices with step 1 (then ``first`` stays 0);
    ``kind`` site or bond; an integer seed in [0, 2**64); ``observables`` a sequence of
    distinct names from :data:`NZ_OBSERVABLES` (empty: events only); ``n_stride`` >= 1.
    Normalised to ``(lat, count)`` and keywords ``first, kind, seed, observables,
    n_stride``."""
    if kind not in NZ_KINDS:
        raise ValueError(f"kind must be one of {NZ_KINDS}, got {kind!r}")
    if isinstance(sweeps, range):
        if sweeps.step != 1 or len(sweeps) == 0 or sweeps.start < 0:
            raise ValueError(f"a range of sweeps must be non-empty, with step 1 and start "
                             f">= 0, got {sweeps!r}")
        if first != 0:
            raise ValueError(f"first={first!r} with a range of sweeps: the range says "
                             "where they start")
        first, count = sweeps.start, len(sweeps)
    else:
        count = _check_int(sweeps, "sweeps", 1)
        first = _check_int(first, "first", 0)
    seed = _check_int(seed, "seed", 0)
    if seed >= 2**64:
        raise ValueError(f"seed must be < 2**64, got {seed}")
    if isinstance(observables, str):
        observables = (observables,)
    try:
        obs = tuple(observables)
    except TypeError:
        raise TypeError(f"observables must be a sequence of names, got {observables!r}") from None
    for name in obs:
        if name not in NZ_OBSERVABLES:
            raise ValueError(f"unknown observable {name!r}; use names from {NZ_OBSERVABLES}")
    if len(set(obs)) != len(obs):
        raise ValueError(f"observables {obs!r} name one twice")
    n_stride = _check_int(n_stride, "n_stride", 1)
    g = lat.geometry
    if g.dimensions - sum(g.periodic) > 32 or sum(g.periodic) > 62:
        raise ValueError(f"newman_ziff tracks at most 32 open and 62 periodic axes, got "
                         f"{g.periodic}")
    if g.n_points >= 2**31:
        raise ValueError(f"newman_ziff keeps 32-bit site indices: the lattice has "
                         f"{g.n_points} sites, at most 2**31 - 1 fit")
    return (lat, count), {"first": first, "kind": kind, "seed": seed, "observables": obs,
                          "n_stride": n_stride}


def nz_elements(lat, kind) -> int:
    """An upper bound of the elements a sweep occupies: the existing sites, or one bond
    per site and forward offset."""
    g = lat.geometry
    return g.n_open if kind == "site" else g.n_open * len(g.bond_offsets)


def nz_memory(lat, count, *, kind="site", observables=NZ_OBSERVABLES, n_stride=1, threads=1,
              **_):
    """``(what, bytes)`` of a ``newman_ziff`` call running ``threads`` groups of sweeps:
    per group the scratch (parent, size, faces, displacements, the order) and the
    per-occupation sums, plus the events; ``what`` says how to need less."""
    g = lat.geometry
    n, m = g.n_points, nz_elements(lat, kind)
    groups = max(1, min(threads, count))
    rows = 2 * len(observables) * (m // n_stride + 1)
    scratch = n * (16 + 4 * sum(g.periodic)) + 8 * m
    need = groups * (scratch + 8 * rows) + 8 * rows + 8 * m + count * 8 * (2 * g.dimensions + 2)
    what = (f"newman_ziff ({count} sweeps on {groups} threads, {len(observables)} observables "
            f"at {m // n_stride + 1} occupation numbers each; record fewer with "
            "n_stride= (every m-th n) or observables=, or run fewer sweeps per call, "
            "e.g. Lattice.newman_ziff(..., chunks=)")
    return what, int(need)


def mem_newman_ziff(lat, count, *, kind="site", **_) -> int:
    """Host bytes of a ``newman_ziff`` call however it runs: its events and its element
    list. The per-thread scratch and the per-occupation sums, which ``n_stride`` and
    ``observables`` control, are checked by each implementation (:func:`nz_memory`),
    whose error says how to need less."""
    return 8 * count * (2 * lat.geometry.dimensions + 2) + 8 * nz_elements(lat, kind)


def nz_work(lat, count, *, kind="site", **_) -> float:
    """Work of ``newman_ziff``: per sweep, its elements times the stencil and a sort."""
    m = nz_elements(lat, kind)
    return float(count) * m * (len(lat.geometry.offsets) + math.log2(m + 2))


#: the largest integer key difference (uint64 keys)
_KEY_MAX = 2**64 - 1


def value_keys(values: np.ndarray) -> np.ndarray:
    """Site values as labelling keys: float64 for floats (exact for float16/32), or
    integers and booleans mapped in order onto uint64 (signed ones with their sign bit
    flipped), so that the larger minus the smaller of two keys is their exact
    difference. Flat, C-contiguous, a new array.

    Examples
    --------
    >>> value_keys(np.array([-1, 0, 1], np.int8)).tolist()
    [9223372036854775807, 9223372036854775808, 9223372036854775809]
    """
    flat = values.reshape(-1)
    if flat.dtype.kind == "f":
        return flat.astype(np.float64)
    if flat.dtype.kind == "i":
        keys = flat.astype(np.int64).view(np.uint64)
        keys ^= np.uint64(1 << 63)
        return keys
    return flat.astype(np.uint64)


def label_keys(values: np.ndarray, delta) -> np.ndarray:
    """Site values as labelling keys for ``delta`` (as :func:`v_label` gives it): with
    ``delta`` 0, integers of 4 or 8 bytes as their own bits, an unsigned view of the
    same width that copies nothing (equality is all that counts, and equal values have
    equal bits), narrower integers and booleans as their bits widened to uint32, and
    floats as the bits of their float64 values with -0.0 made 0.0 (equal floats then have
    equal bits; NaN is refused before). Two key types for the kernels to compile with
    ``delta`` 0. Otherwise :func:`value_keys`. Flat; never written to.

    Examples
    --------
    >>> label_keys(np.array([-1, 0, 1], np.int32), 0).tolist()
    [4294967295, 0, 1]
    >>> label_keys(np.array([-1, 0, 1], np.int8), 0).tolist()
    [255, 0, 1]
    >>> label_keys(np.array([-1, 0, 1], np.int8), 1).dtype
    dtype('uint64')
    >>> k = label_keys(np.array([-0.0, 0.0, 1.5]), 0)
    >>> k.dtype, bool(k[0] == k[1])
    (dtype('uint64'), True)
    """
    flat = values.reshape(-1)
    if delta == 0 and flat.dtype.kind in "biu":
        bits = flat.view(f"u{flat.dtype.itemsize}")
        return bits if flat.dtype.itemsize >= 4 else bits.astype(np.uint32)
    if delta == 0 and flat.dtype.kind == "f":
        keys = flat.astype(np.float64)
        keys += 0.0  # -0.0 + 0.0 is 0.0: the one pair of equal floats with other bits
        return keys.view(np.uint64)
    return value_keys(values)


def v_label(lat, values, background=0, delta=0):
    """``label``: ``values`` of the lattice's shape (or flat), booleans, integers or
    floats, no NaN at an open site; ``background`` a real number or None; ``delta`` a
    real number >= 0 (not NaN; may be inf). Gives the backends the keys
    (:func:`label_keys`: with ``delta`` 0 integers may come as an unsigned view of
    ``values``, to be read, never written), the labelled sites (open and not
    background, uint8) and ``delta`` as a key (float64, or an int for integer keys: the
    floor of ``delta``, capped at the largest difference). With ``delta`` 0 keys are
    one-to-one with values, so on a lattice without a mask the unlabelled sites are
    exactly those whose key is an unlabelled site's (the background's)."""
    g = lat.geometry
    keys, sites, key_delta = _label_inputs(
        g, values, background, delta, None if g.mask is None else g.mask.reshape(-1).copy())
    return (lat, keys, sites, key_delta), {}


def v_label_stack(lat, stack, values, background=0, delta=0):
    """``batched.label``: a stack of masks (:func:`check_stack`) and one ``values`` for
    every row, checked as :func:`v_label` checks them (NaN refused where any row is
    open). Gives the stack, the keys, the sites some row opens that are not background
    (uint8) and ``delta`` as a key."""
    g = lat.geometry
    stack = check_stack(lat, stack)
    # the sites some row opens: a row's labelled sites are its own of these
    keys, sites, key_delta = _label_inputs(g, values, background, delta,
                                           stack.any(axis=0).astype(bool))
    return (lat, stack, keys, sites, key_delta), {}


def _label_inputs(g, values, background, delta, sites):
    """The checks of :func:`v_label` for geometry ``g``, NaN looked for where ``sites``
    (bool, flat, modified; None: every site) is set: ``(keys, sites and not background
    as uint8, delta as a key)``."""
    if on_device(values):
        raise TypeError("values must be a host array (NumPy); GPU values are not supported")
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"values must be a boolean, integer or float array, got dtype "
                        f"{arr.dtype}")
    if arr.shape not in (g.shape, (g.n_points,)):
        raise ValueError(f"values has shape {arr.shape}; expected the lattice shape {g.shape}")
    if isinstance(delta, bool) or not isinstance(delta, (numbers.Real, np.floating,
                                                         np.integer)):
        raise TypeError(f"delta must be a real number, got {delta!r}")
    if np.isnan(delta) or delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta!r}")
    if background is not None and not isinstance(background, (numbers.Real, np.number,
                                                              np.bool_)):
        raise TypeError(f"background must be a real number or None, got {background!r}")
    if background is not None and np.isnan(background):
        raise ValueError("background must not be NaN (no value equals NaN)")
    flat = arr.reshape(-1)
    if background is not None:
        if sites is None:
            sites = flat != background
        else:
            sites &= flat != background
    elif sites is None:
        sites = np.ones(g.n_points, dtype=bool)
    if arr.dtype.kind == "f":
        nan = np.isnan(flat) & sites
        if nan.any():
            first = int(np.flatnonzero(nan)[0])
            raise ValueError(
                f"values has NaN at site {np.unravel_index(first, g.shape)} (flat "
                f"{first}); NaN is close to no value: block the site, or give it the "
                "background value")
        key_delta = float(delta)
    else:
        key_delta = int(min(math.floor(delta), _KEY_MAX)) if math.isfinite(delta) else _KEY_MAX
    return label_keys(arr, key_delta), sites.view(np.uint8), key_delta


def _labels_flat(g, labels) -> np.ndarray:
    """A labelling (or a :class:`Components`' ``labels``) of geometry ``g``: non-negative
    integers of its shape (or flat), as flat int64 (not copied when already)."""
    arr = np.asarray(getattr(labels, "labels", labels))
    if arr.dtype.kind not in "iu":
        raise TypeError(f"labels must be an integer array, got dtype {arr.dtype}")
    if arr.shape not in (g.shape, (g.n_points,)):
        raise ValueError(f"labels has shape {arr.shape}; expected the lattice shape {g.shape}")
    flat = arr.reshape(-1).astype(np.int64, copy=False)
    if flat.size and arr.dtype.kind == "i" and flat.min() < 0:
        raise ValueError(f"labels must be >= 0 (0: no cluster), got {int(flat.min())}")
    return flat


def v_cluster_statistics(lat, labels, field=None):
    """``cluster_statistics``: ``labels`` non-negative integers of the lattice's shape
    (or flat), 0 on blocked sites (a :class:`Components` gives its ``labels``);
    ``field``, when given, real numbers of that shape (NaN allowed). Gives the flat
    labels as int64 and the flat field as float64."""
    g = lat.geometry
    flat = _labels_flat(g, labels)
    if g.mask is not None:
        blocked = np.flatnonzero((flat != 0) & ~g.mask.reshape(-1))
        if blocked.size:
            raise ValueError(f"labels has label {int(flat[blocked[0]])} at blocked site "
                             f"{np.unravel_index(int(blocked[0]), g.shape)}; blocked sites "
                             "belong to no cluster")
    f = None
    if field is not None:
        f = np.asarray(field)
        if f.dtype.kind not in "biuf":
            raise TypeError(f"field must be a real numeric array, got dtype {f.dtype}")
        if f.shape not in (g.shape, (g.n_points,)):
            raise ValueError(f"field has shape {f.shape}; expected the lattice shape {g.shape}")
        f = f.reshape(-1).astype(np.float64)
    return (lat, flat, f), {}


def _spacing(g, spacing) -> np.ndarray:
    """``spacing`` (None: 1 on every axis; a real number for every axis; or one per
    axis), finite and > 0, as float64 (d,)."""
    d = g.dimensions
    if spacing is None:
        return np.ones(d)
    arr = np.asarray(spacing)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"spacing must be real numbers, got {spacing!r}")
    if arr.ndim == 0:
        arr = np.full(d, arr)
    if arr.shape != (d,):
        raise ValueError(f"spacing must be one number or one per axis ({d}), got "
                         f"{arr.shape[0] if arr.ndim == 1 else arr.shape} values")
    arr = arr.astype(np.float64)
    if not (np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError(f"spacing must be finite and > 0 on every axis, got "
                         f"{arr.tolist()}")
    return arr


def v_distance_transform(lat, features=None, *, values=None, background=0, spacing=None,
                         squared=False, dtype=None, return_indices=False):
    """``distance_transform``: the features as a boolean array of the lattice's shape (or
    flat), or sites (:meth:`Geometry.sites`, blocked ones allowed), or by default the
    blocked sites; or ``values`` (a value array: the features of a site are the sites of
    another value, those holding ``background`` and the blocked ones), never both. Gives
    the backends the marked sites (uint8, flat: features, or background and blocked),
    the keys (:func:`label_keys`, delta 0) or None, the spacing (float64, one per axis),
    ``squared``, the dtype (float64 or float32) and ``return_indices``."""
    g = lat.geometry
    for name, flag in (("squared", squared), ("return_indices", return_indices)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    out = np.dtype(np.float64 if dtype is None else dtype)
    if out not in (np.float64, np.float32):
        raise TypeError(f"dtype must be float64 or float32, got {out}")
    step = _spacing(g, spacing)
    keys = None
    if values is not None:
        if features is not None:
            raise ValueError("give features or values, not both")
        # NaN refused at an open site, as label refuses it (a blocked site is a feature
        # whatever it holds)
        keys, labelled, _ = _label_inputs(
            g, values, background, 0, None if g.mask is None else g.mask.reshape(-1).copy())
        marked = labelled == 0  # background or blocked
    elif features is None:
        marked = (np.zeros(g.n_points, dtype=bool) if g.mask is None
                  else ~g.mask.reshape(-1))
    elif np.asarray(features).dtype == np.bool_:
        marked = np.asarray(features)
        if marked.shape not in (g.shape, (g.n_points,)):
            raise ValueError(f"features has shape {marked.shape}; expected the lattice "
                             f"shape {g.shape}")
        marked = marked.reshape(-1)
    else:
        marked = np.zeros(g.n_points, dtype=bool)
        marked[g.with_mask(None).sites(features, "features")] = True
    return (lat, np.ascontiguousarray(marked, dtype=np.uint8), keys, step, bool(squared),
            out, bool(return_indices)), {}


#: the rules ``transport`` reads conductances by (``backends._transport.bond_conductances``)
CONDUCTANCE_RULES = ("bonds", "sites", "unit")


def _electrode(g, sites, what: str) -> np.ndarray:
    """An electrode's open sites (sorted flat int64): a boolean array of the lattice's
    shape (or flat) marks them, its blocked sites left out (a face of a porous image);
    any other form is :meth:`Geometry.sites`' (a blocked site is an error)."""
    arr = np.asarray(sites) if not isinstance(sites, tuple) else None
    if arr is not None and arr.dtype == np.bool_:
        if arr.shape not in (g.shape, (g.n_points,)):
            raise ValueError(f"{what} has shape {arr.shape}; expected the lattice shape "
                             f"{g.shape}")
        marked = arr.reshape(-1)
        if g.mask is not None:
            marked = marked & g.mask.reshape(-1)
        flat = np.flatnonzero(marked)
    else:
        flat = g.sites(sites, what)
    if flat.shape[0] == 0:
        raise ValueError(f"the {what} electrode has no open site")
    return flat.astype(np.int64)


def v_transport(lat, high, low, *, conductance=None, tol=1e-10, maxiter=None):
    """``transport``: the electrodes (:func:`_electrode`: not empty, not overlapping),
    the conductance rule (None: ``"bonds"`` with bond weights, else ``"sites"`` with
    site weights, else ``"unit"``), ``tol`` (a relative residual in (0, 1)) and
    ``maxiter`` (None: the backend's own limit; else >= 1). Gives the backends the
    electrodes, the rule resolved, ``tol`` and ``maxiter``."""
    g = lat.geometry
    if conductance is None:
        conductance = ("bonds" if g.bond_weights is not None
                       else "sites" if g.weights is not None else "unit")
    if conductance not in CONDUCTANCE_RULES:
        raise ValueError(f"conductance must be one of {CONDUCTANCE_RULES} or None, got "
                         f"{conductance!r}")
    if conductance == "bonds" and g.bond_weights is None:
        raise ValueError('conductance="bonds" needs a lattice with bond_weights')
    if conductance == "sites" and g.weights is None:
        raise ValueError('conductance="sites" needs a lattice with weights')
    if isinstance(tol, (bool, np.bool_)) or not isinstance(tol, numbers.Real):
        raise TypeError(f"tol must be a real number, got {tol!r}")
    if not 0 < tol < 1:
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    if maxiter is not None:
        if isinstance(maxiter, (bool, np.bool_)) or not isinstance(maxiter, numbers.Integral):
            raise TypeError(f"maxiter must be an int or None, got {maxiter!r}")
        if maxiter < 1:
            raise ValueError(f"maxiter must be at least 1, got {maxiter!r}")
        maxiter = int(maxiter)
    hi = _electrode(g, high, "high")
    lo = _electrode(g, low, "low")
    both = np.intersect1d(hi, lo)
    if both.shape[0]:
        raise ValueError(f"the electrodes overlap at {both.shape[0]} site(s), the first "
                         f"{g._describe(int(both[0]))}")
    return (lat, hi, lo), {"conductance": conductance, "tol": float(tol),
                           "maxiter": maxiter}


def mem_transport(lat, *_, **__):
    """Bytes on the host, per bond: the conductances, the currents and the far ends
    (8 each), the assembly's bond lists and masks, the matrix with its coarse levels
    and SciPy's temporaries while it is assembled (128 in all); per site, the solver's
    vectors (160)."""
    g = lat.geometry
    # set from the peaks tracemalloc saw with every site solved (no blocked site): 106 MB
    # at 512^2, where this gives 109, and 136 MB at 64^3, where it gives 142
    return g.n_points * (128 * max(1, len(g.bond_offsets)) + 160)


def _edt_work(lat, *_, **__) -> float:
    g = lat.geometry
    return float(g.n_points * g.dimensions)


def v_region_graph(lat, labels):
    """``region_graph``: labels as :func:`v_cluster_statistics` checks them (any
    label may have several pieces)."""
    g = lat.geometry
    flat = _labels_flat(g, labels)
    if g.mask is not None:
        flat = np.where(g.mask.reshape(-1), flat, 0)
    return (lat, flat), {}


def v_spanning(lat, axes=None):
    """``axes``: None (every axis), one int, or a sequence of ints (negative count from
    the end); normalised to distinct non-negative axes in the order given."""
    d = lat.geometry.dimensions
    if axes is None:
        return (lat,), {"axes": tuple(range(d))}
    items = [axes] if isinstance(axes, (numbers.Integral, np.integer, bool, np.bool_)) else axes
    try:
        items = list(items)
    except TypeError:
        raise TypeError(f"axes must be None, an int or a sequence of ints, got {axes!r}") from None
    out = []
    for a in items:
        a = _check_int(a, "axis", -d)
        if not -d <= a < d:
            raise ValueError(f"axis {a} out of range for a {d}-D lattice")
        if a % d in out:
            raise ValueError(f"axes {axes!r} name axis {a % d} twice")
        out.append(a % d)
    return (lat,), {"axes": tuple(out)}


def v_structure(lat, max_diameter_sites=20_000):
    return (lat,), {"max_diameter_sites": _check_int(max_diameter_sites, "max_diameter_sites", 0)}


def v_centrality(lat, method="degree", k=None, seed=None):
    """``k`` (sampled sources) and ``seed`` only for betweenness; ``seed`` defaults to
    the lattice's. The normalised keywords carry ``k`` and ``seed`` only for a sampled
    betweenness (``k`` below the number of open sites: with ``k == n_open`` NetworkX
    computes the exact value, and so does every backend), so implementations written
    before sampling existed (``centrality(lat, *, method)``) still get every other
    call."""
    method = _check_method(method, CENTRALITY_METHODS, "centrality")
    if method != "betweenness":
        for name, value in (("k", k), ("seed", seed)):
            if value is not None:
                raise ValueError(f"{name}={value!r} applies to method='betweenness' only "
                                 f"(sampled sources), not to method={method!r}")
        return (lat,), {"method": method}
    seed = _check_int(lat.seed if seed is None else seed, "seed", 0)
    if k is None:
        return (lat,), {"method": method}
    k = _check_int(k, "k", 1)
    n_open = lat.geometry.n_open
    if k > n_open:
        raise ValueError(f"k={k} sampled sources is more than the {n_open} open sites")
    if k == n_open:
        return (lat,), {"method": method}
    return (lat,), {"method": method, "k": k, "seed": seed}


def v_communities(lat, method="louvain", seed=None):
    if seed is None:
        seed = lat.seed
    return (lat,), {
        "method": _check_method(method, COMMUNITY_METHODS, "community"),
        "seed": _check_int(seed, "seed", 0),
    }


def _xor_refusal(dt) -> str:
    """Why ``xor_transform`` refuses data of the non-integer dtype ``dt``, and what to
    do instead: a message that is true for that kind of data."""
    head = "xor_transform needs integer data, got"
    uint = {2: "np.uint16", 4: "np.uint32", 8: "np.uint64"}
    kind = dt.kind
    if kind == "b":
        return (f"{head} dtype bool; booleans have no integer bits to XOR, cast them first "
                "with .astype(np.uint8) (True is 1)")
    if kind == "f":
        return (f"{head} dtype {dt}; XOR of float bits is not a numeric operation (view "
                f"the bits with .view({uint.get(dt.itemsize, 'np.uint8')}) if you mean it)")
    if kind == "c":
        return (f"{head} complex dtype {dt}; XOR of complex numbers is not defined (view the "
                f"bits of the real and imaginary parts with "
                f".view({uint.get(dt.itemsize // 2, 'np.uint8')}) if you mean it)")
    if kind == "O":
        return (f"{head} dtype object (references to Python objects, not numbers in memory); "
                "convert it to an integer array first, e.g. np.asarray(data, dtype=np.int64)")
    if kind == "U":
        return (f"{head} string dtype {dt}; to XOR text, XOR its encoded bytes: "
                "np.frombuffer(text.encode(), dtype=np.uint8)")
    if kind == "S":
        return (f"{head} bytes dtype {dt}; XOR the raw bytes with data.view(np.uint8)")
    if kind == "V":
        what = "structured" if dt.names else "raw void"
        return (f"{head} {what} dtype {dt}; XOR each integer field (data['name']) or the "
                "raw bytes (data.view(np.uint8)) instead")
    if kind in "Mm":
        what = "datetimes" if kind == "M" else "time differences"
        return (f"{head} dtype {dt} ({what}); XOR their int64 representation with "
                ".view(np.int64) if you mean it")
    return f"{head} dtype {dt}"


def _device_dtype(x):
    """The dtype of a GPU array from its metadata, or None when it cannot be read."""
    try:
        if getattr(x, "__cuda_ndarray__", False):
            return np.dtype(x.dtype)
        return np.dtype(x.__cuda_array_interface__["typestr"])
    except Exception:  # device_array then says what is wrong
        return None


def v_xor(lat, data, key=None):
    if on_device(data):
        dt = _device_dtype(data)
        if dt is not None and dt.kind not in "iu":
            raise TypeError(_xor_refusal(dt))
        arr = device_array(data, "data")
    else:
        arr = np.asarray(data)
    dt = arr.dtype if isinstance(arr, np.ndarray) else np.dtype(arr.dtype)
    if dt.kind not in "iu":
        raise TypeError(_xor_refusal(dt))
    if key is not None and on_device(key):
        k = device_array(key, "key")
        if k.size == 0:
            raise ValueError("key must not be empty")
        if np.dtype(k.dtype) != dt:
            # its values cannot be range-checked without copying it back
            raise TypeError(f"a GPU key must have the data's dtype {dt}, got {k.dtype}")
        key = k.reshape(k.size)
    elif key is not None:
        k = np.asarray(key)
        if not np.issubdtype(k.dtype, np.integer) or k.dtype == np.bool_:
            raise TypeError(f"key must be integer, got dtype {k.dtype}")
        if k.size == 0:
            raise ValueError("key must not be empty")
        if k.ndim == 0:
            k = k.reshape(1)
        if k.dtype != dt:
            # compare values, not dtypes (NumPy 2's can_cast of a NumPy scalar is by dtype)
            info = np.iinfo(dt)
            lo, hi = int(k.min()), int(k.max())
            if lo < info.min or hi > info.max:
                raise ValueError(
                    f"key values in [{lo}, {hi}] do not fit data dtype {dt} "
                    f"([{info.min}, {info.max}])"
                )
        # key values in native order: XOR acts on values (see xor_values)
        key = np.ascontiguousarray(k.reshape(-1), dtype=dt.newbyteorder("="))
    return (lat, arr, key), {}


def xor_values(xor):
    """An ``xor_transform`` implementation ``xor(lat, data, key=None)`` (or a batched
    twin's, over a stack) made to follow the operation's one rule: XOR acts on the
    data's values, not on their bytes in memory.

    Data in non-native byte order (``'>i4'`` on a little-endian machine) runs as its
    native copy, and the result (each row's, for a twin returning a list) comes back in
    the data's own dtype, byte order included; native data passes straight through. So
    a byte-swapped copy gives the same values, and decrypts the same, on every path.
    GPU data passes through unchanged (a backend may decline it by byte order).
    """
    @functools.wraps(xor)
    def by_value(lat, data, key=None):
        dt = np.dtype(data.dtype)
        if dt.isnative or on_device(data):
            return xor(lat, data, key)
        out = xor(lat, data.astype(dt.newbyteorder("=")), key)
        if isinstance(out, list):
            return [row.astype(dt) for row in out]
        return out.astype(dt)

    return by_value


def mem_xor(lat, data, key=None):
    """Host bytes of ``xor_transform`` (and its twin): the result and a contiguous copy,
    plus the native copies in and out for data in non-native byte order."""
    return data.nbytes * (2 if np.dtype(data.dtype).isnative else 4)


def v_field(lat, field):
    return (lat, _lattice_field(lat, field)), {}


def diffusion_limit(lat) -> float:
    """The largest ``alpha`` :func:`v_diffuse` accepts without ``allow_unstable``:
    ``1 / k`` for a stencil of k offsets, or with bond weights (conductances)
    ``1 / max_i sum_j c_ij``, the largest weighted degree (``inf`` when it is 0).

    Explicit Euler on the Laplacian, ``f <- f - alpha L f``, is stable when ``alpha <=
    2 / lambda_max``, and ``lambda_max`` is at most twice the largest (weighted) degree
    (Gershgorin). Every degree is at most k, so ``alpha <= 1 / k`` is always stable
    without bond weights; the bound is attained on periodic lattices with even sides, so
    it cannot be loosened without computing ``lambda_max``. O(1), or O(n k) with bond
    weights (the weighted degrees).

    Examples
    --------
    >>> import catalytic as cat
    >>> diffusion_limit(cat.Lattice(shape=(8, 8)))
    0.25
    >>> diffusion_limit(cat.Lattice(shape=(8, 8), bond_weights=np.full((2, 8, 8), 2.0)))
    0.125
    """
    g = lat.geometry
    if g.bond_weights is None:
        return 1.0 / max(len(g.offsets), 1)
    top = _max_weighted_degree(g)
    return 1.0 / top if top > 0 else math.inf


def _max_weighted_degree(g) -> float:
    """The largest sum of conductances at a site (least of parallel bonds)."""
    a = g.adjacency(weighted=True)
    return float(np.asarray(a.sum(axis=1)).max()) if a.nnz else 0.0


def v_diffuse(lat, field, steps=1, alpha=0.1, allow_unstable=False):
    alpha = _check_float(alpha, "alpha", 0.0, None)
    if not isinstance(allow_unstable, (bool, np.bool_)):
        raise TypeError(f"allow_unstable must be True or False, got {allow_unstable!r}")
    limit = diffusion_limit(lat)
    if alpha > limit and not allow_unstable:
        k = len(lat.geometry.offsets)
        if lat.geometry.bond_weights is None:
            why = (f"with {k} stencil offsets the Laplacian's largest eigenvalue can reach "
                   f"{2 * k}")
        else:
            why = (f"with a largest weighted degree (sum of bond conductances at a site) of "
                   f"{1 / limit:.6g} the Laplacian's largest eigenvalue can reach "
                   f"{2 / limit:.6g}")
        raise ValueError(
            f"alpha={alpha!r} may make the explicit diffusion step unstable on this lattice: "
            f"{why}, and f - alpha L f stays bounded only for alpha <= {limit!r}; use a "
            "smaller alpha (and more steps), or pass allow_unstable=True"
        )
    return (lat, _lattice_field(lat, field)), {
        "steps": _check_int(steps, "steps", 0),
        "alpha": alpha,
    }


def v_data(data):
    return (_numeric_array(data, "data"),), {}


def v_scale(data, factor=1.0):
    return (_numeric_array(data, "data"),), {"factor": _check_float(factor, "factor")}


def v_matmul(a, b):
    a, b = _numeric_array(a, "a", gpu_float64=True), _numeric_array(b, "b", gpu_float64=True)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"matmul needs 2-D arrays, got shapes {a.shape} and {b.shape}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul shapes {a.shape} and {b.shape} do not align")
    return (a, b), {}


def v_reduce(x, op="sum"):
    x = _numeric_array(x, "x")
    if x.size == 0 and op in ("min", "max", "mean"):
        raise ValueError(f"reduce {op!r} of an empty array is undefined")
    return (x, _check_method(op, REDUCE_OPS, "reduce")), {}


def v_elementwise(op, a, b=None):
    if op in UNARY_OPS:
        if b is not None:
            raise ValueError(f"elementwise {op!r} is unary; b must be None")
        return (op, _numeric_array(a, "a", gpu_float64=True), None), {}
    if op in BINARY_OPS:
        if b is None:
            raise ValueError(f"elementwise {op!r} is binary; pass b")
        a = _numeric_array(a, "a", gpu_float64=True)
        b = _numeric_array(b, "b", gpu_float64=True)
        sa, sb = tuple(a.shape), tuple(b.shape)
        if (on_device(a) or on_device(b)) and sa != sb:
            raise ValueError(
                f"shapes {sa} and {sb} differ; with a GPU operand both must have the same "
                "shape (no broadcasting on the device)"
            )
        try:
            np.broadcast_shapes(sa, sb)
        except ValueError:
            raise ValueError(f"shapes {sa} and {sb} do not broadcast") from None
        return (op, a, b), {}
    raise ValueError(f"unknown elementwise op {op!r}; use one of {UNARY_OPS + BINARY_OPS}")


def v_random(shape, seed=0, distribution="uniform"):
    from catalytic.geometry import _as_shape

    shape = _as_shape(shape)
    seed = _check_int(seed, "seed", 0)
    if seed >= 2**64:
        raise ValueError(f"seed must be < 2**64, got {seed}")
    return (shape, seed, _check_method(distribution, DISTRIBUTIONS, "distribution")), {}


# -- memory models (bytes allocated by a call) ----------------------------------------
def mem_sites(per_site):
    def memory(lat, *_, **__):
        return lat.geometry.n_points * per_site

    return memory


#: bytes the all-paths search holds per site it has visited (the cached neighbour list:
#: a Python list of k ints and its dict entry, ~48 B per int with its list slot) and per
#: level of the current path (list and set entries, a list iterator)
ALL_PATHS_SITE_BYTES = (160, 48)
ALL_PATHS_LEVEL_BYTES = 200


def mem_all_paths(lat, start, end, *, max_length=None, limit=DEFAULT_PATH_LIMIT,
                  max_steps=DEFAULT_SEARCH_STEPS):
    """Bytes of the all-paths search state, bounded by ``max_steps``: the neighbour
    lists of the sites it visits and the current path. The paths it returns are counted
    as they are found (see ``numpy_backend.all_paths``): their total is bounded by
    ``limit`` but cannot be known before the search."""
    g = lat.geometry
    depth = g.n_open - 1 if max_length is None else max_length
    visited = min(g.n_open, max_steps + 1)
    base, per_int = ALL_PATHS_SITE_BYTES
    return visited * (base + per_int * len(g.offsets)) + min(depth, max_steps) * ALL_PATHS_LEVEL_BYTES


def mem_graph(lat, *_, **__):
    """Explicit graph: CSR of k n edges (int32 indices + data) plus COO scratch."""
    g = lat.geometry
    return g.n_points * len(g.offsets) * 40 + g.n_points * 8 * g.dimensions


def mem_spanning(lat, *, axes=(0,), **_):
    """Labels (as ``connected_components``) plus, when a periodic axis is asked, the
    winding check: every stencil step (source, target, one int64 turn count per periodic
    axis asked, a CSR copy for the spanning forest) and per-site windings: an upper
    bound of the peak tracemalloc measured (reports/design_notes.md)."""
    g = lat.geometry
    p = sum(1 for a in axes if g.periodic[a])
    base = g.n_points * 12
    if not p:
        return base
    k = len(g.offsets)
    return base + g.n_points * k * (48 + 28 * p) + g.n_points * (40 + 16 * p)


# -- batched operations: one call over a stack of what varies across an ensemble --------
#: the batched twin of operation ``op`` is registered as ``BATCHED_PREFIX + op``; it takes
#: ``(lattice, stack, *args, **kwargs)`` and returns one result per row of ``stack``. For
#: ``connected_components``, ``percolates``, ``spanning_clusters`` and ``distance_field``
#: the rows are masks (each result equals ``op`` on ``lattice.with_mask(row)``); for
#: ``laplacian`` and ``xor_transform`` they are the op's data on ``lattice`` itself.
#: ``BatchProcessor`` stacks masks for lattice items and data for array items with
#: ``lattice=``, uses a twin when one is registered (plugins may register their own) and
#: loops when there is none or it refuses the stack.
BATCHED_PREFIX = "batched."


def check_stack(lat, stack) -> np.ndarray:
    """An ensemble of masks for ``lat``'s geometry as C-contiguous uint8 ``(B, n)``
    (1 = open): ``stack`` is bool or 0/1 integers shaped ``(B, *lattice.shape)`` or
    ``(B, n)``. Not modified (a copy is made when it is not already that)."""
    g = lat.geometry
    a = np.asarray(stack)
    if a.dtype != np.bool_ and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"a stack of masks must be bool or integer 0/1, got dtype {a.dtype}")
    if a.ndim == 1 + g.dimensions and a.shape[1:] == g.shape:
        a = a.reshape(a.shape[0], g.n_points)
    if a.ndim != 2 or a.shape[1] != g.n_points:
        raise ValueError(f"a stack of masks must have shape (B, *{g.shape}) or "
                         f"(B, {g.n_points}), got {np.shape(stack)}")
    if a.dtype == np.bool_:
        return np.ascontiguousarray(a).view(np.uint8)
    if a.size and (a.min() < 0 or a.max() > 1):
        raise ValueError("a stack of masks holds values other than 0 and 1")
    return np.ascontiguousarray(a, dtype=np.uint8)


def batched(validate):
    """The validator of a batched twin from its operation's ``validate``: the op's own
    checks on the lattice (the geometry every row shares) and :func:`check_stack`."""
    def validate_batched(lat, stack, *args, **kwargs):
        (lat, *rest), kwargs = validate(lat, *args, **kwargs)
        return (lat, check_stack(lat, stack), *rest), kwargs

    validate_batched.__doc__ = f"batched twin of {validate.__name__}"
    return validate_batched


def v_distance_stack(lat, stack, sources):
    """``batched.distance_field``: unweighted lattices only (no site or bond weights: a
    stack of masks shares the lattice's weights, which would be the first lattice's),
    sources open in every row."""
    if lat.geometry.weighted:
        raise ValueError("batched distance fields are unweighted; weighted lattices run "
                         "one by one")
    (lat, src), _ = v_sources(lat, sources)
    stack = check_stack(lat, stack)
    blocked = stack[:, src] == 0
    if blocked.any():
        b, j = np.argwhere(blocked)[0]
        raise IndexError(f"source {int(src[j])} is a blocked site in row {int(b)}")
    return (lat, stack, src), {}


def v_distance_transform_stack(lat, stack, features=None, *, values=None, background=0,
                               **kwargs):
    """``batched.distance_transform``: :func:`v_distance_transform`'s checks on the
    lattice, then each row's marked sites as the single call on ``lattice.with_mask(row)``
    takes them: the row's blocked sites (and with ``values`` the background) as (B, n)
    uint8; given ``features``, the same in every row."""
    (lat, marked, keys, *rest), _ = v_distance_transform(
        lat, features, values=values, background=background, **kwargs)
    g = lat.geometry
    stack = check_stack(lat, stack)
    if features is not None:
        rows = np.broadcast_to(marked, stack.shape)
    elif values is None:
        rows = stack == 0
    else:
        background_sites = _label_inputs(g, values, background, 0, None)[1] == 0
        rows = (stack == 0) | background_sites
    return (lat, np.ascontiguousarray(rows, dtype=np.uint8), keys, *rest), {}


def _rows(stack, name):
    """A (B, ...) stack of arrays as an ndarray, or a TypeError naming it."""
    if on_device(stack):
        raise TypeError(f"a batched {name} stack must be a host array")
    a = np.asarray(stack)
    if a.ndim < 1:
        raise ValueError(f"a batched {name} stack needs a leading row axis, got a 0-d array")
    return a


def v_field_stack(lat, fields):
    """``batched.laplacian``: rows of fields in the lattice's shape (or flat), as one
    C-contiguous float64 (B, n) array (each row checked as a single call checks it)."""
    a = _rows(fields, "field")
    g = lat.geometry
    if a.shape[1:] not in (g.shape, (g.n_points,)):
        raise ValueError(f"a stack of fields must have shape (B, *{g.shape}) or "
                         f"(B, {g.n_points}), got {a.shape}")
    if a.shape[0]:
        _lattice_field(lat, a[0])  # dtype rules
    return (lat, np.ascontiguousarray(a.reshape(a.shape[0], g.n_points), dtype=np.float64)), {}


def v_xor_stack(lat, data, key=None):
    """``batched.xor_transform``: rows of integer data of one shape and dtype (any byte
    order, kept in the results), each XORed from the start of the key (as a single call
    does)."""
    a = _rows(data, "data")
    row = a[0] if a.shape[0] else np.empty(a.shape[1:], dtype=a.dtype)
    (lat, _, key), _ = v_xor(lat, row, key)
    return (lat, np.ascontiguousarray(a), key), {}


#: work units a batched twin spends per row besides its sites (a result object, its own
#: arrays), chosen from the calibration samples of the numba-cpu twins
#: (reports/design_notes.md)
ROW_WORK = 1500.0


def stack_work(lat, stack, *args, **kwargs) -> float:
    """Work of a batched twin: per row, its sites times the stencil size plus
    :data:`ROW_WORK`."""
    return float(stack.shape[0]) * (sites_work(lat) + ROW_WORK)


def data_stack_work(lat, data, *args, **kwargs) -> float:
    """Work of a batched twin over rows of data: their bytes plus :data:`ROW_WORK` per
    row."""
    return float(data.nbytes) + data.shape[0] * ROW_WORK


def mem_stack(memory, per_site=17):
    """Host bytes of a batched twin: ``per_site`` bytes per site of every row plus one
    row's worth of the op's own ``memory``. The default is the labelling twins': the
    mask (1), int32 labels from the kernel and each result's own copy (4 + 4), and the
    per-row size tables (up to 8)."""
    def memory_batched(lat, stack, *args, **kwargs):
        return stack.shape[0] * lat.geometry.n_points * per_site + memory(lat, *args, **kwargs)

    return memory_batched


def mem_data(data, *_, **__):
    return data.nbytes * 2


def _data_work(data, *_, **__):
    return float(data.size)


def _xor_work(lat, data, key=None):
    return float(data.nbytes)


def _xor_borrows(lat, data, key=None):
    """The lattice's own buffer when the key is read from it (single and batched XOR):
    the engine then holds it (``catalysis.lend``) so no search has it on loan."""
    return lat.key_buffer if key is None else None


def _mem_percolates(lat, *, axis=0):
    return mem_spanning(lat, axes=(axis,))


# -- the catalogue ------------------------------------------------------------------------
#: the extra of operations on data alone: they do not read the lattice's graph, so its
#: bonds do not concern them
DATA = {"topology": False}
#: every built-in operation: (name, validate, work, memory, extra, doc); declared by the
#: core (plugin "catalytic", through the same hook a third-party plugin uses), before any
#: backend gives an implementation
CATALOGUE = (
    ("distance_field", v_distance_field, sites_work, mem_distance_field, {},
     "Hop counts (or summed step costs) from the nearest source to every site."),
    ("shortest_path", v_shortest_path, sites_work, mem_sites(16), {},
     "One shortest path between two sites, by the canonical tie rule."),
    ("shortest_paths", v_shortest_paths, sites_work, mem_sites(17), {},
     "Shortest paths from one site to the nearest of several, or to each, in one search."),
    ("count_shortest_paths", v_pair, sites_work, mem_sites(24), {},
     "The number of shortest paths between two sites, exactly."),
    ("all_paths", v_all_paths, sites_work, mem_all_paths, {},
     "Simple paths between two sites, bounded by length, count and search steps."),
    ("path_catalytic", v_catalytic, sites_work, mem_sites(2),
     {"borrows": lambda lat, s, e, aux: aux},
     "A shortest path whose search state lives in borrowed memory, given back intact."),
    ("connected_components", v_none, sites_work, mem_sites(12), {},
     "Labels and sizes of the connected components of the open sites."),
    ("label", v_label, sites_work, mem_sites(40), {},
     "Labels of the clusters of close values (equal, or at most delta apart)."),
    ("cluster_statistics", v_cluster_statistics, sites_work, mem_sites(200), {},
     "Sizes, boxes, centroids, gyration, faces, wrapping and field reductions of clusters."),
    ("distance_transform", v_distance_transform, _edt_work, mem_sites(17), DATA,
     "Exact Euclidean distances to the nearest feature (or site of another value)."),
    ("transport", v_transport, sites_work, mem_transport, {},
     "Potentials, currents and the conductance of the lattice as a resistor network."),
    ("region_graph", v_region_graph, sites_work, mem_sites(120), {},
     "The regions that touch, with the number of bonds joining each pair."),
    ("percolates", v_percolates, sites_work, _mem_percolates, {},
     "Whether a cluster spans (open axis) or wraps (periodic axis) the lattice."),
    ("spanning_clusters", v_spanning, sites_work, mem_spanning, {},
     "The labels of the clusters spanning or wrapping each axis."),
    ("degree", v_none, sites_work, mem_sites(8), {},
     "The number of open neighbours of every site."),
    ("analyze_structure", v_structure, sites_work, mem_graph, {},
     "Component, degree and diameter statistics of the lattice graph."),
    ("centrality", v_centrality, centrality_work, mem_graph, {},
     "Degree, closeness, betweenness or eigenvector centrality of every site."),
    ("communities", v_communities, sites_work, mem_graph, {},
     "A partition of the sites into communities (Louvain, label propagation, ...)."),
    ("laplacian", v_field, sites_work, mem_sites(16), {},
     "The graph Laplacian of a field on the lattice."),
    ("diffuse", v_diffuse, sites_work, mem_sites(24), {},
     "Explicit diffusion steps of a field on the lattice."),
    ("xor_transform", v_xor, _xor_work, mem_xor, {"borrows": _xor_borrows, "topology": False},
     "Data XORed with a key (the lattice's own buffer by default), values not bytes."),
    ("normalize", v_data, _data_work, mem_data, DATA, "Data scaled to unit maximum norm."),
    ("scale", v_scale, _data_work, mem_data, DATA, "Data multiplied by a factor."),
    ("matmul", v_matmul, lambda a, b: float(a.shape[0]) * a.shape[1] * b.shape[1],
     lambda a, b: 8 * (a.size + b.size + a.shape[0] * b.shape[1]), DATA,
     "The matrix product of two 2-D arrays."),
    # (a converted copy at most: int64 or float64 of every element)
    ("reduce", v_reduce, _data_work, lambda x, op: 8 * x.size, DATA,
     "A sum, minimum, maximum or mean of every element."),
    ("elementwise", v_elementwise,
     lambda op, a, b=None: float(max(a.size, 0 if b is None else b.size)),
     lambda op, a, b=None: 16 * max(a.size, 0 if b is None else b.size), DATA,
     "A unary or binary elementwise function."),
    ("random", v_random, lambda shape, seed, dist: float(np.prod(shape)),
     lambda shape, seed, dist: 16 * int(np.prod(shape)), DATA,
     "Random numbers of a shape from a seed, the same on every backend."),
    # batched twins (BATCHED_PREFIX): one call over a stack of masks
    ("batched.connected_components", batched(v_none), stack_work, mem_stack(mem_sites(12)),
     {}, "connected_components of every row of a stack of masks."),
    ("batched.label", v_label_stack, stack_work, mem_stack(mem_sites(40)), {},
     "label of one value array on every row of a stack of masks."),
    ("batched.percolates", batched(v_percolates), stack_work, mem_stack(_mem_percolates), {},
     "percolates of every row of a stack of masks."),
    ("batched.spanning_clusters", batched(v_spanning), stack_work, mem_stack(mem_spanning),
     {}, "spanning_clusters of every row of a stack of masks."),
    ("batched.distance_field", v_distance_stack, stack_work,
     mem_stack(mem_sites(16), per_site=9), {},
     "distance_field of every row of a stack of masks."),
    # per row: distances, indices, marked sites and (numba-cpu) the keys repeated
    ("batched.distance_transform", v_distance_transform_stack, stack_work,
     mem_stack(mem_sites(17), per_site=25), DATA,
     "distance_transform of every row of a stack of masks."),
    ("batched.laplacian", v_field_stack, stack_work, mem_stack(mem_sites(16), per_site=16),
     {}, "laplacian of every row of a stack of fields."),
    ("batched.xor_transform", v_xor_stack, data_stack_work, mem_xor,
     {"borrows": _xor_borrows, "topology": False}, "xor_transform of every row of a stack of data."),
    ("spanning_thresholds", v_thresholds,
     lambda lat, samples, **_: float(samples) * sites_work(lat) * 4,
     lambda lat, samples, **_: 40 * lat.geometry.n_points * min(samples, 64), {},
     "Newman-Ziff occupation at first spanning, per sample."),
    ("newman_ziff", v_newman_ziff, nz_work, mem_newman_ziff, {},
     "Newman-Ziff sweeps: spanning, wrapping and cluster observables per occupation."),
)


@hookimpl
def catalytic_add_operations(registry):
    for name, validate, work, memory, extra, doc in CATALOGUE:
        registry.add_operation(name, work=work, memory=memory, validate=validate, doc=doc,
                               **extra)
