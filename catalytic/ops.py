"""Array operations that need no lattice, routed like every other operation.

GPU arrays (Numba device arrays, or anything with ``__cuda_array_interface__``) are
accepted by ``matmul``, ``reduce``, ``elementwise``, ``normalize`` and ``scale``: the
cuda backend runs them and returns a Numba device array (``reduce``: a scalar), so
chained calls keep data on the device. ``matmul`` and ``elementwise`` need float64 GPU
operands, and GPU operands of ``elementwise`` must have equal shapes (no broadcasting).

Examples
--------
>>> import numpy as np, catalytic as cat
>>> int(cat.ops.reduce(np.arange(10), "sum"))   # a NumPy scalar, as np.sum gives
45
>>> cat.ops.matmul(np.eye(2), np.ones((2, 3))).shape
(2, 3)
>>> a = cat.ops.random((4,), seed=7)
>>> bool(np.array_equal(a, cat.ops.random((4,), seed=7)))   # reproducible
True
"""

from __future__ import annotations

from catalytic.engine import get_engine

__all__ = ["matmul", "reduce", "elementwise", "random", "normalize", "scale"]


def matmul(a, b, *, backend=None):
    """Matrix product of two 2-D arrays, float64."""
    return get_engine().run("matmul", a, b, backend=backend)


def reduce(x, op="sum", *, backend=None):
    """Reduce all elements with ``op`` in sum, min, max, mean.

    Integer sums are exact in int64 (wrapping on overflow, as NumPy's); mean is float64;
    min and max keep the input's dtype. Float sums are accumulated in a different order
    on each backend (NumPy pairwise, numba-cpu fixed chunks), so they agree within
    ``1e-12 * sum(|x|)``, not bit for bit.
    """
    return get_engine().run("reduce", x, op, backend=backend)


def elementwise(op, a, b=None, *, backend=None):
    """Elementwise ``op`` in float64: add, sub, mul, div, max, min, pow (binary,
    broadcasting) or neg, abs, sqrt, exp, log, sin, cos (unary)."""
    return get_engine().run("elementwise", op, a, b, backend=backend)


def random(shape, seed=0, distribution="uniform", *, backend=None):
    """Seeded counter-based random numbers, reproducible across runs and processes.

    ``distribution`` is "uniform" (float64 in [0, 1)), "normal" (float64) or
    "integers" (raw uint64), bit-identical on numpy, numba-cpu and the CUDA simulator.
    On a GPU "normal" runs the same correctly rounded operations (its multiplies are
    explicitly rounded so the compiler cannot fuse them into FMAs, checked in the PTX),
    so it is expected to match bit for bit; that has not yet been run on hardware.
    """
    return get_engine().run("random", shape, seed, distribution, backend=backend)


def normalize(data, *, backend=None):
    """Min-max scale to [0, 1] in float64 (a constant array gives zeros)."""
    return get_engine().run("normalize", data, backend=backend)


def scale(data, factor=1.0, *, backend=None):
    """``data * factor`` in float64."""
    return get_engine().run("scale", data, factor=factor, backend=backend)
