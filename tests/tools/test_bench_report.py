"""The benchmark report's "before" column (``catalytic bench --baseline``), from rows
written by hand: no timing involved."""

from __future__ import annotations

import json

import pytest

from catalytic.tools.bench import load_baseline, write_reports


def _row(workload, size, system, seconds, agree=None):
    return {"workload": workload, "size": size, "sites": 64, "system": system,
            "seconds": seconds, "agree": agree, "note": ""}


def test_before_column_from_an_earlier_run(tmp_path):
    old = [_row("components 2-D open", "8x8", "catalytic", 2e-3),
           _row("components 2-D open", "8x8", "cc3d", 1e-3, True),
           _row("gone", "1", "catalytic", 5.0)]
    (tmp_path / "old.json").write_text(json.dumps({"seconds": 12.0, "rows": old}))
    base = load_baseline(tmp_path / "old.json")
    new = [_row("components 2-D open", "8x8", "catalytic", 1e-3),
           _row("components 2-D open", "8x8", "cc3d", 1.5e-3, True),
           _row("components 2-D open", "16x16", "catalytic", 4e-3)]
    write_reports(new, tmp_path / "out", quick=True, seconds=3.0, baseline=base)
    md = (tmp_path / "out" / "benchmarks.md").read_text()
    assert "| before |" in md and "a run of 12 s" in md
    assert "| components 2-D open | 8x8 | catalytic | 1.000 ms |  |  |  | 2.000 ms |" in md
    assert "| components 2-D open | 8x8 | cc3d | 1.500 ms | 1.50 | yes |  | 1.000 ms |" in md
    assert "| components 2-D open | 16x16 | catalytic | 4.000 ms |  |  |  | - |" in md
    assert "gone" not in md
    # without a baseline the column is absent
    write_reports(new, tmp_path / "plain", quick=True, seconds=3.0)
    assert "| before |" not in (tmp_path / "plain" / "benchmarks.md").read_text()


def test_a_file_that_is_no_report_is_refused(tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a benchmarks.json"):
        load_baseline(tmp_path / "x.json")
