"""The module doctests of catalytic (run by ``--doctest-modules``) leave the process as
they found it: an example that registers a plugin uses an engine of its own, and one
that profiles resets the profiler after it (:mod:`tests.support.state` lists what is
checked). The README's examples are checked the same way in ``test_readme.py``."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import catalytic
from tests.support.state import changes, process_state


def _modules():
    """Every module of the package, imported (as ``--doctest-modules`` imports them)."""
    yield catalytic
    for info in pkgutil.walk_packages(catalytic.__path__, "catalytic."):
        yield importlib.import_module(info.name)


def test_module_doctests_leave_no_process_wide_state():
    finder = doctest.DocTestFinder(exclude_empty=True)
    start = process_state()
    left = {}
    try:
        for module in _modules():
            tests = [t for t in finder.find(module, module.__name__) if t.examples]
            if not tests:
                continue
            before = process_state()
            for test in tests:
                # whether the examples pass is --doctest-modules' business; here only
                # what they leave behind
                doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(
                    test, out=lambda _text: None)
            changed = changes(before, process_state())
            if changed:
                left[module.__name__] = changed
    finally:
        _restore(start)
    assert not left, f"doctests that leave process-wide state behind: {left}"


def _restore(state):
    """Undo what a leaking doctest left (plugins, the profiler, Numba's threads), so
    that one failure here does not spread to the tests after it."""
    import numba

    import catalytic as cat
    import catalytic.engine as engine_mod

    engine_mod._engine = state["engine"]
    eng = cat.get_engine()
    for name in set(eng.plugin_names()) - set(state["plugins"] or ()):
        eng.unregister_plugin(name)
    prof = cat.get_profiler()
    if not state["profiler enabled"]:
        prof.disable()
    if not state["profiler records"]:
        prof.reset()
    numba.set_num_threads(state["numba threads"])
