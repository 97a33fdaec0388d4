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

Threads
-------
A borrowed buffer holds search state, not its contents, until the call gives it back,
so no other thread may read or borrow those bytes meanwhile. :func:`lend` holds the
buffer's byte range for the whole call (digest before, work, restore, digest after):
a thread asking for an overlapping range waits until it is free. The lock is by
address, so two views of the same memory (``buf`` and ``buf[10:]``) exclude each
other; the holding thread may take its own range again. The engine takes it for every
operation that borrows a buffer, including ``xor_transform(key=None)``, which reads its
key from the lattice's own buffer: a key is never read from bytes that are on loan.
"""

from __future__ import annotations

import threading
import zlib
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

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
    address space; a request waits while another thread holds an overlapping range."""

    def __init__(self):
        self._cond = threading.Condition()
        self._held: list[tuple[int, int, int]] = []  # (lo, hi, thread ident)

    def _blocked(self, lo: int, hi: int, me: int) -> bool:
        return any(owner != me and a < hi and lo < b for a, b, owner in self._held)

    @contextmanager
    def hold(self, lo: int, hi: int):
        me = threading.get_ident()
        entry = (lo, hi, me)
        with self._cond:
            while self._blocked(lo, hi, me):
                self._cond.wait()
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
    own = buf is lattice._aux
    if own:
        restore = lambda: lattice._fill_key(region, 0)  # noqa: E731
        record.method = "own buffer, regenerated from the seed"
    else:
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

        def restore():
            region[:] = np.frombuffer(zlib.decompress(packed), dtype=np.uint8)

    record.borrowed = int(nbytes)
    try:
        yield region, record
    finally:
        restore()
        if isinstance(buf, np.memmap):
            buf.flush()
