"""catalytic's tests, laid out as the source is.

- ``tests/test_<module>*.py``: a top-level module of ``catalytic/`` (geometry, ops, batch,
  engine, memory, the pool, catalysis), and the project as a whole (packaging, README,
  architecture, demo, the GPU proof, the percolation study, doctests, no numba-cuda).
- ``tests/lattice/``: the lattice's operations (paths, components, percolation, structure,
  centrality, fields, the catalytic guarantee, errors, with_mask, pickling, threads), on
  every available backend.
- ``tests/backends/``: a backend's own policy (``test_numba_cpu.py``; the cuda backend in
  ``cuda_backend/``).
- ``tests/kernels/cpu/`` and ``tests/kernels/cuda/``: files named after the kernel modules
  they test, against oracles and (CUDA) their CPU twins.
- ``tests/profiler/``, ``tests/tools/``: the packages of those names.
- ``tests/support/``: shared oracles, strategies, the backend list and the CUDA test
  machinery, imported as ``tests.support.<module>``.
"""
