"""The reference Euclidean distance transform (the numpy backend's): the passes of the
separable transform, last axis first, each by brute force along its lines.

A pass along axis ``a`` gives site ``q`` the least of ``g(p) + w (p - q)^2`` over the
sites ``p`` of its line, with ``g(p)`` the squared distance so far, or 0 where ``p`` is
one of ``q``'s features (a marked site, or with values one of another value than
``q``'s). The candidates go by displacement ``p - q`` from the most negative (on a
periodic axis the short way round, ``-(n // 2)`` to ``n - n // 2 - 1``), and the first
least one wins: the tie rule ``kernels.cpu.edt`` states, reached here without envelopes.
O(n x the longest axis) time; a pass holds a few arrays of n.
"""

from __future__ import annotations

import numpy as np


def _pass(f, near, keys, marked, flat, axis, n, periodic, w):
    """One pass along ``axis`` (of ``n`` sites) over arrays of the lattice's shape."""
    move = lambda a: np.moveaxis(a, axis, -1)  # noqa: E731
    F, I, M, X = move(f), move(near), move(marked), move(flat)
    K = None if keys is None else move(keys)
    out_f = np.empty_like(F)
    out_i = np.empty_like(I)
    steps = np.arange(-(n // 2), n - n // 2) if periodic else None
    for q in range(n):
        p = (q + steps) % n if periodic else np.arange(n)
        delta = steps if periodic else p - q
        g = F[..., p]
        at = I[..., p]
        if K is not None:
            # a site of another value, or a marked one, is a feature of q: 0 there
            other = (K[..., p] != K[..., q, None]) | M[..., p]
            g = np.where(other, 0.0, g)
            at = np.where(other, X[..., p], at)
        total = g + w * (delta * delta).astype(np.float64)
        best = np.argmin(total, axis=-1)[..., None]  # the first least: lowest displacement
        out_f[..., q] = np.take_along_axis(total, best, axis=-1)[..., 0]
        out_i[..., q] = np.take_along_axis(at, best, axis=-1)[..., 0]
        out_i[..., q] = np.where(np.isinf(out_f[..., q]), -1, out_i[..., q])
    return np.moveaxis(out_f, -1, axis), np.moveaxis(out_i, -1, axis)


def distance_transform(g, marked, keys, spacing, squared, dtype, indices):
    """The transform on geometry ``g`` (arguments as ``catalogue.v_distance_transform``
    gives them)."""
    shape = g.shape
    m = marked.reshape(shape) != 0
    flat = np.arange(g.n_points, dtype=np.int64).reshape(shape)
    f = np.where(m, 0.0, np.inf)
    near = np.where(m, flat, -1)
    k = None if keys is None else keys.reshape(shape)
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] == 0:
            break
        f, near = _pass(f, near, k, m, flat, axis, shape[axis], g.periodic[axis],
                        float(spacing[axis]) ** 2)
    out = (f if squared else np.sqrt(f)).astype(dtype)
    return (out, near) if indices else out


def distance_transform_stack(g, rows, keys, spacing, squared, dtype, indices):
    """:func:`distance_transform` of each row of marked sites (B, n), one by one."""
    return [distance_transform(g, row, keys, spacing, squared, dtype, indices)
            for row in rows]
