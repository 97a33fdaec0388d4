"""The journal of lent memory (``catalytic/catalysis.py``): a lent memory-mapped file
survives the death of the process that borrowed it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import catalytic as cat
import catalytic.backends.numpy_backend as numpy_backend
from catalytic import catalysis

SHAPE = (20, 20)


def _file(tmp_path, offset=0, n=1000):
    path = tmp_path / "lent.bin"
    content = (np.arange(offset + n) // 8 % 3).astype(np.uint8)  # compressible
    content.tofile(path)
    return path, content


def test_journal_exists_during_the_call_and_is_gone_after(tmp_path, monkeypatch):
    path, content = _file(tmp_path)
    mm = np.memmap(path, dtype=np.uint8, mode="r+")
    seen = []
    real = numpy_backend._expand

    def spy(g, frontier):
        seen.append(catalysis.journals(path))
        return real(g, frontier)

    monkeypatch.setattr(numpy_backend, "_expand", spy)
    L = cat.Lattice(shape=SHAPE)
    L.find_path_catalytic(0, L.n_points - 1, auxiliary_memory=mm, backend="numpy")
    assert "journalled" in L.last_borrow.method
    assert seen and all(len(j) == 1 for j in seen)
    assert catalysis.journals(path) == []
    np.testing.assert_array_equal(np.fromfile(path, np.uint8), content)


def test_killed_process_leaves_a_journal_that_recover_applies(tmp_path):
    """SIGKILL mid-search: the file stays modified on disk, lending it again is refused,
    and ``recover`` writes the original bytes back."""
    offset = 4096 + 24  # a memmap starting inside the file, not on a page boundary
    path, content = _file(tmp_path, offset=offset)
    child = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        import catalytic as cat
        import catalytic.backends.numpy_backend as nb
        real = nb._expand
        calls = [0]
        def expand(g, frontier):
            calls[0] += 1
            if calls[0] == 5:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(g, frontier)
        nb._expand = expand
        mm = np.memmap({str(path)!r}, dtype=np.uint8, mode="r+", offset={offset})
        L = cat.Lattice(shape={SHAPE})
        L.find_path_catalytic(0, L.n_points - 1, auxiliary_memory=mm[7:], backend="numpy")
    """)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    on_disk = np.fromfile(path, np.uint8)
    assert not np.array_equal(on_disk, content)  # the search state is on disk
    np.testing.assert_array_equal(on_disk[: offset + 7], content[: offset + 7])
    (journal,) = catalysis.journals(path)
    assert journal.endswith(f".{offset + 7}")

    mm = np.memmap(path, dtype=np.uint8, mode="r+")
    L = cat.Lattice(shape=SHAPE)
    with pytest.raises(cat.CatalyticError, match="recover"):
        L.find_path_catalytic(0, L.n_points - 1, auxiliary_memory=mm, backend="numpy")
    np.testing.assert_array_equal(np.fromfile(path, np.uint8), on_disk)  # refused untouched
    del mm

    assert catalysis.recover(path) == 1
    np.testing.assert_array_equal(np.fromfile(path, np.uint8), content)
    assert catalysis.journals(path) == []
    assert catalysis.recover(path) == 0


def test_damaged_journal_is_reported_and_kept(tmp_path):
    path, _ = _file(tmp_path)
    bad = f"{path}{catalysis.JOURNAL_SUFFIX}.0"
    with open(bad, "wb") as fh:
        fh.write(b'{"format": "catalytic-journal-1"}\nnot zlib')
    with pytest.raises(cat.CatalyticError, match="cannot be applied"):
        catalysis.recover(path)
    assert os.path.exists(bad)


def test_copy_on_write_and_unnamed_maps(tmp_path):
    import mmap

    path, content = _file(tmp_path)
    L = cat.Lattice(shape=SHAPE)
    cow = np.memmap(path, dtype=np.uint8, mode="c")
    L.find_path_catalytic(0, L.n_points - 1, auxiliary_memory=cow, backend="numpy")
    assert L.last_borrow.method.startswith("lent buffer") and "journal" not in L.last_borrow.method
    np.testing.assert_array_equal(np.fromfile(path, np.uint8), content)
    with open(path, "r+b") as fh:
        m = mmap.mmap(fh.fileno(), 0)
        arr = np.frombuffer(m, dtype=np.uint8)
        L.find_path_catalytic(0, L.n_points - 1, auxiliary_memory=arr, backend="numpy")
        assert L.last_borrow.method.startswith("fresh memory (a writable mapping")
        del arr
        m.close()
    np.testing.assert_array_equal(np.fromfile(path, np.uint8), content)


@pytest.mark.parametrize("backend", ["numpy", "numba-cpu"])
def test_journal_on_every_backend(tmp_path, backend):
    path, content = _file(tmp_path)
    mm = np.memmap(path, dtype=np.uint8, mode="r+")
    L = cat.Lattice(shape=SHAPE)
    want = L.find_shortest_path(0, L.n_points - 1)
    got = L.find_path_catalytic(0, L.n_points - 1, auxiliary_memory=mm, backend=backend)
    assert got.path.tolist() == want.path.tolist()
    assert "journalled" in L.last_borrow.method
    assert catalysis.journals(path) == []
    np.testing.assert_array_equal(np.fromfile(path, np.uint8), content)


def test_recover_command_line(tmp_path, capsys):
    from catalytic.cli import main

    path, content = _file(tmp_path)
    with open(path, "r+b") as fh:  # what a killed call leaves: state on disk + a journal
        fh.write(b"\x07" * 100)
    import zlib

    name = catalysis._write_journal(str(path), 0, 100, zlib.compress(content[:100].tobytes()),
                                    zlib.crc32(content[:100].tobytes()))
    catalysis._active_journals.discard(name)  # as in a new process
    assert main(["recover", str(path)]) == 0
    assert "restored from 1 journal" in capsys.readouterr().out
    np.testing.assert_array_equal(np.fromfile(path, np.uint8), content)
    assert main(["recover", str(path)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_recover_of_a_missing_file_fails(tmp_path):
    """A mistyped path is not 'nothing to do': exit 1 naming it, the other paths are
    still recovered (as a user runs it: a subprocess)."""
    path, content = _file(tmp_path)
    missing = tmp_path / "no" / "such.bin"
    res = subprocess.run([sys.executable, "-m", "catalytic.cli", "recover", str(missing)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and f"{missing}: no such file" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "catalytic.cli", "recover", str(tmp_path),
                          str(path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "is not a file" in res.stderr
    assert f"{path}: no journal, nothing to do" in res.stdout
