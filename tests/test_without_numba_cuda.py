"""``import catalytic`` and every CPU path work when numba-cuda is not installed.

The check runs in a fresh interpreter in which any import of ``numba.cuda`` or
``numba_cuda`` fails, as it does on a machine without the ``cuda`` extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class NoCuda(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "numba.cuda" or name.startswith(("numba.cuda.", "numba_cuda")):
                raise ImportError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoCuda())
    import numpy as np
    import catalytic as cat
    from catalytic.backends import cuda_backend
    from catalytic.cli import main

    mask = np.random.default_rng(0).random((20, 20)) < 0.7
    L = cat.Lattice(shape=(20, 20), mask=mask)
    src = int(np.flatnonzero(mask)[0])
    out = {"cuda": cat.get_engine().backends()["cuda"], "devices": cat.devices(),
           "transfers": cuda_backend.transfer_stats()}
    for b in ("numpy", "numba-cpu"):
        out[b] = [L.connected_components(backend=b).count,
                  L.distance_field(src, backend=b).tolist(),
                  L.xor_transform(np.arange(5), backend=b).tolist(),
                  float(cat.ops.reduce(np.arange(7.0), "sum", backend=b))]
    out["info"] = main(["info"])
    out["loaded"] = [m for m in sys.modules if m.startswith(("numba.cuda", "numba_cuda"))]
    print("RESULT", json.dumps(out))
    """
)


def test_catalytic_runs_on_the_cpu_without_numba_cuda():
    import json

    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    ok, why = out["cuda"]
    assert not ok and 'pip install "catalytic[cuda]"' in why
    assert out["devices"] == [] and out["info"] == 0
    assert out["transfers"] == {"h2d_bytes": 0, "d2h_bytes": 0, "h2d_copies": 0, "d2h_copies": 0}
    assert out["numpy"] == out["numba-cpu"]
    assert out["numpy"][0] > 1 and out["numpy"][3] == 21.0
    assert out["loaded"] == []
    assert "UNAVAILABLE" in proc.stdout and "numba-cuda" in proc.stdout
