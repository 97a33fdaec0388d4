"""The built-in operations: argument validation, work and memory models, result types.

Backends give implementations; what an operation *is* (its arguments, its result, its
errors, how much work and memory it takes) lives here, once. The reference plugin
(:mod:`catalytic.backends.numpy_backend`) declares these operations through the same
hook a third-party plugin uses.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np


class PathResult(NamedTuple):
    """A shortest path: flat site indices from start to end, and its length.

    ``distance`` is the hop count (int) on unweighted lattices and the summed cost of
    entering each site after the start (float) on weighted ones. When the end cannot be
    reached, ``path`` is empty and ``distance`` is -1 (unweighted) or ``inf`` (weighted).
    Convert to coordinates with ``lattice.index_to_coords(result.path)``.
    """

    path: np.ndarray
    distance: float


class Components(NamedTuple):
    """Connected components of the open sites.

    ``labels`` has the lattice's shape: 0 on blocked sites, components numbered
    ``1..count`` in order of their lowest flat index (as ``scipy.ndimage.label`` does).
    ``sizes[i]`` is the number of sites with label ``i + 1``.
    """

    labels: np.ndarray
    count: int
    sizes: np.ndarray


class Communities(NamedTuple):
    """A partition of the open sites: ``labels`` (-1 on blocked sites, communities
    numbered 0.. in order of their lowest flat index), ``count`` and ``modularity``."""

    labels: np.ndarray
    count: int
    modularity: float


CENTRALITY_METHODS = ("degree", "closeness", "betweenness", "eigenvector")
COMMUNITY_METHODS = ("louvain", "label_propagation", "edge_betweenness")
REDUCE_OPS = ("sum", "min", "max", "mean")
UNARY_OPS = ("neg", "abs", "sqrt", "exp", "log", "sin", "cos")
BINARY_OPS = ("add", "sub", "mul", "div", "max", "min", "pow")
DISTRIBUTIONS = ("uniform", "normal", "integers")

#: find_all_paths stops and raises past this many paths unless told otherwise
DEFAULT_PATH_LIMIT = 100_000


# -- helpers --------------------------------------------------------------------------
def geom(lat):
    return lat.geometry


def sites_work(lat, *_, **__) -> float:
    g = lat.geometry
    return float(g.n_points * len(g.offsets))


def centrality_work(lat, *, method="degree"):
    """Degree is one pass; closeness and betweenness are one BFS per site; eigenvector
    is an iterative eigensolver (counted as 100 passes)."""
    base = sites_work(lat)
    if method in ("closeness", "betweenness"):
        return base * lat.geometry.n_open
    if method == "eigenvector":
        return base * 100
    return base


def on_device(x) -> bool:
    """True for a GPU array: anything exposing ``__cuda_array_interface__``, or Numba's
    device arrays (whose simulator version marks itself with ``__cuda_ndarray__``)."""
    if isinstance(x, np.ndarray):
        return False
    return hasattr(x, "__cuda_array_interface__") or bool(getattr(x, "__cuda_ndarray__", False))


def host_only(*args, **kwargs):
    """``supports`` of CPU implementations: refuse arrays that live on the GPU."""
    for a in list(args) + list(kwargs.values()):
        if on_device(a):
            return "input lives on the GPU (use the cuda backend, or copy_to_host() it)"
    return None


def _lattice_field(lat, field, name="field") -> np.ndarray:
    if on_device(field):
        # checked from its metadata: copying it to the host would defeat keeping it there
        dt = np.dtype(field.dtype)
        if dt != np.float64:
            raise TypeError(f"a device {name} must be float64, got {dt}")
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
    if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
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


def _refuse_device(x, name):
    if on_device(x):
        raise TypeError(
            f"{name} is a GPU array; this operation takes host arrays (call "
            ".copy_to_host()); laplacian and diffuse accept GPU fields"
        )


def _numeric_array(x, name):
    _refuse_device(x, name)
    arr = np.asarray(x)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    return arr


# -- validators (public arguments -> plain arguments) ------------------------------------
def v_sources(lat, sources):
    return (lat, lat.geometry.sites(sources, "sources")), {}


def v_pair(lat, start, end):
    g = lat.geometry
    return (lat, g.site(start, "start"), g.site(end, "end")), {}


def v_all_paths(lat, start, end, max_length=None, limit=DEFAULT_PATH_LIMIT):
    g = lat.geometry
    if max_length is not None:
        max_length = _check_int(max_length, "max_length", 0)
    limit = _check_int(limit, "limit", 1)
    return (lat, g.site(start, "start"), g.site(end, "end")), {
        "max_length": max_length,
        "limit": limit,
    }


def v_catalytic(lat, start, end, auxiliary_memory=None):
    g = lat.geometry
    s, e = g.site(start, "start"), g.site(end, "end")
    aux = lat._aux if auxiliary_memory is None else auxiliary_memory
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


def v_structure(lat, max_diameter_sites=20_000):
    return (lat,), {"max_diameter_sites": _check_int(max_diameter_sites, "max_diameter_sites", 0)}


def v_centrality(lat, method="degree"):
    return (lat,), {"method": _check_method(method, CENTRALITY_METHODS, "centrality")}


def v_communities(lat, method="louvain", seed=None):
    if seed is None:
        seed = lat.seed
    return (lat,), {
        "method": _check_method(method, COMMUNITY_METHODS, "community"),
        "seed": _check_int(seed, "seed", 0),
    }


def v_xor(lat, data, key=None):
    _refuse_device(data, "data")
    _refuse_device(key, "key")
    arr = np.asarray(data)
    if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        raise TypeError(
            f"xor_transform needs integer data, got dtype {arr.dtype}; XOR of float bits is "
            "not a numeric operation (view the bits with .view(np.uint64) if you mean it)"
        )
    if key is not None:
        k = np.asarray(key)
        if not np.issubdtype(k.dtype, np.integer) or k.dtype == np.bool_:
            raise TypeError(f"key must be integer, got dtype {k.dtype}")
        if k.size == 0:
            raise ValueError("key must not be empty")
        if k.ndim == 0:
            k = k.reshape(1)
        if k.dtype != arr.dtype:
            # compare values, not dtypes (NumPy 2's can_cast of a NumPy scalar is by dtype)
            info = np.iinfo(arr.dtype)
            lo, hi = int(k.min()), int(k.max())
            if lo < info.min or hi > info.max:
                raise ValueError(
                    f"key values in [{lo}, {hi}] do not fit data dtype {arr.dtype} "
                    f"([{info.min}, {info.max}])"
                )
            k = k.astype(arr.dtype)
        key = np.ascontiguousarray(k.reshape(-1))
    return (lat, arr, key), {}


def v_field(lat, field):
    return (lat, _lattice_field(lat, field)), {}


def v_diffuse(lat, field, steps=1, alpha=0.1):
    return (lat, _lattice_field(lat, field)), {
        "steps": _check_int(steps, "steps", 0),
        "alpha": _check_float(alpha, "alpha", 0.0, None),
    }


def v_data(data):
    return (_numeric_array(data, "data"),), {}


def v_scale(data, factor=1.0):
    return (_numeric_array(data, "data"),), {"factor": _check_float(factor, "factor")}


def v_matmul(a, b):
    a, b = _numeric_array(a, "a"), _numeric_array(b, "b")
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
        return (op, _numeric_array(a, "a"), None), {}
    if op in BINARY_OPS:
        if b is None:
            raise ValueError(f"elementwise {op!r} is binary; pass b")
        a, b = _numeric_array(a, "a"), _numeric_array(b, "b")
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ValueError(f"shapes {a.shape} and {b.shape} do not broadcast") from None
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


def mem_graph(lat, *_, **__):
    """Explicit graph: CSR of k n edges (int32 indices + data) plus COO scratch."""
    g = lat.geometry
    return g.n_points * len(g.offsets) * 40 + g.n_points * 8 * g.dimensions


def mem_data(data, *_, **__):
    return np.asarray(data).nbytes * 2
