"""The CUDA kernels of ``catalytic.kernels.cuda``, enumerated, and the record of which
of them this test session launched in the simulator, with which argument types.

Shared by the PTX tests (every kernel has a PTX case; every launch signature is in the
snapshot and compiles) and the recording in :mod:`tests.support.cuda_passes` (under
``NUMBA_ENABLE_CUDASIM=1`` every kernel ran at least once).

Launch signatures: on a GPU, Numba compiles a kernel once for each tuple of argument
types it is called with, so a combination that no test compiled (an int64 index array
beside int32 labels, say) would first fail on the hardware. The simulator compiles
nothing, but it sees every launch: ``cuda_passes`` records each launch's Numba argument
types (:func:`arg_key`), a full simulator pass checks them against the committed
snapshot :data:`SNAPSHOT`, and the normal pass compiles every signature in it to sm_90
PTX and assembles it with ptxas.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import pkgutil

import numba
import numpy as np
from numba.np.numpy_support import from_dtype

import catalytic.kernels.cuda as cuda_pkg

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

#: the Python functions of the kernels launched in this session (simulator only)
LAUNCHED: set = set()
#: ``(python function, signature key)`` of every launch in this session (simulator only)
SIGNATURES: set = set()
#: the launch signatures of a full simulator pass: ``{"module.kernel": [key, ...]}``
SNAPSHOT = pathlib.Path(__file__).with_name("launch_signatures.json")
#: why this session cannot tell whether every kernel ran (a subset of the CUDA tests
#: was selected), or None when it can; set by ``cuda_passes`` at collection
PARTIAL: list = ["not collected yet"]


def modules():
    """Every module of ``catalytic.kernels.cuda``, imported."""
    return [importlib.import_module(f"{cuda_pkg.__name__}.{m.name}")
            for m in pkgutil.iter_modules(cuda_pkg.__path__)]


def is_kernel(obj) -> bool:
    """A ``@cuda.jit`` kernel, on a GPU or under the simulator (device functions not)."""
    if SIM:
        from numba.cuda.simulator.kernel import FakeCUDAKernel

        return isinstance(obj, FakeCUDAKernel) and not obj._device
    from numba.cuda.dispatcher import CUDADispatcher

    return isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device")


def py_func(kernel):
    return kernel.fn if SIM else kernel.py_func


def all_kernels():
    """``{(module, name): kernel}`` of every kernel a cuda module defines (not imports),
    factory-made ones (``arrays._sum_f64_kernel``) included."""
    out = {}
    for mod in modules():
        for name, obj in vars(mod).items():
            if is_kernel(obj) and py_func(obj).__module__ == mod.__name__:
                out[(mod.__name__, name)] = obj
    return out


# -- launch signatures -------------------------------------------------------------------
def arg_key(a) -> str:
    """The Numba type a GPU launch gives argument ``a``, as a short string: ``int64``
    (a scalar: Python ints are int64, floats float64, bools bool) or
    ``int32[2,C]`` (an array: dtype, dimensions, layout; ``ro`` when read-only). A
    simulated device array is typed as a real one: by its layout, always writable.
    Called at every simulator launch."""
    ary = getattr(a, "_ary", None)  # the simulator's FakeCUDAArray
    t = numba.typeof(ary if isinstance(ary, np.ndarray) else a)
    if isinstance(t, numba.types.Array):
        ro = not t.mutable and ary is None
        return f"{t.dtype}[{t.ndim},{t.layout}{',ro' if ro else ''}]"
    return str(t)


def key_type(key: str):
    """The Numba type :func:`arg_key` wrote."""
    if "[" not in key:
        return from_dtype(np.dtype(key))
    dtype, rest = key[:-1].split("[")
    ndim, layout, *ro = rest.split(",")
    return numba.types.Array(from_dtype(np.dtype(dtype)), int(ndim), layout, readonly=bool(ro))


def record(fn, args) -> None:
    """Note a simulator launch of the kernel whose Python function is ``fn``."""
    LAUNCHED.add(fn)
    SIGNATURES.add((fn, tuple(arg_key(a) for a in args)))


def launched_signatures() -> dict:
    """``{"module.kernel": sorted [[key, ...], ...]}`` of this session's launches of the
    package's kernels (a plugin's are its own tests' business)."""
    names = {py_func(k): f"{m}.{n}" for (m, n), k in all_kernels().items()}
    out: dict = {}
    for fn, sig in SIGNATURES:
        if fn in names:
            out.setdefault(names[fn], set()).add(sig)
    return {k: sorted(list(s) for s in v) for k, v in sorted(out.items())}


def launched_names() -> list:
    """``"module.kernel"`` of every package kernel this session launched, sorted."""
    return sorted(f"{m}.{n}" for (m, n), k in all_kernels().items() if py_func(k) in LAUNCHED)


def never_launched(launched) -> list:
    """The package kernels (``"module.kernel"``) not among ``launched``, sorted."""
    launched = set(launched)
    return sorted(name for name in (f"{m}.{n}" for m, n in all_kernels())
                  if name not in launched)


def _flat(sigs: dict) -> set:
    return {(name, tuple(sig)) for name, lst in sigs.items() for sig in lst}


def snapshot_diff(got: dict) -> tuple:
    """``(missing, stale)``: the launch signatures of ``got`` (as
    :func:`launched_signatures` gives them) not in the snapshot, and the snapshot's not
    in ``got``, each a sorted list of ``(name, signature)``."""
    want = load_snapshot()
    return sorted(_flat(got) - _flat(want)), sorted(_flat(want) - _flat(got))


def merge_signatures(parts) -> dict:
    """One :func:`launched_signatures` dict from several (the workers' of a pytest-xdist
    run)."""
    out: dict = {}
    for sigs in parts:
        for name, lst in sigs.items():
            out.setdefault(name, set()).update(tuple(sig) for sig in lst)
    return {k: sorted(list(s) for s in v) for k, v in sorted(out.items())}


def load_snapshot() -> dict:
    """The committed snapshot (empty when the file is missing)."""
    return json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {}


def write_snapshot(sigs: dict) -> None:
    """Write ``sigs`` as the snapshot, one signature a line (readable diffs)."""
    lines = ["{"]
    items = list(sigs.items())
    for i, (name, lst) in enumerate(items):
        body = ",\n".join("  " + json.dumps(sig) for sig in lst)
        lines.append(f"{json.dumps(name)}: [\n{body}\n]" + ("," if i < len(items) - 1 else ""))
    lines.append("}")
    SNAPSHOT.write_text("\n".join(lines) + "\n")
