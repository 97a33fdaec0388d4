"""Compile the common numba-cpu kernels before the first real call: ``catalytic warmup``.

Numba compiles a kernel the first time it meets a new combination of argument types and
keeps the machine code in its on-disk cache (every kernel here is ``cache=True``), so in
a fresh environment the first call of an operation spends seconds compiling that later
processes skip. :func:`warmup` makes those first calls once, on small lattices that
still reach the multi-threaded code paths, so that a script's first call, or a test
run, starts from a warm cache.

The cache lives beside the installed package (``__pycache__``), or, where that is not
writable, in Numba's per-user cache folder; ``NUMBA_CACHE_DIR`` moves it. A warm cache
is reused until the package, Numba or the CPU changes. The CUDA kernels are compiled
on their first launch on a GPU and are not covered here.

Examples
--------
>>> from catalytic.tools.warmup import warmup
>>> done = warmup(progress=None, only=("components",))
>>> [name for name, seconds in done]
['components']
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

BACKEND = "numba-cpu"


def _components():
    import catalytic as cat

    rng = np.random.default_rng(0)
    for shape in ((64, 64), (320, 320), (48, 48, 48)):  # one call and the windowed path
        for periodic in (False, True):
            cat.Lattice(shape=shape, mask=rng.random(shape) < 0.6,
                        periodic=periodic).connected_components(backend=BACKEND)
    cat.Lattice(shape=(64, 64), stencil="moore").connected_components(backend=BACKEND)


def _distances():
    import catalytic as cat

    # 96^3: past the size where the padded layout is written by the parallel kernels
    # (smaller lattices write it with NumPy)
    L = cat.Lattice(shape=(96, 96, 96))
    L.distance_field(0, backend=BACKEND)
    L.find_shortest_path(0, L.geometry.n_points - 1, backend=BACKEND)
    L.count_shortest_paths(0, 4095, backend=BACKEND)
    W = cat.Lattice(shape=(96, 96, 96), weights=np.random.default_rng(0).random((96,) * 3))
    W.distance_field(0, backend=BACKEND)
    W.find_shortest_path(0, W.geometry.n_points - 1, backend=BACKEND)
    # blocked sites: the monotone sweep (open axes) and the searches (periodic ones), the
    # parental field and nearest sources, Euclidean steps (their FIFO queues)
    mask = np.random.default_rng(1).random((96,) * 3) >= 0.1
    mask[0, 0, 0] = mask[-1, -1, -1] = True
    for periodic in (False, True):
        M = cat.Lattice(shape=(96, 96, 96), mask=mask, periodic=periodic)
        M.find_shortest_path(0, M.geometry.n_points - 1, backend=BACKEND)
    M.distance_field([0, M.geometry.n_points - 1], return_parents=True, return_sources=True,
                     backend=BACKEND)
    E = cat.Lattice(shape=(96, 96, 96), mask=mask, stencil="moore")
    E.distance_field(0, spacing=(1.0, 1.0, 2.0), backend=BACKEND)


def _centrality():
    import catalytic as cat

    L = cat.Lattice(shape=(16, 16))
    for method in ("degree", "closeness"):
        L.calculate_centrality(method, backend=BACKEND)


def _fields():
    import catalytic as cat

    for periodic in (False, True):
        L = cat.Lattice(shape=(64, 64), periodic=periodic)
        f = np.random.default_rng(0).random(L.shape)
        L.laplacian(f, backend=BACKEND)
        L.diffuse(f, steps=2, alpha=0.1, backend=BACKEND)


def _arrays():
    import catalytic as cat
    from catalytic import ops

    L = cat.Lattice(shape=(64, 64))
    L.xor_transform(np.arange(4096, dtype=np.int64), backend=BACKEND)
    x = np.random.default_rng(0).random(1 << 16)
    for op in ("sum", "min", "max", "mean"):
        ops.reduce(x, op, backend=BACKEND)
    ops.normalize(x, backend=BACKEND)


def _transport():
    import catalytic as cat

    # 192^2: more solved sites than the solve's sweeps take on one thread
    L = cat.Lattice(shape=(192, 192))
    L.transport(L.face(1, "low"), L.face(1, "high"), backend=BACKEND)
    mask = np.random.default_rng(2).random((24, 24, 24)) < 0.5
    M = cat.Lattice(shape=(24, 24, 24), mask=mask)
    M.transport(M.face(0, "low"), M.face(0, "high"), backend=BACKEND)


#: name -> what it compiles, in the order :func:`warmup` runs them
TASKS: dict[str, Callable[[], None]] = {
    "components": _components,
    "distances": _distances,
    "centrality": _centrality,
    "fields": _fields,
    "arrays": _arrays,
    "transport": _transport,
}


def warmup(progress: Callable[[str], None] | None = print, only=None) -> list:
    """Compile the numba-cpu kernels of the common operations, one group at a time.

    Parameters
    ----------
    progress : callable or None, optional
        Called with one line of text before and after each group (default ``print``);
        None for silence.
    only : iterable of str, optional
        Group names from :data:`TASKS` (default: all of them).

    Returns
    -------
    list of (str, float)
        Each group run and the seconds it took (mostly compilation on a cold cache,
        well under a second each on a warm one).

    Raises
    ------
    ValueError
        If ``only`` names an unknown group.
    RuntimeError
        If the numba-cpu backend is not available (Numba missing).

    Notes
    -----
    Every group calls public operations with ``backend="numba-cpu"`` on lattices large
    enough for the parallel paths (up to 96^3 sites), on all of Numba's threads however
    busy the machine is, so the kernels and argument types a usual call needs get
    compiled. Larger index types (lattices over 2^31
    sites) compile on first use.
    """
    import catalytic as cat

    names = list(TASKS) if only is None else list(only)
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise ValueError(f"unknown warmup groups {unknown}; choose from {list(TASKS)}")
    ok, why = cat.get_engine().backends().get(BACKEND, (False, "not registered"))
    if not ok:
        raise RuntimeError(f"the {BACKEND} backend is not available: {why}")
    from catalytic.backends.numba_cpu import every_thread

    say = progress or (lambda _line: None)
    done = []
    for name in names:
        say(f"compiling {name} ...")
        t0 = time.perf_counter()
        with every_thread():  # the parallel paths, also on a busy machine
            TASKS[name]()
        done.append((name, time.perf_counter() - t0))
        say(f"  {name}: {done[-1][1]:.1f} s")
    return done
