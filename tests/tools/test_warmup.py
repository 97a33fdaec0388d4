"""``catalytic warmup``: the groups compile what they name, and a later process starts
from the warm cache (no compilation of catalytic's kernels)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from catalytic import cli
from catalytic.backends import numba_cpu
from catalytic.tools.warmup import TASKS, warmup


def test_every_group_runs_and_reports(monkeypatch):
    # as on a machine whose other cores are all busy: calls outside warmup would take
    # the one-thread paths
    monkeypatch.setattr(numba_cpu, "_read_free_cpus", lambda: 1)
    monkeypatch.setattr(numba_cpu, "_free_cpus", (-float("inf"), 0))
    lines = []
    done = warmup(progress=lines.append)
    assert [name for name, _ in done] == list(TASKS)
    assert all(seconds >= 0 for _, seconds in done)
    for name in TASKS:
        assert f"compiling {name} ..." in lines
    from catalytic.kernels.cpu import _padded, bfs, components, fields

    # the kernels behind the groups now have compiled signatures in this process
    for kernel in (bfs._bfs_frontiers, components._runs_whole, components._runs_union_inside,
                   _padded._fill_padded, _padded._unpad, fields._rows_kernel):
        assert kernel.signatures, kernel


def test_every_thread_takes_numba_threads_whatever_the_load(monkeypatch):
    import numba

    monkeypatch.setattr(numba_cpu, "_read_free_cpus", lambda: 1)
    monkeypatch.setattr(numba_cpu, "_free_cpus", (-float("inf"), 0))
    assert numba_cpu.free_threads() == 1
    with numba_cpu.every_thread():
        assert numba_cpu.free_threads() == numba.get_num_threads()
        with numba_cpu.every_thread():
            pass
        assert numba_cpu.free_threads() == numba.get_num_threads()
    assert numba_cpu.free_threads() == 1


def test_unknown_group_is_refused():
    with pytest.raises(ValueError, match="unknown warmup groups"):
        warmup(only=["components", "nope"])


def test_cli_prints_progress(capsys):
    assert cli.main(["warmup", "--only", "arrays"]) == 0
    out = capsys.readouterr().out
    assert "compiling arrays ..." in out and "done in" in out


_CHECK = """
import numpy as np, catalytic as cat
from numba.core import event
compiled = []
class Listen(event.Listener):
    def on_start(self, ev):
        pass
    def on_end(self, ev):
        fn = ev.data["dispatcher"].py_func
        if fn.__module__.startswith("catalytic"):
            compiled.append(fn.__qualname__)
event.register("numba:compile", Listen())
rng = np.random.default_rng(1)
cat.Lattice(shape=(50, 60), mask=rng.random((50, 60)) < 0.6).connected_components(
    backend="numba-cpu")
print("COMPILED", sorted(set(compiled)))
"""


def test_a_later_process_compiles_nothing(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    cold = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True,
                          text=True, check=True)
    assert "COMPILED []" not in cold.stdout  # an empty cache compiles: the check can fail
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "warmed")
    subprocess.run([sys.executable, "-m", "catalytic.cli", "warmup", "--only", "components"],
                   env=env, capture_output=True, text=True, check=True)
    warm = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True,
                          text=True, check=True)
    assert "COMPILED []" in warm.stdout, warm.stdout
