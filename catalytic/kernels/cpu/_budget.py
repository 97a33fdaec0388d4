"""The interrupt budget of the CPU graph kernels, and allocations done in slices of it.

Interrupts
----------
While an ``@njit`` function runs, the calling thread does not come back to the Python
interpreter, so Python signal handlers (``KeyboardInterrupt`` from Ctrl-C, a ``SIGALRM``
handler that raises) wait until it returns. Every long loop here is therefore
resumable: a kernel call does about ``_BUDGET`` units of work (a unit is about one
neighbour visit or one site scanned; a BFS level, a walk step and a heap pop cost
``_LEVEL_COST`` or ``_HEAP_COST`` more), leaves its position in a small int64 state
array that the host function holds (or, for row passes, takes a window of rows), and
returns; the host function calls it again until the work is done. A pending handler
runs between two calls, so its exception leaves the host function within one call,
and everything the call allocated is freed as it unwinds. The BFS distances, the hop
and weighted searches and their walk-backs, path counting, closeness (a call may stop
inside a search), the catalytic path, every phase of the component labelling and the
fill and copy of the padded arrays work this way; their results do not depend on the
budget, bit for bit.

The budget does not grow with the lattice, so neither does the time of one call (the
measured times are in ``reports/kernel_tuning.md``). Not split: single NumPy calls over
the whole lattice (an allocation, ``count_nonzero``, the index conversion of a returned
path: one memory pass each), and one row of the last axis in the component labelling
(a 1-D lattice is one row). Python runs signal handlers on the main thread only, so
Ctrl-C does not stop a search that another thread (a thread pool) started. An
interrupted call cannot be resumed: calling it again starts from scratch.

Host functions read ``_BUDGET`` (and the costs below) as ``_budget._BUDGET`` at each
call, never a copy, so that a test can shrink it.
"""

from __future__ import annotations

import numpy as np

_INT32_LIMIT = 2**31 - 1
# Constant arguments for calls between kernels: a plain ``0`` or ``False`` is typed as a
# literal and compiles the callee once more per value; NumPy scalars are plain int64/bool.
_ZERO = np.int64(0)
_NO = np.bool_(False)
_YES = np.bool_(True)


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` read-only, as a view when it is writable (the caller's array keeps its
    flags). Numba types a read-only array apart from a writable one, so a kernel's input
    arrays pass through this on their way in: one specialisation whoever the caller is.
    Never for an array the kernel writes."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v

#: Work units one kernel call does before it returns to its host function, so that
#: signal handlers can run (see "Interrupts" above). Read by the host functions at each
#: call, so a test can shrink it; the results do not depend on it.
_BUDGET = 1 << 23
#: Extra units charged per BFS level (or partial level) a call expands, for the level's
#: own bookkeeping: chains of tiny levels (long thin lattices) then come back as often as
#: wide ones.
_LEVEL_COST = 64
#: Units charged per Dijkstra heap pop besides its k neighbour visits (the sifts).
_HEAP_COST = 32


def _segments(nrow, row_len):
    """Cut ``nrow`` rows of ``row_len`` cells into segments of at most ``_BUDGET`` cells
    (whole rows unless they are longer) and group them into kernel calls of about
    ``_BUDGET`` cells, so signal handlers run between calls. Returns the segment length
    and the (first, end) segment range of each call."""
    seg = max(1, min(int(row_len), _BUDGET))
    nseg = nrow * -(-int(row_len) // seg)
    step = max(1, _BUDGET // seg)
    return seg, [(a, min(nseg, a + step)) for a in range(0, nseg, step)]


def _filled(size, value, dtype) -> np.ndarray:
    """``np.full(size, value, dtype)`` filled in slices of ``_BUDGET`` entries (one
    NumPy fill of a 1e9-entry array takes seconds and is not interruptible)."""
    out = np.empty(size, dtype=dtype)
    step = max(_BUDGET, 1)
    for a in range(0, size, step):
        out[a:a + step] = value
    return out


def _arange(start, stop, dtype) -> np.ndarray:
    """``np.arange(start, stop, dtype=dtype)``, in slices of ``_BUDGET`` entries when
    longer."""
    size = stop - start
    step = max(_BUDGET, 1)
    if size <= step:
        return np.arange(start, stop, dtype=dtype)
    out = np.empty(size, dtype=dtype)
    for a in range(0, size, step):
        b = min(size, a + step)
        out[a:b] = np.arange(start + a, start + b, dtype=dtype)
    return out
