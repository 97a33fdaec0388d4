"""The house's rules that import-linter cannot see (the README's test command runs
``lint-imports`` on the contracts in pyproject.toml): imports made at run time from a
string, and reaches into ``sys.modules``."""

from __future__ import annotations

import ast
from pathlib import Path

import catalytic as cat
import catalytic.engine as engine_mod
import catalytic.hookspecs as hookspecs

PACKAGE = Path(cat.__file__).resolve().parent


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).as_posix(), ast.parse(path.read_text())


def _dynamic_imports(tree):
    """(line, enclosing function) of each call of importlib.import_module or __import__."""
    found = []

    def visit(node, where):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef,
                                                     ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name in ("import_module", "__import__"):
                    found.append((child.lineno, where))
            visit(child, inner)

    visit(tree, None)
    return found


def test_no_module_reaches_into_sys_modules():
    reaches = [f"{path}:{node.lineno}" for path, tree in _sources() for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr == "modules"
               and isinstance(node.value, ast.Name) and node.value.id == "sys"]
    assert reaches == []


def test_only_the_engine_imports_modules_by_name_and_only_its_built_in_plugins():
    """The engine registers the built-in plugins from BUILTIN_PLUGINS (module names); the
    peer benchmarks import the peers they compare with, if installed. Nothing else
    imports a module from a string, so import-linter sees every other import."""
    calls = {(path, where) for path, tree in _sources() for _, where in _dynamic_imports(tree)}
    assert calls == {("catalytic/engine.py", "_register_builtins"),
                     (_bench_path(), "_peer")}
    named = [m for _, m, _ in engine_mod.BUILTIN_PLUGINS]
    assert named[0] == "catalytic.catalogue" and all(
        m.startswith("catalytic.backends.") for m in named[1:])


def _bench_path():
    (bench,) = [p for p in PACKAGE.rglob("bench.py")]
    return bench.relative_to(PACKAGE.parent).as_posix()


def test_the_plugin_api_is_one_module():
    assert cat.hookimpl is hookspecs.hookimpl and engine_mod.hookimpl is hookspecs.hookimpl
    assert hookspecs.hookspec.project_name == hookspecs.hookimpl.project_name == "catalytic"


def test_the_former_kernel_api_name_serves_plugins_built_against_it():
    """``catalytic.kernels.lattice`` was the neighbour API's name in 0.1; installed plugins
    import it (catalytic itself imports ``catalytic.kernels.neighbors``)."""
    from catalytic.kernels import lattice, neighbors

    assert (lattice.neighbor, lattice.neighbors_into, lattice.c_strides,
            lattice.cuda_functions) == (neighbors.neighbor, neighbors.neighbors_into,
                                        neighbors.c_strides, neighbors.cuda_functions)
