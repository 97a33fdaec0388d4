"""The former home of the Newman-Ziff sweep (``spanning_thresholds``): now the
events-only mode of :mod:`catalytic.kernels.cpu.newman_ziff`, re-exported here for the
callers of this name."""

from __future__ import annotations

from catalytic.kernels.cpu.newman_ziff import sample_order as _sample_order
from catalytic.kernels.cpu.newman_ziff import spanning_thresholds

__all__ = ["spanning_thresholds", "sample_order"]


def sample_order(key, b, n, open_idx):
    """The open sites in sample ``b``'s occupation order (NumPy; the kernel's twin)."""
    return _sample_order(key, b, n, open_idx)
