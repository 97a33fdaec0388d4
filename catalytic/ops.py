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

Every function validates its arguments before any work and is routed like a lattice
operation: ``backend=`` forces a backend, and the errors of
:meth:`catalytic.Engine.run` apply (a ``backend`` that names no registered backend is a
``ValueError``; :class:`~catalytic.NoBackendError` when no backend can run the call).

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
    """Matrix product of two 2-D arrays, in float64.

    Parameters
    ----------
    a, b : array_like or GPU array
        Real numbers (integers or floats), shapes ``(n, k)`` and ``(k, m)``; GPU
        operands must be float64 and C-contiguous.
    backend : str, optional
        Run on this backend instead of the one the router picks.

    Returns
    -------
    ndarray or GPU array
        ``a @ b`` as float64, shape ``(n, m)``: a Numba device array for GPU operands.

    Raises
    ------
    TypeError
        An operand that is not real numbers (bool, complex, strings, objects), or a GPU
        operand that is not float64.
    ValueError
        An operand that is not 2-D, or inner dimensions that do not agree.

    Notes
    -----
    O(n k m). NaN and inf propagate as in NumPy (module docstring).

    Examples
    --------
    >>> import numpy as np, catalytic as cat
    >>> cat.ops.matmul(np.array([[1, 2]]), np.array([[3], [4]]))
    array([[11.]])
    """
    return get_engine().run("matmul", a, b, backend=backend)


def reduce(x, op="sum", *, backend=None):
    """Reduce all elements with ``op`` in sum, min, max, mean.

    Parameters
    ----------
    x : array_like or GPU array
        Real numbers (integers or floats), any shape.
    op : {"sum", "min", "max", "mean"}, default "sum"
    backend : str, optional
        Run on this backend instead of the one the router picks.

    Returns
    -------
    NumPy scalar
        Integer sums are exact: an int64 when the true sum fits, else OverflowError
        (never wrapping, unlike NumPy's; uint64 values above 2**63 count as themselves).
        The mean of integers is that exact sum divided by n, correctly rounded to
        float64, so it is the same on every backend and cannot overflow. Float sum and
        mean are float64; min and max keep the input's dtype. NaN and inf propagate as
        in NumPy (see the module docstring): one NaN makes every reduction NaN.

    Raises
    ------
    OverflowError
        If an integer sum does not fit in int64; the message gives the exact sum.
    ValueError
        If ``op`` is unknown, or min, max or mean of an empty array.
    TypeError
        ``x`` is not real numbers (bool, complex, strings, objects).

    Notes
    -----
    O(n). Float sums are accumulated in a different order on each backend (NumPy
    pairwise, numba-cpu fixed chunks, cuda blocks), so they agree within
    ``1e-12 * sum(|x|)``, not bit for bit.
    """
    return get_engine().run("reduce", x, op, backend=backend)


def elementwise(op, a, b=None, *, backend=None):
    """An elementwise function of one or two arrays, in float64.

    Parameters
    ----------
    op : str
        Binary: ``"add"``, ``"sub"``, ``"mul"``, ``"div"``, ``"max"``, ``"min"``,
        ``"pow"``; unary: ``"neg"``, ``"abs"``, ``"sqrt"``, ``"exp"``, ``"log"``,
        ``"sin"``, ``"cos"`` (NumPy's ufunc of that name).
    a : array_like or GPU array
        Real numbers; GPU arrays must be float64.
    b : array_like or GPU array, optional
        The second operand of a binary ``op`` (None for a unary one); host operands
        broadcast as in NumPy, GPU operands must have ``a``'s shape.
    backend : str, optional
        Run on this backend instead of the one the router picks.

    Returns
    -------
    ndarray or GPU array
        float64, the broadcast shape: a Numba device array for GPU operands.

    Raises
    ------
    ValueError
        An unknown ``op``, ``b`` given to a unary ``op`` or missing for a binary one,
        shapes that do not broadcast (or differ, with a GPU operand).
    TypeError
        An operand that is not real numbers, or a GPU operand that is not float64.

    Examples
    --------
    >>> import numpy as np, catalytic as cat
    >>> cat.ops.elementwise("add", np.arange(3), 1.5)
    array([1.5, 2.5, 3.5])
    """
    return get_engine().run("elementwise", op, a, b, backend=backend)


def random(shape, seed=0, distribution="uniform", *, backend=None):
    """Seeded counter-based random numbers, reproducible across runs and processes.

    Parameters
    ----------
    shape : int or sequence of int
        Positive sizes.
    seed : int, default 0
        In ``[0, 2**64)``.
    distribution : {"uniform", "normal", "integers"}, default "uniform"
        float64 in [0, 1), standard normal float64, or raw uint64.
    backend : str, optional
        Run on this backend instead of the one the router picks.

    Returns
    -------
    ndarray
        Of ``shape``: the same numbers for the same ``shape``, ``seed`` and
        ``distribution`` on numpy, numba-cpu and the CUDA simulator, bit for bit.

    Raises
    ------
    ValueError
        A shape with a size that is not a positive integer, a seed out of range, or an
        unknown distribution.
    TypeError
        A seed that is not an integer.

    Notes
    -----
    On a GPU, ``"normal"`` runs the same correctly rounded operations (its multiplies
    are explicitly rounded so the compiler cannot fuse them into FMAs, checked in the
    PTX), so it is expected to match bit for bit; that has not been run on hardware.
    """
    return get_engine().run("random", shape, seed, distribution, backend=backend)


def normalize(data, *, backend=None):
    """Min-max scale to [0, 1] in float64: ``(x - x.min()) / (x.max() - x.min())``.

    Parameters
    ----------
    data : array_like or GPU array
        Real numbers, any shape.
    backend : str, optional
        Run on this backend instead of the one the router picks.

    Returns
    -------
    ndarray or GPU array
        float64 of ``data``'s shape (a Numba device array for GPU data). A constant
        array gives zeros. NaN and inf as NumPy's expression gives them: data holding a
        NaN gives all NaN; an infinite min or max gives NaN where ``inf / inf`` occurs.

    Raises
    ------
    TypeError
        ``data`` is not real numbers.

    Examples
    --------
    >>> import numpy as np, catalytic as cat
    >>> cat.ops.normalize(np.array([1, 2, 3]))
    array([0. , 0.5, 1. ])
    """
    return get_engine().run("normalize", data, backend=backend)


def scale(data, factor=1.0, *, backend=None):
    """``data * factor`` in float64.

    Parameters
    ----------
    data : array_like or GPU array
        Real numbers, any shape.
    factor : real, default 1.0
        Finite.
    backend : str, optional
        Run on this backend instead of the one the router picks.

    Returns
    -------
    ndarray or GPU array
        float64 of ``data``'s shape (a Numba device array for GPU data).

    Raises
    ------
    TypeError
        ``data`` is not real numbers, or ``factor`` is not a real number.
    ValueError
        ``factor`` is NaN or infinite.
    """
    return get_engine().run("scale", data, factor=factor, backend=backend)
