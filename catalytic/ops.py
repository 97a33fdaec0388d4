"""Array operations that need no lattice, routed like every other operation.

GPU arrays (Numba device arrays, or anything with ``__cuda_array_interface__``) are
accepted by ``matmul``, ``reduce``, ``elementwise``, ``normalize`` and ``scale``: the
cuda backend runs them and returns a Numba device array (``reduce``: a scalar), so
chained calls keep data on the device. ``matmul`` and ``elementwise`` need float64 GPU
operands, and GPU operands of ``elementwise`` must have equal shapes (no broadcasting).

NaN and inf follow one rule in every operation that takes float data (``matmul``,
``reduce``, ``elementwise``, ``normalize``, ``scale``, and the lattice's ``laplacian``
and ``diffuse``): IEEE arithmetic, as NumPy and SciPy do. They are values, not errors;
NaN and inf come out where NumPy's expression for the operation puts them, with the
same NaN positions on every backend (numpy, numba-cpu, cuda) and for GPU arrays.
Consequences: ``reduce`` of data holding a NaN is NaN for sum, mean, min and max (as
``np.min``; drop them first with ``x[~np.isnan(x)]``); ``inf + -inf`` is NaN; ``normalize``
of data holding a NaN is all NaN (its min and max are NaN), as
``(x - x.min()) / (x.max() - x.min())`` is; ``matmul`` and the Laplacian carry a NaN or
inf to every output that reads it (``0 * inf`` is NaN). Why not refuse non-finite input:
these operations make NaN and inf themselves (``div`` by 0, ``log(0)``, a sum past
1.8e308), so a check on input would not keep them out of results; the check is a full
extra pass over every input on every call (a device reduction for GPU arrays); and it
would make the same data valid for NumPy and invalid here. A lattice's site ``weights``
still refuse NaN: they define the lattice, they are not data it computes on.

Integer sums never wrap: ``reduce(x, "sum")`` of integers is exact, an int64 when the
true sum fits and an OverflowError when it does not (where NumPy's int64 sum wraps
silently, and a uint64 value above 2**63 would turn negative).

Examples
--------
>>> import numpy as np, catalytic as cat
>>> int(cat.ops.reduce(np.arange(10), "sum"))   # a NumPy scalar, as np.sum gives
45
>>> float(cat.ops.reduce(np.array([1.0, np.nan, 3.0]), "max"))   # NaN propagates
nan
>>> cat.ops.reduce(np.array([2**62, 2**62], dtype=np.int64), "sum")
Traceback (most recent call last):
...
OverflowError: reduce 'sum' of this int64 array is 9223372036854775808, outside the int64 range [-2**63, 2**63 - 1]; sum x.astype(np.float64) for a float result, or sum(x.tolist()) for the exact Python int
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

    Integer sums are exact: an int64 when the true sum fits, else OverflowError (never
    wrapping, unlike NumPy's; uint64 values above 2**63 count as themselves). The mean of
    integers is that exact sum divided by n, correctly rounded to float64, so it is the
    same on every backend and cannot overflow. Float sum and mean are float64; min and
    max keep the input's dtype. NaN and inf propagate as in NumPy (see the module
    docstring): one NaN makes every reduction NaN. Float sums are accumulated in a
    different order on each backend (NumPy pairwise, numba-cpu fixed chunks, cuda
    blocks), so they agree within ``1e-12 * sum(|x|)``, not bit for bit.

    Raises
    ------
    OverflowError
        If an integer sum does not fit in int64; the message gives the exact sum.
    ValueError
        If ``op`` is unknown, or min, max or mean of an empty array.
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
    """Min-max scale to [0, 1] in float64: ``(x - x.min()) / (x.max() - x.min())``.

    A constant array gives zeros. NaN and inf as NumPy's expression gives them: data
    holding a NaN gives all NaN; an infinite min or max gives NaN where ``inf / inf``
    occurs.
    """
    return get_engine().run("normalize", data, backend=backend)


def scale(data, factor=1.0, *, backend=None):
    """``data * factor`` in float64."""
    return get_engine().run("scale", data, factor=factor, backend=backend)
