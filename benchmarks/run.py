"""The benchmark suite from a checkout: ``python benchmarks/run.py [--quick]`` is
``catalytic bench [--quick] --output reports`` (see :mod:`catalytic.tools.bench`); the peers
install with ``pip install ".[bench]"``."""

from __future__ import annotations

import sys
from pathlib import Path

from catalytic.cli import main

if __name__ == "__main__":
    out = str(Path(__file__).resolve().parents[1] / "reports")
    sys.exit(main(["bench", "--output", out, *sys.argv[1:]]))
