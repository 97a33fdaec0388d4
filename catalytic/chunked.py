"""One lattice larger than one machine: ``cat.ChunkedLattice``, connected components,
clusters of values, spanning and wrapping of a lattice whose mask, bonds and values are
Dask arrays.

How it works
------------
1. **Each chunk** is labelled on a worker by catalytic's own labelling (an in-memory
   :class:`~catalytic.Lattice` of the chunk, every axis open, routed to whatever backend
   the worker has). Each chunk sends the client its label count and its faces: the
   labels of its first and last layer along every axis, the bonds there, and the sizes
   of the clusters that touch them. The sizes of all its clusters stay on the worker
   (8 bytes a cluster); the labels are not kept.
2. **The client** numbers every chunk's clusters one after the other (chunks in C
   order of the chunk grid): a *piece* is a cluster of one chunk. Along each axis, the
   two layers on either side of every boundary between chunks (and of the periodic seam,
   also with a single chunk) are laid side by side, and each bond that crosses it, open
   and between open sites, joins two pieces. A union-find over those joins
   (:func:`catalytic.kernels.cpu.seams.join`) merges the pieces, keeping each piece's
   image displacement, so that a cluster closing a loop around a periodic axis is seen to
   wrap it.
3. **Each chunk** is labelled again and relabelled on its worker from what the client
   sends it (only its own face pieces, and those merged into an earlier chunk's): the
   result is a Dask array of globally consistent labels, computed when it is.

Numbering: labels ``1..count``, in order of the first chunk (in C order of the chunk
grid) holding a site of the cluster, then of the lowest chunk-local flat index of its
sites there. With one chunk that is the in-memory numbering (lowest flat index first);
with several, the same clusters under another numbering.

Cost: every chunk is labelled twice (once for its faces, once when the labels are
computed), and a worker holds, beyond the arrays it computes, only its chunks' cluster
sizes between the two; a chunk in work takes its mask, its labels (4 bytes a site) and
the relabelled copy. The client holds the faces: ``2 d`` layers a chunk, ``(labels + kf bond bytes)`` per face
site, and a union-find over the pieces that touch a face. For a lattice of side ``L``
in ``d`` dimensions cut into ``c`` chunks per axis, the faces hold about ``2 d c L^(d-1)``
sites: the merge grows with the number of chunks along an axis and with the lattice's
cross-section, not with its volume (``reports/chunked.md`` projects it to 10^11 sites).

Stencils: every offset within one step along each axis (von Neumann, Moore, or any such
set), so a bond crosses at most one boundary between chunks per axis.
"""

from __future__ import annotations

import math
import numbers
import time
from typing import NamedTuple

import numpy as np

from catalytic.results import SpanningClusters

__all__ = ["ChunkedLattice", "ChunkedComponents"]


class ChunkedComponents(NamedTuple):
    """Connected components of a chunked lattice.

    ``labels``: a Dask array of the lattice's shape and chunks, 0 on blocked sites and
    ``1..count`` on open ones (numbered as :mod:`catalytic.chunked` says); ``count``;
    ``sizes``: a Dask array, ``sizes[i]`` the sites of label ``i + 1``.
    """

    labels: object
    count: int
    sizes: object


# -- on the workers ---------------------------------------------------------------------------
def _label_chunk(mask, bonds, offsets, values=None, background=0, delta=0, dtype=None):
    """The clusters of one chunk, every axis open (of its open sites, or with ``values``
    of its close values, as :meth:`catalytic.Lattice.label`): int32 labels (int64 past
    2**31 sites), numbered by lowest chunk-local flat index. ``dtype``: the values' dtype
    as their Dask array declares it (every chunk must hold it: the faces' keys of
    different dtypes do not compare)."""
    from catalytic.lattice import Lattice

    _check_block("mask", mask)
    if bonds is not None:
        _check_block("bonds", bonds)
    lat = Lattice(shape=mask.shape, stencil=offsets, mask=mask, bonds=bonds)
    if values is None:
        labels = lat.connected_components().labels
    else:
        if not isinstance(values, np.ndarray) or values.shape != mask.shape:
            raise TypeError(f"a chunk of values has shape {getattr(values, 'shape', None)}, "
                            f"not its chunk's {mask.shape}")
        if dtype is not None and values.dtype != dtype:
            raise TypeError(f"a chunk of values has dtype {values.dtype}, not {dtype} as "
                            "the array declares: every chunk must hold the declared dtype")
        labels = lat.label(values, background=background, delta=delta).labels
    want = np.int32 if mask.size < 2**31 else np.int64
    return labels.astype(want, copy=False)


def _check_block(name, block):
    """A chunk of the mask or the bonds is a bool array, as declared."""
    if not isinstance(block, np.ndarray) or block.dtype != np.bool_:
        got = getattr(block, "dtype", type(block).__name__)
        raise TypeError(f"a chunk of {name} has dtype {got}, not bool: every chunk of a "
                        f"chunked lattice's {name} must be bool")


def _faces(labels, sizes, bonds, bond_offsets, values=None):
    """What the client needs of one labelled chunk: its count; per axis, the labels of
    its first and last layer and the bonds there that cross to the next chunk (and with
    ``values`` their keys, ``catalogue.value_keys``); and the sizes of the clusters on
    those layers, from ``sizes`` (:func:`_piece_sizes`)."""
    from catalytic.catalogue import value_keys

    d = labels.ndim
    count = sizes.shape[0] - 1
    faces = {}
    on_face = []
    for a in range(d):
        lo = np.array(np.take(labels, 0, axis=a))
        hi = np.array(np.take(labels, labels.shape[a] - 1, axis=a))
        # the bonds that leave the chunk through each face: backward ones (offset -1
        # along a) from the first layer, forward ones (+1) from the last
        lob = hib = None
        if bonds is not None:
            lob = np.array(np.take(bonds, 0, axis=a + 1))
            hib = np.array(np.take(bonds, labels.shape[a] - 1, axis=a + 1))
        faces[a] = (lo, hi, lob, hib)
        if values is not None:
            faces[a] += tuple(value_keys(np.array(np.take(values, i, axis=a))).reshape(lo.shape)
                              for i in (0, labels.shape[a] - 1))
        on_face += [lo.reshape(-1), hi.reshape(-1)]
    touching = np.unique(np.concatenate(on_face)) if on_face else np.zeros(0, np.int64)
    touching = touching[touching > 0].astype(np.int64)
    return count, faces, touching, sizes[touching]


def _piece_sizes(labels):
    """The sites of each piece of a chunk (index 0: its blocked sites), int64."""
    count = int(labels.max(initial=0)) if labels.size else 0
    return np.bincount(labels.reshape(-1), minlength=count + 1).astype(np.int64)


def _relabel(labels, count, shift, dropped, nodes, finals, dtype):
    """The chunk in the global numbering. Piece ``k`` of the chunk's ``count`` becomes
    ``k + shift`` less the chunk's pieces below it merged into an earlier one
    (``dropped``, sorted); a piece on a face (``nodes``) becomes its cluster's label
    (``finals``); blocked sites stay 0."""
    k = np.arange(count + 1, dtype=np.int64)
    table = k + shift - np.searchsorted(dropped, k)
    table[nodes] = finals
    table[0] = 0
    return table.astype(dtype)[labels]


def _owned_sizes(sizes, dropped, roots, totals):
    """The sizes of the clusters this chunk numbers (its pieces not merged into an
    earlier one), in label order: a piece's own size, or for a piece that others
    joined (``roots``) its cluster's total (``totals``) from the client."""
    sizes = sizes.copy()
    sizes[roots] = totals
    keep = np.ones(sizes.shape[0], dtype=bool)
    keep[0] = False
    keep[dropped] = False
    return sizes[keep]


def _site_block(seed, p, shape, block_info=None):
    """The sites of one chunk, open with probability ``p``: the uniform of each site's
    flat index in the lattice, as ``cat.ops.random(shape, seed) < p``."""
    return _open_block(seed, p, tuple(shape), block_info[None]["array-location"])


def _bond_block(seed, p, shape, kf, block_info=None):
    """The bonds of one chunk, open with probability ``p``: bond ``s`` of site ``i`` the
    uniform of counter ``s n + i``, as ``cat.ops.random((kf,) + shape, seed) < p``."""
    return _open_block(seed, p, (kf,) + tuple(shape), block_info[None]["array-location"])


#: sites drawn at a time: the draws' temporaries (about 40 bytes a site) stay small
DRAW_SITES = 1 << 20


def _open_block(seed, p, shape, loc):
    """``uniform < p`` at the C-order flat indices in ``shape`` of the block at ``loc``
    ((start, stop) per axis), drawn a slab of the block's first axis at a time."""
    from catalytic.kernels.random import uniform_at

    loc = [(int(lo), int(hi)) for lo, hi in loc]
    out = np.empty(tuple(hi - lo for lo, hi in loc), dtype=bool)
    strides = [int(math.prod(shape[a + 1:])) for a in range(len(shape))]
    rest = int(math.prod(out.shape[1:]))
    step = max(1, DRAW_SITES // max(rest, 1))
    # the flat offset of every site of one slab of the first axis, its first row at 0
    inner = np.zeros(out.shape[1:], dtype=np.uint64)
    for a in range(1, len(shape)):
        lo, hi = loc[a]
        idx = np.arange(lo, hi, dtype=np.uint64) * np.uint64(strides[a])
        inner += idx.reshape((-1,) + (1,) * (len(shape) - 1 - a))
    for r0 in range(0, out.shape[0], step):
        r1 = min(out.shape[0], r0 + step)
        rows = (np.arange(loc[0][0] + r0, loc[0][0] + r1, dtype=np.uint64)
                * np.uint64(strides[0]))
        counters = rows.reshape((-1,) + (1,) * (len(shape) - 1)) + inner
        out[r0:r1] = uniform_at(seed, counters) < p
    return out


# -- the lattice ------------------------------------------------------------------------------
class ChunkedLattice:
    """A lattice whose mask (and bonds) are Dask arrays, labelled chunk by chunk on a Dask
    cluster and joined across the chunks' faces.

    Parameters
    ----------
    mask : dask.array.Array of bool, or ndarray of bool
        True where a site exists; its chunks are the lattice's. A NumPy array is cut into
        ``chunks``.
    periodic : bool or sequence of bool, default False
        Whether each axis wraps around.
    stencil : {"von_neumann", "moore"} or array_like (k, d), default "von_neumann"
        Neighbour offsets, each within one step along every axis.
    bonds : dask.array.Array or ndarray of bool, shape ``(kf,) + mask.shape``, optional
        Open bonds in the layout of :class:`~catalytic.Lattice`'s ``bonds`` (plane ``s``
        the bonds along forward offset ``bond_offsets[s]`` from each site); chunked as
        the mask, all ``kf`` planes in each chunk. None opens every bond.
    chunks : int or tuple, optional
        How to cut a NumPy ``mask`` (Dask's ``chunks``); not with a Dask array.
    client : distributed.Client, optional
        The cluster; default: the current client (``distributed.get_client()``).

    Raises
    ------
    ValueError
        A mask with no sites or chunks of unknown size, bonds of the wrong shape or whose
        chunks do not tile the lattice as the mask's do, a stencil that reaches further than one step along
        an axis, ``chunks`` with a Dask mask, or no Dask client.
    TypeError
        A mask or bonds that are not declared bool.
    ConnectionError
        The cluster cannot be reached or has no workers.

    Notes
    -----
    The calls compute on the cluster; nothing is computed when the lattice is made. A
    chunk whose data is not bool when computed raises TypeError. Needs ``pip install
    "catalytic[dask]"``.

    Examples
    --------
    >>> import numpy as np, catalytic as cat
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \\
    ...         Client(cluster) as client:
    ...     m = np.array([[1, 1, 0, 1], [0, 1, 0, 1], [1, 1, 0, 1]], bool)
    ...     C = cat.ChunkedLattice(m, chunks=2, periodic=(False, True), client=client)
    ...     comp = C.connected_components()
    ...     comp.count, comp.labels.compute().tolist(), C.percolates(0), C.percolates(1)
    (1, [[1, 1, 0, 1], [0, 1, 0, 1], [1, 1, 0, 1]], True, False)
    """

    def __init__(self, mask, *, periodic=False, stencil="von_neumann", bonds=None,
                 chunks=None, client=None):
        import dask.array as da

        from catalytic.lattice import Lattice

        if isinstance(mask, da.Array):
            if chunks is not None:
                raise ValueError("chunks= cuts a NumPy mask; a Dask mask has its own")
        else:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_:
                raise TypeError(f"mask must be bool, got {mask.dtype}")
            mask = da.from_array(mask, chunks="auto" if chunks is None else chunks)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be a bool array, got dtype {mask.dtype}")
        if any(math.isnan(c) for axis in mask.chunks for c in axis):
            raise ValueError("the mask's chunk sizes are unknown (NaN): call "
                             "mask.compute_chunk_sizes() first")
        if mask.ndim == 0 or mask.size == 0:
            raise ValueError(f"mask must have at least one site, got shape {mask.shape}")
        self._template = Lattice(shape=mask.shape, periodic=periodic, stencil=stencil)
        offsets = self._template.offsets
        if np.abs(offsets).max(initial=0) > 1:
            raise ValueError("a chunked lattice takes stencils whose offsets are within one "
                             "step along every axis (von Neumann, Moore or a subset); got "
                             f"an offset reaching {int(np.abs(offsets).max())}")
        self.mask = mask
        self.shape = tuple(int(s) for s in mask.shape)
        self.periodic = self._template.periodic
        self.offsets = offsets
        self.bond_offsets = self._template.bond_offsets
        self.bonds = self._bonds(bonds)
        self.client = _client(client)
        self._merged = None

    @classmethod
    def random(cls, shape, p, *, chunks, seed=0, kind="site", periodic=False,
               stencil="von_neumann", client=None):
        """A random lattice made chunk by chunk on the workers: sites (``kind="site"``)
        or bonds (``"bond"``, every site open) open with probability ``p``.

        Each site's (or bond's) draw is the uniform of its flat index in the lattice
        (:func:`catalytic.ops.random`, counter-based), so the lattice is the same for
        every chunking: ``cat.ops.random(shape, seed) < p`` in memory, or
        ``cat.ops.random((kf,) + shape, seed) < p`` for the bonds.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> from distributed import Client, LocalCluster
        >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c, \\
        ...         Client(c) as client:
        ...     C = cat.ChunkedLattice.random((6, 8), 0.6, chunks=(3, 4), seed=1,
        ...                                   client=client)
        ...     bool((C.mask.compute() == (cat.ops.random((6, 8), 1) < 0.6)).all())
        True
        """
        import dask.array as da

        shape = tuple(int(s) for s in shape)
        if not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
        if kind not in ("site", "bond"):
            raise ValueError(f'kind must be "site" or "bond", got {kind!r}')
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not (
                0 <= seed < 2**64):
            raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        norm = da.core.normalize_chunks(chunks, shape, dtype=np.bool_)
        if kind == "site":
            mask = da.map_blocks(_site_block, int(seed), float(p), shape, chunks=norm,
                                 dtype=np.bool_, meta=np.empty((0,) * len(shape), bool))
            return cls(mask, periodic=periodic, stencil=stencil, client=client)
        from catalytic.lattice import Lattice

        kf = len(Lattice(shape=shape, periodic=periodic, stencil=stencil).bond_offsets)
        mask = da.ones(shape, chunks=norm, dtype=np.bool_)
        bonds = da.map_blocks(_bond_block, int(seed), float(p), shape, kf,
                              chunks=((kf,),) + norm, dtype=np.bool_,
                              meta=np.empty((0,) * (len(shape) + 1), bool))
        return cls(mask, periodic=periodic, stencil=stencil, bonds=bonds, client=client)

    def _bonds(self, bonds):
        import dask.array as da

        if bonds is None:
            return None
        kf = len(self.bond_offsets)
        want = (kf,) + self.shape
        if not isinstance(bonds, da.Array):
            bonds = np.asarray(bonds)
            if bonds.dtype != np.bool_:
                raise TypeError(f"bonds must be bool, got {bonds.dtype}")
            if bonds.shape != want:
                raise ValueError(f"bonds must have shape (len(bond_offsets),) + shape = "
                                 f"{want}, got {bonds.shape}")
            return da.from_array(bonds, chunks=((kf,),) + self.mask.chunks)
        if bonds.dtype != np.bool_:
            raise TypeError(f"bonds must be a bool array, got dtype {bonds.dtype}")
        if bonds.shape != want:
            raise ValueError(f"bonds must have shape (len(bond_offsets),) + shape = {want}, "
                             f"got {bonds.shape}")
        if bonds.chunks[1:] != self.mask.chunks or len(bonds.chunks[0]) != 1:
            raise ValueError("the chunks of bonds must tile the lattice as the mask's do, "
                             f"all planes in each: want {((kf,),) + self.mask.chunks}, got "
                             f"{bonds.chunks}")
        return bonds

    # -- the labelling and the merge ----------------------------------------------------------
    def _merge(self):
        """Label every chunk, join the pieces, and keep what the calls need."""
        if self._merged is None:
            self._merged = _Merge(self)
        return self._merged

    def connected_components(self) -> ChunkedComponents:
        """The clusters of the open sites, as Dask arrays with globally consistent labels.

        Returns
        -------
        ChunkedComponents
            ``labels`` (Dask, the lattice's shape and chunks), ``count``, ``sizes``
            (Dask); numbered as :mod:`catalytic.chunked` says. Computing ``labels``
            labels each chunk again on its worker and relabels it. Compute them on
            the lattice's cluster: with its client the default one (as a ``Client``
            made last is), or ``labels.compute(scheduler=client)``.
        """
        return self._merge().components

    def label(self, values, *, background=0, delta=0) -> ChunkedComponents:
        """Clusters of equal (or close) values over the chunks, as
        :meth:`catalytic.Lattice.label` gives them for the same lattice in memory.

        Parameters
        ----------
        values : dask.array.Array or ndarray of bool, int or float
            One value per site, chunked as the mask (a NumPy array is cut so).
        background : number or None, default 0
            Sites holding it are never labelled; None labels every open site.
        delta : float, default 0
            The largest difference that joins two neighbours (integers compared
            exactly, by the floor of ``delta``).

        Returns
        -------
        ChunkedComponents
            Numbered as :mod:`catalytic.chunked` says.

        Raises
        ------
        TypeError
            ``values`` is not bool, integer or float; ``delta`` or ``background`` is
            not a number.
        ValueError
            ``values`` has another shape, or chunks other than the mask's; ``delta`` is
            negative or NaN, ``background`` NaN. NaN at an open site is refused when its
            chunk is labelled.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> from distributed import Client, LocalCluster
        >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c, \\
        ...         Client(c) as client:
        ...     C = cat.ChunkedLattice(np.ones((1, 6), bool), chunks=2, client=client)
        ...     C.label(np.array([[1, 1, 2, 2, 0, 2]])).labels.compute().tolist()
        [[1, 1, 2, 2, 0, 3]]
        """
        import dask.array as da

        from catalytic.catalogue import _KEY_MAX

        if not isinstance(values, da.Array):
            values = np.asarray(values)
            if values.shape != self.shape:
                raise ValueError(f"values has shape {values.shape}; expected the lattice "
                                 f"shape {self.shape}")
            values = da.from_array(values, chunks=self.mask.chunks)
        if np.dtype(values.dtype).kind not in "biuf":
            raise TypeError(f"values must be a boolean, integer or float array, got dtype "
                            f"{values.dtype}")
        if values.shape != self.shape:
            raise ValueError(f"values has shape {values.shape}; expected the lattice shape "
                             f"{self.shape}")
        if values.chunks != self.mask.chunks:
            raise ValueError("the chunks of values must tile the lattice as the mask's do: "
                             f"want {self.mask.chunks}, got {values.chunks}")
        if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
            raise TypeError(f"delta must be a real number, got {delta!r}")
        if math.isnan(delta) or delta < 0:
            raise ValueError(f"delta must be >= 0, got {delta!r}")
        if background is not None:
            if not isinstance(background, (numbers.Real, np.bool_)):
                raise TypeError(f"background must be a real number or None, got "
                                f"{background!r}")
            if math.isnan(background):
                raise ValueError("background must not be NaN (no value equals NaN)")
        if np.dtype(values.dtype).kind == "f":
            key_delta = float(delta)
        else:
            key_delta = (int(min(math.floor(delta), _KEY_MAX)) if math.isfinite(delta)
                         else _KEY_MAX)
        return _Merge(self, values, background, delta, key_delta).components

    def spanning_clusters(self, axes=None) -> SpanningClusters:
        """The clusters spanning each axis, as :meth:`catalytic.Lattice.spanning_clusters`
        answers for the same lattice in memory: on an open axis those touching both
        faces, on a periodic one those that wrap it.

        Returns
        -------
        SpanningClusters
            ``clusters``: axis -> sorted int64 labels (of :meth:`connected_components`);
            ``components``: the :class:`ChunkedComponents`.
        """
        d = len(self.shape)
        if axes is None:
            axes = tuple(range(d))
        elif isinstance(axes, numbers.Integral):
            axes = (axes,)
        axes = [self._template._axis(a) for a in axes]
        if len(set(axes)) != len(axes):
            raise ValueError(f"an axis is named twice in {axes}")
        m = self._merge()
        return SpanningClusters({a: m.spanning(a) for a in axes}, m.components)

    def stats(self) -> dict:
        """What the labelling cost (it is made on the first call that needs it):
        ``chunks``; ``chunks_s``, the seconds until every chunk's faces reached the
        client (labelling them on the cluster); ``merge_s``, the seconds of the merge on
        the client; ``face_sites`` and ``face_bytes``, the face data the client got;
        ``pieces``, the clusters of all chunks; ``pieces_on_faces``, those the merge
        took in; ``bonds_across``, the bonds it joined them by."""
        return dict(self._merge().stats)

    def percolates(self, axis: int = 0) -> bool:
        """True if some cluster spans ``axis`` (touches both faces of an open axis, or
        wraps a periodic one), as :meth:`catalytic.Lattice.percolates`."""
        axis = self._template._axis(axis)
        return bool(self._merge().spanning(axis).size)


def _client(client):
    """The client to compute on, checked to reach a cluster with workers."""
    try:
        import distributed
    except ImportError as err:  # pragma: no cover - the dask extra is not installed
        raise ImportError('a chunked lattice needs pip install "catalytic[dask]"') from err
    if client is None:
        try:
            client = distributed.get_client()
        except ValueError:
            raise ValueError("no Dask client: pass client=, or start one "
                             "(distributed.Client(...)) first") from None
    if getattr(client, "status", None) != "running":
        raise ConnectionError(f"the Dask client is not connected (status "
                              f"{getattr(client, 'status', None)!r}): the cluster cannot be "
                              "reached")
    try:
        workers = client.scheduler_info()["workers"]
    except Exception as err:
        raise ConnectionError(f"the Dask scheduler cannot be reached: {err}") from err
    if not workers:
        raise ConnectionError("the Dask cluster has no workers")
    return client


class _Merge:
    """One labelling of a chunked lattice: the chunks labelled on the workers (their
    pieces' sizes kept there), their faces on the client, the pieces joined, and the
    results."""

    def __init__(self, lat: ChunkedLattice, values=None, background=0, delta=0,
                 key_delta=None):
        import dask
        import dask.array as da

        self.lat = lat
        client = lat.client
        shape, d = lat.shape, len(lat.shape)
        self.d = d
        nb = lat.mask.numblocks
        self.blocks = list(np.ndindex(*nb))
        masks = lat.mask.to_delayed()
        bonds = lat.bonds.to_delayed() if lat.bonds is not None else None
        offsets = lat.offsets
        label = dask.delayed(_label_chunk, pure=True)
        face = dask.delayed(_faces, pure=True)
        piece_sizes = dask.delayed(_piece_sizes, pure=True)
        # the labels are not kept: the faces and the pieces' sizes are taken from them,
        # and the relabelling labels each chunk again (a worker holds no labels between
        # the calls; a chunk's labelling costs less than keeping it)
        vals = values.to_delayed() if values is not None else None
        self.labelled, summary, sizes = {}, [], []
        for idx in self.blocks:
            b = bonds[(0,) + idx] if bonds is not None else None
            x = vals[idx] if vals is not None else None
            lab = label(masks[idx], b, offsets, x, background, delta,
                        None if values is None else np.dtype(values.dtype))
            self.labelled[idx] = lab
            sized = piece_sizes(lab)
            summary.append(face(lab, sized, b, lat.bond_offsets, x))
            sizes.append(sized)
        t0 = time.perf_counter()
        futures = client.compute(sizes + summary)
        self.sizes = dict(zip(self.blocks, futures[:len(sizes)]))
        faces = client.gather(futures[len(sizes):])
        del futures
        t1 = time.perf_counter()
        # the provisional numbering: every chunk's pieces after the last chunk's
        counts = np.array([f[0] for f in faces], dtype=np.int64)
        base = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.face = {idx: f for idx, f in zip(self.blocks, faces)}
        self.base = dict(zip(self.blocks, base.tolist()))
        self.counts = dict(zip(self.blocks, counts.tolist()))
        self.chunks = lat.mask.chunks
        starts = [np.concatenate([[0], np.cumsum(c)]) for c in self.chunks]
        self.starts = starts
        # every bond across a boundary between chunks, or a periodic seam
        us, vs, ws = [], [], []
        for a in range(d):
            for c in range(nb[a] - 1 + (1 if lat.periodic[a] else 0)):
                lo_layer, lo_bonds, lo_keys = self._layer(a, c, "hi")
                hi_layer, hi_bonds, hi_keys = self._layer(a, (c + 1) % nb[a], "lo")
                seam = c == nb[a] - 1
                u, v, w = _crossing(lo_layer, hi_layer, lo_bonds, hi_bonds, lat.bond_offsets,
                                    a, shape, lat.periodic, seam,
                                    keys=None if lo_keys is None else (lo_keys, hi_keys),
                                    key_delta=key_delta)
                us.append(u)
                vs.append(v)
                ws.append(w)
        u = np.concatenate(us) if us else np.zeros(0, np.int64)
        v = np.concatenate(vs) if vs else np.zeros(0, np.int64)
        w = np.concatenate(ws) if ws else np.zeros((0, d), np.int8)
        # the pieces that touch a face, with their sizes
        touch = [self.face[idx][2] + self.base[idx] for idx in self.blocks]
        sizes = [self.face[idx][3] for idx in self.blocks]
        nodes = np.concatenate(touch) if touch else np.zeros(0, np.int64)
        node_sizes = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        order = np.argsort(nodes)
        nodes, node_sizes = nodes[order], node_sizes[order]
        from catalytic.kernels.cpu.seams import join

        root, wraps = join(np.searchsorted(nodes, u), np.searchsorted(nodes, v), w,
                           nodes.shape[0])
        merged = root != np.arange(nodes.shape[0])
        self.nodes = nodes
        self.root = root
        self.wraps = wraps
        self.dropped = nodes[merged]  # sorted: nodes are
        self.count = int(counts.sum()) - int(self.dropped.shape[0])
        totals = np.bincount(root, node_sizes, minlength=nodes.shape[0]).astype(np.int64)
        self.node_final = self._final(nodes)
        label_dtype = np.int32 if math.prod(shape) < 2**31 else np.int64
        # each chunk relabelled from its own table; its sizes of the clusters it numbers
        relabel = dask.delayed(_relabel, pure=True)
        owned = dask.delayed(_owned_sizes, pure=True)
        blocks = np.empty(nb, dtype=object)
        size_parts = []
        for idx in self.blocks:
            b0, cnt = self.base[idx], self.counts[idx]
            lo, hi = np.searchsorted(nodes, [b0 + 1, b0 + cnt + 1])
            mine = nodes[lo:hi] - b0
            dlo, dhi = np.searchsorted(self.dropped, [b0 + 1, b0 + cnt + 1])
            dropped_here = self.dropped[dlo:dhi] - b0
            shape_here = tuple(self.chunks[a][idx[a]] for a in range(d))
            blocks[idx] = da.from_delayed(
                relabel(self.labelled[idx], cnt, b0 - int(dlo), dropped_here, mine,
                        self.node_final[lo:hi], label_dtype), shape_here, dtype=label_dtype)
            is_root = ~merged[lo:hi]
            n_own = cnt - dropped_here.shape[0]
            size_parts.append(da.from_delayed(
                owned(self.sizes[idx], dropped_here, mine[is_root], totals[lo:hi][is_root]),
                (n_own,), dtype=np.int64))
        labels = da.block(blocks.tolist()) if d > 0 else blocks[()]
        sizes_arr = (da.concatenate(size_parts) if size_parts
                     else da.zeros(0, dtype=np.int64))
        self.components = ChunkedComponents(labels, self.count, sizes_arr)
        face_bytes = sum(x.nbytes for f in faces for layers in f[1].values()
                         for x in layers if x is not None)
        self.stats = {"chunks": len(self.blocks), "chunks_s": t1 - t0,
                      "merge_s": time.perf_counter() - t1,
                      "face_sites": int(sum(f[1][a][0].size + f[1][a][1].size
                                            for f in faces for a in range(d))),
                      "face_bytes": int(face_bytes), "pieces": int(counts.sum()),
                      "pieces_on_faces": int(nodes.shape[0]),
                      "bonds_across": int(u.shape[0])}

    def _layer(self, a, c, side):
        """The cross-section of the lattice along axis ``a`` at chunk ``c``'s first
        (``side="lo"``) or last layer: provisional labels (int64) and the bonds there
        ((kf,) + cross-section, or None)."""
        lat = self.lat
        cross = tuple(s for b, s in enumerate(lat.shape) if b != a)
        out = np.zeros(cross, dtype=np.int64)
        kf = len(lat.bond_offsets)
        bonds = np.zeros((kf,) + cross, dtype=bool) if lat.bonds is not None else None
        keys = None
        k = 0 if side == "lo" else 1
        for idx in self.blocks:
            if idx[a] != c:
                continue
            layers = self.face[idx][1][a]
            lo, hi, lob, hib = layers[:4]
            layer = lo if k == 0 else hi
            where = tuple(slice(self.starts[b][idx[b]], self.starts[b][idx[b] + 1])
                          for b in range(self.d) if b != a)
            out[where] = np.where(layer > 0, layer.astype(np.int64) + self.base[idx], 0)
            if bonds is not None:
                bonds[(slice(None),) + where] = lob if k == 0 else hib
            if len(layers) > 4:  # the values' keys
                if keys is None:
                    keys = np.zeros(cross, dtype=layers[4].dtype)
                keys[where] = layers[4 + k]
        return out, bonds, keys

    def _final(self, g):
        """The global labels of provisional labels ``g`` (> 0)."""
        g = np.asarray(g, dtype=np.int64)
        pos = np.searchsorted(self.nodes, g)
        inside = pos < self.nodes.shape[0]
        hit = np.zeros(g.shape, dtype=bool)
        hit[inside] = self.nodes[pos[inside]] == g[inside]
        rep = g.copy()
        rep[hit] = self.nodes[self.root[pos[hit]]]
        return rep - np.searchsorted(self.dropped, rep)

    def spanning(self, axis):
        """Sorted int64 labels of the clusters spanning ``axis``."""
        lat = self.lat
        nb = lat.mask.numblocks
        if lat.periodic[axis]:
            return np.unique(self._final(self.nodes[self.wraps[:, axis]
                                                    & (self.root == np.arange(len(self.root)))]))
        lo = self._layer(axis, 0, "lo")[0]
        hi = self._layer(axis, nb[axis] - 1, "hi")[0]
        a = np.unique(self._final(lo[lo > 0]))
        b = np.unique(self._final(hi[hi > 0]))
        return np.intersect1d(a, b).astype(np.int64)


def _close(a, b, delta):
    """Keys ``a`` and ``b`` at most ``delta`` apart, as the labelling kernels decide
    (``kernels.cpu.values._close``): equal ones always (equal infinities too); unsigned
    keys by the larger minus the smaller, which never wraps."""
    if a.dtype == np.float64:
        with np.errstate(invalid="ignore"):
            return (a == b) | (np.abs(a - b) <= delta)
    return (np.maximum(a, b) - np.minimum(a, b)) <= np.uint64(delta)


def _crossing(low, high, low_bonds, high_bonds, bond_offsets, a, shape, periodic, seam,
              keys=None, key_delta=None):
    """The bonds across one boundary along axis ``a``: ``low`` and ``high`` the
    provisional labels of the layers before and after it (cross-sections of the lattice),
    the bonds of each layer (or None: all open). Returns ``(u, v, w)``: the pieces each
    open bond between open sites joins, from its start to its end, and how many times it
    crosses each periodic seam forward (int8 (E, d)). With ``keys`` (the values' keys of
    the two layers), only bonds between close keys (``key_delta``, as the chunks'
    labelling: ``catalogue.label_keys``)."""
    d = len(shape)
    cross_axes = [b for b in range(d) if b != a]
    cs = low.shape
    S = low.size
    coords = np.indices(cs).reshape(len(cs), S) if cs else np.zeros((0, 1), np.int64)
    us, vs, ws = [], [], []
    for s, off in enumerate(np.asarray(bond_offsets)):
        o = int(off[a])
        if o == 0:
            continue
        src, dst = (low, high) if o > 0 else (high, low)
        bits = None
        if low_bonds is not None:
            bits = (low_bonds if o > 0 else high_bonds)[s].reshape(-1)
        keep = np.ones(S, dtype=bool)
        target = np.zeros(S, dtype=np.int64)
        w = np.zeros((S, d), dtype=np.int8)
        if seam:
            w[:, a] = 1 if o > 0 else -1
        stride = 1
        for k in range(len(cross_axes) - 1, -1, -1):
            b = cross_axes[k]
            t = coords[k] + int(off[b])
            if periodic[b]:
                w[:, b] = np.floor_divide(t, shape[b])
                t = np.mod(t, shape[b])
            else:
                keep &= (t >= 0) & (t < shape[b])
                t = np.clip(t, 0, shape[b] - 1)
            target += t * stride
            stride *= shape[b]
        u = src.reshape(-1)
        v = dst.reshape(-1)[target]
        keep &= (u > 0) & (v > 0)
        if keys is not None:
            ks, kd = (keys[0], keys[1]) if o > 0 else (keys[1], keys[0])
            keep &= _close(ks.reshape(-1), kd.reshape(-1)[target], key_delta)
        if bits is not None:
            keep &= bits
        us.append(u[keep])
        vs.append(v[keep])
        ws.append(w[keep])
    if not us:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, d), np.int8)
    return np.concatenate(us), np.concatenate(vs), np.concatenate(ws)
