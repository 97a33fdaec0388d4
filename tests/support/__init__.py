"""Code the tests share, imported as ``from tests.support.<module> import ...``.

- :mod:`~tests.support.oracles`: the lattice's neighbour rule, graphs and clusters
  rebuilt from their definitions, without catalytic (the independent oracles).
- :mod:`~tests.support.strategies`: hypothesis strategies that draw lattices.
- :mod:`~tests.support.backends`: the backends a test runs on (built once).
- :mod:`~tests.support.cuda_kernels`: every CUDA kernel of ``catalytic.kernels.cuda``,
  the record of the kernels a simulator pass launched, and the committed snapshot of
  their launch signatures (``launch_signatures.json``).
- :mod:`~tests.support.cuda_passes`: the pytest plugin behind the CUDA passes
  (simulator, PTX, GPU), loaded by ``tests/conftest.py``.
- :mod:`~tests.support.state`: what a test may not leave behind in the process.
- :mod:`~tests.support.kernel_calls`: the calls of host-called Numba kernels, counted
  (a host function splits its work over many of them).
"""

from __future__ import annotations

from pathlib import Path

#: the repository root (tests name files in it relative to this, wherever they sit)
ROOT = Path(__file__).resolve().parents[2]
