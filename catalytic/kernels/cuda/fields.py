"""CUDA twins of :mod:`catalytic.kernels.cpu.fields`: graph Laplacian and explicit diffusion.
Each host function's docstring names its twin and says only what differs from it.

Lattice conventions (``shape``, ``strides``, ``periodic``, ``offsets``, ``open_``,
``dedupe``) are those of :mod:`catalytic.kernels.cpu.neighbors`; neighbours come from the
device :func:`catalytic.kernels.cuda.neighbors.neighbor`, compiled from the CPU source.

A 2-d grid stride: x over the sites, y over the fields of a batch (a single field is a
stack of one), sized to the device (at most 8 blocks of ``TPB`` threads per
multiprocessor, as the array kernels; under the simulator one (site, row) pair per
thread, see ``_launch_shape``). A thread decodes its site's coordinates once
(:func:`~catalytic.kernels.cuda.neighbors.inside`, d divisions); away from edges and
seams each neighbour is then one addition of a flat offset
(:func:`~catalytic.kernels.cuda.neighbors.step`), elsewhere ``neighbor`` (d divisions
per entry). Each site sums its neighbours in stencil order starting from 0.0,
then forms ``deg * f_i - acc`` (and ``f_i - alpha * lap`` for an Euler step): the CPU
twin's per-site order. Two kernels from one source, ``dedupe`` fixed at compile time:

* ``_lap_kernel`` (``dedupe`` False): walks the stencil, skipping entries with no site.
* ``_lap_dedupe_kernel`` (``dedupe`` True): the same walk, dropping duplicates and
  self-loops (:func:`~catalytic.kernels.cuda.neighbors.kept`): a per-entry flag on the
  fast path, elsewhere the earlier entries' neighbours recomputed
  (:func:`~catalytic.kernels.cuda.neighbors.is_first`, O(k^2 d) per site); no
  per-thread local buffer, so any stencil size.

With bonds (``bonds=``, ``Geometry.bond_args()``) a neighbour counts through an open
bond only, and with bond weights it counts with its conductance ``c``, the bond weight
(the least of parallel bonds on a short periodic axis): ``(sum c) f_i - sum c f_j``.

The small lattice tables (shape, strides, periodic, offsets, the fast-path tables) are
copied to the device once per geometry and reused
(:func:`catalytic.kernels.cuda.graph._tables`): a call copies over only its field, and
the mask when the caller has no device copy of it.

Agreement: bit-identical to the CPU twin. The simulator shows it; on a GPU the risk
is a fused multiply-add, which rounds once where NumPy rounds twice: NVVM writes
``deg * f_i - sum`` and ``f_i - alpha * L f_i`` with an unrounded multiply that ptxas
would fuse with the subtraction, so both products go through
:func:`~catalytic.kernels.cuda._exact.mul`, a multiply the GPU never fuses. The PTX
checks find no fusable product in them, and ``test_laplacian_sass_has_no_fma``
disassembles what ptxas makes of them.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from catalytic.kernels.cpu.fields import _prepare
from catalytic.kernels.cuda import _transfer
from catalytic.kernels.cuda._exact import mul
from catalytic.kernels.cuda.neighbors import bond_at, inside, kept, least_bond, step
from catalytic.kernels.cuda.arrays import (
    _SIMULATOR,
    _device_view,
    _finish,
    _is_device,
    _max_blocks,
    _out_buffer,
    _overlap,
    _threads,
    _to_device,
)
from catalytic.kernels.cuda.graph import _bonds, _tables

__all__ = ["laplacian", "diffuse", "laplacian_batched"]


# --------------------------------------------------------------------------- kernels


def _make_lap_kernel(dedupe):
    """The Laplacian / Euler-step kernel over the neighbour set, de-duplicated or not
    (``dedupe`` is fixed at compile time)."""

    def kernel(shape, strides, periodic, offsets, foff, lo, hi, first, open_, bslot, bits, words,
               bw, field, out, alpha, euler):
        """Laplacian (``euler`` False) or one Euler step of every row of a (B, n) stack,
        on a 2-d grid stride: x over the sites, y over the rows. Each site's
        coordinates are decoded once (:func:`inside`); its neighbours come from
        :func:`step` and :func:`kept` keeps those through open bonds and, with
        ``dedupe``, drops duplicates and self-loops (no local buffer). Every row sums
        the neighbours in stencil order from 0.0. With bond weights (``bw`` not empty)
        each neighbour counts with its conductance ``c``, the bond's weight (the least
        of parallel ones, :func:`least_bond`): ``sum c`` times ``f_i`` minus
        ``sum c f_j``, each product rounded on its own (no fused multiply-add)."""
        x, y = cuda.grid(2)
        sx, sy = cuda.gridsize(2)
        rows = field.shape[0]
        n = field.shape[1]
        masked = open_.shape[0] != 0
        has_bw = bw.shape[0] != 0
        for i in range(x, field.shape[1], sx):
            is_open = not masked or open_[i] != 0
            fast = is_open and inside(i, strides, lo, hi)
            for b in range(y, rows, sy):
                fi = field[b, i]
                lap = 0.0
                if is_open:
                    acc = 0.0
                    m = 0.0
                    for k in range(offsets.shape[0]):
                        j = step(i, k, fast, foff, shape, strides, periodic, offsets, open_)
                        if j >= 0 and kept(i, k, j, fast, first, dedupe, shape, strides,
                                           periodic, offsets, open_, bslot, bits, words):
                            if has_bw:
                                if dedupe and not fast:
                                    c = least_bond(i, k, j, shape, strides, periodic, offsets,
                                                   open_, bslot, bits, words, bw, n)
                                else:
                                    c = bw[bond_at(i, j, bslot[k], n)]
                                acc += mul(c, field[b, j])
                                m += c
                            else:
                                acc += field[b, j]
                                m += 1.0
                    lap = mul(m, fi) - acc
                if euler:
                    out[b, i] = fi - mul(alpha, lap)
                else:
                    out[b, i] = lap

    return cuda.jit(kernel)


#: every stencil entry counts (``dedupe`` False)
_lap_kernel = _make_lap_kernel(False)
#: the de-duplicated neighbour set (``dedupe`` True)
_lap_dedupe_kernel = _make_lap_kernel(True)


# --------------------------------------------------------------------------- host side


def _stack(name, a, n, batched):
    """``(2-d (B, n) view, is_device)`` of a float64 field or stack of fields."""
    if _is_device(a):
        a = _device_view(a)
        dev = True
        contiguous = a.is_c_contiguous()
    elif isinstance(a, np.ndarray):
        dev = False
        contiguous = a.flags.c_contiguous
    else:
        raise TypeError(f"{name} must be a float64 ndarray or device array, got {type(a).__name__}")
    if a.dtype != np.float64:
        raise TypeError(f"{name} must be float64, got {a.dtype}")
    want = 2 if batched else 1
    if a.ndim != want or a.shape[a.ndim - 1] != n or not contiguous:
        what = f"(B, {n})" if batched else f"({n},)"
        raise ValueError(f"{name} must be a contiguous array of shape {what}, got {tuple(a.shape)}")
    if not batched:
        a = a.reshape(1, n)
    return a, dev


def _device_open(open_, n):
    """A device ``open_`` (the caller's cached copy) as a flat uint8 device view, used
    in place: never through NumPy, which would copy it to the host and back."""
    d = _device_view(open_)
    if d.dtype != np.uint8:
        raise TypeError(f"open_ device array has dtype {d.dtype}, expected uint8")
    if d.size not in (0, n) or not d.is_c_contiguous():
        raise ValueError(f"open_ must be a contiguous array of length 0 or {n}, "
                         f"got shape {tuple(d.shape)}")
    return d.reshape(d.size)


class _Geometry:
    """The validated lattice, its device tables (cached per geometry, :func:`_tables`)
    and the kernel that fits ``dedupe``. ``open_`` may be a device array (it is then
    used as is); a host ``open_`` is copied at each call."""

    def __init__(self, shape, periodic, offsets, open_, dedupe, bonds=None):
        d_open = open_ if _is_device(open_) else None
        if d_open is not None:
            open_ = np.zeros(0, np.uint8)  # checked below, against n
        shape, _strides, periodic, offsets, open_, n = _prepare(shape, periodic, offsets, open_)
        self.n = n
        self.lattice = (shape, periodic, offsets)
        self.open_ = open_
        self.d_open = None if d_open is None else _device_open(d_open, n)
        self.args = None
        self.bonds = bonds
        self.kernel = _lap_dedupe_kernel if dedupe else _lap_kernel

    def upload(self, stream):
        t = _tables(*self.lattice, stream)
        d_open = self.d_open
        if d_open is None:
            d_open = _transfer.to_device(self.open_, stream=stream)
        d_bits, words, d_bw = _bonds(t, self.bonds, stream, weights=True)
        self.args = (t.d_shape, t.d_strides, t.d_periodic, t.d_offsets, *t.d_fast, t.d_first,
                     d_open, t.d_bslot, d_bits, np.int64(words), d_bw)

    def launch(self, src, dst, alpha, euler, stream):
        rows = src.shape[0]
        if rows and self.n:
            grid, block = _launch_shape(self.n, rows)
            self.kernel[grid, block, stream](*self.args, src, dst, float(alpha), euler)


def _launch_shape(n, rows):
    """``(grid, block)`` of a field launch over ``rows`` x ``n`` (site, row) pairs. On a
    GPU at most :func:`~catalytic.kernels.cuda.arrays._max_blocks` blocks, which then
    stride. Under the simulator one pair per thread: its threads are Python threads
    polled by the launching one, and a thread that runs long (a site's k neighbours for
    several rows) slows the launch down a hundredfold; the tests cover the stride
    loops with a small grid of their own."""
    tx = _threads(n)
    bx = -(-n // tx)
    if _SIMULATOR:
        return (bx, rows), (tx, 1)
    bx = min(bx, _max_blocks())
    return (bx, min(rows, max(1, _max_blocks() // bx))), (tx, 1)


def _run(shape, periodic, offsets, open_, dedupe, field, steps, alpha, out, stream, batched,
         bonds=None):
    geo = _Geometry(shape, periodic, offsets, open_, dedupe, bonds)
    f, f_dev = _stack("field", field, geo.n, batched)
    o, o_dev = _stack("out", out, geo.n, batched)
    if tuple(f.shape) != tuple(o.shape):
        raise ValueError(f"out has shape {tuple(o.shape)}, field has {tuple(f.shape)}")
    if _overlap(f, f_dev, o, o_dev):
        raise ValueError("out must not overlap field")
    geo.upload(stream)
    d_f = _to_device(f, f_dev, stream)
    d_o = _out_buffer(o, o_dev, stream)
    if steps is None:
        geo.launch(d_f, d_o, 0.0, False, stream)
    elif steps == 0:
        d_o.copy_to_device(d_f, stream=stream)
    else:
        scratch = cuda.device_array(d_o.shape, dtype=np.float64, stream=stream) if steps > 1 else d_o
        src = d_f
        for s in range(steps):
            dst = d_o if (steps - 1 - s) % 2 == 0 else scratch
            geo.launch(src, dst, alpha, True, stream)
            src = dst
    _finish(d_o, o, o_dev, stream)
    return out


def laplacian(shape, periodic, offsets, open_, dedupe, field, out, *, stream=0, bonds=None):
    """Graph Laplacian of a site field over the lattice neighbour set, on the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.fields.laplacian`: the same contract and
    the same bits; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        As the twin's; ``open_`` may also be a uint8 device array (a cached copy), read in
        place, not copied.
    field, out : ndarray or device array of float64, (n,)
        As the twin's; device arrays are read and written where they are.
    stream : numba stream or 0, optional
        Stream for the copies and the launch.
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` and ``bw`` may be device arrays): a neighbour
        counts through an open bond, with its bond weight as conductance (the least of
        parallel bonds; 1 without bond weights). None: every bond open, conductance 1.

    Returns
    -------
    out : ndarray or device array of float64, (n,)
        ``out``, filled.

    Raises
    ------
    TypeError
        Also when a device ``open_`` is not uint8.

    Notes
    -----
    O(n k) work away from edges and seams (d divisions per site), O(n k d) at them;
    memory bound on a GPU (one read of ``f`` per neighbour, mostly from cache, one
    write). Same per-site summation order as the twin, and no fused multiply-add.

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([0.0, 1.0, 0.0])
    >>> laplacian((3,), (False,), [[-1], [1]], np.zeros(0, np.uint8), False, f,
    ...           np.empty(3))  # doctest: +SKIP
    array([-1.,  2., -1.])
    """
    return _run(shape, periodic, offsets, open_, dedupe, field, None, 0.0, out, stream, False,
                bonds)


def laplacian_batched(shape, periodic, offsets, open_, dedupe, fields, out, *, stream=0,
                      bonds=None):
    """:func:`laplacian` of every row of a (B, n) stack of fields, in one launch.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe
        The lattice shared by every field.
    fields : ndarray or device array of float64, (B, n)
    out : ndarray or device array of float64, (B, n); must not overlap ``fields``.
    stream : numba stream or 0, optional
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` and ``bw`` may be device arrays): a neighbour
        counts through an open bond, with its bond weight as conductance (the least of
        parallel bonds; 1 without bond weights). None: every bond open, conductance 1.

    Returns
    -------
    out : ndarray or device array of float64, (B, n)
        Row ``b`` equals ``laplacian(..., fields[b], ...)`` bit for bit.

    Raises
    ------
    TypeError, ValueError
        As :func:`laplacian`.

    Notes
    -----
    O(B n k) work (O(B n k d) at edges and seams) on a 2-d grid stride: a thread's
    site coordinates are decoded once for all the rows it takes.

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    >>> laplacian_batched((3,), (True,), [[-1], [1]], np.zeros(0, np.uint8), False, f,
    ...                   np.empty_like(f))  # doctest: +SKIP
    array([[-1.,  2., -1.],
           [ 0.,  0.,  0.]])
    """
    return _run(shape, periodic, offsets, open_, dedupe, fields, None, 0.0, out, stream, True,
                bonds)


def diffuse(shape, periodic, offsets, open_, dedupe, field, steps, alpha, out, *, stream=0,
            bonds=None):
    """Explicit-Euler diffusion ``f <- f - alpha * L f``, repeated ``steps`` times, on
    the device.

    The CUDA twin of :func:`catalytic.kernels.cpu.fields.diffuse`: the same contract and the
    same bits; only what differs is said here.

    Parameters
    ----------
    shape, periodic, offsets, open_, dedupe, field, steps, alpha, out
        As the twin's; ``open_``, ``field`` and ``out`` may be device arrays, read and
        written where they are.
    stream : numba stream or 0, optional
        Stream for the copies and the launches.
    bonds : tuple, optional
        ``Geometry.bond_args()`` (``bits`` and ``bw`` may be device arrays): a neighbour
        counts through an open bond, with its bond weight as conductance (the least of
        parallel bonds; 1 without bond weights). None: every bond open, conductance 1.

    Returns
    -------
    out : ndarray or device array of float64, (n,)
        ``out``, filled.

    Notes
    -----
    O(steps n k) work, one launch per step; the steps ping-pong between ``out`` and
    one device scratch field so that the last lands in ``out`` (only the final result
    is copied back). Same per-site order as the twin, no FMA.

    Examples
    --------
    >>> import numpy as np
    >>> f = np.array([0.0, 1.0, 0.0])
    >>> diffuse((3,), (False,), [[-1], [1]], np.zeros(0, np.uint8), False, f, 1, 0.25,
    ...         np.empty(3))  # doctest: +SKIP
    array([0.25, 0.5 , 0.25])
    """
    steps = int(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    return _run(shape, periodic, offsets, open_, dedupe, field, steps, alpha, out, stream, False,
                bonds)
