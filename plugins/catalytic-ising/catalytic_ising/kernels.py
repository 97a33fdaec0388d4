"""The Monte Carlo kernels: one ``@njit`` twin and one ``@cuda.jit`` twin per step.

Both backends make the same decisions bit for bit: the random number of site ``i`` in
sweep ``t`` is a hash of ``(seed, t, i)`` (:func:`uniform`, integer arithmetic only), and
the acceptance probabilities are looked up in a table computed once on the host, so no
``exp`` is evaluated on the device. Within a sweep the sites are updated one colour
class at a time (a proper colouring: no two sites of one class are neighbours), so every
site of a class can be updated at once without changing the result.

Two kernel pairs make the same updates. The general one (:func:`sweeps_cpu`) takes any
stencil, mask and colouring through catalytic's neighbour arithmetic and visits every
site in each colour pass. The row one (:func:`sweeps_rows`) is for the von Neumann
stencil in one to three dimensions, the lattice most runs use: it walks the lattice a
row (the last, contiguous axis) at a time, finds the neighbour rows once per row, visits
only the row's sites of the current colour (every second one), and compares the hash's
53 bits with an integer threshold (:func:`thresholds`) instead of a double.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import njit, prange

from catalytic.kernels.neighbors import neighbor

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _uniform_source(seed, step, i):
    """A uniform double in [0, 1) from the SplitMix64 finaliser of (seed, step, i)."""
    x = (np.uint64(seed) * _GOLDEN) ^ (np.uint64(step) * _MIX1) ^ (np.uint64(i) * _MIX2)
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return np.float64(x >> np.uint64(11)) * (1.0 / 9007199254740992.0)


uniform = njit(cache=True, nogil=True)(_uniform_source)


def _key_source(seed, step):
    """The sweep's part of the hash: ``uniform(seed, step, i)`` is
    ``_bits(_key(seed, step), i) * 2**-53``."""
    return (np.uint64(seed) * _GOLDEN) ^ (np.uint64(step) * _MIX1)


def _bits_source(key, i):
    """The 53 bits behind :func:`uniform` of site ``i``, as an int64."""
    x = np.uint64(key) ^ (np.uint64(i) * _MIX2)
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    x ^= x >> np.uint64(31)
    return np.int64(x >> np.uint64(11))


def thresholds(table):
    """The integer twin of an acceptance ``table`` (flattened): ``u < p`` exactly when
    ``bits < ceil(p * 2**53)``, for ``u = bits * 2**-53`` with ``bits`` below 2**53
    (both sides scale by a power of two, so exactly)."""
    return np.ceil(np.asarray(table, dtype=np.float64).reshape(-1) * 2.0 ** 53).astype(np.int64)


def _row_source(r, lead, row_strides, periodic_lead, width, zero, c):
    """Row ``r`` (a site of every leading axis, the last axis' sites in a row of
    ``width``): the first column of colour ``c`` (0 or 1: parity of the coordinate sum)
    and the flat starts of its neighbour rows along the leading axes, ``zero`` (a row of
    zero spins) where there is none. Up to two leading axes (four neighbour rows)."""
    U = np.uint64
    parity = U(0)
    b0, b1, b2, b3 = zero, zero, zero, zero
    for a in range(lead.shape[0]):
        n_a = lead[a]
        x = (r // row_strides[a]) % n_a
        parity += x
        if x > U(0):
            lo = (r - row_strides[a]) * width
        elif periodic_lead[a]:
            lo = (r + (n_a - U(1)) * row_strides[a]) * width
        else:
            lo = zero
        if x + U(1) < n_a:
            hi = (r + row_strides[a]) * width
        elif periodic_lead[a]:
            hi = (r - x * row_strides[a]) * width
        else:
            hi = zero
        if a == 0:
            b0, b1 = lo, hi
        else:
            b2, b3 = lo, hi
    return (parity + U(c)) & U(1), b0, b1, b2, b3


def _update_source(spins, i, h, bits, thr, k, heatbath):
    """Update site ``i`` (uint64) with neighbour sum ``h`` and random ``bits``
    (:func:`_bits_source`): the rule of :func:`sweeps_cpu` with the threshold table
    ``thr`` (:func:`thresholds`); a blocked site (spin 0) stays 0."""
    s = np.int64(spins[i])
    if heatbath:
        q = np.uint64(h + k)
    else:
        q = np.uint64(((s + 1) >> 1) * (2 * k + 1) + s * h + k)
    # 1 where bits < thr[q], else 0, by arithmetic (both are below 2**53): a branch on
    # it, which a compiler may choose, is mispredicted half the time
    below = np.int64((np.uint64(bits) - np.uint64(thr[q])) >> np.uint64(63))
    if heatbath:
        spins[i] = (2 * below - 1) * s * s
    else:
        spins[i] = (1 - 2 * below) * s


def _sweep_row_source(spins, row, j, width, wrap, zero, b0, b1, b2, b3, key, thr, k,
                      heatbath):
    """Update sites ``j, j + 2, ...`` of the row that starts at ``row``, whose neighbour
    rows start at ``b0 .. b3`` (see :func:`_row_source`)."""
    last = width - np.uint64(1)
    first = j
    while j < width:  # the row's ends, where the last axis wraps or stops
        i = row + j
        left = i - np.uint64(1) if j > np.uint64(0) else (row + last if wrap else zero)
        right = i + np.uint64(1) if j < last else (row if wrap else zero)
        h = (np.int64(spins[b0 + j]) + spins[b1 + j] + spins[b2 + j] + spins[b3 + j]
             + spins[left] + spins[right])
        _update(spins, i, h, _bits(key, i), thr, k, heatbath)
        j += np.uint64(2)
        if j == first + np.uint64(2):
            while j < last:  # the row's inside
                i = row + j
                h = (np.int64(spins[b0 + j]) + spins[b1 + j] + spins[b2 + j] + spins[b3 + j]
                     + spins[i - np.uint64(1)] + spins[i + np.uint64(1)])
                _update(spins, i, h, _bits(key, i), thr, k, heatbath)
                j += np.uint64(2)


_inline = njit(cache=True, nogil=True, inline="always")
_key, _bits, _row, _update = (_inline(f) for f in (_key_source, _bits_source, _row_source,
                                                    _update_source))
_sweep_row = _inline(_sweep_row_source)


@njit(cache=True, nogil=True)
def local_sum(spins, i, shape, strides, periodic, offsets, open_, dedupe):
    """Sum of the spins of site ``i``'s neighbour set (duplicates from short periodic
    axes counted once, as catalytic's neighbour set does)."""
    total = 0
    for k in range(offsets.shape[0]):
        j = neighbor(i, k, shape, strides, periodic, offsets, open_)
        if j < 0:
            continue
        if dedupe:
            if j == i:
                continue
            seen = False
            for q in range(k):
                if neighbor(i, q, shape, strides, periodic, offsets, open_) == j:
                    seen = True
                    break
            if seen:
                continue
        total += spins[j]
    return total


@njit(cache=True, nogil=True, parallel=True)
def sweeps_cpu(spins, colour, ncolours, shape, strides, periodic, offsets, open_, dedupe,
               table, heatbath, seed, start, count):
    """``count`` sweeps (numbered from ``start``) in place. ``table``: Metropolis
    acceptance ``table[(s + 1) // 2, s * h + k]`` for spin ``s`` and neighbour sum
    ``h``, or heat-bath ``P(up) = table[0, h + k]``, with ``k`` the stencil size."""
    n = spins.shape[0]
    k = offsets.shape[0]
    for t in range(start, start + count):
        for c in range(ncolours):
            for p in prange(n):
                i = np.int64(p)  # a prange index may be unsigned; the lattice maths is int64
                s = spins[i]
                if colour[i] != c or s == 0:
                    continue
                h = local_sum(spins, i, shape, strides, periodic, offsets, open_, dedupe)
                u = uniform(seed, t, i)
                if heatbath:
                    spins[i] = 1 if u < table[0, h + k] else -1
                elif u < table[(s + 1) // 2, s * h + k]:
                    spins[i] = -s


@njit(cache=True, nogil=True, parallel=True)
def sweeps_rows(spins, lead, row_strides, periodic_lead, width, wrap, thr, k, heatbath, seed,
                start, count):
    """:func:`sweeps_cpu` for the von Neumann stencil in one to three dimensions, a row
    at a time: the same spins. ``spins``: the sites, then one row (``width`` sites, the
    last axis) of zeros that stands for every missing neighbour; ``lead``,
    ``row_strides``, ``periodic_lead`` (uint64, uint64, uint8): the leading axes' sizes,
    C-order strides in rows and wrapping (an axis of length 1 or 2 does not wrap: its
    one neighbour is counted once); ``wrap``: whether the last axis wraps; ``thr``: the
    table's :func:`thresholds`; ``k``: the stencil size."""
    width = np.uint64(width)
    rows = np.uint64(spins.shape[0]) // width - np.uint64(1)
    zero = rows * width
    for t in range(start, start + count):
        key = _key(seed, t)
        for c in range(2):
            for p in prange(rows):
                r = np.uint64(p)
                j, b0, b1, b2, b3 = _row(r, lead, row_strides, periodic_lead, width, zero, c)
                _sweep_row(spins, r * width, j, width, wrap, zero, b0, b1, b2, b3, key, thr, k,
                           heatbath)


@njit(cache=True, nogil=True, parallel=True)
def bond_sums(spins, shape, strides, periodic, offsets, open_, dedupe, out):
    """``out[i] = spins[i] * local_sum(i)``: twice site i's share of the bond energy."""
    for p in prange(spins.shape[0]):
        i = np.int64(p)
        out[i] = spins[i] * local_sum(spins, i, shape, strides, periodic, offsets, open_,
                                      dedupe) if spins[i] != 0 else 0


def sweeps_cuda(spins, colour, ncolours, shape, strides, periodic, offsets, open_, dedupe,
                table, heatbath, seed, start, count):
    """:func:`sweeps_cpu` on the device: one launch per colour class per sweep; the
    spins stay on the device between launches. Returns the new spins (host)."""
    from numba import cuda

    from catalytic_ising.cuda_kernels import colour_pass as kernel

    d = {name: cuda.to_device(a) for name, a in (
        ("spins", spins), ("colour", colour), ("shape", shape), ("strides", strides),
        ("periodic", periodic), ("offsets", offsets), ("open_", open_), ("table", table))}
    n = spins.shape[0]
    threads = 128
    blocks = max(1, (n + threads - 1) // threads)
    with warnings.catch_warnings():
        # the CUDA simulator runs the hash on NumPy scalars, which warn as they wrap
        # modulo 2**64 (on purpose; a GPU wraps silently)
        warnings.simplefilter("ignore", RuntimeWarning)
        for t in range(start, start + count):
            for c in range(ncolours):
                kernel[blocks, threads](d["spins"], d["colour"], np.uint8(c), d["shape"],
                                        d["strides"], d["periodic"], d["offsets"],
                                        d["open_"], dedupe, d["table"], heatbath,
                                        np.uint64(seed), np.uint64(t))
    return d["spins"].copy_to_host()


def sweeps_rows_cuda(spins, lead, row_strides, periodic_lead, width, wrap, thr, k, heatbath,
                     seed, start, count):
    """:func:`sweeps_rows` on the device: one launch per colour per sweep, one thread per
    pair of neighbouring sites in a row. Returns the new spins (host, padded)."""
    from numba import cuda

    from catalytic_ising.cuda_kernels import row_pass as kernel

    d = [cuda.to_device(a) for a in (spins, lead, row_strides, periodic_lead, thr)]
    half = (width + 1) // 2
    pairs = (spins.shape[0] // width - 1) * half
    threads = 128
    blocks = max(1, (pairs + threads - 1) // threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # as in sweeps_cuda
        for t in range(start, start + count):
            for c in range(2):
                kernel[blocks, threads](*d[:4], np.uint64(width), wrap, d[4], k, heatbath,
                                        np.uint64(seed), np.uint64(t), np.uint64(c),
                                        np.uint64(half))
    return d[0].copy_to_host()


def sweeps_numpy(spins, colour, ncolours, nbr, table, heatbath, seed, start, count):
    """The reference: the same updates with NumPy over a colour class at a time.
    ``nbr`` is the (n, k) neighbour table (-1 for none) and ``uniform`` is evaluated
    through its Python source, vectorised."""
    k = nbr.shape[1]
    idx = np.arange(spins.shape[0], dtype=np.uint64)
    padded = np.append(spins, np.int8(0))  # index -1 reads a 0 spin
    for t in range(start, start + count):
        u_all = _uniform_source(np.uint64(seed), np.uint64(t), idx)
        for c in range(ncolours):
            sites = np.flatnonzero((colour == c) & (padded[:-1] != 0))
            h = padded[nbr[sites]].astype(np.int64).sum(axis=1)
            s = padded[sites].astype(np.int64)
            u = u_all[sites]
            if heatbath:
                padded[sites] = np.where(u < table[0, h + k], 1, -1)
            else:
                flip = u < table[(s + 1) // 2, s * h + k]
                padded[sites[flip]] = -s[flip]
    return padded[:-1].copy()
