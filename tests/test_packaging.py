"""The quick start, the extras and CI agree with each other."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def _extras():
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]["optional-dependencies"]


def _names(reqs):
    return {re.split(r"[\[<>=!~ ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_test_extra_runs_the_suite_without_cuda_wheels():
    extras = _extras()
    test, dev = _names(extras["test"]), _names(extras["dev"])
    assert {"pytest", "hypothesis"} <= test
    assert not any(n.startswith(("numba-cuda", "cuda", "nvidia")) for n in test)
    assert test <= dev and "numba-cuda" in dev  # dev = test + the simulator's numba-cuda
    assert 'pip install ".[test]"' in README


def test_quick_start_recommends_a_venv_and_states_first_run_costs():
    start = README[README.index("## Quick start"):README.index("## Use")]
    assert "python3 -m venv" in start
    assert "minutes" in start and "GB" in start  # first-run compile time, CUDA wheel size


def _test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    return next(c for c in commands if "pytest" in c)


def test_ci_runs_exactly_the_readme_test_command():
    test_cmd = _test_command()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == test_cmd


def test_the_simulator_pass_names_every_cuda_test_folder():
    """Every CUDA test file is in the simulator pass, so its check that every kernel ran
    runs instead of skipping as a partial selection (tests/support/cuda_passes.py)."""
    from tests.support.cuda_passes import CUDA_TEST_DIRS

    sim = _test_command().split("NUMBA_ENABLE_CUDASIM=1 python -m pytest", 1)[1]
    assert set(CUDA_TEST_DIRS) <= set(sim.split("&&")[0].split())
    for folder in CUDA_TEST_DIRS:
        assert list((ROOT / folder).glob("test_*.py")), folder
