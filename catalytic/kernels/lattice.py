"""The former name of :mod:`catalytic.kernels.neighbors` (kept for plugins built against
catalytic 0.1, which import it; catalytic itself does not)."""

from catalytic.kernels.neighbors import c_strides, cuda_functions, neighbor, neighbors_into

__all__ = ["c_strides", "neighbor", "neighbors_into", "cuda_functions"]
