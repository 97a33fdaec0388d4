"""Put back ``numpy.row_stack`` where NumPy no longer has it, for the GPU proof only.

Some numba-cuda releases register an overload of ``np.row_stack`` when their typing
registries load (``numba/cuda/np/arrayobj.py``); NumPy 2.5 removed that alias of
``np.vstack``, so every CUDA kernel compile there fails with AttributeError. The proof
puts this folder on PYTHONPATH only when that happens (see ``gpu_proof.py``) and says so
in its report; catalytic itself never changes NumPy.
"""

import numpy

if not hasattr(numpy, "row_stack"):
    numpy.row_stack = numpy.vstack
