"""``@njit`` kernels, one module per algorithm family, each with its host functions.

Every host function takes the lattice as plain arrays (see ``neighbors.py`` for the
conventions: ``shape``, ``periodic``, ``offsets``, ``open_``, ``dedupe``) and returns plain
arrays. The engine has validated the input; the host functions only choose array sizes
and dtypes, allocate, and call the ``@njit`` kernels beside them.

Threads
-------
Every host function runs its kernels on Numba's current thread count (the numba-cpu
backend decides it per call: the free CPUs, or one thread for small lattices). Results
never depend on the thread count: parallel loops write disjoint outputs, and the one
shared structure (the BFS distance array) only ever sees the same value written twice.

Graph conventions
-----------------
The out-neighbours of site ``i`` are its neighbour set from ``neighbors.py``. Distances
follow out-neighbours; paths are walked back over *in*-neighbours (the stencil negated),
which for the usual symmetric stencils is the same set as the neighbour set.
Connected components treat the neighbour relation as undirected.
"""
