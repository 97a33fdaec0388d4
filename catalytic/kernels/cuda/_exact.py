"""A float64 multiply that a GPU rounds as the CPU does, for the kernels that promise
their CPU twin's bits.

PTX arithmetic written without a rounding modifier (``mul.f64``, ``add.f64``) leaves
ptxas free to fuse a multiply and the add or subtract that uses it into one fused
multiply-add (``DFMA``: one rounding instead of two), and NVVM writes it that way:
numba-cuda compiles with NVVM's default ``-fma=1`` even when ``fastmath`` is off. So
``m * f - s`` can differ from NumPy's in the last bit on a GPU, though its PTX has no
``fma`` at all.
A product written with :func:`mul` is a ``mul.rn.f64`` (libdevice's ``dmul_rn``), which
is never fused: an expression built from it rounds every step, as NumPy does.

Under the simulator the kernels are Python, which never fuses (and the simulator's
libdevice is a stub): :func:`mul` is then ``a * b``.
``tests/kernels/cuda/test_ptx.py`` checks every launch signature's PTX for a product that
could still be fused.
"""

from __future__ import annotations

from numba import config, cuda

__all__ = ["mul"]


def _plain(a, b):
    """``a * b``."""
    return a * b


def _rn(a, b):
    """``a * b`` rounded to nearest, never fused with a following add."""
    return libdevice.dmul_rn(a, b)


if config.ENABLE_CUDASIM:
    mul = cuda.jit(device=True)(_plain)
else:
    from numba.cuda import libdevice

    mul = cuda.jit(device=True)(_rn)
