"""Rows of a lattice for the real-space row passes (components, degree).

A row is a line along the last axis; rows are numbered in C order over the other axes.
The row passes keep the current row's coordinates (one division per axis at the
start of a pass, then an odometer step per row) and find a neighbour row with
multiplications only: a division per axis per offset per row cost about a third of a
3-D labelling.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _row_coords(row, shape, c):
    """Write the coordinates of ``row`` (over all axes but the last) into ``c``."""
    for a in range(c.shape[0] - 1, -1, -1):
        c[a] = row % shape[a]
        row //= shape[a]


@njit(cache=True, nogil=True, inline="always")
def _next_row(c, shape):
    """Advance the row coordinates ``c`` by one row (C order)."""
    a = c.shape[0] - 1
    while a >= 0:
        c[a] += 1
        if c[a] < shape[a]:
            return
        c[a] = 0
        a -= 1


@njit(cache=True, nogil=True, inline="always")
def _row_target(c, o, shape, periodic):
    """Row reached by offset ``o`` from the row at coordinates ``c``, with periodic wrap,
    or -1 when it leaves an open axis. A modulo only when a periodic axis wraps."""
    t = 0
    for a in range(c.shape[0]):
        n_a = shape[a]
        x = c[a] + o[a]
        if x < 0 or x >= n_a:
            if periodic[a]:
                x %= n_a
            else:
                return -1
        t = t * n_a + x
    return t


@njit(cache=True, nogil=True)
def _chunk_bounds(nrow, T, t):
    return nrow * t // T, nrow * (t + 1) // T


@njit(cache=True, nogil=True)
def _window(nrow, T, t, s, w):
    """Rows of window ``s`` (``w`` rows each) of chunk ``t`` of ``T``: a call of a row
    kernel does one window of every chunk, so its host function can return to Python
    between calls while the chunks (and the work each thread does) stay those of one
    whole pass. Returns (chunk start, chunk end, window start, window end)."""
    lo, hi = _chunk_bounds(nrow, T, t)
    a = min(hi, lo + s * w)
    return lo, hi, a, min(hi, a + w)
