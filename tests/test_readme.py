"""Every Python example in the README runs, and prints what the README shows.

The examples are written as interactive sessions (``>>>``); each block runs as a
doctest, so a shown output that drifts from the code fails here, and one that leaves
process-wide state behind (a plugin on the shared engine, profiler records) fails too.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from tests.support.state import changes, process_state

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def run_block(code: str, name: str) -> str:
    """Run one README block as a doctest; return the failure report ('' if it passed)."""
    test = doctest.DocTestParser().get_doctest(code, {}, name, str(README), 0)
    out = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test, out=out.append, clear_globs=True)
    return "".join(out)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_shows_its_real_output(code):
    import catalytic as cat

    assert ">>>" in code, "README python blocks are written as doctests (>>> prompts)"
    eng = cat.get_engine()
    before = set(eng.plugin_names())
    state = process_state()
    try:
        report = run_block(code, "README")
        left = changes(state, process_state())
    finally:
        for name in set(eng.plugin_names()) - before:
            eng.unregister_plugin(name)
    assert not report, report
    assert not left, f"the example leaves process-wide state behind: {left}"


def test_a_drifted_readme_output_fails():
    """The checker is not a formality: a wrong shown value is reported."""
    assert "Expected:\n    10" in run_block(">>> 4 + 5\n10\n", "drift")
    assert run_block(">>> 4 + 5\n9\n", "ok") == ""


def test_readme_has_examples():
    assert len(BLOCKS) >= 2
