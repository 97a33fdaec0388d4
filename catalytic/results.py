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


class Transport(NamedTuple):
    """A steady state of the lattice as a resistor network (see
    :meth:`~catalytic.UnifiedCatalyticLattice.transport`), the electrodes at potentials
    1 (high) and 0 (low).

    ``potential`` has the lattice's shape: NaN on blocked sites and on sites no bond of
    conductance > 0 joins to an electrode. ``currents[s]`` is the current along each
    site's forward bond ``s`` (``bond_offsets[s]``), from the site to its neighbour, of
    shape ``(len(bond_offsets),) + shape``, 0 where the bond has no conductance or no
    potential difference. ``conductance`` is the net current out of the high electrode,
    which is the effective conductance between the electrodes (exactly 0 when no
    conducting path joins them). ``iterations`` and ``residual`` are the solver's: the
    iterations taken (0 for a direct solve) and the relative residual ``|b - A x| / |b|``
    of the reduced system reached. ``isolated``: open sites joined to no electrode;
    ``one_sided``: open sites joined to one electrode only (at its potential, carrying
    no current), both left out of the solve.
    """

    potential: np.ndarray
    currents: np.ndarray
    conductance: float
    iterations: int
    residual: float
    isolated: int
    one_sided: int


class Tortuosity(NamedTuple):
    """The tortuosity of a pore space along an axis, as PoreSpy's ``tortuosity_fd``
    defines it (see :meth:`~catalytic.UnifiedCatalyticLattice.tortuosity`):
    ``tortuosity = effective_porosity / effective_diffusivity``, ``formation_factor =
    1 / effective_diffusivity``; ``porosity`` the open sites over all, and the
    ``transport`` solved."""

    tortuosity: float
    formation_factor: float
    effective_diffusivity: float
    effective_porosity: float
    porosity: float
    transport: Transport


class ClusterStatistics(NamedTuple):
    """Per-cluster statistics of a labelling, as arrays indexed by ``label - 1``
    (:meth:`~catalytic.UnifiedCatalyticLattice.cluster_statistics`).

    ``sizes`` (count,) int64: sites per cluster (0 for a label no site holds).
    ``bbox`` (count, d, 2) int64: per axis ``[lo, hi)``; on a periodic axis the shortest
    arc holding every coordinate the cluster occupies, where ``hi`` may pass the axis
    length (the arc crosses the seam: coordinates ``lo .. hi - 1`` modulo the length),
    and the whole axis ``[0, length)`` when the cluster wraps it.
    ``centroid`` (count, d) float64: the mean of the unwrapped coordinates, on a
    periodic axis taken modulo its length; NaN along an axis the cluster wraps.
    ``gyration`` (count, d, d) float64: the gyration tensor of the unwrapped
    coordinates (their covariance, divided by the size); NaN in the rows and columns of
    wrapped axes. ``radius_of_gyration`` (count,): the square root of its trace (NaN
    when the cluster wraps an axis).
    ``faces`` (count, d, 2) bool: the cluster touches the first / last layer of an open
    axis (always False on a periodic axis). ``wraps`` (count, d) bool: the cluster
    holds a cycle of non-zero winding round a periodic axis.
    ``field``: None, or a dict of (count,) arrays reducing a field over each cluster:
    ``sum``, ``mean``, ``min``, ``max`` and ``argmin``, ``argmax`` (the flat index of
    the lowest site holding the extreme; -1 for an empty label).
    ``shape`` and ``periodic``: the lattice's.
    """

    shape: tuple
    periodic: tuple
    sizes: np.ndarray
    bbox: np.ndarray
    centroid: np.ndarray
    gyration: np.ndarray
    radius_of_gyration: np.ndarray
    faces: np.ndarray
    wraps: np.ndarray
    field: dict | None

    @property
    def count(self) -> int:
        """The number of labels (clusters 1..count)."""
        return int(self.sizes.shape[0])

    @property
    def spans(self) -> np.ndarray:
        """(count, d) bool: the cluster touches both faces of an open axis, or wraps a
        periodic one (the sense of ``spanning_clusters``)."""
        both = self.faces.all(axis=2)
        return np.where(np.asarray(self.periodic, bool), self.wraps, both)

    def _kept(self, exclude) -> np.ndarray:
        if exclude is None:
            keep = np.ones(self.count, bool)
        elif exclude == "spanning":
            keep = ~self.spans.any(axis=1)
        elif exclude == "wrapping":
            keep = ~self.wraps.any(axis=1)
        else:
            raise ValueError(f"exclude must be None, 'spanning' or 'wrapping', got {exclude!r}")
        return keep & (self.sizes > 0)

    def size_distribution(self, exclude=None):
        """The cluster-size distribution: ``(s, n_s)``, the sizes that occur (int64,
        ascending) and the clusters of each size per lattice site (float64).

        Parameters
        ----------
        exclude : None, "spanning" or "wrapping"
            Leave out the clusters that span or wrap any axis (``spans``), or wrap any
            periodic axis (``wraps``).

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> L = cat.Lattice(shape=(1, 6))
        >>> st = L.cluster_statistics(L.label(np.array([[1, 1, 0, 1, 0, 1]])).labels)
        >>> st.size_distribution()
        (array([1, 2]), array([0.33333333, 0.16666667]))
        """
        s, counts = np.unique(self.sizes[self._kept(exclude)], return_counts=True)
        return s.astype(np.int64), counts / float(np.prod(self.shape, dtype=np.float64))

    def mean_cluster_size(self, exclude="spanning") -> float:
        """``sum s^2 n_s / sum s n_s`` over the clusters kept (by default those that
        neither span nor wrap); NaN when none is kept."""
        s = self.sizes[self._kept(exclude)].astype(np.float64)
        return float((s * s).sum() / s.sum()) if s.size else float("nan")

    def correlation_length(self, exclude="spanning") -> float:
        """``sqrt(2 sum_c s_c^2 Rg_c^2 / sum_c s_c^2)`` over the clusters kept (Stauffer
        and Aharony's correlation length, from each cluster's radius of gyration on
        unwrapped coordinates); NaN when none is kept."""
        keep = self._kept(exclude)
        s = self.sizes[keep].astype(np.float64)
        rg = self.radius_of_gyration[keep]
        return float(np.sqrt(2 * (s * s * rg * rg).sum() / (s * s).sum())) if s.size \
            else float("nan")

    def to_pandas(self):
        """One row per label (index ``label``), one column per statistic and axis
        (``bbox_lo_0``, ``centroid_1``, ``wraps_0``, ...); needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas needs pandas (pip install pandas)") from None
        cols = {"size": self.sizes, "radius_of_gyration": self.radius_of_gyration}
        for a in range(len(self.shape)):
            cols[f"bbox_lo_{a}"] = self.bbox[:, a, 0]
            cols[f"bbox_hi_{a}"] = self.bbox[:, a, 1]
            cols[f"centroid_{a}"] = self.centroid[:, a]
            cols[f"face_lo_{a}"] = self.faces[:, a, 0]
            cols[f"face_hi_{a}"] = self.faces[:, a, 1]
            cols[f"wraps_{a}"] = self.wraps[:, a]
        for name, v in (self.field or {}).items():
            cols[f"field_{name}"] = v
        return pd.DataFrame(cols, index=pd.RangeIndex(1, self.count + 1, name="label"))
