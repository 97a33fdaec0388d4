"""The GPU proof's bonds step (``benchmarks/gpu_proof_support/gpu_proof_bonds.py``) at a
size the simulator runs: its checks compare the cuda results with numba-cpu's and with
SciPy's components of the bond-aware adjacency, and say so in the rows it writes."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_proof_support" / "gpu_proof_bonds.py"


def _step():
    spec = importlib.util.spec_from_file_location("gpu_proof_bonds", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.REPEAT = 1  # these tests check the answers; the timing is the GPU run's
    return mod


@pytest.mark.sim
@pytest.mark.parametrize("shape, density", [((8, 10), None), ((4, 5, 3), 0.8)])
def test_the_wrapping_rows_agree_with_numba_cpu_and_scipy(shape, density):
    row = _step().check_wrapping(shape, density, seed=2)
    assert row["numba_cpu_agrees"] is True and row["scipy_agrees"] is True
    assert row["shape"] == list(shape) and set(row["wrapping"]) == {str(a) for a in
                                                                    range(len(shape))}
    assert row["cuda_s"] > 0 and row["ratio_to_labelling"] > 0


@pytest.mark.sim
def test_the_bond_rows_agree_with_scipy():
    rows = _step().check((6, 7), 0.7)
    assert [r["op"] for r in rows] == ["bfs", "dijkstra", "components"]
    assert all(r["scipy_agrees"] is True and r["numba_cpu_agrees"] is not False for r in rows)
