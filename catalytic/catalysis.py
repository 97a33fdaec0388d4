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
"""

from __future__ import annotations

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


@contextmanager
def borrowed_scratch(lattice, buf: np.ndarray, nbytes: int):
    """Yield ``(scratch, record)``: a uint8 array of ``nbytes`` and a :class:`BorrowRecord`.

    ``scratch`` is a view into ``buf`` when it can be borrowed (see module docstring),
    else fresh memory. The buffer's bytes are restored on exit, also on an exception.
    """
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
