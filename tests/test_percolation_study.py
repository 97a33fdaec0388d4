"""benchmarks/percolation.py end to end at a tiny size: Newman-Ziff sweeps (through the
batch processor in chunks), the library's threshold estimates, the extrapolation and the
report, landing near the square and cubic thresholds; and the sweep-cost table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "percolation.py"


def _study():
    spec = importlib.util.spec_from_file_location("percolation_study", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_extrapolation_recovers_a_known_law():
    mod = _study()
    pc, pc_err, a, chi2 = mod.extrapolate([10, 20, 40], [0.6 + 0.5 * L ** -0.75 for L in
                                                       (10, 20, 40)], [1e-4] * 3, 0.75)
    assert pc == pytest.approx(0.6, abs=1e-9) and a == pytest.approx(0.5)


def test_quick_square_study_writes_its_report(tmp_path):
    """The quick run: two small tori, the library's threshold (wrapping either axis at
    its known value) per size, the extrapolation, the report."""
    mod = _study()
    out = tmp_path / "sq.md"
    assert mod.main(["--lattice", "square", "--quick", "--output", str(out)]) == 0
    text = out.read_text()
    assert "| 16 |" in text and "| 32 |" in text and "p_c =" in text
    pc = float(text.split("**p_c = ")[1].split()[0])
    assert 0.55 < pc < 0.64  # two small sizes, 300 sweeps each: a coarse estimate


def test_one_size_is_reported_without_extrapolation(tmp_path):
    """One size: p_c is that size's estimate and error (no fit), said so, with the
    jackknife blocks asked for."""
    mod = _study()
    out = tmp_path / "one.md"
    assert mod.main(["--lattice", "square", "--quick", "--sizes", "16", "--blocks", "8",
                     "--output", str(out)]) == 0
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 16 |"))
    p_L, err = (float(x) for x in row.split("|")[2:4])
    assert f"One size, not extrapolated: **p_c = {p_L:.6f} +- {err:.6f}**" in text
    assert "over 8 blocks" in text and "Fit p_L" not in text


def test_crossing_study_and_the_sweep_cost(tmp_path):
    """Cubic bond percolation from the crossing of two sizes' wrapping curves (through
    the BatchProcessor in chunks), and the sweep-cost table; spanning_thresholds, the
    events-only sweep, still equals its slow reference (a binary search over prefixes,
    each labelled afresh) and refuses periodic axes."""
    import catalytic as cat

    L = cat.Lattice(shape=(10, 9), periodic=(False, True),
                    mask=np.random.default_rng(1).random((10, 9)) < 0.9)
    fast = L.run("spanning_thresholds", 25, axis=0, seed=4, backend="numba-cpu")
    slow = L.run("spanning_thresholds", 25, axis=0, seed=4, backend="numpy")
    assert np.array_equal(fast, slow) and (fast > 0).all()
    with pytest.raises(ValueError, match="periodic"):
        L.run("spanning_thresholds", 5, axis=1)
    mod = _study()
    out = tmp_path / "cb.md"
    assert mod.main(["--lattice", "cubic", "--kind", "bond", "--quick", "--chunks", "3",
                     "--output", str(out)]) == 0
    text = out.read_text()
    assert "curves of consecutive sizes cross" in text and "| 10 |" in text
    pc = float(text.split("**p_c = ")[1].split()[0])
    assert 0.2 < pc < 0.3
    cost = tmp_path / "cost.md"
    assert mod.main(["--sweep-cost", "--quick", "--repeat", "1", "--output", str(cost)]) == 0
    assert cost.read_text().count("| 64x64 |") == 2
