"""``UnifiedCatalyticLattice``: the user's handle on an implicit n-D lattice.

It holds geometry and thin methods; every algorithm runs through ``engine.run()``, which
routes to a backend and explains its choice (``lattice.last_decision``).
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass, field

import numpy as np

from catalytic.catalysis import lend
from catalytic.engine import get_engine
from catalytic.memory import check_host_memory
from catalytic.geometry import Geometry, _as_shape
from catalytic.results import (
    ClusterStatistics,
    Communities,
    Components,
    PathResult,
    SpanningClusters,
    Tortuosity,
    Transport,
)

__all__ = ["UnifiedCatalyticLattice", "Lattice", "LatticeMetrics"]


@dataclass
class LatticeMetrics:
    """Measured facts about a lattice: sizes and the bytes it really holds.

    Every byte figure is the ``nbytes`` of an array the lattice holds; ``process_rss``
    is the resident set size of this process (psutil) when the metrics were taken.
    """

    shape: tuple
    n_points: int
    n_open: int
    n_blocked: int
    structure_bytes: int
    mask_bytes: int
    weights_bytes: int
    aux_bytes: int
    total_bytes: int
    bytes_per_site: float
    process_rss: int
    last_decision: str | None = None
    extra: dict = field(default_factory=dict)


def _bond_bytes(array, per_plane: int) -> int:
    """Bytes the geometry will hold for ``bonds``/``bond_weights`` (0 for None; the
    array's own planes when it has a shape)."""
    if array is None:
        return 0
    planes = np.shape(array)[0] if np.ndim(array) else 0
    return int(planes) * per_plane


#: the unsigned integer types ``dtype="smallest"`` picks from, narrowest first
_SMALLEST = (np.uint8, np.uint16, np.uint32, np.uint64)


def _check_label_out(shape, dtype, out):
    """The labels' dtype from ``dtype`` and ``out`` (checked before any work): None
    (the backend's own: int32, or int64 from 2**31 sites), ``"smallest"``, or an integer
    dtype; ``out`` a writeable integer array of ``shape`` (a memmap too) whose dtype
    ``dtype``, when given, must equal."""
    if isinstance(dtype, str) and dtype == "smallest":
        pass
    elif dtype is not None:
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be an integer dtype, 'smallest' or None, got "
                            f"{dtype!r}") from None
        if dtype.kind not in "iu":
            raise TypeError(f"dtype must be an integer dtype, 'smallest' or None, got {dtype}")
    if out is None:
        return dtype
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a NumPy array (a memmap too), got {type(out).__name__}")
    if out.shape != tuple(shape):
        raise ValueError(f"out has shape {out.shape}; expected the lattice shape {tuple(shape)}")
    if out.dtype.kind not in "iu":
        raise TypeError(f"out must have an integer dtype, got {out.dtype}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    if isinstance(dtype, str):
        raise ValueError("dtype='smallest' and out= name the dtype twice; give one")
    if dtype is not None and dtype != out.dtype:
        raise ValueError(f"dtype {dtype} differs from out's dtype {out.dtype}")
    return out.dtype


def _deliver_labels(comp, dtype, out):
    """``comp`` with its labels in ``dtype`` or written into ``out`` (checked by
    :func:`_check_label_out`); an error, with ``out`` untouched, when the count does not
    fit."""
    if dtype is None and out is None:
        return comp
    if isinstance(dtype, str):
        dtype = next((t for t in _SMALLEST if comp.count <= np.iinfo(t).max), np.uint64)
    dtype = np.dtype(dtype)
    if comp.count > np.iinfo(dtype).max:
        raise ValueError(f"{comp.count} labels do not fit in {dtype} (at most "
                         f"{np.iinfo(dtype).max}); nothing was written")
    if out is None:
        return Components(comp.labels.astype(dtype, copy=False), comp.count, comp.sizes)
    np.copyto(out, comp.labels, casting="unsafe")
    return Components(out, comp.count, comp.sizes)



class UnifiedCatalyticLattice:
    """An implicit n-dimensional lattice with routed operations.

    Parameters
    ----------
    dimensions : int, optional
        Number of axes; with ``size`` this gives shape ``(size,) * dimensions``.
    size : int or sequence of int, optional
        Sites per axis (older API). A sequence is taken as the shape.
    shape : sequence of int, optional
        Sites per axis; use instead of ``dimensions``/``size``.
    periodic : bool or sequence of bool, default False
        Whether each axis wraps around.
    stencil : {"von_neumann", "moore"} or array_like (k, d), default "von_neumann"
        Neighbour offsets: 2d nearest neighbours, all 3^d - 1 surrounding sites, or
        your own symmetric integer offsets.
    mask : bool ndarray of ``shape``, optional
        True where a site exists (blocked sites are not part of the graph). Copied.
    weights : real ndarray of ``shape``, optional
        Cost of *entering* each site (finite, >= 0): path lengths become the sum of the
        weights of the sites entered after the start (Dijkstra). Copied.
    bonds : bool ndarray of shape ``(len(L.bond_offsets),) + shape``, optional
        True where the bond (edge) is open. Plane ``s`` holds the bonds along forward
        offset ``L.bond_offsets[s]`` (the stencil rows whose first non-zero entry is
        positive), indexed by the site each bond starts from; a bond across a periodic
        seam belongs to the site it starts from, and entries of bonds that would leave
        an open axis are ignored. A bond is usable when it is open and both its sites
        exist. None opens every bond. Stored one bit per bond.
    bond_weights : real ndarray of the same shape as ``bonds``, optional
        Cost of crossing each bond (finite, >= 0): a step ``u -> v`` then costs its bond
        weight plus the weight of ``v``; Laplacian and diffusion take it as the bond's
        conductance. Copied as float64.
    seed : int, default 0
        Seed of the lattice's catalytic key (``xor_transform``) and of random methods.
    aux_memory_size : int, default 1000
        Bytes of the lattice's own catalyst buffer, which holds the catalytic key and is
        lent to operations such as ``find_path_catalytic`` (always restored).
    enable_gpu : bool, default True
        False keeps every operation on CPU backends.
    enable_smart_routing : bool, default True
        False runs every operation on the reference ``numpy`` backend unless a call
        names a backend.
    engine : Engine, optional
        The engine that runs this lattice's operations; default: the process-wide
        engine (:func:`catalytic.get_engine`) at the time of each call.

    Raises
    ------
    ValueError
        A shape that is not positive integers (``shape=`` may have an axis of 0 sites),
        ``shape=`` together with ``dimensions``/``size``, a seed outside
        ``[0, 2**64)``, an ``aux_memory_size`` below 1, a stencil, mask or weights that
        do not fit the shape, or weights that are negative, NaN, infinite or sum past
        2**1022, bonds or bond weights of the wrong shape, bond weights that are
        negative, NaN or infinite.
    TypeError
        A seed or ``aux_memory_size`` that is not an integer, a mask or bonds that are
        not bool, weights or bond weights that are not real numbers.
    InsufficientMemoryError
        The copies of mask, weights, bonds and buffer do not fit in available host memory.

    Notes
    -----
    The structure held is O(d + k) for d axes and k stencil offsets, plus the copies of
    ``mask`` (1 byte a site), ``weights`` (8 bytes a site), ``bonds`` (1 bit a bond),
    ``bond_weights`` (8 bytes a bond) and the buffer.

    An operation that cannot honour bonds refuses a lattice that has them
    (:class:`~catalytic.errors.NoBackendError` naming the reason) rather than ignore
    them.

    Examples
    --------
    >>> import catalytic as cat
    >>> L = cat.UnifiedCatalyticLattice(dimensions=2, size=5)
    >>> L.shape, L.n_points
    ((5, 5), 25)
    >>> int(L.distance_field((0, 0))[4, 4])
    8
    >>> L.find_shortest_path((0, 0), (0, 2)).distance
    2
    >>> L.count_shortest_paths((0, 0), (2, 2))
    6
    """

    def __init__(
        self,
        dimensions=None,
        size=None,
        *,
        shape=None,
        periodic=False,
        stencil="von_neumann",
        mask=None,
        weights=None,
        bonds=None,
        bond_weights=None,
        seed=0,
        aux_memory_size=1000,
        enable_gpu=True,
        enable_smart_routing=True,
        engine=None,
    ):
        # shape= may have an axis of 0 sites (a zero-size lattice); the older size= may not
        shape = _as_shape(_resolve_shape(dimensions, size, shape), allow_empty=shape is not None)
        self.seed = _check_seed(seed)
        if isinstance(aux_memory_size, bool) or not isinstance(
            aux_memory_size, (numbers.Integral, np.integer)
        ):
            raise TypeError(f"aux_memory_size must be an integer, got {aux_memory_size!r}")
        if aux_memory_size < 1:
            raise ValueError(f"aux_memory_size must be >= 1 byte, got {aux_memory_size}")
        n = math.prod(shape)
        held = int(aux_memory_size) + (n if mask is not None else 0)
        held += 8 * n if weights is not None else 0
        held += _bond_bytes(bonds, n // 8 + 4) + _bond_bytes(bond_weights, 8 * n)
        check_host_memory("lattice (mask, weights, bonds and aux buffer copies)", held)
        self.geometry = Geometry(shape, periodic, stencil, mask, weights, bonds, bond_weights)
        self.enable_gpu = bool(enable_gpu)
        self.enable_smart_routing = bool(enable_smart_routing)
        self._engine = engine
        self._aux = np.empty(int(aux_memory_size), dtype=np.uint8)
        self.fill_key(self._aux, 0)
        #: what each thread last saw (the borrow record of its last catalytic search)
        self._per_thread = threading.local()
        self._built = False
        #: per-backend caches, by backend name (see backend_cache)
        self._backend_state: dict = {}

    def with_mask(self, mask):
        """A lattice like this one (shape, periodic axes, stencil, weights, seed, buffer
        size, routing flags, engine) with another mask: the cheap way to run one geometry
        over many masks, as a percolation study does. Only the mask is checked and
        copied; the stencil tables are shared and the key is copied, not regenerated.

        Parameters
        ----------
        mask : bool ndarray of ``self.shape``, or None
            True where a site exists; None opens every site. Copied.

        Returns
        -------
        UnifiedCatalyticLattice
            A new lattice; this one is not changed.

        Raises
        ------
        TypeError
            ``mask`` is not a bool array.
        ValueError
            ``mask`` does not have the lattice's shape.
        InsufficientMemoryError
            The copies do not fit in available host memory.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> base = cat.Lattice(shape=(64, 64), periodic=(True, False))
        >>> rng = np.random.default_rng(0)
        >>> counts = [base.with_mask(rng.random((64, 64)) < 0.6).connected_components().count
        ...           for _ in range(3)]
        >>> len(counts)
        3
        """
        n = self.geometry.n_points
        check_host_memory("lattice (mask copy)", n + self._aux.nbytes)
        new = self._sibling()
        new.geometry = self.geometry.with_mask(mask)
        return new

    def _sibling(self):
        """A new lattice sharing this one's settings and a copy of its key; the caller
        sets its geometry."""
        new = object.__new__(type(self))
        new.seed = self.seed
        new.enable_gpu = self.enable_gpu
        new.enable_smart_routing = self.enable_smart_routing
        new._engine = self._engine
        new._aux = np.empty_like(self._aux)
        with lend(self._aux):  # never copy the key while the buffer is on loan
            new._aux[:] = self._aux
        new._per_thread = threading.local()
        new._built = False
        new._backend_state = {}
        return new

    def with_bonds(self, bonds):
        """A lattice like this one (everything, bond weights included) with other bonds:
        the cheap way to run one geometry over many bond configurations (a bond
        percolation ensemble). Only the bonds are checked and packed.

        Parameters
        ----------
        bonds : bool ndarray of shape ``(len(self.bond_offsets),) + self.shape``, or None
            True where a bond is open (layout: see the class docstring); None opens
            every bond.

        Returns
        -------
        UnifiedCatalyticLattice
            A new lattice; this one is not changed.

        Raises
        ------
        TypeError
            ``bonds`` is not a bool array.
        ValueError
            ``bonds`` does not have the shape ``(len(self.bond_offsets),) + self.shape``.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> L = cat.Lattice(shape=(2, 3))
        >>> L.bond_offsets.tolist()
        [[1, 0], [0, 1]]
        >>> bonds = np.ones((2, 2, 3), dtype=bool)
        >>> bonds[1, :, 0] = False      # cut the bonds (r, 0) -> (r, 1)
        >>> L.with_bonds(bonds).bonds[1].tolist()
        [[False, True, True], [False, True, True]]
        """
        n = self.geometry.n_points
        check_host_memory("lattice (bond copy)", _bond_bytes(bonds, n // 8 + 4) + self._aux.nbytes)
        new = self._sibling()
        new.geometry = self.geometry.with_bonds(bonds)
        return new

    # -- what backends may use (the contract between the lattice and the backends) -----------
    @property
    def key_buffer(self) -> np.ndarray:
        """The lattice's own auxiliary buffer (uint8, ``aux_memory_size`` bytes): the
        XOR key, and the memory catalytic searches borrow and give back bit for bit. The
        array itself, not a copy: a backend reads it (under :func:`catalysis.lend` when a
        search may have it on loan) and never keeps it changed."""
        return self._aux

    def backend_cache(self, name: str, *, create: bool = True) -> dict | None:
        """This lattice's cache for backend ``name``: a dict the backend owns (the cuda
        backend keeps its device copies of mask, weights and key there), made on first
        use; with ``create=False``, None when there is none. :meth:`cleanup` empties
        every backend's cache, after the backends' declared ``release`` has run."""
        if not create:
            return self._backend_state.get(name)
        return self._backend_state.setdefault(name, {})

    def drop_backend_cache(self, name: str) -> dict | None:
        """Remove and return backend ``name``'s cache of this lattice (None if none)."""
        return self._backend_state.pop(name, None)

    def record_borrow(self, record) -> None:
        """Make ``record`` (a :class:`~catalytic.catalysis.BorrowRecord`) this thread's
        :attr:`last_borrow` (:func:`catalysis.borrowed_scratch` does it when a search
        ends)."""
        self._per_thread.borrow = record

    def routing_policy(self) -> tuple:
        """``(allowed, reference_only, bonds)`` for the router: a predicate on a
        registered backend saying whether this lattice allows it (None: every backend;
        without ``enable_gpu``, the CPU ones), whether smart routing is off (then only
        the numpy reference runs the calls it can), and whether the lattice has bonds
        or bond weights (then graph operations run only where they are honoured). The
        router asks this of a call's first argument when it has the method."""
        return ((None if self.enable_gpu else _cpu_only), not self.enable_smart_routing,
                self.geometry.has_bonds)

    # -- catalytic key ---------------------------------------------------------------------
    def fill_key(self, region: np.ndarray, start: int) -> None:
        """Write key bytes ``[start, start + len(region))`` of this lattice's key stream."""
        from catalytic.kernels.random import random_numpy

        words = (start + region.size + 7) // 8
        stream = random_numpy((words,), self.seed, "integers").view(np.uint8)
        region[:] = stream[start : start + region.size]

    # -- geometry (no routing: index arithmetic) ---------------------------------------------
    shape = property(lambda self: self.geometry.shape)
    dimensions = property(lambda self: self.geometry.dimensions)
    n_points = property(lambda self: self.geometry.n_points)
    periodic = property(lambda self: self.geometry.periodic)
    stencil = property(lambda self: self.geometry.stencil)
    offsets = property(lambda self: self.geometry.offsets.copy())
    mask = property(lambda self: None if self.geometry.mask is None else self.geometry.mask.copy())
    weights = property(
        lambda self: None if self.geometry.weights is None else self.geometry.weights.copy()
    )
    bond_offsets = property(
        lambda self: self.geometry.bond_offsets.copy(),
        doc="The forward stencil offsets, one per plane of ``bonds``: int64 ``(kf, d)``.",
    )

    @property
    def bonds(self):
        """The open bonds as a bool array ``(len(bond_offsets),) + shape`` (a copy), or
        None when every bond is open."""
        g = self.geometry
        return None if g.bond_bits is None else g.bond_mask()

    @property
    def bond_weights(self):
        """The bond weights, float64 ``(len(bond_offsets),) + shape`` (a copy), or None."""
        g = self.geometry
        if g.bond_weights is None:
            return None
        return g.bond_weights.reshape((len(g.bond_offsets),) + g.shape).copy()

    @property
    def n_open(self) -> int:
        """Number of sites that exist (not blocked by the mask)."""
        return self.geometry.n_open

    def coords_to_index(self, coords):
        """Flat C-order index of coordinates: ``(d,) -> int``, ``(k, d) -> (k,)``."""
        return self.geometry.coords_to_index(coords)

    def index_to_coords(self, index):
        """Coordinates of flat indices: ``int -> (d,)``, ``(k,) -> (k, d)``."""
        return self.geometry.index_to_coords(index)

    def get_neighbors(self, index) -> np.ndarray:
        """Flat indices of the neighbours of one site (mask, periodic and stencil aware),
        in stencil order.

        Raises
        ------
        IndexError
            A site out of range or blocked.
        TypeError
            A bool or non-integer site.
        """
        self.geometry.site(index)
        return self.geometry.get_neighbors(index)

    def degree(self, *, backend=None) -> np.ndarray:
        """Number of open neighbours of each site (0 on blocked sites), each joined by a
        usable bond (parallel bonds on a short periodic axis count once).

        Returns
        -------
        ndarray of int64, shape ``self.shape``
        """
        return self._run("degree", backend=backend)

    def get_adjacency_matrix(self, dense: bool = False, *, weighted: bool = False):
        """Adjacency matrix (``scipy.sparse.csr_array`` of 0/1, or dense ndarray).

        Rows/columns are flat site indices; blocked sites and closed bonds have no
        entries. With ``weighted``, the entries are bond weights (float64; 0 without
        bond weights; on a periodic axis short enough for two bonds to join the same
        pair, the least of the usable ones). A bond of weight 0 is an explicit 0 in the
        sparse matrix, so read the edge set from its structure, not its values.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> L = cat.Lattice(shape=(3,), bond_weights=np.array([[2.0, 5.0, 9.0]]))
        >>> L.get_adjacency_matrix(dense=True, weighted=True).tolist()
        [[0.0, 2.0, 0.0], [2.0, 0.0, 5.0], [0.0, 5.0, 0.0]]
        """
        if dense:
            check_host_memory("dense adjacency matrix", 8 * self.n_points**2 if weighted
                              else self.n_points**2)
            return self.geometry.adjacency(weighted=weighted).toarray()
        check_host_memory("sparse adjacency matrix", 40 * self.n_points * len(self.geometry.offsets))
        return self.geometry.adjacency(weighted=weighted)

    def to_networkx(self):
        """``networkx.Graph`` of the open sites; node = flat index, attribute ``coords``
        (and ``weight`` on weighted lattices); one edge per usable bond, with attribute
        ``weight`` (its bond weight) on lattices with bond weights."""
        g = self.geometry
        # 512 B per node + edge: above what NetworkX was measured to hold (reports/core.md)
        check_host_memory("networkx graph", 512 * (g.n_open + g.n_open * len(g.offsets) // 2))
        return g.to_networkx()

    def build_lattice(self):
        """Prepare backend state (validates geometry, counts open sites); returns self.

        The lattice is implicit, so nothing per-edge is built.
        """
        _ = self.geometry.n_open
        self._built = True
        return self

    # -- routed operations -----------------------------------------------------------------
    @property
    def engine(self):
        return self._engine if self._engine is not None else get_engine()

    def _run(self, op, *args, backend=None, **kwargs):
        return self.engine.run(op, self, *args, backend=backend, **kwargs)

    def run(self, op: str, *args, backend: str | None = None, **kwargs):
        """Run any registered lattice operation (plugins included) on this lattice.

        The lattice is passed as the operation's first argument, then ``args`` and
        ``kwargs``; ``backend`` and the errors are those of
        :meth:`catalytic.Engine.run`.

        Returns
        -------
        object
            What the operation returns.
        """
        return self._run(op, *args, backend=backend, **kwargs)

    @property
    def last_decision(self):
        """The router's :class:`~catalytic.router.Decision` for this thread's last call."""
        return self.engine.last_decision

    def distance_field(self, sources, *, spacing=None, return_parents=False,
                       return_sources=False, backend=None):
        """Distance from the nearest source to every site, along the lattice.

        Parameters
        ----------
        sources : int, tuple, or array_like of int
            An int (flat index), a tuple of d ints (one site's coordinates), a 1-D array
            of flat indices, or a (k, d) array of coordinate rows. A plain list of
            exactly d ints is refused as ambiguous (use a tuple or an array).
        spacing : float or sequence of float, optional
            The distance between neighbouring sites along each axis (finite, > 0; one
            number for every axis): a step along stencil offset ``o`` then costs its
            Euclidean length ``|o * spacing|``, times its cost without spacing on a
            weighted lattice. A Moore stencil so gives dijkstra3d's
            ``euclidean_distance_field`` (and, with site weights, the costs of its
            ``dijkstra`` with ``anisotropy``). Default: hop counts, or the weights alone.
        return_parents : bool, default False
            Also return the parental field: one search, then any number of shortest
            paths read from it by :meth:`path_from_parents` (dijkstra3d's
            ``parental_field``; SciPy's predecessors).
        return_sources : bool, default False
            Also return the nearest source of every site (a discrete Voronoi partition;
            SciPy's ``sources`` of ``dijkstra(min_only=True)``).
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        distances : ndarray, shape ``self.shape``
            Hop counts (int64, -1 where unreachable or blocked) on unweighted lattices
            without ``spacing``; otherwise the least summed step cost (float64, ``inf``
            where unreachable or blocked), a step ``u -> v`` along offset ``o`` costing
            ``fl(bond_weight(u, v) + weights[v])`` (0 for a kind of weight the lattice
            lacks), and with ``spacing`` ``fl(|o * spacing| * that)``, or ``|o *
            spacing|`` on a lattice without weights. Closed bonds are never crossed.
        parents : ndarray of int64, shape ``self.shape``
            With ``return_parents``: the flat index of the neighbour each site is
            reached from, by the tie rule of :meth:`find_shortest_path` (walking back
            from a site, the neighbour of smallest flat index on a shortest path): a
            source is its own parent, a blocked or unreached site has -1. From one
            source, ``path_from_parents(parents, t)`` is ``find_shortest_path(source,
            t).path`` for every ``t``.
        nearest : ndarray of int64, shape ``self.shape``
            With ``return_sources``: the flat index of each site's nearest source, the
            one its chain of parents ends at (-1 where unreached or blocked). Of sources
            at the same distance, that is the one the canonical shortest path from the
            site leads back to, so every source's sites form a connected region.

        Raises
        ------
        IndexError
            A source out of range or blocked.
        TypeError
            A bool or non-integer source; a spacing that is not real.
        ValueError
            No source, an ambiguous list, or an array of the wrong shape; a spacing
            that is not finite and > 0, or not one per axis.

        Notes
        -----
        BFS, O(n k) for n sites and k stencil offsets; Dijkstra O(n k log n) when
        weighted or with ``spacing``. Costs are float64 sums in path order, the same on
        every backend bit for bit (a step's length is
        ``catalytic.kernels.cpu.neighbors.step_lengths``).

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(3, 3), stencil="moore")
        >>> L.distance_field((0, 0))[2, 2]
        np.int64(2)
        >>> float(L.distance_field((0, 0), spacing=(1, 2))[2, 2])  # two diagonals
        4.47213595499958

        Two sources, the site each one serves, and a path read from the parents:

        >>> L = cat.Lattice(shape=(1, 7))
        >>> d, parents, near = L.distance_field(np.array([1, 5]), return_parents=True,
        ...                                     return_sources=True)
        >>> d.tolist(), near.tolist()
        ([[1, 0, 1, 2, 1, 0, 1]], [[1, 1, 1, 1, 5, 5, 5]])
        >>> L.path_from_parents(parents, 3).tolist()
        [1, 2, 3]
        """
        return self._run("distance_field", sources, spacing=spacing,
                         return_parents=return_parents, return_sources=return_sources,
                         backend=backend)

    def path_from_parents(self, parents, target) -> np.ndarray:
        """The shortest path to ``target`` recorded in a parental field.

        Parameters
        ----------
        parents : array_like of int
            A parental field of this lattice (``distance_field(...,
            return_parents=True)``), in its shape or flat.
        target : int or tuple of int
            A site, as a flat index or coordinates.

        Returns
        -------
        ndarray of int64
            Flat indices from the source the path starts at to ``target``; empty when
            ``target`` was not reached. O(path length).

        Raises
        ------
        IndexError
            ``target`` out of range or blocked.
        TypeError
            ``parents`` not integers.
        ValueError
            ``parents`` of another shape, or not a parental field (an index out of
            range, or a chain of parents that ends nowhere).

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(3, 4))
        >>> _, parents = L.distance_field(0, return_parents=True)
        >>> L.path_from_parents(parents, (2, 3)).tolist()
        [0, 1, 2, 3, 7, 11]
        """
        g = self.geometry
        par = np.asarray(parents)
        if par.dtype.kind not in "iu":
            raise TypeError(f"parents must be integers, got dtype {par.dtype}")
        if par.shape not in (g.shape, (g.n_points,)):
            raise ValueError(f"parents has shape {par.shape}; expected the lattice shape "
                             f"{g.shape}")
        par = par.reshape(-1)
        v = g.site(target, "target")
        path = [v]
        for _ in range(g.n_points):
            p = int(par[v])
            if p == v:
                return np.array(path[::-1], dtype=np.int64)
            if p == -1 and len(path) == 1:
                return np.zeros(0, dtype=np.int64)
            if not 0 <= p < g.n_points:
                raise ValueError(f"parents is not a parental field: site {v} has parent {p}")
            path.append(p)
            v = p
        raise ValueError("parents is not a parental field: a chain of parents does not "
                         "end at a source")

    def distance_transform(self, features=None, *, values=None, background=0,
                           spacing=None, squared=False, dtype=None, return_indices=False,
                           backend=None):
        """Exact Euclidean distance from every site to the nearest feature.

        The distance is the straight line between sites, not a path over the lattice:
        blocked sites are no obstacle (``distance_field`` gives distances along the
        lattice). Along an open axis the lattice ends (no feature lies beyond it, as in
        ``scipy.ndimage.distance_transform_edt``); across a periodic axis the nearest
        feature may lie round the seam.

        Parameters
        ----------
        features : array_like of bool, or sites, optional
            The features: a boolean array of the lattice's shape (or flat), True at a
            feature; or sites as ``distance_field`` takes sources (flat indices or
            coordinates; blocked sites allowed). Default: the blocked sites.
        values : array_like, optional
            Instead of ``features``, a value array of the lattice's shape (booleans,
            integers or floats, no NaN at an open site), as the ``edt`` package's
            labels: a site's features are the sites of another value, the sites holding
            ``background`` and the blocked sites. Those last two are at distance 0.
        background : real number or None, default 0
            The value of the sites at distance 0 with ``values``; None: none.
        spacing : float or sequence of float, optional
            The distance between neighbouring sites along each axis (``sampling`` in
            SciPy, ``anisotropy`` in ``edt``): finite, > 0. Default 1.
        squared : bool, default False
            Return squared distances.
        dtype : float64 (default) or float32
            The type the squared distances are summed in and returned as.
        return_indices : bool, default False
            Also return the flat index of each site's nearest feature.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        distances : ndarray, shape ``self.shape``
            ``inf`` where there is no feature (as ``edt`` gives; SciPy's result is then
            meaningless).
        indices : ndarray of int64, shape ``self.shape``
            With ``return_indices``: the flat index of the nearest feature (-1 where
            there is none). Of features at the same distance, the one whose
            displacement from the site is the least in C order (axis 0 first), a
            periodic component counted the short way round and, at exactly half the
            axis, as negative; for integer spacings exactly, otherwise within rounding.

        Raises
        ------
        TypeError
            A non-boolean ``squared`` or ``return_indices``, another dtype, non-real
            spacing or values.
        ValueError
            Both ``features`` and ``values``; an array of another shape; a spacing that
            is not finite and > 0 or not one per axis; NaN in ``values``.
        IndexError
            A feature site out of range.

        Notes
        -----
        Separable passes (Felzenszwalb and Huttenlocher), one per axis, each O(n):
        O(n d) in all, exact for integer spacings (distances are square roots of exact
        integer sums). The numba-cpu backend runs every pass in parallel over its lines;
        the cuda backend one thread a site and pass, looking along the site's line until
        the steps pass the best (the same answers). ``batched.distance_transform`` takes
        a stack of masks: row b is this call on ``self.with_mask(row b)``.

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(1, 6), periodic=(False, True))
        >>> L.distance_transform(np.array([[1, 0, 0, 0, 0, 0]], bool)).tolist()
        [[0.0, 1.0, 2.0, 3.0, 2.0, 1.0]]
        >>> d, near = L.distance_transform(values=np.array([[1, 1, 2, 2, 2, 0]]),
        ...                                spacing=(1, 0.5), return_indices=True)
        >>> d.tolist(), near.tolist()
        ([[0.5, 0.5, 0.5, 1.0, 0.5, 0.0]], [[5, 2, 1, 1, 5, 5]])
        """
        return self._run("distance_transform", features, values=values,
                         background=background, spacing=spacing, squared=squared,
                         dtype=dtype, return_indices=return_indices, backend=backend)

    def face(self, axis: int, side: str = "low") -> np.ndarray:
        """The sites of one face of the lattice, as a boolean array of its shape (an
        electrode for :meth:`transport`, say): coordinate 0 along ``axis`` for
        ``side="low"``, the last for ``"high"``. Blocked sites are marked too (a call
        that takes the array reads its open sites).

        Examples
        --------
        >>> import catalytic as cat
        >>> cat.Lattice(shape=(2, 3)).face(1, "high").astype(int).tolist()
        [[0, 0, 1], [0, 0, 1]]
        """
        axis = self._axis(axis)
        if side not in ("low", "high"):
            raise ValueError(f'side must be "low" or "high", got {side!r}')
        out = np.zeros(self.geometry.shape, dtype=bool)
        where = [slice(None)] * self.geometry.dimensions
        where[axis] = 0 if side == "low" else -1
        out[tuple(where)] = True
        return out

    def transport(self, high, low, *, conductance=None, tol=1e-10, maxiter=None,
                  backend=None) -> Transport:
        """The steady state of the lattice as a resistor network: potential 1 on the
        ``high`` electrode, 0 on ``low``, current conserved at every other site.

        Each bond is a resistor (the lattice's bond layout: forward offset
        ``bond_offsets[s]`` from each site), and the lattice's faces insulate: the
        potential solves ``div(sigma grad phi) = 0``, the lattice Laplace equation.
        Components of the network that touch one electrode or none are left out of the
        solve (at that electrode's potential, or without one), so they never make it
        singular or slow; dead ends stay in it and carry no current.

        Parameters
        ----------
        high, low : array_like
            The electrodes: a boolean array of the lattice's shape (its open sites are
            the electrode; see :meth:`face`), or sites as :meth:`distance_field` takes
            sources (each open). Neither may be empty, and they may not overlap.
        conductance : {None, "bonds", "sites", "unit"}
            Where the conductances come from: ``"bonds"`` the bond weights;
            ``"sites"`` the site weights read as each site's conductivity, a bond
            conducting as two half-sites in series, ``2 w_i w_j / (w_i + w_j)``
            (0 when either is 0); ``"unit"`` 1 per bond. Closed bonds and bonds to
            blocked sites conduct nothing. None: ``"bonds"`` on a lattice with bond
            weights, else ``"sites"`` with site weights, else ``"unit"``.
        tol : float, default 1e-10
            The relative residual ``|b - A x| / |b|`` of the reduced system to reach.
        maxiter : int, optional
            Iteration limit of an iterative solve (default: the backend's, which grows
            with the lattice). The numpy backend solves directly (SciPy's ``spsolve``).
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        Transport
            ``potential`` (the lattice's shape; NaN on blocked sites and on sites joined
            to no electrode), ``currents`` (one per bond, in the layout of the bonds:
            ``(len(bond_offsets),) + shape``), ``conductance`` (the current between the
            electrodes at unit potential difference: exactly 0 without a conducting
            path), the solver's ``iterations`` and ``residual``, and the sites left
            out (``isolated``, ``one_sided``).

        Raises
        ------
        ConvergenceError
            The iteration limit was reached above ``tol``; the error gives the
            residual reached. No unconverged field is returned.

        Examples
        --------
        A 3 x 4 grid of unit resistors between its left and right columns: three
        parallel chains of three resistors, conductance 3 * 1/3.

        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(3, 4))
        >>> t = L.transport(L.face(1, "low"), L.face(1, "high"), backend="numpy")
        >>> round(t.conductance, 12)
        1.0
        >>> t.potential[0].round(6).tolist()
        [1.0, 0.666667, 0.333333, 0.0]
        """
        return self._run("transport", high, low, conductance=conductance, tol=tol,
                         maxiter=maxiter, backend=backend)

    def _axis(self, axis) -> int:
        """``axis`` checked (an int, in range) and made non-negative."""
        d = self.geometry.dimensions
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
            raise TypeError(f"axis must be an int, got {axis!r}")
        if not -d <= axis < d:
            raise ValueError(f"axis {axis} out of range for a {d}-D lattice")
        return int(axis) % d

    def _transport_axis(self, axis):
        """``axis`` normalised, checked to be open (its two faces are the electrodes)."""
        axis = self._axis(axis)
        if self.geometry.periodic[axis]:
            raise ValueError(f"axis {axis} is periodic: its faces touch, so they cannot be "
                             "the electrodes")
        return axis

    def effective_conductivity(self, axis: int = 0, *, conductance=None, tol=1e-10,
                               maxiter=None, backend=None) -> float:
        """The conductivity of the lattice along an open ``axis`` as a resistor network:
        the conductance between its two faces (:meth:`transport`, the low face at
        potential 1) times the ``n - 1`` bond layers between them, over the
        ``n_points / n`` sites of a cross-section (``n`` the sites along ``axis``). 1 for
        a lattice of unit bonds without blocked sites; the quantity whose scaling at the
        percolation threshold gives the conductivity exponent. Blocked sites on the
        faces are not part of the electrodes. Other parameters as in
        :meth:`transport`.

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(4, 5), bond_weights=np.full((2, 4, 5), 2.0))
        >>> round(L.effective_conductivity(1, backend="numpy"), 12)
        2.0
        """
        axis = self._transport_axis(axis)
        t = self.transport(self.face(axis, "low"), self.face(axis, "high"),
                           conductance=conductance, tol=tol, maxiter=maxiter, backend=backend)
        n = self.geometry.shape[axis]
        return t.conductance * (n - 1) / (self.geometry.n_points / n)

    def tortuosity(self, axis: int = 0, *, tol=1e-10, maxiter=None,
                   backend=None) -> Tortuosity:
        """The tortuosity of the open sites (the pore space of a voxel image) along an
        open ``axis``, as PoreSpy's ``tortuosity_fd`` defines it.

        Diffusion with unit bond conductances between the two faces of ``axis``
        (:meth:`transport`); the effective diffusivity ``D_eff = G (n - 1) / A``
        (``G`` the conductance, ``n`` the sites along ``axis``, ``A = n_points / n``);
        the effective porosity ``eps`` the fraction of all sites in clusters that touch
        both faces (PoreSpy's ``trim_nonpercolating_paths``); then the tortuosity
        ``eps / D_eff`` and the formation factor ``1 / D_eff``. The lattice's bonds
        are honoured; its weights are not read.

        Returns
        -------
        Tortuosity
            ``tortuosity``, ``formation_factor``, ``effective_diffusivity``,
            ``effective_porosity``, ``porosity`` (open sites over all) and the
            ``transport`` solved.

        Raises
        ------
        ValueError
            No cluster joins the two faces (the tortuosity is then infinite; PoreSpy
            raises too), or ``axis`` is periodic or out of range.

        Examples
        --------
        Straight channels along the axis: a tortuosity of 1, and a formation factor of
        one over the porosity.

        >>> import catalytic as cat
        >>> m = np.zeros((6, 8), bool)
        >>> m[::2] = True
        >>> r = cat.Lattice(shape=(6, 8), mask=m).tortuosity(1, backend="numpy")
        >>> round(r.tortuosity, 12), round(r.formation_factor, 12), r.porosity
        (1.0, 2.0, 0.5)
        """
        axis = self._transport_axis(axis)
        g = self.geometry
        low, high = self.face(axis, "low"), self.face(axis, "high")
        for side, face in (("low", low), ("high", high)):
            if g.mask is not None and not (face & g.mask).any():
                raise ValueError(f"the {side} face of axis {axis} has no open site: the "
                                 "tortuosity is infinite")
        t = self.transport(low, high, conductance="unit", tol=tol, maxiter=maxiter,
                           backend=backend)
        if t.conductance == 0.0:
            raise ValueError(f"no cluster joins the two faces of axis {axis}: the "
                             "tortuosity is infinite")
        # the sites of the clusters joining both faces: transport's reduction counted
        # the others (no second labelling)
        eps = (g.n_open - t.isolated - t.one_sided) / g.n_points
        n = g.shape[axis]
        d_eff = t.conductance * (n - 1) / (g.n_points / n)
        return Tortuosity(eps / d_eff, 1.0 / d_eff, d_eff, eps, g.n_open / g.n_points, t)

    def hitting_probability(self, a, b, *, conductance=None, tol=1e-10, maxiter=None,
                            backend=None) -> np.ndarray:
        """The probability that a random walk from each site reaches the sites ``a``
        before the sites ``b``, stepping to each neighbour in proportion to the
        conductance of the bond to it (``conductance`` as in :meth:`transport`; 1 per
        bond by default on a lattice without weights: the simple random walk).

        It is the potential of :meth:`transport` with ``a`` at 1 and ``b`` at 0
        (harmonic: each site's value is the conductance-weighted mean of its
        neighbours'). 1 on sites whose cluster holds ``a`` but not ``b`` (the walk
        reaches ``a`` surely), 0 the other way round, NaN on blocked sites and on
        clusters that hold neither.

        Examples
        --------
        Gambler's ruin: on a path of 5 sites the walk from site ``x`` reaches 0 before
        4 with probability ``(4 - x) / 4``.

        >>> import catalytic as cat
        >>> h = cat.Lattice(shape=(5,)).hitting_probability(0, 4, backend="numpy")
        >>> h.round(12).tolist()
        [1.0, 0.75, 0.5, 0.25, 0.0]
        """
        return self.transport(a, b, conductance=conductance, tol=tol, maxiter=maxiter,
                              backend=backend).potential

    def find_shortest_path(self, start, end, *, spacing=None, backend=None) -> PathResult:
        """A shortest path from ``start`` to ``end`` and its length.

        Parameters
        ----------
        start : int or tuple of int
            A site, as a flat index or coordinates.
        end : int, tuple of int, or array_like of int
            A site; or several, as :meth:`distance_field` takes sources (a 1-D array of
            flat indices or a (k, d) array of coordinates): then the path goes to the
            nearest of them (of equally near ones, the one of smallest flat index), and
            the search stops once that one is reached.
        spacing : float or sequence of float, optional
            Euclidean step costs, as :meth:`distance_field` takes them.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        PathResult
            ``path``: flat indices from ``start`` to ``end`` (the end reached last;
            empty when unreachable);
            ``distance``: hops (int, -1 when unreachable) or, on a lattice with site or
            bond weights or with ``spacing``, the left-to-right float64 sum of the step
            costs (as :meth:`distance_field` defines them; ``inf`` when unreachable).

        Raises
        ------
        IndexError
            A site out of range or blocked.
        TypeError
            A bool or non-integer site.

        Notes
        -----
        Ties are broken the same way on every backend: walking back from ``end``, the
        neighbour with the smallest flat index that lies on a shortest path. On weighted
        lattices a path's cost is the float64 sum of its step costs, in path order (of
        parallel bonds on a short periodic axis, the least usable one), and the shortest
        paths are those of a DAG that stays exact when sums round
        (``1e16 + 1 == 1e16``) or weights are 0: see
        ``catalytic.backends._common.plateau_depths``. A BFS (Dijkstra when weighted),
        as :meth:`distance_field`, that stops once every distance the walk back reads is
        final (the cuda backend searches the whole lattice for several ends). Where the
        hops are known the numba-cpu backend searches nothing: without blocked sites,
        bonds or weights under the von Neumann or Moore stencil they are in closed form;
        with blocked sites (von Neumann, open axes, one end) a path that steps only
        towards the end, found by one sweep over the box between the two sites, is a
        shortest one when there is one. The path is the search's either way.

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(3, 4))
        >>> L.find_shortest_path(0, (2, 3))
        PathResult(path=array([ 0,  1,  2,  3,  7, 11]), distance=5)
        >>> L.find_shortest_path(0, np.array([[2, 3], [1, 2]])).path  # the nearer end
        array([0, 1, 2, 6])
        """
        if _one_site(end, self.geometry.dimensions):
            return self._run("shortest_path", start, end, spacing=spacing, backend=backend)
        _, result = self._run("shortest_paths", start, end, spacing=spacing, first=True,
                              backend=backend)
        return result

    def find_shortest_paths(self, start, ends, *, spacing=None, backend=None) -> list:
        """Shortest paths from ``start`` to each of several ends, from one search.

        Parameters
        ----------
        start : int or tuple of int
            A site, as a flat index or coordinates.
        ends : array_like of int
            The ends, as :meth:`distance_field` takes sources (repeats allowed).
        spacing : float or sequence of float, optional
            Euclidean step costs, as :meth:`distance_field` takes them.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        list of PathResult
            One per end, in the order given: what :meth:`find_shortest_path` gives for
            it (the same paths, by the same tie rule).

        Raises
        ------
        IndexError
            A site out of range or blocked.
        TypeError
            A bool or non-integer site.
        ValueError
            No end, an ambiguous list, or an array of the wrong shape.

        Notes
        -----
        One search from ``start`` that stops once every end is reached (the cuda
        backend searches the whole lattice), then a walk back from each end, O(path k).

        Examples
        --------
        >>> import catalytic as cat
        >>> [p.distance for p in cat.Lattice(shape=(3, 4)).find_shortest_paths(
        ...     0, np.array([11, 5, 0]))]
        [5, 2, 0]
        """
        return self._run("shortest_paths", start, ends, spacing=spacing, first=False,
                         backend=backend)

    def count_shortest_paths(self, start, end, *, backend=None) -> int:
        """Exact number of distinct shortest paths from ``start`` to ``end``.

        Parameters
        ----------
        start, end : int or tuple of int
            Sites, as a flat index or coordinates.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        int
            A Python int, never overflowing; 0 when ``end`` is unreachable. On weighted
            lattices: the paths of the shortest-path DAG that :meth:`find_shortest_path`
            picks from (so the path it returns is one of them).

        Raises
        ------
        IndexError
            A site out of range or blocked.
        TypeError
            A bool or non-integer site.
        ValueError
            A weighted lattice with a zero site weight, or with bond weights and a
            usable step of cost 0 (zero-cost cycles make the count infinite).
        """
        return self._run("count_shortest_paths", start, end, backend=backend)

    def find_all_paths(self, start, end, max_length=None, *, limit=100_000,
                       max_steps=1_000_000, backend=None):
        """All simple paths start -> end with at most ``max_length`` steps.

        Parameters
        ----------
        start, end : int or tuple
            Sites (flat index or coordinates).
        max_length : int, optional
            Longest path, in steps. Default: no bound but the lattice.
        limit : int, default 100_000
            Raise ``ValueError`` when more paths than this exist (their number grows
            exponentially with length).
        max_steps : int, default 1_000_000
            Raise ``ValueError`` after the depth-first search has pushed this many sites
            onto its path in all, found paths or not. Without ``max_length`` on a large
            lattice the search wanders far from ``end``; this is what stops it.

        Returns
        -------
        list of ndarray
            Flat-index paths, start first, in depth-first order. They step only through
            usable bonds; weights (site or bond) are not read.

        Raises
        ------
        ValueError
            More than ``limit`` paths, or ``max_steps`` reached.
        InsufficientMemoryError
            The search state (bounded by ``max_steps``) does not fit in free memory, or
            the paths found outgrow half the memory free when they started to grow.

        Notes
        -----
        Depth-first search over simple paths: exponential in ``max_length`` in general.
        Memory: about ``160 + 48 k`` bytes per site visited (at most ``max_steps``), and
        the paths returned.

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(2, 2))
        >>> sorted(p.tolist() for p in L.find_all_paths(0, 3))
        [[0, 1, 3], [0, 2, 3]]
        """
        return self._run(
            "all_paths", start, end, max_length=max_length, limit=limit,
            max_steps=max_steps, backend=backend,
        )

    def find_path_catalytic(self, start, end, auxiliary_memory=None, *, backend=None) -> PathResult:
        """Hop-count shortest path whose search state lives in borrowed memory.

        The BFS marks (one byte per site) are written into ``auxiliary_memory`` (an array
        or ``numpy.memmap`` you lend; default: the lattice's own buffer) when it can be
        restored exactly; see :mod:`catalytic.catalysis`. The buffer comes back
        bit-identical (verified by digest), also if the call raises. The result equals
        ``find_shortest_path`` on an unweighted lattice. ``self.last_borrow`` says how
        the memory was used (for this thread's last call).

        Threads: a buffer is held by one call at a time (others wait), so concurrent
        calls lending the same buffer, or using this lattice's own, get the serial
        answers.

        Process death: a lent ``numpy.memmap`` opened for writing holds the search
        state *on disk* during the call. Its restore information is first written to a
        journal beside the file (``<file>.catalytic-journal.<position>``, deleted when
        the file is restored). If the process is killed mid-call, the file stays
        modified and the journal stays; lending the file again raises
        ``CatalyticError`` until ``catalytic.catalysis.recover(path)`` has put the
        original bytes back. Arrays in memory die with the process and need nothing.

        Parameters
        ----------
        start, end : int or tuple of int
            Sites, as a flat index or coordinates.
        auxiliary_memory : ndarray or numpy.memmap, optional
            Writable, C-contiguous, plain data (not objects); default: the lattice's own
            buffer.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        PathResult
            As :meth:`find_shortest_path` gives on an unweighted lattice (closed bonds
            are never crossed).

        Raises
        ------
        ValueError
            A weighted lattice (site or bond weights), or a buffer that is not
            C-contiguous or not writable.
        TypeError
            A buffer that is not a NumPy array or holds objects.
        IndexError
            A site out of range or blocked.
        CatalyticError
            A lent memory-mapped file still has a journal of an unfinished call.
        CatalyticViolation
            The buffer did not come back bit-identical.
        """
        if self.geometry.weighted:
            raise ValueError(
                "find_path_catalytic finds hop-count paths; this lattice is weighted "
                "(site or bond weights; use find_shortest_path)"
            )
        return self._run("path_catalytic", start, end, auxiliary_memory, backend=backend)

    @property
    def last_borrow(self):
        """:class:`~catalytic.catalysis.BorrowRecord` of this thread's last catalytic
        path search on this lattice (None before the first)."""
        return getattr(self._per_thread, "borrow", None)

    def connected_components(self, *, dtype=None, out=None, backend=None) -> Components:
        """Connected components of the open sites.

        Parameters
        ----------
        dtype : None, "smallest" or integer dtype, optional
            The labels' dtype: None gives int32 (int64 from 2**31 sites), as
            ``scipy.ndimage.label``; ``"smallest"`` the narrowest unsigned type that
            holds the count (uint8 up to uint64), as cc3d; or any integer dtype, with
            a ValueError (and nothing written) when the count does not fit.
        out : ndarray, optional
            A writeable integer array of the lattice's shape (a ``numpy.memmap`` too)
            to write the labels into; it is the result's ``labels``.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        Components
            ``labels`` (the lattice's shape; 0 on blocked sites, components numbered
            ``1..count`` in order of their lowest flat index, as
            ``scipy.ndimage.label`` numbers them), ``count`` and ``sizes``. Sites are
            connected through usable bonds only; bond weights are not read.

        Notes
        -----
        O(n k) for n sites and k stencil offsets (up to union-find's inverse-Ackermann
        factor on the numba-cpu and cuda backends).

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> m = np.array([[1, 1, 0, 1]], bool)
        >>> c = cat.Lattice(shape=(1, 4), mask=m).connected_components()
        >>> c.labels.tolist(), c.count, c.sizes.tolist()
        ([[1, 1, 0, 2]], 2, [2, 1])
        """
        dtype = _check_label_out(self.geometry.shape, dtype, out)
        return _deliver_labels(self._run("connected_components", backend=backend), dtype, out)

    def label(self, values, *, background=0, delta=0, dtype=None, out=None,
              backend=None) -> Components:
        """Clusters of equal (or close) values: multi-label and continuous-value
        labelling, as cc3d's ``connected_components`` does on images.

        Two neighbouring sites join when both are labelled (open, and not
        ``background``), the bond between them is usable, and their values are equal,
        or at most ``delta`` apart. Clusters are chains: two sites of one cluster may
        differ by more than ``delta``.

        Parameters
        ----------
        values : array_like of bool, int or float
            One value per site, in the lattice's shape (or flat). Not modified. NaN is
            refused at open sites (it is close to nothing).
        background : number or None, default 0
            Sites holding this value are never labelled (label 0); None labels every
            open site.
        delta : float, default 0
            The largest difference that joins two neighbours (>= 0, may be inf).
            Integers are compared exactly (the floor of ``delta``), floats in float64.
        dtype, out
            As in :meth:`connected_components`.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        Components
            ``labels`` (0 on blocked and background sites, clusters ``1..count`` in
            order of their lowest flat index), ``count`` and ``sizes``.

        Raises
        ------
        TypeError
            ``values`` is not boolean, integer or float; ``delta`` or ``background``
            is not a number; ``dtype`` or ``out`` is not an integer type or array.
        ValueError
            ``values`` or ``out`` has another shape, NaN at an open site, a negative
            or NaN ``delta``, or a count that does not fit ``dtype`` or ``out``.

        Notes
        -----
        O(n k) for n sites and k stencil offsets (up to union-find's inverse-Ackermann
        factor on the numba-cpu backend).

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> v = np.array([[1, 1, 2, 0, 2]])
        >>> c = cat.Lattice(shape=(1, 5)).label(v)
        >>> c.labels.tolist(), c.count, c.sizes.tolist()
        ([[1, 1, 2, 0, 3]], 3, [2, 1, 1])
        >>> L = cat.Lattice(shape=(1, 4))
        >>> L.label([0.0, 0.1, 0.25, 0.9], delta=0.2).labels.tolist()
        [[0, 1, 1, 2]]
        >>> L.label([0.0, 0.1, 0.25, 0.9], delta=0.2, background=None).labels.tolist()
        [[1, 1, 1, 2]]
        """
        dtype = _check_label_out(self.geometry.shape, dtype, out)
        comp = self._run("label", values, background=background, delta=delta,
                         backend=backend)
        return _deliver_labels(comp, dtype, out)

    def cluster_statistics(self, labels, *, field=None, backend=None) -> ClusterStatistics:
        """Per-cluster statistics of a labelling that understand periodic axes.

        A cluster is the set of sites holding one label, joined by this lattice's usable
        bonds: exactly the clusters of :meth:`connected_components` and of
        :meth:`label` with ``delta=0``. Positions are taken on *unwrapped* coordinates:
        a cluster that crosses a periodic seam is measured where it lies, not split in
        two, and a cluster that wraps an axis (a cycle of non-zero winding round it)
        has no centroid or gyration along that axis (NaN), where SciPy and cc3d would
        report the middle of the lattice.

        Parameters
        ----------
        labels : array_like of int, or Components
            0 for no cluster, clusters 1..count, 0 on blocked sites. With a periodic
            axis every label's sites must be joined by usable bonds (its windings are
            found along them); without one a label is measured as the sites holding
            it, as SciPy measures labels.
        field : array_like, optional
            Real values per site, reduced over each cluster (sum, mean, min, max and
            where the extremes are).
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        ClusterStatistics
            Structure of arrays indexed by ``label - 1``: sizes, bounding boxes (the
            shortest arc on a periodic axis), centroids, gyration tensors and radii,
            faces touched, axes wrapped, the field's reductions; and the size
            distribution, mean cluster size and correlation length of the labelling.

        Raises
        ------
        TypeError
            ``labels`` is not integer, ``field`` not real.
        ValueError
            Another shape, a negative label, a label on a blocked site, or (with a
            periodic axis) a label whose sites are not joined.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> m = np.zeros((6, 6), bool)
        >>> m[2, [0, 1, 5]] = True        # one cluster across the seam of axis 1
        >>> L = cat.Lattice(shape=(6, 6), periodic=True, mask=m)
        >>> st = L.cluster_statistics(L.connected_components())
        >>> st.sizes.tolist(), st.bbox[0].tolist(), st.centroid[0].tolist()
        ([3], [[2, 3], [5, 8]], [2.0, 0.0])
        >>> st.wraps.tolist()
        [[False, False]]
        """
        return self._run("cluster_statistics", labels, field=field, backend=backend)

    def region_graph(self, labels, *, backend=None) -> dict:
        """Which regions touch, and how much: the region-adjacency graph of a labelling
        with contact counts (cc3d's ``region_graph`` and ``contacts`` in one).

        Parameters
        ----------
        labels : array_like of int, or Components
            Regions 1.., 0 for none (ignored); a region may have several pieces.
            Labels on blocked sites are ignored.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        dict
            ``{(a, b): contacts}`` for every pair of labels ``a < b`` joined by at least
            one usable bond of this lattice (its stencil, periodic axes and bonds), with
            the number of such bonds.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> v = np.array([[1, 1, 2], [3, 3, 2]])
        >>> cat.Lattice(shape=(2, 3)).region_graph(v)
        {(1, 2): 1, (1, 3): 2, (2, 3): 1}
        """
        return self._run("region_graph", labels, backend=backend)

    def percolates(self, axis: int = 0, *, backend=None) -> bool:
        """True if some cluster spans ``axis``: on an open axis it touches both faces
        (first and last layer); on a periodic axis it *wraps* around it (a cycle of
        non-zero winding), so a cluster that merely straddles the seam does not count.
        Same as ``spanning_clusters(axis).clusters[axis].size > 0``.

        Parameters
        ----------
        axis : int, default 0
            Negative axes count from the end.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        bool

        Raises
        ------
        TypeError
            ``axis`` is not an integer.
        ValueError
            ``axis`` is out of range.

        Examples
        --------
        >>> import numpy as np
        >>> m = np.zeros((10, 10), bool)
        >>> m[9, 5] = m[0, 5] = True          # two sites, neighbours across the seam
        >>> UnifiedCatalyticLattice(shape=(10, 10), mask=m, periodic=(True, False)).percolates(0)
        False
        >>> m[:, 5] = True                    # a full ring around axis 0
        >>> UnifiedCatalyticLattice(shape=(10, 10), mask=m, periodic=(True, False)).percolates(0)
        True
        """
        return self._run("percolates", axis=axis, backend=backend)

    def spanning_clusters(self, axes=None, *, backend=None) -> SpanningClusters:
        """The clusters spanning each axis, all axes answered from one labelling.

        Parameters
        ----------
        axes : None, int or sequence of int
            Axes to test (negative ones count from the end); None means every axis.
        backend : str, optional
            Force a backend.

        Returns
        -------
        SpanningClusters
            ``clusters``: dict mapping each requested axis (non-negative, in the order
            given) to the sorted int64 labels of the clusters spanning it;
            ``components``: the :class:`Components` those labels refer to.

        Raises
        ------
        TypeError
            An axis that is not an integer.
        ValueError
            An axis out of range, or named twice.

        Notes
        -----
        Open axis: a cluster spans it when it touches both faces (index 0 and -1).
        Periodic axis: a cluster spans it when it *wraps*, i.e. some site reaches itself
        by a path whose displacement along the axis is a non-zero multiple of the axis
        length (the standard estimator on periodic boundaries). A cluster touching both
        sides of the seam without closing such a cycle does not wrap; on a periodic axis
        of length 1 (or 2 with nearest neighbours) any cluster with a step along it wraps.
        With bonds, every usable bond is a step of its own: of two parallel bonds on a
        periodic axis of length 2, the one across the seam closes a winding cycle with
        the other, and on an axis of length 1 an open bond from a site to itself wraps.

        Labelling costs what :meth:`connected_components` costs. Open axes then cost
        O(faces). Periodic axes add one host pass (NumPy/SciPy, whichever backend
        labelled): every stencil step with its seam crossings, a breadth-first spanning
        forest, windings summed by pointer doubling, and a check of every step: time
        O(k n d + n log depth), memory at most about k n (48 + 28 p) bytes (n sites, k stencil
        offsets, p periodic axes asked).

        Examples
        --------
        >>> import numpy as np
        >>> m = np.zeros((4, 6), bool)
        >>> m[:, 1] = True                     # a ring around periodic axis 0
        >>> m[2, :] = True                     # a bar across open axis 1
        >>> L = UnifiedCatalyticLattice(shape=(4, 6), mask=m, periodic=(True, False))
        >>> res = L.spanning_clusters()
        >>> {a: labels.tolist() for a, labels in res.clusters.items()}
        {0: [1], 1: [1]}
        >>> int(res.components.sizes[0])
        9
        """
        return self._run("spanning_clusters", axes=axes, backend=backend)

    def newman_ziff(self, sweeps, *, kind="site", seed=0, first=0,
                    observables=("largest", "mean_size", "clusters"), n_stride=1,
                    chunks=None, executor="serial", progress=None, client=None,
                    backend=None):
        """Newman-Ziff sweeps: occupy every site (or bond) in random order, recording
        spanning, wrapping and cluster observables at every occupation number.

        Parameters
        ----------
        sweeps : int or range
            How many sweeps (sweep indices ``first .. first + sweeps - 1``), or a range
            of sweep indices (step 1). Sweep ``b``'s order depends only on ``seed`` and
            ``b``, so runs of other sweeps merge into one (:meth:`NZResult.merge
            <catalytic.percolation.NZResult.merge>`).
        kind : {"site", "bond"}, default "site"
            Occupy the existing sites (joined through the lattice's open bonds), or the
            usable bonds (both ends exist, inside the open axes, open), every existing
            site present from the start: site-bond percolation through the mask.
        seed : int, default 0
        first : int, default 0
            The first sweep index (with an int ``sweeps``).
        observables : sequence of str, default all
            Per-occupation observables to record: ``"largest"`` (largest cluster),
            ``"mean_size"`` (mean size of the other clusters), ``"clusters"`` (their
            number); empty: events only (each sweep stops once all are found).
        n_stride : int, default 1
            Record the observables at every ``n_stride``-th occupation number.
        chunks : int, optional
            Split the sweeps into this many runs through a :class:`~catalytic.BatchProcessor`
            (``executor``, ``progress`` and ``client`` are its options; ``"dask"`` runs
            them on a cluster), merged into one result.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        NZResult
            Per-sweep events and per-occupation sums (:mod:`catalytic.percolation`:
            microcanonical and canonical curves with errors, thresholds).

        Raises
        ------
        TypeError, ValueError
            A bad ``sweeps``, ``kind``, ``seed``, ``first``, ``observables``,
            ``n_stride`` or ``chunks``, before any work.
        InsufficientMemoryError
            The sums and scratch do not fit; the message says how to need less.

        Notes
        -----
        Per sweep O(N log N) for the order and O(N k alpha(N)) for the union-find (N
        elements, k stencil offsets); the per-occupation sums take 16 bytes per
        observable and recorded n per thread.

        Examples
        --------
        >>> L = UnifiedCatalyticLattice(shape=(6, 6), periodic=True)
        >>> res = L.newman_ziff(100, kind="bond", seed=3)
        >>> res.N                               # 2 bonds per site on the torus
        72
        >>> mean, err = res.microcanonical("clusters")
        >>> mean[0], mean[-1]                   # every site alone, then one cluster
        (np.float64(36.0), np.float64(1.0))
        >>> bool(res.event("wrap_any").min() >= 6)
        True
        """
        from catalytic.catalogue import v_newman_ziff

        options = {"kind": kind, "seed": seed, "observables": observables,
                   "n_stride": n_stride}
        (_, count), kw = v_newman_ziff(self, sweeps, first=first, **options)
        if chunks is None:
            return self._run("newman_ziff", range(kw["first"], kw["first"] + count),
                             backend=backend, **options)
        from catalytic.batch import BatchProcessor

        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunks must be a positive int, got {chunks!r}")
        k = min(chunks, count)
        cuts = [kw["first"] + (count * i) // k for i in range(k + 1)]
        bp = BatchProcessor([range(a, b) for a, b in zip(cuts, cuts[1:])], lattice=self,
                            executor=executor, progress=progress, client=client,
                            fail_fast=True)
        parts = bp.map("newman_ziff", backend=backend, **options)
        return parts[0].merge(*parts[1:])

    def analyze_structure(self, *, max_diameter_sites=20_000, backend=None) -> dict:
        """Graph statistics of the open sites.

        Parameters
        ----------
        max_diameter_sites : int, default 20_000
            The most open sites on which the diameter is computed by BFS from every
            site; above it the diameter is None. Full lattices (no mask, a named
            stencil, no periodic axis shorter than the stencil's span) take a closed
            form at any size.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        dict
            ``vertices``, ``edges``, ``n_components``, ``largest_component``,
            ``is_connected``, ``diameter`` (exact, or None with ``diameter_method``
            saying why), ``min_degree``, ``max_degree``, ``avg_degree``, ``density``,
            ``clustering_coefficient``, ``triangles``, and the lattice's ``shape``,
            ``dimensions``, ``periodic``, ``stencil`` and ``blocked``. Edges are the
            neighbour pairs joined by a usable bond; weights (site or bond) are not
            read: the diameter counts hops.

        Raises
        ------
        TypeError, ValueError
            ``max_diameter_sites`` is not an integer >= 0.
        """
        return self._run("analyze_structure", max_diameter_sites=max_diameter_sites, backend=backend)

    def calculate_centrality(self, method: str = "degree", *, k=None, seed=None,
                             backend=None) -> np.ndarray:
        """Centrality of every site (NaN on blocked sites), NetworkX's definitions:
        degree, closeness (wf_improved), betweenness (normalised), eigenvector (unit norm).

        Parameters
        ----------
        method : {"degree", "closeness", "betweenness", "eigenvector"}
        k : int, optional
            Betweenness only: estimate it from ``k`` sampled sources (1 <= k <= number
            of open sites), as ``networkx.betweenness_centrality(G, k=k, seed=seed)``
            does, with the same sources and scaling (the sampled sites are scaled
            differently from the others, and are NaN when ``k == 1``, as in NetworkX).
            ``k`` equal to the number of open sites gives the exact value.
        seed : int, optional
            Betweenness only: seed of the sample (``random.Random(seed).sample`` of the
            open sites in ascending order, NetworkX's draw); defaults to the lattice's
            seed. Without ``k`` it changes nothing.
        backend : str, optional
            Force a backend.

        Returns
        -------
        ndarray of float64, shape ``self.shape``
            NaN on blocked sites. Every method reads the graph of usable bonds, unweighted:
            neither site weights nor bond weights enter (distances count hops).

        Raises
        ------
        ValueError
            An unknown method, ``k`` or ``seed`` with another method, ``k`` outside
            1..n_open, a negative seed.
        TypeError
            ``k`` or ``seed`` not an integer.

        Notes
        -----
        Closeness and betweenness cost one breadth-first search per site (per sampled
        source): O(n_open n k) for n sites and k stencil offsets; the numba-cpu backend
        runs closeness searches 256 at once (64 per machine word).

        Examples
        --------
        >>> import catalytic as cat
        >>> L = cat.Lattice(shape=(1, 5))
        >>> L.calculate_centrality("betweenness").round(3).tolist()
        [[0.0, 0.5, 0.667, 0.5, 0.0]]
        >>> L.calculate_centrality("betweenness", k=2, seed=1).round(3).tolist()
        [[0.0, 1.0, 0.667, 0.333, 0.0]]
        """
        return self._run("centrality", method=method, k=k, seed=seed, backend=backend)

    def find_communities(self, method: str = "louvain", *, seed=None, backend=None) -> Communities:
        """A partition of the open sites into communities (NetworkX's algorithms).

        Parameters
        ----------
        method : {"louvain", "label_propagation", "edge_betweenness"}, default "louvain"
            ``edge_betweenness`` is the first Girvan-Newman split.
        seed : int, optional
            Seed of the randomised methods; default: the lattice's seed.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        Communities
            ``labels`` (-1 on blocked sites, communities numbered from 0 in order of
            their lowest flat index), ``count`` and ``modularity``.

        Notes
        -----
        The graph holds the usable bonds. With bond weights, Louvain maximises, and
        ``modularity`` reports, the modularity weighted by them (they are the edges'
        NetworkX attribute ``weight``; of parallel bonds, the least usable one); when they
        sum to 0 the modularity is undefined: it is reported as 0, and Louvain gives
        every site its own community. Label propagation and edge betweenness read only
        which bonds are usable.

        Raises
        ------
        ValueError
            An unknown method or a negative seed.
        TypeError
            A seed that is not an integer.
        """
        return self._run("communities", method=method, seed=seed, backend=backend)

    def laplacian(self, field, *, backend=None) -> np.ndarray:
        """Graph Laplacian ``(L f)_i = deg_i f_i - sum_{j ~ i} f_j`` (the positive
        semi-definite convention of ``scipy.sparse.csgraph.laplacian``), float64.

        With bond weights, each bond's weight is its conductance ``c_ij``: ``(L f)_i =
        sum_{j ~ i} c_ij (f_i - f_j)`` in the form ``(sum_j c_ij) f_i - sum_j c_ij f_j``
        (of parallel bonds on a short periodic axis, the least usable one; a bond of
        weight 0 is still an edge). Without them every usable bond conducts 1.

        NaN and inf propagate as in NumPy/SciPy (IEEE arithmetic): a non-finite value at
        an open site makes its own value and its open neighbours' non-finite (``0 * inf``
        and ``inf - inf`` are NaN); blocked sites give 0 whatever they hold. Every
        backend gives the same NaN positions.

        Parameters
        ----------
        field : array_like or GPU array
            Real numbers of the lattice's shape (or flat, one per site); a GPU field
            must be float64.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        ndarray or GPU array
            float64 of the lattice's shape (a device array for a GPU field).

        Raises
        ------
        TypeError
            A field that is not real numbers (or a GPU field that is not float64).
        ValueError
            A field of another shape.

        Notes
        -----
        O(n k) for n sites and k stencil offsets.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> cat.Lattice(shape=(1, 3)).laplacian(np.array([[0.0, 1.0, 0.0]]))
        array([[-1.,  2., -1.]])
        """
        return self._run("laplacian", field, backend=backend)

    def diffuse(self, field, steps: int = 1, alpha: float = 0.1, *,
                allow_unstable: bool = False, backend=None) -> np.ndarray:
        """``steps`` explicit Euler steps of diffusion, ``f <- f - alpha L f``, with
        ``L`` the combinatorial graph Laplacian (:meth:`laplacian`).

        The scheme is stable for ``alpha <= 2 / lambda_max``. Since every degree is at
        most the stencil size k, ``lambda_max <= 2 k``, and an ``alpha`` above ``1 / k``
        (``catalytic.catalogue.diffusion_limit(L)``) is refused with a ``ValueError``
        giving the limit, before any work, unless ``allow_unstable=True`` (the result
        may then grow without bound or turn to NaN). With bond weights (conductances)
        the limit is ``1 / max_i sum_j c_ij``, the largest weighted degree. On a
        periodic axis of length 2 the two neighbours along it are one site, counted once.

        NaN and inf propagate as ``f - alpha * (L @ f)`` does in NumPy: each step
        spreads a non-finite value one site further; blocked sites keep their value.

        Parameters
        ----------
        field : array_like or GPU array
            Real numbers of the lattice's shape (or flat); a GPU field must be float64.
        steps : int, default 1
            Number of steps, >= 0.
        alpha : float, default 0.1
            Step size, finite and >= 0.
        allow_unstable : bool, default False
            Accept an ``alpha`` above the stability limit.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        ndarray or GPU array
            float64 of the lattice's shape (a device array for a GPU field).

        Raises
        ------
        ValueError
            ``alpha`` above the limit (``1 / k``, or with bond weights one over the
            largest weighted degree) without ``allow_unstable``, a negative or
            non-finite ``alpha``, negative ``steps``, a field of another shape.
        TypeError
            A field that is not real numbers, ``steps`` not an integer, ``alpha`` not a
            real number, ``allow_unstable`` not a bool.

        Notes
        -----
        O(steps n k) for n sites and k stencil offsets.

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> L = cat.Lattice(shape=(32, 32), periodic=True)
        >>> f = np.zeros(L.shape); f[0, 0] = 1.0
        >>> round(float(L.diffuse(f, steps=10, alpha=0.2).sum()), 12)   # heat is conserved
        1.0
        >>> L.diffuse(f, alpha=10)
        Traceback (most recent call last):
        ...
        ValueError: alpha=10.0 may make the explicit diffusion step unstable on this lattice: with 4 stencil offsets the Laplacian's largest eigenvalue can reach 8, and f - alpha L f stays bounded only for alpha <= 0.25; use a smaller alpha (and more steps), or pass allow_unstable=True
        """
        return self._run("diffuse", field, steps=steps, alpha=alpha,
                         allow_unstable=allow_unstable, backend=backend)

    def xor_transform(self, data, key=None, *, backend=None) -> np.ndarray:
        """XOR integer ``data`` with a key; applying it twice returns the input.

        XOR acts on the data's values, not on their bytes in memory: data in either
        byte order (``'>i4'`` or ``'<i4'``) holding the same values gives the same
        values, on every backend, single or batched (``BatchProcessor`` with
        ``lattice=``, ``batch_xor_transform``), and either copy decrypts the other's
        result.

        Parameters
        ----------
        data : array_like of integers, or a GPU array
            Any integer dtype and byte order. Bool, float, complex, object, string,
            structured and datetime data raise ``TypeError`` saying what to do instead
            (for bool, ``.astype(np.uint8)``).
        key : None or array_like of integers, optional
            None: the lattice's catalytic key (its aux buffer, derived from ``seed``),
            its bytes repeated over the bytes of the data's values in the machine's
            (native) byte order; its period is ``aux_memory_size`` bytes. An integer
            array (or scalar): applied elementwise to the flattened data, repeated; its
            values must fit the data's dtype.
        backend : str, optional
            Run on this backend instead of the one the router picks.

        Returns
        -------
        ndarray
            A new array of the data's shape and dtype, byte order included; ``data``
            is not modified. GPU ``data`` gives a GPU result (cuda backend).

        Raises
        ------
        TypeError
            Non-integer data or key.
        ValueError
            An empty key, or key values that do not fit the data's dtype.

        Notes
        -----
        O(n) in the data's bytes. With ``key=None`` the call reads the lattice's own
        buffer, so it waits while another thread has that buffer on loan
        (``find_path_catalytic``; see :mod:`catalytic.catalysis`).

        Examples
        --------
        >>> import numpy as np, catalytic as cat
        >>> L = cat.Lattice(shape=(4, 4), seed=1)
        >>> x = np.arange(5, dtype=np.int32)
        >>> L.xor_transform(x, np.array([1, 2]))
        array([1, 3, 3, 1, 5], dtype=int32)
        >>> y = L.xor_transform(x)
        >>> bool((L.xor_transform(y) == x).all())
        True
        >>> big = x.astype(">i4")   # the same values, big-endian
        >>> out = L.xor_transform(big)
        >>> out.dtype.str, bool((out == y).all())
        ('>i4', True)
        """
        return self._run("xor_transform", data, key, backend=backend)

    def apply_transformation(self, data, transformation: str = "xor", *, backend=None, **kwargs):
        """Apply ``"xor"``, ``"normalize"`` (min-max to [0, 1]), ``"scale"``
        (``factor=``) or any registered operation that takes ``data`` first."""
        if transformation == "xor":
            return self.xor_transform(data, kwargs.pop("key", None), backend=backend)
        return self.engine.run(transformation, data, backend=backend, **kwargs)

    # -- metrics ----------------------------------------------------------------------------
    def estimate_memory_usage(self) -> dict:
        """Bytes this lattice holds (measured ``nbytes``), and the bytes the memory model
        predicts for common operations (labelled ``predicted_*``)."""
        g = self.geometry
        structure = g.offsets.nbytes + g.strides.nbytes + g.shape_arr.nbytes
        structure += g.bond_offsets.nbytes + g.bond_slot.nbytes
        mask = 0 if g.mask is None else g.mask.nbytes
        weights = 0 if g.weights is None else g.weights.nbytes
        bonds = 0 if g.bond_bits is None else g.bond_bits.nbytes
        bond_weights = 0 if g.bond_weights is None else g.bond_weights.nbytes
        held = structure + mask + weights + bonds + bond_weights + self._aux.nbytes
        k = len(g.offsets)
        return {
            "structure": int(structure),
            "mask": int(mask),
            "weights": int(weights),
            "bonds": int(bonds),
            "bond_weights": int(bond_weights),
            "aux": int(self._aux.nbytes),
            "total_held": int(held),
            "predicted_distance_field": int(g.n_points * 16),
            "predicted_explicit_graph": int(g.n_points * k * 40),
        }

    def get_metrics(self) -> LatticeMetrics:
        """Measured sizes and memory (see :class:`LatticeMetrics`)."""
        import psutil

        mem = self.estimate_memory_usage()
        dec = self.engine.last_decision
        return LatticeMetrics(
            shape=self.shape,
            n_points=self.n_points,
            n_open=self.n_open,
            n_blocked=self.n_points - self.n_open,
            structure_bytes=mem["structure"],
            mask_bytes=mem["mask"],
            weights_bytes=mem["weights"],
            aux_bytes=mem["aux"],
            total_bytes=mem["total_held"],
            bytes_per_site=mem["total_held"] / self.n_points if self.n_points else math.nan,
            process_rss=int(psutil.Process().memory_info().rss),
            last_decision=None if dec is None else str(dec).splitlines()[0],
        )

    def cleanup(self) -> None:
        """Release backend state held for this lattice (caches, device copies): each
        backend's declared ``release`` runs (the cuda backend's tells the device-memory
        accounting too), then every backend cache is emptied."""
        self.engine.release_lattice(self)
        self._backend_state.clear()
        self.record_borrow(None)
        self._built = False

    # -- pickling: by geometry and seed -------------------------------------------------
    def __reduce__(self):
        """Pickle by definition: geometry, seed, buffer size, routing flags, and the
        settings of the engine given as ``engine=`` (None: the receiving process's
        engine). The key buffer is regenerated from the seed; caches, device copies and
        per-thread records are not carried. An unpickled lattice with its own engine
        gets one engine per distinct settings per process, built from those settings
        (with the entry-point plugins, not plugins registered on the original object)."""
        g = self.geometry
        definition = {
            "shape": g.shape,
            "periodic": g.periodic,
            "stencil": g.offsets if g.stencil == "custom" else g.stencil,
            "mask": g.mask,
            "weights": g.weights,
            "bonds": self.bonds,
            "bond_weights": self.bond_weights,
            "seed": self.seed,
            "aux_memory_size": int(self._aux.size),
            "enable_gpu": self.enable_gpu,
            "enable_smart_routing": self.enable_smart_routing,
        }
        settings = None if self._engine is None else self._engine.settings
        return _unpickle_lattice, (definition, settings)

    def __enter__(self):
        return self.build_lattice()

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def __repr__(self) -> str:
        g = self.geometry
        return (
            f"UnifiedCatalyticLattice(shape={g.shape}, periodic={g.periodic}, "
            f"stencil={g.stencil!r}, open={g.n_open}/{g.n_points}"
            f"{', weighted' if g.weights is not None else ''}"
            f"{', bonds' if g.bond_bits is not None else ''}"
            f"{', bond-weighted' if g.bond_weights is not None else ''})"
        )


Lattice = UnifiedCatalyticLattice


_unpickled_engines: dict = {}
_unpickled_lock = threading.Lock()


def _one_site(site, d: int) -> bool:
    """Whether ``site`` names one site (a flat index or a tuple of d coordinates) rather
    than several."""
    if isinstance(site, (numbers.Integral, np.integer)):
        return True
    return isinstance(site, tuple) and len(site) == d and all(
        isinstance(c, (numbers.Integral, np.integer)) for c in site)


def _unpickle_lattice(definition, settings):
    engine = None
    if settings is not None:
        from catalytic.engine import Engine

        key = repr(settings)
        with _unpickled_lock:
            engine = _unpickled_engines.get(key)
            if engine is None:
                engine = _unpickled_engines[key] = Engine(settings=settings)
    return UnifiedCatalyticLattice(**definition, engine=engine)


def _cpu_only(backend) -> bool:
    """Routing filter of lattices made with ``enable_gpu=False``."""
    return backend.device == "cpu"


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, np.integer)):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return int(seed)


def _resolve_shape(dimensions, size, shape):
    if shape is not None:
        if dimensions is not None or size is not None:
            raise ValueError("give either shape= or dimensions/size, not both")
        return shape
    if size is None:
        raise ValueError("give shape=, or dimensions and size")
    if isinstance(size, (numbers.Integral, np.integer)) and not isinstance(size, bool):
        if dimensions is None:
            raise ValueError("size as a single int needs dimensions")
        if isinstance(dimensions, bool) or not isinstance(dimensions, (numbers.Integral, np.integer)):
            raise ValueError(f"dimensions must be a positive integer, got {dimensions!r}")
        if dimensions < 1:
            raise ValueError(f"dimensions must be >= 1, got {dimensions}")
        return (size,) * int(dimensions)
    if isinstance(size, (float, np.floating, bool)):
        raise ValueError(f"size must be a positive integer, got {size!r}")
    size = tuple(size)
    if dimensions is not None and dimensions != len(size):
        raise ValueError(f"dimensions={dimensions} but size has {len(size)} entries: {size}")
    return size
