"""What the lattice operations return: named tuples of arrays and counts (exported as
``catalytic.PathResult``, ``Components``, ``SpanningClusters`` and ``Communities``)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class PathResult(NamedTuple):
    """A shortest path: flat site indices from start to end, and its length.

    ``distance`` is the hop count (int) on unweighted lattices and, on weighted ones (site
    or bond weights), the left-to-right sum of the step costs, a step costing the weight
    of the bond crossed plus that of the site entered (float). When the end cannot be
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


class SpanningClusters(NamedTuple):
    """Which clusters span which axes, from one labelling.

    ``clusters[axis]`` is a sorted int64 array of the labels (as in
    ``components.labels``) of the clusters that span ``axis``: touch both faces of an
    open axis, or wrap around a periodic one (see
    :meth:`~catalytic.UnifiedCatalyticLattice.spanning_clusters`). ``components`` is
    the labelling they refer to, so sizes need no second pass.
    """

    clusters: dict
    components: Components


class Communities(NamedTuple):
    """A partition of the open sites: ``labels`` (-1 on blocked sites, communities
    numbered 0.. in order of their lowest flat index), ``count`` and ``modularity``."""

    labels: np.ndarray
    count: int
    modularity: float
