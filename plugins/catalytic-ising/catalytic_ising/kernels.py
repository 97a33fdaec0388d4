"""The Monte Carlo kernels: one ``@njit`` twin and one ``@cuda.jit`` twin per step.

Both backends make the same decisions bit for bit: the random number of site ``i`` in
sweep ``t`` is a hash of ``(seed, t, i)`` (:func:`uniform`, integer arithmetic only), and
the acceptance probabilities are looked up in a table computed once on the host, so no
``exp`` is evaluated on the device. Within a sweep the sites are updated one colour
class at a time (a proper colouring: no two sites of one class are neighbours), so every
site of a class can be updated at once without changing the result.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import njit, prange

from catalytic.kernels.lattice import neighbor

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
