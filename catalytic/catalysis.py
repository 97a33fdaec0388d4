"""Borrowing auxiliary ("catalytic") memory and giving it back bit-identical.

An operation that needs ``nbytes`` of scratch may borrow them from an auxiliary buffer
instead of allocating. Using a buffer as scratch destroys its contents, so it can only
be borrowed when its contents have a *short description* that can rebuild them:

* the lattice's own buffer holds its catalytic key, a pure function of the seed: the
  description is the seed, and the bytes are regenerated afterwards;
* a buffer the caller lends (an array or ``numpy.memmap``) is compressed with zlib; when
  the compressed copy is at most half the bytes borrowed, the buffer is used and then
  decompressed back. Incompressible (e.g. random) contents are not touched: the
  operation runs on fresh memory and the record says so.

The engine independently verifies the buffer's digest before and after every call,
also when the call raises.

Process death
-------------
Restoring happens in this process, so if it is killed mid-call (SIGKILL, power loss)
a lent array is simply gone with it, but a lent *writable memory-mapped file* would stay
modified on disk. Before such a file is written, the restore information (position,
length, CRC-32 and the zlib copy) is saved durably in a journal beside it,
``<file>.catalytic-journal.<position>``, which is deleted once the file is restored and
synced. A leftover journal means a call did not finish: lending that file again is
refused until :func:`recover` has written the saved bytes back. A writable map whose
file cannot be named is not borrowed (fresh memory is used instead); copy-on-write
maps (``mode="c"``) never write their file.

Threads
-------
A borrowed buffer holds search state, not its contents, until the call gives it back,
so no other thread may read or borrow those bytes meanwhile. :func:`lend` holds the
buffer's byte range for the whole call (digest before, work, restore, digest after):
a thread asking for an overlapping range waits until it is free. The lock is by
address, so two views of the same memory (``buf`` and ``buf[10:]``) exclude each
other; the holding thread may take its own range again. Waiting threads are served in
order of arrival, so a thread that borrows a buffer in a loop cannot keep another one
waiting for it. The engine takes the lock for every operation that declares a buffer
it borrows or reads (the operation's ``borrows``), including ``xor_transform`` and
``batched.xor_transform`` with the lattice's key, which they read from the lattice's
own buffer: a key is never read from bytes that are on loan.
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import threading
import zlib
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from catalytic.errors import CatalyticError

#: use a lent buffer only if its contents compress to at most this fraction
MAX_COMPRESSED_FRACTION = 0.5


@dataclass
class BorrowRecord:
    """What one borrow did: bytes needed, bytes taken from the buffer, clean bytes held
    to restore it (compressed copy or 0 for seed-regenerated), and how it was restored."""

    needed: int
    borrowed: int = 0
    clean_bytes: int = 0
    method: str = "fresh memory"


def _bytes_of(buf: np.ndarray) -> np.ndarray:
    return buf.reshape(-1).view(np.uint8)


class _RangeLocks:
    """Exclusive, re-entrant locks on byte ranges ``[lo, hi)`` of this process's
    address space, served in order of arrival.

    A request waits while another thread holds an overlapping range, or while an
    earlier request for an overlapping range is still waiting (first come, first
    served: a thread that takes a range again and again cannot starve one that waits
    for it). A thread that already holds a range is not queued behind waiters, which
    may be waiting for it; only other threads' held ranges stop it.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._held: list[tuple[int, int, int]] = []  # (lo, hi, thread ident)
        self._waiting: list[tuple[int, int, int, int]] = []  # (ticket, lo, hi, ident)
        self._tickets = itertools.count()

    def _blocked(self, lo: int, hi: int, me: int, ticket: int | None) -> bool:
        if any(owner != me and a < hi and lo < b for a, b, owner in self._held):
            return True
        return ticket is not None and any(
            t < ticket and a < hi and lo < b for t, a, b, _ in self._waiting)

    def waiting(self) -> int:
        """How many requests are waiting now."""
        with self._cond:
            return len(self._waiting)

    @contextmanager
    def hold(self, lo: int, hi: int):
        me = threading.get_ident()
        entry = (lo, hi, me)
        with self._cond:
            holding = any(owner == me for _, _, owner in self._held)
            ticket = None if holding else next(self._tickets)
            if self._blocked(lo, hi, me, ticket):
                queued = (ticket, lo, hi, me)
                self._waiting.append(queued)
                try:
                    while self._blocked(lo, hi, me, ticket):
                        self._cond.wait()
                finally:
                    self._waiting.remove(queued)
                    # (interrupted: the requests queued behind this one may go now)
                    self._cond.notify_all()
            self._held.append(entry)
        try:
            yield
        finally:
            with self._cond:
                self._held.remove(entry)
                self._cond.notify_all()


_ranges = _RangeLocks()


@contextmanager
def lend(buf: np.ndarray):
    """Hold ``buf``'s bytes for this thread until the block ends (see "Threads" above).

    Examples
    --------
    >>> import numpy as np
    >>> buf = np.zeros(16, np.uint8)
    >>> with lend(buf), lend(buf[4:]):   # the same thread may take it again
    ...     buf[0] = 1
    >>> int(buf[0])
    1
    """
    if buf.nbytes == 0:
        yield
        return
    lo = buf.__array_interface__["data"][0]
    with _ranges.hold(lo, lo + buf.nbytes):
        yield


@contextmanager
def borrowed_scratch(lattice, buf: np.ndarray, nbytes: int):
    """Yield ``(scratch, record)``: a uint8 array of ``nbytes`` and a :class:`BorrowRecord`.

    ``scratch`` is a view into ``buf`` when it can be borrowed (see module docstring),
    else fresh memory. The buffer's bytes are restored on exit, also on an exception.
    The buffer is held (:func:`lend`) for the whole block.
    """
    with lend(buf):
        with _borrowed_scratch(lattice, buf, nbytes) as got:
            yield got
            lattice.record_borrow(got[1])  # the search ended: its record is the thread's


@contextmanager
def _borrowed_scratch(lattice, buf: np.ndarray, nbytes: int):
    record = BorrowRecord(needed=int(nbytes))
    raw = _bytes_of(buf)
    if raw.size < nbytes or nbytes == 0:
        record.method = (
            f"fresh memory (buffer has {raw.size} bytes, operation needs {nbytes})"
        )
        yield np.empty(nbytes, dtype=np.uint8), record
        return
    region = raw[:nbytes]
    own = buf is lattice.key_buffer
    journal = None
    if own:
        restore = lambda: lattice.fill_key(region, 0)  # noqa: E731
        record.method = "own buffer, regenerated from the seed"
    else:
        backing = file_backing(region)
        if isinstance(backing, str):
            record.method = f"fresh memory ({backing})"
            yield np.empty(nbytes, dtype=np.uint8), record
            return
        packed = zlib.compress(region, 1)
        if len(packed) > MAX_COMPRESSED_FRACTION * nbytes:
            record.method = (
                f"fresh memory (lent contents incompressible: {len(packed)} of {nbytes} bytes)"
            )
            del packed
            yield np.empty(nbytes, dtype=np.uint8), record
            return
        record.clean_bytes = len(packed)
        record.method = f"lent buffer, restored from a {len(packed)}-byte zlib copy"
        if backing is not None:
            journal = _write_journal(*backing, nbytes, packed, zlib.crc32(region))
            record.method += f" (journalled in {os.path.basename(journal)})"

        def restore():
            region[:] = np.frombuffer(zlib.decompress(packed), dtype=np.uint8)

    record.borrowed = int(nbytes)
    try:
        yield region, record
    finally:
        restore()
        if isinstance(buf, np.memmap):
            buf.flush()
        if journal is not None:
            _drop_journal(journal)


# -- lent memory-mapped files: a journal beside the file -----------------------------------
JOURNAL_SUFFIX = ".catalytic-journal"
_FORMAT = "catalytic-journal-1"
_active_journals: set = set()
_journal_lock = threading.Lock()


def file_backing(arr: np.ndarray):
    """Where a lent array's bytes live on disk.

    Returns None for ordinary memory (and copy-on-write maps, whose writes never reach
    the file), ``(path, position)`` for a writable ``numpy.memmap`` (or a view of one):
    the file and the byte position of ``arr``'s first byte in it; or a string saying why
    the array cannot be journalled (a writable map of an unnamed file).
    """
    mm_array = None
    obj = arr
    while obj is not None:
        if isinstance(obj, np.memmap) and getattr(obj, "_mmap", None) is not None:
            mm_array = obj
            break
        if isinstance(obj, mmap.mmap):
            return "a writable mapping of an unnamed file cannot be journalled"
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
    if mm_array is None or mm_array.mode == "c":
        return None
    if not mm_array.filename:
        return "a writable mapping of an unnamed file cannot be journalled"
    start = np.frombuffer(mm_array._mmap, dtype=np.uint8).__array_interface__["data"][0]
    mapped_from = mm_array.offset - mm_array.offset % mmap.ALLOCATIONGRANULARITY
    position = mapped_from + arr.__array_interface__["data"][0] - start
    return os.path.abspath(mm_array.filename), int(position)


def journals(path) -> list[str]:
    """Journal files left beside ``path`` (each one a call that did not finish)."""
    path = os.path.abspath(os.fspath(path))
    folder, name = os.path.split(path)
    prefix = name + JOURNAL_SUFFIX
    try:
        entries = os.listdir(folder or ".")
    except OSError:
        return []
    return sorted(os.path.join(folder, e) for e in entries
                  if e.startswith(prefix) and not e.endswith(".tmp"))


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not every platform opens directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_journal(path: str, position: int, length: int, packed: bytes, crc: int) -> str:
    """Write (durably) what restores ``path[position:position + length]``, before the
    bytes are lent; refuse when an earlier call left a journal for this file."""
    name = f"{path}{JOURNAL_SUFFIX}.{position}"
    with _journal_lock:
        stale = [j for j in journals(path) if j not in _active_journals]
        if stale:
            raise CatalyticError(
                f"{path!r} has a journal from a catalytic call that did not finish "
                f"({os.path.basename(stale[0])}): the process was killed while the file "
                "was lent, or another process has it lent now. Restore the file with "
                f"catalytic.catalysis.recover({path!r}) before lending it again"
            )
        if name in _active_journals:
            raise CatalyticError(f"bytes from position {position} of {path!r} are already lent")
        header = json.dumps({"format": _FORMAT, "file": path, "position": position,
                             "length": int(length), "crc32": int(crc), "pid": os.getpid(),
                             "compressed": len(packed)}).encode()
        tmp = name + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(header + b"\n")
            fh.write(packed)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, name)
        _fsync_dir(os.path.dirname(name))
        _active_journals.add(name)
    return name


def _drop_journal(name: str) -> None:
    with _journal_lock:
        os.remove(name)
        _active_journals.discard(name)
        _fsync_dir(os.path.dirname(name))


def recover(path) -> int:
    """Restore a memory-mapped file lent to a call that never finished.

    A writable ``numpy.memmap`` lent as ``auxiliary_memory`` holds search state on disk
    while the call runs. Before writing it, the engine saves what restores it in a
    journal beside the file (``<file>.catalytic-journal.<position>``) and deletes the
    journal once the file is restored and synced. If the process is killed in between,
    the journal stays, lending the file again is refused, and this function writes the
    saved bytes back, checks them, and removes the journal. Run it with no process
    using the file.

    Returns
    -------
    int
        The number of journals applied (0 when the file has none).

    Raises
    ------
    CatalyticError
        A journal is damaged or names another file (it is left in place).

    Examples
    --------
    >>> import catalytic.catalysis as cc, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "scratch.bin")
    >>> open(path, "wb").close()
    >>> cc.recover(path)
    0
    """
    applied = 0
    path = os.path.abspath(os.fspath(path))
    for name in journals(path):
        with open(name, "rb") as fh:
            blob = fh.read()
        try:
            head, packed = blob.split(b"\n", 1)
            meta = json.loads(head)
            if meta.get("format") != _FORMAT or meta["file"] != path:
                raise ValueError(f"journal is for {meta.get('file')!r}, not {path!r}")
            data = zlib.decompress(packed)
            if len(data) != meta["length"] or zlib.crc32(data) != meta["crc32"]:
                raise ValueError("saved bytes fail their length or CRC check")
        except (ValueError, KeyError, zlib.error) as err:
            raise CatalyticError(f"journal {name!r} cannot be applied: {err}") from err
        with open(path, "r+b") as fh:
            fh.seek(meta["position"])
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            fh.seek(meta["position"])
            if zlib.crc32(fh.read(len(data))) != meta["crc32"]:
                raise CatalyticError(f"{path!r} did not read back as written from {name!r}")
        os.remove(name)
        _fsync_dir(os.path.dirname(name))
        applied += 1
    return applied
