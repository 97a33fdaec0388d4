"""benchmarks/percolation.py end to end at a tiny size: it runs through the batch
processor, fits, writes its report, and lands near the square lattice's threshold."""

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


def test_fit_step_recovers_a_known_step():
    from scipy.special import ndtr

    mod = _study()
    ps = np.linspace(0.4, 0.6, 9)
    n = np.full(9, 4000)
    k = np.round(n * ndtr((ps - 0.51) / 0.03)).astype(int)
    p50, w, err = mod.fit_step(ps, k, n)
    assert p50 == pytest.approx(0.51, abs=0.001) and w == pytest.approx(0.03, rel=0.05)
    assert 0 < err < 0.002
    pc, pc_err, a, chi2 = mod.extrapolate([10, 20, 40], [0.6 + 0.5 * L ** -0.75 for L in
                                                       (10, 20, 40)], [1e-4] * 3, 4 / 3)
    assert pc == pytest.approx(0.6, abs=1e-9) and a == pytest.approx(0.5)


def test_small_square_study_writes_its_report(tmp_path):
    mod = _study()
    out = tmp_path / "sq.md"
    assert mod.main(["--lattice", "square", "--sizes", "24,48", "--samples", "60",
                     "--points", "7", "--output", str(out)]) == 0
    text = out.read_text()
    assert "| 24 |" in text and "| 48 |" in text and "p_c =" in text
    pc = float(text.split("**p_c = ")[1].split()[0])
    assert 0.55 < pc < 0.64  # two small sizes, 420 lattices each: a coarse estimate


def test_newman_ziff_route_agrees_with_the_batch_route(tmp_path):
    """Both routes on the same small study land on the same threshold within their
    errors, and the sweep's thresholds equal the slow reference's (numpy backend:
    a binary search over prefixes, each labelled afresh)."""
    import catalytic as cat

    L = cat.Lattice(shape=(10, 9), periodic=(False, True),
                    mask=np.random.default_rng(1).random((10, 9)) < 0.9)
    fast = L.run("spanning_thresholds", 25, axis=0, seed=4, backend="numba-cpu")
    slow = L.run("spanning_thresholds", 25, axis=0, seed=4, backend="numpy")
    assert np.array_equal(fast, slow) and (fast > 0).all()
    with pytest.raises(ValueError, match="periodic"):
        L.run("spanning_thresholds", 5, axis=1)
    mod = _study()
    out = tmp_path / "nz.md"
    assert mod.main(["--lattice", "square", "--method", "newman-ziff", "--sizes", "24,48",
                     "--samples", "400", "--output", str(out)]) == 0
    text = out.read_text()
    assert "Newman-Ziff sweeps" in text
    r = mod.canonical(np.array([5, 7, -1, 6]), 10, 1.0)
    assert r == pytest.approx(0.75)  # at p = 1 every sample that ever spans has spanned
