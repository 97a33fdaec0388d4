"""Everyday tools on a labelling (cc3d's ``dust``, ``largest_k`` and ``each``, SciPy's
relabelling), for the :class:`~catalytic.results.Components` of
``connected_components`` and ``label`` or any labels array.

Each returns new arrays; nothing passed in is modified. Labels stay numbered ``1..count``
in order of their lowest flat index unless a function says otherwise.

>>> import numpy as np, catalytic as cat
>>> comp = cat.Lattice(shape=(1, 7)).label(np.array([[1, 1, 0, 2, 0, 3, 3]]))
>>> cat.clusters.dust(comp, 2).labels.tolist()
[[1, 1, 0, 0, 0, 2, 2]]
"""

from __future__ import annotations

import numbers

import numpy as np

from catalytic.results import Components

__all__ = ["relabel", "dust", "largest_k", "find_objects", "each"]


def _labels(labels) -> np.ndarray:
    arr = np.asarray(getattr(labels, "labels", labels))
    if arr.dtype.kind not in "iu":
        raise TypeError(f"labels must be an integer array, got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"labels must be >= 0 (0: no cluster), got {int(arr.min())}")
    return arr


def _renumber(arr, keep_label) -> Components:
    """Labels ``keep_label`` (bool per label 0..max) kept, renumbered 1.. in order of
    their lowest flat index, the others 0."""
    flat = arr.reshape(-1)
    kept = keep_label[flat]
    _, first, inv = np.unique(flat[kept], return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    out = np.zeros(flat.size, arr.dtype)
    out[kept] = rank[inv] + 1
    out = out.reshape(arr.shape)
    return Components(out, int(first.size),
                      np.bincount(out.reshape(-1), minlength=first.size + 1)[1:].astype(np.int64))


def relabel(labels) -> Components:
    """Labels renumbered ``1..count`` in order of their lowest flat index, without gaps
    (as after ``dust`` or a mask), with their sizes.

    Parameters
    ----------
    labels : array_like of int, or Components
        0 for no cluster.

    Returns
    -------
    Components
        The same partition in the input's dtype and shape.

    Examples
    --------
    >>> relabel(np.array([7, 7, 0, 3, 9])).labels.tolist()
    [1, 1, 0, 2, 3]
    """
    arr = _labels(labels)
    keep = np.ones(int(arr.max(initial=0)) + 1, bool)
    keep[0] = False
    return _renumber(arr, keep)


def dust(components, min_size) -> Components:
    """The labelling without its clusters of fewer than ``min_size`` sites, renumbered.

    Parameters
    ----------
    components : Components or array_like of int
    min_size : int
        Clusters smaller than this become 0 (>= 0; 0 and 1 keep every cluster).

    Returns
    -------
    Components
    """
    if isinstance(min_size, bool) or not isinstance(min_size, (numbers.Integral, np.integer)):
        raise TypeError(f"min_size must be an integer, got {min_size!r}")
    if min_size < 0:
        raise ValueError(f"min_size must be >= 0, got {min_size}")
    arr = _labels(components)
    sizes = np.bincount(arr.reshape(-1))
    keep = sizes >= min_size
    keep[0] = False
    return _renumber(arr, keep)


def largest_k(components, k) -> Components:
    """The ``k`` largest clusters, numbered ``1..k`` from the largest (equal sizes in
    order of their lowest flat index); the others 0.

    Parameters
    ----------
    components : Components or array_like of int
    k : int
        >= 0; more than there are keeps them all.

    Returns
    -------
    Components

    Examples
    --------
    >>> largest_k(np.array([1, 2, 2, 0, 3, 3, 3]), 2).labels.tolist()
    [0, 2, 2, 0, 1, 1, 1]
    """
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)):
        raise TypeError(f"k must be an integer, got {k!r}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    base = relabel(components)
    order = np.argsort(-base.sizes, kind="stable")[:k]  # labels - 1, largest first
    new = np.zeros(base.count + 1, np.int64)
    new[order + 1] = np.arange(1, order.size + 1)
    flat = base.labels.reshape(-1)
    out = new[flat].astype(base.labels.dtype).reshape(base.labels.shape)
    return Components(out, int(order.size), base.sizes[order])


def find_objects(stats) -> list:
    """The clusters' bounding boxes as slices, as ``scipy.ndimage.find_objects`` gives
    them: one tuple of slices per label (None for a label no site holds).

    Parameters
    ----------
    stats : ClusterStatistics

    Returns
    -------
    list

    Raises
    ------
    ValueError
        A box crosses a periodic seam (its shortest arc runs past the end of the axis):
        no slice holds it; :func:`each` gives such clusters whole.

    Examples
    --------
    >>> import catalytic as cat
    >>> L = cat.Lattice(shape=(3, 4))
    >>> c = L.label(np.array([[1, 1, 0, 0], [0, 0, 0, 2], [0, 0, 0, 2]]))
    >>> find_objects(L.cluster_statistics(c))
    [(slice(0, 1, None), slice(0, 2, None)), (slice(1, 3, None), slice(3, 4, None))]
    """
    out = []
    for c in range(stats.count):
        if stats.sizes[c] == 0:
            out.append(None)
            continue
        for a, (lo, hi) in enumerate(stats.bbox[c]):
            if hi > stats.shape[a]:
                raise ValueError(f"the box of label {c + 1} crosses the seam of periodic axis "
                                 f"{a} ([{lo}, {hi}) on an axis of {stats.shape[a]}): no "
                                 "slice holds it; clusters.each gives it whole")
        out.append(tuple(slice(int(lo), int(hi)) for lo, hi in stats.bbox[c]))
    return out


def each(labels, stats):
    """Iterate over the clusters as crops of their bounding boxes, periodic-aware.

    Parameters
    ----------
    labels : Components or array_like of int
        The labelling ``stats`` describes.
    stats : ClusterStatistics
        ``Lattice.cluster_statistics(labels)``: its boxes are the shortest arcs on
        periodic axes, so a cluster that crosses a seam comes out in one piece.

    Yields
    ------
    label : int
    crop : ndarray of bool
        The cluster's sites within its box (the box's shape).
    origin : tuple of int
        The box's first corner: the crop's index ``x`` along an axis is lattice
        coordinate ``(origin + x) % length``.

    Examples
    --------
    >>> import catalytic as cat
    >>> m = np.zeros((1, 6), bool); m[0, [0, 5]] = True
    >>> L = cat.Lattice(shape=(1, 6), periodic=True, mask=m)
    >>> c = L.connected_components()
    >>> [(lab, crop.tolist(), o) for lab, crop, o in each(c, L.cluster_statistics(c))]
    [(1, [[True, True]], (0, 5))]
    """
    arr = _labels(labels)
    if arr.shape != tuple(stats.shape):
        raise ValueError(f"labels has shape {arr.shape}; the statistics are of {stats.shape}")
    for c in range(stats.count):
        if stats.sizes[c] == 0:
            continue
        crop = arr
        for a, (lo, hi) in enumerate(stats.bbox[c]):
            crop = np.take(crop, np.arange(lo, hi), axis=a, mode="wrap")
        yield c + 1, crop == c + 1, tuple(int(x) for x in stats.bbox[c, :, 0])
