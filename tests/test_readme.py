"""Every Python example in the README runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code):
    import catalytic as cat

    eng = cat.get_engine()
    before = set(eng.plugin_names())
    try:
        exec(compile(code, str(README), "exec"), {})
    finally:
        for name in set(eng.plugin_names()) - before:
            eng.unregister_plugin(name)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2
