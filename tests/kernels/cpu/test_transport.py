"""The lattice multigrid of ``kernels/cpu/transport.py`` against dense matrices built
here: the operator a level applies, each coarse level the Galerkin product
``P^T A P`` of the level above (``P`` the blocks of 2 sites per axis, built from
coordinates here), and the V-cycle a symmetric positive definite preconditioner."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from catalytic.kernels.cpu import transport as K


def _dense_op(shape, periodic, offs, c, diag):
    """The operator ``diag_i x_i - sum_k c[k, i] x[i + offs[k]]`` as a dense matrix,
    neighbours found from coordinates."""
    n = int(np.prod(shape))
    A = np.diag(diag.astype(float))
    for i in range(n):
        x = np.array(np.unravel_index(i, shape))
        for k, o in enumerate(offs):
            if c[k, i] == 0:
                continue
            y = x + o
            for a in range(len(shape)):
                if periodic[a]:
                    y[a] %= shape[a]
            assert all(0 <= y[a] < shape[a] for a in range(len(shape)))
            A[i, np.ravel_multi_index(tuple(y), shape)] -= c[k, i]
    return A


def _blocks(fshape, cshape):
    n, m = int(np.prod(fshape)), int(np.prod(cshape))
    P = np.zeros((n, m))
    for i in range(n):
        x = np.array(np.unravel_index(i, fshape)) // 2
        P[i, np.ravel_multi_index(tuple(x), cshape)] = 1.0
    return P


def _operator(shape, periodic, offs, rng, solved=0.8):
    """A random resistor network on the lattice: symmetric couplings between solved
    sites, some grounded."""
    n = int(np.prod(shape))
    on = rng.random(n) < solved
    c = np.zeros((len(offs), n))
    index = {tuple(o): k for k, o in enumerate(offs.tolist())}
    for i in range(n):
        x = np.array(np.unravel_index(i, shape))
        for k, o in enumerate(offs):
            y = x + o
            ok = True
            for a in range(len(shape)):
                if periodic[a]:
                    y[a] %= shape[a]
                elif not 0 <= y[a] < shape[a]:
                    ok = False
            if not ok:
                continue
            j = int(np.ravel_multi_index(tuple(y), shape))
            if i < j and on[i] and on[j] and rng.random() < 0.9:
                v = rng.uniform(0.1, 5.0)
                c[k, i] = v
                c[index[tuple(-o)], j] = v
    ground = np.where(on & (rng.random(n) < 0.2), rng.uniform(0.5, 2.0, n), 0.0)
    ground[np.flatnonzero(on)[:1]] = 1.0  # every component needs no ground: not singular
    # a solved site with no coupling at all is outside the solve: ground it
    lone = on & (c.sum(axis=0) == 0)
    ground[lone] = 1.0
    return c, ground


CASES = [((7, 5), (True, False), "vn"), ((6, 9), (False, True), "moore"),
         ((5, 3, 4), (True, True, False), "vn"), ((3, 5, 3), (True, False, True), "moore"),
         ((9,), (True,), "vn"), ((2, 3), (True, True), "moore")]


def _offs(d, kind):
    steps = [o for o in itertools.product((-1, 0, 1), repeat=d) if any(o)]
    if kind == "vn":
        steps = [o for o in steps if sum(map(abs, o)) == 1]
    return np.array(steps, dtype=np.int64)


@pytest.mark.parametrize("shape, periodic, kind", CASES)
def test_every_level_is_the_galerkin_product_of_the_one_above(shape, periodic, kind):
    rng = np.random.default_rng(sum(shape))
    offs = _offs(len(shape), kind)
    c, ground = _operator(shape, periodic, offs, rng)
    h = K.hierarchy(shape, periodic, offs, c, ground, coarsest=1)
    assert len(h.shapes) > 1
    A = _dense_op(shape, periodic, offs, c, ground + c.sum(axis=0))
    x = rng.standard_normal(A.shape[0])
    np.testing.assert_allclose(K.apply(h, 0, x), A @ x, rtol=1e-12, atol=1e-12)
    for level in range(1, len(h.shapes)):
        P = _blocks(h.shapes[level - 1], h.shapes[level])
        want = P.T @ A @ P
        A = _dense_op(h.shapes[level], periodic, h.offs[level], h.c[level], h.diag[level])
        keep = h.diag[level] > 0  # blocks without a solved site are outside the solve
        np.testing.assert_allclose(A[np.ix_(keep, keep)], want[np.ix_(keep, keep)],
                                   rtol=1e-12, atol=1e-12)
        assert not want[~keep].any()


@pytest.mark.parametrize("shape, periodic, kind", CASES)
def test_the_v_cycle_is_symmetric_positive_definite(shape, periodic, kind):
    rng = np.random.default_rng(1 + sum(shape))
    offs = _offs(len(shape), kind)
    c, ground = _operator(shape, periodic, offs, rng)
    h = K.hierarchy(shape, periodic, offs, c, ground, coarsest=2)
    keep = np.flatnonzero(h.diag[0] > 0)
    n = h.diag[0].shape[0]
    M = np.zeros((n, n))
    for j in keep:
        e = np.zeros(n)
        e[j] = 1.0
        M[:, j] = K._cycle(h, 0, e)
    M = M[np.ix_(keep, keep)]
    np.testing.assert_allclose(M, M.T, rtol=1e-10, atol=1e-12)
    assert np.linalg.eigvalsh((M + M.T) / 2).min() > 0
